"""Human wording for diagnoses: byte sizes, signals and the CUDA OOM paragraph (names of signals and
the cut at a word live in :mod:`lat_core.text`).

Kept apart from the rules so the rules read as decisions and the wording can change freely.
"""

from __future__ import annotations

from collections.abc import Mapping

from lat_core.text import fmt_bytes


def _bytes(count: int | None) -> str:
    return fmt_bytes(count, unknown="?")


_CUDA_OOM_TEXT = {
    "fragmentation": ("PyTorch asked for {requested} on GPU {gpu} ({capacity} in all) and found only "
                      "{free} free, while {cached} sat reserved in its cache but unallocated: the memory "
                      "existed, in pieces too small for the request (fragmentation)."),
    "contention": ("Other processes held {others} of GPU {gpu}'s {capacity} ({others_pct}); this job "
                   "used {own} and needed {requested} more, which would have fit on a card of its own "
                   "(contention)."),
    "peak": ("This job by itself used {own} of GPU {gpu}'s {capacity} and needed {requested} more: its "
             "peak memory at this batch size and sequence length is larger than the card (peak)."),
    "unknown": ("PyTorch ran out of GPU memory, but its message did not carry the numbers needed to "
                "tell fragmentation, contention and a too-large peak apart."),
}


def signal_of(returncode: int | None) -> int | None:
    """The signal that ended a process: negative return codes (Popen) and shells' 128+N."""
    if returncode is None:
        return None
    if returncode < 0:
        return -returncode
    if 128 < returncode < 160:
        return returncode - 128
    return None


def cuda_oom_text(kind: str, factors: list[str], numbers: Mapping[str, int]) -> str:
    capacity = numbers.get("capacity_bytes") or 0
    others = numbers.get("other_processes_bytes", 0)
    values = {
        "requested": _bytes(numbers.get("requested_bytes")),
        "gpu": numbers.get("gpu_index", "?"),
        "capacity": _bytes(numbers.get("capacity_bytes")),
        "free": _bytes(numbers.get("free_bytes")),
        "cached": _bytes(numbers.get("reserved_unallocated_bytes")),
        "others": _bytes(others),
        "others_pct": f"{100 * others / capacity:.0f}%" if capacity else "?",
        "own": _bytes(numbers.get("self_bytes", numbers.get("reserved_bytes"))),
    }
    text = _CUDA_OOM_TEXT.get(kind, _CUDA_OOM_TEXT["unknown"]).format(**values)
    extra = [f for f in factors if f != kind]
    if extra and kind != "unknown":
        text += f" {extra[0].capitalize()} contributed as well."
    return text



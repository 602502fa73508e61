"""CUDA out-of-memory messages: parse PyTorch's numbers and say which kind of OOM it was.

PyTorch has printed two formats. Before 2.1 (``RuntimeError: CUDA out of memory. Tried to allocate
20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.56 GiB already allocated; 3.44 MiB free; 14.70 GiB
reserved in total by PyTorch)``) and since 2.1 (``... Tried to allocate 32.00 MiB. GPU 0 has a total
capacity of 23.65 GiB of which 28.06 MiB is free. Process 1234 has 10.2 GiB memory in use. Including
non-PyTorch memory, this process has 13.30 GiB memory in use. Of the allocated memory 12.90 GiB is
allocated by PyTorch, and 120.5 MiB is reserved by PyTorch but unallocated.``). 2.1 spelled it
"capacty". Both are read into the same byte counts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal

_SIZE = r"(\d+(?:\.\d+)? (?:bytes|[KMGT]i?B))"
_UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
          "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}

_COMMON = {"requested_bytes": rf"Tried to allocate {_SIZE}"}
_CURRENT = {
    "capacity_bytes": rf"total capac(?:i)?ty of {_SIZE}",
    "free_bytes": rf"of which {_SIZE} is free",
    "self_bytes": rf"this process has {_SIZE} memory in use",
    "allocated_bytes": rf"Of the allocated memory {_SIZE} is allocated by PyTorch",
    "reserved_unallocated_bytes": rf"{_SIZE} is reserved by PyTorch but unallocated",
}
_OLD = {
    "capacity_bytes": rf"{_SIZE} total capacity",
    "allocated_bytes": rf"{_SIZE} already allocated",
    "free_bytes": rf"{_SIZE} free",
    "reserved_bytes": rf"{_SIZE} reserved in total by PyTorch",
}
_PROCESS = re.compile(rf"Process (\d+) has {_SIZE} memory in use")
_GPU = re.compile(r"GPU (\d+)")

#: Other processes holding at least this share of the card is "contention" whatever else is true.
MOST_OF_CARD = 0.5
#: Below this share, other processes are noise (a display server, a monitoring agent).
SIGNIFICANT_SHARE = 0.1
#: Free memory at least this share of the request counts as "only just short".
NEAR_REQUEST = 0.75


def size_to_bytes(text: str) -> int:
    """``"23.65 GiB"`` -> 25393994957 (rounded half up, as exact as the printed digits allow)."""
    number, unit = text.split()
    return int((Decimal(number) * _UNITS[unit]).to_integral_value(rounding=ROUND_HALF_UP))  # any number of digits


def parse_cuda_oom(text: str) -> dict[str, int] | None:
    """Byte counts from one OOM message (None when ``text`` holds none); absent values are left out.
    Besides ``*_bytes``: ``gpu_index``, ``other_process_count`` and ``self_pid_guessed``."""
    if "CUDA out of memory" not in text:
        return None
    numbers = _find_sizes(text, _COMMON)
    numbers.update(_find_sizes(text, _CURRENT if "Of the allocated memory" in text or
                               "total capacity of" in text or "total capacty of" in text else _OLD))
    _add_derived(numbers)
    _add_processes(numbers, text)
    gpu = _GPU.search(text)
    if gpu:
        numbers["gpu_index"] = int(gpu.group(1))
    return numbers


def _find_sizes(text: str, patterns: dict[str, str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for name, pattern in patterns.items():
        match = re.search(pattern, text)
        if match:
            found[name] = size_to_bytes(match.group(1))
    return found


def _add_derived(numbers: dict[str, int]) -> None:
    """The old format gives reserved in total; the current one gives the unallocated part."""
    if "reserved_bytes" in numbers and "allocated_bytes" in numbers:
        numbers["reserved_unallocated_bytes"] = max(0, numbers["reserved_bytes"] - numbers["allocated_bytes"])
    elif "reserved_unallocated_bytes" in numbers and "allocated_bytes" in numbers:
        numbers["reserved_bytes"] = numbers["allocated_bytes"] + numbers["reserved_unallocated_bytes"]


def _add_processes(numbers: dict[str, int], text: str) -> None:
    """Sum other processes' usage. In a container NVML reports host pids, so the job itself may
    appear as "Process N" with no "this process" line; then the entry that covers PyTorch's
    reservation most tightly is taken to be the job."""
    usage = {int(pid): size_to_bytes(size) for pid, size in _PROCESS.findall(text)}
    if "self_bytes" not in numbers and usage and "reserved_bytes" in numbers:
        own = _guess_own_pid(usage, numbers["reserved_bytes"])
        if own is not None:
            numbers["self_bytes"] = usage.pop(own)
            numbers["self_pid_guessed"] = own
    if usage or "self_bytes" in numbers:
        numbers["other_processes_bytes"] = sum(usage.values())
        numbers["other_process_count"] = len(usage)


def _guess_own_pid(usage: dict[int, int], reserved: int) -> int | None:
    covering = {pid: used for pid, used in usage.items() if used >= reserved}
    return min(covering, key=covering.__getitem__) if covering else None


def oom_kind(numbers: Mapping[str, int]) -> tuple[str, list[str]]:
    """The main cause and every contributing one: ``fragmentation``, ``contention`` or ``peak``."""
    factors = [name for name, test in (("contention", _contention), ("fragmentation", _fragmentation))
               if test(numbers)]
    if not numbers.get("capacity_bytes"):
        return "unknown", factors
    if "contention" in factors and _share(numbers, "other_processes_bytes") >= MOST_OF_CARD:
        return "contention", factors
    if "fragmentation" in factors:
        return "fragmentation", factors
    return (factors[0] if factors else "peak"), factors


def _share(numbers: Mapping[str, int], key: str) -> float:
    capacity = numbers.get("capacity_bytes") or 0
    return numbers.get(key, 0) / capacity if capacity else 0.0


def _contention(numbers: Mapping[str, int]) -> bool:
    """Others held a real share of the card, and without them this job's request would have fit."""
    if _share(numbers, "other_processes_bytes") >= MOST_OF_CARD:
        return True
    own = numbers.get("self_bytes", numbers.get("reserved_bytes", 0))
    fits_alone = own + numbers.get("requested_bytes", 0) <= numbers.get("capacity_bytes", 0)
    return _share(numbers, "other_processes_bytes") >= SIGNIFICANT_SHARE and fits_alone


def _fragmentation(numbers: Mapping[str, int]) -> bool:
    """The memory existed but not in one piece: PyTorch's cache held reserved-but-unallocated
    blocks, and those plus the card's free memory would have covered the request (or the card was
    only just short while the cache held some). With an empty cache, free memory below the request
    is a plain peak, however close (seen on an H100: 1.84 GiB free for a 2 GiB request)."""
    requested = numbers.get("requested_bytes", 0)
    cached = numbers.get("reserved_unallocated_bytes", 0)
    if not requested or not cached:
        return False
    free = numbers.get("free_bytes", 0)
    return cached + free >= requested or free >= NEAR_REQUEST * requested

"""Small text helpers every layer shows people: a cut at a word, a signal's name. Torch-free and
import-free, so the journal's readers (lat_core.job_files) need not load triage to use them."""

from __future__ import annotations

import signal


def shorten(text: str, limit: int) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters, with an ellipsis when cut."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.") + "…"


def signal_name(signum: int | None) -> str:
    """SIGKILL, SIGRTMIN+6, ... for any number (real-time signals have no Signals member)."""
    if signum is None:
        return "?"
    try:
        return signal.Signals(signum).name
    except ValueError:
        if signal.SIGRTMIN <= signum <= signal.SIGRTMAX:
            return f"SIGRTMIN+{signum - signal.SIGRTMIN}"
        return f"signal {signum}"

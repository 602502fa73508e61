"""Small text helpers every layer shows people: a cut at a word, a signal's name. Torch-free and
import-free, so the job folder's readers (lat_core.contract.jobdir) need not load triage to use them."""

from __future__ import annotations

import math
import signal
from decimal import Decimal


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


BYTE_UNITS = (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10))


def fmt_bytes(count: int | None, *, compact: bool = False, unknown: str = "") -> str:
    """A byte count in binary units, the one way every front end and report writes one.

    ``compact`` fits a four-character table column (``512K``, ``340M``, ``1.2G``, ``78G``); the long
    form is PyTorch's (``120.50 MiB``, ``13.30 GiB``), so a diagnosis reads like the error it
    explains. ``unknown`` is shown for None.
    """
    if count is None:
        return unknown
    for unit, scale in BYTE_UNITS:
        if abs(count) >= scale:
            number = count / scale
            if compact:
                return f"{number:.1f}{unit}" if abs(number) < 9.95 else f"{number:.0f}{unit}"
            return f"{number:.2f} {unit}iB"
    return f"{count}B" if compact else f"{count} bytes"


def value_text(value: object) -> str:
    """A config value as short as it reads, the one way a sweep's folders, tables and plots write
    it: 0.0002 -> 2e-4, 16.0 -> 16, true, [q, v] -> q-v."""
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, (tuple, list)):
        return "-".join(value_text(v) for v in value)
    return str(value)


def _float_text(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    exact = Decimal(repr(value)).normalize()  # repr: the fewest digits that read back as this float
    power = exact.adjusted()
    if -2 <= power < 5:
        return format(exact, "f")
    sign, digits, _ = exact.as_tuple()
    mantissa = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if len(digits) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{power}"

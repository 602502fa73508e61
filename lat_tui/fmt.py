"""Short, fixed-width renderings of durations, sizes and losses for an 80-column screen."""

from __future__ import annotations

from lat_tui.format import fmt_elapsed

GIB = 2**30


def clock(seconds: float | None) -> str:
    """mm:ss below an hour, h:mm:ss above; blank when unknown (a quieter table than "-")."""
    return "" if seconds is None else fmt_elapsed(max(seconds, 0.0))


def gib(used: int, total: int) -> str:
    return f"{used / GIB:.1f}/{total / GIB:.0f}G"


def loss(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def step(value: int | None) -> str:
    return "" if value is None else str(value)


def bar(fraction: float, width: int) -> tuple[str, str]:
    """A bar as (filled, empty) runs of block characters, so the caller styles the two parts."""
    fraction = min(max(fraction, 0.0), 1.0)
    filled = round(fraction * width)
    return "█" * filled, "░" * (width - filled)

"""Updates that leave an unchanged widget alone: every ``Static.update`` repaints, and the 1 Hz poll
hands most widgets the same content again (an idle dashboard would redraw itself every second).

Where the content did change but its shape did not (the same lines, each as wide as before), the
update repaints the widget without a layout pass: a layout of the whole screen re-renders the job
table and every scrollbar, and the host line's RAM figure alone asked for one each second.
"""

from __future__ import annotations

from typing import Iterable

from rich.cells import cell_len
from rich.text import Text
from textual.renderables.sparkline import Sparkline as SparklineRenderable
from textual.widgets import Sparkline, Static

BAR_LEVELS = len(SparklineRenderable.BARS)


def set_content(widget: Static, content) -> None:
    if getattr(widget, "_quiet_last", None) == content:
        return
    shape = content_shape(content)
    layout = shape is None or shape != getattr(widget, "_quiet_shape", None)
    widget._quiet_last, widget._quiet_shape = content, shape
    widget.update(content, layout=layout)


def content_shape(content) -> tuple[int, ...] | None:
    """Each line's width in cells, for text and markup; None (unknown: lay out) for anything else."""
    if isinstance(content, str):
        content = Text.from_markup(content)
    if not isinstance(content, Text):
        return None
    return tuple(cell_len(line) for line in content.plain.split("\n"))


def set_data(sparkline: Sparkline, data: list[float]) -> None:
    """New data only when the bars drawn at the sparkline's width would differ."""
    width = sparkline.content_size.width
    drawn = getattr(sparkline, "_quiet_bars", None)
    bars = sparkline_bars(data, width) if width else None
    if bars is None or bars != drawn:
        sparkline._quiet_bars = bars
        sparkline.data = data


def sparkline_bars(data: Iterable[float], width: int) -> tuple[int, ...]:
    """The bar height of each of ``width`` columns, as Textual's one-line sparkline draws it (each
    column the ``max`` of its bucket, scaled between the data's minimum and maximum)."""
    values = list(data)
    if len(values) < 2:
        return (len(values),)
    low, high = min(values), max(values)
    extent = high - low or 1
    buckets = [values[len(values) * n // width: len(values) * (n + 1) // width] for n in range(width)]
    buckets = [bucket for bucket in buckets if bucket]  # as Sparkline._buckets, in integers (not Fractions)
    step = len(buckets) / width
    return tuple(int((max(buckets[int(i * step)]) - low) / extent * (BAR_LEVELS - 1)) for i in range(width))

"""A small terminal line plot drawn with Unicode braille cells (2x4 dots per character cell).

Why braille and not a plotting library: a learning curve only needs its shape and its extents, the
project adds no dependency for it, and braille gives four times the vertical resolution of blocks.
Up to two series share the x axis (steps) and keep their own y ranges: the first series is labelled
on the left, the second on the right, so loss and a metric on very different scales both fill the
plot. Each cell is coloured by the series drawn last in it; the legend names the colours. A series
may carry a band (the seeds' min-max at each step): the cells it covers that no line passes through
are stippled in the series' colour, dimmed, so the spread reads in a monochrome terminal too.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

BRAILLE_BASE = 0x2800
_DOT_BITS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))  # [dot row][dot column]
LABEL_WIDTH = 7
NO_SERIES = -1
BAND_CHAR = "·"  # a cell inside a series' band that its line does not pass through


@dataclass(frozen=True)
class Series:
    """One named line: (x, y) points in x order, and optionally a band: (x, low, high) in x order."""

    name: str
    points: tuple[tuple[float, float], ...]
    band: tuple[tuple[float, float, float], ...] = ()

    def xs(self) -> list[float]:
        return [px for px, _ in self.points] + [bx for bx, _, _ in self.band]

    def ys(self) -> list[float]:
        """Every y value drawn: the line's and the band's edges (an axis must hold both)."""
        return [py for _, py in self.points] + [v for _, lo, hi in self.band for v in (lo, hi)]


@dataclass(frozen=True)
class Span:
    """The closed range of values an axis shows."""

    lo: float
    hi: float

    def position(self, value: float, size: int) -> int:
        """``value`` mapped onto 0..size-1 (a flat span maps everything to the middle)."""
        if self.hi <= self.lo:
            return (size - 1) // 2
        fraction = (value - self.lo) / (self.hi - self.lo)
        return min(size - 1, max(0, round(fraction * (size - 1))))


@dataclass(frozen=True)
class Plot:
    """A rendered plot area: one string per text row, which series' line owns each cell, and
    which series' band covers it (``shades``; NO_SERIES where none)."""

    rows: tuple[str, ...]
    owners: tuple[tuple[int, ...], ...]
    x: Span | None
    ys: tuple[Span | None, ...]
    shades: tuple[tuple[int, ...], ...] = ()


def span_of(values) -> Span | None:
    values = list(values)
    return Span(min(values), max(values)) if values else None


def _line(x0: int, y0: int, x1: int, y1: int):
    """Dot coordinates on the straight line between two dots (Bresenham), both ends included."""
    dx, dy = abs(x1 - x0), -abs(y1 - y0)
    sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
    error = dx + dy
    while True:
        yield x0, y0
        if x0 == x1 and y0 == y1:
            return
        doubled = 2 * error
        if doubled >= dy:
            error += dy
            x0 += sx
        if doubled <= dx:
            error += dx
            y0 += sy


def _dots(points, x: Span, y: Span, width: int, height: int) -> set[tuple[int, int]]:
    """Every dot (column, row from the top) the polyline through ``points`` touches."""
    dot_w, dot_h = width * 2, height * 4
    placed = [(x.position(px, dot_w), dot_h - 1 - y.position(py, dot_h)) for px, py in points]
    dots = set(placed[:1])
    for start, end in zip(placed, placed[1:]):
        dots.update(_line(*start, *end))
    return dots


def _cell_masks(dots, width: int, height: int) -> list[list[int]]:
    masks = [[0] * width for _ in range(height)]
    for col, row in dots:
        masks[row // 4][col // 2] |= _DOT_BITS[row % 4][col % 2]
    return masks


def shared_spans(plots: list[list[Series]]) -> tuple[Span | None, ...]:
    """One y span per series position covering every plot's series at that position, so plots
    drawn side by side with them read on the same scale."""
    positions = max((len(series) for series in plots), default=0)
    return tuple(span_of(py for series in plots if len(series) > i for py in series[i].ys())
                 for i in range(positions))


def _band_cells(band, x: Span, y: Span, width: int, height: int) -> set[tuple[int, int]]:
    """(column, row from the top) of every cell between a band's low and high edges, each edge
    drawn straight between the band's steps."""
    edges = [(x.position(bx, width), height - 1 - y.position(lo, height), height - 1 - y.position(hi, height))
             for bx, lo, hi in band]
    cells: set[tuple[int, int]] = set()
    for (c0, lo0, hi0), (c1, lo1, hi1) in zip(edges, edges[1:] or edges):
        for col in range(c0, c1 + 1):
            f = (col - c0) / (c1 - c0) if c1 > c0 else 0.0
            top, bottom = round(hi0 + f * (hi1 - hi0)), round(lo0 + f * (lo1 - lo0))
            cells.update((col, row) for row in range(top, bottom + 1))
    return cells


def plot_series(series: list[Series], width: int, height: int, ys: tuple[Span | None, ...] | None = None) -> Plot:
    """Draw ``series`` into a ``width`` x ``height`` cell area; x is shared, each y is its own
    unless ``ys`` gives the spans (a comparison's common scale)."""
    width, height = max(1, width), max(1, height)
    x = span_of(px for s in series for px in s.xs())
    own = tuple(span_of(s.ys()) for s in series)
    ys = tuple((ys[i] if ys and i < len(ys) and ys[i] is not None else span) for i, span in enumerate(own))
    chars = [[0] * width for _ in range(height)]
    owners = [[NO_SERIES] * width for _ in range(height)]
    shades = [[NO_SERIES] * width for _ in range(height)]
    for index, (one, y) in enumerate(zip(series, ys)):
        if x is None or y is None:
            continue
        for c, r in _band_cells(one.band, x, y, width, height):
            shades[r][c] = index
        masks = _cell_masks(_dots(one.points, x, y, width, height), width, height)
        for r, mask_row in enumerate(masks):
            for c, mask in enumerate(mask_row):
                if mask:
                    chars[r][c] |= mask
                    owners[r][c] = index
    rows = tuple("".join(chr(BRAILLE_BASE + m) if m else BAND_CHAR if shade != NO_SERIES else " "
                         for m, shade in zip(row, shade_row)) for row, shade_row in zip(chars, shades))
    return Plot(rows=rows, owners=tuple(tuple(o) for o in owners), x=x, ys=ys,
                shades=tuple(tuple(s) for s in shades))


def axis_label(value: float | None, width: int = LABEL_WIDTH) -> str:
    """A number short enough for a ``width``-character axis label."""
    if value is None:
        return ""
    for digits in (4, 3, 2, 1):
        text = f"{value:.{digits}g}"
        if len(text) <= width:
            return text
    return f"{value:.0e}"[:width]


def _y_label(span: Span | None, row: int, rows: int) -> str:
    if span is None:
        return ""
    if row == 0:
        return axis_label(span.hi)
    return axis_label(span.lo) if row == rows - 1 else ""


def _plot_line(plot: Plot, row: int, styles: list[Style]) -> Text:
    line = Text(no_wrap=True, end="")
    for char, owner, shade in zip(plot.rows[row], plot.owners[row], plot.shades[row]):
        if owner != NO_SERIES:
            line.append(char, styles[owner])
        else:
            line.append(char, styles[shade] + Style(dim=True) if shade != NO_SERIES else Style())
    return line


def _legend(series: list[Series], styles: list[Style], title: str) -> Text:
    legend = Text(no_wrap=True, end="", overflow="ellipsis")
    if title:
        legend.append(title + "  ", Style(bold=True))
    for index, one in enumerate(series):
        side = "left" if index == 0 else "right"
        legend.append("━━ ", styles[index])
        legend.append(f"{one.name} ({side})  ")
    if any(one.band for one in series):
        legend.append(f"{BAND_CHAR} min-max over seeds", Style(dim=True))
    return legend


def _x_axis(x: Span | None, width: int) -> Text:
    if x is None:
        return Text("")
    lo, hi = axis_label(x.lo, width // 2), axis_label(x.hi, width // 2)
    gap = max(1, width - len(lo) - len(hi))
    return Text(" " * (LABEL_WIDTH + 1) + lo + " " * gap + hi, no_wrap=True, end="")


def render_curve(series: list[Series], width: int, height: int, styles: list[Style] | None = None,
                 title: str = "", ys: tuple[Span | None, ...] | None = None) -> Text:
    """The whole widget as text: legend, plot rows framed by y labels, then the x (step) extents."""
    styles = styles or [Style(), Style()]
    if not any(s.points for s in series):
        return Text(f"{title}  no points yet" if title else "no points yet", no_wrap=True)
    plot_w = max(1, width - 2 * LABEL_WIDTH - 2)
    plot_h = max(1, height - 2)
    plot = plot_series(series, plot_w, plot_h, ys)
    lines = [_legend(series, styles, title)]
    for row in range(plot_h):
        line = Text(_y_label(plot.ys[0], row, plot_h).rjust(LABEL_WIDTH) + "│", no_wrap=True, end="")
        line.append_text(_plot_line(plot, row, styles))
        right = _y_label(plot.ys[1], row, plot_h) if len(plot.ys) > 1 else ""
        line.append("│" + right)
        lines.append(line)
    lines.append(_x_axis(plot.x, plot_w))
    text = Text("\n", end="", no_wrap=True, overflow="crop").join(lines)
    text.no_wrap = True
    return text


class CurvePlot(Widget):
    """Plots one or two series; call ``show`` with new data, it redraws at its current size."""

    COMPONENT_CLASSES = {"curve--first", "curve--second"}
    DEFAULT_CSS = """
    CurvePlot { width: 1fr; height: 1fr; min-height: 4; }
    CurvePlot > .curve--first { color: $warning; }
    CurvePlot > .curve--second { color: $accent; text-style: bold; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self._series: list[Series] = []
        self._title = ""
        self._ys: tuple[Span | None, ...] | None = None

    @property
    def series(self) -> list[Series]:
        return list(self._series)

    def show(self, series: list[Series], title: str = "", ys: tuple[Span | None, ...] | None = None) -> None:
        self._series = list(series)[:2]
        self._title = title
        self._ys = ys
        self.refresh()

    def render(self) -> Text:
        styles = [self.get_component_rich_style("curve--first"),
                  self.get_component_rich_style("curve--second")]
        return render_curve(self._series, self.size.width, self.size.height, styles, self._title, self._ys)

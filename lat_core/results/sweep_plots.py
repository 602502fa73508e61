"""A sweep's PNG: the main metric against each swept value, one panel per swept field.

In the panel of a field, the full points that share the other fields' values make one line (its
mean over seeds, their min-max as a band; one colour per such group, named in the legend); where no
two points share them (a random search), every point is a marker with its min-max as an error bar.
Stage 1's screening points are grey crosses, a point with no value a grey triangle on the axis
(the legend says why: pruned, failed, running), and the best full point a star. A numeric field whose
values are all positive and span a factor of 10 or more (a learning rate) gets a log axis; a field
of text or lists gets one tick per value.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from lat_core.results.plots import config_colours, new_figure, safe_name
from lat_core.results.sweeps import SweepRow, SweepTable
from lat_core.text import value_text

if TYPE_CHECKING:  # imported when plotting (lat_core.results.plots says why)
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MAX_LINES = 10  # groups in one panel beyond which points are drawn as markers, not lines
MAX_VALUE_TICKS, TICK_GAP = 8, 0.08  # a tick at each value when so few and this far apart (part of the axis)
LOG_SPAN = 10.0  # max / min of positive values from which an axis is logarithmic
GREY = (0.55, 0.55, 0.55, 1.0)


def _numeric(values: list[object]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def is_log_spaced(values: list[object]) -> bool:
    """Positive numbers spanning a factor of LOG_SPAN or more: a log axis shows them evenly."""
    numbers = [float(v) for v in values] if _numeric(values) else []  # type: ignore[arg-type]
    return bool(numbers) and min(numbers) > 0 and max(numbers) / min(numbers) >= LOG_SPAN


class _Axis:
    """Where a field's values go on the x axis: the number itself, or the place of a text value."""

    def __init__(self, values: list[object]):
        self.numeric = _numeric(values)
        self.log = is_log_spaced(values)
        self.ticks = list(dict.fromkeys(values)) if not self.numeric else []

    def x(self, value: object) -> float:
        return float(value) if self.numeric else float(self.ticks.index(value))  # type: ignore[arg-type]


def _ticks_fit(xs: list[float], log: bool) -> bool:
    """Few values, far enough apart on the axis for their labels (a random search's draws need not be)."""
    if len(xs) > MAX_VALUE_TICKS:
        return False
    places = [math.log10(x) for x in xs] if log else xs
    span = (max(places) - min(places)) or 1.0
    return all(b - a >= TICK_GAP * span for a, b in zip(places, places[1:]))


def _y(row: SweepRow) -> float:
    """The point's mean (the rows drawn are those that have one)."""
    return math.nan if row.stat.mean is None else row.stat.mean


def _others(row: SweepRow, field: str) -> tuple[tuple[str, object], ...]:
    return tuple((f, v) for f, v in row.values if f != field)


def _group_label(others: tuple[tuple[str, object], ...]) -> str:
    return " ".join(f"{f}={value_text(v)}" for f, v in others) or "mean over seeds"


Groups = dict[tuple[tuple[str, object], ...], list[SweepRow]]


def _groups(rows: list[SweepRow], field: str) -> tuple[Groups, bool]:
    """The full points with values by the other fields' values, and whether to join each group by
    a line: not when lines would join nothing (no two share them) or be too many to tell apart,
    then every point is in one group of markers."""
    groups: Groups = defaultdict(list)
    for row in rows:
        groups[_others(row, field)].append(row)
    if len(groups) > MAX_LINES or len(groups) > 1 and all(len(g) == 1 for g in groups.values()):
        return {(): rows}, False
    return dict(groups), True


def _draw_group(axes: Axes, axis: _Axis, field: str, rows: list[SweepRow], colour: object, label: str,
                line: bool) -> None:
    rows = sorted(rows, key=lambda r: axis.x(r.value_of(field)))
    xs = [axis.x(r.value_of(field)) for r in rows]
    means = [_y(r) for r in rows]
    lows, highs = zip(*(r.band or (_y(r), _y(r)) for r in rows))
    if line and len(rows) > 1:
        axes.plot(xs, means, color=colour, marker="o", markersize=4, linewidth=1.4, label=label)
        axes.fill_between(xs, lows, highs, color=colour, alpha=0.2, linewidth=0)
        return
    errors = [[m - lo for m, lo in zip(means, lows)], [hi - m for m, hi in zip(means, highs)]]
    axes.errorbar(xs, means, yerr=errors, color=colour, marker="o", markersize=4, linestyle="none", capsize=3,
                  label=label)


def _draw_panel(axes: Axes, table: SweepTable, field: str) -> None:
    axis = _Axis([row.value_of(field) for row in table.rows])
    scored = [r for r in table.rows if not r.screen and r.stat.mean is not None]
    groups, lines = _groups(scored, field)
    colours = config_colours([_group_label(k) for k in groups])
    for others, rows in groups.items():
        label = _group_label(others) if lines else "points (mean, min-max over seeds)"
        _draw_group(axes, axis, field, rows, colours[_group_label(others)], label, lines)
    screened = [r for r in table.rows if r.screen and r.stat.mean is not None]
    if screened:
        axes.scatter([axis.x(r.value_of(field)) for r in screened], [_y(r) for r in screened], color=GREY,
                     marker="x", zorder=3, label="stage 1 (screen), ranked apart")
    empty = [r for r in table.rows if not r.screen and r.stat.mean is None]
    if empty:
        states = sorted({state for r in empty for state, _ in r.left_out})
        why = f" ({', '.join(states)})" if states else ""
        axes.scatter([axis.x(r.value_of(field)) for r in empty], [0.02] * len(empty), color=GREY, marker="v",
                     transform=axes.get_xaxis_transform(), zorder=3, label=f"no value{why}")
    if table.best is not None:
        best = table.best
        axes.scatter([axis.x(best.value_of(field))], [_y(best)], marker="*", s=220, color="gold",
                     edgecolors="black", linewidths=0.8, zorder=4, label=f"best {table.spec.main} {_y(best):.4f}")
    _label_axes(axes, axis, table, field)
    legend = "line: mean over seeds, band: min-max" if lines else "marker: mean over seeds, bar: min-max"
    axes.legend(fontsize=7, title=legend, title_fontsize=7)


def _label_axes(axes: Axes, axis: _Axis, table: SweepTable, field: str) -> None:
    """Ticks at the swept values where they fit (else the axis's own), named as folders name them."""
    if axis.log:
        axes.set_xscale("log")
    if axis.ticks:
        axes.set_xticks(range(len(axis.ticks)), [value_text(v) for v in axis.ticks], fontsize=8, rotation=20)
    elif _ticks_fit(values := sorted({axis.x(r.value_of(field)) for r in table.rows}), axis.log):
        axes.set_xticks(values, [value_text(v) for v in values], fontsize=8)
        axes.minorticks_off()
    elif axis.log:  # the axis's own decades, their minor ticks unlabelled (labels would overlap)
        from matplotlib.ticker import NullFormatter

        axes.xaxis.set_minor_formatter(NullFormatter())
    axes.set(xlabel=field, ylabel=f"validation {table.spec.main}", title=f"{table.spec.main} against {field}")
    axes.grid(alpha=0.3)


def sweep_figure(table: SweepTable) -> Figure:
    """The sweep's panels side by side, one per swept field."""
    figure = new_figure(5.2 * len(table.fields) + 0.5, 4.4)
    for i, field in enumerate(table.fields):
        _draw_panel(figure.add_subplot(1, len(table.fields), i + 1), table, field)
    figure.suptitle(f"{table.dataset}: sweep of {table.config}", fontsize=10)
    return figure


def plot_sweep(table: SweepTable, path: Path) -> Path:
    """sweep_figure written as a PNG."""
    sweep_figure(table).savefig(path, format="png")
    return path


def sweep_stem(table: SweepTable) -> str:
    """The file stem of a sweep's PNG and CSV: ``tiny-sst2_tiny_lora_sweep``."""
    return f"{safe_name(table.dataset)}_{safe_name(table.config)}_sweep"


def write_sweep_plots(sweeps: list[SweepTable], out_dir: Path) -> list[Path]:
    return [plot_sweep(table, Path(out_dir) / f"{sweep_stem(table)}.png") for table in sweeps]

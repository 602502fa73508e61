"""PNG plots per dataset: configs' main metric with seed spread, learning curves, peak memory.

Why Figure + FigureCanvasAgg and not pyplot: no global backend switch and no GUI, so plotting works
on a headless server and inside a process that has its own matplotlib state. matplotlib is imported
only inside ``write_plots`` so the core stays light to import.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lat_core.results.scan import JobResult, Report
from lat_core.results.tables import Table, peak_memory

if TYPE_CHECKING:  # imported when plotting (see above)
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def safe_name(text: str) -> str:
    """A file-name-safe form of a dataset or config name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "dataset"


def new_figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure: Figure, path: Path) -> Path:
    figure.savefig(path, format="png")
    return path


def _bar_height(count: int) -> float:
    return max(3.0, 0.45 * count + 1.5)


def plot_bars(table: Table, path: Path) -> Path:
    """Horizontal bars of the main validation metric per config, std as error bars."""
    main = table.columns[0]
    scored = [(r, mean) for r in table.rows if (mean := r.stats[main.key].mean) is not None][::-1]
    rows, means = [r for r, _ in scored], [m for _, m in scored]
    figure = new_figure(8, _bar_height(len(rows)))
    axes = figure.add_subplot()
    stds = [r.stats[main.key].std for r in rows]
    colors = ["tab:orange" if main.key in r.best else "tab:blue" for r in rows]
    axes.barh(range(len(rows)), means, xerr=stds, color=colors, capsize=3)
    axes.set_yticks(range(len(rows)), [f"{r.config} (n={r.n})" for r in rows], fontsize=8)
    axes.set_xlabel(f"validation {main.metric} (mean ± std over seeds)")
    axes.set_title(f"{table.dataset}: {main.metric} per config")
    axes.grid(axis="x", alpha=0.3)
    return _save(figure, path)


@dataclass(frozen=True)
class Band:
    """Seeds' curves combined step by step (each step over the seeds that logged it)."""

    steps: list[int]
    mean: list[float]
    low: list[float]
    high: list[float]


def seed_band(curves: list[tuple[tuple[int, float], ...]]) -> Band:
    """Mean, min and max over seeds at each step."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for curve in curves:
        for step, value in curve:
            by_step[step].append(value)
    steps = sorted(by_step)
    return Band(steps, [sum(by_step[s]) / len(by_step[s]) for s in steps],
                [min(by_step[s]) for s in steps], [max(by_step[s]) for s in steps])


def _by_config(results: list[JobResult]) -> dict[str, list[JobResult]]:
    groups: dict[str, list[JobResult]] = defaultdict(list)
    for result in results:
        groups[result.config].append(result)
    return dict(sorted(groups.items()))


Colour = tuple[float, float, float, float]  # RGBA


def config_colours(configs: list[str]) -> dict[str, Colour]:
    """One colour per config, distinct among them (tab10, tab20, then a sampled continuous map):
    the same config has the same colour in every panel."""
    from matplotlib import colormaps

    name = "tab10" if len(configs) <= 10 else "tab20" if len(configs) <= 20 else "turbo"
    cmap = colormaps[name]
    if name == "turbo":
        return {c: cmap(i / max(1, len(configs) - 1)) for i, c in enumerate(configs)}
    return {c: cmap(i) for i, c in enumerate(configs)}


def _draw_band(axes: Axes, band: Band, colour: Colour, label: str, marker: str | None) -> None:
    """The seeds' mean as a line and their min-max as a shaded band (only where seeds differ)."""
    axes.plot(band.steps, band.mean, color=colour, label=label, linewidth=1.2, marker=marker, markersize=3)
    if any(hi > lo for lo, hi in zip(band.low, band.high)):
        axes.fill_between(band.steps, band.low, band.high, color=colour, alpha=0.2, linewidth=0, label=label)


def curves_figure(table: Table, results: list[JobResult]) -> Figure:
    """Training loss and validation main metric against step: per config one colour in both panels,
    the mean over seeds as a line, their min-max as a band, and one legend for the figure."""
    from matplotlib.lines import Line2D

    figure = new_figure(12, 4.5)
    loss_axes, metric_axes = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    groups = _by_config(results)
    colours = config_colours(list(groups))
    for config, group in groups.items():
        label = f"{config} (n={len(group)})"
        _draw_band(loss_axes, seed_band([r.losses for r in group]), colours[config], label, None)
        _draw_band(metric_axes, seed_band([r.curve for r in group]), colours[config], label, ".")
    loss_axes.set(xlabel="step", ylabel="training loss", title=f"{table.dataset}: loss")
    metric_axes.set(xlabel="step", ylabel=f"validation {table.spec.main}",
                    title=f"{table.dataset}: {table.spec.main}")
    for axes in (loss_axes, metric_axes):
        axes.grid(alpha=0.3)
    handles = [Line2D([], [], color=colours[c], linewidth=2) for c in groups]
    figure.legend(handles, [f"{c} (n={len(g)})" for c, g in groups.items()], loc="outside right upper",
                  fontsize=7, title="config (line: mean over seeds, band: min-max)", title_fontsize=7)
    return figure


def plot_curves(table: Table, results: list[JobResult], path: Path) -> Path:
    """curves_figure written as a PNG."""
    figure = curves_figure(table, results)
    figure.savefig(path, format="png")
    return path


def plot_memory(table: Table, results: list[JobResult], path: Path) -> Path | None:
    """Peak GPU memory per config (peak RSS for CPU-only jobs); None when no job reported any."""
    rows = [(r.config, r.peak_memory_bytes) for r in table.rows if r.peak_memory_bytes][::-1]
    if not rows:
        return None
    uses_rss = any(not r.peak_gpu_bytes and peak_memory(r) for r in results)
    figure = new_figure(8, _bar_height(len(rows)))
    axes = figure.add_subplot()
    axes.barh(range(len(rows)), [b / 2**30 for _, b in rows], color="tab:green")
    axes.set_yticks(range(len(rows)), [c for c, _ in rows], fontsize=8)
    kind = "peak GPU memory (peak RSS where no GPU)" if uses_rss else "peak GPU memory"
    axes.set_xlabel(f"{kind}, GiB, max over seeds")
    axes.set_title(f"{table.dataset}: memory per config")
    axes.grid(axis="x", alpha=0.3)
    return _save(figure, path)


def write_plots(report: Report, tables: list[Table], out_dir: Path) -> list[Path]:
    """Three PNGs per dataset (bars, curves, memory); returns the paths written."""
    out_dir = Path(out_dir)
    written: list[Path] = []
    for table in tables:
        results = [r for r in report.results if r.dataset == table.dataset]
        stem = safe_name(table.dataset)
        written.append(plot_bars(table, out_dir / f"{stem}_{safe_name(table.spec.main)}.png"))
        written.append(plot_curves(table, results, out_dir / f"{stem}_curves.png"))
        memory = plot_memory(table, results, out_dir / f"{stem}_memory.png")
        if memory is not None:
            written.append(memory)
    return written

"""PNG plots per dataset: configs' main metric with seed spread, learning curves, peak memory.

Why Figure + FigureCanvasAgg and not pyplot: no global backend switch and no GUI, so plotting works
on a headless server and inside a process that has its own matplotlib state. matplotlib is imported
only inside ``write_plots`` so the core stays light to import.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from lat_core.results.scan import JobResult, Report
from lat_core.results.tables import Table, peak_memory

if TYPE_CHECKING:  # imported when plotting (see above)
    from matplotlib.figure import Figure

MAX_LEGEND = 20


def safe_name(text: str) -> str:
    """A file-name-safe form of a dataset or config name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "dataset"


def _figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(figure)
    return figure


def _save(figure: Figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, format="png")
    return path


def _bar_height(count: int) -> float:
    return max(3.0, 0.45 * count + 1.5)


def plot_bars(table: Table, path: Path) -> Path:
    """Horizontal bars of the main validation metric per config, std as error bars."""
    main = table.columns[0]
    scored = [(r, mean) for r in table.rows if (mean := r.stats[main.key].mean) is not None][::-1]
    rows, means = [r for r, _ in scored], [m for _, m in scored]
    figure = _figure(8, _bar_height(len(rows)))
    axes = figure.add_subplot()
    stds = [r.stats[main.key].std for r in rows]
    colors = ["tab:orange" if main.key in r.best else "tab:blue" for r in rows]
    axes.barh(range(len(rows)), means, xerr=stds, color=colors, capsize=3)
    axes.set_yticks(range(len(rows)), [f"{r.config} (n={r.n})" for r in rows], fontsize=8)
    axes.set_xlabel(f"validation {main.metric} (mean ± std over seeds)")
    axes.set_title(f"{table.dataset}: {main.metric} per config")
    axes.grid(axis="x", alpha=0.3)
    return _save(figure, path)


def _mean_curve(curves: list[tuple[tuple[int, float], ...]]) -> tuple[list[int], list[float]]:
    """Seeds averaged step by step (each step over the seeds that logged it)."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for curve in curves:
        for step, value in curve:
            by_step[step].append(value)
    steps = sorted(by_step)
    return steps, [sum(by_step[s]) / len(by_step[s]) for s in steps]


def _by_config(results: list[JobResult]) -> dict[str, list[JobResult]]:
    groups: dict[str, list[JobResult]] = defaultdict(list)
    for result in results:
        groups[result.config].append(result)
    return dict(sorted(groups.items()))


def plot_curves(table: Table, results: list[JobResult], path: Path) -> Path:
    """Training loss and validation main metric against step, one line per config."""
    figure = _figure(12, 4.5)
    loss_axes, metric_axes = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    for config, group in _by_config(results).items():
        loss_axes.plot(*_mean_curve([r.losses for r in group]), label=config, linewidth=1)
        metric_axes.plot(*_mean_curve([r.curve for r in group]), label=config, marker=".",
                         linewidth=1)
    loss_axes.set(xlabel="step", ylabel="training loss", title=f"{table.dataset}: loss")
    metric_axes.set(xlabel="step", ylabel=f"validation {table.spec.main}",
                    title=f"{table.dataset}: {table.spec.main}")
    for axes in (loss_axes, metric_axes):
        axes.grid(alpha=0.3)
    if len(_by_config(results)) <= MAX_LEGEND:
        metric_axes.legend(fontsize=7, loc="best")
    return _save(figure, path)


def plot_memory(table: Table, results: list[JobResult], path: Path) -> Path | None:
    """Peak GPU memory per config (peak RSS for CPU-only jobs); None when no job reported any."""
    rows = [(r.config, r.peak_memory_bytes) for r in table.rows if r.peak_memory_bytes][::-1]
    if not rows:
        return None
    uses_rss = any(not r.peak_gpu_bytes and peak_memory(r) for r in results)
    figure = _figure(8, _bar_height(len(rows)))
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

"""The monitor panel: one line per GPU (memory bar, utilisation, temperature, history) and the host.

Rows are rebuilt only when the set of GPUs changes (a GPU vanishing, NVML going away); otherwise
each poll updates their text and sparkline in place.
"""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Sparkline, Static

from lat_core.front.client import GpuInfo, GpuSnapshot, HostSnapshot, fmt_bytes
from lat_tui import fmt
from lat_tui.poll import GpuHistory
from lat_tui.widgets.quiet import set_content, set_data

BAR_WIDTH = 10
HISTORY_REDRAW_S = 5.0
NAME_WIDTH = 9
CORE_GLYPHS = "▁▂▃▄▅▆▇█"
BUSY_FRACTION = 0.9  # above this a bar turns to the warning colour


class GpuRow(Horizontal):
    """``GPU0 H100      ███░░░░░░░ 12.3/80G  45%  52°C`` and a sparkline of memory use."""

    def __init__(self, uuid: str):
        super().__init__(classes="gpu-row")
        self.uuid = uuid
        self._latest: tuple | None = None  # composed from, when ``show`` came before the children
        self._drawn_at = 0.0  # when the sparkline last took new data

    def compose(self) -> ComposeResult:
        gpu, history, colors = self._latest or (None, [], {})
        self._text = Static(gpu_line(gpu, colors) if gpu else "", classes="gpu-text")
        self._sparkline = Sparkline(history or [0.0], summary_function=max, classes="gpu-history")
        yield self._text
        yield self._sparkline

    def show(self, gpu: GpuInfo, history: list[float], colors: dict[str, str]) -> None:
        """Updates the children where they exist, else ``compose`` starts from this sample: either
        order of mounting and the first poll shows it (a lost first sample left blank frames)."""
        self._latest = (gpu, history, colors)
        if not self.children:
            return
        set_content(self._text, gpu_line(gpu, colors))
        now = time.monotonic()
        if now - self._drawn_at >= HISTORY_REDRAW_S:  # a minute's history moves little in a second
            self._drawn_at = now
            set_data(self._sparkline, history or [0.0])


class MonitorPanel(Vertical):
    """Hidden and shown by the dashboard's ``m`` key; ``show`` takes one poll's snapshots."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._uuids: tuple[str, ...] | None = None
        self._reason_shown = ""

    def compose(self) -> ComposeResult:
        yield Vertical(id="gpu-rows")
        yield Static(id="cpu-line")
        yield Static(id="host-line")

    def show(self, gpus: GpuSnapshot, host: HostSnapshot, history: GpuHistory, slots: str = "",
             cpu: tuple[float, ...] = ()) -> None:
        colors = self._colors()
        uuids = tuple(g.uuid for g in gpus.gpus)
        if uuids != self._uuids or (not uuids and gpus.reason != self._reason_shown):
            self._rebuild(gpus)
        for row, gpu in zip(self.query(GpuRow), gpus.gpus):
            row.show(gpu, history.series(gpu.uuid), colors)
        cpu_box = self.query_one("#cpu-line", Static)
        cpu_box.display = not gpus.gpus  # without GPUs the jobs run on the cores: show how busy they are
        if not gpus.gpus:
            set_content(cpu_box, cpu_line(cpu, colors, max(self.size.width, 40)))
        line = host_line(host, colors)
        if slots:
            line.append(f" · {slots}")
        set_content(self.query_one("#host-line", Static), line)

    def _rebuild(self, gpus: GpuSnapshot) -> None:
        self._uuids = tuple(g.uuid for g in gpus.gpus)
        self._reason_shown = gpus.reason
        rows = self.query_one("#gpu-rows", Vertical)
        rows.remove_children()
        if gpus.gpus:
            rows.mount_all([GpuRow(g.uuid) for g in gpus.gpus])
        else:
            rows.mount(Static(no_gpu_text(gpus.reason), classes="no-gpu"))

    def _colors(self) -> dict[str, str]:
        """Solid theme colours: Rich styles cannot take the theme's alpha variants."""
        variables = self.app.theme_variables
        return {name: variables.get(name, "") for name in ("accent", "warning", "error", "foreground-muted")}


def gpu_line(gpu: GpuInfo, colors: dict[str, str]) -> Text:
    fraction = gpu.memory_used / gpu.memory_total if gpu.memory_total else 0.0
    text = Text(f"GPU{gpu.index} ", style="bold")
    text.append(f"{short_name(gpu.name):<{NAME_WIDTH}} ")
    _append_bar(text, fraction, colors)
    text.append(f" {fmt.gib(gpu.memory_used, gpu.memory_total):>9}")
    text.append(f" {'' if gpu.utilization is None else f'{gpu.utilization}%':>4}")
    temperature = "" if gpu.temperature is None else f"{gpu.temperature}°C"
    text.append(f" {temperature:>5}", style=colors["warning"] if (gpu.temperature or 0) >= 85 else "")
    if gpu.processes:
        text.append(f" {len(gpu.processes)}p", style="dim")
    return text


def no_gpu_text(reason: str) -> Text:
    """``no GPU visible (NVML: Driver Not Loaded)``: NVML's words, quietly."""
    detail = reason.removeprefix("no GPU: ").strip()
    return Text(f"no GPU visible (NVML: {detail})" if detail else "no GPU visible", style="dim")


def cpu_line(percents: tuple[float, ...], colors: dict[str, str], width: int) -> Text:
    """``host CPU       ███░░░░░░░   31% · 4 cores ▂▇▁▃``: the total, then one glyph per core
    (as many as the width allows)."""
    total = sum(percents) / len(percents) if percents else 0.0
    text = Text("host ", style="bold")
    text.append(f"{'CPU':<{NAME_WIDTH}} ")
    _append_bar(text, total / 100, colors)
    text.append(f" {total:>8.0f}%")
    if percents:
        text.append(f" · {len(percents)} cores ")
        room = max(width - text.cell_len - 2, 0)
        glyphs = "".join(CORE_GLYPHS[min(int(p / 100 * len(CORE_GLYPHS)), len(CORE_GLYPHS) - 1)]
                         for p in percents[:room])
        text.append(glyphs, style=colors["accent"])
    return text


def host_line(host: HostSnapshot, colors: dict[str, str]) -> Text:
    fraction = host.ram_used / host.ram_total if host.ram_total else 0.0
    text = Text("host ", style="bold")
    text.append(f"{'RAM':<{NAME_WIDTH}} ")
    _append_bar(text, fraction, colors)
    text.append(f" {fmt.gib(host.ram_used, host.ram_total):>9}")
    if host.swap_total:
        used, total = fmt_bytes(host.swap_used, compact=True), fmt_bytes(host.swap_total, compact=True)
        text.append(f" · swap {used or '0'}/{total}")
    text.append(f" · load {host.load1:.1f}/{host.cpu_count}")
    return text


def slots_text(devices: list) -> str:
    """``slots gpu0=2 gpu1=3``: what the dashboard's ``+``/``-`` keys change."""
    return "slots " + " ".join(f"{d.id}={d.slots}" for d in devices) if devices else ""


def short_name(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``H100 80GB``: the vendor is the same on every line."""
    words = name.removeprefix("NVIDIA ").split()
    short = ""
    for word in words:
        if len(short) + len(word) + (1 if short else 0) > NAME_WIDTH:
            break
        short = f"{short} {word}" if short else word
    return short or (words[0] if words else name)[:NAME_WIDTH]


def _append_bar(text: Text, fraction: float, colors: dict[str, str]) -> None:
    filled, empty = fmt.bar(fraction, BAR_WIDTH)
    text.append(filled, style=colors["warning"] if fraction >= BUSY_FRACTION else colors["accent"])
    text.append(empty, style="dim")

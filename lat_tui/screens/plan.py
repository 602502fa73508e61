"""The plan screen: pick suites, rounds, seed:dataset pairs, devices and slots, the plan's options
(fusion, warm start, CPU, OOM retries, config overrides, a sweep), then start. ``tab`` and ``enter`` move
between fields as lat_tui.screens.fields says, so keys typed ahead land in the next field."""

from __future__ import annotations

from rich.markup import escape
from rich.text import Text
from textual import on, work
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, Footer, Input, Label, SelectionList, Static

from lat_core.errors import LatError
from lat_core.front.client import AUTO_REMEDIES, KNOWN_DATASETS, GpuSnapshot
from lat_tui import fmt
from lat_tui.context import AppContext
from lat_tui.plan_form import (ALLOW_CPU, CPU, EMPTY_FORM, WARM_START, PlanForm, form_from_saved_plan, problem_lines,
                               start_run)
from lat_tui.screens.fields import FIELD_KEYS, FieldFocus
from lat_tui.widgets.checked_list import CheckedSelectionList
from lat_tui.widgets.monitor import no_gpu_text


class RunStarted(Message):
    def __init__(self, run_id: int):
        super().__init__()
        self.run_id = run_id


class PlanRejected(Message):
    def __init__(self, problems: list[str], title: str):
        super().__init__()
        self.problems = problems
        self.title = title


def _field(label: str, widget, hint: str = "") -> Horizontal:
    parts = [Label(label, classes="field-label"), widget]
    if hint:
        parts.append(Label(hint, classes="field-hint"))
    return Horizontal(*parts, classes="field")


def datasets_hint() -> str:
    glue = sorted(d.removeprefix("glue-tvt_") for d in KNOWN_DATASETS if d.startswith("glue-tvt_"))
    other = sorted(d for d in KNOWN_DATASETS if not d.startswith("glue-tvt_"))
    return f"datasets: {' '.join(other)} glue-tvt_{{{','.join(glue)}}} or a directory"


class PlanScreen(FieldFocus, Screen[int | None]):
    """Dismisses with the new run's id, or None when left with escape."""

    HELP_TITLE = "Plan a new run"

    BINDINGS = [
        Binding("ctrl+s", "start", "Start run", priority=True),
        Binding("escape", "back", "Back"),
        Binding("ctrl+q", "app.quit", "Quit"),
        *FIELD_KEYS,
        Binding("enter", "submit_field", "Next field (in a text field)", show=False, priority=True),
    ]

    def __init__(self, context: AppContext, *, can_go_back: bool = False):
        super().__init__()
        self.context = context
        self.can_go_back = can_go_back
        self._starting = False
        self._sweep_search: dict = {}  # the last run's stages or halving, kept with the Sweep field's points

    def compose(self) -> ComposeResult:
        snapshot = self.context.probe.snapshot()
        last = self._last_form()
        suites = self._suite_list(last.suites)
        yield Static("[b]New run[/b]  tab: next field · space: toggle · ctrl+s: start"
                     + (" · [dim]last run's values[/dim]" if last.suites else ""), id="plan-title")
        with VerticalScroll(id="plan-form", can_focus=False):
            yield _field("Suites", suites)
            yield Static(id="suite-about", classes="hint")
            yield _field("Rounds", Input(last.rounds, id="rounds", placeholder="all", compact=True), "all, or 1 2")
            yield _field("Pairs", Input(last.pairs, id="pairs", placeholder="seed:dataset, e.g. 1:tiny-sst2 2:tiny-sst2",
                                        compact=True))
            yield Static(datasets_hint(), classes="hint")
            yield _field("Devices", _device_list(snapshot, last.devices))
            if not snapshot.available:
                yield Static(Text("jobs run on the CPU · ").append_text(no_gpu_text(snapshot.reason)), classes="hint")
            yield _field("Slots", Input(last.slots, id="slots", placeholder="auto", compact=True),
                         "auto, one number, or one per GPU")
            yield _field("Countdown", Input(last.countdown, id="countdown", placeholder="0", compact=True),
                         "minutes before start")
            yield _field("Output", Input(last.output_root, id="output", placeholder="runs", compact=True))
            yield _field("Env", Input(last.env, id="env", placeholder="KEY=VALUE ...", compact=True))
            yield _field("Fuse", Input(last.fuse, id="fuse", placeholder="auto", compact=True),
                         "auto, yes or no: same-base jobs share a process")
            yield _field("Options", _switch_list(last.switches))
            yield _field("On OOM", Input(last.on_oom, id="on-oom", placeholder="no retries", compact=True),
                         "remedies to retry with, max_retries=N")
            yield Static(f"remedies: {' '.join(AUTO_REMEDIES)}", classes="hint")
            yield _field("Overrides", Input(last.overrides, id="overrides", placeholder="train.lr=0.001 ...",
                                            compact=True), "config fields for every job")
            yield _field("Sweep", Input(last.sweep, id="sweep", placeholder="train.lr=1e-4,2e-4 peft.r=8,16",
                                        compact=True), "a job per combination")
            yield Static(self._sweep_hint(last), id="sweep-hint", classes="hint")
            yield ProblemsBox(id="problems")
            yield Button("Start run", id="start", variant="primary", compact=True)
        yield Footer()

    def _sweep_hint(self, last: PlanForm) -> str:
        self._sweep_search = dict(last.sweep_search)
        kept = f" · the last run's {' and '.join(last.sweep_search)} kept" if last.sweep_search else ""
        return ("zip:FIELD=V1,V2 in step · random:FIELD=V1,V2 or random:FIELD=log_uniform:1e-5,1e-3 "
                f"with draws=N seed=S{kept}")

    def _last_form(self) -> PlanForm:
        """The last run's plan, to start from; an empty form when there is none or it cannot be read."""
        try:
            run = self.context.client.latest_run()
        except LatError:
            return EMPTY_FORM
        return form_from_saved_plan(run.plan) if run else EMPTY_FORM

    def _suite_list(self, picked: list[str]) -> SelectionList:
        options = []
        for name in self.context.registry.names():
            options.append((f"{escape(name)}  [dim]{escape(self._suite_summary(name))}[/dim]", name, name in picked))
        return CheckedSelectionList(*options, id="suites", compact=True)

    def _suite_summary(self, name: str) -> str:
        try:
            suite = self.context.registry.get(name)
        except LatError as exc:
            return f"unusable: {exc.message}"
        jobs = sum(len(configs) for configs in suite.rounds.values())
        return f"{len(suite.rounds)} round(s), {jobs} config(s)"

    @on(SelectionList.SelectionHighlighted, "#suites")
    def _about_suite(self, event: SelectionList.SelectionHighlighted) -> None:
        """The highlighted suite's description in full, wrapped at words (one line per suite in the
        list keeps every suite in view)."""
        self.query_one("#suite-about", Static).update(Text(self._suite_about(event.selection.value)))

    def _suite_about(self, name: str) -> str:
        count = self.query_one("#suites", SelectionList).option_count
        try:
            about = " ".join(self.context.registry.get(name).description.split())
        except LatError as exc:
            about = f"unusable: {exc.message}"
        return f"{name}: {about or '(no description)'}  ·  {count} suites, ✓ marks the picked ones"

    def on_mount(self) -> None:
        self.query_one("#suites", SelectionList).focus()

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action == "back":
            return self.can_go_back
        return True

    def action_submit_field(self) -> None:
        """``enter`` in a text field goes to the next field; elsewhere it is the widget's own key
        (toggles an option, presses the button)."""
        if not isinstance(self.focused, Input):
            raise SkipAction()
        self.focus_next()

    @on(Button.Pressed, "#start")
    def _start_pressed(self) -> None:
        self.action_start()

    def action_back(self) -> None:
        if self.can_go_back:
            self.dismiss(None)

    def action_start(self) -> None:
        if self._starting:
            return
        self._starting = True
        self._show_problems(["checking the plan ..."], busy=True)
        self._start_in_background(self.read_form())

    def read_form(self) -> PlanForm:
        value = lambda wid: self.query_one(f"#{wid}", Input).value  # noqa: E731
        return PlanForm(
            suites=list(self.query_one("#suites", SelectionList).selected),
            rounds=value("rounds"), pairs=value("pairs"),
            devices=list(self.query_one("#devices", SelectionList).selected),
            slots=value("slots"), countdown=value("countdown"), output_root=value("output"), env=value("env"),
            fuse=value("fuse"), switches=list(self.query_one("#switches", SelectionList).selected),
            on_oom=value("on-oom"), overrides=value("overrides"), sweep=value("sweep"),
            sweep_search=self._sweep_search,
        )

    @work(thread=True, group="start-run", exclusive=True)
    def _start_in_background(self, form: PlanForm) -> None:
        ctx = self.context
        try:
            run_id = start_run(form, ctx.state_dir, ctx.registry, ctx.probe, ctx.engine_starter)
        except LatError as exc:
            self.post_message(PlanRejected(problem_lines(exc), exc.title))
        else:
            self.post_message(RunStarted(run_id))

    @on(PlanRejected)
    def _rejected(self, message: PlanRejected) -> None:
        self._starting = False
        self._show_problems([message.title, *message.problems])

    @on(RunStarted)
    def _started(self, message: RunStarted) -> None:
        self._starting = False
        self.dismiss(message.run_id)

    def _show_problems(self, lines: list[str], busy: bool = False) -> None:
        box = self.query_one("#problems", Static)
        box.set_class(not busy, "-error")
        box.update(Text("\n".join(lines)))
        box.display = bool(lines)
        if not busy:  # after the new text is laid out, or only its first line would be scrolled to
            self.call_after_refresh(box.scroll_visible)


class ProblemsBox(Static):
    """The plan's problems under the form, scrolled into view once laid out at their height: a
    scroll asked for right after the update can run before that layout on a busy machine and
    show only the first line (the new text's height changes the box)."""

    def on_resize(self) -> None:
        if self.display and self.has_class("-error"):
            self.scroll_visible(animate=False)


def _device_list(snapshot: GpuSnapshot, picked: list) -> SelectionList:
    """The GPUs and the CPU; the last run's choice where it still exists, else the CPU without GPUs."""
    present = {gpu.index for gpu in snapshot.gpus} | {CPU}
    picked = [d for d in picked if d in present] or ([] if snapshot.available else [CPU])
    options = [(_gpu_label(gpu), gpu.index, gpu.index in picked) for gpu in snapshot.gpus]
    options.append(("cpu", CPU, CPU in picked))
    return CheckedSelectionList(*options, id="devices", compact=True)


def _switch_list(on: list[str]) -> SelectionList:
    """The plan's yes/no options, each with what it does."""
    options = [("warm start  [dim]jobs fork from a process that has imported torch & co.[/dim]", WARM_START),
               ("allow cpu  [dim]train a model too big for the CPU there anyway[/dim]", ALLOW_CPU)]
    return CheckedSelectionList(*[(label, name, name in on) for label, name in options], id="switches", compact=True)


def _gpu_label(gpu) -> str:
    util = "" if gpu.utilization is None else f" · {gpu.utilization}% busy"
    return f"GPU {gpu.index} {gpu.name} · {fmt.gib(gpu.memory_used, gpu.memory_total)} used{util}"

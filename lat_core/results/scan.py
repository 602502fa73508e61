"""Walking an output tree and turning each job folder into a JobResult or a Skipped with a reason.

Layout: ``<root>/<data>_seed<seed>/<config_stem>/`` holding ``job.yaml`` and ``events.jsonl``.
Why every folder yields something: a results table that silently leaves out a crashed job misleads;
each folder that is not in a table is listed with the reason, and no folder can stop the scan.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, SupportsIndex, SupportsInt, TypedDict

import yaml

from lat_core.errors import LatError
from lat_core.contract.jobdir import (CheckpointSaved, EarlyStop, Eval, Failed, Finished, JobDir, Memory, Started, Step,
                                      SweepPoint, SweepRowsError, job_peak)
from lat_core.contract.jobdir.event_reader import decode_text
from lat_core.contract.jobdir.names import EVENTS as EVENTS_FILE
from lat_core.contract.jobdir.names import JOB_YAML as CONFIG_FILE
from lat_core.results.best import choose_best, scored_steps
from lat_core.results.metrics import Metrics, MetricSpec, dataset_key, ranked_by, spec_for

if TYPE_CHECKING:  # accounts builds on this module
    from lat_core.results.accounts import JobAccount

log = logging.getLogger(__name__)

FOREIGN_REASON = "foreign folder: no job.yaml or events.jsonl"
UNKNOWN = "unknown"  # the data of a folder that names none
_PAIR_DIR = re.compile(r"^(?P<data>.+)_seed(?P<seed>-?\d+)$")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ResultsError(LatError):
    title = "Cannot aggregate results"




@dataclass(frozen=True)
class JobResult:
    """One finished job: identity, the chosen checkpoint, its metrics, curves and peak memory."""

    job_dir: Path
    config: str
    data: str
    dataset: str
    seed: int | None
    metric: str  # the main metric it was ranked by
    best_step: int
    best_value: float
    checkpoint: Path
    validation: Metrics
    test: Metrics | None
    losses: tuple[tuple[int, float], ...] = ()
    curve: tuple[tuple[int, float], ...] = ()
    peak_gpu_bytes: int | None = None
    peak_rss_bytes: int | None = None
    trainable_params: int | None = None
    total_params: int | None = None
    config_path: Path | None = None
    bad_lines: int = 0
    task: str | None = None  # the task the trainer computed its metrics for (None: an older trainer's job)
    partial: bool = False  # best so far of a job that failed, was cancelled or never finished
    higher_is_better: bool = True  # the direction of ``metric``
    stopped_early: EarlyStop | None = None  # its training stopped before max_steps (train.early_stopping)
    point: SweepPoint | None = None  # the sweep point it trains (its overrides.json), None outside a sweep
    point_problem: str | None = None  # why its overrides.json could not say its point (it is in no sweep table)


# What a job folder says of its job when the journal is not asked (Skipped.ended)
ENDED_OK, ENDED_FAILED, UNFINISHED_STATE, NOT_STARTED_STATE = "succeeded", "failed", "unfinished", "not started"
PRUNED_STATE = "pruned"  # the plan's sweep stopped the job or never started it (lat_core.engine.halving, promotion)


@dataclass(frozen=True)
class Identity:
    """Which job a folder holds: config name, data as given, seed, and its sweep point if any."""

    config: str
    data: str
    seed: int | None
    point: SweepPoint | None = None
    point_problem: str | None = None  # why its overrides.json could not say its point

    @property
    def dataset(self) -> str:
        return dataset_key(self.data)


@dataclass(frozen=True)
class Skipped:
    """A folder that is not in any table, and why. A job's folder also says which job
    (``identity``), how the job ended by its events (``ended``: ENDED_OK with no usable eval,
    ENDED_FAILED, UNFINISHED_STATE, NOT_STARTED_STATE, PRUNED_STATE; "" for a folder that is no job's), and its
    best checkpointed eval so far where it has one (``partial``: ``--include-partial``)."""

    path: Path
    reason: str
    identity: Identity | None = None
    ended: str = ""
    partial: JobResult | None = None
    stopped_early: EarlyStop | None = None  # a job that ended well but early, with no usable eval


@dataclass(frozen=True)
class Report:
    """Everything aggregated from one output root. ``results`` are the jobs in the tables;
    ``accounts`` every job of the runs asked for (lat_core.results.accounts), ``partial`` the
    best-so-far results of those that did not succeed (when asked for)."""

    root: Path
    results: tuple[JobResult, ...]
    skipped: tuple[Skipped, ...]
    seconds: float = 0.0
    accounts: tuple[JobAccount, ...] = ()
    partial: tuple[JobResult, ...] = ()
    runs: tuple[int, ...] = ()  # the journal's runs accounted for (none: the folders alone)

    @property
    def datasets(self) -> list[str]:
        return sorted({r.dataset for r in self.results})

    @property
    def warnings(self) -> list[str]:
        """Jobs kept in the tables despite bad lines in their events.jsonl, and jobs left out of the
        sweep tables because their overrides.json could not say their point."""
        return [f"{r.job_dir}: {r.bad_lines} bad line(s) in events.jsonl skipped"
                for r in self.results if r.bad_lines] + \
            [f"{job.job_dir}: {job.point_problem}; left out of the sweep tables"
             for job in self.accounts if job.point_problem]


@dataclass
class ParsedEvents:
    """What an events.jsonl says, keyed for lookups (evals and checkpoints by step)."""

    started: Started = field(default_factory=Started)  # no started event: every field unknown
    finished: Finished | None = None
    failed: Failed | None = None
    memory: Memory = field(default_factory=Memory)
    losses: list[tuple[int, float]] = field(default_factory=list)
    evals: dict[str, dict[int, Metrics]] = field(default_factory=dict)  # split -> step -> metrics
    checkpoints: dict[int, str] = field(default_factory=dict)
    bad_lines: int = 0
    last_event: str | None = None


def _on_step(parsed: ParsedEvents, event: Step) -> None:
    if event.loss is not None:
        parsed.losses.append((event.step, event.loss))


def _on_eval(parsed: ParsedEvents, event: Eval) -> None:
    parsed.evals.setdefault(event.split, {})[event.step] = dict(event.metrics)


def _on_checkpoint(parsed: ParsedEvents, event: CheckpointSaved) -> None:
    parsed.checkpoints[event.step] = event.folder_name


_HANDLERS: dict[type, Callable[[ParsedEvents, Any], None]] = {
    Finished: lambda p, e: setattr(p, "finished", e),
    Failed: lambda p, e: setattr(p, "failed", e),
    Memory: lambda p, e: setattr(p, "memory", e),
    Step: _on_step,
    Eval: _on_eval,
    CheckpointSaved: _on_checkpoint,
}


def _on_started(parsed: ParsedEvents, event: Started) -> None:
    """A new attempt (a resume or a retry): how an earlier one ended is not how the job ends."""
    parsed.started, parsed.finished, parsed.failed = event, None, None


_HANDLERS[Started] = _on_started


def parse_events(text: str) -> ParsedEvents:
    """Parse events.jsonl text (the contract's reader); the lines it skips are counted bad."""
    read = decode_text(text)
    parsed = ParsedEvents(bad_lines=read.skipped.count)
    for event in read.events:
        _HANDLERS[type(event)](parsed, event)
        parsed.last_event = event.kind
    return parsed


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None


def _read_config(path: Path) -> dict[str, Any]:
    """job.yaml as a dict; an unreadable or odd file gives {} (identity then comes from events)."""
    text = _read_text(path)
    if text is None:
        return {}
    try:
        loaded = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        log.warning("%s: unreadable job.yaml (%s)", path, exc)
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _int_or_none(value: str | bytes | SupportsInt | SupportsIndex | None) -> int | None:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _identity(job_dir: Path, config: dict[str, Any], started: Started) -> Identity:
    """Config name, data and seed: the started event, then job.yaml, then folder names; the sweep
    point from overrides.json."""
    pair = _PAIR_DIR.match(job_dir.parent.name)
    name = started.config or config.get("name") or job_dir.name
    data = started.data or config.get("data") or (pair["data"] if pair else UNKNOWN)
    seed = started.seed if started.seed is not None else config.get("seed")
    if seed is None and pair:
        seed = pair["seed"]
    return Identity(str(name), str(data), _int_or_none(seed), *_sweep_point(job_dir))


def _sweep_point(job_dir: Path) -> tuple[SweepPoint | None, str | None]:
    """The job's sweep point, or None and why its overrides.json cannot say it (a hand-edited
    file must not stop the results: the job stays in the other tables, and the report says so)."""
    try:
        return JobDir(job_dir).sweep_point(), None
    except SweepRowsError as exc:
        return None, str(exc)


def _status_problem(parsed: ParsedEvents) -> str | None:
    """Why a job's events rule it out of the tables (failed, unfinished), or None."""
    if parsed.failed is not None:
        kind = parsed.failed.error_type or "error"
        message = (parsed.failed.message or "").strip().splitlines()
        return f"failed: {kind}" + (f": {message[0][:160]}" if message else "")
    if parsed.finished is None:
        return f"unfinished: no finished event (last event: {parsed.last_event or 'none'})"
    if parsed.finished.status != "ok":
        return f"failed: finished with status {parsed.finished.status!r}"
    return None


def _no_best_reason(parsed: ParsedEvents, metric: str) -> str:
    validation = parsed.evals.get("validation", {})
    prefix = f"corrupt events.jsonl ({parsed.bad_lines} bad lines): " if parsed.bad_lines else ""
    if not validation:
        return prefix + "no validation eval"
    if not scored_steps(validation, metric):
        return prefix + f"no validation eval reports {metric!r}"
    return prefix + f"no validation eval at a checkpointed step (checkpoints: {len(parsed.checkpoints)})"


def _needs_config(started: Started) -> bool:
    """job.yaml is parsed only when the started event lacks the identity (YAML parsing is slow)."""
    return not (started.config and started.data and started.seed is not None)


class PeakMemory(TypedDict):
    peak_gpu_bytes: int | None
    peak_rss_bytes: int | None


def _peak_memory(job_dir: Path, parsed: ParsedEvents) -> PeakMemory:
    """The job's peak as status and triage show it (lat_core.contract.jobdir.job_peak says which)."""
    peak = job_peak(JobDir(job_dir).read_peak_usage(), parsed.memory)
    return {"peak_gpu_bytes": peak.gpu_bytes, "peak_rss_bytes": peak.rss_bytes}


def job_spec(data: str, parsed: ParsedEvents) -> MetricSpec:
    """What the job was ranked by: the metric and direction its trainer recorded (the started
    event; an older trainer's finished event names the metric of its ``best``), else its task's."""
    started, best = parsed.started, parsed.finished.best if parsed.finished else None
    named = started.metric or (best.get("metric") if isinstance(best, Mapping) else None)
    return ranked_by(spec_for(data, started.task), named if isinstance(named, str) else None,
                     started.higher_is_better)


def build_result(job_dir: Path, has_config: bool, parsed: ParsedEvents) -> JobResult | Skipped:
    folder = JobDir(job_dir)
    config = _read_config(folder.job_yaml) if has_config and _needs_config(parsed.started) else {}
    who = _identity(job_dir, config, parsed.started)
    spec = job_spec(who.data, parsed)
    best = choose_best(parsed.evals.get("validation", {}), parsed.checkpoints, spec,
                       parsed.evals.get("test"))
    if best is None:
        return Skipped(job_dir, _no_best_reason(parsed, spec.main), identity=who)
    return JobResult(
        job_dir=job_dir, config=who.config, data=who.data, dataset=who.dataset, seed=who.seed,
        metric=spec.main, best_step=best.step, best_value=best.value,
        checkpoint=job_dir / best.checkpoint, validation=best.validation, test=best.test,
        losses=tuple(sorted(parsed.losses)),
        curve=tuple(scored_steps(parsed.evals.get("validation", {}), spec.main)),
        **_peak_memory(job_dir, parsed),
        trainable_params=parsed.started.trainable_params, total_params=parsed.started.total_params,
        config_path=folder.job_yaml if has_config else None, bad_lines=parsed.bad_lines,
        task=parsed.started.task, higher_is_better=spec.higher_is_better,
        stopped_early=parsed.finished.stopped_early if parsed.finished else None, point=who.point,
        point_problem=who.point_problem)


def _not_started(job_dir: Path, folder: JobDir) -> Skipped:
    if not folder.job_yaml.is_file():
        return Skipped(job_dir, FOREIGN_REASON)
    who = _identity(job_dir, _read_config(folder.job_yaml), Started())
    return Skipped(job_dir, "not started: no events.jsonl", identity=who, ended=NOT_STARTED_STATE)


def _pruned(job_dir: Path, folder: JobDir, why: str) -> Skipped:
    """A point the plan's sweep stopped or never started: its partial curve is no result."""
    who = _identity(job_dir, _read_config(folder.job_yaml), Started()) if folder.job_yaml.is_file() else None
    return Skipped(job_dir, f"{PRUNED_STATE}: {why}", identity=who, ended=PRUNED_STATE)


def _scan_job_unguarded(job_dir: Path) -> JobResult | Skipped:
    folder = JobDir(job_dir)
    pruned = folder.pruned_reason()  # a sweep's point stopped early or never started: no result
    if pruned is not None:
        return _pruned(job_dir, folder, pruned)
    events_text = _read_text(folder.events_path)
    if events_text is None:
        return _not_started(job_dir, folder)
    parsed = parse_events(events_text)
    outcome = build_result(job_dir, folder.job_yaml.is_file(), parsed)
    problem = _status_problem(parsed)
    if problem is None:
        return outcome if isinstance(outcome, JobResult) else \
            replace(outcome, ended=ENDED_OK, stopped_early=parsed.finished.stopped_early if parsed.finished else None)
    ended = UNFINISHED_STATE if problem.startswith(UNFINISHED_STATE) else ENDED_FAILED
    if isinstance(outcome, JobResult):
        return Skipped(job_dir, problem, _identity_of(outcome), ended, replace(outcome, partial=True))
    return Skipped(job_dir, problem, outcome.identity, ended)


def _identity_of(result: JobResult) -> Identity:
    return Identity(result.config, result.data, result.seed, result.point, result.point_problem)


def scan_job(job_dir: Path) -> JobResult | Skipped:
    """One job folder -> JobResult or Skipped; an unexpected error becomes a Skipped with its reason."""
    try:
        return _scan_job_unguarded(Path(job_dir))
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("%s: cannot read job folder (%s: %s)", job_dir, type(exc).__name__, exc)
        return Skipped(Path(job_dir), f"unreadable: {type(exc).__name__}: {exc}")


def _subdirs(path: str) -> list[os.DirEntry[str]]:
    with os.scandir(path) as entries:
        return sorted((e for e in entries if e.is_dir() and not e.name.startswith((".", "_"))),
                      key=lambda e: e.name)


def _is_job_dir(path: str) -> bool:
    return os.path.exists(os.path.join(path, EVENTS_FILE)) or \
        os.path.exists(os.path.join(path, CONFIG_FILE))


def find_job_dirs(root: Path) -> list[Path]:
    """Candidate job folders: ``<root>/<pair>/<stem>``; a top folder that is itself a job counts too.

    Folders whose names start with ``_`` or ``.`` (such as ``_results``) are not candidates. A top
    folder with no subfolders is returned as a candidate so that it is reported as foreign.
    """
    found: list[Path] = []
    for top in _subdirs(str(root)):
        if _is_job_dir(top.path):
            found.append(Path(top.path))
            continue
        subs = _subdirs(top.path)
        if subs:
            found.extend(Path(s.path) for s in subs)
        else:
            found.append(Path(top.path))
    return found


def scan_tree(root: Path | str, workers: int | None = None) -> Report:
    """Scan every job folder under ``root``; ``workers`` > 1 reads folders in a thread pool."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise ResultsError(f"output root {str(root)!r} is not a directory", where=str(root))
    started = time.perf_counter()
    dirs = find_job_dirs(root)
    if workers and workers > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            outcomes = list(pool.map(scan_job, dirs))
    else:
        outcomes = [scan_job(d) for d in dirs]
    results = tuple(o for o in outcomes if isinstance(o, JobResult))
    skipped = tuple(o for o in outcomes if isinstance(o, Skipped))
    return Report(root=root, results=results, skipped=skipped,
                  seconds=time.perf_counter() - started)

"""Reading the journal and a job's folder from any shell: ``runs``, ``show JOB``, ``logs JOB``.

    lat-tui runs [--json]                   every run, oldest first
    lat-tui show JOB [--json]               config, masked env, attempts, history, diagnosis, folder
    lat-tui logs JOB [-f] [-n N]            the job's train.log (-f follows it until the job ends)
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import yaml

from lat_core.front.client import JOB_FINAL, Client, job_config_path, job_log_path
from lat_core.contract.rows import AttemptRow, JobRow
from lat_tui.cli_common import EXIT_DETACHED, EXIT_FAILED, EXIT_OK, cli_entry, client_for, state_flags
from lat_tui.columns import job_name, state_text
from lat_tui.format import fmt_elapsed
from lat_tui.json_views import dumps, event_view, job_view, run_view
from lat_tui.status import job_notes
from lat_tui.tail import TailState, read_tail

HELP = {
    "runs": "every run in the journal: state, jobs by state, output root",
    "show": "one job: resolved config, masked env, attempts, history, diagnosis, folder",
    "logs": "a job's train.log (-f follows it until the job ends, -n N lines)",
}


def build_parser(verb: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"lat-tui {verb}", parents=[state_flags(run=False)], description=HELP[verb])
    if verb in ("show", "logs"):
        p.add_argument("job", type=int, help="job id (as in `lat-tui status`)")
    if verb in ("runs", "show"):
        p.add_argument("--json", action="store_true", help="print one JSON document (schema 1; see README)")
    if verb == "logs":
        p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the job ends")
        p.add_argument("-n", "--lines", type=int, default=50, metavar="N",
                       help="start with the last N lines (default 50; 0: only new ones)")
        p.add_argument("--poll", type=float, default=0.5, help=argparse.SUPPRESS)
    return p


@cli_entry("lat-tui")
def main(argv: list[str]) -> int:
    """``argv`` starts with the verb."""
    verb = argv[0]
    args = build_parser(verb).parse_args(argv[1:])
    client = client_for(args)
    return {"runs": runs, "show": show, "logs": logs}[verb](client, args)


# ---------------------------------------------------------------------- runs
def runs(client: Client, args) -> int:
    rows = [(run, client.job_table(run.id)) for run in client.runs()]
    if args.json:
        print(dumps({"runs": [run_view(run, jobs) for run, jobs in rows]}))
        return EXIT_OK
    if not rows:
        print(f"no run in {client.state_dir}")
        return EXIT_FAILED
    table = [("run", "state", "created", "jobs", "output root")]
    for run, jobs in rows:
        counts = run_view(run, jobs).jobs_by_state
        summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "-"
        state = state_text(run.state) + (" (paused)" if run.paused else "")
        table.append((str(run.id), state, time.strftime("%Y-%m-%d %H:%M", time.localtime(run.created)), summary,
                      run.output_root))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return EXIT_OK


# ---------------------------------------------------------------------- show
def show(client: Client, args) -> int:
    job = client.job(args.job)
    attempts = client.attempts(job.id)
    history = client.history(job.run_id, job_id=job.id)
    config = read_config(job)
    if args.json:
        group = client.fused_groups(job.run_id).get(job.fused_group or "")
        view = job_view(job, group=group, family=client.model_family(job))
        print(dumps({"job": view, "argv": job.argv, "env": job.env, "config": config,
                     "attempts": [attempt_view(a) for a in attempts],
                     "history": [event_view(t) for t in history],
                     "diagnosis": job.diagnosis.to_json() if job.diagnosis else None}))
        return EXIT_OK
    print(f"job {job.id}  {job_name(job, client.model_family(job))}  ({job.state}, run {job.run_id})")
    print(f"folder: {job.job_dir}")
    print(f"command: {' '.join(job.argv)}")
    for note in job_notes(job):
        print(note)
    _section("environment (secrets masked)", [f"{k}={v}" for k, v in sorted(job.env.items())])
    _section("config (job.yaml)", yaml.safe_dump(config, sort_keys=False).splitlines() if config else
             ["(no job.yaml in the folder)"])
    _section("attempts", [_attempt_line(a) for a in attempts])
    started = history[0].ts if history else 0.0
    _section("history", [f"[{fmt_elapsed(t.ts - started)}] {t.new_state}  {t.detail}".rstrip() for t in history])
    if job.diagnosis:
        d = job.diagnosis
        _section("diagnosis", [d.one_line(), d.diagnosis, *(f"remedy {r.key}: {r.change}" for r in d.remedies)])
    return EXIT_OK


@dataclasses.dataclass(frozen=True)
class AttemptView:
    n: int
    device: str
    pid: int | None
    launched: float
    ended: float | None
    returncode: int | None


def attempt_view(a: AttemptRow) -> AttemptView:
    return AttemptView(a.n, a.device, a.pid, a.launched, a.ended, a.returncode)


def read_config(job: JobRow) -> dict | None:
    try:
        data = yaml.safe_load(job_config_path(job.job_dir).read_text())
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def _attempt_line(a: AttemptRow) -> str:
    took = fmt_elapsed(a.ended - a.launched) if a.ended else "running"
    end = "" if a.returncode is None else f", exit {a.returncode}"
    return f"#{a.n} on {a.device}, pid {a.pid or '-'}, {took}{end}"


def _section(title: str, lines: list[str]) -> None:
    print(f"\n{title}:")
    for line in lines or ["(none)"]:
        print(f"  {line}")


# ---------------------------------------------------------------------- logs
def logs(client: Client, args) -> int:
    job = client.job(args.job)
    path = job_log_path(job.job_dir)
    if not args.follow:
        if not path.exists():
            print(f"{path}: no log yet (job {job.id} is {job.state})")
            return EXIT_FAILED if job.state in JOB_FINAL else EXIT_OK
        for line in last_lines(path, args.lines):
            print(line)
        return EXIT_OK
    try:
        return follow_log(client, job, path, args.lines, args.poll)
    except KeyboardInterrupt:
        return EXIT_DETACHED


def last_lines(path: Path, n: int) -> list[str]:
    """The last ``n`` lines, reading at most the tail reader's first window."""
    lines, _ = read_tail(TailState(path=path))
    return lines[-n:] if n > 0 else []


def follow_log(client: Client, job: JobRow, path: Path, n: int, poll: float) -> int:
    """Print the last ``n`` lines, then new ones as they come, until the job has ended and the
    log holds nothing more (a requeued job's new attempt goes on in the same file)."""
    tail = TailState(path=path)
    if path.exists():
        lines, tail = read_tail(tail)
        for line in lines[-n:] if n > 0 else []:
            print(line, flush=True)
    else:
        tail = TailState(path=path, offset=0)  # created later: read it from its start
    while True:
        ended = client.job(job.id).state in JOB_FINAL  # read before the file, so no last line is lost
        lines, tail = read_tail(tail)
        for line in lines:
            print(line, flush=True)
        if ended and not lines:
            return EXIT_OK
        time.sleep(poll)

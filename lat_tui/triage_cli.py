"""``lat-tui triage JOB|PATH [--returncode N] [--json]``: explain why a job failed, without the TUI.

JOB is a job id, as every other verb takes it (its folder is read); PATH is a job folder (its exit
record, events, log and job.yaml are read) or any log file (then ``--returncode`` gives the exit
status; without it the log alone decides). A folder named only by digits is given as ``./17``.
Plain text is for a person at a shell; ``--json`` prints one object for scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

from lat_core.front.client import Diagnosis, TriageError, classify, fmt_bytes
from lat_tui.cli_common import cli_entry, client_for, state_flags
from lat_tui.columns import job_name

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lat-tui triage", description="Explain why a job failed.",
                                parents=[state_flags(run=False)])
    p.add_argument("path", metavar="JOB|PATH",
                   help="a job id (as in `lat-tui status`), a job folder, or a log file")
    p.add_argument("--returncode", type=int, default=None,
                   help="the exit status (negative: killed by that signal); default: from the job's "
                        "exit record, or unknown for a bare log")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


@cli_entry("lat-tui triage")
def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    heading, path = _job_named(args) if args.path.isdigit() else ("", Path(args.path).expanduser())
    if not path.exists():
        print(f"lat-tui triage: no such job folder or log: {path}", file=sys.stderr)
        return EXIT_USAGE
    try:
        diagnosis = classify(path, args.returncode)
    except TriageError as exc:
        print(f"lat-tui triage: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(diagnosis.to_json(), indent=1) if args.json else heading + render_text(diagnosis))
    return 0


def _job_named(args) -> tuple[str, Path]:
    """A job id's heading (``job 7 gla/lora_r8 1:sst2``, the job table's name) and its folder."""
    client = client_for(args)
    job = client.job(int(args.path))
    return f"job {job.id} {job_name(job, client.model_family(job))}\n", Path(job.job_dir)


def render_text(diagnosis: Diagnosis) -> str:
    parts = [f"{diagnosis.cls}: {diagnosis.title}", "", _wrap(diagnosis.diagnosis)]
    if diagnosis.numbers:
        parts += ["", "Numbers:", *(f"  {k:<28} {_value(k, v)}" for k, v in diagnosis.numbers.items())]
    if diagnosis.remedies:
        parts += ["", "Remedies (cheapest first):"]
        for rank, remedy in enumerate(diagnosis.remedies, 1):
            parts += [f"  {rank}. {remedy.key} ({remedy.cost})", _wrap(remedy.change, "     ")]
            parts += [f"     set {key}={value}" for key, value in remedy.patch.items()]
    if diagnosis.evidence:
        parts += ["", "Evidence:", *(f"  | {line}" for line in diagnosis.evidence)]
    return "\n".join(parts)


def _value(key: str, value) -> str:
    """Byte counts read both ways: exact for scripts and eyes that check, human for the rest."""
    if key.endswith("_bytes") and isinstance(value, int):
        return f"{fmt_bytes(value, unknown='?')} ({value} bytes)"
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def _wrap(text: str, indent: str = "") -> str:
    return textwrap.fill(text, width=100, initial_indent=indent, subsequent_indent=indent)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""``lat-tui rerun JOB_DIR [--output-root DIR] [--gpus ...] [--state-dir DIR]``: the same job again.

A new run in the journal with one job: the job folder's resolved config (seed and dataset too), its
env (secrets from your environment) and process count, into a new folder; followed like a headless
run (exit 0 when it succeeded, 1 when not, 2 when the folder cannot be rerun).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from lat_core.errors import LatError

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lat-tui rerun", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job_dir", help="the folder of the job to run again (holds job.yaml)")
    p.add_argument("--output-root", help="where the new job folder goes (default: beside the job's "
                                         "output root, named <root>-rerun-<time>)")
    p.add_argument("--gpus", help="GPU indices or 'cpu' (default: the CPU when the job ran there, else "
                                  "as many GPUs from 0 as the job had processes)")
    p.add_argument("--state-dir", help="journal and engine state (default $LAT_STATE_DIR or ~/.local/state/lat)")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _rerun(args)
    except LatError as exc:
        print(f"lat-tui rerun: {exc.title}: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _gpus(text: str | None):
    if text is None or text.strip() == "cpu":
        return None if text is None else "cpu"
    return [int(g) for g in text.replace(",", " ").split()]


def _rerun(args) -> int:
    from lat_core.client import Client
    from lat_core.rerun import prepare_rerun
    from lat_tui.headless import follow_detachable

    client = Client(args.state_dir)
    try:
        gpus = _gpus(args.gpus)
    except ValueError:
        print(f"lat-tui rerun: --gpus {args.gpus!r}: expected GPU indices ('0 1') or 'cpu'", file=sys.stderr)
        return EXIT_USAGE
    prepared, missing = prepare_rerun(Path(args.job_dir), args.output_root, gpus, dict(os.environ))
    for name in missing:
        print(f"note: {name} was set (masked) for the original job but is not in your environment; "
              "the rerun runs without it", file=sys.stderr)
    run = client.create_prepared(prepared)
    job = prepared.jobs[0]
    print(f"run {run.id}: rerun of {Path(args.job_dir).resolve()} -> {job.job_dir}", flush=True)
    client.ensure_engine(prepared.plan.env)
    return follow_detachable(client, run.id, out=sys.stdout)

"""``lat-tui rerun JOB_DIR [--output-root DIR] [--gpus ...] [--keep-env NAMES] [--allow-cpu] [--state-dir DIR]``:
the same job again.

A new run in the journal with one job: the job folder's resolved config (seed and dataset too), the
seeds' variables of its env (HP_*, DATALOADER_*, GLA_*, EVAL_GEN_*, LR_*, ...; secrets from your
environment) and process count, into a new folder; followed like a headless run (exit 0 when it
succeeded, 1 when not, 2 when the folder cannot be rerun or the preflight finds that the job cannot
work here, as for a new run: a big model on the CPU without --allow-cpu, an unreachable hub). Other
saved variables (PYTHONPATH, LD_LIBRARY_PATH, PATH, ...) could run code from wherever the folder came
from: they are dropped unless --keep-env names them.
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
    p.add_argument("--keep-env", default="", metavar="NAMES",
                   help="comma-separated saved variables beyond the seeds' ones to keep, e.g. PYTHONPATH,LD_LIBRARY_PATH")
    p.add_argument("--allow-cpu", action="store_true",
                   help="train a model too big for the CPU there anyway (the preflight refuses it otherwise)")
    p.add_argument("--state-dir", help="journal and engine state (default $LAT_STATE_DIR or ~/.local/state/lat)")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _rerun(args)
    except LatError as exc:
        print(f"lat-tui rerun: {exc.title}: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _rerun(args) -> int:
    from lat_core.front.client import Client, prepare_rerun
    from lat_tui.headless import follow_detachable

    client = Client(args.state_dir)
    keep = tuple(n.strip() for n in args.keep_env.split(",") if n.strip())
    prepared, env = prepare_rerun(Path(args.job_dir), args.output_root, args.gpus, dict(os.environ), keep_env=keep,
                                  allow_cpu=args.allow_cpu)
    for name in env.missing:
        print(f"note: {name} was set (masked) for the original job but is not in your environment; "
              "the rerun runs without it", file=sys.stderr)
    if env.dropped:
        print(f"note: not taken from the folder's saved env: {', '.join(env.dropped)} "
              "(pass --keep-env NAMES to keep them)", file=sys.stderr)
    run = client.create_prepared(prepared)
    job = prepared.jobs[0]
    print(f"run {run.id}: rerun of {Path(args.job_dir).resolve()} -> {job.job_dir}", flush=True)
    client.ensure_engine(prepared.plan.env)
    return follow_detachable(client, run.id, out=sys.stdout)

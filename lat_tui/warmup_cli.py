"""``lat-tui warmup [--plan P | SUITE ...] [--pairs SEED:DATA,...] [--gpus N] [--configs DIR]``: compile
the GPU kernels a plan's jobs will use, ahead of time.

On a fresh GPU machine Triton compiles and autotunes fla's kernels the first time a shape is met;
this does it once, now, into the Triton cache the jobs share (TRITON_CACHE_DIR, default
~/.triton/cache), printing each shape and its time. Exit 0 when done (also on a machine without a
GPU, where there is nothing to compile), 1 when the compile failed, 2 for a plan or suite that
does not load.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from lat_core.errors import LatError

EXIT_USAGE = 2
HELP = "compile a plan's GPU kernels ahead of time (first run on a GPU machine)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lat-tui warmup", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("suites", nargs="*", metavar="SUITE", help="suites whose jobs to compile for (all rounds)")
    p.add_argument("--plan", help="a plan file or a shipped plan's name, instead of suites")
    p.add_argument("--pairs", help="seed:dataset pairs for the suites (default: the shell's DATA and HP_SEED)")
    p.add_argument("--gpus", type=int, help="the GPU index to compile on (default: the first)")
    p.add_argument("--configs", help="your config tree, searched before the shipped one (default $LAT_CONFIGS)")
    p.add_argument("--save-tunings", action="store_true",
                   help="autotune every kernel (slow: run it alone on an idle GPU) and save the chosen configs "
                        "for this GPU model, so later fresh machines of the model skip autotuning "
                        "(to $LAT_KERNEL_TUNINGS_DIR, else the shipped tables)")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if bool(args.plan) == bool(args.suites):
        print("lat-tui warmup: give --plan or one or more suites (not both)", file=sys.stderr)
        return EXIT_USAGE
    from lat_core.front.client import plan_kernel_shapes, warm_up_kernels

    try:
        plan = _plan(args)
        shapes = plan_kernel_shapes(plan)
    except LatError as exc:
        print(f"lat-tui warmup: {exc.title}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not shapes:
        print("no GLA job in the plan: no kernels to compile")
        return 0
    for shape in shapes:
        print(f"shape: {shape.describe()}, widths {', '.join(map(str, shape.widths))}", flush=True)
    return 0 if warm_up_kernels(shapes, args.gpus, plan.env, args.save_tunings) == 0 else 1


def _plan(args):
    """The plan to compile for: --plan, or the suites (all rounds) with the pairs given."""
    from lat_core.front.client import pair_from_env, plan_from_mapping, read_plan_file, suite_registry

    registry = suite_registry(args.configs)
    if args.plan:
        path, data = read_plan_file(args.plan, args.configs)
        return plan_from_mapping(data, registry, where=str(path), base=path.parent)
    data: dict = {"suites": [{"name": name, "rounds": "all"} for name in args.suites]}
    pairs = args.pairs or pair_from_env(os.environ)
    if pairs:
        data["pairs"] = pairs
    return plan_from_mapping(data, registry, where="command line", base=Path.cwd())

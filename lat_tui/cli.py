"""``lat-tui``: the TUI with no plan; headless with ``--plan`` or the seeds' flags; ``status``.

    lat-tui                                   open the TUI (re-attaches to a live run)
    lat-tui --plan configs/plans/demo.yaml    run a plan headless
    lat-tui --suite E4 --round all --pairs "87:glue-tvt_cola 13:glue-tvt_rte" \\
            --gpus "2 3 5 6" --gpu-plan "3,3,1,3" --sleep-mins 5   the seeds' flags, same plan
    lat-tui ... --save-plan plan.yaml         write the plan out instead of running it
    lat-tui status                            print the latest run without the TUI
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path


from lat_core.errors import LatError, PlanError

EXIT_USAGE = 2
CONTROL_VERBS = ("cancel", "pause", "resume", "requeue", "slots", "countdown", "add")

# seeds' flag -> plan field, so errors about a flag name the flag the user typed
FLAG_FIELDS = {
    "suite": "suites", "pairs": "pairs", "gpus": "gpus", "gpu_plan": "slots",
    "sleep_mins": "countdown_minutes", "output_root": "output_root", "env": "env",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lat-tui", description="LAT control center",
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--plan", help="plan YAML to run headless")
    p.add_argument("--suite", action="append", help="suite name (repeatable, or space-separated)")
    p.add_argument("--round", default=None, help="'all' or round numbers ('1 2' / '1,2'); applies to every --suite")
    p.add_argument("--pairs", help="'seed:dataset' pairs, space-separated")
    p.add_argument("--gpus", help="GPU indices ('2 3 5 6') or 'cpu'")
    p.add_argument("--gpu-plan", help="slots per GPU: 'auto' (the default: memory decides), one number for all, "
                   "or one per GPU ('3,3,1,3')")
    p.add_argument("--sleep-mins", type=float, help="countdown before the first launch, in minutes")
    p.add_argument("--output-root", help="where job directories go")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="environment override (repeatable)")
    p.add_argument("--resume", action="store_true", default=None,
                   help="restart jobs that had started from their last checkpoint-* (strict)")
    p.add_argument("--overwrite", action="store_true", default=None, help="rerun jobs that already succeeded")
    p.add_argument("--save-plan", metavar="FILE", help="write the plan to FILE and exit")
    p.add_argument("--state-dir", help="journal and engine state (default $LAT_STATE_DIR or ~/.local/state/lat)")
    p.add_argument("--configs", help="configs directory (default: the project's configs/)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["status"]:
        from lat_tui.status import main as status_main

        return status_main(argv[1:])
    if argv[:1] == ["triage"]:
        from lat_tui.triage_cli import main as triage_main

        return triage_main(argv[1:])
    if argv[:1] == ["rerun"]:
        from lat_tui.rerun_cli import main as rerun_main

        return rerun_main(argv[1:])
    if argv[:1] == ["results"]:
        from lat_tui.results_cli import main as results_main

        return results_main(argv[1:])
    if argv[:1] and argv[0] in CONTROL_VERBS:
        from lat_tui.control_cli import main as control_main

        return control_main(argv)
    if argv[:1] == ["attach"]:
        argv = argv[1:]
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except LatError as exc:
        print(f"lat-tui: {exc.title}: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _dispatch(args) -> int:
    from lat_core.config.paths import configs_root
    from lat_core.service import default_state_dir

    state_dir = Path(args.state_dir).expanduser() if args.state_dir else default_state_dir()
    if not (args.plan or args.suite or args.save_plan):
        from lat_tui.app import run_tui

        return run_tui(state_dir, configs_root(args.configs))
    plan = plan_from_args(args)
    if args.save_plan:
        Path(args.save_plan).write_text(plan.to_yaml())
        print(f"plan written to {args.save_plan}")
        return 0
    from lat_tui.headless import run_headless

    return run_headless(plan, state_dir, registry=_registry(args))


def _registry(args):
    from lat_core.config.paths import configs_root
    from lat_core.config.suites import SuiteRegistry

    return SuiteRegistry(configs_root(args.configs))


def plan_from_args(args):
    """The plan from --plan (if given) with the seeds' flags layered on top, validated."""
    from lat_core.plan import plan_from_mapping

    data, where, base = {}, "command line", Path.cwd()
    if args.plan:
        data, where, base = _read_plan_mapping(Path(args.plan)), args.plan, Path(args.plan).parent
    flags = flags_to_mapping(args)
    if flags:
        where = f"{where} + flags" if args.plan else where
    if "env" in flags and isinstance(data.get("env"), dict):  # --env adds to the plan's env: (and wins)
        flags["env"] = {**data["env"], **flags["env"]}
    data.update(flags)
    try:
        return plan_from_mapping(data, _registry(args), where=where, base=base if args.plan else Path.cwd())
    except PlanError as exc:
        raise PlanError([_name_flags(p, set(flags)) for p in exc.problems], where=exc.where) from None


def _read_plan_mapping(path: Path) -> dict:
    from lat_core.plan import load_plan_mapping

    return load_plan_mapping(path)


def flags_to_mapping(args) -> dict:
    data: dict = {}
    if args.suite:
        names = [n for chunk in args.suite for n in chunk.split()]
        data["suites"] = [{"name": n, "rounds": args.round or "all"} for n in names]
    if args.pairs is not None:
        data["pairs"] = args.pairs
    if args.gpus is not None:
        data["gpus"] = args.gpus
    if args.gpu_plan is not None:
        data["slots"] = args.gpu_plan
    if args.sleep_mins is not None:
        data["countdown_minutes"] = args.sleep_mins
    if args.output_root is not None:
        data["output_root"] = args.output_root
    if args.env:
        data["env"] = _parse_env_flags(args.env)
    for flag in ("resume", "overwrite"):
        if getattr(args, flag):
            data[flag] = True
    return data


def _parse_env_flags(items: list[str]) -> dict:
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise PlanError([f"--env {item!r}: expected KEY=VALUE"], where="command line")
        env[key] = value
    return env


def _name_flags(problem: str, from_flags: set[str]) -> str:
    """``field 'slots': ...`` -> ``--gpu-plan: ...`` (``--suite (suites[0].rounds): ...`` when nested),
    for the fields the flags set; fields from the plan file keep their YAML names."""
    for flag, field in FLAG_FIELDS.items():
        if field not in from_flags:
            continue
        option = "--" + flag.replace("_", "-")
        problem = re.sub(rf"field '{field}((?:\[\d+\])?(?:\.[\w.]+)?)'",
                         lambda m: f"{option} ({field}{m.group(1)})" if m.group(1) else option, problem)
    return problem


if __name__ == "__main__":
    sys.exit(main())

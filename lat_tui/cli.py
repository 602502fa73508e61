"""``lat-tui``: the TUI with no plan; headless with ``--plan`` or the seeds' flags; subcommands.

    lat-tui                                   open the TUI (re-attaches to a live run)
    lat-tui --plan configs/plans/demo.yaml    run a plan headless
    lat-tui --suite E4 --round all --pairs "87:glue-tvt_cola 13:glue-tvt_rte" \\
            --gpus "2 3 5 6" --gpu-plan "3,3,1,3" --sleep-mins 5   the seeds' flags, same plan
    lat-tui ... --save-plan plan.yaml         write the plan out instead of running it
    lat-tui SUBCOMMAND ...                    status, logs, wait, cancel, ... (listed below)
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path


from lat_core.errors import LatError, PlanError

EXIT_USAGE = 2

# seeds' flag -> plan field, so errors about a flag name the flag the user typed
FLAG_FIELDS = {
    "suite": "suites", "pairs": "pairs", "gpus": "gpus", "gpu_plan": "slots",
    "sleep_mins": "countdown_minutes", "output_root": "output_root", "env": "env", "after": "after",
    "configs": "configs",
    # a sweep's parts (lat_tui.sweep_words), random's n and seed before the rest of random
    "sweep": "sweep.grid", "sweep_zip": "sweep.zip", "sweep_draws": "sweep.random.n", "sweep_seed": "sweep.random.seed",
    "sweep_random": "sweep.random",
}
SWEEP_FLAGS = {"grid": "--sweep", "zip": "--sweep-zip", "random": "--sweep-random", "draws": "--sweep-draws"}


def build_parser() -> argparse.ArgumentParser:
    from lat_core.front.client import LAT_VERSION
    from lat_tui.verbs import verbs_help

    p = argparse.ArgumentParser(prog="lat-tui", description="LAT control center" + __doc__.split("\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=verbs_help())
    p.add_argument("--version", action="version", version=f"lat-tui {LAT_VERSION}")
    p.add_argument("old_form", nargs="*", metavar="SUITE [ROUND]",
                   help="the old launch scripts' form: `lat-tui E5 all` is `lat-tui --suite E5 --round all`")
    p.add_argument("--plan", help="plan YAML to run headless")
    p.add_argument("--suite", action="append", help="suite name (repeatable, or space-separated)")
    p.add_argument("--round", default=None, help="'all' or round numbers ('1 2' / '1,2'); applies to every --suite")
    p.add_argument("--pairs", help="'seed:dataset' pairs, space-separated")
    p.add_argument("--gpus", help="GPU indices ('2 3 5 6') or 'cpu' (default $GPU_IDS, as the old scripts read it)")
    p.add_argument("--gpu-plan", help="slots per GPU: 'auto' (the default: memory decides), one number for all, "
                   "or one per GPU ('3,3,1,3') (default $GPU_PLAN)")
    p.add_argument("--sleep-mins", type=float, help="countdown before the first launch, in minutes")
    p.add_argument("--output-root", help="where job directories go")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="environment override (repeatable)")
    p.add_argument("--sweep", action="append", default=[], metavar="FIELD=V1,V2,...",
                   help="a grid over a config field or variable (train.lr=1e-4,2e-4): one job per combination "
                   "(repeatable; adds to the plan's sweep: grid)")
    p.add_argument("--sweep-zip", action="append", default=[], metavar="FIELD=V1,V2,...",
                   help="lists in step: point i takes the i-th value of each (repeatable; the plan's sweep: zip)")
    p.add_argument("--sweep-random", action="append", default=[], metavar="FIELD=V1,V2,...|FIELD=KIND:LOW,HIGH",
                   help="a random search's space: choices, or a range (uniform, log_uniform, int_uniform) "
                   "(repeatable; the plan's sweep: random: space; with --sweep-draws)")
    p.add_argument("--sweep-draws", type=int, metavar="N", help="how many distinct points to draw from --sweep-random")
    p.add_argument("--sweep-seed", type=int, metavar="S", help="the seed of the draws (default 0): the same points again")
    p.add_argument("--after", action="append", default=[], metavar="JOB",
                   help="start the plan's jobs only once job JOB (an id of `lat-tui status`, any run) succeeded; "
                   "cancel them if it fails or is cancelled (repeatable)")
    p.add_argument("--resume", action="store_true", default=None,
                   help="restart jobs that had started from their last checkpoint-* (strict)")
    p.add_argument("--overwrite", action="store_true", default=None, help="rerun jobs that already succeeded")
    p.add_argument("--allow-cpu", action="store_true", default=None,
                   help="train a model too big for the CPU there anyway (the preflight refuses it otherwise)")
    p.add_argument("--save-plan", metavar="FILE", help="write the plan to FILE and exit")
    p.add_argument("--state-dir", help="journal and engine state (default $LAT_STATE_DIR or ~/.local/state/lat)")
    p.add_argument("--configs", help="your config tree (suites/, experiments/, peft/, plans/), searched before "
                   "the shipped one (default $LAT_CONFIGS)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Every journal or disk fault ends as one message naming the path and exit 2, no traceback; a
    reader that went away (``| head``) ends the command quietly."""
    from lat_tui.cli_common import quiet_broken_pipe

    argv = sys.argv[1:] if argv is None else argv
    try:
        try:
            return _route(argv)
        except LatError as exc:
            print(f"lat-tui: {exc.title}: {exc}", file=sys.stderr)
            return EXIT_USAGE
    except BrokenPipeError:  # `lat-tui ... | head`: the reader left; every verb ends quietly
        return quiet_broken_pipe()


def _on_journal(argv: list[str], run, *args) -> int:
    """``run(*args)``, with SQLite and disk errors turned into a JournalError naming the journal."""
    from lat_core.front.client import journal_faults_in, resolve_state_dir

    with journal_faults_in(resolve_state_dir(_given_state_dir(argv))):
        return run(*args)


def _given_state_dir(argv: list[str]) -> str | None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--state-dir")
    return parser.parse_known_args(argv)[0].state_dir


def _route(argv: list[str]) -> int:
    from lat_tui.verbs import BY_NAME

    if argv[:1] and argv[0] in BY_NAME:
        return _on_journal(argv, BY_NAME[argv[0]].run, argv[1:])
    if argv[:1] == ["attach"]:
        argv = argv[1:]
    args = build_parser().parse_args(argv)
    return _dispatch(args) if args.save_plan else _on_journal(argv, _dispatch, args)


def _dispatch(args) -> int:
    from lat_core.front.client import resolve_state_dir

    state_dir = resolve_state_dir(args.state_dir)
    _take_old_form(args)
    if not (args.plan or args.suite or args.save_plan):
        from lat_tui.app import run_tui

        return run_tui(state_dir, args.configs)
    plan = plan_from_args(args)
    if args.save_plan:
        Path(args.save_plan).write_text(plan.to_yaml())
        print(f"plan written to {args.save_plan}")
        return 0
    from lat_tui.headless import run_headless

    return run_headless(plan, state_dir, registry=_registry(args))


def _registry(args):
    from lat_core.front.client import suite_registry

    return suite_registry(args.configs)


def plan_from_args(args):
    """The plan from --plan (if given) with the seeds' flags layered on top, validated."""
    from lat_core.front.client import plan_from_mapping, read_plan_file

    data, where, base = {}, "command line", Path.cwd()
    if args.plan:
        plan_path, data = read_plan_file(args.plan, args.configs)
        where, base = str(plan_path), plan_path.parent
    flags = flags_to_mapping(args)
    if flags:
        where = f"{where} + flags" if args.plan else where
    if "env" in flags and isinstance(data.get("env"), dict):  # --env adds to the plan's env: (and wins)
        flags["env"] = {**data["env"], **flags["env"]}
    if "sweep" in flags and isinstance(data.get("sweep"), dict):  # --sweep* add to the plan's sweep (and win)
        from lat_tui.sweep_words import merged

        flags["sweep"] = merged(data["sweep"], flags["sweep"])
    data.update(flags)
    if "pairs" not in data and (pair := _pair_from_shell()):
        data["pairs"] = pair
    try:
        return plan_from_mapping(data, _registry(args), where=where, base=base if args.plan else Path.cwd())
    except PlanError as exc:
        raise PlanError([_name_flags(p, set(flags) | _sweep_fields_given(args)) for p in exc.problems],
                        where=exc.where) from None


def _sweep_fields_given(args) -> set[str]:
    """The sweep parts the flags set, as FLAG_FIELDS names them: a random search from the flags has
    its n and seed named by theirs, given or not (a missing --sweep-draws is its problem)."""
    given = {FLAG_FIELDS[flag] for flag in ("sweep", "sweep_zip") if getattr(args, flag)}
    if args.sweep_random or args.sweep_draws is not None or args.sweep_seed is not None:
        given |= {FLAG_FIELDS[flag] for flag in ("sweep_random", "sweep_draws", "sweep_seed")}
    return given


def _take_old_form(args) -> None:
    """``lat-tui E5 all`` (the runbooks' ``gla_round_clean.sh E5 all``) as ``--suite E5 --round all``."""
    if not args.old_form:
        return
    if args.suite or len(args.old_form) > 2:
        raise PlanError([f"unexpected arguments {' '.join(args.old_form)!r}: give a subcommand (lat-tui --help), "
                         "or one suite and its rounds (lat-tui E5 all), or --suite"], where="command line")
    name, known = args.old_form[0], _registry(args).names()
    if name not in known:
        from lat_tui.verbs import BY_NAME

        raise PlanError([f"{name!r} is neither a subcommand ({', '.join(BY_NAME)}) nor a suite "
                         f"({', '.join(known)})"], where="command line")
    args.suite = [name]
    if len(args.old_form) == 2 and args.round is None:
        args.round = args.old_form[1]
    args.old_form = []


def _pair_from_shell() -> str | None:
    """No pairs given: the round script's ``DATA`` and ``HP_SEED`` from the launching shell are the pair."""
    from lat_core.front.client import EnvValueError, pair_from_env

    try:
        return pair_from_env(os.environ)
    except EnvValueError as exc:
        raise PlanError([str(exc)], where="the launching shell") from None


def _shell_default(given: str | None, variable: str) -> str | None:
    """A flag, else the old scripts' variable for it from the launching shell (GPU_IDS, GPU_PLAN)."""
    return given if given is not None else (os.environ.get(variable) or None)


def flags_to_mapping(args) -> dict:
    data: dict = {}
    _take_old_form(args)
    if args.suite:
        names = [n for chunk in args.suite for n in chunk.split()]
        data["suites"] = [{"name": n, "rounds": args.round or "all"} for n in names]
    if args.pairs is not None:
        data["pairs"] = args.pairs
    if (gpus := _shell_default(args.gpus, "GPU_IDS")) is not None:
        data["gpus"] = gpus
    if (slots := _shell_default(args.gpu_plan, "GPU_PLAN")) is not None:
        data["slots"] = slots
    if args.sleep_mins is not None:
        data["countdown_minutes"] = args.sleep_mins
    if args.output_root is not None:
        data["output_root"] = args.output_root
    if args.configs:  # over the plan's own tree; from here, not from the plan file's folder
        data["configs"] = str(Path(args.configs).expanduser().resolve())
    if args.env:
        data["env"] = _parse_env_flags(args.env)
    _sweep_flags(args, data)
    if args.after:
        data["after"] = " ".join(args.after)
    for flag in ("resume", "overwrite", "allow_cpu"):
        if getattr(args, flag):
            data[flag] = True
    return data


def _sweep_flags(args, data: dict) -> None:
    """--sweep, --sweep-zip, --sweep-random, --sweep-draws, --sweep-seed as the plan's ``sweep:``."""
    from lat_tui.sweep_words import SweepWords, to_mapping

    words = SweepWords(args.sweep, args.sweep_zip, args.sweep_random, args.sweep_draws, args.sweep_seed)
    if words:
        data["sweep"], problems = to_mapping(words, SWEEP_FLAGS)
        if problems:
            raise PlanError(problems, where="command line")


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
        problem = re.sub(rf"field '{re.escape(field)}((?:\[\d+\])?(?:\.[\w.]+)?)'",
                         lambda m: f"{option} ({field}{m.group(1)})" if m.group(1) else option, problem)
    return problem


if __name__ == "__main__":
    sys.exit(main())

"""CLI: `python -m lat_core.train --cfg job.yaml [--resume | --overwrite] [--debug]`.

Why the exit codes: the engine treats exit 2 as "the job as written cannot
run" (bad config, nothing to resume, already finished), exit 75 as "saved a
checkpoint when asked (SIGUSR1, a time limit near) and stopped: resume it"
(lat_core.train.save_request), and anything else non-zero as a crash worth
retrying or reporting.
"""
from __future__ import annotations

import argparse
import sys
import time

from lat_core.titles import job_label, set_title


def parse_args(argv=None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m lat_core.train", description=__doc__)
    p.add_argument("--cfg", required=True, help="job YAML file")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="continue from the newest checkpoint")
    mode.add_argument("--overwrite", action="store_true", help="discard previous events and checkpoints")
    p.add_argument("--debug", action="store_true", help="log every step, print tracebacks")
    return p.parse_args(argv)


ADAPTER_KEYS = {"peft_type", "r", "lora_alpha", "target_modules", "method", "init_lora_weights"}


def adapter_spec_hint(path: str) -> str | None:
    """The old train.py took an adapter JSON as --cfg (003: ``--cfg cfg/peft/lora/x.json``); LAT's
    job file names the adapter spec instead. The replacement to use, when ``path`` is such a spec."""
    from lat_core.config.yaml_files import YamlFileError, read_yaml

    try:
        raw = read_yaml(path)
    except YamlFileError:
        return None
    if not isinstance(raw, dict) or "model" in raw or "data" in raw or not ADAPTER_KEYS & set(raw):
        return None
    return (f"--cfg: {path} is an adapter (PEFT) spec, not a job file: put its fields under `peft:` of an "
            f"experiment YAML (LAT's names: method, r, alpha, dropout, target_modules, as in "
            f"configs/peft/lora_qkvo_r8.yaml, or `peft: {{spec: NAME}}`) with model, data and train, "
            f"and pass that YAML to --cfg")


def main(argv=None) -> int:
    """Parse, check the output dir, train; map config problems to exit 2."""
    t_start = time.time()
    from .save_request import EXIT_SAVED_TO_RESUME, SavedToResume, install

    install()  # before the heavy imports: Slurm's warning may come while they load
    args = parse_args(argv)
    set_title(f"lat: {job_label(args.cfg)}")
    from lat_core.config.job import TrainConfigError, load_config
    from lat_core.contract.jobdir import JobDir
    from lat_core.errors import OutputPathError
    from .checkpoints import prepare_output_dir
    from .loop import failed, log, run

    events = None
    try:
        cfg = load_config(args.cfg)
        prepare_output_dir(cfg.output_dir, args.resume, args.overwrite)
        events = JobDir(cfg.output_dir).event_writer()
        run(cfg, events, resume=args.resume, debug=args.debug,
            argv=list(sys.argv[1:] if argv is None else argv))
    except SavedToResume as exc:
        log(f"{exc}; exit {EXIT_SAVED_TO_RESUME}")
        return EXIT_SAVED_TO_RESUME
    except (TrainConfigError, OutputPathError) as exc:  # OutputPathError: a planted events.jsonl symlink
        failed(events, exc)
        print(f"error: {adapter_spec_hint(args.cfg) or exc}", file=sys.stderr, flush=True)
        return 2
    except BaseException as exc:
        failed(events, exc)
        raise
    finally:
        if events is not None:
            events.close()
    log(f"total wall time {time.time() - t_start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

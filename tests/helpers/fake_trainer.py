"""A stand-in trainer for engine tests: real process, controllable duration and exit code.

    python fake_trainer.py --sleep 0.3 --exit 0 --record DIR

It appends "start <t> <pid>" / "end <t>" lines to DIR/<name>.log so tests can check concurrency,
writes a few step events to ./events.jsonl (cwd is the job dir), and exits as told.

For sweep tests: ``--steps N`` logs N steps (3 by default) and ``--evals accuracy=0.5,0.7,...``
writes a validation eval after each step with the next value.

For remedy tests: ``--echo`` writes an ``echo`` event with what this attempt sees (job.yaml read
and resolved the way the real trainer does, env variables, device, --resume); ``--fail-log KIND``
dies with that failure's log signature while ``LAT_ATTEMPT`` is below ``--fail-before-attempt``.
"""

import argparse
import json
import os
import sys
import time


CUDA_OOM = """Traceback (most recent call last):
  File "train.py", line 10, in <module>
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB \
of which 1.06 GiB is free. Including non-PyTorch memory, this process has 22.50 GiB memory in use. Of the \
allocated memory 21.90 GiB is allocated by PyTorch, and 120.50 MiB is reserved by PyTorch but unallocated."""


# One line each, as PyTorch, torchrun, the driver or Slurm print them.
FAILURE_LOGS = {
    "cuda_oom": CUDA_OOM,
    "cuda_oom_fragmented": CUDA_OOM.replace("120.50 MiB is reserved", "3.00 GiB is reserved"),
    "cuda_oom_contended": CUDA_OOM.replace("of which 1.06 GiB is free.", "of which 1.06 GiB is free. Process 4242 "
                                           "has 14.00 GiB memory in use.").replace("has 22.50 GiB", "has 8.50 GiB"),
    "dataloader_killed": "RuntimeError: DataLoader worker (pid 4711) is killed by signal: Killed.",
    "ecc": "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "time_limit": "slurmstepd: error: *** JOB 77 ON node1 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***",
    "port_in_use": "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
                   "network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use",
    "python": "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\nValueError: a bug",
    "disk_full": "OSError: [Errno 28] No space left on device: 'checkpoint-2/adapter_model.safetensors'",
}


def _echo(names: list[str], resumed: bool) -> dict:
    from lat_core.config.job import load_config

    train = {}
    if os.path.exists("job.yaml"):
        cfg = load_config("job.yaml")
        train = {k: getattr(cfg.train, k) for k in ("batch_size", "grad_accum", "gradient_checkpointing", "num_workers")}
    return {"event": "echo", "attempt": int(os.environ.get("LAT_ATTEMPT", "0")), "train": train,
            "env": {n: os.environ.get(n) for n in names}, "device": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "resumed": resumed}


def _save_checkpoint(step: int, finished: bool) -> None:
    """checkpoint-<step> as the trainer writes it: weights first, trainer_state.json last (a save
    that crashed in between leaves the folder without it)."""
    os.makedirs(f"checkpoint-{step}", exist_ok=True)
    with open(f"checkpoint-{step}/adapter_model.safetensors", "wb") as fh:
        fh.write(b"fake weights")
    if finished:
        with open(f"checkpoint-{step}/trainer_state.json", "w") as fh:
            json.dump({"global_step": step}, fh)
        with open("events.jsonl", "a") as ev:
            ev.write(json.dumps({"t": time.time(), "event": "checkpoint", "step": step,
                                 "path": f"checkpoint-{step}"}) + "\n")


def _fail(kind: str, checkpoint: bool, half_checkpoint: bool) -> int:
    if checkpoint:
        _save_checkpoint(2, finished=True)
    if half_checkpoint:
        _save_checkpoint(4, finished=False)
    print(FAILURE_LOGS[kind], file=sys.stderr, flush=True)
    return 1


def _refuse_resume() -> int | None:
    """As the trainer does: --resume needs a complete checkpoint (the contract's rule)."""
    from lat_core.contract.jobdir import JobDir

    if JobDir(".").latest_checkpoint() is None:
        print(f"config error: --resume: no checkpoint-* directory in {os.getcwd()} holds a complete save",
              file=sys.stderr, flush=True)
        return 2
    return None


def _batch_size() -> int:
    import yaml

    with open("job.yaml") as fh:
        return int(yaml.safe_load(fh)["train"]["batch_size"])


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sleep", type=float, default=0.2)
    p.add_argument("--exit", type=int, default=0)
    p.add_argument("--record", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--print-env", help="write this variable's value to ./env.txt")
    p.add_argument("--oom-above-batch", type=int, help="die with a CUDA OOM when job.yaml's batch is larger")
    p.add_argument("--echo", nargs="*", metavar="VAR", help="write an echo event (config, these variables)")
    p.add_argument("--fail-log", choices=sorted(FAILURE_LOGS), help="die with this failure's log")
    p.add_argument("--fail-before-attempt", type=int, default=10**6, help="... while LAT_ATTEMPT is below this")
    p.add_argument("--checkpoint", action="store_true", help="save a checkpoint-2 folder before failing")
    p.add_argument("--half-checkpoint", action="store_true",
                   help="crash while saving checkpoint-4 before failing (its trainer_state.json never written)")
    p.add_argument("--like-trainer", action="store_true",
                   help="as lat_core.train does: log a finished event, refuse a finished folder without a "
                        "flag and --resume without a complete checkpoint")
    p.add_argument("--say-steps", action="store_true", help="print a line per step (a log to follow)")
    p.add_argument("--wait-for", help="before ending, wait (up to 300 s) until this file exists: a test's "
                                        "release, so the job runs as long as the test needs, whatever the load")
    p.add_argument("--steps", type=int, default=3, help="steps to log")
    p.add_argument("--evals", help="METRIC=V1,V2,...: a validation eval after step i with value i")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--overwrite", action="store_true")
    a = p.parse_args()
    if a.like_trainer and not (a.resume or a.overwrite) and _finished_before():
        print("events.jsonl already holds a finished run; pass --overwrite to start again", file=sys.stderr)
        return 2
    refused = _refuse_resume() if a.like_trainer and a.resume else None
    if refused is not None:
        return refused
    if a.overwrite and os.path.exists("events.jsonl"):
        os.remove("events.jsonl")
    if a.echo is not None:
        with open("events.jsonl", "a") as ev:
            ev.write(json.dumps(_echo(a.echo, a.resume)) + "\n")
    if a.fail_log and int(os.environ.get("LAT_ATTEMPT", "1")) < a.fail_before_attempt:
        return _fail(a.fail_log, a.checkpoint, a.half_checkpoint)
    if a.oom_above_batch is not None and _batch_size() > a.oom_above_batch:
        print(CUDA_OOM, file=sys.stderr, flush=True)
        return 1
    if a.print_env:
        with open("env.txt", "w") as fh:
            fh.write(os.environ.get(a.print_env, "<unset>") + "\n")
    log = os.path.join(a.record, f"{a.name}.log")
    with open(log, "a") as fh:
        flags = " ".join(f for f in ("--resume", "--overwrite") if getattr(a, f[2:]))
        fh.write(f"start {time.time()} {os.getpid()} {flags}".rstrip() + "\n")
    with open("events.jsonl", "a") as ev:
        ev.write(json.dumps({"t": time.time(), "event": "started", "pid": os.getpid()}) + "\n")
        evals = _evals(a.evals)
        for step in range(1, a.steps + 1):
            time.sleep(a.sleep / a.steps)
            ev.write(json.dumps({"t": time.time(), "event": "step", "step": step, "loss": 2.0 / step}) + "\n")
            if step <= len(evals[1]):
                ev.write(json.dumps({"t": time.time(), "event": "eval", "step": step, "split": "validation",
                                     "metrics": {evals[0]: evals[1][step - 1]}}) + "\n")
            ev.flush()
            if a.say_steps:
                print(f"step {step}/{a.steps} loss {2.0 / step:.4f}", flush=True)
        _wait_for(a.wait_for)
        if a.like_trainer and not a.exit:
            ev.write(json.dumps({"t": time.time(), "event": "finished"}) + "\n")
    print(f"fake trainer {a.name} done, exiting {a.exit}", flush=True)
    if a.exit:
        print("Traceback (most recent call last):\n  File \"fake_trainer.py\", line 1, in <module>\n"
              f"RuntimeError: injected failure of {a.name}", file=sys.stderr, flush=True)
    with open(log, "a") as fh:
        fh.write(f"end {time.time()}\n")
    return a.exit


def _evals(spec: str | None) -> tuple[str, list[float]]:
    if not spec:
        return "", []
    metric, _, values = spec.partition("=")
    return metric, [float(v) for v in values.split(",")]


def _wait_for(path: str | None, limit_s: float = 300.0) -> None:
    deadline = time.time() + limit_s
    while path and not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.1)


def _finished_before() -> bool:
    from lat_core.contract.jobdir import Finished, JobDir
    return bool(JobDir(".").read_events().of(Finished))


if __name__ == "__main__":
    sys.exit(main())

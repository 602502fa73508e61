"""``lat-tui --plan`` with ``backend: slurm`` on the one-node cluster of ``scripts/slurm_local.sh``, as
the Slurm tests of the front door drive it (tests/integration/test_slurm_{front_door,nodes,fused,pack}.py):
the plan and its config tree, the front end run or started, the run and its jobs found in the journal,
what reached Slurm read back from Slurm, and the steps of the scenarios several tests play. These act
and wait; the tests keep their assertions. Every wait is on a state, never a sleep's length."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from lat_core.contract.commands import CancelJob, CancelRun
from lat_core.contract.journal import Store
from lat_core.contract.jobdir import JobDir, Started, Step
from lat_core.contract.rows import JobRow
from lat_core.contract.state_dir import EngineLock
from lat_core.front.service import open_store
from tests.helpers.waits import wait_until

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "configs" / "experiments"
# the installed entry point (it imports this tree through PYTHONPATH), or what it runs
LAT_TUI = [str(Path(sys.executable).with_name("lat-tui"))] if Path(sys.executable).with_name("lat-tui").exists() \
    else [sys.executable, "-c", "import sys; from lat_tui.cli import main; sys.exit(main())"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NUM_DATA_WORKERS": "0"}
TINY_GLA = ["gla/tiny_lora_qkvo.yaml", "gla/tiny_rslora.yaml", "gla/tiny_lora_accum.yaml"]  # one tiny base: they fuse
UNTIL_STOPPED = {"train": {"max_steps": 1000000, "eval_every": 1000000, "save_every": 1000000}}  # plan overrides
# a plan's jobs train until Slurm warns them, 50 s before their 1-minute limit: each saves and is resubmitted to resume
SAVED_AT_THE_LIMIT = {"overrides": UNTIL_STOPPED, "slurm": {"time": "1", "save_before_end_s": 50}}
LOOK_EVERY_S = 0.5  # each look opens the journal or reads an events file: not ten times a second on a shared CI host


def config_tree(tmp_path: Path, suite: str, experiments: list[str], *, bad_target_in: str | None = None) -> Path:
    """A config tree whose suite ``suite`` runs ``experiments`` in round 1 (the shipped experiments are
    searched too); with ``bad_target_in``, ``{bad_target_in}/bad_target.yaml`` is tiny_lora_qkvo on a
    module the tiny base lacks (it still fuses: the fuse key does not read target modules; the job
    finds it as it builds its model)."""
    root = tmp_path / "configs"
    (root / "suites").mkdir(parents=True)
    if bad_target_in:
        (root / "experiments" / bad_target_in).mkdir(parents=True)
        bad = yaml.safe_load((SHIPPED / "gla" / "tiny_lora_qkvo.yaml").read_text())
        bad["name"], bad["peft"]["target_modules"] = f"{bad_target_in}_bad_target", ["q_proj", "nope_proj"]
        (root / "experiments" / bad_target_in / "bad_target.yaml").write_text(yaml.safe_dump(bad))
    (root / "suites" / f"{suite}.yaml").write_text(yaml.safe_dump({"rounds": {1: experiments}}))
    return root


def on_cpu(plan: dict, **slurm) -> dict:
    """``plan`` as CPU jobs on the fake-GPU node (``gres: none``) with a 10-minute limit, ``slurm``'s
    options under those and the plan's own ``slurm`` fields over all."""
    return {**plan, "slurm": {"gres": "none", "time": "10", **slurm, **plan.get("slurm", {})}}


def lat_tui(tmp_path: Path, configs: Path, plan: dict, *, wait: bool = True):
    """``lat-tui --plan`` on ``plan`` (``backend: slurm``, the pair 1:tiny-sst2, runs under
    ``tmp_path/runs``, the state directory ``tmp_path/state``, unless ``plan`` says otherwise): run to
    its end (``wait``), or started (``running`` ends it)."""
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({"pairs": ["1:tiny-sst2"], "backend": "slurm",
                                    "output_root": str(tmp_path / "runs"), **plan}))
    argv = [*LAT_TUI, "--plan", str(path), "--configs", str(configs), "--state-dir", str(tmp_path / "state")]
    if wait:
        return subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=900)
    return subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@contextmanager
def running(front: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """The started front end, killed if it still runs when the block ends (a wait or a check failed)."""
    try:
        yield front
    finally:
        if front.poll() is None:
            front.kill()


def the_run(tmp_path: Path) -> tuple[Store, int]:
    """The journal of ``tmp_path/state`` once the front end made it, and the run in it."""
    state = tmp_path / "state"
    store = wait_until(lambda: (state / "journal.sqlite").exists() and open_store(state), "journal",
                       every=LOOK_EVERY_S)
    return store, wait_until(lambda: store.runs() and store.runs()[0].id, "run", every=LOOK_EVERY_S)


def the_job(store: Store, run_id: int) -> JobRow:
    """The run's first job, once it has one."""
    return wait_until(lambda: (jobs := store.jobs(run_id)) and jobs[0], "job", every=LOOK_EVERY_S)


def by_stem(store: Store, run_id: int) -> dict[str, JobRow]:
    return {j.stem: j for j in store.jobs(run_id)}


def slurm_jobs_of(store: Store, run_id: int) -> set:
    """The Slurm job ids the run's attempts went into."""
    return {a.pid for j in store.jobs(run_id) for a in store.attempts(j.id)}


def sacct_name(job_id) -> str:
    """The Slurm job's name, from accounting (slurmdbd records a job a moment after it is submitted)."""
    def named():
        out = subprocess.run(["sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "JobName"],
                             capture_output=True, text=True).stdout.split()
        return out[0] if out else None
    return wait_until(named, f"Slurm job {job_id} in sacct", every=LOOK_EVERY_S)


def steps(job: JobRow) -> int:
    """The step events the job's trainer wrote so far."""
    folder = JobDir(job.job_dir)
    return len(folder.read_events().of(Step)) if folder.events_path.is_file() else 0


def resumed_from(job_dir: str | Path) -> list[int | None]:
    """Each started event's resume step, read as the engine reads events (a line mid-write skipped)."""
    return [e.resumed_from for e in JobDir(job_dir).read_events().of(Started)]


def a_member_cancelled(tmp_path: Path, stem: str) -> tuple[Store, int, str, JobRow]:
    """Once the run's three members each took two steps in one Slurm job, the member ``stem`` is
    cancelled through its marker, as the front end asks (a command): the journal, the run, the Slurm
    job and that member, once the journal says it is cancelled."""
    store, run_id = the_run(tmp_path)
    wait_until(lambda: len(store.jobs(run_id)) == 3 and all(steps(j) >= 2 for j in store.jobs(run_id)),
               "three members training", every=LOOK_EVERY_S)
    [slurm_id] = slurm_jobs_of(store, run_id)
    member = by_stem(store, run_id)[stem]
    store.add_command(run_id, CancelJob(member.id))
    wait_until(lambda: store.job(member.id).state == "cancelled", f"{stem} cancelled", every=LOOK_EVERY_S)
    return store, run_id, slurm_id, member


def the_engine_killed_and_back(tmp_path: Path, watched: JobRow) -> None:
    """SIGKILLs the engine of ``tmp_path/state``; returns once the front end has started another and
    ``watched`` has taken a step more (the Slurm job it runs in goes on, under the new engine)."""
    state = tmp_path / "state"
    engine = EngineLock(state).holder().pid
    os.kill(engine, signal.SIGKILL)
    wait_until(lambda: (h := EngineLock(state).holder()) and h.pid != engine and EngineLock(state).is_held(),
               "engine restarted by the front end", every=LOOK_EVERY_S)
    now = steps(watched)
    wait_until(lambda: steps(watched) > now, f"{watched.stem} training on", every=LOOK_EVERY_S)


def scancelled(slurm_id: str, front: subprocess.Popen) -> None:
    """An admin's scancel of the Slurm job (not LAT's); returns once the front end has ended."""
    subprocess.run(["scancel", str(slurm_id)], check=True)
    front.communicate(timeout=300)


def every_job_resumed(store: Store, run_id: int, jobs: int) -> None:
    """Returns once the run's ``jobs`` jobs have each started again from a checkpoint (a plan of
    ``SAVED_AT_THE_LIMIT``)."""
    def resumed() -> bool:
        return len(found := store.jobs(run_id)) == jobs and all(any(resumed_from(j.job_dir)) for j in found)
    wait_until(resumed, "every job resumed", every=LOOK_EVERY_S, explain=lambda: where_jobs_stand(store, run_id))


def where_jobs_stand(store: Store, run_id: int) -> str:
    """Each job's state, attempts, waiting reason, error and resume steps, and the run's last history
    lines: what a hung wait prints."""
    lines = [f"job {j.id} {j.stem}: {j.state}, {j.attempts} attempts, waiting {j.waiting!r}, error {j.error!r}, "
             f"resumed from {resumed_from(j.job_dir)}" for j in store.jobs(run_id)]
    lines += [f"history: {t.job_id} {t.new_state}: {t.detail}" for t in store.transitions(run_id)[-30:]]
    queue = subprocess.run(["squeue", "--all", "-o", "%i %j %T %r %M %l"], capture_output=True, text=True, timeout=60)
    return "\n".join([*lines, "squeue:", queue.stdout + queue.stderr])


def resumed_then_cancelled(tmp_path: Path, front: subprocess.Popen, jobs: int) -> tuple[Store, int]:
    """The run of ``front`` (a plan of ``SAVED_AT_THE_LIMIT``) cancelled once its ``jobs`` jobs have each
    resumed from the checkpoint they saved at Slurm's warning: the journal and the run, once the front
    end has ended."""
    store, run_id = the_run(tmp_path)
    every_job_resumed(store, run_id, jobs)
    cancel_the_run(store, run_id, front)
    return store, run_id


def cancel_the_run(store: Store, run_id: int, front: subprocess.Popen) -> None:
    """Cancels the run as the front end does (a command); returns once the front end has ended."""
    store.add_command(run_id, CancelRun())
    front.communicate(timeout=300)

"""Warm start (plan ``warm_start``): real tiny trainers forked from the real preloaded process.

The same jobs run cold and warm must give the same numbers; a forked job must behave like a cold
one for the engine (exit codes, cancel, logs); and whatever stops warm start makes jobs start cold
with the reason in the run's history.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

import subprocess

import psutil
import pytest

from lat_core.contract.commands import CancelJob
from lat_core.contract.jobdir import JobDir, Started
from lat_core.engine.backends.local import LocalBackend
from lat_core.engine.loop import Engine
from lat_core.front.plan import Plan
from lat_core.front.service import create_run, prepare_run
from lat_core.contract.journal import Store
from lat_core.contract.kernel_warmup import WarmupPhase, read_shapes, write_phase
from lat_core.engine.warm import KERNEL_WARMUP_LIMIT_S, READY_STALL_S, STARTING, WarmStarter, WarmStarts, can_fork
from tests.helpers.titles import title_of
from tests.helpers.waits import HANG_S, wait_until

MARK = "[lat] warm start: forked from the preloaded process"
CFG = ["-m", "lat_core.train", "--cfg", "job.yaml"]


def demo_run(tmp_path: Path, *, warm: bool, env: dict | None = None, state: Path | None = None):
    plan = Plan(suites=["demo"], pairs=["1:tiny-sst2"], gpus="cpu", slots=2, warm_start=warm,
                output_root=str(tmp_path / ("warm" if warm else "cold")),
                env={"NUM_DATA_WORKERS": "0", "HP_MAX_STEPS": "12", **(env or {})})
    store = Store((state or tmp_path / "state") / "journal.sqlite")
    run_id = create_run(store, prepare_run(plan))
    return store, run_id


def drain(engine: Engine, timeout: float = HANG_S) -> None:
    deadline = time.time() + timeout
    while engine.tick():
        assert time.time() < deadline, "engine did not drain in time"
        time.sleep(0.1)


def losses(job_dir: str) -> list[tuple[int, float]]:
    events = [json.loads(line) for line in (Path(job_dir) / "events.jsonl").read_text().splitlines()]
    return [(e["step"], e["loss"]) for e in events if e["event"] == "step"]


def history(store: Store, run_id: int) -> list[str]:
    return [f"{t.new_state}: {t.detail}" for t in store.transitions(run_id)]


@pytest.mark.slow
def test_forked_jobs_train_exactly_like_cold_ones_and_the_process_goes_with_the_engine(tmp_path):
    runs = {}
    for warm in (True, False):
        store, run_id = demo_run(tmp_path, warm=warm)
        engine = Engine(store)
        drain(engine)
        jobs = store.jobs(run_id)
        assert [j.state for j in jobs] == ["succeeded", "succeeded"], [j.error for j in jobs]
        runs[warm] = (store, run_id, jobs)
    store, run_id, warm_jobs = runs[True]
    told = [t.detail for t in store.transitions(run_id) if t.job_id is None and t.new_state == "warm start"]
    assert told[0] == STARTING  # said before the seconds of importing, once
    assert told[1].startswith("jobs fork from a process") and len(told) == 2
    for job in warm_jobs:  # each job's own history says how it was started
        assert "warm start: forked from the preloaded process" in [
            f"{t.new_state}: {t.detail}" for t in store.transitions(run_id, job_id=job.id)]
    for warm_job, cold_job in zip(warm_jobs, runs[False][2]):
        assert MARK in (Path(warm_job.job_dir) / "train.log").read_text()
        assert MARK not in (Path(cold_job.job_dir) / "train.log").read_text()
        assert losses(warm_job.job_dir) == losses(cold_job.job_dir)  # same seed, same numbers, bit for bit
        assert warm_job.last_step == losses(warm_job.job_dir)[-1][0]  # read at exit too, not only per tick
    # the drained engine stopped its preloaded process; nothing of it is left listening
    assert not (tmp_path / "state" / "warm" / "sock").exists()
    ours = [p for p in psutil.pids()  # this test's (titled with its socket): other runs on the host have their own
            if title_of(p).startswith(f"lat warm: {tmp_path}")]
    assert not ours


@pytest.mark.slow
def test_a_forked_job_is_cancelled_like_a_cold_one(tmp_path):
    store, run_id = demo_run(tmp_path, warm=True, env={"HP_MAX_STEPS": "100000"})
    engine = Engine(store)
    deadline = time.time() + HANG_S
    while not store.jobs(run_id)[0].last_step:
        assert time.time() < deadline, "the forked job never logged a step"
        engine.tick()
        time.sleep(0.1)
    job = store.jobs(run_id)[0]
    runner = psutil.Process(store.attempts(job.id)[-1].pid)
    trainer = runner.children()[0]
    assert title_of(runner.pid).startswith("lat runner: ")  # the small exec'd runner waits for the trainer
    assert os.getpgid(trainer.pid) == runner.pid  # one process group per job, as in a cold launch
    for one in store.jobs(run_id):
        store.add_command(run_id, CancelJob(one.id))
    drain(engine)
    assert [j.state for j in store.jobs(run_id)] == ["cancelled", "cancelled"]
    assert not trainer.is_running() or trainer.status() == psutil.STATUS_ZOMBIE


def missing_config_run(tmp_path: Path) -> tuple[Store, int, Path]:
    """(journal, run id, job folder) of one CPU job whose trainer exits 2 at once (no job.yaml):
    warm-capable, so it forks from the preloaded process."""
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    store = Store(tmp_path / "state" / "journal.sqlite")
    run_id = store.create_run("suites: [t]", str(tmp_path), [{"id": "cpu", "label": "cpu", "slots": 1, "env": {}}], 0.0)
    argv = [sys.executable, "-m", "lat_core.train", "--cfg", str(job_dir / "missing.yaml")]
    store.add_jobs(run_id, [{"key": "bad", "suite": "t", "round": 1, "stem": "bad", "seed": 1,
                             "dataset": "tiny-sst2", "job_dir": str(job_dir), "argv": argv, "env": {}}])
    return store, run_id, job_dir


def test_a_forked_trainer_keeps_its_exit_code_and_error_output(tmp_path):
    store, run_id, job_dir = missing_config_run(tmp_path)
    drain(Engine(store))
    job = store.jobs(run_id)[0]
    log = (job_dir / "train.log").read_text()
    assert MARK in log and "missing.yaml" in log
    assert job.state == "failed" and job.returncode == 2  # "the job as written cannot run", as when cold


@pytest.mark.slow
def test_when_warm_start_cannot_run_jobs_start_cold_and_the_history_says_why(tmp_path):
    deep = tmp_path / ("d" * 90)  # a socket path longer than sun_path allows
    store, run_id = demo_run(tmp_path, warm=True, state=deep)
    drain(Engine(store))
    assert [j.state for j in store.jobs(run_id)] == ["succeeded", "succeeded"]
    assert any(h.startswith("warm start: not used: the state directory's path is too long")
               for h in history(store, run_id))
    assert all(MARK not in (Path(j.job_dir) / "train.log").read_text() for j in store.jobs(run_id))


def test_only_trainer_jobs_whose_variables_are_read_after_import_are_forked():
    trainer = [sys.executable, *CFG]
    assert can_fork(trainer, {"HP_LR": "1e-4", "NUM_DATA_WORKERS": "0", "CUDA_VISIBLE_DEVICES": "GPU-1",
                              "LAT_JOB_ID": "3", "WANDB_API_KEY": "k",
                              "GLUE_LOCAL_DIR": "/data/glue"})
    assert can_fork([sys.executable, "-m", "lat_core.train.pretrain", "--preset", "conservative"], {})
    assert not can_fork(trainer, {"HF_HOME": "/x"})  # read when transformers is imported
    assert not can_fork(trainer, {"OMP_NUM_THREADS": "4"})
    assert not can_fork(["/other/python", *CFG], {})  # another interpreter or environment
    assert not can_fork([sys.executable, "train.py"], {})  # a script: not ours to preload for


def test_a_preloaded_process_that_dies_is_reported_not_waited_for(tmp_path):
    warm = WarmStarter(tmp_path / "state")
    warm.ensure_started()
    warm._proc.kill()
    warm._proc.wait()
    assert warm.status() == "failed" and "exited" in warm.failure and "warm.log" in warm.failure


def test_a_slow_import_is_waited_for_and_only_one_that_makes_no_progress_is_given_up(tmp_path):
    """A loaded host stretches the imports' wall time, not their CPU time: warm start is given up on
    a process that uses no CPU (stopped here with SIGSTOP), never on the clock alone."""
    now = [0.0]
    warm = WarmStarter(tmp_path / "state", clock=lambda: now[0])
    warm.ensure_started()
    importing = psutil.Process(warm._proc.pid)
    importing.suspend()  # long before its imports end (seconds of CPU): it is not ready
    try:
        assert warm.status() == "starting"
        now[0] += 3600  # an hour of wall time on a loaded host ...
        used = sum(importing.cpu_times()[:2])
        importing.resume()
        wait_until(lambda: sum(importing.cpu_times()[:2]) > used, "CPU used by the importing process",
                   every=0.01)  # ... in which it went on importing
        importing.suspend()
        assert not os.path.exists(warm.socket_path)
        assert warm.status() == "starting", warm.failure
        now[0] += 121  # two minutes in which it used no CPU at all: stuck
        assert warm.status() == "failed"
        assert "used no CPU for 120 s" in warm.failure and "warm.log" in warm.failure
        assert not importing.is_running() or importing.status() == psutil.STATUS_ZOMBIE
    finally:
        if importing.is_running():
            importing.kill()


@pytest.mark.slow
def test_a_restarted_engine_adopts_forked_jobs_and_never_launches_them_again(tmp_path):
    store, run_id = demo_run(tmp_path, warm=True, env={"HP_MAX_STEPS": "30"})
    first = Engine(store)
    deadline = time.time() + HANG_S
    while not all(j.state == "running" for j in store.jobs(run_id)):
        assert time.time() < deadline, "the jobs never started"
        first.tick()
        time.sleep(0.1)
    first.close()  # the first engine goes away (its preloaded process with it); the jobs run on
    second = Engine(store)
    drain(second)
    jobs = store.jobs(run_id)
    assert [j.state for j in jobs] == ["succeeded", "succeeded"]
    assert [len(store.attempts(j.id)) for j in jobs] == [1, 1]
    assert all(MARK in (Path(j.job_dir) / "train.log").read_text() for j in jobs)


def test_a_one_process_pretraining_job_is_forked_too(tmp_path):
    job_dir = tmp_path / "pretrain"
    job_dir.mkdir()
    store = Store(tmp_path / "state" / "journal.sqlite")
    run_id = store.create_run("suites: [p]", str(tmp_path), [{"id": "cpu", "label": "cpu", "slots": 1, "env": {}}], 0.0)
    argv = [sys.executable, "-m", "lat_core.train.pretrain", "--preset", "conservative", "--output-dir", str(job_dir),
            "--num_iterations=3", "--eval_every=3", "--save_every=3", "--eval_tokens=128", "--depth=2",
            "--model_dim_per_layer=32", "--head_dim=32", "--seq_len=32", "--device_batch_size=2", "--total_batch_size=128"]
    store.add_jobs(run_id, [{"key": "pre", "suite": "p", "round": 1, "stem": "pre", "seed": 1, "dataset": "tiny-corpus",
                             "job_dir": str(job_dir), "argv": argv, "env": {}}])
    drain(Engine(store))
    job = store.jobs(run_id)[0]
    assert job.state == "succeeded", (job_dir / "train.log").read_text()[-2000:]
    assert MARK in (job_dir / "train.log").read_text() and job.last_step == 3


def test_the_preloaded_process_refuses_to_serve_if_a_fork_could_not_use_cuda(monkeypatch):
    import torch

    from lat_core.train import warm as preloaded

    preloaded.check_fork_can_use_cuda()  # nothing here touched CUDA: a fork may use it
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)  # as after a library asked CUDA
    with pytest.raises(preloaded.PreloadTouchedCuda, match="forked job could not use the GPU"):
        preloaded.check_fork_can_use_cuda()



@pytest.mark.slow
def test_the_preloaded_process_warms_the_runs_kernels_before_it_forks_a_job(tmp_path):
    store, run_id = demo_run(tmp_path, warm=True, env={"HP_MAX_STEPS": "2", "TRITON_CACHE_DIR": str(tmp_path / "plan-triton")})
    drain(Engine(store))
    jobs = store.jobs(run_id)
    assert [j.state for j in jobs] == ["succeeded", "succeeded"], [j.error for j in jobs]
    warm_dir = tmp_path / "state" / "warm"
    (shape,), env = read_shapes(warm_dir / "kernel_shapes.json")  # the demo's two jobs share one shape
    # where the jobs will look for them, on the run's first device (here the CPU: no GPU visible)
    assert env == {"TRITON_CACHE_DIR": str(tmp_path / "plan-triton"), "CUDA_VISIBLE_DEVICES": ""}
    assert (shape.family, shape.name_or_path, shape.widths) == ("gla", "tiny-random", (16, 32, 48))
    # no GPU here: the warm-up ran (in the preload, before serving) and found nothing to compile
    assert "[warm] kernel warm-up: no GPU on this machine: nothing to compile" in (warm_dir / "warm.log").read_text()
    for job in jobs:  # the phase was known when the job forked: the warm-up came first
        assert "[lat] kernels: no GPU on this machine: nothing to compile" in (Path(job.job_dir) / "train.log").read_text()
        started = JobDir(job.job_dir).read_events().of(Started)[0]
        assert started.kernels == "no GPU on this machine: nothing to compile"


class _Plan:
    warm_start = True


def never_ready(starts: WarmStarts, job, now: float) -> WarmStarter:
    """The run's preloaded process as a process that never gets ready (no socket), started at ``now``."""
    starter = starts._for(job)
    starter.dir.mkdir(parents=True)
    starter._proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    starter._started_at = starter._progress_at = now
    return starter


def test_jobs_waiting_on_the_kernel_warm_up_say_so_and_are_waited_for_longer(tmp_path):
    store, run_id, _ = missing_config_run(tmp_path)
    now = [1000.0]
    starts = WarmStarts(store, allowed=True, plan_of=lambda _: _Plan(), backend_of=lambda _: LocalBackend(),
                        clock=lambda: now[0])
    job = store.jobs(run_id)[0]
    starter = never_ready(starts, job, now[0])  # standing in for a preload that is still compiling
    try:
        assert starts.hold(job).startswith("waiting for the warm-start process to import")
        write_phase(starter.phase_path, WarmupPhase("compiling", (16, 32, 64)))
        # the process idles while its child compiles: past the imports' stall limit, still waited for
        now[0] += READY_STALL_S + 41
        assert starts.hold(job) == ("compiling GPU kernels for 16-, 32-, 64-token rows "
                                    f"(first run on this machine): {READY_STALL_S + 41:.0f}s")
        starts.prepare(store.run(run_id))  # the run's history (headless output) says it once
        starts.prepare(store.run(run_id))
        assert [h for h in history(store, run_id) if "compiling" in h] == [
            "warm start: compiling GPU kernels for 16-, 32-, 64-token rows (first run on this machine), once for every job"]
        now[0] += KERNEL_WARMUP_LIMIT_S  # a hang: given up on, jobs start cold
        starts.begin_pass()
        assert starts.hold(job) is None and "still compiling GPU kernels" in starter.failure
    finally:
        starts.close()


def test_every_job_of_one_admission_pass_sees_the_same_status_of_the_preloaded_process(tmp_path):
    """A process that gets ready in the middle of a pass must not let a later job start before the
    earlier ones it held: that job took their slot and fused without them (a group split in two)."""
    store, run_id, _ = missing_config_run(tmp_path)
    starts = WarmStarts(store, allowed=True, plan_of=lambda _: _Plan(), backend_of=lambda _: LocalBackend())
    job = store.jobs(run_id)[0]
    starter = never_ready(starts, job, time.time())
    try:
        starts.begin_pass()
        assert starts.hold(job).startswith("waiting for the warm-start process to import")
        Path(starter.socket_path).touch()  # ready now, in the middle of the pass
        assert starter.status() == "ready"
        assert starts.hold(job).startswith("waiting for the warm-start process to import")
        starts.begin_pass()  # the next pass sees it ready: every job may fork
        assert starts.hold(job) is None
    finally:
        starts.close()


def test_slurms_warning_while_the_warm_runner_starts_reaches_the_trainer(tmp_path):
    """A warm pack forwards Slurm's SIGUSR1 to each member's runner. The runner is exec'd after the
    trainer's fork, and an exec resets the handler: a warning then, before the new runner caught it,
    killed the runner and left its trainer orphaned and never told (seen in CI under load). Here the
    runner's start is slowed (a sitecustomize that sleeps) and the warning comes in that window."""
    from lat_core.contract.jobdir import AttemptFiles
    from lat_core.train import save_request
    from lat_core.train.warm import become_runner

    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text("import time\ntime.sleep(4)  # the exec'd runner's start, made long\n")
    job = tmp_path / "job"
    exit_file = JobDir(job).attempt(1).exit_path
    exit_file.parent.mkdir(parents=True)
    trainer_pid = tmp_path / "trainer.pid"
    request = {"log": str(job / "train.log"), "cwd": str(job), "exit_file": str(exit_file), "show_env": "",
               "env": {**os.environ, "PYTHONPATH": str(slow), "LAT_JOB_ID": "1", "LAT_ATTEMPT": "1"},
               "module": "tests.helpers.usr1_trainer", "args": [str(trainer_pid)]}
    runner = os.fork()
    if runner == 0:  # as lat_core.train.pack.start forks a member
        save_request.install()
        become_runner(request)  # never returns
    try:
        wait_until(lambda: trainer_pid.is_file() and trainer_pid.read_text(), "the trainer forked")
        os.kill(runner, signal.SIGUSR1)  # while the exec'd runner still sleeps in its start
        _, status = os.waitpid(runner, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, \
            f"the runner died: {status}\n{(job / 'train.log').read_text()}"
        record = AttemptFiles(exit_file).read_exit()
        assert record is not None and record.returncode == save_request.EXIT_SAVED_TO_RESUME
        assert "SIGUSR1 passed on to the trainer" in (job / "train.log").read_text()
    finally:
        if trainer_pid.is_file() and psutil.pid_exists(int(trainer_pid.read_text() or 0)):
            os.kill(int(trainer_pid.read_text()), signal.SIGKILL)

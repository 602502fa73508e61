"""Each LAT process titles itself with what it runs, as ``ps``, ``top`` and nvitop show it: real
trainers, groups, runners, the warm-start process and the engine, launched as the engine launches them."""
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from lat_core.contract.commands import CancelRun
from lat_core.engine.loop import Engine
from lat_core.titles import display_name
from lat_tui.columns import job_name
from tests.conftest import fake_job
from tests.helpers.titles import ps_args, title_of
from tests.integration.test_engine import make_run as make_fake_run
from tests.integration.test_engine_fused import LONG, MEMBERS, base, by_key, stepped  # noqa: F401 - base: a fixture
from tests.integration.test_engine_fused import make_run as make_fused_run
from tests.integration.test_warm_start import demo_run, drain
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]


def tick_until(engine: Engine, done, timeout: float = HANG_S) -> None:
    deadline = time.time() + timeout
    while not done():
        assert time.time() < deadline, "the jobs never got going"
        engine.tick()
        time.sleep(0.1)


def runner_and_trainer(store, job) -> tuple[int, int]:
    runner = psutil.Process(store.attempts(job.id)[-1].pid)
    return runner.pid, runner.children()[0].pid


def cancel_all(store, run_id, engine) -> None:
    store.add_command(run_id, CancelRun())
    drain(engine)


def test_a_trainer_and_its_runner_show_the_job_s_table_name(tmp_path):
    store, run_id = demo_run(tmp_path, warm=False, env={"HP_MAX_STEPS": "100000"})
    engine = Engine(store)
    try:
        tick_until(engine, lambda: all(j.last_step for j in store.jobs(run_id)))
        names = {}
        for job in store.jobs(run_id):
            runner, trainer = runner_and_trainer(store, job)
            names[job.stem] = job_name(job, job.family)  # as the job table names it
            assert title_of(trainer) == ps_args(trainer) == f"lat: {names[job.stem]}"
            assert title_of(runner) == ps_args(runner) == f"lat runner: {names[job.stem]}"
        assert names == {"tiny_lora_qkvo": "gla/tiny_lora_qkvo 1:tiny-sst2", "tiny_lora": "mamba/tiny_lora 1:tiny-sst2"}
    finally:
        cancel_all(store, run_id, engine)
        engine.close()


def test_a_warm_started_group_names_its_members_and_the_preload_process_its_socket(tmp_path, base):  # noqa: F811
    store, run_id = make_fused_run(tmp_path, base, "true", warm=True, **{k: LONG for k in MEMBERS})
    engine = Engine(store)
    try:
        tick_until(engine, lambda: stepped(by_key(store, run_id)["a"]))
        runner, trainer = runner_and_trainer(store, by_key(store, run_id)["a"])
        group = "group(3): gla/{a 3,b 5,c 7}:tiny-sst2"
        assert title_of(trainer) == ps_args(trainer) == f"lat {group}"
        assert title_of(runner) == ps_args(runner) == f"lat runner: {group}"
        warm = [pid for pid in psutil.pids() if title_of(pid).startswith("lat warm: ")
                and psutil.Process(pid).ppid() == os.getpid()]
        assert [title_of(pid) for pid in warm] == [f"lat warm: {tmp_path / 'state' / 'warm' / 'sock'}"]
    finally:
        cancel_all(store, run_id, engine)
        engine.close()


def test_the_engine_names_its_state_directory_and_a_runner_of_another_command_its_folder(tmp_path):
    store, run_id = make_fake_run(tmp_path, [fake_job(tmp_path, "slow", sleep=60)])
    state = tmp_path / "state"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    engine = subprocess.Popen([sys.executable, "-m", "lat_core.engine", "--state-dir", str(state)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + HANG_S
        while not store.open_attempts(run_id) or not store.open_attempts(run_id)[0].pid:
            assert time.time() < deadline and engine.poll() is None, "the engine launched nothing"
            time.sleep(0.1)
        assert title_of(engine.pid) == ps_args(engine.pid) == f"lat engine: {state}"
        runner = store.open_attempts(run_id)[0].pid
        while not title_of(runner).startswith("lat") and time.time() < deadline:
            time.sleep(0.05)  # launched: its title comes once it has imported what it needs
        assert title_of(runner) == "lat runner: slow"  # a job folder without job.yaml: its name
        assert display_name(None, "slow", 1, "x") == "slow 1:x"
    finally:
        store.add_command(run_id, CancelRun())
        engine.wait(timeout=HANG_S)

"""Journal and disk faults, and secrets kept out of the journal (real engine processes)."""

import os
import signal
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from lat_core.devices import cpu_device
from lat_core.jobs import JobSpec
from lat_core.plan import Plan
from lat_core.service import EngineLock, PreparedRun, create_run, ensure_engine, open_store
from tests.conftest import FAKE_TRAINER
from tests.integration.test_detached_engine import engine_pid, wait_for

SECRET, HOOK_TOKEN = "sekrit-value-123", "T000/B000/hooktoken456"


@dataclass
class FakeTrainerJob(JobSpec):
    """A real job spec whose command is the fake trainer (no model to load)."""
    fake_argv: tuple = ()

    def command(self) -> list[str]:
        return list(self.fake_argv)


def fake_spec(tmp_path: Path, name: str, env: dict, *extra: str) -> FakeTrainerJob:
    record = tmp_path / "record"
    record.mkdir(exist_ok=True)
    argv = (sys.executable, str(FAKE_TRAINER), "--record", str(record), "--name", name, *extra)
    return FakeTrainerJob(key=f"tiny-sst2_seed1/{name}", suite="t", round=1, config_path="x.yaml", stem=name,
                          seed=1, dataset="tiny-sst2", job_dir=tmp_path / "runs" / name, config={"seed": 1},
                          env=dict(env), fake_argv=argv)


def secret_plan(tmp_path: Path) -> Plan:
    return Plan(suites=["demo"], pairs=["1:tiny-sst2"], gpus="cpu", slots=1, output_root=str(tmp_path / "runs"),
                env={"WANDB_API_KEY": SECRET, "HP_EPOCHS": "1"},
                notify={"webhook": {"url": f"https://hooks.example.org/{HOOK_TOKEN}"}, "on": ["finish"]})


def test_secrets_stay_out_of_the_journal_and_reach_a_job_after_an_engine_restart(tmp_path):
    """A front end creates the run and starts the engine with the plan's env; the engine is
    killed; another front end (whose environment never held the secret) restarts it; the job it
    launches still sees the secret, read from the 0600 secrets file."""
    state, plan = tmp_path / "state", secret_plan(tmp_path)
    env = dict(plan.env)
    jobs = [fake_spec(tmp_path, "first", env, "--sleep", "4"),
            fake_spec(tmp_path, "second", env, "--sleep", "0.1", "--print-env", "WANDB_API_KEY")]
    store = open_store(state)
    run_id = create_run(store, PreparedRun(plan, jobs, [cpu_device(1)]), environ={})
    ensure_engine(state, plan.env)
    wait_for(lambda: store.jobs(run_id)[0].state == "running", what="first job running")
    os.kill(engine_pid(state), signal.SIGKILL)
    wait_for(lambda: not EngineLock(state).is_held(), what="lock release")
    assert "WANDB_API_KEY" not in os.environ
    assert ensure_engine(state) is True  # another front end: no secret in its environment
    wait_for(lambda: store.run(run_id).state == "finished", timeout=120, what="run to finish")
    assert [j.state for j in store.jobs(run_id)] == ["succeeded", "succeeded"]
    assert (tmp_path / "runs" / "second" / "env.txt").read_text().strip() == SECRET
    wait_for(lambda: not EngineLock(state).is_held(), what="engine to exit")
    for name in ("journal.sqlite", "journal.sqlite-wal", "engine.log"):
        path = state / name
        assert not path.exists() or SECRET.encode() not in path.read_bytes(), name
        assert not path.exists() or HOOK_TOKEN.encode() not in path.read_bytes(), name
    saved = store.run(run_id).plan_yaml
    assert SECRET not in saved and HOOK_TOKEN not in saved and "WANDB_API_KEY: '***'" in saved
    assert store.jobs(run_id)[1].env["WANDB_API_KEY"] == "***"


def test_state_directory_is_private_and_existing_files_are_fixed(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    (state / "journal.sqlite").touch(mode=0o644)
    os.chmod(state / "journal.sqlite", 0o644)
    store = open_store(state)
    plan = secret_plan(tmp_path)
    create_run(store, PreparedRun(plan, [fake_spec(tmp_path, "a", dict(plan.env))], [cpu_device(1)]), environ={})
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for name in ("journal.sqlite", "journal.sqlite-wal", "journal.sqlite-shm", "secrets.json"):
        assert stat.S_IMODE((state / name).stat().st_mode) == 0o600, name
    assert SECRET in (state / "secrets.json").read_text()

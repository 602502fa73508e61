"""Journal and disk faults, and secrets kept out of the journal (real engine processes)."""

import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from lat_core.contract.devices import cpu_device
from lat_core.front.jobs import JobSpec
from lat_core.contract.journal_faults import WalLost
from lat_core.contract.states import HistoryKind
from lat_core.front.plan import Plan
from lat_core.front.service import (
    EngineLock,
    PreparedRun,
    create_run,
    ensure_engine,
    open_store,
)
from tests.conftest import FAKE_TRAINER, fake_job
from tests.integration.test_detached_engine import engine_pid, wait_for
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]
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
    killed while the first job runs; another front end (whose environment never held the secret)
    restarts it; the job it launches still sees the secret, read from the 0600 secrets file.

    The engine is killed once the first trainer runs, never at the job's ``running`` state: the
    engine records that before it launches, and one killed in between leaves a launch it cannot
    prove happened, which fails the job (never launched twice; tests/integration/test_engine_faults.py).
    The first trainer runs until the test releases it, after the restart, whatever the load."""
    state, plan = tmp_path / "state", secret_plan(tmp_path)
    env, release = dict(plan.env), tmp_path / "release-first"
    jobs = [fake_spec(tmp_path, "first", env, "--sleep", "0.1", "--wait-for", str(release)),
            fake_spec(tmp_path, "second", env, "--sleep", "0.1", "--print-env", "WANDB_API_KEY")]
    store = open_store(state)
    run_id = create_run(store, PreparedRun(plan, jobs, [cpu_device(1)]), environ={})
    ensure_engine(state, plan.env)
    wait_for(lambda: (tmp_path / "record" / "first.log").exists(), what="first trainer running")
    os.kill(engine_pid(state), signal.SIGKILL)
    wait_for(lambda: not EngineLock(state).is_held(), what="lock release")
    assert "WANDB_API_KEY" not in os.environ
    assert ensure_engine(state) is True  # another front end: no secret in its environment
    release.touch()
    wait_for(lambda: store.run(run_id).state == "finished", what="run to finish")
    assert [(j.state, j.error) for j in store.jobs(run_id)] == [("succeeded", None)] * 2, \
        [t.detail for t in store.transitions(run_id)]
    assert (tmp_path / "record" / "first.log").read_text().count("start ") == 1  # adopted, not launched again
    assert (tmp_path / "runs" / "second" / "env.txt").read_text().strip() == SECRET
    wait_for(lambda: not EngineLock(state).is_held(), what="engine to exit")
    for name in ("journal.sqlite", "journal.sqlite-wal", "engine.log"):
        path = state / name
        assert not path.exists() or SECRET.encode() not in path.read_bytes(), name
        assert not path.exists() or HOOK_TOKEN.encode() not in path.read_bytes(), name
    saved = store.run(run_id).plan.text
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


# ---------------------------------------------------------------- journal and disk faults

@pytest.fixture
def tmpfs(tmp_path):
    """A small tmpfs of our own (the tests run as root); skipped where mounting is not permitted."""
    mounted = []

    def mount(name: str, size: str = "512k") -> Path:
        path = tmp_path / name
        path.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def fill(path: Path) -> None:
    """Write until the file system is full."""
    try:
        with open(path / "filler", "wb") as fh:
            while True:
                fh.write(b"\0" * 4096)
                fh.flush()
    except OSError:
        pass  # full (the close may be what fails)


def lat_tui(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lat_tui.cli", *args], capture_output=True, text=True, check=False,
                          timeout=HANG_S, env={**os.environ, **(env or {})})


def headless(state: Path, out: Path) -> subprocess.CompletedProcess:
    return lat_tui("--plan", str(ROOT / "configs" / "plans" / "demo.yaml"), "--output-root", str(out),
                   "--state-dir", str(state))


def assert_clear_exit_2(done: subprocess.CompletedProcess, path: Path, *words: str) -> None:
    text = done.stdout + done.stderr
    assert done.returncode == 2, text
    assert "Traceback" not in text, text
    assert str(path) in text, text
    for word in words:
        assert word in text, text


def a_journal_with_a_live_run(state: Path, tmp_path: Path) -> None:
    store = open_store(state)
    run_id = store.create_run("plan: test", str(tmp_path / "out"), [cpu_device(1)], time.time() + 3600)
    store.add_jobs(run_id, [fake_job(tmp_path, "a")])
    store.close()


def test_full_state_directory(tmp_path, tmpfs):
    state = tmpfs("state")
    fill(state)
    done = headless(state, tmp_path / "runs")
    assert_clear_exit_2(done, state, "disk is full")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("job.yaml"))
    assert not EngineLock(state).is_held()


def test_full_output_root(tmp_path, tmpfs):
    out = tmpfs("runs")
    fill(out)
    done = headless(tmp_path / "state", out / "demo")
    assert_clear_exit_2(done, out, "disk is full")
    assert open_store(tmp_path / "state").runs() == []  # nothing started
    assert not EngineLock(tmp_path / "state").is_held()


def test_disk_filling_under_a_live_engine_stops_it_once_and_a_front_end_revives_it(tmp_path, tmpfs):
    """The engine meets a full disk when its job ends: it stops (no crash loop), `status` says the
    disk is full; once space is freed, `status` restarts it and the run finishes."""
    state = tmpfs("state", size="4m")
    store = open_store(state)
    run_id = store.create_run("plan: test", str(tmp_path / "out"), [cpu_device(1)], 0.0)
    store.add_jobs(run_id, [fake_job(tmp_path, "a", sleep=3.0)])
    ensure_engine(state)
    wait_for(lambda: store.jobs(run_id)[0].state == "running", what="job running")
    fill(state)
    wait_for(lambda: not EngineLock(state).is_held(), what="engine to stop on the full disk")
    assert_clear_exit_2(lat_tui("status", "--state-dir", str(state)), state, "cannot start", "disk is full")
    assert not EngineLock(state).is_held()  # the front end did not start an engine into the fault
    (state / "filler").unlink()
    done = lat_tui("status", "--state-dir", str(state))
    assert done.returncode == 0 and "restarted" in done.stdout, done.stdout + done.stderr
    wait_for(lambda: store.run(run_id).state == "finished", what="run to finish")
    assert store.jobs(run_id)[0].state == "succeeded"
    wait_for(lambda: not EngineLock(state).is_held(), what="engine to exit")


def test_read_only_state_directory(tmp_path, tmpfs):
    state = tmpfs("state")
    a_journal_with_a_live_run(state, tmp_path)
    subprocess.run(["mount", "-o", "remount,ro", str(state)], check=True)
    for verb in (["status"], ["pause"], ["--plan", str(ROOT / "configs" / "plans" / "demo.yaml"),
                                         "--output-root", str(tmp_path / "runs2")]):
        done = lat_tui(*verb, "--state-dir", str(state))
        assert_clear_exit_2(done, state, "read-only")
    assert not (tmp_path / "runs2").exists() or not any((tmp_path / "runs2").rglob("job.yaml"))


def test_journal_locked_beyond_the_timeout(tmp_path):
    state = tmp_path / "state"
    a_journal_with_a_live_run(state, tmp_path)
    holder = sqlite3.connect(str(state / "journal.sqlite"), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        quick = {"LAT_JOURNAL_TIMEOUT_S": "1"}
        done = lat_tui("pause", "--state-dir", str(state), env=quick)
        assert_clear_exit_2(done, state, "locked by another process for more than 1 s")
        done = lat_tui("--plan", str(ROOT / "configs" / "plans" / "demo.yaml"), "--output-root",
                       str(tmp_path / "runs2"), "--state-dir", str(state), env=quick)
        assert_clear_exit_2(done, state, "locked by another process")
        assert not (tmp_path / "runs2").exists() or not any((tmp_path / "runs2").rglob("job.yaml"))
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_corrupt_journal(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "journal.sqlite").write_bytes(b"this is not a journal" * 100)
    done = lat_tui("status", "--state-dir", str(state))
    assert_clear_exit_2(done, state / "journal.sqlite", "damaged", "mv ")


def test_truncated_journal(tmp_path):
    state = tmp_path / "state"
    store = open_store(state)
    run_id = store.create_run("plan: test", str(tmp_path / "out"), [cpu_device(1)], 0.0)
    store.add_jobs(run_id, [fake_job(tmp_path, f"j{i}") for i in range(200)])
    store.close()  # the last connection checkpoints the WAL into the file
    journal = state / "journal.sqlite"
    os.truncate(journal, journal.stat().st_size // 2)
    done = lat_tui("status", "--state-dir", str(state))
    assert_clear_exit_2(done, journal, "truncated")


def test_wal_lost_under_a_live_connection(tmp_path):
    """Another process (an engine) holds the journal open when its -wal file is removed: SQLite
    answers new connections with 'disk I/O error'; the front end says what that means."""
    state = tmp_path / "state"
    a_journal_with_a_live_run(state, tmp_path)
    holder = open_store(state)
    holder.add_transition(1, None, HistoryKind.ENGINE, "in the WAL only")
    (state / "journal.sqlite-wal").unlink()
    try:
        done = lat_tui("status", "--state-dir", str(state))
        assert_clear_exit_2(done, state / "journal.sqlite", "-wal file is missing", "move the journal aside")
        assert not EngineLock(state).is_held()
    finally:
        holder.close()


def engine_log(state: Path) -> str:
    return (state / "engine.log").read_text() if (state / "engine.log").exists() else ""


def test_engine_waits_out_a_journal_locked_past_the_timeout(tmp_path):
    """Another process holds the write lock while a job ends, until the engine has said in engine.log
    that it waited past its 1 s timeout (so the test holds no fixed time that a slow machine could
    outlast): the engine keeps its pid, and records the job once the lock is gone."""
    state = tmp_path / "state"
    store = open_store(state)
    run_id = store.create_run("plan: test", str(tmp_path / "out"), [cpu_device(1)], 0.0)
    store.add_jobs(run_id, [fake_job(tmp_path, "a", sleep=1.0)])
    ensure_engine(state, {"LAT_JOURNAL_TIMEOUT_S": "1"})
    wait_for(lambda: store.jobs(run_id)[0].state == "running", what="job running")
    pid = engine_pid(state)
    holder = sqlite3.connect(str(state / "journal.sqlite"), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        wait_for(lambda: "locked by another process" in engine_log(state), what="the engine to say it waits")
    finally:
        holder.execute("ROLLBACK")
    holder.close()
    wait_for(lambda: store.run(run_id).state == "finished", what="run to finish")
    assert store.jobs(run_id)[0].state == "succeeded"
    log = engine_log(state)
    assert f"engine {pid}: " in log and "locked by another process" in log and "Traceback" not in log
    wait_for(lambda: not EngineLock(state).is_held(), what="engine to exit")


def test_wal_removed_under_a_live_store_stops_its_writes(tmp_path):
    state = tmp_path / "state"
    a_journal_with_a_live_run(state, tmp_path)
    store = open_store(state)
    store.add_transition(1, None, HistoryKind.ENGINE, "in the WAL only")
    (state / "journal.sqlite-wal").unlink()
    try:
        with pytest.raises(WalLost, match="its -wal file was removed while this process had it open: writes stopped"):
            store.add_transition(1, None, HistoryKind.ENGINE, "never written")
    finally:
        store.close()


def test_wal_removed_under_a_live_engine_stops_it_before_it_damages_the_journal(tmp_path):
    """The engine notices its -wal file gone, stops with one line (no traceback) instead of writing
    on beside a new -wal that a front end would start; once the -shm is moved aside as it says,
    `status` restarts it and the run finishes with every job launched once."""
    state = tmp_path / "state"
    store = open_store(state)
    run_id = store.create_run("plan: test", str(tmp_path / "out"), [cpu_device(1)], 0.0)
    store.add_jobs(run_id, [fake_job(tmp_path, "a", sleep=3.0), fake_job(tmp_path, "b", sleep=0.2)])
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the run is in the journal file; what follows, in the WAL
    ensure_engine(state)
    wait_for(lambda: store.jobs(run_id)[0].state == "running", what="job running")
    store.close()
    (state / "journal.sqlite-wal").unlink()
    wait_for(lambda: not EngineLock(state).is_held(), what="engine to stop on the lost -wal")
    log = (state / "engine.log").read_text()
    assert "stopped: " in log and "its -wal file was removed" in log and "Traceback" not in log, log
    assert_clear_exit_2(lat_tui("pause", "--state-dir", str(state)), state, "-wal file")  # the one CLI write
    assert not EngineLock(state).is_held()
    (state / "journal.sqlite-shm").rename(state / "journal.sqlite-shm.bad")
    (state / "engine.fault").unlink()
    done = lat_tui("status", "--state-dir", str(state))
    assert done.returncode == 0 and "restarted" in done.stdout, done.stdout + done.stderr
    store = open_store(state)
    wait_for(lambda: store.run(run_id).state == "finished", what="run to finish")
    assert [j.state for j in store.jobs(run_id)] == ["succeeded", "succeeded"]
    assert sqlite3.connect(state / "journal.sqlite").execute("PRAGMA integrity_check").fetchone() == ("ok",)
    for name in ("a", "b"):
        assert (tmp_path / "record" / f"{name}.log").read_text().count("start ") == 1, name
    wait_for(lambda: not EngineLock(state).is_held(), what="engine to exit")

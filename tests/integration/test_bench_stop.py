"""A suite bench stopped mid-side (SIGTERM, as ``timeout`` sends it) leaves none of its run running."""

import os
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from bench.old_scripts import run_in_rounds
from bench.side_stop import kill_groups, side_processes
from lat_core.contract.state_dir import open_store
from lat_core.engine.launch import is_same_process
from tests.helpers.waits import HANG_S, wait_until

ROOT = Path(__file__).resolve().parents[2]


def running_attempts(state_dir: Path) -> list[int]:
    """The pids of the run's attempts whose runner is alive now (none before the journal exists)."""
    if not (state_dir / "journal.sqlite").exists():
        return []
    store = open_store(state_dir)
    attempts = [a for r in store.runs() for j in store.jobs(r.id) for a in store.attempts(j.id)]
    return [a.pid for a in attempts if is_same_process(a.pid, a.pid_start)]


def mentioning(folder: Path) -> list[psutil.Process]:
    """Live processes whose command line names ``folder`` (the side's plan, jobs, state dir)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and any(str(folder) in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    def running(proc: psutil.Process) -> bool:
        try:
            return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False
    return [p for p in procs if running(p)]


def start_bench(tmp_path: Path, out: Path, side: str) -> subprocess.Popen:
    """The suite bench on the CPU (``--gpu -1``: tiny models), far more steps than the test waits for."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAT_STATE_DIR": str(tmp_path / "unused-state")}
    return subprocess.Popen([sys.executable, str(ROOT / "bench" / "bench_suite_throughput.py"), "--gpu", "-1",
                             "--steps", "100000", "--sides", side, "--out", str(out)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def sigterm(bench: subprocess.Popen) -> str:
    bench.send_signal(signal.SIGTERM)
    output, _ = bench.communicate(timeout=HANG_S)
    assert bench.returncode == 128 + signal.SIGTERM, output[-3000:]
    return output


def test_sigterm_mid_side_cancels_the_run_and_leaves_no_trainer(tmp_path):
    out = tmp_path / "bench"
    state_dir = out / "state-lat-eager"
    bench = start_bench(tmp_path, out, "lat-eager")
    try:
        wait_until(lambda: running_attempts(state_dir) or bench.poll() is not None, "trainer of the side")
        assert bench.poll() is None, bench.communicate()[0][-3000:]
        runners = [psutil.Process(pid) for pid in running_attempts(state_dir)]
        trainers = [child for runner in runners for child in runner.children(recursive=True)]
        sigterm(bench)
        assert alive(runners + trainers) == []
        assert side_processes(state_dir) == []
        assert mentioning(out) == []
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        kill_groups([(proc.pid, None) for proc in mentioning(out)])  # so a failure here starves no later test


def test_sigterm_during_the_old_scripts_round_stops_its_trainers(tmp_path):
    out = tmp_path / "bench"
    bench = start_bench(tmp_path, out, "old")
    trainers: list[psutil.Process] = []
    try:
        wait_until(lambda: mentioning(out / "old") or bench.poll() is not None, "trainer of the old side")
        assert bench.poll() is None, bench.communicate()[0][-3000:]
        trainers = psutil.Process(bench.pid).children(recursive=True)  # they retitle themselves: found by parent
        assert trainers
        sigterm(bench)
        assert alive(trainers) == []
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        for proc in alive(trainers):  # they share the bench's group: each is killed alone
            proc.kill()


@dataclass
class SleeperJob:
    """What ``run_in_rounds`` reads of a JobSpec, running a command of the test's choosing."""
    key: str
    job_dir: Path
    argv: list[str]
    env: dict = field(default_factory=dict)

    def command(self) -> list[str]:
        return self.argv


def sleeper(tmp_path: Path, key: str, marker: str) -> SleeperJob:
    (tmp_path / key).mkdir()
    return SleeperJob(key, tmp_path / key, [sys.executable, "-c", "import sys, time; time.sleep(600)", marker])


def test_a_trainer_that_cannot_start_stops_the_ones_its_round_started(tmp_path):
    marker = uuid.uuid4().hex
    (tmp_path / "missing").mkdir()
    jobs = [sleeper(tmp_path, "first", marker), SleeperJob("missing", tmp_path / "missing", [str(tmp_path / "no-such")])]
    try:
        with pytest.raises(FileNotFoundError):
            run_in_rounds(jobs, {}, slots=2)
        assert mentioning(Path(marker)) == []
    finally:
        kill_groups([(proc.pid, None) for proc in mentioning(Path(marker))])


def test_a_started_trainer_does_not_keep_the_stop_signals_held_while_it_started(tmp_path):
    """The bench holds SIGTERM/SIGINT while it starts a trainer; the trainer must not inherit that mask."""
    (tmp_path / "mask").mkdir()
    argv = [sys.executable, "-c", "import sys, pathlib; sys.stdout.write(pathlib.Path('/proc/self/status').read_text())"]
    run_in_rounds([SleeperJob("mask", tmp_path / "mask", argv)], {}, slots=1)
    blocked = next(line for line in (tmp_path / "mask" / "train.log").read_text().splitlines() if line.startswith("SigBlk:"))
    mask = int(blocked.split()[1], 16)
    assert mask & (1 << (signal.SIGTERM - 1)) == 0 and mask & (1 << (signal.SIGINT - 1)) == 0, blocked

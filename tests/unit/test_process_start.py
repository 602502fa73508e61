"""A running job stays its own after the wall clock is stepped: the same process is told from a reused
pid by its start in clock ticks, not by a start time computed from the moving boot time."""

import subprocess
import sys

import psutil
import pytest

import lat_core.engine.launch as launch
from lat_core.containment import members
from lat_core.process_start import MAX_CLOCK_STEP_S, same_start
from tests.helpers.waits import wait_until

RECORDED = 1795694620.56   # a start time as psutil gives it: whole-second btime + ticks / 100


@pytest.mark.parametrize("found, same", [
    (RECORDED, True),
    (RECORDED + 1, True),                  # the clock stepped a second (btime moved)
    (RECORDED - 3600, True),               # an hour back
    (RECORDED + 0.01, False),              # one tick later: another process with that pid
    (RECORDED + 0.5, False),               # half a second later (within a second: once taken as the same)
    (RECORDED + MAX_CLOCK_STEP_S + 1, False),
])
def test_the_same_start_is_a_whole_number_of_seconds_away(found, same):
    assert same_start(RECORDED, found) is same


@pytest.fixture
def sleeper():
    """A process with a child of its own (a runner and its trainer)."""
    proc = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                             "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"])
    try:
        psutil.Process(proc.pid)
        yield proc
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()


def stepped_clock(monkeypatch, seconds: float) -> None:
    """The wall clock stepped by ``seconds`` since the start was recorded: /proc/stat's btime with it."""
    real = psutil.boot_time()
    monkeypatch.setattr(psutil, "boot_time", lambda: real + seconds)
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: real + seconds)  # what Process.create_time adds
    monkeypatch.setattr(launch, "_boot_time_read", [0.0, float("-inf")])  # the engine's cache read again


def test_a_running_job_stays_alive_to_the_engine_after_the_clock_steps(sleeper, monkeypatch):
    recorded = launch.process_start_time(sleeper.pid)
    assert launch.is_same_process(sleeper.pid, recorded)
    stepped_clock(monkeypatch, 2.0)
    assert launch.process_start_time(sleeper.pid) == pytest.approx(recorded + 2.0)
    assert launch.is_same_process(sleeper.pid, recorded)
    assert not launch.is_same_process(sleeper.pid, recorded + 0.3)   # another start: a reused pid


def test_a_runner_keeps_its_processes_after_the_clock_steps(sleeper, monkeypatch):
    """What the engine stops of a job is found from its runner's start: a stepped clock must not
    make its descendants a stranger's (nor a stranger's its)."""
    recorded = psutil.Process(sleeper.pid).create_time()
    [child] = wait_until(lambda: psutil.Process(sleeper.pid).children(), "the sleeper's child")
    stepped_clock(monkeypatch, -3.0)
    assert psutil.Process(sleeper.pid).create_time() == pytest.approx(recorded - 3.0)
    assert {p.pid for p in members(None, sleeper.pid, recorded)} == {child.pid}
    assert members(None, sleeper.pid, recorded + 0.5) == []

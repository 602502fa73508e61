"""The engine outlives the TUI: start a 6-job demo run from lat-tui in tmux, kill the TUI mid-run
(SIGHUP through ``tmux kill-session``, or SIGKILL), watch every job finish through
``lat-tui status``, then read the finished table off a new lat-tui's screen.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import psutil
import pytest

from .test_tmux_demo import REPO, Tmux, job_rows, lat_tui_command, start_from_form
from tests.helpers.waits import HANG_S

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PAIRS = "1:tiny-sst2 2:tiny-sst2 3:tiny-sst2"
JOBS = 6


@pytest.fixture
def sessions():
    made: list[Tmux] = []

    def make() -> Tmux:
        made.append(Tmux(f"lat-e2e-{uuid.uuid4().hex[:8]}"))
        return made[-1]

    yield make
    for session in made:
        session.kill()


def start_demo_run(tmux: Tmux, tmp_path: Path, env: dict) -> None:
    """Fill the plan form by keys (suite demo, 3 pairs, CPU, 2 slots) and start it."""
    start_from_form(tmux, tmp_path, env, PAIRS)
    tmux.wait_for(lambda s: len(job_rows(s)) == JOBS and any("running" in row for row in job_rows(s)),
                  "the dashboard with 6 jobs, one running")


def tui_process(tmux: Tmux) -> psutil.Process:
    """The lat-tui process in the pane (a child of the pane's shell)."""
    out = subprocess.run(tmux.command("display-message", "-p", "-t", tmux.name, "#{pane_pid}"),
                         capture_output=True, text=True, check=True)
    shell = psutil.Process(int(out.stdout.strip()))
    candidates = [shell, *shell.children(recursive=True)]
    return next(p for p in candidates if any("lat-tui" in part for part in p.cmdline()))


def status(state_dir: Path) -> str:
    out = subprocess.run([lat_tui_command(), "status", "--state-dir", str(state_dir)],
                         capture_output=True, text=True, timeout=HANG_S)
    return out.stdout + out.stderr


def wait_for_finish(state_dir: Path) -> str:
    deadline = time.monotonic() + HANG_S
    text = ""
    while time.monotonic() < deadline:
        text = status(state_dir)
        if "run 1: finished" in text or "run 1: cancelled" in text:
            return text
        time.sleep(2)
    raise AssertionError(f"the run did not finish without the TUI; last status:\n{text}")


def assert_reattached_table(tmux: Tmux, tmp_path: Path, env: dict) -> None:
    tmux.start(f"{lat_tui_command()} --configs {REPO / 'configs'}; sleep 600", env, tmp_path)
    screen = tmux.wait_for(lambda s: sum("succeeded" in row for row in job_rows(s)) == JOBS,
                           "the re-attached dashboard with 6 succeeded jobs")
    print(screen)
    assert "run 1 · finished" in screen and f"{JOBS} succeeded" in screen


@pytest.mark.parametrize("how", ["sighup", "sigkill"])
def test_run_finishes_after_the_tui_dies(sessions, tmp_path, how):
    state_dir = tmp_path / "state"
    env = {"LAT_STATE_DIR": str(state_dir), "PATH": os.environ.get("PATH", "")}
    first = sessions()
    start_demo_run(first, tmp_path, env)
    tui = tui_process(first)
    if how == "sighup":
        first.kill()  # tmux kill-session: SIGHUP to the pane's processes
    else:
        tui.send_signal(signal.SIGKILL)
    tui.wait(timeout=HANG_S)
    assert "running" in status(state_dir)  # the TUI died mid-run
    final = wait_for_finish(state_dir)
    assert "run 1: finished" in final and final.count("succeeded") >= JOBS, final
    first.kill()
    assert_reattached_table(sessions(), tmp_path, env)

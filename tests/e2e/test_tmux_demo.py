"""lat-tui as a person uses it: in tmux, fill the plan form by keys, start the demo, read the table.

Keys go one at a time with a short pause: a burst of escape sequences (shift+tab, arrows) can reach
the app as one read and be taken for something else.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers.waits import HANG_S

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
KEY_PAUSE = 0.3


def lat_tui_command() -> str:
    exe = shutil.which("lat-tui", path=str(Path(sys.executable).parent)) or shutil.which("lat-tui")
    if exe is None:
        pytest.skip("lat-tui is not installed (pip install -e .)")
    return exe


class Tmux:
    """One tmux session on a server of its own (``-L name``): another tmux on the machine (a person's,
    or one that runs ``kill-server``) neither sees nor stops it, and it leaves nothing in theirs."""

    def __init__(self, name: str):
        self.name = name
        self.servers = 0   # a killed server is not started again: a new one is, on a socket of its own

    def command(self, *args: str) -> list[str]:
        return ["tmux", "-L", f"{self.name}-{self.servers}", *args]

    def start(self, command: str, env: dict[str, str], cwd: Path) -> None:
        args = self.command("new-session", "-d", "-s", self.name, "-x", "100", "-y", "30", "-c", str(cwd))
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        subprocess.run([*args, command], check=True)

    def keys(self, *keys: str, literal: bool = False) -> None:
        for key in keys:
            subprocess.run(self.command("send-keys", "-t", self.name, *(["-l"] if literal else []), key), check=True)
            time.sleep(KEY_PAUSE)

    def screen(self) -> str:
        out = subprocess.run(self.command("capture-pane", "-p", "-t", self.name), capture_output=True, text=True)
        return out.stdout

    def wait_for(self, predicate, what: str, timeout: float = HANG_S) -> str:
        deadline = time.monotonic() + timeout  # only a hang: a loaded host draws slowly
        while time.monotonic() < deadline:
            text = self.screen()
            if predicate(text):
                return text
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what}; screen:\n{self.screen()}")

    def kill(self) -> None:
        """Ends the session and its server. The next ``start`` is on a new server: one started on the
        socket of a server still exiting fails ("server exited unexpectedly", seen in CI)."""
        subprocess.run(self.command("kill-server"), capture_output=True)
        self.servers += 1


@pytest.fixture
def tmux():
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    session = Tmux(f"lat-e2e-{uuid.uuid4().hex[:8]}")
    yield session
    session.kill()


JOB_STATES = {"queued", "running", "succeeded", "failed", "cancelled"}


def job_rows(screen: str) -> list[str]:
    """Table rows: the job id, the job's name (``gla/demo_cfg 1:tiny-sst2``, or ``demo_cfg@1`` on narrow
    screens), then its state (the detail line and the log title start with no id)."""
    rows = []
    for line in screen.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0].isdigit() and JOB_STATES & set(words[1:3]):
            rows.append(line)
    return rows


def start_from_form(tmux, tmp_path, env, pairs: str) -> None:
    """Open lat-tui on an empty state dir and fill the plan form by keys, as a person would:
    suite demo, the given pairs, the CPU, 2 slots, an output root under tmp_path; then start."""
    tmux.start(f"{lat_tui_command()} --configs {REPO / 'configs'}; sleep 600", env, tmp_path)
    screen = tmux.wait_for(lambda s: "New run" in s and "Suites" in s, "the plan screen")
    assert "demo" in screen
    tmux.keys("Space", "Tab", "Tab")
    tmux.keys(pairs, literal=True)
    tmux.keys("Tab")
    if "jobs run on the CPU" not in screen:  # a GPU machine: pick the cpu choice, the last one
        tmux.keys("End", "Space")
    tmux.keys("Tab")
    tmux.keys("2", literal=True)
    tmux.keys("Tab", "Tab")
    tmux.keys(str(tmp_path / "runs"), literal=True)
    tmux.keys("Tab")
    tmux.keys("NUM_DATA_WORKERS=0", literal=True)
    tmux.keys("C-s")


def test_demo_plan_from_the_form_runs_to_success(tmux, tmp_path):
    state_dir = tmp_path / "state"
    env = {"LAT_STATE_DIR": str(state_dir), "PATH": os.environ.get("PATH", "")}
    start_from_form(tmux, tmp_path, env, "1:tiny-sst2 2:tiny-sst2")
    tmux.wait_for(lambda s: "run 1" in s and len(job_rows(s)) == 4, "the dashboard with 4 jobs")
    final = tmux.wait_for(
        lambda s: sum("succeeded" in row for row in job_rows(s)) == 4 or "failed" in s, "all jobs succeeded"
    )
    print(final)
    rows = job_rows(final)
    assert len(rows) == 4 and all("succeeded" in row for row in rows), final
    assert re.search(r"run 1 · finished after \d\d:\d\d · 4 succeeded", final), final
    tmux.keys("q")
    tmux.wait_for(lambda s: "lat-tui: run 1 finished; outputs in" in s, "the exit message")

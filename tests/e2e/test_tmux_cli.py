"""``lat-tui logs -f`` and ``lat-tui wait`` in a terminal, against a detached engine running fake
trainers: the log streams while the job runs, both return when it ends, Ctrl-C on wait is 130."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

from lat_core.contract.commands import CancelRun
from lat_core.front.service import ensure_engine, open_store
from tests.conftest import fake_job

from .test_tmux_demo import REPO, Tmux, tmux  # noqa: F401 (tmux: the fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def second_tmux(tmux):  # noqa: F811
    session = Tmux(f"lat-e2e-{uuid.uuid4().hex[:8]}")
    yield session
    session.kill()


def lat_line(state: Path, args: str, tag: str) -> str:
    return f"{sys.executable} -m lat_tui.cli {args}; echo {tag}-rc=$?; sleep 600"


def test_logs_follow_streams_and_wait_exits_like_headless(tmux, second_tmux, tmp_path):  # noqa: F811
    state = tmp_path / "state"
    store = open_store(state)
    run_id = store.create_run("plan: e2e", str(tmp_path / "out"), [{"id": "cpu", "label": "cpu", "slots": 2,
                                                                    "env": {"CUDA_VISIBLE_DEVICES": ""}}], 0)
    slow, bad = store.add_jobs(run_id, [fake_job(tmp_path, "slow", sleep=9, extra=("--say-steps",)),
                                        fake_job(tmp_path, "bad", sleep=0.3, exit_code=3)])
    env = {"LAT_STATE_DIR": str(state), "PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", "")}
    try:
        ensure_engine(state)
        second_tmux.start(lat_line(state, "wait", "wait1"), env, tmp_path)
        tmux.start(lat_line(state, f"logs -f {slow}", "logs"), env, tmp_path)
        tmux.wait_for(lambda s: "step 1/3" in s, "the first step line")
        assert store.job(slow).state == "running"  # it streamed while the job ran
        second_tmux.keys("C-c")
        second_tmux.wait_for(lambda s: "wait1-rc=130" in s, "wait's Ctrl-C exit code")
        screen = tmux.wait_for(lambda s: "logs-rc=0" in s, "logs -f returning when the job ended")
        assert "step 3/3" in screen and "fake trainer slow done" in screen
        second_tmux.kill()
        second_tmux.start(lat_line(state, "wait", "wait2"), env, tmp_path)
        screen = second_tmux.wait_for(lambda s: "wait2-rc=1" in s, "wait's exit code")
        assert "1/2 jobs succeeded" in screen and f"job {bad} failed" in screen
    finally:
        store.add_command(run_id, CancelRun())

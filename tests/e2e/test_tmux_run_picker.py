"""The run picker in a real terminal: two ended runs in the journal, lat-tui opens the newest,
ctrl+r lists both, enter on the older one shows its jobs."""

from __future__ import annotations

import os
import time

import pytest

from lat_core.front.service import open_store

from .test_tmux_demo import REPO, job_rows, lat_tui_command, tmux  # noqa: F401 (the tmux fixture)

pytestmark = [pytest.mark.e2e]


def ended_run(store, root, keys: list[str]) -> int:
    run_id = store.create_run("suites: [{name: demo, rounds: all}]\\n", str(root),
                              [{"id": "cpu", "label": "cpu", "slots": 1, "env": {}}], time.time())
    jobs = []
    for n, key in enumerate(keys, start=1):
        (root / key).mkdir(parents=True)
        jobs.append({"key": key, "suite": "demo", "round": 1, "stem": key.split("/")[1], "seed": n,
                     "dataset": "tiny-sst2", "job_dir": str(root / key), "argv": [], "env": {}})
    for job_id in store.add_jobs(run_id, jobs):
        store.set_job_state(job_id, "succeeded", ended=time.time(), returncode=0)
    store.set_run_state(run_id, "finished")
    return run_id


def test_ctrl_r_lists_the_runs_and_enter_shows_the_picked_one(tmux, tmp_path):  # noqa: F811
    state_dir = tmp_path / "state"
    store = open_store(state_dir)
    ended_run(store, tmp_path / "old", ["tiny-sst2_seed1/old_cfg", "tiny-sst2_seed2/old_cfg",
                                        "tiny-sst2_seed3/old_cfg"])
    ended_run(store, tmp_path / "new", ["tiny-sst2_seed1/new_cfg"])
    store.close()
    # PYTHONPATH too: the tmux server may be older than this test and hold another environment
    env = {"LAT_STATE_DIR": str(state_dir), "PATH": os.environ.get("PATH", ""),
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    tmux.start(f"{lat_tui_command()} --configs {REPO / 'configs'}; sleep 600", env, tmp_path)
    tmux.wait_for(lambda s: "run 2" in s and len(job_rows(s)) == 1, "the newest run's dashboard")
    tmux.keys("C-r")
    picker = tmux.wait_for(lambda s: "Runs" in s and "run 1" in s and "run 2" in s, "the run picker")
    assert picker.index("run 2") < picker.index("run 1") and "(shown)" in picker
    tmux.keys("Down", "Enter")
    screen = tmux.wait_for(lambda s: "run 1 · finished" in s and len(job_rows(s)) == 3, "run 1's dashboard")
    assert all("old_cfg" in row for row in job_rows(screen))
    tmux.keys("q")
    tmux.wait_for(lambda s: "lat-tui: run 1 finished" in s, "the farewell naming run 1")

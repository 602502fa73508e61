"""``lat-tui status`` of a run with a fused group: the group's memory on one line with its members
under it (plain), and on each member's row with the group's id (``--json``); no member shows a share."""

import json

from lat_core.contract.states import JobState, RunState
from lat_tui.json_views import JobView, from_json
from tests.conftest import fake_job
from tests.integration.test_cli_verbs import lat
from tests.integration.test_engine import make_run

GiB = 2**30


def finished_group_run(tmp_path):
    """As the engine leaves it: a group of three (2.4G RSS, 46G GPU at its peak) and a job alone."""
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, name) for name in ("a", "b", "c", "solo")])
    a, b, c, solo = store.jobs(run_id)
    for job in (a, b, c, solo):
        store.start_attempt(job.id, "gpu0", str(tmp_path / f"{job.key}.exit.json"))
    store.start_group(f"{a.id}.1", run_id, "gpu0", 3, [a.id, b.id, c.id])
    store.record_group_usage(f"{a.id}.1", 3, int(2.4 * GiB), 46 * GiB)
    store.record_usage({solo.id: (GiB, 5 * GiB)})
    for job in (a, b, c, solo):
        store.set_job_state(job.id, JobState.SUCCEEDED, ended=store.job(job.id).started + 60)
    store.set_run_state(run_id, RunState.FINISHED)
    return tmp_path / "state", {j.key: j for j in store.jobs(run_id)}


def test_status_shows_the_groups_memory_on_its_line_and_its_members_under_it(tmp_path):
    state, jobs = finished_group_run(tmp_path)
    out = lat(state, "status")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if f"group {jobs['a'].id}.1: 3 jobs" in line)
    assert lines[at].split()[-3:] == ["2.4G", "46G", "-"]  # rss, gpu, try
    for line, key, branch in zip(lines[at + 1:at + 4], "abc", "├├└"):
        fields = line.split()
        assert fields[0] == str(jobs[key].id) and f"{branch} {key} 1:" in line  # on a branch under the group
        assert fields[-3:-1] == ["-", "-"]  # no share of the group's memory
    assert lines[at + 4].split()[-3:-1] == ["1.0G", "5.0G"]  # a job alone keeps its own


def test_status_json_carries_the_group_and_its_figures_on_each_member_row(tmp_path):
    state, jobs = finished_group_run(tmp_path)
    out = lat(state, "status", "--json")
    assert out.returncode == 0, out.stderr
    views = {v.key: v for v in (from_json(JobView, j) for j in json.loads(out.stdout)["jobs"])}
    for key in "abc":
        view = views[key]
        assert (view.group, view.group_members) == (f"{jobs['a'].id}.1", 3)
        assert (view.group_peak_rss, view.group_peak_gpu) == (int(2.4 * GiB), 46 * GiB)
        assert (view.peak_rss, view.peak_gpu) == (None, None)
    solo = views["solo"]
    assert (solo.group, solo.group_peak_gpu, solo.peak_gpu) == (None, None, 5 * GiB)

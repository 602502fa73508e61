"""The job-folder files that carry a job's memory across processes, written and read back."""

from __future__ import annotations

import json

from lat_core.runner import detached as runner
from lat_core.containment import Containment
from lat_core.contract.jobdir import AttemptFiles, JobDir, PeakUsage


def test_peak_usage_round_trips_and_bad_values_read_as_unknown(tmp_path):
    job = JobDir(tmp_path)
    assert job.read_peak_usage() is None  # the engine never ran this folder
    job.write_peak_usage(PeakUsage(424 * 2**20, None))
    assert job.read_peak_usage() == PeakUsage(424 * 2**20, None)
    usage = job.runner_dir / "usage.json"
    usage.write_text(json.dumps({"peak_rss_bytes": "424M", "peak_gpu_bytes": -1}))
    assert job.read_peak_usage() == PeakUsage(None, None)
    usage.write_text("not json")
    assert job.read_peak_usage() is None


def test_the_pid_file_carries_a_forked_jobs_inherited_memory(tmp_path):
    exit_file = str(tmp_path / "attempt-1.exit.json")
    containment = Containment("subreaper", "tok")
    attempt = AttemptFiles(exit_file)
    runner.write_pid_file(exit_file, containment, rss_at_fork=306 * 2**20)
    assert attempt.read_pid().rss_at_fork == 306 * 2**20
    runner.write_pid_file(exit_file, containment)  # a cold launch inherits nothing
    assert attempt.read_pid().rss_at_fork == 0
    raw = json.loads(attempt.pid_path.read_text())
    attempt.pid_path.write_text(json.dumps({**raw, "rss_at_fork": "lots"}))
    assert attempt.read_pid().rss_at_fork == 0
    assert runner.own_rss() > 10 * 2**20  # this interpreter

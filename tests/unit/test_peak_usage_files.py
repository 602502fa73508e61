"""The job-folder files that carry a job's memory across processes, written and read back."""

from __future__ import annotations

import json

from lat_core.runner import detached as runner
from lat_core.containment import Containment
from lat_core.contract.job_files import (PeakUsage, pid_file_path, read_peak_usage, read_pid_record, usage_path,
                                write_peak_usage)


def test_peak_usage_round_trips_and_bad_values_read_as_unknown(tmp_path):
    assert read_peak_usage(tmp_path) is None  # the engine never ran this folder
    write_peak_usage(tmp_path, PeakUsage(424 * 2**20, None))
    assert read_peak_usage(tmp_path) == PeakUsage(424 * 2**20, None)
    usage_path(tmp_path).write_text(json.dumps({"peak_rss_bytes": "424M", "peak_gpu_bytes": -1}))
    assert read_peak_usage(tmp_path) == PeakUsage(None, None)
    usage_path(tmp_path).write_text("not json")
    assert read_peak_usage(tmp_path) is None


def test_the_pid_file_carries_a_forked_jobs_inherited_memory(tmp_path):
    exit_file = str(tmp_path / "attempt-1.exit.json")
    containment = Containment("subreaper", "tok")
    runner.write_pid_file(exit_file, containment, rss_at_fork=306 * 2**20)
    assert read_pid_record(tmp_path / "attempt-1.exit.json").rss_at_fork == 306 * 2**20
    runner.write_pid_file(exit_file, containment)  # a cold launch inherits nothing
    assert read_pid_record(tmp_path / "attempt-1.exit.json").rss_at_fork == 0
    raw = json.loads(pid_file_path(tmp_path / "attempt-1.exit.json").read_text())
    pid_file_path(tmp_path / "attempt-1.exit.json").write_text(json.dumps({**raw, "rss_at_fork": "lots"}))
    assert read_pid_record(tmp_path / "attempt-1.exit.json").rss_at_fork == 0
    assert runner.own_rss() > 10 * 2**20  # this interpreter

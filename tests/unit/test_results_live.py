"""An output root read while its run goes on: running jobs folded in, queued ones counted, not skipped."""

from __future__ import annotations

from lat_core.results import aggregate
from lat_core.results.live import aggregate_live
from tests.unit.test_results import write_job


def test_running_job_with_a_checkpointed_eval_is_a_provisional_result(tmp_path):
    root = tmp_path / "runs"
    done = write_job(root, seed=1, evals=[(10, {"mcc": 0.4})])
    running = write_job(root, seed=2, evals=[(10, {"mcc": 0.6})], finished=False)
    write_job(root, seed=3, evals=[], finished=False)  # running, no eval yet: not in a table
    queued = root / "glue-tvt_cola_seed4" / "lora_r8"
    queued.mkdir(parents=True)
    (queued / "job.yaml").write_text("name: lora_r8\n")
    write_job(root, seed=5, evals=[(10, {"mcc": 0.9})], failed="OutOfMemoryError")

    assert [r.job_dir for r in aggregate(root).results] == [done]  # finished jobs only
    live = aggregate_live(root)
    assert sorted(r.job_dir for r in live.report.results) == [done, running]
    assert live.running == frozenset({running})
    assert live.queued == 1
    reasons = sorted(s.reason.split(":")[0] for s in live.report.skipped)
    assert reasons == ["failed", "unfinished"]  # the OOM job and the job with no eval; not the queued one


def test_a_run_with_nothing_running_reads_as_aggregate(tmp_path):
    root = tmp_path / "runs"
    write_job(root, seed=1, evals=[(10, {"mcc": 0.4})])
    live = aggregate_live(root)
    assert live.report.results == aggregate(root).results
    assert (live.running, live.queued, live.report.skipped) == (frozenset(), 0, ())

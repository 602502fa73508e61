"""An output root read while its run goes on: every job accounted for as `lat-tui results` does,
running jobs folded in from the scan's own best so far, queued ones counted, not left out."""

from __future__ import annotations

from pathlib import Path

from lat_core.results import aggregate, build_tables
from lat_core.results.live import aggregate_live
from lat_core.results.render import count_text
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
    assert live.running == frozenset({running.resolve()})
    assert live.queued == 1
    assert [(job.seed, job.state) for job in live.left_out()] == [(5, "failed")]  # not the running or queued
    (table,) = build_tables(live.report)
    (row,) = table.rows
    assert (row.n, row.running, count_text(row)) == (2, 1, "1+1 of 5 !")


def test_a_run_with_nothing_running_reads_as_aggregate(tmp_path):
    root = tmp_path / "runs"
    write_job(root, seed=1, evals=[(10, {"mcc": 0.4})])
    live = aggregate_live(root)
    assert live.report.results == aggregate(root).results
    assert live.report.accounts == aggregate(root).accounts
    assert (live.running, live.queued, live.report.skipped, live.left_out()) == (frozenset(), 0, (), [])


def test_each_events_file_is_read_once(tmp_path, monkeypatch):
    """A running job's best so far is the scan's (Skipped.partial): its events are not read again."""
    root = tmp_path / "runs"
    write_job(root, seed=1, evals=[(10, {"mcc": 0.4})])
    write_job(root, seed=2, evals=[(10, {"mcc": 0.6})], finished=False)
    reads: list[Path] = []
    read_text = Path.read_text

    def counting(self, *args, **kwargs):
        if self.name == "events.jsonl":
            reads.append(self)
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counting)
    live = aggregate_live(root)
    assert len(live.running) == 1
    assert sorted(p.parent.parent.name for p in reads) == ["glue-tvt_cola_seed1", "glue-tvt_cola_seed2"]

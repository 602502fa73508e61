"""One byte formatter (lat_core.text.fmt_bytes) for the TUI's columns, results tables and diagnoses."""

from __future__ import annotations

from lat_core.results import aggregate, build_tables
from lat_core.results.render import report_markdown
from lat_core.text import fmt_bytes
from lat_core.triage.explain import cuda_oom_text
from lat_tui.columns import usage_cells
from lat_core.contract.rows import JobRow
from tests.unit.test_results import write_job

MIB, GIB = 2**20, 2**30


def test_compact_fits_four_cells():
    cases = {None: "", 0: "0B", 512 * 1024: "512K", 340 * MIB: "340M", int(1.2 * GIB): "1.2G", 78 * GIB: "78G",
             int(9.96 * GIB): "10G", 2 * 2**40: "2.0T"}
    for count, text in cases.items():
        assert fmt_bytes(count, compact=True) == text
        assert len(text) <= 4


def test_long_form_reads_like_pytorch():
    assert fmt_bytes(int(120.5 * MIB)) == "120.50 MiB"
    assert fmt_bytes(14280766259) == "13.30 GiB"
    assert fmt_bytes(1000) == "1000 bytes"
    assert fmt_bytes(None) == "" and fmt_bytes(None, unknown="?") == "?"


def test_every_front_writes_the_same_count_the_same_way(tmp_path):
    """Results, diagnoses and the job table: before, 410 MiB read "410 MiB", "410.00 MiB" and "410M"."""
    peak = 410 * MIB
    write_job(tmp_path, evals=[(10, {"mcc": 0.5})], memory={"peak_rss_bytes": peak, "peak_gpu_bytes": 0})
    report = aggregate(tmp_path)
    assert fmt_bytes(peak) == "410.00 MiB"
    assert "| 410.00 MiB |" in report_markdown(report, build_tables(report))
    assert "410.00 MiB" in cuda_oom_text("peak", ["peak"], {"self_bytes": peak, "requested_bytes": 2 * GIB,
                                                            "capacity_bytes": 24 * GIB, "gpu_index": 0})
    job = JobRow(**{**_job_fields(), "state": "succeeded", "peak_rss": peak})
    assert usage_cells(job)[0] == fmt_bytes(peak, compact=True) == "410M"


def _job_fields() -> dict:
    import dataclasses

    return {f.name: None for f in dataclasses.fields(JobRow) if f.default is dataclasses.MISSING}

"""One name for a job everywhere, the job tables' (``family/config seed:dataset``): the results
report and its command line, ``status --json`` and the engine's answers name a job as the table
does, never by its folder key (``glue-tvt_sst2_seed87/lora_r8``)."""

from pathlib import Path

from lat_core.contract.rows import JobSummary
from lat_core.results.accounts import account
from lat_core.results.render import job_json, jobs_markdown
from lat_core.results.scan import Report
from lat_core.titles import job_title
from lat_tui.json_views import JobView, from_json, job_view
from lat_tui.results_cli import print_not_in_tables

NAME = "gla/lora_r8 87:glue-tvt_sst2"


def summary(tmp_path: Path, family: str | None = "gla") -> JobSummary:
    return JobSummary(7, 1, 1, "glue-tvt_sst2_seed87/lora_r8", "E4", 1, "lora_r8", 87, "glue-tvt_sst2",
                      str(tmp_path / "glue-tvt_sst2_seed87" / "lora_r8"), "failed", None, 1, None, None, 1, None,
                      None, "boom (exit 1)", family=family)


def test_the_engine_and_titles_name_a_journal_job_as_the_tables_do(tmp_path):
    assert job_title(summary(tmp_path)) == NAME
    assert job_title(summary(tmp_path, family=None)) == "lora_r8 87:glue-tvt_sst2"


def test_the_results_report_names_each_job_as_the_tables_do(tmp_path, capsys):
    job = summary(tmp_path)
    accounted = account(Path(job.job_dir), None, job)
    report = Report(tmp_path, (), (), accounts=(accounted,))
    assert accounted.name == NAME and job_json(accounted, report)["name"] == NAME
    assert f"| 7 | {NAME} | failed |" in jobs_markdown(report)
    print_not_in_tables(report)
    assert f"job 7 {NAME}: failed: boom (exit 1)" in capsys.readouterr().out


def test_status_json_carries_the_tables_name(tmp_path):
    view = from_json(JobView, {**job_view(summary(tmp_path)).__dict__})
    assert view.name == NAME and view.key == "glue-tvt_sst2_seed87/lora_r8"
    old_journal = summary(tmp_path, family=None)   # no family in the row: the one read from job.yaml
    assert job_view(old_journal, family="mamba").name == "mamba/lora_r8 87:glue-tvt_sst2"

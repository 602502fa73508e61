"""``lat-tui results`` accounts for every job of a run: real tiny GLA training on the CPU through the
engine, on the shipped CoLA-like data (``tiny-cola``: ranked by MCC). One seed succeeds, one crashes
after its first checkpointed eval, a config fails at start, one job is cancelled before it starts;
the report lists each with its state and the journal's reason, counts ``n = succeeded of planned``
with a mark, and gives the crashed seed's best so far only on request."""
import json
import sys
from pathlib import Path

import pytest
import yaml

from lat_core.contract.commands import CancelJob
from lat_core.contract.jobdir import Eval, JobDir
from lat_tui import results_cli
from tests.helpers.json_schema import problems
from tests.integration.test_engine import drain, make_run

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "lat_core" / "results" / "results.schema.json"
CONFIG = "tiny_lora_qkvo"
CRASH_AFTER = 4  # past checkpoint-3 (eval and save every 3 steps): seed 2 fails with a best so far


def job_record(out: Path, name: str, seed: int, *, crash: bool = False, target_modules=None) -> dict:
    """A job of dataset tiny-cola as the plan would make it, its folder holding job.yaml."""
    cfg = yaml.safe_load((ROOT / "configs/experiments/gla" / f"{CONFIG}.yaml").read_text())
    cfg.update(name=name, data="tiny-cola", seed=seed)
    cfg["train"].update(max_steps=6, eval_every=3, save_every=3, log_every=1, save_total_limit=None)
    if target_modules:
        cfg["peft"]["target_modules"] = target_modules
    folder = out / f"tiny-cola_seed{seed}" / name
    folder.mkdir(parents=True)
    cfg["output_dir"] = str(folder)
    (folder / "job.yaml").write_text(yaml.safe_dump(cfg))
    trainer = ["-m", "tests.helpers.killed_trainer", str(CRASH_AFTER), "alone", str(folder / "pids")] if crash \
        else ["-m", "lat_core.train"]
    return {"key": f"{folder.parent.name}/{name}", "suite": "t", "round": 1, "stem": name, "seed": seed,
            "dataset": "tiny-cola", "job_dir": str(folder), "env": {"PYTHONPATH": str(ROOT)},
            "argv": [sys.executable, *trainer, "--cfg", str(folder / "job.yaml")]}


@pytest.fixture(scope="module")
def evening(tmp_path_factory):
    """The run, drained: its state directory, output root and jobs by key."""
    tmp = tmp_path_factory.mktemp("accounting")
    out = tmp / "out"
    records = [job_record(out, CONFIG, 1), job_record(out, CONFIG, 2, crash=True),
               job_record(out, "broken", 1, target_modules=["no_such_proj"]), job_record(out, CONFIG, 3)]
    store, run_id = make_run(tmp, records)
    cancelled = store.jobs(run_id)[3]
    store.add_command(run_id, CancelJob(cancelled.id))
    drain(store, timeout=900)
    jobs = {j.key: j for j in store.jobs(run_id)}
    assert [j.state for j in jobs.values()] == ["succeeded", "failed", "failed", "cancelled"], \
        {k: (j.state, j.error) for k, j in jobs.items()}
    return tmp / "state", out, jobs


def results(evening, capsys, *flags: str) -> tuple[int, str]:
    state, out, _ = evening
    code = results_cli.main(["--state-dir", str(state), "--format", "json,md", "--out", str(out / "_r"), *flags])
    return code, capsys.readouterr().out


def rows_of(document: dict) -> dict[tuple[str, bool], dict]:
    (table,) = document["datasets"]
    assert table["dataset"] == "tiny-cola" and table["main_metric"] == "mcc"
    return {(row["config"], row["partial"]): row for row in table["rows"]}


@pytest.mark.slow
def test_every_job_is_accounted_for_with_its_state_and_reason(evening, capsys):
    state, out, jobs = evening
    code, text = results(evening, capsys, "--json")
    document = json.loads(text)
    assert code == 0 and problems(document, json.loads(SCHEMA.read_text())) == []
    rows = rows_of(document)
    finished = rows[(CONFIG, False)]
    assert (finished["n"], finished["planned"], finished["short"], finished["seeds"]) == (1, 3, True, [1])
    assert finished["metrics"]["val_mcc"]["n"] == 1
    assert (rows[("broken", False)]["n"], rows[("broken", False)]["planned"]) == (0, 1)
    assert not any(partial for _, partial in rows)  # best so far only on request
    listed = {(j["config"], j["seed"]): j for j in document["jobs"]}
    assert {k: j["state"] for k, j in listed.items()} == {
        (CONFIG, 1): "succeeded", (CONFIG, 2): "failed", ("broken", 1): "failed", (CONFIG, 3): "cancelled"}
    assert listed[(CONFIG, 1)]["in_table"] and listed[(CONFIG, 1)]["reason"] == ""
    assert (listed[(CONFIG, 2)]["value"], listed[(CONFIG, 2)]["partial"]) == (None, False)
    for key, job in jobs.items():   # the journal's reason, in the report itself
        if job.state == "failed":
            entry = next(j for j in document["jobs"] if j["job_id"] == job.id)
            assert entry["reason"] == (job.diagnosis.one_line() if job.diagnosis else job.error), key
    assert listed[("broken", 1)]["reason"].startswith("config_error:") and "no_such_proj" in listed[("broken", 1)]["reason"]
    assert listed[(CONFIG, 3)]["reason"] == "not started: no events.jsonl"  # cancelled while queued
    md = (out / "_r" / "results.md").read_text()
    assert f"| {CONFIG} | 1 of 3 ! |" in md and "| broken | 0 of 1 ! |" in md and "### Jobs (4)" in md


@pytest.mark.slow
def test_include_partial_adds_the_crashed_seeds_best_so_far_marked(evening, capsys):
    _, out, jobs = evening
    crashed = JobDir(jobs[f"tiny-cola_seed2/{CONFIG}"].job_dir)
    evals = {e.step: e.metrics["mcc"] for e in crashed.read_events().of(Eval) if e.split == "validation"}
    assert list(evals) == [3]   # it crashed after step 4: one checkpointed eval
    code, text = results(evening, capsys, "--json", "--include-partial")
    rows = rows_of(json.loads(text))
    crashed_job = next(j for j in json.loads(text)["jobs"] if j["seed"] == 2)
    assert (crashed_job["state"], crashed_job["partial"], crashed_job["best_step"], crashed_job["value"]) == \
        ("failed", True, 3, evals[3])
    partial = rows[(CONFIG, True)]
    assert (partial["n"], partial["best_steps"], partial["metrics"]["val_mcc"]["mean"]) == (1, [3], evals[3])
    assert not partial["metrics"]["val_mcc"]["best"] and rows[(CONFIG, False)]["n"] == 1
    code, text = results(evening, capsys, "--include-partial")
    assert code == 0 and f"| {CONFIG} ~ | 1 ~ |" in text and "Not in the tables (3):" in text


@pytest.mark.slow
def test_a_run_with_nothing_usable_says_so_and_exits_1(evening, capsys, tmp_path):
    state, out, jobs = evening
    copy = tmp_path / "failed_only"
    broken = Path(jobs["tiny-cola_seed1/broken"].job_dir)
    (copy / broken.parent.name).mkdir(parents=True)
    (copy / broken.parent.name / broken.name).symlink_to(broken)
    code = results_cli.main([str(copy), "--state-dir", str(tmp_path / "no_state"), "--format", "md"])
    captured = capsys.readouterr()
    assert code == 1 and "no job under" in captured.err and "succeeded with a usable evaluation" in captured.err
    assert "broken 1:tiny-cola: failed:" in captured.out

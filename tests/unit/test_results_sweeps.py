"""Results by sweep: a sweep's jobs planned by the real front end (their overrides.json says each
point's values), their events written here with known metrics; the sweep table against means and
spreads computed by hand, stage 1 and pruned points apart, the JSON columns, the CSV and the plot."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from lat_core.config.suites import SuiteRegistry
from lat_core.contract.jobdir import JobDir
from lat_core.front.jobs import expand, materialize
from lat_core.results import aggregate, build_sweeps, build_tables, write_report
from lat_core.results.render import report_document, report_markdown
from lat_core.results.sweep_plots import is_log_spaced, sweep_figure
from lat_core.results.sweep_render import sweep_markdown
from lat_tui import results_cli
from tests.unit.test_jobs import make_plan
from tests.unit.test_plan import configs  # noqa: F401  (fixture)

PAIRS = ["1:glue-tvt_rte", "2:glue-tvt_rte"]
GRID = {"grid": {"train.lr": [1.0e-4, 1.0e-3, 1.0e-2], "peft.r": [4, 8]}}
# (lr, r) -> accuracy per seed at the best checkpoint; None: that seed failed; "pruned": the sweep pruned it
ACCURACY = {("1e-4", 4): {1: 0.60, 2: 0.70}, ("1e-4", 8): {1: 0.62, 2: 0.66},
            ("1e-3", 4): {1: 0.80, 2: 0.84}, ("1e-3", 8): {1: 0.78, 2: 0.80},
            ("0.01", 4): {1: 0.50, 2: None}, ("0.01", 8): {1: "pruned", 2: "pruned"}}


def planned(configs, tmp_path, sweep) -> list:
    jobs = expand(make_plan(configs, tmp_path, suites=[{"name": "demo"}], pairs=PAIRS, sweep=sweep),
                  SuiteRegistry(configs))
    for job in jobs:
        materialize(job)
    return jobs


def write_events(job, accuracy) -> None:
    """The trainer's events: two checkpointed evals, the better one ``accuracy``; None: it failed;
    "pruned": the sweep stopped it (its record written as the engine writes it)."""
    if accuracy == "pruned":
        JobDir(job.job_dir).write_pruned("stopped by the sweep's halving at rung 1 (step 2)")
        return
    lines = [{"event": "started", "pid": 1, "config": job.stem, "model": "gla", "seed": job.seed, "data": job.dataset}]
    for step, value in ((2, 0.1), (4, accuracy if accuracy is not None else 0.3)):
        lines += [{"event": "step", "step": step, "loss": 1.0 / step},
                  {"event": "eval", "step": step, "split": "validation", "metrics": {"accuracy": value}},
                  {"event": "checkpoint", "step": step, "path": f"checkpoint-{step}"}]
    lines.append({"event": "failed", "error_type": "ValueError", "message": "a bug"} if accuracy is None
                 else {"event": "finished", "status": "ok", "steps": 4})
    (job.job_dir / "events.jsonl").write_text("".join(json.dumps({"t": 1.0, **line}) + "\n" for line in lines))


def grid_tree(configs: Path, tmp_path: Path) -> Path:
    """GRID planned and its jobs ended as ACCURACY says: the output root."""
    for job in planned(configs, tmp_path, GRID):
        lr, r = job.stem.removeprefix("a__lr").split("_r")
        write_events(job, ACCURACY[lr, int(r)][job.seed])
    return tmp_path / "out"


@pytest.fixture
def grid_root(configs, tmp_path) -> Path:
    return grid_tree(configs, tmp_path)


def the_sweep(root: Path):
    report = aggregate(root)
    sweeps = build_sweeps(report, build_tables(report))
    assert len(sweeps) == 1
    return report, sweeps[0]


def test_each_point_is_a_row_with_its_seeds_mean_std_and_count_and_the_best_is_marked(grid_root):
    _, sweep = the_sweep(grid_root)
    assert (sweep.dataset, sweep.config, sweep.fields, sweep.spec.main) == ("glue-tvt_rte", "a", ("train.lr", "peft.r"),
                                                                           "accuracy")
    rows = {(row.value_of("train.lr"), row.value_of("peft.r")): row for row in sweep.rows}
    assert [(r.value_of("train.lr"), r.value_of("peft.r")) for r in sweep.rows] == [
        (1e-4, 4), (1e-4, 8), (1e-3, 4), (1e-3, 8), (1e-2, 4), (1e-2, 8)]  # in the order of their values
    by_hand = {(1e-4, 4): (0.65, 0.0707107, 2), (1e-4, 8): (0.64, 0.0282843, 2), (1e-3, 4): (0.82, 0.0282843, 2),
               (1e-3, 8): (0.79, 0.0141421, 2), (1e-2, 4): (0.50, 0.0, 1)}
    for point, (mean, std, n) in by_hand.items():
        stat = rows[point].stat
        assert (round(stat.mean, 6), round(stat.std, 6), stat.n) == (mean, round(std, 6), n), point
    assert rows[1e-4, 4].band == (0.60, 0.70) and rows[1e-4, 4].seeds == (1, 2)
    assert [point for point, row in rows.items() if row.best] == [(1e-3, 4)] and sweep.best is rows[1e-3, 4]
    assert (rows[1e-2, 4].planned, rows[1e-2, 4].short, rows[1e-2, 4].left_out) == (2, True, (("failed", 1),))
    pruned = rows[1e-2, 8]
    assert (pruned.stat.mean, pruned.stat.n, pruned.planned, pruned.left_out) == (None, 0, 2, (("pruned", 2),))
    assert rows[1e-3, 4].config == "a__lr1e-3_r4"  # its row in the dataset's table


def test_the_markdown_table_names_each_value_the_counts_and_the_best(grid_root):
    _, sweep = the_sweep(grid_root)
    text = sweep_markdown(sweep)
    assert "### Sweep of a on glue-tvt_rte" in text
    assert "| train.lr | peft.r | n | accuracy | seeds | not in the mean |" in text  # no stage column: one stage
    assert "| 1e-3 | 4 | 2 of 2 | **0.8200 ± 0.0283** | 1, 2 |  |" in text
    assert "| 0.01 | 4 | 1 of 2 ! | 0.5000 | 1 | 1 failed |" in text
    assert "| 0.01 | 8 | 0 of 2 ! | — |  | 2 pruned |" in text
    assert "Best: train.lr=1e-3 peft.r=4: accuracy 0.8200 ± 0.0283 (2 of 2)." in text


def stages_tree(configs: Path, tmp_path: Path) -> Path:
    """A two-stage search over three learning rates: stage 1 scores higher than any full run
    (0.7, 0.9, 0.5), 1e-3 promoted (0.85, 0.87 over two seeds), the others' full jobs pruned."""
    sweep = {"grid": {"train.lr": [1.0e-4, 1.0e-3, 1.0e-2]},
             "stages": {"screen": {"train.max_steps": 4}, "promote": 1}}
    screened = {"1e-4": 0.7, "1e-3": 0.9, "0.01": 0.5}
    for job in planned(configs, tmp_path, sweep):
        lr = job.stem.removeprefix("a__lr").removesuffix("__screen")
        if job.stem.endswith("__screen"):
            write_events(job, screened[lr])
        else:
            write_events(job, {1: 0.85, 2: 0.87}[job.seed] if lr == "1e-3" else "pruned")
    return tmp_path / "out"


def test_a_two_stage_search_keeps_stage_1_apart_and_never_the_best(configs, tmp_path):
    _, table = the_sweep(stages_tree(configs, tmp_path))
    assert [(r.stage, r.value_of("train.lr"), r.stat.mean, r.stat.n, r.planned, r.left_out) for r in table.rows] == [
        ("full", 1e-4, None, 0, 2, (("pruned", 2),)), ("full", 1e-3, pytest.approx(0.86), 2, 2, ()),
        ("full", 1e-2, None, 0, 2, (("pruned", 2),)),
        ("screen", 1e-4, 0.7, 1, 1, ()), ("screen", 1e-3, 0.9, 1, 1, ()), ("screen", 1e-2, 0.5, 1, 1, ())]
    assert table.best.stage == "full" and table.best.value_of("train.lr") == 1e-3
    text = sweep_markdown(table)
    assert "| train.lr | stage | n | accuracy |" in text and "| 1e-3 | screen | 1 of 1 | 0.9000 | 1 |  |" in text


def test_json_has_the_sweep_values_as_columns_and_validates_against_the_schema(grid_root):
    from tests.helpers.json_schema import problems

    report, _ = the_sweep(grid_root)
    document = json.loads(json.dumps(report_document(report, build_tables(report))))
    schema = json.loads((Path(results_cli.__file__).parents[1] / "lat_core/results/results.schema.json").read_text())
    assert problems(document, schema) == []
    rows = {row["config"]: row for row in document["datasets"][0]["rows"]}
    assert (rows["a__lr1e-3_r4"]["sweep"], rows["a__lr1e-3_r4"]["sweep_stage"]) == ({"train.lr": 0.001, "peft.r": 4},
                                                                                   "full")
    job = next(j for j in document["jobs"] if j["config"] == "a__lr0.01_r8" and j["seed"] == 2)
    assert (job["state"], job["sweep"]) == ("pruned", {"train.lr": 0.01, "peft.r": 8})
    sweep = document["sweeps"][0]
    assert (sweep["config"], sweep["fields"], sweep["main_metric"]) == ("a", ["train.lr", "peft.r"], "accuracy")
    best = [row for row in sweep["rows"] if row["best"]]
    assert [(b["values"], b["n"], b["planned"], b["min"], b["max"]) for b in best] == [
        ({"train.lr": 0.001, "peft.r": 4}, 2, 2, 0.8, 0.84)]
    assert sweep["rows"][-1]["not_in_mean"] == {"pruned": 2}
    sweep["rows"][0]["stage"], document["jobs"][0]["sweep"] = "half", {"train.lr": {"deep": 1}}
    del sweep["rows"][1]["planned"]
    assert sorted(problems(document, schema)) == [  # the schema describes the sweep's columns, not merely allows them
        "$.jobs[0].sweep.train.lr: expected number|string|boolean|null|array, got dict",
        "$.sweeps[0].rows[0].stage: 'half' not one of ['full', 'screen']", "$.sweeps[0].rows[1]: lacks 'planned'"]


def test_a_job_outside_a_sweep_has_no_sweep_columns(configs, tmp_path):
    for job in planned(configs, tmp_path, {}):
        write_events(job, 0.7)
    report = aggregate(tmp_path / "out")
    document = report_document(report, build_tables(report))
    assert document["sweeps"] == [] and {j["sweep"] for j in document["jobs"]} == {None}
    assert document["datasets"][0]["rows"][0]["sweep"] is None


def test_the_report_writes_the_sweeps_csv_and_png_and_the_cli_prints_the_table(grid_root, tmp_path, capsys):
    out = tmp_path / "results"
    assert results_cli.main([str(grid_root), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "### Sweep of a on glue-tvt_rte" in printed and "**0.8200 ± 0.0283**" in printed
    rows = list(csv.DictReader(io.StringIO((out / "glue-tvt_rte_a_sweep.csv").read_text())))
    assert [(r["train.lr"], r["peft.r"], r["n"], r["planned"], r["best"]) for r in rows][2] == ("0.001", "4", "2", "2", "*")
    assert (out / "glue-tvt_rte_a_sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Sweep of a on glue-tvt_rte" in (out / "results.md").read_text()


def test_the_plot_has_a_panel_per_field_a_log_axis_for_lr_a_band_per_line_and_the_best_starred(grid_root):
    from matplotlib.collections import PolyCollection

    _, sweep = the_sweep(grid_root)
    lr, rank = sweep_figure(sweep).axes
    assert (lr.get_xlabel(), lr.get_xscale(), rank.get_xlabel(), rank.get_xscale()) == ("train.lr", "log", "peft.r",
                                                                                         "linear")
    lines = {line.get_label(): list(zip(line.get_xdata(), line.get_ydata())) for line in lr.get_lines()}
    assert lines["peft.r=4"] == [pytest.approx(p) for p in [(1e-4, 0.65), (1e-3, 0.82), (0.01, 0.5)]]
    assert lines["peft.r=8"] == [pytest.approx(p) for p in [(1e-4, 0.64), (1e-3, 0.79)]]  # 0.01: pruned, no value
    assert len([c for c in lr.collections if isinstance(c, PolyCollection)]) == 2  # a min-max band per line
    labels = {c.get_label(): c.get_offsets().tolist() for c in lr.collections if not isinstance(c, PolyCollection)}
    assert labels["best accuracy 0.8200"] == [pytest.approx([1e-3, 0.82])]
    assert [x for x, _ in labels["no value (pruned)"]] == [0.01]  # labelled by why it has none


def test_a_log_axis_for_values_spanning_a_factor_of_ten_or_more():
    assert is_log_spaced([1e-4, 1e-3, 1e-2]) and is_log_spaced([4, 64])
    assert not is_log_spaced([8, 16]) and not is_log_spaced([0.0, 0.1, 0.2]) and not is_log_spaced(["q", "v"])


def test_a_random_search_plots_markers_and_still_marks_the_best(configs, tmp_path):
    sweep = {"random": {"n": 4, "seed": 3, "space": {"train.lr": {"log_uniform": [1.0e-5, 1.0e-2]},
                                                      "peft.dropout": {"uniform": [0.0, 0.3]}}}}
    jobs = planned(configs, tmp_path, sweep)
    for i, job in enumerate(jobs):  # point p's seeds are jobs 2p and 2p+1: the last point is the best
        write_events(job, 0.5 + 0.01 * i)
    _, table = the_sweep(tmp_path / "out")
    assert len(table.rows) == 4 and table.best.stat.mean == pytest.approx(0.565)
    assert table.best.config == jobs[-1].stem
    out = tmp_path / "results"
    write_report(aggregate(tmp_path / "out"), out, formats={"png"})
    assert (out / "glue-tvt_rte_a_sweep.png").stat().st_size > 0


def broken_rows(rows: list) -> dict[str, object]:
    """overrides.json broken by hand, each way: what the file then holds."""
    sweep_row = next(i for i, row in enumerate(rows) if row["source"] == "sweep")

    def with_row(**change):
        edited = [dict(row) for row in rows]
        edited[sweep_row] = {k: v for k, v in {**edited[sweep_row], **change}.items() if v is not None}
        return edited
    return {"a mapping value": with_row(value={"lr": 1}), "no field": with_row(field=None),
            "no value": with_row(value=None), "not a list": {"rows": rows}, "not JSON": "[{"}


@pytest.mark.parametrize("how, said", [
    ("a mapping value", "the sweep's train.lr: a dict is not a swept value"), ("no field", "a sweep value, has no field"),
    ("no value", "the sweep's train.lr, has no value"), ("not a list", "not a list of provenance rows"),
    ("not JSON", "not JSON"),
])
def test_a_hand_broken_overrides_file_leaves_its_job_out_of_the_sweep_and_the_report_says_so(grid_root, how, said):
    job_dir = grid_root / "glue-tvt_rte_seed1" / "a__lr1e-3_r4"
    path = job_dir / "overrides.json"
    broken = broken_rows(json.loads(path.read_text()))[how]
    path.write_text(broken if isinstance(broken, str) else json.dumps(broken))
    (grid_root / "glue-tvt_rte_seed2" / "a__lr1e-4_r4" / "overrides.json").unlink()  # a folder made by hand
    report, sweep = the_sweep(grid_root)
    row = next(r for r in sweep.rows if r.values == (("train.lr", 0.001), ("peft.r", 4)))
    assert (row.planned, row.seeds) == (1, (2,))  # the other seed's job of the point
    (warning,) = report.warnings  # the folder without the file is no sweep's: nothing to say
    assert warning.startswith(f"{job_dir}: overrides.json: ") and warning.endswith("; left out of the sweep tables")
    assert said in warning
    assert any(r.job_dir == job_dir for r in report.results)  # still in the dataset's table
    assert report_document(report, build_tables(report))["warnings"] == [warning]
    text = report_markdown(report, build_tables(report))
    assert "### Left out of the sweep tables (1)" in text and f"- `{job_dir}`: overrides.json: " in text

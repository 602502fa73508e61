"""Results aggregation on output trees built here with known metrics."""

from __future__ import annotations

import csv
import io
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lat_core.results import ResultsError, aggregate, build_tables, spec_for, write_report
from lat_core.results.best import choose_best
from lat_core.results.metrics import dataset_key
from lat_core.results.render import report_markdown
from lat_tui import results_cli

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_job(root: Path, *, data="glue-tvt_cola", seed=1, config="lora_r8", evals=(),
              tests=(), checkpoints=None, losses=None, finished=True, failed=None,
              memory=None, garbage=(), job_yaml=True) -> Path:
    """A job folder as the trainer leaves it. ``evals``/``tests``: [(step, metrics)];
    ``checkpoints`` defaults to every eval step; ``garbage`` lines are appended raw."""
    pair = f"{Path(str(data)).name}_seed{seed}"
    job_dir = root / pair / config
    job_dir.mkdir(parents=True)
    if job_yaml:
        (job_dir / "job.yaml").write_text(yaml.safe_dump(
            {"name": config, "data": data, "seed": seed, "model": {"family": "gla"},
             "peft": {"method": "lora"}, "train": {"lr": 1e-4}, "output_dir": str(job_dir)}))
    steps = [s for s, _ in evals]
    checkpoints = steps if checkpoints is None else checkpoints
    losses = losses if losses is not None else [(s, 1.0 / (1 + s)) for s in range(1, max(steps or [1]) + 1)]
    lines = [{"event": "started", "pid": 1, "config": config, "model": "gla", "trainable_params": 10,
              "total_params": 100, "seed": seed, "data": data}]
    lines += [{"event": "step", "step": s, "loss": v, "lr": 1e-4} for s, v in losses]
    lines += [{"event": "eval", "step": s, "split": "validation", "metrics": m} for s, m in evals]
    lines += [{"event": "eval", "step": s, "split": "test", "metrics": m} for s, m in tests]
    lines += [{"event": "checkpoint", "step": s, "path": f"checkpoint-{s}"} for s in checkpoints]
    lines.append({"event": "memory", **(memory or {"peak_rss_bytes": 3 * 2**30, "peak_gpu_bytes": 0})})
    if failed:
        lines.append({"event": "failed", "error_type": failed, "message": "CUDA out of memory\nmore"})
    elif finished:
        lines.append({"event": "finished", "status": "ok", "steps": max(steps or [0])})
    text = "".join(json.dumps({"t": 1.0, **line}) + "\n" for line in lines)
    (job_dir / "events.jsonl").write_text(text + "".join(g + "\n" for g in garbage))
    return job_dir


COLA_A = {1: [0.40, 0.50, 0.45], 2: [0.30, 0.60, 0.55], 3: [0.20, 0.52, 0.58]}
COLA_B = {1: [0.10, 0.20, 0.30], 2: [0.15, 0.25, 0.35]}


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "runs"
    for seed, values in COLA_A.items():
        write_job(root, seed=seed, config="lora_r8",
                  evals=[(10 * (i + 1), {"mcc": v, "accuracy": 0.7, "loss": 0.5}) for i, v in enumerate(values)],
                  tests=[(s, {"mcc": 0.01 * s + seed}) for s in (10, 20, 30)],
                  memory={"peak_rss_bytes": 2**30, "peak_gpu_bytes": (seed + 1) * 2**30})
    for seed, values in COLA_B.items():
        write_job(root, seed=seed, config="dora_r8",
                  evals=[(10 * (i + 1), {"mcc": v}) for i, v in enumerate(values)])
    write_job(root, seed=1, config="tie", evals=[(10, {"mcc": 0.7}), (20, {"mcc": 0.7}), (30, {"mcc": 0.1})])
    write_job(root, seed=1, config="uncheckpointed_peak",
              evals=[(10, {"mcc": 0.2}), (20, {"mcc": 0.99}), (30, {"mcc": 0.3})], checkpoints=[10, 30])
    write_job(root, seed=2, config="no_evals", evals=[])
    write_job(root, seed=3, config="corrupt_kept", evals=[(10, {"mcc": 0.33})], garbage=["{not json", "[1, 2]"])
    corrupt = write_job(root, seed=4, config="corrupt_lost", evals=[])
    with (corrupt / "events.jsonl").open("a") as fh:
        fh.write('{"t": 1, "event": "eval", "step": 10, "split": "valid\n')
    write_job(root, seed=5, config="oom", evals=[(10, {"mcc": 0.9})], failed="OutOfMemoryError")
    write_job(root, seed=6, config="running", evals=[(10, {"mcc": 0.9})], finished=False)
    write_job(root, data="glue-tvt_mrpc", seed=1, config="lora_r8",
              evals=[(10, {"f1": 0.8, "accuracy": 0.75}), (20, {"f1": 0.85, "accuracy": 0.7})],
              tests=[(20, {"f1": 0.83, "accuracy": 0.72})])
    write_job(root, data="/data/local/my_set", seed=1, config="lora_r8", evals=[(5, {"accuracy": 0.6})])
    (root / "notes" / "misc").mkdir(parents=True)
    (root / "notes" / "misc" / "readme.txt").write_text("not a job")
    (root / "empty_top").mkdir()
    (root / "_results").mkdir()
    return root


def by_config(report, dataset="glue-tvt_cola"):
    return {(r.config, r.seed): r for r in report.results if r.dataset == dataset}


def skipped_reasons(report) -> dict[str, str]:
    """Folder name -> why it is not in a table: jobs (with their state) and folders that hold none."""
    jobs = {a.job_dir.name: f"{a.state}: {a.reason}" for a in report.accounts if not a.in_table}
    return {**jobs, **{s.path.name: s.reason for s in report.skipped}}


def test_metric_specs():
    assert spec_for("glue-tvt_cola").main == "mcc"
    assert spec_for("glue-tvt_mrpc").shown == ("f1", "accuracy")
    assert spec_for("glue-tvt_stsb").shown == ("pearson", "spearman")
    assert spec_for("glue-tvt_mnli").shown == ("accuracy", "accuracy_mm")
    assert spec_for("glue-tvt_rte").main == "accuracy"
    assert spec_for("samsum").main == "rougeL"
    assert spec_for("dart").main == "bleu"
    assert spec_for("spider").main == "exec_accuracy"
    assert spec_for("tiny-cola").main == "mcc" and spec_for("tiny-sst2").main == "accuracy"
    assert spec_for("/srv/data/glue-tvt_qqp/").main == "f1"
    assert spec_for("/srv/data/whatever").main == "accuracy"
    assert dataset_key("./data/my_set") == "my_set" and dataset_key("samsum") == "samsum"


def test_choose_best_ties_and_checkpoints():
    spec = spec_for("glue-tvt_cola")
    evals = {10: {"mcc": 0.5}, 20: {"mcc": 0.5}, 30: {"mcc": 0.9}, 40: {"mcc": None}}
    best = choose_best(evals, {10: "c10", 20: "c20", 40: "c40"}, spec, {20: {"mcc": 0.1}, 10: {"mcc": 0.2}})
    assert (best.step, best.value, best.checkpoint, best.test) == (10, 0.5, "c10", {"mcc": 0.2})
    assert choose_best(evals, {40: "c40"}, spec) is None


def test_best_checkpoint_and_test_metrics(tree):
    report = aggregate(tree)
    jobs = by_config(report)
    assert jobs[("lora_r8", 1)].best_step == 20 and jobs[("lora_r8", 3)].best_step == 30
    assert jobs[("lora_r8", 2)].checkpoint == tree / "glue-tvt_cola_seed2" / "lora_r8" / "checkpoint-20"
    assert jobs[("lora_r8", 2)].test == {"mcc": pytest.approx(2.2)}
    assert jobs[("tie", 1)].best_step == 10
    assert jobs[("uncheckpointed_peak", 1)].best_step == 30
    assert jobs[("corrupt_kept", 3)].bad_lines == 2 and jobs[("corrupt_kept", 3)].best_value == 0.33
    assert any("corrupt_kept" in w for w in report.warnings)
    mrpc = by_config(report, "glue-tvt_mrpc")[("lora_r8", 1)]
    assert mrpc.best_step == 20 and mrpc.test == {"f1": 0.83, "accuracy": 0.72}
    assert "my_set" in report.datasets


def test_skipped_folders_have_reasons(tree):
    reasons = skipped_reasons(aggregate(tree))
    assert reasons["no_evals"] == "succeeded: no usable evaluation: no validation eval"
    assert reasons["corrupt_lost"].startswith("succeeded: no usable evaluation: corrupt events.jsonl (1 bad lines)")
    assert reasons["oom"].startswith("failed: OutOfMemoryError: CUDA out of memory")
    assert reasons["running"].startswith("unfinished: no finished event")
    assert reasons["misc"].startswith("foreign folder")
    assert reasons["empty_top"].startswith("foreign folder")
    assert "_results" not in reasons
    assert len(reasons) == 6


def test_tables_mean_std_count_and_best(tree):
    tables = {t.dataset: t for t in build_tables(aggregate(tree))}
    cola = tables["glue-tvt_cola"]
    assert [c.key for c in cola.columns] == ["val_mcc", "test_mcc"]
    rows = {r.config: r for r in cola.rows}
    best_a = [0.50, 0.60, 0.58]
    stat = rows["lora_r8"].stats["val_mcc"]
    assert stat.n == 3 and rows["lora_r8"].n == 3 and rows["lora_r8"].seeds == (1, 2, 3)
    assert stat.mean == pytest.approx(statistics.mean(best_a))
    assert stat.std == pytest.approx(statistics.stdev(best_a))
    assert rows["tie"].stats["val_mcc"].std == 0.0 and rows["tie"].stats["val_mcc"].n == 1
    assert rows["dora_r8"].stats["val_mcc"].mean == pytest.approx(0.325)
    assert rows["tie"].best == {"val_mcc"} and rows["lora_r8"].best == {"test_mcc"}
    assert cola.rows[0].config == "tie"
    assert rows["lora_r8"].peak_memory_bytes == 4 * 2**30
    assert rows["dora_r8"].peak_memory_bytes == 3 * 2**30
    assert [c.key for c in tables["glue-tvt_mrpc"].columns] == ["val_f1", "val_accuracy", "test_f1", "test_accuracy"]


def test_best_ties_mark_every_tied_row(tmp_path):
    for config in ("a", "b", "c"):
        write_job(tmp_path, config=config, evals=[(10, {"mcc": 0.2 if config == "c" else 0.5})])
    (table,) = build_tables(aggregate(tmp_path))
    assert {r.config for r in table.rows if "val_mcc" in r.best} == {"a", "b"}


def test_every_format_parses_back(tree, tmp_path):
    report = aggregate(tree, workers=4)
    out = tmp_path / "out"
    written = write_report(report, out)
    names = {p.name for p in written}
    assert {"results.md", "results.json", "results_glue-tvt_cola.csv", "results_glue-tvt_mrpc.csv",
            "glue-tvt_cola_mcc.png", "glue-tvt_cola_curves.png", "glue-tvt_cola_memory.png"} <= names
    data = json.loads((out / "results.json").read_text())
    cola = next(d for d in data["datasets"] if d["dataset"] == "glue-tvt_cola")
    lora = next(r for r in cola["rows"] if r["config"] == "lora_r8")
    assert lora["metrics"]["val_mcc"]["n"] == 3 and lora["metrics"]["test_mcc"]["best"] is True
    assert lora["metrics"]["val_mcc"]["best"] is False
    assert lora["checkpoints"][0] == "glue-tvt_cola_seed1/lora_r8/checkpoint-20"
    assert len(data["skipped"]) == 2 and all(s["reason"] for s in data["skipped"])  # folders of no job
    left_out = [j for j in data["jobs"] if not j["in_table"]]
    assert len(data["jobs"]) == 14 and len(left_out) == 4 and all(j["reason"] for j in left_out)
    rows = list(csv.DictReader(io.StringIO((out / "results_glue-tvt_cola.csv").read_text())))
    tie = next(r for r in rows if r["config"] == "tie")
    assert tie["val_mcc_best"] == "*" and float(tie["val_mcc_mean"]) == 0.7 and tie["val_mcc_n"] == "1"
    assert next(r for r in rows if r["config"] == "lora_r8")["seeds"] == "1;2;3"
    md = (out / "results.md").read_text()
    assert "**0.7000**" in md and "| lora_r8 | 3 of 3 | 0.5600 ± 0.0529 |" in md
    assert "Skipped folders (2)" in md and "### Jobs (14)" in md and "checkpoint-20" in md


def test_small_drops_paths(tree, tmp_path):
    out = tmp_path / "small"
    write_report(aggregate(tree), out, formats={"json", "csv", "md"}, small=True)
    data = json.loads((out / "results.json").read_text())
    assert all("checkpoints" not in r and "job_configs" not in r for d in data["datasets"] for r in d["rows"])
    header = (out / "results_glue-tvt_cola.csv").read_text().splitlines()[0]
    assert "checkpoints" not in header and "job_configs" not in header
    assert "checkpoint-" not in (out / "results.md").read_text()
    assert not list(out.glob("*.png"))


def test_plots_are_real_pngs(tree, tmp_path):
    written = write_report(aggregate(tree), tmp_path / "png", formats={"png"})
    assert written and all(p.suffix == ".png" for p in written)
    for path in written:
        blob = path.read_bytes()
        assert blob.startswith(PNG_MAGIC) and len(blob) > 5 * 1024, path


def test_unknown_format_and_missing_root(tree, tmp_path):
    with pytest.raises(ResultsError):
        write_report(aggregate(tree), tmp_path / "x", formats={"xlsx"})
    with pytest.raises(ResultsError):
        aggregate(tmp_path / "nowhere")


def test_empty_tree_renders(tmp_path):
    report = aggregate(tmp_path)
    assert report.results == () and "No job succeeded with a usable evaluation" in report_markdown(report, [])


def test_many_folders_with_workers(tmp_path):
    configs = [f"cfg{i}" for i in range(20)]
    for seed in range(5):
        for dataset in ("glue-tvt_sst2", "glue-tvt_rte", "samsum"):
            for config in configs:
                metric = spec_for(dataset).main
                write_job(tmp_path, data=dataset, seed=seed, config=config,
                          evals=[(s, {metric: (s + seed) / 100}) for s in (10, 20, 30)])
    report = aggregate(tmp_path, workers=4)
    assert len(report.results) == 300 and not report.skipped
    tables = build_tables(report)
    assert len(tables) == 3 and all(len(t.rows) == 20 and t.rows[0].n == 5 for t in tables)


def test_cli_prints_tables_and_skipped(tree, tmp_path, capsys):
    code = results_cli.main([str(tree), "--format", "md,json", "--workers", "2"])
    captured = capsys.readouterr()
    assert code == 0
    assert "### glue-tvt_cola" in captured.out and "| tie |" in captured.out
    assert "2 folder(s) skipped" in captured.err and "Not in the tables (4):" in captured.out
    assert "oom 5:glue-tvt_cola: failed: OutOfMemoryError: CUDA out of memory" in captured.out
    assert (tree / "_results" / "results.json").is_file()
    assert not list((tree / "_results").glob("*.png"))


def test_cli_errors_are_exit_codes(tree, tmp_path, capsys):
    assert results_cli.main([str(tmp_path / "nowhere")]) == 2
    assert results_cli.main([str(tree), "--format", "pdf"]) == 2
    assert results_cli.main([str(tree), "--workers", "0"]) == 2
    assert "unknown format" in capsys.readouterr().err


def test_results_import_is_light():
    code = ("import sys, lat_core.results, lat_core.results.plots, lat_core.notify\n"
            "print(sorted(m for m in ('matplotlib', 'torch', 'textual', 'rich') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_parse_events_fast_and_slow_paths():
    from lat_core.contract.jobdir import Finished
    from lat_core.results.scan import parse_events

    good = '{"event": "step", "step": 1, "loss": 0.5}\n\n{"event": "step", "step": 2, "loss": NaN}\n'
    parsed = parse_events(good)
    assert parsed.losses == [(1, 0.5)] and parsed.bad_lines == 0
    split_object = '{"event": "eval", "step": 1, "split": "validation", "metrics": {"a": [1\n2]}}\n'
    parsed = parse_events(split_object + '{"event": "finished"}\n"just a string"\n')
    assert parsed.bad_lines == 3 and parsed.evals == {} and parsed.finished == Finished()


def test_identity_without_yaml_and_from_yaml(tmp_path):
    job = write_job(tmp_path, data="glue-tvt_rte", seed=4, config="no_yaml", job_yaml=False,
                    evals=[(10, {"accuracy": 0.6, "loss": None})])
    other = write_job(tmp_path, data="glue-tvt_rte", seed=4, config="from_yaml",
                      evals=[(10, {"accuracy": 0.61})])
    text = (other / "events.jsonl").read_text().replace('"config": "from_yaml", ', "")
    (other / "events.jsonl").write_text(text)
    (tmp_path / "glue-tvt_rte_seed4" / "planned").mkdir()
    (tmp_path / "glue-tvt_rte_seed4" / "planned" / "job.yaml").write_text("name: planned\n")
    report = aggregate(tmp_path)
    jobs = {r.config: r for r in report.results}
    assert jobs["no_yaml"].seed == 4 and jobs["no_yaml"].config_path is None
    assert jobs["from_yaml"].config_path == other / "job.yaml" and jobs["from_yaml"].dataset == "glue-tvt_rte"
    assert skipped_reasons(report) == {"planned": "not started: no events.jsonl"}
    assert job.name == "no_yaml"


def test_a_missing_meteor_is_said_under_its_table_not_left_blank(tmp_path):
    """A DART job evaluated without WordNet has no meteor: the table says why (issue 27 item 2)."""
    write_job(tmp_path, data="dart", seed=1, evals=[(2, {"bleu": 0.31, "meteor": 0.52, "sacrebleu": 31.0})])
    write_job(tmp_path, data="dart", seed=2, evals=[(2, {"bleu": 0.29, "meteor": None, "sacrebleu": 29.0})])
    report = aggregate(tmp_path)
    (table,) = build_tables(report)
    assert [c.key for c in table.columns] == ["val_bleu", "val_meteor", "val_sacrebleu"]
    assert len(table.notes) == 1 and table.notes[0].startswith("meteor: missing for 1 of 2 job(s): needs WordNet")
    assert f"- {table.notes[0]}" in report_markdown(report, [table])
    write_job(tmp_path / "complete", data="dart", evals=[(2, {"bleu": 0.3, "meteor": 0.5, "sacrebleu": 30.0})])
    assert build_tables(aggregate(tmp_path / "complete"))[0].notes == ()


def test_aliases_and_subsets_rank_by_their_tasks_metric(tmp_path):
    """The seeds' spider-tvt is Spider (exec_accuracy, not accuracy); glue-tvt_cola_200 is CoLA."""
    write_job(tmp_path, data="spider-tvt", config="lora", evals=[(10, {"exec_accuracy": 0.4, "accuracy": 0.9})])
    write_job(tmp_path, data="glue-tvt_cola_200", config="lora", evals=[(10, {"mcc": 0.3, "accuracy": 0.8})])
    tables = {t.dataset: t for t in build_tables(aggregate(tmp_path))}
    assert tables["spider-tvt"].spec.main == "exec_accuracy" and tables["spider-tvt"].rows[0].stats["val_exec_accuracy"].mean == 0.4
    assert tables["glue-tvt_cola_200"].spec.main == "mcc"


def test_the_task_the_trainer_named_decides_the_main_metric(tmp_path):
    """A CoLA-like dataset under a name of its own (a local folder) ranks by MCC when its started
    event says task cola."""
    job = write_job(tmp_path, data="/data/acceptability", config="lora",
                    evals=[(10, {"mcc": 0.2, "accuracy": 0.9}), (20, {"mcc": 0.4, "accuracy": 0.6})])
    text = (job / "events.jsonl").read_text().replace('"event": "started",', '"event": "started", "task": "cola",')
    (job / "events.jsonl").write_text(text)
    (result,) = aggregate(tmp_path).results
    assert (result.metric, result.best_step, result.task) == ("mcc", 20, "cola")
    assert build_tables(aggregate(tmp_path))[0].spec.main == "mcc"


def test_a_job_that_failed_then_resumed_and_finished_is_in_the_table(tmp_path):
    job = write_job(tmp_path, config="lora", evals=[(10, {"mcc": 0.2})], failed="RuntimeError")
    with (job / "events.jsonl").open("a") as fh:
        for line in ({"event": "started", "config": "lora", "data": "glue-tvt_cola", "seed": 1, "resumed_from": 10},
                     {"event": "eval", "step": 20, "split": "validation", "metrics": {"mcc": 0.5}},
                     {"event": "checkpoint", "step": 20, "path": "checkpoint-20"},
                     {"event": "finished", "status": "ok", "steps": 20}):
            fh.write(json.dumps({"t": 2.0, **line}) + "\n")
    report = aggregate(tmp_path)
    assert [(r.best_step, r.best_value) for r in report.results] == [(20, 0.5)]
    assert [(a.state, a.in_table) for a in report.accounts] == [("succeeded", True)]


def test_folders_alone_count_planned_and_give_partial_rows_on_request(tree):
    """Without a journal every job folder is a planned job: a config whose seed failed reads
    ``n of planned`` with the mark; --include-partial adds its best so far as a row apart."""
    plain = aggregate(tree)
    rows = {r.config: r for r in build_tables(plain)[0].rows}
    assert (rows["oom"].n, rows["oom"].planned, rows["oom"].short) == (0, 1, True)
    assert (rows["lora_r8"].n, rows["lora_r8"].planned, rows["lora_r8"].short) == (3, 3, False)
    assert not plain.partial
    report = aggregate(tree, include_partial=True)
    partial = [r for r in build_tables(report)[0].rows if r.partial]
    assert {r.config: r.stats["val_mcc"].mean for r in partial} == {"oom": 0.9, "running": 0.9}
    assert not any(r.best for r in partial)   # a partial row never holds a column's best
    assert {a.job_dir.name for a in report.accounts if a.partial} == {"oom", "running"}
    assert [r.config for r in report.results if r.config in ("oom", "running")] == []


def test_results_json_validates_against_the_shipped_schema(tree, tmp_path):
    from lat_core.results.render import SCHEMA_VERSION
    from tests.helpers.json_schema import problems

    schema = json.loads((Path(results_cli.__file__).parents[1] / "lat_core/results/results.schema.json").read_text())
    write_report(aggregate(tree, include_partial=True), tmp_path / "o", formats={"json"})
    document = json.loads((tmp_path / "o" / "results.json").read_text())
    assert document["schema_version"] == SCHEMA_VERSION == schema["properties"]["schema_version"]["const"]
    assert problems(document, schema) == []
    document["datasets"][0]["rows"][0]["n"] = "3"
    del document["jobs"][0]["state"]
    assert problems(document, schema) == ["$.datasets[0].rows[0].n: expected integer, got str", "$.jobs[0]: lacks 'state'"]


def test_curves_give_each_config_one_colour_a_seed_band_and_a_legend_for_every_panel(tree):
    """Read through matplotlib's objects: per config one colour in both panels, a mean line with a
    min-max band over its seeds, and one figure legend naming every config (issue 28, item 19)."""
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import to_hex

    from lat_core.results.plots import curves_figure

    report = aggregate(tree)
    table = next(t for t in build_tables(report) if t.dataset == "glue-tvt_cola")
    figure = curves_figure(table, [r for r in report.results if r.dataset == "glue-tvt_cola"])
    configs = sorted({r.config for r in report.results if r.dataset == "glue-tvt_cola"})
    panels = figure.axes
    assert len(panels) == 2
    colours = [{line.get_label().split(" (n=")[0]: to_hex(line.get_color()) for line in axes.get_lines()}
               for axes in panels]
    assert set(colours[0]) == set(configs) and colours[0] == colours[1]
    assert len(set(colours[0].values())) == len(configs)   # no two configs share a colour
    (legend,) = figure.legends
    assert [t.get_text().split(" (n=")[0] for t in legend.get_texts()] == configs
    assert [to_hex(h.get_color()) for h in legend.legend_handles] == [colours[0][c] for c in configs]
    metric = panels[1]
    mean = next(line for line in metric.get_lines() if line.get_label().startswith("lora_r8 "))
    assert list(mean.get_xdata()) == [10, 20, 30]
    assert list(mean.get_ydata()) == pytest.approx([statistics.fmean(v[i] for v in COLA_A.values()) for i in range(3)])
    band = next(c for c in metric.collections if isinstance(c, PolyCollection) and c.get_label().startswith("lora_r8 "))
    ys = band.get_paths()[0].vertices[:, 1]
    assert min(ys) == pytest.approx(min(min(v) for v in COLA_A.values()))
    assert max(ys) == pytest.approx(max(max(v) for v in COLA_A.values()))
    assert to_hex(band.get_facecolor()[0], keep_alpha=False) == colours[1]["lora_r8"]
    single = [c for c in metric.collections if c.get_label().startswith("tie ")]
    assert single == []   # one seed: no band to draw


def test_run_selection_and_the_latest_runs_job_of_a_folder(tmp_path, capsys):
    """The journal decides which jobs count: by default every run written to the root (a folder's
    job in a later run replaces its earlier one) and the folders none names; ``--run N`` that run's
    jobs alone."""
    from lat_core.contract.journal import Store

    root = tmp_path / "runs"
    a = write_job(root, data="glue-tvt_rte", seed=1, config="a", evals=[(10, {"accuracy": 0.6})])
    b = write_job(root, data="glue-tvt_rte", seed=1, config="b", evals=[(10, {"accuracy": 0.7})], failed="RuntimeError")
    write_job(root, data="glue-tvt_rte", seed=1, config="stray", evals=[(10, {"accuracy": 0.8})])
    store = Store(tmp_path / "state" / "journal.sqlite")

    def add(run_id, folder, state):
        store.add_jobs(run_id, [{"key": folder.name, "suite": "s", "round": 1, "stem": folder.name, "seed": 1,
                                 "dataset": "glue-tvt_rte", "job_dir": str(folder), "argv": [], "env": {},
                                 "state": state}])

    first, second = (store.create_run("plan: x", str(root), [], 0.0) for _ in range(2))
    add(first, a, "succeeded")
    add(first, b, "succeeded")   # run 2 ran b again, and it failed
    add(second, b, "failed")

    def states(*args):
        code = results_cli.main([*args, "--state-dir", str(tmp_path / "state"), "--json", "--format", "json"])
        document = json.loads(capsys.readouterr().out)
        return code, document["runs"], {j["config"]: (j["state"], j["run_id"]) for j in document["jobs"]}

    assert states(str(root)) == (0, [first, second], {"a": ("succeeded", first), "b": ("failed", second),
                                                      "stray": ("succeeded", None)})
    assert states("--run", str(second)) == (1, [second], {"b": ("failed", second)})
    assert states("--run", str(first)) == (0, [first], {"a": ("succeeded", first), "b": ("succeeded", first)})


def test_the_metric_and_direction_the_trainer_recorded_decide_the_best(tmp_path):
    """A started event naming its metric and direction (a trainer ranking by a loss) overrides the
    dataset's: the lower loss wins, and the table ranks configs that way."""
    root = tmp_path / "runs"
    job = write_job(root, seed=1, evals=[(10, {"mcc": 0.9, "loss": 0.7}), (20, {"mcc": 0.1, "loss": 0.3})])
    events = job / "events.jsonl"
    lines = events.read_text().splitlines()
    started = {**json.loads(lines[0]), "metric": "loss", "higher_is_better": False}
    events.write_text("\n".join([json.dumps(started), *lines[1:]]) + "\n")
    (result,) = aggregate(root).results
    assert (result.metric, result.best_step, result.best_value) == ("loss", 20, 0.3)
    (table,) = build_tables(aggregate(root))
    assert (table.spec.main, table.spec.higher_is_better, table.spec.companions) == ("loss", False, ("mcc",))

"""The failure knowledge base: each known failure, from a log with the real message text, gets its
class and its cheapest real remedy through ``lat-tui triage``; every FailureClass member is reachable
and documented; the full error message survives while the job row's reason is cut at a word."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lat_core.engine.backends.slurm_states import slurm_diagnosis
from lat_core.contract.jobdir.outcome import LAST_LINE_CHARS, last_log_line
from lat_core.triage import OOM_CLASSES, Diagnosis, FailureClass, classify
from lat_tui.triage_cli import main as triage_main
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "fixtures" / "logs"
F = FailureClass

# fixture, --returncode, class, first remedy key (None: no remedy is real for a bare log)
KNOWN = [
    ("shm_bus_error.log", 1, "shm_exhausted", "no_workers"),
    ("shm_file_full.log", 1, "shm_exhausted", "no_workers"),
    ("cublas_alloc.log", 1, "cuda_oom", "expandable_segments"),
    ("cudnn_workspace.log", 1, "cuda_oom", "expandable_segments"),
    ("no_cuda_gpus.log", 1, "no_gpu", None),
    ("invalid_ordinal.log", 1, "no_gpu", None),
    ("hub_offline.log", 1, "hub_unreachable", None),
    ("hub_read_timeout.log", 1, "hub_unreachable", "hub_offline"),
    ("wandb_no_tty.log", 1, "tracker_login", "wandb_offline"),
    ("swanlab_no_tty.log", 1, "tracker_login", "swanlab_local"),
    ("generate_model_kwargs.log", 1, "generate_kwargs", "legacy_generate_lengths"),
    ("generate_unexpected_kwarg.log", 1, "generate_kwargs", "legacy_generate_lengths"),
    ("reentrant_no_grad.log", 1, "reentrant_ckpt", "no_gradient_checkpointing"),
    ("nonfinite_loss.log", 1, "nonfinite_loss", "warmup"),
    ("triton_shared_memory.log", 1, "triton", None),
    ("triton_compile.log", 1, "triton", None),
    ("cuda_graph_capture.log", 1, "cuda_graphs", "no_cuda_graphs"),
    ("disk_full.log", 1, "disk_full", "no_optimizer_state"),
    ("segfault.log", -11, "crashed", "faulthandler"),
    ("segfault.log", -6, "crashed", "faulthandler"),
    ("stopped.log", -15, "stopped_outside", None),
    ("stopped.log", 130, "stopped_outside", None),
    ("resume_no_checkpoint.log", 2, "config_error", None),
]


def cli_json(capsys, *argv: str) -> dict:
    assert triage_main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("log,returncode,cls,first", KNOWN, ids=[f"{k[0]}:{k[1]}" for k in KNOWN])
def test_each_known_failure_through_the_cli(capsys, log, returncode, cls, first):
    found = cli_json(capsys, str(LOGS / log), "--returncode", str(returncode))
    assert found["class"] == cls
    assert (found["remedies"][0]["key"] if found["remedies"] else None) == first
    assert found["evidence"], "the lines that decided it are shown"


def test_lat_tui_triage_runs_as_a_command():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "lat_tui.triage_cli", str(LOGS / "shm_bus_error.log"),
                          "--returncode", "1"], capture_output=True, text=True, env=env, timeout=HANG_S, check=True)
    assert out.stdout.startswith("shm_exhausted: Shared memory (/dev/shm) exhausted")
    assert "set train.num_workers=0" in out.stdout


# ---------------------------------------------------------------- the job's own config decides remedies
def make_job(tmp_path: Path, log: str, returncode: int | None, *, train=None, model=None, env=None,
             events=(), gla=None, name="job") -> Path:
    job = tmp_path / name
    (job / ".lat").mkdir(parents=True)
    (job / "train.log").write_text((LOGS / log).read_text() if log else "")
    (job / "events.jsonl").write_text("".join(json.dumps({"t": 1.0, **e}) + "\n" for e in events))
    config = {"data": "glue-tvt_cola", "model": {"family": "gla", **(model or {})},
              "train": {"batch_size": 8, "num_workers": 0, **(train or {})}, "gla": gla or {}}
    (job / "job.yaml").write_text(yaml.safe_dump(config))
    (job / "command.json").write_text(json.dumps({"argv": [], "env": env or {}}))
    if returncode is not None:
        (job / ".lat" / "attempt-1.exit.json").write_text(json.dumps({"returncode": returncode}))
    return job


def keys(d: Diagnosis) -> list[str]:
    return [r.key for r in d.remedies]


def test_shm_halves_workers_before_dropping_them(tmp_path):
    d = classify(make_job(tmp_path, "shm_bus_error.log", 1, train={"num_workers": 4}), 1)
    assert keys(d) == ["fewer_workers", "no_workers"]
    assert d.remedies[0].patch == {"train.num_workers": 2} and d.remedies[1].patch == {"train.num_workers": 0}


def test_shm_bus_error_is_not_a_host_oom_and_shm_file_full_is_not_disk_full(tmp_path):
    assert classify(LOGS / "shm_bus_error.log", 1).cls not in OOM_CLASSES
    assert classify(LOGS / "shm_file_full.log", 1).cls == FailureClass.SHM_EXHAUSTED


def test_cublas_alloc_failure_is_an_oom_that_on_oom_retries_handle(tmp_path):
    d = classify(make_job(tmp_path, "cublas_alloc.log", 1, train={"gradient_checkpointing": True}), 1)
    assert d.cls in OOM_CLASSES and d.numbers["cuda_oom_kind"] == "cublas_alloc"
    assert keys(d) == ["expandable_segments", "smaller_micro_batch", "fewer_slots"]


def test_triton_shared_memory_is_never_an_oom(tmp_path):
    d = classify(make_job(tmp_path, "triton_shared_memory.log", 1), 1)
    assert d.cls == "triton" and d.cls not in OOM_CLASSES
    assert d.numbers["shared_memory_required"] == 131072 and d.numbers["shared_memory_limit"] == 101376
    fused = classify(make_job(tmp_path, "triton_compile.log", 1, gla={"GLA_USE_FUSED_SWIGLU": True},
                              name="fused"), 1)
    assert keys(fused) == ["no_fused_swiglu"] and fused.remedies[0].patch == {"GLA_USE_FUSED_SWIGLU": "0"}


def test_a_failed_graph_capture_is_explained_and_retried_eagerly_through_the_env(tmp_path):
    d = classify(make_job(tmp_path, "cuda_graph_capture.log", 1), 1)
    assert d.cls == "cuda_graphs" and d.cls not in OOM_CLASSES and "train.graphs: false" in d.diagnosis
    assert keys(d) == ["no_cuda_graphs"] and d.remedies[0].patch == {"LAT_JOB_GRAPHS": "false"}
    already = classify(make_job(tmp_path, "cuda_graph_capture.log", 1, env={"LAT_JOB_GRAPHS": "false"}, name="e"), 1)
    assert already.cls == "cuda_graphs" and not already.remedies


def test_hub_failure_names_the_datasets_local_dir_variable(tmp_path):
    d = classify(make_job(tmp_path, "hub_offline.log", 1), 1)
    assert d.cls == "hub_unreachable" and "GLUE_LOCAL_DIR" in d.diagnosis and not d.remedies
    already = classify(make_job(tmp_path, "hub_read_timeout.log", 1, env={"HF_HUB_OFFLINE": "1"}, name="o"), 1)
    assert keys(already) == ["retry"]


def test_the_trainers_own_hub_refusal_is_hub_unreachable_not_a_config_error(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("error: data: cannot fetch nyu-mll/glue cola from the hub ([Errno -3] Temporary failure in "
                   "name resolution); set GLUE_LOCAL_DIR to a local copy\n")
    assert classify(log, 2).cls == "hub_unreachable"


def test_tracker_remedy_turns_tracking_off_by_the_env_variable():
    d = classify(LOGS / "wandb_no_tty.log", 1)
    assert keys(d) == ["wandb_offline", "no_tracker"] and d.remedies[1].patch == {"REPORT_TO": "none"}
    assert "WANDB_API_KEY" in d.diagnosis


def test_generate_remedy_only_while_new_token_counts_are_on(tmp_path):
    d = classify(LOGS / "generate_model_kwargs.log", 1)
    assert d.numbers["keyword"] == "min_new_tokens" and d.remedies[0].patch == {"GLA_USE_MAX_NEW_TOKENS": "0"}
    job = make_job(tmp_path, "generate_model_kwargs.log", 1)
    config = yaml.safe_load((job / "job.yaml").read_text())
    (job / "job.yaml").write_text(yaml.safe_dump({**config, "eval": {"use_max_new_tokens": False}}))
    assert classify(job, 1).remedies == ()


def test_no_grad_fn_without_checkpointing_is_a_plain_exception(tmp_path):
    log = tmp_path / "plain.log"
    log.write_text("\n".join(line for line in (LOGS / "reentrant_no_grad.log").read_text().splitlines()
                             if "requires_grad=True" not in line and "warnings.warn" not in line))
    assert classify(log, 1).cls == "python_exception"
    on = classify(make_job(tmp_path, "reentrant_no_grad.log", 1, train={"gradient_checkpointing": True}), 1)
    assert on.remedies[0].patch == {"train.gradient_checkpointing": False}


def test_nonfinite_loss_remedies_from_the_config(tmp_path):
    d = classify(make_job(tmp_path, "nonfinite_loss.log", 1, model={"dtype": "float16"},
                          train={"lr": 0.008, "warmup_steps": 0}), 1)
    assert d.cls == "nonfinite_loss" and d.numbers["step"] == 20 and d.numbers["loss"] == "nan"
    assert keys(d) == ["bf16", "warmup", "lower_lr"] and d.remedies[2].patch == {"train.lr": 0.004}


def test_nonfinite_loss_from_the_failed_event_when_the_log_is_gone(tmp_path):
    failed = {"event": "failed", "error_type": "FloatingPointError", "message": "loss is inf at step 60"}
    d = classify(make_job(tmp_path, "", 1, events=[failed]), 1)
    assert d.cls == "nonfinite_loss" and d.numbers["step"] == 60


def test_disk_full_saves_less(tmp_path):
    d = classify(make_job(tmp_path, "disk_full.log", 1, train={"save_every": 500}), 1)
    assert keys(d) == ["no_optimizer_state", "save_less_often"]
    assert d.remedies[1].patch == {"train.save_every": 1000}


def test_sigbus_crash_with_workers_offers_the_shm_remedies_first(tmp_path):
    d = classify(make_job(tmp_path, "segfault.log", -7, train={"num_workers": 2}), -7)
    assert d.cls == "crashed" and d.title == "Crashed (SIGBUS)"
    assert keys(d) == ["fewer_workers", "no_workers", "faulthandler"]
    assert "holds no traceback" in d.diagnosis


def test_sigterm_is_a_cancel_only_when_lat_sent_it(tmp_path):
    events = [{"event": "checkpoint", "step": 500, "path": "checkpoint-500"}]
    outside = classify(make_job(tmp_path, "stopped.log", -15, events=events), -15)
    assert outside.cls == "stopped_outside" and keys(outside) == ["resume"]
    assert classify(make_job(tmp_path, "stopped.log", -15, name="c"), -15, cancelled=True).cls == "cancelled"


def test_sigkill_stays_killed_not_crashed():
    assert classify(LOGS / "segfault.log", -9).cls == "killed"


def test_resume_without_checkpoint_is_a_configuration_error():
    d = classify(LOGS / "resume_no_checkpoint.log", 2)
    assert d.cls == "config_error" and d.numbers["config_error_kind"] == "no_checkpoint"
    assert d.title == "Resume with no checkpoint"


# ---------------------------------------------------------------- full messages, honest wording
def test_long_message_is_whole_in_the_diagnosis_and_cut_at_a_word_in_the_title(tmp_path):
    message = "bad split " + " ".join(f"word{i}" for i in range(120))
    log = tmp_path / "long.log"
    log.write_text(f"Traceback (most recent call last):\n  File \"x.py\", line 1, in f\nValueError: {message}\n")
    d = classify(log, 1)
    assert message in d.diagnosis and d.numbers["exception_message"] == message
    assert d.title.endswith("…") and len(d.title) <= 160
    assert re.fullmatch(r"ValueError: bad split( word\d+)+…", d.title), "cut between words"
    assert "The traceback in train.log shows where." in d.diagnosis


def test_a_multi_line_message_is_kept_whole_and_titled_by_its_first_line(tmp_path):
    log = tmp_path / "multi.log"
    log.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
                   "OSError: Can't load tokenizer for 'fla-hub/gla-1.3B-100B'.\n"
                   "Otherwise, make sure 'fla-hub/gla-1.3B-100B' is the correct path to a directory.\n"
                   "\n[lat] something after the blank line\n")
    d = classify(log, 1)
    assert d.numbers["exception_message"] == ("Can't load tokenizer for 'fla-hub/gla-1.3B-100B'.\n"
                                              "Otherwise, make sure 'fla-hub/gla-1.3B-100B' is the correct "
                                              "path to a directory.")
    assert d.title == "OSError: Can't load tokenizer for 'fla-hub/gla-1.3B-100B'."


def test_no_traceback_is_promised_when_the_log_has_none(tmp_path):
    failed = {"event": "failed", "error_type": "ValueError", "message": "bad split"}
    d = classify(make_job(tmp_path, "", 1, events=[failed]), 1)
    assert d.cls == "python_exception" and "shows where" not in d.diagnosis and "holds no traceback" in d.diagnosis


def test_job_rows_last_log_line_is_cut_at_a_word(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("x\n" + " ".join(["averyveryverylongword"] * 40) + "\n")
    line = last_log_line(log)
    assert len(line) <= LAST_LINE_CHARS and line.endswith("averyveryverylongword…")


# ---------------------------------------------------------------- one list of classes
def producers(tmp_path: Path) -> dict:
    """One way to reach each class; a member without one fails the exhaustiveness test."""
    log = lambda name, rc, **kw: classify(LOGS / name, rc, **kw)  # noqa: E731
    made = {
        F.OK: lambda: log("clean_noisy.log", 0),
        F.CUDA_OOM: lambda: log("cuda_oom.log", 1),
        F.HOST_OOM: lambda: log("host_oom.log", -9),
        F.DEVICE_FAULT: lambda: log("ecc.log", 1),
        F.NCCL: lambda: log("nccl_watchdog.log", 1),
        F.RENDEZVOUS: lambda: log("rendezvous_timeout.log", 1),
        F.LIBUV: lambda: log("libuv.log", 1),
        F.PYTHON_EXCEPTION: lambda: log("keyerror.log", 1),
        F.CANCELLED: lambda: log("stopped.log", -15, cancelled=True),
        F.TIMEOUT: lambda: log("timeout.log", None),
        F.KILLED: lambda: log("segfault.log", -9),
        F.EXIT_CODE: lambda: log("exit_code.log", 3),
        F.NODE_FAIL: lambda: slurm_diagnosis({"state": "NODE_FAIL", "job_id": 7}),
        F.PREEMPTED: lambda: slurm_diagnosis({"state": "PREEMPTED", "job_id": 7}),
    }
    for name, rc, cls, _first in KNOWN:
        made.setdefault(FailureClass(cls), lambda name=name, rc=rc: log(name, rc))
    return made



def test_every_class_is_reachable_with_a_title_and_a_diagnosis(tmp_path):
    made = producers(tmp_path)
    assert set(made) == set(FailureClass)
    for cls, produce in made.items():
        d = produce()
        assert d.cls is cls and d.title and d.diagnosis and cls.info.meaning, cls


def test_readme_table_has_one_row_per_class():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| class | what happened | first remedy offered |"):]
    table = table[:table.index("\n\n")]  # the failure classes' table, not the results' columns
    rows = re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE)
    assert sorted(rows) == sorted(c.value for c in FailureClass)


def test_class_strings_round_trip_through_the_journal_json():
    d = classify(LOGS / "disk_full.log", 1)
    stored = json.loads(json.dumps(d.to_json()))
    assert stored["class"] == "disk_full"
    back = Diagnosis(stored["class"], stored["title"], stored["diagnosis"])
    assert back.cls is FailureClass.DISK_FULL and FailureClass.parse("no_such") is None

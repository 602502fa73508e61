"""Every type of a job folder's contract (lat_core.contract.jobdir) written by its one writer and read
back equal by its one reader; the reader skips, with a reason, what a crashed, older or newer writer
left, and reads the rest."""

import json
from dataclasses import fields

import pytest

from lat_core.contract.jobdir import (CheckpointSaved, EarlyStop, Eval, EventTail, EventWriter, ExitRecord, Failed,
                                      Finished, GroupLimit, GroupRef, JobDir, Memory, OomKills, PeakUsage, PidRecord,
                                      SpeedMode, Started, Step, TrackerRunOpened)
from lat_core.contract.jobdir.event_reader import decode_text
from lat_core.contract.jobdir.events import EVENT_TYPES, event_to_json
from lat_core.safe_files import UnsafePathError
from tests.helpers.waits import HANG_S

# one of each kind, every field set (so that a field the writer or the reader drops fails the test)
EVERY_EVENT = [
    Started(t=1.5, pid=42, config="lora_r8", model="gla", device="cuda", seed=-3, data="glue-tvt_cola", task="cola",
            metric="mcc", higher_is_better=True,
            name_or_path="fla-hub/gla-340M", peft_method="lora", dtype="bfloat16", trainable_params=10,
            total_params=1000, resumed_from=4, max_steps=100, batch_size=8, grad_accum=2, effective_batch_size=16,
            epochs=1.5, train_examples=640, lr_scheduler="cosine", warmup_steps=10, logits_to_keep="auto",
            save_optimizer_state=True, optimizer_state="restored", report_to=("tensorboard", "wandb"),
            graphs=SpeedMode("auto", False, "CUDA graphs need a GPU"), pack=SpeedMode(True, True, "train.pack: true"),
            gradient_checkpointing=False, dataloader={"num_workers": 2, "source": {"num_workers": "user"}},
            setup_s={"imports": 1.25, "model": 0.5}, mamba_fast_path=True, slow_path_warning="slow path",
            kernels="warmed in the preload process in 41 s",
            fused_group=3, world=2, pretrain={"depth": 4, "compile": False}),
    Step(t=2.0, step=7, loss=0.25, lr=1e-4, tokens_per_s=1234.5, tokens=4096, peak_gpu_bytes=2**30),
    Eval(t=3.0, step=10, split="test", metrics={"accuracy": 0.75, "loss": 0.5, "n": 32}),
    CheckpointSaved(t=4.0, step=10, path="checkpoint-10", optimizer_saved=False),
    Memory(t=5.0, peak_rss_bytes=2**31, peak_gpu_bytes=2**33),
    Finished(t=6.0, status="ok", steps=100, best={"step": 10, "metric": "accuracy", "value": 0.75}, elapsed_s=12.5,
             stopped_early=EarlyStop(60, 100, "accuracy", 3)),
    Failed(t=7.0, error_type="OutOfMemoryError", message="CUDA out of memory"),
    TrackerRunOpened(t=8.0, id="a3f9", continued=True, replaced="b7", report_to=("wandb",),
                     held={"step": 5, "eval": 3}),
]


def test_the_examples_cover_every_kind_and_every_field():
    assert {type(e) for e in EVERY_EVENT} == set(EVENT_TYPES)
    for event in EVERY_EVENT:
        assert all(getattr(event, f.name) is not None for f in fields(event)), event


def test_every_event_written_reads_back_equal_through_every_reader(tmp_path):
    job = JobDir(tmp_path / "job")
    with job.event_writer() as writer:
        written = [writer.write(e) for e in EVERY_EVENT]
    assert written == EVERY_EVENT  # events that carry their time keep it
    read = job.read_events()
    assert list(read.events) == EVERY_EVENT and read.skipped.count == 0
    assert list(EventTail(job.events_path).read()) == EVERY_EVENT
    assert list(decode_text(job.events_path.read_text()).events) == EVERY_EVENT


def test_a_line_holds_t_and_the_kind_first_and_leaves_out_what_is_unknown(tmp_path):
    with EventWriter(tmp_path / "events.jsonl") as writer:
        stamped = writer.write(Step(step=1, loss=float("nan")))
    line = json.loads((tmp_path / "events.jsonl").read_text())
    assert list(line)[:2] == ["t", "event"] and line["event"] == "step" and line["t"] == stamped.t > 0
    assert line == {"t": stamped.t, "event": "step", "step": 1, "loss": None}  # NaN: null in strict JSON
    assert event_to_json(Started(pid=1)) == {"t": None, "event": "started", "pid": 1}


def test_a_fused_members_started_differs_only_in_the_fields_it_has():
    """A member's started leaves out a job alone's loader and set-up, and carries its group's size."""
    alone_only = {"gradient_checkpointing", "dataloader", "setup_s", "mamba_fast_path", "slow_path_warning"}
    line = event_to_json(EVERY_EVENT[0])
    member = {k: v for k, v in line.items() if k not in alone_only | {"world", "pretrain"}}
    read = decode_text(json.dumps(member)).events[0]
    assert read.fused_group == 3 and all(getattr(read, name) is None for name in alone_only)


def test_lines_of_older_trainers_and_stand_ins_still_read():
    old = [{"t": 1.0, "event": "started", "pid": 7, "resumed_from": None, "optimizer_state": None, "new_field": [1]},
           {"event": "finished"},  # a test's stand-in: no time, no fields
           {"t": 2, "event": "checkpoint", "step": 4, "path": "checkpoint-4"},
           {"t": 3.0, "event": "step", "step": 5.0, "loss": 1}]  # whole floats and integer losses
    read = decode_text("\n".join(map(json.dumps, old)) + "\n")
    assert read.skipped.count == 0
    assert read.events == (Started(t=1.0, pid=7), Finished(), CheckpointSaved(t=2.0, step=4, path="checkpoint-4"),
                           Step(t=3.0, step=5, loss=1.0))
    assert read.events[2].folder_name == "checkpoint-4" and CheckpointSaved(step=6).folder_name == "checkpoint-6"


@pytest.mark.parametrize("line, reason", [
    ('{"event": "sparkle", "t": 1.0}', "unknown kind of event 'sparkle'"),
    ('{"event": "started", "seed": "one"}', "started event: 'seed' must be a whole number, got str"),
    ('{"event": "started", "report_to": "wandb"}', "'report_to' must be a list of strings, got str"),
    ('{"event": "started", "logits_to_keep": 1.5}', "'logits_to_keep' must be a whole number >= 0 or a string"),
    ('{"event": "started", "graphs": {"on": "yes"}}', "'graphs' must be {setting, on, why}"),
    ('{"event": "eval", "step": 1, "metrics": [0.5]}', "eval event: 'metrics' must be an object, got list"),
    ('{"event": "checkpoint"}', "checkpoint event: 'step' is missing"),
    ('{"event": "finished", "status": 0}', "finished event: 'status' must be a string, got int"),
    ('{"event": "finished", "stopped_early": {"step": 6}}',
     "finished event: 'stopped_early' must be {step, max_steps, metric, patience}, got dict"),
    ('{"event": "failed", "message": ["x"]}', "'message' must be a string, got list"),
])
def test_a_bad_line_is_skipped_with_a_reason_and_the_others_read(tmp_path, line, reason):
    (tmp_path / "events.jsonl").write_text(f'{{"event": "step", "step": 1}}\n{line}\n{{"event": "finished"}}\n')
    for read in (JobDir(tmp_path).read_events(), decode_text((tmp_path / "events.jsonl").read_text())):
        assert [e.kind for e in read.events] == ["step", "finished"]
        assert read.skipped.count == 1 and read.skipped.first.startswith("line 2: ") and reason in read.skipped.first


def test_a_torn_last_line_is_skipped_with_its_reason(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "step", "step": 1}\n{"event": "step", "st')
    read = JobDir(tmp_path).read_events()
    assert [e.kind for e in read.events] == ["step"] and read.skipped.count == 1
    assert "torn: the last line has no end" in read.skipped.first
    path.write_text('{"event": "step", "step": 1}\n{"event": "finished"}')  # whole, only its newline missing
    assert [e.kind for e in JobDir(tmp_path).read_events().events] == ["step", "finished"]


def test_the_end_of_a_file_is_read_without_its_cut_first_line(tmp_path):
    lines = [json.dumps({"t": 1.0, "event": "step", "step": s, "loss": 0.5}) for s in range(1, 2001)]
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    read = JobDir(tmp_path).read_events(last_bytes=1000)
    assert read.skipped.count == 0 and read.events[-1].step == 2000 and len(read.events) < 30
    assert JobDir(tmp_path / "missing").read_events().events == ()


PRECIOUS = "someone's file\n"


def job_with_a_planted_link(tmp_path, name: str):
    """A job folder whose ``name`` is a symlink to someone else's file: (the folder, that file)."""
    job = tmp_path / "root" / "pair_seed1" / "job"
    job.mkdir(parents=True)
    precious = tmp_path / "precious"
    precious.write_text(PRECIOUS)
    (job / name).symlink_to(precious)
    return job, precious


def test_the_event_writer_never_appends_through_a_planted_symlink(tmp_path):
    job, precious = job_with_a_planted_link(tmp_path, "events.jsonl")
    with pytest.raises(UnsafePathError, match="is a symlink"):
        JobDir(job).event_writer()
    assert precious.read_text() == PRECIOUS


def test_the_env_record_round_trips_and_is_never_written_through_a_planted_symlink(tmp_path):
    job, precious = job_with_a_planted_link(tmp_path, "env.json")
    record = {"command": "python -m lat_core.train --cfg job.yaml", "resumes": [{"at": "later"}]}
    JobDir(job).write_env_record(record)
    assert precious.read_text() == PRECIOUS and not (job / "env.json").is_symlink()
    assert JobDir(job).env_record() == record
    assert "\n" in (job / "env.json").read_text()  # indented: people read it


@pytest.mark.parametrize("content", ["[1, 2]", "{not json", ""])
def test_an_env_record_that_is_no_json_object_reads_as_none(tmp_path, content):
    (tmp_path / "env.json").write_text(content)
    assert JobDir(tmp_path).env_record() is None
    assert JobDir(tmp_path / "missing").env_record() is None


# ------------------------------------------------------------------------------ .lat records
EVERY_EXIT = ExitRecord(-9, pid=12, started=1.0, ended=2.5, max_rss=2**30, containment="cgroup", stopped=2,
                        oom_kills=OomKills("cgroup2:/sys/fs/cgroup/lat-job1-a1/memory.events", 1),
                        why="left the group: failed", fused_group=True, peak_gpu_bytes=2**32)


def test_the_exit_record_covers_every_field_and_round_trips(tmp_path):
    assert all(getattr(EVERY_EXIT, f.name) not in (None, False) for f in fields(EVERY_EXIT) if f.name != "problem")
    attempt = JobDir(tmp_path).attempt(3)
    attempt.write_exit(EVERY_EXIT)
    assert attempt.read_exit() == EVERY_EXIT and attempt.read_exit().signal == 9
    assert json.loads(attempt.exit_path.read_text())["signal"] == 9  # for people and older readers
    assert ExitRecord.from_json(ExitRecord(0).to_json()) == ExitRecord(0)
    assert JobDir(tmp_path).latest_exit_record() == EVERY_EXIT


def test_older_exit_records_keep_their_reasons():
    assert ExitRecord.from_json({"returncode": 2, "error": "cannot contain the job: x"}).why == "cannot contain the job: x"
    vanished = ExitRecord.from_json({"returncode": None, "signal": None, "vanished": "the job's runner vanished"})
    assert vanished == ExitRecord(None, why="the job's runner vanished") and vanished.problem is None


def test_a_bad_optional_field_of_an_exit_record_reads_as_unknown():
    record = ExitRecord.from_json({"returncode": 0, "pid": "x", "max_rss": -1, "oom_kills": {"count": "2"},
                                   "ended": float("inf"), "fused_group": "yes", "stopped": 1.5})
    assert record == ExitRecord(0) and record.problem is None


def test_the_runner_records_round_trip(tmp_path):
    attempt = JobDir(tmp_path).attempt(1)
    pid = PidRecord(77, 12.5, 2**20, {"kind": "subreaper", "token": "t"})
    attempt.write_pid(pid)
    assert attempt.read_pid() == pid and attempt.read_pid().containment == {"kind": "subreaper", "token": "t"}
    group = JobDir(tmp_path).group_attempt(2)
    ref = GroupRef(str(group.exit_path), (5, 6))
    attempt.write_group_ref(ref)
    assert attempt.read_group_ref() == ref and attempt.runner() == group and ref.group_id == "5.2"
    assert [a.number for a in JobDir(tmp_path).attempts_on_disk()] == [1]  # the group's own record is no attempt
    for record in (GroupLimit(2, "its fused group of 4 ran out of memory"), PeakUsage(1, None), OomKills("vmstat", 0)):
        assert type(record).from_json(json.loads(json.dumps(record.to_json()))) == record


def test_a_fused_members_cancel_marker(tmp_path):
    job = JobDir(tmp_path)
    assert not job.cancel_requested()
    job.request_cancel(123.0)
    assert job.cancel_requested() and job.cancel_marker == tmp_path / ".lat" / "cancel"
    job.clear_cancel()
    assert not job.cancel_requested()
    job.clear_cancel()  # none: nothing to do


def test_the_package_names_each_type_once_and_loads_it_on_first_use():
    import subprocess
    import sys

    import lat_core.contract.jobdir as jobdir

    assert sorted(jobdir.__all__) == sorted(jobdir._MODULE_OF) and all(getattr(jobdir, n) for n in jobdir.__all__)
    with pytest.raises(AttributeError):
        jobdir.Nothing  # noqa: B018
    # the runner, started for every attempt, loads an attempt's records and never the event types
    probe = ("import sys, lat_core.runner.detached; "
             "print('lat_core.contract.jobdir.events' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=HANG_S)
    assert out.stdout.strip() == "False", out.stderr

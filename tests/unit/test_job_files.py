"""The event schema and the bounded readers of a job's folder (lat_core.contract.job_files)."""

import json
import signal
import tracemalloc

import pytest

from lat_core.contract.job_files import (
    MAX_EVENT_BYTES, BadEvent, EventTail, MemoryEvent, StepEvent, describe_exit, exit_record_path, finished_since,
    has_finished, last_progress, memory_event_peak, parse_event, read_exit, read_pid_record, signal_name,
)
from lat_core.train.events import EventWriter


def test_events_the_trainer_writes_read_back_typed(tmp_path):
    with EventWriter(tmp_path / "events.jsonl") as w:
        w.emit("started", pid=1)
        w.emit("step", step=3, loss=0.5)
        w.emit("step", step=4, loss=float("nan"))  # the writer turns NaN into null
        w.emit("memory", peak_gpu_bytes=123)
        w.emit("finished")
    tail = EventTail(tmp_path / "events.jsonl")
    events = list(tail.read())
    assert [e.name for e in events] == ["started", "step", "step", "memory", "finished"]
    assert events[1] == StepEvent("step", events[1].t, step=3, loss=0.5)
    assert last_progress(events) == (4, None)
    assert tail.bad_lines == 0 and memory_event_peak(tmp_path) == 123 and has_finished(tmp_path)


@pytest.mark.parametrize("line, reason", [
    ('{"event": "step", "step": null, "loss": 1.0}', "'step' must be a whole number"),
    ('{"event": "step", "step": 1, "loss": "0.5"}', "'loss' must be a number, got str"),
    ('{"event": "step", "step": true, "loss": 1}', "'step' must be a whole number"),
    ('{"event": "step", "step": 1.5, "loss": 1}', "'step' must be a whole number"),
    ('{"event": "memory", "peak_gpu_bytes": "lots"}', "'peak_gpu_bytes' must be a whole number"),
    ('{"event": "step", "step": 1e400, "loss": 1}', "'step' must be a whole number"),
    ('{"event": 5}', "'event' must be a string, got int"),
    ('{"event": "step", "t": "noon", "step": 1}', "'t' must be a number"),
    ('[1, 2]', "not a JSON object but list"),
    ('\x00\xff garbage', "not JSON"),
])
def test_a_bad_event_is_rejected_with_a_reason_that_never_quotes_the_line(line, reason):
    with pytest.raises(BadEvent) as err:
        parse_event(line.encode("latin-1"))
    assert reason in str(err.value)
    assert "garbage" not in str(err.value) and "lots" not in str(err.value)


def test_non_finite_losses_read_as_unknown_not_as_errors():
    assert parse_event(b'{"event": "step", "step": 2, "loss": NaN}').loss is None
    assert parse_event(b'{"event": "step", "step": 2, "loss": 1e400}').loss is None
    assert parse_event(b'{"event": "step", "step": 2, "loss": -Infinity}').loss is None


def test_bad_lines_are_skipped_and_counted_and_good_ones_still_read(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"event": "step", "step": 1, "loss": 1.0}\n{"event": "step", "step": null}\n'
                     b'\x89PNG\r\n\x1a\n\x00\x00\n{"event": "step", "step": 2, "loss": 0.5}\n')
    tail = EventTail(path)
    assert last_progress(tail.read()) == (2, 0.5)
    assert tail.bad_lines == 4 and tail.first_bad.startswith("line 2: step event: 'step'")


def test_a_torn_last_line_waits_for_its_end(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"event": "step", "step": 1, "loss": 1.0}\n{"event": "step", "st')
    tail = EventTail(path)
    assert len(list(tail.read())) == 1
    with open(path, "ab") as fh:
        fh.write(b'ep": 2, "loss": 0.25}\n')
    assert last_progress(tail.read()) == (2, 0.25) and tail.bad_lines == 0


def test_a_100_mb_line_is_skipped_in_bounded_memory(tmp_path):
    path = tmp_path / "events.jsonl"
    with open(path, "wb") as fh:
        fh.write(b'{"event": "step", "step": 1, "loss": 1.0}\n{"event": "step", "blob": "')
        for _ in range(100):
            fh.write(b"x" * 2**20)
        fh.write(b'"}\n{"event": "step", "step": 7, "loss": 0.7}\n')
    tail = EventTail(path)
    tracemalloc.start()
    events = list(tail.read())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 * MAX_EVENT_BYTES, peak
    assert last_progress(events) == (7, 0.7) and tail.bad_lines == 1 and "over 1024 KiB" in tail.first_bad
    assert tail.offset == path.stat().st_size
    assert memory_event_peak(tmp_path) == 0 and not has_finished(tmp_path)


def test_an_overlong_line_still_being_written_is_skipped_across_reads(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"y" * (MAX_EVENT_BYTES + 10))
    tail = EventTail(path)
    assert list(tail.read()) == [] and tail.bad_lines == 1
    with open(path, "ab") as fh:
        fh.write(b'yyy\n{"event": "step", "step": 3, "loss": 0.3}\n')
    assert last_progress(tail.read()) == (3, 0.3) and tail.bad_lines == 1


def test_finished_since_ignores_an_older_attempts_finish(tmp_path):
    (tmp_path / "events.jsonl").write_text(json.dumps({"t": 100.0, "event": "finished"}) + "\n")
    assert finished_since(tmp_path, 50.0) == 100.0
    assert finished_since(tmp_path, 150.0) is None


@pytest.mark.parametrize("signum", range(1, 65))
def test_every_signal_has_a_readable_name(signum, tmp_path):
    text = describe_exit(-signum, tmp_path)
    assert text == f"killed by {signal_name(signum)}"
    assert signal_name(signum).startswith("SIG") or signum in (32, 33)  # glibc keeps 32 and 33 for itself


def test_a_kill_is_said_once(tmp_path):
    """Not ``killed by SIGKILL: killed: Killed by SIGKILL: step 100/300``: triage's line is left
    out where it only says again how the job ended."""
    from lat_core.triage import classify

    (tmp_path / "train.log").write_text("step 100/300 loss 2.5\n")
    diagnosis = classify(tmp_path, -signal.SIGKILL)
    assert describe_exit(-signal.SIGKILL, tmp_path, diagnosis) == "killed by SIGKILL: step 100/300 loss 2.5"
    assert describe_exit(3, tmp_path, diagnosis).startswith("exit code 3: killed: Killed by SIGKILL")


def test_real_time_signals_are_named_from_sigrtmin():
    assert signal_name(signal.SIGRTMIN + 6) == "SIGRTMIN+6"
    assert signal_name(200) == "signal 200"


def test_exit_records_round_trip_and_bad_ones_say_why(tmp_path):
    path = exit_record_path(tmp_path, 2)
    assert path.name == "attempt-2.exit.json" and read_exit(path) is None
    path.parent.mkdir()
    path.write_text(json.dumps({"returncode": -40, "max_rss": 2048, "ended": 5.0}))
    assert read_exit(path).returncode == -40 and read_exit(path).max_rss == 2048
    path.write_text(json.dumps({"returncode": "oops"}))
    assert read_exit(path).returncode is None and "returncode is str" in read_exit(path).problem
    path.write_text(json.dumps({"returncode": 10**30}))
    assert read_exit(path).returncode is None and "out of range" in read_exit(path).problem
    path.write_bytes(b"\x00garbage")
    assert read_exit(path).problem == "the exit record is unreadable"
    (tmp_path / ".lat" / "attempt-2.exit.json.pid").write_text(json.dumps({"pid": 42, "pid_start": 1.5}))
    assert read_pid_record(path).pid == 42
    (tmp_path / ".lat" / "attempt-2.exit.json.pid").write_text(json.dumps({"pid": "42"}))
    assert read_pid_record(path) is None


def test_memory_event_peak_takes_the_last_valid_memory_event(tmp_path):
    (tmp_path / "events.jsonl").write_text('{"event": "memory", "peak_gpu_bytes": 10}\n'
                                           '{"event": "memory", "peak_gpu_bytes": "x"}\n')
    assert memory_event_peak(tmp_path) == 10
    assert isinstance(parse_event(b'{"event": "memory"}'), MemoryEvent)


def test_states_keep_their_journal_text_and_rows_are_typed_however_built(tmp_path):
    from lat_core.contract.rows import JobRow
    from lat_core.contract.states import JOB_FINAL, JobState, RunState
    from lat_core.contract.journal import Store

    store = Store(tmp_path / "journal.sqlite")
    run_id = store.create_run("plan: x", str(tmp_path), [], 0.0)
    [job_id] = store.add_jobs(run_id, [{"key": "k", "suite": "s", "round": 1, "stem": "k", "seed": 1,
                                        "dataset": "d", "job_dir": str(tmp_path), "argv": [], "env": {}}])
    store.set_job_state(job_id, JobState.FAILED, "x")
    raw = store._db.execute("SELECT state FROM jobs WHERE id=?", (job_id,)).fetchone()[0]
    assert raw == "failed" and type(raw) is str  # the journal keeps plain text
    assert store.job(job_id).state is JobState.FAILED and store.run(run_id).state is RunState.RUNNING
    assert store.job(job_id).state == "failed" and f"{JobState.FAILED}" == "failed"  # front ends compare text
    row = JobRow(1, 1, 1, "k", "s", 1, "k", 1, "d", "/x", "running", None, 0, None, None, None, None, None, None,
                 argv=[], env={})
    assert row.state is JobState.RUNNING and not row.state.final and JobState.CANCELLED in JOB_FINAL
    store.close()


def test_a_tail_near_the_end_finds_the_latest_progress_of_a_long_file(tmp_path):
    path = tmp_path / "events.jsonl"
    with open(path, "w") as fh:
        for step in range(1, 40_001):
            fh.write(json.dumps({"t": 1.0, "event": "step", "step": step, "loss": 1 / step}) + "\n")
    assert path.stat().st_size > 2 * MAX_EVENT_BYTES
    tail = EventTail.near_end(path)
    assert tail.offset > 0 and last_progress(tail.read()) == (40_000, 1 / 40_000)
    assert tail.bad_lines == 0 and tail.offset == path.stat().st_size
    assert EventTail.near_end(tmp_path / "missing.jsonl").offset == 0

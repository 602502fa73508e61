"""Typed commands: every type round-trips through JSON and the journal, has exactly one engine
handler, reads rows as LAT always wrote them, and turns a bad row into a reason, never a crash."""

from __future__ import annotations

import dataclasses
import inspect
import json
from types import SimpleNamespace
from typing import get_type_hints

import pytest

from lat_core.contract import commands
from lat_core.contract.commands import (BY_KIND, COMMAND_TYPES, AddJobs, CancelJob, CancelRun, Command, CommandError,
                                        ExtendCountdown, PauseRun, RequeueJob, RequeueJobs, ResumeRun, SetSlots,
                                        SkipCountdown, Undecodable, decode, encode, from_json, to_json)
from lat_core.contract.journal import Store
from lat_core.engine.commands import Commands

JOB = {"key": "tiny-sst2_seed5/a", "suite": "demo", "round": 1, "stem": "a", "seed": 5, "dataset": "tiny-sst2",
       "job_dir": "/out/a", "argv": ["python", "-m", "lat_core.train"], "env": {"HP_LR": "1e-3"}, "world": 2}

# representative values of every type: defaults, every optional field set, non-ASCII text
SAMPLES: list[Command] = [
    SkipCountdown(), ExtendCountdown(), ExtendCountdown(2.5), CancelRun(), PauseRun(), ResumeRun(),
    SetSlots("gpu3", 0), SetSlots("cpu", 12), AddJobs((JOB, {**JOB, "key": "tiny-sst2_seed6/a", "stem": "é"})),
    CancelJob(7), RequeueJob(7), RequeueJob(7, start="resume"), RequeueJob(8, start="fresh", remedy="halve_batch"),
    RequeueJobs((3,)), RequeueJobs((3, 4, 9), start="fresh"),
]


def declared_command_types() -> set[type]:
    """Every command dataclass in contract/commands.py, found by looking, not from its own lists."""
    return {c for c in vars(commands).values() if inspect.isclass(c) and dataclasses.is_dataclass(c)
            and c.__module__ == commands.__name__ and isinstance(getattr(c, "kind", None), str)}


def test_every_declared_command_is_in_the_union_with_its_own_kind():
    declared = declared_command_types()
    assert len(declared) >= 10 and declared == set(COMMAND_TYPES)
    assert len(BY_KIND) == len(declared)  # no two share a kind
    assert all(c.__dataclass_params__.frozen for c in declared)


def test_every_command_type_has_exactly_one_handler_that_takes_it():
    engine_commands = Commands(SimpleNamespace(store=None))
    handlers = engine_commands.handlers()
    assert set(handlers) == declared_command_types()
    assert len({h.__func__ for h in handlers.values()}) == len(handlers)  # no handler serves two types
    for command_type, handler in handlers.items():
        hints = get_type_hints(handler)
        taken = [t for name, t in hints.items() if name != "return" and t in set(COMMAND_TYPES)]
        assert taken == [command_type], (command_type, hints)
    names = {t.__name__ for t in COMMAND_TYPES}  # annotations are text here (from __future__ import annotations)
    takers = {name for name, f in inspect.getmembers(Commands, inspect.isfunction)
              if {p.annotation for p in inspect.signature(f).parameters.values()} & names}
    assert takers == {h.__name__ for h in handlers.values()}  # no handler left out of the table


def test_every_type_has_a_sample():
    assert {type(c) for c in SAMPLES} == set(COMMAND_TYPES)


@pytest.mark.parametrize("command", SAMPLES, ids=repr)
def test_round_trip_through_json_and_the_journals_columns(command):
    assert type(command).from_json(command.to_json()) == command
    assert from_json(json.loads(json.dumps(to_json(command)))) == command
    assert decode(*encode(command)) == command


def test_round_trip_through_a_journal(tmp_path):
    store = Store(tmp_path / "journal.sqlite")
    run_id = store.create_run("plan: x", str(tmp_path), [{"id": "cpu", "slots": 1, "env": {}}], 0)
    ids = [store.add_command(run_id, command) for command in SAMPLES]
    rows = store.pending_commands(run_id)
    assert [r.id for r in rows] == ids and [r.command for r in rows] == SAMPLES
    assert [r.job_id for r in rows] == [getattr(c, "job_id", None) for c in SAMPLES]
    cancel = ids[SAMPLES.index(CancelJob(7))]
    store.finish_command(cancel, "done", "cancel sent to a")
    assert store.command(cancel).answered and store.command(cancel).command == CancelJob(7)
    history = [(t.job_id, t.new_state, t.detail) for t in store.transitions(run_id)]
    assert (7, "command:cancel_job", "done cancel sent to a") in history


# (verb column, job_id column, args as LAT wrote them before commands were typed) -> the command
OLD_ROWS = [
    ("skip_countdown", None, {}, SkipCountdown()),
    ("extend_countdown", None, {"minutes": 5}, ExtendCountdown(5.0)),
    ("cancel_run", None, {}, CancelRun()),
    ("pause", None, {}, PauseRun()),
    ("resume", None, {}, ResumeRun()),
    ("set_slots", None, {"device": "cpu", "slots": 3}, SetSlots("cpu", 3)),
    ("add_jobs", None, {"jobs": [JOB]}, AddJobs((JOB,))),
    ("cancel_job", 4, {}, CancelJob(4)),
    ("requeue", 4, {}, RequeueJob(4)),
    ("requeue", 4, {"remedy": "avoid_device", "start": "fresh"}, RequeueJob(4, start="fresh", remedy="avoid_device")),
    ("requeue_jobs", None, {"jobs": [1, 2], "start": "resume"}, RequeueJobs((1, 2), start="resume")),
]


@pytest.mark.parametrize(("verb", "job_id", "args", "command"), OLD_ROWS, ids=[r[0] for r in OLD_ROWS])
def test_the_journal_layout_is_the_one_lat_always_wrote(verb, job_id, args, command):
    """A journal with commands pending across an upgrade reads the same; new rows look the same."""
    assert decode(verb, job_id, json.dumps(args)) == command
    kind, column_job, args_json = encode(command)
    assert (kind, column_job, json.loads(args_json)) == (verb, job_id, args)


BAD_ROWS = [
    ("launch_rockets", None, "{}", "unknown command 'launch_rockets'"),
    ("pause", None, "{not json", "its fields are not JSON"),
    ("pause", None, "[" * 100_000 + "]" * 100_000, "its fields are not JSON (RecursionError"),
    ("pause", None, "[1, 2]", "its fields are not a JSON object: [1, 2]"),
    ("pause", None, '{"force": true}', "unknown field force for pause"),
    ("extend_countdown", None, '{"minutes": "soon"}', "minutes must be a number, got 'soon'"),
    ("set_slots", None, '{"device": "cpu", "slots": "3"}', "slots must be an integer >= 0, got '3'"),
    ("set_slots", None, '{"device": "cpu", "slots": true}', "slots must be an integer >= 0, got True"),
    ("set_slots", None, '{"slots": 3}', "device must be a string, got None"),
    ("add_jobs", None, '{"jobs": [{"suite": "demo"}]}', "expected a list of job records with a key each"),
    ("cancel_job", None, "{}", "expected the id of a job, got None"),
    ("requeue", 4, '{"start": "sideways"}', "unknown requeue start 'sideways' (expected one of resume, fresh)"),
    ("requeue", 4, '{"remedy": 3}', "remedy must be a remedy's key, got 3"),
    ("requeue_jobs", None, '{"jobs": "1,2"}', "nothing was requeued: expected a list of job ids, got '1,2'"),
    ("requeue_jobs", None, '{"jobs": []}', "nothing was requeued: expected a list of job ids, got []"),
    ("requeue_jobs", None, '{"jobs": [1, "2"]}', "nothing was requeued: expected a list of job ids, got [1, '2']"),
]


@pytest.mark.parametrize(("verb", "job_id", "args_json", "reason"), BAD_ROWS, ids=[r[3][:40] for r in BAD_ROWS])
def test_a_row_that_does_not_decode_says_why(verb, job_id, args_json, reason):
    got = decode(verb, job_id, args_json)
    assert isinstance(got, Undecodable) and (got.kind, got.job_id) == (verb, job_id)
    assert got.reason.startswith(reason), got.reason


def test_a_huge_bad_row_gives_a_short_reason():
    got = decode("requeue_jobs", None, json.dumps({"jobs": "x" * 1_000_000}))
    assert isinstance(got, Undecodable) and len(got.reason) < 300


def test_from_json_refuses_what_is_not_a_command():
    for data in ({}, {"kind": 3}, {"kind": "cancel_job", "job_id": True}):
        with pytest.raises(CommandError):
            from_json(data)

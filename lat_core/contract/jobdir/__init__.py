"""A job's folder and every file in it: :class:`JobDir` is the one way in.

- ``names``: every file name of a job folder;
- ``events``: one frozen type per event the trainer writes to ``events.jsonl``, read and written
  through ``event_reader`` (the one tolerant reader) and ``event_writer`` (the one writer);
- ``records``: the runner's and the engine's records in ``.lat/`` (exit records, pid files, group
  refs and limits, peak usage), each with ``to_json``/``from_json``; ``attempt``: one attempt's;
- ``checkpoints``: THE rule for which checkpoints a job can resume from.

Each name below is imported from its module on first use (PEP 562): the runner, started for every
attempt, needs an attempt's records and never loads the event types.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lat_core.contract.jobdir.attempt import AttemptFiles
    from lat_core.contract.jobdir.event_reader import EventsRead, EventTail, Skips, decode_event, last_progress
    from lat_core.contract.jobdir.event_writer import EventWriter
    from lat_core.contract.jobdir.events import (AnyEvent, BadEvent, CheckpointSaved, EarlyStop, Eval, Event, Failed,
                                                 Finished, Memory, SpeedMode, Started, Step, TrackerRunOpened)
    from lat_core.contract.jobdir.folder import JobDir
    from lat_core.contract.jobdir.outcome import closing_line, describe_exit, how_it_ended, last_log_line
    from lat_core.contract.jobdir.provenance import SweepPoint, SweepRowsError
    from lat_core.contract.jobdir.records import (ExitRecord, GroupLimit, GroupRef, OomKills, PeakUsage, PidRecord,
                                                  job_peak)

_HOME: dict[str, tuple[str, ...]] = {
    "attempt": ("AttemptFiles",),
    "event_reader": ("EventsRead", "EventTail", "Skips", "decode_event", "last_progress"),
    "event_writer": ("EventWriter",),
    "events": ("AnyEvent", "BadEvent", "CheckpointSaved", "EarlyStop", "Eval", "Event", "Failed", "Finished", "Memory",
               "SpeedMode", "Started", "Step", "TrackerRunOpened"),
    "folder": ("JobDir",),
    "outcome": ("closing_line", "describe_exit", "how_it_ended", "last_log_line"),
    "provenance": ("SweepPoint", "SweepRowsError"),
    "records": ("ExitRecord", "GroupLimit", "GroupRef", "OomKills", "PeakUsage", "PidRecord", "job_peak"),
}
_MODULE_OF = {name: module for module, names in _HOME.items() for name in names}
__all__ = [
    "AnyEvent", "AttemptFiles", "BadEvent", "CheckpointSaved", "EarlyStop", "Eval", "Event", "EventTail", "EventWriter", "EventsRead",
    "ExitRecord", "Failed", "Finished", "GroupLimit", "GroupRef", "JobDir", "Memory", "OomKills", "PeakUsage",
    "PidRecord", "Skips", "SpeedMode", "Started", "Step", "SweepPoint", "SweepRowsError", "TrackerRunOpened", "closing_line", "decode_event",
    "describe_exit", "how_it_ended",
    "job_peak", "last_log_line", "last_progress",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value

"""Typed errors of the core. Front ends decide how to show them (notification, modal, exit code)."""

from __future__ import annotations


class LatError(Exception):
    """Base of every error the core raises on purpose; ``title`` is a short heading for UIs."""

    title = "LAT error"

    def __init__(self, message: str, *, where: str | None = None):
        self.message = message
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class PlanError(LatError):
    """A plan (YAML or flags) that does not validate. ``problems`` lists every issue found."""

    title = "Invalid plan"

    def __init__(self, problems: list[str], *, where: str | None = None):
        self.problems = list(problems)
        joined = "\n  ".join(self.problems)
        super().__init__(joined if len(self.problems) == 1 else "\n  " + joined, where=where)


class ConfigError(LatError):
    title = "Invalid experiment config"


class SuiteError(LatError):
    title = "Unknown or invalid suite"


class GpuError(LatError):
    title = "GPU not available"


class JournalError(LatError):
    title = "Journal problem"


class NoJobError(JournalError):
    """A job id the journal does not hold (a mistyped id, or one of another run): the user's slip,
    worded as such; a JournalError still, so code that treats journal reads alike goes on doing so."""

    title = "No such job"


class NoSuchRunError(JournalError):
    """A run id the journal does not hold (``--run 999``): the user's slip, like NoJobError; a
    JournalError still, so code that treats journal reads alike goes on doing so."""

    title = "No such run"


class OutputPathError(LatError):
    title = "Cannot use output path"


class RunConflictError(LatError):
    """A new run would write into job folders that a live run owns."""

    title = "Jobs already running"

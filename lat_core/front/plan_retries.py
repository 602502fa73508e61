"""``on_failure:`` of a plan: which failure classes are retried as they are, how often, how late.

Classes are checked against the one list triage produces (:class:`lat_core.contract.failure_classes.FailureClass`);
OOM classes belong to ``on_oom`` (retried with a remedy), and a clean or cancelled job is never
retried. The engine side is :mod:`lat_core.engine.retries`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lat_core.contract.failure_classes import OOM_CLASSES, FailureClass
from lat_core.contract.plan_defaults import PLAN_DEFAULTS as D

NEVER_RETRIED = (FailureClass.OK, FailureClass.CANCELLED)


def failure_classes() -> list[str]:
    """The one list of failure classes triage produces."""
    return [c.value for c in FailureClass]


class OnFailure(BaseModel):
    """Retry jobs that failed with one of ``classes`` (transient: rendezvous, NCCL, hub timeouts)."""
    model_config = ConfigDict(extra="forbid")
    classes: list[str] = Field(min_length=1)
    max_retries: int = Field(default=D.max_retries, ge=1, le=10)
    backoff_s: float = Field(default=D.backoff_s, ge=0, le=24 * 3600)

    @field_validator("classes")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        known = [c for c in failure_classes() if c not in NEVER_RETRIED and c not in OOM_CLASSES]
        for name in value:
            if name in OOM_CLASSES:
                raise ValueError(f"{name!r} is retried with a remedy by 'on_oom', not 'on_failure'")
            if name not in known:
                raise ValueError(f"unknown failure class {name!r} (choose from {', '.join(known)})")
        return value

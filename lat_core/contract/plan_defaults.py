"""The defaults of a plan's fields: one table for the two places that fill them in, the plan schema
(:class:`lat_core.front.plan.Plan`) when a plan is made, and :class:`lat_core.contract.saved_plan.SavedPlan`
when a run's saved plan leaves a field out (``Plan.to_yaml`` drops fields at their default).

Fields whose default is "none given" (``env``, ``overrides``, ``notify``, ``slurm``: empty; ``on_oom``,
``on_failure``: no retries) need no entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union


@dataclass(frozen=True)
class PlanDefaults:
    gpus: Literal["cpu"] = "cpu"
    slots: Literal["auto"] = "auto"  # what "auto" means: lat_core.front.plan.Plan.slots
    countdown_minutes: float = 0.0
    output_root: str = "runs"
    gpus_per_job: int = 1
    min_free_gb: float = 0.0
    backend: Literal["local", "slurm"] = "local"
    resume: bool = False
    overwrite: bool = False
    mps: bool = False
    fuse: Union[Literal["auto"], bool] = "auto"
    warm_start: bool = True
    allow_cpu: bool = False
    breaker: int = 3  # the circuit breaker's K (lat_core.engine.breaker); 0: off
    max_retries: int = 2  # of on_oom and on_failure
    backoff_s: float = 30.0  # of on_failure


PLAN_DEFAULTS = PlanDefaults()

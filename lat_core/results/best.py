"""Choosing a job's best checkpoint from its validation evals.

Why only checkpointed steps: a validation score at a step whose weights were never saved cannot be
reproduced or evaluated on test, so it must not be reported as the job's result.
"""

from __future__ import annotations

from dataclasses import dataclass

from lat_core.results.metrics import Metrics, MetricSpec, metric_value


@dataclass(frozen=True)
class BestCheckpoint:
    """The winning validation eval, the checkpoint saved at its step, and test metrics there."""

    step: int
    value: float
    checkpoint: str
    validation: Metrics
    test: Metrics | None


def scored_steps(evals: dict[int, Metrics], metric: str) -> list[tuple[int, float]]:
    """(step, value) for every eval that reports a finite ``metric``, in step order."""
    scored = ((step, metric_value(metrics, metric)) for step, metrics in evals.items())
    return sorted((step, value) for step, value in scored if value is not None)


def choose_best(validation: dict[int, Metrics], checkpoints: dict[int, str], spec: MetricSpec,
                test: dict[int, Metrics] | None = None) -> BestCheckpoint | None:
    """The best validation eval among checkpointed steps; ties go to the earliest step.

    Returns None when no checkpointed step has a usable value of the main metric.
    """
    best: tuple[int, float] | None = None
    for step, value in scored_steps(validation, spec.main):
        if step in checkpoints and (best is None or spec.better(value, best[1])):
            best = (step, value)
    if best is None:
        return None
    step, value = best
    test_metrics = (test or {}).get(step)
    return BestCheckpoint(step=step, value=value, checkpoint=checkpoints[step],
                          validation=dict(validation[step]),
                          test=dict(test_metrics) if isinstance(test_metrics, dict) else None)

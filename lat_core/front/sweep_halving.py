"""Successive halving over a sweep's points (ASHA's rule, deterministic; the engine applies it:
:mod:`lat_core.engine.halving`)::

    sweep:
      grid: {train.lr: [1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3]}
      halving: {eta: 3, min_steps: 20}     # rungs at steps 20, 60, 180, ...; or rungs: [20, 50, 100]

The jobs of one config, dataset, seed (and stage, with ``stages:``) race: at each rung a job goes on
only if its best validation value so far is among the best 1/eta of the points before it in the
sweep's order that reached the rung (itself included); the others end ``pruned``.
"""

from __future__ import annotations

from dataclasses import dataclass

HALVING_KEYS = ("eta", "min_steps", "rungs")
MAX_RUNGS = 12  # rungs made from min_steps: 20 x 3^11 is past any fine-tuning run
DEFAULT_ETA = 3


@dataclass(frozen=True)
class HalvingRule:
    eta: int
    rungs: tuple[int, ...]


def read_halving(raw: object, where: str, problems: list[str]) -> HalvingRule | None:
    """The rule ``raw`` describes (problems appended, each naming its field under ``where``)."""
    if not isinstance(raw, dict):
        problems.append(f"field {where!r}: expected a mapping with eta and min_steps (or rungs), got {raw!r}")
        return None
    problems += [f"field '{where}.{k}': unknown field (expected {', '.join(HALVING_KEYS)})" for k in raw
                 if k not in HALVING_KEYS]
    eta = raw.get("eta", DEFAULT_ETA)
    if isinstance(eta, bool) or not isinstance(eta, int) or eta < 2:
        problems.append(f"field '{where}.eta': expected a whole number >= 2 (1/eta of the points go on), got {eta!r}")
        return None
    rungs = _rungs(raw, where, eta, problems)
    return HalvingRule(eta, rungs) if rungs else None


def _rungs(raw: dict[object, object], where: str, eta: int, problems: list[str]) -> tuple[int, ...]:
    if ("min_steps" in raw) == ("rungs" in raw):
        problems.append(f"field {where!r}: expected min_steps (rungs at min_steps, x eta, x eta^2, ...) or rungs "
                        "(a list of steps), one of them")
        return ()
    if "min_steps" in raw:
        first = raw["min_steps"]
        if isinstance(first, bool) or not isinstance(first, int) or first < 1:
            problems.append(f"field '{where}.min_steps': expected a whole number >= 1, got {first!r}")
            return ()
        return tuple(first * eta ** k for k in range(MAX_RUNGS))
    rungs = raw["rungs"]
    if not isinstance(rungs, list) or not rungs or any(isinstance(r, bool) or not isinstance(r, int) or r < 1
                                                       for r in rungs) or rungs != sorted(set(rungs)):
        problems.append(f"field '{where}.rungs': expected increasing whole numbers >= 1 (steps), got {rungs!r}")
        return ()
    return tuple(rungs)

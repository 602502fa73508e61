"""A suite entry's ``after:``: its jobs wait for the success of every job of another entry of the
same plan (a suite, or some of its rounds)::

    suites:
      - {name: E4, rounds: [1]}
      - {name: E4, rounds: [2], after: {suite: E4, rounds: [1]}}   # round 2 once round 1 succeeded
      - {name: E5, after: E4}                                      # E5 once all of E4 succeeded

Checked with the plan: the suite and rounds waited for must be ones the plan runs, an entry never
waits for its own jobs, and entries never wait for each other in a circle (no job could start).
The engine does the waiting (:mod:`lat_core.engine.dependencies`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lat_core.config.suites import SuiteRegistry
from lat_core.errors import LatError

if TYPE_CHECKING:  # plan.py imports this module to check its plans
    from lat_core.front.plan import AfterRef, Plan, SuiteRef


def after_problems(plan: Plan, registry: SuiteRegistry) -> list[str]:
    rounds = [_rounds_of(ref, registry) for ref in plan.suites]
    planned: dict[str, set[int]] = {}
    for ref, own in zip(plan.suites, rounds):
        planned.setdefault(ref.name, set()).update(own or ())
    problems = []
    for i, (ref, own) in enumerate(zip(plan.suites, rounds)):
        for j, after in enumerate(ref.after):
            where = f"field 'suites[{i}].after" + (f"[{j}]'" if len(ref.after) > 1 else "'")
            problem = _problem(ref, own or set(), after, planned)
            if problem:
                problems.append(f"{where}: {problem}")
    return problems or _circle(plan, rounds)


def _problem(ref: SuiteRef, own: set[int], after: AfterRef, planned: dict[str, set[int]]) -> str | None:
    if after.suite not in planned:
        return f"suite {after.suite!r} is not in this plan (its suites: {', '.join(planned)})"
    wanted = planned[after.suite] if after.rounds == "all" else set(after.rounds)
    missing = wanted - planned[after.suite]
    if missing:
        runs = ", ".join(str(r) for r in sorted(planned[after.suite]))
        return f"this plan runs no round {min(missing)} of {after.suite!r} (it runs {runs})"
    if after.suite == ref.name and wanted & own:
        return f"the entry would wait for its own jobs (round {min(wanted & own)} of {ref.name!r})"
    return None


def _rounds_of(ref: SuiteRef, registry: SuiteRegistry) -> set[int] | None:
    """The rounds an entry runs; None for a suite that cannot be read (its own problem says why)."""
    if ref.rounds != "all":
        return set(ref.rounds)
    try:
        return set(registry.get(ref.name).rounds)
    except LatError:
        return None


def waited_for(ref: SuiteRef, other: SuiteRef, other_rounds: set[int]) -> bool:
    """Whether ``ref``'s jobs wait for some job of entry ``other`` (which runs ``other_rounds``)."""
    return any(after.holds(other.name, r) for after in ref.after for r in other_rounds)


def _circle(plan: Plan, rounds: list[set[int] | None]) -> list[str]:
    """Entries that wait for each other in a circle, named once (the first circle found)."""
    edges = {i: [k for k, other in enumerate(plan.suites) if waited_for(ref, other, rounds[k] or set())]
             for i, ref in enumerate(plan.suites)}
    for start in edges:
        path = _path_back(start, edges)
        if path:
            names = " -> ".join(f"suites[{i}] ({plan.suites[i].name})" for i in path)
            return [f"field 'suites': entries wait for each other in a circle, so none could start: {names}"]
    return []


def _path_back(start: int, edges: dict[int, list[int]]) -> list[int] | None:
    """A path of waits from ``start`` back to itself, or None (depth first, each entry once)."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in edges[node]:
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None

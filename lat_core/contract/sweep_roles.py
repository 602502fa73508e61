"""A job's part in a sweep's search, as the front end writes it into the journal and the engine reads
it: which point of the sweep it trains, and for a two-stage search (``sweep: {stages: ...}``) whether
it is a screening job of stage 1 or a full job of stage 2, which waits for its search's stage 1 to
end and runs only if its point is among the ``promote`` best (:mod:`lat_core.engine.promotion`);
under ``sweep: {halving: ...}``, the race it runs in (:mod:`lat_core.engine.halving`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum


class Stage(StrEnum):
    SCREEN = "screen"  # stage 1: every point, on a part of the data or a step budget
    FULL = "full"  # stage 2: the promoted points in full, with every seed
    ONLY = "only"  # a sweep of one stage (its points race under halving)


class SweepRoleError(ValueError):
    """A journal's sweep role that is not what :meth:`SweepRole.to_json` writes."""


@dataclass(frozen=True)
class SweepRole:
    point: int  # the point's place in its sweep: a tie in the ranking goes to the earlier point
    point_name: str  # lr2e-4_r16
    search: str  # the two-stage search: its screening jobs, and the full jobs that wait for them
    stage: Stage
    promote: int = 0  # how many points stage 2 runs (the same on every job of a search)
    # successive halving (lat_core.engine.halving): the jobs it races against (same config, dataset,
    # seed and stage), the steps it is judged at, and 1/eta: the part of the points that go on
    race: str = ""
    rungs: tuple[int, ...] = ()
    eta: int = 0

    def to_json(self) -> str:
        return json.dumps({"point": self.point, "point_name": self.point_name, "search": self.search,
                           "stage": self.stage.value, "promote": self.promote, "race": self.race,
                           "rungs": list(self.rungs), "eta": self.eta})

    @classmethod
    def from_json(cls, text: str) -> SweepRole:
        try:
            raw = json.loads(text)
            role = cls(int(raw["point"]), str(raw["point_name"]), str(raw["search"]), Stage(raw["stage"]),
                       int(raw.get("promote", 0)), str(raw.get("race", "")),
                       tuple(int(r) for r in raw.get("rungs", ())), int(raw.get("eta", 0)))
        except (ValueError, KeyError, TypeError) as exc:
            raise SweepRoleError(f"not a sweep role ({type(exc).__name__}: {exc})") from None
        return role

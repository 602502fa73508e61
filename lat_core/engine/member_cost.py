"""What a fused group of n jobs of one config needs: a base (the frozen model, the CUDA context,
the libraries: paid once per process) plus what each member adds (its adapter, optimizer state and
activations), fitted from what was measured.

Why: a group's process tree is shared, so its usage is the group's. Dividing it among members gives
numbers that are right for nothing: a job alone needs the whole base, and a group of 8 needs far
less than 8 jobs alone. A measurement keeps the member count it was taken at (1: a job alone), and
the need of another count comes from the fit, never from a share.

Only a group's peak while all its members were in it is a point: memory a member held is not given
back to the device when it leaves (torch's caching allocator keeps it), so a peak after a member
left overstates what the fewer members need, and fitting it would flatten the line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from lat_core.config.memory_prior import PriorSplit


@dataclass(frozen=True)
class MemberCost:
    """base + n x per_member, never below ``floor`` (a measured peak that bounds fewer members
    from above where nothing says how it splits)."""
    base: int
    per_member: int
    floor: int = 0

    def need(self, members: int) -> int:
        return max(self.floor, self.base + members * self.per_member)


def fit(points: Mapping[int, int], prior: PriorSplit | None) -> MemberCost | None:
    """The cost model from ``points`` (member count -> the largest peak measured at it; 1: the job
    alone); None when nothing was measured.

    Two counts or more: the least-squares slope (never negative) as the per-member cost, and the
    base raised until no measurement lies above the line (admission must not under-estimate).
    One count n with a prior: the prior's base (less where the measurement leaves no room for it
    and every member's exact adapter state) and the rest of the peak split among the n members.
    One count without a prior: fewer than n members need at most that peak, more need it pro rata.
    """
    measured = {n: p for n, p in points.items() if n >= 1 and p > 0}
    if not measured:
        return None
    if len(measured) >= 2:
        return _line(measured)
    (n, peak), = measured.items()
    if prior is None:
        return MemberCost(0, -(-peak // n), floor=peak)
    base = max(0, min(prior.base, peak - n * prior.member_min))
    return MemberCost(base, -(-(peak - base) // n))


def _line(points: Mapping[int, int]) -> MemberCost:
    ns = list(points)
    mean_n = sum(ns) / len(ns)
    mean_p = sum(points.values()) / len(ns)
    slope = sum((n - mean_n) * (p - mean_p) for n, p in points.items()) / sum((n - mean_n) ** 2 for n in ns)
    per = max(0, round(slope))
    return MemberCost(max(p - n * per for n, p in points.items()), per)


def group_need(costs: list[MemberCost]) -> int:
    """A group holding one member of each cost model (a suite's configs differ): one base, the
    largest, and every member's own cost; at least the largest floor."""
    if not costs:
        return 0
    return max(max(c.floor for c in costs), max(c.base for c in costs) + sum(c.per_member for c in costs))

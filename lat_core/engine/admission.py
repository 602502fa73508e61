"""Memory-aware admission: a free slot is necessary, not sufficient.

A job is admitted to a GPU only if the GPU's measured free memory, minus a margin, minus what jobs
still starting there will claim, covers the peak this config measured before (on the same dataset).
A config never measured borrows an estimate from its siblings (same suite and dataset: a rank sweep's
jobs need nearly the same memory), measured before or running now past their first step, with a
safety factor. Without either, a static prior computed from the job's config
(:mod:`lat_core.config.memory_prior`) stands in, so unmeasured jobs whose priors fit start together.
Where even that is unknown (SDLoRA, DoRA, say), admissions onto one GPU are staggered until the starting
job has settled (its first logged training step, when activations and optimizer state exist, or
``settle_s``), so two unknown jobs never race for the same free memory. Host RAM is guarded the
same way with each config's peak process-tree RSS.

Jobs that start together in one fused process need one base and what each member adds, fitted from
their configs' peaks alone and in groups of each size measured (:mod:`lat_core.engine.member_cost`):
a member's record says the size of its group, so a share of a group is never taken for a job alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

from lat_core.contract.devices import Device
from lat_core.engine.member_cost import MemberCost, fit, group_need
from lat_core.config.memory_prior import MemoryPrior, job_prior
from lat_core.monitor.gpu import GpuProbe, GpuSnapshot
from lat_core.monitor.host import HostSnapshot, host_snapshot
from lat_core.contract.rows import JobRow
from lat_core.contract.journal import Store
from lat_core.titles import job_title

GiB = 2**30


@dataclass(frozen=True)
class AdmissionPolicy:
    gpu_margin: int = 1 * GiB  # CUDA context, allocator slack, other tenants' spikes
    host_margin: int = 2 * GiB
    settle_s: float = 45.0  # a job younger than this that has not logged a step still grows
    sibling_factor: float = 1.25  # an unmeasured config's estimate from its siblings, with headroom


def fmt_gib(n: int) -> str:
    return f"{n / GiB:.1f}G"


class Estimate(NamedTuple):
    """What a job is expected to need; ``from_prior``: a static estimate, never measured."""
    gpu: int
    rss: int
    from_prior: bool = False

    def needs(self, n: int, what: str) -> str:
        """The need as a reason shows it: '10.0G GPU memory' when measured, '~7.4G GPU memory
        (estimated from the config; never measured)' for a prior, so a user knows which to trust."""
        if not self.from_prior:
            return f"{fmt_gib(n)} {what}"
        return f"~{fmt_gib(n)} {what} (estimated from the config; never measured)"


NOTHING = MemberCost(0, 0)  # a resource the config was measured not to use (a CPU job's GPU memory)


class MemberCosts(NamedTuple):
    """A job's cost model as a fused member, for GPU memory and host RSS."""
    gpu: MemberCost
    rss: MemberCost
    from_prior: bool


class Admission:
    def __init__(self, store: Store, probe: GpuProbe, *, policy: AdmissionPolicy | None = None,
                 host=host_snapshot, clock=time.time):
        self.store, self.probe, self.policy = store, probe, policy or AdmissionPolicy()
        self._host, self._clock = host, clock
        self._gpus: GpuSnapshot | None = None
        self._hostsnap: HostSnapshot | None = None
        self._enabled = True
        self._min_free = 0
        self._running: list[JobRow] = []
        self._expected: dict[tuple[int, bool], Estimate | None] = {}  # (job id, on cpu) -> this pass's
        # Static priors never change for one attempt of a job: read once per (job id, attempts), not
        # per pass (a remedy between attempts may rewrite job.yaml or the job's env).
        self._priors: dict[tuple[int, int], MemoryPrior | None] = {}

    def begin(self, devices: list[Device] | None, min_free_gb: float = 0.0) -> None:
        """One NVML and one psutil reading per admission pass, not per job. ``None``: the jobs run
        elsewhere (Slurm), so this host's memory says nothing and only slots count."""
        self._enabled = devices is not None
        self._min_free = int(min_free_gb * GiB)
        self._gpus = self.probe.snapshot() if devices and any(not d.is_cpu for d in devices) else None
        self._hostsnap = self._host() if self._enabled else None
        self._expected = {}

    def blocker(self, job: JobRow, device: Device, running: list[JobRow]) -> str | None:
        """None when ``job`` may start on ``device`` now, else why it waits. ``running``: every
        active run's running jobs on this host (they all draw on the same memory)."""
        if not self._enabled:
            return None
        self._running = running
        return self._blocker(self.expected_peak(job, device.id), device, running)

    def group_blocker(self, jobs: list[JobRow], device: Device, running: list[JobRow]) -> str | None:
        """As :meth:`blocker`, for jobs that start together in one fused process (see
        :meth:`group_estimate`)."""
        if not self._enabled:
            return None
        self._running = running
        return self._blocker(self.group_estimate(jobs, device.id), device, running)

    def group_estimate(self, jobs: list[JobRow], device_id: str | None = None) -> Estimate | None:
        """What ``jobs`` need together in one fused process: one base and what each member adds,
        fitted from their configs' peaks alone and in groups of each size measured
        (:mod:`lat_core.engine.member_cost`); unknown when any member's is."""
        costs = [c for j in jobs if (c := self._member_cost(j, (device_id or j.device) == "cpu")) is not None]
        if len(costs) < len(jobs):
            return None
        return Estimate(group_need([c.gpu for c in costs]), group_need([c.rss for c in costs]),
                        any(c.from_prior for c in costs))

    def _blocker(self, expected: Estimate | None, device: Device, running: list[JobRow]) -> str | None:
        starting = [j for j in running if self._is_starting(j)]
        host_wait = self._host_blocker(expected, starting, running)
        if host_wait:
            return host_wait
        if device.is_cpu:
            return None
        return self._gpu_blocker(expected, device, [j for j in starting if j.device == device.id])

    def expected_peak(self, job: JobRow, device_id: str | None = None) -> Estimate | None:
        """(GPU bytes, RSS bytes) the job is expected to need on ``device_id`` (default: the
        device it runs on): its config's measured peak, else its siblings' (see the module
        docstring), else its static prior, else None (unknown). Computed once per pass."""
        key = (job.id, (device_id or job.device) == "cpu")
        if key not in self._expected:
            self._expected[key] = self._estimate(job, on_cpu=key[1])
        return self._expected[key]

    def prior_note(self, job: JobRow, device: Device) -> str | None:
        """For the history of a job admitted to a GPU on its static prior: why it did not wait for
        a sibling to settle (on the CPU nothing waited for that)."""
        if not self._enabled or device.is_cpu:
            return None
        expected = self.expected_peak(job, device.id)
        if expected is None or not expected.from_prior:
            return None
        return f"admitted on {device.id} without a measured peak: needs {expected.needs(expected.gpu, 'GPU memory')}"

    def _estimate(self, job: JobRow, *, on_cpu: bool) -> Estimate | None:
        measured = self.store.config_peak(job.profile_key)
        if measured is not None:
            return Estimate(*measured)
        if self.store.group_peaks(job.profile_key):  # measured only in groups: the fit's need alone
            cost = self._member_cost(job, on_cpu)
            return None if cost is None else Estimate(cost.gpu.need(1), cost.rss.need(1))
        siblings = self._sibling_estimate(job)
        if siblings is not None:
            return siblings
        prior = self._prior(job)
        if prior is None:
            return None
        gpu, rss = prior.peak(on_cpu)
        return Estimate(gpu, rss * job.world, from_prior=True)  # GPU memory per device, RSS of every rank

    def _member_cost(self, job: JobRow, on_cpu: bool) -> MemberCosts | None:
        """The job's cost model as a fused member: from its config's peaks measured alone (1 member)
        and in groups, else from its estimate alone (siblings', the prior) as one point; split into
        base and per-member with the prior's split where there is one. None: unknown."""
        points = {n: peaks for n, peaks in self.store.group_peaks(job.profile_key).items()}
        alone = self.store.config_peak(job.profile_key)
        if alone is not None:
            points[1] = alone
        from_prior = False
        if not points:
            estimate = self.expected_peak(job, "cpu" if on_cpu else None)
            if estimate is None:
                return None
            points, from_prior = {1: (estimate.gpu, estimate.rss)}, estimate.from_prior
        prior = self._prior(job)
        gpu_split, rss_split = prior.splits(on_cpu) if prior is not None else (None, None)
        gpu = fit({n: g for n, (g, _) in points.items()}, gpu_split) or NOTHING
        rss = fit({n: r for n, (_, r) in points.items()}, rss_split) or NOTHING
        return MemberCosts(gpu, rss, from_prior)

    def _prior(self, job: JobRow) -> MemoryPrior | None:
        key = (job.id, job.attempts)
        if key not in self._priors:
            self._priors[key] = job_prior(job.job_dir, job.env)
        return self._priors[key]

    def _sibling_estimate(self, job: JobRow) -> Estimate | None:
        family = [self.store.family_peak(job.suite, job.dataset)]
        family += [(max(j.gpu_mem or 0, j.peak_gpu or 0), max(j.rss or 0, j.peak_rss or 0))
                   for j in self._running
                   if (j.suite, j.dataset) == (job.suite, job.dataset) and j.id != job.id and self._settled(j)]
        measured = [f for f in family if f is not None and (f[0] or f[1])]
        if not measured:
            return None
        factor = self.policy.sibling_factor
        return Estimate(int(max(f[0] for f in measured) * factor), int(max(f[1] for f in measured) * factor))

    def _settled(self, job: JobRow) -> bool:
        return job.started is not None and not self._is_starting(job)

    def _is_starting(self, job: JobRow) -> bool:
        if job.started is None or job.last_step:
            return False  # not started, or past its first logged step: memory has (nearly) peaked
        return self._clock() - job.started < self.policy.settle_s

    def _gpu_blocker(self, expected, device: Device, starting: list[JobRow]) -> str | None:
        gpu = self._gpus.by_index(device.index) if self._gpus and device.index is not None else None
        if gpu is None:
            return None  # no NVML reading: the slot plan alone decides
        free_now = gpu.memory_total - gpu.memory_used
        if free_now < self._min_free:  # the plan's pre-launch threshold (min_free_gb)
            return f"{device.id} has {fmt_gib(free_now)} free, the plan asks for at least {fmt_gib(self._min_free)}"
        unknown = [j for j in starting if self.expected_peak(j) is None]
        if unknown:
            return f"waiting for job {unknown[0].id} ({job_title(unknown[0])}) to settle on {device.id}"
        if expected is None:
            return None
        claims = self._claims(starting, gpu=True)
        free = gpu.memory_total - gpu.memory_used - self.policy.gpu_margin - claims
        if expected.gpu > free:
            return f"needs {expected.needs(expected.gpu, 'GPU memory')}, {fmt_gib(max(free, 0))} free on {device.id}"
        return None

    def _host_blocker(self, expected, starting: list[JobRow], running: list[JobRow]) -> str | None:
        if expected is None or self._hostsnap is None or not running:
            return None  # an idle machine always takes one job: nothing else competes for it
        claims = self._claims(starting, gpu=False)
        free = self._hostsnap.ram_available - self.policy.host_margin - claims
        if expected.rss > free:
            return f"needs {expected.needs(expected.rss, 'host RAM')}, {fmt_gib(max(free, 0))} available"
        return None

    def _claims(self, starting: list[JobRow], *, gpu: bool) -> int:
        """What the starting jobs will still take: a job alone its expected peak less its usage
        now; a fused group (its members' rows carry no usage: it is the group's) its group's."""
        groups: dict[str, list[JobRow]] = {}
        for job in starting:
            if job.fused_group:
                groups.setdefault(job.fused_group, []).append(job)
        claims = sum(self._still_to_claim(j, gpu=gpu) for j in starting if not j.fused_group)
        for group_id, members in groups.items():
            need, usage = self.group_estimate(members), self.store.fused_group(group_id)
            now = ((usage.gpu_mem if gpu else usage.rss) or 0) if usage is not None else 0
            claims += max(0, (need.gpu if gpu else need.rss) - now) if need is not None else 0
        return claims

    def _still_to_claim(self, job: JobRow, *, gpu: bool) -> int:
        peak = self.expected_peak(job)
        if peak is None:
            return 0
        now = (job.gpu_mem if gpu else job.rss) or 0
        return max(0, (peak.gpu if gpu else peak.rss) - now)

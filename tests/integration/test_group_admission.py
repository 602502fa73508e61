"""Admission of fused groups and of jobs alone from peaks measured in groups: a member's record says
the size of its group, so a job alone is not admitted on a member's share and a group of 8 not on a
job alone's peak x 8 (lat_core.engine.member_cost)."""

import pytest

from lat_core.contract.devices import Device
from lat_core.engine.admission import GiB, Admission, AdmissionPolicy
from lat_core.config.memory_prior import job_prior
from lat_core.monitor.fake_nvml import FakeNvml
from lat_core.monitor.gpu import GpuProbe
from lat_core.monitor.host import HostSnapshot
from tests.conftest import fake_job
from tests.integration.test_admission import GLA_13B_BENCH, configured_job, gpu_device
from tests.integration.test_engine import make_run

GPU0 = Device.from_json(gpu_device(0))


def one_config(tmp_path, n, config=None):
    """``n`` queued jobs of one config (seeds differ): one profile key, so one memory record."""
    jobs = [configured_job(tmp_path, f"m{i}", config) if config else fake_job(tmp_path, f"m{i}") for i in range(n)]
    store, run_id = make_run(tmp_path, [{**j, "stem": "rank8", "seed": i} for i, j in enumerate(jobs)],
                             devices=[gpu_device(0, slots=8)])
    return store, store.jobs(run_id)


def admission(store, free: int) -> Admission:
    fake = FakeNvml.with_gpus(1, total=80 * GiB, used=80 * GiB - free)
    adm = Admission(store, GpuProbe(fake), policy=AdmissionPolicy(gpu_margin=0),
                    host=lambda: HostSnapshot(512 * GiB, 0, 512 * GiB, 0, 0, 0.0, 16))
    adm.begin([GPU0])
    return adm


def test_a_group_of_4_measured_sizes_a_job_alone_and_a_group_of_8_without_a_prior(tmp_path):
    store, jobs = one_config(tmp_path, 8)  # no job.yaml: no prior to split the peak
    store.record_group_peak(jobs[0].profile_key, 4, 20 * GiB, 8 * GiB)
    assert admission(store, 19 * GiB).blocker(jobs[0], GPU0, []) == "needs 20.0G GPU memory, 19.0G free on gpu0"
    assert admission(store, 20 * GiB).blocker(jobs[0], GPU0, []) is None  # not a quarter of the group
    adm = admission(store, 39 * GiB)
    assert adm.group_estimate(jobs) == (40 * GiB, 16 * GiB, False)
    assert adm.group_blocker(jobs, GPU0, []) == "needs 40.0G GPU memory, 39.0G free on gpu0"


def test_a_group_of_4_measured_splits_at_the_priors_base(tmp_path):
    store, jobs = one_config(tmp_path, 8, GLA_13B_BENCH)
    base = job_prior(jobs[0].job_dir, {}).gpu_base  # the frozen weights and the CUDA context
    store.record_group_peak(jobs[0].profile_key, 4, 20 * GiB, 8 * GiB)
    per_member = -(-(20 * GiB - base) // 4)
    adm = admission(store, 80 * GiB)
    assert adm.expected_peak(jobs[0]).gpu == base + per_member
    assert adm.group_estimate(jobs).gpu == base + 8 * per_member
    assert adm.group_estimate(jobs[:4]).gpu == pytest.approx(20 * GiB, abs=4)  # the measurement (rounded up)
    assert not adm.expected_peak(jobs[0]).from_prior  # measured, in a group


def test_peaks_alone_and_in_a_group_of_8_give_every_size_between(tmp_path):
    store, jobs = one_config(tmp_path, 8, GLA_13B_BENCH)
    store.record_config_peak(jobs[0].profile_key, 6 * GiB, 3 * GiB)
    store.record_group_peak(jobs[0].profile_key, 8, 13 * GiB, 4 * GiB)
    adm = admission(store, 80 * GiB)
    assert adm.expected_peak(jobs[0]).gpu == 6 * GiB  # alone: its own measurement
    assert adm.group_estimate(jobs[:4]) == (9 * GiB, pytest.approx(3 * GiB + 3 * GiB / 7, abs=4), False)
    assert adm.group_estimate(jobs).gpu == 13 * GiB  # not 8 x 6G


def test_a_group_never_measured_pays_the_priors_base_once(tmp_path):
    store, jobs = one_config(tmp_path, 4, GLA_13B_BENCH)
    prior = job_prior(jobs[0].job_dir, {})
    estimate = admission(store, 80 * GiB).group_estimate(jobs)
    assert estimate.gpu == prior.gpu_base + 4 * (prior.gpu_bytes - prior.gpu_base)
    assert estimate.rss == prior.gpu_job_rss and estimate.from_prior

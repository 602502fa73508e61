"""A Slurm plan from a login node: the cluster's one device, no NVML, no local slots or ports."""

import pytest

from lat_core.config.suites import SuiteRegistry
from lat_core.contract.devices import CLUSTER_ID
from lat_core.contract.rows import JobRow
from lat_core.contract.states import JobState
from lat_core.engine.placement import placements, slots_taken, slots_used, standalone_argv
from lat_core.errors import PlanError
from lat_core.front.service import prepare_run
from tests.unit.test_paths_and_modes import plan_for
from tests.unit.test_plan import configs  # noqa: F401  (fixture)


class NoNvml:
    """A probe that fails the test if a Slurm plan asks this host's GPUs."""

    def snapshot(self):
        raise AssertionError("a Slurm plan read this host's NVML")


def test_a_slurm_plan_is_one_cluster_device_without_nvml(configs, tmp_path):
    plan = plan_for(configs, tmp_path / "o", backend="slurm", gpus_per_job=2, slurm={"max_jobs": 5})
    prepared = prepare_run(plan, registry=SuiteRegistry(configs), probe=NoNvml())
    [device] = prepared.devices
    assert (device.id, device.slots, dict(device.env)) == (CLUSTER_ID, 5, {})  # Slurm pins the GPUs
    assert device.is_cluster and not device.is_cpu
    assert {job.world for job in prepared.jobs} == {2}  # more processes than this host has GPUs: Slurm's call
    cpu_only = plan_for(configs, tmp_path / "c", backend="slurm", slurm={"gres": "none"})
    assert dict(prepare_run(cpu_only, registry=SuiteRegistry(configs), probe=NoNvml()).devices[0].env) == \
        {"CUDA_VISIBLE_DEVICES": ""}


def test_a_slurm_plan_refuses_this_hosts_gpus_and_slots(configs, tmp_path):
    with pytest.raises(PlanError) as err:
        plan_for(configs, tmp_path / "o", backend="slurm", gpus=[0, 1], slots=2)
    text = str(err.value)
    assert "field 'gpus': [0, 1] names GPUs of this machine" in text and "slurm.max_jobs" in text


def _job(world: int, device: str = "", state=JobState.QUEUED) -> JobRow:
    return JobRow(id=1, run_id=1, seq=1, key="k", suite="s", round=1, stem="k", seed=1, dataset="d", job_dir="/j",
                  state=state, device=device or None, attempts=0, started=None, ended=None, returncode=None,
                  last_step=None, last_loss=None, error=None, world=world, argv=[], env={})


def test_a_cluster_job_takes_one_slot_whatever_its_world(configs, tmp_path):
    plan = plan_for(configs, tmp_path / "o", backend="slurm", slurm={"max_jobs": 2})
    [device] = prepare_run(plan, registry=SuiteRegistry(configs), probe=NoNvml()).devices
    assert placements(_job(4), [device], {}) == [[device]]
    assert slots_used([_job(4, CLUSTER_ID, JobState.RUNNING)]) == {CLUSTER_ID: 1}
    assert slots_taken(4, CLUSTER_ID, 1) == 1 and slots_taken(4, "cpu", 1) == 4
    assert placements(_job(1), [device], {CLUSTER_ID: 2}) == []  # max_jobs in the queue


def test_standalone_torchrun_picks_no_port_here():
    argv = standalone_argv(["python", "-m", "lat_core.train", "--cfg", "job.yaml"], 2)
    assert argv[1:] == ["-m", "lat_core.train.torchrun", "--standalone", "--nnodes=1", "--nproc_per_node=2",
                        "-m", "lat_core.train", "--cfg", "job.yaml"]
    assert not any("master" in a for a in argv)


def test_each_job_spreads_evenly_over_the_plans_nodes(configs, tmp_path):
    (configs / "experiments" / "gla" / "b.yaml").write_text("model: {family: gla}\ngpus_per_job: 3\n")
    plan = plan_for(configs, tmp_path / "o", backend="slurm", gpus_per_job=4, slurm={"nodes": 2})
    with pytest.raises(PlanError) as err:
        prepare_run(plan, registry=SuiteRegistry(configs), probe=NoNvml())
    [problem] = err.value.problems  # a.yaml and c.yaml take the plan's 4: two a node
    assert problem.startswith("job tiny-sst2_seed1/b ") and str(configs / "experiments" / "gla" / "b.yaml") in problem
    assert "plan field 'slurm.nodes': 2 nodes need a job's processes (gpus_per_job) to be a multiple of 2" in problem
    (configs / "experiments" / "gla" / "b.yaml").write_text("model: {family: gla}\ngpus_per_job: 6\n")
    assert {job.world for job in prepare_run(plan, registry=SuiteRegistry(configs), probe=NoNvml()).jobs} == {4, 6}


def test_several_nodes_need_slurm(configs, tmp_path):
    with pytest.raises(PlanError) as err:
        plan_for(configs, tmp_path / "o", gpus="cpu", gpus_per_job=2, slurm={"nodes": 2})
    assert "plan field 'slurm.nodes': jobs spread over several nodes only through Slurm: set backend: slurm" \
        in str(err.value)

"""Every remedy kind end to end: a real failure, triage's offer, ``lat-tui requeue JOB --remedy KEY``
through the journal to a detached engine, the retried trainer showing the change, and triage not
offering the applied remedy again (real processes: the fake trainer echoes what each attempt saw)."""

import json
import time
from pathlib import Path

import pytest

from lat_core.contract.commands import RequeueJob
from lat_core.front.jobs import JobSpec, materialize, resolve_config
from lat_core.front.plan import Plan
from lat_core.front.service import ensure_engine, open_store
from lat_core.contract.journal import JOB_FINAL
from lat_tui.control_cli import main as control_main
from tests.conftest import fake_job
from tests.integration.test_engine import CPU
from tests.integration.test_slurm import slurm_cluster  # noqa: F401  (the session fixture)
from tests.helpers.waits import HANG_S

GPUS = [{"id": f"gpu{i}", "label": f"GPU {i}", "slots": 1,
         "env": {"CUDA_VISIBLE_DEVICES": f"GPU-{i}", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}} for i in range(2)]



def planned_job(tmp_path, name, train: dict, *, env=None, fail="cuda_oom", extra=()):
    """A job whose job.yaml is resolved and written the way planning writes it, running the fake
    trainer that fails with ``fail``'s log on attempts 1 and 2 and echoes what it saw."""
    env = env or {}
    plan = Plan.model_validate({"suites": ["t"], "pairs": ["1:tiny-sst2"], "env": env})
    job_dir = tmp_path / "out" / name
    config, provenance, _ = resolve_config({"train": train}, Path("t.yaml"), plan, env, plan.pairs[0], job_dir, name)
    materialize(JobSpec(name, "t", 1, "t.yaml", name, 1, "tiny-sst2", job_dir, config, provenance, env))
    echo = ("--echo", "PYTORCH_CUDA_ALLOC_CONF", "HP_BATCH_SIZE")
    return fake_job(tmp_path, name, sleep=0.1, env=env,
                    extra=(*extra, "--fail-log", fail, "--fail-before-attempt", "3", *echo))


def start(tmp_path, jobs, devices=(CPU,), plan="plan: test"):
    state = tmp_path / "state"
    store = open_store(state)
    run_id = store.create_run(plan, str(tmp_path / "out"), list(devices), 0)
    store.add_jobs(run_id, jobs)
    ensure_engine(state)
    return store, run_id, state


def wait_attempt(store, job_id, n, timeout=HANG_S):
    """The job once its attempt ``n`` has ended."""
    deadline = time.time() + timeout
    while True:
        job = store.job(job_id)
        if job.attempts >= n and job.state in JOB_FINAL:
            return job
        assert time.time() < deadline, f"attempt {n} of job {job_id} did not end (state {job.state})"
        time.sleep(0.1)


def offered(job) -> dict:
    return {r.key: r.patch for r in (job.diagnosis.remedies if job.diagnosis else ())}


def requeue(state, job_id, key):
    assert control_main(["requeue", str(job_id), "--remedy", key, "--state-dir", str(state), "--no-wait"]) == 0


def echoes(job) -> dict[int, dict]:
    lines = (Path(job.job_dir) / "events.jsonl").read_text().splitlines()
    return {e["attempt"]: e for e in map(json.loads, lines) if e.get("event") == "echo"}


def fail_remedy_fail(tmp_path, job, key, devices=(CPU,)):
    """Attempt 1 fails, ``key`` is offered and requeued; returns (job after attempt 2, the offer)."""
    store, run_id, state = start(tmp_path, [job], devices)
    job_id = store.jobs(run_id)[0].id
    first = wait_attempt(store, job_id, 1)
    assert first.state == "failed" and key in offered(first), offered(first)
    requeue(state, job_id, key)
    second = wait_attempt(store, job_id, 2)
    history = [t.detail for t in store.transitions(run_id, job_id=job_id)]
    assert any(d.startswith(f"requeued with remedy {key}") for d in history), history
    return store, run_id, second, offered(first)[key]


@pytest.mark.slow
@pytest.mark.parametrize("env", [{}, {"HP_BATCH_SIZE": "8"}], ids=["plain", "HP_BATCH_SIZE"])
def test_smaller_micro_batch_halves_the_micro_batch_and_keeps_the_effective_batch(tmp_path, env):
    job = planned_job(tmp_path, "oom", {"batch_size": 8, "grad_accum": 1}, env=env)
    _, _, second, patch = fail_remedy_fail(tmp_path, job, "smaller_micro_batch")
    assert patch == {"train.batch_size": 4, "train.grad_accum": 2}
    seen = echoes(second)[2]["train"]
    assert (seen["batch_size"], seen["grad_accum"]) == (4, 2)  # effective batch 8 as before
    assert offered(second).get("smaller_micro_batch") in (None, {"train.batch_size": 2, "train.grad_accum": 4})


@pytest.mark.slow
def test_expandable_segments_reaches_the_env_and_is_not_offered_again(tmp_path):
    job = planned_job(tmp_path, "frag", {"batch_size": 8}, fail="cuda_oom_fragmented")
    _, _, second, patch = fail_remedy_fail(tmp_path, job, "expandable_segments")
    assert echoes(second)[1]["env"]["PYTORCH_CUDA_ALLOC_CONF"] is None
    assert echoes(second)[2]["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert second.diagnosis.cls == "cuda_oom" and "expandable_segments" not in offered(second)


@pytest.mark.slow
def test_gradient_checkpointing_reaches_the_config_and_is_not_offered_again(tmp_path):
    job = planned_job(tmp_path, "gc", {"batch_size": 8})
    _, _, second, _ = fail_remedy_fail(tmp_path, job, "gradient_checkpointing")
    assert echoes(second)[1]["train"]["gradient_checkpointing"] is False
    assert echoes(second)[2]["train"]["gradient_checkpointing"] is True
    assert "gradient_checkpointing" not in offered(second)


@pytest.mark.slow
def test_fewer_workers_halves_the_dataloader_workers(tmp_path):
    job = planned_job(tmp_path, "workers", {"batch_size": 8, "num_workers": 4}, fail="dataloader_killed")
    _, _, second, patch = fail_remedy_fail(tmp_path, job, "fewer_workers")
    assert patch == {"train.num_workers": 2} and echoes(second)[2]["train"]["num_workers"] == 2
    assert second.diagnosis.cls == "host_oom"
    assert offered(second)["fewer_workers"] == {"train.num_workers": 1}  # from the live config, not 4 -> 2 again


@pytest.mark.slow
def test_fewer_slots_lowers_the_devices_slots(tmp_path):
    job = planned_job(tmp_path, "crowded", {"batch_size": 8}, fail="cuda_oom_contended")
    store, run_id, second, _ = fail_remedy_fail(tmp_path, job, "fewer_slots")
    assert store.run(run_id).devices[0].slots == 1  # CPU had 2
    assert "fewer_slots" not in offered(second)  # one slot is the least


@pytest.mark.slow
def test_avoid_device_moves_the_job_to_another_gpu(tmp_path):
    job = planned_job(tmp_path, "ecc", {"batch_size": 8}, fail="ecc")
    store, _, second, _ = fail_remedy_fail(tmp_path, job, "avoid_device", devices=GPUS)
    seen = echoes(second)
    assert (seen[1]["device"], seen[2]["device"]) == ("GPU-0", "GPU-1")  # gpu0 comes first in plan order
    assert second.avoid_devices == ("gpu0",) and second.device == "gpu1"
    assert second.diagnosis.cls == "device_fault" and "avoid_device" not in offered(second)


@pytest.mark.slow
def test_resume_restarts_from_the_checkpoint(tmp_path):
    job = planned_job(tmp_path, "slow", {"batch_size": 8}, fail="time_limit", extra=("--checkpoint",))
    _, _, second, _ = fail_remedy_fail(tmp_path, job, "resume")
    assert (echoes(second)[1]["resumed"], echoes(second)[2]["resumed"]) == (False, True)
    assert second.argv[-1] == "--resume" and second.diagnosis.cls == "timeout"
    assert "resume" not in offered(second)


@pytest.mark.slow
def test_a_remedy_that_cannot_act_is_rejected_and_changes_nothing(tmp_path):
    job = planned_job(tmp_path, "lonely", {"batch_size": 8}, fail="ecc")
    store, run_id, state = start(tmp_path, [job], devices=[GPUS[0]])
    job_id = store.jobs(run_id)[0].id
    assert "avoid_device" not in offered(wait_attempt(store, job_id, 1))  # no other GPU: not offered
    store.add_command(run_id, RequeueJob(job_id, remedy="avoid_device"))
    ensure_engine(state)
    deadline = time.time() + HANG_S
    while not any(t.new_state == "command:requeue" for t in store.transitions(run_id, job_id=job_id)):
        assert time.time() < deadline
        time.sleep(0.1)
    answer = [t.detail for t in store.transitions(run_id, job_id=job_id) if t.new_state == "command:requeue"]
    assert answer[0].startswith("rejected remedy 'avoid_device' is not offered")
    assert store.job(job_id).avoid_devices == () and store.job(job_id).attempts == 1


@pytest.mark.slow
def test_slurm_time_and_mem_remedies_change_the_next_submission(slurm_cluster, tmp_path):
    """On the local one-node cluster: each remedy's doubled limit is in the resubmitted job."""
    from lat_core.config.slurm_options import validate_options
    from lat_core.engine.backends.slurm_states import parse_sacct, slurm_diagnosis
    from lat_core.engine.loop import Engine
    from tests.integration.test_slurm import FIXTURES, drain, scontrol_job

    cpu = {"id": "cpu", "label": "cpu", "slots": 1, "env": {"CUDA_VISIBLE_DEVICES": ""}}
    store = open_store(tmp_path / "state")
    run_id = store.create_run("backend: slurm\nslurm: {time: '5', mem: 100M}\n", str(tmp_path / "out"), [cpu], 0)
    [job_id] = store.add_jobs(run_id, [fake_job(tmp_path, "limited", sleep=0.1, exit_code=3)])
    engine = Engine(store)
    drain(engine)
    options = validate_options({"time": "5", "mem": "100M"})
    for fixture, key, expected in (("sacct_timeout.txt", "slurm_time", "TimeLimit=00:10:00"),
                                   ("sacct_out_of_memory.txt", "slurm_mem", "MinMemoryNode=200M")):
        text = (FIXTURES / fixture).read_text()
        diagnosis = slurm_diagnosis(parse_sacct(text, text.split("|")[0]), options)  # what Slurm's verdict offers
        store.set_job_state(job_id, "failed", "triaged", diagnosis=diagnosis)
        store.add_command(run_id, RequeueJob(job_id, remedy=key))
        drain(engine)
        assert expected in scontrol_job(store.attempts(job_id)[-1].pid)
    assert store.job(job_id).backend_options == {"time": "10", "mem": "200M"}
    assert "TimeLimit=00:05:00" in scontrol_job(store.attempts(job_id)[0].pid)  # the plan's, for the first attempt

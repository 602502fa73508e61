"""The Slurm backend: option checks and state mapping (no cluster), then real jobs on a one-node
cluster that ``scripts/slurm_local.sh`` brings up on localhost (root + apt; skipped otherwise)."""

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lat_core.contract.commands import CancelJob
from tests.helpers.waits import HANG_S
from lat_core.engine.backends import get_backend
from lat_core.engine.backends.slurm import SlurmBackend, SlurmError, find_submitted, job_name_for
from lat_core.config.slurm_options import double_mem, option_problems, time_minutes, validate_options
from lat_core.engine.backends.slurm_states import (elapsed_seconds, parse_sacct, parse_scontrol_job, slurm_diagnosis,
                                                   slurm_failure)
from lat_core.engine.loop import Engine
from lat_core.errors import PlanError
from lat_core.contract.jobdir import AttemptFiles, JobDir
from lat_core.contract.journal import Store
from tests.conftest import ROOT, fake_job

FIXTURES = ROOT / "tests" / "fixtures" / "slurm"
GPU0 = {"id": "gpu0", "label": "GPU 0", "slots": 2,
        "env": {"CUDA_VISIBLE_DEVICES": "GPU-0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}}


# ---------------------------------------------------------------- no cluster needed
@pytest.mark.parametrize("fixture, cls", [
    ("sacct_timeout.txt", "timeout"), ("sacct_out_of_memory.txt", "host_oom"),
    ("sacct_cancelled.txt", "cancelled"), ("sacct_node_fail.txt", "node_fail"),
    ("sacct_preempted.txt", "preempted"), ("sacct_completed.txt", "ok"), ("sacct_failed.txt", "exit_code"),
    ("sacct_array_timeout.txt", "timeout"),
])
def test_sacct_states_map_to_triage_classes(fixture, cls):
    text = (FIXTURES / fixture).read_text()
    job_id = text.split("|")[0]
    final = parse_sacct(text, job_id)
    assert final is not None and slurm_failure(final["state"])[0] == cls
    diagnosis = slurm_diagnosis(final)
    if cls in ("ok", "exit_code"):
        assert diagnosis is None  # the runner's exit code and the log explain those
    else:
        assert diagnosis.cls == cls and job_id in diagnosis.diagnosis


def test_sacct_fields_are_parsed():
    final = parse_sacct((FIXTURES / "sacct_node_fail.txt").read_text(), 45)
    assert final == {"job_id": 45, "state": "NODE_FAIL", "state_raw": "NODE_FAIL", "exit_code": 0, "signal": 0,
                     "elapsed": "1-02:03:04", "elapsed_s": 93784}
    assert parse_sacct((FIXTURES / "sacct_cancelled.txt").read_text(), 44)["state"] == "CANCELLED"
    assert parse_sacct((FIXTURES / "sacct_failed.txt").read_text(), 48)["exit_code"] == 3
    assert parse_sacct("", 1) is None
    assert parse_scontrol_job((FIXTURES / "scontrol_job_failed.txt").read_text(), 50)["exit_code"] == 7
    assert elapsed_seconds("01:02") == 62 and elapsed_seconds("") is None


def test_slurm_failure_normalizes_state_spellings():
    assert slurm_failure("CANCELLED by 1000") == slurm_failure("cancelled+") == slurm_failure("CANCELLED")
    assert slurm_failure("OUT_OF_MEMORY")[0] == "host_oom"
    assert slurm_failure("DEADLINE")[0] == "timeout" and slurm_failure("BOOT_FAIL")[0] == "node_fail"
    assert slurm_failure("WEIRD")[0] == "exit_code"


def test_timeout_diagnosis_suggests_more_time_and_resume():
    final = parse_sacct((FIXTURES / "sacct_timeout.txt").read_text(), 42)
    diagnosis = slurm_diagnosis(final, validate_options({"time": "00:30:00"}))
    keys = [r.key for r in diagnosis.remedies]
    assert keys == ["slurm_time", "resume"] and "00:30:00" in diagnosis.remedies[0].change
    assert diagnosis.remedies[0].patch == {"plan.slurm.time": "60"}  # doubled, a value sbatch takes


@pytest.mark.parametrize("text, minutes", [("90", 90), ("90:30", 91), ("1:30:00", 90), ("2-00:00:00", 2880),
                                           ("2-12", 3600), ("0-00:05", 5)])
def test_slurm_time_formats_in_minutes(text, minutes):
    assert validate_options({"time": text}).time == text and time_minutes(text) == minutes


def test_limits_without_a_plan_value():
    """No plan time: the minutes it ran stand for the partition's limit; no plan mem: nothing to double."""
    timeout = slurm_diagnosis(parse_sacct((FIXTURES / "sacct_timeout.txt").read_text(), 42))
    assert timeout.remedies[0].patch == {"plan.slurm.time": "2"}  # ran 00:01:03
    oom = slurm_diagnosis(parse_sacct((FIXTURES / "sacct_out_of_memory.txt").read_text(), 43))
    assert [r.key for r in oom.remedies] == []
    more = slurm_diagnosis(parse_sacct((FIXTURES / "sacct_out_of_memory.txt").read_text(), 43),
                           validate_options({"mem": "16g"}))
    assert more.remedies[0].patch == {"plan.slurm.mem": "32G"} and double_mem("4000M") == "8000M"


def test_options_are_validated_with_plan_field_names():
    with pytest.raises(PlanError) as err:
        validate_options({"time": "two hours", "mem": "lots", "cpus_per_task": 0, "gres": "tpu",
                          "extra_args": "--qos=x", "array": "yes", "partiton": "gpu"}, where="plan.yaml")
    text = str(err.value)
    for field in ("time", "mem", "cpus_per_task", "gres", "extra_args", "array", "partiton"):
        assert f"plan field 'slurm.{field}'" in text
    assert text.startswith("plan.yaml")
    assert option_problems({"mem": "0"}) == ["plan field 'slurm.mem': expected a size like 16G or 4000M, got '0'"]
    assert option_problems({"time": 30}) == [] and option_problems("gpu")[0].startswith("plan field 'slurm'")
    with pytest.raises(PlanError, match="slurm.gpus_per_job"):
        validate_options({"gres": "shard", "gpus_per_job": 2})
    ok = validate_options({"partition": "gpu", "time": "1-02:00:00", "mem": "16g", "cpus_per_task": 4,
                           "extra_args": ["--qos=high"]})
    assert ok.sbatch_args("gpu:1") == ["--partition=gpu", "--time=1-02:00:00", "--mem=16G",
                                       "--cpus-per-task=4", "--gres=gpu:1", "--signal=B:USR1@120", "--qos=high"]


def test_save_signal_and_max_jobs_options():
    """A time limit brings Slurm's warning (USR1, 120 s before) unless the plan says otherwise."""
    assert "--signal=B:USR1@300" in validate_options({"time": "60", "save_before_end_s": 300}).sbatch_args(None)
    assert not any(a.startswith("--signal") for a in validate_options({"time": "60", "save_before_end_s": 0})
                   .sbatch_args(None))
    assert not any(a.startswith("--signal") for a in validate_options({}).sbatch_args(None))  # no limit known
    assert "--signal=B:USR1@30" in validate_options({"time": "1"}).sbatch_args(None)  # half a short limit
    assert validate_options({}).max_jobs == 32 and validate_options({"max_jobs": 4}).max_jobs == 4
    assert option_problems({"max_jobs": 0, "save_before_end_s": -1}) == [
        "plan field 'slurm.max_jobs': expected a whole number >= 1, got 0",
        "plan field 'slurm.save_before_end_s': expected seconds >= 0 (0: no warning before the time limit), got -1"]


def test_gres_request_follows_the_jobs_world_size():
    backend = SlurmBackend(gres="gpu")
    assert [backend.gres_request({}, world) for world in (1, 2, 4)] == ["gpu:1", "gpu:2", "gpu:4"]
    assert SlurmBackend(gpus_per_job=2).gres_request({}, 1) == "gpu:2"  # one process that uses two GPUs
    assert SlurmBackend(gres="none").gres_request({}, 2) is None


def test_gres_request_follows_the_cluster_and_the_device():
    def sinfo(text):
        return lambda argv, env=None: subprocess.CompletedProcess(argv, 0, text, "")

    shards = (FIXTURES / "sinfo_gres_shards.txt").read_text()
    gpus = (FIXTURES / "sinfo_gres_gpus.txt").read_text()
    assert SlurmBackend(gres="auto", run=sinfo(shards)).gres_request({}) == "shard:1"
    assert SlurmBackend(gres="auto", run=sinfo(gpus)).gres_request({}) == "gpu:1"
    assert SlurmBackend(gpus_per_job=2, run=sinfo(shards)).gres_request({}) == "gpu:2"
    assert SlurmBackend(run=sinfo(gpus)).gres_request({"CUDA_VISIBLE_DEVICES": ""}) is None  # a CPU slot
    with pytest.raises(SlurmError, match="slurm.gres.*no gres/shard"):
        SlurmBackend(gres="shard", run=sinfo(gpus)).gres_request({})


def test_job_names_are_stable_per_attempt(tmp_path):
    a1 = tmp_path / "out" / "gla r1 s1" / ".lat" / "attempt-1.exit.json"
    name = job_name_for(a1)
    assert name == job_name_for(a1) and name.startswith("lat-gla_r1_s1-a1-")
    assert job_name_for(a1.with_name("attempt-2.exit.json")) != name


def test_get_backend_builds_slurm_with_plan_options():
    backend = get_backend("slurm", partition="debug", time="5")
    assert backend.name == "slurm" and backend.options.partition == "debug"


# ---------------------------------------------------------------- a real one-node cluster
@pytest.fixture(scope="session")
def slurm_cluster():
    """Starts (or reuses) the local cluster: 2 fake GPUs with 2 shards each."""
    if os.environ.get("LAT_SLURM_TESTS") == "0":
        pytest.skip("LAT_SLURM_TESTS=0")
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("a local Slurm cluster needs root and apt-get (scripts/slurm_local.sh)")
    script = ROOT / "scripts" / "slurm_local.sh"
    was_running = subprocess.run(["bash", str(script), "status"], capture_output=True, text=True).stdout
    env = {**os.environ, "SLURM_FAKE_GPUS": "2", "SLURM_SHARDS_PER_GPU": "2"}
    started = time.time()
    out = subprocess.run(["bash", str(script), "start"], env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        pytest.skip(f"scripts/slurm_local.sh start failed: {(out.stdout + out.stderr).strip()[-600:]}")
    print(f"\nslurm_local.sh start took {time.time() - started:.1f}s")
    yield
    if "slurmctld: stopped" in was_running:
        subprocess.run(["bash", str(script), "stop"], capture_output=True)


def make_run(tmp_path, jobs, devices=(GPU0,)):
    store = Store(tmp_path / "state" / "journal.sqlite")
    run_id = store.create_run("plan: test", str(tmp_path / "out"), list(devices), 0.0)
    store.add_jobs(run_id, jobs)
    return store, run_id


def drain(engine, timeout=HANG_S):
    deadline = time.time() + timeout
    while engine.tick():
        assert time.time() < deadline, "engine did not drain in time"
        time.sleep(0.2)


def wait_dead(backend, job_id, timeout=HANG_S):
    deadline = time.time() + timeout
    while backend.is_alive(job_id, None):
        assert time.time() < deadline, f"Slurm job {job_id} still alive"
        time.sleep(0.2)


def scontrol_job(job_id) -> str:
    return subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, text=True).stdout


def sacct_names(names, timeout=HANG_S) -> list[str]:
    """Job names in Slurm's accounting; slurmdbd records a finished job a moment after it ends."""
    deadline = time.time() + timeout
    while True:
        out = subprocess.run(["sacct", "-X", "-n", "-P", "-S", "now-1hours", "--name", ",".join(names),
                              "-o", "JobName,State"], capture_output=True, text=True).stdout
        rows = [line.split("|") for line in out.split()]
        if (len(rows) >= len(names) and all(state == "COMPLETED" for _, state in rows)) or time.time() > deadline:
            return [name for name, _ in rows]
        time.sleep(0.3)


@pytest.fixture(scope="session")
def overtime(slurm_cluster, tmp_path_factory):
    """A run whose one job Slurm kills at its 1-minute time limit. Submitted by the first live test
    so that its minute overlaps the other tests; checked by the last one."""
    tmp_path = tmp_path_factory.mktemp("overtime")
    cpu = {"id": "cpu", "label": "cpu", "slots": 1, "env": {"CUDA_VISIBLE_DEVICES": ""}}
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "overtime", sleep=600)], devices=[cpu])  # no GPU held
    engine = Engine(store, backend=SlurmBackend(time="1", save_before_end_s=0))  # no warning: Slurm's kill
    job_id = store.jobs(run_id)[0].id
    while not store.attempts(job_id) or not store.attempts(job_id)[0].pid:
        engine.tick()
        time.sleep(0.1)
    return store, run_id, engine


@pytest.mark.slow
def test_backend_runs_the_runner_under_sbatch(slurm_cluster, overtime, tmp_path):
    job = fake_job(tmp_path, "direct", extra=("--print-env", "CUDA_VISIBLE_DEVICES"))
    job_dir = Path(job["job_dir"])
    exit_path = job_dir / ".lat" / "attempt-1.exit.json"
    backend = SlurmBackend(time="5", gres="shard")
    launched = backend.launch(job["argv"], {**GPU0["env"], "HP_LR": "1e-4", "WANDB_API_KEY": "s3cr3t"},
                              job_dir, exit_path, ("HP_LR", "WANDB_API_KEY"))
    assert launched.pid > 0 and backend.is_alive(launched.pid, launched.pid_start)
    assert backend.launch(job["argv"], {}, job_dir, exit_path).pid == launched.pid  # adopted, not resubmitted
    wait_dead(backend, launched.pid)
    assert AttemptFiles(exit_path).read_exit().returncode == 0
    log = (job_dir / "train.log").read_text()
    assert "[lat]" in log and "fake trainer direct done" in log and "HP_LR=1e-4" in log
    assert "s3cr3t" not in log and "s3cr3t" not in exit_path.with_name("attempt-1.sbatch").read_text()
    assert (job_dir / "env.txt").read_text().strip() in ("0", "1")  # Slurm's pin, not the engine's UUID
    assert "gres/shard=1" in scontrol_job(launched.pid)
    assert backend.final_state(launched.pid, wait_s=10)["state"] == "COMPLETED"
    assert sacct_names([job_name_for(exit_path)]) == [job_name_for(exit_path)]


@pytest.mark.slow
def test_gres_requests_reach_slurm(slurm_cluster, tmp_path):
    wanted = {"gpu2": (SlurmBackend(gpus_per_job=2), GPU0["env"], "gres/gpu=2"),
              "cpu": (SlurmBackend(), {"CUDA_VISIBLE_DEVICES": ""}, None)}
    for name, (backend, env, tres) in wanted.items():
        job = fake_job(tmp_path, name, sleep=0.1)
        exit_path = Path(job["job_dir"]) / ".lat" / "attempt-1.exit.json"
        launched = backend.launch(job["argv"], env, Path(job["job_dir"]), exit_path)
        shown = scontrol_job(launched.pid)
        if tres:
            assert tres in shown
        else:
            assert "gres/" not in shown
        wait_dead(backend, launched.pid)
        assert AttemptFiles(exit_path).read_exit().returncode == 0


@pytest.mark.slow
def test_engine_records_success_and_failure(slurm_cluster, tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "ok"), fake_job(tmp_path, "bad", exit_code=3)])
    drain(Engine(store, backend=SlurmBackend(time="5")))
    jobs = {j.key: j for j in store.jobs(run_id)}
    assert jobs["ok"].state == "succeeded" and jobs["ok"].returncode == 0
    assert jobs["bad"].state == "failed" and jobs["bad"].returncode == 3
    assert "injected failure of bad" in jobs["bad"].error
    assert (Path(jobs["ok"].job_dir) / "train.log").read_text().count("fake trainer ok done") == 1
    assert store.run(run_id).state == "finished"


@pytest.mark.slow
def test_engine_cancel_goes_through_scancel(slurm_cluster, tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "slow", sleep=60)])
    engine = Engine(store, backend=SlurmBackend(time="5"))
    deadline = time.time() + HANG_S
    while not (tmp_path / "record" / "slow.log").exists():
        assert time.time() < deadline
        engine.tick()
        time.sleep(0.2)
    job = store.jobs(run_id)[0]
    slurm_id = store.attempts(job.id)[0].pid
    store.add_command(run_id, CancelJob(job.id))
    drain(engine, timeout=HANG_S)
    job = store.job(job.id)
    assert job.state == "cancelled" and job.error == "cancelled by user"
    assert AttemptFiles(Path(store.attempts(job.id)[0].exit_path)).read_exit().signal == signal.SIGTERM
    deadline = time.time() + HANG_S  # the runner has exited; Slurm may still show the job COMPLETING a while
    while SlurmBackend().is_alive(slurm_id, None):
        assert time.time() < deadline, "Slurm still runs the cancelled job"
        time.sleep(0.2)


@pytest.mark.slow
def test_pending_job_cancelled_before_its_runner_starts(slurm_cluster, tmp_path):
    job = fake_job(tmp_path, "later")
    exit_path = Path(job["job_dir"]) / ".lat" / "attempt-1.exit.json"
    backend = SlurmBackend(extra_args=["--begin=now+3600"])
    launched = backend.launch(job["argv"], {}, Path(job["job_dir"]), exit_path)
    assert backend.queue_state(launched.pid) == "PENDING" and backend.is_alive(launched.pid, None)
    assert backend.signal(launched.pid, signal.SIGTERM)
    wait_dead(backend, launched.pid)
    assert AttemptFiles(exit_path).read_exit() is None  # the runner never ran: Slurm's state tells why
    final = backend.final_state(launched.pid, wait_s=10)
    assert final["state"] == "CANCELLED" and slurm_failure(final["state"])[0] == "cancelled"
    assert backend.diagnose(launched.pid).cls == "cancelled"


@pytest.mark.slow
def test_engine_restart_submits_nothing_twice(slurm_cluster, tmp_path):
    jobs = [fake_job(tmp_path, f"r{i}", sleep=3) for i in range(3)]
    store, run_id = make_run(tmp_path, jobs)
    first = Engine(store, backend=SlurmBackend(time="5"))
    deadline = time.time() + HANG_S
    while not all(a.pid for j in store.jobs(run_id) for a in store.attempts(j.id)) or \
            sum(j.state == "running" for j in store.jobs(run_id)) < 2:
        assert time.time() < deadline
        first.tick()
        time.sleep(0.1)
    del first  # the engine dies; its jobs keep running in Slurm
    drain(Engine(store, backend=SlurmBackend(time="5")))
    assert [j.state for j in store.jobs(run_id)] == ["succeeded"] * 3
    names = [job_name_for(a.exit_path) for j in store.jobs(run_id) for a in store.attempts(j.id)]
    assert len(names) == 3 and sorted(sacct_names(names)) == sorted(names)  # one Slurm job each
    for i in range(3):
        lines = (tmp_path / "record" / f"r{i}.log").read_text().splitlines()
        assert sum(line.startswith("start") for line in lines) == 1


@pytest.mark.slow
def test_recover_finds_a_job_submitted_before_a_crash(slurm_cluster, tmp_path):
    job = fake_job(tmp_path, "crash", sleep=0.1)
    exit_path = Path(job["job_dir"]) / ".lat" / "attempt-1.exit.json"
    backend = SlurmBackend()
    before = time.time()
    assert backend.recover(exit_path, before) is None
    launched = backend.launch(job["argv"], {}, Path(job["job_dir"]), exit_path)
    wait_dead(backend, launched.pid)
    assert find_submitted(job_name_for(exit_path)) is None  # no longer queued
    assert backend.recover(exit_path, before).pid == launched.pid  # but found among finished ones
    assert backend.recover(exit_path, time.time() + 600) is None  # an older job of the same name is not ours


def test_a_slurm_time_limit_kill_is_triaged_as_timeout_from_its_log():
    """What a real time-limit kill left behind (captured from slurm_local.sh's cluster): the runner
    got SIGTERM and wrote its exit record; slurmstepd's line in train.log names the cause."""
    from lat_core.triage import classify

    job_dir = FIXTURES / "timeout_job"
    record = JobDir(job_dir).attempt(1).read_exit()
    assert record.signal == signal.SIGTERM
    assert classify(job_dir, record.returncode).cls == "timeout"


@pytest.mark.slow
def test_engine_job_killed_by_the_time_limit(overtime):
    """Slurm's granularity is a minute: the job was submitted early (fixture ``overtime``)."""
    store, run_id, engine = overtime
    drain(engine)
    job = store.jobs(run_id)[0]
    assert job.state == "failed" and job.diagnosis.cls == "timeout"
    assert "killed by SIGTERM" in job.error
    final = SlurmBackend().final_state(store.attempts(job.id)[0].pid, wait_s=10)
    assert final["state"] == "TIMEOUT" and slurm_failure(final["state"])[0] == "timeout"




@pytest.mark.slow
def test_engine_adopts_a_job_submitted_just_before_it_crashed(slurm_cluster, tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "lost", sleep=2)])
    job = store.jobs(run_id)[0]
    exit_path = Path(job.job_dir) / ".lat" / "attempt-1.exit.json"
    store.start_attempt(job.id, "gpu0", str(exit_path))
    store.set_job_state(job.id, "running", "attempt 1 on gpu0", device="gpu0", started=time.time())
    SlurmBackend().launch(job.argv, GPU0["env"], Path(job.job_dir), exit_path)  # then the engine died
    drain(Engine(store, backend=SlurmBackend()))
    assert store.job(job.id).state == "succeeded" and len(store.attempts(job.id)) == 1
    assert sacct_names([job_name_for(exit_path)]) == [job_name_for(exit_path)]


@pytest.mark.slow
def test_engine_takes_slurms_word_when_the_runner_never_ran(slurm_cluster, tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "never")])
    engine = Engine(store, backend=SlurmBackend(extra_args=["--begin=now+3600"]))
    while not store.open_attempts(run_id) or not store.open_attempts(run_id)[0].pid:
        engine.tick()
        time.sleep(0.1)
    subprocess.run(["scancel", str(store.open_attempts(run_id)[0].pid)], check=True)  # an admin, not us
    drain(engine)
    job = store.jobs(run_id)[0]
    assert job.state == "failed" and job.returncode is None
    assert job.diagnosis.cls == "cancelled" and "Slurm" in job.diagnosis.title


# ---------------------------------------------------------------- job arrays (slurm.array: true)
GPU3 = {**GPU0, "slots": 3}


def test_array_env_split_keeps_values_out_of_the_script():
    from lat_core.engine.backends.slurm_array import array_script, split_envs

    shared, tasks = split_envs([{"A": "1", "KEY": "s3cr3t", "B": "x"}, {"A": "1", "KEY": "s3cr3t", "C": "only1"}])
    assert shared == {"A": "1", "KEY": "s3cr3t"}
    assert tasks[0].exported == {"LAT_ARRAY_0__B": "x"} and tasks[0].unset == ("C",)
    assert tasks[1].exported == {"LAT_ARRAY_1__C": "only1"} and tasks[1].unset == ("B",)
    script = array_script([["python", "t.py"], ["python", "u.py"]], [Path("/j/a"), Path("/j/b c")], tasks)
    assert "s3cr3t" not in script and "only1" not in script and "cd '/j/b c'" in script
    assert split_envs([{"A": "1"}, {"A-B": "2"}]) is None  # no shell name: submitted one by one
    assert validate_options({"array": True}).array and option_problems({"array": "yes"})


def array_tasks(array_id, count, timeout=HANG_S) -> list[str]:
    """``<array>_<task>`` ids of the array in Slurm's accounting (recorded a moment after the end)."""
    deadline = time.time() + timeout
    while True:
        out = subprocess.run(["sacct", "-X", "-n", "-P", "-j", str(array_id), "-o", "JobID"],
                             capture_output=True, text=True).stdout.split()
        if len(out) >= count or time.time() > deadline:
            return sorted(out)
        time.sleep(0.3)


def array_engine(store, **options):
    return Engine(store, backend=SlurmBackend(time="5", gres="shard", array=True, **options),
                  secrets={"WANDB_API_KEY": "s3cr3t"})


@pytest.mark.slow
def test_array_runs_each_job_in_its_own_task(slurm_cluster, tmp_path):
    jobs = [fake_job(tmp_path, f"a{i}", sleep=0.5, env={"HP_X": f"x{i}", "WANDB_API_KEY": "***"},
                     extra=("--print-env", "HP_X")) for i in range(3)]
    store, run_id = make_run(tmp_path, jobs, devices=[GPU3])
    drain(array_engine(store))
    pids = [store.attempts(j.id)[0].pid for j in store.jobs(run_id)]
    array_id = pids[0].split("_")[0]
    assert pids == [f"{array_id}_{i}" for i in range(3)]  # one sbatch, one task per job
    assert array_tasks(array_id, 3) == pids
    for i, job in enumerate(store.jobs(run_id)):
        job_dir = Path(job.job_dir)
        assert job.state == "succeeded" and JobDir(job_dir).attempt(1).read_exit().returncode == 0
        assert (job_dir / "env.txt").read_text().strip() == f"x{i}"  # its own env, in its own directory
        log = (job_dir / "train.log").read_text()
        assert log.count(f"fake trainer a{i} done") == 1 and "fake trainer a" not in log.replace(f"a{i}", "")
    scripts = list((Path(jobs[0]["job_dir"]) / ".lat").glob("*.tasks/array.sbatch"))
    assert len(scripts) == 1 and "s3cr3t" not in scripts[0].read_text()
    assert SlurmBackend().final_state(pids[1], wait_s=10)["state"] == "COMPLETED"


@pytest.mark.slow
def test_array_task_failure_and_cancel_stay_in_their_task(slurm_cluster, tmp_path):
    release = tmp_path / "release-ok"  # "ok" runs until the cancel of its sibling was applied, at any load
    jobs = [fake_job(tmp_path, "ok", extra=("--wait-for", str(release))), fake_job(tmp_path, "bad", exit_code=3),
            fake_job(tmp_path, "slow", sleep=60)]
    store, run_id = make_run(tmp_path, jobs, devices=[GPU3])
    engine = array_engine(store)
    deadline = time.time() + HANG_S
    while not (tmp_path / "record" / "slow.log").exists():
        assert time.time() < deadline
        engine.tick()
        time.sleep(0.2)
    by_key = {j.key: j for j in store.jobs(run_id)}
    store.add_command(run_id, CancelJob(by_key["slow"].id))
    engine.tick()
    assert store.job(by_key["ok"].id).state == "running"  # its sibling task runs on
    release.touch()
    drain(engine, timeout=HANG_S)
    by_key = {j.key: store.job(j.id) for j in by_key.values()}
    assert by_key["ok"].state == "succeeded" and by_key["slow"].state == "cancelled"
    assert by_key["bad"].state == "failed" and by_key["bad"].returncode == 3
    assert "injected failure of bad" in by_key["bad"].error
    pids = {k: store.attempts(j.id)[0].pid for k, j in by_key.items()}
    assert len({p.split("_")[0] for p in pids.values()}) == 1
    backend = SlurmBackend()
    assert backend.final_state(pids["ok"], wait_s=10)["state"] == "COMPLETED"
    # scancel --signal=TERM only signals the task: the runner records the trainer's SIGTERM and exits 0,
    # so Slurm may call the task COMPLETED; the engine's own record is what says "cancelled"
    slow_exit = AttemptFiles(Path(store.attempts(by_key["slow"].id)[0].exit_path)).read_exit()
    assert slow_exit is None or slow_exit.returncode == -15
    assert backend.final_state(pids["slow"], wait_s=10)["state"] in ("CANCELLED", "COMPLETED")
    assert backend.final_state(pids["bad"], wait_s=10)["job_id"] == pids["bad"]  # the runner recorded the 3
    assert AttemptFiles(Path(store.attempts(by_key["bad"].id)[0].exit_path)).read_exit().returncode == 3


@pytest.mark.slow
def test_array_engine_restart_submits_nothing_twice(slurm_cluster, tmp_path):
    jobs = [fake_job(tmp_path, f"r{i}", sleep=3) for i in range(3)]
    store, run_id = make_run(tmp_path, jobs, devices=[GPU3])
    first = array_engine(store)
    first.tick()  # one admission pass: the array is submitted
    assert all(store.attempts(j.id)[0].pid for j in store.jobs(run_id))
    del first
    # an engine that died between the attempt rows and the task ids: recovery finds the tasks
    job = store.jobs(run_id)[1]
    pid = store.attempts(job.id)[0].pid
    assert SlurmBackend().recover(Path(store.attempts(job.id)[0].exit_path), time.time() - 60).pid == pid
    drain(array_engine(store))
    assert [j.state for j in store.jobs(run_id)] == ["succeeded"] * 3
    assert array_tasks(pid.split("_")[0], 3) == [f"{pid.split('_')[0]}_{i}" for i in range(3)]
    for i in range(3):
        lines = (tmp_path / "record" / f"r{i}.log").read_text().splitlines()
        assert sum(line.startswith("start") for line in lines) == 1

"""Memory-aware admission against a fake NVML: refuse what would not fit, admit when memory frees."""

import time

import pytest

from lat_core.contract.commands import CancelRun
from lat_core.engine.admission import GiB, AdmissionPolicy
from lat_core.engine.loop import Engine
from lat_core.monitor.fake_nvml import FakeNvml
from lat_core.monitor.gpu import GpuProbe
from lat_core.titles import job_title
from tests.conftest import fake_job
from tests.integration.test_engine import make_run
from tests.helpers.waits import HANG_S


def gpu_device(i, slots=2):
    return {"id": f"gpu{i}", "index": i, "uuid": f"GPU-fake-{i:04d}", "label": f"GPU {i}", "slots": slots,
            "env": {"CUDA_VISIBLE_DEVICES": f"GPU-fake-{i:04d}"}}


def test_job_waits_for_memory_and_starts_when_it_frees(tmp_path):
    fake = FakeNvml.with_gpus(1, total=24 * GiB, used=20 * GiB)  # another tenant holds 20 GiB
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "big", sleep=0.3)], devices=[gpu_device(0)])
    job = store.jobs(run_id)[0]
    store.record_config_peak(job.profile_key, 10 * GiB, 2**30)
    engine = Engine(store, gpu_probe=GpuProbe(fake), policy=AdmissionPolicy(gpu_margin=GiB))
    for _ in range(5):
        engine.tick()
    job = store.jobs(run_id)[0]
    assert job.state == "queued"
    assert job.waiting == "needs 10.0G GPU memory, 3.0G free on gpu0"
    fake.gpus[0].used = 4 * GiB  # the other tenant left
    deadline = time.time() + HANG_S
    while engine.tick():
        assert time.time() < deadline
        time.sleep(0.05)
    assert store.jobs(run_id)[0].state == "succeeded"


def test_a_job_that_fits_elsewhere_takes_the_other_gpu(tmp_path):
    fake = FakeNvml.with_gpus(2, total=24 * GiB)
    fake.gpus[0].used = 20 * GiB
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "a", sleep=0.3)], devices=[gpu_device(0), gpu_device(1)])
    store.record_config_peak(store.jobs(run_id)[0].profile_key, 8 * GiB, 0)
    engine = Engine(store, gpu_probe=GpuProbe(fake))
    engine.tick()
    assert store.jobs(run_id)[0].device == "gpu1"


def test_unknown_configs_are_staggered_on_one_gpu(tmp_path):
    fake = FakeNvml.with_gpus(1, total=80 * GiB)
    jobs = [fake_job(tmp_path, f"u{i}", sleep=0.5) for i in range(2)]
    store, run_id = make_run(tmp_path, jobs, devices=[gpu_device(0, slots=2)])
    engine = Engine(store, gpu_probe=GpuProbe(fake), policy=AdmissionPolicy(settle_s=60))
    engine.tick()
    states = [j.state for j in store.jobs(run_id)]
    assert states == ["running", "queued"]
    first = store.jobs(run_id)[0]
    assert store.jobs(run_id)[1].waiting.startswith(f"waiting for job {first.id} (u0 1:tiny-sst2) to settle on gpu0")


def test_measured_peaks_are_remembered_per_config_and_dataset(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "m", sleep=1.0)])
    engine = Engine(store, sample_every_s=0.1)
    while engine.tick():
        time.sleep(0.05)
    job = store.jobs(run_id)[0]
    gpu, rss = store.config_peak(job.profile_key)
    assert gpu == 0 and rss == job.peak_rss > 0


def test_vanishing_gpu_falls_back_to_slots(tmp_path):
    fake = FakeNvml.with_gpus(1, total=24 * GiB)
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "v", sleep=0.2)], devices=[gpu_device(0)])
    store.record_config_peak(store.jobs(run_id)[0].profile_key, 10 * GiB, 0)
    fake.gpus.clear()  # fell off the bus: NVML now reports no device at that index
    engine = Engine(store, gpu_probe=GpuProbe(fake))
    engine.tick()
    assert store.jobs(run_id)[0].state == "running"


def test_plan_min_free_threshold_holds_jobs_on_a_busy_gpu(tmp_path):
    fake = FakeNvml.with_gpus(1, total=80 * GiB, used=75 * GiB)
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "x", sleep=0.2)], devices=[gpu_device(0)])
    store._db.execute("UPDATE runs SET plan_yaml=? WHERE id=?", ("min_free_gb: 10\n", run_id))
    engine = Engine(store, gpu_probe=GpuProbe(fake))
    engine.tick()
    job = store.jobs(run_id)[0]
    assert job.state == "queued" and job.waiting == "gpu0 has 5.0G free, the plan asks for at least 10.0G"
    fake.gpus[0].used = 10 * GiB
    engine.tick()
    assert store.jobs(run_id)[0].state == "running"
    store.add_command(run_id, CancelRun())
    while engine.tick():
        time.sleep(0.05)


def test_an_unknown_job_settles_at_its_first_logged_step_not_after_settle_s(tmp_path):
    fake = FakeNvml.with_gpus(1, total=80 * GiB)
    jobs = [fake_job(tmp_path, f"s{i}", sleep=2.0) for i in range(2)]
    jobs[1]["suite"] = "other"  # no sibling to borrow an estimate from
    store, run_id = make_run(tmp_path, jobs, devices=[gpu_device(0, slots=2)])
    engine = Engine(store, gpu_probe=GpuProbe(fake), policy=AdmissionPolicy(settle_s=600))
    engine.tick()
    first, second = store.jobs(run_id)
    assert (first.state, second.state) == ("running", "queued")
    store.set_progress(first.id, 1, 2.5)  # the first training step: activations and optimizer state exist
    engine.tick()
    assert store.jobs(run_id)[1].state == "running"
    store.add_command(run_id, CancelRun())
    while engine.tick():
        time.sleep(0.05)


def test_an_unmeasured_config_borrows_a_settled_siblings_footprint(tmp_path):
    fake = FakeNvml.with_gpus(1, total=80 * GiB, used=0)
    jobs = [fake_job(tmp_path, f"r{i}", sleep=2.0) for i in range(3)]  # one suite, one dataset: a sweep
    store, run_id = make_run(tmp_path, jobs, devices=[gpu_device(0, slots=3)])
    engine = Engine(store, gpu_probe=GpuProbe(fake), policy=AdmissionPolicy(settle_s=600, gpu_margin=GiB))
    engine.tick()
    first = store.jobs(run_id)[0]
    store.set_progress(first.id, 1, 2.5)
    store.record_usage({first.id: (GiB, 30 * GiB)})
    fake.gpus[0].used = 31 * GiB
    engine.tick()  # 80 - 31 - 1 = 48G free: one sibling (30G x 1.25 = 37.5G) fits, two do not
    states = [j.state for j in store.jobs(run_id)]
    assert states == ["running", "running", "queued"]
    assert store.jobs(run_id)[2].waiting.startswith("needs 37.5G GPU memory")
    store.add_command(run_id, CancelRun())
    while engine.tick():
        time.sleep(0.05)


def test_family_peak_reads_measured_configs_of_one_suite_and_dataset(tmp_path):
    from lat_core.contract.journal import Store

    store = Store(tmp_path / "j.sqlite")
    store.record_config_peak("sweep/r8|glue-tvt_sst2", 5 * GiB, GiB)
    store.record_config_peak("sweep/r16|glue-tvt_sst2", 6 * GiB, 2 * GiB)
    store.record_config_peak("sweep/r16|glue-tvt_cola", 9 * GiB, GiB)
    store.record_config_peak("sweep_x/r16|glue-tvt_sst2", 9 * GiB, GiB)
    assert store.family_peak("sweep", "glue-tvt_sst2") == (6 * GiB, 2 * GiB)
    assert store.family_peak("sweep", "glue-tvt_rte") is None


# ----------------------------------------------------------------------------- static memory prior

# Sentence pairs, whose rows may fill max_seq_len, as the benches' random or synthetic rows did (a
# single-sentence dataset's rows are sized at most 96 tokens: memory_prior.row_tokens)
LONG_ROWS = "glue-tvt_rte"
GLA_13B_BENCH = {"model": {"family": "gla", "name_or_path": "tiny-random", "dtype": "bfloat16",
                           "tiny": {"hidden_size": 2048, "num_hidden_layers": 24, "num_heads": 4, "vocab_size": 32000}},
                 "peft": {"method": "lora", "r": 8, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]},
                 "data": LONG_ROWS, "train": {"batch_size": 4, "max_seq_len": 256}}
TINY_SDLORA = {"model": {"family": "mamba", "name_or_path": "tiny-random", "dtype": "float32"},
               "peft": {"method": "sdlora", "target_modules": ["in_proj"]}, "data": "tiny-sst2"}  # no prior
# The mamba_lora suite's Mamba-130m shape (random weights, as the bench trains it): 16 rows, bf16.
MAMBA_130M = {"model": {"family": "mamba", "name_or_path": "tiny-random", "dtype": "bfloat16",
                        "tiny": {"hidden_size": 768, "num_hidden_layers": 24, "state_size": 16, "vocab_size": 50280}},
              "peft": {"method": "lora", "r": 8, "target_modules": ["in_proj", "x_proj"]},
              "data": LONG_ROWS, "train": {"batch_size": 16, "max_seq_len": 256}}


def configured_job(tmp_path, name, config: dict, **kw):
    """A fake-trainer job whose directory holds ``config`` as the engine's resolved job.yaml."""
    import yaml

    job = fake_job(tmp_path, name, **kw)
    with open(f"{job['job_dir']}/job.yaml", "w") as fh:
        yaml.safe_dump({**config, "output_dir": job["job_dir"]}, fh)
    return job


def prior_engine(store, fake, **policy):
    """An engine whose host always has RAM to spare, so only GPU memory decides (this machine's own
    RAM must not make the tests flaky: a GPU job's prior claims ~3G of host RAM)."""
    from lat_core.monitor.host import HostSnapshot

    engine = Engine(store, gpu_probe=GpuProbe(fake), policy=AdmissionPolicy(settle_s=600, **policy))
    engine._admission._host = lambda: HostSnapshot(512 * GiB, 0, 512 * GiB, 0, 0, 0.0, 16)
    return engine


def cancel_all(store, engine, run_id):
    store.add_command(run_id, CancelRun())
    while engine.tick():
        time.sleep(0.05)


def test_unmeasured_jobs_whose_priors_fit_start_together(tmp_path):
    fake = FakeNvml.with_gpus(1, total=141 * GiB)
    jobs = [configured_job(tmp_path, f"p{i}", GLA_13B_BENCH, sleep=2.0) for i in range(2)]
    store, run_id = make_run(tmp_path, jobs, devices=[gpu_device(0, slots=2)])
    engine = prior_engine(store, fake)
    engine.tick()
    assert [j.state for j in store.jobs(run_id)] == ["running", "running"]
    notes = [t.detail for t in store.transitions(run_id, job_id=store.jobs(run_id)[1].id) if t.new_state == "admission"]
    assert len(notes) == 1 and "estimated from the config" in notes[0], notes
    cancel_all(store, engine, run_id)


def test_unmeasured_job_waits_when_free_memory_is_below_its_prior(tmp_path):
    fake = FakeNvml.with_gpus(1, total=141 * GiB, used=137 * GiB)  # 4G free, 3G after the margin
    store, run_id = make_run(tmp_path, [configured_job(tmp_path, "w", GLA_13B_BENCH)], devices=[gpu_device(0)])
    engine = prior_engine(store, fake, gpu_margin=GiB)
    engine.tick()
    job = store.jobs(run_id)[0]
    assert job.state == "queued"
    assert job.waiting.startswith("needs ~") and job.waiting.endswith(
        "G GPU memory (estimated from the config; never measured), 3.0G free on gpu0"), job.waiting
    cancel_all(store, engine, run_id)


def test_a_second_prior_job_waits_for_what_the_first_still_claims(tmp_path):
    from lat_core.config.memory_prior import job_prior

    jobs = [configured_job(tmp_path, f"c{i}", GLA_13B_BENCH, sleep=2.0) for i in range(2)]
    prior = job_prior(jobs[0]["job_dir"], {}).gpu_bytes
    fake = FakeNvml.with_gpus(1, total=int(1.5 * prior) + GiB)  # room for one prior and the margin, not two
    store, run_id = make_run(tmp_path, jobs, devices=[gpu_device(0, slots=2)])
    engine = prior_engine(store, fake, gpu_margin=GiB)
    engine.tick()
    first, second = store.jobs(run_id)
    assert (first.state, second.state) == ("running", "queued")
    assert "estimated from the config" in second.waiting
    cancel_all(store, engine, run_id)


def test_a_measured_peak_overrides_the_prior(tmp_path):
    fake = FakeNvml.with_gpus(1, total=141 * GiB, used=137 * GiB)
    store, run_id = make_run(tmp_path, [configured_job(tmp_path, "m", GLA_13B_BENCH)], devices=[gpu_device(0)])
    engine = prior_engine(store, fake, gpu_margin=GiB)
    engine.tick()
    assert store.jobs(run_id)[0].state == "queued"  # the prior (~6G) does not fit in 3G
    store.record_config_peak(store.jobs(run_id)[0].profile_key, 2 * GiB, GiB)
    engine.tick()
    job = store.jobs(run_id)[0]
    assert job.state == "running"
    assert not [t for t in store.transitions(run_id, job_id=job.id) if t.new_state == "admission"]
    cancel_all(store, engine, run_id)


def test_configs_without_a_prior_are_still_staggered(tmp_path):
    fake = FakeNvml.with_gpus(1, total=141 * GiB)
    jobs = [configured_job(tmp_path, f"mb{i}", TINY_SDLORA, sleep=2.0) for i in range(2)]
    store, run_id = make_run(tmp_path, jobs, devices=[gpu_device(0, slots=2)])
    engine = prior_engine(store, fake)
    engine.tick()
    first, second = store.jobs(run_id)
    assert (first.state, second.state) == ("running", "queued")
    assert second.waiting == f"waiting for job {first.id} ({job_title(first)}) to settle on gpu0"
    cancel_all(store, engine, run_id)


def test_a_settled_siblings_footprint_overrides_the_prior(tmp_path):
    fake = FakeNvml.with_gpus(1, total=141 * GiB)
    jobs = [configured_job(tmp_path, f"s{i}", GLA_13B_BENCH, sleep=2.0) for i in range(3)]
    store, run_id = make_run(tmp_path, jobs, devices=[gpu_device(0, slots=1)])
    engine = prior_engine(store, fake, gpu_margin=GiB)
    engine.tick()
    first = store.jobs(run_id)[0]
    store.set_progress(first.id, 1, 2.5)
    store.record_usage({first.id: (GiB, GiB)})  # settled at 1G: siblings borrow 1.25G
    fake.gpus[0].used = 137 * GiB  # 3G free after the margin: the ~6G prior would not fit
    store.set_devices(run_id, [gpu_device(0, slots=2)])  # a second slot opens
    engine.tick()
    assert [j.state for j in store.jobs(run_id)] == ["running", "running", "queued"]
    cancel_all(store, engine, run_id)


def test_a_job_prior_is_read_once_per_attempt_not_every_pass(tmp_path, monkeypatch):
    import lat_core.engine.admission as admission

    calls = []
    real = admission.job_prior
    monkeypatch.setattr(admission, "job_prior", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    fake = FakeNvml.with_gpus(1, total=141 * GiB, used=140 * GiB)
    store, run_id = make_run(tmp_path, [configured_job(tmp_path, "o", GLA_13B_BENCH)], devices=[gpu_device(0)])
    engine = prior_engine(store, fake)
    for _ in range(5):
        engine.tick()
    assert store.jobs(run_id)[0].state == "queued" and len(calls) == 1
    cancel_all(store, engine, run_id)


def test_a_multi_process_jobs_prior_counts_the_host_ram_of_every_rank(tmp_path):
    from lat_core.engine.admission import Admission

    jobs = [configured_job(tmp_path, "one", GLA_13B_BENCH), {**configured_job(tmp_path, "two", GLA_13B_BENCH), "world": 2}]
    store, run_id = make_run(tmp_path, jobs, devices=[gpu_device(0), gpu_device(1)])
    one, two = store.jobs(run_id)
    admission = Admission(store, GpuProbe(FakeNvml.with_gpus(2)))
    single, double = admission.expected_peak(one, "gpu0"), admission.expected_peak(two, "gpu0")
    assert single.from_prior and double.gpu == single.gpu and double.rss == 2 * single.rss


def mamba_jobs(tmp_path, max_seq_len: int) -> list[dict]:
    config = {**MAMBA_130M, "train": {**MAMBA_130M["train"], "max_seq_len": max_seq_len}}
    return [configured_job(tmp_path, f"mamba{max_seq_len}-{i}", config, sleep=2.0) for i in range(8)]


@pytest.fixture
def slow_path(monkeypatch):
    """The GPU jobs take transformers' slow path (no mamba_ssm), whatever this machine has installed."""
    import lat_core.config.memory_prior as memory_prior
    monkeypatch.setattr(memory_prior, "fast_path_expected", lambda: False)


def test_slow_path_mamba_jobs_start_only_as_many_as_fit_and_say_their_estimate(tmp_path, slow_path):
    # Measured on an H200: each 256-token slow-path job grew to ~40 GiB, and admitting all 8 ran out.
    fake = FakeNvml.with_gpus(1, total=140 * GiB)
    store, run_id = make_run(tmp_path, mamba_jobs(tmp_path, 256), devices=[gpu_device(0, slots=8)])
    engine = prior_engine(store, fake, gpu_margin=GiB)
    engine.tick()
    jobs = store.jobs(run_id)
    assert [j.state for j in jobs].count("running") == 3, [j.state for j in jobs]
    waiting = [j.waiting for j in jobs if j.state == "queued"]
    assert all(w.startswith("needs ~4") and "G GPU memory (estimated from the config; never measured)" in w
               for w in waiting), waiting
    cancel_all(store, engine, run_id)


def test_short_mamba_rows_all_start_together(tmp_path, slow_path):
    # 8 such jobs on SST-2's short sentences peaked at 27.1 GiB in all on the H200.
    fake = FakeNvml.with_gpus(1, total=140 * GiB)
    store, run_id = make_run(tmp_path, mamba_jobs(tmp_path, 16), devices=[gpu_device(0, slots=8)])
    engine = prior_engine(store, fake, gpu_margin=GiB)
    engine.tick()
    assert [j.state for j in store.jobs(run_id)] == ["running"] * 8
    cancel_all(store, engine, run_id)


def test_a_fused_mamba_groups_estimate_grows_with_its_members_rows(tmp_path, slow_path):
    from lat_core.engine.admission import Admission

    store, run_id = make_run(tmp_path, mamba_jobs(tmp_path, 256) + mamba_jobs(tmp_path, 16),
                             devices=[gpu_device(0, slots=16)])
    admission = Admission(store, GpuProbe(FakeNvml.with_gpus(1, total=140 * GiB)))
    rows = store.jobs(run_id)
    long_rows, short_rows = rows[:8], rows[8:]
    three, four = admission.group_estimate(long_rows[:3]), admission.group_estimate(long_rows[:4])
    assert three.from_prior and three.gpu < 139 * GiB < four.gpu  # as many fused as apart
    assert admission.group_estimate(short_rows).gpu < 27.1 * GiB * 1.5

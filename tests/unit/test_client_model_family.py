"""Client.model_family: job.yaml's model.family as the front ends see it, read once per job."""

from __future__ import annotations

from lat_core.front.client import Client
from lat_core.front.service import open_store


def add_job(state_dir, job_dir) -> int:
    store = open_store(state_dir)
    run_id = store.create_run("suites: []\n", str(job_dir.parent), [], 0.0)
    (job_id,) = store.add_jobs(run_id, [{"key": "tiny-sst2_seed1/a", "suite": "demo", "round": 1, "stem": "a",
                                        "seed": 1, "dataset": "tiny-sst2", "job_dir": str(job_dir), "argv": [],
                                        "env": {}}])
    store.close()
    return job_id


def test_model_family_is_read_from_job_yaml_once_it_exists(tmp_path):
    job_dir = tmp_path / "out" / "a"
    job_dir.mkdir(parents=True)
    client = Client(tmp_path / "state")
    job = client.job(add_job(tmp_path / "state", job_dir))
    assert client.model_family(job) is None  # not written yet: asked again next time
    (job_dir / "job.yaml").write_text("model: {family: mamba, name_or_path: x}\n")
    assert client.model_family(job) == "mamba"
    (job_dir / "job.yaml").write_text("model: {family: gla}\n")
    assert client.model_family(job) == "mamba"  # read once per job
    client.close()


def test_a_config_without_a_family_names_none(tmp_path):
    job_dir = tmp_path / "out" / "a"
    job_dir.mkdir(parents=True)
    (job_dir / "job.yaml").write_text("model: {name_or_path: x}\n")
    client = Client(tmp_path / "state")
    assert client.model_family(client.job(add_job(tmp_path / "state", job_dir))) is None
    client.close()

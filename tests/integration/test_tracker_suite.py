"""The suite a tracker run is tagged with crosses from the journal to the job as LAT_SUITE (set by
the engine at launch, read by lat_core/train/tracking.py): a real engine and a real subprocess."""
from lat_core.train.tracking import SUITE_VAR, run_naming
from tests.conftest import fake_job
from tests.integration.test_engine import drain, make_run


def test_the_engine_hands_the_jobs_suite_to_the_trackers(tmp_path):
    job = {**fake_job(tmp_path, "a", sleep=0.1, extra=("--print-env", SUITE_VAR)), "suite": "gla_adapters"}
    store, _ = make_run(tmp_path, [job])
    drain(store)
    suite = (tmp_path / "out" / "a" / "env.txt").read_text().strip()
    assert suite == "gla_adapters"
    assert run_naming("a", 1, "tiny-sst2", suite).tags[0] == "suite:gla_adapters"

"""The circuit breaker with the real front end, engine and trainers: a run whose first jobs all fail
alike (a dataset folder without its files) pauses after K of them, the rest stay queued saying why,
and `lat-tui resume` lets them go once the cause is fixed."""

import shutil
import time
from pathlib import Path

import pytest

from lat_core.contract.states import JobState, RunState
from lat_core.engine.loop import Engine
from lat_core.front.client import Client, plan_from_mapping, suite_registry
from lat_core.engine.breaker import REASON_PREFIX
from lat_tui.control_cli import main as control
from lat_tui.status import main as status
from tests.conftest import fake_job
from tests.integration.test_engine_faults import CPU, history, make_run
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]
SHORT = {"train": {"max_steps": 2, "eval_every": 2, "save_every": 2, "log_every": 1}}


def wait_for(predicate, what, timeout=HANG_S):
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def start(tmp_path, data, seeds):
    client = Client(tmp_path / "state")
    mapping = {"suites": [{"name": "demo", "rounds": "all"}], "pairs": [f"{s}:{data}" for s in seeds],
               "gpus": "cpu", "slots": 1, "output_root": str(tmp_path / "runs"), "overrides": SHORT,
               "env": {"NUM_DATA_WORKERS": "0"}}
    registry = suite_registry(None)
    run, _ = client.new_run(plan_from_mapping(mapping, registry, where="test", base=tmp_path), registry=registry)
    client.ensure_engine()
    return client, run.id


def paused_reasons(client, run_id):
    return [t.detail for t in client.history(run_id) if t.job_id is None and t.new_state == "paused"]


@pytest.mark.slow
def test_the_first_jobs_failing_alike_pause_the_run_until_resumed(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()  # a dataset folder without its files: every job's trainer refuses it (config_error)
    client, run_id = start(tmp_path, str(data), seeds=[1, 2, 3])  # demo: 2 configs x 3 seeds = 6 jobs, one at a time
    wait_for(lambda: client.run(run_id).paused, "the breaker's pause")
    wait_for(lambda: not [j for j in client.job_table(run_id) if j.state == JobState.RUNNING], "the running job")
    jobs = client.job_table(run_id)
    failed = [j for j in jobs if j.state == JobState.FAILED]
    queued = [j for j in jobs if j.state == JobState.QUEUED]
    assert len(failed) == 3 and len(queued) == 3, [(j.key, j.state, j.error) for j in jobs]
    (reason,) = paused_reasons(client, run_id)
    assert reason.startswith(f"{REASON_PREFIX}the first 3 jobs all failed with config_error") and "resume" in reason
    assert {j.waiting for j in queued} == {reason}
    assert status(["--state-dir", str(tmp_path / "state")]) == 0
    assert f"paused: {reason}" in capsys.readouterr().out

    for name in ("train.jsonl", "validation.jsonl"):  # the user fixes the cause, requeues and resumes
        shutil.copy(ROOT / "lat_core" / "data" / "tiny_sst2" / name, data / name)
    assert control(["requeue", "--failed", "--fresh", "--state-dir", str(tmp_path / "state")]) == 0
    assert control(["resume", "--state-dir", str(tmp_path / "state")]) == 0
    wait_for(lambda: client.run(run_id).state is RunState.FINISHED, "the run's end")
    assert [j.state for j in client.job_table(run_id)] == [JobState.SUCCEEDED] * 6
    assert len(paused_reasons(client, run_id)) == 1  # tripped once


# ---------------------------------------------------------------------------- the rule, with the fake trainer
def engine_run(tmp_path, fails, plan="breaker: 3"):
    """One job a slot, in order; ``fails``: each job's failure log (None: it succeeds; "python@2":
    its first attempt fails, the retry succeeds)."""
    jobs = [fake_job(tmp_path, f"j{i}", sleep=0.05, extra=_failing(kind)) for i, kind in enumerate(fails)]
    store, run_id = make_run(tmp_path, jobs, plan=plan, devices=({**CPU, "slots": 1},))
    engine = Engine(store)
    deadline = time.time() + HANG_S
    while engine.tick() and not (store.run(run_id).paused and not store.running_jobs(run_id)):
        assert time.time() < deadline, [(j.key, j.state) for j in store.jobs(run_id)]
        time.sleep(0.05)
    return store, run_id


def _failing(kind):
    if kind is None:
        return ()
    log, _, before = kind.partition("@")
    return ("--fail-log", log, *(("--fail-before-attempt", before) if before else ()))


def breaker_pauses(store, run_id):
    return [d for s, d in history(store, run_id) if s == "paused"]


def test_the_first_k_failing_with_one_systemic_class_trip_it(tmp_path):
    store, run_id = engine_run(tmp_path, ["python"] * 5)
    (reason,) = breaker_pauses(store, run_id)
    assert reason.startswith("breaker: the first 3 jobs all failed with python_exception (latest: j2: ")
    assert [j.state for j in store.jobs(run_id)] == ["failed"] * 3 + ["queued"] * 2
    assert {j.waiting for j in store.jobs(run_id)[3:]} == {reason}


@pytest.mark.parametrize("fails,plan", [
    (["python", None, "python", "python", "python"], "breaker: 3"),   # a success among the first three
    (["python", "ecc", "python", "python"], "breaker: 3"),            # two classes
    (["port_in_use"] * 4, "breaker: 3"),                              # a transient class (rendezvous)
    (["python"] * 4, "breaker: 0"),                                   # turned off
    (["python"] * 4, "plan: saved before the breaker"),               # an old run's plan: off
])
def test_it_stays_closed_otherwise(tmp_path, fails, plan):
    store, run_id = engine_run(tmp_path, fails, plan=plan)
    assert breaker_pauses(store, run_id) == [] and store.run(run_id).state is RunState.FINISHED


def test_a_failure_the_plan_retries_is_not_an_end(tmp_path):
    """Jobs that on_failure queues again have not ended: their retries keep going, unbroken."""
    plan = "breaker: 2\non_failure: {classes: [python_exception], max_retries: 1, backoff_s: 0}"
    store, run_id = engine_run(tmp_path, ["python@2", "python@2", "python@2"], plan=plan)
    assert breaker_pauses(store, run_id) == []
    assert [j.state for j in store.jobs(run_id)] == ["succeeded"] * 3
    assert sum(d.startswith("auto-retry after python_exception") for _, d in history_of_jobs(store, run_id)) == 3


def history_of_jobs(store, run_id):
    return [(t.new_state, t.detail) for t in store.transitions(run_id) if t.job_id is not None]


def test_the_trip_sends_one_paused_notice(tmp_path):
    import http.server
    import json
    import threading

    received = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        plan = f"breaker: 2\nnotify:\n  webhook: {{url: 'http://127.0.0.1:{server.server_port}/h'}}\n"
        store, run_id = engine_run(tmp_path, ["python"] * 3, plan=plan)
        deadline = time.time() + HANG_S
        while not any(r["kind"] == "paused" for r in received) and time.time() < deadline:
            time.sleep(0.05)
    finally:
        server.shutdown()
    (paused,) = [r for r in received if r["kind"] == "paused"]
    assert "first jobs all failed alike" in paused["subject"] and "python_exception" in paused["body"]

"""The engine with real subprocesses (a fake trainer script), a real journal and real exit records."""

import sys
import time

import psutil

from lat_core.contract.commands import CancelJob, CancelRun, SkipCountdown
from lat_core.engine.loop import Engine
from lat_core.contract.journal import Store
from tests.conftest import fake_job, intervals, max_overlap
from tests.helpers.waits import HANG_S

CPU = {"id": "cpu", "label": "cpu", "slots": 2, "env": {"CUDA_VISIBLE_DEVICES": ""}}


def make_run(tmp_path, jobs, devices=(CPU,), countdown_until=0.0):
    store = Store(tmp_path / "state" / "journal.sqlite")
    run_id = store.create_run("plan: test", str(tmp_path / "out"), list(devices), countdown_until)
    store.add_jobs(run_id, jobs)
    return store, run_id


def drain(store, timeout=HANG_S, **kw):
    engine = Engine(store, **kw)
    deadline = time.time() + timeout
    while engine.tick():
        assert time.time() < deadline, "engine did not drain in time"
        time.sleep(0.05)
    return engine


def test_slots_are_never_exceeded_and_always_filled(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, f"j{i}", sleep=0.6) for i in range(6)])
    drain(store)
    spans = intervals(tmp_path)
    assert len(spans) == 6
    assert max_overlap(spans.values()) == 2
    assert [j.state for j in store.jobs(run_id)] == ["succeeded"] * 6
    assert store.run(run_id).state == "finished"


def test_per_gpu_slot_plan_is_respected(tmp_path):
    gpus = [{"id": f"gpu{i}", "label": f"GPU {i}", "slots": n, "env": {"CUDA_VISIBLE_DEVICES": f"GPU-{i}"}}
            for i, n in enumerate([2, 1, 0])]
    jobs = [fake_job(tmp_path, f"j{i}", sleep=0.6, extra=("--print-env", "CUDA_VISIBLE_DEVICES")) for i in range(6)]
    store, run_id = make_run(tmp_path, jobs, devices=gpus)
    drain(store)
    by_device = {}
    spans = intervals(tmp_path)
    for job in store.jobs(run_id):
        by_device.setdefault(job.device, []).append(spans[job.key])
        seen = (tmp_path / "out" / job.key / "env.txt").read_text().strip()
        assert seen == f"GPU-{job.device[-1]}"  # pinned to its device by UUID
    assert set(by_device) == {"gpu0", "gpu1"}  # 0 slots: visible but never scheduled
    assert max_overlap(by_device["gpu0"]) == 2
    assert max_overlap(by_device["gpu1"]) == 1


def test_failure_does_not_stop_others_and_exit_codes_are_recorded(tmp_path):
    jobs = [fake_job(tmp_path, "ok1"), fake_job(tmp_path, "bad", exit_code=3), fake_job(tmp_path, "ok2")]
    store, run_id = make_run(tmp_path, jobs)
    drain(store)
    states = {j.key: (j.state, j.returncode) for j in store.jobs(run_id)}
    assert states == {"ok1": ("succeeded", 0), "bad": ("failed", 3), "ok2": ("succeeded", 0)}
    bad = next(j for j in store.jobs(run_id) if j.key == "bad")
    assert "exit code 3" in bad.error and "injected failure of bad" in bad.error
    attempts = store.attempts(bad.id)
    assert len(attempts) == 1 and attempts[0].returncode == 3


def test_no_round_barrier_a_freed_slot_is_taken_at_once(tmp_path):
    jobs = [fake_job(tmp_path, "long", sleep=2.0), fake_job(tmp_path, "short", sleep=0.2),
            fake_job(tmp_path, "next", sleep=0.2)]
    store, _ = make_run(tmp_path, jobs)
    drain(store)
    spans = intervals(tmp_path)
    assert spans["next"][0] < spans["long"][1]  # did not wait for the long job of its "round"


def test_progress_from_events_reaches_the_journal(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "a", sleep=0.9)])
    engine = Engine(store)
    seen_steps = set()
    while engine.tick():
        job = store.jobs(run_id)[0]
        if job.last_step:
            seen_steps.add(job.last_step)
        time.sleep(0.05)
    assert seen_steps and max(seen_steps) <= 3


def test_countdown_holds_launches_until_skipped(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "a")], countdown_until=time.time() + 3600)
    engine = Engine(store)
    for _ in range(5):
        engine.tick()
        time.sleep(0.05)
    assert store.run(run_id).state == "countdown"
    assert store.jobs(run_id)[0].state == "queued"
    store.add_command(run_id, SkipCountdown())
    drain(store)
    assert store.jobs(run_id)[0].state == "succeeded"
    kinds = [t.new_state for t in store.transitions(run_id) if t.job_id is None]
    assert "command:skip_countdown" in kinds


def test_countdown_ends_by_itself(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "a")], countdown_until=time.time() + 0.5)
    drain(store)
    assert intervals(tmp_path)["a"][0] >= store.run(run_id).countdown_until


def test_cancel_running_job_kills_its_process_group(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "slow", sleep=30), fake_job(tmp_path, "b")])
    engine = Engine(store)
    while not (tmp_path / "record" / "slow.log").exists():
        engine.tick()
        time.sleep(0.05)
    trainer_pid = int((tmp_path / "record" / "slow.log").read_text().split()[2])
    job = store.jobs(run_id)[0]
    store.add_command(run_id, CancelJob(job.id))
    drain(store)
    job = store.job(job.id)
    assert job.state == "cancelled" and job.error == "cancelled by user"
    assert not psutil.pid_exists(trainer_pid) or psutil.Process(trainer_pid).status() == psutil.STATUS_ZOMBIE
    assert store.jobs(run_id)[1].state == "succeeded"


def test_cancel_run_during_countdown_starts_nothing(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "a"), fake_job(tmp_path, "b")],
                             countdown_until=time.time() + 3600)
    store.add_command(run_id, CancelRun())
    drain(store)
    assert store.run(run_id).state == "cancelled"
    assert [j.state for j in store.jobs(run_id)] == ["cancelled", "cancelled"]
    assert not (tmp_path / "record").exists() or not list((tmp_path / "record").glob("*.log"))


def test_secret_env_is_masked_in_journal_but_reaches_the_job(tmp_path):
    job = fake_job(tmp_path, "a", env={"WANDB_API_KEY": "***", "HP_BATCH_SIZE": "8"},
                   extra=("--print-env", "WANDB_API_KEY"))
    store, run_id = make_run(tmp_path, [job])
    drain(store, secrets={"WANDB_API_KEY": "s3cr3t-value"})
    assert (tmp_path / "out" / "a" / "env.txt").read_text().strip() == "s3cr3t-value"
    journal_bytes = (tmp_path / "state" / "journal.sqlite").read_bytes()
    assert b"s3cr3t-value" not in journal_bytes


def test_usage_samples_record_peak_rss_of_the_job_tree(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "a", sleep=1.5)])
    drain(store, sample_every_s=0.1)
    job = store.jobs(run_id)[0]
    assert job.peak_rss and job.peak_rss > 5 * 2**20  # runner + python trainer: several MiB
    assert job.peak_gpu == 0
    assert len(store.samples(job.id)) >= 3


def test_failed_job_gets_a_triage_diagnosis(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "bad", exit_code=1)])
    drain(store)
    job = store.jobs(run_id)[0]
    assert job.diagnosis.cls == "python_exception"
    assert "RuntimeError" in job.error and "injected failure of bad" in job.error


def test_notices_on_start_failure_and_finish_reach_a_webhook(tmp_path):
    import http.server
    import json as _json
    import threading

    received = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(_json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        store = Store(tmp_path / "state" / "journal.sqlite")
        plan = f"notify:\n  webhook: {{url: 'http://127.0.0.1:{server.server_port}/hook'}}\n"
        run_id = store.create_run(plan, str(tmp_path / "out"), [CPU], 0)
        store.add_jobs(run_id, [fake_job(tmp_path, "ok"), fake_job(tmp_path, "bad", exit_code=2)])
        drain(store)
        deadline = time.time() + HANG_S
        while len(received) < 3 and time.time() < deadline:
            time.sleep(0.05)
    finally:
        server.shutdown()
    kinds = sorted(r["kind"] for r in received)
    assert kinds == ["failure", "finish", "start"], received
    history = [t.new_state for t in store.transitions(run_id)]
    assert history.count("notice:start") == 1 and history.count("notice:finish") == 1


def test_a_secret_the_engine_never_received_is_left_out_not_passed_masked(tmp_path):
    job = fake_job(tmp_path, "a", env={"HF_TOKEN": "***"}, extra=("--print-env", "HF_TOKEN"))
    store, run_id = make_run(tmp_path, [job])
    drain(store, secrets={})
    assert (tmp_path / "out" / "a" / "env.txt").read_text().strip() == "<unset>"


def test_a_job_shorter_than_a_sampling_interval_still_gets_its_peak_rss(tmp_path):
    job = fake_job(tmp_path, "quick", sleep=0.1)
    job["argv"] = [sys.executable, "-c", "b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096])"]
    store, run_id = make_run(tmp_path, [job])
    drain(store, sample_every_s=3600)  # no sample while it runs: only the runner's wait4 sees its peak
    done = store.jobs(run_id)[0]
    assert done.state == "succeeded"
    assert done.peak_rss >= 200 * 2**20
    assert store.config_peak(done.profile_key)[1] >= 200 * 2**20  # and admission learns it


def test_the_exit_record_keeps_a_signal_death_and_the_peak(tmp_path):
    import json
    import subprocess

    exit_file = tmp_path / "exit.json"
    subprocess.run([sys.executable, "-m", "lat_core.runner", "--exit-file", str(exit_file), "--",
                    sys.executable, "-c", "import os, signal; b = bytearray(50 * 2**20); b[::4096] = b'x' * len(b[::4096]);"
                    " os.kill(os.getpid(), signal.SIGTERM)"], check=True, timeout=HANG_S)
    record = json.loads(exit_file.read_text())
    assert record["returncode"] == -15 and record["signal"] == 15
    assert record["max_rss"] >= 50 * 2**20

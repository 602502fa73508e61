"""One definition of a job's peak memory (its trainer's process tree, as the engine samples it),
shown the same in status, show and the results tables; a warm-started job is not charged the
preloaded process's memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from lat_core.contract.jobdir import JobDir
from lat_core.results import aggregate
from tests.conftest import fake_job
from tests.integration.test_engine import drain, make_run
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]
HELD = 96 << 20
CLAIMED = 1 << 30  # what the trainer's own event says (ru_maxrss: inherited over fork, or any other number)

TRAINER = textwrap.dedent(f"""
    import json, time
    lines = [{{"event": "started", "config": "mem", "data": "glue-tvt_sst2", "seed": 1}},
             {{"event": "eval", "step": 10, "split": "validation", "metrics": {{"accuracy": 0.5}}}},
             {{"event": "checkpoint", "step": 10, "path": "checkpoint-10"}},
             {{"event": "memory", "peak_rss_bytes": {CLAIMED}, "peak_gpu_bytes": 0}},
             {{"event": "finished", "status": "ok", "steps": 10}}]
    with open("events.jsonl", "w") as fh:
        fh.writelines(json.dumps({{"t": time.time(), **line}}) + "\\n" for line in lines)
    held = bytearray({HELD})
    held[::4096] = b"x" * len(held[::4096])
    time.sleep(1.5)
""")


def lat(state: Path, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAT_STATE_DIR": str(state)}
    out = subprocess.run([sys.executable, "-m", "lat_tui.cli", *args], capture_output=True, text=True,
                         timeout=HANG_S, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_status_show_and_results_show_the_engines_peak(tmp_path):
    job = fake_job(tmp_path, "mem")
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    job["argv"] = [sys.executable, str(script)]
    store, run_id = make_run(tmp_path, [job])
    drain(store, sample_every_s=0.1)
    done = store.jobs(run_id)[0]
    assert done.state == "succeeded" and HELD <= done.peak_rss < CLAIMED
    state = tmp_path / "state"
    assert lat(state, "status", "--json")["jobs"][0]["peak_rss"] == done.peak_rss
    assert lat(state, "show", str(done.id), "--json")["job"]["peak_rss"] == done.peak_rss
    assert JobDir(done.job_dir).read_peak_usage().rss_bytes == done.peak_rss
    (result,) = aggregate(tmp_path / "out").results
    assert result.peak_rss_bytes == done.peak_rss and not result.peak_gpu_bytes


def test_a_forked_job_that_dies_at_once_is_not_charged_the_preloaded_process(tmp_path):
    """Before: its peak was the kernel's ru_maxrss, inherited over fork (the preloaded process's,
    306M in the issue); now the engine's measure less what the trainer inherited at fork."""
    import psutil

    from lat_core.engine.loop import Engine
    from tests.integration.test_warm_start import MARK, missing_config_run
    from tests.integration.test_warm_start import drain as drain_warm
    from tests.helpers.titles import title_of

    store, run_id, job_dir = missing_config_run(tmp_path)
    engine = Engine(store, sample_every_s=0.05)
    preloaded = []

    def note_preloaded():  # the preloaded process's memory, while it is there
        preloaded.extend(psutil.Process(p).memory_info().rss for p in psutil.pids()
                         if title_of(p).startswith(f"lat warm: {tmp_path}"))

    engine_tick = engine.tick
    engine.tick = lambda: (note_preloaded(), engine_tick())[1]
    drain_warm(engine)
    job = store.jobs(run_id)[0]
    assert MARK in (job_dir / "train.log").read_text() and job.state == "failed"
    assert preloaded and max(preloaded) > 150 << 20  # torch, transformers and peft imported
    assert (job.peak_rss or 0) < 64 << 20  # the job's own: a trainer that failed at its first line
    assert JobDir(job_dir).read_peak_usage().rss_bytes == job.peak_rss


def test_triage_shows_the_peak_that_status_shows(tmp_path):
    """Before: triage read the trainer's own event (ru_maxrss: 503 MiB in the issue, where status
    and results said 172 MiB); now the one definition, lat_core.contract.jobdir.job_peak."""
    job = fake_job(tmp_path, "mem")
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER + "raise SystemExit('the job fails after its memory event')\n")
    job["argv"] = [sys.executable, str(script)]
    store, run_id = make_run(tmp_path, [job])
    drain(store, sample_every_s=0.1)
    done = store.jobs(run_id)[0]
    assert done.state == "failed" and HELD <= done.peak_rss < CLAIMED
    assert done.diagnosis.numbers["peak_rss_bytes"] == done.peak_rss  # the engine's triage
    by_hand = lat(tmp_path / "state", "triage", str(done.id), "--json")
    assert by_hand["numbers"]["peak_rss_bytes"] == done.peak_rss
    assert lat(tmp_path / "state", "status", "--json")["jobs"][0]["peak_rss"] == done.peak_rss

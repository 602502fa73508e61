"""``lat-tui`` verbs as a user runs them: subprocesses against a state directory a real engine
filled by running fake trainers."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lat_tui.json_views import SCHEMA_VERSION, EventView, JobView, RunView, from_json
from lat_tui.verbs import VERBS
from tests.conftest import fake_job
from tests.integration.test_engine import drain, make_run
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]


def lat(state: Path, *args: str, timeout: float = HANG_S, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAT_STATE_DIR": str(state)}
    return subprocess.run([sys.executable, "-m", "lat_tui.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, **kw)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One finished run: ok succeeded (step lines in its log), bad failed."""
    tmp = tmp_path_factory.mktemp("cli")
    store, run_id = make_run(tmp, [fake_job(tmp, "ok", extra=("--say-steps",)), fake_job(tmp, "bad", exit_code=3)])
    drain(store)
    jobs = {j.key: j for j in store.jobs(run_id)}
    return tmp / "state", run_id, jobs


def test_status_json_round_trips_through_the_documented_schema(finished):
    state, run_id, jobs = finished
    out = lat(state, "status", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == SCHEMA_VERSION and doc["engine_alive"] is False
    run = from_json(RunView, doc["run"])
    assert run.id == run_id and run.state == "finished" and run.jobs_by_state == {"succeeded": 1, "failed": 1}
    views = {v.key: v for v in (from_json(JobView, j) for j in doc["jobs"])}
    assert views["ok"].id == jobs["ok"].id and views["ok"].last_step == 3 and views["bad"].state == "failed"
    with pytest.raises(ValueError, match="JobView.attempts"):
        from_json(JobView, {**doc["jobs"][0], "attempts": "1"})


def test_runs_and_show_json(finished):
    state, run_id, jobs = finished
    runs = json.loads(lat(state, "runs", "--json").stdout)
    assert [from_json(RunView, r).id for r in runs["runs"]] == [run_id]
    shown = json.loads(lat(state, "show", str(jobs["bad"].id), "--json").stdout)
    assert shown["schema"] == SCHEMA_VERSION and from_json(JobView, shown["job"]).key == "bad"
    assert [a["returncode"] for a in shown["attempts"]] == [3]
    assert [from_json(EventView, e).state for e in shown["history"]][:2] == ["queued", "running"]
    assert shown["diagnosis"]["class"] == "python_exception" and shown["argv"][-2:] == ["--name", "bad"]


def test_show_and_runs_text(finished):
    state, _, jobs = finished
    text = lat(state, "show", str(jobs["bad"].id)).stdout
    for part in ("job.yaml", "attempts:", "#1 on cpu", "history:", "diagnosis:", "python_exception",
                 f"folder: {jobs['bad'].job_dir}"):
        assert part in text, text
    assert "1 failed, 1 succeeded" in lat(state, "runs").stdout


def test_logs_prints_the_last_lines(finished):
    state, _, jobs = finished
    out = lat(state, "logs", str(jobs["ok"].id), "-n", "2")
    assert out.returncode == 0
    trainer_said, engine_said = out.stdout.splitlines()
    assert trainer_said == "fake trainer ok done, exiting 0" and engine_said.endswith(" succeeded at step 3: exit code 0")
    assert lat(state, "logs", str(jobs["ok"].id), "-f").stdout.endswith("exit code 0\n")  # ended: -f returns


def test_wait_and_follow_exit_like_headless(finished):
    state, _, jobs = finished
    assert lat(state, "wait", str(jobs["ok"].id)).returncode == 0
    out = lat(state, "wait")
    assert out.returncode == 1 and "1/2 jobs succeeded" in out.stdout and "bad" in out.stdout
    follow = lat(state, "follow")
    assert follow.returncode == 1
    # the job table's name for the job ("ok 1:tiny-sst2"), not its key
    assert f"job {jobs['ok'].id} ok 1:tiny-sst2: queued -> running" in follow.stdout and "1/2 jobs succeeded" in follow.stdout


def test_cancel_needs_a_job_or_all(finished):
    state, _, _ = finished
    out = lat(state, "cancel")
    assert out.returncode == 2 and "--all" in out.stderr


def test_requeue_offers_resume_when_a_failed_job_has_checkpoints(finished):
    state, _, jobs = finished
    checkpoint = Path(jobs["bad"].job_dir) / "checkpoint-300"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text("{}")
    (checkpoint / "adapter_model.safetensors").write_bytes(b"weights")
    try:
        out = lat(state, "requeue", str(jobs["bad"].id))
        assert out.returncode == 1 and "checkpoint-300 (step 300)" in out.stdout
        assert f"lat-tui requeue {jobs['bad'].id} --resume" in out.stdout and "--fresh" in out.stdout
        assert "nothing was requeued" in out.stdout
        assert lat(state, "requeue", str(jobs["bad"].id), "--resume", "--fresh").returncode == 2
    finally:
        shutil.rmtree(checkpoint)
    assert lat(state, "status", "--json").stdout.count('"command:requeue"') == 0


def test_status_into_a_closed_pipe_ends_quietly(finished):
    state, _, _ = finished
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAT_STATE_DIR": str(state)}
    for verb in ("status", "runs", "follow", "suites"):
        # the reader closes its end at once, so the verb's first write meets a closed pipe
        out = subprocess.run(f"{sys.executable} -m lat_tui.cli {verb} | (exec 0<&-; sleep 3)", shell=True,
                             capture_output=True, text=True, env=env, timeout=HANG_S)
        assert "BrokenPipeError" not in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert "Broken pipe" not in out.stderr, out.stderr  # a pipe is not a journal fault


def test_help_lists_every_subcommand_and_every_argument_has_help():
    out = subprocess.run([sys.executable, "-m", "lat_tui.cli", "--help"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    from lat_tui.cli import build_parser

    for verb in VERBS:
        assert f"  {verb.name}" in out.stdout
    for name, parser in [("lat-tui", build_parser()), *((v.name, v.parser()) for v in VERBS)]:
        for action in parser._actions:  # argparse lists a parser's arguments only here
            assert action.help, f"{name}: {action.dest} has no help"
    version = subprocess.run([sys.executable, "-m", "lat_tui.cli", "--version"], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert version.stdout.startswith("lat-tui 0.")


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_script_parses_and_completes_verbs(shell, tmp_path):
    out = lat(tmp_path, "completion", shell)
    assert out.returncode == 0
    if shell == "zsh":
        assert out.stdout.startswith("autoload -U +X bashcompinit")
        return
    probe = out.stdout + '\nCOMP_WORDS=(lat-tui lo); COMP_CWORD=1; _lat_tui; echo "${COMPREPLY[@]}"' \
                         '\nCOMP_WORDS=(lat-tui logs --fo); COMP_CWORD=2; _lat_tui; echo "${COMPREPLY[@]}"'
    lines = subprocess.run(["bash", "-c", probe], capture_output=True, text=True).stdout.splitlines()
    assert lines == ["logs", "--follow"]


def test_results_without_a_root_uses_the_latest_run_and_nothing_found_is_exit_1(finished, tmp_path):
    state, _, _ = finished
    out = lat(state, "results", "--format", "md", cwd=tmp_path)  # no ./runs here
    run_root = Path(finished[2]["ok"].job_dir).parent
    # the fake trainer evaluates nothing: nothing usable is exit 1, each job listed with its state and reason
    assert out.returncode == 1 and f"no job under {run_root} succeeded" in out.stderr
    assert "2 job(s) planned in run(s) 1: 1 failed, 1 succeeded; 0 in the tables." in out.stdout
    assert "job 1 ok 1:tiny-sst2: succeeded: no usable evaluation: " in out.stdout
    assert "bad 1:tiny-sst2: failed: python_exception" in out.stdout
    assert "### Jobs (2)" in (run_root / "_results" / "results.md").read_text()
    empty = tmp_path / "empty"
    (empty / "demo" / "x_seed1").mkdir(parents=True)
    out = lat(state, "results", str(empty))
    assert out.returncode == 1 and "no job folder" in out.stderr
    assert not (empty / "_results").exists()


def test_pause_on_a_finished_run_is_refused_by_the_engine(finished):
    state, run_id, _ = finished
    out = lat(state, "pause")
    assert out.returncode == 1
    assert out.stdout.strip() == f"pause: rejected run {run_id} is finished; only an active run can be paused"
    assert json.loads(lat(state, "status", "--json").stdout)["run"]["paused"] is False


def test_triage_takes_a_job_id_like_every_other_verb(finished):
    state, _, jobs = finished
    by_id = lat(state, "triage", str(jobs["bad"].id))
    by_folder = lat(state, "triage", jobs["bad"].job_dir)
    assert by_id.returncode == 0, by_id.stderr
    assert by_id.stdout == f"job {jobs['bad'].id} bad 1:tiny-sst2\n" + by_folder.stdout  # the table's name
    assert by_folder.stdout.startswith("python_exception") and "injected failure of bad" in by_folder.stdout


@pytest.mark.parametrize("verb", ["show", "logs", "triage", "cancel", "requeue", "wait"])
def test_a_wrong_job_id_is_a_usage_error_naming_the_run(finished, verb):
    state, run_id, _ = finished
    out = lat(state, verb, "999")
    assert out.returncode == 2
    assert f"no job 999 in run {run_id}" in out.stderr and "Journal problem" not in out.stderr, out.stderr


def test_a_job_of_another_run_than_the_one_named_says_which_run_it_is_in(finished):
    state, run_id, jobs = finished
    out = lat(state, "wait", str(jobs["ok"].id), "--run", str(run_id + 1))
    assert out.returncode == 2 and f"it is a job of run {run_id} (--run {run_id})" in out.stderr, out.stderr

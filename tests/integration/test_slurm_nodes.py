"""Multi-node Slurm jobs (``slurm.nodes``): the batch script's text, then that same script on the
one-node cluster of ``scripts/slurm_local.sh`` with two tasks standing for two nodes (``--nodes=1
--ntasks=2 --overcommit``: one node cannot hold a 2-node request). Their torchruns meet at the c10d
rendezvous the script found (gloo, world 2), and Slurm's warning before the time limit (sent here
with ``scancel --signal=USR1 --batch``, as ``--signal=B:USR1@N`` would) reaches the batch shell,
goes through the runner and ``srun`` to each node's torchrun and on to every worker, which save one
checkpoint and exit 75. Every wait is on a file or a state, never a sleep's length."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lat_core.config.slurm_options import option_problems, spread_problem
from lat_core.contract.jobdir import AttemptFiles, JobDir, Step
from lat_core.contract.jobdir.outcome import EXIT_SAVED_TO_RESUME
from lat_core.engine.backends.slurm import SlurmBackend
from lat_core.contract.states import JobState
from lat_core.engine.placement import SRUN_WAIT_S, multinode_argv
from lat_core.front.service import open_store
from tests.helpers.slurm_front import (LOOK_EVERY_S, UNTIL_STOPPED, cancel_the_run, every_job_resumed, resumed_from,
                                       running, the_job, the_run)
from tests.helpers.waits import wait_until
from tests.integration.test_slurm import slurm_cluster  # noqa: F401  (fixture)
from tests.integration.test_slurm_front_door import lat_tui
from tests.integration.test_trainer import ROOT, events, job

TRAINER = ["/venv/bin/python", "-m", "lat_core.train", "--cfg", "/runs/j/job.yaml"]


def test_a_multi_node_job_meets_on_the_first_node_of_its_allocation(tmp_path):
    backend = SlurmBackend(nodes=2, time="60", python="/venv/bin/python")
    exit_path = tmp_path / "attempts" / "attempt-1.exit.json"
    lines = backend.batch_script(multinode_argv(TRAINER, 4, 2), exit_path).splitlines()
    assert lines[2:6] == [
        "# 2 nodes: one torchrun a node (srun), meeting on the first node",
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        # the batch script runs on the first node: the port is free there, not on the engine's host
        """port=$(/venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("", 0)); """
        """print(s.getsockname()[1])')""",
        'export PET_RDZV_ENDPOINT="$head:$port" PET_RDZV_ID="lat-$SLURM_JOB_ID"']
    runner, _, command = lines[6].partition(" -- ")
    assert runner == f"exec /venv/bin/python -m lat_core.runner --exit-file {exit_path} --show-env ''"
    assert command == (f"srun --kill-on-bad-exit=0 --wait={SRUN_WAIT_S} {sys.executable} -m lat_core.train.torchrun "
                       "--nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d -m lat_core.train --cfg /runs/j/job.yaml")
    # one task (its torchrun) a node; --gres, like --mem and --cpus-per-task, counts per node
    assert backend.options.sbatch_args(backend.gres_request({}, 4)) == [
        "--time=60", "--nodes=2", "--ntasks-per-node=1", "--gres=gpu:2", "--signal=B:USR1@120"]
    one_node = SlurmBackend(time="60")
    assert "head=" not in one_node.batch_script(TRAINER, exit_path)
    assert one_node.options.sbatch_args(one_node.gres_request({}, 4)) == ["--time=60", "--gres=gpu:4",
                                                                         "--signal=B:USR1@120"]


def test_nodes_are_a_whole_number_that_splits_each_job_evenly():
    assert option_problems({"nodes": 0}) == ["plan field 'slurm.nodes': expected a whole number >= 1, got 0"]
    assert option_problems({"nodes": "2"}) == ["plan field 'slurm.nodes': expected a whole number >= 1, got '2'"]
    [array] = option_problems({"nodes": 2, "array": True})
    assert array.startswith("plan field 'slurm.array': a job array's tasks run on one node each")
    assert spread_problem(4, 2) is None and spread_problem(2, 1) is None
    assert spread_problem(3, 2) == ("plan field 'slurm.nodes': 2 nodes need a job's processes (gpus_per_job) to be "
                                    "a multiple of 2, the same number on each node; got 3")


# ---------------------------------------------------------------- the one-node cluster
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "NUM_DATA_WORKERS": "0"}


@pytest.fixture
def two_task_job(slurm_cluster):  # noqa: F811
    """``submit(job_dir, argv, name)``: the batch script of a 2-node job of ``argv`` (world 2, gres
    none), submitted as one node with two tasks; (Slurm job id, the attempt's exit record). A job
    still in Slurm when the test ends is cancelled."""
    submitted = []

    def submit(job_dir: Path, argv: list[str], name: str) -> tuple[str, Path]:
        exit_path = job_dir / "attempts" / "attempt-1.exit.json"
        exit_path.parent.mkdir(parents=True)
        script = exit_path.with_name("attempt-1.sbatch")
        script.write_text(SlurmBackend(nodes=2, gres="none").batch_script(multinode_argv(argv, 2, 2), exit_path))
        out = subprocess.run(["sbatch", "--parsable", f"--job-name={name}", "--nodes=1", "--ntasks=2",
                              "--overcommit", "--export=ALL", f"--chdir={job_dir}", f"--output={job_dir / 'train.log'}",
                              str(script)], env=ENV, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        submitted.append(out.stdout.strip().split(";")[0])
        return submitted[-1], exit_path

    yield submit
    for job_id in submitted:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=60)


def ended(exit_path: Path, job_dir: Path):
    wait_until(lambda: exit_path.exists(), f"exit record of the job in {job_dir}")
    record = AttemptFiles(exit_path).read_exit()
    assert record is not None
    return record


@pytest.mark.slow
def test_two_tasks_meet_at_the_rendezvous_of_the_script(two_task_job, tmp_path):
    job_id, exit_path = two_task_job(tmp_path, [sys.executable, "-m", "tests.helpers.ddp_probe"],
                                            "lat-nodes-rendezvous")
    record = ended(exit_path, tmp_path)
    log = (tmp_path / "train.log").read_text()
    assert record.returncode == 0, log[-3000:]
    ranks = [(tmp_path / f"rank{r}.txt").read_text().split() for r in (0, 1)]
    assert all(r[:2] == ["2", "3.0"] for r in ranks)  # world 2, all-reduce of 1 + 2
    told = [json.loads((tmp_path / f"rank{r}.env.json").read_text()) for r in (0, 1)]
    assert sorted(t["GROUP_RANK"] for t in told) == ["0", "1"]  # two torchruns ("nodes"), one worker each
    assert all(t["LOCAL_WORLD_SIZE"] == "1" and t["TORCHELASTIC_RUN_ID"] == f"lat-{job_id}" for t in told)


@pytest.mark.slow
def test_the_warning_before_the_limit_saves_every_rank_of_every_node(two_task_job, tmp_path):
    cfg = job(tmp_path, "gla", train={"max_steps": 100000, "save_every": 100000, "eval_every": 100000})
    job_id, exit_path = two_task_job(tmp_path, [sys.executable, "-m", "lat_core.train", "--cfg", str(cfg)],
                                            "lat-nodes-save")
    wait_until(lambda: JobDir(tmp_path).read_events().of(Step) or exit_path.exists(), "a step event", every=0.5)
    assert subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], timeout=60).returncode == 0
    record = ended(exit_path, tmp_path)
    log = (tmp_path / "train.log").read_text()
    assert record.returncode == EXIT_SAVED_TO_RESUME, log[-3000:]
    assert log.count("SIGUSR1 passed on to worker ") == 2  # each node's torchrun, to its worker
    assert log.count("the workers saved to be resumed; exit 75") == 2
    kinds = [e["event"] for e in events(tmp_path)]
    assert "finished" not in kinds and "failed" not in kinds
    [saved] = [e["step"] for e in events(tmp_path) if e["event"] == "checkpoint"]
    assert (tmp_path / f"checkpoint-{saved}" / "trainer_state.json").is_file()


# ---------------------------------------------------------------- through the front door
@pytest.mark.slow
def test_a_plan_on_two_nodes_asks_slurm_for_them_from_a_login_node(slurm_cluster, tmp_path):  # noqa: F811
    """The one node cannot run it (Slurm keeps it pending): what reached Slurm is read back from it."""
    with running(lat_tui(tmp_path, {"gpus_per_job": 4, "slurm": {"nodes": 2}}, wait=False)) as front:
        store, run_id = the_run(tmp_path)
        job = the_job(store, run_id)
        attempt = wait_until(lambda: (tried := store.attempts(job.id)) and tried[0].pid and tried[0],
                             "submitted job", every=LOOK_EVERY_S)
        shown = subprocess.run(["scontrol", "show", "job", "-o", str(attempt.pid)], capture_output=True,
                               text=True).stdout
        assert "NumNodes=2" in shown and re.search(r"TresPerNode=gres[:/]gpu:2\b", shown), shown  # 2 GPUs a node
        script = Path(attempt.exit_path).with_name("attempt-1.sbatch").read_text()
        assert 'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in script
        assert "-m lat_core.train.torchrun --nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d -m lat_core.train" \
            in script
        assert "torchrun on each of 2 nodes, c10d rendezvous on the first" in \
            [t.detail for t in store.transitions(run_id, job_id=job.id)]
        cancel_the_run(store, run_id, front)
    assert "CANCELLED" in subprocess.run(["scontrol", "show", "job", "-o", str(attempt.pid)],
                                         capture_output=True, text=True).stdout


@pytest.mark.slow
def test_a_two_process_job_saves_at_the_time_limit_and_resumes(slurm_cluster, tmp_path):  # noqa: F811
    """The warning (USR1, 60 s before the limit) reaches the batch shell of a torchrun job of 2 CPU
    processes: both save, the job exits 75 and the engine resubmits it to resume."""
    plan = {"gpus_per_job": 2, "slurm": {"time": "2", "save_before_end_s": 60, "gres": "none"},
            "overrides": UNTIL_STOPPED}
    with running(lat_tui(tmp_path, plan, wait=False)) as front:
        store, run_id = the_run(tmp_path)
        job = the_job(store, run_id)
        every_job_resumed(store, run_id, jobs=1)
        cancel_the_run(store, run_id, front)
    first = store.attempts(job.id)[0]
    log = (Path(job.job_dir) / "train.log").read_text()
    assert first.returncode == EXIT_SAVED_TO_RESUME, log[-3000:]
    assert log.count("SIGUSR1 passed on to worker ") == 2 and "the workers saved to be resumed; exit 75" in log
    requeued = [t.detail for t in store.transitions(run_id, job_id=job.id) if t.new_state == JobState.QUEUED][1:]
    assert requeued[0].startswith("saved at step ") and "resubmitted to resume" in requeued[0], requeued
    assert resumed_from(job.job_dir)[:2] == [None, int(requeued[0].split()[3])]


def test_a_job_that_cannot_split_evenly_over_the_nodes_stops_the_plan(tmp_path):
    done = lat_tui(tmp_path, {"gpus_per_job": 3, "slurm": {"nodes": 2}})
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    assert "plan field 'slurm.nodes': 2 nodes need a job's processes (gpus_per_job) to be a multiple of 2" in said
    assert not (tmp_path / "state" / "journal.sqlite").exists() or not open_store(tmp_path / "state").runs()

"""Jobs as Slurm batch jobs: ``sbatch`` runs the same runner command the local backend runs.

The job directory lies on a filesystem that the engine and the compute nodes share, so the runner's
exit record and ``train.log`` reach the engine as they do locally. The journal keeps the Slurm job id
in the attempt's ``pid`` and the submit time in ``pid_start``.

No double submission: each attempt's job name is derived from its exit-record path (unique per
attempt), so before submitting, and when an engine that crashed mid-launch recovers, the backend
looks the name up (``squeue``, then ``sacct``) and adopts the job it finds instead of submitting
again. Jobs are submitted ``--no-requeue``, so Slurm never reruns an attempt behind the engine's back.

The job's environment travels through sbatch's own environment (``--export=ALL``), never through
the batch script, so secrets are not written into the job directory.

With ``array: true``, the jobs admitted together are one job array (:mod:`.slurm_array`); each
attempt's ``pid`` is then its task id ``"<array job id>_<task>"``, which every Slurm command here
accepts in place of a job id.

A fused group (:mod:`lat_core.engine.groups`) is one Slurm job running the fused trainer on its
members' folders, named after the group's exit record; every member's attempt keeps its job id, so
squeue's and sacct's word on it is each member's still in the group when it ended. Its warning
before the time limit makes every member save and leave to be resumed, as a job alone does.

A warm pack (``pack: K``, :mod:`lat_core.engine.pack`) is such a group of jobs that do not fuse: one
Slurm job asking K jobs' GPUs, memory and CPUs, whose process imports the training stack once and
forks each member's trainer on its own share of the GPUs (:mod:`lat_core.train.pack`).
"""

from __future__ import annotations

import copy
import dataclasses
import getpass
import hashlib
import os
import re
import shlex
import signal as _signal
import subprocess
import sys
import time
from pathlib import Path

from lat_core.contract.jobdir import AttemptFiles
from lat_core.engine.backends.slurm_array import array_script, marker_path, read_marker, split_envs, task_id
from lat_core.config.slurm_options import SlurmOptions, validate_options
from lat_core.engine.backends.slurm_states import (is_active, parse_sacct, parse_scontrol_job, slurm_diagnosis,
                                                   slurm_failure)
from lat_core.engine.launch import Launched, LaunchSpec
from lat_core.engine.backends.base import Backend
from lat_core.contract.jobdir.names import TRAIN_LOG

__all__ = ["SlurmBackend", "SlurmError", "find_submitted", "job_name_for", "slurm_failure"]

COMMAND_TIMEOUT_S = 30.0
QUEUE_CACHE_S = 5.0
_JOB_ID = re.compile(r"\d+(?=_|$)")  # one squeue per 5 s for all jobs: exit records, not squeue, reap normal endings


class SlurmError(OSError):
    """A Slurm command failed (the engine records an OSError from launch as a failed launch)."""


def run_command(argv: list[str], env: dict | None = None, timeout: float = COMMAND_TIMEOUT_S
                ) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise SlurmError(f"{argv[0]} not found: is this a Slurm submit host?") from exc
    except subprocess.TimeoutExpired as exc:
        raise SlurmError(f"{' '.join(argv[:2])} did not answer within {timeout:.0f}s") from exc


def job_name_for(exit_path: Path | str) -> str:
    """``lat-<job dir>-<attempt>-<hash>``: readable in squeue, unique per attempt's exit record."""
    exit_path = Path(exit_path)
    job = re.sub(r"[^A-Za-z0-9_.-]", "_", exit_path.parent.parent.name)[:40]
    attempt = exit_path.name.split(".")[0].replace("attempt-", "a")
    digest = hashlib.sha1(str(exit_path.resolve()).encode()).hexdigest()[:10]
    return f"lat-{job}-{attempt}-{digest}"


def find_submitted(job_name: str, *, since: float | None = None, run=run_command) -> int | None:
    """The newest Slurm job id with this name that is queued or running (``squeue``); with ``since``
    (epoch seconds), also one submitted since then that already ended (``squeue -t all``, then
    ``sacct``). None when nothing was submitted."""
    ids = _ids(run(["squeue", "-h", "--name", job_name, "-o", "%i"]))
    if not ids and since is not None:
        out = run(["squeue", "-h", "-t", "all", "--name", job_name, "-o", "%i|%V"])
        ids = [job for job, submitted in _id_times(out) if submitted >= since - 5]
        if not ids:
            start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 5))
            ids = _ids(run(["sacct", "-X", "-n", "-P", "--name", job_name, "-S", start, "-o", "JobID"]))
    return max(ids) if ids else None


def _ids(out) -> list[int]:
    """Job ids; an array's ``123_4`` / ``123_[0-2]`` count as its job id 123."""
    return [int(m.group()) for x in out.stdout.split() if (m := _JOB_ID.match(x))] if out.returncode == 0 else []


def _id_times(out) -> list[tuple[int, float]]:
    found = []
    for line in out.stdout.splitlines() if out.returncode == 0 else []:
        job, _, stamp = line.strip().partition("|")
        try:
            found.append((int(job.split("_")[0]), time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))))
        except ValueError:
            continue
    return found


class SlurmBackend(Backend):
    name = "slurm"
    recovers_from_queue = True
    diagnoses_failures = True
    runs_fused_groups = True

    def __init__(self, *, python: str | None = None, run=run_command, where: str | None = None, **options):
        self.options: SlurmOptions = validate_options(options, where=where)
        self._python = python or sys.executable
        self._run = run
        self._gres_kind: str | None = None
        self._queue: tuple[float, dict[str, str]] = (0.0, {})

    def with_options(self, overrides: dict) -> "SlurmBackend":
        """This backend with some options replaced for one job (a remedy's ``time`` or ``mem``);
        it shares the Slurm queries of the run's backend."""
        checked = validate_options(overrides)
        twin = copy.copy(self)
        twin.options = dataclasses.replace(self.options, **{k: getattr(checked, k) for k in overrides})
        return twin

    @property
    def nodes_per_job(self) -> int:
        return self.options.nodes

    @property
    def pack_size(self) -> int:
        return self.options.pack

    @property
    def submits_arrays(self) -> bool:
        """``slurm.array: true``: the jobs of one admission pass go to sbatch as one array."""
        return self.options.array is True

    # ------------------------------------------------------------------ submission
    def launch(self, argv, env, job_dir, exit_path, show_env=(), *, world=1, pack=1) -> Launched:
        job_dir, exit_path = Path(job_dir), Path(exit_path)
        name = job_name_for(exit_path)
        existing = find_submitted(name, run=self._run)
        if existing is not None:  # submitted before an engine crash: adopt, never submit twice
            return Launched(existing, time.time())
        exit_path.parent.mkdir(parents=True, exist_ok=True)
        AttemptFiles(exit_path).clear_runner_files(job_dir)
        script = AttemptFiles(exit_path).instead_of_exit(".sbatch")
        script.write_text(self.batch_script(argv, exit_path, show_env))
        command = [f"--comment=lat {exit_path}", f"--chdir={job_dir}", f"--output={job_dir / TRAIN_LOG}",
                   *self.options.packed(pack).sbatch_args(self.gres_request(env, world, pack)), str(script)]
        return Launched(*self._sbatch(name, command, self._submit_env(env, world)))

    def launch_many(self, specs: list[LaunchSpec]) -> list[Launched | OSError]:
        """Each spec's launch (or why it failed), in order: specs with the same gres request go into
        one job array when there are at least two of them (and their environments split safely)."""
        groups: dict[str | None, list[int]] = {}
        for i, spec in enumerate(specs):
            groups.setdefault(self.gres_request(spec.env, spec.world), []).append(i)
        launched: dict[int, Launched | OSError] = {}
        for gres, members in groups.items():
            envs = [self._submit_env(specs[i].env, specs[i].world) for i in members]
            split = split_envs(envs) if len(members) > 1 else None
            try:
                if split is None:
                    launched.update({i: self.launch(*_fields(specs[i]), world=specs[i].world) for i in members})
                else:
                    launched.update(zip(members, self._submit_array([specs[i] for i in members], gres, *split)))
            except OSError as exc:  # the other groups went in: only this one's jobs failed
                launched.update({i: exc for i in members if i not in launched})
        return [launched[i] for i in range(len(specs))]

    def _submit_array(self, specs: list[LaunchSpec], gres: str | None, shared: dict,
                      tasks: list) -> list[Launched]:
        first = Path(specs[0].exit_path)
        name = f"{job_name_for(first)}-x{len(specs)}"
        tasks_dir = first.parent / f"{name}.tasks"
        tasks_dir.mkdir(parents=True, exist_ok=True)
        commands = []
        for i, spec in enumerate(specs):
            exit_path, job_dir = Path(spec.exit_path), Path(spec.job_dir)
            exit_path.parent.mkdir(parents=True, exist_ok=True)
            marker_path(exit_path).write_text(f"{name} {i}\n")
            link = tasks_dir / f"{i}.log"
            link.unlink(missing_ok=True)
            link.symlink_to(job_dir / TRAIN_LOG)
            commands.append(self.runner_command(spec.argv, exit_path, spec.show_env))
        existing = find_submitted(name, run=self._run)
        if existing is not None:  # submitted before an engine crash: adopt, never submit twice
            return [Launched(task_id(existing, i), time.time()) for i in range(len(specs))]
        for spec in specs:
            AttemptFiles(spec.exit_path).clear_runner_files(Path(spec.job_dir))
        script = tasks_dir / "array.sbatch"
        script.write_text(array_script(commands, [Path(s.job_dir) for s in specs], tasks))
        env = {**shared, **{k: v for task in tasks for k, v in task.exported.items()}}
        command = [f"--array=0-{len(specs) - 1}", f"--comment=lat array {first}", f"--chdir={specs[0].job_dir}",
                   f"--output={tasks_dir}/%a.log", *self.options.sbatch_args(gres), str(script)]
        job_id, submitted = self._sbatch(name, command, env)
        return [Launched(task_id(job_id, i), submitted) for i in range(len(specs))]

    def _sbatch(self, name: str, args: list[str], env: dict) -> tuple[int, float]:
        """(Slurm job id, submit time); a submission that failed after all is found by its name."""
        command = ["sbatch", "--parsable", f"--job-name={name}", "--open-mode=append", "--export=ALL",
                   "--no-requeue", *args]
        submitted = time.time()
        try:
            out = self._run(command, env=env)
        except SlurmError:
            out = None
        if out is None or out.returncode != 0:
            found = find_submitted(name, run=self._run)  # sbatch may have failed after submitting
            if found is not None:
                return found, submitted
            raise SlurmError(f"sbatch failed: {(out.stderr or out.stdout).strip() if out else 'no answer'}")
        self._queue = (0.0, {})
        return int(out.stdout.strip().split(";")[0]), submitted

    def batch_script(self, argv, exit_path, show_env=()) -> str:
        """The runner command, exactly as the local backend starts it; ``exec`` so that Slurm's
        signals reach the runner, which forwards them to the trainer and records the exit. A job on
        several nodes first finds its rendezvous: the batch script runs on the allocation's first
        node, so the port is chosen there (the engine's host never decides it)."""
        return ("#!/bin/bash\n# submitted by lat_core.engine.backends.slurm; the environment comes from sbatch\n"
                + (self._rendezvous_lines() if self.options.nodes > 1 else "")
                + f"exec {shlex.join(self.runner_command(argv, exit_path, show_env))}\n")

    def _rendezvous_lines(self) -> str:
        """torchrun's c10d rendezvous on the first node of the allocation, at a port free there, for
        the torchrun that srun starts on each node (torchrun reads ``PET_<OPTION>`` for an option
        it was not given)."""
        free_port = 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
        return (f"# {self.options.nodes} nodes: one torchrun a node (srun), meeting on the first node\n"
                'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
                f"port=$({shlex.quote(self._python)} -c {shlex.quote(free_port)})\n"
                'export PET_RDZV_ENDPOINT="$head:$port" PET_RDZV_ID="lat-$SLURM_JOB_ID"\n')

    def runner_command(self, argv, exit_path, show_env=()) -> list[str]:
        return [self._python, "-m", "lat_core.runner", "--exit-file", str(exit_path),
                "--show-env", ",".join(show_env), "--", *argv]

    def _submit_env(self, env: dict, world: int = 1) -> dict:
        """The engine's environment plus the job's, without the engine's own Slurm job context and
        without a device pin: Slurm sets CUDA_VISIBLE_DEVICES for the GPUs it allocates."""
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "LAT_ARRAY_"))}
        merged = {**base, **env, "PYTHONUNBUFFERED": "1"}
        if self.gres_request(env, world):
            merged.pop("CUDA_VISIBLE_DEVICES", None)
        return merged

    def gres_request(self, env: dict, world: int = 1, pack: int = 1) -> str | None:
        """``gpu:N`` (N: the job's processes, at least ``gpus_per_job``; on several nodes, its
        processes on each; times ``pack`` for a warm pack of that many jobs), ``shard:1`` for one
        process where shards are used (``shard:K`` for a pack), or None (a CPU job, or ``gres: none``)."""
        if self.options.gres == "none" or env.get("CUDA_VISIBLE_DEVICES") == "":
            return None
        nodes = self.options.nodes
        gpus = world // nodes if nodes > 1 else max(world, self.options.gpus_per_job)  # per node
        return f"shard:{pack}" if gpus == 1 and self.gres_kind() == "shard" else f"gpu:{gpus * pack}"

    def gres_kind(self) -> str:
        """``gres: auto`` takes shards where the cluster defines them; ``shard`` insists on them."""
        if self._gres_kind is None:
            wanted = self.options.gres
            if wanted in ("shard", "auto"):
                has = self.cluster_has_shards()
                if wanted == "shard" and not has:  # an OSError: the engine fails the launch, not itself
                    raise SlurmError("plan field 'slurm.gres': 'shard' but the cluster defines no gres/shard "
                                     f"(sinfo -o %G: {self._sinfo_gres() or 'none'}); use gres: gpu")
                wanted = "shard" if has else "gpu"
            self._gres_kind = wanted
        return self._gres_kind

    def cluster_has_shards(self) -> bool:
        return any(g.split(":")[0] == "shard" for g in re.split(r"[,\s]+", self._sinfo_gres()) if g)

    def _sinfo_gres(self) -> str:
        partition = [f"--partition={self.options.partition}"] if self.options.partition else []
        out = self._run(["sinfo", "-h", "-o", "%G", *partition])
        return " ".join(out.stdout.split()) if out.returncode == 0 else ""

    def why_cold(self) -> str:
        return ("each job is a Slurm job of its own on a node this engine does not run on, where its process "
                "imports torch, transformers and peft itself; a fused group is one process, so its members "
                "share one start")

    def warm_history(self) -> str:
        if self.options.pack > 1:
            return (f"packs: up to {self.options.pack} jobs that do not fuse share one Slurm job, which imports "
                    "torch, transformers and peft once on its node and forks each job on its own GPUs (slurm.pack)")
        return super().warm_history()

    def fused_launch_note(self, pid: int | str) -> str:
        return f" as Slurm job {pid}"

    # ------------------------------------------------------------------ state
    def is_alive(self, pid, pid_start) -> bool:
        """Pending or running in Slurm. Unknown (controller unreachable) counts as alive, so a
        Slurm hiccup never turns into a failed job; a job Slurm no longer knows is dead."""
        if not pid:
            return False
        state = self.queue_state(pid)
        return state is None or is_active(state)

    def queue_state(self, job_id: int | str) -> str | None:
        """Slurm's state word for the job (or array task ``123_4``), ``""`` when Slurm no longer knows
        it, None when unknown. One ``squeue`` serves every job of a tick; a job missing from it is
        asked for by id."""
        job_id = str(job_id)
        stamp, states = self._queue
        if time.time() - stamp > QUEUE_CACHE_S:
            out = self._try(["squeue", "-h", "-r", "-t", "all", "-u", getpass.getuser(), "-o", "%i|%T"])
            if out is not None and out.returncode == 0:
                states = dict(_id_state(line) for line in out.stdout.splitlines() if "|" in line)
                self._queue = (time.time(), states)
        if job_id in states:
            return states[job_id]
        out = self._try(["squeue", "-h", "-r", "-t", "all", "-j", job_id, "-o", "%T"])
        if out is None:
            return None
        if out.returncode != 0:
            return "" if "Invalid job id" in out.stderr else None
        return out.stdout.strip()

    def signal(self, pid, signum) -> bool:
        """SIGTERM (and other signals) to every process of the job, the runner included; a pending
        job is simply cancelled; SIGKILL ends the job outright."""
        job = str(pid)
        if self.queue_state(job) == "PENDING":
            return self._ok(["scancel", job])
        name = _signal.Signals(signum).name.removeprefix("SIG")
        sent = self._ok(["scancel", f"--signal={name}", "--full", job])
        if signum == _signal.SIGKILL:
            sent = self._ok(["scancel", job]) or sent
        self._queue = (0.0, {})
        return sent

    def final_state(self, job_id, wait_s: float = 0.0) -> dict | None:
        """``{job_id, state, state_raw, exit_code, signal, elapsed, elapsed_s}`` from sacct (or from
        scontrol where there is no accounting); with ``wait_s``, waits that long for a final state."""
        deadline = time.time() + wait_s
        while True:
            final = self._sacct(job_id) or self._scontrol(job_id)
            if final is None or not is_active(final["state"]) or time.time() >= deadline:
                return final
            time.sleep(0.5)

    def diagnose(self, job_id, wait_s: float = 5.0):
        """A triage Diagnosis when Slurm itself stopped the job (time limit, memory, node, ...)."""
        final = self.final_state(job_id, wait_s=wait_s)
        return slurm_diagnosis(final, self.options) if final else None

    def recover(self, exit_path, since: float | None) -> Launched | None:
        """For an engine that crashed between recording an attempt and its job id (or task id)."""
        array = read_marker(Path(exit_path))
        found = find_submitted(array[0] if array else job_name_for(exit_path), since=since, run=self._run)
        if found is None:
            return None
        return Launched(task_id(found, array[1]) if array else found, since or time.time())

    def find_submitted(self, job_name: str, since: float | None = None) -> int | None:
        return find_submitted(job_name, since=since, run=self._run)

    # ------------------------------------------------------------------ helpers
    def _sacct(self, job_id) -> dict | None:
        out = self._try(["sacct", "-j", str(job_id), "--parsable2", "--noheader",
                         "--format=JobID,State,ExitCode,Elapsed"])
        return parse_sacct(out.stdout, job_id) if out is not None and out.returncode == 0 else None

    def _scontrol(self, job_id) -> dict | None:
        out = self._try(["scontrol", "show", "job", "-o", str(job_id)])
        return parse_scontrol_job(out.stdout, job_id) if out is not None and out.returncode == 0 else None

    def _try(self, argv):
        try:
            return self._run(argv)
        except SlurmError:
            return None

    def _ok(self, argv) -> bool:
        out = self._try(argv)
        return out is not None and out.returncode == 0


def _id_state(line: str) -> tuple[str, str]:
    job, _, state = line.strip().partition("|")
    return job, state


def _fields(spec: LaunchSpec) -> tuple:
    return spec.argv, spec.env, spec.job_dir, spec.exit_path, spec.show_env

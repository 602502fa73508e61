"""Fused groups and warm start on Slurm, without a cluster: where ``fuse: auto`` groups jobs, whose
end Slurm's word on a group's job describes, and the run's one line on why its jobs start cold
(the live side: tests/integration/test_slurm_fused.py)."""
from pathlib import Path

from lat_core.contract.devices import cluster_device, cpu_device
from lat_core.contract.jobdir import AttemptFiles, ExitRecord, GroupRef
from lat_core.contract.journal import Store
from lat_core.contract.rows import AttemptRow
from lat_core.contract.states import HistoryKind
from lat_core.engine.backends.local import LocalBackend
from lat_core.engine.backends.slurm import SlurmBackend
from lat_core.engine.fusion import fuses_on, jobs_see_no_gpu
from lat_core.engine.recovery import _ended_with_its_process
from lat_core.engine.warm import WarmStarts


class _Plan:
    def __init__(self, fuse="auto", warm_start=True):
        self.fuse, self.warm_start = fuse, warm_start


def test_auto_fuses_a_slurm_plans_gpu_jobs_and_runs_its_cpu_jobs_alone():
    gpu_cluster, cpu_cluster = cluster_device(8, gpus=True), cluster_device(8, gpus=False)  # gres: gpu / none
    assert not jobs_see_no_gpu(gpu_cluster) and jobs_see_no_gpu(cpu_cluster) and jobs_see_no_gpu(cpu_device(2))
    assert fuses_on(_Plan("auto"), jobs_see_no_gpu(gpu_cluster))
    assert not fuses_on(_Plan("auto"), jobs_see_no_gpu(cpu_cluster))  # as on this host's CPU
    assert fuses_on(_Plan(True), jobs_see_no_gpu(cpu_cluster))


def test_both_backends_run_fused_groups_and_only_local_forks_warm():
    assert LocalBackend.runs_fused_groups and SlurmBackend.runs_fused_groups
    assert LocalBackend().why_cold() is None
    assert "Slurm job of its own" in SlurmBackend().why_cold()


def _attempt(tmp_path: Path, name: str, record: ExitRecord | None, in_group: bool) -> AttemptRow:
    exit_path = tmp_path / name / ".lat" / "attempt-1.exit.json"
    exit_path.parent.mkdir(parents=True)
    files = AttemptFiles(exit_path)
    if in_group:
        files.write_group_ref(GroupRef(str(tmp_path / "lead" / ".lat" / "group-attempt-1.exit.json"), (1, 2)))
    if record is not None:
        files.write_exit(record)
    return AttemptRow(id=1, job_id=1, n=1, device="slurm", pid=42, pid_start=0.0, launched=0.0, ended=None,
                      returncode=None, exit_path=str(exit_path))


def test_slurms_word_on_a_groups_job_is_a_members_only_where_the_group_ended_it(tmp_path):
    """A member that exited with its own error failed alone while the group's job ran on for the
    others; one stopped by a signal to the group (Slurm's time limit, scancel) or still in the group
    when its process ended ended with the group's job."""
    cases = {"alone": (ExitRecord(1), False, True), "own_error": (ExitRecord(2, fused_group=True), True, False),
             "sigterm_to_group": (ExitRecord(-15, fused_group=True), True, True),
             "group_died": (ExitRecord(None, fused_group=True), True, True), "no_record": (None, True, True)}
    for name, (record, in_group, expected) in cases.items():
        attempt = _attempt(tmp_path, name, record, in_group)
        assert _ended_with_its_process(attempt, AttemptFiles(attempt.exit_path).read_exit()) is expected, name


def test_a_slurm_runs_history_says_once_why_its_jobs_start_cold(tmp_path):
    store = Store(tmp_path / "state" / "journal.sqlite")
    run_id = store.create_run("backend: slurm\n", str(tmp_path / "out"), [cluster_device(4, gpus=True)], 0.0)
    starts = WarmStarts(store, allowed=True, plan_of=lambda _: _Plan(), backend_of=lambda _: SlurmBackend())
    for _ in range(3):
        starts.prepare(store.run(run_id))
    said = [t.detail for t in store.transitions(run_id) if t.new_state == HistoryKind.WARM_START]
    assert said == [f"not used: {SlurmBackend().why_cold()}"]
    quiet = WarmStarts(store, allowed=True, plan_of=lambda _: _Plan(warm_start=False),
                       backend_of=lambda _: SlurmBackend())
    other = store.create_run("backend: slurm\nwarm_start: false\n", str(tmp_path / "o2"), [cluster_device(4, gpus=True)], 0.0)
    quiet.prepare(store.run(other))  # warm start turned off: nothing to explain
    assert not [t for t in store.transitions(other) if t.new_state == HistoryKind.WARM_START]

"""Warm packs on Slurm without a cluster (plan ``slurm.pack``): the option, which jobs share a pack,
the pack's command and Slurm request, each member's share of the GPUs, and a pack's member out of
memory retried as a job alone (the live side: tests/integration/test_slurm_pack.py)."""
import sys
from dataclasses import replace

import pytest

from lat_core.config.slurm_options import option_problems, validate_options
from lat_core.contract.devices import cluster_device
from lat_core.contract.diagnosis import Diagnosis
from lat_core.contract.failure_classes import FailureClass
from lat_core.contract.jobdir import AttemptFiles, GroupRef, JobDir
from lat_core.contract.journal import Store
from lat_core.contract.states import JobState
from lat_core.engine.groups import FusedGroups
from lat_core.engine.backends.slurm import SlurmBackend
from lat_core.engine.pack import pack_argv, pack_key
from lat_core.errors import PlanError
from lat_core.train.pack import Member, parse_args, split_gpus
from tests.unit.test_cli_text import job_record
from tests.unit.test_fusion import job
from tests.unit.test_paths_and_modes import plan_for
from tests.unit.test_plan import configs  # noqa: F401  (fixture)


@pytest.mark.parametrize("bad", [0, 17, "3", 2.5, True, -1])
def test_pack_is_a_whole_number_from_1_to_16(bad):
    assert option_problems({"pack": bad}) == [
        f"plan field 'slurm.pack': expected a whole number from 1 to 16 (jobs sharing one Slurm job and its one "
        f"import of the training stack; 1: none), got {bad!r}"]


def test_pack_defaults_to_off_and_needs_one_node_and_slurm(configs, tmp_path):  # noqa: F811
    assert validate_options({}).pack == 1 and validate_options({"pack": 16}).pack == 16
    assert option_problems({"pack": 2, "nodes": 2}) == [
        "plan field 'slurm.pack': a pack runs on one node, but slurm.nodes is 2: set pack: 1"]
    with pytest.raises(PlanError) as err:
        plan_for(configs, tmp_path / "o", gpus="cpu", slurm={"pack": 4})
    assert "plan field 'slurm.pack': jobs share a Slurm job only on Slurm" in str(err.value)


def test_jobs_of_one_interpreter_environment_and_suite_share_a_pack_whatever_their_configs(tmp_path):
    a = job(tmp_path, "a")
    key = pack_key(a)
    assert key is not None
    assert pack_key(job(tmp_path, "bb", model={"family": "mamba"}, argv_tail=["--resume"])) == key  # unfused alike
    for other in (job(tmp_path, "c", env={"HF_HOME": "/x"}), replace(a, suite="other"), replace(a, world=2),
                  replace(a, backend_options={"time": "20"}), replace(a, argv=[*a.argv, "--dry-run"]),
                  replace(a, argv=["/other/python", *a.argv[1:]])):
        assert pack_key(other) != key


def test_the_pack_command_names_each_members_job_attempt_and_mode(tmp_path):
    a, b = job(tmp_path, "a"), job(tmp_path, "bb", argv_tail=["--resume"])
    argv = pack_argv([a, b], [1, 3])
    assert argv == [sys.executable, "-m", "lat_core.train.pack", "--job-ids", f"{a.id},{b.id}", "--attempts", "1,3",
                    "--modes", "fresh,resume", a.job_dir, b.job_dir]
    args = parse_args(argv[3:])  # what the pack's process reads back
    assert (args.job_ids, args.attempts, args.modes) == ([a.id, b.id], [1, 3], ["fresh", "resume"])
    with pytest.raises(SystemExit):
        parse_args(["--job-ids", "1", "--attempts", "1,1", "--modes", "fresh,fresh", "x", "y"])


@pytest.mark.parametrize("flags", [[], ["--resume"], ["--overwrite"]], ids=["fresh", "resume", "overwrite"])
def test_each_members_trainer_starts_with_the_flags_its_own_command_had(tmp_path, flags):
    """The mode crosses to the pack's process as a word: the member's trainer gets back its flags."""
    member_job = job(tmp_path, "a", argv_tail=flags)
    args = parse_args(pack_argv([member_job], [1])[3:])
    member = Member(tmp_path, member_job.id, 1, args.modes[0], None)
    assert member.request({})["args"][2:] == flags


def test_a_pack_asks_slurm_for_its_members_gpus_memory_and_cpus():
    backend = SlurmBackend(pack=3, mem="16G", cpus_per_task=4, gpus_per_job=2)
    gres = backend.gres_request({}, 1, pack=3)
    assert gres == "gpu:6"
    assert backend.options.packed(3).sbatch_args(gres) == ["--mem=48G", "--cpus-per-task=12", "--gres=gpu:6"]
    assert backend.options.packed(1).sbatch_args(backend.gres_request({})) == [
        "--mem=16G", "--cpus-per-task=4", "--gres=gpu:2"]  # a job alone: as before
    assert SlurmBackend(pack=3, gres="none").gres_request({}, 1, pack=3) is None


def test_each_member_gets_its_own_share_of_the_allocations_gpus(tmp_path):
    assert split_gpus("0,1,2,3,4,5", 3) == ["0,1", "2,3", "4,5"]
    assert split_gpus("3,7", 2) == ["3", "7"]
    assert split_gpus(None, 2) == [None, None] and split_gpus("", 2) == [None, None]  # a CPU pack
    assert split_gpus("0", 2) == [None, None]  # fewer GPUs than members: shared, as a node's
    member = Member(tmp_path, 12, 2, "resume", "2,3")
    request = member.request({"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert request["env"] == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "2,3", "LAT_JOB_ID": "12", "LAT_ATTEMPT": "2"}
    assert request["args"] == ["--cfg", str(tmp_path / "job.yaml"), "--resume"]
    assert request["exit_file"] == str(tmp_path / ".lat" / "attempt-2.exit.json")
    assert request["log"] == str(tmp_path / "train.log") and request["module"] == "lat_core.train"


def test_a_group_ref_says_whether_its_group_is_a_pack():
    ref = GroupRef("/x/.lat/group-attempt-1.exit.json", (1, 2), pack=True)
    assert GroupRef.from_json(ref.to_json()) == ref
    fused = GroupRef("/x/.lat/group-attempt-1.exit.json", (1, 2))
    assert fused.to_json() == {"exit_path": fused.exit_path, "job_ids": [1, 2]}  # as before packs
    assert GroupRef.from_json(fused.to_json()) == fused and not fused.pack


def test_a_pack_member_out_of_memory_is_not_split_into_smaller_groups(tmp_path):
    """A fused member out of memory is requeued to train in smaller groups; a pack's member trained
    in a process of its own, so it is left to the plan's on_oom remedies, as a job alone."""
    store = Store(tmp_path / "state" / "journal.sqlite")
    run_id = store.create_run("backend: slurm\n", str(tmp_path / "out"), [cluster_device(4, gpus=True)], 0.0)
    oom = Diagnosis(FailureClass.CUDA_OOM, "Out of GPU memory", "CUDA out of memory")
    refs = {}
    for pack in (True, False):
        (job_id,) = store.add_jobs(run_id, [job_record(tmp_path, f"p{pack}")])
        exit_path = JobDir(tmp_path / f"p{pack}").attempt(1).exit_path
        exit_path.parent.mkdir(parents=True)
        attempt_id, _ = store.start_attempt(job_id, "slurm", str(exit_path), started=0.0)
        AttemptFiles(exit_path).write_group_ref(GroupRef(str(exit_path.with_name("group-attempt-1.exit.json")),
                                                         (job_id, 99), pack))
        store.set_job_state(job_id, JobState.FAILED, "oom", diagnosis=oom)
        refs[pack] = next(a for a in store.attempts(job_id) if a.id == attempt_id)
    groups = FusedGroups(store)
    assert not groups.split_after_oom(refs[True])
    assert groups.split_after_oom(refs[False])  # a fused member: as before

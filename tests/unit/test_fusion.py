"""Which queued jobs the engine may fuse (lat_core.config.fuse, lat_core.engine.fusion), the group's
command, the member's group file, and memory admission of a group (its members' peaks summed)."""
import sys
from pathlib import Path

import pytest
import yaml

from lat_core.config.job import parse_config
from lat_core.config.fuse import fuse_key, refusal
from lat_core.contract.devices import Device
from lat_core.engine.admission import Admission, AdmissionPolicy
from lat_core.config.memory_prior import job_prior
from lat_core.engine.fusion import (GroupLimit, GroupRef, group_argv, group_limit_path, job_fuse_key, old_runs_alone_path,
                                    read_group_limit, read_group_ref, smaller_limit, write_group_limit, write_group_ref)
from lat_core.monitor.gpu import GpuInfo, GpuSnapshot
from lat_core.contract.rows import JobRow
from lat_core.contract.journal import Store
from lat_core.train.fused.__main__ import parse_args

ROOT = Path(__file__).resolve().parents[2]
GLA = ROOT / "configs/experiments/gla/tiny_lora_qkvo.yaml"


def cfg_raw(**over):
    raw = yaml.safe_load(GLA.read_text())
    for section, values in over.items():
        if isinstance(values, dict):
            raw[section] = {**raw.get(section, {}), **values}
        else:
            raw[section] = values
    return raw


def job(tmp_path, name, env=None, argv_tail=(), **over) -> JobRow:
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.yaml").write_text(yaml.safe_dump({**cfg_raw(**over), "name": name, "output_dir": str(folder)}))
    argv = [sys.executable, "-m", "lat_core.train", "--cfg", str(folder / "job.yaml"), *argv_tail]
    return JobRow(id=len(name), run_id=1, seq=1, key=name, suite="s", round=1, stem=name, seed=1, dataset="tiny-sst2",
                  job_dir=str(folder), state="queued", device=None, attempts=0, started=None, ended=None,
                  returncode=None, last_step=None, last_loss=None, error=None, argv=argv, env=env or {})


def test_ranks_lrs_and_batch_sizes_fuse_other_bases_methods_and_data_do_not(tmp_path):
    key = job_fuse_key(job(tmp_path, "a"))
    assert key is not None
    assert job_fuse_key(job(tmp_path, "b", peft={"r": 16, "alpha": 32}, train={"lr": 1e-3, "batch_size": 3})) == key
    assert job_fuse_key(job(tmp_path, "c", peft={"method": "rslora"})) == key
    for name, over in {"d": {"peft": {"method": "dora"}}, "e": {"train": {"gradient_checkpointing": True}}}.items():
        assert job_fuse_key(job(tmp_path, name, **over)) is None, name
    assert job_fuse_key(job(tmp_path, "f", seed=99)) != key  # a tiny-random base is built from the seed
    assert job_fuse_key(job(tmp_path, "g", data="tiny-cola")) != key  # its tokenizer is built from the data
    assert job_fuse_key(job(tmp_path, "h", model={"dtype": "bfloat16"})) != key
    assert job_fuse_key(job(tmp_path, "i", env={"LAT_X": "1"})) != key  # the group runs with one env
    assert job_fuse_key(job(tmp_path, "j", argv_tail=["--resume"])) != key
    assert job_fuse_key(job(tmp_path, "k", data="samsum")) is None  # generation does not fuse
    fake = job(tmp_path, "l")
    assert job_fuse_key(JobRow(**{**fake.__dict__, "argv": [sys.executable, "trainer.py"]})) is None
    assert job_fuse_key(JobRow(**{**fake.__dict__, "world": 2})) is None
    (Path(fake.job_dir) / "job.yaml").write_text("peft: [")
    assert job_fuse_key(fake) is None  # a broken config: the job alone says what is wrong


def test_the_engine_and_the_fused_trainer_refuse_the_same_adapters(tmp_path):
    from lat_core.config.job import TrainConfigError
    from lat_core.train.fused.members import check_fusable
    for peft in ({"method": "dora"}, {"method": "pissa"}, {"method": "lora", "use_dora": True}):
        cfg = parse_config({**cfg_raw(peft=peft), "output_dir": str(tmp_path)}, environ={})
        assert fuse_key(cfg) is None and refusal(cfg)
        with pytest.raises(TrainConfigError, match="only plain LoRA"):
            check_fusable(cfg)
    check_fusable(parse_config({**cfg_raw(), "output_dir": str(tmp_path)}, environ={}))


def test_group_command_gives_each_member_its_attempt_and_the_trainer_reads_them(tmp_path):
    members = [job(tmp_path, n, argv_tail=["--resume"]) for n in ("a", "bb", "ccc")]
    argv = group_argv(members, [1, 3, 2])
    assert argv[:4] == [sys.executable, "-m", "lat_core.train.fused", "--resume"]
    args = parse_args(argv[3:])
    assert args.resume and args.member_attempts == [1, 3, 2]
    assert [str(d) for d in args.job_dirs] == [m.job_dir for m in members]
    for bad in (["--attempts", "1,2", "x", "y", "z"], ["--attempts", "1,b", "x"], ["--attempts", "0", "x"],
                ["--attempt", "1", "--attempts", "1", "x"]):
        with pytest.raises(SystemExit) as info:
            parse_args(bad)
        assert info.value.code == 2


def test_group_ref_round_trips_and_a_bad_one_reads_as_none(tmp_path):
    exit_path = tmp_path / ".lat" / "attempt-2.exit.json"
    assert read_group_ref(exit_path) is None
    ref = GroupRef(str(tmp_path / "group.exit.json"), (3, 5, 8))
    write_group_ref(exit_path, ref)
    assert read_group_ref(exit_path) == ref
    for bad in ('{"exit_path": 3, "job_ids": []}', '{"exit_path": "x", "job_ids": [true]}', "[", "{}"):
        Path(f"{exit_path}.group").write_text(bad)
        assert read_group_ref(exit_path) is None, bad


def test_group_limit_round_trips_and_only_shrinks(tmp_path):
    assert read_group_limit(tmp_path) is None  # no file: no limit
    limit = GroupLimit(4, "its fused group of 8 ran out of memory (cuda_oom)")
    write_group_limit(tmp_path, limit)
    assert read_group_limit(tmp_path) == limit
    assert smaller_limit(tmp_path, 8, "cuda_oom") == limit
    assert smaller_limit(tmp_path, 3, "cuda_oom") == GroupLimit(1, "its fused group of 3 ran out of memory (cuda_oom)")
    write_group_limit(tmp_path, GroupLimit(2, "x"))
    assert smaller_limit(tmp_path, 8, "host_oom").size == 2  # never grows back


def test_a_corrupt_or_old_group_limit_reads_as_running_alone(tmp_path):
    path = group_limit_path(tmp_path)
    path.parent.mkdir(parents=True)
    for bad in ("[", "{}", '{"size": 0, "why": "x"}', '{"size": true, "why": "x"}', '{"size": 2}', "null"):
        path.write_text(bad)
        limit = read_group_limit(tmp_path)
        assert limit.size == 1 and "is not a group limit" in limit.why, bad
    path.write_bytes(b"\xff\xfe")
    assert read_group_limit(tmp_path).size == 1
    path.unlink()
    old_runs_alone_path(tmp_path).write_text("its fused group of 3 ran out of memory (cuda_oom)\n")
    assert read_group_limit(tmp_path) == GroupLimit(1, "its fused group of 3 ran out of memory (cuda_oom)")


class Probe:
    def __init__(self, total):
        self.gpu = GpuInfo(index=0, uuid="GPU-0", name="g", memory_used=0, memory_total=total)

    def snapshot(self):
        return GpuSnapshot((self.gpu,))


def test_a_groups_memory_is_its_members_measured_peaks_with_one_base(tmp_path):
    GiB = 1 << 30
    store = Store(tmp_path / "journal.sqlite")
    members = [job(tmp_path, n) for n in ("a", "bb", "ccc")]
    for m, gib in zip(members, (10, 15, 30)):
        store.record_config_peak(m.profile_key, gib * GiB, 0)
    admission = Admission(store, Probe(40 * GiB + AdmissionPolicy().gpu_margin), host=lambda: None)
    device = Device(id="gpu0", label="GPU 0", slots=1, env={}, index=0)
    admission.begin([device])
    assert admission.group_blocker(members[:2], device, []) is None  # 25G of 40G
    assert admission.blocker(members[2], device, []) is None  # 30G alone fits
    base = job_prior(members[1].job_dir, {}).gpu_base  # paid once by the group, not once per member
    assert admission.group_estimate([members[1], members[2]]).gpu == 45 * GiB - base
    assert "needs 44.4G GPU memory" in admission.group_blocker([members[1], members[2]], device, [])

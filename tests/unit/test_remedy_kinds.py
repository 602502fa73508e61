"""Typed remedies: every change kind round-trips through JSON, parses from the old ``patch`` form,
and has an applier in the engine that acts (a kind without one fails here, never a silent no-op)."""

import json

import pytest
import yaml

from lat_core.engine.remedy import APPLIERS, Target, apply_change, apply_remedy, would_act
from lat_core.front.plan import Plan
from lat_core.contract.journal import Store
from lat_core.contract.diagnosis import (CHANGE_KINDS, AvoidDevice, BackendOption, ConfigChange, Diagnosis, EnvChange,
                                         Remedy, Resume, SlotsChange, change_from_json, change_to_json)

EXAMPLES = {
    ConfigChange: ConfigChange("train.batch_size", 4), EnvChange: EnvChange("PYTORCH_CUDA_ALLOC_CONF", "x"),
    SlotsChange: SlotsChange(-1), AvoidDevice: AvoidDevice(), Resume: Resume(), BackendOption: BackendOption("time", "60"),
}
DEVICES = [{"id": f"gpu{i}", "slots": 2, "env": {"CUDA_VISIBLE_DEVICES": f"GPU-{i}"}} for i in range(2)]


def test_every_change_kind_has_an_example_here():
    assert set(EXAMPLES) == set(CHANGE_KINDS)


@pytest.mark.parametrize("kind", CHANGE_KINDS, ids=lambda k: k.__name__)
def test_change_json_round_trip(kind):
    change = EXAMPLES[kind]
    assert change_from_json(json.loads(json.dumps(change_to_json(change)))) == change


def test_remedy_parses_its_patch_into_typed_changes():
    remedy = Remedy("mix", "", "", {"train.batch_size": 4, "NCCL_DEBUG": "INFO", "plan.slots_delta": -1,
                                    "plan.exclude_failed_device": True, "plan.resume": True, "plan.slurm.mem": "8G"})
    assert remedy.changes == (ConfigChange("train.batch_size", 4), EnvChange("NCCL_DEBUG", "INFO"), SlotsChange(-1),
                              AvoidDevice(), Resume(), BackendOption("mem", "8G"))
    assert Remedy.from_json(json.loads(json.dumps(remedy.to_json()))) == remedy
    old = {"key": "mix", "change": "", "cost": "", "patch": dict(remedy.patch)}  # a journal from before typed changes
    assert Remedy.from_json(old).changes == remedy.changes


@pytest.mark.parametrize("patch", [{"plan.teleport": True}, {"plan.slurm.time": None}, {"Mixed.Case": 1}])
def test_unknown_patch_keys_raise(patch):
    with pytest.raises(ValueError, match="remedy patch key"):
        Remedy("bad", "", "", patch)


def test_diagnosis_round_trip():
    diagnosis = Diagnosis("cuda_oom", "t", "d", (Remedy("r", "c", "$", {"train.x": 1}),), {"n": 1}, ("line",))
    assert Diagnosis.from_json(json.loads(json.dumps(diagnosis.to_json()))) == diagnosis


@pytest.fixture
def target(tmp_path):
    store = Store(tmp_path / "journal.sqlite")
    plan = Plan.model_validate({"suites": ["t"], "pairs": ["1:d"], "backend": "slurm"}).to_yaml()
    run_id = store.create_run(plan, str(tmp_path), DEVICES, 0)
    (job_dir := tmp_path / "job").mkdir()
    (job_dir / "job.yaml").write_text(yaml.safe_dump({"train": {"batch_size": 8}}))
    [job_id] = store.add_jobs(run_id, [{"key": "k", "suite": "s", "round": 1, "stem": "k", "seed": 1, "dataset": "d",
                                        "job_dir": str(job_dir), "argv": ["train", "--overwrite"], "env": {}}])
    store.set_job_state(job_id, "failed", "", device="gpu0")
    return Target(store, store.run(run_id), store.job(job_id))


def _state(target: Target):
    job = target.store.job(target.job.id)
    return (job.env, job.argv, job.avoid_devices, job.backend_options, target.store.run(target.run.id).devices,
            (target.store.job(job.id).job_dir and open(f"{job.job_dir}/job.yaml").read()))


@pytest.mark.parametrize("kind", CHANGE_KINDS, ids=lambda k: k.__name__)
def test_every_change_kind_has_an_applier_that_acts(kind, target):
    assert kind in APPLIERS
    change = EXAMPLES[kind]
    assert would_act(target.run, target.job, change)
    before = _state(target)
    apply_change(target, change)
    assert _state(target) != before
    fresh = target.store.job(target.job.id)
    assert not would_act(target.store.run(target.run.id), fresh, change) or kind is SlotsChange  # 2 -> 1 -> still 1


def test_a_remedy_with_a_change_that_cannot_act_applies_nothing(target):
    remedies = [Remedy("both", "", "", changes=(EnvChange("A", "1"), BackendOption("time", "two hours")))]
    target.store.set_job_state(target.job.id, "failed", "", diagnosis=Diagnosis("timeout", "", "", tuple(remedies)))
    job = target.store.job(target.job.id)
    with pytest.raises(ValueError, match="slurm.time"):
        apply_remedy(target.store, target.run, job, "both")
    assert target.store.job(job.id).env == {}


def test_a_config_variable_in_a_patch_becomes_the_config_field_it_sets():
    """An engine-launched trainer ignores the env table's variables (job.yaml is resolved), so a remedy
    that names one must change job.yaml, typed as the table parses it."""
    remedy = Remedy("gen", "", "", {"GLA_USE_MAX_NEW_TOKENS": "0", "REPORT_TO": "none", "HF_HUB_OFFLINE": "1"})
    assert remedy.changes == (ConfigChange("eval.use_max_new_tokens", False), ConfigChange("train.report_to", []),
                              EnvChange("HF_HUB_OFFLINE", "1"))

"""LAT_KERNEL_TUNINGS and LAT_KERNEL_TUNINGS_DIR (lat_core.contract.kernel_tunings) cross from a plan's
``env:`` or the launching shell to the trainer: a value the trainer could not use is refused before
anything starts, naming where it came from and the variable; a good one travels with the run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lat_core.config.env import shell_overrides
from lat_core.config.suites import SuiteRegistry
from lat_core.contract import kernel_tunings
from lat_core.contract.kernel_warmup import kernel_env
from lat_core.errors import ConfigError, PlanError
from lat_core.front.jobs import expand
from lat_core.front.warmup import plan_kernel_shapes
from tests.helpers.waits import HANG_S
from tests.unit.test_config_path import make_plan
from tests.unit.test_plan import configs  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]
TABLE = {"gpu": "NVIDIA H200", "kernels": {"fla.ops.k": [{"key": [16, "torch.bfloat16"], "config": {
    "kwargs": {"BK": 32}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}}]}}


def tunings_folder(tmp_path, table: object = TABLE, name="NVIDIA_H200.json") -> Path:
    folder = tmp_path / "tunings"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(table if isinstance(table, str) else json.dumps(table))
    return folder


def bad_folders(tmp_path) -> dict[str, tuple[str, str]]:
    """A case's name -> (the folder's value, what the refusal says)."""
    (tmp_path / "a-file").write_text("x")
    return {
        "missing": (str(tmp_path / "nowhere"), "no such folder"),
        "a file": (str(tmp_path / "a-file"), "not a folder"),
        "relative": ("tunings", "expected an absolute path"),
        "not JSON": (str(tunings_folder(tmp_path / "j", "{not json")), "NVIDIA_H200.json: not a tuning table"),
        "no kernels": (str(tunings_folder(tmp_path / "k", {"gpu": "x"})), "expected a mapping with 'kernels'"),
        "a bad entry": (str(tunings_folder(tmp_path / "e", {"kernels": {"fla.k": [{"key": 16, "config": {}}]}})),
                        "kernel 'fla.k': entry 0: expected a 'key' list"),
    }


CASES = ["missing", "a file", "relative", "not JSON", "no kernels", "a bad entry"]


@pytest.mark.parametrize("switch", ["of", "disabled", "2"])
def test_a_plans_switch_that_is_neither_on_nor_off_is_refused_naming_the_field(configs, tmp_path, switch):
    with pytest.raises(PlanError) as info:
        make_plan(configs, tmp_path, env={"LAT_KERNEL_TUNINGS": switch})
    assert f"field 'env.LAT_KERNEL_TUNINGS': LAT_KERNEL_TUNINGS={switch!r}: expected off" in str(info.value)
    assert "plan.yaml" in str(info.value)


@pytest.mark.parametrize("case", CASES)
def test_a_plans_tunings_folder_that_cannot_be_used_is_refused(configs, tmp_path, case):
    value, expected = bad_folders(tmp_path)[case]
    with pytest.raises(PlanError) as info:
        make_plan(configs, tmp_path, env={"LAT_KERNEL_TUNINGS_DIR": value})
    assert f"field 'env.LAT_KERNEL_TUNINGS_DIR': LAT_KERNEL_TUNINGS_DIR={value!r}: " in str(info.value)
    assert expected in str(info.value)


def test_both_bad_variables_are_reported_at_once(configs, tmp_path):
    with pytest.raises(PlanError) as info:
        make_plan(configs, tmp_path, env={"LAT_KERNEL_TUNINGS": "of", "LAT_KERNEL_TUNINGS_DIR": "rel"})
    assert len(info.value.problems) == 2


@pytest.mark.parametrize("switch", ["off", "OFF", "0", "no", "on", "1", "yes", ""])
def test_good_values_load_and_travel_with_each_job(configs, tmp_path, switch):
    folder = str(tunings_folder(tmp_path))
    env = {"LAT_KERNEL_TUNINGS": switch, "LAT_KERNEL_TUNINGS_DIR": folder}
    plan = make_plan(configs, tmp_path, env=env)
    assert kernel_tunings.from_env(env) == kernel_tunings.KernelTunings(switch.lower() not in ("off", "0", "no"),
                                                                        Path(folder))
    assert all(job.env == env for job in expand(plan, SuiteRegistry(configs)))


def test_the_launching_shells_values_travel_with_the_run_and_a_bad_one_is_refused(configs, tmp_path):
    """Not only through the engine's own environment, which may be another shell's."""
    folder = str(tunings_folder(tmp_path))
    shell = shell_overrides({"LAT_KERNEL_TUNINGS": "off", "LAT_KERNEL_TUNINGS_DIR": folder, "HOME": "/h"})
    assert shell == {"LAT_KERNEL_TUNINGS": "off", "LAT_KERNEL_TUNINGS_DIR": folder}
    assert expand(make_plan(configs, tmp_path), SuiteRegistry(configs), shell)[0].env == shell
    for value, expected in bad_folders(tmp_path).values():
        with pytest.raises(ConfigError) as info:
            expand(make_plan(configs, tmp_path), SuiteRegistry(configs), {"LAT_KERNEL_TUNINGS_DIR": value})
        assert str(info.value).startswith(f"LAT_KERNEL_TUNINGS_DIR={value!r} from the launching shell: ")
        assert expected in str(info.value)


def test_lat_tui_warmup_refuses_a_bad_shell_value_before_it_compiles(configs, tmp_path):
    with pytest.raises(ConfigError, match="LAT_KERNEL_TUNINGS='of' from the launching shell"):
        plan_kernel_shapes(make_plan(configs, tmp_path), SuiteRegistry(configs), {"LAT_KERNEL_TUNINGS": "of"})


def test_the_warm_up_compiles_under_the_jobs_tunings():
    """The engine's preloaded process compiles under the jobs' kernel variables: with another
    table (or none) its configs would not be the ones the jobs seed."""
    env = {"LAT_KERNEL_TUNINGS": "off", "LAT_KERNEL_TUNINGS_DIR": "/t", "HOME": "/h"}
    assert kernel_env(env) == {"LAT_KERNEL_TUNINGS": "off", "LAT_KERNEL_TUNINGS_DIR": "/t"}


@pytest.mark.parametrize("source", ["plan", "shell"])
def test_lat_tui_exits_2_naming_the_source_and_starts_nothing(tmp_path, source):
    out, state = tmp_path / "out", tmp_path / "state"
    plan = {"suites": ["demo"], "pairs": ["1:tiny-sst2"], "gpus": "cpu", "output_root": str(out)}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAT_STATE_DIR": str(state)}
    if source == "plan":
        plan["env"] = {"LAT_KERNEL_TUNINGS": "of"}
    else:
        env["LAT_KERNEL_TUNINGS_DIR"] = str(tmp_path / "nowhere")
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    proc = subprocess.run([sys.executable, "-m", "lat_tui.cli", "--plan", str(tmp_path / "plan.yaml")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 2, proc.stderr
    if source == "plan":
        assert str(tmp_path / "plan.yaml") in proc.stderr
        assert "field 'env.LAT_KERNEL_TUNINGS': LAT_KERNEL_TUNINGS='of'" in proc.stderr
    else:
        assert f"LAT_KERNEL_TUNINGS_DIR={str(tmp_path / 'nowhere')!r} from the launching shell" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists() and not state.exists()

"""Every job reproducible from its folder: env.json's record and `lat-tui rerun JOB_DIR`."""

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from lat_core.errors import OutputPathError
from lat_core.front.rerun import job_env, prepare_rerun
from lat_core.front.service import EngineLock, open_store
from lat_core.train.record import DIFF_LIMIT, config_tree, mask_secrets
from lat_tui.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.org", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture
def configs(tmp_path) -> Path:
    """A user's config tree in git: one suite with the demo's tiny GLA config, then a local edit."""
    root = tmp_path / "configs"
    (root / "experiments" / "gla").mkdir(parents=True)
    (root / "suites").mkdir()
    exp = yaml.safe_load((ROOT / "configs" / "experiments" / "gla" / "tiny_lora_qkvo.yaml").read_text())
    exp["train"].update(max_steps=6, eval_every=3, save_every=3, log_every=1, batch_size=4)
    exp["peft"]["dropout"] = 0.1   # dropout draws random numbers: equal losses need equal seeds and RNG use
    (root / "experiments" / "gla" / "tiny.yaml").write_text(yaml.safe_dump(exp))
    (root / "suites" / "one.yaml").write_text(yaml.safe_dump({"rounds": {1: ["gla/tiny.yaml"]}}))
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "tiny tree")
    with open(root / "suites" / "one.yaml", "a") as fh:
        fh.write("# WANDB_API_KEY: do-not-save-me\n")
    return root


@pytest.fixture
def state(tmp_path):
    """The state dir; the engine a test's front end started is stopped after it (by its lock's pid)."""
    yield tmp_path / "state"
    if EngineLock(tmp_path / "state").is_held():
        os.kill(EngineLock(tmp_path / "state").holder().pid, signal.SIGTERM)


def _step_losses(job_dir: Path) -> dict[int, float]:
    events = [json.loads(line) for line in (job_dir / "events.jsonl").read_text().splitlines()]
    return {e["step"]: e["loss"] for e in events if e["event"] == "step"}


@pytest.mark.slow
def test_rerun_from_the_folder_gives_equal_losses_and_a_full_record(configs, tmp_path, state, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "sk-secret-1")   # a secret in the job's env: masked, then re-supplied
    code = main(["--suite", "one", "--pairs", "5:tiny-sst2", "--gpus", "cpu", "--gpu-plan", "1",
                 "--env", "NUM_DATA_WORKERS=0", "--env", "WANDB_API_KEY=sk-secret-1",
                 "--configs", str(configs), "--output-root", str(tmp_path / "runs"), "--state-dir", str(state)])
    assert code == 0, capsys.readouterr().out
    first = tmp_path / "runs" / "tiny-sst2_seed5" / "tiny"

    record = json.loads((first / "env.json").read_text())
    tree = record["config_tree"]
    assert tree["commit"] == _git(configs, "rev-parse", "HEAD").strip() and tree["dirty"] is True
    assert tree["experiment"] == str((configs / "experiments" / "gla" / "tiny.yaml").resolve())
    assert "+# WANDB_API_KEY: ***" in tree["diff"] and "do-not-save-me" not in json.dumps(record)
    assert "sk-secret-1" not in json.dumps(record)
    assert any(line.startswith("torch==") for line in record["pip_freeze"])
    assert record["accelerator"]["torch"] and record["accelerator"]["gpus"] == []   # CPU here
    data = record["data"]
    assert len(data["examples_sha256"]) == 64 and len(data["files"]) == 2
    assert all(len(h) == 64 for h in data["files"].values())
    assert record["config"]["seed"] == 5 and record["config"]["data"] == "tiny-sst2"

    capsys.readouterr()
    monkeypatch.setenv("WANDB_API_KEY", "sk-secret-1")
    code = main(["rerun", str(first), "--output-root", str(tmp_path / "again"), "--state-dir", str(state)])
    out = capsys.readouterr().out
    assert code == 0, out
    second = tmp_path / "again" / "tiny-sst2_seed5" / "tiny"
    assert f"rerun of {first}" in out
    a, b = _step_losses(first), _step_losses(second)
    assert sorted(a) == [1, 2, 3, 4, 5, 6] and a == b   # same config, seed, data: the same losses exactly
    again = json.loads((second / "env.json").read_text())
    assert again["data"] == record["data"] and again["config_tree"]["commit"] == tree["commit"]
    store = open_store(state)
    runs = store.runs()
    assert len(runs) == 2 and [j.job_dir for j in store.jobs(runs[-1].id)] == [str(second)]
    assert store.jobs(runs[-1].id)[0].env["WANDB_API_KEY"] == "***"   # masked in the journal as ever
    assert "sk-secret-1" not in (second / "command.json").read_text()


def test_rerun_refuses_a_folder_that_is_not_a_job_and_an_existing_target(tmp_path, capsys):
    assert main(["rerun", str(tmp_path), "--state-dir", str(tmp_path / "state")]) == 2
    assert "no readable job.yaml" in capsys.readouterr().err
    job = tmp_path / "runs" / "tiny-sst2_seed1" / "j"
    job.mkdir(parents=True)
    cfg = yaml.safe_load((ROOT / "configs" / "experiments" / "gla" / "tiny_lora_qkvo.yaml").read_text())
    (job / "job.yaml").write_text(yaml.safe_dump({**cfg, "output_dir": str(job), "resolved": True}))
    (tmp_path / "taken" / "tiny-sst2_seed1" / "j").mkdir(parents=True)
    with pytest.raises(OutputPathError, match="exists already"):
        prepare_rerun(job, tmp_path / "taken", "cpu")
    prepared, env = prepare_rerun(job, tmp_path / "new", "cpu")
    assert env.missing == [] and prepared.jobs[0].config["seed"] == 1 and prepared.plan.gpus == "cpu"
    assert not (tmp_path / "new").exists()   # nothing written before the run is created


def test_masked_env_values_come_from_the_callers_environment(tmp_path):
    (tmp_path / "command.json").write_text(json.dumps({"env": {"HP_LR": "0.1", "WANDB_API_KEY": "***",
                                                               "HF_TOKEN": "***"}}))
    env = job_env(tmp_path, {"WANDB_API_KEY": "k"})
    assert env.env == {"HP_LR": "0.1", "WANDB_API_KEY": "k"} and env.missing == ["HF_TOKEN"]


def test_config_tree_outside_git_and_large_diffs(tmp_path):
    plain = tmp_path / "plain.yaml"
    plain.write_text("name: x\n")
    assert config_tree(plain) is None
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "exp.yaml").write_text("name: x\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "x")
    clean = config_tree(repo / "exp.yaml")
    assert clean["dirty"] is False and clean["diff"] == "" and len(clean["commit"]) == 40
    (repo / "exp.yaml").write_text("name: x\n" + "# pad\n" * (DIFF_LIMIT // 4))
    big = config_tree(repo / "exp.yaml")
    assert big["dirty"] and big["diff_truncated"] and len(big["diff"]) == DIFF_LIMIT
    assert mask_secrets("SMTP_PASSWORD=hunter2 HP_LR=0.1") == "SMTP_PASSWORD=*** HP_LR=0.1"


def _job_folder(tmp_path: Path, env: dict[str, str], **over) -> Path:
    """A job folder as the engine leaves it: resolved job.yaml (tiny GLA, 2 steps) and command.json."""
    job = tmp_path / "runs" / "tiny-sst2_seed1" / "j"
    job.mkdir(parents=True)
    cfg = yaml.safe_load((ROOT / "configs" / "experiments" / "gla" / "tiny_lora_qkvo.yaml").read_text())
    cfg["train"].update(max_steps=2, eval_every=2, save_every=2)
    cfg = {**cfg, "seed": 1, "data": "tiny-sst2", "output_dir": str(job), "resolved": True, **over}
    (job / "job.yaml").write_text(yaml.safe_dump(cfg))
    (job / "command.json").write_text(json.dumps({"env": env}))
    return job


def test_rerun_takes_the_seeds_variables_and_only_the_kept_others(tmp_path):
    saved = {"HP_LR": "0.1", "DATALOADER_NUM_WORKERS": "0", "NUM_DATA_WORKERS": "0", "WANDB_API_KEY": "***",
             "PYTHONPATH": "/elsewhere", "LD_LIBRARY_PATH": "/libs", "PATH": "/bin"}
    job = _job_folder(tmp_path, saved)
    _, env = prepare_rerun(job, tmp_path / "new", "cpu", {"WANDB_API_KEY": "k", "PYTHONPATH": "/mine"})
    assert env.env == {"HP_LR": "0.1", "DATALOADER_NUM_WORKERS": "0", "NUM_DATA_WORKERS": "0", "WANDB_API_KEY": "k"}
    assert env.dropped == ["PYTHONPATH", "LD_LIBRARY_PATH", "PATH"]
    prepared, env = prepare_rerun(job, tmp_path / "new", "cpu", {}, keep_env=("PYTHONPATH", "LD_LIBRARY_PATH"))
    assert prepared.plan.env["PYTHONPATH"] == "/elsewhere" and prepared.jobs[0].env["LD_LIBRARY_PATH"] == "/libs"
    assert env.dropped == ["PATH"] and env.missing == ["WANDB_API_KEY"]


@pytest.mark.slow
def test_a_sitecustomize_on_the_saved_pythonpath_never_runs(tmp_path, state, capsys):
    planted = tmp_path / "planted"
    planted.mkdir()
    marker = tmp_path / "sitecustomize-ran"
    (planted / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    job = _job_folder(tmp_path, {"PYTHONPATH": f"{planted}:{ROOT}", "NUM_DATA_WORKERS": "0"})
    code = main(["rerun", str(job), "--output-root", str(tmp_path / "again"), "--state-dir", str(state)])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    assert not marker.exists()   # neither in the engine nor in the job
    assert "not taken from the folder's saved env: PYTHONPATH" in captured.err
    assert (tmp_path / "again" / "tiny-sst2_seed1" / "j" / "checkpoint-2" / "trainer_state.json").is_file()


def _binary(job: Path) -> None:
    (job / "job.yaml").write_bytes(bytes(range(256)))


def _seed_abc(job: Path) -> None:
    (job / "job.yaml").write_text((job / "job.yaml").read_text().replace("seed: 1", "seed: abc"))


def _unresolved(job: Path) -> None:
    """A hand-written job.yaml, with env.json's config that rerun used to fall back to silently."""
    (job / "job.yaml").write_text((job / "job.yaml").read_text().replace("resolved: true", "resolved: false"))
    (job / "env.json").write_text(json.dumps({"config": yaml.safe_load((job / "job.yaml").read_text())}))


def _env_a_list(job: Path) -> None:
    (job / "command.json").write_text(json.dumps({"env": ["PYTHONPATH=/elsewhere"]}))


def _tunings_gone(job: Path) -> None:
    """The job ran with a folder of kernel tunings that is gone since."""
    (job / "command.json").write_text(json.dumps({"env": {"LAT_KERNEL_TUNINGS_DIR": str(job / "gone")}}))


@pytest.mark.parametrize("spoil, flags, needle", [
    (_binary, [], "job.yaml: not UTF-8 text"),
    (_seed_abc, [], "job.yaml: field 'seed': expected an integer, got 'abc'"),
    (_unresolved, [], "job.yaml: field 'resolved': expected true"),
    (_env_a_list, [], "command.json: field 'env': expected a mapping"),
    (_tunings_gone, [], "command.json: field 'env.LAT_KERNEL_TUNINGS_DIR': LAT_KERNEL_TUNINGS_DIR="),
    (None, ["--gpus=-1"], "--gpus: GPU indices must be >= 0"),
    (None, ["--gpus", "0 0"], "--gpus: a GPU is listed twice"),
], ids=["binary", "seed-abc", "unresolved", "env-a-list", "tunings-gone", "gpus-negative", "gpus-twice"])
def test_bad_rerun_inputs_exit_2_naming_the_field_and_start_nothing(tmp_path, capsys, spoil, flags, needle):
    job = _job_folder(tmp_path, {})
    if spoil:
        spoil(job)
    state = tmp_path / "state"
    code = main(["rerun", str(job), "--output-root", str(tmp_path / "again"), "--state-dir", str(state), *flags])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and "Traceback" not in err, err
    assert not state.exists() and not (tmp_path / "again").exists()

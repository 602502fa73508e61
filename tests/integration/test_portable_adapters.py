"""best/ and final/ of every PEFT method LAT ships load with plain PeftModel.from_pretrained on the
unmodified base and reproduce the recorded metrics (issue 27 item 3): a tiny job trains on the CPU,
then a fresh process (tests/helpers/plain_peft_eval.py) rebuilds the base, loads the adapter with
PEFT alone and scores the validation split.

Tolerance: accuracy equal; loss within 1e-5 relative. A converted adapter (LoRA-GA, PiSSA) computes
W + s*(B@A - B0@A0) where training computed (W - s*B0@A0) + s*B@A: the same sum rounded in another
order, float32 differences near 1e-7 of the weights; no method's loss moved by more than ~1e-6 here.

Cost: every method trains once (module fixture) and all their folders are scored in one fresh
process (importing torch, transformers and PEFT is most of such a process's time; it was paid once
per method). The file's tests run in one pytest-xdist worker, one after another (``xdist_group``):
they share the fixture, and four workers no longer sit on four of them at once.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from lat_core.contract.jobdir import Eval, Finished, JobDir
from tests.helpers.waits import HANG_S

pytestmark = pytest.mark.xdist_group("portable_adapters")  # one worker: they share the module fixture

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "configs" / "experiments"
METHODS = {   # name: (tiny experiment, environ)
    "lora": ("gla/tiny_lora_qkvo.yaml", {}),
    "rslora": ("gla/tiny_rslora.yaml", {}),
    "dora": ("gla/tiny_dora.yaml", {}),
    "pissa": ("gla/tiny_pissa.yaml", {}),
    "pissa_fast": ("gla/tiny_pissa.yaml", {"HP_PISSA_FAST": "1"}),   # randomised SVD: PEFT cannot redo it on load
    "loraga": ("gla/tiny_loraga.yaml", {}),
    "mamba_lora": ("mamba/tiny_lora.yaml", {}),
    "sdlora": ("mamba/tiny_sdlora.yaml", {}),
}
MOVES_BASE = {"pissa", "pissa_fast", "loraga"}


def train_tiny(out: Path, experiment: str, environ: dict) -> tuple[Path, list[dict]]:
    from lat_core.config.job import parse_config
    from lat_core.train.loop import run
    raw = yaml.safe_load((EXPERIMENTS / experiment).read_text())
    raw["train"].update(max_steps=6, eval_every=2, save_every=2, log_every=1)
    raw["output_dir"] = str(out)
    out.mkdir(parents=True)
    job_yaml = out / "job.yaml"
    job_yaml.write_text(yaml.safe_dump(raw))
    cfg = parse_config(raw, environ=environ)
    with JobDir(out).event_writer() as events:
        assert run(cfg, events, resume=False, argv=[]).status == "ok"
    return job_yaml, list(JobDir(out).read_events().events)


def plain_peft_metrics(*jobs: tuple[Path, list[Path]]) -> dict[str, dict]:
    """{folder: validation metrics} from one fresh process that knows only PEFT and the base model,
    for each (job.yaml, its folders)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    args = [str(a) for job_yaml, folders in jobs for a in ("--", job_yaml, *folders)]
    done = subprocess.run([sys.executable, "-m", "tests.helpers.plain_peft_eval", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def recorded(events: list, step: int) -> dict:
    (metrics,) = [e.metrics for e in events if isinstance(e, Eval) and e.split == "validation" and e.step == step]
    return metrics


def assert_reloads_as_recorded(job: Path, events: list, loaded: dict[str, dict]) -> None:
    """best/ and final/ score as the trainer recorded at their steps."""
    (finished,) = [e for e in events if isinstance(e, Finished)]
    for folder, step in (("best", finished.best["step"]), ("final", finished.steps)):
        want, got = recorded(events, step), loaded[str(job / folder)]
        assert "error" not in got, got.get("error")
        assert got["accuracy"] == want["accuracy"], (job.name, folder, got, want)
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-5), (job.name, folder, got, want)


@pytest.fixture(scope="module")
def reloaded(tmp_path_factory) -> dict[str, tuple[Path, list, dict] | BaseException]:
    """method -> (its job folder, its events, {folder: metrics in plain PEFT}), or what stopped its
    training (that method's test fails with it; the others are checked all the same)."""
    root = tmp_path_factory.mktemp("portable")
    trained: dict[str, tuple[Path, list] | BaseException] = {}
    for method, (experiment, environ) in METHODS.items():
        try:
            trained[method] = train_tiny(root / method, experiment, environ)
        except Exception as exc:  # kept for the method's own test to raise
            trained[method] = exc
    jobs = [(job_yaml, [job_yaml.parent / "best", job_yaml.parent / "final"])
            for job_yaml, _ in (t for t in trained.values() if not isinstance(t, BaseException))]
    loaded = plain_peft_metrics(*jobs) if jobs else {}
    return {method: t if isinstance(t, BaseException) else (t[0].parent, t[1], loaded)
            for method, t in trained.items()}


@pytest.mark.parametrize("method", list(METHODS))
def test_best_and_final_reload_in_plain_peft_with_the_recorded_metrics(reloaded, method):
    if isinstance(reloaded[method], BaseException):
        raise reloaded[method]
    job, events, loaded = reloaded[method]
    assert_reloads_as_recorded(job, events, loaded)
    for folder in ("best", "final"):
        config = json.loads((job / folder / "adapter_config.json").read_text())
        assert config["init_lora_weights"] is True   # a plain LoRA: nothing recomputed on load
        if method in MOVES_BASE:   # rank 2r: [B, -B0] @ [A; A0]
            assert config["r"] == 16 and (job / "adapter_init" / "adapter_model.safetensors").is_file()


def test_the_conversion_is_peft_own(tmp_path):
    """portable.py's conversion of the saved files equals PEFT's
    save_pretrained(path_initial_model_for_weight_conversion=...) on a PiSSA model trained a little."""
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file

    from lat_core.train.portable import make_portable, save_initial_adapter
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["0", "2"], init_lora_weights="pissa"))
    save_initial_adapter(model, tmp_path)
    # PEFT reads its initial adapter from a folder whose config it rewrites: a copy of ours
    shutil.copytree(tmp_path / "adapter_init", tmp_path / "peft_init")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.add_(0.01 * torch.randn_like(p))
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    model.save_pretrained(str(ours))
    make_portable(ours, tmp_path)
    model.save_pretrained(str(theirs), path_initial_model_for_weight_conversion=str(tmp_path / "peft_init"))
    a, b = (load_file(str(d / "adapter_model.safetensors")) for d in (ours, theirs))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    fields = ("r", "lora_alpha", "init_lora_weights")
    ca, cb = (json.loads((d / "adapter_config.json").read_text()) for d in (ours, theirs))
    assert {k: ca[k] for k in fields} == {k: cb[k] for k in fields} == {"r": 8, "lora_alpha": 16,
                                                                         "init_lora_weights": True}


def test_fused_members_best_and_final_reload_in_plain_peft(tmp_path):
    """A fused group's members (plain LoRA on one shared base) leave best/ and final/ as a job of
    their own does."""
    from lat_core.train.fused.__main__ import main
    from tests.helpers.fused import job_dir, saved_tiny_base
    base = saved_tiny_base(tmp_path / "base")
    dirs = [job_dir(tmp_path, "a", base, peft={"r": 4, "alpha": 8}, seed=3),
            job_dir(tmp_path, "b", base, peft={"r": 8, "alpha": 16, "use_rslora": True}, train={"lr": 5e-3}, seed=5)]
    assert main(["--attempt", "1", *map(str, dirs)]) == 0
    loaded = plain_peft_metrics(*((job / "job.yaml", [job / "best", job / "final"]) for job in dirs))
    for job in dirs:
        assert_reloads_as_recorded(job, list(JobDir(job).read_events().events), loaded)

"""Checkpoints in the Hugging Face formats: TrainerState in trainer_state.json, save_total_limit
(default: the best and the last), and best/ and final/ adapters that PeftModel.from_pretrained loads."""
import json
from pathlib import Path

import pytest
import torch
import yaml

from lat_core.config.job import TrainConfigError, parse_config
from lat_core.contract.jobdir import Eval, JobDir

ROOT = Path(__file__).resolve().parents[3]
GLA = ROOT / "configs/experiments/gla/tiny_lora_qkvo.yaml"


def _train(tmp_path: Path, resume=False, **train) -> Path:
    from lat_core.train.loop import run
    raw = yaml.safe_load(GLA.read_text())
    raw["train"].update({"max_steps": 4, "eval_every": 1, "save_every": 1, **train})
    cfg = parse_config({**raw, "output_dir": str(tmp_path / "job")}, environ={})
    with JobDir(cfg.output_dir).event_writer() as ev:
        assert run(cfg, ev, resume=resume, argv=[]).status == "ok"
    return cfg.output_dir


def _val_scores(out: Path) -> dict[int, float]:
    return {e.step: e.metrics["accuracy"] for e in JobDir(out).read_events().events
            if isinstance(e, Eval) and e.split == "validation"}


def _adapter(path: Path) -> dict:
    from safetensors.torch import load_file
    return load_file(str(path / "adapter_model.safetensors"))


def _load_peft(out: Path, which: str):
    """The job's base model rebuilt as the trainer builds it, with the adapter from out/which."""
    from peft import PeftModel

    from lat_core.train import data as D
    from lat_core.train.models import build_base_model, load_tokenizer
    cfg = parse_config(yaml.safe_load((out / "job.yaml").read_text()) if (out / "job.yaml").is_file()
                       else {**yaml.safe_load(GLA.read_text()), "output_dir": str(out)}, environ={})
    ds = D.load_dataset(cfg.data, cfg.data_dir)
    base = build_base_model(cfg, load_tokenizer(cfg, D.build_tokenizer(ds)))
    return PeftModel.from_pretrained(base, str(out / which))


def test_checkpoints_are_hf_shaped_and_rotated(tmp_path):
    from transformers import TrainerState
    out = _train(tmp_path)
    scores = _val_scores(out)
    best_step = min(scores, key=lambda s: (-scores[s], s))
    kept = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    assert kept == sorted({best_step, 4})
    state = TrainerState.load_from_json(str(out / "checkpoint-4" / "trainer_state.json"))
    assert state.global_step == 4 and state.max_steps == 4
    assert state.best_metric == pytest.approx(scores[best_step]) and state.best_global_step == best_step
    assert state.best_model_checkpoint == str(out / f"checkpoint-{best_step}")
    assert any("loss" in h for h in state.log_history)
    assert any("eval_validation_accuracy" in h for h in state.log_history)
    lat = json.loads((out / "checkpoint-4" / "lat_state.json").read_text())
    assert lat["step"] == 4 and {int(k) for k in lat["val_scores"]} == set(scores)


def test_best_and_final_adapters_load_with_peft(tmp_path):
    out = _train(tmp_path, save_total_limit=None)
    assert len(list(out.glob("checkpoint-*"))) == 4  # null keeps every checkpoint
    scores = _val_scores(out)
    best_step = min(scores, key=lambda s: (-scores[s], s))
    for which, source in (("best", f"checkpoint-{best_step}"), ("final", "checkpoint-4")):
        want = _adapter(out / source)
        got = _adapter(out / which)
        assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
        model = _load_peft(out, which)
        loaded = {n: p for n, p in model.named_parameters() if "lora_" in n}
        assert loaded and all(torch.equal(p.detach(), want[_key(n)]) for n, p in loaded.items())


def _key(name: str) -> str:
    """A loaded PeftModel parameter's name as peft's adapter file spells it."""
    return name.replace(".default", "")


def test_a_resumed_run_still_chooses_the_best_over_all_steps(tmp_path):
    _train(tmp_path, max_steps=2, save_total_limit=None)
    out = _train(tmp_path, resume=True)
    scores = _val_scores(out)
    assert set(scores) == {1, 2, 3, 4}
    lat = json.loads((out / "checkpoint-4" / "lat_state.json").read_text())
    assert {int(k): v for k, v in lat["val_scores"].items()} == pytest.approx(scores)
    best_step = min(scores, key=lambda s: (-scores[s], s))
    assert sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*")) == sorted({best_step, 4})


def test_save_total_limit_must_be_positive_or_null():
    raw = yaml.safe_load(GLA.read_text())
    raw["train"]["save_total_limit"] = 0
    with pytest.raises(TrainConfigError, match="save_total_limit"):
        parse_config({**raw, "output_dir": "/tmp/x"}, environ={})

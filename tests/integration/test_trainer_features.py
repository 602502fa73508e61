"""Trainer features in-process on tiny models: grad accumulation, strict resume, adapters,
generation with left padding, the real dataset readers end to end; DataLoader workers, adaptive
loader settings, lr schedules in step events, epochs, SAVE_OPTIMIZER_STATE=0 resume,
tokens_per_s / peak_gpu_bytes."""
import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from lat_core.train import data as D
from lat_core.config.job import TrainConfigError, parse_config
from lat_core.train.events import EventWriter, read_events
from lat_core.train.loop import run

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "datasets"


def cfg_for(tmp: Path, family="gla", environ=None, **over):
    src = {"gla": "configs/experiments/gla/tiny_lora_qkvo.yaml", "mamba": "configs/experiments/mamba/tiny_lora.yaml"}
    raw = yaml.safe_load((ROOT / src[family]).read_text())
    raw["train"].update(max_steps=6, eval_every=100, save_every=100, log_every=1)
    for section, values in over.items():
        if isinstance(values, dict) and isinstance(raw.get(section), dict):
            raw[section].update(values)
        else:
            raw[section] = values
    raw["output_dir"] = str(tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    return parse_config(raw, environ=environ or {})


def train(cfg, resume=False):
    with EventWriter(cfg.output_dir / "events.jsonl") as ev:
        run(cfg, ev, resume=resume, argv=["--cfg", "x.yaml"])
    return read_events(cfg.output_dir / "events.jsonl")


def losses(evs, after=0):
    return {e["step"]: e["loss"] for e in evs if e["event"] == "step" and e["step"] > after}


def test_grad_accum_matches_full_batch(tmp_path):
    a = losses(train(cfg_for(tmp_path / "a", train={"batch_size": 8, "grad_accum": 1})))
    evs = train(cfg_for(tmp_path / "b", train={"batch_size": 4, "grad_accum": 2}))
    b = losses(evs)
    assert len(a) == 6 and a.keys() == b.keys()
    for s in a:
        assert b[s] == pytest.approx(a[s], rel=1e-4), (s, a, b)
    assert evs[0]["effective_batch_size"] == 8 and evs[0]["grad_accum"] == 2


def test_hp_grad_accum_env_and_validation(tmp_path):
    assert cfg_for(tmp_path, environ={"HP_GRAD_ACCUM": "4"}).train.grad_accum == 4
    with pytest.raises(TrainConfigError, match="grad_accum"):
        cfg_for(tmp_path, train={"grad_accum": 0})
    with pytest.raises(TrainConfigError, match="HP_GRAD_ACCUM"):
        cfg_for(tmp_path, environ={"HP_GRAD_ACCUM": "x"})


def test_strict_resume_equals_uninterrupted(tmp_path):
    over = {"train": {"max_steps": 8, "save_every": 4}, "peft": {"dropout": 0.1}}
    full = losses(train(cfg_for(tmp_path / "full", **over)))
    part = cfg_for(tmp_path / "part", train={"max_steps": 4, "save_every": 4}, peft={"dropout": 0.1})
    train(part)
    resumed = train(cfg_for(tmp_path / "part", **over), resume=True)
    got = losses(resumed, after=4)
    assert sorted(got) == [5, 6, 7, 8]
    for s in got:
        assert got[s] == pytest.approx(full[s], rel=1e-6, abs=1e-7)
    env = json.loads((tmp_path / "part" / "env.json").read_text())
    assert env["python"] and env["packages"]["torch"] and "peft" in env["packages"]
    assert "flash-linear-attention" in env["packages"] and env["command"].endswith("--cfg x.yaml")
    # the first invocation's record stays; the resumed one is appended
    assert len(env["resumes"]) == 1 and env["resumes"][0]["packages"] == env["packages"]
    assert env["at"] <= env["resumes"][0]["at"]


@pytest.mark.parametrize("family", ["gla", "mamba"])
def test_left_padded_generation_equals_single(tmp_path, family):
    from lat_core.train.generate import generate_ids
    from lat_core.train.models import build_base_model
    cfg = cfg_for(tmp_path, family)
    tok = D.build_tokenizer(D.load_dataset("tiny-sst2"))
    model = build_base_model(cfg, tok).eval()
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in
               ["sentence: a good film label:", "sentence: bad label:", "sentence: the movie was not very good at all label:"]]
    kw = {"max_new_tokens": 5, "do_sample": False, "num_beams": 1, "pad_token_id": tok.pad_token_id,
          "eos_token_id": None}
    batched = generate_ids(model, prompts, tok.pad_token_id, kw, batch_size=3)
    alone = [generate_ids(model, [p], tok.pad_token_id, kw, batch_size=1)[0] for p in prompts]
    assert batched == alone and all(len(r) == 5 for r in batched)


def _model(tmp_path, family="gla", environ=None, **peft):
    from lat_core.train.models import build_base_model, wrap_peft
    cfg = cfg_for(tmp_path, family, environ=environ, peft=peft)
    tok = D.build_tokenizer(D.load_dataset("tiny-sst2"))
    base = build_base_model(cfg, tok)
    return cfg, tok, base, wrap_peft(base, cfg, environ=environ or {})


def _batch(tok):
    rows = D.load_dataset("tiny-sst2").train[:4]
    ids = D.label_token_ids(tok, ("negative", "positive"))
    return D.collate(D.encode(rows, tok, ids, 48), tok.pad_token_id), ids


def test_loraga_keeps_output_and_sets_nondefault_init(tmp_path):
    from lat_core.train import adapters as A
    from lat_core.train.loop import mean_loss_fn
    cfg, tok, _, model = _model(tmp_path, method="loraga")
    assert cfg.peft.init_lora_weights == "loraga"
    batch, ids = _batch(tok)
    with torch.no_grad(), model.disable_adapter():
        ref = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    grads = A.estimate_gradients(model, [batch], mean_loss_fn(ids, torch.device("cpu")))
    assert A.apply_loraga(model, grads) == 8  # q,k,v,o x 2 layers
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    _, layer = next(A.lora_layers(model))
    assert layer.lora_B["default"].weight.abs().sum() > 0  # default init has B == 0


@pytest.mark.parametrize("method, check", [
    ("dora", lambda c: c.use_dora), ("rslora", lambda c: c.use_rslora),
    ("pissa", lambda c: c.init_lora_weights == "pissa_niter_4"),
])
def test_peft_methods_configure_peft(tmp_path, method, check):
    _, tok, _, model = _model(tmp_path, method=method, environ={"HP_PISSA_FAST": "1"})
    assert check(model.peft_config["default"])
    batch, _ = _batch(tok)
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    assert torch.isfinite(out).all()


def test_spec_targets_and_layers(tmp_path):
    cfg, _, _, model = _model(tmp_path, spec="lora_qkvo_r8", target_modules=["G", "GK"], layers="last1")
    assert cfg.peft.target_modules == ["g_proj", "gk_proj.0", "gk_proj.1"]
    from lat_core.train.adapters import lora_layers
    names = [n for n, _ in lora_layers(model)]
    assert names and all(".layers.1." in n for n in names) and any("gk_proj.1" in n for n in names)


def test_hp_overrides_peft(tmp_path):
    cfg = cfg_for(tmp_path, environ={"HP_PEFT_R": "4", "HP_PEFT_ALPHA": "8", "HP_PEFT_DROPOUT": "0.05",
                                     "HP_INIT": "pissa", "HP_DATA": "rte"})
    p = cfg.peft
    assert (p.r, p.alpha, p.dropout, p.init_lora_weights, cfg.data) == (4, 8.0, 0.05, "pissa", "rte")


@pytest.mark.parametrize("family, targets, env, needle", [
    ("mamba", ["out_proj"], {}, "out_proj"),
    ("mamba", ["dt_proj"], {}, "dt_proj"),
    ("gla", ["MLP"], {"GLA_USE_FUSED_SWIGLU": "1"}, "GLA_USE_FUSED_SWIGLU"),
])
def test_refusals(tmp_path, family, targets, env, needle):
    with pytest.raises(TrainConfigError, match=needle):
        _model(tmp_path, family, environ=env, target_modules=targets)


def test_sdlora_trains_only_selected_channels(tmp_path):
    cfg = cfg_for(tmp_path, "mamba", peft={"method": "sdlora", "target_modules": ["in_proj", "x_proj"],
                                           "sdlora_warmup_steps": 2},
                  train={"max_steps": 3, "save_every": 3})
    from lat_core.train.models import build_base_model
    base = build_base_model(cfg, D.build_tokenizer(D.load_dataset("tiny-sst2")))
    before = {n: p.detach().clone() for n, p in base.named_parameters() if n.endswith(("A_log", ".D"))}
    evs = train(cfg)
    assert evs[-1]["event"] == "finished"
    from safetensors.torch import load_file
    saved = load_file(str(tmp_path / "checkpoint-3" / "extra_trainable.safetensors"))
    a_logs = [k for k in saved if k.endswith("A_log")]
    assert a_logs and any(k.endswith(".D") for k in saved)
    for k in a_logs:
        changed = (saved[k] != before[k.replace("base_model.model.", "")]).float().mean().item()
        assert 0 < changed <= 0.11 * 0.5, (k, changed)  # ~10% channels (ceil) x 50% states


@pytest.mark.parametrize("data, keys", [
    ("glue-tvt_stsb", {"pearson", "spearman"}), ("glue-tvt_mnli", {"accuracy"}),
    ("glue-tvt_cola_10", {"mcc", "accuracy"}), ("samsum", {"rouge1", "rouge2", "rougeL", "rougeLsum"}),
    ("dart", {"bleu", "meteor", "sacrebleu"}), ("spider", {"exact_match", "exec_accuracy"}),
])
def test_datasets_end_to_end(tmp_path, monkeypatch, data, keys):
    for var, sub in (("GLUE_LOCAL_DIR", "glue"), ("SAMSUM_LOCAL_DIR", "samsum"), ("DART_LOCAL_DIR", "dart"),
                     ("SPIDER_LOCAL_DIR", "spider")):
        monkeypatch.setenv(var, str(FIX / sub))
    cfg = cfg_for(tmp_path, data=data, train={"max_steps": 2, "eval_every": 2}, eval={"gen_max_length": 4})
    evs = train(cfg)
    ev = {e["split"]: e for e in evs if e["event"] == "eval"}
    assert set(ev) == {"validation", "test"}
    assert keys <= set(ev["validation"]["metrics"]) and keys <= set(ev["test"]["metrics"])
    if data == "glue-tvt_mnli":
        assert "accuracy_mm" in ev["test"]["metrics"]
    assert (tmp_path / "predictions" / "step-2-test.jsonl").is_file()
    assert (tmp_path / "predictions" / "step-2-validation.jsonl").is_file()


# --- DataLoader, schedules, epochs, optimizer-less checkpoints ---------------------------------
def make_cfg(tmp: Path, environ=None, drop=(), **train):
    raw = yaml.safe_load((ROOT / "configs/experiments/gla/tiny_lora_qkvo.yaml").read_text())
    for key in drop:
        raw["train"].pop(key)
    raw["train"].update({"max_steps": 6, "eval_every": 100, "save_every": 100, "log_every": 1, **train})
    raw["output_dir"] = str(tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    return parse_config(raw, environ=environ or {})


def step_events(evs):
    return {e["step"]: e for e in evs if e["event"] == "step"}


def test_workers_equal_in_process_and_adaptive_settings(tmp_path, capsys):
    # threshold 100 < 200 tiny-sst2 examples: the "large dataset" rule applies to unset fields
    a = train(make_cfg(tmp_path / "a", drop=("num_workers",), large_dataset_threshold=100))
    out = capsys.readouterr().out
    assert "dataloader: large training set (200 >= train.large_dataset_threshold 100)" in out
    dl = a[0]["dataloader"]
    assert dl["large_dataset"] and dl["source"] == dict.fromkeys(
        ["num_workers", "pin_memory", "persistent_workers", "prefetch_factor"], "auto")
    assert (dl["num_workers"], dl["pin_memory"], dl["persistent_workers"]) == (0, False, False)
    env = {"NUM_DATA_WORKERS": "2", "DATALOADER_PERSISTENT_WORKERS": "1", "DATALOADER_PREFETCH_FACTOR": "3"}
    b = train(make_cfg(tmp_path / "b", env, drop=("num_workers",), large_dataset_threshold=100))
    dl = b[0]["dataloader"]
    assert (dl["num_workers"], dl["persistent_workers"], dl["prefetch_factor"]) == (2, True, 3)
    assert dl["source"] == {"num_workers": "user", "persistent_workers": "user", "prefetch_factor": "user",
                            "pin_memory": "auto"}
    sa, sb = step_events(a), step_events(b)
    assert sorted(sa) == sorted(sb) == [1, 2, 3, 4, 5, 6]
    assert [sa[s]["loss"] for s in sa] == [sb[s]["loss"] for s in sb]   # bit-identical with 2 workers
    for e in list(sa.values()) + list(sb.values()):
        assert e["tokens_per_s"] > 0 and e["tokens"] > 0 and e["peak_gpu_bytes"] == 0 and "lr" in e
    assert a[-1]["event"] == b[-1]["event"] == "finished"


@pytest.mark.parametrize("env, expect", [
    ({"LR_SCHEDULER_TYPE": "linear"}, [1 - s / 6 for s in range(6)]),
    ({"LR_SCHEDULER_TYPE": "constant_with_warmup", "LR_WARMUP_STEPS": "2"}, [0, 0.5, 1, 1, 1, 1]),
    ({"LR_SCHEDULER_TYPE": "cosine", "LR_WARMUP_RATIO": "0.2"},   # ceil(0.2 x 6) = 2 warm-up steps
     [0, 0.5] + [0.5 * (1 + math.cos(math.pi * p / 4)) for p in range(4)]),
])
def test_schedules_in_step_events(tmp_path, env, expect):
    evs = train(make_cfg(tmp_path, env, lr=0.01))
    got = [e["lr"] / 0.01 for e in step_events(evs).values()]
    assert got == pytest.approx(expect, abs=1e-9)
    assert evs[0]["lr_scheduler"] == env["LR_SCHEDULER_TYPE"]


def test_epochs_and_resume_without_optimizer_state(tmp_path, capsys):
    # 200 examples / effective batch 8 x 0.16 epochs = 4 steps; HP_EPOCHS beats the YAML max_steps
    env = {"HP_EPOCHS": "0.16", "SAVE_OPTIMIZER_STATE": "0", "HP_SAVE_STEPS": "2", "HP_LOGGING_STEPS": "2"}
    first = train(make_cfg(tmp_path, env))
    assert first[0]["max_steps"] == 4 and first[0]["epochs"] == 0.16
    assert first[-1]["steps"] == 4 and sorted(step_events(first)) == [1, 2, 4]  # first step, then every 2
    ck = tmp_path / "checkpoint-4"
    assert (ck / "adapter_model.safetensors").is_file() and not (ck / "optimizer.pt").exists()
    capsys.readouterr()
    resumed = train(make_cfg(tmp_path, {**env, "HP_EPOCHS": "0.24"}), resume=True)   # 6 steps in all
    log = capsys.readouterr().out
    start = [e for e in resumed if e["event"] == "started"][-1]
    assert start["resumed_from"] == 4 and start["optimizer_state"] == "fresh"
    assert "optimizer restarts fresh" in log
    assert resumed[-1]["event"] == "finished" and resumed[-1]["steps"] == 6

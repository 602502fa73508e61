"""Trainer options without training: env parsing, epochs -> steps, lr shapes, dataloader choice,
logits_to_keep, gradient checkpointing wiring, trackers, dtype checks."""
import json
from pathlib import Path

import pytest
import torch
import yaml

from lat_core.train import data as D
from lat_core.config.job import TrainConfigError, parse_config, resolve_max_steps

ROOT = Path(__file__).resolve().parents[3]
GLA = ROOT / "configs/experiments/gla/tiny_lora_qkvo.yaml"
MAMBA = ROOT / "configs/experiments/mamba/tiny_lora.yaml"


def cfg(tmp_path, environ=None, src=GLA, drop=(), **train):
    raw = yaml.safe_load(src.read_text())
    for key in drop:
        raw["train"].pop(key, None)
    raw["train"].update(train)
    raw["output_dir"] = str(tmp_path)
    return parse_config(raw, environ=environ or {})


@pytest.mark.parametrize("var, value", [
    ("HP_EPOCHS", "x"), ("HP_EPOCHS", "0"), ("HP_PREC", "fp8"), ("HP_SEED", "one"),
    ("HP_EVAL_STEPS", "0"), ("HP_SAVE_STEPS", "a"), ("HP_LOGGING_STEPS", "-1"),
    ("LR_SCHEDULER_TYPE", "poly"), ("LR_WARMUP_RATIO", "1.5"), ("LR_WARMUP_STEPS", "-2"),
    ("GRADIENT_CHECKPOINTING", "maybe"), ("LOGITS_TO_KEEP", "some"), ("EVAL_ACCUMULATION_STEPS", "x"),
    ("SAVE_OPTIMIZER_STATE", "2"), ("NUM_DATA_WORKERS", "-1"), ("DATALOADER_PIN_MEMORY", "pin"),
    ("DATALOADER_PERSISTENT_WORKERS", "x"), ("DATALOADER_PREFETCH_FACTOR", "0"), ("USE_WANDB", "perhaps"),
    ("REPORT_TO", "mlflow"),
])
def test_env_parse_errors_name_the_variable(tmp_path, var, value):
    with pytest.raises(TrainConfigError, match=var):
        cfg(tmp_path, {var: value})


def test_env_overrides_map_onto_fields(tmp_path):
    c = cfg(tmp_path, {"HP_EPOCHS": "1.5", "HP_PREC": "bf16", "HP_SEED": "7", "HP_EVAL_STEPS": "3",
                       "HP_SAVE_STEPS": "4", "HP_LOGGING_STEPS": "2", "LR_SCHEDULER_TYPE": "Cosine",
                       "LR_WARMUP_RATIO": "0.1", "LR_WARMUP_STEPS": "2", "GRADIENT_CHECKPOINTING": "1",
                       "LOGITS_TO_KEEP": "all", "EVAL_ACCUMULATION_STEPS": "4", "SAVE_OPTIMIZER_STATE": "0",
                       "NUM_DATA_WORKERS": "3", "DATALOADER_PIN_MEMORY": "1",
                       "DATALOADER_PERSISTENT_WORKERS": "true", "DATALOADER_PREFETCH_FACTOR": "6",
                       "USE_WANDB": "1", "HP_MAX_SEQ_LEN": "32"})
    t = c.train
    assert (c.model.dtype, c.seed, t.epochs, t.eval_every, t.save_every, t.log_every) == ("bfloat16", 7, 1.5, 3, 4, 2)
    assert (t.lr_scheduler, t.warmup_ratio, t.warmup_steps, t.gradient_checkpointing) == ("cosine", 0.1, 2, True)
    assert (t.logits_to_keep, t.eval_accumulation_steps, t.save_optimizer_state) == (0, 4, False)
    assert (t.num_workers, t.pin_memory, t.persistent_workers, t.prefetch_factor) == (3, True, True, 6)
    assert t.report_to == ["wandb"] and t.max_seq_len == 32
    assert c.sources["seed"] == "env:HP_SEED" and c.sources["train.report_to"] == "env:USE_WANDB"
    for key, bad in (("lr_scheduler", "poly"), ("warmup_ratio", 1.0), ("prefetch_factor", 0),
                     ("logits_to_keep", -1), ("report_to", ["neptune"]), ("epochs", 0)):
        with pytest.raises(TrainConfigError, match=f"train.{key}"):
            cfg(tmp_path, **{key: bad})


def test_epochs_to_steps_and_precedence(tmp_path):
    # 200 examples, effective batch 8 x 2 = 16: 1.5 epochs -> ceil(300 / 16) = 19 steps
    c = cfg(tmp_path, {"HP_EPOCHS": "1.5", "HP_GRAD_ACCUM": "2"})
    assert resolve_max_steps(c, 200)[0] == 19               # env epochs beat the YAML max_steps
    c = cfg(tmp_path, epochs=2, drop=("max_steps",))
    assert resolve_max_steps(c, 200)[0] == 50                # 2 x 200 / 8
    c = cfg(tmp_path, epochs=2)                              # both in YAML: explicit max_steps wins
    steps, why = resolve_max_steps(c, 200)
    assert steps == 40 and "wins" in why
    c = cfg(tmp_path, {"HP_EPOCHS": "2", "HP_MAX_STEPS": "7"})
    assert resolve_max_steps(c, 200)[0] == 7                 # env max_steps beats env epochs
    assert resolve_max_steps(cfg(tmp_path), 200)[0] == 40    # no epochs: max_steps as given


def test_lr_schedule_shapes(tmp_path):
    from lat_core.train.loop import lr_schedule
    lr = lambda name, **kw: [round(f, 6) for f in (lambda fn: [fn(s) for s in range(1, 11)])(  # noqa: E731
        lr_schedule(cfg(tmp_path, lr_scheduler=name, lr=1.0, **kw), 10)[0])]
    assert lr(None) == [1.0] * 10
    assert lr("linear") == [round(1 - s / 10, 6) for s in range(10)]
    assert lr("constant_with_warmup", warmup_steps=4) == [0, 0.25, 0.5, 0.75] + [1.0] * 6
    cos = lr("cosine", warmup_ratio=0.2)                     # ceil(0.2 x 10) = 2 warm-up steps
    assert cos[:3] == [0, 0.5, 1.0] and all(a > b for a, b in zip(cos[2:], cos[3:])) and cos[-1] > 0


def test_dataloader_settings_large_auto_and_user_wins(tmp_path):
    # a real local dataset of 200,000 tiny rows: the default threshold picks frugal settings
    d = tmp_path / "big"
    d.mkdir()
    (d / "train.jsonl").write_text('{"sentence": "a", "label": 1}\n' * 200_000)
    (d / "validation.jsonl").write_text('{"sentence": "b", "label": 0}\n')
    n = len(D.load_dataset(str(d)).train)
    assert n == 200_000
    auto, line = D.dataloader_settings(cfg(tmp_path / "o", drop=("num_workers",)), n, cuda=True)
    assert auto["large_dataset"] and "200,000 >= train.large_dataset_threshold 200,000" in line
    assert auto["source"] == dict.fromkeys(D.LOADER_FIELDS, "auto") and auto["pin_memory"] is False
    assert auto["num_workers"] == 0 and auto["persistent_workers"] is False
    user, line = D.dataloader_settings(cfg(tmp_path / "o", {"NUM_DATA_WORKERS": "6", "DATALOADER_PIN_MEMORY": "1"}),
                                       n, cuda=True)
    assert (user["num_workers"], user["pin_memory"], user["persistent_workers"], user["prefetch_factor"]) == \
        (6, True, False, 2)
    assert user["source"] == {"num_workers": "user", "pin_memory": "user", "persistent_workers": "auto",
                              "prefetch_factor": "auto"}
    small, line = D.dataloader_settings(cfg(tmp_path / "o", drop=("num_workers",)), n - 1, cuda=True)
    assert not small["large_dataset"] and set(small["source"].values()) == {"default"}
    assert small["pin_memory"] is True and "< 200,000" in line
    off, _ = D.dataloader_settings(cfg(tmp_path / "o", large_dataset_threshold=0), n, cuda=False)
    assert not off["large_dataset"]
    json.dumps(auto)


def _model(tmp_path, src, **train):
    from lat_core.train.models import build_base_model, wrap_peft
    c = cfg(tmp_path, src=src, **train)
    tok = D.build_tokenizer(D.load_dataset("tiny-sst2"))
    return tok, wrap_peft(build_base_model(c, tok), c, environ={})


@pytest.mark.parametrize("src", [GLA, MAMBA], ids=["gla", "mamba"])
def test_logits_to_keep_matches_full_and_checkpointing_non_reentrant(tmp_path, src):
    from lat_core.train.loop import batch_loss, set_logits_to_keep
    tok, model = _model(tmp_path, src, gradient_checkpointing=True)
    funcs = [m._gradient_checkpointing_func for _, m in model.named_modules()
             if getattr(m, "gradient_checkpointing", False) and hasattr(m, "_gradient_checkpointing_func")]
    assert funcs and all(f.keywords == {"use_reentrant": False} for f in funcs)
    model.eval()
    ids = D.label_token_ids(tok, ("negative", "positive"))
    cls = D.collate(D.encode(D.load_dataset("tiny-sst2").train[:4], tok, ids, 48), tok.pad_token_id)
    rows = [{"prompt": "sentence: a good film", "target": "good fun", "refs": []},
            {"prompt": "sentence: bad", "target": "not good at all", "refs": []}]
    gen = D.collate(D.encode_gen(rows, tok, 48, 8), tok.pad_token_id)
    for batch, label_ids in ((cls, ids), (gen, [])):
        out = {}
        for setting in (0, "auto", 12):
            set_logits_to_keep(model, setting)
            loss, n = batch_loss(model, batch, label_ids)
            out[setting] = (loss.item(), n)
        assert out["auto"][1] == out[0][1] and out["auto"][0] == pytest.approx(out[0][0], rel=1e-5)
        assert out[12][0] == pytest.approx(out[0][0], rel=1e-5)
    set_logits_to_keep(model, 0)
    full = batch_loss(model, cls, ids)[0].item()
    set_logits_to_keep(model, 1, "LOGITS_TO_KEEP")   # the seeds' setting: as few as the loss needs
    assert batch_loss(model, cls, ids)[0].item() == pytest.approx(full, rel=1e-5)
    set_logits_to_keep(model, "auto")
    loss, _ = batch_loss(model, cls, ids)
    model.train()
    loss.backward()   # checkpointed backward runs


def test_trackers_tensorboard_optional_wandb_required(tmp_path, monkeypatch):
    import builtins
    import importlib
    from lat_core.train.tracking import Trackers, public_config
    real_import, real_import_module = builtins.__import__, importlib.import_module

    def blocked(name):
        if name.split(".")[0] in ("wandb", "swanlab") or name == "torch.utils.tensorboard":
            raise ImportError(f"No module named {name!r}")

    def no_trackers(name, *a, **kw):
        blocked(name)
        return real_import(name, *a, **kw)

    def import_module(name, package=None):   # huggingface_hub's lazy imports pass a package
        blocked(name)
        return real_import_module(name, package)
    monkeypatch.setattr(builtins, "__import__", no_trackers)
    monkeypatch.setattr(importlib, "import_module", import_module)
    notes = []
    c = cfg(tmp_path, report_to="tensorboard")
    t = Trackers(c, notes.append, environ={})
    assert t.active == [] and "tensorboard skipped" in notes[0]
    from lat_core.train.hf_trainer import training_arguments
    args = training_arguments(c, D.dataloader_settings(c, 200, False)[0], torch.device("cpu"),
                              report_to=t.active)
    assert args.report_to in ([], "none", ["none"])   # the run goes on without the tracker
    for env, name in (({"USE_WANDB": "1"}, "wandb"), ({"USE_SWANLAB": "1"}, "swanlab")):
        with pytest.raises(TrainConfigError, match=f"{name} package is not installed"):
            Trackers(cfg(tmp_path, env), notes.append, environ={"WANDB_API_KEY": "secret-key"})
    pub = json.dumps(public_config(cfg(tmp_path, {"USE_WANDB": "1", "WANDB_API_KEY": "secret-key"})))
    assert "secret-key" not in pub


def test_dtype_check(tmp_path, monkeypatch):
    from lat_core.train.loop import check_dtype
    check_dtype(cfg(tmp_path, {"HP_PREC": "bf16"}), torch.device("cpu"))   # torch trains bf16 on CPU

    def broken(*a, **kw):
        raise RuntimeError('"addmm" not implemented for Half')
    monkeypatch.setattr(torch, "randn", broken)
    with pytest.raises(TrainConfigError, match="HP_PREC: float16 is not supported on cpu"):
        check_dtype(cfg(tmp_path, {"HP_PREC": "fp16"}), torch.device("cpu"))
    with pytest.raises(TrainConfigError, match="model.dtype: float16"):
        check_dtype(_fp16(tmp_path), torch.device("cpu"))


def _fp16(tmp_path):
    raw = yaml.safe_load(GLA.read_text())
    raw["model"]["dtype"] = "float16"
    raw["output_dir"] = str(tmp_path)
    return parse_config(raw, environ={})


class _WorkerTag(D.TrainCollate):
    def __call__(self, examples):
        info = torch.utils.data.get_worker_info()
        return super().__call__(examples), (info.id if info else None)


def test_loader_workers_keep_the_seeded_order():
    examples = [{"input_ids": list(range(1, 2 + i % 5)), "label": i % 2} for i in range(37)]
    runs = {}
    for workers in (0, 2):
        # not persistent: the workers end with the pass, inside this test. Persistent ones lived on in
        # the pytest process, registered with torch's SIGCHLD handler, which raised "DataLoader worker
        # ... killed by signal: Terminated" in a later test's waitpid (CI, 2026-11-27)
        settings = {"num_workers": workers, "pin_memory": False, "persistent_workers": False,
                    "prefetch_factor": 2 if workers else None}
        loader = D.train_loader(examples, settings, 4, 2, seed=3, start_step=2, max_steps=12, pad_id=0)
        loader.collate_fn = _WorkerTag(0)
        runs[workers] = list(loader)
    assert {w for _, w in runs[2]} == {0, 1} and {w for _, w in runs[0]} == {None}
    expected = list(D.train_batches(37, 8, 3, 2, 12))
    # two micro-batches (grad_accum) per step, in the seeded order, whatever the workers
    assert len(runs[0]) == len(runs[2]) == 2 * len(expected) == 20
    for (x, _), (y, _) in zip(runs[0], runs[2]):
        assert all(torch.equal(x[k], y[k]) if torch.is_tensor(x[k]) else x[k] == y[k] for k in x)
    for i, idx in enumerate(expected):
        a, b = runs[0][2 * i][0], runs[0][2 * i + 1][0]
        assert torch.cat([a["labels"], b["labels"]]).tolist() == [examples[j]["label"] for j in idx]
        assert a["n_tokens"] + b["n_tokens"] == sum(len(examples[j]["input_ids"]) for j in idx)
        assert a["n_scored"] == b["n_scored"] == 4


def test_split_micro_keeps_grad_accum_parts():
    assert D.split_micro(list(range(8)), 4, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert D.split_micro(list(range(5)), 4, 2) == [[0, 1, 2], [3, 4]]    # short batch: 2 parts still
    with pytest.raises(TrainConfigError, match="grad_accum"):
        D.split_micro([0], 4, 2)

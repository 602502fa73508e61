"""Known failures beyond OOM: one rule each, from the exact text PyTorch, Triton, transformers,
huggingface_hub, W&B, SwanLab and the trainer print, with a plain diagnosis and ranked remedies.

Each rule fires on the first line of its signature group (``patterns.SIGNATURES``) and returns
None otherwise, so :mod:`lat_core.triage.classify` can try them in its fixed order.
"""

from __future__ import annotations

import re

from lat_core.config.hub_cache import LOCAL_DIR_VARS
from lat_core.contract.jobdir import Failed
from lat_core.triage import remedies as fix
from lat_core.contract.failure_classes import FailureClass as F
from lat_core.triage.facts import Facts, make_diagnosis
from lat_core.contract.diagnosis import Diagnosis
from lat_core.triage.patterns import LogLine
from lat_core.triage.sources import config_value

DATASET_DIRS = LOCAL_DIR_VARS  # the trainer's table (lat_core.config.hub_cache), torch-free


def _first(facts: Facts, group: str) -> tuple[str, LogLine] | None:
    """``(kind, line)`` of the group's first match, or None."""
    hit = facts.first_hit(group)
    return (hit[0].kind, hit[1]) if hit else None


def cuda_library_oom(facts: Facts) -> Diagnosis | None:
    found = _first(facts, "cuda_lib_oom")
    if found is None:
        return None
    kind, line = found
    library = "cuBLAS" if kind.startswith("cublas") else "cuDNN"
    text = (f"{library} could not allocate its workspace on the GPU ({line.text.strip()}). This is a CUDA "
            "out-of-memory by another name: the library asks the driver directly, so PyTorch's allocator "
            "never printed its numbers. The usual OOM remedies apply.")
    remedies = fix.cuda_oom_remedies(facts.files.config, facts.files.env, "unknown", {})
    return make_diagnosis(facts, F.CUDA_OOM, f"CUDA out of memory ({library} workspace)", text, remedies,
                          {"cuda_oom_kind": kind, "oom_kind": "unknown"}, [line.raw], line.rank)


def shm_exhausted(facts: Facts) -> Diagnosis | None:
    found = _first(facts, "shm")
    if found is None:
        return None
    kind, line = found
    workers = config_value(facts.files.config, "train.num_workers", None)
    now = f" (this job: {workers} workers)" if isinstance(workers, int) else ""
    text = ("A DataLoader worker hit a bus error writing a batch into shared memory: /dev/shm is too small "
            f"for the batches the workers hand over{now}. Docker gives containers 64 MB by default. "
            "Fewer workers need less of it; or enlarge it (`docker run --shm-size=16g`, or "
            "`mount -o remount,size=16G /dev/shm`). This is not the host running out of RAM.")
    return make_diagnosis(facts, F.SHM_EXHAUSTED, "Shared memory (/dev/shm) exhausted by DataLoader workers",
                          text, fix.shm_remedies(facts.files.config), {"shm_kind": kind}, [line.raw], line.rank)


_NO_GPU_TEXT = {
    "no_device": "CUDA found no GPU: CUDA_VISIBLE_DEVICES is empty or names GPUs that do not exist here, "
                 "or the driver cannot see the card.",
    "invalid_ordinal": "The job asked for a GPU index that is not visible to it: CUDA_VISIBLE_DEVICES "
                       "lists fewer GPUs than the code addresses (for example cuda:1 with one GPU visible).",
    "no_driver": "No NVIDIA driver answered: the driver is not installed, not loaded, or not mounted "
                 "into the container.",
    "cpu_build": "The installed torch is a CPU build: it cannot use any GPU.",
}


def no_gpu(facts: Facts) -> Diagnosis | None:
    found = _first(facts, "no_gpu")
    if found is None:
        return None
    kind, line = found
    visible = facts.files.env.get("CUDA_VISIBLE_DEVICES")
    shown = f" The job ran with CUDA_VISIBLE_DEVICES={visible!r}." if visible is not None else ""
    text = (f"{_NO_GPU_TEXT[kind]}{shown} Check with `nvidia-smi -L` and "
            "`python -c 'import torch; print(torch.cuda.device_count())'` in the job's environment; "
            "run on the CPU with `gpus: cpu` in the plan.")
    return make_diagnosis(facts, F.NO_GPU, "No usable GPU", text, (), {"no_gpu_kind": kind}, [line.raw],
                          line.rank)


def cuda_graphs(facts: Facts) -> Diagnosis | None:
    found = _first(facts, "cuda_graphs")
    if found is None:
        return None
    _, line = found
    text = ("Capturing the training step as CUDA graphs failed: something in the step waits for the host "
            "or uses the default stream, which a graph cannot hold (a model or adapter LAT's checks "
            "(lat_core/train/graphs.py) did not know). The job trains the same way eagerly with "
            "train.graphs: false (or LAT_JOB_GRAPHS=false), slower on small batches.")
    return make_diagnosis(facts, F.CUDA_GRAPHS, "CUDA graph capture failed", text,
                          fix.graphs_remedies(facts.files.env), {}, [line.raw], line.rank)


_RESOURCE = re.compile(r"Required: (\d+), Hardware limit: (\d+)")


def triton(facts: Facts) -> Diagnosis | None:
    found = _first(facts, "triton")
    if found is None:
        return None
    kind, line = found
    numbers: dict[str, str | int] = {"triton_kind": kind}
    match = _RESOURCE.search(line.text)
    if match:
        numbers.update(shared_memory_required=int(match.group(1)), shared_memory_limit=int(match.group(2)))
    if kind == "out_of_resources":
        text = ("A Triton kernel (fla's GLA kernels are Triton) needs more shared memory per block than this "
                "GPU has. This is a limit of the GPU model, not an out-of-memory: smaller batches or fewer "
                "jobs do not change it. Run on a GPU with more shared memory per SM (A100/H100), or use "
                "kernels tuned for this one (a newer fla).")
    else:
        text = ("Triton failed to compile a kernel for this GPU. Usually the Triton version does not "
                "match fla or the GPU; a stale cache can do it too (clear TRITON_CACHE_DIR, default "
                "~/.triton/cache). Memory remedies do not help.")
    return make_diagnosis(facts, F.TRITON, "Triton kernel failed", text,
                          fix.triton_remedies(facts.files.config, facts.files.env), numbers, [line.raw], line.rank)


def disk_full(facts: Facts) -> Diagnosis | None:
    found = _first(facts, "disk_full")
    if found is None:
        return None
    _kind, line = found
    output = config_value(facts.files.config, "output_dir", None)
    where = f" (the job writes to {output})" if output else ""
    text = (f"The disk filled up while the job wrote to it{where}: errno 28, 'No space left on device'. "
            "Checkpoints are the usual culprit; Hugging Face and Triton caches in the home folder grow "
            "too. Free space (`df -h`, `du -sh` on the output root) before a retry.")
    return make_diagnosis(facts, F.DISK_FULL, "Disk full", text, fix.disk_full_remedies(facts.files.config),
                          evidence=[line.raw], rank=line.rank)


def hub_unreachable(facts: Facts) -> Diagnosis | None:
    found = _first(facts, "hub")
    if found is None:
        return None
    kind, line = found
    text = ("The Hugging Face hub could not be reached and the files were not found locally. "
            + ("The connection failed or timed out; the cache may still hold the files. "
               if kind != "offline" else "") + _local_copy_hint(facts))
    return make_diagnosis(facts, F.HUB_UNREACHABLE, "Hugging Face hub unreachable", text,
                          fix.hub_remedies(kind, facts.files.env), {"hub_kind": kind}, [line.raw], line.rank)


def _local_copy_hint(facts: Facts) -> str:
    family = str(facts.files.config.get("data", "")).split("-", 1)[0]
    variable = DATASET_DIRS.get(family)
    data = (f"point {variable} at a local copy of the dataset" if variable else
            "point GLUE_LOCAL_DIR / SAMSUM_LOCAL_DIR / DART_LOCAL_DIR / SPIDER_LOCAL_DIR at a local copy")
    return (f"For data, {data}; for a model, set model.name_or_path to a local folder, or copy the "
            "hub cache (~/.cache/huggingface) from a machine online and run with HF_HUB_OFFLINE=1.")


def tracker_login(facts: Facts) -> Diagnosis | None:
    found = _first(facts, "tracker")
    if found is None:
        return None
    kind, line = found
    name, key = ("W&B", "WANDB_API_KEY") if kind == "wandb" else ("SwanLab", "SWANLAB_API_KEY")
    text = (f"{name} wanted to log in and could not: no API key, and no terminal to ask for one (jobs run "
            f"detached). Set {key} in the environment that starts the engine (LAT masks it everywhere), "
            f"log in once on this machine, or run {name} offline or not at all.")
    return make_diagnosis(facts, F.TRACKER_LOGIN, f"{name} login failed", text, fix.tracker_remedies(kind),
                          {"tracker": kind}, [line.raw], line.rank)


_KEYWORD = re.compile(r"unexpected keyword argument '(\w+)'|not used by the model: \[([^\]]*)\]")


def generate_kwargs(facts: Facts) -> Diagnosis | None:
    found = _first(facts, "generate_kwargs")
    if found is None:
        return None
    _kind, line = found
    match = _KEYWORD.search(line.text)
    names = re.findall(r"\w+", (match.group(1) or match.group(2))) if match else []
    keyword = next((n for n in names if n in fix.NEW_TOKEN_KEYWORDS), names[0] if names else "?")
    text = (f"The model's .generate() does not accept '{keyword}' with the installed transformers. "
            + ("With GLA_USE_MAX_NEW_TOKENS on (the default) the trainer passes new-token counts; "
               "GLA_USE_MAX_NEW_TOKENS=0 passes total lengths instead, or upgrade transformers."
               if keyword in fix.NEW_TOKEN_KEYWORDS else "Remove it from the generation settings."))
    return make_diagnosis(facts, F.GENERATE_KWARGS, f"Unsupported generate() keyword '{keyword}'", text,
                          fix.generate_remedies(facts.files.config, keyword), {"keyword": keyword},
                          [line.raw], line.rank)


def reentrant_ckpt(facts: Facts) -> Diagnosis | None:
    found = _first(facts, "no_grad")
    if found is None:
        return None
    _kind, line = found
    config_on = config_value(facts.files.config, "train.gradient_checkpointing", None) is True
    warned = facts.first_hit("reentrant_warning")
    if not (config_on or warned):
        return None  # no checkpointing in play: a plain exception (nothing trainable reached the loss)
    text = ("The loss has no grad_fn: gradient checkpointing ran in its reentrant mode over a frozen base, "
            "so no input of a checkpointed block required grad and the adapter's gradients were dropped"
            + (" (PyTorch warned 'None of the inputs have requires_grad=True')" if warned else "")
            + ". Pass gradient_checkpointing_kwargs={'use_reentrant': False} (LAT's trainer does), or "
            "call model.enable_input_require_grads() before enabling checkpointing.")
    evidence = [warned[1].raw, line.raw] if warned else [line.raw]
    return make_diagnosis(facts, F.REENTRANT_CKPT, "Reentrant checkpointing dropped the gradients",
                          text, fix.no_grad_remedies(facts.files.config), evidence=evidence, rank=line.rank)


_NONFINITE = re.compile(r"loss is (-?(?:nan|inf)) at step (\d+)")


def nonfinite_loss(facts: Facts) -> Diagnosis | None:
    found = _first(facts, "nonfinite")
    failed = facts.files.last_event(Failed)
    message = found[1].text if found else failed.message or "" if failed else ""
    match = _NONFINITE.search(message)
    if match is None:
        return None
    value, step = match.group(1), int(match.group(2))
    text = (f"The training loss became {value} by step {step} (the trainer checks it at each logging step). "
            "Usually the learning rate is too high for this model and adapter, or float16 overflowed; "
            "the steps before it are in events.jsonl.")
    return make_diagnosis(facts, F.NONFINITE_LOSS, f"Loss became {value} at step {step}", text,
                          fix.nonfinite_remedies(facts.files.config), {"loss": value, "step": step},
                          [found[1].raw] if found else [message], found[1].rank if found else None)


_NO_CHECKPOINT = "--resume: no checkpoint-"


def config_error(facts: Facts) -> Diagnosis | None:
    found = _first(facts, "trainer_error")
    if found is None or facts.returncode not in (2, None):
        return None
    _kind, line = found
    message = line.text.strip()
    if _NO_CHECKPOINT in message:
        text = (f"The job was started with --resume, but its folder holds no checkpoint-* to resume from "
                f"({message}). Nothing was trained. Run it without --resume (drop `resume: true` from the "
                "plan or the job), or check that output_dir points at the earlier run.")
        return make_diagnosis(facts, F.CONFIG_ERROR, "Resume with no checkpoint", text,
                              numbers={"config_error_kind": "no_checkpoint"}, evidence=[line.raw])
    text = (f"The trainer refused its configuration before training: {message}. Fix the field it names "
            "in the suite, the plan or the environment; nothing ran.")
    return make_diagnosis(facts, F.CONFIG_ERROR, f"Configuration refused: {message}", text,
                          numbers={"config_error_kind": "config"}, evidence=[line.raw])


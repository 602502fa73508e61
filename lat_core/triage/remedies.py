"""Remedies per failure class, ranked cheapest first, offered only where they change something.

A remedy that is already in force (gradient checkpointing on, no dataloader workers, batch size 1,
the allocator setting present) is not offered: a retry with it would fail the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from lat_core.contract.jobdir import AnyEvent, CheckpointSaved
from lat_core.contract.diagnosis import Remedy
from lat_core.triage.sources import RawConfig, RawEnv, config_value, whole_number

EXPANDABLE = "expandable_segments:True"
#: A larger micro-batch is no real config: its divisors are not searched for.
MAX_BATCH = 2**16


def cuda_oom_remedies(config: RawConfig, env: RawEnv, kind: str, numbers: Mapping[str, int]) -> list[Remedy]:
    candidates = [
        expandable_segments(env) if kind in ("fragmentation", "contention", "unknown") else None,
        gradient_checkpointing(config),
        smaller_micro_batch(config),
        fewer_slots() if _others_present(kind, numbers) else None,
    ]
    return [r for r in candidates if r is not None]


def host_oom_remedies(config: RawConfig) -> list[Remedy]:
    return [r for r in (fewer_workers(config), fewer_slots()) if r is not None]


def _others_present(kind: str, numbers: Mapping[str, int]) -> bool:
    return kind in ("contention", "unknown") or numbers.get("other_processes_bytes", 0) > 0


def expandable_segments(env: RawEnv) -> Remedy | None:
    current = str(env.get("PYTORCH_CUDA_ALLOC_CONF", "")).strip()
    if "expandable_segments:true" in current.replace(" ", "").lower():
        return None
    value = f"{current},{EXPANDABLE}" if current else EXPANDABLE
    return Remedy("expandable_segments", "let PyTorch's allocator grow segments instead of "
                  "caching fixed blocks, so freed memory can be reused for larger requests",
                  "free: no change to speed or results", {"PYTORCH_CUDA_ALLOC_CONF": value})


def fewer_workers(config: RawConfig, keep_at_least: int = 0) -> Remedy | None:
    workers = whole_number(config, "train.num_workers", 0)
    if workers is None or workers // 2 < keep_at_least or workers <= 0:
        return None
    fewer = workers // 2
    return Remedy("fewer_workers", f"dataloader workers {workers} -> {fewer} (each is a process "
                  "with its own copy of the dataset in host RAM)",
                  "about free: data loading may become the bottleneck", {"train.num_workers": fewer})


def gradient_checkpointing(config: RawConfig) -> Remedy | None:
    if config_value(config, "train.gradient_checkpointing", False) is True:
        return None
    return Remedy("gradient_checkpointing", "recompute activations in the backward pass instead "
                  "of keeping them", "~30% slower steps, same results",
                  {"train.gradient_checkpointing": True})


def smaller_micro_batch(config: RawConfig) -> Remedy | None:
    batch = whole_number(config, "train.batch_size", 8)
    accum = whole_number(config, "train.grad_accum", 1)
    if batch is None or accum is None or not 1 <= batch <= MAX_BATCH:  # not a batch the trainer would run
        return None
    accum = max(accum, 1)
    micro = _largest_proper_divisor(batch)
    if micro is None:
        return None
    factor = batch // micro
    return Remedy("smaller_micro_batch", f"micro-batch {batch} -> {micro} with gradient accumulation "
                  f"{accum} -> {accum * factor} (the effective batch stays {batch * accum})",
                  "same results; lower GPU utilisation per step",
                  {"train.batch_size": micro, "train.grad_accum": accum * factor})


def _largest_proper_divisor(n: int) -> int | None:
    """The biggest micro-batch below ``n`` that keeps the effective batch exact (8 -> 4, 6 -> 3)."""
    for candidate in range(n // 2, 0, -1):
        if n % candidate == 0:
            return candidate
    return None


def fewer_slots() -> Remedy:
    return Remedy("fewer_slots", "run one job fewer at a time on this GPU (and host)",
                  "lower throughput: fewer jobs in parallel", {"plan.slots_delta": -1})


def libuv_remedies() -> list[Remedy]:
    return [Remedy("disable_libuv", "use the classic TCPStore backend instead of libuv",
                   "free: only the rendezvous store changes", {"USE_LIBUV": "0"})]


def nccl_remedies(kind: str) -> list[Remedy]:
    debug = Remedy("nccl_debug", "log NCCL's own view of the failure on the retry",
                   "free: more log output", {"NCCL_DEBUG": "INFO", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"})
    if kind == "watchdog_timeout":
        return [debug]
    return [debug, Remedy("nccl_p2p_off", "route GPU-to-GPU traffic through host memory "
                          "(works around broken peer-to-peer / IOMMU setups)",
                          "slower collectives", {"NCCL_P2P_DISABLE": "1"})]


def rendezvous_remedies(kind: str) -> list[Remedy]:
    what = ("retry on a free port (another job held this one)" if kind == "port_in_use"
            else "retry once every rank can start (a peer was late or never came up)")
    return [Remedy("retry", what, "free", {})]


def device_fault_remedies(kind: str) -> list[Remedy]:
    if kind in ("ecc", "xid"):
        return [Remedy("avoid_device", "retry on another GPU and have this one checked "
                       "(nvidia-smi -q -d ECC, dmesg for Xid)", "one GPU fewer until it is checked",
                       {"plan.exclude_failed_device": True})]
    return [Remedy("launch_blocking", "run kernels synchronously so the error names the kernel "
                   "that faulted", "much slower: for locating the bug, not for training",
                   {"CUDA_LAUNCH_BLOCKING": "1"})]


def resume_remedy(events: Iterable[AnyEvent]) -> list[Remedy]:
    steps = [e.step for e in events if isinstance(e, CheckpointSaved)]
    if not steps:
        return []
    return [Remedy("resume", f"resume from the last checkpoint (step {steps[-1]}) with a longer "
                   "time limit", "free: finished steps are kept", {"plan.resume": True})]


# ---------------------------------------------------------------- the knowledge base's classes
def shm_remedies(config: RawConfig) -> list[Remedy]:
    """Fewer workers first (each shares batches through /dev/shm), then none at all. A bus error in a
    worker proves there were workers, so with no config at hand (a bare log) 'none' is still offered."""
    no_workers, workers = None, whole_number(config, "train.num_workers", None)
    if workers is None or workers > 0:
        no_workers = Remedy("no_workers", "load data in the training process (train.num_workers 0): "
                            "batches no longer pass through /dev/shm", "data loading may slow the steps",
                            {"train.num_workers": 0})
    return [r for r in (fewer_workers(config, keep_at_least=1), no_workers) if r is not None]


def tracker_remedies(kind: str) -> list[Remedy]:
    offline = (Remedy("wandb_offline", "let W&B log to the job folder without a login", "free: upload "
                      "later with `wandb sync`", {"WANDB_MODE": "offline"}) if kind == "wandb" else
               Remedy("swanlab_local", "let SwanLab log to the job folder without a login", "free: no "
                      "cloud dashboard for this run", {"SWANLAB_MODE": "local"}))
    return [offline, Remedy("no_tracker", "turn experiment tracking off for this job",
                            "no tracker charts for this run (events.jsonl still has every step)",
                            {"REPORT_TO": "none"})]


NEW_TOKEN_KEYWORDS = ("max_new_tokens", "min_new_tokens")


def generate_remedies(config: RawConfig, keyword: str) -> list[Remedy]:
    if keyword not in NEW_TOKEN_KEYWORDS or config_value(config, "eval.use_max_new_tokens", True) is False:
        return []
    return [Remedy("legacy_generate_lengths", "pass total lengths (max_length / min_length) to "
                   ".generate() instead of new-token counts", "generation lengths then include the "
                   "prompt: raise EVAL_GEN_MAX_LENGTH by the prompt length, or upgrade transformers",
                   {"GLA_USE_MAX_NEW_TOKENS": "0"})]


def no_grad_remedies(config: RawConfig) -> list[Remedy]:
    if config_value(config, "train.gradient_checkpointing", None) is False:
        return []
    return [Remedy("no_gradient_checkpointing", "turn gradient checkpointing off, so no reentrant "
                   "checkpoint drops the adapter's gradients", "more GPU memory for activations; "
                   "faster steps", {"train.gradient_checkpointing": False})]


def nonfinite_remedies(config: RawConfig) -> list[Remedy]:
    candidates = [_bf16(config), _warmup(config), _lower_lr(config)]
    return [r for r in candidates if r is not None]


def _bf16(config: RawConfig) -> Remedy | None:
    if config_value(config, "model.dtype", "float32") != "float16":
        return None
    return Remedy("bf16", "train in bfloat16 instead of float16: the same memory with float32's range, "
                  "so activations stop overflowing to inf", "free on Ampere or newer GPUs",
                  {"model.dtype": "bfloat16"})


def _warmup(config: RawConfig) -> Remedy | None:
    if config_value(config, "train.warmup_steps", 0) or config_value(config, "train.warmup_ratio", 0.0):
        return None
    return Remedy("warmup", "warm the learning rate up over the first 10% of steps",
                  "results change: a gentler start", {"train.warmup_ratio": 0.1})


def _lower_lr(config: RawConfig) -> Remedy | None:
    lr = config_value(config, "train.lr", None)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < float("inf"):
        return None
    return Remedy("lower_lr", f"learning rate {lr:g} -> {lr / 2:g}", "results change: slower "
                  "progress per step", {"train.lr": lr / 2})


def disk_full_remedies(config: RawConfig) -> list[Remedy]:
    candidates: list[Remedy] = []
    if config_value(config, "train.save_optimizer_state", True) is not False:
        candidates.append(Remedy("no_optimizer_state", "save checkpoints without the optimizer's state",
                                 "a resume restarts the optimizer's moments",
                                 {"train.save_optimizer_state": False}))
    every = whole_number(config, "train.save_every", None)
    if every is not None and every > 0:
        candidates.append(Remedy("save_less_often", f"save every {every * 2} steps instead of {every}",
                                 "fewer checkpoints to pick the best from", {"train.save_every": every * 2}))
    return candidates


def hub_remedies(kind: str, env: RawEnv) -> list[Remedy]:
    """Where the files were never cached no switch helps (the diagnosis says what to copy where);
    a flaky connection may pass on a retry, or be skipped when the cache holds the files."""
    if kind == "offline":
        return []
    offline = None
    if str(env.get("HF_HUB_OFFLINE", "")).strip() not in ("1", "true", "True"):
        offline = Remedy("hub_offline", "load models and datasets from the local Hugging Face cache "
                         "without asking the hub", "free where the files are cached; fails at once where "
                         "they are not", {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    retry = Remedy("retry", "retry as is: the hub or the network may answer next time", "free", {})
    return [r for r in (offline, retry) if r is not None]


def triton_remedies(config: RawConfig, env: RawEnv) -> list[Remedy]:
    fused = config_value(config, "gla.GLA_USE_FUSED_SWIGLU", False) is True or \
        str(env.get("GLA_USE_FUSED_SWIGLU", "")).strip() in ("1", "true", "True")
    if not fused:
        return []
    return [Remedy("no_fused_swiglu", "use the unfused SwiGLU (fla's fused kernel fails on some "
                   "Triton and driver stacks)", "slightly slower MLP", {"GLA_USE_FUSED_SWIGLU": "0"})]


def graphs_remedies(env: RawEnv) -> list[Remedy]:
    """Through the job's env, which the trainer applies over its job.yaml, so no plan env can undo it."""
    if str(env.get("LAT_JOB_GRAPHS", "")).strip().lower() in ("false", "off", "no", "0"):
        return []
    return [Remedy("no_cuda_graphs", "train eagerly: no CUDA graphs", "the step is bound by the CPU launching "
                   "kernels again (several times slower on small batches)", {"LAT_JOB_GRAPHS": "false"})]


def crash_remedies(env: RawEnv, has_native_trace: bool) -> list[Remedy]:
    if has_native_trace or str(env.get("PYTHONFAULTHANDLER", "")).strip():
        return []
    return [Remedy("faulthandler", "print every thread's Python stack when the process crashes, to "
                   "see which call entered the failing native code", "free; the job starts cold, without "
                   "warm start", {"PYTHONFAULTHANDLER": "1"})]

"""From-scratch GLA pretraining on a local text corpus:

    python -m lat_core.train.pretrain --preset conservative --output-dir DIR [--device_batch_size=16 ...]
    python -m lat_core.train.pretrain --config=configs/dual_gpu/balanced.py   (the dual-GPU runbook's form)
    TORCH_COMPILE=1 WANDB_RUN=name python -m lat_core.train.pretrain ...   (the scripts' variables, typed)

Runs alone or under torchrun (DDP; NCCL on GPUs, gloo on the CPU), with the same events as the
fine-tuning trainer (started, step with tokens/s, eval, checkpoint, memory, finished). Tokens are
the corpus's UTF-8 bytes, so any text file works without a tokenizer download.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from lat_core.monitor.gpu import GpuProbe
from lat_core.train.pretrain_config import PretrainConfigError, build_config, preflight

TINY_CORPUS = Path(__file__).resolve().parents[1] / "data" / "tiny_corpus.txt"


def parse_args(argv):
    """The dual-GPU runbook's forms too: ``--config=configs/dual_gpu/balanced.py`` (an alias of
    --preset) or the preset file as the first argument (``train_dual_gpu.sh configs/dual_gpu/x.py``);
    without --output-dir the run goes to ``runs/pretrain_<preset>`` under the current directory."""
    argv = list(argv)
    if argv and not argv[0].startswith("-"):
        argv = ["--preset", argv[0], *argv[1:]]
    parser = argparse.ArgumentParser(prog="lat_core.train.pretrain")
    parser.add_argument("--preset", "--config", dest="preset", default="conservative",
                        help="conservative|balanced|aggressive or a YAML path (--config: the runbook's name)")
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--allow-cpu", action="store_true",
                        help="train a model too big for the CPU there anyway when no GPU is visible")
    args, overrides = parser.parse_known_args(argv)
    if args.output_dir is None:
        args.output_dir = str(Path("runs") / f"pretrain_{Path(args.preset).stem}")
    return args, overrides


def main(argv=None) -> int:
    args, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        cfg = build_config(args.preset, overrides)
        world = int(os.environ.get("WORLD_SIZE", "1"))
        accum = cfg.grad_accum(world)
        check_tracker(cfg)
    except PretrainConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    problems = preflight(cfg, gpu_visible(os.environ), args.allow_cpu)
    if problems:
        print("error: the run cannot work:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    from lat_core.train.pretrain_loop import run

    return run(cfg, accum, Path(args.output_dir))


def gpu_visible(environ) -> bool:
    """Whether this process would get a GPU, asked of NVML (torch is not imported yet):
    ``CUDA_VISIBLE_DEVICES`` empty or -1 hides every GPU, as CUDA does."""
    if environ.get("CUDA_VISIBLE_DEVICES", "x").strip() in ("", "-1"):
        return False
    return GpuProbe().snapshot().available


def check_tracker(cfg) -> None:
    """A W&B run asked for (WANDB_RUN other than dummy) needs wandb: say so before any training."""
    if cfg.uses_wandb and importlib.util.find_spec("wandb") is None:
        raise PretrainConfigError(f"WANDB_RUN={cfg.wandb_run} asks for a W&B run, but wandb is not installed: "
                                  "pip install 'lat-control-center[wandb]', or WANDB_RUN=dummy for none")


if __name__ == "__main__":
    sys.exit(main())

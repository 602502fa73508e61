"""From-scratch GLA pretraining on a local text corpus:

    python -m lat_core.train.pretrain --preset conservative --output-dir DIR [--device_batch_size=16 ...]

Runs alone or under torchrun (DDP; NCCL on GPUs, gloo on the CPU), with the same events as the
fine-tuning trainer (started, step with tokens/s, eval, checkpoint, memory, finished). Tokens are
the corpus's UTF-8 bytes, so any text file works without a tokenizer download.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from lat_core.train.pretrain_config import PretrainConfigError, build_config

TINY_CORPUS = Path(__file__).resolve().parents[1] / "data" / "tiny_corpus.txt"


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="lat_core.train.pretrain")
    parser.add_argument("--preset", default="conservative")
    parser.add_argument("--output-dir", required=True)
    args, overrides = parser.parse_known_args(argv)
    return args, overrides


def main(argv=None) -> int:
    args, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        cfg = build_config(args.preset, overrides)
        world = int(os.environ.get("WORLD_SIZE", "1"))
        accum = cfg.grad_accum(world)
    except PretrainConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from lat_core.train.pretrain_loop import run

    return run(cfg, accum, Path(args.output_dir))


if __name__ == "__main__":
    sys.exit(main())

"""When a model is too big to train on the CPU: one rule for the fine-tuning preflight
(lat_core.front.preflight) and the pretraining entry (lat_core.train.pretrain, before torch loads).

Why a refusal and not a warning: a GLA-1.3B suite sent to the CPU by a forgotten ``--gpus`` ran
for minutes per job before failing (or, for pretraining, passed 3 GB of RSS in 8 s and would have
trained for days); a warning scrolls past in a headless run. So such a run is refused, exit 2,
unless the user says ``--allow-cpu`` (plan field ``allow_cpu: true``) and means it. The limits sit
far above the tiny models the demo and the tests train on the CPU (under 2 M parameters) and below
the smallest real checkpoint the suites name (Mamba-130M; GLA 85 M for pretraining's smallest preset).
"""

from __future__ import annotations

import re

CPU_MAX_PARAMS = 50_000_000
# a 16-bit dtype is a GPU config: bf16/fp16 matmuls on a CPU without AMX run many times slower than fp32
CPU_MAX_PARAMS_16BIT = 10_000_000
HALF_DTYPES = ("bfloat16", "float16")
ALLOW_CPU = "name GPUs (--gpus / plan 'gpus'), or --allow-cpu (plan 'allow_cpu: true') to train on the CPU anyway"
_SIZE_IN_NAME = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)([mMbB])(?![a-zA-Z])")


def needs_gpu(params: int, dtype: str) -> bool:
    limit = CPU_MAX_PARAMS_16BIT if dtype in HALF_DTYPES else CPU_MAX_PARAMS
    return params > limit


def cpu_problem(what: str, params: int, dtype: str, *, why: str = "the run is on the CPU",
                way_out: str = ALLOW_CPU) -> str | None:
    """The refusal for ``what`` (a model, named) on the CPU, or None when the CPU will do."""
    if not needs_gpu(params, dtype):
        return None
    size = f"{params / 1e9:.1f} B" if params >= 1e9 else f"{params / 1e6:.1f} M"
    return f"{what}: {size} parameters in {dtype} need a GPU, and {why}: {way_out}"


def params_from_name(name: str) -> int | None:
    """The size a hub id states (``fla-hub/gla-1.3B-100B`` -> 1.3 B, ``state-spaces/mamba-130m-hf``
    -> 130 M; the first size in the name's last part), for a model whose files are not here."""
    found = _SIZE_IN_NAME.search(name.rsplit("/", 1)[-1])
    if found is None:
        return None
    scale = 1e9 if found.group(2) in "bB" else 1e6
    return int(float(found.group(1)) * scale)

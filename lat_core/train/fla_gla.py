"""Import fla's GLA model without the rest of fla.

Why: ``import fla`` (and ``fla.models``, ``fla.layers``, ``fla.ops``) runs package files that import
every layer, model and kernel fla has: 476 modules, about 2 s on a laptop-class CPU and 5 s on an
H200 host, in every job, and more while eight jobs start at once. GLA needs about 100 of them.
Those four package files only import and re-export (checked for fla 0.6.0), so they are stood in
for by empty packages over the same directories, and ``fla.models.gla`` then imports exactly what
it uses. The kernels, classes and numbers are fla's own.

If fla is imported already (by user code, a test), or the lean import fails (another fla layout),
the normal full import is used.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from pkgutil import extend_path

# The package files that only import their children (fla 0.6.0; fla spans two wheels, hence extend_path).
LEAN_PACKAGES = ("fla", "fla.layers", "fla.models", "fla.ops")
GLA_NAMES = ("GLAConfig", "GLAForCausalLM", "GLAModel")


def gla_classes():
    """(GLAConfig, GLAForCausalLM) from fla, importing as little of fla as works."""
    if "fla" not in sys.modules:
        try:
            return _lean_import()
        except ImportError:
            _forget_fla()  # leave no half-imported fla behind for the full import below
    from fla.models import GLAConfig, GLAForCausalLM
    return GLAConfig, GLAForCausalLM


def _lean_import():
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("fla is not installed")
    roots = extend_path(list(spec.submodule_search_locations), "fla")
    for name in LEAN_PACKAGES:
        parts = name.split(".")[1:]
        package = types.ModuleType(name)
        package.__path__ = [p for p in (os.path.join(root, *parts) for root in roots) if os.path.isdir(p)]
        package.__package__ = name
        sys.modules[name] = package
        if parts:
            setattr(sys.modules["fla"], parts[0], package)
    sys.modules["fla"].__version__ = _fla_version()
    gla = importlib.import_module("fla.models.gla")
    for attr in GLA_NAMES:  # `from fla.models import GLAConfig` keeps working in this process
        setattr(sys.modules["fla.models"], attr, getattr(gla, attr))
    return gla.GLAConfig, gla.GLAForCausalLM


def _fla_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("fla-core", "flash-linear-attention"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "0"


def _forget_fla() -> None:
    for name in [n for n in sys.modules if n == "fla" or n.startswith("fla.")]:
        del sys.modules[name]


def use_gla_kernels_for(on_gpu: bool) -> None:
    """The kernels GLA runs with: on a GPU fla's Triton kernels, short training rows in chunks
    (train_short_rows_in_chunks), their configs from this GPU model's tunings where it has them
    (tuned_kernels); on the CPU gla_cpu's pure-PyTorch stand-ins."""
    if on_gpu:
        train_short_rows_in_chunks()
        from .tuned_kernels import seed_tuned_configs
        seed_tuned_configs()
    else:
        from .gla_cpu import enable_cpu_gla
        enable_cpu_gla()


def train_short_rows_in_chunks(layer_module=None) -> bool:
    """Train GLA rows of 64 tokens or fewer with fla's chunk kernels, as longer rows are.

    Why: fla's GLA layer picks ``fused_recurrent_gla`` whenever the (padded) row width is 64 tokens
    or fewer, a choice made for decoding, and it decides before it unpads, so short GLUE sentences
    train through it in every layout (eager, graphed, fused). In training that kernel is slow: its
    backward walks the tokens one by one, 60% of a graphed fused group's GPU time at 8 jobs x 8 rows
    x 32 tokens of GLA-1.3B on an H100, whose step then took 148 ms instead of 70 ms with chunk
    kernels (bench/RESULTS.md). Both kernels compute the same recurrence; they round differently.

    The layer's name ``fused_recurrent_gla`` is pointed at a router: a forward that records
    gradients and keeps no final state (training) runs ``chunk_gla``, looked up when called (the
    CPU stand-ins of gla_cpu replace it there); evaluation, generation and decoding with a cache
    keep fla's own kernel. Returns whether the router was installed now (False: already there)."""
    if layer_module is None:
        layer_module = importlib.import_module("fla.layers.gla")
    recurrent = layer_module.fused_recurrent_gla
    if getattr(recurrent, "routes_training_to_chunks", False):
        return False

    import torch

    def recurrent_or_chunk(q, k, v, gk=None, initial_state=None, output_final_state=False,
                           state_v_first=False, cu_seqlens=None, **kwargs):
        if torch.is_grad_enabled() and not output_final_state and not kwargs:
            return layer_module.chunk_gla(q=q, k=k, v=v, g=gk, initial_state=initial_state, output_final_state=False,
                                          state_v_first=state_v_first, cu_seqlens=cu_seqlens)
        return recurrent(q=q, k=k, v=v, gk=gk, initial_state=initial_state, output_final_state=output_final_state,
                         state_v_first=state_v_first, cu_seqlens=cu_seqlens, **kwargs)

    recurrent_or_chunk.routes_training_to_chunks = True
    recurrent_or_chunk.fla_recurrent = recurrent
    layer_module.fused_recurrent_gla = recurrent_or_chunk
    return True

"""fla's kernel configs chosen ahead of time, per GPU model, so a fresh machine compiles one config per
kernel instead of autotuning all of them.

Why: most of a cold start is Triton autotuning fla's GLA kernels, not compiling them. On an empty
cache an H200 spent 256 s warming one 16-token shape of GLA-1.3B (one process, nothing else running;
bench/RESULTS.md, 2026-11-26): each autotuned kernel compiles and times every candidate config (up
to 24). Triton keeps the winners in its on-disk cache, but only on the machine that tuned them.

What this does: ``lat_core/train/kernel_tunings/<GPU>.json`` holds, for each autotuned fla kernel, the
config tuned for each autotune key (the kernel's key arguments and tensor dtypes) on that GPU model,
tuned alone on an idle machine (``python -m lat_core.train.kernel_warmup --save-tunings``). Before a
job's first kernel runs, :func:`seed_tuned_configs` puts those winners into the kernels' autotuners,
so Triton runs them without tuning (``LAT_KERNEL_TUNINGS_DIR`` points at your own tables instead). Only a config that is one of the kernel's own candidates is
used (so its pre-hooks and limits are fla's own); any other key (a new row width, a newer fla) is
autotuned as before. ``LAT_KERNEL_TUNINGS=off`` turns it off.

The table and its use are plain data here; the walk over fla's modules needs Triton, so it runs only
where a GPU job runs.
"""
from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from lat_core.contract import kernel_tunings as tunings

TUNINGS_DIR = Path(__file__).with_name("kernel_tunings")
SWITCH, DIR_VARIABLE = tunings.SWITCH, tunings.DIR_VARIABLE  # read and checked in lat_core.contract.kernel_tunings
CONFIG_FIELDS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
PLAIN = (int, float, str, bool, type(None))


def gpu_file_name(device_name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``NVIDIA_H100_80GB_HBM3`` (as fla names its own config folders)."""
    return (re.sub(r"[^0-9A-Za-z]+", "_", device_name).strip("_") or "unknown_gpu") + ".json"


def kernel_id(autotuner: Any) -> str:
    """The kernel's stable name: the module and name of the Python function under its decorators."""
    fn = autotuner.base_fn
    return f"{fn.__module__}.{fn.__name__}"


def config_record(config: Any) -> dict[str, Any]:
    return {"kwargs": dict(config.kwargs), **{f: getattr(config, f, None) for f in CONFIG_FIELDS}}


def _plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return isinstance(value, PLAIN)


def tunings_of(autotuners: Iterable[Any]) -> dict[str, list[dict[str, Any]]]:
    """What each autotuner has chosen so far, as JSON-ready records (keys that are not plain values
    are skipped: they would not read back equal)."""
    kernels: dict[str, list[dict[str, Any]]] = {}
    for tuner in autotuners:
        entries = [{"key": list(key), "config": config_record(config)}
                   for key, config in tuner.cache.items() if _plain(key) and _plain(list(config.kwargs.values()))]
        if entries:
            kernels.setdefault(kernel_id(tuner), []).extend(entries)
    return kernels


def merged(old: dict[str, list[dict[str, Any]]], new: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """``old`` with ``new``'s entries added; a key tuned again takes the new config."""
    out = {name: list(entries) for name, entries in old.items()}
    for name, entries in new.items():
        keys = {json.dumps(e["key"]) for e in entries}
        out[name] = [e for e in out.get(name, []) if json.dumps(e["key"]) not in keys] + entries
    return out


def seed(autotuners: Iterable[Any], kernels: dict[str, list[dict[str, Any]]]) -> int:
    """Put the table's configs into the autotuners' caches (where the key is not tuned already and
    the config is one of the kernel's candidates); how many were put in."""
    seeded = 0
    for tuner in autotuners:
        for entry in kernels.get(kernel_id(tuner), []):
            key = tuple(tuple(k) if isinstance(k, list) else k for k in entry["key"])
            candidate = _own_candidate(tuner, entry["config"])
            if candidate is not None and key not in tuner.cache:
                tuner.cache[key] = candidate
                seeded += 1
    return seeded


def _own_candidate(tuner: Any, record: dict[str, Any]) -> Any:
    return next((c for c in tuner.configs if config_record(c) == record), None)


def read_table(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The table's kernels ({} without the file); TableError naming a file that is not a table."""
    return tunings.read_table(path)


def write_table(path: Path, kernels: dict[str, list[dict[str, Any]]], about: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**about, "kernels": kernels}, indent=1, sort_keys=True) + "\n")


def fla_autotuners() -> Iterator[Any]:
    """Every autotuner in the fla modules imported so far (under heuristics decorators too)."""
    from triton.runtime.autotuner import Autotuner

    seen: set[int] = set()
    for name, module in list(sys.modules.items()):
        if not name.startswith("fla.") or module is None:
            continue
        for obj in list(vars(module).values()):
            for _ in range(4):  # heuristics(autotune(jit(fn))): follow .fn down to the autotuner
                if isinstance(obj, Autotuner):
                    if id(obj) not in seen:
                        seen.add(id(obj))
                        yield obj
                    break
                obj = getattr(obj, "fn", None)
                if obj is None:
                    break


@dataclass(frozen=True)
class Gpu:
    """What decides whether a kernel config tuned on one GPU model fits another: its name (the
    table's file), its compute capability (the instructions and shared memory a config compiles
    for) and its number of SMs (how a kernel's grid spreads)."""

    name: str
    capability: str   # "9.0"
    sms: int

    def facts(self) -> dict[str, Any]:
        return {"gpu": self.name, "capability": self.capability, "sms": self.sms}


@dataclass(frozen=True)
class Table:
    """The tunings table a GPU uses: its own, or (``sibling`` set) the table of another GPU model
    with the same capability and SM count, where this model has none yet."""

    path: Path
    sibling: str | None = None

    def describe(self, gpu: Gpu) -> str:
        if self.sibling is None:
            return f"{gpu.name} ({self.path.name})"
        return (f"{self.sibling}'s table ({self.path.name}: no table for {gpu.name} yet; same compute capability "
                f"{gpu.capability} and {gpu.sms} SMs; `lat-tui warmup --plan PLAN --save-tunings` makes its own)")


def this_gpu() -> Gpu:
    import torch

    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return Gpu(torch.cuda.get_device_name(index), f"{props.major}.{props.minor}", props.multi_processor_count)


def tunings_folder() -> Path:
    """$LAT_KERNEL_TUNINGS_DIR, else the shipped tables; TuningsValueError or TableError for a
    variable that cannot be used (a plan's are refused before its jobs start: this is a job run
    by hand, or an engine's own environment)."""
    folder = tunings.from_env(os.environ).folder
    if folder is not None and not folder.is_dir():
        raise tunings.TableError(f"{DIR_VARIABLE}={str(folder)!r}: not a folder")
    return folder or TUNINGS_DIR


def own_table_path(gpu: Gpu) -> Path:
    """Where this GPU model's own table is (and where --save-tunings writes)."""
    return tunings_folder() / gpu_file_name(gpu.name)


def choose_table(gpu: Gpu, folder: Path) -> Table | None:
    """This GPU model's own table in ``folder``, else a sibling's (same capability and SM count,
    recorded in the table when it was saved; the first by file name), else None (autotune).

    Why a sibling: an H100 SXM and an H200 are one chip (sm_90, 132 SMs, the same shared memory)
    with different memory; fla's kernel configs are chosen among the same candidates on both, and
    a fresh machine without a table autotunes for 6-12 minutes (bench/RESULTS.md)."""
    own = folder / gpu_file_name(gpu.name)
    if own.is_file():
        return Table(own)
    for path in sorted(folder.glob("*.json")):
        about = read_about(path)
        if about.get("capability") == gpu.capability and about.get("sms") == gpu.sms:
            return Table(path, sibling=str(about.get("gpu") or path.stem))
    return None


def read_about(path: Path) -> dict[str, Any]:
    """A table's facts about the GPU it was tuned on (empty where the file is not a table)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if k != "kernels"} if isinstance(data, dict) else {}


def seed_tuned_configs(out=print) -> int:
    """Seed fla's imported autotuners from this GPU model's table (or a sibling's: choose_table);
    how many configs were seeded. Never raises: without a table or Triton, or with a table or variable
    that cannot be used (the log says why), jobs autotune as before."""
    try:
        if not tunings.from_env(os.environ).enabled:
            return 0
        gpu = this_gpu()
        table = choose_table(gpu, tunings_folder())
        kernels = read_table(table.path) if table is not None else {}
        count = seed(fla_autotuners(), kernels) if kernels else 0
    except Exception as exc:  # noqa: BLE001 - a table that does not apply leaves Triton to autotune
        out(f"[lat] kernel tunings not used ({type(exc).__name__}: {exc}); fla autotunes its kernels", flush=True)
        return 0
    if count and table is not None:
        out(f"[lat] kernel tunings: {count} configs from {table.describe(gpu)}; those kernels are not autotuned",
            flush=True)
    return count


def save_tunings(out=print) -> Path:
    """Add what this process's fla autotuners chose to this GPU model's own table (the winners of a
    tuning run with LAT_KERNEL_TUNINGS=off, on an idle machine), with the GPU's facts that let a
    sibling model use it (choose_table)."""
    import triton

    gpu = this_gpu()
    path = own_table_path(gpu)
    kernels = merged(read_table(path), tunings_of(fla_autotuners()))
    about = {**gpu.facts(), "triton": triton.__version__,
             "made_by": "python -m lat_core.train.kernel_warmup --save-tunings (alone, on an idle GPU)"}
    write_table(path, kernels, about)
    out(f"[warm] kernel tunings saved: {sum(map(len, kernels.values()))} configs of {len(kernels)} kernels in {path}",
        flush=True)
    return path

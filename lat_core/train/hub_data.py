"""The real datasets by their Hugging Face hub ids, through the `datasets` package and its cache.

Why: the old scripts loaded GLUE, SAMSum, Spider and DART with `datasets.load_dataset(<hub id>)`, so
their users have the hub cache filled (~/.cache/huggingface/datasets, or HF_DATASETS_CACHE); LAT
reads the same ids and the same cache.  Local folders (*_LOCAL_DIR, data_dir) still come first
(datasets.py).  HF_DATASETS_OFFLINE / HF_HUB_OFFLINE and HF_DATASETS_CACHE are taken from the
environment the loader is given (the job's): `datasets` reads its own copies once, at import, so the
flags are applied around the call.  Offline, only the cache is read and a miss is a clear error
that triage files under hub_unreachable (its pattern: "cannot fetch <id> <config> from the hub").

A local folder written by `DatasetDict.save_to_disk` (it holds dataset_dict.json) is a local copy
too: the way to carry a hub dataset to a machine without network.

`datasets` is optional (pyproject extra [hub]); without it only local folders work.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from pathlib import Path

# the hub ids, local-folder variables and offline flags are one table, which the front end's
# preflight reads too (lat_core.config.hub_cache)
from lat_core.config.hub_cache import OFFLINE_VARS, hub_id, is_offline
from lat_core.config.job import TrainConfigError

Splits = Mapping[str, Iterable[dict]]


def is_saved_dataset(path: Path) -> bool:
    """A folder written by DatasetDict.save_to_disk."""
    return (path / "dataset_dict.json").is_file()


def _import_datasets(what: str, local_var: str):
    try:
        import datasets
    except ImportError:
        raise TrainConfigError(
            f"data: {what} needs the `datasets` package, which is not installed (pip install "
            f"'lat-control-center[hub]'), or a local copy in {local_var}") from None
    return datasets


def from_disk(path: Path, local_var: str) -> Splits:
    """Splits of a save_to_disk folder, each an iterable of row dicts."""
    datasets = _import_datasets(f"the saved dataset {path}", local_var)
    try:
        dd = datasets.load_from_disk(str(path))
    except Exception as exc:  # noqa: BLE001 - a corrupt folder fails in many ways
        raise TrainConfigError(f"data: cannot read the saved dataset {path} ({exc})") from exc
    if not isinstance(dd, datasets.DatasetDict):
        raise TrainConfigError(f"data: {path} holds one split; save a DatasetDict of named splits")
    return dict(dd)


def _load_dataset(datasets, name: str, config: str | None, cache_dir: str | None):
    """The one call into the hub (tests swap it to record the id and config)."""
    return datasets.load_dataset(name, config, cache_dir=cache_dir)


@contextmanager
def _offline_as(datasets, environ: Mapping[str, str]):
    """Offline for the call when `environ` says so (never turns an offline process online)."""
    import huggingface_hub.constants as hub_constants
    saved = datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE
    if is_offline(environ):
        datasets.config.HF_HUB_OFFLINE = hub_constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE = saved


#: The `datasets` fingerprints of the hub downloads of the current load, "<id>[/<config>]:<split>" -> hash
#: (the job record keeps them; datasets.load clears this first).
fingerprints: dict[str, str] = {}


def fetch(family: str, config: str | None, local_var: str, environ: Mapping[str, str]) -> Splits:
    """Splits of `family` (with `config`, e.g. the GLUE task) from the hub or its cache."""
    return fetch_id(hub_id(family, environ), config, local_var, environ)


def fetch_id(name: str, config: str | None, local_var: str, environ: Mapping[str, str]) -> Splits:
    """Splits of the hub dataset `name` (a shipped family's id, or a user's ``data.path``);
    `local_var` names what to set for a local copy instead."""
    datasets = _import_datasets(f"{name} from the hub", local_var)
    try:
        with _offline_as(datasets, environ):
            dd = _load_dataset(datasets, name, config, environ.get("HF_DATASETS_CACHE") or None)
    except Exception as exc:  # noqa: BLE001 - offline and network errors come in many types
        raise TrainConfigError(hub_error(name, config, local_var, environ, exc)) from exc
    prefix = f"{name}/{config}" if config else name
    fingerprints.update({f"{prefix}:{split}": str(getattr(part, "_fingerprint", ""))
                         for split, part in dict(dd).items()})
    return dict(dd)


def hub_error(name: str, config: str | None, local_var: str, environ: Mapping[str, str],
              exc: BaseException) -> str:
    if "scripts are no longer supported" in str(exc):
        # reached the hub fine: not hub_unreachable, so worded apart from the message below
        return (f"data: {name} on the hub is a loading script, which this `datasets` no longer runs "
                f"({exc}); set {local_var} to a local copy (save_to_disk of it loaded elsewhere, or "
                "the released files)")
    if is_offline(environ):
        cache = environ.get("HF_DATASETS_CACHE") or "~/.cache/huggingface/datasets"
        why = (f"offline ({'/'.join(v for v in OFFLINE_VARS if environ.get(v))} set) and the datasets "
               f"cache {cache} does not hold it")
    else:
        why = f"{type(exc).__name__}: {exc}"
    return (f"data: cannot fetch {name} {config or 'default'} from the hub ({why}); set {local_var} "
            "to a local copy, or fill the cache on a machine online")

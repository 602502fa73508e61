"""Where a job's model and data come from: a local folder, the Hugging Face caches, or the hub.

Why here (torch-free, below every process): the trainer reads the hub ids, the local-folder
variables and the offline flags when it loads (lat_core.train.datasets, lat_core.train.hub_data),
and the front end's preflight (lat_core.front.preflight) asks the same tables, before anything
starts, whether a job would need the hub: one table, two readers. Only names and folders are looked
at here; nothing is downloaded or loaded.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from lat_core.config.datasets import canonical

# LAT's dataset family -> hub id the old scripts used; <FAMILY>_HUB_ID in the environment overrides
# it (DART_HUB_ID=GEM/dart reads the GEM edition, whose rows the trainer reads too)
HUB_IDS = {"glue": "nyu-mll/glue", "samsum": "Samsung/samsum", "spider": "xlangai/spider", "dart": "dart"}
# the family's local copy, which comes before the hub (the environment beats a config's data_dir)
LOCAL_DIR_VARS = {"glue": "GLUE_LOCAL_DIR", "samsum": "SAMSUM_LOCAL_DIR", "dart": "DART_LOCAL_DIR",
                  "spider": "SPIDER_LOCAL_DIR"}
OFFLINE_VARS = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
TRUE = ("1", "true", "yes", "on")
DEFAULT_ENDPOINT = "https://huggingface.co"


def hub_id(family: str, environ: Mapping[str, str]) -> str:
    return environ.get(f"{family.upper()}_HUB_ID") or HUB_IDS[family]


def offline_vars(environ: Mapping[str, str]) -> list[str]:
    """The offline flags ``environ`` sets (huggingface_hub and datasets each read their own)."""
    return [v for v in OFFLINE_VARS if environ.get(v, "").strip().lower() in TRUE]


def is_offline(environ: Mapping[str, str]) -> bool:
    return bool(offline_vars(environ))


def hub_dataset(name: str) -> tuple[str, str | None] | None:
    """(family, config) of a dataset the trainer fetches from the hub without a local copy
    (``glue-tvt_rte_200`` -> ("glue", "rte")); None for the shipped sets and folders."""
    base = canonical(name)
    if base.startswith("glue-tvt_"):
        return "glue", base.split("_", 1)[1]
    return (base, None) if base in HUB_IDS else None


def hf_home(environ: Mapping[str, str]) -> Path:
    home = environ.get("HF_HOME") or os.path.join(environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser()


def hub_cache_dirs(environ: Mapping[str, str]) -> list[Path]:
    """Hugging Face hub cache folders in huggingface_hub's order of precedence."""
    found = [environ.get("HF_HUB_CACHE"), environ.get("HUGGINGFACE_HUB_CACHE")]
    return [Path(p).expanduser() for p in found if p] + [hf_home(environ) / "hub"]


def dataset_cached(repo_id: str, config: str | None, environ: Mapping[str, str]) -> bool:
    """Whether `datasets` has ``repo_id`` (with ``config``) in its cache: its prepared copy
    (``<cache>/<org>___<name>/<config>/``) or the hub files (``datasets--<org>--<name>`` in the
    hub cache), as an offline ``load_dataset`` would look."""
    caches = [Path(c).expanduser() for c in [environ.get("HF_DATASETS_CACHE")] if c] + [hf_home(environ) / "datasets"]
    prepared = repo_id.replace("/", "___")
    for cache in caches:
        folder = cache / prepared
        if (folder / config).is_dir() if config else folder.is_dir():
            return True
    return any((hub / ("datasets--" + repo_id.replace("/", "--")) / "snapshots").is_dir()
               for hub in hub_cache_dirs(environ))


def hub_unreachable(environ: Mapping[str, str], timeout_s: float = 3.0) -> str | None:
    """Why the hub (``HF_ENDPOINT``, default huggingface.co) cannot be reached, or None when it
    answers: one HEAD request with a short timeout (any HTTP answer, an error status included, means
    the network gets there). The proxy variables of the environment apply, as they do for the hub's
    own client."""
    endpoint = (environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    request = urllib.request.Request(endpoint + "/api/models?limit=1", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"{endpoint} did not answer ({reason}; asked with a {timeout_s:g} s timeout)"

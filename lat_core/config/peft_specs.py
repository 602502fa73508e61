"""The ``peft`` section before it is typed: named spec files, named target sets, method shorthands.

Why before: a spec file and the shorthands fill in fields, and the typed section (lat_core.config.job)
must see the final fields to check them once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lat_core.config.paths import config_trees
from lat_core.config.yaml_files import YamlFileError, YamlMapping, read_yaml_mapping

# Named target sets usable in peft.target_modules (expanded before PEFT sees them).
TARGET_SETS = {
    "QKVO": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "G": ["g_proj"],
    "GK": ["gk_proj.0", "gk_proj.1"],
    "MLP": ["gate_proj", "up_proj", "down_proj"],
    "HEAD": ["lm_head"],
    "MAMBA_PROJ": ["in_proj", "x_proj"],
}


class PeftSpecError(ValueError):
    """A spec that cannot be used; the message starts with ``peft.spec:``."""


def load_peft_spec(name: str) -> YamlMapping:
    """A named spec from peft/<name>.yaml|yml|json of the config trees (the user's first), or a
    path to such a file; the engine pins a user tree's spec as its path in job.yaml."""
    path = Path(name).expanduser()
    if not path.is_file():
        dirs = [tree.path / "peft" for tree in config_trees()]
        found = [d / f"{name}{ext}" for d in dirs for ext in (".yaml", ".yml", ".json")
                 if (d / f"{name}{ext}").is_file()]
        if not found:
            known = sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.y*ml")})
            raise PeftSpecError(f"peft.spec: no spec {name!r} in {' or '.join(map(str, dirs))} "
                                f"(known: {', '.join(known) or 'none'})")
        path = found[0]
    try:
        raw = read_yaml_mapping(path, "a mapping of peft fields")  # JSON is YAML
    except YamlFileError as exc:
        raise PeftSpecError(f"peft.spec: {exc}") from None
    if "spec" in raw:
        raise PeftSpecError(f"peft.spec: {path} may not reference another spec")
    return raw


def expand_targets(targets: object) -> object:
    """Named sets (QKVO, G, GK, MLP, HEAD, MAMBA_PROJ) -> module names; order kept, no repeats."""
    if isinstance(targets, str):
        targets = [t.strip() for t in targets.replace("+", ",").split(",") if t.strip()]
    if not isinstance(targets, list):
        return targets  # the schema names what is wrong with it
    out: list[object] = []
    for t in targets:
        for name in TARGET_SETS.get(t, [t]) if isinstance(t, str) else [t]:
            if name not in out:
                out.append(name)
    return out


_SHORTHANDS = {"dora": ("use_dora", True), "rslora": ("use_rslora", True),
               "pissa": ("init_lora_weights", "pissa"), "loraga": ("init_lora_weights", "loraga")}


def resolve_peft(raw_peft: dict[str, Any], sources: dict[str, str]) -> dict[str, Any]:
    """Spec file < inline fields; target sets expanded; method shorthands set their flags."""
    merged: dict[str, Any] = {}
    if raw_peft.get("spec"):
        if not isinstance(raw_peft["spec"], str):
            raise PeftSpecError(f"peft.spec: expected a spec name or path, got {raw_peft['spec']!r}")
        merged.update(load_peft_spec(raw_peft["spec"]))
        sources["peft.spec"] = raw_peft["spec"]
    merged.update(raw_peft)
    if "target_modules" in merged:
        merged["target_modules"] = expand_targets(merged["target_modules"])
    method = merged.get("method", "lora")
    shorthand = _SHORTHANDS.get(method) if isinstance(method, str) else None  # the schema names a bad one
    if shorthand:
        merged.setdefault(*shorthand)
    return merged

"""Shrink a Triton cache to what Triton loads, so it can be carried to the next GPU call; and make a
copied cache usable where it now lies.

    python bench/triton_cache.py strip CACHE_DIR
    python bench/triton_cache.py relocate CACHE_DIR

relocate: each ``__grp__*.json`` group file names its kernel's files by absolute path, where they were
written. Triton loads a kernel only if every one of them exists (triton.runtime.cache.FileCacheManager.
get_group), so a cache copied or restored elsewhere misses every kernel whose first home is gone, and
Triton compiles it again under the same file names (a file count sees nothing new). Measured on an
H100, 2026-11-26: the suite's kernel warm-up (five row widths) took 31.5 s on a copied cache that
held every kernel, and 1.6 s on the cache where it was written. relocate points each group at its own folder.

Each compiled kernel keeps its ``.json`` metadata and ``.cubin`` (and launchers their ``.so``,
autotuning its results); the IR texts (``.ptx``, ``.llir``, ``.ttgir``, ``.ttir``, ``.source``) are
three quarters of the bytes and are read only to compile again. Each ``__grp__*.json`` group file
then names only the files kept, or Triton would take the group as incomplete and compile again.
Measured on an H200 for tests/gpu: 659 MB down to 146 MB (17 MB as xz), and a GLA-1.3B test ran in
5.1 s from the stripped cache.
"""

from __future__ import annotations

import json
import pathlib
import sys

IR_SUFFIXES = frozenset({".ptx", ".llir", ".ttgir", ".ttir", ".source"})


def strip(root: pathlib.Path) -> tuple[int, int]:
    """Remove the IR files under ``root`` and from its group files; (files removed, bytes freed)."""
    _rewrite_groups(root, lambda group, children: {
        name: path for name, path in children.items() if pathlib.Path(name).suffix not in IR_SUFFIXES})
    removed = freed = 0
    for path in list(root.rglob("*")):
        if path.is_file() and path.suffix in IR_SUFFIXES:
            freed += path.stat().st_size
            path.unlink()
            removed += 1
    return removed, freed


def relocate(root: pathlib.Path) -> int:
    """Point every group file under ``root`` at the files beside it; the number of groups changed."""
    return _rewrite_groups(root, lambda group, children: {
        name: str(group.parent / pathlib.Path(path).name) for name, path in children.items()})


def _rewrite_groups(root: pathlib.Path, new_children) -> int:
    """Each group file's ``child_paths`` replaced by ``new_children(group file, child_paths)`` where that
    differs; the number of groups rewritten. A torn group file is left: Triton takes it as missing
    and compiles, as it would anyway."""
    changed = 0
    for group in root.rglob("__grp__*.json"):
        try:
            data = json.loads(group.read_text())
        except (OSError, ValueError):
            continue
        children = data.get("child_paths") if isinstance(data, dict) else None
        if not isinstance(children, dict):
            continue
        wanted = new_children(group, children)
        if wanted != children:
            group.write_text(json.dumps({**data, "child_paths": wanted}))
            changed += 1
    return changed


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("strip", "relocate"):
        print("usage: python bench/triton_cache.py strip|relocate CACHE_DIR", file=sys.stderr)
        return 2
    root = pathlib.Path(argv[1])
    if argv[0] == "relocate":
        print(f"triton_cache: {relocate(root)} kernel groups pointed at {root}")
        return 0
    removed, freed = strip(root)
    print(f"triton_cache: removed {removed} IR files ({freed / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

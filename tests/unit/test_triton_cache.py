"""bench/triton_cache.py relocate, checked against Triton's own cache manager: a cache copied to another
folder misses every kernel (its group files name the old paths) until relocated; and the suite
bench's per-side copy is relocated."""
import shutil

import triton.runtime.cache as cache_module   # a dependency on Linux x86-64 (pyproject.toml), as CI runs

from bench.triton_cache import relocate


def _manager(folder, monkeypatch, key="KERNELKEY"):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(folder))
    return cache_module.FileCacheManager(key)


def _write_kernel(folder, monkeypatch) -> None:
    manager = _manager(folder, monkeypatch)
    group = {name: manager.put(data, name) for name, data in
             (("chunk_fwd_kernel_h.cubin", b"\x7fELF"), ("chunk_fwd_kernel_h.json", '{"name": "chunk_fwd_kernel_h"}'))}
    manager.put_group("chunk_fwd_kernel_h.json", group)


def test_a_copied_cache_misses_until_relocated(tmp_path, monkeypatch):
    first, moved = tmp_path / "first", tmp_path / "moved"
    _write_kernel(first, monkeypatch)
    assert _manager(first, monkeypatch).get_group("chunk_fwd_kernel_h.json")   # a hit where it was written
    shutil.copytree(first, moved)
    shutil.rmtree(first)
    assert _manager(moved, monkeypatch).get_group("chunk_fwd_kernel_h.json") is None   # Triton would compile again
    assert relocate(moved) == 1
    found = _manager(moved, monkeypatch).get_group("chunk_fwd_kernel_h.json")
    assert found and all(path.startswith(str(moved / "KERNELKEY")) for path in found.values())
    assert relocate(moved) == 0   # already where it lies: nothing rewritten


def test_a_torn_group_file_is_left_for_triton_to_compile_again(tmp_path, monkeypatch):
    _write_kernel(tmp_path / "c", monkeypatch)
    group = next((tmp_path / "c").rglob("__grp__*.json"))
    group.write_text('{"child_paths": ')
    assert relocate(tmp_path / "c") == 0 and group.read_text() == '{"child_paths": '


def test_each_suite_side_gets_a_relocated_copy(tmp_path, monkeypatch):
    from bench.bench_suite_throughput import side_triton_cache

    _write_kernel(tmp_path / "shared", monkeypatch)
    env = side_triton_cache(tmp_path / "out", "lat+fuse")
    assert env == {"TRITON_CACHE_DIR": str(tmp_path / "out" / "triton-cache-lat-fuse")}
    shutil.rmtree(tmp_path / "shared")
    assert _manager(env["TRITON_CACHE_DIR"], monkeypatch).get_group("chunk_fwd_kernel_h.json")


def test_a_kept_side_cache_keeps_what_that_side_compiled(tmp_path, monkeypatch):
    """--side-caches keep: the warm call runs each side on its own copy from the cold call, not on a
    new copy of the shared cache."""
    from bench.bench_suite_throughput import side_triton_cache

    shared, out = tmp_path / "shared", tmp_path / "out"
    _write_kernel(shared, monkeypatch)

    def side(keep: bool) -> str:
        monkeypatch.setenv("TRITON_CACHE_DIR", str(shared))   # as the bench is started
        return side_triton_cache(out, "old", keep)["TRITON_CACHE_DIR"]

    copy = side(keep=False)
    own = _manager(copy, monkeypatch, key="OLDSIDE")   # what the old side compiled in its copy
    own.put_group("k.json", {"k.json": own.put('{"name": "k"}', "k.json")})
    assert side(keep=True) == copy
    assert _manager(copy, monkeypatch, key="OLDSIDE").get_group("k.json")
    assert side(keep=False) == copy   # fresh: a new copy of the shared cache, without it
    assert _manager(copy, monkeypatch, key="OLDSIDE").get_group("k.json") is None
    assert _manager(copy, monkeypatch).get_group("chunk_fwd_kernel_h.json")

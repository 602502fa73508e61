"""Modules laid out on disk as Triton's and fla's are, so a thread's real stack passes through them
(lat_core.train.first_step_watch reads stacks by file path)."""
import importlib.util
from pathlib import Path

FILES = {
    "triton/runtime/autotuner.py": "def _bench(then):\n    return then()\n",
    "triton/compiler/compiler.py": "def compile(then):\n    return then()\n",
    "triton/backends/nvidia/compiler.py": "def make_llir(then):\n    return then()\n",
    "triton/backends/nvidia/driver.py": "def launch(then):\n    return then()\n",
    "fla/ops/common/chunk_h.py": "def chunk_fwd_h(kernel, then):\n    return kernel(then)\n",
    "fla/ops/utils/cache.py": "def run(kernel, then):\n    return kernel(then)\n",
    "trainer/loop.py": "def train(then):\n    return then()\n",
}


def fake_stacks(root: Path) -> dict:
    """Each file above under root/site, loaded as a module of its own (a name that clashes with no
    installed package), by its last two path parts: ``runtime/autotuner``, ``common/chunk_h``, ..."""
    mods = {}
    for rel, text in FILES.items():
        path = root / "site" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(f"watch_fixture_{len(mods)}", path)
        mods["/".join(rel.split("/")[-2:]).removesuffix(".py")] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return mods

"""On a CUDA machine: the kernel warm-up (lat_core.train.kernel_warmup, as the warm-start process and
`lat-tui warmup` run it) compiles what a job needs, so the job, started afterwards on the same Triton
cache, compiles nothing (the cache's file count does not change)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("fla")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

from lat_core.config.job import parse_config  # noqa: E402
from lat_core.config.kernel_shapes import shapes_for  # noqa: E402
from lat_core.contract.kernel_warmup import write_shapes  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SUITE_LAYER = {"hidden_size": 2048, "num_hidden_layers": 1, "num_heads": 4, "vocab_size": 32000}


def files_in(folder: Path) -> set[str]:
    return {str(Path(d, f).relative_to(folder)) for d, _, names in os.walk(folder) for f in names}


@pytest.mark.parametrize("graphs", ["auto", False], ids=["graphed", "eager"])
def test_after_the_warm_up_a_jobs_training_compiles_nothing(tmp_path, graphs):
    """Graphed steps train on static unmasked rows; eager ones on rows fla unpads (varlen kernels, autotuned
    under keys of their own): the warm-up runs each job's kind of step."""
    raw = yaml.safe_load((ROOT / "configs/experiments/gla/tiny_lora_qkvo.yaml").read_text())
    # one layer of the suites' GLA-1.3B shape in bf16, 8 rows: its kernels' configs are in the shipped table, so
    # it compiles in seconds. The tiny float32 GLA autotuned for 181 s at 16-token rows on an H200, then
    # ended in fla's autotuning with "CUDA error: misaligned address" (bench/RESULTS.md, 2026-11-26)
    raw["model"].update(dtype="bfloat16", tiny=SUITE_LAYER)
    raw["train"].update(max_steps=2, eval_every=100, save_every=100, log_every=1, max_seq_len=32, batch_size=8,
                        graphs=graphs)
    raw["output_dir"] = str(tmp_path / "job")
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "job.yaml").write_text(yaml.safe_dump(raw))
    cache = tmp_path / "triton"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), "TRITON_CACHE_DIR": str(cache), "NUM_DATA_WORKERS": "0"}
    write_shapes(tmp_path / "shapes.json", shapes_for([parse_config(raw, environ={})]), env)

    warm = subprocess.run([sys.executable, "-m", "lat_core.train.kernel_warmup", "--shapes", str(tmp_path / "shapes.json")],
                          env=env, capture_output=True, text=True, timeout=900)
    assert warm.returncode == 0, warm.stderr[-3000:]
    assert "16-, 32-token rows compiled in" in warm.stdout, warm.stdout
    compiled = files_in(cache)
    assert compiled

    job = subprocess.run([sys.executable, "-m", "lat_core.train", "--cfg", str(tmp_path / "job" / "job.yaml")],
                         env=env, capture_output=True, text=True, timeout=900)
    assert job.returncode == 0, job.stderr[-3000:]
    assert files_in(cache) - compiled == set()  # the names of what the job compiled after all

    again = subprocess.run(warm.args, env=env, capture_output=True, text=True, timeout=900)
    assert "loaded from Triton's cache" in again.stdout, again.stdout

"""Warm start on a real GPU: after the preload, a forked child can still initialise CUDA."""
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
ROOT = Path(__file__).resolve().parents[2]

# In a fresh interpreter: the test process itself has asked CUDA (skipif above), which would poison forks.
CHILD_TRAINS = """
import os, torch
from lat_core.train.warm import preload
preload()  # raises PreloadTouchedCuda if any preloaded library queried CUDA
pid = os.fork()
if pid == 0:
    x = torch.ones(1024, 1024, device="cuda", requires_grad=True)
    (x @ x).sum().backward()
    torch.cuda.synchronize()
    os._exit(0 if float(x.grad[0, 0]) == 2048.0 else 4)
_, status = os.waitpid(pid, 0)
raise SystemExit(os.waitstatus_to_exitcode(status))
"""


def test_after_the_preload_a_forked_child_trains_on_the_gpu():
    done = subprocess.run([sys.executable, "-c", CHILD_TRAINS], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

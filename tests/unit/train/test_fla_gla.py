"""The lean fla import: GLA's classes without fla's other layers, models and kernels."""
import json
import subprocess
import sys
from pathlib import Path

from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import json, sys
from lat_core.train.fla_gla import gla_classes
GLAConfig, GLAForCausalLM = gla_classes()
from fla.models import GLAConfig as again
import fla
print(json.dumps({"modules": sorted(n for n in sys.modules if n == "fla" or n.startswith("fla.")),
                  "same": again is GLAConfig, "cls": GLAForCausalLM.__module__, "version": fla.__version__}))
"""

FULL = """
import json, sys
import fla.models
print(json.dumps({"modules": sorted(n for n in sys.modules if n == "fla" or n.startswith("fla."))}))
"""


def probe(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_only_glas_part_of_fla_is_imported_and_the_classes_are_flas_own():
    lean = probe(PROBE)
    full = probe(FULL)
    assert lean["same"] and lean["cls"] == "fla.models.gla.modeling_gla"
    assert lean["version"] and lean["version"] != "0"
    assert "fla.models.gla.modeling_gla" in lean["modules"] and "fla.ops.gla" in lean["modules"]
    assert not any(m.startswith(("fla.models.mamba", "fla.layers.rwkv", "fla.ops.rwkv7")) for m in lean["modules"])
    assert len(lean["modules"]) < len(full["modules"]) / 2, (len(lean["modules"]), len(full["modules"]))


def test_a_process_that_imported_fla_itself_keeps_it():
    out = probe("import json, fla, sys\nfrom lat_core.train.fla_gla import gla_classes\ngla_classes()\n"
                "print(json.dumps({'n': sum(m.startswith('fla') for m in sys.modules)}))")
    full = probe("import json, fla, sys\nprint(json.dumps({'n': sum(m.startswith('fla') for m in sys.modules)}))")
    assert out["n"] == full["n"]

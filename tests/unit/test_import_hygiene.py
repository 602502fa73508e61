"""The core never imports the UI; nothing outside lat_core/train imports the heavy ML stack."""

import pkgutil
import subprocess
import sys

import lat_core
import lat_tui

HEAVY = ("torch", "transformers", "peft", "fla", "datasets", "triton")
UI = ("textual", "rich")


def modules(package, skip=()):
    names = [package.__name__]
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not any(info.name.startswith(s) for s in skip):
            names.append(info.name)
    return names


def loaded_after_import(names):
    code = "import sys, importlib\n" + "".join(f"importlib.import_module({n!r})\n" for n in names)
    code += "print('\\n'.join(sorted(m.split('.')[0] for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_core_imports_neither_ui_nor_heavy_ml():
    loaded = loaded_after_import(modules(lat_core, skip=("lat_core.train",)))
    assert not loaded & set(UI + HEAVY), loaded & set(UI + HEAVY)


def test_tui_imports_no_heavy_ml():
    loaded = loaded_after_import(modules(lat_tui))
    assert "textual" in loaded  # the check is real: the UI package did load
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_attaching_to_a_run_does_not_load_the_plan_model():
    """The plan screen and lat_core.front.plan (pydantic, triage, notifications: ~0.4 s of imports) load
    when a plan is asked for; the dashboard's first frame does without them."""
    code = ("import sys, lat_tui.app, lat_tui.screens.dashboard\n"
            "print(' '.join(m for m in ('lat_core.front.plan', 'lat_tui.screens.plan', 'pydantic') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == []

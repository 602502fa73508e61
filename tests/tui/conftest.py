"""Shared fixtures for the Pilot tests: a tiny configs dir, a tmp journal, a fake GPU probe."""

from __future__ import annotations

from pathlib import Path

import pytest

from lat_core.config.suites import SuiteRegistry
from lat_core.monitor.fake_nvml import FakeNvml
from lat_core.monitor.gpu import GpuProbe
from lat_core.front.service import open_store
from lat_tui.app import LatApp

EXPERIMENT = """\
name: a
model: {family: gla, name_or_path: tiny-random, tiny: {hidden_size: 64, num_hidden_layers: 2, num_heads: 2}}
peft: {method: lora, r: 8, alpha: 16, target_modules: [q_proj]}
data: tiny-sst2
seed: 1
train: {batch_size: 8, lr: 0.002, max_steps: 10}
"""


class EngineStarterSpy:
    """Stands in for ensure_engine: records calls, starts nothing."""

    def __init__(self):
        self.calls: list[tuple[Path, dict]] = []

    def __call__(self, state_dir: Path, extra_env: dict | None = None) -> bool:
        self.calls.append((Path(state_dir), dict(extra_env or {})))
        return True


@pytest.fixture
def configs_dir(tmp_path: Path) -> Path:
    root = tmp_path / "configs"
    (root / "suites").mkdir(parents=True)
    (root / "experiments").mkdir()
    (root / "experiments" / "a.yaml").write_text(EXPERIMENT)
    (root / "suites" / "demo.yaml").write_text("name: demo\ndescription: one tiny config\nrounds: {1: [a.yaml]}\n")
    return root


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def journal(state_dir):
    """The journal as the engine would write it; the app under test reads the same file."""
    store = open_store(state_dir)
    yield store
    store.close()


@pytest.fixture
def engine_spy() -> EngineStarterSpy:
    return EngineStarterSpy()


@pytest.fixture
def make_app(state_dir, configs_dir, engine_spy):
    def make(gpus: int = 0) -> LatApp:
        probe = GpuProbe(FakeNvml.with_gpus(gpus)) if gpus else GpuProbe(FakeNvml(init_error="driver not loaded"))
        return LatApp(state_dir, SuiteRegistry(configs_dir), probe, engine_starter=engine_spy)

    return make

"""What the screens are built from, so tests can pass a tmp journal, test configs and a fake GPU."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from lat_core.config.suites import SuiteRegistry
from lat_core.monitor.gpu import GpuProbe


@dataclass(frozen=True)
class AppContext:
    state_dir: Path
    registry: SuiteRegistry
    probe: GpuProbe
    engine_starter: Callable[..., object]  # lat_core.service.ensure_engine, or a fake in tests

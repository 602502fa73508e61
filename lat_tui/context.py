"""What the screens are built from, so tests can pass a tmp journal, test configs and a fake GPU."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lat_core.front.client import Client, GpuProbe, SuiteRegistry


@dataclass(frozen=True)
class AppContext:
    state_dir: Path
    registry: SuiteRegistry
    probe: GpuProbe
    engine_starter: Callable[..., object]  # lat_core.front.client.ensure_engine, or a fake in tests
    client: Client = field(init=False, repr=False, compare=False)  # every read and command goes here

    def __post_init__(self) -> None:
        object.__setattr__(self, "client", Client(self.state_dir))

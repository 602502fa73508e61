"""The client's surface: every name it offers front ends resolves, the libraries' names are loaded only
when first used, and the type checkers' view of them (the TYPE_CHECKING imports) is the same list."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import lat_core.front.client as client

HEAVY_LIBRARIES = ("lat_core.front.plan", "lat_core.front.rerun", "lat_core.results", "lat_core.triage",
                   "lat_core.config.email_yaml", "pydantic")


def type_checking_imports() -> dict[str, str]:
    """name -> module of every ``from M import N`` under ``if TYPE_CHECKING:`` in client.py."""
    tree = ast.parse(Path(client.__file__).read_text())
    blocks = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    return {alias.name: statement.module for block in blocks for statement in block.body
            if isinstance(statement, ast.ImportFrom) for alias in statement.names}


def test_every_library_name_is_declared_for_type_checkers_from_the_same_module():
    lazy = {name: module for module, names in client._ELSEWHERE.items() for name in names}
    assert type_checking_imports() == lazy


@pytest.mark.parametrize("name", client.__all__)
def test_every_offered_name_resolves(name):
    assert getattr(client, name) is not None


def test_a_library_name_is_its_home_modules_object():
    assert client.Plan is importlib.import_module("lat_core.front.plan").Plan
    assert client.aggregate_live is importlib.import_module("lat_core.results.live").aggregate_live


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'config_trees'"):
        client.config_trees  # a library name the client does not offer


def test_importing_the_client_loads_no_library_until_a_name_is_used():
    code = ("import sys, lat_core.front.client as c\n"
            f"print(' '.join(m for m in {HEAVY_LIBRARIES!r} if m in sys.modules))\n"
            "c.classify\n"
            "print('lat_core.triage' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["", "True"]

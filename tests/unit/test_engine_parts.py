"""The engine is composed parts over a declared state (lat_core/engine/state.py), not mixins: each
part calls the others through their public names, so what one part relies on of another is its
declared surface, never an attribute it happens to set."""

import ast
from pathlib import Path

from lat_core.engine.loop import Engine

ENGINE = Path(__file__).resolve().parents[2] / "lat_core" / "engine"


def private_reaches(source: str) -> list[str]:
    """``x._name`` where ``x`` is not ``self`` or ``cls``: one object reading another's private name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", "os")):  # os._exit
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_check_sees_a_part_reaching_into_another():
    assert private_reaches("self._groups._group_popens.append(p)") == ["line 1: self._groups._group_popens"]
    assert private_reaches("self._groups.watch(p)\nself._state.popens[1] = p") == []


def test_no_engine_part_reaches_into_another():
    reaches = {str(path.relative_to(ENGINE)): found for path in sorted(ENGINE.rglob("*.py"))
               if (found := private_reaches(path.read_text()))}
    assert reaches == {}


def test_the_engine_inherits_nothing():
    assert Engine.__mro__ == (Engine, object)

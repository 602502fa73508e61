"""Read the YAML files a user hands LAT (plans, suites, experiment configs, PEFT specs) so that any
file that is not small UTF-8 YAML text ends as one YamlFileError naming the file and what is wrong,
never a UnicodeDecodeError or a parser's traceback. Callers turn it into their own typed error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lat_core.errors import LatError
from lat_core.text import shorten

# Far above any real file (the shipped ones are under 2 KB, a 10,000-pair plan about 200 KB); PyYAML
# parses about 1 MB a second, so a bigger file is a mistake that would stall the command.
MAX_BYTES = 2 * 1024 * 1024
# Values once every alias (``*name``) is expanded: a few hundred bytes of aliases to aliases can
# stand for billions of values, which expanding the jobs' configs would walk, copy and write.
MAX_VALUES = 1_000_000
# Lists and mappings inside each other; aliases can nest deeper than the text does, and the code that
# walks a config recurses once a level. Real files nest five or six deep.
MAX_DEPTH = 64
# PyYAML's safe constructors raise plain Python errors for some malformed scalars and tags
# (``2001-13-45`` a ValueError, ``!!timestamp x`` an AttributeError) and its composer recurses once
# per nesting level (``[[[[...`` a RecursionError): all mean "not YAML we can read".
_PARSER_FAULTS = (yaml.YAMLError, ValueError, TypeError, AttributeError, RecursionError)

#: A mapping as YAML reads it: its keys may be any scalar (``1: x``, ``true: y``) and its values
#: anything, until a schema (a pydantic model, a hand-written check) has looked at them.
YamlMapping = dict[Any, Any]


class YamlFileError(LatError):
    """A YAML file that cannot be read as data; ``where`` is its path."""

    title = "Unreadable YAML file"


def read_yaml(path: str | Path) -> object:
    """The file's data (any YAML type), or YamlFileError naming the file and what is wrong."""
    path = Path(path)
    text = _read_text(path)
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise YamlFileError("not valid YAML: nested too deeply", where=str(path)) from None
    except _PARSER_FAULTS as exc:
        raise YamlFileError(f"not valid YAML: {yaml_problem(exc)}", where=str(path)) from None
    shape = expanded_shape(data)
    if shape is None:
        raise YamlFileError("a value holds itself through an alias (*name), without end", where=str(path))
    if shape[0] > MAX_VALUES:
        raise YamlFileError(f"its aliases (*name) expand it to more than {MAX_VALUES:,} values", where=str(path))
    if shape[1] > MAX_DEPTH:
        raise YamlFileError(f"not valid YAML: nested too deeply (over {MAX_DEPTH} levels)", where=str(path))
    return data


def read_yaml_mapping(path: str | Path, expected: str) -> YamlMapping:
    """The file's top-level mapping; ``expected`` says what it should hold (``"a mapping of plan
    fields"``) for the error when it holds something else."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise YamlFileError(f"expected {expected}, got {_type_word(data)}", where=str(path))
    return data


def _read_text(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise YamlFileError(f"cannot read it: {exc.strerror or exc}", where=str(path)) from None
    if len(raw) > MAX_BYTES:
        raise YamlFileError(f"too large for a YAML file LAT reads (over {MAX_BYTES // 1024 // 1024} MiB)",
                            where=str(path))
    if b"\x00" in raw:
        raise YamlFileError(f"a binary file (NUL byte at offset {raw.index(0)}), not YAML text", where=str(path))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlFileError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                            "a binary file or another encoding?", where=str(path)) from None


def expanded_shape(data: object) -> tuple[int, int] | None:
    """(values, depth) of ``data`` with every shared list or mapping counted each time it is
    referred to; None when one contains itself. Each is walked once (iteratively: alias chains
    can be deeper than Python's recursion)."""
    shapes: dict[int, tuple[int, int]] = {}
    on_path: set[int] = set()
    stack: list[tuple[object, bool]] = [(data, False)]
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, (dict, list)) or (not children_done and id(node) in shapes):
            continue
        children = list(node.values()) if isinstance(node, dict) else node
        if children_done:
            on_path.discard(id(node))
            inner = [shapes.get(id(child), (1, 0)) for child in children]
            shapes[id(node)] = (1 + sum(size for size, _ in inner), 1 + max((depth for _, depth in inner), default=0))
            continue
        if id(node) in on_path:
            return None
        on_path.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in children if isinstance(child, (dict, list)))
    return shapes.get(id(data), (1, 0))


def yaml_problem(exc: Exception) -> str:
    """``line L, column C: problem`` of a parser error, else its message."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem


def _type_word(data: object) -> str:
    return "an empty file" if data is None else f"{type(data).__name__} ({shorten(repr(data), 60)})"

"""A small JSON Schema checker for the keywords LAT's shipped schemas use (type, const, enum,
required, properties, additionalProperties, items, minimum, local $ref), so a test can check a
document against the schema file the package ships without the jsonschema package.

    problems(document, schema) -> ["$.datasets[0].rows[1].n: expected integer, got str", ...]
"""
from __future__ import annotations

from typing import Any

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, TYPES[name])


def _resolve(schema: dict, root: dict) -> dict:
    while "$ref" in schema:
        ref = schema["$ref"]
        assert ref.startswith("#/"), f"only local $ref: {ref}"
        node: Any = root
        for part in ref[2:].split("/"):
            node = node[part]
        schema = {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def problems(value: Any, schema: dict, root: dict | None = None, where: str = "$") -> list[str]:
    root = schema if root is None else root
    schema = _resolve(schema, root)
    found: list[str] = []
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else types
        if not any(_is(value, n) for n in names):
            return [f"{where}: expected {'|'.join(names)}, got {type(value).__name__}"]
    if "const" in schema and value != schema["const"]:
        found.append(f"{where}: expected {schema['const']!r}, got {value!r}")
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{where}: {value!r} not one of {schema['enum']}")
    if "minimum" in schema and _is(value, "number") and value < schema["minimum"]:
        found.append(f"{where}: {value} below {schema['minimum']}")
    if isinstance(value, dict):
        found += [f"{where}: lacks {name!r}" for name in schema.get("required", ()) if name not in value]
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                found += problems(item, properties[key], root, f"{where}.{key}")
            elif extra is False:
                found.append(f"{where}: unexpected {key!r}")
            elif isinstance(extra, dict):
                found += problems(item, extra, root, f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            found += problems(item, schema["items"], root, f"{where}[{i}]")
    return found

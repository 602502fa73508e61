"""A plan's problems as lines a person can read: a problem that many entries of a list share (10,000
pairs naming one unknown dataset) is one line naming a few of them, and the lines are capped, so a
bad plan of any size gives a message of a few KB, not megabytes."""

from __future__ import annotations

import re
from dataclasses import dataclass

SHOWN = 3  # entries named on a shared problem's line
MAX_LINES = 20  # problem lines in one error; the rest are counted
_INDEX = re.compile(r"\[\d+\]")
_LIST_FIELD = re.compile(r"(\w+)\[\d+\]")


@dataclass(frozen=True)
class Found:
    """One problem of one list entry (or of a plain field, with no index in ``field``)."""

    field: str  # "pairs[3]", "pairs[3].seed", "gpus"
    problem: str  # what is wrong, the same text for every entry with this problem
    alone: str  # the full line when no other entry shares the problem
    instance: str = ""  # the entry, as the shared line names it ("3:x")


def problem_lines(found: list[Found]) -> list[str]:
    """One line per (field without its index, problem), in first-seen order."""
    groups: dict[tuple[str, str], list[Found]] = {}
    for item in dict.fromkeys(found):  # the same problem twice (two branches of a union) is one
        groups.setdefault((_INDEX.sub("", item.field), item.problem), []).append(item)
    return [_line(field, problem, hits) for (field, problem), hits in groups.items()]


def _line(field: str, problem: str, hits: list[Found]) -> str:
    if len(hits) == 1:
        return hits[0].alone
    listed = _LIST_FIELD.search(hits[0].field)
    noun = listed.group(1) if listed else "entries"
    shown = ", ".join(hit.instance or hit.field for hit in hits[:SHOWN])
    more = f" ... ({len(hits) - SHOWN:,} more)" if len(hits) > SHOWN else ""
    return f"field '{field}': {problem} in {len(hits):,} {noun}: {shown}{more}"


def bounded(lines: list[str]) -> list[str]:
    """At most MAX_LINES lines, then how many more there are."""
    if len(lines) <= MAX_LINES:
        return lines
    return lines[:MAX_LINES] + [f"... and {len(lines) - MAX_LINES:,} more problems"]

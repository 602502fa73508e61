"""``lat-tui suites [--configs DIR] [--json]``: the suites a plan can name and which tree each comes from.

A user's tree (``--configs DIR`` or ``$LAT_CONFIGS``) is searched before the shipped one, so a user
suite with a shipped suite's name replaces it; the listing says so.
"""

from __future__ import annotations

import argparse
import json
import sys

from lat_core.errors import LatError

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lat-tui suites", description="list the suites a plan can name")
    p.add_argument("--configs", help="your config tree, searched before the shipped one (default $LAT_CONFIGS)")
    p.add_argument("--json", action="store_true", help="one JSON object per suite instead of a table")
    return p


def main(argv: list[str]) -> int:
    from lat_core.front.client import suite_registry

    args = build_parser().parse_args(argv)
    try:
        registry = suite_registry(args.configs)
        rows = [_row(registry, entry) for entry in registry.entries()]
    except LatError as exc:
        print(f"lat-tui suites: {exc.title}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print("trees searched: " + ", ".join(f"{t.origin} {t.path}" for t in registry.trees))
    for row in rows:
        shadow = f"  (replaces {', '.join(row['replaces'])})" if row["replaces"] else ""
        jobs = f"{row['configs']} config(s)" if row["error"] is None else f"error: {row['error']}"
        about = row["description"] if len(row["description"]) <= 70 else row["description"][:67] + "..."
        print(f"{row['name']:<20} {row['origin']:<8} {jobs:<14} {about}{shadow}")
        print(f"{'':<20} {row['path']}")
    return 0


def _row(registry, entry) -> dict:
    """One suite's listing; a suite that does not load is listed with its error, not dropped."""
    try:
        suite = registry.get(entry.name)
        configs, error = sum(map(len, suite.rounds.values())), None
        description = " ".join(suite.description.split())   # YAML block text: one line
    except LatError as exc:
        configs, description, error = 0, "", str(exc)
    return {"name": entry.name, "origin": entry.origin, "path": str(entry.path), "configs": configs,
            "description": description, "error": error, "replaces": [str(p) for p in entry.shadows]}

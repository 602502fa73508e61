"""``lat-tui results [OUTPUT_ROOT] [--out DIR] [--small] [--workers N] [--format csv,json,md,png]``.

Without OUTPUT_ROOT it aggregates the latest run's output root. Prints the Markdown tables to stdout, writes the chosen formats to ``--out`` (default
``<OUTPUT_ROOT>/_results``) and lists skipped folders with their reasons on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lat_core.errors import LatError
from lat_core.front.client import FOREIGN_REASON

EXIT_FAILED, EXIT_USAGE = 1, 2
SKIPPED_SHOWN = 20


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lat-tui results",
                                description="aggregate an output tree into tables and plots")
    p.add_argument("output_root", nargs="?", default=None,
                   help="the plan's output_root (default: the latest run's)")
    p.add_argument("--base_dir", help=argparse.SUPPRESS)   # the old `aggregate_result.main --base_dir X --output Y`
    p.add_argument("--state-dir", metavar="DIR", help="where to find the latest run (default: $LAT_STATE_DIR "
                   "or ~/.local/state/lat)")
    p.add_argument("--out", "--output", help="where files go (default: OUTPUT_ROOT/_results)")
    p.add_argument("--small", action="store_true", help="leave out checkpoint and job config paths")
    p.add_argument("--workers", type=int, default=None, help="threads reading job folders")
    p.add_argument("--format", default="csv,json,md,png",
                   help="comma-separated subset of csv,json,md,png (default: all)")
    return p


def print_skipped(report, stream=None) -> None:
    """The number of skipped folders and the first SKIPPED_SHOWN with reasons."""
    stream = stream or sys.stderr
    if not report.skipped:
        return
    print(f"{len(report.skipped)} folder(s) skipped:", file=stream)
    for item in report.skipped[:SKIPPED_SHOWN]:
        print(f"  {item.path}: {item.reason}", file=stream)
    if len(report.skipped) > SKIPPED_SHOWN:
        print(f"  ... and {len(report.skipped) - SKIPPED_SHOWN} more (see results.json)", file=stream)


def run(args) -> int:
    from lat_core.front.client import aggregate, build_tables, check_formats, table_markdown, write_report

    formats = check_formats(args.format.split(","))
    root = Path(args.output_root).expanduser() if args.output_root else latest_output_root(args.state_dir)
    report = aggregate(root, workers=args.workers)
    if not report.results and all(is_foreign(s) for s in report.skipped):
        print(f"lat-tui results: no job folder (job.yaml or events.jsonl) under {root}; nothing written",
              file=sys.stderr)
        return EXIT_FAILED
    tables = build_tables(report, small=args.small)
    for table in tables:
        print(table_markdown(table))
    if not tables:
        print(f"no finished job with a usable evaluation under {root}")
    out = Path(args.out).expanduser() if args.out else root / "_results"
    written = write_report(report, out, formats=formats, small=args.small)
    print_skipped(report)
    print(f"{len(report.results)} job(s) aggregated in {report.seconds:.2f}s; "
          f"{len(written)} file(s) written to {out}", file=sys.stderr)
    return 0


def is_foreign(skipped) -> bool:
    return skipped.reason == FOREIGN_REASON


def latest_output_root(state_dir: str | None) -> Path:
    from lat_core.front.client import Client

    return Path(Client(state_dir, existing=True).resolve_run().output_root)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    args.output_root = args.base_dir or args.output_root
    if args.workers is not None and args.workers < 1:
        print("lat-tui results: --workers must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    try:
        return run(args)
    except LatError as exc:
        print(f"lat-tui results: {exc.title}: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())

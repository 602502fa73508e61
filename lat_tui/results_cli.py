"""``lat-tui results [OUTPUT_ROOT] [--run N ...] [--include-partial] [--json] [--out DIR] [--small]
[--workers N] [--format csv,json,md,png]``.

Every job of the runs asked for is accounted for: the journal's runs (``--run N``; else every run
whose output root is OUTPUT_ROOT, or the latest run's root and its runs) in their states, and job
folders under the root that none of them names. Prints the summary, the Markdown tables and the jobs
not in them with their reasons to stdout (``--json``: the JSON document instead), writes the chosen
formats to ``--out`` (default ``<OUTPUT_ROOT>/_results``). Exit 0 when some job is in a table, 1 when
none is (no job folder at all: nothing written), 2 for bad input.
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
                                description="aggregate an output tree into tables and plots, accounting for every job")
    p.add_argument("output_root", nargs="?", default=None,
                   help="the plan's output_root (default: the latest run's)")
    p.add_argument("--base_dir", help=argparse.SUPPRESS)   # the old `aggregate_result.main --base_dir X --output Y`
    p.add_argument("--state-dir", metavar="DIR", help="where to find the runs (default: $LAT_STATE_DIR "
                   "or ~/.local/state/lat)")
    p.add_argument("--run", type=int, action="append", metavar="N",
                   help="account for this run's jobs only (repeat for several; default: every run of the root)")
    p.add_argument("--include-partial", action="store_true",
                   help="add the best-so-far metrics of failed and cancelled jobs, as rows marked ~")
    p.add_argument("--json", action="store_true", help="print the JSON document (results.schema.json) to stdout")
    p.add_argument("--out", "--output", help="where files go (default: OUTPUT_ROOT/_results)")
    p.add_argument("--small", action="store_true", help="leave out checkpoint and job config paths")
    p.add_argument("--workers", type=int, default=None, help="threads reading job folders")
    p.add_argument("--format", default="csv,json,md,png",
                   help="comma-separated subset of csv,json,md,png (default: all)")
    return p


def print_skipped(report, stream=None) -> None:
    """The number of folders that hold no job and the first SKIPPED_SHOWN with reasons."""
    stream = stream or sys.stderr
    if not report.skipped:
        return
    print(f"{len(report.skipped)} folder(s) skipped:", file=stream)
    for item in report.skipped[:SKIPPED_SHOWN]:
        print(f"  {item.path}: {item.reason}", file=stream)
    if len(report.skipped) > SKIPPED_SHOWN:
        print(f"  ... and {len(report.skipped) - SKIPPED_SHOWN} more (see results.json)", file=stream)


def print_not_in_tables(report) -> None:
    """Each job that is not in a table, with its state and why (the report's Jobs section has all)."""
    from lat_core.front.client import not_in_tables

    missing = not_in_tables(report)
    if missing:
        print(f"Not in the tables ({len(missing)}):")
    for job in missing:
        number = f"job {job.job_id} " if job.job_id is not None else ""
        print(f"  {number}{job.name}: {job.state}: {job.reason}")


def runs_asked(args) -> tuple[Path, list, bool]:
    """(output root, the journal's runs to account for, whether the root's other folders count)."""
    from lat_core.front.client import Client, NoStateError

    if args.run:
        client = Client(args.state_dir, existing=True)
        runs = [client.run(n) for n in args.run]
        roots = {str(Path(r.output_root).expanduser().resolve()) for r in runs}
        if len(roots) > 1 and not args.output_root:
            raise LatError(f"runs {', '.join(map(str, args.run))} have different output roots ({', '.join(sorted(roots))}); "
                           "ask for one root's runs", where="--run")
        root = Path(args.output_root).expanduser() if args.output_root else Path(runs[0].output_root)
        return root, runs, False
    if args.output_root:
        root = Path(args.output_root).expanduser()
        try:
            client = Client(args.state_dir, existing=True)
        except NoStateError:
            return root, [], True   # a tree without a journal here: its folders alone
        return root, client.runs_of_root(root), True
    client = Client(args.state_dir, existing=True)
    root = Path(client.resolve_run().output_root)
    return root, client.runs_of_root(root), True


def journal_jobs(args, runs) -> list:
    from lat_core.front.client import Client

    if not runs:
        return []
    client = Client(args.state_dir, existing=True)
    return [job for run in runs for job in client.jobs(run.id)]


def run(args) -> int:
    from lat_core.front.client import aggregate, build_tables, check_formats, report_json, summary_line
    from lat_core.front.client import build_sweeps, sweep_markdown, table_markdown, write_report

    formats = check_formats(args.format.split(","))
    root, runs, strays = runs_asked(args)
    report = aggregate(root, workers=args.workers, jobs=journal_jobs(args, runs), runs=[r.id for r in runs],
                       strays=strays, include_partial=args.include_partial)
    if not report.accounts and all(is_foreign(s) for s in report.skipped):
        print(f"lat-tui results: no job folder (job.yaml or events.jsonl) under {root}; nothing written",
              file=sys.stderr)
        return EXIT_FAILED
    tables = build_tables(report, small=args.small)
    if args.json:
        print(report_json(report, tables), end="")
    else:
        print(summary_line(report) + "\n")
        for table in tables:
            print(table_markdown(table))
        for sweep in build_sweeps(report, tables):
            print(sweep_markdown(sweep))
        print_not_in_tables(report)
    out = Path(args.out).expanduser() if args.out else root / "_results"
    written = write_report(report, out, formats=formats, small=args.small)
    print_skipped(report)
    print(f"{len(report.results)} job(s) in the tables, aggregated in {report.seconds:.2f}s; "
          f"{len(written)} file(s) written to {out}", file=sys.stderr)
    if not report.results:
        print(f"lat-tui results: no job under {root} succeeded with a usable evaluation (each is listed with "
              "its reason above)", file=sys.stderr)
        return EXIT_FAILED
    return 0


def is_foreign(skipped) -> bool:
    return skipped.reason == FOREIGN_REASON


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

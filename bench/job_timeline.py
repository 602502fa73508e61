"""Where each job's time went: launch, set-up done, first step, last step, end.

    python bench/job_timeline.py JOB_DIR [JOB_DIR ...]

Reads each job's ``events.jsonl`` and, for jobs the engine ran, the runner's exit record (its
``started`` is the launch). Times are seconds after the earliest launch among the jobs given, so
one side of a benchmark reads as one timeline.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lat_core.contract.jobdir import ExitRecord, JobDir, Started, Step  # noqa: E402


def job_times(job_dir: Path) -> dict:
    folder = JobDir(job_dir)
    events = folder.read_events().events
    steps = [e.t for e in events if isinstance(e, Step)]
    started = next((e.t for e in events if isinstance(e, Started)), None)
    record = folder.latest_exit_record() or ExitRecord(None)
    return {"job": job_dir.name, "launch": record.started or (events[0].t if events else None),
            "setup_done": started, "first_step": steps[0] if steps else None,
            "last_step": steps[-1] if steps else None, "end": record.ended or (events[-1].t if events else None)}


def main(dirs: list[str]) -> None:
    rows = [job_times(Path(d)) for d in dirs]
    zero = min(r["launch"] for r in rows if r["launch"] is not None)
    print(f"{'job':28} {'launch':>7} {'set up':>7} {'step 1':>7} {'last':>7} {'end':>7}")
    for r in rows:
        cells = [r[k] - zero if r[k] is not None else float("nan")
                 for k in ("launch", "setup_done", "first_step", "last_step", "end")]
        print(f"{r['job'][:28]:28} " + " ".join(f"{c:7.1f}" for c in cells))


if __name__ == "__main__":
    main(sys.argv[1:])

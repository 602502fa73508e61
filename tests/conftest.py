import sys
from pathlib import Path

import pytest

from tests.helpers.long_tests import LongTests

ROOT = Path(__file__).resolve().parents[1]
FAKE_TRAINER = ROOT / "tests" / "helpers" / "fake_trainer.py"


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path, monkeypatch):
    """No test touches the user's ~/.local/state/lat."""
    monkeypatch.setenv("LAT_STATE_DIR", str(tmp_path / "state"))


def fake_job(tmp_path: Path, name: str, *, sleep=0.3, exit_code=0, env=None, extra=()):
    """A job record for Store.add_jobs that runs the fake trainer in its own directory."""
    job_dir = tmp_path / "out" / name
    job_dir.mkdir(parents=True, exist_ok=True)
    record = tmp_path / "record"
    record.mkdir(exist_ok=True)
    argv = [sys.executable, str(FAKE_TRAINER), "--sleep", str(sleep), "--exit", str(exit_code),
            "--record", str(record), "--name", name, *extra]
    return {"key": name, "suite": "t", "round": 1, "stem": name, "seed": 1, "dataset": "tiny-sst2",
            "job_dir": str(job_dir), "argv": argv, "env": env or {}}


def intervals(tmp_path: Path) -> dict[str, tuple[float, float]]:
    """name -> (start, end) from the fake trainers' own records."""
    out = {}
    for log in (tmp_path / "record").glob("*.log"):
        lines = log.read_text().split("\n")
        start = float(lines[0].split()[1])
        end = float(next(l for l in lines if l.startswith("end")).split()[1])
        out[log.stem] = (start, end)
    return out


def max_overlap(spans) -> int:
    points = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda p: (p[0], p[1]))
    cur = best = 0
    for _, d in points:
        cur += d
        best = max(best, cur)
    return best


def pytest_collection_modifyitems(items):
    """Under pytest-xdist (``-n N --dist loadgroup``, as scripts/setup.sh runs the suite), tests that
    share one thing of the host run in one worker: the local Slurm cluster (a second worker's session
    would start and stop the same daemons under the first one's jobs) and the engine's rendezvous
    ports (two multi-process jobs probing from 29500 at once could pick the same one)."""
    for item in items:
        if "slurm_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("slurm"))
        elif item.path.name in ("test_multiprocess.py", "test_admission.py"):  # both run 2-rank jobs
            item.add_marker(pytest.mark.xdist_group("rendezvous"))


_long_tests: LongTests | None = None


def pytest_sessionstart(session):
    """Where tests are reported (a plain run, or pytest-xdist's controller, not its workers): say
    which tests have run for minutes (tests/helpers/long_tests.py)."""
    global _long_tests
    if hasattr(session.config, "workerinput"):
        return
    writer = session.config.get_terminal_writer()
    _long_tests = LongTests(lambda line: writer.line(f"\n[{line}]", yellow=True))
    _long_tests.watch()


def pytest_sessionfinish(session):
    if _long_tests is not None:
        _long_tests.close()


def pytest_runtest_logstart(nodeid, location):
    if _long_tests is not None:
        _long_tests.started(nodeid)


def pytest_runtest_logfinish(nodeid, location):
    if _long_tests is not None:
        _long_tests.ended(nodeid)

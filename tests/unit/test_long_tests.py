"""The suite says which tests hold it up (tests/helpers/long_tests.py)."""

import subprocess
import sys
import textwrap

from tests.conftest import ROOT
from tests.helpers.long_tests import LONG_S, LongTests
from tests.helpers.waits import HANG_S


def test_only_tests_running_past_the_limit_are_named_longest_first():
    now = [0.0]
    tests = LongTests(lambda line: None, clock=lambda: now[0])
    tests.started("t.py::a")
    now[0] = 10.0
    tests.started("t.py::b")
    tests.started("t.py::quick")
    tests.ended("t.py::quick")
    assert tests.report() is None  # nothing has run for minutes
    now[0] = LONG_S + 5
    assert tests.report() == "still running: t.py::a (2 min)"
    now[0] = LONG_S + 70
    assert tests.report() == "still running: t.py::a (3 min); t.py::b (3 min)"
    tests.ended("t.py::a")
    tests.ended("t.py::b")
    assert tests.report() is None


def test_a_run_under_xdist_prints_the_test_that_holds_it(tmp_path):
    """A real pytest -n 2 run with the limits shortened: the controller names the long test."""
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        import tests.helpers.long_tests as long_tests
        long_tests.LONG_S, long_tests.EVERY_S = 0.2, 0.2
        from tests.conftest import pytest_sessionstart, pytest_sessionfinish, pytest_runtest_logstart, pytest_runtest_logfinish
    """))
    (tmp_path / "test_slow.py").write_text(textwrap.dedent("""
        import os, time
        def test_quick():
            pass
        def test_held():
            while not os.path.exists("release"):  # ends once the run has named it
                time.sleep(0.05)
    """))
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2", "-o",
                             "addopts=", "-o", "timeout=0", "--rootdir", str(tmp_path), str(tmp_path)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = ""
    try:
        while "still running: test_slow.py::test_held" not in seen:
            line = proc.stdout.readline()
            assert line, seen
            seen += line
    finally:
        (tmp_path / "release").touch()
        out, _ = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, seen + out
    assert "test_quick" not in seen

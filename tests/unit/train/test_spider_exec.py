"""Predicted SQL runs under guards (time, memory, rows, read-only); results compare as the official
test-suite evaluator does; every metric has a value for empty input."""
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lat_core.train import metrics as M
from lat_core.train.sql_exec import SqlLimits, exec_match, results_match, run_query
from tests.helpers.waits import HANG_S

FAST = SqlLimits(seconds=1.0)
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "shop.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE item (id INTEGER, name TEXT, price INTEGER)")
    con.executemany("INSERT INTO item VALUES (?, ?, ?)", [(i, f"n{i}", i % 7) for i in range(2000)])
    con.commit()
    con.close()
    return path


def test_cross_join_is_stopped_by_the_time_limit(db):
    start = time.thread_time()
    result = run_query(db, "SELECT count(*) FROM item a, item b, item c", FAST)
    assert result.error == "time limit"
    assert time.thread_time() - start < 5  # a 1 s limit of CPU time, whatever the load


def test_the_time_limit_counts_the_querys_cpu_time_not_the_wall_clock(db, monkeypatch):
    """On a loaded host wall time passes while the query waits for a CPU: an hour of it between
    every two looks of the progress handler must not turn a short query into a time-out."""
    hours = iter(range(0, 10**9, 3600))
    monkeypatch.setattr(time, "monotonic", lambda: float(next(hours)))
    monkeypatch.setattr(time, "time", lambda: float(next(hours)))
    result = run_query(db, "SELECT count(*) FROM item a, item b WHERE a.id < 300", FAST)
    assert result.ok and result.rows == [(300 * 2000,)], result.error


def test_unbounded_recursive_cte_is_stopped(db):
    endless = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
    assert run_query(db, endless + "SELECT x FROM r", SqlLimits(seconds=30, max_rows=1000)).error == "row limit"
    assert run_query(db, endless + "SELECT group_concat(x) FROM r", FAST).error == "time limit"


def test_values_past_the_length_cap_are_refused(db):
    endless = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
    assert run_query(db, "SELECT randomblob(50000000)").error.startswith("size limit")
    capped = SqlLimits(seconds=30, max_length=1 << 20)
    assert run_query(db, endless + "SELECT group_concat(x) FROM (SELECT x FROM r LIMIT 1000000)", capped
                     ).error.startswith("size limit")


def test_attach_and_writes_are_denied_and_create_no_file(db, tmp_path):
    target = tmp_path / "evil.sqlite"
    result = run_query(db, f"ATTACH DATABASE '{target}' AS evil")
    assert result.error and "not authorized" in result.error
    assert not target.exists()
    for sql in ("CREATE TABLE x (a)", "DELETE FROM item", "PRAGMA writable_schema = 1", "VACUUM INTO 'x.db'"):
        assert not run_query(db, sql).ok, sql
    assert run_query(db, "SELECT count(*) FROM item").rows == [(2000,)]


def test_swapped_columns_score_1(db):
    assert exec_match(db, "SELECT price, name FROM item WHERE id < 5", "SELECT name, price FROM item WHERE id < 5")
    assert not exec_match(db, "SELECT price, id FROM item WHERE id < 5", "SELECT name, price FROM item WHERE id < 5")


def test_order_by_in_gold_makes_order_count(db):
    gold = "SELECT name FROM item WHERE id < 5 ORDER BY id DESC"
    assert exec_match(db, "SELECT name FROM item WHERE id < 5 ORDER BY id DESC", gold)
    assert not exec_match(db, "SELECT name FROM item WHERE id < 5 ORDER BY id", gold)
    assert exec_match(db, "SELECT name FROM item WHERE id < 5 ORDER BY id DESC", "SELECT name FROM item WHERE id < 5")


def test_rows_compare_as_multisets():
    assert results_match([(1,), (1,), (2,)], [(2,), (1,), (1,)], order_matters=False)
    assert not results_match([(1,), (1,), (2,)], [(1,), (2,), (2,)], order_matters=False)
    assert results_match([], [], order_matters=True)
    assert not results_match([(1, "a")], [(1,)], order_matters=False)
    assert results_match([(1, "a"), (2, "b")], [("a", 1), ("b", 2)], order_matters=True)
    assert not results_match([(1, "a"), (2, "b")], [("b", 1), ("a", 2)], order_matters=False)


def test_ten_identical_columns_compare_in_polynomial_time(db):
    """Was 50 s for one example (every column permutation tried): issue 27 item 2."""
    rows = [(v,) * 10 for v in range(200)]
    start = time.thread_time()
    assert results_match(rows, list(reversed(rows)), order_matters=False)
    assert results_match(rows, rows, order_matters=True)
    assert not results_match(rows, rows[:-1] + [(0,) * 10], order_matters=False)
    same = ", ".join(["price"] * 10)
    assert exec_match(db, f"SELECT {same} FROM item", f"SELECT {same} FROM item")
    assert not exec_match(db, f"SELECT {same} FROM item WHERE id > 0", f"SELECT {same} FROM item")
    assert time.thread_time() - start < 5  # CPU time: well under a second here; 50 s when exponential


def test_a_pairing_of_look_alike_columns_is_searched_and_the_search_is_bounded():
    """Every column holds {1, 2, 3} and every row too, so only a search finds that pred is gold with
    its first two columns swapped; a search past its budget is a mismatch, never a long wait."""
    gold = [(1, 2, 3), (2, 3, 1), (3, 1, 2)]
    pred = [(b, a, c) for a, b, c in gold]
    assert results_match(gold, pred, order_matters=False)
    assert not results_match(gold, pred, order_matters=False, search_cells=1)   # one pairing: its own order
    assert not results_match(gold, [(1, 2, 3), (3, 2, 1), (3, 1, 2)], order_matters=False)
    assert results_match([(1, 1, 2), (1, 1, 3)], [(2, 1, 1), (3, 1, 1)], order_matters=True)
    assert not results_match([(1, 1, 2), (1, 1, 3)], [(3, 1, 1), (2, 1, 1)], order_matters=True)


def test_failing_gold_and_bad_prediction_score_0(db):
    assert not exec_match(db, "SELECT name FROM item", "SELECT nope FROM item")
    assert not exec_match(db, "SELEC name", "SELECT name FROM item")
    assert not exec_match(db, "SELECT 1; SELECT 2", "SELECT 1")


def test_empty_inputs_have_defined_values(tmp_path):
    assert M.classification("cola", [], []) == {"accuracy": None, "mcc": None}
    assert M.classification("mrpc", [], []) == {"accuracy": None, "f1": None}
    assert M.regression([], []) == {"pearson": None, "spearman": None}
    assert M.rouge([], []) == {"rouge1": None, "rouge2": None, "rougeL": None, "rougeLsum": None}
    assert M.dart([], []) == {"bleu": None, "meteor": None, "sacrebleu": None}
    assert M.spider([], [], [], tmp_path) == {"exact_match": None, "exec_accuracy": None}


def test_an_endless_query_keeps_memory_bounded(db):
    """In a child process (its peak RSS is its own): the default limits stop an endless recursive
    CTE before its rows pile up in memory."""
    code = ("import resource, sys; from lat_core.train.sql_exec import run_query; "
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; "
            "r = run_query(sys.argv[1], 'WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
            "SELECT x, x || x FROM r'); "
            "print(r.error, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)")
    done = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True, timeout=HANG_S,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    error, grown_mb = done.stdout.rsplit(" ", 1)
    assert error in ("row limit", "time limit") and int(grown_mb) < 100, done.stdout + done.stderr

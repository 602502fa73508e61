"""Run model-predicted SQL on a Spider database safely, and compare result sets faithfully.

Predicted SQL is untrusted text: it may loop (a cross join, an unbounded recursive CTE), grow
memory, or write (``ATTACH DATABASE 'x'`` creates a file even on a read-only connection). Each
query therefore runs on a read-only connection under an authorizer that allows reading only, a
limit on the CPU time of the thread running it checked by a progress handler (not the wall clock:
a loaded host must not turn a match into a time-out and change the metric), a cap on string/blob length and a cap on the
rows fetched into Python (an endless recursive CTE fetched whole grew ~120 MB/s). SQLite's own
memory stays small: its sorts and temp tables spill to anonymous temp files past the page cache.
SQLite's hard heap limit is not used: the PRAGMA can only lower it, process-wide, for good.

Results are compared as the official test-suite evaluator does (Zhong et al. 2020,
taoyds/test-suite-sql-eval ``exec_eval.result_eq``): the same columns in another order still
match, rows compare as multisets unless the gold query has ORDER BY, then in order. The official
code tries column permutations, which grows as width! (10 identical columns: 50 s for one
example); here a pred column can stand for a gold column only where both have the same signature
(their values in row order when order matters; else each value paired with its row's values, a
multiset), which a true matching must keep. Columns sharing a signature are tried in their own
order first, which settles every case where they are interchangeable (identical columns, any
ordered result); only past that are other pairings searched, within a budget of cells compared,
and a search that runs out counts as a mismatch.
"""
from __future__ import annotations

import sqlite3
import time
from collections import Counter
from dataclasses import dataclass
from itertools import islice, permutations
from pathlib import Path

_READ_ONLY_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
                                sqlite3.SQLITE_RECURSIVE})


@dataclass(frozen=True)
class SqlLimits:
    seconds: float = 5.0            # per query, CPU time of the thread that runs it
    max_length: int = 10 << 20      # longest string or blob a query may build (group_concat, randomblob)
    max_rows: int = 100_000         # rows fetched into Python


SEARCH_CELLS = 2_000_000  # cells compared while searching column pairings past the first (~0.3 s at most)


@dataclass(frozen=True)
class QueryResult:
    rows: list | None
    error: str | None = None        # why there are no rows: time/size/row limit, not authorized, SQL error

    @property
    def ok(self) -> bool:
        return self.error is None


def run_query(db: Path, query: str, limits: SqlLimits = SqlLimits()) -> QueryResult:
    """The query's rows, or why it gave none; never raises for a bad or hostile query."""
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        return QueryResult(None, f"cannot open {db}: {exc}")
    con.text_factory = lambda b: b.decode("utf-8", errors="replace")
    try:
        con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.max_length)
        con.set_authorizer(_read_only)
        deadline = time.thread_time() + limits.seconds
        con.set_progress_handler(lambda: time.thread_time() > deadline, 1000)
        return _fetch(con, query, limits.max_rows)
    finally:
        con.close()


def _read_only(action, *_args) -> int:
    return sqlite3.SQLITE_OK if action in _READ_ONLY_ACTIONS else sqlite3.SQLITE_DENY


def _fetch(con: sqlite3.Connection, query: str, max_rows: int) -> QueryResult:
    try:
        cursor = con.execute(query)
        rows = cursor.fetchmany(max_rows + 1)
    except sqlite3.DataError as exc:
        return QueryResult(None, f"size limit: {exc}")
    except sqlite3.OperationalError as exc:
        return QueryResult(None, "time limit" if "interrupted" in str(exc) else f"SQL error: {exc}")
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError) as exc:
        return QueryResult(None, f"SQL error: {exc}")
    if len(rows) > max_rows:
        return QueryResult(None, "row limit")
    return QueryResult(rows)


def results_match(gold: list, pred: list, order_matters: bool, search_cells: int = SEARCH_CELLS) -> bool:
    """test-suite-sql-eval's result_eq: equal up to a permutation of the columns; rows as a
    multiset, or as a sequence when order matters. Polynomial but for the bounded search."""
    if not gold and not pred:
        return True
    if len(gold) != len(pred) or len(gold[0]) != len(pred[0]):
        return False
    if not _same_rows_ignoring_columns(gold, pred, order_matters):
        return False
    groups = _column_groups(gold, pred, order_matters)
    if groups is None:
        return False
    target = _rows_as(map(tuple, gold), order_matters)
    tries = max(1, search_cells // max(1, len(gold) * len(gold[0])))
    for mapping in islice(_pairings(groups), tries):
        permuted = (tuple(row[mapping[i]] for i in range(len(mapping))) for row in pred)
        if _rows_as(permuted, order_matters) == target:
            return True
    return False


def _rows_as(rows, order_matters: bool):
    return list(rows) if order_matters else Counter(rows)


def _unordered(row) -> tuple:
    return tuple(sorted(row, key=lambda v: str(v) + str(type(v))))


def _same_rows_ignoring_columns(gold, pred, order_matters: bool) -> bool:
    """Quick rejection: each row's values as a sorted tuple must agree before columns are paired."""
    a, b = [_unordered(r) for r in gold], [_unordered(r) for r in pred]
    return a == b if order_matters else set(a) == set(b)


def _signature(rows, column: int, order_matters: bool):
    """What a column keeps under any row order and column permutation that makes two results equal."""
    if order_matters:
        return tuple(row[column] for row in rows)
    return frozenset(Counter((row[column], _unordered(row)) for row in rows).items())


def _column_groups(gold, pred, order_matters: bool) -> list[tuple[list[int], list[int]]] | None:
    """(gold columns, pred columns) sharing each signature; None when the signatures differ."""
    by_signature: dict = {}
    for side, rows in enumerate((gold, pred)):
        for column in range(len(rows[0])):
            by_signature.setdefault(_signature(rows, column, order_matters), ([], []))[side].append(column)
    groups = list(by_signature.values())
    return groups if all(len(g) == len(p) for g, p in groups) else None


def _pairings(groups):
    """Maps gold column -> pred column, each group's columns in their own order first, then the
    other orders of the groups' pred columns (lazily: the caller takes what its budget allows)."""
    for orders in _orders([p for _, p in groups]):
        mapping = {}
        for (gold_columns, _), order in zip(groups, orders):
            mapping.update(zip(gold_columns, order))
        yield mapping


def _orders(columns_of_groups: list[list[int]]):
    """itertools.product of each group's permutations, lazily (product draws its inputs whole:
    10! orders of 10 look-alike columns before the first)."""
    if not columns_of_groups:
        yield ()
        return
    for order in permutations(columns_of_groups[0]):
        for rest in _orders(columns_of_groups[1:]):
            yield (order, *rest)


def exec_match(db: Path, pred: str, gold: str, limits: SqlLimits = SqlLimits()) -> bool:
    """Both queries run (guarded) on the database and their results match; a gold query that fails
    scores the example 0, as the official evaluator does."""
    gold_result = run_query(db, gold, limits)
    if not gold_result.ok:
        return False
    pred_result = run_query(db, pred, limits)
    return pred_result.ok and results_match(gold_result.rows, pred_result.rows, "order by" in gold.lower())

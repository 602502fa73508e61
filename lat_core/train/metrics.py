"""Task metrics through established libraries (scikit-learn, scipy, rouge-score, sacrebleu, NLTK).

The key names are a contract with lat_core/results (mcc, f1, accuracy, pearson, spearman,
accuracy_mm, rouge1/rouge2/rougeL/rougeLsum, bleu, meteor, sacrebleu, exact_match, exec_accuracy).
Scales: every metric is a fraction but sacrebleu (0-100); the generation metrics are computed as
the seeds' `evaluate` scripts compute them (lat_core/train/text_metrics.py).  With no examples
every metric is None (undefined, as a correlation of a constant is), never an exception or a
made-up 0.
"""
from __future__ import annotations

import math
from pathlib import Path

from lat_core.train.sql_exec import exec_match
from lat_core.train.text_metrics import bleu, meteor, sacrebleu
from lat_core.train.text_metrics import rouge as rouge  # evaluation calls M.rouge like the other metrics


def _finite(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def classification(task: str, preds: list[int], golds: list[int], metric: str | None = None,
                   n_labels: int = 2) -> dict:
    """accuracy always; mcc for CoLA, f1 (positive class 1) for MRPC/QQP; ``metric`` (mcc or f1) for
    a user's data (data.metric), whose f1 is the positive class's with two labels, else macro."""
    wants_mcc, wants_f1 = task == "cola" or metric == "mcc", task in ("mrpc", "qqp") or metric == "f1"
    names = ["accuracy"] + (["mcc"] if wants_mcc else []) + (["f1"] if wants_f1 else [])
    if not golds:
        return dict.fromkeys(names)
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
    out = {"accuracy": float(accuracy_score(golds, preds))}
    if wants_mcc:
        out["mcc"] = float(matthews_corrcoef(golds, preds))
    if wants_f1:
        average = "binary" if n_labels <= 2 else "macro"
        out["f1"] = float(f1_score(golds, preds, average=average, labels=list(range(n_labels)), zero_division=0))
    return out


def regression(preds: list[float], golds: list[float]) -> dict:
    """pearson / spearman (scipy); None when undefined (a constant input)."""
    from scipy.stats import pearsonr, spearmanr
    if len(set(preds)) < 2 or len(set(golds)) < 2:  # also the empty case
        return {"pearson": None, "spearman": None}
    return {"pearson": _finite(pearsonr(preds, golds)[0]), "spearman": _finite(spearmanr(preds, golds)[0])}


def dart(preds: list[str], refs: list[list[str]]) -> dict:
    """bleu (0-1) and meteor as evaluate computes them, and sacrebleu (0-100) beside them."""
    return {**bleu(preds, refs), **meteor(preds, refs), **sacrebleu(preds, refs)}


def _normalize_sql(q: str) -> str:
    return " ".join(q.strip().rstrip(";").lower().split())


def spider(preds: list[str], golds: list[str], db_ids: list[str], db_root: str | Path) -> dict:
    """exact_match (whitespace/case-normalised string equality) and exec_accuracy (guarded execution,
    results compared as the official test-suite evaluator does: lat_core/train/sql_exec.py)."""
    if not preds:
        return {"exact_match": None, "exec_accuracy": None}
    root = Path(db_root)
    n = len(preds)
    em = sum(_normalize_sql(p) == _normalize_sql(g) for p, g in zip(preds, golds)) / n
    ex = sum(exec_match(root / d / f"{d}.sqlite", p, g) for p, g, d in zip(preds, golds, db_ids)) / n
    return {"exact_match": em, "exec_accuracy": ex}

"""Which metric decides "best" for each dataset, and which companions are shown beside it.

Why a table and not a guess from the metrics dict: the trainer reports several numbers per eval
(accuracy and F1 for MRPC, Pearson and Spearman for STS-B, ...), and papers rank each GLUE task by
one agreed metric. Keeping that choice in one place makes every table and plot agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import PurePath
from typing import Any

from lat_core.config.datasets import canonical

#: One eval's metrics as events.jsonl holds them (name -> number); metric_value reads one checked.
Metrics = dict[str, Any]


@dataclass(frozen=True)
class MetricSpec:
    """The main metric of a dataset, its direction, and the metrics printed beside it."""

    main: str
    higher_is_better: bool = True
    companions: tuple[str, ...] = ()

    @property
    def shown(self) -> tuple[str, ...]:
        """Main metric first, then companions: the column order of every table."""
        return (self.main, *self.companions)

    def better(self, a: float, b: float) -> bool:
        """True when ``a`` is strictly better than ``b`` (ties are not better)."""
        return a > b if self.higher_is_better else a < b


_GLUE_PREFIXES = ("glue-tvt_", "glue_tvt_", "glue-", "glue_", "tiny-", "tiny_")

_SPECS: dict[str, MetricSpec] = {
    "cola": MetricSpec("mcc"),
    "mrpc": MetricSpec("f1", companions=("accuracy",)),
    "qqp": MetricSpec("f1", companions=("accuracy",)),
    "stsb": MetricSpec("pearson", companions=("spearman",)),
    "mnli": MetricSpec("accuracy", companions=("accuracy_mm",)),
    "sst2": MetricSpec("accuracy"),
    "qnli": MetricSpec("accuracy"),
    "rte": MetricSpec("accuracy"),
    # evaluate's rouge and bleu (0-1) plus meteor, as the seeds' tables; sacrebleu (0-100) beside
    # them under its own name (lat_core/train/text_metrics.py)
    "samsum": MetricSpec("rougeL", companions=("rouge1", "rouge2", "rougeLsum")),
    "dart": MetricSpec("bleu", companions=("meteor", "sacrebleu")),
    "spider": MetricSpec("exec_accuracy"),
}

DEFAULT_SPEC = MetricSpec("accuracy")

# Why a metric a dataset should report can be missing from a job: said under its table rather than
# left as a silent gap. The trainer prints the same line in the job's log.
METEOR_NEEDS = ("needs WordNet 3.0 for NLTK: apt-get install wordnet-base (Debian/Ubuntu), "
                "or python -m nltk.downloader wordnet")
ABSENT_BECAUSE = {"meteor": METEOR_NEEDS}


def dataset_key(data: str) -> str:
    """The dataset's name as tables show it: a directory path becomes its basename."""
    text = str(data).strip().rstrip("/\\")
    if "/" in text or "\\" in text or text.startswith("."):
        return PurePath(text).name or text
    return text


def task_of(dataset: str) -> str:
    """``glue-tvt_cola`` / ``tiny-cola`` / ``/data/glue-tvt_cola`` / ``glue-tvt_cola_200`` -> ``cola``;
    an alias the runbooks use is its dataset's task (``spider-tvt`` -> ``spider``: ALIASES)."""
    name = canonical(dataset_key(dataset).lower())
    for prefix in _GLUE_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def spec_for(dataset: str, task: str | None = None) -> MetricSpec:
    """The metric spec for a dataset name or path; ``task``, the one the trainer computed the job's
    metrics for (its started event), decides when known, so a CoLA-like dataset of any name ranks
    by MCC. Unknown datasets rank by accuracy."""
    return _SPECS.get(task_of(task or dataset), DEFAULT_SPEC)


def ranked_by(spec: MetricSpec, metric: str | None, higher_is_better: bool | None = None) -> MetricSpec:
    """``spec`` with the main metric a job was ranked by where it names one (a user's ``data.metric``:
    ``mcc`` on data whose task ranks by accuracy), the spec's other metrics beside it; and with the
    direction the trainer recorded, where it did."""
    if metric and metric != spec.main:
        spec = MetricSpec(metric, spec.higher_is_better, tuple(m for m in spec.shown if m != metric))
    return spec if higher_is_better is None else replace(spec, higher_is_better=higher_is_better)


def metric_value(metrics: Metrics, name: str) -> float | None:
    """A finite float from a metrics dict, or None (missing, null, NaN, not a number)."""
    value = metrics.get(name) if isinstance(metrics, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None

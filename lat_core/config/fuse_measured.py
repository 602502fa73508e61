"""What plan ``fuse: auto`` consults on a GPU: the measured speed of a fused group against the same
jobs each in a process of its own, per model family and row width (issue 26: "where fusion loses,
``auto`` does not pick it, decided per shape from a measurement, not a guess").

Each entry is one measurement, with the device, date and bench call that produced it, so a
decision can be traced to its numbers (bench/RESULTS.md holds the runs). ``speedup`` is the fused
side's steady tokens/s over the process-per-job side's. ``auto`` fuses where it is at least 1 (a
tie still saves the memory of all but one base) and keeps a job alone where it is below 1 or not
measured yet; ``fuse: true`` fuses whatever this table says.

Row width: what a fused pass costs depends on the padded width of its rows, which the engine (no
tokenizer, no data loading) cannot read from the data. It judges from the config: ``max_seq_len``
of at most SHORT_ROW_TOKENS, or a single-sentence dataset (lat_core.config.datasets.SINGLE_SENTENCE_DATA), gives short rows (tens
of tokens: the SST-2 sample's are 12-14); anything else may fill ``max_seq_len`` and counts as
long. Files put in a named dataset's place (``GLUE_LOCAL_DIR``) count as that dataset, so the
bench's synthetic 256-token rows (``--data long``) are RTE files, a sentence-pair task judged long
(bench/suite_data.py's LONG_ROWS_DATA; until 2026-11-26 they were SST-2 files, judged short);
``lat+fuse`` forces fusion to measure an entry.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from lat_core.config.datasets import single_sentence
from lat_core.config.job import JobConfig

SHORT_ROW_TOKENS = 64
TABLE = "lat_core/config/fuse_measured.py"


class Rows(Enum):
    """The row-width buckets the measurements were taken at."""

    SHORT = "short"  # single sentences: the shipped SST-2 sample, rows of 12-14 tokens
    LONG = "256-token"  # rows that fill max_seq_len (bench/suite_data.py's synthetic files)


@dataclass(frozen=True)
class FuseMeasurement:
    """A fused group's steady tokens/s over a process per job's, for one family and row width;
    ``speedup`` None: not measured yet (then device, date and bench are empty)."""

    family: str
    rows: Rows
    speedup: float | None
    device: str = ""
    date: str = ""
    bench: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if self.speedup is not None and not (self.speedup > 0 and self.device and self.date and self.bench):
            raise ValueError(f"fuse measurement {self.family}/{self.rows.value}: a speed-up needs its device, "
                             f"date and bench call (got {self.speedup!r}, {self.device!r}, {self.date!r}, {self.bench!r})")


MEASURED: tuple[FuseMeasurement, ...] = (
    FuseMeasurement(
        "gla", Rows.SHORT, 8.2, "H200", "2026-11-26",
        "bench/bench_suite_throughput.py --gpu 0 --steps 100 --data tiny, sides lat vs lat-eager",
        note="gla_rank_sweep, 8 jobs, SST-2 sample, one AdamW and kernel tunings: steady 21,622 vs 2,626 tokens/s, "
             "GPU peak 12.5 vs 48.8 GiB; bench/RESULTS.md 2026-11-26 (eighth session). Before: 9.1x on an H100 "
             "(2026-11-25, 300 steps, 19,765 vs 2,162)"),
    FuseMeasurement(
        "gla", Rows.LONG, 1.79, "H100 80GB HBM3", "2026-11-26",
        "bench/bench_suite_throughput.py --gpu 0 --steps 40 --data long, sides lat-eager,lat",
        note="steady 53,417 vs 29,798 tokens/s, GPU peak 34.4 vs 60.7 GiB, loss check within 6.4e-3; bench/RESULTS.md "
             "2026-11-26 (tenth session). Before that day's fix the steady window took in the group's last "
             "evaluation (1.13x on an H200 at 100 steps; 1.58x and 0.93x on H100s on 2026-11-25)"),
    FuseMeasurement(
        "mamba", Rows.SHORT, 1.75, "H200", "2026-11-26",
        "bench/bench_suite_throughput.py --gpu 0 --suite mamba_lora --sweep train.lr=1e-3,5e-4,2e-4,1e-4 "
        "--steps 30 --sides lat-eager,lat+fuse",
        note="Mamba-130m shape, random weights, transformers' slow path (no mamba_ssm on the machine), "
             "8 jobs on the SST-2 sample: steady 5,267 vs 3,009 tokens/s, wall 28.4 vs 40.6 s, GPU peak "
             "17.6 vs 27.1 GiB; bench/RESULTS.md 2026-11-26 (seventh session). With the fast kernels (H200, "
             "2026-11-27, fourteenth session): 11,994 vs 7,903 tokens/s (1.52x), GPU peak 3.0 vs 12.2 GiB"),
    FuseMeasurement(
        "mamba", Rows.LONG, 1.33, "H200", "2026-11-27",
        "bench/bench_suite_throughput.py --gpu 0 --suite mamba_lora --sweep train.lr=1e-3,5e-4,2e-4,1e-4 "
        "--steps 40 --data long --sides lat-eager,lat+fuse",
        note="Mamba-130m shape, random weights, 8 jobs at 16 x 256 tokens, the fast kernels (mamba_ssm 2.3.2.post1, "
             "causal_conv1d 1.7.0, built for sm_90): steady 106,629 vs 79,941 tokens/s, wall 33.2 vs 36.0 s, GPU "
             "peak 14.8 vs 22.6 GiB. On the slow path the group also won where it fit (H200, 4 jobs, 6 steps: "
             "wall 156.3 vs 171.2 s, 3 members a group); on an H100 80GB two slow-path members do not fit, so "
             "admission trains them alone whatever this says. bench/RESULTS.md 2026-11-27 (fourteenth session)"),
)


def rows_of(cfg: JobConfig) -> Rows:
    """The row-width bucket the job's passes fall in (see the module's docstring)."""
    if cfg.train.max_seq_len <= SHORT_ROW_TOKENS:
        return Rows.SHORT
    if single_sentence(cfg.data):
        return Rows.SHORT
    return Rows.LONG


def measurement(family: str, rows: Rows) -> FuseMeasurement | None:
    return next((m for m in MEASURED if m.family == family and m.rows is rows), None)


def auto_refusal(cfg: JobConfig) -> str | None:
    """Why ``fuse: auto`` keeps this job out of a fused group (no measurement, or one where fusion
    lost), or None where the measurement says a group wins."""
    family, rows = cfg.model.family, rows_of(cfg)
    found = measurement(family, rows)
    group = f"a fused {family} group on {rows.value} rows"
    if found is None or found.speedup is None:
        return f"fuse auto: {group} is not measured yet ({TABLE}); fuse: true fuses it"
    if found.speedup < 1:
        return (f"fuse auto: {group} measured {found.speedup:g}x the speed of jobs alone on {found.device} "
                f"({found.bench}, {found.date})")
    return None

"""``fuse: auto`` decided from the committed measurement (lat_core.config.fuse_measured): a job's row
width bucket, the table's verdict and its words, and the engine's fuse key under ``auto`` and ``true``."""
from pathlib import Path

import pytest
import yaml

from lat_core.config import fuse_measured as FM
from lat_core.config.fuse_measured import FuseMeasurement, Rows, auto_refusal, rows_of
from lat_core.config.job import parse_config
from lat_core.engine.fusion import fuse_key_or_why
from tests.unit.test_fusion import job

ROOT = Path(__file__).resolve().parents[2]


def config(path: str, **train):
    raw = yaml.safe_load((ROOT / "configs/experiments" / path).read_text())
    raw["train"] = {**raw["train"], **train}
    return parse_config({**raw, "output_dir": "/tmp/unused"}, environ={})


def test_rows_are_short_for_single_sentences_or_a_short_max_seq_len_else_long():
    assert rows_of(config("mamba130m/lora_proj_r8.yaml")) is Rows.SHORT   # glue-tvt_cola, max_seq_len 256
    assert rows_of(config("mamba130m/lora_proj_r8.yaml", max_seq_len=64)) is Rows.SHORT
    rte = config("mamba130m/lora_proj_r8.yaml").model_copy(update={"data": "glue-tvt_rte"})
    assert rows_of(rte) is Rows.LONG   # sentence pairs up to max_seq_len
    assert rows_of(rte.model_copy(update={"train": rte.train.model_copy(update={"max_seq_len": 64})})) is Rows.SHORT


def unmeasured_mamba(monkeypatch) -> None:
    """The table with Mamba unmeasured, whatever it holds now: the rules under test do not change."""
    monkeypatch.setattr(FM, "MEASURED", tuple(m if m.family != "mamba" else FuseMeasurement("mamba", m.rows, None)
                                              for m in FM.MEASURED))


def test_auto_fuses_where_measured_to_win_and_says_why_not_elsewhere(monkeypatch):
    unmeasured_mamba(monkeypatch)
    gla, mamba = config("gla/tiny_lora_qkvo.yaml"), config("mamba/tiny_lora.yaml")
    assert auto_refusal(gla) is None   # GLA on short rows: measured 8.2x
    assert auto_refusal(mamba) == ("fuse auto: a fused mamba group on short rows is not measured yet "
                                   "(lat_core/config/fuse_measured.py); fuse: true fuses it")
    lost = FuseMeasurement("mamba", Rows.SHORT, 0.8, "H100 80GB HBM3", "2026-11-26", "bench/x.py --y")
    monkeypatch.setattr(FM, "MEASURED", (lost,))
    assert auto_refusal(mamba) == ("fuse auto: a fused mamba group on short rows measured 0.8x the speed of jobs "
                                   "alone on H100 80GB HBM3 (bench/x.py --y, 2026-11-26)")
    monkeypatch.setattr(FM, "MEASURED", (FuseMeasurement("mamba", Rows.SHORT, 1.0, "H100", "2026-11-26", "b"),))
    assert auto_refusal(mamba) is None   # a tie fuses: the group still holds one base


def test_a_speed_up_without_its_device_date_and_bench_is_refused():
    with pytest.raises(ValueError, match="mamba/short: a speed-up needs its device, date and bench call"):
        FuseMeasurement("mamba", Rows.SHORT, 1.3, "H100", "", "bench/bench_suite_throughput.py")


def test_mamba_fuses_on_short_and_long_rows_as_measured():
    mamba = config("mamba/tiny_lora.yaml")
    assert auto_refusal(mamba) is None   # 1.75x on an H200
    rte = config("mamba130m/lora_proj_r8.yaml").model_copy(update={"data": "glue-tvt_rte"})
    assert rows_of(rte) is Rows.LONG and auto_refusal(rte) is None   # 1.33x on an H200, fast kernels


def test_the_table_covers_every_family_and_row_width_once():
    from lat_core.config.values import FAMILIES
    keys = [(m.family, m.rows) for m in FM.MEASURED]
    assert sorted(keys, key=str) == sorted({(f, r) for f in FAMILIES for r in Rows}, key=str)


def test_under_auto_an_unmeasured_family_has_no_fuse_key_and_true_still_fuses_it(tmp_path, monkeypatch):
    unmeasured_mamba(monkeypatch)
    mamba = yaml.safe_load((ROOT / "configs/experiments/mamba/tiny_lora.yaml").read_text())
    row = job(tmp_path, "m", model=mamba["model"], peft=mamba["peft"])
    assert fuse_key_or_why(row, measured=False)[0] is not None   # fuse: true
    key, why = fuse_key_or_why(row, measured=True)                # fuse: auto
    assert key is None and why.startswith("fuse auto: a fused mamba group on short rows is not measured yet")
    gla = job(tmp_path, "g")
    assert fuse_key_or_why(gla, measured=True) == fuse_key_or_why(gla, measured=False)

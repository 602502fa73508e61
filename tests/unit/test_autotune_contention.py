"""bench/autotune_contention.py without a GPU: which picks differ from the lone tuning's, one timing
per distinct set of picks, and a clear refusal where there is nothing to measure."""
from bench import autotune_contention as A

ALONE = {"k1|[16]": "a", "k1|[32]": "b", "k2|[16]": "c"}


def test_picks_that_differ_from_the_lone_tuning_are_named_per_process():
    contended = {"contended-0": dict(ALONE), "contended-1": {**ALONE, "k1|[32]": "z"},
                 "contended-2": {k: v for k, v in ALONE.items() if k != "k2|[16]"}}   # never tuned k2 there
    got = A.compare_picks(ALONE, contended)
    assert got["keys"] == 3
    assert got["differ_per_process"] == {"contended-0": 0, "contended-1": 1, "contended-2": 1}
    assert got["differing_keys"] == ["k1|[32]", "k2|[16]"] and got["differ_in_any"] == 2


def test_each_distinct_set_of_picks_is_timed_once_the_lone_one_first():
    contended = {"contended-0": dict(ALONE), "contended-1": {**ALONE, "k1|[32]": "z"},
                 "contended-2": {**ALONE, "k1|[32]": "z"}}
    assert A.distinct_tables(ALONE, contended) == {"alone": "alone,contended-0",
                                                   "contended-1": "contended-1,contended-2"}


def test_the_suite_shape_is_the_benchs_gla_layer_at_one_width():
    shape = A.suite_shape(16, 8)
    assert shape.widths == (16,) and shape.rows == 8 and not shape.eager
    assert dict(shape.tiny)["hidden_size"] == 2048 and shape.dtype == "bfloat16"


def test_without_a_gpu_it_says_so_and_exits_2(capsys, tmp_path):
    assert A.main(["--out", str(tmp_path)]) == 2
    assert "nothing to measure" in capsys.readouterr().err
    assert not (tmp_path / "contention.json").exists()

"""A narrow table's job names (lat_tui/short_names.py): every row keeps what tells it from the
others, what all rows share goes first, and a shortened name is marked as one."""

from __future__ import annotations

from lat_tui.short_names import NameParts, shared_end, shared_start, short_names, words

TINY = ("tiny-sst2", "tiny-cola")
DEMO = (("gla", "tiny_lora_qkvo"), ("mamba", "tiny_lora"))  # the demo suite's two configs
CONFIGS = ("tiny_lora_qkvo", "tiny_dora", "tiny_rslora", "tiny_pissa", "tiny_loraga", "tiny_lora_targets",
           "tiny_lora_accum", "tiny_lora_q")


def names_in(width: int, parts: list[NameParts]) -> list[str]:
    shown = short_names(dict(enumerate(parts)), lambda _: width)
    return [shown[n] for n in range(len(parts))]


def assert_apart(names: list[str], parts: list[NameParts], width: int) -> None:
    """No two jobs read the same, each fits, and each shortened name says so with a mark."""
    assert len(set(names)) == len(names), names
    for name, part in zip(names, parts):
        assert len(name) <= width, name
        assert name == part.full or "…" in name, name


def test_words_end_at_separators_but_not_at_an_exponent_sign():
    assert words("tiny_lora_qkvo__lr1e-3_r16") == ["tiny", "_", "lora", "_", "qkvo", "__", "lr1e-3", "_", "r16"]
    assert words("glue-tvt_cola") == ["glue", "-", "tvt", "_", "cola"]


def test_what_all_names_share_ends_at_a_whole_word_and_leaves_each_a_word():
    assert shared_start({"tiny_lora_qkvo__lr1e-3", "tiny_lora_qkvo__lr5e-3"}) == "tiny_lora_qkvo__"
    assert shared_start({"tiny_lora_qkvo__lr1e-3", "tiny_lora__lr1e-3"}) == "tiny_"  # not "tiny_lora_"
    assert shared_start({"lr1e-3", "lr5e-3"}) == ""  # "lr" is no whole word
    assert shared_start({"tiny_lora", "tiny_lora_qkvo"}) == "tiny_"  # tiny_lora keeps its last word
    assert shared_start({"tiny-sst2"}) == ""
    assert shared_end({"lora_r4_qkvo", "lora_r16_qkvo"}) == "_qkvo"


def test_names_that_fit_are_whole():
    parts = [NameParts("gla", "tiny_lora_qkvo", "1", "tiny-sst2"), NameParts("gla", "tiny_dora", "1", "tiny-cola")]
    assert names_in(48, parts) == ["gla/tiny_lora_qkvo 1:tiny-sst2", "gla/tiny_dora 1:tiny-cola"]


def test_a_sweeps_points_on_two_datasets_keep_their_values_at_80_columns():
    """The walk-through's table: the demo suite swept over train.lr on two datasets read
    ``qk…-3 1:sst2`` for both of gla's points."""
    parts = [NameParts(family, f"{stem}__lr{lr}", "1", data) for family, stem in DEMO
             for lr in ("1e-3", "5e-3") for data in TINY]
    names = names_in(18, parts)
    assert names == ["…qkvo__lr1e-3 sst2", "…qkvo__lr1e-3 cola", "…qkvo__lr5e-3 sst2", "…qkvo__lr5e-3 cola",
                     "…lora__lr1e-3 sst2", "…lora__lr1e-3 cola", "…lora__lr5e-3 sst2", "…lora__lr5e-3 cola"]
    assert_apart(names, parts, 18)


def test_eight_configs_on_two_datasets():
    parts = [NameParts("gla", stem, "1", data) for stem in CONFIGS for data in TINY]
    names = names_in(18, parts)
    assert names[:4] == ["…lora_qkvo sst2", "…lora_qkvo cola", "…dora sst2", "…dora cola"]
    assert_apart(names, parts, 18)
    assert_apart(names_in(16, parts), parts, 16)  # a fused member's row: two cells for its branch


def test_a_two_by_two_sweep_keeps_both_values():
    parts = [NameParts("gla", f"tiny_lora_qkvo__lr{lr}_r{r}", "1", "tiny-sst2") for lr in ("1e-3", "5e-3")
             for r in (8, 16)]
    assert names_in(18, parts) == ["…lr1e-3_r8@1", "…lr1e-3_r16@1", "…lr5e-3_r8@1", "…lr5e-3_r16@1"]
    assert names_in(11, parts) == ["…lr1e-3_r8", "…lr1e-3_r16", "…lr5e-3_r8", "…lr5e-3_r16"]  # one seed: left out
    on_two = [NameParts("gla", p.stem, "1", data) for p in parts for data in TINY]
    assert_apart(names_in(16, on_two), on_two, 16)


def test_families_show_while_they_tell_rows_apart_and_give_way_when_the_config_does():
    parts = [NameParts(family, stem, seed, "tiny-sst2") for family, stem in DEMO for seed in ("1", "2")]
    assert names_in(18, parts) == ["gla/…lora_qkvo@1", "gla/…lora_qkvo@2", "mamba/…lora@1", "mamba/…lora@2"]
    assert names_in(12, parts) == ["…lora_qkvo@1", "…lora_qkvo@2", "…lora@1", "…lora@2"]
    same_stem = [NameParts("gla", "tiny_lora", "1", "tiny-sst2"), NameParts("mamba", "tiny_lora", "1", "tiny-sst2"),
                 NameParts("gla", "tiny_dora", "1", "tiny-sst2")]
    assert names_in(18, same_stem) == ["gla/…lora@1", "mamba/…lora@1", "gla/…dora@1"]  # the family tells them apart


def test_configs_alike_at_the_end_are_cut_in_the_middle():
    parts = [NameParts(None, stem, str(seed), data) for seed, (stem, data) in
             enumerate((("tiny_lora_qkvo", "glue-tvt_cola"), ("tiny_lora_q", "glue-tvt_rte"),
                        ("tiny_dora_qkvo", "glue-tvt_cola")), start=1)]
    assert names_in(18, parts) == ["…lora_qkvo 1:cola", "…lora_q 2:rte", "…dora_qkvo 3:cola"]
    assert names_in(16, parts) == ["…lor…qkvo 1:cola", "…lora_q 2:rte", "…dor…qkvo 3:cola"]  # not both …a_qkvo


def test_one_config_on_many_seeds_keeps_both_ends_of_it():
    parts = [NameParts(None, "gla_lora_r8_a_rather_long_config_name", str(seed), "glue-tvt_sst2")
             for seed in range(1, 16)]
    names = names_in(18, parts)
    assert names[0] == "gla_lor…fig_name@1" and names[-1] == "gla_lor…ig_name@15"

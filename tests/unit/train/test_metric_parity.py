"""ROUGE, BLEU and METEOR equal what the seeds' `evaluate.load("rouge" | "bleu" | "meteor")` give
with their defaults (issue 27 item 2), on fixed vectors.

Where the expected numbers come from: evaluate 0.4.6 with the scripts metrics/rouge/rouge.py,
metrics/bleu/bleu.py (+ tensorflow/nmt's compute_bleu, which it fetches as nmt_bleu.py) and
metrics/meteor/meteor.py of huggingface/evaluate (main, April 2026), loaded from local copies and run
offline with rouge-score 0.1.2, sacrebleu 2.6.0 and NLTK 3.10.4 (WordNet 3.0, Punkt's English
punkt_tab tables); rouge loaded with ``seed=0``, the seed LAT fixes for its bootstrap. sacrebleu's
numbers are sacrebleu.corpus_bleu with its defaults. None of them comes from LAT's code.
"""
import numpy as np
import pytest

from lat_core.results.metrics import METEOR_NEEDS, spec_for
from lat_core.train import metrics as M
from lat_core.train import nltk_data, text_metrics as T

SUMMARIES = [
    "Amanda baked cookies and will bring Jerry some tomorrow.",
    "Olivia and Olivier are voting for liberals in this election.",
    "Kim may try the pomodoro technique recommended by Tim to get more stuff done.",
    "Edward thinks he is in love with Bella.\nRachel wants Edward to open his door.",
    "Sam is confused, because he overheard Rick complaining about him.",
]
SUMMARY_REFS = [
    "Amanda baked cookies and will bring some for Jerry tomorrow.",
    "Olivia and Olivier are voting for liberals.",
    "Tim recommends the pomodoro technique to Kim.",
    "Rachel wants Edward to open the door.\nEdward is in love with Bella.",
    "Naomi told Sam that Rick was complaining about him.",
]
DART = [
    "Zizzi is a pub near Burger King, rated 5 out of 5.",
    "The Eagle serves French food; it's cheap.",
    "Alan Bean (born 1932-03-15) was a U.S. astronaut.",
    "yes",
]
DART_REFS = [
    ["Zizzi is a pub near Burger King with a rating of 5 out of 5.", "Near Burger King, Zizzi is a 5-star pub."],
    ["The Eagle is a cheap French restaurant.", "Cheap French food is served at The Eagle."],
    ["Alan Bean, born on 1932-03-15, was an astronaut of the U.S."],
    ["no", "yes indeed"],
]


@pytest.mark.parametrize("preds, refs, expected", [
    # stemming off: "cats"/"cat", "were"/"was" do not match (stemmed, rouge1 would be 0.8)
    (["the cats were running quickly"], ["the cat was running quickly"],
     {"rouge1": 0.6, "rouge2": 0.25, "rougeL": 0.6, "rougeLsum": 0.6}),
    # rougeLsum takes each line as a sentence; rougeL one sequence
    (["a b c\nd e"], ["d e\na b c"], {"rouge1": 1.0, "rouge2": 0.75, "rougeL": 0.6, "rougeLsum": 1.0}),
    # five examples: the bootstrap median (evaluate's aggregation), not the plain mean
    # (rouge2's mean is 0.48988806858775896, rougeL's 0.6002948547840188)
    (SUMMARIES, SUMMARY_REFS, {"rouge1": 0.74515701017249, "rouge2": 0.49036437246963566,
                               "rougeL": 0.5944862155388471, "rougeLsum": 0.6860091404983046}),
])
def test_rouge_is_evaluates_default(preds, refs, expected):
    assert T.rouge(preds, refs) == pytest.approx(expected, abs=1e-12)


def test_rouge_leaves_numpys_random_stream_alone():
    np.random.seed(7)
    expected = np.random.random_sample()
    np.random.seed(7)
    T.rouge(SUMMARIES, SUMMARY_REFS)
    assert np.random.random_sample() == expected


@pytest.mark.parametrize("preds, refs, bleu, sacrebleu", [
    # evaluate's bleu docstring example
    (["hello there general kenobi", "foo bar foobar"], [["hello there general kenobi", "hello there!"],
                                                        ["foo bar foobar"]], 1.0, 100.00000000000004),
    # brevity against the shortest reference (nmt), where sacrebleu takes the closest
    (["the quick brown fox jumps over the dog"], [["a quick fox", "the quick brown fox jumps over the lazy dog"]],
     0.8694417438899829, 76.72796459606589),
    # 13a tokenization (punctuation, dates, U.S.), multiple references, an example shorter than 4 words
    (DART, DART_REFS, 0.47364664107966037, 47.364664107966036),
])
def test_bleu_is_evaluates_default_and_sacrebleu_keeps_its_own_name(preds, refs, bleu, sacrebleu):
    assert T.bleu(preds, refs) == {"bleu": pytest.approx(bleu, abs=1e-12)}
    assert T.sacrebleu(preds, refs) == {"sacrebleu": pytest.approx(sacrebleu, abs=1e-9)}


def test_bleu_is_zero_where_nmt_gives_zero():
    assert T.bleu(["a b"], [["x y z w", "q r s t"]]) == {"bleu": 0.0}   # no 4-gram at all
    assert T.bleu(["the cat sat on the mat"], [["", "the cat sat on the mat"]]) == {"bleu": 0.0}  # shortest ref empty


needs_wordnet = pytest.mark.skipif(nltk_data.wordnet() is None, reason=f"meteor: {METEOR_NEEDS}")


@needs_wordnet
@pytest.mark.parametrize("preds, refs, expected", [
    # evaluate's meteor docstring example (0.6944)
    (["It is a guide to action which ensures that the military always obeys the commands of the party"],
     [["It is a guide to action that ensures that the military will forever heed Party commands"]],
     0.6944444444444445),
    # WordNet synonyms (automobile/car), several references, Punkt sentences ("Dr." is no sentence end,
    # "automobile." splits into a word and a full stop)
    (["Dr. Smith bought an automobile. He drives it every day.", DART[1], DART[2]],
     [["Dr. Smith purchased a car. He drives it daily.", "Smith, a doctor, bought a car and drives it every day."],
      DART_REFS[1], DART_REFS[2]], 0.5283139127917915),
])
def test_meteor_is_evaluates_default(preds, refs, expected):
    assert T.meteor(preds, refs) == {"meteor": pytest.approx(expected, abs=1e-12)}


def test_word_tokenize_splits_sentences_as_punkt_english():
    assert nltk_data.word_tokenize("Dr. Smith bought a car. He drives it every day.") == [
        "Dr.", "Smith", "bought", "a", "car", ".", "He", "drives", "it", "every", "day", "."]


def test_without_wordnet_meteor_is_none_and_the_job_log_says_why(monkeypatch, capsys, tmp_path):
    import nltk
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    monkeypatch.setenv("NLTK_DATA", str(tmp_path))
    monkeypatch.setenv("WNSEARCHDIR", str(tmp_path))
    monkeypatch.setattr(nltk_data, "DEBIAN_WORDNET", tmp_path / "none")
    nltk_data.wordnet.cache_clear()
    try:
        assert T.meteor(["a b"], [["a b"]]) == {"meteor": None}
    finally:
        nltk_data.wordnet.cache_clear()
    assert f"[lat] meteor: {METEOR_NEEDS}" in capsys.readouterr().out


def test_dart_reports_the_seeds_names_and_sacrebleu_apart():
    out = M.dart(DART, DART_REFS)
    assert set(out) == {"bleu", "meteor", "sacrebleu"}
    assert 0 <= out["bleu"] <= 1 and out["sacrebleu"] == pytest.approx(100 * out["bleu"])  # equal here: no closest/shortest split
    assert spec_for("dart").shown == ("bleu", "meteor", "sacrebleu")
    assert spec_for("samsum").shown == ("rougeL", "rouge1", "rouge2", "rougeLsum")

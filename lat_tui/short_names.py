"""A narrow table's job names: what tells its jobs apart, in the room it has.

A job's one name is ``family/config seed:dataset`` (lat_core.titles.display_name); a table too narrow
for it narrows every row the same way, in steps, and takes the first that fits:

1. leave out what every job of the table shares: the model family, the whole words every config
   starts or ends with (``tiny_lora_qkvo__`` of a sweep's ``tiny_lora_qkvo__lr1e-3``), a dataset
   every job has (``config@seed``) and the words every dataset starts or ends with (``tiny-``);
2. leave out a seed every job has, and a family that the config names already (each config is of
   one family, so the family tells no two rows apart that the config does not);
3. cut: the dataset to its start, then the config, keeping its end, both ends or its start: the
   first that leaves no two jobs reading the same (a sweep's points differ at the end, configs
   more often at the start); a config every job has keeps both ends.

A name that lost its start begins with ``…`` (and one that lost its end ends with it): it is never
mistaken for the whole name, which the line under the table shows for the selected job.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass, replace

from lat_core.front.client import display_name

# words end at these; a dash before a digit is a sign (``lr1e-3``) and "__" starts a sweep's point
SEPARATOR = re.compile(r"(__|[_./ ]|-(?!\d))")
MARK = "…"
DATASET_MIN = 4  # a cut dataset keeps this much of its start: cola, sst2, rte, boo…
MIN_STEM = 8  # below this the model family gives way to the config


@dataclass(frozen=True)
class NameParts:
    """What names a job: model family (None until its job.yaml is read), config stem, seed, dataset."""

    family: str | None
    stem: str
    seed: str
    dataset: str

    @property
    def full(self) -> str:
        return display_name(self.family, self.stem, self.seed, self.dataset)


def words(text: str) -> list[str]:
    """``tiny_lora__lr1e-3`` -> ``tiny``, ``_``, ``lora``, ``__``, ``lr1e-3``: words and separators."""
    return [part for part in SEPARATOR.split(text) if part]


def shared_start(names: Collection[str]) -> str:
    """The whole words every name starts with, through a separator, leaving each name a word;
    "" for fewer than two different names."""
    return _shared_words(names, reverse=False)


def shared_end(names: Collection[str]) -> str:
    """The whole words every name ends with, from a separator on, leaving each name a word."""
    return _shared_words(names, reverse=True)


def _shared_words(names: Collection[str], reverse: bool) -> str:
    split = [words(name)[::-1] if reverse else words(name) for name in set(names)]
    if len(split) < 2:
        return ""
    n = 0
    while all(len(w) > n + 1 for w in split) and len({w[n] for w in split}) == 1:
        n += 1  # each name keeps a word past the shared ones
    while n and not SEPARATOR.fullmatch(split[0][n - 1]):
        n -= 1
    shared = split[0][:n]
    return "".join(shared[::-1] if reverse else shared)


@dataclass(frozen=True)
class TableNames:
    """What the jobs of one table share, and how a name leaves it out at each step."""

    families_vary: bool
    family_implied: bool  # each config of the table is of one family
    seeds_vary: bool
    datasets_vary: bool
    stem_start: str = ""
    stem_end: str = ""
    dataset_start: str = ""
    dataset_end: str = ""

    @classmethod
    def of(cls, names: Collection[NameParts]) -> TableNames:
        stems, datasets = {n.stem for n in names}, {n.dataset for n in names}
        families_of = {(n.stem, n.family) for n in names}
        return cls(families_vary=len({n.family for n in names}) > 1,
                   family_implied=len(families_of) == len(stems),
                   seeds_vary=len({n.seed for n in names}) > 1, datasets_vary=len(datasets) > 1,
                   stem_start=shared_start(stems), stem_end=shared_end(stems),
                   dataset_start=shared_start(datasets), dataset_end=shared_end(datasets))

    def parts(self, name: NameParts, step: int) -> Parts:
        """``name`` at ``step`` 1 or 2: what the table shares left out."""
        family = name.family if self.families_vary and not (step >= 2 and self.family_implied) else None
        core = name.stem[len(self.stem_start):len(name.stem) - len(self.stem_end)]
        dataset = name.dataset[len(self.dataset_start):len(name.dataset) - len(self.dataset_end)]
        return Parts(family, core, lost_start=bool(self.stem_start) or bool(name.family and not family),
                     lost_end=bool(self.stem_end), seed=name.seed if step < 2 or self.seeds_vary else None,
                     dataset=dataset if self.datasets_vary else None)


@dataclass(frozen=True)
class Parts:
    """A name's parts as a narrow table shows them; None: left out (every job has the same)."""

    family: str | None
    config: str  # what is left of the config stem
    lost_start: bool  # the family or the config's start left out: the name starts with a mark
    lost_end: bool
    seed: str | None
    dataset: str | None

    def text(self) -> str:
        return (f"{self.family}/" if self.family else "") + self.marked_config() + self.tail(self.dataset)

    def marked_config(self) -> str:
        return (MARK if self.lost_start else "") + self.config + (MARK if self.lost_end else "")

    def tail(self, dataset: str | None) -> str:
        """`` 1:sst2``, ``@1`` (one dataset), `` sst2`` (one seed) or nothing."""
        if self.seed is not None and dataset is not None:
            return f" {self.seed}:{dataset}"
        if self.seed is not None:
            return f"@{self.seed}"
        return f" {dataset}" if dataset is not None else ""

    def cut(self, width: int, keep: Callable[[str, int], str]) -> tuple[str, str]:
        """In ``width``: the dataset cut to its start, the family dropped for a config under
        MIN_STEM, then the config cut by ``keep`` (its marks kept or merged): (model, tail)."""
        dataset = self.dataset
        if dataset is not None and len(self.text()) > width:
            dataset = _keep_start(dataset, DATASET_MIN)
        family = f"{self.family}/" if self.family else ""
        room = width - len(family) - len(self.tail(dataset))
        if family and room < min(MIN_STEM, len(self.config)):
            return replace(self, family=None, lost_start=True).cut(width, keep)
        marks = int(self.lost_start) + int(self.lost_end)
        config = self.marked_config()
        if len(config) > room:
            merged = keep is _keep_end and self.lost_start  # the cut's mark can be the lost start's
            config = self._marked(keep(self.config, max(room - marks + merged, 1)))
            if len(config) > room:  # the config was a cell too long to be cut: no mark to share
                config = self._marked(keep(self.config, max(room - marks, 1)))
        return family + config, self.tail(dataset)

    def _marked(self, config: str) -> str:
        """A cut config with the marks of a lost start and end (one mark where the cut made it)."""
        if self.lost_start and not config.startswith(MARK):
            config = MARK + config
        return config + MARK if self.lost_end and not config.endswith(MARK) else config


def short_names(names: Mapping[int, NameParts], width_of: Callable[[int], int]) -> dict[int, str]:
    """Each job's name in ``width_of(job id)`` cells, every row narrowed the same way."""
    full = {job: name.full for job, name in names.items()}
    if all(len(text) <= width_of(job) for job, text in full.items()):
        return full
    table = TableNames.of(names.values())
    for step in (1, 2):
        shown = {job: table.parts(name, step).text() for job, name in names.items()}
        if all(len(text) <= width_of(job) for job, text in shown.items()):
            return shown
    parts = {job: table.parts(name, 2) for job, name in names.items()}
    best: tuple[int, dict[int, tuple[str, str]]] | None = None
    one_config = len({name.stem for name in names.values()}) == 1  # nothing to tell apart: both its ends
    for keep in (_keep_both_ends,) if one_config else (_keep_end, _keep_both_ends, _keep_start):
        cut = {job: p.cut(width_of(job), keep) for job, p in parts.items()}
        alike = _alike(cut, names)
        if best is None or alike < best[0]:  # the first of the fewest alike
            best = (alike, cut)
        if not alike:
            break
    assert best is not None
    return {job: model + tail for job, (model, tail) in best[1].items()}


def _alike(cut: Mapping[int, tuple[str, str]], names: Mapping[int, NameParts]) -> int:
    """How many jobs read like one of another config (family and config alike), or of another
    config, seed or dataset (the whole name alike)."""
    models = _same(((model, (names[job].family, names[job].stem)) for job, (model, _) in cut.items()))
    whole = _same(((model + tail, names[job]) for job, (model, tail) in cut.items()))
    return models + whole


def _same(shown: Iterable[tuple[str, Hashable]]) -> int:
    """How many of the things read the same as another thing."""
    things_of: dict[str, set[Hashable]] = {}
    for text, thing in shown:
        things_of.setdefault(text, set()).add(thing)
    return sum(len(things) for things in things_of.values() if len(things) > 1)


def _keep_start(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + MARK


def _keep_end(text: str, width: int) -> str:
    return text if len(text) <= width else MARK + text[len(text) - max(width - 1, 0):]


def _keep_both_ends(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    front = (width - 1) // 2
    return text[:front] + MARK + text[len(text) - (width - 1 - front):]

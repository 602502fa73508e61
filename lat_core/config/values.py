"""Kinds of configuration values, shared by the job schema and the environment table.

Why one module: a value reaches a job config either typed (a YAML file, a plan's ``overrides``) or as
text (an environment variable). Each kind checks a typed value once (``check``: type and range) and
turns text into a typed value once (``from_text``), so ``HP_PEFT_DROPOUT=1.5`` and ``peft: {dropout:
1.5}`` are refused by the same function with the same expectation, before anything starts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, TypeGuard


@dataclass(frozen=True)
class Kind:
    """What a value must be (``expected`` completes "expected ..."), how to check it, how to read it."""

    expected: str
    accepts: Callable[[object], bool]
    from_text: Callable[[str], object] = str
    # called only with a value that ``accepts`` took, so it may rely on what that checked (Any)
    normalise: Callable[[Any], object] = lambda value: value

    def check(self, value: object) -> object:
        """The typed value, normalised; ValueError("expected ...") otherwise."""
        try:
            ok = self.accepts(value)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"expected {self.expected}")
        return self.normalise(value)

    def parse_text(self, text: str) -> object:
        """An environment variable's text -> the checked value."""
        try:
            value = self.from_text(text.strip())
        except (TypeError, ValueError):
            raise ValueError(f"expected {self.expected}") from None
        return self.check(value)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[int | float]:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _text_bool(text: str) -> bool:
    low = text.lower()
    if low in {"1", "true", "yes", "on"}:
        return True
    if low in {"0", "false", "no", "off"}:
        return False
    raise ValueError(text)


def _text_number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


POSITIVE_INT = Kind("a positive integer", lambda v: _is_int(v) and v >= 1, int)
NONNEG_INT = Kind("an integer >= 0", lambda v: _is_int(v) and v >= 0, int)
INTEGER = Kind("an integer", _is_int, int)
NUMBER = Kind("a finite number", _is_number, _text_number, float)
POSITIVE_NUMBER = Kind("a finite number > 0", lambda v: _is_number(v) and v > 0, _text_number, float)
NONNEG_NUMBER = Kind("a finite number >= 0", lambda v: _is_number(v) and v >= 0, _text_number, float)
RATIO = Kind("a number in [0, 1)", lambda v: _is_number(v) and 0 <= v < 1, _text_number, float)
FRACTION = Kind("a number in (0, 1]", lambda v: _is_number(v) and 0 < v <= 1, _text_number, float)
BOOLEAN = Kind("a boolean (1/0, true/false, yes/no, on/off)", lambda v: isinstance(v, bool), _text_bool)
TEXT = Kind("a string", lambda v: isinstance(v, str))
NAMES = Kind("a non-empty list of strings",
             lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, str) for x in v))


RUN_NAME = Kind("a run name (letters, digits and . _ - @ : +; 'dummy' for none)",
                lambda v: isinstance(v, str) and re.fullmatch(r"[\w.@:+-]{1,128}", v.strip()) is not None,
                normalise=lambda v: v.strip())


def choice(*choices: str) -> Kind:
    """One of ``choices``, case-insensitive."""
    return Kind(f"one of {', '.join(choices)}", lambda v: isinstance(v, str) and v.strip().lower() in choices,
                normalise=lambda v: v.strip().lower())


FAMILIES = ("gla", "mamba")
SCHEDULERS = ("constant", "linear", "cosine", "constant_with_warmup")
FAMILY = choice(*FAMILIES)
SCHEDULER = choice(*SCHEDULERS)

DTYPES = ("float32", "bfloat16", "float16")
_PRECISIONS = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
               "half": "float16", "fp32": "float32", "float32": "float32", "float": "float32"}
DTYPE = Kind("bf16, fp16 or fp32 (bfloat16, float16, float32)",
             lambda v: isinstance(v, str) and v.strip().lower() in _PRECISIONS,
             normalise=lambda v: _PRECISIONS[v.strip().lower()])


def _logits_to_keep(value: object) -> object:
    if isinstance(value, str):
        low = value.strip().lower()
        return low if low == "auto" else 0 if low in ("all", "off", "none") else int(low)
    return value


LOGITS_TO_KEEP = Kind("auto, 0/all or an integer >= 0 (the last N positions)",
                      lambda v: _logits_to_keep(v) == "auto" or NONNEG_INT.accepts(_logits_to_keep(v)),
                      normalise=_logits_to_keep)

def _auto_or_false(value: object) -> object:
    if isinstance(value, str) and value.strip().lower() in ("auto", "false", "off", "no", "0"):
        return "auto" if value.strip().lower() == "auto" else False
    return value


# A speed mode that the trainer turns on where it can (``auto``) or that a user turns off (``false``)
# to compare with, or to run, the plain eager trainer (train.graphs, train.pack).
AUTO_OR_FALSE = Kind("auto or false", lambda v: _auto_or_false(v) in ("auto", False), normalise=_auto_or_false)


def _auto_or_bool(value: object) -> object:
    if isinstance(value, str) and value.strip().lower() in ("true", "on", "yes", "1"):
        return True
    return _auto_or_false(value)


# train.pack also takes true: packing where it runs but loses by default (the GPU), to compare
AUTO_OR_BOOL = Kind("auto, true or false", lambda v: _auto_or_bool(v) in ("auto", True, False),
                    normalise=_auto_or_bool)

TRACKERS = ("none", "tensorboard", "wandb", "swanlab")


def _tracker_list(value: object) -> list[object] | None:
    """The names of a comma list (lower-cased) or of a list; None for any other value."""
    if isinstance(value, str):
        return [v.strip().lower() for v in value.split(",") if v.strip()]
    return value if isinstance(value, list) else None


def _is_tracker_list(value: object) -> bool:
    names = _tracker_list(value)
    return names is not None and all(isinstance(t, str) and t in TRACKERS for t in names)


def _trackers(value: object) -> list[object]:
    """An accepted list's trackers, each once and in order, without ``none``."""
    return [t for t in dict.fromkeys(_tracker_list(value) or []) if t != "none"]


TRACKER_LIST = Kind(f"one of {', '.join(TRACKERS)} or a (comma) list of them", _is_tracker_list, normalise=_trackers)

_INITS = ("gaussian", "pissa", "loraga", "olora")


def _init(value: object) -> object:
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return value.strip() if isinstance(value, str) else value


def _is_init(value: object) -> bool:
    init = _init(value)
    return isinstance(init, bool) or init in _INITS or (
        isinstance(init, str) and init.startswith("pissa_niter_") and init[12:].isdigit())


INIT_LORA_WEIGHTS = Kind("true, false, gaussian, pissa, pissa_niter_N, loraga or olora", _is_init, normalise=_init)

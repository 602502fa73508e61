"""Fuzz: random bytes, random YAML values and a valid file with one field made junk, thrown at plan,
suite, experiment-config and PEFT-spec loading. The outcome is always a valid object or the
project's typed error (a LatError naming where), never another exception. A fixed seed: the cases
are the same on every run."""

import datetime
import math
import random
from pathlib import Path

import pytest
import yaml

from lat_core.config import yaml_text
from lat_core.config.paths import USER, ConfigTree
from lat_core.config.suites import SuiteRegistry
from lat_core.errors import LatError, PlanError
from lat_core.monitor.fake_nvml import FakeNvml
from lat_core.monitor.gpu import GpuProbe
from lat_core.front.plan import Plan, load_plan
from lat_core.front.service import prepare_run

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = yaml.safe_load((ROOT / "configs" / "experiments" / "gla" / "tiny_lora_qkvo.yaml").read_text())
SPEC = {"method": "lora", "r": 4, "alpha": 8, "target_modules": "QKVO"}
SUITE = {"name": "s", "description": "fuzz", "rounds": {1: ["x.yaml"]}}
YAML_CHARS = "ab1:-[]{},&*!|>'\"%@`#?~. \n\t\\0e+_"
CASES = 120  # per kind; the whole file takes a few seconds


def junk(rng: random.Random, depth: int = 0):
    """A random YAML-representable value: every type, edge numbers, odd strings, nested junk."""
    kinds = ["none", "bool", "int", "big", "neg", "float", "nan", "inf", "str", "empty", "long", "unicode", "date",
             "bytes"]
    kinds += ["list", "dict"] if depth < 3 else []
    kind = rng.choice(kinds)
    simple = {"none": None, "bool": rng.random() < 0.5, "int": rng.randint(0, 10), "big": 10 ** rng.randint(19, 400),
              "neg": -rng.randint(1, 10 ** 6), "float": rng.uniform(-1e6, 1e6), "nan": math.nan,
              "inf": rng.choice([math.inf, -math.inf, 1e308]), "empty": "", "long": "x" * rng.randint(300, 5000),
              "str": "".join(rng.choice(YAML_CHARS) for _ in range(rng.randint(1, 12))),
              "unicode": "".join(chr(rng.randint(0x80, 0x2FFF)) for _ in range(rng.randint(1, 8))),
              "date": datetime.date(2000 + rng.randint(0, 30), 1, 1), "bytes": rng.randbytes(4)}  # !!timestamp, !!binary
    if kind in simple:
        return simple[kind]
    if kind == "list":
        return [junk(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice([junk_key(rng), rng.randint(-3, 3), None, True]): junk(rng, depth + 1)
            for _ in range(rng.randint(0, 4))}


def junk_key(rng: random.Random) -> str:
    return rng.choice(["name", "rounds", "r", "train", "peft", "model", "x", "1", "spec", "lr", "seed", ""])


def with_junk(rng: random.Random, valid: dict) -> dict:
    """``valid`` with one field (or one field of one section) replaced by junk, or one added."""
    data = yaml.safe_load(yaml.safe_dump(valid))  # a deep copy
    node = data
    while True:
        key = rng.choice([*node, "unknown_field"])
        if isinstance(node.get(key), dict) and rng.random() < 0.6:
            node = node[key]
            continue
        if isinstance(node.get(key), list) and node[key] and rng.random() < 0.5:
            node[key][rng.randrange(len(node[key]))] = junk(rng)
        else:
            node[key] = junk(rng)
        return data


def file_text(rng: random.Random, valid: dict) -> bytes:
    """What one case writes: random bytes, random YAML text, a random value, a valid file made
    junk, or a valid file with a few characters changed."""
    kind = rng.choice(["bytes", "text", "value", "field", "field", "field", "mutated"])
    if kind == "bytes":
        return rng.randbytes(rng.randint(0, 300))
    if kind == "text":
        return "".join(rng.choice(YAML_CHARS) for _ in range(rng.randint(0, 200))).encode()
    if kind == "mutated":
        text = list(yaml.safe_dump(valid, sort_keys=False))
        for _ in range(rng.randint(1, 4)):
            text[rng.randrange(len(text))] = rng.choice(YAML_CHARS)
        return "".join(text).encode()
    data = junk(rng) if kind == "value" else with_junk(rng, valid)
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False).encode()


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "configs"
    for kind in ("suites", "experiments", "peft"):
        (root / kind).mkdir(parents=True)
    (root / "suites" / "s.yaml").write_text(yaml.safe_dump(SUITE))
    (root / "experiments" / "x.yaml").write_text(yaml.safe_dump({**EXPERIMENT, "peft": {"spec": "p"}}))
    (root / "peft" / "p.yaml").write_text(yaml.safe_dump(SPEC))
    return root


def registry(tree: Path) -> SuiteRegistry:
    """A user's tree, so that its PEFT spec is found (pinned as a path, as for ``--configs``)."""
    return SuiteRegistry((ConfigTree(tree, USER),))


def good_plan(tmp_path: Path) -> dict:
    return {"suites": [{"name": "s", "rounds": [1]}], "pairs": ["1:tiny-sst2"], "gpus": "cpu", "slots": 1,
            "output_root": str(tmp_path / "runs"), "env": {"HP_LR": "0.001"}, "overrides": {"train": {"lr": 0.01}},
            "on_oom": {"remedies": ["smaller_micro_batch"]}, "countdown_minutes": 0, "min_free_gb": 0}


def prepare(plan: Plan, tree: Path, tmp_path: Path):
    """Expand the plan's jobs as a run would (suites, experiment configs, PEFT specs, typed configs);
    the output root stays inside tmp_path whatever the case says."""
    plan = plan.model_copy(update={"output_root": str(tmp_path / "runs")})
    prepared = prepare_run(plan, registry=registry(tree), probe=GpuProbe(FakeNvml.with_gpus(2)), environ={})
    plan.to_yaml()  # what creating the run writes: the journal's plan and each job's job.yaml
    for job in prepared.jobs:
        yaml_text.dump(job.config)
    return prepared


def outcomes(rng, write, load) -> dict[str, int]:
    """Run CASES cases; count each outcome. Anything but a LatError fails the test with its case."""
    seen = {"valid": 0, "refused": 0}
    for case in range(CASES):
        write(case)
        try:
            load()
        except LatError as exc:
            assert str(exc).strip(), case
            seen["refused"] += 1
        else:
            seen["valid"] += 1
    return seen


def test_plan_loading_gives_a_plan_or_a_plan_error(tmp_path, tree):
    rng, path = random.Random(2506), tmp_path / "plan.yaml"
    valid = good_plan(tmp_path)

    def load():
        try:
            plan = load_plan(path, registry(tree))
        except LatError as exc:
            assert isinstance(exc, PlanError) and str(path) in str(exc), exc
            raise
        prepare(plan, tree, tmp_path)

    seen = outcomes(rng, lambda case: path.write_bytes(file_text(rng, valid)), load)
    assert seen["valid"] >= 5 and seen["refused"] >= CASES // 2, seen  # both outcomes really happen
    for field in [*Plan.model_fields, "unknown_field"]:  # every field of the schema, each a few junk values
        for _ in range(3):
            path.write_text(yaml.safe_dump({**valid, field: junk(rng)}, allow_unicode=True))
            try:
                load()
            except LatError:
                pass


@pytest.mark.parametrize("kind, valid", [("suites/s.yaml", SUITE), ("experiments/x.yaml", {**EXPERIMENT, "peft": {"spec": "p"}}),
                                         ("peft/p.yaml", SPEC)], ids=["suite", "experiment", "peft"])
def test_suite_experiment_and_peft_loading_give_jobs_or_a_typed_error(tmp_path, tree, kind, valid):
    rng, path, plan = random.Random(f"{kind}-25"), tree / kind, tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(good_plan(tmp_path)))

    def load():
        try:
            prepare(load_plan(plan, registry(tree)), tree, tmp_path)
        except LatError as exc:
            assert exc.where, exc  # names the file, or the plan layer a bad value came from
            raise

    seen = outcomes(rng, lambda case: path.write_bytes(file_text(rng, valid)), load)
    assert seen["valid"] >= 3 and seen["refused"] >= CASES // 2, seen

"""Triage never raises: whatever a job left behind (any config, log, events or exit record), it
returns a diagnosis, or the one typed error for a path it cannot read at all.

A fixed seed makes the 1,500 cases the same on every run: a failure names its case number, and the
case's folder is rebuilt by running the test again."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lat_core.triage import Diagnosis, TriageError, classify
from lat_tui.triage_cli import main as triage_main
from tests.conftest import ROOT
from tests.helpers.waits import HANG_S

CASES = 1500
SEED = 25
LOGS = sorted((ROOT / "tests" / "fixtures" / "logs").glob("*.log"))
ODD = [None, True, False, 0, -1, 1, 3, 8, 2**70, -(2**70), 1.5, -0.5, float("nan"), float("inf"), "8", "eight", "",
       "1e3", [], [1, 2], {}, {"a": 1}, "float16", "bfloat16"]
CONFIG_FIELDS = ["train.batch_size", "train.grad_accum", "train.num_workers", "train.gradient_checkpointing",
                 "train.save_every", "train.save_optimizer_state", "train.warmup_steps", "train.warmup_ratio",
                 "train.lr", "model.dtype", "eval.use_max_new_tokens", "gla.GLA_USE_FUSED_SWIGLU", "output_dir",
                 "data", "seed"]
EVENTS = ["step", "memory", "checkpoint", "finished", "failed", "echo", "started", "eval", None, 3]
EVENT_FIELDS = ["step", "loss", "peak_rss_bytes", "peak_gpu_bytes", "message", "error_type", "t", "resumed"]
ENV_NAMES = ["PYTORCH_CUDA_ALLOC_CONF", "PYTHONFAULTHANDLER", "HF_HUB_OFFLINE", "LAT_JOB_GRAPHS",
             "GLA_USE_FUSED_SWIGLU", "CUDA_VISIBLE_DEVICES"]
RETURNCODES = [None, 0, 1, 2, 3, -6, -7, -9, -11, -15, 130, 134, 137, 139, 143, 255, 2**40, -(2**40), -64, -65]


def odd(rng: random.Random):
    return rng.choice(ODD)


def nested(rng: random.Random) -> dict:
    config: dict = {}
    for dotted in rng.sample(CONFIG_FIELDS, rng.randint(0, len(CONFIG_FIELDS))):
        node = config
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
        node[leaf] = odd(rng)
    if rng.random() < 0.1:
        config["train"] = odd(rng)  # a section that is no mapping
    return config


def config_text(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.05:
        return "".join(chr(rng.randint(0, 0x2FF)) for _ in range(rng.randint(0, 200)))  # not YAML at all
    if roll < 0.1:
        return yaml.safe_dump(odd(rng))  # YAML, but no mapping
    return yaml.safe_dump(nested(rng))


def log_lines(rng: random.Random) -> list[str]:
    lines = []
    for log in rng.sample(LOGS, rng.randint(0, 3)):
        text = log.read_text(errors="replace").splitlines()
        start = rng.randint(0, len(text))
        lines += text[start:start + rng.randint(0, 40)]
    for i, line in enumerate(lines):  # numbers the parsers read, made odd
        if rng.random() < 0.2:
            lines[i] = "".join(rng.choice(["9" * rng.randint(1, 400), ".", "-", "nan", "1e999", c])
                               if c.isdigit() else c for c in line)
    for _ in range(rng.randint(0, 3)):
        lines.insert(rng.randint(0, len(lines)), rng.choice([
            "\x1b[31m" + "x" * rng.randint(0, 10000), "".join(chr(rng.randint(0, 0xFFFF)) for _ in range(50)),
            "[rank" + str(odd(rng)) + "]: Traceback (most recent call last):", "Killed", "  File \"x\", line 1",
            "RuntimeError: CUDA out of memory. Tried to allocate " + str(odd(rng)) + " GiB"]))
    return lines


def event_lines(rng: random.Random) -> list[str]:
    lines = []
    for _ in range(rng.randint(0, 12)):
        roll = rng.random()
        if roll < 0.1:
            lines.append(rng.choice(["{", "not json", "[1, 2]", "null", '"text"', "{\"event\": "]))
            continue
        event = {"event": rng.choice(EVENTS)}
        event.update({name: odd(rng) for name in rng.sample(EVENT_FIELDS, rng.randint(0, 4))})
        lines.append(json.dumps(event))
    return lines


def exit_record(rng: random.Random) -> str:
    if rng.random() < 0.15:
        return rng.choice(["", "{", "[]", "null", "7"])
    record = {"returncode": rng.choice([*RETURNCODES, *ODD])}
    record.update({k: odd(rng) for k in rng.sample(["signal", "max_rss", "oom_kills", "vanished"], rng.randint(0, 4))})
    return json.dumps(record)


def command_json(rng: random.Random) -> str:
    env = {name: odd(rng) for name in rng.sample(ENV_NAMES, rng.randint(0, len(ENV_NAMES)))}
    return json.dumps(rng.choice([{"env": env}, {"env": odd(rng)}, odd(rng), {"env": env, "argv": odd(rng)}]))


def job_folder(rng: random.Random, folder: Path) -> Path:
    folder.mkdir(parents=True)
    files = {"job.yaml": config_text, "command.json": command_json, ".lat/attempt-1.exit.json": exit_record,
             "train.log": lambda r: "\n".join(log_lines(r)), "events.jsonl": lambda r: "\n".join(event_lines(r))}
    for name, make in files.items():
        if rng.random() < 0.85:
            path = folder / name
            path.parent.mkdir(exist_ok=True)
            path.write_text(make(rng), errors="surrogatepass")
    return folder


def test_triage_returns_a_diagnosis_for_any_job_folder(tmp_path):
    rng = random.Random(SEED)
    raised = []
    for case in range(CASES):
        folder = job_folder(rng, tmp_path / f"case{case}")
        bare_log = rng.random() < 0.15
        path = folder / "train.log" if bare_log and (folder / "train.log").exists() else folder
        kwargs = {"cancelled": rng.random() < 0.1, "timed_out": rng.random() < 0.05}
        if rng.random() < 0.2:
            kwargs.update(oom_kills_before=rng.choice([None, 0, 1, 5]), oom_kills_after=rng.choice([None, 0, 2, 9]))
        if rng.random() < 0.2:
            kwargs["env"] = {name: str(odd(rng)) for name in rng.sample(ENV_NAMES, 3)}
        try:
            diagnosis = classify(path, rng.choice(RETURNCODES), **kwargs)
        except TriageError:
            continue
        except Exception as exc:  # noqa: BLE001 - what this test looks for
            raised.append(f"case {case}: {type(exc).__name__}: {exc}"[:200])
            continue
        assert isinstance(diagnosis, Diagnosis)
        json.dumps(diagnosis.to_json())  # what the journal stores
    assert not raised, f"{len(raised)} of {CASES} cases raised:\n" + "\n".join(raised[:20])


IN_LITTLE_MEMORY = """
import resource, sys
from pathlib import Path
from lat_core.triage import classify

vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize:")).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + 192 * 2**20, resource.RLIM_INFINITY))
diagnosis = classify(Path(sys.argv[1]), 1)
print(diagnosis.cls, diagnosis.title)
"""


def classify_in_little_memory(path: Path) -> str:
    """Triage in a process allowed 192 MiB more than it has once imported: a file read whole fails it."""
    done = subprocess.run([sys.executable, "-c", IN_LITTLE_MEMORY, str(path)], capture_output=True, text=True,
                          timeout=HANG_S, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/urandom"])
def test_triage_of_an_endless_file_reads_a_bounded_part(path):
    assert classify_in_little_memory(Path(path)).startswith("exit_code ")


def test_triage_of_a_200_mb_log_and_events_reads_their_tails(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    step = json.dumps({"event": "step", "step": 1, "loss": 0.5}) + "\n"
    for name, line, last in (("events.jsonl", step, json.dumps({"event": "failed", "error_type": "ValueError",
                                                                "message": "the end"})),
                             ("train.log", "x" * 99 + "\n", "ValueError: the end")):
        with open(folder / name, "w") as fh:
            fh.write(line * (200 * 2**20 // len(line)))
            fh.write(last + "\n")
    assert classify_in_little_memory(folder) == "python_exception ValueError: the end\n"


def test_triage_of_a_fifo_is_the_typed_error_and_exit_2(tmp_path, capsys):
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)  # opened for reading, it would block until a writer came
    with pytest.raises(TriageError, match="pipe.log: a pipe or a socket"):
        classify(fifo, None)
    assert triage_main([str(fifo)]) == 2
    assert capsys.readouterr().err == f"lat-tui triage: {fifo}: a pipe or a socket, not a job folder or a log file\n"


def test_the_triage_command_on_a_non_integer_batch_size_prints_the_diagnosis(tmp_path, capsys):
    job = tmp_path / "job"
    job.mkdir()
    (job / "job.yaml").write_text("train: {batch_size: eight, grad_accum: 1e3}\n")
    (job / "train.log").write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
                                   "has a total capacity of 79.19 GiB of which 1.84 GiB is free.\n")
    assert triage_main([str(job), "--returncode", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cuda_oom: CUDA out of memory (peak)") and "smaller_micro_batch" not in out

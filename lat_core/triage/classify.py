"""Decide why a job ended: one class, a paragraph, the numbers, the evidence and ranked remedies.

Rules run in a fixed order and the first that applies wins. The order encodes causality: a kernel
OOM kill explains the NCCL timeouts of the ranks left waiting, a CUDA OOM or a device fault
explains the NCCL error that wraps it, and a specific signature beats a generic traceback. A clean
exit is decided before any log line is read, so words in training data can never fail a job.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lat_core.triage import remedies as fix
from lat_core.triage.explain import cuda_oom_text, human_bytes, signal_name, signal_of
from lat_core.triage.hostoom import oom_kills_between
from lat_core.triage.model import Diagnosis
from lat_core.triage.oom import oom_kind, parse_cuda_oom
from lat_core.triage.patterns import (LogLine, decisive_exception, root_cause, signature_hits,
                                      split_lines, tracebacks, watchdog_numbers)
from lat_core.triage.sources import JobFiles, read_job_dir, read_log_file

SIGKILL = 9
MAX_EVIDENCE = 6


@dataclass(frozen=True)
class Facts:
    """Everything the rules look at, gathered once."""

    files: JobFiles
    lines: list[LogLine]
    hits: dict
    returncode: int | None
    signal: int | None
    cancelled: bool
    timed_out: bool
    oom_kills: int | None
    base: dict

    def first_hit(self, cls: str):
        """The earliest match of a class: the first error usually names the cause, later ones echo it."""
        found = self.hits.get(cls)
        return found[0] if found else None

    def killed_by_sigkill(self) -> bool:
        return self.signal == SIGKILL or self.base.get("rank_exitcode") == -SIGKILL


def classify(job_dir: Path, returncode: int | None, *, cancelled: bool = False, timed_out: bool = False,
             oom_kills_before: int | None = None, oom_kills_after: int | None = None,
             env: dict | None = None) -> Diagnosis:
    """Classify a job folder (or a bare log file) given how its process ended.

    ``oom_kills_before``/``after`` are the kernel OOM-kill counter (:func:`read_oom_kill_count`)
    sampled at launch and at exit; a rise plus SIGKILL is proof of a host OOM. ``env`` is the job's
    live environment (the engine passes the journal's); without it, ``command.json``'s is read.
    """
    job_dir = Path(job_dir)
    files = read_job_dir(job_dir, env) if job_dir.is_dir() else read_log_file(job_dir)
    return classify_files(files, returncode, cancelled=cancelled, timed_out=timed_out,
                          oom_kills=oom_kills_between(oom_kills_before, oom_kills_after))


def classify_files(files: JobFiles, returncode: int | None, *, cancelled: bool = False,
                   timed_out: bool = False, oom_kills: int | None = None) -> Diagnosis:
    facts = gather(files, returncode, cancelled, timed_out, oom_kills)
    for rule in RULES:
        diagnosis = rule(facts)
        if diagnosis is not None:
            return diagnosis
    return _exit_code(facts)


def gather(files: JobFiles, returncode, cancelled, timed_out, oom_kills) -> Facts:
    if returncode is None and files.exit_record:
        returncode = files.exit_record.get("returncode")
    lines = split_lines(files.lines)
    base = {"returncode": returncode, "signal": signal_name(signal_of(returncode)) if signal_of(returncode) else None}
    base.update(root_cause(lines))
    memory = files.last_event("memory") or {}
    base.update({k: memory[k] for k in ("peak_rss_bytes", "peak_gpu_bytes") if isinstance(memory.get(k), int)})
    if oom_kills is not None:
        base["oom_kills"] = oom_kills
    return Facts(files, lines, signature_hits(lines) if returncode != 0 else {}, returncode,
                 signal_of(returncode), cancelled, timed_out, oom_kills, base)


def _diagnosis(facts: Facts, cls: str, title: str, text: str, remedies=(), numbers=None,
               evidence=(), rank: int | None = None) -> Diagnosis:
    merged = dict(facts.base)
    if rank is not None and "rank" not in merged:
        merged["rank"] = rank
    merged.update(numbers or {})
    if merged.get("rank") is not None:
        title = f"{title} (rank {merged['rank']})"
    kept = tuple(line[:500] for line in evidence if line)[:MAX_EVIDENCE]
    return Diagnosis(cls, title, text, tuple(remedies), {k: v for k, v in merged.items() if v is not None}, kept)


# ---------------------------------------------------------------- rules, in order
def _ok(facts: Facts) -> Diagnosis | None:
    finished = facts.files.last_event("finished")
    if facts.returncode == 0 or (facts.returncode is None and finished and not facts.cancelled):
        note = "" if finished else " It wrote no 'finished' event, so check its outputs."
        return _diagnosis(facts, "ok", "Finished", f"The job exited cleanly.{note}")
    return None


def _cancelled_flag(facts: Facts) -> Diagnosis | None:
    if not facts.cancelled:
        return None
    return _diagnosis(facts, "cancelled", "Cancelled", "The job was cancelled on request "
                      f"(exit {facts.returncode}); nothing went wrong in it.")


def _timeout_flag(facts: Facts) -> Diagnosis | None:
    if not facts.timed_out:
        return None
    return _diagnosis(facts, "timeout", "Ran past its time limit", "The job was stopped because it "
                      "ran longer than its time limit.", fix.resume_remedy(facts.files.events))


def _host_oom_proven(facts: Facts) -> Diagnosis | None:
    if not (facts.killed_by_sigkill() and facts.oom_kills):
        return None
    hit = facts.first_hit("host_oom")
    return _host_oom(facts, f"The kernel's OOM killer fired {facts.oom_kills} time(s) while the job "
                     "ran, and the job died of SIGKILL", [hit[1].raw] if hit else [])


def _cuda_oom(facts: Facts) -> Diagnosis | None:
    hit = facts.first_hit("cuda_oom")
    failed = facts.files.last_event("failed") or {}
    message = hit[1].text if hit else str(failed.get("message", ""))
    numbers = parse_cuda_oom(message)
    if numbers is None:
        return None
    kind, factors = oom_kind(numbers)
    numbers.update(oom_kind=kind, oom_factors=factors)
    remedies = fix.cuda_oom_remedies(facts.files.config, facts.files.env, kind, numbers)
    return _diagnosis(facts, "cuda_oom", f"CUDA out of memory ({kind})", cuda_oom_text(kind, factors, numbers),
                      remedies, numbers, [hit[1].raw] if hit else [message], hit[1].rank if hit else None)


def _signature_rule(cls: str, title: str, explain, remedies):
    """A rule that fires on the first log line of class ``cls``."""
    def rule(facts: Facts) -> Diagnosis | None:
        hit = facts.first_hit(cls)
        if hit is None:
            return None
        signature, line = hit
        last = facts.hits[cls][-1][1]
        evidence = [line.raw] if last is line else [line.raw, last.raw]
        numbers = {f"{cls}_kind": signature.kind, **watchdog_numbers(line.text)}
        return _diagnosis(facts, cls, title, explain(signature.kind), remedies(signature.kind),
                          numbers, evidence, line.rank)
    return rule


def _device_text(kind: str) -> str:
    return {
        "illegal_memory_access": "A CUDA kernel read or wrote memory it does not own. The usual causes are "
                                 "a bug in a custom kernel or an index out of range; later CUDA calls fail too.",
        "device_assert": "An assertion inside a CUDA kernel failed, most often an index out of range "
                         "(labels outside the number of classes, token ids outside the vocabulary).",
        "ecc": "The GPU reported an uncorrectable ECC memory error: a hardware fault, not a bug in the job.",
        "xid": "The NVIDIA driver logged an Xid event: the GPU faulted or fell off the bus.",
    }.get(kind, "A CUDA kernel failed to run (launch failure, misaligned address or illegal instruction).")


def _nccl_text(kind: str) -> str:
    if kind == "watchdog_timeout":
        return ("A collective operation waited past NCCL's timeout. Usually one rank stopped taking part "
                "(it crashed, hung or ran far slower); look at the rank that failed first.")
    return "NCCL, the library that moves tensors between GPUs, reported an error and the process group failed."


def _rendezvous_text(kind: str) -> str:
    if kind == "port_in_use":
        return "The rendezvous store could not listen on its port: another process already held it."
    return "The ranks of a distributed job did not all meet at the rendezvous in time."


_device_fault = _signature_rule("device_fault", "GPU fault", _device_text, fix.device_fault_remedies)
_nccl = _signature_rule("nccl", "NCCL failure", _nccl_text, fix.nccl_remedies)
_libuv = _signature_rule("libuv", "libuv TCPStore failure",
                         lambda _k: "The libuv-based TCPStore used for the rendezvous failed or is not "
                                    "available in this PyTorch build.", lambda _k: fix.libuv_remedies())
_rendezvous = _signature_rule("rendezvous", "Rendezvous failed", _rendezvous_text, fix.rendezvous_remedies)


def _scheduler_stop(facts: Facts) -> Diagnosis | None:
    for cls, title in (("timeout", "Ran past its time limit"), ("cancelled", "Cancelled by the scheduler")):
        hit = facts.first_hit(cls)
        if hit:
            remedies = fix.resume_remedy(facts.files.events) if cls == "timeout" else []
            return _diagnosis(facts, cls, title, f"The batch scheduler stopped the job: {hit[1].text.strip()}",
                              remedies, evidence=[hit[1].raw])
    return None


def _host_oom_likely(facts: Facts) -> Diagnosis | None:
    hits = facts.hits.get("host_oom", [])
    worker = [line for sig, line in hits if sig.kind == "dataloader_killed"]
    if worker:
        return _host_oom(facts, "A dataloader worker was killed (SIGKILL), which is almost always the "
                         "kernel's OOM killer", [worker[0].raw])
    final = [line for _sig, line in hits if line.index >= _last_lines_start(facts.lines)]
    if final and (facts.killed_by_sigkill() or facts.returncode is None):
        return _host_oom(facts, "The job died of SIGKILL and the log ends with the shell's or the "
                         "kernel's 'Killed' notice, the signature of the OOM killer", [final[-1].raw])
    return None


def _last_lines_start(lines: list[LogLine], count: int = 5) -> int:
    """Index where the last ``count`` non-blank lines begin: a kill notice ends the log, so a
    'Killed' further up is some other text (a data sample, an earlier retry)."""
    filled = [line.index for line in lines if line.text.strip()]
    return filled[-count] if len(filled) >= count else 0


def _host_oom(facts: Facts, cause: str, evidence: list[str]) -> Diagnosis:
    peak = facts.base.get("peak_rss_bytes")
    peak_text = f" Its peak resident memory was {human_bytes(peak)}." if peak else ""
    text = (f"{cause}: the host ran out of RAM (not GPU memory).{peak_text} Dataloader workers and "
            "several jobs on one host each hold their own copy of data and model in RAM.")
    return _diagnosis(facts, "host_oom", "Host out of memory (OOM killer)", text,
                      fix.host_oom_remedies(facts.files.config), evidence=evidence)


def _python_exception(facts: Facts) -> Diagnosis | None:
    exc = decisive_exception(tracebacks(facts.lines), facts.base.get("rank"))
    failed = facts.files.last_event("failed")
    if exc is None and failed is None:
        return None
    kind = exc.type if exc else str(failed.get("error_type", "Exception"))
    message = exc.message if exc else str(failed.get("message", ""))
    if kind.rsplit(".", 1)[-1] == "KeyboardInterrupt":
        return _diagnosis(facts, "cancelled", "Interrupted", "The job was interrupted (SIGINT: Ctrl-C or "
                          "a cancel).", evidence=list(exc.lines) if exc else [])
    return _diagnosis(facts, "python_exception", f"{kind.rsplit('.', 1)[-1]}: {message}"[:160],
                      f"The trainer raised {kind}: {message}. The traceback in train.log shows where.",
                      numbers={"exception_type": kind, "exception_message": message[:500]},
                      evidence=list(exc.lines) if exc else [f"{kind}: {message}"], rank=exc.rank if exc else None)


def _killed(facts: Facts) -> Diagnosis | None:
    if facts.signal is None:
        return None
    name = signal_name(facts.signal)
    why = {"SIGKILL": "Nothing shows the OOM killer did it, so a user, a scheduler or a watchdog sent it.",
           "SIGTERM": "Something asked it to stop: a cancel, a scheduler or a shutdown.",
           "SIGSEGV": "The process crashed in native code (segmentation fault).",
           "SIGABRT": "Native code aborted the process (a failed C++ check or assertion)."}
    return _diagnosis(facts, "killed", f"Killed by {name}", f"The job was ended by {name}. "
                      f"{why.get(name, '')}".strip())


def _exit_code(facts: Facts) -> Diagnosis:
    if facts.returncode is None:
        return _diagnosis(facts, "exit_code", "Unknown exit", "No exit status was recorded and the log "
                          "shows no known failure.")
    last = next((line.raw.strip() for line in reversed(facts.lines) if line.raw.strip()), "")
    return _diagnosis(facts, "exit_code", f"Exit code {facts.returncode}", f"The job exited with code "
                      f"{facts.returncode} and the log shows no known failure.", evidence=[last])


RULES = (_ok, _cancelled_flag, _timeout_flag, _host_oom_proven, _cuda_oom, _device_fault, _nccl, _libuv,
         _rendezvous, _scheduler_stop, _host_oom_likely, _python_exception, _killed)

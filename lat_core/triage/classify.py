"""Decide why a job ended: one class, a paragraph, the numbers, the evidence and ranked remedies.

Rules run in a fixed order and the first that applies wins. The order encodes causality: a kernel
OOM kill explains the NCCL timeouts of the ranks left waiting, a CUDA OOM or a device fault
explains the NCCL error that wraps it, and a specific signature beats a generic traceback. A clean
exit is decided before any log line is read, so words in training data can never fail a job.
The known failures beyond OOM (``known.py``) come before the signal-only rules: a bus error in a
DataLoader worker names its cause better than the exit status does, and an interrupt or a crash
(how the process ended) beats an exception printed earlier in the log.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

from lat_core.contract.jobdir import CheckpointSaved, Failed, Finished
from lat_core.contract.jobdir.names import checkpoint_folder
from lat_core.contract.jobdir.outcome import EXIT_SAVED_TO_RESUME
from lat_core.text import fmt_bytes, signal_name
from lat_core.triage import known
from lat_core.triage import remedies as fix
from lat_core.contract.failure_classes import FailureClass as F
from lat_core.triage.explain import cuda_oom_text
from lat_core.triage.facts import Facts, gather, make_diagnosis
from lat_core.triage.hostoom import oom_kills_between
from lat_core.contract.diagnosis import Diagnosis, Remedy
from lat_core.triage.oom import oom_kind, parse_cuda_oom
from lat_core.triage.patterns import LogLine, decisive_exception, tracebacks, watchdog_numbers
from lat_core.triage.sources import JobFiles, RawEnv, check_readable, config_value, read_job_dir, read_log_file

#: A rule: a Diagnosis when it applies to the job, else None (the next rule is tried).
Rule = Callable[[Facts], Diagnosis | None]


def classify(job_dir: Path, returncode: int | None, *, cancelled: bool = False, timed_out: bool = False,
             oom_kills_before: int | None = None, oom_kills_after: int | None = None,
             env: RawEnv | None = None) -> Diagnosis:
    """Classify a job folder (or a bare log file) given how its process ended.

    ``cancelled``: LAT (the journal) asked for this job to stop, so a SIGTERM is a cancel; without
    it a SIGTERM or SIGINT came from outside. ``oom_kills_before``/``after`` are the kernel
    OOM-kill counter (:func:`read_oom_kill_count`) sampled at launch and at exit; a rise plus
    SIGKILL is proof of a host OOM. ``env`` is the job's
    live environment (the engine passes the journal's); without it, ``command.json``'s is read.
    """
    job_dir = Path(job_dir)
    check_readable(job_dir)
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


# ---------------------------------------------------------------- rules, in order
def _ok(facts: Facts) -> Diagnosis | None:
    finished = facts.files.last_event(Finished)
    if facts.returncode == 0 or (facts.returncode is None and finished and not facts.cancelled):
        note = "" if finished else " It wrote no 'finished' event, so check its outputs."
        return make_diagnosis(facts, F.OK, "Finished", f"The job exited cleanly.{note}")
    return None


def _cancelled_flag(facts: Facts) -> Diagnosis | None:
    if not facts.cancelled:
        return None
    return make_diagnosis(facts, F.CANCELLED, "Cancelled", "The job was cancelled on request "
                          f"(exit {facts.returncode}); nothing went wrong in it.")


def _saved_to_resume(facts: Facts) -> Diagnosis | None:
    """The trainer's own word (exit EXIT_SAVED_TO_RESUME): asked to save before a time limit, it
    saved a checkpoint and stopped; nothing went wrong, and the engine resumes it."""
    if facts.returncode != EXIT_SAVED_TO_RESUME:
        return None
    steps = [e.step for e in facts.files.events if isinstance(e, CheckpointSaved)]
    where = checkpoint_folder(steps[-1]) if steps else "a checkpoint"
    return make_diagnosis(facts, F.TIMEOUT, "Saved before its time limit", "The scheduler warned that the "
                          f"time limit was near (SIGUSR1); the job saved {where} and stopped, to be resumed.",
                          fix.resume_remedy(facts.files.events))


def _timeout_flag(facts: Facts) -> Diagnosis | None:
    if not facts.timed_out:
        return None
    return make_diagnosis(facts, F.TIMEOUT, "Ran past its time limit", "The job was stopped because it "
                          "ran longer than its time limit.", fix.resume_remedy(facts.files.events))


def _host_oom_proven(facts: Facts) -> Diagnosis | None:
    if not (facts.killed_by_sigkill() and facts.oom_kills):
        return None
    hit = facts.first_hit(F.HOST_OOM)
    return _host_oom(facts, f"The kernel's OOM killer fired {facts.oom_kills} time(s) while the job "
                     "ran, and the job died of SIGKILL", [hit[1].raw] if hit else [])


def _cuda_oom(facts: Facts) -> Diagnosis | None:
    hit = facts.first_hit(F.CUDA_OOM)
    failed = facts.files.last_event(Failed)
    message = hit[1].text if hit else failed.message or "" if failed else ""
    sizes = parse_cuda_oom(message)
    if sizes is None:
        return None
    kind, factors = oom_kind(sizes)
    remedies = fix.cuda_oom_remedies(facts.files.config, facts.files.env, kind, sizes)
    numbers = {**sizes, "oom_kind": kind, "oom_factors": factors}
    return make_diagnosis(facts, F.CUDA_OOM, f"CUDA out of memory ({kind})", cuda_oom_text(kind, factors, sizes),
                          remedies, numbers, [hit[1].raw] if hit else [message], hit[1].rank if hit else None)


def _signature_rule(cls: F, title: str, explain: Callable[[str], str],
                    remedies: Callable[[str], list[Remedy]]) -> Rule:
    """A rule that fires on the first log line of class ``cls``."""
    def rule(facts: Facts) -> Diagnosis | None:
        hit = facts.first_hit(cls)
        if hit is None:
            return None
        signature, line = hit
        last = facts.hits[cls][-1][1]
        evidence = [line.raw] if last is line else [line.raw, last.raw]
        numbers = {f"{cls}_kind": signature.kind, **watchdog_numbers(line.text)}
        return make_diagnosis(facts, cls, title, explain(signature.kind), remedies(signature.kind),
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


_device_fault = _signature_rule(F.DEVICE_FAULT, "GPU fault", _device_text, fix.device_fault_remedies)
_nccl = _signature_rule(F.NCCL, "NCCL failure", _nccl_text, fix.nccl_remedies)
_libuv = _signature_rule(F.LIBUV, "libuv TCPStore failure",
                         lambda _k: "The libuv-based TCPStore used for the rendezvous failed or is not "
                                    "available in this PyTorch build.", lambda _k: fix.libuv_remedies())
_rendezvous = _signature_rule(F.RENDEZVOUS, "Rendezvous failed", _rendezvous_text, fix.rendezvous_remedies)


def _scheduler_stop(facts: Facts) -> Diagnosis | None:
    for cls, title in ((F.TIMEOUT, "Ran past its time limit"), (F.CANCELLED, "Cancelled by the scheduler")):
        hit = facts.first_hit(cls)
        if hit:
            remedies = fix.resume_remedy(facts.files.events) if cls == F.TIMEOUT else []
            return make_diagnosis(facts, cls, title, f"The batch scheduler stopped the job: {hit[1].text.strip()}",
                                  remedies, evidence=[hit[1].raw])
    return None


def _host_oom_likely(facts: Facts) -> Diagnosis | None:
    hits = facts.hits.get(F.HOST_OOM, [])
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
    peak_text = f" Its peak resident memory was {fmt_bytes(peak)}." if peak else ""
    text = (f"{cause}: the host ran out of RAM (not GPU memory).{peak_text} Dataloader workers and "
            "several jobs on one host each hold their own copy of data and model in RAM.")
    return make_diagnosis(facts, F.HOST_OOM, "Host out of memory (OOM killer)", text,
                          fix.host_oom_remedies(facts.files.config), evidence=evidence)


def _python_exception(facts: Facts) -> Diagnosis | None:
    exc = decisive_exception(tracebacks(facts.lines), facts.base.get("rank"))
    failed = facts.files.last_event(Failed)
    if exc is None and failed is None:
        return None
    kind = exc.type if exc else (failed.error_type if failed else None) or "Exception"
    message = exc.message if exc else (failed.message if failed else None) or ""
    where = ("The traceback in train.log shows where." if exc else "train.log holds no traceback for it; "
             "the trainer recorded it in events.jsonl.")
    first_line = message.split("\n", 1)[0]
    return make_diagnosis(facts, F.PYTHON_EXCEPTION, f"{kind.rsplit('.', 1)[-1]}: {first_line}",
                          f"The trainer raised {kind}: {message}. {where}",
                          numbers={"exception_type": kind, "exception_message": message},
                          evidence=list(exc.lines) if exc else [f"{kind}: {message}"],
                          rank=exc.rank if exc else None)


INTERRUPTS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _interrupted(facts: Facts) -> Diagnosis | None:
    """SIGTERM/SIGINT that LAT did not send (a cancel is decided earlier, from the journal's flag)."""
    exc = decisive_exception(tracebacks(facts.lines), facts.base.get("rank"))
    by_keyboard = exc is not None and exc.short_type == "KeyboardInterrupt"
    signum = facts.ending_signal()
    if not by_keyboard and signum not in INTERRUPTS:
        return None
    name = signal_name(signum) if signum in INTERRUPTS else "SIGINT"
    return make_diagnosis(facts, F.STOPPED_OUTSIDE, f"Stopped from outside ({name})",
                          f"The job was stopped by {name}, and LAT did not send it (no cancel is recorded): "
                          "a user (Ctrl-C, kill), a shutdown or another tool stopped it. Nothing in the job "
                          "itself failed.", fix.resume_remedy(facts.files.events),
                          evidence=list(exc.lines) if exc is not None and by_keyboard else _last_line(facts))


CRASHES: dict[int, str] = {
    signal.SIGSEGV: "a segmentation fault: native code touched memory it does not own",
    signal.SIGABRT: "an abort: native code failed a check or an assertion (or freed memory twice)",
    signal.SIGBUS: "a bus error: memory it had mapped (a file, shared memory) went away under it",
    signal.SIGILL: "an illegal instruction: a binary built for another CPU or GPU architecture",
    signal.SIGFPE: "an arithmetic fault in native code",
}


def _crashed(facts: Facts) -> Diagnosis | None:
    signum = facts.ending_signal()
    if signum not in CRASHES:
        return None
    name = signal_name(signum)
    trace = [line.raw for line in facts.lines if line.text.startswith("Fatal Python error")]
    workers = config_value(facts.files.config, "train.num_workers", 0) or 0
    shm = (" With DataLoader workers, /dev/shm running out is a common cause."
           if signum == signal.SIGBUS and workers else "")
    found = ("Python's fault handler printed the stack in train.log." if trace else
             "train.log holds no traceback: the crash was below Python.")
    remedies = fix.crash_remedies(facts.files.env, bool(trace))
    if shm:
        remedies = fix.shm_remedies(facts.files.config) + remedies
    return make_diagnosis(facts, F.CRASHED, f"Crashed ({name})", f"The job crashed with {name}, "
                          f"{CRASHES[signum]}.{shm} {found}", remedies, evidence=trace or _last_line(facts))


def _killed(facts: Facts) -> Diagnosis | None:
    signum = facts.ending_signal()
    if signum is None:
        return None
    name = signal_name(signum)
    why = ("Nothing shows the OOM killer did it, so a user, a scheduler or a watchdog sent it."
           if signum == signal.SIGKILL else "")
    return make_diagnosis(facts, F.KILLED, f"Killed by {name}", f"The job was ended by {name}. {why}".strip(),
                          evidence=_last_line(facts))


def _last_line(facts: Facts) -> list[str]:
    last = next((line.raw.strip() for line in reversed(facts.lines) if line.raw.strip()), "")
    return [last] if last else []


def _exit_code(facts: Facts) -> Diagnosis:
    if facts.returncode is None:
        return make_diagnosis(facts, F.EXIT_CODE, "Unknown exit", "No exit status was recorded and the log "
                              "shows no known failure.")
    return make_diagnosis(facts, F.EXIT_CODE, f"Exit code {facts.returncode}", f"The job exited with code "
                          f"{facts.returncode} and the log shows no known failure.", evidence=_last_line(facts))


RULES: tuple[Rule, ...] = (_ok, _cancelled_flag, _saved_to_resume, _timeout_flag, _host_oom_proven, _cuda_oom,
         known.cuda_library_oom, _device_fault, _nccl, _libuv, _rendezvous, _scheduler_stop, known.shm_exhausted, _host_oom_likely,
         known.no_gpu, known.triton, known.cuda_graphs, known.disk_full, known.hub_unreachable, known.tracker_login,
         known.generate_kwargs, known.reentrant_ckpt, known.nonfinite_loss, known.config_error,
         _interrupted, _crashed, _python_exception, _killed)

"""Log signatures of each failure class, and the parsers for tracebacks and torchrun summaries.

Signatures are anchored on the exact wording PyTorch, NCCL, torchrun and the kernel print, so a
dataset sample or a progress line that merely mentions "error" or "memory" does not match; and
classify only consults them for jobs that did not exit cleanly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypedDict

_RANK_PREFIX = re.compile(r"^\[(?:rank|default)(\d+)\]:\s?")


@dataclass(frozen=True)
class LogLine:
    """One log line with torchrun's ``[rankN]:`` prefix split off into ``rank``."""

    index: int
    rank: int | None
    text: str
    raw: str


@dataclass(frozen=True)
class Signature:
    cls: str
    kind: str
    pattern: re.Pattern[str]


def _sig(cls: str, kind: str, pattern: str) -> Signature:
    return Signature(cls, kind, re.compile(pattern))


SIGNATURES = (
    _sig("cuda_oom", "cuda_oom", r"(?:OutOfMemoryError|RuntimeError)\s*:\s*CUDA out of memory\. Tried to allocate"
                                 r"|^CUDA out of memory\. Tried to allocate"),
    _sig("device_fault", "illegal_memory_access", r"an illegal memory access was encountered"),
    _sig("device_fault", "device_assert", r"device-side assert triggered"),
    _sig("device_fault", "ecc", r"uncorrectable ECC error"),
    _sig("device_fault", "xid", r"\bNVRM: Xid\b|\bXid \(PCI:|GPU has fallen off the bus"),
    _sig("device_fault", "launch_failure", r"CUDA error: (?:unspecified launch failure|misaligned address"
                                           r"|an illegal instruction was encountered)"),
    _sig("nccl", "watchdog_timeout", r"Watchdog caught collective operation timeout"),
    _sig("nccl", "nccl_error", r"\bNCCL error in:|\bnccl(?:UnhandledCuda|System|Internal|Remote)Error\b"
                               r"|NCCL communicator was aborted|\bDistBackendError\b"),
    _sig("libuv", "libuv", r"\buse_libuv\b|libuv.*(?:[Ee]rror|fail|without|not (?:supported|available))"
                           r"|(?:[Ee]rror|fail).*\blibuv\b"),
    _sig("rendezvous", "rendezvous_timeout", r"\bRendezvousTimeoutError\b"),
    _sig("rendezvous", "rendezvous_error", r"\bRendezvous(?:Closed|Connection|State)?Error\b"
                                           r"|torch\.distributed\.elastic\.rendezvous\.\w+\.\w*(?:Error|Exception)"),
    _sig("rendezvous", "port_in_use", r"(?:DistNetworkError|TCPStore|server socket).*"
                                      r"(?:address already in use|EADDRINUSE|failed to listen)"),
    _sig("host_oom", "killed_line", r"^Killed\s*$|^.*line \d+:\s+\d+ Killed\b"),
    _sig("host_oom", "dataloader_killed", r"DataLoader worker \(pid[^)]*\) is killed by signal: Killed"),
    _sig("host_oom", "kernel_oom", r"Out of memory: Kill(?:ed)? process|\boom-kill:|\boom_reaper\b"),
    _sig("timeout", "time_limit", r"CANCELLED AT .* DUE TO TIME LIMIT"),
    # The groups below each feed one rule in known.py.
    _sig("cuda_lib_oom", "cublas_alloc", r"CUBLAS_STATUS_ALLOC_FAILED"),
    _sig("cuda_lib_oom", "cudnn_workspace", r"CUDNN_STATUS_NOT_ENOUGH_WORKSPACE"),
    _sig("cuda_lib_oom", "cudnn_alloc", r"CUDNN_STATUS_ALLOC_FAILED"),
    _sig("shm", "worker_bus_error", r"DataLoader worker \(pid[^)]*\) is killed by signal: Bus error"
                                    r"|Unexpected bus error encountered in worker"),
    _sig("shm", "shm_file_full", r"unable to write to file </torch_[\d_]+>"),
    _sig("no_gpu", "no_device", r"No CUDA GPUs are available|no CUDA-capable device is detected"),
    _sig("no_gpu", "invalid_ordinal", r"invalid device ordinal"),
    _sig("no_gpu", "no_driver", r"Found no NVIDIA driver on your system|CUDA driver initialization failed"),
    _sig("no_gpu", "cpu_build", r"Torch not compiled with CUDA enabled"),
    _sig("triton", "out_of_resources", r"\bOutOfResources: out of resource:|^out of resource: shared memory"),
    _sig("triton", "compile_error", r"triton\.compiler\.errors\.\w+Error:|\bPassManager::run failed"),
    # CUDA's and PyTorch's words for work a captured graph cannot hold (a host sync, the default stream)
    _sig("cuda_graphs", "capture", r"operation not permitted when stream is capturing"
                                   r"|operation failed due to a previous error during capture"
                                   r"|depend on a capturing blocking stream|during CUDA graph capture"
                                   r"|captured on a non-default stream|\bcudaErrorStreamCapture\w+"),
    _sig("disk_full", "enospc", r"No space left on device|\[Errno 28\]|PytorchStreamWriter failed writing file"),
    _sig("hub", "offline", r"We couldn't connect to '[^']*' to load|\bLocalEntryNotFoundError:"
                           r"|\bOfflineModeIsEnabled:|Couldn't reach '[^']+' on the Hub"
                           r"|cannot fetch \S+ \S+ from the hub"),
    _sig("hub", "timeout", r"(?:ReadTimeout|ConnectTimeout|TimeoutException)\b.*"
                           r"(?:huggingface\.co|hf\.co|hf-mirror)"),
    _sig("hub", "connection", r"(?:ConnectionError|ConnectError|MaxRetryError|NameResolutionError)\b.*"
                              r"(?:huggingface\.co|hf\.co|hf-mirror)"),
    _sig("tracker", "wandb", r"api_key not configured \(no-tty\)\. call wandb|wandb\.errors\.(?:errors\.)?"
                             r"AuthenticationError:"),
    _sig("tracker", "swanlab", r"(?i:api key not configured \(no-tty\), call `swanlab)"
                               r"|^\w*Error: Cannot prompt for API Key in no-tty environment"
                               r"|swanlab\.(?:exceptions|error)\.(?:AuthenticationError|KeyFileError):"),
    _sig("generate_kwargs", "unexpected_keyword", r"generate\(\) got an unexpected keyword argument '\w+'"),
    _sig("generate_kwargs", "unused_model_kwargs", r"The following `model_kwargs` are not used by the model"),
    _sig("no_grad", "no_grad_fn", r"element 0 of tensors does not require grad and does not have a grad_fn"),
    _sig("reentrant_warning", "reentrant_no_grad",
         r"None of the inputs have requires_grad=True\. Gradients will be None"),
    _sig("nonfinite", "nonfinite_loss", r"^(?:FloatingPointError: )?loss is -?(?:nan|inf) at step \d+"),
    _sig("trainer_error", "config", r"^(?:[\w.\-]+: )?error: "),
    _sig("cancelled", "scheduler_cancel", r"\*\*\* (?:JOB|STEP) [\w.]+ ON \S+ CANCELLED AT (?!.*TIME LIMIT)"),
)


def split_lines(lines: Iterable[str]) -> list[LogLine]:
    out = []
    for index, raw in enumerate(lines):
        match = _RANK_PREFIX.match(raw)
        rank = int(match.group(1)) if match else None
        out.append(LogLine(index, rank, raw[match.end():] if match else raw, raw))
    return out


def signature_hits(lines: list[LogLine]) -> dict[str, list[tuple[Signature, LogLine]]]:
    """Every signature match, grouped by class, in log order."""
    hits: dict[str, list[tuple[Signature, LogLine]]] = {}
    for line in lines:
        for signature in SIGNATURES:
            if signature.pattern.search(line.text):
                hits.setdefault(signature.cls, []).append((signature, line))
    return hits


# ---------------------------------------------------------------- tracebacks
_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
_WRAPPER_TYPES = ("ChildFailedError",)


@dataclass(frozen=True)
class PyException:
    type: str
    message: str
    rank: int | None
    lines: tuple[str, ...]

    @property
    def short_type(self) -> str:
        return self.type.rsplit(".", 1)[-1]


def tracebacks(lines: list[LogLine]) -> list[PyException]:
    """Each ``Traceback`` block with the exception line that ends it (one rank's lines at a time)."""
    found: list[PyException] = []
    for line in lines:
        if line.text.strip() == _TRACEBACK:
            exc = _exception_after(lines, line)
            if exc is not None:
                found.append(exc)
    return found


def _exception_after(lines: list[LogLine], header: LogLine) -> PyException | None:
    """The first un-indented line after the frames of ``header``'s traceback, from the same rank."""
    for line in lines[header.index + 1: header.index + 400]:
        if line.rank != header.rank or not line.text.strip() or line.text[:1].isspace():
            continue
        match = _EXCEPTION_LINE.match(line.text.rstrip())
        if match is None or line.text.startswith(_TRACEBACK):
            return None
        message = "\n".join([(match.group(2) or "").strip(), *_message_continues(lines, line)]).strip()
        return PyException(match.group(1), message, header.rank, (header.raw, line.raw))
    return None


_MESSAGE_ENDS = ("Traceback (most recent call last):", "During handling of the above exception",
                 "The above exception was the direct cause")
MAX_MESSAGE_LINES = 40


def _message_continues(lines: list[LogLine], exception: LogLine) -> list[str]:
    """The lines a multi-line message goes on with (transformers' OSError, CUDA's hints), up to the
    blank line or the next chained traceback that ends it."""
    more: list[str] = []
    for line in lines[exception.index + 1: exception.index + 1 + MAX_MESSAGE_LINES]:
        if line.rank != exception.rank:
            continue
        if not line.text.strip() or line.text.startswith(_MESSAGE_ENDS):
            break
        more.append(line.text.rstrip())
    return more


def decisive_exception(found: list[PyException], rank: int | None) -> PyException | None:
    """The failing rank's last exception; torchrun's own ChildFailedError only when nothing else."""
    real = [e for e in found if e.short_type not in _WRAPPER_TYPES]
    same_rank = [e for e in real if rank is not None and e.rank == rank]
    for group in (same_rank, real, found):
        if group:
            return group[-1]
    return None


# ---------------------------------------------------------------- torchrun summary
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\)")
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_ROOT_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")


class RootCause(TypedDict, total=False):
    """What torchrun's failure summary names: the failing rank and its exit code (-9: SIGKILL)."""

    rank: int
    rank_exitcode: int


def root_cause(lines: list[LogLine]) -> RootCause:
    """``{"rank": 1, "rank_exitcode": -9}`` from torchrun's failure summary, when it printed one."""
    starts = [line.index for line in lines if _ROOT_CAUSE.search(line.text)]
    if not starts:
        return {}
    found: RootCause = {}
    for line in lines[starts[-1] + 1: starts[-1] + 12]:
        rank, exitcode = _ROOT_RANK.match(line.text), _ROOT_EXIT.match(line.text)
        if rank and "rank" not in found:
            found["rank"] = int(rank.group(1))
        if exitcode and "rank_exitcode" not in found:
            found["rank_exitcode"] = int(exitcode.group(1))
    return found


_WATCHDOG = re.compile(r"OpType=(\w+).*?Timeout\(ms\)=(\d+)\).*?ran for (\d+) milliseconds")


def watchdog_numbers(text: str) -> dict[str, str | int]:
    """Collective, timeout and elapsed time from NCCL's watchdog line."""
    match = _WATCHDOG.search(text)
    if not match:
        return {}
    return {"collective": match.group(1), "timeout_ms": int(match.group(2)), "ran_ms": int(match.group(3))}

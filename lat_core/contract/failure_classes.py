"""The one list of failure classes, and what each means for the code that branches on it.

Values are the strings journals have always stored, so old rows still read. Every member has a row
in ``CLASS_INFO`` (a test checks it, and checks the README's table of classes against it), so code
that asks "is this an OOM?" or "does the class name the cause?" asks the table, never a string list.
Triage produces them; a job's diagnosis carries one through the journal, so they live in the contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FailureClass(StrEnum):
    OK = "ok"
    CUDA_OOM = "cuda_oom"
    HOST_OOM = "host_oom"
    SHM_EXHAUSTED = "shm_exhausted"
    NO_GPU = "no_gpu"
    DEVICE_FAULT = "device_fault"
    TRITON = "triton"
    CUDA_GRAPHS = "cuda_graphs"
    NCCL = "nccl"
    RENDEZVOUS = "rendezvous"
    LIBUV = "libuv"
    HUB_UNREACHABLE = "hub_unreachable"
    TRACKER_LOGIN = "tracker_login"
    GENERATE_KWARGS = "generate_kwargs"
    REENTRANT_CKPT = "reentrant_ckpt"
    NONFINITE_LOSS = "nonfinite_loss"
    DISK_FULL = "disk_full"
    CONFIG_ERROR = "config_error"
    PYTHON_EXCEPTION = "python_exception"
    CRASHED = "crashed"
    CANCELLED = "cancelled"
    STOPPED_OUTSIDE = "stopped_outside"
    TIMEOUT = "timeout"
    KILLED = "killed"
    NODE_FAIL = "node_fail"
    PREEMPTED = "preempted"
    EXIT_CODE = "exit_code"

    @classmethod
    def parse(cls, value: object) -> FailureClass | None:
        """The member for a journal's stored string; None for a missing or unknown one."""
        if not isinstance(value, str):
            return None
        try:
            return cls(value)
        except ValueError:
            return None

    @property
    def info(self) -> ClassInfo:
        return CLASS_INFO[self]


@dataclass(frozen=True)
class ClassInfo:
    """``oom``: OOM notices and the plan's ``on_oom`` retries apply. ``names_cause``: the diagnosis
    already says what went wrong, so the job row needs no log line after it. ``systemic``: it hits
    every job of a run alike (the machine, the network, the install, a shared config or dataset),
    so when a run's first jobs all fail with it, the circuit breaker (lat_core.engine.breaker)
    pauses the run instead of failing the rest one by one."""

    meaning: str
    oom: bool = False
    names_cause: bool = False
    systemic: bool = False


F = FailureClass
CLASS_INFO: dict[FailureClass, ClassInfo] = {
    F.OK: ClassInfo("the job exited cleanly"),
    F.CUDA_OOM: ClassInfo("the GPU ran out of memory (PyTorch's allocator, or cuBLAS/cuDNN failing to "
                          "allocate their workspace)", oom=True, names_cause=True),
    F.HOST_OOM: ClassInfo("the host ran out of RAM and the kernel's OOM killer ended the job",
                          oom=True, names_cause=True),
    F.SHM_EXHAUSTED: ClassInfo("DataLoader workers filled /dev/shm (bus error in a worker)", names_cause=True),
    F.NO_GPU: ClassInfo("the job saw no usable GPU (no driver, a CPU build of torch, a wrong "
                        "CUDA_VISIBLE_DEVICES)", names_cause=True, systemic=True),
    F.DEVICE_FAULT: ClassInfo("a CUDA kernel or the GPU itself faulted (illegal access, device assert, "
                              "ECC, Xid)"),
    F.TRITON: ClassInfo("a Triton kernel failed to compile or needs more shared memory than the GPU has",
                        names_cause=True),
    F.CUDA_GRAPHS: ClassInfo("capturing the training step as CUDA graphs failed (train.graphs: auto, the "
                             "default)", names_cause=True),
    F.NCCL: ClassInfo("NCCL failed or timed out between GPUs"),
    F.RENDEZVOUS: ClassInfo("the ranks of a distributed job never met"),
    F.LIBUV: ClassInfo("the libuv TCPStore failed"),
    F.HUB_UNREACHABLE: ClassInfo("the Hugging Face hub was unreachable and no local copy was found",
                                 names_cause=True, systemic=True),
    F.TRACKER_LOGIN: ClassInfo("W&B or SwanLab wanted a login the job could not give", names_cause=True,
                               systemic=True),
    F.GENERATE_KWARGS: ClassInfo("`.generate()` got a keyword the installed transformers lacks",
                                 names_cause=True, systemic=True),
    F.REENTRANT_CKPT: ClassInfo("reentrant gradient checkpointing over a frozen base: the loss had no "
                                "grad_fn", names_cause=True),
    F.NONFINITE_LOSS: ClassInfo("the loss became NaN or infinite", names_cause=True),
    F.DISK_FULL: ClassInfo("the disk filled up (errno 28) while the job wrote to it", names_cause=True),
    F.CONFIG_ERROR: ClassInfo("the trainer refused its configuration before training (exit 2), e.g. "
                              "--resume with no checkpoint", names_cause=True, systemic=True),
    # an ImportError (a broken install) lands here: systemic, so the breaker's pause asks a person
    F.PYTHON_EXCEPTION: ClassInfo("the trainer raised an exception no other class explains", names_cause=True,
                                  systemic=True),
    F.CRASHED: ClassInfo("native code crashed: a fatal signal (SIGSEGV, SIGABRT, SIGBUS, ...)"),
    F.CANCELLED: ClassInfo("LAT or the batch scheduler cancelled the job on request"),
    F.STOPPED_OUTSIDE: ClassInfo("SIGTERM or SIGINT from outside LAT (a user, a shutdown)"),
    F.TIMEOUT: ClassInfo("the job ran past its time limit"),
    F.KILLED: ClassInfo("SIGKILL with no sign of the OOM killer"),
    F.NODE_FAIL: ClassInfo("its Slurm node failed"),
    F.PREEMPTED: ClassInfo("a higher-priority Slurm job preempted it"),
    F.EXIT_CODE: ClassInfo("a non-zero exit with no known failure in the log"),
}

OOM_CLASSES = frozenset(c for c in FailureClass if c.info.oom)
SYSTEMIC_CLASSES = frozenset(c for c in FailureClass if c.info.systemic)

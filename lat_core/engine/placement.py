"""Where a job goes: one slot on one device, or ``world`` slots at once for a multi-process job.

A job with ``gpus_per_job: N`` is gang-scheduled: N GPUs that each have a free slot, all taken at
the same moment (never a partial allocation that could deadlock another job), or N slots of the CPU
device. It then runs under torchrun with a rendezvous port found by probing.
"""

from __future__ import annotations

import socket
import sys

from lat_core.contract.devices import CLUSTER_ID, Device
from lat_core.contract.rows import JobRow
from lat_core.contract.states import JobState

PORT_TRIES = 10
TORCHRUN = "lat_core.train.torchrun"  # torchrun (torch.distributed.run) that passes SIGUSR1 on to its workers
SRUN_WAIT_S = 120  # once one node's torchrun has ended, the other nodes' may take this long to end too


def slots_used(jobs: list[JobRow]) -> dict[str, int]:
    """device id -> slots taken by running jobs (a 2-GPU job takes one slot on each of its GPUs).

    Pass every active run's jobs on this host: a device is one ledger per state directory, so two
    runs on a 1-slot device never run two trainers at once."""
    busy: dict[str, int] = {}
    for job in jobs:
        if job.state is not JobState.RUNNING or not job.device:
            continue
        parts = job.device.split("+")
        for part in parts:
            busy[part] = busy.get(part, 0) + slots_taken(job.world, part, len(parts))
    return busy


def slots_taken(world: int, device_id: str, n_devices: int) -> int:
    """Slots a job of ``world`` processes takes on one of its ``n_devices``: its whole world on one
    device (the CPU), one on each of several GPUs, one of a cluster's (a job in Slurm's queue)."""
    return world if n_devices == 1 and device_id != CLUSTER_ID else 1


def free_slots(devices: list[Device], busy: dict[str, int]) -> list[tuple[int, Device]]:
    """(free slots, device), the freest first; plan order breaks ties."""
    free = [(d.slots - busy.get(d.id, 0), i, d) for i, d in enumerate(devices)]
    return [(n, d) for n, _, d in sorted(free, key=lambda t: (-t[0], t[1])) if n > 0]


def placements(job: JobRow, devices: list[Device], busy: dict[str, int]) -> list[list[Device]]:
    """Candidate device sets for ``job``, best first; empty when it cannot start now. Devices a
    remedy excluded for this job (``avoid_devices``) are never candidates."""
    free = free_slots([d for d in devices if d.id not in job.avoid_devices], busy)
    if job.world == 1:
        return [[d] for _, d in free]
    whole = [d for n, d in free if d.is_cluster or (d.is_cpu and n >= job.world)]
    if whole:  # the job's processes on one device: the CPU, or a node the cluster picks
        return [whole[:1]]
    gpus = [d for _, d in free if not d.is_cpu]
    return [gpus[: job.world]] if len(gpus) >= job.world else []


def merge(devices: list[Device]) -> Device:
    """One pseudo-device for a multi-GPU job: ids joined with '+', all GPUs visible to it."""
    if len(devices) == 1:
        return devices[0]
    visible = ",".join(d.env["CUDA_VISIBLE_DEVICES"] for d in devices)
    ids = "+".join(d.id for d in devices)
    return Device(ids, ids, 1, {"CUDA_VISIBLE_DEVICES": visible, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})


def find_free_port(tries: int = PORT_TRIES, start: int | None = None) -> tuple[int, int]:
    """(port, attempts): the first port from ``start`` that binds on localhost, probing up to ``tries``;
    without ``start``, one the kernel picks from its ephemeral range. That is the engine's choice:
    two engines (or a user's own torchrun on the default 29500) probing the same range at once
    could both find one port free and clash. Raises OSError naming the range when none is free."""
    if start is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1], 1
    for attempt in range(tries):
        port = start + attempt
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
                return port, attempt + 1
            except OSError:
                continue
    raise OSError(f"no free rendezvous port in {start}-{start + tries - 1} after {tries} tries")


def distributed_argv(argv: list[str], world: int, port: int) -> list[str]:
    """``python -m lat_core.train ...`` -> the same under torchrun with ``world`` local processes."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={world}",
            "--master_addr=127.0.0.1", f"--master_port={port}", *_module_argv(argv)]


def standalone_argv(argv: list[str], world: int) -> list[str]:
    """The same under ``torchrun --standalone`` on whatever node the job lands: torchrun picks a
    free port there, so a host that is not the job's never decides it. Through LAT's torchrun
    (:mod:`lat_core.train.torchrun`), which passes a scheduler's save-before-the-end signal on to
    the workers and says when they saved to be resumed."""
    return [sys.executable, "-m", TORCHRUN, "--standalone", "--nnodes=1", f"--nproc_per_node={world}",
            *_module_argv(argv)]


def multinode_argv(argv: list[str], world: int, nodes: int) -> list[str]:
    """The same on ``nodes`` nodes of a Slurm allocation: ``srun`` starts one torchrun a node (one
    task a node), each with ``world // nodes`` processes, meeting at a c10d rendezvous whose endpoint
    the batch script exports (``PET_RDZV_ENDPOINT``, the first node and a port free there: torchrun
    reads each option it was not given from ``PET_<OPTION>``). ``--kill-on-bad-exit=0``: a node whose
    workers saved and exited 75 first must not get the others killed mid-exit (srun's exit is then
    the highest of the tasks'); ``--wait``: once one node's torchrun has ended, the others have that
    long, so a crash on one node does not leave the others waiting for a collective until NCCL's
    timeout."""
    return ["srun", "--kill-on-bad-exit=0", f"--wait={SRUN_WAIT_S}", sys.executable, "-m", TORCHRUN,
            f"--nnodes={nodes}", f"--nproc_per_node={world // nodes}", "--rdzv_backend=c10d", *_module_argv(argv)]


def _module_argv(argv: list[str]) -> list[str]:
    """``-m MODULE ARGS...`` of ``python -m MODULE ARGS...``, what torchrun runs in each process."""
    if "-m" not in argv:
        raise ValueError("multi-process jobs must run a module (python -m ...)")
    return argv[argv.index("-m"):]


def distributed_env(world: int, port: int | None, use_libuv: bool) -> dict[str, str]:
    """``port`` None: torchrun --standalone chooses the address and port on the job's node."""
    env = {"WORLD_SIZE": str(world)}
    if port is not None:
        env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    if not use_libuv:  # the seeds' workaround for TCPStore/libuv rendezvous failures
        env.update({"USE_LIBUV": "0", "TORCHELASTIC_USE_AGENT_STORE": "0"})
    return env

"""``python -m lat_core.train.torchrun ARGS``: torchrun (``torch.distributed.run``, same arguments)
for a job that a scheduler may ask to save before its end.

- **SIGUSR1 reaches the workers.** Slurm's warning before a time limit (``--signal=B:USR1@N``) comes
  to the batch shell, whose runner passes it to its child: this process, directly or through
  ``srun`` (one of these a node). torchrun's agent would die of it (USR1's default action) and
  leave its workers running to the hard kill; here it goes on to every worker of this node (one
  that is still starting, once its trainer can take it), whose trainers then agree on a step, save
  there and exit :data:`EXIT_SAVED_TO_RESUME` (:mod:`lat_core.train.save_on_signal`).
- **That ending is passed on.** torchrun calls any worker's non-zero exit a failure of the job (its
  own exit 1); when a worker exited ``EXIT_SAVED_TO_RESUME``, this exits that too, so the engine
  resumes the job instead of judging it. A worker exits so only after the checkpoint is written and
  every rank passed the barrier behind it: the workers that torchrun then stops were past it too.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time

from .save_request import EXIT_SAVED_TO_RESUME


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGUSR1, PassOn())  # before torch loads: the warning may come meanwhile
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    try:
        torchrun(sys.argv[1:] if argv is None else argv)
    except ChildFailedError as exc:
        if not saved_to_resume({rank: failure.exitcode for rank, failure in exc.failures.items()}):
            raise  # torchrun's own report (its failure summary), read by triage
        print(f"[lat] torchrun on {socket.gethostname()}: the workers saved to be resumed; "
              f"exit {EXIT_SAVED_TO_RESUME}", file=sys.stderr, flush=True)
        return EXIT_SAVED_TO_RESUME
    return 0


def saved_to_resume(exit_codes: dict[int, int]) -> bool:
    """Whether a worker saved to be resumed (``exit_codes``: global rank -> exit code of the workers
    torchrun calls failed). One exit says it for all: a worker exits so only once every rank passed
    the barrier behind the checkpoint, and torchrun then stops the others (SIGTERM, listed too)."""
    return EXIT_SAVED_TO_RESUME in exit_codes.values()


class PassOn:
    """Passes a signal on to this agent's workers (its children), each once, as soon as it has its
    handler in place: a worker still starting (or not started yet: the rendezvous may be under way)
    would die of it, or never hear of it. After the first signal, a thread looks every
    ``every_s`` for workers that can take it."""

    def __init__(self, every_s: float = 0.5):
        self._every_s = every_s
        self._signum: int | None = None
        self._told: set[int] = set()

    def __call__(self, signum: int, _frame: object) -> None:
        if self._signum is None:
            self._signum = signum
            threading.Thread(target=self._keep_passing, name="lat-pass-on", daemon=True).start()

    def _keep_passing(self) -> None:
        while True:
            self.pass_on()
            time.sleep(self._every_s)

    def pass_on(self) -> None:
        import psutil

        assert self._signum is not None
        for worker in psutil.Process().children():
            if worker.pid in self._told or not catches(worker.pid, self._signum):
                continue
            try:
                os.kill(worker.pid, self._signum)
            except ProcessLookupError:
                continue  # ended meanwhile: torchrun reaps it
            self._told.add(worker.pid)
            print(f"[lat] torchrun on {socket.gethostname()}: {signal.Signals(self._signum).name} passed on to "
                  f"worker {worker.pid}", file=sys.stderr, flush=True)


def catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler for the signal (``SigCgt`` of its /proc status)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            caught = next(line for line in fh if line.startswith("SigCgt:")).split()[1]
    except (OSError, StopIteration):
        return False
    return bool(int(caught, 16) >> (signum - 1) & 1)


if __name__ == "__main__":
    sys.exit(main())

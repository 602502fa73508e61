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

import signal
import socket
import sys

from lat_core.signal_pass import PassOn

from .save_request import EXIT_SAVED_TO_RESUME


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGUSR1, PassOn(_workers, said=_said))  # before torch loads: the warning may come meanwhile
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


def _workers() -> list[int]:
    import psutil

    return [worker.pid for worker in psutil.Process().children()]


def _said(pid: int, signum: int) -> None:
    print(f"[lat] torchrun on {socket.gethostname()}: {signal.Signals(signum).name} passed on to worker {pid}",
          file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())

"""``python -m lat_core.train.torchrun ARGS``: torchrun (``torch.distributed.run``, same arguments)
for a job that a scheduler may ask to save before its end.

- **SIGUSR1 reaches the workers.** Slurm's warning before a time limit (``--signal=B:USR1@N``) comes
  to the batch shell, whose runner passes it to its child: this process, directly or through
  ``srun`` (one of these a node). torchrun's agent would die of it (USR1's default action) and
  leave its workers running to the hard kill; here it goes on to every worker of this node, whose
  trainers then agree on a step, save there and exit :data:`EXIT_SAVED_TO_RESUME`
  (:mod:`lat_core.train.save_on_signal`).
- **That ending is passed on.** torchrun calls any worker's non-zero exit a failure of the job (its
  own exit 1); when the workers it saw fail all exited ``EXIT_SAVED_TO_RESUME``, this exits that
  too, so the engine resumes the job instead of judging it. A worker exits so only after the
  checkpoint is written and every rank passed the barrier behind it; workers that torchrun then
  stopped were past it as well.
"""

from __future__ import annotations

import os
import signal
import socket
import sys

from .save_request import EXIT_SAVED_TO_RESUME


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGUSR1, _pass_on_to_workers)  # before torch loads: the warning may come meanwhile
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
    """Whether the failed workers (global rank -> exit code, as torchrun saw them) all saved to be
    resumed."""
    return bool(exit_codes) and all(code == EXIT_SAVED_TO_RESUME for code in exit_codes.values())


def _pass_on_to_workers(signum: int, _frame: object) -> None:
    """SIGUSR1 to this agent's workers (its children). One that comes before they started is lost:
    the job then runs to its time limit, as a job never warned."""
    import psutil

    workers = psutil.Process().children()
    for worker in workers:
        try:
            os.kill(worker.pid, signum)
        except ProcessLookupError:
            pass  # ended meanwhile: torchrun reaps it
    print(f"[lat] torchrun on {socket.gethostname()}: {signal.Signals(signum).name} passed on to "
          f"{len(workers)} worker(s)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())

"""What every ``lat-tui`` verb shares: the ``--state-dir``/``--run`` flags, the client, and how
errors and closed pipes end a command."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from typing import Callable

from lat_core.front.client import Client, NoRunError
from lat_core.errors import LatError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_DETACHED = 0, 1, 2, 130


def state_flags(*, run: bool = True) -> argparse.ArgumentParser:
    """A parent parser: ``--state-dir`` and (for verbs about a run) ``--run``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state-dir", metavar="DIR",
                        help="journal and engine state (default: $LAT_STATE_DIR or ~/.local/state/lat)")
    if run:
        common.add_argument("--run", type=int, dest="run_id", metavar="N", help="run id (default: the latest run)")
    return common


def client_for(args) -> Client:
    return Client(getattr(args, "state_dir", None), existing=True)


def cli_entry(prog: str) -> Callable:
    """Wrap a verb's ``main(argv) -> int``: a LatError is one line on stderr and exit 2 (1 when the
    state directory has no run yet); a reader that went away (``| head``) ends the command quietly."""

    def wrap(fn: Callable[[list[str]], int]) -> Callable[[list[str]], int]:
        @functools.wraps(fn)
        def run(argv: list[str]) -> int:
            try:
                return fn(argv)
            except LatError as exc:
                print(f"{prog}: {exc.title}: {exc}", file=sys.stderr)
                return EXIT_FAILED if isinstance(exc, NoRunError) else EXIT_USAGE
            except BrokenPipeError:
                return quiet_broken_pipe()

        return run

    return wrap


def quiet_broken_pipe() -> int:
    """The reader of stdout left (``lat-tui status | head -1``): point stdout at /dev/null so the
    interpreter's final flush does not complain, and end as a SIGPIPE would (141)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 128 + 13

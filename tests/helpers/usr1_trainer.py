"""A stand-in trainer for the warm runner's warning test (``python -m tests.helpers.usr1_trainer PIDFILE``,
run in the forked trainer by lat_core.train.warm): it writes its pid, then waits for Slurm's warning
through lat_core.train.save_request's handler, inherited as a warm pack's member inherits it. Exit
75 (saved to be resumed) once asked, 1 if never asked within the hang limit."""
import os
import sys
import time
from pathlib import Path

from lat_core.train import save_request
from tests.helpers.waits import HANG_S

Path(sys.argv[1]).write_text(str(os.getpid()))
deadline = time.monotonic() + HANG_S
while not save_request.requested() and time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(save_request.EXIT_SAVED_TO_RESUME if save_request.requested() else 1)

"""Slurm's warning before a time limit (SIGUSR1) may come up to a minute early: on a short limit,
while the trainer is still starting. The runner keeps it and passes it on once the trainer takes
it (a handler, or the signal blocked to be waited for, as srun does), so the trainer saves to be resumed instead of dying of USR1's default action."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lat_core.contract.jobdir import AttemptFiles
from lat_core.signal_pass import PassOn, takes
from tests.helpers.waits import HANG_S, wait_until

# a trainer that takes a while to put its handler in place (its imports), then saves when asked; its
# words are joined when it runs, so that the runner's echo of its command does not hold them
SLOW_TO_LISTEN = """
import os, signal, sys, time
time.sleep(float(sys.argv[1]))
signal.signal(signal.SIGUSR1, lambda *_: (print("asked " + "to save", flush=True), os._exit(75)))
print("listen" + "ing", flush=True)
time.sleep(120)
sys.exit(3)
"""


def start_runner(tmp_path: Path, listen_after_s: float) -> tuple[subprocess.Popen, Path, Path]:
    exit_file, log = tmp_path / ".lat" / "attempt-1.exit.json", tmp_path / "train.log"
    exit_file.parent.mkdir()
    with open(log, "w") as out:
        runner = subprocess.Popen([sys.executable, "-m", "lat_core.runner", "--exit-file", str(exit_file), "--",
                                   sys.executable, "-c", SLOW_TO_LISTEN, str(listen_after_s)],
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                  env={**os.environ, "LAT_CONTAINMENT": "subreaper"})
    return runner, exit_file, log


def test_a_warning_that_comes_while_the_trainer_starts_reaches_it_once_it_listens(tmp_path):
    runner, exit_file, log = start_runner(tmp_path, listen_after_s=2.0)
    try:
        wait_until(lambda: runner.poll() is not None or (takes(runner.pid, signal.SIGUSR1)
                                                         and AttemptFiles(exit_file).read_pid() is not None),
                   "the runner to catch SIGUSR1 and start the trainer")
        assert runner.poll() is None and "listening" not in log.read_text(), log.read_text()
        runner.send_signal(signal.SIGUSR1)
        runner.wait(timeout=HANG_S)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
    record = AttemptFiles(exit_file).read_exit()
    text = log.read_text()
    assert record is not None and record.returncode == 75, text
    assert "listening" in text and "asked to save" in text
    assert "[lat] SIGUSR1 passed on to the trainer" in text


def stop(proc: subprocess.Popen, pass_on: PassOn) -> None:
    """The end of a test: its pass-on thread, which outlives the test, never looks at a pid again
    (a reused one could be another test's trainer), then the process gone."""
    pass_on.retarget(lambda: [])
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_a_warning_before_the_trainer_started_is_kept_for_it(tmp_path):
    """The signal reaches the runner before it has a child: the child hears of it once it listens."""
    told: list[int] = []
    pass_on = PassOn(lambda: [], every_s=0.05, said=lambda pid, _signum: told.append(pid))
    pass_on(signal.SIGUSR1)
    proc = subprocess.Popen([sys.executable, "-c", SLOW_TO_LISTEN, "0.5"], stdout=subprocess.PIPE, text=True)
    try:
        pass_on.retarget(lambda: [proc.pid])
        assert proc.wait(timeout=HANG_S) == 75
    finally:
        stop(proc, pass_on)
    assert told == [proc.pid] and "asked to save" in proc.stdout.read()


def test_a_target_that_never_listens_is_never_signalled():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pass_on = PassOn(lambda: [proc.pid], every_s=0.05)
    try:
        pass_on(signal.SIGUSR1)
        time.sleep(0.5)
        assert proc.poll() is None and pass_on.told == set()
    finally:
        stop(proc, pass_on)


def test_a_target_that_blocks_the_signal_to_wait_for_it_is_told_at_once():
    """srun blocks SIGUSR1 and waits for it in a thread of its own (no handler): it takes it.
    (While a thread waits in sigwait, the kernel shows the signal unblocked for that thread: what
    tells is the main thread's mask, as srun's.)"""
    waits = ("import os, signal, threading, time; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1}); "
             "threading.Thread(target=lambda: (signal.sigwait({signal.SIGUSR1}), os._exit(75))).start(); "
             "print('blocked', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", waits], stdout=subprocess.PIPE, text=True)
    pass_on = PassOn(lambda: [proc.pid], every_s=0.05)
    try:
        assert proc.stdout.readline().strip() == "blocked"
        pass_on(signal.SIGUSR1)
        assert proc.wait(timeout=HANG_S) == 75 and pass_on.told == {proc.pid}
    finally:
        stop(proc, pass_on)

"""What the TUI costs while it watches: first frame, idle CPU while attached, log pane throughput.

    python bench/bench_tui_idle.py [--seconds 60] [--jobs 32] [--gpus 8] [--log-rate 10000]

Each measurement runs the real ``lat_tui`` app in its own process inside a tmux pane (160x48: a
real terminal, so drawing and writing the screen count), on a journal with one running run of
``--jobs`` jobs (a quarter of them running) and a fake NVML with ``--gpus`` GPUs, polling at the
dashboard's 1 Hz. No engine runs: the numbers are the front end's alone.

- first frame: process start (interpreter, imports) to the first painted frame, and to the first
  frame with the job table filled, with the CPU time the process had used by then (the wall time
  on a shared machine is mostly the other load's); median of ``--repeats`` cold processes.
- attached CPU: the app process's CPU time (user + system, from psutil) over ``--seconds`` after a
  5 s settle, as a percent of one core.
- log pane: a writer appends ``--log-rate`` lines/s to the selected job's train.log for
  ``--log-seconds``; the app samples, once a second, how many bytes it is behind the file; it keeps
  up when the lag is back to 0 within two polls of the writer stopping.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
SETTLE_S = 5.0
# a tmux server of our own, killed at the end; a new session right after the last one ended can
# find the server exiting ("server exited unexpectedly"): it is tried again
TMUX = ["tmux", "-L", f"lat-bench-{os.getpid()}"]


# ---------------------------------------------------------------- the journal the app watches

def make_state(root: Path, jobs: int) -> Path:
    from lat_core.front.service import open_store

    state = root / "state"
    store = open_store(state)
    run_id = store.create_run("suites: [{name: demo, rounds: all}]\n", str(root / "out"),
                              [{"id": f"gpu{i}", "label": f"gpu{i}", "slots": 4, "env": {}} for i in range(8)],
                              time.time())
    records = []
    for n in range(jobs):
        key = f"tiny-sst2_seed{n}/gla_lora_r8"
        (root / "out" / key).mkdir(parents=True)
        (root / "out" / key / "job.yaml").write_text("model: {family: gla}\n")
        records.append({"key": key, "suite": "demo", "round": 1, "stem": "gla_lora_r8", "seed": n,
                        "dataset": "tiny-sst2", "job_dir": str(root / "out" / key), "argv": [], "env": {}})
    ids = store.add_jobs(run_id, records)
    for n, job_id in enumerate(ids[: max(1, jobs // 4)]):
        store.set_job_state(job_id, "running", device=f"gpu{n % 8}", started=time.time(), attempts=1)
        store.set_progress(job_id, 100, 0.5)
        (root / "out" / records[n]["key"] / "train.log").write_text("step 100 loss 0.5\n")
    store.close()
    return state


# ---------------------------------------------------------------- the app, in the child process

def child(mode: str, state: Path, out: Path, gpus: int, seconds: float) -> None:
    from lat_core.config.paths import config_trees
    from lat_core.config.suites import SuiteRegistry
    from lat_core.monitor.fake_nvml import FakeNvml
    from lat_core.monitor.gpu import GpuProbe
    from lat_tui.app import LatApp
    from lat_tui.screens.dashboard import DashboardScreen
    from lat_tui.widgets.job_table import JobTable

    result: dict = {}

    class BenchApp(LatApp):
        CSS_PATH = Path(sys.modules[LatApp.__module__].__file__).parent / LatApp.CSS_PATH  # not beside this file

        def on_mount(self) -> None:
            # Textual calls LatApp.on_mount too (handlers run along the MRO): calling super() here
            # pushed a second dashboard, polling and repainting beneath the first
            self.set_interval(0.01 if mode == "first-frame" else 1.0, self._sample)
            if mode != "first-frame":
                self.set_timer(seconds, self.exit)

        def _sample(self) -> None:
            result.setdefault("painted", time.time())  # the first tick comes once the first frame is drawn
            result.setdefault("painted_cpu", time.process_time())
            screen = self.screen
            if isinstance(screen, DashboardScreen) and screen.query_one(JobTable).row_count:
                result.setdefault("table", time.time())
                result.setdefault("table_cpu", time.process_time())
                if mode == "first-frame":
                    self.call_after_refresh(self.exit)
                elif mode == "log" and screen._tail.path is not None:
                    size = screen._tail.path.stat().st_size if screen._tail.path.exists() else 0
                    result.setdefault("lag_bytes", []).append(max(size - max(screen._tail.offset, 0), 0))

    app = BenchApp(state, SuiteRegistry(config_trees(None)), GpuProbe(FakeNvml.with_gpus(gpus, used=20 * 2**30)),
                   engine_starter=lambda *args, **kwargs: False)
    app.run()
    out.write_text(json.dumps(result))


# ---------------------------------------------------------------- the parent: tmux and measuring

class Pane:
    def __init__(self, command: str, env: dict[str, str]):
        self.name = f"lat-bench-{uuid.uuid4().hex[:8]}"
        args = [*TMUX, "new-session", "-d", "-s", self.name, "-x", "160", "-y", "48"]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        for attempt in range(5):
            if subprocess.run([*args, command], capture_output=True).returncode == 0:
                return
            time.sleep(0.2 * (attempt + 1))
        raise RuntimeError("tmux would not start a session")

    def process(self, timeout: float = 30.0) -> psutil.Process:
        """The python child in the pane."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = subprocess.run([*TMUX, "display-message", "-p", "-t", self.name, "#{pane_pid}"],
                                 capture_output=True, text=True)
            if out.stdout.strip():
                shell = psutil.Process(int(out.stdout.strip()))
                for proc in [shell, *shell.children(recursive=True)]:
                    if "--child" in proc.cmdline():
                        return proc
            time.sleep(0.05)
        raise RuntimeError("the app process did not start")

    def kill(self) -> None:
        subprocess.run([*TMUX, "kill-session", "-t", self.name], capture_output=True)


def run_child(mode: str, state: Path, gpus: int, seconds: float, tmp: Path):
    out = tmp / f"{mode}-{uuid.uuid4().hex[:6]}.json"
    command = (f"{sys.executable} {Path(__file__).resolve()} --child {mode} --state {state} --out {out} "
               f"--gpus {gpus} --seconds {seconds}")
    env = {"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", ""), "TERM": "xterm-256color"}
    started = time.time()
    return Pane(command, env), out, started


def wait_file(path: Path, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size:
            return json.loads(path.read_text())
        time.sleep(0.05)
    raise RuntimeError(f"no result in {path}")


def first_frame(state: Path, gpus: int, tmp: Path, repeats: int) -> tuple[float, float, float, float]:
    """Wall time to the first frame and to the filled table, and the CPU time the process had used
    by then (on a loaded machine the wall time mostly measures the other load)."""
    painted, table, painted_cpu, table_cpu = [], [], [], []
    for _ in range(repeats):
        pane, out, started = run_child("first-frame", state, gpus, 0, tmp)
        try:
            result = wait_file(out, 60)
        finally:
            pane.kill()
        painted.append(result["painted"] - started)
        table.append(result["table"] - started)
        painted_cpu.append(result["painted_cpu"])
        table_cpu.append(result["table_cpu"])
    return tuple(statistics.median(v) for v in (painted, table, painted_cpu, table_cpu))


def attached_cpu(state: Path, gpus: int, tmp: Path, seconds: float) -> tuple[float, float, float]:
    pane, out, _ = run_child("attach", state, gpus, seconds + SETTLE_S + 5, tmp)
    try:
        proc = pane.process()
        time.sleep(SETTLE_S)
        before, t0 = proc.cpu_times(), time.monotonic()
        time.sleep(seconds)
        after, wall = proc.cpu_times(), time.monotonic() - t0
    finally:
        pane.kill()
    user, system = after.user - before.user, after.system - before.system
    return 100 * (user + system) / wall, 100 * user / wall, 100 * system / wall


def log_throughput(state: Path, gpus: int, tmp: Path, rate: int, seconds: float) -> dict:
    from lat_core.front.service import open_store

    store = open_store(state)
    log_path = Path(store.jobs(1)[0].job_dir) / "train.log"
    store.close()
    pane, out, _ = run_child("log", state, gpus, seconds + 6, tmp)
    try:
        pane.process()
        time.sleep(3)  # the dashboard is up and tailing job 1
        written = write_lines(log_path, rate, seconds)
        result = wait_file(out, seconds + 30)
    finally:
        pane.kill()
    lags = result.get("lag_bytes", [])
    return {"lines_written": written, "max_lag_bytes": max(lags, default=0), "final_lag_bytes": lags[-1] if lags else None,
            "lags": lags}


def write_lines(path: Path, rate: int, seconds: float) -> int:
    """``rate`` lines a second in 100 ms batches, as a chatty trainer would; the count written."""
    written, started = 0, time.monotonic()
    with open(path, "a", buffering=1 << 16) as fh:
        while (elapsed := time.monotonic() - started) < seconds:
            due = int(elapsed * rate) + rate // 10
            fh.writelines(f"step {n} loss {1 / (n + 1):.6f} lr 2.0e-04 grad_norm 0.731 tokens/s 31234\n"
                          for n in range(written, due))
            fh.flush()
            written = due
            time.sleep(0.1)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--jobs", type=int, default=32)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--log-rate", type=int, default=10_000)
    parser.add_argument("--log-seconds", type=float, default=10.0)
    parser.add_argument("--child", choices=("first-frame", "attach", "log"))
    parser.add_argument("--state", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.state, args.out, args.gpus, args.seconds)
        return
    if shutil.which("tmux") is None:
        sys.exit("bench_tui_idle: needs tmux (the app runs in a real terminal pane)")
    with tempfile.TemporaryDirectory() as tmp_name:
        try:
            measure(args, Path(tmp_name))
        finally:
            subprocess.run([*TMUX, "kill-server"], capture_output=True)


def measure(args, tmp: Path) -> None:
    state = make_state(tmp, args.jobs)
    painted, table, painted_cpu, table_cpu = first_frame(state, args.gpus, tmp, args.repeats)
    print(f"first frame: painted {painted:.2f} s, job table filled {table:.2f} s (CPU time by then "
          f"{painted_cpu:.2f} s, {table_cpu:.2f} s; median of {args.repeats} cold processes)")
    total, user, system = attached_cpu(state, args.gpus, tmp, args.seconds)
    print(f"attached, {args.jobs} jobs, {args.gpus} fake GPUs, 1 Hz: {total:.2f}% of one core "
          f"(user {user:.2f}%, system {system:.2f}%) over {args.seconds:g} s")
    log = log_throughput(state, args.gpus, tmp, args.log_rate, args.log_seconds)
    print(f"log pane at {args.log_rate} lines/s for {args.log_seconds:g} s ({log['lines_written']} lines): "
          f"max lag {log['max_lag_bytes'] / 1024:.0f} KiB, lag after the writer stopped "
          f"{(log['final_lag_bytes'] or 0) / 1024:.0f} KiB; per second: {log['lags']}")


if __name__ == "__main__":
    main()

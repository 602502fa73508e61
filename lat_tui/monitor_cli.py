"""``lat-tui monitor --log=FILE [--interval=N]``: follow a training log with GPU and host stats.

The dual-GPU runbook's ``./monitor_training.sh --interval=3 --log=logs/train_dual_gpu_<time>.log``,
for a run started by hand (``torchrun ... -m lat_core.train.pretrain ... | tee logs/x.log``) or any
job's ``train.log``: the log's last lines, then each new line as it comes, and every N seconds one
line per GPU (memory, utilisation, temperature, power) and one for the host (RAM, load). It ends on
Ctrl-C (exit 130), or by itself once the trainer beside the log (its folder's events.jsonl, as a
LAT job folder or a pretraining output folder has) has written its ``finished`` or ``failed`` event
and the log holds nothing more.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from lat_core.front.client import GpuProbe, GpuSnapshot, HostSnapshot, host_snapshot, tail_events
from lat_tui import fmt
from lat_tui.cli_common import EXIT_DETACHED, EXIT_OK
from lat_tui.tail import TailState, read_tail

HELP = "follow a training log with GPU and host stats every N s (the old monitor_training.sh)"
ENDED = ("finished", "failed")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lat-tui monitor", description=HELP)
    p.add_argument("--log", required=True, type=Path, help="the log file to follow (it may not exist yet)")
    p.add_argument("--interval", type=_positive, default=5.0, metavar="N", help="seconds between stats lines (default 5)")
    p.add_argument("-n", "--lines", type=int, default=20, metavar="N", help="start with the last N lines (default 20)")
    p.add_argument("--poll", type=float, default=0.5, help=argparse.SUPPRESS)
    return p


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def main(argv: list[str], probe: GpuProbe | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Ctrl-C ends the monitor even where it was started with SIGINT ignored (a script's background
    # job, some test harnesses): Python then keeps the inherited SIG_IGN and the loop never ends
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return follow(args.log, args.interval, args.lines, args.poll, probe or GpuProbe())
    except KeyboardInterrupt:
        return EXIT_DETACHED


def follow(log: Path, interval: float, lines: int, poll: float, probe: GpuProbe) -> int:
    """The log's last ``lines`` lines, then new ones and a stats block every ``interval`` seconds."""
    tail = TailState(path=log)
    if log.exists():
        new, tail = read_tail(tail)
        for line in new[-lines:] if lines > 0 else []:
            print(line, flush=True)
    else:
        tail = TailState(path=log, offset=0)  # created later: read it from its start
    next_stats = 0.0
    while True:
        ended = trainer_ended(log)  # read before the log, so no last line is lost
        new, tail = read_tail(tail, ended=ended)
        for line in new:
            print(line, flush=True)
        if time.monotonic() >= next_stats:
            for line in stats_lines(probe.snapshot(), host_snapshot()):
                print(line, flush=True)
            next_stats = time.monotonic() + interval
        if ended and not new:
            print(f"[monitor] the trainer writing {log} has ended", flush=True)
            return EXIT_OK
        time.sleep(poll)


def trainer_ended(log: Path) -> bool:
    """The events.jsonl beside the log ends with the trainer's finished or failed event."""
    events = tail_events(log.parent)
    return bool(events) and events[-1].name in ENDED


def stats_lines(gpus: GpuSnapshot, host: HostSnapshot) -> list[str]:
    """``[monitor 12:00:03] GPU0 H100 80GB  31.2/80G  97%  64°C 412W`` per GPU, then the host."""
    stamp = f"[monitor {time.strftime('%H:%M:%S')}]"
    lines = [f"{stamp} GPU{g.index} {g.name}  {fmt.gib(g.memory_used, g.memory_total)}"
             f"{'' if g.utilization is None else f'  {g.utilization}%'}"
             f"{'' if g.temperature is None else f'  {g.temperature}°C'}"
             f"{'' if g.power_watts is None else f'  {g.power_watts:.0f}W'}" for g in gpus.gpus]
    if not gpus.available:
        detail = gpus.reason.removeprefix("no GPU: ").strip()
        lines.append(f"{stamp} no GPU visible (NVML: {detail})" if detail else f"{stamp} no GPU visible")
    lines.append(f"{stamp} host RAM {fmt.gib(host.ram_used, host.ram_total)}  load {host.load1:.1f}/{host.cpu_count}")
    return lines


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Stands in for the trainer behind the engine's real launch: a fused group (``-m lat_core.train.fused``)
fails out of GPU memory in every member (each member's failed event, train.log line and exit
record, as the fused trainer writes them); a job alone succeeds. ``python oom_group.py ARGV...``."""
import json
import sys
from pathlib import Path

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "79.19 GiB of which 1.23 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and "
       "3.00 GiB is reserved by PyTorch but unallocated.")


def main(argv: list[str]) -> int:
    if "lat_core.train.fused" not in argv:
        print("trained alone", flush=True)
        return 0
    attempts = argv[argv.index("--attempts") + 1].split(",")
    dirs = [Path(a) for a in argv[argv.index("--attempts") + 2:]]
    for folder, n in zip(dirs, attempts):
        record = folder / ".lat" / f"attempt-{n}.exit.json"
        record.parent.mkdir(parents=True, exist_ok=True)
        if (folder / "survives").is_file():
            record.write_text(json.dumps({"returncode": 0, "signal": None, "pid": 1, "started": 0, "ended": 1}))
            continue
        with open(folder / "events.jsonl", "a") as ev:
            ev.write(json.dumps({"event": "failed", "t": 1.0, "error_type": "OutOfMemoryError", "message": OOM}) + "\n")
        with open(folder / "train.log", "a") as log:
            log.write(f"error: {OOM}\n")
        record.write_text(json.dumps({"returncode": 1, "signal": None, "pid": 1, "started": 0, "ended": 1}))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Stands in for the trainer behind the engine's real launch: a job alone and every member of a fused
group (``-m lat_core.train.fused``, each member's exit record as the fused trainer writes one) succeed
at once, so engine tests see which jobs were grouped without training. ``python stand_in_trainer.py ARGV...``."""
import json
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    if "lat_core.train.fused" not in argv:
        print("trained alone", flush=True)
        return 0
    attempts = argv[argv.index("--attempts") + 1].split(",")
    for folder, n in zip(argv[argv.index("--attempts") + 2:], attempts):
        record = Path(folder) / ".lat" / f"attempt-{n}.exit.json"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"returncode": 0, "signal": None, "pid": 1, "started": 0, "ended": time.time()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

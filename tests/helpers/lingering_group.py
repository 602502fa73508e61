"""Stands in for the fused trainer behind the engine's real launch: every member leaves the group
with exit 0 (its exit record, as the fused trainer writes one), then the process hangs on instead
of ending (a stuck teardown). ``python lingering_group.py ARGV...``."""
import json
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    attempts = argv[argv.index("--attempts") + 1].split(",")
    for folder, n in zip(argv[argv.index("--attempts") + 2:], attempts):
        record = Path(folder) / ".lat" / f"attempt-{n}.exit.json"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"returncode": 0, "signal": None, "pid": 1, "started": 0, "ended": time.time()}))
    time.sleep(600)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

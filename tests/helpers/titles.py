"""What ``ps`` shows for a process: its title, read as ``ps`` and nvitop read it."""
from __future__ import annotations

import subprocess
from pathlib import Path


def title_of(pid: int) -> str:
    """/proc/PID/cmdline as one line (a titled process's NUL padding dropped); "" once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return " ".join(part for part in raw.decode(errors="replace").split("\0") if part)


def ps_args(pid: int) -> str:
    """``ps -ww -o args=`` of the process (without -ww, ps cuts a line to 80 columns when its output
    is not a terminal: a long tmp path did in CI)."""
    return subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()

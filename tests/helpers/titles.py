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
    """``ps -o args=`` of the process."""
    return subprocess.run(["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()

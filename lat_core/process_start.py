"""Whether a pid still belongs to the process whose start time was recorded.

A start time is recorded as psutil's ``create_time``: on Linux, the boot time of ``/proc/stat``
(``btime``, whole seconds) plus the process's start in clock ticks since boot. The ticks never
change, but ``btime`` is computed from the wall clock each time it is read, so a clock step (a VM
resumed after a pause, a time sync that steps the clock, a leap second) moves every computed start
time by the same whole number of seconds. Compared within a second, as they were, every running job
would then look like a stranger's pid: the engine would take its runner for vanished, stop the
job's processes and record a failure. The same process is therefore one whose start differs from the
recorded one by a whole number of seconds (a clock step, bounded by MAX_CLOCK_STEP_S) and not by a
fraction of one: a reused pid is another process, which started at another tick.

Where there is no /proc (psutil then reads a start time the kernel keeps), within a second.
"""

from __future__ import annotations

import os

MAX_CLOCK_STEP_S = 7 * 24 * 3600  # a VM paused for days steps the clock forward by that much on resuming
_HAS_PROC = os.path.exists("/proc/self/stat")
_TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if _HAS_PROC else 100)


def same_start(recorded: float, found: float) -> bool:
    """Whether a process that started at ``found`` is the one recorded as started at ``recorded``
    (both as psutil's ``create_time``, perhaps read under different boot times: see above)."""
    if not _HAS_PROC:
        return abs(found - recorded) < 1.0
    offset = recorded - found
    whole = round(offset)
    return abs(offset - whole) < _TICK_S / 2 and abs(whole) <= MAX_CLOCK_STEP_S

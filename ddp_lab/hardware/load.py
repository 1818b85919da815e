"""How busy other programs kept this process's cores: what a timing comparison must know first.

A model of this machine's step time (lesson 13's planner, lesson 02's alpha-beta line) assumes
the ranks have their cores to themselves. Another program that keeps a core busy (a browser
tab, a second test run, `yes > /dev/null`) makes the ranks wait for the scheduler: measured on
the course's 2-core machine with `yes` pinned to one core, step times ran 13-68 % above the
planner's prediction and noisy from run to run, whatever was calibrated under the same load.

`OtherPrograms` measures that load over a block of code: the busy time of the cores this
process may run on (Linux's /proc/stat, per core), minus the CPU time of this process and all
its descendants (the ranks, the zygote, their reaped children), per second of the block.

Introduced in notebooks/13-plan-your-training-run.ipynb (predicted vs measured step times).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

PROC_STAT = Path("/proc/stat")
# Cores other programs may keep busy, on average, before timings stop being this machine's own
# (a quiet 2-core machine here: 0.01-0.1; with `yes` on one core: about 0.9).
QUIET_CORES = 0.25


def busy_seconds(cores: set[int] | None = None, proc_stat: Path = PROC_STAT) -> float | None:
    """Seconds the given cores (default: this process's affinity) spent busy since boot; None off Linux."""
    cores = os.sched_getaffinity(0) if cores is None and hasattr(os, "sched_getaffinity") else cores
    try:
        lines = proc_stat.read_text().splitlines()
    except OSError:
        return None
    ticks = 0
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or (cores is not None and int(name[3:]) not in cores):
            continue
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
        ticks += user + nice + system + irq + softirq + steal   # guest time is already inside user
    return ticks / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds() -> float:
    """CPU seconds of this process and every descendant, reaped children included."""
    total = 0.0
    me = psutil.Process()
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:   # ended meanwhile: its parent's children_* times hold it once reaped
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


class OtherPrograms:
    """Cores other programs kept busy while a `with` block ran: `.cores` (None where unknown).

    Example:
        >>> with OtherPrograms() as others:
        ...     sum(range(10**6))
        >>> others.quiet
        True

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    cores: float | None = None

    def __enter__(self) -> "OtherPrograms":
        self._start = (time.monotonic(), busy_seconds(), tree_cpu_seconds())
        return self

    def __exit__(self, *exc) -> None:
        began, busy, own = self._start
        busy_now, elapsed = busy_seconds(), time.monotonic() - began
        if busy is None or busy_now is None or elapsed <= 0:
            return
        self.cores = max(0.0, (busy_now - busy) - (tree_cpu_seconds() - own)) / elapsed

    @property
    def quiet(self) -> bool:
        """True when other programs used less than QUIET_CORES on average (or the load is unknown)."""
        return self.cores is None or self.cores < QUIET_CORES

    def __str__(self) -> str:
        return "unknown" if self.cores is None else f"{self.cores:.2f} cores"

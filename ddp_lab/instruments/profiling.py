"""One training step under `torch.profiler`, and the few rows of its table a lesson reads.

The profiler's C++ side (kineto) writes lines such as `USDT:<date> <pid> ... profiler_start`
to stderr when it starts and stops; `quiet_profile` sends those to /dev/null, so a rank's
output holds only what the lesson prints.

Introduced in notebooks/11-performance-and-scaling.ipynb.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from torch.profiler import ProfilerActivity, profile


@contextlib.contextmanager
def _stderr_to_devnull() -> Iterator[None]:
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(devnull)
        os.close(saved)


class _QuietProfile:
    """torch.profiler.profile(CPU), whose start and stop do not write kineto's status lines."""

    def __init__(self, **kwargs):

        self.profile = profile(activities=[ProfilerActivity.CPU], **kwargs)

    def __enter__(self):
        with _stderr_to_devnull():
            self.profile.__enter__()
        return self.profile

    def __exit__(self, *exc_info):
        with _stderr_to_devnull():
            return self.profile.__exit__(*exc_info)


def quiet_profile(**kwargs) -> _QuietProfile:
    """`with quiet_profile() as prof:` profiles CPU activity like torch.profiler.profile, silently.

    Example:
        >>> with quiet_profile() as prof:
        ...     torch.ones(8, 8) @ torch.ones(8, 8)
        >>> "aten::matmul" in event_names(prof)
        True

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    return _QuietProfile(**kwargs)


def event_names(prof) -> set[str]:
    """Every distinct event name in a finished profile.

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    return {event.key for event in prof.key_averages()}


class ProfileRow(NamedTuple):
    """One line of a profile's table: event name, how often it ran, total and self CPU milliseconds."""

    name: str
    calls: int
    total_ms: float
    self_ms: float


def profile_rows(prof, patterns: Sequence[str], limit: int = 10) -> list[ProfileRow]:
    """The events whose name contains one of `patterns`, longest total time first.

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    rows = [ProfileRow(e.key, e.count, e.cpu_time_total / 1e3, e.self_cpu_time_total / 1e3)
            for e in prof.key_averages() if any(pattern in e.key for pattern in patterns)]
    return sorted(rows, key=lambda row: -row.total_ms)[:limit]


def format_rows(rows: Sequence[ProfileRow]) -> str:
    """A small fixed-width table of profile rows (names shortened to 60 characters).

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    lines = [f"{'event':60s} {'calls':>5s} {'total ms':>9s} {'self ms':>8s}"]
    for row in rows:
        name = row.name if len(row.name) <= 60 else row.name[:57] + "..."
        lines.append(f"{name:60s} {row.calls:5d} {row.total_ms:9.2f} {row.self_ms:8.2f}")
    return "\n".join(lines)

"""Exercise checks: specific feedback (which rank, which element, expected vs got, a hint).

One module per lesson (`ddp_lab.checks.lesson02`, ...), loaded on first use:

    ddp_lab.checks.lesson02.check_ring_reduce_scatter(ring_reduce_scatter)

Every check raises `CheckFailed` (an AssertionError) with a message that names the
mistake, and prints one line starting with "✓" when the answer is right.
"""

from __future__ import annotations

import importlib


class CheckFailed(AssertionError):
    """An exercise answer is wrong; the message says where and what to look at."""


def passed(message: str) -> None:
    """Print the one-line success message every check ends with."""
    print(f"✓ {message}")


def __getattr__(name: str):
    if name.startswith("lesson"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

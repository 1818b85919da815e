"""Exercise checks: specific feedback (which rank, which element, expected vs got, a hint).

One module per lesson (`ddp_lab.checks.lesson02`, ...), loaded on first use:

    ddp_lab.checks.lesson02.check_ring_reduce_scatter(ring_reduce_scatter)

Every check raises `CheckFailed` (an AssertionError) with a message that names the
mistake, and prints one line starting with "✓" when the answer is right.
"""

from __future__ import annotations

import importlib

from ddp_lab.launcher.errors import wrap_for_notebook


class CheckFailed(AssertionError):
    """An exercise answer is wrong; the message says where and what to look at.

    An AssertionError, so pytest reports it as a failed assertion. In a notebook IPython
    shows only the message (what is wrong, expected vs got, the hint), not the check's own
    frames: the learner's code is not in them.

    Introduced in exercises/01-data-vs-model-parallelism.ipynb (the first exercise checks).
    """

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of a traceback: 'CheckFailed: <message>', line by line.

        Long lines are wrapped between words: JupyterLab breaks a long
        output line wherever the window ends, mid-word (its CSS says `word-break: break-all`).
        """

        lines = str(self).splitlines() or [""]
        lines[0] = f"{type(self).__name__}: {lines[0]}".rstrip()
        return [part for line in lines for part in wrap_for_notebook(line)]


def passed(message: str) -> None:
    """Print the one-line success message every check ends with."""
    print(f"✓ {message}")


def __getattr__(name: str):
    if name.startswith("lesson"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

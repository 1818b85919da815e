"""What `ddp_lab.launch` raises or warns when ranks fail, hang or crash.

Every error carries the failures of *all* ranks, so one cell shows the whole story:
which rank failed first, its original traceback, and what happened to the others.

Introduced in notebooks/00-welcome-and-first-launch.ipynb.
"""

from __future__ import annotations

import re
import signal
import textwrap
import traceback
from dataclasses import dataclass


def describe_exit(returncode: int) -> str:
    """Say how a process ended: 'exit code 7' or 'signal SIGSEGV (11)'."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "signal"
        return f"signal {name} ({-returncode})"
    return f"exit code {returncode}"


_SIGNAL_HINTS = {
    -signal.SIGSEGV: "a segmentation fault: a crash in C/C++ code (or a ctypes/extension bug)",
    -signal.SIGKILL: "killed from outside: often the kernel's out-of-memory killer",
    -signal.SIGABRT: "an abort in C++ code (for example 'terminate called ...')",
    -signal.SIGBUS: "a bus error: often shared memory (/dev/shm) too small",
}


@dataclass
class RankFailure:
    """What went wrong on one rank.

    Attributes:
        rank: the rank.
        kind: 'raised' (a Python exception), 'crashed' (died without a traceback),
            'timeout' (still running at the watchdog) or 'stopped' (killed by ddp_lab
            because another rank failed first).
        summary: one line, e.g. "raised ValueError: bad shape".
        details: the original traceback, a stack dump or the last lines of output.
        exception: the original exception object when it could be sent back, else None.
        returncode: the process exit status (negative: killed by that signal).
        secondary: True when the rank failed because a peer failed first (its traceback
            is kept in `details` but left out of the message).
    """

    rank: int
    kind: str
    summary: str
    details: str = ""
    exception: BaseException | None = None
    returncode: int | None = None
    secondary: bool = False  # failed only because another rank failed first: no traceback shown


class LaunchError(RuntimeError):
    """One or more ranks of a `ddp_lab.launch` did not return.

    Attributes:
        failures: {rank: RankFailure} for every rank that raised, crashed, hung or was
            stopped, in rank order.
        first_rank: the rank whose failure was seen first (usually the root cause).
        outputs: each rank's captured stdout+stderr up to the failure.
        figures: a live cluster's cell: each rank's figures (PNG bytes) drawn before it failed, as
            `Results.figures`; empty lists otherwise.

    With headline_only=True the message is the headline alone (one line, e.g. a live-cluster
    rank that died between cells); `failures` still holds every rank's failure.
    """

    def __init__(self, headline: str, failures: dict[int, RankFailure], first_rank: int | None,
                 outputs: list[str], hint: str = "", *, headline_only: bool = False):
        self.failures = dict(sorted(failures.items()))
        self.first_rank = first_rank
        self.outputs = outputs
        self.hint = hint
        self.figures: list[list[bytes]] = [[] for _ in outputs]
        super().__init__(headline if headline_only else self._render(headline))

    def _render(self, headline: str) -> str:
        parts = [headline]
        first_first = sorted(self.failures.values(), key=lambda f: (f.rank != self.first_rank, f.rank))
        shown: dict[str, int] = {}  # details already printed -> the rank they were printed for
        for failure in first_first:
            if failure.kind == "stopped":
                continue
            several = sum(f.kind not in ("stopped", "timeout") for f in self.failures.values()) > 1
            first = " (first failure)" if failure.rank == self.first_rank and several else ""
            parts.append(f"\n--- rank {failure.rank} {failure.summary}{first} ---")
            if not failure.details or failure.secondary:
                continue
            if failure.details in shown:
                parts.append(f"(same as rank {shown[failure.details]})")
            else:
                shown[failure.details] = failure.rank
                parts.append(failure.details.rstrip("\n"))
        stopped = [r for r, f in self.failures.items() if f.kind == "stopped"]
        if stopped:
            who = ", ".join(map(str, stopped))
            parts.append(f"\n--- rank{'s' if len(stopped) > 1 else ''} {who}: stopped by ddp_lab "
                         f"after rank {self.first_rank} failed ---")
        if self.hint:
            parts.append(f"\nHint: {self.hint}")
        return "\n".join(parts)


    def _render_traceback_(self) -> list[str]:
        """What IPython shows: the message, not the launcher's own frames.

        The headline and the hints are wrapped between words (`wrap_for_notebook`); the
        ranks' tracebacks are shown as they are.
        """
        lines = str(self).splitlines() or [""]
        lines[0] = f"{type(self).__name__}: {lines[0]}"
        return [part for i, line in enumerate(lines)
                for part in (wrap_for_notebook(line) if i == 0 or line.startswith("Hint:") else [line])]


NOTEBOOK_WIDTH = 100


def wrap_for_notebook(line: str, width: int = NOTEBOOK_WIDTH) -> list[str]:
    """A long message line as lines of at most `width` characters, broken between words.

    JupyterLab breaks a long output line wherever its window ends, mid-word (its CSS says
    `word-break: break-all`), so messages meant for a notebook wrap themselves.
    """

    if len(line) <= width:
        return [line]
    indent = line[:len(line) - len(line.lstrip())]
    return textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [line]


class RankFailed(LaunchError):
    """A rank raised a Python exception inside `fn` (or while receiving it)."""


class RankCrashed(LaunchError):
    """A rank's process died without a Python traceback (os._exit, a signal, a C++ abort)."""


class LaunchTimeout(LaunchError):
    """The watchdog fired: ranks were still running at `timeout` seconds.

    The message holds every running rank's Python stack at that moment.
    """


class ResultNotPicklable(LaunchError, TypeError):
    """A rank returned a value that cannot be pickled back to the notebook."""


class CellSyntaxError(ValueError):
    """A live-cluster cell that does not compile, refused in the notebook before any rank runs it.

    Shown as IPython shows a SyntaxError in a cell: where (file and line), the line with a caret, the
    error; not a SyntaxError itself, which IPython shows with the frames that raised it (the package's
    own). `syntax_error` is Python's, with its filename, lineno and offset.
    """

    def __init__(self, syntax_error: SyntaxError, hint: str | None = None):
        self.syntax_error = syntax_error
        text = "".join(traceback.format_exception_only(SyntaxError, syntax_error)).rstrip("\n")
        text = re.sub(r'File "(Cell In\[\d+\])"', r"\1", text)   # 'Cell In[5], line 2', as IPython
        super().__init__(text + (f"\nHint: {hint}" if hint else ""))

    def _render_traceback_(self) -> list[str]:
        """What IPython shows: Python's own lines for the SyntaxError, no frames."""
        return str(self).splitlines()


class MagicUsageError(ValueError):
    """A live-cluster magic used wrongly (`%%ddp --ranks 9`, `%ddp_pull 2x`), refused before anything starts.

    Shown in one line, as IPython shows its own usage errors, without the package's frames.
    Introduced in notebooks/00b-live-cluster.ipynb.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class CellInterrupted(KeyboardInterrupt):
    """The stop button during a live-cluster cell, raised once one line per rank has said where its code stopped
    (and whether the cluster kept its ranks): shown as the one line `KeyboardInterrupt`, without the package's frames
    or the waits it interrupted. `figures`: each rank's figures (PNG bytes) drawn before it stopped, as
    `Results.figures`. Introduced in notebooks/00b-live-cluster.ipynb.
    """

    figures: tuple = ()

    def _render_traceback_(self) -> list[str]:
        return ["KeyboardInterrupt"]


class LaunchWarning(RuntimeWarning):
    """Something odd that did not cost any result, e.g. a rank crashing during exit."""


def exit_with_cause(returncode: int) -> str:
    """'signal SIGKILL (9): killed from outside: often ...', or 'exit code 3': how a process ended, and why."""
    hint = _SIGNAL_HINTS.get(returncode)
    return describe_exit(returncode) + (f": {hint}" if hint else "")


def crash_summary(returncode: int) -> str:
    """One line saying how a rank died without a traceback, with the likely cause."""
    hint = _SIGNAL_HINTS.get(returncode)
    if returncode >= 0:  # 0 too: a process that ends before reporting a result did not return
        hint = "os._exit(), or a library that called exit(); no Python traceback was produced"
    how = describe_exit(returncode)
    return f"died with {how} before returning" + (f": {hint}" if hint else "")

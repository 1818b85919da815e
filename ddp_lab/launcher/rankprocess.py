"""A started rank as the launcher sees it, whichever way it was started.

Every rank runs in a session of its own (its pid is its process group), so that the
notebook's interrupt reaches the launcher, not the ranks, and so that what a rank leaves
running can be ended with it (`end_session`).

Introduced in notebooks/00-welcome-and-first-launch.ipynb ("How launch works").
"""

from __future__ import annotations

import os
import signal
import socket


def end_session(pid: int) -> None:
    """SIGKILL what is left in the process group of rank `pid` (its own session) once it ended.

    A child the rank started and did not wait for (`subprocess.Popen`, `sh -c '... &'`)
    would otherwise keep writing into the rank's stdout pipe after the rank's end, and keep
    the pipe open. Called before the rank is reaped, while its pid (and so its group's id)
    cannot be reused; a child that made a session of its own is not reached (its output is
    cut off at the rank's end instead, see output.read_streams).
    """
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # nothing left in the group (or the rank ended before it made its session)


class RankProcess:
    """A started rank, as the launcher sees it (subclasses differ in how it started)."""

    rank: int
    pid: int
    channel: socket.socket
    stdout_fd: int
    stderr_fd: int
    returncode: int | None = None
    ended_by: str | None = None  # set when something outside the rank ended it (its zygote died)

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status (negative: killed by that signal), or None if still running at timeout."""
        raise NotImplementedError

    def send_signal(self, signum: int) -> None:
        """Signal the rank if it is still running (no error if it already ended)."""
        if self.returncode is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        """Release the launcher's ends of the pipes and the channel (once; idempotent).

        Only after the reader threads of the pipes have ended: a thread still blocked in a
        read of a closed fd number would read whatever the next launch opens under it.
        """
        for name in ("stdout_fd", "stderr_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                setattr(self, name, -1)
                os.close(fd)
        self.channel.close()

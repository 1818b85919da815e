"""A started rank as the launcher sees it, whichever way it was started.

Introduced in notebooks/00-welcome-and-first-launch.ipynb ("How launch works").
"""

from __future__ import annotations

import os
import socket


class RankProcess:
    """A started rank, as the launcher sees it (subclasses differ in how it started)."""

    rank: int
    pid: int
    channel: socket.socket
    stdout_fd: int
    stderr_fd: int
    returncode: int | None = None

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
        """Release the launcher's ends of the pipes and the channel."""
        for fd in (self.stdout_fd, self.stderr_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.channel.close()

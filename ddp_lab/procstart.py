"""Starting rank processes: the one place that decides *how* a rank's process begins.

`start_rank` gives back a `RankProcess` whatever the start method: its pid, the read
ends of its stdout and stderr pipes, the launcher's end of its control channel, and
`wait()` / `send_signal()`. Cold starts run `python -m ddp_lab.worker` in a fresh
interpreter (spawn-safe: nothing of the notebook kernel is forked).

Introduced in notebooks/00-welcome-and-first-launch.ipynb ("How launch works").
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)


@dataclass
class RankProcess:
    """A started rank, as the launcher sees it."""

    rank: int
    popen: subprocess.Popen
    channel: socket.socket

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def stdout_fd(self) -> int:
        return self.popen.stdout.fileno()

    @property
    def stderr_fd(self) -> int:
        return self.popen.stderr.fileno()

    def wait(self) -> int:
        """Block until the process ends; return its exit status (negative: signal)."""
        return self.popen.wait()

    def poll(self) -> int | None:
        return self.popen.poll()

    def send_signal(self, signum: int) -> None:
        """Signal the rank if it is still running (no error if it already ended)."""
        if self.popen.returncode is None:
            try:
                os.kill(self.popen.pid, signum)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        """Release the launcher's ends of the pipes and the channel."""
        for handle in (self.popen.stdout, self.popen.stderr, self.channel):
            try:
                handle.close()
            except OSError:
                pass


def rank_environment(base: dict, rank: int, world_size: int, extra: dict) -> dict:
    """The environment torchrun would give this rank, plus ddp_lab's own settings."""
    env = dict(base)
    env.update({
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world_size),
        "PYTHONUNBUFFERED": "1",
        "DDP_LAB_PARENT_PID": str(os.getpid()),
    })
    env.update(extra)
    paths = [_PACKAGE_PARENT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def start_rank(rank: int, env: dict, payload_path: str, stacks_path: str) -> RankProcess:
    """Start one rank in a fresh interpreter (cold start)."""
    parent_end, child_end = socket.socketpair()
    try:
        popen = subprocess.Popen(
            [sys.executable, "-m", "ddp_lab.worker", str(child_end.fileno()), payload_path, stacks_path],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(child_end.fileno(),),
            # Own session: Jupyter's interrupt signals the kernel's process group; the
            # launcher, not the ranks, must receive it and then stop the ranks itself.
            start_new_session=True,
            cwd=os.getcwd(),
        )
    except BaseException:
        parent_end.close()
        raise
    finally:
        child_end.close()
    return RankProcess(rank=rank, popen=popen, channel=parent_end)


def stop_ranks(ranks: list[RankProcess], grace: float = 1.0) -> None:
    """SIGTERM every running rank, wait up to `grace` seconds, then SIGKILL the rest."""
    import time

    for process in ranks:
        process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in ranks:
        try:
            process.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
    for process in ranks:
        process.popen.wait()

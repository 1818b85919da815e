"""Starting rank processes: the one place that decides *how* a rank's process begins.

`start_rank` gives back a `RankProcess` whatever the start method: its pid, the read
ends of its stdout and stderr pipes, the launcher's end of its control channel, and
`wait()` / `send_signal()`.

- **Warm** (the default once the kernel has a zygote): fork the rank from the zygote, a
  clean process that imported torch and nothing else (see zygote.py). ~0.05 s per launch.
- **Cold** (the first launch of a kernel, or with DDP_LAB_WARM=0): run
  `python -m ddp_lab.launcher.worker` in a fresh interpreter. The first launch then starts the
  zygote in the background for the next ones.

Neither start method forks the notebook kernel itself.

Introduced in notebooks/00-welcome-and-first-launch.ipynb ("How launch works").
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ddp_lab.launcher.rankprocess import RankProcess
from ddp_lab.launcher.zygote_client import Zygote

_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
_zygote: Zygote | None = None


class SpawnedRank(RankProcess):
    """A rank in a fresh interpreter, started with subprocess (cold start)."""

    def __init__(self, rank: int, popen: subprocess.Popen, channel: socket.socket):
        self.rank, self.popen, self.channel, self.pid = rank, popen, channel, popen.pid
        self.stdout_fd = os.dup(popen.stdout.fileno())
        self.stderr_fd = os.dup(popen.stderr.fileno())
        popen.stdout.close()
        popen.stderr.close()

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


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
    return with_package_on_path(env)


def with_package_on_path(env: dict) -> dict:
    """Make sure a child interpreter can `import ddp_lab` even if it is not installed."""
    paths = [_PACKAGE_PARENT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**env, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


def spawn_rank(rank: int, env: dict, payload_path: str, stacks_path: str) -> SpawnedRank:
    """Start one rank in a fresh interpreter (cold start)."""
    parent_end, child_end = socket.socketpair()
    try:
        popen = subprocess.Popen(
            [sys.executable, "-m", "ddp_lab.launcher.worker", str(child_end.fileno()), payload_path, stacks_path],
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
    return SpawnedRank(rank, popen, parent_end)


def warm_starts_enabled() -> bool:
    """Warm starts are on unless DDP_LAB_WARM=0."""
    return os.environ.get("DDP_LAB_WARM", "1") != "0"


def ready_zygote(wait_s: float = 15.0) -> Zygote | None:
    """The kernel's zygote if it is (or within wait_s becomes) ready; None means start cold."""
    global _zygote
    if not warm_starts_enabled():
        return None
    if _zygote is not None and not _zygote.alive():
        _zygote.close()
        _zygote = None  # died (killed, OOM): start cold now, a new one starts after
    if _zygote is None:
        return None
    return _zygote if _zygote.wait_ready(wait_s) else None


def prepare_zygote() -> None:
    """Start the zygote in the background if there is none (called after a launch)."""
    global _zygote
    if warm_starts_enabled() and (_zygote is None or not _zygote.alive()):
        _zygote = Zygote.start(with_package_on_path({**os.environ, "DDP_LAB_PARENT_PID": str(os.getpid())}))


def shutdown_zygote() -> None:
    """Stop the kernel's zygote (the next launch starts cold)."""
    global _zygote
    if _zygote is not None:
        _zygote.close()
        _zygote = None


def start_rank(rank: int, env: dict, payload_path: str, stacks_path: str) -> RankProcess:
    """Start one rank: forked from the zygote when one is ready, else a fresh interpreter."""
    zygote = ready_zygote()
    if zygote is not None:
        forked = zygote.fork_rank(rank, env, payload_path, stacks_path, os.getcwd())
        if forked is not None:
            return forked
    return spawn_rank(rank, env, payload_path, stacks_path)


def stop_ranks(ranks: list[RankProcess], grace: float = 1.0) -> None:
    """SIGTERM every running rank, wait up to `grace` seconds, then SIGKILL the rest."""
    for process in ranks:
        process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in ranks:
        if process.wait(max(0.0, deadline - time.monotonic())) is None:
            process.send_signal(signal.SIGKILL)
    for process in ranks:
        process.wait()

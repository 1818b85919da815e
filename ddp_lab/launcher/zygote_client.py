"""The launcher's side of the zygote: start it, ask it to fork ranks, learn when they exit.

Introduced in notebooks/00b-live-cluster.ipynb (warm launches).
"""

from __future__ import annotations

import itertools
import os
import pickle
import socket
import subprocess
import sys
import threading

from ddp_lab.launcher.rankprocess import RankProcess
from ddp_lab.launcher.zygote import MAX_PACKET


class ForkedRank(RankProcess):
    """A rank forked by the zygote. Its exit status arrives through the zygote."""

    def __init__(self, rank: int, pid: int, channel: socket.socket, stdout_fd: int, stderr_fd: int):
        self.rank, self.pid, self.channel = rank, pid, channel
        self.stdout_fd, self.stderr_fd = stdout_fd, stderr_fd
        self.returncode: int | None = None
        self._exited = threading.Event()

    def _set_exit(self, returncode: int) -> None:
        self.returncode = returncode
        self._exited.set()

    def wait(self, timeout: float | None = None) -> int | None:
        self._exited.wait(timeout)
        return self.returncode


class Zygote:
    """A running zygote process and the thread that listens to it."""

    def __init__(self, popen: subprocess.Popen, sock: socket.socket):
        self.popen, self.sock = popen, sock
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._started: dict[int, tuple[threading.Event, list]] = {}
        self._ranks: dict[int, ForkedRank] = {}
        self._early_exits: dict[int, int] = {}
        self._closed = False
        threading.Thread(target=self._listen, daemon=True, name="ddp_lab-zygote").start()

    @classmethod
    def start(cls, env: dict) -> "Zygote":
        """Start a zygote process; it becomes ready once torch is imported (about a second)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            popen = subprocess.Popen(
                [sys.executable, "-m", "ddp_lab.launcher.zygote", str(theirs.fileno())],
                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),), start_new_session=True, cwd=os.getcwd(),
            )
        finally:
            theirs.close()
        return cls(popen, ours)

    def alive(self) -> bool:
        return not self._closed and self.popen.poll() is None

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout) and self.alive()

    def _listen(self) -> None:
        while True:
            try:
                data = self.sock.recv(MAX_PACKET)
            except OSError:
                data = b""
            if not data:
                break
            kind, key, value = (pickle.loads(data) + (None,))[:3]
            if kind == "ready":
                self._ready.set()
            elif kind == "started":
                event, box = self._started.pop(key)
                box.append(value)
                event.set()
            elif kind == "exited":
                with self._lock:
                    rank = self._ranks.pop(key, None)
                    if rank is None:
                        self._early_exits[key] = value
                if rank is not None:
                    rank._set_exit(value)
        self._closed = True
        for event, _ in list(self._started.values()):
            event.set()  # no pid will come
        for rank in list(self._ranks.values()):
            rank._set_exit(rank.returncode if rank.returncode is not None else -9)  # PDEATHSIG killed it

    def fork_rank(self, rank: int, env: dict, payload_path: str, stacks_path: str, cwd: str) -> ForkedRank | None:
        """Fork one rank; None if the zygote is gone (the caller then starts it cold)."""
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        ours, theirs = socket.socketpair()
        spec = {"env": env, "payload_path": payload_path, "stacks_path": stacks_path, "cwd": cwd}
        request_id = next(self._ids)
        event, box = threading.Event(), []
        self._started[request_id] = (event, box)
        try:
            socket.send_fds(self.sock, [pickle.dumps(("spawn", request_id, spec))],
                            [out_write, err_write, theirs.fileno()])
            event.wait(10.0)
        except OSError:
            pass
        finally:
            for fd in (out_write, err_write):
                os.close(fd)
            theirs.close()
        if not box:
            self._started.pop(request_id, None)
            for fd in (out_read, err_read):
                os.close(fd)
            ours.close()
            return None
        forked = ForkedRank(rank, box[0], ours, out_read, err_read)
        with self._lock:
            early = self._early_exits.pop(forked.pid, None)
            if early is None:
                self._ranks[forked.pid] = forked
        if early is not None:
            forked._set_exit(early)
        return forked

    def close(self) -> None:
        """Stop the zygote (its ranks die with it)."""
        self._closed = True
        try:
            self.sock.close()
        except OSError:
            pass
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()

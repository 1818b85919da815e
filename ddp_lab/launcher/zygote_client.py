"""The launcher's side of the zygote: start it, ask it to fork ranks, learn when they exit.

A zygote that stalls (stopped, swapped out, stuck) or dies is retired: killed, never asked
again, and replaced after the launch. Ranks forked from it die with it, and the error
names it ("the zygote (warm start process, pid N) died: ...").

Introduced in notebooks/00b-live-cluster.ipynb (warm launches).
"""

from __future__ import annotations

import itertools
import os
import pickle
import select
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

from ddp_lab.launcher.errors import describe_exit
from ddp_lab.launcher.rankprocess import RankProcess, end_session
from ddp_lab.launcher.starter import start_process
from ddp_lab.launcher.zygote import GO, MAX_PACKET

FORK_WAIT_S = 5.0  # for all the ranks of one launch; a healthy zygote forks 8 ranks in ~0.1 s
LISTENER_JOIN_S = 2.0


class ForkedRank(RankProcess):
    """A rank forked by the zygote. Its exit status arrives through the zygote."""

    def __init__(self, rank: int, pid: int, channel: socket.socket, stdout_fd: int, stderr_fd: int,
                 zygote: "Zygote"):
        self.rank, self.pid, self.channel, self.zygote = rank, pid, channel, zygote
        self.stdout_fd, self.stderr_fd = stdout_fd, stderr_fd
        self.returncode: int | None = None
        self._exited = threading.Event()

    def _set_exit(self, returncode: int) -> None:
        self.returncode = returncode
        self._exited.set()

    def wait(self, timeout: float | None = None) -> int | None:
        self._exited.wait(timeout)
        return self.returncode

    def go(self) -> None:
        """Let the rank run (it waits for this once forked, see zygote.py)."""
        try:
            self.channel.sendall(GO)
        except OSError:
            pass  # it already ended: the zygote reports its exit


class _Request:
    """One rank the zygote was asked to fork: the launcher's ends of its pipes and channel."""

    def __init__(self, rank: int, spec: dict, request_id: int):
        self.rank, self.spec, self.id = rank, spec, request_id
        self.out_read, self.out_write = os.pipe()
        self.err_read, self.err_write = os.pipe()
        self.ours, self.theirs = socket.socketpair()
        self.pid: int | None = None

    def close_theirs(self) -> None:
        """The rank's ends, once sent to the zygote (or not sendable)."""
        os.close(self.out_write)
        os.close(self.err_write)
        self.theirs.close()

    def close_ours(self) -> None:
        """The launcher's ends, when this start is given up."""
        os.close(self.out_read)
        os.close(self.err_read)
        self.ours.close()


def zygote_python(env: dict) -> list[str]:
    """The command that runs the zygote's `-m ddp_lab.launcher.zygote FD`: this Python, or where the zygote's
    environment sets DDP_LAB_ZYGOTE_RELAY, that command line (split as a shell would). The test suite sets it in
    its notebook kernels: tests/forked_kernels.py's relay has a process that has already imported what a zygote
    imports fork it (or, where it cannot, runs this Python's command itself), so that each kernel's zygote does
    not import torch again. A learner's kernel never sets it."""
    relay = env.get("DDP_LAB_ZYGOTE_RELAY")
    return shlex.split(relay) if relay else [sys.executable]


class Zygote:
    """A running zygote process and the thread that listens to it."""

    def __init__(self, popen: subprocess.Popen, sock: socket.socket):
        self.popen, self.sock = popen, sock
        self._ready = threading.Event()  # set when ready, or when it ended before
        self._lock = threading.Lock()
        self._started = threading.Condition(self._lock)
        self._ids = itertools.count()
        self._pending: dict[int, _Request] = {}  # request id -> fork asked for, no pid yet
        self._ranks: dict[int, ForkedRank] = {}
        self._early_exits: dict[int, int] = {}
        self._retired_because: str | None = None
        self._closed = False
        self.imports: tuple[str, ...] = ()   # zygote.LEARNED_IMPORTS it imported before it was ready
        self.learned: set[str] = set()   # those its ranks imported and it lacks (a successor imports them)
        self.env: dict[str, str] = {}   # the environment it started with (Zygote.start)
        self.asked: frozenset[str] = frozenset()   # the imports it was asked for (one that failed is not asked again)
        self._listener = threading.Thread(target=self._listen, daemon=True, name="ddp_lab-zygote")
        self._listener.start()

    @classmethod
    def start(cls, env: dict) -> "Zygote":
        """Start a zygote process; it becomes ready once torch is imported (about a second)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            popen = start_process(  # from the starter thread: it outlives the thread that launched
                [*zygote_python(env), "-m", "ddp_lab.launcher.zygote", str(theirs.fileno())],
                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),), start_new_session=True, cwd=os.getcwd(),
            )
        finally:
            theirs.close()
        zygote = cls(popen, ours)
        zygote.env = dict(env)
        zygote.asked = frozenset(filter(None, env.get("DDP_LAB_ZYGOTE_IMPORTS", "").split(",")))
        return zygote

    def live_ranks(self) -> int:
        """Ranks it forked (or was asked to) that have not ended."""
        with self._lock:
            return len(self._ranks) + len(self._pending)

    def is_ready(self) -> bool:
        return self._ready.is_set() and self.alive()

    @property
    def name(self) -> str:
        return f"the zygote (warm start process, pid {self.popen.pid})"

    def alive(self) -> bool:
        return not self._closed and self.popen.poll() is None

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout) and self.alive()

    # -- the listener thread ---------------------------------------------------------------
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
                self.imports = tuple(value or ())
                self._ready.set()
            elif kind == "learned":
                self.learned.update(key)
            elif kind == "started":
                self._on_started(key, value)
            elif kind == "exited":
                self._on_exited(key, value)
        self._on_gone()

    def _on_started(self, request_id: int, pid: int) -> None:
        with self._lock:
            request = self._pending.pop(request_id, None)
            if request is not None:
                request.pid = pid
                self._started.notify_all()
        if request is None:  # a late reply to a start already given up: nobody watches that rank
            os.kill(pid, signal.SIGKILL)  # our zygote's unreaped child: the pid is still its own

    def _on_exited(self, pid: int, returncode: int) -> None:
        with self._lock:
            rank = self._ranks.pop(pid, None)
            if rank is None:
                self._early_exits[pid] = returncode
        if rank is not None:
            rank._set_exit(returncode)

    def _on_gone(self) -> None:
        """The zygote ended (or was retired): its ranks died with it (PR_SET_PDEATHSIG)."""
        self._closed = True
        self._ready.set()
        try:
            how = self._retired_because or f"died: {describe_exit(self.popen.wait(LISTENER_JOIN_S))}"
        except subprocess.TimeoutExpired:
            how = "closed its socket"
        with self._lock:
            orphans, self._ranks = list(self._ranks.values()), {}
            self._pending.clear()
            self._started.notify_all()
        for rank in orphans:
            rank.ended_by = f"{self.name} {how}"
            end_session(rank.pid)  # the rank itself (if not dead yet) and what it left running
            rank._set_exit(-signal.SIGKILL)

    # -- forking ---------------------------------------------------------------------------
    def fork_ranks(self, specs: list[dict], timeout: float | None = None) -> list[ForkedRank] | None:
        """Fork one rank per spec, all within `timeout` (FORK_WAIT_S); else retire the zygote, return None.

        The ranks wait for `ForkedRank.go()`. None means: start every rank cold (the ranks
        this zygote did fork die with it, before they ran anything).
        """
        timeout = FORK_WAIT_S if timeout is None else timeout
        requests = []
        deadline = time.monotonic() + timeout
        try:
            for rank, spec in enumerate(specs):
                request = _Request(rank, spec, next(self._ids))
                requests.append(request)
                with self._lock:
                    self._pending[request.id] = request
                try:
                    self._send_within(deadline, pickle.dumps(("spawn", request.id, spec)),
                                      [request.out_write, request.err_write, request.theirs.fileno()])
                finally:
                    request.close_theirs()
            started = self._wait_started(requests, deadline)
        except OSError:
            started = False
        if not started:
            self.retire(f"did not start {len(specs)} ranks within {timeout:g}s; ddp_lab ended it")
            for request in requests:
                request.close_ours()
            return None
        return [self._watch(request) for request in requests]

    def _send_within(self, deadline: float, data: bytes, fds: list[int]) -> None:
        """Send one request; a zygote that does not take it before `deadline` counts as stalled."""
        while True:
            try:
                socket.send_fds(self.sock, [data], fds, socket.MSG_DONTWAIT)
                return
            except BlockingIOError:  # its queue is full: it is not reading
                poller = select.poll()
                poller.register(self.sock, select.POLLOUT)
                if not poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
                    raise TimeoutError("the zygote took no request") from None

    def _wait_started(self, requests: list[_Request], deadline: float) -> bool:
        with self._lock:
            while any(request.pid is None for request in requests) and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._started.wait(left)
            return all(request.pid is not None for request in requests)

    def _watch(self, request: _Request) -> ForkedRank:
        forked = ForkedRank(request.rank, request.pid, request.ours, request.out_read, request.err_read, self)
        with self._lock:
            early = self._early_exits.pop(forked.pid, None)
            if early is None:
                self._ranks[forked.pid] = forked
        if early is not None:
            forked._set_exit(early)
        return forked

    # -- ending it -------------------------------------------------------------------------
    def retire(self, why: str) -> None:
        """Kill the zygote and never use it again; its ranks die with it and are told `why`."""
        with self._lock:
            self._retired_because = self._retired_because or why
        self._closed = True
        if self.popen.poll() is None:
            self.popen.kill()  # works on a stopped (SIGSTOP) process too
        self.popen.wait()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the listener, which reads EOF
        except OSError:
            pass
        if threading.current_thread() is not self._listener:
            self._listener.join(LISTENER_JOIN_S)
        if not self._listener.is_alive():
            self.sock.close()  # only now: the listener must not read a reused fd number

    def close(self) -> None:
        """Stop the zygote (its ranks die with it)."""
        self.retire("was shut down")

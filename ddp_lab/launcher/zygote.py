"""The zygote: a clean, pre-imported process that forks ranks in milliseconds.

Starting a rank cold costs a fresh interpreter plus `import torch` (about a second, more
with many ranks on few cores). The zygote pays that once per kernel: it imports torch and
then does nothing else — no tensor op, no thread pool, no CUDA — so forking it is safe
(forking the *notebook kernel* is not: a child of a process that ran multi-threaded ops
can hang on its first matmul, and CUDA cannot be used after fork once initialised).

Protocol, over one AF_UNIX SOCK_SEQPACKET socket (one message per packet):
  launcher -> zygote  ("spawn", request_id, spec) with 3 fds: stdout, stderr, control
  zygote -> launcher  ("started", request_id, pid)
  zygote -> launcher  ("exited", pid, returncode)   for every child that ends
A forked rank then waits for GO on its control channel before it runs anything: only when
every rank of the launch has started does the launcher send it. If the zygote stalls or
dies part way, the launcher ends it, the ranks it did fork die with it (PR_SET_PDEATHSIG)
without having touched the launch's store, and the launch starts all its ranks cold.
When a rank ends, the zygote kills what is left of its session before reaping it
(rankprocess.end_session). The zygote exits when the launcher closes the socket or dies.

Introduced in notebooks/00b-live-cluster.ipynb.
"""

from __future__ import annotations

import importlib
import os
import pickle
import random
import select
import signal
import socket
import sys

from ddp_lab.launcher.rankprocess import end_session

MAX_PACKET = 1 << 20
GO = b"G"  # launcher -> forked rank: every rank of the launch has started, run


# Modules a rank may import that are slow to import and safe to import before a fork (they start
# no thread and touch no CUDA: checked on torch 2.13 by patching torch.cuda's entry points during
# the import; tests/test_cluster.py checks the thread count). A zygote does not import them up
# front: its ranks write the names they imported to its pipe before they report, it tells the
# launcher ("learned"), and after that launch the launcher starts a successor zygote that imports
# them (DDP_LAB_ZYGOTE_IMPORTS) in the background; the successor takes over once it is ready and
# the old one has no rank alive (procstart.py). A zygote never imports while it serves: an import
# of seconds there delayed its reports of ranks' exits past stop_ranks' wait, and it was retired.
# torch._dynamo is what every rank's first DistributedDataParallel(...), fully_shard(...) or DTensor
# op imports: 800 modules, sympy among them, 1.5-4 s of a core per rank on this 2-core machine;
# pipelining and distributed checkpointing (lessons 07, 12) are smaller. Importing them in every
# zygote up front cost 1.5 s of CPU per kernel that never needs them (three unsolved exercises:
# 18 s -> 25-30 s). Ranks forked with torch._dynamo preloaded can deadlock in
# destroy_process_group() after DDP (5 of 8 without keepalive.py): pytorch#56297 (freeing a gloo
# group joins its threads while holding the GIL), which keepalive.py avoids: 60 DDP launches, half
# of them destroying their group, passed with it preloaded.
LEARNED_IMPORTS = ("torch._dynamo", "torch.distributed.checkpoint", "torch.distributed.pipelining")


def preload() -> None:
    """Import what every rank needs; run nothing. (LEARNED_IMPORTS come later, once a rank needs them.)"""
    import cloudpickle  # noqa: F401
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401
    import torch.nn  # noqa: F401
    import torch.nn.parallel  # noqa: F401
    import torch.optim  # noqa: F401

    import ddp_lab.launcher.worker  # noqa: F401


def _become_rank(spec: dict, fds: list[int], sock: socket.socket, wakeup: int, learned: tuple[int, int]) -> None:
    """In the forked child: take the pipes, the environment and the cwd, then run the rank."""
    import torch  # lazy: the zygote imports torch here, timed, before it forks any rank

    from ddp_lab.launcher import worker  # lazy: the zygote process loads the rank side; its notebook-side client never does

    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    sock.close()
    os.close(wakeup)
    os.close(learned[0])
    worker.report_imports_to = (learned[1], tuple(name for name in LEARNED_IMPORTS if name not in sys.modules))
    stdout, stderr, control = fds
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    os.close(stdout)
    os.close(stderr)
    os.setsid()
    os.chdir(spec["cwd"])
    os.environ.clear()
    os.environ.update(spec["env"])
    # torch reads TORCH_DISTRIBUTED_DEBUG once, when torch.distributed is imported: here that
    # was the zygote's import, before this rank's environment. Read it again, as a fresh
    # process would (else launch(env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}) is ignored when warm).
    import torch.distributed as dist

    if dist.is_available():
        dist.set_debug_level_from_env()
    # A fresh process seeds these from the OS; a fork would share the zygote's state.
    random.seed()
    torch.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    worker.die_with_parent(os.getppid())
    try:
        go = os.read(control, len(GO))
    except OSError:
        go = b""
    if go != GO:  # the launcher gave up on this start (EOF): it starts this rank cold instead
        os._exit(1)
    worker.run_rank(control, spec["payload_path"], spec["stacks_path"])


def _reap(sock: socket.socket) -> None:
    """Report every rank that ended, after ending what it left running in its session."""
    while True:
        try:
            ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)  # not reaped yet
        except ChildProcessError:
            return
        if ended is None or ended.si_pid == 0:
            return
        end_session(ended.si_pid)  # while the pid is unreaped, so no other process can hold it
        _, status = os.waitpid(ended.si_pid, 0)
        sock.send(pickle.dumps(("exited", ended.si_pid, os.waitstatus_to_exitcode(status))))


def import_learned(names: str) -> tuple[str, ...]:
    """Import those of the comma-separated names that are LEARNED_IMPORTS (a successor zygote, before
    it is ready); returns the ones imported. One that fails to import is left to the ranks."""
    imported = []
    for name in names.split(","):
        if name in LEARNED_IMPORTS:
            try:
                importlib.import_module(name)
                imported.append(name)
            except Exception:  # noqa: BLE001 - a rank imports it itself then, as without the zygote
                pass
    return tuple(imported)


def _tell_learned(learned_read: int, sock: socket.socket, told: set) -> None:
    """Pass on the LEARNED_IMPORTS ranks wrote to the pipe (a name per line) that this zygote lacks, once each."""
    names = set(os.read(learned_read, 4096).decode(errors="replace").split())
    new = sorted(name for name in names if name in LEARNED_IMPORTS and name not in sys.modules and name not in told)
    if new:
        told.update(new)
        sock.send(pickle.dumps(("learned", tuple(new))))


def serve(sock: socket.socket) -> None:
    """Fork a rank for every request until the launcher goes away."""
    wakeup_read, wakeup_write = os.pipe()
    os.set_blocking(wakeup_write, False)
    learned_read, learned_write = os.pipe()   # ranks -> zygote: LEARNED_IMPORTS they imported
    os.set_blocking(learned_write, False)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    told: set = set()
    while True:
        ready, _, _ = select.select([sock, wakeup_read, learned_read], [], [])
        if wakeup_read in ready:
            os.read(wakeup_read, 4096)
            _reap(sock)
        if learned_read in ready:
            _tell_learned(learned_read, sock, told)
        if sock in ready:
            try:
                data, fds, _, _ = socket.recv_fds(sock, MAX_PACKET, 3)
            except OSError:
                data = b""
            if not data:
                return
            _, request_id, spec = pickle.loads(data)
            pid = os.fork()
            if pid == 0:
                try:
                    _become_rank(spec, fds, sock, wakeup_read, (learned_read, learned_write))
                finally:
                    os._exit(70)
            for fd in fds:
                os.close(fd)
            sock.send(pickle.dumps(("started", request_id, pid)))


def main() -> None:
    from ddp_lab.launcher.worker import die_with_parent  # lazy: the zygote process loads the rank side; its notebook-side client never does

    die_with_parent(int(os.environ["DDP_LAB_PARENT_PID"]))
    sock = socket.socket(fileno=int(sys.argv[1]))
    preload()
    imported = import_learned(os.environ.get("DDP_LAB_ZYGOTE_IMPORTS", ""))
    sock.send(pickle.dumps(("ready", os.getpid(), imported)))
    serve(sock)


if __name__ == "__main__":
    main()

"""Finding the processes and sockets of ddp_lab launches, for tests that assert a clean machine.

A rank is recognised by the environment the launcher gives it (`DDP_LAB_PARENT_PID`, the
pid of the process that called `ddp_lab.launch`) or by being a ddp_lab process below this
one, not by its parent alone: an orphan whose parent died has been re-parented, and is
exactly what these tests must catch.

The one ddp_lab process allowed to outlive a launch is the launcher's zygote (a direct
child of the launching process, `python -m ddp_lab.launcher.zygote`, kept for fast warm starts).
Ranks forked from it share its command line but are its children, not the launcher's.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


def _launcher_pid(process: psutil.Process) -> int | None:
    """The DDP_LAB_PARENT_PID of a process, or None (not ours, gone, or unreadable)."""
    try:
        value = process.environ().get("DDP_LAB_PARENT_PID")
    except _GONE:
        return None
    return int(value) if value and value.isdigit() else None


def _is_ddp_lab(process: psutil.Process) -> bool:
    try:
        return any(arg.startswith("ddp_lab.") for arg in process.cmdline())
    except _GONE:
        return False


def is_zygote(process: psutil.Process, launcher_pids: set[int]) -> bool:
    """The zygote of one of these launchers: `-m ddp_lab.launcher.zygote` whose parent is the launcher."""
    try:
        return "ddp_lab.launcher.zygote" in process.cmdline() and process.ppid() in launcher_pids
    except _GONE:
        return False


def ddp_lab_processes(launcher_pids: set[int] | None = None) -> list[psutil.Process]:
    """Every live process of these launchers (default: this process), zygotes included."""
    launcher_pids = {os.getpid()} if launcher_pids is None else set(launcher_pids)
    found = {p.pid: p for p in psutil.process_iter() if _launcher_pid(p) in launcher_pids}
    for child in psutil.Process().children(recursive=True):
        if _is_ddp_lab(child):
            found.setdefault(child.pid, child)
    found.pop(os.getpid(), None)
    alive = []
    for process in found.values():
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except _GONE:
            pass
    return alive


def rank_processes(launcher_pids: set[int] | None = None) -> list[psutil.Process]:
    """Live rank processes of these launchers (default: this process), orphans included.

    Zygotes whose launcher (or this process) is alive and still their parent are not ranks.
    """
    launcher_pids = {os.getpid()} if launcher_pids is None else set(launcher_pids)
    parents = launcher_pids | {os.getpid()}
    return [p for p in ddp_lab_processes(launcher_pids) if not is_zygote(p, parents)]


def _describe(process: psutil.Process) -> str:
    try:
        return f"pid {process.pid} (parent {process.ppid()}): {' '.join(process.cmdline())[:200]}"
    except _GONE:
        return f"pid {process.pid} (gone)"


EXIT_GRACE_S = 5.0


def assert_no_ranks_left(launcher_pids: set[int] | None = None) -> None:
    """Fail, naming them, if any rank process of these launchers survived.

    A rank still exiting when its launcher has returned is given EXIT_GRACE_S to finish: with
    `yes > /dev/null` on one of 2 cores beside `make test`, a rank of a launcher that had just
    exited was found mid-exit (its command line already empty) and failed the test once. A rank
    that leaked outlives any grace.
    """
    psutil.wait_procs(rank_processes(launcher_pids), timeout=EXIT_GRACE_S)
    left = [_describe(p) for p in rank_processes(launcher_pids)]   # live ones: zombies and gone left out
    assert not left, "rank processes survived the launch:\n" + "\n".join(left)


def listening_sockets(pid: int) -> list[tuple[str, str, int]]:
    """(kind, ip, port) of every TCP socket in LISTEN state and every bound UDP socket of `pid`."""
    found = []
    for conn in psutil.Process(pid).net_connections(kind="inet"):
        if not conn.laddr:
            continue
        tcp_listening = conn.type == socket.SOCK_STREAM and conn.status == psutil.CONN_LISTEN
        udp_bound = conn.type == socket.SOCK_DGRAM
        if tcp_listening or udp_bound:
            found.append(("tcp" if tcp_listening else "udp", conn.laddr.ip, conn.laddr.port))
    return found


def start_launching_script(folder: Path, source: str, ready: int = 2, seconds: float = 90) -> subprocess.Popen:
    """Run `source` as a script (argv[1] = folder) in a session of its own, as a kernel is; return once
    `ready` of its ranks have written `ready-*` files in `folder` (the tests then signal it like Jupyter's
    stop button, which sends SIGINT to the kernel's process group)."""
    script = folder / "launching.py"
    script.write_text(source)
    proc = subprocess.Popen([sys.executable, str(script), str(folder)], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + seconds
    while len(list(folder.glob("ready-*"))) < ready and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if proc.poll() is not None:
        raise AssertionError(f"the script ended before its ranks were ready: {proc.communicate()}")
    time.sleep(0.3)
    return proc


"""Security: during a launch, every listening socket of the launcher and of every rank is on 127.0.0.1.

A workshop runs on shared networks. torch's own `init_process_group("env://")` makes rank 0
host a TCPStore that listens on every interface ([::]) even with MASTER_ADDR=127.0.0.1;
ddp_lab hosts the store itself on a socket bound to 127.0.0.1 (`master_listen_fd`). This
test looks at the sockets from outside (psutil reads /proc/<pid>/net/tcp{,6} and the fds),
while the ranks hold their process group open, so it sees what a port scanner would.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import pytest

import ddp_lab
from rank_procs import ddp_lab_processes, listening_sockets, rank_processes

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # ship fns by value, as from a notebook

LOOPBACK = "127.0.0.1"


def hold_the_group_open(rank, marker_dir, init_self):
    """Connect every gloo pair, then wait until the test has looked at the sockets."""
    import torch
    import torch.distributed as dist

    if init_self:
        dist.init_process_group("gloo")  # env://, pointed by the launcher at its store
    dist.all_reduce(torch.ones(1))  # gloo connects a full mesh of pairs on first use
    Path(marker_dir, f"ready-{rank}").write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while not Path(marker_dir, "go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    dist.barrier()
    return os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])


def inspect_during_launch(marker_dir: Path, nprocs: int, seen: dict) -> None:
    """In a thread: wait for every rank to be ready, list everyone's listening sockets, release them."""
    try:
        deadline = time.monotonic() + 90
        while len(list(marker_dir.glob("ready-*"))) < nprocs and time.monotonic() < deadline:
            time.sleep(0.02)
        pids = {int(p.read_text()) for p in marker_dir.glob("ready-*")}
        ours = {p.pid for p in rank_processes()}
        seen["ranks_are_ours"] = pids <= ours
        seen["launcher"] = listening_sockets(os.getpid())
        seen["ranks"] = {pid: listening_sockets(pid) for pid in pids}
        helpers = [p.pid for p in ddp_lab_processes() if p.pid not in pids]  # the zygote
        seen["helpers"] = {pid: listening_sockets(pid) for pid in helpers}
    except Exception as error:  # reported by the test, after the launch returned
        seen["error"] = repr(error)
    finally:
        Path(marker_dir, "go").touch()


@pytest.mark.parametrize("init_self", [False, True], ids=["launcher-initialises", "fn-initialises"])
def test_every_listening_socket_is_on_loopback(tmp_path, init_self):
    nprocs = 2
    seen: dict = {}
    inspector = threading.Thread(target=inspect_during_launch, args=(tmp_path, nprocs, seen), daemon=True)
    inspector.start()
    # gloo: NCCL, which `auto` picks with a GPU per rank, opens sockets of its own (its bootstrap)
    results = ddp_lab.launch(hold_the_group_open, args=(str(tmp_path), init_self), nprocs=nprocs, backend="gloo",
                             init_process_group=not init_self, timeout=90)
    inspector.join(10)
    assert "error" not in seen, seen.get("error")
    assert seen["ranks_are_ours"] and len(seen["ranks"]) == nprocs
    master_addr, master_port = results[0]
    assert master_addr == LOOPBACK
    # the store the ranks rendezvous at is hosted by the launcher itself, on loopback
    assert ("tcp", LOOPBACK, master_port) in seen["launcher"], seen["launcher"]
    everything = seen["launcher"] + [s for group in ("ranks", "helpers")
                                     for sockets in seen[group].values() for s in sockets]
    exposed = [s for s in everything if s[1] != LOOPBACK]
    assert not exposed, f"listening beyond loopback: {exposed} {seen}"


def test_the_socket_lister_sees_a_socket_open_to_the_network():
    """The check above can fail: a socket bound to every interface is reported as such."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as exposed:
        exposed.bind(("0.0.0.0", 0))
        exposed.listen()
        port = exposed.getsockname()[1]
        assert ("tcp", "0.0.0.0", port) in listening_sockets(os.getpid())
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as private:
        private.bind((LOOPBACK, 0))
        private.listen()
        assert ("tcp", LOOPBACK, private.getsockname()[1]) in listening_sockets(os.getpid())

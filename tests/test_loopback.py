"""Security: during a launch, every listening socket of the launcher and of every rank is on 127.0.0.1.

A workshop runs on shared networks. torch's own `init_process_group("env://")` makes rank 0
host a TCPStore that listens on every interface ([::]) even with MASTER_ADDR=127.0.0.1;
ddp_lab hosts the store itself on a socket bound to 127.0.0.1 (`master_listen_fd`). gloo's
pairs listen where the hostname resolves, so ddp_lab names the loopback interface in
GLOO_SOCKET_IFNAME; the namespace test proves it on a machine whose /etc/hosts maps the
hostname to its network address (as Docker, Kubernetes pods and many cloud VMs do). These
tests look at the sockets from outside (psutil reads /proc/<pid>/net/tcp{,6} and the fds),
while the ranks hold their process group open, so they see what a port scanner would.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import cloudpickle
import psutil
import pytest

import ddp_lab
from ddp_lab.launcher.rendezvous import loopback_interface
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
    # written whole, then renamed: the inspector reads the pid as soon as the name appears (a plain write_text
    # once let it read an empty file: "invalid literal for int() with base 10: ''" in a fresh-clone CI run here)
    Path(marker_dir, f".ready-{rank}").write_text(str(os.getpid()))
    os.replace(Path(marker_dir, f".ready-{rank}"), Path(marker_dir, f"ready-{rank}"))
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


def launch_and_look(marker_dir: Path, init_self: bool, nprocs: int = 2) -> dict:
    """Launch ranks that hold their group open; what listened where while they did (`seen`), and more.

    Returns `seen` with the launch's MASTER_ADDR/MASTER_PORT (`store`), how its ranks started
    (`started`), and every socket that listened beyond loopback (`exposed`).
    """
    seen: dict = {}
    inspector = threading.Thread(target=inspect_during_launch, args=(marker_dir, nprocs, seen), daemon=True)
    inspector.start()
    # gloo: NCCL, which `auto` picks with a GPU per rank, opens sockets of its own (its bootstrap)
    results = ddp_lab.launch(hold_the_group_open, args=(str(marker_dir), init_self), nprocs=nprocs,
                             backend="gloo", init_process_group=not init_self, timeout=90)
    inspector.join(10)
    seen.update(store=list(results[0]), started=results.started, nprocs=nprocs)
    if "error" not in seen:
        everything = seen["launcher"] + [s for group in ("ranks", "helpers")
                                         for sockets in seen[group].values() for s in sockets]
        seen["exposed"] = [s for s in everything if not ipaddress.ip_address(s[1]).is_loopback]
    return seen


def assert_only_loopback(seen: dict) -> None:
    """Every rank was looked at, the launcher hosts the store on 127.0.0.1, nothing listens beyond loopback."""
    assert "error" not in seen, seen.get("error")
    assert seen["ranks_are_ours"] and len(seen["ranks"]) == seen["nprocs"]
    master_addr, master_port = seen["store"]
    assert master_addr == LOOPBACK
    # the store the ranks rendezvous at is hosted by the launcher itself, on loopback
    assert ("tcp", LOOPBACK, master_port) in [tuple(s) for s in seen["launcher"]], seen["launcher"]
    assert not seen["exposed"], f"listening beyond loopback: {seen['exposed']} {seen}"


@pytest.mark.parametrize("init_self", [False, True], ids=["launcher-initialises", "fn-initialises"])
def test_every_listening_socket_is_on_loopback(tmp_path, init_self):
    assert_only_loopback(launch_and_look(tmp_path, init_self))


# --- a hostname that resolves to the network address ---------------------------------------------

IN_NAMESPACE = textwrap.dedent("""
    # Runs in a mount namespace whose /etc/hosts maps this machine's hostname to its network address.
    import json, socket, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])  # tests/
    from ddp_lab.launcher import procstart
    import test_loopback

    procstart.prepare_zygote()  # ranks forked from the zygote, as in a notebook after its first launch
    report = test_loopback.launch_and_look(Path(sys.argv[2]), init_self=False)
    report["resolves_to"] = socket.gethostbyname(socket.gethostname())
    print(json.dumps(report))
""")


def network_address() -> str:
    """An IPv4 address of this machine beyond loopback; else one that is not this machine's (TEST-NET-3).

    gloo binds where the hostname resolves: to the first, every rank listened on the network
    (before GLOO_SOCKET_IFNAME); to the second, gloo cannot bind at all and the launch failed.
    """
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not ipaddress.ip_address(address.address).is_loopback:
                return address.address
    return "203.0.113.7"


def run_in_namespace_with_hosts(hosts: str, command: list[str]) -> subprocess.CompletedProcess:
    """Run `command` in a user and mount namespace (`unshare -rm`) where /etc/hosts reads `hosts`."""
    hosts_file = Path(os.environ.get("TMPDIR", "/tmp"), f"ddp_lab-hosts-{os.getpid()}")
    hosts_file.write_text(hosts)
    try:
        return subprocess.run(["unshare", "-rm", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"',
                               str(hosts_file), *command], capture_output=True, text=True, timeout=120)
    finally:
        hosts_file.unlink()


def test_ranks_listen_on_loopback_where_the_hostname_resolves_to_the_network(tmp_path):
    """A launch in a namespace whose /etc/hosts maps the hostname to the network address: only loopback.

    Before GLOO_SOCKET_IFNAME every rank's gloo pairs listened on that address;
    `tests/test_loopback.py`'s other tests passed only because this machine maps its hostname to
    127.0.0.1. Skipped where namespaces are not allowed. The ranks are forked from a zygote (a warm
    start, where the rank's environment replaces the zygote's after torch was imported); a cold start
    is a fresh interpreter given the same environment. About 5 s, most of it the zygote importing torch.
    """
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) to give a launch its own /etc/hosts")
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"user and mount namespaces are not allowed here: {probe.stderr.strip()}")
    address, hostname = network_address(), socket.gethostname()
    if hostname == "localhost":
        pytest.skip("this machine's hostname is 'localhost', which must stay on loopback")
    script = tmp_path / "in_namespace.py"
    script.write_text(IN_NAMESPACE)
    done = run_in_namespace_with_hosts(f"127.0.0.1 localhost\n{address} {hostname}\n",
                                       [sys.executable, str(script), str(Path(__file__).parent), str(tmp_path)])
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["resolves_to"] == address, report  # the namespace's /etc/hosts was the one read
    assert report["started"] == ["warm", "warm"], report
    assert_only_loopback(report)


def test_a_gloo_interface_the_user_chose_is_kept(monkeypatch):
    """GLOO_SOCKET_IFNAME: the loopback interface by default; the notebook's own value, or env='s, wins."""
    def interface(rank):
        return os.environ.get("GLOO_SOCKET_IFNAME")

    assert loopback_interface() is not None
    assert list(ddp_lab.launch(interface, nprocs=1, init_process_group=False)) == [loopback_interface()]
    chosen = ddp_lab.launch(interface, nprocs=1, init_process_group=False, env={"GLOO_SOCKET_IFNAME": "eth7"})
    assert list(chosen) == ["eth7"]
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth8")
    assert list(ddp_lab.launch(interface, nprocs=1, init_process_group=False)) == ["eth8"]


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

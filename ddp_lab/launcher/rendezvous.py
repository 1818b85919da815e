"""Where ranks rendezvous: the launcher's store on 127.0.0.1, or wherever fn's own code says.

`init_process_group("env://")` normally makes rank 0 start a TCPStore on MASTER_PORT.
Measured here: that store listens on every interface ([::]) even with
MASTER_ADDR=127.0.0.1, and the port chosen "free" by the launcher can be taken by someone
else before rank 0 binds it. Instead, like torchrun's agent, the launcher binds a socket
to 127.0.0.1 itself, hands it to a TCPStore (`master_listen_fd`), and tells the ranks to
connect as clients (`TORCHELASTIC_USE_AGENT_STORE=True`). The store outlives every rank,
so no rank can lose the store by exiting first.

That variable tells torch "some agent hosts the store", for *every* `init_process_group`
in the rank. Code a learner brings (PyTorch's DDP tutorial sets MASTER_PORT=12355 in its
`setup()`; others pass `init_method="tcp://..."`) would then wait forever for a store no
one hosts. So each rank routes its `init_process_group` calls (`route_init_process_group`):
a call that points at the launcher's store connects to it as above; one that points
anywhere else runs as under `torch.multiprocessing.spawn`, rank 0 hosting the store.

gloo's own sockets (the pairs that carry every collective) listen where the machine's
hostname resolves, not where MASTER_ADDR points: measured, with the hostname mapped to the
network address in /etc/hosts (as in Docker, Kubernetes/JupyterHub pods and many cloud VMs),
every rank listened on that address. `loopback_store` therefore also names the loopback
interface in GLOO_SOCKET_IFNAME (`gloo_on_loopback`), unless the user chose an interface.

A rank opens one connection to the launcher's store and shares it (`own_store`): every
group it sets up there and ddp_lab's own start-up barrier use it. Each TCPStore connection
costs a reverse DNS lookup: torch's client connects over IPv6 first (socket.cpp,
`prefer_ipv6`), so "127.0.0.1" becomes `::ffff:127.0.0.1`, and it names that address with
getnameinfo() (`formatSockAddr`, for its log lines) whatever the log level. /etc/hosts never
answers the v4-mapped form (glibc matches IPv4 lines to IPv4 lookups only), so every connection
sends a PTR query for 1.0.0.127.in-addr.arpa to the nameserver; where the nameserver drops one
(measured in a sandbox whose DNS rate-limits: of lookups sent 100 a second, 2 in 300 were
dropped; at 30 a second, none of 150), glibc asks again after 5 s, and a 0.1 s warm launch
takes 5.1 s. No address avoids it (a v4 or v6 literal, or "localhost", is looked up alike) and
torch has no setting for it (torch 2.13 stops looking up only after a lookup *fails*,
pytorch#159596). RES_OPTIONS cannot help: glibc reads it once for the whole process, so the
learner's own lookups would change too (and timeout:1 still costs 1 s). ddp_lab therefore
makes as few connections as it can, one per rank and the one the hosting TCPStore makes to
itself in the notebook (torch always connects its own client), and hedges each (`hedged`): a
connection not made within HEDGE_AFTER_S is tried again beside the first, and whichever is made
first is used ("hedged requests": Dean and Barroso, "The Tail at Scale", CACM 56(2), 2013). A
dropped lookup then costs HEDGE_AFTER_S, not 5 s. Measured on 2 cores (2026-12-03), warm 4-rank
launches while another process sent 60 lookups a second (so that the nameserver dropped some of
the launches' own): without hedging 16 of 300 took 5.2-5.6 s; hedged, the slowest of 600 took
0.31 s (median 0.15 s).

Introduced in notebooks/00-welcome-and-first-launch.ipynb ("How launch works"); bringing
your own `setup()` in notebooks/05-ddp-in-practice.ipynb ("Bringing your own script").
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import functools
import inspect
import ipaddress
import os
import queue
import socket
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from ddp_lab.launcher.fd_limit import fds_needed_by_a_launch, raise_open_files_limit, require_free_fds

LOOPBACK = "127.0.0.1"
GLOO_INTERFACE = "GLOO_SOCKET_IFNAME"  # the network interface(s) gloo binds its pairs to
IFF_LOOPBACK = 0x8  # <net/if.h>: the flag of the loopback interface in /sys/class/net/<name>/flags
AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"
OWN_STORE = "DDP_LAB_STORE"  # "127.0.0.1:port" of the launcher's store, so a rank can recognise it
# A store connection takes 0.5 ms (median of 300 here, its reverse lookup included); one whose
# lookup the nameserver dropped takes 5 s (glibc asks again after 5 s). Past this, a second try
# starts: 200 times the median, so that a slow-but-working connection on a loaded machine is
# rarely doubled, and short enough that two dropped lookups in one launch still cost under 1 s.
HEDGE_AFTER_S = 0.1


def hedged(connect, hedge_after: float = HEDGE_AFTER_S):
    """`connect()`'s result; if it has not returned within `hedge_after` s, a second `connect()` runs beside it.

    The first to succeed is returned; the other's result, when it comes, is dropped (a TCPStore
    closes its connection when it is freed). Each runs in a daemon thread (torch releases the
    GIL while it connects), so a try stuck in a lookup keeps no process from exiting. An
    exception is raised only once every try has failed (the first one's).
    """
    outcomes: queue.SimpleQueue = queue.SimpleQueue()

    def attempt():
        try:
            outcomes.put((True, connect()))
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            outcomes.put((False, error))

    threading.Thread(target=attempt, name="ddp_lab-store-connect", daemon=True).start()
    tries = 1
    try:
        succeeded, value = outcomes.get(timeout=hedge_after)
    except queue.Empty:
        threading.Thread(target=attempt, name="ddp_lab-store-connect-hedge", daemon=True).start()
        tries = 2
        succeeded, value = outcomes.get()
    first_error = None
    for _ in range(tries - 1):
        if succeeded:
            break
        first_error = first_error or value
        succeeded, value = outcomes.get()
    if succeeded:
        return value
    raise first_error or value


@contextlib.contextmanager
def loopback_store(world_size: int, timeout_s: float):
    """Host a TCPStore on 127.0.0.1; yield the environment that points ranks at it."""
    import torch  # lazy: `import ddp_lab` and the launcher stay torch-free until a launch needs the store (~1 s import)
    from torch.distributed import TCPStore  # lazy: `import ddp_lab` and the launcher stay torch-free until a launch needs the store (~1 s import)

    # torch 2.4-2.7: the libuv store (the default since 2.4) cannot take over a listening
    # socket (NotImplementedError "does not support initialization with an listen fd") until
    # pytorch PR #150215 (torch 2.8), so those versions get the legacy store.
    old_torch = tuple(int(part) for part in torch.__version__.split(".")[:2]) < (2, 8)
    legacy = {"use_libuv": False} if old_torch else {}
    raise_open_files_limit()  # each connection the store accepts is a file descriptor of this process
    require_free_fds(fds_needed_by_a_launch(world_size), "host the rendezvous store")

    def host() -> tuple:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind((LOOPBACK, 0))
            listener.listen(max(128, world_size * 4))
            port = listener.getsockname()[1]
            store = TCPStore(
                LOOPBACK, port, world_size, is_master=True,
                timeout=datetime.timedelta(seconds=timeout_s),
                wait_for_workers=False, master_listen_fd=listener.fileno(), **legacy,
            )
            listener.detach()  # the store owns the socket now and closes it when deleted
            return store, port
        finally:
            listener.close()  # a no-op once detached

    store, port = hedged(host)  # the store connects its own client: a lookup (module docstring)
    try:
        yield {
            "MASTER_ADDR": LOOPBACK,
            "MASTER_PORT": str(port),
            AGENT_STORE: "True",
            # as torchrun sets it for every worker: older torch (2.4) reads it whenever
            # AGENT_STORE is set (KeyError without it) to prefix its keys per restart
            "TORCHELASTIC_RESTART_COUNT": "0",
            OWN_STORE: f"{LOOPBACK}:{port}",
            **gloo_on_loopback(),
        }
    finally:
        del store


@functools.lru_cache(maxsize=1)
def loopback_interface() -> str | None:
    """The name of this machine's loopback network interface ('lo' on Linux), or None if none is found.

    Linux marks it with IFF_LOOPBACK in /sys/class/net/<name>/flags (any name works); elsewhere,
    or where /sys is not readable, the usual names 'lo' and 'lo0' (macOS, BSD) are taken.
    """
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    for name in names:
        try:
            if int(Path("/sys/class/net", name, "flags").read_text(), 16) & IFF_LOOPBACK:
                return name
        except (OSError, ValueError):
            continue
    return next((name for name in names if name in ("lo", "lo0")), None)


def gloo_on_loopback() -> dict:
    """{GLOO_SOCKET_IFNAME: the loopback interface}, or {} where the user set it (or no loopback is found).

    A value in `launch(env=...)` wins as well: the launcher's env= entries are applied after this.
    """
    interface = loopback_interface()
    if interface is None or GLOO_INTERFACE in os.environ:
        return {}
    return {GLOO_INTERFACE: interface}


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (for lessons that host their own store)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


# -- in a rank: route init_process_group -------------------------------------------------
_set_up_by: str | None = None  # "launch" or "cluster" once ddp_lab initialised the default group


def mark_set_up_by(who: str) -> None:
    """Record that ddp_lab initialised this rank's default group ('launch' or 'cluster')."""
    global _set_up_by
    _set_up_by = who


def route_init_process_group() -> None:
    """In a rank: make `init_process_group` rendezvous where its caller points, as under mp.spawn.

    Wraps `torch.distributed.init_process_group` (idempotent). A call aimed at the
    launcher's store (plain `env://` with ddp_lab's MASTER_ADDR/MASTER_PORT) connects to
    it as a client; one aimed elsewhere (the learner's own MASTER_PORT, `tcp://`) runs with
    TORCHELASTIC_USE_AGENT_STORE unset, so rank 0 hosts that store as it would under
    `torch.multiprocessing.spawn`. `file://` and `store=` are passed through untouched.
    What cannot work fails at once with the fix: a second initialisation of a group
    ddp_lab set up, a world_size larger than the ranks started, a port already in use.
    Called in every rank before fn is unpickled, so every reference fn holds is the wrapper.

    Introduced in notebooks/05-ddp-in-practice.ipynb ("Bringing your own script").
    """
    import torch.distributed as dist  # lazy: `import ddp_lab` and the launcher stay torch-free until a launch needs the store (~1 s import)
    from torch.distributed import distributed_c10d  # lazy: `import ddp_lab` and the launcher stay torch-free until a launch needs the store (~1 s import)

    original = distributed_c10d.init_process_group
    if getattr(original, "ddp_lab_routed", False):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        try:
            call = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)  # torch says what is wrong with the call
        arguments = call.arguments
        if dist.is_initialized():
            if _set_up_by is not None:
                raise ValueError(_twice_message(_set_up_by))
            return original(*args, **kwargs)  # torch refuses a second default group itself
        _check_world_size(arguments)
        check_timeout(arguments)
        address = store_address(arguments)
        if address is None:
            return original(*args, **kwargs)
        if is_own_store(*address):
            return _join_own_store(original, call, address)
        return _host_or_join(original, call, address)

    init_process_group.ddp_lab_routed = True
    distributed_c10d.init_process_group = init_process_group
    dist.init_process_group = init_process_group


_own_store_joins = 0  # how many groups this rank has set up at the launcher's store
_own_store_client = None  # this rank's one connection to the launcher's store (`own_store`)
_hosted_ports: set[int] = set()  # ports this rank hosted a store on (kept with destroyed groups)


def own_store(timeout: datetime.timedelta):
    """In a rank: its one connection to the launcher's store (a TCPStore client), opened on first use.

    Every group the rank sets up at the launcher's store, the launcher's start-up barrier and the
    live cluster's regroup share it: each new connection costs torch a reverse DNS lookup, which
    stalls 5 s whenever the nameserver drops the query (see the module docstring); the one
    connection is `hedged`. `timeout` becomes the store's timeout for what follows.

    Introduced in notebooks/00-welcome-and-first-launch.ipynb ("How launch works").
    """
    global _own_store_client
    from torch.distributed import TCPStore  # lazy: `import ddp_lab` and the launcher stay torch-free until a launch needs the store (~1 s import)

    if _own_store_client is None:
        host, port = os.environ[OWN_STORE].rsplit(":", 1)
        _own_store_client = hedged(lambda: TCPStore(host, int(port), is_master=False, timeout=timeout))
    else:
        _own_store_client.set_timeout(timeout)
    return _own_store_client


def _join_own_store(original, call: inspect.BoundArguments, address: tuple[str, int]):
    """Join the launcher's store over the rank's one connection, each group under keys of its own.

    A rank may set up a group, destroy it (e.g. a tutorial's cleanup() in a %%ddp cell) and set
    up another: the store still holds the first group's keys, and a new group under the same
    keys would meet stale addresses and hang. So group N of a rank uses the prefix
    ddp_lab/groupN (every rank counts alike).
    """
    global _own_store_joins
    from torch.distributed import PrefixStore
    from torch.distributed.constants import default_pg_timeout  # lazy: `import ddp_lab` and the launcher stay torch-free until a launch needs the store (~1 s import)

    joins, _own_store_joins = _own_store_joins, _own_store_joins + 1
    arguments = call.arguments
    store = PrefixStore(f"ddp_lab/group{joins}", own_store(arguments.get("timeout") or default_pg_timeout))
    arguments.update(init_method=None, store=store, rank=_rank(arguments),
                     world_size=_from_query(arguments, "world_size", "WORLD_SIZE"))
    return original(*call.args, **call.kwargs)


def _host_or_join(original, call: inspect.BoundArguments, address: tuple[str, int]):
    """A store fn chose: rank 0 hosts it, the others connect, as under mp.spawn."""
    hosts = _rank(call.arguments) == 0
    if hosts and address[1] in _hosted_ports:
        raise RuntimeError(_hosted_again_message(address[1]))
    if hosts and port_in_use(address[1]):  # torch would fail too, less clearly
        raise RuntimeError(_port_in_use_message(*address))
    with _agent_store_unset():
        result = original(*call.args, **call.kwargs)
    if hosts:
        _hosted_ports.add(address[1])
    return result


def store_address(arguments: dict) -> tuple[str, int] | None:
    """(host, port) of the TCP store an init_process_group call would use; None for file://, store=."""
    if arguments.get("store") is not None:
        return None
    url = urlparse(arguments.get("init_method") or "env://")
    if url.scheme == "tcp":
        return (url.hostname or "", url.port or 0)
    if url.scheme == "env":
        host, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
        return (host, int(port)) if port.isdigit() else None
    return None


def is_own_store(host: str, port: int) -> bool:
    """Whether host:port is the launcher's store (its port, on a loopback name)."""
    own = os.environ.get(OWN_STORE, "")
    return bool(own) and port == int(own.rsplit(":", 1)[1]) and _is_loopback(host)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@contextlib.contextmanager
def _agent_store_unset():
    """Let rank 0 host the store itself (torch reads the variable inside init_process_group)."""
    saved = os.environ.pop(AGENT_STORE, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[AGENT_STORE] = saved


def _from_query(arguments: dict, key: str, env: str) -> int:
    """rank or world_size of a call: the argument, else the URL's query, else the environment."""
    value = arguments.get(key, -1)
    if value is not None and value >= 0:
        return value
    query = parse_qs(urlparse(arguments.get("init_method") or "").query)
    if key in query:
        return int(query[key][0])
    return int(os.environ.get(env, "-1"))


def _rank(arguments: dict) -> int:
    return _from_query(arguments, "rank", "RANK")


def _check_world_size(arguments: dict) -> None:
    started = int(os.environ.get("WORLD_SIZE", "0"))
    asked = _from_query(arguments, "world_size", "WORLD_SIZE")
    if started and asked > started:
        raise ValueError(
            f"init_process_group(world_size={asked}) but ddp_lab started {started} rank(s) (nprocs={started}): "
            f"the group would wait forever for {asked - started} more. Launch with nprocs={asked}, or pass "
            f"world_size={started} (as an argument: launch(fn, args=({started},), nprocs={started})).")


def check_timeout(arguments: dict) -> None:
    """A timeout that is not a datetime.timedelta (`arguments`: init_process_group's, by name), refused in one line
    (TypeError) before the store is joined: torch refuses it too, but the launcher's store was reached first, and its
    TCPStore's constructor error listed every signature. Lesson 06's check words it for its exercise."""
    timeout = arguments.get("timeout")
    if timeout is not None and not isinstance(timeout, datetime.timedelta):
        example = f", e.g. timeout=datetime.timedelta(seconds={timeout!r})" if type(timeout) in (int, float) else ""
        raise TypeError(f"init_process_group(timeout={timeout!r}): the timeout is a datetime.timedelta, not "
                        f"{type(timeout).__name__}{example}.")


def port_in_use(port: int) -> bool:
    """Whether a listening socket could not be bound to `port` on every interface right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TCPStore does: TIME_WAIT is fine
        try:
            probe.bind(("", port))
        except OSError as error:
            return error.errno == errno.EADDRINUSE
    return False


def _port_in_use_message(host: str, port: int) -> str:
    return (f"rank 0 could not host the rendezvous store on port {port} (init_process_group at {host}:{port}): "
            "the port is in use, by another program or another notebook's launch. Choose another "
            "MASTER_PORT (or init_method port), or drop your own set-up and let ddp_lab set up the group "
            "(launch's default init_process_group=True picks a free port on 127.0.0.1).")


def _hosted_again_message(port: int) -> str:
    return (f"rank 0 already hosts a store on port {port}, for a process group this rank set up and destroyed "
            "earlier: ddp_lab keeps destroyed groups, and with them their stores, until the rank exits, "
            "because freeing them can deadlock (see ddp_lab/launcher/keepalive.py). Set up the group once and keep "
            "it, or give each new group a port of its own (a new MASTER_PORT or init_method).")


def _twice_message(set_up_by: str) -> str:
    if set_up_by == "cluster":
        return ("init_process_group() was called in a %%ddp cell, but this cluster's ranks already share a "
                "default process group, set up when the cluster started (or by an earlier cell) and kept "
                "across cells (rank, world_size and dist are predefined). Either drop your own set-up and clean-up (e.g. a tutorial's "
                "setup() and cleanup()) and use the group as it is, or run the function on fresh ranks "
                "that leave it to you: ddp_lab.launch(fn, args, nprocs, init_process_group=False).")
    return ("init_process_group() was called, but ddp_lab had already initialised the default process "
            "group before calling your function (launch's default, init_process_group=True). Either drop "
            "your own set-up (e.g. a tutorial's setup(); cleanup() may stay) and use the group as it is, "
            "or launch with init_process_group=False so that your function sets it up: "
            "ddp_lab.launch(fn, args, nprocs, init_process_group=False).")

"""The rendezvous store, hosted by the launcher on 127.0.0.1 only.

`init_process_group("env://")` normally makes rank 0 start a TCPStore on MASTER_PORT.
Measured here: that store listens on every interface ([::]) even with
MASTER_ADDR=127.0.0.1, and the port chosen "free" by the launcher can be taken by someone
else before rank 0 binds it. Instead, like torchrun's agent, the launcher binds a socket
to 127.0.0.1 itself, hands it to a TCPStore (`master_listen_fd`), and tells the ranks to
connect as clients (`TORCHELASTIC_USE_AGENT_STORE=True`). The store outlives every rank,
so no rank can lose the store by exiting first.

Introduced in notebooks/00-welcome-and-first-launch.ipynb ("How launch works").
"""

from __future__ import annotations

import contextlib
import datetime
import socket

LOOPBACK = "127.0.0.1"


@contextlib.contextmanager
def loopback_store(world_size: int, timeout_s: float):
    """Host a TCPStore on 127.0.0.1; yield the environment that points ranks at it."""
    from torch.distributed import TCPStore

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind((LOOPBACK, 0))
        listener.listen(max(128, world_size * 4))
        port = listener.getsockname()[1]
        store = TCPStore(
            LOOPBACK, port, world_size, is_master=True,
            timeout=datetime.timedelta(seconds=timeout_s),
            wait_for_workers=False, master_listen_fd=listener.fileno(),
        )
        listener.detach()  # the store owns the socket now and closes it when deleted
        try:
            yield {
                "MASTER_ADDR": LOOPBACK,
                "MASTER_PORT": str(port),
                "TORCHELASTIC_USE_AGENT_STORE": "True",
            }
        finally:
            del store
    finally:
        listener.close()


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (for lessons that host their own store)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]

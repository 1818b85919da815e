"""The control channel between the launcher and one rank: framed pickled messages.

Each rank gets one end of a `socket.socketpair()`. The rank sends exactly one report
(its return value or its exception); the launcher answers with one byte that lets the
rank exit once every rank has reported. If the launcher dies, the rank reads EOF and
exits too, so no rank outlives its notebook. A live cluster's rank instead answers
commands on it, one reply each (cluster/rank_loop.py).

Besides the channel, two signals travel between the launcher and a rank, and both sides
import them from here: STACK_SIGNAL asks a rank to dump its Python stacks (the hang report),
OUTPUT_MARK ends a command's output on a live cluster rank's stdout and stderr.
"""

from __future__ import annotations

import pickle
import signal
import socket
import struct

_HEADER = struct.Struct("!Q")
RELEASE = b"R"  # the launcher's answer to a report: the rank may exit
STACK_SIGNAL = signal.SIGUSR1  # a rank dumps every thread's Python stack (faulthandler) into its stacks file
OUTPUT_MARK = "\x1eddp_lab:end-of-command:"  # + the command's id: a line that tells the launcher a command's output is complete


def send_message(sock: socket.socket, message: dict) -> None:
    """Send one pickled dict, prefixed with its length."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(data)) + data)


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def receive_message(sock: socket.socket) -> dict | None:
    """Receive one message; None if the other end closed before sending a whole one."""
    header = _read_exactly(sock, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    data = _read_exactly(sock, size)
    return None if data is None else pickle.loads(data)

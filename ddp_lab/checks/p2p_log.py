"""Which sends and receives each rank made: read after a hang or a crash, it says who waits for whom.

A check that runs a send/recv answer (lesson 07's 1F1B stage, lesson 02's rings) logs every
point-to-point call a rank makes to a file of its own, one line per call ('op peer elements':
the rank the call names and the size of its tensor), written before the call starts. When
the ranks hang (or one dies inside a send or recv: `segfaulted`), the check reads the files
back in the notebook's process: a call that names a
rank that is not a neighbour is evidence of a wrong peer; a rank waiting for message k from a
peer that sent fewer than k, while the peer itself waits, is evidence of calls in the wrong
order; a receive whose buffer differs in size from the message its peer sent is evidence of
a wrong chunk. The message then says which, instead of guessing from the stacks alone.

Introduced in exercises/07-pipeline-parallelism.ipynb (the 1F1B check).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

from ddp_lab.instruments.collectives import replacing_dist_calls, watching_requests

SENDS, RECEIVES = ("send", "isend"), ("recv", "irecv")
_PEER = {"send": "dst", "isend": "dst", "recv": "src", "irecv": "src"}
_CALL_FRAME = re.compile(r'distributed_c10d\.py", line \d+ in (isend|irecv|send|recv)\b')   # torch's own frame


@dataclass(frozen=True)
class Call:
    """One point-to-point call: 'send', 'isend', 'recv' or 'irecv', the rank it names (None: any), the number
    of elements of its tensor (for a receive, of its buffer; None: no tensor, or a line without the number), and
    whether the call was waited for (send and recv always are; an isend or irecv once the answer waited for its
    request: RequestWatcher)."""

    op: str
    peer: int | None
    elements: int | None = None
    waited: bool = True


def memory_span(tensor) -> tuple[int, int] | None:
    """(first byte, byte after the last) of the memory a contiguous tensor's elements take; None for anything else.
    Two requests in flight whose spans overlap, one of them a receive, make what is sent or received a matter of
    timing (lessons 02 and 15 refuse it)."""
    if not torch.is_tensor(tensor) or not tensor.numel() or not tensor.is_contiguous():
        return None
    return tensor.data_ptr(), tensor.data_ptr() + tensor.numel() * tensor.element_size()


def log_path(directory: str, rank: int) -> str:
    """The file rank `rank` logs its calls to."""
    return os.path.join(directory, f"rank-{rank}.p2p")


@contextlib.contextmanager
def watching_point_to_point(watch: Callable[[str, Any, Any], None],
                            waited: Callable[[int], None] | None = None) -> Iterator[None]:
    """Inside a rank: call `watch(op, tensor, peer)` before every send/isend/recv/irecv the block makes, with the
    tensor and the rank the call was given (None where it was not given); with `waited`, call `waited(number)`
    when the answer waits for the request (RequestWatcher) of the block's isend or irecv
    number `number`, counting every watched call from 1 (`watching_requests`: called as the wait starts, so a rank
    blocked in it has waited).

    Only the outermost call is watched (torch's dist.recv calls dist.irecv itself).
    """
    depth, count = [], [0]

    def watched(name):
        def make(original):
            def call(*args, **kwargs):
                outermost = not depth
                if outermost:
                    count[0] += 1
                    watch(name, args[0] if args else kwargs.get("tensor"), _peer(name, args, kwargs))
                number = count[0]
                depth.append(1)
                try:
                    request = original(*args, **kwargs)
                finally:
                    depth.pop()
                if outermost and waited is not None and name in ("isend", "irecv") and request is not None:
                    requests.watch(request, lambda: waited(number))
                return request
            return call
        return make

    with watching_requests() as requests, replacing_dist_calls({name: watched(name) for name in _PEER}):
        yield


def _peer(name: str, args: tuple, kwargs: dict):
    """The global rank a send/isend/recv/irecv call names as its peer: `dst`/`src`, else `group_dst`/`group_src` (how
    dist.batch_isend_irecv passes a P2POp's peer) translated to a global rank through the call's group; None where
    none is given."""
    peer = args[1] if len(args) > 1 else kwargs.get(_PEER[name])
    in_group = kwargs.get(f"group_{_PEER[name]}")
    if peer is not None or in_group is None:
        return peer
    group = kwargs.get("group", args[2] if len(args) > 2 else None)
    return in_group if group is None or group is dist.group.WORLD else dist.get_global_rank(group, in_group)


@contextlib.contextmanager
def logging_point_to_point(path: str) -> Iterator[None]:
    """Inside a rank: append 'op peer elements' to `path` before every send/isend/recv/irecv the block makes
    ('-' for a peer or a tensor that is missing); 'waited n' once the request of the n-th call (an isend or irecv)
    has been waited for; 'returned' at the end.

    Only the outermost call is logged (`watching_point_to_point`).
    """
    with open(path, "a", buffering=1, encoding="utf-8") as log:  # line-buffered: a hang still leaves the lines
        def write(op, tensor, peer):
            log.write(f"{op} {peer if isinstance(peer, int) else '-'} "
                      f"{tensor.numel() if torch.is_tensor(tensor) else '-'}\n")

        done: set[int] = set()

        def waited(number: int) -> None:
            if number not in done:
                done.add(number)
                log.write(f"waited {number}\n")

        with watching_point_to_point(write, waited):
            yield
        log.write("returned\n")


def read_log(path: str) -> tuple[list[Call], bool] | None:
    """One rank's log: (its calls in order, whether the logged block returned), or None if the file is missing.

    A line 'op peer', without the number of elements, reads as a call whose elements are None; an isend or irecv
    without a later 'waited n' line, as one never waited for.
    """
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().split("\n")
    except OSError:
        return None
    calls, waited = [], set()
    for line in lines:
        op, _, numbers = line.partition(" ")
        if op in _PEER:
            peer, _, elements = numbers.partition(" ")
            calls.append(Call(op, _integer(peer), _integer(elements), op in ("send", "recv")))
        elif op == "waited":
            waited.add(_integer(numbers))
    calls = [replace(call, waited=True) if number in waited else call
             for number, call in enumerate(calls, 1)]
    return calls, "returned" in lines


def read_logs(directory: str, world_size: int) -> dict[int, tuple[list[Call], bool]] | None:
    """{rank: (its calls in order, whether the logged block returned)}, or None if a log is missing (`read_log`)."""
    logs = {rank: read_log(log_path(directory, rank)) for rank in range(world_size)}
    return None if None in logs.values() else logs


def _integer(word: str) -> int | None:
    return int(word) if word.lstrip("-").isdigit() else None


def call_in_words(rank: int, number: int, call: Call) -> str:
    """A logged call as the feedback names it: "rank 1's call 4, dist.isend with dst=2" (`number` counts from 1)."""
    return f"rank {rank}'s call {number}, dist.{call.op} with {_PEER[call.op]}={call.peer}"


def non_neighbour_calls(logs: dict[int, tuple[list[Call], bool]], world_size: int) -> list[str]:
    """Each call that names a rank that is not rank - 1 or rank + 1 (itself, a distant rank, none at all)."""
    found = []
    for rank, (calls, _) in logs.items():
        for index, call in enumerate(calls):
            if call.peer in (rank - 1, rank + 1) and 0 <= call.peer < world_size:
                continue
            why = ("itself" if call.peer == rank else "no rank at all" if call.peer is None
                   or not 0 <= call.peer < world_size else "a rank that is not a neighbour stage")
            found.append(f"{call_in_words(rank, index + 1, call)}, names {why}")
            break
    return found


@dataclass(frozen=True)
class Wait:
    """A stuck rank waiting in a receive: for message `wanted` from `peer`, which sent it `sent` messages in all
    and has `returned` from the answer, or not."""

    rank: int
    peer: int
    wanted: int
    sent: int
    returned: bool


def stuck_receives(logs: dict[int, tuple[list[Call], bool]], stuck: dict[int, str | None]) -> list[Wait]:
    """For each stuck rank whose last call is a receive: which message it waits for, and what its peer did.

    `stuck` maps each stuck rank to the torch.distributed call its stack shows it in (None: outside any, as in an
    irecv's .wait()): a blocking recv still waiting shows in its stack, so a rank whose last logged call is a recv
    but whose stack is elsewhere has returned from it and waits in something else.
    """
    found = []
    for rank in sorted(stuck):
        calls, _ = logs[rank]
        if not calls or calls[-1].op not in RECEIVES or calls[-1].peer is None:
            continue
        if calls[-1].op == "recv" and stuck[rank] != "recv":
            continue
        peer = calls[-1].peer
        peer_calls, peer_returned = logs.get(peer, ([], False))
        found.append(Wait(rank, peer, _count(calls, peer), sum(1 for call in peer_calls if call.op in SENDS and
                                                                call.peer == rank), peer_returned))
    return found


def waits(logs: dict[int, tuple[list[Call], bool]], stuck: dict[int, str | None]) -> list[str]:
    """`stuck_receives` in words: which message each stuck rank waits for, and what its peer did."""
    said = []
    for wait in stuck_receives(logs, stuck):
        peer_calls, _ = logs.get(wait.peer, ([], False))
        if wait.returned:
            doing = "and returned"
        elif wait.peer in stuck and peer_calls and peer_calls[-1].op in RECEIVES:
            doing = (f"and itself waits for message {_count(peer_calls, peer_calls[-1].peer)} from rank "
                     f"{peer_calls[-1].peer}")
        else:
            doing = "and is still running"
        said.append(f"rank {wait.rank} waits for message {wait.wanted} from rank {wait.peer}, which has sent it "
                    f"{wait.sent} {doing}")
    return said


def calls_never_waited(rank: int, calls: list[Call], ops: tuple[str, ...] = ("isend", "irecv")) -> list[str]:
    """Each call of `ops` among rank `rank`'s logged calls (`read_log`) whose request was never waited for, in
    words (`call_in_words`): lesson 07 refuses unwaited isends and irecvs, lesson 15 unwaited irecvs."""
    return [call_in_words(rank, number, call) for number, call in enumerate(calls, 1)
            if call.op in ops and not call.waited]


def receives_never_waited(calls: dict[int, list[Call]], noun: str = "requests") -> str | None:
    """'rank 0 waited for none of its 2 dist.irecv requests' for each rank ({rank: its calls}) that started irecvs
    and called wait() on none of them; None if there is none. A rank that waits on some and not (yet) on others,
    as one that posts its receives ahead does, is not named: it may be blocked in the wait of the next. `noun`:
    what the lesson calls the object irecv returns."""
    said = []
    for rank, transfers in sorted(calls.items()):
        receives = [transfer for transfer in transfers if transfer.op == "irecv"]
        if receives and not any(transfer.waited for transfer in receives):
            said.append(f"rank {rank} waited for none of its {len(receives)} dist.irecv {noun}")
    return "; ".join(said) or None


def _count(calls: list[Call], peer: int | None) -> int:
    return sum(1 for call in calls if call.op in RECEIVES and call.peer == peer)


def segfaulted(failure) -> bool:
    """Whether a rank died of SIGSEGV. `failure`: a `ddp_lab.launcher.errors.RankFailure`.

    Gloo does not check the peer of a send or receive: one that names no rank of the group
    (rank + 1 on the last rank) reads past its list of peers, and the rank either waits forever
    or dies with SIGSEGV inside the call (both seen with torch 2.13: lesson 15's ring about one
    run in five, lesson 07's pipeline in a fresh-clone CI run). A check must explain the crash
    as it explains the hang: from the calls each rank logged (lesson 07), or from the call the
    crash happened in (`crashed_in`, lesson 15).
    """
    return failure.kind == "crashed" and failure.returncode == -signal.SIGSEGV


def crashed_in(failure) -> str | None:
    """The torch.distributed point-to-point call a rank segfaulted in ('isend', 'recv', ...), or None.

    Read from torch's own frame in the crash's stack dump (distributed_c10d.py), which the output
    tail may have cut: None then, as for a crash elsewhere (see `segfaulted`).
    """
    call = _CALL_FRAME.search(failure.details) if segfaulted(failure) else None
    return call.group(1) if call else None

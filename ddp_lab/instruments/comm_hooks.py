"""DDP communication hooks, measured: the bytes a hook hands to collectives, and when each bucket ran.

DDP calls a comm hook once per gradient bucket during backward: `hook(state, bucket)` gets the
bucket's flat gradient (`bucket.buffer()`) and returns a Future of the averaged tensor. Its
own all-reduce (no hook) runs in C++, out of Python's sight, so to count the uncompressed
baseline register torch's `allreduce_hook`, which does exactly the same in Python.

Bytes are counted by wrapping `torch.distributed`'s collectives inside the rank: what a rank
*hands* to a collective per step (its payload; for a reduce_scatter, the shard it gets back: `COUNTED`).
A ring all-reduce then puts 2 (W - 1) / W times that on the rank's link. An all_to_all counts every chunk a rank
hands in (its own chunk, which stays, among them), a scatter the list its source hands out (the other ranks send
nothing).

Introduced in notebooks/11-performance-and-scaling.ipynb.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import torch

from ddp_lab.instruments.collectives import CollectiveCall, watching_collectives   # lesson 08's wrapping

# Collectives a hook may call: the position and keyword of the argument counted. What this rank sends, except for
# reduce_scatter, counted by the shard this rank gets back: an all-reduce built from a reduce_scatter and an
# all_gather then counts what all_reduce counts, while a float32 reduce_scatter still counts 4 bytes a value. reduce
# and gather count what this rank sends to the one rank, so a sum made there and broadcast counts both ways.
COUNTED = {"all_reduce": (0, "tensor"), "all_gather": (1, "tensor"),
           "all_gather_into_tensor": (1, "input_tensor"), "all_gather_single": (1, "input_tensor"),
           "broadcast": (0, "tensor"), "reduce": (0, "tensor"), "gather": (0, "tensor"),
           "reduce_scatter": (0, "output"), "reduce_scatter_tensor": (0, "output"),
           "reduce_scatter_single": (0, "output"), "all_to_all": (1, "input_tensor_list"),
           "all_to_all_single": (1, "input"), "scatter": (1, "scatter_list")}


class ByteCounter:
    """Records every collective this rank calls while `counting()` is active; `take()` empties it.

    Example (inside a rank):
        >>> counter = ByteCounter()
        >>> with counter.counting():
        ...     dist.all_reduce(torch.ones(10))
        >>> counter.take()
        [CollectiveCall(name='all_reduce', shape=(10,), dtype=torch.float32, numel=10, nbytes=40)]

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """

    def __init__(self):
        self.calls: list[CollectiveCall] = []
        self._lock = threading.Lock()  # PowerSGD calls its second all-reduce from a future's callback thread

    def record(self, op: str, tensors) -> None:
        tensors = tensors if isinstance(tensors, (list, tuple)) else [tensors]
        with self._lock:
            for tensor in tensors:
                self.calls.append(CollectiveCall.of(op, tensor))

    def take(self) -> list[CollectiveCall]:
        """The calls recorded since the last take(), oldest first; the record starts empty again."""
        with self._lock:
            calls, self.calls = self.calls, []
        return calls

    @contextlib.contextmanager
    def counting(self) -> Iterator[ByteCounter]:
        """Wrap torch.distributed's collectives (module attributes, so hooks that call `dist.all_reduce` are seen);
        a collective that runs another is counted once, as itself."""
        with watching_collectives(COUNTED, self.record, outermost_only=True):
            yield self


def total_bytes(calls: Iterable[CollectiveCall]) -> int:
    """Sum of the bytes of some recorded calls.

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    return sum(call.nbytes for call in calls)


class BucketEvent(NamedTuple):
    """One bucket in one step: its index, its element count, when the hook launched it, when its future completed."""

    index: int
    numel: int
    launched: float
    done: float


def timed_hook(hook, events: list[BucketEvent]):
    """Wrap a comm hook so that every bucket appends a BucketEvent (perf_counter times) to `events`.

    Example (inside a rank):
        >>> from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
        >>> events = []
        >>> ddp_model.register_comm_hook(None, timed_hook(allreduce_hook, events))

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """

    def timed(state, bucket):
        index, numel, launched = bucket.index(), bucket.buffer().numel(), time.perf_counter()

        def finished(future):
            events.append(BucketEvent(index, numel, launched, time.perf_counter()))
            return future.value()

        return hook(state, bucket).then(finished)

    return timed


def hidden_seconds(events: Iterable[BucketEvent], backward_began: float, last_launch: float) -> float:
    """Seconds of bucket all-reduces that ran while backward was still computing gradients.

    Backward computes until the last bucket is ready (`last_launch`); an all-reduce that runs
    before that hides behind computation, the rest is exposed (backward waits for it).

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    return sum(max(0.0, min(e.done, last_launch) - max(e.launched, backward_began)) for e in events)

"""Watch what a rank hands to `torch.distributed`: calls, elements and bytes, seen by wrapping the calls.

The one place that replaces `torch.distributed` functions inside a rank and puts them back
(`replacing_dist_calls`): counting collectives (lessons 08, 11), and the checks that record
or refuse what an answer calls (lessons 01, 02, 04, 09, 14).

Introduced in notebooks/08-tensor-parallelism.ipynb; lesson 14 counts its all-to-alls with it.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import weakref
from typing import Callable, Iterator, NamedTuple

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

# Collectives whose first argument is the tensor the rank contributes (and receives in place).
IN_PLACE = ("all_reduce", "broadcast")
# Collectives whose first argument is the output buffer: where what the rank sends is instead.
SENT_ARGUMENT = {"all_to_all_single": (1, "input")}


class CollectiveCall(NamedTuple):
    """One collective call on this rank: its name, the tensor's shape and dtype, elements and bytes.

    The one record of a watched call: `count_collectives` (lesson 08) and the comm-hook
    `ByteCounter` (lesson 11) both fill lists of it.
    """

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    numel: int
    nbytes: int

    @classmethod
    def of(cls, name: str, tensor) -> CollectiveCall:
        """The record of `name` called with `tensor` as what this rank sends."""
        return cls(name, tuple(tensor.shape), tensor.dtype, tensor.numel(), tensor.numel() * tensor.element_size())


@contextlib.contextmanager
def count_collectives(names: tuple[str, ...] = ("all_reduce",)) -> Iterator[list[CollectiveCall]]:
    """Inside a rank: record every call of the named `torch.distributed` collectives.

    Wraps `dist.<name>` (and its definition in `distributed_c10d`) for the duration of the
    block, so code that calls `dist.all_reduce(t)` (autograd Functions included, in forward
    and in backward) is counted with `t.numel() * t.element_size()` bytes, the payload the
    rank hands over. For `all_to_all_single(output, input, ...)` that payload is `input`
    (`SENT_ARGUMENT`; lesson 14), every other name's is its first argument. Collectives torch issues internally through other paths (DTensor's
    functional collectives, DDP's C++ reducer) are not seen: count those with
    `CommDebugMode` (see `dtensor_api`).

    Args:
        names: which collectives to wrap; each takes the tensor it sends as its first argument,
            except those in `SENT_ARGUMENT`.

    Yields:
        The list that fills with one `CollectiveCall` per call.

    Example:
        >>> with count_collectives() as calls:      # inside a launched rank
        ...     dist.all_reduce(torch.ones(3))
        >>> calls
        [CollectiveCall(name='all_reduce', shape=(3,), dtype=torch.float32, numel=3, nbytes=12)]

    Introduced in notebooks/08-tensor-parallelism.ipynb.
    """
    unknown = [name for name in names if not hasattr(c10d, name)]
    if unknown:
        raise ValueError(f"count_collectives: torch.distributed has no collective named {unknown}; "
                         f"pass names such as {IN_PLACE}.")
    calls: list[CollectiveCall] = []

    def record(name, tensor):
        calls.append(CollectiveCall.of(name, tensor))

    with watching_collectives({name: SENT_ARGUMENT.get(name, (0, "tensor")) for name in names}, record):
        yield calls


@contextlib.contextmanager
def watching_collectives(arguments: dict[str, tuple[int, str]], on_call: Callable,
                         outermost_only: bool = False) -> Iterator[None]:
    """Inside a rank: call `on_call(name, sent)` before each of the named collectives runs.

    Wraps `dist.<name>` and its definition in `torch.distributed.distributed_c10d` (module
    attributes, so code that calls `dist.all_reduce(...)` is seen, autograd Functions and comm
    hooks included) and puts the originals back when the block ends. Names this torch lacks are
    skipped (`all_gather_single` exists only from torch 2.13).

    Args:
        arguments: {collective name: (position, keyword)} of the argument that holds what this
            rank sends (a tensor, or a list of tensors for the list forms).
        on_call: called with the collective's name and that argument; calls without it are not passed on.
        outermost_only: pass on only calls made outside another watched call of the same thread (dist.send
            runs isend, and broadcast_object_list runs broadcast: each is then counted once, as the answer made it).

    Example:
        >>> seen = []
        >>> with watching_collectives({"all_reduce": (0, "tensor")}, lambda name, t: seen.append(name)):
        ...     dist.all_reduce(torch.ones(3))                # inside a launched rank
        >>> seen
        ['all_reduce']

    Introduced in notebooks/08-tensor-parallelism.ipynb (under `count_collectives`); lesson 11's
    `ddp_lab.instruments.comm_hooks.ByteCounter` watches DDP comm hooks with it.
    """
    running = threading.local()   # per thread: how many watched calls it is inside now (a comm hook's callback
    # thread calls collectives of its own while the main thread may be inside one)

    def watched(name, position, keyword):
        def wrap(original):
            def call(*args, **kwargs):
                sent = args[position] if len(args) > position else kwargs.get(keyword)
                depth = getattr(running, "depth", 0)
                if sent is not None and not (outermost_only and depth):
                    on_call(name, sent)
                running.depth = depth + 1
                try:
                    return original(*args, **kwargs)
                finally:
                    running.depth = depth
            call.__name__ = name
            return call
        return wrap

    known = {name: watched(name, *where) for name, where in arguments.items() if getattr(c10d, name, None) is not None}
    with replacing_dist_calls(known):
        yield


def call_arguments(function: Callable, args: tuple, kwargs: dict) -> dict | None:
    """What a call of `function` passes for each of its parameters, by name, defaults filled in.

    For `dist.all_reduce(t, async_op=True)`: {"tensor": t, "op": ReduceOp.SUM, "group": None,
    "async_op": True}, however the call spelled them (by position or keyword). None where the
    arguments do not fit the signature: the call itself then raises torch's own error. The checks
    of lessons 01, 09 and 14 read with it what an answer gave `dist.all_reduce`.
    """
    try:
        bound = inspect.signature(function).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    bound.apply_defaults()
    return dict(bound.arguments)


@contextlib.contextmanager
def replacing_dist_calls(replacements: dict[str, Callable[[Callable], Callable]]) -> Iterator[None]:
    """Inside a rank: replace `torch.distributed` functions for the block, then put the originals back.

    Each `dist.<name>` and its definition in `torch.distributed.distributed_c10d` become
    `make(original)` (module attributes, so every caller that looks them up is seen: the
    learner's code, autograd Functions, comm hooks, and c10d's own functions that call each
    other, e.g. `recv` calling `irecv`); where both modules hold the same function, both get the same
    stand-in (`dist.P2POp` accepts only `isend`/`irecv` themselves). A name a module lacks is left alone there.

    Args:
        replacements: {function name: make}, where `make(original)` returns what stands in for it.

    Example:
        >>> def loud(original):
        ...     def call(*args, **kwargs):
        ...         print("all_reduce!")
        ...         return original(*args, **kwargs)
        ...     return call
        >>> with replacing_dist_calls({"all_reduce": loud}):   # inside a launched rank
        ...     dist.all_reduce(torch.ones(3))
        all_reduce!

    Introduced in notebooks/02-collectives.ipynb (its checks refuse collectives with it).
    """
    saved = {}
    for name, make in replacements.items():
        made = {}   # one stand-in per original: `dist.isend is c10d.isend` must stay true (P2POp compares them)
        for module in (dist, c10d):
            original = getattr(module, name, None)
            if original is not None:
                saved[module, name] = original
                if id(original) not in made:
                    made[id(original)] = make(original)
                setattr(module, name, made[id(original)])
    try:
        yield
    finally:
        for (module, name), original in saved.items():
            setattr(module, name, original)


class RequestWatcher:
    """The requests (work handles) an answer was given, and a callback for each that runs when the answer waits for
    the request: calls its wait(), an is_completed() that returns True, or waits for the future its get_future()
    gave (that future's wait() or value(), a done() that returns True, torch.futures.wait_all over it, or a wait for
    the future torch.futures.collect_all made of it). `watching_requests` yields one.

    Requests are held by weak reference, so a request the answer drops is freed as it would be unwatched.
    """

    def __init__(self):
        self._watched: dict[int, tuple[weakref.ref, Callable[[], None]]] = {}
        self._futures: dict[int, tuple[object, object]] = {}   # id(future) -> (the future, its request)
        self._combined: dict[int, tuple[object, list]] = {}    # id(collect_all's future) -> (it, the futures given)

    def watch(self, request, used: Callable[[], None]) -> None:
        """Call `used()` each time the answer waits for `request` (the ways named above)."""
        self._watched[id(request)] = (weakref.ref(request), used)

    def _seen(self, request) -> None:
        reference, used = self._watched.get(id(request), (None, None))
        if reference is not None and reference() is request:
            used()

    def _future_seen(self, future) -> None:
        held, request = self._futures.get(id(future), (None, None))
        if held is future:
            self._seen(request)
        combined, given = self._combined.get(id(future), (None, ()))
        if combined is future:
            for each in given:
                self._future_seen(each)


@contextlib.contextmanager
def watching_requests() -> Iterator[RequestWatcher]:
    """Inside a rank: a `RequestWatcher` for the block, its callbacks run from `dist.Work`'s own methods and those of
    the futures get_future() gives.

    The methods are replaced on the classes for the block (and put back after it), not on stand-in objects, so what
    the answer holds is torch's request itself: `isinstance(request, dist.Work)` and `dist.Work.wait(request)` behave
    as they do unwatched. A wait's callback runs when the wait is called, before it returns: a rank blocked inside
    wait() has called it. A check that asked is_completed() or took the future without waiting learns nothing from
    it: the result may have been read before it arrived. Lessons 01, 02, 04, 07, 09, 10 and 14's checks tell with it
    an async request never waited for.
    """
    watcher = RequestWatcher()
    future_type = torch._C.Future
    originals = {(dist.Work, name): getattr(dist.Work, name) for name in ("wait", "is_completed", "get_future")}
    originals.update({(future_type, name): getattr(future_type, name) for name in ("wait", "value", "done")})

    def waiting(original, seen):
        def method(self, *args, **kwargs):
            seen(self)
            return original(self, *args, **kwargs)
        return method

    def if_true(original, seen):
        def method(self, *args, **kwargs):
            answer = original(self, *args, **kwargs)
            if answer:
                seen(self)
            return answer
        return method

    def future_of(original):
        def method(self, *args, **kwargs):
            future = original(self, *args, **kwargs)
            watcher._futures[id(future)] = (future, self)
            return future
        return method

    def all_waited(original):   # torch.futures.wait_all(futures): every future waited for
        def function(futures, *args, **kwargs):
            for future in futures:
                watcher._future_seen(future)
            return original(futures, *args, **kwargs)
        return function

    def collected(original):    # torch.futures.collect_all(futures): waiting for its future waits for them all
        def function(futures, *args, **kwargs):
            combined = original(futures, *args, **kwargs)
            watcher._combined[id(combined)] = (combined, list(futures))
            return combined
        return function

    originals.update({(torch.futures, name): getattr(torch.futures, name) for name in ("wait_all", "collect_all")})
    replacements = {(dist.Work, "wait"): waiting(originals[dist.Work, "wait"], watcher._seen),
                    (dist.Work, "is_completed"): if_true(originals[dist.Work, "is_completed"], watcher._seen),
                    (dist.Work, "get_future"): future_of(originals[dist.Work, "get_future"]),
                    (future_type, "wait"): waiting(originals[future_type, "wait"], watcher._future_seen),
                    (future_type, "value"): waiting(originals[future_type, "value"], watcher._future_seen),
                    (future_type, "done"): if_true(originals[future_type, "done"], watcher._future_seen),
                    (torch.futures, "wait_all"): all_waited(originals[torch.futures, "wait_all"]),
                    (torch.futures, "collect_all"): collected(originals[torch.futures, "collect_all"])}
    for (owner, name), replacement in replacements.items():
        setattr(owner, name, replacement)
    try:
        yield watcher
    finally:
        for (owner, name), original in originals.items():
            setattr(owner, name, original)

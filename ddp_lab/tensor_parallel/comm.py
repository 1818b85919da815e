"""Count what a rank hands to collectives: calls, elements and bytes, measured by wrapping them.

Introduced in notebooks/08-tensor-parallelism.ipynb.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, NamedTuple

# Collectives whose first argument is the tensor the rank contributes (and receives in place).
IN_PLACE = ("all_reduce", "broadcast")


class CollectiveCall(NamedTuple):
    """One collective call on this rank: its name, the tensor's shape, elements and bytes."""

    name: str
    shape: tuple[int, ...]
    numel: int
    nbytes: int


@contextlib.contextmanager
def count_collectives(names: tuple[str, ...] = ("all_reduce",)) -> Iterator[list[CollectiveCall]]:
    """Inside a rank: record every call of the named `torch.distributed` collectives.

    Wraps `dist.<name>` (and its definition in `distributed_c10d`) for the duration of the
    block, so code that calls `dist.all_reduce(t)` (autograd Functions included, in forward
    and in backward) is counted with `t.numel() * t.element_size()` bytes, the payload the
    rank hands over. Collectives torch issues internally through other paths (DTensor's
    functional collectives, DDP's C++ reducer) are not seen: count those with
    `CommDebugMode` (see `dtensor_api`).

    Args:
        names: which collectives to wrap; each takes the tensor as its first argument.

    Yields:
        The list that fills with one `CollectiveCall` per call.

    Example:
        >>> with count_collectives() as calls:      # inside a launched rank
        ...     dist.all_reduce(torch.ones(3))
        >>> calls
        [CollectiveCall(name='all_reduce', shape=(3,), numel=3, nbytes=12)]

    Introduced in notebooks/08-tensor-parallelism.ipynb.
    """
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    unknown = [name for name in names if not hasattr(c10d, name)]
    if unknown:
        raise ValueError(f"count_collectives: torch.distributed has no collective named {unknown}; "
                         f"pass names such as {IN_PLACE}.")
    calls: list[CollectiveCall] = []
    saved = {name: (getattr(dist, name), getattr(c10d, name)) for name in names}

    def recording(name, original):
        def wrapper(tensor, *args, **kwargs):
            calls.append(CollectiveCall(name, tuple(tensor.shape), tensor.numel(),
                                        tensor.numel() * tensor.element_size()))
            return original(tensor, *args, **kwargs)
        return wrapper

    for name, (public, defined) in saved.items():
        setattr(dist, name, recording(name, public))
        setattr(c10d, name, recording(name, defined))
    try:
        yield calls
    finally:
        for name, (public, defined) in saved.items():
            setattr(dist, name, public)
            setattr(c10d, name, defined)

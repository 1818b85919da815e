"""A process group of N ranks in one process whose collectives move nothing: to count a full-size model's shards.

Why a helper: torch ships the "fake" backend only in its testing package
(`torch.testing._internal.distributed.fake_pg`: importing it registers the backend; `FakeStore`
is its rendezvous). The module has kept that name and API through the course's range
(torch 2.8-2.15), but it is private, so the lab reaches it through here and nowhere else.
Under `FakeTensorMode` the collectives also need Meta kernels (they say what a collective
returns without running it). Newer torch registers them in `torch.distributed._meta_registrations`
(2.13, 2.15); torch 2.8 keeps the same table in `torch.distributed._tools.fake_collectives`,
registered when imported (without it 2.8 raised UnsupportedOperatorException for
c10d._allgather_base_): `fake_process_group` imports whichever this torch has.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util

import torch.distributed as dist


@contextlib.contextmanager
def fake_process_group(world_size: int, rank: int = 0):
    """Be rank `rank` of a fake default process group of `world_size` ranks for the block, then leave it.

    Collectives on it check their arguments and return at once (no data moves), so FSDP2 and
    DTensor shard and run as they would on `world_size` GPUs. Refuses to replace a process
    group the caller already has.

    Example:
        >>> with fake_process_group(8):
        ...     dist.get_world_size()
        8

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    from torch.testing._internal.distributed.fake_pg import FakeStore   # lazy: a testing module, registers "fake"

    _register_collective_meta_kernels()
    if dist.is_initialized():
        raise RuntimeError("a process group is already initialised in this process: count full-size models in "
                           "a process of their own (or call dist.destroy_process_group() first)")
    dist.init_process_group("fake", rank=rank, world_size=world_size, store=FakeStore())
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def _register_collective_meta_kernels() -> None:
    """Make c10d's collectives runnable on fake tensors, on every torch of the range (module docstring)."""
    if importlib.util.find_spec("torch.distributed._meta_registrations") is not None:
        importlib.import_module("torch.distributed._meta_registrations")      # torch 2.13, 2.15
    else:
        importlib.import_module("torch.distributed._tools.fake_collectives")  # torch 2.8: registers on import

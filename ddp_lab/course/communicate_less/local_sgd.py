"""LocalSGD: every replica takes H optimizer steps on its own data, then the replicas average parameters.

At H = 1 with plain SGD it is data parallelism: averaging `p - lr·g_r` over the replicas gives
`p - lr·mean(g_r)`, the step DDP takes with averaged gradients (equal up to float rounding, since
the two sums round differently). At H > 1 the replicas drift apart between averages, and the
traffic falls to one parameter all-reduce every H steps (Stich, "Local SGD converges fast and
communicates little", 2019, arXiv:1805.09767; Lin et al., "Don't use large mini-batches, use
local SGD", 2020, arXiv:1808.07217).

Introduced in notebooks/16-communicate-less.ipynb.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


def world() -> int:
    """Replicas in the default process group; 1 without one (the same code runs in one process)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


@torch.no_grad()
def average_parameters(model: nn.Module) -> None:
    """Replace every parameter of `model` by its mean over the replicas (one all-reduce of them all, flattened).

    Example:
        >>> average_parameters(model)      # inside a rank: now equal on every rank

    Introduced in notebooks/16-communicate-less.ipynb.
    """
    replicas = world()
    if replicas == 1:
        return
    params = list(model.parameters())
    flat = torch.cat([p.reshape(-1) for p in params])     # one message, as DDP's buckets
    dist.all_reduce(flat)
    for parameter, mean in zip(params, (flat / replicas).split([p.numel() for p in params])):
        parameter.copy_(mean.reshape(parameter.shape))


def local_sgd_step(model: nn.Module, step: int, sync_every: int) -> bool:
    """After the optimizer step of step `step` (counted from 0): average the parameters every `sync_every` steps.

    Returns whether this step synchronised.

    Introduced in notebooks/16-communicate-less.ipynb.
    """
    if sync_every < 1:
        raise ValueError(f"sync_every must be at least 1 (1 = every step, as DDP); got {sync_every}.")
    if (step + 1) % sync_every:
        return False
    average_parameters(model)
    return True


def bytes_per_step(model: nn.Module, sync_every: int) -> float:
    """What each replica hands to all-reduce per training step, on average: its parameters' bytes / H.

    Introduced in notebooks/16-communicate-less.ipynb.
    """
    return sum(p.numel() * p.element_size() for p in model.parameters()) / sync_every

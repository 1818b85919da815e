"""Counting the bytes a rank really holds: parameters, gradients, optimizer state, DTensor shards.

What `ddp_lab.course.sharding.state_bytes.state_bytes_per_rank` predicts is checked against these
counts (lesson 09 by hand and with FSDP2, lesson 13's planner on real runs).

Introduced in notebooks/09-zero-and-fsdp.ipynb.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def tensor_bytes(tensor: torch.Tensor) -> int:
    """Bytes of the values this rank stores for `tensor`: numel * element_size.

    A DTensor (FSDP2's sharded parameters, their gradients and Adam state) counts only its
    local shard, which is what the rank actually holds.

    Example:
        >>> tensor_bytes(torch.zeros(3, 4))   # 12 fp32 values
        48

    Introduced in notebooks/09-zero-and-fsdp.ipynb.
    """
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor  # DTensor -> this rank's shard
    return local.numel() * local.element_size()


def measured_state_bytes(params: Iterable[torch.Tensor], optimizer: torch.optim.Optimizer | None = None,
                         extra_grads: Iterable[torch.Tensor] = ()) -> dict[str, int]:
    """Measured bytes this rank holds for parameters, gradients and optimizer state.

    Args:
        params: the tensors this rank stores as weights (a model's parameters, or the shards a
            hand-written ZeRO keeps); their `.grad` counts as gradients where it is set.
        optimizer: its per-value `state` tensors count as optimizer state.
        extra_grads: gradient tensors kept outside `.grad` (a hand-written ZeRO-2 shard).

    Returns:
        {'params', 'grads', 'optimizer'} -> bytes. Adam's per-parameter `step` counter is left
        out: it is one scalar per parameter tensor, not per value (ZeRO's formula ignores it).

    Example:
        >>> model = torch.nn.Linear(4, 2)
        >>> measured_state_bytes(model.parameters())
        {'params': 40, 'grads': 0, 'optimizer': 0}

    Introduced in notebooks/09-zero-and-fsdp.ipynb.
    """
    params = list(params)
    grads = [p.grad for p in params if p.grad is not None] + list(extra_grads)
    return {"params": sum(tensor_bytes(p) for p in params),
            "grads": sum(tensor_bytes(g) for g in grads),
            "optimizer": optimizer_state_bytes(optimizer) if optimizer is not None else 0}


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of an optimizer's per-value state (Adam: exp_avg, exp_avg_sq), without `step` counters.

    Introduced in notebooks/09-zero-and-fsdp.ipynb.
    """
    return sum(tensor_bytes(value) for state in optimizer.state.values() for name, value in state.items()
               if torch.is_tensor(value) and name != "step")

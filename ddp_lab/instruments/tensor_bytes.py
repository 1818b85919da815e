"""Counting the bytes a rank really holds: parameters, gradients, optimizer state, DTensor shards,
and what autograd saves for backward (`saved_for_backward`, lesson 15).

What `ddp_lab.course.sharding.state_bytes.state_bytes_per_rank` predicts is checked against these
counts (lesson 09 by hand and with FSDP2, lesson 13's planner on real runs).

Introduced in notebooks/09-zero-and-fsdp.ipynb.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

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


class SavedTensors(dict):
    """{storage address: bytes} of the tensors autograd saved for backward; `.total` is their sum.

    Introduced in notebooks/15-long-sequences.ipynb.
    """

    @property
    def total(self) -> int:
        return sum(self.values())


@contextlib.contextmanager
def saved_for_backward() -> Iterator[SavedTensors]:
    """Record every tensor autograd saves for backward inside the block, each storage once.

    Uses `torch.autograd.graph.saved_tensors_hooks`: every tensor an operation keeps for its
    backward (and every `ctx.save_for_backward` of a custom Function) passes through the pack
    hook. A view shares its base's storage, so `k` and `k.transpose(-2, -1)` count once, and a
    tensor saved by two operations (softmax's output, which the next matmul saves too) counts once.

    Example:
        >>> x = torch.randn(4, 4, requires_grad=True)
        >>> with saved_for_backward() as saved:
        ...     y = (x @ x).sum()
        >>> saved.total          # x, once (saved as both operands of the matmul)
        64

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    saved = SavedTensors()

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        yield saved

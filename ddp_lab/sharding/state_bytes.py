"""Model-state memory per rank: count what a rank holds, and the ZeRO formula it must equal.

Model state is what training keeps between steps besides activations: the parameters, their
gradients and the optimizer state (Adam: exp_avg and exp_avg_sq per parameter). Per
parameter, fp32 Adam costs 4 + 4 + 8 = 16 bytes; mixed precision (bf16/fp16 weights and
gradients, an fp32 master copy plus Adam's two fp32 moments) costs 2 + 2 + 12 = 16 bytes too.
ZeRO (Rajbhandari et al. 2020, https://arxiv.org/abs/1910.02054) divides that by the world
size component by component: stage 1 the optimizer state, stage 2 also the gradients, stage 3
(FSDP) also the parameters.

Introduced in notebooks/09-zero-and-fsdp.ipynb.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

COMPONENTS = ("params", "grads", "optimizer")
# bytes per parameter of (params, grads, optimizer state)
PRECISIONS = {
    "fp32": (4, 4, 8),    # fp32 weight, fp32 gradient, Adam's exp_avg + exp_avg_sq in fp32
    "mixed": (2, 2, 12),  # bf16/fp16 weight and gradient; fp32 master weight + exp_avg + exp_avg_sq
}
# which components each ZeRO stage divides by the world size (stage 0 is plain DDP)
SHARDED_BY_STAGE = {0: (), 1: ("optimizer",), 2: ("grads", "optimizer"), 3: ("params", "grads", "optimizer")}


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


def model_state_bytes(params: Iterable[torch.Tensor], optimizer: torch.optim.Optimizer | None = None,
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
        >>> model_state_bytes(model.parameters())
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


def state_bytes_per_rank(n_params: int, stage: int, world_size: int, precision: str = "fp32") -> dict[str, int]:
    """The ZeRO formula: bytes of params, grads and optimizer state one rank holds between steps.

    Stage 0 is DDP (everything replicated); stage 1 shards the optimizer state, stage 2 also
    the gradients, stage 3 (FSDP) also the parameters. n_params must divide by world_size
    (real implementations pad each shard up to equal size; keep the sizes divisible to compare
    exactly).

    Args:
        n_params: parameters of the whole model.
        stage: 0, 1, 2 or 3.
        world_size: number of ranks.
        precision: 'fp32' (4 + 4 + 8 bytes per parameter) or 'mixed' (2 + 2 + 12).

    Example:
        >>> state_bytes_per_rank(1000, stage=1, world_size=4)
        {'params': 4000, 'grads': 4000, 'optimizer': 2000}

    Introduced in notebooks/09-zero-and-fsdp.ipynb.
    """
    if stage not in SHARDED_BY_STAGE:
        raise ValueError(f"stage must be 0 (DDP), 1, 2 or 3, got {stage!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {tuple(PRECISIONS)}, got {precision!r}")
    if world_size < 1 or n_params % world_size:
        raise ValueError(f"n_params={n_params} must divide evenly by world_size={world_size}: real ZeRO pads "
                         "every shard to the same size, so choose sizes that divide to compare exactly")
    full = dict(zip(COMPONENTS, (n_params * b for b in PRECISIONS[precision])))
    return {name: full[name] // world_size if name in SHARDED_BY_STAGE[stage] else full[name]
            for name in COMPONENTS}

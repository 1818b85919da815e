"""The two collectives of sharded training on one flat tensor, named the same on every torch.

Introduced in notebooks/02-collectives.ipynb (reduce_scatter); used for ZeRO in
notebooks/09-zero-and-fsdp.ipynb.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def all_gather_name() -> str:
    """The name of `dist`'s flat all-gather in this torch, the one FSDP2 calls: count it with
    `ddp_lab.instruments.collectives.count_collectives((all_gather_name(),))`.

    Example:
        >>> all_gather_name() in ("all_gather_single", "all_gather_into_tensor")
        True

    Introduced in notebooks/09-zero-and-fsdp.ipynb.
    """
    return "all_gather_single" if hasattr(dist, "all_gather_single") else "all_gather_into_tensor"


def reduce_scatter(output: torch.Tensor, input: torch.Tensor, op=dist.ReduceOp.SUM, group=None) -> None:
    """Rank k receives in `output` the sum over ranks of chunk k of `input` (input.numel() = world_size * output.numel()).

    Why a helper: torch 2.4 to 2.12 call this `dist.reduce_scatter_tensor`; 2.13 adds the
    name `dist.reduce_scatter_single` and prints a FutureWarning for the old one. The list form
    `dist.reduce_scatter` is not an option: gloo refuses it in torch 2.4.

    Example:
        >>> reduce_scatter(shard_grad, full_grad.reshape(-1))   # inside a launched rank

    Introduced in notebooks/02-collectives.ipynb.
    """
    collective = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    collective(output, input, op=op, group=group)


def all_gather(output: torch.Tensor, input: torch.Tensor, group=None) -> None:
    """Fill `output` (world_size * input.numel() values) with every rank's `input`, in rank order.

    Why a helper: `dist.all_gather_into_tensor` (torch 2.4 to 2.12) is `dist.all_gather_single`
    from 2.13 on, which warns about the old name.

    Example:
        >>> all_gather(param.view(-1), my_shard)   # inside a launched rank

    Introduced in notebooks/09-zero-and-fsdp.ipynb.
    """
    collective = getattr(dist, all_gather_name())
    collective(output, input, group=group)

"""FP8 all-gather of sharded weights (FSDP2 with torchao's Float8Linear), and the bytes it moves.

FSDP all-gathers each layer's weight shards before the layer runs. If the matmul will use the
weight in FP8 anyway, the shards can be cast *before* the all-gather: one byte a value instead
of two (bf16). Every rank must cast with the *same* scale, that of the whole weight, or the
gathered pieces would mean different things: the amax of each shard is all-reduced with MAX
first (a few bytes; torchao does it once for all layers, "precompute_float8_dynamic_scale_for_fsdp").
gloo has no FP8 type, so the FP8 bytes travel viewed as uint8: the same bytes.

Introduced in notebooks/17-compile-and-low-precision.ipynb.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ddp_lab.course.low_precision.fp8 import amax, dequantize, quantize, scale_for


def all_gather_received_bytes(numel: int, element_bytes: int, world_size: int) -> int:
    """Bytes one rank receives when a tensor of `numel` values is all-gathered from equal shards.

    Each rank already holds its own 1/N: it receives the other (N - 1)/N.

    Example:
        >>> all_gather_received_bytes(1024, element_bytes=2, world_size=4)   # bf16
        1536

    Introduced in notebooks/17-compile-and-low-precision.ipynb.
    """
    return (world_size - 1) * (numel // world_size) * element_bytes


def agreed_scale(shard: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The scale of the whole (sharded) tensor: every shard's amax, all-reduced with MAX.

    Introduced in notebooks/17-compile-and-low-precision.ipynb.
    """
    whole_amax = amax(shard).float().reshape(1)
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(whole_amax, op=dist.ReduceOp.MAX)
    return scale_for(whole_amax[0], dtype)


def fp8_all_gather(shard: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """All-gather equal shards (dim 0) in FP8 with one agreed scale; returns (whole weight in float32, scale).

    Introduced in notebooks/17-compile-and-low-precision.ipynb.
    """
    scale = agreed_scale(shard, dtype)
    mine = quantize(shard, dtype, scale).view(torch.uint8)          # (rows/N, cols) one byte a value
    pieces = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(pieces, mine)
    return dequantize(torch.cat(pieces).view(dtype), scale), scale

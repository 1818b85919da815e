"""All-to-all sequence parallelism (DeepSpeed-Ulysses): re-shard from sequence to heads for attention.

Every rank holds all heads of its 1/N of the sequence. One all-to-all per tensor gives every
rank all the sequence for 1/N of the heads; attention then runs locally, head by head, exactly
as in one process; one all-to-all brings the output back to sequence shards (Jacobs et al.,
2023, "DeepSpeed Ulysses: System Optimizations for Enabling Training of Extreme Long Sequence
Transformer Models", arXiv:2309.14509). Heads must divide by the degree N.

Shapes (b, heads, tokens, d) as torch's scaled_dot_product_attention takes them; rank r's
sequence shard is tokens r*s/N ... (r+1)*s/N - 1.

Introduced in notebooks/15-long-sequences.ipynb.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F


def heads_per_rank(heads: int, world_size: int) -> int:
    """Heads each rank attends to under Ulysses; a ValueError when they do not divide by the degree.

    Jacobs et al. (2023) split attention by heads, so the degree is bounded by the head count.

    Example:
        >>> heads_per_rank(8, 4)
        2

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    if heads % world_size:
        raise ValueError(f"Ulysses gives each of the {world_size} ranks whole heads, but {heads} heads do not "
                         f"divide by {world_size}: use a degree that divides the head count (or ring attention).")
    return heads // world_size


def _all_to_all(send: torch.Tensor) -> torch.Tensor:
    """all_to_all_single on dim 0: block j of `send` goes to rank j; block j of the result came from rank j."""
    received = torch.empty_like(send)
    dist.all_to_all_single(received, send)
    return received


def sequence_to_heads(x: torch.Tensor) -> torch.Tensor:
    """(b, h, s/N, d), all heads of my tokens -> (b, h/N, s, d), all tokens of my heads. One all-to-all.

    DeepSpeed-Ulysses' re-shard before attention (Jacobs et al., 2023).

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    world_size = dist.get_world_size()
    b, h, tokens, d = x.shape
    send = x.reshape(b, world_size, heads_per_rank(h, world_size), tokens, d).transpose(0, 1).contiguous()
    received = _all_to_all(send)               # (N, b, h/N, s/N, d): dim 0 is the rank whose tokens these are
    return received.permute(1, 2, 0, 3, 4).reshape(b, h // world_size, world_size * tokens, d)


def heads_to_sequence(x: torch.Tensor) -> torch.Tensor:
    """(b, h/N, s, d), all tokens of my heads -> (b, h, s/N, d), all heads of my tokens. One all-to-all.

    DeepSpeed-Ulysses' re-shard after attention (Jacobs et al., 2023).

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    world_size = dist.get_world_size()
    b, local_heads, tokens, d = x.shape
    send = x.reshape(b, local_heads, world_size, tokens // world_size, d).permute(2, 0, 1, 3, 4).contiguous()
    received = _all_to_all(send)               # (N, b, h/N, s/N, d): dim 0 is the rank whose heads these are
    return received.transpose(0, 1).reshape(b, world_size * local_heads, tokens // world_size, d)


class SequenceToHeads(torch.autograd.Function):
    """sequence_to_heads in forward; its inverse, heads_to_sequence, on the gradient in backward."""

    @staticmethod
    def forward(ctx, x):
        return sequence_to_heads(x)

    @staticmethod
    def backward(ctx, grad):
        return heads_to_sequence(grad)


class HeadsToSequence(torch.autograd.Function):
    """heads_to_sequence in forward; sequence_to_heads on the gradient in backward."""

    @staticmethod
    def forward(ctx, x):
        return heads_to_sequence(x)

    @staticmethod
    def backward(ctx, grad):
        return sequence_to_heads(grad)


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """Attention of sequence-sharded q, k, v (b, h, s/N, d): re-shard to heads, attend, re-shard back.

    DeepSpeed-Ulysses (Jacobs et al., 2023, arXiv:2309.14509).

    Four all-to-alls in forward (q, k, v, out) and four in backward, each of the rank's whole
    (b, h, s/N, d) shard, of which (N - 1)/N leaves the rank.

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    q, k, v = (SequenceToHeads.apply(t) for t in (q, k, v))      # (b, h/N, s, d): whole sequence, my heads
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return HeadsToSequence.apply(out)                              # (b, h, s/N, d): my tokens, every head

"""Which chunks of the sequence each rank holds, and the causal work that gives each rank.

The sequence is cut into equal chunks. `contiguous_chunks` gives rank r chunk r of N; with a
causal mask the last rank then attends to every key and rank 0 to almost none. `zigzag_chunks`
cuts 2N chunks and gives rank r chunks r and 2N - 1 - r, an early and a late one whose work adds
up to the same on every rank (Llama 3, Dubey et al. 2024, arXiv:2407.21783, section 3.3.2; the
"zig-zag" of ring-flash-attention; Brandon et al. 2023, arXiv:2311.09431, balance the same
mask by striping single tokens instead).

A layout is a function `(rank, world_size) -> chunk indices in sequence order`.

Introduced in notebooks/15-long-sequences.ipynb.
"""

from __future__ import annotations

from typing import Callable

import torch

Layout = Callable[[int, int], list[int]]


def contiguous_chunks(rank: int, world_size: int) -> list[int]:
    """Rank r holds chunk r of world_size equal chunks: the plain split of the sequence.

    Ring Attention's layout (Liu et al., 2023); with a causal mask rank N - 1 works most.

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    return [rank]


def zigzag_chunks(rank: int, world_size: int) -> list[int]:
    """Rank r holds chunks r and 2N - 1 - r of 2N: one early, one late (Llama 3's context parallelism).

    Example:
        >>> [zigzag_chunks(rank, 4) for rank in range(4)]
        [[0, 7], [1, 6], [2, 5], [3, 4]]

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    return [rank, 2 * world_size - 1 - rank]


def chunk_count(layout: Layout, world_size: int) -> int:
    """How many chunks the sequence is cut into under `layout` (N contiguous, 2N zig-zag)."""
    return sum(len(layout(rank, world_size)) for rank in range(world_size))


def shard_sequence(x: torch.Tensor, rank: int, world_size: int, layout: Layout, dim: int = -2) -> torch.Tensor:
    """This rank's chunks of the full sequence `x`, concatenated along `dim` in the layout's order.

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    chunks = x.chunk(chunk_count(layout, world_size), dim=dim)
    return torch.cat([chunks[index] for index in layout(rank, world_size)], dim=dim)


def unshard_sequence(shards: list[torch.Tensor], layout: Layout, dim: int = -2) -> torch.Tensor:
    """The full sequence back from every rank's shard (`shards[rank]`, as `shard_sequence` cut it).

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    world_size = len(shards)
    placed = {}
    for rank, shard in enumerate(shards):
        indices = layout(rank, world_size)
        placed.update(zip(indices, shard.chunk(len(indices), dim=dim)))
    return torch.cat([placed[index] for index in sorted(placed)], dim=dim)


def block_entries(query_chunk: int, key_chunk: int, chunk_len: int) -> int:
    """Score entries a causal mask leaves in one (query chunk, key chunk) block.

    A key chunk before the query chunk: all chunk_len² entries; the same chunk: the lower
    triangle with its diagonal, chunk_len (chunk_len + 1) / 2; a later chunk: none (skipped).

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    if key_chunk < query_chunk:
        return chunk_len * chunk_len
    if key_chunk == query_chunk:
        return chunk_len * (chunk_len + 1) // 2
    return 0


def causal_work(rank: int, world_size: int, layout: Layout, seq_len: int) -> int:
    """Unmasked score entries rank `rank` computes under a causal mask: its queries against every key.

    Example:
        >>> [causal_work(r, 4, contiguous_chunks, 64) for r in range(4)]
        [136, 392, 648, 904]
        >>> [causal_work(r, 4, zigzag_chunks, 64) for r in range(4)]
        [520, 520, 520, 520]

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    chunks = chunk_count(layout, world_size)
    return sum(block_entries(mine, key, seq_len // chunks) for mine in layout(rank, world_size) for key in range(chunks))

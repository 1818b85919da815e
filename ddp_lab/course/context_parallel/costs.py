"""The formulas lesson 15 checks against measurements: bytes saved for backward, bytes sent per rank.

b: batch, h: heads, s: the whole sequence's tokens, d: features per head, N: ranks, `element`:
bytes per value (4 for fp32, 2 for bf16).

Introduced in notebooks/15-long-sequences.ipynb.
"""

from __future__ import annotations


def naive_attention_saved_bytes(b: int, h: int, s: int, d: int, element: int = 4) -> int:
    """Bytes autograd keeps for backward in plain causal attention: q, k, v, the s x s probabilities, the mask.

    softmax(q k^T / sqrt(d) masked) v saves q and k (for q k^T), the boolean s x s mask (for
    masked_fill), the probabilities (softmax's output, also the input of probs @ v) and v.
    The s² terms grow with the square of the sequence.

    Example:
        >>> naive_attention_saved_bytes(b=1, h=4, s=64, d=16)
        118784

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    return element * b * h * (3 * s * d + s * s) + s * s


def ring_attention_saved_bytes(b: int, h: int, s: int, d: int, world_size: int, element: int = 4) -> int:
    """Bytes one rank of ring attention (hand backward) keeps: its s/N rows of q, k, v, out, and of the lse.

    Example:
        >>> ring_attention_saved_bytes(b=1, h=4, s=64, d=16, world_size=2)
        33280

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    rows = s // world_size
    return element * b * h * rows * (4 * d + 1)


def kv_block_bytes(b: int, h: int, s: int, d: int, world_size: int, element: int = 4) -> int:
    """Bytes of one rank's key and value blocks, what each ring hop passes on: 2 · b·h·(s/N)·d values.

    The planner (lesson 13's `ddp_lab.plan`, `--cp`) sends the same block per hop.

    Example:
        >>> kv_block_bytes(b=1, h=4, s=64, d=16, world_size=4)
        8192

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    return 2 * b * h * (s // world_size) * d * element


def ring_bytes_sent(b: int, h: int, s: int, d: int, world_size: int, element: int = 4) -> dict[str, int]:
    """Bytes one rank sends in ring attention: {'forward', 'backward'}.

    Forward: its key and value blocks (b·h·s/N·d each) travel N - 1 hops. Backward: keys and
    values again N - 1 hops, and their gradients N - 1 hops (from the rank after the owner,
    round to the owner).

    Example:
        >>> ring_bytes_sent(b=1, h=4, s=64, d=16, world_size=4)
        {'forward': 24576, 'backward': 49152}

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    hop = kv_block_bytes(b, h, s, d, world_size, element)
    return {"forward": (world_size - 1) * hop, "backward": 2 * (world_size - 1) * hop}


def ulysses_bytes_sent(b: int, h: int, s: int, d: int, world_size: int, element: int = 4) -> dict[str, int]:
    """Bytes that leave one rank in Ulysses' all-to-alls: {'forward', 'backward'}.

    Four all-to-alls each way (q, k and v to heads, the output back; in backward the output's
    gradient to heads and the three input gradients back), each of the rank's b·h·s/N·d shard,
    of which the part for the other N - 1 ranks leaves it.

    Example:
        >>> ulysses_bytes_sent(b=1, h=4, s=64, d=16, world_size=4)
        {'forward': 12288, 'backward': 12288}

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    shard = b * h * (s // world_size) * d * element
    leaving = 4 * shard * (world_size - 1) // world_size
    return {"forward": leaving, "backward": leaving}

"""Compressed gradients: how many values a DDP comm hook sends instead of the full gradient.

fp16 and bf16 hooks halve the bytes; PowerSGD (Vogels et al. 2019, arXiv:1905.13727) sends, for
each matrix gradient it compresses, two low-rank factors P and Q instead of the matrix.

Introduced in notebooks/11-performance-and-scaling.ipynb.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def powersgd_numel(shapes: Iterable[tuple[int, ...]], rank: int, min_compression_rate: float = 2) -> int:
    """Values PowerSGD all-reduces per step for gradients of these shapes (after start_powerSGD_iter).

    Each gradient is viewed as an n x m matrix (its first dimension by the rest). It is compressed
    to P (n x r) and Q (m x r), r = min(n, m, rank), when (n + m) r * min_compression_rate < n m,
    and then costs (n + m) r values; otherwise (biases, small matrices) it is all-reduced as is.
    Vogels et al. 2019, https://arxiv.org/abs/1905.13727; torch's powerSGD_hook.

    Example:
        >>> powersgd_numel([(256, 128), (256,)], rank=2)   # (256 + 128) * 2 + 256
        1024

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    total = 0
    for shape in shapes:
        n = shape[0] if shape else 1
        m = math.prod(shape[1:]) if len(shape) > 1 else 1
        r = min(n, m, rank)
        compressed = (n + m) * r
        total += compressed if compressed * min_compression_rate < n * m else n * m
    return total

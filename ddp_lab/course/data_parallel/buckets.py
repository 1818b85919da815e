"""DDP's gradient buckets: which parameters share an all-reduce, and where their gradients live.

After its first step DDP rebuilds its buckets in the order gradients became ready in backward
(for a plain stack of layers: the parameters in reverse), closing a bucket as soon as it holds
`bucket_cap_mb` MiB or more. With `gradient_as_bucket_view=True` the `.grad` tensors are views
into the bucket buffers (no second copy of the gradients); otherwise each has its own storage.

Introduced in notebooks/11-performance-and-scaling.ipynb.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

MIB = 1024 * 1024


def bucket_layout(numels_in_ready_order: Iterable[int], bucket_cap_mb: float, element_size: int = 4) -> list[int]:
    """Element counts of DDP's buckets for parameters in gradient-ready order (explicit `bucket_cap_mb`).

    Greedy, as DDP's `_compute_bucket_assignment_by_size`: add parameters until the bucket holds
    at least the cap in bytes, then start a new one. (With the default cap, DDP also caps its
    first bucket at 1 MiB; always pass bucket_cap_mb to compare with this.)

    Example:
        >>> bucket_layout([256, 65536, 256, 65536], bucket_cap_mb=0.2)   # two layers of bias + weight
        [65792, 65792]

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    if bucket_cap_mb <= 0:
        raise ValueError(f"bucket_cap_mb must be positive, got {bucket_cap_mb}.")
    cap = bucket_cap_mb * MIB
    buckets, current = [], 0
    for numel in numels_in_ready_order:
        current += numel
        if current * element_size >= cap:
            buckets.append(current)
            current = 0
    if current:
        buckets.append(current)
    return buckets


def ready_order_numels(model: torch.nn.Module) -> list[int]:
    """Parameter sizes in the order backward produces a plain stack of layers' gradients: reversed.

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    return [p.numel() for p in model.parameters() if p.requires_grad][::-1]


def gradient_storages(model: torch.nn.Module) -> int:
    """How many distinct memory blocks hold this model's gradients (views of one bucket share one).

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    return len({p.grad.untyped_storage().data_ptr() for p in model.parameters() if p.grad is not None})

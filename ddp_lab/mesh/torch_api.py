"""FSDP2's `fully_shard` wherever this torch keeps it, and gathering a 2-D-sharded DTensor quietly.

Introduced in notebooks/10-2d-mesh.ipynb.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace


def fsdp_api() -> SimpleNamespace:
    """FSDP2's names (`fully_shard`, `MixedPrecisionPolicy`) and whether FSDP2 runs on CPU here.

    Why a helper: FSDP2's import path and its CPU support differ across the torch versions the
    course supports; lesson 09's `ddp_lab.sharding.fsdp` holds that knowledge in one place
    (`fsdp2()`, `fsdp2_cpu_skip_reason()`), and this gathers it for lesson 10's cells. DTensor's
    names come from lesson 08's `ddp_lab.tensor_parallel.dtensor_api()`.

    Returns:
        A namespace with `fully_shard`, `MixedPrecisionPolicy`, `module_path` and `cpu_reason`
        (None where FSDP2 can train CPU tensors over gloo, else why not).

    Example:
        >>> fsdp_api().fully_shard(model, mesh=mesh["dp"])   # inside a launched rank

    Introduced in notebooks/10-2d-mesh.ipynb.
    """
    from ddp_lab.sharding.fsdp import fsdp2, fsdp2_cpu_skip_reason

    fully_shard, mixed_precision_policy = fsdp2()
    return SimpleNamespace(module_path=fully_shard.__module__, fully_shard=fully_shard,
                           MixedPrecisionPolicy=mixed_precision_policy, cpu_reason=fsdp2_cpu_skip_reason())


def full_tensor(tensor):
    """The global value of a DTensor (a plain tensor is returned as it is), gathered over every mesh dimension.

    Why a helper: a weight that is sharded by tensor parallelism and then by FSDP2 on the
    same dimension carries a `_StridedShard` placement, and torch 2.13 logs a warning with a
    time stamp and a pid on every such gather ("2 sequential all_gather operations will be
    performed"), which would make a lesson's output differ on every run. The gather itself
    is correct (the lesson asserts it against one process); only that log line is silenced,
    for the duration of the call.

    Introduced in notebooks/10-2d-mesh.ipynb.
    """
    if not hasattr(tensor, "full_tensor"):
        return tensor
    logger = logging.getLogger("torch.distributed.tensor._redistribute")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return tensor.full_tensor()
    finally:
        logger.setLevel(level)

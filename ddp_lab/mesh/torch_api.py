"""FSDP2's `fully_shard` wherever this torch keeps it, and gathering a 2-D-sharded DTensor quietly.

Introduced in notebooks/10-2d-mesh.ipynb.
"""

from __future__ import annotations

import importlib
import logging
from types import SimpleNamespace


def fsdp_api() -> SimpleNamespace:
    """FSDP2's names (`fully_shard`, `MixedPrecisionPolicy`), imported from where this torch keeps them.

    Why a helper: FSDP2 became public as `torch.distributed.fsdp.fully_shard` in torch 2.6;
    torch 2.4 (the oldest the course supports) has it only under the private
    `torch.distributed._composable.fsdp`. DTensor's names come from lesson 08's
    `ddp_lab.tensor_parallel.dtensor_api()`.

    FSDP2 on a CPU mesh also differs: torch 2.4 creates CUDA streams in `fully_shard`'s lazy
    init whatever the mesh's device (measured on 2.4.1: the first forward raises a CUDA
    error), so `cpu_reason` says why it cannot run on CPU there (None where it can).

    Returns:
        A namespace with `fully_shard`, `MixedPrecisionPolicy`, `module_path` and `cpu_reason`.

    Example:
        >>> fsdp_api().fully_shard(model, mesh=mesh["dp"])   # inside a launched rank

    Introduced in notebooks/10-2d-mesh.ipynb.
    """
    public = importlib.import_module("torch.distributed.fsdp")
    if hasattr(public, "fully_shard"):  # torch >= 2.6: streams come from the mesh's device type
        module, cpu_reason = public, None
    else:  # torch 2.4/2.5: lazy init creates torch.cuda.Stream()s whatever the mesh's device
        module = importlib.import_module("torch.distributed._composable.fsdp")
        cpu_reason = (f"FSDP2 in torch {torch_version()} needs CUDA even for a CPU mesh (it creates "
                      "CUDA streams); torch 2.8 and later run it on CPU")
    return SimpleNamespace(module_path=module.__name__, fully_shard=module.fully_shard,
                           MixedPrecisionPolicy=module.MixedPrecisionPolicy, cpu_reason=cpu_reason)


def torch_version() -> str:
    import torch

    return torch.__version__.split("+")[0]


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

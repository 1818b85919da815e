"""DTensor across torch versions: its names (DeviceMesh, placements, parallelize_module) and a quiet gather.

Which versions differ, and why the branches exist:
- DTensor became public as `torch.distributed.tensor` in torch 2.5; torch 2.4 keeps it under the
  private `torch.distributed._tensor` (`dtensor_api`).
- torch 2.13 logs a warning with a time stamp and a pid when it gathers a `_StridedShard`
  placement (TP then FSDP2 on one dimension), which would make a lesson's output differ on
  every run (`full_tensor`).

Introduced in notebooks/08-tensor-parallelism.ipynb.
"""

from __future__ import annotations

import importlib
import logging
from types import SimpleNamespace


def dtensor_api() -> SimpleNamespace:
    """The DTensor names a lesson needs, imported from wherever this torch version keeps them.

    Why a helper: DTensor became public as `torch.distributed.tensor` in torch 2.5. torch 2.4
    (the oldest the course supports) has it only under the private `torch.distributed._tensor`,
    and its `torch.distributed.tensor` package holds `parallel` alone; newer versions keep the
    old path as a redirect. `init_device_mesh` (torch.distributed.device_mesh) and
    `torch.distributed.tensor.parallel` have the same path everywhere.

    Returns:
        A namespace with `DTensor`, `DeviceMesh`, `init_device_mesh`, `distribute_tensor`,
        `distribute_module` and `ParallelStyle` (lesson 14),
        `Shard`, `Replicate`, `Partial`, `CommDebugMode` (counts DTensor's collectives),
        `parallelize_module`, `ColwiseParallel`, `RowwiseParallel`, `SequenceParallel`,
        `PrepareModuleInput`, `loss_parallel`, and `module_path` (where DTensor came from).

    Example:
        >>> api = dtensor_api()
        >>> api.Shard(0)
        Shard(dim=0)

    Introduced in notebooks/08-tensor-parallelism.ipynb.
    """
    # lazy: importing DTensor takes ~0.6 s, paid only by the ranks and cells that use it (rank start-up cost)
    tensor = importlib.import_module("torch.distributed.tensor")
    if hasattr(tensor, "DTensor"):  # torch >= 2.5
        module, debug = tensor, importlib.import_module("torch.distributed.tensor.debug")
    else:  # torch 2.4: the package exists but holds only `parallel`
        module = importlib.import_module("torch.distributed._tensor")
        debug = importlib.import_module("torch.distributed._tensor.debug")
    parallel = importlib.import_module("torch.distributed.tensor.parallel")
    mesh = importlib.import_module("torch.distributed.device_mesh")
    return SimpleNamespace(
        module_path=module.__name__,
        DTensor=module.DTensor, DeviceMesh=mesh.DeviceMesh, init_device_mesh=mesh.init_device_mesh,
        distribute_tensor=module.distribute_tensor, distribute_module=module.distribute_module,
        Shard=module.Shard, Replicate=module.Replicate, Partial=module.Partial,
        CommDebugMode=debug.CommDebugMode,
        parallelize_module=parallel.parallelize_module, ParallelStyle=parallel.ParallelStyle,
        ColwiseParallel=parallel.ColwiseParallel, RowwiseParallel=parallel.RowwiseParallel,
        SequenceParallel=parallel.SequenceParallel, PrepareModuleInput=parallel.PrepareModuleInput,
        loss_parallel=parallel.loss_parallel,
    )


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

"""The DTensor API (DeviceMesh, placements, parallelize_module), found where this torch keeps it.

Introduced in notebooks/08-tensor-parallelism.ipynb.
"""

from __future__ import annotations

import importlib
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
        `Shard`, `Replicate`, `Partial`, `CommDebugMode` (counts DTensor's collectives),
        `parallelize_module`, `ColwiseParallel`, `RowwiseParallel`, `SequenceParallel`,
        `PrepareModuleInput`, `loss_parallel`, and `module_path` (where DTensor came from).

    Example:
        >>> api = dtensor_api()
        >>> api.Shard(0)
        Shard(dim=0)

    Introduced in notebooks/08-tensor-parallelism.ipynb.
    """
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
        distribute_tensor=module.distribute_tensor,
        Shard=module.Shard, Replicate=module.Replicate, Partial=module.Partial,
        CommDebugMode=debug.CommDebugMode,
        parallelize_module=parallel.parallelize_module,
        ColwiseParallel=parallel.ColwiseParallel, RowwiseParallel=parallel.RowwiseParallel,
        SequenceParallel=parallel.SequenceParallel, PrepareModuleInput=parallel.PrepareModuleInput,
        loss_parallel=parallel.loss_parallel,
    )

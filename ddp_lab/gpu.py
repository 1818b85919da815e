"""GPU-only notebook cells: run where the hardware exists, skip with a printed reason elsewhere.

    reason = ddp_lab.gpu.skip_reason(gpus=1, nccl=True)
    if reason:
        print(f"skipped: {reason}")
    else:
        ...  # the GPU demonstration, with its assertions

Set DDP_LAB_REQUIRE_GPU=1 (the GPU test suite does) and a cell that would skip raises
instead, so a run on a GPU machine cannot pass by skipping. Tag such cells `gpu`.

Introduced in notebooks/06-backends-and-torchrun.ipynb.
"""

from __future__ import annotations

import os

REQUIRE_ENV = "DDP_LAB_REQUIRE_GPU"


class GPUUnavailable(RuntimeError):
    """DDP_LAB_REQUIRE_GPU=1 but this machine cannot run a GPU-only cell."""


def skip_reason(gpus: int = 1, nccl: bool = False) -> str | None:
    """None when this machine has `gpus` CUDA GPUs (and NCCL if asked), else why not.

    Does not initialise CUDA, so ranks launched afterwards can still use it.

    Args:
        gpus: CUDA devices the cell needs.
        nccl: whether the cell needs the NCCL backend.

    Raises:
        GPUUnavailable: when a reason exists and DDP_LAB_REQUIRE_GPU=1.

    Example:
        >>> ddp_lab.gpu.skip_reason(gpus=1)   # on a CPU-only machine
        'needs 1 CUDA GPU, found 0'

    Introduced in notebooks/06-backends-and-torchrun.ipynb.
    """
    import torch.distributed as dist

    from ddp_lab.machine import gpu_count

    found = gpu_count()
    reason = None
    if found < gpus:
        reason = f"needs {gpus} CUDA GPU{'s' if gpus > 1 else ''}, found {found}"
    elif nccl and not dist.is_nccl_available():
        reason = "needs the NCCL backend, which this torch build does not include"
    if reason and os.environ.get(REQUIRE_ENV) == "1":
        raise GPUUnavailable(f"{REQUIRE_ENV}=1, but this GPU-only cell cannot run here: {reason}.")
    return reason

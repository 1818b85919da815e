"""GPU-only notebook cells: run where the hardware exists, skip with a printed reason elsewhere.

    reason = ddp_lab.hardware.gpu.skip_reason(gpus=1, nccl=True)
    if reason:
        print(f"skipped: {reason}")
    else:
        ...  # the GPU demonstration, with its assertions

Tag such cells `gpu`. On a GPU machine set DDP_LAB_REQUIRE_GPU to its GPU count (the GPU
test suite does): then a cell that needs at most that many GPUs raises instead of
skipping, so a run on a GPU machine cannot pass by skipping. Cells that need more GPUs
than that still skip, with the reason, and the suite reports them.

Introduced in notebooks/06-backends-and-torchrun.ipynb.
"""

from __future__ import annotations

import os
import re

from ddp_lab.hardware.machine import gpu_count

REQUIRE_ENV = "DDP_LAB_REQUIRE_GPU"
_NEEDS = re.compile(r"needs (\d+) CUDA GPUs?, found \d+")


class GPUUnavailable(RuntimeError):
    """DDP_LAB_REQUIRE_GPU says this machine must run a GPU-only cell, and it cannot."""


def skip_reason(gpus: int = 1, nccl: bool = False) -> str | None:
    """None when this machine has `gpus` CUDA GPUs (and NCCL if asked), else why not.

    Does not initialise CUDA, so ranks launched afterwards can still use it.

    Args:
        gpus: CUDA devices the cell needs.
        nccl: whether the cell needs the NCCL backend.

    Raises:
        GPUUnavailable: when a reason exists and DDP_LAB_REQUIRE_GPU is at least `gpus`.

    Example:
        >>> ddp_lab.hardware.gpu.skip_reason(gpus=1)   # on a CPU-only machine
        'needs 1 CUDA GPU, found 0'

    Introduced in notebooks/06-backends-and-torchrun.ipynb.
    """
    import torch.distributed as dist  # lazy: `import ddp_lab`, the CLI and the launcher's notebook side stay torch-free (~1 s import)


    found = gpu_count()
    reason = None
    if found < gpus:
        reason = f"needs {gpus} CUDA GPU{'s' if gpus > 1 else ''}, found {found}"
    elif nccl and not dist.is_nccl_available():
        reason = "needs the NCCL backend, which this torch build does not include"
    required = required_gpus()
    if reason and gpus <= required:
        raise GPUUnavailable(
            f"{REQUIRE_ENV}={required} says cells that need up to {required} GPU(s) must run here, "
            f"but this one cannot: {reason}."
        )
    return reason


def required_gpus() -> int:
    """The GPU count DDP_LAB_REQUIRE_GPU promises (0 when unset)."""
    value = os.environ.get(REQUIRE_ENV, "").strip()
    if not value:
        return 0
    if not value.isdigit():
        raise ValueError(f"{REQUIRE_ENV}={value!r}: set it to a GPU count such as 1 or 8, or unset it.")
    return int(value)


def needed_gpus(reason: str) -> int | None:
    """The GPU count a skip reason asks for, or None when the reason is not about the count."""
    match = _NEEDS.search(reason)
    return int(match.group(1)) if match else None

"""Which device a rank should put its tensors on.

Introduced in notebooks/00-welcome-and-first-launch.ipynb; used in every lesson so the
same function runs on CPU ranks (gloo) and on one GPU per rank (nccl).
"""

from __future__ import annotations

import os


def rank_device():
    """`cuda:LOCAL_RANK` when the process group uses NCCL, else `cpu`.

    Example:
        >>> def fn(rank):
        ...     x = torch.ones(3, device=ddp_lab.rank_device())
    """
    import torch  # lazy: `import ddp_lab`, the CLI and the launcher's notebook side stay torch-free (~1 s import)
    import torch.distributed as dist  # lazy: `import ddp_lab`, the CLI and the launcher's notebook side stay torch-free (~1 s import)

    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")

"""The environment doctor: what this machine can run, in one table.

    python -m ddp_lab doctor        # in a terminal
    ddp_lab.doctor()                # in a notebook cell

Introduced in notebooks/00-welcome-and-first-launch.ipynb.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, field


def cpu_cores() -> int:
    """CPU cores this process may run on (respects taskset and container limits)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def gpu_count() -> int:
    """CUDA devices visible to torch (0 on a CPU build). Does not initialise CUDA."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def under_jupyter() -> bool:
    """True inside a Jupyter kernel (JupyterLab, Notebook, Colab, nbval)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython else None
    return shell is not None and "ZMQ" in type(shell).__name__ or "google.colab" in sys.modules


@dataclass
class MachineReport:
    """What `doctor()` found. Attribute names match the printed rows."""

    python: str
    torch: str
    cuda_build: str | None
    cpu_cores: int
    gpus: list[str] = field(default_factory=list)
    backends: dict[str, bool] = field(default_factory=dict)
    recommended_nprocs: int = 2
    jupyter: bool = False

    def lines(self) -> list[str]:
        available = [name for name, ok in self.backends.items() if ok]
        missing = [name for name, ok in self.backends.items() if not ok]
        gpus = ", ".join(f"cuda:{i} {name}" for i, name in enumerate(self.gpus)) or "none"
        return [
            f"python              {self.python}",
            f"torch               {self.torch}" + (f" (CUDA {self.cuda_build})" if self.cuda_build else " (CPU build)"),
            f"CPU cores           {self.cpu_cores}",
            f"GPUs                {len(self.gpus)}: {gpus}",
            f"backends available  {', '.join(available) or 'none'}"
            + (f"   (not built in: {', '.join(missing)})" if missing else ""),
            f"recommended nprocs  {self.recommended_nprocs}   ({self._why_nprocs()})",
            f"running in Jupyter  {'yes' if self.jupyter else 'no'}",
        ]

    def _why_nprocs(self) -> str:
        if self.gpus:
            return "one rank per GPU, backend nccl" if self.backends.get("nccl") else "one rank per GPU"
        return f"CPU ranks with gloo; more ranks than {self.cpu_cores} cores share them and run slower"

    def __str__(self) -> str:
        return "\n".join(self.lines())


def inspect_machine() -> MachineReport:
    """Collect the doctor's facts without printing them."""
    import torch
    import torch.distributed as dist

    gpus = [torch.cuda.get_device_name(i) for i in range(gpu_count())]
    backends = {
        "gloo": dist.is_available() and dist.is_gloo_available(),
        "nccl": dist.is_available() and dist.is_nccl_available(),
        "mpi": dist.is_available() and dist.is_mpi_available(),
    }
    cores = cpu_cores()
    return MachineReport(
        python=platform.python_version(),
        torch=torch.__version__,
        cuda_build=torch.version.cuda,
        cpu_cores=cores,
        gpus=gpus,
        backends=backends,
        recommended_nprocs=len(gpus) if gpus else max(2, min(cores, 4)),
        jupyter=under_jupyter(),
    )


def doctor() -> MachineReport:
    """Print what this machine can run (torch, cores, GPUs, backends, advice) and return it.

    Example:
        >>> report = ddp_lab.doctor()
        >>> report.recommended_nprocs >= 1
        True

    Introduced in notebooks/00-welcome-and-first-launch.ipynb.
    """
    report = inspect_machine()
    print(report)
    return report

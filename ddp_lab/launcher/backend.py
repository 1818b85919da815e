"""Choosing the process-group backend: gloo for CPUs, NCCL for one GPU per rank.

Introduced in notebooks/00-welcome-and-first-launch.ipynb; compared in
notebooks/06-backends-and-torchrun.ipynb.
"""

from __future__ import annotations

from ddp_lab.hardware.machine import gpu_count
from ddp_lab.launcher.interrupts import interrupts_held

BACKENDS = ("auto", "gloo", "nccl", "mpi")
_announced: set[str] = set()


def torch_distributed():
    """torch.distributed, imported with the stop button held (`interrupts_held`): the first thing a launch or a
    live cluster does is choose the backend, so in a fresh kernel this is where torch is imported (about 1 s), and a
    KeyboardInterrupt inside torch's import leaves it half-initialised: every later `import torch` of that kernel
    fails. A press during the import is raised once it is done. Lazy: `import ddp_lab` and the launcher stay
    torch-free until a launch needs the store."""
    with interrupts_held():
        import torch.distributed as dist
    return dist


def choose_backend(backend: str, nprocs: int, announce: bool = True) -> str:
    """Resolve 'auto' and check that the backend can run `nprocs` ranks here.

    'auto' picks nccl when NCCL is built in and there is one GPU per rank, else gloo,
    and prints its choice once per kernel. Asking for what cannot run raises a
    ValueError that names what was found and what to use instead.
    """
    dist = torch_distributed()

    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not one of {', '.join(map(repr, BACKENDS))}.")
    gpus = gpu_count()
    if backend == "auto":
        chosen = auto_backend(nprocs, gpus)
        if announce and chosen not in _announced:
            _announced.add(chosen)
            from ddp_lab.launcher.output import note  # printed with the ranks' output

            note(f"ddp_lab: backend='auto' picked {chosen!r} for {nprocs} rank{'s' if nprocs != 1 else ''}: "
                 f"{_why_auto(chosen, nprocs, gpus)}")
        return chosen
    if backend == "nccl":
        if not dist.is_nccl_available():
            raise ValueError(
                f"backend='nccl' is not built into this torch (a CPU-only build has gloo only; found {gpus} GPU(s)). "
                "Use backend='gloo', or install the CUDA build of the same torch version on a GPU machine."
            )
        if gpus < nprocs:
            raise ValueError(
                f"backend='nccl' needs one GPU per rank: nprocs={nprocs} but found {gpus} GPU(s). "
                f"Use backend='gloo' (works with CPU tensors), or nprocs<={gpus}." if gpus else
                f"backend='nccl' needs one GPU per rank: nprocs={nprocs} but found no GPU. "
                "Use backend='gloo', which runs on CPU tensors."
            )
    if backend == "mpi" and not dist.is_mpi_available():
        raise ValueError("backend='mpi' is not built into this torch. Use backend='gloo'.")
    return backend


def auto_backend(nprocs: int, gpus: int | None = None) -> str:
    """What backend='auto' means for `nprocs` ranks on one machine: nccl with a GPU per rank, else gloo.

    nccl needs NCCL built into torch and at least `nprocs` GPUs (`gpus`, default: the
    CUDA devices torch sees here), because NCCL refuses two ranks on one GPU. `launch`
    passes the ranks it starts; torchrun's ranks (`ddp_lab.torchrun.run_pickled`) pass
    LOCAL_WORLD_SIZE, the ranks on their own node, since GPUs are counted per node.
    Either way the tensors must then live on `ddp_lab.rank_device()`: NCCL moves only
    CUDA tensors.

    Example:
        >>> ddp_lab.launcher.backend.auto_backend(2, gpus=0)
        'gloo'

    Introduced in notebooks/00-welcome-and-first-launch.ipynb.
    """
    dist = torch_distributed()

    gpus = gpu_count() if gpus is None else gpus
    return "nccl" if dist.is_nccl_available() and gpus >= nprocs else "gloo"


def _why_auto(chosen: str, nprocs: int, gpus: int) -> str:
    dist = torch_distributed()

    if chosen == "nccl":
        return "a GPU per rank; put tensors on ddp_lab.rank_device()"
    if not dist.is_nccl_available():
        return "this torch has no NCCL; tensors stay on the CPU"
    return f"NCCL needs {nprocs} GPU{'s' if nprocs > 1 else ''}, found {gpus}; tensors stay on the CPU"

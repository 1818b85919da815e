"""The environment doctor: what this machine can run, in one table.

    python -m ddp_lab doctor        # in a terminal
    ddp_lab.doctor()                # in a notebook cell

Introduced in notebooks/00-welcome-and-first-launch.ipynb.
"""

from __future__ import annotations

import math
import os
import platform
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path


PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def cpu_cores(proc_cgroup: Path = PROC_CGROUP, cgroup_root: Path = CGROUP_ROOT) -> int:
    """CPU cores this process may use: its affinity mask, capped by its cgroup CPU quota.

    taskset and cpusets shrink the affinity mask; Kubernetes CPU limits (JupyterHub on
    Kubernetes) and `docker --cpus` leave every core visible and cap the time instead,
    so a 1.5-CPU quota on a 16-core host counts as 2 cores, not 16.

    Args:
        proc_cgroup, cgroup_root: where to read the cgroup from (tests pass fake trees).

    Example:
        >>> ddp_lab.hardware.machine.cpu_cores() >= 1
        True

    Introduced in notebooks/00-welcome-and-first-launch.ipynb.
    """
    return cores_allowed(visible_cores(), cgroup_cpu_quota(proc_cgroup, cgroup_root))


def visible_cores() -> int:
    """Cores the affinity mask lets this process run on (what taskset and cpusets set).

    Introduced in notebooks/00-welcome-and-first-launch.ipynb.
    """
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows: no affinity mask
        return os.cpu_count() or 1


def cores_allowed(visible: int, quota: float | None) -> int:
    """min(visible, quota rounded up), at least 1: a quota of 1.5 CPUs keeps 2 cores busy.

    Example:
        >>> ddp_lab.hardware.machine.cores_allowed(16, 1.5), ddp_lab.hardware.machine.cores_allowed(16, None)
        (2, 16)

    Introduced in notebooks/00-welcome-and-first-launch.ipynb.
    """
    return visible if quota is None else max(1, min(visible, math.ceil(quota)))


def cgroup_cpu_quota(proc_cgroup: Path = PROC_CGROUP, cgroup_root: Path = CGROUP_ROOT) -> float | None:
    """CPUs' worth of time the cgroup CPU quota grants this process (1.5 = one and a half), or None.

    cgroup v2: `cpu.max` holds "QUOTA PERIOD" ("max PERIOD": no limit); cgroup v1:
    `cpu.cfs_quota_us` / `cpu.cfs_period_us` (quota -1: no limit). The process's cgroup is
    the "0::/path" line of /proc/self/cgroup (v2) or the line whose controllers include
    cpu (v1, e.g. "4:cpu,cpuacct:/path"). A quota on an enclosing cgroup limits as well,
    so the smallest one from the process's cgroup up to the root counts. Inside a
    container the path names the host's cgroup, which is mounted as the root of
    /sys/fs/cgroup: then the root is read. Unreadable or missing files mean no limit.
    Read afresh on each call (about 0.2 ms): a limit changed while the kernel runs counts.

    Introduced in notebooks/00-welcome-and-first-launch.ipynb.
    """
    quotas = [quota for read, directory in _cgroup_dirs(Path(proc_cgroup), Path(cgroup_root))
              if (quota := read(directory)) is not None]
    return min(quotas, default=None)


def _cgroup_dirs(proc_cgroup: Path, root: Path):
    """(reader, directory) for the process's cgroup and each one above it, v2 and v1."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and not controllers:
            read, mounts = _v2_quota, [root]
        elif "cpu" in controllers.split(","):
            read, mounts = _v1_quota, [root / controllers, root / "cpu", root / "cpu,cpuacct"]
        else:
            continue
        mount = next((m for m in mounts if m.is_dir()), None)
        if mount is not None:
            yield from ((read, directory) for directory in _up_to(mount, path))


def _up_to(mount: Path, path: str):
    """mount/path, then each parent up to the mount (just the mount if path is not there)."""
    leaf = mount / path.lstrip("/")
    directory = leaf if ".." not in leaf.parts and leaf.is_dir() else mount
    while True:
        yield directory
        if directory == mount:
            return
        directory = directory.parent


def _v2_quota(directory: Path) -> float | None:
    try:
        quota, period = (directory / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else _ratio(int(quota), int(period))
    except (OSError, ValueError):
        return None


def _v1_quota(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return _ratio(quota, period)


def _ratio(quota: int, period: int) -> float | None:
    return quota / period if quota > 0 and period > 0 else None  # v1 writes -1 for "no limit"


def gpu_count() -> int:
    """CUDA devices visible to torch (0 on a CPU build). Does not initialise CUDA."""
    import torch  # lazy: `import ddp_lab`, the CLI and the launcher's notebook side stay torch-free (~1 s import)

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def under_jupyter() -> bool:
    """True inside a Jupyter kernel (JupyterLab, Notebook, Colab, nbval)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython else None
    return shell is not None and "ZMQ" in type(shell).__name__ or "google.colab" in sys.modules


# The torch releases every lesson and solution has run on, top to bottom with every assert
# (`make compat TORCH=X.Y.Z`, docs/torch-versions.md): from the oldest release to any release
# of the newest minor. pyproject.toml's floor is the first one. Stored outputs are compared only
# on requirements.txt's pin.
TORCH_RANGE = ("2.8.0", "2.15")

_VERSION = re.compile(r"(\d+(?:\.\d+)*)((?:\.?(?:a|b|rc|dev)\d*)*)(\.post\d+)?", re.IGNORECASE)


def _release(version: str) -> tuple[tuple[int, ...], bool]:
    """("2.5.0.dev20240601+cpu") -> ((2, 5, 0), True): the release numbers and "is a pre-release"."""
    match = _VERSION.fullmatch(version.strip().split("+", 1)[0])
    if not match:
        raise ValueError(f"{version!r} is not a torch version such as '2.13.0' or '2.13.0+cpu'")
    return tuple(int(part) for part in match.group(1).split(".")), bool(match.group(2))


def torch_in_range(version: str, torch_range: tuple[str, str] = TORCH_RANGE) -> bool:
    """True if torch `version` lies in `torch_range` (oldest release, newest minor release).

    Local builds count as their release ("2.13.0+cpu" is 2.13.0); a pre-release or nightly
    comes before its release, so "2.4.1rc1" is below a floor of 2.4.1 while "2.15.1.dev0" is in.

    Example:
        >>> torch_in_range("2.13.0+cpu"), torch_in_range("2.3.1"), torch_in_range("2.16.0")
        (True, False, False)

    Introduced in notebooks/00-welcome-and-first-launch.ipynb.
    """
    release, pre = _release(version)
    oldest, _ = _release(torch_range[0])
    newest, _ = _release(torch_range[1])
    padded = release + (0,) * max(0, len(oldest) - len(release))
    above_floor = padded > oldest or (padded == oldest and not pre)
    return above_floor and padded[: len(newest)] <= newest


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
    cores_visible: int = 0  # the affinity mask's cores; more than cpu_cores when the cgroup quota decides

    def lines(self) -> list[str]:
        available = [name for name, ok in self.backends.items() if ok]
        missing = [name for name, ok in self.backends.items() if not ok]
        gpus = ", ".join(f"cuda:{i} {name}" for i, name in enumerate(self.gpus)) or "none"
        return [
            f"python              {self.python}",
            f"torch               {self.torch}" + (f" (CUDA {self.cuda_build})" if self.cuda_build else " (CPU build)"),
            f"CPU cores           {self.cpu_cores}" + (
                f" (cgroup CPU quota; {self.cores_visible} visible)" if self.cores_visible > self.cpu_cores else ""),
            f"GPUs                {len(self.gpus)}: {gpus}",
            f"backends available  {', '.join(available) or 'none'}"
            + (f"   (not built in: {', '.join(missing)})" if missing else ""),
            f"recommended nprocs  {self.recommended_nprocs}   ({self._why_nprocs()})",
            f"running in Jupyter  {'yes' if self.jupyter else 'no'}",
            *self._torch_warning(),
        ]

    def _torch_warning(self) -> list[str]:
        try:
            if torch_in_range(self.torch):
                return []
        except ValueError:  # a build reporting no release number: say so rather than fail
            pass
        oldest, newest = TORCH_RANGE
        return [f"WARNING             torch {self.torch} is outside the range this course is proven on "
                f"({oldest} to {newest}.x): lessons may fail. Install the pinned one "
                "(pip install -r requirements.txt), or try this one with `make compat TORCH=X.Y.Z`."]

    def _why_nprocs(self) -> str:
        if self.gpus:
            return "one rank per GPU, backend nccl" if self.backends.get("nccl") else "one rank per GPU"
        return f"CPU ranks with gloo; more ranks than {self.cpu_cores} cores share them and run slower"

    def __str__(self) -> str:
        return "\n".join(self.lines())


def inspect_machine() -> MachineReport:
    """Collect the doctor's facts without printing them."""
    import torch  # lazy: `import ddp_lab`, the CLI and the launcher's notebook side stay torch-free (~1 s import)
    import torch.distributed as dist  # lazy: `import ddp_lab`, the CLI and the launcher's notebook side stay torch-free (~1 s import)

    gpus = [torch.cuda.get_device_name(i) for i in range(gpu_count())]
    backends = {
        "gloo": dist.is_available() and dist.is_gloo_available(),
        "nccl": dist.is_available() and dist.is_nccl_available(),
        "mpi": dist.is_available() and dist.is_mpi_available(),
    }
    visible = visible_cores()
    cores = cores_allowed(visible, cgroup_cpu_quota())
    return MachineReport(
        python=platform.python_version(),
        torch=torch.__version__,
        cuda_build=torch.version.cuda,
        cpu_cores=cores,
        gpus=gpus,
        backends=backends,
        recommended_nprocs=len(gpus) if gpus else max(2, min(cores, 4)),
        jupyter=under_jupyter(),
        cores_visible=visible,
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

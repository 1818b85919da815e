"""ddp_lab: the helper package of the ddp-lab course on PyTorch distributed training.

    import ddp_lab
    ddp_lab.doctor()                       # what this machine can run
    results = ddp_lab.launch(fn, nprocs=4) # run a notebook function on 4 ranks

Attributes are imported on first use, so a rank process that imports
`ddp_lab.worker` does not pay for the rest of the package.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "launch": "ddp_lab.launcher",
    "DEFAULT_TIMEOUT": "ddp_lab.launcher",
    "Results": "ddp_lab.results",
    "LaunchError": "ddp_lab.errors",
    "RankFailed": "ddp_lab.errors",
    "RankCrashed": "ddp_lab.errors",
    "LaunchTimeout": "ddp_lab.errors",
    "ResultNotPicklable": "ddp_lab.errors",
    "LaunchWarning": "ddp_lab.errors",
    "RankFailure": "ddp_lab.errors",
    "doctor": "ddp_lab.machine",
    "rank_device": "ddp_lab.devices",
    "Cluster": "ddp_lab.cluster",
    "stable_str": "ddp_lab.stable",
    "UnstableDigits": "ddp_lab.stable",
}

__all__ = sorted(_EXPORTS)


_SUBPACKAGES = {"checks", "plots", "scripts", "gpu", "memory"}  # lesson 06: torchrun jobs, GPU-only cells


def load_ipython_extension(ipython) -> None:
    """`%load_ext ddp_lab` registers %%ddp, %ddp_pull and %ddp_shutdown (see ddp_lab.magics)."""
    from ddp_lab.magics import load_ipython_extension as load

    load(ipython)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'ddp_lab' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | _SUBPACKAGES)

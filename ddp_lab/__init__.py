"""ddp_lab: the helper package of the ddp-lab course on PyTorch distributed training.

    import ddp_lab
    ddp_lab.doctor()                       # what this machine can run
    results = ddp_lab.launch(fn, nprocs=4) # run a notebook function on 4 ranks

Attributes are imported on first use, so a rank process that imports
`ddp_lab.launcher.worker` does not pay for the rest of the package.

The package in two floors: course/, the course library, what a lesson asks you to read (the
formulas and algorithms of each lesson, the planner's arithmetic), which never imports the lab;
and the lab, what a lesson asks you to call (launcher/, cluster/, torchrun/, hardware/, checks/,
plots/, instruments/, torch_compat/, plan/). README's Layout says what each folder holds;
tests/test_package_floors.py enforces the rule.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "launch": "ddp_lab.launcher.launch",
    "DEFAULT_TIMEOUT": "ddp_lab.launcher.launch",
    "Results": "ddp_lab.launcher.results",
    "LaunchError": "ddp_lab.launcher.errors",
    "RankFailed": "ddp_lab.launcher.errors",
    "RankCrashed": "ddp_lab.launcher.errors",
    "LaunchTimeout": "ddp_lab.launcher.errors",
    "ResultNotPicklable": "ddp_lab.launcher.errors",
    "LaunchWarning": "ddp_lab.launcher.errors",
    "RankFailure": "ddp_lab.launcher.errors",
    "doctor": "ddp_lab.hardware.machine",
    "rank_device": "ddp_lab.hardware.devices",
    "Cluster": "ddp_lab.cluster.live_cluster",
    "stable_str": "ddp_lab.stable",
    "UnstableDigits": "ddp_lab.stable",
}

__all__ = sorted(_EXPORTS)


# ddp_lab.NAME for learners: the folders' modules under short, stable names
_SUBPACKAGES = {
    "checks": "ddp_lab.checks",                # exercise checks, ddp_lab.checks.lessonNN
    "plots": "ddp_lab.plots",                  # the lessons' pictures
    "device_memory": "ddp_lab.course.device_memory",  # lesson 01's memory arithmetic
    "scripts": "ddp_lab.torchrun.scripts",     # lesson 06: a notebook function as a torchrun job
    "gpu": "ddp_lab.hardware.gpu",             # GPU-only cells: skip with a printed reason
    "plan": "ddp_lab.plan",                    # lesson 13: the scale planner
}


def load_ipython_extension(ipython) -> None:
    """`%load_ext ddp_lab` registers %%ddp (and %ddp --help), %ddp_pull, %ddp_status and %ddp_shutdown (see
    ddp_lab.cluster.magics)."""
    from ddp_lab.cluster.magics import load_ipython_extension as load  # lazy: IPython and the cluster load only when %load_ext asks

    load(ipython)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if name in _SUBPACKAGES:
        return importlib.import_module(_SUBPACKAGES[name])
    raise AttributeError(f"module 'ddp_lab' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | set(_SUBPACKAGES))

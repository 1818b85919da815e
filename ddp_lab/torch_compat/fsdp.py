"""FSDP2 (`fully_shard`) imported the same way on every supported torch, and whether it runs on CPU here.

Which versions differ, and why the branches exist:
- FSDP2 was first published under the private `torch.distributed._composable.fsdp` (torch 2.4)
  and later became public as `torch.distributed.fsdp.fully_shard` (2.11, 2.13, ...): `fsdp2`.
- torch 2.4's FSDP2 needs CUDA streams even for CPU tensors; CPU streams gained
  `record_event`/`wait_event` in early 2025, and on 2.8 FSDP2 on CPU disagreed with one
  process in this course's runs: `fsdp2_cpu_skip_reason` says where the lessons skip it.

Introduced in notebooks/09-zero-and-fsdp.ipynb.
"""

from __future__ import annotations

import re

import torch


def fsdp2():
    """Return `(fully_shard, MixedPrecisionPolicy)` from wherever this torch keeps FSDP2.

    Why a helper: FSDP2 was first published as `torch.distributed._composable.fsdp` (torch
    2.4) and later became public as `torch.distributed.fsdp.fully_shard` (so in 2.11 and 2.13);
    the lesson runs on both, so it imports through here instead of naming either path.

    Example:
        >>> fully_shard, MixedPrecisionPolicy = fsdp2()

    Introduced in notebooks/09-zero-and-fsdp.ipynb.
    """
    # lazy: importing FSDP2 takes ~0.5 s, paid only by the ranks and cells that use it (rank start-up cost)
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # newer torch (2.11, 2.13, ...)
    except ImportError:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard  # torch 2.4: only the private path
    return fully_shard, MixedPrecisionPolicy


def fsdp2_runs_on_cpu() -> bool:
    """Whether this torch's FSDP2 can run CPU tensors at all (torch 2.4 needs CUDA streams; 2.8-2.15 run).

    FSDP2 orders its all-gathers and reduce-scatters with streams and events. In torch 2.4 it
    calls `torch.cuda.current_stream()` whatever the device, so on a machine without a GPU
    its first forward fails; it runs on CPU once CPU streams have no-op `record_event` and
    `wait_event` (pytorch PR #145935, early 2025). That is what this checks, rather than a
    version number. The planner's measured runs (lesson 13) need only this: bytes and time do
    not depend on what `fsdp2_cpu_skip_reason` adds, and torch 2.8.0 and 2.15.0 gave the same
    bytes as 2.13.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    stream = getattr(torch.cpu, "Stream", None)
    return stream is not None and hasattr(stream, "record_event") and hasattr(stream, "wait_event")


def fsdp2_cpu_skip_reason() -> str | None:
    """None when this torch's FSDP2 can train CPU tensors over gloo, else why not (for a printed skip).

    First `fsdp2_runs_on_cpu()` (CPU streams with `record_event`/`wait_event`), then the
    versions whose results this course saw differ from one process. Measured: torch 2.4.1
    skips, torch 2.13.0 runs.

    Example:
        >>> reason = fsdp2_cpu_skip_reason()
        >>> print(f"skipped: {reason}") if reason else ...

    Introduced in notebooks/09-zero-and-fsdp.ipynb.
    """
    if fsdp2_runs_on_cpu():
        # Runs, but not proven right everywhere: on torch 2.8.0 (make compat, 2026-11-23) FSDP2
        # with TP (lesson 10) and FSDP2 resumed from a checkpoint (lesson 09) gave parameters
        # that differ from one process; 2.13 and 2.15 agree. So the course runs it from 2.13 on.
        version = tuple(int(part) for part in re.findall(r"\d+", torch.__version__)[:2])
        if version < (2, 13):
            return (f"FSDP2 on CPU in torch {torch.__version__} gave results that differ from one process "
                    "in this course's runs (2.8.0); it is checked from torch 2.13 on")
        return None
    return (f"FSDP2 in torch {torch.__version__} needs CUDA streams even for CPU tensors; it runs on CPU in "
            "newer torch (CPU streams gained record_event/wait_event in pytorch PR #145935)")

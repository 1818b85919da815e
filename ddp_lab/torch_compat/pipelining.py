"""torch.distributed.pipelining, one code path for every torch in the course's range (2.4 ... 2.15).

Three things differ between versions, so they are decided here and nowhere else:
- `PipelineStage(..., input_args=...)` is required in torch 2.4 and optional later: we always
  pass an example micro-batch, which every version accepts.
- From torch 2.7 (pytorch PR #144352) the schedules divide the gradients by the number of
  micro-batches (`scale_grads=True` by default); 2.4-2.6 do not and have no such argument. We
  divide each micro-batch's loss by the number of micro-batches ourselves, as the hand-written
  pipeline does, and turn the schedule's own scaling off where it exists.
- Older schedules wait only on the last of the `Work`s that `batch_isend_irecv` returns
  (pytorch issue #132644, fixed by PR #152938, May 2025). NCCL returns one coalesced `Work`,
  gloo one per operation, so on gloo Schedule1F1B hung (measured with torch 2.4.1). Where the
  fix is missing (no `_wait_batch_p2p` in the schedules module), `make_schedule` makes the
  schedules wait on every `Work`, as the fix does.

Introduced in notebooks/07-pipeline-parallelism.ipynb.
"""

from __future__ import annotations

import inspect
from typing import Callable, Sequence

import torch
import torch.distributed as dist
import torch.nn as nn

# Schedules with one stage per rank, and those that take a list of (virtual) stages per rank.
SINGLE_STAGE = ("ScheduleGPipe", "Schedule1F1B")
MULTI_STAGE = ("ScheduleInterleaved1F1B", "ScheduleLoopedBFS", "ScheduleInterleavedZeroBubble",
               "ScheduleZBVZeroBubble", "ScheduleDualPipeV")


def available_schedules() -> list[str]:
    """The schedule classes this torch's torch.distributed.pipelining offers.

    torch 2.4 has GPipe, 1F1B, Interleaved1F1B and LoopedBFS; 2.8 also InterleavedZeroBubble and
    ZBVZeroBubble; 2.13 also DualPipeV (the versions checked).

    Introduced in notebooks/07-pipeline-parallelism.ipynb.
    """
    import torch.distributed.pipelining as pipelining  # lazy: ~1 s to import, paid only where a pipeline runs (rank start-up cost)

    return [name for name in SINGLE_STAGE + MULTI_STAGE if hasattr(pipelining, name)]


def make_stage(module: nn.Module, stage_index: int, num_stages: int, example_input: torch.Tensor,
               device: torch.device | str = "cpu"):
    """A `PipelineStage` for `module`, the `stage_index`-th of `num_stages`, on every torch version.

    Args:
        module: this stage's layers (already on `device`).
        stage_index, num_stages: where the stage sits in the whole pipeline (with virtual
            stages, num_stages counts all of them, not the ranks).
        example_input: one micro-batch as this stage receives it (only its shape and dtype
            matter); torch 2.4 requires it.
        device: where the stage computes.

    Introduced in notebooks/07-pipeline-parallelism.ipynb.
    """
    from torch.distributed.pipelining import PipelineStage  # lazy: as in available_schedules

    example = example_input.detach().to(device)
    return PipelineStage(module, stage_index, num_stages, torch.device(device), input_args=(example,))


def make_schedule(name: str, stages: Sequence, num_microbatches: int, loss_fn: Callable):
    """Build schedule `name` (e.g. "Schedule1F1B") whose gradients equal one process on the whole batch.

    `loss_fn(output, target)` is the loss of one micro-batch, a mean over its samples, as
    for the whole batch in one process. The schedule calls it once per micro-batch; we divide
    by the number of micro-batches, so the sum of the micro-batch losses (and the gradients,
    accumulated over micro-batches) equal the whole batch's mean loss and its gradients.

    Args:
        name: a class name from `available_schedules()`.
        stages: this rank's stages: one for GPipe/1F1B, several (virtual stages) for the others.
        num_microbatches: how many micro-batches `step` cuts the batch into.
        loss_fn: the per-micro-batch mean loss.

    Example:
        >>> schedule = make_schedule("Schedule1F1B", [stage], 4, torch.nn.functional.mse_loss)  # doctest: +SKIP

    Introduced in notebooks/07-pipeline-parallelism.ipynb.
    """
    import torch.distributed.pipelining as pipelining  # lazy: as in available_schedules

    if name not in available_schedules():
        raise ValueError(f"torch {torch.__version__} has no pipelining schedule {name!r}; "
                         f"it has {available_schedules()}.")
    cls = getattr(pipelining, name)
    stages = list(stages)
    if name in SINGLE_STAGE:
        if len(stages) != 1:
            raise ValueError(f"{name} runs one stage per rank, got {len(stages)}: use "
                             "ScheduleInterleaved1F1B for several (virtual) stages per rank.")
        target = stages[0]
    else:
        target = stages

    def scaled_loss(output, label):
        return loss_fn(output, label) / num_microbatches  # a share of the whole batch's mean

    _wait_on_every_p2p_work()
    options = {}
    if "scale_grads" in inspect.signature(cls.__init__).parameters:  # torch >= 2.7
        options["scale_grads"] = False  # we scaled the loss already
    return cls(target, num_microbatches, loss_fn=scaled_loss, **options)


class _EveryWork:
    """Stands for all the Works of one batch_isend_irecv: wait() waits on each (gloo returns several)."""

    def __init__(self, works: list):
        self.works = works

    def wait(self, *args, **kwargs) -> bool:
        for work in self.works:
            work.wait(*args, **kwargs)
        return True


def _wait_on_every_p2p_work() -> None:
    """Backport of pytorch PR #152938 for torch versions without it (see the module docstring)."""
    from torch.distributed.pipelining import schedules  # lazy: as in available_schedules

    if hasattr(schedules, "_wait_batch_p2p") or getattr(schedules, "_ddp_lab_waits_on_every_work", False):
        return  # fixed in this torch, or already patched in this process

    def batch_p2p(p2p_ops, desc=None):
        return _EveryWork(dist.batch_isend_irecv(p2p_ops)) if p2p_ops else None

    schedules._batch_p2p = batch_p2p
    schedules._ddp_lab_waits_on_every_work = True

"""The optimizer's step on one GPU: Adam over the parameters it updates, memory-bound.

Adam reads each gradient and rewrites the fp32 master weight and both moments, a few bytes per parameter and no
matmul: it runs at the HBM bandwidth. The parameters a GPU updates are its pipeline stage's, divided by the
data-parallel ranks when ZeRO >= 1 shards the optimizer (ZeRO paper, Rajbhandari et al. 2020). steptime.py adds
this once per step, after the last micro-batch.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from ddp_lab.course.plan import hybrid_shard, pipeline_stages
from ddp_lab.course.plan.memory import stage_parameters

# Optimizer step (Adam), bytes moved per parameter it updates: read the gradient (2, or 4 in fp32),
# read and write the fp32 master weight, momentum and variance (3 x 8), write the 16-bit weight (2).
ADAM_BYTES_MIXED = 2 + 3 * 8 + 2
ADAM_BYTES_FP32 = 4 + 3 * 8


def optimizer_seconds(parameters: int, strategy, gpu) -> float:
    """Seconds of Adam's step over the `parameters` this GPU updates (its optimizer shard): memory-bound.

    0 on CPU ranks, whose calibrated step efficiency already contains the optimizer.
    """
    if gpu.memory_bandwidth is None:
        return 0.0
    per_parameter = (ADAM_BYTES_MIXED + (2 if strategy.fp32_grads else 0)) if strategy.mixed else ADAM_BYTES_FP32
    return parameters * per_parameter / gpu.memory_bandwidth


def optimizer_parameters(model, strategy) -> int:
    """Parameters whose Adam step one GPU computes: its stage's share, divided by dp (a DiLoCo replica's, an HSDP
    shard group's) under ZeRO >= 1."""
    params = max(stage_parameters(model, strategy, stage) for stage in pipeline_stages.stages_to_check(strategy, model))
    return -(-params // hybrid_shard.zero_group_strategy(strategy).dp) if strategy.zero >= 1 else params

"""Hybrid sharding (HSDP): ZeRO-3 inside groups of dp_shard data-parallel ranks, the groups replicas of each other.

FSDP2's `fully_shard` over a 2-D device mesh (replicate, shard) is PyTorch's HSDP; torchtitan sets it with
data_parallel_replicate_degree x data_parallel_shard_degree, MaxText with dcn_data_parallelism (replicas, across
nodes) over ici_fsdp_parallelism (sharding, inside a node). The planner's view, `Strategy(dp=..., zero=3,
dp_shard=S)`:
    shard       the dp ranks split into dp / S groups of S consecutive dp ranks; inside one, ZeRO-3 as usual: each
                rank keeps 1/(S x cp) of the parameters, gradients and optimizer state (`shard_strategy`: the
                memory, the gathers and reduce-scatters of each unit, as ZeRO-3 over S);
    replicate   after a unit's reduce-scatter, its gradient shard is all-reduced over the dp / S ranks that hold the
                same shard in the other groups (`replicate_group`), in every micro-batch's backward as FSDP2 does
                by default; it runs after the reduce-scatter on the unit's way out of backward, so the per-unit
                timeline (dp_sync.zero3_exposed) hides it behind the units after it (`replicate_unit_seconds`).
The shard groups are contiguous blocks of ranks (dp is outside tp and cp), so with S x tp x cp GPUs per node the
gathers and reduce-scatters stay inside a node and only the all-reduce of shards crosses nodes.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from ddp_lab.course.plan import pipeline_stages
from ddp_lab.course.plan.collectives import collective_time
from ddp_lab.course.rank_layout import Group


def check_fields(strategy) -> None:
    """ValueError (saying how to fix it) for a dp_shard the planner cannot plan."""
    if strategy.dp_shard is None:
        return
    if strategy.dp_shard < 1 or strategy.dp % strategy.dp_shard:
        raise ValueError(f"dp_shard={strategy.dp_shard} does not divide dp={strategy.dp}: HSDP shards over groups of "
                         f"dp_shard data-parallel ranks; use a divisor of dp")
    if strategy.zero != 3:
        raise ValueError(f"dp_shard={strategy.dp_shard} with zero={strategy.zero}: hybrid sharding (HSDP) is ZeRO-3 "
                         f"inside each group; use zero=3, or drop dp_shard")
    if strategy.replicas > 1:
        raise ValueError("dp_shard with DiLoCo replicas: the planner does not model HSDP inside DiLoCo replicas; "
                         "drop one of them")


def shard_strategy(strategy):
    """The strategy one shard group runs: dp_shard data-parallel ranks, ZeRO-3 (the strategy itself without HSDP).

    Example:
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> shard_strategy(Strategy(dp=32, zero=3, dp_shard=8)).dp
        8
    """
    if strategy.dp_shard is None:
        return strategy
    return strategy.with_(dp=strategy.dp_shard, dp_shard=None)


def replicate_group(strategy) -> Group:
    """The ranks that hold the same shard in every shard group: dp / dp_shard ranks, tp x cp x dp_shard apart."""
    return Group(strategy.dp // strategy.dp_shard, strategy.tp * strategy.cp * strategy.dp_shard, world=strategy.gpus)


def replicate_unit_seconds(model, cluster, strategy, stage: int) -> list[float]:
    """Seconds of each unit's all-reduce of its gradient shard over `replicate_group` (dp_sync.fsdp_units' units,
    layers then the root), per micro-batch; all zero without HSDP."""
    from ddp_lab.course.plan import dp_sync, memory   # lazy: both import strategy.py, which imports this module
    shard = shard_strategy(strategy)
    units = dp_sync.fsdp_units(model, shard, stage)
    if strategy.dp_shard is None or strategy.dp == strategy.dp_shard:
        return [0.0] * len(units)
    g = memory.bytes_per_parameter(strategy)[1]
    ranks = shard.dp * shard.cp                       # a unit's gradient is reduce-scattered over them first
    group = replicate_group(strategy)
    once = {unit: collective_time("all_reduce", g * -(-unit // ranks), cluster, group) for unit in set(units)}
    return [once[unit] for unit in units]


def replicate_seconds(model, cluster, strategy) -> float:
    """Seconds per step of the all-reduces of gradient shards between the shard groups, before any overlap."""
    if strategy.dp_shard is None:
        return 0.0
    return strategy.grad_accum * max(sum(replicate_unit_seconds(model, cluster, strategy, stage))
                                     for stage in pipeline_stages.stages_to_check(strategy, model))

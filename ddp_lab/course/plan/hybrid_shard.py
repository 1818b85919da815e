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
                timeline (dp_sync.zero3_exposed) hides it behind the units after it (`replicate_unit_seconds`);
                that timeline has one clock for DP's collectives, so the all-reduce also holds back the next
                units' prefetched gathers, which FSDP2 runs on a stream of their own over NVLink while the
                all-reduce uses the network: on this count the planner errs slow.
The shard groups are contiguous blocks of ranks (dp is outside tp and cp), so with S x tp x cp GPUs per node the
gathers and reduce-scatters stay inside a node and only the all-reduce of shards crosses nodes.

The planner: notebooks/13-plan-your-training-run.ipynb (no lesson runs HSDP itself).
"""

from __future__ import annotations

from ddp_lab.course.plan import outer_sync, pipeline_stages
from ddp_lab.course.plan.collectives import block_cut, collective_time
from ddp_lab.course.rank_layout import Group


def check_fields(strategy) -> None:
    """ValueError (saying how to fix it) for a dp_shard the planner cannot plan."""
    if strategy.dp_shard is None:
        return
    if not isinstance(strategy.dp_shard, int) or isinstance(strategy.dp_shard, bool) or strategy.dp_shard < 1:
        raise ValueError(f"dp_shard must be an integer >= 1 (the data-parallel ranks of one HSDP shard group), got "
                         f"{strategy.dp_shard!r}")
    if strategy.dp % strategy.dp_shard:
        raise ValueError(f"dp_shard={strategy.dp_shard} does not divide dp={strategy.dp}: HSDP shards over groups of "
                         f"dp_shard data-parallel ranks; use a divisor of dp")
    if strategy.zero != 3:
        raise ValueError(f"dp_shard={strategy.dp_shard} with zero={strategy.zero}: hybrid sharding (HSDP) is ZeRO-3 "
                         f"inside each group; use zero=3, or drop dp_shard")
    if strategy.replicas > 1:
        raise ValueError("dp_shard with DiLoCo replicas: the planner does not model HSDP inside DiLoCo replicas; "
                         "drop one of them")


def check(model, strategy, gpus_per_node: int | None = None, region_gpus: int | None = None) -> None:
    """ValueError (saying how to fix it) for HSDP the planner would mis-plan: a model with experts (their gradients
    would need their own all-reduce across the groups), or shard groups of dp_shard x tp x cp ranks that a node's or
    a region's boundary cuts (`region_gpus`: GPUs in one region, ClusterSpec.region_gpus): smaller than a node (a
    region) without dividing it, or larger without being whole nodes (regions). The planner costs a shard group as
    the first block of consecutive ranks, so a group that some boundary cuts and the first does not would be costed
    on the faster link."""
    if strategy.dp_shard is None:
        return
    if model.moe is not None:
        raise ValueError(f"dp_shard={strategy.dp_shard} with {model.name}'s experts: the planner models hybrid "
                         "sharding (HSDP) for dense models only; drop dp_shard")
    block = strategy.dp_shard * strategy.tp * strategy.cp
    cut = block_cut(block, strategy.gpus, gpus_per_node, region_gpus)
    if cut:
        unit, gpus = cut
        raise ValueError(f"dp_shard={strategy.dp_shard}: shard groups of dp_shard x tp x cp = {block} ranks "
                         f"would straddle the {gpus}-GPU {unit}s; choose dp_shard so that dp_shard x tp x cp "
                         f"divides {gpus} or is a multiple of it")


# Shard groups of this many nodes are what a search tries ("auto"): one node (torchtitan's and MaxText's usual HSDP)
# up to 16 (NVIDIA's MaxText recipe for Llama 3 70B on 2,048 H100s shards over 128 GPUs). Every whole-node divisor
# of dp instead made a search over 1,024 nodes try 5,072 plans where 1,840 are tried without HSDP.
AUTO_GROUP_NODES = (1, 2, 4, 8, 16)


def searched_sizes(model, cluster, strategy, wanted="auto") -> list[int]:
    """The shard-group sizes a search tries beside a ZeRO-3 plan (search.candidates' dp_shard): "auto" takes every
    divisor S of dp (2 <= S < dp) whose shard groups are `AUTO_GROUP_NODES` whole nodes (S x tp x cp that many nodes'
    GPUs: the gathers and reduce-scatters stay on the fast links or span whole nodes, and only the all-reduce of
    shards crosses between groups, as torchtitan and MaxText lay HSDP out); an int or a tuple takes those of its
    sizes that divide dp, are below it and pass `check`; None takes none. A model with experts, a plan on one node
    and DiLoCo replicas get none.

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> searched_sizes(Transformer.preset("llama3-8b"), ClusterSpec.preset("h100-sxm", nodes=8),
        ...                Strategy(dp=32, tp=2, zero=3))
        [4, 8, 16]
    """
    if wanted is None or model.moe is not None or strategy.replicas > 1 or cluster.gpus <= cluster.gpus_per_node:
        return []
    per_rank = strategy.tp * strategy.cp                 # GPUs per data-parallel rank
    if wanted == "auto":
        groups = [nodes * cluster.gpus_per_node for nodes in AUTO_GROUP_NODES]
        asked = [gpus // per_rank for gpus in groups if gpus % per_rank == 0]
    else:
        asked = sorted({wanted} if isinstance(wanted, int) else set(wanted))
    sizes = []
    for size in asked:
        if not 1 < size < strategy.dp or strategy.dp % size:
            continue
        try:
            check(model, strategy.with_(dp_shard=size), cluster.gpus_per_node, cluster.region_gpus)
        except ValueError:
            continue
        sizes.append(size)
    return sizes


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


def zero_group_strategy(strategy):
    """The strategy whose dp ranks one ZeRO shard spans: one DiLoCo replica's (outer_sync.inner_strategy), one HSDP
    shard group's (`shard_strategy`), else the strategy itself (the two cannot be combined: `check_fields`).

    Example:
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> zero_group_strategy(Strategy(dp=112, zero=3, replicas=14, sync_every=100)).dp
        8
    """
    return shard_strategy(outer_sync.inner_strategy(strategy))


def replicate_group(strategy) -> Group:
    """The ranks that hold the same shard in every shard group: dp / dp_shard ranks, tp x cp x dp_shard apart."""
    return Group(strategy.dp // strategy.dp_shard, strategy.tp * strategy.cp * strategy.dp_shard, world=strategy.gpus)


def replicate_unit_seconds(model, cluster, strategy, stage: int) -> list[float]:
    """Seconds of each unit's all-reduce of its gradient shard over `replicate_group` (dp_sync.fsdp_units' units,
    layers then the root), per micro-batch; all zero without HSDP."""
    from ddp_lab.course.plan import dp_sync, memory   # lazy: both import strategy.py, which imports this module
    if strategy.dp_shard is not None and model.moe is not None:
        check(model, strategy)                        # refused: the experts' gradients are not all-reduced here
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

"""DiLoCo-style outer synchronisation: data-parallel replicas that exchange pseudo-gradients once every H steps.

DiLoCo (Douillard et al. 2023, arXiv:2311.08105, Algorithm 1) trains k replicas apart: each takes
H inner optimizer steps (AdamW) on its own data, then the replicas all-reduce the pseudo-gradient
Delta = theta_global - theta_local (the average of how far each moved) and an outer optimizer
(SGD with Nesterov momentum) applies it to the global parameters. Between syncs the replicas
exchange nothing, so data-parallel traffic falls by H. INTELLECT-1 (Jaghouar et al. 2024,
arXiv:2412.01152) trained a 10B model across three continents this way: FSDP inside each node,
DiLoCo between nodes (the abstract's "hybrid DiLoCo-FSDP2"), H = 100 inner steps (its model card),
and the pseudo-gradient sent as int8: "a 400× reduction in communication bandwidth compared to
traditional data-parallel training settings" (abstract), 100 steps x 4 bytes (fp32) / 1 byte (int8).
What the run measured (Section 3.2, Table 2: 83-96 % of the time computing, the blocking outer
all-reduce taking a median of 103-469 s over internet links) depends on the link, which the planner
takes as given (`--cross-region-gbps`; lesson 16 compares the two).

The planner's view, `Strategy(dp=..., replicas=R, sync_every=H, sync_precision=...)`:
    inner   the dp ranks split into R replicas of dp / R dp ranks, each replica a block of
            GPUs / R consecutive ranks of its own (the replicas outermost, as DiLoCo's run in clusters of
            their own), laid out inside as a plan of dp / R is (its tp, cp, dp and pp groups among its
            GPUs); inside a replica everything is as before (ZeRO over dp / R x cp ranks, gradients
            reduced every step), `inner_strategy`;
    outer   every H steps each rank all-reduces the pseudo-gradient of the parameters whose
            optimizer state it holds (its ZeRO shard; all of its stage's with ZeRO 0) with the
            ranks holding the same shard in the other replicas (`outer_group`: R ranks, a replica's
            GPUs apart), blocking (INTELLECT-1 synchronised blocking); the step time carries 1/H of
            it (`TimeBreakdown.outer_sync`);
    memory  the outer optimizer keeps, for the same parameters, the fp32 global copy theta_global
            and its Nesterov momentum: 8 bytes per parameter (`outer_state_bytes`; INTELLECT-1
            keeps them in CPU memory, which the planner does not model: it counts them on the GPU).
A slow link between the replicas (a cross-region link, `ClusterSpec.region_nodes`) is what makes
this worth it: collectives.py costs a group that spans regions on that link.

Introduced in notebooks/16-communicate-less.ipynb (the planner itself: notebooks/13-plan-your-training-run.ipynb).
"""

from __future__ import annotations

from ddp_lab.course.plan import pipeline_stages
from ddp_lab.course.plan.collectives import block_cut, collective_time
from ddp_lab.course.rank_layout import Group

SYNC_BYTES = {"fp32": 4, "bf16": 2, "int8": 1}    # bytes of one pseudo-gradient value on the wire
OUTER_STATE_BYTES = 4 + 4                          # fp32 global parameters + fp32 Nesterov momentum


EACH_DP_RANK = "each"   # replicas: every data-parallel rank its own replica (search.candidates; the CLI's default)


def holds(dp: int, cp: int, ep: int, replicas: int) -> bool:
    """Whether `replicas` DiLoCo replicas can split a plan of this dp, cp and ep: they divide dp, and each replica's
    dp x cp holds whole ep groups (expert parallelism stays inside one replica). check_fields says which rule fails.

    Example:
        >>> holds(16, 1, 8, 2), holds(16, 1, 8, 4), holds(8, 1, 1, 3)
        (True, False, False)
    """
    return not dp % replicas and not (dp // replicas * cp) % ep


def outer_sync_asked(sync_every: int | None = None, sync_precision: str | None = None) -> bool:
    """Whether an outer sync is asked for: sync_every or sync_precision given (None: not given; sync_every=1 asks for
    replicas that sync every step). Then `replicas` not given means each dp rank one: the command line's and
    search.candidates' default, EACH_DP_RANK."""
    return sync_every is not None or sync_precision is not None


def outer_sync_on(replicas=None, sync_every: int | None = None, sync_precision: str | None = None) -> bool:
    """Whether these DiLoCo fields, as given (None: not given), make replicas: a count above 1 (or EACH_DP_RANK), or
    an outer sync asked for (`outer_sync_asked`). The command line's flags and search.candidates' options alike."""
    return replicas not in (None, 1) or outer_sync_asked(sync_every, sync_precision)


def straddled(strategy, gpus_per_node: int | None = None, region_gpus: int | None = None) -> str | None:
    """Why the replicas' blocks of gpus / replicas GPUs straddle a node's or a region's boundary (None if none does).

    The planner costs every replica's groups as the first replica's (`inner_strategy`), so a replica that some
    boundary cuts and the first does not would be costed on the faster link; a block must divide the unit or be
    whole units, as HSDP's shard groups (hybrid_shard.check).

    Example:
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> straddled(Strategy(dp=48, replicas=4, sync_every=10), 8, 16)   # 12 GPUs a replica
        'replicas=4: replicas of 12 GPUs each would straddle the 8-GPU nodes (the planner costs every replica as the first); use replicas in [3, 6, 12, 24, 48]'
        >>> straddled(Strategy(dp=48, replicas=3, sync_every=10), 8, 16) is None         # 16 GPUs: one region each
        True
    """
    cut = cuts(strategy.gpus, strategy.replicas, gpus_per_node, region_gpus)
    if cut is None:
        return None
    whole = uncut_counts(strategy.dp, strategy.cp, strategy.ep, strategy.gpus, gpus_per_node, region_gpus)
    return (f"replicas={strategy.replicas}: replicas of {strategy.gpus // strategy.replicas} GPUs each would straddle "
            f"the {cut[1]}-GPU {cut[0]}s (the planner costs every replica as the first)"
            + (f"; use replicas in {whole}" if whole else "; no replica count of this plan's dp avoids it"))


def uncut_counts(dp: int, cp: int, ep: int, gpus: int, gpus_per_node: int | None = None,
                 region_gpus: int | None = None) -> list[int]:
    """The replica counts of two or more that split a plan of this dp, cp and ep (`holds`) into blocks of
    consecutive GPUs that no node or region boundary cuts (`cuts`).

    Example:
        >>> uncut_counts(48, 1, 1, 48, 8)      # 4 replicas of 12 GPUs, 8 of 6 and 16 of 3 would cut 8-GPU nodes
        [2, 3, 6, 12, 24, 48]
    """
    return [r for r in range(2, dp + 1) if holds(dp, cp, ep, r) and cuts(gpus, r, gpus_per_node, region_gpus) is None]


def check_count(dp: int, cp: int, ep: int, replicas: int, gpus: int, gpus_per_node: int | None = None,
                region_gpus: int | None = None, synced: bool = False) -> None:
    """Refuse a replica count that does not divide dp, naming the counts that do, hold whole ep groups and that no
    node or region boundary cuts (1 too, unless `synced`: sync_every or sync_precision given, which one replica
    refuses): check_fields' rule where the cluster is known (the command line asks before it builds the Strategy;
    check_fields, knowing no cluster, names every divisor).

    Example:
        >>> check_count(48, 1, 1, 5, 48, 8, synced=True)
        Traceback (most recent call last):
        ...
        ValueError: replicas=5 does not divide the 48 data-parallel ranks: ... use replicas in [2, 3, 6, 12, 24, 48]
    """
    if replicas < 1 or not dp % replicas:
        return
    counts = ([] if synced else [1]) + uncut_counts(dp, cp, ep, gpus, gpus_per_node, region_gpus)
    if counts:
        raise ValueError(_not_dividing(replicas, dp, counts))
    if any(holds(dp, cp, ep, r) for r in range(2, dp + 1)):     # some count splits dp, but every one cuts a unit
        which = "divides it" if ep == 1 else f"divides it into replicas of whole ep={ep} groups"
        why = f"every count that {which} makes replicas that a node or region boundary cuts"
    else:
        fewest = next(r for r in range(2, dp + 1) if not dp % r) if dp > 1 else 1
        why = (f"no replica would hold whole ep={ep} groups (the fewest, {fewest} replicas, hold {dp // fewest * cp} "
               f"dp x cp ranks each)")
    raise ValueError(f"replicas={replicas} does not divide the {dp} data-parallel ranks, and no count of two or more "
                     f"replicas splits this "
                     f"plan: {why}; drop replicas={replicas} and sync_every (sync_precision) for no outer sync, or "
                     f"change the plan")


def _not_dividing(replicas: int, dp: int, counts: list[int]) -> str:
    # the data-parallel size in words, not as dp=N: a command line that did not give --dp reads no flag it did not type
    return (f"replicas={replicas} does not divide the {dp} data-parallel ranks: each DiLoCo replica holds dp / replicas "
            f"data-parallel ranks; use replicas in {counts}")


def cuts(gpus: int, replicas: int, gpus_per_node: int | None, region_gpus: int | None) -> tuple[str, int] | None:
    """The boundary that `replicas` blocks of gpus / replicas GPUs straddle (collectives.block_cut), or None."""
    return None if replicas == 1 else block_cut(gpus // replicas, gpus, gpus_per_node, region_gpus)


def check_fields(strategy) -> None:
    """The outer sync's own rules (Strategy.__post_init__): `holds`' two, each with its message, and the others."""
    if strategy.sync_precision not in SYNC_BYTES:
        raise ValueError(f"Strategy.sync_precision must be one of {tuple(SYNC_BYTES)}, got {strategy.sync_precision!r}")
    synced = strategy.sync_every > 1 or strategy.sync_precision != "fp32"     # fields one replica refuses (below)
    if strategy.dp % strategy.replicas:       # 1 is not offered then
        raise ValueError(_not_dividing(strategy.replicas, strategy.dp,
                                       [d for d in range(1 + synced, strategy.dp + 1) if strategy.dp % d == 0]))
    if strategy.replicas == 1 and synced:
        raise ValueError(f"sync_every={strategy.sync_every} (sync_precision={strategy.sync_precision!r}) describes an "
                         f"outer sync between DiLoCo replicas, but replicas=1: set replicas to the number of replicas "
                         f"(a divisor of dp), or drop sync_every and sync_precision")
    if strategy.replicas > 1 and (strategy.dp // strategy.replicas * strategy.cp) % strategy.ep:
        raise ValueError(f"ep={strategy.ep} does not divide a replica's dp x cp = {strategy.dp // strategy.replicas} x "
                         f"{strategy.cp}: expert parallelism stays inside one replica; use fewer replicas or a smaller ep")


def inner_strategy(strategy):
    """The strategy one replica runs: dp / replicas data-parallel ranks, no outer sync (itself without replicas).

    Example:
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> inner_strategy(Strategy(dp=112, zero=3, replicas=14, sync_every=100)).dp
        8
    """
    if strategy.replicas == 1:
        return strategy
    return strategy.with_(dp=strategy.dp // strategy.replicas, replicas=1, sync_every=1, sync_precision="fp32")


def outer_group(strategy) -> Group:
    """The ranks that hold the same shard in every replica: replicas ranks, one replica's GPUs (gpus / replicas)
    apart, since each replica is a block of consecutive ranks (the module docstring).

    Example:
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> outer_group(Strategy(dp=4, tp=8, pp=2, replicas=2, sync_every=100)).stride   # 32 GPUs a replica
        32
    """
    return Group(strategy.replicas, strategy.gpus // strategy.replicas, world=strategy.gpus)


def synced_parameters(model, strategy) -> int:
    """Parameters whose pseudo-gradient one rank all-reduces at each outer sync: those it keeps optimizer state for.

    The most loaded pipeline stage's, sharded by ZeRO >= 1 over a replica's dp x cp ranks (memory.stage_state_bytes).
    """
    from ddp_lab.course.plan import memory   # lazy: memory imports strategy.py, which imports this module
    inner = inner_strategy(strategy)
    per_parameter = memory.bytes_per_parameter(strategy)[2]
    return max(memory.stage_state_bytes(model, inner, stage).optimizer // per_parameter
               for stage in pipeline_stages.stages_to_check(strategy, model))


def wire_bytes_per_step(model, strategy) -> float:
    """Bytes one rank puts into the outer all-reduce per training step: its pseudo-gradient / sync_every.

    Example (INTELLECT-1's 400x, module docstring):
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> model = Transformer.preset("llama3-8b")
        >>> diloco = Strategy(dp=14, replicas=14, sync_every=100, sync_precision="int8")
        >>> round(synced_parameters(model, diloco) * 4 / wire_bytes_per_step(model, diloco))
        400
    """
    if strategy.replicas == 1:
        return 0.0
    return synced_parameters(model, strategy) * SYNC_BYTES[strategy.sync_precision] / strategy.sync_every


def seconds_per_step(model, cluster, strategy) -> float:
    """Seconds per training step the outer sync adds: one blocking all-reduce over `outer_group`, every sync_every steps."""
    if strategy.replicas == 1:
        return 0.0
    nbytes = synced_parameters(model, strategy) * SYNC_BYTES[strategy.sync_precision]
    return collective_time("all_reduce", nbytes, cluster, outer_group(strategy)) / strategy.sync_every


def outer_state_bytes(model, strategy) -> int:
    """Bytes of the outer optimizer's state on one GPU: fp32 global parameters and Nesterov momentum (8 per parameter)."""
    if strategy.replicas == 1:
        return 0
    return OUTER_STATE_BYTES * synced_parameters(model, strategy)

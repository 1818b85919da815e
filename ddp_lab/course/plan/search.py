"""Search: every valid plan for a model on a cluster, kept if it fits memory, ranked by throughput.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ddp_lab.course.plan import context_parallel, experts, hybrid_shard, outer_sync, pipeline_stages
from ddp_lab.course.plan.efficiency import early_stop_can_skip_last_gemm
from ddp_lab.course.plan.memory import MemoryBreakdown, memory
from ddp_lab.course.plan.steptime import TimeBreakdown, mfu, step_time, tokens_per_second
from ddp_lab.course.plan.strategy import Strategy, check, divisors

# The memory reserve: the share of each GPU's memory a plan may not use, kept for what `memory()`
# leaves out - the CUDA context and cuBLAS workspaces (about 0.5-1 GB), NCCL's buffers, the caching
# allocator's fragmentation, and temporaries such as a GEMM's output before it is saved. A plan fits
# if its counted bytes stay within (1 - reserve) of the GPU's memory; the margin is what is left.
# 10 % (8 GB of an 80 GB GPU) is a rule of thumb, not a measurement: a plan within a few GB of the
# line should be tried before it is trusted. evaluate(reserve=...), search(reserve=...) and the CLI's
# --memory-reserve change it.
MEMORY_RESERVE = 0.10
DEFAULT_TOKENS_PER_BATCH = 2**22   # 4M tokens per step, the scale GPT-3 and Llama 3 trained at


def percent_text(share: float) -> str:
    """A share of memory as a percentage, with the decimals it needs: 0.1 -> "10%", 0.001 -> "0.1%" (not "0%")."""
    return f"{round(100 * share, 2):g}%"


@dataclass(frozen=True)
class Plan:
    """A strategy with its predicted per-GPU memory, step time, tokens/s and MFU.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    model: object
    cluster: object
    strategy: Strategy
    memory: MemoryBreakdown
    time: TimeBreakdown
    tokens_per_second: float
    mfu: float
    reserve: float = MEMORY_RESERVE

    @property
    def usable_memory(self) -> float:
        """Bytes a plan may use on each GPU: its memory less the reserve (see MEMORY_RESERVE)."""
        return (1 - self.reserve) * self.cluster.gpu.memory

    @property
    def margin(self) -> float:
        """Bytes left on the most loaded GPU within the usable memory (negative: does not fit by that much)."""
        return self.usable_memory - self.memory.total

    @property
    def fits(self) -> bool:
        """True if the most loaded GPU needs at most the usable memory (GPU memory less the reserve)."""
        return self.margin >= 0


def evaluate(model, cluster, strategy: Strategy, tp_across_nodes: bool = False,
             reserve: float = MEMORY_RESERVE) -> Plan:
    """Check `strategy` against the model and cluster (errors say the fix) and predict its cost.

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> from ddp_lab.course.plan.model import Transformer
        >>> plan = evaluate(Transformer.preset("llama3-8b"), ClusterSpec.preset("h100-sxm", nodes=4),
        ...                 Strategy(dp=32, zero=3, micro_batch=1, grad_accum=16, recompute="full"))
        >>> plan.fits
        True

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    check(model, strategy, gpus=cluster.gpus, gpus_per_node=cluster.gpus_per_node, tp_across_nodes=tp_across_nodes,
          region_gpus=cluster.region_gpus)
    cluster.gpu.flops(strategy.precision)   # raises if the GPU has no such precision
    if not 0 <= reserve < 1:
        raise ValueError(f"reserve={reserve!r}: the share of GPU memory kept free must be in [0, 1), e.g. 0.1")
    time = step_time(model, cluster, strategy)
    return Plan(model, cluster, strategy, memory(model, strategy), time,
                tokens_per_second(model, strategy, time), mfu(model, cluster, strategy, time), reserve)


def candidates(model, cluster, global_batch: int, micro_batches=(1, 2, 4, 8), zero=(0, 1, 2, 3),
               recompute=("none", "selective", "full"), precision: str | None = None,
               tp_across_nodes: bool = False, cp=(1,), ep=None, virtual_stages=(1, 2), attention: str = "flash",
               fp32_grads: bool = False, checkpoint_early_stop: bool = False, flash_kernel: str = "fa2",
               sequence_parallel: bool = False, tp_comm_overlap: bool = False, overlap_param_gather: bool = False,
               dp_shard="auto", moe_dispatch: str = "all-to-all", sync_every: int | None = None, replicas=None,
               sync_precision: str | None = None, ep_overlap: bool = False, expert_imbalance: float = 1.0,
               expert_tp_one: bool = True):
    """Every valid Strategy: dp*tp*pp*cp = GPUs, tp divides the heads (and kv heads) and the GPUs of a
    node (unless tp_across_nodes), dp*micro_batch divides global_batch; a pp that divides the layers splits
    them equally, any other pp with fewer on the first and the last stage (pipeline_stages.fewer_at_the_ends, never
    interleaved), where such a split exists.
    Sequence parallelism is tried on and off whenever tp > 1 (only on for a mixture-of-experts model, which
    Megatron-Core trains with tp > 1 only so: experts.needs_sequence_parallel); with pp > 1 the 1F1B schedule and
    the interleaved one with each of `virtual_stages` > 1 that divides the layers per stage (and
    whose micro-batches divide by pp). With flash attention selective recomputation is not tried:
    it keeps what no recomputation keeps (activations.py). Precision: bf16 mixed precision where
    the GPU has it, else fp16 (a T4), unless given. checkpoint_early_stop: the plans with full
    recomputation recompute as PyTorch's non-reentrant checkpoint does (Strategy.checkpoint_early_stop;
    left off for a model whose dropout or experts make that checkpoint re-run the whole layer). flash_kernel:
    the kernel every plan's flash attention runs (Strategy.flash_kernel, attention_kernels.py).
    The framework's options, on every plan they apply to: sequence_parallel (then tried only on, wherever
    tp > 1), tp_comm_overlap (plans with tp > 1 and sequence parallelism), overlap_param_gather (ZeRO 1 and 2),
    moe_dispatch (how MoE tokens reach their experts, Strategy.moe_dispatch: plans where it changes the time,
    experts.dispatcher_matters),
    ep_overlap (the all-to-alls beside another micro-batch's compute: plans with ep > 1, interleaved where pp > 1,
    without full recomputation). expert_imbalance (the busiest expert-parallel rank's routed tokens over a balanced
    share, a property of the run's routing, not of its layout): on every plan with ep > 1 (experts.busiest_rank_load).

    cp, ep: the context- and expert-parallel sizes to try, an int, a tuple, or "auto" (every size
    that fits: cp with 2 x cp chunks of the sequence, ep dividing the experts and dp x cp, or tp x dp x cp with
    each expert whole on its rank, below). cp
    defaults to 1; ep to "auto" for a mixture-of-experts model (its main parallelism) and 1 otherwise.
    expert_tp_one: with tp > 1, a mixture-of-experts model's plans are tried with the routed experts split tp ways
    (the attention's, Megatron-Core's default) and, unless False, whole on each rank (Strategy.expert_tp = 1, as
    Megatron-LM's recipes for fine-grained experts set it), ep then dividing the experts and tp x cp x dp
    (expert_tp.py; their tensor-parallel collectives differ: steptime.moe_layer_tp_change); not with DiLoCo replicas,
    whose ep groups the planner keeps inside a replica's dp x cp ranks (outer_sync.holds).
    dp_shard: beside each ZeRO-3 plan, its hybrid-sharded variants (HSDP, hybrid_shard.py) with these shard-group
    sizes, an int, a tuple, "auto" (the default: `hybrid_shard.searched_sizes`, shard groups of whole nodes) or None
    (none).
    sync_every, replicas, sync_precision: a DiLoCo-style outer sync on every plan (Strategy's fields, outer_sync.py,
    lesson 16): `replicas` of the dp ranks (outer_sync.EACH_DP_RANK: every dp rank one, each replica then its
    tp x pp x cp GPUs, and plans with dp 1 left out; None, the default: that where sync_every or sync_precision asks
    for an outer sync, else none) sync every `sync_every` steps (None: not asked; 1 when replicas are given), at
    `sync_precision` (None: not asked; fp32); the plans `replicas` cannot split (outer_sync.holds) or whose
    replicas a node or region boundary would cut (outer_sync.straddled) are left out, and hybrid sharding is not
    tried (hybrid_shard.searched_sizes).

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> from ddp_lab.course.plan.model import Transformer
        >>> plans = list(candidates(Transformer.preset("llama3-8b"), ClusterSpec.preset("h100-sxm"), 64))
        >>> any(s.virtual_stages == 2 for s in plans), any(s.recompute == "selective" for s in plans)
        (True, False)
    """
    # a dispatch or an imbalance for a model with no experts: refused
    experts.check(model, Strategy(moe_dispatch=moe_dispatch, expert_imbalance=expert_imbalance))
    if precision is None:
        precision = "bf16" if "bf16" in cluster.gpu.peak_flops else "fp16"
    if attention == "flash":
        recompute = tuple(rc for rc in recompute if rc != "selective")
    checkpoint_early_stop = checkpoint_early_stop and early_stop_can_skip_last_gemm(model)
    outer = outer_sync.outer_sync_on(replicas, sync_every, sync_precision)
    if replicas is None:
        replicas = outer_sync.EACH_DP_RANK if outer else 1
    sync_every = 1 if sync_every is None else sync_every                  # Strategy refuses a bad value
    sync_precision = "fp32" if sync_precision is None else sync_precision
    if replicas != outer_sync.EACH_DP_RANK and (isinstance(replicas, bool) or not isinstance(replicas, int)
                                                 or replicas < 1):
        raise ValueError(f"replicas={replicas!r}: a number of DiLoCo replicas >= 1, or {outer_sync.EACH_DP_RANK!r} "
                         f"(each dp rank one)")
    gpus = cluster.gpus
    for tp in divisors(gpus):
        if (cluster.gpus_per_node % tp and not tp_across_nodes) or model.heads % tp or model.kv_heads_ % tp \
                or model.ffn_ % tp:
            continue
        for cp_size in _sizes(cp, divisors(gpus // tp)):
            if not context_parallel.splits_sequence(model, cp_size):
                continue
            for pp in divisors(gpus // (tp * cp_size)):
                ends = {}         # pp does not divide the layers: fewer on the first and the last stage, if it can
                if model.layers % pp:
                    split = pipeline_stages.fewer_at_the_ends(model.layers, pp)
                    if split is None:
                        continue
                    ends = dict(first_stage_layers=split[0], last_stage_layers=split[1])
                dp = gpus // (tp * cp_size * pp)
                for ep_size, etp in _expert_layouts(model, ep, tp, dp * cp_size, expert_tp_one and not outer):
                    for stage, mb, rc, sp in itertools.product(zero, micro_batches, recompute, (False, True)):
                        if ((sp and tp == 1) or global_batch % (dp * mb)
                                or ((sequence_parallel and tp > 1 or experts.needs_sequence_parallel(model, tp))
                                    and not sp)):
                            continue
                        accum = global_batch // (dp * mb)
                        base = Strategy(dp=dp, tp=tp, pp=pp, zero=stage, micro_batch=mb, grad_accum=accum,
                                        sequence_parallel=sp, recompute=rc, precision=precision, cp=cp_size,
                                        ep=ep_size, expert_tp=etp, attention=attention, fp32_grads=fp32_grads,
                                        flash_kernel=flash_kernel,
                                        checkpoint_early_stop=checkpoint_early_stop and rc == "full",
                                        tp_comm_overlap=tp_comm_overlap and sp,
                                        overlap_param_gather=overlap_param_gather and stage in (1, 2),
                                        expert_imbalance=expert_imbalance if ep_size > 1 else 1.0, **ends)
                        if moe_dispatch != "all-to-all" and experts.dispatcher_matters(model, cluster, base):
                            base = base.with_(moe_dispatch=moe_dispatch)    # where it changes something
                        if outer:
                            count = dp if replicas == outer_sync.EACH_DP_RANK else replicas
                            if not outer_sync.holds(dp, cp_size, ep_size, count) or (count == 1 and replicas != 1):
                                continue
                            base = base.with_(replicas=count, sync_every=sync_every, sync_precision=sync_precision)
                            if outer_sync.straddled(base, cluster.gpus_per_node, cluster.region_gpus):
                                continue
                        shards = hybrid_shard.searched_sizes(model, cluster, base, dp_shard) if stage == 3 else []
                        for schedule in [base] + [base.with_(schedule="interleaved", virtual_stages=v)
                                                  for v in virtual_stages
                                                  if v > 1 and pp > 1 and not model.layers % (pp * v)
                                                  and not accum % pp]:
                            if (ep_overlap and ep_size > 1 and (pp == 1 or schedule.schedule == "interleaved")
                                    and rc != "full" and precision != "fp32"):     # Megatron-Core's own rules
                                schedule = schedule.with_(ep_overlap=True)
                            yield schedule
                            yield from (schedule.with_(dp_shard=size) for size in shards)


def _sizes(wanted, possible: list[int]) -> list[int]:
    """The sizes of `possible` that `wanted` (an int, a tuple of ints, or "auto": all) asks for."""
    if wanted == "auto":
        return possible
    wanted = (wanted,) if isinstance(wanted, int) else tuple(wanted)
    return [size for size in possible if size in wanted]


def _expert_layouts(model, ep, tp: int, dp_cp: int, expert_tp_one: bool) -> list[tuple[int, int | None]]:
    """(ep, expert_tp) pairs to try: the asked ep sizes with the experts split tp ways (expert_tp None) where tp
    divides their FFN, and for a mixture-of-experts model with tp > 1 (unless `expert_tp_one` is False) those with
    them whole on each rank, ep then out of the tp x dp x cp ranks."""
    layouts = [(size, None) for size in _expert_parallel_sizes(model, ep, dp_cp)] \
        if experts.splits_for_tp(model, tp) else []
    if model.moe is not None and tp > 1 and expert_tp_one:
        layouts += [(size, 1) for size in _expert_parallel_sizes(model, ep, tp * dp_cp)]
    return layouts


def _expert_parallel_sizes(model, ep, ranks: int) -> list[int]:
    """ep sizes to try: those asked for that divide `ranks` (the dp x cp ranks the experts are laid out over, or
    tp x dp x cp with each expert whole on its rank) and the experts (1 for a dense model)."""
    if model.moe is None:
        return [1] if ep in (None, "auto") or 1 in _sizes(ep, [1]) else []
    possible = [d for d in divisors(ranks) if model.moe.experts % d == 0]
    return _sizes("auto" if ep is None else ep, possible)


def default_global_batch(model, cluster) -> int:
    """Sequences per step when none is given: the multiple of the GPU count nearest 4M tokens (DEFAULT_TOKENS_PER_BATCH
    / seq_len), at least one sequence per GPU, so that every data-parallel size the cluster allows splits it (512 on
    72 GB200s would fit no dp of llama3-8b's).

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> from ddp_lab.course.plan.model import Transformer
        >>> default_global_batch(Transformer.preset("llama3-8b"), ClusterSpec.preset("h100-sxm"))   # 2**22 / 8192
        512
        >>> default_global_batch(Transformer.preset("llama3-8b"), ClusterSpec.preset("gb200"))   # 7 x 72
        504

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    return nearest_multiple(DEFAULT_TOKENS_PER_BATCH // model.seq_len, cluster.gpus)


def nearest_multiple(value: int, step: int) -> int:
    """The positive multiple of `step` nearest `value`, the smaller one on a tie (the default global batch's rule).

    Example:
        >>> nearest_multiple(682, 8), nearest_multiple(12, 8), nearest_multiple(3, 8)
        (680, 8, 8)
    """
    below = value // step * step
    return below if below >= step and value - below <= below + step - value else below + step


def _fitting(model, cluster, strategies, options: dict, reserve: float) -> list:
    """Those of `strategies` that fit, as plans, fastest first (search's order)."""
    plans = (evaluate(model, cluster, s, options.get("tp_across_nodes", False), reserve) for s in strategies)
    return sorted((p for p in plans if p.fits), key=lambda p: (-p.tokens_per_second, p.memory.total))


def _fitting_with_context_parallel(model, cluster, global_batch, reserve, options) -> list:
    """The plans that fit once cp is searched too, fastest first, where the search left cp out (cp 1): what a search
    in which no plan fits because of the activations offers next (empty where cp was searched or none fits)."""
    if options.get("cp", (1,)) not in (1, (1,)):
        return []
    split = (s for s in candidates(model, cluster, global_batch, **{**options, "cp": "auto"}) if s.cp > 1)
    return _fitting(model, cluster, split, options, reserve)


def faster_with_context_parallel(model, cluster, global_batch: int, reserve: float, options: dict, best) -> list:
    """Where a search left cp out (cp 1) and its sequences are long (context_parallel.LONG_SEQUENCE tokens or more),
    the plans with cp > 1 that fit and run faster than `best` (the search's fastest plan), fastest first; empty
    otherwise. What `--cp auto` would add, for the command line to say.

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> from ddp_lab.course.plan.model import Transformer
        >>> model = Transformer.preset("llama3-8b").with_(seq_len=131072)
        >>> h100s = ClusterSpec.preset("h100-sxm", nodes=4)
        >>> best = search(model, h100s, top=1)[0]
        >>> faster_with_context_parallel(model, h100s, 32, MEMORY_RESERVE, {}, best)[0].strategy.cp
        8
    """
    if model.seq_len < context_parallel.LONG_SEQUENCE or best is None:
        return []
    return [p for p in _fitting_with_context_parallel(model, cluster, global_batch, reserve, options)
            if p.tokens_per_second > best.tokens_per_second]


def _without_outer_sync(model, cluster, global_batch: int, options: dict) -> list:
    """The search's candidates without its outer sync (empty where it asks for none), in the layouts it tries with one
    (the experts split tp ways: `candidates`' expert_tp_one)."""
    if not outer_sync.outer_sync_on(*(options.get(name) for name in ("replicas", "sync_every", "sync_precision"))):
        return []
    return list(candidates(model, cluster, global_batch, **{**options, "replicas": 1, "sync_every": None,
                                                            "sync_precision": None, "expert_tp_one": False}))


def _fewer_replicas_that_fit(model, cluster, global_batch: int, reserve: float, options: dict, plans) -> str:
    """Advice for a search with DiLoCo replicas in which no plan fits: the most replicas, fewer than asked, under
    which some plan fits (each replica shards its model state over its own dp / replicas ranks), or how many plans
    fit without the outer sync; empty where neither fits any."""
    fewest = min(p.strategy.replicas for p in plans)
    for count in reversed([r for r in divisors(cluster.gpus) if 1 < r < fewest]):   # the nearest count first
        fitting = _fitting(model, cluster, candidates(model, cluster, global_batch, **{**options, "replicas": count}),
                           options, reserve)
        if fitting:
            return (f"with replicas={count} (each shards its model state over dp / replicas ranks) "
                    f"{len(fitting)} plan{'s' if len(fitting) > 1 else ''} fit")
    alone = _fitting(model, cluster, _without_outer_sync(model, cluster, global_batch, options), options, reserve)
    if alone:
        return f"without the outer sync {len(alone)} plan{'s' if len(alone) > 1 else ''} fit"
    return ""


def _replicas_fit_no_plan(model, cluster, global_batch: int, options: dict, inner: list) -> str:
    """Why the DiLoCo replicas `options` ask for (a count, or outer_sync.EACH_DP_RANK; None: each dp rank) split
    none of the plans `inner` (the search's without an outer sync): a count whose blocks a node or region boundary
    would cut (outer_sync.straddled), else the counts that split some of them (outer_sync.holds, not straddling),
    or what keeps every plan at one data-parallel rank or its replicas across a boundary."""
    replicas = options.get("replicas")
    dps = ", ".join(map(str, sorted({s.dp for s in inner})))
    split = any(s.ep > 1 for s in inner)
    asked = f"replicas={replicas}" if isinstance(replicas, int) else "each dp rank a DiLoCo replica"

    fitting = sorted({r for s in inner
                      for r in outer_sync.uncut_counts(s.dp, s.cp, s.ep, s.gpus, cluster.gpus_per_node,
                                                       cluster.region_gpus)})
    # the dp sizes these GPUs allow with a global batch of one sequence a GPU (every dp divides it at micro-batch
    # 1): what an odd batch rules out
    structural = [] if any(s.dp > 1 for s in inner) else sorted(
        {s.dp for s in _without_outer_sync(model, cluster, cluster.gpus, options) if s.dp > 1})
    held = [s for s in inner if isinstance(replicas, int) and outer_sync.holds(s.dp, s.cp, s.ep, replicas)]
    if held:     # the count splits some plan's dp, but its blocks straddle a boundary
        return outer_sync.straddled(held[0].with_(replicas=replicas, dp_shard=None),
                                    cluster.gpus_per_node, cluster.region_gpus)
    if fitting:
        instead = (f"use replicas in {fitting} (each divides some plan's dp into replicas that no node or region "
                   f"boundary cuts; more replicas leave fewer ranks to shard each replica's state, so fewer of them "
                   f"fit in memory)")
    elif any(s.dp > 1 for s in inner):
        instead = (f"with this global batch ({global_batch} sequences: dp x micro-batch divides it) no replica count "
                   f"splits a plan's dp into blocks that no node or region boundary cuts: use a global batch that "
                   f"splits over more data-parallel ranks, or drop the outer sync")
    elif structural:
        instead = (f"the global batch, {global_batch} sequences, splits over no dp of 2 or more (dp x micro-batch "
                   f"divides it): use a multiple of a dp these GPUs allow ({', '.join(map(str, structural))}), "
                   f"or drop the outer sync")
    elif cluster.gpus == 1:
        instead = "one GPU has no data-parallel ranks to make replicas of: use more GPUs, or drop the outer sync"
    else:
        cp = options.get("cp", 1)
        smaller = f"a smaller cp than {cp}" if isinstance(cp, int) and cp > 1 else "fewer GPUs for each model copy"
        instead = (f"no plan has two data-parallel ranks to make replicas of on {cluster.gpus} GPUs (dp x tp x pp x "
                   f"cp = GPUs): use {smaller}, more GPUs, or drop the outer sync")
    return (f"{asked} fits no plan: each replica holds dp / replicas of a plan's data-parallel ranks (dp here: {dps})"
            + (", and its dp x cp whole ep groups" if split else "") + f"; {instead}"
            + (", or a smaller ep" if split and fitting else ""))


def search(model, cluster, top: int | None = 10, global_batch: int | None = None,
           reserve: float = MEMORY_RESERVE, strategies=None, **options) -> list[Plan]:
    """Plans that fit GPU memory, fastest first (ties: less memory first).

    Args:
        model, cluster: what to train, and on what.
        top: how many plans to return (None: all that fit).
        global_batch: sequences per step; default 4M tokens (2**22 / seq_len, at least one per GPU).
        reserve: share of each GPU's memory kept free (MEMORY_RESERVE).
        strategies: the strategies to evaluate, where the caller has enumerated them already (the command line
            counts them for its header); default `candidates(model, cluster, global_batch, **options)`.
        options: passed to `candidates` (micro_batches, zero, recompute, precision, tp_across_nodes, cp, ep,
            virtual_stages, attention, fp32_grads, dp_shard: None leaves out the hybrid-sharded plans).

    Raises:
        ValueError if no plan fits, with the smallest plan's need and what to change.

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> from ddp_lab.course.plan.model import Transformer
        >>> best = search(Transformer.preset("llama3-8b"), ClusterSpec.preset("h100-sxm", nodes=4), top=3)
        >>> len(best), best[0].tokens_per_second >= best[1].tokens_per_second
        (3, True)

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    if global_batch is None:
        global_batch = default_global_batch(model, cluster)
    if strategies is None:
        strategies = candidates(model, cluster, global_batch, **options)
    plans = [evaluate(model, cluster, s, options.get("tp_across_nodes", False), reserve) for s in strategies]
    if not plans:
        inner = _without_outer_sync(model, cluster, global_batch, options)
        if inner:     # plans exist without the outer sync: its replicas rule them out
            raise ValueError(_replicas_fit_no_plan(model, cluster, global_batch, options, inner))
        asked = "".join(f", {name}={options[name]}" for name in ("cp", "ep") if options.get(name) not in (None, 1, (1,)))
        raise ValueError(f"no valid strategy for {model.name} on {cluster.gpus} GPUs with global batch {global_batch}"
                         f"{asked}: choose a global batch divisible by the number of GPUs"
                         + (" and cp/ep sizes that divide them (ep also the experts)" if asked else ""))
    fitting = [p for p in plans if p.fits]
    if not fitting:
        smallest = min(plans, key=lambda p: p.memory.total)
        # shorter sequences shrink only the activations: advised only where some plan fits without them
        states = min(p.memory.total - p.memory.activations for p in plans)
        if states <= cluster.gpu.memory * (1 - reserve):
            advice = "add nodes, use GPUs with more memory, or train on shorter sequences"
            split = _fitting_with_context_parallel(model, cluster, global_batch, reserve, options)
            if split:
                advice = (f"split each sequence over GPUs (cp='auto': {len(split)} plan{'s' if len(split) > 1 else ''}"
                          f" fit, the fastest {split[0].strategy.label()} at {split[0].memory.total / 1e9:.1f} GB), "
                          + advice)
        else:
            advice = (f"even without activations the smallest needs {states / 1e9:.1f} GB, so shorter sequences do "
                      f"not help: add nodes or use GPUs with more memory")
        if any(p.strategy.replicas > 1 for p in plans):   # a replica shards its state over its own dp ranks only
            fewer = _fewer_replicas_that_fit(model, cluster, global_batch, reserve, options, plans)
            if fewer:
                advice = f"{fewer}; {advice}"
        raise ValueError(f"no plan for {model.name} fits {cluster.gpus} x {cluster.gpu.name} "
                         f"({cluster.gpu.memory / 1e9:.0f} GB each, {percent_text(1 - reserve)} usable): the smallest, "
                         f"{smallest.strategy.label()}, needs {smallest.memory.total / 1e9:.1f} GB per GPU; {advice}")
    fitting.sort(key=lambda p: (-p.tokens_per_second, p.memory.total))
    return fitting if top is None else fitting[:top]

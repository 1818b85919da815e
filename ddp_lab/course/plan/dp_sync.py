"""Data-parallel communication: what ZeRO 0-3 move per step over the ranks that hold the same weights, and what shows.

Bytes (ZeRO paper, Rajbhandari et al. 2020, Sec. 7): ZeRO 0 all-reduces the gradients; 1 and 2
reduce-scatter them and all-gather the updated weights (the same bytes); 3, per micro-batch,
all-gathers the weights twice (forward, backward) and reduce-scatters the gradients (1.5x, Sec.
7.2.2), one unit at a time: per layer and then the rest (fsdp_unit="layer", as FSDP is wrapped in
lesson 09), or the whole model at once (fsdp_unit="model"). Dense parameters sync over the dp x cp
ranks, a MoE model's routed experts over the dp x cp / ep ranks that hold the same experts.

Gradient accumulation: ZeRO 0 and 1 keep every gradient and reduce them once, after the last
micro-batch; ZeRO 2 keeps only its shard of them, so it reduce-scatters in every micro-batch's
backward, as ZeRO 3 does, and all-gathers the weights once per step. That is DeepSpeed's stage 2:
its engine reduces the partitioned gradients outside the accumulation boundaries too
(deepspeedai/DeepSpeed pull request #338, "Adding gradient accumulation support for ZeRO Stage 2":
"Zero stage 2 communicates during non gradient accumulation boundaries as well"), and its
`no_sync()` refuses stage 2 and 3 ("no_sync context manager is incompatible with gradient
partitioning logic of ZeRO stage 2", deepspeed/runtime/engine.py); FSDP2 does the same "without any
intervention" (pytorch/pytorch pull request #126166: a reduce-scatter per micro-batch backward keeps
the sharded gradients' memory), and skipping it (`set_requires_gradient_sync(False)`) keeps unsharded
gradients, ZeRO 1's memory and traffic: plan such a run as zero=1.

What compute hides (overlap.py): ZeRO 3 unit by unit, each gather behind the unit before it, each
scatter behind the units after it (`zero3_exposed`); ZeRO 0-2 bucket by bucket (`gradient_buckets`:
Megatron-Core's buckets for ZeRO 0-1, a unit at a time for ZeRO 2) reduced during the last micro-batch's
backward (ZeRO 2: during every micro-batch's), the weights' gather exposed or, with
`overlap_param_gather`, behind the next forward (`zero12_exposed`). Where DP and TP share a
link, DP's transfers take longer by the share of time TP's collectives hold it (`_dp_shares_tp_link`,
overlap.stretch).

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import functools

from ddp_lab.course.plan import expert_tp, experts, pipeline_stages
from ddp_lab.course.plan.collectives import collective_time
from ddp_lab.course.plan.memory import (bytes_per_parameter, layer_other_parameters, layer_parameters_per_rank,
                                        stage_parameters)
from ddp_lab.course.plan.overlap import bucketed_exposed, fsdp_micro_batch, prefetched_exposed
from ddp_lab.course.plan.precision import gathered_parameter_bytes


def dp_communication(model, cluster, strategy) -> float:
    """Seconds of data-parallel communication per step, before any overlap (see module docstring).

    Parameters sync over the ranks that hold the same copy: the dense ones (`fsdp_units`) over the
    dp x cp ranks, a MoE model's routed experts (`experts.expert_units`) over the dp x cp / ep ranks that
    hold the same experts; the two times add. ZeRO 0-2 move them bucket by bucket (`gradient_buckets`), on
    the pipeline stage that moves most.
    """
    if strategy.zero in (0, 1, 2):
        w, g, _ = bytes_per_parameter(strategy)
        reduce_kind = "all_reduce" if strategy.zero == 0 else "reduce_scatter"
        def stage_seconds(stage: int) -> float:
            reduce = sum(gradient_buckets(model, cluster, strategy, stage, reduce_kind, g))
            gather = sum(gradient_buckets(model, cluster, strategy, stage, "all_gather", w)) if strategy.zero else 0.0
            return gradient_reductions(strategy) * reduce + gather

        return max(stage_seconds(stage) for stage in pipeline_stages.stages_to_check(strategy, model))
    layout = strategy.layout
    return (_zero3_seconds(model, cluster, strategy, fsdp_units, gathered_unit_bytes, layout.group("dp_cp"))
            + _zero3_seconds(model, cluster, strategy, experts.expert_units, gathered_expert_bytes,
                             expert_tp.group(strategy, "edp")))


def _zero3_seconds(model, cluster, strategy, units_of, gathered_of, group) -> float:
    """One group's ZeRO-3 traffic per step: every micro-batch gathers each unit twice and reduce-scatters it.

    units_of(model, strategy, stage): parameters per unit; gathered_of(...): bytes each unit's ZeRO-3 all-gather moves.
    """
    if group.size == 1:
        return 0.0
    g = bytes_per_parameter(strategy)[1]
    stages = pipeline_stages.stages_to_check(strategy, model)

    def stage_seconds(stage: int) -> float:
        sizes = list(zip(units_of(model, strategy, stage), gathered_of(model, strategy, stage)))
        # layers of one size cost alike: each distinct (parameters, gathered bytes) is costed once (a search asks
        # for thousands)
        once = {(unit, gathered): 2 * collective_time("all_gather", gathered, cluster, group)
                + collective_time("reduce_scatter", g * unit, cluster, group) for unit, gathered in set(sizes)}
        return sum(once[size] for size in sizes)

    return strategy.grad_accum * max(stage_seconds(stage) for stage in stages)


def gradient_reductions(strategy) -> int:
    """How many times per step ZeRO 0-2 reduce the gradients: once, or for ZeRO 2 once per micro-batch.

    ZeRO 0 and 1 accumulate full gradients and reduce them after the last micro-batch; ZeRO 2 keeps
    only its shard, so every micro-batch's backward reduce-scatters into it (module docstring: DeepSpeed).

    Example:
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> [gradient_reductions(Strategy(dp=8, zero=z, grad_accum=16)) for z in (0, 1, 2)]
        [1, 1, 16]
    """
    return strategy.grad_accum if strategy.zero == 2 else 1


def bucket_parameters(strategy, stage: int) -> int | None:
    """Parameters per gradient bucket under ZeRO 0 and 1 on pipeline stage `stage`; None: one bucket for all.

    Megatron-Core's default (megatron/core/distributed/distributed_data_parallel.py, DistributedDataParallel;
    DistributedDataParallelConfig.bucket_size: "max(40000000, 1000000 * dp_size) parameters (larger DP sizes
    need larger buckets to ensure collectives do not become latency-bound)"), dp_size without the cp ranks; it
    turns bucketing off on the stages after the first ("data-parallel communication on these stages is not on
    the critical path"): one bucket there, as everywhere with fsdp_unit="model". ZeRO 2 (FSDP2 without
    resharding) reduces unit by unit instead (`gradient_buckets`). Not modelled: Megatron-Core also turns
    bucketing off for an interleaved schedule's model chunks after the first.

    Example:
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> bucket_parameters(Strategy(dp=8, zero=1), 0), bucket_parameters(Strategy(dp=1024, zero=1), 0)
        (40000000, 1024000000)
        >>> print(bucket_parameters(Strategy(dp=8, pp=2, zero=1), 1))
        None
    """
    if stage > 0 or strategy.fsdp_unit == "model":
        return None
    return max(40_000_000, 1_000_000 * strategy.dp)


def close_buckets(parameters: list[int], size: int | None) -> list[int]:
    """Parameters of the bucket each piece completes, pieces in the order their gradients are ready (0: none).

    A bucket takes pieces until it holds at least `size` parameters; the rest form the last bucket. `size` None: one
    bucket, complete with the last piece. Megatron-Core's ParamAndGradBuffer walks the parameters in reverse,
    roughly backward's order, and closes a bucket after any parameter; the planner's pieces are whole layers (and
    the root's parts), so its buckets can be a layer larger and fewer (more at small dp: Llama 3 8B at dp 32 has
    34 here, about 98 there).

    Example:
        >>> close_buckets([30, 30, 30, 10], 50)
        [0, 60, 0, 40]
        >>> close_buckets([30, 30], None)
        [0, 60]
    """
    closing, held = [], 0
    for piece in parameters:
        held += piece
        full = size is not None and held >= size
        closing.append(held if full else 0)
        held = 0 if full else held
    if held:
        closing[-1] = held
    return closing


def gradient_buckets(model, cluster, strategy, stage: int, kind: str, per_parameter: int,
                     slower: float = 1.0) -> list[float]:
    """Seconds of each ZeRO 0-2 bucket's `kind` collective on stage `stage`, placed where backward completes it.

    Places in backward order: the root's part the head holds (done first), the layers last to first, the root's
    part the embedding holds (`_head_share`). ZeRO 0 and 1: dense parameters and a MoE model's routed experts
    fill their own buckets (`bucket_parameters`; Megatron-Core keeps experts in their own buffer), synced over
    the dp x cp and the edp ranks; ZeRO 2: one bucket per unit (`unit_seconds`). 0.0 where no bucket completes.
    Each stretched by `slower` (overlap.stretch).

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> llama = Transformer.preset("llama3-8b")
        >>> h100 = ClusterSpec.preset("h100-sxm", nodes=64)
        >>> seconds = gradient_buckets(llama, h100, Strategy(dp=16, zero=1), 0, "reduce_scatter", 4)
        >>> len(seconds), sum(s > 0 for s in seconds)     # head, 32 layers of 218M parameters, embedding: 40M buckets
        (34, 34)
        >>> seconds = gradient_buckets(llama, h100, Strategy(dp=512, zero=1), 0, "reduce_scatter", 4)
        >>> sum(s > 0 for s in seconds)                   # 512M buckets: the head, then three layers at a time
        12
    """
    if strategy.zero == 2:
        share = _head_share(model, strategy, stage)
        seconds = unit_seconds(model, cluster, strategy, stage, kind, per_parameter, slower)
        return [share * seconds[-1]] + seconds[-2::-1] + [(1 - share) * seconds[-1]]
    seconds = []
    for closing, group in zip(_closing_buckets(model, strategy, stage),
                              (strategy.layout.group("dp_cp"), expert_tp.group(strategy, "edp"))):
        once = {p: slower * collective_time(kind, per_parameter * p, cluster, group) for p in set(closing) if p}
        seconds.append([once.get(p, 0.0) for p in closing])
    return [a + b for a, b in zip(*seconds)]


@functools.lru_cache(maxsize=4096)     # a plan's evaluation asks for them several times (kinds, stretches)
def _closing_buckets(model, strategy, stage: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """ZeRO 0-1's buckets on stage `stage` in backward order (gradient_buckets): the parameters each piece's bucket
    holds when that piece completes it (0: none), for the dense parameters and for the routed experts."""
    units = fsdp_units(model, strategy, stage)
    share = _head_share(model, strategy, stage)
    head = round(share * units[-1])
    dense = [head] + units[-2::-1] + [units[-1] - head]
    indices = pipeline_stages.stage_layer_indices(model, strategy, stage)
    routed = experts.expert_units(model, strategy, stage)
    if strategy.fsdp_unit == "model":                  # one bucket holds the experts too
        expert = [0] * (len(dense) - 1) + [sum(routed)]
    else:
        by_layer = iter(routed)
        expert = [next(by_layer) if model.moe is not None and experts.is_moe_layer(model, indices[k]) else 0
                  for k in range(len(units) - 1)]
        expert = [0] + expert[::-1] + [0]
    size = bucket_parameters(strategy, stage)
    return tuple(close_buckets(dense, size)), tuple(close_buckets(expert, size))


def fsdp_units(model, strategy, stage: int) -> list[int]:
    """Parameters of each ZeRO-3 unit of pipeline stage `stage` on one tp rank (before sharding).

    fsdp_unit="layer": one unit per transformer layer, then the root with the rest (embeddings,
    final norm, head), as lesson 09 wraps FSDP2; "model": one unit.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> shape = Transformer("t", layers=2, hidden=256, heads=4, vocab=512, seq_len=128)
        >>> fsdp_units(shape, Strategy(dp=2, zero=3), 0)
        [789760, 789760, 164352]
        >>> fsdp_units(shape, Strategy(dp=2, zero=3, fsdp_unit="model"), 0)
        [1743872]

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    return list(_fsdp_units(model, strategy, stage))


@functools.lru_cache(maxsize=4096)     # a plan's evaluation asks for each stage's units many times
def _fsdp_units(model, strategy, stage: int) -> tuple[int, ...]:
    """fsdp_units, kept for the plans a search evaluates."""
    total = stage_parameters(model, strategy, stage) - experts.stage_expert_parameters(model, strategy, stage)
    if strategy.fsdp_unit == "model":
        return (total,)
    dense = layer_parameters_per_rank(model, strategy.tp)
    # a MoE layer's replicated part: + router + shared experts - the dense FFN (its routed experts: experts.expert_units)
    replicated = experts.layer_change_per_rank(model, strategy)[0] if model.moe is not None else 0
    units = [dense + (replicated if experts.is_moe_layer(model, i) else 0)
             for i in pipeline_stages.stage_layer_indices(model, strategy, stage)]
    return (*units, total - sum(units))


def gathered_unit_bytes(model, strategy, stage: int) -> list[int]:
    """Bytes each `fsdp_units` unit's ZeRO-3 all-gather moves: 16-bit weights, per-tensor FP8 linear weights at 1 byte.

    Under per-tensor FP8 with ZeRO-3 (precision.gathered_parameter_bytes: FSDP2's float8 all-gather; MXFP8's weights
    travel in bf16) a layer's matrices travel
    in FP8 and its norms, biases and router (`memory.layer_other_parameters`) in bf16; the root (embeddings, final
    norm, output head) stays bf16.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> shape = Transformer("t", layers=2, hidden=256, heads=4, vocab=512, seq_len=128)
        >>> gathered_unit_bytes(shape, Strategy(dp=2, zero=3), 0)
        [1579520, 1579520, 328704]
        >>> gathered_unit_bytes(shape, Strategy(dp=2, zero=3, precision="fp8"), 0)   # 12 x 256^2 weights at 1 byte
        [793088, 793088, 328704]
    """
    units = fsdp_units(model, strategy, stage)
    w = bytes_per_parameter(strategy)[0]
    saved = w - gathered_parameter_bytes(strategy)         # 1 byte per linear weight under FP8, else 0
    if saved == 0:
        return [w * unit for unit in units]
    layers = pipeline_stages.stage_layer_indices(model, strategy, stage)
    dense = layer_parameters_per_rank(model, strategy.tp)
    replicated = experts.layer_change_per_rank(model, strategy)[0] if model.moe is not None else 0
    linear = [dense + (replicated if experts.is_moe_layer(model, i) else 0)
              - layer_other_parameters(model, strategy.tp, experts.is_moe_layer(model, i)) for i in layers]
    if strategy.fsdp_unit == "model":
        return [w * units[0] - saved * sum(linear)]
    return [w * unit - saved * weights for unit, weights in zip(units, linear + [0])]


def gathered_expert_bytes(model, strategy, stage: int) -> list[int]:
    """Bytes each `experts.expert_units` unit's ZeRO-3 all-gather moves: the experts' matrices, 1 byte each under
    per-tensor FP8."""
    return [gathered_parameter_bytes(strategy) * unit for unit in experts.expert_units(model, strategy, stage)]


def _dp_shares_tp_link(cluster, strategy) -> bool:
    """True if the dp and tp groups both run on NVLink or both across nodes: one link, shared bandwidth."""
    if strategy.tp == 1 or strategy.dp == 1:
        return False
    per_node = cluster.gpus_per_node
    return strategy.layout.group("dp_cp").spans_nodes(per_node) == strategy.layout.group("tp").spans_nodes(per_node)


def layer_work(model, strategy, stage: int, layer, tp_seconds, moe_change=(0.0, 0.0)) -> tuple[list, list]:
    """(forward, backward) seconds of each layer of pipeline stage `stage`, first to last, on the compute stream: the
    dense layer's `layer` times with its TP collectives (`tp_seconds`), and for a MoE layer what its experts add
    (`moe_change`: expert_compute.layer_compute_change; its forward again in backward under full recomputation).

    The compute the data-parallel timelines hide communication behind (`zero3_exposed`, `zero12_exposed`).
    """
    again = 1 if strategy.recompute == "full" else 0
    forward, backward = [], []
    for index in pipeline_stages.stage_layer_indices(model, strategy, stage):
        extra = moe_change if model.moe is not None and experts.is_moe_layer(model, index) else (0.0, 0.0)
        forward.append(layer.forward + tp_seconds[0] + extra[0])
        backward.append(layer.backward + layer.recompute + tp_seconds[1] + extra[1] + again * extra[0])
    return forward, backward


def zero3_exposed(model, cluster, strategy, layer, head, tp_seconds, slower: float = 1.0, head_tp: float = 0.0,
                  moe_change=(0.0, 0.0), after_scatter=None) -> float:
    """Seconds of ZeRO-3 communication per micro-batch that compute does not hide (`overlap.fsdp_micro_batch`).

    fsdp_unit="layer": the per-unit timeline, on the pipeline stage that exposes most;
    "model": one unit holds everything, so its gathers and scatter wait for, or are waited on
    by, the whole model's compute: none of it hides. `head_tp`: the last stage's vocab-parallel
    all-reduces per micro-batch (steptime.vocab_parallel_communication), run with the head; `moe_change`: what a MoE
    layer's experts add to its compute (`layer_work`); `after_scatter(stage)`: seconds each unit's gradient
    collective takes after its reduce-scatter (HSDP's all-reduce of the shard, hybrid_shard.py), or None.
    """
    w, g, _ = bytes_per_parameter(strategy)
    worst = 0.0
    for stage in pipeline_stages.stages_to_check(strategy, model):
        gather = unit_seconds(model, cluster, strategy, stage, "all_gather", w, slower)
        scatter = unit_seconds(model, cluster, strategy, stage, "reduce_scatter", g, slower)
        if after_scatter is not None:
            scatter = [seconds + more for seconds, more in zip(scatter, after_scatter(stage))]
        if strategy.fsdp_unit == "model":
            worst = max(worst, 2 * gather[0] + scatter[0])
            continue
        forward, backward = layer_work(model, strategy, stage, layer, tp_seconds, moe_change)
        forward, backward = [0.0] + forward, [0.0] + backward      # fsdp_micro_batch: the root first, then the layers
        middle = head.total + head_tp if stage == strategy.pp - 1 else 0.0
        span = fsdp_micro_batch([gather[-1]] + gather[:-1], [scatter[-1]] + scatter[:-1], forward, backward, middle)
        worst = max(worst, span - sum(forward) - sum(backward) - middle)
    return max(0.0, worst)


def _head_share(model, strategy, stage: int) -> float:
    """The share of stage `stage`'s root unit that is the output layer (its gradients are ready first in backward).

    The last stage's root is the final norm and the head; with one stage it also holds the embedding, whose
    gradients come last (a tied embedding is one matrix: it completes with the embedding). The first stage of
    a pipeline holds only the embedding.
    """
    if stage != strategy.pp - 1:
        return 0.0
    if strategy.pp > 1:
        return 1.0
    if model.tied_embeddings:
        return 0.0
    root = fsdp_units(model, strategy, stage)[-1]
    head = -(-model.vocab // strategy.tp) * model.hidden + model.norm_parameters()
    return min(1.0, head / root) if root else 0.0


def unit_seconds(model, cluster, strategy, stage: int, kind: str, per_parameter: int, slower: float = 1.0) -> list[float]:
    """Seconds of one `kind` collective per unit of `fsdp_units` (layers, then the root) on stage `stage`.

    Dense units over the dp x cp ranks; a MoE layer's routed experts with their layer, over the ranks holding
    them (the edp group); each stretched by `slower` (overlap.stretch). ZeRO-3's gathers move
    `gathered_unit_bytes` (per-tensor FP8 linear weights at 1 byte), whatever `per_parameter` says.
    """
    group, expert_group = strategy.layout.group("dp_cp"), expert_tp.group(strategy, "edp")
    units = fsdp_units(model, strategy, stage)
    expert_bytes = [per_parameter * unit for unit in experts.expert_units(model, strategy, stage)]
    dense_bytes = [per_parameter * unit for unit in units]
    if kind == "all_gather" and strategy.zero == 3:
        dense_bytes = gathered_unit_bytes(model, strategy, stage)
        expert_bytes = gathered_expert_bytes(model, strategy, stage)
    # layers of one size cost alike: one collective_time per distinct size (a search asks for thousands)
    once = {size: slower * collective_time(kind, size, cluster, group) for size in set(dense_bytes)}
    seconds = [once[size] for size in dense_bytes]
    if strategy.fsdp_unit == "model":                  # one unit holds the experts too
        routed = sum(expert_bytes)
        return [seconds[0] + (slower * collective_time(kind, routed, cluster, expert_group) if routed else 0.0)]
    moe = iter(expert_bytes)
    routed = {size: slower * collective_time(kind, size, cluster, expert_group) for size in set(expert_bytes)}
    indices = pipeline_stages.stage_layer_indices(model, strategy, stage)
    for k in range(len(units) - 1):
        if model.moe is not None and experts.is_moe_layer(model, indices[k]):
            seconds[k] += routed[next(moe)]
    return seconds


def zero12_exposed(model, cluster, strategy, layer, head, tp_seconds, slower: float = 1.0,
                   moe_change=(0.0, 0.0)) -> float:
    """Seconds per step of ZeRO 0-2 communication compute does not hide (overlap.py's bucket timelines).

    Gradients: the buckets of `gradient_buckets` (whole layers and the root's parts: the head's
    first on the last stage, the embedding's last on the first), reduced (all-reduce for ZeRO 0,
    reduce-scatter for 1 and 2) as the last micro-batch's backward frees them
    (`overlap.bucketed_exposed`); stage s of a 1F1B pipeline has s more micro-batch backwards of the
    stages before it to hide in. ZeRO 2 reduces in every micro-batch's backward
    (`gradient_reductions`): each micro-batch's last bucket shows, as ZeRO 3's last scatter does
    (`zero3_exposed`, counted per micro-batch), and only the last micro-batch has the pipeline's flush
    to hide in. Weights (ZeRO 1 and 2): the all-gather after the optimizer, exposed, or with
    `overlap_param_gather` waited for bucket by bucket in the next step's first forward
    (`overlap.prefetched_exposed`), stage s starting s micro-batch forwards late anyway.
    fsdp_unit="model": one bucket, nothing hides. The compute: `layer_work` (MoE layers with their experts').
    """
    w, g, _ = bytes_per_parameter(strategy)
    reduce_kind = "all_reduce" if strategy.zero == 0 else "reduce_scatter"
    reduce_worst = gather_worst = 0.0
    for stage in pipeline_stages.stages_to_check(strategy, model):
        # backward order: the head, the layers last to first, the embedding (each root part only where the stage has it)
        order = gradient_buckets(model, cluster, strategy, stage, reduce_kind, g, slower)
        gather = gradient_buckets(model, cluster, strategy, stage, "all_gather", w, slower) if strategy.zero else []
        if strategy.fsdp_unit == "model":
            reduce_worst = max(reduce_worst, gradient_reductions(strategy) * sum(order))
            gather_worst = max(gather_worst, sum(gather))
            continue
        share = _head_share(model, strategy, stage)       # of the root unit: the head, done first in backward
        forward, backward = layer_work(model, strategy, stage, layer, tp_seconds, moe_change)
        work = [head.backward if share else 0.0] + backward[::-1] + [0.0]
        flush = stage * sum(backward)
        earlier = (gradient_reductions(strategy) - 1) * bucketed_exposed(order, work)   # ZeRO 2's other micro-batches
        reduce_worst = max(reduce_worst, earlier + bucketed_exposed(order, work, window=flush))
        if gather and strategy.overlap_param_gather:
            order = gather[::-1]              # forward order: each bucket waited for before its first piece's forward
            work = [0.0] + forward + [head.forward if share else 0.0]
            warm_up = stage * sum(forward)
            gather_worst = max(gather_worst, prefetched_exposed(order, work, window=warm_up))
        elif gather:
            gather_worst = max(gather_worst, sum(gather))
    return reduce_worst + gather_worst

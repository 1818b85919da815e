"""Plans as fixed-width text: the table the CLI prints (README and docs/planner.md show it), and one plan's breakdown.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from ddp_lab.course.plan import expert_tp
from ddp_lab.course.plan.fit_to_run import is_at_kernel_rate
from ddp_lab.course.plan.generation_constants import efficiency_of, kernel_efficiency_of
from ddp_lab.course.plan.memory import bytes_per_parameter, model_state_bytes
from ddp_lab.course.plan.overlap import OVERLAP_SLOWDOWN
from ddp_lab.course.plan.precision import fp8_matmuls
from ddp_lab.course.plan.search import MEMORY_RESERVE, percent_text
from ddp_lab.plan.decision import family_name, model_text, versus_best

GB = 1e9
LEGEND = ("strategy: dpN tpN ppN = data-, tensor-, pipeline-parallel sizes; zN = ZeRO stage;\n"
          "          mbAxB = B micro-batches of A sequences per step; vN = interleaved 1F1B, N stages per GPU;\n"
          "          sp = sequence parallel; sel/full/op = selective/full/per-op (torchtitan's) recomputation;\n"
          "          eager = attention not fused (flash otherwise; cudnn = cuDNN's flash kernel); g32 = fp32\n"
          "          gradients. GB = 10^9 bytes;\n"
          "          margin = GB per GPU left under the usable line (the GPU's memory less the reserve).")
FOLDED_LEGEND = ("          z0-2 = ZeRO stages 0 to 2 give identical numbers (with one data-parallel rank, or one in\n"
                 "          each DiLoCo replica, there is nothing to shard);\n"
                 "          the row shows the lowest.")
SPLIT_LEGEND = "          cpN = context-parallel size (lesson 15); epN = expert-parallel size (lesson 14)."
EXPERT_TP_LEGEND = ("          etpN = the routed experts' own tensor-parallel size (--expert-tp; etp1: each expert\n"
                    "          whole on its rank, ep then out of tp x cp x dp).")
PER_NODE_LEGEND = ("          per-node = MoE tokens cross the network once per node, not once per expert, and\n"
                   "          are permuted once on arrival, not sorted by expert again (--moe-dispatch).")
FP8_LEGEND = ("          MFU under fp8 counts against the bf16 peak (torchtitan's convention): FP8 matmuls can take\n"
              "          it past 100%.")
EARLY_STOP_LEGEND = ("          full-es = full recomputation by PyTorch's non-reentrant checkpoint: it stops before the "
                     "FFN's down projection.")
OVERLAP_LEGEND = ("          tpo = TP communication in chunks beside the GEMMs (--tp-comm-overlap); opg = ZeRO-1/2's "
                  "weight gather beside the next forward (--overlap-param-gather).")
EP_OVERLAP_LEGEND = "          epo = MoE all-to-alls beside another micro-batch's compute (--ep-overlap)."
HSDP_LEGEND = ("          hsdpN = hybrid sharding (HSDP): ZeRO-3 inside groups of N dp ranks, the groups replicas\n"
               "          that all-reduce their gradient shards; a search shows the fastest N of each plan\n"
               "          (--dp-shard N with the plan's flags prices another).")
# The ways a plan splits a model beyond data parallelism, as accuracy_text names them (Strategy fields).
SPLITS = (("tensor", "tp"), ("pipeline", "pp"), ("context", "cp"), ("expert", "ep"))


def table(plans, stages=None, tie: float | None = None) -> str:
    """One line per plan: strategy, memory per GPU and the margin left (GB = 10^9 bytes), step time, tokens/s, MFU.

    `stages`, if given, holds for each plan the ZeRO stages its row stands for (from
    `fold_zero_stages`); a row of several shows them as e.g. 'z0-2'. The margin is what a plan
    leaves of the usable memory (`Plan.margin`: the GPU's memory less the reserve, less the plan's).
    `tie`, if given (a share such as 0.056, the planner's stated error: `decision.stated_error`), adds a
    column with each plan's throughput against the first's, marking `tie` those within it.

    Example:
        >>> from ddp_lab.plan import ClusterSpec, Transformer, search
        >>> print(table(search(Transformer.preset("llama3-8b"), ClusterSpec.preset("h100-sxm", nodes=4), top=1)))
        ...                                                       # doctest: +ELLIPSIS
          # strategy ...

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    stages = stages or [(plan.strategy.zero,) for plan in plans]
    labels = [plan.strategy.label().replace(f" z{plan.strategy.zero} ", f" {_stages_text(zero)} ", 1)
              for plan, zero in zip(plans, stages)]
    width = max([34] + [len(label) for label in labels])    # cp/ep plans' labels can be longer
    header = f"{'#':>3} {'strategy':<{width}} {'GB/GPU':>7} {'margin':>7} {'step s':>8} {'tokens/s':>11} {'MFU':>6}"
    header += f" {'vs best':>10}" if tie is not None else ""
    lines = [header, "-" * len(header)]
    for rank, (plan, label) in enumerate(zip(plans, labels), 1):
        lines.append(f"{rank:>3} {label:<{width}} {plan.memory.total / GB:>7.1f} {plan.margin / GB:>7.1f} "
                     f"{plan.time.total:>8.2f} {plan.tokens_per_second:>11,.0f} {plan.mfu:>6.1%}"
                     + (f" {versus_best(plan, plans[0], tie):>10}" if tie is not None else ""))
    folded = [FOLDED_LEGEND] if any(len(zero) > 1 for zero in stages) else []
    split = [SPLIT_LEGEND] if any(plan.strategy.cp > 1 or plan.strategy.ep > 1 for plan in plans) else []
    split += [EXPERT_TP_LEGEND] if any(expert_tp.size(plan.strategy) != plan.strategy.tp for plan in plans) else []
    split += [PER_NODE_LEGEND] if any(plan.strategy.moe_dispatch == "per-node" for plan in plans) else []
    early = [EARLY_STOP_LEGEND] if any(plan.strategy.checkpoint_early_stop for plan in plans) else []
    fp8 = [FP8_LEGEND] if any(fp8_matmuls(plan.strategy) for plan in plans) else []
    overlap = ([OVERLAP_LEGEND] if any(plan.strategy.tp_comm_overlap or plan.strategy.overlap_param_gather
                                       for plan in plans) else [])
    overlap += [EP_OVERLAP_LEGEND] if any(plan.strategy.ep_overlap for plan in plans) else []
    hybrid = [HSDP_LEGEND] if any(plan.strategy.dp_shard is not None for plan in plans) else []
    return "\n".join(lines + [LEGEND] + folded + split + hybrid + early + fp8 + overlap)


def fold_zero_stages(plans) -> list[tuple]:
    """Plans with one row per set of ZeRO stages that give identical numbers, as (plan, stages) pairs.

    With dp = 1 there is no one to shard with, so ZeRO stages 0-2 (often 3 too) predict the same
    memory and time: the table would list one plan up to four times. Each group keeps its lowest
    stage's plan, in the order of `plans` (fastest first from `search`).

    Example:
        >>> from ddp_lab.plan import ClusterSpec, Transformer, search
        >>> plans = search(Transformer.preset("llama3-8b"), ClusterSpec.preset("h100-sxm"), top=None)
        >>> len(fold_zero_stages(plans)) < len(plans)
        True

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    groups: dict = {}
    for plan in plans:
        key = (plan.strategy.with_(zero=0, overlap_param_gather=False, dp_shard=None), plan.strategy.dp_shard,
               plan.memory, plan.time)
        groups.setdefault(key, []).append(plan)
    rows = []
    for group in groups.values():
        lowest = min(group, key=lambda plan: plan.strategy.zero)
        rows.append((lowest, tuple(sorted(plan.strategy.zero for plan in group))))
    return rows


def fold_shard_sizes(rows) -> list[tuple]:
    """`fold_zero_stages`' rows with one row per HSDP plan: of the plans that differ only in their shard-group size
    (Strategy.dp_shard), the first in `rows` (the fastest, from `search`); the others are dropped.

    A search tries each ZeRO-3 plan with shard groups of 1 to 16 nodes (hybrid_shard.searched_sizes), which mostly
    predict within a percent of each other: unfolded, one plan could fill the table's first rows. The plain ZeRO-3
    plan (no shard groups) keeps its own row.

    Example:
        >>> from ddp_lab.plan import ClusterSpec, Transformer, search
        >>> plans = search(Transformer.preset("llama3-8b"), ClusterSpec.preset("h100-sxm", nodes=16), top=None)
        >>> rows = fold_shard_sizes(fold_zero_stages(plans))
        >>> hsdp = [plan.strategy.with_(dp_shard=None) for plan, _ in rows if plan.strategy.dp_shard]
        >>> len(hsdp) == len(set(hsdp)) > 0
        True

    The command line's table (cli.py); notebooks/13-plan-your-training-run.ipynb introduces the search it folds.
    """
    seen, kept = set(), []
    for plan, stages in rows:
        if plan.strategy.dp_shard is not None:
            key = (plan.strategy.with_(dp_shard=None), stages)
            if key in seen:
                continue
            seen.add(key)
        kept.append((plan, stages))
    return kept


def search_header(model, cluster, global_batch: int, precision: str, tried: int, fitting: int,
                  reserve: float = MEMORY_RESERVE, attention: str = "flash", cp=(1,), ep=(1,),
                  seq_source: str | None = None, flash_kernel: str = "fa2", interleaved: bool = True,
                  applied: tuple[str, ...] = (), dp_shard=(), whole_experts: bool = False) -> str:
    """What a search covered: model, GPUs, global batch, precision, parameters, plans tried and plans that fit.

    `cp`, `ep`: the context- and expert-parallel sizes the plans tried used, named when not just 1. `interleaved`:
    whether any plan tried interleaved its stages (none can where every plan has pp 1, or a micro-batch count the
    schedule cannot take).
    `seq_source`: where the sequence length came from (`model_text`). `applied`: a framework's flags the search put
    on every plan they fit (cli_flags.SEARCH_WIDE), as the command line gave them. `dp_shard`: the HSDP shard-group
    sizes the plans tried used (search.candidates), named when there are any. `whole_experts`: whether plans with
    tp > 1 were tried with each expert whole on its rank (expert_tp 1) beside the experts split tp ways.

    Example:
        >>> from ddp_lab.plan import ClusterSpec, Transformer
        >>> print(search_header(Transformer.preset("llama3-8b"), ClusterSpec.preset("h100-sxm"), 512, "bf16", 432, 386))
        llama3-8b on 1 x 8 H100 SXM = 8 GPUs, global batch 512 sequences x 8192 tokens, bf16, flash attention
        model: 8.03B parameters; 8,192-token sequences
        432 plans tried (dp x tp x pp, ZeRO 0-3, micro-batch, recomputation, sequence parallel, interleaving); 386 fit in 90% of each GPU's 85.9 GB (memory reserve 10%)

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    where = f"{cluster.name} = {cluster.gpus} GPUs" if cluster.name else f"{cluster.gpus} GPUs"
    splits = "".join(f", {name} {_sizes_text(sorted(set(sizes)))}" for name, sizes in (("cp", cp), ("ep", ep))
                     if set(sizes) != {1})
    shards = sorted(set(dp_shard) - {None})
    splits += f", HSDP shard groups of {_sizes_text(shards)} dp ranks" if shards else ""
    splits += ", experts split tp ways or whole (etp1)" if whole_experts else ""
    sequence = "sequence parallel" if "--sequence-parallel" not in applied else "sequence parallel wherever tp > 1"
    others = [flag for flag in applied if flag != "--sequence-parallel"]
    on_every = f"; {', '.join(others)} on every plan {'it fits' if len(others) == 1 else 'they fit'}" if others else ""
    return (f"{model.name} on {where}, global batch {global_batch} sequences x {model.seq_len} tokens, {precision}, "
            f"{attention_text(attention, flash_kernel, cluster.gpu.generation)}\n{model_text(model, seq_source)}\n"
            f"{tried} plans tried (dp x tp x pp, ZeRO 0-3, micro-batch, recomputation, {sequence}"
            f"{', interleaving' if interleaved else ''}{splits}{on_every}); {fitting} fit in "
            f"{percent_text(1 - reserve)} of each GPU's {cluster.gpu.memory / GB:.1f} GB (memory reserve "
            f"{percent_text(reserve)})")


def _sizes_text(sizes) -> str:
    """'1-8' style for the sizes a search tried: '1, 2, 4, 8' reads as their list."""
    return ", ".join(map(str, sizes)) if sizes else "none"


def _stages_text(stages) -> str:
    """'z1' for one ZeRO stage, 'z0-2' for a run of them, 'z0,2' otherwise."""
    if len(stages) > 1 and list(stages) == list(range(stages[0], stages[-1] + 1)):
        return f"z{stages[0]}-{stages[-1]}"
    return "z" + ",".join(map(str, stages))


def attention_text(attention: str, flash_kernel: str, generation: str = "") -> str:
    """How a plan's attention is named in the output: "flash attention", "flash attention (cudnn kernel)"; on a
    Turing GPU (a T4), where FlashAttention-2 does not run (it needs Ampere or newer), PyTorch's SDPA runs its
    memory-efficient kernel, which keeps no s x s scores either: the planner's memory for "flash" holds."""
    if attention == "flash" and generation == "turing":
        return "flash attention (on a T4: SDPA's memory-efficient kernel, the same memory)"
    kernel = "" if attention != "flash" or flash_kernel == "fa2" else f" ({flash_kernel} kernel)"
    return f"{attention} attention{kernel}"


def breakdown(plan, seq_source: str | None = None) -> str:
    """One plan's memory per GPU and step time, part by part, then its DP communication before overlap.

    `seq_source`: where the sequence length came from, for the model line (`model_text`).

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    m, t, strategy = plan.memory, plan.time, plan.strategy
    lines = [f"{plan.model.name} on {plan.cluster.name or plan.cluster.gpus} GPUs: {strategy.label()}",
             f"  global batch {strategy.global_batch} sequences x {plan.model.seq_len} tokens, "
             f"precision {strategy.precision}, "
             f"{attention_text(strategy.attention, strategy.flash_kernel, plan.cluster.gpu.generation)}",
             *("  " + line for line in model_text(plan.model, seq_source).splitlines())]
    lines += _split_lines(plan)
    lines.append("  memory per GPU (GB)")
    for name, label in (("params", "parameters"), ("grads", "gradients"), ("optimizer", "optimizer"),
                        ("activations", "activations"), ("buffers", "buffers")):
        lines.append(f"    {label:<26}{getattr(m, name) / GB:>9.2f}")
    fits = "fits" if plan.fits else "does NOT fit"
    lines.append(f"    {'total':<26}{m.total / GB:>9.2f}  of {plan.cluster.gpu.memory / GB:.1f} ({fits})")
    # The line a plan must stay under, and by how much it does: the reserve is a rule of thumb (search.py).
    lines.append(f"    {'usable':<26}{plan.usable_memory / GB:>9.2f}  ({percent_text(1 - plan.reserve)}: memory reserve "
                 f"{percent_text(plan.reserve)}); margin {plan.margin / GB:+.2f}")
    lines.append("  step time (s)")
    parts = [("compute", "compute"), ("tp_comm", "TP communication"), ("bubble", "pipeline bubble"),
             ("pp_comm", "PP communication"), ("dp_comm_exposed", "exposed DP communication")]
    if plan.model.moe is not None:
        parts.append(("ep_comm", "exposed EP all-to-all" if strategy.ep_overlap else "EP all-to-all"))
    if strategy.cp > 1:
        parts.append(("cp_comm_exposed", "exposed CP ring (K/V)"))
    if strategy.replicas > 1:   # DiLoCo replicas' pseudo-gradient all-reduce, per step
        parts.append(("outer_sync", f"outer sync (1/{strategy.sync_every})"))
    parts.append(("overlap_slowdown", "overlap slowdown"))   # compute beside hidden collectives (overlap.py)
    for name, label in parts:
        lines.append(f"    {label:<26}{getattr(t, name):>9.3f}")
    lines.append(f"    {'total':<26}{t.total:>9.3f}")
    # All of the DP communication, of which only the exposed part is in the total above: how much
    # of it compute hides, and how close it comes to being exposed (lessons 05 and 09 overlap it).
    lines.append(f"  {'DP communication (total)':<28}{t.dp_comm:>9.3f}  "
                 f"({t.dp_comm - t.dp_comm_exposed:.3f} hidden under compute: only the overlap slowdown counts)")
    if strategy.tp_comm_overlap:   # TP's all-reduces in chunks beside the GEMMs (tp_overlap.py)
        lines.append(f"  {'TP communication (total)':<28}{t.tp_comm + t.tp_comm_hidden:>9.3f}  "
                     f"({t.tp_comm_hidden:.3f} hidden beside the GEMMs: only the overlap slowdown counts)")
    if strategy.ep_overlap:   # all-to-alls beside another micro-batch's compute (ep_overlap.py)
        lines.append(f"  {'EP all-to-all (total)':<28}{t.ep_comm + t.ep_comm_hidden:>9.3f}  "
                     f"({t.ep_comm_hidden:.3f} hidden beside another micro-batch: only the overlap slowdown counts)")
    if strategy.cp > 1:   # the ring's sends, of which each ring step's attention hides what it can (lesson 15)
        lines.append(f"  {'CP ring (total)':<28}{t.cp_comm:>9.3f}  "
                     f"({t.cp_comm - t.cp_comm_exposed:.3f} hidden under attention: only the overlap slowdown counts)")
    peak = " (of the bf16 peak, torchtitan's convention for FP8)" if fp8_matmuls(strategy) else ""
    lines.append(f"  tokens/s {plan.tokens_per_second:,.0f}   MFU {plan.mfu:.1%}{peak}")
    return "\n".join(lines)


def _split_lines(plan) -> list[str]:
    """What experts and context parallelism change, for the breakdown's header (nothing for other plans)."""
    model, strategy, lines = plan.model, plan.strategy, []
    if model.moe is not None:
        moe = model.moe
        lines.append(f"  mixture of experts: {moe.experts} experts (top {moe.top_k}{moe.shared_text()}) "
                     f"over ep={strategy.ep}: {moe.experts // strategy.ep} per GPU"
                     + ("" if strategy.expert_tp is None else ", each whole on its rank (expert_tp=1)"
                        if strategy.expert_tp == 1 else f", each split expert_tp={strategy.expert_tp} ways"))
    if strategy.cp > 1:
        lines.append(f"  context parallel: cp={strategy.cp} ranks share each sequence, "
                     f"{model.seq_len // strategy.cp} tokens per GPU")
    return lines


def model_states_text(params: int, strategy) -> str:
    """The short form's answer: per-GPU weights, gradients, optimizer state and their total in GB."""
    m = model_state_bytes(params, strategy)
    adam = f"{'mixed-precision' if strategy.mixed else 'fp32'} Adam " \
           f"({' + '.join(map(str, bytes_per_parameter(strategy)))} bytes/param)"
    lines = [f"{params / 1e9:g}B parameters, dp={strategy.dp}, ZeRO-{strategy.zero}, {adam}; per GPU:"]
    for name, label in (("params", "parameters"), ("grads", "gradients"), ("optimizer", "optimizer")):
        lines.append(f"  {label:<12}{getattr(m, name) / GB:>10.2f} GB")
    lines.append(f"  {'total':<12}{m.model_states / GB:>10.2f} GB")
    return "\n".join(lines)


def accuracy_text(cluster, plans=()) -> str:
    """How far to trust the numbers printed above it: the planner's error on published runs of the same GPU generation.

    First the runs the planner was calibrated on (`ddp_lab.plan.published`, the table in docs/planner.md; in-sample:
    they set or checked its constants), on the cluster's GPU generation: how many runs, the median and the largest
    error, and which parallelisms those runs used. A plan shown that splits the model in a way none of them does
    (tensor, pipeline, context or expert parallelism: every H100 run of the set is data-parallel) is pointed to the
    held-out lines, which score such plans. A generation none of them is on (a T4, a GB200) is called rough (the
    held-out lines below may still score its family). A plan for longer sequences than the scored runs train on is
    told how the planner did on MosaicML's sequence sweep of the generation (which its attention rate comes from),
    or, beyond the sweep's longest, that the plans are less certain. The figures hold for the planner's defaults: a
    cluster given another overlap slowdown (--overlap-slowdown) is told so. Last, for each family among `plans`
    (ddp_lab.plan.held_out's rules), the planner's error on the published runs of that family it was never fitted
    on: the held-aside part's, then the development part's (ddp_lab.plan.held_out); and for plans at 32K tokens or
    more, both parts' runs at such lengths on the cluster's GPU generation, whatever their family
    (`held_out.long_sequence_line`).

    Example:
        >>> from ddp_lab.plan import ClusterSpec
        >>> print(accuracy_text(ClusterSpec.preset("a100-80gb")))         # doctest: +ELLIPSIS
        accuracy: on the ... published A100 runs it was calibrated on (data, tensor and pipeline parallel),
                  its predicted throughput was off by ...% (median), ...% at most (README, "How far to trust the planner")

    Printed by `python -m ddp_lab plan` (docs/planner.md); lesson 13 asks how far to trust the planner.
    """
    # imported here, not at the top: ddp_lab.plan imports this module, and `python -m ddp_lab.plan.published`
    # (docs/planner.md's tables) would otherwise find its own module imported before it runs (runpy's RuntimeWarning)
    from ddp_lab.plan.published import RUNS, predictions, summary

    runs = predictions([run for run in RUNS if run.cluster.gpu.generation == cluster.gpu.generation])
    if not runs or cluster.gpu.memory_bandwidth is None:
        families = sorted({family_name(run) for run in predictions()})
        return "\n".join([f"accuracy: no run the planner was calibrated on is on {cluster.gpu.name} GPUs "
                          f"(docs/planner.md's table: {' and '.join(families)} runs,\n          median error {summary()['median']:.1%}): "
                          "treat these numbers as rough", *_held_out_lines(cluster, plans)])
    errors, family = summary(runs), family_name(runs[0])
    axes = ["data"] + [name for name, axis in SPLITS if any(getattr(r.strategy, axis) > 1 for r in runs)]
    covered = "data-parallel only" if axes == ["data"] else f"{', '.join(axes[:-1])} and {axes[-1]} parallel"
    lines = [f"accuracy: on the {errors['runs']} published {family} runs it was calibrated on ({covered}),",
             f"          its predicted throughput was off by {errors['median']:.1%} (median), {errors['max']:.1%} at most "
             f"(README, \"How far to trust the planner\")"]
    unchecked = [name for name, axis in SPLITS
                 if name not in axes and any(getattr(plan.strategy, axis) > 1 for plan in plans)]
    if unchecked:
        lines.append(f"          none of them uses {' or '.join(unchecked)} parallelism: the held-out lines below "
                     f"score such plans")
    lines += _sequence_lines(runs, plans, family)
    if cluster.overlap_slowdown != OVERLAP_SLOWDOWN:
        lines.append(f"          (with the default overlap slowdown, {OVERLAP_SLOWDOWN}, not the "
                     f"{cluster.overlap_slowdown} given here)")
    calibrated = efficiency_of(cluster.gpu.generation)
    if cluster.gpu.memory_bandwidth is not None and is_at_kernel_rate(cluster):
        lines.append(f"          (with the calibrated matmul efficiency, {calibrated:.2f}; here the kernel rate, "
                     f"{cluster.gpu.matmul_efficiency:.2f}: the held-out runs of NVIDIA's stacks were planned at it)")
    elif cluster.gpu.memory_bandwidth is not None and cluster.gpu.matmul_efficiency != calibrated:
        lines.append(f"          (with the calibrated matmul efficiency, {calibrated:.2f}, "
                     f"not the {cluster.gpu.matmul_efficiency:.3f} used here)")
    return "\n".join(lines + _held_out_lines(cluster, plans))


def _held_out_lines(cluster, plans) -> list[str]:
    """The planner's error on published runs it was never fitted on (both parts) for each family among `plans`."""
    from ddp_lab.plan import held_out    # imported here: see accuracy_text
    shown = dict.fromkeys(held_out.plan_scopes(plans, cluster))     # (family, where its plans put the experts)
    outcomes, rate = held_out.at_plans_rate(cluster)
    lines, said = [], set()
    for family, placement in shown:
        lines.append(f"          {held_out.family_line(family, outcomes, rate, cluster.gpu.generation, placement)}")
        at_kernels = held_out.kernel_rate_line(family) if (rate == held_out.AT_CALIBRATED_RATE and kernel_efficiency_of(
            cluster.gpu.generation) is not None and family not in said) else ""      # only where --kernel-rate applies
        said.add(family)
        if at_kernels:
            lines.append(f"          ({at_kernels})")
    if max((plan.model.seq_len for plan in plans), default=0) >= held_out.LONG_SEQUENCE:
        long = held_out.long_sequence_line(outcomes, cluster.gpu.generation, rate)
        if long:
            lines.append(f"          {long}")
    return lines


def _sequence_lines(runs, plans, family) -> list[str]:
    """What the published runs say about the longest sequence among `plans`, when it is longer than theirs."""
    from ddp_lab.plan.published import error    # imported here: see accuracy_text
    from ddp_lab.plan.sequence_sweep import SEQUENCE_SWEEP    # imported here: see accuracy_text
    longest = max((plan.model.seq_len for plan in plans), default=0)
    if longest <= max(run.model.seq_len for run in runs):
        return []
    sweep = [run for run in SEQUENCE_SWEEP if run.cluster.gpu.generation == runs[0].cluster.gpu.generation]
    top = max((run.model.seq_len for run in sweep), default=0)
    if longest > top:
        return [f"          {longest:,}-token sequences: no scored {family} run is as long, nor MosaicML's sweep "
                f"(to {top:,}): those plans are less certain"]
    ranges = []
    for recompute, label in (("none", "without recomputation"), ("full", "with it")):
        errors = [error(run) for run in sweep if run.strategy.recompute == recompute]
        if errors:
            ranges.append(f"{min(errors):+.1%} to {max(errors):+.1%} {label}")
    return [f"          {longest:,}-token sequences: on MosaicML's {family} runs at "
            f"{min(run.model.seq_len for run in sweep) // 1024}K-{top // 1024}K tokens (they set attention's rate)",
            f"          the planner was off by {', '.join(ranges)}"]

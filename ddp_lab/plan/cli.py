"""`python -m ddp_lab plan ...`: the planner from the command line.

    python -m ddp_lab plan --model llama3-8b --cluster h100-sxm --nodes 4 --top 5
    python -m ddp_lab plan --model llama3-8b --cluster h100-sxm --nodes 4 --tp 8 --dp 4 --zero 1
    python -m ddp_lab plan --model llama3-70b --seq-len 4096 --cluster h100-sxm --nodes 8 --pp 4 --virtual-stages 2
    python -m ddp_lab plan --hf-config path/to/config.json --cluster a100-80gb --nodes 2
    python -m ddp_lab plan --layers 24 --hidden 2048 --heads 16 --ffn 5632 --vocab 32000 --seq-len 4096 --cluster h100-sxm
    python -m ddp_lab plan --params 7.5B --dp 64 --zero 3
    python -m ddp_lab plan --model mixtral-8x7b --cluster h100-sxm --nodes 8 --ep 8 --top 5
    python -m ddp_lab plan --model llama3-8b --cluster h100-sxm --nodes 4 --tp 8 --cp 4 --zero 1

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import argparse
import os
import sys

from ddp_lab.course.plan import context_parallel, expert_tp, experts, outer_sync, pipeline_stages
from ddp_lab.course.plan.cluster_spec import ClusterSpec
from ddp_lab.course.plan.efficiency import early_stop_can_skip_last_gemm
from ddp_lab.course.plan.hf_config import position_key
from ddp_lab.course.plan.model import PRESETS, Transformer, parse_count
from ddp_lab.course.plan.search import (DEFAULT_TOKENS_PER_BATCH, MEMORY_RESERVE, candidates, default_global_batch,
                                        evaluate, faster_with_context_parallel, nearest_multiple, search)
from ddp_lab.course.plan.strategy import Strategy, check, check_gpu_count, divisors
from ddp_lab.plan import cli_fit
from ddp_lab.plan.cli_flags import (OUTER_SYNC, SEARCH_WIDE, SHAPE_FLAGS, SLOWEST_LINK_GBPS, SPLIT_FLAGS,
                                    STRATEGY_FLAGS, OneLineErrors, add_arguments, check_flags, check_number, flag_name,
                                    in_flags, one_plan_flags)

# what a plan needs for each of a framework's flags a search applies (search.candidates)
FITS = {"sequence_parallel": "tp > 1", "tp_comm_overlap": "tp > 1 with sequence parallelism",
        "overlap_param_gather": "ZeRO 1 or 2", "ep_overlap": "ep > 1, interleaved where pp > 1, no full recomputation"}
from ddp_lab.plan.cli_plot import draw
from ddp_lab.plan.cli_regions import cross_region, regions_note, search_regions_note
from ddp_lab.plan.model_files import read_config, read_hf_config
from ddp_lab.plan.decision import assumptions_text, stated_error, ties_text
from ddp_lab.plan.report import (accuracy_text, breakdown, fold_shard_sizes, fold_zero_stages, model_states_text,
                                 search_header, table)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Carry out `python -m ddp_lab plan`; bad input exits 2 through parser.error: one line naming the flag.

    A reader that stops reading (`... | head -1`) ends it quietly, with exit status 1, as the Python docs advise
    (signal module, "Note on SIGPIPE"): what is left to print goes to the null device.
    """
    try:
        check_flags(args)
        if args.params is not None:
            return _short_form(args)
        model = _model(args)
        seq_source = _sequence_source(args, model)
        cluster = ClusterSpec.preset(args.cluster, nodes=args.nodes or 1, gpus_per_node=args.gpus_per_node)
        if args.overlap_slowdown is not None:
            cluster = cluster.with_(overlap_slowdown=args.overlap_slowdown)
        check_number("node_link_gbps", args.node_link_gbps, at_least=SLOWEST_LINK_GBPS)
        link_note = ""
        if args.node_link_gbps is not None:
            cluster = cluster.with_(inter_node_bandwidth=args.node_link_gbps * 1e9 / 8)
            link_note = (f"note: each GPU's link to other nodes: {args.node_link_gbps:g} Gb/s (--node-link-gbps)"
                         + ("; on one node nothing crosses it" if cluster.nodes == 1 else "") + "\n")
        cluster = cli_fit.given_efficiency(cross_region(cluster, args), args)
        args.precision = args.precision or ("bf16" if "bf16" in cluster.gpu.peak_flops else "fp16")
        args.expert_imbalance = 1.0 if args.expert_imbalance is None else args.expert_imbalance   # balanced
        if args.fp32_grads and args.precision == "fp32":
            raise ValueError("--fp32-grads keeps fp32 gradients under bf16/fp16 mixed precision; with --precision fp32 "
                             "they are fp32 already: drop one of them")
        reserve = MEMORY_RESERVE if args.memory_reserve is None else args.memory_reserve
        no_effect = (link_note + (_early_stop_changes_nothing(model) if args.checkpoint_early_stop else "")
                     + _ffn_note(model, args) + _sync_every_note(args))
        given = {name: getattr(args, name) for name in STRATEGY_FLAGS if getattr(args, name) is not None}
        if given.get("dp_shard") == "none":     # --dp-shard none: no HSDP, the Strategy's default
            del given["dp_shard"]
        one_plan = bool(one_plan_flags(args))
        cli_fit.check_flags(args, one_plan)
        _check_splits(model, cluster, args, given)
        if one_plan:
            given.update({name: getattr(args, name) for name in SPLIT_FLAGS if getattr(args, name) is not None})
            strategy, note = _strategy(model, cluster, args, given)
            if strategy.moe_dispatch != "all-to-all" and not experts.dispatcher_matters(model, cluster, strategy):
                where = ("crosses nodes only between regions"
                         if expert_tp.group(strategy, "ep").spans_nodes(cluster.gpus_per_node) else "stays in one node")
                note += (f"note: --moe-dispatch {strategy.moe_dispatch} changes nothing for this plan: its ep group "
                         f"{where} and each rank holds {'every expert' if strategy.ep == 1 else 'one expert'}\n")
                strategy = strategy.with_(moe_dispatch="all-to-all")
            if experts.needs_sequence_parallel(model, strategy.tp) and not strategy.sequence_parallel:
                note += ("note: Megatron-Core trains a MoE layer with tp > 1 only with sequence parallelism "
                         "(--sequence-parallel); without it this plan charges each MoE layer a dense layer's "
                         "tensor-parallel collectives\n")
            if strategy.expert_imbalance != 1 and strategy.ep == 1:
                note += (f"note: --expert-imbalance {strategy.expert_imbalance:g} changes nothing for this plan: with "
                         f"ep 1 every GPU holds every expert, so uneven routing leaves each GPU's work as it is\n")
            cluster, fit_note = cli_fit.fitted(model, cluster, strategy, args)
            plan = evaluate(model, cluster, strategy, args.tp_across_nodes, reserve)
            print(fit_note + no_effect + note + regions_note(model, cluster, strategy) + breakdown(plan, seq_source))
            print(assumptions_text([plan], chosen=False))
            print(accuracy_text(cluster, [plan]))
            drawn = [plan]
        else:
            report, drawn = _search_report(model, cluster, args, reserve, seq_source)
            print(no_effect + report)
        if args.plot is not None:
            draw(drawn, args.plot)
        sys.stdout.flush()    # here, not at exit, so that a closed pipe is caught below
        return 0
    except KeyError as error:
        parser.error(error.args[0])
    except ValueError as error:
        parser.error(in_flags(str(error), args))     # the library's message names fields; here they are flags
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # the exit's flush writes nowhere
        return 1


def _model(args) -> Transformer:
    """The model the flags describe: a preset or a config.json, with any shape flags applied; or the shape alone."""
    changes = {name: getattr(args, name) for name in SHAPE_FLAGS if getattr(args, name) is not None}
    if args.model is not None:
        base = Transformer.preset(args.model)
    elif args.hf_config is not None:
        try:
            base = read_hf_config(args.hf_config, seq_len=args.seq_len)
        except ValueError as error:
            raise ValueError(f"--hf-config {error}") from None
    else:
        base = Transformer("custom", 1, 1, 1, 1, 1, ffn_kind="swiglu", norm="rmsnorm", bias=False, position="rope",
                           tied_embeddings=False, dropout=False)
    shape = {name: changes.get(name, getattr(base, name)) for name in SHAPE_FLAGS}
    if shape["kv_heads"] is None or ("heads" in changes and "kv_heads" not in changes and args.model is None
                                     and args.hf_config is None):
        shape["kv_heads"] = shape["heads"]
    if shape["hidden"] % shape["heads"] and base.head_size is None:
        raise ValueError(f"--hidden {shape['hidden']} is not divisible by --heads {shape['heads']}: each head is "
                         f"hidden / heads wide; use --heads in {divisors(shape['hidden'])[:12]}")
    if shape["heads"] % shape["kv_heads"]:
        raise ValueError(f"--kv-heads {shape['kv_heads']} does not divide --heads {shape['heads']}: each key/value "
                         f"head serves a whole group of query heads; use --kv-heads in {divisors(shape['heads'])}")
    if not changes:
        return base
    try:
        model = base.with_(**shape)
    except ValueError as error:     # the library's rule; the shape flags changed its fields
        raise ValueError(in_flags(str(error), args, SHAPE_FLAGS)) from None
    if "ffn" in changes and model.moe is not None and model.moe.dense_layers == 0:
        raise ValueError(f"--ffn sets the FFN of dense layers, and {model.name} has none: each of its {model.layers} "
                         f"layers holds {model.moe.experts} experts of FFN size {model.moe.expert_ffn} instead, so "
                         f"--ffn would change nothing; drop it (no flag sets the experts' size: a config.json read "
                         f"with --hf-config does)")
    return model


def _ffn_note(model, args) -> str:
    """A note when --ffn changes a model with experts: only its dense layers (the experts keep their size)."""
    if args.ffn is None or model.moe is None:
        return ""
    return (f"note: --ffn {args.ffn} sets the FFN of {model.name}'s {model.moe.dense_layers} dense layer(s) only; its "
            f"experts keep their FFN size {model.moe.expert_ffn} (no flag sets it)\n")


def _check_splits(model, cluster, args, given: dict) -> None:
    """Refuse --ep/--cp values no plan of this model on this cluster can have, naming what would do."""
    ep, cp = args.ep, args.cp
    if ep not in (None, "auto", 1):
        if model.moe is None:
            with_experts = [name for name, preset in PRESETS.items() if preset.moe is not None]
            raise ValueError(f"--ep {ep} needs a mixture-of-experts model, but {model.name} is dense (no experts to "
                             f"split): drop --ep, or plan one of {', '.join(with_experts)}")
        if cluster.gpus % ep or model.moe.experts % ep:
            valid = [d for d in divisors(model.moe.experts) if not cluster.gpus % d]
            raise ValueError(f"--ep {ep} must divide the {model.moe.experts} experts of {model.name} and the "
                             f"cluster's {cluster.gpus} GPUs (expert-parallel ranks are carved out of the data-parallel "
                             f"ones): use --ep in {valid} or --ep auto")
    if cp not in (None, "auto", 1):
        if cluster.gpus % cp:
            raise ValueError(f"--cp {cp} does not divide the cluster's {cluster.gpus} GPUs: use --cp in "
                             f"{[d for d in divisors(cluster.gpus) if context_parallel.splits_sequence(model, d)]}")
        if not context_parallel.splits_sequence(model, cp):
            valid = [d for d in divisors(cluster.gpus) if context_parallel.splits_sequence(model, d)]
            raise ValueError(f"--cp {cp}: the sequence of {model.seq_len} tokens does not split into 2 x cp = {2 * cp} "
                             f"equal chunks (each context-parallel rank takes two, to balance the causal mask); "
                             f"use --cp in {valid}")


def _early_stop_changes_nothing(model) -> str:
    """A note when PyTorch's checkpoint re-runs this model's whole layer anyway (efficiency.early_stop_can_skip_last_gemm):
    the plans are then labelled and charged as plain full recomputation."""
    if early_stop_can_skip_last_gemm(model):
        return ""
    after = "dropout" if model.dropout else "its experts' combine"
    return (f"note: in {model.name} {after} follows the FFN's down projection and saves a tensor for backward, so "
            f"PyTorch's checkpoint re-runs the whole layer: --checkpoint-early-stop changes nothing\n")


def _sync_every_note(args) -> str:
    """A note when an outer sync is asked for without --sync-every: its replicas then sync every step (sync_every 1),
    which sends each step what data parallelism sends, at the precision given."""
    if args.sync_every is not None or not outer_sync.outer_sync_on(args.replicas, args.sync_every, args.sync_precision):
        return ""
    return ("note: without --sync-every the DiLoCo replicas sync every step (H = 1), as often as data parallelism "
            "does; DiLoCo syncs every H steps (INTELLECT-1: H = 100): add --sync-every H\n")


def _short_form(args) -> int:
    try:
        params = parse_count(args.params)
    except ValueError as error:
        raise ValueError(f"--params {error}") from error
    strategy = Strategy(dp=args.dp or 1, zero=args.zero or 0, precision=args.precision or "bf16",
                        fp32_grads=args.fp32_grads)
    print(model_states_text(params, strategy))
    return 0


def _sequence_source(args, model) -> str | None:
    """Where the planned sequence length came from, for the model line (report.model_text)."""
    if args.seq_len is not None:
        return "--seq-len"
    if args.hf_config is not None:
        key = position_key(read_config(args.hf_config))
        return f"planned at {key} {model.seq_len:,} tokens; pass --seq-len for the length you will train"
    return "the preset's; --seq-len sets it" if args.model is not None else None


def _search_report(model, cluster, args, reserve: float, seq_source: str | None = None) -> tuple[str, list]:
    """The search's header (what was searched, how many plans fit), its fastest distinct plans with the margin and
    ties, what they assume and how far to trust them; and the plans printed."""
    global_batch = args.global_batch or default_global_batch(model, cluster)
    note = ("" if args.global_batch else _default_batch_note(model, cluster, global_batch)) \
        + search_regions_note(cluster)
    options = {"precision": args.precision, "tp_across_nodes": args.tp_across_nodes, "cp": args.cp or 1,
               "ep": args.ep, "attention": args.attention or "flash", "fp32_grads": args.fp32_grads,
               "flash_kernel": args.flash_kernel or "fa2", "moe_dispatch": args.moe_dispatch or "all-to-all",
               "expert_imbalance": args.expert_imbalance,
               "checkpoint_early_stop": args.checkpoint_early_stop,
               "dp_shard": {None: "auto", "none": None}.get(args.dp_shard, args.dp_shard),
               **{name: bool(getattr(args, name)) for name in SEARCH_WIDE}}
    if any(getattr(args, name) is not None for name in OUTER_SYNC):   # every plan's outer sync, as one plan's
        options.update(sync_every=args.sync_every, sync_precision=args.sync_precision,
                       replicas=args.replicas)                            # None: candidates' default (outer_sync)
    if args.virtual_stages is not None:
        options["virtual_stages"] = (1, args.virtual_stages)
    tried = list(candidates(model, cluster, global_batch, **options))
    fitting = search(model, cluster, top=None, global_batch=global_batch, reserve=reserve, strategies=tried, **options)
    folded = fold_shard_sizes(fold_zero_stages(fitting))
    rows = folded[:args.top or 10]
    applied = tuple(flag_name(name) for name in SEARCH_WIDE if options[name])
    outer_on = outer_sync.outer_sync_on(args.replicas, args.sync_every, args.sync_precision)
    if outer_on:
        outer = " ".join(f"{flag_name(name)} {getattr(args, name)}" for name in OUTER_SYNC
                         if getattr(args, name) is not None)
        applied += (outer + (" (each dp rank a replica)" if options["replicas"] is None else ""),)
        if options["replicas"] is None and model.moe is not None:
            note += ("note: with each dp rank a DiLoCo replica, a replica holds one dp rank, so its expert-parallel "
                     "groups are at most its cp ranks (ep 1 without context parallelism); --replicas R keeps dp / R "
                     "ranks in each, for ep\n")
    dispatched = any(s.moe_dispatch != "all-to-all" for s in tried)   # put only where it matters (dispatcher_matters)
    if dispatched:
        applied += (f"--moe-dispatch {options['moe_dispatch']}",)
    uneven = options["expert_imbalance"] != 1
    splits_experts = any(s.ep > 1 for s in tried)
    if uneven and splits_experts:
        applied += (f"--expert-imbalance {options['expert_imbalance']:g}",)
    for name in SEARCH_WIDE:   # given, but no plan tried fits it (one GPU a node: no tp > 1)
        if options[name] and not any(getattr(s, name) for s in tried):
            note += f"note: {flag_name(name)} applies to no plan of this search (none has {FITS[name]}); drop it\n"
    if uneven and not splits_experts:
        note += (f"note: --expert-imbalance {options['expert_imbalance']:g} applies to no plan of this search (none "
                 f"has ep > 1: with every expert on each GPU uneven routing leaves each GPU's work as it is); drop "
                 f"it\n")
    if options["moe_dispatch"] != "all-to-all" and not dispatched:
        note += (f"note: --moe-dispatch {options['moe_dispatch']} applies to no plan of this search (no ep group "
                 f"crosses nodes inside a region, and no plan with ep > 1 leaves a rank several experts); drop it\n")
    if isinstance(args.dp_shard, int) and outer_on:
        note += (f"note: --dp-shard {args.dp_shard} applies to no plan of this search: the planner does not model "
                 f"HSDP inside DiLoCo replicas; drop it\n")
    elif isinstance(args.dp_shard, int) and not any(s.dp_shard for s in tried):
        note += (f"note: --dp-shard {args.dp_shard} applies to no plan of this search (hybrid sharding needs a dense "
                 f"model, a ZeRO-3 plan across nodes whose dp it divides, and shard groups that divide a node and a "
                 f"region or are whole ones); drop it\n")
    header = search_header(model, cluster, global_batch, args.precision, len(tried), len(fitting), reserve,
                           options["attention"], flash_kernel=options["flash_kernel"],
                           cp={s.cp for s in tried}, ep={s.ep for s in tried},
                           seq_source=seq_source, interleaved=any(s.virtual_stages > 1 for s in tried),
                           applied=applied, dp_shard={s.dp_shard for s in tried},
                           whole_experts=any(expert_tp.size(s) < s.tp for s in tried))
    plans = [plan for plan, _ in rows]
    tie, source = stated_error(cluster, plans[0] if plans else None, [plan for plan, _ in folded])
    if plans and args.cp is None:
        split = faster_with_context_parallel(model, cluster, global_batch, reserve, options, plans[0])
        gain = split[0].tokens_per_second / plans[0].tokens_per_second - 1 if split else 0.0
        if gain > tie:     # a plan within the planner's stated error of the best is a tie, not worth a note
            count = len(fold_shard_sizes(fold_zero_stages(split)))
            note += (f"note: context parallelism was not searched (--cp auto searches it): with it the fastest plan "
                     f"is {split[0].strategy.label()} at {split[0].tokens_per_second:,.0f} tokens/s, {gain:.1%} "
                     f"faster than the best below ({count} such plan{'s' if count > 1 else ''} fit)\n")
    report = "\n".join([header, table(plans, stages=[zero for _, zero in rows], tie=tie),
                        ties_text([plan for plan, _ in folded], tie, source),
                        assumptions_text(plans, chosen=True, expert_imbalance=options["expert_imbalance"]),
                        accuracy_text(cluster, plans)])
    return note + report, plans


def _strategy(model, cluster, args, given: dict) -> tuple[Strategy, str]:
    """A Strategy from the flags given, and a note for what the CLI chose itself.

    dp fills the GPUs that tp and pp leave; grad_accum makes the global batch: the one given
    (refused unless dp x micro-batch divides it), else the default rounded to the nearest
    multiple of dp x micro-batch, said in the note.
    """
    tp, pp, cp = given.get("tp", 1), given.get("pp", 1), given.get("cp", 1)
    if "dp" not in given:
        if cluster.gpus % (tp * pp * cp):
            raise ValueError(_no_dp_fills(model, cluster, tp, pp, args.tp_across_nodes, cp))
        given["dp"] = cluster.gpus // (tp * pp * cp)
    given.setdefault("micro_batch", 1)
    given["sequence_parallel"] = bool(given.get("sequence_parallel", False))
    synced = outer_sync.outer_sync_asked(given.get("sync_every"), given.get("sync_precision"))
    if "replicas" in given:          # the GPU count first, then the replica counts a refusal names: those this
        check_gpu_count(given["dp"], tp, pp, cp, cluster.gpus)      # cluster does not cut (before the Strategy's own)
        ep = given.get("ep", 1)
        outer_sync.check_count(given["dp"], cp, ep if isinstance(ep, int) else 1, given["replicas"],
                               cluster.gpus, cluster.gpus_per_node, cluster.region_gpus, synced=synced)
    if synced:
        given.setdefault("replicas", given["dp"])      # every dp rank a DiLoCo replica unless --replicas says

    if given.get("virtual_stages", 1) > 1:
        given["schedule"] = "interleaved"
    if args.checkpoint_early_stop and given.get("recompute") != "full":
        raise ValueError(f"--checkpoint-early-stop describes how full recomputation runs; this plan has --recompute "
                         f"{given.get('recompute', 'none')}: add --recompute full or drop --checkpoint-early-stop")
    strategy = Strategy(precision=args.precision, attention=args.attention or "flash", fp32_grads=args.fp32_grads,
                        flash_kernel=args.flash_kernel or "fa2", moe_dispatch=args.moe_dispatch or "all-to-all",
                        expert_imbalance=args.expert_imbalance,
                        checkpoint_early_stop=args.checkpoint_early_stop and early_stop_can_skip_last_gemm(model),
                        **{**given, "grad_accum": given.get("grad_accum", 1)})
    check(model, strategy.with_(grad_accum=strategy.pp),   # the micro-batches are checked below, with the batch
          gpus=cluster.gpus, gpus_per_node=cluster.gpus_per_node, tp_across_nodes=args.tp_across_nodes,
          region_gpus=cluster.region_gpus)            # dp x tp x pp = GPUs before any batch arithmetic
    replica = strategy.dp * strategy.micro_batch      # sequences one micro-batch step takes over all replicas
    split = f"dp x micro-batch = {strategy.dp} x {strategy.micro_batch} = {replica}"
    if "grad_accum" in given:
        if args.global_batch not in (None, strategy.global_batch):
            raise ValueError(f"--global-batch {args.global_batch} disagrees with dp x micro-batch x --grad-accum "
                             f"= {strategy.dp} x {strategy.micro_batch} x {strategy.grad_accum} = "
                             f"{strategy.global_batch}: give --global-batch or --grad-accum, not both")
        return _interleaving_fits(strategy), ""
    if strategy.virtual_stages > 1:   # the interleaved schedule takes micro-batches in groups of pp
        replica *= strategy.pp
        split = f"dp x micro-batch x pp = {strategy.dp} x {strategy.micro_batch} x {strategy.pp} = {replica}"
    if args.global_batch is not None:
        if args.global_batch % replica:
            nearest = " or ".join(map(str, _nearest_multiples(args.global_batch, replica)))
            raise ValueError(f"--global-batch {args.global_batch} is not a multiple of {split}: "
                             f"use --global-batch {nearest}")
        return strategy.with_(grad_accum=args.global_batch // (strategy.dp * strategy.micro_batch)), ""
    default = default_global_batch(model, cluster)
    batch = nearest_multiple(default, replica)
    note = _default_batch_note(model, cluster, batch, split)
    return strategy.with_(grad_accum=batch // (strategy.dp * strategy.micro_batch)), note


def _default_batch_note(model, cluster, batch: int, split: str = "") -> str:
    """A note when the global batch planned by default is not 4M tokens / seq_len: the default raised to one sequence
    per GPU (search.default_global_batch), or rounded to the nearest multiple of what the strategy splits it into."""
    tokens = DEFAULT_TOKENS_PER_BATCH // model.seq_len
    if batch == tokens:
        return ""
    default = default_global_batch(model, cluster)
    if default == tokens:
        why = "4M tokens"
    elif tokens < cluster.gpus:
        why = (f"one sequence per GPU: 4M tokens / seq_len = {tokens} sequences would leave some of the "
               f"{cluster.gpus} GPUs without one")
    else:
        why = f"the multiple of the {cluster.gpus} GPUs nearest 4M tokens / seq_len = {tokens} sequences"
    if batch == default:
        said = f"the default raised to {why}" if tokens < cluster.gpus else why
        return f"note: global batch {batch}, {said}; --global-batch sets it\n"
    return (f"note: global batch {batch}, the multiple of {split} nearest the default {default} ({why}); "
            f"--global-batch sets it\n")


def _interleaving_fits(strategy: Strategy) -> Strategy:
    """Refuse --virtual-stages with a number of micro-batches the interleaved schedule cannot take."""
    if strategy.virtual_stages > 1 and strategy.grad_accum % strategy.pp:
        raise ValueError(f"--virtual-stages needs the micro-batches (--grad-accum {strategy.grad_accum}) to be a "
                         f"multiple of --pp {strategy.pp} (the interleaved schedule runs them in groups of pp)")
    return strategy


def _nearest_multiples(value: int, step: int) -> list[int]:
    """The positive multiples of `step` either side of `value` (just `value` if it is one)."""
    below = value // step * step
    return [value] if below == value else [m for m in (below, below + step) if m >= step]


def _no_dp_fills(model, cluster, tp: int, pp: int, tp_across_nodes: bool, cp: int = 1) -> str:
    """Why --tp x --pp (x --cp) leaves no whole data-parallel size, with the values that would."""
    max_tp = cluster.gpus if tp_across_nodes else cluster.gpus_per_node
    valid_tp = [d for d in divisors(cluster.gpus) if d <= max_tp and not model.heads % d
                and not model.kv_heads_ % d and not model.ffn_ % d]
    valid_pp = [d for d in divisors(cluster.gpus)     # equal stages, or fewer layers on the first and last
                if not model.layers % d or pipeline_stages.fewer_at_the_ends(model.layers, d)]
    product, flags = f"--tp {tp} x --pp {pp}", "--tp and --pp"
    if cp > 1:
        product, flags = f"{product} x --cp {cp}", "--tp, --pp and --cp"
    return (f"{product} = {tp * pp * cp} does not divide the cluster's {cluster.gpus} GPUs: choose {flags} "
            f"whose product divides {cluster.gpus} (for {model.name}: --tp in {valid_tp}, --pp in "
            f"{valid_pp}), or change --nodes")


def main(argv: list[str] | None = None) -> int:
    """Entry point for `python -m ddp_lab.plan.cli` (the package's CLI calls `run`)."""
    parser = OneLineErrors(prog="python -m ddp_lab plan")
    add_arguments(parser)
    return run(parser.parse_args(argv), parser)


if __name__ == "__main__":
    sys.exit(main())

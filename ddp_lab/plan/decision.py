"""What a reader needs to choose between plans: the parameters read, the margin and ties, what a plan assumes.

The planner's numbers carry an error (README, "How far to trust the planner"); plans closer than it
are ties, chosen between by the memory they leave and by simplicity. `report` prints these lines
under its table and breakdown; the CLI (`python -m ddp_lab plan`) prints them for every plan.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from ddp_lab.course.plan import multi_token, sliding_window
from ddp_lab.course.plan.experts import dispatch_crosses_nodes, dispatcher_matters, sorts_received_rows
from ddp_lab.course.plan.search import percent_text
from ddp_lab.plan import held_out

GB = 1e9


def versus_best(plan, best, tie: float) -> str:
    """'best', or a plan's throughput against the best's: '-1.1% tie' when within the stated error `tie`."""
    if plan is best:
        return "best"
    change = plan.tokens_per_second / best.tokens_per_second - 1
    text = f"{change:+.1%}" if abs(change) >= 0.0005 else "0.0%"    # not "-0.0%" for a hair slower
    return text + (" tie" if abs(change) <= tie else "")


def ties_text(plans, tie: float, source: str) -> str:
    """How many plans are as good as the best within the stated error, and what to choose them by.

    `plans`: every plan that fits, best first (one per row of the table); `tie` and `source`: the
    error and where it comes from (`stated_error`).
    """
    best = plans[0].tokens_per_second
    tied = [plan for plan in plans[1:] if abs(plan.tokens_per_second / best - 1) <= tie]
    if not tied:
        return f"ties: no other plan is within {tie:.1%} of the best ({source})"
    roomiest = max([plans[0], *tied], key=lambda plan: plan.margin)
    return (f"ties: {len(tied)} more plan{'s' if len(tied) > 1 else ''} within {tie:.1%} of the best ({source}):\n"
            f"      the planner cannot tell them apart; the most memory left among them: {roomiest.strategy.label()}, "
            f"{roomiest.margin / GB:.1f} GB")


def stated_error(cluster, best=None, fitting=()) -> tuple[float, str]:
    """The error the planner states for plans on `cluster`: (share, where it comes from), for marking ties.

    The largest of these medians: the published runs' on the cluster's GPU generation, which the
    planner's constants were set or checked on (`accuracy_text` prints the same figure; for a GPU
    no published run checks, all of them), and, for each family the `best` plan is in
    (`held_out.plan_families`: a MoE plan on B200s is in two), that of the runs it was never fitted
    on (`ddp_lab.plan.held_out`), scored at the rate the plan runs at (`held_out.at_plans_rate`), those
    on the plan's GPU generation where the family has any, and of a mixture-of-experts family
    those placing the experts as the plan does where it has any (`held_out.for_plan`): the
    held-aside part's, the fairer estimate of its error, or the development part's where no
    held-aside run is of that family. Where other `fitting` plans within that error of the best
    place the experts another way (`held_out.plan_scopes`), their placement's error counts too, and
    so on until no new placement comes within it: the band does not depend on how many rows a
    table shows.
    """
    # lazy: see report.accuracy_text (published imports ddp_lab.plan)
    from ddp_lab.plan import held_out
    from ddp_lab.plan.published import RUNS, predictions, summary

    runs = predictions([run for run in RUNS if run.cluster.gpu.generation == cluster.gpu.generation])
    if not runs or cluster.gpu.memory_bandwidth is None:
        overall = summary()
        error, source = overall["median"], f"the planner's median error on all {overall['runs']} published runs"
    else:
        errors = summary(runs)
        error = errors["median"]
        source = f"the planner's median error on {errors['runs']} published {family_name(runs[0])} runs"
    if best is None:
        return error, source
    families = held_out.plan_families(best.model, cluster, best.strategy)
    everyone = held_out.at_plans_rate(cluster)[0]        # scored at the rate the plan runs at
    scored = set()
    while True:
        tied = [plan for plan in fitting if plan.tokens_per_second >= best.tokens_per_second * (1 - error)]
        scopes = [scope for scope in held_out.plan_scopes([best, *tied], cluster)
                  if scope[0] in families and scope not in scored]
        if not scopes:
            return error, source
        for family, placement in scopes:
            scored.add((family, placement))
            outcomes, where = held_out.for_plan(family, everyone, cluster.gpu.generation,      # its GPUs' if any,
                                                placement)                                   # each expert placing
            for split in (held_out.ASIDE, held_out.DEVELOPMENT):
                row = next(r for r in held_out.by_family(outcomes, split) if r.family == family)
                if row.runs:
                    break
            if row.median is not None and row.median > error:
                part = "held-aside" if split == held_out.ASIDE else "development"
                runs_text = f"{row.runs} {part} published run{'s' if row.runs > 1 else ''}"
                whose = "its family" if len(families) == 1 else f"its family {held_out.FAMILIES[family]}"
                error, source = (row.median, f"the planner's median error on {runs_text} of {whose}"
                                 + (f", {where}" if where else ""))


def count_text(count: int) -> str:
    """A parameter count to three significant figures: 8030261248 -> '8.03B', 124439808 -> '124M'."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= scale:
            return f"{count / scale:.3g}{suffix}"
    return str(count)


def model_text(model, seq_source: str | None = None) -> str:
    """The model line of every plan and search: parameters (total and active, with experts) and the sequence length.

    `seq_source` says where the sequence length came from (the CLI's `_sequence_source`): shown
    after the length, or as a note of its own when it starts "planned at" (a length the user did
    not choose, such as a config's max_position_embeddings).

    Example:
        >>> from ddp_lab.plan import Transformer
        >>> print(model_text(Transformer.preset("mixtral-8x7b")))
        model: 46.7B parameters, 12.9B active per token (8 experts, top 2); 32,768-token sequences
    """
    line = f"model: {count_text(model.parameters())} parameters"
    if model.moe is not None:
        moe = model.moe
        dense = f", first {moe.dense_layers} layer{'s' if moe.dense_layers > 1 else ''} dense" \
            if moe.dense_layers else ""
        line += (f", {count_text(model.active_parameters())} active per token ({moe.experts} experts, "
                 f"top {moe.top_k}{moe.shared_text()}{dense})")
    if model.head_size is not None:
        line += f", heads of {model.head_dim}"
    if model.latent is not None:
        line += f", {model.latent.text()}"
    line += multi_token.text(model)
    window = sliding_window.describe(model)
    line += f", {window}" if window else ""
    if seq_source and seq_source.startswith("planned at"):    # a note of its own: the length is a guess
        return f"{line}; {model.seq_len:,}-token sequences\nnote: {seq_source}"
    return f"{line}; {model.seq_len:,}-token sequences" + (f" ({seq_source})" if seq_source else "")


def assumptions_text(plans, chosen: bool, expert_imbalance: float = 1.0) -> str:
    """What the numbers above rest on: the micro-batch and recomputation, the routing, the stack's host-side time and
    fusion (fine-grained MoE), what memory leaves out.

    `chosen`: True when a search chose the micro-batch and recomputation (each row shows its own),
    False for one plan given by the flags (its values, and the flags that change them). `expert_imbalance`: the
    search's (--expert-imbalance), said even where no plan shown splits the experts it slowed.
    """
    plan = plans[0]
    if chosen:
        parts = ["the micro-batch (mbAxB) and recomputation (full, sel; none if unmarked) each row shows, chosen by "
                 "the search"]
    else:
        s = plan.strategy
        parts = [f"micro-batch {s.micro_batch} (--micro-batch), recomputation {s.recompute} (--recompute)"]
    if plan.model.moe is not None:
        split = [p.strategy.expert_imbalance for p in plans if p.strategy.ep > 1]
        asked = max([expert_imbalance, *split])
        if not split:
            parts.append("every expert on each GPU (ep 1): however unevenly the router spreads the tokens, each GPU "
                         "multiplies its own tokens' share (no capacity padding, no dropped tokens)"
                         + (f"; --expert-imbalance {asked:g} slowed the plans with ep > 1, none shown" if asked > 1
                            else ""))
        elif asked > 1:
            parts.append(f"uneven routing: where ep > 1 the busiest expert-parallel rank gets {asked:g} times a "
                         f"balanced share of the tokens (--expert-imbalance; no capacity padding, no dropped tokens)")
        else:
            parts.append("balanced routing: each expert gets its share of the tokens (no capacity padding, no "
                         "dropped tokens; --expert-imbalance says how uneven it is)")
        if "moe-fine" in held_out.plan_families(plan.model, plan.cluster, plan.strategy):
            parts.append("host-side time (the CPU launching kernels) and kernel fusion only as in the runs that set "
                         "the matmul rate, which a fine-grained MoE's many small kernels make matter more: Megatron-LM's "
                         f"two MXFP8 recipes of one Qwen3-30B-A3B layout on 16 GB200s ran {held_out.stack_gap():.0%} "
                         "apart (the faster with the whole step in CUDA graphs, a fused grouped MLP and a paged stash), "
                         "where the planner gives both one figure")
        dispatched = [p for p in plans if dispatcher_matters(p.model, p.cluster, p.strategy)]
        if dispatched:
            parts.append(_dispatch_text(dispatched))
    parts.append(f"{percent_text(plan.reserve)} of each GPU's memory kept for what is not counted (CUDA context, "
                 f"NCCL buffers, fragmentation; --memory-reserve)")
    return "assumes: " + ";\n         ".join(parts)


def _dispatch_text(plans) -> str:
    """The `assumes:` line's words for how the plans' MoE tokens reach their experts (plans where the dispatcher
    changes the time, all on one dispatcher): across nodes, where an ep group spans them; the sort of the received
    rows by expert, where a rank holds several experts."""
    across = any(dispatch_crosses_nodes(p.cluster, p.strategy) for p in plans)
    sorts = any(sorts_received_rows(p.model, p.strategy.with_(moe_dispatch="all-to-all")) for p in plans)
    if plans[0].strategy.moe_dispatch == "all-to-all":
        words = ["tokens reach their experts by NCCL's all-to-all"]
        words += [", a copy per expert across nodes"] if across else []
        words += [", the rows a rank receives sorted by its experts"] if sorts else []
        return "".join(words) + " (--moe-dispatch per-node: DeepEP, HybridEP)"
    words = ["tokens reach their experts as DeepEP and HybridEP send them (--moe-dispatch per-node)"]
    words += [": a copy per node across nodes, forwarded over NVLink there"] if across else []
    words += [", " if across else ": ", "permuted once on arrival"] if sorts else []
    return "".join(words)


def family_name(run) -> str:
    """'A100', 'H100': the first word of a published run's GPU name."""
    return run.cluster.gpu.name.split()[0]

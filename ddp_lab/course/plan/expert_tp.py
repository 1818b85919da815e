"""Expert tensor parallelism (ETP): routed experts split over a tensor-parallel size of their own.

Megatron-Core's --expert-tensor-parallel-size (`expert_tp`; by default the attention's tp) lets a MoE layer's
routed experts be split etp ways while attention stays split tp ways. Within a pipeline stage the tp x cp x dp ranks
are laid out again for the experts, etp fastest (Megatron-Core's expert rank order tp-ep-dp; its
`RankGenerator` for the expert grid):

    etp     ranks that split each expert's FFN (column- then row-parallel, as the dense FFN): consecutive ranks
    ep      ranks that share out the experts, E/ep each: etp apart
    edp     the tp x cp x dp / (etp x ep) ranks that hold the same experts (their gradients are reduced, and ZeRO
            shards them, over these): etp x ep apart

With etp = tp this is the layout of ddp_lab.course.rank_layout (ep carved out of the dp x cp ranks, tp apart).
A smaller etp (etp = 1 for Mixtral-style experts on tp = 4, say) leaves more ranks to split the experts: ep may
grow to tp x cp x dp / etp, and each expert's GEMMs are etp times wider per rank on tp / etp times fewer tokens.
The planner takes etp dividing tp; what it changes:

    memory      a rank holds E/ep experts, each split etp ways (experts.layer_change_per_rank), ZeRO over edp
    GEMMs       the routed experts' inner width f_e / etp; tokens per expert b s / cp x top_k x ep x etp / (E tp)
                (expert_compute.tokens_per_expert); per rank the FLOPs are those of etp = tp
    all-to-all  over the ep group (size ep, stride etp), of the tokens a rank dispatches (experts.dispatched_tokens,
                which it also permutes): with sequence parallelism its s / tp slice, without it etp / tp of the
                tokens, the tp ranks' copies shared out among their tp / etp expert groups
    gather      with sequence parallelism and etp > 1 the copies an etp group received are all-gathered over it
                before the experts' GEMMs and reduce-scattered after them (experts.expert_tp_gather_seconds): top_k
                x etp / tp times the bytes of a dense FFN's all-gather, which a MoE layer does not run unless it
                has shared experts (steptime.moe_layer_tp_change)

Introduced in notebooks/14-mixture-of-experts.ipynb (the planner: notebooks/13-plan-your-training-run.ipynb).
"""

from __future__ import annotations

from ddp_lab.course.rank_layout import Group


def size(strategy) -> int:
    """The experts' tensor-parallel size: `strategy.expert_tp`, or the attention's tp when not given."""
    return strategy.tp if strategy.expert_tp is None else strategy.expert_tp


def token_share(strategy) -> float:
    """The share of its tensor-parallel group's tokens a rank's experts multiply: etp / tp (the tp / etp expert groups
    of a tp group share the tokens out; with etp = tp, all of them). expert_compute.tokens_per_expert's rows and the
    experts' saved inputs (experts.activation_change) are this share of the micro-batch's top_k copies."""
    return size(strategy) / strategy.tp


def grid(strategy) -> int:
    """Ranks of one pipeline stage the experts are laid out over, less their tensor split: tp x cp x dp / etp."""
    return strategy.tp * strategy.cp * strategy.dp // size(strategy)


def group(strategy, axis: str) -> Group:
    """The "etp", "ep" or "edp" group of the expert grid (module docstring): its size and stride in global ranks.

    Example:
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> group(Strategy(dp=2, tp=4, ep=8, expert_tp=1), "ep"), group(Strategy(dp=2, tp=4, ep=2), "ep")
        (Group(size=8, stride=1), Group(size=2, stride=4))
    """
    etp, ep = size(strategy), strategy.ep
    if axis == "etp":
        return Group(etp, 1, world=strategy.gpus)
    if axis == "ep":
        return Group(ep, etp, world=strategy.gpus)
    if axis == "edp":
        return Group(grid(strategy) // ep, etp * ep, world=strategy.gpus)
    raise ValueError(f"axis must be 'etp', 'ep' or 'edp', got {axis!r}")


def check_fields(strategy) -> None:
    """Raise ValueError (saying the fix) unless expert_tp divides tp and ep divides the expert grid."""
    etp = strategy.expert_tp
    if etp is None:
        if (strategy.dp * strategy.cp) % strategy.ep:
            raise ValueError(f"ep={strategy.ep} does not divide dp x cp = {strategy.dp} x {strategy.cp} = "
                             f"{strategy.dp * strategy.cp}: expert-parallel ranks are carved out of the data- and "
                             f"context-parallel ranks; use ep in {_divisors(strategy.dp * strategy.cp)[:10]} "
                             f"(or a smaller expert_tp, which leaves more ranks for ep)")
        return
    if isinstance(etp, bool) or not isinstance(etp, int) or etp < 1:
        raise ValueError(f"Strategy.expert_tp must be an integer >= 1 (or None: the attention's tp), got {etp!r}")
    if strategy.tp % etp:
        raise ValueError(f"expert_tp={etp} does not divide tp={strategy.tp}: the experts' tensor-parallel ranks are "
                         f"taken from the attention's; use expert_tp in {_divisors(strategy.tp)}")
    if grid(strategy) % strategy.ep:
        raise ValueError(f"ep={strategy.ep} does not divide tp x cp x dp / expert_tp = {strategy.tp} x {strategy.cp} x "
                         f"{strategy.dp} / {etp} = {grid(strategy)}, the ranks that can split the experts; use ep in "
                         f"{_divisors(grid(strategy))[:10]}")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]

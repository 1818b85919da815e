"""Expert parallelism's all-to-alls beside another micro-batch's compute: what Megatron-Core's combined 1F1B leaves
exposed.

Without overlap each MoE layer waits for its token dispatch and combine (experts.all_to_all_time: two
all-to-alls forward, two backward, all exposed). With `Strategy(ep_overlap=True)` (Megatron-Core's
--overlap-moe-expert-parallel-comm, "combined 1F1B"; its documentation, "Combined 1F1B: Expert-Parallel
All-to-All Overlap", and the combined_1f1b schedules) the forward of one micro-batch and the backward of
another run as one merged step, layer by layer: the forward's all-to-alls run while the backward's attention
and expert GEMMs compute, and the backward's while the forward's compute. Per MoE layer and pair the planner
leaves exposed what the other pass's compute of that layer does not cover,

    exposed = max(0, A_f - B) + max(0, A_b - F),

A_f and A_b the layer's forward and backward all-to-alls (dispatch and combine, experts.dispatch_seconds),
F and B its forward and backward compute with its experts (efficiency.layer_seconds plus
expert_compute.layer_compute_change). Only micro-batches of the schedule's steady phase pair. Without
pipelining the first forward and the last backward run alone, one of m; on the interleaved pipeline (which
Megatron-Core requires for this overlap when pp > 1) the first stage's warm-up forwards and cool-down
backwards do, 2(p - 1) + (v - 1)p + 1 of its m v chunks (Megatron-Core's warm-up count for rank 0, and the
one extra forward it schedules under this overlap so that every 1F1B pair is independent); those run their
all-to-alls exposed. The busiest stage's MoE layers are taken with the first stage's share of lone passes. The
hidden seconds slow the compute beside them by the overlap slowdown, as every hidden collective does
(overlap.py); on CPU ranks (`ClusterSpec.overlap_dp_comm=False`) nothing hides. Megatron-Core refuses the overlap
under full recomputation and for an fp32 model (Strategy's checks). Not modelled: delay_wgrad_compute (the expert
weight-gradient GEMMs moved to cover the backward's combine) and the SMs the dispatcher's kernels take.

Introduced in notebooks/13-plan-your-training-run.ipynb (the planner; expert parallelism is lesson 14's).
"""

from __future__ import annotations

from ddp_lab.course.plan import experts


def unpaired_share(strategy) -> float:
    """The share of a stage's micro-batch passes that run alone, their all-to-alls exposed: one of m without
    pipelining, the first stage's warm-up chunks (2(p - 1) + (v - 1)p + 1) of its m v on the interleaved pipeline.

    Example:
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> unpaired_share(Strategy(dp=8, ep=8, grad_accum=4))
        0.25
        >>> round(unpaired_share(Strategy(dp=8, pp=4, ep=8, grad_accum=240, schedule="interleaved",
        ...                               virtual_stages=4)), 6)               # 19 of 960
        0.019792
    """
    p, v, m = strategy.pp, strategy.virtual_stages, strategy.grad_accum
    warmup = 1 if p == 1 else 2 * (p - 1) + (v - 1) * p + 1
    return min(1.0, warmup / (m * v))


def step_seconds(model, cluster, strategy, layer, moe_change: tuple[float, float]) -> tuple[float, float]:
    """(exposed, hidden) seconds per step of the all-to-alls on the most loaded pipeline stage under ep_overlap (the
    module docstring); `layer` a dense layer's work on one rank (efficiency.layer_seconds, per context rank) and
    `moe_change` what a MoE layer's experts add to its (forward, backward). Without ep_overlap, or where nothing
    hides (CPU ranks), all of experts.all_to_all_time is exposed.

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> from ddp_lab.course.plan.efficiency import layer_seconds
        >>> from ddp_lab.course.plan.expert_compute import layer_compute_change
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> moe = Transformer.preset("deepseek-moe-16b").with_(seq_len=4096)
        >>> h100s = ClusterSpec.preset("h100-sxm", nodes=2)
        >>> plain = Strategy(dp=16, ep=16, micro_batch=1, grad_accum=32, zero=1)
        >>> layer, change = layer_seconds(moe, plain, h100s.gpu), layer_compute_change(moe, plain, h100s.gpu)
        >>> exposed, hidden = step_seconds(moe, h100s, plain.with_(ep_overlap=True), layer, change)
        >>> round(exposed + hidden, 9) == round(experts.all_to_all_time(moe, h100s, plain), 9), exposed < hidden
        (True, True)
    """
    total = experts.all_to_all_time(model, cluster, strategy)
    if not strategy.ep_overlap or total == 0.0 or not cluster.overlap_dp_comm:
        return total, 0.0
    one = experts.dispatch_seconds(model, cluster, strategy)
    forward_a2a = backward_a2a = 2 * one                       # dispatch and combine, each pass
    forward, backward = layer.forward + moe_change[0], layer.backward + moe_change[1]
    paired = max(0.0, forward_a2a - backward) + max(0.0, backward_a2a - forward)
    alone = forward_a2a + backward_a2a
    unpaired = unpaired_share(strategy)
    per_layer = unpaired * alone + (1 - unpaired) * paired
    exposed = strategy.grad_accum * experts.busiest_stage_moe_layers(model, strategy) * per_layer
    return exposed, total - exposed

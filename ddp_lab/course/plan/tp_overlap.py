"""Tensor-parallel communication beside the GEMMs: what Megatron-LM's --tp-comm-overlap leaves exposed.

With sequence parallelism (Korthikanti et al. 2022, arXiv:2205.05198, Sec. 4.2.2) each of Megatron's
f and g (lesson 08) is an all-gather before a column-parallel GEMM and a reduce-scatter after a
row-parallel one: per layer and micro-batch, forward,
    all-gather  -> QKV GEMM              reduce-scatter <- attention output GEMM
    all-gather  -> FFN up (gate) GEMM    reduce-scatter <- FFN down GEMM
(latent attention's first all-gather carries its latents, beside its up-projections: latent_attention.py)
and backward the mirror image: the all-gather of the output gradient before the row-parallel
GEMMs' input gradient, the reduce-scatter of the column-parallel GEMMs' input gradient beside their
weight gradient. Without overlap each waits for the other (steptime's tp_comm). With
`Strategy(tp_comm_overlap=True)` (Megatron-LM's --tp-comm-overlap, Transformer Engine's
userbuffers; NeMo's Communication Overlap guide) a collective the GEMM depends on, or that depends
on the GEMM, runs "pipelined": in tp chunks, one chunk's transfer beside another chunk's GEMM
(`overlap.chunked_exposed`), so one chunk stays exposed, and so does whatever the collective takes
beyond its GEMM (a slow link, a small GEMM). One with no dependency on the GEMM beside it (the
reduce-scatter of a column-parallel layer's input gradient beside its weight gradient) runs "bulk":
only what outlasts the GEMM shows.
The all-reduces outside the layers (the vocab-parallel embedding and cross-entropy) are not
overlapped. The hidden part costs the overlap slowdown like any communication compute hides
(overlap.OVERLAP_SLOWDOWN); on CPU ranks (gloo, `ClusterSpec.overlap_dp_comm=False`) nothing hides.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from ddp_lab.course.plan import latent_attention
from ddp_lab.course.plan.efficiency import (attention_gemms, ffn_gemms, gemm_seconds, recompute_skips_last_gemm,
                                            recomputed_gemm_seconds)
from ddp_lab.course.plan.op_checkpoint import recomputed_tp_collectives
from ddp_lab.course.plan.overlap import chunked_exposed


def layer_exposed(model, cluster, strategy, one: float) -> tuple[float, float]:
    """(forward, backward) exposed seconds of one layer's TP collectives per micro-batch under tp_comm_overlap.

    `one`: one all-reduce of the layer's b s h activations on the tp group; with sequence parallelism
    an all-gather or a reduce-scatter takes half of it (the ring's two halves, lesson 02). The backward
    includes a full recomputation's forward collectives (less the FFN down projection's reduce-scatter
    where PyTorch's checkpoint stops early, efficiency.recompute_skips_last_gemm), and per-op checkpointing's
    two all-gathers (op_checkpoint.recomputed_tp_collectives), each chunked beside the one GEMM re-run after it
    (K, and the FFN's up projection: Q, V and the gate projection come from the saved outputs).

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> llama, h100 = Transformer.preset("llama3-70b"), ClusterSpec.preset("h100-sxm")
        >>> plain = Strategy(dp=1, tp=8, sequence_parallel=True)
        >>> forward, backward = layer_exposed(llama, h100, plain.with_(tp_comm_overlap=True), 1e-3)
        >>> forward < 1e-3 and backward < 1e-3     # without overlap: 2 ms each way (2 all-gathers + 2 reduce-scatters)
        True
    """
    parts, last = _exposed_parts(model, cluster, strategy, one)
    forward = sum(part[0] for part in parts.values())
    backward = sum(part[1] for part in parts.values())
    if strategy.recompute == "full":
        backward += forward - (last if recompute_skips_last_gemm(model, strategy) else 0.0)
    return forward, backward


def ffn_exposed(model, cluster, strategy, one: float) -> tuple[float, float]:
    """(forward, backward) exposed seconds of the FFN's share of `layer_exposed`: its all-gather before the up
    projection and reduce-scatter after the down projection, and their mirror pair backward (with per-op
    checkpointing's all-gather again), without full recomputation's forward again. What a MoE layer without shared
    experts does not run (steptime.moe_layer_tp_change).

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    return _exposed_parts(model, cluster, strategy, one)[0]["ffn"]


def _exposed_parts(model, cluster, strategy, one: float) -> tuple[dict, float]:
    """The exposed seconds of one layer's TP collectives by block, {"attention": (forward, backward), "ffn": (...)},
    backward without full recomputation's forward again; and the FFN's reduce-scatter's exposed forward seconds (what
    a recomputation that stops early skips)."""
    rate = cluster.gpu.achieved_flops(strategy.precision)
    half = one / 2
    _, column, out = attention_gemms(model, strategy)       # the GEMMs beside the attention's collectives
    up, down = ffn_gemms(model, strategy)
    first = half * latent_attention.tp_input_share(model)   # the all-gather in front of attention (latents: less)
    t = strategy.tp
    forward_each = [chunked_exposed(first, sum(gemm_seconds(flops, k, rate) for flops, k, _ in column), t),
                    *(chunked_exposed(half, gemm_seconds(flops, k, rate), t) for flops, k, _ in (out, up, down))]
    # backward: the reduce-scatters of the column-parallel GEMMs' input gradients beside their weight gradients (bulk),
    # the all-gathers of the output gradient before the row-parallel GEMMs' input gradients (pipelined)
    weight_grads = (sum(flops for flops, _, _ in column) / rate, up[0] / rate)
    input_grads = [gemm_seconds(flops, k_grad, rate) for flops, _, k_grad in (out, down)]
    backward_each = [max(0.0, size - gemm) + chunked_exposed(half, input_grad, t)
                     for size, gemm, input_grad in zip((first, half), weight_grads, input_grads)]
    if recomputed_tp_collectives(strategy):    # per-op checkpointing re-runs the all-gathers before QKV and FFN up,
        again = recomputed_gemm_seconds(model, strategy, rate)                        # beside K and up, re-run
        backward_each = [each + chunked_exposed(half, again[name], t) for each, name in zip(backward_each, ("k", "up"))]
    parts = {"attention": (forward_each[0] + forward_each[1], backward_each[0]),
             "ffn": (forward_each[2] + forward_each[3], backward_each[1])}
    return parts, forward_each[3]

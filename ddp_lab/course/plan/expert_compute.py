"""The compute of a mixture-of-experts layer on one GPU: grouped expert GEMMs, the router, token permutation.

experts.py counts a MoE model's parameters, state and all-to-alls (lesson 14); this module times what its layers
compute on a GPU, by mechanism rather than by FLOP count, so that many small experts cost more than their FLOPs.

Introduced in notebooks/14-mixture-of-experts.ipynb (the planner's model: notebooks/13-plan-your-training-run.ipynb).
"""

from __future__ import annotations

from ddp_lab.course.plan import expert_tp
from ddp_lab.course.plan.efficiency import gemm_seconds
from ddp_lab.course.plan.experts import (busiest_rank_load, busiest_stage_moe_layers, dispatched_tokens,
                                         forward_flops_change, inner_width_change, router_parameters,
                                         routed_forward_flops, sorts_received_rows)
from ddp_lab.course.plan.precision import cast_bytes, compute_precision, fp8_matmuls, linear_rate
from ddp_lab.course.plan.traffic import activation_function_bytes

# Expert matmuls run as grouped GEMMs (one GEMM per local expert, launched together: MegaBlocks, Gale et al. 2023,
# arXiv:2211.15841, Sec. 5; Megatron-Core's --moe-grouped-gemm; DeepGEMM's "m-grouped" kernels). Each expert's GEMM
# is costed as the dense ones (efficiency.gemm_seconds: the long-GEMM rate and the per-tile cost amortised over k)
# plus what a small GEMM cannot hide: every expert reads its whole weight from HBM once per GEMM, however few tokens
# it got (`WEIGHT_READS`), so with m tokens per expert the time is
#     2 m n k / rate x (1 + TILE_K / k)  +  n k x bytes / bandwidth
# and the efficiency falls with the tokens per expert (m) and the expert's size (n, k). The weight-gradient GEMM
# reduces over the expert's m tokens: a few tokens per expert pay the tile cost there too. Checked against DeepGEMM's
# published FP8 GEMMs on an H800 (deepseek-ai/DeepGEMM README, first release, table "Normal GEMMs for dense
# models", M = 64, 128 against 4096 at six (N, K)): fitted on each shape's M = 4096 row only, the M = 64 and 128
# rows come out within -17 % to +14 %, except N = 2112 (+37 %, +50 %: 17 tiles of N leave SMs idle, which the model
# leaves out); tests/test_plan_mechanics.py.
WEIGHT_READS_FORWARD = 1    # the forward GEMM reads W
WEIGHT_READS_BACKWARD = 2   # the input gradient reads W, the weight gradient writes dW


def tokens_per_expert(model, strategy) -> float:
    """Tokens each local expert multiplies per micro-batch: b s / cp x top_k x ep / E (x etp / tp) with balanced
    routing, times experts.busiest_rank_load on the busiest expert-parallel rank, whose experts set the pace.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> tokens_per_expert(Transformer.preset("mixtral-8x7b").with_(seq_len=4096), Strategy(dp=8, ep=8))
        8192.0

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    moe = model.moe
    balanced = (strategy.micro_batch * model.seq_len / strategy.cp * moe.top_k * strategy.ep / moe.experts
                * expert_tp.token_share(strategy))
    return balanced * busiest_rank_load(strategy)


def _ffn_seconds(tokens: float, width: int, groups: int, model, strategy, gpu, stream_weights: bool) -> tuple:
    """(forward, backward) seconds of `groups` FFNs of inner size `width` (this rank's split), `tokens` each."""
    ups = 2 if model.ffn_kind == "swiglu" else 1
    h, rate, bandwidth = model.hidden, linear_rate(gpu, strategy), gpu.memory_bandwidth
    weight_bytes = 1 if fp8_matmuls(strategy) else (2 if strategy.mixed else 4)
    forward = backward = 0.0
    for k, n in ((h, ups * width), (width, h)):                      # (tokens, h) @ (h, ups f); (tokens, f) @ (f, h)
        flops = 2 * tokens * k * n
        cast_forward, cast_backward = cast_bytes(tokens, k, n, strategy)
        streamed = k * n * weight_bytes / bandwidth if stream_weights else 0.0
        forward += groups * (gemm_seconds(flops, k, rate) + WEIGHT_READS_FORWARD * streamed + cast_forward / bandwidth)
        backward += groups * (gemm_seconds(flops, n, rate) + gemm_seconds(flops, max(1, int(tokens)), rate)
                              + WEIGHT_READS_BACKWARD * streamed + cast_backward / bandwidth)
    return forward, backward


def router_seconds(model, strategy, gpu) -> tuple[float, float]:
    """(forward, backward) seconds of one MoE layer's router on one rank: the gate GEMM and softmax/top-k.

    The gate is a (tokens, h) @ (h, E) GEMM in bf16 (FP8 training leaves it in bf16: precision.py); its input
    gradient reduces over only E, so it pays the tile cost. Softmax and top-k are memory-bound on the fp32 logits:
    forward reads the logits, writes the probabilities and reads them for the top-k (3 x 4 E bytes per token) and
    writes top_k indices and weights (8 + 4 bytes each); backward reads and writes the probabilities' gradient
    and the saved probabilities (3 x 4 E). With sequence parallelism each tp rank routes its s/tp tokens.
    """
    experts_, top_k, h = model.moe.experts, model.moe.top_k, model.hidden
    tokens = strategy.micro_batch * model.seq_len / strategy.cp / (strategy.tp if strategy.sequence_parallel else 1)
    rate = gpu.achieved_flops(compute_precision(strategy))
    flops = 2 * tokens * router_parameters(model)      # h x E, and a shared_gate's column
    softmax = tokens * (3 * 4 * experts_ + 12 * top_k) / gpu.memory_bandwidth
    forward = gemm_seconds(flops, h, rate) + softmax
    backward = gemm_seconds(flops, experts_, rate) + flops / rate + tokens * 3 * 4 * experts_ / gpu.memory_bandwidth
    return forward, backward


def permutation_seconds(model, strategy, gpu) -> tuple[float, float]:
    """(forward, backward) seconds of sorting tokens to their experts and back on one rank: memory-bound copies.

    Forward: permute reads the hidden states of the tokens the rank dispatches (experts.dispatched_tokens: its
    b s / cp, its s / tp slice of them with sequence parallelism) and writes top_k copies, grouped by expert;
    unpermute reads the top_k expert outputs and writes their weighted sum: 2 (1 + top_k) values of h per token.
    Backward: the same copies for the gradients, and the gate weights' gradient reads the top_k expert outputs
    again: 2 (1 + top_k) + top_k. (Megatron-Core's `moe_permute`/`moe_unpermute`, torchtitan's token reorderer.)
    With NCCL's all-to-all a rank holding several experts then sorts the rows it received by local expert and back
    before the combine (experts.sorts_received_rows): each sort reads and writes every received row
    (tokens_per_expert x E/ep, the expert TP group's rows where they were gathered), forward and again backward.
    """
    width = model.hidden * (2 if strategy.mixed else 4) / gpu.memory_bandwidth
    value = dispatched_tokens(model, strategy) * width
    top_k = model.moe.top_k
    sorts = (4 * tokens_per_expert(model, strategy) * (model.moe.experts // strategy.ep) * width
             if sorts_received_rows(model, strategy) else 0.0)
    return 2 * (1 + top_k) * value + sorts, (2 * (1 + top_k) + top_k) * value + sorts


def expert_activation_seconds(model, strategy, gpu) -> tuple[float, float]:
    """(forward, backward) seconds of one MoE layer's expert activations (SwiGLU or GeLU) on one rank, over the
    dense FFN's that efficiency.layer_seconds already charged: memory-bound, traffic.activation_function_bytes per
    token and unit of width, over the width a token's routed and shared experts span beyond the dense FFN
    (experts.inner_width_change, its routed part the busiest expert-parallel rank's), split as the dense FFN's
    activation is: by tp, the sequence by cp. (The routed experts' rows on a rank, tokens_per_expert x E/ep, each
    expert_ffn/etp wide, come to the same b s/cp x top_k x load x expert_ffn/tp.) So a token routed to top_k experts
    moves top_k expert widths: gpt-oss's 4 experts of 2,880 four times its config's FFN width of 2,880, Qwen3-30B-A3B's
    8 of 768 as much as its 6,144.
    """
    tokens = strategy.micro_batch * model.seq_len / strategy.cp
    widths = tokens * inner_width_change(model, busiest_rank_load(strategy)) / strategy.tp
    forward, backward = activation_function_bytes(model, strategy)
    return forward * widths / gpu.memory_bandwidth, backward * widths / gpu.memory_bandwidth


def layer_compute_change(model, strategy, gpu) -> tuple[float, float]:
    """(forward, backward) seconds one MoE layer adds on one rank over the dense FFN layer_seconds already charged.

    The MoE layer: E/ep routed experts' grouped GEMMs on `tokens_per_expert` tokens each (split by tp like the
    dense FFN), the shared experts as one FFN over every token, the routed and shared experts' activations
    (`expert_activation_seconds`: over the dense FFN's), the router and the permutation; minus the dense FFN's
    GEMMs (and FP8 casts) that efficiency.layer_seconds counted for this layer.
    """
    moe, tp = model.moe, strategy.tp
    tokens = strategy.micro_batch * model.seq_len / strategy.cp
    routed = _ffn_seconds(tokens_per_expert(model, strategy), moe.expert_ffn // expert_tp.size(strategy),
                          moe.experts // strategy.ep,
                          model, strategy, gpu, stream_weights=True)
    shared = (_ffn_seconds(tokens, moe.shared_experts * moe.expert_ffn // tp, 1, model, strategy, gpu, True)
              if moe.shared_experts else (0.0, 0.0))
    dense = _ffn_seconds(tokens, model.ffn_ // tp, 1, model, strategy, gpu, stream_weights=False)
    router, permutation = router_seconds(model, strategy, gpu), permutation_seconds(model, strategy, gpu)
    activation = expert_activation_seconds(model, strategy, gpu)
    return tuple(routed[i] + shared[i] + activation[i] + router[i] + permutation[i] - dense[i] for i in range(2))


def seconds_per_micro_batch(model, cluster, strategy, layer_change: tuple[float, float] | None = None) -> float:
    """Seconds per micro-batch the MoE layers add to (or take from) a dense stage's compute on one GPU.

    On GPUs (an HBM figure): the slowest pipeline stage's MoE layers x `layer_compute_change` (forward, backward,
    and the forward again under full recomputation; `layer_change`: that change, where the caller has it). On CPU
    ranks (no HBM figure): the FLOPs a token's experts add
    (`forward_flops_change`) at the measured rate, shared by the tp x pp x cp ranks, as their dense FLOPs are, and
    the routed experts' FLOPs again for the busiest expert-parallel rank's extra share (busiest_rank_load - 1).

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    if model.moe is None:
        return 0.0
    change, load = forward_flops_change(model), busiest_rank_load(strategy)
    if load != 1:                                # the busiest rank's extra share of the routed experts' FLOPs
        change += (load - 1) * routed_forward_flops(model)
    passes = 3 + (1 if strategy.recompute == "full" else 0)
    gpu = cluster.gpu
    if gpu.memory_bandwidth is None:
        share = strategy.tp * strategy.pp * strategy.cp
        return strategy.micro_batch * change * passes / share / gpu.achieved_flops(strategy.precision)
    forward, backward = layer_compute_change(model, strategy, gpu) if layer_change is None else layer_change
    layers = busiest_stage_moe_layers(model, strategy)
    return layers * (forward * strategy.forward_runs + backward)

"""Time of one optimizer step: compute, tensor-parallel communication, pipeline bubble, DP communication.

FLOPs (Narayanan et al. 2021, arXiv:2104.04473, Sec. 5.1 / Appendix). A matmul (m x k) @ (k x n)
costs 2mkn FLOPs. Per sequence of s tokens a layer's forward pass multiplies by every weight
matrix once (2 s P_matmul FLOPs, P_matmul = 12h^2 for GPT) and computes the scores QK^T and the
weighted values (2 s^2 (d_q + d_v): d_q = heads x head_dim = h unless head_size is given, d_v = d_q but with latent
attention's narrower values); the head adds 2 s h V. Backward costs twice the forward. So,
for B sequences, l layers and a GPT shape,
    F = 72 B s l h^2 (1 + s/(6h) + V/(12 l h))       without recomputation (= "model FLOPs")
    F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))       full recomputation (one more layer forward)
the second being the formula Megatron-LM reports TFLOP/s with. Selective recomputation adds
only the attention-score forward (4 B s^2 h per layer; Korthikanti et al. 2022, Sec. 5).
This module sums the same terms for any shape (GQA, SwiGLU), so it reduces to those formulas.
These are the FLOPs MFU and the papers' TFLOP/s count; the time of the step (efficiency.py)
also knows what they leave out: FlashAttention's causal skipping and recomputation, and the
memory-bound kernels between the matmuls.

Time (seconds per step), on the rank that finishes last:
    compute     per micro-batch, the slowest pipeline stage's work - its layers, and on the last
                stage the head (output layer and cross-entropy) - each timed by efficiency.py (GEMMs at the GPU's peak x its generation's calibrated efficiency,
                elementwise work at HBM bandwidth, flash or eager attention, recomputation),
                times the micro-batches, plus Adam's memory-bound step. On CPU ranks (no HBM
                figure) every FLOP runs at the measured rate x the calibrated step efficiency,
                and TP ranks repeat the measured elementwise share (`GPU.elementwise_share`)
    bubble      the pipeline's compute x (p - 1)/(v m): a fraction (p - 1)/(m + p - 1) of its
                time (lesson 07; GPipe and 1F1B alike; the interleaved schedule divides by v).
                With more CPU ranks than cores none: the compute rate measured with every rank
                computing already shares the cores, and a stage that waits leaves its core to
                another stage's work (measured here: 1F1B on 2 ranks pinned to 1 core took its
                predicted compute time, no bubble)
    tp_comm     per layer and micro-batch 2 all-reduces of b s h values forward and 2 backward
                (Megatron's f and g, lesson 08; with full recomputation 2 more, per-op 1), on the tp group;
                sequence parallelism swaps each for an all-gather + reduce-scatter of the same
                bytes: the same ring time. Per micro-batch, the vocab-parallel ends add one
                all-reduce of b s h after the word embedding (first stage), one of the head's
                input gradient and three of b s fp32 values in the cross-entropy (max, target
                logit, sum of exponentials; last stage). Not overlapped, unless tp_comm_overlap
                (Megatron-LM's --tp-comm-overlap) runs each layer's collectives in chunks beside
                their GEMMs: then only what tp_overlap.py finds exposed counts, and the part hidden
                pays the overlap slowdown below. A MoE layer with sequence parallelism runs no dense
                FFN's collectives (unless shared experts do) and gathers the copies its experts
                received over an expert TP of 2 or more (`moe_layer_tp_change`).
    pp_comm     2 m v sends of one micro-batch's activations (b s h / t values per GPU with the
                scatter/gather of Narayanan Sec. 4.1), on the pp group's link. Not overlapped.
    dp_comm     ZeRO 0: all-reduce of the gradients; 1, 2: reduce-scatter + all-gather (the same
                bytes, ZeRO paper Sec. 7), ZeRO 2 reduce-scattering its sharded gradients in every
                micro-batch (DeepSpeed's stage 2, FSDP2 without resharding: dp_sync.py); 3: per
                micro-batch, all-gather the weights twice (forward, backward) and reduce-scatter the
                gradients (1.5x, ZeRO Sec. 7.2.2), one unit at a time: per layer and then the rest
                (fsdp_unit="layer", as FSDP is wrapped in lesson 09), or the whole model at once
                (fsdp_unit="model").
                Exposed (dp_sync.py): ZeRO 0-2 reduce bucket by bucket during the last
                micro-batch's backward (Megatron-Core's buckets; ZeRO 2 a unit at a time during every
                micro-batch's),
                the last bucket shown, and ZeRO-1/2 gather the updated weights after the optimizer
                (exposed) or, with overlap_param_gather, beside the next forward; ZeRO 3 unit by unit
                (overlap.py): each gather behind the unit before it, each scatter behind the units
                after it, the first gathers and the last scatters exposed; one unit for the whole
                model hides nothing. Where DP and TP
                share a link, DP's transfers take longer by the share of time TP's collectives
                hold it. On a cluster with overlap_dp_comm=False (this machine: gloo copies bytes
                with the cores that compute) all of it is exposed.
    `dp_comm` in the breakdown is all of it (stretched as the exposed part is, where TP shares its link); only
    `dp_comm_exposed` adds to the step (and the
    overlap slowdown below, for the part compute hides). With DiLoCo replicas (outer_sync.py)
    this is the sync inside one replica.
    outer_sync  DiLoCo replicas' pseudo-gradient all-reduce, once every sync_every steps, blocking:
                1/sync_every of it per step (outer_sync.py).
    overlap_slowdown  what hiding costs: compute beside a collective runs the cluster's
                `overlap_slowdown` (by default OVERLAP_SLOWDOWN, 18.9 %, published: overlap.py)
                slower, so every second of DP or CP communication that compute hides adds 0.189 s.
                Not on CPU ranks (gloo does not overlap).
    ep_comm     expert parallelism's all-to-alls, 4 per MoE layer and micro-batch, not overlapped
                (experts.py, lesson 14), unless ep_overlap runs them beside another micro-batch's
                compute (ep_overlap.py: what stays exposed). Expert gradients sync over their own,
                smaller group.
    cp_comm     context parallelism's ring of key/value blocks, each send beside one ring step's
                causal attention; only its exposed part is in the total, and the overlap slowdown
                of the part attention hides (context_parallel.py, lesson 15). With cp ranks a
                micro-batch's activations, and so the TP and PP messages, hold s/cp tokens, and
                each rank does 1/cp of a layer's work.
FLOPs of a mixture-of-experts model count the experts a token uses (top_k routed + shared), so
MFU counts active parameters; their time is expert_compute.py's: grouped GEMMs, router, permutation.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddp_lab.course.plan import (context_parallel, ep_overlap, expert_compute, experts, hybrid_shard, latent_attention,
                                 op_checkpoint, outer_sync, pipeline_stages, tp_overlap)
from ddp_lab.course.plan.activations import value_bytes
from ddp_lab.course.plan.collectives import collective_time
from ddp_lab.course.plan.efficiency import head_seconds, layer_seconds, recompute_skips_last_gemm
from ddp_lab.course.plan.dp_sync import (_dp_shares_tp_link, dp_communication, fsdp_units,  # noqa: F401 (re-exported)
                                         zero3_exposed, zero12_exposed)
from ddp_lab.course.plan.op_checkpoint import recomputed_flops
from ddp_lab.course.plan.optimizer_step import optimizer_parameters, optimizer_seconds
from ddp_lab.course.plan.overlap import overlap_slowdown, stretch
from ddp_lab.course.plan.precision import compute_precision   # MFU of an FP8 run: against the bf16 peak
from ddp_lab.course.plan.sliding_window import attended_keys


@dataclass(frozen=True)
class TimeBreakdown:
    """Seconds per optimizer step, by where they go.

    `dp_comm` is all the step's data-parallel communication; only `dp_comm_exposed`, the part
    that compute does not hide, adds to `total`. Their difference is what overlap saves: how
    close ZeRO-3's gathers come to the compute that hides them. Hiding costs `overlap_slowdown`
    (the compute beside a collective runs slower: overlap.OVERLAP_SLOWDOWN), which is in `total`.

    Example:
        >>> t = TimeBreakdown(compute=1.0, tp_comm=0.1, bubble=0.2, dp_comm_exposed=0.05, dp_comm=0.8)
        >>> t.total, t.dp_comm - t.dp_comm_exposed     # 0.75 s of DP communication hidden under compute
        (1.35, 0.75)

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    compute: float
    tp_comm: float
    bubble: float
    dp_comm_exposed: float
    dp_comm: float                # before overlap; not part of total (its hidden part: overlap_slowdown)
    pp_comm: float = 0.0
    ep_comm: float = 0.0          # expert parallelism's all-to-alls, exposed (all of them unless ep_overlap)
    cp_comm_exposed: float = 0.0  # the part of the context-parallel ring compute does not hide
    cp_comm: float = 0.0          # the ring's sends before overlap; not part of total (as dp_comm)
    overlap_slowdown: float = 0.0  # compute slowed by the communication it hides (overlap.overlap_slowdown)
    outer_sync: float = 0.0       # DiLoCo replicas' pseudo-gradient all-reduce, per step (1/H of one; outer_sync.py)
    tp_comm_hidden: float = 0.0   # TP communication chunked beside the GEMMs (tp_comm_overlap); not part of total
    ep_comm_hidden: float = 0.0   # all-to-alls beside another micro-batch's compute (ep_overlap); not part of total

    @property
    def total(self) -> float:
        return (self.compute + self.tp_comm + self.bubble + self.dp_comm_exposed + self.pp_comm
                + self.ep_comm + self.cp_comm_exposed + self.overlap_slowdown + self.outer_sync)


def layer_forward_flops(model) -> int:
    """Forward FLOPs of one dense layer for one sequence: 2 s P_matmul + 2 s^2 (d_q + d_v) (24 s h^2 + 4 s^2 h for GPT).

    A model with a sliding window counts s x the mean keys a query may see over its layers instead of s^2
    (sliding_window.attended_keys: the window in a windowed layer).

    d_q = heads x head_dim, the width QK^T runs at (= h unless head_size says otherwise: Qwen3-30B-A3B's 32 heads
    of 128 on a hidden size of 2048 give 4096), d_v = model.o_dim the width of the weighted values (= d_q but with
    latent attention: DeepSeek-V3's 128 heads of 192 and 128). A MoE layer's differ by 2 s x (active MoE
    matmul parameters - the dense FFN's): experts.forward_flops_change.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> gpt = Transformer("t", layers=1, hidden=256, heads=4, vocab=512, seq_len=128)
        >>> layer_forward_flops(gpt) == 24 * 128 * 256**2 + 4 * 128**2 * 256
        True
    """
    s = model.seq_len
    return 2 * s * model.layer_matmul_parameters() + 2 * s * attended_keys(model) * (model.q_dim + model.o_dim)


def step_flops(model, strategy, hardware: bool = True) -> int:
    """FLOPs of one optimizer step over the global batch.

    hardware=False: model FLOPs (forward + backward = 3 forwards, no recomputation), what MFU
    counts. hardware=True: plus what recomputation repeats (full: a layer forward, less the FFN's
    down projection where PyTorch's checkpoint stops early, efficiency.recompute_skips_last_gemm;
    selective: the attention scores), what the GPUs execute and Megatron-LM's TFLOP/s count.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> gpt = Transformer.preset("megatron-1.7b")
        >>> B, s, l, h, V = 512, 2048, 24, 2304, 51200
        >>> paper = 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
        >>> ours = step_flops(gpt, Strategy(dp=512, recompute="full"))
        >>> abs(ours / paper - 1) < 1e-12
        True

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    layer = layer_forward_flops(model)
    count = model.layers + model.mtp_layers        # and each multi-token-prediction module's layer (multi_token.py)
    layers = count * layer + experts.forward_flops_change(model)   # a MoE model: the experts a token uses
    # the output head, once more per multi-token-prediction module, after its 2h x h projection
    head = (1 + model.mtp_layers) * 2 * model.seq_len * model.hidden * model.vocab \
        + model.mtp_layers * 2 * model.seq_len * 2 * model.hidden ** 2
    per_sequence = 3 * (layers + head)
    if hardware and strategy.attention == "eager":     # eager attention computes every score, windowed or not
        passes = 3 + (strategy.recompute == "full")
        per_sequence += passes * count * 2 * model.seq_len * (model.seq_len - attended_keys(model)) \
            * (model.q_dim + model.o_dim)
    if hardware and strategy.recompute == "full":
        per_sequence += layers
        if recompute_skips_last_gemm(model, strategy):     # the FFN down projection (ffn_down_gemm) not re-run
            per_sequence -= count * 2 * model.seq_len * model.ffn_ * model.hidden
    elif hardware and strategy.recompute == "selective" and strategy.attention == "eager":
        per_sequence += count * 2 * model.seq_len ** 2 * (model.q_dim + model.o_dim)
    elif hardware and strategy.recompute == "op":      # the matmuls per-op checkpointing re-runs (op_checkpoint.py)
        rank = recomputed_flops(model, strategy)    # one TP rank, one micro-batch
        per_sequence += count * rank * strategy.tp // strategy.micro_batch
    return strategy.global_batch * per_sequence


def step_time(model, cluster, strategy) -> TimeBreakdown:
    """Predicted seconds per optimizer step, broken down (derivation in the module docstring).

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> t = step_time(Transformer.preset("llama3-8b"), ClusterSpec.preset("h100-sxm", nodes=4),
        ...               Strategy(dp=4, tp=8, micro_batch=1, grad_accum=128, sequence_parallel=True))
        >>> t.compute > t.tp_comm > 0
        True

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    p, t, m, v = strategy.pp, strategy.tp, strategy.grad_accum, strategy.virtual_stages
    layer = _per_context_rank(layer_seconds(model, strategy, cluster.gpu), strategy.cp)
    head = _per_context_rank(head_seconds(model, strategy, cluster.gpu), strategy.cp)
    # the slowest pipeline stage sets the pace: the fullest one (equal stages, or the first and last given:
    # pipeline_stages; a published run that split its layers unevenly, BLOOM's 70 on 12, runs at its 6-layer
    # stages' pace), and the last stage also runs the head (the output layer and the cross-entropy)
    tp_forward, tp_backward = layer_tp_communication(model, cluster, strategy)
    vocab_tp = vocab_parallel_communication(model, cluster, strategy)
    per_layer = layer.total + tp_forward + tp_backward
    if pipeline_stages.uneven(strategy):
        counts = pipeline_stages.stage_layers(model, strategy)
        stage_layers, has_head = max(((n, i == p - 1) for i, n in enumerate(counts)),
                                     key=lambda stage: stage[0] * per_layer + (head.total + vocab_tp) * stage[1])
    else:
        stage_layers, has_head = -(-model.layers // p) + model.mtp_layers, True   # the last stage: + MTP layers
    # DiLoCo replicas: the per-step sync stays inside one replica; HSDP: ZeRO-3 inside one shard group, whose
    # gradient shards are then all-reduced across the groups (hybrid_shard.py)
    inner = hybrid_shard.zero_group_strategy(strategy)
    # what a MoE layer's experts add to its compute, which DP's collectives also run beside
    moe_change = (expert_compute.layer_compute_change(model, inner, cluster.gpu)
                  if model.moe is not None and cluster.gpu.memory_bandwidth is not None else None)
    per_micro_batch = (stage_layers * layer.total + (head.total if has_head else 0.0)
                       + expert_compute.seconds_per_micro_batch(model, cluster, strategy, moe_change))
    compute = m * per_micro_batch + optimizer_seconds(optimizer_parameters(model, strategy), strategy, cluster.gpu)
    bubble = per_micro_batch * (p - 1) / v      # compute x (p - 1)/(v m): p - 1 micro-batches' worth, over v
    if cluster.cores is not None and strategy.gpus > cluster.cores:
        bubble = 0.0   # more CPU ranks than cores: another stage computes while one waits

    tp_all = tp_forward + tp_backward
    if strategy.tp_comm_overlap and cluster.overlap_dp_comm:     # chunked beside the GEMMs (tp_overlap.py)
        tp_forward, tp_backward = tp_overlap.layer_exposed(model, cluster, strategy, _tp_all_reduce(model, cluster, strategy))
    # a MoE layer's TP collectives differ from a dense layer's: no dense FFN, the experts' own gather (per layer,
    # backward without full recomputation's forward again, as moe_change)
    moe_tp_forward, moe_tp_backward, moe_tp_hidden = moe_layer_tp_change(model, cluster, strategy)
    moe_layers = experts.busiest_stage_moe_layers(model, strategy)
    moe_tp_all = moe_tp_forward * strategy.forward_runs + moe_tp_backward
    tp_hidden = m * (stage_layers * max(0.0, tp_all - tp_forward - tp_backward) + moe_layers * moe_tp_hidden)
    tp_comm = m * (stage_layers * (tp_forward + tp_backward) + vocab_tp + moe_layers * moe_tp_all)
    pp_comm = 0.0
    if p > 1:   # each micro-batch crosses every stage boundary forward and backward, v times when interleaved;
        # a DiLoCo replica is a block of GPUs of its own, whose stages are among its GPUs (outer_sync.inner_strategy)
        pp_comm = 2 * m * v * collective_time("send", _activation_bytes(model, strategy) / t, cluster,
                                              outer_sync.inner_strategy(strategy).layout.group("pp"))

    dp_comm = dp_communication(model, cluster, inner)
    replicate = hybrid_shard.replicate_seconds(model, cluster, strategy)   # HSDP: across nodes, not on TP's link
    slower = stretch(tp_all, layer.total, _dp_shares_tp_link(cluster, inner))   # TP holds the link, hidden or not
    moe_change = moe_change or (0.0, 0.0)
    moe_work = (moe_change[0] + moe_tp_forward, moe_change[1] + moe_tp_backward)   # a MoE layer's, compute stream
    if not cluster.overlap_dp_comm:
        exposed = dp_comm + replicate
    elif strategy.zero == 3:
        exposed = m * zero3_exposed(model, cluster, inner, layer, head, (tp_forward, tp_backward), slower, vocab_tp,
                                    moe_work, lambda stage: hybrid_shard.replicate_unit_seconds(model, cluster,
                                                                                                  strategy, stage))
    else:
        exposed = zero12_exposed(model, cluster, inner, layer, head, (tp_forward, tp_backward), slower, moe_work)
    ring, ring_exposed = context_parallel.ring_time(model, cluster, strategy)
    # hidden: the seconds the collectives run beside compute, DP's stretched by TP's share of their link as in `exposed`
    hidden_dp = 0.0
    if cluster.overlap_dp_comm:
        dp_comm *= slower        # the time DP's collectives take on a link TP's hold part of the time, as `exposed`
    dp_comm += replicate
    if cluster.overlap_dp_comm:
        hidden_dp = max(0.0, dp_comm - exposed)
    ep_exposed, ep_hidden = ep_overlap.step_seconds(model, cluster, strategy, layer, moe_change)   # all exposed unless
    hidden = hidden_dp + max(0.0, ring - ring_exposed) + tp_hidden + ep_hidden                # ep_overlap hides some
    return TimeBreakdown(compute=compute, tp_comm=tp_comm, bubble=bubble, dp_comm_exposed=exposed, dp_comm=dp_comm,
                         pp_comm=pp_comm, ep_comm=ep_exposed, cp_comm_exposed=ring_exposed, cp_comm=ring,
                         overlap_slowdown=overlap_slowdown(hidden, cluster.overlap_slowdown),
                         outer_sync=outer_sync.seconds_per_step(model, cluster, strategy), tp_comm_hidden=tp_hidden,
                         ep_comm_hidden=ep_hidden)


def _activation_bytes(model, strategy) -> int:
    """Bytes of one micro-batch's b x s x h activations on a rank (s/cp tokens: what f, g and the pipeline send)."""
    return strategy.micro_batch * (model.seq_len // strategy.cp) * model.hidden * value_bytes(strategy)


def _per_context_rank(work, cp: int):
    """A layer's (or the head's) work on one of cp context-parallel ranks: 1/cp of it (balanced causal split)."""
    return work if cp == 1 else type(work)(work.forward / cp, work.backward / cp, work.recompute / cp)


def layer_tp_communication(model, cluster, strategy) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's TP all-reduces for one micro-batch (Megatron's f and g).

    2 all-reduces of b s h values forward, 2 backward, 2 more with full recomputation (its
    forward again); with sequence parallelism an all-gather + reduce-scatter each, the same ring
    time. Recomputation that stops before the FFN's down projection (efficiency.recompute_skips_last_gemm)
    leaves out what follows it: the second all-reduce (1 again, not 2), with sequence parallelism
    the last reduce-scatter, half a ring (1.5 again). Per-op checkpointing re-runs one all-reduce's
    worth (op_checkpoint.recomputed_tp_collectives: the two all-gathers, or the first all-reduce).
    Latent attention's collective in front of attention carries its latents, a share r of b s h
    (latent_attention.tp_input_share): the backward all-reduce there, or with sequence parallelism the
    all-gather forward and the reduce-scatter backward, costs r of one.
    """
    one = _tp_all_reduce(model, cluster, strategy)
    r = latent_attention.tp_input_share(model)
    forward = (1.5 + r / 2) if strategy.sequence_parallel else 2.0
    backward = (1.5 + r / 2) if strategy.sequence_parallel else 1.0 + r
    again = forward if strategy.recompute == "full" else op_checkpoint.recomputed_tp_collectives(strategy)
    if recompute_skips_last_gemm(model, strategy):
        again -= 0.5 if strategy.sequence_parallel else 1.0
    return forward * one, (backward + again) * one


def moe_layer_tp_change(model, cluster, strategy) -> tuple[float, float, float]:
    """(forward, backward, hidden) seconds by which one MoE layer's TP communication differs from a dense layer's
    (`layer_tp_communication`), per micro-batch; backward without full recomputation's forward again, `hidden`: the
    change in what tp_comm_overlap hides.

    Megatron-Core's MoE layer with tp > 1 runs with sequence parallelism (it refuses to train without it): the router
    and the dispatcher take the rank's own s / tp tokens, so the dense FFN's all-gather before the up projection and
    reduce-scatter after the down projection are not run, unless shared experts, a dense FFN of their own, do
    (`ffn_tp_communication`; under tp_comm_overlap, tp_overlap.ffn_exposed). The routed experts split etp > 1 ways
    all-gather their dispatched copies after the all-to-all and reduce-scatter them before the combine, and the
    mirror pair backward (experts.expert_tp_gather_seconds), not overlapped with the GEMMs. Without sequence
    parallelism the layer's collectives are taken as a dense layer's.

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> mixtral, h100s = Transformer.preset("mixtral-8x7b").with_(seq_len=4096), ClusterSpec.preset("h100-sxm")
        >>> split = Strategy(dp=2, tp=4, ep=2, sequence_parallel=True)
        >>> dense = ffn_tp_communication(mixtral, h100s, split)
        >>> forward, backward, _ = moe_layer_tp_change(mixtral, h100s, split.with_(expert_tp=1, ep=8))
        >>> (forward, backward) == (-dense[0], -dense[1])    # etp = 1: no collective for the experts
        True
        >>> moe_layer_tp_change(mixtral, h100s, split)[0] > 0    # etp = 4: top_k = 2 copies gathered, not one
        True

    Introduced in notebooks/14-mixture-of-experts.ipynb (the planner: notebooks/13-plan-your-training-run.ipynb).
    """
    if model.moe is None or strategy.tp == 1 or not strategy.sequence_parallel:
        return 0.0, 0.0, 0.0
    forward = backward = hidden = 0.0
    if not model.moe.shared_experts:
        forward, backward = (-seconds for seconds in ffn_tp_communication(model, cluster, strategy))
        if strategy.tp_comm_overlap and cluster.overlap_dp_comm:
            exposed = tp_overlap.ffn_exposed(model, cluster, strategy, _tp_all_reduce(model, cluster, strategy))
            # minus the FFN's hidden seconds
            hidden = strategy.forward_runs * (forward + exposed[0]) + backward + exposed[1]
            forward, backward = -exposed[0], -exposed[1]
    gather = experts.expert_tp_gather_seconds(model, cluster, strategy)
    return forward + 2 * gather, backward + 2 * gather, hidden


def ffn_tp_communication(model, cluster, strategy) -> tuple[float, float]:
    """(forward, backward) seconds of the FFN's share of `layer_tp_communication` with sequence parallelism: the
    all-gather before its up projection and the reduce-scatter after its down projection forward, the mirror pair
    backward, and per-op checkpointing's all-gather again; without full recomputation's forward again (half a ring
    each: one all-reduce's time forward and one backward).

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    one = _tp_all_reduce(model, cluster, strategy)
    return one, (1.0 + op_checkpoint.recomputed_tp_collectives(strategy) / 2) * one


def _tp_all_reduce(model, cluster, strategy) -> float:
    """Seconds of one all-reduce of a micro-batch's b s h activations on the tp group."""
    return collective_time("all_reduce", _activation_bytes(model, strategy), cluster, strategy.layout.group("tp"))


def vocab_parallel_communication(model, cluster, strategy) -> float:
    """Seconds per micro-batch of the tp all-reduces outside the layers (see module docstring).

    The first stage all-reduces its vocab-parallel embedding's output (b s h values); the last
    stage all-reduces the gradient of the head's input (b s h) and, in the cross-entropy over
    vocab-parallel logits, three fp32 values per token (Megatron-LM's
    `vocab_parallel_cross_entropy`). With pp > 1 they sit on different stages: the last one's count. Each
    multi-token-prediction module (multi_token.py) looks up the tokens ahead and runs the head again on the last
    stage: one more embedding all-reduce, head-input gradient and cross-entropy.
    ddp_lab.plan.reference issues exactly these (13 all-reduces per step for 2 layers with tp = 2).

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    if strategy.tp == 1:
        return 0.0
    group = strategy.layout.group("tp")
    tokens = strategy.micro_batch * model.seq_len // strategy.cp
    hidden = collective_time("all_reduce", tokens * model.hidden * value_bytes(strategy), cluster, group)
    loss = 3 * collective_time("all_reduce", tokens * 4, cluster, group)
    return (1 if strategy.pp > 1 else 2) * hidden + loss + model.mtp_layers * (2 * hidden + loss)


def tokens_per_second(model, strategy, time: TimeBreakdown) -> float:
    """Tokens trained per second: global batch x sequence length / step time."""
    return strategy.global_batch * model.seq_len / time.total


def mfu(model, cluster, strategy, time: TimeBreakdown) -> float:
    """Model FLOPs utilisation (Chowdhery et al. 2022, PaLM, App. B): model FLOPs / (time x GPUs x peak).

    Recomputed FLOPs do not count: MFU measures useful work, so recomputation lowers it.
    """
    return step_flops(model, strategy, hardware=False) / (time.total * strategy.gpus * cluster.gpu.flops(compute_precision(strategy)))


def tflops_per_gpu(model, strategy, time: TimeBreakdown) -> float:
    """Achieved hardware TFLOP/s per GPU, recomputation included: the figure Megatron-LM papers report."""
    return step_flops(model, strategy) / (time.total * strategy.gpus) / 1e12

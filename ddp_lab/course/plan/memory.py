"""Per-GPU memory of a training plan: model states (ZeRO paper) and activations (Korthikanti et al.).

Model states, per parameter (Rajbhandari et al. 2020, "ZeRO", arXiv:1910.02054, Sec. 3.1):
mixed-precision Adam keeps 2 bytes of fp16/bf16 weight, 2 of gradient and K = 12 of optimizer
state (fp32 master weight, momentum, variance): 2 + 2 + 12 = 16 bytes (lesson 09). Plain fp32
Adam keeps 4 + 4 + 8 (lesson 01). ZeRO stage 1 divides the optimizer state by N_d (the data-
parallel size), stage 2 also the gradients, stage 3 (= FSDP full sharding) also the weights.

Activations: `activations.py`'s formulas (Korthikanti et al. 2022, Table 2), times the layers
and micro-batches one pipeline stage holds at its peak (lesson 07).

Experts and context parallelism (experts.py, context_parallel.py; lessons 14, 15): ZeRO shards
each parameter over the ranks that hold the same copy: dense parameters over dp x cp, routed
experts over dp x cp / ep (`stage_state_bytes`); a cp rank keeps 1/cp of the activations.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddp_lab.course.plan import (expert_tp, experts, hybrid_shard, latent_attention, multi_token, outer_sync,
                                 pipeline_stages)
from ddp_lab.course.plan.activations import (embedding_activation_bytes, head_activation_bytes, layer_activation_bytes,
                                     layers_in_flight, micro_batches_in_flight)
from ddp_lab.course.plan.precision import gathered_parameter_bytes, state_precision
from ddp_lab.course.plan.strategy import Strategy
from ddp_lab.course.sharding.state_bytes import BYTES_PER_PARAMETER, state_bytes_per_rank


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes on one GPU (the most loaded rank), by what they hold (the names of `state_bytes_per_rank`).

    Example:
        >>> MemoryBreakdown(2, 2, 12, 0, 0).model_states
        16

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    params: int
    grads: int
    optimizer: int
    activations: int = 0
    buffers: int = 0

    @property
    def model_states(self) -> int:
        """Parameters + gradients + optimizer state."""
        return self.params + self.grads + self.optimizer

    @property
    def total(self) -> int:
        return self.model_states + self.activations + self.buffers


def bytes_per_parameter(strategy: Strategy) -> tuple[int, int, int]:
    """(weight, gradient, optimizer) bytes per parameter: (2, 2, 12) mixed precision, (4, 4, 8) fp32.

    Mixed precision (ZeRO paper Sec. 3.1, K = 12): fp16/bf16 weight and gradient, plus fp32
    master weight, Adam momentum and variance (3 x 4 bytes). fp32 (lesson 01): weight,
    gradient, and Adam's exp_avg and exp_avg_sq. The table is `sharding.state_bytes.BYTES_PER_PARAMETER`.
    With `fp32_grads` the gradients are accumulated and reduced in fp32 (Megatron-LM's main_grad
    buffer; Llama 3, arXiv:2407.21783, Sec. 3.3.2): (2, 4, 12), 18 bytes per parameter. (Megatron-LM's
    docs count 20 with fp16 weights, which also keep an fp16 gradient beside the fp32 one.)

    Example:
        >>> bytes_per_parameter(Strategy(fp32_grads=True))
        (2, 4, 12)
    """
    weight, gradient, optimizer = BYTES_PER_PARAMETER[state_precision(strategy.precision)]   # fp8: bf16's states
    return weight, (4 if strategy.fp32_grads else gradient), optimizer


def model_state_bytes(params: int, strategy: Strategy, ranks: int | None = None) -> MemoryBreakdown:
    """Per-GPU weights, gradients and Adam state for `params` parameters under ZeRO over dp.

    ZeRO's formula (`ddp_lab.course.sharding.state_bytes.state_bytes_per_rank`, lesson 09) with the
    strategy's stage, dp and precision; a sharded count is rounded up (the last rank's shard is
    padded, as FSDP pads dim 0). The paper's example, Psi = 7.5B, N_d = 64, K = 12: 120, 31.4,
    16.6 and 1.9 GB. `params` is what one model replica holds on this GPU (after tp/pp);
    activations are 0 here. `ranks`: shard over that many ranks instead of dp (stage_state_bytes).

    Example:
        >>> round(model_state_bytes(7_500_000_000, Strategy(dp=64, zero=3)).total / 1e9, 1)
        1.9

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    shards = strategy.dp if ranks is None else ranks
    states = state_bytes_per_rank(params, strategy.zero, shards, state_precision(strategy.precision), padded=True)
    if strategy.fp32_grads:
        states["grads"] *= 2          # 4-byte gradients where ZeRO's table counts 2
    return MemoryBreakdown(**states)


def stage_state_bytes(model, strategy: Strategy, stage: int) -> MemoryBreakdown:
    """Weights, gradients and optimizer state on one rank of pipeline stage `stage`, ZeRO over the right groups.

    Dense parameters are replicated over the dp x cp ranks (cp ranks hold the same weights), so
    ZeRO shards them over dp x cp; a rank's routed experts are held by dp x cp / ep ranks and sharded
    over those (experts.py). With cp = ep = 1 and no experts: `model_state_bytes` of
    `stage_parameters` over dp.

    Introduced in notebooks/14-mixture-of-experts.ipynb (the planner's model: notebooks/13-plan-your-training-run.ipynb).
    """
    routed = experts.stage_expert_parameters(model, strategy, stage)
    layout = strategy.layout
    dense = model_state_bytes(stage_parameters(model, strategy, stage) - routed, strategy, layout.size("dp_cp"))
    if routed == 0:
        return dense
    held = model_state_bytes(routed, strategy, expert_tp.group(strategy, "edp").size)
    return MemoryBreakdown(dense.params + held.params, dense.grads + held.grads, dense.optimizer + held.optimizer)


def stage_parameters(model, strategy: Strategy, stage: int) -> int:
    """Parameters one tensor-parallel rank of pipeline stage `stage` holds (before ZeRO).

    Tensor parallelism (Megatron-LM, Shoeybi et al. 2019, arXiv:1909.08053, Sec. 3; lesson 08)
    splits every weight matrix and the column-parallel biases (q, k, v, FFN up) by tp; the
    row-parallel biases (attention out, FFN down) and the norms are replicated. The word
    embedding and an untied head are vocab-parallel (ceil(V/tp) rows); a learned position table
    is replicated. Pipeline parallelism (lesson 07) gives each stage layers/pp layers, the
    embeddings to stage 0 and the final norm and head to the last stage; with tied embeddings and
    pp > 1 the last stage keeps its own copy of the word embedding as the head (as Megatron-LM
    does, synchronising the two copies' gradients), so the stages together hold V*h more than
    `model.parameters()`.
    """
    t, h = strategy.tp, model.hidden
    count = pipeline_stages.stage_layers(model, strategy)[stage] * layer_parameters_per_rank(model, t)
    count += experts.stage_parameter_change(model, strategy, stage)     # MoE layers: router and experts (lesson 14)
    vocab_rows = -(-model.vocab // t) * h
    first, last = stage == 0, stage == strategy.pp - 1
    if first:
        count += vocab_rows + (model.seq_len * h if model.position == "learned" else 0)
    if last:
        count += model.norm_parameters()
        if not model.tied_embeddings or not first:
            count += vocab_rows
        count += multi_token.last_stage_parameters(model, strategy)   # projections, norms, an embedding copy
    return count


def layer_parameters_per_rank(model, tp: int) -> int:
    """Parameters of one transformer layer on one of `tp` tensor-parallel ranks (see stage_parameters).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> gpt = Transformer.preset("gpt2-small")
        >>> layer_parameters_per_rank(gpt, 1) == gpt.layer_parameters()
        True
        >>> qwen = Transformer("q", 1, 2048, 32, 1000, 128, kv_heads=4, head_size=128, qk_norm=True, qkv_bias=True)
        >>> layer_parameters_per_rank(qwen, 1) == qwen.layer_parameters()
        True
    """
    h, q, kv, f = model.hidden, model.q_dim, model.kv_dim, model.ffn_
    # latent attention: its down-projections and latent norms are whole on every rank (latent_attention.py)
    count = layer_matmul_parameters_per_rank(model, tp) + 2 * model.norm_parameters() \
        + latent_attention.norm_parameters(model)
    ups = 2 if model.ffn_kind == "swiglu" else 1
    if model.bias:
        count += (q + 2 * kv + ups * f) // tp + 2 * h   # column-parallel biases split; row-parallel replicated
    elif model.qkv_bias:
        count += (q + 2 * kv) // tp                     # Qwen2: biases on Q, K, V only, column-parallel
    if model.qk_norm:
        count += 2 * model.head_dim                     # one head_dim-wide norm weight for Q, one for K, on every rank
    return count


def layer_other_parameters(model, tp: int, moe_layer: bool = False) -> int:
    """Parameters of one layer on one tp rank that are not a linear layer's weight matrix (ZeRO-3 gathers them in 16 bits).

    The norms, the biases, the query/key norms and, in a MoE layer, the router: what FP8 training leaves in bf16
    (precision.py); the rest of a layer is matrices of linear layers (attention, FFN, experts).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> layer_other_parameters(Transformer.preset("gpt2-small"), 1) == 13 * 768   # 4 norm, 9 bias vectors of h
        True
    """
    other = layer_parameters_per_rank(model, tp) - layer_matmul_parameters_per_rank(model, tp)
    return other + (experts.router_parameters(model) if moe_layer else 0)


def layer_matmul_parameters_per_rank(model, tp: int) -> int:
    """Weights of one dense layer's matrices on one of `tp` ranks: split by tp, but latent attention's
    down-projections, which every rank holds whole."""
    replicated = latent_attention.replicated_matmul_parameters(model)
    return (model.layer_matmul_parameters() - replicated) // tp + replicated


def stage_activation_bytes(model, strategy: Strategy, stage: int = 0) -> int:
    """Activation bytes a rank of pipeline stage `stage` holds at its peak (Korthikanti et al. 2022).

    Its layers' per-layer bytes times `layers_in_flight`; on the first stage the embedding
    dropout mask of every micro-batch in flight; on the last stage the head's activations.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    acts = round(layer_activation_bytes(model, strategy) * layers_in_flight(model, strategy, stage))
    acts += round(experts.activation_change(model, strategy, stage) * layers_in_flight(model, strategy, stage))
    if stage == 0:
        acts += embedding_activation_bytes(model, strategy) * micro_batches_in_flight(strategy, 0)
    if stage == strategy.pp - 1:
        acts += head_activation_bytes(model, strategy)
    return -(-acts // strategy.cp)     # context parallelism: each cp rank keeps its s/cp tokens' share (lesson 15)


def memory(model, strategy: Strategy) -> MemoryBreakdown:
    """Bytes on the most loaded GPU: model states, activations and communication buffers.

    Each pipeline stage's rank holds its `stage_parameters` sharded by ZeRO over dp
    (`stage_state_bytes`: over dp x cp, experts over dp x cp / ep), its layers' activations (`layers_in_flight` layer-equivalents of
    Korthikanti et al.'s per-layer bytes; the first stage holds the most micro-batches), and on
    the last stage the head's activations. Buffers: under ZeRO-3 one layer's gathered weights
    twice (the current layer and the prefetched next, FSDP's default; under per-tensor FP8 its linear
    weights gathered at 1 byte each, precision.gathered_parameter_bytes) plus its unsharded gradients
    before the reduce-scatter; with fsdp_unit="model" (one unit) the whole stage's gathered weights
    and unsharded gradients. The stages checked are the first, the last, with uneven stages the
    second, and for a MoE model with dense first layers the first stages with experts
    (pipeline_stages.stages_to_check). With DiLoCo replicas (outer_sync)
    ZeRO shards over one replica's ranks, and the outer optimizer's 8 bytes per held parameter
    count as optimizer state. Left out: CUDA context, allocator fragmentation, NCCL buffers and
    temporaries; `search` keeps 10 % of GPU memory free for them.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> m = memory(Transformer.preset("llama3-8b"), Strategy(dp=8, zero=3, recompute="full"))
        >>> round(m.model_states / 1e9, 1)
        16.1

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    w, g, _ = bytes_per_parameter(strategy)
    inner = hybrid_shard.zero_group_strategy(strategy)   # ZeRO shards inside one DiLoCo replica, one HSDP group
    outer = outer_sync.outer_state_bytes(model, strategy)
    ranks = []
    for stage in pipeline_stages.stages_to_check(strategy, model):
        states = stage_state_bytes(model, inner, stage)
        acts = stage_activation_bytes(model, strategy, stage)
        buffers = 0
        if strategy.zero == 3 and strategy.fsdp_unit == "model":
            from ddp_lab.course.plan import dp_sync   # lazy: dp_sync imports this module
            gathered = (sum(dp_sync.gathered_unit_bytes(model, strategy, stage))
                        + sum(dp_sync.gathered_expert_bytes(model, strategy, stage)))
            buffers = gathered + g * stage_parameters(model, strategy, stage)   # the whole stage, and its gradients
        elif strategy.zero == 3:
            layer = layer_parameters_per_rank(model, strategy.tp) + experts.largest_layer_change(model, strategy)
            other = layer_other_parameters(model, strategy.tp, experts.moe_layers(model) > 0)
            gathered = gathered_parameter_bytes(strategy) * (layer - other) + w * other   # FP8: 1 byte per weight
            buffers = 2 * gathered + g * layer
        ranks.append(MemoryBreakdown(states.params, states.grads, states.optimizer + outer, acts, buffers))
    return max(ranks, key=lambda m: m.total)


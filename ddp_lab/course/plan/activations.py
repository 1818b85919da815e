"""Activation memory of a transformer layer, after Korthikanti et al. 2022 (arXiv:2205.05198).

The backward pass of each operation needs some of its forward tensors; counting them for one
layer (s = sequence, b = micro-batch, h = hidden, a = heads, t = tensor-parallel size, 16-bit
values = 2 bytes, dropout masks = 1 byte) gives the paper's Sec. 4.1:
    attention  11 sbh + 5 as^2 b   QKV input 2, Q and K 4, V 2, out-proj input 2, dropout mask 1;
                                    softmax output 2as^2b, its dropout mask as^2b, dropout output 2as^2b
    MLP        19 sbh               fc1 input 2, GeLU input 8 (= 2 x 4h), fc2 input 8, dropout mask 1
    2 norms     4 sbh               each keeps its input
    total      sbh (34 + 5as/h)
Tensor parallelism splits what lives between the column- and row-parallel matmuls (24 sbh and
the 5as^2b scores) but not the 10 sbh around them; sequence parallelism splits those 10 too;
selective recomputation drops the scores; full recomputation keeps only the layer input. Table 2:
    no parallelism          sbh (34 + 5as/h)
    TP                      sbh (10 + 24/t + 5as/(ht))
    TP + SP                 sbh/t (34 + 5as/h)
    TP + selective          sbh (10 + 24/t)
    TP + SP + selective     sbh 34/t
    full recomputation      2 sbh (2 sbh/t with SP: the checkpointed layer input is the sequence-split tensor)
This module sums the terms one by one, so it also covers what the paper's GPT shape fixes:
grouped-query attention (K, V are 2 s b d_kv each), latent attention (K and V of their own widths, and the
latents, kept around the parallel matmuls as the norms' inputs are: latent_attention.py), an FFN of size f (GeLU: 2
tensors of sbf;
SwiGLU: 4 - gate, up, SiLU(gate), their product - as PyTorch autograd saves them), no dropout
(no masks, one score tensor of 2as^2b), and fp32 values (4 bytes; masks stay 1 byte).

That is attention as Korthikanti et al. ran it, `Strategy(attention="eager")`: the scores are
materialised and saved. Fused attention (FlashAttention, Dao et al. 2022, arXiv:2205.14135;
PyTorch's scaled_dot_product_attention on GPUs), the default `attention="flash"`, never writes
the s x s matrix: it keeps Q, K, V and the output (already counted above) and one fp32
log-sum-exp per head and token, 4 a s b bytes, and recomputes the scores block by block in
backward (dropout from a saved RNG state: no mask). So with flash attention there are no
scores to drop, and selective recomputation keeps exactly what no recomputation keeps.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from ddp_lab.course.plan import latent_attention, op_checkpoint, pipeline_stages


def value_bytes(strategy) -> int:
    """Bytes of one activation value: 2 under bf16/fp16 mixed precision, 4 in fp32."""
    return 2 if strategy.mixed else 4


def layer_activation_bytes(model, strategy) -> int:
    """Activation bytes one layer keeps for backward, per micro-batch, on one tensor-parallel rank.

    Derived term by term in the module docstring; for a GPT shape (ffn = 4h, kv_heads = heads,
    GeLU, dropout, 16-bit) and eager attention it equals Korthikanti et al. 2022, Table 2 in
    every case; flash attention replaces the 5as^2b of scores by a 4asb log-sum-exp.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> gpt = Transformer.preset("gpt3-175b")
        >>> s, h, a = 2048, 12288, 96
        >>> layer_activation_bytes(gpt, Strategy(attention="eager")) == s * h * (34 + 5 * a * s // h)
        True
        >>> layer_activation_bytes(gpt, Strategy()) == s * h * 34 + 4 * a * s
        True

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    s, b, h, t = model.seq_len, strategy.micro_batch, model.hidden, strategy.tp
    if strategy.recompute == "full":
        # only the layer's input is kept (Table 2: 2sbh); with sequence parallelism that input lives split along the
        # sequence between layers, and Megatron-LM checkpoints the split tensor: 2sbh/t per rank
        return value_bytes(strategy) * s * b * h // (t if strategy.sequence_parallel else 1)
    if strategy.recompute == "op":
        return op_checkpoint.kept_bytes(model, strategy, value_bytes(strategy))
    outside, inside, scores = layer_parts(model, strategy)
    if strategy.recompute == "selective":
        scores = 0
    outside_split = t if strategy.sequence_parallel else 1
    return outside // outside_split + inside // t + scores // t


def layer_parts(model, strategy) -> tuple[int, int, int]:
    """A layer's saved bytes on one rank without TP: (around the parallel matmuls, between them, the scores).

    `replicated_share` reads them too (CPU ranks); a GPU's memory-bound kernels move the bytes of traffic.py's
    op table instead.
    """
    s, b, h, a = model.seq_len, strategy.micro_batch, model.hidden, model.heads
    e = value_bytes(strategy)
    mask = 1 if model.dropout else 0
    # around the parallel matmuls: 2 norm inputs, QKV input, attention dropout mask, fc1 input, FFN dropout mask;
    # latent attention's latents (replicated, as these, and split by sequence parallelism)
    outside = s * b * (h * (2 * e + e + mask + e + mask) + e * latent_attention.saved_latent_values(model))
    # between column- and row-parallel matmuls: Q, K, V, out-proj input (d_o wide: heads x value head), FFN activations
    ffn_saved = (4 if model.ffn_kind == "swiglu" else 2) * e * model.ffn_
    inside = s * b * (e * (model.q_dim + model.kv_dim + model.v_dim + model.o_dim) + ffn_saved)
    if strategy.attention == "flash":
        # fused attention: one fp32 log-sum-exp per head and token instead of the s x s scores
        return outside, inside + 4 * a * s * b, 0
    # attention scores: softmax output (+ its dropout mask and dropout output)
    scores = a * s * s * b * (e + (mask + e if model.dropout else 0))
    return outside, inside, scores


def replicated_share(model, strategy) -> float:
    """The share of a layer's elementwise work that every tensor-parallel rank repeats.

    Norms, residual adds, the dropouts after attention and MLP work on the whole b s h tensor on
    every TP rank; softmax, GeLU, the attention dropout work on this rank's heads and FFN slice
    only. Elementwise kernels are memory-bound and each tensor a layer saves for backward is
    written once in forward and read in backward, so the work is taken to be in proportion to
    the saved bytes: the 10 sbh "around" the parallel matmuls over sbh (34 + 5as/h) for GPT
    (0.23 for `validate`'s model, 0.088 for Megatron's 18.4B). 0 with sequence parallelism,
    which splits those too.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> shape = Transformer("t", layers=2, hidden=256, heads=4, vocab=512, seq_len=128)
        >>> round(replicated_share(shape, Strategy(tp=2, attention="eager")), 3)    # 10 / (34 + 5 * 4 * 128 / 256)
        0.227

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    if strategy.sequence_parallel:
        return 0.0
    outside, inside, scores = layer_parts(model, strategy)
    return outside / (outside + inside + scores)


def head_activation_bytes(model, strategy) -> int:
    """Activation bytes of the output layer on the last stage, per micro-batch (Korthikanti Sec. 4.3).

    Final norm input 2sbh and head input 2sbh (divided by t with sequence parallelism), and the
    logits kept in fp32 for the cross-entropy, 4sbV/t (vocab-parallel): with SP the paper's
    4sbh/t (1 + V/h). Only one micro-batch's head is alive at a time. Each multi-token-prediction module
    (multi_token.py) keeps as much again for its pass through the head, and its projection's 2h-wide input.
    """
    s, b, h, t = model.seq_len, strategy.micro_batch, model.hidden, strategy.tp
    e = value_bytes(strategy)
    around = 2 * e * s * b * h // (t if strategy.sequence_parallel else 1)
    projection_input = e * s * b * 2 * h // (t if strategy.sequence_parallel else 1)    # split as `around` is
    return (1 + model.mtp_layers) * (around + 4 * s * b * (-(-model.vocab // t))) + model.mtp_layers * projection_input


def embedding_activation_bytes(model, strategy) -> int:
    """The embedding dropout's 1-byte mask on the first stage, per micro-batch (Korthikanti Sec. 4.3).

    sbh bytes (sbh/t with sequence parallelism); none without dropout. The paper counts it as
    sbhp/t for the p micro-batches 1F1B keeps in flight on stage 0 (`micro_batches_in_flight`).
    """
    if not model.dropout:
        return 0
    s, b, h, t = model.seq_len, strategy.micro_batch, model.hidden, strategy.tp
    return s * b * h // (t if strategy.sequence_parallel else 1)


def micro_batches_in_flight(strategy, stage: int = 0) -> int:
    """Micro-batches whose forward pipeline stage `stage` has run but not yet its backward, at peak.

    1 without pipelining; GPipe: all m; 1F1B (and interleaved): min(p - stage, m) (lesson 07).
    """
    p, m = strategy.pp, strategy.grad_accum
    if p == 1:
        return 1
    return m if strategy.schedule == "gpipe" else min(p - stage, m)


def interleaved_layers_in_flight(chunks: list[int], p: int, m: int, stage: int) -> float:
    """The most layer-micro-batches stage `stage` of an interleaved pipeline holds over a step, its `chunks` (the
    layers of each of its v model chunks) given: Megatron-LM's schedule runs 2 (p - stage - 1) + (v - 1) p warm-up
    chunk-forwards (at most the step's m v), taking its chunks in turn for p micro-batches each, then one forward
    and one backward at a time, the backwards taking the chunks in the reverse order. With equal chunks the peak
    is just before the first backward; with uneven ones a smaller chunk's backward can free less than the next
    forward adds, so the peak is searched over the steady phase, whose additions and removals repeat every p v
    steps (each chunk p times in both).

    Example:
        >>> interleaved_layers_in_flight([16, 16], p=4, m=8, stage=0)         # L (1 + (p - 1)/(p v)) = 128 x 11/8
        176.0
        >>> interleaved_layers_in_flight([62, 1], p=2, m=16, stage=1)         # three of its 62-layer chunk at once
        186.0
    """
    v = len(chunks)
    total = m * v
    warmup = min(2 * (p - stage - 1) + (v - 1) * p, total)
    forward = [chunks[(k // p) % v] for k in range(min(total, warmup + p * v))]
    backward = [chunks[v - 1 - (k // p) % v] for k in range(min(total, p * v))]
    held = sum(forward[:warmup])
    if warmup == total:
        return float(held)
    peak = 0
    for i in range(min(total - warmup, p * v)):
        held += forward[warmup + i]
        peak = max(peak, held)
        held -= backward[i]
    return float(peak)


def layers_in_flight(model, strategy, stage: int = 0) -> float:
    """Layer-micro-batches whose activations pipeline stage `stage` holds at its peak (lesson 07).

    Without pipelining: all layers for one micro-batch (gradient accumulation frees each
    micro-batch before the next). GPipe: every micro-batch's forward before any backward,
    m x L/p. 1F1B: stage i holds min(p - i, m) micro-batches of its L/p layers, so stage 0 holds
    L layers' worth for any p (Narayanan et al. 2021, Sec. 2.2.1; Korthikanti Sec. 4.2.3).
    Interleaved with v chunks per stage, Megatron-LM's schedule (`interleaved_layers_in_flight`): from L (1 + (p -
    1)/(p v)) on stage 0 (Korthikanti Sec. 4.2.3) down to L ((v - 1) p + 1)/(p v) on the last, with equal chunks.
    Uneven stages (pipeline_stages): the stage's own layers (interleaved: its own chunks' layers, the first and
    the last virtual stage their own numbers).
    """
    p, m, L = strategy.pp, strategy.grad_accum, model.layers
    if p == 1:
        return float(L + model.mtp_layers)      # and the multi-token-prediction modules' layers (multi_token.py)
    if strategy.schedule == "interleaved":
        return interleaved_layers_in_flight(pipeline_stages.chunk_layers(model, strategy, stage), p, m, stage)
    per_stage = pipeline_stages.stage_layers(model, strategy)[stage] if pipeline_stages.uneven(strategy) else \
        L / p + (model.mtp_layers if stage == p - 1 else 0)
    if strategy.schedule == "gpipe":
        return per_stage * m
    return per_stage * min(p - stage, m)

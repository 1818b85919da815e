"""HBM bytes the memory-bound kernels of a transformer move: the op table the step time's roofline reads.

GEMMs and fused attention are timed by their FLOPs (efficiency.py); every other kernel of a layer
does a few FLOPs per byte and runs at the GPU's HBM bandwidth, so its time is the bytes it reads
and writes over the bandwidth (Williams et al. 2009, "Roofline"; Ivanov et al. 2021, "Data Movement
Is All You Need", MLSys, measured these kernels at 0.2 % of a BERT layer's FLOPs and a third of its
time in PyTorch). This module lists those kernels, one row each, with the tensors each reads and
writes, as PyTorch's eager kernels and Megatron-LM's fused ones run them. Per token, with
e = bytes of a value (2 in bf16/fp16, 4 in fp32), m = bytes of a dropout mask (1; 0 without
dropout), h = hidden, f = FFN inner size, d_q = the Q width (heads x head_dim), d_kv = the K (and V) width,
a = heads, s = sequence,
V = vocabulary; "read" and "written" in bytes:

    op (per layer)          where    forward: read / written       backward: read / written
    norm (x 2)              around   e h / e h                     2 x 2 e h (grad, input) / e h
    RoPE on Q and K         inside   e (d_q + d_kv) / e (d_q + d_kv) e (d_q + d_kv) / e (d_q + d_kv)
    softmax (eager)         scores   e a s / e a s                 2 e a s (grad, probs) / e a s
    dropout (eager scores)  scores   e a s / (e + m) a s            (e + m) a s / e a s
    activation, GeLU        inside   e f / e f                     2 e f (grad, input) / e f
    activation, SwiGLU      inside   SiLU: e f / e f; product:     product: 2 x (2 e f / e f);
                                     2 e f / e f                   SiLU: 2 e f / e f
    dropout (x 2)           around   e h / (e + m) h               (e + m) h / e h
    residual add (x 2)      around   2 e h / e h                   2 e h / e h (the skip's and the
                                                                   branch's gradients summed)
    latent norms            around   e r / e r                     2 x 2 e r / e r   (latent attention: r =
                                                                   q_rank + kv_rank; RoPE then rotates
                                                                   (a + 1) rope_dim values, not d_q + d_kv)
    output layer, on the last pipeline stage (per token; vocab-parallel: V / t per rank)
    final norm              around   e h / e h                     2 x 2 e h / e h
    logits to fp32          head     e V / 4 V                     4 V / e V     (none in fp32)
    log-softmax             head     2 x 4 V (max, sum) / 4 V      2 x 4 V (grad, output) / 4 V
    loss gradient           head     -                             - / 4 V (dense, then scattered)

"around" rows work on the whole b s h tensor on every tensor-parallel rank (split by t only with
sequence parallelism), "inside" and "scores" rows on the rank's heads and FFN slice (split by t):
Korthikanti et al. 2022's (arXiv:2205.05198) split of the saved activations, activations.py (latent attention's
latents are "around" tensors: latent_attention.py).
Left out, each below 1 % of a row: biases (added in the GEMMs' epilogues: cuBLASLt, Megatron's
fused bias-GeLU), the norms' per-token statistics (4-8 bytes against 2 e h), the loss itself.
Fused attention (FlashAttention, the default) moves no s x s tensor: its Q, K, V and output pass
through HBM once per kernel, counted as its FLOPs' time. Eager attention's softmax is Megatron's
fused scale-mask-softmax (one read, one write; PyTorch's unfused scale, mask and softmax would be
three). The backward of each row recomputes nothing; "full" recomputation runs every forward row
again (also where PyTorch's checkpoint stops before the FFN's down projection: the residual add
after it, a few h bytes per token, stays counted; efficiency.recompute_skips_last_gemm), and so does
per-op checkpointing ("op": it recomputes every elementwise op, op_checkpoint.py); "selective"
(eager attention) the score rows.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddp_lab.course.plan import latent_attention
from ddp_lab.course.plan.activations import value_bytes


@dataclass(frozen=True)
class OpBytes:
    """One memory-bound kernel of the op table: where it runs and its bytes per micro-batch, before any split.

    place: "around" (every TP rank repeats it unless sequence parallelism splits it), "inside" or
    "scores" (split by t), "head" (vocab-parallel: split by t).

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    name: str
    place: str
    forward: int       # bytes read + written in forward
    backward: int      # bytes read + written in backward

    def split(self, strategy) -> int:
        """How many ways tensor (and sequence) parallelism divide this op's bytes on one rank."""
        if self.place == "around":
            return strategy.tp if strategy.sequence_parallel else 1
        return strategy.tp


def layer_ops(model, strategy) -> list[OpBytes]:
    """The memory-bound kernels of one transformer layer for one micro-batch (module docstring's table).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> gpt2 = Transformer.preset("gpt2-small")
        >>> [op.name for op in layer_ops(gpt2, Strategy())]
        ['norm', 'norm', 'GeLU', 'dropout', 'dropout', 'residual add', 'residual add']

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    tokens = strategy.micro_batch * model.seq_len
    e, m = value_bytes(strategy), (1 if model.dropout else 0)
    h, f, kv = model.hidden, model.ffn_, model.kv_dim

    def op(name, place, forward, backward):
        return OpBytes(name, place, tokens * forward, tokens * backward)

    norm = op("norm", "around", e * h + e * h, 4 * e * h + e * h)
    ops = [norm, norm]
    if model.latent is not None:      # an RMSNorm on each latent
        r = latent_attention.norm_parameters(model)
        ops.append(op("latent norms", "around", e * r + e * r, 4 * e * r + e * r))
    if model.position == "rope":
        width = model.q_dim + kv if model.latent is None else latent_attention.rope_width(model)   # rotates Q and K
        ops.append(op("RoPE", "inside", 2 * e * width, 2 * e * width))
    if strategy.attention == "eager":
        scores = model.heads * model.seq_len
        ops.append(op("softmax", "scores", 2 * e * scores, 3 * e * scores))
        if model.dropout:
            ops.append(op("attention dropout", "scores", (2 * e + m) * scores, (2 * e + m) * scores))
    activation_forward, activation_backward = activation_function_bytes(model, strategy)
    ops.append(op("SwiGLU" if model.ffn_kind == "swiglu" else "GeLU", "inside",
                  activation_forward * f, activation_backward * f))
    if model.dropout:
        dropout = op("dropout", "around", (2 * e + m) * h, (2 * e + m) * h)
        ops += [dropout, dropout]
    residual = op("residual add", "around", 3 * e * h, 3 * e * h)
    return ops + [residual, residual]


def activation_function_bytes(model, strategy) -> tuple[int, int]:
    """(forward, backward) bytes the FFN's activation moves per token and unit of its inner width: the table's
    "activation" rows, SwiGLU's 5 e and 9 e, GeLU's 2 e and 3 e. A dense layer's activation spans the FFN (f = ffn);
    a MoE layer's spans every routed and shared expert a token goes through (expert_compute.expert_activation_seconds).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> activation_function_bytes(Transformer.preset("llama3-8b"), Strategy()), activation_function_bytes(
        ...     Transformer.preset("gpt2-small"), Strategy())
        ((10, 18), (4, 6))

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    e = value_bytes(strategy)
    if model.ffn_kind == "swiglu":            # SiLU: e / e; product: 2 e / e; backward twice the product's, SiLU's
        return 2 * e + 3 * e, 2 * 3 * e + 3 * e
    return 2 * e, 3 * e


def head_ops(model, strategy) -> list[OpBytes]:
    """The memory-bound kernels of the output layer for one micro-batch: final norm, fp32 logits, log-softmax.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> [op.name for op in head_ops(Transformer.preset("gpt2-small"), Strategy())]
        ['final norm', 'logits to fp32', 'log-softmax', 'loss gradient']

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    tokens = strategy.micro_batch * model.seq_len
    e, h, vocab = value_bytes(strategy), model.hidden, model.vocab
    ops = [OpBytes("final norm", "around", tokens * 2 * e * h, tokens * 5 * e * h)]
    if e != 4:
        ops.append(OpBytes("logits to fp32", "head", tokens * (e + 4) * vocab, tokens * (4 + e) * vocab))
    return ops + [OpBytes("log-softmax", "head", tokens * 3 * 4 * vocab, tokens * 3 * 4 * vocab),
                  OpBytes("loss gradient", "head", 0, tokens * 4 * vocab)]


def rank_bytes(ops: list[OpBytes], strategy, recompute: str = "none") -> tuple[int, int, int]:
    """(forward, backward, recomputed) bytes one tensor-parallel rank moves for `ops`.

    recompute: "full" and "op" repeat every forward row in backward, "selective" the score rows (eager attention).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> gpt2, one = Transformer.preset("gpt2-small"), Strategy()
        >>> forward, backward, _ = rank_bytes(layer_ops(gpt2, one), one)
        >>> h = 768
        >>> forward // 1024 == 2 * 4 * h + 4 * 4 * h + 2 * 5 * h + 2 * 6 * h    # per token: norms, GeLU, dropouts, adds
        True
        >>> backward // 1024 == 2 * 10 * h + 6 * 4 * h + 2 * 5 * h + 2 * 6 * h
        True

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    forward = sum(op.forward // op.split(strategy) for op in ops)
    backward = sum(op.backward // op.split(strategy) for op in ops)
    if recompute in ("full", "op"):          # per-op checkpointing re-runs every elementwise op (op_checkpoint.py)
        again = forward
    elif recompute == "selective":
        again = sum(op.forward // op.split(strategy) for op in ops if op.place == "scores")
    else:
        again = 0
    return forward, backward, again

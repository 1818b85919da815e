"""A GPT-style decoder built from a `Transformer` shape: the real model the planner's numbers are checked on.

Its parameter count equals `Transformer.parameters()` exactly, and its forward pass saves for
backward exactly the tensors Korthikanti et al. 2022 (arXiv:2205.05198, Sec. 4.1) count, so
its activation bytes come out as sbh (34 + 5as/h) per layer in 16-bit. What that takes:
- explicit attention (scores, causal bias, softmax, dropout, @ V), not fused SDPA, which saves
  other things (log-sum-exp instead of the s x s probabilities);
- the causal mask *added* as a float bias (an add saves nothing; `masked_fill` would save a mask);
- scaling the scores after Q K^T (scaling Q first would save a scaled copy of Q);
- dropout through `torch.native_dropout`, which saves a 1-byte mask as GPU kernels do.
  `F.dropout` on CPU multiplies by a noise tensor of the input's dtype and saves *that*
  (at::dropout takes the fused path only on accelerators), 2-4 bytes per value instead of 1;
- logits cast to fp32 before the cross-entropy (as Megatron-LM does): the log-softmax output
  kept for backward is the paper's 4 sbV bytes;
- grouped-query attention by broadcasting each K/V head over its query heads (a view), not by
  copying K and V to every query head (`repeat_interleave` would save the copies: 4x K and V
  for Llama 3's 8 kv heads of 32);
- RMSNorm as fused kernels run it (`FusedRMSNorm`: saves its input and one fp32 1/rms per
  token); `nn.RMSNorm` on CPU is composed of elementwise ops and saves an fp32 copy and the
  normalised output besides.

Tensor parallelism is Megatron-LM's (Shoeybi et al. 2019, arXiv:1909.08053, lesson 08): Q/K/V
and the FFN's first matmul split by columns (whole heads per rank), the output projections by
rows, `f` (identity forward, all-reduce backward) before and `g` (all-reduce forward) after
(ddp_lab/course/tensor_parallel/communications.py); the word embedding and the cross-entropy are
vocab-parallel (ddp_lab/course/tensor_parallel/vocab_parallel.py). Pipeline parallelism cuts the
layers into equal stages (lesson 07); with tied embeddings the last stage keeps its own copy of
the word embedding as the head, as Megatron-LM does.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ddp_lab.course.tensor_parallel.communications import copy_to_model_parallel_region, reduce_from_model_parallel_region
from ddp_lab.course.tensor_parallel.vocab_parallel import (VocabParallelEmbedding, group_size_and_rank,
                                                    vocab_parallel_cross_entropy)

DEFAULT_DROPOUT = 0.1


def _f(x, group):
    """Megatron's f on the TP group; nothing without tensor parallelism."""
    return x if group is None else copy_to_model_parallel_region(x, group)


def _g(x, group):
    """Megatron's g on the TP group; nothing without tensor parallelism."""
    return x if group is None else reduce_from_model_parallel_region(x, group)


def _dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout that saves a 1-byte mask for backward on every device (see the module docstring)."""
    if not training or p == 0:
        return x
    return torch.native_dropout(x, p, True)[0]


def _norm(model, width: int) -> nn.Module:
    if model.norm == "rmsnorm":
        return FusedRMSNorm(width)
    return nn.LayerNorm(width, bias=model.bias)


class _RMSNormFunction(torch.autograd.Function):
    """y = x / rms(x) * w, rms over the last dimension in fp32; saves x and 1/rms, as fused kernels do."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        inverse_rms = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)     # (..., 1) fp32
        ctx.save_for_backward(x, weight, inverse_rms)
        return (x.float() * inverse_rms).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, grad):
        x, weight, inverse_rms = ctx.saved_tensors
        normed = x.float() * inverse_rms
        grad_normed = grad.float() * weight.float()
        # d/dx of x * r(x), r = (mean(x^2) + eps)^(-1/2): r * (g - normed * mean(g * normed))
        grad_x = inverse_rms * (grad_normed - normed * (grad_normed * normed).mean(-1, keepdim=True))
        grad_weight = (grad.float() * normed).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
        return grad_x.to(x.dtype), grad_weight, None


class FusedRMSNorm(nn.Module):
    """RMSNorm (Zhang and Sennrich 2019) that keeps for backward what a fused GPU kernel keeps: its input and
    one fp32 1/rms per token (Korthikanti et al.'s count: the norm's input). Same outputs as `nn.RMSNorm`."""

    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        return _RMSNormFunction.apply(x, self.weight, self.eps)


class Attention(nn.Module):
    """Causal self-attention on this TP rank's heads: (b, s, h) -> (b, s, h)."""

    def __init__(self, model, dropout: float, tp_group=None):
        super().__init__()
        t, _ = group_size_and_rank(tp_group)
        self.group, self.p = tp_group, dropout
        self.heads, self.kv_heads, self.head_dim = model.heads // t, model.kv_heads_ // t, model.head_dim
        h = model.hidden
        # column-parallel: this rank's Q, K, V columns (whole heads); row-parallel: its rows of W_o
        self.qkv = nn.Linear(h, (self.heads + 2 * self.kv_heads) * self.head_dim, bias=model.bias)
        self.out = nn.Linear(self.heads * self.head_dim, h, bias=False)
        self.out_bias = nn.Parameter(torch.zeros(h)) if model.bias else None  # replicated: added after g
        self.rope = model.position == "rope"
        causal = torch.full((model.seq_len, model.seq_len), float("-inf")).triu(1)
        self.register_buffer("causal", causal, persistent=False)  # added, so nothing is saved for it

    def forward(self, x):
        b, s, _ = x.shape
        d = self.head_dim
        qkv = self.qkv(_f(x, self.group))                       # (b, s, h) @ (h, 3h/t) -> (b, s, 3h/t)
        q, k, v = qkv.split([self.heads * d, self.kv_heads * d, self.kv_heads * d], dim=-1)
        q, k, v = (z.view(b, s, -1, d).transpose(1, 2) for z in (q, k, v))   # (b, heads, s, d)
        if self.rope:
            q, k = _rotate(q), _rotate(k)
        group = self.heads // self.kv_heads                     # grouped-query: query heads per K/V head
        q = q.reshape(b, self.kv_heads, group, s, d)            # (b, kv_heads, group, s, d)
        k, v = k.unsqueeze(2), v.unsqueeze(2)                   # (b, kv_heads, 1, s, d): broadcast, not copied
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d)) + self.causal[:s, :s].to(q.dtype)
        probs = _dropout(torch.softmax(scores, dim=-1), self.p, self.training)   # (b, kv_heads, group, s, s)
        context = (probs @ v).reshape(b, self.heads, s, d).transpose(1, 2).reshape(b, s, self.heads * d)
        y = _g(self.out(context), self.group)                   # row-parallel partial sums, all-reduced
        return y if self.out_bias is None else y + self.out_bias


def _rotate(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021) on (b, heads, s, d); no parameters."""
    s, d = x.shape[-2], x.shape[-1]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    angles = torch.outer(torch.arange(s, dtype=torch.float32), inv)        # (s, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


class MLP(nn.Module):
    """FFN: column-parallel up (GeLU, or SwiGLU's gate and up), row-parallel down."""

    def __init__(self, model, tp_group=None):
        super().__init__()
        t, _ = group_size_and_rank(tp_group)
        self.group, self.swiglu = tp_group, model.ffn_kind == "swiglu"
        h, f = model.hidden, model.ffn_ // t
        self.up = nn.Linear(h, f, bias=model.bias)
        self.gate = nn.Linear(h, f, bias=model.bias) if self.swiglu else None
        self.down = nn.Linear(f, h, bias=False)
        self.down_bias = nn.Parameter(torch.zeros(h)) if model.bias else None

    def forward(self, x):
        x = _f(x, self.group)
        if self.swiglu:
            inner = F.silu(self.gate(x)) * self.up(x)
        else:
            inner = F.gelu(self.up(x))                          # (b, s, h) -> (b, s, 4h/t)
        y = _g(self.down(inner), self.group)
        return y if self.down_bias is None else y + self.down_bias


class Block(nn.Module):
    """Pre-norm transformer layer: x + drop(attn(norm(x))), then x + drop(mlp(norm(x)))."""

    def __init__(self, model, dropout: float, tp_group=None):
        super().__init__()
        self.p = dropout
        self.norm1, self.attn = _norm(model, model.hidden), Attention(model, dropout, tp_group)
        self.norm2, self.mlp = _norm(model, model.hidden), MLP(model, tp_group)

    def forward(self, x):
        x = x + _dropout(self.attn(self.norm1(x)), self.p, self.training)
        return x + _dropout(self.mlp(self.norm2(x)), self.p, self.training)


class Head(nn.Module):
    """Final norm, the output projection (vocab-parallel under TP) and the fp32 cross-entropy."""

    def __init__(self, model, tp_group=None, embedding: VocabParallelEmbedding | None = None):
        super().__init__()
        self.group = tp_group
        self.norm = _norm(model, model.hidden)
        # tied: reuse the word embedding (same stage); else own rows (untied, or a later pipeline stage)
        self.tied = embedding
        self.proj = None if embedding is not None else VocabParallelEmbedding(model.vocab, model.hidden, tp_group)

    @property
    def weight(self):
        return (self.tied if self.tied is not None else self.proj).weight

    def forward(self, x, target=None):
        logits = _f(self.norm(x), self.group) @ self.weight.t()     # (b, s, h) @ (h, V/t) -> (b, s, V/t)
        if target is None:
            return logits
        if self.group is None:
            return F.cross_entropy(logits.float().flatten(0, 1), target.flatten())
        start = (self.tied if self.tied is not None else self.proj).start
        return vocab_parallel_cross_entropy(logits, target, start, self.group)


class Decoder(nn.Module):
    """The whole model, or one pipeline stage of it: embeddings (first stage), layers, head (last stage).

    `forward(ids, target)` returns the mean loss on a single stage; a first stage without the
    head returns hidden states (b, s, h), a later stage takes them instead of token ids.
    """

    def __init__(self, model, dropout: float, tp_group=None, layers: range | None = None,
                 first: bool = True, last: bool = True):
        super().__init__()
        self.p, self.first, self.last = dropout, first, last
        layers = range(model.layers) if layers is None else layers
        self.embed = VocabParallelEmbedding(model.vocab, model.hidden, tp_group) if first else None
        self.position = (nn.Parameter(torch.randn(model.seq_len, model.hidden) * 0.01)
                         if first and model.position == "learned" else None)   # replicated under TP
        self.layers = nn.ModuleList(Block(model, dropout, tp_group) for _ in layers)
        if last:
            tied = self.embed if (model.tied_embeddings and first) else None
            self.head = Head(model, tp_group, tied)
        else:
            self.head = None

    def forward(self, x, target=None):
        if self.first:
            x = self.embed(x)
            if self.position is not None:
                x = x + self.position[: x.shape[1]]
            x = _dropout(x, self.p, self.training)
        for layer in self.layers:
            x = layer(x)
        return self.head(x, target) if self.last else x


def build(model, dtype: torch.dtype = torch.float32, dropout: float | None = None, tp_group=None,
          stage: int = 0, stages: int = 1, seed: int = 0) -> Decoder:
    """The reference decoder for `model` (a `ddp_lab.plan.Transformer`), or one pipeline stage of it.

    Args:
        model: the shape; every field is honoured (GQA, SwiGLU, RMSNorm, biases, RoPE, tying).
        dtype: parameter dtype (activations follow it; the cross-entropy runs in fp32).
        dropout: probability; default `DEFAULT_DROPOUT` (0.0 if the shape says `dropout=False`).
        tp_group: a process group for Megatron-style tensor parallelism (None: no TP).
        stage, stages: build pipeline stage `stage` of `stages` equal ones (layers must divide).
        seed: weights are drawn from this seed, so every rank of a group builds the same model.

    With one stage and no TP, `sum(p.numel() for p in build(m).parameters()) == m.parameters()`.

    Example:
        >>> from ddp_lab.plan import Transformer
        >>> shape = Transformer("tiny", layers=2, hidden=64, heads=4, vocab=128, seq_len=32)
        >>> sum(p.numel() for p in build(shape).parameters()) == shape.parameters()
        True

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    if stages < 1 or not 0 <= stage < stages:
        raise ValueError(f"stage must be in 0..stages-1, got stage={stage}, stages={stages}")
    if model.layers % stages:
        raise ValueError(f"layers={model.layers} must divide into {stages} equal pipeline stages")
    built = [field for field in ("moe", "latent") if getattr(model, field, None) is not None]
    built += ["mtp_layers"] if getattr(model, "mtp_layers", 0) else []
    if built:
        raise ValueError(f"{model.name} has {' and '.join(built)}: the reference decoder builds dense blocks with "
                         f"multi-head or grouped-query attention only, and no multi-token-prediction module")
    t, _ = group_size_and_rank(tp_group)
    if model.heads % t or model.kv_heads_ % t or model.ffn_ % t:
        raise ValueError(f"tp={t} must divide heads={model.heads}, kv_heads={model.kv_heads_} and "
                         f"ffn={model.ffn_}: each rank owns whole heads and an equal slice of the FFN")
    if dropout is None:
        dropout = DEFAULT_DROPOUT if getattr(model, "dropout", True) else 0.0
    per = model.layers // stages
    with torch.random.fork_rng():
        torch.manual_seed(seed * 1000 + stage)
        net = Decoder(model, dropout, tp_group, range(stage * per, (stage + 1) * per),
                      first=stage == 0, last=stage == stages - 1)
    return net.to(dtype)

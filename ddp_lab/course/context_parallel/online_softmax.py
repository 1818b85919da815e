"""Attention in blocks: a partial result is (output, log-sum-exp), and two partial results combine exactly.

A query row's softmax over keys split into blocks A and B is the softmax over A, reweighted
by A's share of the total: with lse_X = log(sum over X of exp(score)),

    lse = log(exp(lse_A) + exp(lse_B))        (computed as torch.logaddexp: no overflow)
    out = exp(lse_A - lse) * out_A + exp(lse_B - lse) * out_B

This is the online softmax (Milakov & Gimelshein, 2018, arXiv:1805.02867) that FlashAttention
(Dao et al., 2022, arXiv:2205.14135) runs over blocks in one GPU and Ring Attention (Liu et al.,
2023, arXiv:2310.01889) runs over blocks held by different ranks.

Shapes: q (..., sq, d), k and v (..., sk, d), out (..., sq, d), lse (..., sq).

Introduced in notebooks/15-long-sequences.ipynb.
"""

from __future__ import annotations

import math

import torch


def block_scores(q: torch.Tensor, k: torch.Tensor, causal: bool, scale: float | None = None) -> torch.Tensor:
    """The scaled scores q k^T of one block, with the causal triangle masked (-inf) on a diagonal block.

    `causal=True` only where the query block and the key block are the same positions (the
    diagonal of the causal mask); a key block entirely before the queries needs no mask
    (the block rules of Ring Attention's causal variant, Liu et al. 2023).

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale                      # (..., sq, d) @ (..., d, sk) -> (..., sq, sk)
    if causal:
        future = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))        # key j > query i: not seen
    return scores


def block_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of a query block to one key/value block: (output normalised within the block, lse).

    The unit FlashAttention (Dao et al., 2022) and Ring Attention (Liu et al., 2023) compute and combine.

    Example:
        >>> q, k, v = torch.randn(3, 1, 4, 8).unbind(0)
        >>> out, lse = block_attention(q, k, v, causal=True)
        >>> out.shape, lse.shape
        (torch.Size([1, 4, 8]), torch.Size([1, 4]))

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    scores = block_scores(q, k, causal, scale)
    lse = scores.logsumexp(dim=-1)                                 # (..., sq): log of the row's softmax denominator
    return torch.exp(scores - lse.unsqueeze(-1)) @ v, lse


def combine(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor,
            lse_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two partial attention results of the same queries (over disjoint keys) as one: (out, lse).

    Each output was normalised over its own keys; the combined one weighs each by its share
    exp(lse_x - lse) of the total, computed without exponentiating a large lse (online softmax,
    Milakov & Gimelshein 2018; the ring's combine in Liu et al. 2023).

    Example:
        >>> q, k, v = torch.randn(3, 4, 8).unbind(0)
        >>> out, lse = combine(*block_attention(q, k[:2], v[:2]), *block_attention(q, k[2:], v[2:]))
        >>> torch.allclose(out, torch.softmax(q @ k.T / 8 ** 0.5, -1) @ v, atol=1e-6)
        True

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse).unsqueeze(-1) * out_a + torch.exp(lse_b - lse).unsqueeze(-1) * out_b, lse


def block_attention_backward(q, k, v, out, lse, grad_out, causal: bool = False, scale: float | None = None):
    """One block's share of dL/dq, dL/dk, dL/dv, given the FINAL out and lse of the query rows.

    With the final lse, exp(scores - lse) are the block's entries of the true softmax, so each
    block's gradients are exact on their own and simply add up (FlashAttention's backward, Dao et
    al. 2022, Algorithm 4; what Ring Attention runs per block). Nothing quadratic was stored:
    the block's scores are recomputed here.

    Returns:
        (grad_q, grad_k, grad_v) of this block.

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    probs = torch.exp(block_scores(q, k, causal, scale) - lse.unsqueeze(-1))   # (..., sq, sk)
    grad_v = probs.transpose(-2, -1) @ grad_out                               # (..., sk, d)
    grad_probs = grad_out @ v.transpose(-2, -1)                               # (..., sq, sk)
    # softmax's backward: dS = P * (dP - rowsum(dO * O)), the row sum taken over the whole row
    grad_scores = probs * (grad_probs - (grad_out * out).sum(dim=-1, keepdim=True))
    return grad_scores @ k * scale, grad_scores.transpose(-2, -1) @ q * scale, grad_v

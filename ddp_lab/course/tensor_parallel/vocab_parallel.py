"""The vocabulary split over a tensor-parallel group: the word embedding and the cross-entropy.

With V in the tens of thousands the embedding and the output projection are the largest
matrices of a model. Megatron-LM (Shoeybi et al. 2019, arXiv:1909.08053, Sec. 3) gives each of
the t ranks V/t rows: the embedding looks up only its own rows and g sums the ranks' partial
lookups; the output projection makes logits for V/t words only, and the cross-entropy is
computed from those shards with three all-reduces of b·s values (the row maximum, the target's
logit, the sum of exponentials), never gathering the b·s·V logits.

Lesson 08 shows the idea with DTensor (`loss_parallel`: vocabulary-sharded logits, never
gathered); these hand-written versions build the planner's reference model
(ddp_lab/plan/reference.py), whose bytes and time lesson 13 measures.

Introduced in notebooks/08-tensor-parallelism.ipynb (the vocabulary-parallel loss).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ddp_lab.course.tensor_parallel.communications import reduce_from_model_parallel_region


def group_size_and_rank(group) -> tuple[int, int]:
    """(tp size, tp rank) of a group; (1, 0) without one (None: no tensor parallelism)."""
    return (1, 0) if group is None else (dist.get_world_size(group), dist.get_rank(group))


class VocabParallelEmbedding(nn.Module):
    """Word embedding whose V rows are split over the TP group (this rank: rows [start, start + V/t)).

    Introduced in notebooks/08-tensor-parallelism.ipynb.
    """

    def __init__(self, vocab: int, hidden: int, tp_group=None):
        super().__init__()
        t, r = group_size_and_rank(tp_group)
        if vocab % t:
            raise ValueError(f"vocab={vocab} must divide by the tensor-parallel size {t} here "
                             "(each rank owns vocab/t rows); choose a vocabulary that divides")
        self.group, self.rows = tp_group, vocab // t
        self.start = r * self.rows
        self.weight = nn.Parameter(torch.randn(self.rows, hidden) * 0.02)

    def forward(self, ids):
        if self.group is None:
            return F.embedding(ids, self.weight)
        outside = (ids < self.start) | (ids >= self.start + self.rows)   # another rank's words
        local = (ids - self.start).masked_fill(outside, 0)
        partial = F.embedding(local, self.weight).masked_fill(outside.unsqueeze(-1), 0.0)
        return reduce_from_model_parallel_region(partial, self.group)   # each word from its owner


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy over logits split by vocabulary: saves the fp32 softmax, 4 sbV/t bytes."""

    @staticmethod
    def forward(ctx, logits, target, start, group):
        logits = logits.float()
        top = logits.max(dim=-1).values
        dist.all_reduce(top, op=dist.ReduceOp.MAX, group=group)          # 1: the row maximum
        shifted = logits - top.unsqueeze(-1)
        outside = (target < start) | (target >= start + logits.shape[-1])
        local = (target - start).masked_fill(outside, 0)
        picked = shifted.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        dist.all_reduce(picked, group=group)                             # 2: the target's logit
        exp = shifted.exp_()
        total = exp.sum(dim=-1)
        dist.all_reduce(total, group=group)                              # 3: the sum of exponentials
        loss = (total.log() - picked).mean()
        softmax = exp.div_(total.unsqueeze(-1))
        ctx.save_for_backward(softmax, local, outside)
        return loss

    @staticmethod
    def backward(ctx, grad):
        softmax, local, outside = ctx.saved_tensors
        out = softmax.clone()                                            # d loss / d logits = softmax - one-hot
        flat = out.view(-1, out.shape[-1])
        rows = torch.arange(flat.shape[0])
        flat[rows, local.view(-1)] -= (~outside).view(-1).to(out.dtype)
        return out * (grad / local.numel()), None, None, None


def vocab_parallel_cross_entropy(logits: torch.Tensor, target: torch.Tensor, start: int, group) -> torch.Tensor:
    """Mean cross-entropy of (b, s, V/t) logit shards, this rank's words starting at `start`.

    Introduced in notebooks/08-tensor-parallelism.ipynb.
    """
    return _VocabParallelCrossEntropy.apply(logits, target, start, group)

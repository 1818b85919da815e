"""Megatron-LM's two tensor-parallel operators, f and g: the only communication a TP layer needs.

A column-parallel linear followed by a row-parallel one (an MLP, or attention's heads then its
output projection) computes, on each of the t ranks of a tensor-parallel group, a partial sum
of the layer's output. Shoeybi et al. 2019 (arXiv:1909.08053, Sec. 3, Fig. 3) wrap such a pair
in two conjugate operators:

- f, before the pair: identity forward, all-reduce of the input's gradient backward (each rank
  saw the whole input and computed its own share of the gradient);
- g, after the pair: all-reduce of the partial outputs forward, identity backward.

Megatron-LM calls them `copy_to_tensor_model_parallel_region` and
`reduce_from_tensor_model_parallel_region` (megatron/core/tensor_parallel/mappings.py). Both
all-reduce in place, as Megatron does: the tensor is an intermediate nobody else holds.

Introduced in notebooks/08-tensor-parallelism.ipynb (written by hand in its exercise 2).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class CopyToModelParallelRegion(torch.autograd.Function):
    """f: identity forward; all-reduce of the gradient over `group` backward (default: the whole world)."""

    @staticmethod
    def forward(ctx, x, group=None):
        ctx.group = group
        return x.view_as(x)   # a view: the next matmul saves the same storage, nothing new

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class ReduceFromModelParallelRegion(torch.autograd.Function):
    """g: all-reduce of the partial sums over `group` forward; identity backward."""

    @staticmethod
    def forward(ctx, x, group=None):
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_model_parallel_region(x: torch.Tensor, group=None) -> torch.Tensor:
    """f(x) on `group` (see the module docstring).

    Introduced in notebooks/08-tensor-parallelism.ipynb.
    """
    return CopyToModelParallelRegion.apply(x, group)


def reduce_from_model_parallel_region(x: torch.Tensor, group=None) -> torch.Tensor:
    """g(x) on `group` (see the module docstring).

    Introduced in notebooks/08-tensor-parallelism.ipynb.
    """
    return ReduceFromModelParallelRegion.apply(x, group)

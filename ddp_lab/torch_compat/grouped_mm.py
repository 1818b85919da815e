"""Grouped matrix multiply (one matmul per expert, in one call) on every torch, and whether it runs on CPU here.

Which versions differ, and why the branches exist:
- `torch.nn.functional.grouped_mm` is the public name in newer torch (2.13 has it);
  `torch._grouped_mm` is the older, private one (torch 2.8 has only that): `grouped_mm`.
- torch 2.8's `_grouped_mm` has CUDA kernels only ("Could not run 'aten::_grouped_mm' with
  arguments from the 'CPU' backend"); 2.13 runs it on CPU, forward and backward. Rather than
  name the first version that does, `grouped_mm_cpu_skip_reason` tries one tiny call.

Introduced in notebooks/14-mixture-of-experts.ipynb.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F


def grouped_mm(rows: torch.Tensor, weights: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """rows (n, a) @ weights (G, a, b), group g taking rows offs[g-1]:offs[g] (offs: int32 running ends).

    Why a helper: the public `F.grouped_mm` is new; older torch has the private
    `torch._grouped_mm` with the same arguments.

    Example:
        >>> grouped_mm(torch.randn(6, 8), torch.randn(3, 8, 4), torch.tensor([2, 4, 6], dtype=torch.int32)).shape
        torch.Size([6, 4])

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    function = getattr(F, "grouped_mm", None) or torch._grouped_mm
    return function(rows, weights, offs=offs)


@functools.cache
def grouped_mm_cpu_skip_reason() -> str | None:
    """None when this torch runs `grouped_mm` on CPU tensors (forward and backward), else why not.

    Tries one tiny grouped multiply with a gradient; measured: torch 2.8.0 skips (no CPU
    kernel), torch 2.13.0 runs. On a GPU machine the same call on CUDA tensors needs a
    recent GPU (the kernels target Hopper and newer); this helper only speaks for the CPU.

    Example:
        >>> reason = grouped_mm_cpu_skip_reason()
        >>> print(f"skipped: {reason}") if reason else ...

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    if not (hasattr(F, "grouped_mm") or hasattr(torch, "_grouped_mm")):
        return f"torch {torch.__version__} has no grouped_mm"
    rows = torch.ones(4, 4, requires_grad=True)
    try:
        out = grouped_mm(rows, torch.ones(2, 4, 4), torch.tensor([1, 4], dtype=torch.int32))
        out.backward(torch.ones_like(out))   # a dense gradient: .sum().backward()'s expanded one is refused
    except (NotImplementedError, RuntimeError) as error:
        first_sentence = str(error).strip().splitlines()[0].split(". ")[0].rstrip(".")
        return (f"torch {torch.__version__} cannot run grouped_mm on CPU tensors "
                f"({type(error).__name__}: {first_sentence})")
    return None

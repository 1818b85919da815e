"""A dynamic loss scaler for fp16 training whose decisions every rank shares.

fp16 keeps 5 exponent bits: gradients below 2^-24 flush to zero. Multiplying the loss by a
scale `S` multiplies every gradient by `S` (the chain rule), lifting small ones into range;
the optimizer must then see `grad / S`. When a scaled gradient overflows (inf or nan), the step
is skipped and `S` halved; after `growth_interval` good steps `S` doubles (Micikevicius et al.,
2018, "Mixed Precision Training", arXiv:1710.03740, Sec. 3.2; `torch.amp.GradScaler`).

Under data parallelism with gradients *sharded* (FSDP, ZeRO-2/3) or split (tensor parallelism),
each rank sees only its part of the gradients, so an overflow can be visible on one rank alone.
The skip must be decided together (an all-reduce of the found-inf flag: MAX here; torch's
`ShardedGradScaler` sums it, which gives the same verdict), and so must the clipping norm (an
all-reduce of the squared norms): otherwise ranks apply different updates to one model. Clipping
needs unscaled gradients: clipping scaled ones compares `S · ‖g‖` with the threshold.

With no process group (one process) every function works on its own gradients.

Introduced in notebooks/17-compile-and-low-precision.ipynb.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def found_inf_on_any_rank(grads: Iterable[torch.Tensor]) -> bool:
    """Whether any rank's gradients hold an inf or nan: this rank's flag all-reduced with MAX.

    Example:
        >>> found_inf_on_any_rank([torch.tensor([1.0, float("inf")])])
        True

    Introduced in notebooks/17-compile-and-low-precision.ipynb.
    """
    flag = torch.zeros(1)
    for grad in grads:
        if not torch.isfinite(grad).all():
            flag.fill_(1.0)
    if _distributed():
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)   # one rank's overflow is every rank's
    return bool(flag.item())


def global_grad_norm(grads: Iterable[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of the whole model's gradient when each rank holds a disjoint shard of it.

    sqrt(sum over ranks of the squared norm of each shard): an all-reduce of one number.

    Introduced in notebooks/17-compile-and-low-precision.ipynb.
    """
    squares = torch.zeros(1, dtype=torch.float64)
    for grad in grads:
        squares += grad.double().pow(2).sum()
    if _distributed():
        dist.all_reduce(squares)                     # shards are disjoint: squared norms add
    return squares.sqrt().float()


def clip_sharded_(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale sharded gradients in place so the global norm is at most `max_norm`; returns the norm before.

    Same rule as `torch.nn.utils.clip_grad_norm_` (coefficient max_norm / (norm + 1e-6), capped
    at 1), with the norm over every rank's shard.

    Introduced in notebooks/17-compile-and-low-precision.ipynb.
    """
    norm = global_grad_norm(grads)
    coefficient = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for grad in grads:
        grad.mul_(coefficient)
    return norm


class AgreedLossScaler:
    """fp16 loss scaling whose skip decision and clipping norm are the same on every rank.

    Usage, on each rank, with `params` this rank's shard:

        (scaler.scale * loss).backward()
        stepped = scaler.unscale_clip_and_step(params, optimizer, max_norm=1.0)

    Example:
        >>> scaler = AgreedLossScaler(scale=2.0 ** 16)
        >>> scaler.update(found_inf=True); scaler.scale
        32768.0

    Introduced in notebooks/17-compile-and-low-precision.ipynb.
    """

    def __init__(self, scale: float = 2.0 ** 16, growth_interval: int = 2000, factor: float = 2.0):
        self.scale, self.growth_interval, self.factor = float(scale), growth_interval, factor
        self.good_steps = 0

    def update(self, found_inf: bool) -> None:
        """Halve the scale after an overflow; double it after `growth_interval` steps without one."""
        if found_inf:
            self.scale /= self.factor
            self.good_steps = 0
            return
        self.good_steps += 1
        if self.good_steps == self.growth_interval:
            self.scale *= self.factor
            self.good_steps = 0

    def unscale_clip_and_step(self, params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer,
                              max_norm: float | None = None) -> bool:
        """Unscale the gradients, skip on any rank's overflow, else clip (global norm) and step.

        Returns whether the optimizer stepped; updates the scale either way.
        """
        grads = [p.grad for p in params if p.grad is not None]
        for grad in grads:
            grad.div_(self.scale)                    # unscale first: the optimizer and clipping want true gradients
        found_inf = found_inf_on_any_rank(grads)
        self.update(found_inf)
        if found_inf:
            return False
        if max_norm is not None:
            clip_sharded_(grads, max_norm)
        optimizer.step()
        return True

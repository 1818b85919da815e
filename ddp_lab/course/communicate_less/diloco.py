"""DiLoCo's outer step: average the pseudo-gradients, then take one outer Nesterov SGD step.

Every replica keeps a copy of the global parameters from the last synchronisation and trains
its own model for H inner steps with AdamW. Then the **pseudo-gradient** `Δ = θ_global − θ_local`
(pointing the way a gradient does: minus the progress) is averaged over the replicas and given
to an outer optimizer that owns the global parameters: SGD with Nesterov momentum. The inner
AdamW state stays on each replica and is never sent; the outer momentum lives across rounds.
Douillard et al., "DiLoCo: Distributed Low-Communication Training of Language Models" (2023,
arXiv:2311.08105, Algorithm 1): outer learning rate 0.7, momentum 0.9, H = 500 inner steps,
8 replicas.

The pseudo-gradients may travel in fewer bits (`wire`): bf16 (all-reduced in bf16) or int8 with
one float32 scale per tensor (all-gathered, then averaged in float32: int8 sums overflow).

Introduced in notebooks/16-communicate-less.ipynb.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ddp_lab.course.communicate_less.local_sgd import world

WIRES = ("fp32", "bf16", "int8")
PAPER = {"outer_lr": 0.7, "momentum": 0.9, "inner_steps": 500, "replicas": 8}   # Douillard et al. 2023


def quantize_int8(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-tensor int8: `(q, scale)` with `tensor ≈ q * scale`, |q| <= 127.

    Introduced in notebooks/16-communicate-less.ipynb.
    """
    scale = tensor.abs().max().clamp(min=torch.finfo(torch.float32).tiny) / 127
    return torch.round(tensor / scale).clamp(-127, 127).to(torch.int8), scale.reshape(1).float()


def average_over_replicas(tensors: list[torch.Tensor], wire: str = "fp32") -> list[torch.Tensor]:
    """The mean of each tensor over the replicas, all sent in one message as `wire`; float32 results.

    'fp32' and 'bf16': one all-reduce of the tensors flattened into one vector (as DDP's buckets).
    'int8': each tensor quantized with its own scale, then one all-gather of the int8 values and
    one of the scales (int8 sums would overflow: the sum is taken in float32 after the gather).

    Introduced in notebooks/16-communicate-less.ipynb.
    """
    if wire not in WIRES:
        raise ValueError(f"wire must be one of {WIRES}; got {wire!r}.")
    replicas, sizes = world(), [t.numel() for t in tensors]
    if wire == "int8":
        pairs = [quantize_int8(t.reshape(-1)) for t in tensors]
        values, scales = torch.cat([q for q, _ in pairs]), torch.cat([s for _, s in pairs])
        every = ([values], [scales])
        if replicas > 1:
            every = ([torch.empty_like(values) for _ in range(replicas)],
                     [torch.empty_like(scales) for _ in range(replicas)])
            dist.all_gather(every[0], values)
            dist.all_gather(every[1], scales)
        scale_per_value = [s.repeat_interleave(torch.tensor(sizes)) for s in every[1]]
        flat = sum(q.float() * s for q, s in zip(every[0], scale_per_value)) / replicas
    else:
        flat = torch.cat([t.reshape(-1) for t in tensors]).to(torch.bfloat16 if wire == "bf16" else torch.float32)
        if replicas > 1:
            dist.all_reduce(flat)
        flat = flat.float() / replicas
    return [part.reshape(t.shape) for part, t in zip(flat.split(sizes), tensors)]


class DiLoCo:
    """The outer half of DiLoCo for a list of parameters: global copy, outer Nesterov SGD, the sync.

    Args:
        params: the replica's parameters (trained by the inner optimizer between syncs).
        outer_lr, momentum: the outer SGD's; the paper's 0.7 and 0.9 by default.
        wire: how pseudo-gradients travel: 'fp32', 'bf16' or 'int8'.

    Example:
        >>> outer = DiLoCo(list(model.parameters()))
        >>> for step in range(steps):
        ...     inner_step(model)                       # AdamW on this replica's data
        ...     if (step + 1) % H == 0:
        ...         outer.sync()                        # every replica, the same step

    Introduced in notebooks/16-communicate-less.ipynb.
    """

    def __init__(self, params, outer_lr: float = PAPER["outer_lr"], momentum: float = PAPER["momentum"],
                 wire: str = "fp32"):
        if wire not in WIRES:
            raise ValueError(f"wire must be one of {WIRES}; got {wire!r}.")
        self.params = list(params)
        self.global_params = [p.detach().clone() for p in self.params]   # θ_global, the same on every replica
        self.outer = torch.optim.SGD(self.global_params, lr=outer_lr, momentum=momentum, nesterov=True)
        self.wire = wire

    @torch.no_grad()
    def sync(self) -> None:
        """Average Δ = θ_global − θ_local over the replicas, step the outer optimizer, restart every replica there."""
        deltas = [global_param - local for global_param, local in zip(self.global_params, self.params)]
        for global_param, averaged in zip(self.global_params, average_over_replicas(deltas, self.wire)):
            global_param.grad = averaged
        self.outer.step()                   # θ_global −= lr · (Nesterov-corrected momentum of the averaged Δ)
        self.outer.zero_grad(set_to_none=True)
        for global_param, local in zip(self.global_params, self.params):
            local.copy_(global_param)

    def state_dict(self) -> dict:
        """The global parameters and the outer momentum: what a recovering replica needs besides its model."""
        return {"global": [p.clone() for p in self.global_params], "outer": self.outer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        with torch.no_grad():
            for param, saved in zip(self.global_params, state["global"]):
                param.copy_(saved)
        self.outer.load_state_dict(state["outer"])


def bytes_per_sync(params, wire: str = "fp32") -> int:
    """Bytes one replica hands to the collectives in one DiLoCo sync (int8: one float32 scale per tensor).

    Introduced in notebooks/16-communicate-less.ipynb.
    """
    per_value = {"fp32": 4, "bf16": 2, "int8": 1}[wire]
    params = list(params)
    return sum(p.numel() * per_value for p in params) + (4 * len(params) if wire == "int8" else 0)   # + scales

"""A mixture-of-experts layer in one process: the reference every expert-parallel version must equal.

    y = x + Σ_{kept assignments (t, e)} gate(t, e) · expert_e(x_t)

Router (`router.py`), capacity and dropped assignments (`capacity.py`), the load-balancing
loss (`aux_loss.py`), and small MLP experts. With `groups=G` the batch is G groups of tokens,
each with its own capacity and auxiliary loss (GShard's groups; under expert parallelism each
rank's tokens are one group), so the reference matches a run on G ranks exactly.

Shazeer et al. 2017 (arXiv:1701.06538) introduced the sparsely-gated layer; the Switch
Transformer (k = 1) and GShard (k = 2) gave it the form used here.

Introduced in notebooks/14-mixture-of-experts.ipynb.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ddp_lab.course.expert_parallel.aux_loss import load_balancing_loss
from ddp_lab.course.expert_parallel.capacity import expert_capacity, keep_within_capacity
from ddp_lab.course.expert_parallel.router import Routing, route_top_k


class ExpertMLP(nn.Module):
    """One expert: the transformer's MLP, hidden -> ffn -> hidden, GELU, no biases (as Mixtral's experts)."""

    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.w_in = nn.Linear(hidden, ffn, bias=False)
        self.w_out = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:   # (n, h) -> (n, f) -> (n, h)
        return self.w_out(F.gelu(self.w_in(x)))


class MoEOutput(NamedTuple):
    """y: (T, h) the layer's output; aux_loss: the load-balancing loss (mean over groups, without α);
    kept: (T, k) which assignments their experts took; routing: the router's decision;
    received_counts: (W, E/W) rows each rank sent to my experts (expert parallel only, else None)."""

    y: torch.Tensor
    aux_loss: torch.Tensor
    kept: torch.Tensor
    routing: Routing
    received_counts: torch.Tensor | None = None


def route_and_keep(router: nn.Module, x: torch.Tensor, num_experts: int, k: int,
                   capacity_factor: float | None, groups: int = 1) -> tuple[Routing, torch.Tensor, torch.Tensor]:
    """Route T tokens, then apply capacity and the auxiliary loss per group: (routing, kept (T, k), aux loss).

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    routing = route_top_k(router(x), k)
    kept, losses = [], []
    for probs, expert in zip(routing.probs.chunk(groups), routing.expert.chunk(groups)):
        capacity = None if capacity_factor is None else expert_capacity(len(expert), num_experts, k, capacity_factor)
        kept.append(keep_within_capacity(expert, num_experts, capacity))
        losses.append(load_balancing_loss(probs, expert, num_experts))
    return routing, torch.cat(kept), torch.stack(losses).mean()


class MoELayer(nn.Module):
    """A mixture-of-experts MLP layer with a residual: top-k router, `num_experts` ExpertMLPs, capacity.

    Example:
        >>> layer = MoELayer(hidden=8, ffn=16, num_experts=4, k=2, capacity_factor=1.25)
        >>> out = layer(torch.randn(12, 8))
        >>> out.y.shape, out.kept.shape
        (torch.Size([12, 8]), torch.Size([12, 2]))

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """

    def __init__(self, hidden: int, ffn: int, num_experts: int, k: int, capacity_factor: float | None = None):
        super().__init__()
        self.num_experts, self.k, self.capacity_factor = num_experts, k, capacity_factor
        self.router = nn.Linear(hidden, num_experts, bias=False)
        self.experts = nn.ModuleList(ExpertMLP(hidden, ffn) for _ in range(num_experts))

    def forward(self, x: torch.Tensor, groups: int = 1) -> MoEOutput:   # x: (T, h), T divisible by groups
        routing, kept, aux_loss = route_and_keep(self.router, x, self.num_experts, self.k,
                                                 self.capacity_factor, groups)
        token_index, slot = kept.nonzero(as_tuple=True)        # the kept assignments, token by token
        expert, gates = routing.expert[token_index, slot], routing.gates[token_index, slot]
        y = x
        for e, expert_mlp in enumerate(self.experts):
            mine = expert == e
            rows = token_index[mine]
            y = y.index_add(0, rows, gates[mine].unsqueeze(-1) * expert_mlp(x[rows]))
        return MoEOutput(y, aux_loss, kept, routing)

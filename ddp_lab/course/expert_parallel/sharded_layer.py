"""The mixture-of-experts layer under expert parallelism: my experts only, tokens moved by all-to-all.

Every rank of the expert-parallel group holds the router (replicated) and E/W of the
experts, and routes its own tokens (one GShard group per rank: capacity and the auxiliary
loss are per rank). Then dispatch, my experts on what arrived, combine (`dispatch.py`). The
output, the input gradient and each expert's gradient equal `MoELayer(x_all, groups=W)` on
the concatenated tokens of all ranks (lesson 14 asserts it).

Introduced in notebooks/14-mixture-of-experts.ipynb.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn as nn

from ddp_lab.course.expert_parallel.dispatch import combine, dispatch
from ddp_lab.course.expert_parallel.layer import MoELayer, MoEOutput, route_and_keep


def experts_of_rank(rank: int, num_experts: int, world_size: int) -> range:
    """The experts rank `rank` owns: E/W consecutive ones.

    Example:
        >>> list(experts_of_rank(1, num_experts=8, world_size=4))
        [2, 3]

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    if num_experts % world_size:
        raise ValueError(f"{num_experts} experts cannot be spread evenly over {world_size} ranks: "
                         "choose a number of experts divisible by the expert-parallel size.")
    per_rank = num_experts // world_size
    return range(rank * per_rank, (rank + 1) * per_rank)


def run_local_experts(received: torch.Tensor, received_counts: torch.Tensor, experts: nn.ModuleList) -> torch.Tensor:
    """Each received row through its expert. Rows arrive per source rank, each block grouped by local expert.

    Sorting by local expert makes each expert's rows one contiguous chunk (what a grouped
    matrix multiply wants); the outputs are put back in arrival order for `combine`.

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    world_size, per_rank = received_counts.shape
    local_expert = torch.arange(per_rank, device=received.device).repeat(world_size)   # per (source, expert) block
    local_expert = local_expert.repeat_interleave(received_counts.flatten())           # per received row
    by_expert = torch.argsort(local_expert, stable=True)
    chunks = received[by_expert].split(received_counts.sum(dim=0).tolist())
    outputs = torch.cat([expert(chunk) for expert, chunk in zip(experts, chunks)])
    return outputs[by_expert.argsort()]


class ExpertParallelMoE(nn.Module):
    """`MoELayer` with its experts spread over the ranks of `group`: this rank keeps the router and its E/W experts.

    Example:
        >>> ep_layer = ExpertParallelMoE(layer, group=None)        # inside a rank; layer: the same MoELayer everywhere
        >>> out = ep_layer(my_tokens)                              # (T/W, h) -> out.y (T/W, h)

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """

    def __init__(self, layer: MoELayer, group=None):
        super().__init__()
        self.group = group
        self.num_experts, self.k, self.capacity_factor = layer.num_experts, layer.k, layer.capacity_factor
        self.expert_ids = experts_of_rank(dist.get_rank(group), layer.num_experts, dist.get_world_size(group))
        self.router = copy.deepcopy(layer.router)
        self.experts = nn.ModuleList(copy.deepcopy(layer.experts[e]) for e in self.expert_ids)

    def forward(self, x: torch.Tensor) -> MoEOutput:   # x: (T/W, h), this rank's tokens
        routing, kept, aux_loss = route_and_keep(self.router, x, self.num_experts, self.k, self.capacity_factor)
        token_index, slot = kept.nonzero(as_tuple=True)
        sent = dispatch(x[token_index], routing.expert[token_index, slot], self.num_experts, self.group)
        expert_output = run_local_experts(sent.received, sent.received_counts, self.experts)
        y = combine(expert_output, sent, token_index, routing.gates[token_index, slot], x, self.group)
        return MoEOutput(y, aux_loss, kept, routing, sent.received_counts)

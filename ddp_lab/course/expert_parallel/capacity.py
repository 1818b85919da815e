"""Expert capacity: how many token assignments an expert takes per batch, and which ones it drops.

Fixed-size buffers per expert (Switch Transformer, Fedus et al. 2022, Sec. 2.2, Eq. 3):

    capacity = ceil(capacity_factor · k · tokens / experts)

A capacity factor of 1 is exactly the fair share; Switch trains with 1.0 to 2.0 (its Table 1
compares 1.0, 1.25 and 2.0). An expert asked for more takes the first `capacity` assignments in
queue order, GShard's (Lepikhin et al. 2020, Algorithm 1): every token's first choice queues
before any second choice, tokens in order within a choice. A dropped assignment contributes
nothing; the token still leaves the layer through the residual connection, y = x + ...

GShard counts capacity per *group* of tokens; under expert parallelism each rank's tokens are
one group, which is why the one-process reference splits its batch the same way.

Introduced in notebooks/14-mixture-of-experts.ipynb.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def expert_capacity(tokens: int, num_experts: int, k: int, capacity_factor: float) -> int:
    """Assignments one expert takes from `tokens` tokens routed to k of `num_experts` experts (Switch's Eq. 3, times k).

    Example:
        >>> expert_capacity(tokens=12, num_experts=8, k=2, capacity_factor=1.25)
        4

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    return math.ceil(capacity_factor * k * tokens / num_experts)


def keep_within_capacity(expert: torch.Tensor, num_experts: int, capacity: int | None) -> torch.Tensor:
    """(T, k) bool: which of the tokens' assignments `expert` (T, k) their experts take, at most `capacity` each.

    Queue order is GShard's: all first choices, then all second choices, tokens in order
    within a choice. `capacity=None` keeps everything (a "dropless" layer).

    Example:
        >>> keep_within_capacity(torch.tensor([[0], [0], [1]]), num_experts=2, capacity=1).flatten()
        tensor([ True, False,  True])

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    if capacity is None:
        return torch.ones_like(expert, dtype=torch.bool)
    tokens, k = expert.shape
    queue = F.one_hot(expert.t().reshape(-1), num_experts)        # (k·T, E): choice-major queue order
    position = ((queue.cumsum(dim=0) - 1) * queue).sum(dim=-1)    # each assignment's place in its expert's queue
    return (position < capacity).reshape(k, tokens).t()

"""The router of a mixture-of-experts layer: softmax top-k gating.

A linear layer scores every expert for every token; the softmax of the scores gives each
token a probability per expert, and the token goes to its k most probable experts, each
output weighted by a gate:

- k = 1, the Switch Transformer (Fedus, Zoph and Shazeer, JMLR 2022, arXiv:2101.03961,
  Sec. 2.1): the gate is the chosen expert's probability p_i(x), so the router still gets a
  gradient through it;
- k = 2, GShard (Lepikhin et al. 2020, arXiv:2006.16668, Algorithm 1) and Mixtral (Jiang et
  al. 2024, arXiv:2401.04088, Sec. 2.1): the two probabilities renormalised to sum to 1
  (Mixtral's softmax over the top-2 logits is the same number).

Introduced in notebooks/14-mixture-of-experts.ipynb.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Routing(NamedTuple):
    """What the router decided for T tokens and E experts.

    probs: (T, E) the softmax over all experts (the load-balancing loss reads it);
    expert: (T, k) each token's chosen experts, most probable first;
    gates: (T, k) the weight of each chosen expert's output.
    """

    probs: torch.Tensor
    expert: torch.Tensor
    gates: torch.Tensor


def route_top_k(logits: torch.Tensor, k: int) -> Routing:
    """Softmax top-k gating of router scores `logits` (T, E): Switch's for k = 1, GShard's and Mixtral's for k = 2.

    Example:
        >>> route_top_k(torch.tensor([[2.0, 0.0, 1.0]]), k=2).expert
        tensor([[0, 2]])

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    probs = logits.softmax(dim=-1)                      # (T, E)
    top, expert = probs.topk(k, dim=-1)                 # (T, k) each
    gates = top if k == 1 else top / top.sum(dim=-1, keepdim=True)   # k > 1: renormalised over the chosen k
    return Routing(probs, expert, gates)

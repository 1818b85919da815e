"""The load-balancing auxiliary loss of the Switch Transformer (and GShard's, in the same form).

Fedus et al. 2022 (arXiv:2101.03961, Sec. 2.2, Eqs. 4-6): with N experts, f_i the fraction of
tokens whose first choice is expert i and P_i the mean router probability of expert i,

    loss = α · N · Σ_i f_i · P_i,       α = 10⁻² in the paper.

It is 1 when routing is uniform and grows to N when every token picks the same expert. f
is a count (no gradient); P carries the gradient that pushes probability away from the
experts that get too many tokens. GShard's l_aux (Lepikhin et al. 2020, Algorithm 1) is the
same product of first-choice fractions and mean gates.

Introduced in notebooks/14-mixture-of-experts.ipynb.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def load_balancing_loss(probs: torch.Tensor, expert: torch.Tensor, num_experts: int) -> torch.Tensor:
    """N · Σ_i f_i · P_i for router probabilities `probs` (T, E) and choices `expert` (T, k); times α is yours.

    Example:
        >>> load_balancing_loss(torch.full((4, 2), 0.5), torch.tensor([[0], [1], [0], [1]]), 2)
        tensor(1.)

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    fraction = F.one_hot(expert[:, 0], num_experts).float().mean(dim=0)   # f_i: first choices, a count
    mean_prob = probs.mean(dim=0)                                          # P_i: differentiable
    return num_experts * (fraction * mean_prob).sum()

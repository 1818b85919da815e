"""Expert parallelism's communication: dispatch token rows to the ranks that own their experts, combine them back.

E experts are spread over the W ranks of a group, E/W consecutive experts per rank (rank r
owns experts r·E/W ... (r+1)·E/W − 1). Every rank routes its own tokens, then:

1. **dispatch**: sort its rows by expert (so by owning rank), tell every rank how many rows
   of each of its experts are coming (an all-to-all of counts, because a receiver cannot know
   this by itself), then send the rows with one `all_to_all_single` whose split sizes differ
   per rank;
2. the owners run their experts on what they received;
3. **combine**: the outputs go back with the reverse all-to-all (the split sizes swapped),
   are put back in token order, weighted by the gates and added to the residual: a token
   whose assignments were all dropped leaves the layer as it came in.

GShard (Lepikhin et al. 2020, arXiv:2006.16668, Sec. 3.2) introduced the dispatch/combine
all-to-all pair; DeepSpeed-MoE (Rajbhandari et al. 2022) and torchtitan's expert parallel do
the same with uneven splits. `all_to_all_single` takes uneven splits on gloo in every torch
the course supports (the list form `dist.all_to_all` does not: TORCH-FACTS).

Introduced in notebooks/14-mixture-of-experts.ipynb (dispatch and combine are its exercises 1 and 2).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.distributed as dist


def _all_to_all_rows(rows: torch.Tensor, output_split_sizes: list[int], input_split_sizes: list[int],
                     group) -> torch.Tensor:
    received = rows.new_empty((sum(output_split_sizes), *rows.shape[1:]))
    dist.all_to_all_single(received, rows.contiguous(), output_split_sizes, input_split_sizes, group=group)
    return received


class AllToAll(torch.autograd.Function):
    """`all_to_all_single` of rows with uneven splits, differentiable.

    Forward sends `input_split_sizes[j]` rows to rank j and receives `output_split_sizes[j]`
    from it; backward sends each row's gradient back the way the row came: the same
    collective with the two split lists swapped.
    """

    @staticmethod
    def forward(ctx, rows, output_split_sizes, input_split_sizes, group):
        ctx.splits, ctx.group = (output_split_sizes, input_split_sizes), group
        return _all_to_all_rows(rows, output_split_sizes, input_split_sizes, group)

    @staticmethod
    def backward(ctx, grad):
        output_split_sizes, input_split_sizes = ctx.splits
        return _all_to_all_rows(grad, input_split_sizes, output_split_sizes, ctx.group), None, None, None


def all_to_all(rows: torch.Tensor, output_split_sizes: list[int], input_split_sizes: list[int],
               group=None) -> torch.Tensor:
    """Send `input_split_sizes[j]` consecutive rows to rank j, receive `output_split_sizes[j]` from it (autograd-aware).

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    return AllToAll.apply(rows, list(output_split_sizes), list(input_split_sizes), group)


def exchange_counts(rows_per_expert: torch.Tensor, group=None) -> torch.Tensor:
    """Rows I send to each of the E experts (E,) -> rows each rank sends to each of my E/W experts, (W, E/W).

    One all-to-all with equal splits: rank j gets the E/W counts of its own experts from
    every rank. It must come first: the receiver sizes its buffer and its split sizes from it.

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    world_size = dist.get_world_size(group)
    received = torch.empty_like(rows_per_expert)
    dist.all_to_all_single(received, rows_per_expert, group=group)
    return received.view(world_size, -1)


class Dispatched(NamedTuple):
    """What `dispatch` returns, and what `combine` needs to send everything back.

    received: (R, h) the rows this rank's experts must process: rank 0's rows first, then
        rank 1's, ...; within each rank's block, grouped by my local expert;
    received_counts: (W, E/W) how many rows rank s sent for my local expert e;
    sent_counts: (W,) how many rows I sent to each rank;
    order: (m,) the permutation that sorted my rows by expert (row `order[j]` went j-th).
    """

    received: torch.Tensor
    received_counts: torch.Tensor
    sent_counts: torch.Tensor
    order: torch.Tensor


def dispatch(rows: torch.Tensor, expert: torch.Tensor, num_experts: int, group=None) -> Dispatched:
    """Send each of my rows (m, h) to the rank owning `expert[i]`: counts first, then one uneven all-to-all.

    Example:
        >>> sent = dispatch(x[token_index], expert_of_row, num_experts=8)   # inside a rank
        >>> sent.received.shape[0] == int(sent.received_counts.sum())
        True

    Introduced in notebooks/14-mixture-of-experts.ipynb (its exercise 1).
    """
    world_size = dist.get_world_size(group)
    order = torch.argsort(expert, stable=True)                     # my rows grouped by expert, hence by owner
    rows_per_expert = torch.bincount(expert, minlength=num_experts)
    sent_counts = rows_per_expert.view(world_size, -1).sum(dim=1)  # (W,): experts are consecutive per rank
    received_counts = exchange_counts(rows_per_expert, group)      # (W, E/W): what each rank will send me
    received = all_to_all(rows[order], received_counts.sum(dim=1).tolist(), sent_counts.tolist(), group)
    return Dispatched(received, received_counts, sent_counts, order)


def combine(expert_output: torch.Tensor, dispatched: Dispatched, token_index: torch.Tensor,
            gates: torch.Tensor, x: torch.Tensor, group=None) -> torch.Tensor:
    """y = x + Σ gate · expert(x): send the expert outputs back, undo the sort, weight, add into their tokens.

    Args:
        expert_output: (R, h) my experts' outputs, row for row of `dispatched.received`.
        dispatched: what `dispatch` returned on this rank.
        token_index: (m,) the token of each of my dispatched rows, in the order I passed them.
        gates: (m,) their gate weights.
        x: (T, h) my tokens: the residual; tokens with no kept assignment come out unchanged.

    Introduced in notebooks/14-mixture-of-experts.ipynb (its exercise 2).
    """
    back = all_to_all(expert_output, dispatched.sent_counts.tolist(),   # the reverse trip: splits swapped
                      dispatched.received_counts.sum(dim=1).tolist(), group)
    rows = back[dispatched.order.argsort()]                            # argsort of a permutation undoes it
    return x.index_add(0, token_index, rows * gates.unsqueeze(-1))     # k > 1: a token's rows add up

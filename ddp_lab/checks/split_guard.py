"""Inside a rank: `all_to_all_single` that first checks, on every rank, that the split sizes fit together.

A wrong split list in a real `all_to_all_single` fails badly: sizes that do not add up raise
on some ranks while their peers wait in the collective (a hang), and sizes that add up but
disagree with what the peers send abort the process in gloo ("Received data size doesn't
match expected size"). For the checks of lesson 14 every call is guarded instead: the ranks
first exchange their `input_split_sizes` (what each will send to whom), each rank compares
them with its own `output_split_sizes` and its tensors' lengths, and one all-reduce tells
every rank whether any rank found a problem. Then every rank raises `SplitMismatch` together
(each with its own finding), or the real call runs. Each call is recorded (`SplitCall`), so a
check can say which call went wrong and why.

Introduced in exercises/14-mixture-of-experts.ipynb (its checks).
"""

from __future__ import annotations

import contextlib
from typing import Iterator, NamedTuple

import torch
import torch.distributed as dist

from ddp_lab.instruments.collectives import replacing_dist_calls

_ALL_REDUCE = dist.all_reduce   # the real one, whatever a check watches or replaces later


class SplitMismatch(RuntimeError):
    """Raised on every rank when some rank's all_to_all_single split sizes do not fit together."""


class SplitCall(NamedTuple):
    """One guarded all_to_all_single on this rank.

    input_shape: the input's shape; output_rows: dim 0 of the output; input_splits/output_splits: the
    split sizes as used (equal splits spelled out; None if they cannot be); peers_send: what
    each rank's input_split_sizes say it sends this rank; problem: this rank's finding, or None.
    """

    input_shape: tuple[int, ...]
    output_rows: int
    input_splits: list[int] | None
    output_splits: list[int] | None
    peers_send: list[int]
    problem: str | None


def _as_splits(sizes, tensor: torch.Tensor, world_size: int) -> list[int] | None:
    if sizes is None:
        rows = tensor.shape[0] if tensor.dim() else 0
        return [rows // world_size] * world_size if rows % world_size == 0 else None
    return [int(size) for size in sizes]


def _problem(input, output, input_splits, output_splits, peers_send, world_size) -> str | None:
    for name, tensor, splits in (("input", input, input_splits), ("output", output, output_splits)):
        rows = tensor.shape[0] if tensor.dim() else 0
        if splits is None:
            return (f"{name}_split_sizes=None asks for equal splits, but the {name} has {rows} rows, which "
                    f"{world_size} ranks cannot share equally")
        if len(splits) != world_size:
            return f"{name}_split_sizes={splits} has {len(splits)} entries; it needs one per rank, {world_size}"
        if sum(splits) != rows:
            return f"{name}_split_sizes={splits} add up to {sum(splits)}, but the {name} has {rows} rows"
    if output_splits != peers_send:
        return (f"output_split_sizes={output_splits}, but the ranks send this rank {peers_send} rows "
                "(their input_split_sizes)")
    if input.shape[1:] != output.shape[1:]:
        return f"the input's rows have shape {tuple(input.shape[1:])}, the output's {tuple(output.shape[1:])}"
    return None


def _guard(calls: list[SplitCall]):
    def make(original):
        def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                              async_op=False):
            if not (torch.is_tensor(input) and torch.is_tensor(output)):   # torch's own TypeError says which
                return original(output, input, output_split_sizes, input_split_sizes, group=group, async_op=async_op)
            world_size = dist.get_world_size(group)
            input_splits = _as_splits(input_split_sizes, input, world_size)
            output_splits = _as_splits(output_split_sizes, output, world_size)
            announced = input_splits if input_splits is not None and len(input_splits) == world_size else \
                [-1] * world_size
            peers = torch.empty(world_size, dtype=torch.int64)
            original(peers, torch.tensor(announced, dtype=torch.int64), group=group)
            peers_send = peers.tolist()
            problem = _problem(input, output, input_splits, output_splits, peers_send, world_size)
            calls.append(SplitCall(tuple(input.shape), output.shape[0] if output.dim() else 0,
                                   input_splits, output_splits, peers_send, problem))
            anyone = torch.tensor([int(problem is not None)])
            _ALL_REDUCE(anyone, op=dist.ReduceOp.MAX, group=group)
            if anyone.item():
                raise SplitMismatch(problem or "this rank's split sizes fit, but another rank's do not")
            return original(output, input, output_split_sizes, input_split_sizes, group=group, async_op=async_op)
        return all_to_all_single
    return make


@contextlib.contextmanager
def guarded_all_to_all() -> Iterator[list[SplitCall]]:
    """Inside a rank: guard every `dist.all_to_all_single` of the block; yields the list of `SplitCall`s.

    Example:
        >>> with guarded_all_to_all() as calls:       # inside a launched rank
        ...     dist.all_to_all_single(out, rows, [2, 1], [1, 2])
        >>> calls[0].peers_send
        [2, 1]

    Introduced in exercises/14-mixture-of-experts.ipynb (its checks).
    """
    calls: list[SplitCall] = []
    with replacing_dist_calls({"all_to_all_single": _guard(calls)}):
        yield calls

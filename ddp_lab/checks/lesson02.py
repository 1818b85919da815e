"""Checks for the exercises of notebooks/02-collectives.ipynb: collectives built from send/recv.

    ddp_lab.checks.lesson02.check_ring_all_reduce(ring_all_reduce)
    ddp_lab.checks.lesson02.check_ring_all_gather(ring_all_gather)

Each runs the answer on 3 gloo ranks (so sizes 10, 7, 2 do not divide evenly), with every
collective disabled inside the ranks, and a short timeout that turns a deadlock into a
message.

Introduced in notebooks/02-collectives.ipynb.
"""

from __future__ import annotations

import torch

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (call_case, describe, ensure_written, first_mismatch, only_point_to_point,
                                   run_on_ranks)

WORLD_SIZE = 3
REDUCE_SIZES = (12, 10, 7, 2)    # 12 divides by 3; the others do not; 2 < world size
GATHER_SIZES = (4, 1)


def rank_input(rank: int, size: int) -> torch.Tensor:
    """The tensor rank `rank` starts with in the checks (the same in the notebook and the ranks)."""
    generator = torch.Generator().manual_seed(1000 * size + rank)
    return torch.randn(size, generator=generator)


def _returned(value):
    return value.detach().clone() if torch.is_tensor(value) else value


def _all_reduce_runner(rank: int, fn, sizes, world_size: int):
    outputs = []
    with only_point_to_point():
        for size in sizes:
            tensor = rank_input(rank, size)
            out = call_case(fn, f"reducing a tensor of {size} elements on {world_size} ranks", tensor.clone())
            outputs.append(_returned(out))
    return outputs


def _all_gather_runner(rank: int, fn, sizes, world_size: int):
    outputs = []
    with only_point_to_point():
        for size in sizes:
            out = call_case(fn, f"gathering tensors of {size} elements on {world_size} ranks",
                            rank_input(rank, size).clone())
            outputs.append([_returned(t) for t in out] if isinstance(out, (list, tuple)) else _returned(out))
    return outputs


def check_ring_all_reduce(ring_all_reduce, world_size: int = WORLD_SIZE, timeout: float = 20.0) -> None:
    """Check a hand-built ring all-reduce that returns the element-wise MEAN over ranks.

    `ring_all_reduce(tensor)` runs on every rank with that rank's 1-D tensor and must
    return the mean of all ranks' tensors, using only send/recv (isend/irecv).

    Introduced in notebooks/02-collectives.ipynb.
    """
    ensure_written(ring_all_reduce)
    name = getattr(ring_all_reduce, "__name__", "ring_all_reduce")
    results = run_on_ranks(_all_reduce_runner, (ring_all_reduce, REDUCE_SIZES, world_size),
                           world_size, timeout, name)
    right_sizes = []
    for case, size in enumerate(REDUCE_SIZES):
        inputs = [rank_input(rank, size) for rank in range(world_size)]
        total = torch.stack(inputs).sum(0)
        for rank in range(world_size):
            _compare_reduction(results[rank][case], total / world_size, total, inputs[rank],
                               rank, size, world_size, right_sizes)
        right_sizes.append(size)
    passed(f"{name} returns the mean on {world_size} ranks for sizes "
           f"{', '.join(map(str, REDUCE_SIZES))}, using only send/recv")


def _compare_reduction(got, mean, total, own, rank, size, world_size, right_sizes) -> None:
    where = f"rank {rank}, tensor of {size} elements on {world_size} ranks"
    if not torch.is_tensor(got):
        raise CheckFailed(f"{where}: expected a tensor, got {describe(got)}.\n"
                          "Hint: return the reduced tensor at the end of the function.")
    if got.shape != mean.shape:
        raise CheckFailed(f"{where}: expected shape {tuple(mean.shape)}, got {tuple(got.shape)}.\n"
                          "Hint: return the whole reduced tensor (all chunks), not one chunk.")
    index = first_mismatch(got.float(), mean)
    if index is None:
        return
    element = index[0]
    message = (f"{where}, element {element}: expected the mean {mean[element].item():.6f}, "
               f"got {got[element].item():.6f}.")
    if first_mismatch(got.float(), total) is None:
        hint = (f"you returned the SUM over ranks; the exercise asks for the MEAN: divide by the "
                f"world size ({world_size}).")
    elif first_mismatch(got.float(), own) is None:
        hint = "the result is this rank's own input, unchanged: return the reduced tensor, not the input."
    elif size % world_size and right_sizes and right_sizes[0] % world_size == 0:
        wrong = (~torch.isclose(got.float(), mean, atol=1e-5, rtol=1e-5)).nonzero().flatten().tolist()
        hint = (f"size {right_sizes[0]} (divisible by {world_size}) was right, but {size} is not divisible "
                f"by {world_size} and elements {wrong} are wrong: the chunks must cover every element "
                f"even when they differ in size; torch.tensor_split(tensor, world_size) does that.")
    else:
        hint = ("after the reduce-scatter phase rank r must own the fully reduced chunk (r + 1) % "
                "world_size; check which chunk each step sends and which one it adds into.")
    raise CheckFailed(f"{message}\nHint: {hint}")


def check_ring_all_gather(ring_all_gather, world_size: int = WORLD_SIZE, timeout: float = 20.0) -> None:
    """Check a hand-built all-gather: `ring_all_gather(tensor)` returns a list whose entry k is rank k's tensor.

    Introduced in notebooks/02-collectives.ipynb.
    """
    ensure_written(ring_all_gather)
    name = getattr(ring_all_gather, "__name__", "ring_all_gather")
    results = run_on_ranks(_all_gather_runner, (ring_all_gather, GATHER_SIZES, world_size),
                           world_size, timeout, name)
    for case, size in enumerate(GATHER_SIZES):
        inputs = [rank_input(rank, size) for rank in range(world_size)]
        for rank in range(world_size):
            _compare_gather(results[rank][case], inputs, rank, size, world_size)
    passed(f"{name} gives every rank every rank's tensor, in rank order, on {world_size} ranks, "
           "using only send/recv")


def _compare_gather(got, inputs, rank, size, world_size) -> None:
    where = f"rank {rank}, tensors of {size} elements on {world_size} ranks"
    if not isinstance(got, list) or len(got) != world_size:
        raise CheckFailed(f"{where}: expected a list of {world_size} tensors (entry k = rank k's tensor), "
                          f"got {describe(got)}.\nHint: return a list with one entry per rank.")
    for source, (entry, expected) in enumerate(zip(got, inputs)):
        if not torch.is_tensor(entry) or entry.shape != expected.shape:
            raise CheckFailed(f"{where}: entry {source} should be rank {source}'s tensor of shape "
                              f"{tuple(expected.shape)}, got {describe(entry)}.")
        index = first_mismatch(entry.float(), expected, atol=0, rtol=0)
        if index is None:
            continue
        message = (f"{where}: entry {source}, element {index[0]}: expected {expected[index].item():.6f} "
                   f"(rank {source}'s value), got {entry[index].item():.6f}.")
        holder = [k for k, t in enumerate(inputs) if torch.equal(entry.float(), t)]
        if holder:
            hint = (f"entry {source} holds rank {holder[0]}'s tensor: index the list by the rank a tensor "
                    f"started on. In step s, rank r receives the tensor that started on rank "
                    f"(r - s - 1) % world_size.")
        else:
            hint = (f"entry {source} was never filled with rank {source}'s tensor: a ring all-gather needs "
                    f"world_size - 1 = {world_size - 1} steps, each passing on what arrived in the step before.")
        raise CheckFailed(f"{message}\nHint: {hint}")

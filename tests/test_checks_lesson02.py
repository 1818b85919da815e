"""The lesson 02 checks accept a right answer and reject plausible wrong ones with specific feedback.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part
of the feedback that names it. Every check launches 3 gloo ranks (about 2 s each).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from ddp_lab.checks import CheckFailed
from ddp_lab.checks.lesson02 import check_ring_all_gather, check_ring_all_reduce

DEADLOCK_TIMEOUT = 8.0


# --- ring all-reduce (mean) -------------------------------------------------------------

def ring_all_reduce(tensor):
    """Right answer: reduce-scatter then all-gather around the ring, then divide."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    chunks = list(tensor.tensor_split(world_size))
    for step in range(world_size - 1):           # reduce-scatter
        send_index, recv_index = (rank - step) % world_size, (rank - step - 1) % world_size
        incoming = torch.empty_like(chunks[recv_index])
        request = dist.isend(chunks[send_index].clone(), right)
        dist.recv(incoming, left)
        request.wait()
        chunks[recv_index] += incoming
    for step in range(world_size - 1):           # all-gather
        send_index, recv_index = (rank + 1 - step) % world_size, (rank - step) % world_size
        incoming = torch.empty_like(chunks[recv_index])
        request = dist.isend(chunks[send_index].clone(), right)
        dist.recv(incoming, left)
        request.wait()
        chunks[recv_index].copy_(incoming)
    return torch.cat(chunks) / world_size


def ring_sum(tensor):
    """Wrong: forgets to divide by the world size (sum where the mean was asked)."""
    return ring_all_reduce(tensor) * dist.get_world_size()


def ring_divisible_only(tensor):
    """Wrong: equal chunks of len // world_size; the remainder is never reduced."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    step_size = max(1, len(tensor) // world_size)
    chunks = [tensor[i * step_size:(i + 1) * step_size] for i in range(world_size)]  # views
    for step in range(world_size - 1):
        send_index, recv_index = (rank - step) % world_size, (rank - step - 1) % world_size
        incoming = torch.empty_like(chunks[recv_index])
        request = dist.isend(chunks[send_index].clone(), right)
        dist.recv(incoming, left)
        request.wait()
        chunks[recv_index] += incoming
    for step in range(world_size - 1):
        send_index, recv_index = (rank + 1 - step) % world_size, (rank - step) % world_size
        incoming = torch.empty_like(chunks[recv_index])
        request = dist.isend(chunks[send_index].clone(), right)
        dist.recv(incoming, left)
        request.wait()
        chunks[recv_index].copy_(incoming)
    return tensor / world_size


def ring_view(tensor):
    """Wrong: reshapes into (world_size, -1), which raises when the size does not divide."""
    chunks = tensor.view(dist.get_world_size(), -1)
    return ring_all_reduce(chunks.flatten())


def ring_calls_all_reduce(tensor):
    """Wrong: uses the library collective instead of building it."""
    dist.all_reduce(tensor)
    return tensor / dist.get_world_size()


def ring_blocking_send_first(tensor):
    """Wrong: every rank does a blocking send before its recv: deadlock."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    total = tensor.clone()
    incoming = torch.empty_like(tensor)
    passing = tensor.clone()
    for _ in range(world_size - 1):
        dist.send(passing, (rank + 1) % world_size)
        dist.recv(incoming, (rank - 1) % world_size)
        total += incoming
        passing = incoming.clone()
    return total / world_size


def ring_returns_input(tensor):
    """Wrong: reduces into a copy but returns the untouched input."""
    ring_all_reduce(tensor.clone())
    return tensor


def ring_stub(tensor):
    raise NotImplementedError("reduce-scatter, then all-gather")


def test_ring_all_reduce_accepts_the_right_answer(capsys):
    check_ring_all_reduce(ring_all_reduce)
    assert capsys.readouterr().out.startswith("✓ ring_all_reduce returns the mean")


@pytest.mark.parametrize("wrong, feedback", [
    (ring_sum, r"element 0: expected the mean .* got .*\nHint: you returned the SUM over ranks"),
    (ring_divisible_only, r"size 12 \(divisible by 3\) was right, but 10 is not divisible by 3 and "
                          r"elements \[9\] are wrong"),
    (ring_view, r"raised RuntimeError: .*\nwhile reducing a tensor of 10 elements on 3 ranks"),
    (ring_calls_all_reduce, r"dist\.all_reduce is not allowed in this exercise"),
    (ring_returns_input, r"the result is this rank's own input, unchanged"),
    (ring_stub, r"is not written yet: it raised NotImplementedError\('reduce-scatter, then all-gather'\)"),
])
def test_ring_all_reduce_rejects(wrong, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_ring_all_reduce(wrong)


def test_ring_all_reduce_deadlock_ends_with_a_message():
    with pytest.raises(CheckFailed, match=r"(?s)did not finish within 8 s.*rank 0 in dist\.send.*"
                                          r"every rank called a blocking dist\.send first") as caught:
        check_ring_all_reduce(ring_blocking_send_first, timeout=DEADLOCK_TIMEOUT)
    assert "rank 2 in dist.send" in str(caught.value)


# --- ring all-gather ---------------------------------------------------------------------

def ring_all_gather(tensor):
    """Right answer: pass each tensor one hop to the right, world_size - 1 times."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [torch.empty_like(tensor) for _ in range(world_size)]
    gathered[rank] = tensor.clone()
    for step in range(world_size - 1):
        send_index, recv_index = (rank - step) % world_size, (rank - step - 1) % world_size
        request = dist.isend(gathered[send_index], (rank + 1) % world_size)
        dist.recv(gathered[recv_index], (rank - 1) % world_size)
        request.wait()
    return gathered


def gather_in_arrival_order(tensor):
    """Wrong: appends tensors in the order they arrive instead of by source rank."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    arrived, passing = [tensor.clone()], tensor.clone()
    for _ in range(world_size - 1):
        incoming = torch.empty_like(tensor)
        request = dist.isend(passing, (rank + 1) % world_size)
        dist.recv(incoming, (rank - 1) % world_size)
        request.wait()
        arrived.append(incoming)
        passing = incoming
    return arrived


def gather_one_step(tensor):
    """Wrong: one exchange with the neighbour only (a ring needs world_size - 1 steps)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [torch.zeros_like(tensor) for _ in range(world_size)]
    gathered[rank] = tensor.clone()
    left = (rank - 1) % world_size
    request = dist.isend(tensor, (rank + 1) % world_size)
    dist.recv(gathered[left], left)
    request.wait()
    return gathered


def gather_with_library(tensor):
    """Wrong: calls dist.all_gather."""
    gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, tensor)
    return gathered


def gather_blocking(tensor):
    """Wrong: blocking send before recv on every rank."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [torch.empty_like(tensor) for _ in range(world_size)]
    gathered[rank] = tensor.clone()
    for step in range(world_size - 1):
        dist.send(gathered[(rank - step) % world_size], (rank + 1) % world_size)
        dist.recv(gathered[(rank - step - 1) % world_size], (rank - 1) % world_size)
    return gathered


def test_ring_all_gather_accepts_the_right_answer(capsys):
    check_ring_all_gather(ring_all_gather)
    assert capsys.readouterr().out.startswith("✓ ring_all_gather gives every rank")


@pytest.mark.parametrize("wrong, feedback", [
    (gather_in_arrival_order, r"rank 0, .*: entry 1, element 0: .*\nHint: entry 1 holds rank 2's tensor"),
    (gather_one_step, r"entry \d was never filled .* needs world_size - 1 = 2 steps"),
    (gather_with_library, r"dist\.all_gather is not allowed"),
])
def test_ring_all_gather_rejects(wrong, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_ring_all_gather(wrong)


def test_ring_all_gather_deadlock_ends_with_a_message():
    with pytest.raises(CheckFailed, match=r"(?s)did not finish within 8 s.*blocking dist\.send"):
        check_ring_all_gather(gather_blocking, timeout=DEADLOCK_TIMEOUT)

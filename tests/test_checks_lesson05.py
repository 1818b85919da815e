"""The lesson 05 checks accept a right answer and reject plausible wrong ones with specific feedback.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part
of the feedback that names it. The sampler check runs in this process; the accumulation
check launches 2 gloo ranks (about 2 s each).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from ddp_lab.checks import CheckFailed
from ddp_lab.checks.lesson05 import check_accumulate_gradients, check_shard_indices


# --- shard_indices --------------------------------------------------------------------------

def _perm(n, seed):
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()


def _pad(perm, world_size):
    total = math.ceil(len(perm) / world_size) * world_size
    return (perm * math.ceil(total / len(perm)))[:total]


def shard_indices(n, world_size, rank, epoch, seed=0):
    return _pad(_perm(n, seed + epoch), world_size)[rank::world_size]


def torch_distributed_sampler(n, world_size, rank, epoch, seed=0):
    """The real DistributedSampler is a right answer too."""
    sampler = DistributedSampler(range(n), num_replicas=world_size, rank=rank, seed=seed)
    sampler.set_epoch(epoch)
    return list(sampler)


def no_padding(n, world_size, rank, epoch, seed=0):
    return _perm(n, seed + epoch)[rank::world_size]


def seeded_with_the_rank(n, world_size, rank, epoch, seed=0):
    return _pad(_perm(n, seed + epoch + rank), world_size)[rank::world_size]


def ignores_the_epoch(n, world_size, rank, epoch, seed=0):
    return _pad(_perm(n, seed), world_size)[rank::world_size]


def global_random_state(n, world_size, rank, epoch, seed=0):
    return _pad(torch.randperm(n).tolist(), world_size)[rank::world_size]


def not_shuffled(n, world_size, rank, epoch, seed=0):
    return _pad(list(range(n)), world_size)[rank::world_size]


def test_shard_indices_accepts_right_answers(capsys):
    check_shard_indices(shard_indices)
    check_shard_indices(torch_distributed_sampler)
    assert capsys.readouterr().out.count("✓ shard_indices") == 2


@pytest.mark.parametrize("answer, feedback", [
    (no_padding, r"(?s)n=10 over world_size=4: rank 2 got 2 indices, expected ceil\(10/4\) = 3.*pad"),
    (seeded_with_the_rank, r"(?s)never visited.*SAME permutation.*never the rank"),
    (ignores_the_epoch, r"(?s)same order in epochs 0, 1, 2.*seed \+ epoch"),
    (global_random_state, r"(?s)never visited.*generator seeded with seed \+ epoch"),
    (not_shuffled, r"(?s)not shuffled"),
])
def test_shard_indices_rejects_wrong_answers(answer, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_shard_indices(answer)


# --- accumulate_gradients -------------------------------------------------------------------

def accumulate_gradients(ddp_model, micro_batches):
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()
    (F.mse_loss(ddp_model(x_last), y_last) / len(micro_batches)).backward()


def sync_every_micro_batch(ddp_model, micro_batches):
    for x, y in micro_batches:
        (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()


def everything_inside_no_sync(ddp_model, micro_batches):
    with ddp_model.no_sync():
        for x, y in micro_batches:
            (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()


def loss_not_divided(ddp_model, micro_batches):
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            F.mse_loss(ddp_model(x), y).backward()
    F.mse_loss(ddp_model(x_last), y_last).backward()


def zero_grad_every_micro_batch(ddp_model, micro_batches):
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            ddp_model.zero_grad()
            (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()
    ddp_model.zero_grad()
    (F.mse_loss(ddp_model(x_last), y_last) / len(micro_batches)).backward()


def steps_inside(ddp_model, micro_batches):
    accumulate_gradients(ddp_model, micro_batches)
    torch.optim.SGD(ddp_model.parameters(), lr=0.1).step()


def test_accumulate_gradients_accepts_the_right_answer(capsys):
    check_accumulate_gradients(accumulate_gradients)
    assert "✓ accumulate_gradients" in capsys.readouterr().out


@pytest.mark.parametrize("answer, feedback", [
    (sync_every_micro_batch, r"(?s)right gradients, but 3 all-reduces.*no_sync"),
    (everything_inside_no_sync, r"(?s)no all-reduce happened.*LAST micro-batch"),
    (loss_not_divided, r"(?s)3 times the big batch's gradient.*divide each micro-batch loss"),
    (zero_grad_every_micro_batch, r"(?s)only the last micro-batch counted"),
    (steps_inside, r"the parameters changed"),
])
def test_accumulate_gradients_rejects_wrong_answers(answer, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_accumulate_gradients(answer)

"""The lesson 05 checks accept a right answer and reject plausible wrong ones with specific feedback.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part
of the feedback that names it. The sampler check runs in this process; the accumulation
answers that return run one after the other in one launch of 2 gloo ranks (the check's own
runner, then its judge), those whose ranks go apart too (the check stops them together,
where without it they would wait for each other); one that raises runs alone through the
public check (about 2 s).
"""

from __future__ import annotations

import contextlib
import math
import random
import re
import traceback
import types

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from ddp_lab.checks import CheckFailed
from ddp_lab.checks import lesson05
from ddp_lab.checks.common import CaseFailed
from ddp_lab.checks.lesson05 import check_accumulate_gradients, check_shard_indices

# The right answers are proven once, by nbval of solutions/05-*.ipynb (its check cells store ✓):
# this file tries the wrong ones and the cases the solution does not cover.


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


def contiguous_block(n, world_size, rank, epoch, seed=0):
    """A valid split of the right permutation, but a block per rank instead of every world_size-th index."""
    per_rank = math.ceil(n / world_size)
    return _pad(_perm(n, seed + epoch), world_size)[rank * per_rank:(rank + 1) * per_rank]


def pads_with_the_last_indices(n, world_size, rank, epoch, seed=0):
    perm = _perm(n, seed + epoch)
    missing = math.ceil(n / world_size) * world_size - n
    return (perm + perm[n - missing:])[rank::world_size] if missing <= n else shard_indices(n, world_size, rank, epoch,
                                                                                           seed)


def pads_once(n, world_size, rank, epoch, seed=0):
    perm = _perm(n, seed + epoch)
    total = math.ceil(n / world_size) * world_size
    return (perm + perm[:total - n])[rank::world_size]    # short where the padding is longer than perm


def ignores_the_seed(n, world_size, rank, epoch, seed=0):
    return _pad(_perm(n, epoch), world_size)[rank::world_size]


def python_random_shuffle(n, world_size, rank, epoch, seed=0):
    perm = list(range(n))
    random.Random(seed + epoch).shuffle(perm)
    return _pad(perm, world_size)[rank::world_size]


def seeds_the_global_generator(n, world_size, rank, epoch, seed=0):
    torch.manual_seed(seed + epoch)                   # the same indices, but the training's RNG reseeded
    return _pad(torch.randperm(n).tolist(), world_size)[rank::world_size]


def seed_times_epoch(n, world_size, rank, epoch, seed=0):
    return _pad(_perm(n, seed * epoch), world_size)[rank::world_size]


def strides_from_the_next_index(n, world_size, rank, epoch, seed=0):
    padded = _pad(_perm(n, seed + epoch), world_size)
    return padded[(rank + 1) % world_size::world_size]


def forks_the_global_generator(n, world_size, rank, epoch, seed=0):
    """Right too: the global RNG seeded inside fork_rng, which puts it back afterwards."""
    with torch.random.fork_rng():
        torch.manual_seed(seed + epoch)
        return _pad(torch.randperm(n).tolist(), world_size)[rank::world_size]


def numpy_integers(n, world_size, rank, epoch, seed=0):
    """Right too: numpy's integers (np.int64) index a dataset as ints do."""
    return list(np.array(shard_indices(n, world_size, rank, epoch, seed), dtype=np.int64))


def pads_by_n_mod_world_size(n, world_size, rank, epoch, seed=0):
    perm = _perm(n, seed + epoch)
    return (perm + perm[:n % world_size])[rank::world_size]     # n % world_size is not what is missing


def pads_a_whole_round_more(n, world_size, rank, epoch, seed=0):
    perm = _perm(n, seed + epoch)
    total = (n // world_size + 1) * world_size                  # a round too many when n divides
    return (perm * math.ceil(total / n))[:total][rank::world_size]


def drops_the_rest(n, world_size, rank, epoch, seed=0):
    perm = _perm(n, seed + epoch)
    return perm[:n // world_size * world_size][rank::world_size]   # drop_last=True's indices


def epochs_counted_from_one(n, world_size, rank, epoch, seed=0):
    return _pad(_perm(n, seed + epoch + 1), world_size)[rank::world_size]


def seed_scaled(n, world_size, rank, epoch, seed=0):
    return _pad(_perm(n, seed * 1000 + epoch), world_size)[rank::world_size]


def epoch_counted_twice(n, world_size, rank, epoch, seed=0):
    return _pad(_perm(n, seed + 2 * epoch), world_size)[rank::world_size]


def rotated_by_the_epoch(n, world_size, rank, epoch, seed=0):   # one permutation, rotated: no seed draws it
    perm = _perm(n, seed)
    return _pad(perm[epoch:] + perm[:epoch], world_size)[rank::world_size]


def one_generator_for_all_epochs(n, world_size, rank, epoch, seed=0):
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epoch + 1):                                  # one more permutation each epoch
        perm = torch.randperm(n, generator=generator).tolist()
    return _pad(perm, world_size)[rank::world_size]


def strides_by_the_count_per_rank(n, world_size, rank, epoch, seed=0):
    """Wrong: a stride of ceil(n / world_size), the indices per rank, where it is world_size."""
    return _pad(_perm(n, seed + epoch), world_size)[rank::math.ceil(n / world_size)]


def drops_the_last_index(n, world_size, rank, epoch, seed=0):
    """Wrong: one index short on every rank, where n divides (no padding is missing)."""
    return shard_indices(n, world_size, rank, epoch, seed)[:-1]


def generator_given_the_seed(n, world_size, rank, epoch, seed=0):
    """Wrong: torch.Generator's argument is a device; the seed makes it ask for an accelerator."""
    perm = torch.randperm(n, generator=torch.Generator(seed + epoch)).tolist()
    return _pad(perm, world_size)[rank::world_size]


def one_generator_kept_across_calls(n, world_size, rank, epoch, seed=0, generator=torch.Generator().manual_seed(0)):
    """Wrong: one generator, made once as a default argument: every call draws the next permutation from it."""
    return _pad(torch.randperm(n, generator=generator).tolist(), world_size)[rank::world_size]


def sorted_shards(n, world_size, rank, epoch, seed=0):
    """Wrong: each rank's indices right, but sorted."""
    return sorted(shard_indices(n, world_size, rank, epoch, seed))


def test_shard_indices_accepts_right_answers(capsys):
    check_shard_indices(shard_indices)
    check_shard_indices(torch_distributed_sampler)
    check_shard_indices(forks_the_global_generator)
    check_shard_indices(numpy_integers)
    assert capsys.readouterr().out.count("✓ shard_indices equals DistributedSampler") == 4


@pytest.mark.parametrize("answer, feedback", [
    (contiguous_block, r"(?s)rank=0, epoch=0, seed=0\) returned .*contiguous block of the padded permutation "
                       r"\(padded\[0 \* 6:1 \* 6\]\).*every world_size-th index starting at r"),
    (no_padding, r"(?s)n=10, world_size=4, rank=2, .*no padding: rank 2 got 2 indices.*\[3, 3, 2, 2\]"),
    (seeded_with_the_rank, r"(?s)rank=1, .*rank 1 cut a permutation drawn from seed 1, a seed that includes the "
                           r"rank.*never the rank"),
    (ignores_the_epoch, r"(?s)n=12, world_size=2, rank=0, epoch=1, seed=0\).*indices of epoch 0: the seed did not "
                        r"change with the epoch"),
    (seed_times_epoch, r"(?s)n=12, world_size=2, rank=0, epoch=1, seed=0\).*indices of epoch 0: the seed did not "
                       r"change with the epoch"),
    (ignores_the_seed, r"(?s)seed=5\).*indices for seed=0: the seed argument \(5\) made no difference"),
    (seeds_the_global_generator, r"^shard_indices\(n=12, world_size=2, rank=0, epoch=0, seed=0\) changed torch's "
                                 r"global random state.*\nHint: draw the permutation from a torch\.Generator of its "
                                 r"own"),
    (strides_from_the_next_index, r"(?s)^shard_indices\(n=12, world_size=2, rank=0, epoch=0, seed=0\) returned .*"
                                  r"\nHint: that is padded\[1::2\], every world_size-th index of the padded "
                                  r"permutation starting at 1: rank r starts at index r"),
    (global_random_state, r"(?s)two calls with the same arguments gave different indices.*not the global random"),
    (not_shuffled, r"(?s)not shuffled"),
    (pads_with_the_last_indices, r"(?s)n=10, world_size=4, .*right up to the padding.*FIRST indices"),
    (pads_once, r"(?s)n=2, world_size=5, rank=\d, .*padded once with perm\[:3\], which holds only 2 indices"),
    (python_random_shuffle, r"(?s)split the data validly, but not in DistributedSampler's order.*torch\.randperm"),
    (pads_by_n_mod_world_size, r"^shard_indices\(n=7, world_size=3, rank=2, epoch=0, seed=0\) returned .*\nHint: the "
                               r"permutation was padded to 8 indices \(ranks got \[3, 3, 2\]\), 1 short of "
                               r"ceil\(7/3\) \* 3 = 9: pad it with .* = 2 of its first indices"),
    (pads_a_whole_round_more, r"^shard_indices\(n=12, world_size=2, rank=0, epoch=0, seed=0\) returned .*\nHint: the "
                              r"permutation was padded to 14 indices \(ranks got \[7, 7\]\), more than needed: "
                              r"DistributedSampler pads only up to the next multiple of world_size, "
                              r"ceil\(12/2\) \* 2 = 12: 12 divides by 2, so it adds nothing\.$"),
    (drops_the_rest, r"(?s)n=10, world_size=4, rank=0, .*\nHint: the ranks got \[2, 2, 2, 2\] indices, the first 8 of "
                     r"the 10 of the permutation: it was cut down to a multiple of world_size \(what drop_last=True "
                     r"does\)"),
    (epochs_counted_from_one, r"(?s)^shard_indices\(n=12, world_size=2, rank=0, epoch=0, seed=0\) returned .*\nHint: "
                              r"the ranks cut the permutation the right way, but it is the one torch\.randperm draws "
                              r"from seed 1: DistributedSampler seeds a new torch\.Generator with seed \+ epoch = 0"),
    (seed_scaled, r"(?s)^shard_indices\(n=12, world_size=2, rank=0, epoch=0, seed=5\) returned .*\nHint: with epoch=0, "
                  r"seed=0 the indices are right, with epoch=0, seed=5 they are not: the ranks cut the permutation "
                  r"the right way, but the order differs from DistributedSampler's at epoch=0, seed=5 \(no "
                  r"torch\.randperm seed from 0 to 63 draws it\): .*seed \+ epoch = 5"),
    (epoch_counted_twice, r"(?s)^shard_indices\(n=12, world_size=2, rank=0, epoch=1, seed=0\) returned .*\nHint: "
                          r"epoch 0 gives the right indices, epoch 1 does not: the ranks cut the permutation the right "
                          r"way, but the seed for epoch 1 differs \(this permutation is torch\.randperm's from seed "
                          r"2\): DistributedSampler seeds a new torch\.Generator with seed \+ epoch = 1"),
    (rotated_by_the_epoch, r"(?s)^shard_indices\(n=12, world_size=2, rank=0, epoch=1, seed=0\) returned .*\nHint: "
                           r"epoch 0 gives the right indices, epoch 1 does not: the ranks cut the permutation the "
                           r"right way, but the order differs from DistributedSampler's at epoch=1, seed=0 \(no "
                           r"torch\.randperm seed from 0 to 63 draws it\): DistributedSampler seeds"),
    (one_generator_for_all_epochs, r"(?s)epoch=1, seed=0\) returned .*\nHint: these are the indices of the permutation "
                                   r"number 2 drawn from ONE generator seeded with seed \(0\)"),
    # 12 divides by 2: the stride is wrong, not the padding
    (strides_by_the_count_per_rank,
     r"^shard_indices\(n=12, world_size=2, rank=0, epoch=0, seed=0\) returned \[8, 2\]; .*\nHint: that is "
     r"padded\[0::6\], the padded permutation from index 0 with a stride of 6 \(ceil\(12/2\), the number of indices "
     r"each rank gets\): the stride is world_size \(2\), rank r takes padded\[r::world_size\]"),
    # torch's error names a device: the hint names the argument
    (generator_given_the_seed,
     r"(?s)^shard_indices\(n=12, world_size=2, rank=0, epoch=0, seed=0\) raised \w+: .*\nHint: `perm = "
     r"torch\.randperm\(n, generator=torch\.Generator\(seed \+ epoch\)\)\.tolist\(\)`: torch\.Generator's argument "
     r"is the device it draws on, not a seed"),
    (drops_the_last_index,
     r"^shard_indices\(n=12, world_size=2, rank=0, epoch=0, seed=0\) returned .*\nHint: rank 0 got 5 indices \(the "
     r"ranks \[5, 5\]\); every rank gets ceil\(12/2\) = 6: rank r takes padded\[r::world_size\] from the "
     r"permutation padded to 12 indices\.$"),
    # no global random state moved: the generator kept between calls is named, not the global random state
    (one_generator_kept_across_calls,
     r"^two calls with the same arguments gave different indices; .* No global random state changed in the calls: "
     r"the permutation came from a generator the arguments do not seed, one kept from one call to the next .*"
     r"\nHint: make a new "
     r"torch\.Generator\(\)\.manual_seed\(seed \+ epoch\) in every call"),
    # the right indices in another order: sorted, not another shuffle (random.shuffle, numpy or another seed)
    (sorted_shards,
     r"^shard_indices\(n=12, world_size=2, rank=0, epoch=0, seed=0\) returned \[2, 3, 5, 7, 8, 11\]; .*\nHint: "
     r"these are the right indices, sorted: DistributedSampler gives each rank its indices in the permutation's "
     r"order"),
])
def test_shard_indices_rejects_wrong_answers(answer, feedback):
    state = torch.get_rng_state()
    with pytest.raises(CheckFailed, match=feedback):
        check_shard_indices(answer)
    assert torch.equal(torch.get_rng_state(), state) or answer is global_random_state   # put back by the check


# --- accumulate_gradients -------------------------------------------------------------------

def accumulate_gradients(ddp_model, micro_batches):
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()
    (F.mse_loss(ddp_model(x_last), y_last) / len(micro_batches)).backward()


def accumulates_past_ddp(ddp_model, micro_batches):
    """Right: the micro-batches but the last run through the wrapped module itself, which skips DDP's sync as
    no_sync does; the last through DDP, whose backward all-reduces once."""
    *first, (x_last, y_last) = micro_batches
    for x, y in first:
        (F.mse_loss(ddp_model.module(x), y) / len(micro_batches)).backward()
    (F.mse_loss(ddp_model(x_last), y_last) / len(micro_batches)).backward()


def every_forward_past_ddp(ddp_model, micro_batches):
    for x, y in micro_batches:
        (F.mse_loss(ddp_model.module(x), y) / len(micro_batches)).backward()


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


def forward_outside_no_sync(ddp_model, micro_batches):
    """Wrong: only the backward inside no_sync (DDP reads the flag in forward)."""
    *first, (x_last, y_last) = micro_batches
    for x, y in first:
        loss = F.mse_loss(ddp_model(x), y) / len(micro_batches)
        with ddp_model.no_sync():
            loss.backward()
    (F.mse_loss(ddp_model(x_last), y_last) / len(micro_batches)).backward()


def every_forward_inside_no_sync(ddp_model, micro_batches):
    """Wrong: all forwards inside no_sync, the last backward outside it."""
    with ddp_model.no_sync():
        losses = [F.mse_loss(ddp_model(x), y) / len(micro_batches) for x, y in micro_batches]
        for loss in losses[:-1]:
            loss.backward()
    losses[-1].backward()


def one_big_forward(ddp_model, micro_batches):
    x = torch.cat([x for x, _ in micro_batches])
    y = torch.cat([y for _, y in micro_batches])
    F.mse_loss(ddp_model(x), y).backward()            # the same gradient, but no accumulation at all


def summed_losses_one_backward(ddp_model, micro_batches):
    loss = sum(F.mse_loss(ddp_model(x), y) for x, y in micro_batches) / len(micro_batches)
    loss.backward()                                   # every micro-batch's activations alive at once


def blank_accumulate(ddp_model, micro_batches):
    pass


def reduces_by_hand(ddp_model, micro_batches):
    with ddp_model.no_sync():
        for x, y in micro_batches:
            (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()
    for p in ddp_model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def first_synced_not_last(ddp_model, micro_batches):
    (first_x, first_y), *rest = micro_batches
    (F.mse_loss(ddp_model(first_x), first_y) / len(micro_batches)).backward()
    with ddp_model.no_sync():
        for x, y in rest:
            (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()


def steps_inside(ddp_model, micro_batches):
    accumulate_gradients(ddp_model, micro_batches)
    torch.optim.SGD(ddp_model.parameters(), lr=0.1).step()


def slices_written_for_three(ddp_model, micro_batches):
    with ddp_model.no_sync():
        for x, y in micro_batches[:2]:                # the check's 3 micro-batches, written in
            (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()
    x, y = micro_batches[2]
    (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()


def last_index_written(ddp_model, micro_batches):
    for index, (x, y) in enumerate(micro_batches):
        if index == 2:                                # the last of 3, written in
            (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()
        else:
            with ddp_model.no_sync():
                (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()


def count_in_a_name(ddp_model, micro_batches):
    steps = 3                                         # through a name, past the source reader
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            (F.mse_loss(ddp_model(x), y) / steps).backward()
    (F.mse_loss(ddp_model(x_last), y_last) / steps).backward()


def divides_by_the_world_size_too(ddp_model, micro_batches):
    scale = len(micro_batches) * dist.get_world_size()
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            (F.mse_loss(ddp_model(x), y) / scale).backward()
    (F.mse_loss(ddp_model(x_last), y_last) / scale).backward()


def divides_by_all_samples(ddp_model, micro_batches):
    """Wrong: divided by the samples of all micro-batches, len(micro_batches) · len(x), the same divisor as above."""
    n = sum(len(x) for x, _ in micro_batches)
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            (F.mse_loss(ddp_model(x), y) / n).backward()
    (F.mse_loss(ddp_model(x_last), y_last) / n).backward()


def runs_the_first_twice(ddp_model, micro_batches):
    """Wrong: the last backward takes micro-batch 0 again; the last micro-batch never runs."""
    with ddp_model.no_sync():
        for x, y in micro_batches[:-1]:
            (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()
    x, y = micro_batches[0]
    (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()


def repeats_the_first(ddp_model, micro_batches):
    """Wrong: micro-batch 0 twice, then nothing else."""
    with ddp_model.no_sync():
        x, y = micro_batches[0]
        (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()
    (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()


def divides_by_the_samples_too(ddp_model, micro_batches):
    """Wrong: F.mse_loss is already the mean over the micro-batch's samples."""
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            (F.mse_loss(ddp_model(x), y) / (len(micro_batches) * len(x))).backward()
    (F.mse_loss(ddp_model(x_last), y_last) / (len(micro_batches) * len(x_last))).backward()


def summed_over_the_samples(ddp_model, micro_batches):
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            (F.mse_loss(ddp_model(x), y, reduction="sum") / len(micro_batches)).backward()
    (F.mse_loss(ddp_model(x_last), y_last, reduction="sum") / len(micro_batches)).backward()


def times_the_world_size(ddp_model, micro_batches):
    """Wrong: scales up by the number of ranks, as if DDP's all-reduce summed."""
    scale = dist.get_world_size() / len(micro_batches)
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            (F.mse_loss(ddp_model(x), y) * scale).backward()
    (F.mse_loss(ddp_model(x_last), y_last) * scale).backward()


def divides_by_the_first_ones(ddp_model, micro_batches):
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            (F.mse_loss(ddp_model(x), y) / len(first)).backward()
    (F.mse_loss(ddp_model(x_last), y_last) / len(first)).backward()


def divides_by_a_pairs_length(ddp_model, micro_batches):
    count = len(micro_batches[0])                     # the length of one (x, y) pair: 2
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            (F.mse_loss(ddp_model(x), y) / count).backward()
    (F.mse_loss(ddp_model(x_last), y_last) / count).backward()


def skips_the_first_micro_batch(ddp_model, micro_batches):
    with ddp_model.no_sync():
        for x, y in micro_batches[1:-1]:                     # starts at 1
            (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()
    x, y = micro_batches[-1]
    (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()


def sets_the_sync_flag(ddp_model, micro_batches):
    """Right too: the flag no_sync() turns off, set by hand."""
    for index, (x, y) in enumerate(micro_batches):
        ddp_model.require_backward_grad_sync = index == len(micro_batches) - 1
        (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()


def no_sync_then_sums_by_hand(ddp_model, micro_batches):
    """Wrong: DDP never all-reduces; the answer's own all-reduce sums over the ranks and nothing divides."""
    everything_inside_no_sync(ddp_model, micro_batches)
    for p in ddp_model.parameters():
        dist.all_reduce(p.grad)


def no_sync_then_divides_by_world_size_squared(ddp_model, micro_batches):
    everything_inside_no_sync(ddp_model, micro_batches)
    for p in ddp_model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size() ** 2


def reduces_by_hand_after_ddp(ddp_model, micro_batches):
    """Wrong: right, then an all-reduce of its own on top of DDP's (the gradients stay right: extra traffic)."""
    accumulate_gradients(ddp_model, micro_batches)
    for p in ddp_model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def reduces_a_flat_copy_after_ddp(ddp_model, micro_batches):
    """Wrong: the same extra traffic, through one flat copy of the gradients (not p.grad itself)."""
    accumulate_gradients(ddp_model, micro_batches)
    flat = torch.cat([p.grad.flatten() for p in ddp_model.parameters()])
    dist.all_reduce(flat)
    torch.nn.utils.vector_to_parameters(flat / dist.get_world_size(), [p.grad for p in ddp_model.parameters()])


def waits_at_a_barrier(ddp_model, micro_batches):
    """Wrong: right, then a collective of its own that sends no gradient."""
    accumulate_gradients(ddp_model, micro_batches)
    dist.barrier()


def last_synced_on_rank_0_only(ddp_model, micro_batches):
    """Wrong: rank 1 runs the last micro-batch inside no_sync too, so rank 0's DDP all-reduce has no partner (without
    the check's agreement, a hang)."""
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()
    if dist.get_rank() == 0:
        (F.mse_loss(ddp_model(x_last), y_last) / len(micro_batches)).backward()
    else:
        with ddp_model.no_sync():
            (F.mse_loss(ddp_model(x_last), y_last) / len(micro_batches)).backward()


def rank_1_reduces_by_hand(ddp_model, micro_batches):
    """Wrong: rank 0 all-reduces through DDP while rank 1 all-reduces by hand."""
    last_synced_on_rank_0_only(ddp_model, micro_batches)
    if dist.get_rank() == 1:
        for p in ddp_model.parameters():
            dist.all_reduce(p.grad)


def last_counted_twice(ddp_model, micro_batches):
    """Wrong: every micro-batch inside no_sync, then the last again outside it."""
    everything_inside_no_sync(ddp_model, micro_batches)
    x, y = micro_batches[-1]
    (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()


def forwards_without_autograd(ddp_model, micro_batches):
    """Wrong: the forwards but the last under torch.no_grad(), so they have no backward."""
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync(), torch.no_grad():
        for x, y in first:
            F.mse_loss(ddp_model(x), y) / len(micro_batches)
    (F.mse_loss(ddp_model(x_last), y_last) / len(micro_batches)).backward()


def backward_twice_on_the_last(ddp_model, micro_batches):
    """Wrong: the last micro-batch's graph goes backward twice (retain_graph=True)."""
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()
        loss = F.mse_loss(ddp_model(x_last), y_last) / len(micro_batches)
        loss.backward(retain_graph=True)
    loss.backward()


def pops_the_last(ddp_model, micro_batches):
    """Wrong: right gradients, but the caller's list loses its last micro-batch."""
    count = len(micro_batches)
    x_last, y_last = micro_batches.pop()
    with ddp_model.no_sync():
        for x, y in micro_batches:
            (F.mse_loss(ddp_model(x), y) / count).backward()
    (F.mse_loss(ddp_model(x_last), y_last) / count).backward()


def divides_the_gradients_after(ddp_model, micro_batches):
    """Right too: the losses left as they are, the accumulated gradients divided by len(micro_batches) after DDP's
    all-reduce."""
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            F.mse_loss(ddp_model(x), y).backward()
    F.mse_loss(ddp_model(x_last), y_last).backward()
    for p in ddp_model.parameters():
        p.grad /= len(micro_batches)


def divides_the_gradients_by_three(ddp_model, micro_batches):
    """Wrong: the gradients divided after backward by 3, the check's first number of micro-batches, written in."""
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            F.mse_loss(ddp_model(x), y).backward()
    F.mse_loss(ddp_model(x_last), y_last).backward()
    for p in ddp_model.parameters():
        p.grad /= 3


ACCUMULATE_MISTAKES = [
    (sync_every_micro_batch, r"(?s)right gradients, but 3 all-reduces.*no_sync"),
    (everything_inside_no_sync, r"^rank 0: no all-reduce happened \(every backward ran inside `no_sync\(\)`\), so "
                                r"every rank kept its own gradients\.\nHint: .*LAST micro-batch"),
    (loss_not_divided, r"(?s)3 times the big batch's gradient.*divide each micro-batch loss"),
    (zero_grad_every_micro_batch, r"(?s)only the last micro-batch counted"),
    (steps_inside, r"the parameters changed"),
    (one_big_forward, r"^rank 0: 1 forward\(s\) and 1 backward\(s\) for 3 micro-batches\.\nHint: 1 forward\(s\) ran "
                      r"on an input that is not one micro-batch \(15 rows: 3 micro-batches at once\): accumulation "
                      r"runs one forward and one backward per micro-batch"),
    (summed_losses_one_backward, r"^rank 0: 3 forward\(s\) and 1 backward\(s\) for 3 micro-batches\.\nHint: the "
                                 r"gradients count all 3 forwards, so the 1 backward\(s\) went through them all"),
    (blank_accumulate, r"(?s)every p.grad is None: no backward ran"),
    (every_forward_past_ddp, r"(?s)no all-reduce happened: every forward ran on ddp_model\.module, past DDP"),
    (reduces_by_hand, r"^rank 0: right gradients, but DDP never all-reduced \(every backward ran inside "
                      r"`no_sync\(\)`\): reduces_by_hand's own 4 calls of dist\.all_reduce \(26 elements, on "
                      r"p\.grad itself\) reduced them\.\nHint: the exercise asks for DDP's own all-reduce"),
    # DDP never all-reduced, and the answer's own all-reduces ran with a wrong division: not 'every rank kept its own'
    (no_sync_then_sums_by_hand,
     r"^rank 0: DDP never all-reduced \(every backward ran inside `no_sync\(\)`\); no_sync_then_sums_by_hand's own 4 "
     r"calls of dist\.all_reduce \(26 elements, on p\.grad itself\) ran instead, and the gradients are 2x the big "
     r"batch's gradient\.\nHint: the exercise asks for DDP's own all-reduce, which averages over the ranks, .*run the "
     r"LAST micro-batch's forward and backward outside `with model\.no_sync\(\):`"),
    (no_sync_then_divides_by_world_size_squared,
     r"^rank 0: DDP never all-reduced \(every backward ran inside `no_sync\(\)`\); .* ran instead, and the gradients "
     r"are 1/2 of the big batch's gradient\.\nHint: the exercise asks for DDP's own all-reduce"),
    # right gradients, DDP's one all-reduce, and the answer's own on top: the extra traffic is named
    (reduces_by_hand_after_ddp,
     r"^rank 0: right gradients, but besides DDP's 1 all-reduce, reduces_by_hand_after_ddp made 4 calls of "
     r"dist\.all_reduce \(26 elements, on p\.grad itself\) of its own\.\nHint: DDP's all-reduce in the backward "
     r"outside `no_sync\(\)` already averages every gradient"),
    (reduces_a_flat_copy_after_ddp,
     r"^rank 0: right gradients, but besides DDP's 1 all-reduce, reduces_a_flat_copy_after_ddp made 1 call of "
     r"dist\.all_reduce \(26 elements\) of its own\.\nHint: "),
    (waits_at_a_barrier, r"^rank 0: right gradients, but besides DDP's 1 all-reduce, waits_at_a_barrier made 1 call of "
                         r"dist\.barrier of its own\.\nHint: DDP's one all-reduce is all the communication the "
                         r"exercise asks for: leave other collectives out of waits_at_a_barrier"),
    # one rank's DDP all-reduce without a partner: told what each rank did (it was a hang, then a send/recv hint)
    (last_synced_on_rank_0_only,
     r"^the ranks went apart: rank 0 started DDP's all-reduce in a backward \(its last forward: micro-batch 2\), "
     r"rank 1 returned from last_synced_on_rank_0_only having made no DDP all-reduces\. DDP's all-reduce waits for "
     r"the same all-reduce on every rank, so rank 0 would have waited for rank 1 forever .*\nHint: every rank must "
     r"run the LAST micro-batch's forward and backward outside `with model\.no_sync\(\):`"),
    (rank_1_reduces_by_hand,
     r"^the ranks went apart: rank 0 started DDP's all-reduce in a backward \(its last forward: micro-batch 2\), "
     r"rank 1 called dist\.all_reduce \(15 elements\)\. "),
    # the counts say what ran: a micro-batch run twice, forwards with autograd off, a graph run backward twice
    (last_counted_twice, r"^rank 0: 4 forward\(s\) and 4 backward\(s\) for 3 micro-batches\.\nHint: micro-batch 2 ran "
                         r"forward 2 times \(the forwards ran on micro-batches \[0, 1, 2, 2\]\), inside `no_sync\(\)` "
                         r"with the others and again outside it"),
    (forwards_without_autograd, r"^rank 0: 3 forward\(s\) and 1 backward\(s\) for 3 micro-batches\.\nHint: 2 "
                                r"forward\(s\) ran with autograd off \(torch\.no_grad\(\) or inference_mode\), on "
                                r"micro-batch\(es\) 0, 1: they record no graph"),
    (backward_twice_on_the_last, r"^rank 0: 3 forward\(s\) and 4 backward\(s\) for 3 micro-batches\.\nHint: 1 more "
                                 r"backward\(s\) than forwards: a graph went backward more than once"),
    (pops_the_last, r"^rank 0: pops_the_last changed the caller's list: micro_batches held 3 micro-batches before the "
                    r"call and 2 after it \(the gradients are right\)\.\nHint: read the micro-batches without "
                    r"changing the list"),
    (first_synced_not_last, r"(?s)DDP all-reduced in micro-batch \[0\] of 0..2, not in the last"),
    (forward_outside_no_sync, r"(?s)3 all-reduces for 3 micro-batches, although 2 backward\(s\) ran inside "
                              r"`no_sync\(\)`: their forward ran outside it.*Put the forward AND the backward"),
    (every_forward_inside_no_sync, r"(?s)no all-reduce happened, although a backward ran outside `no_sync\(\)`: "
                                   r"its forward ran inside it.*forward and backward both outside"),
    (slices_written_for_three, r"^with 4 micro-batches \(with 3 all was right\), rank 0: 3 forward\(s\) and 3 "
                               r"backward\(s\) for 4 micro-batches\.\nHint: the run with 3 micro-batches had one "
                               r"forward and one backward for each: the loop stops at a number written in the code"),
    (last_index_written, r"(?s)^with 4 micro-batches \(with 3 all was right\), rank 0, gradient of .*\nHint: DDP "
                         r"all-reduced in micro-batch \[2\] of 0..3, not in the last"),
    (count_in_a_name, r"(?s)^with 4 micro-batches \(with 3 all was right\), rank 0, gradient of .*\nHint: it is 4/3 "
                      r"of the big batch's gradient: each micro-batch loss was divided by 3, where there are 4"),
    (divides_by_the_world_size_too, r"(?s)^rank 0, gradient of .*\nHint: it is the big batch's gradient divided by "
                                    r"2, the number of ranks: DDP's all-reduce already averages"),
    (divides_by_the_samples_too, r"(?s)^rank 0, gradient of .*\nHint: it is the big batch's gradient divided by 5: "
                                 r"each micro-batch loss was divided by 15, either len\(micro_batches\) times "
                                 r"len\(x\) \(3 · 5, .*\) or the number of samples in all of this rank's "
                                 r"micro-batches \(15\), the same number: F\.mse_loss already averages"),
    # the same divisor, reached the other way: both are named
    (divides_by_all_samples, r"(?s)^rank 0, gradient of .*\nHint: it is the big batch's gradient divided by 5: each "
                             r"micro-batch loss was divided by 15, either len\(micro_batches\) times len\(x\) .* or "
                             r"the number of samples in all of this rank's micro-batches \(15\)"),
    (runs_the_first_twice, r"(?s)^rank 0, gradient of .*\nHint: micro-batch 2 of 0\.\.2 never ran forward, and "
                           r"micro-batch 0 ran 2 times \(the forwards ran on micro-batches \[0, 1, 0\]\)"),
    (repeats_the_first, r"^rank 0: 2 forward\(s\) and 2 backward\(s\) for 3 micro-batches\.\nHint: micro-batches "
                        r"\[1, 2\] of 0\.\.2 never ran forward; micro-batch 0 ran more than once\."),
    (summed_over_the_samples, r"(?s)^rank 0, gradient of .*\nHint: it is 5 times the big batch's gradient, 5 the "
                              r"number of samples in a micro-batch"),
    (times_the_world_size, r"(?s)^rank 0, gradient of .*\nHint: it is 2 times the big batch's gradient, 2 the number "
                           r"of ranks: DDP's all-reduce averages over the ranks"),
    (divides_by_the_first_ones, r"(?s)^rank 0, gradient of .*\nHint: it is 3/2 of the big batch's gradient: each "
                                r"micro-batch loss was divided by 2 \(the number of ranks, or "
                                r"len\(micro_batches\[0\]\), an \(x, y\) pair's length, or len\(micro_batches\) - "
                                r"1\), where there are 3"),
    # the same 2, from len(micro_batches[0]): named among what 2 is in this run
    (divides_by_a_pairs_length, r"(?s)^rank 0, gradient of .*\nHint: it is 3/2 of the big batch's gradient: each "
                                r"micro-batch loss was divided by 2 \(.*len\(micro_batches\[0\]\), an \(x, y\) "
                                r"pair's length"),
    (skips_the_first_micro_batch, r"^rank 0: 2 forward\(s\) and 2 backward\(s\) for 3 micro-batches\.\nHint: "
                                  r"micro-batch \[0\] of 0\.\.2 never ran forward; the others ran one forward and one "
                                  r"backward each"),
]


@pytest.fixture(scope="module")
def accumulate_results():
    """Every mistaken answer (and one right one) run by the check's own runner, one after the other in one launch of
    2 ranks."""
    answers = (*(answer for answer, _ in ACCUMULATE_MISTAKES), *ACCUMULATE_RIGHT,
               divides_the_gradients_by_three)
    return dict(zip(answers, lesson05.run_accumulate_gradients_answers(answers)))


ACCUMULATE_RIGHT = (accumulates_past_ddp, sets_the_sync_flag, divides_the_gradients_after)


@pytest.mark.parametrize("answer", ACCUMULATE_RIGHT, ids=[answer.__name__ for answer in ACCUMULATE_RIGHT])
def test_accumulate_gradients_accepts_other_right_answers(answer, accumulate_results):
    assert lesson05.judge_accumulate_gradients(answer.__name__, accumulate_results[answer]).startswith(
        f"{answer.__name__}: 3 micro-batches == one big batch, with 1 all-reduce")


@pytest.mark.parametrize("answer, feedback", ACCUMULATE_MISTAKES,
                         ids=[answer.__name__ for answer, _ in ACCUMULATE_MISTAKES])
def test_accumulate_gradients_rejects_wrong_answers(answer, feedback, accumulate_results):
    with pytest.raises(CheckFailed, match=feedback):
        lesson05.judge_accumulate_gradients(answer.__name__, accumulate_results[answer])


def test_accumulate_gradients_names_gradients_divided_by_a_count_for_three(accumulate_results):
    """The answer divides the gradients after backward, not the losses: the hint names the gradients as divided."""
    answer = divides_the_gradients_by_three
    with pytest.raises(CheckFailed, match=r"(?s)^with 4 micro-batches \(with 3 all was right\), rank 0, gradient of "
                                          r".*\nHint: it is 4/3 of the big batch's gradient: the gradients were "
                                          r"divided by 3, where there are 4 micro-batches"):
        lesson05.judge_accumulate_gradients(answer.__name__, accumulate_results[answer],
                                            lesson05._scales_gradients(answer))


def accumulate_gradients_stub(ddp_model, micro_batches):
    raise NotImplementedError("no_sync for all but the last")


def test_a_stub_is_named_not_written_before_any_rank_starts(monkeypatch):
    """An unsolved exercise's check answers at once (what Run All on the exercise meets): a stub is not run on ranks."""
    monkeypatch.setattr(lesson05, "run_answers_on_ranks", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^accumulate_gradients_stub is not written yet: it raised "
                                          r"NotImplementedError"):
        check_accumulate_gradients(accumulate_gradients_stub)


def accumulates_over_three_written(ddp_model, micro_batches):
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync():
        for x, y in first:
            (F.mse_loss(ddp_model(x), y) / 3).backward()   # the check's number of micro-batches, written in
    (F.mse_loss(ddp_model(x_last), y_last) / 3).backward()


def test_a_divisor_written_as_a_number_is_refused_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(lesson05, "run_accumulate_gradients_answers", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^accumulates_over_three_written divides a loss by 3, a number written in "
                                          r"the code \(`\(F\.mse_loss\(ddp_model\(x\), y\) / 3\)\.backward\(\)`\)\.\n"
                                          r"Hint: divide by len\(micro_batches\)"):
        check_accumulate_gradients(accumulates_over_three_written)


def unpacks_three(ddp_model, micro_batches):
    (x0, y0), (x1, y1), (x2, y2) = micro_batches      # raises with any other number of micro-batches
    with ddp_model.no_sync():
        for x, y in ((x0, y0), (x1, y1)):
            (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()
    (F.mse_loss(ddp_model(x2), y2) / len(micro_batches)).backward()


def test_an_answer_written_for_three_that_raises_with_four_is_told_why():
    with pytest.raises(CheckFailed, match=r"(?s)^rank \d: unpacks_three raised ValueError: too many values to unpack "
                                          r"\(expected 3.*\nwhile accumulating 4 micro-batches on rank \d\..*\nHint: "
                                          r"the same function ran with 3 micro-batches and raised with 4"):
        check_accumulate_gradients(unpacks_three)


def no_sync_not_called(ddp_model, micro_batches):
    *first, (x_last, y_last) = micro_batches
    with ddp_model.no_sync:                           # the method, not the context manager it returns
        for x, y in first:
            (F.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()
    (F.mse_loss(ddp_model(x_last), y_last) / len(micro_batches)).backward()


def test_a_with_statement_given_no_sync_itself_is_told_to_call_it():
    """Python's error names a 'method' object and the context manager protocol; the hint names no_sync and the call.
    Given directly, with the error and the traceback the answer raises in this process (a rank's are the same; a
    launch of its own for one answer that raises costs seconds)."""
    class Model:
        def no_sync(self):
            return contextlib.nullcontext()

    try:
        no_sync_not_called(Model(), [(torch.ones(1), torch.ones(1))])
    except (TypeError, AttributeError) as error:
        raised = error
        details = traceback.format_exc()
    failure = types.SimpleNamespace(details=details, exception=CaseFailed(
        "accumulating 3 micro-batches on rank 0", type(raised).__name__, str(raised)))
    assert lesson05._raise_hint(failure) == (
        "`with ddp_model.no_sync:` gives the with statement the method itself; no_sync() returns the context "
        "manager: call it, `with ddp_model.no_sync():`.")


@pytest.mark.parametrize("calls, places, said", [
    ({None}, {0: None, 1: None}, r"^every rank was still running outside torch\.distributed"),
    ({"all_gather", None}, {0: "all_gather", 1: None},
     r"^rank 0 waited in dist\.all_gather, where every rank tells the others which collective it makes next .* for "
     r"rank 1, still running outside torch\.distributed"),
])
def test_a_hang_is_told_where_the_ranks_were_not_as_a_send_without_its_recv(calls, places, said):
    """A hang of the accumulation check (ranks outside any torch.distributed call got the send/recv hint of lesson
    02): its hint says what the stuck places show. Given directly: a real hang costs the check's whole timeout."""
    hint = lesson05._hang_hint(calls, places)
    assert re.search(said, hint) and "send" not in hint

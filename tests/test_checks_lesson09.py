"""The lesson 09 checks accept a right answer and reject plausible wrong ones with specific feedback.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part of
the feedback that names it. The formula check runs in this process; the ZeRO-1 check
launches 2 gloo ranks (a few seconds each).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from ddp_lab.checks import CheckFailed
from ddp_lab.checks.lesson09 import check_state_bytes, check_zero1

# --- state_bytes ------------------------------------------------------------------------------

PER_PARAM = {"fp32": (4, 4, 8), "bf16": (2, 2, 12)}
NAMES = ("params", "grads", "optimizer")


def state_bytes(n_params, stage, world_size, precision="fp32"):
    sharded = NAMES[3 - stage:]
    return {name: n_params * size // (world_size if name in sharded else 1)
            for name, size in zip(NAMES, PER_PARAM[precision])}


def blank_state_bytes(n_params, stage, world_size, precision="fp32"):
    raise NotImplementedError("per_param = (4, 4, 8) or (2, 2, 12)")


def stage1_shards_grads_too(n_params, stage, world_size, precision="fp32"):
    sharded = NAMES[max(0, 2 - stage):] if stage else ()   # off by one: stage 1 shards grads + optimizer
    return {name: n_params * size // (world_size if name in sharded else 1)
            for name, size in zip(NAMES, PER_PARAM[precision])}


def never_divides(n_params, stage, world_size, precision="fp32"):
    return {name: n_params * size for name, size in zip(NAMES, PER_PARAM[precision])}


def forgets_master_weights(n_params, stage, world_size, precision="fp32"):
    per_param = {"fp32": (4, 4, 8), "bf16": (2, 2, 8)}[precision]
    sharded = NAMES[3 - stage:]
    return {name: n_params * size // (world_size if name in sharded else 1) for name, size in zip(NAMES, per_param)}


def mixed_weights_in_fp32(n_params, stage, world_size, precision="fp32"):
    per_param = {"fp32": (4, 4, 8), "bf16": (4, 4, 12)}[precision]
    sharded = NAMES[3 - stage:]
    return {name: n_params * size // (world_size if name in sharded else 1) for name, size in zip(NAMES, per_param)}


def returns_a_total(n_params, stage, world_size, precision="fp32"):
    return sum(state_bytes(n_params, stage, world_size, precision).values())


def test_state_bytes_accepts_the_solution(capsys):
    check_state_bytes(state_bytes)
    assert "✓ state_bytes equals ZeRO's formula" in capsys.readouterr().out


@pytest.mark.parametrize("answer, feedback", [
    (blank_state_bytes, r"state_bytes is not written yet: it raised NotImplementedError"),
    (stage1_shards_grads_too, r"(?s)stage=1, world_size=2.*\['grads'\] is 2000, expected 4000.*stage 1 keeps the "
                              r"grads whole on every rank: only stage 2 and above shard the grads"),
    (never_divides, r"(?s)stage=1, world_size=2.*\['optimizer'\] is 8000, expected 4000.*stage 1 shards the "
                    r"optimizer: each rank keeps 1/world_size"),
    (forgets_master_weights, r"(?s)precision='bf16'\)\['optimizer'\] is 8000, expected 12000.*12 bytes per "
                             r"parameter, not 8.*master copy"),
    (mixed_weights_in_fp32, r"(?s)precision='bf16'\)\['params'\] is 4000, expected 2000.*params are bf16/fp16: "
                            r"2 bytes"),
    (returns_a_total, r"returned 16000; expected a dict with the keys \['params', 'grads', 'optimizer'\]"),
])
def test_state_bytes_rejects_wrong_answers(answer, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_state_bytes(answer)


# --- ZeRO-1 -----------------------------------------------------------------------------------

def zero1_init(params, rank, world_size):
    shards = [p.detach().reshape(-1).chunk(world_size)[rank].clone().requires_grad_() for p in params]
    return shards, torch.optim.Adam(shards, lr=0.01)


def zero1_step(params, shards, optimizer):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        dist.all_reduce(p.grad)
        p.grad /= world_size
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank]
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


def zero1_step_reduce_scatter(params, shards, optimizer):
    """A reduce-scatter instead of all-reduce-then-slice is right too."""
    from ddp_lab.torch_compat.flat_collectives import reduce_scatter

    world_size = dist.get_world_size()
    for p, s in zip(params, shards):
        s.grad = torch.empty_like(s)
        reduce_scatter(s.grad, p.grad.reshape(-1))
        s.grad /= world_size
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


def blank_zero1_step(params, shards, optimizer):
    raise NotImplementedError("all-reduce, step your shard, all-gather")


def averages_twice(params, shards, optimizer):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        dist.all_reduce(p.grad)
        p.grad /= world_size
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank] / world_size  # the mean, divided again
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


def full_optimizer_init(params, rank, world_size):
    return params, torch.optim.Adam(params, lr=0.01)  # every rank holds and steps all of Adam's state


def full_optimizer_step(params, shards, optimizer):
    for p in params:
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    optimizer.step()


def gathers_into_the_wrong_slots(params, shards, optimizer):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        dist.all_reduce(p.grad)
        p.grad /= world_size
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank]
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size))[::-1], s.detach())  # slots reversed


def never_all_reduces(params, shards, optimizer):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank].clone()
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


def never_gathers(params, shards, optimizer):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        dist.all_reduce(p.grad)
        p.grad /= world_size
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank]
    optimizer.step()
    for p, s in zip(params, shards):
        p.detach().view(-1).chunk(world_size)[rank].copy_(s.detach())  # only its own slot


def test_zero1_accepts_right_answers(capsys):
    check_zero1(zero1_init, zero1_step)
    check_zero1(zero1_init, zero1_step_reduce_scatter)
    assert capsys.readouterr().out.count("ZeRO-1 on 2 ranks == one process for 3 Adam steps") == 2


@pytest.mark.parametrize("init, step, feedback", [
    (zero1_init, blank_zero1_step, r"blank_zero1_step is not written yet: it raised NotImplementedError"),
    (zero1_init, averages_twice, r"(?s)rank 0, step 0: the gradient of the shard of '0.weight'.*the gradients were "
                                 r"averaged twice"),
    (full_optimizer_init, full_optimizer_step, r"(?s)rank 0, step 0: the optimizer holds Adam state for all 58 "
                                               r"parameter values.*every rank steps the full optimizer"),
    (zero1_init, gathers_into_the_wrong_slots, r"(?s)rank 0, step 0: parameter '0.weight'.*wrong slots \(slot 0 "
                                               r"holds rank 1's shard, slot 1 holds rank 0's shard\)"),
    (zero1_init, never_all_reduces, r"(?s)rank 0, step 0: the gradient of the shard.*this rank's own gradient: "
                                    r"all-reduce"),
    (zero1_init, never_gathers, r"(?s)rank 0, step 0: parameter '0.weight'.*only this rank's own slice changed"),
])
def test_zero1_rejects_wrong_answers(init, step, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_zero1(init, step)

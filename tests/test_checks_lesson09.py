"""The lesson 09 checks accept a right answer and reject plausible wrong ones with specific feedback.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part of
the feedback that names it. The formula check runs in this process; the ZeRO-1 answers that
return run one after the other in one launch (`run_zero1_answers`: a group of 2 gloo ranks, then
one of 3), each judged alone (`judge_zero1`) as the public check judges its one answer; an answer
that raises ends its launch, so it runs alone through the public check.
"""

from __future__ import annotations

import math

import time

import pytest
import torch
import torch.distributed as dist

from ddp_lab.checks import CheckFailed
from ddp_lab.checks import lesson09
from ddp_lab.checks.common import division_into_a_new_tensor
from ddp_lab.checks.lesson09 import check_state_bytes, check_zero1

# --- state_bytes ------------------------------------------------------------------------------

PER_PARAM = {"fp32": (4, 4, 8), "bf16": (2, 2, 12), "fp16": (2, 2, 12)}
NAMES = ("params", "grads", "optimizer")


def state_bytes(n_params, stage, world_size, precision="fp32"):
    sharded = NAMES[3 - stage:]
    return {name: n_params * size // (world_size if name in sharded else 1)
            for name, size in zip(NAMES, PER_PARAM[precision])}


def state_bytes_in_floats(n_params, stage, world_size, precision="fp32"):
    sharded = NAMES[3 - stage:]
    return {name: n_params * size / (world_size if name in sharded else 1)   # / where // is meant
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


def fp16_as_fp32(n_params, stage, world_size, precision="fp32"):
    per_param = (2, 2, 12) if precision == "bf16" else (4, 4, 8)    # fp16 forgotten: mixed precision too
    sharded = NAMES[3 - stage:]
    return {name: n_params * size // (world_size if name in sharded else 1) for name, size in zip(NAMES, per_param)}


def returns_a_total(n_params, stage, world_size, precision="fp32"):
    return sum(state_bytes(n_params, stage, world_size, precision).values())


def the_package_formula(n_params, stage, world_size, precision="fp32"):
    from ddp_lab.course.sharding.state_bytes import state_bytes_per_rank
    return state_bytes_per_rank(n_params, stage, world_size, precision)


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
    (fp16_as_fp32, r"(?s)precision='fp16'\)\['params'\] is 4000, expected 2000.*params are bf16/fp16: 2 bytes"),
    (state_bytes_in_floats, r"\['params'\] is \d+\.0, a float; bytes are whole numbers\.\nHint: return ints"),
    (returns_a_total, r"returned 16000; expected a dict with the keys \['params', 'grads', 'optimizer'\]"),
    (the_package_formula, r"^the_package_formula calls ddp_lab.course.sharding.state_bytes.state_bytes_per_rank, the "
                          r"package's own answer to this exercise"),
])
def test_state_bytes_rejects_wrong_answers(answer, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_state_bytes(answer)


# --- ZeRO-1 -----------------------------------------------------------------------------------

def zero1_init(params, rank, world_size):
    shards = [p.detach().reshape(-1).chunk(world_size)[rank].clone().requires_grad_() for p in params]
    return shards, torch.optim.Adam(shards, lr=0.01)


def _reduce_and_step(params, shards, optimizer):
    """zero1_step's first half: every gradient averaged over the ranks, this rank's slice of it stepped."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        dist.all_reduce(p.grad)
        p.grad /= world_size
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank]
    optimizer.step()


def zero1_step(params, shards, optimizer):
    _reduce_and_step(params, shards, optimizer)
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(dist.get_world_size())), s.detach())


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


def zero1_step_zeroes_its_grads(params, shards, optimizer):
    """Right, then the usual optimizer.zero_grad() (set_to_none=True): judged by the gradients the step used."""
    zero1_step(params, shards, optimizer)
    optimizer.zero_grad()


def zero1_step_zeroes_its_grads_in_place(params, shards, optimizer):
    """Right, then optimizer.zero_grad(set_to_none=False): the shards' gradients are zeros when it returns."""
    zero1_step(params, shards, optimizer)
    optimizer.zero_grad(set_to_none=False)


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


def broadcasts_each_of_two_shards(params, shards, optimizer):
    """The gather written for two ranks: each of ranks 0 and 1 broadcasts its shard (right on 2 ranks)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        dist.all_reduce(p.grad)
        p.grad /= world_size
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank]
    optimizer.step()
    for p, s in zip(params, shards):
        pieces = list(p.detach().view(-1).chunk(world_size))
        pieces[rank].copy_(s.detach())
        for src in (0, 1):
            dist.broadcast(pieces[src], src=src)


def puts_the_parameter_together_from_two_shards(params, shards, optimizer):
    """Right on 2 ranks: this rank's shard and the other's, in rank order; on 3 the pieces do not fit."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        dist.all_reduce(p.grad)
        p.grad /= world_size
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank]
    optimizer.step()
    for p, s in zip(params, shards):
        gathered = [torch.empty_like(s) for _ in range(world_size)]   # the check's shards are of one size
        dist.all_gather(gathered, s.detach())
        other = gathered[1 - rank]
        full = torch.cat([s.detach(), other]) if rank == 0 else torch.cat([other, s.detach()])
        p.data.copy_(full.view(p.shape))


def never_all_reduces(params, shards, optimizer):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank].clone()
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


def _async_gathers(params, shards, optimizer) -> list:
    """zero1_step's reduce and step, then its all-gathers with async_op=True: their works, not waited for."""
    _reduce_and_step(params, shards, optimizer)
    return [dist.all_gather(list(p.detach().view(-1).chunk(dist.get_world_size())), s.detach(), async_op=True)
            for p, s in zip(params, shards)]


def gathers_without_waiting(params, shards, optimizer):
    """The all-gather started with async_op=True and never waited for: p holds its old values when the step returns."""
    _async_gathers(params, shards, optimizer)


def gathers_and_waits(params, shards, optimizer):
    """Right too: async all-gathers, each waited for before the step returns."""
    for work in _async_gathers(params, shards, optimizer):
        work.wait()


def never_gathers(params, shards, optimizer):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        dist.all_reduce(p.grad)
        p.grad /= world_size
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank]
    optimizer.step()
    for p, s in zip(params, shards):
        p.detach().view(-1).chunk(world_size)[rank].copy_(s.detach())  # only its own slot


def gathers_into_a_new_list(params, shards, optimizer):
    _reduce_and_step(params, shards, optimizer)
    for s in shards:
        gathered = [torch.empty_like(s) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, s.detach())          # every shard arrives, in tensors p never reads


def never_sets_the_shard_grads(params, shards, optimizer):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        dist.all_reduce(p.grad)
        p.grad /= world_size
        s = p.grad.reshape(-1).chunk(world_size)[rank]  # rebinds the loop variable: the shard's .grad stays None
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


def gathers_into_a_flat_tensor(params, shards, optimizer):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        dist.all_reduce(p.grad)
        p.grad /= world_size
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank]
    optimizer.step()
    for p, s in zip(params, shards):
        gathered = [torch.empty_like(s) for _ in range(world_size)]
        dist.all_gather(gathered, s.detach())
        p.data = torch.cat(gathered)   # the flat vector: the parameter loses its shape


def non_leaf_shards(params, rank, world_size):
    shards = [p.reshape(-1).chunk(world_size)[rank] for p in params]  # views into p, not independent tensors
    return shards, torch.optim.Adam(shards, lr=0.01)


def optimizer_over_the_parameters(params, rank, world_size):
    shards = [p.detach().reshape(-1).chunk(world_size)[rank].clone().requires_grad_() for p in params]
    return shards, torch.optim.Adam(params, lr=0.01)   # the right shards, but Adam over every full parameter


def unflattened_shards(params, rank, world_size):
    shards = [p.detach().chunk(world_size)[rank].clone().requires_grad_() for p in params]   # rows, not flat
    return shards, torch.optim.Adam(shards, lr=0.01)


def learning_rate_ten_times_too_small(params, rank, world_size):
    shards = [p.detach().reshape(-1).chunk(world_size)[rank].clone().requires_grad_() for p in params]
    return shards, torch.optim.Adam(shards, lr=0.001)


def divides_into_a_new_tensor(params, shards, optimizer):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        dist.all_reduce(p.grad)
        mean = p.grad / world_size   # a new tensor; the slice below is taken from the sum
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank]
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


def floor_shards_init(params, rank, world_size):
    shards = []
    for p in params:
        n = p.numel() // world_size                   # a floor split: the last element of an odd size is lost
        shards.append(p.detach().reshape(-1)[rank * n:(rank + 1) * n].clone().requires_grad_())
    return shards, torch.optim.Adam(shards, lr=0.01)


def padded_init(params, rank, world_size):
    shards = []
    for p in params:                                  # FSDP's way: zeros up to a multiple of world_size, equal shards
        flat = p.detach().reshape(-1)
        size = math.ceil(flat.numel() / world_size)
        flat = torch.cat([flat, flat.new_zeros(size * world_size - flat.numel())])
        shards.append(flat[rank * size:(rank + 1) * size].clone().requires_grad_())
    return shards, torch.optim.Adam(shards, lr=0.01)


def never_steps(params, shards, optimizer):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        dist.all_reduce(p.grad)
        p.grad /= world_size
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank]
    for p, s in zip(params, shards):                  # optimizer.step() forgotten
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


def adamw_init(params, rank, world_size):
    shards = [p.detach().reshape(-1).chunk(world_size)[rank].clone().requires_grad_() for p in params]
    return shards, torch.optim.AdamW(shards, lr=0.01)    # decoupled weight decay 0.01 by default


def blank_init(params, rank, world_size):
    pass


def returns_the_optimizer_class(params, rank, world_size):
    shards = [p.detach().reshape(-1).chunk(world_size)[rank].clone().requires_grad_() for p in params]
    return shards, torch.optim.Adam


def reduces_to_rank_0(params, shards, optimizer):
    """The sum reaches rank 0 only: rank 1's gradient is its own (in part: gloo leaves partial sums) / world_size."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        dist.reduce(p.grad, dst=0)
        p.grad /= world_size
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank]
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


def _gather(params, shards):
    world_size = dist.get_world_size()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


def divides_before_all_reducing(params, shards, optimizer):
    """Divided into a new tensor before p.grad is all-reduced: the slice comes from that stale copy."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        g = p.grad / world_size
        dist.all_reduce(p.grad)
        s.grad = g.reshape(-1).chunk(world_size)[rank]
    optimizer.step()
    _gather(params, shards)


def all_reduces_a_clone(params, shards, optimizer):
    """The sum goes into a clone; the slice comes from p.grad, which keeps this rank's own gradient."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        summed = p.grad.clone()
        dist.all_reduce(summed)
        p.grad /= world_size
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank]
    optimizer.step()
    _gather(params, shards)


def zero1_step_average_op(params, shards, optimizer):
    """Right too: ReduceOp.AVG leaves the mean in p.grad."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank]
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


def zero1_step_divides_the_slice(params, shards, optimizer):
    """Right too: the sum sliced, then the slice divided."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        dist.all_reduce(p.grad)
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank] / world_size
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


def init_with_a_generator(params, rank, world_size):
    shards = (p.detach().reshape(-1).chunk(world_size)[rank].clone().requires_grad_() for p in params)
    return shards, torch.optim.Adam(shards, lr=0.01)   # Adam reads the generator to its end: nothing left to return


def init_with_one_flat_shard(params, rank, world_size):
    shard = torch.cat([p.detach().reshape(-1).chunk(world_size)[rank] for p in params]).requires_grad_()
    return shard, torch.optim.Adam([shard], lr=0.01)   # one tensor for all the parameters, not a list of shards


def init_with_the_last_rank_first(params, rank, world_size):
    shards = [p.detach().reshape(-1).chunk(world_size)[world_size - 1 - rank].clone().requires_grad_() for p in params]
    return shards, torch.optim.Adam(shards, lr=0.01)


def init_with_zeros(params, rank, world_size):
    shards = [torch.zeros_like(p.detach().reshape(-1).chunk(world_size)[rank]).requires_grad_() for p in params]
    return shards, torch.optim.Adam(shards, lr=0.01)


def init_in_float64(params, rank, world_size):
    shards = [p.detach().reshape(-1).chunk(world_size)[rank].double().requires_grad_() for p in params]
    return shards, torch.optim.Adam(shards, lr=0.01)


def zero1_step_async(params, shards, optimizer):
    """Right too: every all-reduce started at once (async_op=True), all waited for before the gradients are read."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    works = [dist.all_reduce(p.grad, async_op=True) for p in params]
    for work in works:
        work.wait()
    for p, s in zip(params, shards):
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank] / world_size
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


def waits_after_the_step(params, shards, optimizer):
    """Wrong: each shard's gradient is a view of p.grad, which an async all-reduce is still summing into when the
    optimizer steps; it is waited for only after. Whether the sum arrived first varies from run to run."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    works = []
    for p, s in zip(params, shards):
        p.grad /= world_size
        works.append(dist.all_reduce(p.grad, async_op=True))
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank]
    optimizer.step()
    for work in works:
        work.wait()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


def sleeps_instead_of_waiting(params, shards, optimizer):
    """Wrong, though right in practice here: the sum has time to arrive (a sleep), but nothing waits for it."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p in params:
        dist.all_reduce(p.grad, async_op=True)
    time.sleep(0.2)
    for p, s in zip(params, shards):
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank] / world_size
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


def divides_while_the_sum_is_in_flight(params, shards, optimizer):
    """Wrong: each all-reduce started (async_op=True), p.grad divided at once, while its sum is still arriving; every
    work waited for before the step. What the sum holds varies from run to run."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    works = []
    for p, s in zip(params, shards):
        works.append(dist.all_reduce(p.grad, async_op=True))
        p.grad /= world_size
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank]
    for work in works:
        work.wait()
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


def zero1_step_waits_again(params, shards, optimizer):
    """Right: each all-reduce waited for, then divided; every work waited for (and polled) once more at the end."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    works = [dist.all_reduce(p.grad, async_op=True) for p in params]
    for work, p, s in zip(works, params, shards):
        work.wait()
        p.grad /= world_size
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank]
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())
    assert all(work.is_completed() for work in works)
    for work in works:
        work.wait()


def view_shards(params, rank, world_size):
    """Wrong: each shard a detached view into p (no clone): its values are right, it shares p's memory."""
    shards = [p.detach().reshape(-1).chunk(world_size)[rank].requires_grad_() for p in params]
    return shards, torch.optim.Adam(shards, lr=0.01)


ZERO1_RIGHT_STEPS = (   # the solution's all-reduce-then-slice is proven by nbval of solutions/09-zero-and-fsdp.ipynb
    zero1_step_reduce_scatter, zero1_step_zeroes_its_grads, zero1_step_zeroes_its_grads_in_place,
    zero1_step_average_op, zero1_step_divides_the_slice, zero1_step_async, gathers_and_waits, zero1_step_waits_again)


@pytest.mark.parametrize("step", ZERO1_RIGHT_STEPS, ids=[step.__name__ for step in ZERO1_RIGHT_STEPS])
def test_zero1_accepts_right_steps(step, zero1_results):
    judged = lesson09.judge_zero1(step.__name__, "zero1_init", zero1_results[(zero1_init, step)])
    assert judged.startswith(f"{step.__name__}: ZeRO-1 on 2 and on 3 ranks == one process for 3 Adam steps")


# what the message says of an async all_reduce read before its work was waited for: whether the values show it (the
# sum had not arrived) or not (it had, by luck), the message names the async call and the wait
ASYNC_NOT_WAITED = (r"(?s)^rank 0 of 2, step 0: .*dist.all_reduce\(p.grad, async_op=True\).*\.wait\(\) (on the work "
                    r"it returns before reading p.grad|before optimizer\.step\(\) reads the gradient)")
ZERO1_MISTAKES = [   # answers that return (not raise): they run one after the other in one launch of 2 ranks
    # the division runs while the sum is arriving: refused from the gradient's version, whatever its values
    (zero1_init, divides_while_the_sum_is_in_flight, r"(?s)^rank \d of 2, step 0: the gradient of '0.weight' was "
                                                     r"changed in place \(a division\?\) after its "
                                                     r"dist.all_reduce\(\.\.\., async_op=True\) started"),
    (view_shards, zero1_step, r"(?s)^rank 0: view_shards's shard of '0.weight' is .*Hint: its values are right, but "
                              r"it is a view into p's own memory"),
    (zero1_init, averages_twice, r"(?s)rank 0 of 2, step 0: the gradient of the shard of '0.weight'.*the gradients "
                                 r"were "
                                 r"averaged twice"),
    (full_optimizer_init, full_optimizer_step, r"(?s)^rank 0: full_optimizer_init's shard of '0.weight' is the whole "
                                               r"parameter, shape \(6, 4\): every rank would hold and step the full "
                                               r"optimizer"),
    (optimizer_over_the_parameters, zero1_step, r"(?s)rank 0 of 2, step 0: the optimizer holds Adam state for all "
                                                r"72 parameter values.*every rank steps the full optimizer"),
    # found in zero1_init's shards, before zero1_step trips over their shape
    (unflattened_shards, zero1_step, r"(?s)^rank 0: unflattened_shards's shard of '0.weight' is a tensor of shape "
                                     r"\(3, 4\).*expected shape \(12,\).*Hint: it holds the right values, but chunked "
                                     r"along the parameter's first dimension: flatten the parameter first"),
    (learning_rate_ten_times_too_small, zero1_step, r"(?s)rank 0 of 2, step 0: parameter '0.weight'.*Hint: every value "
                                                    r"moved 0.1 times as far as one process's Adam step, and your "
                                                    r"optimizer's learning rate is 0.001: the check's Adam uses "
                                                    r"lr=0.01"),
    (zero1_init, divides_into_a_new_tensor, r"(?s)rank 0 of 2, step 0: the gradient of the shard.*it is the SUM "
                                            r"over ranks. "
                                            r"Your line `mean = p.grad / world_size` divides into a NEW tensor"),
    (zero1_init, gathers_into_the_wrong_slots, r"(?s)rank 0 of 2, step 0: parameter '0.weight'.*wrong slots \(slot 0 "
                                               r"holds rank 1's shard, slot 1 holds rank 0's shard\)"),
    (zero1_init, never_all_reduces, r"(?s)rank 0 of 2, step 0: the gradient of the shard.*this rank's own gradient: "
                                    r"all-reduce"),
    # rank 0 is right until it gathers rank 1's shard: rank 1's gradient, judged before any parameter, shows why
    (zero1_init, reduces_to_rank_0, r"(?s)^rank 1 of 2, step 0: the gradient of the shard of '[0-9.a-z]+'.*Hint: where "
                                    r"it differs, it is this rank's own gradient divided by world_size: the sum over "
                                    r"the ranks never reached this rank there"),
    # all_reduce ran in these: the sum reached p.grad, but not the tensor the shard's gradient was sliced from
    (zero1_init, divides_before_all_reducing, r"(?s)^rank 0 of 2, step 0: the gradient of the shard.*Hint: where it "
                                              r"differs, it is this rank's own gradient divided by world_size: "
                                              r"dist.all_reduce\(p.grad\) ran, but your line `g = p.grad / "
                                              r"world_size` divides into a NEW tensor: made before the all_reduce"
                                              r"(?!.*never reached)"),
    (zero1_init, all_reduces_a_clone, r"(?s)^rank 0 of 2, step 0: the gradient of the shard.*Hint: where it differs, "
                                      r"it is this rank's own gradient divided by world_size: dist.all_reduce ran, "
                                      r"but on another tensor than p.grad \(a clone or a copy of it\): all_reduce "
                                      r"sums in place into the tensor it is given(?!.*never reached)"),
    (zero1_init, never_gathers, r"(?s)rank 0 of 2, step 0: parameter '0.weight'.*only this rank's own slice changed"),
    # it all-gathered: "all-gather the updated shards into p" would read as done; the tensors it gathered into are named
    (zero1_init, gathers_into_a_new_list, r"(?s)^rank 0 of 2, step 0: parameter '0.weight'.*\nHint: the parameters did "
                                          r"not change, though zero1_step called dist\.all_gather: it writes into the "
                                          r"tensors it is given .*none of them was p's\. Gather into views of p"),
    # whether the gathered values arrived by the time the step returned (by luck) or not, the work never waited for
    (zero1_init, gathers_without_waiting, r"(?s)^rank 0 of 2, step 0: .*(a collective|an all-gather) called with "
                                          r"async_op=True returned a work that was never waited for"),
    # the sum arrives before the step or not: either way the message names the async all_reduce not waited for
    (zero1_init, waits_after_the_step, ASYNC_NOT_WAITED),
    (zero1_init, sleeps_instead_of_waiting, ASYNC_NOT_WAITED),
    (zero1_init, never_sets_the_shard_grads, r"(?s)rank 0 of 2, step 0: the shard of '0.weight' has no .grad when the "
                                             r"optimizer steps, so Adam skipped it"),
    (returns_the_optimizer_class, zero1_step, r"rank 0: returns_the_optimizer_class returned type as its optimizer"),
    (floor_shards_init, zero1_step, r"(?s)^rank 0: floor_shards_init's shard of 'a parameter of 5 elements' .*"
                                    r"expected shape \(3,\).*5 elements on 2 ranks split 3 \+ 2"),
    # wrong on rank 1 only ([3, 4, 0] for 5 elements): the ranks agree on zero1_init's verdict before the steps, so
    # rank 0 does not wait in an all_reduce for a rank that stopped, and the shard is named at once
    (padded_init, zero1_step, r"(?s)^rank 1: padded_init's shard of 'a parameter of 5 elements' is a tensor of shape "
                              r"\(3,\).*expected shape \(2,\).*Hint: it is the parameter padded with zeros to a "
                              r"multiple of world_size(?!.*did not finish)(?!.*numel // world_size)"),
    (zero1_init, never_steps, r"(?s)rank 0 of 2, step 0: every shard has its .grad, but the optimizer holds no "
                              r"state: it "
                              r"never stepped"),
    (adamw_init, zero1_step, r"(?s)rank 0 of 2, step 0: parameter .*Hint: your optimizer is AdamW; the check compares "
                             r"with one process's torch.optim.Adam"),
    (blank_init, zero1_step, r"^rank 0: blank_init returned NoneType None; expected a pair \(shards, optimizer\)"),
    # right on 2 ranks, wrong on 3: the message says that 2 were right, so that the written 2 shows
    (zero1_init, broadcasts_each_of_two_shards, r"(?s)^rank 0 of 3, step 0: parameter '0.weight'.*\nOn 2 ranks \(the "
                                                r"check's first run\) every rank was right; this is its second run, "
                                                r"on 3 ranks: look for code written for 2 ranks"),
    (zero1_init, gathers_into_a_flat_tensor, r"(?s)^rank 0 of 2, step 0: after zero1_step p.data of '0.weight' has "
                                             r"shape "
                                             r"\(24,\), the parameter's is \(6, 4\).*Hint: it holds the right values, "
                                             r"flattened: reshape the gathered vector .*view\(p.shape\)"),
    # zero1_init's shards, judged before zero1_step runs: said in a sentence, whatever they are
    (init_with_a_generator, zero1_step, r"^rank 0: init_with_a_generator returned 0 shards for 4 parameters; expected "
                                        r"one shard per parameter.*\nHint: your shards are a generator .*Make them a "
                                        r"list"),
    (init_with_one_flat_shard, zero1_step, r"^rank 0: init_with_one_flat_shard returned a tensor of shape \(36,\) and "
                                           r"dtype torch.float32 as its shards; expected a list of tensors, one shard "
                                           r"per parameter"),
    (init_with_the_last_rank_first, zero1_step, r"(?s)^rank 0: init_with_the_last_rank_first's shard of '0.weight' .*"
                                                r"Hint: it holds chunk 1, rank 1's: take chunk rank, the argument "
                                                r"zero1_init is given \(0 here\)\.$"),
    (init_with_zeros, zero1_step, r"^rank 0: init_with_zeros's shard of '0.weight' has the right shape, \(12,\), but "
                                  r"not the values of chunk 0 .*: element 0 is 0, expected -0.00374341\."),
    # float64 values equal the parameter's: torch.equal alone let the shard through, and zero1_step raised
    (init_in_float64, zero1_step, r"(?s)^rank 0: init_in_float64's shard of '0.weight' is a tensor of shape \(12,\) "
                                  r"and dtype torch.float64;.*Hint: it is float64: the shards are fp32"),
]


@pytest.fixture(scope="module")
def zero1_results():
    answers = (*((zero1_init, step) for step in ZERO1_RIGHT_STEPS), *((init, step) for init, step, _ in ZERO1_MISTAKES))
    return dict(zip(answers, lesson09.run_zero1_answers(answers)))


@pytest.mark.parametrize("init, step, feedback", ZERO1_MISTAKES,
                         ids=[f"{init.__name__}-{step.__name__}" for init, step, _ in ZERO1_MISTAKES])
def test_zero1_names_wrong_answers(init, step, feedback, zero1_results):
    with pytest.raises(CheckFailed, match=feedback):
        lesson09.judge_zero1(step.__name__, init.__name__, zero1_results[(init, step)],
                             division_into_a_new_tensor(step))


@pytest.mark.parametrize("init, step, feedback", [   # a stub (refused before ranks start), and an answer that raises
    (zero1_init, blank_zero1_step, r"blank_zero1_step is not written yet: it raised NotImplementedError"),
    (non_leaf_shards, zero1_step, r"(?s)rank \d: non_leaf_shards raised ValueError inside torch: can't optimize a "
                                  r"non-leaf Tensor\nwhile zero1_init\(params, rank=\d, world_size=2\)"),
])
def test_zero1_rejects_wrong_answers(init, step, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_zero1(init, step)


def test_an_answer_that_raises_on_3_ranks_is_told_that_2_were_right():
    # the parameter put together from two shards: right on 2 ranks; on 3 it has two thirds of the parameter's values
    # and the view raises, and the message points at code written for 2 ranks
    with pytest.raises(CheckFailed, match=r"(?s)raised .*on rank \d of 3, step 0.*Hint: It ran on 2 ranks \(the "
                                          r"check's first run\) without raising; this is its second run, on 3 ranks"):
        check_zero1(zero1_init, puts_the_parameter_together_from_two_shards)


def zero1_step_over_two_written(params, shards, optimizer):
    rank = dist.get_rank()
    for p, s in zip(params, shards):
        dist.all_reduce(p.grad)
        p.grad /= 2                                   # the check's number of ranks, written in
        s.grad = p.grad.reshape(-1).chunk(2)[rank]
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(2)), s.detach())


def test_a_divisor_written_as_a_number_is_refused_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(lesson09, "run_zero1_answers", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^zero1_step_over_two_written divides a gradient by 2, a number written in "
                                          r"the code \(`p\.grad /= 2`\)\.\nHint: divide by dist\.get_world_size\(\)"):
        lesson09.check_zero1(zero1_init, zero1_step_over_two_written)


def zero1_init_in_two_written(params, rank, world_size):
    shards = [p.detach().reshape(-1).chunk(2)[rank].clone().requires_grad_() for p in params]   # the check's 2 ranks
    return shards, torch.optim.Adam(shards, lr=0.01)


def test_a_shard_count_written_as_a_number_is_refused_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(lesson09, "run_zero1_answers", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^zero1_init_in_two_written splits a tensor into 2, a number written in "
                                          r"the code \(`shards = .*chunk\(2\).*`\)\.\nHint: split into world_size"):
        lesson09.check_zero1(zero1_init_in_two_written, zero1_step)


def zero1_init_halves_by_size(params, rank, world_size):
    shards = []
    for p in params:
        size = math.ceil(p.numel() / 2)               # the check's 2 ranks, written in: 3 + 2 for 5, as chunk
        shards.append(p.detach().reshape(-1)[rank * size:(rank + 1) * size].clone().requires_grad_())
    return shards, torch.optim.Adam(shards, lr=0.01)


def zero1_step_slices_in_two(params, shards, optimizer):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        dist.all_reduce(p.grad)
        p.grad /= world_size
        s.grad = p.grad.reshape(-1).chunk(2)[rank]    # the check's 2 ranks, written in
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


def zero1_step_halves_the_sum(params, shards, optimizer):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        dist.all_reduce(p.grad)
        p.grad *= 0.5                                 # the mean of the check's 2 ranks, written in
        s.grad = p.grad.reshape(-1).chunk(world_size)[rank]
    optimizer.step()
    for p, s in zip(params, shards):
        dist.all_gather(list(p.detach().view(-1).chunk(world_size)), s.detach())


@pytest.mark.parametrize("init, step, feedback", [
    (zero1_init, zero1_step_halves_the_sum, r"^zero1_step_halves_the_sum divides a gradient by 2, a number written in "
                                            r"the code \(`p\.grad \*= 0\.5`\)\.\nHint: divide by "
                                            r"dist\.get_world_size\(\)"),
    (zero1_init_halves_by_size, zero1_step, r"^zero1_init_halves_by_size divides a parameter's size by 2, a number "
                                            r"written in the code \(`size = math\.ceil\(p\.numel\(\) / 2\)`\)\.\n"
                                            r"Hint: divide by world_size, the argument"),
    (zero1_init, zero1_step_slices_in_two, r"^zero1_step_slices_in_two splits a tensor into 2, a number written in the "
                                           r"code \(`s\.grad = p\.grad\.reshape\(-1\)\.chunk\(2\)\[rank\]`\)\.\n"
                                           r"Hint: split into dist\.get_world_size\(\), the number of ranks"),
])
def test_a_number_of_shards_written_in_either_function_is_refused_before_any_rank_starts(init, step, feedback,
                                                                                           monkeypatch):
    monkeypatch.setattr(lesson09, "run_zero1_answers", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=feedback):
        lesson09.check_zero1(init, step)


def test_a_hang_is_stopped_after_30_s(monkeypatch):
    # a right answer takes well under a second, 2 to 7 s the first time in a kernel on a busy 2-core machine (Adam's
    # first step imports torch._dynamo on every rank), counted from when every rank started: 30 s, as lessons 07
    # and 16, whose checks run the same way
    timeouts = []

    def run_zero1_answers(answers, timeout, name, explain):
        timeouts.append(timeout)
        raise CheckFailed("stopped")

    monkeypatch.setattr(lesson09, "run_zero1_answers", run_zero1_answers)
    with pytest.raises(CheckFailed, match="^stopped$"):
        check_zero1(zero1_init, zero1_step)
    assert timeouts == [30.0]


def test_a_hang_names_no_rank_that_waits_for_the_checks_next_group():
    """On the 2-rank run rank 2 waits in the check's own set-up of the 3-rank group (`common.groups_of`): a hang of
    the answer names ranks 0 and 1 only, and no new_group the learner never called (stacks as fault handlers write
    them)."""
    from ddp_lab.checks.common import timeout_message
    from ddp_lab.launcher.errors import LaunchTimeout, RankFailure

    def stack(*frames):
        lines = "".join(f'  File "{file}", line 1 in {fn}\n' for file, fn in frames)
        return f"Current thread (most recent call first):\n{lines}"

    c10d = "/x/torch/distributed/distributed_c10d.py"
    failures = {0: RankFailure(0, "timeout", "", stack((c10d, "all_gather"), ("/a.py", "zero1_step"))),
                1: RankFailure(1, "timeout", "", stack((c10d, "all_reduce"), ("/a.py", "zero1_step"))),
                2: RankFailure(2, "timeout", "", stack((c10d, "_new_process_group_helper"),
                                                       (c10d, "init_process_group"),
                                                       ("/x/ddp_lab/checks/common.py", "groups_of")))}
    message = timeout_message(LaunchTimeout("", failures, 0, ["", "", ""]), "zero1_step", 8)
    assert "Stuck: rank 0 in dist.all_gather, rank 1 in dist.all_reduce.\n" in message, message
    assert "rank 2" not in message and "dist.new_group" not in message, message


def test_a_hang_on_3_ranks_says_that_2_finished():
    """A rank from 2 on stuck in the answer's calls: the hang came in the second run, so the first finished without
    raising (stacks as fault handlers write them); on 2 ranks the default hint stays."""
    from ddp_lab.checks.common import timeout_message
    from ddp_lab.launcher.errors import LaunchTimeout, RankFailure

    def stack(*frames):
        lines = "".join(f'  File "{file}", line 1 in {fn}\n' for file, fn in frames)
        return f"Current thread (most recent call first):\n{lines}"

    c10d = "/x/torch/distributed/distributed_c10d.py"
    on_3 = {0: RankFailure(0, "timeout", "", stack((c10d, "all_reduce"), ("/a.py", "zero1_step"))),
            1: RankFailure(1, "timeout", "", stack((c10d, "all_reduce"), ("/a.py", "zero1_step"))),
            2: RankFailure(2, "timeout", "", stack((c10d, "recv"), ("/a.py", "zero1_step")))}
    message = timeout_message(LaunchTimeout("", on_3, 0, ["", "", ""]), "zero1_step", 30, lesson09._hang_hint)
    assert ("Stuck: rank 0 in dist.all_reduce, rank 1 in dist.all_reduce, rank 2 in dist.recv.\nIt ran on 2 ranks "
            "(the check's first run) without raising; this is its second run, on 3 ranks: look for code written "
            "for 2 ranks") in message, message
    assert "\nHint: the ranks wait in calls that do not pair up (dist.all_reduce, dist.recv)" in message, message
    on_2 = {**on_3, 2: RankFailure(2, "timeout", "", stack((c10d, "init_process_group"),
                                                          ("/x/ddp_lab/checks/common.py", "groups_of")))}
    message = timeout_message(LaunchTimeout("", on_2, 0, ["", "", ""]), "zero1_step", 30, lesson09._hang_hint)
    assert "second run" not in message and "Hint: the ranks wait in collectives that do not pair up" in message


def test_an_all_gather_never_waited_is_named_when_it_had_filled_part_of_the_parameter():
    """gloo fills the chunks of an unwaited all-gather one at a time: read half-way, the parameter has its own
    chunk new and another old. The hint names the work never waited for, not the shards' order."""
    before, want = torch.zeros(4), torch.arange(1.0, 5.0)
    half_way = torch.tensor([1.0, 2.0, 0.0, 0.0])
    hint = lesson09._params_hint(half_way, want, before, 0, {"world_size": 2, "unwaited_gathers": 1, "lr": [0.01]})
    assert hint.startswith("the parameters were only partly updated when zero1_step returned: a "
                           "collective called with async_op=True returned a work that was never waited for"), hint

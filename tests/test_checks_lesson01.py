"""The lesson 01 checks accept a right answer and reject plausible wrong ones with specific feedback."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddp_lab.checks import CheckFailed, lesson01
from ddp_lab.checks.common import division_into_a_new_tensor
from ddp_lab.checks.lesson01 import check_data_parallel_backward, check_memory_per_device

# --- memory per device --------------------------------------------------------------------

SPLIT = {
    "single": set(),
    "data": {"activations"},
    "model": {"params", "grads", "optimizer", "activations"},
    "zero1": {"optimizer", "activations"},
    "zero2": {"grads", "optimizer", "activations"},
    "zero3": {"params", "grads", "optimizer", "activations"},
}


def memory_per_device(n_params, n_activations, world_size, strategy, split=SPLIT, adam_states=2, bytes_per=4):
    """Right answer (with knobs the wrong answers below turn)."""
    full = {"params": 4 * n_params, "grads": 4 * n_params, "optimizer": 4 * adam_states * n_params,
            "activations": 4 * n_activations}
    full = {k: v * bytes_per // 4 for k, v in full.items()}
    n = 1 if strategy == "single" else world_size
    return {k: v // n if k in split[strategy] else v for k, v in full.items()}


def memory_one_adam_state(n_params, n_activations, world_size, strategy):
    return memory_per_device(n_params, n_activations, world_size, strategy, adam_states=1)


def memory_data_parallel_splits_weights(n_params, n_activations, world_size, strategy):
    return memory_per_device(n_params, n_activations, world_size, strategy,
                             split={**SPLIT, "data": {"params", "grads", "optimizer", "activations"}})


def memory_zero1_splits_grads(n_params, n_activations, world_size, strategy):
    return memory_per_device(n_params, n_activations, world_size, strategy,
                             split={**SPLIT, "zero1": {"grads", "optimizer", "activations"}})


def memory_data_keeps_whole_batch(n_params, n_activations, world_size, strategy):
    return memory_per_device(n_params, n_activations, world_size, strategy, split={**SPLIT, "data": set()})


def memory_in_values(n_params, n_activations, world_size, strategy):
    return {k: v // 4 for k, v in memory_per_device(n_params, n_activations, world_size, strategy).items()}


def memory_activations_in_values(n_params, n_activations, world_size, strategy):
    result = memory_per_device(n_params, n_activations, world_size, strategy)
    return {**result, "activations": result["activations"] // 4}     # bytes for the rest, values for these


def memory_missing_key(n_params, n_activations, world_size, strategy):
    result = memory_per_device(n_params, n_activations, world_size, strategy)
    del result["optimizer"]
    return result


def memory_in_floats(n_params, n_activations, world_size, strategy):
    return {k: v / 1 for k, v in memory_per_device(n_params, n_activations, world_size, strategy).items()}   # / not //


def memory_in_gigabytes(n_params, n_activations, world_size, strategy):
    return {k: v / 1e9 for k, v in memory_per_device(n_params, n_activations, world_size, strategy).items()}


def memory_in_whole_mebibytes(n_params, n_activations, world_size, strategy):
    return {k: v // 2**20 for k, v in memory_per_device(n_params, n_activations, world_size, strategy).items()}


def memory_all_zeros(n_params, n_activations, world_size, strategy):
    return {"params": 0, "grads": 0, "optimizer": 0, "activations": 0}   # a placeholder left in


def memory_single_divided_too(n_params, n_activations, world_size, strategy):
    """Wrong: divides by world_size under 'single' too, which is one device."""
    result = memory_per_device(n_params, n_activations, world_size, strategy)
    return {k: v // world_size for k, v in result.items()} if strategy == "single" else result


def memory_two_devices_written(n_params, n_activations, world_size, strategy):
    """Wrong: divides by 2 where world_size decides (the check's world sizes are 3 and 8)."""
    return memory_per_device(n_params, n_activations, 2, strategy)


def memory_in_16_bit(n_params, n_activations, world_size, strategy):
    """Wrong: 2 bytes per value (the bf16 habit), where the exercise counts fp32."""
    return memory_per_device(n_params, n_activations, world_size, strategy, bytes_per=2)


def memory_activations_in_16_bit(n_params, n_activations, world_size, strategy):
    """Wrong: the activations at 2 bytes per value (as autocast keeps them), the rest right."""
    result = memory_per_device(n_params, n_activations, world_size, strategy)
    return {**result, "activations": result["activations"] // 2}


def memory_adam_keeps_a_copy(n_params, n_activations, world_size, strategy):
    """Wrong: 12 bytes per parameter of optimizer state (a copy of the weights counted with Adam's two values)."""
    result = memory_per_device(n_params, n_activations, world_size, strategy)
    return {**result, "optimizer": result["optimizer"] * 3 // 2}


def memory_activations_in_params(n_params, n_activations, world_size, strategy):
    """Wrong: the activations counted with the params too."""
    result = memory_per_device(n_params, n_activations, world_size, strategy)
    return {**result, "params": result["params"] + result["activations"]}


def memory_arguments_swapped(n_activations, n_params, world_size, strategy):
    """Wrong: the first two parameters in the other order, so the model's state is counted from n_activations."""
    return memory_per_device(n_params, n_activations, world_size, strategy)


def memory_activations_from_n_params(n_params, n_activations, world_size, strategy):
    """Wrong: the activations counted from n_params (a line copied from the weights' and not changed)."""
    return memory_per_device(n_params, n_params, world_size, strategy)


def memory_stub(n_params, n_activations, world_size, strategy):
    raise NotImplementedError("start from the whole amounts")


def memory_lesson_strategies_only(n_params, n_activations, world_size, strategy):
    """Wrong: the lesson's version unchanged, which raises ValueError(strategy) for the ZeRO stages."""
    if strategy in ("single", "data", "model"):
        return memory_per_device(n_params, n_activations, world_size, strategy)
    raise ValueError(strategy)


def memory_no_zero3(n_params, n_activations, world_size, strategy):
    """Wrong: a dict of the strategies' splits without 'zero3': a KeyError."""
    split = {name: parts for name, parts in SPLIT.items() if name != "zero3"}
    return memory_per_device(n_params, n_activations, world_size, strategy, split={**split, "x": split[strategy]})


def memory_of_the_package(n_params, n_activations, world_size, strategy):
    """Wrong: returns the package's own answer."""
    return lesson01.memory_per_device(n_params, n_activations, world_size, strategy)


def test_memory_accepts_the_right_answer(capsys):
    check_memory_per_device(memory_per_device)
    assert capsys.readouterr().out.startswith("✓ memory_per_device matches the reference")


@pytest.mark.parametrize("wrong, feedback", [
    (memory_one_adam_state, r"strategy='single'\)\['optimizer'\]: expected 9_600_000 bytes, got 4_800_000\.\n"
                            r"Hint: Adam keeps two values per parameter"),
    (memory_data_parallel_splits_weights, r"strategy='data'\)\['params'\]: expected 4_800_000 bytes, got 1_600_000"
                                          r".*\nHint: under 'data' every device holds all the params"),
    (memory_zero1_splits_grads, r"strategy='zero1'\)\['grads'\].*\nHint: under 'zero1' every device holds all "
                                r"the grads: zero1 shards only optimizer"),
    (memory_data_keeps_whole_batch, r"strategy='data'\)\['activations'\].*\nHint: under 'data' each device keeps "
                                    r"only 1/3 of the activations"),
    (memory_in_values, r"Hint: return bytes, not numbers of values"),
    (memory_activations_in_values, r"strategy='single'\)\['activations'\]: expected 1_320_000 bytes, got 330_000\.\n"
                                   r"Hint: that is the number of activations values: return bytes"),
    (memory_missing_key, r"should return a dict with keys \['params', 'grads', 'optimizer', 'activations'\]"),
    (memory_in_floats, r"\['params'\] is 4800000\.0, a float; bytes are whole numbers\.\nHint: return ints"),
    # the units named, not the float (GB) or the generic hint (MiB, rounded down)
    (memory_in_gigabytes, r"strategy='single'\): expected \{.*\}, got \{'params': 0\.0048, .*\}: every component is "
                          r"the expected bytes in GB\.\nHint: return bytes, as ints"),
    (memory_in_whole_mebibytes, r"strategy='single'\): expected .*: every component is the expected bytes in MB or "
                                r"MiB\.\n"),
    # zeros are no unit: the first component is compared, as before units were named
    (memory_all_zeros, r"strategy='single'\)\['params'\]: expected 4_800_000 bytes, got 0\.\n"),
    (memory_single_divided_too, r"strategy='single'\)\['params'\]: expected 4_800_000 bytes, got 1_600_000\.\n"
                                r"Hint: 'single' is one device, and it holds all the params; this value is that "
                                r"divided by world_size \(3\), which counts the devices of the other strategies"),
    (memory_two_devices_written, r"strategy='data'\)\['activations'\]: expected 440_000 bytes, got 660_000\.\n"
                                 r"Hint: that is all the activations \(1_320_000 bytes\) divided by 2; under 'data' "
                                 r"each of the 3 devices holds 1/3 of the activations: divide by world_size\.$"),
    (memory_in_16_bit, r"strategy='single'\)\['params'\]: expected 4_800_000 bytes, got 2_400_000\.\n"
                       r"Hint: that is the params at 2 bytes per value \(16-bit, as bf16 and fp16 store them\); this "
                       r"exercise counts fp32: 4 bytes per value\.$"),
    (memory_activations_in_16_bit, r"strategy='single'\)\['activations'\]: expected 1_320_000 bytes, got 660_000\.\n"
                                   r"Hint: that is the activations at 2 bytes per value \(16-bit"),
    (memory_adam_keeps_a_copy, r"strategy='single'\)\['optimizer'\]: expected 9_600_000 bytes, got 14_400_000\.\n"
                               r"Hint: that is 12 bytes per parameter; Adam keeps 2 fp32 values per parameter"),
    (memory_activations_in_params, r"strategy='single'\)\['params'\]: expected 4_800_000 bytes, got 6_120_000\.\n"
                                   r"Hint: under 'single' the one device holds all the params; weights and "
                                   r"gradients take 4 bytes per parameter"),
    # the params counted from n_activations are named as such, not as a count of values (n_params is not 4 x
    # n_activations, so the two never give the same number)
    (memory_arguments_swapped, r"strategy='single'\)\['params'\]: expected 4_800_000 bytes, got 1_320_000\.\n"
                               r"Hint: that is the params counted from n_activations \(330_000\), not n_params: .*"
                               r"the arguments come in the order \(n_params, n_activations, world_size, strategy\)"),
    (memory_activations_from_n_params, r"strategy='single'\)\['activations'\]: expected 1_320_000 bytes, got "
                                       r"4_800_000\.\nHint: that is the activations counted from n_params "
                                       r"\(1_200_000\), not n_activations"),
])
def test_memory_rejects(wrong, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_memory_per_device(wrong)


@pytest.mark.parametrize("wrong, feedback", [   # an answer that raises, or is not the learner's: a verdict
    (memory_stub, r"^memory_stub is not written yet: it raised NotImplementedError\('start from the whole amounts'\)"),
    (memory_lesson_strategies_only, r"(?s)^memory_lesson_strategies_only raised ValueError: zero1\nwhile computing "
                                    r"memory_lesson_strategies_only\(1_200_000, 330_000, world_size=3, "
                                    r"strategy='zero1'\)\..*\nHint: the answer has no case for strategy 'zero1': "
                                    r"handle all six"),
    (memory_no_zero3, r"(?s)^memory_no_zero3 raised KeyError: 'zero3'\n.*\nHint: the answer has no case for strategy "
                      r"'zero3'"),
    (memory_of_the_package, r"^memory_of_the_package calls ddp_lab\.course\.device_memory\.memory_per_device, the "
                            r"package's own answer"),
    (lesson01.memory_per_device, r"^memory_per_device is ddp_lab\.course\.device_memory\.memory_per_device, the "
                                 r"package's own answer"),
])
def test_memory_names_an_answer_that_raises_or_is_the_package_s(wrong, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_memory_per_device(wrong)


def test_memory_names_the_optimizer_state_in_words():
    with pytest.raises(CheckFailed, match=r"strategy='data'\)\['optimizer'\].*\nHint: under 'data' every device holds "
                                          r"all the optimizer state: every device updates every weight"):
        check_memory_per_device(lambda n_params, n_activations, world_size, strategy: memory_per_device(
            n_params, n_activations, world_size, strategy, split={**SPLIT, "data": {"optimizer", "activations"}}))


# --- data-parallel backward: the wrong answers (and a few right ones) in one launch of 2 ranks ----

def data_parallel_backward(model, x, y):
    """Right answer: loss on my shard scaled by its share of the batch, then SUM the gradients."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    x_shard, y_shard = x.tensor_split(world_size)[rank], y.tensor_split(world_size)[rank]
    loss = F.mse_loss(model(x_shard), y_shard) * len(x_shard) / len(x)
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)


def dp_looks_first(model, x, y):
    """Right too: a look at the shard's predictions under no_grad, then the same as the right answer."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    with torch.no_grad():
        model(x.tensor_split(world_size)[rank])
    data_parallel_backward(model, x, y)


def dp_whole_batch(model, x, y):
    """Wrong: every rank runs the whole batch (right gradient, no parallelism)."""
    F.mse_loss(model(x), y).backward()


def dp_sum_not_mean(model, x, y):
    """Wrong: all_reduce sums the per-rank mean gradients and never divides."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    F.mse_loss(model(x.tensor_split(world_size)[rank]), y.tensor_split(world_size)[rank]).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)


def dp_mean_of_means(model, x, y):
    """Wrong when shards differ in size: averages the ranks' mean gradients with equal weights."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    F.mse_loss(model(x.tensor_split(world_size)[rank]), y.tensor_split(world_size)[rank]).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world_size


def dp_no_all_reduce(model, x, y):
    """Wrong: forgets to combine the gradients across ranks."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    x_shard, y_shard = x.tensor_split(world_size)[rank], y.tensor_split(world_size)[rank]
    (F.mse_loss(model(x_shard), y_shard) * len(x_shard) / len(x)).backward()


def dp_reduces_a_copy(model, x, y):
    """Wrong: all-reduces a copy of each gradient; the sum lands in the copy."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    x_shard, y_shard = x.tensor_split(world_size)[rank], y.tensor_split(world_size)[rank]
    (F.mse_loss(model(x_shard), y_shard) * len(x_shard) / len(x)).backward()
    for p in model.parameters():
        total = p.grad.clone()
        dist.all_reduce(total)


def dp_floor_shards(model, x, y):
    """Wrong: shards of len // world_size drop the last sample of an odd batch."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    per = len(x) // world_size
    x_shard, y_shard = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
    (F.mse_loss(model(x_shard), y_shard) * len(x_shard) / len(x)).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)


def dp_fixed_shard_size(model, x, y):
    """Wrong: a shard size written as a number, 4, the shard of 8 (and of 7) samples on 2 ranks."""
    rank = dist.get_rank()
    x_shard, y_shard = x[4 * rank:4 * rank + 4], y[4 * rank:4 * rank + 4]
    (F.mse_loss(model(x_shard), y_shard) * len(x_shard) / len(x)).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)


def dp_shards_for_two_ranks(model, x, y):
    """Wrong: the number of shards written as a number, 2, the check's world size."""
    rank = dist.get_rank()
    x_shard, y_shard = x.tensor_split(2)[rank], y.tensor_split(2)[rank]
    (F.mse_loss(model(x_shard), y_shard) * len(x_shard) / len(x)).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)


def _shard(x, y):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    return x.tensor_split(world_size)[rank], y.tensor_split(world_size)[rank]


def _share_backward(model, x, y):
    """Backward on this rank's shard, its loss weighted by its share of the batch (the right first half)."""
    x_shard, y_shard = _shard(x, y)
    (F.mse_loss(model(x_shard), y_shard) * len(x_shard) / len(x)).backward()


def dp_waits_for_async(model, x, y):
    """Right too: async all-reduces, each waited on."""
    _share_backward(model, x, y)
    works = [dist.all_reduce(p.grad, async_op=True) for p in model.parameters()]
    for work in works:
        work.wait()


def dp_checks_its_handles(model, x, y):
    """Right too: each handle checked to be torch's own and waited on through the class (the check watches the
    handles without standing in for them)."""
    _share_backward(model, x, y)
    works = [dist.all_reduce(p.grad, async_op=True) for p in model.parameters()]
    for work in works:
        if isinstance(work, dist.Work):
            dist.Work.wait(work)


def dp_zero_grad_after(model, x, y):
    """Wrong: the right gradients, then model.zero_grad(), which sets them to None."""
    data_parallel_backward(model, x, y)
    model.zero_grad()


def dp_no_backward(model, x, y):
    """Wrong: the loss on the shard, but no backward."""
    x_shard, y_shard = _shard(x, y)
    F.mse_loss(model(x_shard), y_shard)


def dp_async_never_waited(model, x, y):
    """Wrong: async all-reduces whose work handles are dropped."""
    _share_backward(model, x, y)
    for p in model.parameters():
        dist.all_reduce(p.grad, async_op=True)


def dp_reduces_the_loss(model, x, y):
    """Wrong: all-reduces the loss before backward; autograd does not see the all_reduce."""
    x_shard, y_shard = _shard(x, y)
    loss = F.mse_loss(model(x_shard), y_shard) * len(x_shard) / len(x)
    dist.all_reduce(loss)
    loss.backward()


def dp_bucket_not_copied_back(model, x, y):
    """Wrong: all-reduces one flat tensor of the gradients and never copies the sum back."""
    _share_backward(model, x, y)
    dist.all_reduce(torch.cat([p.grad.flatten() for p in model.parameters()]))


def dp_divides_twice(model, x, y):
    """Wrong: the shares already add up to the mean; dividing by world_size again halves it."""
    _share_backward(model, x, y)
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def dp_divides_on_rank_0(model, x, y):
    """Wrong: the shares already add up to the mean; rank 0 alone divides the sum by world_size again."""
    _share_backward(model, x, y)
    for p in model.parameters():
        dist.all_reduce(p.grad)
        if dist.get_rank() == 0:
            p.grad /= dist.get_world_size()


def dp_sums_the_losses(model, x, y):
    """Wrong: reduction='sum' and no division by the batch size."""
    x_shard, y_shard = _shard(x, y)
    F.mse_loss(model(x_shard), y_shard, reduction="sum").backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)


def dp_integer_share(model, x, y):
    """Wrong: the share with //, which is 0."""
    x_shard, y_shard = _shard(x, y)
    (F.mse_loss(model(x_shard), y_shard) * (len(x_shard) // len(x))).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)


def dp_max_op(model, x, y):
    """Wrong: all-reduces with op=MAX."""
    _share_backward(model, x, y)
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.MAX)


def dp_reduces_to_rank_0(model, x, y):
    """Wrong: dist.reduce leaves the sum on rank 0 only."""
    _share_backward(model, x, y)
    for p in model.parameters():
        dist.reduce(p.grad, dst=0)


def dp_zeroes_a_sample(model, x, y):
    """Wrong: the right shards and gradients, but the caller's batch is written into (sample 0 set to zero first)."""
    x[0] = 0.0
    rank, world_size = dist.get_rank(), dist.get_world_size()
    x_shard, y_shard = x.tensor_split(world_size)[rank], y.tensor_split(world_size)[rank]
    (F.mse_loss(model(x_shard), y_shard) * len(x_shard) / len(x)).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)


def dp_sum_divided_by_the_shard(model, x, y):
    """Wrong: reduction='sum', then the summed gradients divided by this rank's shard size (2x at a batch of 8 on 2
    ranks, as if world_size were missing; 7/4 and 7/3 at 7)."""
    x_shard, y_shard = _shard(x, y)
    F.mse_loss(model(x_shard), y_shard, reduction="sum").backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= len(x_shard)


def dp_split_into_pieces_of_world_size(model, x, y):
    """Wrong: x.split(world_size) makes pieces of world_size samples, not world_size pieces."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    x_shard, y_shard = x.split(world_size)[rank], y.split(world_size)[rank]
    (F.mse_loss(model(x_shard), y_shard) * len(x_shard) / len(x)).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)


def dp_first_layer_only(model, x, y):
    """Wrong: all-reduces the gradients of the first layer only."""
    _share_backward(model, x, y)
    for p in model[0].parameters():
        dist.all_reduce(p.grad)


def dp_steps_the_optimizer(model, x, y):
    """Wrong: the right gradients, then an SGD step, as the lesson's data_parallel_step took: the weights change."""
    data_parallel_backward(model, x, y)
    torch.optim.SGD(model.parameters(), lr=0.1).step()


def dp_in_double(model, x, y):
    """Wrong: the model converted to float64, so its gradients are float64."""
    model.double()
    x_shard, y_shard = _shard(x.double(), y.double())
    (F.mse_loss(model(x_shard), y_shard) * len(x_shard) / len(x)).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)


def dp_backward_on_a_copy(model, x, y):
    """Wrong: forward and backward on copy.deepcopy(model): the copy's p.grad get the sums, the model's stay None."""
    import copy

    data_parallel_backward(copy.deepcopy(model), x, y)


def dp_autograd_grad_returned(model, x, y):
    """Wrong: torch.autograd.grad, the gradients all-reduced and returned; no p.grad is ever set."""
    x_shard, y_shard = _shard(x, y)
    loss = F.mse_loss(model(x_shard), y_shard) * len(x_shard) / len(x)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    for grad in grads:
        dist.all_reduce(grad)
    return grads


def dp_autograd_grad_stored(model, x, y):
    """Right too: torch.autograd.grad, the all-reduced gradients stored in p.grad."""
    x_shard, y_shard = _shard(x, y)
    params = list(model.parameters())
    grads = torch.autograd.grad(F.mse_loss(model(x_shard), y_shard) * len(x_shard) / len(x), params)
    for p, grad in zip(params, grads):
        dist.all_reduce(grad)
        p.grad = grad


def dp_mean_into_a_new_tensor(model, x, y):
    """Wrong: the sum divided by world_size into a new tensor that nothing reads; p.grad keeps the sum."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    F.mse_loss(model(x.tensor_split(world_size)[rank]), y.tensor_split(world_size)[rank]).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        mean = p.grad / world_size


def dp_strided_shards(model, x, y):
    """Right too: rank r takes samples r, r + N, ...; the summed losses divided by the whole batch."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    (F.mse_loss(model(x[rank::world_size]), y[rank::world_size], reduction="sum") / len(x)).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)


def dp_bucket_copied_back(model, x, y):
    """Right too: one flat tensor of the gradients all-reduced, the sum copied back into each p.grad."""
    _share_backward(model, x, y)
    flat = torch.cat([p.grad.flatten() for p in model.parameters()])
    dist.all_reduce(flat)
    for p, piece in zip(model.parameters(), flat.split([p.numel() for p in model.parameters()])):
        p.grad.copy_(piece.view_as(p))


def test_data_parallel_refuses_a_world_size_written_in_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(lesson01, "run_answers_on_ranks", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^dp_shards_for_two_ranks splits a tensor into 2, a number written in the "
                                          r"code \(`x_shard, y_shard = x\.tensor_split\(2\)\[rank\], .*`\)\.\n"
                                          r"Hint: split into the number of ranks, dist\.get_world_size\(\)"):
        check_data_parallel_backward(dp_shards_for_two_ranks)


def test_data_parallel_accepts_the_right_answer(capsys):
    check_data_parallel_backward(data_parallel_backward)
    # `in`, not startswith: on a 1-core machine ddp_lab first prints a "ddp_lab: nprocs=2 ..." note
    assert "✓ data_parallel_backward: each of 2 ranks used only its shard" in capsys.readouterr().out


DP_MISTAKES = [
    (dp_whole_batch, r"batch of 8 samples on 2 ranks: rank 0 ran the model on all 8 samples"),
    (dp_sum_not_mean, r"batch of 8 samples, rank 0, 0\.weight\.grad\[0, 0\]: expected .*\n"
                      r"Hint: this is 2x the right gradient"),
    (dp_mean_of_means, r"batch of 7 samples, rank 0, .*\nHint: this is the mean of the ranks' mean losses"),
    (dp_no_all_reduce, r"batch of 8 samples, rank 0, .*\nHint: this is the gradient of this rank's shard alone: "
                       r"combine"),
    (dp_reduces_a_copy, r"batch of 8 samples, rank 0, .*\nHint: this is the gradient of this rank's shard alone: "
                        r"dist\.all_reduce ran, but never on a p\.grad: on a copy of a p\.grad"),
    (dp_floor_shards, r"batch of 7 samples on 2 ranks: sample 6 was used by no rank .*\nHint: every rank took "
                      r"7 // 2 = 3 samples, which leaves 1 over: when the batch does not divide by world_size"),
    (dp_fixed_shard_size, r"batch of 16 samples on 2 ranks: samples 8 to 15 were used by no rank .*\nHint: every rank "
                          r"took a run of 4 samples \(rank r from sample r \* 4\), which covers 8 of the 16; "
                          r"tensor_split's shards of 16 have \[8, 8\] samples\. The shard size was 4 in the "
                          r"batches of 8 and 7 too: a shard size written as a number"),
    (dp_zero_grad_after, r"^batch of 8 samples, rank 0, 0\.weight\.grad is None when dp_zero_grad_after returned, "
                         r"although backward computed it and dist\.all_reduce summed it: it was set to None "
                         r"afterwards\.\nHint: model\.zero_grad\(\) and optimizer\.zero_grad\(\) set the gradients "
                         r"to None"),
    (dp_no_backward, r"^batch of 8 samples, rank 0, 0\.weight\.grad is None: no backward computed it\.\nHint: call "
                     r"loss\.backward\(\)"),
    (dp_async_never_waited, r"^batch of 8 samples, rank 0: dist\.all_reduce\(\.\.\., async_op=True\) returned 4 work "
                            r"handle\(s\), and none of them was used: dp_async_never_waited returned without waiting "
                            r"for the sums.*\nHint: keep the handles and call \.wait\(\) on each"),
    (dp_reduces_the_loss, r"batch of 8 samples, rank 0, .*\nHint: this is the gradient of this rank's shard alone: "
                          r"dist\.all_reduce ran, but never on a p\.grad: on a one-number tensor that autograd "
                          r"tracks \(a loss\)\. Autograd does not see an all_reduce"),
    (dp_bucket_not_copied_back, r"shard alone: dist\.all_reduce ran, but never on a p\.grad: on one flat tensor of "
                                r"all the gradients \(torch\.cat makes a new tensor\)"),
    (dp_sum_divided_by_the_shard, r"^batch of 8 samples, rank 0, .*\nHint: this is 2x the right gradient, len\(x\) / "
                                  r"len\(shard\) = 8/4, and so it is on every batch \(8/4, 7/4, 16/8\): the summed "
                                  r"gradients were divided by this rank's shard size\. The batch's mean divides the "
                                  r"sum by the whole batch, len\(x\)"),
    (dp_split_into_pieces_of_world_size, r"^batch of 8 samples on 2 ranks: samples 4 to 7 were used by no rank .*\n"
                                         r"Hint: every rank took a run of 2 samples .*A run of world_size samples is "
                                         r"what x\.split\(world_size\) gives: split\(n\) makes pieces of n samples, "
                                         r"tensor_split\(n\) makes n pieces\.$"),
    (dp_first_layer_only, r"^batch of 8 samples, rank 0, 2\.weight\.grad.*\nHint: this is the gradient of this rank's "
                          r"shard alone: dist\.all_reduce ran on 2 of the 4 parameters' gradients, but not on "
                          r"2\.weight\.grad\. Every parameter's gradient needs the sum"),
    (dp_divides_twice, r"batch of 8 samples, rank 0, .*\nHint: this is 1/2 of the right gradient \(1/world_size\): "
                       r"every element is off by the same factor"),
    # rank 1 is right: the hint says so, not that the shares must be weighted (they are)
    (dp_divides_on_rank_0, r"^batch of 8 samples, rank 0, .*\nHint: this is 1/2 of the right gradient \(1/world_size\)"
                           r": every element is off by the same factor, so only a scale is wrong; rank 1 ends with "
                           r"the right gradient, so the factor comes from a step one of the two takes and the other "
                           r"does not"),
    (dp_sums_the_losses, r"batch of 8 samples, rank 0, .*\nHint: this is 8x the right gradient \(the batch size, "
                         r"len\(x\)\)"),
    (dp_integer_share, r"batch of 8 samples, rank 0, .*\nHint: this gradient is 0 everywhere"),
    (dp_max_op, r"batch of 8 samples, rank 0, .*\nHint: dist\.all_reduce ran on p\.grad with op=MAX: .*SUM them"),
    # the rows the model saw are no longer the batch's: the changed batch is named, not a sample used by no rank
    (dp_zeroes_a_sample, r"^rank 0, batch of 8 samples: dp_zeroes_a_sample changed x in place \(the values after the "
                         r"call differ from the batch it was given\)\.\nHint: leave the caller's batch as it is"),
    (dp_reduces_to_rank_0, r"^batch of 8 samples, rank 1, 0\.weight\.grad.*\nHint: rank 0 ends with the right "
                           r"gradient, rank 1 does not: dist\.reduce ran, and it leaves the result on its dst rank "
                           r"only"),
    (dp_steps_the_optimizer, r"^batch of 8 samples, rank 0: the gradients are right, but dp_steps_the_optimizer "
                             r"changed the model's weights \(0\.weight, 0\.bias, 2\.weight, 2\.bias differ from the "
                             r"model it was given\)\.\nHint: compute the gradients only .*no optimizer\.step\(\)"),
    # a float64 gradient is named, not compared with the float32 reference (torch.isclose raised in the judge)
    (dp_in_double, r"^batch of 8 samples, rank 0, 0\.weight\.grad is torch\.float64, expected torch\.float32, the "
                   r"dtype of the model's parameters as dp_in_double was given them\.\nHint: keep the model and its "
                   r"gradients in the dtype they came in"),
    # backward ran, on the copy: not "no backward computed it" with a hint to call loss.backward()
    (dp_backward_on_a_copy, r"^batch of 8 samples, rank 0, 0\.weight\.grad is None: the forward ran on a copy of the "
                            r"model .*\nHint: run forward and backward on the model itself"),
    # never stored in p.grad: not "set to None afterwards" with a hint about zero_grad
    (dp_autograd_grad_returned, r"^batch of 8 samples, rank 0, 0\.weight\.grad is None: a backward computed it but "
                                r"never stored it in 0\.weight\.grad: torch\.autograd\.grad returns the gradients "
                                r"to its caller"),
]
DP_RIGHT = (dp_looks_first, dp_waits_for_async, dp_checks_its_handles, dp_strided_shards, dp_bucket_copied_back,
            dp_autograd_grad_stored)


@pytest.fixture(scope="module")
def dp_results():
    """Every mistaken answer (and the other right ones) run by the check's own runner, one after the other in one
    launch of 2 ranks."""
    answers = (*(answer for answer, _ in DP_MISTAKES), *DP_RIGHT, dp_mean_into_a_new_tensor)
    return dict(zip(answers, lesson01.run_data_parallel_answers(answers)))


@pytest.mark.parametrize("answer", DP_RIGHT, ids=[answer.__name__ for answer in DP_RIGHT])
def test_data_parallel_accepts_other_right_answers(answer, dp_results):
    assert lesson01.judge_data_parallel_backward(answer.__name__, dp_results[answer]).startswith(
        f"{answer.__name__}: each of 2 ranks used only its shard and holds the full-batch gradient")


@pytest.mark.parametrize("wrong, feedback", DP_MISTAKES, ids=[answer.__name__ for answer, _ in DP_MISTAKES])
def test_data_parallel_rejects(wrong, feedback, dp_results):
    with pytest.raises(CheckFailed, match=feedback):
        lesson01.judge_data_parallel_backward(wrong.__name__, dp_results[wrong])


def test_data_parallel_names_a_mean_divided_into_a_new_tensor(dp_results):
    """The sum left in p.grad, where the answer divided it into a new tensor: the hint quotes that line, not a bare
    'divide by world_size', which the answer does."""
    division = division_into_a_new_tensor(dp_mean_into_a_new_tensor)
    with pytest.raises(CheckFailed, match=r"^batch of 8 samples, rank 0, .*\nHint: this is 2x the right gradient, the "
                                          r"sum that all_reduce left in p\.grad: `mean = p\.grad / world_size` "
                                          r"divides into a NEW tensor"):
        lesson01.judge_data_parallel_backward("dp_mean_into_a_new_tensor", dp_results[dp_mean_into_a_new_tensor],
                                              division)


def dp_reduces_before_backward(model, x, y):
    """Wrong: all-reduces the gradients before backward, when every p.grad is still None."""
    for p in model.parameters():
        dist.all_reduce(p.grad)
    _share_backward(model, x, y)


def test_data_parallel_says_gradients_exist_only_after_backward():
    with pytest.raises(CheckFailed, match=r"(?s)raised TypeError inside torch: .*NoneType.*\nwhile running a batch of "
                                          r"8 samples\..*\nHint: dist\.all_reduce was given None before any backward "
                                          r"had run: a parameter's \.grad is None until loss\.backward\(\)"):
        lesson01.run_data_parallel_answers((dp_reduces_before_backward,))


def dp_only_rank_0_reduces(model, x, y):
    """Wrong: the all-reduce under `if rank == 0:`; rank 0 waits in it for a rank that never comes."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    x_shard, y_shard = x.tensor_split(world_size)[rank], y.tensor_split(world_size)[rank]
    (F.mse_loss(model(x_shard), y_shard) * len(x_shard) / len(x)).backward()
    if rank == 0:
        for p in model.parameters():
            dist.all_reduce(p.grad)


def test_data_parallel_names_a_hang_in_a_collective_as_such():
    """A check without a hang hint of its own gets the collectives' hint, not the send/recv one of lesson 02."""
    with pytest.raises(CheckFailed) as failure:
        check_data_parallel_backward(dp_only_rank_0_reduces, timeout=2)
    message = str(failure.value)
    assert "did not finish within 2 s" in message and "rank 0 in dist.all_reduce" in message, message
    assert "send needs a matching recv" not in message, message
    assert "\nHint: the ranks wait in collectives that do not pair up (dist.all_reduce)" in message, message
    assert "none may skip one (e.g. under `if rank == 0:`)" in message, message


def dp_parameters_reversed_on_rank_1(model, x, y):
    """Wrong: rank 1 all-reduces the gradients in the reverse order, so the calls pair tensors of other sizes."""
    _share_backward(model, x, y)
    params = list(model.parameters())
    for p in params[::-1] if dist.get_rank() == 1 else params:
        dist.all_reduce(p.grad)


def test_data_parallel_names_all_reduces_that_paired_different_gradients():
    """gloo aborts a rank whose all_reduce receives another size than its tensor holds: the hint says what that
    shows."""
    with pytest.raises(CheckFailed, match=r"(?s)^rank \d failed while running dp_parameters_reversed_on_rank_1: died "
                                          r"with signal SIGABRT.*\nHint: gloo aborted the rank: \d+ bytes arrived in "
                                          r"an all_reduce whose tensor holds \d+, so the ranks' all_reduce calls "
                                          r"paired gradients of different parameters"):
        check_data_parallel_backward(dp_parameters_reversed_on_rank_1, timeout=10)

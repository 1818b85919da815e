"""The lesson 11 check accepts a right int8 comm hook and rejects plausible wrong ones with specific feedback.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part of
the feedback that names it. The hooks, right ones among them, run in one launch, on 3 gloo ranks and then
on 2, each on a DDP model of its own (the check's own runner, then its judge); the solution notebook's right
hook goes through the check itself (nbval, tests/test_exercises.py).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from ddp_lab.checks import CheckFailed, lesson11
from ddp_lab.checks.lesson11 import check_int8_hook


def _done(tensor):
    future = torch.futures.Future()
    future.set_result(tensor)
    return future


def int8_hook_async(process_group, bucket):
    group = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    scale = buffer.abs().max().reshape(1)
    dist.all_reduce(scale, op=dist.ReduceOp.MAX, group=group)
    scale = scale.clamp_min(torch.finfo(torch.float32).tiny)
    levels = 127 // group.size()
    q = torch.round(buffer / scale * levels).to(torch.int8)

    def decompress(future):
        return buffer.copy_(future.value()[0].float() * scale / (levels * group.size()))

    return dist.all_reduce(q, group=group, async_op=True).get_future().then(decompress)


def fractional_levels(process_group, bucket):   # 127 / W levels: on 2 ranks 63.5, and a value at the scale gives 64
    buffer = bucket.buffer()
    world_size = dist.get_world_size()
    scale = buffer.abs().max().reshape(1)
    dist.all_reduce(scale, op=dist.ReduceOp.MAX)
    q = torch.round(buffer * (127 / world_size) / scale).to(torch.int8)
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / 127))


def fractional_levels_async(process_group, bucket):   # the same, in another order of float operations
    group = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    scale = buffer.abs().max().reshape(1)
    dist.all_reduce(scale, op=dist.ReduceOp.MAX, group=group)
    q = torch.round(buffer / scale * 127 / group.size()).to(torch.int8)

    def decompress(future):
        return buffer.copy_(future.value()[0].float() * scale / 127)

    return dist.all_reduce(q, group=group, async_op=True).get_future().then(decompress)


def stub(process_group, bucket):
    raise NotImplementedError("quantise, all_reduce, decompress")


def scale_ignores_world_size(process_group, bucket):  # each rank uses all 127 levels: the sum overflows
    buffer = bucket.buffer()
    scale = buffer.abs().max().reshape(1)
    dist.all_reduce(scale, op=dist.ReduceOp.MAX)
    q = torch.round(buffer * 127 / scale).to(torch.int8)
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / 127 / dist.get_world_size()))


def sum_not_mean(process_group, bucket):   # decompressed with scale / levels: the world size left out
    buffer = bucket.buffer()
    levels = 127 // dist.get_world_size()
    scale = buffer.abs().max().reshape(1)
    dist.all_reduce(scale, op=dist.ReduceOp.MAX)
    q = torch.round(buffer * levels / scale).to(torch.int8)
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / levels))


def not_decompressed(process_group, bucket):
    buffer = bucket.buffer()
    scale = buffer.abs().max().reshape(1)
    dist.all_reduce(scale, op=dist.ReduceOp.MAX)
    q = torch.round(buffer * (127 // dist.get_world_size()) / scale).to(torch.int8)
    dist.all_reduce(q)
    return _done(q)


def sums_in_int32(process_group, bucket):
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    levels = 127 // dist.get_world_size()
    q = torch.round(buffer * levels / scale).to(torch.int32)   # 4 bytes per value
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / (levels * dist.get_world_size())))


def decompressed_in_float64(process_group, bucket):
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    levels = 127 // dist.get_world_size()
    q = torch.round(buffer * levels / scale).to(torch.int8)
    dist.all_reduce(q)
    return _done(q.double() * scale.double() / (levels * dist.get_world_size()))


def sends_full_fp32(process_group, bucket):
    buffer = bucket.buffer().div_(dist.get_world_size())
    dist.all_reduce(buffer)
    return _done(buffer)


def _int8_mean(buffer, scale, to_int8=lambda v: torch.round(v).to(torch.int8)):
    """The exercise's steps 2-4 with a given scale (the mistakes below differ in how they get the scale)."""
    world_size = dist.get_world_size()
    levels = 127 // world_size
    q = to_int8(buffer * levels / scale)
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / (levels * world_size)))


def _shared_scale(buffer, op=dist.ReduceOp.MAX, of=torch.Tensor.abs):
    scale = of(buffer).max().reshape(1)
    dist.all_reduce(scale, op=op)
    return scale


def guarded_by_a_branch(process_group, bucket):   # right too: a zero scale replaced by 1 (the values are all 0 then)
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    return _int8_mean(buffer, torch.where(scale > 0, scale, torch.ones_like(scale)))


def guarded_after_dividing(process_group, bucket):   # right too: 0 / 0 computed, but kept out of the int8 values
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    levels = 127 // dist.get_world_size()
    q = torch.where(scale > 0, torch.round(buffer * levels / scale), torch.zeros_like(buffer)).to(torch.int8)
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / (levels * dist.get_world_size())))


def no_zero_guard(process_group, bucket):   # the exercise's steps without step 1's guard: 0 / 0 on a bucket of zeros
    buffer = bucket.buffer()
    return _int8_mean(buffer, _shared_scale(buffer))


def clamped_to_levels_after_127(process_group, bucket):   # 127 levels clamped to 127 // W: no wrap, values saturate
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    levels = 127 // dist.get_world_size()
    q = torch.round(buffer * 127 / scale).clamp(-levels, levels).to(torch.int8)
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / (127 * dist.get_world_size())))


def truncates(process_group, bucket):
    buffer = bucket.buffer()
    return _int8_mean(buffer, _shared_scale(buffer), to_int8=lambda v: v.to(torch.int8))


def scale_without_abs(process_group, bucket):
    buffer = bucket.buffer()
    return _int8_mean(buffer, _shared_scale(buffer, of=lambda t: t))


def own_scale(process_group, bucket):
    buffer = bucket.buffer()
    return _int8_mean(buffer, buffer.abs().max())


def scale_summed(process_group, bucket):
    buffer = bucket.buffer()
    return _int8_mean(buffer, _shared_scale(buffer, op=dist.ReduceOp.SUM))


def scale_doubled(process_group, bucket):
    buffer = bucket.buffer()
    return _int8_mean(buffer, 2 * _shared_scale(buffer))


def levels_for_two_ranks(process_group, bucket):   # the exercise's 2 ranks written into the code, 127 / 2 levels
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    q = torch.round(buffer * (127 / 2) / scale).to(torch.int8)
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / 127))


def levels_for_three_ranks(process_group, bucket):   # a world size of 3 written into the code: 127 // 3 levels
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    q = torch.round(buffer * (127 // 3) / scale).to(torch.int8)
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / (127 // 3 * 3)))


def levels_written_as_63(process_group, bucket):   # 127 // 2 levels per rank, and the mean as / (63 · 2)
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    q = torch.round(buffer * 63 / scale).to(torch.int8)
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / 126))


def _clamped(v):   # rounded, then held to the rank's whole levels: what does not fit stops at the end of the range
    levels = 127 // dist.get_world_size()
    return torch.round(v).clamp(-levels, levels).to(torch.int8)


def scale_without_abs_clamped(process_group, bucket):
    buffer = bucket.buffer()
    return _int8_mean(buffer, _shared_scale(buffer, of=lambda t: t), to_int8=_clamped)


def scale_from_rank_0_clamped(process_group, bucket):
    buffer = bucket.buffer()
    scale = buffer.abs().max().reshape(1)
    dist.broadcast(scale, src=0)
    return _int8_mean(buffer, scale, to_int8=_clamped)


def decompressed_with_127(process_group, bucket):   # 127 // W whole levels, but the sums decompressed with / 127
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    q = torch.round(buffer * (127 // dist.get_world_size()) / scale).to(torch.int8)
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / 127))


def levels_rounded(process_group, bucket):   # round(127 / W) levels: 64 on 2 ranks
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    levels = round(127 / dist.get_world_size())
    q = torch.round(buffer * levels / scale).to(torch.int8)
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / (levels * dist.get_world_size())))


def scale_from_rank_0(process_group, bucket):   # one scale for everyone, but rank 0's
    buffer = bucket.buffer()
    scale = buffer.abs().max().reshape(1)
    dist.broadcast(scale, src=0)
    return _int8_mean(buffer, scale)


def scale_from_the_mean(process_group, bucket):   # the mean |value| as the scale, all-reduced with MAX
    buffer = bucket.buffer()
    return _int8_mean(buffer, _shared_scale(buffer, of=lambda t: t.abs().mean()))


def scale_reduced_with_min(process_group, bucket):
    buffer = bucket.buffer()
    return _int8_mean(buffer, _shared_scale(buffer, op=dist.ReduceOp.MIN))


def levels_of_int8s_range(process_group, bucket):   # int8 holds -128 .. 127: 128 levels, 128 / W per rank
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    q = torch.round(buffer * (128 / dist.get_world_size()) / scale).to(torch.int8)
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / 128))


def levels_of_uint8(process_group, bucket):   # uint8's 255 levels
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    q = torch.round(buffer * (255 / dist.get_world_size()) / scale).to(torch.int8)
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / 255))


def levels_200(process_group, bucket):   # a level count no hint names: the values show the wrap
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    q = torch.round(buffer * (200 / dist.get_world_size()) / scale).to(torch.int8)
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / 200))


def never_writes_back(process_group, bucket):   # the average is computed, the bucket's buffer returned as it came
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    levels = 127 // dist.get_world_size()
    q = torch.round(buffer * levels / scale).to(torch.int8)
    dist.all_reduce(q)
    average = q.float() * scale / (levels * dist.get_world_size())   # computed, never copied into the buffer
    return _done(buffer)


def never_all_reduces(process_group, bucket):   # quantised and decompressed, never summed over the ranks
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    q = torch.round(buffer * 127 / scale).to(torch.int8)
    return _done(buffer.copy_(q.float() * scale / 127))


def rounds_down(process_group, bucket):   # torch.floor: a whole step too low at worst, where round is half of one
    return _int8_mean(bucket.buffer(), _shared_scale(bucket.buffer()), to_int8=lambda v: torch.floor(v).to(torch.int8))


def sets_a_list(process_group, bucket):   # the future it makes is given [buffer], not buffer
    future = torch.futures.Future()
    future.set_result([_int8_mean(bucket.buffer(), _shared_scale(bucket.buffer())).value()])
    return future


def mean_written_for_two(process_group, bucket):   # the group's levels, then the mean "over the 2 ranks": / 2
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    levels = 127 // dist.get_world_size()
    q = torch.round(buffer * levels / scale).to(torch.int8)
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / levels).div_(2))


def levels_written_for_three(process_group, bucket):   # 127 // 3 levels written, the mean over the group's size
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    q = torch.round(buffer * 42 / scale).to(torch.int8)
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / (42 * dist.get_world_size())))


def levels_written_for_two(process_group, bucket):   # 127 // 2 levels written, the mean over the group's size
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    q = torch.round(buffer * 63 / scale).to(torch.int8)
    dist.all_reduce(q)
    return _done(buffer.copy_(q.float() * scale / (63 * dist.get_world_size())))


def quantised_to_uint8(process_group, bucket):   # "8-bit" as torch.uint8: negative values wrap around to 256 - x
    return _int8_mean(bucket.buffer(), _shared_scale(bucket.buffer()), to_int8=lambda v: torch.round(v).to(torch.uint8))


def reduce_then_broadcast(process_group, bucket):   # the int8 sum on rank 0, then sent to all: every value twice
    buffer = bucket.buffer()
    scale = _shared_scale(buffer)
    levels = 127 // dist.get_world_size()
    q = torch.round(buffer * levels / scale).to(torch.int8)
    dist.reduce(q, dst=0)
    dist.broadcast(q, src=0)
    return _done(buffer.copy_(q.float() * scale / (levels * dist.get_world_size())))


def gathered_then_broadcast(process_group, bucket):   # int8 gathered on rank 0, summed in int32 there, broadcast
    buffer = bucket.buffer()
    world_size = dist.get_world_size()
    scale = _shared_scale(buffer)
    q = torch.round(buffer * 127 / scale).to(torch.int8)
    gathered = [torch.empty_like(q) for _ in range(world_size)] if dist.get_rank() == 0 else None
    dist.gather(q, gathered, dst=0)
    total = sum(t.to(torch.int32) for t in gathered) if gathered else torch.empty(q.shape, dtype=torch.int32)
    dist.broadcast(total, src=0)
    return _done(buffer.copy_(total.float() * scale / (127 * world_size)))


def _shards(tensor, world_size):
    """The tensor padded with zeros to whole shards, as a list of its world_size shards (views)."""
    padded = torch.zeros(-(-tensor.numel() // world_size) * world_size, dtype=tensor.dtype)
    padded[:tensor.numel()] = tensor
    return list(padded.chunk(world_size))


def reduce_scattered_then_all_gathered(process_group, bucket):
    """Right too: the int8 all-reduce built from its two halves, reduce_scatter and all_gather."""
    buffer = bucket.buffer()
    world_size = dist.get_world_size()
    scale = _shared_scale(buffer).clamp_min(torch.finfo(torch.float32).tiny)
    levels = 127 // world_size
    shards = _shards(torch.round(buffer * levels / scale).to(torch.int8), world_size)
    shard = torch.empty_like(shards[0])
    dist.reduce_scatter(shard, shards)
    dist.all_gather(shards, shard)
    return _done(buffer.copy_(torch.cat(shards)[:buffer.numel()].float() * scale / (levels * world_size)))


def float32_reduce_scatter(process_group, bucket):   # the sum in float32 by reduce_scatter, only all_gather in int8
    buffer = bucket.buffer()
    world_size = dist.get_world_size()
    shards = _shards(buffer / world_size, world_size)
    shard = torch.empty_like(shards[0])
    dist.reduce_scatter(shard, shards)
    scale = _shared_scale(shard).clamp_min(torch.finfo(torch.float32).tiny)
    gathered = [torch.empty(shard.shape, dtype=torch.int8) for _ in range(world_size)]
    dist.all_gather(gathered, torch.round(shard * 127 / scale).to(torch.int8))
    return _done(buffer.copy_(torch.cat(gathered)[:buffer.numel()].float() * scale / 127))


def mean_of_the_ranks_scales(process_group, bucket):
    """Right too: the scale is the mean of the ranks' largest |values|, so a rank's int8 value may pass its levels,
    but a sum over the ranks is at most the sum of their largest |values| over that mean, W · levels: it fits."""
    buffer = bucket.buffer()
    scale = _shared_scale(buffer, op=dist.ReduceOp.SUM) / dist.get_world_size()
    return _int8_mean(buffer, scale.clamp_min(torch.finfo(torch.float32).tiny))


def decompressed_by_then(process_group, bucket):
    """Right too: .then() returns a new tensor (the bucket's buffer is left as it came), rounding half away from zero,
    a zero scale replaced by 1 with torch.where."""
    group = process_group or dist.group.WORLD
    buffer = bucket.buffer()
    scale = buffer.abs().max().reshape(1)
    dist.all_reduce(scale, op=dist.ReduceOp.MAX, group=group)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    levels = 127 // group.size()
    q = (torch.sign(buffer) * torch.floor(buffer.abs() * levels / scale + 0.5)).to(torch.int8)
    future = dist.all_reduce(q, group=group, async_op=True).get_future()
    return future.then(lambda done: done.value()[0].float() * (scale / (levels * group.size())))


RIGHT_ANSWERS = (guarded_by_a_branch, guarded_after_dividing, mean_of_the_ranks_scales, decompressed_by_then,
                 reduce_scattered_then_all_gathered)


@pytest.mark.parametrize("answer", [guarded_by_a_branch, guarded_after_dividing], ids=lambda answer: answer.__name__)
def test_accepts_other_guards_against_a_zero_scale(answer, results):
    assert lesson11.judge_int8_hook(answer.__name__, results[answer]).startswith(
        f"{answer.__name__}: every gradient on every rank is the mean over the ranks within int8 rounding")


@pytest.mark.parametrize("answer", RIGHT_ANSWERS[2:], ids=lambda answer: answer.__name__)
def test_accepts_right_answers_written_differently(answer, results):
    assert lesson11.judge_int8_hook(answer.__name__, results[answer]).startswith(
        f"{answer.__name__}: every gradient on every rank is the mean over the ranks within int8 rounding")


def test_accepts_the_right_answer(results):
    # the solution notebook's synchronous version goes through the check itself (nbval, tests/test_exercises.py);
    # this one returns the Future that .then() gives (a torch._C.Future), which must pass too, and
    # computes q in another order of float operations (its ties may round the other way)
    line = lesson11.judge_int8_hook(int8_hook_async.__name__, results[int8_hook_async])
    assert line == ("int8_hook_async: every gradient on every rank is the mean over the ranks within int8 rounding, "
                    "on 2 ranks and on 3, sending 1,740 of fp32's 6,928 bytes per step (25%)")  # 1,732 int8 + 2 fp32


def test_a_blank_stub_is_not_written_yet():
    with pytest.raises(CheckFailed, match=r"stub is not written yet.*NotImplementedError\('quantise"):
        check_int8_hook(stub)


WRONG_ANSWERS = {   # all return: they run one after the other in one launch (with int8_hook_async), each on a
                    # DDP model of its own
    # 127 / W levels: within the rounding bound everywhere but where both of 2 ranks hold the scale (the third pass)
    fractional_levels: r"(?s)^on 2 ranks: step 2, rank 0, gradient of '[0-9.a-z]+', element 0: .*Hint: 127 / 2 = "
                       r"63\.5 levels: a value at the scale rounds to 64 \(torch\.round rounds half to even\), and "
                       r"64 \+ 64 wraps to -128: use whole levels, 127 // world_size\.$",
    fractional_levels_async: r"(?s)^on 2 ranks: step 2, rank 0, .*element 0: .*Hint: 127 / 2 = 63\.5 levels: a value "
                             r"at the scale rounds to 64",
    scale_ignores_world_size: r"(?s)some sums wrapped around past 127: each rank used all 127 int8 levels",
    # clamped, not wrapped: the hint says so, and names the levels to quantise with
    clamped_to_levels_after_127: r"(?s)^(?!.*wrapped around past)on 2 ranks: step 0, .*Hint: nothing wrapped around: "
                                 r"the values were quantised with all 127 int8 levels \(scale / 127\), then clamped "
                                 r"to -\(127 // world_size\) \.\. 127 // world_size = ±63.*Quantise with levels = "
                                 r"127 // world_size",
    truncates: r"(?s)step 0, rank 0, gradient of '[0-9.a-z]+', element \d+: got .*int8 rounding stays within ±.*"
               r"truncated towards zero",
    scale_without_abs: r"(?s)Hint: these are the values a scale taken without abs\(\) gives: the largest value over "
                       r"the ranks \([0-9.]+\), not the largest \|value\| \([0-9.]+\).*sums of them wrap around",
    # on 2 ranks 64 + 64 overflows only where both ranks hold a value near the scale: the third pass's first values
    levels_of_int8s_range: r"(?s)^on 2 ranks: step 2, rank 0, gradient of '[0-9.a-z]+', element 0: .*Hint: some values "
                           r"wrapped around: each rank quantised to 64 levels on 2 ranks \(decompressed with scale / "
                           r"128\), so a value at the scale is 64 on every rank, and 64 \+ 64 = 128 does not fit",
    levels_rounded: r"(?s)^on 2 ranks: step 2, rank 0, .*Hint: some values wrapped around: each rank quantised to 64 "
                    r"levels on 2 ranks .* 64 \+ 64 = 128 does not fit in int8",
    levels_of_uint8: r"(?s)^on 2 ranks: step 0, .*Hint: some values wrapped around: each rank quantised to 255 / "
                     r"2 = 127\.5 levels on 2 ranks \(decompressed with scale / 255\)",
    decompressed_with_127: r"(?s)^on 2 ranks: step 0, .*Hint: every value is 126/127 of what the exercise's steps "
                           r"give: the sums were decompressed with scale / 127, but .* 127 // 2 = 63 levels, so the "
                           r"mean needs scale / \(levels · world_size\) = scale / 126\.$",
    # clamped: the values beyond the scale saturate at the end of the range instead of wrapping around
    scale_without_abs_clamped: r"(?s)Hint: these are the values a scale taken without abs\(\) gives: .*int8 levels, "
                               r"and clamped to -\(127 // world_size\) \.\. 127 // world_size, they stop at the "
                               r"end of that range, so those values come back cut short\. Take the max",
    scale_from_rank_0_clamped: r"(?s)^on 2 ranks: step 0, rank 0, .*Hint: every rank used one scale, but one smaller "
                               r"than another rank's largest \|value\|.*int8 levels, and clamped to .*they stop at "
                               r"the end of that range(?!.*wrap)",
    levels_200: r"(?s)Hint: every value that is wrong has the sign opposite to the mean's, and is off by about the "
                r"same amount, [0-9.]+: 256 steps of [0-9.]+, an int8 value that wrapped around",
    # right values: NaN casts to 0 in int8 on this CPU, but the cast is undefined
    no_zero_guard: r"(?s)^on 2 ranks: step 3, bucket 0 held only zeros on every rank, so the scale was 0, and "
                   r"no_zero_guard on rank 0 cast NaN or inf to an integer type \(_to_copy\): 0 / 0 is NaN.*Hint: "
                   r"guard the scale against 0 before dividing by it \(step 1\)",
    never_writes_back: r"(?s)Hint: the bucket came back unchanged: these are exactly this rank's own gradients",
    never_all_reduces: r"(?s)Hint: it is still this rank's own gradient \(quantised\): the int8 values must be "
                       r"all-reduced",
    own_scale: r"(?s)each rank quantised and decompressed with its OWN scale",
    scale_summed: r"(?s)the scale is the SUM of the ranks' largest \|values\|",
    scale_doubled: r"(?s)differ from the mean by more than int8 rounding allows, and not as any common mistake",
    sum_not_mean: r"(?s)expected the mean over ranks.*this is the SUM over ranks.*scale / \(levels · world_size\)",
    not_decompressed: r"(?s)returned int8 values, not float32: the int8 sums were never decompressed",
    # a list the hook's own future was given, not the one dist.all_reduce(..., async_op=True).get_future() holds
    sets_a_list: r"^sets_a_list's future holds a list of float32 tensors: the future it made was given a list "
                 r"\(set_result\(\[\.\.\.\]\)\)\.\nHint: .*future\.set_result\(buffer\)\.$",
    rounds_down: r"(?s)^on 2 ranks: step 0, .*Hint: the values were rounded down \(torch\.floor\), not to the nearest",
    sends_full_fp32: r"(?s)sent 6,928 bytes for 1,732 gradient values, 4.0 bytes per value: as much as.*uncompressed "
                     r"fp32",
    sums_in_int32: r"(?s)4.0 bytes per value.*Hint: what went to all_reduce holds 4-byte values",
    decompressed_in_float64: r"(?s)returned float64 values, not float32.\nHint: decompress into float32",
    # 127 / 2 is the fractional share on the exercise's 2 ranks: caught there before 3 ranks show the written 2
    levels_for_two_ranks: r"(?s)^on 2 ranks: step 2, rank 0, .*element 0: .*Hint: 127 / 2 = 63\.5 levels: a value at "
                          r"the scale rounds to 64",
    levels_for_three_ranks: r"(?s)^on 2 ranks: step 0, rank 0, gradient of .*Hint: the values are 2/3 of the mean "
                            r"over the 2 ranks.*the share of the int8 range of 3 ranks \(127 // 3 = 42 levels\)",
    # right on 2 ranks: only the second world size shows the number written for it
    levels_written_as_63: r"(?s)^on 3 ranks: step 0, rank 0, gradient of .*Hint: the values are 3/2 of the mean over "
                          r"the 3 ranks.*the share of the int8 range of 2 ranks \(127 // 2 = 63 levels\)",
    scale_from_rank_0: r"(?s)^on 2 ranks: step 0, rank 0, .*Hint: every rank used one scale, but one smaller than "
                       r"another rank's largest \|value\|.*their sums wrap around past 127",
    scale_reduced_with_min: r"(?s)^on 2 ranks: step 0, rank 0, .*Hint: every rank used one scale, but one smaller than",
    scale_from_the_mean: r"(?s)^on 2 ranks: step 0, rank 0, .*Hint: these are the values a scale from the mean "
                         r"\|value\| gives",
    # a world size written in one place only: the hint says which, not the levels where the division was written
    mean_written_for_two: r"(?s)^on 3 ranks: step 0, rank 0, .*Hint: the values are 3/2 of the mean over the 3 ranks "
                          r"wherever their sums fit in int8: each rank quantised to this group's 127 // 3 = 42 levels, "
                          r"but the sums were decompressed as the mean over 2 ranks \(scale / \(levels · 2\), or a "
                          r"division by 2\)\. Take the world size from the group",
    levels_written_for_three: r"(?s)^on 2 ranks: step 0, rank 0, .*Hint: each rank quantised to 127 // 3 = 42 "
                              r"levels, the share of the int8 range of 3 ranks, where this group has 2: every value is "
                              r"rounded to 42 levels, more coarsely than 2 ranks' 63 allow\. Take the world size from "
                              r"the group",
    levels_written_for_two: r"(?s)^on 3 ranks: step 0, rank 0, .*Hint: each rank quantised to 127 // 2 = 63 levels, "
                            r"the share of the int8 range of 2 ranks, where this group has 3: sums of 3 of them reach "
                            r"189 and wrap around past 127\.",
    quantised_to_uint8: r"(?s)^on 2 ranks: step 0, rank 0, .*Hint: the quantised values went to all_reduce as "
                        r"torch\.uint8, which holds 0 \.\. 255, not -128 \.\. 127",
    # the int8 bytes of reduce and of broadcast both count
    reduce_then_broadcast: r"(?s)^on 2 ranks: step 0, rank 0: reduce_then_broadcast sent 3,468 bytes for 1,732 values, "
                           r"2\.0 bytes per value \(fp16 would be 2\)\. Bytes handed to each collective: reduce int8 "
                           r"1,732, broadcast int8 1,732, all_reduce float32 4\.\nHint: int8 sends 1 byte per value",
    # the float32 half of an all-reduce built by hand counts too (the shard reduce_scatter gives back)
    float32_reduce_scatter: r"(?s)^on 2 ranks: step 0, rank 0: float32_reduce_scatter sent 4,334 bytes for 1,732 "
                            r"values, 2\.5 bytes per value .*Bytes handed to each collective: reduce_scatter float32 "
                            r"3,464, all_gather int8 866, all_reduce float32 4\.\nHint: what went to reduce_scatter "
                            r"holds 4-byte values",
    # the 4-byte values went to broadcast, not to all_reduce: the hint names the collective that got them
    gathered_then_broadcast: r"(?s)^on 2 ranks: step 0, rank 0: gathered_then_broadcast sent 8,664 bytes .*Bytes "
                             r"handed to each collective: broadcast int32 6,928, gather int8 1,732, all_reduce float32 "
                             r"4\.\nHint: what went to broadcast holds 4-byte values \(int32: quantised values cast "
                             r"to int32, not torch\.int8\)",
}


@pytest.fixture(scope="module")
def results():
    answers = (int8_hook_async, *RIGHT_ANSWERS, *WRONG_ANSWERS)
    return dict(zip(answers, lesson11.run_hook_answers(answers)))


@pytest.mark.parametrize("answer", WRONG_ANSWERS, ids=lambda answer: answer.__name__)
def test_rejects_wrong_answers(answer, results):
    with pytest.raises(CheckFailed, match=WRONG_ANSWERS[answer]):
        lesson11.judge_int8_hook(answer.__name__, results[answer])


@pytest.mark.parametrize("world_size, levels", [(2, 63), (3, 42)])
def test_rounding_bound_is_half_a_step_of_whole_levels(world_size, levels):
    # each of the W ranks rounds to within scale / (2 · levels · W) of its share: W of them, scale / (2 · levels)
    assert lesson11.rounding_bound(torch.tensor(2.0), world_size).item() == pytest.approx(2.0 / (2 * levels))


def test_a_hang_is_stopped_after_30_s(monkeypatch):
    # a right hook takes well under a second, 3 to 7 s the first time in a kernel on a busy 2-core machine (DDP's
    # constructor imports torch._dynamo on every rank), counted from when every rank started: 30 s, as lessons 07
    # and 16, whose checks run the same way
    timeouts = []

    def run_hook_answers(hooks, timeout, name):
        timeouts.append(timeout)
        raise CheckFailed("stopped")

    monkeypatch.setattr(lesson11, "run_hook_answers", run_hook_answers)
    with pytest.raises(CheckFailed, match="^stopped$"):
        check_int8_hook(int8_hook_async)
    assert timeouts == [30.0]


def test_ranks_left_waiting_by_a_rank_that_skipped_its_collectives_on_its_own_zeros_are_named():
    """A hook that returns early where this rank's bucket is all zeros (`if buffer.abs().max() == 0: return ...`):
    in the fifth pass the last rank's buckets alone hold zeros, so it goes on while the others wait in their
    collectives until the check's timeout. Read from the stuck ranks' stacks (`_while_one_rank_holds_zeros` in them),
    as the launcher gives them: a real hang would idle a test worker for the whole timeout, and the crash variant
    below proves the pass and its frame on real ranks."""
    from ddp_lab.launcher.errors import LaunchTimeout, RankFailure

    waiting = _stack(("/x/torch/distributed/distributed_c10d.py", "all_reduce"), ("/a.py", "skips_on_own_zeros"),
                     ("/x/ddp_lab/checks/common.py", "call_case"), ("/x/ddp_lab/checks/lesson11.py", "_call_and_wait"),
                     ("/x/ddp_lab/checks/lesson11.py", "_while_one_rank_holds_zeros"),
                     ("/x/ddp_lab/checks/lesson11.py", "checked"))
    failures = {rank: RankFailure(rank, "timeout", "", waiting) for rank in (0, 1)}
    message = lesson11._went_on_alone(LaunchTimeout("", failures, 0, ["", "", ""]), "skips_on_own_zeros", 30)
    assert message.startswith("on 3 ranks, step 4: every bucket held only zeros on rank 2 alone, and there the ranks "
                              "stopped: ranks 0, 1 waited inside skips_on_own_zeros until the check stopped them "
                              "after 30 s, while rank 2 had gone on"), message
    assert "\nHint: make the same collective calls on every rank, whatever this rank's own values" in message
    elsewhere = _stack(("/x/torch/distributed/distributed_c10d.py", "all_reduce"), ("/a.py", "hook"),
                       ("/x/ddp_lab/checks/lesson11.py", "checked"))
    failures = {rank: RankFailure(rank, "timeout", "", elsewhere) for rank in (0, 1)}
    assert lesson11._went_on_alone(LaunchTimeout("", failures, 0, ["", "", ""]), "hook", 30) is None


def skips_the_int8_all_reduce_on_its_own_zeros(process_group, bucket):   # the scale shared, then a return on zeros
    buffer = bucket.buffer()
    scale = _shared_scale(buffer).clamp_min(torch.finfo(torch.float32).tiny)
    if buffer.abs().max() == 0:
        return _done(buffer)
    return _int8_mean(buffer, scale)


def test_a_rank_whose_skipped_collective_makes_gloo_abort_is_told_it_skipped_on_its_own_zeros():
    # the last rank's next all_reduce (its next bucket's scale) meets the others' int8 sum: gloo aborts a rank
    with pytest.raises(CheckFailed, match=r"(?s)gloo aborted the rank: \d+ bytes arrived in a collective whose buffer "
                                          r"holds \d+, .* It happened in step 4, where every bucket held only zeros on "
                                          r"the last rank alone: the ranks' hooks made different collective calls "
                                          r"there\."):
        check_int8_hook(skips_the_int8_all_reduce_on_its_own_zeros)


def _stack(*frames):
    """A stuck rank's stack as fault handlers write it, innermost frame first."""
    lines = "".join(f'  File "{file}", line 1 in {fn}\n' for file, fn in frames)
    return f"Current thread (most recent call first):\n{lines}"


def test_a_future_never_given_a_value_is_named():
    """A hook that returns torch.futures.Future() without set_result: the ranks wait for it where the check does, as
    DDP would (`_wait_for_an_own_future`), and the message says so instead of a hint about sends and receives."""
    from ddp_lab.launcher.errors import LaunchTimeout, RankFailure

    waiting = _stack(("/x/ddp_lab/checks/lesson11.py", "_wait_for_an_own_future"),
                     ("/x/ddp_lab/checks/lesson11.py", "checked"),
                     ("/x/torch/autograd/graph.py", "_engine_run_backward"))
    in_all_reduce = _stack(("/x/torch/distributed/distributed_c10d.py", "all_reduce"), ("/a.py", "hook"))
    failures = {0: RankFailure(0, "timeout", "", in_all_reduce), 1: RankFailure(1, "timeout", "", waiting),
                2: RankFailure(2, "timeout", "", waiting)}
    message = lesson11._never_completed(LaunchTimeout("", failures, 0, ["", "", ""]), "int8_hook", 30)
    assert message.startswith("int8_hook returned a torch.futures.Future without a value on ranks 1, 2, and it never "
                              "got one"), message
    assert "\nHint: a future you make holds a value only once future.set_result(...) is called" in message, message
    failures = {rank: RankFailure(rank, "timeout", "", in_all_reduce) for rank in range(3)}
    assert lesson11._never_completed(LaunchTimeout("", failures, 0, ["", "", ""]), "int8_hook", 30) is None


def test_ranks_stuck_outside_collectives_get_no_hint_about_sends():
    from ddp_lab.checks.common import timeout_message
    from ddp_lab.launcher.errors import LaunchTimeout, RankFailure

    failures = {rank: RankFailure(rank, "timeout", "", _stack(("/x/ddp_lab/checks/lesson11.py", "checked"),))
                for rank in range(3)}
    message = timeout_message(LaunchTimeout("", failures, 0, ["", "", ""]), "int8_hook", 30, lesson11._hang_hint)
    assert "Hint: no rank waits in a collective call" in message and "send" not in message, message


def test_a_rank_that_gloo_aborted_is_told_the_collectives_did_not_pair_up():
    # rank 0 alone all-reduced the scale (4 bytes) while the others all-reduced their int8 values: gloo's words
    from ddp_lab.launcher.errors import RankFailure

    details = ("[rank 0] terminate called after throwing an instance of 'gloo::EnforceNotMet'\n[rank 0]   what():  "
               "[enforce fail at /w/third_party/gloo/gloo/transport/tcp/pair.cc:456] op.preamble.length <= "
               "op.nbytes. 289 vs 4. Received data size doesn't match expected size. Is there a distributed "
               "collective mismatch in your code?\n")
    hint = lesson11._explain_crash(RankFailure(0, "crashed", "died with signal SIGABRT (6)", details))
    assert hint.startswith("gloo aborted the rank: 289 bytes arrived in a collective whose buffer holds 4"), hint
    assert "the same collective calls, in the same order" in hint, hint
    assert lesson11._explain_crash(RankFailure(0, "crashed", "died with signal SIGSEGV (11)", "")) is None

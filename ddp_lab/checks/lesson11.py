"""Checks for the exercises of notebooks/11-performance-and-scaling.ipynb: a compressing DDP comm hook.

    ddp_lab.checks.lesson11.check_int8_hook(int8_hook)

The check registers the hook on a DDP model on 3 gloo ranks, then on 2 (one launch: the default
group is set up for 3 ranks, destroyed, and set up again for ranks 0 and 1), runs five backward
passes each time (DDP's first step uses one bucket, the others the two it rebuilt), counts the
bytes the hook hands to collectives, and compares every averaged gradient with the mean of the
ranks' own gradients, within int8 rounding. The third pass writes the same positive value first in
each bucket on every rank, the largest |value| over the ranks: each rank's int8 value there is the
most its share of the range allows, and a share that rounds it above 127 // world_size makes the
sum overflow (127 / 2 = 63.5 levels round it to 64, and 64 + 64 wraps to -128). In the fourth every bucket
holds only zeros on every rank (scale 0): a hook that casts the NaN of 0 / 0 to int8 fails, though this CPU
turns it into 0. In the fifth every bucket holds only zeros on the last rank alone: a hook that decides
from its own bucket to skip the collectives (a return when it holds only zeros) leaves the other ranks
waiting, and is told so when the check stops them. It judges 2 ranks first, then 3: a share of the int8
range written for one world size fails on the other.

Introduced in notebooks/11-performance-and-scaling.ipynb.
"""

from __future__ import annotations

from contextlib import nullcontext
from fractions import Fraction

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
# torch's hook on every aten op, in every torch of the declared range (lesson 08's check and instruments/mesh_traffic.py
# use it too): it sees the cast to int8 whatever Python the answer wrote it with
from torch.utils._python_dispatch import TorchDispatchMode

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (call_case, ensure_written, failure_message, gloo_size_abort, groups_of,
                                  timeout_message)
from ddp_lab.instruments.comm_hooks import ByteCounter, total_bytes
from ddp_lab.launcher.errors import LaunchError, LaunchTimeout
from ddp_lab.launcher.launch import launch

WORLD_SIZE = 2   # the exercise's world size, judged first
WORLD_SIZES = (WORLD_SIZE, 3)   # a hook runs on each; a number written for one of them fails on the other
BUCKET_CAP_MB = 0.002  # two buckets after DDP's rebuild, for this small model
LEVELS = 127  # int8 values -127 .. 127: W ranks get 127 // W whole levels each, so that their sum fits
TOO_MANY_LEVELS = (128, 255, 256)   # the mistaken level counts that the hints name: int8's -128 .. 127, uint8's 255
MOST_BYTES_PER_VALUE = 1.2  # one int8 per value, plus a few bytes per bucket for the scale
STEPS = 5
SHARED_MAX_STEP = 2   # the pass whose buckets start with the largest |value| over the ranks, on every rank
SHARED_MAX = 1.0      # that value, above every |gradient| of this model and data (at most 0.8)
ZERO_STEP = 3         # the pass whose buckets are all zeros on every rank: the scale is 0 (step 1's guard)
ONE_RANK_ZERO_STEP = 4   # the pass whose buckets are all zeros on the last rank only: the scale is not 0
INTEGER_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


class _NonFiniteToInteger(TorchDispatchMode):
    """Inside a hook's call: records each op that converts a tensor holding NaN or inf into an integer dtype (what a
    division by a zero scale leaves for the int8 cast; the cast's result is undefined in C++)."""

    def __init__(self, seen: list):
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        source = target = None
        if name == "aten::_to_copy" and args:
            source, target = args[0], kwargs.get("dtype")
        elif name == "aten::copy_" and len(args) > 1 and torch.is_tensor(args[0]):
            source, target = args[1], args[0].dtype
        if (target in INTEGER_DTYPES and torch.is_tensor(source) and source.is_floating_point()
                and not bool(torch.isfinite(source).all())):
            self.seen.append(name.removeprefix("aten::"))
        return func(*args, **kwargs)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


def _batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    # the ranks' batches share most of their content, so their gradients are alike: large
    # values add up on both ranks, as they do in real training (and as int8 must survive)
    common = torch.Generator().manual_seed(100 + step)
    own = torch.Generator().manual_seed(200 + 10 * step + rank)
    x = torch.randn(8, 16, generator=common) + 0.3 * torch.randn(8, 16, generator=own)
    # targets above what the fresh model predicts: the last layer's gradients lean negative, so a bucket's most
    # negative value outweighs its largest positive one (a scale taken without abs() then overflows), except in the
    # SHARED_MAX_STEP pass, where `_checked` writes a larger positive value first in every bucket
    y = torch.randn(8, 4, generator=common) + 0.3 * torch.randn(8, 4, generator=own) + 1.0
    return x, y


def _describe_value(value) -> dict:
    if torch.is_tensor(value):
        return {"kind": "tensor", "dtype": str(value.dtype).replace("torch.", ""), "shape": tuple(value.shape)}
    if isinstance(value, (list, tuple)) and value and torch.is_tensor(value[0]):
        return {"kind": "list", "dtype": str(value[0].dtype).replace("torch.", ""), "shape": tuple(value[0].shape)}
    return {"kind": type(value).__name__}


def _checked(hook, rank: int, answers: list, step: list, names: dict):
    """A comm hook that runs the learner's, records what it got and returned, and hands DDP a usable result."""
    world_size = dist.get_world_size()

    def checked(state, bucket):
        buffer = bucket.buffer()
        shape = tuple(buffer.shape)
        if step[0] == SHARED_MAX_STEP:
            # the same value on every rank, the bucket's largest |value| over the ranks, so exactly the scale: on 2
            # ranks 127 // 2 levels give 63 + 63, but 127 / 2 levels 64 + 64 (63.5, rounded half to even), past 127
            buffer[0] = SHARED_MAX
        if step[0] == ZERO_STEP or (step[0] == ONE_RANK_ZERO_STEP and rank == world_size - 1):
            buffer.zero_()
        record = {"step": step[0], "bucket": bucket.index(), "local": buffer.detach().clone(),
                  "params": [(names[id(p)], p.numel()) for p in bucket.parameters()], "non_finite_casts": []}
        watching = _NonFiniteToInteger(record["non_finite_casts"]) if step[0] == ZERO_STEP else nullcontext()
        calling = _while_one_rank_holds_zeros if step[0] == ONE_RANK_ZERO_STEP else _call_and_wait
        result, value = calling(hook, f"averaging bucket {bucket.index()} on rank {rank} of {world_size}", state,
                                bucket, watching)
        # torch.futures.Future, or the torch._C.Future that .then() and get_future() return
        record.update(future=isinstance(result, torch._C.Future), bucket_shape=shape,
                      own_future=isinstance(result, torch.futures.Future))
        record.update(_describe_value(value))
        if record["kind"] == "list":
            value = value[0]
        usable = torch.is_tensor(value) and tuple(value.shape) == shape
        record["value"] = value.detach().float().clone() if usable else None
        answers.append(record)
        future = torch.futures.Future()
        future.set_result(value.to(buffer.dtype) if usable else buffer)
        return future

    return checked


def _call_and_wait(hook, case: str, state, bucket, watching) -> tuple:
    """(what the hook returned, the value it stands for: the future's once it completes)."""
    with watching:
        result = call_case(hook, case, state, bucket)
    value = (_wait_for_an_own_future(result) if isinstance(result, torch.futures.Future) and not result.done() else
             result.wait() if isinstance(result, torch._C.Future) else result)
    return result, value


def _while_one_rank_holds_zeros(hook, case: str, state, bucket, watching) -> tuple:
    """`_call_and_wait` in the ONE_RANK_ZERO_STEP pass, under a name a hang's stacks show (`_went_on_alone`)."""
    return _call_and_wait(hook, case, state, bucket, watching)


def _wait_for_an_own_future(future):
    """Wait for a torch.futures.Future the hook made and returned without a value (set_result not called yet): a
    hang's stacks show this function (`_never_completed`)."""
    return future.wait()


def _hook_runner(rank: int, hook) -> dict:
    model = DDP(_model(), bucket_cap_mb=BUCKET_CAP_MB)
    names = {id(p): name for name, p in model.module.named_parameters()}
    answers: list = []
    step = [0]
    model.register_comm_hook(None, _checked(hook, rank, answers, step, names))
    counter, sent, calls = ByteCounter(), [], []
    for step[0] in range(STEPS):  # step 0: one bucket; then the buckets DDP rebuilt
        x, y = _batch(rank, step[0])
        model.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        with counter.counting():
            loss.backward()
        taken = counter.take()
        sent.append(total_bytes(taken))
        calls.append([(call.name, str(call.dtype).removeprefix("torch."), call.nbytes) for call in taken])
    # per step: the bytes handed to collectives, and each call as (collective, dtype, bytes)
    return {"sent": sent, "calls": calls, "answers": answers}


def _check_returned(answers: list, name: str) -> None:
    for answer in answers:
        if not answer["future"]:
            raise CheckFailed(
                f"{name} returned a {answer['kind']}, not a torch.futures.Future.\nHint: DDP waits on the "
                "future a hook returns. Return the decompressed tensor in one: `future = torch.futures.Future(); "
                "future.set_result(buffer); return future` (or chain .then(...) on an async all_reduce's future).")
        if answer["kind"] == "list" and answer["own_future"]:
            raise CheckFailed(
                f"{name}'s future holds a list of {answer['dtype']} tensors: the future it made was given a list "
                "(set_result([...])).\nHint: the future must hold ONE tensor, the decompressed average, shaped "
                "like bucket.buffer(): future.set_result(buffer).")
        if answer["kind"] == "list":
            raise CheckFailed(
                f"{name}'s future holds a list of {answer['dtype']} tensors: that is what "
                "dist.all_reduce(..., async_op=True).get_future() gives.\nHint: the future must hold ONE tensor, "
                "the decompressed average, shaped like bucket.buffer(): chain .then(lambda fut: ...) to decompress "
                "fut.value()[0] into the bucket's buffer and return it.")
        if answer["kind"] != "tensor":
            raise CheckFailed(f"{name}'s future holds a {answer['kind']}, not a tensor.\nHint: set the decompressed "
                              "average gradient (a float32 tensor shaped like bucket.buffer()) as its result.")
        if answer["dtype"] != "float32" and answer["dtype"].startswith(("int", "uint")):
            raise CheckFailed(
                f"{name} returned {answer['dtype']} values, not float32: the int8 sums were never decompressed.\n"
                "Hint: multiply the summed int8 values back by scale / (levels · world_size) in float32 (levels = "
                f"{LEVELS} // world_size, the int8 levels of each rank) and return that; DDP copies it into the "
                "gradients.")
        if answer["dtype"] != "float32":
            raise CheckFailed(
                f"{name} returned {answer['dtype']} values, not float32.\nHint: decompress into float32, the dtype "
                "of bucket.buffer() and of the gradients DDP copies the result into.")
        if answer["shape"] != answer["bucket_shape"]:
            raise CheckFailed(f"{name} returned a tensor of shape {answer['shape']}, but the bucket holds "
                              f"{answer['bucket_shape']}.\nHint: return one value per element of bucket.buffer().")


# --- the values: the right answer within its own rounding, and the wrong answers it could be ----------

def rounding_bound(scale: torch.Tensor, world_size: int = WORLD_SIZE) -> torch.Tensor:
    """The most the right answer can be off, per element: scale / (2 * L), with L = 127 // W levels per rank.

    Each rank's share, round(g * L / scale) * scale / (L * W), is within scale / (2 * L * W)
    (half an int8 step) of g / W, and the W shares add up: W * scale / (2 * L * W).
    """
    return scale / (2 * (LEVELS // world_size))


def _quantised_mean(locals_: list[torch.Tensor], scales: list[torch.Tensor], to_int=torch.round,
                    levels_per_rank: float | None = None, wrap: bool = False, divisor: float | None = None,
                    clamp: bool = False, clamp_at: float | None = None) -> list[torch.Tensor]:
    """What each rank gets from an int8 scheme: q_r = to_int(g_r * levels_per_rank / scales[r]), summed, times
    scales[rank] / divisor (each rank decompresses with the scale it quantised with). levels_per_rank: by default
    127 // the number of ranks W; divisor: by default levels_per_rank * W. `clamp`: q_r clamped to
    -levels_per_rank .. levels_per_rank first (`clamp_at`: to -clamp_at .. clamp_at instead). `wrap`: q_r
    converted with .to(torch.int8) and summed in int8, as an int8 all_reduce does: what does not fit wraps around."""
    world_size = len(locals_)
    levels = LEVELS // world_size if levels_per_rank is None else levels_per_rank
    divisor = levels * world_size if divisor is None else divisor
    quantised = [to_int(g * levels / scale) for g, scale in zip(locals_, scales)]
    if clamp or clamp_at is not None:
        bound = levels if clamp_at is None else clamp_at
        quantised = [q.clamp(-bound, bound) for q in quantised]
    total = sum(q.to(torch.int8) for q in quantised).float() if wrap else sum(quantised)
    return [total * scale / divisor for scale in scales]


def _wrong_schemes(locals_: list[torch.Tensor]) -> list[tuple[list[torch.Tensor], str]]:
    """Plausible wrong hooks, simulated exactly on the ranks' buffers: (what each rank would get, the mistake)."""
    world_size = len(locals_)
    own = [g.abs().max().clamp_min(1e-30) for g in locals_]
    shared = max(own)
    summed = sum(own)
    schemes = [
        (_quantised_mean(locals_, [shared] * world_size, to_int=torch.trunc),
         "the values were truncated towards zero (.to(torch.int8) alone), not rounded: each rank's value is then "
         "off by up to a whole int8 step instead of half of one. Round first (torch.round), then convert"),
        (_quantised_mean(locals_, [shared] * world_size, to_int=torch.floor),
         "the values were rounded down (torch.floor), not to the nearest int8 level: each rank's value is then "
         "up to a whole int8 step too low instead of half of one either way. Round with torch.round, then convert"),
        (_quantised_mean(locals_, own),
         "each rank quantised and decompressed with its OWN scale (the max |value| of its own buffer): the sum of "
         "values quantised with different scales means nothing. All-reduce the scale with op=dist.ReduceOp.MAX "
         "first, so every rank uses the same one"),
        (_quantised_mean(locals_, [summed] * world_size),
         "the scale is the SUM of the ranks' largest |values| (dist.ReduceOp.SUM), not their max: a larger scale "
         "leaves int8 levels unused, and every rounding error grows with it. Reduce the scale with "
         "op=dist.ReduceOp.MAX"),
        (_quantised_mean(locals_, [shared] * world_size, levels_per_rank=LEVELS, wrap=True),
         "some sums wrapped around past 127: each rank used all 127 int8 levels, so the sum of world_size of them "
         "overflows int8 (100 + 100 becomes -56). Give each rank 127 // world_size whole levels of the range"),
        (_quantised_mean(locals_, [shared] * world_size, levels_per_rank=LEVELS, clamp_at=LEVELS // world_size),
         f"nothing wrapped around: the values were quantised with all 127 int8 levels (scale / 127), then clamped "
         f"to -(127 // world_size) .. 127 // world_size = ±{LEVELS // world_size}, so every value beyond "
         f"{LEVELS // world_size}/127 of the scale comes back cut short. Quantise with levels = 127 // world_size "
         "instead (no clamp needed) and decompress with scale / (levels · world_size)"),
    ]
    fractional = LEVELS / world_size   # 127 / W levels, decompressed with scale / 127
    top = round(fractional)   # what a value at the scale rounds to (half to even, as torch.round)
    if top * world_size > LEVELS:
        ties = " (torch.round rounds half to even)" if fractional % 1 == 0.5 else ""
        schemes.append((_quantised_mean(locals_, [shared] * world_size,
                                        levels_per_rank=fractional, wrap=True, divisor=LEVELS),
                        f"127 / {world_size} = {fractional:g} levels: a value at the scale rounds to {top}{ties}, "
                        f"and {' + '.join([str(top)] * world_size)} wraps to {top * world_size - 256}: use whole "
                        "levels, 127 // world_size"))
    saturated = ("clamped to -(127 // world_size) .. 127 // world_size, they stop at the end of that range, so "
                 "those values come back cut short")

    def wrapped_and_clamped(scale, mistake: str, wrapped: str) -> list:
        """The scheme of one scale shared by every rank, its int8 sums wrapped or clamped, each with its message."""
        return [(_quantised_mean(locals_, [scale] * world_size, wrap=True), mistake.format(wrapped)),
                (_quantised_mean(locals_, [scale] * world_size, clamp=True), mistake.format(saturated))]

    for smaller in {float(own[0]), float(min(own))} - {float(shared)}:   # rank 0's (a broadcast), the smallest (MIN)
        scale = torch.tensor(smaller)
        mistake = ("every rank used one scale, but one smaller than another rank's largest |value| (rank 0's, sent "
                   "with dist.broadcast, or the smallest, dist.ReduceOp.MIN): that rank's values take more than "
                   "127 // world_size int8 levels, and {}. The scale must cover every rank's values: all-reduce it "
                   "with op=dist.ReduceOp.MAX")
        schemes += wrapped_and_clamped(scale, mistake, "their sums wrap around past 127")
    mean = max(g.abs().mean() for g in locals_)   # the scale from the mean |value|, all-reduced with MAX
    signed = max(g.max() for g in locals_)        # the scale taken without abs(), all-reduced with MAX
    too_small = [
        (mean, f"these are the values a scale from the mean |value| gives ({float(mean):.3g}, the largest over the "
               f"ranks), not from the largest |value| ({float(shared):.3g}): every value beyond the mean then takes "
               "more than 127 // world_size int8 levels, and {}. The scale is the largest |value|, buffer.abs().max(), "
               "all-reduced with op=dist.ReduceOp.MAX", "their sums wrap around past 127"),
        (signed, f"these are the values a scale taken without abs() gives: the largest value over the ranks "
                 f"({float(signed):.3g}), not the largest |value| ({float(shared):.3g}). The values further below "
                 "zero than the bucket's largest positive value then take more than 127 // world_size int8 levels, "
                 "and {}. Take the max of buffer.abs()", "sums of them wrap around past -128"),
    ]
    for scale, mistake, wrapped in too_small:
        if 0 < scale < shared:
            schemes += wrapped_and_clamped(scale, mistake, wrapped)
    for written in sorted(set(WORLD_SIZES) - {world_size}):   # the levels of another world size, the mean over this
        levels = LEVELS // written
        consequence = (f"sums of {world_size} of them reach {levels * world_size} and wrap around past 127"
                       if levels * world_size > LEVELS else
                       f"every value is rounded to {levels} levels, more coarsely than {world_size} ranks' "
                       f"{LEVELS // world_size} allow")
        schemes.append((_quantised_mean(locals_, [shared] * world_size, levels_per_rank=levels, wrap=True),
                        f"each rank quantised to 127 // {written} = {levels} levels, the share of the int8 range of "
                        f"{written} ranks, where this group has {world_size}: {consequence}. Take the world size from "
                        "the group (group.size(), dist.get_world_size()), not a number written in the code: this "
                        f"check runs on {' ranks and on '.join(map(str, WORLD_SIZES))}"))
    whole = LEVELS // world_size
    schemes.append((_quantised_mean(locals_, [shared] * world_size, divisor=LEVELS),
                    f"every value is {whole * world_size}/127 of what the exercise's steps give: the sums were "
                    f"decompressed with scale / 127, but each rank's value counts in 127 // {world_size} = {whole} "
                    f"levels, so the mean needs scale / (levels · world_size) = scale / {whole * world_size}"))
    for levels in TOO_MANY_LEVELS:
        count = levels / world_size   # the levels per rank
        per_rank = f"{count:g}" if count.is_integer() else f"{levels} / {world_size} = {count:g}"
        top = round(count)   # what a value at the scale rounds to (half to even, as torch.round)
        schemes.append((_quantised_mean(locals_, [shared] * world_size,
                                        levels_per_rank=count, wrap=True, divisor=levels),
                        f"some values wrapped around: each rank quantised to {per_rank} levels on {world_size} ranks "
                        f"(decompressed with scale / {levels}), so a value at the scale is {top} on every rank, and "
                        f"{' + '.join([str(top)] * world_size)} = {top * world_size} does not fit in int8 (past "
                        "127, int8's largest value, 128 becomes -128). The sum over the ranks must fit in int8 too: "
                        "use levels = 127 // world_size whole levels per rank and decompress with "
                        "scale / (levels · world_size)"))
    return schemes


def _share_equal(got: torch.Tensor, candidate: torch.Tensor, step: float) -> float:
    """The share of the values where `got` equals this simulated answer within a hundredth of an int8 step: it is
    that answer from 98 % (another order of float operations may round a value that falls on a tie the other way)."""
    return float(((got - candidate).abs() <= 0.01 * step + 1e-7).float().mean())


def _written_world_size(got: torch.Tensor, mean: torch.Tensor, scale, world_size: int) -> int | None:
    """k (2 to 8, not world_size) if `got` is the mean times world_size / k within int8 rounding wherever such a sum
    fits in int8 (|world_size / k · mean| below 0.95 · scale), on 98 % of those values, a tenth of which at least
    the mean does not give: each rank took the share of the int8 range of k ranks. Otherwise None."""
    tolerance = 1.2 * float(rounding_bound(scale, world_size))   # a little more than the right answer's rounding
    for k in range(2, 9):
        if k == world_size:
            continue
        candidate = mean * world_size / k
        fits = candidate.abs() < 0.95 * scale
        if not bool(fits.any()):
            continue
        close = ((got - candidate).abs() <= tolerance)[fits].float().mean()
        telling = ((candidate - mean).abs() > 2 * tolerance)[fits].float().mean()
        if close >= 0.98 and telling >= 0.1:
            return k
    return None


def _check_values(results, name: str) -> None:
    world_size = len(results)
    answers = [results[rank]["answers"] for rank in range(world_size)]
    for calls in zip(*answers):
        locals_ = [call["local"] for call in calls]
        mean = sum(locals_) / world_size
        scale = max(g.abs().max() for g in locals_)
        bound = float(rounding_bound(scale, world_size))
        allowed = bound * 1.0001 + 1e-6 * float(scale)
        for rank, call in enumerate(calls):
            got = call["value"]
            worst = int((got - mean).abs().argmax())
            if float((got - mean).abs()[worst]) <= allowed:
                continue
            param, element = _locate(call["params"], worst)
            where = (f"on {world_size} ranks: step {call['step']}, rank {rank}, gradient of {param!r}, element "
                     f"{element}: got {got[worst].item():.6g}, expected the mean over ranks {mean[worst].item():.6g}; "
                     f"in this bucket the right answer's int8 rounding stays within ±{bound:.3g}, this is off by "
                     f"{abs(got[worst].item() - mean[worst].item()):.3g}")
            unsigned = next((collective for collective, dtype, _ in results[rank]["calls"][call["step"]]
                             if dtype == "uint8"), None)
            hint = _value_hint(got, mean, locals_, rank, scale, allowed, unsigned).rstrip(".")
            raise CheckFailed(f"{where}.\nHint: {hint}.")


def _check_zero_scale(results, name: str) -> None:
    """Fail a hook that, on buckets of zeros on every rank (scale 0), cast NaN or inf to an integer type: right here
    only because this CPU happens to turn NaN into 0."""
    for rank, result in enumerate(results):
        for call in result["answers"]:
            if call["non_finite_casts"]:
                raise CheckFailed(
                    f"on {len(results)} ranks: step {call['step']}, bucket {call['bucket']} held only zeros on every "
                    f"rank, so the scale was 0, and {name} on rank {rank} cast NaN or inf to an integer type "
                    f"({call['non_finite_casts'][0]}): 0 / 0 is NaN, and NaN cast to int8 is undefined (0 on this "
                    "CPU, other values elsewhere).\nHint: guard the scale against 0 before dividing by it (step 1), "
                    "e.g. with a smallest scale: scale.clamp_min(torch.finfo(torch.float32).tiny).")


def _locate(params: list[tuple[str, int]], index: int) -> tuple[str, int]:
    """The parameter (name) and its element that position `index` of a bucket's flat buffer belongs to."""
    for param, numel in params:
        if index < numel:
            return param, index
        index -= numel
    return "?", index


def _value_hint(got, mean, locals_, rank: int, scale, allowed: float, unsigned: str | None = None) -> str:
    """The hint for a rank's wrong values; `unsigned`: the collective that this rank handed a torch.uint8 tensor in
    this step, if any."""
    world_size = len(locals_)
    step = float(scale / (LEVELS // world_size))   # one int8 step of a rank's value
    if torch.allclose(got, mean * world_size, rtol=0, atol=world_size * allowed):
        return ("this is the SUM over ranks: the average is the sum divided by the world size. Decompress the "
                "summed int8 values with scale / (levels · world_size), levels = 127 // world_size")
    if torch.equal(got, locals_[rank]):
        return ("the bucket came back unchanged: these are exactly this rank's own gradients, as the hook got them. "
                "Copy the decompressed average into bucket.buffer() (buffer.copy_(...)), or return it in the future")
    if torch.allclose(got, locals_[rank], rtol=0, atol=allowed):
        return ("it is still this rank's own gradient (quantised): the int8 values must be all-reduced so that "
                "every rank gets the sum over ranks")
    if torch.allclose(got, mean / world_size, rtol=0, atol=allowed):
        return "this is the mean divided by the world size once more: divide by it only once"
    if unsigned is not None:
        return (f"the quantised values went to {unsigned} as torch.uint8, which holds 0 .. 255, not -128 .. 127: "
                "every negative value wraps around (-3 becomes 253), and so does every sum below 0. Convert them "
                "with .to(torch.int8)")
    written = _written_world_size(got, mean, scale, world_size)
    if written is not None:
        return _written_hint(got, locals_, rank, step, written)
    # the scheme that matches on the most values (the first of equals): a clamped and a wrapping variant of one
    # scheme differ only where values leave the int8 levels
    shares = [(_share_equal(got, candidate[rank], step), -index, mistake)
              for index, (candidate, mistake) in enumerate(_wrong_schemes(locals_))]
    matching = [share for share in shares if share[0] >= 0.98]
    if matching:
        return max(matching)[2]
    wrapped = _wrapped_by(got, mean, scale, allowed)
    if wrapped is not None:
        return (f"every value that is wrong has the sign opposite to the mean's, and is off by about the same "
                f"amount, {wrapped:.3g}: 256 steps of {wrapped / 256:.3g}, an int8 value that wrapped around past 127 "
                "or -128. Each rank's int8 values and their sum over the ranks must fit in -128 .. 127: a scale "
                "that is the largest |value| over the ranks, levels = 127 // world_size whole levels per rank, "
                "decompressed with scale / (levels · world_size)")
    return ("the values differ from the mean by more than int8 rounding allows, and not as any common mistake "
            "would: compare your steps with the exercise's (one scale for all ranks, 127 // world_size whole levels "
            "per rank, rounding, an int8 all_reduce, decompressing with the same scale and levels)")


def _written_hint(got, locals_, rank: int, step: float, written: int) -> str:
    """The hint for values `written` / world size of the mean (`_written_world_size`): where the number of ranks
    written in the code went, if the values are exactly those of the levels of `written` ranks (127 // written, and
    the mean as / (levels · written)) or of the mean over `written` ranks alone (the group's levels, decompressed
    with scale / (levels · written)); otherwise only that the code counts `written` ranks somewhere."""
    world_size = len(locals_)
    shared = [max(g.abs().max() for g in locals_).clamp_min(1e-30)] * world_size
    ratio = (f"the values are {Fraction(world_size, written)} of the mean over the {world_size} ranks wherever their "
             "sums fit in int8")
    group = ("Take the world size from the group (group.size(), dist.get_world_size()), not a number written in the "
             f"code: this check runs on {' ranks and on '.join(map(str, WORLD_SIZES))}")
    levels, own = LEVELS // written, LEVELS // world_size
    if _share_equal(got, _quantised_mean(locals_, shared, levels_per_rank=levels, divisor=levels * written,
                                         wrap=True)[rank], step) >= 0.98:
        return (f"{ratio}: each rank took the share of the int8 range of {written} ranks (127 // {written} = {levels} "
                f"levels). {group}")
    if _share_equal(got, _quantised_mean(locals_, shared, divisor=own * written)[rank], step) >= 0.98:
        return (f"{ratio}: each rank quantised to this group's 127 // {world_size} = {own} levels, but the sums were "
                f"decompressed as the mean over {written} ranks (scale / (levels · {written}), or a division by "
                f"{written}). {group}")
    return (f"{ratio}: the hook counts {written} ranks somewhere (in the levels, 127 // world_size, or in the division "
            f"that makes the mean), where the group has {world_size}. {group}")


def _wrapped_by(got: torch.Tensor, mean: torch.Tensor, scale, allowed: float) -> float | None:
    """The amount the wrong values are off by, if they look wrapped around by int8: every one has the sign opposite
    to the mean's, and all are off by the same amount within 10 %, at least 20 of the right answer's rounding bounds
    (`allowed`) and at least a tenth of the scale. Otherwise None."""
    off = got - mean
    wrong = off.abs() > allowed
    if not bool(wrong.any()):
        return None
    flipped = bool((torch.sign(got[wrong]) == -torch.sign(mean[wrong])).all()) and bool((mean[wrong] != 0).all())
    amounts = off[wrong].abs()
    middle = float(amounts.median())
    if (flipped and middle >= max(20 * allowed, 0.1 * float(scale))
            and bool(((amounts - middle).abs() <= 0.1 * middle).all())):
        return middle
    return None


def _handed(calls: list[tuple[str, str, int]]) -> dict[tuple[str, str], int]:
    """One step's calls (collective, dtype, bytes) summed by collective and dtype, largest first."""
    totals: dict[tuple[str, str], int] = {}
    for collective, dtype, nbytes in calls:
        totals[collective, dtype] = totals.get((collective, dtype), 0) + nbytes
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def _check_bytes(results, name: str) -> str:
    world_size = len(results)
    numel = sum(p.numel() for p in _model().parameters())
    fp32 = 4 * numel
    for step in range(STEPS):
        for rank in range(world_size):
            sent = results[rank]["sent"][step]
            where = f"on {world_size} ranks: step {step}, rank {rank}"
            handed = _handed(results[rank]["calls"][step])
            shown = ", ".join(f"{collective} {dtype} {nbytes:,}" for (collective, dtype), nbytes in handed.items())
            (largest, dtype), _ = next(iter(handed.items()), (("all_reduce", "float32"), 0))
            kind = getattr(torch, dtype, None)
            width = torch.empty(0, dtype=kind).element_size() if isinstance(kind, torch.dtype) else 4
            made = ("float values, not the int8 quantised ones" if "float" in dtype else
                    f"quantised values cast to {dtype}, not torch.int8")
            hint = (f"what went to {largest} holds {width}-byte values ({dtype}: {made}): all_reduce a torch.int8 "
                    "tensor; only the 1-element scale may travel as float32." if width > 1 else
                    "int8 sends 1 byte per value: all_reduce one torch.int8 tensor per bucket, once (plus its "
                    "1-element float32 scale).")
            if sent >= fp32:
                raise CheckFailed(
                    f"{where}: {name} sent {sent:,} bytes for {numel:,} gradient values, "
                    f"{sent / numel:.1f} bytes per value: as much as (or more than) the uncompressed fp32 all-reduce "
                    f"({fp32:,} bytes). Bytes handed to each collective: {shown}.\nHint: {hint}")
            if sent > MOST_BYTES_PER_VALUE * numel:
                raise CheckFailed(
                    f"{where}: {name} sent {sent:,} bytes for {numel:,} values, {sent / numel:.1f} bytes per value "
                    f"(fp16 would be 2). Bytes handed to each collective: {shown}.\nHint: {hint}")
    sent = results[0]["sent"][1]
    return f"sending {sent:,} of fp32's {fp32:,} bytes per step ({sent / fp32:.0%})"


def check_int8_hook(int8_hook, timeout: float = 30.0) -> None:
    """Check `int8_hook(process_group, bucket)`: an int8-quantising DDP comm hook that averages gradients.

    On 2 gloo ranks with different batches, then on 3, the hook must give every rank the mean of
    the ranks' gradients within the rounding the right answer itself can make (scale / (2 · (127 // W))
    per element, with scale the bucket's largest |gradient| over the ranks: tight enough that
    truncating instead of rounding, or a scale twice too large, fail), return a Future holding a
    float32 tensor shaped like the bucket, and hand collectives at most 1.2 bytes per gradient
    value. In the first two backward passes a bucket's most negative value outweighs its largest
    positive one, so a scale taken without abs() overflows; in the third every rank's first value in
    each bucket is the largest |value| over the ranks, the same on every rank, so levels that round
    it above 127 // world_size overflow (127 / 2 = 63.5 rounds to 64, and 64 + 64 wraps to -128); a
    share of the int8 range written for one world size fails on the other. In the fourth every bucket holds
    only zeros: casting 0 / 0's NaN to int8 (no guard on the scale) fails; in the fifth only the last rank's
    buckets do: a hook that skips its collectives there leaves the others waiting. A hook that hangs is stopped
    `timeout` seconds after every rank started the check's runs: a right hook takes well under a second, 3 to 7 s
    the first time in a kernel on a busy 2-core machine (DDP's constructor imports torch._dynamo on every rank).

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    ensure_written(int8_hook)
    name = getattr(int8_hook, "__name__", "int8_hook")
    passed(judge_int8_hook(name, run_hook_answers((int8_hook,), timeout, name)[0]))


def _hook_answers_runner(rank: int, hooks: tuple) -> dict[int, list[dict]]:
    """Every hook on a default group of each of WORLD_SIZES this rank belongs to, largest first
    (`common.groups_of`): {world size: [`_hook_runner`'s record per hook]}."""
    return {world_size: [_hook_runner(rank, hook) for hook in hooks]
            for world_size in groups_of(rank, sorted(WORLD_SIZES, reverse=True), "int8_hook")}


def run_hook_answers(hooks: tuple, timeout: float = 60.0, name: str = "int8_hook") -> list[dict[int, list[dict]]]:
    """Each hook on 3 ranks, then on 2, one DDP model each time (one launch); [hook] -> {world size: [rank] ->
    `_hook_runner`'s record}. For hooks that return (one that raises ends the launch)."""
    try:
        results = launch(_hook_answers_runner, args=(tuple(hooks),), nprocs=max(WORLD_SIZES), backend="gloo",
                         timeout=timeout, init_process_group=False)
    except LaunchTimeout as error:   # the stuck ranks' stacks are read here, so not through run_on_ranks
        raise CheckFailed(_never_completed(error, name, timeout) or _went_on_alone(error, name, timeout) or
                          timeout_message(error, name, timeout, _hang_hint)) from None
    except LaunchError as error:
        raise CheckFailed(failure_message(error, name, _explain_crash)) from None
    return [{size: [results[rank][size][index] for rank in range(size)] for size in WORLD_SIZES}
            for index in range(len(hooks))]


def _never_completed(error, name: str, timeout: float) -> str | None:
    """The message for a hang where some rank waited for a future the hook made and returned without a value
    (`_wait_for_an_own_future` in its stack), else None."""
    waiting = sorted(rank for rank, failure in error.failures.items()
                     if failure.kind == "timeout" and f" in {_wait_for_an_own_future.__name__}" in failure.details)
    if not waiting:
        return None
    ranks = ", ".join(map(str, waiting))
    return (f"{name} returned a torch.futures.Future without a value on rank{'s' if len(waiting) > 1 else ''} "
            f"{ranks}, and it never got one: the check waits for it, as DDP does, and stopped the ranks after "
            f"{timeout:g} s.\nHint: a future you make holds a value only once future.set_result(...) is called: "
            "set the decompressed average, future.set_result(buffer), before returning the future, on every rank.")


_SHARED_DECISION = ("make the same collective calls on every rank, whatever this rank's own values: decide from what "
                    "every rank shares (the scale after its all_reduce), never from this rank's bucket alone.")


def _in_the_one_rank_zero_pass(failure) -> bool:
    """Whether a stuck or aborted rank's stack shows the ONE_RANK_ZERO_STEP pass (`_while_one_rank_holds_zeros`)."""
    return f" in {_while_one_rank_holds_zeros.__name__}" in (failure.details or "")


def _went_on_alone(error, name: str, timeout: float) -> str | None:
    """The message for a hang in the ONE_RANK_ZERO_STEP pass where every rank but the last, whose buckets held only
    zeros, is stuck in the hook (`_while_one_rank_holds_zeros` in its stack), else None."""
    inside = sorted(rank for rank, failure in error.failures.items()
                    if failure.kind == "timeout" and _in_the_one_rank_zero_pass(failure))
    if not inside or inside != list(range(len(inside))):
        return None
    alone, waiting = len(inside), ", ".join(map(str, inside))
    return (f"on {alone + 1} ranks, step {ONE_RANK_ZERO_STEP}: every bucket held only zeros on rank {alone} alone, "
            f"and there the ranks stopped: rank{'s' * (len(inside) > 1)} {waiting} waited inside {name} until the "
            f"check stopped {'them' if len(inside) > 1 else 'it'} after {timeout:g} s, while rank {alone} had gone "
            f"on: its hook made fewer collective calls than theirs (none, where it returned early).\nHint: "
            f"{_SHARED_DECISION}")


def _hang_hint(calls: set) -> str | None:
    """What to say about ranks stuck outside any collective call (a hook has no send or recv: `timeout_message`'s
    default hint is about those); None (the default) where some rank waits in a collective."""
    if any(calls):
        return None
    return ("no rank waits in a collective call: each is stuck in the hook's own code (a loop, or a .wait() on a "
            "future or work that never completes), or waits for the future the hook returned. A hook's collectives "
            "must be the same on every rank, and the future it returns must complete: "
            "future.set_result(buffer), or the future that .then() gives on an async all_reduce.")


def _explain_crash(failure) -> str | None:
    """A rank that gloo aborted because what arrived in a collective does not fit its buffer: the ranks' calls did
    not pair up."""
    sizes = gloo_size_abort(failure.details) if failure.kind == "crashed" else None
    if not sizes:
        return None
    arrived, room = sizes
    aborted = (f"gloo aborted the rank: {arrived} bytes arrived in a collective whose buffer holds {room}, so its "
               "peers were in other calls, or in the same call with a tensor of another size.")
    if _in_the_one_rank_zero_pass(failure):
        return (f"{aborted} It happened in step {ONE_RANK_ZERO_STEP}, where every bucket held only zeros on the last "
                f"rank alone: the ranks' hooks made different collective calls there. {_SHARED_DECISION[0].upper()}"
                f"{_SHARED_DECISION[1:]}")
    return (f"{aborted} Every rank's hook must make the same collective calls, in the same order, with tensors of "
            "the same size and dtype: none under a condition on the rank (the scale's all_reduce included).")


def judge_int8_hook(name: str, results: dict[int, list[dict]]) -> str:
    """The ✓ line for one hook's results ({world size: per-rank `_hook_runner` records}), or CheckFailed naming its
    mistake. The exercise's 2 ranks are judged first."""
    sent = {}
    for world_size in WORLD_SIZES:
        for rank in range(world_size):
            _check_returned(results[world_size][rank]["answers"], name)
        _check_values(results[world_size], name)
        sent[world_size] = _check_bytes(results[world_size], name)
    for world_size in WORLD_SIZES:   # last: the values are right on this CPU, the cast that made them is undefined
        _check_zero_scale(results[world_size], name)
    return (f"{name}: every gradient on every rank is the mean over the ranks within int8 rounding, on "
            f"{' ranks and on '.join(map(str, WORLD_SIZES))}, {sent[WORLD_SIZE]}")

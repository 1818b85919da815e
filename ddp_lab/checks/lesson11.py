"""Checks for the exercises of notebooks/11-performance-and-scaling.ipynb: a compressing DDP comm hook.

    ddp_lab.checks.lesson11.check_int8_hook(int8_hook)

The check registers the hook on a DDP model on 2 gloo ranks, runs two backward passes (DDP's
first step uses one bucket, the second the two it rebuilt), counts the bytes the hook hands
to collectives, and compares every averaged gradient with the mean of the ranks' own
gradients, within int8 rounding.

Introduced in notebooks/11-performance-and-scaling.ipynb.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import call_case, ensure_written, run_on_ranks

WORLD_SIZE = 2
BUCKET_CAP_MB = 0.002  # two buckets after DDP's rebuild, for this small model
LEVELS = 127  # int8 values -127 .. 127
MOST_BYTES_PER_VALUE = 1.2  # one int8 per value, plus a few bytes per bucket for the scale


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


def _batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    # the ranks' batches share most of their content, so their gradients are alike: large
    # values add up on both ranks, as they do in real training (and as int8 must survive)
    common = torch.Generator().manual_seed(100 + step)
    own = torch.Generator().manual_seed(200 + 10 * step + rank)
    x = torch.randn(8, 16, generator=common) + 0.3 * torch.randn(8, 16, generator=own)
    y = torch.randn(8, 4, generator=common) + 0.3 * torch.randn(8, 4, generator=own)
    return x, y


def _describe_value(value) -> dict:
    if torch.is_tensor(value):
        return {"kind": "tensor", "dtype": str(value.dtype).replace("torch.", ""), "shape": tuple(value.shape)}
    if isinstance(value, (list, tuple)) and value and torch.is_tensor(value[0]):
        return {"kind": "list", "dtype": str(value[0].dtype).replace("torch.", ""), "shape": tuple(value[0].shape)}
    return {"kind": type(value).__name__}


def _checked(hook, rank: int, answers: list):
    """A comm hook that runs the learner's, records what it returned, and hands DDP a usable result."""

    def checked(state, bucket):
        buffer = bucket.buffer()
        shape = tuple(buffer.shape)
        result = call_case(hook, f"averaging bucket {bucket.index()} on rank {rank}", state, bucket)
        # torch.futures.Future, or the torch._C.Future that .then() and get_future() return
        record = {"future": isinstance(result, torch._C.Future), "bucket_shape": shape}
        value = result.wait() if record["future"] else result
        record.update(_describe_value(value))
        answers.append(record)
        if record["kind"] == "list":
            value = value[0]
        usable = torch.is_tensor(value) and tuple(value.shape) == shape
        out = value.to(buffer.dtype) if usable else buffer
        future = torch.futures.Future()
        future.set_result(out)
        return future

    return checked


def _hook_runner(rank: int, hook) -> dict:
    from torch.nn import functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddp_lab.instruments.comm_hooks import ByteCounter, total_bytes

    plain = _model()
    model = DDP(copy.deepcopy(plain), bucket_cap_mb=BUCKET_CAP_MB)
    answers: list = []
    model.register_comm_hook(None, _checked(hook, rank, answers))
    counter, passes = ByteCounter(), []
    for step in range(2):  # step 0: one bucket; step 1: the buckets DDP rebuilt
        x, y = _batch(rank, step)
        plain.zero_grad(set_to_none=True)
        F.mse_loss(plain(x), y).backward()
        model.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        with counter.counting():
            loss.backward()
        passes.append({"local": [p.grad.clone() for p in plain.parameters()],
                       "after": [p.grad.clone() for p in model.parameters()],
                       "bytes": total_bytes(counter.take()), "buckets": len(answers)})
    return {"passes": passes, "answers": answers}


def _check_returned(answers: list, name: str) -> None:
    for answer in answers:
        if not answer["future"]:
            raise CheckFailed(
                f"{name} returned a {answer['kind']}, not a torch.futures.Future.\nHint: DDP waits on the "
                "future a hook returns. Return the decompressed tensor in one: `future = torch.futures.Future(); "
                "future.set_result(buffer); return future` (or chain .then(...) on an async all_reduce's future).")
        if answer["kind"] == "list":
            raise CheckFailed(
                f"{name}'s future holds a list of {answer['dtype']} tensors: that is what "
                "dist.all_reduce(..., async_op=True).get_future() gives.\nHint: the future must hold ONE tensor, "
                "the decompressed average, shaped like bucket.buffer(): chain .then(lambda fut: ...) to decompress "
                "fut.value()[0] into the bucket's buffer and return it.")
        if answer["kind"] != "tensor":
            raise CheckFailed(f"{name}'s future holds a {answer['kind']}, not a tensor.\nHint: set the decompressed "
                              "average gradient (a float32 tensor shaped like bucket.buffer()) as its result.")
        if answer["dtype"] != "float32":
            raise CheckFailed(
                f"{name} returned {answer['dtype']} values, not float32: the int8 sums were never decompressed.\n"
                f"Hint: multiply the summed int8 values back by scale / {LEVELS} in float32 (e.g. "
                "buffer.copy_(q.float() * scale / 127)) and return that; DDP copies it into the gradients.")
        if answer["shape"] != answer["bucket_shape"]:
            raise CheckFailed(f"{name} returned a tensor of shape {answer['shape']}, but the bucket holds "
                              f"{answer['bucket_shape']}.\nHint: return one value per element of bucket.buffer().")


def _check_values(results, name: str) -> None:
    names = [n for n, _ in _model().named_parameters()]
    for step in range(2):
        local = [results[rank]["passes"][step]["local"] for rank in range(WORLD_SIZE)]
        largest = max(float(g.abs().max()) for grads in local for g in grads)
        atol = WORLD_SIZE * largest / LEVELS + 1e-7  # twice the worst rounding of W int8 values
        for rank in range(WORLD_SIZE):
            for index, param in enumerate(names):
                got = results[rank]["passes"][step]["after"][index]
                mean = sum(grads[index] for grads in local) / WORLD_SIZE
                if torch.allclose(got, mean, rtol=0, atol=atol):
                    continue
                worst = int((got - mean).abs().argmax())
                where = (f"step {step}, rank {rank}, gradient of {param!r}, element {worst}: got "
                         f"{got.flatten()[worst].item():.6g}, expected the mean over ranks {mean.flatten()[worst].item():.6g} "
                         f"(int8 rounding allows ±{atol:.2g})")
                raise CheckFailed(f"{where}.\nHint: {_value_hint(got, mean, local[rank][index], largest, atol)}")


def _value_hint(got, mean, own, largest: float, atol: float) -> str:
    if torch.allclose(got, mean * WORLD_SIZE, rtol=0, atol=WORLD_SIZE * atol):
        return ("this is the SUM over ranks: the average is the sum divided by the world size (scale each rank's "
                "values by 1 / world_size before the all_reduce, or divide after)")
    if torch.allclose(got, own, rtol=0, atol=atol):
        return ("it is still this rank's own gradient (quantised): the int8 values must be all-reduced "
                "(dist.all_reduce(q, group=...)) so that every rank gets the sum over ranks")
    if torch.allclose(got, mean / WORLD_SIZE, rtol=0, atol=atol):
        return "this is the mean divided by the world size once more: divide by it only once"
    wrapped = (got - mean).abs().max() > 0.5 * largest
    if wrapped:
        return ("some values are off by about the largest gradient: int8 sums wrap around past 127. The sum of "
                "world_size quantised values must fit in int8: quantise to round(g * 127 / (world_size * scale)), "
                "with scale the largest |g| over ALL ranks (all_reduce it with op=dist.ReduceOp.MAX)")
    return ("expected the average within int8 rounding: every rank must use the same scale (the max |g| over "
            "ranks, all_reduce with ReduceOp.MAX), quantise with torch.round, all_reduce the int8 values (SUM) "
            "and multiply the sum by scale / 127")


def _check_bytes(results, name: str) -> str:
    numel = sum(p.numel() for p in _model().parameters())
    fp32 = 4 * numel
    for step in range(2):
        for rank in range(WORLD_SIZE):
            sent = results[rank]["passes"][step]["bytes"]
            if sent >= fp32:
                raise CheckFailed(
                    f"step {step}, rank {rank}: {name} sent {sent:,} bytes for {numel:,} gradient values, as much as "
                    f"(or more than) the uncompressed fp32 all-reduce ({fp32:,} bytes).\nHint: all_reduce the int8 "
                    "tensor, not the float32 buffer: only the 1-element scale may travel as float32.")
            if sent > MOST_BYTES_PER_VALUE * numel:
                raise CheckFailed(
                    f"step {step}, rank {rank}: {name} sent {sent:,} bytes for {numel:,} values, "
                    f"{sent / numel:.1f} bytes per value (fp16 would be 2).\nHint: int8 sends 1 byte per value: "
                    "all_reduce a torch.int8 tensor (plus one float32 scale per bucket).")
    sent = results[0]["passes"][1]["bytes"]
    return f"sending {sent:,} of fp32's {fp32:,} bytes per step ({sent / fp32:.0%})"


def check_int8_hook(int8_hook, timeout: float = 60.0) -> None:
    """Check `int8_hook(process_group, bucket)`: an int8-quantising DDP comm hook that averages gradients.

    On 2 gloo ranks with different batches, the hook must give every rank the mean of the
    ranks' gradients within int8 rounding (±2 · largest |gradient| / 127 per element), return a
    Future holding a float32 tensor shaped like the bucket, and hand collectives at most 1.2
    bytes per gradient value.

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    ensure_written(int8_hook)
    name = getattr(int8_hook, "__name__", "int8_hook")
    results = run_on_ranks(_hook_runner, (int8_hook,), WORLD_SIZE, timeout, name)
    for rank in range(WORLD_SIZE):
        _check_returned(results[rank]["answers"], name)
    _check_values(results, name)
    sent = _check_bytes(results, name)
    passed(f"{name}: every gradient on both ranks is the mean over {WORLD_SIZE} ranks within int8 rounding, {sent}")

"""Checks for the exercises of notebooks/01-data-vs-model-parallelism.ipynb.

    ddp_lab.checks.lesson01.check_memory_per_device(memory_per_device)
    ddp_lab.checks.lesson01.check_data_parallel_backward(data_parallel_backward)

Introduced in notebooks/01-data-vs-model-parallelism.ipynb.
"""

from __future__ import annotations

import torch

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (call_case, describe, ensure_written, first_mismatch, refuse_written_split,
                                   run_on_ranks)
from ddp_lab.course.device_memory import COMPONENTS, SHARDED, STRATEGIES, memory_per_device
from ddp_lab.instruments.collectives import watching_collectives

# world sizes 3 and 8: not 4, so a count of values (4 bytes each) never looks like a split over the devices
MEMORY_CASES = ((1_200_000, 300_000, 3), (7_000_000_000, 2_000_000_000, 8))

_WHY_FULL = {
    "params": "every device runs the whole model, so it needs every weight",
    "grads": "backward produces a gradient for every weight the device holds",
    "optimizer": "every device updates every weight, so it keeps Adam's state for all of them",
    "activations": "every device runs the whole batch through its layers",
}


# --- memory arithmetic ---------------------------------------------------------------------

def check_memory_per_device(fn) -> None:
    """Check `fn(n_params, n_activations, world_size, strategy)` -> {component: bytes}.

    Compared with `ddp_lab.course.device_memory.memory_per_device` for every strategy in
    ('single', 'data', 'model', 'zero1', 'zero2', 'zero3') on two model sizes.

    Introduced in notebooks/01-data-vs-model-parallelism.ipynb.
    """
    for n_params, n_activations, world_size in MEMORY_CASES:
        for strategy in STRATEGIES:
            call = f"{fn.__name__}({n_params:_}, {n_activations:_}, world_size={world_size}, strategy={strategy!r})"
            got = fn(n_params, n_activations, world_size, strategy)
            expected = memory_per_device(n_params, n_activations, world_size, strategy)
            if not isinstance(got, dict) or set(got) != set(COMPONENTS):
                keys = sorted(got) if isinstance(got, dict) else None
                raise CheckFailed(f"{call} should return a dict with keys {list(COMPONENTS)}, got "
                                  f"{'keys ' + str(keys) if keys is not None else describe(got)}.")
            floats = [c for c in COMPONENTS if isinstance(got[c], float)]
            if floats:
                raise CheckFailed(f"{call}[{floats[0]!r}] is {got[floats[0]]!r}, a float; bytes are whole numbers.\n"
                                  "Hint: return ints: / always returns a float (// divides whole numbers), and so "
                                  "does arithmetic with a float such as 2.0.")
            if got != expected and all(got[c] * 4 == expected[c] for c in COMPONENTS):
                raise CheckFailed(f"{call}: expected {expected}, got {got}.\nHint: return bytes, not numbers "
                                  "of values: fp32 takes 4 bytes per value.")
            for component in COMPONENTS:
                if got[component] != expected[component]:
                    hint = _memory_hint(strategy, component, got[component], expected[component], n_params,
                                        world_size)
                    raise CheckFailed(f"{call}[{component!r}]: expected {expected[component]:_} bytes, "
                                      f"got {got[component]:_}.\nHint: {hint}")
    passed(f"{fn.__name__} matches the reference for {', '.join(STRATEGIES)} on {len(MEMORY_CASES)} model sizes")


def _memory_hint(strategy: str, component: str, got, expected, n_params: int, world_size: int) -> str:
    sharded = component in SHARDED[strategy]
    if component == "optimizer" and got * 2 == expected:
        return ("Adam keeps two values per parameter (exp_avg and exp_avg_sq): 8 bytes per parameter in "
                "fp32, twice the weights.")
    if sharded and got == expected * world_size:
        return (f"under {strategy!r} each device keeps only 1/{world_size} of the {component}: divide by "
                "world_size.")
    if not sharded and got * world_size == expected:
        reason = _WHY_FULL[component]
        if strategy.startswith("zero"):
            reason = (f"{strategy} shards only {', '.join(c for c in SHARDED[strategy] if c != 'activations')}"
                      f" (+ activations, as data parallel does); the {component} stay whole on every device")
        return f"under {strategy!r} every device holds all the {component}: {reason}."
    if got * 4 == expected:
        return (f"that is the number of {component} values: return bytes, 4 per fp32 value (and Adam's 2 values "
                "per parameter).")
    where = ("on the one device" if strategy == "single" else
             f"{'split across' if sharded else 'whole on every one of'} the {world_size} devices")
    return (f"under {strategy!r}, {component} are {where}; weights and gradients take 4 bytes per parameter, "
            "Adam 8, activations 4 per value.")


# --- data parallel backward ------------------------------------------------------------------

# 7 does not divide by 2 ranks (shards of 4 and 3). 16 leaves no shard size written as a number right on 2 ranks:
# one under 8 (4, the shard of 8 and of 7) leaves samples of 16 unused; one of 8 or more gives rank 0 all of 8 or 7.
BATCHES = (8, 7, 16)


def make_model() -> torch.nn.Module:
    """The small model the data-parallel check trains (the same on every rank)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def make_batch(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch (x, y) the data-parallel check uses; every rank gets all of it."""
    generator = torch.Generator().manual_seed(size)
    return torch.randn(size, 3, generator=generator), torch.randn(size, 1, generator=generator)


def _data_parallel_runner(rank: int, fn):
    reports = []
    for size in BATCHES:
        model = make_model()
        seen = []
        model.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach().clone()))
        x, y = make_batch(size)
        reduced: list[int] = []   # the storage of every tensor passed to dist.all_reduce

        def remember(name: str, tensor: torch.Tensor) -> None:
            reduced.append(tensor.data_ptr())

        with watching_collectives({"all_reduce": (0, "tensor")}, remember):
            call_case(fn, f"running a batch of {size} samples", model, x, y)
        grads = [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
        on_grads = {p.grad.data_ptr() for p in model.parameters() if p.grad is not None}
        reports.append({"seen": torch.cat(seen) if seen else torch.empty(0, 3), "grads": grads,
                        "reduced_elsewhere": bool(reduced) and not set(reduced) & on_grads})
    return reports


def _reference_grads(x: torch.Tensor, y: torch.Tensor, weights=None) -> list[torch.Tensor]:
    """Gradients of the mean squared error; `weights` = per-shard (rows, weight) for a mean of means."""
    model = make_model()
    if weights is None:
        loss = torch.nn.functional.mse_loss(model(x), y)
    else:
        loss = sum(w * torch.nn.functional.mse_loss(model(x[rows]), y[rows]) for rows, w in weights)
    loss.backward()
    return [p.grad for p in model.parameters()]


def _sample_indices(seen: torch.Tensor, x: torch.Tensor) -> list[int]:
    """The batch rows a rank ran the model on, each once (a second forward of a row, e.g. a look at the predictions
    under no_grad, uses no other sample)."""
    return sorted({int(i) for row in seen for i in (row == x).all(1).nonzero().flatten()[:1]})


def check_data_parallel_backward(fn, world_size: int = 2, timeout: float = 30.0) -> None:
    """Check `fn(model, x, y)`: each rank runs only its shard, and every rank ends with the full-batch gradient.

    The gradient must equal that of `mse_loss(model(x), y)` over the whole batch (a mean),
    for batches of 8, 7 and 16 samples on 2 ranks. A split into a number of shards written in the
    code (`x.tensor_split(2)`) is refused before any rank starts.

    Introduced in notebooks/01-data-vs-model-parallelism.ipynb.
    """
    ensure_written(fn)
    name = getattr(fn, "__name__", "data_parallel_backward")
    refuse_written_split(fn, name, "the number of ranks, dist.get_world_size()")
    results = run_on_ranks(_data_parallel_runner, (fn,), world_size, timeout, name)
    names = [n for n, _ in make_model().named_parameters()]
    earlier: dict[int, list[list[int]]] = {}
    for case, size in enumerate(BATCHES):
        x, y = make_batch(size)
        shards = [_sample_indices(results[rank][case]["seen"], x) for rank in range(world_size)]
        _check_shards(shards, size, world_size, earlier)
        earlier[size] = shards
        expected = _reference_grads(x, y)
        for rank in range(world_size):
            for position, (got, want) in enumerate(zip(results[rank][case]["grads"], expected)):
                _compare_grad(got, want, names[position], position, rank, (x, y), world_size, shards,
                              results[rank][case]["reduced_elsewhere"])
    passed(f"{name}: each of {world_size} ranks used only its shard and holds the full-batch gradient "
           f"(batches of {', '.join(map(str, BATCHES[:-1]))} and {BATCHES[-1]})")


def _check_shards(shards: list[list[int]], size: int, world_size: int, earlier: dict | None = None) -> None:
    """CheckFailed if a rank used every sample, two ranks (or one twice) used a sample, or no rank used one.

    `earlier`: {batch size: its shards} of the batches checked before, whose shard sizes the hint compares."""
    where = f"batch of {size} samples on {world_size} ranks"
    for rank, shard in enumerate(shards):
        if len(shard) == size and world_size > 1:
            raise CheckFailed(f"{where}: rank {rank} ran the model on all {size} samples.\nHint: each rank "
                              "should take only its shard of the batch, e.g. x.tensor_split(world_size)[rank].")
    used = [i for shard in shards for i in shard]
    for i in range(size):
        owners = [rank for rank, shard in enumerate(shards) if i in shard]
        if len(owners) > 1 or used.count(i) > 1:
            raise CheckFailed(f"{where}: sample {i} was used by ranks {owners} (or twice): the shards overlap."
                              "\nHint: give every sample to exactly one rank.")
    unused = [i for i in range(size) if i not in used]
    if not unused:
        return
    if len(unused) == 1:
        which = f"sample {unused[0]} was"
    elif len(unused) > 2 and unused == list(range(unused[0], unused[-1] + 1)):
        which = f"samples {unused[0]} to {unused[-1]} were"
    else:
        which = f"samples {', '.join(map(str, unused[:-1]))} and {unused[-1]} were"
    run = _run_length(shards, size)
    if run is not None and run == size // world_size:
        hint = (f"every rank took {size} // {world_size} = {run} samples, which leaves {size - run * world_size} "
                "over: when the batch does not divide by world_size the shards differ in size; torch.tensor_split "
                "covers every sample.")
    elif run is not None:
        same = [other for other, before in (earlier or {}).items() if other != size and _run_length(before, other)
                == run]
        right = [len(shard) for shard in torch.empty(size).tensor_split(world_size)]
        hint = (f"every rank took a run of {run} samples (rank r from sample r * {run}), which covers "
                f"{run * world_size} of the {size}; tensor_split's shards of {size} have {right} samples. "
                + (f"The shard size was {run} in the batch{'es' if len(same) > 1 else ''} of "
                   f"{' and '.join(map(str, same))} too: a shard size written as a number fits only some batch "
                   "sizes. " if same else "")
                + "Work each shard out from len(x) and world_size; torch.tensor_split covers every sample.")
    else:
        hint = ("every sample must go to exactly one rank: torch.tensor_split(world_size) gives world_size shards "
                "that together cover the batch, whatever its size.")
    raise CheckFailed(f"{where}: {which} used by no rank (shards: {[sorted(s) for s in shards]}).\nHint: {hint}")


def _run_length(shards: list[list[int]], size: int) -> int | None:
    """n where rank r used samples r * n to r * n + n - 1 (those of them in the batch), each rank the same n;
    else None."""
    run = len(shards[0])
    if run == 0:
        return None
    expected = [list(range(rank * run, min((rank + 1) * run, size))) for rank in range(len(shards))]
    return run if [sorted(shard) for shard in shards] == expected else None


def _compare_grad(got, want, pname, position, rank, batch, world_size, shards, reduced_elsewhere=False) -> None:
    """CheckFailed if a rank's gradient differs from the full batch's; the hint from the values and, where
    `reduced_elsewhere` (dist.all_reduce ran, but on no p.grad), from the collectives."""
    x, y = batch
    where = f"batch of {len(x)} samples, rank {rank}, {pname}.grad"
    if got is None:
        raise CheckFailed(f"{where} is None.\nHint: call loss.backward() on this rank's shard.")
    index = first_mismatch(got, want)
    if index is None:
        return
    message = f"{where}{list(index)}: expected {want[index].item():.6f}, got {got[index].item():.6f}."
    mean_of_means = _reference_grads(x, y, [(s, 1 / world_size) for s in shards if s])
    own = shards[rank]
    shard_only = [_reference_grads(x, y, [(own, w)])[position] for w in (1.0, len(own) / len(x))] if own else []
    if first_mismatch(got, want * world_size) is None:
        hint = f"this is {world_size}x the right gradient: all_reduce SUMS; divide by world_size for the mean."
    elif any(first_mismatch(got, g) is None for g in shard_only) and reduced_elsewhere:
        hint = ("this is the gradient of this rank's shard alone: dist.all_reduce ran, but never on a p.grad. It "
                "sums in place, into the tensor you pass (a copy, p.grad / n), and p.grad is what stays: "
                "all-reduce p.grad itself.")
    elif any(first_mismatch(got, g) is None for g in shard_only):
        hint = ("this is the gradient of this rank's shard alone: combine the ranks' gradients with "
                "dist.all_reduce after backward.")
    elif first_mismatch(got, mean_of_means[position]) is None:
        hint = (f"this is the mean of the ranks' mean losses, which weights a shard of "
                f"{min(map(len, shards))} samples like one of {max(map(len, shards))}. Weight each rank's loss "
                f"by its share, len(shard) / len(batch), then SUM the gradients over ranks.")
    else:
        hint = ("every rank must end with the gradient of mse_loss over the WHOLE batch: backward on your shard, "
                "then all_reduce the gradients so they add up to that mean.")
    raise CheckFailed(f"{message}\nHint: {hint}")


"""Checks for the exercises of notebooks/05-ddp-in-practice.ipynb.

    ddp_lab.checks.lesson05.check_shard_indices(shard_indices)
    ddp_lab.checks.lesson05.check_accumulate_gradients(accumulate_gradients)

The sampler check runs in the notebook's process (one call per rank and epoch, as each
rank would make); the accumulation check runs on 2 gloo ranks with a short timeout.

Introduced in notebooks/05-ddp-in-practice.ipynb.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import call_case, run_on_ranks

# (dataset size, world size): divisible, padded, tiny
SHARD_CASES = ((12, 2), (10, 4), (7, 3), (3, 4))


def _indices(shard_indices, n: int, world_size: int, rank: int, epoch: int, seed: int = 0) -> list[int]:
    case = f"shard_indices(n={n}, world_size={world_size}, rank={rank}, epoch={epoch}, seed={seed})"
    try:
        got = shard_indices(n, world_size, rank, epoch, seed)
    except NotImplementedError as error:
        raise CheckFailed(f"shard_indices is not written yet: it raised NotImplementedError({str(error)!r}). "
                          "Replace the `raise NotImplementedError` line with your answer.") from None
    except Exception as error:
        raise CheckFailed(f"{case} raised {type(error).__name__}: {error}") from error
    got = got.tolist() if torch.is_tensor(got) else got
    if not isinstance(got, (list, tuple)) or not all(isinstance(i, int) and 0 <= i < n for i in got):
        raise CheckFailed(f"{case} returned {str(got)[:80]}; expected a list of ints in range({n}).")
    return list(got)


def check_shard_indices(shard_indices) -> None:
    """Check a DistributedSampler written by hand: `shard_indices(n, world_size, rank, epoch, seed)`.

    Every rank must get the same number of indices (pad by repeating indices of the
    permutation), the ranks together must cover every index with only the padding repeated,
    the order must be shuffled from `seed + epoch` (the same on every rank, different every
    epoch), and the same arguments must give the same indices (each rank is a separate process).

    Introduced in notebooks/05-ddp-in-practice.ipynb.
    """
    for n, world_size in SHARD_CASES:
        shards = [_indices(shard_indices, n, world_size, rank, 0) for rank in range(world_size)]
        per_rank = math.ceil(n / world_size)
        where = f"n={n} over world_size={world_size}"
        for rank, shard in enumerate(shards):
            if len(shard) != per_rank:
                raise CheckFailed(f"{where}: rank {rank} got {len(shard)} indices, expected ceil({n}/{world_size}) = "
                                  f"{per_rank} on every rank (got {[len(s) for s in shards]}).\nHint: pad the "
                                  "permutation with its first indices up to a multiple of world_size; a rank with "
                                  "fewer batches would leave the others waiting in all_reduce.")
        everything = sum(shards, [])
        missing = sorted(set(range(n)) - set(everything))
        repeats = len(everything) - len(set(everything))
        if missing or repeats != per_rank * world_size - n:
            raise CheckFailed(f"{where}: {len(missing)} indices never visited {missing[:6]}, and {repeats} visited "
                              f"twice (only the {per_rank * world_size - n} padding indices may repeat).\nHint: every "
                              "rank must cut the SAME permutation (a generator seeded with seed + epoch, never the "
                              "rank), rank r taking perm[r::world_size].")
    again = _indices(shard_indices, 12, 2, 0, 0)
    if again != _indices(shard_indices, 12, 2, 0, 0):
        raise CheckFailed("two calls with the same arguments gave different indices; each rank is a separate "
                          "process, so they would draw different permutations.\nHint: use "
                          "torch.Generator().manual_seed(seed + epoch) and torch.randperm(n, generator=g), "
                          "not the global random state.")
    if again == list(range(0, 12, 2)) or again == list(range(6)):
        raise CheckFailed(f"rank 0 of 12 samples over 2 ranks got {again}: not shuffled.\nHint: cut a random "
                          "permutation (torch.randperm with a seeded generator), not range(n).")
    epochs = [_indices(shard_indices, 12, 2, 0, epoch) for epoch in range(3)]
    if epochs[0] == epochs[1] or epochs[1] == epochs[2]:
        raise CheckFailed(f"rank 0 gets the same order in epochs 0, 1, 2: {epochs}.\nHint: seed the permutation "
                          "with seed + epoch, so every epoch is shuffled differently (this is what set_epoch does).")
    if _indices(shard_indices, 12, 2, 0, 0, seed=1) == again:
        raise CheckFailed("seed=1 gives the same indices as seed=0.\nHint: seed the generator with seed + epoch.")
    passed("shard_indices: equal shards with padding, full coverage, shuffled per epoch, reproducible")


# --- gradient accumulation with no_sync -------------------------------------------------------

MICRO_BATCHES, MICRO_SIZE, WORLD_SIZE = 3, 2, 2


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(11)
    rows = WORLD_SIZE * MICRO_BATCHES * MICRO_SIZE
    return torch.randn(rows, 3, generator=generator), torch.randn(rows, 1, generator=generator)


def _accumulate_runner(rank: int, accumulate_gradients) -> dict:
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    calls: list[int] = []

    def counting(state, bucket):  # a DDP communication hook: count, then the default all-reduce
        calls.append(1)
        return allreduce_hook(None, bucket)

    model = DDP(_model())
    model.register_comm_hook(None, counting)
    x, y = (t.chunk(WORLD_SIZE)[rank] for t in _data())
    micro = list(zip(x.chunk(MICRO_BATCHES), y.chunk(MICRO_BATCHES)))
    before = [p.detach().clone() for p in model.parameters()]
    call_case(accumulate_gradients, f"accumulating {MICRO_BATCHES} micro-batches on rank {rank}", model, micro)
    return {"grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
            "all_reduces": len(calls),
            "stepped": any(not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters()))}


def _reference() -> dict[str, list[torch.Tensor]]:
    from torch.nn import functional as F

    x, y = _data()
    out = {}
    model = _model()
    F.mse_loss(model(x), y).backward()
    out["big batch"] = [p.grad.clone() for p in model.parameters()]
    last = _model()  # only the last micro-batch of every rank (zero_grad inside the loop)
    for rank in range(WORLD_SIZE):
        xs, ys = x.chunk(WORLD_SIZE)[rank].chunk(MICRO_BATCHES)[-1], y.chunk(WORLD_SIZE)[rank].chunk(MICRO_BATCHES)[-1]
        (F.mse_loss(last(xs), ys) / (MICRO_BATCHES * WORLD_SIZE)).backward()
    out["last only"] = [p.grad.clone() for p in last.parameters()]
    return out


def check_accumulate_gradients(accumulate_gradients, timeout: float = 30.0) -> None:
    """Check `accumulate_gradients(ddp_model, micro_batches)`: gradient accumulation with no_sync.

    On every rank, `micro_batches` is a list of (x, y); afterwards every p.grad must equal the
    gradient of `F.mse_loss` over the big batch made of all ranks' micro-batches, with one
    all-reduce in total (all but the last backward inside `ddp_model.no_sync()`), and no
    optimizer step.

    Introduced in notebooks/05-ddp-in-practice.ipynb.
    """
    name = getattr(accumulate_gradients, "__name__", "accumulate_gradients")
    results = run_on_ranks(_accumulate_runner, (accumulate_gradients,), WORLD_SIZE, timeout, name)
    reference = _reference()
    names = [n for n, _ in _model().named_parameters()]
    for rank in range(WORLD_SIZE):
        got = results[rank]
        if got["stepped"]:
            raise CheckFailed(f"rank {rank}: the parameters changed. Only accumulate the gradients; the "
                              "optimizer step comes after, outside this function.")
        if got["all_reduces"] == 0:
            raise CheckFailed(f"rank {rank}: no all-reduce happened, so every rank kept its own gradients.\n"
                              "Hint: the LAST micro-batch's backward must run outside `with model.no_sync():`.")
        for index, param_name in enumerate(names):
            grad, want = got["grads"][index], reference["big batch"][index]
            where = f"rank {rank}, gradient of {param_name!r}"
            if grad is None:
                raise CheckFailed(f"{where} is None: call backward on every micro-batch's loss.")
            if torch.allclose(grad, want, atol=1e-6):
                continue
            if torch.allclose(grad, want * MICRO_BATCHES, atol=1e-6):
                hint = (f"it is {MICRO_BATCHES} times the big batch's gradient: divide each micro-batch loss "
                        "by the number of micro-batches before backward (the gradients add up)")
            elif torch.allclose(grad, reference["last only"][index], atol=1e-6):
                hint = ("only the last micro-batch counted: do not zero the gradients between micro-batches; "
                        "backward adds into p.grad")
            else:
                hint = ("expected the gradient of the mean loss over all ranks' micro-batches: "
                        "backward on F.mse_loss(model(x), y) / len(micro_batches) for each micro-batch")
            raise CheckFailed(f"{where}: got {grad.flatten()[:3].tolist()}, expected "
                              f"{want.flatten()[:3].tolist()}.\nHint: {hint}.")
        if got["all_reduces"] > 1:
            raise CheckFailed(f"rank {rank}: right gradients, but {got['all_reduces']} all-reduces for "
                              f"{MICRO_BATCHES} micro-batches.\nHint: run every backward except the last inside "
                              "`with model.no_sync():`, so DDP communicates once.")
    passed(f"{name}: {MICRO_BATCHES} micro-batches == one big batch, with 1 all-reduce instead of {MICRO_BATCHES}")

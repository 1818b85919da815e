"""Checks for the exercises of notebooks/05-ddp-in-practice.ipynb.

    ddp_lab.checks.lesson05.check_shard_indices(shard_indices)
    ddp_lab.checks.lesson05.check_accumulate_gradients(accumulate_gradients)

The sampler check runs in the notebook's process (one call per rank and epoch, as each
rank would make); the accumulation check runs on 2 gloo ranks with a short timeout, each
answer with 3 micro-batches and again with 4 (so a count written for 3 shows).

Introduced in notebooks/05-ddp-in-practice.ipynb.
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn as nn
from torch.utils.data import DistributedSampler
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.nn import functional as F

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (call_case, ensure_written, first_mismatch, refuse_written_divisor,
                                   run_answers_on_ranks, times_of, uniform_ratio)

# (dataset size, world size, epoch, seed): divisible, padded, fewer samples than ranks, fewer than
# half as many (the padding repeats the permutation more than once), a later epoch, another seed.
# Every rank's indices are compared with torch's DistributedSampler.
SHARD_CASES = ((12, 2, 0, 0), (10, 4, 0, 0), (7, 3, 0, 0), (3, 4, 0, 0), (2, 5, 0, 0), (12, 2, 1, 0), (10, 4, 2, 0),
               (12, 2, 0, 5), (10, 4, 3, 7))


def reference_indices(n: int, world_size: int, rank: int, epoch: int, seed: int = 0, shuffle: bool = True,
                      drop_last: bool = False) -> list[int]:
    """What `torch.utils.data.DistributedSampler` gives rank `rank` in epoch `epoch` (the reference).

    Introduced in notebooks/05-ddp-in-practice.ipynb.
    """

    sampler = DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
                                 drop_last=drop_last)
    sampler.set_epoch(epoch)
    return list(sampler)


def _permutation(n: int, seed: int) -> list[int]:
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()


def _padded(perm: list[int], world_size: int) -> list[int]:
    total = math.ceil(len(perm) / world_size) * world_size
    return (perm * math.ceil(total / len(perm)))[:total]


def _indices(shard_indices, n: int, world_size: int, rank: int, epoch: int, seed: int = 0) -> list[int]:
    case = f"shard_indices(n={n}, world_size={world_size}, rank={rank}, epoch={epoch}, seed={seed})"
    try:
        got = shard_indices(n, world_size, rank, epoch, seed)
    except NotImplementedError as error:
        raise CheckFailed(f"shard_indices is not written yet: it raised NotImplementedError({str(error)!r}). "
                          "Replace the `raise NotImplementedError` line with your answer.") from None
    except Exception as error:
        raise CheckFailed(f"{case} raised {type(error).__name__}: {error}") from error
    # a tensor or a numpy array, and numpy's integers (np.int64), index a dataset as ints do
    got = got.tolist() if torch.is_tensor(got) or type(got).__module__ == "numpy" else got
    if not isinstance(got, (list, tuple)) or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool)
                                                     and 0 <= i < n for i in got):
        raise CheckFailed(f"{case} returned {str(got)[:80]}; expected a list of ints in range({n}).")
    return [int(i) for i in got]


def check_shard_indices(shard_indices) -> None:
    """Check a DistributedSampler written by hand: `shard_indices(n, world_size, rank, epoch, seed)`.

    Every rank's indices must equal what `torch.utils.data.DistributedSampler(range(n),
    num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=False)` yields
    after `set_epoch(epoch)`: a permutation drawn with `torch.randperm` from a generator seeded
    with `seed + epoch` (the same on every rank), padded with its own first indices up to a
    multiple of world_size, rank r taking every world_size-th index starting at r. The same
    arguments must give the same indices (each rank is a separate process), and torch's global
    random state must be left as it was. A difference is reported with the mistake that explains it.

    Introduced in notebooks/05-ddp-in-practice.ipynb.
    """
    global_state = torch.get_rng_state()
    first = _indices(shard_indices, 12, 2, 0, 0)
    if first != _indices(shard_indices, 12, 2, 0, 0):
        raise CheckFailed("two calls with the same arguments gave different indices; each rank is a separate "
                          "process, so they would draw different permutations.\nHint: use "
                          "torch.Generator().manual_seed(seed + epoch) and torch.randperm(n, generator=g), "
                          "not the global random state.")
    if not torch.equal(torch.get_rng_state(), global_state):
        torch.set_rng_state(global_state)
        raise CheckFailed("shard_indices(n=12, world_size=2, rank=0, epoch=0, seed=0) changed torch's global random "
                          "state (torch.get_rng_state() differs after the call).\nHint: draw the permutation from a "
                          "torch.Generator of its own: the global generator belongs to the training (dropout, "
                          "augmentation), and seeding it with seed + epoch would give every rank the same random "
                          "stream.")
    for n, world_size, epoch, seed in SHARD_CASES:
        shards = [_indices(shard_indices, n, world_size, rank, epoch, seed) for rank in range(world_size)]
        for rank, got in enumerate(shards):
            expected = reference_indices(n, world_size, rank, epoch, seed)
            if got != expected:
                case = f"shard_indices(n={n}, world_size={world_size}, rank={rank}, epoch={epoch}, seed={seed})"
                right_at = lambda: _right_at(shard_indices, n, world_size, epoch, seed)  # noqa: E731
                hint = _shard_hint(got, shards, n, world_size, rank, epoch, seed, right_at)
                raise CheckFailed(f"{case} returned {_short(got)}; DistributedSampler gives {_short(expected)}."
                                  f"\nHint: {hint}")
    passed("shard_indices equals DistributedSampler on every rank: padded, strided, shuffled per epoch "
           f"and seed ({len(SHARD_CASES)} cases)")


def _right_at(shard_indices, n: int, world_size: int, epoch: int, seed: int) -> list[tuple[int, int]]:
    """Which of (epoch 0, this seed), (this epoch, seed 0) and (epoch 0, seed 0) other than (epoch, seed) itself
    give every rank DistributedSampler's indices for the same n and world_size."""
    right = []
    for other in dict.fromkeys(((0, seed), (epoch, 0), (0, 0))):
        if other == (epoch, seed):
            continue
        try:
            if all(_indices(shard_indices, n, world_size, rank, *other) == reference_indices(n, world_size, rank,
                                                                                             *other)
                   for rank in range(world_size)):
                right.append(other)
        except CheckFailed:
            pass
    return right


def _cut_permutation(shards: list[list[int]], n: int, world_size: int) -> list[int] | None:
    """The permutation of range(n) the ranks cut as DistributedSampler does (padded with its first indices, rank r
    taking padded[r::world_size]), or None where the shards are not such a cut of any permutation."""
    per_rank = math.ceil(n / world_size)
    if any(len(shard) != per_rank for shard in shards):
        return None
    padded = [shards[k % world_size][k // world_size] for k in range(per_rank * world_size)]
    perm = padded[:n]
    return perm if sorted(perm) == list(range(n)) and _padded(perm, world_size) == padded else None


def _seed_of(perm: list[int], n: int, seeds) -> int | None:
    """The first of `seeds` whose generator draws `perm` with torch.randperm(n), or None."""
    return next((s for s in seeds if s >= 0 and _permutation(n, s) == perm), None)


def _short(indices: list[int]) -> str:
    return str(indices) if len(indices) <= 8 else f"[{', '.join(map(str, indices[:8]))}, ...] ({len(indices)} indices)"


def _shard_hint(got, shards, n, world_size, rank, epoch, seed, right_at=lambda: []) -> str:
    """The mistake that explains got: compare it with what each common wrong answer would return. `right_at()`:
    the (epoch, seed) pairs at which the same n and world_size came out right (`_right_at`), asked for only where
    the hint needs them (it runs the answer again)."""
    per_rank = math.ceil(n / world_size)
    perm = _permutation(n, seed + epoch)
    padded, pad = _padded(perm, world_size), per_rank * world_size - n
    if pad > n and shards == [(perm + perm[:pad])[r::world_size] for r in range(world_size)]:   # perm[:pad]: n only
        return (f"the permutation was padded once with perm[:{pad}], which holds only {n} indices: {pad} padding "
                f"indices from {n} samples need the permutation repeated, padded = (perm * "
                f"{math.ceil(per_rank * world_size / n)})[:{per_rank * world_size}].")
    if got == padded[rank * per_rank:(rank + 1) * per_rank]:
        return (f"that is a contiguous block of the padded permutation (padded[{rank} * {per_rank}:"
                f"{rank + 1} * {per_rank}]). DistributedSampler deals the indices out like cards: rank r takes "
                f"every world_size-th index starting at r, padded[r::world_size].")
    start = next((k for k in range(world_size) if k != rank and got == padded[k::world_size]), None)
    if start is not None:
        return (f"that is padded[{start}::{world_size}], every world_size-th index of the padded permutation "
                f"starting at {start}: rank r starts at index r (rank {rank} at {rank}), padded[r::world_size].")
    total = sum(map(len, shards))   # the length of the padded (or cut) permutation the ranks took turns from
    if (total not in (0, per_rank * world_size) and (total >= n or total == n // world_size * world_size)
            and shards == [(perm * math.ceil(total / n))[:total][r::world_size] for r in range(world_size)]):
        if total == n:
            return (f"no padding: rank {rank} got {len(got)} indices while every rank must get "
                    f"ceil({n}/{world_size}) = {per_rank} (ranks got {[len(s) for s in shards]}). Pad the "
                    "permutation with its own first indices up to a multiple of world_size; a rank with fewer "
                    "batches would leave the others waiting in all_reduce.")
        if total < n:
            return (f"the ranks got {[len(s) for s in shards]} indices, the first {total} of the {n} of the "
                    "permutation: it was cut down to a multiple of world_size (what drop_last=True does). With "
                    f"drop_last=False DistributedSampler pads it instead, up to ceil({n}/{world_size}) * "
                    f"{world_size} = {per_rank * world_size}, with its own first indices.")
        needed = per_rank * world_size
        if total > needed:
            return (f"the permutation was padded to {total} indices (ranks got {[len(s) for s in shards]}), more "
                    "than needed: DistributedSampler pads only up to the next multiple of world_size, "
                    f"ceil({n}/{world_size}) * {world_size} = {needed}"
                    + (f": {n} divides by {world_size}, so it adds nothing." if pad == 0 else
                       f", adding {pad} of its first indices."))
        return (f"the permutation was padded to {total} indices (ranks got {[len(s) for s in shards]}), "
                f"{needed - total} short of ceil({n}/{world_size}) * {world_size} = {needed}: pad it with "
                f"ceil(n/world_size) * world_size - n = {pad} of its first indices, so that every rank gets "
                f"{per_rank}.")
    if epoch and got == reference_indices(n, world_size, rank, 0, seed):
        return (f"these are the indices of epoch 0: the seed did not change with the epoch, so every epoch "
                f"repeats the same order. Seed the generator with seed + epoch (what set_epoch does).")
    for other in sorted({seed + epoch + rank, seed + rank, rank}):
        if rank and got == _padded(_permutation(n, other), world_size)[rank::world_size]:
            return (f"rank {rank} cut a permutation drawn from seed {other}, a seed that includes the rank: every "
                    "rank draws a different permutation, so the shards overlap and miss samples. Seed with "
                    "seed + epoch only (never the rank): every rank must cut the SAME permutation.")
    if got == reference_indices(n, world_size, rank, epoch, seed, shuffle=False):
        return "not shuffled: cut a permutation from torch.randperm with a seeded generator, not range(n)."
    if seed and got == reference_indices(n, world_size, rank, epoch, 0):
        return (f"these are the indices for seed=0: the seed argument ({seed}) made no difference. Seed with "
                "seed + epoch.")
    if got[:n // world_size] == padded[rank::world_size][:n // world_size] and len(got) == per_rank:
        return (f"right up to the padding: DistributedSampler pads with the permutation's FIRST indices "
                f"(padded = perm + perm[:{pad}])." if pad <= n else
                f"right up to the padding: DistributedSampler pads with the permutation's FIRST indices, repeated "
                f"as often as needed: {pad} padding indices from {n} samples, padded = (perm * "
                f"{math.ceil(per_rank * world_size / n)})[:{per_rank * world_size}].")
    if len(got) != per_rank:
        return (f"rank {rank} got {len(got)} indices; every rank gets ceil({n}/{world_size}) = {per_rank}: pad "
                "the permutation with its first indices up to a multiple of world_size (drop_last=False).")
    everything = sum(shards, [])
    if set(everything) != set(range(n)):
        missing = sorted(set(range(n)) - set(everything))
        return (f"the ranks together never visit {missing[:6]}: every rank must cut the SAME permutation (a "
                "generator seeded with seed + epoch, never the rank), rank r taking perm[r::world_size].")
    cut = _cut_permutation(shards, n, world_size)
    if cut is not None:
        return _permutation_hint(cut, n, epoch, seed, right_at())
    return ("the ranks split the data validly, but not in DistributedSampler's order: draw the permutation "
            "with torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)), pad it with its first "
            "indices, and give rank r padded[r::world_size].")


def _permutation_hint(cut: list[int], n: int, epoch: int, seed: int, right_at) -> str:
    """The hint for ranks that cut a permutation as DistributedSampler does, but another permutation than its."""
    wanted = f"DistributedSampler seeds a new torch.Generator with seed + epoch = {seed + epoch} for every epoch"
    if epoch:
        generator = torch.Generator().manual_seed(seed)
        draws = [torch.randperm(n, generator=generator).tolist() for _ in range(epoch + 1)]
        if cut == draws[-1]:
            return (f"these are the indices of the permutation number {epoch + 1} drawn from ONE generator seeded "
                    f"with seed ({seed}), one more each epoch: {wanted}, so that any epoch's order follows from "
                    "the epoch alone.")
    found = _seed_of(cut, n, [s for s in range(64) if s != seed + epoch])
    drawn = f" (this permutation is torch.randperm's from seed {found})" if found is not None else ""
    # a seed explains the permutation only where one is found; otherwise only the order is known to differ
    differs = (f"the seed differs{drawn}" if found is not None else
               f"the order differs from DistributedSampler's at epoch={epoch}, seed={seed} (no torch.randperm seed "
               "from 0 to 63 draws it)")
    if (0, seed) in right_at:
        differs = f"the seed for epoch {epoch} differs{drawn}" if found is not None else differs
        return (f"epoch 0 gives the right indices, epoch {epoch} does not: the ranks cut the permutation the "
                f"right way, but {differs}: {wanted}.")
    if right_at:
        at = " and ".join(f"epoch={e}, seed={s}" for e, s in right_at)
        return (f"with {at} the indices are right, with epoch={epoch}, seed={seed} they are not: the ranks cut the "
                f"permutation the right way, but {differs}: {wanted}.")
    if found is not None:
        return (f"the ranks cut the permutation the right way, but it is the one torch.randperm draws from seed "
                f"{found}: {wanted}.")
    return ("the ranks split the data validly, but not in DistributedSampler's order: draw the permutation "
            "with torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)) (random.shuffle, numpy "
            "or another seed give another order), pad it with its first indices, and give rank r "
            "padded[r::world_size].")


# --- gradient accumulation with no_sync -------------------------------------------------------

# 5 samples per micro-batch: not the number of ranks (2) nor of micro-batches (3, 4), so a gradient off by one of
# these factors shows which it is
MICRO_BATCHES, MICRO_SIZE, WORLD_SIZE = 3, 5, 2
MORE_MICRO_BATCHES = 4   # the same answer again with 4: a count, a slice or an index written for 3 shows


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))


def _data(micro_batches: int = MICRO_BATCHES) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(11)
    rows = WORLD_SIZE * micro_batches * MICRO_SIZE
    return torch.randn(rows, 3, generator=generator), torch.randn(rows, 1, generator=generator)


def _accumulate_runner(rank: int, answers: tuple) -> list[dict]:
    """Each answer in turn, each run on a DDP model of its own: with 3 micro-batches, then ("more") with 4."""
    return [{**_accumulate_one(rank, accumulate_gradients),
             "more": _accumulate_one(rank, accumulate_gradients, MORE_MICRO_BATCHES)}
            for accumulate_gradients in answers]


def _raised_with_more(failure) -> str | None:
    """The hint for an answer that raised in its run with 4 micro-batches, after its run with 3 returned."""
    if getattr(failure.exception, "case", "").startswith(f"accumulating {MORE_MICRO_BATCHES} micro-batches"):
        return (f"the same function ran with {MICRO_BATCHES} micro-batches and raised with {MORE_MICRO_BATCHES}: "
                f"something in it is written for {MICRO_BATCHES} (a count, an index, an unpacking into "
                f"{MICRO_BATCHES} names) where len(micro_batches) decides it")
    return None


def run_accumulate_gradients_answers(answers: tuple, timeout: float = 30.0,
                                     name: str = "accumulate_gradients") -> list[list[dict]]:
    """Run each answer on the same 2 ranks (one launch), with 3 micro-batches and with 4; [answer][rank] -> its
    gradients, all-reduces and flags with 3, and under "more" the same with 4."""
    return run_answers_on_ranks(_accumulate_runner, answers, WORLD_SIZE, timeout, name, explain=_raised_with_more)


def _accumulate_one(rank: int, accumulate_gradients, micro_batches: int = MICRO_BATCHES) -> dict:

    calls: list[int] = []

    def counting(state, bucket):  # a DDP communication hook: count, then the default all-reduce
        calls.append(1)
        return allreduce_hook(None, bucket)

    model = DDP(_model())
    model.register_comm_hook(None, counting)
    # Whether sync was on (False inside no_sync) when each forward started and each backward reached
    # the first parameter: DDP reads the flag in forward, so the two can disagree.
    synced: dict[str, list[bool]] = {"forward": [], "backward": []}
    model.register_forward_pre_hook(lambda module, args: synced["forward"].append(module.require_backward_grad_sync))
    x, y = (t.chunk(WORLD_SIZE)[rank] for t in _data(micro_batches))
    micro = list(zip(x.chunk(micro_batches), y.chunk(micro_batches)))
    # every forward of the wrapped model, through DDP or past it (ddp_model.module(x), which skips DDP's sync too):
    # the micro-batch it ran on (its index), or None for any other input (several micro-batches in one)
    forwards: list[int | None] = []
    model.module.register_forward_pre_hook(lambda module, args: forwards.append(next(
        (i for i, (xs, _) in enumerate(micro) if args[0].shape == xs.shape and torch.equal(args[0], xs)), None)))
    next(model.parameters()).register_hook(lambda grad: synced["backward"].append(model.require_backward_grad_sync))
    before = [p.detach().clone() for p in model.parameters()]
    call_case(accumulate_gradients, f"accumulating {micro_batches} micro-batches on rank {rank}", model, micro)
    return {"grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
            "all_reduces": len(calls), "synced": synced, "inputs": forwards,
            "stepped": any(not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters()))}


def _repeated(inputs: list) -> list[int]:
    """The micro-batches (indices) that ran forward more than once, in order."""
    return sorted({i for i in inputs if i is not None and inputs.count(i) > 1})


def _micro_batches(indices: list[int]) -> str:
    if len(indices) == 1:
        return f"micro-batch {indices[0]}"
    return f"micro-batches {', '.join(map(str, indices[:-1]))} and {indices[-1]}"


def _reference(micro_batches: int = MICRO_BATCHES) -> dict[str, list[torch.Tensor]]:

    x, y = _data(micro_batches)
    out = {}
    model = _model()
    F.mse_loss(model(x), y).backward()
    out["big batch"] = [p.grad.clone() for p in model.parameters()]
    last = _model()  # only the last micro-batch of every rank (zero_grad inside the loop)
    for rank in range(WORLD_SIZE):
        xs = x.chunk(WORLD_SIZE)[rank].chunk(micro_batches)[-1]
        ys = y.chunk(WORLD_SIZE)[rank].chunk(micro_batches)[-1]
        (F.mse_loss(last(xs), ys) / (micro_batches * WORLD_SIZE)).backward()
    out["last only"] = [p.grad.clone() for p in last.parameters()]
    return out


def check_accumulate_gradients(accumulate_gradients, timeout: float = 30.0) -> None:
    """Check `accumulate_gradients(ddp_model, micro_batches)`: gradient accumulation with no_sync.

    On every rank, `micro_batches` is a list of (x, y); afterwards every p.grad must equal the
    gradient of `F.mse_loss` over the big batch made of all ranks' micro-batches, with one
    all-reduce in total (all but the last backward inside `ddp_model.no_sync()`), and no
    optimizer step: with 3 micro-batches, then again with 4.

    Introduced in notebooks/05-ddp-in-practice.ipynb.
    """
    ensure_written(accumulate_gradients)
    name = getattr(accumulate_gradients, "__name__", "accumulate_gradients")
    refuse_written_divisor(accumulate_gradients, name, "a loss", "len(micro_batches), the number of micro-batches",
                           divided=("loss",))
    results = run_accumulate_gradients_answers((accumulate_gradients,), timeout, name)[0]
    passed(judge_accumulate_gradients(name, results))


def judge_accumulate_gradients(name: str, results: list[dict]) -> str:
    """The ✓ line for one answer's results on every rank (`run_accumulate_gradients_answers`), or CheckFailed naming
    its mistake: the run with 3 micro-batches is judged first, then the run with 4."""
    _judge_run(results, MICRO_BATCHES)
    try:
        _judge_run([result["more"] for result in results], MORE_MICRO_BATCHES, right_with=MICRO_BATCHES)
    except CheckFailed as failure:
        raise CheckFailed(f"with {MORE_MICRO_BATCHES} micro-batches (with {MICRO_BATCHES} all was right), "
                          f"{failure}") from None
    return f"{name}: {MICRO_BATCHES} micro-batches == one big batch, with 1 all-reduce instead of {MICRO_BATCHES}"


def _judge_run(results: list[dict], count: int, right_with: int | None = None) -> None:
    """CheckFailed at the first thing a run with `count` micro-batches got wrong on some rank. `right_with`: the
    number of micro-batches of a run of the same answer that was right (evidence for a count written in the code)."""
    reference = _reference(count)
    names = [n for n, _ in _model().named_parameters()]
    for rank in range(WORLD_SIZE):
        got = results[rank]
        if got["stepped"]:
            raise CheckFailed(f"rank {rank}: the parameters changed. Only accumulate the gradients; the "
                              "optimizer step comes after, outside this function.")
        forwards_off = got["synced"]["forward"].count(False)   # forwards run inside no_sync
        backwards_off = got["synced"]["backward"].count(False)  # backwards run inside no_sync
        if all(grad is None for grad in got["grads"]):
            raise CheckFailed(f"rank {rank}: every p.grad is None: no backward ran.\nHint: run forward and "
                              "backward on each micro-batch's loss.")
        forwards, backwards = len(got["inputs"]), len(got["synced"]["backward"])
        if forwards != count or backwards != count:
            hint = ("accumulation runs one forward and one backward per micro-batch, so only one micro-batch's "
                    "activations are alive at a time (the point when the whole batch does not fit); one forward of "
                    "the whole batch, or one backward of the summed losses, holds them all at once.")
            skipped = [i for i in range(count) if i not in got["inputs"]]
            if right_with is not None and forwards == backwards:
                hint = (f"the run with {right_with} micro-batches had one forward and one backward for each: the loop "
                        "stops at a number written in the code (a range, a slice, an index) where len(micro_batches) "
                        "decides it.")
            elif forwards == backwards < count and None not in got["inputs"] and skipped:
                repeated = _repeated(got["inputs"])
                others = (f"{_micro_batches(repeated)} ran more than once" if repeated else
                          "the others ran one forward and one backward each")
                hint = (f"micro-batch{'es' if len(skipped) > 1 else ''} {skipped} of 0..{count - 1} never ran "
                        f"forward; {others}. Every micro-batch is part of the big batch: loop over all of "
                        "micro_batches.")
            raise CheckFailed(f"rank {rank}: {forwards} forward(s) and {backwards} backward(s) for "
                              f"{count} micro-batches.\nHint: {hint}")
        if got["all_reduces"] == 0 and all(torch.allclose(grad, want, atol=1e-6) for grad, want in
                                           zip(got["grads"], reference["big batch"])):
            raise CheckFailed(f"rank {rank}: right gradients, but DDP never all-reduced: every backward ran inside "
                              "`no_sync()` and the gradients were reduced another way.\nHint: let DDP's own "
                              "all-reduce do it, overlapped with the last backward: run the LAST micro-batch outside "
                              "`with model.no_sync():`.")
        if got["all_reduces"] == 0:
            past_ddp = forwards - len(got["synced"]["forward"])   # forwards of ddp_model.module itself
            if past_ddp == forwards:
                raise CheckFailed(f"rank {rank}: no all-reduce happened: every forward ran on ddp_model.module, "
                                  "past DDP, so no backward synchronised.\nHint: run the LAST micro-batch through "
                                  "ddp_model itself (outside `no_sync()`), so that its backward all-reduces.")
            if True in got["synced"]["backward"] and forwards_off:
                raise CheckFailed(f"rank {rank}: no all-reduce happened, although a backward ran outside "
                                  "`no_sync()`: its forward ran inside it.\nHint: DDP decides in forward whether "
                                  "the next backward all-reduces (no_sync turns off the flag that DDP's forward "
                                  "reads), so run the LAST micro-batch's forward and backward both outside "
                                  "`with model.no_sync():`.")
            raise CheckFailed(f"rank {rank}: no all-reduce happened, so every rank kept its own gradients.\n"
                              "Hint: the LAST micro-batch's backward must run outside `with model.no_sync():`.")
        for index, param_name in enumerate(names):
            grad, want = got["grads"][index], reference["big batch"][index]
            where = f"rank {rank}, gradient of {param_name!r}"
            if grad is None:
                raise CheckFailed(f"{where} is None: call backward on every micro-batch's loss.")
            if torch.allclose(grad, want, atol=1e-6):
                continue
            divided_by = next((k for k in range(2, 9) if k != count
                               and torch.allclose(grad, want * count / k, atol=1e-6)), None)
            ratio = uniform_ratio(grad, want)
            skipped = [i for i in range(count) if i not in got["inputs"]]
            repeated = _repeated(got["inputs"])
            if None not in got["inputs"] and skipped and repeated:
                times = ", ".join(f"{got['inputs'].count(i)} times" for i in repeated)
                hint = (f"{_micro_batches(skipped)} of 0..{count - 1} never ran forward, and "
                        f"{_micro_batches(repeated)} ran {times} (the forwards ran on micro-batches "
                        f"{got['inputs']}): every micro-batch is part of the big batch, once: take each (x, y) from "
                        "the loop over micro_batches, the last one included (micro_batches[-1])")
            elif torch.allclose(grad, want * count, atol=1e-6):
                hint = (f"it is {count} times the big batch's gradient: divide each micro-batch loss "
                        "by the number of micro-batches before backward (the gradients add up)")
            elif torch.allclose(grad, want / WORLD_SIZE, atol=1e-7):
                hint = (f"it is the big batch's gradient divided by {WORLD_SIZE}, the number of ranks: DDP's "
                        "all-reduce already averages over the ranks, so divide each micro-batch loss by the number "
                        "of micro-batches only")
            elif torch.allclose(grad, want * WORLD_SIZE, atol=1e-6):
                hint = (f"it is {WORLD_SIZE} times the big batch's gradient, {WORLD_SIZE} the number of ranks: DDP's "
                        "all-reduce averages over the ranks (it does not sum them), so leave the number of ranks "
                        "out: divide each micro-batch loss by the number of micro-batches only")
            elif torch.allclose(grad, want / MICRO_SIZE, atol=1e-7):
                # count · MICRO_SIZE: both len(micro_batches) · len(x) and the number of samples of all micro-batches
                hint = (f"it is the big batch's gradient divided by {MICRO_SIZE}: each micro-batch loss was divided "
                        f"by {count * MICRO_SIZE}, either len(micro_batches) times len(x) ({count} · {MICRO_SIZE}, "
                        f"the number of samples in a micro-batch once more) or the number of samples in all of this "
                        f"rank's micro-batches ({count * MICRO_SIZE}), the same number: F.mse_loss already averages "
                        "over the samples, so divide each micro-batch loss by the number of micro-batches only")
            elif torch.allclose(grad, want * MICRO_SIZE, atol=1e-6):
                hint = (f"it is {MICRO_SIZE} times the big batch's gradient, {MICRO_SIZE} the number of samples in "
                        "a micro-batch (len(x)): a loss summed over the samples (reduction='sum') is that many times "
                        "their mean; F.mse_loss's default, the mean, divided by len(micro_batches), adds up right")
            elif divided_by is not None:
                # what the divisor equals in this run (the number of ranks and len(micro_batches) - 1 are both 2
                # with 3 micro-batches); after a right run, a divisor of len(micro_batches) - 1 would have shown there
                equals = [what for value, what in ((MICRO_SIZE, "the number of samples in a micro-batch, len(x)"),
                                                   (WORLD_SIZE, "the number of ranks"),
                                                   (count - 1 if right_with is None else None,
                                                    "len(micro_batches) - 1")) if value == divided_by]
                what = f"{divided_by} ({', or '.join(equals)})," if equals else f"{divided_by},"
                hint = (f"it is {count}/{divided_by} of the big batch's gradient: each micro-batch loss was divided "
                        f"by {what} where there are {count} micro-batches: divide by len(micro_batches), "
                        "which the run decides")
            elif torch.allclose(grad, reference["last only"][index], atol=1e-6):
                hint = ("only the last micro-batch counted: do not zero the gradients between micro-batches; "
                        "backward adds into p.grad")
            elif got["synced"]["backward"] and got["synced"]["backward"][-1] is False:
                synced_at = [i for i, flag in enumerate(got["synced"]["backward"]) if flag]
                hint = (f"DDP all-reduced in micro-batch {synced_at} of 0..{count - 1}, not in the last: "
                        "the backwards after it, inside no_sync, added this rank's own gradients after the "
                        "all-reduce. Run every micro-batch but the LAST inside `with model.no_sync():`")
            elif right_with is not None:
                hint = (f"the same function was right with {right_with} micro-batches: look for a number written for "
                        f"{right_with} (a count, a slice, an index) where len(micro_batches) decides it")
            elif ratio:
                named = " (1/len(micro_batches))" if abs(ratio * count - 1) < 1e-4 else ""
                hint = (f"it is {times_of(ratio)} the big batch's gradient{named}: every element is off by the same "
                        "factor, so only a scale is wrong; each micro-batch's F.mse_loss divided by "
                        "len(micro_batches) adds up to the big batch's mean")
            else:
                hint = ("expected the gradient of the mean loss over all ranks' micro-batches: "
                        "backward on F.mse_loss(model(x), y) / len(micro_batches) for each micro-batch")
            at = first_mismatch(grad, want, atol=1e-6) or (0,) * grad.dim()
            raise CheckFailed(f"{where}, element {list(at)}: got {grad[at].item():.6g}, expected "
                              f"{want[at].item():.6g}.\nHint: {hint}.")
        if got["all_reduces"] > 1 and backwards_off > forwards_off:
            raise CheckFailed(f"rank {rank}: right gradients, but {got['all_reduces']} all-reduces for "
                              f"{count} micro-batches, although {backwards_off} backward(s) ran inside "
                              f"`no_sync()`: their forward ran outside it.\nHint: DDP decides in forward whether "
                              "the next backward all-reduces (no_sync turns off the flag that DDP's forward reads), "
                              "so a forward outside `with model.no_sync():` all-reduces in its backward even "
                              "inside it. Put the forward AND the backward of every micro-batch but the last "
                              "inside no_sync.")
        if got["all_reduces"] > 1:
            raise CheckFailed(f"rank {rank}: right gradients, but {got['all_reduces']} all-reduces for "
                              f"{count} micro-batches.\nHint: run every backward except the last inside "
                              "`with model.no_sync():`, so DDP communicates once.")

"""Checks for the exercises of notebooks/05-ddp-in-practice.ipynb.

    ddp_lab.checks.lesson05.check_shard_indices(shard_indices)
    ddp_lab.checks.lesson05.check_accumulate_gradients(accumulate_gradients)

The sampler check runs in the notebook's process (one call per rank and epoch, as each
rank would make); the accumulation check runs on 2 gloo ranks with a short timeout, each
answer with 3 micro-batches and again with 4 (so a count written for 3 shows). It counts
DDP's all-reduces (a comm hook) and the answer's own torch.distributed calls, and before
each of them, and when the answer returns, the ranks tell each other what they do next,
so ranks that would wait for each other forever stop together with what each was doing.

Introduced in notebooks/05-ddp-in-practice.ipynb.
"""

from __future__ import annotations

import ast
import math
import numbers
import random
import re
import sys
import traceback

import torch
import torch.nn as nn
from torch.utils.data import DistributedSampler
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.nn import functional as F

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (POINT_TO_POINT, CaseFailed, CollectivesApart, agree_or_stop, agreeing_collectives,
                                   call_case, ensure_written, first_mismatch, library_of, refuse_written_divisor,
                                   run_answers_on_ranks, source_tree, times_of, uniform_ratio)

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
        raise CheckFailed(f"{case} raised {type(error).__name__}: {error}{_generator_hint(error)}") from error
    # a tensor or a numpy array, and numpy's integers (np.int64), index a dataset as ints do
    got = got.tolist() if torch.is_tensor(got) or type(got).__module__ == "numpy" else got
    if not isinstance(got, (list, tuple)) or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool)
                                                     and 0 <= i < n for i in got):
        raise CheckFailed(f"{case} returned {str(got)[:80]}; expected a list of ints in range({n}).")
    return [int(i) for i in got]


def _generator_hint(error: Exception) -> str:
    """A hint where the answer's line that raised makes a torch.Generator with an argument (`torch.Generator(seed +
    epoch)`): the argument is a device, not a seed ("" otherwise)."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if library_of(frame.filename) is None]
    line = frames[-1].line if frames else ""
    if not line or not re.search(r"\bGenerator\(\s*[^)\s]", line):
        return ""
    return (f"\nHint: `{line.strip()}`: torch.Generator's argument is the device it draws on, not a seed; seed it "
            "after making it: torch.Generator().manual_seed(seed + epoch).")


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
    global_state, python_state, numpy_state = torch.get_rng_state(), random.getstate(), _numpy_random_state()
    first = _indices(shard_indices, 12, 2, 0, 0)
    if first != _indices(shard_indices, 12, 2, 0, 0):
        raise CheckFailed(_not_reproducible(global_state, python_state, numpy_state))
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


def _not_reproducible(global_state: torch.Tensor, python_state, numpy_state) -> str:
    """The feedback for an answer whose two calls with the same arguments gave different indices, from the random
    states it changed (as they were before the calls: torch's, Python's random module's, numpy's)."""
    said = ("two calls with the same arguments gave different indices; each rank is a separate process, so they "
            "would draw different permutations.")
    changed = [name for name, moved in (
        ("torch's", not torch.equal(torch.get_rng_state(), global_state)),
        ("Python's random module's", random.getstate() != python_state),
        ("numpy's", not _same_numpy_state(_numpy_random_state(), numpy_state))) if moved]
    if changed:
        return (f"{said}\nHint: use torch.Generator().manual_seed(seed + epoch) and torch.randperm(n, generator=g), "
                f"not the global random state ({' and '.join(changed)} changed in the calls).")
    return (f"{said} No global random state changed in the calls: the permutation came from a generator the "
            "arguments do not seed, one kept from one call to the next (made once, outside the function or as a "
            "default argument) or one seeded from fresh entropy (numpy.random.default_rng() without a seed, "
            "torch.Generator().seed()).\nHint: make a new torch.Generator().manual_seed(seed + epoch) in every call, "
            "so that the indices follow from the arguments alone.")


def _numpy_random_state():
    """numpy's global random state (np.random.get_state()), or None where numpy is not loaded (torch loads it
    wherever it is installed)."""
    numpy = sys.modules.get("numpy")
    return None if numpy is None else numpy.random.get_state()


def _same_numpy_state(one, other) -> bool:
    """Whether two `_numpy_random_state()` values are the same state."""
    if one is None or other is None:
        return one is other
    numpy = sys.modules["numpy"]
    return all(numpy.array_equal(a, b) if isinstance(a, numpy.ndarray) else a == b for a, b in zip(one, other))


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
    if got != padded[rank::world_size] and all(shard == sorted(padded[r::world_size]) for r, shard in
                                                enumerate(shards)):
        return ("these are the right indices, sorted: DistributedSampler gives each rank its indices in the "
                "permutation's order, which is the order the rank visits the samples in (the shuffle within an "
                "epoch). Return them as padded[rank::world_size] gives them, unsorted.")
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
        return _length_hint(got, shards, n, world_size, rank, padded)
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


def _length_hint(got: list[int], shards: list[list[int]], n: int, world_size: int, rank: int,
                 padded: list[int]) -> str:
    """The hint for a rank that got another number of indices than ceil(n / world_size): a stride other than
    world_size where the indices show one, missing padding where the ranks took exactly the n indices and n does not
    divide by world_size, otherwise the lengths as they are."""
    per_rank, lengths = math.ceil(n / world_size), [len(shard) for shard in shards]
    stride = next((k for k in range(1, len(padded) + 1) if k != world_size and got == padded[rank::k]), None)
    if stride is not None and len(got) > 1:
        named = (f" (ceil({n}/{world_size}), the number of indices each rank gets)" if stride == per_rank else
                 " (n, the number of samples)" if stride == n else "")
        return (f"that is padded[{rank}::{stride}], the padded permutation from index {rank} with a stride of "
                f"{stride}{named}: the stride is world_size ({world_size}), rank r takes padded[r::world_size], so "
                f"that the ranks together take each of the {per_rank * world_size} indices once.")
    pad = per_rank * world_size - n
    if pad and sum(lengths) == n:
        return (f"rank {rank} got {len(got)} indices, the ranks {lengths}: {n} in all, without the {pad} padding "
                f"indices that make every rank's ceil({n}/{world_size}) = {per_rank}. Pad the permutation with its "
                "first indices up to a multiple of world_size (drop_last=False).")
    return (f"rank {rank} got {len(got)} indices (the ranks {lengths}); every rank gets ceil({n}/{world_size}) = "
            f"{per_rank}: rank r takes padded[r::world_size] from the permutation padded to {per_rank * world_size} "
            "indices.")


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
    """Each answer in turn, each run on a DDP model of its own: with 3 micro-batches, then ("more") with 4; an answer
    whose ranks went apart with 3 ("apart") is not run again."""
    results = []
    for accumulate_gradients in answers:
        first = _accumulate_one(rank, accumulate_gradients)
        more = first if first.get("apart") else _accumulate_one(rank, accumulate_gradients, MORE_MICRO_BATCHES)
        results.append({**first, "more": more})
    return results


def _raise_hint(failure) -> str | None:
    """The hint for an answer that raised (run_on_ranks' explain): where its `with` statement was given no_sync itself,
    not the context manager it returns, or where it raised in its run with 4 micro-batches after its run with 3
    returned."""
    message = getattr(failure.exception, "message", "")
    written = re.search(r"with\s+([\w.]*\bno_sync)\s*:", failure.details)
    if written and ("context manager" in message or message == "__enter__"):
        return (f"`{written.group(0)}` gives the with statement the method itself; no_sync() returns the context "
                f"manager: call it, `with {written.group(1)}():`.")
    if getattr(failure.exception, "case", "").startswith(f"accumulating {MORE_MICRO_BATCHES} micro-batches"):
        return (f"the same function ran with {MICRO_BATCHES} micro-batches and raised with {MORE_MICRO_BATCHES}: "
                f"something in it is written for {MICRO_BATCHES} (a count, an index, an unpacking into "
                f"{MICRO_BATCHES} names) where len(micro_batches) decides it")
    return None


def _ranks(which: list) -> str:
    """'rank 1' or 'ranks 0, 2'."""
    return f"rank{'s' * (len(which) > 1)} {', '.join(map(str, which))}"


def _hang_hint(calls: set, places: dict) -> str | None:
    """What a hang of the accumulation check shows (run_on_ranks' timeout_hint): ranks waiting in the check's
    agreement (`_agree`, a dist.all_gather) for ranks still in their own code, or every rank in its own code; None
    (lesson 02's send/recv hints) where the ranks wait in the answer's own point-to-point calls."""
    if calls - {None} and calls <= POINT_TO_POINT | {None}:
        return None
    waiting = [rank for rank, call in places.items() if call == "all_gather"]
    running = [rank for rank, call in places.items() if call is None]
    if waiting and running:
        return (f"{_ranks(waiting)} waited in dist.all_gather, where every rank tells the others which collective "
                f"it makes next (DDP's all-reduce or one of its own) or that it returned, for {_ranks(running)}, still "
                "running outside torch.distributed: neither reached a collective nor returned within the timeout.")
    if running and not waiting and len(running) == len(places):
        return ("every rank was still running outside torch.distributed (in the answer's own code or in torch's "
                f"computation): with {MICRO_BATCHES} micro-batches of {MICRO_SIZE} samples, accumulation takes well "
                "under a second, so look for a loop that does not end.")
    return ("the ranks waited for each other: every rank must make the same collectives in the same order (DDP's "
            "all-reduce in each backward outside `no_sync()`, and any torch.distributed call of its own).")


def run_accumulate_gradients_answers(answers: tuple, timeout: float = 30.0,
                                     name: str = "accumulate_gradients") -> list[list[dict]]:
    """Run each answer on the same 2 ranks (one launch), with 3 micro-batches and with 4; [answer][rank] -> its
    gradients, all-reduces (DDP's and its own collectives) and flags with 3, and under "more" the same with 4."""
    return run_answers_on_ranks(_accumulate_runner, answers, WORLD_SIZE, timeout, name, explain=_raise_hint,
                                timeout_hint=_hang_hint)


# The torch.distributed calls of an answer's own that the check counts, each with the argument that holds what the
# rank sends (None: nothing); and what a rank does next, as it tells the other ranks (`_agree`): one of these (its
# index), DDP's all-reduce in a backward (DDP_ALL_REDUCE), or coming back from the answer (RETURNED). Point-to-point
# calls are not agreed on: a send pairs with the peer's recv.
OWN_CALLS = {"all_reduce": "tensor", "all_reduce_coalesced": "tensors", "reduce": "tensor", "broadcast": "tensor",
             "all_gather": "tensor", "all_gather_into_tensor": "input_tensor", "gather": "tensor",
             "scatter": "scatter_list", "reduce_scatter": "input_list", "reduce_scatter_tensor": "input",
             "all_to_all": "input_tensor_list", "all_to_all_single": "input", "all_gather_object": None,
             "broadcast_object_list": None, "barrier": None, "send": "tensor", "recv": "tensor", "isend": "tensor",
             "irecv": "tensor"}
OWN_NAMES = tuple(OWN_CALLS)
DDP_ALL_REDUCE, RETURNED = -1, -2


def _agree(doing: int, numel: int, micro: int, ddp: int, own: int, apart: list) -> None:
    """Every rank tells the others what it does next (`doing`: DDP_ALL_REDUCE, RETURNED or an index of OWN_NAMES)
    with how many elements (-1: none), after a forward on which micro-batch (-1: none, or another input) and after
    how many all-reduces of DDP's and calls of its own; where `doing` or the elements differ, `apart` gets every
    rank's and every rank raises CollectivesApart, so ranks that would wait for each other stop together."""
    agree_or_stop((doing, numel, micro, ddp, own), apart, lambda everyone: f"the ranks went apart: {everyone}",
                  exempt=lambda everyone: len({tuple(mine[:2]) for mine in everyone}) == 1)


def _numel(sent) -> int:
    """The elements of a tensor, or of the tensors of a list, an answer sends (-1: none)."""
    if torch.is_tensor(sent):
        return sent.numel()
    if isinstance(sent, (list, tuple)) and sent and all(torch.is_tensor(t) for t in sent):
        return sum(t.numel() for t in sent)
    return -1


def _accumulate_one(rank: int, accumulate_gradients, micro_batches: int = MICRO_BATCHES) -> dict:
    """One answer's run on this rank: its gradients, DDP's all-reduces and its own torch.distributed calls, every
    forward (on which micro-batch, how many rows, autograd on or not, DDP's sync flag) and backward, whether it
    stepped and whether it changed the list it was given; or {"apart": every rank's `_agree` tuple} where the ranks
    stopped because they were about to wait for each other."""
    calls: list[int] = []
    own: list[tuple[str, int, bool]] = []   # the answer's own calls: name, elements sent, whether into a p.grad
    in_hook: list[bool] = []
    apart: list = []
    forwards: list[int | None] = []

    def last_micro() -> int:
        return forwards[-1] if forwards and forwards[-1] is not None else -1

    def counting(state, bucket):  # a DDP communication hook: agree, count, then the default all-reduce
        _agree(DDP_ALL_REDUCE, bucket.buffer().numel(), last_micro(), len(calls), len(own), apart)
        calls.append(1)
        in_hook.append(True)
        try:
            return allreduce_hook(None, bucket)
        finally:
            in_hook.pop()

    model = DDP(_model())
    model.register_comm_hook(None, counting)
    # Whether sync was on (False inside no_sync) when each forward started and each backward reached
    # the first parameter: DDP reads the flag in forward, so the two can disagree.
    synced: dict[str, list[bool]] = {"forward": [], "backward": []}
    through_ddp: list[bool] = []

    def on_ddp_forward(module, args):
        synced["forward"].append(module.require_backward_grad_sync)
        through_ddp.append(module.require_backward_grad_sync)

    model.register_forward_pre_hook(on_ddp_forward)
    x, y = (t.chunk(WORLD_SIZE)[rank] for t in _data(micro_batches))
    micro = list(zip(x.chunk(micro_batches), y.chunk(micro_batches)))
    given = tuple(micro)   # what the list held: the answer may change the list itself
    # every forward of the wrapped model, through DDP or past it (ddp_model.module(x), which skips DDP's sync too):
    # the micro-batch it ran on (its index), or None for any other input (several micro-batches in one); its rows,
    # whether autograd was on, and DDP's sync flag (None: past DDP)
    details: list[tuple[int, bool, bool | None]] = []

    def on_forward(module, args):
        forwards.append(next((i for i, (xs, _) in enumerate(given)
                              if args[0].shape == xs.shape and torch.equal(args[0], xs)), None))
        details.append((len(args[0]) if torch.is_tensor(args[0]) and args[0].dim() else -1,
                        torch.is_grad_enabled(), through_ddp.pop() if through_ddp else None))

    model.module.register_forward_pre_hook(on_forward)
    next(model.parameters()).register_hook(lambda grad: synced["backward"].append(model.require_backward_grad_sync))

    def before(name: str, arguments: dict) -> None:   # the answer's own call (DDP's, from its hook, is not)
        if in_hook:
            return
        sent = arguments.get(OWN_CALLS[name]) if OWN_CALLS[name] else None
        storages = {p.grad.untyped_storage().data_ptr() for p in model.parameters() if p.grad is not None}
        tensors = [sent] if torch.is_tensor(sent) else [t for t in sent or () if torch.is_tensor(t)]
        into_grad = bool(tensors) and all(t.untyped_storage().data_ptr() in storages for t in tensors)
        if name not in POINT_TO_POINT:
            _agree(OWN_NAMES.index(name), _numel(sent), last_micro(), len(calls), len(own), apart)
        own.append((name, _numel(sent), into_grad))

    before_params = [p.detach().clone() for p in model.parameters()]
    try:
        with agreeing_collectives(OWN_NAMES, before):
            call_case(accumulate_gradients, f"accumulating {micro_batches} micro-batches on rank {rank}", model,
                      micro)
        result = {"grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
                  "all_reduces": len(calls), "own": own, "synced": synced, "inputs": forwards, "forwards": details,
                  "stepped": any(not torch.equal(b, p.detach()) for b, p in zip(before_params, model.parameters())),
                  "list": (len(given), len(micro), len(micro) == len(given) and all(a is b for a, b in
                                                                                     zip(micro, given))),
                  "apart": None}
        _agree(RETURNED, -1, last_micro(), len(calls), len(own), apart)   # a rank that skipped a collective meets here
    except (CaseFailed, CollectivesApart) as failure:
        if not apart or (isinstance(failure, CaseFailed) and failure.kind != CollectivesApart.__name__):
            raise
        return {"apart": apart[-1]}
    return result


def _repeated(inputs: list) -> list[int]:
    """The micro-batches (indices) that ran forward more than once, in order."""
    return sorted({i for i in inputs if i is not None and inputs.count(i) > 1})


def _micro_batches(indices: list[int]) -> str:
    if len(indices) == 1:
        return f"micro-batch {indices[0]}"
    return f"micro-batches {', '.join(map(str, indices[:-1]))} and {indices[-1]}"


def _reference(micro_batches: int = MICRO_BATCHES) -> dict[str, list]:
    """The gradients a run with `micro_batches` per rank is compared with: "big batch" (the right ones), "last only"
    (every rank's last micro-batch alone, all-reduced) and "own" (per rank, its own micro-batches, not all-reduced)."""
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
    out["own"] = []   # each rank's own gradient, not all-reduced: the mean loss over its micro-batches
    for rank in range(WORLD_SIZE):
        own = _model()
        F.mse_loss(own(x.chunk(WORLD_SIZE)[rank]), y.chunk(WORLD_SIZE)[rank]).backward()
        out["own"].append([p.grad.clone() for p in own.parameters()])
    return out


def check_accumulate_gradients(accumulate_gradients, timeout: float = 30.0) -> None:
    """Check `accumulate_gradients(ddp_model, micro_batches)`: gradient accumulation with no_sync.

    On every rank, `micro_batches` is a list of (x, y); afterwards every p.grad must equal the
    gradient of `F.mse_loss` over the big batch made of all ranks' micro-batches, with one
    all-reduce in total, DDP's own (all but the last backward inside `ddp_model.no_sync()`, and
    no collective call of the answer's own), no optimizer step, and the list left as it was
    given: with 3 micro-batches, then again with 4.

    Introduced in notebooks/05-ddp-in-practice.ipynb.
    """
    ensure_written(accumulate_gradients)
    name = getattr(accumulate_gradients, "__name__", "accumulate_gradients")
    refuse_written_divisor(accumulate_gradients, name, "a loss", "len(micro_batches), the number of micro-batches",
                           divided=("loss",))
    results = run_accumulate_gradients_answers((accumulate_gradients,), timeout, name)[0]
    passed(judge_accumulate_gradients(name, results, _scales_gradients(accumulate_gradients)))


def _scales_gradients(fn) -> bool:
    """Whether fn's source divides or multiplies something whose text names a gradient (`p.grad /= k`,
    `p.grad.mul_(s)`, `torch._foreach_div_(grads, k)`) and nothing whose text names a loss: evidence that a wrong
    scale was put on the gradients after backward, not on each micro-batch's loss."""
    tree = source_tree(fn)
    if tree is None:
        return False
    scaled = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mult)):
            scaled.add(ast.unparse(node.left if isinstance(node, ast.BinOp) else node.target))
        elif isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in _SCALING_CALLS:
            method = isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) != "torch"
            scaled.update([ast.unparse(node.func.value)] if method else map(ast.unparse, node.args[:1]))
    return any("grad" in text for text in scaled) and not any("loss" in text for text in scaled)


_SCALING_CALLS = ("div", "div_", "mul", "mul_", "true_divide", "true_divide_", "divide", "multiply", "_foreach_div_",
                  "_foreach_mul_")


def judge_accumulate_gradients(name: str, results: list[dict], scales_gradients: bool = False) -> str:
    """The ✓ line for one answer's results on every rank (`run_accumulate_gradients_answers`), or CheckFailed naming
    its mistake: the run with 3 micro-batches is judged first, then the run with 4. `scales_gradients`: the answer
    scales the gradients after backward, not the losses (`_scales_gradients`), so a wrong divisor is named there."""
    _judge_run(results, MICRO_BATCHES, name=name, scales_gradients=scales_gradients)
    try:
        _judge_run([result["more"] for result in results], MORE_MICRO_BATCHES, right_with=MICRO_BATCHES, name=name,
                   scales_gradients=scales_gradients)
    except CheckFailed as failure:
        raise CheckFailed(f"with {MORE_MICRO_BATCHES} micro-batches (with {MICRO_BATCHES} all was right), "
                          f"{failure}") from None
    # what ran on rank 0: DDP's all-reduces and the answer's own collectives (none, in a run judged right)
    ran = results[0]["all_reduces"] + len(results[0]["own"])
    return (f"{name}: {MICRO_BATCHES} micro-batches == one big batch, with {ran} all-reduce{'s' * (ran != 1)} "
            f"instead of {MICRO_BATCHES}")


def _apart_feedback(everyone: list, name: str) -> None:
    """CheckFailed saying what each rank was about to do when the ranks went apart (`_agree`), and what that shows."""
    def did(doing, numel, micro, ddp, own) -> str:
        if doing == DDP_ALL_REDUCE:
            after = f" (its last forward: micro-batch {micro})" if micro >= 0 else ""
            return f"started DDP's all-reduce in a backward{after}"
        if doing == RETURNED:
            return (f"returned from {name} having made {ddp or 'no'} DDP all-reduce{'s' * (ddp != 1)}"
                    + (f" and {own} call(s) of its own" if own else ""))
        return f"called dist.{OWN_NAMES[doing]}" + (f" ({numel} elements)" if numel >= 0 else "")

    said = ", ".join(f"rank {rank} {did(*mine)}" for rank, mine in enumerate(everyone))
    syncing = [rank for rank, mine in enumerate(everyone) if mine[0] == DDP_ALL_REDUCE]
    if syncing and len(syncing) < len(everyone):
        others = [rank for rank in range(len(everyone)) if rank not in syncing]
        raise CheckFailed(f"the ranks went apart: {said}. DDP's all-reduce waits for the same all-reduce on every "
                          f"rank, so {_ranks(syncing)} would have waited for {_ranks(others)} forever (the check "
                          "stopped them).\nHint: every rank must run the LAST micro-batch's forward and backward "
                          "outside `with model.no_sync():`, and the others inside it: the same on every rank.")
    raise CheckFailed(f"the ranks' collectives did not pair up: {said} (the check stopped them before they waited "
                      "for each other).\nHint: every rank must make the same collectives, in the same order, with "
                      "tensors of the same size.")


def _grads_are(grads: list, want: list) -> str:
    """What a rank's gradients are, in words: 'right', '2x the big batch's gradient', or how they differ."""
    if any(grad is None for grad in grads):
        return "None for some parameters"
    if all(torch.allclose(grad, w, atol=1e-6) for grad, w in zip(grads, want)):
        return "right"
    ratio = uniform_ratio(torch.cat([g.flatten() for g in grads]), torch.cat([w.flatten() for w in want]))
    if ratio is not None:
        return f"{times_of(ratio)} the big batch's gradient"
    return "not the big batch's gradient, nor a multiple of it"


def _own_calls(own: list) -> str:
    """The answer's own torch.distributed calls in words: '4 calls of dist.all_reduce (26 elements, on p.grad
    itself)'."""
    parts = []
    for call in dict.fromkeys(name for name, _, _ in own):
        mine = [(numel, into_grad) for name, numel, into_grad in own if name == call]
        elements = sum(numel for numel, _ in mine if numel > 0)
        what = [f"{elements} elements"] if elements else []
        what += ["on p.grad itself"] if all(into_grad for _, into_grad in mine) else []
        parts.append(f"{len(mine)} call{'s' * (len(mine) != 1)} of dist.{call}"
                     + (f" ({', '.join(what)})" if what else ""))
    return " and ".join(parts)


def _why_no_sync(got: dict) -> str:
    """Why DDP never all-reduced in a run, from the forwards and backwards it saw."""
    if got["inputs"] and not got["synced"]["forward"]:
        return "every forward ran on ddp_model.module, past DDP"
    if True not in got["synced"]["backward"]:
        return "every backward ran inside `no_sync()`"
    if True not in got["synced"]["forward"]:
        return "a backward ran outside `no_sync()`, but every forward through DDP inside it"
    return "no backward made DDP's all-reduce"


def _count_feedback(got: dict, count: int, right_with: int | None, grads_right: bool) -> str:
    """What a run with another number of forwards or backwards than micro-batches shows, and the hint."""
    inputs, details = got["inputs"], got["forwards"]
    forwards, backwards = len(inputs), len(got["synced"]["backward"])
    skipped, repeated = [i for i in range(count) if i not in inputs], _repeated(inputs)
    one_each = ("accumulation runs one forward and one backward per micro-batch, so only one micro-batch's "
                "activations are alive at a time (the point when the whole batch does not fit)")
    if right_with is not None and forwards == backwards:
        return (f"the run with {right_with} micro-batches had one forward and one backward for each: the loop stops at "
                "a number written in the code (a range, a slice, an index) where len(micro_batches) decides it.")
    no_grad = [i for i, (_, enabled, _) in zip(inputs, details) if not enabled]
    if no_grad:
        which = ", ".join("another input" if i is None else str(i) for i in no_grad)
        return (f"{len(no_grad)} forward(s) ran with autograd off (torch.no_grad() or inference_mode), on "
                f"micro-batch(es) {which}: they record no graph, so no backward adds their gradients. Every "
                "micro-batch needs a forward with autograd on and a backward of its own; `no_sync()` alone is what "
                "keeps DDP from all-reducing.")
    several = [rows for i, (rows, _, _) in zip(inputs, details) if i is None]
    if several:
        shown = ", ".join(f"{rows} rows" + (f": {rows // MICRO_SIZE} micro-batches at once" if rows > MICRO_SIZE
                                             and rows % MICRO_SIZE == 0 else "") for rows in several)
        return (f"{len(several)} forward(s) ran on an input that is not one micro-batch ({shown}): {one_each}; one "
                "forward of several micro-batches holds all their activations at once.")
    if backwards > forwards:
        return (f"{backwards - forwards} more backward(s) than forwards: a graph went backward more than once "
                f"(retain_graph=True). {one_each[0].upper()}{one_each[1:]}.")
    if backwards < forwards and grads_right:
        return (f"the gradients count all {forwards} forwards, so the {backwards} backward(s) went through them all: "
                f"losses were added up before a backward, which keeps every micro-batch's activations alive until "
                f"it runs. {one_each[0].upper()}{one_each[1:]}.")
    if forwards == backwards and (skipped or repeated):
        if skipped:
            others = (f"{_micro_batches(repeated)} ran more than once" if repeated else
                      "the others ran one forward and one backward each")
            return (f"micro-batch{'es' if len(skipped) > 1 else ''} {skipped} of 0..{count - 1} never ran forward; "
                    f"{others}. Every micro-batch is part of the big batch: loop over all of micro_batches.")
        times = ", ".join(f"{inputs.count(i)} times" for i in repeated)
        ran = f"{_micro_batches(repeated)} ran forward {times} (the forwards ran on micro-batches {inputs})"
        last = count - 1
        flags = [sync for i, (_, _, sync) in zip(inputs, details) if i == last]
        if repeated == [last] and False in flags and True in flags:
            return (f"{ran}, inside `no_sync()` with the others and again outside it: every micro-batch is part of "
                    "the big batch once, so run the LAST one only once, outside `no_sync()`.")
        return f"{ran}: every micro-batch is part of the big batch once."
    return f"{one_each}: every micro-batch once, each with its own forward and backward."


def _judge_run(results: list[dict], count: int, right_with: int | None = None,
               name: str = "accumulate_gradients", scales_gradients: bool = False) -> None:
    """CheckFailed at the first thing a run with `count` micro-batches got wrong on some rank. `right_with`: the
    number of micro-batches of a run of the same answer that was right (evidence for a count written in the code);
    `scales_gradients`: the answer divides the gradients after backward, not the losses (`_scales_gradients`)."""
    divided = "the gradients were divided" if scales_gradients else "each micro-batch loss was divided"
    apart = next((got["apart"] for got in results if got.get("apart")), None)
    if apart:
        _apart_feedback(apart, name)
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
        grads = _grads_are(got["grads"], reference["big batch"])
        if forwards != count or backwards != count:
            counted = grads == "right" or _grads_are(got["grads"], reference["own"][rank]) == "right"
            raise CheckFailed(f"rank {rank}: {forwards} forward(s) and {backwards} backward(s) for "
                              f"{count} micro-batches.\nHint: {_count_feedback(got, count, right_with, counted)}")
        if got["own"] and got["all_reduces"] == 0:
            said = (f"right gradients, but DDP never all-reduced ({_why_no_sync(got)}): {name}'s own "
                    f"{_own_calls(got['own'])} reduced them" if grads == "right" else
                    f"DDP never all-reduced ({_why_no_sync(got)}); {name}'s own {_own_calls(got['own'])} ran "
                    f"instead, and the gradients are {grads}")
            raise CheckFailed(f"rank {rank}: {said}.\nHint: the exercise asks for DDP's own all-reduce, which "
                              "averages over the ranks, overlapped with the last backward: run the LAST micro-batch's "
                              "forward and backward outside `with model.no_sync():`, and make no collective call of "
                              "your own.")
        if got["own"]:
            ddp = f"DDP's {got['all_reduces']} all-reduce{'s' * (got['all_reduces'] != 1)}"
            said = (f"right gradients, but besides {ddp}, {name} made {_own_calls(got['own'])} of its own" if
                    grads == "right" else
                    f"besides {ddp}, {name} made {_own_calls(got['own'])} of its own, and the gradients are {grads}")
            # gradients sent: p.grad itself, or a tensor of more than one element (a copy); not a barrier or a loss
            hint = ("DDP's all-reduce in the backward outside `no_sync()` already averages every gradient over the "
                    "ranks: that one all-reduce is all the communication the exercise asks for, so make no collective "
                    "call of your own." if any(into_grad or numel > 1 for _, numel, into_grad in got["own"]) else
                    f"DDP's one all-reduce is all the communication the exercise asks for: leave other collectives "
                    f"out of {name} (the caller can make them after it).")
            raise CheckFailed(f"rank {rank}: {said}.\nHint: {hint}")
        given, after, same = got["list"]
        if not same:
            changed = f"{given} micro-batches before the call and {after} after it" if given != after else (
                "the same number of micro-batches after the call, but not the same ones")
            raise CheckFailed(f"rank {rank}: {name} changed the caller's list: micro_batches held {changed} (the "
                              f"gradients are {grads}).\nHint: read the micro-batches without changing the list, "
                              "which the caller may use after the call: micro_batches[-1], or "
                              "`*first, last = micro_batches`.")
        if got["all_reduces"] == 0 and grads == "right":
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
            kept = ("so every rank kept its own gradients" if _grads_are(got["grads"], reference["own"][rank]) ==
                    "right" else f"and the gradients are {grads}")
            raise CheckFailed(f"rank {rank}: no all-reduce happened ({_why_no_sync(got)}), {kept}."
                              "\nHint: the LAST micro-batch's backward must run outside `with model.no_sync():`.")
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
                hint = (f"it is the big batch's gradient divided by {MICRO_SIZE}: {divided} "
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
                                                   (2, "len(micro_batches[0]), an (x, y) pair's length"),
                                                   (count - 1 if right_with is None else None,
                                                    "len(micro_batches) - 1")) if value == divided_by]
                what = f"{divided_by} ({', or '.join(equals)})," if equals else f"{divided_by},"
                hint = (f"it is {count}/{divided_by} of the big batch's gradient: {divided} by {what} where "
                        f"there are {count} micro-batches: divide by len(micro_batches), which the run decides")
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

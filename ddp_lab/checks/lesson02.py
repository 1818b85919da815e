"""Checks for the exercises of notebooks/02-collectives.ipynb: collectives built from send/recv.

    ddp_lab.checks.lesson02.check_ring_reduce_scatter(ring_reduce_scatter)
    ddp_lab.checks.lesson02.check_ring_all_gather(ring_all_gather)
    ddp_lab.checks.lesson02.check_all_reduce_mean(all_reduce_mean)

Each runs the answer on 3 gloo ranks (so sizes 10, 7, 2 do not divide evenly), with every
collective disabled inside the ranks while the answer runs, and a short timeout that turns
a deadlock into a message. The expected results come from the library itself: before the
answer runs, every rank calls `dist.all_reduce` on the same inputs.

Introduced in notebooks/02-collectives.ipynb.
"""

from __future__ import annotations

import itertools
import re

import torch
import torch.distributed as dist

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (CaseFailed, call_case, describe, ensure_written, first_mismatch,
                                   only_point_to_point, run_answers_on_ranks, run_on_ranks)
from ddp_lab.instruments.collectives import replacing_dist_calls

WORLD_SIZE = 3
REDUCE_SIZES = (12, 10, 7, 2)    # 12 divides by 3; the others do not; 2 < world size
GATHER_SIZES = (4, 1)


def rank_input(rank: int, size: int) -> torch.Tensor:
    """The tensor rank `rank` starts with in the checks (the same in the notebook and the ranks)."""
    generator = torch.Generator().manual_seed(1000 * size + rank)
    return torch.randn(size, generator=generator)


def chunk_sizes(size: int, world_size: int) -> list[int]:
    """Element counts of `tensor.tensor_split(world_size)` for a tensor of `size` elements."""
    return [len(chunk) for chunk in torch.empty(size).tensor_split(world_size)]


def _returned(value):
    return value.detach().clone() if torch.is_tensor(value) else value


def _counting_receives(counts: list[int]):
    """Inside a rank: add 1 to counts[-1] for every dist.recv / dist.irecv the answer makes (a context manager)."""
    inside = []  # dist.recv calls irecv itself (torch 2.13): count only the answer's own call

    def counting(original):
        def receive(*args, **kwargs):
            counts[-1] += not inside
            inside.append(1)
            try:
                return original(*args, **kwargs)
            finally:
                inside.pop()
        return receive

    return replacing_dist_calls({"recv": counting, "irecv": counting})


def _reduce_runner(rank: int, fn, sizes, world_size: int, verb: str):
    """On one rank: the library's all_reduce for every size (the reference), then the answer."""
    references = []
    for size in sizes:
        total = rank_input(rank, size)
        dist.all_reduce(total)  # SUM over ranks, computed by torch.distributed itself
        references.append(total)
    outputs, receives = [], []
    with only_point_to_point(), _counting_receives(receives):
        for size in sizes:
            receives.append(0)
            out = call_case(fn, f"{verb} a tensor of {size} elements on {world_size} ranks",
                            rank_input(rank, size).clone())
            outputs.append(_returned(out))
    return {"sums": references, "outputs": outputs, "receives": receives}


def _all_gather_runner(rank: int, fn, sizes, world_size: int):
    outputs = []
    with only_point_to_point():
        for size in sizes:
            out = call_case(fn, f"gathering tensors of {size} elements on {world_size} ranks",
                            rank_input(rank, size).clone())
            outputs.append([_returned(t) for t in out] if isinstance(out, (list, tuple)) else _returned(out))
    return outputs


def _answers_runner(rank: int, answers: tuple, runner, *args) -> list:
    """`runner(rank, answer, *args)` for each answer in turn, on one launch's ranks (the tests' wrong answers)."""
    return [runner(rank, answer, *args) for answer in answers]


def run_answers(runner, answers: tuple, args: tuple, world_size: int = WORLD_SIZE, timeout: float = 20.0,
                name: str = "answer") -> list[list]:
    """Each answer once through `runner` (`_reduce_runner` or `_all_gather_runner`) on the same ranks, in one
    launch; [answer][rank] -> what the runner returned. For answers that return (one that raises ends the launch)."""
    return run_answers_on_ranks(_answers_runner, answers, world_size, timeout, name, args=(runner, *args))


def _close(got, expected) -> bool:
    return (torch.is_tensor(got) and got.shape == expected.shape
            and first_mismatch(got.float(), expected.float()) is None)


def _case_size(failure) -> int | None:
    exception = failure.exception
    found = re.search(r"of (\d+) elements", exception.case) if isinstance(exception, CaseFailed) else None
    return int(found.group(1)) if found else None


def _explain_chunking(failure, world_size: int, size_mismatch: str) -> str | None:
    """Hints for the failures chunking mistakes cause: a bad chunk index, a recv of the wrong size."""
    exception = failure.exception
    size = _case_size(failure)
    if isinstance(exception, CaseFailed) and exception.kind == "IndexError" and size is not None:
        if size < world_size:
            return (f"with {size} elements on {world_size} ranks, tensor.chunk({world_size}) returns only "
                    f"{len(torch.empty(size).chunk(world_size))} chunk(s), so a chunk index runs past the end: "
                    f"tensor.tensor_split({world_size}) always returns {world_size} chunks (here some are "
                    "empty), which is what every rank's index arithmetic assumes.")
        return "a chunk index ran past the list of chunks: take every chunk index % world_size."
    if _recv_got_another_size(failure.details):
        return size_mismatch
    return None


def _recv_got_another_size(rank_output: str) -> bool:
    """Whether a rank aborted because a message was longer than the buffer its recv posted.

    gloo then fails an enforce in its TCP transport (`op.preamble.length <= op.nbytes. 16 vs
    12`) and the rank dies with SIGABRT. torch 2.13.0 and 2.15.0 add "Received data size
    doesn't match expected size"; torch 2.8.0 prints the failed condition alone, so both are
    looked for.
    """
    return "op.preamble.length <= op.nbytes" in rank_output or "doesn't match expected size" in rank_output


# --- exercise 1: ring reduce-scatter ------------------------------------------------------------

def check_ring_reduce_scatter(ring_reduce_scatter, world_size: int = WORLD_SIZE, timeout: float = 20.0) -> None:
    """Check a hand-built reduce-scatter with `dist.reduce_scatter`'s layout.

    `ring_reduce_scatter(tensor)` runs on every rank with that rank's 1-D tensor and must
    return the SUM over ranks of chunk `rank` of `tensor.tensor_split(world_size)` (only that
    chunk), using only send/recv (isend/irecv). The expected value is `dist.all_reduce` of
    the same inputs, cut the same way.

    Introduced in notebooks/02-collectives.ipynb.
    """
    ensure_written(ring_reduce_scatter)
    name = getattr(ring_reduce_scatter, "__name__", "ring_reduce_scatter")
    mismatch = ("a recv received a message of another size than its buffer: a rank sent one chunk while "
                "its right neighbour received into a chunk of another size (10 elements on 3 ranks: chunks "
                "of 4, 3, 3). What rank r sends in step s, rank r + 1 must receive in step s: the send "
                "index of rank r must equal the recv index of rank r + 1.")
    results = run_on_ranks(_reduce_runner, (ring_reduce_scatter, REDUCE_SIZES, world_size, "reduce-scattering"),
                           world_size, timeout, name,
                           explain=lambda failure: _explain_chunking(failure, world_size, mismatch))
    passed(judge_reduce_scatter(name, results, world_size))


def judge_reduce_scatter(name: str, results: list, world_size: int = WORLD_SIZE) -> str:
    """The ✓ line for one ring_reduce_scatter answer's per-rank results (`_reduce_runner`'s), or CheckFailed."""
    for case, size in enumerate(REDUCE_SIZES):
        inputs = [rank_input(rank, size) for rank in range(world_size)]
        for rank in range(world_size):
            expected = results[rank]["sums"][case].tensor_split(world_size)[rank]
            _compare_reduce_scatter(results[rank]["outputs"][case], expected, inputs, rank, size, world_size,
                                    results[rank]["receives"][case])
    for case, size in enumerate(REDUCE_SIZES):
        extra = [rank for rank in range(world_size) if results[rank]["receives"][case] > world_size - 1]
        if extra:
            raise CheckFailed(f"rank {extra[0]}, tensor of {size} elements: the right chunk, but the rank received "
                              f"{results[extra[0]]['receives'][case]} times.\nHint: a ring reduce-scatter takes "
                              f"N - 1 = {world_size - 1} steps; after them every chunk is complete where it belongs, "
                              "and a further step only moves data no rank needs (range(world_size - 1)).")
    return (f"{name} gives rank r the sum of chunk r, like dist.reduce_scatter, on {world_size} ranks for "
            f"sizes {', '.join(map(str, REDUCE_SIZES))}, using only send/recv")


def _compare_reduce_scatter(got, expected, inputs, rank, size, world_size, receives) -> None:
    where = f"rank {rank}, tensor of {size} elements on {world_size} ranks"
    if not torch.is_tensor(got):
        raise CheckFailed(f"{where}: expected a tensor (the sum of chunk {rank}), got {describe(got)}.\n"
                          "Hint: return the reduced chunk at the end of the function.")
    if _close(got, expected):
        return
    chunks = [t.tensor_split(world_size) for t in inputs]          # chunks[q][k]: rank q's chunk k
    sums = [sum(chunks[q][k] for q in range(world_size)) for k in range(world_size)]
    sizes = chunk_sizes(size, world_size)
    head = (f"{where}: expected the sum over ranks of chunk {rank} ({sizes[rank]} elements; tensor_split "
            f"gives chunks of {sizes}), got {describe(got)}")
    if _close(got, expected / world_size):
        hint = ("you returned the MEAN of chunk {rank}; dist.reduce_scatter returns the SUM. Leave the "
                "division for the averaging all-reduce (exercise 3).").format(rank=rank)
    elif receives < world_size - 1 and (_close(got, chunks[rank][rank]) or _partial(got, chunks, rank, world_size)):
        hint = (f"this rank received {receives} time(s); a ring reduce-scatter takes N - 1 = {world_size - 1} "
                f"steps, each receiving one chunk and adding it in, and only the last step (s = N - 2) "
                f"completes chunk {rank}: run the loop for range(world_size - 1).")
    elif _close(got, chunks[rank][rank]):
        hint = (f"it is this rank's own chunk {rank}, unchanged: nothing was ever added into it. Either the "
                f"schedule never adds into chunk r (the lesson's schedule sends chunk r in step 0 and never "
                f"receives into it: shift it so that rank r adds into chunk r in the LAST step, s = N - 2), or the "
                "sums are computed but never stored back into the list of chunks.")
    elif any(_close(got, sums[k]) for k in range(world_size) if k != rank):
        other = next(k for k in range(world_size) if k != rank and _close(got, sums[k]))
        lesson = (" That is where the lesson's ring ends (chunk (r + 1) % N)." if other == (rank + 1) % world_size
                  else "")
        hint = (f"it is the full sum of chunk {other}, not of chunk {rank}.{lesson} dist.reduce_scatter gives "
                f"rank r chunk r: shift every chunk index of the schedule by one, so that in the last step "
                f"(s = N - 2) rank r adds into chunk r, and return chunks[rank].")
    elif any(_close(got, chunks[q][rank]) for q in range(world_size) if q != rank):
        other = next(q for q in range(world_size) if q != rank and _close(got, chunks[q][rank]))
        hint = (f"it is rank {other}'s chunk {rank} alone: what arrived replaced this rank's chunk instead of "
                "being added to it. Receive into a separate buffer, then add it into the chunk.")
    elif got.numel() == size:
        hint = (f"you returned a tensor as large as the input: return only chunk {rank}, the one this rank "
                "owns after the reduce-scatter (tensor_split's chunk `rank`).")
    elif _partial(got, chunks, rank, world_size):
        ranks = _partial(got, chunks, rank, world_size)
        missing = sorted(set(range(world_size)) - set(ranks))
        hint = (f"it is the sum over ranks {list(ranks)} only; rank(s) {missing} are missing. A ring "
                f"reduce-scatter takes N - 1 = {world_size - 1} steps, each adding into the chunk that travels "
                "on in the next step.")
    elif got.shape != expected.shape:
        hint = (f"chunk {rank} of tensor_split({world_size}) has {sizes[rank]} elements: the first "
                f"{size % world_size} chunks get one extra element when {size} does not divide by "
                f"{world_size}. Split with tensor.tensor_split(world_size) (not tensor.chunk, not len // N).")
    else:
        index = first_mismatch(got.float(), expected.float())
        head = (f"{where}, element {index[0]} of chunk {rank}: expected the sum {expected[index].item():.6f}, "
                f"got {got[index].item():.6f}")
        hint = ("rank r must end with chunk r complete: in step s it adds what arrives into one chunk and "
                "sends the chunk it completed in the step before; check both indices against the last step "
                "(s = N - 2), in which rank r adds into chunk r.")
    raise CheckFailed(f"{head}.\nHint: {hint}")


def _partial(got, chunks, rank, world_size) -> tuple[int, ...] | None:
    """The strict subset of ranks (at least 2) whose chunk `rank` adds up to got, if any."""
    for count in range(2, world_size):
        for ranks in itertools.combinations(range(world_size), count):
            if _close(got, sum(chunks[q][rank] for q in ranks)):
                return ranks
    return None


# --- exercise 2: ring all-gather -----------------------------------------------------------------

def check_ring_all_gather(ring_all_gather, world_size: int = WORLD_SIZE, timeout: float = 20.0) -> None:
    """Check a hand-built all-gather: `ring_all_gather(tensor)` returns a list whose entry k is rank k's tensor.

    Introduced in notebooks/02-collectives.ipynb.
    """
    ensure_written(ring_all_gather)
    name = getattr(ring_all_gather, "__name__", "ring_all_gather")
    results = run_on_ranks(_all_gather_runner, (ring_all_gather, GATHER_SIZES, world_size),
                           world_size, timeout, name)
    passed(judge_all_gather(name, results, world_size))


def judge_all_gather(name: str, results: list, world_size: int = WORLD_SIZE) -> str:
    """The ✓ line for one ring_all_gather answer's per-rank results (`_all_gather_runner`'s), or CheckFailed."""
    for case, size in enumerate(GATHER_SIZES):
        inputs = [rank_input(rank, size) for rank in range(world_size)]
        for rank in range(world_size):
            _compare_gather(results[rank][case], inputs, rank, size, world_size)
    return (f"{name} gives every rank every rank's tensor, in rank order, on {world_size} ranks, "
            "using only send/recv")


def _compare_gather(got, inputs, rank, size, world_size) -> None:
    where = f"rank {rank}, tensors of {size} elements on {world_size} ranks"
    if not isinstance(got, list) or len(got) != world_size:
        raise CheckFailed(f"{where}: expected a list of {world_size} tensors (entry k = rank k's tensor), "
                          f"got {describe(got)}.\nHint: return a list with one entry per rank.")
    for source, (entry, expected) in enumerate(zip(got, inputs)):
        if not torch.is_tensor(entry) or entry.shape != expected.shape:
            raise CheckFailed(f"{where}: entry {source} should be rank {source}'s tensor of shape "
                              f"{tuple(expected.shape)}, got {describe(entry)}.")
        index = first_mismatch(entry.float(), expected, atol=0, rtol=0)
        if index is None:
            continue
        message = (f"{where}: entry {source}, element {index[0]}: expected {expected[index].item():.6f} "
                   f"(rank {source}'s value), got {entry[index].item():.6f}.")
        holder = [k for k, t in enumerate(inputs) if torch.equal(entry.float(), t)]
        received = [got[k] for k in range(world_size) if k != rank]
        left = (rank - 1) % world_size
        if source == rank:
            hint = (f"your own slot, entry {rank}, does not hold your tensor: put it there before the ring starts "
                    "(the ring only brings the other ranks' tensors).")
        elif all(torch.equal(t.float(), inputs[left]) for t in received) and world_size > 2:
            hint = (f"every entry this rank received holds rank {left}'s tensor, its left neighbour's own: each "
                    "rank sent its own tensor in every step. Pass on the tensor that arrived in the step before.")
        elif all(torch.equal(t, received[0]) for t in received) and world_size > 2:
            hint = ("every entry this rank received holds the same values: they share one receive buffer, which "
                    "each recv overwrote. Receive every step into a tensor of its own.")
        elif holder:
            hint = (f"entry {source} holds rank {holder[0]}'s tensor: index the list by the rank a tensor "
                    f"started on. In step s, rank r receives the tensor that started on rank "
                    f"(r - s - 1) % world_size.")
        else:
            hint = (f"entry {source} was never filled with rank {source}'s tensor: a ring all-gather needs "
                    f"world_size - 1 = {world_size - 1} steps, each passing on what arrived in the step before.")
        raise CheckFailed(f"{message}\nHint: {hint}")


# --- exercise 3: an averaging all-reduce from the two ---------------------------------------------

def check_all_reduce_mean(all_reduce_mean, world_size: int = WORLD_SIZE, timeout: float = 20.0) -> None:
    """Check an averaging all-reduce: `all_reduce_mean(tensor)` returns the element-wise MEAN over ranks.

    It runs on every rank with that rank's 1-D tensor and must return what
    `dist.all_reduce(tensor); tensor / world_size` gives, for sizes that do and do not divide
    by the world size, using only send/recv (the exercise composes the reduce-scatter and the
    all-gather built before it).

    Introduced in notebooks/02-collectives.ipynb.
    """
    ensure_written(all_reduce_mean)
    name = getattr(all_reduce_mean, "__name__", "all_reduce_mean")
    mismatch = ("a recv received a message of another size than its buffer. tensor_split's chunks differ by "
                "one element when the size does not divide by world_size (10 on 3 ranks: 4, 3, 3), but "
                "ring_all_gather receives into buffers shaped like this rank's own tensor: pad every reduced "
                "chunk with zeros to the largest chunk's size before ring_all_gather, and cut entry k back to "
                "chunk k's size afterwards.")
    results = run_on_ranks(_reduce_runner, (all_reduce_mean, REDUCE_SIZES, world_size, "averaging"),
                           world_size, timeout, name,
                           explain=lambda failure: _explain_chunking(failure, world_size, mismatch))
    passed(judge_all_reduce_mean(name, results, world_size))


def judge_all_reduce_mean(name: str, results: list, world_size: int = WORLD_SIZE) -> str:
    """The ✓ line for one all_reduce_mean answer's per-rank results (`_reduce_runner`'s), or CheckFailed."""
    for case, size in enumerate(REDUCE_SIZES):
        inputs = [rank_input(rank, size) for rank in range(world_size)]
        for rank in range(world_size):
            total = results[rank]["sums"][case]
            _compare_mean(results[rank]["outputs"][case], total, inputs[rank], rank, size, world_size)
    return (f"{name} equals dist.all_reduce / world_size on {world_size} ranks for sizes "
            f"{', '.join(map(str, REDUCE_SIZES))}, using only send/recv")


def _compare_mean(got, total, own, rank, size, world_size) -> None:
    where = f"rank {rank}, tensor of {size} elements on {world_size} ranks"
    mean = total / world_size
    if not torch.is_tensor(got):
        raise CheckFailed(f"{where}: expected a tensor, got {describe(got)}.\n"
                          "Hint: return the averaged tensor at the end of the function.")
    if _close(got, mean):
        return
    sizes = chunk_sizes(size, world_size)
    mine = [piece.tensor_split(world_size)[rank] for piece in (mean, total)]
    head = f"{where}: expected the mean over ranks (shape {tuple(mean.shape)}), got {describe(got)}"
    if _close(got, total):
        hint = (f"you returned the SUM over ranks; the exercise asks for the MEAN: divide by the world "
                f"size ({world_size}).")
    elif any(_close(got, piece) for piece in mine) and got.numel() != size:
        hint = (f"that is chunk {rank} only, what this rank owns after the reduce-scatter. The all-gather "
                f"phase is missing: gather every rank's reduced chunk (ring_all_gather) and concatenate them "
                f"in rank order.")
    elif got.numel() == max(sizes) * world_size != size:
        hint = (f"{got.numel()} = {world_size} x {max(sizes)} elements for a tensor of {size}: the padding is "
                f"still there. Cut entry k of the gathered list back to chunk k's size ({sizes}) before "
                "concatenating.")
    elif _close(got, own):
        hint = "the result is this rank's own input, unchanged: return the averaged tensor, not the input."
    elif got.shape != mean.shape:
        hint = (f"return the whole averaged tensor: the gathered chunks ({sizes} elements) concatenated in "
                "rank order.")
    elif _permuted(got, mean, sizes):
        moved = _permuted(got, mean, sizes)
        shifted = all(_close(piece, mean.split(sizes)[(k + 1) % world_size]) for k, piece in
                      enumerate(got.split(sizes)) if len(piece) == sizes[(k + 1) % world_size])
        hint = (f"every chunk is right but in the wrong place ({moved}): entry k of ring_all_gather's list is "
                "what rank k sent, so rank k must own chunk k after the reduce-scatter (exercise 1's layout, not "
                "the lesson's chunk (k + 1) % N)." if shifted else
                f"every chunk is right but in the wrong place ({moved}): entry k of ring_all_gather's list is "
                "rank k's chunk; concatenate the entries in list order.")
    elif _close(got, mean / world_size):
        hint = f"this is the mean divided by the world size again: divide the sum by {world_size} once."
    elif got.shape == mean.shape and _close(got, torch.cat([torch.nn.functional.pad(c, (0, max(sizes) - len(c)))
                                                             for c in mean.split(sizes)])[:size]):
        hint = ("the padding was cut from the end of the concatenation only, but every short chunk carries its "
                "own padding at its end: cut each gathered entry back to its chunk's size before concatenating.")
    else:
        index = first_mismatch(got.float(), mean.float())
        head = (f"{where}, element {index[0]}: expected the mean {mean[index].item():.6f}, "
                f"got {got[index].item():.6f}")
        hint = ("the mean is: reduce-scatter, pad your chunk to the largest chunk, all-gather, cut each entry back "
                "to its chunk's size, concatenate in rank order, divide by world_size once.")
    raise CheckFailed(f"{head}.\nHint: {hint}")


def _permuted(got, mean, sizes) -> str | None:
    """'position k holds chunk j, ...' when got is mean's chunks in another order, else None."""
    pieces, wanted = got.split(sizes), mean.split(sizes)
    placed = []
    for position, piece in enumerate(pieces):
        sources = [k for k, chunk in enumerate(wanted) if _close(piece, chunk)]
        if not sources:
            return None
        placed.append((position, sources[0]))
    moved = [f"position {p} holds chunk {k}" for p, k in placed if p != k]
    return ", ".join(moved) or None

"""Checks for the exercises of notebooks/15-long-sequences.ipynb: ring attention by hand.

    ddp_lab.checks.lesson15.check_combine(combine_partial_attention)
    ddp_lab.checks.lesson15.check_ring_attention(ring_attention)
    ddp_lab.checks.lesson15.check_zigzag_chunks(zigzag_chunks)

The combine and the zig-zag assignment are plain functions, checked in this process. The ring runs on 3 gloo ranks
(a middle rank exists, and a peer or block off by one shows) with a short timeout, so a deadlocked ring ends with a
message instead of a hang; each rank logs its sends and receives (`p2p_log`), so that message says which order of
calls deadlocked, and a rank that gloo aborts for a receive buffer too small is named as such; after a run that
returned, an irecv the log shows never waited for is refused, right values or not (whether its block had arrived was
a matter of timing), and so is a receive into a tensor that a send still in flight sends from (or a send of one
still being received into); every rank's output is compared with one process, and a wrong one with what each likely
mistake would give (and where none does, with the blocks each rank sent). An answer that calls the package's own
`combine`, ring attention or `zigzag_chunks` is refused (the ring exercise calls `combine` as a tool).

Introduced in notebooks/15-long-sequences.ipynb.
"""

from __future__ import annotations

import contextlib
import numbers
import operator
import re
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (answer_raised, call_case, describe, ensure_written, failure_message, first_mismatch,
                                   gloo_size_abort, only_point_to_point, package_answer_used, refuse_written_modulus,
                                   stuck_line, timeout_message, watching_calls)
from ddp_lab.checks.p2p_log import (RECEIVES, SENDS, Call, calls_never_waited, crashed_in, log_path,
                                   logging_point_to_point, memory_span, read_log, watching_point_to_point)
from ddp_lab.course.context_parallel import layout, ring
from ddp_lab.course.context_parallel.layout import block_entries
from ddp_lab.course.context_parallel.online_softmax import block_attention, combine
from ddp_lab.instruments.collectives import replacing_dist_calls
from ddp_lab.launcher.errors import LaunchError, LaunchTimeout
from ddp_lab.launcher.launch import launch
from ddp_lab.launcher.reports import blocked_in

RING_SIZE = 3                     # ranks in the ring check
ROWS_Q, DIM_Q = 5, 4              # the combine cases' query rows and features (out: (2, 3, 5, 4), lse: (2, 3, 5))
BATCH, HEADS, ROWS, DIM = 1, 2, 4, 3   # ROWS tokens per rank; DIM != ROWS so a transposed block fails loudly
# The package's own answers to the exercises (an answer that calls one is not checked)
COMBINE_ANSWERS = (combine,)
RING_ANSWERS = (ring.ring_attention, ring.ring_attention_forward, ring.ring_step)
ZIGZAG_ANSWERS = (layout.zigzag_chunks,)


def _close(got, want, atol=1e-5, rtol=1e-4) -> bool:
    return torch.is_tensor(got) and got.shape == want.shape and got.dtype == want.dtype and \
        bool(torch.allclose(got, want, atol=atol, rtol=rtol))


def _where(index: tuple) -> str:
    return "[" + ", ".join(str(i) for i in index) + "]"


# --- combine_partial_attention ---------------------------------------------------------------

def _partials(seed: int, blocks: int, score_scale: float) -> tuple[torch.Tensor, list]:
    """One query block (2 x 3 heads x 5 rows) against `blocks` key blocks of different sizes; returns (full, partials)."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, ROWS_Q, DIM_Q, generator=generator) * score_scale   # (b, h, sq, d): sq = 5 != d = 4
    sizes = [3, 6, 2][:blocks]
    k = torch.randn(2, 3, sum(sizes), DIM_Q, generator=generator)
    v = torch.randn(2, 3, sum(sizes), DIM_Q, generator=generator) + 1.0     # outputs away from zero: a wrong weight shows
    full = block_attention(q, k, v)
    parts = [block_attention(q, kb, vb) for kb, vb in zip(k.split(sizes, dim=-2), v.split(sizes, dim=-2))]
    return full, parts


def _combine_cases() -> dict:
    """Small scores; large ones, where some rows have both lse above 88.7 (exp(lse) overflows float32) and others
    one lse above the other by more than that, each way round (a combine safe in one direction only fails); three
    blocks folded as a ring of 3 ranks does."""
    return {
        "combining two partial results with small scores": _partials(150, 2, 1.0),
        "combining two partial results with large scores (lse up to ~170: exp(lse) overflows float32)":
            _partials(160, 2, 60.0),
        "folding three partial results left to right, as a ring of 3 ranks does": _partials(152, 3, 1.0),
    }


def _overflows(x: torch.Tensor) -> torch.Tensor:
    """Where exp(x) is inf in float32 (x above ~88.72)."""
    return torch.isinf(torch.exp(x.float()))


def _combine_hints(parts) -> list:
    """(out, lse, hint) that a likely mistake gives for two partial results."""
    (out_a, lse_a), (out_b, lse_b) = parts[:2]
    right_out, right_lse = combine(out_a, lse_a, out_b, lse_b)
    weight_a, weight_b = torch.exp(lse_a - right_lse).unsqueeze(-1), torch.exp(lse_b - right_lse).unsqueeze(-1)
    return [
        (out_a + out_b, None, "the partial outputs were added as they are: each is normalised over its own keys "
                              "only, so weigh each by its share of the total, exp(lse_x - lse)"),
        ((out_a + out_b) / 2, None, "the partial outputs were averaged: equal weights are right only when both "
                                    "blocks have the same softmax denominator; weigh each by exp(lse_x - lse)"),
        (weight_b * out_a + weight_a * out_b, None,
         "the weights are swapped: out_a must be scaled by exp(lse_a - lse), its own block's share"),
        (right_out, torch.maximum(lse_a, lse_b),
         "the output is right, but the combined lse is the larger of the two: it must be log(exp(lse_a) + "
         "exp(lse_b)) (torch.logaddexp), or the next combine weighs this result wrongly"),
        (right_out, lse_a + lse_b, "the output is right, but the lse were added: logs of sums do not add, the "
                                   "combined lse is log(exp(lse_a) + exp(lse_b)) (torch.logaddexp)"),
        (right_out, right_lse - torch.maximum(lse_a, lse_b),
         "the output is right, but the combined lse lacks the maximum m taken out before exponentiating: "
         "log(exp(lse_a - m) + exp(lse_b - m)) is the lse minus m, so add m back (or use torch.logaddexp)"),
        *[(right_out, kept, f"the output is right, but the lse returned is {name} unchanged: return the combined "
                            "lse, log(exp(lse_a) + exp(lse_b)) (torch.logaddexp), or the next combine weighs this "
                            "result as one block") for kept, name in ((lse_a, "lse_a"), (lse_b, "lse_b"))],
        (_weighed(parts, torch.maximum(lse_a, lse_b)), torch.maximum(lse_a, lse_b),
         "the combined lse was taken as the larger of the two and the weights made from it: exp(lse_x - max) do "
         "not add up to 1 (the larger block's is exactly 1), so the output is not normalised. The combined lse is "
         "log(exp(lse_a) + exp(lse_b)) (torch.logaddexp); the weights exp(lse_x - lse) then add up to 1"),
        (torch.exp(right_lse - lse_a).unsqueeze(-1) * out_a + torch.exp(right_lse - lse_b).unsqueeze(-1) * out_b,
         None, "the weights are upside down: exp(lse - lse_x) is 1 over block x's share of the total (at least 1); "
               "weigh each partial output by exp(lse_x - lse), its share"),
        *[(weight_a * out_a + out_b if kept == "out_b" else out_a + weight_b * out_b, None,
           f"{kept} was added without its weight: each partial output is normalised over its own keys, so both "
           "take their share of the total, exp(lse_x - lse), the new block as well as the running result")
          for kept in ("out_b", "out_a")],
    ]


def _weighed(parts, lse) -> torch.Tensor:
    """The first two partial outputs weighed by exp(lse_x - lse) for a given combined `lse`."""
    (out_a, lse_a), (out_b, lse_b) = parts[:2]
    return torch.exp(lse_a - lse).unsqueeze(-1) * out_a + torch.exp(lse_b - lse).unsqueeze(-1) * out_b


def check_combine(combine_partial_attention) -> None:
    """Check `combine_partial_attention(out_a, lse_a, out_b, lse_b) -> (out, lse)` against attention over all keys.

    out: (2, 3, 5, 4) per block, lse: (2, 3, 5). Cases: small scores, large scores (lse up to ~170, where
    exponentiating an lse, or a difference of two lse taken the wrong way round, overflows float32), and three
    blocks folded left to right. A float64 result is judged by its values; another dtype is named as it is.

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    ensure_written(combine_partial_attention)
    name = getattr(combine_partial_attention, "__name__", "combine_partial_attention")
    for case, ((full_out, full_lse), parts) in _combine_cases().items():
        got_out, got_lse = parts[0]
        for out_b, lse_b in parts[1:]:
            result = None
            try:
                with watching_calls(COMBINE_ANSWERS) as called:
                    result = combine_partial_attention(got_out.clone(), got_lse.clone(), out_b.clone(), lse_b.clone())
            except Exception as error:
                raise answer_raised(name, error, case, _combine_error_hint(error)) from None
            if called:
                raise package_answer_used(name, called)
            if not (isinstance(result, (tuple, list)) and len(result) == 2):
                raise CheckFailed(f"{case}: {name} returned {describe(result)}; expected a pair (out, lse).")
            got_out, got_lse = result
        _judge_combine(name, case, parts, got_out, got_lse, full_out, full_lse)
    passed(f"{name}: two and three partial results combine to attention over all keys, "
           "with large scores too (no overflow)")


_SIZES = re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)")


def _combine_error_hint(error: Exception) -> str | None:
    """The unsqueeze hint, only where torch's error shows a (rows,) weight meeting a (rows, d) output."""
    sizes = _SIZES.search(str(error))
    if sizes and {int(sizes.group(1)), int(sizes.group(2))} == {ROWS_Q, DIM_Q}:
        return ("lse has one value per query row, shape (..., rows), and out has (..., rows, d): give the weights a "
                "last dimension of size 1 (unsqueeze(-1)) so they scale whole rows.")
    return None


def _in_float32(got):
    """A float64 result as float32, whose values the check compares (float64 only adds digits); anything else as is."""
    return got.float() if torch.is_tensor(got) and got.dtype == torch.float64 else got


def _judge_combine(name, case, parts, got_out, got_lse, full_out, full_lse) -> None:
    got_out, got_lse = _in_float32(got_out), _in_float32(got_lse)
    arrays = [value for value in (got_out, got_lse) if not torch.is_tensor(value) and hasattr(value, "shape")]
    if arrays:
        what = "output" if arrays[0] is got_out else "lse"
        raise CheckFailed(f"{case}: the {what} is {describe(arrays[0])}.\nHint: return torch tensors, like the "
                          "partial results: compute with torch's functions (torch.exp, torch.logaddexp), or convert "
                          "with torch.from_numpy.")
    if (_shape_of(got_out), _shape_of(got_lse)) == (full_lse.shape, full_out.shape):
        raise CheckFailed(f"{case}: the first value returned has shape {tuple(full_lse.shape)} and the second "
                          f"{tuple(full_out.shape)}: those of lse and out.\nHint: the pair is the wrong way round: "
                          "return (out, lse), the output first, as block_attention returns its pair.")
    if not torch.is_tensor(got_out) or got_out.shape != full_out.shape:
        raise CheckFailed(f"{case}: the output is {describe(got_out)}; expected shape {tuple(full_out.shape)}, "
                          "the shape of each partial output.")
    if not torch.is_tensor(got_lse) or got_lse.shape != full_lse.shape:
        raise CheckFailed(f"{case}: the lse is {describe(got_lse)}; expected shape {tuple(full_lse.shape)}, "
                          "one value per query row like each partial lse.")
    for what, got in (("output", got_out), ("lse", got_lse)):
        if got.dtype != full_out.dtype:
            raise CheckFailed(f"{case}: the {what} has dtype {got.dtype}; expected {full_out.dtype}, the dtype of each "
                              f"partial {what}.")
    if not (torch.isfinite(got_out).all() and torch.isfinite(got_lse).all()):
        raise CheckFailed(f"{case}: {_overflow_feedback(parts, got_out, got_lse)}")
    if _close(got_out, full_out) and _close(got_lse, full_lse):
        return
    if len(parts) == 2:
        for out, lse, hint in _combine_hints(parts):
            if _close(got_out, out) and (lse is None or _close(got_lse, lse)):
                raise CheckFailed(f"{case}: {_first_difference(got_out, got_lse, full_out, full_lse)}.\nHint: {hint}.")
    elif _close(got_out, _fold_with_max_lse(parts)):
        raise CheckFailed(f"{case}: {_first_difference(got_out, got_lse, full_out, full_lse)}.\nHint: two blocks "
                          "combine right, but the lse you return is not log(exp(lse_a) + exp(lse_b)), so the third "
                          "block is weighed against the wrong total: return lse = torch.logaddexp(lse_a, lse_b).")
    raise CheckFailed(f"{case}: {_first_difference(got_out, got_lse, full_out, full_lse)}.\nHint: out = "
                      "exp(lse_a - lse) * out_a + exp(lse_b - lse) * out_b with lse = log(exp(lse_a) + exp(lse_b)), "
                      "the weights broadcast over each row's d features.")


def _shape_of(value):
    """A tensor's shape, else None."""
    return value.shape if torch.is_tensor(value) else None


def _overflow_feedback(parts, got_out, got_lse) -> str:
    """Which rows hold inf or nan, and the overflow that gives exactly those rows (two blocks), as feedback."""
    bad = ~(torch.isfinite(got_out).all(dim=-1) & torch.isfinite(got_lse))
    rows = int(bad.sum())
    said = f"the result holds inf or nan in {rows} of its {bad.numel()} query rows"
    safe = ("subtract the larger of the two first, so that no exponent is positive: lse = torch.logaddexp(lse_a, "
            "lse_b), then exp(lse_a - lse) and exp(lse_b - lse)")
    if len(parts) == 2:
        (_, lse_a), (_, lse_b) = parts
        for high, low in (("lse_b", "lse_a"), ("lse_a", "lse_b")):
            ahead = _overflows(lse_b - lse_a) if high == "lse_b" else _overflows(lse_a - lse_b)
            if bool(ahead.any()) and torch.equal(bad, ahead):
                return (f"{said}: exactly those where {high} exceeds {low} by more than 88.7, where "
                        f"exp({high} - {low}) overflows float32.\nHint: your combine is safe only where {low} >= "
                        f"{high} (as in log1p(exp({high} - {low}))); {safe}.")
        alone = _overflows(lse_a) | _overflows(lse_b)
        if torch.equal(bad, alone):
            return (f"{said}: exactly those where an lse is above 88.7, where exp(lse) overflows float32.\nHint: never "
                    f"exponentiate an lse on its own; {safe}.")
    return (f"{said}: an exponent overflowed float32 (above 88.7), or both of a row's weights underflowed to 0 (one "
            "maximum for the whole tensor instead of each row's own).\nHint: work row by row: lse = "
            "torch.logaddexp(lse_a, lse_b), each row's own total, then exp(lse_a - lse) and exp(lse_b - lse), which "
            "are at most 1 and never both 0.")


def _fold_with_max_lse(parts) -> torch.Tensor:
    out, lse = parts[0]
    for out_b, lse_b in parts[1:]:
        out, _ = combine(out, lse, out_b, lse_b)
        lse = torch.maximum(lse, lse_b)
    return out


def _first_difference(got_out, got_lse, full_out, full_lse) -> str:
    index = first_mismatch(got_out, full_out, atol=1e-5, rtol=1e-4)
    if index is not None:
        return (f"out{_where(index)} is {got_out[index].item():.5g}, expected {full_out[index].item():.5g} "
                "(attention over all keys at once)")
    index = first_mismatch(got_lse, full_lse, atol=1e-5, rtol=1e-4)
    return f"lse{_where(index)} is {got_lse[index].item():.5g}, expected {full_lse[index].item():.5g}"


# --- ring_attention --------------------------------------------------------------------------

def _ring_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(153)
    return tuple(torch.randn(BATCH, HEADS, RING_SIZE * ROWS, DIM, generator=generator) for _ in range(3))


def _counting_sends(sent: list):
    """Inside a rank: record (values, bytes, dst, the tensor's data_ptr) of every dist.send / dist.isend (a send that
    calls isend counts once). Values are what the ring is judged by, so that a ring sending float64 is as right as
    one sending float32."""
    inside = []

    def make(original):
        def call(*args, **kwargs):
            tensor = args[0] if args else kwargs.get("tensor")
            dst = args[1] if len(args) > 1 else kwargs.get("dst")
            if not inside and torch.is_tensor(tensor):
                sent.append((tensor.numel(), tensor.numel() * tensor.element_size(), dst, tensor.data_ptr()))
            inside.append(True)
            try:
                return original(*args, **kwargs)
            finally:
                inside.pop()
        return call

    return replacing_dist_calls({"send": make, "isend": make})


@contextlib.contextmanager
def _watching_buffers_in_flight(clashes: list):
    """Inside a rank: note in `clashes` (the first time) an isend or irecv made on a tensor whose bytes overlap those
    of an earlier irecv or isend still in flight (its request not yet waited for) used the other way: a receive into
    what is being sent, or a send of what is being received (their bytes: p2p_log.memory_span, as lesson 02's check
    compares them). Which bytes go out is then a matter of timing. Halves of one buffer, one sent and one received
    into, do not overlap."""
    in_flight: dict[int, tuple[str, tuple[int, int]]] = {}    # the watched call's number -> (op, its bytes)
    count = [0]

    def watch(op, tensor, peer):
        count[0] += 1                              # numbered as watching_point_to_point numbers them
        span = memory_span(tensor)
        if op not in ("isend", "irecv") or span is None:
            return
        other = next((earlier for earlier, (start, end) in in_flight.values()
                      if earlier != op and start < span[1] and span[0] < end), None)
        if other is not None and not clashes:
            clashes.append((other, op))
        in_flight[count[0]] = (op, span)

    with watching_point_to_point(watch, lambda number: in_flight.pop(number, None)):
        yield


def _ring_runner(rank: int, ring_attention, log_directory: str | None = None) -> dict:
    """Run the answer on this rank; with `log_directory`, its sends and receives are logged to a file there
    (`p2p_log.logging_point_to_point`), which the check reads back after a hang or a crash."""
    world_size = dist.get_world_size()
    q, k, v = (t.chunk(world_size, dim=-2)[rank].clone() for t in _ring_inputs())
    case = (f"running on rank {rank} of {world_size} with q, k, v of shape {tuple(q.shape)} "
            "(this rank's contiguous block of the sequence)")
    sent: list = []
    clashes: list = []
    out = None
    logged = (logging_point_to_point(log_path(log_directory, rank)) if log_directory is not None
              else contextlib.nullcontext())
    with torch.no_grad(), only_point_to_point(), logged, _counting_sends(sent), \
            _watching_buffers_in_flight(clashes), watching_calls(RING_ANSWERS) as called:
        out = call_case(ring_attention, case, q, k, v)
    steps = sorted({(dst - rank) % world_size for _, _, dst, _ in sent if isinstance(dst, int)})
    return {"out": out.detach().clone() if torch.is_tensor(out) else out, "sent": sum(n for n, _, _, _ in sent),
            "sent_bytes": sum(size for _, size, _, _ in sent), "steps": steps, "called": list(called),
            "sent_q": any(pointer == q.data_ptr() for _, _, _, pointer in sent),
            "clash": clashes[0] if clashes else None}


def _simulated(rank: int, believed_source, attends, masks, direction: int = +1, steps: int = RING_SIZE,
               zero_start: bool = False) -> torch.Tensor:
    """Rank `rank`'s output when it takes the block held at step t for rank believed_source(rank, t)'s, over `steps`
    steps (one too few leaves out the block that arrived last), from no partial result or, `zero_start`, from
    out = 0 and lse = 0 (a block of weight e^0 in every denominator).

    The block really held at step t started on rank (rank - t) mod N (blocks sent to rank + 1; direction -1:
    to rank - 1, so rank (rank + t) mod N; direction 0: the received blocks never used, so the rank's own at every
    step); attends(rank, source) and masks(rank, source) are the answer's rules
    for which blocks to use and where to put the triangle.
    """
    q, k, v = (t.chunk(RING_SIZE, dim=-2) for t in _ring_inputs())
    state = (torch.zeros_like(q[rank]), torch.zeros(q[rank].shape[:-1])) if zero_start else None
    for step in range(steps):
        held, source = (rank - direction * step) % RING_SIZE, believed_source(rank, step)
        if attends(rank, source):
            partial = block_attention(q[rank], k[held], v[held], causal=masks(rank, source))
            state = partial if state is None else combine(*state, *partial)
    return state[0] if state is not None else torch.zeros_like(q[rank])


def _ring_mistakes() -> list:
    came_from = lambda rank, step: (rank - step) % RING_SIZE          # noqa: E731 (a rule table)
    off_by_one = lambda rank, step: (rank + step) % RING_SIZE         # noqa: E731
    return [
        ((came_from, lambda r, s: True, lambda r, s: r == s, {}),
         "keys from later ranks were attended to: with a causal mask a block from a rank after yours (source > "
         "rank) lies wholly in the future of your queries, so skip it (where the ring wraps around, rank - t is "
         "negative: take the source as (rank - t) % world_size, or a later rank's block passes a source <= rank "
         "test)"),
        ((came_from, lambda r, s: s <= r, lambda r, s: True, {}),
         "the causal triangle was applied to every block: it belongs only on the diagonal block (your own, source "
         "== rank); every key of an earlier rank's block is in the past of all your queries"),
        ((came_from, lambda r, s: True, lambda r, s: True, {}),
         "the causal triangle was applied to every block, and no block was skipped: mask only your own block "
         "(source == rank), attend fully to earlier ranks' blocks, skip later ones"),
        ((came_from, lambda r, s: s <= r, lambda r, s: False, {}),
         "your own block was attended to without the causal triangle: on the diagonal block, query i may see key "
         "j only for j <= i (block_attention(..., causal=True))"),
        ((came_from, lambda r, s: True, lambda r, s: False, {}),
         "no causal mask at all: this is bidirectional attention; skip later ranks' blocks and mask your own"),
        ((off_by_one, lambda r, s: s <= r, lambda r, s: r == s, {}),
         f"the block you hold at step t was taken to come from rank (rank + t) mod {RING_SIZE}: blocks travel to "
         "rank + 1, so at step t you hold the keys that started on rank (rank - t) mod world_size"),
        ((came_from, lambda r, s: s == r, lambda r, s: True, {}),
         "only your own block was attended to: the other ranks' keys and values never reached your queries; "
         "pass them around the ring for world_size - 1 steps"),
        ((came_from, lambda r, s: s >= r, lambda r, s: r == s, {}),
         "the blocks of ranks after yours were attended to and those before yours skipped: the test is the wrong "
         "way round. With a causal mask every key of an earlier rank's block (source < rank) is in the past of your "
         "queries, every key of a later one in their future: attend when source <= rank"),
        ((came_from, lambda r, s: s <= r, lambda r, s: r == s, {"steps": RING_SIZE - 1}),
         f"the block that arrived at the last step was never attended to: a ring of {RING_SIZE} makes "
         f"{RING_SIZE - 1} hops but attends at {RING_SIZE} steps, your own block first and then each block that "
         "arrives; the loop runs world_size steps and sends at all but the last"),
        ((came_from, lambda r, s: s <= r, lambda r, s: r == s, {"zero_start": True}),
         "the running result started as out = 0 with lse = 0, and combine counts that as a block of weight "
         "exp(0) = 1 in every row's denominator: start from the first partial result (or from lse = -inf)"),
    ]


WRAP_AROUND = ("wrap it around, send to (rank + 1) % world_size and receive from (rank - 1) % world_size")


def _explain_ring(failure) -> str | None:
    """A rank that crashed inside isend/irecv: gloo can segfault on a peer outside the group (p2p_log.crashed_in),
    and aborts a rank whose receive buffer is smaller than the message that arrives (its own words in the output)."""
    call = crashed_in(failure)
    if call:
        return f"the rank crashed inside dist.{call}: a peer there is no rank of the ring; {WRAP_AROUND}."
    sizes = gloo_size_abort(failure.details) if failure.kind == "crashed" else None
    if sizes:
        arrived, room = sizes
        return (f"gloo aborted the rank because a message of {arrived} bytes arrived in a receive buffer of "
                f"{room}: receive into a buffer of the shape and dtype of the tensor its peer sends, "
                "torch.empty_like(k) for a block of keys.")
    return None


def _read_ring_logs(directory: str) -> dict[int, tuple[list[Call], Call | None]]:
    """{rank: (its sends and receives in order, the isend or irecv whose .wait() its log ends in, or None)} for each
    rank whose log is there (`_ring_runner`'s): a log whose last line is 'waited n' was left by a rank that had
    entered the wait of its call n and made no call after it."""
    logs = {}
    for rank in range(RING_SIZE):
        path = log_path(directory, rank)
        read = read_log(path)
        if read is None:
            continue
        with open(path, encoding="utf-8") as file:
            lines = file.read().split()
        waiting = None
        if len(lines) >= 2 and lines[-2] == "waited" and lines[-1].isdigit() and 0 < int(lines[-1]) <= len(read[0]):
            waiting = read[0][int(lines[-1]) - 1]
        logs[rank] = (read[0], waiting)
    return logs


def _in_wait(rank: int, stack: str, logs: dict) -> str | None:
    """'in .wait() on a dist.irecv' (or without the call, where no log names it) for a stuck rank whose innermost
    frame runs a `.wait(` line, outside any torch.distributed function; else None."""
    if blocked_in(stack) is not None or ".wait(" not in stuck_line(stack):
        return None
    waiting = logs.get(rank, ([], None))[1]
    return f"in .wait() on a dist.{waiting.op}" if waiting is not None else "in .wait()"


def _order_hint(stuck: dict, logs: dict) -> str | None:
    """The hint for a ring whose every rank waits for its own transfer to finish before starting the other one:
    each rank blocked in a receive (dist.recv, or the .wait() of an irecv) having started fewer sends than receives,
    or in the .wait() of the isend it started last, having started more sends than receives. None for any other
    hang (the peers, a transfer too many: `_ring_hang_hint`'s other hints)."""
    if set(stuck) != set(range(RING_SIZE)) or set(logs) != set(stuck):
        return None
    kinds = set()
    for rank, stack in stuck.items():
        transfers, waiting = logs[rank]
        sent = sum(transfer.op in SENDS for transfer in transfers)
        received = sum(transfer.op in RECEIVES for transfer in transfers)
        call = blocked_in(stack)
        if call == "recv" and transfers and transfers[-1].op == "recv" and received > sent:
            kinds.add("recv")
        elif call is None and waiting is not None and waiting.op == "irecv" and received > sent:
            kinds.add("irecv")
        elif call is None and waiting is not None and waiting is transfers[-1] and waiting.op == "isend" \
                and sent > received:
            kinds.add("isend")
        else:
            return None
    if kinds == {"recv"}:
        return ("every rank called a blocking dist.recv first, and a recv waits for the peer's send, which that peer "
                "never reaches because it is receiving too: every rank receives first, so nobody sends. Start the "
                "sends with dist.isend, post the dist.irecv, then .wait() on both.")
    if "isend" not in kinds:
        return ("every rank waits on its dist.irecv (.wait()) before it has started its send, so nobody sends: a "
                "deadlocked ring. Post both the isend and the irecv, then .wait() on both.")
    if kinds == {"isend"}:
        return ("every rank waits on its dist.isend (.wait()) before it has posted its dist.irecv, and a send "
                "completes only once the peer's matching receive is posted, which that peer never reaches because it "
                "waits on its own send: a deadlocked ring. Post both the isend and the irecv, then .wait() on both.")
    return None


def _unequal_counts_hint(stuck: dict, logs: dict) -> str | None:
    """The hint for a ring whose every rank, all stuck, started a number of sends other than its number of receives
    (a receive of v forgotten, a block sent twice); None otherwise."""
    if set(stuck) != set(range(RING_SIZE)) or set(logs) != set(stuck):
        return None
    counts = {rank: (sum(t.op in SENDS for t in logs[rank][0]), sum(t.op in RECEIVES for t in logs[rank][0]))
              for rank in stuck}
    if any(sent == received for sent, received in counts.values()):
        return None
    said = "; ".join(f"rank {rank}: {_count(sent, 'send')}, {_count(received, 'receive')}"
                     for rank, (sent, received) in counts.items())
    return (f"every rank started a number of sends other than its number of receives ({said}), so a transfer waits "
            "for a partner that never comes: every send needs a matching receive on the peer, as many receives as "
            "sends (one each for k and v at every step).")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _ring_hang_hint(error, logs: dict | None = None) -> str:
    """The hint for a ring that hung (`error`: the LaunchTimeout), from where each rank is stuck and, where they are
    there, the sends and receives each rank logged (`_read_ring_logs`)."""
    stuck = {rank: failure.details for rank, failure in error.failures.items() if failure.kind == "timeout"}
    calls = {blocked_in(stack) for stack in stuck.values()}
    if calls == {"send"}:
        return ("every rank called a blocking dist.send first, and a send waits for the peer's matching recv, which "
                "that peer never reaches because it is sending too: a deadlocked ring. Start the sends with "
                "dist.isend, post the dist.irecv, then .wait() on both.")
    logs = logs or {}
    order = _order_hint(stuck, logs) or _unequal_counts_hint(stuck, logs)
    if order:
        return order
    if calls & {"isend", "irecv"}:
        call = sorted(calls & {"isend", "irecv"})[0]
        return (f"dist.{call} returns at once when its peer is another rank of the group, so a peer here is no "
                f"rank of the ring: {WRAP_AROUND}.")
    waiting = calls <= {None} and all(".wait(" in stuck_line(stack) for stack in stuck.values())
    if waiting or "recv" in calls:
        where = "in .wait() on an isend/irecv" if waiting else "in dist.recv"
        started = (" or a peer started its send with dist.isend and went on without waiting on it (keep the isend "
                   "handles and .wait() on them too)") if waiting else ""
        return (f"the ranks wait {where} for keys and values that never arrived: a peer never sent them{started}. "
                "Check the peers: every rank sends to (rank + 1) % world_size and receives from (rank - 1) % "
                "world_size, at every step, as many receives as sends.")
    return ("the ranks wait for each other: every send needs a matching receive on the peer, the same number of "
            "times and with the same shape.")


def _hang_message(error, name: str, timeout: float, logs: dict) -> str:
    """timeout_message's text, where a rank it places in .wait() is shown with the call it waits on, where its log
    names it (`_in_wait`)."""
    message = timeout_message(error, name, timeout, _ring_hang_hint(error, logs))
    for rank, failure in error.failures.items():
        where = _in_wait(rank, failure.details, logs) if failure.kind == "timeout" else None
        if where:
            message = re.sub(rf"\brank {rank} in \.wait\(\)", f"rank {rank} {where}", message, count=1)
    return message


def check_ring_attention(ring_attention, timeout: float = 30.0) -> None:
    """Check `ring_attention(q, k, v) -> out` (causal) on a ring of 3 gloo ranks, send/recv only.

    Rank r gets the r-th contiguous block of q, k and v, shape (1, 2, 4, 3): 4 tokens of a
    12-token sequence. Every rank's output must equal its rows of one process's causal
    attention, and each rank must send its key and value blocks world_size - 1 times. A float64 output is
    judged by its values; another dtype is named as it is. A ring taken modulo a number written in the
    code (`% 3`, the check's world size) is refused before any rank starts. Each rank logs its sends and
    receives (`p2p_log`), so a hang says which order of calls deadlocked, and an irecv never waited for is
    refused even where the outputs came out right.

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    ensure_written(ring_attention)
    name = getattr(ring_attention, "__name__", "ring_attention")
    refuse_written_modulus(ring_attention, name, "the world size, dist.get_world_size()")
    with tempfile.TemporaryDirectory(prefix="ring-attention-") as log_directory:
        try:
            results = launch(_ring_runner, args=(ring_attention, log_directory), nprocs=RING_SIZE, backend="gloo",
                             timeout=timeout)
        except LaunchTimeout as error:   # the stuck lines are read here, so not through run_on_ranks
            raise CheckFailed(_hang_message(error, name, timeout, _read_ring_logs(log_directory))) from None
        except LaunchError as error:
            raise CheckFailed(failure_message(error, name, _explain_ring)) from None
        logs = _read_ring_logs(log_directory)
    _judge_ring(name, results, logs)


def _outputs_said(results, expected) -> str:
    """What a run whose transfers were timing-dependent shows: the first rank whose output is wrong, or luck."""
    wrong = next((rank for rank in range(RING_SIZE) if not _close(results[rank]["out"], expected[rank])), None)
    return ("every rank's output came out right in this run, by luck" if wrong is None else
            f"rank {wrong}'s output differs from one process's causal attention")


def _every_rank_as(results, *rule, direction: int = +1, **how) -> bool:
    """Whether every rank returned what `_simulated` gives for it under `rule` (and `how`, its steps or zero start): a
    mistake is named only then."""
    return all(_close(results[rank]["out"], _simulated(rank, *rule, direction=direction, **how))
               for rank in range(RING_SIZE))


def _diagonal_hidden(results) -> bool:
    """Whether the outputs are those of a causal mask that hides the diagonal too (key j masked for j >= i): NaN on
    the rows left without any key (the first row of the sequence; the first row of a rank's own block too, where
    a NaN partial spoils the combine) and nowhere else, attention to the keys before each query elsewhere."""
    q, k, v = _ring_inputs()
    scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    hidden = torch.ones(scores.shape[-2:], dtype=torch.bool).triu()
    strict = (torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1) @ v).chunk(RING_SIZE, dim=-2)
    first_of_sequence = results[0]["out"][..., 0, :]
    if not (torch.is_tensor(first_of_sequence) and bool(first_of_sequence.isnan().all())):
        return False
    for result, want in zip(results, strict):
        got = result["out"]
        if not torch.is_tensor(got) or got.shape != want.shape or bool(got[..., 1:, :].isnan().any()):
            return False
        known = ~got.isnan()
        if bool(want[known].isnan().any()) or not torch.allclose(got[known], want[known], atol=1e-5, rtol=1e-4):
            return False
    return True


def _own_block_hint(results, rank: int) -> str:
    """The hint for a rank that returned None where every other rank returned attention over the earlier ranks'
    blocks only: each rank skipped its own block (`source < rank`), which is rank 0's only one; else ""."""
    if results[rank]["out"] is not None or rank != 0:
        return ""
    came_from = lambda r, step: (r - step) % RING_SIZE                 # noqa: E731
    without_own = [_simulated(r, came_from, lambda r, source: source < r, lambda r, source: False)
                   for r in range(RING_SIZE)]
    if not all(_close(results[r]["out"], without_own[r]) for r in range(1, RING_SIZE)):
        return ""
    return ("\nHint: rank 0 attended to no block, so it had no result to return, and every other rank's output is "
            "attention over the earlier ranks' blocks only: each rank skipped its own block (source < rank), rank "
            "0's only one. Attend to your own block too (source == rank), with the causal triangle "
            "(block_attention(..., causal=True)).")


def _judge_ring(name: str, results, logs: dict | None = None) -> None:
    """Compare what every rank of the ring returned and sent with one process; CheckFailed naming the mistake.
    `logs`: each rank's logged sends and receives (`_read_ring_logs`), where the ring ran with them: an irecv never
    waited for is refused from them whatever the values (whether its block had arrived was a matter of timing)."""
    q, k, v = _ring_inputs()
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True).chunk(RING_SIZE, dim=-2)
    called = next((result["called"] for result in results if result.get("called")), None)
    if called:
        raise package_answer_used(name, called)
    backwards = all(result.get("steps") == [RING_SIZE - 1] for result in results)   # every send went to rank - 1
    results = [dict(result, out=_in_float32(result["out"])) for result in results]
    never_waited = [said for rank, (calls, _) in sorted((logs or {}).items())
                    for said in calls_never_waited(rank, calls, ("irecv",))]
    if never_waited:
        said = _outputs_said(results, expected)
        more = f" (and {len(never_waited) - 1} more)" if len(never_waited) > 1 else ""
        raise CheckFailed(f"{never_waited[0]}{more} was never waited for: {said}.\nHint: dist.irecv returns at "
                          "once, and its buffer holds the keys or values only once the request's .wait() has "
                          "returned, so whether they had arrived when the rank attended to them depends on timing. "
                          "Keep the request each dist.irecv returns and call .wait() on it before using its buffer.")
    clash = next(((rank, result["clash"]) for rank, result in enumerate(results) if result.get("clash")), None)
    if clash is not None:
        rank, (_, later) = clash
        said = _outputs_said(results, expected)
        what = ("an irecv received into the tensor an isend was still sending" if later == "irecv" else
                "an isend sent the tensor an irecv was still receiving into")
        raise CheckFailed(f"rank {rank}: {what} (its request not yet waited for): {said}.\nHint: while a block is "
                          "being sent, the tensor it is sent from must stay as it is: whether the receive overwrote it "
                          "before it went out depends on timing. Receive into a new buffer (torch.empty_like(k)), and "
                          "make it the next step's k only once both requests have finished (a buffer made once and "
                          "reused is the one being sent from the second step on).")
    block = BATCH * HEADS * ROWS * DIM   # values in a key or value block
    want = 2 * (RING_SIZE - 1) * block
    for rank in range(RING_SIZE):
        got = results[rank]["out"]
        if not torch.is_tensor(got) or got.shape != expected[rank].shape:
            raise CheckFailed(f"rank {rank}: {name} returned {describe(got)}; expected this rank's output rows, "
                              f"shape {tuple(expected[rank].shape)} like q." + _own_block_hint(results, rank))
        if got.dtype != expected[rank].dtype:
            raise CheckFailed(f"rank {rank}: the output has dtype {got.dtype}; expected {expected[rank].dtype}, the "
                              "dtype of q, k and v.")
        if _close(got, expected[rank]):
            continue
        index = first_mismatch(got, expected[rank], atol=1e-5, rtol=1e-4)
        where = (f"rank {rank}, out{_where(index)}: got {got[index].item():.5g}, expected "
                 f"{expected[rank][index].item():.5g} (one process's causal attention)")
        if backwards and _every_rank_as(results, lambda r, t: (r - t) % RING_SIZE, lambda r, source: source <= r,
                                        lambda r, source: source == r, direction=-1):
            hint = ("every rank sent its keys and values to rank - 1, so blocks travel the other way round the ring: "
                    "at step t you hold the block of rank (rank + t) % world_size, not (rank - t) as your answer "
                    "takes it. Send to (rank + 1) % world_size and receive from (rank - 1) % world_size")
        elif backwards:
            hint = ("every rank sent its keys and values to rank - 1, so at step t you hold the block of rank "
                    "(rank + t) % world_size (the exercise's ring sends to rank + 1: (rank - t)). Attend to a block "
                    "fully if its rank is before yours, with the causal triangle if it is yours, not at all if after")
        elif _diagonal_hidden(results):
            hint = ("NaN is only in the first query row of your own block, the row that a causal mask hiding the "
                    "diagonal too (key j masked for j >= i) leaves without any key there, and every other value is "
                    "what such a mask gives: softmax over only -inf is 0 / 0, and a NaN partial spoils what it is "
                    "combined with. The diagonal must stay visible, a query attends to itself: mask only the keys "
                    "after the query (torch.triu with diagonal=1), or use block_attention(..., causal=True)")
        elif _every_rank_as(results, lambda r, t: (r - t) % RING_SIZE, lambda r, source: source <= r,
                            lambda r, source: source == r, direction=0):
            hint = ("every rank's output is what its own keys and values give at every step: the blocks that arrived "
                    "were never attended to (k and v still name the rank's own block after the receives). Once a "
                    "step's transfers have finished, take the receive buffers as the k and v of the next step")
        elif bool(got.isnan().any()):
            hint = ("your output holds NaN, which no block of these inputs gives: a receive buffer was most likely "
                    "read before its data arrived (torch.empty_like holds whatever memory it had). Call .wait() on "
                    "each irecv before using its buffer")
        else:
            wrong = [r for r in range(RING_SIZE) if not _close(results[r]["out"], expected[r])]
            hint = next((text for (*rule, how), text in _ring_mistakes() if _every_rank_as(results, *rule, **how)),
                        None)
            if hint is None:
                hint = (f"the outputs of rank{'s' if len(wrong) > 1 else ''} {', '.join(map(str, wrong))} differ "
                        "from one process's. At step t you hold the keys and values of rank (rank - t) mod "
                        "world_size: attend to them fully if that rank is before yours, with the causal triangle if "
                        "it is yours, not at all if it is after; fold each partial result in with combine")
                if results[rank]["sent"] != want:
                    hint += (f"; and rank {rank} sent {results[rank]['sent'] / block:g} blocks of keys and values, "
                             f"where the ring sends {2 * (RING_SIZE - 1)}: k and v, {RING_SIZE - 1} hops")
        raise CheckFailed(f"{where}.\nHint: {hint}.")
    for rank in range(RING_SIZE):
        sent = results[rank]["sent"]
        if sent != want:
            if sent > want and results[rank].get("sent_q"):
                hint = ("the queries went out too (this rank's own q was among what it sent): only the keys and "
                        "values travel; each rank keeps its own queries.")
            elif sent == 2 * RING_SIZE * block:
                hint = "after the last step every rank has seen every block: the last pass is not needed."
            elif sent < want:
                hint = "send both k and v at every step but the last."
            else:
                hint = f"send k and v once at every step but the last, {RING_SIZE - 1} hops."
            raise CheckFailed(
                f"rank {rank} sent {sent} values ({sent / block:g} blocks of {block}); the ring needs {want}: its "
                f"key and value blocks, world_size - 1 = {RING_SIZE - 1} hops each.\nHint: {hint}")
    passed(f"{name}: every rank's causal attention equals one process on a ring of {RING_SIZE}, "
           f"sending {results[0]['sent_bytes']} bytes (k and v, {RING_SIZE - 1} hops)")


# --- zigzag_chunks ---------------------------------------------------------------------------

ZIGZAG_WORLD_SIZES = (2, 3, 4, 8)


def _llama(rank: int, world_size: int) -> list[int]:
    return [rank, 2 * world_size - 1 - rank]


def check_zigzag_chunks(zigzag_chunks) -> None:
    """Check `zigzag_chunks(rank, world_size) -> [early chunk, late chunk]` of 2·world_size chunks, for 2 to 8 ranks.

    Rank r must hold chunks r and 2·world_size - 1 - r, in sequence order (Llama 3's layout),
    so that every rank does the same causal work.

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    ensure_written(zigzag_chunks)
    name = getattr(zigzag_chunks, "__name__", "zigzag_chunks")
    answers = {world_size: _zigzag_answers(zigzag_chunks, name, world_size) for world_size in ZIGZAG_WORLD_SIZES}
    written = _written_mirror(answers)
    for world_size, got in answers.items():
        _judge_zigzag(name, world_size, got, written)
    passed(f"{name}: rank r holds chunks r and 2N - 1 - r of 2N, and every rank does the same causal work "
           "(2, 3, 4 and 8 ranks)")


def _zigzag_answers(zigzag_chunks, name: str, world_size: int) -> dict[int, list[int]]:
    """{rank: the chunk indices the answer gives} for one world size."""
    got = {}
    for rank in range(world_size):
        chunks = None
        try:
            with watching_calls(ZIGZAG_ANSWERS) as called:
                chunks = zigzag_chunks(rank, world_size)
        except Exception as error:
            raise answer_raised(name, error, f"computing {name}({rank}, {world_size})") from None
        if called:
            raise package_answer_used(name, called)
        try:
            got[rank] = [operator.index(c) for c in chunks]   # ints (numpy's and torch's too), never a float
        except TypeError:
            fraction = next((c for c in _items(chunks) if _is_fractional_type(c)), None)
            if fraction is None:
                raise CheckFailed(f"{name}({rank}, {world_size}) returned {describe(chunks)}; expected a list of "
                                  "two chunk indices.") from None
            value = float(fraction)
            kind = "a float" if value.is_integer() else "not a whole number"
            raise CheckFailed(f"{name}({rank}, {world_size}) returned {describe(chunks)}: chunk index {value!r} is "
                              f"{kind}; expected two int chunk indices, 0 to {2 * world_size - 1}.\nHint: the chunks "
                              "are numbered by ints, which index a list of them: / always returns a float (// divides "
                              "whole numbers), and so does arithmetic with a float such as 2.0.") from None
    return got


def _items(chunks) -> list:
    """The items of what zigzag_chunks returned, [] if it is not iterable."""
    try:
        return list(chunks)
    except TypeError:
        return []


def _is_fractional_type(value) -> bool:
    """A float (Python's, numpy's) or a one-value floating torch tensor: a number an index refuses."""
    if torch.is_tensor(value):
        return value.numel() == 1 and value.is_floating_point()
    return isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral)


def _written_mirror(answers: dict[int, dict[int, list[int]]]) -> int | None:
    """K where every world size's answer is rank r -> [r, K - r] with the same K, and K is the last chunk of one of
    the world sizes tried (2N - 1): a chunk count written as a number (e.g. 7 - r, right for 4 ranks only); None
    otherwise (-1 - r, a negative index, is no count of any of them)."""
    mirrors = {pair[1] + rank if len(pair) == 2 and pair[0] == rank else None
               for got in answers.values() for rank, pair in got.items()}
    mirror = mirrors.pop() if len(mirrors) == 1 else None
    return mirror if mirror in {2 * world_size - 1 for world_size in answers} else None


def _judge_zigzag(name: str, world_size: int, got: dict, written: int | None = None) -> None:
    """CheckFailed naming the mistake of one world size's answer; `written`: the K of `_written_mirror`."""
    chunks, want = 2 * world_size, {rank: _llama(rank, world_size) for rank in range(world_size)}
    if got == want:
        return
    table = ", ".join(f"rank {rank}: {got[rank]}" for rank in range(world_size))
    head = f"{world_size} ranks ({chunks} chunks): got {table}; expected " + \
        ", ".join(f"rank {rank}: {want[rank]}" for rank in range(world_size))
    if any(len(c) != 2 for c in got.values()):
        raise CheckFailed(f"{head}.\nHint: every rank holds exactly two chunks, one early and one late.")
    if written is not None and written != chunks - 1:
        tried = ", ".join(map(str, ZIGZAG_WORLD_SIZES[:-1])) + f" and {ZIGZAG_WORLD_SIZES[-1]}"
        raise CheckFailed(f"{head}.\nHint: your late chunk is {written} - r at every world size tried ({tried} "
                          f"ranks), a count written for one of them: the sequence is cut into two chunks per rank, "
                          f"so how many chunks there are, and the mirror of chunk r, follow the world size (here "
                          f"{chunks} chunks, 0 to {chunks - 1}).")
    every = sorted(c for pair in got.values() for c in pair)
    if every != list(range(chunks)):
        outside = sorted({c for c in every if not 0 <= c < chunks})
        off_by_one = all(pair == [rank, chunks - rank] for rank, pair in got.items())
        hint = (f"chunks are numbered 0 to {chunks - 1}: the mirror of chunk r is {chunks - 1} - r, not {chunks} - r"
                if outside and off_by_one else
                f"chunks are numbered 0 to {chunks - 1}, and {' and '.join(map(str, outside))} "
                f"{'is' if len(outside) == 1 else 'are'} outside that range" if outside else
                "every chunk must be held by exactly one rank: some are held twice, others by nobody")
        raise CheckFailed(f"{head}.\nHint: {hint}.")
    if all(sorted(got[rank]) == want[rank] for rank in got):
        raise CheckFailed(f"{head}.\nHint: the right chunks, but not in sequence order: list the early chunk first, "
                          "so the rank's tokens stay in the order they have in the sequence.")
    work = [_work(got[rank], world_size) for rank in range(world_size)]
    if len(set(work)) > 1:
        shape = ("contiguous pairs" if all(got[r] == [2 * r, 2 * r + 1] for r in got) else
                 f"chunk r paired with chunk r + {world_size}" if all(got[r] == [r, r + world_size] for r in got)
                 else "this pairing")
        raise CheckFailed(f"{head}.\nHint: with {shape} the causal work per rank is {work} score entries (chunks of "
                          "one token): unbalanced. Pair an early chunk with its mirror from "
                          f"the end, r with {chunks - 1} - r, so the two add up to the same work on every rank.")
    if all(got[rank] == want[world_size - 1 - rank] for rank in got):
        raise CheckFailed(f"{head}.\nHint: balanced, but the pairing is reversed: rank 0 holds the first and the "
                          f"last chunk (0 and {chunks - 1}), rank r holds r and {chunks - 1} - r, as in Llama 3.")
    # balanced: every rank holds a chunk and its mirror (work per rank is equal only then), some another rank's pair
    elsewhere = "; ".join(f"rank {rank} holds its own pair late chunk first, {got[rank]}"
                          if sorted(got[rank]) == want[rank] else
                          f"rank {rank} holds {got[rank]}, the pair of rank {min(got[rank])}"
                          for rank in got if got[rank] != want[rank])
    raise CheckFailed(f"{head}.\nHint: balanced (each rank holds a chunk and its mirror), but not its own pair: "
                      f"{elsewhere}. Rank r holds chunks r and {chunks - 1} - r.")


def _work(pair: list[int], world_size: int) -> int:
    """Causal score entries of a rank holding `pair`, with chunks of one token."""
    return sum(block_entries(mine, key, 1) for mine in pair for key in range(2 * world_size))

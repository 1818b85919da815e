"""The lesson 15 checks reject plausible wrong answers with feedback that names the mistake, and only it.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part of the
feedback that names it, and that no other mistake's hint appears. The combine and zig-zag checks
run in this process (milliseconds). The ring's mistaken answers, and right ones returned in another
dtype, run in one launch of 3 gloo ranks (the check's own runner, then its judge); the six hanging
rings (and one that gloo aborts) go through the check itself and each runs into a 2 s timeout, counted
from when every rank entered the answer (a deadlock sets in within milliseconds of that; about 20 s for
the module on 2 busy cores: a hang can only be proven by waiting for it). The right answers' ✓ is
proven by nbval of solutions/15-long-sequences.ipynb, so it is not run again here; two more rings go
through the check because it reads their logged calls: one that never waits on its receives and one
of batched transfers (dist.batch_isend_irecv), right in another style.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.distributed as dist

from ddp_lab.checks import CheckFailed, lesson15
from ddp_lab.checks.lesson15 import RING_SIZE, _judge_ring, _ring_runner, check_combine, check_ring_attention, check_zigzag_chunks
from ddp_lab.course.context_parallel.online_softmax import block_attention, combine
from ddp_lab.launcher.launch import launch

DEADLOCK_TIMEOUT = 2.0  # seconds after every rank entered the answer (start-up has its own allowance)
COMBINE_HINTS = ("added as they are", "averaged", "weights are swapped", "is the larger of the two",
                 "lse were added", "never exponentiate an lse on its own", "safe only where lse_a >= lse_b",
                 "safe only where lse_b >= lse_a", "unsqueeze(-1)", "the third block", "the package's own answer",
                 "the pair is the wrong way round", "return torch tensors", "lacks the maximum m",
                 "lse returned is lse_a unchanged", "the weights made from it", "the weights are upside down",
                 "out_b was added without its weight")
RING_HINTS = ("later ranks were attended", "applied to every block: it belongs", "and no block was skipped",
              "without the causal triangle", "no causal mask at all", "(rank + t) mod", "never reached your queries",
              "last pass is not needed", "travel the other way round the ring", "the package's own answer",
              "the outputs of ranks 0, 1 differ from one process's", "the queries went out too",
              "diagonal must stay visible, a query attends to itself", "read before its data arrived",
              "rank 0 attended to no block", "the blocks that arrived were never attended to", "was never waited for",
              "the test is the wrong way round", "the block that arrived at the last step", "started as out = 0",
              "received into the tensor an isend was still sending", "blocks of keys and values, where the ring",
              "sent the tensor an irecv was still receiving into")
ZIGZAG_HINTS = ("not in sequence order", "unbalanced", "pairing is reversed", "numbered 0 to",
                "at every world size tried", "held by exactly one rank", "the package's own answer",
                "not its own pair: rank 1 holds [2, 3], the pair of rank 2; rank 2 holds [1, 4], the pair of rank 1")


def _raises_only(check, answer, hints: tuple, expected: str, **kwargs) -> None:
    """The check fails with `expected` in its message, and with no other mistake's hint."""
    with pytest.raises(CheckFailed) as failure:
        check(answer, **kwargs)
    message = str(failure.value)
    assert expected in message, message
    others = [hint for hint in hints if hint != expected and hint in message]
    assert not others, f"other hints fired too: {others}\n{message}"


# --- combine ---------------------------------------------------------------------------------

def combine_right(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse).unsqueeze(-1) * out_a + torch.exp(lse_b - lse).unsqueeze(-1) * out_b, lse


def combine_unscaled(out_a, lse_a, out_b, lse_b):
    return out_a + out_b, torch.logaddexp(lse_a, lse_b)


def combine_averaged(out_a, lse_a, out_b, lse_b):
    return (out_a + out_b) / 2, torch.logaddexp(lse_a, lse_b)


def combine_swapped(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_b - lse).unsqueeze(-1) * out_a + torch.exp(lse_a - lse).unsqueeze(-1) * out_b, lse


def combine_without_the_max(out_a, lse_a, out_b, lse_b):
    total = torch.exp(lse_a) + torch.exp(lse_b)   # no running max subtracted: overflows for large scores
    out = (torch.exp(lse_a).unsqueeze(-1) * out_a + torch.exp(lse_b).unsqueeze(-1) * out_b) / total.unsqueeze(-1)
    return out, torch.log(total)


def combine_max_lse(out_a, lse_a, out_b, lse_b):
    out, _ = combine_right(out_a, lse_a, out_b, lse_b)
    return out, torch.maximum(lse_a, lse_b)


def combine_added_lse(out_a, lse_a, out_b, lse_b):
    out, _ = combine_right(out_a, lse_a, out_b, lse_b)
    return out, lse_a + lse_b


def combine_no_unsqueeze(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse) * out_a + torch.exp(lse_b - lse) * out_b, lse


def combine_log1p_safe_for_a(out_a, lse_a, out_b, lse_b):
    lse = lse_a + torch.log1p(torch.exp(lse_b - lse_a))   # overflows where lse_b - lse_a > 88.7
    return torch.exp(lse_a - lse).unsqueeze(-1) * out_a + torch.exp(lse_b - lse).unsqueeze(-1) * out_b, lse


def combine_log1p_safe_for_b(out_a, lse_a, out_b, lse_b):
    lse = lse_b + torch.log1p(torch.exp(lse_a - lse_b))   # overflows where lse_a - lse_b > 88.7
    return torch.exp(lse_a - lse).unsqueeze(-1) * out_a + torch.exp(lse_b - lse).unsqueeze(-1) * out_b, lse


def combine_logsumexp_over_heads(out_a, lse_a, out_b, lse_b):
    lse = torch.stack([lse_a, lse_b]).logsumexp(dim=-1)   # over the rows, not the two blocks: shape (2, 2, 3)
    return torch.exp(lse_a - lse).unsqueeze(-1) * out_a + torch.exp(lse_b - lse).unsqueeze(-1) * out_b, lse


def combine_with_one_maximum(out_a, lse_a, out_b, lse_b):
    m = max(lse_a.max(), lse_b.max())   # the max subtracted, but one for the whole tensor, not each row's
    ea, eb = torch.exp(lse_a - m), torch.exp(lse_b - m)
    total = ea + eb
    return (ea.unsqueeze(-1) * out_a + eb.unsqueeze(-1) * out_b) / total.unsqueeze(-1), m + torch.log(total)


def combine_lse_without_its_maximum(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    ea, eb = torch.exp(lse_a - m), torch.exp(lse_b - m)
    total = ea + eb
    return (ea.unsqueeze(-1) * out_a + eb.unsqueeze(-1) * out_b) / total.unsqueeze(-1), torch.log(total)   # no m +


def combine_in_float64(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a.double(), lse_b.double())     # right values, returned in float64
    return torch.exp(lse_a - lse).unsqueeze(-1) * out_a.double() + torch.exp(lse_b - lse).unsqueeze(-1) * out_b, lse


def combine_in_half(out_a, lse_a, out_b, lse_b):
    out, lse = combine_right(out_a, lse_a, out_b, lse_b)
    return out.half(), lse


def combine_the_packages(out_a, lse_a, out_b, lse_b):
    return combine(out_a, lse_a, out_b, lse_b)


def combine_pair_reversed(out_a, lse_a, out_b, lse_b):
    out, lse = combine_right(out_a, lse_a, out_b, lse_b)
    return lse, out


def combine_in_numpy(out_a, lse_a, out_b, lse_b):
    out, lse = combine_right(out_a, lse_a, out_b, lse_b)
    return out.numpy(), lse.numpy()


def combine_returns_lse_a(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse).unsqueeze(-1) * out_a + torch.exp(lse_b - lse).unsqueeze(-1) * out_b, lse_a


def combine_weighs_by_the_max(out_a, lse_a, out_b, lse_b):
    lse = torch.maximum(lse_a, lse_b)              # "stable": the larger lse as the total, in the weights too
    return torch.exp(lse_a - lse).unsqueeze(-1) * out_a + torch.exp(lse_b - lse).unsqueeze(-1) * out_b, lse


def combine_weights_upside_down(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse - lse_a).unsqueeze(-1) * out_a + torch.exp(lse - lse_b).unsqueeze(-1) * out_b, lse


def combine_new_block_unweighted(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse).unsqueeze(-1) * out_a + out_b, lse      # only the running result rescaled


def combine_stub(out_a, lse_a, out_b, lse_b):
    raise NotImplementedError("weigh each output by its share")


@pytest.mark.parametrize("answer, expected", [
    (combine_unscaled, "added as they are"),
    (combine_averaged, "averaged"),
    (combine_swapped, "weights are swapped"),
    (combine_without_the_max, "never exponentiate an lse on its own"),
    (combine_log1p_safe_for_a, "safe only where lse_a >= lse_b"),
    (combine_log1p_safe_for_b, "safe only where lse_b >= lse_a"),
    (combine_max_lse, "is the larger of the two"),
    (combine_added_lse, "lse were added"),
    (combine_lse_without_its_maximum, "lacks the maximum m"),
    (combine_no_unsqueeze, "unsqueeze(-1)"),
    (combine_the_packages, "the package's own answer"),
    # no exponent is positive here: the rows whose weights both underflow are 0/0; said as it is, no overflow claimed
    (combine_with_one_maximum, "or both of a row's weights underflowed to 0 (one maximum for the whole tensor"),
    (combine_pair_reversed, "the pair is the wrong way round"),
    (combine_in_numpy, "return torch tensors"),
    (combine_returns_lse_a, "lse returned is lse_a unchanged"),
    (combine_weighs_by_the_max, "the weights made from it"),
    (combine_weights_upside_down, "the weights are upside down"),
    (combine_new_block_unweighted, "out_b was added without its weight"),
])
def test_combine_names_each_mistake_and_only_it(answer, expected):
    _raises_only(check_combine, answer, COMBINE_HINTS, expected)


def test_combine_shows_an_error_in_the_learners_code_without_a_borrowed_hint():
    # a size mismatch that is not a (rows,) weight meeting (rows, d) outputs: no unsqueeze hint, the learner's line
    with pytest.raises(CheckFailed) as failure:
        check_combine(combine_logsumexp_over_heads)
    message = str(failure.value)
    assert message.startswith("combine_logsumexp_over_heads raised RuntimeError: The size of tensor a (5) must match "
                              "the size of tensor b (3)"), message
    assert "torch.exp(lse_a - lse).unsqueeze(-1) * out_a" in message and "Hint" not in message, message


def test_combine_describes_a_reversed_pair_and_numpy_arrays_by_their_shapes():
    with pytest.raises(CheckFailed, match=r"^combining two partial results with small scores: the first value returned "
                                          r"has shape \(2, 3, 5\) and the second \(2, 3, 5, 4\): those of lse and out"):
        check_combine(combine_pair_reversed)
    with pytest.raises(CheckFailed) as failure:
        check_combine(combine_in_numpy)
    message = str(failure.value)
    assert message.startswith("combining two partial results with small scores: the output is a numpy.ndarray of "
                              "shape (2, 3, 5, 4) and dtype float32, not a torch tensor."), message
    assert "array(" not in message, message


def test_combine_judges_the_values_of_a_float64_result_and_names_another_dtype(capsys):
    check_combine(combine_in_float64)
    assert "✓ combine_in_float64" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match=r"^combining two partial results with small scores: the output has dtype "
                                          r"torch.float16; expected torch.float32, the dtype of each partial output"):
        check_combine(combine_in_half)


def test_combine_stub_says_not_written():
    with pytest.raises(CheckFailed, match=r"combine_stub is not written yet.*weigh each output"):
        check_combine(combine_stub)


# --- ring_attention --------------------------------------------------------------------------

def make_ring(*, skip_future=True, mask=lambda rank, source: rank == source, source_of=None, blocking=False,
              passes=None, send_to=+1, recv_from=-1, steps=None, wrap=True, package=False, dtype=None,
              traffic=None, send_q=False, hide_diagonal=False, skip_own=False, order=None, half_buffer=False,
              keep_own=False, receives_waited=True, attends=None, zero_start=False, buffers_made_once=False,
              sends_what_it_receives=False):
    """A ring attention answer with one mistake switched on (the defaults give the right answer). `dtype`: the
    output returned in that dtype. `traffic`: q, k and v cast to that dtype first (what travels), the output cast
    back to float32. `send_q`: q sent round the ring with k and v (never used: each rank keeps its own).
    `hide_diagonal`: the own block attended with a mask of its own that hides the diagonal too (j >= i).
    `skip_own`: only earlier ranks' blocks attended (source < rank), so rank 0 attends none and returns None.
    `order`: each transfer finished before the next starts, "recv first" (blocking recv, then send), "irecv first"
    (irecv and its .wait(), then isend), "isend first" (`dist.isend(...).wait()`, then irecv): all deadlock.
    `half_buffer`: receive buffers of one head (half a block): gloo aborts the rank. `keep_own`: the received blocks
    never taken as k and v (the rank's own at every step). `receives_waited=False`: the sends waited for, the
    irecvs never (their requests kept, so that none is freed early). `attends(rank, source)`: which blocks are
    attended, in place of the causal rule. `zero_start`: the running result starts as out = 0, lse = 0.
    `buffers_made_once`: the receive buffers made once before the loop, so from the second step on k is the buffer
    received into while it is sent. `sends_what_it_receives`: the receives posted first, into k and v themselves,
    then k and v sent while they arrive."""

    def ring_attention(q, k, v):
        if traffic is not None:
            q, k, v = q.to(traffic), k.to(traffic), v.to(traffic)
        if package:
            from ddp_lab.course.context_parallel.ring import ring_attention as packaged
            return packaged(q, k, v)
        rank, world_size = dist.get_rank(), dist.get_world_size()
        state, never_waited = None, []
        if zero_start:
            state = (torch.zeros_like(q), torch.zeros(q.shape[:-1]))
        made_once = (torch.empty_like(k), torch.empty_like(v))
        for step in range(world_size if steps is None else steps):
            source = (rank - step) % world_size if source_of is None else source_of(rank, step, world_size)
            if attends is not None:
                attended = attends(rank, source)
            else:
                attended = (source < rank if skip_own else source <= rank) or not skip_future
            if attended:
                partial = (_block_hiding_the_diagonal(q, k, v) if hide_diagonal and source == rank else
                           block_attention(q, k, v, causal=mask(rank, source)))
                state = partial if state is None else combine(*state, *partial)
            if step < (world_size - 1 if passes is None else passes):
                received_k, received_v = made_once if buffers_made_once else (torch.empty_like(k), torch.empty_like(v))
                if sends_what_it_receives:
                    k, v = k.clone(), v.clone()
                    works = [dist.irecv(k, src=(rank - 1) % world_size), dist.irecv(v, src=(rank - 1) % world_size),
                             dist.isend(k, dst=(rank + 1) % world_size), dist.isend(v, dst=(rank + 1) % world_size)]
                    for work in works:
                        work.wait()
                    continue
                if half_buffer:
                    received_k, received_v = torch.empty_like(k[:, :1]), torch.empty_like(v[:, :1])
                peers = (rank + 1) % world_size, (rank - 1) % world_size
                if order == "recv first":
                    dist.recv(received_k, src=peers[1])
                    dist.recv(received_v, src=peers[1])
                    dist.send(k, dst=peers[0])
                    dist.send(v, dst=peers[0])
                elif order == "irecv first":
                    receives = [dist.irecv(received_k, src=peers[1]), dist.irecv(received_v, src=peers[1])]
                    for work in receives:
                        work.wait()
                    for work in [dist.isend(k, dst=peers[0]), dist.isend(v, dst=peers[0])]:
                        work.wait()
                elif order == "isend first":
                    dist.isend(k, dst=peers[0]).wait()
                    dist.isend(v, dst=peers[0]).wait()
                    dist.irecv(received_k, src=peers[1]).wait()
                    dist.irecv(received_v, src=peers[1]).wait()
                elif blocking:
                    dist.send(k, dst=(rank + 1) % world_size)
                    dist.send(v, dst=(rank + 1) % world_size)
                    dist.recv(received_k, src=(rank + recv_from) % world_size)
                    dist.recv(received_v, src=(rank + recv_from) % world_size)
                else:
                    size = world_size if wrap else world_size + 1   # no wrap: rank + 1 past the last rank
                    works = [dist.isend(k, dst=(rank + send_to) % size), dist.isend(v, dst=(rank + send_to) % size),
                             dist.irecv(received_k, src=(rank + recv_from) % size),
                             dist.irecv(received_v, src=(rank + recv_from) % size)]
                    if send_q:
                        works += [dist.isend(q, dst=(rank + 1) % size), dist.irecv(torch.empty_like(q),
                                                                                 src=(rank - 1) % size)]
                    if not receives_waited:
                        works, never_waited = works[:2], never_waited + works[2:]
                    for work in works:
                        work.wait()
                if not keep_own:
                    k, v = received_k, received_v
        if state is None:
            return None
        out = state[0] if traffic is None else state[0].float()
        return out if dtype is None else out.to(dtype)

    return ring_attention


def _block_hiding_the_diagonal(q, k, v):
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    hidden = torch.ones(scores.shape[-2:], dtype=torch.bool).triu()   # diagonal=0: key i hidden from query i too
    scores = scores.masked_fill(hidden, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v, torch.logsumexp(scores, dim=-1)


RING_MISTAKES = [
    (dict(skip_future=False), "later ranks were attended"),
    (dict(mask=lambda rank, source: True), "applied to every block: it belongs"),
    (dict(skip_future=False, mask=lambda rank, source: True), "and no block was skipped"),
    (dict(mask=lambda rank, source: False), "without the causal triangle"),
    (dict(skip_future=False, mask=lambda rank, source: False), "no causal mask at all"),
    (dict(source_of=lambda rank, step, world_size: (rank + step) % world_size), "(rank + t) mod"),
    (dict(steps=1), "never reached your queries"),
    (dict(passes=3), "last pass is not needed"),
    (dict(send_to=-1, recv_from=+1), "travel the other way round the ring"),   # on 3 ranks: (rank + t) mod looks alike
    # rank - t without the modulo: where the ring wraps, a later rank's block passes `source <= rank`; the outputs
    # are those of attending later ranks, and the hint says both
    (dict(source_of=lambda rank, step, world_size: rank - step), "later ranks were attended"),
    (dict(package=True), "the package's own answer"),
    (dict(send_q=True), "the queries went out too"),
    # NaN on the rows the mask leaves without a key: named as the mask, not as a buffer read before it arrived
    (dict(hide_diagonal=True), "diagonal must stay visible, a query attends to itself"),
    # the triangle on the own block and on later ones (rank 0 then sees the triangle on every block), none skipped:
    # no one rule gives every rank's output, so the hint names the ranks that differ and the rule, not a mistake
    (dict(skip_future=False, mask=lambda rank, source: source >= rank), "the outputs of ranks 0, 1 differ from one "
                                                                        "process's"),
    # every rank's own block skipped (source < rank): rank 0, which has no earlier block, returns None
    (dict(skip_own=True), "rank 0 attended to no block"),
    # the receive buffers never taken as k and v: every step attends to the rank's own block again
    (dict(keep_own=True), "the blocks that arrived were never attended to"),
    # the blocks of later ranks attended, earlier ones skipped; the loop one step short (its last block never
    # attended); the running result started from zeros; receive buffers made once (sent and received into at once)
    (dict(attends=lambda rank, source: source >= rank), "the test is the wrong way round"),
    (dict(steps=2), "the block that arrived at the last step"),
    (dict(zero_start=True), "started as out = 0"),
    (dict(buffers_made_once=True), "received into the tensor an isend was still sending"),
    (dict(sends_what_it_receives=True), "sent the tensor an irecv was still receiving into"),
    # one step too many, sending at every step: no rule gives its outputs; the hops it sent are said too
    (dict(steps=4, passes=4), "blocks of keys and values, where the ring"),
]


# a right ring whose output is float64 (its values are judged), and one whose output is float16 (its dtype is named)
RING_DTYPES = [(torch.float64, None), (torch.float16, "rank 0: the output has dtype torch.float16; expected "
                                                      "torch.float32, the dtype of q, k and v")]
RING_TRAFFIC = [torch.float64]   # a right ring that sends float64 blocks: judged by the values it sends, not bytes


@pytest.fixture(scope="module")
def mistaken_rings() -> list:
    """What every rank returned and sent for each mistaken answer, then for each of RING_DTYPES: one launch of 3
    ranks runs them all."""
    answers = ([make_ring(**mistake) for mistake, _ in RING_MISTAKES] + [make_ring(dtype=d) for d, _ in RING_DTYPES]
               + [make_ring(traffic=d) for d in RING_TRAFFIC])

    def run_all(rank, answers):   # nested, so cloudpickle ships it by value to the ranks
        return [_ring_runner(rank, answer) for answer in answers]

    per_rank = launch(run_all, args=(answers,), nprocs=RING_SIZE, backend="gloo", timeout=60)
    return [[results[index] for results in per_rank] for index in range(len(answers))]


@pytest.mark.parametrize("index", range(len(RING_MISTAKES)), ids=[hint for _, hint in RING_MISTAKES])
def test_ring_names_each_mistake_and_only_it(mistaken_rings, index):
    expected = RING_MISTAKES[index][1]
    _raises_only(lambda results: _judge_ring("ring_attention", results), mistaken_rings[index], RING_HINTS, expected)


def test_ring_says_the_blocks_sent_where_no_rule_gives_the_outputs(mistaken_rings):
    index = next(i for i, (mistake, _) in enumerate(RING_MISTAKES) if mistake.get("passes") == 4)
    with pytest.raises(CheckFailed, match=r"fold each partial result in with combine; and rank 1 sent 8 blocks of keys "
                                          r"and values, where the ring sends 4: k and v, 2 hops"):
        _judge_ring("ring_attention", mistaken_rings[index])


@pytest.mark.parametrize("index", range(len(RING_DTYPES)), ids=[str(dtype) for dtype, _ in RING_DTYPES])
def test_ring_judges_a_float64_output_and_names_another_dtype(mistaken_rings, index, capsys):
    results, said = mistaken_rings[len(RING_MISTAKES) + index], RING_DTYPES[index][1]
    if said is None:
        _judge_ring("ring_attention", results)
        assert "✓ ring_attention" in capsys.readouterr().out
    else:
        with pytest.raises(CheckFailed, match=f"^{re.escape(said)}"):
            _judge_ring("ring_attention", results)


def test_a_ring_that_sends_float64_passes(mistaken_rings, capsys):
    _judge_ring("ring_attention", mistaken_rings[len(RING_MISTAKES) + len(RING_DTYPES)])
    assert "✓ ring_attention" in capsys.readouterr().out


def test_ring_names_a_buffer_read_before_it_arrived(mistaken_rings):
    # what a ring that never waits on its irecvs can return: NaN where a buffer's leftover memory was read
    results = [dict(result) for result in mistaken_rings[0]]
    results[0]["out"] = results[0]["out"].clone()
    results[0]["out"][0, 1, 2, 0] = float("nan")        # evidence that outweighs what the other values resemble
    _raises_only(lambda r: _judge_ring("ring_attention", r), results, RING_HINTS, "read before its data arrived")


def test_ring_names_a_mask_that_hides_the_diagonal_only_on_its_evidence(mistaken_rings):
    # NaN on the first row alone, every other value right: no mask gives that, so the receive buffer is named
    results = [dict(result) for result in mistaken_rings[len(RING_MISTAKES) + len(RING_DTYPES)]]
    results[0]["out"] = results[0]["out"].clone()
    results[0]["out"][..., 0, :] = float("nan")
    _raises_only(lambda r: _judge_ring("ring_attention", r), results, RING_HINTS, "read before its data arrived")


def test_zigzag_refuses_chunk_indices_that_are_not_ints():
    for answer, said in ((lambda rank, n: [rank, 2 * n - 1.5 - rank], "chunk index 2.5 is not a whole number"),
                         (lambda rank, n: [rank, (4 * n - 2 - 2 * rank) / 2], "chunk index 3.0 is a float")):
        with pytest.raises(CheckFailed, match=rf"^<lambda>\(0, 2\) returned a list of 2: \[int, float\]: {said}; "
                                              r"expected two int chunk indices, 0 to 3\.\nHint: .*// divides"):
            check_zigzag_chunks(answer)


def test_ring_refuses_a_receive_never_waited_for_whatever_the_values():
    # whether an irecv's block had arrived when it was attended to depends on timing: the log, not the values, decides
    with pytest.raises(CheckFailed) as failure:
        check_ring_attention(make_ring(receives_waited=False))
    message = str(failure.value)
    assert re.match(r"rank 0's call 3, dist\.irecv with src=2 \(and 11 more\) was never waited for: .*\nHint: "
                    r"dist\.irecv returns at once.*call \.wait\(\) on it", message), message
    others = [hint for hint in RING_HINTS if hint != "was never waited for" and hint in message]
    assert not others, message


def ring_of_batched_transfers(q, k, v):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    ahead, behind = (rank + 1) % world_size, (rank - 1) % world_size
    state = None
    for step in range(world_size):
        source = (rank - step) % world_size
        if source <= rank:
            partial = block_attention(q, k, v, causal=source == rank)
            state = partial if state is None else combine(*state, *partial)
        if step < world_size - 1:
            received_k, received_v = torch.empty_like(k), torch.empty_like(v)
            ops = [dist.P2POp(dist.isend, k, ahead), dist.P2POp(dist.isend, v, ahead),
                   dist.P2POp(dist.irecv, received_k, behind), dist.P2POp(dist.irecv, received_v, behind)]
            for work in dist.batch_isend_irecv(ops):   # the batch's requests, each waited for
                work.wait()
            k, v = received_k, received_v
    return state[0]


def ring_double_buffered_in_one_tensor(q, k, v):
    """Right: one tensor holds two buffers; each step sends from one half and receives into the other."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    buffers = torch.empty(2, 2, *k.shape)
    buffers[0, 0], buffers[0, 1] = k, v
    state = None
    for step in range(world_size):
        current, following = buffers[step % 2], buffers[(step + 1) % 2]
        source = (rank - step) % world_size
        if source <= rank:
            partial = block_attention(q, current[0], current[1], causal=source == rank)
            state = partial if state is None else combine(*state, *partial)
        if step < world_size - 1:
            works = [dist.isend(current[0], dst=(rank + 1) % world_size),
                     dist.isend(current[1], dst=(rank + 1) % world_size),
                     dist.irecv(following[0], src=(rank - 1) % world_size),
                     dist.irecv(following[1], src=(rank - 1) % world_size)]
            for work in works:
                work.wait()
    return state[0]


def test_a_ring_double_buffered_in_one_tensor_passes(capsys):
    check_ring_attention(ring_double_buffered_in_one_tensor)
    assert "✓ ring_double_buffered_in_one_tensor" in capsys.readouterr().out


def test_a_ring_of_batched_transfers_passes(capsys):
    # its irecvs run inside batch_isend_irecv: waiting on the batch's requests counts as waiting on them
    check_ring_attention(ring_of_batched_transfers)
    assert "✓ ring_of_batched_transfers" in capsys.readouterr().out


def test_ring_stops_the_blocking_send_deadlock_with_a_hint():
    with pytest.raises(CheckFailed, match=r"(?s)did not finish within 2 s.*in dist.send.*deadlocked ring.*dist.isend"):
        check_ring_attention(make_ring(blocking=True), timeout=DEADLOCK_TIMEOUT)


def test_ring_stops_a_wrong_source_with_the_peers():
    # receiving from rank + 1 while sending to rank + 1: every rank waits for a block nobody sends it
    with pytest.raises(CheckFailed) as failure:
        check_ring_attention(make_ring(recv_from=+1), timeout=DEADLOCK_TIMEOUT)
    message = str(failure.value)
    assert re.search(r"(?s)did not finish within 2 s.*in .wait\(\) on an isend/irecv.*never arrived.*without waiting "
                     r"on it.*Check the peers.*\(rank - 1\) % world_size", message), message
    assert "first" not in message and "outside torch.distributed" not in message, message


ORDER_HANGS = [
    # a recv waits for the peer's send: if every rank receives first, nobody sends (the mirror of the send case)
    ("recv first", "Stuck: rank 0 in dist.recv, rank 1 in dist.recv, rank 2 in dist.recv.\nHint: every rank called a "
                   "blocking dist.recv first, and a recv waits for the peer's send, which that peer never reaches "
                   "because it is receiving too: every rank receives first, so nobody sends."),
    ("irecv first", "Stuck: rank 0 in .wait() on a dist.irecv, rank 1 in .wait() on a dist.irecv, rank 2 in .wait() "
                    "on a dist.irecv.\nHint: every rank waits on its dist.irecv (.wait()) before it has started its "
                    "send, so nobody sends: a deadlocked ring. Post both the isend and the irecv, then .wait() on "
                    "both."),
    ("isend first", "Stuck: rank 0 in .wait() on a dist.isend, rank 1 in .wait() on a dist.isend, rank 2 in .wait() "
                    "on a dist.isend.\nHint: every rank waits on its dist.isend (.wait()) before it has posted its "
                    "dist.irecv"),
]


@pytest.mark.parametrize("order, said", ORDER_HANGS, ids=[order for order, _ in ORDER_HANGS])
def test_ring_names_a_deadlock_of_the_order_of_calls_not_the_peers(order, said):
    with pytest.raises(CheckFailed) as failure:
        check_ring_attention(make_ring(order=order), timeout=DEADLOCK_TIMEOUT)
    message = str(failure.value)
    assert said in message and "Check the peers" not in message, message


def test_ring_hang_with_unequal_sends_and_receives_names_the_counts_not_the_peers():
    # what each rank logged when it sends k and v but receives only k (run through the check, it hangs the same way)
    from ddp_lab.checks.lesson15 import _unequal_counts_hint
    from ddp_lab.checks.p2p_log import Call
    logs = {rank: ([Call("isend", (rank + 1) % 3, 24, True), Call("isend", (rank + 1) % 3, 24, True),
                    Call("irecv", (rank - 1) % 3, 24, False)], None) for rank in range(RING_SIZE)}
    hint = _unequal_counts_hint({rank: "" for rank in range(RING_SIZE)}, logs)
    assert hint.startswith("every rank started a number of sends other than its number of receives (rank 0: 2 sends, "
                           "1 receive; rank 1: 2 sends, 1 receive; rank 2: 2 sends, 1 receive)"), hint
    balanced = {rank: ([Call("isend", 1, 24), Call("irecv", 2, 24)], None) for rank in range(RING_SIZE)}
    assert _unequal_counts_hint({rank: "" for rank in range(RING_SIZE)}, balanced) is None


def test_ring_names_a_receive_buffer_smaller_than_the_message():
    # one head's rows received where a block of two heads arrives: gloo aborts the rank (SIGABRT)
    with pytest.raises(CheckFailed) as failure:
        check_ring_attention(make_ring(half_buffer=True), timeout=DEADLOCK_TIMEOUT)
    message = str(failure.value)
    assert "SIGABRT" in message and ("\nHint: gloo aborted the rank because a message of 96 bytes arrived in a "
                                     "receive buffer of 48: receive into a buffer of the shape and dtype of the "
                                     "tensor its peer sends, torch.empty_like(k)") in message, message


# --- zigzag_chunks ---------------------------------------------------------------------------

def zigzag_of_the_package(rank, world_size):
    from ddp_lab.course.context_parallel.layout import zigzag_chunks
    return zigzag_chunks(rank, world_size)


@pytest.mark.parametrize("answer, expected", [
    (zigzag_of_the_package, "the package's own answer"),
    (lambda rank, n: [2 * n - 1 - rank, rank], "not in sequence order"),
    (lambda rank, n: [2 * rank, 2 * rank + 1], "unbalanced"),
    (lambda rank, n: [rank, rank + n], "unbalanced"),
    (lambda rank, n: [n - 1 - rank, n + rank], "pairing is reversed"),
    # mirror pairs, but ranks 1 and 2 of 3 swapped (rank 0 already holds the first and the last chunk)
    (lambda rank, n: sorted([2 * rank, 2 * n - 1 - 2 * rank]),
     "not its own pair: rank 1 holds [2, 3], the pair of rank 2; rank 2 holds [1, 4], the pair of rank 1"),
    (lambda rank, n: [rank, 2 * n - rank], "numbered 0 to"),
    # the mirror written for 4 ranks (8 chunks) or for 2 (4 chunks): wrong chunks at 2 ranks, or duplicates at 3
    (lambda rank, n: [rank, 7 - rank], "at every world size tried"),
    (lambda rank, n: [rank, 3 - rank], "at every world size tried"),
    (lambda rank, n: [rank, rank], "held by exactly one rank"),
])
def test_zigzag_names_each_mistake_and_only_it(answer, expected):
    _raises_only(check_zigzag_chunks, answer, ZIGZAG_HINTS, expected)


def test_zigzag_names_a_chunk_count_written_for_one_world_size():
    with pytest.raises(CheckFailed, match=r"^3 ranks \(6 chunks\): got rank 0: \[0, 3\], rank 1: \[1, 2\], rank 2: "
                                          r"\[2, 1\]; .*\nHint: your late chunk is 3 - r at every world size tried "
                                          r"\(2, 3, 4 and 8 ranks\), a count written for one of them: .* \(here 6 "
                                          r"chunks, 0 to 5\)\.$"):
        check_zigzag_chunks(lambda rank, n: [rank, 3 - rank])     # right for 2 ranks only


@pytest.mark.parametrize("answer, outside", [
    (lambda rank, n: [rank, -1 - rank], "-2 and -1"),   # a negative index: a count for no world size
    (lambda rank, n: [rank, 6 - rank], "5 and 6"),      # 6 chunks hold 0 to 5: no world size's last chunk is 6
])
def test_zigzag_names_a_written_count_only_where_it_is_the_last_chunk_of_a_world_size_tried(answer, outside):
    with pytest.raises(CheckFailed, match=rf"^2 ranks \(4 chunks\): .*\nHint: chunks are numbered 0 to 3, and "
                                          rf"{outside} are outside that range\.$"):
        check_zigzag_chunks(answer)


def test_zigzag_accepts_the_right_answer_and_names_contiguous_pairs(capsys):
    check_zigzag_chunks(lambda rank, n: [rank, 2 * n - 1 - rank])
    assert "✓" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match=r"contiguous pairs the causal work per rank is \[3, 7\]"):
        check_zigzag_chunks(lambda rank, n: [2 * rank, 2 * rank + 1])


def test_ring_names_a_peer_outside_the_ring_whether_it_hangs_or_crashes():
    # rank + 1 without % world_size: the last rank sends to a rank that does not exist. Gloo then
    # either waits in isend/irecv (a hang) or segfaults in irecv (seen on 2.13, about one run in
    # five): both must end with the wrap-around hint
    with pytest.raises(CheckFailed, match=r"(?s)(did not finish within 2 s.*returns at once|crashed inside dist\.i?(send|recv))"
                                          r".*no rank of the ring.*\(rank \+ 1\) % world_size"):
        check_ring_attention(make_ring(wrap=False), timeout=DEADLOCK_TIMEOUT)


def ring_of_three_written(q, k, v):
    """Wrong: the world size written in (the check's 3 ranks), here through a name bound once."""
    rank, world_size = dist.get_rank(), 3
    out = lse = None
    for step in range(world_size):
        source = (rank - step) % world_size
        if source <= rank:
            partial = block_attention(q, k, v, causal=source == rank)
            out, lse = partial if out is None else combine(out, lse, *partial)
    return out


def test_a_ring_taken_modulo_a_written_world_size_is_refused_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(lesson15, "launch", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^ring_of_three_written takes a rank modulo 3, a number written in the code "
                                          r"\(`rank, world_size = dist\.get_rank\(\), 3`, then `source = \(rank - "
                                          r"step\) % world_size`\)\.\nHint: take it modulo the world size"):
        check_ring_attention(ring_of_three_written)

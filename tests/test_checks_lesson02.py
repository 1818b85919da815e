"""The lesson 02 checks accept a right answer and reject plausible wrong ones with specific feedback.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part
of the feedback that names it. The wrong answers that return run in one launch of 3 gloo ranks per
exercise (the check's own runner, then its judge); those that raise, crash or hang go through the
check itself, a launch each (about 1 s when the ranks start warm). The answers to exercise 3 build
on the right answers to exercises 1 and 2, as a learner's do.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from ddp_lab.checks import CheckFailed, lesson02
from ddp_lab.checks.lesson02 import (GATHER_SIZES, REDUCE_SIZES, _all_gather_runner, _recv_got_another_size,
                                     _reduce_runner, check_all_reduce_mean, check_ring_all_gather,
                                     check_ring_reduce_scatter, judge_all_gather, judge_all_reduce_mean,
                                     judge_reduce_scatter, rank_input, run_answers)
from ddp_lab.launcher.launch import launch

# The right answers are proven once, by nbval of solutions/02-*.ipynb (its check cells store ✓):
# this file tries the wrong ones and the cases the solution does not cover.

DEADLOCK_TIMEOUT = 2.0   # seconds after every rank entered the answer (start-up has its own allowance)


def _ring_step(chunks, send_index, recv_index, add=True, buffer=torch.empty_like):
    """One ring step: send chunks[send_index] to the right, receive from the left into recv_index (into
    `buffer(chunk)`, a tensor like the chunk)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    incoming = buffer(chunks[recv_index])
    request = dist.isend(chunks[send_index].clone(), (rank + 1) % world_size)
    dist.recv(incoming, (rank - 1) % world_size)
    request.wait()
    chunks[recv_index] = chunks[recv_index] + incoming if add else incoming


# --- exercise 1: ring reduce-scatter ---------------------------------------------------------

def ring_reduce_scatter(tensor, steps=None, shift=1, split=torch.tensor_split, buffer=torch.empty_like):
    """Right answer (shift=1, steps=N-1); the knobs make the wrong answers below."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = list(split(tensor, world_size))
    for step in range(world_size - 1 if steps is None else steps):
        _ring_step(chunks, (rank - step - shift) % world_size, (rank - step - shift - 1) % world_size, buffer=buffer)
    return chunks


def rs_right(tensor):
    return ring_reduce_scatter(tensor)[dist.get_rank()]


def rs_lesson_schedule_own_chunk(tensor):
    """Wrong: the lesson's indices unchanged, then returns chunk `rank` (never received into)."""
    return ring_reduce_scatter(tensor, shift=0)[dist.get_rank()]


def rs_lesson_schedule_finished_chunk(tensor):
    """Wrong: the lesson's indices, returning the chunk they complete: (rank + 1) % N."""
    return ring_reduce_scatter(tensor, shift=0)[(dist.get_rank() + 1) % dist.get_world_size()]


def rs_one_step_short(tensor):
    """Wrong: range(world_size - 2), an off-by-one in the loop."""
    return ring_reduce_scatter(tensor, steps=dist.get_world_size() - 2)[dist.get_rank()]


def rs_one_step_too_many(tensor):
    """Wrong: range(world_size), an off-by-one the other way: the extra step sends the finished chunk on."""
    return ring_reduce_scatter(tensor, steps=dist.get_world_size())[dist.get_rank()]


def rs_coalesced(tensor):
    """Wrong: a collective the exercise forbids, by a less known name."""
    dist.all_reduce_coalesced([tensor])
    return tensor.tensor_split(dist.get_world_size())[dist.get_rank()]


def rs_mean(tensor):
    """Wrong: divides, as the lesson's all-reduce exercise did (reduce_scatter sums)."""
    return rs_right(tensor) / dist.get_world_size()


def rs_whole_tensor(tensor):
    """Wrong: returns every chunk, concatenated (as the lesson's ring does at the end)."""
    return torch.cat(ring_reduce_scatter(tensor))


def rs_torch_chunk(tensor):
    """Wrong: tensor.chunk(N): fewer than N chunks when the tensor is small."""
    return ring_reduce_scatter(tensor, split=torch.chunk)[dist.get_rank()]


def rs_with_library(tensor):
    """Wrong: calls the collective it should build."""
    chunks = list(tensor.tensor_split(dist.get_world_size()))
    out = torch.empty_like(chunks[dist.get_rank()])
    dist.reduce_scatter(out, chunks)
    return out


def rs_blocking_send_first(tensor):
    """Wrong: every rank does a blocking send before its recv: deadlock."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = list(tensor.tensor_split(world_size))
    for step in range(world_size - 1):
        send_index, recv_index = (rank - step - 1) % world_size, (rank - step - 2) % world_size
        incoming = torch.empty_like(chunks[recv_index])
        dist.send(chunks[send_index], (rank + 1) % world_size)
        dist.recv(incoming, (rank - 1) % world_size)
        chunks[recv_index] += incoming
    return chunks[rank]


def rs_overwrites(tensor):
    """Wrong: receives into the chunk itself, so what arrives replaces it instead of being added."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = list(tensor.tensor_split(world_size))
    for step in range(world_size - 1):
        send_index, recv_index = (rank - step - 1) % world_size, (rank - step - 2) % world_size
        request = dist.isend(chunks[send_index].clone(), (rank + 1) % world_size)
        dist.recv(chunks[recv_index], (rank - 1) % world_size)
        request.wait()
    return chunks[rank]


def rs_batched(tensor):
    """Right: each step's send and receive posted together with batch_isend_irecv."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = [chunk.clone() for chunk in tensor.tensor_split(world_size)]
    for step in range(world_size - 1):
        send_index, recv_index = (rank - step - 1) % world_size, (rank - step - 2) % world_size
        incoming = torch.empty_like(chunks[recv_index])
        for request in dist.batch_isend_irecv([dist.P2POp(dist.isend, chunks[send_index], (rank + 1) % world_size),
                                               dist.P2POp(dist.irecv, incoming, (rank - 1) % world_size)]):
            request.wait()
        chunks[recv_index] += incoming
    return chunks[rank]


def rs_buffer_len_div(tensor):
    """Wrong: every receive buffer has len(tensor) // world_size elements (right only when the size divides)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = list(tensor.tensor_split(world_size))
    for step in range(world_size - 1):
        send_index, recv_index = (rank - step - 1) % world_size, (rank - step - 2) % world_size
        incoming = torch.zeros(len(tensor) // world_size)
        request = dist.isend(chunks[send_index].clone(), (rank + 1) % world_size)
        dist.recv(incoming, (rank - 1) % world_size)
        request.wait()
        chunks[recv_index] = chunks[recv_index] + incoming
    return chunks[rank]


def rs_buffer_like_sent_chunk(tensor):
    """Wrong: the receive buffer is shaped like the chunk the rank sends, not the one it receives. A rank whose
    buffer is too small aborts in gloo, one whose buffer is too large raises in the addition: either may come first."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = list(tensor.tensor_split(world_size))
    for step in range(world_size - 1):
        send_index, recv_index = (rank - step - 1) % world_size, (rank - step - 2) % world_size
        incoming = torch.empty_like(chunks[send_index])
        request = dist.isend(chunks[send_index].clone(), (rank + 1) % world_size)
        dist.recv(incoming, (rank - 1) % world_size)
        request.wait()
        chunks[recv_index] = chunks[recv_index] + incoming
    return chunks[rank]


def rs_fixed_buffer(tensor):
    """Wrong: every receive buffer has 4 elements (the largest chunk of 12 and of 10 elements on 3 ranks), and only
    the chunk's length of it is added: a chunk of more than 4 elements does not fit."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = list(tensor.tensor_split(world_size))
    for step in range(world_size - 1):
        send_index, recv_index = (rank - step - 1) % world_size, (rank - step - 2) % world_size
        incoming = torch.zeros(4)
        request = dist.isend(chunks[send_index].clone(), (rank + 1) % world_size)
        dist.recv(incoming, (rank - 1) % world_size)
        request.wait()
        chunks[recv_index] = chunks[recv_index] + incoming[:len(chunks[recv_index])]
    return chunks[rank]


def rs_shifted_the_wrong_way(tensor):
    """Wrong: the lesson's indices shifted by one the other way (N - 1 steps): a partial sum travels on."""
    return ring_reduce_scatter(tensor, shift=-1)[dist.get_rank()]


def rs_unsqueezed(tensor):
    """Wrong: the right chunk, returned with an extra dimension."""
    return ring_reduce_scatter(tensor)[dist.get_rank()].unsqueeze(0)


def rs_irecv_never_waited(tensor):
    """Wrong: dist.irecv's request never waited for: the buffer is read before (or as) the message arrives."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = list(tensor.tensor_split(world_size))
    for step in range(world_size - 1):
        send_index, recv_index = (rank - step - 1) % world_size, (rank - step - 2) % world_size
        incoming = torch.zeros_like(chunks[recv_index])
        request = dist.isend(chunks[send_index].clone(), (rank + 1) % world_size)
        dist.irecv(incoming, (rank - 1) % world_size)
        request.wait()
        chunks[recv_index] = chunks[recv_index] + incoming
    return chunks[rank]


def rs_isend_dropped(tensor):
    """Wrong: the request dist.isend returns dropped at once: the message is never delivered (a hang)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = list(tensor.tensor_split(world_size))
    for step in range(world_size - 1):
        send_index, recv_index = (rank - step - 1) % world_size, (rank - step - 2) % world_size
        incoming = torch.empty_like(chunks[recv_index])
        dist.isend(chunks[send_index].clone(), (rank + 1) % world_size)
        dist.recv(incoming, (rank - 1) % world_size)
        chunks[recv_index] = chunks[recv_index] + incoming
    return chunks[rank]


def _exercise_indices(rank, step, world_size):
    """The exercise's (send index, receive index) in a step: the chunk one behind what arrives."""
    return (rank - step - 1) % world_size, (rank - step - 2) % world_size


def _ring_adding_in_place(chunks, indices=_exercise_indices, to=1, sent=None):
    """A ring over `chunks`, each received chunk added in place into the one it belongs to: in each step a rank sends
    (`sent` or `chunks`)[send index] to rank + `to` and receives from rank - `to` (`indices(rank, step, N)`)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for step in range(world_size - 1):
        send_index, recv_index = indices(rank, step, world_size)
        incoming = torch.empty_like(chunks[recv_index])
        request = dist.isend((chunks if sent is None else sent)[send_index], (rank + to) % world_size)
        dist.recv(incoming, (rank - to) % world_size)
        request.wait()
        chunks[recv_index] += incoming
    return chunks[rank]


def rs_no_clone(tensor):
    """Wrong: the right chunk, but added into views of the caller's tensor: the input is changed in place."""
    return _ring_adding_in_place(list(tensor.tensor_split(dist.get_world_size())))


def rs_double(tensor):
    """Wrong: the right sums, in float64 for a float32 input."""
    return _ring_adding_in_place([chunk.double() for chunk in tensor.tensor_split(dist.get_world_size())])


def rs_stub(tensor):
    raise NotImplementedError("shift the schedule by one chunk")


def rs_sends_the_original_chunks(tensor):
    """Wrong: the right indices, but every send is a chunk of the caller's tensor, while the sums go into copies made
    before the loop: what a rank passes on never holds what it added."""
    original = tensor.tensor_split(dist.get_world_size())
    return _ring_adding_in_place([chunk.clone() for chunk in original], sent=original)


def rs_other_way(tensor):
    """Right: a ring that sends to rank - 1, with the indices of a ring running that way."""
    return _ring_adding_in_place([chunk.clone() for chunk in tensor.tensor_split(dist.get_world_size())],
                                 lambda rank, step, n: ((rank + step + 1) % n, (rank + step + 2) % n), to=-1)


def rs_peers_swapped(tensor):
    """Wrong: the exercise's indices, but sent to rank - 1 and received from rank + 1 (a ring running the other
    way): with chunks of different sizes, a message and its buffer differ in size, and gloo aborts."""
    return _ring_adding_in_place([chunk.clone() for chunk in tensor.tensor_split(dist.get_world_size())], to=-1)


def rs_split_by_size(tensor):
    """Wrong: tensor.split(world_size), which makes pieces of world_size elements: 1 piece of 2 elements."""
    return _ring_adding_in_place([chunk.clone() for chunk in tensor.split(dist.get_world_size())])


def rs_receives_where_it_sends(tensor):
    """Wrong: the receive index equals the send index; the buffer is shaped like the chunk of that index."""
    return _ring_adding_in_place([chunk.clone() for chunk in tensor.tensor_split(dist.get_world_size())],
                                 lambda rank, step, n: ((rank - step - 1) % n,) * 2)


def rs_in_half(tensor):
    """Wrong: the chunks converted to float16 for the ring, the result back to float32: the sums lose precision."""
    chunks = [chunk.half() for chunk in tensor.tensor_split(dist.get_world_size())]
    return _ring_adding_in_place(chunks).float()


def rs_steps_from_one(tensor):
    """Right: steps counted from 1 (range(1, N)), with the indices shifted to match, (r - s) and (r - s - 1)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = [chunk.clone() for chunk in tensor.tensor_split(world_size)]
    for step in range(1, world_size):
        send_index, recv_index = (rank - step) % world_size, (rank - step - 1) % world_size
        incoming = torch.empty_like(chunks[recv_index])
        request = dist.isend(chunks[send_index], (rank + 1) % world_size)
        dist.recv(incoming, (rank - 1) % world_size)
        request.wait()
        chunks[recv_index] += incoming
    return chunks[rank]


def rs_parity_ordered(tensor):
    """Right: blocking send and recv, even ranks sending first and odd ranks receiving first."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = [chunk.clone() for chunk in tensor.tensor_split(world_size)]
    for step in range(world_size - 1):
        send_index, recv_index = (rank - step - 1) % world_size, (rank - step - 2) % world_size
        incoming = torch.empty_like(chunks[recv_index])
        if rank % 2 == 0:
            dist.send(chunks[send_index], (rank + 1) % world_size)
            dist.recv(incoming, (rank - 1) % world_size)
        else:
            dist.recv(incoming, (rank - 1) % world_size)
            dist.send(chunks[send_index], (rank + 1) % world_size)
        chunks[recv_index] += incoming
    return chunks[rank]


RS_RETURNING = {   # wrong answers that return: they run one after the other in one launch
    rs_lesson_schedule_own_chunk: r"rank 0, tensor of 12 .*\nHint: it is this rank's own chunk 0, unchanged.*"
                                  r"lesson's schedule",
    rs_lesson_schedule_finished_chunk: r"rank 0, tensor of 12 .*\nHint: it is the full sum of chunk 1, not of "
                                       r"chunk 0\. That is where the lesson's ring ends",
    rs_one_step_short: r"Hint: this rank received 1 time\(s\); a ring reduce-scatter takes N - 1 = 2 steps",
    rs_one_step_too_many: r"(?s)the right chunk, but the rank received 3 times.*N - 1 = 2 steps",
    rs_mean: r"Hint: you returned the MEAN of chunk 0; dist\.reduce_scatter returns the SUM",
    rs_whole_tensor: r"got a tensor of shape \(12,\) .*\nHint: you returned a tensor as large as the input",
    rs_overwrites: r"(?s)Hint: it is rank \d's chunk 0 alone: what arrived replaced this rank's chunk",
    rs_shifted_the_wrong_way: r"(?s)rank 0, tensor of 12 .*\nHint: it is the sum over ranks \[0, 2\] only; rank\(s\) "
                              r"\[1\] are missing, although this rank received 2 times \(the ring needs N - 1 = 2\): "
                              r"a partial sum travelled on",
    rs_no_clone: r"(?s)^rank 0, tensor of 12 elements: the right chunk, but rs_no_clone changed its input, the "
                 r"caller's tensor, in place.*dist\.reduce_scatter leaves its input as it was\.\nHint: work on "
                 r"copies of the chunks \(\.clone\(\)\)",
    rs_double: r"^rank 0, tensor of 12 elements on 3 ranks: the sum of chunk 0 is right, but returned as a tensor of "
               r"shape \(4,\) and dtype torch\.float64; expected torch\.float32, the input's dtype\.\nHint: "
               r"dist\.reduce_scatter returns the input's dtype",
    rs_unsqueezed: r"rank 0, tensor of 12 .*got a tensor of shape \(1, 4\).*\nHint: the 4 elements are there, in the "
                   r"shape \(1, 4\): return the chunk as the 1-D tensor tensor_split gives, shape \(4,\)\.$",
    rs_sends_the_original_chunks: r"(?s)rank 0, tensor of 12 .*\nHint: it is the sum over ranks \[0, 2\] only.*check "
                                  r"the send and receive indices against that, or the tensor sent is not the one the "
                                  r"additions went into: in step 1 this rank sent from the caller's tensor",
    # values within 16-bit rounding of the sums: named as lost precision, not as a chunk index to check
    rs_in_half: r"^rank 0, tensor of 12 elements on 3 ranks, element \d of chunk 0: expected the sum .*\nHint: every "
                r"element is within [\d.]+% of the expected value, but float32 arithmetic on these inputs lands within "
                r"1e-5: precision was lost on the way, as when values pass through a 16-bit dtype",
}


RS_RIGHT = (rs_batched, rs_other_way, rs_steps_from_one, rs_parity_ordered)   # right, written another way


@pytest.fixture(scope="module")
def rs_results():
    answers = (*RS_RETURNING, *RS_RIGHT)
    runs = run_answers(_reduce_runner, answers, (REDUCE_SIZES, 3, "reduce-scattering"), name="rs")
    return dict(zip(answers, runs))


@pytest.mark.parametrize("wrong", RS_RETURNING, ids=lambda answer: answer.__name__)
def test_ring_reduce_scatter_names_wrong_results(wrong, rs_results):
    with pytest.raises(CheckFailed, match=RS_RETURNING[wrong]):
        judge_reduce_scatter(wrong.__name__, rs_results[wrong])


def test_ring_reduce_scatter_accepts_batch_isend_irecv(rs_results):
    """P2POp accepts only dist.isend/irecv themselves: the check's recording stand-ins must keep that identity."""
    assert judge_reduce_scatter("rs_batched", rs_results[rs_batched]).startswith("rs_batched")


def test_ring_reduce_scatter_accepts_a_ring_running_the_other_way(rs_results):
    """The hints on a ring run backwards (rs_peers_swapped) need the exercise's indices: this ring has its own."""
    assert judge_reduce_scatter("rs_other_way", rs_results[rs_other_way]).startswith("rs_other_way")


@pytest.mark.parametrize("answer", (rs_steps_from_one, rs_parity_ordered), ids=lambda answer: answer.__name__)
def test_ring_reduce_scatter_accepts_other_schedules(answer, rs_results):
    assert judge_reduce_scatter(answer.__name__, rs_results[answer]).startswith(answer.__name__)


@pytest.mark.parametrize("wrong, feedback", [   # each raises on the ranks, which ends its launch: one launch each
    (rs_coalesced, r"dist\.all_reduce_coalesced is not allowed in this exercise"),
    (rs_torch_chunk, r"(?s)raised IndexError.*while reduce-scattering a tensor of 2 elements on 3 ranks.*"
                     r"Hint: with 2 elements on 3 ranks, tensor\.chunk\(3\) returns only 2 chunk\(s\)"),
    (rs_with_library, r"dist\.reduce_scatter is not allowed in this exercise"),
    (rs_stub, r"is not written yet: it raised NotImplementedError\('shift the schedule by one chunk'\)"),
    (rs_buffer_len_div, r"(?s)SIGABRT.*What the ranks did: in step 0 of the tensor of 10 elements \(tensor_split's "
                        r"chunks: \[4, 3, 3\]\), rank 2 received into a buffer of 3 element\(s\) the 4 element\(s\) "
                        r"rank 1 sent\..*\nHint: the receive buffer has the wrong size \(every receive buffer here has "
                        r"len\(tensor\) // world_size = 3 elements\)"),
    (rs_buffer_like_sent_chunk, r"(?s)What the ranks did: in step 0 of the tensor of 10 elements.* received into a "
                                r"buffer of \d element\(s\) the \d element\(s\) rank \d sent\..*\nHint: the receive "
                                r"buffer has the wrong size \(every receive buffer here is as large as the chunk the "
                                r"same rank sends in that step"),
    (rs_fixed_buffer, r"(?s)SIGABRT.*What the ranks did: in step 0 of the tensor of 16 elements \(tensor_split's "
                      r"chunks: \[6, 5, 5\]\), rank \d received into a buffer of 4 element\(s\) the [56] element\(s\) "
                      r"rank \d sent\..*\nHint: the receive buffer has the wrong size \(every receive buffer has 4 "
                      r"elements, for tensors of 12, 10, 7, 2 and 16 elements alike"),
])
def test_ring_reduce_scatter_rejects(wrong, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_ring_reduce_scatter(wrong)


@pytest.mark.parametrize("wrong, feedback", [   # each crashes on the ranks: a launch each
    (rs_peers_swapped, r"(?s)SIGABRT.*What the ranks did: in step \d of the tensor of 10 elements.*every rank sent to "
                       r"rank - 1 and received from rank \+ 1.*\nHint: you send to \(rank - 1\) and receive from "
                       r"\(rank \+ 1\), while the exercise's indices are for a ring that sends to \(rank \+ 1\) % "
                       r"world_size"),
    (rs_split_by_size, r"(?s)raised IndexError.*tensor of 2 elements on 3 ranks.*\nHint: with 2 elements on 3 ranks, "
                       r"tensor\.split\(3\) returns 1 piece\(s\).*split\(n\) makes pieces of n elements, "
                       r"tensor_split\(n\) makes n pieces"),
    (rs_receives_where_it_sends, r"(?s)SIGABRT.*What the ranks did: in step \d of the tensor of 10 elements.*\nHint: "
                                 r"the receive buffer has the wrong size .*the buffer, and the chunk it is added into, "
                                 r"must both be chunk \(rank - step - 2\) % world_size, one behind the chunk sent"),
])
def test_ring_reduce_scatter_rejects_index_mistakes(wrong, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_ring_reduce_scatter(wrong)


def test_ring_reduce_scatter_names_isend_requests_dropped_before_their_message_arrived():
    """Each message whose request was dropped at once never arrived, in every run seen (torch 2.13, gloo); were they
    all to arrive, the values would be right, and the requests never waited for are named as a race."""
    with pytest.raises(CheckFailed, match=r"(?s)(did not finish within 2 s.*What the ranks did: every rank waits in "
                                          r"dist\.recv, and no rank waited for any of its dist\.isend requests: "
                                          r"rank \d "
                                          r"waits for message \d from rank \d, which rank \d started with dist\.isend "
                                          r"and never waited for.*\nHint: keep the request dist\.isend returns|the "
                                          r"values are right, but the rank never waited for \d dist\.isend requests)"):
        check_ring_reduce_scatter(rs_isend_dropped, timeout=DEADLOCK_TIMEOUT)


def test_right_values_from_requests_never_waited_for_still_fail():
    """Values that came out right although requests were never waited for (a race this run won) are not a pass."""
    with pytest.raises(CheckFailed, match=r"(?s)^rank 1, tensor of 12 elements: the values are right, but the rank "
                                          r"never waited for 2 dist\.isend requests\..*Hint: keep each request"):
        lesson02._judged_with_requests({"unwaited": ["2 dist.isend requests"]}, 0, 12, 1, lambda: None)


def test_ring_reduce_scatter_deadlock_ends_with_a_message():
    with pytest.raises(CheckFailed, match=r"(?s)did not finish within 2 s.*rank 0 in dist\.send.*"
                                          r"every rank called a blocking dist\.send first") as caught:
        check_ring_reduce_scatter(rs_blocking_send_first, timeout=DEADLOCK_TIMEOUT)
    assert "rank 2 in dist.send" in str(caught.value)


def _library_reduce_scatter(rank, sizes):
    chunks = [rank_input(rank, size).tensor_split(dist.get_world_size()) for size in sizes]
    outs = [torch.empty_like(c[rank]) for c in chunks]
    for out, parts in zip(outs, chunks):
        dist.reduce_scatter(out, list(parts))
    return outs


def test_the_reference_is_what_dist_reduce_scatter_gives():
    """The check's expected chunk (all_reduce, cut by tensor_split) equals dist.reduce_scatter's output."""
    library = launch(_library_reduce_scatter, args=(REDUCE_SIZES,), nprocs=3, backend="gloo", timeout=60)
    for case, size in enumerate(REDUCE_SIZES):
        total = sum(rank_input(rank, size) for rank in range(3))
        for rank in range(3):
            torch.testing.assert_close(library[rank][case], total.tensor_split(3)[rank])


# --- ring all-gather ---------------------------------------------------------------------

def ring_all_gather(tensor, buffer=torch.empty_like):
    """Right answer: pass each tensor one hop to the right, world_size - 1 times (`buffer(tensor)`: each entry's
    buffer, a tensor like it)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [buffer(tensor) for _ in range(world_size)]
    gathered[rank] = tensor.clone()
    for step in range(world_size - 1):
        send_index, recv_index = (rank - step) % world_size, (rank - step - 1) % world_size
        request = dist.isend(gathered[send_index], (rank + 1) % world_size)
        dist.recv(gathered[recv_index], (rank - 1) % world_size)
        request.wait()
    return gathered


def gather_in_arrival_order(tensor):
    """Wrong: appends tensors in the order they arrive instead of by source rank."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    arrived, passing = [tensor.clone()], tensor.clone()
    for _ in range(world_size - 1):
        incoming = torch.empty_like(tensor)
        request = dist.isend(passing, (rank + 1) % world_size)
        dist.recv(incoming, (rank - 1) % world_size)
        request.wait()
        arrived.append(incoming)
        passing = incoming
    return arrived


def gather_one_step(tensor):
    """Wrong: one exchange with the neighbour only (a ring needs world_size - 1 steps)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [torch.zeros_like(tensor) for _ in range(world_size)]
    gathered[rank] = tensor.clone()
    left = (rank - 1) % world_size
    request = dist.isend(tensor, (rank + 1) % world_size)
    dist.recv(gathered[left], left)
    request.wait()
    return gathered


def gather_sends_its_own(tensor):
    """Wrong: sends its own tensor in every step instead of passing on what arrived."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [torch.empty_like(tensor) for _ in range(world_size)]
    gathered[rank] = tensor.clone()
    for step in range(world_size - 1):
        request = dist.isend(tensor, (rank + 1) % world_size)
        dist.recv(gathered[(rank - step - 1) % world_size], (rank - 1) % world_size)
        request.wait()
    return gathered


def gather_into_one_buffer(tensor):
    """Wrong: one receive buffer for every step: the list's entries are the same tensor."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    buffer, passing = torch.empty_like(tensor), tensor.clone()
    gathered = [buffer] * world_size
    gathered[rank] = tensor.clone()
    for step in range(world_size - 1):
        request = dist.isend(passing, (rank + 1) % world_size)
        dist.recv(buffer, (rank - 1) % world_size)
        request.wait()
        passing = buffer.clone()
    return gathered


def gather_without_own_entry(tensor):
    """Wrong: forgets to put its own tensor in its slot."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [torch.zeros_like(tensor) for _ in range(world_size)]
    passing = tensor.clone()
    for step in range(world_size - 1):
        incoming = torch.empty_like(tensor)
        request = dist.isend(passing, (rank + 1) % world_size)
        dist.recv(incoming, (rank - 1) % world_size)
        request.wait()
        gathered[(rank - step - 1) % world_size] = passing = incoming
    return gathered


def gather_one_step_too_many(tensor):
    """Wrong: range(world_size): the extra step brings every rank its own tensor back, into its own slot."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [torch.empty_like(tensor) for _ in range(world_size)]
    gathered[rank] = tensor.clone()
    for step in range(world_size):
        request = dist.isend(gathered[(rank - step) % world_size].clone(), (rank + 1) % world_size)
        dist.recv(gathered[(rank - step - 1) % world_size], (rank - 1) % world_size)
        request.wait()
    return gathered


def gather_swapped_indices(tensor):
    """Wrong: the send and receive entries swapped: step 0 receives into the rank's own slot, which held its tensor."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [torch.zeros_like(tensor) for _ in range(world_size)]
    gathered[rank] = tensor.clone()
    for step in range(world_size - 1):
        send_index, recv_index = (rank - step - 1) % world_size, (rank - step) % world_size
        request = dist.isend(gathered[send_index], (rank + 1) % world_size)
        dist.recv(gathered[recv_index], (rank - 1) % world_size)
        request.wait()
    return gathered


def gather_fixed_buffer(tensor):
    """Wrong: receive buffers of 4 elements (a size written as a number), cut to the tensor's length at the end:
    a tensor of more than 4 elements does not fit."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [torch.zeros(4) for _ in range(world_size)]
    gathered[rank] = tensor.clone()
    for step in range(world_size - 1):
        send_index, recv_index = (rank - step) % world_size, (rank - step - 1) % world_size
        request = dist.isend(gathered[send_index], (rank + 1) % world_size)
        dist.recv(gathered[recv_index], (rank - 1) % world_size)
        request.wait()
    return [entry[:len(tensor)] for entry in gathered]


def gather_with_library(tensor):
    """Wrong: calls dist.all_gather."""
    gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, tensor)
    return gathered


def gather_receives_first(tensor):
    """Wrong: every rank receives before it sends (right peers, wrong order): deadlock."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [torch.empty_like(tensor) for _ in range(world_size)]
    gathered[rank] = tensor.clone()
    for step in range(world_size - 1):
        dist.recv(gathered[(rank - step - 1) % world_size], (rank - 1) % world_size)
        dist.send(gathered[(rank - step) % world_size], (rank + 1) % world_size)
    return gathered


def gather_irecv_never_waited(tensor):
    """Wrong: dist.irecv's requests never waited for."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [torch.zeros_like(tensor) for _ in range(world_size)]
    gathered[rank] = tensor.clone()
    for step in range(world_size - 1):
        request = dist.isend(gathered[(rank - step) % world_size].clone(), (rank + 1) % world_size)
        dist.irecv(gathered[(rank - step - 1) % world_size], (rank - 1) % world_size)
        request.wait()
    return gathered


def gather_checks_its_requests(tensor):
    """Right: the requests checked to be torch's own (the check watches them without standing in for them)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [torch.empty_like(tensor) for _ in range(world_size)]
    gathered[rank] = tensor.clone()
    for step in range(world_size - 1):
        requests = [dist.isend(gathered[(rank - step) % world_size], (rank + 1) % world_size),
                    dist.irecv(gathered[(rank - step - 1) % world_size], (rank - 1) % world_size)]
        for request in requests:
            assert isinstance(request, dist.Work), type(request)
            dist.Work.wait(request)
    return gathered


def gather_sends_a_slot_not_filled_yet(tensor):
    """Wrong: in step s sends entry (r - s - 1) % N, the one it is about to receive, still the zeros it was made
    with: every message holds zeros."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [torch.zeros_like(tensor) for _ in range(world_size)]
    gathered[rank] = tensor.clone()
    for step in range(world_size - 1):
        incoming = torch.empty_like(tensor)
        request = dist.isend(gathered[(rank - step - 1) % world_size], (rank + 1) % world_size)
        dist.recv(incoming, (rank - 1) % world_size)
        request.wait()
        gathered[(rank - step - 1) % world_size] = incoming
    return gathered


def gather_reversed_arrival_order(tensor):
    """Wrong: the tensors in the order they arrived (own first), then reversed: every rank's tensor, in another
    order; the tensor that arrived last lands in entry 0, the own entry of rank 0."""
    return gather_in_arrival_order(tensor)[::-1]


def gather_peers_swapped(tensor):
    """Wrong: the exercise's indices, but sent to rank - 1 and received from rank + 1."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [torch.empty_like(tensor) for _ in range(world_size)]
    gathered[rank] = tensor.clone()
    for step in range(world_size - 1):
        send_index, recv_index = (rank - step) % world_size, (rank - step - 1) % world_size
        request = dist.isend(gathered[send_index], (rank - 1) % world_size)
        dist.recv(gathered[recv_index], (rank + 1) % world_size)
        request.wait()
    return gathered


def gather_other_way(tensor):
    """Right: a ring that sends to rank - 1, with the indices of a ring running that way."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [torch.empty_like(tensor) for _ in range(world_size)]
    gathered[rank] = tensor.clone()
    for step in range(world_size - 1):
        send_index, recv_index = (rank + step) % world_size, (rank + step + 1) % world_size
        request = dist.isend(gathered[send_index], (rank - 1) % world_size)
        dist.recv(gathered[recv_index], (rank + 1) % world_size)
        request.wait()
    return gathered


def gather_receives_from_the_right(tensor):
    """Wrong: irecv from the right neighbour (which sends to its own right), then wait on it: a hang in the wait."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [torch.empty_like(tensor) for _ in range(world_size)]
    gathered[rank] = tensor.clone()
    for step in range(world_size - 1):
        sent = dist.isend(gathered[(rank - step) % world_size], (rank + 1) % world_size)
        received = dist.irecv(gathered[(rank - step - 1) % world_size], (rank + 1) % world_size)
        received.wait()
        sent.wait()
    return gathered


def gather_in_float64(tensor):
    """Wrong: every rank's values, each entry converted to float64."""
    return [entry.double() for entry in ring_all_gather(tensor)]


def gather_receives_into_what_it_sends(tensor):
    """Wrong: one tensor passed on: each step receives into the tensor its isend is still sending (a race)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [tensor.clone() for _ in range(world_size)]
    passing = tensor.clone()
    for step in range(world_size - 1):
        request = dist.isend(passing, (rank + 1) % world_size)
        dist.recv(passing, (rank - 1) % world_size)
        request.wait()
        gathered[(rank - step - 1) % world_size] = passing.clone()
    return gathered


def gather_into_views_of_one_buffer(tensor):
    """Right: the entries are views of one flat buffer, received into in place."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = list(torch.empty(world_size * len(tensor), dtype=tensor.dtype).split(len(tensor)))
    gathered[rank].copy_(tensor)
    for step in range(world_size - 1):
        request = dist.isend(gathered[(rank - step) % world_size], (rank + 1) % world_size)
        dist.recv(gathered[(rank - step - 1) % world_size], (rank - 1) % world_size)
        request.wait()
    return gathered


AG_RETURNING = {   # wrong answers that return: one launch for all of them
    gather_in_arrival_order: r"rank 0, .*: entry 1, element 0: .*\nHint: entry 1 holds rank 2's tensor",
    gather_one_step: r"entry \d was never filled .* needs world_size - 1 = 2 steps",
    gather_sends_its_own: r"(?s)every entry this rank received holds rank 2's tensor, its left neighbour's own",
    gather_into_one_buffer: r"(?s)every entry this rank received holds the same values: they share one receive "
                            r"buffer",
    gather_without_own_entry: r"(?s)rank 0, .*entry 0, .*Hint: your own slot, entry 0, does not hold your tensor",
    gather_one_step_too_many: r"rank 0, tensors of 4 elements: every entry is right, but the rank received 3 times "
                              r"\(receive 3 wrote into this rank's own entry 0.*\nHint: a ring all-gather takes "
                              r"N - 1 = 2 steps",
    gather_swapped_indices: r"rank 0, .*entry 0, .*\nHint: receive 1 of this rank wrote into its own slot, entry 0, "
                            r"replacing what it held",
    gather_sends_a_slot_not_filled_yet: r"rank 0, .*entry 1, .*got 0\.000000\.\nHint: entry 1 holds only zeros, and it "
                                        r"is the buffer receive \d of this rank wrote into: the message itself held "
                                        r"zeros.*the entry of rank \(r - s\) % world_size\.$",
    gather_reversed_arrival_order: r"rank 0, .*entry 0, .*\nHint: entry 0 holds rank 1's tensor: every entry holds "
                                   r"some rank's tensor, in another order \(entry 0: rank 1's, entry 1: rank 2's, "
                                   r"entry 2: rank 0's\)\. Order the list by source rank",
    gather_peers_swapped: r"rank 0, .*\nHint: this rank sent to rank 2, \(rank - 1\), and received from rank 1, "
                          r"\(rank \+ 1\).*the exercise's indices are for a ring that sends to \(rank \+ 1\) % "
                          r"world_size",
    gather_in_float64: r"^rank 0, tensors of 4 elements on 3 ranks: entry 0 holds rank 0's values, but as "
                       r"torch\.float64; expected torch\.float32, the dtype of the tensors given\.\nHint: "
                       r"dist\.all_gather returns the tensors' own dtype",
    # refused from the calls made, whatever values this run's timing gave (its hints differed from run to run)
    gather_receives_into_what_it_sends: r"^rank 0, tensors of 4 elements: receive 1 of this rank \(dist\.recv\) wrote "
                                        r"into the tensor that its send 1 \(dist\.isend\) was still sending, before "
                                        r"that request had been waited for: .* a matter of timing\.\nHint: a "
                                        r"request's tensor is in use until its \.wait\(\) returns",
}


@pytest.fixture(scope="module")
def ag_results():
    answers = (*AG_RETURNING, gather_checks_its_requests, gather_other_way, gather_into_views_of_one_buffer)
    return dict(zip(answers, run_answers(_all_gather_runner, answers, (GATHER_SIZES, 3), name="ag")))


@pytest.mark.parametrize("wrong", AG_RETURNING, ids=lambda answer: answer.__name__)
def test_ring_all_gather_names_wrong_results(wrong, ag_results):
    with pytest.raises(CheckFailed, match=AG_RETURNING[wrong]):
        judge_all_gather(wrong.__name__, ag_results[wrong])


def test_ring_all_gather_accepts_requests_checked_and_waited_through_the_class(ag_results):
    assert judge_all_gather("gather_checks_its_requests", ag_results[gather_checks_its_requests]).startswith(
        "gather_checks_its_requests")


def test_ring_all_gather_accepts_entries_that_are_views_of_one_buffer(ag_results):
    assert judge_all_gather("gather_into_views_of_one_buffer", ag_results[gather_into_views_of_one_buffer]).startswith(
        "gather_into_views_of_one_buffer")


def test_ring_all_gather_accepts_a_ring_running_the_other_way(ag_results):
    """The hint on a ring run backwards (gather_peers_swapped) needs the exercise's indices: this ring has its own."""
    assert judge_all_gather("gather_other_way", ag_results[gather_other_way]).startswith("gather_other_way")


def test_a_rank_blocked_in_a_wait_is_not_said_to_have_never_waited():
    with pytest.raises(CheckFailed) as failure:
        check_ring_all_gather(gather_receives_from_the_right, timeout=DEADLOCK_TIMEOUT)
    message = str(failure.value)
    assert "did not finish" in message and "waited for none" not in message and "never waited" not in message, \
        message


def test_ring_all_gather_refuses_the_library():
    with pytest.raises(CheckFailed, match=r"dist\.all_gather is not allowed"):
        check_ring_all_gather(gather_with_library)


def test_ring_all_gather_names_a_fixed_receive_size():
    with pytest.raises(CheckFailed, match=r"(?s)SIGABRT.*What the ranks did: in step 0 of tensors of 6 elements, "
                                          r"rank \d received into a buffer of 4 element\(s\) the 6 element\(s\) rank "
                                          r"\d sent\.\nHint: every receive buffer has 4 elements, for tensors of 4, 1 "
                                          r"and 6 elements alike"):
        check_ring_all_gather(gather_fixed_buffer)


def test_ring_all_gather_deadlock_ends_with_a_message():
    """Every rank receives first (the reduce-scatter test above hangs in blocking sends; the two checks share both
    hang hints): the logged calls show that no message was on its way."""
    with pytest.raises(CheckFailed, match=r"(?s)did not finish within 2 s.*What the ranks did: every rank waits in "
                                          r"dist\.recv, and none had sent more messages than it had received \(rank 0: "
                                          r"0 sent, 0 received;.*\nHint: every rank receives before it sends.*"
                                          r"dist\.isend.*alternate the order by rank parity"):
        check_ring_all_gather(gather_receives_first, timeout=DEADLOCK_TIMEOUT)


IRECV_NEVER_WAITED = (r"(?s)(never waited for 2 dist\.irecv requests|waited for none of its \d+ dist\.irecv "
                      r"requests).*\.wait\(\) on each request before using")


@pytest.mark.parametrize("check, answer, feedback", [
    (check_ring_reduce_scatter, rs_irecv_never_waited, IRECV_NEVER_WAITED),
    (check_ring_all_gather, gather_irecv_never_waited, IRECV_NEVER_WAITED),
])
def test_the_ring_checks_name_requests_never_waited_for(check, answer, feedback):
    """Whether the buffers are read before the messages land, or a later receive then waits for ever, differs from
    run to run: each way, the requests never waited for are named (a launch of its own: it may hang)."""
    with pytest.raises(CheckFailed, match=feedback):
        check(answer, timeout=DEADLOCK_TIMEOUT)



# --- exercise 3: an averaging all-reduce from the two ---------------------------------------------

def _gather(tensor):
    """The right ring all-gather (exercise 2), for the answers below."""
    return ring_all_gather(tensor)


def all_reduce_mean(tensor, pad=True, trim=True, divide=True, gather=True, lesson_layout=False):
    """Right answer (all knobs at their defaults); each knob turned is one wrong answer below."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    sizes = [len(c) for c in tensor.tensor_split(world_size)]
    owned = (rank + 1) % world_size if lesson_layout else rank
    mine = ring_reduce_scatter(tensor, shift=0 if lesson_layout else 1)[owned]
    if not gather:
        return mine / world_size
    padded = torch.nn.functional.pad(mine, (0, sizes[0] - len(mine))) if pad else mine
    pieces = _gather(padded)
    if trim:
        pieces = [piece[:size] for piece, size in zip(pieces, sizes)]
    total = torch.cat(pieces)
    return total / world_size if divide else total


def mean_right(tensor):
    return all_reduce_mean(tensor)


def mean_sum(tensor):
    """Wrong: forgets to divide by the world size."""
    return all_reduce_mean(tensor, divide=False)


def mean_without_all_gather(tensor):
    """Wrong: stops after the reduce-scatter (divides its chunk, returns it)."""
    return all_reduce_mean(tensor, gather=False)


def mean_without_padding(tensor):
    """Wrong: all-gathers the uneven chunks as they are."""
    return all_reduce_mean(tensor, pad=False)


def mean_padding_kept(tensor):
    """Wrong: pads, but concatenates the padded entries."""
    return all_reduce_mean(tensor, trim=False)


def mean_lesson_layout(tensor):
    """Wrong: the lesson's reduce-scatter (rank r owns chunk r + 1), concatenated in list order."""
    return all_reduce_mean(tensor, lesson_layout=True)


def mean_divided_twice(tensor):
    """Wrong: divides the chunk after the reduce-scatter and the result again."""
    return all_reduce_mean(tensor) / dist.get_world_size()


def mean_trims_the_tail(tensor):
    """Wrong: pads, gathers, concatenates, then cuts the padding off the end of the whole."""
    return all_reduce_mean(tensor, trim=False)[:len(tensor)]


def mean_chunk_sizes(tensor):
    """Wrong: cuts every gathered entry to tensor.chunk's sizes (4, 4, 2 for 10 on 3 ranks), not tensor_split's: the
    same result as cutting the padding off the end of the concatenation only."""
    world_size = dist.get_world_size()
    sizes = [len(c) for c in tensor.chunk(world_size)]
    mine = ring_reduce_scatter(tensor)[dist.get_rank()]
    pieces = _gather(torch.nn.functional.pad(mine, (0, max(sizes) - len(mine))))
    return torch.cat([piece[:size] for piece, size in zip(pieces, sizes)]) / world_size


def mean_reversed(tensor):
    """Wrong: concatenates the gathered entries last rank first."""
    world_size = dist.get_world_size()
    sizes = [len(c) for c in tensor.tensor_split(world_size)]
    return torch.cat(list(reversed(all_reduce_mean(tensor).split(sizes))))


def mean_joined_from_own_entry(tensor):
    """Wrong: concatenates the gathered entries starting from this rank's own (rank 0's result is right)."""
    world_size, rank = dist.get_world_size(), dist.get_rank()
    pieces = all_reduce_mean(tensor).split([len(c) for c in tensor.tensor_split(world_size)])
    return torch.cat([pieces[(rank + k) % world_size] for k in range(world_size)])


def mean_pads_to_four(tensor):
    """Wrong: pads every reduced chunk to 4 elements, a size written as a number (the largest chunk of 12 and of 10
    elements on 3 ranks), not the largest chunk of this tensor."""
    world_size = dist.get_world_size()
    sizes = [len(c) for c in tensor.tensor_split(world_size)]
    mine = ring_reduce_scatter(tensor)[dist.get_rank()]
    padded = torch.zeros(4)
    padded[:len(mine)] = mine
    return torch.cat([piece[:size] for piece, size in zip(_gather(padded), sizes)]) / world_size


def mean_pads_by_four(tensor):
    """Wrong: F.pad to 4 elements, a size written as a number: for a chunk longer than 4 the pad is negative, which
    cuts the chunk to 4 elements instead."""
    world_size = dist.get_world_size()
    sizes = [len(c) for c in tensor.tensor_split(world_size)]
    mine = ring_reduce_scatter(tensor)[dist.get_rank()]
    pieces = _gather(torch.nn.functional.pad(mine, (0, 4 - len(mine))))
    return torch.cat([piece[:size] for piece, size in zip(pieces, sizes)]) / world_size


def mean_floor_divided(tensor):
    """Wrong: divides with //, which floors a tensor's values."""
    return all_reduce_mean(tensor, divide=False) // dist.get_world_size()


def mean_before_exercise_1(tensor):
    """Exercise 3 written while exercise 1 is still the stub: the message names the stub."""
    return rs_stub(tensor)


def mean_stacked(tensor):
    """Wrong: torch.stack of the cut entries where cat is meant (stack works only where the chunks are equal: 12)."""
    world_size = dist.get_world_size()
    sizes = [len(c) for c in tensor.tensor_split(world_size)]
    pieces = all_reduce_mean(tensor).split(sizes)
    return torch.stack(pieces) if len(set(sizes)) == 1 else torch.cat(pieces)


def mean_in_float64(tensor):
    """Wrong: the padding made as float64, so the gathered entries and the mean are float64."""
    world_size = dist.get_world_size()
    sizes = [len(c) for c in tensor.tensor_split(world_size)]
    mine = ring_reduce_scatter(tensor)[dist.get_rank()]
    padded = torch.zeros(sizes[0], dtype=torch.float64)
    padded[:len(mine)] = mine
    return torch.cat([piece[:size] for piece, size in zip(_gather(padded), sizes)]) / world_size


def mean_in_half(tensor):
    """Wrong: the whole average run in float16, the result converted back."""
    return all_reduce_mean(tensor.half()).float()


def mean_padded_past_the_largest_chunk(tensor):
    """Right: every chunk padded to len(tensor) // world_size + 1 elements, at least the largest chunk."""
    world_size = dist.get_world_size()
    sizes = [len(c) for c in tensor.tensor_split(world_size)]
    mine = ring_reduce_scatter(tensor)[dist.get_rank()]
    padded = torch.zeros(len(tensor) // world_size + 1, dtype=tensor.dtype)
    padded[:len(mine)] = mine
    return torch.cat([piece[:size] for piece, size in zip(_gather(padded), sizes)]) / world_size


MEAN_RETURNING = {   # wrong answers that return: one launch for all of them
    mean_sum: r"rank 0, tensor of 12 .*\nHint: you returned the SUM over ranks",
    mean_without_all_gather: r"got a tensor of shape \(4,\) .*\nHint: that is chunk 0 only, .* The all-gather "
                             r"phase is missing",
    mean_padding_kept: r"tensor of 10 elements .*\nHint: 12 = 3 x 4 elements for a tensor of 10: the padding is "
                       r"still there",
    mean_lesson_layout: r"tensor of 12 .*\nHint: every chunk is right but in the wrong place \(position 0 holds "
                        r"chunk 1",
    mean_divided_twice: r"(?s)Hint: this is the mean divided by the world size again",
    mean_trims_the_tail: r"(?s)tensor of 10 elements.*Hint: the padding of the short chunks is inside the result.*"
                         r"Either the padding was cut from the end of the concatenation only, or each entry was cut "
                         r"to sizes other than tensor_split's \[4, 3, 3\] \(tensor\.chunk's are \[4, 4, 2\]\)",
    mean_chunk_sizes: r"(?s)tensor of 10 elements.*Hint: the padding of the short chunks is inside the result.*"
                      r"Either the padding was cut from the end of the concatenation only, or each entry was cut to "
                      r"sizes other than tensor_split's \[4, 3, 3\] \(tensor\.chunk's are \[4, 4, 2\]\)",
    mean_reversed: r"(?s)Hint: every chunk is right but in the wrong place \(position 0 holds chunk 2, position 2 "
                   r"holds chunk 0\): entry k of ring_all_gather's list is rank k's chunk; concatenate",
    # rank 1's result is shifted by one, as the lesson's layout shifts every rank's; rank 0's is right here
    mean_joined_from_own_entry: r"(?s)^rank 1, tensor of 12 .*Hint: every chunk is right but in the wrong place .*: "
                                r"the entries were joined starting from this rank's own \(entry 1\), where rank 0's "
                                r"result, which starts from entry 0, is right",
    mean_pads_by_four: r"(?s)rank 0, tensor of 16 elements.*got a tensor of shape \(12,\).*\nHint: every entry holds "
                       r"only the first 4 elements of its chunk .* 4 is the largest chunk of 12 and of 10 "
                       r"elements, which passed",
    mean_floor_divided: r"rank 0, tensor of 12 .*\nHint: these are the mean's values rounded down to whole numbers: "
                        r"`//` on tensors floors their values .*Divide with `/`\.$",
    mean_stacked: r"^rank 0, tensor of 12 .*got a tensor of shape \(3, 4\).*\nHint: the 12 values are right, in the "
                  r"shape \(3, 4\): return them as one 1-D tensor of shape \(12,\), the chunks joined end to end with "
                  r"torch\.cat \(torch\.stack puts them in a new dimension\)\.$",
    mean_in_float64: r"^rank 0, tensor of 12 elements on 3 ranks: the mean is right, but returned as a tensor of shape "
                     r"\(12,\) and dtype torch\.float64; expected torch\.float32, the input's dtype\.\nHint: "
                     r"dist\.all_reduce keeps the input's dtype",
    mean_in_half: r"^rank 0, tensor of 12 elements on 3 ranks, element \d+: expected the mean .*\nHint: every element "
                  r"is within [\d.]+% of the expected value, but float32 arithmetic",
}


@pytest.fixture(scope="module")
def mean_results():
    answers = (*MEAN_RETURNING, mean_padded_past_the_largest_chunk)
    return dict(zip(answers, run_answers(_reduce_runner, answers, (REDUCE_SIZES, 3, "averaging"), name="mean")))


@pytest.mark.parametrize("wrong", MEAN_RETURNING, ids=lambda answer: answer.__name__)
def test_all_reduce_mean_names_wrong_results(wrong, mean_results):
    with pytest.raises(CheckFailed, match=MEAN_RETURNING[wrong]):
        judge_all_reduce_mean(wrong.__name__, mean_results[wrong])


def test_all_reduce_mean_accepts_a_padding_longer_than_the_largest_chunk(mean_results):
    answer = mean_padded_past_the_largest_chunk
    assert judge_all_reduce_mean(answer.__name__, mean_results[answer]).startswith(answer.__name__)


@pytest.mark.parametrize("wrong, feedback", [   # a crash (gloo's size mismatch) ends its launch; a stub starts none
    (mean_without_padding, r"(?s)rank \d failed while running mean_without_padding: .*SIGABRT.*\n"
                           r"Hint: a recv received a message of another size than its buffer.* pad every reduced "
                           r"chunk with zeros"),
    (mean_pads_to_four, r"(?s)rank \d: mean_pads_to_four raised RuntimeError.*while averaging a tensor of 16 elements "
                        r"on 3 ranks\..*\nHint: tensor_split's chunks of 16 elements on 3 ranks have \[6, 5, 5\] "
                        r"elements: up to 6, more than any chunk of the sizes before it \(12, 10, 7, 2: at most 4\)"),
    (mean_before_exercise_1, r"^rs_stub \(called by mean_before_exercise_1\) is not written yet"),
])
def test_all_reduce_mean_rejects(wrong, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_all_reduce_mean(wrong)


@pytest.mark.parametrize("abort", [
    # torch 2.8.0's rank output (the failed condition alone), then 2.13.0's and 2.15.0's
    "what():  [enforce fail at gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. 16 vs 12\n",
    "what():  [enforce fail at gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. 16 vs 12. "
    "Received data size doesn't match expected size. Is there a distributed collective mismatch in your code?\n",
])
def test_the_size_mismatch_hint_knows_gloos_abort_on_every_torch_in_the_range(abort):
    """mean_without_padding above proves the hint on the running torch; these are the abort lines the
    ranks print across the declared range, so CI on the pinned torch also covers the oldest one."""
    assert _recv_got_another_size(f"terminate called after throwing an instance of 'gloo::EnforceNotMet'\n  {abort}")
    assert not _recv_got_another_size("RuntimeError: Connection closed by peer [127.0.0.1]:29500\n")


def rs_world_written(tensor):
    """Wrong: the ring's size written in, the check's 3 ranks."""
    rank = dist.get_rank()
    chunks = list(torch.tensor_split(tensor, 3))
    for step in range(2):
        send, recv = (rank - step) % 3, (rank - step - 1) % 3
        incoming = torch.empty_like(chunks[recv])
        request = dist.isend(chunks[send], dst=(rank + 1) % 3)
        dist.recv(incoming, src=(rank - 1) % 3)
        request.wait()
        chunks[recv] += incoming
    return chunks[(rank + 1) % 3]


def test_a_ring_taken_modulo_a_written_world_size_is_refused_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(lesson02, "run_on_ranks", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^rs_world_written takes a rank modulo 3, a number written in the code "
                                          r"\(`send, recv = \(rank - step\) % 3, \(rank - step - 1\) % 3`\)\.\n"
                                          r"Hint: take it modulo the world size, dist\.get_world_size\(\)"):
        check_ring_reduce_scatter(rs_world_written)


def rs_world_size_less_one_written(tensor):
    """Wrong: the ring's indices with world_size - 1 written as 2 (the check's 3 ranks): (rank + 2 - step) equals
    (rank - 1 - step) modulo 3 only."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = list(torch.tensor_split(tensor, world_size))
    for step in range(world_size - 1):
        _ring_step(chunks, (rank + 2 - step) % world_size, (rank + 1 - step) % world_size)
    return chunks[rank]


def test_an_answer_right_on_3_ranks_only_is_run_again_on_4_and_told_so():
    assert lesson02.SECOND_WORLD_SIZE == 4
    with pytest.raises(CheckFailed, match=r"(?s)^rs_world_size_less_one_written is right on 3 ranks, but not on 4, the "
                                          r"check's second run: something in it holds on 3 ranks only, such as a "
                                          r"number written for them \(2 for world_size - 1, 3 for world_size\)\. On 4 "
                                          r"ranks: .*rank 0"):
        check_ring_reduce_scatter(rs_world_size_less_one_written)


def mean_divided_by_3(tensor):
    """Wrong: the sum divided by 3, the check's world size written in."""
    return all_reduce_mean(tensor, divide=False) / 3


def test_a_mean_over_a_written_world_size_is_told_on_the_second_run():
    with pytest.raises(CheckFailed, match=r"(?s)^mean_divided_by_3 is right on 3 ranks, but not on 4, the check's "
                                          r"second run: .*On 4 ranks: rank 0, "):
        check_all_reduce_mean(mean_divided_by_3)


def rs_buffers_in_the_default_dtype(tensor):
    """Wrong: receive buffers made with torch.zeros(n): float32 whatever the tensor is (right on float32 only)."""
    return ring_reduce_scatter(tensor, buffer=lambda chunk: torch.zeros(len(chunk)))[dist.get_rank()]


def gather_buffers_in_the_default_dtype(tensor):
    """Wrong: the gathered list made with torch.zeros(n): float32 whatever the tensor is."""
    return ring_all_gather(tensor, buffer=lambda given: torch.zeros(given.numel()))


def rs_buffers_in_the_default_dtype_received_first(tensor):
    """Wrong, as above, with each step's irecv posted before its isend."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = list(torch.tensor_split(tensor, world_size))
    for step in range(world_size - 1):
        send, recv = (rank - step - 1) % world_size, (rank - step - 2) % world_size
        incoming = torch.zeros(len(chunks[recv]))
        arriving = dist.irecv(incoming, (rank - 1) % world_size)
        dist.isend(chunks[send].clone(), (rank + 1) % world_size).wait()
        arriving.wait()
        chunks[recv] = chunks[recv] + incoming
    return chunks[rank]


@pytest.mark.parametrize("check, answer, case", [
    (check_ring_reduce_scatter, rs_buffers_in_the_default_dtype, 11),
    (check_ring_reduce_scatter, rs_buffers_in_the_default_dtype_received_first, 11),
    (check_ring_all_gather, gather_buffers_in_the_default_dtype, 5)])
def test_a_receive_buffer_in_the_default_dtype_is_named_on_the_float64_case(check, answer, case):
    # right on the float32 cases; in the float64 case a message twice its buffer's bytes makes gloo abort the rank,
    # and the bytes name the dtype, not the chunk (the element counts are right)
    with pytest.raises(CheckFailed, match=rf"(?s)^rank \d failed while running {answer.__name__}: died with signal "
                                          rf"SIGABRT.*\nWhat the ranks did: in the case of {case} elements in float64, "
                                          rf"(\d+) bytes arrived in a receive whose buffer holds \d+: (\d) float64 "
                                          rf"values sent into a buffer of \2 float32 ones, and gloo aborted the rank\."
                                          rf"\nHint: a receive buffer must hold what its peer sends, in the tensor's "
                                          rf"own dtype"):
        check(answer)


def mean_counting_the_ranks_in_float32(tensor):
    """Right: a float32 counter passed once round the ring (every rank but 0 receives first) beside the float64
    sums: a receive in torch's default dtype that fits what its peer sends."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    count = torch.zeros(1)
    if rank == 0:
        dist.send(count + 1, (rank + 1) % world_size)
        dist.recv(count, (rank - 1) % world_size)
    else:
        dist.recv(count, (rank - 1) % world_size)
        dist.send(count + 1, (rank + 1) % world_size)
    return all_reduce_mean(tensor)


def test_a_float32_message_beside_the_float64_case_is_no_mistake(capsys):
    check_all_reduce_mean(mean_counting_the_ranks_in_float32)
    assert capsys.readouterr().out.startswith("✓ mean_counting_the_ranks_in_float32 equals dist.all_reduce")

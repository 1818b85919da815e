"""Tests of what every lesson's check shares (ddp_lab/checks/common.py): telling the exercise's unwritten stub from
torch's own NotImplementedError, and finding the learner's line in a chain of exceptions."""

import traceback

import pytest
import torch

from ddp_lab.checks.common import CheckFailed, answer_raised, call_case, parse_frames, run_on_ranks, your_frames


def stub(x):
    raise NotImplementedError("scale, then cast")


def fp8_arithmetic(x):
    return x.to(torch.float8_e4m3fn) * 2.0   # no FP8 multiply on a CPU: torch's C++ raises NotImplementedError


def _raised(fn):
    try:
        fn(torch.ones(2))
    except Exception as error:   # noqa: BLE001 - the error is what the test looks at
        return error
    pytest.skip(f"{fn.__name__} did not raise: this torch ({torch.__version__}) has the operator")


def test_torchs_notimplementederror_on_the_learners_line_is_not_the_stub():
    """An operator with no kernel for its inputs raises NotImplementedError from C++: the innermost Python frame is
    the learner's line that called it, yet the answer is written; it said "not written yet: replace the `raise
    NotImplementedError` line", which the learner does not have."""
    assert str(answer_raised("stub", _raised(stub), "x")).startswith("stub is not written yet: it raised")
    message = str(answer_raised("fp8_arithmetic", _raised(fp8_arithmetic), "casting x"))
    assert message.startswith("fp8_arithmetic raised NotImplementedError: ") and "not written yet" not in message
    assert "x.to(torch.float8_e4m3fn) * 2.0" in message


def _call_on_rank(rank, fn):
    return call_case(fn, "casting x", torch.ones(2))


def test_torchs_notimplementederror_on_a_rank_is_not_the_stub_either():
    _raised(fp8_arithmetic)
    with pytest.raises(CheckFailed) as caught:
        run_on_ranks(_call_on_rank, (fp8_arithmetic,), 1, 30, "fp8_arithmetic")
    message = str(caught.value)
    assert message.startswith("rank 0: fp8_arithmetic raised NotImplementedError") and "not written" not in message
    assert "x.to(torch.float8_e4m3fn) * 2.0" in message
    with pytest.raises(CheckFailed, match=r"^stub is not written yet: it raised NotImplementedError\('scale, then"):
        run_on_ranks(_call_on_rank, (stub,), 1, 30, "stub")


def handled_badly(x):
    try:
        return {}["scale"]
    except KeyError:
        raise ValueError("no scale given")


def test_the_frames_of_a_chain_are_those_of_the_exception_raised():
    """torch re-raises a KeyError as its own error while handling it (a DeviceMesh given as a group): the learner's
    line is in the last part of the traceback; the first part's frames were taken, and the line was lost."""
    text = "".join(traceback.format_exception(_raised(handled_badly)))
    assert "During handling of the above exception" in text
    assert [frame["fn"] for frame in parse_frames(text)][-1] == "handled_badly"
    assert "raise ValueError" in your_frames(text) and '{}["scale"]' not in your_frames(text)


def _waits(request):
    request.wait()   # the line a stuck rank's stack points at


def test_a_rank_stuck_in_a_works_wait_is_said_to_be():
    """A rank blocked in the .wait() of an isend or irecv is in no torch.distributed function: the hang's line says
    it waits there, not that it is 'outside torch.distributed' (its own code's line is read from linecache)."""
    from ddp_lab.checks.common import timeout_message
    from ddp_lab.launcher.errors import LaunchTimeout, RankFailure

    line = _waits.__code__.co_firstlineno + 1
    waiting = f'Current thread (most recent call first):\n  File "{__file__}", line {line} in _waits\n'
    elsewhere = f'Current thread (most recent call first):\n  File "{__file__}", line {line - 1} in _waits\n'
    failures = {0: RankFailure(0, "timeout", "", waiting), 1: RankFailure(1, "timeout", "", elsewhere)}
    message = timeout_message(LaunchTimeout("", failures, 0, ["", ""]), "ring", 2)
    assert "Stuck: rank 0 in .wait(), rank 1 outside torch.distributed.\n" in message, message


def _returns_the_divided_gradients(params, world_size):
    import torch.distributed as dist

    for p in params:
        dist.all_reduce(p.grad)
    return [p.grad / world_size for p in params]


def _returns_nothing_divided(params):
    return [p.grad for p in params]


def _divides_in_a_helper(params, world_size):
    import torch.distributed as dist

    def mean(p):
        return p.grad / world_size

    for p in params:
        dist.all_reduce(p.grad)
        p.grad = mean(p)


def test_a_division_returned_is_a_division_into_a_new_tensor():
    """The check reads the gradients, not what the answer returns: a returned division left them as the sum (the
    learner who wrote it was told to divide, though they had)."""
    from ddp_lab.checks.common import division_into_a_new_tensor

    assert division_into_a_new_tensor(_returns_the_divided_gradients) == "return [p.grad / world_size for p in params]"
    assert division_into_a_new_tensor(_returns_nothing_divided) is None
    assert division_into_a_new_tensor(_divides_in_a_helper) is None   # the helper's result is the new gradient


def _polls_and_takes_the_future(rank):
    """An all-reduce polled once (is_completed() while it runs) and one whose future is taken and dropped: neither
    waited for; then one waited for through its future."""
    import torch.distributed as dist

    from ddp_lab.instruments.collectives import watching_requests

    seen = []
    with watching_requests() as requests:
        works = [dist.all_reduce(torch.ones(1_000_000), async_op=True) for _ in range(3)]
        for number, work in enumerate(works):
            requests.watch(work, lambda number=number: seen.append(number))
        works[1].get_future()
        works[2].get_future().wait()
        works[0].is_completed()
        polled = seen[:]
    for work in works:
        work.wait()
    return polled


def _waits_through_torch_futures(rank):
    """Three all-reduces: two waited for together by torch.futures.wait_all over their futures, one by waiting for
    the future torch.futures.collect_all made of its own."""
    import torch.distributed as dist

    from ddp_lab.instruments.collectives import watching_requests

    seen = []
    with watching_requests() as requests:
        works = [dist.all_reduce(torch.ones(1000), async_op=True) for _ in range(3)]
        for number, work in enumerate(works):
            requests.watch(work, lambda number=number: seen.append(number))
        torch.futures.wait_all([work.get_future() for work in works[:2]])
        torch.futures.collect_all([works[2].get_future()]).wait()
    return sorted(seen)


def test_futures_waited_for_by_wait_all_or_collect_all_count_as_waited_for():
    """torch.futures.wait_all over the requests' futures, or a wait for the future collect_all makes of them, waits
    for them: an answer that waited so was refused as never having waited."""
    for seen in run_on_ranks(_waits_through_torch_futures, (), 2, 60, "watching_requests"):
        assert seen == [0, 1, 2], seen


def test_a_request_counts_as_waited_for_only_when_it_was():
    """is_completed() that answered False, or get_future() whose future nobody waited for, is not a wait: an answer
    that polled once and read the result while it was still on its way was taken as waiting (and then passed)."""
    for polled in run_on_ranks(_polls_and_takes_the_future, (), 2, 60, "watching_requests"):
        assert polled in ([2], [2, 0]), polled   # is_completed() counts once it answers True


def test_how_it_changed_names_the_first_element_changed_or_nothing():
    from ddp_lab.checks.common import how_it_changed
    original = torch.tensor([[1.0, 2.0], [3.0, -200.0]])
    assert how_it_changed(original.clone(), original) is None
    scaled = original.clone()
    scaled[1, 1] *= 2.24
    assert how_it_changed(scaled, original) == "x[1, 1] is now -448, was -200"
    assert how_it_changed(original[0], original).startswith("x is now a tensor of shape (2,)")

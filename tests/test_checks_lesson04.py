"""The lesson 04 checks accept a right answer and reject plausible wrong ones with specific feedback.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part
of the feedback that names it. The averaging answers run in one launch of 3 gloo ranks (the
check's own runner, then its judge), the synchronisation answers in one launch of 2.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from ddp_lab.checks import CheckFailed
from ddp_lab.checks import lesson04
from ddp_lab.checks.common import division_into_a_new_tensor, numeric_divisor
from ddp_lab.checks.lesson04 import check_average_gradients, check_sync_initial_state

# The right answers are proven once, by nbval of solutions/04-*.ipynb (its check cells store ✓):
# this file tries the wrong ones and the cases the solution does not cover.

DEADLOCK_TIMEOUT = 2.0   # seconds after every rank entered the answer (start-up has its own allowance)


# --- average_gradients ----------------------------------------------------------------------

def average_gradients(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def sum_without_dividing(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)


def divide_without_all_reduce(model):
    for p in model.parameters():
        p.grad /= dist.get_world_size()


def only_the_first_parameter(model):
    p = next(model.parameters())
    dist.all_reduce(p.grad)
    p.grad /= dist.get_world_size()


def average_the_parameters(model):
    for p in model.parameters():
        dist.all_reduce(p.data)
        p.data /= dist.get_world_size()


def reduce_op_avg(model):
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)


def divides_by_two(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= 2                                   # the world size written in


def reduces_a_copy(model):
    for p in model.parameters():
        dist.all_reduce(p.grad.clone())               # the sum lands in the copy
        p.grad /= dist.get_world_size()


def flat_buffer_not_copied_back(model):
    flat = torch.cat([p.grad.flatten() for p in model.parameters()])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()


def broadcasts_the_gradients(model):
    for p in model.parameters():
        dist.broadcast(p.grad, src=0)


def never_waits(model):
    for p in model.parameters():
        dist.all_reduce(p.grad, async_op=True)        # the work is dropped, never waited on
        p.grad /= dist.get_world_size()


def divides_into_a_local_name(model):
    for p in model.parameters():
        grad = p.grad
        dist.all_reduce(grad)
        grad = grad / dist.get_world_size()          # a new tensor: p.grad keeps the sum


def divides_by_three(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= 3                                   # the check's world size, written in


def only_rank_zero_reduces(model):
    if dist.get_rank() == 0:
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()


def averages_then_divides(model):
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)   # already the mean ...
        p.grad /= dist.get_world_size()                 # ... divided once more


def divides_before_and_after(model):
    for p in model.parameters():
        p.grad /= dist.get_world_size()
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def divides_before_the_all_reduce(model):
    """Right too: the sum of each rank's share is the mean."""
    for p in model.parameters():
        p.grad /= dist.get_world_size()
        dist.all_reduce(p.grad)


def flat_buffer_copied_back(model):
    """Right too: one all-reduce of a flat buffer, copied back into every p.grad."""
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([grad.flatten() for grad in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    for grad, piece in zip(grads, flat.split([grad.numel() for grad in grads])):
        grad.copy_(piece.view_as(grad))


def divides_out_of_place(model):
    """p.grad.div(n) as a statement: the quotient, a new tensor, is dropped."""
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad.div(dist.get_world_size())


def all_reduces_the_mean_again(model):
    """The mean, then one all_reduce more (a loop run twice, a second helper): the sum over ranks."""
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    for p in model.parameters():
        dist.all_reduce(p.grad)


def all_reduces_twice_then_divides(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def all_reduce_max(model):
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.MAX)
        p.grad /= dist.get_world_size()


def all_reduce_product(model):
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.PRODUCT)


def reduces_to_rank_zero(model):
    for p in model.parameters():
        dist.reduce(p.grad, dst=0)                    # the sum on rank 0 only
        p.grad /= dist.get_world_size()


def divides_by_the_number_of_parameters(model):
    params = list(model.parameters())
    for p in params:
        dist.all_reduce(p.grad)
        p.grad /= len(params)                         # the parameters counted, where the ranks belong


AVERAGE_ANSWERS = {   # all return (none raises or hangs): they run one after the other in one launch
    average_gradients: None,
    reduce_op_avg: None,           # gloo in this torch supports ReduceOp.AVG: also right
    divides_before_the_all_reduce: None,
    flat_buffer_copied_back: None,
    divides_by_the_number_of_parameters: r"(?s)this is the sum over the 3 ranks divided by \d+, the number of "
                                         r"parameters \(len\(params\)\)",
    averages_then_divides: r"(?s)this is the mean divided by 3 once more: the world size was divided out twice "
                           r"\(divide once, after a SUM; after ReduceOp\.AVG, which already gives the mean, not at "
                           r"all\)",
    # the same value without AVG: the hint states the rule, it does not say AVG was used
    divides_before_and_after: r"(?s)this is the mean divided by 3 once more: the world size was divided out twice",
    # another op than SUM: named, where it was 'expected the mean of the ranks' gradients'
    all_reduce_max: r"(?s)\nHint: this is the element-wise max over the ranks \(ReduceOp\.MAX\): the mean needs their "
                    r"SUM, dist\.all_reduce's default op \(ReduceOp\.SUM\), divided by the world size\.$",
    all_reduce_product: r"(?s)\nHint: this is the element-wise product over the ranks \(ReduceOp\.PRODUCT\)",
    # rank 0, dst, holds the mean; the others do not, and the dist.reduce on their p.grad is named
    reduces_to_rank_zero: r"(?s)^rank 1, gradient of '0\.weight': .*\nHint: dist\.reduce ran on this p\.grad: it "
                          r"delivers the sum to one rank, dst, only.*dist\.all_reduce\(p\.grad\), then divide",
    sum_without_dividing: r"(?s)this is the SUM over ranks.*divide by dist.get_world_size",
    # the sum again, but not for want of a division: each all_reduce sums once more
    all_reduces_the_mean_again: r"(?s)dist.all_reduce ran 2 times on this p.grad, and each call sums over the ranks "
                                r"again: all-reduce each gradient once, then divide it by the world size once\.$",
    all_reduces_twice_then_divides: r"(?s)dist.all_reduce ran 2 times on this p.grad",
    divide_without_all_reduce: r"(?s)divided by the world size: the all_reduce is missing",
    only_the_first_parameter: r"(?s)gradient of '1\.weight'.*still rank 0's own gradient",
    average_the_parameters: r"the parameters themselves were all-reduced",
    divides_by_two: r"(?s)element \[\d+(, \d+)?\] is .*, expected the mean over ranks .*the sum over the 3 ranks "
                    r"divided by 2: divide by dist.get_world_size\(\)",
    reduces_a_copy: r"(?s)dist.all_reduce ran, but never on a p.grad",
    flat_buffer_not_copied_back: r"(?s)dist.all_reduce ran, but never on a p.grad",
    broadcasts_the_gradients: r"(?s)dist.broadcast copies one rank's tensor to the others",
    divides_into_a_local_name: r"(?s)this is the SUM over ranks: your line `grad = grad / dist\.get_world_size\(\)` "
                               r"divides into a NEW tensor",
    divides_out_of_place: r"(?s)this is the SUM over ranks: your line `p\.grad\.div\(dist\.get_world_size\(\)\)` "
                          r"divides into a NEW tensor",
}


@pytest.fixture(scope="module")
def average_results():
    answers = tuple(AVERAGE_ANSWERS)
    return dict(zip(answers, lesson04.run_average_answers(answers)))


@pytest.mark.parametrize("answer", AVERAGE_ANSWERS, ids=lambda answer: answer.__name__)
def test_average_gradients_feedback(answer, average_results):
    feedback = AVERAGE_ANSWERS[answer]
    if feedback is None:
        assert lesson04.judge_average_gradients(answer.__name__, average_results[answer]).startswith(
            f"{answer.__name__}: every gradient on every rank is the mean over 3 ranks")
    else:
        with pytest.raises(CheckFailed, match=feedback):
            lesson04.judge_average_gradients(answer.__name__, average_results[answer],
                                             division_into_a_new_tensor(answer))


def test_average_gradients_refuses_a_divisor_written_as_a_number_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(lesson04, "run_average_answers", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^divides_by_three divides a gradient by 3, a number written in the code "
                                          r"\(`p\.grad /= 3`\)\.\nHint: divide by dist\.get_world_size\(\)"):
        check_average_gradients(divides_by_three)


def multiplies_by_a_third(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad *= 1 / 3                               # the reciprocal of the check's world size


def multiplies_by_a_third_into_itself(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        torch.mul(p.grad, 1 / 3, out=p.grad)


def divides_by_a_name_bound_to_three(model):
    world = 3                                         # the check's world size, written once
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world


@pytest.mark.parametrize("answer, quoted", [
    (multiplies_by_a_third, r"`p\.grad \*= 1 / 3`"),
    (multiplies_by_a_third_into_itself, r"`torch\.mul\(p\.grad, 1 / 3, out=p\.grad\)`"),
    (divides_by_a_name_bound_to_three, r"`world = 3`, then `p\.grad /= world`"),
])
def test_a_written_world_size_is_refused_however_it_divides(answer, quoted, monkeypatch):
    monkeypatch.setattr(lesson04, "run_average_answers", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=rf"^{answer.__name__} divides a gradient by 3, a number written in the code "
                                          rf"\({quoted}\)\.\nHint: divide by dist\.get_world_size\(\)"):
        check_average_gradients(answer)


RANKS_IN_THE_CHECK = 3   # a number the notebook may hold in a variable of its own


def divides_by_a_module_constant(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= RANKS_IN_THE_CHECK                  # the check's world size, from a global: it passed


def test_a_world_size_read_from_a_global_number_is_refused_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(lesson04, "run_average_answers", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^divides_by_a_module_constant divides a gradient by RANKS_IN_THE_CHECK = "
                                          r"3, computed from constants alone \(`p\.grad /= RANKS_IN_THE_CHECK`\): "
                                          r"nothing in it changes with the number of ranks\.\nHint: divide by "
                                          r"dist\.get_world_size\(\)"):
        check_average_gradients(divides_by_a_module_constant)


def test_an_all_reduce_never_waited_is_refused_when_the_means_come_out_right(average_results):
    """The right-by-luck path of the test below, pinned: the evidence put into a right answer's records."""
    right = average_results[average_gradients]
    assert not any(any(result["unwaited"]) for result in right)
    by_luck = [dict(result) for result in right]
    by_luck[2]["unwaited"] = [False, True, False, False, False, False]
    with pytest.raises(CheckFailed, match=r"(?s)^rank 2, gradient of '0\.bias': the mean came out right here, but by luck: "
                                          r"dist\.all_reduce\(p\.grad, async_op=True\) returned a work that was never "
                                          r"waited for.*\.wait\(\) before the gradient is divided\.$"):
        lesson04.judge_average_gradients("average_gradients", by_luck)


def test_average_gradients_names_an_all_reduce_never_waited_on():
    # async_op=True and no .wait(): on gloo the sum may or may not have landed when the gradient is divided; either
    # way the work never waited for is named (it passed when the sums had landed, and got another hint when some had)
    with pytest.raises(CheckFailed, match=r"(?s)^rank \d, gradient of '[\w.]+': (element .*Hint: dist\.all_reduce was "
                                          r"called on p\.grad, but its sum was not there|the mean came out right here, "
                                          r"but by luck).*\.wait\(\)"):
        check_average_gradients(never_waits)


def test_average_gradients_ends_a_deadlock_with_a_message():
    with pytest.raises(CheckFailed, match=r"(?s)did not finish within 2 s.*rank 0 in dist.all_reduce.*every rank"):
        check_average_gradients(only_rank_zero_reduces, timeout=DEADLOCK_TIMEOUT)


def reverses_the_order_on_odd_ranks(model):
    params = list(model.parameters())
    for p in params[::-1] if dist.get_rank() % 2 else params:
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def buffers_first_on_other_ranks(model):
    tensors = list(model.parameters()) + list(model.buffers())
    if dist.get_rank() != 0:
        tensors = list(model.buffers()) + list(model.parameters())
    for tensor in tensors:
        dist.broadcast(tensor.data, src=0)


@pytest.mark.parametrize("check, answer, collective", [
    (check_average_gradients, reverses_the_order_on_odd_ranks, "all_reduce"),
    (check_sync_initial_state, buffers_first_on_other_ranks, "broadcast"),
])
def test_collectives_in_another_order_on_some_rank_name_the_order(check, answer, collective):
    """Ranks that pass their tensors in different orders pair tensors of different sizes, and gloo aborts a rank
    (SIGABRT): the crash is named as such, not left as a stack."""
    with pytest.raises(CheckFailed, match=rf"(?s)with signal SIGABRT.*\nHint: gloo aborted the rank: \d+ bytes arrived "
                                          rf"in a dist\.{collective} whose tensor holds \d+, so the ranks' "
                                          rf"dist\.{collective} calls paired tensors of different sizes.*in the same "
                                          rf"order on every rank\.$"):
        check(answer, timeout=DEADLOCK_TIMEOUT)


# --- sync_initial_state ---------------------------------------------------------------------

def sync_initial_state(model):
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(tensor.data, src=0)


def parameters_only(model):
    for p in model.parameters():
        dist.broadcast(p.data, src=0)


def average_instead_of_broadcast(model):
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            if tensor.is_floating_point():
                dist.all_reduce(tensor)
                tensor /= dist.get_world_size()


def broadcast_from_the_last_rank(model):
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(tensor.data, src=dist.get_world_size() - 1)


def do_nothing(model):
    pass


def floating_point_buffers_only(model):
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            if tensor.is_floating_point():           # num_batches_tracked (int64) left behind
                dist.broadcast(tensor.data, src=0)


def broadcasts_clones(model):
    for tensor in list(model.parameters()) + list(model.buffers()):
        dist.broadcast(tensor.data.clone(), src=0)   # rank 0's values land in the copies


def broadcasts_a_flat_vector(model):
    flat = torch.nn.utils.parameters_to_vector(model.parameters())
    dist.broadcast(flat, src=0)                      # never copied back (vector_to_parameters)
    for buffer in model.buffers():
        dist.broadcast(buffer, src=0)


def broadcasts_the_state_dict(model):
    """Right too: state_dict()'s tensors share storage with the parameters and buffers."""
    for tensor in model.state_dict().values():
        dist.broadcast(tensor, src=0)


def sends_from_rank_zero(model):
    """Right too: rank 0 sends every tensor to every other rank."""
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            if dist.get_rank() == 0:
                for peer in range(1, dist.get_world_size()):
                    dist.send(tensor.data, dst=peer)
            else:
                dist.recv(tensor.data, src=0)


def broadcasts_without_waiting(model):
    """async_op=True and no .wait(): rank 0's values arrive after the function returned (rank 0 starts its
    broadcasts late here, so that they surely do)."""
    if dist.get_rank() == 0:
        time.sleep(0.5)
    for tensor in list(model.parameters()) + list(model.buffers()):
        dist.broadcast(tensor.data, src=0, async_op=True)


def loads_a_broadcast_state_dict(model):
    """Right too: rank 0's state_dict sent as an object, loaded into the model."""
    objects = [model.state_dict() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(objects, src=0)
    model.load_state_dict(objects[0])


def broadcasts_a_state_dict_never_loaded(model):
    objects = [model.state_dict() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(objects, src=0)    # rank 0's tensors arrive in objects[0], never loaded


SYNC_ANSWERS = {   # all return (none raises or hangs): they run one after the other in one launch of 2 ranks
    broadcasts_the_state_dict: None,
    sends_from_rank_zero: None,
    loads_a_broadcast_state_dict: None,
    # its broadcast_object_list runs dist.broadcast on a byte tensor: not 'dist.broadcast ran, never into this'
    broadcasts_a_state_dict_never_loaded: r"(?s)^rank 1, parameter '0\.weight': .*\nHint: dist\.broadcast_object_list "
                                          r"ran on rank 1, but rank 0's objects arrive in the list it is given.*"
                                          r"model\.load_state_dict\(objects\[0\]\)",
    parameters_only: r"(?s)buffer '1.running_mean'.*broadcast model.buffers\(\)",
    average_instead_of_broadcast: r"(?s)average over ranks.*not all_reduce",
    broadcast_from_the_last_rank: r"(?s)rank 0 now holds rank 1's value.*src=0",
    do_nothing: r"(?s)rank 1 kept its own starting value",
    floating_point_buffers_only: r"(?s)rank 1, buffer '1.num_batches_tracked'.*the floating-point buffers arrived but "
                                 r"'1.num_batches_tracked' \(torch.int64\) did not",
    broadcasts_clones: r"(?s)^rank 1, parameter '0\.weight': got .*\nHint: dist\.broadcast ran on rank 1, but never "
                       r"into this parameter: a broadcast writes into the tensor it is given",
    broadcasts_a_flat_vector: r"(?s)^rank 1, parameter '0\.weight': .*\nHint: dist\.broadcast ran on rank 1, but "
                              r"never into this parameter",
    # last: its broadcasts complete after it returned (whether rank 0's values have arrived when rank 1 reads them
    # depends on timing: which entry shows it first, or none, when they are right by luck and refused all the same)
    broadcasts_without_waiting: r"(?s)^rank 1, (parameter|buffer) '[\w.]+': (got .*\nHint: dist\.broadcast was "
                                r"called on this (parameter|buffer), but rank 0's value had not arrived|the value came "
                                r"out right here, but by luck: dist\.broadcast on this (parameter|buffer) "
                                r"\(async_op=True\) returned a work that was never waited for).*\.wait\(\)",
}


@pytest.fixture(scope="module")
def sync_results():
    answers = tuple(SYNC_ANSWERS)
    return dict(zip(answers, lesson04.run_sync_answers(answers)))


@pytest.mark.parametrize("answer", SYNC_ANSWERS, ids=lambda answer: answer.__name__)
def test_sync_initial_state_feedback(answer, sync_results):
    feedback = SYNC_ANSWERS[answer]
    if feedback is None:
        assert lesson04.judge_sync_initial_state(answer.__name__, sync_results[answer]) == (
            f"{answer.__name__}: every rank holds rank 0's parameters and buffers")
    else:
        with pytest.raises(CheckFailed, match=feedback):
            lesson04.judge_sync_initial_state(answer.__name__, sync_results[answer])



def test_a_broadcast_never_waited_is_refused_when_the_values_come_out_right(sync_results):
    """Whether an unwaited async broadcast has landed when the state is read depends on timing: an answer right by
    luck is refused all the same, from the work never waited for."""
    right = sync_results[broadcasts_the_state_dict]
    assert not any(result["unwaited"] or result["unwaited_elsewhere"] for result in right)
    assert all(result["unwaited"] == set(result["state"]) for result in sync_results[broadcasts_without_waiting])
    by_luck = [dict(result) for result in right]
    by_luck[1]["unwaited"] = {"1.running_var", "0.bias"}
    with pytest.raises(CheckFailed, match=r"^rank 1, parameter '0\.bias': the value came out right here, but by "
                                          r"luck: dist\.broadcast on this parameter \(async_op=True\) returned a work "
                                          r"that was never waited for, and whether its result arrives before "
                                          r"broadcasts_the_state_dict returns depends on timing\.\nHint: .*call its "
                                          r"\.wait\(\) before broadcasts_the_state_dict returns"):
        lesson04.judge_sync_initial_state("broadcasts_the_state_dict", by_luck)
    by_luck[1]["unwaited"], by_luck[0]["unwaited_elsewhere"] = set(), 1   # into a copy, on the sending rank
    with pytest.raises(CheckFailed, match=r"^rank 0: dist\.broadcast\(\.\.\., async_op=True\) was called on a tensor "
                                          r"that is not the model's own and the work it returned was never waited "
                                          r"for, so the values may still be on their way to the other ranks"):
        lesson04.judge_sync_initial_state("broadcasts_the_state_dict", by_luck)


def broadcast_from_its_own_rank(model):
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(tensor.data, src=dist.get_rank())   # every rank the source: they never pair up


def only_rank_zero_broadcasts(model):
    if dist.get_rank() == 0:
        for tensor in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(tensor.data, src=0)


def test_sync_initial_state_names_ranks_that_disagree_on_src_at_once():
    """Every rank calls dist.broadcast, each with its own rank as src: the ranks stop together at the first one,
    with the srcs they gave, instead of waiting out the timeout and blaming a broadcast made on only some ranks."""
    start = time.monotonic()
    with pytest.raises(CheckFailed) as failure:
        check_sync_initial_state(broadcast_from_its_own_rank, timeout=30.0)
    elapsed = time.monotonic() - start
    message = str(failure.value)
    assert message.startswith("the ranks called dist.broadcast with different src (rank 0 src=0, rank 1 src=1).\n"
                              "Hint: a broadcast needs the same src on every rank"), message
    assert "the rank whose values everyone receives (src=0 here)" in message
    assert "not only on some ranks" not in message and "did not finish" not in message
    assert elapsed < 15.0, f"took {elapsed:.1f} s: the ranks waited for the timeout instead of stopping together"


def test_sync_initial_state_still_ends_a_broadcast_skipped_on_a_rank_with_a_message():
    """The src exchange before each broadcast meets a rank that returned without one, so the skipping answer still
    waits in dist.broadcast itself (not in the exchange) and gets the deadlock message."""
    with pytest.raises(CheckFailed, match=r"(?s)did not finish within 2 s, .* Stuck: rank 0 in dist\.broadcast\.\n"
                                          r"Hint: .*call dist\.broadcast on every rank.*not only on some ranks"):
        check_sync_initial_state(only_rank_zero_broadcasts, timeout=DEADLOCK_TIMEOUT)

# --- the exercise's stubs ------------------------------------------------------------------------

def average_gradients_stub(model):
    raise NotImplementedError("sum over the ranks, then divide")


def sync_initial_state_stub(model):
    raise NotImplementedError("broadcast from rank 0")


@pytest.mark.parametrize("check, stub", [(check_average_gradients, average_gradients_stub),
                                         (check_sync_initial_state, sync_initial_state_stub)])
def test_a_stub_is_named_not_written_before_any_rank_starts(check, stub, monkeypatch):
    """An unsolved exercise's check answers at once (what Run All on the exercise meets): a stub is not run on ranks."""
    monkeypatch.setattr(lesson04, "run_answers_on_ranks", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=rf"^{stub.__name__} is not written yet: it raised NotImplementedError"):
        check(stub)


def reduces_and_divides_on_one_line(model):
    for p in model.parameters():
        dist.all_reduce(p.grad); p.grad /= 3   # noqa: E702


def test_the_divisor_is_quoted_in_its_own_statement():
    assert numeric_divisor(reduces_and_divides_on_one_line) == ("3", "p.grad /= 3")



def _writes_the_divided_copy_back(model):
    n = dist.get_world_size()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        g = p.grad.clone()
        g /= n
        p.grad.copy_(g)
        dist.all_reduce(p.grad)          # the mistake: a second all-reduce after the mean


def _rebinds_the_divided_copy(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad = p.grad.clone().div_(dist.get_world_size())


def _divides_a_copy_only(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        g = p.grad.clone()
        g /= dist.get_world_size()


def test_a_divided_copy_written_back_into_the_gradient_is_no_new_tensor():
    """The copy detector's evidence holds only where nothing is written into a gradient: a copy divided and then
    copied back (p.grad.copy_(g)) or bound to p.grad is the gradient itself, so the "divides into a NEW tensor" hint
    must not name it; a copy divided and dropped still is."""
    assert division_into_a_new_tensor(_writes_the_divided_copy_back) is None
    assert division_into_a_new_tensor(_rebinds_the_divided_copy) is None
    assert division_into_a_new_tensor(_divides_a_copy_only) == "g = p.grad.clone(); g /= dist.get_world_size()"

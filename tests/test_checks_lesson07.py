"""The lesson 07 checks accept a right answer and reject plausible wrong ones with specific feedback.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part of
the feedback that names it. The 1F1B answers that return run in one launch of 3 gloo ranks (the
check's own runner, then its judge: 3 stages, then 2 stages on ranks 0 and 1); the others go
through the check itself, a launch each: the raising ones, and the hanging ones, which run into a
3 s timeout (a blocking send, an isend waited on at once, a send to a rank that does not exist,
warm-up counts that make neighbours wait for each other); those that fail on the second run only
(a last stage written as rank 2, a count of micro-batches written as 4) get 10 s, so that the
first run surely ends before it. The hangs whose evidence is a peer that returned are judged from
logs written as the ranks write them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddp_lab.checks import CheckFailed
from ddp_lab.checks import lesson07
from ddp_lab.checks.lesson07 import CASES, MICROBATCHES, check_idle_fraction, check_one_f_one_b_stage
from ddp_lab.checks.p2p_log import log_path
from ddp_lab.course.pipeline_parallel.schedules import Span

DEADLOCK_TIMEOUT = 2.0   # seconds after every rank entered the answer (start-up has its own allowance)
# for an answer whose first run must finish before the launch stops: the two groups' set-up and the 3-stage run
# count in the timeout, and take seconds on a loaded 2-core machine
FIRST_RUN_TIMEOUT = 10.0


# --- one_f_one_b_stage ----------------------------------------------------------------------

def make_stage_answer(*, scale=True, blocking=False, grad_peer=-1, warmup=None, mark_input=True, wait_now=False,
                      grad_divisor=1, zero_each=False, return_undivided=False, last_rank=None, microbatches=None,
                      drop_handles=False, irecv_unwaited=False, recv_any_source=False, batched=False,
                      divide_by=None, summed_errors=False, return_sum=False, forward_sends_kept=False,
                      one_buffer=False, keep_detached=False):
    """A 1F1B stage with one mistake switched on (the defaults give the right answer). `wait_now`: each isend's
    .wait() right after it starts, a blocking send in disguise. `zero_each`: the stage's gradients zeroed before
    every micro-batch's backward. `return_undivided`: backward on the divided loss, the undivided one returned.
    `last_rank`, `microbatches`: the last stage's rank and the number of micro-batches written as numbers.
    `drop_handles`: isend's handles never kept. `irecv_unwaited`: receives with dist.irecv, never waited for.
    `recv_any_source`: dist.recv without src (whichever neighbour sends first). `batched`: every send and receive
    through dist.batch_isend_irecv (P2POp names the peer; right). `divide_by(m, world_size)`: what each micro-batch's
    loss is divided by instead of m. `summed_errors`: the squared errors summed, not averaged. `return_sum`: the
    last stage returns the sum of its losses, a tensor of no dimension, instead of their list. `forward_sends_kept`:
    the handles of the sends to rank + 1 kept but never waited for (each is delivered all the same: the gradient
    received back for that micro-batch follows it), those of the sends to rank - 1 waited for. `one_buffer`: every
    activation received into one buffer made once (the next receive overwrites what a held micro-batch saved).
    `keep_detached`: the detached output (what is sent) kept for backward."""

    def one_f_one_b_stage(stage, inputs, targets):
        rank, world_size = dist.get_rank(), dist.get_world_size()
        first, last = rank == 0, rank == (world_size - 1 if last_rank is None else last_rank)
        m, shape = len(inputs) if microbatches is None else microbatches, inputs[0].shape
        saved, sends, losses, kept = {}, [], [], []
        buffer = torch.empty(inputs[0].shape)

        def send(tensor, dst):
            if batched:
                sends.extend(dist.batch_isend_irecv([dist.P2POp(dist.isend, tensor, dst)]))
            elif blocking:
                dist.send(tensor, dst=dst)
            elif wait_now:
                dist.isend(tensor, dst=dst).wait()
            elif drop_handles:
                dist.isend(tensor, dst=dst)
            elif forward_sends_kept and dst == rank + 1:
                kept.append(dist.isend(tensor, dst=dst))
            else:
                sends.append(dist.isend(tensor, dst=dst))

        def receive(tensor, src):
            if batched:
                for work in dist.batch_isend_irecv([dist.P2POp(dist.irecv, tensor, src)]):
                    work.wait()
            elif irecv_unwaited:
                dist.irecv(tensor, src=src)
            elif recv_any_source:
                dist.recv(tensor)
            else:
                dist.recv(tensor, src=src)

        def forward(i):
            if first:
                x = inputs[i]
            else:
                x = buffer if one_buffer else torch.empty(shape)
                receive(x, rank - 1)
                if mark_input:
                    x.requires_grad_()
            out = stage(x)
            if last:
                undivided = F.mse_loss(out, targets[i], reduction="sum" if summed_errors else "mean")
                out = undivided / (divide_by(m, world_size) if divide_by else m if scale else 1)
                losses.append((undivided if return_undivided else out).detach())
            else:
                send(out.detach(), rank + 1)
                if keep_detached:
                    out = out.detach()
            saved[i] = (x, out)

        def backward(i):
            x, out = saved.pop(i)
            if zero_each:
                stage.zero_grad()
            grad = None
            if not last:
                grad = torch.empty(shape)
                receive(grad, rank + 1)
            out.backward(grad)
            if not first:
                if grad_divisor != 1:
                    x.grad /= grad_divisor
                send(x.grad, rank + grad_peer)

        w = min(world_size - rank - 1, m) if warmup is None else min(warmup(m, rank, world_size), m)
        for i in range(w):
            forward(i)
        for i in range(w, m):
            forward(i)
            backward(i - w)
        for i in range(m - w, m):
            backward(i)
        for work in sends:
            work.wait()
        return sum(losses) if return_sum and losses else losses

    return one_f_one_b_stage


def blank_stage(stage, inputs, targets):
    raise NotImplementedError("write forward(i) and backward(i) helpers")


def test_one_f_one_b_accepts_the_right_answer(capsys):
    answer = make_stage_answer()
    check_one_f_one_b_stage(answer)
    assert "✓ one_f_one_b_stage" in capsys.readouterr().out


def test_one_f_one_b_blank_says_not_written():
    with pytest.raises(CheckFailed, match=r"not written yet.*NotImplementedError"):
        check_one_f_one_b_stage(blank_stage)


def stub_with_its_preamble(stage, inputs, targets):
    """The exercise's stub: it names the rank and the shapes, then raises (the raise can never be skipped)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    first, last = rank == 0, rank == world_size - 1
    raise NotImplementedError("write forward(i) and backward(i) helpers")


def answers_only_the_last_stage(stage, inputs, targets):
    if dist.get_rank() == dist.get_world_size() - 1:
        return []
    raise NotImplementedError("the other stages")   # may be skipped: an answer, however wrong, not a stub


def test_the_exercises_stub_is_refused_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(lesson07, "run_on_ranks", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^stub_with_its_preamble is not written yet: it raised NotImplementedError"):
        check_one_f_one_b_stage(stub_with_its_preamble)
    with pytest.raises(TypeError):   # not a stub: the check goes on to start ranks
        check_one_f_one_b_stage(answers_only_the_last_stage)


def divides_the_loss_by_a_written_count(stage, inputs, targets):
    outputs = [stage(x) for x in inputs]
    return [F.mse_loss(out, y) / 4 for out, y in zip(outputs, targets)]   # the check's 4 micro-batches


def test_a_loss_divided_by_a_written_count_is_refused_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(lesson07, "run_on_ranks", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^divides_the_loss_by_a_written_count divides a loss by 4, a number written "
                                          r"in the code \(`.*/ 4.*`\)\.\nHint: divide by the number of "
                                          r"micro-batches, len\(inputs\)"):
        check_one_f_one_b_stage(divides_the_loss_by_a_written_count)


STAGE_MISTAKES = [   # answers that return: they run one after the other in one launch of 3 ranks
    (dict(scale=False), r"(?s)add up to 4 x the whole batch's mean.*divide each micro-batch's loss by the number"),
    (dict(warmup=lambda m, r, w: m), r"(?s)stage 0 held 4, stage 1 held 4, stage 2 held 4; 1F1B .* holds 3, 2, 1.*"
                                     r"as GPipe does"),
    (dict(warmup=lambda m, r, w: w - r), r"(?s)stage 0 held 4, stage 1 held 3, stage 2 held 2.*one warm-up forward "
                                         r"too many"),
    (dict(warmup=lambda m, r, w: 0), r"(?s)stage 0 held 1, stage 1 held 1, stage 2 held 1.*waited for each other.*"
                                     r"no warm-up"),
    # every stage divides the gradient it sends by m: stage 2 is right, stage 1 m times too small, stage 0 m² times;
    # the stage where the mistake starts is named
    (dict(grad_divisor=MICROBATCHES), r"(?s)^rank 1 \(stage 1\), gradient of the weight.*the right gradient divided "
                                      r"by 4"),
    # the gradients are right: the losses were divided for backward, only the returned ones were not
    (dict(return_undivided=True), r"(?s)add up to 4 x the whole batch's mean.*the gradients are right.*Return the "
                                  r"divided loss"),
    # gradients zeroed before every backward: what is left is the last micro-batch's alone, not a pairing mistake
    (dict(zero_each=True), r"(?s)^rank 2 \(stage 2\), gradient of the weight.*Hint: it is the gradient of the last "
                           r"micro-batch alone.*add up over the micro-batches"),
    # receives from any source: the middle stage takes a gradient for an activation; the logged recv says so, not a
    # guess at the loss formula
    # (which message it takes depends on timing: right by chance, it is refused all the same)
    (dict(recv_any_source=True), r"(?s)^(rank 2: the micro-batch losses add up to .*Hint: |the losses came out right "
                                 r"on .*)a send or recv names a rank that is not a neighbour stage \(rank 0's call "
                                 r"\d+, dist\.recv with src=None, names no rank at all"),
    # each loss divided by the number of stages, or a sum of squared errors: the factor the losses are off by says so
    (dict(divide_by=lambda m, w: w), r"(?s)^rank 2: the micro-batch losses add up to .*\nHint: the losses add up "
                                     r"to 4/3 of the whole batch's mean: each micro-batch's loss was divided by the "
                                     r"number of stages \(world_size, 3\) where the number of micro-batches, "
                                     r"len\(inputs\) \(4\), belongs"),
    (dict(summed_errors=True), r"(?s)^rank 2: .*\nHint: the losses add up to 12 x the whole batch's mean, the number "
                               r"of elements of a micro-batch's output \(2 x 6\): each loss is a sum of squared "
                               r"errors"),
    # the sum of the losses, not their list: named, where iterating over it raised in the check's own code
    (dict(return_sum=True), r"^rank 2 \(the last stage\) returned a tensor of shape \(\) and dtype torch.float32; "
                            r"expected a list of the micro-batches' losses, one number per micro-batch \(4\)"),
    # the sends to rank + 1 never waited for: delivered here (the gradients came back), refused all the same
    (dict(forward_sends_kept=True), r"^the losses and gradients came out right on 3 stages with 4 micro-batches, but "
                                    r"8 dist\.isend handles were never waited for \(rank 0's call 1, dist\.isend "
                                    r"with dst=1; rank 0's call 2, dist\.isend with dst=1; rank 0's call 3, "
                                    r"dist\.isend with dst=1; \.\.\.\): a send whose handle is never waited for is "
                                    r"sure to arrive only if the peer's receive was posted before the handle was "
                                    r"dropped, so another run can lose the message and hang\.\nHint: keep every "
                                    r"handle dist\.isend returns \(a list\) and call \.wait\(\) on each before the "
                                    r"function returns\.$"),
    # one receive buffer for every micro-batch: the next receive overwrites what a held micro-batch saved
    (dict(one_buffer=True), r"(?s)^rank 1 \(stage 1\), gradient of the weight.*Hint: two micro-batches this stage held "
                            r"at once were given the same input tensor"),
    # a warm-up written for 3 stages: right on the first run, one too many on the second, which says so
    (dict(warmup=lambda m, r, w: 2 - r), r"(?s)^the stages held .*: stage 0 held 3, stage 1 held 2; 1F1B on 2 stages "
                                         r"with 3 micro-batches holds 2, 1 .*\nOn 3 stages with 4 micro-batches \(the "
                                         r"check's first run\) every stage was right.*a warm-up of 2 - rank.*\nHint: "
                                         r"every stage held one micro-batch more"),
]


@pytest.fixture(scope="module")
def stage_results():
    """Each of STAGE_MISTAKES' answers, then the right answer, then the right answer through dist.batch_isend_irecv,
    run in one launch."""
    answers = [make_stage_answer(**mistake) for mistake, _ in STAGE_MISTAKES] + [make_stage_answer(),
                                                                                 make_stage_answer(batched=True)]
    return lesson07.run_stage_answers(tuple(answers))


@pytest.mark.parametrize("index", range(len(STAGE_MISTAKES)))
def test_one_f_one_b_names_wrong_results(index, stage_results):
    with pytest.raises(CheckFailed, match=STAGE_MISTAKES[index][1]):
        lesson07._judge_stage("one_f_one_b_stage", stage_results[index])


def test_a_call_naming_no_neighbour_is_refused_when_the_results_come_out_right(stage_results, capsys):
    """A recv without src can take the right message by chance: the logged call is refused all the same."""
    right = stage_results[-2]
    lesson07._judge_stage("one_f_one_b_stage", right)
    assert "✓ one_f_one_b_stage" in capsys.readouterr().out
    by_chance = {stages: [dict(record) for record in records] for stages, records in right.items()}
    by_chance[3][0]["wrong_peers"] = ["rank 0's call 3, dist.recv with src=None, names no rank at all"]
    with pytest.raises(CheckFailed, match=r"(?s)^the losses came out right on 3 stages with 4 micro-batches, but a "
                                          r"send or recv names a rank that is not a neighbour stage \(rank 0's call "
                                          r"3, dist\.recv with src=None.*take a gradient for an activation, or hang"
                                          r"\.\nHint: forward: receive the activation from rank - 1"):
        lesson07._judge_stage("one_f_one_b_stage", by_chance)


def test_an_irecv_never_waited_is_refused_when_the_results_come_out_right(stage_results):
    """Whether an unwaited irecv's buffer is filled when the stage reads it depends on timing: an answer right by
    chance is refused all the same, from the logged call never waited for."""
    right = stage_results[-2]
    assert not any(record["never_waited"] for records in right.values() for record in records)
    by_chance = {stages: [dict(record) for record in records] for stages, records in right.items()}
    by_chance[3][2]["never_waited"] = ["rank 2's call 1, dist.irecv with src=1"]
    with pytest.raises(CheckFailed, match=r"^the losses and gradients came out right on 3 stages with 4 micro-batches, "
                                          r"but 1 dist\.irecv handle was never waited for \(rank 2's call 1, "
                                          r"dist\.irecv with src=1\): an irecv's buffer holds the message only once "
                                          r".*\nHint: call \.wait\(\) on each dist\.irecv's handle before using its "
                                          r"buffer\.$"):
        lesson07._judge_stage("one_f_one_b_stage", by_chance)


def test_sends_and_receives_through_batch_isend_irecv_are_accepted(stage_results, capsys):
    """dist.batch_isend_irecv passes each P2POp's peer as group_dst or group_src: the logged calls name it, so a right
    answer is not refused as naming no rank."""
    lesson07._judge_stage("one_f_one_b_stage", stage_results[-1])
    assert "✓ one_f_one_b_stage" in capsys.readouterr().out


def test_the_check_runs_a_second_pipeline_of_other_counts():
    # the second case must differ from the first in both counts, or a number written for the first run passes it
    first, second = CASES
    assert second.stages != first.stages and second.microbatches != first.microbatches


def test_a_last_stage_written_as_rank_2_is_named_on_the_second_run():
    # right on 3 stages; on 2, rank 1 is not "last", so it sends its output to rank 2, which is no rank of that
    # group: gloo waits there (or segfaults, as in the test of a send to a rank that is not a neighbour), and the
    # hint comes from the second run's logged calls
    with pytest.raises(CheckFailed, match=r"(?s)(did not finish within 10 s|died with signal SIGSEGV).*\nThe check's "
                                          r"first run, on 3 stages "
                                          r"with 4 micro-batches, ran to its end \(it was not judged: the launch "
                                          r"stopped here\); this is its second run, 2 stages with 3 micro-batches.*"
                                          r"the last stage as rank 2.*\nWhat the ranks "
                                          r"did: rank 1's call \d+, dist.isend with dst=2, names no rank at all.*"
                                          r"\nHint: a send or recv must name a neighbour stage"):
        check_one_f_one_b_stage(make_stage_answer(last_rank=2), timeout=FIRST_RUN_TIMEOUT)


def test_a_count_of_micro_batches_written_as_4_is_named_on_the_second_run():
    # only 3 micro-batches on the second run: inputs[3] raises, and the message says the first run ran to its end
    with pytest.raises(CheckFailed, match=r"(?s)rank 0: one_f_one_b_stage raised IndexError.*2-stage pipeline with 3 "
                                          r"micro-batches.*Hint: The check's first run, on 3 stages with 4 "
                                          r"micro-batches, ran to its end.*4 micro-batches\) where world_size, rank "
                                          r"or m = len\(inputs\) belongs"):
        check_one_f_one_b_stage(make_stage_answer(microbatches=4), timeout=FIRST_RUN_TIMEOUT)


def test_a_raise_in_the_first_run_is_not_said_to_follow_a_right_one():
    # the last stage's backward raises on the first run (x.grad of the activation it received is None: never marked
    # requires_grad_), while ranks 0 and 1 may already have gone on: the message is the first run's, with no claim
    # about a first run that was right
    with pytest.raises(CheckFailed) as failure:
        check_one_f_one_b_stage(make_stage_answer(mark_input=False), timeout=DEADLOCK_TIMEOUT)
    message = str(failure.value)
    assert "3-stage pipeline" in message and "first run" not in message, message


def test_one_f_one_b_names_a_detached_output_kept_for_backward():
    with pytest.raises(CheckFailed, match=r"(?s)raised RuntimeError inside torch: element 0 of tensors does not "
                                          r"require grad.*Hint: backward ran on a tensor with no graph behind it: the "
                                          r"stage's output was detached"):
        check_one_f_one_b_stage(make_stage_answer(keep_detached=True))


def test_one_f_one_b_rejects_a_none_sent():
    with pytest.raises(CheckFailed, match=r"(?s)rank [12]: one_f_one_b_stage raised TypeError inside torch.*Hint: a "
                                          r"tensor this rank sent is None.*x.requires_grad_\(\)"):
        check_one_f_one_b_stage(make_stage_answer(mark_input=False), timeout=DEADLOCK_TIMEOUT)


def test_the_missing_requires_grad_is_not_blamed_on_the_peers():
    with pytest.raises(CheckFailed) as failure:
        check_one_f_one_b_stage(make_stage_answer(mark_input=False), timeout=DEADLOCK_TIMEOUT)
    message = str(failure.value)
    assert "neighbour" not in message and "send(x.grad, rank + grad_peer)" in message
    # the learner's lines and where they entered torch, not torch's own frames
    assert message.count("distributed_c10d.py") == 1 and "_check_single_tensor" not in message, message


def test_one_f_one_b_names_a_send_to_a_rank_that_is_not_a_neighbour():
    # sending x.grad to rank + 1: the last stage sends to rank 3 of 3, which does not exist (a receive from a
    # distant rank, e.g. every activation from rank 0, is found by the same reading of the ranks' calls). Gloo
    # then waits in isend (a hang) or segfaults there (seen once in fresh-clone CI, torch 2.13): both must name
    # the call and give the neighbour hint
    with pytest.raises(CheckFailed, match=r"(?s)rank 2's call \d+, dist.isend with dst=3, names no rank at all.*"
                                          r"Hint: a send or recv must name a neighbour stage"):
        check_one_f_one_b_stage(make_stage_answer(grad_peer=+1), timeout=DEADLOCK_TIMEOUT)


def test_one_f_one_b_says_who_waits_for_whom_when_the_order_is_wrong():
    # warm-up counts reversed (stage r runs r warm-up forwards): stage 0 waits for a gradient before sending
    # the activation stage 1 waits for; every peer is right, so the message blames the order, not the peers
    with pytest.raises(CheckFailed, match=r"(?s)did not finish within 2 s.*rank 1 waits for message 2 from rank 0, "
                                          r"which has sent it 1 and itself waits for message 1 from rank 1.*"
                                          r"Every send and recv named a neighbour stage.*warm-up forwards"):
        check_one_f_one_b_stage(make_stage_answer(warmup=lambda m, r, w: r), timeout=DEADLOCK_TIMEOUT)


def test_one_f_one_b_names_a_send_waited_on_at_once():
    # every rank stuck in Work.wait (outside torch.distributed) right after its last call, an isend: the peers and
    # the order are right, so neither may be blamed
    with pytest.raises(CheckFailed) as failure:
        check_one_f_one_b_stage(make_stage_answer(wait_now=True), timeout=DEADLOCK_TIMEOUT)
    message = str(failure.value)
    assert "last call was a dist.isend" in message and "Waiting at once makes the send blocking" in message, message
    assert "Check the peers" not in message and "order the neighbours" not in message, message


def test_one_f_one_b_names_isend_handles_dropped():
    # a message whose handle was dropped arrives only if its receive was already posted: one that never arrives
    # leaves its receiver waiting (while the sender waits too, or after it returned), and if every one arrives the
    # handles never waited for are refused all the same; the order and the peers are right, neither is blamed
    with pytest.raises(CheckFailed) as failure:
        check_one_f_one_b_stage(make_stage_answer(drop_handles=True), timeout=DEADLOCK_TIMEOUT)
    message = str(failure.value)
    assert re.search(r"rank \d started message \d to rank \d (with dist\.isend, and rank \d still waits for it: rank "
                     r"\d never waited for that handle|\(dist\.isend\) and returned before it was delivered)"
                     r"|^the losses and gradients came out right on .* dist\.isend handles were never waited for",
                     message), message
    assert "Check the peers" not in message and "order the neighbours" not in message, message


def test_one_f_one_b_names_irecv_handles_never_waited_for():
    with pytest.raises(CheckFailed) as failure:
        check_one_f_one_b_stage(make_stage_answer(irecv_unwaited=True), timeout=DEADLOCK_TIMEOUT)
    message = str(failure.value)
    assert re.search(r"rank \d waited for none of its \d+ dist\.irecv handles.*\nHint: dist\.irecv returns at once",
                     message, re.S), message
    assert "Check the peers" not in message and "order the neighbours" not in message, message


def receives_ahead(stage, inputs, targets, drop_last_send=False):
    """Every activation's irecv posted up front, each waited for before its forward: right, unless
    `drop_last_send` (the first stage never sends its last micro-batch: a hang)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    first, last, m, shape = rank == 0, rank == world_size - 1, len(inputs), inputs[0].shape
    pending, saved, sends, losses = {}, {}, [], []
    if not first:
        for i in range(m):
            buffer = torch.empty(shape)
            pending[i] = (buffer, dist.irecv(buffer, rank - 1))

    def forward(i):
        if first:
            x = inputs[i]
        else:
            x, request = pending.pop(i)
            request.wait()
            x.requires_grad_()
        out = stage(x)
        if last:
            out = F.mse_loss(out, targets[i]) / m
            losses.append(out.detach())
        elif not (drop_last_send and first and i == m - 1):
            sends.append(dist.isend(out.detach(), rank + 1))
        saved[i] = (x, out)

    def backward(i):
        x, out = saved.pop(i)
        grad = None
        if not last:
            grad = torch.empty(shape)
            dist.recv(grad, rank + 1)
        out.backward(grad)
        if not first:
            sends.append(dist.isend(x.grad, rank - 1))

    warmup = min(world_size - rank - 1, m)
    for i in range(warmup):
        forward(i)
    for i in range(warmup, m):
        forward(i)
        backward(i - warmup)
    for i in range(m - warmup, m):
        backward(i)
    for work in sends:
        work.wait()
    return losses


def test_receives_posted_ahead_are_not_blamed_for_a_missing_send():
    with pytest.raises(CheckFailed) as failure:
        check_one_f_one_b_stage(lambda *args: receives_ahead(*args, drop_last_send=True), timeout=DEADLOCK_TIMEOUT)
    message = str(failure.value)
    assert "did not finish" in message and "irecv" not in message, message


def _hang_hint_from_logs(tmp_path, logs: dict, places: dict) -> str:
    """The 1F1B check's hang hint for these logged calls ({rank: lines as a rank writes them})."""
    folder = Path(lesson07._case_folder(str(tmp_path), CASES[0]))
    folder.mkdir(parents=True)
    for rank, lines in logs.items():
        Path(log_path(str(folder), rank)).write_text("".join(f"{line}\n" for line in lines))
    return lesson07._hang_hint(str(tmp_path))({call for call in places.values()}, places)


def test_one_f_one_b_names_a_send_never_waited_on(tmp_path):
    # rank 1 started all four of its gradient sends to rank 0 and returned; rank 0 still waits for the third: the
    # message was started but never delivered (what a real run logged when the isend handles were never waited on)
    middle = ["recv 0", "isend 2", "recv 0", "isend 2", "recv 2", "isend 0", "recv 0", "isend 2", "recv 2",
              "isend 0", "recv 2", "isend 0", "recv 2", "isend 0", "returned"]
    first = ["isend 1"] * 3 + ["recv 1", "isend 1", "recv 1", "recv 1"]
    last = ["recv 1", "isend 1"] * 4 + ["returned"]
    hint = _hang_hint_from_logs(tmp_path, {0: first, 1: middle, 2: last}, {0: "recv"})
    assert "rank 0 waits for message 3 from rank 1, which has sent it 4 and returned" in hint, hint
    assert "returned before it was delivered" in hint and "order" not in hint, hint


def test_one_f_one_b_names_a_peer_that_returned_without_sending(tmp_path):
    # the last stage never sends x.grad back and returns; the middle stage waits for its first gradient
    first = ["isend 1", "isend 1", "recv 1"]
    middle = ["recv 0", "isend 2", "recv 2"]
    last = ["recv 1"] * 4 + ["returned"]
    hint = _hang_hint_from_logs(tmp_path, {0: first, 1: middle, 2: last}, {0: "recv", 1: "recv"})
    assert "rank 2 returned without sending rank 1 anything: in backward every stage but the first sends" in hint, \
        hint


def test_a_receive_that_returned_is_not_named_as_the_wait(tmp_path):
    # rank 0's last logged call is a blocking recv, but its stack is outside torch.distributed: the recv returned
    # and it waits elsewhere, so no hint may say it waits for that message (seen in a run whose first stage sent
    # x.grad to rank -1)
    first = ["isend 1", "isend 1", "recv 1"]
    middle = ["recv 0", "isend 2", "recv 2"]
    last = ["recv 1", "isend 1", "recv 1"]
    hint = _hang_hint_from_logs(tmp_path, {0: first, 1: middle, 2: last}, {0: None, 1: "recv", 2: "recv"})
    assert "rank 0 waits" not in hint and "rank 1 waits for message 1 from rank 2" in hint, hint


def test_one_f_one_b_ends_the_blocking_send_deadlock_with_a_hint():
    with pytest.raises(CheckFailed, match=r"(?s)did not finish within 2 s.*in dist.send.*dist.isend.*\.wait\(\)"):
        check_one_f_one_b_stage(make_stage_answer(blocking=True), timeout=DEADLOCK_TIMEOUT)


# --- idle_fraction ---------------------------------------------------------------------------

def idle_fraction(spans):
    makespan = max(s.end for s in spans) - min(s.start for s in spans)
    return 1.0 - sum(s.end - s.start for s in spans) / (len({s.rank for s in spans}) * makespan)


def busy_fraction(spans):
    return 1.0 - idle_fraction(spans)


def per_rank_windows(spans):
    ranks = {s.rank for s in spans}
    idle = 0.0
    for rank in ranks:
        mine = [s for s in spans if s.rank == rank]
        idle += 1.0 - sum(s.end - s.start for s in mine) / (max(s.end for s in mine) - min(s.start for s in mine))
    return idle / len(ranks)


def as_percentage(spans):
    return 100 * idle_fraction(spans)


def in_float32(spans):
    """Right formula, in a torch tensor's default float32: right to about 7 digits only."""
    start, end = torch.tensor([s.start for s in spans]), torch.tensor([s.end for s in spans])
    return float(1 - (end - start).sum() / (len({s.rank for s in spans}) * (end.max() - start.min())))


def forgets_the_ranks(spans):
    makespan = max(s.end for s in spans) - min(s.start for s in spans)
    return 1.0 - sum(s.end - s.start for s in spans) / makespan


def counts_the_spans(spans):
    makespan = max(s.end for s in spans) - min(s.start for s in spans)
    return 1.0 - sum(s.end - s.start for s in spans) / (len(spans) * makespan)   # spans, not ranks


def window_in_list_order(spans):
    makespan = spans[-1].end - spans[0].start            # as if the spans were sorted by time
    return 1.0 - sum(s.end - s.start for s in spans) / (len({s.rank for s in spans}) * makespan)


def window_of_rank_0(spans):
    mine = [s for s in spans if s.rank == 0]
    makespan = max(s.end for s in mine) - min(s.start for s in mine)
    return 1.0 - sum(s.end - s.start for s in spans) / (len({s.rank for s in spans}) * makespan)


def window_to_the_last_start(spans):
    in_time = sorted(spans, key=lambda s: s.start)
    makespan = in_time[-1].end - in_time[0].start      # the span that starts last need not end last
    return 1.0 - sum(s.end - s.start for s in spans) / (len({s.rank for s in spans}) * makespan)


def window_from_the_first_end(spans):
    in_time = sorted(spans, key=lambda s: s.end)
    makespan = in_time[-1].end - in_time[0].start      # the span that ends first need not start first
    return 1.0 - sum(s.end - s.start for s in spans) / (len({s.rank for s in spans}) * makespan)


def rounded_for_display(spans):
    return round(idle_fraction(spans), 3)


def as_text(spans):
    return str(idle_fraction(spans))


def gaps_between_own_spans(spans):
    makespan = max(s.end for s in spans) - min(s.start for s in spans)
    gaps = 0.0
    for rank in {s.rank for s in spans}:
        mine = sorted((s for s in spans if s.rank == rank), key=lambda s: s.start)
        gaps += sum(after.start - before.end for before, after in zip(mine, mine[1:]))
    return gaps / (len({s.rank for s in spans}) * makespan)


def _ranks_and_microbatches(spans):
    p = len({s.rank for s in spans})
    return p, sum(1 for s in spans if s.rank == 0 and s.row == "forward")


def closed_form(spans):
    p, m = _ranks_and_microbatches(spans)
    return (p - 1) / (m + p - 1)


def bubble_over_microbatches(spans):
    p, m = _ranks_and_microbatches(spans)
    return (p - 1) / m


def window_from_zero(spans):
    ranks = len({s.rank for s in spans})
    return 1 - sum(s.end - s.start for s in spans) / (ranks * max(s.end for s in spans))


def ranks_as_the_largest(spans):
    window = max(s.end for s in spans) - min(s.start for s in spans)
    return 1 - sum(s.end - s.start for s in spans) / (max(s.rank for s in spans) * window)


def time_when_no_rank_worked(spans):
    reached, covered = float("-inf"), 0.0
    for span in sorted(spans, key=lambda s: s.start):
        if span.end > reached:
            covered += span.end - max(span.start, reached)
            reached = span.end
    return 1 - covered / (max(s.end for s in spans) - min(s.start for s in spans))


def blank_idle(spans):
    raise NotImplementedError("one window for every rank")


def test_idle_fraction_accepts_the_right_answer(capsys):
    check_idle_fraction(idle_fraction)
    assert "✓ idle_fraction" in capsys.readouterr().out


@pytest.mark.parametrize("answer, feedback", [
    (blank_idle, r"not written yet.*NotImplementedError"),
    (busy_fraction, r"(?s)GPipe on 2 stages.*got 0.8, expected 0.2.*this is the busy fraction"),
    (per_rank_windows, r"(?s)its own first-start-to-last-end window.*earliest start on any rank"),
    (as_percentage, r"(?s)this is a percentage"),
    # the numbers shown must differ ("got 0.2, expected 0.2" before), and the hint names float32
    (in_float32, r"^GPipe on 2 stages with 4 micro-batches \(ideal times\): got 0\.19999999, expected 0\.2\.\nHint: "
                 r"that is the right value to about 7 significant digits, on every case.*float32"),
    (forgets_the_ranks, r"(?s)compared with ranks x makespan"),
    (counts_the_spans, r"^GPipe on 2 stages with 4 micro-batches \(ideal times\): got 0\.9, expected 0\.2\.\nHint: the "
                       r"busy time was compared with 16 x makespan, the number of spans: count the ranks instead \(2 "
                       r"here, the distinct s\.rank\)"),
    (window_in_list_order, r"(?s)measured-looking times: got .*first span in the list to the last one"),
    (window_of_rank_0, r"(?s)measured-looking times: got .*the window is rank 0's alone"),
    # on the two-rank case this window is rank 0's too; the three-rank case tells them apart
    (window_to_the_last_start, r"(?s)^two ranks with measured-looking times: got 0.4875, expected 0.523256\.\nHint: "
                               r"the window ends where the span that starts last ends \(14\), but a span that "
                               r"started earlier ends later \(14.3\)"),
    (gaps_between_own_spans, r"(?s)^GPipe on 2 stages.*Hint: only the gaps between a rank's own spans were counted"),
    # right wherever the span that ends first also starts first; the three-rank case has one that starts later
    (window_from_the_first_end, r"(?s)^three ranks with measured-looking times: got .*Hint: the window starts where "
                                r"the span that ends first starts \(30.4\), but a span that ends later started "
                                r"earlier \(30\)"),
    (rounded_for_display, r"(?s)^1F1B on 4 stages.*got 0.273, expected 0.272727.*Hint: that is the right value rounded "
                          r"to 3 decimals"),
    (as_text, r"^GPipe on 2 stages with 4 micro-batches \(ideal times\): as_text returned str '0\.\d+'; expected a "
              r"float"),
    # right on the ideal timelines, off on the measured ones
    (closed_form, r"(?s)^two ranks with measured-looking times: got 0\.5, .*Hint: that is \(p - 1\) / \(m \+ p - 1\), "
                  r"the bubble of an ideal pipeline"),
    (bubble_over_microbatches, r"(?s)^GPipe on 2 stages.*got 0\.25, expected 0\.2\.\nHint: that is \(p - 1\) / m"),
    (window_from_zero, r"(?s)^two ranks with measured-looking times: .*Hint: the window was taken to start at 0"),
    (ranks_as_the_largest, r"(?s)^GPipe on 2 stages.*got -0\.6, .*Hint: the number of ranks was taken as the largest "
                           r"rank number \(1\)"),
    (time_when_no_rank_worked, r"(?s)^GPipe on 2 stages.*got 0, .*Hint: this is the share of the window in which no "
                               r"rank was working"),
])
def test_idle_fraction_rejects_wrong_answers(answer, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_idle_fraction(answer)


def the_package_answer(spans):
    from ddp_lab.course.pipeline_parallel.schedules import idle_fraction as packaged
    return packaged(spans)


def crashes_on_its_own_line(spans):
    ranks = sorted({s.rank for s in spans})
    last = max(s.end for s in spans if s.rank == len(ranks))   # ranks count from 0: no span has rank len(ranks)
    return last


def test_idle_fraction_refuses_the_package_answer_and_shows_the_learners_own_error():
    with pytest.raises(CheckFailed, match=r"^the_package_answer calls ddp_lab\.course\.pipeline_parallel\.schedules\."
                                          r"idle_fraction, the package's own answer to this exercise"):
        check_idle_fraction(the_package_answer)
    with pytest.raises(CheckFailed) as failure:
        check_idle_fraction(crashes_on_its_own_line)
    message = str(failure.value)
    assert message.startswith("crashes_on_its_own_line raised ValueError: max() "), message
    assert "while computing GPipe" in message, message
    assert "last = max(s.end for s in spans if s.rank == len(ranks))" in message and "Hint" not in message, message


def test_the_measured_case_tells_the_windows_apart():
    # on the measured-looking case the per-rank window gives another number than the right one
    spans = [Span(0, "forward", 10.0, 11.0), Span(0, "backward", 13.5, 15.0),
             Span(1, "forward", 11.2, 12.0), Span(1, "backward", 12.1, 13.4)]
    assert abs(idle_fraction(spans) - per_rank_windows(spans)) > 0.1


def test_a_crash_inside_a_send_is_explained_from_the_logged_calls(tmp_path):
    """The crash path of the 1F1B check, without waiting for gloo to segfault (it does so only sometimes): rank 2's
    log shows an isend to rank 3 of 3, and it died of SIGSEGV inside isend, as fresh-clone CI saw. The message says
    what the ranks did, then one hint; the same holds when the output tail lost the isend frame. Logs whose peers
    are all neighbours, or a rank killed by another signal, get no peer hint."""
    from ddp_lab.checks.common import failure_message
    from ddp_lab.checks.p2p_log import crashed_in, log_path
    from ddp_lab.launcher.errors import RankCrashed, RankFailure, crash_summary

    calls = {0: ["isend 1", "recv 1"], 1: ["recv 0", "isend 2", "recv 2", "isend 0"], 2: ["recv 1", "isend 3"]}
    folder = Path(lesson07._case_folder(str(tmp_path), CASES[0]))
    folder.mkdir(parents=True)
    for rank, lines in calls.items():
        Path(log_path(str(folder), rank)).write_text("\n".join(lines) + "\n")
    in_isend = ('File "/x/torch/distributed/distributed_c10d.py", line 2652 in isend\n'
                'File "/x/ddp_lab/checks/p2p_log.py", line 55 in call\n'
                'File "/x/tests/test_checks_lesson07.py", line 39 in send\n')
    crash = RankFailure(2, "crashed", crash_summary(-11), details=in_isend, returncode=-11)
    assert crashed_in(crash) == "isend"     # torch's frame, not the answer's own function named send
    explain = lesson07._explainer(str(tmp_path))
    said = ("What the ranks did: rank 2's call 2, dist.isend with dst=3, names no rank at all.\n"
            f"Hint: a send or recv must name a neighbour stage. {lesson07.PEERS}.")
    assert explain(crash) == said
    message = failure_message(RankCrashed("rank 2 crashed", {2: crash}, 2, ["", "", ""]), "one_f_one_b_stage", explain)
    assert message.endswith("\n" + said) and message.count("Hint:") == 1, message
    frame_lost = RankFailure(2, "crashed", crash_summary(-11), details="", returncode=-11)
    assert crashed_in(frame_lost) is None and explain(frame_lost) == said
    killed = RankFailure(2, "crashed", crash_summary(-9), details=in_isend, returncode=-9)
    assert crashed_in(killed) is None and explain(killed) is None
    Path(log_path(str(folder), 2)).write_text("recv 1\nisend 1\n")
    assert explain(crash) is None

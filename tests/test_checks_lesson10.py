"""The lesson 10 checks reject plausible wrong answers with specific feedback.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part of
the feedback that names it. The groups check runs wrong answers in this process (they fail on
the shapes whose sides differ, before any rank starts). The gradient check's mistaken answers, and
four right ones by other routes, run one after the other in one launch of 6 ranks (a (dp=3,
tp=2) mesh) through the check's own runner, and each is judged by the check's own judge. That each
check accepts the lesson's right answer (for the groups: on 4 gloo ranks against real
DeviceMeshes) is proven by nbval of solutions/10-2d-mesh.ipynb, whose check cells store the ✓
lines; running the groups check's right answer here too cost a second 4-rank launch (about 9 s of
CPU).
"""

from __future__ import annotations

import re
import time

import pytest
import torch
import torch.distributed as dist

from ddp_lab.checks import CheckFailed
from ddp_lab.checks import lesson10
from ddp_lab.checks.common import division_into_a_new_tensor
from ddp_lab.checks.lesson10 import DP_SIZE, check_average_gradients, check_dp_tp_groups
from ddp_lab.torch_compat.dtensor import dtensor_api

# The right answers are proven once, by nbval of solutions/10-*.ipynb (its check cells store ✓):
# this file tries the wrong ones and the cases the solution does not cover.


# --- dp_tp_groups ---------------------------------------------------------------------------

def rows_and_columns_swapped(rank, dp_size, tp_size):
    row, col = divmod(rank, tp_size)
    return {"tp": [i * tp_size + col for i in range(dp_size)], "dp": [row * tp_size + j for j in range(tp_size)]}


def dimensions_in_wrong_order(rank, dp_size, tp_size):
    row, col = divmod(rank, dp_size)  # dp_size where tp_size belongs: the grid read as (tp, dp)
    return {"dp": [i * dp_size + col for i in range(tp_size)], "tp": [row * dp_size + j for j in range(dp_size)]}


def off_by_one(rank, dp_size, tp_size):
    row, col = divmod(rank, tp_size)
    return {"dp": [i * tp_size + col for i in range(dp_size)], "tp": [row * tp_size + j for j in range(1, tp_size + 1)]}


def divmod_swapped(rank, dp_size, tp_size):
    col, row = divmod(rank, tp_size)  # (row, col) read the wrong way round
    return {"dp": [i * tp_size + col for i in range(dp_size)], "tp": [row * tp_size + j for j in range(tp_size)]}


def column_steps_by_dp_size(rank, dp_size, tp_size):
    row, col = divmod(rank, tp_size)
    return {"dp": [i * dp_size + col for i in range(dp_size)], "tp": [row * tp_size + j for j in range(tp_size)]}


def sizes_swapped(rank, dp_size, tp_size):
    row, col = divmod(rank, tp_size)
    return {"dp": [i * tp_size + col for i in range(tp_size)], "tp": [row * tp_size + j for j in range(dp_size)]}


def row_without_its_start(rank, dp_size, tp_size):
    row, col = divmod(rank, tp_size)
    return {"dp": [i * tp_size + col for i in range(dp_size)], "tp": [row + j for j in range(tp_size)]}


def something_else(rank, dp_size, tp_size):
    row, col = divmod(rank, tp_size)
    return {"dp": [i * tp_size + col for i in range(dp_size)], "tp": sorted({rank, (rank + 1) % (dp_size * tp_size)})}


def column_steps_by_dp_size_and_row_one_late(rank, dp_size, tp_size):
    row, col = divmod(rank, tp_size)
    return {"dp": [i * dp_size + col for i in range(dp_size)], "tp": [row * tp_size + j for j in range(1, tp_size + 1)]}


def column_steps_by_dp_size_and_something_else(rank, dp_size, tp_size):
    row, col = divmod(rank, tp_size)
    return {"dp": [i * dp_size + col for i in range(dp_size)], "tp": sorted({rank, (rank + 1) % (dp_size * tp_size)})}


def filled_column_by_column(rank, dp_size, tp_size):
    grid = torch.arange(dp_size * tp_size).reshape(tp_size, dp_size).T   # dp varies fastest
    row, col = (grid == rank).nonzero()[0].tolist()
    return {"dp": grid[:, col].tolist(), "tp": grid[row].tolist()}


def groups_stub(rank, dp_size, tp_size):
    raise NotImplementedError("the tp group is the rank's row of the grid")


def raises_on_a_shape(rank, dp_size, tp_size):
    grid = [list(range(r * tp_size, (r + 1) * tp_size)) for r in range(dp_size)]
    row, col = divmod(rank, dp_size)  # dp_size where tp_size belongs: row runs past the grid
    return {"dp": [grid[i][col] for i in range(dp_size)], "tp": grid[row]}


def the_package_layout(rank, dp_size, tp_size):
    from ddp_lab.course.rank_layout import RankLayout
    layout = RankLayout(dp=dp_size, tp=tp_size)
    return {"dp": layout.group_of("dp", rank), "tp": layout.group_of("tp", rank)}


def with_the_rank_too(rank, dp_size, tp_size):
    row, col = divmod(rank, tp_size)
    return {"dp": [i * tp_size + col for i in range(dp_size)], "tp": [row * tp_size + j for j in range(tp_size)],
            "rank": rank}


@pytest.mark.parametrize("answer, feedback", [
    (rows_and_columns_swapped, r"(?s)rank 0 in a \(dp=2, tp=3\) mesh: got dp \[0, 1, 2\], tp \[0, 3\]; expected dp "
                               r"\[0, 3\], tp \[0, 1, 2\] \(DeviceMesh's layout.*your dp and tp groups are swapped"),
    (dimensions_in_wrong_order, r"(?s)rank 0 in a \(dp=2, tp=3\) mesh.*you laid the grid out as \(tp, dp\).*"
                                r"divmod\(rank, tp_size\)"),
    (off_by_one, r"(?s)rank 0 in a \(dp=2, tp=3\) mesh: got dp \[0, 3\], tp \[1, 2, 3\].*your tp group starts one "
                 r"rank late"),
    (divmod_swapped, r"(?s)rank 1 in a \(dp=2, tp=3\) mesh.*row and column are swapped in divmod"),
    (filled_column_by_column, r"(?s)rank 0 in a \(dp=2, tp=3\) mesh: got dp \[0, 1\], tp \[0, 2, 4\].*Hint: your "
                              r"groups are those of a grid filled column by column, dp varying fastest"),
    (column_steps_by_dp_size, r"(?s)rank 0 in a \(dp=2, tp=3\) mesh: got dp \[0, 2\].*your dp group steps by dp_size"),
    (sizes_swapped, r"(?s)rank 0 in a \(dp=2, tp=3\) mesh: got dp \[0, 3, 6\], tp \[0, 1\].*the group sizes are "
                    r"swapped"),
    (row_without_its_start, r"(?s)rank 3 in a \(dp=2, tp=3\) mesh.*your tp group starts at rank `row`"),
    (something_else, r"(?s)rank 0 in a \(dp=2, tp=3\).*Hint: your tp group is wrong \(the dp groups are right\)\. "
                     r"In the grid"),
    (column_steps_by_dp_size_and_row_one_late, r"(?s)Hint: your dp group steps by dp_size: .* And your tp group "
                                               r"starts one rank late"),
    (column_steps_by_dp_size_and_something_else, r"(?s)Hint: your dp group steps by dp_size: .* Your tp group is "
                                                 r"wrong too\. In the grid"),
    (raises_on_a_shape, r"(?s)raises_on_a_shape raised IndexError: list index out of range\nwhile computing the "
                        r"groups of rank 4 in a \(dp=2, tp=3\) mesh"),
    (groups_stub, r"groups_stub is not written yet: it raised NotImplementedError"),
    (the_package_layout, r"^the_package_layout calls ddp_lab.course.rank_layout.RankLayout.group_of, the package's own "
                         r"answer to this exercise"),
    (with_the_rank_too, r"^rank 0 in a \(dp=2, tp=3\) mesh: with_the_rank_too returned a dict with the keys 'dp', "
                        r"'tp', 'rank': 'rank' is extra; expected a dict with exactly the keys 'dp' and 'tp'"),
])
def test_dp_tp_groups_rejects_wrong_answers(answer, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_dp_tp_groups(answer)


# --- average_gradients ----------------------------------------------------------------------

def average_gradients(model, mesh):
    for p in model.parameters():
        grad = p.grad.to_local()
        dist.all_reduce(grad, group=mesh["dp"].get_group())
        grad.div_(mesh["dp"].size())


def default_group(model, mesh):
    for p in model.parameters():
        grad = p.grad.to_local()
        dist.all_reduce(grad)
        grad.div_(mesh["dp"].size())


def within_the_row(model, mesh):
    for p in model.parameters():
        grad = p.grad.to_local()
        dist.all_reduce(grad, group=mesh["tp"].get_group())
        grad.div_(mesh["tp"].size())


def summed_not_averaged(model, mesh):
    for p in model.parameters():
        dist.all_reduce(p.grad.to_local(), group=mesh["dp"].get_group())


def divided_by_world_size(model, mesh):
    for p in model.parameters():
        grad = p.grad.to_local()
        dist.all_reduce(grad, group=mesh["dp"].get_group())
        grad.div_(dist.get_world_size())


def divided_by_tp_size(model, mesh):
    for p in model.parameters():
        grad = p.grad.to_local()
        dist.all_reduce(grad, group=mesh["dp"].get_group())
        grad.div_(mesh["tp"].size())  # the other mesh dimension: equal to the dp size on a square mesh


def reduced_a_copy(model, mesh):
    for p in model.parameters():
        grad = p.grad.to_local().clone()
        dist.all_reduce(grad, group=mesh["dp"].get_group())
        grad = grad / mesh["dp"].size()


def divides_into_a_new_tensor(model, mesh):
    for p in model.parameters():
        grad = p.grad.to_local()
        dist.all_reduce(grad, group=mesh["dp"].get_group())
        grad = grad / mesh["dp"].size()   # a new tensor: p.grad keeps the sum


def divides_out_of_place(model, mesh):
    for p in model.parameters():
        grad = p.grad.to_local()
        dist.all_reduce(grad, group=mesh["dp"].get_group())
        grad.div(mesh["dp"].size())   # the quotient, a new tensor, is dropped


def reduces_a_full_tensor_copy(model, mesh):
    for p in model.parameters():
        grad = p.grad.full_tensor()   # an all-gather over tp, into a new tensor
        dist.all_reduce(grad, group=mesh["dp"].get_group())
        grad.div_(mesh["dp"].size())


def gathers_then_averages(model, mesh):
    for p in model.parameters():                      # right, by another route: every row's shard, then their mean
        grad = p.grad.to_local()
        parts = [torch.empty_like(grad) for _ in range(mesh["dp"].size())]
        dist.all_gather(parts, grad, group=mesh["dp"].get_group())
        grad.copy_(torch.stack(parts).mean(dim=0))


def skips_the_replicated(model, mesh):
    for p in model.parameters():
        if all(isinstance(placement, dtensor_api().Replicate) for placement in p.grad.placements):
            continue                                  # "already the same on a row": but not across the rows
        grad = p.grad.to_local()
        dist.all_reduce(grad, group=mesh["dp"].get_group())
        grad.div_(mesh["dp"].size())


def skips_the_biases(model, mesh):
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            continue                                  # 0.bias is sharded like its weight: not replicated
        grad = p.grad.to_local()
        dist.all_reduce(grad, group=mesh["dp"].get_group())
        grad.div_(mesh["dp"].size())


def flat_buffer_never_copied_back(model, mesh):
    flat = torch.cat([p.grad.to_local().flatten() for p in model.parameters()])
    dist.all_reduce(flat, group=mesh["dp"].get_group())
    flat /= mesh["dp"].size()                         # the average, in the buffer only


def flat_buffer_copied_back(model, mesh):             # right
    shards = [p.grad.to_local() for p in model.parameters()]
    flat = torch.cat([shard.flatten() for shard in shards])
    dist.all_reduce(flat, group=mesh["dp"].get_group())
    flat /= mesh["dp"].size()
    for shard, part in zip(shards, flat.split([shard.numel() for shard in shards])):
        shard.copy_(part.view_as(shard))


def waits_then_divides(model, mesh):                  # right
    works = [(p.grad.to_local(), dist.all_reduce(p.grad.to_local(), group=mesh["dp"].get_group(), async_op=True))
             for p in model.parameters()]
    for grad, work in works:
        work.wait()
        grad.div_(mesh["dp"].size())


def async_never_waited(model, mesh):
    if mesh["dp"].get_local_rank() == DP_SIZE - 1:
        time.sleep(0.5)                               # the last row comes late: rows 0 and 1 read before it sends
    for p in model.parameters():
        grad = p.grad.to_local()
        dist.all_reduce(grad, group=mesh["dp"].get_group(), async_op=True)   # the work handle is dropped
        grad.div_(mesh["dp"].size())


def broadcasts_row_0(model, mesh):
    group = mesh["dp"].get_group()
    for p in model.parameters():                      # row 0's gradient copied to every row: nothing summed
        dist.broadcast(p.grad.to_local(), src=dist.get_global_rank(group, 0), group=group)


def reduces_then_broadcasts(model, mesh):             # right: dist.reduce, which the traffic counter does not see
    group, first = mesh["dp"].get_group(), dist.get_global_rank(mesh["dp"].get_group(), 0)
    for p in model.parameters():
        grad = p.grad.to_local()
        dist.reduce(grad, dst=first, group=group)
        dist.broadcast(grad, src=first, group=group)
        grad.div_(mesh["dp"].size())


def reduces_to_the_first_row(model, mesh):
    group, first = mesh["dp"].get_group(), dist.get_global_rank(mesh["dp"].get_group(), 0)
    for p in model.parameters():
        grad = p.grad.to_local()
        dist.reduce(grad, dst=first, group=group)     # the sum on the first row's rank only
        grad.div_(mesh["dp"].size())


def reduces_the_weights_with_autograd_on(model, mesh):
    for p in model.parameters():
        weight = p.to_local()                         # the weights' shard, which autograd tracks
        dist.all_reduce(weight, group=mesh["dp"].get_group())
        weight.div_(mesh["dp"].size())


def reduces_the_weights(model, mesh):
    for p in model.parameters():
        weight = p.to_local()                         # the parameter's shard, not its gradient's
        dist.all_reduce(weight.data, group=mesh["dp"].get_group())
        weight.data.div_(mesh["dp"].size())


def does_nothing(model, mesh):
    pass


def divides_before_waiting(model, mesh):
    works = []
    for p in model.parameters():
        grad = p.grad.to_local()
        works.append(dist.all_reduce(grad, group=mesh["dp"].get_group(), async_op=True))
        grad.div_(mesh["dp"].size())                  # while the all-reduce still reads and writes it
    for work in works:
        work.wait()


def groups_miss_the_last_row(model, mesh):
    dp_size, tp_size = mesh.shape                     # new_group on every rank, each column without its last rank
    groups = [dist.new_group([i * tp_size + col for i in range(dp_size - 1)]) for col in range(tp_size)]
    for p in model.parameters():
        grad = p.grad.to_local()
        dist.all_reduce(grad, group=groups[dist.get_rank() % tp_size])
        grad.div_(dp_size)


def consecutive_ranks_as_dp_groups(model, mesh):
    dp_size, tp_size = mesh.shape                     # the groups of a mesh where dp varies fastest
    groups = [dist.new_group(list(range(t * dp_size, (t + 1) * dp_size))) for t in range(tp_size)]
    for p in model.parameters():
        grad = p.grad.to_local()
        dist.all_reduce(grad, group=groups[dist.get_rank() // dp_size])
        grad.div_(dp_size)


def average_stub(model, mesh):
    raise NotImplementedError("all-reduce p.grad.to_local() in the dp group")


AVERAGE_MISTAKES = [
    (default_group, r"(?s)rank 0: collectives run by default_group: 4 × all_reduce on other\..*without group=, "
                    r"dist.all_reduce reduces over all 6 ranks.*the mesh's dp group"),
    (within_the_row, r"(?s)rank 0: collectives run by within_the_row: 4 × all_reduce on tp\..*reduced within the row"),
    (summed_not_averaged, r"(?s)rank 0, 0.weight.grad\[0, 0\]: got .*, expected .*the SUM over the 3 rows"),
    (divided_by_world_size, r"(?s)rank 0, 0.weight.grad.*divided by the world size \(6\)"),
    (divided_by_tp_size, r"(?s)rank 0, 0.weight.grad.*divided by the tp size \(2\), the size of a row"),
    (reduced_a_copy, r"(?s)rank 0, 0.weight.grad.*row 0's own gradient: dist.all_reduce ran on a tensor that held "
                     r"0.weight's gradient values \(a copy, a flat buffer\), not on the gradient.*in place"),
    (divides_into_a_new_tensor, r"(?s)rank 0, 0.weight.grad\[0, 0\]: got .*the SUM over the 3 rows. Your line `grad = "
                                r"grad / mesh\[\"dp\"\].size\(\)` divides into a NEW tensor"),
    (divides_out_of_place, r"(?s)rank 0, 0.weight.grad\[0, 0\]: got .*the SUM over the 3 rows. Your line "
                           r"`grad\.div\(mesh\[\"dp\"\]\.size\(\)\)` divides into a NEW tensor"),
    # full_tensor()'s all-gather runs on tp: it sums nothing, so it is not "reduced within the row"
    (reduces_a_full_tensor_copy, r"(?s)^rank 0, 0.weight.grad.*row 0's own gradient.*in place"),
    (skips_the_replicated, r"(?s)^rank 0, 2.bias.grad.*row 0's own gradient: 2.bias was not averaged. Your answer "
                           r"ran 3 collective\(s\) on dp for 4 parameters: every parameter's gradient needs it, 2.bias "
                           r"too though it is replicated across a row \(placement Replicate on tp\), since"),
    # 0.bias is sharded on tp (column-parallel): the hint says nothing of replicated parameters
    (skips_the_biases, r"(?s)^rank 0, 0.bias.grad.*row 0's own gradient: 0.bias was not averaged. Your answer ran 2 "
                       r"collective\(s\) on dp for 4 parameters: every parameter's gradient needs it, since each row"),
    # one collective for four parameters, but every value went through it: the hint names the buffer, not a count
    (flat_buffer_never_copied_back, r"(?s)^rank 0, 0.weight.grad.*row 0's own gradient: dist.all_reduce ran on a "
                                    r"tensor that held 0.weight's gradient values \(a copy, a flat buffer\).*copy the "
                                    r"result back into p.grad.to_local\(\)"),
    # which rank and parameter show it first depends on when gloo finishes each all-reduce
    # (or right by luck, if every sum has arrived when the gradients are read: refused all the same)
    (async_never_waited, r"(?s)^rank \d, [\w.]+(\.grad.*Hint: on ranks? [\d and]+, [\w.]+'s gradient went into a "
                         r"dist.all_reduce started with async_op=True whose work was never waited for|: the gradient "
                         r"came out right here, but by luck: dist\.all_reduce\(\.\.\., async_op=True\) returned a "
                         r"work that was never waited for).*\.wait\(\)"),

    # before any verdict on the collectives: a broadcast on dp crossed the rows, but summed nothing
    (broadcasts_row_0, r"(?s)^rank 0, 0.weight.grad.*Hint: this is row 0's gradient: your answer's only collectives "
                       r"across the rows were broadcasts"),
    (reduces_the_weights, r"(?s)^rank 0, 0.weight.grad.*row 0's own gradient: dist.all_reduce ran on 0.weight's "
                          r"values \(the weights, the same on every row\), not on its gradient"),
    (reduces_to_the_first_row, r"(?s)^rank \d, 0.weight.grad.*Hint: your answer's collective across the rows was "
                               r"dist.reduce, which leaves the sum on its dst rank only"),
    # the groups the answer built: the check names what they hold
    (groups_miss_the_last_row, r"(?s)^rank 0: collectives run by groups_miss_the_last_row: 4 × all_reduce on other\."
                               r"\nHint: your answer reduced over the ranks \[0, 2\], part of a column only: the dp "
                               r"group holds every rank of the column, one per row \(\[0, 2, 4\]\)"),
    (consecutive_ranks_as_dp_groups, r"(?s)^rank 0: .*\nHint: your answer reduced over the ranks \[0, 1, 2\], which "
                                     r"lie in different columns, as if dp varied fastest.*col, col \+ 2, col \+ 4\."),
    (does_nothing, r"(?s)^rank 0, 0.weight.grad.*row 0's own gradient: your answer ran no collective: "),
    # the values depend on when gloo reads and writes each gradient; the version counter shows the change
    (divides_before_waiting, r"(?s)^rank \d, [\w.]+(\.grad.*Hint: on ranks? [\d and]+, [\w.]+'s gradient was changed "
                             r"in place \(a division\?\) after its dist.all_reduce\(\.\.\., async_op=True\) started "
                             r"and before its work was waited for|: the gradient came out right here, but by luck: it "
                             r"was changed after its dist.all_reduce)"),
]

RIGHT_ANSWERS = (gathers_then_averages, flat_buffer_copied_back, waits_then_divides, reduces_then_broadcasts)


@pytest.fixture(scope="module")
def average_gradients_results():
    """Every mistaken answer, and a right one by another route, run by the check's own runner one after the other
    in one launch of 6 ranks (one launch each cost about 1.2 s here)."""
    answers = (*RIGHT_ANSWERS, *(answer for answer, _ in AVERAGE_MISTAKES))
    return dict(zip(answers, lesson10.run_average_gradients_answers(answers)))


@pytest.mark.parametrize("answer, feedback", AVERAGE_MISTAKES, ids=[answer.__name__ for answer, _ in AVERAGE_MISTAKES])
def test_average_gradients_rejects_wrong_answers(answer, feedback, average_gradients_results):
    with pytest.raises(CheckFailed, match=feedback):
        lesson10.judge_average_gradients(answer.__name__, average_gradients_results[answer],
                                         division_into_a_new_tensor(answer))


@pytest.mark.parametrize("answer", RIGHT_ANSWERS, ids=lambda answer: answer.__name__)
def test_average_gradients_accepts_right_answers_by_other_routes(answer, average_gradients_results):
    """An all-gather over dp averaged by hand, a flat buffer copied back, async all-reduces waited for, a reduce
    then a broadcast."""
    assert lesson10.judge_average_gradients(answer.__name__, average_gradients_results[answer]).startswith(
        f"{answer.__name__}: every rank's gradients equal one process")


def reduces_to_one_row_broadcasts_from_another(model, mesh):
    group = mesh["dp"].get_group()
    first, last = dist.get_global_rank(group, 0), dist.get_global_rank(group, mesh["dp"].size() - 1)
    for p in model.parameters():
        grad = p.grad.to_local()
        dist.reduce(grad, dst=first, group=group)
        dist.broadcast(grad, src=last, group=group)   # from a rank that did not get the sum
        grad.div_(mesh["dp"].size())


def test_a_reduce_followed_by_a_broadcast_is_not_told_to_all_reduce():
    # reduce + broadcast is a right route (reduces_then_broadcasts): the reduce hint is for a reduce alone
    with pytest.raises(CheckFailed) as failure:
        lesson10.check_average_gradients(reduces_to_one_row_broadcasts_from_another)
    assert "your answer's collective across the rows was dist.reduce" not in str(failure.value), failure.value


def test_average_gradients_names_the_weights_changed_in_place_under_autograd():
    # without torch.no_grad(), p.to_local() is a view autograd tracks: the in-place division raises inside torch
    # (its wording differs across the torch range: the hint, not torch's text, is what is asserted)
    with pytest.raises(CheckFailed, match=r"(?s)raised RuntimeError.*Hint: the tensor changed in place is what "
                                          r"to_local\(\) gave of a parameter, p\.to_local\(\), the weights"):
        lesson10.check_average_gradients(reduces_the_weights_with_autograd_on)



@pytest.mark.parametrize("creator", ["_ToTorchTensorBackward", "_ToTorchTensor"])   # torch 2.8's name; 2.13's on
def test_the_weights_hint_reads_autograds_error_in_either_wording(creator):
    """The hint reads autograd's error as torch 2.8 words it and as 2.13 on do (the run above gives the installed one's),
    and stays silent on another in-place error."""
    from ddp_lab.checks.common import CaseFailed
    from ddp_lab.launcher.errors import RankFailure

    def failure(message):
        return RankFailure(1, "raised", "raised RuntimeError", details=f"RuntimeError: {message}",
                           exception=CaseFailed("averaging the gradients", "RuntimeError", message))
    said = (f"Output 0 of {creator} is a view and is being modified inplace. This view was created inside a custom "
            f"Function (or because an input was returned as-is) and the autograd logic to handle view+inplace would "
            f"override the custom backward associated with the custom Function, leading to incorrect gradients.")
    assert lesson10._explain(failure(said)).startswith("the tensor changed in place is what to_local() gave")
    other = "a leaf Variable that requires grad is being used in an in-place operation."
    assert lesson10._explain(failure(other)) is None

def test_average_gradients_stub_says_not_written_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(lesson10, "run_answers_on_ranks", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^average_stub is not written yet: it raised NotImplementedError"):
        check_average_gradients(average_stub)


def averages_over_a_written_dp_size(model, mesh):
    for p in model.parameters():
        grad = p.grad.to_local()
        dist.all_reduce(grad, group=mesh["dp"].get_group())
        grad.div_(3)                                  # the check's dp size, written in


def test_a_divisor_written_as_a_number_is_refused_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(lesson10, "run_average_gradients_answers", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^averages_over_a_written_dp_size divides a gradient by 3, a number written "
                                          r"in the code \(`grad\.div_\(3\)`\)\.\nHint: divide by the dp dimension's "
                                          r"size, mesh\['dp'\]\.size\(\)"):
        check_average_gradients(averages_over_a_written_dp_size)


def reduces_the_dtensor_itself(model, mesh):
    for p in model.parameters():
        dist.all_reduce(p.grad, group=mesh["dp"].get_group())   # p.grad is a DTensor, not its local shard
        p.grad.div_(mesh["dp"].size())


def test_a_collective_on_a_dtensor_gets_a_hint_naming_the_local_shard():
    """torch refuses a c10d collective on a DTensor with a NotImplementedError about sharding strategies (torch 2.8:
    an AssertionError that found no DeviceMesh): the message still shows torch's error and the learner's line, and
    the hint says what the gradient is."""
    with pytest.raises(CheckFailed) as failed:
        check_average_gradients(reduces_the_dtensor_itself)
    message = str(failed.value)
    assert re.search(r"raised (NotImplementedError|AssertionError) inside torch", message), message
    assert 'dist.all_reduce(p.grad, group=mesh["dp"].get_group())' in message
    assert message.endswith("Hint: each p.grad of this tensor-parallel model is a DTensor, and torch.distributed's "
                            "collectives take plain tensors (torch has no sharding rule for them): pass this rank's "
                            "local shard, p.grad.to_local(), which shares the gradient's memory.")


def test_a_device_mesh_given_as_group_gets_a_hint_naming_get_group():
    """torch's refusal of a DeviceMesh as group= (dist.all_reduce(grad, group=mesh["dp"])) names the mesh: that, and
    nothing else, gets the hint (it costs a 6-rank launch of its own, so torch's message is given here as it says
    it)."""
    from ddp_lab.checks.common import CaseFailed
    from ddp_lab.launcher.errors import RankFailure

    def failure(kind, message):
        exception = CaseFailed("averaging the gradients of rank 0 in a (dp=3, tp=2) mesh", kind, message)
        return RankFailure(0, "raised", f"raised {kind}", details="", exception=exception)

    torch_said = ("Process group DeviceMesh((dp=3), 'cpu', stride=(2,)) is not initialized in the world group map. "
                  "Please initialize the group first.")
    assert lesson10._explain(failure("ValueError", torch_said)) == (
        "group= takes a ProcessGroup, not a DeviceMesh (mesh[\"dp\"] is the mesh's dp dimension, a DeviceMesh too): "
        "pass the dp dimension's process group, mesh[\"dp\"].get_group().")
    assert lesson10._explain(failure("AttributeError", "'DeviceMesh' object has no attribute 'allreduce'"))
    assert lesson10._explain(failure("AttributeError", "'DeviceMesh' object has no attribute 'get_dim_group'")) is None
    assert lesson10._explain(failure("ValueError", "Process group <ProcessGroup> is not initialized")) is None


@pytest.mark.parametrize("shape, wrong", [((4, 1), "dp"), ((2, 2), "tp"), ((1, 4), "tp")])
def test_a_hint_names_no_mistake_in_a_group_that_is_right(shape, wrong):
    """On a degenerate shape a one-group mistake can give the right group: it must not be named there."""
    dp_size, tp_size = shape
    right = {rank: lesson10._formula(rank, dp_size, tp_size) for rank in range(dp_size * tp_size)}
    answers = {rank: {**groups, wrong: sorted({rank, (rank + 1) % (dp_size * tp_size)})}
               for rank, groups in right.items()}
    hint = lesson10._hint(answers, shape)
    other = "tp" if wrong == "dp" else "dp"
    assert f"your {other} group" not in hint.lower() and f"the {other} groups are right" in hint, hint


def test_an_all_reduce_never_waited_is_refused_when_the_gradients_come_out_right(average_gradients_results):
    """Whether an unwaited all-reduce's sum has arrived when the gradients are read depends on timing: an answer
    right by luck is refused all the same, from the work never waited for."""
    by_luck = [dict(result, unwaited=dict(result["unwaited"])) for result in average_gradients_results[
        waits_then_divides]]
    by_luck[4]["unwaited"]["2.bias"] = True
    with pytest.raises(CheckFailed, match=r"^rank 4, 2\.bias: the gradient came out right here, but by luck: "
                                          r"dist\.all_reduce\(\.\.\., async_op=True\) returned a work that was never "
                                          r"waited for.*\nHint: .*call its \.wait\(\) before the gradient is divided"):
        lesson10.judge_average_gradients("waits_then_divides", by_luck)


def test_a_gradient_changed_before_its_wait_is_refused_when_the_gradients_come_out_right(average_gradients_results):
    """A gradient divided while its async all-reduce runs comes out right or wrong by timing: refused all the same,
    from the write seen before the wait."""
    by_luck = [dict(result, written=dict(result["written"])) for result in average_gradients_results[
        waits_then_divides]]
    by_luck[3]["written"]["0.bias"] = True
    with pytest.raises(CheckFailed, match=r"^rank 3, 0\.bias: the gradient came out right here, but by luck: it was "
                                          r"changed after its dist\.all_reduce\(\.\.\., async_op=True\) started.*"
                                          r"\nHint: call the work's \.wait\(\) before the gradient is divided"):
        lesson10.judge_average_gradients("waits_then_divides", by_luck)


def test_get_group_without_a_dimension_gets_a_hint_naming_the_dp_dimension():
    """torch's refusal of mesh.get_group() on a 2-D mesh offers get_all_groups(): the hint names the dp group."""
    from ddp_lab.checks.common import CaseFailed
    from ddp_lab.launcher.errors import RankFailure

    torch_said = str(("Found the DeviceMesh have 2 dimensions", "Optional kwarg `mesh_dim` needs to be specified when "
                      "device_mesh.ndim > 1.", "If you want to get the list of all the ProcessGroups in the DeviceMesh,"
                      "please use `get_all_groups()` instead."))
    exception = CaseFailed("averaging the gradients of rank 0 in a (dp=3, tp=2) mesh", "RuntimeError", torch_said)
    failure = RankFailure(0, "raised", "raised RuntimeError", details="", exception=exception)
    assert lesson10._explain(failure) == ("this mesh has 2 dimensions, so get_group() needs the one to reduce over: "
                                          "mesh.get_group(\"dp\"), or mesh[\"dp\"].get_group().")

"""The lesson 10 checks accept a right answer and reject plausible wrong ones with specific feedback.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part of
the feedback that names it. Every check launches 4 gloo ranks (several seconds each on 2 cores).
"""

from __future__ import annotations

import pytest
import torch.distributed as dist

from ddp_lab.checks import CheckFailed
from ddp_lab.checks.lesson10 import check_average_gradients, check_dp_tp_groups


# --- dp_tp_groups ---------------------------------------------------------------------------

def dp_tp_groups(rank, dp_size, tp_size):
    row, col = divmod(rank, tp_size)
    return {"dp": [i * tp_size + col for i in range(dp_size)], "tp": [row * tp_size + j for j in range(tp_size)]}


def rows_and_columns_swapped(rank, dp_size, tp_size):
    row, col = divmod(rank, tp_size)
    return {"tp": [i * tp_size + col for i in range(dp_size)], "dp": [row * tp_size + j for j in range(tp_size)]}


def dimensions_in_wrong_order(rank, dp_size, tp_size):
    row, col = divmod(rank, dp_size)  # dp_size where tp_size belongs: the grid read as (tp, dp)
    return {"dp": [i * dp_size + col for i in range(tp_size)], "tp": [row * dp_size + j for j in range(dp_size)]}


def off_by_one(rank, dp_size, tp_size):
    row, col = divmod(rank, tp_size)
    return {"dp": [i * tp_size + col for i in range(dp_size)], "tp": [row * tp_size + j for j in range(1, tp_size + 1)]}


def groups_stub(rank, dp_size, tp_size):
    raise NotImplementedError("row, col = divmod(rank, tp_size)")


def test_dp_tp_groups_accepts_the_right_answer(capsys):
    check_dp_tp_groups(dp_tp_groups)
    last = capsys.readouterr().out.splitlines()[-1]  # after ddp_lab's note on machines with fewer than 4 cores
    assert last.startswith("✓ dp_tp_groups: the groups of every rank match real 4-rank meshes")


@pytest.mark.parametrize("answer, feedback", [
    (rows_and_columns_swapped, r"(?s)rank 0 in a \(dp=2, tp=2\) mesh: got dp \[0, 1\], tp \[0, 2\]; expected dp "
                               r"\[0, 2\], tp \[0, 1\] \(the groups of a real DeviceMesh.*"
                               r"rows and columns are swapped"),
    (dimensions_in_wrong_order, r"(?s)rank 0 in a \(dp=4, tp=1\) mesh.*mesh dimensions are in the wrong order.*"
                                r"row = rank // tp_size"),
    (off_by_one, r"(?s)rank 0 in a \(dp=2, tp=2\) mesh: got dp \[0, 2\], tp \[1, 2\].*shifted by \+1: an off-by-one"),
    (groups_stub, r"groups_stub is not written yet: it raised NotImplementedError"),
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
        grad.div_(2)


def within_the_row(model, mesh):
    for p in model.parameters():
        grad = p.grad.to_local()
        dist.all_reduce(grad, group=mesh["tp"].get_group())
        grad.div_(2)


def summed_not_averaged(model, mesh):
    for p in model.parameters():
        dist.all_reduce(p.grad.to_local(), group=mesh["dp"].get_group())


def divided_by_world_size(model, mesh):
    for p in model.parameters():
        grad = p.grad.to_local()
        dist.all_reduce(grad, group=mesh["dp"].get_group())
        grad.div_(dist.get_world_size())


def reduced_a_copy(model, mesh):
    for p in model.parameters():
        grad = p.grad.to_local().clone()
        dist.all_reduce(grad, group=mesh["dp"].get_group())
        grad = grad / mesh["dp"].size()


def average_stub(model, mesh):
    raise NotImplementedError("all-reduce p.grad.to_local() in the dp group")


def test_average_gradients_accepts_the_right_answer(capsys):
    check_average_gradients(average_gradients)
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("✓ average_gradients: every rank's gradients equal one process")


@pytest.mark.parametrize("answer, feedback", [
    (default_group, r"(?s)rank 0: collectives run by default_group: 4 × all_reduce on other\..*most likely all 4 "
                    r"ranks \(dist.all_reduce without group=\).*group=mesh\['dp'\].get_group\(\)"),
    (within_the_row, r"(?s)rank 0: collectives run by within_the_row: 4 × all_reduce on tp\..*reduced within the row"),
    (summed_not_averaged, r"(?s)rank 0, 0.weight.grad\[0, 0\]: got .*, expected .*the SUM over the 2 rows"),
    (divided_by_world_size, r"(?s)rank 0, 0.weight.grad.*divided by the world size \(4\)"),
    (reduced_a_copy, r"(?s)rank 0, 0.weight.grad.*row 0's own gradient.*in place"),
    (average_stub, r"average_stub is not written yet: it raised NotImplementedError"),
])
def test_average_gradients_rejects_wrong_answers(answer, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_average_gradients(answer)

"""The lesson 14 checks accept a right answer and reject plausible wrong ones with specific feedback.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part of the
feedback that names it, and a hint fires only on its own mistake (every answer gets a different
hint, the right ones none). To keep launches few, all answers of one exercise run in one launch
(`run_*_answers`) and each is judged alone (`judge_*`), exactly as the public check judges its one
answer; the public checks themselves run end to end in the solution notebook (nbval) and below on
the deadlocks, which stop at a 5 s timeout, and on two answers that raise; two more that raise go
through the runner (each ends its launch, so it runs alone). Each answer is called twice in its
launch: with the check's first numbers of experts, values per row or parameters, then with other
ones, so that a number written for the first fails in the second. Three batches, two deadlocks,
four more launches: about 30 s on 2 cores.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from ddp_lab.checks import CheckFailed
from ddp_lab.checks import lesson14
from ddp_lab.course.expert_parallel import Dispatched, all_to_all
from ddp_lab.course.expert_parallel import combine as library_combine
from ddp_lab.course.expert_parallel import dispatch as library_dispatch


# --- dispatch ---------------------------------------------------------------------------------

def _exchange(rows_per_expert):
    received = torch.empty_like(rows_per_expert)
    dist.all_to_all_single(received, rows_per_expert)
    return received.view(dist.get_world_size(), -1)


def _sorted_and_counted(expert, num_experts, key=None):
    order = torch.argsort(expert if key is None else key, stable=True)
    per_expert = torch.bincount(expert, minlength=num_experts)
    return order, per_expert, per_expert.view(dist.get_world_size(), -1).sum(dim=1)


def dispatch(rows, expert, num_experts, group=None):
    order, per_expert, sent = _sorted_and_counted(expert, num_experts)
    received_counts = _exchange(per_expert)
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1).tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def counts_never_exchanged(rows, expert, num_experts, group=None):
    order, per_expert, sent = _sorted_and_counted(expert, num_experts)
    received = torch.empty_like(rows)
    dist.all_to_all_single(received, rows[order], sent.tolist(), sent.tolist())
    return Dispatched(received, per_expert.view(dist.get_world_size(), -1), sent, order)


def splits_swapped(rows, expert, num_experts, group=None):
    order, per_expert, sent = _sorted_and_counted(expert, num_experts)
    received_counts = _exchange(per_expert)
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], sent.tolist(), received_counts.sum(dim=1).tolist())
    return Dispatched(received, received_counts, sent, order)


def own_counts_as_output_splits(rows, expert, num_experts, group=None):
    order, per_expert, sent = _sorted_and_counted(expert, num_experts)
    received_counts = _exchange(per_expert)
    received = rows.new_empty((int(sent.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], sent.tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def rows_not_sorted(rows, expert, num_experts, group=None):
    order, per_expert, sent = _sorted_and_counted(expert, num_experts)
    received_counts = _exchange(per_expert)
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows, received_counts.sum(dim=1).tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def sorted_by_rank_only(rows, expert, num_experts, group=None):
    order, per_expert, sent = _sorted_and_counted(expert, num_experts, key=expert // (num_experts // dist.get_world_size()))
    received_counts = _exchange(per_expert)
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1).tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def counts_without_minlength(rows, expert, num_experts, group=None):
    order = torch.argsort(expert, stable=True)
    per_expert = torch.bincount(expert)   # max(expert) + 1 entries: short on a rank without the last expert
    sent = per_expert.view(dist.get_world_size(), -1).sum(dim=1)
    received_counts = _exchange(per_expert)
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1).tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def counts_without_minlength_exchanged_first(rows, expert, num_experts, group=None):
    order = torch.argsort(expert, stable=True)
    per_expert = torch.bincount(expert)
    received_counts = _exchange(per_expert)   # the short counts meet the collective before any view
    sent = per_expert.view(dist.get_world_size(), -1).sum(dim=1)
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1).tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def counts_per_expert_returned(rows, expert, num_experts, group=None):
    received, received_counts, sent, order = dispatch(rows, expert, num_experts)
    return Dispatched(received, received_counts, torch.bincount(expert, minlength=num_experts), order)


def output_sized_like_input(rows, expert, num_experts, group=None):
    order, per_expert, sent = _sorted_and_counted(expert, num_experts)
    received_counts = _exchange(per_expert)
    received = torch.empty_like(rows)                 # as many rows as this rank sends, not as it receives
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1).tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def per_rank_counts_exchanged(rows, expert, num_experts, group=None):
    order, per_expert, sent = _sorted_and_counted(expert, num_experts)
    received_counts = _exchange(sent)                 # the totals per rank, not the counts per expert
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1).tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def inverse_order_returned(rows, expert, num_experts, group=None):
    received, received_counts, sent, order = dispatch(rows, expert, num_experts)
    return Dispatched(received, received_counts, sent, order.argsort())    # rows[order] was sent: order is right


def owner_round_robin(rows, expert, num_experts, group=None):
    order, per_expert, _ = _sorted_and_counted(expert, num_experts)
    sent = per_expert.view(-1, dist.get_world_size()).sum(dim=0)           # owner taken as expert % world_size
    received_counts = _exchange(per_expert)
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1).tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def split_sizes_as_tensors(rows, expert, num_experts, group=None):
    order, per_expert, sent = _sorted_and_counted(expert, num_experts)
    received_counts = _exchange(per_expert)
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1), sent)    # tensors, not lists of ints
    return Dispatched(received, received_counts, sent, order)


def counts_for_six_experts(rows, expert, num_experts, group=None):
    order = torch.argsort(expert, stable=True)
    per_expert = torch.bincount(expert, minlength=6)       # the check's 6 experts, written as a number
    sent = per_expert.view(dist.get_world_size(), -1).sum(dim=1)
    received_counts = _exchange(per_expert)
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1).tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def owner_written_as_expert_over_2(rows, expert, num_experts, group=None):
    order, per_expert, _ = _sorted_and_counted(expert, num_experts)
    sent = torch.bincount(expert // 2, minlength=dist.get_world_size())     # 2 experts per rank, written
    received_counts = _exchange(per_expert)
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1).tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def owner_counts_without_minlength(rows, expert, num_experts, group=None):
    order, per_expert, _ = _sorted_and_counted(expert, num_experts)
    sent = torch.bincount(expert // (num_experts // dist.get_world_size()))   # short where the last rank gets none
    received_counts = _exchange(per_expert)
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1).tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def split_sizes_as_floats(rows, expert, num_experts, group=None):
    order = torch.argsort(expert, stable=True)
    per_expert = torch.zeros(num_experts).index_add_(0, expert, torch.ones(len(expert)))   # float counts
    received_counts = _exchange(per_expert)
    sent = per_expert.view(dist.get_world_size(), -1).sum(dim=1)
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1).tolist(), sent.tolist())   # floats
    return Dispatched(received, received_counts, sent, order)


def output_of_one_value_per_row(rows, expert, num_experts, group=None):
    order, per_expert, sent = _sorted_and_counted(expert, num_experts)
    received_counts = _exchange(per_expert)
    received = rows.new_empty(int(received_counts.sum()))                    # 1-D: no room for a row's values
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1).tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def sent_counts_as_a_list(rows, expert, num_experts, group=None):
    received, received_counts, sent, order = dispatch(rows, expert, num_experts)
    return Dispatched(received, received_counts, sent.tolist(), order)


def received_counts_summed_per_rank(rows, expert, num_experts, group=None):
    order, per_expert, sent = _sorted_and_counted(expert, num_experts)
    received_counts = _exchange(per_expert).sum(dim=1)    # the per-expert counts exchanged, then summed per sender
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], received_counts.tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def sorted_descending(rows, expert, num_experts, group=None):
    order, per_expert, sent = _sorted_and_counted(expert, num_experts, key=-expert)   # the last experts first
    received_counts = _exchange(per_expert)
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1).tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


# what a failure in the second call of dispatch or combine says first
SECOND_CALL = r"with 3 experts \(1 per rank\) and rows of 3 values instead of 6 \(2 per rank\) and 4"
PACKAGE_ANSWER = r"^{name} calls ddp_lab.course.expert_parallel.dispatch.{called}, the package's own answer"

DISPATCH_ANSWERS = {
    dispatch: None,
    library_dispatch: PACKAGE_ANSWER.format(name="dispatch", called="dispatch"),
    counts_never_exchanged: r"(?s)rank 0, all_to_all_single call 1 \(the rows\): output_split_sizes=\[3, 2, 2\], but "
                            r"the ranks send this rank \[3, 1, 3\].*no collective call before sending its rows.*"
                            r"Exchange the per-expert counts first",
    splits_swapped: r"(?s)rank 1, all_to_all_single call 2 \(the rows\): input_split_sizes=\[2, 2, 2\] add up to 6, "
                    r"but the input has 5 rows.*Hint: the two split lists are swapped",
    own_counts_as_output_splits: r"(?s)rank 0, all_to_all_single call 2.*Hint: output_split_sizes equals your own "
                                 r"input_split_sizes",
    rows_not_sorted: r"(?s)rank 0, received row 0: got row 0 of rank 0, expected row 1 of rank 0.*original order: "
                     r"send rows\[order\]",
    sorted_by_rank_only: r"(?s)rank 0: the experts of your rows in `order` are \[0, 1, 0, .*grouped by rank but not "
                         r"by expert",
    counts_per_expert_returned: r"(?s)rank 0: sent_counts \[2, 1, 0, 2, 1, 1\], expected \[3, 2, 2\].*counts per "
                                r"expert; sent_counts has one entry per RANK",
    counts_without_minlength_exchanged_first: r"(?s)^rank 1, all_to_all_single call 1 \(the counts\): .*the input has 5 "
                                              r"rows.*Hint: rank 1 has no row for the last expert, and its counts "
                                              r"have 5 entries",
    output_sized_like_input: r"(?s)all_to_all_single call 2 \(the rows\): .*Hint: both split lists are right; the "
                             r"output buffer is not",
    per_rank_counts_exchanged: r"(?s)rank 0: received_counts \[\[3\], \[1\], \[3\]\].*Hint: received_counts holds one "
                               r"count per rank: the counts exchanged were per-rank totals",
    inverse_order_returned: r"(?s)rank 0: the experts of your rows in `order` .*Hint: `order` is the inverse of the "
                            r"sorting permutation",
    split_sizes_as_tensors: r"(?s)^(?!.*incompatible function arguments)rank 0, all_to_all_single call 2: torch "
                            r"refused the call, which got output_split_sizes as a tensor and input_split_sizes as a "
                            r"tensor\. The split sizes' values fit together on every rank.*Hint: .*lists of ints: "
                            r"pass each through \.tolist\(\)",
    owner_round_robin: r"(?s)^rank 0 sent its rows with input_split_sizes=\[\d+, \d+, \d+\], but its rows for each "
                       r"rank's experts number \[3, 2, 2\].*Hint: these count your rows by expert % 3",
    # right with 6 experts: only the second call, with 3, shows the number written for them
    counts_for_six_experts: rf"(?s)^{SECOND_CALL}: rank 0: sent_counts \[3, 3, 0\], expected \[2, 1, 3\]\.\nHint: "
                            r"these are your rows counted for 6 experts, the first call's number",
    owner_written_as_expert_over_2: rf"(?s)^{SECOND_CALL}: rank 0 sent its rows with input_split_sizes=\[3, 3, 0\], "
                                    r"but its rows for each rank's experts number \[2, 1, 3\].*Hint: these count your "
                                    r"rows by expert // 2",
    # right in the first call, where every rank has rows for the last rank's experts; in the second rank 2 has none
    owner_counts_without_minlength: rf"(?s)^{SECOND_CALL}: rank 2 sent its rows with input_split_sizes=\[2, 3\], but "
                                    r"its rows for each rank's experts number \[2, 3, 0\].*Hint: these are your rows "
                                    r"per owning rank, but they stop at rank 1.*minlength=world_size",
    split_sizes_as_floats: r"(?s)^(?!.*incompatible function arguments)rank 0, all_to_all_single call 2: torch refused "
                           r"the call, which got output_split_sizes as a list of floats and input_split_sizes as a "
                           r"list of floats\..*Hint: .*lists of ints: your counts are floating-point.*\.long\(\)",
    output_of_one_value_per_row: r"(?s)^rank 0, all_to_all_single call 2 \(the rows\): the input's rows have shape "
                                 r"\(4,\), the output's \(\)\.\nHint: the output is 1-D, one value per row",
    # the per-expert counts were exchanged (call 1 sent 6 values): not named as per-rank totals exchanged
    received_counts_summed_per_rank: r"(?s)^(?!.*per-rank totals)rank 0: received_counts \[3, 1, 3\], expected "
                                     r"\[\[2, 1\], \[1, 0\], \[1, 2\]\]\.\nHint: these are the exchanged per-expert "
                                     r"counts summed per sending rank",
    sorted_descending: r"(?s)^rank 0: the experts of your rows in `order` are \[5, 4, 3, 3, 1, 0, 0\].*Hint: the rows "
                       r"are sorted in descending order of expert",
    sent_counts_as_a_list: r"^rank 0: sent_counts_as_a_list returned a Dispatched whose sent_counts is a list of 3: "
                           r"\[int, int, int\], not a tensor; expected Dispatched\(received, received_counts, "
                           r"sent_counts, order\), four tensors\.\nHint: keep the counts and the order as tensors",
}


def assert_judged(judge, answer, result, feedback, accepted):
    """A batched answer judged alone: the right one passes with `accepted`'s words, a wrong one matches `feedback`."""
    if feedback is None:
        assert judge(answer.__name__, result).startswith(accepted)
    else:
        with pytest.raises(CheckFailed, match=feedback):
            judge(answer.__name__, result)


@pytest.fixture(scope="module")
def dispatch_results():
    answers = tuple(DISPATCH_ANSWERS)
    return dict(zip(answers, lesson14.run_dispatch_answers(answers)))


@pytest.mark.parametrize("answer", DISPATCH_ANSWERS, ids=lambda answer: answer.__name__)
def test_dispatch_feedback(dispatch_results, answer):
    assert_judged(lesson14.judge_dispatch, answer, dispatch_results[answer], DISPATCH_ANSWERS[answer],
                  accepted=f"{answer.__name__}: counts exchanged first, then every rank's rows reached")


def test_dispatch_names_counts_taken_without_minlength():
    # an answer that raises ends its launch, so it runs alone: rank 1 has no row for the last expert
    with pytest.raises(CheckFailed, match=r"(?s)^rank 1: counts_without_minlength raised RuntimeError: shape '\[3, -1\]' "
                                          r"is invalid for input of size 5.*per_expert.view.*Hint: rank 1 has no row for "
                                          r"the last expert, and its counts have 5 entries, not num_experts = 6.*"
                                          r"minlength=num_experts"):
        lesson14.check_dispatch(counts_without_minlength)


def counts_viewed_as_3_by_2(rows, expert, num_experts, group=None):
    order = torch.argsort(expert, stable=True)
    per_expert = torch.bincount(expert, minlength=num_experts).view(3, 2)   # 3 ranks of 2 experts, written
    received_counts = torch.empty_like(per_expert)
    dist.all_to_all_single(received_counts, per_expert)
    sent = per_expert.sum(dim=1)
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1).tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def counts_viewed_for_three_ranks(rows, expert, num_experts, group=None):
    order = torch.argsort(expert, stable=True)
    per_expert = torch.bincount(expert, minlength=num_experts)
    sent = per_expert.view(3, -1).sum(dim=1)                                # the check's 3 ranks, written
    received_counts = _exchange(per_expert)
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1).tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def experts_per_rank_over_three(rows, expert, num_experts, group=None):
    order, per_expert, _ = _sorted_and_counted(expert, num_experts)
    sent = torch.bincount(expert // (num_experts // 3), minlength=dist.get_world_size())   # 3 ranks, written
    received_counts = _exchange(per_expert)
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1).tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def test_dispatch_refuses_a_world_size_written_in_before_any_rank_starts(monkeypatch):
    """Both calls run on 3 ranks, so only the source shows a 3 written for the world size."""
    monkeypatch.setattr(lesson14, "run_dispatch_answers", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^counts_viewed_for_three_ranks reshapes a tensor with a size of 3, a "
                                          r"number written in the code \(`sent = per_expert\.view\(3, -1\)\.sum"
                                          r"\(dim=1\)`\)\.\nHint: take the sizes from dist\.get_world_size\(group\) "
                                          r"and num_experts"):
        lesson14.check_dispatch(counts_viewed_for_three_ranks)
    with pytest.raises(CheckFailed, match=r"^experts_per_rank_over_three divides an expert count or index by 3, a "
                                          r"number written in the code"):
        lesson14.check_dispatch(experts_per_rank_over_three)
    with pytest.raises(CheckFailed, match=r"^counts_viewed_as_3_by_2 reshapes a tensor with a size of 3"):
        lesson14.check_dispatch(counts_viewed_as_3_by_2)


def dispatch_with_both_splits_stacked(rows, expert, num_experts, group=None):
    """Right: the two split lists stacked and viewed as 2 rows (2 counts a pair, no size of the run)."""
    world_size = dist.get_world_size(group)
    order = torch.argsort(expert, stable=True)
    per_expert = torch.bincount(expert, minlength=num_experts)
    sent = per_expert.view(world_size, -1).sum(dim=1)
    received_counts = torch.empty_like(per_expert)
    dist.all_to_all_single(received_counts, per_expert, group=group)
    received_counts = received_counts.view(world_size, -1)
    splits = torch.stack([received_counts.sum(dim=1), sent]).view(2, -1)
    received = rows.new_empty((int(splits[0].sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], splits[0].tolist(), splits[1].tolist(), group=group)
    return Dispatched(received, received_counts, sent, order)


class _RanksWouldStart(Exception):
    pass


def _ranks_would_start(*args, **kwargs):
    raise _RanksWouldStart


def test_dispatch_lets_a_pair_viewed_as_2_rows_through_to_the_ranks(monkeypatch):
    monkeypatch.setattr(lesson14, "run_dispatch_answers", _ranks_would_start)   # the source rules let it through
    with pytest.raises(_RanksWouldStart):
        lesson14.check_dispatch(dispatch_with_both_splits_stacked)


def test_dispatch_names_a_shape_written_for_the_first_call():
    # right with 6 experts; the second call, with 3, raises inside the view, which ends the launch: it runs alone
    # (through the runner: the public check refuses the written shape from the source first)
    with pytest.raises(CheckFailed, match=r"(?s)^rank \d: counts_viewed_as_3_by_2 raised RuntimeError: shape "
                                          r"'\[3, 2\]' is invalid for input of size 3\nwhile dispatching rank \d's "
                                          r"\d rows to 3 experts \(1 per rank\), rows of 3 values.*Hint: this call has "
                                          r"3 experts \(1 per rank\), the first had 6 \(2 per rank\): the shape "
                                          r"\[3, 2\] holds the first call's numbers"):
        lesson14.run_dispatch_answers((counts_viewed_as_3_by_2,), name="counts_viewed_as_3_by_2")


def counts_buffer_of_floats(rows, expert, num_experts, group=None):
    order, per_expert, sent = _sorted_and_counted(expert, num_experts)
    received_counts = torch.empty(num_experts)                  # float32, for int64 counts
    dist.all_to_all_single(received_counts, per_expert)
    received_counts = received_counts.long().view(dist.get_world_size(), -1)
    received = rows.new_empty((int(received_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(received, rows[order], received_counts.sum(dim=1).tolist(), sent.tolist())
    return Dispatched(received, received_counts, sent, order)


def test_dispatch_names_a_counts_buffer_of_another_dtype():
    # torch raises, which ends the launch: it runs alone. The traceback holds the guard's frames, which name split
    # sizes: the hint comes from torch's message, not from them
    with pytest.raises(CheckFailed, match=r"(?s)^rank \d: counts_buffer_of_floats raised ValueError inside torch: "
                                          r"Invalid usage of tensors with different dtypes.*Hint: a collective "
                                          r"receives into a buffer of the dtype it sends: the counts are torch.int64, "
                                          r"the buffer made for them torch.float32.*torch.empty_like\(counts\)\.$"
                       ) as failure:
        lesson14.run_dispatch_answers((counts_buffer_of_floats,), name="counts_buffer_of_floats")
    assert "input_split_sizes[j]" not in str(failure.value)


def test_the_guard_leaves_a_collective_given_no_tensor_to_torchs_own_error():
    """Counts passed as a list where a tensor goes: torch says which argument is not a tensor (the guard read its
    .shape and raised "'list' object has no attribute 'shape'")."""
    from ddp_lab.checks.split_guard import guarded_all_to_all

    with guarded_all_to_all(), pytest.raises(TypeError) as refused:   # torch's check, before any process group
        dist.all_to_all_single(torch.empty(2), [1, 1])
    assert "shape" not in str(refused.value)


def test_dispatch_hints_from_the_exception_not_from_the_guards_frames():
    """Whatever raises inside all_to_all_single, the traceback shows the guard's own lines, which name split sizes:
    only an exception whose own message names them gets the split-sizes hint."""
    from ddp_lab.checks.common import CaseFailed
    from ddp_lab.launcher.errors import RankFailure

    guard = ('  File "/x/ddp_lab/checks/split_guard.py", line 96, in all_to_all_single\n'
             "    return original(output, input, output_split_sizes, input_split_sizes, group=group)\n")

    def failure(message):
        exception = CaseFailed("dispatching rank 0's 7 rows to 6 experts (2 per rank), rows of 4 values",
                               "RuntimeError", message)
        return RankFailure(0, "raised", "raised RuntimeError", details=f"Traceback:\n{guard}RuntimeError: {message}",
                           exception=exception)

    assert lesson14._explain(failure("Tensors must be CPU and dense")) is None
    assert lesson14._explain(failure("Split sizes doesn't match total dim 0 size")) == lesson14.SPLITS_HINT


def rank_0_returns_early(rows, expert, num_experts, group=None):
    if dist.get_rank() == 0:
        return None
    return dispatch(rows, expert, num_experts)


def test_dispatch_stops_a_deadlock():
    with pytest.raises(CheckFailed, match=r"(?s)rank_0_returns_early did not finish within 2 s.*Stuck: rank 1 in "
                                          r"dist\.all_to_all_single.*every rank must call it"):
        lesson14.check_dispatch(rank_0_returns_early, timeout=2)


def rows_through_all_to_all_of_lists(rows, expert, num_experts, group=None):
    order, per_expert, sent = _sorted_and_counted(expert, num_experts)
    received_counts = _exchange(per_expert)
    blocks = [rows.new_empty((int(n), rows.shape[1])) for n in received_counts.sum(dim=1)]
    dist.all_to_all(blocks, list(rows[order].split(sent.tolist())))   # gloo: blocks of one shape only
    return Dispatched(torch.cat(blocks), received_counts, sent, order)


def test_dispatch_names_gloos_all_to_all_of_uneven_blocks():
    # torch 2.8's gloo has no list all_to_all at all; later ones refuse blocks of different shapes
    with pytest.raises(CheckFailed, match=r"(?s)\nHint: gloo's dist\.all_to_all \(a list of tensors\) (does not "
                                          r"exist|takes blocks of one shape only).*one dist\.all_to_all_single"):
        lesson14.check_dispatch(rows_through_all_to_all_of_lists)


# --- combine ----------------------------------------------------------------------------------

def _back(expert_output, dispatched, swap=False):
    splits = [dispatched.sent_counts.tolist(), dispatched.received_counts.sum(dim=1).tolist()]
    return all_to_all(expert_output, *(splits[::-1] if swap else splits))


def combine(expert_output, dispatched, token_index, gates, x, group=None):
    rows = _back(expert_output, dispatched)[dispatched.order.argsort()]
    return x.index_add(0, token_index, rows * gates.unsqueeze(-1))


def reverse_splits_not_swapped(expert_output, dispatched, token_index, gates, x, group=None):
    rows = _back(expert_output, dispatched, swap=True)[dispatched.order.argsort()]
    return x.index_add(0, token_index, rows * gates.unsqueeze(-1))


def gates_forgotten(expert_output, dispatched, token_index, gates, x, group=None):
    return x.index_add(0, token_index, _back(expert_output, dispatched)[dispatched.order.argsort()])


def gates_twice(expert_output, dispatched, token_index, gates, x, group=None):
    weighted = _back(expert_output * 1, dispatched)[dispatched.order.argsort()] * gates.unsqueeze(-1)
    return x.index_add(0, token_index, weighted * gates.unsqueeze(-1))


def dropped_tokens_zero(expert_output, dispatched, token_index, gates, x, group=None):
    rows = _back(expert_output, dispatched)[dispatched.order.argsort()]
    y = torch.zeros_like(x).index_add(0, token_index, rows * gates.unsqueeze(-1))
    routed = token_index.unique()
    y[routed] += x[routed]                      # the residual only where an expert took the token
    return y


def residual_forgotten(expert_output, dispatched, token_index, gates, x, group=None):
    rows = _back(expert_output, dispatched)[dispatched.order.argsort()]
    return torch.zeros_like(x).index_add(0, token_index, rows * gates.unsqueeze(-1))


def assigned_not_added(expert_output, dispatched, token_index, gates, x, group=None):
    rows = _back(expert_output, dispatched)[dispatched.order.argsort()]
    y = x.clone()
    y[token_index] = x[token_index] + rows * gates.unsqueeze(-1)
    return y


def added_at_repeated_indices(expert_output, dispatched, token_index, gates, x, group=None):
    rows = _back(expert_output, dispatched)[dispatched.order.argsort()]
    y = x.clone()
    y[token_index] += rows * gates.unsqueeze(-1)    # one write per repeated index, as with =
    return y


def sort_not_undone(expert_output, dispatched, token_index, gates, x, group=None):
    return x.index_add(0, token_index, _back(expert_output, dispatched) * gates.unsqueeze(-1))


def return_splits_both_received(expert_output, dispatched, token_index, gates, x, group=None):
    received = dispatched.received_counts.sum(dim=1).tolist()
    back = expert_output.new_empty((int(dispatched.sent_counts.sum()), expert_output.shape[1]))
    dist.all_to_all_single(back, expert_output, received, received)       # the same list on both sides
    return x.index_add(0, token_index, back[dispatched.order.argsort()] * gates.unsqueeze(-1))


def return_buffer_sized_like_input(expert_output, dispatched, token_index, gates, x, group=None):
    back = torch.empty_like(expert_output)      # as many rows as this rank received, not as it dispatched
    dist.all_to_all_single(back, expert_output.contiguous(), dispatched.sent_counts.tolist(),
                           dispatched.received_counts.sum(dim=1).tolist())
    return x.index_add(0, token_index, back[dispatched.order.argsort()] * gates.unsqueeze(-1))


def sorted_twice(expert_output, dispatched, token_index, gates, x, group=None):
    rows = _back(expert_output, dispatched)[dispatched.order]
    return x.index_add(0, token_index, rows * gates.unsqueeze(-1))


def gates_paired_with_sorted_rows(expert_output, dispatched, token_index, gates, x, group=None):
    rows = _back(expert_output, dispatched) * gates.unsqueeze(-1)   # gates in dispatch order, rows sorted by expert
    return x.index_add(0, token_index, rows[dispatched.order.argsort()])


def return_rows_of_4_values(expert_output, dispatched, token_index, gates, x, group=None):
    back = expert_output.new_empty((int(dispatched.sent_counts.sum()), 4))   # the check's 4 values, written
    dist.all_to_all_single(back, expert_output.contiguous(), dispatched.sent_counts.tolist(),
                           dispatched.received_counts.sum(dim=1).tolist())
    return x.index_add(0, token_index, back[dispatched.order.argsort()] * gates.unsqueeze(-1))


def combine_into_x(expert_output, dispatched, token_index, gates, x, group=None):
    rows = _back(expert_output, dispatched)[dispatched.order.argsort()]
    return x.index_add_(0, token_index, rows * gates.unsqueeze(-1))      # the caller's x, added into in place


def sorted_again_by_a_scatter(expert_output, dispatched, token_index, gates, x, group=None):
    back = _back(expert_output, dispatched)
    rows = torch.empty_like(back)
    rows[dispatched.order.argsort()] = back        # a scatter through the inverse: back[order] again
    return x.index_add(0, token_index, rows * gates.unsqueeze(-1))


def gates_sorted_rows_not(expert_output, dispatched, token_index, gates, x, group=None):
    rows = _back(expert_output, dispatched)[dispatched.order.argsort()]
    return x.index_add(0, token_index, rows * gates[dispatched.order].unsqueeze(-1))


def no_return_trip(expert_output, dispatched, token_index, gates, x, group=None):
    rows = expert_output[dispatched.order.argsort()]        # the rows other ranks sent, never sent back
    return x.index_add(0, token_index, rows * gates.unsqueeze(-1))


COMBINE_ANSWERS = {
    combine: None,
    library_combine: PACKAGE_ANSWER.format(name="combine", called="combine"),
    reverse_splits_not_swapped: r"(?s)rank 0, all_to_all_single call 1: input_split_sizes=\[2, 2, 3\] add up to 7, "
                                r"but the input has 6 rows.*the reverse trip swaps the split lists",
    gates_forgotten: r"(?s)rank 0, token 0: got .*the gate weights are missing",
    gates_twice: r"(?s)rank 0, token 0: got .*the gates are applied twice",
    dropped_tokens_zero: r"(?s)rank 0, token 2: got \[0.0, 0.0, 0.0, 0.0\].*a dropped token must leave the layer as it "
                         r"came in",
    residual_forgotten: r"(?s)rank 0, token 0: got .*the residual is missing",
    assigned_not_added: r"(?s)rank 0, token 0: got .*got only one expert's output.*index_add",
    sort_not_undone: r"(?s)rank 0, token \d: got .*undo the sort with the inverse of dispatched.order",
    sorted_twice: r"(?s)rank 0, token \d: got .*the permutation was applied a second time instead of undone, as "
                  r"back\[order\] does",
    gates_paired_with_sorted_rows: r"(?s)rank 0, token 0: got .*with another row's gate: .*Undo the sort before "
                                   r"weighting, or weight the returned rows, still sorted, by "
                                   r"gates\[dispatched\.order\]",
    combine_into_x: r"(?s)^rank 0: combine_into_x changed the x it was given, the tokens and residual \(x\[0, 0\] is "
                    r"now \S+, was \S+\)\.\nHint: an in-place operation on x",
    gates_sorted_rows_not: r"(?s)rank 0, token 0: got .*with another row's gate: the rows were put back in token "
                           r"order, where row i's gate is gates\[i\] as it is",
    return_splits_both_received: r"(?s)rank 0, all_to_all_single call 1: output_split_sizes=.*Hint: on the return "
                                 r"trip each rank sends back the expert outputs of the rows it received",
    return_buffer_sized_like_input: r"(?s)rank 0, all_to_all_single call 1: output_split_sizes=\[2, 2, 3\] add up to "
                                    r"7, but the output has 6 rows.*Hint: both split lists are right; the output "
                                    r"buffer is not: .* = 7 rows",
    return_rows_of_4_values: rf"(?s)^{SECOND_CALL}: rank 0, all_to_all_single call 1: the input's rows have shape "
                             r"\(3,\), the output's \(4,\)\.\nHint: the output's rows must be shaped like the rows "
                             r"sent",
}


@pytest.fixture(scope="module")
def combine_results():
    answers = (*COMBINE_ANSWERS, added_at_repeated_indices, sorted_again_by_a_scatter)
    return dict(zip(answers, lesson14.run_combine_answers(answers)))


def test_combine_names_a_return_trip_never_made():
    # the rows other ranks sent, unsorted as if they were this rank's own: an IndexError where their numbers differ
    # (a launch of its own: an answer that raises ends its launch)
    with pytest.raises(CheckFailed, match=r"(?s)^rank \d: no_return_trip raised IndexError: .*Hint: this rank had "
                                          r"called no collective when it raised, on the sizes of its rows\. "
                                          r"expert_output holds the outputs of the rows OTHER ranks sent this one"):
        lesson14.check_combine(no_return_trip)


def combine_with_a_misspelt_field(expert_output, dispatched, token_index, gates, x, group=None):
    counts = dispatched.sent_count.tolist()         # no such field: an AttributeError before any collective
    return x


def test_an_error_before_any_collective_that_is_no_size_error_gets_no_return_trip_hint():
    with pytest.raises(CheckFailed, match=r"(?s)raised AttributeError") as failure:
        lesson14.check_combine(combine_with_a_misspelt_field)
    assert "had called no collective" not in str(failure.value), failure.value


def splits_of_the_wrong_dimension_functional(expert_output, dispatched, token_index, gates, x, group=None):
    """Wrong: the return trip made by torch's functional all_to_all_single (which dist's guards do not see), its
    output splits summed over the wrong dimension, so torch raises inside it."""
    back = funcol.all_to_all_single(expert_output, dispatched.sent_counts.tolist(),
                                    dispatched.received_counts.sum(dim=0).tolist(), dist.group.WORLD).wait()
    return x.index_add(0, token_index, back[dispatched.order.argsort()] * gates.unsqueeze(-1))


def test_a_functional_all_to_all_counts_as_a_collective_called():
    with pytest.raises(CheckFailed, match=r"(?s)splits_of_the_wrong_dimension_functional raised RuntimeError inside "
                                          r"torch") as failure:
        lesson14.check_combine(splits_of_the_wrong_dimension_functional, timeout=10)
    assert "had called no collective" not in str(failure.value), failure.value


def test_combine_names_a_scatter_through_the_inverse_with_the_gather(combine_results):
    # rows[order.argsort()] = back gives sorted_twice's values (back[order]): one hint names both forms
    with pytest.raises(CheckFailed, match=r"(?s)rank 0, token \d: got .*as back\[order\] does \(and the same as "
                                          r"scattering through the inverse, rows\[order\.argsort\(\)\] = back\).*"
                                          r"or scatter with the order itself, rows\[order\] = back"):
        lesson14.judge_combine(sorted_again_by_a_scatter.__name__, combine_results[sorted_again_by_a_scatter])


def test_combine_names_an_add_at_repeated_indices_with_the_assignment(combine_results):
    # y[token_index] += ... gives assigned_not_added's values (one write per repeated index): one hint names both
    with pytest.raises(CheckFailed, match=r"(?s)^(?!.*keeps the last write)rank 0, token 0: got .*got only one "
                                          r"expert's output: with repeated indices, y\[token_index\] = \.\.\. and "
                                          r"y\[token_index\] \+= \.\.\. both keep one write per token.*index_add "
                                          r"adds every row"):
        lesson14.judge_combine(added_at_repeated_indices.__name__, combine_results[added_at_repeated_indices])


@pytest.mark.parametrize("answer", COMBINE_ANSWERS, ids=lambda answer: answer.__name__)
def test_combine_feedback(combine_results, answer):
    assert_judged(lesson14.judge_combine, answer, combine_results[answer], COMBINE_ANSWERS[answer],
                  accepted=f"{answer.__name__}: expert outputs came back")


@pytest.mark.parametrize("case", lesson14.COMBINE_CASES, ids=lambda case: f"{case.num_experts}_experts")
def test_combine_inputs_tell_the_mistakes_apart(case):
    """In every call, on every rank, the wrong answers' outputs differ from the right one and from each other."""
    for rank in range(lesson14.WORLD_SIZE):
        candidates = lesson14._combine_candidates(rank, case)
        outputs = [value for key, value in candidates.items() if key != "dropped"]
        for i, a in enumerate(outputs):
            for b in outputs[i + 1:]:
                assert not torch.allclose(a, b, atol=1e-4), rank
        assert candidates["dropped"].any(), rank                    # a token that lost both assignments


# --- reduce_gradients ---------------------------------------------------------------------------

def reduce_gradients(replicated, expert, dp_group):
    for p in replicated:
        dist.all_reduce(p.grad)
    for p in expert:
        dist.all_reduce(p.grad, group=dp_group)


def experts_over_every_rank(replicated, expert, dp_group):
    for p in [*replicated, *expert]:
        dist.all_reduce(p.grad)


def experts_not_reduced(replicated, expert, dp_group):
    for p in replicated:
        dist.all_reduce(p.grad)


def averaged_like_ddp(replicated, expert, dp_group):
    for p in replicated:
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    for p in expert:
        dist.all_reduce(p.grad, group=dp_group)
        p.grad /= dist.get_world_size(dp_group)


def replicated_over_dp_group(replicated, expert, dp_group):
    for p in [*replicated, *expert]:
        dist.all_reduce(p.grad, group=dp_group)


def paired_by_zip(replicated, expert, dp_group):
    for r, e in zip(replicated, expert):   # stops at the shorter list
        dist.all_reduce(r.grad)
        dist.all_reduce(e.grad, group=dp_group)


def experts_reduced_as_copies(replicated, expert, dp_group):
    for p in replicated:
        dist.all_reduce(p.grad)
    for p in expert:
        grad = p.grad.clone()
        dist.all_reduce(grad, group=dp_group)   # sums into the copy; p.grad keeps the rank's own


def all_reduce_never_waited(replicated, expert, dp_group):
    for p in replicated:
        dist.all_reduce(p.grad, async_op=True)                   # the work handles are dropped, never waited on
    for p in expert:
        dist.all_reduce(p.grad, group=dp_group, async_op=True)


def reduces_the_parameters(replicated, expert, dp_group):
    for p in replicated:
        dist.all_reduce(p)                       # the weights, not their gradients
    for p in expert:
        dist.all_reduce(p, group=dp_group)


def loops_over_written_counts(replicated, expert, dp_group):
    for i in range(3):                                      # the check's 3 replicated parameters, written
        dist.all_reduce(replicated[i].grad)
    for i in range(2):
        dist.all_reduce(expert[i].grad, group=dp_group)


def experts_reduced_twice(replicated, expert, dp_group):
    for p in expert:
        dist.all_reduce(p.grad, group=dp_group)
    for p in [*replicated, *expert]:              # then everything over all ranks, the experts a second time
        dist.all_reduce(p.grad)


REDUCE_ANSWERS = {
    reduce_gradients: None,
    experts_reduced_as_copies: r"(?s)rank 0, expert parameter 0.*dist\.all_reduce ran, but not on this p\.grad: it "
                               r"sums in place",
    paired_by_zip: r"(?s)^rank 0, replicated parameter 2: not all-reduced, though replicated parameters 0 to 1 and "
                   r"every expert one were.*zip\(replicated, expert\) stops at the shorter list",
    experts_over_every_rank: r"(?s)rank 0, expert parameter 0.*summed over all 4 ranks: ranks 0 and 1 hold DIFFERENT "
                             r"experts",
    experts_not_reduced: r"(?s)rank 0, expert parameter 0.*not all-reduced: the other rank of your dp group",
    averaged_like_ddp: r"(?s)rank 0, replicated parameter 0.*this is the mean.*do not divide",
    replicated_over_dp_group: r"(?s)rank 0, replicated parameter 0.*summed over dp_group only: every rank holds them",
    # which rank and parameter show it first depends on when gloo finishes each all-reduce
    # (or right by luck, if every sum has arrived when the gradients are read: refused all the same)
    all_reduce_never_waited: r"(?s)rank \d, (replicated|expert) parameter \d: (got .*Hint: dist\.all_reduce was "
                             r"started on this p\.grad \(async_op=True\), but its result was read before it finished|"
                             r"the gradient came out right here, but by luck).*\.wait\(\)",
    loops_over_written_counts: r"(?s)^with 4 replicated and 3 expert parameters instead of 3 and 2: rank 0, "
                               r"replicated parameter 3: not all-reduced, though replicated parameters 0 to 2 "
                               r"were.*Hint: the loops stop at 3 replicated and 2 expert parameters, the first "
                               r"call's numbers",
    reduces_the_parameters: r"(?s)^rank 0, replicated parameter 0: got .*Hint: dist\.all_reduce ran on the parameter "
                            r"itself, not on its gradient",
    experts_reduced_twice: r"(?s)^rank 0, expert parameter 0: got .*Hint: this p\.grad was all-reduced 2 times",
}


def replicated_through_a_flat_buffer_experts_forgotten(replicated, expert, dp_group):
    flat = torch.cat([p.grad.flatten() for p in replicated])
    dist.all_reduce(flat)
    for p, part in zip(replicated, flat.split([p.numel() for p in replicated])):
        p.grad.copy_(part.view_as(p.grad))


def a_counter_reduced_experts_forgotten(replicated, expert, dp_group):
    dist.all_reduce(torch.ones(1))   # something else entirely
    for p in replicated:
        dist.all_reduce(p.grad)


# wrong answers whose expert gradients were never all-reduced, and never held in a tensor that was: they get the
# plain hint, not the one for a reduced copy (the same hint as experts_not_reduced, so kept out of REDUCE_ANSWERS)
NEVER_REDUCED = (replicated_through_a_flat_buffer_experts_forgotten, a_counter_reduced_experts_forgotten)


@pytest.fixture(scope="module")
def reduce_results():
    answers = (*REDUCE_ANSWERS, *NEVER_REDUCED)
    return dict(zip(answers, lesson14.run_reduce_answers(answers)))


@pytest.mark.parametrize("answer", NEVER_REDUCED, ids=lambda answer: answer.__name__)
def test_reduce_gradients_names_a_gradient_never_reduced_plainly(reduce_results, answer):
    with pytest.raises(CheckFailed, match=r"(?s)rank 0, expert parameter 0.*not all-reduced: the other rank of your "
                                          r"dp group") as failure:
        lesson14.judge_reduce(answer.__name__, reduce_results[answer])
    assert "dist.all_reduce ran, but not on this p.grad" not in str(failure.value)


@pytest.mark.parametrize("answer", REDUCE_ANSWERS, ids=lambda answer: answer.__name__)
def test_reduce_gradients_feedback(reduce_results, answer):
    assert_judged(lesson14.judge_reduce, answer, reduce_results[answer], REDUCE_ANSWERS[answer],
                  accepted=f"{answer.__name__}: replicated gradients summed over all 4 ranks")


def experts_only_on_rank_0(replicated, expert, dp_group):
    for p in replicated:
        dist.all_reduce(p.grad)
    if dist.get_rank() == 0:
        for p in expert:
            dist.all_reduce(p.grad, group=dp_group)


def test_reduce_gradients_stops_a_deadlock():
    # the other ranks went on to the second call's first all-reduce
    with pytest.raises(CheckFailed, match=r"(?s)experts_only_on_rank_0 did not finish within 2 s.*Stuck: rank 0 in "
                                          r"dist\.all_reduce,.*every rank must all-reduce every gradient"):
        lesson14.check_reduce_gradients(experts_only_on_rank_0, timeout=2)


# --- stubs and feedback that names each mistake once ---------------------------------------------

def dispatch_stub(rows, expert, num_experts, group=None):
    raise NotImplementedError("argsort the experts")


def combine_stub(expert_output, dispatched, token_index, gates, x, group=None):
    raise NotImplementedError("the reverse all_to_all_single")


def reduce_stub(replicated, expert, dp_group):
    raise NotImplementedError("dist.all_reduce with SUM")


@pytest.mark.parametrize("check, stub", [(lesson14.check_dispatch, dispatch_stub),
                                         (lesson14.check_combine, combine_stub),
                                         (lesson14.check_reduce_gradients, reduce_stub)])
def test_a_stub_is_named_without_starting_ranks(check, stub):
    with pytest.raises(CheckFailed, match=rf"{stub.__name__} is not written yet: it raised NotImplementedError"):
        check(stub)


@pytest.mark.parametrize("answers, judge, results", [(DISPATCH_ANSWERS, lesson14.judge_dispatch, "dispatch_results"),
                                                     (COMBINE_ANSWERS, lesson14.judge_combine, "combine_results"),
                                                     (REDUCE_ANSWERS, lesson14.judge_reduce, "reduce_results")])
def test_each_wrong_answer_gets_its_own_hint(request, answers, judge, results):
    hints = []
    for answer, feedback in answers.items():
        if feedback is None:
            continue
        with pytest.raises(CheckFailed) as failure:
            judge(answer.__name__, request.getfixturevalue(results)[answer])
        hints.append(str(failure.value).split("Hint: ", 1)[1])
    assert len(set(hints)) == len(hints), hints


def test_an_all_reduce_never_waited_is_refused_when_the_sums_come_out_right(reduce_results):
    """Whether an unwaited all-reduce's sum has arrived when the gradients are read depends on timing: an answer
    right by luck is refused all the same, from the work never waited for."""
    lesson14.judge_reduce("reduce_gradients", reduce_results[reduce_gradients])
    by_luck = [[dict(call) for call in calls] for calls in reduce_results[reduce_gradients]]
    by_luck[2][0]["never waited"] = {"replicated": [False, True, False], "expert": [False, False]}
    with pytest.raises(CheckFailed, match=r"^rank 2, replicated parameter 1: the gradient came out right here, but by "
                                          r"luck: dist\.all_reduce\(p\.grad, async_op=True\) returned a work that was "
                                          r"never waited for.*\nHint: .*\.wait\(\) before reduce_gradients returns"):
        lesson14.judge_reduce("reduce_gradients", by_luck)


@pytest.mark.parametrize("call", [0, 1])
def test_an_all_reduce_still_in_flight_is_named_though_the_values_look_like_a_stopped_loop(reduce_results, call):
    """An unwaited all-reduce whose later parameters had not arrived when the gradients were read leaves the same
    values as a loop that stopped early (zip over the two lists in the first call, a count written in the code in the
    second): the in-flight record says which, and the hint names the missing wait, not the loop (a loaded CI run once
    got the zip hint for all_reduce_never_waited)."""
    late = [[dict(result) for result in calls] for calls in reduce_results[reduce_gradients]]
    case = lesson14.REDUCE_CASES[call]
    shorter = 3 if call == 1 else min(len(case.replicated), len(case.expert))
    result = late[0][call]
    result["replicated"] = list(result["replicated"])
    for i in range(shorter, len(case.replicated)):
        result["replicated"][i] = lesson14._local_grads(0, case)[0][i]          # this rank's own, never summed
    result["in_flight"] = {"replicated": [i >= shorter for i in range(len(case.replicated))],
                           "expert": [False] * len(case.expert)}
    with pytest.raises(CheckFailed, match=rf"rank 0, replicated parameter {shorter}: got .*\nHint: dist\.all_reduce "
                                          r"was started on this p\.grad \(async_op=True\), but its result was read"):
        lesson14.judge_reduce("reduce_gradients", late)

"""Checks for the exercises of notebooks/14-mixture-of-experts.ipynb: expert parallelism by hand.

    ddp_lab.checks.lesson14.check_dispatch(dispatch)
    ddp_lab.checks.lesson14.check_combine(combine)
    ddp_lab.checks.lesson14.check_reduce_gradients(reduce_gradients)

The first two run the answer on 3 gloo ranks with 6 experts (2 per rank) and token counts
chosen so that every rank sends and receives a different number of rows (and one rank has no row
for the last expert, where counts taken without minlength come out short), and they guard every
`all_to_all_single` (`ddp_lab.checks.split_guard`): split sizes that do not fit together are
reported on every rank at once, with what was passed and what the peers send, instead of a
hang or a crash, and split sizes that fit but are tensors (torch takes lists of ints) are named
as such. The third runs on 4 ranks laid out (dp=2, ep=2), with three replicated
parameters and two expert ones (a loop over both lists at once misses one). A hang ends at the
timeout with a hint. An answer that calls the package's own dispatch or combine is refused.
`run_*_answers` runs several answers in one launch and `judge_*` turns one answer's results
into feedback: the checks are the two in a row, tests batch answers.

Introduced in notebooks/14-mixture-of-experts.ipynb.
"""

from __future__ import annotations

import re

import torch
import torch.distributed as dist

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (CaseFailed, call_case, describe, ensure_written, package_answer_used,
                                   run_answers_on_ranks, watching_calls)
from ddp_lab.checks.split_guard import guarded_all_to_all
from ddp_lab.course.expert_parallel import combine as reference_combine
from ddp_lab.course.expert_parallel import dispatch as reference_dispatch
from ddp_lab.course.expert_parallel import exchange_counts
from ddp_lab.instruments.collectives import replacing_dist_calls, watching_collectives

WORLD_SIZE, NUM_EXPERTS, HIDDEN = 3, 6, 4
PER_RANK = NUM_EXPERTS // WORLD_SIZE
# Rank r's rows go to these experts: every rank sends and receives different counts, and the rows a
# rank sends to one rank mostly belong to both of its experts, in mixed order. Rank 1 has no row for the
# last expert, so counts taken without minlength (torch.bincount(expert)) come out one short there.
DISPATCH_EXPERTS = ([3, 0, 5, 1, 3, 4, 0], [4, 2, 2, 0, 4], [1, 4, 2, 1, 3, 5, 0])
SHORT_RANK = next(rank for rank, experts in enumerate(DISPATCH_EXPERTS) if NUM_EXPERTS - 1 not in experts)
# The package's own answers to the exercises (an answer that calls one is not checked)
DISPATCH_ANSWERS = (reference_dispatch, exchange_counts)
COMBINE_ANSWERS = (reference_combine,)
# For combine: each rank's tokens, their two experts and which assignments were kept (a token of
# every rank lost both, one lost its second).
COMBINE_EXPERTS = ([[3, 0], [5, 1], [0, 3], [4, 2], [1, 5]],
                   [[2, 4], [0, 5], [4, 1], [3, 2], [5, 0], [1, 3]],
                   [[5, 2], [1, 4], [3, 0], [2, 1]])
COMBINE_KEPT = ([[1, 1], [1, 0], [0, 0], [1, 1], [1, 1]],
                [[1, 1], [0, 0], [1, 1], [1, 0], [1, 1], [0, 1]],
                [[1, 0], [1, 1], [0, 0], [1, 1]])
# Anything else an answer could exchange counts with: "no collective before the rows" is then a fact.
OTHER_COLLECTIVES = ("all_gather", "all_gather_into_tensor", "all_gather_object", "all_reduce", "all_to_all",
                     "broadcast", "gather", "scatter", "send", "recv", "isend", "irecv")

HANG_HINT = ("all_to_all_single is a collective: every rank must call it, the same number of times and in the same "
             "order (first the counts, then the rows), even a rank that sends nothing to anyone.")
SPLITS_HINT = ("input_split_sizes[j] is how many rows you send to rank j (your rows, sorted by expert, counted per "
               "owning rank); output_split_sizes[j] how many rank j sends you, which only rank j knows: it is what "
               "the counts exchange told you.")

RETURN_SPLITS_HINT = ("on the return trip each rank sends back the expert outputs of the rows it received: "
                      "input_split_sizes[j] is how many rows rank j sent you (dispatched.received_counts summed over "
                      "your experts, row j), output_split_sizes[j] how many you sent rank j (dispatched.sent_counts), "
                      "and the output has one row per row you dispatched.")


def _rows(rank: int, count: int) -> torch.Tensor:
    """(count, HIDDEN) rows whose first element names them: 100 · rank + row index."""
    return (100 * rank + torch.arange(count, dtype=torch.float32)).unsqueeze(1) + 0.25 * torch.arange(HIDDEN)


def _name(row: torch.Tensor) -> str:
    rank, index = divmod(round(row[0].item()), 100)
    return f"row {index} of rank {rank}"


def _plain(value):
    """What a rank returns to the notebook: tensors cloned, anything else described."""
    if isinstance(value, tuple) and len(value) == 4 and all(torch.is_tensor(v) for v in value):
        return tuple(v.detach().clone() for v in value)
    return value.detach().clone() if torch.is_tensor(value) else describe(value)


class SplitSizesRefused(TypeError):
    """Raised on a rank whose all_to_all_single torch refused for split sizes that are not lists of ints."""


def _refused_split_types(refused: list):
    """Inside a rank, around the guarded all_to_all_single: a call that torch refuses with a TypeError while some
    split sizes were not a list or tuple raises SplitSizesRefused, and `refused` gets {argument: its type}."""
    def make(guarded):
        def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, *args, **kwargs):
            given = {"output_split_sizes": output_split_sizes, "input_split_sizes": input_split_sizes}
            odd = {name: "a tensor" if torch.is_tensor(sizes) else f"a {type(sizes).__name__}"
                   for name, sizes in given.items() if sizes is not None and not isinstance(sizes, (list, tuple))}
            try:
                return guarded(output, input, output_split_sizes, input_split_sizes, *args, **kwargs)
            except TypeError as error:
                if not odd:
                    raise
                refused.append(odd)
                raise SplitSizesRefused(", ".join(f"{name} is {kind}" for name, kind in odd.items())) from error
        return all_to_all_single
    return replacing_dist_calls({"all_to_all_single": make})


def _run_guarded(fn, case: str, *args, answers: tuple = ()) -> dict:
    """Call the answer with its all-to-alls guarded and its other collectives listed; SplitMismatch and
    SplitSizesRefused are results.

    `answers`: the package's own answers to the exercise; those the answer called are listed ("called").
    """
    others: list[tuple[int, str]] = []
    refused: list[dict] = []
    value, error = None, None
    with guarded_all_to_all() as calls, _refused_split_types(refused), torch.no_grad(), \
            watching_collectives({name: (0, "tensor") for name in OTHER_COLLECTIVES},
                                 lambda name, sent: others.append((len(calls), name))), \
            watching_calls(answers) as called:
        try:
            value, error = _plain(call_case(fn, case, *args)), None
        except CaseFailed as failure:
            if failure.kind not in ("SplitMismatch", "SplitSizesRefused"):   # raised on every rank together
                raise
            value, error = None, failure.message
    return {"value": value, "error": error, "calls": calls, "others": others, "called": list(called),
            "refused splits": refused[-1] if refused else None}


def _refused_splits_feedback(results: list[dict]) -> None:
    """CheckFailed if torch refused a rank's all_to_all_single for split sizes that are not lists (the guard found
    that their values fit together on every rank, or it would have stopped the call first)."""
    for rank, result in enumerate(results):
        refused = result.get("refused splits")
        if not refused:
            continue
        given = " and ".join(f"{name} as {kind}" for name, kind in refused.items())
        tensors = all(kind == "a tensor" for kind in refused.values())
        raise CheckFailed(f"rank {rank}, all_to_all_single call {len(result['calls'])}: torch refused the call, "
                          f"which got {given}. The split sizes' values fit together on every rank; only their type "
                          "is wrong.\nHint: all_to_all_single takes split sizes as lists of ints: pass "
                          + ("each through .tolist() (sent_counts.tolist(), not sent_counts)." if tensors else
                             "a list of Python ints."))


def _package_answer(name: str, results: list[dict]) -> None:
    """CheckFailed if the answer called the package's own answer on some rank."""
    called = next((result.get("called") for result in results if result.get("called")), None)
    if called:
        raise package_answer_used(name, called)


def _first_split_problem(results: list[dict]) -> int | None:
    """The first rank whose own split sizes were wrong (SplitMismatch is raised on every rank, found on some)."""
    failed = [rank for rank, result in enumerate(results) if result["error"]]
    return next((rank for rank in failed if results[rank]["calls"][-1].problem), failed[0] if failed else None)


MINLENGTH_HINT = ("rank {rank} has no row for the last expert, and its counts have {short} entries, not num_experts = "
                  "{experts}: torch.bincount(expert) gives max(expert) + 1 of them. Pass minlength=num_experts, so "
                  "every rank counts every expert (zeros included)")
_INVALID_SIZE = re.compile(r"invalid for input of size (\d+)")


def _short_count() -> int:
    """How many experts torch.bincount without minlength counts on SHORT_RANK."""
    return max(DISPATCH_EXPERTS[SHORT_RANK]) + 1


def _explain(failure) -> str | None:
    text = str(failure.exception) + failure.details
    size = _INVALID_SIZE.search(text)
    if failure.rank == SHORT_RANK and size and int(size.group(1)) == _short_count():
        return MINLENGTH_HINT.format(rank=SHORT_RANK, short=_short_count(), experts=NUM_EXPERTS) + "."
    if "Split sizes doesn't match" in text or "split_sizes" in text:
        return SPLITS_HINT
    return None


# --- dispatch ---------------------------------------------------------------------------------

def _dispatch_runner(rank: int, answers: tuple) -> list[dict]:
    expert = torch.tensor(DISPATCH_EXPERTS[rank])
    return [_run_guarded(answer, f"dispatching rank {rank}'s {len(expert)} rows", _rows(rank, len(expert)),
                         expert.clone(), NUM_EXPERTS, answers=DISPATCH_ANSWERS) for answer in answers]


def run_dispatch_answers(answers: tuple, timeout: float = 30.0, name: str = "dispatch") -> list[list[dict]]:
    """Run each answer once on the same 3 ranks (one launch); [answer][rank] -> what the rank saw."""
    return run_answers_on_ranks(_dispatch_runner, answers, WORLD_SIZE, timeout, name, explain=_explain,
                                timeout_hint=HANG_HINT)


def _dispatch_truth() -> dict:
    per_expert = [torch.bincount(torch.tensor(e), minlength=NUM_EXPERTS) for e in DISPATCH_EXPERTS]
    sent = [counts.view(WORLD_SIZE, PER_RANK).sum(dim=1) for counts in per_expert]
    received = [torch.stack([counts.view(WORLD_SIZE, PER_RANK)[rank] for counts in per_expert])
                for rank in range(WORLD_SIZE)]
    return {"per expert": per_expert, "sent": sent, "received": received}


def _split_feedback(rank: int, result: dict, truth: dict, rows_call: str) -> str:
    """The message for a SplitMismatch: what the rank passed, and the mistake it points to."""
    call = result["calls"][-1]
    sent, received = truth["sent"][rank].tolist(), truth["received"][rank].sum(dim=1).tolist()
    message = (f"rank {rank}, all_to_all_single call {len(result['calls'])} ({rows_call}): {call.problem}.")
    earlier = len(result["calls"]) - 1 + sum(index < len(result["calls"]) for index, _ in result["others"])
    if rows_call == "the counts" and rank == SHORT_RANK and call.input_shape == (_short_count(),):
        hint = MINLENGTH_HINT.format(rank=rank, short=_short_count(), experts=NUM_EXPERTS) + "."
    elif call.input_splits == received and call.output_splits == sent:
        hint = ("the two split lists are swapped. " + SPLITS_HINT)
    elif rows_call == "the rows" and call.input_splits == sent and call.output_splits == received and \
            call.output_rows != sum(received):
        hint = (f"both split lists are right; the output buffer is not: it must hold every row the ranks send this "
                f"rank, sum(output_split_sizes) = {sum(received)} rows (received_counts.sum()), whatever the size of "
                "your own input.")
    elif rows_call.startswith("the rows") and earlier == 0:
        hint = ("this rank made no collective call before sending its rows, so it cannot know how many rows the "
                "others send it. Exchange the per-expert counts first (dist.all_to_all_single of the counts, equal "
                "splits: each rank gets the counts of its own experts), then size the output and "
                "output_split_sizes from what arrived.")
    elif call.output_splits is not None and call.output_splits == call.input_splits:
        hint = ("output_split_sizes equals your own input_split_sizes: what you send is not what you receive. Use "
                "the counts the exchange brought you (summed over your experts) for output_split_sizes.")
    else:
        hint = SPLITS_HINT
    return f"{message}\nHint: {hint}"


def _wrong_send_splits(results: list[dict], truth: dict) -> None:
    """CheckFailed naming the first rank whose rows went out with split sizes other than its rows per owning rank
    (what the receivers' mismatch follows from), if there is one."""
    for rank, result in enumerate(results):
        calls = result["calls"]
        if not calls or len(calls[-1].input_shape) < 2 or calls[-1].input_splits is None:
            continue
        splits, want = calls[-1].input_splits, truth["sent"][rank].tolist()
        if splits == want or splits == truth["received"][rank].sum(dim=1).tolist():   # swapped: _split_feedback's
            continue
        experts = torch.tensor(DISPATCH_EXPERTS[rank])
        round_robin = torch.bincount(experts % WORLD_SIZE, minlength=WORLD_SIZE).tolist()
        hint = (f"these count your rows by expert % {WORLD_SIZE}; rank j owns a block of experts, {PER_RANK}·j ... "
                f"{PER_RANK}·j + {PER_RANK - 1}: the owner of expert e is e // {PER_RANK}" if splits == round_robin else
                f"input_split_sizes[j] is how many of your rows go to rank j, the owner of experts {PER_RANK}·j ... "
                f"{PER_RANK}·j + {PER_RANK - 1}")
        raise CheckFailed(f"rank {rank} sent its rows with input_split_sizes={splits}, but its rows for each rank's "
                          f"experts number {want}; the ranks receiving them then see other counts than they expect."
                          f"\nHint: {hint}.")


def judge_dispatch(name: str, results: list[dict]) -> str:
    """Feedback for one dispatch answer's per-rank results: raise CheckFailed, or return the ✓ text."""
    _package_answer(name, results)
    _refused_splits_feedback(results)
    truth = _dispatch_truth()
    rank = _first_split_problem(results)
    short = results[SHORT_RANK]
    if rank is not None and short["error"] and short["calls"][-1].input_shape == (_short_count(),):
        rank = SHORT_RANK   # its counts came out short: the other ranks' problems follow from it
    if rank is not None:
        rows_call = "the rows" if len(results[rank]["calls"][-1].input_shape) > 1 else "the counts"
        if rows_call == "the rows":
            _wrong_send_splits(results, truth)
        raise CheckFailed(_split_feedback(rank, results[rank], truth, rows_call))
    orders = []
    for rank, result in enumerate(results):
        value = result["value"]
        if not isinstance(value, tuple):
            got = value if isinstance(value, str) else describe(value)
            raise CheckFailed(f"rank {rank}: {name} returned {got}; expected Dispatched(received, received_counts, "
                              "sent_counts, order), four tensors.")
        received, received_counts, sent_counts, order = value
        want_sent, want_received = truth["sent"][rank], truth["received"][rank]
        if sent_counts.tolist() != want_sent.tolist():
            hint = ("these are counts per expert; sent_counts has one entry per RANK: the rows for its "
                    f"{PER_RANK} experts added up" if sent_counts.tolist() == truth["per expert"][rank].tolist()
                    else "sent_counts[j] is how many of your rows go to rank j, the owner of experts "
                         f"{PER_RANK}·j ... {PER_RANK}·j + {PER_RANK - 1}")
            raise CheckFailed(f"rank {rank}: sent_counts {sent_counts.tolist()}, expected {want_sent.tolist()}.\n"
                              f"Hint: {hint}.")
        if tuple(received_counts.shape) != (WORLD_SIZE, PER_RANK) or not torch.equal(received_counts.long(),
                                                                                      want_received):
            hint = (f"received_counts holds one count per rank: the counts exchanged were per-rank totals "
                    f"(sent_counts). Exchange the per-expert counts (one per global expert), so that each rank gets, "
                    f"from every rank, a count for each of its {PER_RANK} experts"
                    if received_counts.numel() == WORLD_SIZE else
                    f"received_counts[s][e] is how many rows rank s sends for my local expert e: shape "
                    f"({WORLD_SIZE}, {PER_RANK}), what the counts exchange returned, viewed as (world_size, -1)")
            raise CheckFailed(f"rank {rank}: received_counts {received_counts.tolist()}, expected "
                              f"{want_received.tolist()}.\nHint: {hint}.")
        expert = torch.tensor(DISPATCH_EXPERTS[rank])
        if sorted(order.tolist()) != list(range(len(expert))):
            raise CheckFailed(f"rank {rank}: order {order.tolist()} is not a permutation of the rank's "
                              f"{len(expert)} rows.\nHint: order is the argsort of the rows' experts.")
        in_order = expert[order]
        if not bool((in_order[1:] >= in_order[:-1]).all()):
            owner, inverse = in_order // PER_RANK, expert[order.argsort()]
            hint = ("`order` is the inverse of the sorting permutation: expert[order.argsort()] is sorted. order must "
                    "be the permutation that sorts the rows, rows[order] sorted by expert (torch.argsort(expert)), "
                    "which combine uses to put the outputs back"
                    if bool((inverse[1:] >= inverse[:-1]).all()) else
                    "the rows are grouped by rank but not by expert within a rank: the receiver reads each rank's "
                    "block as received_counts[s][0] rows of its first expert, then its second. Sort by expert"
                    if bool((owner[1:] >= owner[:-1]).all()) else
                    "sort the rows by expert (torch.argsort): all_to_all_single sends the first input_split_sizes[0] "
                    "rows to rank 0, the next ones to rank 1, ...")
            raise CheckFailed(f"rank {rank}: the experts of your rows in `order` are {in_order.tolist()}, not "
                              f"sorted.\nHint: {hint}.")
        orders.append(order)
    for rank, result in enumerate(results):
        received = result["value"][0]
        blocks, unsorted = [], []
        for source in range(WORLD_SIZE):
            rows = _rows(source, len(DISPATCH_EXPERTS[source]))
            start = int(truth["sent"][source][:rank].sum())
            count = int(truth["sent"][source][rank])
            blocks.append(rows[orders[source]][start:start + count])
            unsorted.append(rows[start:start + count])
        expected = torch.cat(blocks)
        if tuple(received.shape) != tuple(expected.shape):
            raise CheckFailed(f"rank {rank}: received is {describe(received)}; expected {tuple(expected.shape)}: "
                              f"the {len(expected)} rows the 3 ranks send it.")
        if torch.equal(received, expected):
            continue
        index = next(i for i in range(len(expected)) if not torch.equal(received[i], expected[i]))
        if torch.equal(received, torch.cat(unsorted)):
            hint = ("these are each rank's rows in their original order: send rows[order] (sorted by expert), not "
                    "rows, or each block holds rows meant for other ranks' experts")
        else:
            hint = ("rank s's rows must arrive as block s of received, in the order of rank s's `order`: one "
                    "all_to_all_single of rows[order], input_split_sizes = sent_counts, output_split_sizes = "
                    "received_counts summed over your experts")
        raise CheckFailed(f"rank {rank}, received row {index}: got {_name(received[index])}, expected "
                          f"{_name(expected[index])}.\nHint: {hint}.")
    return (f"{name}: counts exchanged first, then every rank's rows reached their experts' owners with uneven "
            f"splits ({[int(t.sum()) for t in truth['received']]} rows received)")


def _check_one(answer, default_name: str, run_answers, judge, timeout: float) -> None:
    """What every public check of this lesson does: refuse a stub, run the one answer on ranks, judge it."""
    ensure_written(answer)
    name = getattr(answer, "__name__", default_name)
    passed(judge(name, run_answers((answer,), timeout, name)[0]))


def check_dispatch(dispatch, timeout: float = 30.0) -> None:
    """Check `dispatch(rows, expert, num_experts)` on 3 ranks: the counts exchange and the uneven all-to-all.

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    _check_one(dispatch, "dispatch", run_dispatch_answers, judge_dispatch, timeout)


# --- combine ----------------------------------------------------------------------------------

def _combine_case(rank: int):
    """Rank `rank`'s tokens x, its kept assignments (token index, expert, gate) in token order."""
    expert, kept = torch.tensor(COMBINE_EXPERTS[rank]), torch.tensor(COMBINE_KEPT[rank], dtype=torch.bool)
    x = _rows(rank, len(expert)) / 10
    first = 0.3 + 0.4 * torch.rand(len(expert), generator=torch.Generator().manual_seed(140 + rank))
    gates = torch.stack([first, 1 - first], dim=1)
    token_index, slot = kept.nonzero(as_tuple=True)
    return x, token_index, expert[token_index, slot], gates[token_index, slot]


def _expert_function(expert: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """What expert e computes in this check: (e + 2) · row + e / 2 (each expert a different function)."""
    e = expert.to(rows.dtype).unsqueeze(-1)
    return (e + 2) * rows + e / 2


def _combine_runner(rank: int, answers: tuple) -> list[dict]:
    x, token_index, expert, gates = _combine_case(rank)
    with torch.no_grad():
        sent = reference_dispatch(x[token_index], expert, NUM_EXPERTS)
    owner_experts = torch.arange(PER_RANK).repeat(WORLD_SIZE).repeat_interleave(sent.received_counts.flatten())
    expert_output = _expert_function(rank * PER_RANK + owner_experts, sent.received)
    return [_run_guarded(answer, f"combining on rank {rank}", expert_output.clone(), sent, token_index.clone(),
                         gates.clone(), x.clone(), answers=COMBINE_ANSWERS) for answer in answers]


def run_combine_answers(answers: tuple, timeout: float = 30.0, name: str = "combine") -> list[list[dict]]:
    """Run each answer once on the same 3 ranks (one launch); [answer][rank] -> what the rank saw."""
    return run_answers_on_ranks(_combine_runner, answers, WORLD_SIZE, timeout, name, explain=_explain,
                                timeout_hint=HANG_HINT)


def _combine_candidates(rank: int) -> dict:
    """The right y of a rank and what common mistakes give instead."""
    x, token_index, expert, gates = _combine_case(rank)
    outputs = _expert_function(expert, x[token_index])                  # row i's expert output, in token order
    order = torch.argsort(expert, stable=True)
    back = outputs[order]                                               # as the reverse all-to-all returns them
    g = gates.unsqueeze(-1)
    dropped = torch.ones(len(x), dtype=torch.bool)
    dropped[token_index] = False
    overwritten = x.clone()
    overwritten[token_index] = x[token_index] + g * outputs              # y[idx] = ...: the last row of a token wins
    return {
        "right": x.index_add(0, token_index, g * outputs),
        "without gates": x.index_add(0, token_index, outputs),
        "gates twice": x.index_add(0, token_index, g * g * outputs),
        "no residual": torch.zeros_like(x).index_add(0, token_index, g * outputs),
        "overwritten": overwritten,
        "not unsorted": x.index_add(0, token_index, g * back),
        "sorted again": x.index_add(0, token_index, g * back[order]),
        "dropped": dropped,
    }


COMBINE_HINTS = {
    "without gates": "the gate weights are missing: multiply each returned row by its gate before adding it",
    "gates twice": "the gates are applied twice (the rows came back unweighted: weight them once)",
    "overwritten": ("a token with two kept assignments got only one expert's output: assigning y[token_index] = ... "
                    "keeps the last write; add with index_add so the rows of one token sum"),
    "not unsorted": ("the rows come back in the order you sent them, sorted by expert: undo the sort with the "
                     "inverse of dispatched.order (row order[j] is back[j]) before adding them to their tokens"),
    "sorted again": ("back[order] applies the permutation a second time instead of undoing it: row order[j] of "
                     "the tokens is back[j], so index with the inverse, order.argsort()"),
}


def judge_combine(name: str, results: list[dict]) -> str:
    """Feedback for one combine answer's per-rank results: raise CheckFailed, or return the ✓ text."""
    _package_answer(name, results)
    _refused_splits_feedback(results)
    rank = _first_split_problem(results)
    if rank is not None:
        call = results[rank]["calls"][-1]
        owners = [torch.bincount(_combine_case(source)[2] // PER_RANK, minlength=WORLD_SIZE).tolist()
                  for source in range(WORLD_SIZE)]          # owners[s][r]: rows rank s dispatched to rank r
        sent, received = owners[rank], [owners[source][rank] for source in range(WORLD_SIZE)]
        if call.input_splits == received and call.output_splits == sent and call.output_rows != sum(sent):
            hint = (f"both split lists are right; the output buffer is not: it must hold every row coming back to "
                    f"this rank, sum(output_split_sizes) = {sum(sent)} rows (dispatched.sent_counts.sum(), one per "
                    f"row it dispatched), whatever the size of expert_output ({call.input_shape[0]} rows).")
        elif call.input_splits == sent:
            hint = ("the reverse trip swaps the split lists of the dispatch: the expert outputs go back to the ranks "
                    "the rows came from, output_split_sizes = dispatched.sent_counts (your rows come back), "
                    "input_split_sizes = dispatched.received_counts summed over your experts")
        else:
            hint = RETURN_SPLITS_HINT
        raise CheckFailed(f"rank {rank}, all_to_all_single call {len(results[rank]['calls'])}: {call.problem}.\n"
                          f"Hint: {hint}")
    for rank, result in enumerate(results):
        got, candidates = result["value"], _combine_candidates(rank)
        right = candidates["right"]
        if not torch.is_tensor(got) or got.shape != right.shape:
            raise CheckFailed(f"rank {rank}: {name} returned {got if isinstance(got, str) else describe(got)}; "
                              f"expected y, a tensor of shape {tuple(right.shape)}: one row per token of the rank.")
        if torch.allclose(got, right, atol=1e-5, rtol=1e-5):
            continue
        bad = next(t for t in range(len(right)) if not torch.allclose(got[t], right[t], atol=1e-5, rtol=1e-5))
        message = (f"rank {rank}, token {bad}: got {[round(v, 4) for v in got[bad].tolist()]}, expected "
                   f"{[round(v, 4) for v in right[bad].tolist()]}")
        dropped = candidates["dropped"]
        if torch.allclose(got[~dropped], right[~dropped], atol=1e-5) and torch.allclose(got[dropped], torch.zeros(1)):
            hint = ("the tokens that lost all their assignments came out as zeros: a dropped token must leave the "
                    "layer as it came in, through the residual. Start from y = x and add the weighted rows into it")
        elif torch.allclose(got, candidates["no residual"], atol=1e-5):
            hint = "the residual is missing: y = x + Σ gate · expert output; a token with no expert comes out as x"
        else:
            hint = next((text for key, text in COMBINE_HINTS.items()
                         if torch.allclose(got, candidates[key], atol=1e-5, rtol=1e-5)),
                        "y = x, plus each returned row (unsorted back to token order) times its gate, added into its "
                        "token with index_add")
        raise CheckFailed(f"{message}.\nHint: {hint}.")
    return (f"{name}: expert outputs came back with the splits swapped, unsorted, weighted by their gates and added "
            "to the residual; dropped tokens passed through unchanged")


def check_combine(combine, timeout: float = 30.0) -> None:
    """Check `combine(expert_output, dispatched, token_index, gates, x)` on 3 ranks against y = x + Σ g · expert(x).

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    _check_one(combine, "combine", run_combine_answers, judge_combine, timeout)


# --- reduce_gradients (EP × DP) ---------------------------------------------------------------

DP_SIZE, EP_SIZE = 2, 2
# three replicated parameters, two expert ones: a loop over zip(replicated, expert) misses one
REPLICATED_SHAPES, EXPERT_SHAPES = ((3,), (2, 2), (4,)), ((2, 3), (3,))


def _local_grads(rank: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """What backward left on rank `rank`: its replicated parameters' and its experts' gradients."""
    generator = torch.Generator().manual_seed(1400 + rank)
    return ([torch.randn(shape, generator=generator) for shape in REPLICATED_SHAPES],
            [torch.randn(shape, generator=generator) + 10 * (rank % EP_SIZE) for shape in EXPERT_SHAPES])


def _first(tensor: torch.Tensor) -> str:
    return str([round(v, 4) for v in tensor.flatten()[:3].tolist()])[:-1] + ", ...]"


def _dp_groups() -> list[list[int]]:
    return [[ep + dp * EP_SIZE for dp in range(DP_SIZE)] for ep in range(EP_SIZE)]   # [[0, 2], [1, 3]]


def _reduce_runner(rank: int, answers: tuple) -> list[dict]:
    groups = [dist.new_group(ranks) for ranks in _dp_groups()]   # every rank creates every group, in one order
    dp_group = groups[rank % EP_SIZE]
    results = []
    for answer in answers:
        grads = _local_grads(rank)
        replicated, expert = ([torch.nn.Parameter(torch.zeros_like(g)) for g in part] for part in grads)
        for p, g in zip([*replicated, *expert], [*grads[0], *grads[1]]):
            p.grad = g.clone()
        storages = {what: [p.grad.data_ptr() for p in part] for what, part in (("replicated", replicated),
                                                                               ("expert", expert))}
        reduced: list[int] = []   # the storage of every tensor passed to dist.all_reduce
        works: list = []          # (storage, work handle) of every all_reduce started with async_op=True
        given: list = []          # (storage, the values it held before the reduction) of every all_reduce
        with _recording_all_reduce(reduced, works, given):
            call_case(answer, f"reducing rank {rank}'s gradients", replicated, expert, dp_group)
        in_flight = {pointer for pointer, work in works if not work.is_completed()}   # before the grads are read
        own = {pointer for pointers in storages.values() for pointer in pointers}
        elsewhere = [values for pointer, values in given if pointer not in own]   # copies, flat buffers, others
        results.append({"replicated": [p.grad.clone() for p in replicated], "expert": [p.grad.clone() for p in expert],
                        "reduced": {what: [pointer in reduced for pointer in pointers]
                                    for what, pointers in storages.items()},
                        "in_flight": {what: [pointer in in_flight for pointer in pointers]
                                      for what, pointers in storages.items()},
                        "copied": {what: [_held_in(g, elsewhere) for g in part]
                                   for what, part in (("replicated", grads[0]), ("expert", grads[1]))}})
        for _, work in works:     # the next answer starts after this one's all-reduces
            work.wait()
    return results


def _recording_all_reduce(reduced: list, works: list, given: list):
    """Inside a rank: record the storage of every tensor dist.all_reduce gets, the work handle it returns
    (async_op=True) as (storage, handle), and the values the tensor held before it as (storage, values)."""
    def make(original):
        def all_reduce(*args, **kwargs):
            tensor = args[0] if args else kwargs.get("tensor")
            if torch.is_tensor(tensor):
                given.append((tensor.data_ptr(), tensor.detach().flatten().clone()))
            work = original(*args, **kwargs)
            if torch.is_tensor(tensor):
                reduced.append(tensor.data_ptr())
                if work is not None:
                    works.append((tensor.data_ptr(), work))
            return work
        return all_reduce
    return replacing_dist_calls({"all_reduce": make})


def _held_in(gradient: torch.Tensor, tensors: list) -> bool:
    """Whether one of `tensors` (flattened) held `gradient`'s values, whole or as a contiguous run (a copy, a slice
    of a flat buffer) when it was all-reduced."""
    values = gradient.flatten()
    return any(torch.allclose(tensor[start:start + len(values)], values, atol=1e-6)
               for tensor in tensors for start in range(len(tensor) - len(values) + 1))


def run_reduce_answers(answers: tuple, timeout: float = 30.0, name: str = "reduce_gradients") -> list[list[dict]]:
    """Run each answer once on the same 4 ranks (one launch); [answer][rank] -> its gradients afterwards."""
    return run_answers_on_ranks(_reduce_runner, answers, DP_SIZE * EP_SIZE, timeout, name,
                                timeout_hint=("every rank must all-reduce every gradient, the same ones in the same "
                                              "order: the replicated ones over all ranks (the default group), the "
                                              "experts' over dp_group, whose two ranks both make the call."))


def judge_reduce(name: str, results: list[dict]) -> str:
    """Feedback for one reduce_gradients answer's per-rank results: raise CheckFailed, or return the ✓ text."""
    local = [_local_grads(rank) for rank in range(DP_SIZE * EP_SIZE)]
    counts = (len(REPLICATED_SHAPES), len(EXPERT_SHAPES))
    everyone = [[sum(local[r][part][i] for r in range(DP_SIZE * EP_SIZE)) for i in range(counts[part])]
                for part in (0, 1)]
    for rank, result in enumerate(results):
        column = next(ranks for ranks in _dp_groups() if rank in ranks)
        over_dp = [[sum(local[r][part][i] for r in column) for i in range(counts[part])] for part in (0, 1)]
        _zip_feedback(rank, result, local[rank], everyone[0], over_dp[1])
        for part, what in ((0, "replicated"), (1, "expert")):
            want = everyone[0] if part == 0 else over_dp[1]
            for i, got in enumerate(result[what]):
                if torch.allclose(got, want[i], atol=1e-5):
                    continue
                size = len(column) if part else DP_SIZE * EP_SIZE
                if result.get("in_flight", {}).get(what, [False] * (i + 1))[i]:
                    hint = ("dist.all_reduce was started on this p.grad (async_op=True), but its result was read "
                            "before it finished: the work had not completed when reduce_gradients returned. Keep the "
                            "work handle each call returns and .wait() on it before returning")
                elif torch.allclose(got, want[i] / size, atol=1e-5):
                    hint = ("this is the mean: each rank's loss is already its share of the global mean, so the "
                            "gradients add up; all-reduce with SUM and do not divide")
                elif torch.allclose(got, local[rank][part][i], atol=1e-5) and \
                        result["copied"][what][i] and not result["reduced"][what][i]:
                    hint = ("dist.all_reduce ran, but not on this p.grad: it sums in place, into the tensor you pass "
                            "(a copy, a new flat buffer never copied back), and p.grad is what the optimizer reads. "
                            "All-reduce p.grad itself, or copy the result back into it")
                elif torch.allclose(got, local[rank][part][i], atol=1e-5):
                    holders = "every rank" if part == 0 else "the other rank of your dp group"
                    hint = f"the gradient was not all-reduced: {holders} holds a share of it"
                elif part == 1 and torch.allclose(got, everyone[1][i], atol=1e-5):
                    hint = ("the experts' gradients were summed over all 4 ranks: ranks 0 and 1 hold DIFFERENT "
                            "experts, so this adds other experts' gradients. Sum over dp_group only: the ranks that "
                            "hold the same experts")
                elif part == 0 and torch.allclose(got, over_dp[0][i], atol=1e-5):
                    hint = ("the replicated parameters were summed over dp_group only: every rank holds them and "
                            "each saw other tokens, so sum over all ranks (the default group)")
                else:
                    hint = "replicated: SUM over all ranks; experts: SUM over dp_group"
                raise CheckFailed(f"rank {rank}, {what} parameter {i}: got {_first(got)}, expected {_first(want[i])}.\n"
                                  f"Hint: {hint}.")
    return (f"{name}: replicated gradients summed over all {DP_SIZE * EP_SIZE} ranks, expert gradients over their "
            "dp group")


def _zip_feedback(rank: int, result: dict, local, replicated_sum, expert_sum) -> None:
    """CheckFailed if exactly the parameters past the shorter list's length were left unreduced (a zip of the two
    lists stops there), and every one before them is right."""
    shorter = min(len(REPLICATED_SHAPES), len(EXPERT_SHAPES))
    longer, what, want = ((0, "replicated", replicated_sum) if len(REPLICATED_SHAPES) > len(EXPERT_SHAPES)
                          else (1, "expert", expert_sum))
    got = result[what]
    right = all(torch.allclose(got[i], want[i], atol=1e-5) for i in range(shorter))
    left = all(torch.allclose(got[i], local[longer][i], atol=1e-5) for i in range(shorter, len(got)))
    other = result["expert" if longer == 0 else "replicated"]
    other_want = expert_sum if longer == 0 else replicated_sum
    if right and left and all(torch.allclose(g, w, atol=1e-5) for g, w in zip(other, other_want)):
        raise CheckFailed(f"rank {rank}, {what} parameter {shorter}: not all-reduced, though {what} parameters 0 to "
                          f"{shorter - 1} and every {'expert' if longer == 0 else 'replicated'} one were.\nHint: "
                          f"there are {len(REPLICATED_SHAPES)} replicated parameters and {len(EXPERT_SHAPES)} expert "
                          "ones, and a loop over zip(replicated, expert) stops at the shorter list: loop over each "
                          "list on its own.")


def check_reduce_gradients(reduce_gradients, timeout: float = 30.0) -> None:
    """Check `reduce_gradients(replicated, expert, dp_group)` on a (dp=2, ep=2) layout of 4 ranks.

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    _check_one(reduce_gradients, "reduce_gradients", run_reduce_answers, judge_reduce, timeout)

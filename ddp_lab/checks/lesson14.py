"""Checks for the exercises of notebooks/14-mixture-of-experts.ipynb: expert parallelism by hand.

    ddp_lab.checks.lesson14.check_dispatch(dispatch)
    ddp_lab.checks.lesson14.check_combine(combine)
    ddp_lab.checks.lesson14.check_reduce_gradients(reduce_gradients)

The first two run the answer on 3 gloo ranks with 6 experts (2 per rank) and token counts chosen so that every rank
sends and receives a different number of rows (and one rank has no row for the last expert, where counts taken
without minlength come out short), then, in the same launch, with 3 experts (1 per rank) and rows of 3 values
instead of 4, so that a number of experts, of experts per rank or of values per row written in the code fails (and
one rank has no row for the last rank's expert, where its rows counted per owning rank without minlength come out
short). They guard every `all_to_all_single` (`ddp_lab.checks.split_guard`): split sizes that do not fit together
are reported on every rank at once, with what was passed and what the peers send, instead of a hang or a crash, and
split sizes that fit but are tensors or floats (torch takes lists of ints) are named as such. Combine must leave the
x it is given as it was (an in-place add into the residual breaks backward in training), and a combine that raised
before calling any collective (torch's functional all-to-all included) is told where its expert outputs belong. The
third runs on 4 ranks laid out (dp=2, ep=2), with three replicated parameters and two expert ones (a loop over both
lists at once misses one), then with four and three of other shapes; a gradient all-reduced more than once is named.
A hang ends at the timeout with a hint. An answer that calls the package's own dispatch or combine is refused. Each
function's first call is judged first; a failure in the second says what changed. `run_*_answers` runs several
answers in one launch and `judge_*` turns one answer's results into feedback: the checks are the two in a row, tests
batch answers.

Introduced in notebooks/14-mixture-of-experts.ipynb.
"""

from __future__ import annotations

import contextlib
import re
from typing import NamedTuple

import torch
import torch.distributed as dist

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (CaseFailed, call_case, describe, ensure_written, held_in, how_it_changed,
                                   package_answer_used, refuse_written_divisor, refuse_written_shape, right_by_luck,
                                   run_answers_on_ranks, watching_calls)
from ddp_lab.checks.split_guard import guarded_all_to_all
from ddp_lab.course.expert_parallel import combine as reference_combine
from ddp_lab.course.expert_parallel import dispatch as reference_dispatch
from ddp_lab.course.expert_parallel import exchange_counts
from ddp_lab.instruments.collectives import (call_arguments, replacing_dist_calls, watching_collectives,
                                             watching_requests)

WORLD_SIZE, NUM_EXPERTS, HIDDEN = 3, 6, 4   # experts and values per row: those of the first call
# Rank r's rows go to these experts: every rank sends and receives different counts, and the rows a
# rank sends to one rank mostly belong to both of its experts, in mixed order. Rank 1 has no row for the
# last expert, so counts taken without minlength (torch.bincount(expert)) come out one short there.
DISPATCH_EXPERTS = ([3, 0, 5, 1, 3, 4, 0], [4, 2, 2, 0, 4], [1, 4, 2, 1, 3, 5, 0])
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


class Case(NamedTuple):
    """One call of dispatch or combine: the number of experts, the values per row, each rank's rows' experts
    (dispatch: one per row; combine: the two of each token) and, for combine, which of them were kept."""

    num_experts: int
    hidden: int
    experts: tuple
    kept: tuple = ()

    @property
    def per_rank(self) -> int:
        return self.num_experts // WORLD_SIZE

    def describe(self) -> str:
        return f"{self.num_experts} experts ({self.per_rank} per rank), rows of {self.hidden} values"

    def short_rank(self) -> int | None:
        """For dispatch: the first rank with no row for the last expert (bincount without minlength comes out short
        there), or None."""
        return next((rank for rank, experts in enumerate(self.experts) if self.num_experts - 1 not in experts), None)


# Each function runs twice on the same ranks: the check's first numbers, then fewer experts and shorter rows, so
# that a count or shape written in the code for the first call fails in the second. In the second dispatch, rank 1
# sends no row to rank 1 (no row for expert 1), and rank 2 none to rank 2, the last rank (no row for expert 2):
# there its rows counted per owning rank without minlength (torch.bincount(expert // per_rank)) come out short.
DISPATCH_CASES = (Case(NUM_EXPERTS, HIDDEN, DISPATCH_EXPERTS),
                  Case(3, 3, ([2, 0, 1, 2, 0, 2], [2, 2, 2, 0], [1, 1, 0, 0, 1])))
COMBINE_CASES = (Case(NUM_EXPERTS, HIDDEN, COMBINE_EXPERTS, COMBINE_KEPT),
                 Case(3, 3, ([[1, 0], [2, 1], [0, 2], [1, 2]], [[2, 1], [0, 2], [1, 0], [2, 0]],
                             [[2, 1], [0, 2], [1, 0], [2, 0], [0, 1]]),
                      ([[1, 1], [0, 0], [1, 0], [1, 1]], [[1, 1], [0, 0], [1, 1], [0, 1]],
                       [[1, 1], [1, 1], [0, 0], [0, 1], [1, 0]])))


def _changed(case: Case, first: Case) -> str:
    """What a failure in a later call says first: how its numbers differ from the first call's."""
    return (f"with {case.num_experts} experts ({case.per_rank} per rank) and rows of {case.hidden} values instead of "
            f"{first.num_experts} ({first.per_rank} per rank) and {first.hidden}")


def _judge_cases(judge_case, name: str, results: list[list], cases: tuple, changed=_changed) -> list[str]:
    """Judge each call in turn (results[rank][call]): what `judge_case(name, per-rank results, case)` returns, for
    every call; a failure in a later call says first what changed (`changed(case, first case)`)."""
    lines = []
    for index, case in enumerate(cases):
        try:
            lines.append(judge_case(name, [result[index] for result in results], case))
        except CheckFailed as failure:
            if index == 0:
                raise
            raise CheckFailed(f"{changed(case, cases[0])}: {failure}") from None
    return lines


# Anything else an answer could exchange counts with: "no collective before the rows" is then a fact.
OTHER_COLLECTIVES = ("all_gather", "all_gather_into_tensor", "all_gather_object", "all_reduce", "all_to_all",
                     "broadcast", "gather", "scatter", "send", "recv", "isend", "irecv")

HANG_HINT = ("all_to_all_single is a collective: every rank must call it, the same number of times and in the same "
             "order (first the counts, then the rows), even a rank that sends nothing to anyone.")
SPLITS_HINT = ("input_split_sizes[j] is how many rows you send to rank j (your rows, sorted by expert, counted per "
               "owning rank); output_split_sizes[j] how many rank j sends you, which only rank j knows: it is what "
               "the counts exchange told you.")

RETURN_TRIP_RULE = ("expert_output holds the outputs of the rows OTHER ranks sent this one, in the order they "
                    "arrived: they go back to the ranks they came from first, with an all_to_all_single whose split "
                    "lists are the dispatch's swapped (output_split_sizes = dispatched.sent_counts); only then is "
                    "each row one of your tokens'")
RETURN_SPLITS_HINT = ("on the return trip each rank sends back the expert outputs of the rows it received: "
                      "input_split_sizes[j] is how many rows rank j sent you (dispatched.received_counts summed over "
                      "your experts, row j), output_split_sizes[j] how many you sent rank j (dispatched.sent_counts), "
                      "and the output has one row per row you dispatched.")


def _rows(rank: int, count: int, hidden: int = HIDDEN) -> torch.Tensor:
    """(count, hidden) rows whose first element names them: 100 · rank + row index."""
    return (100 * rank + torch.arange(count, dtype=torch.float32)).unsqueeze(1) + 0.25 * torch.arange(hidden)


def _name(row: torch.Tensor) -> str:
    rank, index = divmod(round(row[0].item()), 100)
    return f"row {index} of rank {rank}"


def _plain(value):
    """What a rank returns to the notebook: tensors cloned, anything else described (a tuple of four, as dispatch
    returns, by the items that are not tensors)."""
    if isinstance(value, tuple) and len(value) == 4:
        if all(torch.is_tensor(v) for v in value):
            return tuple(v.detach().clone() for v in value)
        fields = getattr(value, "_fields", None) or [f"item {index}" for index in range(4)]
        odd = [f"{field} is {describe(item)}" for field, item in zip(fields, value) if not torch.is_tensor(item)]
        return f"a {type(value).__name__} whose {' and whose '.join(odd)}, not {'tensors' if odd[1:] else 'a tensor'}"
    return value.detach().clone() if torch.is_tensor(value) else describe(value)


class SplitSizesRefused(TypeError):
    """Raised on a rank whose all_to_all_single torch refused for split sizes that are not lists of ints."""


def _split_kind(sizes) -> str | None:
    """What a split-sizes argument is where it is not a list or tuple of ints ("a tensor", "a list of floats"), or
    None (None included)."""
    if sizes is None:
        return None
    if torch.is_tensor(sizes):
        return "a tensor"
    if not isinstance(sizes, (list, tuple)):
        return f"a {type(sizes).__name__}"
    items = sorted({"tensor" if torch.is_tensor(size) else type(size).__name__
                    for size in sizes if not isinstance(size, int)})
    return f"a {type(sizes).__name__} of {' and '.join(f'{item}s' for item in items)}" if items else None


def _refused_split_types(refused: list):
    """Inside a rank, around the guarded all_to_all_single: a call that torch refuses with a TypeError while some
    split sizes were not a list or tuple of ints raises SplitSizesRefused, and `refused` gets {argument: what it
    was}."""
    def make(guarded):
        def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, *args, **kwargs):
            given = {"output_split_sizes": output_split_sizes, "input_split_sizes": input_split_sizes}
            odd = {name: _split_kind(sizes) for name, sizes in given.items() if _split_kind(sizes)}
            try:
                return guarded(output, input, output_split_sizes, input_split_sizes, *args, **kwargs)
            except TypeError as error:
                if not odd:
                    raise
                refused.append(odd)
                raise SplitSizesRefused(", ".join(f"{name} is {kind}" for name, kind in odd.items())) from error
        return all_to_all_single
    return replacing_dist_calls({"all_to_all_single": make})


class RaisedBeforeAnyCollective(CaseFailed):
    """The answer raised an IndexError, or a RuntimeError about sizes or shapes, on a rank that had called no
    collective in that call, where it must send rows back (combine): the rows it indexed or added were those other
    ranks sent it. A CaseFailed of its own class, so it pickles back as one."""


_SIZE_WORDS = re.compile(r"size|shape|index", re.IGNORECASE)


FUNCTIONAL_ALL_TO_ALLS = ("all_to_all_single", "all_to_all_single_autograd")


@contextlib.contextmanager
def _watching_functional_all_to_alls(seen: list):
    """For the duration, torch's functional all-to-alls (torch.distributed._functional_collectives, which the
    guards of dist's own do not see) note their name in `seen` when called."""
    from torch.distributed import _functional_collectives as functional
    originals = {name: getattr(functional, name) for name in FUNCTIONAL_ALL_TO_ALLS if hasattr(functional, name)}

    def noting(name, original):
        def call(*args, **kwargs):
            seen.append(name)
            return original(*args, **kwargs)
        return call

    for name, original in originals.items():
        setattr(functional, name, noting(name, original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(functional, name, original)


def _run_guarded(fn, case: str, *args, answers: tuple = (), returns_rows: bool = False) -> dict:
    """Call the answer with its all-to-alls guarded and its other collectives listed; SplitMismatch and
    SplitSizesRefused are results.

    `answers`: the package's own answers to the exercise; those the answer called are listed ("called").
    `returns_rows`: the answer must send rows back (combine): an error raised before it called any collective is
    raised as RaisedBeforeAnyCollective.
    """
    others: list[tuple[int, str]] = []
    refused: list[dict] = []
    value, error = None, None
    functional: list[str] = []
    with guarded_all_to_all() as calls, _refused_split_types(refused), torch.no_grad(), \
            watching_collectives({name: (0, "tensor") for name in OTHER_COLLECTIVES},
                                 lambda name, sent: others.append((len(calls), name))), \
            _watching_functional_all_to_alls(functional), watching_calls(answers) as called:
        try:
            value, error = _plain(call_case(fn, case, *args)), None
        except CaseFailed as failure:
            if failure.kind not in ("SplitMismatch", "SplitSizesRefused"):   # raised on every rank together
                if returns_rows and not calls and not others and not functional and (
                        failure.kind == "IndexError" or
                        (failure.kind == "RuntimeError" and _SIZE_WORDS.search(failure.message))):
                    raise RaisedBeforeAnyCollective(failure.case, failure.kind, failure.message,
                                                    failure.name) from failure.__cause__
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
        if all(kind == "a tensor" for kind in refused.values()):
            fix = "pass each through .tolist() (sent_counts.tolist(), not sent_counts)."
        elif all(kind.endswith(" of floats") for kind in refused.values()):
            fix = ("your counts are floating-point, so .tolist() gives floats: make them integers first "
                   "(.long().tolist()), or count with torch.bincount, whose counts are int64.")
        else:
            fix = "a list of Python ints."
        raise CheckFailed(f"rank {rank}, all_to_all_single call {len(result['calls'])}: torch refused the call, "
                          f"which got {given}. The split sizes' values fit together on every rank; only their type "
                          f"is wrong.\nHint: all_to_all_single takes split sizes as lists of ints: {fix}")


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
_INVALID_SHAPE = re.compile(r"shape '\[([-\d, ]+)\]' is invalid for input of size (\d+)")


def _short_count(case: Case) -> int:
    """How many experts torch.bincount without minlength counts on the case's short rank."""
    return max(case.experts[case.short_rank()]) + 1


def _failed_case(failure) -> tuple[Case, tuple]:
    """(the call a rank failed in, the calls of its function: DISPATCH_CASES or COMBINE_CASES), from the input the
    failure names; the first dispatch call where it names none."""
    named = getattr(failure.exception, "case", None) or ""
    cases = COMBINE_CASES if named.startswith("combining") else DISPATCH_CASES
    return next((case for case in cases if named.endswith(case.describe())), cases[0]), cases


_DTYPES = re.compile(r"different dtypes\s*Found (\S+) and\s+(\S+)")   # torch names the output's dtype first


def _dtype_hint(text: str) -> str:
    """The hint for torch's refusal of a collective whose output and input dtypes differ."""
    dtypes = _DTYPES.search(text)
    if dtypes and "int" in dtypes.group(2) and "int" not in dtypes.group(1):
        default = " (torch.empty makes float32 unless given a dtype)" if dtypes.group(1) == "torch.float32" else ""
        return (f"a collective receives into a buffer of the dtype it sends: the counts are {dtypes.group(2)}, the "
                f"buffer made for them {dtypes.group(1)}{default}. Make it from the counts themselves, with "
                "torch.empty_like(counts).")
    given = f": the output is {dtypes.group(1)}, the input {dtypes.group(2)}" if dtypes else ""
    return (f"a collective receives into a buffer of the dtype it sends{given}. Make the output from the tensor "
            "sent (torch.empty_like, or tensor.new_empty for another shape).")


def _explain(failure) -> str | None:
    """The hint for a rank that raised, from its exception's own message, or None: the traceback holds the check's
    own frames too (the guard's code names split sizes whatever went wrong)."""
    text = str(failure.exception)
    size = _INVALID_SIZE.search(text)
    case, cases = _failed_case(failure)
    first = cases[0]
    short = case.short_rank() if cases is DISPATCH_CASES else None
    if short is not None and failure.rank == short and size and int(size.group(1)) == _short_count(case):
        return MINLENGTH_HINT.format(rank=short, short=_short_count(case), experts=case.num_experts) + "."
    shape = _INVALID_SHAPE.search(text)
    if shape and case != first and int(shape.group(2)) == case.num_experts:
        dims = [int(dim) for dim in shape.group(1).split(",")]
        sized = [dim for dim in dims if dim > 0]
        if first.per_rank in sized or torch.tensor(sized).prod().item() == first.num_experts:
            return (f"this call has {case.num_experts} experts ({case.per_rank} per rank), the first had "
                    f"{first.num_experts} ({first.per_rank} per rank): the shape [{shape.group(1)}] holds the first "
                    "call's numbers. Take them from num_experts and the world size (dist.get_world_size()), not from "
                    "numbers written in the code.")
    if "different dtypes" in text:
        return _dtype_hint(text)
    if "Split sizes doesn't match" in text or "split_sizes" in text:
        return SPLITS_HINT
    if "Backend gloo does not support alltoall" in text:   # torch before 2.9 or so: no list all_to_all on gloo
        return ("gloo's dist.all_to_all (a list of tensors) does not exist in this torch's gloo, and where it does, it "
                "takes blocks of one shape only: send the rows with one dist.all_to_all_single(output, input, "
                "output_split_sizes, input_split_sizes).")
    if "ProcessGroupGloo::alltoall: invalid tensor size" in text:
        return ("gloo's dist.all_to_all (a list of tensors) takes blocks of one shape only, and this rank's blocks "
                "(one per destination) have different numbers of rows: send them with one "
                "dist.all_to_all_single(output, input, output_split_sizes, input_split_sizes).")
    if isinstance(failure.exception, RaisedBeforeAnyCollective):
        return ("this rank had called no collective when it raised, on the sizes of its rows. "
                + RETURN_TRIP_RULE + ".")
    return None


# --- dispatch ---------------------------------------------------------------------------------

def _dispatch_call(rank: int, answer, case: Case) -> dict:
    expert = torch.tensor(case.experts[rank])
    return _run_guarded(answer, f"dispatching rank {rank}'s {len(expert)} rows to {case.describe()}",
                        _rows(rank, len(expert), case.hidden), expert.clone(), case.num_experts,
                        answers=DISPATCH_ANSWERS)


def _dispatch_runner(rank: int, answers: tuple) -> list[list[dict]]:
    return [[_dispatch_call(rank, answer, case) for case in DISPATCH_CASES] for answer in answers]


def run_dispatch_answers(answers: tuple, timeout: float = 30.0, name: str = "dispatch") -> list[list[list[dict]]]:
    """Run each answer on the same 3 ranks, once per call of DISPATCH_CASES (one launch); [answer][rank][call] ->
    what the rank saw."""
    return run_answers_on_ranks(_dispatch_runner, answers, WORLD_SIZE, timeout, name, explain=_explain,
                                timeout_hint=HANG_HINT)


def _dispatch_truth(case: Case) -> dict:
    per_expert = [torch.bincount(torch.tensor(e), minlength=case.num_experts) for e in case.experts]
    sent = [counts.view(WORLD_SIZE, case.per_rank).sum(dim=1) for counts in per_expert]
    received = [torch.stack([counts.view(WORLD_SIZE, case.per_rank)[rank] for counts in per_expert])
                for rank in range(WORLD_SIZE)]
    return {"per expert": per_expert, "sent": sent, "received": received}


_ROW_SHAPES = re.compile(r"the input's rows have shape \(([\d, ]*)\), the output's \(([\d, ]*)\)$")


def _row_shape_hint(call, what: str, case: Case) -> str | None:
    """The hint for an all_to_all_single whose output rows are not shaped like its input rows, or None. `what`: the
    input, as the exercise names it; `case`: the call of the answer it happened in."""
    shapes = _ROW_SHAPES.match(call.problem or "")
    if not shapes:
        return None
    sent, out = ([int(size) for size in shape.replace(",", " ").split()] for shape in shapes.groups())
    if len(sent) == 1 and not out:
        return (f"the output is 1-D, one value per row, and each row of {what} has {sent[0]} values: give the output "
                f"two dimensions, (the rows it receives, {what}.shape[1]).")
    if len(sent) == 1 and len(out) == 1:
        written = case.hidden != HIDDEN and out[0] == HIDDEN   # the first call's values per row
        return (f"the output's rows must be shaped like the rows sent: in this call each row of {what} has "
                f"{sent[0]} values, each row of the output {out[0]}. Size the output from {what}.shape[1]"
                + (", not from a number written in the code." if written else "."))
    return (f"the output's rows must be shaped like the rows sent: each row of {what} has shape {tuple(sent)}, each "
            f"row of the output {tuple(out)}. Give the output the shape (the rows it receives, *{what}.shape[1:]).")


def _split_feedback(rank: int, result: dict, truth: dict, rows_call: str, case: Case) -> str:
    """The message for a SplitMismatch: what the rank passed, and the mistake it points to."""
    call = result["calls"][-1]
    sent, received = truth["sent"][rank].tolist(), truth["received"][rank].sum(dim=1).tolist()
    message = (f"rank {rank}, all_to_all_single call {len(result['calls'])} ({rows_call}): {call.problem}.")
    earlier = len(result["calls"]) - 1 + sum(index < len(result["calls"]) for index, _ in result["others"])
    short = case.short_rank()
    if rows_call == "the counts" and rank == short and call.input_shape == (_short_count(case),):
        hint = MINLENGTH_HINT.format(rank=rank, short=_short_count(case), experts=case.num_experts) + "."
    elif _row_shape_hint(call, "rows", case):
        hint = _row_shape_hint(call, "rows", case)
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


def _owned_by(case: Case) -> str:
    return f"{case.per_rank}·j ... {case.per_rank}·j + {case.per_rank - 1}"


def _wrong_send_splits(results: list[dict], truth: dict, case: Case) -> None:
    """CheckFailed naming the first rank whose rows went out with split sizes other than its rows per owning rank
    (what the receivers' mismatch follows from), if there is one."""
    first = DISPATCH_CASES[0]
    for rank, result in enumerate(results):
        calls = result["calls"]
        if not calls or len(calls[-1].input_shape) < 2 or calls[-1].input_splits is None:
            continue
        splits, want = calls[-1].input_splits, truth["sent"][rank].tolist()
        if splits == want or splits == truth["received"][rank].sum(dim=1).tolist():   # swapped: _split_feedback's
            continue
        experts = torch.tensor(case.experts[rank])
        round_robin = torch.bincount(experts % WORLD_SIZE, minlength=WORLD_SIZE).tolist()
        by_first = torch.bincount(experts // first.per_rank, minlength=WORLD_SIZE).tolist()
        if len(splits) < WORLD_SIZE and splits == want[:len(splits)] and not any(want[len(splits):]):
            hint = (f"these are your rows per owning rank, but they stop at rank {len(splits) - 1}, the last one you "
                    "send rows to, as torch.bincount's counts do without minlength (they end at the largest value "
                    "present). Pass minlength=world_size, so that every rank gets its count, 0 included")
        elif splits == round_robin:
            hint = (f"these count your rows by expert % {WORLD_SIZE}; rank j owns a block of experts, "
                    f"{_owned_by(case)}: the owner of expert e is e // {case.per_rank}")
        elif case.per_rank != first.per_rank and splits == by_first:
            hint = (f"these count your rows by expert // {first.per_rank}, the owner when every rank holds "
                    f"{first.per_rank} experts, as in the first call; in this one each holds {case.per_rank}. Take "
                    "the experts per rank from num_experts and the world size, not from a number written in the code")
        else:
            hint = f"input_split_sizes[j] is how many of your rows go to rank j, the owner of experts {_owned_by(case)}"
        raise CheckFailed(f"rank {rank} sent its rows with input_split_sizes={splits}, but its rows for each rank's "
                          f"experts number {want}; the ranks receiving them then see other counts than they expect."
                          f"\nHint: {hint}.")


def judge_dispatch(name: str, results: list[list[dict]]) -> str:
    """Feedback for one dispatch answer's per-rank results ([rank][call], each call one of DISPATCH_CASES): raise
    CheckFailed, or return the ✓ text."""
    first, *later = _judge_cases(_judge_dispatch_call, name, results, DISPATCH_CASES)
    return f"{first}; the same {' and '.join(later)}"


def _judge_dispatch_call(name: str, results: list[dict], case: Case) -> str:
    """Feedback for one call's per-rank results: raise CheckFailed, or return what the ✓ text says of it."""
    _package_answer(name, results)
    _refused_splits_feedback(results)
    truth = _dispatch_truth(case)
    rank = _first_split_problem(results)
    short = case.short_rank()
    if rank is not None and short is not None and results[short]["error"] and \
            results[short]["calls"][-1].input_shape == (_short_count(case),):
        rank = short   # its counts came out short: the other ranks' problems follow from it
    if rank is not None:
        rows_call = "the rows" if len(results[rank]["calls"][-1].input_shape) > 1 else "the counts"
        if rows_call == "the rows":
            _wrong_send_splits(results, truth, case)
        raise CheckFailed(_split_feedback(rank, results[rank], truth, rows_call, case))
    orders = []
    for rank, result in enumerate(results):
        value = result["value"]
        if not isinstance(value, tuple):
            got = value if isinstance(value, str) else describe(value)
            listed = " is a list of " in got   # `_plain`: a field of the four passed through .tolist()
            raise CheckFailed(f"rank {rank}: {name} returned {got}; expected Dispatched(received, received_counts, "
                              "sent_counts, order), four tensors." + (
                                  "\nHint: keep the counts and the order as tensors in Dispatched: lists of ints "
                                  "(.tolist()) are what all_to_all_single takes for its split sizes only." if listed
                                  else ""))
        received, received_counts, sent_counts, order = value
        want_sent, want_received = truth["sent"][rank], truth["received"][rank]
        if sent_counts.tolist() != want_sent.tolist():
            first = DISPATCH_CASES[0]
            counted_for_first = torch.bincount(torch.tensor(case.experts[rank]), minlength=first.num_experts)
            if sent_counts.tolist() == truth["per expert"][rank].tolist():
                hint = ("these are counts per expert; sent_counts has one entry per RANK: the rows for its "
                        f"{case.per_rank} experts added up")
            elif case.num_experts < first.num_experts and \
                    sent_counts.tolist() == counted_for_first.view(WORLD_SIZE, -1).sum(dim=1).tolist():
                hint = (f"these are your rows counted for {first.num_experts} experts, the first call's number, "
                        f"{first.per_rank} per rank; this call has num_experts = {case.num_experts}. Count every "
                        "expert with minlength=num_experts, not a number written in the code")
            else:
                hint = f"sent_counts[j] is how many of your rows go to rank j, the owner of experts {_owned_by(case)}"
            raise CheckFailed(f"rank {rank}: sent_counts {sent_counts.tolist()}, expected {want_sent.tolist()}.\n"
                              f"Hint: {hint}.")
        if tuple(received_counts.shape) != (WORLD_SIZE, case.per_rank) or \
                not torch.equal(received_counts.long(), want_received):
            exchanged = result["calls"][0].input_shape if result["calls"] else None   # what the counts call sent
            per_rank = received_counts.numel() == WORLD_SIZE and case.per_rank > 1
            if per_rank and exchanged == (WORLD_SIZE,):
                hint = (f"received_counts holds one count per rank: the counts exchanged were per-rank totals "
                        f"(sent_counts). Exchange the per-expert counts (one per global expert), so that each rank "
                        f"gets, from every rank, a count for each of its {case.per_rank} experts")
            elif per_rank and exchanged == (case.num_experts,) and \
                    torch.equal(received_counts.flatten().long(), want_received.sum(dim=1)):
                hint = (f"these are the exchanged per-expert counts summed per sending rank (the output split "
                        f"sizes); received_counts keeps them per expert, shape ({WORLD_SIZE}, {case.per_rank}): "
                        "what the counts exchange returned, viewed as (world_size, -1), before any sum")
            else:
                hint = (f"received_counts[s][e] is how many rows rank s sends for my local expert e: shape "
                        f"({WORLD_SIZE}, {case.per_rank}), what the counts exchange returned, viewed as "
                        "(world_size, -1)")
            raise CheckFailed(f"rank {rank}: received_counts {received_counts.tolist()}, expected "
                              f"{want_received.tolist()}.\nHint: {hint}.")
        expert = torch.tensor(case.experts[rank])
        if sorted(order.tolist()) != list(range(len(expert))):
            raise CheckFailed(f"rank {rank}: order {order.tolist()} is not a permutation of the rank's "
                              f"{len(expert)} rows.\nHint: order is the argsort of the rows' experts.")
        in_order = expert[order]
        if not bool((in_order[1:] >= in_order[:-1]).all()):
            owner, inverse = in_order // case.per_rank, expert[order.argsort()]
            hint = ("`order` is the inverse of the sorting permutation: expert[order.argsort()] is sorted. order must "
                    "be the permutation that sorts the rows, rows[order] sorted by expert (torch.argsort(expert)), "
                    "which combine uses to put the outputs back"
                    if bool((inverse[1:] >= inverse[:-1]).all()) else
                    "the rows are sorted in descending order of expert, so the first block goes to rank 0 with the "
                    "last rank's experts in it: sort in ascending order (torch.argsort's default, descending=False)"
                    if bool((in_order[1:] <= in_order[:-1]).all()) else
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
            rows = _rows(source, len(case.experts[source]), case.hidden)
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
    received = [int(t.sum()) for t in truth["received"]]
    if case == DISPATCH_CASES[0]:
        return (f"{name}: counts exchanged first, then every rank's rows reached their experts' owners with uneven "
                f"splits ({received} rows received)")
    return f"with {case.num_experts} experts and rows of {case.hidden} values ({received} rows received)"


def _check_one(answer, default_name: str, run_answers, judge, timeout: float) -> None:
    """What every public check of this lesson does: refuse a stub, run the one answer on ranks, judge it."""
    ensure_written(answer)
    name = getattr(answer, "__name__", default_name)
    passed(judge(name, run_answers((answer,), timeout, name)[0]))


def check_dispatch(dispatch, timeout: float = 30.0) -> None:
    """Check `dispatch(rows, expert, num_experts)` on 3 ranks: the counts exchange and the uneven all-to-all.

    The world size is 3 in both calls, so a reshape or a division by a number written in the code
    (`counts.view(3, -1)`, `num_experts // 3`) is refused from the source before any rank starts.

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    ensure_written(dispatch)
    name = getattr(dispatch, "__name__", "dispatch")
    sizes = "dist.get_world_size(group) and num_experts"
    refuse_written_shape(dispatch, name, sizes)
    refuse_written_divisor(dispatch, name, "an expert count or index", sizes, divided=("expert",))
    passed(judge_dispatch(name, run_dispatch_answers((dispatch,), timeout, name)[0]))


# --- combine ----------------------------------------------------------------------------------

def _combine_case(rank: int, case: Case = COMBINE_CASES[0]):
    """Rank `rank`'s tokens x, its kept assignments (token index, expert, gate) in token order, in one call."""
    expert, kept = torch.tensor(case.experts[rank]), torch.tensor(case.kept[rank], dtype=torch.bool)
    x = _rows(rank, len(expert), case.hidden) / 10
    first = 0.3 + 0.4 * torch.rand(len(expert), generator=torch.Generator().manual_seed(140 + rank))
    gates = torch.stack([first, 1 - first], dim=1)
    token_index, slot = kept.nonzero(as_tuple=True)
    return x, token_index, expert[token_index, slot], gates[token_index, slot]


def _expert_function(expert: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """What expert e computes in this check: (e + 2) · row + e / 2 (each expert a different function)."""
    e = expert.to(rows.dtype).unsqueeze(-1)
    return (e + 2) * rows + e / 2


def _combine_inputs(rank: int, case: Case) -> tuple:
    """What combine gets on rank `rank` in one call: the expert outputs of the rows the package's dispatch brought
    it, that dispatch, and the rank's token index, gates and tokens."""
    x, token_index, expert, gates = _combine_case(rank, case)
    with torch.no_grad():
        sent = reference_dispatch(x[token_index], expert, case.num_experts)
    owner_experts = torch.arange(case.per_rank).repeat(WORLD_SIZE).repeat_interleave(sent.received_counts.flatten())
    return _expert_function(rank * case.per_rank + owner_experts, sent.received), sent, token_index, gates, x


def _combine_runner(rank: int, answers: tuple) -> list[list[dict]]:
    inputs = [_combine_inputs(rank, case) for case in COMBINE_CASES]   # the dispatches run before any answer
    results = []
    for answer in answers:
        results.append([])
        for case, (expert_output, sent, token_index, gates, x) in zip(COMBINE_CASES, inputs):
            given_x = x.clone()
            results[-1].append(_run_guarded(answer, f"combining on rank {rank}, {case.describe()}",
                                            expert_output.clone(), sent, token_index.clone(), gates.clone(),
                                            given_x, answers=COMBINE_ANSWERS, returns_rows=True))
            results[-1][-1]["x changed"] = how_it_changed(given_x, x)
    return results


def run_combine_answers(answers: tuple, timeout: float = 30.0, name: str = "combine") -> list[list[list[dict]]]:
    """Run each answer on the same 3 ranks, once per call of COMBINE_CASES (one launch); [answer][rank][call] ->
    what the rank saw."""
    return run_answers_on_ranks(_combine_runner, answers, WORLD_SIZE, timeout, name, explain=_explain,
                                timeout_hint=HANG_HINT)


def _combine_candidates(rank: int, case: Case = COMBINE_CASES[0]) -> dict:
    """The right y of a rank in one call, and what common mistakes give instead."""
    x, token_index, expert, gates = _combine_case(rank, case)
    outputs = _expert_function(expert, x[token_index])                  # row i's expert output, in token order
    order = torch.argsort(expert, stable=True)
    back = outputs[order]                                               # as the reverse all-to-all returns them
    g = gates.unsqueeze(-1)
    dropped = torch.ones(len(x), dtype=torch.bool)
    dropped[token_index] = False
    overwritten = x.clone()
    overwritten[token_index] = x[token_index] + g * outputs              # y[idx] = / += ...: one row of a token wins
    return {
        "right": x.index_add(0, token_index, g * outputs),
        "without gates": x.index_add(0, token_index, outputs),
        "gates twice": x.index_add(0, token_index, g * g * outputs),
        "no residual": torch.zeros_like(x).index_add(0, token_index, g * outputs),
        "overwritten": overwritten,
        "not unsorted": x.index_add(0, token_index, g * back),
        "sorted again": x.index_add(0, token_index, g * back[order]),
        "gates in sorted order": x.index_add(0, token_index, g[order.argsort()] * outputs),   # (back * g)[inverse]
        "gates sorted, rows not": x.index_add(0, token_index, g[order] * outputs),   # back[inverse] * g[order]
        "dropped": dropped,
    }


COMBINE_HINTS = {
    "without gates": "the gate weights are missing: multiply each returned row by its gate before adding it",
    "gates twice": "the gates are applied twice (the rows came back unweighted: weight them once)",
    "overwritten": ("a token with two kept assignments got only one expert's output: with repeated indices, "
                    "y[token_index] = ... and y[token_index] += ... both keep one write per token (+= reads the old "
                    "rows, adds, and writes back: the writes to one token overwrite each other); index_add adds "
                    "every row, so the rows of one token sum"),
    "not unsorted": ("the rows come back in the order you sent them, sorted by expert: undo the sort with the "
                     "inverse of dispatched.order (row order[j] is back[j]) before adding them to their tokens"),
    "sorted again": ("the permutation was applied a second time instead of undone, as back[order] does (and the same "
                     "as scattering through the inverse, rows[order.argsort()] = back): row order[j] of the tokens is "
                     "back[j], so gather with the inverse, back[order.argsort()], or scatter with the order itself, "
                     "rows[order] = back"),
    "gates in sorted order": ("each row went to its token, but with another row's gate: gates[i] belongs to row i in "
                              "the order you dispatched them, and the returned rows are sorted by expert (the j-th is "
                              "row dispatched.order[j]). Undo the sort before weighting, or weight the returned rows, "
                              "still sorted, by gates[dispatched.order]"),
    "gates sorted, rows not": ("each row went to its token, but with another row's gate: the rows were put back in "
                               "token order, where row i's gate is gates[i] as it is; gates[dispatched.order] is the "
                               "gates in the sorted order the rows came back in. Weight the unsorted rows by gates "
                               "itself"),
}


def judge_combine(name: str, results: list[list[dict]]) -> str:
    """Feedback for one combine answer's per-rank results ([rank][call], each call one of COMBINE_CASES): raise
    CheckFailed, or return the ✓ text."""
    first, *later = _judge_cases(_judge_combine_call, name, results, COMBINE_CASES)
    return f"{first}; the same {' and '.join(later)}"


def _judge_combine_call(name: str, results: list[dict], case: Case) -> str:
    """Feedback for one call's per-rank results: raise CheckFailed, or return what the ✓ text says of it."""
    _package_answer(name, results)
    _refused_splits_feedback(results)
    rank = _first_split_problem(results)
    if rank is not None:
        call = results[rank]["calls"][-1]
        owners = [torch.bincount(_combine_case(source, case)[2] // case.per_rank, minlength=WORLD_SIZE).tolist()
                  for source in range(WORLD_SIZE)]          # owners[s][r]: rows rank s dispatched to rank r
        sent, received = owners[rank], [owners[source][rank] for source in range(WORLD_SIZE)]
        if _row_shape_hint(call, "expert_output", case):
            hint = _row_shape_hint(call, "expert_output", case)
        elif call.input_splits == received and call.output_splits == sent and call.output_rows != sum(sent):
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
    changed = next((rank for rank, result in enumerate(results) if result.get("x changed")), None)
    if changed is not None:
        raise CheckFailed(f"rank {changed}: {name} changed the x it was given, the tokens and residual "
                          f"({results[changed]['x changed']}).\nHint: an "
                          "in-place operation on x (x.index_add_, x += ...) overwrites the layer's input, which "
                          "autograd keeps for the router and the layers before it: in training, backward then fails "
                          "(\"modified by an inplace operation\"), or index_add_ refuses a leaf that requires grad. "
                          "Add into a new tensor: x.index_add(...) without the underscore returns one.")
    for rank, result in enumerate(results):
        got, candidates = result["value"], _combine_candidates(rank, case)
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
    if case == COMBINE_CASES[0]:
        return (f"{name}: expert outputs came back with the splits swapped, unsorted, weighted by their gates and "
                "added to the residual; dropped tokens passed through unchanged")
    return f"with {case.num_experts} experts and rows of {case.hidden} values"


def check_combine(combine, timeout: float = 30.0) -> None:
    """Check `combine(expert_output, dispatched, token_index, gates, x)` on 3 ranks against y = x + Σ g · expert(x).

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    _check_one(combine, "combine", run_combine_answers, judge_combine, timeout)


# --- reduce_gradients (EP × DP) ---------------------------------------------------------------

DP_SIZE, EP_SIZE = 2, 2
# three replicated parameters, two expert ones: a loop over zip(replicated, expert) misses one
REPLICATED_SHAPES, EXPERT_SHAPES = ((3,), (2, 2), (4,)), ((2, 3), (3,))


class Params(NamedTuple):
    """One call of reduce_gradients: the shapes of the replicated parameters and of the expert ones, and the seed
    of their gradients."""

    replicated: tuple
    expert: tuple
    seed: int


# The first call's parameters, then more of them, of other shapes: a count written for the first misses some.
REDUCE_CASES = (Params(REPLICATED_SHAPES, EXPERT_SHAPES, 1400),
                Params(((2, 3), (5,), (1,), (3, 2)), ((4,), (2, 2), (3,)), 1450))


def _params_changed(case: Params, first: Params) -> str:
    return (f"with {len(case.replicated)} replicated and {len(case.expert)} expert parameters instead of "
            f"{len(first.replicated)} and {len(first.expert)}")


def _local_grads(rank: int, case: Params = REDUCE_CASES[0]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """What backward left on rank `rank`: its replicated parameters' and its experts' gradients, in one call."""
    generator = torch.Generator().manual_seed(case.seed + rank)
    return ([torch.randn(shape, generator=generator) for shape in case.replicated],
            [torch.randn(shape, generator=generator) + 10 * (rank % EP_SIZE) for shape in case.expert])


def _first(tensor: torch.Tensor) -> str:
    return str([round(v, 4) for v in tensor.flatten()[:3].tolist()])[:-1] + ", ...]"


def _dp_groups() -> list[list[int]]:
    return [[ep + dp * EP_SIZE for dp in range(DP_SIZE)] for ep in range(EP_SIZE)]   # [[0, 2], [1, 3]]


def _reduce_runner(rank: int, answers: tuple) -> list[list[dict]]:
    groups = [dist.new_group(ranks) for ranks in _dp_groups()]   # every rank creates every group, in one order
    dp_group = groups[rank % EP_SIZE]
    return [[_reduce_call(rank, answer, case, dp_group) for case in REDUCE_CASES] for answer in answers]


def _reduce_call(rank: int, answer, case: Params, dp_group) -> dict:
    """One call of the answer on this rank's gradients: the gradients afterwards, and what the answer reduced."""
    grads = _local_grads(rank, case)
    replicated, expert = ([torch.nn.Parameter(torch.zeros_like(g)) for g in part] for part in grads)
    for p, g in zip([*replicated, *expert], [*grads[0], *grads[1]]):
        p.grad = g.clone()
    storages = {what: [p.grad.data_ptr() for p in part] for what, part in (("replicated", replicated),
                                                                           ("expert", expert))}
    reduced: list[int] = []   # the storage of every tensor passed to dist.all_reduce
    works: list = []          # (storage, work handle, [waited]) of every all_reduce started with async_op=True
    given: list = []          # (storage, the values it held before the reduction) of every all_reduce
    with watching_requests() as requests, _recording_all_reduce(reduced, works, given, requests):
        call_case(answer, f"reducing rank {rank}'s gradients ({len(case.replicated)} replicated and "
                          f"{len(case.expert)} expert parameters)", replicated, expert, dp_group)
        never_waited = {pointer for pointer, _, waited in works if not waited[0]}   # wait() nor is_completed() called
    in_flight = {pointer for pointer, work, _ in works if not work.is_completed()}   # before the grads are read
    own = {pointer for pointers in storages.values() for pointer in pointers}
    elsewhere = [values for pointer, values in given if pointer not in own]   # copies, flat buffers, others
    result = {"replicated": [p.grad.clone() for p in replicated], "expert": [p.grad.clone() for p in expert],
              "reduced": {what: [pointer in reduced for pointer in pointers]
                          for what, pointers in storages.items()},
              "times reduced": {what: [reduced.count(pointer) for pointer in pointers]
                                for what, pointers in storages.items()},
              "in_flight": {what: [pointer in in_flight for pointer in pointers]
                            for what, pointers in storages.items()},
              "never waited": {what: [pointer in never_waited for pointer in pointers]
                               for what, pointers in storages.items()},
              "parameter reduced": {what: [p.data_ptr() in reduced for p in part]
                                    for what, part in (("replicated", replicated), ("expert", expert))},
              "copied": {what: [held_in(g, elsewhere) for g in part]
                         for what, part in (("replicated", grads[0]), ("expert", grads[1]))}}
    for _, work, _ in works:     # the next call starts after this one's all-reduces
        work.wait()
    return result


def _recording_all_reduce(reduced: list, works: list, given: list, requests):
    """Inside a rank: record the storage of every tensor dist.all_reduce gets, the work handle it returns
    (async_op=True) as (storage, handle, [whether the answer waited for it (RequestWatcher)]:
    `requests`, a watching_requests watcher), and the values the tensor held before it as (storage, values)."""
    def make(original):
        def all_reduce(*args, **kwargs):
            tensor = (call_arguments(original, args, kwargs) or {}).get("tensor")
            if torch.is_tensor(tensor):
                given.append((tensor.data_ptr(), tensor.detach().flatten().clone()))
            work = original(*args, **kwargs)
            if torch.is_tensor(tensor):
                reduced.append(tensor.data_ptr())
                if work is not None:
                    waited = [False]
                    requests.watch(work, lambda: waited.__setitem__(0, True))
                    works.append((tensor.data_ptr(), work, waited))
            return work
        return all_reduce
    return replacing_dist_calls({"all_reduce": make})


def run_reduce_answers(answers: tuple, timeout: float = 30.0,
                       name: str = "reduce_gradients") -> list[list[list[dict]]]:
    """Run each answer on the same 4 ranks, once per call of REDUCE_CASES (one launch); [answer][rank][call] -> its
    gradients afterwards."""
    return run_answers_on_ranks(_reduce_runner, answers, DP_SIZE * EP_SIZE, timeout, name,
                                timeout_hint=("every rank must all-reduce every gradient, the same ones in the same "
                                              "order: the replicated ones over all ranks (the default group), the "
                                              "experts' over dp_group, whose two ranks both make the call."))


def judge_reduce(name: str, results: list[list[dict]]) -> str:
    """Feedback for one reduce_gradients answer's per-rank results ([rank][call], each call one of REDUCE_CASES):
    raise CheckFailed, or return the ✓ text."""
    _judge_cases(_judge_reduce_call, name, results, REDUCE_CASES, changed=_params_changed)
    counts = " and ".join(f"{len(case.replicated)} + {len(case.expert)}" for case in REDUCE_CASES)
    return (f"{name}: replicated gradients summed over all {DP_SIZE * EP_SIZE} ranks, expert gradients over their "
            f"dp group ({counts} parameters)")


def _judge_reduce_call(name: str, results: list[dict], case: Params) -> None:
    """Raise CheckFailed if one call's per-rank gradients are not the sums they should be."""
    local = [_local_grads(rank, case) for rank in range(DP_SIZE * EP_SIZE)]
    counts = (len(case.replicated), len(case.expert))
    everyone = [[sum(local[r][part][i] for r in range(DP_SIZE * EP_SIZE)) for i in range(counts[part])]
                for part in (0, 1)]
    for rank, result in enumerate(results):
        column = next(ranks for ranks in _dp_groups() if rank in ranks)
        over_dp = [[sum(local[r][part][i] for r in column) for i in range(counts[part])] for part in (0, 1)]
        _zip_feedback(rank, result, local[rank], everyone[0], over_dp[1], case)
        _written_counts_feedback(rank, result, local[rank], everyone[0], over_dp[1], case)
        for part, what in ((0, "replicated"), (1, "expert")):
            want = everyone[0] if part == 0 else over_dp[1]
            for i, got in enumerate(result[what]):
                if torch.allclose(got, want[i], atol=1e-5):
                    continue
                size = len(column) if part else DP_SIZE * EP_SIZE
                if _unwaited(result, what, i):
                    hint = ("dist.all_reduce was started on this p.grad (async_op=True), but its result was read "
                            "before it finished: the work was not waited for before reduce_gradients returned. Keep "
                            "the work handle each call returns and .wait() on it before returning")
                elif torch.allclose(got, want[i] / size, atol=1e-5):
                    hint = ("this is the mean: each rank's loss is already its share of the global mean, so the "
                            "gradients add up; all-reduce with SUM and do not divide")
                elif torch.allclose(got, local[rank][part][i], atol=1e-5) and not result["reduced"][what][i] and \
                        result["parameter reduced"][what][i]:
                    hint = ("dist.all_reduce ran on the parameter itself, not on its gradient: p holds the weights, "
                            "p.grad what backward left. All-reduce p.grad")
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
                elif result.get("times reduced", {}).get(what, [1] * (i + 1))[i] > 1:
                    times = result["times reduced"][what][i]
                    hint = (f"this p.grad was all-reduced {times} times: each all-reduce sums into the tensor in "
                            "place, so the next one sums the sums. Reduce each gradient once: the replicated ones "
                            "over all ranks, the experts' over dp_group")
                else:
                    hint = "replicated: SUM over all ranks; experts: SUM over dp_group"
                raise CheckFailed(f"rank {rank}, {what} parameter {i}: got {_first(got)}, expected {_first(want[i])}.\n"
                                  f"Hint: {hint}.")
    for rank, result in enumerate(results):   # right values from an all-reduce never waited for: right by luck
        unwaited = [(what, i) for what, flags in result.get("never waited", {}).items() for i, flag in enumerate(flags)
                    if flag]
        if unwaited:
            what, i = unwaited[0]
            raise right_by_luck(f"rank {rank}, {what} parameter {i}", "the gradient",
                                "dist.all_reduce(p.grad, async_op=True)", "reduce_gradients returns")


def _unwaited(result: dict, what: str, i: int) -> bool:
    """True if parameter i's all-reduce (of `what`: "replicated" or "expert") was started with async_op=True and still
    in flight when the gradients were read, or never waited for: evidence that outweighs any pattern of values."""
    return any(i < len(flags) and flags[i] for flags in (result.get(key, {}).get(what, [])
                                                         for key in ("in_flight", "never waited")))


def _written_counts_feedback(rank: int, result: dict, local, replicated_sum, expert_sum, case: Params) -> None:
    """CheckFailed if, in a call with more parameters than the first, exactly those past the first call's numbers
    were left unreduced (a loop over a count written in the code stops there), and every other one is right; not
    where an all-reduce of them was started and not waited for (`_unwaited`)."""
    first = REDUCE_CASES[0]
    counts = (len(first.replicated), len(first.expert))
    missed = []
    for part, what, want in ((0, "replicated", replicated_sum), (1, "expert", expert_sum)):
        for i, got in enumerate(result[what]):
            if torch.allclose(got, want[i], atol=1e-5):
                continue
            if i < counts[part] or not torch.allclose(got, local[part][i], atol=1e-5) or _unwaited(result, what, i):
                return
            missed.append((what, i))
    if missed:
        what, i = missed[0]
        raise CheckFailed(f"rank {rank}, {what} parameter {i}: not all-reduced, though {what} parameters 0 to "
                          f"{counts[0 if what == 'replicated' else 1] - 1} were.\nHint: the loops stop at {counts[0]} "
                          f"replicated and {counts[1]} expert parameters, the first call's numbers; this call passes "
                          f"{len(case.replicated)} and {len(case.expert)}. Loop over each list itself, not over a "
                          "number written in the code.")


def _zip_feedback(rank: int, result: dict, local, replicated_sum, expert_sum, case: Params) -> None:
    """CheckFailed if exactly the parameters past the shorter list's length were left unreduced (a zip of the two
    lists stops there), and every one before them is right; not where an all-reduce of them was started and not
    waited for (`_unwaited`)."""
    shorter = min(len(case.replicated), len(case.expert))
    longer, what, want = ((0, "replicated", replicated_sum) if len(case.replicated) > len(case.expert)
                          else (1, "expert", expert_sum))
    got = result[what]
    right = all(torch.allclose(got[i], want[i], atol=1e-5) for i in range(shorter))
    left = all(torch.allclose(got[i], local[longer][i], atol=1e-5) and not _unwaited(result, what, i)
               for i in range(shorter, len(got)))
    other = result["expert" if longer == 0 else "replicated"]
    other_want = expert_sum if longer == 0 else replicated_sum
    if right and left and all(torch.allclose(g, w, atol=1e-5) for g, w in zip(other, other_want)):
        raise CheckFailed(f"rank {rank}, {what} parameter {shorter}: not all-reduced, though {what} parameters 0 to "
                          f"{shorter - 1} and every {'expert' if longer == 0 else 'replicated'} one were.\nHint: "
                          f"there are {len(case.replicated)} replicated parameters and {len(case.expert)} expert "
                          "ones, and a loop over zip(replicated, expert) stops at the shorter list: loop over each "
                          "list on its own.")


def check_reduce_gradients(reduce_gradients, timeout: float = 30.0) -> None:
    """Check `reduce_gradients(replicated, expert, dp_group)` on a (dp=2, ep=2) layout of 4 ranks.

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    _check_one(reduce_gradients, "reduce_gradients", run_reduce_answers, judge_reduce, timeout)

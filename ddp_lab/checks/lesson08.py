"""Checks for the exercises of notebooks/08-tensor-parallelism.ipynb: tensor parallelism by hand.

    ddp_lab.checks.lesson08.check_row_parallel_forward(row_parallel_forward)
    ddp_lab.checks.lesson08.check_copy_to_model_parallel_region(CopyToModelParallelRegion)

Each runs the answer on 2 gloo ranks with a short timeout, so a deadlock ends with a
message instead of a hang, and compares every rank's result with one process computing
the same layer unsplit (for row_parallel_forward, two layers of different sizes in turn,
then, in the same launch and only if every output on 2 ranks was right, a third layer on
3 ranks, judged after the 2 ranks: code written for 2 ranks fails there, a send/recv to
"the other rank" included). `run_*_answers` runs several answers in one launch and
`judge_*` turns one answer's results into feedback: the checks are the two in a row, tests
batch answers. The package's own f (`CopyToModelParallelRegion`), passed, subclassed or
called, is refused.

Introduced in notebooks/08-tensor-parallelism.ipynb.
"""

from __future__ import annotations

import ast
import re

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.distributed as dist

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (FORBIDDEN, POINT_TO_POINT, answer_of, call_case, describe, ensure_written,
                                   first_mismatch, groups_of, judge_in_order, library_of, package_answer_used,
                                   parse_frames, refuse_written_divisor, refuse_written_split, run_answers_on_ranks,
                                   run_on_ranks, source_tree, torch_arguments, two_numbers, watching_calls,
                                   with_a_note)
from ddp_lab.course.tensor_parallel.communications import (CopyToModelParallelRegion, copy_to_model_parallel_region,
                                                           reduce_from_model_parallel_region)
from ddp_lab.instruments.collectives import replacing_dist_calls
from torch.utils._python_dispatch import TorchDispatchMode

WORLD_SIZE = 2
IN_FEATURES, OUT_FEATURES = 8, 6  # not square: slicing the wrong dimension of the weight fails loudly
# row_parallel_forward's layers on the exercise's 2 ranks, (in_features, out_features): the first, then a wider
# one, where a shard cut with the first one's numbers written in (4 columns, from rank * 4) has the wrong width or place
ROW_LAYERS = ((IN_FEATURES, OUT_FEATURES), (12, 10))
# Then, in the same launch (`common.groups_of`), on 3 ranks: code written for 2 (the shard as the first or the second
# half of the weight, the other rank as 1 - rank) fails there. 9 features, 3 a rank: a width no layer on 2 ranks has.
SECOND_SIZE = 3
ROW_RUNS = {WORLD_SIZE: ROW_LAYERS, SECOND_SIZE: ((9, 7),)}   # {world size: its layers}, in the order run and judged


HANG_HINT = ("dist.all_reduce completes only when every rank calls it: call it on every rank "
             "(not under `if rank == 0:`), the same number of times.")


def _where(index: tuple) -> str:
    return "[" + ", ".join(str(i) for i in index) + "]"


def _mismatch(rank: int, what: str, got: torch.Tensor, want: torch.Tensor, of: str = "", atol: float = 1e-5,
              rtol: float = 1e-5) -> str:
    """'rank 0, output[0, 0, 0]{of}: got ..., expected ...' at the first element that differs by more than the
    tolerances of the comparison that found them different (else where they differ most), in as many digits as it
    takes for the two to read differently."""
    index = first_mismatch(got, want, atol=atol, rtol=rtol)
    if index is None:
        index = tuple(int(i) for i in torch.unravel_index((got - want).abs().argmax(), got.shape))
    shown, expected = two_numbers(got[index].item(), want[index].item())
    return f"rank {rank}, {what}{_where(index)}{of}: got {shown}, expected {expected}"


# The dtypes a float32 result can pass through and come back from with fewer digits, and about how many they keep
_LOW_PRECISION = {torch.bfloat16: "about 2 to 3", torch.float16: "about 3"}


def _lost_precision(got: torch.Tensor, expected: torch.Tensor, seen: list) -> str | None:
    """Where `got` equals `expected` only to the precision of a dtype of _LOW_PRECISION, what shows that it passed
    through it: a product or a collective that worked in it (`seen`: (what, dtype) of each the answer ran), or every
    element of `got` one of its numbers (not integers only, which every dtype holds); None otherwise."""
    for where, dtype in seen:
        if dtype in _LOW_PRECISION and _close_in(got, expected, dtype):
            return f"{where} worked on a {dtype} tensor ({dtype} keeps {_LOW_PRECISION[dtype]} significant digits)"
    if not torch.equal(got, got.round()):
        for dtype in _LOW_PRECISION:
            if torch.equal(got.to(dtype).to(got.dtype), got) and _close_in(got, expected, dtype):
                return (f"every element of it is a {dtype} number, so it went through {dtype} ({dtype} keeps "
                        f"{_LOW_PRECISION[dtype]} significant digits)")
    return None


def _close_in(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether got equals expected to the precision of `dtype` (a few roundings of it, relative to expected's
    largest element)."""
    tolerance = 8 * torch.finfo(dtype).eps
    return torch.allclose(got, expected, rtol=tolerance, atol=tolerance * float(expected.abs().max()))


# --- row_parallel_forward ------------------------------------------------------------------

def _linear(in_features: int = IN_FEATURES, out_features: int = OUT_FEATURES) -> nn.Linear:
    torch.manual_seed(8)
    linear = nn.Linear(in_features, out_features)
    with torch.no_grad():
        linear.bias.add_(1.0)  # a bias far from zero, so adding it twice or never shows
    return linear


def _row_input(in_features: int = IN_FEATURES) -> torch.Tensor:
    return torch.randn(3, 5, in_features, generator=torch.Generator().manual_seed(80))  # (b, s, in)


def _layer(in_features: int, out_features: int) -> str:
    return f"nn.Linear({in_features}, {out_features})"


POINT_TO_POINT_CALLS = ("send", "isend", "recv", "irecv")   # what `_recording` records of common.POINT_TO_POINT


class StrayPeer(ValueError):
    """Raised inside a rank, by the check (`_stopping_stray_peers`), for a send or recv whose peer is no rank of the
    group: torch would wait for it until the launch's timeout (an exchange with "the other rank", 1 - rank, on 3)."""


def _stopping_stray_peers():
    """Inside a rank: make a send or recv of the default group with a peer outside 0 .. world_size - 1 raise StrayPeer
    at once, instead of waiting for a rank that does not exist (a context manager)."""
    def make(name):
        def wrap(original):
            def call(*args, **kwargs):
                given = torch_arguments(name, args, kwargs)
                # batch_isend_irecv passes the default group and the peer as group_dst or group_src
                peers = [given.get(key) for key in ("dst", "src", "group_dst", "group_src")]
                peer = next((peer for peer in peers if peer is not None), None)
                world_size, group = dist.get_world_size(), given.get("group")
                if (group is None or group is dist.group.WORLD) and type(peer) is int and not 0 <= peer < world_size:
                    raise StrayPeer(f"dist.{name} with peer {peer}, which is no rank of the {world_size} (0 to "
                                    f"{world_size - 1}): torch would wait for it until the timeout, so the check "
                                    "stopped the call")
                return original(*args, **kwargs)
            return call
        return wrap
    return replacing_dist_calls({name: make(name) for name in POINT_TO_POINT_CALLS})


def _row_runner(rank: int, answers: tuple) -> dict[int, list[list[dict] | None]]:
    """In a rank launched with init_process_group=False: every answer on a default group of each world size of
    ROW_RUNS this rank belongs to, 2 ranks first (`common.groups_of`), for each of that size's layers in turn:
    {world size: [answer] -> [layer] -> `_row_layer`'s record}. After the first run, only the answers whose every
    output there was right on every rank, from no collective but dist.all_reduce, run (None for the others): an answer
    wrong on 2 ranks gets the feedback of 2 ranks, where on 3 it might raise, abort or hang (an all_gather of uneven
    pieces), which would end the launch first. An exchange by send/recv runs on 3: the judge of 2 ranks names what it
    did there."""
    results: dict[int, list] = {}
    for world_size in groups_of(rank, tuple(ROW_RUNS), "row_parallel_forward"):
        run = [True] * len(answers)
        if world_size != WORLD_SIZE:
            first = results.get(WORLD_SIZE)   # this rank's records of the first run (rank 2 had none)
            right = torch.tensor([first is None or all(_right_output(record["out"], *shape) and
                                                       set(record["calls"]) <= _RUN_ON_THE_SECOND_SIZE
                                                       for record, shape in zip(first[index], ROW_RUNS[WORLD_SIZE]))
                                  for index in range(len(answers))], dtype=torch.int32)
            dist.all_reduce(right, op=dist.ReduceOp.MIN)   # the check's own collective, before any answer runs here
            run = right.bool().tolist()
        results[world_size] = [[_row_layer(rank, answer, *shape) for shape in ROW_RUNS[world_size]] if runs else None
                               for answer, runs in zip(answers, run)]
    return results


# The calls of an answer right on 2 ranks that the run on 3 may tell more about (`_how_it_communicated`); any other
# call is refused by the judge of 2 ranks whatever the run on 3 shows
_RUN_ON_THE_SECOND_SIZE = frozenset({"all_reduce", *POINT_TO_POINT_CALLS})


def _right_output(got, in_features: int, out_features: int) -> bool:
    """Whether an answer's output for nn.Linear(in_features, out_features) is linear(x): shape, dtype and values (what
    the judge compares first)."""
    with torch.no_grad():
        expected = _linear(in_features, out_features)(_row_input(in_features))
    return (torch.is_tensor(got) and got.shape == expected.shape and got.dtype == expected.dtype and
            torch.allclose(got, expected, atol=1e-5, rtol=1e-5))


# aten's matrix products, as torch's dispatcher sees them after x @ w, F.linear, einsum... are broken down
_PRODUCTS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::mv", "aten::addmv", "aten::dot"})


class _ContractionWidths(TorchDispatchMode):
    """Records the width each matrix product sums over (the first operand's last dimension): a rank that multiplies
    all of a layer's input features, not only its own, shows it here, whatever it wrote. With `weight` (the layer's,
    (out, in)), also which of its columns the second operand's rows are (`_columns_of`), in `columns`; with `dtypes`,
    ("a matrix product", the dtype it worked in) for each."""

    def __init__(self, widths: list[int], weight: torch.Tensor | None = None, columns: list | None = None,
                 dtypes: list | None = None):
        super().__init__()
        self.widths, self.weight, self.columns, self.dtypes = widths, weight, columns, dtypes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name in _PRODUCTS:
            added = func._schema.name.startswith(("aten::add", "aten::badd"))
            first, second = args[added], args[added + 1]
            self.widths.append(first.shape[-1])
            if self.dtypes is not None:
                self.dtypes.append(("a matrix product", first.dtype))
            if self.weight is not None and self.columns is not None:
                self.columns.append(_columns_of(second, self.weight))
        try:
            return func(*args, **(kwargs or {}))
        except Exception as error:  # torch's own error, without the frames of this recorder's call into torch
            raise error.with_traceback(None) from None


def _columns_of(operand: torch.Tensor, weight: torch.Tensor) -> tuple[int, ...] | None:
    """The columns of `weight` (out, in) that the rows of a product's second operand are, in order (x_local @ shard.T
    multiplies by shard.T, whose rows are columns of linear.weight), or None where one is none of them."""
    if operand.dim() == 3 and operand.shape[0] == 1:   # einsum's bmm, a batch of one
        operand = operand[0]
    if operand.dim() != 2 or operand.shape[1] != weight.shape[0]:
        return None
    columns = []
    for row in operand.detach():
        found = (weight.T == row).all(dim=1).nonzero()
        if not len(found):
            return None
        columns.append(int(found[0]))
    return tuple(columns)


def _columns_text(columns: tuple[int, ...]) -> str:
    """'columns 3 to 5', 'column 4', 'columns 0, 2 and 4'."""
    if len(columns) == 1:
        return f"column {columns[0]}"
    if list(columns) == list(range(columns[0], columns[0] + len(columns))):
        return f"columns {columns[0]} to {columns[-1]}"
    return f"columns {', '.join(map(str, columns[:-1]))} and {columns[-1]}"


def _row_layer(rank: int, row_parallel_forward, in_features: int, out_features: int) -> dict:
    world_size = dist.get_world_size()
    linear = _linear(in_features, out_features)
    given = {name: parameter.detach().clone() for name, parameter in linear.named_parameters()}
    x_local = _row_input(in_features).chunk(world_size, dim=-1)[rank].clone()  # my input features
    calls, widths, columns, seen = [], [], [], []
    with torch.no_grad(), _recording(calls, seen), _stopping_stray_peers(), \
            _ContractionWidths(widths, given["weight"], columns, seen):
        out = call_case(row_parallel_forward, f"computing a row-parallel {_layer(in_features, out_features)} on rank "
                        f"{rank} of {world_size} with x_local of shape {tuple(x_local.shape)}",
                        x_local, linear, rank, world_size)
    return {"out": out.detach().clone() if torch.is_tensor(out) else out, "calls": calls, "widths": widths,
            "columns": next((found for found in columns if found is not None), None),
            "changed": _layer_changed(linear, given), "seen": seen}


def _layer_changed(linear: nn.Linear, given: dict[str, torch.Tensor]) -> str | None:
    """How the answer changed the caller's layer (`given`: its parameters before the call), or None: a parameter
    replaced by one of another shape or dtype (`linear.weight.data = <the shard>`), or written into."""
    for name, was in given.items():
        now = getattr(linear, name, None)
        if not torch.is_tensor(now) or now.shape != was.shape or now.dtype != was.dtype:
            return f"linear.{name} is now {describe(now)}, where the caller's was of shape {tuple(was.shape)}"
        if not torch.equal(now.detach(), was):
            return f"the values of linear.{name} differ from the caller's"
    return None


def run_row_answers(answers: tuple, timeout: float = 30.0,
                    name: str = "row_parallel_forward") -> list[dict[int, list[list[dict] | None]]]:
    """Run each answer on 2 ranks, then (those right there) on 3, in one launch, for each layer of that size's
    ROW_RUNS in turn; [answer] -> {world size: [rank] -> [layer] -> {"out": what it returned, "calls": the
    communicating torch.distributed calls it made, in order, "widths": the widths its matrix products summed over,
    "columns": the columns of linear.weight its first product by them used, "changed": `_layer_changed`}, or None
    where it did not run on 3}. For answers that return (one that raises or hangs ends the launch)."""
    results = run_on_ranks(_row_runner, (tuple(answers),), max(ROW_RUNS), timeout, name, explain=_explain_row,
                           timeout_hint=_row_hang_hint, init_process_group=False)
    return [{size: [results[rank][size][index] for rank in range(size)] for size in ROW_RUNS}
            for index in range(len(answers))]


def _row_hang_hint(calls: set, places: dict) -> str:
    """What to say about ranks stuck in the answer's calls (`common.timeout_message`: `places`, {stuck rank: the call
    it waits in}); a rank from 2 on is stuck in the run on 3 ranks."""
    exchanged = sorted(call for call in calls if call in POINT_TO_POINT)
    if not exchanged:
        return HANG_HINT
    second = [rank for rank in places if rank >= WORLD_SIZE]
    found = (f"which holds for this pair of ranks only: on {SECOND_SIZE} ranks (the check's second run) rank "
             f"{second[0]} waits for a peer that never answers" if second else
             "where every send needs a matching recv on its peer")
    return (f"the ranks wait in {', '.join(f'dist.{call}' for call in exchanged)}: an all-reduce by hand with "
            f"send/recv, {found}. A row-parallel layer needs no send/recv: sum the partials over every rank with one "
            "dist.all_reduce, called on every rank.")


def _second_run_note(world_size: int, judged: bool = True, explained: bool = False) -> str:
    """What a failure on the second world size adds: the first was right (`judged`; else its outputs were, the only
    thing a rank knows of it before the second run, which runs only then), so code written for its 2 ranks is the
    likely cause; where to look, unless a hint says it (`explained`)."""
    first = (f"On {WORLD_SIZE} ranks (the check's first run) every rank was right" if judged else
             f"On {WORLD_SIZE} ranks (the check's first run) every rank returned linear(x)")
    look = "" if explained else f": look for something written for {WORLD_SIZE} ranks where rank and world_size belong"
    return f"{first}; this is its second run, on {world_size} ranks{look}."


_SHAPES = re.compile(r"shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)")
_LAYER = re.compile(r"nn\.Linear\((\d+), (\d+)\) on rank (\d+) of (\d+)")


def _explain_row(failure) -> str | None:
    """A hint where the failure shows the mistake: a send or recv that raised, or torch's matmul error, which shows the
    weight the answer multiplied by, for the layer and world size the failing case names. A failure on the second
    world size starts with what the first showed."""
    named = _LAYER.search(getattr(failure.exception, "case", "") or "")
    in_features, out_features, rank, world_size = (int(group) for group in named.groups()) if named else \
        (*ROW_LAYERS[0], failure.rank, WORLD_SIZE)
    hint = (_explain_point_to_point(failure, rank, world_size) or _explain_none(failure) or
            _explain_shapes(failure, in_features, out_features, rank, world_size))
    if world_size == WORLD_SIZE:
        return hint
    return with_a_note(_second_run_note(world_size, judged=False, explained=bool(hint)), hint or "")


def _explain_point_to_point(failure, rank: int, world_size: int) -> str | None:
    """The hint for an answer whose send or recv raised: a peer that is no rank of this world size (StrayPeer, from
    the check), or torch's own error inside one."""
    head = (getattr(failure, "details", "") or "").split("The above exception was the direct cause")[0]
    inside = [frame["fn"] for frame in parse_frames(head)
              if frame["fn"] in POINT_TO_POINT and library_of(frame["file"]) == "torch"]
    if getattr(failure.exception, "kind", None) == StrayPeer.__name__:
        found = (f"which holds for this pair of ranks only (the first run's {WORLD_SIZE}): on {world_size} ranks, rank "
                 f"{rank}'s peer is no rank" if world_size != WORLD_SIZE else f"and rank {rank}'s peer is no rank")
    elif inside:
        found = f"and dist.{inside[0]} raised on rank {rank}"
    else:
        return None
    return (f"a send/recv exchange between ranks is an all-reduce by hand, {found}. A row-parallel layer needs no "
            "send/recv: sum the partials over every rank with one dist.all_reduce, then add the bias")


_RETURNS_NONE = ("dist.all_reduce works in place and returns None (a work to wait on with async_op=True), not the sum: "
                 "all-reduce the partial, then use that tensor itself, which now holds the sum")


def _explain_none(failure) -> str | None:
    """The hint for a TypeError about None raised on the learner's line that calls dist.all_reduce: its result, None,
    used as the sum (`dist.all_reduce(partial) + linear.bias`)."""
    if getattr(failure.exception, "kind", None) != "TypeError" or \
            "NoneType" not in (getattr(failure.exception, "message", "") or ""):
        return None
    head = (getattr(failure, "details", "") or "").split("The above exception was the direct cause")[0]
    frames = [frame for frame in parse_frames(head) if library_of(frame["file"]) is None]
    return _RETURNS_NONE if frames and "all_reduce(" in "\n".join(frames[-1]["text"]) else None


def _explain_shapes(failure, in_features: int, out_features: int, rank: int, world_size: int) -> str | None:
    """The hint for torch's matmul error, from the shapes it names: the weight the answer multiplied by, for
    nn.Linear(in_features, out_features) on `rank` of `world_size`."""
    shapes = _SHAPES.search(getattr(failure.exception, "message", "") or "")
    if not shapes:
        return None
    layer = (in_features, out_features)
    weight = (int(shapes.group(3)), int(shapes.group(4)))  # the right-hand matrix of x_local @ weight
    local_in, local_out = in_features // world_size, out_features // world_size
    if int(shapes.group(2)) == local_in // world_size:    # the left-hand matrix: the input, split once more
        return (f"the input you multiplied has {local_in // world_size} features, but x_local already is this rank's "
                f"part of the input ({local_in} of the {in_features} features): you split it again. Multiply "
                "x_local as it is by the matching columns of linear.weight")
    if weight in ((in_features, local_out), (local_out, in_features)):
        return (f"the weight you multiplied by is {weight[0]}x{weight[1]}: {local_out} of the {out_features} ROWS of "
                f"linear.weight (out_features), a column-parallel split. x_local holds {local_in} of the "
                f"{in_features} input features, and nn.Linear stores (out_features, in_features): take the matching "
                "COLUMNS of linear.weight itself (not of its transpose), the chunk along dim=1")
    if weight == (out_features, local_in):
        return (f"the shard is right, {out_features}x{local_in} (out_features x this rank's in_features), but "
                "x_local @ shard multiplies by it untransposed: nn.Linear computes x @ weight.T")
    if weight in ((in_features, out_features), (out_features, in_features)):
        return (f"the weight you multiplied by is the whole {out_features}x{in_features} linear.weight, but x_local "
                f"holds only {local_in} of its {in_features} input features: cut out the rank's part of the weight "
                "that meets those features")
    if int(shapes.group(2)) == local_in and weight[1] == in_features and weight[0] < local_in:
        return (f"the matrix you multiplied by has {in_features} columns, all of linear.weight's input features, and "
                f"{weight[0]} rows: a block of linear.weight's ROWS (its out_features), used as if linear.weight were "
                f"(in_features, out_features); on this rank the block runs past its {out_features} rows. nn.Linear "
                "stores (out_features, in_features) and computes x @ weight.T: take this rank's block of COLUMNS "
                "(in_features / world_size of them, along dim=1) and multiply x_local by its transpose")
    if int(shapes.group(2)) != local_in or weight[1] != out_features:
        return None
    # x_local as it is, times a shard of the wrong width
    if weight[0] == local_out and local_out != local_in:
        return (f"x_local has {local_in} features, but the shard of linear.weight you multiplied it by has "
                f"{weight[0]} columns, out_features / world_size ({out_features} / {world_size}): a row-parallel layer "
                "splits linear.weight's columns, the input features, so each rank's shard is in_features / "
                f"world_size = {local_in} columns wide")
    if world_size == WORLD_SIZE and layer != ROW_LAYERS[0]:   # after a first layer that ran
        first = ROW_LAYERS[0]
        width = f", the width for {_layer(*first)}, the check's first layer" if weight[0] == first[0] // WORLD_SIZE \
            else ""
        return (f"x_local has {local_in} features here, but the shard of linear.weight you multiplied it by has "
                f"{weight[0]} columns{width}. The shard's columns must follow from linear.weight's shape and "
                "world_size (in_features / world_size of them per rank, this rank's block), not from numbers that "
                "fit one layer")
    if world_size != WORLD_SIZE:
        rest = (f": as many as all the columns after rank 0's ({local_in} to {in_features - 1}), the other half of "
                f"linear.weight on {WORLD_SIZE} ranks but {world_size - 1} ranks' shards on {world_size}"
                if weight[0] == in_features - local_in else "")
        return (f"on rank {rank} of {world_size}, x_local has {local_in} features, but the shard of linear.weight you "
                f"multiplied it by has {weight[0]} columns{rest}. On {world_size} ranks each rank's shard is "
                f"{in_features} / {world_size} = {local_in} columns, rank {rank}'s columns {rank * local_in} to "
                f"{(rank + 1) * local_in - 1}: take the shard's width and place from linear.weight's shape, rank and "
                "world_size")
    return None


# Element-wise reductions an all_reduce with another op than SUM gives: (dist.ReduceOp's name, what it computes)
_OTHER_OPS = (("MAX", lambda values: values.amax(0)), ("MIN", lambda values: values.amin(0)),
              ("PRODUCT", lambda values: values.prod(0)))


def _reduced_with(got: torch.Tensor, own: torch.Tensor, parts: list[torch.Tensor], added=0) -> str | None:
    """The name of the op of _OTHER_OPS whose element-wise reduction of `parts`, plus `added`, `got` equals, unless
    that is also this rank's own part (`own`) plus `added`: a rank whose part is the largest everywhere gets that from
    MAX and from no reduction alike."""
    stacked = torch.stack(parts)
    for name, reduce in _OTHER_OPS:
        value = reduce(stacked) + added
        if torch.allclose(got, value, atol=1e-5, rtol=1e-5) and not torch.allclose(value, own + added, atol=1e-5,
                                                                                     rtol=1e-5):
            return name
    return None


def _row_hint(got, rank, world_size, expected, partials, bias, calls: list, columns: list, width: int,
              seen: list = (), right_elsewhere: list = ()) -> str:
    """The likely mistake behind a wrong output on `rank`: a result right to a lower precision only (`seen`: (what,
    dtype) of the products and collectives it ran, `_lost_precision`), a known wrong sum, or (`columns`: [rank] -> the
    columns of linear.weight its first product used, `_columns_of`; `width`: a rank's input features) a rank that
    multiplied by other columns than its own. `right_elsewhere`: the ranks whose output is right (a sum without the
    bias on a rank, beside a right one, is a bias added on some ranks only)."""
    lost = _lost_precision(got, expected, seen)
    if lost:
        return (f"the output is linear(x) to a few digits only: {lost}; the result was turned back into "
                f"{expected.dtype}. Compute the partial and its sum in x_local's dtype, {expected.dtype}, with no "
                "conversion")
    total = sum(partials)
    own = ("dist.all_reduce ran, but its sum never reached your output: it sums in place, into the tensor you pass "
           "(not into a copy of it, and with async_op=True only once you wait on the work it returns). All-reduce the "
           "partial itself, then add the bias" if "all_reduce" in calls else
           "the partial outputs must be summed over the ranks with dist.all_reduce before adding the bias")
    candidates = [
        (expected + (world_size - 1) * bias,
         f"the bias is in the sum {world_size} times: every rank added it before the all-reduce. Add the bias "
         "once, after dist.all_reduce"),
        (total, f"the bias is missing here, but rank {right_elsewhere[0]}'s output has it: after dist.all_reduce "
                "every rank holds the summed partials and returns the full output, so every rank adds the bias to "
                "the sum (once, after the all-reduce), not one rank only" if right_elsewhere else
                "the bias is missing: the row-parallel layer keeps the whole bias and adds it once, after the "
                "all-reduce"),
        (partials[rank] + bias, f"this is rank {rank}'s own partial sum plus the bias: {own}"),
        (partials[rank], f"this is rank {rank}'s own partial sum: dist.all_reduce it (SUM over ranks), then add "
                         "the bias"),
        (total / world_size + bias, "this is the MEAN of the partial sums (a division by the world size, or "
                                    "ReduceOp.AVG): the full output is their SUM, dist.all_reduce's default op, with "
                                    "no division"),
    ]
    matched = next((index for index, (value, _) in enumerate(candidates)
                    if torch.allclose(got, value, atol=1e-5, rtol=1e-5)), None)
    if "reduce" in calls and "all_reduce" not in calls and matched in (None, 2, 3):   # not a sum, or its own partial
        return ("dist.reduce ran: it delivers the sum to one rank, dst, only, and leaves the other ranks' tensors "
                "undefined (their own partial, or a partial sum). Every rank returns the full output: "
                "dist.all_reduce the partial, then add the bias")
    if matched is not None:
        return candidates[matched][1]
    reduced = _reduced_with(got, partials[rank], partials, added=bias)
    if reduced:
        return (f"this is the element-wise {reduced} of the partial sums, plus the bias: the full output is their "
                "SUM, dist.all_reduce's default op (dist.ReduceOp.SUM)")
    for other, used in enumerate(columns):
        own = tuple(range(other * width, (other + 1) * width))
        if used is not None and used != own:
            return (f"rank {other} multiplied its x_local by {_columns_text(used)} of linear.weight, but its "
                    f"{width} input features are {_columns_text(own)}: each rank's shard is in_features / world_size = "
                    f"{width} columns, from column rank * {width}. Take the shard's place and width from rank, "
                    "world_size and linear.weight's shape")
    asynchronous = [where for where, _ in seen if where.endswith("async_op=True")]
    if asynchronous:
        return (f"{asynchronous[0]} returned at once, and its sum is in the tensor only once the work it returned has "
                "finished: call the work's .wait() before using the tensor")
    return ("expected linear(x) computed from the shards: x_local @ (my columns of linear.weight).T, all-reduced "
            "(SUM) over the ranks, plus linear.bias once")


def check_row_parallel_forward(row_parallel_forward, timeout: float = 30.0) -> None:
    """Check `row_parallel_forward(x_local, linear, rank, world_size)`: the output of `linear` on every rank.

    Each of 2 ranks gets the same `nn.Linear(8, 6)` and its own half of the input features
    (`x_local`, shape (3, 5, 4)); every rank must return the full `linear(x)`, shape (3, 5, 6).
    Then the same for `nn.Linear(12, 10)` (`x_local` of shape (3, 5, 6)), where a shard cut
    with numbers that fit the first layer is wrong. Then, in the same launch, each of 3 ranks
    does the same for `nn.Linear(9, 7)` (`x_local` of shape (3, 5, 3)), where a shard written
    as a half of the weight, or partial outputs swapped with "the other rank", fail; that run
    is judged once the 2 ranks' is right. On each, the answer must call dist.all_reduce and
    nothing else (no send/recv) and leave the caller's layer as it was. A split into a number
    of pieces, or a division of the features by a number, written in the code (`.chunk(2, ...)`,
    `in_features // 2`) is refused before any rank starts.

    Introduced in notebooks/08-tensor-parallelism.ipynb.
    """
    ensure_written(row_parallel_forward)
    name = getattr(row_parallel_forward, "__name__", "row_parallel_forward")
    refuse_written_split(row_parallel_forward, name, "world_size, the argument (one piece per rank)")
    refuse_written_divisor(row_parallel_forward, name, "the input features", "world_size, the argument",
                           divided=("features", "weight"))
    passed(judge_row(name, run_row_answers((row_parallel_forward,), timeout, name)[0],
                     _returns_a_call_result(row_parallel_forward, "all_reduce")))


def judge_row(name: str, results: dict[int, list[list[dict]]], returns_call: bool = False) -> str:
    """Feedback for one row_parallel_forward answer's results ({world size: [rank] -> [layer] -> record},
    `run_row_answers`), 2 ranks first, then 3 (saying that 2 were right): for each, the outputs of its first layer,
    then the calls it made (a right output from gathered inputs is not row parallelism), the caller's layer, the
    widths its products summed over, then the outputs of its further layers; raise CheckFailed, or return the ✓
    text. `returns_call`: `_returns_a_call_result` of the answer, evidence for an output of None."""
    judge_in_order([(size, results[size]) for size in ROW_RUNS],
                   lambda size, records: _judge_row_size(name, size, records, results, returns_call),
                   _second_run_note)
    runs = [f"{' and '.join(_layer(*shape) for shape in layers)} on {size} ranks" for size, layers in ROW_RUNS.items()]
    return (f"{name}: every rank returns linear(x) from its share of the input features and one all-reduce, for "
            f"{', then '.join(runs)}")


def _wrong_ranks(world_size: int, records: list) -> list[int]:
    """The ranks whose output for the first layer of ROW_RUNS[world_size] is not linear(x) (`records`: [rank] ->
    [layer] -> record, or None where the answer did not run there)."""
    return [rank for rank, layers in enumerate(records)
            if layers is not None and not _right_output(layers[0]["out"], *ROW_RUNS[world_size][0])]


def _judge_row_size(name: str, world_size: int, records: list[list[dict]], everything: dict,
                    returns_call: bool = False) -> None:
    """CheckFailed at the first thing one world size's records ([rank] -> [layer] -> `_row_layer`'s record) get
    wrong; `everything`: every world size's, for what a later run showed of the answer's send/recv; `returns_call`:
    whether the answer returns what a dist call returned (`_returns_a_call_result`)."""
    layers = ROW_RUNS[world_size]
    in_features, out_features = layers[0]
    linear, x = _linear(in_features, out_features), _row_input(in_features)
    first_run = world_size == WORLD_SIZE
    # the first layer on the first run is the one the exercise's text describes: its messages name no layer
    layer = "" if first_run else f" of {_layer(in_features, out_features)} on {world_size} ranks"
    for_layer = layer.replace(" of ", " for ", 1)
    with torch.no_grad():
        expected = linear(x)
        partials = [xs @ ws.T for xs, ws in zip(x.chunk(world_size, dim=-1), linear.weight.chunk(world_size, dim=1))]
        bias = linear.bias.detach()
    for rank in range(world_size):
        got = records[rank][0]["out"]
        if not torch.is_tensor(got) or got.shape != expected.shape:
            none = f"\nHint: {_RETURNS_NONE}." if got is None and returns_call else ""
            raise CheckFailed(f"rank {rank}: {name} returned {describe(got)}{for_layer}; expected the full output, a "
                              f"tensor of shape {tuple(expected.shape)} (every rank returns all {out_features} output "
                              f"features).{none}")
        _judge_row_dtype(rank, name, got, expected, for_layer)
        if torch.allclose(got, expected, atol=1e-5, rtol=1e-5):
            continue
        right_elsewhere = [other for other in range(world_size) if other != rank and
                           _right_output(records[other][0]["out"], in_features, out_features)]
        hint = _row_hint(got, rank, world_size, expected, partials, bias, records[rank][0]["calls"],
                         [per_rank[0].get("columns") for per_rank in records], in_features // world_size,
                         records[rank][0].get("seen", []), right_elsewhere)
        raise CheckFailed(f"{_mismatch(rank, 'output', got, expected, layer)}.\nHint: {hint}.")
    for rank in range(world_size):
        calls = records[rank][0]["calls"]
        # none recorded with a right output: it communicated by other means (functional collectives), no mistake
        if calls not in ([], ["all_reduce"]):
            how = _how_it_communicated(calls, everything) if first_run else ""
            raise CheckFailed(f"rank {rank}: the output{layer} is right, but {name} called "
                              f"{', '.join(f'dist.{call}' for call in calls)}; a row-parallel "
                              "layer computes a partial output from this rank's input features and sums the partials "
                              f"with one dist.all_reduce.{how}\nHint: multiply x_local by this rank's columns "
                              "of linear.weight, all_reduce that partial once, then add the bias.")
    for rank in range(world_size):
        changed = records[rank][0].get("changed")
        if changed:
            raise CheckFailed(f"rank {rank}: the output{layer} is right, but {name} changed the caller's layer: "
                              f"{changed}. The caller still needs its whole nn.Linear (and a second call would cut "
                              "a shard out of the shard).\nHint: take the shard into a tensor of your own and leave "
                              "linear.weight (and its .data) as it was given.")
    for rank in range(world_size):
        if in_features in records[rank][0].get("widths", []):
            local = in_features // world_size
            raise CheckFailed(f"rank {rank}: the output is right, but {name} computed a matrix product that sums over "
                              f"all {in_features} input features of {_layer(in_features, out_features)}"
                              f"{'' if first_run else f' on {world_size} ranks'}, not over this rank's "
                              f"{local}: work a rank of a row-parallel layer does not do, since it holds only its "
                              "columns of the weight (an x_local padded with zeros to the full width, times the whole "
                              "linear.weight, is such a product).\nHint: multiply x_local as it is "
                              f"({local} features) by this rank's columns of linear.weight, then all_reduce.")
    for index, (in_features, out_features) in enumerate(layers[1:], start=1):
        _judge_row_layer(name, world_size, in_features, out_features, [per_rank[index]["out"] for per_rank in records])


def _how_it_communicated(calls: list[str], everything: dict) -> str:
    """What the first run's calls (other than one all_reduce, with a right output) did, with what the second run
    showed of an exchange by send/recv."""
    if any("gather" in call for call in calls):
        return (" It gathered what the other ranks hold (all_gather), so every rank did the whole layer's work or "
                "moved every partial output.")
    if not set(POINT_TO_POINT_CALLS) & set(calls):
        return ""
    wrong = _wrong_ranks(SECOND_SIZE, everything.get(SECOND_SIZE, []))
    if wrong:
        return (" It exchanged the partial outputs with send/recv and summed them itself: an all-reduce by hand, "
                f"which holds for this pair of ranks only: on {SECOND_SIZE} ranks (the check's second run) rank "
                f"{wrong[0]}'s output is wrong.")
    if None in everything.get(SECOND_SIZE, [None]):
        return " It exchanged the partial outputs with send/recv and summed them itself: an all-reduce by hand."
    return (" It exchanged the partial outputs with send/recv and summed them itself: an all-reduce by hand (its "
            f"outputs are right on {SECOND_SIZE} ranks too), where the layer's one collective is dist.all_reduce.")


def _judge_row_dtype(rank: int, name: str, got: torch.Tensor, expected: torch.Tensor, layer: str) -> None:
    """Refuse an output of another dtype than linear(x)'s (before comparing values: allclose refuses mixed dtypes)."""
    if got.dtype != expected.dtype:
        raise CheckFailed(f"rank {rank}: {name} returned {describe(got)}{layer}; expected {expected.dtype}, the "
                          f"dtype of x_local and linear.weight.\nHint: nn.Linear's output keeps its input's dtype: "
                          "compute the partial and the sum in it, with no conversion (.double(), .half(), .to()).")


def _judge_row_layer(name: str, world_size: int, in_features: int, out_features: int, outputs: list) -> None:
    """Feedback for the outputs (one per rank) of an answer right for the first layer of ROW_RUNS[world_size], for
    another."""
    linear, x = _linear(in_features, out_features), _row_input(in_features)
    first = _layer(*ROW_RUNS[world_size][0])
    with torch.no_grad():
        expected = linear(x)
        pieces = x.chunk(world_size, dim=-1)
        # each rank's columns taken from where they start in the first layer (rank * its width), this layer's width
        start = ROW_RUNS[world_size][0][0] // world_size
        moved = sum(piece @ linear.weight[:, r * start:r * start + piece.shape[-1]].T for r, piece in enumerate(pieces))
        moved = moved + linear.bias
    layer = f"{_layer(in_features, out_features)} (x_local of shape {tuple(pieces[0].shape)})"
    for rank, got in enumerate(outputs):
        if not torch.is_tensor(got) or got.shape != expected.shape:
            raise CheckFailed(f"rank {rank}: {name} returned {describe(got)} for {layer}; expected a tensor of shape "
                              f"{tuple(expected.shape)}; right for {first}.\nHint: a size in it fits {first} only: "
                              "take every size from linear.weight, x_local and world_size.")
        _judge_row_dtype(rank, name, got, expected, f" for {layer}")
        if torch.allclose(got, expected, atol=1e-5, rtol=1e-5):
            continue
        if torch.allclose(got, moved, atol=1e-5, rtol=1e-5):
            last, width = world_size - 1, pieces[-1].shape[-1]
            hint = (f"rank {last}'s shard starts at column {last * start} of linear.weight, where it does for {first}; "
                    f"here its {width} features are columns {last * width} to {in_features - 1}: the shard's place, "
                    "like its width, follows from linear.weight's shape and world_size")
        else:
            hint = (f"something in it fits {first} only: take the shard's columns from linear.weight's shape and "
                    "world_size")
        raise CheckFailed(f"{_mismatch(rank, 'output', got, expected, f' of {layer}')}; right for {first}.\n"
                          f"Hint: {hint}.")


# --- CopyToModelParallelRegion (Megatron's f) ----------------------------------------------

def _mlp() -> nn.Sequential:
    torch.manual_seed(9)
    return nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 6))


def _f_input() -> torch.Tensor:
    return torch.randn(4, 6, generator=torch.Generator().manual_seed(90))


def _loss_weights() -> torch.Tensor:
    return torch.randn(4, 6, generator=torch.Generator().manual_seed(91))


def _shard_loss(x_in: torch.Tensor, rank: int, world_size: int, reduce) -> torch.Tensor:
    """The loss of the Megatron MLP computed by `rank` from its shards; `reduce` sums the partial outputs."""
    mlp = _mlp()
    w1, b1 = mlp[0].weight.chunk(world_size, dim=0)[rank], mlp[0].bias.chunk(world_size, dim=0)[rank]
    w2 = mlp[2].weight.chunk(world_size, dim=1)[rank]
    partial = F.gelu(x_in @ w1.T + b1) @ w2.T
    return ((reduce(partial) + mlp[2].bias) * _loss_weights()).sum()


COMMUNICATION = (*FORBIDDEN, "send", "isend", "recv", "irecv", "barrier")  # every torch.distributed call that talks


def _recording(names: list, seen: list | None = None):
    """Inside a rank: append the name of every communicating torch.distributed call to `names`, and to `seen`
    ("dist.<name>" or "dist.<name> with async_op=True", the dtype of the tensor it was given) (a context manager)."""
    inside = []  # only the outermost call: torch's own functions call each other (recv calls irecv)

    def make(name):
        def wrap(original):
            def call(*args, **kwargs):
                if not inside:
                    names.append(name)
                    given = torch_arguments(name, args, kwargs)
                    tensor = given.get("tensor")
                    if seen is not None and torch.is_tensor(tensor):
                        seen.append((f"dist.{name}" + (" with async_op=True" if given.get("async_op") else ""),
                                     tensor.dtype))
                inside.append(name)
                try:
                    return original(*args, **kwargs)
                finally:
                    inside.pop()
            return call
        return wrap
    return replacing_dist_calls({name: make(name) for name in COMMUNICATION})


# The package's own f (an answer that calls it is not checked)
F_ANSWERS = (CopyToModelParallelRegion, copy_to_model_parallel_region)


def _f_runner(rank: int, answers: tuple) -> list[dict]:
    return [_f_one(rank, function_class) for function_class in answers]


def run_f_answers(answers: tuple, timeout: float = 30.0, name: str = "CopyToModelParallelRegion") -> list[list[dict]]:
    """Run each class once on the same 2 ranks (one launch); [answer][rank] -> its forward, dL/dx and calls."""
    return run_answers_on_ranks(_f_runner, answers, WORLD_SIZE, timeout, name, timeout_hint=HANG_HINT)


def _f_one(rank: int, function_class) -> dict:
    world_size = dist.get_world_size()
    x = _f_input().requires_grad_()
    what = f"on rank {rank}"
    forward_calls: list[str] = []
    watched = (CopyToModelParallelRegion.forward, CopyToModelParallelRegion.backward, copy_to_model_parallel_region)
    y = None
    with _recording(forward_calls), watching_calls(watched) as called:
        y = call_case(function_class.apply, f"calling {function_class.__name__}.apply(x) (forward) {what}", x)
    if called:
        return {"called": called}
    if not torch.is_tensor(y) or y.shape != x.shape or y.dtype != x.dtype:   # the judge says what forward returned
        return {"forward": y.detach().clone() if torch.is_tensor(y) else y, "x_grad": None, "calls": forward_calls}
    forward_value = y.detach().clone()
    loss = _shard_loss(y, rank, world_size, reduce_from_model_parallel_region)
    incoming: list[tuple] = []   # the gradient backward is given, and a copy of it: changed in place if they differ
    if y.requires_grad:
        y.register_hook(lambda grad: incoming.append((grad, grad.clone())))
    backward_calls: list[str] = []   # the check's own g communicates in forward only: these are the answer's
    seen: list[tuple] = []           # (the call, the dtype it worked in) for each of them
    with _recording(backward_calls, seen), watching_calls(watched) as called:
        call_case(loss.backward, f"running backward through {function_class.__name__} {what}")
    if called:
        return {"called": called}
    return {"forward": forward_value, "x_grad": None if x.grad is None else x.grad.clone(), "calls": forward_calls,
            "backward_calls": backward_calls, "seen": seen,
            "grad_changed": any(not torch.equal(grad, before) for grad, before in incoming)}


def _reference_grads() -> tuple[torch.Tensor, list[torch.Tensor]]:
    """dL/dx of the whole MLP, and each rank's part of it (through its own columns only)."""
    x = _f_input().requires_grad_()
    mlp = _mlp()
    ((mlp(x)) * _loss_weights()).sum().backward()
    parts = []
    for rank in range(WORLD_SIZE):
        x_rank = _f_input().requires_grad_()
        # identity "reduce": the gradient reaching the partial is the full dL/dz, as after g
        _shard_loss(x_rank, rank, WORLD_SIZE, lambda partial: partial).backward()
        parts.append(x_rank.grad)
    return x.grad, parts


def _close_to(got: torch.Tensor, want: torch.Tensor) -> bool:
    return got.shape == want.shape and torch.allclose(got, want, atol=1e-6)


def check_copy_to_model_parallel_region(function_class, timeout: float = 30.0) -> None:
    """Check Megatron's f: a torch.autograd.Function that is the identity forward and all-reduces backward.

    On each of 2 ranks the check computes `y = function_class.apply(x)`, feeds y to the rank's
    column-parallel half of an MLP, sums the row-parallel partial outputs with its own g, and
    runs backward. Forward must return x unchanged; `x.grad` must then be the gradient of the
    whole MLP on every rank.

    Introduced in notebooks/08-tensor-parallelism.ipynb.
    """
    name = getattr(function_class, "__name__", "CopyToModelParallelRegion")
    if not (isinstance(function_class, type) and issubclass(function_class, torch.autograd.Function)):
        raise CheckFailed(f"{name} is {describe(function_class)}; pass the class itself, a subclass of "
                          "torch.autograd.Function (not its .apply, not an instance).")
    reference = answer_of(function_class, F_ANSWERS)
    if reference:
        raise package_answer_used(name, [reference], "is (or subclasses)")
    ensure_written(function_class.forward, name)   # the exercise's stub raises in forward: refused before ranks start
    passed(judge_f(name, run_f_answers((function_class,), timeout, name)[0], returns_a_call_result(function_class)))


def returns_a_call_result(function_class) -> bool:
    """Whether the class's backward returns what a dist call returned (`return dist.all_reduce(g)`, or a name bound
    to such a call): evidence for a gradient of None, since dist.all_reduce works in place and returns None."""
    return _returns_a_call_result(getattr(function_class, "backward", None))


def _returns_a_call_result(function, call: str | None = None) -> bool:
    """Whether `function` returns what a dist call returned (`return dist.all_reduce(g)`, or a name bound to such a
    call); `call`: only a call of that function of dist counts."""
    tree = source_tree(function)
    if tree is None:
        return False

    def is_dist_call(node) -> bool:
        return (isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[0] == "dist" and
                (call is None or ast.unparse(node.func).split(".")[-1] == call))

    bound = {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and is_dist_call(node.value)
             for target in node.targets if isinstance(target, ast.Name)}
    return any(isinstance(node, ast.Return) and node.value is not None and
               (is_dist_call(node.value) or (isinstance(node.value, ast.Name) and node.value.id in bound))
               for node in ast.walk(tree))


def _judge_backward_calls(rank: int, name: str, calls: list[str]) -> None:
    """Refuse a right dL/dx whose backward did not sum the gradient with one dist.all_reduce (`calls`: the
    communicating torch.distributed calls backward made on `rank`, in order). None recorded with a right dL/dx is
    communication by other means than these functions (functional collectives): no evidence of a mistake."""
    if calls in ([], ["all_reduce"]):
        return
    made = ", ".join(f"{calls.count(call)} dist.{call}" for call in dict.fromkeys(calls))
    gathered = (" It gathered every rank's gradient (all_gather) and summed them itself: each rank received "
                f"{WORLD_SIZE} gradients where one all-reduce delivers their sum." if "all_gather" in calls else
                " It exchanged the gradients with send/recv and summed them itself: an all-reduce by hand, which "
                "holds for this pair of ranks only." if {"send", "isend", "recv", "irecv"} & set(calls) else "")
    raise CheckFailed(f"rank {rank}: dL/dx is right, but {name}'s backward made {made}; f's backward sums the "
                      f"gradient over the ranks with one dist.all_reduce.{gathered}\nHint: dist.all_reduce a copy of "
                      "the gradient (SUM) in backward and return it.")


def _judge_incoming_gradient(rank: int, name: str, result: dict) -> None:
    """Refuse a right dL/dx whose backward wrote into the gradient autograd passed it: that tensor is not backward's
    to change (autograd may hand the same one to another branch of the graph, which would then see the sum)."""
    if not result.get("grad_changed"):
        return
    reduced = "all_reduce" in result.get("backward_calls", [])
    cause = ("dist.all_reduce changed the incoming gradient in place" if reduced else
             "backward changed the incoming gradient (the tensor autograd passed it) in place")
    raise CheckFailed(f"rank {rank}: dL/dx is right, but {cause}: autograd may pass that same tensor to another "
                      "branch of the graph, which would then get the sum as well.\nHint: "
                      + ("all-reduce a tensor you own, a copy of the gradient (.clone()), and return it." if reduced
                         else "work on a tensor you own, a copy of the gradient (.clone()), and return it."))


def judge_f(name: str, results: list[dict], returns_call: bool = False) -> str:
    """Feedback for one f answer's per-rank results (`run_f_answers`): raise CheckFailed, or return the ✓ text.
    `returns_call`: `returns_a_call_result` of the answer."""
    x = _f_input()
    expected, parts = _reference_grads()
    called = next((result["called"] for result in results if "called" in result), None)
    if called:
        raise package_answer_used(name, called)
    for rank in range(WORLD_SIZE):
        result = results[rank]
        forward = result["forward"]
        if not torch.is_tensor(forward) or forward.shape != x.shape:
            scattered = torch.is_tensor(forward) and any(
                _close_to(forward, x.chunk(WORLD_SIZE, dim=dim)[rank]) for dim in range(x.dim()))
            hint = ("\nHint: this is the rank's chunk of x: f does not split its input (that is Megatron's scatter). "
                    "Every rank needs the whole x: its column-parallel layer splits the WEIGHTS." if scattered else "")
            raise CheckFailed(f"rank {rank}: forward returned {describe(forward)}; expected x itself, a tensor of "
                              f"shape {tuple(x.shape)}.{hint}")
        if forward.dtype != x.dtype:
            raise CheckFailed(f"rank {rank}: forward returned {describe(forward)}; expected x itself, of dtype "
                              f"{x.dtype}.\nHint: f is the identity in forward: return x unchanged, with no conversion "
                              "(.to(), .half(), .bfloat16(), .double()).")
        if not torch.allclose(forward, x, atol=1e-6):
            if torch.allclose(forward, WORLD_SIZE * x, atol=1e-5):
                hint = ("forward returned the SUM of x over the ranks: f does not communicate in forward (every rank "
                        "already holds the whole input; that is g's forward). Return x unchanged and all-reduce in "
                        "backward")
            else:
                hint = "f is the identity in forward: return x unchanged"
            raise CheckFailed(f"{_mismatch(rank, 'forward output', forward, x, atol=1e-6)} (expected x unchanged).\n"
                              f"Hint: {hint}.")
        if result["calls"]:
            made = ", ".join(f"{result['calls'].count(call)} dist.{call}" for call in dict.fromkeys(result["calls"]))
            raise CheckFailed(f"rank {rank}: forward made {made} call(s). The result is right only because x is the "
                              "same on every rank: f does not communicate in forward.\nHint: every rank already "
                              "holds the whole input; the only collective of f is the all-reduce in backward.")
        got = result["x_grad"]
        if got is None:
            raise CheckFailed(f"rank {rank}: x.grad is None after backward: backward must return the gradient for x"
                              + (" (dist.all_reduce works in place and returns None: return the tensor you reduced, "
                                 "not the call's result)." if returns_call else "."))
        if torch.allclose(got, expected, atol=1e-5, rtol=1e-5):
            _judge_incoming_gradient(rank, name, result)
            _judge_backward_calls(rank, name, result.get("backward_calls", []))
            continue
        lost = _lost_precision(got, expected, result.get("seen", []))
        asynchronous = [where for where, _ in result.get("seen", []) if where.endswith("async_op=True")]
        reduced = _reduced_with(got, parts[rank], parts)
        if lost:
            hint = (f"dL/dx is the sum over the ranks to a few digits only: {lost}; autograd turned the gradient "
                    f"back into x's dtype, {expected.dtype}. Keep the gradient in the dtype it comes in: all-reduce a "
                    "copy of it, grad.clone(), with no conversion")
        elif reduced:
            hint = (f"this is the element-wise {reduced} of the ranks' parts of dL/dx: the full gradient is their SUM, "
                    "dist.all_reduce's default op (dist.ReduceOp.SUM)")
        elif torch.allclose(got, parts[rank], atol=1e-5, rtol=1e-5) and \
                "all_reduce" in result.get("backward_calls", []):
            hint = (f"this is rank {rank}'s own part of dL/dx: dist.all_reduce ran in backward, but its sum never "
                    "reached the gradient you returned: it sums in place, into the tensor you pass (a clone or a new "
                    "tensor is not the one returned), and with async_op=True only once its work's .wait() returned. "
                    "Return the tensor you all-reduced")
        elif torch.allclose(got, parts[rank], atol=1e-5, rtol=1e-5):
            hint = (f"this is rank {rank}'s own part of dL/dx, through its own columns only: backward must "
                    "dist.all_reduce the gradient (SUM over ranks) and return it")
        elif torch.allclose(got, expected / WORLD_SIZE, atol=1e-5, rtol=1e-5):
            hint = ("this is the MEAN of the ranks' parts: the full gradient is their SUM (the default "
                    "dist.ReduceOp.SUM); do not divide by the world size")
        elif torch.allclose(got, expected * WORLD_SIZE, atol=1e-5, rtol=1e-5):
            hint = f"this is {WORLD_SIZE} times the gradient: all-reduce once, in backward only"
        elif asynchronous:
            hint = (f"{asynchronous[0]} returned at once, and its sum is in the tensor only once the work it returned "
                    "has finished: call the work's .wait() before returning the tensor")
        elif "all_reduce" in result.get("backward_calls", []):
            hint = ("dist.all_reduce ran in backward, but dL/dx is not the sum of the ranks' gradients: backward "
                    "returns a copy of grad, all-reduced (SUM), with nothing else done to it")
        else:
            hint = "backward must return the gradient summed over the ranks: dist.all_reduce(grad), then return it"
        raise CheckFailed(f"{_mismatch(rank, 'dL/dx', got, expected)}.\nHint: {hint}.")
    return f"{name}: identity in forward, all-reduce in backward; dL/dx equals the unsplit MLP's on every rank"

"""Checks for the exercises of notebooks/10-2d-mesh.ipynb: the 2-D device mesh.

    ddp_lab.checks.lesson10.check_dp_tp_groups(dp_tp_groups)
    ddp_lab.checks.lesson10.check_average_gradients(average_gradients)

The first answer runs in the notebook's process on meshes whose sides differ, against
DeviceMesh's layout `arange(dp * tp).reshape(dp, tp)` (there a mix-up of dp and tp shows),
then on 4 gloo ranks against real meshes (`init_device_mesh("cpu", shape,
mesh_dim_names=("dp", "tp"))` for the shapes 4 ranks can make). The second trains one step
of a tensor-parallel model on a (dp=3, tp=2) mesh of 6 ranks (so dividing by the dp size,
the tp size and the world size give three different answers), with the collectives the
answer runs counted per mesh dimension and what its all-reduces were given (a gradient, a copy or
flat buffer of one, a parameter's weights, a work never waited for or one whose tensor was changed
before it was), and compares the gradients with one process. An answer that calls the package's
`RankLayout` for its groups is refused.

Introduced in notebooks/10-2d-mesh.ipynb.
"""

from __future__ import annotations

import re
from collections import Counter

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (answer_raised, call_case, describe, division_into_a_new_tensor, ensure_written,
                                   first_mismatch, held_in, library_of, package_answer_used, parse_frames,
                                   refuse_written_divisor, right_by_luck, run_answers_on_ranks, run_on_ranks,
                                   watching_calls)
from ddp_lab.course.mesh import mesh_groups
from ddp_lab.course.rank_layout import RankLayout
from ddp_lab.instruments.collectives import call_arguments, replacing_dist_calls, watching_requests
from ddp_lab.instruments.mesh_traffic import count_mesh_traffic
from ddp_lab.torch_compat.dtensor import dtensor_api, full_tensor

WORLD_SIZE = 4
# The package's own answer to the groups exercise (an answer that calls it is not checked)
GROUPS_ANSWERS = (RankLayout.group_of, RankLayout.groups, RankLayout.group)
REAL_SHAPES = ((2, 2), (4, 1), (1, 4))          # every (dp, tp) mesh 4 ranks can form
MORE_SHAPES = ((2, 3), (3, 2), (2, 4), (4, 2))  # not square: rows and columns differ in length


def _formula(rank: int, dp_size: int, tp_size: int) -> dict[str, list[int]]:
    """DeviceMesh's layout arange(dp*tp).reshape(dp, tp): tp = my row, dp = my column."""
    row, col = divmod(rank, tp_size)
    return {"dp": [i * tp_size + col for i in range(dp_size)], "tp": [row * tp_size + j for j in range(tp_size)]}


def _mesh_runner(rank: int, dp_tp_groups) -> list:
    init_device_mesh = dtensor_api().init_device_mesh
    out = []
    for dp_size, tp_size in REAL_SHAPES:
        mesh = init_device_mesh("cpu", (dp_size, tp_size), mesh_dim_names=("dp", "tp"))
        got = call_case(dp_tp_groups, f"computing the groups of rank {rank} in a (dp={dp_size}, tp={tp_size}) mesh",
                        rank, dp_size, tp_size)
        out.append(((dp_size, tp_size), mesh_groups(mesh), got))
    return out


def _normalise(got):
    """The answer as {"dp": sorted ints, "tp": sorted ints}, or None if it is not such a dict."""
    if not isinstance(got, dict) or set(got) != {"dp", "tp"}:
        return None
    try:
        return {dim: sorted(int(r) for r in got[dim]) for dim in ("dp", "tp")}
    except (TypeError, ValueError):
        return None


def _wrong_layouts(rank: int, dp_size: int, tp_size: int) -> list[tuple[tuple[str, ...], dict, str]]:
    """Plausible wrong answers for one rank: (the dims they set, their groups, the mistake they make)."""
    row, col = divmod(rank, tp_size)
    by_dp_row, by_dp_col = divmod(rank, dp_size)
    return [
        (("dp", "tp"), {"dp": [i * dp_size + by_dp_col for i in range(tp_size)],
                        "tp": [by_dp_row * dp_size + j for j in range(dp_size)]},
         "you laid the grid out as (tp, dp): divmod(rank, dp_size). The shape is (dp, tp) and its LAST dimension, tp, "
         "varies fastest (ranks 0, 1, ... fill a row first), so the row and column come from divmod(rank, tp_size)."),
        (("dp", "tp"), {"dp": [by_dp_row * dp_size + j for j in range(dp_size)],
                        "tp": [i * dp_size + by_dp_col for i in range(tp_size)]},
         "your groups are those of a grid filled column by column, dp varying fastest (consecutive ranks in one dp "
         "group). The mesh fills arange(dp_size * tp_size).reshape(dp_size, tp_size) row by row: its LAST dimension, "
         "tp, varies fastest, so consecutive ranks share a tp group."),
        (("dp", "tp"), {"dp": [row * tp_size + j for j in range(tp_size)],
                        "tp": [i * tp_size + col for i in range(dp_size)]},
         "your dp and tp groups are swapped: the tp group is the ROW of the mesh (the ranks with the same "
         "rank // tp_size), the dp group the COLUMN (the same rank % tp_size)."),
        (("dp", "tp"), {"dp": [i * tp_size + rank // tp_size for i in range(dp_size)],
                        "tp": [(rank % tp_size) * tp_size + j for j in range(tp_size)]},
         "row and column are swapped in divmod: divmod(rank, tp_size) gives (row, col) in that order."),
        (("dp",), {"dp": [i * dp_size + col for i in range(dp_size)]},
         "your dp group steps by dp_size: the ranks of a column are tp_size apart (one row holds tp_size ranks)."),
        (("dp", "tp"), {"dp": [i * tp_size + col for i in range(tp_size)],
                        "tp": [row * tp_size + j for j in range(dp_size)]},
         "the group sizes are swapped: a dp group has dp_size ranks (one per row), a tp group tp_size (one per "
         "column)."),
        (("tp",), {"tp": [row * tp_size + j for j in range(1, tp_size + 1)]},
         "your tp group starts one rank late: ranks are numbered from 0, and row r starts at rank r * tp_size."),
        (("tp",), {"tp": [row + j for j in range(tp_size)]},
         "your tp group starts at rank `row`: row r of the mesh starts at rank r * tp_size."),
        (("dp",), {"dp": [i * tp_size + col for i in range(1, dp_size + 1)]},
         "your dp group starts one row late: rows are numbered from 0, so the column starts at rank col."),
    ]


def _hint(answers: dict[int, dict], shape: tuple[int, int]) -> str:
    """The mistakes that give exactly the answer's groups on every rank of the shape: a mistake in both groups, or one
    per wrong group; a wrong group no plausible mistake explains is named plainly."""
    dp_size, tp_size = shape
    ranks = sorted(answers)
    wrong_dims = [dim for dim in ("dp", "tp") if any(
        answers[rank] is None or answers[rank][dim] != _formula(rank, dp_size, tp_size)[dim] for rank in ranks)]
    explained: dict[str, str] = {}
    for index in range(len(_wrong_layouts(0, dp_size, tp_size))):
        wrong = {rank: _wrong_layouts(rank, dp_size, tp_size)[index] for rank in ranks}
        dims, mistake = wrong[ranks[0]][0], wrong[ranks[0]][2]
        explains = all(answers[rank] is not None and all(answers[rank][dim] == sorted(wrong[rank][1][dim])
                                                         for dim in dims) for rank in ranks)
        if explains and set(dims) == set(wrong_dims):
            return mistake
        if explains and len(dims) == 1 and dims[0] in wrong_dims:
            explained.setdefault(dims[0], mistake)
    grid = ("In the grid arange(dp_size * tp_size).reshape(dp_size, tp_size) the tp group of a rank is its row and the "
            "dp group its column.")
    unexplained = [dim for dim in wrong_dims if dim not in explained]
    if explained and not unexplained:
        return " And ".join(explained[dim] for dim in wrong_dims)
    if explained:
        return f"{next(iter(explained.values()))} Your {unexplained[0]} group is wrong too. {grid}"
    right = [dim for dim in ("dp", "tp") if dim not in wrong_dims]
    said = f"your {' and '.join(wrong_dims)} group{'s are' if len(wrong_dims) > 1 else ' is'} wrong" + (
        f" (the {right[0]} groups are right)" if right else "")
    return f"{said}. {grid}"


def _compare(name: str, rank: int, shape: tuple[int, int], got, want: dict, source: str, answers: dict) -> None:
    dp_size, tp_size = shape
    normal = _normalise(got)
    if isinstance(got, dict) and set(got) != {"dp", "tp"}:
        extra = [key for key in got if key not in ("dp", "tp")]
        missing = [key for key in ("dp", "tp") if key not in got]
        wrong = " and ".join(f"{', '.join(map(repr, keys))} {'are' if len(keys) > 1 else 'is'} {what}"
                             for keys, what in ((extra, "extra"), (missing, "missing")) if keys)
        raise CheckFailed(f"rank {rank} in a (dp={dp_size}, tp={tp_size}) mesh: {name} returned a dict with the keys "
                          f"{', '.join(map(repr, got))}: {wrong}; expected a dict with exactly the keys 'dp' and 'tp', "
                          "{'dp': [ranks], 'tp': [ranks]}.")
    if normal is None:
        raise CheckFailed(f"rank {rank} in a (dp={dp_size}, tp={tp_size}) mesh: {name} returned {describe(got)}; "
                          "expected a dict {'dp': [ranks], 'tp': [ranks]}.")
    if normal == want:
        return
    raise CheckFailed(f"rank {rank} in a (dp={dp_size}, tp={tp_size}) mesh: got dp {normal['dp']}, tp {normal['tp']}; "
                      f"expected dp {want['dp']}, tp {want['tp']} ({source}).\n"
                      f"Hint: {_hint(answers, shape)}")


def _answers(dp_tp_groups, name: str, shape: tuple[int, int]) -> dict:
    """The answer for every rank of a shape, in this process, normalised (None where it is not a groups dict)."""
    answers = {}
    for rank in range(shape[0] * shape[1]):
        case = f"computing the groups of rank {rank} in a (dp={shape[0]}, tp={shape[1]}) mesh"
        got = None
        try:
            with watching_calls(GROUPS_ANSWERS) as called:
                got = dp_tp_groups(rank, *shape)
        except Exception as error:
            raise answer_raised(name, error, case) from None
        if called:
            raise package_answer_used(name, called)
        answers[rank] = (got, _normalise(got))
    return answers


def check_dp_tp_groups(dp_tp_groups, timeout: float = 60.0) -> None:
    """Check `dp_tp_groups(rank, dp_size, tp_size) -> {"dp": [...], "tp": [...]}` against DeviceMesh's layout and
    real meshes.

    First for every rank of the shapes (2, 3), (3, 2), (2, 4) and (4, 2), whose sides differ,
    so that a mix-up of dp and tp gives other groups; then on 4 gloo ranks, where every rank
    compares its answer with the groups torch built for `init_device_mesh("cpu", shape,
    mesh_dim_names=("dp", "tp"))`, shapes (2, 2), (4, 1) and (1, 4).

    Introduced in notebooks/10-2d-mesh.ipynb.
    """
    ensure_written(dp_tp_groups)
    name = getattr(dp_tp_groups, "__name__", "dp_tp_groups")
    for shape in MORE_SHAPES:
        answers = _answers(dp_tp_groups, name, shape)
        normal = {rank: answer[1] for rank, answer in answers.items()}
        for rank, (got, _) in answers.items():
            _compare(name, rank, shape, got, _formula(rank, *shape),
                     "DeviceMesh's layout arange(dp*tp).reshape(dp, tp)", normal)
    results = run_on_ranks(_mesh_runner, (dp_tp_groups,), WORLD_SIZE, timeout, name)
    for shape_index, shape in enumerate(REAL_SHAPES):
        normal = {rank: _normalise(results[rank][shape_index][2]) for rank in range(WORLD_SIZE)}
        for rank in range(WORLD_SIZE):
            _, real, got = results[rank][shape_index]
            _compare(name, rank, shape, got, real, "the groups of a real DeviceMesh on 4 ranks", normal)
    passed(f"{name}: the groups of every rank match DeviceMesh's layout for the shapes "
           f"{', '.join(map(str, MORE_SHAPES))} and real 4-rank meshes {', '.join(map(str, REAL_SHAPES))}")


# --- average_gradients: data parallelism across the rows of a (dp, tp) mesh ----------------

DP_SIZE, TP_SIZE, HIDDEN = 3, 2, 4  # dp != tp: dividing by either size, or by both, gives other numbers


def _model() -> nn.Sequential:
    torch.manual_seed(10)
    return nn.Sequential(nn.Linear(HIDDEN, 4 * HIDDEN), nn.GELU(), nn.Linear(4 * HIDDEN, HIDDEN))


def _batch() -> torch.Tensor:
    return torch.randn(2 * DP_SIZE, 3, HIDDEN, generator=torch.Generator().manual_seed(100))  # (b, s, h)


def _row_grads(rows: list[int]) -> dict[str, torch.Tensor]:
    """One process: the gradients of the mean loss over the batch rows of the given mesh rows."""
    model, x = _model(), _batch().chunk(DP_SIZE)
    for row in rows:
        F.mse_loss(model(x[row]), torch.zeros(()).expand_as(x[row]), reduction="mean").backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def _grads_runner(rank: int, answers: tuple) -> list[dict]:
    """Each answer in turn on the same mesh: a fresh tensor-parallel MLP, forward and backward, then the answer.

    Besides the gradients and the collectives by mesh dimension, for each parameter: whether its placement is
    Replicate, whether its local shard was all-reduced, whether another all-reduced tensor held its values (a copy,
    a flat buffer), whether an all-reduce of either was started with async_op=True and never waited for, whether
    the tensor was written (e.g. divided) before that work was waited for, and whether the parameter's own values
    (its weights, not its gradient) were all-reduced."""
    api = dtensor_api()
    mesh = api.init_device_mesh("cpu", (DP_SIZE, TP_SIZE), mesh_dim_names=("dp", "tp"))
    x = _batch().chunk(DP_SIZE)[mesh["dp"].get_local_rank()]   # my row's third of the batch
    results = []
    for average_gradients in answers:
        model = api.parallelize_module(_model(), mesh["tp"], {"0": api.ColwiseParallel(), "2": api.RowwiseParallel()})
        F.mse_loss(model(x), torch.zeros(()).expand_as(x), reduction="mean").backward()
        params = dict(model.named_parameters())
        shards = {name: p.grad.to_local() for name, p in params.items()}
        before = {name: shard.detach().flatten().clone() for name, shard in shards.items()}
        own = {name: shard.untyped_storage().data_ptr() for name, shard in shards.items()}
        weights = {name: p.to_local().detach() for name, p in params.items()}   # each parameter's local shard
        weight_storage = {name: weight.untyped_storage().data_ptr() for name, weight in weights.items()}
        weights = {name: weight.flatten().clone() for name, weight in weights.items()}
        given: list[list] = []
        groups: list[tuple[int, ...]] = []
        with count_mesh_traffic(mesh) as calls, watching_requests() as requests, \
                _recording_all_reduce(given, requests, api.DTensor, groups), _recording_groups(groups):
            call_case(average_gradients, f"averaging the gradients of rank {rank} in a (dp={DP_SIZE}, tp={TP_SIZE}) "
                      "mesh", model, mesh)
        elsewhere = [entry for entry in given if entry[0] not in own.values()]   # copies, flat buffers
        unwaited = [entry for entry in given if entry[3]]
        unwaited_elsewhere = [entry[1] for entry in unwaited if entry[0] not in own.values()]
        written = [entry for entry in given if entry[4]]
        written_elsewhere = [entry[1] for entry in written if entry[0] not in own.values()]
        results.append({"grads": {name: full_tensor(p.grad).detach().clone() for name, p in params.items()},
                        "calls": [tuple(call) for call in calls],
                        "groups": sorted(set(groups) - {()}),
                        "replicated": {name: all(isinstance(placement, api.Replicate) for placement in p.placements)
                                       for name, p in params.items()},
                        "reduced": {name: any(entry[0] == own[name] for entry in given) for name in params},
                        "copied": {name: held_in(before[name], [entry[1] for entry in elsewhere]) for name in params},
                        "unwaited": {name: any(entry[0] == own[name] for entry in unwaited) or
                                     held_in(before[name], unwaited_elsewhere)
                                     for name in params},
                        "written": {name: any(entry[0] == own[name] for entry in written) or
                                    held_in(before[name], written_elsewhere)
                                    for name in params},
                        "weights": {name: any(entry[0] == weight_storage[name] for entry in elsewhere) or
                                    held_in(weights[name], [entry[1] for entry in elsewhere]) for name in params}})
        for entry in given:   # the next answer starts after this one's all-reduces
            if entry[2] is not None:
                entry[2].wait()
    return results


def _recording_all_reduce(given: list, requests, dtensor_type, groups: list):
    """Inside a rank: for every plain tensor dist.all_reduce gets (on a DTensor it fails in torch), `given` gets
    [its storage, its values before the call, the work an async_op=True call returned or None, whether that work is
    still to be waited for, whether the tensor was written before the answer first waited for that work]: the
    fourth turns False when the answer waits for it (RequestWatcher) (`requests`, a watching_requests watcher); the
    last reads the tensor's version counter then (an all-reduce leaves it, an in-place division bumps it).
    `groups` gets the ranks of the group of every call."""
    def make(original):
        def all_reduce(*args, **kwargs):
            arguments = call_arguments(original, args, kwargs) or {}
            groups.append(_ranks_of(arguments.get("group")))
            tensor = arguments.get("tensor")
            if not torch.is_tensor(tensor) or isinstance(tensor, dtensor_type):
                return original(*args, **kwargs)
            entry = [tensor.untyped_storage().data_ptr(), tensor.detach().flatten().clone(), None, False, False]
            work = original(*args, **kwargs)
            given.append(entry)
            if work is not None:
                entry[2:4] = [work, True]
                version = tensor._version

                def waited():
                    if entry[3]:
                        entry[3:] = [False, tensor._version != version]
                requests.watch(work, waited)
            return work
        return all_reduce
    return replacing_dist_calls({"all_reduce": make})


# the collectives whose group's ranks `_recording_groups` records (all_reduce's: `_recording_all_reduce`)
COLLECTIVES = ("broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor", "reduce", "gather",
               "scatter", "reduce_scatter", "all_to_all", "all_to_all_single", "all_reduce_coalesced")


def _ranks_of(group) -> tuple[int, ...]:
    """The sorted global ranks of a collective's group= (None: all ranks); () for what is not this rank's group."""
    try:
        return tuple(sorted(dist.get_process_group_ranks(group or dist.group.WORLD)))
    except (RuntimeError, ValueError, TypeError, AttributeError, KeyError):
        return ()   # a group this rank is not in, or not a group: the call itself does nothing or raises


def _recording_groups(groups: list):
    """Inside a rank: `groups` gets the ranks of the group of every call of a collective in COLLECTIVES (what each
    moved, and on which mesh dimension, count_mesh_traffic records)."""
    def make(original):
        def call(*args, **kwargs):
            groups.append(_ranks_of((call_arguments(original, args, kwargs) or {}).get("group")))
            return original(*args, **kwargs)
        return call
    return replacing_dist_calls({name: make for name in COLLECTIVES})


def run_average_gradients_answers(answers: tuple, timeout: float = 60.0,
                                  name: str = "average_gradients") -> list[list[dict]]:
    """Run each answer once on the same 6 ranks (one launch); [answer][rank] -> its gradients and collectives."""
    return run_answers_on_ranks(_grads_runner, answers, DP_SIZE * TP_SIZE, timeout, name, explain=_explain)


def _explain(failure) -> str | None:
    """The hint for a rank whose answer raised: a DeviceMesh passed as a collective's group, a 2-D mesh's
    get_group() without its dimension, or a collective given a DTensor; None for anything else."""
    return (_explain_mesh_as_group(failure) or _explain_get_group_without_a_dimension(failure)
            or _explain_collective_on_a_dtensor(failure) or _explain_weights_modified(failure))


_WEIGHTS_MODIFIED = re.compile(r"_ToTorchTensor(Backward)? is a view and is being modified inplace")


def _explain_weights_modified(failure) -> str | None:
    """The hint for autograd's refusal of an in-place change to what to_local() gave of a tensor that requires grad:
    a parameter (the weights), not its gradient, whose local shard autograd does not track. Autograd names the view's
    creator by its backward node, which torch 2.8 calls _ToTorchTensorBackward and 2.13 on _ToTorchTensor
    (`_WEIGHTS_MODIFIED` reads both)."""
    if not _WEIGHTS_MODIFIED.search(getattr(failure.exception, "message", "") or ""):
        return None
    return ("the tensor changed in place is what to_local() gave of a parameter, p.to_local(), the weights, which "
            "autograd tracks (hence its advice to clone): the gradient to average is p.grad, and its local shard, "
            "p.grad.to_local(), is what to all-reduce over the dp group and divide in place.")


def _explain_get_group_without_a_dimension(failure) -> str | None:
    """The hint for torch's refusal of get_group() without mesh_dim on a mesh of 2 dimensions (its message names
    the kwarg, and offers get_all_groups(), which gives the groups of both dimensions)."""
    if "`mesh_dim` needs to be specified" not in (getattr(failure.exception, "message", "") or ""):
        return None
    return ("this mesh has 2 dimensions, so get_group() needs the one to reduce over: mesh.get_group(\"dp\"), or "
            "mesh[\"dp\"].get_group().")


# what torch says of a DeviceMesh given as group=: get_backend does not know it (torch's logging wrapper asks first),
# or, called without that wrapper, it has none of a ProcessGroup's methods
_MESH_AS_GROUP = re.compile(r"Process group DeviceMesh\(.*not initialized"
                            r"|'DeviceMesh' object has no attribute '(allreduce|allgather|broadcast|reduce_scatter)")


def _explain_mesh_as_group(failure) -> str | None:
    """The hint for torch's refusal of a DeviceMesh given as a collective's group (its message names the mesh)."""
    if not _MESH_AS_GROUP.search(getattr(failure.exception, "message", "") or ""):
        return None
    return ("group= takes a ProcessGroup, not a DeviceMesh (mesh[\"dp\"] is the mesh's dp dimension, a DeviceMesh "
            "too): pass the dp dimension's process group, mesh[\"dp\"].get_group().")


def _explain_collective_on_a_dtensor(failure) -> str | None:
    """The hint for torch's refusal of a torch.distributed call of the answer on a DTensor: the gradients here are
    DTensors, whose operators have sharding rules and c10d's collectives none, so such a call fails in torch (a
    NotImplementedError about sharding strategies; before torch 2.9 or so an AssertionError that found no
    DeviceMesh from dtensor args)."""
    exception = failure.exception
    kind, message = getattr(exception, "kind", None), getattr(exception, "message", "") or ""
    if kind != "NotImplementedError" and not (kind == "AssertionError" and "DeviceMesh from dtensor args" in message):
        return None
    frames = parse_frames(failure.details.split("The above exception was the direct cause")[0])
    last_own = max((i for i, frame in enumerate(frames) if library_of(frame["file"]) is None), default=None)
    # the check's own frames between (its recorder of dist.all_reduce) are the way in, not where the call went
    called = next((frame for frame in frames[last_own + 1:] if library_of(frame["file"]) != "ddp_lab"), None) \
        if last_own is not None else None
    if called is None or "distributed" not in called["file"]:
        return None   # not raised inside torch.distributed, called from the answer's own line
    return ("each p.grad of this tensor-parallel model is a DTensor, and torch.distributed's collectives take plain "
            "tensors (torch has no sharding rule for them): pass this rank's local shard, p.grad.to_local(), which "
            "shares the gradient's memory.")


def _traffic_hint(calls: list[tuple], groups: list[tuple[int, ...]]) -> str | None:
    """The hint for a reduction over a group other than the dp one, whatever the gradients came out as; None if
    there was none (whether anything crossed the rows is told by the gradients: a broadcast or a send may carry it).
    `groups`: the ranks of the groups the answer's collectives were given."""
    # an all-gather over tp (full_tensor()) sums nothing; one over dp brings the other rows' gradients, which an
    # answer may then average itself
    dims = {dim for dim, op, _ in calls if "reduce" in op or (op == "all_gather" and dim == "dp")}
    world = tuple(range(DP_SIZE * TP_SIZE))
    columns = [tuple(range(col, DP_SIZE * TP_SIZE, TP_SIZE)) for col in range(TP_SIZE)]
    others = [ranks for ranks in groups if ranks not in columns and len(ranks) < len(world)
              and ranks not in [tuple(range(row * TP_SIZE, (row + 1) * TP_SIZE)) for row in range(DP_SIZE)]]
    if "other" in dims and others and world not in groups:
        part = next((ranks for ranks in others if len({rank % TP_SIZE for rank in ranks}) == 1), None)
        if part is not None:
            return (f"your answer reduced over the ranks {list(part)}, part of a column only: the dp group holds "
                    f"every rank of the column, one per row ({list(columns[part[0] % TP_SIZE])}): the mesh's dp "
                    "group, mesh['dp'].get_group().")
        column = ", ".join(["col"] + [f"col + {row * TP_SIZE}" for row in range(1, DP_SIZE)])
        consecutive = all(ranks == tuple(range(ranks[0], ranks[0] + DP_SIZE)) for ranks in others)
        return (f"your answer reduced over the ranks {list(others[0])}, which lie in different columns" + (
            ", as if dp varied fastest (consecutive ranks in one dp group); in the mesh tp varies fastest, so a "
            f"column is the ranks {column}" if consecutive else "") + ". The ranks of a row hold DIFFERENT shards, "
            "so only ranks of the same column may be averaged: the mesh's dp group, mesh['dp'].get_group().")
    if "other" in dims:
        return (f"your answer ran a collective over a group that is neither a row nor a column of the mesh (without "
                f"group=, dist.all_reduce reduces over all {DP_SIZE * TP_SIZE} ranks): the ranks of a row hold "
                "DIFFERENT shards, so only ranks of the same column may be averaged: the mesh's dp group.")
    if "tp" in dims:
        return ("your answer reduced within the row (the tp group): the ranks of a row hold different shards of "
                "each weight. Average across the rows instead: the mesh's dp group.")
    return None


def check_average_gradients(average_gradients, timeout: float = 60.0) -> None:
    """Check `average_gradients(model, mesh)`: data parallelism across the rows of a (dp=3, tp=2) mesh.

    On 6 gloo ranks, a tensor-parallel MLP (column- then row-parallel on `mesh["tp"]`) runs
    forward and backward on its row's third of the batch; after the answer, every rank's
    gradients (gathered with `full_tensor()`) must equal one process's gradients of the
    mean loss over the full batch. The collectives the answer runs are counted per mesh
    dimension, so a reduction over the wrong group is named.

    Introduced in notebooks/10-2d-mesh.ipynb.
    """
    ensure_written(average_gradients)
    name = getattr(average_gradients, "__name__", "average_gradients")
    refuse_written_divisor(average_gradients, name, "a gradient", "the dp dimension's size, mesh['dp'].size()")
    passed(judge_average_gradients(name, run_average_gradients_answers((average_gradients,), timeout, name)[0],
                                   division_into_a_new_tensor(average_gradients)))


def judge_average_gradients(name: str, results: list[dict], division: str | None = None) -> str:
    """The ✓ line for one answer's results on every rank (`run_average_gradients_answers`), or CheckFailed naming its
    mistake. `division`: a line of the answer that divides a gradient into a new tensor
    (`division_into_a_new_tensor`), evidence for gradients left as the sum."""
    rows = [_row_grads([row]) for row in range(DP_SIZE)]
    for rank in range(DP_SIZE * TP_SIZE):
        hint = _traffic_hint(results[rank]["calls"], results[rank]["groups"])
        if hint:
            counts = Counter((op, dim) for dim, op, _ in results[rank]["calls"])
            ops = ", ".join(f"{n} × {op} on {dim}" for (op, dim), n in counts.items()) or "none"
            raise CheckFailed(f"rank {rank}: collectives run by {name}: {ops}.\nHint: {hint}")
    for rank in range(DP_SIZE * TP_SIZE):
        row = rank // TP_SIZE
        for param, want_sum in ((n, sum(r[n] for r in rows)) for n in rows[0]):
            got, want = results[rank]["grads"][param], want_sum / DP_SIZE
            if torch.allclose(got, want, atol=1e-6, rtol=1e-5):
                continue
            index = first_mismatch(got, want, atol=1e-6)
            where = (f"rank {rank}, {param}.grad{list(index)}: got {got[index].item():.5f}, "
                     f"expected {want[index].item():.5f}")
            dp_calls = sum(dim == "dp" for dim, _, _ in results[rank]["calls"])
            dp_ops = {op for dim, op, _ in results[rank]["calls"] if dim == "dp"}
            from_row = next((other for other in range(DP_SIZE)
                             if torch.allclose(got, rows[other][param], atol=1e-6, rtol=1e-5)), None)
            row_ranks = range(row * TP_SIZE, (row + 1) * TP_SIZE)   # full_tensor() gathered their shards
            unwaited = [str(other) for other in row_ranks if results[other]["unwaited"][param]]
            written = [str(other) for other in row_ranks if results[other]["written"][param]]
            if unwaited:
                hint = (f"on rank{'s' * (len(unwaited) > 1)} {' and '.join(unwaited)}, {param}'s gradient went into a "
                        "dist.all_reduce started with async_op=True whose work was never waited for, so it was read "
                        "before the sum arrived. Keep the work handle each call returns and call its .wait() before "
                        "dividing the gradient.")
            elif written:
                hint = (f"on rank{'s' * (len(written) > 1)} {' and '.join(written)}, {param}'s gradient was changed "
                        "in place (a division?) after its dist.all_reduce(..., async_op=True) started and before its "
                        "work was waited for, while the all-reduce was still reading and writing it. Call the work's "
                        ".wait() first, then divide.")
            elif torch.allclose(got, want_sum, atol=1e-6, rtol=1e-5) and division:
                hint = (f"this is the SUM over the {DP_SIZE} rows. Your line `{division}` divides into a NEW tensor "
                        "and leaves the gradient as all_reduce made it: divide in place (grad.div_(...) or grad /= "
                        "...) on the local shard, which shares p.grad's memory.")
            elif torch.allclose(got, want_sum, atol=1e-6, rtol=1e-5):
                hint = (f"this is the SUM over the {DP_SIZE} rows: each row's loss is already a mean over its share "
                        f"of the batch, so divide the all-reduced gradient by the dp size ({DP_SIZE}).")
            elif torch.allclose(got, want_sum / (DP_SIZE * TP_SIZE), atol=1e-6, rtol=1e-5):
                hint = (f"this is the sum divided by the world size ({DP_SIZE * TP_SIZE}): only the {DP_SIZE} "
                        "ranks of a column took part, so divide by the dp size, mesh['dp'].size().")
            elif torch.allclose(got, want_sum / TP_SIZE, atol=1e-6, rtol=1e-5):
                hint = (f"this is the sum divided by the tp size ({TP_SIZE}), the size of a row: the {DP_SIZE} ranks "
                        "of a column took part, so divide by the dp size, mesh['dp'].size().")
            elif dp_ops == {"reduce"}:
                hint = ("your answer's collective across the rows was dist.reduce, which leaves the sum on its dst "
                        "rank only; every rank steps its own copy with the gradient, so each needs the mean: "
                        "dist.all_reduce over the mesh's dp group, then divide by the dp size.")
            elif from_row is not None and dp_ops == {"broadcast"}:
                hint = (f"this is row {from_row}'s gradient: your answer's only collectives across the rows were "
                        "broadcasts, and a broadcast copies one rank's tensor to the others, summing nothing. Sum each "
                        "local shard over the mesh's dp group (dist.all_reduce), then divide by the dp size.")
            elif from_row == row and results[rank]["weights"][param] and not results[rank]["reduced"][param] and \
                    not results[rank]["copied"][param]:
                hint = (f"this is row {row}'s own gradient: dist.all_reduce ran on {param}'s values (the weights, the "
                        "same on every row), not on its gradient: all-reduce the gradient's local shard, "
                        "p.grad.to_local().")
            elif torch.allclose(got, rows[row][param], atol=1e-6, rtol=1e-5) and \
                    results[rank]["copied"][param] and not results[rank]["reduced"][param]:
                hint = (f"this is row {row}'s own gradient: dist.all_reduce ran on a tensor that held {param}'s "
                        "gradient values (a copy, a flat buffer), not on the gradient, and it sums into the tensor "
                        "it is given. All-reduce the local shard in place (p.grad.to_local() shares p.grad's memory), "
                        "or copy the result back into p.grad.to_local().")
            elif from_row == row and not results[rank]["calls"]:
                hint = (f"this is row {row}'s own gradient: your answer ran no collective: each row computed its "
                        "gradients on its own share of the batch; every gradient's local shard (p.grad.to_local()) "
                        "must be averaged over the mesh's dp group.")
            elif torch.allclose(got, rows[row][param], atol=1e-6, rtol=1e-5) and dp_calls < len(rows[0]):
                replicated = results[rank]["replicated"][param]
                hint = (f"this is row {row}'s own gradient: {param} was not averaged. Your answer ran {dp_calls} "
                        f"collective(s) on dp for {len(rows[0])} parameters: every parameter's gradient needs it"
                        + (f", {param} too though it is replicated across a row (placement Replicate on tp)"
                           if replicated else "") + ", since each row computed them on its own share of the batch.")
            elif torch.allclose(got, rows[row][param], atol=1e-6, rtol=1e-5):
                hint = (f"this is row {row}'s own gradient: the reduction did not change the gradients. All-reduce the "
                        "local shard in place (p.grad.to_local() shares p.grad's memory), or assign the result back.")
            else:
                hint = (f"expected the mean of the {DP_SIZE} rows' gradients on every rank: each local shard summed "
                        "over the mesh's dp group, divided by the dp size.")
            raise CheckFailed(f"{where}.\nHint: {hint}")
    for rank in range(DP_SIZE * TP_SIZE):   # right values from an all-reduce never waited for: right by luck
        unwaited = [param for param, flag in results[rank]["unwaited"].items() if flag]
        if unwaited:
            raise right_by_luck(f"rank {rank}, {unwaited[0]}", "the gradient", "dist.all_reduce(..., async_op=True)",
                                "the gradient is divided")
    for rank in range(DP_SIZE * TP_SIZE):   # right values from a gradient written while its all-reduce ran
        written = [param for param, flag in results[rank]["written"].items() if flag]
        if written:
            raise CheckFailed(f"rank {rank}, {written[0]}: the gradient came out right here, but by luck: it was "
                              "changed after its dist.all_reduce(..., async_op=True) started and before its work was "
                              "waited for, and whether the change lands before or after the sum depends on timing.\n"
                              "Hint: call the work's .wait() before the gradient is divided.")
    return (f"{name}: every rank's gradients equal one process on the full batch, with collectives on the dp "
            "groups only")

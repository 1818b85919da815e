"""Checks for the exercises of notebooks/10-2d-mesh.ipynb: the 2-D device mesh.

    ddp_lab.checks.lesson10.check_dp_tp_groups(dp_tp_groups)
    ddp_lab.checks.lesson10.check_average_gradients(average_gradients)

The first answer runs on 4 gloo ranks against real meshes (`init_device_mesh("cpu", shape,
mesh_dim_names=("dp", "tp"))` for the shapes 4 ranks can make), then on larger shapes in
the notebook's process against DeviceMesh's layout, `arange(dp * tp).reshape(dp, tp)`.
The second trains one step of a tensor-parallel model on a (dp=2, tp=2) mesh, with the
collectives the answer runs counted per mesh dimension, and compares the gradients with
one process.

Introduced in notebooks/10-2d-mesh.ipynb.
"""

from __future__ import annotations

from collections import Counter

import torch
import torch.nn as nn
import torch.nn.functional as F

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import call_case, describe, ensure_written, first_mismatch, run_on_ranks
from ddp_lab.course.mesh import mesh_groups
from ddp_lab.instruments.mesh_traffic import count_mesh_traffic
from ddp_lab.torch_compat.dtensor import dtensor_api, full_tensor

WORLD_SIZE = 4
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


def _hint(got: dict, want: dict, rank: int, dp_size: int, tp_size: int) -> str:
    transposed = _formula(rank, tp_size, dp_size)  # the grid laid out as (tp, dp)
    if dp_size != tp_size and got in (transposed, {"dp": transposed["tp"], "tp": transposed["dp"]}):
        return ("the mesh dimensions are in the wrong order: the shape is (dp, tp) and the LAST dimension, tp, "
                "varies fastest (ranks 0, 1, ... fill a row first), so row = rank // tp_size and "
                "col = rank % tp_size; you divided by dp_size.")
    if got == {"dp": want["tp"], "tp": want["dp"]}:
        return ("rows and columns are swapped: the tp group is the ROW of the mesh (the ranks with the same "
                "rank // tp_size), the dp group the COLUMN (the same rank % tp_size).")
    for dim, size, what in (("dp", dp_size, "one rank per row"), ("tp", tp_size, "one rank per column")):
        if len(got[dim]) != size:
            return (f"your {dim} group has {len(got[dim])} ranks, but a {dim} group has {dim}_size = {size} ({what})"
                    f"{': an off-by-one in a range()' if abs(len(got[dim]) - size) == 1 else ''}.")
        shift = {g - w for g, w in zip(got[dim], want[dim])}
        if len(shift) == 1 and shift != {0}:
            return (f"your {dim} group is shifted by {shift.pop():+d}: an off-by-one. Ranks are numbered from 0, "
                    "and row r of the mesh starts at rank r * tp_size.")
    for dim in ("dp", "tp"):
        if rank not in got[dim]:
            return f"rank {rank} is not in its own {dim} group: every rank belongs to one group of each dimension."
    return ("the tp group of rank r is its row, [row*tp_size + j for j in range(tp_size)], and the dp group its "
            "column, [i*tp_size + col for i in range(dp_size)], with row, col = divmod(r, tp_size).")


def _compare(name: str, rank: int, shape: tuple[int, int], got, want: dict, source: str) -> None:
    dp_size, tp_size = shape
    normal = _normalise(got)
    if normal is None:
        raise CheckFailed(f"rank {rank} in a (dp={dp_size}, tp={tp_size}) mesh: {name} returned {describe(got)}; "
                          "expected a dict {'dp': [ranks], 'tp': [ranks]}.")
    if normal == want:
        return
    raise CheckFailed(f"rank {rank} in a (dp={dp_size}, tp={tp_size}) mesh: got dp {normal['dp']}, tp {normal['tp']}; "
                      f"expected dp {want['dp']}, tp {want['tp']} ({source}).\n"
                      f"Hint: {_hint(normal, want, rank, dp_size, tp_size)}")


def check_dp_tp_groups(dp_tp_groups, timeout: float = 60.0) -> None:
    """Check `dp_tp_groups(rank, dp_size, tp_size) -> {"dp": [...], "tp": [...]}` against real meshes.

    First on 4 gloo ranks, where every rank compares its answer with the groups torch built
    for `init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp"))`, shapes (2, 2), (4, 1)
    and (1, 4); then for every rank of the shapes (2, 3), (3, 2), (2, 4) and (4, 2).

    Introduced in notebooks/10-2d-mesh.ipynb.
    """
    ensure_written(dp_tp_groups)
    name = getattr(dp_tp_groups, "__name__", "dp_tp_groups")
    results = run_on_ranks(_mesh_runner, (dp_tp_groups,), WORLD_SIZE, timeout, name)
    for rank in range(WORLD_SIZE):
        for shape, real, got in results[rank]:
            _compare(name, rank, shape, got, real, "the groups of a real DeviceMesh on 4 ranks")
    for shape in MORE_SHAPES:
        for rank in range(shape[0] * shape[1]):
            got = call_case(dp_tp_groups, f"computing the groups of rank {rank} in a {shape} mesh", rank, *shape)
            _compare(name, rank, shape, got, _formula(rank, *shape),
                     "DeviceMesh's layout arange(dp*tp).reshape(dp, tp)")
    passed(f"{name}: the groups of every rank match real 4-rank meshes {', '.join(map(str, REAL_SHAPES))} "
           f"and the shapes {', '.join(map(str, MORE_SHAPES))}")


# --- average_gradients: data parallelism across the rows of a (dp, tp) mesh ----------------

DP_SIZE, TP_SIZE, HIDDEN = 2, 2, 4


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


def _grads_runner(rank: int, average_gradients) -> dict:
    api = dtensor_api()
    mesh = api.init_device_mesh("cpu", (DP_SIZE, TP_SIZE), mesh_dim_names=("dp", "tp"))
    model = api.parallelize_module(_model(), mesh["tp"], {"0": api.ColwiseParallel(), "2": api.RowwiseParallel()})
    x = _batch().chunk(DP_SIZE)[mesh["dp"].get_local_rank()]   # my row's half of the batch
    F.mse_loss(model(x), torch.zeros(()).expand_as(x), reduction="mean").backward()
    with count_mesh_traffic(mesh) as calls:
        call_case(average_gradients, f"averaging the gradients of rank {rank} in a (dp={DP_SIZE}, tp={TP_SIZE}) mesh",
                  model, mesh)
    return {"grads": {name: full_tensor(p.grad).detach().clone() for name, p in model.named_parameters()},
            "calls": [tuple(call) for call in calls]}


def _traffic_hint(calls: list[tuple]) -> str | None:
    dims = {dim for dim, _, _ in calls}
    if "other" in dims:
        return ("your answer ran a collective over a group that is neither a row nor a column of the mesh, most "
                "likely all 4 ranks (dist.all_reduce without group=): the two ranks of a row hold DIFFERENT shards, "
                "so only ranks of the same column may be averaged. Pass group=mesh['dp'].get_group().")
    if "tp" in dims:
        return ("your answer reduced within the row (the tp group): the ranks of a row hold different shards of "
                "each weight. Average across the rows instead: group=mesh['dp'].get_group().")
    if "dp" not in dims:
        return ("your answer ran no collective across the rows: each row computed its gradients on its own half of "
                "the batch; all-reduce every gradient's local shard (p.grad.to_local()) with "
                "group=mesh['dp'].get_group(), then divide by the dp size.")
    return None


def check_average_gradients(average_gradients, timeout: float = 60.0) -> None:
    """Check `average_gradients(model, mesh)`: data parallelism across the rows of a (dp=2, tp=2) mesh.

    On 4 gloo ranks, a tensor-parallel MLP (column- then row-parallel on `mesh["tp"]`) runs
    forward and backward on its row's half of the batch; after the answer, every rank's
    gradients (gathered with `full_tensor()`) must equal one process's gradients of the
    mean loss over the full batch. The collectives the answer runs are counted per mesh
    dimension, so a reduction over the wrong group is named.

    Introduced in notebooks/10-2d-mesh.ipynb.
    """
    ensure_written(average_gradients)
    name = getattr(average_gradients, "__name__", "average_gradients")
    results = run_on_ranks(_grads_runner, (average_gradients,), DP_SIZE * TP_SIZE, timeout, name)
    rows = [_row_grads([row]) for row in range(DP_SIZE)]
    for rank in range(DP_SIZE * TP_SIZE):
        hint = _traffic_hint(results[rank]["calls"])
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
            if torch.allclose(got, want_sum, atol=1e-6, rtol=1e-5):
                hint = (f"this is the SUM over the {DP_SIZE} rows: each row's loss is already a mean over its half of "
                        f"the batch, so divide the all-reduced gradient by the dp size ({DP_SIZE}).")
            elif torch.allclose(got, want_sum / (DP_SIZE * TP_SIZE), atol=1e-6, rtol=1e-5):
                hint = (f"this is the sum divided by the world size ({DP_SIZE * TP_SIZE}): only the {DP_SIZE} "
                        "ranks of a column took part, so divide by the dp size, mesh['dp'].size().")
            elif torch.allclose(got, rows[row][param], atol=1e-6, rtol=1e-5):
                hint = (f"this is row {row}'s own gradient: the reduction did not change the gradients. All-reduce the "
                        "local shard in place (p.grad.to_local() shares p.grad's memory), or assign the result back.")
            else:
                hint = ("for every parameter: g = p.grad.to_local(); dist.all_reduce(g, group=mesh['dp'].get_group()); "
                        "g.div_(mesh['dp'].size()).")
            raise CheckFailed(f"{where}.\nHint: {hint}")
    passed(f"{name}: every rank's gradients equal one process on the full batch, with all-reduces on the "
           "dp groups only")

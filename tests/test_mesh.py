"""ddp_lab.course.mesh on real gloo ranks: a mesh's groups, collective bytes per mesh dimension, the FSDP2 import, the plot."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch
import torch.distributed as dist

import ddp_lab
from ddp_lab.course.mesh import mesh_groups
from ddp_lab.instruments.mesh_traffic import MeshCall, count_mesh_traffic
from ddp_lab.course.rank_layout import RankLayout
from ddp_lab.torch_compat.dtensor import dtensor_api, full_tensor
from ddp_lab.torch_compat.fsdp import fsdp2, fsdp2_cpu_skip_reason


def _mesh_and_traffic(rank):
    api = dtensor_api()
    mesh = api.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    with count_mesh_traffic(mesh) as calls:
        dist.all_reduce(torch.ones(3), group=mesh["dp"].get_group())              # 12 B on dp
        out = torch.empty(10)
        dist.all_gather_into_tensor(out, torch.ones(5), group=mesh["tp"].get_group())  # 40 B gathered on tp
        dist.reduce_scatter_tensor(torch.empty(2, dtype=torch.float64), torch.ones(4, dtype=torch.float64),
                                   group=mesh["dp"].get_group())                   # 32 B scattered on dp
        dist.all_reduce(torch.ones(1))                                             # all 4 ranks: "other"
        partial = api.DTensor.from_local(torch.full((6,), rank + 1.0), mesh["tp"], [api.Partial()])
        summed = partial.redistribute(mesh["tp"], [api.Replicate()])              # DTensor's all-reduce, 24 B on tp
    dist.all_reduce(torch.ones(1))  # outside the block: not recorded
    unnamed = api.init_device_mesh("cpu", (4,))
    try:
        mesh_groups(unnamed)
        unnamed_error = None
    except ValueError as error:
        unnamed_error = str(error)
    return {"groups": mesh_groups(mesh), "calls": calls, "summed": summed.to_local().clone(),
            "unnamed": unnamed_error}


@pytest.fixture(scope="module")
def results():
    return ddp_lab.launch(_mesh_and_traffic, nprocs=4, backend="gloo", timeout=120)


def test_mesh_groups_are_the_rows_and_columns(results):
    for rank in range(4):
        row, col = divmod(rank, 2)
        assert results[rank]["groups"] == {"dp": [col, col + 2], "tp": [2 * row, 2 * row + 1]}
        layout = RankLayout(dp=2, tp=2)   # the package's one rank layout predicts torch's mesh
        assert results[rank]["groups"] == {axis: layout.group_of(axis, rank) for axis in ("dp", "tp")}
        assert "mesh_dim_names" in results[rank]["unnamed"]


def test_count_mesh_traffic_names_the_dimension_and_full_bytes(results):
    for rank in range(4):
        calls = results[rank]["calls"]
        assert calls[:4] == [MeshCall("dp", "all_reduce", 12), MeshCall("tp", "all_gather", 40),
                             MeshCall("dp", "reduce_scatter", 32), MeshCall("other", "all_reduce", 4)]
        assert calls[4:] == [MeshCall("tp", "all_reduce", 24)]  # DTensor's functional all-reduce
        row = rank // 2
        torch.testing.assert_close(results[rank]["summed"], torch.full((6,), 1.0 + 2 * row + 2.0 + 2 * row))


def test_fsdp2_and_full_tensor():
    fully_shard, _ = fsdp2()
    assert callable(fully_shard)
    reason = fsdp2_cpu_skip_reason()
    if hasattr(torch.distributed.fsdp, "fully_shard"):
        assert fully_shard.__module__.startswith("torch.distributed.fsdp")
    if torch.__version__.startswith("2.13"):   # the pinned torch: FSDP2 runs on CPU here
        assert reason is None
    else:
        assert reason is None or torch.__version__ in reason   # a skip names the torch it refers to
    plain = torch.ones(2)
    assert full_tensor(plain) is plain


def test_mesh_grid_outlines_every_group():
    groups = {0: {"dp": [0, 2], "tp": [0, 1]}, 1: {"dp": [1, 3], "tp": [0, 1]},
              2: {"dp": [0, 2], "tp": [2, 3]}, 3: {"dp": [1, 3], "tp": [2, 3]}}
    fig = ddp_lab.plots.mesh.mesh_grid([[0, 1], [2, 3]], groups, ("dp", "tp"))
    assert len(fig.axes[0].patches) == 4  # 2 columns + 2 rows
    assert [t.get_text() for t in fig.axes[0].texts] == ["rank 0", "rank 1", "rank 2", "rank 3"]

"""ddp_lab.course.tensor_parallel: counting collective bytes on real gloo ranks, the DTensor import helper, the plot."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch
import torch.distributed as dist

import ddp_lab
from ddp_lab.instruments.collectives import CollectiveCall, call_arguments, count_collectives
from ddp_lab.torch_compat.dtensor import dtensor_api
from ddp_lab.course.tensor_parallel.communications import CopyToModelParallelRegion


def _counting(rank):
    with count_collectives(("all_reduce", "broadcast")) as calls:
        dist.all_reduce(torch.ones(3))                          # float32: 12 bytes
        dist.broadcast(torch.zeros(2, 5, dtype=torch.float64), src=0)  # 80 bytes
        x = torch.ones(4, dtype=torch.float16, requires_grad=True)
        CopyToModelParallelRegion.apply(x).sum().backward()                # counted inside autograd's backward too
    dist.all_reduce(torch.ones(1))  # outside the block: not recorded, and the real collective still works
    return {"calls": calls, "restored": dist.all_reduce is dist.distributed_c10d.all_reduce,
            "grad": x.grad}


def test_count_collectives_records_every_call_with_its_bytes():
    results = ddp_lab.launch(_counting, nprocs=2, backend="gloo")
    for result in results:
        assert result["calls"] == [CollectiveCall("all_reduce", (3,), torch.float32, 3, 12),
                                   CollectiveCall("broadcast", (2, 5), torch.float64, 10, 80),
                                   CollectiveCall("all_reduce", (4,), torch.float16, 4, 8)]
        assert result["restored"]
        torch.testing.assert_close(result["grad"], torch.full((4,), 2.0, dtype=torch.float16))


def test_count_collectives_refuses_an_unknown_name():
    with pytest.raises(ValueError, match=r"no collective named \['allreduce'\]"):
        with count_collectives(("allreduce",)):
            pass


def test_call_arguments_names_what_a_call_passed_however_it_was_spelled():
    t = torch.ones(2)
    by_position = call_arguments(dist.all_reduce, (t, dist.ReduceOp.MAX, None, True), {})
    by_keyword = call_arguments(dist.all_reduce, (), {"tensor": t, "async_op": True, "op": dist.ReduceOp.MAX})
    assert by_position == by_keyword == {"tensor": t, "op": dist.ReduceOp.MAX, "group": None, "async_op": True}
    assert call_arguments(dist.all_reduce, (t,), {}) == {"tensor": t, "op": dist.ReduceOp.SUM, "group": None,
                                                         "async_op": False}
    assert call_arguments(dist.all_reduce, (t,), {"asynch": True}) is None   # torch raises its own error


def test_dtensor_api_has_every_name_the_lesson_uses():
    api = dtensor_api()
    assert api.module_path in ("torch.distributed.tensor", "torch.distributed._tensor")
    assert api.Shard(1).dim == 1
    assert api.Replicate() == api.Replicate()
    for name in ("DTensor", "DeviceMesh", "init_device_mesh", "distribute_tensor", "Partial", "CommDebugMode",
                 "parallelize_module", "ColwiseParallel", "RowwiseParallel", "SequenceParallel",
                 "PrepareModuleInput", "loss_parallel"):
        assert callable(getattr(api, name)), name


def test_comm_per_layer_draws_both_formulas_and_the_measurements():
    from ddp_lab.plots.tensor_parallel import comm_per_layer

    fig = comm_per_layer(16, 4, {8: 2048, 64: 16384}, 13120)
    ax = fig.axes[0]
    tp, dp = ax.lines[0], ax.lines[1]
    assert tp.get_ydata()[0] == pytest.approx(4 * tp.get_xdata()[0] * 16 * 4)
    assert set(dp.get_ydata()) == {13120}
    assert len(ax.collections) == 2  # the measured dots

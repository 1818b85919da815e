"""ddp_lab.course.pipeline_parallel: schedules, the ideal timeline, and torch.distributed.pipelining on real ranks."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ddp_lab
from ddp_lab.course.pipeline_parallel import schedules
from ddp_lab.course.pipeline_parallel.schedules import Span
from ddp_lab.plots.pipeline import plot_pipelines
from ddp_lab.torch_compat import pipelining

SCHEDULES = [schedules.gpipe_actions, schedules.one_f_one_b_actions]


@pytest.mark.parametrize("make", SCHEDULES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("p, m", [(1, 1), (2, 1), (2, 4), (3, 2), (4, 8), (4, 3)])
def test_every_micro_batch_runs_forward_then_backward_once(make, p, m):
    for stage in range(p):
        actions = make(stage, p, m)
        assert sorted(actions) == sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
        for i in range(m):
            assert actions.index(("F", i)) < actions.index(("B", i))


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 2), (3, 5)])
def test_peak_activations_gpipe_holds_m_and_1f1b_at_most_p_minus_stage(p, m):
    for stage in range(p):
        assert schedules.peak_activations(schedules.gpipe_actions(stage, p, m)) == m
        assert schedules.peak_activations(schedules.one_f_one_b_actions(stage, p, m)) == min(p - stage, m)


@pytest.mark.parametrize("make", SCHEDULES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("p, m", [(1, 3), (2, 1), (2, 4), (3, 7), (4, 8), (4, 32)])
@pytest.mark.parametrize("forward, backward", [(1.0, 2.0), (1.0, 1.0), (0.003, 0.007)])
def test_ideal_idle_fraction_is_the_bubble_formula(make, p, m, forward, backward):
    spans = schedules.ideal_timeline([make(s, p, m) for s in range(p)], forward, backward)
    assert len(spans) == 2 * p * m
    assert schedules.idle_fraction(spans) == pytest.approx(schedules.bubble_fraction(p, m), abs=1e-12)


def test_ideal_timeline_reports_a_deadlock():
    with pytest.raises(ValueError, match="deadlock"):
        schedules.ideal_timeline([[("F", 0), ("B", 0)], [("B", 0), ("F", 0)]])


def test_idle_fraction_uses_one_window_for_all_ranks():
    spans = [Span(0, "forward", 10.0, 11.0), Span(1, "forward", 11.0, 12.0), Span(1, "backward", 12.0, 14.0)]
    assert schedules.idle_fraction(spans) == pytest.approx(1 - 4.0 / (2 * 4.0))
    with pytest.raises(ValueError, match="at least one Span"):
        schedules.idle_fraction([])


@pytest.mark.parametrize("bad", [dict(stage=2, num_stages=2, num_microbatches=1),
                                 dict(stage=0, num_stages=2, num_microbatches=0)])
def test_schedules_refuse_bad_arguments(bad):
    with pytest.raises(ValueError, match="must be"):
        schedules.one_f_one_b_actions(**bad)


def test_plot_pipelines_draws_panels():
    ideal = schedules.ideal_timeline([schedules.gpipe_actions(s, 2, 3) for s in range(2)], 0.001, 0.002)
    fig = plot_pipelines({"a": ideal, "b": ideal})
    assert len(fig.axes) == 2
    with pytest.raises(ValueError, match="at least one panel"):
        plot_pipelines({})


# --- torch.distributed.pipelining through torch_compat, on 2 gloo ranks -------------------

WIDTH, BLOCKS, MICRO, M = 8, 4, 2, 4


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(BLOCKS)])


def _batch():
    generator = torch.Generator().manual_seed(3)
    return torch.randn(M * MICRO, WIDTH, generator=generator), torch.randn(M * MICRO, WIDTH, generator=generator)


def _run(rank: int) -> dict:
    import torch.distributed as dist

    world_size = dist.get_world_size()
    out = {}
    for name, virtual in [("ScheduleGPipe", 1), ("Schedule1F1B", 1), ("ScheduleInterleaved1F1B", 2)]:
        num_stages = world_size * virtual
        per = BLOCKS // num_stages
        ids = [rank + k * world_size for k in range(virtual)]
        model = _model()
        modules = {i: model[i * per:(i + 1) * per] for i in ids}
        x, y = _batch()
        stages = [pipelining.make_stage(modules[i], i, num_stages, x[:MICRO]) for i in ids]
        schedule = pipelining.make_schedule(name, stages, M, F.mse_loss)
        losses = []
        args = (x,) if 0 in ids else ()
        kwargs = {"target": y, "losses": losses} if num_stages - 1 in ids else {}
        schedule.step(*args, **kwargs)
        out[name] = {"grads": {i: [p.grad for p in modules[i].parameters()] for i in ids}, "losses": losses}
    return out


def test_torch_schedules_equal_one_process():
    results = ddp_lab.launch(_run, nprocs=2, backend="gloo")
    model = _model()
    x, y = _batch()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    ref = [p.grad for p in model.parameters()]
    for name in results[0]:
        grads = {i: g for result in results for i, g in result[name]["grads"].items()}
        per = len(ref) // len(grads)
        for i, stage_grads in grads.items():
            for got, want in zip(stage_grads, ref[i * per:(i + 1) * per], strict=True):
                torch.testing.assert_close(got, want)
        torch.testing.assert_close(torch.stack(results[1][name]["losses"]).sum(), loss.detach())


def test_available_schedules_include_those_of_torch_2_4():
    assert {"ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B", "ScheduleLoopedBFS"} <= set(
        pipelining.available_schedules())


def test_make_schedule_says_what_is_wrong():
    with pytest.raises(ValueError, match="has no pipelining schedule 'ScheduleNope'"):
        pipelining.make_schedule("ScheduleNope", [], 2, F.mse_loss)
    with pytest.raises(ValueError, match="one stage per rank, got 2"):
        pipelining.make_schedule("Schedule1F1B", [object(), object()], 2, F.mse_loss)


def _two_receives(rank: int) -> list:
    import torch.distributed as dist

    from ddp_lab.torch_compat.pipelining import _EveryWork

    buffers = [torch.zeros(3), torch.zeros(3)]
    if rank == 0:
        ops = [dist.P2POp(dist.isend, torch.full((3,), 1.0 + k), 1) for k in range(2)]
    else:
        ops = [dist.P2POp(dist.irecv, buffer, 0) for buffer in buffers]
    works = dist.batch_isend_irecv(ops)
    _EveryWork(works).wait()  # what make_schedule gives older schedules instead of works.pop()
    return {"works": len(works), "buffers": buffers}


def test_every_work_waits_on_every_transfer_of_a_gloo_batch():
    results = ddp_lab.launch(_two_receives, nprocs=2, backend="gloo")
    assert results[1]["works"] == 2  # gloo: one Work per operation, so waiting on one is not enough
    torch.testing.assert_close(torch.stack(results[1]["buffers"]), torch.tensor([[1.0] * 3, [2.0] * 3]))

"""Lesson 11's helpers (ddp_lab.course.alpha_beta, data_parallel, instruments): byte counts against formulas on real gloo ranks, bucket layouts against DDP, models, profiles.

One 2-rank launch runs every rank-side measurement (DDP with torch's hooks, a counted
collective of each kind, the prefix groups, ping-pong and all-reduce timers, a profile);
the tests then check what it returned. Formulas and pure helpers are tested in-process.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

import ddp_lab
from ddp_lab.course import alpha_beta
from ddp_lab.course.data_parallel import buckets, compression, scaling
from ddp_lab.instruments import comm_hooks, profiling, timing
from ddp_lab.instruments.collectives import watching_collectives


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))


SHAPES = [tuple(p.shape) for p in _model().parameters()]
NUMEL = sum(p.numel() for p in _model().parameters())


def _rank_work(rank: int) -> dict:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
    from torch.nn.parallel import DistributedDataParallel as DDP

    out = {}
    counter = comm_hooks.ByteCounter()
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(rank))
    hooks = {"fp32": (None, default_hooks.allreduce_hook), "fp16": (None, default_hooks.fp16_compress_hook),
             "powersgd": (powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                                  start_powerSGD_iter=2), powersgd.powerSGD_hook)}
    for name, (state, hook) in hooks.items():
        model = DDP(_model())
        model.register_comm_hook(state, hook)
        per_step = []
        for _ in range(4):
            model.zero_grad(set_to_none=True)
            loss = model(x).pow(2).mean()
            with counter.counting():
                loss.backward()
            per_step.append(comm_hooks.total_bytes(counter.take()))
        out[name] = per_step

    original = dist.all_reduce
    with counter.counting():  # every counted collective, positional and keyword arguments
        dist.all_reduce(torch.ones(3))
        dist.broadcast(tensor=torch.ones(5, dtype=torch.float16), src=0)
        dist.all_gather([torch.empty(2) for _ in range(2)], torch.ones(2))
        dist.all_gather_into_tensor(torch.empty(4, dtype=torch.int8), input_tensor=torch.ones(2, dtype=torch.int8))
        dist.all_to_all_single(torch.empty(4), torch.ones(4))
        dist.scatter(torch.empty(3), scatter_list=[torch.ones(3), torch.ones(3)] if rank == 0 else None, src=0)
    out["calls"] = counter.take()
    # the list form of all_to_all: gloo runs it from torch 2.13 (equal sizes), and refuses it before
    with counter.counting():
        try:
            dist.all_to_all([torch.empty(2) for _ in range(2)], [torch.ones(2), torch.ones(2)])
            out["list all_to_all"] = counter.take()
        except (RuntimeError, NotImplementedError):     # c10's "ProcessGroupGloo does not support alltoall"
            out["list all_to_all"] = None
            counter.take()
    out["after"] = counter.take()
    out["restored"] = dist.all_reduce is original

    # a call made inside another watched one (broadcast_object_list runs broadcast): passed on unless outermost_only
    watched = {"broadcast_object_list": (0, "object_list"), "broadcast": (0, "tensor")}
    for outermost_only in (False, True):
        seen = []
        with watching_collectives(watched, lambda name, _: seen.append(name), outermost_only=outermost_only):
            dist.broadcast_object_list([{"step": rank}], src=0)
        out[f"outermost {outermost_only}"] = seen

    # outermost_only is per thread: a collective another thread calls while this one waits inside a watched barrier
    # (a comm hook's callback thread beside the main thread) is still passed on. Rank 1 waits in the barrier for rank
    # 0, which enters it 1.5 s late; meanwhile both ranks' second threads all-reduce over a group of their own.
    pair = dist.new_group([0, 1])
    seen = []
    with watching_collectives({"barrier": (0, "group"), "all_reduce": (0, "tensor")},
                              lambda name, _: seen.append(name), outermost_only=True):
        thread = threading.Thread(target=lambda: (time.sleep(0.2), dist.all_reduce(torch.ones(1), group=pair)))
        thread.start()
        if rank == 0:
            time.sleep(1.5)
        dist.barrier()
        thread.join()
    out["beside a barrier"] = seen

    events = []
    model = DDP(_model(), bucket_cap_mb=0.01)
    model.register_comm_hook(None, comm_hooks.timed_hook(default_hooks.allreduce_hook, events))
    for _ in range(2):
        events.clear()
        model.zero_grad(set_to_none=True)
        model(x).pow(2).mean().backward()
    out["events"] = sorted(events)

    view = DDP(_model(), bucket_cap_mb=0.01, gradient_as_bucket_view=True)
    view(x).sum().backward()
    view(x).sum().backward()
    out["storages"] = buckets.gradient_storages(view)

    groups = timing.prefix_groups((1, 2))
    out["ping"] = timing.ping_pong_seconds(1 - rank, 1000, repeats=3)
    out["all_reduce"] = timing.all_reduce_seconds(1000, repeats=3, group=groups[2])
    if rank == 0:
        out["alone"] = timing.all_reduce_seconds(10, repeats=2, group=groups[1])
    with profiling.quiet_profile() as prof:
        dist.all_reduce(torch.ones(100))
    out["names"] = profiling.event_names(prof)
    out["rows"] = profiling.profile_rows(prof, ["all_reduce"])
    return out


@pytest.fixture(scope="module")
def ranks():
    # CPU ranks with the GPUs hidden: torch's PowerSGD hook calls torch.cuda.synchronize on the gradients' device
    # whenever a GPU exists, which raises for CPU tensors (seen on an H100 host in lesson 11's cell)
    return ddp_lab.launch(_rank_work, nprocs=2, backend="gloo", threads=1, env={"CUDA_VISIBLE_DEVICES": ""})


def test_hook_bytes_equal_their_formulas(ranks):
    for rank in range(2):
        assert ranks[rank]["fp32"] == [4 * NUMEL] * 4
        assert ranks[rank]["fp16"] == [2 * NUMEL] * 4
        powersgd = ranks[rank]["powersgd"]
        assert powersgd[:2] == [4 * NUMEL] * 2  # start_powerSGD_iter=2: plain all-reduce first
        assert powersgd[2:] == [4 * compression.powersgd_numel(SHAPES, rank=2)] * 2
        assert powersgd[2] < 4 * NUMEL / 5


def test_byte_counter_sees_every_counted_collective_and_restores_torch(ranks):
    calls = ranks[0]["calls"]
    both = [("all_reduce", torch.float32, 3, 12), ("broadcast", torch.float16, 5, 10),
            ("all_gather", torch.float32, 2, 8), ("all_gather_into_tensor", torch.int8, 2, 2),
            ("all_to_all_single", torch.float32, 4, 16)]
    assert [(c.name, c.dtype, c.numel, c.nbytes) for c in calls] == both + [("scatter", torch.float32, 3, 12)] * 2
    assert comm_hooks.total_bytes(calls) == 72
    assert [(c.name, c.dtype, c.numel, c.nbytes) for c in ranks[1]["calls"]] == both   # scatter: rank 1 sends nothing
    listed = ranks[0]["list all_to_all"]
    assert (listed is not None) == (torch.__version__ >= "2.13")   # gloo's list all_to_all: torch 2.13 on
    if listed is not None:                              # every chunk handed in, this rank's own among them
        assert [(c.name, c.numel, c.nbytes) for c in listed] == [("all_to_all", 2, 8)] * 2
    assert ranks[0]["after"] == []
    assert ranks[0]["restored"]


def test_watching_only_the_outermost_calls_counts_each_as_the_answer_made_it(ranks):
    """broadcast_object_list broadcasts its sizes and its bytes: seen as three calls, or as the one the code made
    (lesson 16's check counts what a replica hands over this way)."""
    assert ranks[0]["outermost False"][0] == "broadcast_object_list" and "broadcast" in ranks[0]["outermost False"]
    assert ranks[0]["outermost True"] == ["broadcast_object_list"]
    assert ranks[1]["beside a barrier"] == ["all_reduce"]      # the other thread's call, made inside rank 1's barrier


def test_timed_hook_records_every_bucket_of_the_layout_ddp_builds(ranks):
    numels = [p.numel() for p in _model().parameters()][::-1]
    expected = buckets.bucket_layout(numels, 0.01)
    assert len(expected) > 1
    events = ranks[0]["events"]
    assert sorted((e.index, e.numel) for e in events) == list(enumerate(expected))
    assert all(e.done >= e.launched for e in events)
    assert ranks[0]["storages"] == len(expected)  # gradient_as_bucket_view: one storage per bucket


def test_timers_and_groups_on_real_ranks(ranks):
    for rank in range(2):
        assert len(ranks[rank]["ping"]) == 3 and all(t > 0 for t in ranks[rank]["ping"])
        assert len(ranks[rank]["all_reduce"]) == 3 and all(t > 0 for t in ranks[rank]["all_reduce"])
    assert len(ranks[0]["alone"]) == 2


def test_quiet_profile_records_the_collective_and_prints_nothing(ranks, capsys):
    assert "gloo:all_reduce" in ranks[0]["names"]
    rows = ranks[0]["rows"]
    assert rows and all("all_reduce" in row.name for row in rows)
    table = profiling.format_rows(rows)
    assert table.splitlines()[0].startswith("event") and "gloo:all_reduce" in table
    assert "USDT" not in capsys.readouterr().out  # kineto's status lines went to /dev/null


def test_quiet_profile_in_process(capfd):
    with profiling.quiet_profile() as prof:
        torch.ones(8, 8) @ torch.ones(8, 8)
    assert "aten::matmul" in profiling.event_names(prof)
    assert "USDT" not in capfd.readouterr().err


def test_powersgd_numel_compresses_only_what_pays():
    assert compression.powersgd_numel([(256, 128), (256,)], rank=2) == (256 + 128) * 2 + 256
    assert compression.powersgd_numel([(4, 4)], rank=2) == 16  # (4 + 4) * 2 * 2 >= 16: sent as is
    assert compression.powersgd_numel([(8, 3, 3, 3)], rank=1) == 8 + 27  # viewed as 8 x 27: 35 * 2 < 216
    assert compression.powersgd_numel([(64, 3, 3, 3)], rank=1) == 64 + 27  # conv weight viewed as 64 x 27


def test_bucket_layout_is_greedy_and_validates():
    sizes = [256, 65536] * 6  # bias, weight of six 256 x 256 layers, in gradient-ready order
    assert buckets.bucket_layout(sizes, 0.1) == [65792] * 6
    assert buckets.bucket_layout(sizes, 0.3) == [131584] * 3
    assert buckets.bucket_layout(sizes, 1) == [263168, 131584]
    assert buckets.bucket_layout(sizes, 25) == [394752]
    assert buckets.ready_order_numels(_model()) == [p.numel() for p in _model().parameters()][::-1]
    with pytest.raises(ValueError, match="bucket_cap_mb must be positive"):
        buckets.bucket_layout(sizes, 0)


def test_alpha_beta_fit_and_ring_model():
    alpha, beta = 50e-6, 0.5e-9
    sizes = [4, 400, 40_000, 4_000_000]
    fitted = alpha_beta.fit_alpha_beta(sizes, [alpha + beta * n for n in sizes])
    assert fitted == pytest.approx((alpha, beta), rel=1e-6)
    assert alpha_beta.ring_all_reduce_seconds(1e6, 1, alpha, beta) == 0.0
    assert alpha_beta.ring_all_reduce_seconds(1e6, 4, alpha, beta) == pytest.approx(6 * alpha + 1.5e6 * beta)


def test_speedup_bound_and_bus_bandwidth():
    assert [scaling.speedup_bound(w, 2) for w in (1, 2, 4)] == [1, 2, 2]
    assert [scaling.speedup_bound(w, 1) for w in (1, 2, 4)] == [1, 1, 1]
    assert scaling.speedup_bound(4, 16) == 4
    assert alpha_beta.bus_bandwidth(1e9, 0.01, 2) == pytest.approx(1e11)
    assert alpha_beta.bus_bandwidth(1e9, 0.01, 8) == pytest.approx(1e11 * 14 / 8)


def test_time_calls_and_median():
    samples = timing.time_calls(lambda: sum(range(10_000)), repeats=3, warmup=1)
    assert len(samples) == 3 and all(wall > 0 and cpu >= 0 for wall, cpu in samples)
    assert timing.median_timing([(1.0, 0.5), (3.0, 0.1), (2.0, 0.3)]) == timing.Timing(2.0, 0.3)
    with pytest.raises(ValueError, match="repeats >= 1"):
        timing.time_calls(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="at least one"):
        timing.median_timing([])


def test_hidden_seconds_counts_only_overlap_with_compute():
    events = [comm_hooks.BucketEvent(0, 10, launched=1.0, done=3.0), comm_hooks.BucketEvent(1, 10, 2.5, 4.0)]
    assert comm_hooks.hidden_seconds(events, backward_began=0.0, last_launch=2.5) == pytest.approx(1.5)
    assert comm_hooks.hidden_seconds(events[1:], backward_began=0.0, last_launch=2.5) == 0.0


def test_plots_draw():
    import matplotlib

    matplotlib.use("Agg")
    from ddp_lab.plots import scaling as plots

    fig = plots.step_time_vs_world([1, 2, 4], {"step": [3, 2, 2], "compute": [3, 1.5, 1]},
                                   {"step": [1, 1.5, 2], "compute": [1, 1, 1]}, cores=2)
    assert len(fig.axes) == 2
    assert len(plots.bucket_sweep([0.1, 1], [6, 2], [4e-3, 3e-3], [1e-3, 1e-3]).axes) == 2
    assert len(plots.hooks_bytes_and_loss({"fp32": 400, "fp16": 200}, {"fp32": [1, 0.5], "fp16": [1, 0.6]}).axes) == 2

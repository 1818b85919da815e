"""ddp_lab.course.fault_tolerance: atomic checkpoints, RNG state, and failed launches digested into stable lines.

The launches are real gloo ranks with short timeouts (lesson 12's failures, a few seconds in all).
"""

from __future__ import annotations

import os
import random
import signal

import pytest
import torch

import ddp_lab
from ddp_lab.course.fault_tolerance.checkpoint import atomic_save, capture_rng, restore_rng
from ddp_lab.instruments.diagnose import (FLIGHT_RECORDER_ENV, blocked_in, flight_recorder_entries,
                                              monitored_barrier_missing, rank_report)


def test_atomic_save_replaces_the_file_and_a_failed_save_keeps_the_old_one(tmp_path):
    path = tmp_path / "checkpoint.pt"
    atomic_save({"step": 1, "w": torch.arange(3.0)}, path)
    atomic_save({"step": 2, "w": torch.arange(3.0) * 2}, path)
    loaded = torch.load(path)
    assert loaded["step"] == 2 and torch.equal(loaded["w"], torch.tensor([0.0, 2.0, 4.0]))
    with pytest.raises(Exception):
        atomic_save({"step": 3, "not picklable": lambda: None}, path)  # torch.save fails half way
    assert torch.load(path)["step"] == 2, "the previous checkpoint must survive a failed save"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"], "no temporary file left behind"


def test_restore_rng_replays_the_same_draws():
    torch.manual_seed(5)
    random.seed(5)
    state = capture_rng()
    first = (torch.rand(4), random.random(), torch.nn.functional.dropout(torch.ones(8), 0.5))
    torch.rand(100)  # move on
    restore_rng(state)
    again = (torch.rand(4), random.random(), torch.nn.functional.dropout(torch.ones(8), 0.5))
    assert torch.equal(first[0], again[0]) and first[1] == again[1] and torch.equal(first[2], again[2])


def skips_the_collective(rank):
    import torch.distributed as dist

    if rank == 0:
        dist.all_reduce(torch.ones(1))
    return rank


def dies_at_step_two(rank):
    import torch.distributed as dist

    for step in range(4):
        if rank == 1 and step == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(torch.ones(1))
        print(f"step {step}")


def raises_on_rank_one(rank):
    import torch.distributed as dist

    if rank == 1:
        raise ValueError("bad batch")
    dist.barrier()


def test_rank_report_of_a_hang_names_the_collective():
    with pytest.raises(ddp_lab.LaunchTimeout) as caught:
        ddp_lab.launch(skips_the_collective, nprocs=2, backend="gloo", timeout=2)
    assert rank_report(caught.value) == [
        "rank 0: still running at the watchdog's timeout, waiting in a collective (dist.all_reduce)",
        "rank 1: returned"]
    assert blocked_in(caught.value.failures[0].details) == "all_reduce"


def test_rank_report_of_a_crash_and_of_an_exception_does_not_depend_on_timing():
    with pytest.raises(ddp_lab.RankCrashed) as crashed:
        ddp_lab.launch(dies_at_step_two, nprocs=2, backend="gloo", timeout=60)
    assert rank_report(crashed.value) == [
        "rank 0: ended because rank 1 failed first",  # stopped, or raised after losing its peer: either way
        "rank 1: died with signal SIGKILL (9) without a Python traceback"]
    with pytest.raises(ddp_lab.RankFailed) as failed:
        ddp_lab.launch(raises_on_rank_one, nprocs=2, backend="gloo", timeout=60)
    assert rank_report(failed.value) == ["rank 0: ended because rank 1 failed first", "rank 1: raised ValueError"]


def test_blocked_in_reads_a_faulthandler_stack():
    stack = ('Current thread (most recent call first):\n'
             '  File "/x/torch/distributed/distributed_c10d.py", line 4811 in barrier\n'
             '  File "/x/torch/distributed/c10d_logger.py", line 83 in wrapper\n'
             '  Cell In[3], line 2 in train\n')
    assert blocked_in(stack) == "barrier"
    assert blocked_in("  Cell In[3], line 2 in train\n") is None


def test_monitored_barrier_missing_reads_the_ranks_or_says_it_cannot():
    assert monitored_barrier_missing("[Rank 0]: Ranks 2, 5 failed to pass monitoredBarrier in 1000 ms") == [2, 5]
    assert monitored_barrier_missing("[Rank 0]: Rank 3 failed to pass monitoredBarrier in 1000 ms") == [3]
    assert monitored_barrier_missing("some other wording of rank 3's absence") is None


def monitored(rank):
    import datetime
    import time

    import torch.distributed as dist

    if rank == 1:
        time.sleep(3)
        return None
    try:
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=1), wait_all_ranks=True)
    except RuntimeError as error:
        return str(error)
    return None


def test_monitored_barrier_missing_on_torchs_real_message():
    message = ddp_lab.launch(monitored, nprocs=3, backend="gloo", timeout=30)[0]
    assert message is not None
    assert monitored_barrier_missing(message) in (None, [1])  # None: a torch that words it otherwise


def records(rank):
    import torch.distributed as dist

    dist.all_reduce(torch.ones(2))
    dist.broadcast(torch.ones(3), src=0)
    entries = flight_recorder_entries("gloo")
    return None if entries is None else [(e["profiling_name"], e["collective_seq_id"]) for e in entries]


def test_flight_recorder_entries_on_gloo():
    entries = ddp_lab.launch(records, nprocs=2, backend="gloo", env=FLIGHT_RECORDER_ENV)[0]
    if entries is None:
        pytest.skip("this torch has no flight recorder")
    assert [name.split(":")[-1] for name, _ in entries] == ["all_reduce", "broadcast"]
    assert [seq for _, seq in entries] == [1, 2]

"""Destroying a process group while a DDP model still holds it must not hang the rank.

Freeing such a gloo group joins its threads under the GIL while one of them may need the
GIL (pytorch/pytorch#56297); ddp_lab.launcher.keepalive keeps destroyed groups until the rank exits.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ddp_lab

ROUNDS = 30  # without keepalive, two ranks deadlocked within 1 to 12 rounds here


def destroy_while_ddp_lives(rank: int, folder: str, rounds: int, free_model_first: bool = False) -> int:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddp_lab.launcher.keepalive import kept_groups

    def one_round(i: int) -> torch.Tensor:
        dist.init_process_group("gloo", init_method=f"file://{folder}/store-{i}", rank=rank, world_size=2)
        model = DDP(torch.nn.Linear(10, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(4):
            optimizer.zero_grad()
            F.mse_loss(model(torch.randn(8, 10)), torch.randn(8, 1)).backward()
            optimizer.step()
        totals = torch.ones(2)
        dist.all_reduce(totals)
        if free_model_first:  # the advice for scripts, with torch's own destroy_process_group
            del model, optimizer
            dist.destroy_process_group.__wrapped__()
            return totals
        dist.destroy_process_group()  # the model still holds the group ...
        return totals  # ... and frees it here, with the function's locals

    for i in range(rounds):
        assert one_round(i).tolist() == [2.0, 2.0]
    return kept_groups()


def test_destroying_a_group_that_ddp_still_holds_never_hangs(tmp_path):
    kept = ddp_lab.launch(destroy_while_ddp_lives, args=(str(tmp_path), ROUNDS), nprocs=2,
                          init_process_group=False, timeout=60)
    assert kept == [ROUNDS, ROUNDS]


def test_a_cold_rank_that_imports_torch_itself_keeps_groups_too(tmp_path):
    """init_process_group=False and a first launch: torch arrives with fn, not before it."""
    code = (
        "import ddp_lab, tests.test_keepalive as t\n"
        f"print(ddp_lab.launch(t.destroy_while_ddp_lives, args=({str(tmp_path)!r}, 3), nprocs=2,"
        " init_process_group=False, timeout=60))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parents[1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[3, 3]"


def test_freeing_the_model_before_destroy_is_safe_without_ddp_lab(tmp_path):
    """What lesson 05 advises for scripts: `del model` first, then torch's destroy_process_group."""
    kept = ddp_lab.launch(destroy_while_ddp_lives, args=(str(tmp_path), ROUNDS, True), nprocs=2,
                          init_process_group=False, timeout=60)
    assert kept == [0, 0]  # nothing was kept: torch freed every group itself

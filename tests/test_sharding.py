"""ddp_lab.course.sharding: the byte counters and ZeRO's formula, the portable collectives and FSDP2 import.

The collectives run on 2 real gloo ranks and are compared with the definition; the byte
counter is compared with numel * element_size on plain tensors and on FSDP2's DTensors.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import ddp_lab
from ddp_lab.instruments.tensor_bytes import measured_state_bytes, tensor_bytes
from ddp_lab.course.sharding.state_bytes import state_bytes_per_rank
from ddp_lab.torch_compat.fsdp import fsdp2, fsdp2_cpu_skip_reason


def test_formula_per_stage():
    assert state_bytes_per_rank(1000, 0, 4) == {"params": 4000, "grads": 4000, "optimizer": 8000}
    assert state_bytes_per_rank(1000, 1, 4) == {"params": 4000, "grads": 4000, "optimizer": 2000}
    assert state_bytes_per_rank(1000, 2, 4) == {"params": 4000, "grads": 1000, "optimizer": 2000}
    assert state_bytes_per_rank(1000, 3, 4) == {"params": 1000, "grads": 1000, "optimizer": 2000}
    assert state_bytes_per_rank(1000, 0, 1, "bf16") == {"params": 2000, "grads": 2000, "optimizer": 12000}


@pytest.mark.parametrize("args, message", [
    ((1000, 4, 2), r"stage must be 0 \(DDP\), 1, 2 or 3"),
    ((1000, 1, 3), r"n_params=1000 must divide evenly by world_size=3"),
    ((1000, 1, 2, "fp8"), r"precision must be one of \('fp32', 'bf16', 'fp16'\)"),
])
def test_formula_refuses_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        state_bytes_per_rank(*args)


def test_measured_state_bytes_counts_params_grads_and_adam_state():
    model = nn.Linear(4, 2)  # 10 parameters
    optimizer = torch.optim.Adam(model.parameters())
    assert measured_state_bytes(model.parameters(), optimizer) == {"params": 40, "grads": 0, "optimizer": 0}
    model(torch.ones(3, 4)).sum().backward()
    optimizer.step()
    assert measured_state_bytes(model.parameters(), optimizer) == {"params": 40, "grads": 40, "optimizer": 80}
    assert tensor_bytes(torch.zeros(3, dtype=torch.bfloat16)) == 6


def _collectives(rank):
    import torch.distributed as dist

    from ddp_lab.torch_compat.flat_collectives import all_gather, reduce_scatter

    full = torch.arange(4.0) + 10 * rank                 # rank 0: [0, 1, 2, 3]; rank 1: [10, 11, 12, 13]
    mine = torch.empty(2)
    reduce_scatter(mine, full)
    gathered = torch.empty(4)
    all_gather(gathered, torch.tensor([rank, rank + 0.5]))
    return mine.tolist(), gathered.tolist()


def test_collectives_on_two_ranks():
    results = ddp_lab.launch(_collectives, nprocs=2, backend="gloo")
    assert results[0] == ([10.0, 12.0], [0.0, 0.5, 1.0, 1.5])
    assert results[1] == ([14.0, 16.0], [0.0, 0.5, 1.0, 1.5])


def _fsdp_bytes(rank):
    fully_shard, _ = fsdp2()
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))   # 58 parameters; dim 0 divides by 2
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    return measured_state_bytes(model.parameters(), optimizer)


@pytest.mark.skipif(fsdp2_cpu_skip_reason() is not None, reason=str(fsdp2_cpu_skip_reason()))
def test_fsdp2_import_and_dtensor_bytes():
    fully_shard, mixed_precision_policy = fsdp2()
    assert callable(fully_shard) and isinstance(mixed_precision_policy, type)
    results = ddp_lab.launch(_fsdp_bytes, nprocs=2, backend="gloo")
    assert results[0] == results[1] == state_bytes_per_rank(58, 3, 2)

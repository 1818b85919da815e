"""ddp_lab.course.communicate_less in one process: schedules, quantisation, the outer step, the quorum rule.

The multi-rank behaviour (LocalSGD == DDP at H = 1, bytes counted, a replica killed and
recovered) is proven by notebooks/16-communicate-less.ipynb under nbval; these tests pin the
pieces that need no ranks, in milliseconds.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ddp_lab.course.communicate_less import diloco, local_sgd, streaming
from ddp_lab.course.communicate_less.quorum import Quorum, declare_absent, form_quorum


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))


def test_fragment_schedule_staggers_each_fragment_once_per_round():
    assert streaming.fragment_offsets(4, 16) == [0, 4, 8, 12]
    due = [streaming.fragments_due(step, 4, 16) for step in range(1, 33)]
    assert [p for step in due for p in step] == [1, 2, 3, 0] * 2         # one fragment at a time, each once a round
    with pytest.raises(ValueError, match="multiple of the fragment count"):
        streaming.fragment_offsets(3, 16)


def test_fragments_cover_the_parameters_in_order():
    model = _model()
    pieces = streaming.split_into_fragments(model, 3)
    assert [p for piece in pieces for p in piece] == list(model.parameters()) and len(pieces) == 3
    with pytest.raises(ValueError, match="between 1 and the 6 parameter tensors"):
        streaming.split_into_fragments(model, 7)


def test_int8_round_trip_is_within_half_a_step():
    tensor = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    q, scale = diloco.quantize_int8(tensor)
    assert q.dtype == torch.int8 and q.abs().max() == 127
    assert (q.float() * scale - tensor).abs().max() <= scale / 2 + 1e-7


def test_one_replica_diloco_step_is_nesterov_on_the_pseudo_gradient():
    model = _model()
    outer = diloco.DiLoCo(model.parameters())
    start = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.sub_(0.1)                                   # the inner steps moved every weight by -0.1
    outer.sync()
    # first step: momentum buffer = Δ = 0.1, Nesterov update = Δ + 0.9 Δ, times lr 0.7
    for p, s in zip(model.parameters(), start):
        torch.testing.assert_close(p.detach(), s - 0.7 * 1.9 * 0.1)


def test_bytes_per_sync_counts_values_and_int8_scales():
    params = list(_model().parameters())
    values = sum(p.numel() for p in params)
    assert diloco.bytes_per_sync(params) == 4 * values
    assert diloco.bytes_per_sync(params, "bf16") == 2 * values
    assert diloco.bytes_per_sync(params, "int8") == values + 4 * len(params)
    assert local_sgd.bytes_per_step(_model(), 4) == values


def test_bad_settings_say_what_to_pass():
    with pytest.raises(ValueError, match="wire must be one of"):
        diloco.DiLoCo(_model().parameters(), wire="fp8")
    with pytest.raises(ValueError, match="sync_every must be at least 1"):
        local_sgd.local_sgd_step(_model(), 0, 0)


def test_quorum_waits_for_a_join_or_an_absence_and_names_the_recovering():
    store = torch.distributed.HashStore()
    store.set("join/6/1", "6")
    store.set("join/6/2", "0")                           # a returning replica: its state is of step 0
    declare_absent(store, 3, [6])
    quorum = form_quorum(store, replica=0, step=6, state_step=6, replicas=4)
    assert quorum == Quorum(6, (0, 1, 2), (6, 6, 0))
    assert quorum.healthy == (0, 1) and quorum.recovering == (2,) and quorum.source_rank == 0
    with pytest.raises(TimeoutError, match=r"no word from replicas \[1, 2, 3\]"):
        form_quorum(store, replica=0, step=7, state_step=7, replicas=4, timeout=0.05)

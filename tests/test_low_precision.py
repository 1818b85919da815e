"""ddp_lab.course.low_precision: FP8 scaling, delayed scaling, the agreed loss scaler and FP8 all-gather bytes.

In this process (milliseconds); the scaler's and the all-gather's agreement across real ranks is
shown by notebooks/17-compile-and-low-precision.ipynb and its exercise check.
"""

from __future__ import annotations

import pytest
import torch

from ddp_lab.course.low_precision import fp8
from ddp_lab.course.low_precision.fp8_bytes import all_gather_received_bytes
from ddp_lab.course.low_precision.loss_scaling import AgreedLossScaler, clip_sharded_, found_inf_on_any_rank


def test_formats_by_role_and_their_largest_values():
    assert fp8.FORMAT_FOR_ROLE == {"weight": fp8.E4M3, "activation": fp8.E4M3, "gradient": fp8.E5M2}
    assert (fp8.fp8_max(fp8.E4M3), fp8.fp8_max(fp8.E5M2)) == (448.0, 57344.0)


def test_to_fp8_maps_amax_to_the_largest_value_per_tensor_and_per_row():
    x = torch.tensor([[1.0, -4.0, 2.0], [0.5, 0.25, -0.125]])
    x_fp8, scale = fp8.to_fp8(x, "gradient", rowwise=True)
    assert x_fp8.dtype == fp8.E5M2 and scale.shape == (2, 1)
    torch.testing.assert_close(fp8.dequantize(x_fp8, scale), x)          # powers of two: exact
    assert fp8.dequantize(x_fp8, scale).abs().amax(dim=-1).tolist() == [4.0, 0.5]
    x_fp8, scale = fp8.to_fp8(x, "weight")
    assert x_fp8.dtype == fp8.E4M3 and scale.shape == () and scale.item() == 448.0 / 4.0
    with pytest.raises(ValueError, match="role must be one of"):
        fp8.to_fp8(x, "optimizer state")


def test_quantize_clamps_instead_of_overflowing():
    values = fp8.quantize(torch.tensor([1000.0, -1000.0]), fp8.E4M3, torch.tensor(1.0)).float()
    assert values.tolist() == [448.0, -448.0]


def test_delayed_scaling_uses_the_history_before_this_step():
    delayed = fp8.DelayedScaling(fp8.E4M3, history=2)
    assert delayed.scale().item() == 1.0
    for peak in (2.0, 8.0, 4.0):
        delayed.record(torch.tensor([peak]))
    assert delayed.scale().item() == 448.0 / 8.0      # history of 2: 8 and 4; the 2 fell out
    delayed.record(torch.tensor([1.0]))
    assert delayed.scale().item() == 448.0 / 4.0


def test_loss_scale_halves_on_overflow_and_grows_after_the_interval():
    scaler = AgreedLossScaler(scale=1024.0, growth_interval=2)
    scaler.update(found_inf=True)
    assert scaler.scale == 512.0
    scaler.update(found_inf=False)
    scaler.update(found_inf=False)
    assert scaler.scale == 1024.0


def test_one_process_step_unscales_skips_and_clips():
    param = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([param], lr=1.0)
    scaler = AgreedLossScaler(scale=8.0)
    param.grad = torch.tensor([float("inf"), 0.0])
    assert not scaler.unscale_clip_and_step([param], optimizer, max_norm=1.0) and param.tolist() == [0.0, 0.0]
    assert scaler.scale == 4.0
    param.grad = torch.tensor([3.0, 4.0]) * scaler.scale          # true gradient norm 5
    assert scaler.unscale_clip_and_step([param], optimizer, max_norm=1.0)
    torch.testing.assert_close(param.detach(), torch.tensor([-0.6, -0.8]))
    assert found_inf_on_any_rank([torch.tensor([float("nan")])])
    grads = [torch.tensor([0.3, 0.4])]
    assert clip_sharded_(grads, max_norm=1.0).item() == pytest.approx(0.5) and grads[0].tolist() == pytest.approx([0.3, 0.4])


def test_all_gather_bytes_received():
    assert all_gather_received_bytes(1024, element_bytes=2, world_size=4) == 1536
    assert all_gather_received_bytes(1024, element_bytes=1, world_size=4) * 2 == 1536

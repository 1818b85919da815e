"""The planner's hand-written ZeRO (ddp_lab/plan/measure.py's FlatZero, which tests/test_plan_measured.py and lesson 13
time against the planner) trains as DDP does: same parameters after a few Adam steps on 2 gloo ranks.

It times nothing, so it lives apart from tests/test_plan_measured.py (whose tests time this machine, alone in `make
test`'s serial timing phase) and runs in the parallel phase.
"""

import torch

import ddp_lab
from ddp_lab.plan import Transformer
from ddp_lab.plan import validate as plan_validate


def _train_each(rank, configs, steps):
    """Each configuration from the same seed, one after the other in the same ranks (one launch); kind -> parameters."""
    import torch

    from ddp_lab.plan.measure import _trainer

    trained = {}
    for config in configs:
        torch.manual_seed(0)
        step, _, net = _trainer(rank, config)
        for _ in range(steps):
            step()
        trained[config.kind] = [p.detach().clone() for p in net.parameters()]
    return trained


def test_hand_written_zero_trains_like_ddp():
    """ZeRO-1 and ZeRO-2 over one flat buffer (measure.FlatZero) give DDP's parameters after 3 Adam steps."""
    tiny = Transformer("tiny", layers=2, hidden=64, heads=4, vocab=128, seq_len=32)
    configs = [c for c in plan_validate.default_configs(tiny) if c.kind in ("ddp", "zero1", "zero2")]
    trained = ddp_lab.launch(_train_each, args=(configs, 3), nprocs=2, backend="gloo")[0]
    for kind in ("zero1", "zero2"):
        for got, want in zip(trained[kind], trained["ddp"]):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)

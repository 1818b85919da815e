"""Compute probes: the FLOP/s a rank's matmuls get, and what share of it a transformer training step reaches.

The planner's calibration (`ddp_lab.plan.calibrate.measure_this_machine`) runs them once per
machine; the measured runs (`ddp_lab.plan.measure`) run them again between their timed steps,
so a prediction uses the rate of the moment (other programs on a shared machine change it).

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import time
from statistics import median

import torch

from ddp_lab.course.plan.model import Transformer
from ddp_lab.plan.reference import build
from ddp_lab.course.plan.steptime import step_flops
from ddp_lab.course.plan.strategy import Strategy

# Matmul shapes (m, k, n) like a small transformer's: (tokens, hidden) @ (hidden, 4 * hidden), ...
MATMUL_SHAPES = ((1024, 256, 1024), (1024, 1024, 256), (512, 512, 512))


def matmul_rate(dtype, seconds: float = 0.3) -> float:
    """FLOP/s of this process's matmuls (2 m k n per product), median over `MATMUL_SHAPES` and rounds.

    Each shape is timed for `seconds / 3` and at least three rounds after a warm-up, or one round
    where one product alone outlasts that budget: bf16 on a CPU without AVX-512 BF16 ran at
    1.2 GFLOP/s here (fp32: 65), 0.2-0.4 s a product, so three rounds a shape took 5 s of every
    calibration.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    rates = []
    budget = seconds / len(MATMUL_SHAPES)
    for m, k, n in MATMUL_SHAPES:
        a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
        a @ b  # warm-up: allocator, kernel choice
        rounds = []
        began = time.perf_counter()
        # three rounds at least, unless one product alone outlasts the shape's budget
        while not rounds or time.perf_counter() - began < budget or (len(rounds) < 3 and rounds[0] < budget):
            start = time.perf_counter()
            a @ b
            rounds.append(time.perf_counter() - start)
        rates.append(2 * m * k * n / median(rounds))
    return median(rates)


# The one calibrated constant of `calibrate.this_machine()`: a transformer training step does more
# than matmuls (softmax, GeLU, dropout's random masks, LayerNorm, Adam, Python's per-op dispatch),
# and on a CPU at these sizes that costs about as much again as the matmuls. Rather than a factor
# per configuration, one fixed *calibration* step - one layer of the reference decoder (hidden 256,
# 4 heads, vocabulary 512, sequence 128), 2 sequences, fp32 Adam, on one rank, no communication -
# is timed, and its FLOPs (the planner's own count) over its time, divided by the matmul rate,
# is the `matmul_efficiency` every prediction for this machine uses (the role the one published-run
# factor plays for GPUs). The configurations the planner is checked on differ from it (2 layers,
# other batches, split over ranks by DP, ZeRO, TP, PP, with communication).
CALIBRATION_SHAPE = dict(name="calibrate-1x256", layers=1, hidden=256, heads=4, vocab=512, seq_len=128)
CALIBRATION_BATCH = 2


class TransformerStepProbe:
    """Times one-rank training steps of the calibration decoder: FLOP/s a rank reaches on transformer work.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    def __init__(self):
        shape = Transformer(**CALIBRATION_SHAPE)
        self.flops = step_flops(shape, Strategy(micro_batch=CALIBRATION_BATCH, precision="fp32"))
        self.net = build(shape, seed=7).train()
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=1e-4)
        generator = torch.Generator().manual_seed(7)
        size = (CALIBRATION_BATCH, shape.seq_len)
        self.ids = torch.randint(0, shape.vocab, size, generator=generator)
        self.target = torch.randint(0, shape.vocab, size, generator=generator)
        self.step()  # warm-up: Adam's state, allocator

    def step(self) -> float:
        began = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        self.net(self.ids, self.target).backward()
        self.optimizer.step()
        return time.perf_counter() - began

    def rate(self, steps: int = 3) -> float:
        """FLOP/s: the planner's FLOPs of one step over the median of `steps` timed steps."""
        return self.flops / median([self.step() for _ in range(steps)])

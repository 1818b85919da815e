"""Step time vs world size, and the alpha-beta model of an all-reduce.

Strong scaling keeps the global batch and splits it over more ranks; weak scaling keeps the
batch per rank. On W ranks with one torch thread each, a machine with P usable cores runs at
most min(W, P) of them at once, so no measurement can beat a speedup of min(W, P): that is
the bound the lesson asserts, whatever the machine. The communication part is modelled as in
lesson 02: a send of n bytes costs alpha + beta * n, a ring all-reduce on W ranks
2 (W - 1) alpha + 2 (W - 1) / W * n * beta.

Introduced in notebooks/11-performance-and-scaling.ipynb.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import torch


class Timing(NamedTuple):
    """Median seconds per call: wall clock, and CPU time of the calling thread."""

    wall: float
    cpu: float


def time_calls(fn: Callable[[], object], repeats: int, warmup: int = 1) -> list[tuple[float, float]]:
    """Call `fn()` warmup + repeats times; return (wall, thread CPU) seconds of the last `repeats` calls.

    The thread's CPU time (`time.thread_time`) counts only what this thread computed: it does not
    grow when other processes take turns on the same core, while the wall clock does.

    Example:
        >>> samples = time_calls(lambda: sum(range(1000)), repeats=3)
        >>> len(samples)
        3

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}.")
    samples = []
    for call in range(warmup + repeats):
        wall, cpu = time.perf_counter(), time.thread_time()
        fn()
        if call >= warmup:
            samples.append((time.perf_counter() - wall, time.thread_time() - cpu))
    return samples


def median_timing(samples: Iterable[tuple[float, float]]) -> Timing:
    """The median wall and CPU seconds of (wall, cpu) samples; the median shrugs off a busy machine's hiccups.

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    samples = list(samples)
    if not samples:
        raise ValueError("median_timing needs at least one (wall, cpu) sample.")
    return Timing(statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples))


def prefix_groups(sizes: Sequence[int]) -> dict:
    """{W: process group of ranks 0 .. W-1} for each W in `sizes`, so one launch can time several world sizes.

    `dist.new_group` is collective: every rank of the launch calls this, members or not; a rank
    outside a group gets a non-member placeholder it must not use.

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    import torch.distributed as dist

    world = dist.get_world_size()
    if any(size < 1 or size > world for size in sizes):
        raise ValueError(f"group sizes {list(sizes)} must lie between 1 and the world size {world}.")
    return {size: dist.group.WORLD if size == world else dist.new_group(list(range(size))) for size in sizes}


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ping_pong_seconds(peer: int, numel: int, repeats: int, device: str | torch.device = "cpu") -> list[float]:
    """One-way send times (half a round trip) of `numel` fp32 values between this rank and `peer`.

    The lower rank sends first; both must call it with the same arguments.

    Introduced in notebooks/11-performance-and-scaling.ipynb (the method of lesson 02).
    """
    import torch.distributed as dist

    device = torch.device(device)
    tensor = torch.ones(numel, device=device)
    first = dist.get_rank() < peer
    seconds = []
    for call in range(repeats + 1):  # the first round trip warms the connection up
        _synchronize(device)
        began = time.perf_counter()
        for sending in (first, not first):
            (dist.send if sending else dist.recv)(tensor, peer)
        _synchronize(device)
        if call:
            seconds.append((time.perf_counter() - began) / 2)
    return seconds


def all_reduce_seconds(numel: int, repeats: int, group=None, device: str | torch.device = "cpu") -> list[float]:
    """Seconds per `dist.all_reduce` of `numel` fp32 values on `group` (every member calls it).

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    import torch.distributed as dist

    device = torch.device(device)
    tensor = torch.ones(numel, device=device)
    seconds = []
    for call in range(repeats + 1):  # one warm-up call
        _synchronize(device)
        began = time.perf_counter()
        dist.all_reduce(tensor, group=group)
        _synchronize(device)
        if call:
            seconds.append(time.perf_counter() - began)
    return seconds


def fit_alpha_beta(nbytes: Sequence[float], seconds: Sequence[float], relative: bool = True) -> tuple[float, float]:
    """Least squares for t = alpha + beta * n on relative error (small and large messages count alike).

    The same fit as lesson 02's, with alpha and beta kept >= 0: a negative fitted alpha or beta
    (noise) falls back to the one-term fit. relative=False fits absolute seconds instead, for
    times that are differences of noisy measurements and may come out near 0 (lesson 13's
    `Cluster.this_machine()` fits what each collective adds to a step that way, in
    ddp_lab.plan.calibrate: a step sums seconds, not ratios).

    Example:
        >>> alpha, beta = fit_alpha_beta([4, 4e6], [1e-4 + 4 * 1e-9, 1e-4 + 4e6 * 1e-9])
        >>> round(alpha * 1e6), round(beta * 1e9)
        (100, 1)

    Introduced in notebooks/02-collectives.ipynb; a package helper since notebooks/11-performance-and-scaling.ipynb.
    """
    import numpy as np

    sizes = np.asarray(nbytes, dtype=float)
    times = np.asarray(seconds, dtype=float)
    weights = 1 / times if relative else np.ones_like(times)
    design = np.stack([np.ones_like(times), sizes]) * weights
    (alpha, beta), *_ = np.linalg.lstsq(design.T, times * weights, rcond=None)
    if alpha < 0:   # bandwidth alone: t = beta * n, weighted least squares
        alpha, beta = 0.0, float(np.sum(sizes * times * weights**2) / np.sum((sizes * weights) ** 2))
    elif beta < 0:  # latency alone: the harmonic mean (relative), the mean (absolute)
        alpha, beta = float(len(times) / np.sum(1 / times) if relative else np.mean(times)), 0.0
    return float(alpha), float(beta)


def ring_all_reduce_seconds(nbytes: float, world: int, alpha: float, beta: float) -> float:
    """The alpha-beta model of a ring all-reduce: 2 (W - 1) sends of n / W bytes, one after the other.

    Example:
        >>> round(ring_all_reduce_seconds(1e6, world=2, alpha=1e-4, beta=1e-9), 6)   # 2 alpha + n beta
        0.0012

    Introduced in notebooks/02-collectives.ipynb; a package helper since notebooks/11-performance-and-scaling.ipynb.
    """
    if world == 1:
        return 0.0
    return 2 * (world - 1) * alpha + 2 * (world - 1) / world * nbytes * beta


def speedup_bound(world: int, cores: int) -> int:
    """The most W ranks of one thread each can gain over one rank on `cores` cores: min(W, cores).

    Example:
        >>> speedup_bound(4, cores=2)
        2

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    return max(1, min(world, cores))


def bus_bandwidth(nbytes: float, seconds: float, world: int) -> float:
    """NCCL-tests' bus bandwidth of an all-reduce, bytes/s: (n / t) * 2 (W - 1) / W.

    The factor makes the number comparable with a link's bandwidth: it is what each rank's
    link carried in a ring all-reduce, whatever the world size.

    Example:
        >>> bus_bandwidth(1e9, 0.01, world=2) / 1e9   # GB/s
        100.0

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    return nbytes / seconds * 2 * (world - 1) / world

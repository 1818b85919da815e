"""Timing ranks: wall and CPU time of calls, ping-pongs and all-reduces, the medians that count.

What lesson 11 measures to hold against the alpha-beta model (ddp_lab/course/alpha_beta.py) and the
bound min(W, cores) (ddp_lab/course/data_parallel/scaling.py).

Introduced in notebooks/11-performance-and-scaling.ipynb.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import torch
import torch.distributed as dist


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

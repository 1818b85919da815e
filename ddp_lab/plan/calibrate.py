"""Measure this machine for the planner: the matmul rate one rank gets, and each collective's alpha-beta.

Three measurements decide a step's time here: how fast a rank multiplies matrices, what share
of that rate a whole transformer training step reaches (`probes.CALIBRATION_SHAPE`), and what a
collective of n bytes adds to a step. All are measured on real gloo ranks, started with
`ddp_lab.launch` exactly as the runs it predicts (`measure.run`: one torch thread per rank,
`measure.RANK_THREADS`), so the planner's `this_machine()` describes the ranks that will train.

Why per-collective fits, not lesson 02's ring formula over a point-to-point alpha-beta: on
this project's 2-core machine that formula predicts gloo's `all_reduce` 2.5-9x too fast for
4 MB. Measured here (2 ranks, 1 thread each, medians, several runs under varying load; lesson
02 shows the cell): a ring step sends and receives at once, and on one machine both directions
are copied by the same cores, so 2 MB exchanged both ways took 1.5-3.8x a one-way send of 2 MB;
the ping-pong line's bandwidth (3.4-4.6 GB/s, set by small and middle-sized messages) is more
than 1-4 MB messages get one way (1.4-2.9 GB/s); a ring of two such exchanges times like
`dist.all_reduce` itself (gloo takes the same two steps); the sum (0.15 ms for 2 MB) and the
cost of handing a collective to the process group's worker thread (a one-message `broadcast`
took 0.6-1.8x a `send`) are small. So each collective gets its own t(n) = alpha + beta * n.

Why timed after compute, not after a barrier: a training step issues its collectives right
after computing, so the first rank to arrive waits for the slowest, and for gloo's threads to
wake (`_time_collectives`). Fitted after a barrier, Megatron TP's 13 all-reduces per step were
predicted at 5 ms and took 19-31 ms of a ~80 ms step here: TP, DP x TP and FSDP2
wrapped per layer, which issue many blocking collectives, came out 1.2-1.9x slower than predicted.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import time
from statistics import median

import torch
import torch.distributed as dist

import ddp_lab
from ddp_lab.course.alpha_beta import fit_alpha_beta   # lesson 02's fit
from ddp_lab.hardware.load import OtherPrograms
from ddp_lab.hardware.machine import cpu_cores
from ddp_lab.launcher.procstart import settled_zygote
from ddp_lab.course.plan.cluster_spec import ClusterSpec
from ddp_lab.plan.measure import RANK_THREADS, megatron_groups
from ddp_lab.plan.probes import TransformerStepProbe, matmul_rate
from ddp_lab.torch_compat.flat_collectives import all_gather, reduce_scatter

# Message sizes in fp32 values: 4 B ... 4 MB (a small model's gradient bucket is ~1-25 MB).
COUNTS = (1, 256, 16_384, 131_072, 1_048_576)
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "send")
# The compute each timed collective follows, in FLOPs of a (512 x 256) @ (256 x 512) matmul
# (about 4 ms on one core here, as long as the compute between two of tensor parallelism's
# all-reduces in `validate`'s model), and how many compute + collective pairs make one round.
SEGMENT_FLOPS = 5e8
SEGMENTS_PER_ROUND = 4


def _time_collectives(counts, repeats: int, group=None) -> dict:
    """Seconds each collective adds to a training step, per size: every rank's timed rounds.

    A step issues a collective right after computing, without a barrier: the ranks arrive at
    different moments, and the first to arrive waits for the slowest and for gloo's threads to
    wake. So each round is `SEGMENTS_PER_ROUND` times [a fixed matmul segment, then the
    collective], all ranks started together; beside it, rounds of the segments alone. What one
    collective adds is (slowest rank's round with it - slowest rank's round without) / segments
    (`_in_step_seconds`). Both kinds of round run with every process computing, as the run
    being predicted does, so with more ranks than cores the waits another rank fills with its
    compute do not count twice. Measured on 2 ranks of this 2-core machine: 512 KB
    all-reduces added 2-4 ms to such rounds against 0.6 ms started together after a barrier,
    and a Megatron TP step (13 all-reduces) spent 19-31 ms in them.

    Returns:
        {"segments": [seconds of each round without collectives], name: [[seconds of each
        round with that collective] per size in `counts`]} for this rank.
    """
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    samples = {(name, n): [] for name in COLLECTIVES for n in counts}
    alone = []
    buffers = {n: (torch.ones(n), torch.empty(n * world_size), torch.ones(n * world_size)) for n in counts}
    peer = (rank + 1) % world_size if rank % 2 == 0 else rank - 1
    global_peer = dist.get_global_rank(group, peer) if group is not None and peer < world_size else peer
    a, b = torch.randn(512, 256), torch.randn(256, 512)
    products = max(1, round(SEGMENT_FLOPS / (2 * 512 * 256 * 512)))

    def segment():
        for _ in range(products):
            a @ b

    def run(name, n):
        value, gathered, full = buffers[n]
        if name == "all_reduce":        # n values in, n out
            dist.all_reduce(value, group=group)
        elif name == "all_gather":      # n in, world * n out
            all_gather(gathered, value, group=group)
        elif name == "reduce_scatter":  # world * n in, n out
            reduce_scatter(value, full, group=group)
        elif peer < world_size:         # ping-pong between pairs; half a round trip = one send
            if rank % 2 == 0:
                dist.send(value, global_peer, group=group)
                dist.recv(value, global_peer, group=group)
            else:
                dist.recv(value, global_peer, group=group)
                dist.send(value, global_peer, group=group)

    def timed_round(name=None, n=None):
        dist.barrier()
        began = time.perf_counter()
        for _ in range(SEGMENTS_PER_ROUND):
            segment()
            if name is not None:
                run(name, n)
        return time.perf_counter() - began

    for n in counts:          # warm-up: connections, buffers
        for name in COLLECTIVES:
            run(name, n)
    segment()
    for _ in range(repeats):
        for n in counts:
            alone.append(timed_round())
            for name in COLLECTIVES:
                samples[name, n].append(timed_round(name, n))
    times = {name: [samples[name, n] for n in counts] for name in COLLECTIVES}
    times["segments"] = alone
    return times


def _in_step_seconds(with_collective, without, name: str) -> float:
    """One collective's cost in a step, from every rank's rounds with it and without it.

    Per kind of round: each round's slowest rank, then the median over rounds (so a burst of
    load from another program in one round does not set it); the difference over the segments
    of a round (a send is half a ping-pong).
    """
    slowest_with = median([max(rounds) for rounds in zip(*with_collective)])
    slowest_without = median([max(rounds) for rounds in zip(*without)])
    return max(0.0, slowest_with - slowest_without) / SEGMENTS_PER_ROUND / (2 if name == "send" else 1)


def _calibration_rank(rank: int, counts, repeats: int, dtypes, group_size: int) -> dict:
    world_size = dist.get_world_size()
    dist.barrier()  # every rank multiplies at the same time: the rate a rank gets while all compute
    rates = {name: matmul_rate(getattr(torch, dtype)) for name, dtype in dtypes.items()}
    dist.barrier()
    step_rate = TransformerStepProbe().rate(steps=3)
    group = None
    if group_size < world_size:   # consecutive ranks, as the tp groups of the runs (Megatron order)
        _, group = megatron_groups(rank, world_size // group_size, group_size)
    times = _time_collectives(counts, repeats, group) if group_size > 1 else {}
    return {"flops": rates, "step_rate": step_rate, "times": times, "threads": torch.get_num_threads()}


def collective_bytes(name: str, count: int, world_size: int, element_size: int = 4) -> int:
    """The n of a fitted t(n) = alpha + beta * n: bytes of the whole tensor the collective is about.

    all_reduce: the tensor reduced; all_gather: the gathered output (world_size shards);
    reduce_scatter: the input before scattering (world_size shards); send: the message.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    whole = world_size if name in ("all_gather", "reduce_scatter") else 1
    return count * whole * element_size


PRECISIONS = {"fp32": "float32", "bf16": "bfloat16"}   # the matmul rates measure_this_machine can time


def measure_this_machine(ranks: int = 2, repeats: int = 5, counts=COUNTS, timeout: float = 120,
                         group: int | None = None, precisions: tuple[str, ...] = ("fp32", "bf16")) -> dict:
    """Measure the matmul rate a rank gets and fit alpha-beta for each collective on `ranks` gloo ranks.

    Everything runs in one launch of `ranks` processes: first every rank times matmuls at once
    (the rate a rank gets while the others compute too, with the one thread `measure.RANK_THREADS`
    gives it), then the calibration step, then the collectives as a step issues them,
    each after a fixed compute segment (`_time_collectives`), round by round (the median of
    `repeats` rounds counts). About 5-8 s on a lightly loaded 2-core machine, longer while other
    programs load it (a process's first launch also waits for its zygote to import torch: ~2 s); a CPU
    without AVX-512 BF16 adds about 2.4 s for the bf16 rate (leave "bf16" out of `precisions` when only
    fp32 is planned for, as `validate` does).

    Args:
        ranks: processes (all of them compute at once, as in the run being predicted).
        repeats: timed rounds per collective and size.
        counts: message sizes in fp32 values.
        timeout: seconds before the launch gives up (a stuck rank).
        group: ranks per process group the collectives run in (default: all `ranks`); e.g.
            ranks=4, group=2 for DP x TP on 4 processes, whose collectives run in pairs while
            the other pair computes.
        precisions: the matmul rates to time ("fp32" always; "bf16" for plans in bf16 on this machine).

    Returns:
        A dict with
        - "ranks", "group", "threads" (torch threads per rank), "cores";
        - "matmul_flops": {"fp32": FLOP/s, "bf16": FLOP/s} per rank, all ranks computing (those in
          `precisions`);
        - "matmul_efficiency": the calibration step's FLOP/s over the fp32 matmul rate (see
          `probes.CALIBRATION_SHAPE`): the one calibrated constant of this machine's predictions;
        - "collectives": {name: {"alpha": s, "beta": s/byte, "world": group}} for "all_reduce",
          "all_gather", "reduce_scatter" and "send", where t(n) = alpha + beta * n is what one
          such collective adds to a training step and n is `collective_bytes(name, ...)`: the
          whole tensor (all_gather: the output, reduce_scatter: the input, send: the message);
        - "samples": {name: [(n bytes, seconds), ...]} what was fitted;
        - "other_programs": cores other programs kept busy meanwhile (`ddp_lab.hardware.load`;
          None where unknown): at QUIET_CORES or more the fits describe the load, not the machine.

    Example:
        >>> machine = measure_this_machine(ranks=2)                 # doctest: +SKIP
        >>> machine["collectives"]["all_reduce"]["alpha"] * 1e6    # doctest: +SKIP
        610.2

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks must be a positive int (the processes that will train), got {ranks!r}")
    group = ranks if group is None else group
    if isinstance(group, bool) or not isinstance(group, int) or group < 1 or ranks % group:
        raise ValueError(f"group must be a positive int that divides ranks={ranks} (ranks per process group), "
                         f"got {group!r}")
    if "fp32" not in precisions or set(precisions) - set(PRECISIONS):
        raise ValueError(f"precisions must include 'fp32' and name only {sorted(PRECISIONS)}, got {precisions!r}")
    dtypes = {name: PRECISIONS[name] for name in precisions}
    settled_zygote()   # no successor zygote importing in the background while the collectives are timed
    with OtherPrograms() as others:
        results = ddp_lab.launch(_calibration_rank, args=(tuple(counts), repeats, dtypes, group), nprocs=ranks,
                                 backend="gloo", timeout=timeout, threads=RANK_THREADS)
    flops = {name: median([r["flops"][name] for r in results]) for name in dtypes}
    step_rate = median([r["step_rate"] for r in results])
    machine = {"ranks": ranks, "group": group, "threads": results[0]["threads"], "cores": cpu_cores(),
               "matmul_flops": flops, "matmul_efficiency": step_rate / flops["fp32"],
               "collectives": {}, "samples": {}, "other_programs": others.cores}
    if group == 1:
        return machine
    for name in COLLECTIVES:
        # the slowest rank decides when a collective is over (all groups: they run at once)
        without = [r["times"]["segments"] for r in results]
        seconds = [_in_step_seconds([r["times"][name][i] for r in results], without, name) for i in range(len(counts))]
        nbytes = [collective_bytes(name, c, group) for c in counts]
        alpha, beta = fit_alpha_beta(nbytes, seconds, relative=False)
        machine["collectives"][name] = {"alpha": alpha, "beta": beta, "world": group}
        machine["samples"][name] = list(zip(nbytes, seconds))
    return machine


def this_machine(ranks: int = 2, measured: dict | None = None) -> ClusterSpec:
    """This machine as the planner's `ClusterSpec`: `measure_this_machine(ranks)` (or `measured`), then
    `ClusterSpec.from_measurements`.

    Example:
        >>> cluster = this_machine(ranks=2)        # doctest: +SKIP

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    return ClusterSpec.from_measurements(measure_this_machine(ranks=ranks) if measured is None else measured, ranks)

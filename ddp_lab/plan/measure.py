"""Run small training configurations on real gloo ranks and measure what the planner predicts.

For each configuration (DP, hand-written ZeRO-1/2, FSDP2 as ZeRO-3 - per layer as lesson 09
wraps it, or the whole model as one unit -, Megatron TP, 1F1B pipeline, DP x TP) every rank trains `ddp_lab.plan.reference`'s decoder in fp32 with Adam and reports
- model-state bytes it holds after an optimizer step (parameters, gradients, Adam's exp_avg
  and exp_avg_sq; lesson 09's `measured_state_bytes`, which leaves Adam's scalar `step` out);
- activation bytes: the peak, over one whole step, of the bytes of tensors autograd saved for
  backward and still holds, counting each storage once and leaving parameters out
  (`torch.autograd.graph.saved_tensors_hooks`; a saved tensor is released when autograd drops
  its packed form, which a finalizer notices);
- step time: the median over timed steps of the slowest rank's step (a barrier starts each step).

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from statistics import median_high

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import ddp_lab
from ddp_lab.hardware.load import OtherPrograms
from ddp_lab.instruments.tensor_bytes import measured_state_bytes
from ddp_lab.launcher.procstart import settled_zygote
from ddp_lab.plan.probes import TransformerStepProbe, matmul_rate
from ddp_lab.plan.reference import build
from ddp_lab.course.rank_layout import RankLayout
from ddp_lab.torch_compat.flat_collectives import all_gather, reduce_scatter
from ddp_lab.torch_compat.fsdp import fsdp2
from ddp_lab.torch_compat.pipelining import make_schedule, make_stage

KINDS = ("ddp", "zero1", "zero2", "fsdp2", "fsdp2_layers", "tp", "pp", "dp_tp")


# torch threads per rank in every timed run and calibration, on any machine. The launcher's default
# (cores // ranks) gave each of 2 ranks 8 threads on a 16-core GPU host (2026-11-26, torch 2.11):
# there lesson 13's predictions missed ZeRO-3 by -69 to -73 % and TP by +68 to +83 % in three
# attempts each, while with one thread per rank (this project's 2-core machine, CI) all eight
# configurations come within 30 %. Why, not confirmed: most likely many threads per rank make
# compute fast next to gloo's collectives and leave gloo's threads competing with the ranks' own.
# With one thread each, the experiment is the one the model was built and checked on, whatever
# the cores (not yet re-run on a many-core machine).
RANK_THREADS = 1

@dataclass(frozen=True)
class Config:
    """One small run: a model shape, a strategy (what the planner sees) and how it is implemented.

    Example:
        >>> from ddp_lab.plan import Strategy, Transformer
        >>> Config("DP", "ddp", Transformer("t", 2, 64, 4, 128, 32), Strategy(dp=2, precision="fp32")).ranks
        2

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    name: str
    kind: str              # one of KINDS
    model: object          # ddp_lab.plan.Transformer
    strategy: object       # ddp_lab.plan.Strategy (precision "fp32": these runs train in fp32)

    @property
    def ranks(self) -> int:
        return self.strategy.gpus


@dataclass
class Measured:
    """What one configuration's ranks measured (bytes per rank; step seconds)."""

    config: Config
    states: list = field(default_factory=list)       # per rank {"params", "grads", "optimizer"}
    activations: list = field(default_factory=list)  # per rank, peak saved bytes over one step
    step_times: list = field(default_factory=list)   # per timed step, the slowest rank's seconds
    matmul_flops: float = 0.0                         # fp32 FLOP/s a rank got between the timed steps (median)
    step_flops: float = 0.0                           # FLOP/s of the calibration step between the timed steps
    other_programs: float | None = None               # cores other programs kept busy during the launch (None: unknown)
    threads: int = 0                                  # torch threads each rank had (RANK_THREADS)

    @property
    def step_time(self) -> float:
        """Median of the timed steps."""
        return median_high(self.step_times)


# ---- counting saved activations --------------------------------------------------------------
class _Packed:
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


class SavedTensorCounter:
    """Live and peak bytes of the tensors autograd saves for backward: unique storages, no parameters.

    Use as a context manager around forward and backward. A tensor counts while autograd holds
    it (from the forward op that saves it until backward has used it, or the graph is freed);
    views of one storage count once, with the whole storage's bytes, which is what memory holds.

    Example:
        >>> layer = torch.nn.Linear(4, 4)
        >>> with SavedTensorCounter() as counter:
        ...     layer(torch.randn(2, 4)).relu().sum().backward()
        >>> counter.peak          # the linear's input and relu's output, 2 x 4 fp32 each (the weight is left out)
        64

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    def __init__(self):
        self.live: dict[int, list[int]] = {}   # storage pointer -> [holders, bytes]
        self.current = 0
        self.peak = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def __enter__(self):
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        return self._hooks.__exit__(*exc)

    @staticmethod
    def _is_parameter(tensor) -> bool:
        # a weight, or a view of one (linear saves weight.t()); FSDP2's gathered weights are
        # Parameters too. Not "any leaf that requires grad": a pipeline stage's input is one.
        base = tensor._base if tensor._base is not None else tensor
        return isinstance(base, torch.nn.Parameter)

    def _pack(self, tensor):
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor   # DTensor -> its shard
        if self._is_parameter(tensor) or self._is_parameter(local):
            return tensor
        storage = local.untyped_storage()
        # The storage's identity, not its data pointer: fake and meta tensors (ddp_lab.plan.fullsize
        # counts a full-size model with them) all have data pointer 0, but each its own StorageImpl,
        # which `_cdata` addresses (torch.multiprocessing's StorageWeakRef keys storages the same way).
        pointer, nbytes = storage._cdata, storage.nbytes()
        entry = self.live.setdefault(pointer, [0, nbytes])
        if entry[0] == 0:
            self.current += nbytes
            self.peak = max(self.peak, self.current)
        entry[0] += 1
        packed = _Packed(tensor)
        weakref.finalize(packed, self._release, pointer)
        return packed

    def _release(self, pointer: int) -> None:
        entry = self.live[pointer]
        entry[0] -= 1
        if entry[0] == 0:
            self.current -= entry[1]
            del self.live[pointer]

    @staticmethod
    def _unpack(packed):
        return packed.tensor if isinstance(packed, _Packed) else packed


# ---- ZeRO-1/2 by hand over one flat buffer ---------------------------------------------------
class FlatZero:
    """ZeRO stage 1 or 2 (Rajbhandari et al. 2020; lesson 09) over one flat fp32 buffer, shards exactly Ψ/N.

    All parameters live in one flat tensor, so each of the N ranks owns exactly Ψ/N values of
    it (`torch.distributed.optim.ZeroRedundancyOptimizer` shards whole parameters, unevenly).
    After backward: reduce-scatter the gradients (this rank gets the sum of its shard), Adam on
    the shard, all-gather the parameters. Stage 1 keeps the full gradient buffer (Ψ values),
    stage 2 frees it and keeps only its Ψ/N-value shard.
    """

    def __init__(self, module, stage: int, group=None, lr: float = 1e-3):
        self._gather, self._scatter = all_gather, reduce_scatter
        self.params = list(module.parameters())
        self.stage, self.group = stage, group
        self.world, rank = dist.get_world_size(group), dist.get_rank(group)
        total = sum(p.numel() for p in self.params)
        if total % self.world:
            raise ValueError(f"{total} parameters do not divide by {self.world} ranks: choose sizes that divide")
        self.flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        offset = 0
        for p in self.params:  # every parameter becomes a view of the flat buffer
            p.data = self.flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        size = total // self.world
        self.slice = slice(rank * size, (rank + 1) * size)
        self.shard = torch.nn.Parameter(self.flat[self.slice])   # shares the flat buffer's storage
        self.grad_shard = torch.zeros(size) if stage == 2 else None
        self.optimizer = torch.optim.Adam([self.shard], lr=lr)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        grads = torch.cat([p.grad.reshape(-1) for p in self.params])   # (Ψ,)
        out = torch.empty(self.slice.stop - self.slice.start)
        self._scatter(out, grads)                                       # this rank: the sum of its shard
        out /= self.world
        if self.stage == 2:
            self.zero_grad()                                            # full gradients freed
            self.grad_shard.copy_(out)
            self.shard.grad = self.grad_shard
        else:
            grads[self.slice] = out
            offset = 0
            for p in self.params:                                      # stage 1 keeps Ψ gradient values
                p.grad = grads[offset:offset + p.numel()].view_as(p)
                offset += p.numel()
            self.shard.grad = grads[self.slice]
        self.optimizer.step()
        self._gather(self.flat, self.shard.detach().clone())

    def state_bytes(self) -> dict[str, int]:
        extra = [self.grad_shard] if self.stage == 2 else []
        return measured_state_bytes(self.params, self.optimizer, extra_grads=extra)


# ---- one rank ------------------------------------------------------------------------------
def megatron_groups(rank: int, dp: int, tp: int):
    """Megatron order, tp fastest: this rank's (dp group, tp group); None for a size-1 axis.

    Every rank must call it (each creates every group, in the same order). The calibration
    (`calibrate.measure_this_machine(ranks, group=)`) times its collectives in the same tp groups.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    layout, mine = RankLayout(dp=dp, tp=tp), {}
    for axis in ("tp", "dp"):   # every rank creates every group, in the same order
        for ranks in layout.groups(axis):
            group = dist.new_group(ranks) if len(ranks) > 1 else None
            if rank in ranks:
                mine[axis] = group
    return mine["dp"], mine["tp"]


def _batch(config: Config, data_rank: int, sequences: int):
    generator = torch.Generator().manual_seed(1234 + data_rank)
    shape = (sequences, config.model.seq_len)
    return (torch.randint(0, config.model.vocab, shape, generator=generator),
            torch.randint(0, config.model.vocab, shape, generator=generator))


def _trainer(rank: int, config: Config):
    """(step function, state-bytes function, this rank's module) for this rank's part of `config`."""
    s = config.strategy
    kind = config.kind
    if kind == "pp":
        return _pipeline_trainer(rank, config)
    dp_group, tp_group = megatron_groups(rank, s.dp, s.tp)
    net = build(config.model, tp_group=tp_group).train()
    ids, target = _batch(config, rank // s.tp, s.micro_batch)
    if kind in ("fsdp2", "fsdp2_layers"):
        fully_shard, _ = fsdp2()
        if kind == "fsdp2_layers":   # lesson 09's wrapping: one unit per layer, then the root
            for layer in net.layers:
                fully_shard(layer)
        fully_shard(net)
    if kind in ("zero1", "zero2"):
        zero = FlatZero(net, stage=int(kind[-1]), group=dp_group)

        def step():
            zero.zero_grad()
            net(ids, target).backward()
            zero.step()
        return step, zero.state_bytes, net
    model = net
    if kind in ("ddp", "dp_tp") and s.dp > 1:
        model = DistributedDataParallel(net, process_group=dp_group)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step():
        optimizer.zero_grad(set_to_none=True)
        model(ids, target).backward()
        optimizer.step()
    return step, lambda: measured_state_bytes(net.parameters(), optimizer), net


def _pipeline_trainer(rank: int, config: Config):
    """1F1B over pp stages of the reference (torch.distributed.pipelining via lesson 07's helpers)."""
    s, m = config.strategy, config.model
    if s.dp != 1 or s.tp != 1:
        raise ValueError("the pipeline configuration here runs pp alone (dp = tp = 1)")
    net = build(m, stage=rank, stages=s.pp).train()
    ids, target = _batch(config, 0, s.micro_batch * s.grad_accum)
    example = ids[: s.micro_batch] if rank == 0 else torch.zeros(s.micro_batch, m.seq_len, m.hidden)
    stage = make_stage(net, rank, s.pp, example)

    def loss_fn(logits, labels):
        return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())

    schedule = make_schedule({"gpipe": "ScheduleGPipe"}.get(s.schedule, "Schedule1F1B"), [stage],
                             s.grad_accum, loss_fn)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    first, last = rank == 0, rank == s.pp - 1
    tied = m.tied_embeddings and s.pp > 1 and (first or last)
    pair = dist.new_group([0, s.pp - 1]) if m.tied_embeddings and s.pp > 1 else None

    def step():
        optimizer.zero_grad(set_to_none=True)
        if first:
            schedule.step(ids)
        elif last:
            schedule.step(target=target, losses=[])
        else:
            schedule.step()
        if tied:  # the two copies of the word embedding get the sum of both gradients (Megatron-LM)
            weight = net.embed.weight if first else net.head.weight
            dist.all_reduce(weight.grad, group=pair)
        optimizer.step()
    return step, lambda: measured_state_bytes(net.parameters(), optimizer), net


def _rank_main(rank: int, config: Config, steps: int, warmup: int, probe_seconds: float) -> dict:
    probe = TransformerStepProbe()
    torch.manual_seed(0)
    step, state_bytes, _ = _trainer(rank, config)
    step()                                   # first step: lazy state (Adam, buffers) appears
    with SavedTensorCounter() as counter:    # one step with the hooks (not timed)
        step()
    for _ in range(warmup):
        step()
    probe.rate(steps=1)                      # its own warm-up
    times, rates = [], []
    for _ in range(steps):
        # the matmul rate, measured between the steps on every rank at once: on a shared machine
        # the load changes from minute to minute, and this is the rate the steps around it got
        dist.barrier()
        rates.append((matmul_rate(torch.float32, seconds=probe_seconds), probe.rate(steps=2)))
        dist.barrier()
        began = time.perf_counter()
        step()
        times.append(time.perf_counter() - began)
    return {"states": state_bytes(), "activations": counter.peak, "times": times, "rates": rates,
            "threads": torch.get_num_threads()}


def run(config: Config, steps: int = 5, warmup: int = 0, probe_seconds: float = 0.06,
        timeout: float = 300) -> Measured:
    """Train `config` on `config.ranks` gloo ranks and return what each rank measured.

    Args:
        config: the configuration (its strategy must say precision="fp32": the runs are fp32).
        steps: timed steps (their median is the step time); warmup: untimed steps before them
            (after one step that creates Adam's state and one that counts activations).
        probe_seconds: length of each matmul-rate probe run before every timed step (it is
            followed by two steps of `probes.TransformerStepProbe`).

    Example:
        >>> from ddp_lab.plan.validate import default_configs
        >>> run(default_configs()[0]).step_time          # doctest: +SKIP
        0.112

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    if config.kind not in KINDS:
        raise ValueError(f"Config.kind must be one of {KINDS}, got {config.kind!r}")
    if config.strategy.precision != "fp32":
        raise ValueError(f"these runs train in fp32 on CPU; give the strategy precision='fp32' "
                         f"(got {config.strategy.precision!r}) so the planner predicts the same thing")
    settled_zygote()   # no successor zygote importing in the background while the steps are timed (nor in the window)
    with OtherPrograms() as others:
        results = ddp_lab.launch(_rank_main, args=(config, steps, warmup, probe_seconds), nprocs=config.ranks,
                                 backend="gloo", timeout=timeout, threads=RANK_THREADS)
    slowest = [max(r["times"][i] for r in results) for i in range(steps)]
    return Measured(config, [r["states"] for r in results], [r["activations"] for r in results], slowest,
                    median_high(rate for r in results for rate, _ in r["rates"]),
                    median_high(rate for r in results for _, rate in r["rates"]), others.cores,
                    max(r["threads"] for r in results))

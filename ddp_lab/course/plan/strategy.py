"""How the work is split: data, tensor, pipeline, context and expert parallel sizes, ZeRO stage, batch, recomputation.

A `Strategy` alone knows nothing of the model; `check(model, strategy, gpus)` says whether the
two fit together (tp divides the heads, pp divides the layers, ...) and, if not, how to fix it.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace

from ddp_lab.course.plan import (context_parallel, expert_tp, experts, hybrid_shard, op_checkpoint, outer_sync,
                                 pipeline_stages)
from ddp_lab.course.rank_layout import RankLayout
from ddp_lab.course.plan.attention_kernels import FLASH_KERNELS
from ddp_lab.course.plan.precision import PRECISIONS   # "fp32", "bf16", "fp16" (ZeRO's table), "fp8" and "mxfp8"

SCHEDULES = ("gpipe", "1f1b", "interleaved")
RECOMPUTE = ("none", "selective", "full", "op")
FSDP_UNITS = ("layer", "model")
ATTENTION = ("flash", "eager")
MOE_DISPATCHES = ("all-to-all", "per-node")   # how a MoE layer's tokens reach their experts (experts.py)


# the fields that hold a count (None allowed for the last four)
INTEGER_FIELDS = ("dp", "tp", "pp", "zero", "micro_batch", "grad_accum", "virtual_stages", "cp", "ep", "sync_every",
                  "replicas", "dp_shard", "expert_tp", "first_stage_layers", "last_stage_layers")


@dataclass(frozen=True)
class Strategy:
    """One way to train: dp x tp x pp (x cp) ranks, ZeRO stage, micro-batches, recomputation, precision.

    The global batch (in sequences) is dp * micro_batch * grad_accum; with pp > 1 the
    grad_accum micro-batches are the pipeline's micro-batches. cp ranks split each sequence
    (context parallelism, lesson 15): the world is dp x tp x pp x cp and the batch does not
    change. ep (expert parallelism, lesson 14) adds no ranks: it splits a MoE model's experts over
    ep of the dp x cp ranks, so it must divide dp x cp (ddp_lab.course.rank_layout; Megatron-Core
    and torchtitan carve it out of the data-parallel ranks the same way); with an expert_tp below tp,
    out of the tp x cp x dp / expert_tp ranks the experts are laid out over (expert_tp.py).

    Example:
        >>> Strategy(dp=8, tp=4, zero=1, micro_batch=2, grad_accum=16).global_batch
        256

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    zero: int = 0                 # 0 (DDP), 1 (optimizer), 2 (+ gradients), 3 (+ parameters = FSDP)
    micro_batch: int = 1          # sequences per micro-batch per model replica
    grad_accum: int = 1           # micro-batches per step per replica (= pipeline micro-batches when pp > 1)
    schedule: str = "1f1b"        # "gpipe", "1f1b", "interleaved" (virtual_stages > 1)
    virtual_stages: int = 1
    sequence_parallel: bool = False
    recompute: str = "none"       # "none", "selective" (attention core only), "full" (whole layer), "op" (torchtitan's
                                  # per-op policy: every second matmul, op_checkpoint.py)
    precision: str = "bf16"       # "bf16"/"fp16": mixed precision, "fp32": everything in fp32, "fp8"/"mxfp8": linear
                                  # GEMMs in FP8 (precision.py)
    fsdp_unit: str = "layer"      # ZeRO-3: "layer" (one FSDP unit per layer + the root, lesson 09) or "model"
    attention: str = "flash"      # "flash": fused kernel, no s x s scores kept (Dao et al. 2022); "eager": Korthikanti's
    fp32_grads: bool = False      # mixed precision with fp32 gradients (Megatron-LM's main_grad, Llama 3): 4 bytes, not 2
    cp: int = 1                   # context-parallel size: ranks that split each sequence (lesson 15)
    ep: int = 1                   # expert-parallel size: of the dp x cp ranks, how many split the experts (lesson 14)
    checkpoint_early_stop: bool = False   # full recomputation by PyTorch's non-reentrant checkpoint, which stops
                                          # once backward's tensors exist (efficiency.recompute_skips_last_gemm)
    tp_comm_overlap: bool = False  # sequence parallelism's all-gathers/reduce-scatters run in chunks beside the GEMMs
                                   # (Megatron-LM's --tp-comm-overlap; tp_overlap.py)
    overlap_param_gather: bool = False    # ZeRO-1/2: the weights' all-gather after the optimizer runs beside the next
                                          # step's first forward (Megatron-LM's --overlap-param-gather); else exposed
    first_stage_layers: int | None = None   # uneven pipeline: layers of the first stage (Megatron-LM's
    last_stage_layers: int | None = None    # --decoder-first/last-pipeline-num-layers); None: an equal share
    sync_every: int = 1           # DiLoCo-style outer sync: replicas exchange pseudo-gradients once every H steps
    replicas: int = 1             # of the dp ranks, how many DiLoCo replicas (each dp / replicas ranks, synced every step)
    sync_precision: str = "fp32"  # the pseudo-gradient on the wire: "fp32", "bf16" or "int8" (INTELLECT-1)
    dp_shard: int | None = None   # HSDP: ZeRO-3 inside groups of dp_shard dp ranks, replicated across them
                                  # (FSDP2's 2-D mesh, torchtitan's shard degree; hybrid_shard.py); None: all dp
    expert_tp: int | None = None  # routed experts' tensor-parallel size, dividing tp (Megatron-Core's
                                  # --expert-tensor-parallel-size; expert_tp.py); None: the attention's tp
    flash_kernel: str = "fa2"     # which kernel runs flash attention: "fa2" (FlashAttention-2; PyTorch's SDPA to
                                  # 2.8) or "cudnn" (Transformer Engine on Hopper+, PyTorch's SDPA on H100/H200/
                                  # B200 in later builds, FlashAttention-3's class): attention_kernels.py
    moe_dispatch: str = "all-to-all"   # how MoE tokens reach their experts: "all-to-all" (NCCL's: a copy per
                                       # expert crosses the network, the received rows then sorted by expert) or
                                       # "per-node" (DeepEP, HybridEP: a copy per node, then NVLink, permuted on
                                       # arrival; experts.dispatch_seconds, experts.sorts_received_rows)
    ep_overlap: bool = False      # expert parallelism's all-to-alls of one micro-batch run beside another's compute
                                  # (Megatron-Core's combined 1F1B, --overlap-moe-expert-parallel-comm; ep_overlap.py)
    expert_imbalance: float = 1.0   # routed tokens on the busiest expert-parallel rank over a balanced share
                                    # (1: balanced routing); what it slows: experts.busiest_rank_load

    def __post_init__(self) -> None:
        for field in INTEGER_FIELDS:     # numpy's integers (a loop over np.arange) are kept as Python's
            value = getattr(self, field)
            if type(value) is not int and isinstance(value, numbers.Integral) and not isinstance(value, bool):
                object.__setattr__(self, field, int(value))
        for field in ("dp", "tp", "pp", "micro_batch", "grad_accum", "virtual_stages", "cp", "ep", "sync_every",
                      "replicas"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Strategy.{field} must be an integer >= 1, got {value!r}")
        if self.zero not in (0, 1, 2, 3) or isinstance(self.zero, bool):
            raise ValueError(f"Strategy.zero must be 0 (DDP), 1, 2 or 3 (FSDP full sharding), got {self.zero!r}")
        for field, allowed in (("schedule", SCHEDULES), ("recompute", RECOMPUTE), ("precision", PRECISIONS),
                               ("fsdp_unit", FSDP_UNITS), ("attention", ATTENTION),
                               ("flash_kernel", FLASH_KERNELS), ("moe_dispatch", MOE_DISPATCHES)):
            if getattr(self, field) not in allowed:
                raise ValueError(f"Strategy.{field} must be one of {allowed}, got {getattr(self, field)!r}")
        experts.check_imbalance(self.expert_imbalance)
        if self.sequence_parallel and self.tp == 1:
            raise ValueError("sequence_parallel=True needs tp > 1: sequence parallelism splits the "
                             "LayerNorm/dropout activations across the tensor-parallel group")
        if self.fp32_grads and not self.mixed:
            raise ValueError("fp32_grads=True keeps 4-byte gradients under bf16/fp16 mixed precision; with "
                             "precision='fp32' the gradients are fp32 already: drop fp32_grads")
        op_checkpoint.check_fields(self)  # per-op checkpointing keeps the flash kernel's output
        if self.flash_kernel != "fa2" and (self.attention != "flash" or self.precision == "fp32"):
            raise ValueError(f"the flash kernel {self.flash_kernel!r} is a bf16/fp16 flash-attention kernel, and "
                             f"with {self.attention} attention in {self.precision} none runs: keep the flash kernel "
                             f"at 'fa2', or plan flash attention in bf16")
        if self.checkpoint_early_stop and self.recompute != "full":
            raise ValueError(f"checkpoint_early_stop=True describes full recomputation by PyTorch's non-reentrant "
                             f"checkpoint; with recompute={self.recompute!r} there is no recomputation for it to stop: "
                             f"use recompute='full' or drop checkpoint_early_stop")
        expert_tp.check_fields(self)      # ep divides dp x cp, or tp x cp x dp / expert_tp when that is given
        hybrid_shard.check_fields(self)   # dp_shard divides dp, with ZeRO-3
        _check_communication(self)
        pipeline_stages.check_fields(self)
        if (self.schedule == "interleaved") != (self.virtual_stages > 1):
            raise ValueError(f"schedule={self.schedule!r} with virtual_stages={self.virtual_stages}: use "
                             f"schedule='interleaved' exactly when virtual_stages > 1")

    @property
    def gpus(self) -> int:
        """Ranks used: dp * tp * pp * cp (ep adds none)."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step: dp * micro_batch * grad_accum."""
        return self.dp * self.micro_batch * self.grad_accum

    @property
    def layout(self) -> RankLayout:
        """Which ranks form the tp, cp, dp, pp (and ep) groups (Megatron order, tp fastest).

        The experts' groups are expert_tp.group's; they equal this layout's "ep" and "edp" when expert_tp is the
        attention's tp, and an expert_tp below it (ep beyond dp x cp) has them only there.
        """
        ep = self.ep if expert_tp.size(self) == self.tp else 1
        return RankLayout(dp=self.dp, tp=self.tp, pp=self.pp, cp=self.cp, ep=ep)

    @property
    def forward_runs(self) -> int:
        """How many times a micro-batch's forward runs: 2 under full recomputation (again before its backward), else 1
        (activations.py; notebooks/13-plan-your-training-run.ipynb)."""
        return 2 if self.recompute == "full" else 1

    @property
    def mixed(self) -> bool:
        """True for bf16/fp16 mixed precision (half-precision weights + fp32 master copy)."""
        return self.precision != "fp32"

    def with_(self, **changes) -> "Strategy":
        """A copy with some fields changed, e.g. `strategy.with_(zero=3)`."""
        return replace(self, **changes)

    def label(self) -> str:
        """Short text such as 'dp8 tp4 pp2 z1 mb1x16 sp sel' (the table's first column; see report.LEGEND).

        Only what differs from the defaults is named: cp and ep above 1 ('dp8 tp8 cp16 pp16 z2 ...',
        'dp8 tp1 pp1 ep8 z1 ...'), 'etp1' (the experts' own tensor-parallel size), 'v2' (virtual stages), 'eager' (attention), 'g32' (fp32 gradients), 'full-es'
        (full recomputation that stops early: PyTorch's non-reentrant checkpoint), 'tpo' (TP communication
        overlapped), 'opg' (ZeRO-1/2 parameter gather overlapped), 'L7/7' (the first and last pipeline stages' layers),
        'r14/100-int8' (14 DiLoCo replicas synced every 100 steps, int8 pseudo-gradients), 'hsdp8' (ZeRO-3 inside
        groups of 8 dp ranks, replicated across them), 'per-node' (MoE tokens dispatched once per node). Not named:
        expert_imbalance, a property of the run's routing rather than of its layout, which a search puts on every plan
        with ep > 1 and the command line says in its header and its assumptions.
        """
        parts = [f"dp{self.dp}", f"tp{self.tp}"] + ([f"cp{self.cp}"] if self.cp > 1 else []) + [f"pp{self.pp}"]
        parts += [f"ep{self.ep}"] if self.ep > 1 else []
        parts += [f"etp{self.expert_tp}"] if expert_tp.size(self) != self.tp else []
        parts += [f"z{self.zero}"] + ([f"hsdp{self.dp_shard}"] if self.dp_shard is not None else [])
        parts += [f"mb{self.micro_batch}x{self.grad_accum}"]
        if self.virtual_stages > 1:
            parts.append(f"v{self.virtual_stages}")
        if self.sequence_parallel:
            parts.append("sp")
        if self.recompute != "none":
            parts.append({"selective": "sel", "op": "op",
                          "full": "full-es" if self.checkpoint_early_stop else "full"}[self.recompute])
        if self.attention != "flash":
            parts.append(self.attention)
        elif self.flash_kernel != "fa2":
            parts.append(self.flash_kernel)
        if self.fp32_grads:
            parts.append("g32")
        if self.moe_dispatch != "all-to-all":
            parts.append(self.moe_dispatch)
        if self.tp_comm_overlap:
            parts.append("tpo")
        if self.ep_overlap:
            parts.append("epo")
        if self.overlap_param_gather:
            parts.append("opg")
        if self.first_stage_layers is not None or self.last_stage_layers is not None:
            parts.append(f"L{pipeline_stages.describe(self)}")
        if self.replicas > 1:
            parts.append(f"r{self.replicas}/{self.sync_every}" + ("" if self.sync_precision == "fp32" else
                                                                   f"-{self.sync_precision}"))
        return " ".join(parts)


def check(model, strategy: Strategy, gpus: int | None = None, gpus_per_node: int | None = None,
          tp_across_nodes: bool = False, region_gpus: int | None = None) -> None:
    """Raise ValueError (saying how to fix it) if `strategy` cannot run `model` on `gpus` GPUs.

    Rules: dp*tp*pp == gpus; tp divides heads and kv_heads (each rank owns whole heads,
    Megatron-LM's column split, lesson 08); tp divides the FFN size and vocab-parallel
    embedding rows are padded (so no rule on vocab); pp*virtual_stages divides layers
    (equal stages, lesson 07; or the first and last stage given, `pipeline_stages`); tp divides gpus_per_node
    (every tensor-parallel group inside one node: `rank_layout.Group.spans_nodes`) unless tp_across_nodes; HSDP's
    shard groups whole inside a node and a region of region_gpus GPUs, or made of whole ones (`hybrid_shard.check`).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> check(Transformer.preset("llama3-8b"), Strategy(dp=4, tp=8), gpus=32, gpus_per_node=8)

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    check_gpu_count(strategy.dp, strategy.tp, strategy.pp, strategy.cp, gpus)
    hybrid_shard.check(model, strategy, gpus_per_node, region_gpus)
    straddling = outer_sync.straddled(strategy, gpus_per_node, region_gpus)   # a replica cut by a node or region
    if straddling:
        raise ValueError(straddling)
    # the tp sizes every tp rule below allows (heads, kv heads, FFN, experts, the node), which each message offers
    in_node = gpus_per_node is not None and not tp_across_nodes
    whole_heads = [d for d in divisors(_gcd(model.heads, model.kv_heads_))
                   if not model.ffn_ % d and experts.splits_for_tp(model, d) and not (in_node and gpus_per_node % d)]
    if model.heads % strategy.tp:
        raise ValueError(f"tp={strategy.tp} does not divide heads={model.heads} of {model.name}: each "
                         f"tensor-parallel rank owns whole heads; use tp in {whole_heads}")
    if model.kv_heads_ % strategy.tp:
        # Grouped-query attention: the kv heads, fewer than the query heads, bound tp first.
        raise ValueError(f"tp={strategy.tp} does not divide the {model.kv_heads_} kv heads of {model.name} "
                         f"(grouped-query attention: {model.heads} query heads share {model.kv_heads_} key/value "
                         f"heads): each tensor-parallel rank owns whole kv heads; use tp in {whole_heads}")
    if model.ffn_ % strategy.tp:
        raise ValueError(f"tp={strategy.tp} does not divide the FFN size {model.ffn_} of {model.name}; "
                         f"use tp in {whole_heads}")
    stages = strategy.pp * strategy.virtual_stages
    if pipeline_stages.uneven(strategy):
        pipeline_stages.check(model, strategy)      # first/last stage given: the rest split evenly
    elif model.layers % stages:
        if strategy.virtual_stages == 1:
            raise ValueError(f"pp={strategy.pp} does not divide layers={model.layers} of {model.name}: "
                             f"stages must hold equal numbers of layers; use pp {_one_of(divisors(model.layers))}"
                             + _ends_advice(model.layers, stages, "stage"))
        if model.layers % strategy.pp:     # no number of virtual stages splits them equally
            fix = f"use pp {_one_of(divisors(model.layers))}"
        else:
            fix = f"use virtual stages {_one_of(divisors(model.layers // strategy.pp))}"
        raise ValueError(f"pp x virtual stages = {strategy.pp} x {strategy.virtual_stages} = {stages} does not divide "
                         f"layers={model.layers} of {model.name}: every virtual stage holds the same number of layers; "
                         + fix + _ends_advice(model.layers, stages, "virtual stage"))
    if strategy.pp > 1 and strategy.schedule == "interleaved" and strategy.grad_accum % strategy.pp:
        raise ValueError(f"the interleaved schedule needs micro-batches ({strategy.grad_accum}) divisible by "
                         f"pp={strategy.pp} (Narayanan et al. 2021); change grad_accum")
    op_checkpoint.check(model, strategy)      # per-op checkpointing: bias-free dense SwiGLU blocks only
    experts.check(model, strategy)            # ep splits whole experts of a MoE model (lesson 14)
    context_parallel.check(model, strategy)   # cp: 2 x cp equal chunks of the sequence (lesson 15)
    if in_node and gpus_per_node % strategy.tp:
        # tp ranks are consecutive (rank_layout): a tp that does not divide the node puts some groups across two
        where = "is larger than the" if strategy.tp > gpus_per_node else "does not divide the"
        raise ValueError(f"tp={strategy.tp} {where} {gpus_per_node} GPUs of one node, so some tensor-parallel group "
                         f"spans nodes: tensor parallelism communicates in every layer and belongs on the fast "
                         f"intra-node link; use tp in {whole_heads}, or ask to cost it on the inter-node "
                         f"link (tp_across_nodes=True; --tp-across-nodes on the command line)")


def _ends_advice(layers: int, stages: int, what: str) -> str:
    """', or give the first and the last <what> their own: first_stage_layers=.. last_stage_layers=..' where
    pipeline_stages.fewer_at_the_ends splits `layers` over `stages` (model) stages, else ''."""
    split = pipeline_stages.fewer_at_the_ends(layers, stages)
    return (f", or give the first and the last {what} their own: first_stage_layers={split[0]} "
            f"last_stage_layers={split[1]}") if split else ""


def check_gpu_count(dp: int, tp: int, pp: int, cp: int, gpus: int | None) -> None:
    """check's first rule, dp x tp x pp x cp = gpus, on the sizes alone (the command line asks it before building a
    Strategy, whose own field rules would speak first)."""
    if gpus is not None and dp * tp * pp * cp != gpus:
        sizes = {"dp": dp, "tp": tp, "pp": pp, **({"cp": cp} if cp > 1 else {})}
        raise ValueError(f"{'*'.join(sizes)} = {'*'.join(map(str, sizes.values()))} = {dp * tp * pp * cp} but the "
                         f"cluster has {gpus} GPUs: choose {', '.join(sizes)} whose product is {gpus}")


def _check_communication(strategy: Strategy) -> None:
    """The communication options' own rules (tp_comm_overlap, overlap_param_gather, ep_overlap, the outer sync)."""
    if strategy.tp_comm_overlap and not strategy.sequence_parallel:
        raise ValueError("tp_comm_overlap=True overlaps sequence parallelism's all-gathers and reduce-scatters with "
                         "the GEMMs beside them (Megatron-LM asks for --sequence-parallel with --tp-comm-overlap): "
                         "set sequence_parallel=True (--sequence-parallel), or drop tp_comm_overlap")
    if strategy.overlap_param_gather and strategy.zero not in (1, 2):
        raise ValueError(f"overlap_param_gather=True overlaps ZeRO-1/2's all-gather of the updated weights with the "
                         f"next forward; zero={strategy.zero} has no such gather (ZeRO-3 gathers unit by unit "
                         f"anyway): use zero=1 or 2, or drop overlap_param_gather")
    # Megatron-Core's own rules for the overlap (TransformerConfig; Megatron-Bridge's comm-overlap checks the same);
    # ep > 1 is checked with the model (experts.check)
    if strategy.ep_overlap and strategy.recompute == "full":
        raise ValueError("ep_overlap=True with recompute='full': Megatron-Core refuses the all-to-all overlap under "
                         "full recomputation ('disable full recomputation when enabling "
                         "overlap_moe_expert_parallel_comm'): use recompute='selective' or 'none', or drop ep_overlap")
    if strategy.ep_overlap and strategy.precision == "fp32":
        raise ValueError("ep_overlap=True needs a bf16 or fp16 model (Megatron-Core: 'overlap_moe_expert_parallel_comm "
                         "is only supported with bf16 or fp16 model'), and precision='fp32' is neither: train in "
                         "precision='bf16', or drop ep_overlap")
    if strategy.ep_overlap and strategy.pp > 1 and strategy.schedule != "interleaved":
        raise ValueError(f"ep_overlap=True with pp={strategy.pp} needs the interleaved schedule (Megatron-Core asks "
                         f"for a virtual pipeline size with --overlap-moe-expert-parallel-comm when pp > 1): use the "
                         f"interleaved schedule (virtual_stages > 1), or drop ep_overlap")
    outer_sync.check_fields(strategy)


def _one_of(values: list[int]) -> str:
    """'1, 2 or 4' for [1, 2, 4]; '1' for [1]."""
    return " or ".join(filter(None, [", ".join(map(str, values[:-1])), str(values[-1])]))


def divisors(n: int) -> list[int]:
    """Divisors of n in increasing order, e.g. divisors(12) == [1, 2, 3, 4, 6, 12]; [] for n < 1.

    Each divisor d up to sqrt(n) pairs with n // d above it, so only the numbers up to sqrt(n) are tried (2,828 of
    them for 8 million GPUs).
    """
    if n < 1:
        return []
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a

"""Mixture-of-experts models in the planner: parameter counts, expert-parallel state, the all-to-all.

A mixture-of-experts (MoE) layer replaces the FFN by `experts` FFNs of inner size `expert_ffn`,
a router (a hidden x experts matrix, no bias) that sends each token to its `top_k` experts, and
optionally `shared_experts` FFNs of the same size that every token passes through (DeepSeekMoE,
Dai et al. 2024, arXiv:2401.06066, Sec. 3.2; Qwen-MoE's one shared expert k times as wide counts as k,
and its `shared_gate`, a hidden x 1 matrix whose sigmoid scales that expert's output, is counted with the
router). The first `dense_layers` layers keep a dense FFN of
the model's `ffn` size (DeepSeekMoE 16B replaces every FFN but the first: "first_k_dense_replace"
in its config.json). Per MoE layer, with P_e = (ups + 1) h f_e the parameters of one expert
(ups = 2 for SwiGLU, 1 for GeLU; plus biases where the model has them):
    parameters   h (E + g) (router) + (E + shared) P_e     g = 1 with a shared_gate, else 0
    active       h (E + g) (router) + (top_k + shared) P_e      what one token multiplies by
The model's total is its dense count with every MoE layer's FFN swapped for that; the active
count leaves out the E - top_k routed experts a token skips in each MoE layer.

Expert parallelism (lesson 14; GShard, Lepikhin et al. 2020, arXiv:2006.16668): `ep` ranks carved
out of the dp x cp ranks (ddp_lab.course.rank_layout: ep divides dp x cp) share out the routed
experts, E/ep each; everything else (attention, norms, router, shared experts) stays replicated
over dp x cp. Experts are split by tp as the dense FFN is (expert tensor-parallel size = tp,
Megatron-Core's default; torchtitan's etp = tp), or by a smaller `expert_tp` with ep then carved out
of tp x cp x dp / expert_tp ranks (expert_tp.py); the router is replicated (as Megatron-Core's).
A rank's model state therefore has two parts, each under ZeRO over the ranks that hold the same copy:
    dense part    over the dp x cp ranks ("dp_cp")
    expert part   E/ep experts per MoE layer, over the dp x cp / ep ranks holding the same experts ("edp")
and the data-parallel gradient sync runs once over each group (steptime.dp_communication).

The all-to-all: each MoE layer sends every token's hidden state to its top_k experts (dispatch)
and brings the results back (combine); backward sends the gradients both ways again: 4 all-to-alls
per MoE layer and micro-batch, 6 with full recomputation (it repeats the forward). A rank sends
tokens x top_k x h values in each (tokens: `dispatched_tokens`, the rank's slice of the sequence with sequence
parallelism), costed with lesson 02's alpha-beta model on the
links the ep group spans (collectives.py). Assumed: no capacity-factor padding, no dropped tokens (dropless
routing), and the all-to-all exposed, unless ep_overlap runs it beside another micro-batch's compute (ep_overlap.py).
Routing is balanced, the auxiliary loss's aim, unless the strategy's `expert_imbalance` says how many times a
balanced share of the tokens the busiest expert-parallel rank gets (`busiest_rank_load`).
An ep group across nodes sends a token's copies for a node's experts over the network one by one with NCCL's
all-to-all (moe_dispatch "all-to-all"); DeepEP and NVIDIA's HybridEP send one copy per destination node, which the
GPU of the same index there forwards over NVLink ("per-node"; DeepSeek-V3 technical report, arXiv:2412.19437,
Sec. 3.2.2): `dispatch_seconds`. NCCL's all-to-all also leaves a rank holding several experts its rows to sort by
expert, and back before the combine, which the per-node kernels spare (`sorts_received_rows`).

Lesson 14 (notebooks/14-mixture-of-experts.ipynb) introduces the MoE layer and expert parallelism;
the planner of notebooks/13-plan-your-training-run.ipynb uses this module.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

from ddp_lab.course.plan import expert_tp, pipeline_stages
from ddp_lab.course.plan.collectives import collective_time, spans_regions


@dataclass(frozen=True)
class MoE:
    """The mixture-of-experts part of a Transformer (see the module docstring for what each field means).

    Example:
        >>> MoE(experts=8, top_k=2, expert_ffn=14336)          # Mixtral 8x7B's layers
        MoE(experts=8, top_k=2, expert_ffn=14336, shared_experts=0, dense_layers=0, shared_gate=False)

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """

    experts: int                  # routed experts per MoE layer
    top_k: int                    # routed experts each token goes to
    expert_ffn: int               # inner size of one expert's FFN
    shared_experts: int = 0       # experts of the same size every token passes through (DeepSeekMoE)
    dense_layers: int = 0         # the first layers keep a dense FFN of the model's `ffn` size
    shared_gate: bool = False     # a hidden x 1 gate scales the shared experts' output (Qwen-MoE)

    def __post_init__(self) -> None:
        for field in ("experts", "top_k", "expert_ffn"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"MoE.{field} must be an integer >= 1, got {value!r}")
        for field in ("shared_experts", "dense_layers"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"MoE.{field} must be an integer >= 0, got {value!r}")
        if self.top_k > self.experts:
            raise ValueError(f"MoE.top_k={self.top_k} is more than the {self.experts} experts a token can go to")
        if not isinstance(self.shared_gate, bool) or (self.shared_gate and not self.shared_experts):
            raise ValueError(f"MoE.shared_gate={self.shared_gate!r}: True or False, and True only with "
                             f"shared_experts >= 1 (it gates their output)")

    def shared_text(self) -> str:
        """The shared experts as a plan's model line names them: ' + 2 shared' (DeepSeekMoE), ' + a gated shared
        expert 4 experts wide' (Qwen-MoE), '' without any."""
        if not self.shared_experts:
            return ""
        if not self.shared_gate:
            return f" + {self.shared_experts} shared"
        return " + a gated shared expert" + (f" {self.shared_experts} experts wide" if self.shared_experts > 1 else "")


def check_layers(model) -> None:
    """Raise ValueError (saying the fix) unless the model keeps at least one layer for its experts: the first
    `dense_layers` layers are dense, so dense_layers >= layers would leave a MoE model without experts in use
    (Transformer.__post_init__ calls it)."""
    moe = model.moe
    if moe is not None and moe.dense_layers >= model.layers:
        raise ValueError(f"layers={model.layers}: {model.name} keeps a dense FFN in its first {moe.dense_layers} "
                         f"layer(s) (MoE.dense_layers), which leaves no layer with experts; use layers > "
                         f"{moe.dense_layers} (or moe=None: a dense model)")


# ---- parameter counts ---------------------------------------------------------------------------

def _ffn_parameters(model, width: int, tp: int = 1) -> int:
    """One FFN of inner size `width` on one of `tp` ranks: matrices and column biases split, the row bias not."""
    ups = 2 if model.ffn_kind == "swiglu" else 1
    return (ups + 1) * model.hidden * width // tp + ((ups * width // tp + model.hidden) if model.bias else 0)


def expert_parameters(model) -> int:
    """Parameters of one expert: an FFN of inner size expert_ffn (3 h f_e for SwiGLU without biases)."""
    return _ffn_parameters(model, model.moe.expert_ffn)


def moe_layers(model) -> int:
    """How many layers are MoE layers (0 for a dense model): the decoder's after its dense ones, and each
    multi-token-prediction module's (multi_token.py: a layer of the decoder's last kind)."""
    return 0 if model.moe is None else max(0, model.layers - model.moe.dense_layers) + model.mtp_layers


def router_parameters(model) -> int:
    """The router of one MoE layer: a hidden x experts matrix (one column more with a shared_gate)."""
    return model.hidden * (model.moe.experts + model.moe.shared_gate)


def moe_ffn_parameters(model) -> int:
    """Parameters in place of the FFN of one MoE layer: router + routed and shared experts."""
    moe = model.moe
    return router_parameters(model) + (moe.experts + moe.shared_experts) * expert_parameters(model)


def parameter_change(model) -> int:
    """What the MoE layers add to the dense count (`Transformer.parameters` adds it; 0 for a dense model)."""
    if model.moe is None:
        return 0
    return moe_layers(model) * (moe_ffn_parameters(model) - model.ffn_parameters())


def active_parameters(model) -> int:
    """Parameters one token is multiplied by: all but the routed experts it skips (= parameters() if dense).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> Transformer.preset("mixtral-8x7b").active_parameters()
        12879925248

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    skipped = 0 if model.moe is None else moe_layers(model) * (model.moe.experts - model.moe.top_k) * expert_parameters(model)
    return model.parameters() - skipped


# ---- uneven routing --------------------------------------------------------------------------------

def check_imbalance(value) -> None:
    """Raise ValueError (saying the fix) unless `value` can be a Strategy's expert_imbalance: a finite number >= 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 1:
        raise ValueError(f"expert_imbalance must be a number >= 1, got {value!r}: the busiest expert-parallel "
                         f"rank's routed tokens over a balanced share (1: balanced routing; 1.5: half as many again)")


def busiest_rank_load(strategy) -> float:
    """How many times a balanced share of the routed tokens the busiest expert-parallel rank gets: the strategy's
    expert_imbalance where the experts are split (ep > 1), else 1.

    A dropless MoE layer waits for its slowest rank twice: each all-to-all ends when the rank receiving the most
    tokens (dispatch) and sending the most back (combine) is done, and the combine cannot start before that rank's
    grouped GEMMs have run over all of its tokens. So with ep > 1 the busiest rank's share sets the experts' compute
    (expert_compute.tokens_per_expert), the all-to-all's bytes (`dispatch_seconds`) and the experts' saved
    activations (`activation_change`). With every expert on each GPU (ep = 1) the routing moves work between
    experts on the same GPU, whose total stays that of a balanced share: nothing changes (the grouped GEMM's smaller
    and larger experts are not told apart). One number for every ep > 1 a search tries: how much the busiest rank's
    share grows as a rank holds fewer experts depends on which experts the router favours, which the planner cannot
    know.

    Example:
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> busiest_rank_load(Strategy(dp=8, ep=8, expert_imbalance=1.5)), busiest_rank_load(Strategy(dp=8, ep=1,
        ...                                                                                     expert_imbalance=1.5))
        (1.5, 1.0)

    Introduced in notebooks/14-mixture-of-experts.ipynb ("Uneven routing in the planner"; docs/planner.md).
    """
    return float(strategy.expert_imbalance) if strategy.ep > 1 else 1.0


# ---- what one rank holds --------------------------------------------------------------------------

def check(model, strategy) -> None:
    """Raise ValueError (saying the fix) if the experts cannot be split as `strategy` asks."""
    moe = model.moe
    if moe is None:
        if strategy.ep > 1:
            raise ValueError(f"ep={strategy.ep} needs a mixture-of-experts model, but {model.name} is dense "
                             f"(no experts to split): use ep=1")
        if strategy.expert_tp is not None:
            raise ValueError(f"expert_tp={strategy.expert_tp} splits a mixture-of-experts model's experts, but "
                             f"{model.name} is dense: drop expert_tp")
        if strategy.moe_dispatch != "all-to-all":
            raise ValueError(f"moe_dispatch={strategy.moe_dispatch!r} says how a mixture-of-experts model's tokens "
                             f"reach their experts, but {model.name} is dense (no tokens are dispatched): drop "
                             f"moe_dispatch")
        if strategy.ep_overlap:
            raise ValueError(f"ep_overlap=True hides a mixture-of-experts model's all-to-alls, but {model.name} is "
                             f"dense (no tokens are dispatched): drop ep_overlap")
        if strategy.expert_imbalance != 1:
            raise ValueError(f"expert_imbalance={strategy.expert_imbalance:g} says how unevenly a mixture-of-experts "
                             f"model routes its tokens, but {model.name} is dense (no tokens are routed): drop "
                             f"expert_imbalance")
        return
    if strategy.ep_overlap and strategy.ep == 1:
        raise ValueError("ep_overlap=True hides expert parallelism's all-to-alls behind another micro-batch's compute; "
                         "with ep=1 every GPU holds every expert and there are none: set ep > 1, or drop ep_overlap")
    if moe.experts % strategy.ep:
        valid = [d for d in range(1, moe.experts + 1) if not moe.experts % d and not (strategy.dp * strategy.cp) % d]
        raise ValueError(f"ep={strategy.ep} does not divide the {moe.experts} experts of {model.name}: each "
                         f"expert-parallel rank owns whole experts; use ep in {valid}")
    etp = expert_tp.size(strategy)
    if moe.expert_ffn % etp and strategy.expert_tp is None:
        raise ValueError(f"tp={strategy.tp} does not divide the expert FFN size {moe.expert_ffn} of {model.name}: "
                         f"experts are split by tp like the dense FFN; choose a tp that divides it, or a smaller "
                         f"expert_tp (--expert-tp) that does")
    if moe.expert_ffn % etp:
        raise ValueError(f"expert_tp={etp} does not divide the expert FFN size {moe.expert_ffn} of {model.name}: each "
                         f"expert-tensor-parallel rank takes an equal slice; use expert_tp in "
                         f"{[d for d in range(1, strategy.tp + 1) if not strategy.tp % d and not moe.expert_ffn % d]}")


def needs_sequence_parallel(model, tp: int) -> bool:
    """True where Megatron-Core trains a MoE layer only with sequence parallelism: a model with experts and tp > 1
    (`MoELayer.forward` raises otherwise in training). The search tries such plans only with it; a plan without it is
    noted on the command line.

    Introduced in notebooks/14-mixture-of-experts.ipynb (the planner: notebooks/13-plan-your-training-run.ipynb).
    """
    return model.moe is not None and tp > 1


def splits_for_tp(model, tp: int) -> bool:
    """True if tp can split the experts (the dense model's own tp rules are strategy.check's)."""
    return model.moe is None or model.moe.expert_ffn % tp == 0


def is_moe_layer(model, index: int) -> bool:
    """True if layer `index` (0-based) is a MoE layer."""
    return model.moe is not None and index >= model.moe.dense_layers


@functools.lru_cache(maxsize=4096)     # a search asks for it many times a plan, with the same model and strategy
def stage_moe_layers(model, strategy, stage: int) -> int:
    """MoE layers among pipeline stage `stage`'s layers (pipeline_stages.stage_layer_indices: consecutive, or its
    chunks' when interleaved; layers from dense_layers on are MoE layers)."""
    if model.moe is None:
        return 0
    return sum(index >= model.moe.dense_layers for index in pipeline_stages.stage_layer_indices(model, strategy, stage))


def layer_change_per_rank(model, strategy) -> tuple[int, int]:
    """(replicated change, routed experts held) of one MoE layer on one rank, against the dense layer.

    The replicated change is router + shared experts (split by tp) - the dense FFN (split by tp);
    the routed experts held are E/ep experts, each split by the experts' tp (expert_tp.size: tp unless
    `expert_tp` is given). A rank's MoE layer therefore holds
    `memory.layer_parameters_per_rank(model, tp)` + both.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> mixtral = Transformer.preset("mixtral-8x7b")
        >>> replicated, held = layer_change_per_rank(mixtral, Strategy(dp=8, ep=8))
        >>> replicated == 4096 * 8 - 3 * 4096 * 14336, held == 3 * 4096 * 14336   # + router - dense FFN; 1 expert
        (True, True)
    """
    moe, tp = model.moe, strategy.tp
    replicated = (router_parameters(model) + moe.shared_experts * _ffn_parameters(model, moe.expert_ffn, tp)
                  - _ffn_parameters(model, model.ffn_, tp))
    return replicated, moe.experts // strategy.ep * _ffn_parameters(model, moe.expert_ffn, expert_tp.size(strategy))


def stage_parameter_change(model, strategy, stage: int) -> int:
    """What the MoE layers of pipeline stage `stage` add to one rank's dense count (memory.stage_parameters)."""
    if model.moe is None:
        return 0
    return stage_moe_layers(model, strategy, stage) * sum(layer_change_per_rank(model, strategy))


def stage_expert_parameters(model, strategy, stage: int) -> int:
    """Routed-expert parameters one rank of stage `stage` holds: the part ZeRO shards over the edp group."""
    if model.moe is None:
        return 0
    return stage_moe_layers(model, strategy, stage) * layer_change_per_rank(model, strategy)[1]


def largest_layer_change(model, strategy) -> int:
    """How much more than a dense layer the largest layer holds on one rank (ZeRO-3 gathers a layer at a time)."""
    if moe_layers(model) == 0:
        return 0
    change = sum(layer_change_per_rank(model, strategy))   # may be negative: E/ep small experts vs one dense FFN
    return change if model.moe.dense_layers == 0 else max(0, change)


def expert_units(model, strategy, stage: int) -> list[int]:
    """Routed-expert parameters of each MoE layer of stage `stage` on one rank: ZeRO's units over the edp group.

    Experts sync over the dp x cp / ep ranks that hold the same experts, so they are units of their
    own (torchtitan wraps them apart for the same reason); fsdp_unit="model" gathers them at once.
    Empty for a dense model.
    """
    held = stage_expert_parameters(model, strategy, stage)
    if held == 0:
        return []
    if strategy.fsdp_unit == "model":
        return [held]
    per_layer = layer_change_per_rank(model, strategy)[1]
    return [per_layer] * stage_moe_layers(model, strategy, stage)


# ---- the experts' inner width ----------------------------------------------------------------------

def inner_width_change(model, load: float = 1) -> float:
    """Inner FFN width a token's MoE layer spans beyond the dense FFN's: (top_k x load + shared) x expert_ffn - ffn.

    A token goes through its top_k routed experts and the shared ones, each expert_ffn wide, where a dense layer has
    one FFN of width ffn; `load` scales the routed part for the busiest expert-parallel rank (busiest_rank_load). The
    experts' FLOPs (`forward_flops_change`), saved tensors (`activation_change`) and activation function's traffic
    (expert_compute.expert_activation_seconds) are this width's. gpt-oss's 4 experts of 2,880 span 3 x its FFN
    width of 2,880 more; Qwen3-30B-A3B's 8 of 768, its 6,144, none.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> [inner_width_change(Transformer.preset(name)) for name in ("gpt-oss-20b", "qwen3-30b-a3b", "mixtral-8x7b")]
        [8640, 0, 14336]

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    moe = model.moe
    return (moe.top_k * load + moe.shared_experts) * moe.expert_ffn - model.ffn_


# ---- activations ----------------------------------------------------------------------------------

def activation_change(model, strategy, stage: int) -> float:
    """Activation bytes a layer of stage `stage` keeps beyond a dense layer's, per micro-batch, on one rank.

    Korthikanti et al.'s count (activations.py) keeps, per token, the FFN's inner tensors of width
    ffn (GeLU: 2, SwiGLU: 4 tensors, split by tp). A MoE layer keeps instead, per token, those of its
    top_k routed and its shared experts, plus the router's fp32 probabilities (4 E bytes: Mixtral and
    DeepSeek compute the softmax in fp32; split by tp with sequence parallelism, where each rank routes its s / tp
    slice), the rows its experts multiply (top_k h values a token of the micro-batch, etp / tp of them, as
    expert_compute.tokens_per_expert counts them: with sequence parallelism the rows received are gathered over the
    expert tensor-parallel group after the all-to-all, and the grouped GEMM keeps that gathered input) and the top_k
    expert outputs the combine weighs for the tokens it dispatched (`dispatched_tokens`: its s / tp slice with
    sequence parallelism; Megatron-Core versions that weigh the experts' activations by the routing probabilities
    instead keep no such outputs, so this term can overstate theirs). Averaged over the stage's
    layers (dense layers change nothing); 0 with full recomputation (only the layer input is kept). The routed
    experts' tensors and the copies dispatched to them are the busiest expert-parallel rank's (`busiest_rank_load`
    times a balanced share: dropless routing keeps every token it gets); the outputs the combine weighs come back to
    each token's own rank, a balanced share.
    """
    if model.moe is None or strategy.recompute == "full" or stage_moe_layers(model, strategy, stage) == 0:
        return 0.0
    moe, t = model.moe, strategy.tp
    e = 2 if strategy.mixed else 4
    per_width = (4 if model.ffn_kind == "swiglu" else 2) * e
    inner = per_width * inner_width_change(model, busiest_rank_load(strategy)) / t
    tokens = strategy.micro_batch * model.seq_len
    received = moe.top_k * busiest_rank_load(strategy) * expert_tp.token_share(strategy)  # rows its experts multiply
    combined = moe.top_k * dispatched_tokens(model, strategy) * strategy.cp / tokens     # outputs it weighs
    router = 4 * moe.experts / (t if strategy.sequence_parallel else 1)
    around = (received + combined) * model.hidden * e + router
    held = pipeline_stages.stage_layers(model, strategy)[stage]
    return tokens * (inner + around) * stage_moe_layers(model, strategy, stage) / held


# ---- FLOPs -----------------------------------------------------------------------------------------

def forward_flops_change(model) -> int:
    """Forward FLOPs per sequence the MoE layers add to the dense count: 2 s x (active - dense FFN matmuls).

    Each MoE layer multiplies a token by the router and its top_k routed and shared experts instead
    of the dense FFN (biases are not matmuls and are left out, as in steptime.layer_forward_flops). 0 if dense.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> mixtral = Transformer.preset("mixtral-8x7b")   # router 4096 x 8 and one more expert of 3 x 4096 x 14336
        >>> forward_flops_change(mixtral) == 32 * 2 * 32768 * (4096 * 8 + 3 * 4096 * 14336)
        True

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    moe = model.moe
    if moe is None:
        return 0
    per_layer = router_parameters(model) + _matmul_parameters_per_width(model) * inner_width_change(model)
    return moe_layers(model) * 2 * model.seq_len * per_layer


def routed_forward_flops(model) -> int:
    """Forward FLOPs per sequence of the routed experts alone: 2 s x top_k x (ups + 1) h f_e per MoE layer (the part
    of `forward_flops_change` that the busiest expert-parallel rank does busiest_rank_load times)."""
    per_expert = _matmul_parameters_per_width(model) * model.moe.expert_ffn
    return moe_layers(model) * 2 * model.seq_len * model.moe.top_k * per_expert


def _matmul_parameters_per_width(model) -> int:
    """An FFN's matmul parameters per unit of its width: (ups + 1) h, ups = 2 for SwiGLU, 1 for GeLU."""
    return (3 if model.ffn_kind == "swiglu" else 2) * model.hidden


# ---- the all-to-all -------------------------------------------------------------------------------

def dispatched_tokens(model, strategy) -> int:
    """Tokens one rank dispatches to the experts in one MoE layer and micro-batch: its b s / cp, split by tp with
    sequence parallelism (each rank its s / tp slice, the tokens its router sees); without it the tp ranks' copies of
    the tokens, which each router sees whole, are shared out among their tp / etp expert groups (expert_tp.py). The
    rows it permutes into top_k copies and sends (`dispatch_bytes`, expert_compute.permutation_seconds).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> mixtral = Transformer.preset("mixtral-8x7b").with_(seq_len=4096)
        >>> [dispatched_tokens(mixtral, Strategy(dp=4, tp=2, ep=8, expert_tp=1, sequence_parallel=sp)) for sp in (1, 0)]
        [2048, 2048]

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    tokens = strategy.micro_batch * model.seq_len // strategy.cp
    if strategy.sequence_parallel:
        return tokens // strategy.tp
    return tokens * expert_tp.size(strategy) // strategy.tp


def dispatch_bytes(model, strategy) -> int:
    """Bytes one rank sends in one all-to-all of one MoE layer and micro-batch: `dispatched_tokens` x top_k x h values.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> dispatch_bytes(Transformer.preset("mixtral-8x7b").with_(seq_len=4096), Strategy(dp=8, ep=8))
        67108864

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    return dispatched_tokens(model, strategy) * model.moe.top_k * model.hidden * (2 if strategy.mixed else 4)


def remote_nodes_per_token(model, nodes: float) -> float:
    """Other nodes a token's top_k experts sit on, on average, with the experts spread evenly over `nodes` nodes.

    Balanced routing taken as each token choosing a uniformly random set of top_k of the E experts: a node holding
    m = E / nodes of them is missed with probability C(E - m, top_k) / C(E, top_k), so a token reaches
    (nodes - 1)(1 - that) nodes besides its own; never more than top_k (nodes - 1) / nodes, NCCL's copies.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> moe = Transformer.preset("deepseek-moe-16b")            # 64 routed experts, top 6
        >>> round(remote_nodes_per_token(moe, 2), 3), round(remote_nodes_per_token(moe, 4), 2)   # NCCL: 3, 4.5
        (0.988, 2.51)

    Introduced in notebooks/14-mixture-of-experts.ipynb ("One copy per node").
    """
    return (nodes - 1) * _reaches(model, 1 / nodes)


def _reaches(model, share: float) -> float:
    """The chance that a token's top_k experts include one of a `share` of the experts (balanced, random routing):
    1 - C(E - m, top_k) / C(E, top_k) for m = share x E, written as a product so that m need not be whole."""
    experts_, top_k = model.moe.experts, model.moe.top_k
    missed = 1.0
    for i in range(top_k):
        missed *= max(0.0, (experts_ - share * experts_ - i) / (experts_ - i))
    return 1 - missed


def dispatch_crosses_nodes(cluster, strategy) -> bool:
    """Whether a MoE layer's tokens cross the network to reach their experts: an ep group (of ep > 1) that spans
    nodes inside one region. Only then does `moe_dispatch` change the all-to-all's time (`dispatch_seconds`); it
    also changes the compute where a rank holds several experts (`sorts_received_rows`).

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> two_nodes = ClusterSpec.preset("h100-sxm", nodes=2)
        >>> [dispatch_crosses_nodes(two_nodes, Strategy(dp=16, ep=ep)) for ep in (16, 8)]
        [True, False]

    Used by the planner (notebooks/13-plan-your-training-run.ipynb); docs/planner.md describes it.
    """
    group = expert_tp.group(strategy, "ep")
    return (strategy.ep > 1 and group.spans_nodes(cluster.gpus_per_node)
            and not spans_regions(cluster, group))


def sorts_received_rows(model, strategy) -> bool:
    """Whether a rank sorts the rows an all-to-all brought it by local expert, and back before the combine: with
    NCCL's all-to-all (moe_dispatch "all-to-all") and several experts on the rank (E / ep > 1), the rows arrive
    grouped by the rank that sent them, each group by expert, and the grouped GEMM wants them by expert
    (Megatron-Core's MoEAlltoAllTokenDispatcher, "Permutation 2": sort_chunks_by_idxs in dispatch_postprocess and
    combine_preprocess, run where the rank holds more than one expert). DeepEP and HybridEP ("per-node") send the
    tokens unpermuted and permute them only on arrival, the one permutation expert_compute.permutation_seconds
    charges. Left out: with ep = 1 Megatron-Core's sort is a copy in the rows' own order (expert TP 1) or a reorder of
    the expert TP group's gathered rows (expert TP > 1 with sequence parallelism); torchtitan's expert-parallel path
    permutes the received rows whether a rank holds one expert or several.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> qwen = Transformer.preset("qwen3-30b-a3b")                    # 128 experts
        >>> [sorts_received_rows(qwen, s) for s in (Strategy(dp=8, ep=8), Strategy(dp=128, ep=128),
        ...                                         Strategy(dp=8, ep=8, moe_dispatch="per-node"), Strategy(dp=8))]
        [True, False, False, False]

    Introduced in notebooks/14-mixture-of-experts.ipynb (the planner: notebooks/13-plan-your-training-run.ipynb).
    """
    return (model.moe is not None and strategy.ep > 1 and model.moe.experts // strategy.ep > 1
            and strategy.moe_dispatch == "all-to-all")


def dispatcher_matters(model, cluster, strategy) -> bool:
    """Whether `moe_dispatch` changes a plan's time: the tokens cross nodes (`dispatch_crosses_nodes`) or, on GPUs
    (an HBM figure: the copies' time), a rank holding several experts sorts what NCCL's all-to-all brought it
    (`sorts_received_rows` under "all-to-all"). The search sets a requested dispatcher only on such plans, so that
    the others read as the same plan.

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> moe, node = Transformer.preset("deepseek-moe-16b"), ClusterSpec.preset("h100-sxm")   # 64 experts
        >>> [dispatcher_matters(moe, node, Strategy(dp=8, ep=ep)) for ep in (8, 1)]
        [True, False]

    Used by the planner (notebooks/13-plan-your-training-run.ipynb); docs/planner.md describes it.
    """
    return dispatch_crosses_nodes(cluster, strategy) or (
        cluster.gpu.memory_bandwidth is not None
        and sorts_received_rows(model, strategy.with_(moe_dispatch="all-to-all")))


def dispatch_seconds(model, cluster, strategy) -> float:
    """Seconds of one all-to-all of one MoE layer and micro-batch (dispatch or combine, either pass).

    "all-to-all" (NCCL's): `dispatch_bytes` over the ep group (collectives.collective_time: over nodes the share
    for other nodes' ranks crosses the network while the node's own share moves over NVLink). "per-node" (DeepEP,
    HybridEP) over nodes: a token crosses the network once for each other node its experts are on
    (`remote_nodes_per_token`: about 1 copy where NCCL sends top_k / 2 over 2 nodes), to the GPU of its own index
    there, which forwards it over NVLink to the experts' GPUs; the network's and NVLink's shares run at once, the
    slower sets the time. Within one node (or across regions) both are NCCL's all-to-all. The bytes are the busiest
    rank's (`busiest_rank_load`): it receives that share in the dispatch and sends it back in the combine.

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> moe, two_nodes = Transformer.preset("deepseek-moe-16b"), ClusterSpec.preset("h100-sxm", nodes=2)
        >>> nccl = dispatch_seconds(moe, two_nodes, Strategy(dp=16, ep=16))
        >>> round(dispatch_seconds(moe, two_nodes, Strategy(dp=16, ep=16, moe_dispatch="per-node")) / nccl, 2)
        0.42

    Introduced in notebooks/14-mixture-of-experts.ipynb ("One copy per node").
    """
    group, nbytes = expert_tp.group(strategy, "ep"), dispatch_bytes(model, strategy) * busiest_rank_load(strategy)
    if strategy.moe_dispatch == "all-to-all" or not dispatch_crosses_nodes(cluster, strategy):
        return collective_time("all_to_all", nbytes, cluster, group)
    ways = group.node_counts(cluster.gpus_per_node)   # each group's experts per node: the busiest sender sets the pace
    copies = max(sum(_reaches(model, count / group.size) for other, count in enumerate(counts) if other != node)
                 for counts in ways for node in range(len(counts)))
    most = max(max(counts) for counts in ways)
    across = nbytes * copies / model.moe.top_k / cluster.inter_node_bandwidth
    inside = nbytes * (most - 1) / most / cluster.intra_node_bandwidth     # the copies forwarded at their node
    return collective_time("all_to_all", 0, cluster, group) + max(across, inside)   # latency, then the bytes


def expert_tp_gather_seconds(model, cluster, strategy) -> float:
    """Seconds of one all-gather of a MoE layer's dispatched copies over the expert tensor-parallel group (expert_tp.py),
    per micro-batch; its reduce-scatter takes the same ring time.

    Megatron-Core's all-to-all dispatcher (`MoEAlltoAllTokenDispatcher.dispatch_postprocess`): with sequence
    parallelism each rank dispatches its own s / tp slice, so after the all-to-all the etp ranks that split the same
    experts hold different tokens; they all-gather them before the experts' column-parallel GEMMs (etp x
    `dispatch_bytes`, the busiest rank's share as in `dispatch_seconds`) and reduce-scatter the row-parallel GEMMs'
    partial sums before the combine (`combine_preprocess`). Backward runs the mirror pair. 0 with etp = 1 or without
    sequence parallelism (each rank then dispatches etp / tp of its group's tokens whole: `dispatched_tokens`).
    Costed as a ring all-gather over the etp group (consecutive ranks), in the activations' precision; it stands in
    for DeepEP's and HybridEP's dispatch, which sends the same copies to each of the etp ranks over the etp x ep
    ranks. Not modelled: Megatron-Core reduce-scatters in the router probabilities' precision, twice the bytes with
    --moe-router-dtype fp32.

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> mixtral, h100s = Transformer.preset("mixtral-8x7b").with_(seq_len=4096), ClusterSpec.preset("h100-sxm")
        >>> split = Strategy(dp=2, tp=4, ep=2, sequence_parallel=True)
        >>> round(expert_tp_gather_seconds(mixtral, h100s, split) / expert_tp_gather_seconds(
        ...     mixtral, h100s, split.with_(expert_tp=2, ep=4)), 2)      # top_k x etp / tp of the tokens, over etp
        3.0
        >>> expert_tp_gather_seconds(mixtral, h100s, split.with_(expert_tp=1, ep=8))
        0.0

    Introduced in notebooks/14-mixture-of-experts.ipynb (the planner: notebooks/13-plan-your-training-run.ipynb).
    """
    etp = expert_tp.size(strategy)
    if model.moe is None or etp == 1 or not strategy.sequence_parallel:
        return 0.0
    nbytes = etp * dispatch_bytes(model, strategy) * busiest_rank_load(strategy)
    return collective_time("all_gather", nbytes, cluster, expert_tp.group(strategy, "etp"))


def all_to_all_time(model, cluster, strategy) -> float:
    """Seconds per step of expert parallelism's all-to-alls on the most loaded pipeline stage, all of them (what
    ep_overlap.step_seconds leaves exposed of them is steptime's ep_comm).

    Per MoE layer and micro-batch: dispatch and combine forward, both again backward (and the
    forward's two again under full recomputation), each `dispatch_bytes` from every rank over the
    ep group (`dispatch_seconds`). 0 without experts or with ep = 1 (the tokens stay on their rank).
    """
    if model.moe is None or strategy.ep == 1:
        return 0.0
    per_layer = 4 + (2 if strategy.recompute == "full" else 0)
    one = dispatch_seconds(model, cluster, strategy)
    return strategy.grad_accum * busiest_stage_moe_layers(model, strategy) * per_layer * one


def busiest_stage_moe_layers(model, strategy) -> int:
    """MoE layers on the pipeline stage holding the most of them: the stage whose experts set the step's pace."""
    return max(stage_moe_layers(model, strategy, stage) for stage in range(strategy.pp))

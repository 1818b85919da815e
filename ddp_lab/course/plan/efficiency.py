"""How long a GPU takes for one transformer layer: a roofline per kind of work, one constant per GPU generation.

A layer's forward pass does two kinds of work (Williams et al. 2009, "Roofline", CACM 52(4)):
    matmuls      the weight GEMMs (2 b s P_matmul / t FLOPs on a tensor-parallel rank) and the
                 attention core (4 b s^2 h / t: Q K^T and the weighted V), compute-bound: the
                 GEMMs (and eager attention's batched GEMMs) run at peak x the generation's
                 GEMM efficiency, flash attention at its own share of peak (below; both in
                 generation_constants.py);
    elementwise  norms, residual adds, activation functions, dropout, softmax, RoPE, the fp32
                 cross-entropy: memory-bound, they run at the HBM bandwidth of the spec sheet,
                 for the bytes each kernel reads and writes: traffic.py's op table, forward,
                 backward and recomputation (a GPT-2-small layer in bf16: 46 h bytes per token
                 forward, 66 h backward, against 24 h^2 FLOPs per token forward).
A GEMM also pays a fixed cost per output tile (its pipeline fills before the first multiply),
amortised over its reduction dimension k: it runs at k / (k + TILE_K) of a long GEMM's rate,
so the small k of a small model or a wide tensor-parallel split cost more. Backward costs
2 x the forward GEMMs (input and weight gradients). Under precision="fp8" the weight GEMMs run at
the FP8 peak (precision.linear_rate) and their operands' scaling and casts are memory-bound bytes;
the attention core and the head stay bf16 (precision.py). A MoE layer's experts are timed by
expert_compute.py. Attention by kind:
    eager   the s x s scores are computed in full and masked (causal): 4 b s^2 h / t FLOPs
            forward, twice that backward, and their softmax and dropout read and write the
            s x s tensors through HBM (traffic.py) - the reason long sequences are slow eagerly;
    flash   FlashAttention (Dao et al. 2022, arXiv:2205.14135; Dao 2023, arXiv:2307.08691)
            skips the blocks a causal mask zeroes (half the FLOPs) and recomputes Q K^T in
            backward: 2.5 x the forward FLOPs, not 2 (5 matmuls of s^2 d instead of 4);
            no s x s tensor ever reaches HBM. Its kernel does not run at the GEMMs' rate: its
            softmax sits between its two matmuls, so it runs at its own share of peak on each
            generation, `generation_constants.FLASH_ATTENTION_UTILIZATION` (bf16/fp16 only, FlashAttention-2 has no
            fp32 kernel): the rate attention ran at inside published training steps, read off a
            sequence-length sweep (below), lower than the kernels reach alone: FlashAttention-2
            50-73 % of an A100's peak (its paper), 35 % of an H100's (FlashAttention-3's abstract,
            shapes not given: it does not use Hopper's asynchronous tensor cores and TMA), 19-27 %
            in the causal training shapes of the H100 runs the planner is checked on (timed:
            tools/gpu_kernels.py). That share is the kernels' plateau (long sequences, heads of 128);
            shorter sequences per kernel call and narrower heads run slower, as the published kernels
            do (attention_kernels.shape_factor). That matters most where attention is most of the
            work: small models, long sequences (lesson 15).
Recomputation repeats forward work in backward: "full" the whole layer's forward; "selective"
(eager only) the attention core and its softmax/dropout traffic; with flash there is nothing
left to recompute selectively. How much of the forward "full" repeats depends on who recomputes
(`recompute_skips_last_gemm`): Megatron-LM's and DeepSpeed's checkpoints, and PyTorch's reentrant
one, re-run the whole layer; PyTorch's non-reentrant checkpoint (torch.utils.checkpoint with
use_reentrant=False, FSDP's checkpoint_wrapper, torchtitan, llm-foundry's MPT yamls) stops as soon as it has
recomputed every tensor backward needs (early stop, PyTorch >= 2.1), so the layer's last GEMM, the
FFN's down projection, whose output backward never needs, is not run again.

Why this shape of model. MFU rises with model size in published runs (Narayanan et al. 2021,
Table 1: 137 TFLOP/s per A100 at h = 2304 to 163 at h = 25600) and is lower on H100s than on
A100s for the same code (MosaicML's llm-foundry benchmarks: about 57 % vs 40 % MFU with FSDP):
the matmuls grow as h^2 per token, the elementwise traffic as h, and an H100's peak FLOP/s
grew 3.2x over an A100's while its HBM bandwidth grew 1.6x. Tensor parallelism makes it
worse: the 10 sbh around the parallel matmuls (norms, residuals, dropout) are not divided by t
unless sequence parallelism splits them too.

The constants. The GEMMs' share of peak and flash attention's, one number each per GPU generation, and
the published run or sweep each was set on: generation_constants.py.

CPU ranks (lesson 13's measured runs) have no HBM figure: there every FLOP runs at the
measured matmul rate times the machine's calibrated step efficiency, and TP ranks repeat the
measured elementwise share (`GPU.elementwise_share`), as `calibrate.this_machine()` measures.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddp_lab.course.plan import attention_kernels, latent_attention, multi_token, sliding_window
from ddp_lab.course.plan.activations import replicated_share
from ddp_lab.course.plan.attention_kernels import kernel_speedup, shape_factor
from ddp_lab.course.plan.generation_constants import FLASH_PRECISIONS, constants_generation
from ddp_lab.course.plan.op_checkpoint import recomputed_flops, recomputed_matmuls
from ddp_lab.course.plan.precision import cast_bytes, compute_precision, linear_rate
from ddp_lab.course.plan.traffic import head_ops, layer_ops, rank_bytes

# A GEMM computes its output in tiles; each tile first fills a pipeline of k-slices and ends by
# writing its results, a fixed cost that is amortised over the reduction dimension k: the time
# of TILE_K more steps of k. CUTLASS's default Ampere bf16 kernel (tile 128 x 256 x 64, 3 stages)
# loads 2 k-slices of 64 before its first multiply: TILE_K = 128. So a GEMM runs at
# k / (k + 128) of the rate a long one reaches: 86 % at k = 768, 97 % at k = 4096.
TILE_K = 128

@dataclass(frozen=True)
class WorkSeconds:
    """Seconds of one piece of work on one GPU for one micro-batch: forward, backward, recomputation.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    forward: float
    backward: float
    recompute: float = 0.0

    @property
    def total(self) -> float:
        return self.forward + self.backward + self.recompute


def layer_matmul_flops(model, strategy) -> tuple[float, float]:
    """(weight-GEMM FLOPs, attention-core FLOPs) of one layer's forward, per micro-batch, on one TP rank.

    The attention core is counted in full (2 b s^2 (d_q + d_v) / t, the papers' convention 4 b s^2 h / t; d_q = heads
    x head_dim = h unless the model's head_size says otherwise, d_v = d_q unless latent attention's values are
    narrower); the caller halves it for causal flash attention. Latent attention's down-projections are whole on
    every rank, run on its s/tp tokens with sequence parallelism (latent_attention.py).
    """
    h, f, s, b, t = model.hidden, model.ffn_, model.seq_len, strategy.micro_batch, strategy.tp
    ups = 2 if model.ffn_kind == "swiglu" else 1
    replicated = latent_attention.replicated_matmul_parameters(model)
    split = model.attention_matmul_parameters() - replicated + (ups + 1) * h * f
    down = replicated / latent_attention.down_projection_split(strategy)
    return 2 * b * s * (split / t + down), 2 * b * s * s * (model.q_dim + model.o_dim) / t


def layer_gemms(model, strategy) -> list[tuple[float, int, int]]:
    """One layer's weight GEMMs on one TP rank: (forward FLOPs, forward k, input-gradient k) each.

    k is the reduction dimension: QKV and FFN up reduce over h, the row-parallel out-projection
    and FFN down over h/t and f/t (Megatron's split, lesson 08); each input gradient reduces over
    the forward's output width. The weight gradient reduces over the b s tokens (long: no tile cost).
    """
    downs, column, out = attention_gemms(model, strategy)
    return [*downs, *column, out, *ffn_gemms(model, strategy)]


def ffn_gemms(model, strategy) -> list[tuple[float, int, int]]:
    """The FFN's two GEMMs on one TP rank, as layer_gemms lists them: the up (and gate) projection, then the down."""
    h, f, t = model.hidden, model.ffn_, strategy.tp
    tokens = strategy.micro_batch * model.seq_len
    ups = 2 if model.ffn_kind == "swiglu" else 1
    return [(2 * tokens * h * ups * (f // t), h, f // t), ffn_down_gemm(model, strategy)]


def attention_gemms(model, strategy) -> tuple[list, list, tuple[float, int, int]]:
    """The attention's weight GEMMs on one TP rank, as layer_gemms lists them: (those before its tensor-parallel
    input: latent attention's down-projections, none otherwise; the column-parallel ones after it: Q, K, V, or the
    up-projections; the row-parallel output projection)."""
    if model.latent is not None:
        return latent_attention.gemms(model, strategy)
    h, q, kv, t = model.hidden, model.q_dim, model.kv_dim, strategy.tp
    tokens = strategy.micro_batch * model.seq_len
    qkv = (q + 2 * kv) // t
    return [], [(2 * tokens * h * qkv, h, qkv)], (2 * tokens * (q // t) * h, q // t, h)


def ffn_down_gemm(model, strategy) -> tuple[float, int, int]:
    """The FFN's down projection on one TP rank, the layer's last GEMM: (forward FLOPs, forward k, input-gradient k).

    Row-parallel (lesson 08): it reduces over this rank's f/t. PyTorch's non-reentrant checkpoint does not run it
    again (`recompute_skips_last_gemm`).
    """
    h, f, t = model.hidden, model.ffn_, strategy.tp
    tokens = strategy.micro_batch * model.seq_len
    return 2 * tokens * (f // t) * h, f // t, h


def attention_backward_factor(strategy) -> float:
    """Backward FLOPs of the attention core over its forward's: 2 eager (dQ, dK, dV from saved scores), 2.5 flash
    (attention_kernels.FLASH_BACKWARD_FACTOR: Q K^T recomputed).

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    return attention_kernels.FLASH_BACKWARD_FACTOR if strategy.attention == "flash" else 2.0


def attention_seconds(flops: float, gpu, strategy, model) -> float:
    """Seconds of `flops` of `model`'s attention core (Q K^T and the weighted V) on `gpu` for `strategy`.

    Eager attention's cores are batched GEMMs: the calibrated GEMM rate. Flash attention in bf16
    or fp16 runs at the GPU's flash share of peak (`GPU.flash_attention_share`: its generation's
    `FLASH_ATTENTION_UTILIZATION` unless the GPU carries its own) where it has one, otherwise at
    the GEMM rate; a kernel faster than FlashAttention-2 (`Strategy.flash_kernel`) multiplies that
    share by its published speed-up, and the sequence one kernel call sees (a rank's seq_len / cp)
    and the head's width scale it as the kernel's published rates do (attention_kernels.shape_factor).

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import GPU
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> h100, llama = GPU.preset("h100-sxm"), Transformer.preset("llama3-8b")   # 8,192 tokens, heads of 128
        >>> round(attention_seconds(989e12, h100, Strategy(), llama), 2)     # 17 % of 989 TFLOP/s, x 0.99 at 8K
        5.94

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    attention_kernels.check(gpu.generation, strategy.flash_kernel)   # a kernel the GPU cannot run: refused
    precision = compute_precision(strategy)          # FP8 training keeps attention in bf16 (precision.py)
    flash = strategy.attention == "flash" and precision in FLASH_PRECISIONS
    utilization = gpu.flash_attention_share if flash else None
    if utilization is None:
        return flops / gpu.achieved_flops(precision)
    generation = constants_generation(gpu.generation)
    shape = shape_factor(generation, strategy.flash_kernel, model.seq_len // strategy.cp, model.head_dim)
    return flops / (gpu.flops(precision) * utilization * kernel_speedup(generation, strategy.flash_kernel) * shape)


def gemm_seconds(flops: float, k: int, rate: float) -> float:
    """Seconds of a GEMM of `flops` with reduction dimension k: the tile cost adds TILE_K of k (module docstring)."""
    return flops / rate * (1 + TILE_K / k)


def recomputed_gemm_seconds(model, strategy, rate: float) -> dict[str, float]:
    """Seconds of each matmul per-op checkpointing re-runs (op_checkpoint.recomputed_matmuls), by name, at `rate`.

    Introduced in notebooks/13-plan-your-training-run.ipynb (the `--recompute op` flag; docs/planner.md).
    """
    return {name: gemm_seconds(flops, k, rate) for name, flops, k, _ in recomputed_matmuls(model, strategy)}


def recompute_skips_last_gemm(model, strategy) -> bool:
    """True when full recomputation leaves out the layer's last GEMM, the FFN's down projection.

    PyTorch's non-reentrant checkpoint stops recomputing once it has re-made every tensor backward
    saved (`torch.utils.checkpoint.set_checkpoint_early_stop`, on by default since PyTorch 2.1).
    Backward needs the down projection's input, not its output, so the GEMM is skipped, and with it
    the all-reduce (or, with sequence parallelism, the reduce-scatter) that follows it under tensor
    parallelism, unless something after it saves a tensor: dropout saves its mask (model.dropout),
    a mixture-of-experts layer's combine saves the experts' outputs (model.moe). The residual add
    after it is not re-run either; the planner leaves its few bytes per token in (traffic.rank_bytes).
    Counted by PyTorch itself in `ddp_lab.plan.fullsize.recomputed_flops` (tests/test_plan_fullsize.py).
    Megatron-LM's and DeepSpeed's checkpoints re-run the whole layer: `Strategy.checkpoint_early_stop`
    is False for them.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    return strategy.recompute == "full" and strategy.checkpoint_early_stop and early_stop_can_skip_last_gemm(model)


def early_stop_can_skip_last_gemm(model) -> bool:
    """True when nothing after the FFN's down projection saves a tensor for backward (no dropout, no experts'
    combine), so PyTorch's early-stopping checkpoint can leave that GEMM out (`recompute_skips_last_gemm`).

    Where it is False, `Strategy.checkpoint_early_stop` changes nothing; the search and the CLI leave it
    off for such a model, so no plan is labelled as skipping what it re-runs.
    """
    return not model.dropout and model.moe is None


def layer_seconds(model, strategy, gpu) -> WorkSeconds:
    """Seconds of one transformer layer for one micro-batch on one tensor-parallel rank (module docstring).

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import GPU
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> llama, h100 = Transformer.preset("llama3-8b"), GPU.preset("h100-sxm")
        >>> flash = layer_seconds(llama, Strategy(), h100)
        >>> eager = layer_seconds(llama, Strategy(attention="eager"), h100)
        >>> flash.total < eager.total      # no s x s traffic, half the causal FLOPs
        True

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    gemm, core = layer_matmul_flops(model, strategy)
    if gpu.memory_bandwidth is None:
        return _flat_layer_seconds(model, strategy, gpu, gemm, core)
    rate = linear_rate(gpu, strategy)                 # the linear GEMMs: FP8's peak under precision="fp8"
    bandwidth = gpu.memory_bandwidth
    if strategy.attention == "flash":      # causal tiles skipped, and those outside a sliding window (sliding_window.py)
        core_forward = core / 2 * sliding_window.flash_block_share(model)
    else:
        core_forward = core
    core_backward = attention_backward_factor(strategy) * core_forward
    gemms = layer_gemms(model, strategy)
    forward_gemms = sum(gemm_seconds(flops, k, rate) for flops, k, _ in gemms)
    backward_gemms = sum(gemm_seconds(flops, k_grad, rate) + flops / rate for flops, _, k_grad in gemms)
    moved_forward, moved_backward, moved_again = rank_bytes(layer_ops(model, strategy), strategy, strategy.recompute)
    # FP8's scaling and casts (0 otherwise), on each GEMM's tokens: latent attention's down-projections run on s/tp of
    # them with sequence parallelism
    tokens = strategy.micro_batch * model.seq_len
    local = tokens // latent_attention.down_projection_split(strategy)
    downs = latent_attention.down_projections(model)                    # the list's first GEMMs
    casts = [cast_bytes(local if i < downs else tokens, k, n, strategy) for i, (_, k, n) in enumerate(gemms)]
    moved_forward += sum(forward_cast for forward_cast, _ in casts)
    moved_backward += sum(backward_cast for _, backward_cast in casts)
    forward = forward_gemms + attention_seconds(core_forward, gpu, strategy, model) + moved_forward / bandwidth
    backward = backward_gemms + attention_seconds(core_backward, gpu, strategy, model) + moved_backward / bandwidth
    if strategy.recompute == "full":
        recompute = forward
        if recompute_skips_last_gemm(model, strategy):
            down_flops, down_k, _ = ffn_down_gemm(model, strategy)
            recompute -= gemm_seconds(down_flops, down_k, rate)
    elif strategy.recompute == "selective" and strategy.attention == "eager":
        recompute = attention_seconds(core_forward, gpu, strategy, model) + moved_again / bandwidth
    elif strategy.recompute == "op":                 # every second matmul and the elementwise ops (op_checkpoint.py)
        recompute = sum(recomputed_gemm_seconds(model, strategy, rate).values()) + moved_again / bandwidth
    else:
        recompute = 0.0
    return WorkSeconds(forward, backward, recompute)


def head_seconds(model, strategy, gpu) -> WorkSeconds:
    """Seconds of the output layer (final norm, vocab-parallel head, cross-entropy) for one micro-batch.

    GEMM 2 b s h V / t forward, twice that backward; the final norm, the logits' cast to fp32 and the
    log-softmax move the bytes of `traffic.head_ops` at the HBM bandwidth. Each multi-token-prediction module
    (multi_token.py) runs it once more, after its 2h x h projection (a GEMM over 2h).
    """
    passes = 1 + model.mtp_layers
    projection = multi_token.projection_flops(model, strategy)
    gemm = passes * 2 * strategy.micro_batch * model.seq_len * model.hidden * -(-model.vocab // strategy.tp)
    precision = compute_precision(strategy)           # the output head stays bf16 under FP8 (precision.py)
    if gpu.memory_bandwidth is None:
        scale = _flat_scale(model, strategy, gpu)
        return WorkSeconds((gemm + projection) / gpu.achieved_flops(precision) * scale,
                           2 * (gemm + projection) / gpu.achieved_flops(precision) * scale)
    rate = gpu.achieved_flops(precision)
    moved_forward, moved_backward, _ = rank_bytes(head_ops(model, strategy), strategy)
    vocab, h = -(-model.vocab // strategy.tp), model.hidden
    mtp_forward = gemm_seconds(projection, 2 * h, rate)                  # 0 without multi-token prediction
    mtp_backward = gemm_seconds(projection, h // strategy.tp, rate) + projection / rate
    return WorkSeconds(gemm_seconds(gemm, h, rate) + passes * moved_forward / gpu.memory_bandwidth + mtp_forward,
                       gemm_seconds(gemm, vocab, rate) + gemm / rate + passes * moved_backward / gpu.memory_bandwidth
                       + mtp_backward)


def _flat_scale(model, strategy, gpu) -> float:
    """CPU ranks: TP ranks repeat the elementwise share of the work around the parallel matmuls."""
    return 1 + gpu.elementwise_share * replicated_share(model, strategy) * (strategy.tp - 1)


def _flat_layer_seconds(model, strategy, gpu, gemm: float, core: float) -> WorkSeconds:
    """CPU ranks: every FLOP at the measured rate x the calibrated step efficiency (the papers' FLOP count)."""
    rate = gpu.achieved_flops(strategy.precision) / _flat_scale(model, strategy, gpu)
    forward = gemm + core
    recompute = {"full": forward, "selective": core if strategy.attention == "eager" else 0.0,
                 "op": recomputed_flops(model, strategy)}.get(strategy.recompute, 0.0)
    if recompute_skips_last_gemm(model, strategy):
        recompute -= ffn_down_gemm(model, strategy)[0]
    return WorkSeconds(forward / rate, 2 * forward / rate, recompute / rate)

"""What a training precision means to the planner: which matmuls run in which format, what is kept how.

Five precisions, one spelling in the package (`PRECISIONS`): "fp32", "bf16" and "fp16" (lessons 01, 09),
"fp8", FP8 training as torchtitan runs it (torchao's `Float8Linear`, tensorwise dynamic scaling; pytorch/torchtitan
docs/float8.md) and, for the matmuls, as NVIDIA's Transformer Engine does, and "mxfp8", the same matmuls with one
scale per block of 32 values (below):

    runs in FP8   the linear layers' GEMMs, forward and both backward GEMMs (input and weight gradients): Q, K, V,
                  the attention output projection, the FFN's up/gate/down and the experts' (`fp8_matmuls`), at the
                  GPU's FP8 peak times the GEMMs' calibrated efficiency times `FP8_GEMM_RELATIVE_EFFICIENCY`;
    stays bf16    the attention core (FlashAttention in bf16), norms, softmax, RoPE, the router, the embeddings
                  and the output head (torchtitan's float8 converter skips the "output" linear; Transformer
                  Engine's FP8 autocast covers only its Linear/LayerNormLinear modules);
    model states  as bf16 mixed precision (`state_precision`): 16-bit weights and gradients, fp32 master
                  weights and Adam moments, 2 + 2 + 12 bytes per parameter; FP8 saves none of them;
    activations   unchanged (activations.value_bytes: 2 bytes, as bf16): torchao's Float8Linear saves its high-precision input and
                  casts it again in backward (torchao/float8/float8_linear.py, `matmul_with_hp_or_float8_args`);
                  Transformer Engine would keep the FP8 copy of a linear's input instead (1 byte, not 2), which
                  the planner does not model;
    casts         every FP8 GEMM first scales and casts its operands, memory-bound work at the HBM bandwidth
                  (`cast_bytes`): a dynamic scale reads the tensor once for its amax, the cast reads it again and
                  writes one byte per value;
    FSDP2         with ZeRO-3, the linear layers' weights are cast to FP8 before the all-gather
                  (`enable_fsdp_float8_all_gather`, torchtitan's recommended float8 recipe): 1 byte per gathered
                  parameter instead of 2 (`gathered_parameter_bytes`), and the gathered weight needs no cast.

"mxfp8" (Transformer Engine's MXFP8 recipe, the FP8 that NeMo and Megatron-Bridge run on Blackwell) differs in two
ways, both from Transformer Engine's documentation (user guide, "Low precision training": "MXFP8" and "Performance
considerations"): each block of 32 consecutive values along a GEMM's reduction dimension shares one 1-byte (E8M0)
scale, which Blackwell's tensor cores apply themselves (SM 10.0 and newer: a GPU preset without an "mxfp8" peak
refuses it), at the FP8 rate; and, the blocks being one-dimensional, the transposed copy a backward GEMM reads is
quantized from the bf16 tensor with scales of its own, not transposed from the FP8 one. Its casts therefore need no
amax pass: one read of the bf16 tensor writes both copies with their scales (`MX_CAST_BYTES`: 2 + 2 x 33/32
bytes per value), the input's and the weight's in forward, the output gradient's in backward (`cast_bytes`). Its
weights are all-gathered in bf16 under ZeRO-3 (no FP8 all-gather is modelled for it). Two approximations, both
also per-tensor FP8's: the weight's cast is charged every micro-batch, where Transformer Engine keeps a weight's
quantized copies across a step's micro-batches (under 1 % of a step in the layouts checked); and FP8's GEMM
efficiency relative to bf16 (`FP8_GEMM_RELATIVE_EFFICIENCY`, measured on Hopper) is applied on Blackwell too.

Checked against torchtitan's published FP8 run (benchmarks/llama3_h100_202412_torchtitan.md, Table 1: Llama 3.1 8B
on 8 H100s, FSDP + torch.compile 6,667 tokens/s per GPU, + Float8 8,532, memory 77.0 -> 76.8 GiB) in
tests/test_plan_mechanics.py.

Introduced in notebooks/17-compile-and-low-precision.ipynb (the planner: notebooks/13-plan-your-training-run.ipynb).
"""

from __future__ import annotations

from ddp_lab.course.sharding.state_bytes import PRECISIONS as STATE_PRECISIONS   # "fp32", "bf16", "fp16"

FP8 = "fp8"
MXFP8 = "mxfp8"
FP8_RECIPES = (FP8, MXFP8)                    # the precisions whose linear GEMMs run in FP8
PRECISIONS = STATE_PRECISIONS + FP8_RECIPES

# An FP8 GEMM's share of the FP8 peak over a bf16 GEMM's share of the bf16 peak, for large shapes on an H100/H800:
# DeepGEMM's FP8 GEMMs (deepseek-ai/DeepGEMM README, first release, "Normal GEMMs for dense models", H800 SXM5:
# M 4096, N 4096, K 7168: 1,304 TFLOPS = 0.66 of the 1,979 dense FP8 peak) against PyTorch's bf16 GEMM timed on
# an H100 SXM at k = 4096 (ddp_lab/plan/measured/h100-sxm-kernels.json: 0.75 of the bf16 peak): 0.66 / 0.75.
# Twice the peak is not twice the speed: an FP8 GEMM's k-loop moves the same bytes per FLOP at twice the rate.
FP8_GEMM_RELATIVE_EFFICIENCY = 0.88

# Bytes per value of a dynamic-scaled cast: read for the amax (2), read again and write FP8 (2 + 1).
DYNAMIC_CAST_BYTES = 5
# A cast whose scale is known (a transposed copy of a tensor already scaled): read 2, write 1.
STATIC_CAST_BYTES = 3
# MXFP8: one read of the bf16 tensor (2) writes its rowwise and columnwise FP8 copies, each with one 1-byte scale per
# 32 values (2 x 33/32).
MX_BLOCK = 32
MX_CAST_BYTES = 2 + 2 * (1 + 1 / MX_BLOCK)


def state_precision(precision: str) -> str:
    """The precision model states and activations are kept in: FP8 training keeps bf16's (module docstring).

    Example:
        >>> state_precision("fp8"), state_precision("mxfp8"), state_precision("fp16")
        ('bf16', 'bf16', 'fp16')

    Introduced in notebooks/17-compile-and-low-precision.ipynb (the planner: notebooks/13-plan-your-training-run.ipynb).
    """
    return "bf16" if precision in FP8_RECIPES else precision


def matmul_precision(strategy) -> str:
    """The peak the linear layers' GEMMs run at: the strategy's precision ("fp8", "mxfp8": a GPU preset's FP8 peak,
    which only Blackwell presets list for "mxfp8")."""
    return strategy.precision


def compute_precision(strategy) -> str:
    """The peak everything else runs at (attention core, head, router) and MFU counts against: bf16 under FP8.

    torchtitan reports FP8 runs' MFU against the bf16 peak too ("the definition of MFU under such scenario is
    not well-defined": its benchmarks/llama3_h100_202412_torchtitan.md).
    """
    return state_precision(strategy.precision)


def fp8_matmuls(strategy) -> bool:
    """True when the linear layers' GEMMs run in FP8 (either recipe)."""
    return strategy.precision in FP8_RECIPES


def linear_rate(gpu, strategy) -> float:
    """FLOP/s a long linear-layer GEMM sustains: the precision's peak x the calibrated efficiency (x FP8's own).

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import GPU
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> h100 = GPU.preset("h100-sxm")
        >>> round(linear_rate(h100, Strategy(precision="fp8")) / linear_rate(h100, Strategy()), 2)
        1.76

    Introduced in notebooks/17-compile-and-low-precision.ipynb (the planner: notebooks/13-plan-your-training-run.ipynb).
    """
    rate = gpu.achieved_flops(matmul_precision(strategy))
    return rate * FP8_GEMM_RELATIVE_EFFICIENCY if fp8_matmuls(strategy) else rate


def gathered_parameter_bytes(strategy, linear: bool = True) -> int:
    """Bytes per parameter a ZeRO-3 (FSDP2) all-gather moves: 1 for FP8 linear weights, else the weight's bytes.

    torchtitan's `enable_fsdp_float8_all_gather` casts each `Float8Linear` weight shard to FP8 before the
    all-gather, halving those bytes; norms, embeddings and the output head (`linear=False`) are gathered in bf16.
    Under ZeRO-1/2 the updated weights are gathered in 16 bits whatever the matmuls run in, and MXFP8's weights are
    gathered in bf16 and quantized after the gather.

    Example:
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> gathered_parameter_bytes(Strategy(zero=3, precision="fp8")), gathered_parameter_bytes(Strategy(zero=3))
        (1, 2)

    Introduced in notebooks/17-compile-and-low-precision.ipynb (the planner: notebooks/13-plan-your-training-run.ipynb).
    """
    if strategy.precision == FP8 and strategy.zero == 3 and linear:
        return 1
    return 2 if strategy.mixed else 4


def cast_bytes(tokens: int, k: int, n: int, strategy) -> tuple[float, float]:
    """(forward, backward) HBM bytes of the FP8 casts around one linear GEMM of a (tokens x k) @ (k x n); 0 unless FP8.

    Forward: the input's dynamic cast (amax, then cast: 5 bytes per value) and the weight's, unless FSDP2
    gathered it in FP8 already (`gathered_parameter_bytes`). Backward: the output gradient's dynamic cast, the
    transposed FP8 copies the weight-gradient GEMM reads (input and output gradient: 3 bytes per value) and the
    transposed weight the input-gradient GEMM reads. MXFP8: the input's and the weight's rowwise and columnwise
    copies in forward, the output gradient's in backward, each from one read (`MX_CAST_BYTES` per value).

    Example:
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> cast_bytes(4096, 4096, 4096, Strategy())
        (0.0, 0.0)
        >>> forward, backward = cast_bytes(4096, 4096, 4096, Strategy(precision="fp8"))
        >>> forward == 2 * 5 * 4096 * 4096 and backward == (5 + 3 + 3 + 3) * 4096 * 4096
        True
        >>> cast_bytes(4096, 4096, 4096, Strategy(precision="mxfp8")) == (2 * 4.0625 * 4096 ** 2, 4.0625 * 4096 ** 2)
        True
    """
    if not fp8_matmuls(strategy):
        return 0.0, 0.0
    weight = k * n
    if strategy.precision == MXFP8:
        return MX_CAST_BYTES * (tokens * k + weight), MX_CAST_BYTES * tokens * n
    weight_cast = 0 if gathered_parameter_bytes(strategy) == 1 else DYNAMIC_CAST_BYTES * weight
    forward = DYNAMIC_CAST_BYTES * tokens * k + weight_cast
    backward = (DYNAMIC_CAST_BYTES + STATIC_CAST_BYTES) * tokens * n + STATIC_CAST_BYTES * (tokens * k + weight)
    return float(forward), float(backward)

"""The planner's constants per GPU generation: the GEMMs' share of peak and flash attention's, and their sources.

Two numbers per generation, each set on the published runs named beside it, and a third where a generation's kernels
were timed alone (KERNEL_GEMM_EFFICIENCY, below):
    GEMM_EFFICIENCY              the fraction of peak the matmuls sustain inside a training step, absorbing what
                                 the model leaves out (kernel launch gaps, wave quantisation, the GEMMs' own
                                 epilogues, imperfect overlap of the optimizer and collectives, host-side time). It
                                 is not the elementwise work: counting each kernel's bytes (traffic.py) instead of
                                 the earlier rule of thumb (2 x and 4 x the saved activation bytes, which also
                                 charged the GEMMs' own inputs and outputs as elementwise traffic: 204 h bytes per
                                 token for GPT-2 small's layer, against the table's 112 h) did not bring the runs
                                 the planner predicts too fast closer (docs/planner.md, "Where it misses, and
                                 why"). It is set once per generation, on ONE published run (`CALIBRATION_RUNS`),
                                 by tests/test_plan_published.py::test_calibration_run (bisection, rounded to 2
                                 digits); every other published run is a prediction (docs/planner.md).
    FLASH_ATTENTION_UTILIZATION  flash attention's share of peak inside a training step at the kernels' plateau
                                 (long sequences, heads of 128; attention_kernels.shape_factor scales it for
                                 others), read off the slope of a published sequence-length sweep, not off any
                                 run's throughput level (below).
Generations without a calibration run borrow another's constants (`BORROWED_GENERATION`, `constants_generation`,
`is_calibrated`); efficiency.py turns them into seconds.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

# The ONE calibrated number per GPU generation (see the module docstring), each set by
# tests/test_plan_published.py::test_calibration_run on the run named here and then fixed.
GEMM_EFFICIENCY = {
    # Narayanan et al. 2021 (arXiv:2104.04473), Table 1, the 18.4B row: h 6144, 40 layers, 48 heads,
    # TP 8, PP 1, 256 A100 80GB, batch 1024, full recomputation, eager attention: 135 TFLOP/s per GPU.
    "ampere": 0.68,
    # MosaicML llm-foundry, scripts/train/benchmarking/README.md, table "H100 80GB BF16", MPT-7B row at
    # sequence 2048 on 8 GPUs: FSDP FULL_SHARD, micro-batch 6, no activation checkpointing, flash
    # attention, 10,643 tokens/s per GPU (published.py's "MPT-7b 8xH100"); its attention priced at 2,048 tokens'
    # kernel rate (attention_kernels.shape_factor: 0.90 of the plateau), which leaves the GEMMs less of the step.
    "hopper": 0.55,
}
CALIBRATION_RUNS = {
    "ampere": "Narayanan et al. 2021, Table 1, 18.4B (TP 8, 256 A100 80GB): 135 TFLOP/s per GPU",
    "hopper": "MosaicML llm-foundry benchmarks, H100 80GB BF16, MPT-7B, seq 2048, 8 GPUs: 10,643 tokens/s per GPU",
}
# Flash attention's share of the GPU's dense bf16/fp16 peak inside a training step, fwd and bwd alike, at the
# kernels' plateau (`attention_seconds` scales it by attention_kernels.shape_factor). A generation without an entry, and fp32 (no FlashAttention-2 kernel), run the attention
# core at the GEMM rate (a T4 has no FlashAttention-2 kernel: PyTorch's SDPA takes its memory-efficient kernel).
# Source, both generations: MosaicML's llm-foundry benchmark tables (scripts/train/benchmarking/README.md), the
# same models on 8 GPUs at 4K-64K tokens (ddp_lab.plan.sequence_sweep.SEQUENCE_SWEEP). Along one model's rows a token's
# work outside attention stays put while its attention grows with the sequence, so the slope of time per token
# against attention FLOPs is attention's cost in those steps, as a share of peak; fitted per model
# (sequence_sweep.attention_share_fits: least squares with one free scale per model for the rest of the step, residuals
# within 2 %), the median over 7 models on A100s and 5 on H100s, rounded; with each row's attention scaled by the
# published kernels' rate at its sequence and head width (attention_kernels.shape_factor), so the share is the one
# at the kernels' plateau (16K tokens and more, heads of 128). So this is a second number per
# generation fitted to published runs, beside GEMM_EFFICIENCY's one calibration run: it is set by how throughput
# falls with length, not by any run's level, and none of the sweep's rows is scored (the scored MosaicML runs are
# the same tables' 2,048-token rows, of the same models: not independent of it in source, only in rows). It also
# takes in any other per-token cost that grows with the sequence and that the planner does not model. The
# FlashAttention-2 kernels alone run faster, which is why the planner no longer takes their numbers:
# FlashAttention-2's paper reports 50-73 % of an A100's peak (Dao 2023, arXiv:2307.08691, abstract) and an H100
# timed here ran PyTorch's FlashAttention-2 at 19-27 % (median 23 %) in the causal shapes of the H100 runs
# (tools/gpu_kernels.py; ddp_lab/plan/measured/h100-sxm-kernels.json; at 2-4K tokens, where a kernel runs below
# its long-sequence rate, while the slope comes mostly from the 16K-64K rows). With those numbers the planner predicted
# the sweep's 32K-64K rows up to 56 % (A100) and 29 % (H100) too fast (docs/planner.md).
# The kernel in those steps was MPT's Triton FlashAttention, not FlashAttention-2: the rows came with llm-foundry
# commit b2a43a147, whose submit_benchmarks.py defaults attn_impl to "triton" (llmfoundry/models/layers/
# flash_attn_triton.py), as the MPT yamls do, and whose sweep.sh does not override it. So the kernels above are
# other kernels, and their gap to these rates is not only what a step costs a kernel. Runs on PyTorch's own
# FlashAttention-2 (SDPA) agree with the same number where they do not recompute: torchtitan's Llama 2 13B on 64
# A100s +7.1 % -> +1.6 %, IBM's Llama 2 7B on 128 A100s +9.1 % -> +3.0 % (50 % -> 31 %; tests/test_plan_published.py).
FLASH_ATTENTION_UTILIZATION = {
    "ampere": 0.31,   # per-model slopes 0.30-0.34 (7 models, 125M-13B)
    "hopper": 0.17,   # per-model slopes 0.17-0.19 (5 models, 760M-13B)
}
# The GEMM efficiency at the kernels' own rate, per generation whose kernels were timed (`kernel_efficiency_of`): the
# value at which the planner's layer_seconds equals one layer's forward and backward timed alone, median over the 15
# timed layers (ddp_lab/plan/measured/h100-sxm-kernels.json, tools/gpu_kernels.py: an H100 SXM, PyTorch 2.11, the
# layer of each H100 calibration run's shape, its GEMMs cuBLAS's and its attention PyTorch's FlashAttention-2), by
# bisection, rounded to 2 digits (tests/test_plan_published.py). No training run sets it. At GEMM_EFFICIENCY's 0.55
# the planner's layer takes 1.18-1.31 x the timed one: that constant also charges what MosaicML's PyTorch steps spent
# between and around their kernels. A stack that keeps the GPU busy from one kernel to the next (fused kernels,
# CUDA graphs, communication overlapped: NVIDIA's NeMo and Megatron recipes) runs nearer the kernels' rate; the
# planner takes it with `fit_to_run.at_kernel_rate` (the CLI's --kernel-rate). Generations without timed kernels
# have none: Blackwell's is not borrowed from Hopper's, unlike its calibrated constants. Every Hopper preset takes it,
# H200 and the 500 W HBM2e H100 too, though only the 700 W H100 SXM was timed.
KERNEL_GEMM_EFFICIENCY = {"hopper": 0.74}
FLASH_PRECISIONS = ("bf16", "fp16")   # FlashAttention-2's kernels; fp32 attention runs at the GEMM rate
# Turing (T4) has no published run with a stated configuration in the validation set: it borrows
# Ampere's constant, unchecked (treat T4 step times as rough). Blackwell (B200, GB200, B300, GB300) has no
# calibration run either: it borrows Hopper's GEMM efficiency and flash share (the same kernels' software
# generation), unchecked; `is_calibrated` says so, and a plan on such a GPU should say its step time is uncalibrated.
UNCALIBRATED_FALLBACK = "ampere"
BORROWED_GENERATION = {"blackwell": "hopper"}   # uncalibrated generations that borrow another's constants


def constants_generation(generation: str) -> str:
    """The generation whose flash share and flash-kernel speed-up apply: its own, or the one it borrows.

    Example:
        >>> constants_generation("blackwell"), constants_generation("ampere")
        ('hopper', 'ampere')

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    return BORROWED_GENERATION.get(generation, generation)


def is_calibrated(generation: str) -> bool:
    """True if the generation's GEMM efficiency was set on a published run of its own (module docstring).

    Example:
        >>> is_calibrated("hopper"), is_calibrated("blackwell")
        (True, False)

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    return generation in GEMM_EFFICIENCY


def flash_share_of(generation: str) -> float | None:
    """Flash attention's share of peak for a generation (its own, or the one it borrows), None without a kernel."""
    return FLASH_ATTENTION_UTILIZATION.get(constants_generation(generation))


def kernel_efficiency_of(generation: str) -> float | None:
    """The GEMM efficiency at a generation's timed kernel rate (KERNEL_GEMM_EFFICIENCY), None where none was timed.

    Example:
        >>> kernel_efficiency_of("hopper") > efficiency_of("hopper"), kernel_efficiency_of("blackwell")
        (True, None)

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    return KERNEL_GEMM_EFFICIENCY.get(generation)


def efficiency_of(generation: str) -> float:
    """The calibrated matmul efficiency of a GPU generation ("ampere", "hopper"; Blackwell borrows Hopper's,
    any other Ampere's: `is_calibrated` is False for them).

    Example:
        >>> efficiency_of("hopper") < efficiency_of("ampere")
        True
        >>> efficiency_of("blackwell") == efficiency_of("hopper")      # uncalibrated: borrowed
        True

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    fallback = BORROWED_GENERATION.get(generation, UNCALIBRATED_FALLBACK)
    return GEMM_EFFICIENCY.get(generation, GEMM_EFFICIENCY[fallback])

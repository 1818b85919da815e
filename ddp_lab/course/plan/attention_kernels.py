"""Which flash-attention kernel runs the attention core, and how much faster it is than FlashAttention-2.

Flash attention is one algorithm (Dao et al. 2022: tiles of Q K^T and the weighted V kept on chip, the causal
blocks skipped), written as several kernels that run at different rates on the same GPU:
    fa2    FlashAttention-2 and kernels of its design (Dao 2023, arXiv:2307.08691): the Dao-AILab package,
           MosaicML's Triton kernel, and PyTorch's scaled_dot_product_attention wherever its FLASH_ATTENTION
           backend comes first: on every GPU up to PyTorch 2.8 (2.5.0 aside, which put cuDNN first on H100 until
           pytorch/pytorch pull request #138522 made it opt-in), later on GPUs other than H100/H200/B200/GB200,
           and on those where the build's cuDNN does not qualify (below). torchtitan's published H100 tables ran
           it. The planner's `generation_constants.FLASH_ATTENTION_UTILIZATION` was read off runs of this kind.
    cudnn  kernels written for Hopper's asynchronous tensor cores: cuDNN's fused flash attention, which
           Transformer Engine prefers on Hopper and newer when both it and FlashAttention-2 apply
           (NVIDIA/TransformerEngine pull request #497, release 1.2: FusedAttention before FlashAttention on
           sm90), so NeMo, Megatron-LM and Megatron-Bridge with Transformer Engine run it; PyTorch's
           CUDNN_ATTENTION backend, which scaled_dot_product_attention puts first on sm90 and sm100 (H100, H200,
           B200, GB200) from PyTorch 2.9 when the build's cuDNN qualifies (pytorch/pytorch pull request #162073:
           cuDNN 9.9 or newer, which the 2.9 CUDA 12.8 wheels missed, issue #165801; the bar later raised to
           cuDNN newer than 9.15.0 for a bug fixed there, which the 2.11 wheels bundle:
           `check_prefer_cudnn_attention` in sdp_utils.cpp, huggingface/transformers pull request #48163's
           closing comment) and that torchtitan picks on B200s (pytorch/torchtitan pull request #1196); and
           FlashAttention-3 (Shah et al. 2024, arXiv:2407.08608), which runs in the same class.
So a PyTorch run up to 2.8 is `fa2`; a later one on H100/H200/B200 depends on its build: the kernel names in a
profile (cuDNN's or flash_fwd/flash_bwd) or `torch.backends.cudnn.version()` against the bars above tell.

How much faster, published (bf16):
    Shah et al. 2024, abstract: FlashAttention-3 is 1.5-2.0x faster than FlashAttention-2 (forward, H100);
    pytorch/pytorch issue #142132: SDPA's FlashAttention-2 329 vs cuDNN 631 TFLOP/s forward, H100,
        batch 1, 24 heads of 128, 4,608 tokens (1.92x);
    huggingface/transformers pull request #48163 (closed unmerged; its benchmarks of training shapes, forward
        and backward, 8K-128K tokens): cuDNN 1.7-2.3x faster than FlashAttention-2 on H100 and H200, 0.82x on an
        A100, 0.88x on an RTX PRO 6000 (workstation Blackwell, sm120);
    pytorch/torchtitan pull request #1196: a torchtitan run on B200s (sm100) went from 10,902 to 12,211 tokens/s
        per GPU (1.120x) when SDPA was switched from FlashAttention-2 to cuDNN: the whole step, not the kernel, and
        one whose per-op checkpointing re-ran the cuDNN attention in backward (op_checkpoint.py), so not a ratio
        the planner can be checked on.
The planner takes the lower end of the training-shape range, 1.7x on Hopper (inside FlashAttention-3's
1.5-2.0x), and 0.82x on Ampere. Datacenter Blackwell (B200, GB200, B300, GB300: the planner's "blackwell") has no
published kernel ratio here: it borrows Hopper's, as it borrows Hopper's other constants
(`generation_constants.constants_generation`), unchecked (torchtitan's B200 step above says only that cuDNN is the
faster there); the workstation Blackwell's 0.88x is another chip, which the planner does not model. The speed-up
multiplies the flash share of peak the attention core runs at inside a training step; nothing here was fitted to
a training run.

How the rate depends on the shape (`shape_factor`), published (bf16, one H100 80GB SXM5, batch x sequence 16K
tokens, hidden 2,048): Shah et al. 2024 (arXiv:2407.08608), Figure 5 (forward, with the causal mask) and Figure 6
(backward, given without it), the FlashAttention-2 and cuDNN bars at 512 to 16K tokens. A kernel reaches its plateau by 4-8K tokens: forward and
backward together, at 4K they run at 0.96 and 0.97 of their 16K rate, at 2K at 0.90, at 1K at about 0.8, at 512
at about 0.6 (a short sequence gives each query tile few key tiles to loop over, and the causal mask's diagonal
tiles a larger part). A head of 64 runs at 0.90 (FlashAttention-2) and 0.80 (cuDNN) of a head of 128's rate at
16K: the softmax's exponentials, one per score whatever the head's width, weigh more against its multiply-adds
(the paper's Sec. 3.1). The planner's share of peak (`generation_constants.FLASH_ATTENTION_UTILIZATION`, fitted
on MosaicML's 4K-64K rows with this factor in) is the plateau's at a head of 128; the factor scales it for the
sequence a kernel call sees (a rank's sequence, seq_len / cp with context parallelism) and the head's width.
Where the figures taken here stop, the factor holds their last value: 1.0 from 16K on (MosaicML's sweep agrees:
its per-model residuals stay within 2 % out to 64K), the 512-token value below 512 (a sliding window's short
reach is not priced: its tiles are counted, sliding_window.py), 1.0 for heads wider than 128 (the backward bars
taken are at 64 and 128). Hopper's tables; Blackwell borrows them with Hopper's other constants; Ampere has no
table here (FlashAttention-2's paper measures the A100 only in figures whose values are not taken here) and
keeps a flat rate: its factor is 1.0. Left out: the backward figure has no causal mask, whose diagonal tiles may
cost a short backward more than the factor says; and the benchmark's shapes keep every SM busy (16K tokens a
call), where a rank with few heads and one short sequence may not. An H100 timed here agrees on the head's width:
PyTorch's FlashAttention-2 at 2,048 tokens ran MPT-125M's and 350M's heads of 64 at 0.89 of the MPT models' heads
of 128 (ddp_lab/plan/measured/h100-sxm-kernels.json; tests/test_plan_published.py), against the figures' 0.90.

Introduced in notebooks/13-plan-your-training-run.ipynb (the `--flash-kernel` flag; docs/planner.md).
"""

from __future__ import annotations

import functools
import math

FLASH_KERNELS = ("fa2", "cudnn")

# cuDNN's fused flash attention over FlashAttention-2, per GPU generation (module docstring's sources).
CUDNN_SPEEDUP = {"hopper": 1.7, "ampere": 0.82}


# Shah et al. 2024 (FlashAttention-3, arXiv:2407.08608), bf16 TFLOP/s on an H100 80GB SXM5 as the bars are labelled:
# Figure 5's causal forward and Figure 6's backward (which the figure gives without the causal mask) at SEQUENCES,
# heads of 128; and both at 16K tokens for heads of 64.
SEQUENCES = (512, 1024, 2048, 4096, 8192, 16384)
HOPPER_KERNEL_TFLOPS = {
    "fa2": {"forward": (191, 260, 298, 319, 333, 335), "backward": (214, 260, 291, 310, 318, 322),
            "head_64": (299, 291)},
    "cudnn": {"forward": (315, 410, 484, 518, 529, 539), "backward": (305, 408, 465, 499, 518, 516),
              "head_64": (388, 433)},
}
# The generations with a published table here (`constants_generation` maps Blackwell to Hopper's); others are flat.
KERNEL_TFLOPS = {"hopper": HOPPER_KERNEL_TFLOPS}
# A flash backward's FLOPs over its forward's: Q K^T is recomputed, 5 matmuls of s^2 d instead of 4 (Dao 2023,
# arXiv:2307.08691); efficiency.attention_backward_factor returns it for flash attention.
FLASH_BACKWARD_FACTOR = 2.5


def _step_rate(forward: float, backward: float) -> float:
    """The rate of one forward and its backward together: FLOPs 1 + 2.5 over the seconds they take."""
    return (1 + FLASH_BACKWARD_FACTOR) / (1 / forward + FLASH_BACKWARD_FACTOR / backward)


@functools.cache
def _length_factors(generation: str, kernel: str) -> tuple[float, ...]:
    table = KERNEL_TFLOPS[generation][kernel]
    rates = [_step_rate(f, b) for f, b in zip(table["forward"], table["backward"])]
    return tuple(rate / rates[-1] for rate in rates)


@functools.cache
def _head_64_factor(generation: str, kernel: str) -> float:
    table = KERNEL_TFLOPS[generation][kernel]
    return _step_rate(*table["head_64"]) / _step_rate(table["forward"][-1], table["backward"][-1])


def shape_factor(generation: str, kernel: str, seq_len: int, head_dim: int) -> float:
    """A flash kernel's rate at a call's sequence and head width over its rate at 16K tokens and a head of 128.

    `generation` is the one whose constants apply (`generation_constants.constants_generation`); `seq_len` is the
    sequence one kernel call sees (seq_len / cp under context parallelism). Interpolated in log2 of the sequence
    and of the head width between the published points; held at the last point outside them (module docstring).

    Example:
        >>> [round(shape_factor("hopper", "fa2", s, 128), 2) for s in (1024, 2048, 4096, 32768)]
        [0.8, 0.9, 0.96, 1.0]
        >>> round(shape_factor("hopper", "cudnn", 8192, 64), 2), shape_factor("ampere", "fa2", 512, 64)
        (0.8, 1.0)

    Introduced in notebooks/13-plan-your-training-run.ipynb (docs/planner.md).
    """
    if generation not in KERNEL_TFLOPS:
        return 1.0
    lengths, narrow = _length_factors(generation, kernel), _head_64_factor(generation, kernel)
    shortest = math.log2(SEQUENCES[0])           # SEQUENCES double from one point to the next: 1 apart in log2
    x = min(max(math.log2(max(seq_len, 1)), shortest), math.log2(SEQUENCES[-1])) - shortest
    i = min(int(x), len(SEQUENCES) - 2)
    length = lengths[i] + (lengths[i + 1] - lengths[i]) * (x - i)
    width = min(max(math.log2(max(head_dim, 1)), 6.0), 7.0) - 6.0       # 0 at a head of 64 or less, 1 at 128 or more
    return length * (narrow + (1 - narrow) * width)


def kernel_speedup(generation: str, kernel: str) -> float:
    """How much faster `kernel` runs the flash-attention core than FlashAttention-2 on a GPU generation.

    `generation` is the one whose constants apply (`generation_constants.constants_generation`: Blackwell reads
    Hopper's).

    Example:
        >>> kernel_speedup("hopper", "cudnn"), kernel_speedup("hopper", "fa2"), kernel_speedup("turing", "fa2")
        (1.7, 1.0, 1.0)

    On Turing (a T4) neither kernel runs: PyTorch's SDPA runs its memory-efficient kernel there, planned at the
    "fa2" rate (report.attention_text names it), and "cudnn" is refused (cuDNN's fused flash attention needs Ampere
    or newer).

    Introduced in notebooks/13-plan-your-training-run.ipynb (the `--flash-kernel` flag; docs/planner.md).
    """
    check(generation, kernel)
    if kernel == "fa2":
        return 1.0
    return CUDNN_SPEEDUP.get(generation, 1.0)


def check(generation: str, kernel: str) -> None:
    """Refuse a kernel that does not run on the generation: cuDNN's fused flash attention on Turing (a T4)."""
    if kernel == "cudnn" and generation == "turing":
        raise ValueError("flash_kernel='cudnn' on a T4: cuDNN's fused flash attention needs Ampere or newer, and "
                         "PyTorch's SDPA runs its memory-efficient kernel there, which the planner prices as 'fa2': "
                         "keep flash_kernel='fa2'")

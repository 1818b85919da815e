"""Which flash-attention kernel runs the attention core, and how much faster it is than FlashAttention-2.

Flash attention is one algorithm (Dao et al. 2022: tiles of Q K^T and the weighted V kept on chip, the causal
blocks skipped), written as several kernels that run at different rates on the same GPU:
    fa2    FlashAttention-2 and kernels of its design (Dao 2023, arXiv:2307.08691): PyTorch's
           scaled_dot_product_attention by default (its FLASH_ATTENTION backend comes first; the cuDNN backend
           is opt-in since PyTorch 2.5.1, pytorch/pytorch issue #138649), torchtitan on H100s, MosaicML's
           Triton kernel. The planner's `efficiency.FLASH_ATTENTION_UTILIZATION` was read off runs of this kind.
    cudnn  kernels written for Hopper's asynchronous tensor cores: cuDNN's fused flash attention, which
           Transformer Engine prefers on Hopper and newer when both it and FlashAttention-2 apply (so NeMo,
           Megatron-LM and Megatron-Bridge with Transformer Engine run it: NVIDIA/NeMo pull request #9188,
           docs/source/performance/memory_optimizations.rst), PyTorch's CUDNN_ATTENTION backend (torchtitan
           picks it on B200s: pytorch/torchtitan pull request #1196), and FlashAttention-3 (Shah et al. 2024,
           arXiv:2407.08608), which runs in the same class.

How much faster, published (bf16, H100 SXM):
    Shah et al. 2024, abstract: FlashAttention-3 is 1.5-2.0x faster than FlashAttention-2 (forward);
    pytorch/pytorch issue #142132: SDPA's default (FlashAttention-2) 329 vs cuDNN 631 TFLOP/s forward,
        batch 1, 24 heads of 128, 4,608 tokens (1.92x);
    huggingface/transformers pull request #48163 (benchmarks of training shapes, forward and backward): cuDNN
        1.7-2.3x faster than FlashAttention-2 on Hopper, 0.82x on an A100.
The planner takes the lower end of the training-shape range, 1.7x on Hopper (inside FlashAttention-3's
1.5-2.0x), and 0.82x on Ampere; Blackwell borrows Hopper's, unchecked (as its other constants,
efficiency.BORROWED_GENERATION). The speed-up multiplies the flash share of peak the attention core runs at
inside a training step; nothing here was fitted to a training run.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

FLASH_KERNELS = ("fa2", "cudnn")

# cuDNN's fused flash attention over FlashAttention-2, per GPU generation (module docstring's sources).
CUDNN_SPEEDUP = {"hopper": 1.7, "ampere": 0.82}
BORROWED = {"blackwell": "hopper"}


def kernel_speedup(generation: str, kernel: str) -> float:
    """How much faster `kernel` runs the flash-attention core than FlashAttention-2 on a GPU generation.

    Example:
        >>> kernel_speedup("hopper", "cudnn"), kernel_speedup("hopper", "fa2"), kernel_speedup("turing", "cudnn")
        (1.7, 1.0, 1.0)

    A generation without a published comparison (Turing) keeps FlashAttention-2's rate.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    if kernel == "fa2":
        return 1.0
    return CUDNN_SPEEDUP.get(generation, CUDNN_SPEEDUP.get(BORROWED.get(generation), 1.0))

"""Per-op selective activation checkpointing as torchtitan runs it: `Strategy(recompute="op")`.

torchtitan's "selective op" checkpointing (`activation_checkpoint.selective_ac_option = "op"`; its
parallelize_llama.py, e.g. commits 0413364, 9dec370, 820504e) wraps each transformer block in PyTorch's
non-reentrant checkpoint with a policy over the block's aten ops, in forward order:
    save       the outputs of the ops on its save list: aten.mm, the flash/efficient attention kernels,
               reduce_scatter (and the amax of FP8 scaling) - except every second aten.mm: the policy
               counts the block's mm calls and recomputes the 2nd, 4th, 6th, ...;
    recompute  everything else: the norms, RoPE, the activation function and its product, the residual adds.
A Llama block's matmuls run in the order Q, K, V, output projection, FFN gate (w1), up (w3), down (w2), so
K, the output projection and the FFN's up projection are run again in backward. Under FP8 the planner applies
the same rule: torchao's Float8 linears still call aten.mm on their Float8 tensors, and the policy, a dispatch
mode, sees that call before the tensor subclass turns it into a scaled FP8 matmul (whether a compiled graph keeps
that order is not checked here). The checkpoint stops early (PyTorch >= 2.1): the block's last GEMM, the FFN
down projection, is never re-run, since backward needs its input, not its output.

What it keeps for backward, per micro-batch on one tensor-parallel rank: the block's input, the outputs of
the matmuls it saves (at their local widths), the attention output and its fp32 log-sum-exp.

Dense models only (torchtitan's Llama blocks); the planner refuses it for a mixture-of-experts model.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations


def block_matmuls(model, strategy) -> list[tuple[str, float, int, int]]:
    """A Llama block's aten.mm calls in forward order on one TP rank: (name, forward FLOPs, k, output width)."""
    h, q, kv, f, t = model.hidden, model.q_dim, model.kv_dim, model.ffn_, strategy.tp
    tokens = strategy.micro_batch * model.seq_len
    mms = [("q", h, q // t), ("k", h, kv // t), ("v", h, kv // t), ("out", q // t, h)]
    mms += [("gate", h, f // t)] if model.ffn_kind == "swiglu" else []
    mms += [("up", h, f // t), ("down", f // t, h)]
    return [(name, 2 * tokens * k * n, k, n) for name, k, n in mms]


def recomputed_matmuls(model, strategy) -> list[tuple[str, float, int, int]]:
    """The block's matmuls run again in backward: every second one, never the last.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> llama = Transformer.preset("llama3-8b")
        >>> [name for name, *_ in recomputed_matmuls(llama, Strategy(recompute="op"))]
        ['k', 'out', 'up']

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    mms = block_matmuls(model, strategy)
    return [mm for i, mm in enumerate(mms, start=1) if i % 2 == 0 and mm[0] != "down"]


def kept_bytes(model, strategy, value_bytes: int) -> int:
    """Activation bytes the block keeps for backward under per-op checkpointing (module docstring).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> llama = Transformer.preset("llama3-8b")
        >>> s, h, f, kv = 8192, 4096, 14336, 1024
        >>> kept_bytes(llama, Strategy(recompute="op"), 2) == 2 * s * (h + h + kv + f + h + h) + 4 * 32 * s
        True

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    tokens, t = strategy.micro_batch * model.seq_len, strategy.tp
    recomputed = {name for name, *_ in recomputed_matmuls(model, strategy)}
    saved_outputs = sum(width for name, _, _, width in block_matmuls(model, strategy) if name not in recomputed)
    block_input = model.hidden // (t if strategy.sequence_parallel else 1)
    attention_output = model.q_dim // t
    log_sum_exp = 4 * model.heads // t
    return tokens * (value_bytes * (block_input + saved_outputs + attention_output) + log_sum_exp)

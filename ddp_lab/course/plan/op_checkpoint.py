"""Per-op selective activation checkpointing as torchtitan runs it: `Strategy(recompute="op")`.

torchtitan's "selective op" checkpointing (`activation_checkpoint.selective_ac_option = "op"`) wraps each
transformer block in PyTorch's non-reentrant checkpoint with a policy over the block's aten ops, in forward
order. The planner models the policy of torchtitan's parallelize_llama.py at commits 0413364, 9dec370 and
820504e (the commits of the published runs it is checked on):
    save       the outputs of the ops on its save list: aten.mm, the flash/efficient attention kernels,
               reduce_scatter (and the amax of FP8 scaling) - except every second aten.mm: the policy
               counts the block's mm calls and recomputes the 2nd, 4th, 6th, ...;
    recompute  everything else: the norms, RoPE, the activation function and its product, the residual adds,
               and the all-gathers of sequence parallelism (or the all-reduce without it).
A Llama block's matmuls run in the order Q, K, V, output projection, FFN gate (w1), up (w3), down (w2), so
K, the output projection and the FFN's up projection are run again in backward. Under FP8 the planner applies
the same rule: torchao's Float8 linears still call aten.mm on their Float8 tensors, and the policy, a dispatch
mode, sees that call before the tensor subclass turns it into a scaled FP8 matmul (whether a compiled graph keeps
that order is not checked here). The checkpoint stops early (PyTorch >= 2.1): the block's last GEMM, the FFN
down projection, is never re-run, since backward needs its input, not its output.

With tensor parallelism (`recomputed_tp_collectives`): the all-gathers before the QKV and the FFN's first GEMMs
are re-run (backward needs the gathered inputs of the saved Q, V and gate GEMMs), one all-reduce's worth; the
reduce-scatters' outputs are saved. Without sequence parallelism the output projection's all-reduce is re-run
instead (the FFN norm needs its sum), the same ring time.

The cuDNN attention kernel (`Strategy.flash_kernel="cudnn"`) is not on those commits' save list, so there its
output is recomputed; pytorch/torchtitan pull request #2095 (December 2025) adds every SDPA backend to the list,
and the planner, which saves the attention output whichever kernel runs it, describes torchtitan from there.

What it keeps for backward, per micro-batch on one tensor-parallel rank: the block's input, the outputs of
the matmuls it saves (at their local widths), the attention output and its fp32 log-sum-exp, and with sequence
parallelism the two reduce-scatters' outputs (h/tp wide each).

The save list counts aten.mm calls, so the rule holds for blocks whose linears have no bias (a biased linear
calls aten.addmm, not on the list), a SwiGLU FFN (the order above) and no dropout (torchtitan's Llama, Mistral
and Qwen blocks): `check` refuses other models, and mixture-of-experts and latent-attention blocks, in one line; `check_fields`
refuses eager attention (there is no flash kernel whose output to keep).

Introduced in notebooks/13-plan-your-training-run.ipynb (the `--recompute op` flag; docs/planner.md).
"""

from __future__ import annotations


def check_fields(strategy) -> None:
    """Refuse per-op checkpointing with eager attention: the policy keeps the flash-attention kernel's output.

    Introduced in notebooks/13-plan-your-training-run.ipynb (the `--recompute op` flag; docs/planner.md).
    """
    if strategy.recompute == "op" and strategy.attention != "flash":
        raise ValueError("recomputation 'op' keeps the flash-attention kernel's output (torchtitan's per-op "
                         "policy); with eager attention choose selective or full recomputation")


def check(model, strategy) -> None:
    """Refuse per-op checkpointing for a model outside the rule the planner models (module docstring).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> check(Transformer.preset("gpt2-small"), Strategy(recompute="op"))    # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: recomputation 'op' is modelled for ... gpt2-small has a GeLU FFN, biases, dropout: choose ...

    Introduced in notebooks/13-plan-your-training-run.ipynb (the `--recompute op` flag; docs/planner.md).
    """
    if strategy.recompute != "op":
        return
    if model.moe is not None:
        raise ValueError(f"recomputation 'op' is modelled for torchtitan's dense blocks only; "
                         f"{model.name} is a mixture-of-experts model: choose full, selective or no recomputation")
    if model.latent is not None:
        raise ValueError(f"recomputation 'op' is modelled for blocks with Q, K, V and output matmuls in that order; "
                         f"{model.name} has latent attention (more matmuls, in another order): choose full, selective "
                         f"or no recomputation")
    differs = [what for what, present in (("a GeLU FFN", model.ffn_kind != "swiglu"), ("biases", model.bias),
                                          ("biases on Q, K and V", model.qkv_bias and not model.bias),
                                          ("dropout", model.dropout)) if present]
    if differs:
        raise ValueError(f"recomputation 'op' is modelled for torchtitan's bias-free SwiGLU blocks without dropout; "
                         f"{model.name} has {', '.join(differs)}: choose full, selective or no "
                         f"recomputation")


def recomputed_tp_collectives(strategy) -> float:
    """The tensor-parallel collectives re-run in backward, in all-reduces of the block's b s h activations.

    Two all-gathers with sequence parallelism (half an all-reduce each), one all-reduce without it; none without
    tensor parallelism or without per-op checkpointing (module docstring).

    Example:
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> recomputed_tp_collectives(Strategy(tp=8, sequence_parallel=True, recompute="op"))
        1.0
        >>> recomputed_tp_collectives(Strategy(tp=8, sequence_parallel=True, recompute="full"))
        0.0

    Introduced in notebooks/13-plan-your-training-run.ipynb (the `--recompute op` flag; docs/planner.md).
    """
    return 1.0 if strategy.recompute == "op" and strategy.tp > 1 else 0.0


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

    Introduced in notebooks/13-plan-your-training-run.ipynb (the `--recompute op` flag; docs/planner.md).
    """
    mms = block_matmuls(model, strategy)
    return [mm for i, mm in enumerate(mms, start=1) if i % 2 == 0 and mm[0] != "down"]


def recomputed_flops(model, strategy) -> float:
    """FLOPs of the matmuls per-op checkpointing re-runs, per block and micro-batch on one TP rank.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> llama = Transformer.preset("llama3-8b")
        >>> recomputed_flops(llama, Strategy(recompute="op")) == 2 * 8192 * 4096 * (1024 + 4096 + 14336)
        True

    Introduced in notebooks/13-plan-your-training-run.ipynb (the `--recompute op` flag; docs/planner.md).
    """
    return sum(flops for _, flops, _, _ in recomputed_matmuls(model, strategy))


def kept_bytes(model, strategy, value_bytes: int) -> int:
    """Activation bytes the block keeps for backward under per-op checkpointing (module docstring).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> llama = Transformer.preset("llama3-8b")
        >>> s, h, f, kv = 8192, 4096, 14336, 1024
        >>> kept_bytes(llama, Strategy(recompute="op"), 2) == 2 * s * (h + h + kv + f + h + h) + 4 * 32 * s
        True

    Introduced in notebooks/13-plan-your-training-run.ipynb (the `--recompute op` flag; docs/planner.md).
    """
    tokens, t = strategy.micro_batch * model.seq_len, strategy.tp
    recomputed = {name for name, *_ in recomputed_matmuls(model, strategy)}
    saved_outputs = sum(width for name, _, _, width in block_matmuls(model, strategy) if name not in recomputed)
    block_input = model.hidden // (t if strategy.sequence_parallel else 1)
    attention_output = model.q_dim // t
    log_sum_exp = 4 * model.heads // t
    reduce_scatters = 2 * model.hidden // t if strategy.sequence_parallel else 0
    return tokens * (value_bytes * (block_input + saved_outputs + attention_output + reduce_scatters) + log_sum_exp)

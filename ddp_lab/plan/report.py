"""Plans as fixed-width text: the table the CLI and README print, and one plan's breakdown.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

GB = 1e9
LEGEND = ("strategy: dpN tpN ppN = data-, tensor-, pipeline-parallel sizes; zN = ZeRO stage;\n"
          "          mbAxB = B micro-batches of A sequences per step; sp = sequence parallel;\n"
          "          sel/full = selective/full activation recomputation. GB = 10^9 bytes.")


def table(plans) -> str:
    """One line per plan: strategy, memory per GPU (GB = 10^9 bytes), step time, tokens/s, MFU.

    Example:
        >>> from ddp_lab.plan import ClusterSpec, Transformer, search
        >>> print(table(search(Transformer.preset("llama3-8b"), ClusterSpec.preset("h100-sxm", nodes=4), top=1)))
        ...                                                       # doctest: +ELLIPSIS
          # strategy ...

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    header = f"{'#':>3} {'strategy':<34} {'GB/GPU':>7} {'step s':>8} {'tokens/s':>11} {'MFU':>6}"
    lines = [header, "-" * len(header)]
    for rank, plan in enumerate(plans, 1):
        lines.append(f"{rank:>3} {plan.strategy.label():<34} {plan.memory.total / GB:>7.1f} "
                     f"{plan.time.total:>8.2f} {plan.tokens_per_second:>11,.0f} {plan.mfu:>6.1%}")
    return "\n".join(lines + [LEGEND])


def breakdown(plan) -> str:
    """One plan's memory per GPU and step time, part by part, then its DP communication before overlap.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    m, t = plan.memory, plan.time
    lines = [f"{plan.model.name} on {plan.cluster.name or plan.cluster.gpus} GPUs: {plan.strategy.label()}",
             f"  global batch {plan.strategy.global_batch} sequences x {plan.model.seq_len} tokens, "
             f"precision {plan.strategy.precision}",
             "  memory per GPU (GB)"]
    for name, label in (("params", "parameters"), ("grads", "gradients"), ("optimizer", "optimizer"),
                        ("activations", "activations"), ("buffers", "buffers")):
        lines.append(f"    {label:<26}{getattr(m, name) / GB:>9.2f}")
    fits = "fits" if plan.fits else "does NOT fit"
    lines.append(f"    {'total':<26}{m.total / GB:>9.2f}  of {plan.cluster.gpu.memory / GB:.1f} ({fits})")
    lines.append("  step time (s)")
    for name, label in (("compute", "compute"), ("tp_comm", "TP communication"), ("bubble", "pipeline bubble"),
                        ("pp_comm", "PP communication"), ("dp_comm_exposed", "exposed DP communication")):
        lines.append(f"    {label:<26}{getattr(t, name):>9.3f}")
    lines.append(f"    {'total':<26}{t.total:>9.3f}")
    # All of the DP communication, of which only the exposed part is in the total above: how much
    # of it compute hides, and how close it comes to being exposed (lessons 05 and 09 overlap it).
    lines.append(f"  {'DP communication (total)':<28}{t.dp_comm:>9.3f}  "
                 f"({t.dp_comm - t.dp_comm_exposed:.3f} hidden under compute, not in the step time)")
    lines.append(f"  tokens/s {plan.tokens_per_second:,.0f}   MFU {plan.mfu:.1%}")
    return "\n".join(lines)


def model_states_text(params: int, strategy) -> str:
    """The short form's answer: per-GPU weights, gradients, optimizer state and their total in GB."""
    from ddp_lab.plan.memory import model_state_bytes

    m = model_state_bytes(params, strategy)
    adam = "mixed-precision Adam (2 + 2 + 12 bytes/param)" if strategy.mixed else "fp32 Adam (4 + 4 + 8 bytes/param)"
    lines = [f"{params / 1e9:g}B parameters, dp={strategy.dp}, ZeRO-{strategy.zero}, {adam}; per GPU:"]
    for name, label in (("params", "parameters"), ("grads", "gradients"), ("optimizer", "optimizer")):
        lines.append(f"  {label:<12}{getattr(m, name) / GB:>10.2f} GB")
    lines.append(f"  {'total':<12}{m.model_states / GB:>10.2f} GB")
    return "\n".join(lines)

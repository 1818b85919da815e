"""Communication per transformer layer: tensor parallelism's activations vs data parallelism's gradients.

Introduced in notebooks/08-tensor-parallelism.ipynb.
"""

from __future__ import annotations

import matplotlib.pyplot as plt


def comm_per_layer(hidden: int, bytes_per_element: int, measured_tp: dict[int, int], measured_dp: int,
                   title: str = ""):
    """Bytes one rank hands to all-reduce per layer and step, against the tokens in the step.

    Draws the two formulas of lesson 08 as lines, tensor parallelism's `4 * tokens * hidden`
    elements (two activation all-reduces in forward, two in backward) and data parallelism's
    `12 * hidden**2 + 13 * hidden` gradient elements (every parameter of the layer, whatever
    the batch), with the measured values as dots on them.

    Args:
        hidden: the model's hidden size h.
        bytes_per_element: 4 for fp32, 2 for bf16.
        measured_tp: {tokens b*s: bytes measured with tensor parallelism}.
        measured_dp: bytes measured for data parallelism's gradient all-reduce.
        title: the figure title.

    Returns:
        The matplotlib Figure.

    Example:
        >>> fig = comm_per_layer(16, 4, {8: 2048, 64: 16384}, 13120)

    Introduced in notebooks/08-tensor-parallelism.ipynb.
    """
    tokens = sorted(measured_tp)
    low, high = max(1, tokens[0] // 4), tokens[-1] * 4
    grid = [low * (high / low) ** (i / 50) for i in range(51)]
    dp_formula = (12 * hidden ** 2 + 13 * hidden) * bytes_per_element
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(grid, [4 * t * hidden * bytes_per_element for t in grid], color="#4C72B0",
            label="tensor parallel: 4 · b·s·h activations")
    ax.plot(grid, [dp_formula] * len(grid), color="#DD8452", label="data parallel: 12h² + 13h gradients")
    ax.scatter(tokens, [measured_tp[t] for t in tokens], color="#4C72B0", zorder=3, label="measured (TP)")
    ax.scatter(tokens, [measured_dp] * len(tokens), color="#DD8452", marker="s", zorder=3, label="measured (DP)")
    crossover = (12 * hidden + 13) / 4
    ax.axvline(crossover, color="grey", linestyle=":", linewidth=1)
    ax.annotate(f"b·s = 3h + 13/4 = {crossover:g}", (crossover, dp_formula), textcoords="offset points",
                xytext=(6, -28), fontsize=8, color="grey")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("tokens per step on the TP group (b·s)")
    ax.set_ylabel(f"bytes per layer per step (h = {hidden})")
    ax.set_title(title or "all-reduce payload per rank, one transformer layer")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig

"""Stacked bars of memory per device: parameters, gradients, optimizer state, activations.

Introduced in notebooks/01-data-vs-model-parallelism.ipynb.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

COLOURS = {"params": "#4C72B0", "grads": "#DD8452", "optimizer": "#55A868", "activations": "#C44E52"}


def memory_bars(breakdowns: dict[str, dict[str, float]], title: str = "memory per device",
                unit: str = "MB", limit: float | None = None):
    """Draw one stacked bar per strategy: bytes per device split into its components.

    Args:
        breakdowns: {strategy label: {component: bytes}}; components are stacked in the
            order params, grads, optimizer, activations (others after them); a component that
            is zero or absent in every bar is neither drawn nor named in the legend.
        title: the figure title.
        unit: 'MB' (10**6 bytes) or 'GB' (10**9 bytes).
        limit: draw a dashed line at this many bytes (e.g. a GPU's memory).

    Returns:
        the matplotlib Figure.

    Example:
        >>> fig = memory_bars({"single": {"params": 4e6, "grads": 4e6, "optimizer": 8e6, "activations": 1e6}})

    Introduced in notebooks/01-data-vs-model-parallelism.ipynb.
    """
    scale = {"MB": 1e6, "GB": 1e9}[unit]
    labels = list(breakdowns)
    present = {c for b in breakdowns.values() for c, value in b.items() if value}   # the legend names only these
    components = [c for c in COLOURS if c in present] + sorted(present - set(COLOURS))
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(labels), 3.4))
    bottoms = [0.0] * len(labels)
    for component in components:
        heights = [breakdowns[label].get(component, 0) / scale for label in labels]
        ax.bar(labels, heights, bottom=bottoms, label=component, color=COLOURS.get(component), width=0.6)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    for x, total in enumerate(bottoms):
        ax.text(x, total, f"{total:.3g}" if total < 100 else f"{total:.0f}", ha="center", va="bottom", fontsize=8)
    ax.margins(y=0.12)                                  # room for the tallest bar's label below the title
    if limit is not None:
        ax.axhline(limit / scale, color="black", linestyle="--", linewidth=1)
        ax.text(len(labels) - 0.5, limit / scale, f"device limit {limit / scale:.0f} {unit}",
                ha="right", va="bottom", fontsize=8)
    ax.set_ylabel(f"{unit} per device")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig

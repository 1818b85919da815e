"""The alpha-beta cost model against measured timings (log-log).

Introduced in notebooks/02-collectives.ipynb.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt


def measured_vs_model(nbytes: Sequence[float], series: dict[str, tuple[Sequence[float], Sequence[float]]],
                      title: str = "time vs message size"):
    """Plot measured times (dots) and the model's predictions (lines) against message size.

    Args:
        nbytes: message sizes in bytes (the x axis).
        series: {label: (measured seconds, predicted seconds)}, one colour per label.
        title: the figure title.

    Returns:
        the matplotlib Figure.

    Example:
        >>> fig = measured_vs_model([4, 4e6], {"send/recv": ([5e-5, 2e-3], [5e-5, 2e-3])})

    Introduced in notebooks/02-collectives.ipynb.
    """
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for index, (label, (measured, predicted)) in enumerate(series.items()):
        colour = f"C{index}"
        ax.loglog(nbytes, [t * 1e6 for t in measured], "o", color=colour, label=f"{label}: measured")
        ax.loglog(nbytes, [t * 1e6 for t in predicted], "-", color=colour, label=f"{label}: alpha-beta model")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("time (µs)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig

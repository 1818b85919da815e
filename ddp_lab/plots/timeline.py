"""Per-rank timelines: what each rank was doing when (backward, communication, ...).

Introduced in notebooks/04-ddp-from-scratch.ipynb, where backward hooks launch gradient
all-reduces while backward is still running.
"""

from __future__ import annotations

from typing import Iterable

import matplotlib.pyplot as plt

from ddp_lab.course.pipeline_parallel.schedules import Span


_COLOURS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"]


def plot_timeline(spans: Iterable[Span], title: str = "", unit: str = "ms"):
    """Draw one horizontal lane per (rank, row), bars for spans, times shown in `unit`.

    Args:
        spans: `Span(rank, row, start, end, label)` tuples; times in seconds, each rank's
            times measured from that rank's own origin (e.g. the start of its backward).
        title: figure title.
        unit: 'ms' or 's' for the x axis.

    Returns:
        The matplotlib Figure.

    Example:
        >>> fig = plot_timeline([Span(0, "backward", 0.0, 0.004), Span(0, "all_reduce", 0.001, 0.003, "b0")])

    Introduced in notebooks/04-ddp-from-scratch.ipynb.
    """
    spans = list(spans)
    if not spans:
        raise ValueError("plot_timeline needs at least one Span(rank, row, start, end).")
    scale = {"ms": 1e3, "s": 1.0}[unit]
    rows = list(dict.fromkeys(span.row for span in spans))
    ranks = sorted({span.rank for span in spans})
    lanes = [(rank, row) for rank in ranks for row in rows]
    colour_of = {row: _COLOURS[i % len(_COLOURS)] for i, row in enumerate(rows)}

    fig, ax = plt.subplots(figsize=(9, 0.45 * len(lanes) + 1.2))
    for lane, (rank, row) in enumerate(lanes):
        for span in (s for s in spans if (s.rank, s.row) == (rank, row)):
            width = max((span.end - span.start) * scale, 1e-3)
            ax.barh(lane, width, left=span.start * scale, height=0.6, color=colour_of[row],
                    edgecolor="black", linewidth=0.5)
            if span.label:
                ax.text(span.start * scale + width / 2, lane, span.label, ha="center", va="center",
                        fontsize=7, color="white")
    ax.set_yticks(range(len(lanes)), [f"rank {rank} · {row}" for rank, row in lanes])
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit})")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig

"""Pipeline schedules drawn as in the GPipe and 1F1B papers: one row per rank, a box per micro-batch.

Introduced in notebooks/07-pipeline-parallelism.ipynb.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from ddp_lab.course.pipeline_parallel.schedules import Span

COLOURS = {"forward": "#4c72b0", "backward": "#dd8452"}


def plot_pipelines(panels: Mapping[str, Iterable[Span]], unit: str = "ms"):
    """Draw pipeline timelines, one panel each, stacked: a lane per rank, forward/backward boxes.

    Args:
        panels: {title: spans}; each `Span(rank, "forward" | "backward", start, end, label)`
            with the micro-batch index as its label. Times in seconds, or in abstract slots
            for an ideal schedule (then pass unit="slots").
        unit: "ms", "s" or "slots" (no scaling) for the x axes; each panel starts at its
            earliest span.

    Returns:
        The matplotlib Figure.

    Example:
        >>> from ddp_lab.course.pipeline_parallel.schedules import gpipe_actions, ideal_timeline
        >>> fig = plot_pipelines({"GPipe": ideal_timeline([gpipe_actions(s, 2, 4) for s in range(2)])},
        ...                      unit="slots")

    Introduced in notebooks/07-pipeline-parallelism.ipynb.
    """
    panels = {title: list(spans) for title, spans in panels.items()}
    if not panels or not all(panels.values()):
        raise ValueError("plot_pipelines needs at least one panel, each with at least one Span.")
    scale = {"ms": 1e3, "s": 1.0, "slots": 1.0}[unit]
    heights = [len({s.rank for s in spans}) for spans in panels.values()]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 0.5 * sum(heights) + 1.0 * len(panels) + 0.4),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (title, spans) in zip(axes[:, 0], panels.items()):
        start = min(s.start for s in spans)
        ranks = sorted({s.rank for s in spans})
        for span in spans:
            lane = ranks.index(span.rank)
            left, width = (span.start - start) * scale, (span.end - span.start) * scale
            ax.barh(lane, width, left=left, height=0.7, color=COLOURS.get(span.row, "#999999"),
                    edgecolor="black", linewidth=0.5)
            if span.label:
                ax.text(left + width / 2, lane, span.label, ha="center", va="center", fontsize=7,
                        color="white")
        ax.set_yticks(range(len(ranks)), [f"rank {rank}" for rank in ranks])
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("time (slots)" if unit == "slots" else f"time ({unit})")
        ax.grid(axis="x", alpha=0.3)
    axes[0, 0].legend(handles=[Patch(color=c, label=k) for k, c in COLOURS.items()], loc="upper right",
                      fontsize=8, ncol=2)
    fig.tight_layout()
    return fig

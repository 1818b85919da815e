"""Who computes which block of causal attention, and how much work each rank gets: contiguous vs zig-zag.

Introduced in notebooks/15-long-sequences.ipynb.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.colors import ListedColormap
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

RANK_COLOURS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]


def causal_blocks(world_size: int, layouts: dict, work: dict[str, list[int]]):
    """One grid per layout of the causal score matrix in 2N x 2N chunks, coloured by the rank that computes
    each block, and bars of each rank's counted work per layout, in the same rank colours.

    Work is counted (score entries the mask leaves: the same on every machine), not timed: a rank's CPU
    seconds include the time it waited for a core whenever the machine has fewer cores than ranks.

    Args:
        world_size: N ranks (at most len(RANK_COLOURS)).
        layouts: {name: layout(rank, world_size) -> chunk indices} (see context_parallel/layout.py).
        work: {name: score entries each rank computed}, one list of N per layout.

    Returns:
        The matplotlib Figure.

    Example:
        >>> from ddp_lab.course.context_parallel.layout import zigzag_chunks
        >>> fig = causal_blocks(2, {"zig-zag": zigzag_chunks}, {"zig-zag": [5, 5]})

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    if not 1 <= world_size <= len(RANK_COLOURS):
        raise ValueError(f"causal_blocks draws 1 to {len(RANK_COLOURS)} ranks, got world_size={world_size}: "
                         "draw fewer ranks")
    chunks = 2 * world_size
    colours = RANK_COLOURS[:world_size]
    fig, axes = plt.subplots(1, len(layouts) + 1, figsize=(4.0 * (len(layouts) + 1), 3.9))
    for ax, (name, layout) in zip(axes, layouts.items()):
        owner = [[float("nan")] * chunks for _ in range(chunks)]
        for rank in range(world_size):
            mine = layout(rank, world_size)
            per_chunk = chunks // (world_size * len(mine))          # fine chunks in one of the layout's chunks
            rows = [c * per_chunk + i for c in mine for i in range(per_chunk)]
            for row in rows:
                for col in range(row + 1):                           # keys up to the query: the causal triangle
                    owner[row][col] = rank
        ax.imshow(owner, cmap=ListedColormap(colours), vmin=-0.5, vmax=world_size - 0.5)
        ax.set_title(f"{name}: who computes each block", fontsize=9)
        ax.set_xlabel("key chunk")
        ax.set_ylabel("query chunk")
        ax.set_xticks(range(chunks))
        ax.set_yticks(range(chunks))
    bars = axes[-1]
    width = 0.8 / world_size
    for group, name in enumerate(layouts):                       # one group of N bars per layout
        for rank, entries in enumerate(work[name]):
            bars.bar(group + (rank - (world_size - 1) / 2) * width, entries, width, color=colours[rank])
    even = sum(work[next(iter(layouts))]) / world_size
    bars.axhline(even, color="black", linestyle="--", linewidth=1)
    bars.set_xticks(range(len(layouts)), list(layouts))
    bars.set_ylabel("score entries computed")
    bars.set_title("counted work per rank", fontsize=9)
    handles = [Patch(color=colour, label=f"rank {rank}") for rank, colour in enumerate(colours)]
    handles.append(Line2D([], [], color="black", linestyle="--", linewidth=1, label="equal share (total / N)"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig

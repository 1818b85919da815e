"""Who computes which block of causal attention, and how much work each rank gets: contiguous vs zig-zag.

Introduced in notebooks/15-long-sequences.ipynb.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.colors import ListedColormap

RANK_COLOURS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]


def causal_blocks(world_size: int, layouts: dict, work: dict[str, list[int]], seconds: dict[str, list[float]]):
    """One grid per layout of the causal score matrix in 2N x 2N chunks, coloured by the rank that computes
    each block, and bars of each rank's counted work and measured compute time.

    Args:
        world_size: N ranks.
        layouts: {name: layout(rank, world_size) -> chunk indices} (see context_parallel/layout.py).
        work: {name: score entries each rank computed}.
        seconds: {name: CPU seconds each rank spent computing blocks} (drawn, never printed: machine-dependent).

    Returns:
        The matplotlib Figure.

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    chunks = 2 * world_size
    fig, axes = plt.subplots(1, len(layouts) + 1, figsize=(4.0 * (len(layouts) + 1), 3.6))
    colours = ListedColormap(RANK_COLOURS[:world_size])
    for ax, (name, layout) in zip(axes, layouts.items()):
        owner = [[float("nan")] * chunks for _ in range(chunks)]
        for rank in range(world_size):
            mine = layout(rank, world_size)
            per_chunk = chunks // (world_size * len(mine))          # fine chunks in one of the layout's chunks
            rows = [c * per_chunk + i for c in mine for i in range(per_chunk)]
            for row in rows:
                for col in range(row + 1):                           # keys up to the query: the causal triangle
                    owner[row][col] = rank
        ax.imshow(owner, cmap=colours, vmin=-0.5, vmax=world_size - 0.5)
        ax.set_title(f"{name}: who computes each block", fontsize=9)
        ax.set_xlabel("key chunk")
        ax.set_ylabel("query chunk")
        ax.set_xticks(range(chunks))
        ax.set_yticks(range(chunks))
    bars = axes[-1]
    first = next(iter(layouts))                     # bars are fractions of the first layout's busiest rank
    width = 0.8 / (2 * len(layouts))
    for i, name in enumerate(layouts):
        for j, (values, top, label) in enumerate(((work[name], max(work[first]), "work"),
                                                  (seconds[name], max(seconds[first]), "time"))):
            offset = (2 * i + j - len(layouts) + 0.5) * width
            bars.bar([r + offset for r in range(world_size)], [v / max(top, 1e-12) for v in values], width,
                     color=RANK_COLOURS[i], alpha=1.0 if j == 0 else 0.45, label=f"{name}: {label}")
    bars.set_xticks(range(world_size))
    bars.set_xlabel("rank")
    bars.set_ylabel(f"fraction of {first}'s busiest rank")
    bars.set_title("counted work (solid), measured CPU time (pale)", fontsize=9)
    bars.set_ylim(0, 1.35)
    bars.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig

"""A device mesh drawn as a grid: every rank at its mesh coordinates, each dimension's groups outlined.

Introduced in notebooks/10-2d-mesh.ipynb.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

COLORS = {0: "#DD8452", 1: "#4C72B0"}  # first mesh dimension (dp), second (tp)


def mesh_grid(layout: list[list[int]], groups: dict[int, dict[str, list[int]]], dim_names: tuple[str, str],
              title: str = ""):
    """Draw a 2-D mesh: ranks at their (row, column), and the groups each rank reported, outlined.

    Groups are drawn from what the ranks measured (e.g. with `ddp_lab.course.mesh.mesh_groups`), not
    from a formula: a group of the first dimension is outlined in orange, of the second in
    blue, around the ranks it holds, so a wrong grouping shows as an outline that does not
    follow a column or a row.

    Args:
        layout: the mesh's ranks by coordinates, `mesh.mesh.tolist()`, e.g. [[0, 1], [2, 3]].
        groups: {rank: {dimension name: ranks of its group}}.
        dim_names: the two dimension names in mesh order, e.g. ("dp", "tp").
        title: the figure title.

    Returns:
        The matplotlib Figure.

    Example:
        >>> fig = mesh_grid([[0, 1], [2, 3]], {0: {"dp": [0, 2], "tp": [0, 1]}, ...}, ("dp", "tp"))

    Introduced in notebooks/10-2d-mesh.ipynb.
    """
    where = {rank: (col, -row) for row, ranks in enumerate(layout) for col, rank in enumerate(ranks)}
    rows, cols = len(layout), len(layout[0])
    fig, ax = plt.subplots(figsize=(1.9 * cols + 1.6, 1.5 * rows + 0.9))
    for index, name in enumerate(dim_names):
        pad = 0.30 if index == 0 else 0.22
        for members in sorted({tuple(g[name]) for g in groups.values()}):
            xs, ys = [where[r][0] for r in members], [where[r][1] for r in members]
            ax.add_patch(FancyBboxPatch((min(xs) - pad, min(ys) - pad), max(xs) - min(xs) + 2 * pad,
                                        max(ys) - min(ys) + 2 * pad, boxstyle="round,pad=0.02",
                                        fill=False, linewidth=2.5, edgecolor=COLORS[index],
                                        linestyle="-" if index == 1 else "--"))
        ax.plot([], [], color=COLORS[index], linewidth=2.5, linestyle="-" if index == 1 else "--",
                label=f'"{name}" groups (mesh dimension {index})')
    for rank, (x, y) in where.items():
        ax.text(x, y, f"rank {rank}", ha="center", va="center", fontsize=10,
                bbox=dict(boxstyle="round", facecolor="white", edgecolor="grey"))
    ax.set_xlim(-0.6, cols - 0.4)
    ax.set_ylim(-rows + 0.4, 0.65)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.legend(loc="upper center", ncol=2, fontsize=8, frameon=False)
    ax.set_title(title or f"mesh {rows} × {cols}: {dim_names[0]} along columns, {dim_names[1]} along rows",
                 fontsize=10)
    fig.tight_layout()
    return fig

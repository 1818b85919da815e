"""Who holds what before and after a collective: one row of boxes per rank.

Introduced in notebooks/02-collectives.ipynb.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.patches import Patch, Rectangle

RANK_COLOURS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]
MIXED = "#BBBBBB"  # a value that came from several ranks (a reduction)


def _origin(value: float, before: Sequence[Sequence[float] | None]) -> str:
    owners = {rank for rank, row in enumerate(before) if row is not None and value in row}
    return RANK_COLOURS[owners.pop() % len(RANK_COLOURS)] if len(owners) == 1 else MIXED


def _draw(ax, rows: Sequence[Sequence[float] | None], before: Sequence[Sequence[float] | None],
          title: str, width: int) -> None:
    for rank, row in enumerate(rows):
        y = len(rows) - 1 - rank
        ax.text(-0.3, y + 0.5, f"rank {rank}", ha="right", va="center", fontsize=9)
        if row is None:
            ax.text(0.1, y + 0.5, "(not defined)", va="center", fontsize=8, color="gray")
            continue
        for column, value in enumerate(row):
            ax.add_patch(Rectangle((column, y + 0.1), 0.92, 0.8, color=_origin(value, before), alpha=0.85))
            ax.text(column + 0.46, y + 0.5, f"{value:g}", ha="center", va="center", fontsize=7, color="white")
    ax.set_xlim(-1.6, width + 0.2)
    ax.set_ylim(0, len(rows))
    ax.set_title(title, fontsize=10)
    ax.axis("off")


def before_after(name: str, before: Sequence[Sequence[float] | None], after: Sequence[Sequence[float] | None]):
    """Draw each rank's tensor before and after a collective, coloured by the rank it came from.

    A box keeps its rank's colour when its value exists on exactly one rank before; grey
    means the value mixes several ranks (a sum). A row given as None is drawn as
    "(not defined)" (e.g. a reduce's non-destination ranks).

    Args:
        name: the collective, used as the title.
        before: per rank, the values it holds before (a list of numbers).
        after: per rank, the values it holds after.

    Returns:
        the matplotlib Figure.

    Example:
        >>> fig = before_after("broadcast", [[1, 2], [11, 12]], [[1, 2], [1, 2]])

    Introduced in notebooks/02-collectives.ipynb.
    """
    widths = [max((len(row) for row in rows if row is not None), default=1) for rows in (before, after)]
    legend_height = 0.3  # inches below the panels for the colour key
    height = 0.35 + 0.42 * len(before) + legend_height
    fig, axes = plt.subplots(1, 2, figsize=(min(11.0, 2.4 + 0.6 * sum(widths)), height),
                             gridspec_kw={"width_ratios": [w + 1.8 for w in widths]})
    _draw(axes[0], before, before, f"{name}: before", widths[0])
    _draw(axes[1], after, before, "after", widths[1])
    colours = {_origin(value, before) for rows in (before, after) for row in rows if row is not None for value in row}
    key = [Patch(color=colour, alpha=0.85, label=f"from rank {rank}")
           for rank, colour in enumerate(RANK_COLOURS[:len(before)]) if colour in colours]
    if MIXED in colours:
        key.append(Patch(color=MIXED, alpha=0.85, label="a sum of several ranks' values"))
    fig.legend(handles=key, loc="lower center", ncol=len(key), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, legend_height / height, 1, 1))
    return fig

"""Tokens per expert, stacked by the rank that sent them, grouped by the rank that owns the expert.

Introduced in notebooks/14-mixture-of-experts.ipynb.
"""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import torch

RANK_COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")


def tokens_per_expert(panels: Mapping[str, torch.Tensor], experts_per_rank: int, capacity: int | None = None):
    """One panel per routing: bars of rows per expert, coloured by sending rank, with each owner rank's total.

    Args:
        panels: {title: counts}, counts a (W, E) tensor or nested list: rows rank s sent to
            expert e (in expert parallelism, what rank e // experts_per_rank received from s).
        experts_per_rank: E / W; a dotted line separates the experts of consecutive ranks.
        capacity: if given, the rows one expert may take from one rank, drawn per expert as
            W · capacity (its buffer over all senders).

    Returns:
        The matplotlib Figure.

    Example:
        >>> fig = tokens_per_expert({"balanced": [[1, 2, 1, 2], [2, 1, 2, 1]]}, experts_per_rank=2)

    Introduced in notebooks/14-mixture-of-experts.ipynb.
    """
    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels) + 0.8, 3.3), sharey=True, squeeze=False)
    for ax, (title, counts) in zip(axes[0], panels.items()):
        counts = torch.as_tensor(counts)
        senders, experts = counts.shape
        bottom = torch.zeros(experts)
        for sender in range(senders):
            ax.bar(range(experts), counts[sender].tolist(), bottom=bottom.tolist(), width=0.75,
                   color=RANK_COLOURS[sender % len(RANK_COLOURS)], label=f"from rank {sender}")
            bottom += counts[sender]
        for owner in range(experts // experts_per_rank):
            first = owner * experts_per_rank
            total = int(counts[:, first:first + experts_per_rank].sum())
            ax.annotate(f"rank {owner}\n{total} rows", (first + (experts_per_rank - 1) / 2, bottom.max().item()),
                        ha="center", va="bottom", fontsize=7, textcoords="offset points", xytext=(0, 3))
            if owner:
                ax.axvline(first - 0.5, color="grey", linestyle=":", linewidth=1)
        if capacity is not None:
            ax.axhline(senders * capacity, color="black", linestyle="--", linewidth=1, label="capacity × ranks")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("expert")
        ax.set_xticks(range(experts))
        ax.margins(y=0.25)
    axes[0][0].set_ylabel("token rows received")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig

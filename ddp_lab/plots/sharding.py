"""Per-rank model-state bytes against the world size: ZeRO's formula as lines, measurements as points.

Introduced in notebooks/09-zero-and-fsdp.ipynb.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt

from ddp_lab.course.sharding.state_bytes import state_bytes_per_rank

STAGE_NAMES = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3 / FSDP2"}
COLOURS = {0: "#4C72B0", 1: "#DD8452", 2: "#55A868", 3: "#C44E52"}
MARKERS = ("o", "s", "^", "D", "v", "P")


def state_bytes_vs_world_size(n_params: int, measured: Mapping[str, tuple[int, Mapping[int, int]]],
                              world_sizes: Sequence[int] = (1, 2, 4), precision: str = "fp32"):
    """Draw the per-rank bytes of params + grads + optimizer state for DDP and ZeRO-1/2/3.

    Args:
        n_params: parameters of the model (must divide by every world size).
        measured: {label: (stage, {world_size: measured bytes per rank})}: drawn as points on
            the stage's line, e.g. {"ZeRO-1 by hand": (1, {1: 27712, 2: 20784})}.
        world_sizes: the x axis.
        precision: 'fp32', 'bf16' or 'fp16' (see `state_bytes_per_rank`).

    Returns:
        the matplotlib Figure.

    Example:
        >>> fig = state_bytes_vs_world_size(1732, {"FSDP2": (3, {2: 13856})})

    Introduced in notebooks/09-zero-and-fsdp.ipynb.
    """
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for stage, name in STAGE_NAMES.items():
        totals = [sum(state_bytes_per_rank(n_params, stage, w, precision).values()) / 1e3 for w in world_sizes]
        ax.plot(world_sizes, totals, color=COLOURS[stage], label=f"{name} (formula)", linewidth=1.5, zorder=1)
    for (label, (stage, points)), marker in zip(measured.items(), MARKERS * len(measured)):
        xs = sorted(points)
        ax.scatter(xs, [points[x] / 1e3 for x in xs], color=COLOURS[stage], marker=marker, s=46,
                   edgecolor="black", linewidth=0.6, label=f"{label} (measured)", zorder=2)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(world_sizes), [str(w) for w in world_sizes])
    ax.set_xlabel("world size (ranks)")
    ax.set_ylabel("kB per rank (params + grads + Adam)")
    ax.set_title(f"model state per rank, {n_params:,} parameters, {precision}")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig

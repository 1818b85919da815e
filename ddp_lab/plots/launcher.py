"""A picture of what `ddp_lab.launch` does: kernel, store, ranks, and the pipes between them.

Introduced in notebooks/00-welcome-and-first-launch.ipynb.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch


def _box(ax, x, y, w, h, text, color):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02", fc=color, ec="0.3"))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9)


def _arrow(ax, start, end, text="", color="0.3"):
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="->", color=color, lw=1.2))
    ax.text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.15, text, fontsize=7.5, color=color, ha="center")


def launch_diagram(nprocs: int = 4):
    """Draw the notebook kernel, its loopback store and `nprocs` ranks; return the figure.

    Introduced in notebooks/00-welcome-and-first-launch.ipynb.
    """
    fig, ax = plt.subplots(figsize=(10, 4.6))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 4.6)
    ax.axis("off")
    _box(ax, 0.2, 3.3, 3.2, 1.0, "notebook kernel\nddp_lab.launch(fn, nprocs)", "#dbe9f6")
    _box(ax, 6.4, 3.3, 3.3, 1.0, "rendezvous store (TCPStore)\nhosted by the launcher\n127.0.0.1 only", "#fde9c8")
    _arrow(ax, (3.4, 3.8), (6.4, 3.8), "hosts")
    width = 9.4 / nprocs
    for rank in range(nprocs):
        x = 0.3 + rank * width
        _box(ax, x, 0.4, width - 0.35, 1.3,
             f"rank {rank}\nown process\nfn({rank}, *args)\nprocess group", "#e2f0d9")
        centre = x + (width - 0.35) / 2
        ax.annotate("", xy=(centre - 0.2, 1.7), xytext=(1.3 + rank * 1.9 / max(1, nprocs - 1), 3.3),
                    arrowprops=dict(arrowstyle="<|-|>", color="#1f4e79", lw=1.1))
        ax.annotate("", xy=(8.05, 3.3), xytext=(centre + 0.2, 1.7),
                    arrowprops=dict(arrowstyle="->", color="#b08000", lw=0.8, ls="--"))
        if rank + 1 < nprocs:
            ax.annotate("", xy=(x + width, 0.2), xytext=(centre, 0.2),
                        arrowprops=dict(arrowstyle="<->", color="#2e7d32", lw=1.0))
    ax.text(0.25, 2.55, "down: fn, args (cloudpickle)\nup: stdout, stderr, result\n(one pipe each, per rank)",
            fontsize=7.5, color="#1f4e79", ha="left")
    ax.text(7.9, 2.55, "connect: MASTER_ADDR,\nMASTER_PORT", fontsize=7.5, color="#b08000", ha="left")
    ax.text(5.0, 0.05, "gloo / NCCL collectives between ranks (all_reduce, broadcast, ...)",
            ha="center", fontsize=8, color="#2e7d32")
    ax.set_title("What ddp_lab.launch does", fontsize=11)
    fig.tight_layout()
    return fig

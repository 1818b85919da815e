"""Performance pictures: step time vs world size, the bucket_cap_mb sweep, comm hooks' bytes and losses.

Introduced in notebooks/11-performance-and-scaling.ipynb.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt


def step_time_vs_world(worlds: Sequence[int], strong: Mapping[str, Sequence[float]],
                       weak: Mapping[str, Sequence[float]], cores: int):
    """Two panels, strong and weak scaling: measured seconds per step against the ideal and the cores' bound.

    Args:
        worlds: world sizes, e.g. (1, 2, 4).
        strong, weak: {"step": seconds per step, "compute": seconds of the same step without the
            gradient all-reduce}, one value per world size.
        cores: usable CPU cores (the bound line: with one thread per rank at most min(W, cores)
            ranks compute at once).

    Returns:
        the matplotlib Figure.

    Example:
        >>> fig = step_time_vs_world([1, 2], {"step": [2e-3, 1.2e-3], "compute": [2e-3, 1e-3]},
        ...                          {"step": [1e-3, 1.3e-3], "compute": [1e-3, 1e-3]}, cores=2)

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.6), sharey=False)
    for ax, (title, data, scale) in zip(axes, (("strong scaling: global batch fixed", strong, "strong"),
                                                ("weak scaling: batch per rank fixed", weak, "weak"))):
        one = data["step"][0]
        ideal = [one / w if scale == "strong" else one for w in worlds]
        bound = [one / min(w, cores) if scale == "strong" else one * w / min(w, cores) for w in worlds]
        ax.plot(worlds, [t * 1e3 for t in data["step"]], "o-", color="C0", label="measured step")
        ax.plot(worlds, [t * 1e3 for t in data["compute"]], "s--", color="C2", label="step without all-reduce")
        ax.plot(worlds, [t * 1e3 for t in ideal], ":", color="gray", label="ideal (perfect scaling)")
        ax.plot(worlds, [t * 1e3 for t in bound], "-", color="C3", alpha=0.5,
                label=f"best possible on {cores} core{'s' if cores > 1 else ''}")
        ax.set_xticks(list(worlds))
        ax.set_xlabel("ranks (world size)")
        ax.set_ylabel("ms per step")
        ax.set_ylim(bottom=0)
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def bucket_sweep(caps_mb: Sequence[float], buckets: Sequence[int], step_seconds: Sequence[float],
                 exposed_seconds: Sequence[float]):
    """Buckets per step, and step time with the exposed (not hidden) all-reduce part, against bucket_cap_mb.

    Example:
        >>> fig = bucket_sweep([0.1, 1], [6, 2], [4e-3, 3e-3], [1e-3, 1.5e-3])

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.5, 3.4))
    left.semilogx(caps_mb, buckets, "o-", color="C1")
    left.set_xlabel("bucket_cap_mb")
    left.set_ylabel("all-reduces per step (buckets)")
    left.set_title("bigger buckets, fewer all-reduces", fontsize=10)
    right.semilogx(caps_mb, [t * 1e3 for t in step_seconds], "o-", color="C0", label="step")
    right.semilogx(caps_mb, [t * 1e3 for t in exposed_seconds], "s--", color="C3",
                   label="all-reduce not hidden by backward")
    right.set_xlabel("bucket_cap_mb")
    right.set_ylabel("ms")
    right.set_ylim(bottom=0)
    right.set_title("step time on this machine", fontsize=10)
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def hooks_bytes_and_loss(bytes_per_step: Mapping[str, int], losses: Mapping[str, Sequence[float]]):
    """Left: bytes each comm hook hands to collectives per step (log scale); right: the loss curves.

    Example:
        >>> fig = hooks_bytes_and_loss({"fp32": 400, "fp16": 200}, {"fp32": [1.0, 0.5], "fp16": [1.0, 0.51]})

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.5, 3.4))
    names = list(bytes_per_step)
    bars = left.bar(names, [bytes_per_step[n] for n in names], color=[f"C{i}" for i in range(len(names))])
    left.set_yscale("log")
    left.set_ylabel("bytes per rank per step")
    left.set_title("what each hook sends", fontsize=10)
    for bar, name in zip(bars, names):
        left.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{bytes_per_step[name]:,}",
                  ha="center", va="bottom", fontsize=7)
    for i, (name, curve) in enumerate(losses.items()):
        right.plot(range(len(curve)), curve, color=f"C{i}", label=name, alpha=0.8)
    right.set_xlabel("step")
    right.set_ylabel("training loss")
    right.set_title("and what it costs in loss", fontsize=10)
    right.legend(fontsize=8)
    right.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig

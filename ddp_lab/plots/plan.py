"""The planner's pictures: per-GPU memory and step time of the best plans, as stacked bars.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import matplotlib.pyplot as plt


MEMORY_PARTS = (("params", "parameters"), ("grads", "gradients"), ("optimizer", "optimizer state"),
                ("activations", "activations"), ("buffers", "comm. buffers"))
TIME_PARTS = (("compute", "compute"), ("tp_comm", "TP comm."), ("bubble", "pipeline bubble"),
              ("pp_comm", "PP comm."), ("dp_comm_exposed", "exposed DP comm."))
# drawn only when a plan shown has them (experts, context parallelism: lessons 14, 15; hidden communication on GPUs;
# DiLoCo replicas' outer sync: lesson 16)
# (ep_comm is the all-to-alls' exposed part: all of them unless ep_overlap hides some)
SPLIT_TIME_PARTS = (("ep_comm", "EP all-to-all"), ("cp_comm_exposed", "exposed CP ring"),
                    ("overlap_slowdown", "overlap slowdown"), ("outer_sync", "outer sync (DiLoCo)"))
# One colour per meaning, never reused across the two panels (matplotlib's tab20: a dark and a light shade of
# ten hues): the memory terms in the dark shades of five hues, the time terms in the other five, then light
# shades (the overlap slowdown: compute's, which it slows; EP's and CP's; the outer sync's).
COLOURS = {"params": "#1f77b4", "grads": "#ff7f0e", "optimizer": "#2ca02c", "activations": "#d62728",
           "buffers": "#9467bd", "compute": "#8c564b", "tp_comm": "#e377c2", "bubble": "#7f7f7f",
           "pp_comm": "#bcbd22", "dp_comm_exposed": "#17becf", "ep_comm": "#aec7e8", "cp_comm_exposed": "#ffbb78",
           "overlap_slowdown": "#c49c94", "outer_sync": "#98df8a"}


def breakdown(plans, top: int = 5):
    """Two panels of stacked bars for the first `top` plans: memory per GPU (GB) and step time (s).

    The dashed line on the memory panel is the GPU's memory, the dotted one what a plan may use
    (`Plan.usable_memory`: the memory less the reserve, `search.MEMORY_RESERVE`), both named in the
    legend; every bar is labelled with the plan's strategy (dp, tp, pp, ZeRO stage, micro-batch x
    accumulation, recomputation). Each memory and time term has a colour of its own (`COLOURS`), the
    same in every figure and never one of the other panel's.

    Args:
        plans: Plans from `ddp_lab.plan.search` (or `evaluate`), best first.
        top: how many to draw.

    Returns:
        the matplotlib Figure.

    Example:
        >>> from ddp_lab.plan import ClusterSpec, Transformer, search
        >>> fig = breakdown(search(Transformer.preset("llama3-8b"), ClusterSpec.preset("h100-sxm", nodes=4)))

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    shown = list(plans)[:top]
    if not shown:
        raise ValueError("no plans to draw: pass the list that ddp_lab.plan.search returned")
    labels = [p.strategy.label() for p in shown]
    fig, (mem_ax, time_ax) = plt.subplots(1, 2, figsize=(11, 0.6 * len(shown) + 2.8), sharey=True)
    _stack(mem_ax, labels, [[getattr(p.memory, k) / 1e9 for p in shown] for k, _ in MEMORY_PARTS], MEMORY_PARTS)
    gpu = shown[0].cluster.gpu
    gpu_gb = gpu.memory / 1e9
    mem_ax.axvline(gpu_gb, color="k", linestyle="--", linewidth=1, label=f"{gpu.name}: {gpu_gb:.1f} GB")
    mem_ax.axvline(shown[0].usable_memory / 1e9, color="k", linestyle=":", linewidth=1,
                   label=f"a plan may use {shown[0].usable_memory / gpu.memory:.0%}")
    mem_ax.set_xlabel("memory per GPU (GB)")
    _legend(mem_ax, columns=2)   # its GPU line's label is long: three columns ran under the step-time panel
    mem_ax.set_title("memory per GPU: the plans that fit stay left of the dotted line" if len(shown) > 1 else
                     "memory per GPU: a plan that fits stays left of the dotted line", fontsize=9)
    time_parts = TIME_PARTS + tuple(part for part in SPLIT_TIME_PARTS if any(getattr(p.time, part[0]) for p in shown))
    _stack(time_ax, labels, [[getattr(p.time, k) for p in shown] for k, _ in time_parts], time_parts)
    time_ax.set_xlabel("seconds per step")
    _legend(time_ax)
    time_ax.set_title(f"step time of {shown[0].model.name}" + (", fastest plan on top" if len(shown) > 1 else ""),
                      fontsize=9)
    mem_ax.invert_yaxis()   # best plan on top
    fig.tight_layout()
    return fig


def _stack(ax, labels, columns, parts):
    left = [0.0] * len(labels)
    for values, (key, name) in zip(columns, parts):
        ax.barh(labels, values, left=left, color=COLOURS[key], label=name)
        left = [a + b for a, b in zip(left, values)]
    ax.grid(True, axis="x", alpha=0.3)


def _legend(ax, columns: int = 3) -> None:
    """The panel's key below it, centred; `columns` few enough that it stays under its own panel."""
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=columns, frameon=False)

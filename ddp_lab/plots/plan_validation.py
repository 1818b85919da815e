"""The planner against measured runs: predicted vs measured bytes and step time, one point per configuration.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from ddp_lab.plan.validate import ACTIVATION_TOLERANCE, STEP_TOLERANCE


def predicted_vs_measured(rows, title: str = "planner vs runs on this machine"):
    """Three panels (model states, activations, step time): measured against predicted, with y = x.

    Each configuration is one point (its most loaded rank for bytes). The shaded band is the
    tolerance the tests hold it to: equal for model states, 10 % for activations, 30 % for the
    step. A step time measured while other programs kept the cores busy (`Row.timing_comparable`
    false: the ranks waited for the scheduler) is drawn hollow and grey, and the panel's legend
    says it was not compared.

    Args:
        rows: `ddp_lab.plan.validate.Row`s, e.g. from `validate()`.
        title: the figure title.

    Returns:
        the matplotlib Figure.

    Example:
        >>> fig = predicted_vs_measured(ddp_lab.plan.validate.validate())   # doctest: +SKIP

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.8))
    panels = [("model states (MB)", 0.0, lambda r, i: (r.predicted_states[i] / 1e6, r.measured_states[i] / 1e6)),
              ("activations (MB)", ACTIVATION_TOLERANCE,
               lambda r, i: (r.predicted_activations[i] / 1e6, r.measured_activations[i] / 1e6)),
              ("step time (ms)", STEP_TOLERANCE, lambda r, i: (r.predicted_step * 1e3, r.measured_step * 1e3))]
    for ax, (label, tolerance, point) in zip(axes, panels):
        values = []
        for index, row in enumerate(rows):
            worst = max(range(row.ranks), key=lambda r: row.measured_states[r] + row.measured_activations[r])
            x, y = point(row, worst)
            values += [x, y]
            if ax is axes[2] and not row.timing_comparable:   # the scheduler's waiting, not the plan's step
                ax.plot(x, y, "o", color="0.5", markerfacecolor="none", markersize=8,
                        label="timed while other programs kept the cores busy: not compared")
            else:
                ax.plot(x, y, "o", color=f"C{index}", markersize=8, label=row.name)
        low, high = 0.0, max(values) * 1.15
        line = [low, high]
        ax.plot(line, line, "-", color="0.4", linewidth=1)
        if tolerance:
            ax.fill_between(line, [v * (1 - tolerance) for v in line], [v * (1 + tolerance) for v in line],
                            color="0.85", zorder=0)
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
        ax.set_xlabel(f"predicted {label}")
        ax.set_ylabel(f"measured {label}")
        ax.set_title(label.split(" (")[0] + ("" if not tolerance else f" (band ±{tolerance:.0%})"), fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper left")
    busy = [line for line in axes[2].lines if line.get_markerfacecolor() == "none"]
    if busy:
        axes[2].legend(handles=busy[:1], fontsize=7, loc="upper left")
    fig.suptitle(title)
    fig.tight_layout()
    return fig

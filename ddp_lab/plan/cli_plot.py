"""The command line's --plot FILE.png: the plans' memory and step-time breakdown drawn as lesson 13 draws it.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from pathlib import Path

PLOTTED = 5    # --plot draws the best plan and the next rows printed, at most this many


def check_plot_file(path: str) -> None:
    """Refuse a --plot file that cannot be written, before anything is planned."""
    target = Path(path)
    if target.suffix.lower() != ".png":
        raise ValueError(f"--plot {path}: give a file name ending in .png (the breakdown is drawn as a PNG)")
    if not target.parent.is_dir():
        raise ValueError(f"--plot {path}: no folder {target.parent}; create it or give another path")
    try:
        import matplotlib  # noqa: F401 - lazy: only --plot draws; the planner's text needs no matplotlib
    except ImportError:
        raise ValueError(f"--plot {path}: drawing needs matplotlib, which is not installed here: pip install "
                         "matplotlib (the planner's text needs none)") from None


def draw(plans, path: str) -> None:
    """Draw the plans' memory and step-time breakdown (lesson 13's picture) to `path`, and say so."""
    import matplotlib    # lazy: only --plot draws; the planner's text needs no matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ddp_lab.plots.plan import breakdown as draw_breakdown    # lazy: imports matplotlib

    figure = draw_breakdown(plans, top=PLOTTED)
    try:
        figure.savefig(path, format="png", dpi=100)
    except OSError as error:
        raise ValueError(f"--plot {path}: cannot write it ({error.strerror or error})") from None
    finally:
        plt.close(figure)
    shown = "the plan" if len(plans) == 1 else f"the best {min(len(plans), PLOTTED)} plans"
    print(f"plot: {path} (memory per GPU and step time of {shown})")

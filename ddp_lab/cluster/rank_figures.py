"""The matplotlib backend of a live cluster's ranks: the figures a `%%ddp` cell draws travel to the notebook.

A rank has no display. Its matplotlib draws with Agg (matplotlib's own off-screen renderer); `plt.show()` and the end
of a cell (as Jupyter's inline backend does) turn every open figure into PNG bytes and close it, and the notebook
shows them under the cell, each rank's under a `[rank k]` line (magics.show_figures). Without this, a rank inherits
the kernel's inline backend, which has no kernel to show to, and `plt.show()` printed `Figure(640x480)`.

The ranks' command loop (rank_loop.py) names this module as matplotlib's backend before any cell runs (MPLBACKEND),
and takes the figures after each cell or call that imported matplotlib (`take_figures`), failed ones too, while the
stop button can still interrupt the drawing. Importing this module imports matplotlib's Agg backend (a backend
module's names must be there when matplotlib reads them), so only a rank whose cell imported matplotlib imports it.

Introduced in notebooks/00b-live-cluster.ipynb.
"""

from __future__ import annotations

import io
import sys

from matplotlib.backends.backend_agg import FigureCanvasAgg as FigureCanvas  # noqa: F401 - read by matplotlib
from matplotlib.backends.backend_agg import new_figure_manager, new_figure_manager_given_figure  # noqa: F401
from matplotlib.figure import Figure

_shown: list[bytes] = []   # the figures plt.show() took during the cell running now, in order


def _png(figure) -> bytes:
    data = io.BytesIO()
    figure.savefig(data, format="png", bbox_inches="tight")
    return data.getvalue()


def _take_open_figures(also=None) -> list[bytes]:
    """PNG bytes of every open figure, oldest first, then of `also` if it is a figure not open; the open ones are
    closed (as the inline backend closes them)."""
    from matplotlib import pyplot   # here, not above: pyplot may be importing this module as its backend

    figures = [pyplot.figure(number) for number in pyplot.get_fignums()]
    if isinstance(also, Figure) and also not in figures:
        figures.append(also)
    pictures = []
    try:
        for number, figure in enumerate(figures, 1):
            try:
                pictures.append(_png(figure))
            except Exception as error:  # noqa: BLE001 - one figure lost, not the others; the stop button still works
                print(f"ddp_lab: figure {number} of {len(figures)} could not be drawn ({type(error).__name__}: "
                      f"{error}); the others are shown", file=sys.stderr)
        return pictures
    finally:   # closed even where drawing was interrupted: no figure carries over to the next cell
        pyplot.close("all")


def take_figures(value=None) -> list[bytes]:
    """The figures a cell drew, as PNG bytes in the order they were shown: those `plt.show()` took, then those still
    open at the end of the cell, then `value` (the cell's final expression) if it is a figure not open (closed, or
    made without pyplot), as a kernel shows a figure that ends a cell."""
    try:
        return _shown[:] + _take_open_figures(value)
    finally:
        _shown.clear()


def take(figure) -> None:
    """`display(figure)` on a rank (rank_loop.display): this figure is taken for the notebook now, and stays open."""
    _shown.append(_png(figure))


def show(*args, **kwargs) -> None:
    """plt.show(): every open figure is taken for the notebook (shown under the cell, in this order) and closed."""
    _shown.extend(_take_open_figures())

"""Progress lines: output a rank rewrites in place with '\\r' (a `tqdm` bar, `print(f"\\rstep {i}", end="")`).

A terminal shows such a line once, updated in place; written to a notebook cell line by line,
300 updates would leave 300 lines. Two things keep one line per rank:

- `visible_text` keeps what the line shows at the end (the text after its last '\\r'), so every
  line a rank printed, and so a cell's stored output, holds the final state only, the same
  on every run however the updates were timed;
- `LiveLines` shows the lines still being rewritten while the ranks run, one per rank, in one
  Jupyter display that is updated in place (an IPython display handle) and emptied when the
  launch or the cell ends, when the final lines are printed with the rest of the output.

Introduced in notebooks/00b-live-cluster.ipynb ("Progress bars in ranks").
"""

from __future__ import annotations

import time

REFRESH_S = 0.1  # at most ten display updates a second: the latest state wins


def visible_text(text: str) -> str:
    """What a line rewritten with '\\r' shows at its end: the text after its last '\\r'.

    Text ending in '\\r' (tqdm, `print(..., end="\\r")`) shows the text before it, so the last
    non-empty '\\r'-separated part is kept; trailing spaces (tqdm pads a shorter update with
    spaces to cover the longer one before it) are dropped; a final '\\n' stays. A line without
    '\\r' is returned unchanged.

    Example:
        >>> visible_text("\\rstep 1/3\\rstep 2/3\\rstep 3/3\\n")
        'step 3/3\\n'
    """
    if "\r" not in text:
        return text
    body, newline = (text[:-1], "\n") if text.endswith("\n") else (text, "")
    parts = [part for part in body.split("\r") if part]
    return (parts[-1].rstrip(" ") if parts else "") + newline


def last_rewrite(text: str) -> int:
    """Where in `text` its last non-empty '\\r'-separated piece starts, at the '\\r' before it; -1 if no
    '\\r' comes before it (nothing in `text`, nor before it, is overwritten)."""
    return text.rfind("\r", 0, len(text.rstrip("\r")))


def drop_overwritten(text: str) -> str:
    """`text` (an unfinished line) without what a later '\\r' overwrote: the part from its last
    non-empty '\\r'-separated piece on, with the '\\r' before it (the line stays marked as rewritten)
    and those after it (what comes next may still replace it).

    `visible_text` gives the same answer for the result as for `text`, with or without more
    text appended; a reader keeps only this much of a line a rank keeps rewriting.
    """
    return text[max(0, last_rewrite(text)):]


class LiveLines:
    """The lines ranks are rewriting, shown live as one Jupyter display with a line per rank.

    `update(rank, stream, text)` records a rank's latest state (None: the line was finished
    and is printed with the rest of the output); `refresh()` publishes at most every REFRESH_S;
    `close()` empties the display. The display is made on the first update, empty, so that a
    cell's stored output is the same however many updates arrived (nbval compares a display as
    it was made; nbclient and JupyterLab store its last update, empty too). Outside a Jupyter
    kernel (a script, a terminal) nothing is shown.

    Args:
        ranks: whose lines to show (None: every rank's).
        publish: where a display's text goes, for tests; by default an IPython display handle.

    Introduced in notebooks/00b-live-cluster.ipynb ("Progress bars in ranks").
    """

    def __init__(self, ranks: list[int] | None = None, publish=None):
        self.ranks = None if ranks is None else set(ranks)
        self.lines: dict[tuple[int, str], str] = {}
        self._publish = publish
        self._made = self._dirty = False
        self._last_refresh = float("-inf")

    def update(self, rank: int, stream: str, text: str | None) -> None:
        """Record rank's rewritten line on `stream` (None: finished, no longer live)."""
        if self.ranks is not None and rank not in self.ranks:
            return
        if not self._made:
            self._made = self._start()
        if text is None:
            self.lines.pop((rank, stream), None)
        else:
            self.lines[(rank, stream)] = visible_text(text).rstrip("\n")
        self._dirty = True

    def text(self) -> str:
        """The display's text: one line per rank (and stream) still being rewritten, rank 0 first."""
        return "".join(f"[rank {rank}] {line}\n" for (rank, _), line in sorted(self.lines.items()))

    def refresh(self, force: bool = False) -> None:
        """Show the latest lines, unless the display was updated less than REFRESH_S ago."""
        now = time.monotonic()
        if self._made and self._dirty and (force or now - self._last_refresh >= REFRESH_S):
            self._publish(self.text())
            self._dirty, self._last_refresh = False, now

    def close(self) -> None:
        """Empty the display (its lines are printed with the rest of the output)."""
        if self._made:
            self.lines.clear()
            self._publish("")
            self._made = self._dirty = False

    def _start(self) -> bool:
        """Make the display, empty (outside a Jupyter kernel: nothing, and nothing is ever shown)."""
        if self._publish is not None:
            self._publish("")
            return True
        handle = _display_handle()
        self._publish = _ignore if handle is None else (lambda text: handle.update({"text/plain": text}, raw=True))
        return True


def _ignore(text: str) -> None:
    pass


def _display_handle():
    """An empty IPython display in the running cell, or None outside a Jupyter kernel."""
    try:
        from IPython import get_ipython  # lazy: ddp_lab runs without IPython too (scripts, ranks)
        from IPython.display import display  # lazy: as above
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return None
    return display({"text/plain": ""}, raw=True, display_id=True)

"""What `ddp_lab.launch` returns: every rank's return value, indexable by rank.

Introduced in notebooks/00-welcome-and-first-launch.ipynb.
"""

from __future__ import annotations


class Results(list):
    """The ranks' return values, `results[k]` being rank k's (a plain list otherwise).

    Attributes:
        outputs: each rank's captured stdout and stderr as one string, without prefixes.
        backend: the process-group backend the ranks used (None if they set up their own).
        returncodes: each rank's exit status (0 normally).
        started: how each rank started: "cold" (a new interpreter that imported torch) or
            "warm" (forked from the kernel's zygote, see notebooks/00b-live-cluster.ipynb);
            None for a live cluster's commands, whose ranks were started once.
        figures: each rank's figures (PNG bytes) drawn by a live cluster's cell or call, in the order it showed
            them (cluster/rank_figures.py; a `%%ddp` cell shows them under its output); empty lists otherwise.

    Example:
        >>> results = ddp_lab.launch(lambda rank: rank * 10, nprocs=2)
        >>> results
        [0, 10]
    """

    def __init__(self, values, outputs: list[str], backend: str | None, returncodes: list[int],
                 started: list[str] | None = None, figures: list[list[bytes]] | None = None):
        super().__init__(values)
        self.started = started
        self.figures = figures if figures is not None else [[] for _ in self]
        self.outputs = outputs
        self.backend = backend
        self.returncodes = returncodes

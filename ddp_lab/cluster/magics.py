"""IPython magics for the live cluster: `%load_ext ddp_lab`, then

    %%ddp -n 4                 run this cell on every rank of a 4-rank cluster
    %%ddp --ranks 0            ... but show only rank 0's output
    %ddp_pull loss             bring `loss` back from every rank (a list by rank)
    %ddp_shutdown              stop the cluster

The cluster starts on first use and lives until `%ddp_shutdown`, a different `-n` or
`--backend`, a crash, a hang, or the kernel's end.

Introduced in notebooks/00b-live-cluster.ipynb.
"""

from __future__ import annotations

import argparse
import shlex

from ddp_lab.cluster.live_cluster import Cluster
from ddp_lab.launcher.arguments import check_nprocs, check_ranks, check_timeout
from ddp_lab.launcher.backend import choose_backend
from ddp_lab.launcher.payload import cell_names

_current: Cluster | None = None


class _OptionParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise ValueError(f"%%ddp: {message}. Use: %%ddp [-n N] [--backend gloo] [--timeout SECONDS] [--ranks 0,1]")


def _parser() -> argparse.ArgumentParser:
    parser = _OptionParser(prog="%%ddp", add_help=False)
    parser.add_argument("-n", "--nprocs", type=int, default=None, help="ranks (default: the running cluster's, else 2)")
    parser.add_argument("--backend", default=None, help="auto, gloo, nccl or mpi")
    parser.add_argument("--timeout", type=float, default=None, help="watchdog seconds for this cell")
    parser.add_argument("--ranks", default=None, help="whose output to show, e.g. 0 or 0,2 (default: all)")
    return parser


def parse_options(line: str) -> argparse.Namespace:
    """Parse `%%ddp` options; a ValueError says what was wrong."""
    options = _parser().parse_args(shlex.split(line))
    if options.ranks is not None:
        try:
            options.ranks = [int(r) for r in options.ranks.split(",") if r.strip()]
        except ValueError:
            raise ValueError(f"%%ddp --ranks {options.ranks}: give rank numbers separated by commas, "
                             "e.g. --ranks 0 or --ranks 0,2.") from None
    return options


def check_options(options: argparse.Namespace) -> None:
    """Refuse a bad option before the live cluster is started or shut down (its state survives a typo)."""
    wanted_n = _wanted_nprocs(options.nprocs)
    checks = [("-n", options.nprocs, lambda: check_nprocs(options.nprocs)),
              ("--backend", options.backend, lambda: choose_backend(options.backend, wanted_n, announce=False)),
              ("--timeout", options.timeout, lambda: check_timeout(options.timeout)),
              ("--ranks", options.ranks, lambda: check_ranks(options.ranks, wanted_n))]
    for flag, value, check in checks:
        if value is None:
            continue
        try:
            check()
        except (TypeError, ValueError) as error:
            shown = ",".join(map(str, value)) if isinstance(value, list) else value
            raise ValueError(f"%%ddp {flag} {shown}: {error}") from None


def _wanted_nprocs(nprocs: int | None) -> int:
    if nprocs is not None:
        return nprocs
    return _current.nprocs if _current is not None and _current.alive else 2


def current_cluster(nprocs: int | None = None, backend: str | None = None) -> Cluster:
    """The cluster `%%ddp` uses, (re)started if it is missing, dead, or of another shape."""
    global _current
    wanted_n = _wanted_nprocs(nprocs)
    if _current is not None and _current.alive:
        if wanted_n == _current.nprocs and (backend is None or backend in ("auto", _current.backend)):
            return _current
        _current.shutdown()
    _current = Cluster(wanted_n, backend or "auto")
    return _current


def ddp(line: str, cell: str):
    """%%ddp: run the cell on every rank of the live cluster."""
    __tracebackhide__ = True
    options = parse_options(line)
    check_options(options)
    cluster = current_cluster(options.nprocs, options.backend)
    shell = _shell()
    # Register the cell like IPython does, so tracebacks say "Cell In[n], line k" (the count
    # has already moved on to the next cell while this one runs).
    filename = shell.compile.cache(cell, shell.execution_count - 1) if shell is not None else None
    cluster._names.update(_cell_names(shell))
    cluster.run_code(cell, timeout=options.timeout, show=options.ranks, filename=filename)


def ddp_pull(line: str):
    """%ddp_pull NAME: a list of NAME's value on every rank (also stored as NAME in the notebook)."""
    __tracebackhide__ = True
    name = line.strip()
    if not name.isidentifier():
        raise ValueError(f"%ddp_pull needs one variable name, got {line!r}.")
    if _current is None or not _current.alive:
        raise RuntimeError("no live cluster: run a %%ddp cell first.")
    values = _current.pull(name)
    shell = _shell()
    if shell is not None:
        shell.user_ns[name] = values
    return values


def ddp_shutdown(line: str = "") -> None:
    """%ddp_shutdown: stop the live cluster's ranks."""
    global _current
    if _current is not None:
        _current.shutdown()
        _current = None


def _shell():
    try:
        from IPython import get_ipython  # lazy: tests and scripts import the magics without an IPython shell
    except ImportError:
        return None
    return get_ipython()


def _cell_names(shell) -> dict[str, str]:

    return cell_names() if shell is not None else {}


def load_ipython_extension(ipython) -> None:
    """Register the magics (`%load_ext ddp_lab`)."""
    ipython.register_magic_function(ddp, "cell", "ddp")
    ipython.register_magic_function(ddp_pull, "line", "ddp_pull")
    ipython.register_magic_function(ddp_shutdown, "line", "ddp_shutdown")

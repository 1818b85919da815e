"""IPython magics for the live cluster: `%load_ext ddp_lab`, then

    %%ddp -n 4                 run this cell on every rank of a 4-rank cluster
    %%ddp --ranks 0            ... but show only rank 0's output (every rank runs it)
    %%ddp --only 0,2           run this cell on ranks 0 and 2 only (the others wait, unchanged)
    %%ddp --stream             print each line as it arrives (a long cell), not rank by rank at the end
    %ddp --help                every option of %%ddp
    (a cell that ends with an expression shows its value on each rank: `[rank 1] Out: 2`)
    %ddp_pull loss             bring `loss` back from every rank (a list by rank)
    %ddp_status                one line per rank: alive, pid, what it is doing (which collective), its memory
    %ddp_shutdown              stop the cluster

The cluster starts on first use and lives until `%ddp_shutdown`, a different `-n` or
`--backend` (which says that the ranks' variables are gone), a crash, a hang, or the kernel's
end; the cell after a crash or a hang starts a fresh cluster of the same size and backend. A
bad option or argument is refused in one line (`MagicUsageError`) before anything starts.

Introduced in notebooks/00b-live-cluster.ipynb.
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
import sys

from ddp_lab.cluster.live_cluster import Cluster
from ddp_lab.cluster.rank_loop import CELL_MODULE
from ddp_lab.cluster.status import StatusReport
from ddp_lab.launcher.arguments import (MAX_TIMEOUT_S, check_nprocs, check_ranks, check_shown_ranks_run,
                                       check_source, check_timeout)
from ddp_lab.launcher.backend import choose_backend
from ddp_lab.launcher.errors import CellInterrupted, LaunchError, MagicUsageError
from ddp_lab.launcher.payload import cell_names

_current: Cluster | None = None


USAGE = "%%ddp [-n N] [--backend gloo] [--timeout SECONDS] [--ranks 0,1] [--only 0,1] [--stream]"


class _OptionParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise MagicUsageError(f"%%ddp: {message}. Use: {USAGE} (%ddp --help says more)")


def _parser() -> argparse.ArgumentParser:
    parser = _OptionParser(prog="%%ddp", usage=USAGE.replace("%", "%%"), add_help=False,  # argparse %-formats it
                           allow_abbrev=False,   # --onl is a typo, not --only
                           description="Run the cell on the ranks of the live cluster, each in its own namespace.")
    parser.add_argument("-n", "--nprocs", type=_whole_number, default=None,
                        help="ranks (default: the running cluster's, else 2)")
    parser.add_argument("--backend", default=None, help="auto, gloo, nccl or mpi")
    parser.add_argument("--timeout", type=_seconds, default=None,
                        help="watchdog seconds for this cell, or none (default: the cluster's, 120); ranks running "
                             "Python code at the watchdog are interrupted and keep their variables, ranks stuck in "
                             "a collective end the cluster")
    parser.add_argument("--ranks", default=None,
                        help="whose output to show, e.g. 0 or 0,2 (default: all); every rank still runs the cell, "
                             "and a rank that fails shows its output too")
    parser.add_argument("--only", default=None,
                        help="which ranks run the cell, e.g. 0 or 0,2 (default: all); the others skip it, their "
                             "variables unchanged. A collective on the default group needs every rank: drop "
                             "--only for cells that communicate")
    parser.add_argument("--stream", action="store_true",
                        help="print each line as it arrives, tagged with its rank (for a long cell); by default "
                             "every rank's lines are printed in rank order when the cell ends")
    parser.add_argument("-h", "--help", action="store_true", help="show this help and run nothing")
    return parser


def help_text() -> str:
    """What `%%ddp --help` prints: every option, and how --ranks and --only differ."""
    return _parser().format_help()


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number: give the number of ranks, "
                                         "e.g. -n 4") from None


def _seconds(text: str) -> float:
    """--timeout's seconds; `none` (no watchdog) is the longest watchdog `check_timeout` allows, 30 days."""
    if text.lower() == "none":
        return float(MAX_TIMEOUT_S)
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds, e.g. --timeout 60 (--timeout none: "
                                         "no watchdog)") from None


def parse_options(line: str) -> argparse.Namespace:
    """Parse `%%ddp` options; a one-line ValueError says what was wrong."""
    __tracebackhide__ = True
    try:
        words = shlex.split(re.sub(r",\s+", ",", line))   # "--only 0, 2" is one list of ranks
    except ValueError as error:  # shlex's "No closing quotation"
        raise MagicUsageError(f"%%ddp {line.strip()}: {str(error).lower()}: close the quote, or drop it "
                              "(no %%ddp option needs quotes).") from None
    parser = _parser()
    try:
        options = parser.parse_args(words)
    except MagicUsageError as error:  # _OptionParser.error's message, raised inside argparse's own handler
        raise MagicUsageError(str(error)) from None
    _refuse_repeats(parser, words)
    options.ranks = _rank_list("--ranks", options.ranks)
    options.only = _rank_list("--only", options.only)
    return options


def _refuse_repeats(parser: argparse.ArgumentParser, words: list[str]) -> None:
    """An option given twice (`--only 0 --only 1`, `-n 2 --nprocs 3`) is refused: argparse keeps the last silently."""
    seen: dict[str, str] = {}
    for word in words:
        flag = word.split("=", 1)[0]
        action = parser._option_string_actions.get(flag)
        if action is None or action.nargs == 0:   # an on/off flag (--stream) given twice means the same
            continue
        if action.dest in seen:
            given = f"{flag} is given twice" if seen[action.dest] == flag else \
                f"{seen[action.dest]} and {flag} are one option, given twice"
            raise MagicUsageError(f"%%ddp: {given}: give it once (only the last would count)")
        seen[action.dest] = flag


def _rank_list(flag: str, text: str | None) -> list[int] | None:
    """'0,2' -> [0, 2] (None stays None); a rank named twice is refused."""
    __tracebackhide__ = True
    if text is None:
        return None
    try:
        ranks = [int(r) for r in text.split(",") if r.strip()]
    except ValueError:
        raise MagicUsageError(f"%%ddp {flag} {text}: give rank numbers separated by commas, "
                              f"e.g. {flag} 0 or {flag} 0,2.") from None
    if not ranks and flag == "--ranks":   # --only's own check says what an empty list of ranks to run on means
        raise MagicUsageError(f"%%ddp {flag} {text}: no rank given: name the ranks whose output to show, e.g. "
                              f"{flag} 0 (every rank's: leave {flag} out).")
    twice = sorted({r for r in ranks if ranks.count(r) > 1})
    if twice:
        raise MagicUsageError(f"%%ddp {flag} {text}: rank {', '.join(map(str, twice))} is named twice: name each "
                              f"rank once, e.g. {flag} 0,2.")
    return ranks


def check_options(options: argparse.Namespace) -> None:
    """Refuse a bad option before the live cluster is started or shut down (its state survives a typo)."""
    __tracebackhide__ = True
    wanted_n = _wanted_nprocs(options.nprocs)
    checks = [("-n", options.nprocs, lambda: check_nprocs(options.nprocs)),
              ("--backend", options.backend, lambda: choose_backend(options.backend, wanted_n, announce=False)),
              ("--timeout", options.timeout, lambda: check_timeout(options.timeout)),
              ("--ranks", options.ranks, lambda: check_ranks(options.ranks, wanted_n)),
              ("--only", options.only, lambda: check_ranks(options.only, wanted_n, purpose="run on")),
              ("--ranks", options.ranks, lambda: check_shown_ranks_run(options.ranks, options.only))]
    for flag, value, check in checks:
        if value is None:
            continue
        try:
            check()
        except (TypeError, ValueError) as error:
            shown = ((",".join(map(str, value)) or "(no rank)") if isinstance(value, list) else
                     f"{value:g}" if isinstance(value, float) else value)
            raise MagicUsageError(f"%%ddp {flag} {shown}: {_as_options(str(error))}") from None


def _as_options(message: str) -> str:
    """The library's message in the magic's words: `timeout=60` is `--timeout 60`, `timeout=None` is
    `--timeout none`, `nprocs=4` is `-n 4`."""
    for library, magic in ((r"\btimeout=None\b", "--timeout none"), (r"\btimeout=", "--timeout "),
                           (r"^timeout\b", "--timeout"), (r"\bor None\b", "or none"), (r"\bnprocs=", "-n "),
                           (r"\bnprocs\b", "-n")):
        message = re.sub(library, magic, message)
    return message


def _wanted_nprocs(nprocs: int | None) -> int:
    """-n, else the last cluster's size (alive, or ended by a crash or a hang: its successor keeps it), else 2."""
    if nprocs is not None:
        return nprocs
    return _current.nprocs if _current is not None else 2


def current_cluster(nprocs: int | None = None, backend: str | None = None) -> Cluster:
    """The cluster `%%ddp` uses, (re)started if it is missing, dead, or of another shape. A cluster that a crash or
    a hang ended is followed by one of its size and backend; one replaced by another shape says so."""
    global _current
    wanted_n = _wanted_nprocs(nprocs)
    if _current is not None and _current.alive:
        if wanted_n == _current.nprocs and (backend is None or backend in ("auto", _current.backend)):
            return _current
        print(f"ddp_lab: starting a cluster of {wanted_n} rank{'s' if wanted_n != 1 else ''}"
              f"{f' on {backend}' if backend not in (None, 'auto') else ''} in place of the running one "
              f"({_current.nprocs} on {_current.backend}); its ranks' variables are gone.", file=sys.stderr)
        _current.shutdown()
    elif _current is not None and backend is None and wanted_n == _current.nprocs:
        backend = _current.backend   # a fresh cluster after a crash or a hang, of its size: the same backend
    _current = Cluster(wanted_n, backend or "auto")
    return _current


def ddp(line: str, cell: str):
    """%%ddp [-n N] [--backend B] [--timeout S] [--ranks 0,1] [--only 0,1] [--stream]: run the cell on the live
    cluster's ranks.

    --ranks chooses whose output is shown: every rank runs the cell. --only chooses which ranks
    run it: the others skip it and keep their variables; a collective needs every rank, so a cell
    that communicates fails with --only (at the watchdog, naming the ranks left out). --stream prints
    each line as it arrives. `%ddp --help` lists every option.
    """
    __tracebackhide__ = True
    options = parse_options(line)
    if options.help:
        print(help_text())
        return
    try:   # in a fresh kernel the backend's check imports torch, then the ranks start: a press there is one line
        check_options(options)
        shell = _shell()
        # Register the cell like IPython does, so tracebacks say "Cell In[n], line k" (the count
        # has already moved on to the next cell while this one runs).
        filename = shell.compile.cache(cell, shell.execution_count - 1) if shell is not None else None
        names = _cell_names(shell)
        # a cell that does not compile, before the cluster is touched; named as the notebook names it ("Cell In[5]")
        check_source(cell, names.get(filename, filename) if filename else "<ddp cell>")
        cluster = current_cluster(options.nprocs, options.backend)
    except KeyboardInterrupt:
        print("ddp_lab: interrupted while the cluster was starting; no rank ran the cell.", file=sys.stderr)
        raise CellInterrupted from None
    guard = _main_guard_line(cell)
    if guard is not None:
        print(f"ddp_lab: the block under `if __name__ == \"__main__\":` (line {guard}) does not run: a %%ddp cell "
              f"runs in module {CELL_MODULE}, so __name__ is {CELL_MODULE!r} there (in a notebook cell it is "
              "'__main__'). Call what the block calls directly, e.g. main().", file=sys.stderr)
    cluster.name_cells(names)
    try:
        shown = cluster.run_code(cell, timeout=options.timeout, show=options.ranks, filename=filename,
                                 only=options.only, display=True, stream=options.stream)
    except (LaunchError, CellInterrupted) as error:   # what the ranks drew before the cell failed or was stopped
        show_figures(error.figures, options.ranks)       # is shown, as a kernel shows it
        raise
    if shell is None or not shell.displayhook.semicolon_at_end_of_expression(cell):   # `x;` shows nothing
        print_values(shown, options.ranks)
    show_figures(shown.figures, options.ranks)


def _main_guard_line(cell: str) -> int | None:
    """The line of the cell's top-level `if __name__ == "__main__":`, as a script ends (None if it has none)."""
    for node in ast.parse(cell).body:
        test = node.test if isinstance(node, ast.If) else None
        if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
                and {ast.dump(test.left), ast.dump(test.comparators[0])} ==
                {ast.dump(ast.Name("__name__", ast.Load())), ast.dump(ast.Constant("__main__"))}):
            return node.lineno
    return None


def ddp_line(line: str) -> None:
    """%ddp --help: the options of %%ddp (a cell magic, which needs a cell body); any other %ddp line is refused."""
    __tracebackhide__ = True
    if line.strip() in ("--help", "-h"):
        print(help_text())
        return
    raise MagicUsageError(f"%ddp {line.strip()}: %%ddp (two %) is a cell magic: write it on a cell's first line, "
                          "the code to run on the ranks below it. %ddp --help lists its options.")


def print_values(texts: list[str | None], show: list[int] | None = None) -> None:
    """A cell's final expression on each rank (`show`: whose), as a kernel shows Out[n]: its repr, under the ranks'
    output; nothing for a rank whose cell ends with a statement or gives None."""
    for rank, text in enumerate(texts):
        if text is None or (show is not None and rank not in show):
            continue
        for index, line in enumerate(text.splitlines() or [""]):
            print(f"[rank {rank}] {'Out: ' if index == 0 else '     '}{line}")


def show_figures(figures: list[list[bytes]], show: list[int] | None = None) -> None:
    """The figures a cell drew on each rank (`show`: whose; PNG bytes, rank_figures.py), each under a line naming its
    rank, as a kernel shows a figure under its cell."""
    from IPython.display import Image, display   # lazy: only a cell that drew a figure needs IPython's display

    for rank, pictures in enumerate(figures):
        if show is not None and rank not in show:
            continue
        for index, picture in enumerate(pictures, 1):
            print(f"[rank {rank}] figure" + (f" {index} of {len(pictures)}" if len(pictures) > 1 else ""))
            display(Image(picture))


def ddp_pull(line: str):
    """%ddp_pull NAME: a list of NAME's value on every rank (also stored as NAME in the notebook)."""
    __tracebackhide__ = True
    name = line.strip()
    if not name.isidentifier():
        raise MagicUsageError(f"%ddp_pull needs one variable name, got {line!r}: e.g. %ddp_pull loss.")
    if _current is None or not _current.alive:
        raise MagicUsageError(_no_live_cluster())
    values = _current.pull(name)
    shell = _shell()
    if shell is not None:
        shell.user_ns[name] = values
    return values


def ddp_status(line: str = "") -> StatusReport | None:
    """%ddp_status: one line per rank (alive or not, pid, idle or running what for how long, the
    collective it waits in, memory).

    It sends no rank a command, so a rank busy in a cell (or stuck) does not hold it up: a rank
    running a cell for over half a second is asked for its stack by a signal, and one that does
    not write it within a bounded wait (about 0.5 s) is shown without its collective. Returns
    the statuses (`statuses = %ddp_status`), a list of `ddp_lab.cluster.status.RankStatus`.
    """
    if line.strip():
        raise MagicUsageError(f"%ddp_status takes no arguments, got {line.strip()!r}: write %ddp_status.")
    if _current is None or not _current.alive:
        print(_no_live_cluster())
        return None
    return _current.status()


def _no_live_cluster() -> str:
    """Why no cluster answers: none was started (or %ddp_shutdown stopped it), or one was shut down (a crash, a hang,
    the stop button pressed twice), which its cell said."""
    if _current is None:
        return "no live cluster: run a %%ddp cell first."
    return (f"no live cluster: the last one ({_current.nprocs} ranks on {_current.backend}) was shut down, as its "
            "cell reported; the next %%ddp cell starts a fresh one of that size, with empty namespaces.")


def ddp_shutdown(line: str = "") -> None:
    """%ddp_shutdown: stop the live cluster's ranks."""
    global _current
    if line.strip():
        raise MagicUsageError(f"%ddp_shutdown takes no arguments, got {line.strip()!r}: write %ddp_shutdown.")
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
    ipython.register_magic_function(ddp_line, "line", "ddp")   # `%ddp --help`; IPython points `%%ddp --help` alone here
    ipython.register_magic_function(ddp_pull, "line", "ddp_pull")
    ipython.register_magic_function(ddp_status, "line", "ddp_status")
    ipython.register_magic_function(ddp_shutdown, "line", "ddp_shutdown")

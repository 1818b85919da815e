"""`ddp_lab.launch`: run a function written in a notebook cell on N ranks.

    results = ddp_lab.launch(fn, args=(...), nprocs=4)

works like `torch.multiprocessing.spawn(fn, args, nprocs)` but ships `fn` by value (so it
may live in a notebook cell), initialises the default process group before `fn` runs,
prints every rank's output in rank order when the run ends, returns every rank's return
value, and turns any failure, crash or hang into one exception that names every rank.

Introduced in notebooks/00-welcome-and-first-launch.ipynb.
"""

from __future__ import annotations

import os
import warnings

from ddp_lab.hardware.machine import cpu_cores
from ddp_lab.launcher.arguments import check_launch
from ddp_lab.launcher.backend import choose_backend
from ddp_lab.launcher.errors import LaunchWarning, describe_exit
from ddp_lab.launcher.fd_limit import one_line_if_out_of_fds
from ddp_lab.launcher.interrupts import interrupts_held
from ddp_lab.launcher.output import RankOutput, note, print_in_rank_order
from ddp_lab.launcher.payload import build_payload, cell_names, load_value
from ddp_lab.launcher.procstart import prepare_zygote
from ddp_lab.launcher.progress import LiveLines
from ddp_lab.launcher.rank_group import RankGroup
from ddp_lab.launcher.results import Results
from ddp_lab.launcher.zygote_client import ForkedRank

DEFAULT_TIMEOUT = 120.0


def threads_per_rank(nprocs: int, threads: int | None) -> int | None:
    """Torch threads for each rank: `threads`, else the user's OMP_NUM_THREADS, else cores // nprocs."""
    if threads is not None:
        return threads
    if "OMP_NUM_THREADS" in os.environ:
        return None  # the user chose; leave it to them
    return max(1, cpu_cores() // nprocs)


def note_if_oversubscribed(nprocs: int) -> None:
    """Say once per kernel that more ranks than cores run slower (a launch's, a live cluster's).

    A `ddp_lab: ` note printed with the ranks' output, not a warning: it depends on the
    machine, so stored notebook outputs drop such lines (tests/sanitize.cfg).
    """
    cores = cpu_cores()
    if nprocs > cores:   # output.note prints it once per kernel, with this launch's output
        # one line under 100 characters, printed with the ranks' output (output.note)
        note(f"ddp_lab: nprocs={nprocs} is more than the {cores} CPU cores: ranks take turns (slower, same results)")


def launch(fn, args=(), nprocs: int = 2, backend: str = "auto", timeout: float | None = DEFAULT_TIMEOUT, *,
           init_process_group: bool = True, stream: bool = False, threads: int | None = None,
           env: dict | None = None, argv: list[str] | tuple[str, ...] = ()) -> Results:
    """Call `fn(rank, *args)` on `nprocs` fresh ranks and return every rank's result.

    Args:
        fn: a function taking the rank first; may be defined in a notebook cell, a closure
            or a lambda, and may use classes defined in the notebook.
        args: extra positional arguments for fn (pickled with cloudpickle).
        nprocs: number of ranks (processes), at most 256 (arguments.MAX_NPROCS).
        backend: 'auto' (nccl with one GPU per rank, else gloo), 'gloo', 'nccl' or 'mpi'.
        timeout: seconds before the watchdog dumps every rank's stack and stops them
            (above 0, at most 30 days); None disables it.
        init_process_group: False leaves `dist.init_process_group()` to fn (the
            environment, MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE, is set either way); fn may
            set its group up any way it would under mp.spawn: env://, its own MASTER_PORT
            (a tutorial's setup()), tcp://, file://, or a store= (ddp_lab/launcher/rendezvous.py).
        stream: print lines as they arrive (for long runs) instead of rank by rank at the end.
        threads: torch threads per rank; default: OMP_NUM_THREADS if set, else cores // nprocs.
        env: extra environment variables for the ranks (e.g. TORCH_DISTRIBUTED_DEBUG), strings
            only; not RANK, WORLD_SIZE, MASTER_ADDR/MASTER_PORT and the like, which the
            launcher sets (arguments.check_env says what to do instead).
        argv: each rank's command-line arguments: its `sys.argv` is `[fn.__name__, *argv]`, so an
            argparse-based `main()` parses them as under torchrun (default: none, its defaults).

    Returns:
        Results: a list, `results[k]` being rank k's return value, with `.outputs`.

    Raises:
        TypeError, ValueError: a bad argument (checked before any rank starts); the
        message names the argument and the fix.
        LaunchError (RankFailed, RankCrashed, LaunchTimeout, ResultNotPicklable): when
        any rank does not return; the message lists every failing rank.

    Example:
        >>> def hello(rank):
        ...     print("hello from", rank)
        ...     return rank * rank
        >>> ddp_lab.launch(hello, nprocs=2)
        [rank 0] hello from 0
        [rank 1] hello from 1
        [0, 1]

    Introduced in notebooks/00-welcome-and-first-launch.ipynb.
    """
    __tracebackhide__ = True  # IPython and pytest: show the user's cell, not launcher internals
    check_launch(fn, args, nprocs, timeout, threads, env, argv)
    with one_line_if_out_of_fds("start the ranks"):
        return _launch(fn, args, nprocs, backend, timeout, init_process_group, stream, threads, env, argv)


def _launch(fn, args, nprocs, backend, timeout, init_process_group, stream, threads, env, argv) -> Results:
    """launch() once its arguments were checked."""
    __tracebackhide__ = True
    chosen = choose_backend(backend, nprocs) if init_process_group else None
    pg_timeout = 1800.0 if timeout is None else float(timeout) + 60.0
    payload = build_payload(fn, args, chosen, threads_per_rank(nprocs, threads), pg_timeout, argv)
    note_if_oversubscribed(nprocs)
    names = cell_names()

    group = RankGroup(nprocs, stream=stream, live=LiveLines() if stream else None)
    try:
        group.start(payload, env or {}, pg_timeout)
        outcome = group.watch(timeout)
        stacks = group.stacks() if outcome == "timeout" else {}
        group.stop()
    except BaseException:  # KeyboardInterrupt (Jupyter's stop button) included
        with interrupts_held():  # pressing it again must not leave ranks or pipes behind
            group.stop(grace=0.5)
            _show_output(group.outputs, stream)
        raise

    _show_output(group.outputs, stream)
    prepare_zygote()  # a successor importing what the ranks learned, or a new zygote if this one died
    if outcome != "ok":
        raise group.error(outcome, stacks, names, timeout) from None
    return _results(group, chosen)


def _show_output(outputs: list[RankOutput], streamed: bool) -> None:
    if not streamed:
        print_in_rank_order(outputs)


def _results(group: RankGroup, backend: str | None) -> Results:
    values = [load_value(group.reports[rank]["value"], rank) for rank in range(group.nprocs)]
    codes = [group.exits.get(rank, 0) for rank in range(group.nprocs)]
    for rank, code in enumerate(codes):
        if code != 0:
            warnings.warn(
                f"rank {rank} returned its result, then its process ended with {describe_exit(code)} "
                "while exiting; all results are complete.", LaunchWarning, stacklevel=3)
    started = ["warm" if isinstance(process, ForkedRank) else "cold" for process in group.processes]
    return Results(values, group.texts(), backend, codes, started)

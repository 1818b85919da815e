"""`ddp_lab.Cluster`: N ranks that stay alive between cells, each with its own namespace.

    cluster = ddp_lab.Cluster(4)
    cluster.run_code("x = torch.ones(2) * rank; dist.all_reduce(x)")
    cluster.pull("x")            # [tensor([6., 6.]), tensor([6., 6.]), ...]
    cluster.shutdown()

`%%ddp` cells (see magics.py) are a thin layer over this class, and this class over a
`RankGroup` (launcher/rank_group.py: start, watch, hang and crash reports, stop), the one
`ddp_lab.launch` drives too; one command is watched by command.py. An exception on some ranks
shows their tracebacks and leaves the cluster running; an interrupt stops the cell and keeps
the ranks; a crash or a hang (the watchdog) shuts the cluster down and says how to start a
fresh one. While it runs, the cluster describes itself in its work folder (registry.py), so that
`python -m ddp_lab status` in a terminal shows its ranks while the kernel is busy in a cell.

Introduced in notebooks/00b-live-cluster.ipynb.
"""

from __future__ import annotations

import itertools
import sys
import time

from ddp_lab.cluster import rank_loop as cluster_rank
from ddp_lab.cluster.command import CommandWatch, restart
from ddp_lab.cluster.registry import CLUSTER_PREFIX, Registration
from ddp_lab.cluster.status import StatusReport, cluster_status
from ddp_lab.launcher.arguments import (check_env, check_fn, check_nprocs, check_ranks, check_shown_ranks_run,
                                       check_signature, check_source, check_threads, check_timeout,
                                       check_variable_name, working_directory)
from ddp_lab.launcher.backend import choose_backend
from ddp_lab.launcher.errors import CellInterrupted, RankCrashed, exit_with_cause
from ddp_lab.launcher.fd_limit import one_line_if_out_of_fds
from ddp_lab.launcher.launch import DEFAULT_TIMEOUT, note_if_oversubscribed, threads_per_rank
from ddp_lab.launcher.output import RankOutput, print_in_rank_order
from ddp_lab.launcher.payload import build_payload, cell_names, load_value, pack_arguments, pack_function
from ddp_lab.launcher.procstart import prepare_zygote
from ddp_lab.launcher.progress import LiveLines
from ddp_lab.launcher.rank_group import RankGone, RankGroup
from ddp_lab.launcher.results import Results

PG_TIMEOUT_S = 1800.0  # the ranks' process-group timeout (torch's default for gloo); the watchdog acts first
EXIT_NEWS_S = 2.0  # after a rank's channel closed: how long its exit status may take to arrive


def _stopped(watch: CommandWatch) -> CellInterrupted:
    """The CellInterrupted a stopped command raises, with the figures its ranks had drawn (each rank draws the figures
    of a stopped cell too, as a kernel shows a stopped cell's plots): a `%%ddp` cell shows them."""
    stopped = CellInterrupted()
    stopped.figures = [watch.replies.get(rank, {}).get("figures", []) for rank in range(watch.nprocs)]
    return stopped


class Cluster:
    """A persistent process group of `nprocs` ranks for interactive work.

    Args:
        nprocs: number of ranks.
        backend: 'auto', 'gloo', 'nccl' or 'mpi', as for `ddp_lab.launch`.
        timeout: default watchdog seconds for each command.
        threads: torch threads per rank (default cores // nprocs).
        env: extra environment variables for the ranks.

    Stop it with `shutdown()` or a `with` block; ranks still running when the kernel ends
    die with it.

    Example:
        >>> with ddp_lab.Cluster(2) as cluster:
        ...     cluster.run_code("t = torch.tensor([rank + 1.0]); dist.all_reduce(t)")
        ...     cluster.pull("t")
        [tensor([3.]), tensor([3.])]

    Introduced in notebooks/00b-live-cluster.ipynb.
    """

    def __init__(self, nprocs: int = 2, backend: str = "auto", timeout: float | None = DEFAULT_TIMEOUT, *,
                 threads: int | None = None, env: dict | None = None):
        check_nprocs(nprocs)
        check_timeout(timeout)
        check_threads(threads)
        check_env(env)
        working_directory()
        self.nprocs, self.timeout = nprocs, timeout
        self.backend = choose_backend(backend, nprocs)
        self._ids = itertools.count()
        self._ended_at = [0] * nprocs  # each rank's output lines up to the end of the last command
        self._names = cell_names()
        self._group = RankGroup(nprocs)  # the ranks' life: started, watched, reported on, stopped there
        self._registration: Registration | None = None  # what `python -m ddp_lab status` reads
        self._closed = False
        try:
            with one_line_if_out_of_fds("start the cluster's ranks"):
                self._start(threads, env or {})
        except BaseException:
            self._teardown()
            raise

    # -- lifecycle -----------------------------------------------------------------------
    def _start(self, threads: int | None, env: dict) -> None:
        self._workdir = self._group.open_work_folder(CLUSTER_PREFIX)
        payload = build_payload(cluster_rank.serve, (self._workdir,), self.backend,
                                threads_per_rank(self.nprocs, threads), PG_TIMEOUT_S)
        payload["argv"] = [cluster_rank.CELL_MODULE]   # a cell's sys.argv, as __main__'s in a script
        self._group.start(payload, env, PG_TIMEOUT_S)
        self._group.wait_until_ready(self.timeout, self._names)
        self._ended_at = [len(output.lines) for output in self._group.outputs]   # start-up's own lines: not a cell's
        self._registration = Registration(self._workdir, self.nprocs, self.backend, self._group.processes,
                                          self._names)
        prepare_zygote()

    @property
    def alive(self) -> bool:
        return not self._closed

    def _in_magic(self) -> bool:
        """Whether this is the cluster that `%%ddp` cells run on (magics.py's): its messages then speak as the
        magic does (`--timeout SECONDS`; after a crash, the next cell starts a fresh cluster)."""
        magics = sys.modules.get("ddp_lab.cluster.magics")   # not loaded: no magic drives this cluster
        return magics is not None and magics._current is self

    def shutdown(self) -> None:
        """Stop every rank (idempotent). Nothing is left running."""
        if self._closed:
            return
        self._unregister()
        for rank in range(self.nprocs):
            try:
                self._group.send({"kind": "shutdown"}, [rank])
            except (OSError, RankGone):
                pass
        self._group.watch(timeout=5.0)
        self._teardown()

    def _teardown(self) -> None:
        self._closed = True
        self._unregister()
        self._group.stop()

    def _unregister(self) -> None:
        """No longer listed by `python -m ddp_lab status` (the cluster is being shut down)."""
        if self._registration is not None:
            self._registration.remove()
            self._registration = None

    def status(self) -> StatusReport:
        """Each rank's process (alive, pid, memory) and what it is doing, without waiting for a busy rank.

        Reads the record each rank writes as a command starts and ends (status.py) and asks the
        operating system about the process: it never sends the ranks a command. A rank running a
        command for over half a second is asked for its stack (a signal, as the hang report asks),
        to name the collective it waits in; that takes at most about 0.5 s, and a rank that does not
        answer in time is shown without it. `%ddp_status` prints it, one line per rank;
        `python -m ddp_lab status` prints the same lines in a terminal while the kernel is busy.
        """
        if self._closed:
            raise RuntimeError(f"this cluster was shut down: {restart(self._in_magic())}")
        self._take_news_of_exits()   # a rank that died since the last command: how it ended
        return cluster_status(self._group.processes, dict(self._group.exits), self._workdir, self._names)

    def _take_news_of_exits(self) -> None:
        """Handle the events already queued, and wait (at most EXIT_NEWS_S) for the exit status of a rank whose
        process has ended but whose end has not been handled yet."""
        self._group.take_queued_events()
        deadline = time.monotonic() + EXIT_NEWS_S
        while time.monotonic() < deadline and any(process.returncode is not None and process.rank not in
                                                  self._group.exits for process in self._group.processes):
            self._group.next_event(deadline)

    def name_cells(self, names: dict[str, str]) -> None:
        """Name code in tracebacks as the notebook does ('Cell In[5]'): `payload.cell_names()`'s mapping."""
        self._names.update(names)
        if self._registration is not None:
            self._registration.name_cells(self._names)  # a terminal's status names cells as the notebook does

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"Cluster(nprocs={self.nprocs}, backend={self.backend!r}, {'alive' if self.alive else 'shut down'})"

    # -- commands -------------------------------------------------------------------------
    def run_code(self, source: str, *, timeout: float | None = None, show: list[int] | None = None,
                 filename: str | None = None, only: list[int] | None = None, display: bool = False,
                 stream: bool = False) -> Results:
        """Run `source` on every rank in its namespace (`rank`, `world_size`, `torch`, `dist` predefined).

        Returns each rank's value of a final expression (None if there is none); with `display`,
        its repr instead (what a `%%ddp` cell shows, as a kernel shows Out[n]: nothing is pickled,
        so a model wrapped in DDP or a large tensor shows too, and stays on the rank). `show`: whose
        output to print (default: every rank's). `only`: the ranks that run it (default: all); the
        others keep their namespace as it is, and their value is None. A collective on the default
        group needs every rank: in an `only` cell it fails at the watchdog, naming the ranks left out.
        `stream`: print each line as it arrives (for a long command; `launch`'s `stream` too), instead
        of every rank's lines in rank order at the end.
        """
        __tracebackhide__ = True
        command_id = next(self._ids)
        filename = filename or f"<ddp cell {command_id}>"
        check_source(source, filename)
        return self._command({"kind": "exec", "source": source, "filename": filename, "display": bool(display)},
                             command_id, timeout, show, only, stream)

    def run(self, fn, *args, timeout: float | None = None, show: list[int] | None = None,
            only: list[int] | None = None, stream: bool = False) -> Results:
        """Call `fn(rank, *args)` on every rank of the running cluster (or the ranks in `only`); return each value.
        `stream`: print each line as it arrives, as `run_code`'s."""
        __tracebackhide__ = True
        check_fn(fn, "cluster.run")
        check_signature(fn, args, "cluster.run")
        command = {"kind": "call", "fn": pack_function(fn), "args": pack_arguments(args)}
        return self._command(command, next(self._ids), timeout, show, only, stream)

    def pull(self, name: str, timeout: float | None = None) -> list:
        """Bring variable `name` from every rank's namespace back: a list indexed by rank."""
        __tracebackhide__ = True
        check_variable_name(name)
        return list(self._command({"kind": "pull", "name": name}, next(self._ids), timeout, show=[]))

    def _command(self, command: dict, command_id: int, timeout: float | None, show: list[int] | None,
                 only: list[int] | None = None, stream: bool = False) -> Results:
        __tracebackhide__ = True
        if self._closed:
            raise RuntimeError(f"this cluster was shut down: {restart(self._in_magic())}")
        check_timeout(timeout)
        if show is not None:
            check_ranks(show, self.nprocs, prefix=f"show={show!r}: ")
        if only is not None:
            check_ranks(only, self.nprocs, prefix=f"only={only!r}: ", purpose="run on")
        check_shown_ranks_run(show, only, prefix=f"show={show!r}: ")
        running = list(range(self.nprocs)) if only is None else sorted(set(only))
        timeout = self.timeout if timeout is None else timeout
        self._group.take_queued_events()
        if self._group.exits:  # a rank died since the last command (killed, out of memory, a thread's exit)
            raise self._died_between_commands() from None
        self._print_between_commands()
        note_if_oversubscribed(self.nprocs)   # once per kernel, with the first command that prints (output.note)
        starts = [len(output.lines) for output in self._group.outputs]
        unshown = list(starts)   # each rank's first line not printed yet: a streamed command prints them as they come
        watch = CommandWatch(self._group, command_id, running, self._names, self._teardown, self._in_magic())
        self._group.set_live(LiveLines(show), (lambda: self._print_new(unshown, show, close_live=False))
                             if stream else None)
        try:
            watch.send(command)
            problem = watch.collect(timeout)
        except KeyboardInterrupt:
            self._interrupted(watch, unshown, show)  # raises CellInterrupted unless every rank went on to the end
            problem = None
        except RankGone as gone:
            raise self._died_between_commands(gone.rank) from None
        except BaseException:
            self._teardown()
            self._print_new(unshown, show)
            print(f"ddp_lab: {watch.fresh_start}", file=sys.stderr)
            raise
        finally:
            self._group.set_live(self._group.live)   # lines arriving after the command wait for the next one
        self._ended_at = ends = self._line_counts()   # this command's output is all here; later lines: the next
        if show is not None and problem is not None:   # a rank that failed, crashed or hung shows what it printed
            show = sorted(set(show) | set(problem.failures))
        self._print_new(unshown, show, ends)
        texts = [RankOutput(r, o.lines[starts[r]:ends[r]]).text() for r, o in enumerate(self._group.outputs)]
        lost = watch.lost_group()
        if lost and not self._closed:
            self._regroup(lost)   # a command of its own: it lets go of the lines above, read into `texts` first
        figures = [watch.replies.get(r, {}).get("figures", []) for r in range(self.nprocs)]
        if problem is not None:
            problem.figures = figures   # what the cell drew before it failed: a %%ddp cell still shows it
            raise problem from None
        still = "; the cluster is still running"
        return Results([load_value(watch.replies[r]["value"], r, still) if r in watch.replies else None
                        for r in range(self.nprocs)], texts, self.backend, [], figures=figures)

    def _interrupted(self, watch: CommandWatch, starts: list[int], show: list[int] | None) -> None:
        """Jupyter's stop button during a command (command.CommandWatch.interrupt): the ranks' code is
        interrupted and the cluster kept, unless a rank does not stop (then it is shut down). Raises
        CellInterrupted, after one line per rank, unless every rank the command reached ended it as it would have
        anyway (its code caught the KeyboardInterrupt and went on, as a kernel's cell may): then it returns, and
        the command ends with its values."""
        __tracebackhide__ = True
        try:
            problem = watch.interrupt()
        except KeyboardInterrupt:  # pressed again before the ranks stopped: none can be trusted
            self._teardown()
            self._print_new(starts, show)
            print(f"ddp_lab: interrupted twice. {watch.fresh_start}", file=sys.stderr)
            raise _stopped(watch) from None
        self._ended_at = ends = self._line_counts()
        self._print_new(starts, show, ends)
        if self._closed:
            print(f"ddp_lab: {problem}", file=sys.stderr)
            raise _stopped(watch) from None
        if problem is None and all(watch.replies.get(rank, {}).get("ok") for rank in watch.running):
            return
        for note in watch.interrupted_notes():
            print(note, file=sys.stderr)
        print("ddp_lab: interrupted; the cluster keeps its ranks and their variables.", file=sys.stderr)
        raise _stopped(watch) from None

    def _died_between_commands(self, gone: int | None = None) -> RankCrashed:
        """A one-line error for ranks that died while no command ran (`gone`: one whose channel was
        found closed); the cluster is shut down, and what the dead ranks printed since the last
        command (a fault handler's dump) is shown."""
        deadline = time.monotonic() + EXIT_NEWS_S  # a closed channel: its exit is on the way
        while not self._group.exits and time.monotonic() < deadline:
            self._group.next_event(deadline)
        time.sleep(0.2)  # let the rest of the news arrive
        self._group.take_queued_events()
        crashed: dict[int, int | None] = dict(sorted(self._group.exits.items())) or {gone: None}
        self._teardown()  # after this every rank counts as exited: `crashed` was read before
        dead = list(crashed)
        print_in_rank_order([RankOutput(r, self._group.outputs[r].lines[self._ended_at[r]:]) for r in dead])

        def how_it_ended(code: int | None) -> str:
            return "its exit status did not arrive" if code is None else exit_with_cause(code)

        if len(dead) == 1:
            who, how = f"rank {dead[0]}", how_it_ended(crashed[dead[0]])
        else:
            who = f"ranks {', '.join(map(str, dead))}"
            how = "; ".join(f"rank {rank}: {how_it_ended(code)}" for rank, code in crashed.items())
        return self._group.crash_report(
            f"{who} of {self.nprocs} died between cells ({how}); the cluster was shut down: "
            f"{restart(self._in_magic())}", crashed,
            summary=lambda code: f"died between cells ({how_it_ended(code)})", headline_only=True)

    def _regroup(self, lost: list[int]) -> None:
        """After a cell destroyed the default process group on `lost` ranks: a fresh one on every rank."""
        __tracebackhide__ = True
        who = "every rank" if len(lost) == self.nprocs else f"rank(s) {', '.join(map(str, lost))}"
        self._command({"kind": "regroup", "backend": self.backend, "pg_timeout": PG_TIMEOUT_S},
                      next(self._ids), self.timeout, show=[])
        print(f"ddp_lab: this cell destroyed the default process group on {who} "
              "(dist.destroy_process_group()); the cluster made a fresh one on every rank for the next "
              "cell. Objects built on the old group (a DDP or FSDP model, subgroups) must be built again.",
              file=sys.stderr)

    def _print_between_commands(self) -> None:
        """What the ranks printed while no command ran (a thread of theirs), shown first in the next command's output
        (as a kernel shows a background thread's output in the cell that runs); then every line up to here is
        forgotten, so the cluster keeps each rank's output of one command, not of its whole life."""
        outputs = self._group.outputs
        shown = self._line_counts()
        print_in_rank_order([RankOutput(rank, output.lines[self._ended_at[rank]:shown[rank]])
                             for rank, output in enumerate(outputs)])
        for output, length in zip(outputs, shown):
            del output.lines[:length]
        self._ended_at = [0] * self.nprocs

    def _line_counts(self) -> list[int]:
        """How many lines each rank's output holds now (the reader threads go on appending: read once)."""
        return [len(output.lines) for output in self._group.outputs]

    def _print_new(self, starts: list[int], show: list[int] | None, ends: list[int] | None = None, *,
                   close_live: bool = True) -> None:
        """Print each shown rank's lines from `starts` to `ends` (default: all it holds now), and move `starts` to
        `ends`. `close_live`: the command's end (its progress lines end in the output printed here); else a
        streamed command printing what arrived while it runs."""
        ends = self._line_counts() if ends is None else ends
        if close_live and self._group.live is not None:
            self._group.live.close()
        ranks = range(self.nprocs) if show is None else sorted(set(show))
        new = [RankOutput(r, self._group.outputs[r].lines[starts[r]:ends[r]]) for r in ranks]
        starts[:] = ends   # before printing: a stop button pressed while it prints cannot print these lines again
        if close_live or any(output.lines for output in new):   # machine notes wait for a line to come first
            print_in_rank_order(new)

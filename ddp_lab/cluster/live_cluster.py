"""`ddp_lab.Cluster`: N ranks that stay alive between cells, each with its own namespace.

    cluster = ddp_lab.Cluster(4)
    cluster.run_code("x = torch.ones(2) * rank; dist.all_reduce(x)")
    cluster.pull("x")            # [tensor([6., 6.]), tensor([6., 6.]), ...]
    cluster.shutdown()

`%%ddp` cells (see magics.py) are a thin layer over this class. An exception on some
ranks shows their tracebacks and leaves the cluster running; a crash, a hang (the
watchdog) or an interrupt shuts the cluster down and says how to start a fresh one.

Introduced in notebooks/00b-live-cluster.ipynb.
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
import queue
import re
import signal
import sys
import time

from ddp_lab.cluster import rank_loop as cluster_rank
from ddp_lab.cluster.status import StatusReport, rank_status
from ddp_lab.launcher.arguments import (check_env, check_fn, check_nprocs, check_ranks, check_signature,
                                       check_source, check_threads, check_timeout, check_variable_name,
                                       working_directory)
from ddp_lab.launcher.backend import choose_backend
from ddp_lab.launcher.channel import send_message
from ddp_lab.launcher.errors import (LaunchError, LaunchTimeout, RankCrashed, RankFailed, RankFailure, crash_summary,
                                    exit_with_cause)
from ddp_lab.launcher.fd_limit import one_line_if_out_of_fds
from ddp_lab.launcher.launch import DEFAULT_TIMEOUT, start_ranks, threads_per_rank
from ddp_lab.launcher.output import RankOutput, print_in_rank_order
from ddp_lab.launcher.payload import build_payload, cell_names, pack_arguments, pack_function, rename_cells
from ddp_lab.launcher.procstart import prepare_zygote
from ddp_lab.launcher.rendezvous import loopback_store
from ddp_lab.launcher.reports import (blocked_in, build_error, raised_failure, read_stacks, timeout_hint,
                                     waiting_in)
from ddp_lab.launcher.results import Results
from ddp_lab.launcher.supervisor import POLL_S, Supervisor
from ddp_lab.launcher.workdir import work_folder

PG_TIMEOUT_S = 1800.0  # the ranks' process-group timeout (torch's default for gloo); the watchdog acts first
AFTER_FAILURE_S = 5.0  # once a rank failed, how long the others get before they count as stuck
EXIT_NEWS_S = 2.0  # after a rank's channel closed: how long its exit status may take to arrive
INTERRUPT_GRACE_S = 3.0  # after an interrupt: how long a rank may take to stop before it counts as stuck
INTERRUPT_CHECK_S = 0.5  # after an interrupt: how often the ranks still running are looked at (their stacks)
_STILL_RUNNING = object()  # _collect's answer when ranks still run at its deadline after an interrupt
RESTART = "run the cell again (or ddp_lab.Cluster(...)) to start a fresh one."
FRESH_START = f"The cluster was shut down; {RESTART}"


class _RankGone(Exception):
    """A command could not be sent: the rank's end of its channel is closed (the rank died)."""

    def __init__(self, rank: int):
        super().__init__(rank)
        self.rank = rank


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
        self._resources = contextlib.ExitStack()
        self._closed = False
        try:
            with one_line_if_out_of_fds("start the cluster's ranks"):
                self._start(threads, env or {})
        except BaseException:
            self._teardown()
            raise

    # -- lifecycle -----------------------------------------------------------------------
    def _start(self, threads: int | None, env: dict) -> None:
        self._workdir = self._resources.enter_context(work_folder("ddp_lab-cluster-"))
        store_env = self._resources.enter_context(loopback_store(self.nprocs, PG_TIMEOUT_S))
        payload = build_payload(cluster_rank.serve, (self._workdir,), self.backend,
                                threads_per_rank(self.nprocs, threads), PG_TIMEOUT_S)
        payload["argv"] = [cluster_rank.CELL_MODULE]   # a cell's sys.argv, as __main__'s in a script
        self._supervisor = Supervisor(self.nprocs)
        start_ranks(self._supervisor, payload, self._workdir, {**store_env, **env})
        deadline = time.monotonic() + 120.0 + (self.timeout or 0)
        while len(self._supervisor.ready) < self.nprocs:
            if self._supervisor.failed or time.monotonic() > deadline:
                outcome = "failed" if self._supervisor.failed else "timeout"
                stacks = read_stacks(self._supervisor, self._workdir) if outcome == "timeout" else {}
                self._supervisor.finish()
                raise build_error(self._supervisor, outcome, stacks, self._names, self.timeout)
            self._next_event(deadline)
        prepare_zygote()

    @property
    def alive(self) -> bool:
        return not self._closed

    def shutdown(self) -> None:
        """Stop every rank (idempotent). Nothing is left running."""
        if self._closed:
            return
        for process in self._supervisor.processes:
            try:
                send_message(process.channel, {"kind": "shutdown"})
            except OSError:
                pass
        self._supervisor.watch(timeout=5.0)
        self._teardown()

    def _teardown(self) -> None:
        self._closed = True
        supervisor = getattr(self, "_supervisor", None)
        if supervisor is not None:
            supervisor.finish()
        self._resources.close()

    def status(self) -> StatusReport:
        """Each rank's process (alive, pid, memory) and what it is doing, without waiting for a busy rank.

        Reads the record each rank writes as a command starts and ends (status.py) and asks the
        operating system about the process: it never sends the ranks a command. `%ddp_status`
        prints it, one line per rank.
        """
        if self._closed:
            raise RuntimeError(f"this cluster was shut down: {RESTART}")
        exits = dict(self._supervisor.exits)
        return StatusReport(rank_status(p.rank, p.pid, exits.get(p.rank), self._workdir, self._names)
                            for p in self._supervisor.processes)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"Cluster(nprocs={self.nprocs}, backend={self.backend!r}, {'alive' if self.alive else 'shut down'})"

    # -- commands -------------------------------------------------------------------------
    def run_code(self, source: str, *, timeout: float | None = None, show: list[int] | None = None,
                 filename: str | None = None, only: list[int] | None = None) -> Results:
        """Run `source` on every rank in its namespace (`rank`, `world_size`, `torch`, `dist` predefined).

        Returns each rank's value of a final expression (None if there is none). `show`: whose
        output to print (default: every rank's). `only`: the ranks that run it (default: all); the
        others keep their namespace as it is, and their value is None. A collective on the default
        group needs every rank: in an `only` cell it fails at the watchdog, naming the ranks left out.
        """
        __tracebackhide__ = True
        check_source(source)
        command_id = next(self._ids)
        filename = filename or f"<ddp cell {command_id}>"
        return self._command({"kind": "exec", "source": source, "filename": filename}, command_id, timeout, show,
                             only)

    def run(self, fn, *args, timeout: float | None = None, show: list[int] | None = None,
            only: list[int] | None = None) -> Results:
        """Call `fn(rank, *args)` on every rank of the running cluster (or the ranks in `only`); return each value."""
        __tracebackhide__ = True
        check_fn(fn, "cluster.run")
        check_signature(fn, args)
        command = {"kind": "call", "fn": pack_function(fn), "args": pack_arguments(args)}
        return self._command(command, next(self._ids), timeout, show, only)

    def pull(self, name: str, timeout: float | None = None) -> list:
        """Bring variable `name` from every rank's namespace back: a list indexed by rank."""
        __tracebackhide__ = True
        check_variable_name(name)
        return list(self._command({"kind": "pull", "name": name}, next(self._ids), timeout, show=[]))

    def _command(self, command: dict, command_id: int, timeout: float | None, show: list[int] | None,
                 only: list[int] | None = None) -> Results:
        __tracebackhide__ = True
        if self._closed:
            raise RuntimeError(f"this cluster was shut down: {RESTART}")
        check_timeout(timeout)
        if show is not None:
            check_ranks(show, self.nprocs, prefix=f"show={show!r}: ")
        if only is not None:
            check_ranks(only, self.nprocs, prefix=f"only={only!r}: ", purpose="run on")
        running = list(range(self.nprocs)) if only is None else sorted(set(only))
        timeout = self.timeout if timeout is None else timeout
        self._take_queued_events()
        if self._supervisor.exits:  # a rank died since the last command (killed, out of memory, a thread's exit)
            raise self._died_between_commands() from None
        starts = [len(output.lines) for output in self._supervisor.outputs]
        replies: dict[int, dict] = {}
        marks: dict[int, set] = {rank: set() for rank in range(self.nprocs)}
        sent: list[int] = []
        try:
            self._send_to_every_rank({**command, "id": command_id}, running, sent)
            problem = self._collect(command_id, timeout, running, replies, marks)
        except KeyboardInterrupt:
            self._interrupt(command_id, sent, replies, marks, starts, show)  # raises KeyboardInterrupt
        except _RankGone as gone:
            raise self._died_between_commands(gone.rank) from None
        except BaseException:
            self._teardown()
            self._print_new(starts, show)
            print(f"ddp_lab: {FRESH_START}", file=sys.stderr)
            raise
        self._ended_at = [len(output.lines) for output in self._supervisor.outputs]
        self._print_new(starts, show)
        lost = sorted(rank for rank, reply in replies.items() if reply.get("group") is False)
        if lost and not self._closed:
            self._regroup(lost)
        if problem is not None:
            raise problem from None
        return Results([pickle.loads(replies[r]["value"]) if r in replies else None for r in range(self.nprocs)],
                       [RankOutput(r, o.lines[starts[r]:]).text() for r, o in enumerate(self._supervisor.outputs)],
                       self.backend, [])

    def _send_to_every_rank(self, command: dict, ranks: list[int] | None = None, sent: list[int] | None = None) -> None:
        """Send a command to each rank (or each of `ranks`), noting each in `sent`; a rank whose channel is
        closed has died (_RankGone)."""
        for process in self._supervisor.processes:
            if ranks is not None and process.rank not in ranks:
                continue
            try:
                send_message(process.channel, command)
            except (BrokenPipeError, ConnectionResetError):
                raise _RankGone(process.rank) from None
            if sent is not None:
                sent.append(process.rank)

    def _take_queued_events(self) -> None:
        """Handle what happened since the last command: above all, ranks that ended."""
        while self._next_event(time.monotonic()) is not None:
            pass

    def _died_between_commands(self, gone: int | None = None) -> RankCrashed:
        """A one-line error for ranks that died while no command ran (`gone`: one whose channel was
        found closed); the cluster is shut down, and what the dead ranks printed since the last
        command (a fault handler's dump) is shown."""
        deadline = time.monotonic() + EXIT_NEWS_S  # a closed channel: its exit is on the way
        while not self._supervisor.exits and time.monotonic() < deadline:
            self._next_event(deadline)
        time.sleep(0.2)  # let the rest of the news arrive
        self._take_queued_events()
        crashed: dict[int, int | None] = dict(sorted(self._supervisor.exits.items())) or {gone: None}
        self._teardown()  # after this every rank counts as exited: `crashed` was read before
        dead = list(crashed)
        print_in_rank_order([RankOutput(r, self._supervisor.outputs[r].lines[self._ended_at[r]:]) for r in dead])

        def how_it_ended(code: int | None) -> str:
            return "its exit status did not arrive" if code is None else exit_with_cause(code)

        if len(dead) == 1:
            who, how = f"rank {dead[0]}", how_it_ended(crashed[dead[0]])
        else:
            who = f"ranks {', '.join(map(str, dead))}"
            how = "; ".join(f"rank {rank}: {how_it_ended(code)}" for rank, code in crashed.items())
        failures = {r: RankFailure(r, "crashed", f"died between cells ({how_it_ended(code)})", returncode=code)
                    for r, code in crashed.items()}
        return RankCrashed(f"{who} of {self.nprocs} died between cells ({how}); the cluster was shut down: "
                           f"{RESTART}", failures, dead[0], [o.text() for o in self._supervisor.outputs],
                           headline_only=True)

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

    def _collect(self, command_id: int, timeout: float | None, running: list[int], replies: dict[int, dict],
                 marks: dict[int, set], interrupted: bool = False) -> LaunchError | None:
        """Wait until every rank in `running` replied and its output is complete (filling `replies`, `marks`).

        Returns None, or the error to raise: ranks that raised (the cluster lives on), a crash, or
        ranks still running at the watchdog (`timeout`). After an interrupt, ranks still running at
        `timeout` give _STILL_RUNNING instead (the caller decides).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        failed_at = None
        while not all(rank in replies and len(marks[rank]) == 2 for rank in running):
            if self._supervisor.exits:
                return self._crashed()
            limit = min(t for t in (deadline, failed_at and failed_at + AFTER_FAILURE_S, float("inf")) if t)
            if time.monotonic() >= limit:
                if interrupted:
                    return _STILL_RUNNING
                return self._stuck(replies, timeout, failed_at is not None, running)
            event = self._next_event(None if limit == float("inf") else limit)
            if event is None:
                continue
            kind, rank, value = event
            if kind == "reply" and value["id"] == command_id:
                replies[rank] = value
                if not value["ok"] and failed_at is None:
                    failed_at = time.monotonic()
            elif kind == "mark" and value[1] == command_id:
                marks[rank].add(value[0])
        failures = {r: raised_failure(r, reply, self._names) for r, reply in replies.items() if not reply["ok"]}
        if not failures:
            return None
        first = min(failures)
        count = f"rank {first}" if len(failures) == 1 else f"{len(failures)} ranks ({', '.join(map(str, failures))})"
        return RankFailed(f"{count} of {self.nprocs} raised; the cluster is still running.",
                          failures, first, [o.text() for o in self._supervisor.outputs])

    def _interrupt(self, command_id: int, running: list[int], replies: dict[int, dict], marks: dict[int, set],
                   starts: list[int], show: list[int] | None) -> None:
        """Jupyter's stop button during a command: a KeyboardInterrupt in every rank still running it.

        `running`: the ranks the command was sent to (all it was meant for, unless the interrupt
        came while it was being sent).

        Each rank's cell raises KeyboardInterrupt where it is (rank_loop.py: between commands a
        rank ignores SIGINT), and the ranks, their variables and their process group stay. A rank
        that does not stop within INTERRUPT_GRACE_S is blocked in C++ code, most likely a collective
        whose peers were interrupted before they joined it: then the cluster is shut down. A rank
        left alone in a collective (every other rank is out of the command) cannot finish it, so
        it is not waited for. Raises KeyboardInterrupt either way, after one line per rank.
        """
        __tracebackhide__ = True
        for process in self._supervisor.processes:
            if process.rank in running and process.rank not in replies:
                process.send_signal(signal.SIGINT)
        grace_ends = time.monotonic() + INTERRUPT_GRACE_S
        try:
            while True:
                step = max(0.0, min(INTERRUPT_CHECK_S, grace_ends - time.monotonic()))
                problem = self._collect(command_id, step, running, replies, marks, interrupted=True)
                if problem is not _STILL_RUNNING:
                    break
                waiting = [r for r in running if r not in replies]
                stacks = read_stacks(self._supervisor, self._workdir, waiting)
                alone_in_a_collective = len(waiting) == 1 and waiting_in(stacks.get(waiting[0], "")) == "collective"
                if alone_in_a_collective or time.monotonic() >= grace_ends:
                    problem = self._still_running_after_interrupt(stacks, time.monotonic() - grace_ends
                                                                  + INTERRUPT_GRACE_S)
                    break
        except KeyboardInterrupt:  # pressed again before the ranks stopped: none can be trusted
            self._teardown()
            self._print_new(starts, show)
            print(f"ddp_lab: interrupted twice. {FRESH_START}", file=sys.stderr)
            raise
        self._ended_at = [len(output.lines) for output in self._supervisor.outputs]
        self._print_new(starts, show)
        if self._closed:
            print(f"ddp_lab: {problem}", file=sys.stderr)
            raise KeyboardInterrupt
        for rank in running:
            print(f"[rank {rank}] {_interrupted_where(replies[rank], self._names)}", file=sys.stderr)
        print("ddp_lab: interrupted; the cluster keeps its ranks and their variables.", file=sys.stderr)
        raise KeyboardInterrupt

    def _still_running_after_interrupt(self, stacks: dict[int, str], seconds: float) -> LaunchError:
        """Ranks that did not stop after an interrupt (their `stacks`): one line, and the cluster shut down."""
        waiting = sorted(stacks)
        calls = sorted({blocked_in(stack) for stack in stacks.values() if blocked_in(stack)})
        where = (f"in {', '.join(calls)}, waiting for ranks that were interrupted before they joined it" if calls
                 else "in C++ code, where Python cannot interrupt it")
        failures = {r: RankFailure(r, "timeout", "was still running; its Python stack",
                                   rename_cells(stack, self._names)) for r, stack in stacks.items()}
        self._teardown()
        return LaunchTimeout(f"rank(s) {_listed(waiting)} of {self.nprocs} still running {seconds:.1f}s after the "
                             f"interrupt, {where}. {FRESH_START}", failures, min(waiting),
                             [o.text() for o in self._supervisor.outputs], headline_only=True)

    def _next_event(self, deadline: float | None):
        """Wait for one event; reports, exits and live lines are recorded by the supervisor."""
        wait = POLL_S if deadline is None else min(POLL_S, max(0.0, deadline - time.monotonic()))
        try:
            event = self._supervisor.events.get(timeout=wait)
        except queue.Empty:
            return None
        if event[0] in ("ready", "report", "exit", "line"):
            self._supervisor._handle(event)
        return event

    def _crashed(self) -> LaunchError:
        time.sleep(0.2)  # let the rest of the news arrive
        crashed = dict(self._supervisor.exits)
        self._teardown()
        failures = {r: RankFailure(r, "crashed", crash_summary(code), returncode=code) for r, code in crashed.items()}
        first = min(failures)
        return RankCrashed(f"rank {first} of {self.nprocs} died.", failures, first,
                           [o.text() for o in self._supervisor.outputs], FRESH_START)

    def _stuck(self, replies: dict, timeout: float | None, after_failure: bool, running: list[int]) -> LaunchError:
        waiting = [r for r in running if r not in replies]
        stacks = read_stacks(self._supervisor, self._workdir, waiting)
        left_out = [r for r in range(self.nprocs) if r not in running]
        if left_out and not after_failure and any(waiting_in(stack) == "collective" for stack in stacks.values()):
            return self._left_out(stacks, timeout, running, left_out)
        failures = {r: raised_failure(r, reply, self._names) for r, reply in replies.items() if not reply["ok"]}
        for rank, stack in stacks.items():
            failures[rank] = RankFailure(rank, "timeout", "was still running; its Python stack",
                                         rename_cells(stack, self._names))
        self._teardown()
        why = (f"{AFTER_FAILURE_S:g}s after another rank failed (probably waiting for it in a collective)"
               if after_failure else f"after timeout={timeout:g}s")
        cls = RankFailed if after_failure else LaunchTimeout
        first = min(r for r in failures if failures[r].kind != "timeout") if after_failure else min(stacks)
        return cls(f"rank(s) {', '.join(map(str, waiting))} of {self.nprocs} still running {why}.",
                   failures, first, [o.text() for o in self._supervisor.outputs],
                   f"{timeout_hint(stacks)} {FRESH_START}")

    def _left_out(self, stacks: dict[int, str], timeout: float | None, running: list[int],
                  left_out: list[int]) -> LaunchTimeout:
        """One line for an `only` cell stuck in a collective that the ranks it left out never joined.

        `.failures` keeps each stuck rank's stack.
        """
        failures = {r: RankFailure(r, "timeout", "was still running; its Python stack",
                                   rename_cells(stack, self._names)) for r, stack in stacks.items()}
        self._teardown()
        calls = sorted({blocked_in(stack) or "a collective" for stack in stacks.values()})
        return LaunchTimeout(
            f"rank(s) {_listed(stacks)} of {self.nprocs} waited {timeout:g}s in {', '.join(calls)}, which rank(s) "
            f"{_listed(left_out)} did not join: the cell ran on rank(s) {_listed(running)} only (--only / only=), "
            "and a collective on the default group needs every rank. Drop --only to run the cell on every rank. "
            f"{FRESH_START}", failures, min(stacks), [o.text() for o in self._supervisor.outputs], headline_only=True)

    def _print_new(self, starts: list[int], show: list[int] | None) -> None:
        ranks = range(self.nprocs) if show is None else show
        print_in_rank_order([RankOutput(r, self._supervisor.outputs[r].lines[starts[r]:]) for r in ranks])


def _listed(ranks) -> str:
    return ", ".join(map(str, sorted(ranks)))


_FRAME = re.compile(r'^\s*(?:File "(?P<file>[^"]+)"|(?P<cell>Cell In\[\d+\])), (?P<rest>line \d+.*)$')


def _interrupted_where(reply: dict, names: dict[str, str]) -> str:
    """A rank's note after an interrupt: 'interrupted at Cell In[5], line 3, in <module>', or how it ended.

    The place is the innermost frame of the cell's own code (a notebook cell, `<ddp cell N>`),
    else the innermost frame outside ddp_lab's command loop (the signal handler's frame).
    """
    if reply["ok"]:
        return "had finished the cell"
    if reply["type"] != "KeyboardInterrupt":
        return f"raised {reply['type']}: {(reply['text'].splitlines() or [''])[0]}"
    frames = [(match["file"] or match["cell"], match["rest"]) for line in
              rename_cells(reply["traceback"], names).splitlines() if (match := _FRAME.match(line))]
    frames = [(where, rest) for where, rest in frames if where != cluster_rank.__file__]
    in_cells = [(where, rest) for where, rest in frames if where.startswith(("Cell In[", "<ddp cell"))]
    shown = (in_cells or frames)[-1:]
    return f"interrupted at {shown[0][0]}, {shown[0][1]}" if shown else "interrupted"

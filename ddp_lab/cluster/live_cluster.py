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
import sys
import time

from ddp_lab.cluster import rank_loop as cluster_rank
from ddp_lab.launcher.arguments import (check_env, check_nprocs, check_ranks, check_signature, check_threads,
                                       check_timeout, working_directory)
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
from ddp_lab.launcher.reports import build_error, raised_failure, read_stacks, timeout_hint
from ddp_lab.launcher.results import Results
from ddp_lab.launcher.supervisor import POLL_S, Supervisor
from ddp_lab.launcher.workdir import work_folder

PG_TIMEOUT_S = 1800.0  # the ranks' process-group timeout (torch's default for gloo); the watchdog acts first
AFTER_FAILURE_S = 5.0  # once a rank failed, how long the others get before they count as stuck
EXIT_NEWS_S = 2.0  # after a rank's channel closed: how long its exit status may take to arrive
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
        payload = build_payload(cluster_rank.serve, (), self.backend, threads_per_rank(self.nprocs, threads),
                                PG_TIMEOUT_S)
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

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"Cluster(nprocs={self.nprocs}, backend={self.backend!r}, {'alive' if self.alive else 'shut down'})"

    # -- commands -------------------------------------------------------------------------
    def run_code(self, source: str, *, timeout: float | None = None, show: list[int] | None = None,
                 filename: str | None = None) -> Results:
        """Run `source` on every rank in its namespace (`rank`, `world_size`, `torch`, `dist` predefined).

        Returns each rank's value of a final expression (None if there is none).
        """
        __tracebackhide__ = True
        command_id = next(self._ids)
        filename = filename or f"<ddp cell {command_id}>"
        return self._command({"kind": "exec", "source": source, "filename": filename}, command_id, timeout, show)

    def run(self, fn, *args, timeout: float | None = None, show: list[int] | None = None) -> Results:
        """Call `fn(rank, *args)` on every rank of the running cluster; return every rank's value."""
        __tracebackhide__ = True
        check_signature(fn, args)
        command = {"kind": "call", "fn": pack_function(fn), "args": pack_arguments(args)}
        return self._command(command, next(self._ids), timeout, show)

    def pull(self, name: str, timeout: float | None = None) -> list:
        """Bring variable `name` from every rank's namespace back: a list indexed by rank."""
        __tracebackhide__ = True
        return list(self._command({"kind": "pull", "name": name}, next(self._ids), timeout, show=[]))

    def _command(self, command: dict, command_id: int, timeout: float | None, show: list[int] | None) -> Results:
        __tracebackhide__ = True
        if self._closed:
            raise RuntimeError(f"this cluster was shut down: {RESTART}")
        check_timeout(timeout)
        if show is not None:
            check_ranks(show, self.nprocs, prefix=f"show={show!r}: ")
        timeout = self.timeout if timeout is None else timeout
        self._take_queued_events()
        if self._supervisor.exits:  # a rank died since the last command (killed, out of memory, a thread's exit)
            raise self._died_between_commands() from None
        starts = [len(output.lines) for output in self._supervisor.outputs]
        try:
            self._send_to_every_rank({**command, "id": command_id})
            replies, problem = self._collect(command_id, timeout)
        except KeyboardInterrupt:  # ranks may be mid-collective, so none can be trusted
            self._teardown()
            self._print_new(starts, show)
            print(f"ddp_lab: interrupted. {FRESH_START}", file=sys.stderr)
            raise
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
        return Results([pickle.loads(replies[r]["value"]) for r in range(self.nprocs)],
                       [RankOutput(r, o.lines[starts[r]:]).text() for r, o in enumerate(self._supervisor.outputs)],
                       self.backend, [])

    def _send_to_every_rank(self, command: dict) -> None:
        """Send a command to each rank; a rank whose channel is closed has died (_RankGone)."""
        for process in self._supervisor.processes:
            try:
                send_message(process.channel, command)
            except (BrokenPipeError, ConnectionResetError):
                raise _RankGone(process.rank) from None

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

    def _collect(self, command_id: int, timeout: float | None) -> tuple[dict, LaunchError | None]:
        replies: dict[int, dict] = {}
        marks: dict[int, set] = {rank: set() for rank in range(self.nprocs)}
        deadline = None if timeout is None else time.monotonic() + timeout
        failed_at = None
        while not all(rank in replies and len(marks[rank]) == 2 for rank in range(self.nprocs)):
            if self._supervisor.exits:
                return replies, self._crashed()
            limit = min(t for t in (deadline, failed_at and failed_at + AFTER_FAILURE_S, float("inf")) if t)
            if time.monotonic() >= limit:
                return replies, self._stuck(replies, timeout, failed_at is not None)
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
            return replies, None
        first = min(failures)
        count = f"rank {first}" if len(failures) == 1 else f"{len(failures)} ranks ({', '.join(map(str, failures))})"
        return replies, RankFailed(f"{count} of {self.nprocs} raised; the cluster is still running.",
                                   failures, first, [o.text() for o in self._supervisor.outputs])

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

    def _stuck(self, replies: dict, timeout: float | None, after_failure: bool) -> LaunchError:
        waiting = [r for r in range(self.nprocs) if r not in replies]
        stacks = read_stacks(self._supervisor, self._workdir, waiting)
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

    def _print_new(self, starts: list[int], show: list[int] | None) -> None:
        ranks = range(self.nprocs) if show is None else show
        print_in_rank_order([RankOutput(r, self._supervisor.outputs[r].lines[starts[r]:]) for r in ranks])


"""Watching the ranks of one rank group: reports, exits, output, the first failure, the watchdog.

Threads turn everything that happens into events on one queue — a line of output (or a new
state of a progress line), a rank's report (its result or its exception), a process exit —
and `Supervisor.watch` (or `next_event`, one at a time) handles them in the launcher's
thread, so all decisions are made in one place: every rank returned; a rank failed (wait a
moment for the others to report, then stop the rest); or the deadline passed. The
`RankGroup` (rank_group.py) that owns the group's life is the only user of this class.

Introduced in notebooks/00-welcome-and-first-launch.ipynb ("How launch works").
"""

from __future__ import annotations

import os
import queue
import socket
import threading
import time

from ddp_lab.launcher.channel import OUTPUT_MARK, RELEASE, receive_message
from ddp_lab.launcher.interrupts import interrupts_held
from ddp_lab.launcher.output import RankOutput, is_torch_log_noise, print_line, start_readers
from ddp_lab.launcher.procstart import stop_ranks
from ddp_lab.launcher.progress import LiveLines, visible_text
from ddp_lab.launcher.rankprocess import RankProcess

STARTUP_S = 120.0  # time allowed to start the interpreters and the process group
GATHER_S = 0.5  # after a first failure, how long other ranks get to report theirs
POLL_S = 0.25  # longest uninterrupted wait of the launcher
EXIT_WAIT_S = 10.0  # how long a released rank may take to exit before it is killed
READER_WAIT_S = 1.0  # how long output pipes may stay open once the ranks and their sessions ended
CUT_OFF = ("ddp_lab: output cut off at the rank's end: a process it started in a session of its own still "
           "writes here; end such processes before fn returns.\n")


class Supervisor:
    """Collects what the ranks of one launch report, and ends them when the time comes."""

    def __init__(self, nprocs: int, stream: bool = False, live: LiveLines | None = None):
        self.nprocs = nprocs
        self.stream = stream
        self.live = live  # where lines being rewritten with '\r' are shown while the ranks run
        # called in the waiting thread after every wait for events while set (a line arriving ends the wait): a live
        # cluster's streamed command prints the lines that arrived (live_cluster.Cluster.run_code's `stream`)
        self.on_lines = None
        self.events: queue.Queue = queue.Queue()
        self.outputs = [RankOutput(rank) for rank in range(nprocs)]
        self.processes: list[RankProcess] = []
        self.reports: dict[int, dict] = {}
        self.exits: dict[int, int] = {}
        self.ready: set[int] = set()  # ranks that finished set-up and entered fn
        self.failed: list[int] = []  # ranks in the order their failures were seen
        self.still_running: list[int] = []  # ranks stopped by ddp_lab (failure or timeout)
        self._readers: dict[int, threading.Thread] = {}   # rank -> the thread reading its stdout and stderr
        self._followers: list[threading.Thread] = []
        self._stop_readers: tuple[int, int] | None = None  # a pipe: written to when readers must stop
        self._finished = False

    def add(self, process: RankProcess) -> None:
        """Start watching a started rank: its two output pipes and its control channel."""
        if self._stop_readers is None:
            self._stop_readers = os.pipe()
        self.processes.append(process)
        self._readers[process.rank] = start_readers(
            [(process.stdout_fd, "stdout"), (process.stderr_fd, "stderr")], process.rank, self._on_line,
            self._stop_readers[0], self._on_progress)
        follower = threading.Thread(target=self._follow, args=(process,), daemon=True,
                                    name=f"ddp_lab-rank{process.rank}-channel")
        follower.start()
        self._followers.append(follower)

    def process_of(self, rank: int) -> RankProcess | None:
        """The process of `rank` (None if it never started)."""
        return next((process for process in self.processes if process.rank == rank), None)

    def _on_line(self, rank: int, stream: str, line: str) -> None:
        """A line from a reader thread; one rewritten with '\r' is kept as it ends (progress.visible_text)."""
        at = line.find(OUTPUT_MARK)
        if at >= 0 and line.endswith("\n"):  # a command's end, after any unfinished line (print(..., end=""))
            if at > 0:
                self._on_line(rank, stream, line[:at])
            self.events.put(("mark", rank, (stream, int(line[at + len(OUTPUT_MARK):]))))
            return
        if "\r" in line:
            line = visible_text(line)
            if self.live is not None:
                self.events.put(("progress", rank, (stream, None)))  # no longer live: printed as a line
        if not line or is_torch_log_noise(stream, line):
            return
        self.outputs[rank].lines.append((stream, line))
        if self.stream or self.on_lines is not None:
            self.events.put(("line", rank, (stream, line)))

    def _on_progress(self, rank: int, stream: str, text: str) -> None:
        """A new state of a line a rank is rewriting with '\r', from a reader thread."""
        if self.live is not None:
            self.events.put(("progress", rank, (stream, text)))

    def _follow(self, process: RankProcess) -> None:
        while True:
            try:
                message = receive_message(process.channel)
            except (OSError, EOFError, ValueError):
                message = None
            if message is None:
                break
            kind = message["kind"]
            self.events.put((kind if kind in ("ready", "reply") else "report", process.rank, message))
            if kind not in ("ready", "reply"):
                break
        self.events.put(("exit", process.rank, process.wait()))

    def next_event(self, wait: float):
        """Wait at most `wait` seconds for one event and handle it; return it (None if none came).

        Reports, exits, ready notes and lines are recorded here; the live display of progress
        lines is refreshed after every wait.
        """
        try:
            event = self.events.get(timeout=max(0.0, wait))
        except queue.Empty:
            event = None
        if event is not None:
            self._handle(event)
        if self.live is not None:
            self.live.refresh()
        if self.on_lines is not None:
            self.on_lines()
        return event

    def _handle(self, event) -> None:
        kind, rank, value = event
        if kind == "line":
            if self.stream:
                print_line(rank, *value)
        elif kind == "progress":
            if self.live is not None:
                self.live.update(rank, *value)
        elif kind == "ready":
            self.ready.add(rank)
        elif kind == "report":
            self.reports[rank] = value
            if value["kind"] != "returned":
                self.failed.append(rank)
        elif kind == "exit":
            self.exits[rank] = value
            if rank not in self.reports:
                self.failed.append(rank)

    def _settled(self) -> bool:
        """Every rank has reported or ended."""
        return all(rank in self.reports or rank in self.exits for rank in range(self.nprocs))

    def watch(self, timeout: float | None) -> str:
        """Handle events until all ranks returned ('ok'), one failed ('failed') or time ran out ('timeout').

        The watchdog gives fn `timeout` seconds from the moment the last rank entered it;
        starting the interpreters and the process group gets STARTUP_S on top, so a busy
        machine that starts ranks slowly does not eat into fn's time.
        """
        first_failure_at = fn_deadline = None
        startup_deadline = None if timeout is None else time.monotonic() + STARTUP_S + timeout
        while True:
            if self.failed and first_failure_at is None:
                first_failure_at = time.monotonic()
            if self._settled():
                return "failed" if self.failed else "ok"
            if timeout is not None and fn_deadline is None and len(self.ready) == self.nprocs:
                fn_deadline = time.monotonic() + timeout
            deadline = fn_deadline or startup_deadline
            limits = [t for t in (deadline, first_failure_at and first_failure_at + GATHER_S) if t]
            wait = min(limits) - time.monotonic() if limits else POLL_S
            if wait <= 0:
                return "failed" if self.failed else "timeout"
            # Short waits: an interrupt that is not a real signal (_thread.interrupt_main,
            # some notebook front-ends) is only seen between waits.
            self.next_event(min(wait, POLL_S))

    def running(self) -> list[RankProcess]:
        """Ranks that neither reported nor ended."""
        return [p for p in self.processes if p.rank not in self.reports and p.rank not in self.exits]

    def finish(self) -> None:
        """Release ranks that reported, stop the rest, collect all output, close; idempotent.

        Runs to its end whatever the stop button does meanwhile (interrupts_held).
        """
        if self._finished:
            return
        with interrupts_held():
            self._end_ranks()
            self._end_readers()
            self._end_followers()
            self._drain()
            if self.live is not None:
                self.live.close()
            for process in self.processes:
                self.exits.setdefault(process.rank, process.returncode)
                process.close()
            if self._stop_readers is not None:
                for fd in self._stop_readers:
                    os.close(fd)
            self._finished = True

    def _end_ranks(self) -> None:
        """Stop ranks still running, release those that reported; return once all have ended."""
        self.still_running = sorted(set(self.still_running) | {p.rank for p in self.running()})
        stop_ranks(self.running(), grace=1.0)
        for process in self.processes:
            try:
                process.channel.sendall(RELEASE)
            except OSError:
                pass
        deadline = time.monotonic() + EXIT_WAIT_S
        slow = [p for p in self.processes if p.wait(max(0.0, deadline - time.monotonic())) is None]
        stop_ranks(slow, grace=0.5)

    def _end_followers(self) -> None:
        """Each follower ends at its channel's EOF; a channel that a rank's child (a fork that
        left its session) still holds is shut down, so that no thread reads it after close."""
        deadline = time.monotonic() + READER_WAIT_S
        for follower in self._followers:
            follower.join(max(0.0, deadline - time.monotonic()))
        for process, follower in zip(self.processes, self._followers):
            if follower.is_alive():
                try:
                    process.channel.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                follower.join()

    def _end_readers(self) -> None:
        """Wait until every output pipe is at EOF; one still open READER_WAIT_S after the ranks
        and their sessions ended is held by a process outside them: cut it off, say so."""
        deadline = time.monotonic() + READER_WAIT_S
        for thread in self._readers.values():
            thread.join(max(0.0, deadline - time.monotonic()))
        held_open = [rank for rank, thread in self._readers.items() if thread.is_alive()]
        if held_open:
            os.write(self._stop_readers[1], b"x")
        for rank in held_open:
            self._readers[rank].join()  # ends after reading what the pipes hold now
            self._on_line(rank, "stderr", CUT_OFF)

    def _drain(self) -> None:
        """Handle events still queued (late reports, exits, streamed lines)."""
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                break
            kind, rank, _ = event
            if kind == "exit" and rank not in self.reports and rank in self.still_running:
                self.exits[rank] = event[2]  # stopped by us: not a failure of its own
                continue
            self._handle(event)

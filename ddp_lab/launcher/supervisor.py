"""Watching the ranks of one launch: reports, exits, output, the first failure, the watchdog.

Threads turn everything that happens into events on one queue — a line of output, a
rank's report (its result or its exception), a process exit — and `Supervisor.watch`
handles them one at a time in the launcher's thread, so all decisions are made in one
place: every rank returned; a rank failed (wait a moment for the others to report, then
stop the rest); or the deadline passed.

Introduced in notebooks/00-welcome-and-first-launch.ipynb ("How launch works").
"""

from __future__ import annotations

import queue
import threading
import time

from ddp_lab.launcher.channel import RELEASE, receive_message
from ddp_lab.launcher.output import RankOutput, print_line, start_reader
from ddp_lab.launcher.procstart import stop_ranks
from ddp_lab.launcher.rankprocess import RankProcess
from ddp_lab.launcher.worker import OUTPUT_MARK

STARTUP_S = 120.0  # time allowed to start the interpreters and the process group
GATHER_S = 0.5
POLL_S = 0.25  # longest uninterrupted wait of the launcher  # after a first failure, how long other ranks get to report theirs
EXIT_WAIT_S = 10.0  # how long a released rank may take to exit before it is killed
READER_WAIT_S = 2.0  # how long to wait for output pipes to close once processes ended


class Supervisor:
    """Collects what the ranks of one launch report, and ends them when the time comes."""

    def __init__(self, nprocs: int, stream: bool = False):
        self.nprocs = nprocs
        self.stream = stream
        self.events: queue.Queue = queue.Queue()
        self.outputs = [RankOutput(rank) for rank in range(nprocs)]
        self.processes: list[RankProcess] = []
        self.reports: dict[int, dict] = {}
        self.exits: dict[int, int] = {}
        self.ready: set[int] = set()  # ranks that finished set-up and entered fn
        self.failed: list[int] = []  # ranks in the order their failures were seen
        self.still_running: list[int] = []  # ranks stopped by ddp_lab (failure or timeout)
        self._threads: list[threading.Thread] = []

    def add(self, process: RankProcess) -> None:
        """Start watching a started rank: its two output pipes and its control channel."""
        self.processes.append(process)
        for fd, stream in ((process.stdout_fd, "stdout"), (process.stderr_fd, "stderr")):
            self._threads.append(start_reader(fd, stream, process.rank, self._on_line))
        follower = threading.Thread(target=self._follow, args=(process,), daemon=True,
                                    name=f"ddp_lab-rank{process.rank}-channel")
        follower.start()
        self._threads.append(follower)

    def _on_line(self, rank: int, stream: str, line: str) -> None:
        if line.startswith(OUTPUT_MARK):
            self.events.put(("mark", rank, (stream, int(line[len(OUTPUT_MARK):]))))
            return
        self.outputs[rank].lines.append((stream, line))
        if self.stream:
            self.events.put(("line", rank, (stream, line)))

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

    def _handle(self, event) -> None:
        kind, rank, value = event
        if kind == "line":
            print_line(rank, *value)
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
            try:
                # Short waits: an interrupt that is not a real signal (_thread.interrupt_main,
                # some notebook front-ends) is only seen between waits.
                self._handle(self.events.get(timeout=min(wait, POLL_S)))
            except queue.Empty:
                pass

    def running(self) -> list[RankProcess]:
        """Ranks that neither reported nor ended."""
        return [p for p in self.processes if p.rank not in self.reports and p.rank not in self.exits]

    def finish(self) -> None:
        """Release ranks that reported, stop the rest, wait for all output; idempotent."""
        self.still_running = sorted(set(self.still_running) | {p.rank for p in self.running()})
        stop_ranks(self.running(), grace=1.0)
        for process in self.processes:
            try:
                process.channel.sendall(RELEASE)
            except OSError:
                pass
        for process in self.processes:
            if process.wait(EXIT_WAIT_S) is None:
                stop_ranks([process], grace=0.5)
        deadline = time.monotonic() + READER_WAIT_S
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._drain()
        for process in self.processes:
            self.exits.setdefault(process.rank, process.returncode)
        for process in self.processes:
            process.close()

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

"""One rank group's life, from start to stop: what both `launch()` and the live cluster drive.

A `RankGroup` starts N ranks (a private work folder for the payload and the stacks files, the
rendezvous store, the processes), watches them (a `Supervisor`'s threads turn what they do into
events, handled one at a time in the caller's thread), asks stuck ones where they are (their
Python stacks), turns what went wrong into one exception (reports.py: the hang report, the crash
report, a launch's error) and stops them, freeing everything. `launch()` runs a function once
(`watch` until every rank returned, one failed, or the watchdog fired); a live cluster keeps the
group between cells and sends commands (`send`, `next_event`). Neither reaches past this class.

Introduced in notebooks/00-welcome-and-first-launch.ipynb ("How launch works"); the live cluster
in notebooks/00b-live-cluster.ipynb.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import time
from pathlib import Path

from ddp_lab.launcher.channel import send_message
from ddp_lab.launcher.errors import LaunchError, RankCrashed
from ddp_lab.launcher.output import RankOutput
from ddp_lab.launcher.procstart import rank_environment, start_rank_processes, stop_ranks
from ddp_lab.launcher.progress import LiveLines
from ddp_lab.launcher.rankprocess import RankProcess
from ddp_lab.launcher.rendezvous import loopback_store
from ddp_lab.launcher.reports import build_error, crash_report, hang_report
from ddp_lab.launcher.stacks import read_stacks, stacks_path
from ddp_lab.launcher.supervisor import POLL_S, Supervisor
from ddp_lab.launcher.workdir import PREFIX, open_private, work_folder

STARTUP_WAIT_S = 120.0  # a live cluster's start: time for the interpreters and the process group, plus its timeout


class RankGone(Exception):
    """A message could not be sent: the rank's end of its channel is closed (the rank died)."""

    def __init__(self, rank: int):
        super().__init__(rank)
        self.rank = rank


class RankGroup:
    """N ranks from start to stop; `with RankGroup(n) as group:` stops them at the end.

    Args:
        nprocs: number of ranks.
        stream: print each line of output as it arrives (else it is kept for the caller to print).
        live: where lines the ranks rewrite with '\\r' (progress bars) are shown while they run.
    """

    def __init__(self, nprocs: int, *, stream: bool = False, live: LiveLines | None = None):
        self.nprocs = nprocs
        self.workdir: str | None = None
        self._supervisor = Supervisor(nprocs, stream=stream, live=live)
        self._resources = contextlib.ExitStack()
        self.stopped = False

    # -- start ----------------------------------------------------------------------------
    def open_work_folder(self, prefix: str = PREFIX) -> str:
        """The group's private work folder (payload, stacks files, status records), made on first use."""
        if self.workdir is None:
            self.workdir = self._resources.enter_context(work_folder(prefix))
        return self.workdir

    def start(self, payload: dict, env: dict, pg_timeout: float) -> None:
        """Write the payload into the work folder, host the rendezvous store, start every rank."""
        self.open_work_folder()
        store_env = self._resources.enter_context(loopback_store(self.nprocs, pg_timeout))
        extra_env = {**store_env, **env}
        payload_path = Path(self.workdir, "payload.pkl")
        with open(payload_path, "wb", opener=open_private) as file:  # the cell's code: for the user's eyes only
            file.write(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))
        if payload["threads"]:
            extra_env = {"OMP_NUM_THREADS": str(payload["threads"]), **extra_env}
        ranks = range(self.nprocs)
        start_rank_processes([rank_environment(os.environ, rank, self.nprocs, extra_env) for rank in ranks],
                             str(payload_path), [str(stacks_path(self.workdir, rank)) for rank in ranks],
                             self._supervisor.add)

    def wait_until_ready(self, timeout: float | None, names: dict) -> None:
        """Wait until every rank has set up its process group (a live cluster's start); else stop
        them and raise the launch's error (a rank failed, or STARTUP_WAIT_S + timeout passed)."""
        deadline = time.monotonic() + STARTUP_WAIT_S + (timeout or 0)
        while len(self._supervisor.ready) < self.nprocs:
            if self._supervisor.failed or time.monotonic() > deadline:
                outcome = "failed" if self._supervisor.failed else "timeout"
                stacks = self.stacks() if outcome == "timeout" else {}
                self._supervisor.finish()
                raise self.error(outcome, stacks, names, timeout)
            self.next_event(deadline)

    # -- watch ----------------------------------------------------------------------------
    def watch(self, timeout: float | None) -> str:
        """Until every rank returned ('ok'), one failed ('failed') or the watchdog fired ('timeout')."""
        return self._supervisor.watch(timeout)

    def next_event(self, deadline: float | None = None):
        """Wait for one event (at most POLL_S, and not past `deadline`), handle it, return it (None: none came)."""
        wait = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
        return self._supervisor.next_event(wait)

    def take_queued_events(self) -> None:
        """Handle every event already waiting (above all, ranks that ended)."""
        while self._supervisor.next_event(0.0) is not None:
            pass

    def set_live(self, live: LiveLines | None, on_lines=None) -> None:
        """Show progress lines in `live` from now on (None: nowhere); call `on_lines()` in the waiting thread after
        every wait for events, a line of output arriving included (None: never)."""
        self._supervisor.live = live
        self._supervisor.on_lines = on_lines

    def process_of(self, rank: int) -> RankProcess | None:
        """The process of `rank` (None if it never started)."""
        return self._supervisor.process_of(rank)

    @property
    def live(self) -> LiveLines | None:
        return self._supervisor.live

    @property
    def processes(self) -> list[RankProcess]:
        return self._supervisor.processes

    @property
    def outputs(self) -> list[RankOutput]:
        return self._supervisor.outputs

    @property
    def reports(self) -> dict[int, dict]:
        return self._supervisor.reports

    @property
    def exits(self) -> dict[int, int]:
        return self._supervisor.exits

    def texts(self) -> list[str]:
        """Each rank's output so far, as one string."""
        return [output.text() for output in self._supervisor.outputs]

    # -- talk to the ranks --------------------------------------------------------------------
    def send(self, message: dict, ranks: list[int] | None = None, sent: list[int] | None = None) -> None:
        """Send `message` to each rank (or each of `ranks`), noting each in `sent`; RankGone if one has died."""
        for process in self._supervisor.processes:
            if ranks is not None and process.rank not in ranks:
                continue
            try:
                send_message(process.channel, message)
            except (BrokenPipeError, ConnectionResetError):
                raise RankGone(process.rank) from None
            if sent is not None:
                sent.append(process.rank)

    def interrupt(self, ranks: list[int]) -> None:
        """A KeyboardInterrupt in these ranks' Python code (SIGINT), as the stop button gives a kernel."""
        for process in self._supervisor.processes:
            if process.rank in ranks:
                process.send_signal(signal.SIGINT)

    # -- reports ----------------------------------------------------------------------------
    def stacks(self, ranks: list[int] | None = None) -> dict[int, str]:
        """Every still-running rank's (or just those of `ranks`) Python stacks, by rank."""
        running = [p for p in self._supervisor.running() if ranks is None or p.rank in ranks]
        return read_stacks(running, self.workdir)

    def error(self, outcome: str, stacks: dict[int, str], names: dict, timeout: float | None) -> LaunchError:
        """A launch's one exception for `outcome` ('failed' or 'timeout', with the stuck ranks' `stacks`)."""
        return build_error(self._supervisor, outcome, stacks, names, timeout)

    def hang_report(self, headline: str, stacks: dict[int, str], names: dict, **details) -> LaunchError:
        """reports.hang_report for these stuck ranks, with every rank's output so far."""
        return hang_report(headline, stacks, names, self.texts(), **details)

    def crash_report(self, headline: str, exits: dict[int, int | None], **details) -> RankCrashed:
        """reports.crash_report for these dead ranks, with every rank's output so far."""
        return crash_report(headline, exits, self.texts(), **details)

    # -- stop -------------------------------------------------------------------------------
    def stop(self, grace: float | None = None) -> None:
        """Stop every rank (after `grace` seconds of SIGTERM if given), collect all output, free
        the work folder and the store; idempotent. After it, every rank counts as exited."""
        if grace is not None:
            stop_ranks(self._supervisor.processes, grace=grace)
        self.stopped = True
        self._supervisor.finish()
        self._resources.close()

    def __enter__(self) -> "RankGroup":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

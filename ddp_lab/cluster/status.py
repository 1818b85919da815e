"""What each rank of a live cluster is doing, read without asking the rank (`Cluster.status`, `%ddp_status`).

A rank busy in a cell cannot answer a command until the cell ends, so nothing here goes through
its command loop. Each rank writes a small record (rank_loop.py calls `write_record`) into the
cluster's private work folder when a command starts and when it ends; the notebook reads the
records, and asks the operating system (psutil) whether each rank's process is alive and how
much memory it holds. A rank that has run its command for more than ASK_AFTER_S is also asked
for its Python stack the way the hang report asks (launcher/stacks.py: a signal, and faulthandler
writes the stack even from inside a C++ collective), to name the torch.distributed call it is
in (reports.blocked_in). That wait is bounded by STACK_WAIT_S: a rank that does not answer in
time is shown without it. Nothing here waits for a rank's command to end.

The same lines are shown from outside the kernel, by `python -m ddp_lab status` in a terminal
(`show_live_clusters`), for every live cluster of the user's kernels (found through
registry.py): a kernel busy in a stuck cell cannot run `%ddp_status` itself.

Introduced in notebooks/00b-live-cluster.ipynb.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from ddp_lab.cluster.registry import ListedCluster, live_clusters
from ddp_lab.launcher.errors import describe_exit
from ddp_lab.launcher.rankprocess import RankProcess
from ddp_lab.launcher.reports import blocked_in
from ddp_lab.launcher.stacks import line_in, read_stacks

_DOING = {"call": "running cluster.run(...)", "pull": "sending a variable back",
          "regroup": "making a new process group"}
ASK_AFTER_S = 0.5  # a rank that has run its command this long is asked for its stack (which collective)
STACK_WAIT_S = 0.4  # how long those ranks get to write it: with the read, status waits at most ~0.5 s


def record_path(folder: str, rank: int) -> Path:
    return Path(folder, f"status-{rank}.json")


def write_record(folder: str, rank: int, command: dict | None) -> None:
    """In a rank: record that it now runs `command` (None: idle), replacing the last record at once."""
    record = {"pid": os.getpid(), "since": time.time()}
    if command is not None:
        record.update(kind=command["kind"], id=command["id"], filename=command.get("filename"))
    path = record_path(folder, rank)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(record))
    os.replace(temporary, path)  # a reader sees the old record or the new one, never half of one


@dataclass
class RankStatus:
    """One rank as `%ddp_status` shows it.

    Attributes:
        rank, pid: the rank and its process id.
        alive: whether its process is running.
        doing: 'idle', 'running Cell In[7]', 'starting' (not yet in its command loop), ... ('' if dead).
        seconds: for how long it has been doing it (None when idle or unknown).
        rss: its resident memory in bytes (None if dead).
        ended: how a dead rank ended ('exit code 1', 'signal SIGKILL (9)'), else ''.
        collective: the torch.distributed call its stack shows it in ('all_reduce', 'barrier'), else ''
            (not in one, running for under ASK_AFTER_S, or it did not write its stack in time).
        cell_line: the line of the running cell that made that call (None if unknown).
    """

    rank: int
    pid: int
    alive: bool
    doing: str
    seconds: float | None
    rss: int | None
    ended: str = ""
    collective: str = ""
    cell_line: int | None = None

    def line(self) -> str:
        """'rank 1  pid 4242  alive  running Cell In[7] for 3.2 s, in all_reduce (line 4)  RSS 310 MB'."""
        head = f"rank {self.rank}  pid {self.pid}"
        if not self.alive:
            return f"{head}  dead" + (f" ({self.ended})" if self.ended else "")
        doing = self.doing + (f" for {self.seconds:.1f} s" if self.seconds is not None else "")
        if self.collective:
            doing += f", in {self.collective}" + (f" (line {self.cell_line})" if self.cell_line is not None else "")
        memory = f"  RSS {self.rss / 2**20:.0f} MB" if self.rss is not None else ""
        return f"{head}  alive  {doing}{memory}"


class StatusReport(list):
    """A list of RankStatus, shown as one line per rank (what `%ddp_status` displays)."""

    def __repr__(self) -> str:
        return "\n".join(status.line() for status in self)

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # IPython's display
        printer.text(repr(self))


def cluster_status(processes: list[RankProcess], exits: dict[int, int | None], folder: str,
                   names: dict[str, str]) -> StatusReport:
    """Every rank's status; ranks running a command for over ASK_AFTER_S also say which collective they are in.

    `exits`: the ranks known to have ended, with their exit status (None: how is unknown).
    """
    records = {p.rank: _read(record_path(folder, p.rank)) for p in processes}
    statuses = {p.rank: rank_status(p.rank, p.pid, p.rank in exits, exits.get(p.rank), records[p.rank], names)
                for p in processes}
    busy = [p for p in processes if statuses[p.rank].alive and (statuses[p.rank].seconds or 0) > ASK_AFTER_S]
    if busy:
        for rank, stack in read_stacks(busy, folder, wait=STACK_WAIT_S).items():
            status, filename = statuses[rank], records[rank].get("filename")
            status.collective = blocked_in(stack) or ""
            if status.collective and filename:
                status.cell_line = line_in(stack, filename)
    return StatusReport(statuses[p.rank] for p in processes)


def rank_status(rank: int, pid: int, ended: bool, exit_code: int | None, record: dict | None,
                names: dict[str, str]) -> RankStatus:
    """The status of one rank: its process from the system, what it does from its last `record`."""
    rss = None if ended else _rss(pid)
    if rss is None:
        return RankStatus(rank, pid, False, "", None, None, describe_exit(exit_code) if exit_code is not None else "")
    if record is None or record.get("pid") != pid:  # it has not reached its command loop yet
        return RankStatus(rank, pid, True, "starting", None, rss)
    if "kind" not in record:
        return RankStatus(rank, pid, True, "idle", None, rss)
    if record["kind"] == "exec":
        filename = record.get("filename") or f"command {record['id']}"
        doing = f"running {names.get(filename, filename)}"
    else:
        doing = _DOING.get(record["kind"], f"running a {record['kind']} command")
    return RankStatus(rank, pid, True, doing, max(0.0, time.time() - record["since"]), rss)


class _RankSeenFromOutside(RankProcess):
    """A rank of a cluster another process (a kernel) started: known by its pid, enough to ask for its stack."""

    def __init__(self, rank: int, pid: int, ended: bool):
        self.rank, self.pid = rank, pid
        self.returncode = 0 if ended else None  # an ended rank is never signalled (its pid may be another's now)


def listed_cluster_status(cluster: ListedCluster) -> StatusReport:
    """`cluster_status` for a cluster found by registry.live_clusters, from any process of the same user."""
    ended = {rank.rank: None for rank in cluster.ranks if not rank.running()}
    processes = [_RankSeenFromOutside(rank.rank, rank.pid, rank.rank in ended) for rank in cluster.ranks]
    return cluster_status(processes, ended, cluster.folder, cluster.names)


def show_live_clusters(temp_dir: str | None = None) -> int:
    """Print every live cluster of this user's kernels: a headline, then `%ddp_status`'s line per rank.

    What `python -m ddp_lab status` runs; it waits for no rank (see `cluster_status`). Returns
    the number of clusters shown.
    """
    clusters = live_clusters(temp_dir)
    if not clusters:
        print("no live cluster: no kernel of yours runs one now (a %%ddp cell or ddp_lab.Cluster(...) "
              f"starts one; looked in {temp_dir or tempfile.gettempdir()}).")
    for number, cluster in enumerate(clusters):
        print(("\n" if number else "") + cluster.headline(), flush=True)
        print(repr(listed_cluster_status(cluster)), flush=True)
    return len(clusters)


def _rss(pid: int) -> int | None:
    """The process's resident memory in bytes, or None if it is gone (or a zombie)."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return process.memory_info().rss
    except psutil.Error:
        return None


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None

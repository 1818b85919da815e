"""Live clusters found from outside their kernel: what `python -m ddp_lab status` lists.

A Jupyter kernel runs one cell at a time, so while a `%%ddp` cell is stuck nobody can run
`%ddp_status` in that kernel. Each live cluster therefore describes itself in a small file,
`cluster.json`, in its private work folder (launcher/workdir.py: `ddp_lab-cluster-XXXX/` in
the temp dir, readable by the user only): the kernel's pid and notebook, each rank's pid and
when its process started, and the names of the notebook's cells ("Cell In[7]"). The file is
written when the ranks are ready, rewritten when the cell names change, and removed at the
start of shutdown. Any process of the same user (a terminal) lists the folders and keeps
those whose owner still holds its lock (`workdir.owner_alive`), so the cluster of a kernel
that died is never listed, even before its folder is cleaned up.

Introduced in notebooks/00b-live-cluster.ipynb.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

import psutil

from ddp_lab.launcher.rankprocess import RankProcess
from ddp_lab.launcher.workdir import open_private, own_folders, owner_alive

CLUSTER_PREFIX = "ddp_lab-cluster-"  # a live cluster's work folder: ddp_lab-cluster-XXXX/ in the temp dir
ENTRY_NAME = "cluster.json"


def started_at(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), or None if there is none: with the pid,
    it names one process, never a later one that was given the same pid."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def same_process_runs(pid: int, started: float | None) -> bool:
    """Whether the process `pid` that started at `started` (None: unknown) still runs."""
    now = started_at(pid)
    return now is not None and (started is None or abs(now - started) < 0.01)


class Registration:
    """A live cluster's `cluster.json`, kept by the cluster (live_cluster.Cluster) while it runs.

    A failure to write it (a full disk) costs only the listing: the cluster runs on.
    """

    def __init__(self, folder: str, nprocs: int, backend: str, processes: list[RankProcess],
                 names: dict[str, str]):
        self.path = os.path.join(folder, ENTRY_NAME)
        self.entry = {"kernel_pid": os.getpid(), "kernel_started": started_at(os.getpid()),
                      "notebook": os.path.basename(os.environ.get("JPY_SESSION_NAME", "")) or None,
                      "nprocs": nprocs, "backend": backend, "started": time.time(),
                      "ranks": [{"rank": p.rank, "pid": p.pid, "started": started_at(p.pid)} for p in processes],
                      "names": dict(names)}
        self._write()

    def name_cells(self, names: dict[str, str]) -> None:
        """Rewrite the file if the cell names changed (a %%ddp cell registers its cell first)."""
        if names != self.entry["names"]:
            self.entry["names"] = dict(names)
            self._write()

    def remove(self) -> None:
        """Stop listing the cluster (it is being shut down)."""
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def _write(self) -> None:
        temporary = f"{self.path}.tmp"
        try:
            with open(temporary, "w", opener=open_private) as file:
                json.dump(self.entry, file)
            os.replace(temporary, self.path)  # a reader sees the old file or the new one, never half of one
        except OSError:
            pass


@dataclass
class ListedRank:
    """One rank of a listed cluster: its pid, and when that process started (None: unknown)."""

    rank: int
    pid: int
    started: float | None

    def running(self) -> bool:
        """Whether this rank's process still runs (the same process, not a later one with its pid)."""
        return same_process_runs(self.pid, self.started)


@dataclass
class ListedCluster:
    """A live cluster as `cluster.json` describes it (see the module docstring)."""

    folder: str
    kernel_pid: int
    notebook: str | None
    nprocs: int
    backend: str
    started: float
    ranks: list[ListedRank] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)

    def headline(self) -> str:
        """'cluster of 2 ranks (gloo), started by pid 4242 (00b-live-cluster.ipynb), up 3 min'.

        The pid is the kernel's (or a script's) that made the cluster; the notebook is shown where
        Jupyter told the kernel its name (JPY_SESSION_NAME).
        """
        notebook = f" ({self.notebook})" if self.notebook else ""
        up = max(0.0, time.time() - self.started)
        since = f"{up:.0f} s" if up < 120 else f"{up / 60:.0f} min"
        return (f"cluster of {self.nprocs} ranks ({self.backend}), started by pid {self.kernel_pid}{notebook}, "
                f"up {since}")


def live_clusters(temp_dir: str | None = None) -> list[ListedCluster]:
    """This user's live clusters, oldest first, from the work folders in `temp_dir` (default: the temp dir).

    A folder counts when its owner still holds its lock; where the file system has no lock, when
    the kernel process named in the file still runs. Folders being made or shut down (no
    cluster.json) and unreadable files are skipped.
    """
    found = [_read(path) for path in own_folders(CLUSTER_PREFIX, temp_dir)]
    return sorted((cluster for cluster in found if cluster is not None), key=lambda cluster: cluster.started)


def _read(folder: str) -> ListedCluster | None:
    """The cluster of `folder` if its kernel lives and its file reads, else None."""
    owner = owner_alive(folder)
    if owner is False:
        return None
    try:
        with open(os.path.join(folder, ENTRY_NAME)) as file:
            entry = json.load(file)
        kernel_pid = int(entry["kernel_pid"])
        if owner is None and not same_process_runs(kernel_pid, entry.get("kernel_started")):
            return None
        ranks = [ListedRank(int(r["rank"]), int(r["pid"]), r.get("started")) for r in entry["ranks"]]
        return ListedCluster(folder, kernel_pid, entry.get("notebook"), int(entry["nprocs"]), str(entry["backend"]),
                             float(entry["started"]), ranks, dict(entry.get("names") or {}))
    except (OSError, ValueError, KeyError, TypeError):
        return None

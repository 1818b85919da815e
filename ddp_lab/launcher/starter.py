"""The one thread that starts the launcher's child processes, so that they outlive the thread that asked.

Ranks and the zygote ask Linux to kill them when their parent dies (PR_SET_PDEATHSIG,
worker.die_with_parent), so that a dead kernel leaves nothing behind. But Linux counts the
*thread* that created the child as its parent (prctl(2): "the parent thread"): measured, a
`ddp_lab.Cluster` created in a thread (a background job, a widget's callback, a test) lost
its ranks as soon as that thread ended, and its next cell failed with a raw BrokenPipeError.
So every `subprocess.Popen` of the launcher runs here, in a daemon thread that lives as long
as the process; the caller waits for the started process (about a millisecond more).

Introduced in notebooks/00b-live-cluster.ipynb (the cluster's ranks live between cells).
"""

from __future__ import annotations

import os
import queue
import subprocess
import threading

from ddp_lab.launcher.interrupts import interrupts_held


class _Request:
    """One process to start: Popen's arguments in, the process (or Popen's exception) out."""

    def __init__(self, args: list[str], kwargs: dict):
        self.args, self.kwargs = args, kwargs
        self.process: subprocess.Popen | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()


_requests: queue.SimpleQueue = queue.SimpleQueue()
_thread: threading.Thread | None = None
_thread_lock = threading.Lock()


def _serve() -> None:
    while True:
        request = _requests.get()
        try:
            request.process = subprocess.Popen(request.args, **request.kwargs)
        except BaseException as error:  # noqa: BLE001 - handed to the caller, which raises it
            request.error = error
        request.done.set()


def _running_thread() -> None:
    global _thread
    with _thread_lock:
        if _thread is None:
            _thread = threading.Thread(target=_serve, daemon=True, name="ddp_lab-process-starter")
            _thread.start()


def _forget_thread_in_child() -> None:
    """A fork of this process (multiprocessing in the notebook) has no starter thread: it makes its own."""
    global _thread, _requests, _thread_lock
    _thread, _requests, _thread_lock = None, queue.SimpleQueue(), threading.Lock()


os.register_at_fork(after_in_child=_forget_thread_in_child)


def start_process(args: list[str], **popen_kwargs) -> subprocess.Popen:
    """`subprocess.Popen(args, **popen_kwargs)`, run in the starter thread; returns the started process.

    The stop button pressed meanwhile is raised once the process has started, after it was
    killed: a process nobody holds would run unwatched.
    """
    request = _Request(args, popen_kwargs)
    _running_thread()
    _requests.put(request)
    try:
        request.done.wait()
    except BaseException:  # KeyboardInterrupt while it starts
        with interrupts_held():
            request.done.wait()
            if request.process is not None:
                request.process.kill()
                request.process.wait()
        raise
    if request.error is not None:
        raise request.error
    return request.process

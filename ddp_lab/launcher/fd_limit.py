"""The notebook's file descriptors: a limit high enough for idle connections, and a plain error when they run out.

The launcher's rendezvous store (rendezvous.py) runs in the notebook's own process and, like
torchrun's, accepts any local connection: there is no authentication. Every connection it
accepts is a file descriptor of the notebook. Measured with the soft limit at 1,024 (the
default of many Linux desktops): 1,021 idle connections that another program opened to a
launch's store left the notebook unable to open a file ("[Errno 24] Too many open files")
while they lasted. The hard limit is usually far higher (20,000 on this project's machine,
524,288 under systemd), so the first store a process hosts raises the soft limit to
min(hard, 65,536) (`raise_open_files_limit`), as servers that hold many sockets do. Should
descriptors still run out, `launch()` and `ddp_lab.Cluster` say so in one line
(`one_line_if_out_of_fds`) instead of a traceback from deep inside, and a store is hosted
only with descriptors to spare (`require_free_fds`): measured on torch 2.13, creating the
(libuv) TCPStore with 1-3 descriptors left aborted the whole process (SIGABRT, no message),
with 4-8 left it raised "Failed to init uv loop" or a connect error.

Introduced in notebooks/00-welcome-and-first-launch.ipynb ("How launch works").
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource

WANTED_OPEN_FILES = 65536  # enough for 256 ranks' pipes and channels, and thousands of idle connections
_raised = False


def raise_open_files_limit() -> None:
    """Raise this process's soft RLIMIT_NOFILE to min(hard, WANTED_OPEN_FILES), once; never lower it."""
    global _raised
    if _raised:
        return
    _raised = True
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = WANTED_OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, WANTED_OPEN_FILES)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):  # a sandbox that refuses: the limit stays as it was
            pass


def fds_needed_by_a_launch(nprocs: int) -> int:
    """File descriptors a launch of `nprocs` ranks opens in the notebook, with room to spare: per rank two
    output pipes, a control channel and about three store connections; the store's own event loop."""
    return 32 + 6 * nprocs


def require_free_fds(count: int, doing: str) -> None:
    """Raise OSError(EMFILE) with a one-line message unless `count` more file descriptors can be opened now."""
    probes = []
    try:
        probes.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        for _ in range(count - 1):
            probes.append(os.dup(probes[0]))  # a cheaper system call than open
    except OSError as error:
        if error.errno != errno.EMFILE:
            raise
        for fd in probes:
            os.close(fd)
        probes.clear()
        raise OSError(errno.EMFILE, out_of_fds_message(doing)) from None
    finally:
        for fd in probes:
            os.close(fd)


def open_fd_count() -> int | None:
    """How many file descriptors this process has open (None where that cannot be read)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # the listing's own
    except OSError:
        return None


def out_of_fds_message(doing: str) -> str:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    count = open_fd_count()
    held = f"{count} open, limit {soft}" if count is not None else f"limit {soft}"
    return (f"the notebook has run out of file descriptors ({held}), so ddp_lab could not {doing}. Something "
            "holds them: files or sockets opened in the notebook and not closed, or connections that other "
            "programs keep open to a ddp_lab rendezvous store (it accepts any local connection, like torchrun's). "
            "Close them or restart the kernel; `ulimit -n` before starting Jupyter sets a higher limit.")


@contextlib.contextmanager
def one_line_if_out_of_fds(doing: str):
    """Turn '[Errno 24] Too many open files' raised in the block into one line that says what to do."""
    try:
        yield
    except OSError as error:
        if error.errno != errno.EMFILE:
            raise
        raise OSError(errno.EMFILE, out_of_fds_message(doing)) from None

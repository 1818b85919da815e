"""Work folders: where a launch keeps its files, private to the user and removed even when the kernel dies.

A launch (and a live cluster, and a torchrun job) keeps a folder `ddp_lab-XXXX/` in the
temp dir: the pickled function and arguments (`payload.pkl`, so the cell's source), the
ranks' stack dumps, torchrun's logs. The folder is 0700 (mkdtemp) and every file in it 0600
(`open_private`). A kernel that is killed (restart, out-of-memory killer) cannot remove its
folder, so each folder holds a lock for as long as its owner lives: `owner.lock`, locked
with flock(2), which the operating system releases when the owner's process ends however it
ends. The first work folder of every process (the next kernel's first launch) removes the
folders of the temp dir whose lock nobody holds (`remove_abandoned`). A folder of a live
kernel is never removed: its lock is held. pids play no part, so neither pid reuse nor
containers that share /tmp with pid namespaces of their own can make a live folder look
abandoned. Any process can ask the same lock whether a folder's owner still runs (`owner_alive`:
`python -m ddp_lab status` lists only the clusters of live kernels).

Introduced in notebooks/00-welcome-and-first-launch.ipynb ("How launch works").
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile

PREFIX = "ddp_lab-"
LOCK_NAME = "owner.lock"
_cleaned = False  # whether this process has looked for abandoned folders since it last left one behind


def open_private(path: str, flags: int) -> int:
    """An `opener` for open(): the file, if created, is readable and writable by the user only (0600)."""
    return os.open(path, flags | os.O_CLOEXEC, 0o600)


@contextlib.contextmanager
def work_folder(prefix: str = PREFIX):
    """A fresh private folder in the temp dir, locked by this process, removed at the end of the block.

    Yields its path. The first call of a process first removes abandoned folders (`remove_abandoned`).
    """
    global _cleaned
    if not _cleaned:
        remove_abandoned()
        _cleaned = True
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        lock = _hold_lock(path)
    except BaseException:  # out of file descriptors, say: the folder is still empty
        with contextlib.suppress(OSError):
            os.rmdir(path)  # rmtree would need a descriptor
        raise
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if lock is not None:
            os.close(lock)
        if os.path.exists(path):  # e.g. out of file descriptors: unlocked now, the next call removes it
            _cleaned = False


def _hold_lock(folder: str) -> int | None:
    """Create the folder's owner.lock already locked (a cleaner never sees it unlocked); its fd, or None.

    None where the file system has no flock (the folder then never counts as abandoned).
    """
    fresh = os.path.join(folder, f".{LOCK_NAME}.new")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        os.unlink(fresh)
        return None
    try:
        os.rename(fresh, os.path.join(folder, LOCK_NAME))
    except BaseException:
        os.close(fd)
        raise
    return fd


def remove_abandoned(folder: str | None = None) -> list[str]:
    """Remove this user's `ddp_lab-*` work folders in `folder` (default: the temp dir) whose owner has ended.

    A folder counts as abandoned when its owner.lock can be locked: the process that held it
    is gone. Folders without owner.lock (not made by this code) are left alone. Returns the
    paths removed.
    """
    return [path for path in own_folders(PREFIX, folder) if _remove_if_unlocked(path)]


def own_folders(prefix: str = PREFIX, folder: str | None = None) -> list[str]:
    """Paths of this user's folders named `prefix`... in `folder` (default: the temp dir); links are not followed."""
    try:
        entries = list(os.scandir(folder or tempfile.gettempdir()))
    except OSError:
        return []
    found = []
    for entry in entries:
        try:
            if (entry.name.startswith(prefix) and entry.is_dir(follow_symlinks=False)
                    and entry.stat(follow_symlinks=False).st_uid == os.getuid()):
                found.append(entry.path)
        except OSError:
            continue
    return found


def owner_alive(path: str) -> bool | None:
    """Whether the process that made work folder `path` still runs: its owner.lock is held.

    None when the folder has no owner.lock (a file system without flock, or a folder not made
    here): the lock cannot tell. Locking an abandoned folder's lock for a moment to find out is
    harmless; it is released at once, and the folder is left for `remove_abandoned`.
    """
    try:
        fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # held: its owner is alive
        return True
    except OSError:  # no flock here after all
        return None
    finally:
        os.close(fd)  # closing the only descriptor of a lock this process took releases it
    return False


def _remove_if_unlocked(path: str) -> bool:
    try:
        fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: its owner is alive
        os.close(fd)
        return False
    try:
        shutil.rmtree(path, ignore_errors=True)
    finally:
        os.close(fd)
    return not os.path.exists(path)

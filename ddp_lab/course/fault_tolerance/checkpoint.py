"""Checkpoints a crashed job can resume from: written atomically, with every RNG a rank draws from.

A resumed run equals one that never crashed only if the checkpoint holds *everything* the
next step depends on: the model, the optimizer state (momentum, Adam moments), where the
data stream stands (the sampler's epoch and the position in it), and the random number
generators (dropout masks come from them, and every rank has its own). And the file must
be complete whenever it exists: a rank killed while writing must not leave half a file
where the last good checkpoint was.

Introduced in notebooks/12-debugging-and-fault-tolerance.ipynb.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import torch


def atomic_save(obj, path: str | os.PathLike) -> None:
    """`torch.save(obj, path)` such that `path` is always either the old file or the new one, complete.

    Writes a temporary file in the same folder, flushes it to disk, then renames it over
    `path` with `os.replace`, which POSIX makes atomic: a process killed at any moment
    leaves the previous checkpoint intact (and at worst a stray temporary file; a save that
    raises removes its own).

    Example:
        >>> atomic_save({"step": 3}, "checkpoints/rank-0.pt")

    Introduced in notebooks/12-debugging-and-fault-tolerance.ipynb.
    """
    path = Path(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")  # same folder: same filesystem
    try:
        with open(partial, "wb") as file:
            torch.save(obj, file)
            file.flush()
            os.fsync(file.fileno())  # on disk before it gets the real name
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)  # a failed save leaves the old checkpoint and no debris
        raise


def capture_rng() -> dict:
    """The state of every random number generator this process draws from: Python's and torch's.

    CUDA generators are included when CUDA is already initialised (never initialised here).
    Restore it with `restore_rng`.

    Example:
        >>> state = capture_rng(); a = torch.rand(1); restore_rng(state); torch.equal(a, torch.rand(1))
        True

    Introduced in notebooks/12-debugging-and-fault-tolerance.ipynb.
    """
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    """Put back the generators `capture_rng` saved: the next random draws are the ones that would have come.

    Introduced in notebooks/12-debugging-and-fault-tolerance.ipynb.
    """
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])

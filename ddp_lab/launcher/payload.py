"""Packing a notebook function and its arguments so fresh processes can run them.

`torch.multiprocessing.spawn` pickles `fn` *by reference* ("__main__.hello"), which a
fresh interpreter cannot resolve for a function typed into a notebook cell. cloudpickle
ships functions, closures, lambdas and classes from `__main__` *by value* instead.

We also ship the source lines of notebook cells (IPython keeps them in `linecache`), so a
rank's traceback shows the offending line, and the map from the kernel's temporary cell
file names to "Cell In[n]", so tracebacks read like the notebook's own.
"""

from __future__ import annotations

import linecache
import os
import sys

import cloudpickle


def _why(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def pack_function(fn) -> bytes:
    """cloudpickle `fn`, or raise a TypeError that says what to change."""
    try:
        return cloudpickle.dumps(fn)
    except Exception as error:
        raise TypeError(
            f"fn={getattr(fn, '__qualname__', fn)!r} cannot be sent to the ranks: it (or something "
            f"it uses from the notebook) cannot be pickled ({_why(error)}). Create such objects "
            "(locks, open files, sockets, process groups, generators) inside fn instead of "
            "capturing them from the notebook."
        ) from error


def pack_arguments(args: tuple) -> bytes:
    """cloudpickle `args`, naming the first argument that cannot be pickled."""
    for index, value in enumerate(args):
        try:
            cloudpickle.dumps(value)
        except Exception as error:
            raise TypeError(
                f"args[{index}] ({type(value).__name__}) cannot be sent to the ranks: {_why(error)}. "
                "Pass plain data (numbers, strings, tensors, dicts of them) and build the object "
                "inside fn."
            ) from error
    return cloudpickle.dumps(tuple(args))


def build_payload(fn, args: tuple, backend: str | None, threads: int | None, pg_timeout: float) -> dict:
    """Everything a rank needs to run `fn(rank, *args)`: packed once, read by every rank."""
    return {
        "fn": pack_function(fn),
        "args": pack_arguments(tuple(args)),
        "sys_path": list(sys.path),
        "sources": notebook_sources(),
        "backend": backend,
        "threads": threads,
        "pg_timeout": pg_timeout,
    }


def unpack(payload: dict, *, replace_sys_path: bool) -> tuple:
    """In a rank: restore the notebook's import path and cell sources, then unpickle (fn, args).

    `replace_sys_path`: use exactly the notebook's sys.path (ddp_lab's ranks), or add its
    entries after the process's own (a script under torchrun).
    """
    from ddp_lab.launcher.keepalive import keep_destroyed_groups

    if replace_sys_path:
        sys.path[:] = payload["sys_path"]
    else:
        sys.path.extend(entry for entry in payload["sys_path"] if entry not in sys.path)
    for name, lines in payload["sources"].items():  # tracebacks show the notebook's lines
        linecache.cache[name] = (sum(map(len, lines)), None, lines, name)
    # Before fn is loaded, so that every destroy_process_group fn reaches keeps the group.
    # Costs a cold rank whose fn never uses torch 1.5 s of import; warm ranks have torch.
    keep_destroyed_groups()
    return cloudpickle.loads(payload["fn"]), cloudpickle.loads(payload["args"])


def notebook_sources() -> dict[str, list[str]]:
    """Source lines of code that exists only in memory (notebook cells), by file name."""
    return {
        name: entry[2]
        for name, entry in list(linecache.cache.items())
        if len(entry) == 4 and entry[2] and not os.path.exists(name)
    }


def cell_names() -> dict[str, str]:
    """{temporary cell file name: 'Cell In[n]'} when running under IPython, else {}."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython else None
    filename_map = getattr(getattr(shell, "compile", None), "_filename_map", None) or {}
    return {name: f"Cell In[{count}]" for name, count in filename_map.items()}


def rename_cells(text: str, names: dict[str, str]) -> str:
    """Replace `File "/tmp/ipykernel_123/456.py"` with `Cell In[7]` in a traceback."""
    for filename, label in names.items():
        text = text.replace(f'File "{filename}"', label).replace(filename, label)
    return text

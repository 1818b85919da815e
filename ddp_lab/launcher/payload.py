"""Packing a notebook function and its arguments so fresh processes can run them.

`torch.multiprocessing.spawn` pickles `fn` *by reference* ("__main__.hello"), which a
fresh interpreter cannot resolve for a function typed into a notebook cell. cloudpickle
ships functions, closures, lambdas and classes from `__main__` *by value* instead.

Objects that stand in for a module (torch.backends.cudnn, .mkldnn and .opt_einsum are
instances of module subclasses, which plain cloudpickle cannot pickle) travel by import name,
as modules do: a function that sets `torch.backends.cudnn.benchmark` ships.

The notebook's logging set-up travels too (the root logger's stream handlers, their formats
and levels, and the levels set on named loggers): `logging.basicConfig(level=logging.INFO)` in
the notebook makes the ranks' `log.info` lines show, as each process of a torchrun job shows
those of its own `basicConfig`. And each rank gets a `sys.argv` of its own, `[fn's name, *argv]`,
so an argparse-based `main()` parses what the launch passed (nothing by default) instead of the
process that started the rank.

We also ship the source lines of notebook cells (IPython keeps them in `linecache`), so a
rank's traceback shows the offending line, and the map from the kernel's temporary cell
file names to "Cell In[n]", so tracebacks read like the notebook's own.
"""

from __future__ import annotations

import importlib
import io
import linecache
import logging
import os
import re
import sys
import types

import cloudpickle

from ddp_lab.launcher.errors import ResultNotPicklable


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, plus module subclasses by import name.

    cloudpickle pickles a module by name only when its type is exactly `types.ModuleType`;
    torch replaces `torch.backends.cudnn` (and `.mkldnn`, `.opt_einsum`) in `sys.modules` with
    an instance of a subclass, which it would try to pickle by value and fail.
    """

    def reducer_override(self, obj):
        if isinstance(obj, types.ModuleType) and type(obj) is not types.ModuleType \
                and sys.modules.get(getattr(obj, "__name__", None)) is obj:
            return importlib.import_module, (obj.__name__,)
        return super().reducer_override(obj)


def dumps(obj) -> bytes:
    """Pickle `obj` for another process: functions, lambdas and notebook classes by value (cloudpickle).

    Every value that crosses between the notebook and its ranks goes through here; read it back
    with `pickle.loads` (or `cloudpickle.loads`, the same function).
    """
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
    return buffer.getvalue()


def _why(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def pack_function(fn) -> bytes:
    """cloudpickle `fn`, or raise a TypeError that says what to change."""
    try:
        return dumps(fn)
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
            dumps(value)
        except Exception as error:
            raise TypeError(
                f"args[{index}] ({type(value).__name__}) cannot be sent to the ranks: {_why(error)}. "
                "Pass plain data (numbers, strings, tensors, dicts of them) and build the object "
                "inside fn."
            ) from error
    return dumps(tuple(args))


def build_payload(fn, args: tuple, backend: str | None, threads: int | None, pg_timeout: float,
                  argv: list[str] | tuple[str, ...] = ()) -> dict:
    """Everything a rank needs to run `fn(rank, *args)`: packed once, read by every rank."""
    return {
        "fn": pack_function(fn),
        "args": pack_arguments(tuple(args)),
        "sys_path": list(sys.path),
        "sources": notebook_sources(),
        "logging": logging_setup(),
        "argv": [getattr(fn, "__name__", "fn"), *argv],
        "backend": backend,
        "threads": threads,
        "pg_timeout": pg_timeout,
    }


def logging_setup() -> dict:
    """What a rank needs to log as this process does: the root's stream handlers and the loggers' levels."""
    root = logging.getLogger()
    handlers = [{"stream": "stdout" if handler.stream is sys.stdout else "stderr", "level": handler.level,
                 "format": getattr(handler.formatter, "_fmt", None), "datefmt": getattr(handler.formatter, "datefmt", None),
                 "style": _format_style(handler.formatter)}
                for handler in root.handlers
                if type(handler) is logging.StreamHandler and handler.stream in (sys.stdout, sys.stderr)]
    levels = {name: logger.level for name, logger in list(logging.root.manager.loggerDict.items())
              if isinstance(logger, logging.Logger) and logger.level != logging.NOTSET}
    return {"root_level": root.level, "handlers": handlers, "levels": levels}


def _format_style(formatter: logging.Formatter | None) -> str:
    """'%', '{' or '$': the style a Formatter was made with (a formatter keeps only its style object)."""
    style = getattr(formatter, "_style", None)
    return next((key for key, cls in logging._STYLES.items() if type(style) is cls[0]), "%")


def apply_logging_setup(setup: dict) -> None:
    """In a rank: log as the notebook does (see `logging_setup`); a rank's own basicConfig still works after."""
    if not setup["handlers"]:
        return   # the notebook configured no logging: leave the rank's as a fresh process has it
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for spec in setup["handlers"]:
        handler = logging.StreamHandler(sys.stdout if spec["stream"] == "stdout" else sys.stderr)
        handler.setLevel(spec["level"])
        handler.setFormatter(logging.Formatter(spec["format"], spec["datefmt"], spec["style"]))
        root.addHandler(handler)
    root.setLevel(setup["root_level"])
    for name, level in setup["levels"].items():
        logging.getLogger(name).setLevel(level)


def unpack(payload: dict, *, replace_sys_path: bool) -> tuple:
    """In a rank: restore the notebook's import path and cell sources, then unpickle (fn, args).

    `replace_sys_path`: use exactly the notebook's sys.path (ddp_lab's ranks), or add its
    entries after the process's own (a script under torchrun).
    """
    from ddp_lab.launcher.keepalive import keep_destroyed_groups  # lazy: keepalive patches torch.distributed, needed only when a payload is unpacked in a rank

    if replace_sys_path:
        sys.path[:] = payload["sys_path"]
    else:
        sys.path.extend(entry for entry in payload["sys_path"] if entry not in sys.path)
    for name, lines in payload["sources"].items():  # tracebacks show the notebook's lines
        linecache.cache[name] = (sum(map(len, lines)), None, lines, name)
    if "logging" in payload:
        apply_logging_setup(payload["logging"])
    if "argv" in payload:   # ddp_lab's ranks; a script under torchrun keeps its own command line
        sys.argv[:] = payload["argv"]
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


def load_value(data: bytes, rank: int, after: str = ""):
    """A rank's pickled value, loaded in the notebook.

    A value the notebook cannot rebuild (an instance of a class from a module only the ranks import) raises
    ResultNotPicklable in one line naming the rank and why, not the loader's bare error; `after` ends that line
    (the live cluster's "the cluster is still running").
    """
    __tracebackhide__ = True
    try:
        return cloudpickle.loads(data)
    except Exception as error:  # noqa: BLE001 - whatever loading raises, the notebook is told which rank and why
        if isinstance(error, (ImportError, AttributeError)):   # a module, or a name in one, the notebook lacks
            why = ("what it is made of cannot be imported here. Return plain data (numbers, tensors, dicts of them), "
                   "or make that module importable in the notebook too")
        elif re.search(r"process group|init_process_group|CUDA|cuda|device", str(error)):
            why = ("rebuilding it needs what only the rank has (its process group, its device). Return plain data "
                   "made from it on the rank (numbers, tensors, a state_dict)")   # a DDP model: the default group
        else:
            why = "return plain data made from it on the rank (numbers, tensors, a state_dict)"
        raise ResultNotPicklable(
            f"rank {rank} sent back a value this notebook cannot load ({type(error).__name__}: {error}): {why}"
            f"{after}.", {}, rank, [], headline_only=True) from None

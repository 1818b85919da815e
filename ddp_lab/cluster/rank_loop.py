"""The command loop each rank of a live cluster runs (the rank side of `ddp_lab.Cluster`).

A rank keeps one namespace for its whole life, so models, optimizers and tensors made
in one `%%ddp` cell are there in the next. For every command it runs the code, then
writes an end-of-command mark on stdout and stderr (so the launcher knows it has all of
the command's output) and replies with the value or the exception. Around each command it
writes a status record (status.py), which `%ddp_status` reads without waiting for the rank.

Introduced in notebooks/00b-live-cluster.ipynb.
"""

from __future__ import annotations

import ast
import builtins
import datetime
import linecache
import os
import signal
import sys
import threading
import types

import cloudpickle

from ddp_lab.cluster.status import write_record
from ddp_lab.launcher.channel import OUTPUT_MARK, receive_message, send_message
from ddp_lab.launcher.payload import dumps
from ddp_lab.launcher.worker import control_channel, exception_report, flush_all_output


CELL_MODULE = "__ddp__"  # the module a %%ddp cell runs in, as a notebook cell runs in __main__
_in_command = False  # True while a command's code runs: only then does SIGINT interrupt it


def _interrupt_the_command(signum, frame) -> None:
    """SIGINT from the notebook (its stop button): a KeyboardInterrupt in the command's code, as in a kernel.

    Between commands it is ignored: the interrupt was meant for a command that has just ended,
    and the loop that waits for the next one must not die of it.
    """
    if _in_command:
        raise KeyboardInterrupt


def _interrupt_again_if_swallowed(unraisable) -> None:
    """sys.unraisablehook on a rank: where the stop button's KeyboardInterrupt landed inside a finalizer or a weakref
    callback (a `__del__`, matplotlib's transform callbacks; the garbage collector runs them between any two
    bytecodes of the cell), Python prints "Exception ignored in ..." and drops it, and the cell ran on. Here it is
    sent again, 10 ms later, from a thread, so that it lands in the cell's own code (or, by chance in another
    finalizer, comes back here). Any other unraisable exception goes to Python's hook."""
    if _in_command and isinstance(unraisable.exc_value, KeyboardInterrupt):
        threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGINT)).start()
        return
    sys.__unraisablehook__(unraisable)


def _run_source(source: str, filename: str, namespace: dict):
    """exec a cell like IPython does: the value of a final expression is returned.

    Compiled with `dont_inherit=True`: this module's `from __future__ import annotations` must
    not turn the cell's annotations into strings (a `@dataclass` in a cell would then look its
    field types up in a module it cannot find).
    """
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    tree = ast.parse(source, filename)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, filename, "exec", dont_inherit=True), namespace)
    if last is None:
        return None
    return eval(compile(ast.Expression(last.value), filename, "eval", dont_inherit=True), namespace)


def cell_namespace(rank: int, world_size: int) -> dict:
    """The namespace every %%ddp cell of this rank runs in: a real module, `__ddp__`, in sys.modules.

    Registered in sys.modules so that what looks a class up by its module works there
    (`dataclasses`, `typing.get_type_hints`, pickle); pickled by value (cloudpickle), as
    `__main__` is, so a cell's classes and their instances travel back to the notebook.
    """
    import torch  # lazy: a rank imports torch only once it runs (the zygote before forking); the notebook side stays torch-free
    import torch.distributed as dist  # lazy: a rank imports torch only once it runs (the zygote before forking); the notebook side stays torch-free

    module = types.ModuleType(CELL_MODULE)
    sys.modules[CELL_MODULE] = module
    cloudpickle.register_pickle_by_value(module)
    module.__dict__.update(rank=rank, world_size=world_size, torch=torch, dist=dist)
    builtins.display = display   # as IPython makes it a builtin: a notebook function run on the ranks finds it too
    return module.__dict__


def display(*objects, **options) -> None:
    """`display(...)` in a %%ddp cell, where a kernel's IPython display() is not (a rank has no display): a matplotlib
    figure is shown under the cell as a picture, as `plt.show()` shows it (rank_figures.py; a figure still open is
    shown again at the cell's end, as in a kernel); anything else is printed as a cell's final value is shown (its
    repr, `_display_text`; None too, as IPython shows it), in order with the rank's other prints. A display_id (a
    display updated in place later) is refused in one line; IPython's other options (`clear=`, ...) are ignored.
    Introduced in notebooks/00b-live-cluster.ipynb."""
    if options.get("display_id") not in (None, False):
        raise ValueError("display(..., display_id=...) on a rank: a %%ddp cell's output cannot be updated in place. "
                         "Print each new state instead, or use a progress bar (tqdm), which a %%ddp cell shows live.")
    for value in objects:
        if _is_figure(value):
            from ddp_lab.cluster import rank_figures  # lazy: it imports matplotlib, which a figure has already done

            rank_figures.take(value)
        else:
            print("None" if value is None else _display_text(value))


def _execute(rank: int, command: dict, namespace: dict):
    kind = command["kind"]
    if kind == "exec":
        return _run_source(command["source"], command["filename"], namespace)
    if kind == "call":
        fn, args = cloudpickle.loads(command["fn"]), cloudpickle.loads(command["args"])
        return fn(rank, *args)
    if kind == "regroup":
        return _regroup(rank, command)
    if kind == "pull":
        if command["name"] not in namespace:
            raise NameError(f"name {command['name']!r} is not defined on rank {rank}")
        return namespace[command["name"]]
    raise ValueError(f"unknown command {kind!r}")


def _regroup(rank: int, command: dict) -> None:
    """Give this rank a fresh default process group, on every rank at once (the "regroup" command).

    Sent by the notebook after a cell destroyed the default group on some rank (how most
    scripts end: `dist.destroy_process_group()`), so the next cell has one again. A group still
    alive here is destroyed first: every rank must join the same new one. The keys go under a
    prefix of their own on the launcher's store, away from the first group's.
    """

    import torch.distributed as dist  # lazy: a rank imports torch only once it runs (the zygote before forking); the notebook side stays torch-free

    from ddp_lab.launcher.rendezvous import own_store  # lazy: rendezvous imports torch at use; a rank loads it after its channel is up

    if dist.is_initialized():
        dist.destroy_process_group()
    timeout = datetime.timedelta(seconds=command["pg_timeout"])
    store = own_store(timeout)  # the rank's connection to the launcher's store: a new one costs a DNS lookup
    dist.init_process_group(command["backend"], store=dist.PrefixStore(f"ddp_lab/regroup/{command['id']}", store),
                            rank=rank, world_size=int(os.environ["WORLD_SIZE"]), timeout=timeout)


def _mark_end(command_id: int) -> None:
    flush_all_output()
    for fd in (1, 2):
        os.write(fd, f"{OUTPUT_MARK}{command_id}\n".encode())


def serve(rank: int, status_folder: str | None = None) -> None:
    """Run commands from the launcher until it asks this rank to stop (recording each in `status_folder`)."""
    global _in_command
    import torch.distributed as dist  # lazy: a rank imports torch only once it runs (the zygote before forking); the notebook side stays torch-free

    from ddp_lab.launcher.rendezvous import mark_set_up_by  # lazy: rendezvous imports torch at use; a rank loads it after its channel is up

    mark_set_up_by("cluster")  # a cell's own init_process_group is told this group exists
    channel = control_channel()
    namespace = cell_namespace(rank, dist.get_world_size())
    signal.signal(signal.SIGINT, _interrupt_the_command)
    sys.unraisablehook = _interrupt_again_if_swallowed
    os.environ["MPLBACKEND"] = FIGURES_BACKEND   # a cell's figures travel to the notebook (rank_figures.py)
    _record(status_folder, rank, None)
    while True:
        command = receive_message(channel)
        if command is None or command["kind"] == "shutdown":
            return
        reply = {"kind": "reply", "id": command["id"]}
        _record(status_folder, rank, command)
        value, figures = None, []
        try:
            _in_command = True
            try:
                try:
                    value = _execute(rank, command, namespace)
                finally:   # a cell's figures, and a call's (a failed one's too), drawn while the stop button works
                    if command["kind"] in ("exec", "call"):
                        figures = _figures(value if command["kind"] == "exec" else None)
            finally:
                _in_command = False
            reply.update(_value_reply(_display_text(value) if command.get("display") else value))
        except BaseException as error:  # noqa: BLE001 - reported to the notebook, the rank lives on
            # sys.exit() in a cell included: as in a kernel, it ends the cell, not the rank
            reply.update(exception_report(error, "fn", skip_frames=_own_frames(error)), kind="reply", ok=False)
        reply["figures"] = figures
        _record(status_folder, rank, None)
        reply["group"] = dist.is_initialized()  # False: the cell destroyed the default group
        _mark_end(command["id"])
        send_message(channel, reply)


DISPLAY_CHARS = 4000  # the most of a final expression's repr that a %%ddp cell shows


def _display_text(value) -> str | None:
    """What a %%ddp cell shows of its final expression's value: its repr (cut at DISPLAY_CHARS), as a kernel shows
    Out[n]; None for None. The value itself stays on the rank: nothing is pickled, so any value can be shown."""
    if value is None or _is_figure(value):   # a figure is shown as a picture (rank_figures.py)
        return None
    try:
        text = repr(value)
    except Exception as error:  # noqa: BLE001 - a broken __repr__ is shown, not raised
        return f"<{type(value).__name__} object; its repr raised {type(error).__name__}: {error}>"
    if len(text) > DISPLAY_CHARS:
        text = f"{text[:DISPLAY_CHARS]}... ({len(text):,} characters in all)"
    return text


FIGURES_BACKEND = "module://ddp_lab.cluster.rank_figures"   # matplotlib's backend on the ranks


def _is_figure(value) -> bool:
    """Whether `value` is a matplotlib Figure (matplotlib is not imported where the cell did not import it)."""
    figure_module = sys.modules.get("matplotlib.figure")
    return figure_module is not None and isinstance(value, figure_module.Figure)


def _figures(value) -> list[bytes]:
    """The figures the cell drew (rank_figures.take_figures: PNG bytes), for the notebook to show under the cell; where
    drawing them fails, this rank's stderr says why and the cell's figures are dropped (closed all the same)."""
    if "matplotlib.pyplot" not in sys.modules and not _is_figure(value):
        return []
    try:
        from ddp_lab.cluster import rank_figures  # lazy: it imports matplotlib, which only a cell that drew needs
        return rank_figures.take_figures(value)
    except Exception as error:  # noqa: BLE001 - the cell ran; only its pictures are lost
        print(f"ddp_lab: this rank's figures could not be drawn ({type(error).__name__}: {error})", file=sys.stderr)
        return []


def _value_reply(value) -> dict:
    """The reply's part for a command that ran: its value pickled, or what kept the value from being pickled (a
    lock, a process group, a generator: the command worked, its value cannot travel to the notebook)."""
    try:
        return {"ok": True, "value": dumps(value)}
    except Exception as error:  # noqa: BLE001 - whatever pickling raises, the notebook is told what and why
        return {"ok": False, "unpicklable": type(value).__name__, "text": f"{type(error).__name__}: {error}"}


def _record(folder: str | None, rank: int, command: dict | None) -> None:
    """Write the rank's status record (what `%ddp_status` shows); a failure to write costs only the status."""
    if folder is None:
        return
    try:
        write_record(folder, rank, command)
    except OSError:
        pass


def _own_frames(error: BaseException) -> int:
    """How many frames at the top of the traceback are this module's (hidden from the learner)."""
    count, tb = 0, error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        count, tb = count + 1, tb.tb_next
    return count

"""The command loop each rank of a live cluster runs (the rank side of `ddp_lab.Cluster`).

A rank keeps one namespace for its whole life, so models, optimizers and tensors made
in one `%%ddp` cell are there in the next. For every command it runs the code, then
writes an end-of-command mark on stdout and stderr (so the launcher knows it has all of
the command's output) and replies with the value or the exception.

Introduced in notebooks/00b-live-cluster.ipynb.
"""

from __future__ import annotations

import ast
import linecache
import os

import cloudpickle

from ddp_lab.launcher.channel import receive_message, send_message
from ddp_lab.launcher.worker import OUTPUT_MARK, control_channel, exception_report, flush_all_output


def _run_source(source: str, filename: str, namespace: dict):
    """exec a cell like IPython does: the value of a final expression is returned."""
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    tree = ast.parse(source, filename)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, filename, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(ast.Expression(last.value), filename, "eval"), namespace)


def _execute(rank: int, command: dict, namespace: dict):
    kind = command["kind"]
    if kind == "exec":
        return _run_source(command["source"], command["filename"], namespace)
    if kind == "call":
        fn, args = cloudpickle.loads(command["fn"]), cloudpickle.loads(command["args"])
        return fn(rank, *args)
    if kind == "pull":
        if command["name"] not in namespace:
            raise NameError(f"name {command['name']!r} is not defined on rank {rank}")
        return namespace[command["name"]]
    raise ValueError(f"unknown command {kind!r}")


def _mark_end(command_id: int) -> None:
    flush_all_output()
    for fd in (1, 2):
        os.write(fd, f"{OUTPUT_MARK}{command_id}\n".encode())


def serve(rank: int) -> None:
    """Run commands from the launcher until it asks this rank to stop."""
    import torch
    import torch.distributed as dist

    from ddp_lab.launcher.rendezvous import mark_set_up_by

    mark_set_up_by("cluster")  # a cell's own init_process_group is told this group exists
    channel = control_channel()
    namespace = {"__name__": "__ddp__", "__builtins__": __builtins__, "rank": rank,
                 "world_size": dist.get_world_size(), "torch": torch, "dist": dist}
    while True:
        command = receive_message(channel)
        if command is None or command["kind"] == "shutdown":
            return
        reply = {"kind": "reply", "id": command["id"]}
        exiting = False
        try:
            value = _execute(rank, command, namespace)
            reply.update(ok=True, value=cloudpickle.dumps(value))
        except BaseException as error:  # noqa: BLE001 - reported to the notebook, the rank lives on
            reply.update(exception_report(error, "fn", skip_frames=_own_frames(error)), kind="reply", ok=False)
            exiting = isinstance(error, SystemExit)
        _mark_end(command["id"])
        send_message(channel, reply)
        if exiting:
            return


def _own_frames(error: BaseException) -> int:
    """How many frames at the top of the traceback are this module's (hidden from the learner)."""
    count, tb = 0, error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        count, tb = count + 1, tb.tb_next
    return count

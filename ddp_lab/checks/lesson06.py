"""Checks for the exercises of lesson 06 (backends and torchrun).

    ddp_lab.checks.lesson06.check_pick_backend(pick_backend)
    ddp_lab.checks.lesson06.check_device_and_ddp_kwargs(device_and_ddp_kwargs)
    ddp_lab.checks.lesson06.check_setup_from_env(setup_from_env)

Introduced in notebooks/06-backends-and-torchrun.ipynb (exercises/06-backends-and-torchrun.ipynb).
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import os
import re
import traceback
import warnings
from typing import NamedTuple

import torch
import torch.distributed as dist

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import describe, failure_message, parse_frames, source_tree
from ddp_lab.launcher.errors import LaunchError, LaunchTimeout, LaunchWarning
from ddp_lab.launcher.launch import launch
from ddp_lab.launcher.rendezvous import check_timeout, store_address

_NOT_WRITTEN = ("is not written yet: it raised NotImplementedError({!r}).\n"
                "Replace the `raise NotImplementedError` line with your answer.")


def _call(fn, what: str, case: str, *args):
    """Call the learner's function; turn an exception into feedback that names the input."""
    try:
        return fn(*args)
    except NotImplementedError as error:
        raise CheckFailed(f"{what} " + _NOT_WRITTEN.format(str(error))) from None
    except Exception as error:
        raise CheckFailed(f"{what} raised {type(error).__name__}: {error}\nwhile {case}.") from error


# --- exercise 1: pick_backend(gpus, nprocs_per_node, nccl_available) ---------------------

_BACKEND_CASES = [
    # (gpus on this node, processes per node, NCCL built in) -> expected, why
    ((0, 2, False), "gloo", "no GPU: CPU tensors need gloo"),
    ((0, 4, True), "gloo", "a CUDA build of torch on a machine without GPUs has NCCL, but no GPU to run it on"),
    ((4, 4, True), "nccl", "one GPU per process and NCCL built in: NCCL"),
    ((6, 4, True), "nccl", "more GPUs than processes is fine, a count that is no multiple of the processes' too: "
                           "each process still has its own GPU"),
    ((1, 2, True), "gloo", "NCCL refuses two ranks on one GPU; with fewer GPUs than processes use gloo"),
    ((4, 4, False), "gloo", "GPUs but a torch without NCCL (e.g. a CPU build or macOS): gloo"),
]


def check_pick_backend(pick_backend) -> None:
    """Check `pick_backend(gpus, nprocs_per_node, nccl_available) -> 'nccl' | 'gloo'`.

    Introduced in notebooks/06-backends-and-torchrun.ipynb.
    """
    for (gpus, nprocs, nccl), expected, why in _BACKEND_CASES:
        case = f"pick_backend(gpus={gpus}, nprocs_per_node={nprocs}, nccl_available={nccl})"
        got = _call(pick_backend, "pick_backend", f"calling {case}", gpus, nprocs, nccl)
        if isinstance(got, str) and got.lower() == expected:   # torch reads backend names in any case
            continue
        if got is None:
            raise CheckFailed(f"{case} returned None, expected {expected!r}.\nHint: a function that ends without "
                              "a return statement on this path (or prints its answer) returns None: return the "
                              "backend's name on every path.")
        if not isinstance(got, str):
            raise CheckFailed(f"{case} returned {type(got).__name__} {got!r}, expected the string {expected!r}: "
                              "pick_backend returns the name of a backend, 'nccl' or 'gloo'.")
        if got.lower() in ("cpu", "cuda"):
            raise CheckFailed(f"{case} returned {got!r}, expected {expected!r}.\nHint: {got!r} names a device; "
                              "pick_backend returns a backend, the library that moves the tensors: 'nccl' or 'gloo' "
                              f"({why}).")
        raise CheckFailed(f"{case} returned {got!r}, expected {expected!r}.\nHint: {why}.")
    passed(f"pick_backend: right on all {len(_BACKEND_CASES)} machines")


# --- exercise 2: device_and_ddp_kwargs(backend) -------------------------------------------

@contextlib.contextmanager
def _environment(**values: str):
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _as_device(value, case: str) -> torch.device:
    """The device of the pair an answer returned; anything but a torch.device is refused: the training function
    after the exercise reads its .type, which a string such as 'cuda:2' does not have."""
    if isinstance(value, torch.device):
        return value
    try:
        named = torch.device(value)
    except (TypeError, RuntimeError) as error:
        raise CheckFailed(f"{case}: the device {value!r} is not a torch.device ({error}).\n"
                          "Hint: return torch.device('cpu') or torch.device('cuda', local_rank).") from None
    example = "torch.device('cpu')" if named.type == "cpu" else "torch.device('cuda', local_rank)"
    raise CheckFailed(f"{case} returned the device as {value!r}, a {type(value).__name__}, not a torch.device: "
                      "DDP and .to() take either, but the training function below asks the device its type "
                      f"(device.type), which a {type(value).__name__} does not have.\nHint: return a torch.device, "
                      f"not its name: {example}.") from None


def _unpack(result, case: str):
    """(device, ddp_kwargs) from what the answer returned: a tuple, or a list, of the two (both unpack alike)."""
    if not (isinstance(result, (tuple, list)) and len(result) == 2 and isinstance(result[1], dict)):
        raise CheckFailed(f"{case} returned {result!r}; expected a pair (device, ddp_kwargs) with "
                          "ddp_kwargs a dict, e.g. (torch.device('cpu'), {}).")
    return _as_device(result[0], case), result[1]


class Layout(NamedTuple):
    """A pretend process of a torchrun job: its global rank, its index on its node, the node's index, the job's
    process count and its node's."""

    rank: int
    local_rank: int
    node: int
    world_size: int
    per_node: int

    def environment(self) -> dict:
        return {"RANK": str(self.rank), "LOCAL_RANK": str(self.local_rank), "WORLD_SIZE": str(self.world_size),
                "LOCAL_WORLD_SIZE": str(self.per_node), "GROUP_RANK": str(self.node)}

    def __str__(self) -> str:
        return (f"as global rank {self.rank} = local rank {self.local_rank} on node {self.node}, {self.per_node} "
                "processes per node")


# The pretend processes of check_device_and_ddp_kwargs. Global rank 6 = local rank 2 on node 1, 4 processes per node:
# RANK, LOCAL_RANK and the node index (GROUP_RANK, RANK // LOCAL_WORLD_SIZE) all differ. Then global rank 29 = local
# rank 5 on node 3, 8 processes per node: a local rank computed from RANK with a node size written in the code
# (RANK % 4, RANK % 2, RANK less 4 per node before) is wrong there, where the first layout cannot tell.
LAYOUTS = (Layout(6, 2, 1, 8, 4), Layout(29, 5, 3, 32, 8))
FIRST = LAYOUTS[0]


def check_device_and_ddp_kwargs(device_and_ddp_kwargs) -> None:
    """Check `device_and_ddp_kwargs(backend) -> (device, ddp_kwargs)` on pretend nodes.

    The environment is first that of global rank 6 = local rank 2 on the second node of a job
    with 4 processes per node, so RANK, LOCAL_RANK and the node's index differ; then, for nccl,
    that of global rank 29 = local rank 5 on the fourth node of a job with 8 per node.

    Introduced in notebooks/06-backends-and-torchrun.ipynb.
    """
    what = "device_and_ddp_kwargs"
    nccl = []
    for layout in LAYOUTS:
        with _environment(**layout.environment()):
            if layout is FIRST:
                gloo = _call_device(device_and_ddp_kwargs, "gloo", layout)
            nccl.append(_call_device(device_and_ddp_kwargs, "nccl", layout))
    device, kwargs = _unpack(gloo, f"{what}('gloo')")
    if device.type != "cpu":
        raise CheckFailed(f"{what}('gloo') chose {device}, expected cpu.\nHint: in this exercise gloo "
                          "means CPU training (gloo can move CUDA tensors too, but slowly); the model stays on CPU.")
    _check_cpu_kwargs(what, kwargs)
    written = [_written_node_size([_gpu_number(result, part) for result in nccl]) for part in (0, 1)]
    for index, (layout, result) in enumerate(zip(LAYOUTS, nccl)):
        _check_nccl(what, result, layout, [(found, values[index]) if found else None for found, values in written],
                    [values for _, values in written])
    passed(f"{what}: cpu and {{}} for gloo; cuda:LOCAL_RANK and device_ids=[LOCAL_RANK] for nccl, on nodes of "
           f"{' and of '.join(str(layout.per_node) for layout in LAYOUTS)} processes")


def _check_cpu_kwargs(what: str, kwargs: dict) -> None:
    """Judge the ddp_kwargs for gloo (a module on the CPU): DDP takes device_ids None or empty (it keeps an empty list
    for backward compatibility) as left out, and refuses a GPU there (ValueError); output_device must be left out."""
    ids, output = kwargs.get("device_ids"), kwargs.get("output_device")
    if ids is None or (isinstance(ids, (list, tuple)) and len(ids) == 0):
        if output is None:
            return
        raise CheckFailed(f"{what}('gloo') returned ddp_kwargs={kwargs!r}, expected {{}}.\nHint: output_device "
                          "names the GPU DDP puts outputs on; the model stays on the CPU: leave output_device out.")
    refused = " (ValueError)" if isinstance(ids, (list, tuple)) else ""
    raise CheckFailed(f"{what}('gloo') returned ddp_kwargs={kwargs!r}, expected {{}}.\nHint: DDP refuses device_ids "
                      f"that name a GPU for a module on the CPU{refused}; pass no device_ids there (None and [] are "
                      "the same to DDP as leaving it out).")


# The hints for a ZeroDivisionError raised by a line that divides by torch.cuda.device_count(): where what it divides
# reads RANK and not LOCAL_RANK (RANK % the GPU count), and otherwise (LOCAL_RANK % the GPU count, or unseen)
GPU_COUNT_HINT = ("the line that raised divides by torch.cuda.device_count() (% divides too), which is 0 where no GPU "
                  "is visible, as here; on a GPU node the GPU count need not be the number of processes torchrun "
                  "started there either. torchrun gives each process its index on its node in LOCAL_RANK: read it "
                  "from the environment")
GPU_COUNT_ZERO = ("the line that raised divides by torch.cuda.device_count() (% divides too), which is 0 where no GPU "
                  "is visible, as here: the check plays a process of a torchrun job on GPU nodes, on a machine "
                  "without GPUs. LOCAL_RANK alone is the GPU index torchrun means, this process's on its node: "
                  "int(os.environ['LOCAL_RANK']), with no % needed")
# The hint for a TypeError naming a str, raised by a line that uses a value read from the environment
STRING_HINT = ("environment variables are strings, and the line that raised uses one where a number is wanted (the "
               "error names a str): convert it, int(os.environ['LOCAL_RANK'])")


def _call_device(device_and_ddp_kwargs, backend: str, layout: Layout):
    """The answer's result for `backend` in the environment of `layout` (set by the caller)."""
    what = "device_and_ddp_kwargs"
    case = f"calling {what}({backend!r}) ({layout})"
    try:
        return _call(device_and_ddp_kwargs, what, case, backend)
    except CheckFailed as failed:
        error = failed.__cause__
        line = _raising_line(error) if error is not None else ""
        if isinstance(error, ZeroDivisionError) and "device_count" in line:
            raise CheckFailed(f"{failed}\nHint: {_gpu_count_hint(device_and_ddp_kwargs, line)}.") from error
        if isinstance(error, TypeError) and re.search(r"\bstr\b", str(error)) and \
                _uses_an_environment_string(device_and_ddp_kwargs, line):
            raise CheckFailed(f"{failed}\nHint: {STRING_HINT}.") from error
        lines = [frame.line or "" for frame in traceback.extract_tb(error.__traceback__)] if error is not None else []
        if error is not None and _set_device_without_a_gpu(error, lines):
            raise CheckFailed(f"{failed}\nHint: {SET_DEVICE_HINT}.") from error
        if error is not None and _no_gpu(error) and _calls(lines, "current_device"):
            raise CheckFailed(f"{failed}\nHint: {CURRENT_DEVICE_HINT}.") from error
        if isinstance(error, ValueError) and "process group has not been initialized" in str(error) and \
                _calls(lines, "get_rank"):
            raise CheckFailed(f"{failed}\nHint: {GET_RANK_HINT}.") from error
        raise


# torch.cuda.set_device where no GPU is (a CPU-only torch has no _cuda_setDevice; a CUDA build finds no device)
SET_DEVICE_HINT = ("torch.cuda.set_device needs a GPU, and this machine has none: the exercise leaves it to the "
                   "caller (its script below calls it, for nccl only): do not call it inside")


# torch.cuda.current_device() where no GPU is, and dist.get_rank() where no process group is: what each is in a job
CURRENT_DEVICE_HINT = ("torch.cuda.current_device() needs a GPU, and this machine has none; on a GPU node it is GPU 0 "
                       "until the caller's set_device runs, the same for every process on the node, not this "
                       "process's own GPU. torchrun gives each process its index on its node in LOCAL_RANK: read it "
                       "from the environment, int(os.environ['LOCAL_RANK'])")
GET_RANK_HINT = ("dist.get_rank() needs a process group, and the check calls the function without one; in a job it "
                 "is the global rank (RANK), counted over the processes of all nodes, not this process's GPU on its "
                 "node. torchrun gives each process its index on its node in LOCAL_RANK: read it from the "
                 "environment, int(os.environ['LOCAL_RANK'])")


def _calls(lines: list[str], name: str) -> bool:
    """Whether one of a traceback's source `lines` calls a function named `name`."""
    return any(re.search(rf"\b{name}\(", line) for line in lines)


def _set_device_without_a_gpu(error: BaseException, lines: list[str]) -> bool:
    """Whether `error` came from a torch.cuda.set_device call (one of the traceback's source `lines`) on a machine
    without a GPU."""
    return _no_gpu(error) and any(re.search(r"\bset_device\(", line) for line in lines)


def _no_gpu(error: BaseException) -> bool:
    """Whether `error` is torch's for a CUDA call on a machine without a usable GPU: a CPU build's ('Torch not compiled
    with CUDA enabled') or a CUDA build's without a driver ('Found no NVIDIA driver on your system')."""
    message = str(error).lower()
    return "cuda" in message or "nvidia driver" in message


def _raising_line(error: BaseException) -> str:
    """The source line of the innermost frame of error's traceback ('' where there is none)."""
    frames = traceback.extract_tb(error.__traceback__)
    return (frames[-1].line or "") if frames else ""


def _source_function(fn) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The syntax tree of fn's definition (None where there is no source to read)."""
    tree = source_tree(fn)
    if tree is None:
        return None
    return next((node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))), None)


def _is_environment_read(node: ast.AST) -> str | None:
    """The variable `node` reads where it is os.environ[NAME], os.environ.get(NAME, ...) or os.getenv(NAME, ...)."""
    key = None
    if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ"):
        key = node.slice
    elif isinstance(node, ast.Call) and node.args and ast.unparse(node.func).endswith(("environ.get", "getenv")):
        key = node.args[0]
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None


def _environment_reads(node: ast.AST, bound: dict) -> set:
    """The environment variables an expression reads, itself or through the names `bound` maps to theirs."""
    found = set()
    for each in ast.walk(node):
        read = _is_environment_read(each)
        if read:
            found.add(read)
        if isinstance(each, ast.Name) and isinstance(each.ctx, ast.Load):
            found |= bound.get(each.id, set())
    return found


def _bindings(function) -> dict:
    """For each name `function` assigns, the environment variables its values read (in source order; a tuple of
    values assigned to a tuple of names, element by element)."""
    bound: dict = {}
    assignments = [node for node in ast.walk(function) if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                   and node.value is not None]
    for node in sorted(assignments, key=lambda node: (node.lineno, node.col_offset)):
        for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
            pairs = [(target, node.value)]
            if isinstance(target, (ast.Tuple, ast.List)) and isinstance(node.value, (ast.Tuple, ast.List)) and \
                    len(target.elts) == len(node.value.elts):
                pairs = list(zip(target.elts, node.value.elts))
            for names, value in pairs:
                reads = _environment_reads(value, bound)
                for name in (each for each in ast.walk(names) if isinstance(each, ast.Name)):
                    bound[name.id] = reads | (bound.get(name.id, set()) if isinstance(node, ast.AugAssign) else set())
    return bound


def _gpu_count_hint(fn, line: str) -> str:
    """The hint for a ZeroDivisionError on `line`, which divides by torch.cuda.device_count(): GPU_COUNT_HINT where
    what fn divides by it reads RANK and not LOCAL_RANK (in fn's source, or where that shows no such division, on
    `line`), GPU_COUNT_ZERO otherwise."""
    function, divided = _source_function(fn), None
    if function is not None:
        bound = _bindings(function)
        divisions = [node.left for node in ast.walk(function) if isinstance(node, ast.BinOp)
                     and isinstance(node.op, (ast.Mod, ast.FloorDiv, ast.Div))
                     and "device_count" in ast.unparse(node.right)]
        if divisions:
            divided = set().union(*(_environment_reads(left, bound) for left in divisions))
    if divided is None:   # a division in a function fn calls, or no source
        divided = set(re.findall(r"""["'](LOCAL_RANK|RANK)["']""", line))
    return GPU_COUNT_HINT if "RANK" in divided and "LOCAL_RANK" not in divided else GPU_COUNT_ZERO


def _uses_an_environment_string(fn, line: str) -> bool:
    """Whether `line` reads os.environ (or os.getenv), or a name fn assigns an environment variable as it is."""
    if "environ" in line or "getenv" in line:
        return True
    function = _source_function(fn)
    if function is None:
        return False
    raw = {name.id for node in ast.walk(function) if isinstance(node, ast.Assign) and _is_environment_read(node.value)
           for target in node.targets for name in ast.walk(target) if isinstance(name, ast.Name)}
    return bool(raw & set(re.findall(r"\w+", line)))


def _gpu_number(result, part: int) -> int | None:
    """The GPU index an answer's result names: part 0 that of its device, part 1 that of its device_ids' one entry
    (None where there is none, or it is not a number)."""
    try:
        value = torch.device(result[0]).index if part == 0 else \
            (result[1]["device_ids"][0] if len(result[1]["device_ids"]) == 1 else None)
    except Exception:   # whatever the answer returned: _check_nccl says what is wrong with it
        return None
    return value if type(value) is int else None


# The node sizes looked for in an answer's GPU indices, as if written in its code: the GPUs per node of real machines
# only, so that no other mistake matches one by chance (LOCAL_RANK - 1 gives 1 and 4 here: RANK % 5 in both layouts)
WRITTEN_SIZES = (2, 3, 4, 6, 8, 16)


def _written_node_size(values: list) -> tuple:
    """((a phrase for what a value is, the node size) or None, `values`): the phrase where the GPU index an answer
    gave in every layout (`values`, in LAYOUTS' order) is what RANK gives with one node size written in the code:
    RANK % size (changing RANK in some layout, so RANK itself is not one), or RANK less size processes for each node
    before this one."""
    if None not in values:
        for size in WRITTEN_SIZES:
            if all(layout.rank % size == value for layout, value in zip(LAYOUTS, values)) and \
                    any(layout.rank >= size for layout in LAYOUTS):
                return ("is RANK % {}", size), values
            if all(layout.rank - size * layout.node == value for layout, value in zip(LAYOUTS, values)):
                return ("is RANK less {} processes for each node before this one", size), values
    return None, values


def _wrong_gpu(what: str, got: str, wanted: str, layout: Layout, first: str, written: tuple | None) -> CheckFailed:
    """The CheckFailed for a GPU index that is not `layout`'s local rank: where RANK with a node size written in the
    code gives it (`written`: ((phrase, size), the index here)), or where it was right on the first layout (then
    `first` says what it was there)."""
    where = f"({layout}), expected {wanted}"
    if layout is not FIRST:
        where += f"; {FIRST}, it {first}, right"
    if written:
        (phrase, size), value = written
        said = (f"{value} {phrase.format(size)}: a node size of {size} written in the code, right on nodes of {size} "
                "processes only")
    else:
        said = f"right on a node of {FIRST.per_node} processes, wrong on one of {layout.per_node}"
    return CheckFailed(f"{what}('nccl') {got} {where}.\nHint: {said}. torchrun gives each process its index on its "
                       "node in LOCAL_RANK (and the node's process count in LOCAL_WORLD_SIZE): read it from the "
                       "environment, whatever the node's size.")


def _check_nccl(what: str, result, layout: Layout, written: list, across: list) -> None:
    """Judge an answer's result for nccl in `layout`'s environment. `written`: for its device and for its device_ids,
    ((phrase, node size), its GPU index here) where RANK with a node size written in the code gives that index in
    every layout (`_written_node_size`), else None. `across`: for its device and its device_ids, the GPU index it
    gave in each layout (None where none), so that a hint naming what the index is (RANK, the node's index) fires
    only where it is that in every layout."""
    ranks, nodes = [each.rank for each in LAYOUTS], [each.node for each in LAYOUTS]
    device, kwargs = _unpack(result, f"{what}('nccl')")
    local_rank, where = layout.local_rank, f"({layout})"
    want = f"cuda:{local_rank}"
    if device.type != "cuda":
        raise CheckFailed(f"{what}('nccl') chose {device} {where}, expected {want}.\nHint: NCCL moves "
                          "CUDA tensors only: the model and batches must be on this rank's GPU.")
    if device.index is None:
        raise CheckFailed(f"{what}('nccl') chose {device} (no index) {where}, expected {want}.\nHint: "
                          "plain 'cuda' means the current device, GPU 0 until set_device is called; name the "
                          "GPU: torch.device('cuda', local_rank).")
    if device.index != local_rank and (written[0] or layout is not FIRST):
        raise _wrong_gpu(what, f"chose {device}", want, layout, f"chose cuda:{FIRST.local_rank}", written[0])
    if device.index == layout.rank and across[0] == ranks:
        raise CheckFailed(f"{what}('nccl') chose cuda:{layout.rank} {where}, expected {want}.\nHint: that is RANK, "
                          f"the rank over all nodes; this node has GPUs 0-{layout.per_node - 1} only. GPUs are "
                          "numbered per node: use LOCAL_RANK.")
    if device.index == layout.node and across[0] == nodes:
        raise CheckFailed(f"{what}('nccl') chose cuda:{layout.node} {where}, expected {want}.\nHint: {layout.node} "
                          "is this node's index (GROUP_RANK, or RANK // LOCAL_WORLD_SIZE), the same for every process "
                          "on the node; each process needs its own GPU: LOCAL_RANK.")
    if device.index != local_rank:
        raise CheckFailed(f"{what}('nccl') chose {device} {where}, expected {want}.\nHint: the GPU is this "
                          "process's index on its node, LOCAL_RANK as torchrun sets it "
                          "(int(os.environ['LOCAL_RANK'])), as it is.")
    ids = kwargs.get("device_ids")
    if ids is None:
        raise CheckFailed(f"{what}('nccl') returned ddp_kwargs={kwargs!r} {where}; expected "
                          f"{{'device_ids': [{local_rank}]}}.\nHint: tell DDP which single GPU this replica lives "
                          "on: device_ids=[local_rank] (the form this lesson asks for).")
    if not isinstance(ids, (list, tuple)):
        raise CheckFailed(f"{what}('nccl') returned device_ids={ids!r}; DDP wants a list: [{local_rank}].\n"
                          "Hint: device_ids=[local_rank], one entry for a single-GPU replica.")
    # DDP takes each entry as a GPU index or a torch.device
    if [torch.device("cuda", i) if isinstance(i, int) else i for i in ids] != [device]:
        if written[1] or (layout is not FIRST and len(ids) == 1 and type(ids[0]) is int):
            raise _wrong_gpu(what, f"returned device_ids={list(ids)!r}", f"[{local_rank}]", layout,
                             f"returned [{FIRST.local_rank}]", written[1])
        if any(isinstance(i, str) for i in ids):
            hint = "environment variables are strings: int(os.environ['LOCAL_RANK'])."
        elif list(ids) == [layout.rank] and across[1] == ranks:
            hint = "that is RANK, the rank over all nodes: DDP's device_ids name this node's GPU, LOCAL_RANK."
        else:
            hint = f"one entry, this replica's GPU, the one the device names: [{local_rank}] (LOCAL_RANK)."
        kind = " (strings)" if any(isinstance(i, str) for i in ids) else ""
        raise CheckFailed(f"{what}('nccl') returned device_ids={list(ids)!r}{kind} {where}; expected "
                          f"[{local_rank}].\nHint: {hint}")
    output = kwargs.get("output_device")
    if output is not None:
        out = _output_device(what, output, where, local_rank)
        if out != device:
            raise CheckFailed(f"{what}('nccl') returned output_device={output!r} {where}; leave it out or "
                              f"make it this rank's GPU, {local_rank}.")


def _output_device(what: str, output, where: str, local_rank: int) -> torch.device:
    """The GPU an answer's output_device names (DDP takes a GPU index or what torch.device takes), else CheckFailed
    naming output_device."""
    if isinstance(output, int) and not isinstance(output, bool):
        return torch.device("cuda", output)
    try:
        return torch.device(output)
    except (TypeError, RuntimeError) as error:
        if isinstance(output, str) and output.strip().isdigit():
            raise CheckFailed(f"{what}('nccl') returned output_device={output!r} {where}, a string, which DDP reads as "
                              f"a device name ({error}).\nHint: environment variables are strings: pass a number, "
                              "int(os.environ['LOCAL_RANK']), or leave output_device out (DDP takes device_ids[0])."
                              ) from None
        raise CheckFailed(f"{what}('nccl') returned output_device={output!r} {where}, which names no device "
                          f"({error}); leave it out or make it this rank's GPU, {local_rank}.") from None


# --- exercise 3: setup_from_env(backend) -------------------------------------------------

# Two "nodes" with one process each: global ranks 0 and 1, both LOCAL_RANK 0, on nodes 0 and 1. Then one node of both
# processes, where LOCAL_RANK is the rank: an answer that sets local_rank to 0, or to RANK, is right in one layout only.
# _TWO_NODES is the launch's environment, the same for both ranks; each rank sets its node's index itself.
_TWO_NODES = {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}


def _two_nodes(rank: int) -> dict:
    """torchrun's node variables for `rank` on a node of its own: the node's index (GROUP_RANK) is the rank."""
    return {**_TWO_NODES, "GROUP_RANK": str(rank)}


def _one_node(rank: int) -> dict:
    """torchrun's node variables for `rank` on one node of both processes (node 0)."""
    return {"LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"}


_LAYOUT = {False: "two nodes, one process each", True: "one node of two processes"}
_KEYS = ("rank", "local_rank", "world_size")


class GroupArgumentsRefused(ValueError):
    """Raised in a rank of lesson 06's setup check when the answer passes init_process_group a world size, a rank or a
    tcp:// address that is not torchrun's, a file:// init_method, or a timeout that is not a datetime.timedelta (args:
    the message, the hint).
    Left to gloo, a rank not below its world size fails on one rank while another waits for a peer that never comes."""

    def __str__(self) -> str:
        return self.args[0]


# init_process_group's numbers torchrun gives: (argument, its variable, the node-local variable often taken for it,
# what to pass, what the local value is)
_GROUP_NUMBERS = (
    ("world_size", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
     "world_size counts the processes of ALL nodes: int(os.environ['WORLD_SIZE']), the same on every rank",
     "this node's process count (LOCAL_WORLD_SIZE)"),
    ("rank", "RANK", "LOCAL_RANK", "the group needs each process's rank in the whole job: int(os.environ['RANK'])",
     "this process's index on its node (LOCAL_RANK: every node has a 0)"),
)


# The hint for an init_method address that is not the one torchrun set
INIT_METHOD_HINT = ("torchrun chooses where the job's processes meet (rank 0's store) and sets it in MASTER_ADDR and "
                    "MASTER_PORT, the same on every node: leave init_method out (its default, 'env://', reads them) "
                    "or build it from them, f\"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}\"")


def _store_address(init_method) -> tuple | None:
    """(host, port) of the store an init_method names (launcher.rendezvous.store_address: env:// reads MASTER_ADDR and
    MASTER_PORT), ("", None) where a tcp:// port is not a number; None for file:// and anything not a string."""
    if not isinstance(init_method, str):
        return None
    try:
        return store_address({"init_method": init_method})
    except ValueError:   # urllib's "Port could not be cast to integer value"
        return ("", None)


class AddressOverwritten(RuntimeError):
    """Raised in a rank of lesson 06's setup check by init_process_group once the answer has written MASTER_ADDR or
    MASTER_PORT over torchrun's value: the group is not created, so nothing binds the address the answer wrote (a
    port written in the code, 29500, may be held by anything on the machine). The check names the write itself."""


def _checked_arguments(init_process_group, record: dict, changed: set = frozenset()):
    """init_process_group, refusing (AddressOverwritten) to run once MASTER_ADDR or MASTER_PORT are in `changed`
    (the variables the answer gave a value other than torchrun's, filled as it runs), and (GroupArgumentsRefused) a
    world_size or rank that differs from torchrun's, a tcp:// init_method other than MASTER_ADDR:MASTER_PORT, a file://
    one (it bypasses torchrun's address, and a reused file keeps the ranks waiting), or a timeout that is not a
    datetime.timedelta (rendezvous.check_timeout). In `record`: whether a backend was given
    ("backend_given") and, once init_process_group returned, "created"."""
    signature = inspect.signature(init_process_group)

    def init_with_torchruns_numbers(*args, **kwargs):
        if changed:
            raise AddressOverwritten(f"{' and '.join(sorted(changed))} written over torchrun's value")
        given = signature.bind_partial(*args, **kwargs).arguments
        for name, variable, local, wanted, local_means in _GROUP_NUMBERS:
            value, expected, local_value = given.get(name, -1), int(os.environ[variable]), int(os.environ[local])
            if isinstance(value, str):
                raise GroupArgumentsRefused(f"init_process_group got {name}={value!r}, a string",
                                            f"the environment holds strings: pass int(os.environ['{variable}'])")
            if value not in (-1, expected):
                hint = f"{local_value} is {local_means}; {wanted}" if value == local_value else wanted
                raise GroupArgumentsRefused(f"init_process_group got {name}={value!r}, but {variable} is {expected}",
                                            hint)
        address, method = _store_address(given.get("init_method")), given.get("init_method")
        torchruns = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        if isinstance(method, str) and method.startswith("file:"):
            raise GroupArgumentsRefused(f"init_process_group got init_method={method!r}, a file the processes meet "
                                        "at, but torchrun set where they meet in MASTER_ADDR and MASTER_PORT (a file "
                                        "is seen by the processes of one node only, unless the nodes share a "
                                        "filesystem)", INIT_METHOD_HINT)
        if address is not None and address != torchruns:
            raise GroupArgumentsRefused(f"init_process_group got init_method={method!r}, but torchrun set "
                                        f"MASTER_ADDR={torchruns[0]} and MASTER_PORT={torchruns[1]}", INIT_METHOD_HINT)
        try:
            check_timeout(given)
        except TypeError as error:
            raise GroupArgumentsRefused(str(error).rstrip("."), "pass a datetime.timedelta, or leave the timeout "
                                        "out for torch's default") from None
        record["backend_given"] = given.get("backend") is not None
        result = init_process_group(*args, **kwargs)
        record["created"] = True
        return result

    return init_with_torchruns_numbers


def _setup_runner(rank: int, setup_from_env):
    """Inside a rank: the answer as on two nodes of one process each, then, its group destroyed, as on one node of two
    processes ("one_node"), where LOCAL_RANK is the rank."""
    os.environ.update(_two_nodes(rank))
    state = _setup_once(rank, setup_from_env)
    if not state.get("initialized") or state.get("backend") != "gloo" or state.get("changed"):
        return state   # judged on this run (an address written over: a second group would meet at it again)
    dist.destroy_process_group()
    os.environ.update(_one_node(rank))
    return {**state, "one_node": _setup_once(rank, setup_from_env)}


def _setup_once(rank: int, setup_from_env):
    """Call the answer (its init_process_group checked for torchrun's numbers and address, it and
    destroy_process_group recorded), then see whether it built a working process group."""

    written = {}                 # MASTER_ADDR / MASTER_PORT the answer assigns (torchrun's to keep), even unchanged
    changed = set()              # those of them it gave a value other than the one they had
    record = {}                  # what _checked_arguments saw; "destroyed" where the answer destroyed a group
    assign = type(os.environ).__setitem__

    def recording(environ, key, value):
        if key in ("MASTER_ADDR", "MASTER_PORT"):
            written[key] = value
            if environ.get(key) != value:
                changed.add(key)
        assign(environ, key, value)

    init_process_group, destroy_process_group = dist.init_process_group, dist.destroy_process_group

    def destroy_recorded(*args, **kwargs):
        record["destroyed"] = True
        return destroy_process_group(*args, **kwargs)

    type(os.environ).__setitem__ = recording
    dist.init_process_group = _checked_arguments(init_process_group, record, changed)
    dist.destroy_process_group = destroy_recorded
    try:
        info = setup_from_env("gloo")
    except NotImplementedError as error:
        return {"error": "NotImplementedError", "message": str(error)}
    except AddressOverwritten:   # judged from the write (`_check_rank`)
        info = None
    finally:
        type(os.environ).__setitem__ = assign
        dist.init_process_group, dist.destroy_process_group = init_process_group, destroy_process_group
    state = {"info": info, "initialized": dist.is_initialized(), "overwritten": written, "changed": sorted(changed),
             **record}
    if state["initialized"]:
        state.update(backend=dist.get_backend(), rank=dist.get_rank(), world_size=dist.get_world_size())
        if state["backend"] != "gloo":
            return state  # a hard-coded NCCL connects lazily: a CPU all_reduce would fail first, less clearly
        total = torch.tensor([rank + 1.0])
        dist.all_reduce(total)  # proves the group connects every rank
        state["sum"] = total.item()
    return state


def check_setup_from_env(setup_from_env, timeout: float = 30.0) -> None:
    """Check `setup_from_env(backend) -> {'rank', 'local_rank', 'world_size'}` on 2 real ranks.

    The ranks get torchrun's environment for two nodes of one process each (RANK and GROUP_RANK
    0 and 1, LOCAL_RANK 0 on both) and no process group: the answer must create it. Then, the
    group destroyed, the same for one node of both processes (LOCAL_RANK 0 and 1, GROUP_RANK 0),
    so a local rank written as 0, or taken from RANK, is wrong in one of the two.

    Introduced in notebooks/06-backends-and-torchrun.ipynb.
    """

    what = "setup_from_env"
    chosen = _hard_coded_backend(setup_from_env)
    if chosen is not None:
        raise CheckFailed(f"{what} passes {chosen} to init_process_group instead of its backend argument.\n"
                          "Hint: the caller chooses the backend (this check asks for 'gloo', the script's pick_backend "
                          "may say 'nccl' on a GPU node): pass the parameter on, init_process_group(backend, ...).")
    written = _written_world_size(setup_from_env, 2)
    if written is not None:
        raise CheckFailed(f"{what} writes the world size as 2 ({written}): this check's 2 ranks cannot tell it from "
                          "WORLD_SIZE, but the same train.py runs on any number of processes.\nHint: read it from "
                          "the environment, int(os.environ['WORLD_SIZE']), as torchrun sets it for the whole job.")
    kept = _environment_fallbacks(setup_from_env)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=LaunchWarning)
        try:
            results = launch(_setup_runner, args=(setup_from_env,), nprocs=2, timeout=timeout,
                             init_process_group=False, env=_TWO_NODES)
        except LaunchTimeout:
            raise CheckFailed(
                f"{what} did not finish within {timeout:g} s on 2 ranks, so the check stopped it.\n"
                "Hint: the ranks waited for each other. Every rank must call init_process_group, with the "
                "job's world_size (int(os.environ['WORLD_SIZE'])) and its own rank (RANK), and must not "
                "overwrite MASTER_ADDR/MASTER_PORT: torchrun already set them.") from None
        except LaunchError as error:
            refused = error.failures[error.first_rank].exception
            if isinstance(refused, GroupArgumentsRefused) and len(refused.args) == 2:
                raise CheckFailed(f"rank {error.first_rank}: in {what}, {refused}.\nHint: {refused.args[1]}.") from None
            raise CheckFailed(failure_message(error, what, lambda failure: _explain_setup(failure, setup_from_env))
                              ) from None
    for rank, state in enumerate(results):
        _check_rank(what, rank, state, kept)
    for rank, state in enumerate(results):
        _check_rank(what, rank, state["one_node"], kept, one_node=True)
    passed(f"{what}: 2 ranks joined one gloo group with the right rank, local rank and world size, on 2 nodes and "
           "on one")


def _explain_setup(failure, setup_from_env) -> str | None:
    """A hint where gloo refused a rank not below the world size it was given: for an answer whose
    init_process_group the rank's own check does not see (imported as a name: `from torch.distributed import
    init_process_group`); or where the answer's own line that raised ZeroDivisionError divides by
    torch.cuda.device_count() (0 without GPUs): then the hint depends on what it divides (`_gpu_count_hint`, which
    reads `setup_from_env`'s source)."""
    if "rank < size" in (failure.details or ""):
        return ("gloo refused a rank that is not below the world size it was given: world_size is the number of "
                "processes on ALL nodes, os.environ['WORLD_SIZE'] (LOCAL_WORLD_SIZE counts only this node's).")
    frames = parse_frames(failure.details or "")
    line = "\n".join(frames[-1]["text"]) if frames else ""
    if isinstance(failure.exception, ZeroDivisionError) and "device_count" in line:
        return _gpu_count_hint(setup_from_env, line) + "."
    if failure.exception is not None and _set_device_without_a_gpu(
            failure.exception, [text for frame in frames for text in frame["text"]]):
        return SET_DEVICE_HINT + "."
    return None


def _environment_fallbacks(fn) -> set:
    """MASTER_ADDR and MASTER_PORT where every value fn's source assigns them reads the same variable first
    (`os.environ["MASTER_ADDR"] = os.environ.get("MASTER_ADDR", "localhost")`): under torchrun, where it is set, such
    a write leaves it as it is, as os.environ.setdefault does."""
    function, values = _source_function(fn), {}
    for node in ast.walk(function) if function is not None else ():
        if isinstance(node, ast.Assign):
            for target in node.targets:
                key = _is_environment_read(target)
                if key in ("MASTER_ADDR", "MASTER_PORT"):
                    values.setdefault(key, []).append(node.value)
    return {key for key, assigned in values.items() if all(key in _environment_reads(value, {}) for value in assigned)}


def _written_world_size(fn, world_size: int) -> str | None:
    """Where fn's own source gives the world size as the number `world_size`, the check's, written in the code:
    `world_size=2` to a call (init_process_group), or a "world_size" entry of a dict literal, as the number or as a
    name bound to it (in fn, or in its module: the notebook's `NPROCS = 2`); another number fails on the ranks,
    against WORLD_SIZE. The check's ranks cannot tell it from WORLD_SIZE's value; None where there is none, or no
    source to read."""
    function = _source_function(fn)
    if function is None:
        return None
    # names bound to the number: in fn's own code (`WORLD = 2`), or, bound nowhere in fn, in its module (`NPROCS = 2`);
    # a name fn binds otherwise (a parameter, `rank, world_size = ...`, a loop) is its own, whatever the module holds
    assigned = {target.id: node.value for node in ast.walk(function) if isinstance(node, ast.Assign)
                for target in node.targets if isinstance(target, ast.Name)}
    local = {node.id for node in ast.walk(function) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    local |= {argument.arg for argument in ast.walk(function) if isinstance(argument, ast.arg)}
    module = getattr(fn, "__globals__", {})

    def the_number(value) -> bool:
        if isinstance(value, ast.Name):
            value = (assigned.get(value.id) if value.id in local else ast.Constant(module.get(value.id)))
        return isinstance(value, ast.Constant) and type(value.value) is int and value.value == world_size

    for node in ast.walk(function):
        written = []
        if isinstance(node, ast.Call):
            written = [keyword.value for keyword in node.keywords if keyword.arg == "world_size"]
        elif isinstance(node, ast.Dict):
            written = [value for key, value in zip(node.keys, node.values)
                       if isinstance(key, ast.Constant) and key.value == "world_size"]
        for value in written:
            if the_number(value):
                return ast.unparse(node) if isinstance(node, ast.Dict) else f"world_size={ast.unparse(value)}"
    return None


def _hard_coded_backend(fn) -> str | None:
    """The backend expression of an init_process_group call in fn's own source that reads none of fn's parameters
    or local variables (a string, `dist.Backend.GLOO`, `"nccl" if torch.cuda.is_available() else "gloo"`, an
    environment variable), as written, in a function that never reads its first parameter (the backend): evidence
    that fn ignores the backend it is given. None otherwise, or when there is no source to read."""
    function = _source_function(fn)
    if function is None:
        return None
    parameters = [argument.arg for argument in function.args.args]
    if parameters and any(isinstance(node, ast.Name) and node.id == parameters[0] and isinstance(node.ctx, ast.Load)
                          for node in ast.walk(function)):
        return None   # the backend it is given is read somewhere (a test of it, a helper it is passed to)
    own = {argument.arg for argument in ast.walk(function) if isinstance(argument, ast.arg)}
    own |= {node.id for node in ast.walk(function) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "init_process_group":
            given = node.args[0] if node.args else next(
                (keyword.value for keyword in node.keywords if keyword.arg == "backend"), None)
            if given is not None and not {name.id for name in ast.walk(given) if isinstance(name, ast.Name)} & own:
                return ast.unparse(given)
    return None


def _check_rank(what: str, rank: int, state: dict, kept: set, one_node: bool = False) -> None:
    """CheckFailed naming what is wrong with one rank's setup, as on two nodes or (`one_node`) on one. `kept`: the
    variables of MASTER_ADDR and MASTER_PORT the answer writes only as a fallback (`_environment_fallbacks`): a write
    of one that left its value as it was is no mistake."""
    if state.get("error") == "NotImplementedError":
        raise CheckFailed(f"{what} " + _NOT_WRITTEN.format(state["message"]))
    overwritten = {key: value for key, value in state.get("overwritten", {}).items()
                   if key in state.get("changed", ()) or key not in kept}
    if overwritten:
        raise CheckFailed(f"rank {rank}: {what} set {overwritten}; torchrun sets MASTER_ADDR and "
                          "MASTER_PORT for the whole job.\nHint: leave them as torchrun set them: a value written "
                          "in the code works on one machine, but on two it points every node at the wrong place "
                          "(each at itself for 127.0.0.1).")
    if not state["initialized"] and state.get("created"):
        how = " (dist.destroy_process_group())" if state.get("destroyed") else ""
        raise CheckFailed(f"rank {rank}: {what}('gloo') created the process group, then destroyed it{how} before "
                          "returning: after it there is no process group.\nHint: the caller trains in the group "
                          f"{what} sets up: keep it; destroy it at the end of training, not in {what}.")
    if not state["initialized"]:
        raise CheckFailed(f"rank {rank}: after {what}('gloo') there is no process group.\nHint: call "
                          "dist.init_process_group(backend) inside; with init_method 'env://' (the default) "
                          "it reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE.")
    if state["backend"] != "gloo" and state.get("backend_given") is False:
        raise CheckFailed(f"rank {rank}: {what} called init_process_group with no backend (torch then chooses; the "
                          f"group reports {state['backend']!r}), expected 'gloo'.\nHint: pass the backend argument on: "
                          "init_process_group(backend, ...).")
    if state["backend"] != "gloo":
        raise CheckFailed(f"rank {rank}: the process group uses {state['backend']!r}, expected 'gloo'.\n"
                          "Hint: pass the backend argument on to init_process_group.")
    expected = {"rank": rank, "local_rank": rank if one_node else 0, "world_size": 2}
    info = state["info"]
    if not isinstance(info, dict) or set(_KEYS) - set(info):
        raise CheckFailed(f"rank {rank}: {what} returned {info!r}; expected a dict with keys "
                          f"{', '.join(_KEYS)}, e.g. {expected!r}.")
    for key in _KEYS:
        got = info[key]
        if isinstance(got, str):
            raise CheckFailed(f"rank {rank}: {key} is {got!r}, a string; expected the int {expected[key]}.\n"
                              f"Hint: environment variables are strings: int(os.environ[{key.upper()!r}]).")
        if not isinstance(got, int) or isinstance(got, bool):   # 0.0 and tensor(0) compare equal to 0
            shown = describe(got) if torch.is_tensor(got) else f"{got!r}, a {type(got).__name__}"
            raise CheckFailed(f"rank {rank}: {key} is {shown}; expected the int {expected[key]}.\nHint: the "
                              "caller uses it as a list index, a GPU number and a count (range(world_size)), which "
                              f"take an int: int(os.environ[{key.upper()!r}]).")
        if got != expected[key]:
            hint = {"local_rank": ("LOCAL_RANK is the rank on this node (here 0 and 1, on the one node); it is "
                                   "0 on both ranks only when each has a node of its own, as in this check's "
                                   "first run. Read os.environ['LOCAL_RANK']." if one_node else
                                   "LOCAL_RANK is the rank on this node (0 on both nodes here); on rank 1 the "
                                   "global rank (RANK) and the node's index (GROUP_RANK) are 1. Read "
                                   "os.environ['LOCAL_RANK']."),
                    "rank": "read os.environ['RANK'], the global rank torchrun gave this process.",
                    "world_size": "read os.environ['WORLD_SIZE'], the number of processes on all nodes."}[key]
            raise CheckFailed(f"rank {rank}: {key} = {got!r}, expected {expected[key]} ({_LAYOUT[one_node]})."
                              f"\nHint: {hint}")
    if (state["rank"], state["world_size"]) != (rank, 2):
        raise CheckFailed(f"rank {rank}: the process group says rank {state['rank']} of {state['world_size']}, "
                          f"expected rank {rank} of 2.\nHint: pass rank=int(os.environ['RANK']) and "
                          "world_size=int(os.environ['WORLD_SIZE']), or neither (env:// reads them).")
    if state["sum"] != 3.0:
        raise CheckFailed(f"rank {rank}: an all_reduce over your group gave {state['sum']}, expected 3.0: "
                          "the group does not contain both ranks.")

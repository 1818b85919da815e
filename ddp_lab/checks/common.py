"""Helpers the lesson checks share: run an answer on real ranks and turn failures into feedback.

A check runs the learner's function on gloo ranks with `ddp_lab.launch` and a short
timeout, compares what every rank returned in the notebook's process, and raises
`CheckFailed` with a message that names the rank, the element, expected vs got and the
likely mistake. A hang (a deadlock) ends at the timeout with a message saying where each
rank was stuck.

Introduced in notebooks/02-collectives.ipynb.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import linecache
import math
import operator
import os
import re
import sysconfig
import textwrap
import traceback
from fractions import Fraction
from typing import Iterator

import torch
import torch.distributed

from ddp_lab.checks import CheckFailed
from ddp_lab.instruments.collectives import call_arguments, replacing_dist_calls
from ddp_lab.launcher.errors import LaunchError, LaunchTimeout
from ddp_lab.launcher.launch import launch
from ddp_lab.launcher.payload import cell_names, rename_cells
from ddp_lab.launcher.reports import blocked_in

# Collectives a "build it from send/recv" answer must not call.
FORBIDDEN = ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor",
             "all_gather_object", "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
             "all_to_all_single", "gather", "scatter", "_all_gather_base", "_reduce_scatter_base",
             "all_reduce_coalesced", "all_gather_coalesced")


class ForbiddenCollective(RuntimeError):
    """Raised inside a rank when an answer calls a collective it was asked to build by hand."""


class CaseFailed(Exception):
    """Raised inside a rank when the learner's function raised; says for which input.

    `name` is the learner's function that was called (None: the one the check is named
    after). Only strings are stored, so the exception pickles back to the notebook unchanged.
    """

    def __init__(self, case: str, kind: str, message: str, name: str | None = None):
        super().__init__(case, kind, message, name)
        self.case, self.kind, self.message, self.name = case, kind, message, name

    def __str__(self) -> str:
        return f"{self.kind}: {self.message} (while {self.case})"


def only_point_to_point():
    """Inside a rank: make every collective raise, so only send/recv/isend/irecv work (a context manager)."""
    return replacing_dist_calls({name: _forbidden(name) for name in FORBIDDEN})


def _forbidden(name: str):
    def make(original):
        def refuse(*args, **kwargs):
            raise ForbiddenCollective(f"dist.{name} is not allowed in this exercise: build it from "
                                      "dist.send/dist.recv (or dist.isend/dist.irecv)")
        return refuse
    return make


def call_case(fn, case: str, *args, name: str | None = None):
    """Call the learner's fn; if it raises, raise CaseFailed naming the input (chained).

    `name`: the learner's function, for messages, where a check calls more than one (lesson
    09's zero1_init and zero1_step); by default messages name the function the check is for.
    """
    try:
        return fn(*args)
    except ForbiddenCollective:
        raise
    except Exception as error:
        raise CaseFailed(case, type(error).__name__, str(error), name) from error


# --- whose code raised: the learner's, or a library's (torch's own NotImplementedError is not a stub) ---

_LIBRARY_DIRS = tuple(sorted({os.path.realpath(path) + os.sep for path in (
    os.path.dirname(torch.__file__), *(sysconfig.get_paths().get(key) for key in ("stdlib", "purelib", "platlib")))
    if path}, key=len, reverse=True))
_OWN_DIR = os.path.realpath(os.path.dirname(os.path.dirname(__file__))) + os.sep   # ddp_lab/ itself
_FRAME_LINE = re.compile(r'^\s*(?:File "(?P<file>[^"\n]*)", line (?P<line>\d+), in (?P<fn>\S+)'
                         r'|Cell (?P<cell>In ?\[\d*\]), line (?P<cline>\d+), in (?P<cfn>\S+))')


def library_of(filename: str) -> str | None:
    """The installed package a source file belongs to ('torch', 'numpy', 'python' for the stdlib), or None.

    None means the learner's code: a notebook cell, or a file outside the installed packages.
    """
    if not filename or filename.startswith("<") or filename.startswith("Cell "):
        return None
    path = os.path.realpath(filename)
    if path.startswith(os.path.realpath(os.path.dirname(torch.__file__)) + os.sep):
        return "torch"
    if path.startswith(_OWN_DIR):
        return "ddp_lab"
    for directory in _LIBRARY_DIRS:
        if path.startswith(directory):
            rest = path[len(directory):].split(os.sep)
            return rest[0] if "site-packages" in directory or "dist-packages" in directory else "python"
    return None


def raising_library(error: BaseException) -> str | None:
    """In this process: the library whose code raised `error` (its innermost frame), or None for the learner's."""
    frames = traceback.extract_tb(error.__traceback__)
    return library_of(frames[-1].filename) if frames else None


def raises_the_stub(line: str | None) -> bool:
    """Whether the source line where the learner's code raised NotImplementedError is a `raise NotImplementedError`
    statement (the exercise's stub), or unknown (no source to show: taken as the stub). A torch operator that has
    no kernel for its inputs (FP8 arithmetic on a CPU) raises NotImplementedError from C++, with the learner's line,
    which calls it, as the innermost Python frame: that is torch's error, not an unwritten answer."""
    return not line or not line.strip() or line.strip().startswith("raise NotImplementedError")


def stub_failure(name: str, error: NotImplementedError) -> CheckFailed:
    """The CheckFailed for an answer that still raises the exercise's NotImplementedError stub."""
    return CheckFailed(f"{name} is not written yet: it raised NotImplementedError({str(error)!r}).\n"
                       "Replace the `raise NotImplementedError` line with your answer.")


def answer_raised(name: str, error: Exception, case: str, hint: str | None = None) -> CheckFailed:
    """The CheckFailed for an in-process answer that raised: a stub, or the error with the learner's lines.

    Like a rank's error (`failure_message`): what raised (a library's error named as that library's), for
    which input, then the learner's own frames, where the error happened in their code. `hint`: a line
    naming the mistake, given only where the error itself shows it.
    """
    frames = traceback.extract_tb(error.__traceback__)
    if isinstance(error, NotImplementedError) and raising_library(error) is None and \
            (not frames or raises_the_stub(frames[-1].line)):
        return stub_failure(name, error)
    library = raising_library(error)
    inside = f" inside {library}" if library and library != "ddp_lab" else ""
    frames = your_frames(rename_cells("".join(traceback.format_exception(error)), cell_names()))
    where = f"\n{frames}" if frames else ""
    return CheckFailed(f"{name} raised {type(error).__name__}{inside}: {error}\nwhile {case}.{where}"
                       + (f"\nHint: {hint}" if hint else ""))


# --- an answer that calls the package's own answer to its exercise ---------------------------------

class PackageAnswerCalled(BaseException):
    """Raised by a package answer that `watching_calls` armed: the learner's function called it.

    A BaseException, so an answer's `except Exception` (a search that skips plans which raise) lets it through.
    """


_TRIPPED: list = []   # the code objects of the armed answers that were called


def _tripwire(*args, **kwargs):
    """The body an armed package answer runs instead of its own (it runs with that function's module globals)."""
    import sys as system   # lazy: the globals here are the package module's, not this one's
    common = system.modules["ddp_lab.checks.common"]
    common._TRIPPED.append(system._getframe().f_code)
    raise common.PackageAnswerCalled()


@contextlib.contextmanager
def watching_calls(functions) -> Iterator[list[str]]:
    """Inside the block: the names ('module.qualname') of those of `functions` that it called, directly or
    through anything it calls (a context manager).

    A check wraps the learner's call in it with the package's own answer to the exercise: an answer that
    returns ddp_lab's `combine(...)` would pass every comparison without being written. For the block, each
    function's code is replaced by one that records the call and raises PackageAnswerCalled (nothing runs
    slower: no tracing); the block then ends there, the exception is swallowed, and the names are in the
    list. Read it first: whatever the block was to set may be unset. A function with a closure is not watched.
    """
    armed: dict = {}
    names: dict = {}
    for function in functions:
        function = inspect.unwrap(function)
        code = getattr(function, "__code__", None)
        if code is None or code.co_freevars or function in armed:
            continue
        wire = _tripwire.__code__.replace(co_name=code.co_name, co_filename=code.co_filename,
                                          co_firstlineno=code.co_firstlineno)
        names[wire] = f"{function.__module__}.{function.__qualname__}"
        armed[function] = code
        function.__code__ = wire
    called: list[str] = []
    _TRIPPED.clear()
    try:
        yield called
    except PackageAnswerCalled:
        pass
    finally:
        for function, code in armed.items():
            function.__code__ = code
        called.extend(dict.fromkeys(names[code] for code in _TRIPPED if code in names))
        _TRIPPED.clear()


def answer_value(answer, args: tuple, name: str, doing: str, package, hint=None):
    """What an in-process answer returns for `args`; CheckFailed where it raised (`answer_raised`, with the hint
    `hint(error)` gives, if any) or called one of `package`, the package's own answers to the exercise
    (`package_answer_used`). `doing`: what the call was, for the message ("computing f(8, dp=2)"). Lessons 01, 09
    and 13 call their plain-function answers so."""
    try:
        with watching_calls(package) as called:
            value = answer(*args)
    except Exception as error:
        raise answer_raised(name, error, doing, hint(error) if hint else None) from None
    if called:
        raise package_answer_used(name, called)
    return value


def package_answer_used(name: str, called: list[str], how: str = "calls") -> CheckFailed:
    """The CheckFailed for an answer that called the package's own answer (`watching_calls` found `called`), or
    (how="is") that is it (`answer_of`)."""
    return CheckFailed(f"{name} {how} {called[0]}, the package's own answer to this exercise, so the check cannot "
                       "tell whether your code would be right.\nHint: write it yourself from the lesson's idea (the "
                       "package's version is there to read and compare with once yours passes).")


def answer_of(fn, references) -> str | None:
    """The reference among `references` that `fn` is, or whose subclass it is (a class), by name; else None."""
    for reference in references:
        if fn is reference or (isinstance(fn, type) and isinstance(reference, type) and issubclass(fn, reference)):
            return f"{reference.__module__}.{reference.__qualname__}"
    return None


# --- evidence in the learner's source --------------------------------------------------------------

def source_tree(fn) -> ast.Module | None:
    """The syntax tree of fn's own source, dedented; None where there is no source to read or parse (a builtin, a
    function defined in a string, a lambda inside an expression)."""
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None


def division_into_a_new_tensor(fn) -> str | None:
    """The first line of fn's source that divides a gradient into a NEW tensor bound to a plain name
    (`grad = grad / n`, `mean = p.grad / n`, `g = g.div(n)`, `grads = [p.grad / n for p in params]`) or dropped
    (a statement of its own: `p.grad.div(n)`, `p.grad / n`, `torch._foreach_div(grads, n)`) or returned (`return
    [p.grad / n for p in params]`: the check reads the gradients, not what the function returns), or that divides a
    COPY of a gradient in place (`p.grad.clone().div_(n)`; `g /= n`, `g.div_(n)` or `torch._foreach_div_(grads, n)`
    where `g = p.grad.clone()`, `grads = [p.grad.clone() for p in params]`, `for g in grads`), or None. For an
    in-place division of a name bound to a copy, the copy's line and the division's, joined by "; ".

    Evidence for a check whose answer left a gradient undivided where it reads it (the sum over ranks that
    all_reduce left in place, lessons 09-10; the scaled gradient an optimizer steps with, lesson 17): such a
    line did divide, but into a tensor the check does not read. Counted only where the divided value is a
    gradient (its text names "grad", or it is a name bound to one: `g = p.grad`, `for g in grads`) or a tensor the
    function all-reduces.
    """
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    reduced = {ast.unparse(node.args[0]) for node in ast.walk(tree)
               if isinstance(node, ast.Call) and node.args and ast.unparse(node.func).endswith("all_reduce")}
    aliases = set()   # names bound to a gradient
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and "grad" in ast.unparse(node.value)):
            aliases.add(node.targets[0].id)
        elif (isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name)
              and "grad" in ast.unparse(node.iter)):
            aliases.add(node.target.id)
    answer = next((node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    nested = {id(inner) for outer in ast.walk(tree) if outer is not answer
              and isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) for inner in ast.walk(outer)}
    found = []
    for node in ast.walk(tree):
        bound = isinstance(node, ast.Assign) and all(isinstance(target, ast.Name) for target in node.targets)
        # an expression statement drops its result; the answer's return value is not what the check reads (a nested
        # helper's is: `def mean(p): return p.grad / n`, then `p.grad = mean(p)`)
        returned = isinstance(node, ast.Return) and node.value is not None and id(node) not in nested
        if not (bound or returned or (isinstance(node, ast.Expr) and node.value is not None)):
            continue
        value = node.value
        if isinstance(value, (ast.ListComp, ast.GeneratorExp)):      # [p.grad / n for p in params]
            value = value.elt
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Div):
            divided = value.left
        elif isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] in ("div", "true_divide", "divide",
                                                                                     "_foreach_div"):
            method = isinstance(value.func, ast.Attribute) and ast.unparse(value.func.value) != "torch"
            # g.div(n) divides g; torch.div(g, n) and div(g, n) their first argument
            divided = value.func.value if method else (value.args[0] if value.args else None)
        else:
            continue
        text = ast.unparse(divided) if divided is not None else ""
        if "grad" in text or text in reduced or text in aliases:
            found.append(node)
    copied = _divided_copies(tree)
    found.extend(copied)
    if not found:
        return None
    first = min(found, key=lambda node: (node.lineno, node.col_offset))
    line = ast.get_source_segment(source, first)
    made = copied.get(first)
    return line if made is None else f"{ast.get_source_segment(source, made)}; {line}"


_COPIES = ("clone", "deepcopy")                      # calls whose result is a new tensor, never a view of their input
_IN_PLACE_DIVISIONS = ("div_", "true_divide_", "divide_", "_foreach_div_")


def _copy_of_a_gradient(node) -> bool:
    """node is a copy of a gradient: `p.grad.clone()`, `p.grad.detach().clone()`, `torch.clone(p.grad)`,
    `copy.deepcopy(p.grad)`, or a list of them (`[p.grad.clone() for p in params]`)."""
    if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
        node = node.elt
    if isinstance(node, (ast.List, ast.Tuple)):
        return bool(node.elts) and all(_copy_of_a_gradient(element) for element in node.elts)
    return (isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in _COPIES
            and "grad" in ast.unparse(node))


def _writes_a_gradient(tree) -> bool:
    """Whether the code stores into a gradient: assigns to `*.grad`, `*.grad.data` or an element of one, or calls
    `copy_` on one."""
    def names_a_grad(node) -> bool:
        text = ast.unparse(node)
        return text.endswith((".grad", ".grad.data")) or (isinstance(node, ast.Subscript) and "grad" in text)
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        if any(isinstance(target, (ast.Attribute, ast.Subscript)) and names_a_grad(target) for target in targets):
            return True
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "copy_"
                and isinstance(node.func.value, (ast.Attribute, ast.Subscript)) and names_a_grad(node.func.value)):
            return True
    return False


def _divided_copies(tree) -> dict:
    """{statement: where the copy was made (or the statement itself)} for each statement that divides a copy of a
    gradient in place (`_copy_of_a_gradient`): the copy itself (`p.grad.clone().div_(n)`, bound or dropped), or a
    name bound to one, or a loop variable over a list of them (`g /= n`, `g.div_(n)`, `torch._foreach_div_(gs, n)`).
    Only names bound once are followed: one bound again may hold p.grad itself. A function that writes into a
    gradient anywhere (`p.grad.copy_(g)`, `p.grad = g`, `p.grad.data = g`, `p.grad[...] = g`) may have written the
    copy back: nothing is reported for it."""
    if _writes_a_gradient(tree):
        return {}
    bindings: dict = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = [target for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name):
            targets = [node.target]
        else:
            continue
        for target in targets:
            bindings.setdefault(target.id, []).append(node)
    copies: dict = {}                                 # name -> the statement that made the copy
    for name, nodes in bindings.items():
        node = nodes[0]
        if len(nodes) == 1 and isinstance(node, ast.Assign) and _copy_of_a_gradient(node.value):
            copies[name] = node
    for name, nodes in bindings.items():             # for g in grads, where grads holds copies
        node = nodes[0]
        looped = isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.iter, ast.Name)
        if (len(nodes) == 1 and looped and node.iter.id in copies
                and isinstance(copies[node.iter.id].value, (ast.ListComp, ast.GeneratorExp, ast.List, ast.Tuple))):
            copies[name] = copies[node.iter.id]
    found: dict = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Div) and isinstance(node.target, ast.Name)
                and node.target.id in copies):
            found[node] = copies[node.target.id]
            continue
        if not isinstance(node, (ast.Assign, ast.Expr)):
            continue
        value = node.value.elt if isinstance(node.value, (ast.ListComp, ast.GeneratorExp)) else node.value
        if not (isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] in _IN_PLACE_DIVISIONS):
            continue
        method = isinstance(value.func, ast.Attribute) and ast.unparse(value.func.value) != "torch"
        divided = value.func.value if method else (value.args[0] if value.args else None)
        if divided is None:
            continue
        if _copy_of_a_gradient(divided):
            found[node] = None
        elif isinstance(divided, ast.Name) and divided.id in copies:
            found[node] = copies[divided.id]
    return found



def refuse_written_divisor(fn, name: str, what: str, divide_by: str, divided: tuple[str, ...] = ("grad",),
                           ignored: tuple[str, ...] = (), computed: bool = False) -> None:
    """CheckFailed, before any rank starts, if fn divides `what` by a number written in its code (`numeric_divisor`)
    where it must divide by `divide_by` (a count the run decides: the world size, the number of micro-batches).

    A number that equals the check's count passes there and is wrong in every other run (lessons 04, 05, 07, 08, 09,
    10, 12, 14, 16, 17). `ignored`: words whose presence in the divided text leaves a division alone (lesson 12's
    `total_steps`, where `step` is divided). `computed`: also refuse a divisor computed from constants alone
    (`computed_divisor`: lesson 12's `len(X) // (BATCH * 2)`, where the notebook's BATCH and X are the exercise's).
    """
    _refuse_written(numeric_divisor(fn, divided, ignored), f"{name} divides {what} by", f"divide by {divide_by}",
                    _COUNTS)
    found = computed_divisor(fn, divided, ignored) if computed else None
    if found is not None:
        text, value, statement = found
        raise CheckFailed(f"{name} divides {what} by {text} = {value}, computed from constants alone (`{statement}`): "
                          f"nothing in it changes with the number of ranks.\nHint: divide by {divide_by}: {_COUNTS}.")


def refuse_written_split(fn, name: str, split_into: str) -> None:
    """CheckFailed, before any rank starts, if fn splits a tensor into a number of pieces written in its code
    (`.chunk(2)`, `torch.chunk(x, 4)`, `.tensor_split(2)`) where it must split into `split_into` (lesson 01's
    ranks, lesson 03's devices, lesson 08's and 09's shards)."""
    _refuse_written(_first_number(fn, _split_count), f"{name} splits a tensor into", f"split into {split_into}",
                    _COUNTS)


def refuse_written_bound(fn, name: str, compare_with: str, words: tuple[str, ...] = ("norm",)) -> None:
    """CheckFailed, before any rank starts, if fn compares something whose text names one of `words` with a number
    written in its code (`norm > 1.0`) where it must compare with `compare_with` (lesson 17's max_norm). A ratio
    compared with a number (`norm / max_norm > 1`) passes: the bound is in the ratio."""
    _refuse_written(_first_number(fn, lambda node: _compared_number(node, words)), f"{name} compares the norm with",
                    f"compare with {compare_with}", "a run may clip at any value, and this check uses its own")


def refuse_written_shape(fn, name: str, take_from: str) -> None:
    """CheckFailed, before any rank starts, if fn reshapes a tensor (`.view`, `.reshape`) with a size of 3 or more
    written as a number in its code (`counts.view(3, -1)`) where every size follows from `take_from` (lesson 14's
    world size and number of experts). -1 and 1 pass: they name no size of the run; 2 passes: it may count a pair
    (`torch.stack([received, sent]).view(2, -1)`), and a 2 written for a size of lesson 14's first call fails in its
    second, where that size is 1 or 3."""
    _refuse_written(_first_number(fn, _shape_size), f"{name} reshapes a tensor with a size of",
                    f"take the sizes from {take_from}", _COUNTS)


def refuse_written_modulus(fn, name: str, modulo: str) -> None:
    """CheckFailed, before any rank starts, if fn takes something modulo a number of 3 or more written in its code
    (`(rank + 1) % 3`, `(rank - step) % 3`) where a ring wraps around `modulo` (lessons 02 and 15's world size).
    `% 2` passes: a ring may alternate on the parity of the rank (even ranks send first)."""
    _refuse_written(_first_number(fn, _modulus), f"{name} takes a rank modulo", f"take it modulo {modulo}", _COUNTS)


def _modulus(node) -> str | None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_number(node.right) \
            and isinstance(node.right.value, int) and node.right.value >= 3:
        return ast.unparse(node.right)
    return None


_COUNTS = "the same function must work for 2 or 64 of them, and this check runs with its own number"


def _refuse_written(found: tuple[str, str] | None, did: str, instead: str, why: str) -> None:
    if found is not None:
        number, statement = found
        raise CheckFailed(f"{did} {number}, a number written in the code (`{statement}`).\nHint: {instead}: {why}.")


def numeric_divisor(fn, divided: tuple[str, ...] = ("grad",), ignored: tuple[str, ...] = ()) -> tuple[str, str] | None:
    """(the number, the statement) of the first division in fn's source of something whose text names one of
    `divided` (and none of `ignored`) by a number written as such (`p.grad /= 3`, `grad = grad / 2`,
    `p.grad.div_(4)`, `torch.div(p.grad, 2)`, `loss / 3`, `linear.in_features // 2`, `divmod(step, 3)`), by a name
    the function binds once to a number (`world = 3`), or a multiplication by its reciprocal (`p.grad *= 0.5`,
    `* (1 / 3)`, `.mul_(0.5)`), or None (none, or no source to read)."""
    return _first_number(fn, lambda node: _divided_number(node, divided, ignored))


def computed_divisor(fn, divided: tuple[str, ...], ignored: tuple[str, ...] = ()) -> tuple[str, object, str] | None:
    """(the divisor as written, its value, the statement) of the first division in fn's source of a name or attribute
    named by `divided` (and none of `ignored`) by an expression computed from constants alone: numbers, the numbers of fn's
    module (a notebook's BATCH), len() of its objects (len(X)), int(), round(), abs(), math.ceil and math.floor,
    through names fn binds once (`per_epoch = len(X) // (BATCH * 2)`, `world_size = 2`); None where none is, or any
    part is fn's argument, a name bound more than once, an attribute or another call (len(sampler), mesh.size(0)),
    or there is no source to read. A bare number is `numeric_divisor`'s."""
    read = _source_and_tree(fn)
    if read is None:
        return None
    source, tree = read
    bound = _bound_once(tree)
    own = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)} | \
        {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}
    module = getattr(fn, "__globals__", {})

    def value_of(node, depth: int = 0):
        if depth > 20:
            return None
        if _is_number(node):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in bound:
                return value_of(bound[node.id][0], depth + 1)
            number = module.get(node.id) if node.id not in own else None
            return number if type(number) in (int, float) else None
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            left, right = value_of(node.left, depth + 1), value_of(node.right, depth + 1)
            try:
                return None if left is None or right is None else _ARITHMETIC[type(node.op)](left, right)
            except (ArithmeticError, ValueError, TypeError):
                return None
        if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
            called = ast.unparse(node.func)
            argument = node.args[0]
            if called == "len" and isinstance(argument, ast.Name) and argument.id not in own:
                sized = module.get(argument.id)
                return len(sized) if hasattr(sized, "__len__") and not isinstance(sized, type) else None
            shadowed = "." not in called and called in module and module[called] is not _CONSTANT_CALLS.get(called)
            if called in _CONSTANT_CALLS and not shadowed and called not in own:
                inner = value_of(argument, depth + 1)
                return None if inner is None else _CONSTANT_CALLS[called](inner)
        return None

    for node, divisor in _count_divisions(tree, divided, ignored):
        value = value_of(divisor)
        if value is not None:
            return ast.unparse(divisor), value, _quoted_division(source, tree, bound, node, divisor)
    return None


def whole_dataset_divisor(fn, divided: tuple[str, ...], ignored: tuple[str, ...] = ()) -> tuple[str, str] | None:
    """(the divisor as written, the statement) of the first division in fn's source of a name or attribute named by
    `divided` (and none of `ignored`) by an expression that counts a whole dataset through a sampler or loader,
    `len(<something>.dataset)`, directly or through a name fn binds once (`per_epoch = len(sampler.dataset) //
    BATCH`), and does not divide by a number of ranks (`world_size`, `get_world_size()`, `num_replicas`, any case:
    the whole dataset over them is a rank's share); None where none is, or there is no source to read. A
    DistributedSampler hands each rank its share of the dataset (lesson 12): counting the whole one makes each rank
    wait for batches it never gets."""
    read = _source_and_tree(fn)
    if read is None:
        return None
    source, tree = read
    bound = _bound_once(tree)

    def counts_the_dataset(node) -> bool:
        return any(isinstance(inner, ast.Call) and ast.unparse(inner.func) == "len" and len(inner.args) == 1
                   and isinstance(inner.args[0], ast.Attribute) and inner.args[0].attr == "dataset"
                   for part in _through_names(node, bound) for inner in ast.walk(part))

    def divides_by_the_ranks(node) -> bool:      # a number of ranks on the right of / or //, in any case
        return any(isinstance(inner, ast.BinOp) and isinstance(inner.op, (ast.Div, ast.FloorDiv))
                   and any(word in ast.unparse(right).lower() for right in _through_names(inner.right, bound)
                           for word in _RANK_COUNTS)
                   for part in _through_names(node, bound) for inner in ast.walk(part))

    for node, divisor in _count_divisions(tree, divided, ignored):
        if counts_the_dataset(divisor) and not divides_by_the_ranks(divisor):
            return ast.unparse(divisor), _quoted_division(source, tree, bound, node, divisor)
    return None


def _through_names(node, bound: dict, depth: int = 0):
    """node, then the value of each name in it that fn binds once (`_bound_once`), and theirs in turn: what the
    expression is computed from."""
    yield node
    if depth < 20:
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and inner.id in bound:
                yield from _through_names(bound[inner.id][0], bound, depth + 1)


_RANK_COUNTS = ("world_size", "num_replicas", "get_world_size")   # what a rank's share of a dataset is divided by


def _source_and_tree(fn) -> tuple[str, ast.AST] | None:
    """fn's source, dedented, and its syntax tree; None where there is no source to read."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        return source, ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None


def _count_divisions(tree, divided: tuple[str, ...], ignored: tuple[str, ...]):
    """(node, divisor) of each division in `tree`, in source order, of the count itself, named by `divided` and none
    of `ignored` (`step // per_epoch`, `divmod(step, per_epoch)`), by something other than a bare number; not of an
    expression of it (`step * BATCH * world_size // len(X)` has the ranks in it; `100 * step / len(X)` is a
    percentage)."""
    for node in sorted((node for node in ast.walk(tree) if hasattr(node, "lineno")),
                       key=lambda node: (node.lineno, node.col_offset)):
        for dividend, divisor, multiplies in _divisions(node):
            text = ast.unparse(dividend)
            if multiplies or _is_number(divisor) or not isinstance(dividend, (ast.Name, ast.Attribute)) \
                    or not any(word in text for word in divided) or any(word in text for word in ignored):
                continue
            yield node, divisor


def _quoted_division(source: str, tree, bound: dict, node, divisor) -> str:
    """The statement that divides, for a message; where the divisor came through a name fn binds once, the statement
    that computed it first (`per_epoch = ...`, then `epoch, position = divmod(step, per_epoch)`)."""
    statement = ast.get_source_segment(source, _statement_of(tree, node))
    names = [inner.id for inner in ast.walk(divisor) if isinstance(inner, ast.Name) and inner.id in bound]
    if names:
        statement = f"{ast.get_source_segment(source, bound[names[0]][1])}`, then `{statement}"
    return statement


_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
               ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_CONSTANT_CALLS = {"int": int, "round": round, "abs": abs, "math.ceil": math.ceil, "math.floor": math.floor,
                   "ceil": math.ceil, "floor": math.floor}


_DIVIDING_CALLS = ("div", "div_", "true_divide", "divide")
_MULTIPLYING_CALLS = ("mul", "mul_", "multiply")


def _divided_number(node, divided: tuple[str, ...], ignored: tuple[str, ...] = ()) -> str | None:
    """The divisor written as a number of a division (or a multiplication by a reciprocal) of something named by
    `divided`, as the text the message quotes ('3'; for `* 0.5`, '2'), else None."""
    for dividend, divisor, multiplies in _divisions(node):
        text = ast.unparse(dividend)
        if not any(word in text for word in divided) or any(word in text for word in ignored):
            continue
        count = _reciprocal_count(divisor) if multiplies else (
            ast.unparse(divisor) if _is_number(divisor) and divisor.value != 1 else None)
        if count is not None:
            return count
    return None


def _divisions(node) -> list[tuple]:
    """(dividend, divisor or factor, whether it multiplies) for each way node may divide: `/`, `//`, `/=`, `//=`,
    divmod, torch's div calls, and `*`, `*=` and mul calls (either operand may be the factor)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv)):
        return [(node.left, node.right, False)]
    if isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Div, ast.FloorDiv)):
        return [(node.target, node.value, False)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return [(node.left, node.right, True), (node.right, node.left, True)]
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Mult):
        return [(node.target, node.value, True)]
    if not isinstance(node, ast.Call):
        return []
    called = ast.unparse(node.func).split(".")[-1]
    if called == "divmod" and isinstance(node.func, ast.Name) and len(node.args) == 2:
        return [(node.args[0], node.args[1], False)]
    if called not in _DIVIDING_CALLS + _MULTIPLYING_CALLS:
        return []
    method = isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) != "torch"
    arguments = [node.func.value, *node.args] if method else list(node.args)
    if len(arguments) < 2:
        return []
    return [(arguments[0], arguments[1], called in _MULTIPLYING_CALLS)]


def _reciprocal_count(factor) -> str | None:
    """'k' when factor is 1 / k written as numbers (`1 / 3`) or as a fraction (`0.5`, `0.25`) of a whole k ≥ 2."""
    if isinstance(factor, ast.BinOp) and isinstance(factor.op, ast.Div) and _is_number(factor.left) \
            and factor.left.value == 1 and _is_number(factor.right) and factor.right.value >= 2:
        return ast.unparse(factor.right)
    if _is_number(factor) and isinstance(factor.value, float) and 0 < factor.value <= 0.5:
        count = 1 / factor.value
        if abs(count - round(count)) < 1e-9:
            return str(round(count))
    return None


def _split_count(node) -> str | None:
    """The count of a `t.chunk(4)`, `torch.chunk(t, 4)` or `tensor_split` call written as a number, else None."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("chunk", "tensor_split")):
        return None
    on_torch = isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"   # torch.chunk(t, 4)
    args = node.args[1:] if on_torch else node.args
    count = args[0] if args else next((keyword.value for keyword in node.keywords
                                       if keyword.arg in ("chunks", "sections", "indices_or_sections")), None)
    return ast.unparse(count) if count is not None and _is_number(count) else None


def _shape_size(node) -> str | None:
    """The first size of 3 or more written as a number in a `.view(...)` or `.reshape(...)` call, else None."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("view", "reshape")):
        return None
    sizes = [element for argument in node.args
             for element in (argument.elts if isinstance(argument, (ast.Tuple, ast.List)) else [argument])]
    return next((ast.unparse(size) for size in sizes
                 if _is_number(size) and isinstance(size.value, int) and size.value >= 3), None)


GUARD = 1e-6   # torch's clip_grad_norm_ adds 1e-6 to the norm; a bound no larger only keeps a division finite


def _compared_number(node, words: tuple[str, ...]) -> str | None:
    """The number a comparison holds on one side where the other names one of `words`, else None. 0, or a number no
    larger than GUARD (`norm > 1e-12`: a guard against dividing by zero), is no bound, and a ratio (`norm / max_norm >
    1`, `max_norm / (norm + 1e-6) < 1`) compared with a number is a coefficient's test: the bound is in the ratio."""
    if not isinstance(node, ast.Compare) or len(node.comparators) != 1:
        return None
    left, right = node.left, node.comparators[0]
    for side, other in ((left, right), (right, left)):
        if _is_ratio(side):
            continue
        if _is_number(other) and abs(other.value) > GUARD and any(word in ast.unparse(side) for word in words):
            return ast.unparse(other)
    return None


def _is_ratio(node) -> bool:
    """Whether node divides one quantity by another (neither written as a number), or names such a ratio, also as a
    number read out of a tensor (`float(norm / max_norm)`, `(norm / max_norm).item()`: `_unwrapped`)."""
    node = _unwrapped(node)
    return getattr(node, "ratio", False) or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
                                              and not _is_number(node.left) and not _is_number(node.right))


NUMBER_READERS = ("item", "float", "double")     # a tensor's methods that keep its value: .item() as a number


def _unwrapped(node):
    """What `float(...)`, `(...).item()`, `.float()` or `.double()` read the value of (repeatedly), else node."""
    while isinstance(node, ast.Call) and not node.keywords:
        if isinstance(node.func, ast.Name) and node.func.id == "float" and len(node.args) == 1:
            node = node.args[0]
        elif isinstance(node.func, ast.Attribute) and node.func.attr in NUMBER_READERS and not node.args:
            node = node.func.value
        else:
            break
    return node


def _is_number(node) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _first_number(fn, number_of) -> tuple[str, str] | None:
    """(the number, the statement that holds it) of the first node of fn's source for which `number_of(node)` gives
    a number as written, or None (none, or no source to read)."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
        tree = _NumbersOfNames(_bound_once(tree)).visit(tree)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    found = [(node, number) for node in ast.walk(tree) if (number := number_of(node)) is not None]
    if not found:
        return None
    node, number = min(found, key=lambda item: (item[0].lineno, item[0].col_offset))
    statement = _statement_of(tree, node)
    quoted = ast.get_source_segment(source, statement)
    bound = next((inner.bound_by for inner in ast.walk(node) if hasattr(inner, "bound_by")), None)
    if bound is not None:   # the number came through a name: quote where it was written too
        quoted = f"{ast.get_source_segment(source, bound)}`, then `{quoted}"
    return number, quoted


def _statement_of(tree, node):
    """The simple statement of `tree` that holds `node` (node itself where none does)."""
    return next((stmt for stmt in ast.walk(tree) if isinstance(stmt, ast.stmt) and not hasattr(stmt, "body")
                 and (stmt.lineno, stmt.col_offset) <= (node.lineno, node.col_offset)
                 and (node.end_lineno, node.end_col_offset) <= (stmt.end_lineno, stmt.end_col_offset)), node)


def _bound_once(tree) -> dict[str, tuple]:
    """{name: (its value, the statement)} for each name the function binds exactly once, with `=` to a value of its
    own (`per_epoch = 3`, `ratio = norm / max_norm`); a name bound again (`+=`, a loop, an argument) is not one."""
    bindings: dict[str, list] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = (zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple)
                         and isinstance(node.value, ast.Tuple) and len(target.elts) == len(node.value.elts)
                         else [(target, node.value)])
                for name, value in pairs:
                    for bound in ast.walk(name):
                        if isinstance(bound, ast.Name):
                            bindings.setdefault(bound.id, []).append((value if bound is name else None, node))
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.NamedExpr, ast.comprehension)):
            for bound in ast.walk(node.target):
                if isinstance(bound, ast.Name):
                    bindings.setdefault(bound.id, []).append((None, node))
        elif isinstance(node, ast.arg):
            bindings.setdefault(node.arg, []).append((None, node))
    return {name: found[0] for name, found in bindings.items() if len(found) == 1 and found[0][0] is not None}


class _NumbersOfNames(ast.NodeTransformer):
    """Each read of a name bound once to a number becomes that number (remembering the statement that bound it in
    `bound_by`), so the readers of written numbers see `world = 3; p.grad /= world` as `p.grad /= 3`; a read of a
    name bound once to a ratio is marked `ratio` (`_is_ratio`: `ratio = norm / max_norm; ratio > 1`)."""

    def __init__(self, bound: dict[str, tuple]):
        self.bound = bound

    def visit_Name(self, node):
        value, statement = self.bound.get(node.id, (None, None)) if isinstance(node.ctx, ast.Load) else (None, None)
        if _is_number(value):
            number = ast.copy_location(ast.Constant(value.value), node)
            number.bound_by = statement
            return number
        if _is_ratio(value):
            node.ratio = True
        return node


# What an exercise's stub may keep above its `raise NotImplementedError` (lesson 07's names the rank and the shapes):
# statements that can neither return nor skip the raise, so the function can only ever raise it.
STUB_PREAMBLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Import, ast.ImportFrom, ast.Pass, ast.FunctionDef)


def ensure_written(fn, name: str | None = None) -> None:
    """Fail at once, without starting ranks, if fn is still the exercise's NotImplementedError stub: its body
    (after a docstring) ends in `raise NotImplementedError(...)` with only STUB_PREAMBLE statements above it.
    `name`: what the message calls it (default: fn's own name; a method is named by its class)."""
    tree = source_tree(fn)
    if tree is None:
        return  # no source to read (a lambda in a string, a builtin): let the ranks find out
    node = tree.body[0] if tree.body else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    stub = body and isinstance(body[-1], ast.Raise) and all(isinstance(line, STUB_PREAMBLE) for line in body[:-1])
    raised = body[-1].exc if stub else None
    call = raised.func if isinstance(raised, ast.Call) else raised
    if isinstance(call, ast.Name) and call.id == "NotImplementedError":
        args = raised.args if isinstance(raised, ast.Call) else []
        hint = args[0].value if args and isinstance(args[0], ast.Constant) else ""
        raise CheckFailed(f"{name or fn.__name__} is not written yet: it raised NotImplementedError({hint!r}).\n"
                          "Replace the `raise NotImplementedError` line with your answer.")


def run_answers_on_ranks(runner, answers, nprocs: int, timeout: float, what: str, args: tuple = (),
                         **options) -> list[list]:
    """Run several answers in one launch: `runner(rank, answers, *args)` returns one result per answer, in order.

    Returns [answer][rank] -> that answer's result on that rank; `options` are `run_on_ranks`'s (explain,
    timeout_hint). The check tests give a check's wrong answers this way, one launch for all of them
    (lessons 02, 04, 05, 08, 10, 14); the public check runs a tuple of one.
    """
    results = run_on_ranks(runner, (tuple(answers), *args), nprocs, timeout, what, **options)
    return [[results[rank][index] for rank in range(nprocs)] for index in range(len(answers))]


def with_a_note(note: str, said: str) -> str:
    """A failure's hint (`said`; "" for none) after a `note` of what the check's earlier run showed and where to
    look, for a failure at a check's second size (lessons 07, 09). A `said` that says what the ranks did before its
    own "Hint: " line keeps that line."""
    if not said:
        return note
    return f"{note}\n{said}" if "\nHint: " in said else f"{note}\nHint: {said}"


def judge_in_order(runs, judge, note) -> None:
    """Judge a check's runs in order, the exercise's first: `runs` are (key, results) pairs, `judge(key, results)`
    raises CheckFailed, and a failure after the first run gets `note(key)` (what the first showed: it was judged
    right) before its hint (`with_a_note`)."""
    for index, (key, results) in enumerate(runs):
        try:
            judge(key, results)
        except CheckFailed as failure:
            if index == 0:
                raise
            what, _, hint = str(failure).partition("\nHint: ")
            raise CheckFailed(f"{what}\n{with_a_note(note(key), hint)}") from None


# torch.distributed's own functions as imported, whatever stand-in a check puts in their place later: called (the
# agreement's all_gather) and read for their signatures (a stand-in may take *args, **kwargs)
_TORCH_OWN = {name: value for name, value in vars(torch.distributed).items() if callable(value)}


def torch_arguments(name: str, args: tuple, kwargs: dict) -> dict:
    """What a call of torch.distributed's `name` passes for each of its parameters, by name, bound to torch's own
    signature (instruments.collectives.call_arguments); {} where they do not fit it."""
    function = _TORCH_OWN.get(name)
    return (call_arguments(function, args, kwargs) or {}) if function is not None else {}


class CollectivesApart(RuntimeError):
    """Raised on every rank together when the ranks' next collective calls disagree (`agree_or_stop`)."""


def agree_or_stop(mine: tuple[int, ...], apart: list, describe, exempt=None) -> None:
    """Every rank says what it is about to call (`mine`: a few ints, the same count on every rank); where they differ,
    `apart` gets every rank's, in rank order, and every rank raises CollectivesApart(describe(everyone)) together,
    unless `exempt(everyone)` says to let the calls go on (and hang, as they would without the check).

    Ranks that disagree on a collective (which one, its src, its size) stop with one line instead of waiting for each
    other or aborting in gloo (lessons 04 and 16's checks); it goes through torch's own all_gather, not a check's
    stand-in.
    """
    mine_tensor = torch.tensor(list(mine), dtype=torch.int64)
    gathered = [torch.empty_like(mine_tensor) for _ in range(torch.distributed.get_world_size())]
    _TORCH_OWN["all_gather"](gathered, mine_tensor)
    everyone = [tuple(t.tolist()) for t in gathered]
    if len(set(everyone)) > 1 and not (exempt and exempt(everyone)):
        apart.append(everyone)
        raise CollectivesApart(describe(everyone))


def agreeing_collectives(names, before):
    """Inside a rank: each call of `dist.<name>` (name in `names`) over every rank that the answer makes, not one
    made inside another, first runs `before(name, given)`, `given` its arguments by parameter name (torch's
    signature, defaults filled in); `before` calls `agree_or_stop` with what the ranks must agree on (lesson 04's
    check: a broadcast's src; lesson 16's: which collective, its src and its tensor's bytes)."""
    inside = []

    def make(name):
        def wrap(original):
            def call(*args, **kwargs):
                given = torch_arguments(name, args, kwargs)
                group = given.get("group")
                if inside or (group is not None and group is not torch.distributed.group.WORLD):
                    return original(*args, **kwargs)
                before(name, given)
                inside.append(True)
                try:
                    return original(*args, **kwargs)
                finally:
                    inside.pop()
            call.__name__ = name
            return call
        return wrap

    return replacing_dist_calls({name: make(name) for name in names})


def groups_of(rank: int, world_sizes, name: str) -> Iterator[int]:
    """In a rank launched with init_process_group=False: each of `world_sizes` that `rank` belongs to (ranks 0 to
    size - 1), in the order given, with a default gloo group of that size set up for the loop's body and destroyed
    after it. A check runs an answer at a second size this way, in the launch that exists (lessons 07, 09, 11).

    Each group meets under a prefix of its own on the launcher's store (`check/{name}/{size}`), so the sizes may
    come in any order (the exercise's first) and a rank outside a group only skips it.
    """
    import datetime

    import torch.distributed as dist
    # torch.distributed.nn.functional's collectives take group=group.WORLD as a default argument, read when the
    # module is first imported: imported inside an answer while the first size's group stands, they would keep that
    # group (destroyed after it) at the next size. Imported here, before any group, the default is None: the group
    # standing when they are called.
    import torch.distributed.nn.functional  # noqa: F401

    from ddp_lab.launcher.rendezvous import own_store   # lazy: the rank's one store connection

    for world_size in world_sizes:
        if rank >= world_size:
            continue
        store = dist.PrefixStore(f"check/{name}/{world_size}", own_store(datetime.timedelta(seconds=300)))
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
        try:
            yield world_size
        finally:
            dist.destroy_process_group()


def run_on_ranks(runner, args: tuple, nprocs: int, timeout: float, what: str, explain=None,
                 timeout_hint=None, init_process_group: bool = True):
    """Launch `runner(rank, *args)` on gloo ranks; turn any failure into CheckFailed.

    Args:
        runner: a function importable from ddp_lab (it wraps the learner's fn).
        args: its extra arguments (the learner's function among them).
        nprocs: number of ranks.
        timeout: seconds before a hang is declared a deadlock.
        what: the learner's function name, for messages.
        explain: optional `explain(failure) -> str | None` (failure: the first failing rank's
            `ddp_lab.launcher.errors.RankFailure`): a hint naming the likely mistake behind an
            exception or a crash, added to the message (one that contains "\nHint: " says first
            what the ranks did, then the hint, as `timeout_hint`).
        timeout_hint: what to say about a hang: a string, or `timeout_hint(calls) -> str` given
            the set of torch.distributed calls the stuck ranks wait in (None: outside
            torch.distributed), or `timeout_hint(calls, places)` also given {stuck rank: its
            call}, which may return None; default (and for None): the point-to-point hints of
            lesson 02. A hint that contains "\nHint: " says first what the ranks did, then the hint.
        init_process_group: False for a runner that sets up its own groups (lesson 11: one of 3 ranks, then
            one of 2), as `launch`'s option.
    """
    try:
        return launch(runner, args=args, nprocs=nprocs, backend="gloo", timeout=timeout,
                      init_process_group=init_process_group)
    except LaunchTimeout as error:
        raise CheckFailed(timeout_message(error, what, timeout, timeout_hint)) from None
    except LaunchError as error:
        raise CheckFailed(failure_message(error, what, explain)) from None


def timeout_message(error, what: str, timeout: float, hint=None) -> str:
    """The CheckFailed text for a hang: where each stuck rank waits, and a hint (see run_on_ranks)."""
    # a rank waiting for the next size's group (`groups_of`) is waiting for the check, not in the answer's code
    places = {rank: _public_name(blocked_in(f.details)) for rank, f in sorted(error.failures.items())
              if f.kind == "timeout" and f" in {groups_of.__name__}" not in f.details}
    stacks = {rank: failure.details for rank, failure in error.failures.items()}
    where = ", ".join(f"rank {rank} in dist.{call}" if call else
                      f"rank {rank} in .wait()" if ".wait(" in stuck_line(stacks[rank]) else
                      f"rank {rank} outside torch.distributed" for rank, call in places.items())
    calls = set(places.values())
    if callable(hint):
        takes_places = len(inspect.signature(hint).parameters) > 1
        hint = hint(calls, places) if takes_places else hint(calls)
    if hint is None:
        hint = _point_to_point_hint(calls) if calls <= POINT_TO_POINT | {None} else _collective_hint(calls)
    if "\nHint: " not in hint:
        hint = f"Hint: {hint}"
    return f"{what} did not finish within {timeout:g} s, so the check stopped it. Stuck: {where}.\n{hint}"


_TOP_FRAME = re.compile(r'File "([^"]+)", line (\d+) in \w+')


def stuck_line(stack: str) -> str:
    """The source line a stuck rank's innermost frame of the learner's code was running ('' if unknown), from its
    Python stack (a fault-handler dump): frames of torch, of other libraries and of the check's own wrappers (a
    request's watched .wait()) are passed over. The answer was defined in this process (a notebook cell or a test
    file), so its lines are in linecache here though the rank ran them (timeout_message: a rank in a work's .wait())."""
    for frame in _TOP_FRAME.finditer(stack.split("Current thread")[-1]):
        if library_of(frame.group(1)) is None:
            return linecache.getline(frame.group(1), int(frame.group(2))).strip()
    return ""


POINT_TO_POINT = {"send", "recv", "isend", "irecv", "batch_isend_irecv"}


def _public_name(call: str | None) -> str | None:
    """The torch.distributed function a learner called, for one c10d calls on its behalf."""
    return "new_group" if call and call.startswith("_new_process_group") else call


def _collective_hint(calls: set) -> str:
    """The default hint for ranks stuck in collectives (lessons whose checks give none of their own)."""
    named = ", ".join(f"dist.{call}" for call in sorted(call for call in calls if call))
    return (f"the ranks wait in collectives that do not pair up ({named}): every rank must make the same "
            "collective calls, in the same order, with the same arguments (one src for a broadcast, the same "
            "group on every member, new_group called by every rank), and none may skip one (e.g. under "
            "`if rank == 0:`).")


def _point_to_point_hint(calls: set) -> str:
    if calls == {"send"}:
        return ("every rank called a blocking dist.send first, and a send waits until the peer posts "
                "the matching recv, which no rank ever reaches: a deadlock. Start the send with "
                "dist.isend (and .wait() after the recv), or let even ranks send first and odd ranks "
                "receive first.")
    if calls == {"recv"}:
        return ("every rank waits in dist.recv for a message nobody sends: check the peers (send to "
                "(rank + 1) % world_size, receive from (rank - 1) % world_size) and that every recv "
                "has a matching send.")
    return ("the ranks wait for each other: every send needs a matching recv on the peer, with "
            "the same number of elements; look for a peer index or a step count that differs.")


def failure_message(error, what: str, explain=None) -> str:
    """The CheckFailed text for a launch that failed: rank, exception or crash, its last lines, a hint."""
    message = _failure_text(error, what)
    failure = error.failures[error.first_rank]
    exception = failure.exception
    settled = isinstance(exception, ForbiddenCollective) or is_stub(failure)  # these already say the fix
    hint = explain(failure) if explain and not settled else None
    if hint and "\nHint: " in hint:   # it says first what the ranks did, then the hint (as timeout_message)
        return f"{message}\n{hint}"
    return f"{message}\nHint: {hint}" if hint else message


def _failure_text(error, what: str) -> str:
    rank = error.first_rank
    failure = error.failures[rank]
    exception = failure.exception
    if isinstance(exception, ForbiddenCollective):
        return f"rank {rank}: {exception}.\nHint: the point of the exercise is to build the collective yourself."
    if isinstance(exception, CaseFailed):
        head = failure.details.split("The above exception was the direct cause")[0].rstrip()
        what = exception.name or what
        frames = parse_frames(head)
        library = library_of(frames[-1]["file"]) if frames else None
        if is_stub(failure):
            yours = [frame["fn"] for frame in frames if frame["fn"] != "call_case"]
            called = what in yours and yours[-1] != what  # the stub is a function the answer calls
            stub = f"{yours[-1]} (called by {what})" if called else what
            return (f"{stub} is not written yet: it raised NotImplementedError({exception.message!r}).\n"
                    "Replace the `raise NotImplementedError` line with your answer.")
        inside = f" inside {library}" if library and library != "ddp_lab" else ""
        return (f"rank {rank}: {what} raised {exception.kind}{inside}: {exception.message}\n"
                f"while {exception.case}.\n{your_frames(head)}").rstrip()
    return f"rank {rank} failed while running {what}: {failure.summary}\n\n{_last_lines(failure.details, 12)}"


def is_stub(failure) -> bool:
    """Whether a rank's failure is the exercise's stub: a NotImplementedError raised by the learner's code.

    torch raises NotImplementedError too (an nn.Module without forward, an operator DTensor
    cannot shard): raised inside a library, it is that library's error, not an unwritten answer.
    `failure`: a `ddp_lab.launcher.errors.RankFailure` whose exception is a CaseFailed.
    """
    exception = failure.exception
    if not isinstance(exception, CaseFailed) or exception.kind != "NotImplementedError":
        return False
    frames = parse_frames(failure.details.split("The above exception was the direct cause")[0])
    if not frames:
        return True
    source = [line for line in frames[-1]["text"][1:] if set(line.strip()) - set("^~ ")]
    return library_of(frames[-1]["file"]) is None and raises_the_stub(source[0] if source else None)


# Where a formatted traceback goes on with the exception raised while handling the one above it
_DURING_HANDLING = re.compile(r"^During handling of the above exception, another exception occurred:\s*$", re.M)


def parse_frames(text: str) -> list[dict]:
    """The frames of a formatted traceback: file (or 'Cell In[n]'), line, function and the source lines shown.

    Of a chain of exceptions raised while handling another (torch re-raises a KeyError as its own ValueError), the
    frames of the last one, the exception that was raised: the one that shows the learner's line."""
    frames: list[dict] = []
    for line in _DURING_HANDLING.split(text)[-1].splitlines():
        match = _FRAME_LINE.match(line)
        if match:
            cell = match.group("cell")
            frames.append({"file": f"Cell {cell}" if cell else match.group("file"),
                           "line": int(match.group("cline") or match.group("line")),
                           "fn": match.group("cfn") or match.group("fn"), "text": [line]})
        elif frames and line.startswith("    "):
            frames[-1]["text"].append(line)
        elif frames and line.strip() and not line.startswith(" "):
            break  # the exception's own line(s) follow the last frame
    return frames


def your_frames(text: str) -> str:
    """The learner's frames of a rank's traceback, and where it entered a library: the lines that locate a mistake.

    The check's own frames (call_case) and everything inside torch but the first call into it
    are left out, so a message shows the learner's lines instead of a dozen of torch's. A library's
    frames that lead into the package's own (a check's recorder of torch's operations, lesson 08)
    are the way in to the check, not where the learner's call went wrong: not named either.
    """
    shown, entered = [], None
    for frame in parse_frames(text):
        library = library_of(frame["file"])
        if library is None:
            shown.extend(line for line in frame["text"] if set(line.strip()) - set("^~ "))
            entered = None
        elif library == "ddp_lab":
            entered = None
        elif entered is None and shown:
            entered = (f"  ... inside {library}: {os.path.basename(frame['file'])}, line {frame['line']}, "
                       f"in {frame['fn']}")
    if entered:
        shown.append(entered)
    return "\n".join(shown)


def _last_lines(text: str, count: int) -> str:
    lines = text.rstrip().splitlines()
    return "\n".join(lines[-count:])


def held_in(values: torch.Tensor, tensors: list) -> bool:
    """Whether one of `tensors` (flattened) held `values` (flattened), whole or as a contiguous run: evidence that a
    collective ran on a copy or a flat buffer of a gradient, not on the gradient (the checks of lessons 10 and 14)."""
    values = values.flatten()
    return any(torch.allclose(tensor[start:start + len(values)], values, atol=1e-6)
               for tensor in tensors for start in range(len(tensor) - len(values) + 1))


def uniform_ratio(got: torch.Tensor, want: torch.Tensor) -> float | None:
    """r where got == r * want on every element (0.0 for a got of zeros), else None: evidence of a gradient scaled
    by a factor (divided twice, never divided, ...). Introduced in the checks of lessons 01 and 05."""
    got, want = got.detach().double(), want.detach().double()
    if got.shape != want.shape or not want.abs().max() > 0:
        return None
    mask = want.abs() > 1e-3 * want.abs().max()
    ratio = float((got[mask] / want[mask]).median())
    return ratio if torch.allclose(got, want * ratio, rtol=1e-4, atol=1e-7) else None


def times_of(ratio: float) -> str:
    """'1/2 of', '8x', '3/4 of', '1.37x': a `uniform_ratio` in words, to come before 'the right gradient'."""
    fraction = Fraction(ratio).limit_denominator(64)
    if abs(float(fraction) - ratio) > 1e-4 * abs(ratio):
        return f"{ratio:.4g}x"
    if fraction.denominator == 1:
        return f"{fraction.numerator}x"
    return f"{fraction.numerator}/{fraction.denominator} of"


def first_mismatch(got: torch.Tensor, expected: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-5):
    """Index (a tuple) of the first element where got and expected differ, or None."""
    bad = ~torch.isclose(got, expected, atol=atol, rtol=rtol)
    if not bad.any():
        return None
    return tuple(int(i) for i in bad.nonzero()[0])


def path_of(f) -> str | None:
    """The absolute path that `f` (a path, or a file object opened on one) names, else None (a buffer, a file
    descriptor, bytes). Lesson 12's check follows checkpoints by it, lesson 16's the files a recovery reads."""
    try:
        path = os.fspath(f if isinstance(f, (str, os.PathLike)) else getattr(f, "name", None))
    except TypeError:
        return None
    return os.path.abspath(path) if isinstance(path, str) else None


def how_it_changed(given: torch.Tensor, original: torch.Tensor, name: str = "x") -> str | None:
    """None where an answer left the tensor it was given as it was (`given`, against a copy kept before the call),
    else what changed: 'x[2, 3] is now 1.5, was -200', or its new shape or dtype. Lessons 14 and 17 refuse an answer
    that scales or adds into its input in place."""
    if given.shape != original.shape or given.dtype != original.dtype:
        return f"{name} is now {describe(given)}"
    same = (given == original) | (given.isnan() & original.isnan())   # a NaN left as it was is no change
    if bool(same.all()):
        return None
    index = tuple(int(i) for i in (~same).nonzero()[0])
    shown, was = two_numbers(given[index].item(), original[index].item())
    return f"{name}[{', '.join(map(str, index))}] is now {shown}, was {was}"


def two_numbers(got: float, want: float) -> tuple[str, str]:
    """got and want with 6 significant digits, or as many more as it takes for them to read differently (a message
    must never say 'got 0.2, expected 0.2'; lessons 07 and 13)."""
    for digits in range(6, 18):
        shown, expected = f"{got:.{digits}g}", f"{want:.{digits}g}"
        if shown != expected:
            return shown, expected
    return repr(got), repr(want)


def describe(value) -> str:
    """A short description of a returned value, for 'got ...' messages: a tuple or a list by its length and its
    items' types ('a tuple of 3: (Tensor, Tensor, dtype)'), an array of another library (numpy's) by its type and
    shape, never a repr cut off in the middle of a tensor."""
    if torch.is_tensor(value):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    if hasattr(value, "shape") and hasattr(value, "dtype"):   # another library's array (numpy's): not its repr
        kind = f"{type(value).__module__.split('.')[0]}.{type(value).__name__}"
        return f"a {kind} of shape {tuple(value.shape)} and dtype {value.dtype}, not a torch tensor"
    if type(value) in (tuple, list):          # not torch.Size or a named result (torch.return_types.max)
        kind = type(value).__name__
        if not value:
            return f"an empty {kind}"
        shown = [_type_of(item) for item in value[:6]] + (["..."] if len(value) > 6 else [])
        ends = "()" if isinstance(value, tuple) else "[]"
        return f"a {kind} of {len(value)}: {ends[0]}{', '.join(shown)}{ends[1]}"
    return f"{type(value).__name__} {value!r}"[:120]


def _type_of(value) -> str:
    """An item's type in `describe`: 'Tensor', 'None', 'float', 'dtype', ..."""
    if torch.is_tensor(value):
        return "Tensor"
    return "None" if value is None else type(value).__name__


# gloo's abort for a message of another size than the buffer it arrives in: torch 2.13.0 and 2.15.0's gloo add
# "Received data size doesn't match expected size"; torch 2.8.0's prints the failed condition alone
_GLOO_SIZE_ABORT = re.compile(r"(\d+) vs (\d+)\. Received data size doesn't match expected size"
                              r"|op\.preamble\.length <= op\.nbytes\. (\d+) vs (\d+)")


def gloo_size_abort(text: str) -> tuple[int, int] | None:
    """(bytes that arrived, bytes the buffer holds) where `text` (a crashed rank's output) shows gloo aborting the
    rank because a message did not fit the buffer of a receive or a collective (its TCP transport's enforce, then
    SIGABRT); None otherwise. Lessons 02, 11 and 15's checks name such a crash."""
    found = _GLOO_SIZE_ABORT.search(text)
    if found is None:
        return None
    arrived, room = (int(size) for size in found.groups() if size is not None)
    return arrived, room


def right_by_luck(where: str, what: str, call: str, before: str) -> CheckFailed:
    """The failure of an answer whose values came out right though the work of an async collective was never waited
    for: whether its result had arrived was a matter of timing, so another run can fail. `where`: the rank and value
    ("rank 1, parameter '0.bias'"); `what` came out right ("the gradient"); `call`, the collective as written
    ("dist.all_reduce(p.grad, async_op=True)"); `before`: what must come after the wait ("zero1_step returns").
    Lessons 04, 09, 10 and 14's checks refuse such answers (instruments.collectives.RequestWatcher tells them)."""
    return CheckFailed(f"{where}: {what} came out right here, but by luck: {call} returned a work that was never "
                       f"waited for, and whether its result arrives before {before} depends on timing.\nHint: an "
                       f"async collective returns at once, before its result has arrived: keep the work it returns "
                       f"and call its .wait() before {before}.")


def recording_async_calls(name: str, works: list, requests):
    """Inside a rank: for every call of torch.distributed's `name` (a collective taking a `tensor`: "all_reduce",
    "broadcast") started with async_op=True, `works` gets [the storage of its tensor, the work it returned, whether the
    answer waited for that work]: the last turns True when it does (`requests`, a watching_requests watcher). The
    evidence for `right_by_luck` in lesson 04's checks."""
    def make(original):
        def call(*args, **kwargs):
            tensor = torch_arguments(name, args, kwargs).get("tensor")
            work = original(*args, **kwargs)
            if work is not None and torch.is_tensor(tensor):
                entry = [tensor.data_ptr(), work, False]
                works.append(entry)
                requests.watch(work, lambda: entry.__setitem__(2, True))
            return work
        return call
    return replacing_dist_calls({name: make})

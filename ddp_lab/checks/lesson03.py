"""Checks for the exercises of notebooks/03-dataparallel.ipynb: DataParallel by hand.

    ddp_lab.checks.lesson03.check_scatter_gather(scatter_batch, gather_outputs)
    ddp_lab.checks.lesson03.check_data_parallel_loss(data_parallel_loss)

Both run in the notebook's own process (DataParallel is one process with threads).

Introduced in notebooks/03-dataparallel.ipynb.
"""

from __future__ import annotations

import contextlib
import itertools
import linecache
import re
import sys
import threading
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import answer_raised, describe, library_of, refuse_written_split

# (batch size, number of devices): uneven splits, and a batch smaller than the devices
SCATTER_CASES = ((10, 4), (12, 3), (7, 3), (2, 4))


def _batch(rows: int) -> tuple[torch.Tensor, ...]:
    """Three tensors of one batch: inputs, labels, a mask; row i is recognisable in each."""
    x = torch.arange(rows * 3, dtype=torch.float32).view(rows, 3)
    labels = torch.arange(rows) * 10
    mask = torch.arange(rows * 4, dtype=torch.float32).view(rows, 2, 2) / 100
    return x, labels, mask


def _call(fn, what: str, *args):
    try:
        return fn(*args)
    except NotImplementedError as error:
        raise CheckFailed(f"{what} is not written yet: it raised NotImplementedError({str(error)!r}). "
                          "Replace the `raise NotImplementedError` line with your answer.") from None
    except Exception as error:
        raise CheckFailed(f"{what} raised {type(error).__name__}: {error}") from error


def check_scatter_gather(scatter_batch, gather_outputs) -> None:
    """Check scatter for a batch of several tensors, and gather.

    `scatter_batch(tensors, n)` takes a tuple of tensors with the same first dimension
    and returns one tuple per device: device k's chunk of every tensor, split along dim 0
    with `torch.chunk` sizes (like nn.DataParallel). `gather_outputs(outputs)` concatenates
    the per-device outputs back into one batch along dim 0, in device order.

    A split into a number of chunks written in the code is refused before anything runs.

    Introduced in notebooks/03-dataparallel.ipynb.
    """
    refuse_written_split(scatter_batch, "scatter_batch", "n, the number of devices")
    for rows, n in SCATTER_CASES:
        tensors = _batch(rows)
        case = f"scattering a batch of {rows} rows (3 tensors) over {n} devices"
        got = _call(scatter_batch, "scatter_batch", tuple(t.clone() for t in tensors), n)
        _compare_scatter(got, tensors, n, case, lambda: _reads_n_as_a_size(scatter_batch))
    for rows, n in sorted(SCATTER_CASES, key=lambda case: case[0] % case[1] != 0):  # an even split first
        outputs = list(torch.chunk(_batch(rows)[0] * 2, n))
        got = _call(gather_outputs, "gather_outputs", [o.clone() for o in outputs])
        expected = torch.cat(outputs)
        case = f"gathering {len(outputs)} outputs of {[len(o) for o in outputs]} rows"
        if not torch.is_tensor(got):
            raise CheckFailed(f"{case}: gather_outputs returned {describe(got)}, expected one tensor.")
        if got.shape != expected.shape:
            raise CheckFailed(f"{case}: got shape {tuple(got.shape)}, expected {tuple(expected.shape)}."
                              f"{_gather_shape_hint(got, outputs)}")
        if got.dtype != expected.dtype:   # torch.equal compares values only: 2.0 in float64 equals 2.0 in float32
            got_name, want_name = (str(dtype).replace("torch.", "") for dtype in (got.dtype, expected.dtype))
            raise CheckFailed(f"{case}: gather_outputs returned {got_name}, expected {want_name} (the outputs' "
                              "dtype).\nHint: concatenating keeps the outputs' dtype (torch.cat): return the batch "
                              "without converting it.")
        if not torch.equal(got, expected):
            raise CheckFailed(f"{case}: the rows are out of order (row 0 is {got[0].tolist()}, expected "
                              f"{expected[0].tolist()}).\nHint: concatenate in device order, device 0 first, "
                              "so the output rows line up with the input rows.")
    passed("scatter_batch splits every tensor like torch.chunk (3-3-3-1 for 10 over 4) and "
           "gather_outputs puts the batch back together")


def _gather_shape_hint(got: torch.Tensor, outputs: list[torch.Tensor]) -> str:
    """A hint for a gathered batch of the wrong shape, where its shape or values show how it was made ("" where
    they show nothing)."""
    rows = [len(output) for output in outputs]
    if got.shape == (len(outputs), *outputs[0].shape):
        return ("\nHint: torch.stack puts the outputs side by side in a new dimension, one per device; gathering "
                "concatenates their rows along dim 0, the batch dimension (torch.cat(outputs, dim=0)).")
    if got.dim() == outputs[0].dim() and got.shape[0] == rows[0] and got.shape[1] == sum(o.shape[1] for o in outputs):
        return "\nHint: concatenate along dim 0, the batch dimension (torch.cat(outputs, dim=0))."
    if got.numel() == sum(output.numel() for output in outputs):
        return (f"\nHint: every element is there, in another shape: concatenate the outputs along dim 0 as they "
                f"are (torch.cat(outputs, dim=0)), so each row keeps its shape {tuple(outputs[0].shape[1:])}.")
    if got.dim() != outputs[0].dim() or got.shape[1:] != outputs[0].shape[1:]:
        return ""
    if got.shape == outputs[0].shape and torch.equal(got, sum(outputs)):
        return ("\nHint: this is the outputs added element by element (sum(outputs)); gathering puts their rows one "
                "after another: torch.cat(outputs, dim=0).")
    used = [k for k, output in enumerate(outputs) if any(torch.equal(output, got[start:start + len(output)])
                                                         for start in range(len(got) - len(output) + 1))]
    missing = [k for k in range(len(outputs)) if k not in used]
    left_out = (f" (output{'s' * (len(missing) > 1)} {', '.join(map(str, missing))} left out)"
                if missing and used else "")
    return (f"\nHint: got {len(got)} rows, expected {sum(rows)}: the rows of all {len(outputs)} outputs ({rows}), "
            f"each once{left_out}.")


def _device_order(got, expected) -> list[int] | None:
    """The chunk each device got, where the devices got torch.chunk's chunks (all of them) in another order, else
    None."""
    if not isinstance(got, (list, tuple)) or len(got) != len(expected):
        return None
    order = [next((k for k, want in enumerate(expected) if _same(parts, want)), None) for parts in got]
    return order if None not in order and sorted(order) == list(range(len(expected))) and order != sorted(order) \
        else None


def _split_by_size(got, tensors, n) -> bool:
    """Whether got is every tensor split into chunks of n rows (torch.split(t, n)), grouped by device or by tensor,
    where that differs from torch.chunk's n chunks."""
    by_size = [torch.split(t, n) for t in tensors]
    expected = list(zip(*(torch.chunk(t, n) for t in tensors)))
    return not _same(expected, list(zip(*by_size))) and (_same(got, list(zip(*by_size))) or _same(got, by_size))


def _reads_n_as_a_size(scatter_batch) -> bool:
    """Whether scatter_batch returns torch.split(t, n)'s chunks of n rows in every case of SCATTER_CASES where those
    differ from torch.chunk's: one case alone may match by chance (torch.chunk(t, 3) of 10 rows is torch.split(t, 4)'s
    [4, 4, 2] too)."""
    for rows, n in SCATTER_CASES:
        tensors = _batch(rows)
        if _same(list(zip(*(torch.chunk(t, n) for t in tensors))), list(zip(*(torch.split(t, n) for t in tensors)))):
            continue
        try:
            got = _call(scatter_batch, "scatter_batch", tuple(t.clone() for t in tensors), n)
        except CheckFailed:
            return False
        if not _split_by_size(got, tensors, n):
            return False
    return True


def _per_tensor(got, tensors) -> bool:
    """Whether got has one entry per tensor, entry i holding pieces of tensor i (its dtype and the shape of its rows)
    only: the chunks grouped by tensor, not by device."""
    return len(got) == len(tensors) and all(
        isinstance(entry, (list, tuple)) and entry and all(
            torch.is_tensor(part) and part.dtype == tensor.dtype and part.shape[1:] == tensor.shape[1:]
            for part in entry)
        for entry, tensor in zip(got, tensors))


def _batch_rows(part: torch.Tensor, tensor: torch.Tensor) -> list[int] | None:
    """The rows of `tensor` (the batch) that `part`'s rows are, in order, each the first equal row; None where a row
    is none of them."""
    if part.dim() == 0 or part.shape[1:] != tensor.shape[1:]:
        return None
    flat, rows = tensor.reshape(len(tensor), -1), part.reshape(len(part), -1)
    found = [(flat == row).all(1).nonzero().flatten() for row in rows]
    return None if any(len(at) == 0 for at in found) else [int(at[0]) for at in found]


def _compare_scatter(got, tensors, n, case, reads_n_as_a_size) -> None:
    """CheckFailed where got is not torch.chunk's chunks of `tensors` grouped by device. `reads_n_as_a_size()`:
    whether the answer returns torch.split's chunks of n rows in every case (asked only where this one does)."""
    expected = list(zip(*(torch.chunk(t, n) for t in tensors)))
    if not isinstance(got, (list, tuple)):
        raise CheckFailed(f"{case}: scatter_batch returned {describe(got)}, expected a list with one tuple per device.")
    by_size = [torch.split(t, n) for t in tensors]  # n read as a chunk SIZE: chunks of n rows
    if _split_by_size(got, tensors, n) and reads_n_as_a_size():
        raise CheckFailed(f"{case}: got chunks of {[len(c) for c in by_size[0]]} rows, expected "
                          f"{[len(e[0]) for e in expected]} rows on {n} devices.\nHint: these are chunks of {n} "
                          f"rows, n read as a chunk SIZE, as torch.split(t, {n}) reads it; torch.chunk(t, {n}) takes "
                          f"the NUMBER of chunks, which is what one chunk per device needs.")
    if len(got) != len(expected) and _per_tensor(got, tensors):
        raise CheckFailed(f"{case}: got {len(got)} entries, one per *tensor*; expected {len(expected)}, one per "
                          "device.\nHint: return a list over devices whose entry k is a tuple (x_k, labels_k, mask_k) "
                          "of device k's chunks, e.g. list(zip(*chunked_tensors)).")
    order = _device_order(got, expected)
    if order is not None:
        raise CheckFailed(f"{case}: the devices got torch.chunk's chunks in the order {order}, expected "
                          f"{sorted(order)}.\nHint: device k takes the k-th chunk of every tensor (device 0 the first "
                          "rows), so that gathering in device order puts the batch back together.")
    if len(got) != len(expected):
        raise CheckFailed(f"{case}: got {len(got)} chunks, expected {len(expected)} (torch.chunk gives "
                          f"{[len(e[0]) for e in expected]} rows).\nHint: split with torch.chunk(t, n, dim=0); "
                          "with fewer rows than devices some devices get nothing.")
    for device, (got_parts, want_parts) in enumerate(zip(got, expected)):
        if not isinstance(got_parts, (list, tuple)) or len(got_parts) != len(want_parts):
            raise CheckFailed(f"{case}: device {device} got {describe(got_parts)}, expected a tuple of "
                              f"{len(want_parts)} tensors (its chunk of every input tensor).")
        for index, (part, want) in enumerate(zip(got_parts, want_parts)):
            where = f"{case}: device {device}, tensor {index}"
            if not torch.is_tensor(part):
                raise CheckFailed(f"{where}: got {describe(part)}, expected a tensor.")
            other = next((k for k, chunk in enumerate(want_parts) if k != index and _same(part, chunk)), None)
            if other is not None:
                raise CheckFailed(f"{where}: got tensor {other}'s chunk (shape {tuple(part.shape)}), expected tensor "
                                  f"{index}'s (shape {tuple(want.shape)}).\nHint: keep the order of the tensors "
                                  "given: entry k holds device k's chunk of each tensor, in the order of `tensors`.")
            if part.shape != want.shape:
                raise CheckFailed(_shape_problem(where, got, expected, device, index, tensors[index]))
            if part.dtype != want.dtype:   # torch.equal compares values only: 10 in float32 equals 10 in int64
                got_name, want_name = (str(dtype).replace("torch.", "") for dtype in (part.dtype, want.dtype))
                raise CheckFailed(f"{where}: got {got_name}, expected {want_name} (that tensor's dtype).\nHint: "
                                  "scattering only splits: every chunk keeps its tensor's dtype (torch.chunk "
                                  "returns views of it), labels included.")
            if not torch.equal(part, want):
                rows, wanted = _batch_rows(part, tensors[index]), _batch_rows(want, tensors[index])
                if rows is not None:
                    said = f"rows {rows} of the batch, expected rows {wanted}"
                else:
                    row = next(k for k in range(len(part)) if not torch.equal(part[k], want[k]))
                    said = f"row {row} is {part[row].tolist()}, expected {want[row].tolist()}"
                raise CheckFailed(f"{where}: right shape, wrong rows ({said}).\nHint: each device takes a contiguous "
                                  "slice of the batch (device 0 the first rows), the same rows from every tensor.")


def _shape_problem(where: str, got, expected, device: int, index: int, tensor: torch.Tensor) -> str:
    """What differs when device `device`'s chunk of tensor `index` has the wrong shape: that tensor's rows on every
    device beside torch.chunk's; torch.tensor_split is named only when the rows are its balanced sizes."""
    part, want = got[device][index], expected[device][index]
    sizes = [len(e[index]) for e in expected]
    got_sizes = [len(g[index]) if isinstance(g, (list, tuple)) and len(g) > index and torch.is_tensor(g[index])
                 and g[index].dim() else "?" for g in got]
    balanced = [len(c) for c in torch.tensor_split(tensor, len(expected))]
    if part.dim() != want.dim() or part.shape[1:] != want.shape[1:]:
        hint = "split along dim 0, the batch dimension; every other dimension stays whole"
    elif len(part) == len(tensor) and len(expected) > 1:
        hint = (f"tensor {index} was not split: device {device} got all {len(tensor)} of its rows. Split every "
                "tensor of the batch the same way (torch.chunk(t, n) for each)")
    elif got_sizes == balanced != sizes:
        hint = (f"these are torch.tensor_split's balanced sizes; DataParallel splits like torch.chunk: ceil(B/n) "
                "rows per device, the last one smaller")
    else:
        hint = "DataParallel splits like torch.chunk: ceil(B/n) rows per device, the last one smaller"
    return (f"{where}: got shape {tuple(part.shape)}, expected {tuple(want.shape)} (tensor {index}'s rows per "
            f"device {got_sizes}, expected {sizes}).\nHint: {hint}.")


def _same(got, expected) -> bool:
    """True when got has expected's nesting of lists/tuples and equal tensors at the leaves."""
    if torch.is_tensor(expected):
        return torch.is_tensor(got) and got.shape == expected.shape and torch.equal(got, expected)
    return (isinstance(got, (list, tuple)) and len(got) == len(expected)
            and all(_same(g, e) for g, e in zip(got, expected)))


# --- a DataParallel training step -------------------------------------------------------

BARRIER_SECONDS = 5.0
TURN_SECONDS = 2.0       # after the barrier, chunk k's replica waits at most this long for its turn to finish
# (its place in _finishing_order: the replicas before it have returned), so the order holds on a loaded machine
_turn = threading.Condition()
# A thread the answer starts runs its target only once the answer waits for its threads (a join, or a replica's forward
# in the calling thread) or this long after its start: a thread that reads the loop's index when it runs (a lambda
# made in the loop) then reads it after the loop has moved on, every time, not only when the machine is slow.
HOLD_SECONDS = 0.5
_barrier: list[threading.Barrier] = []  # set only while the learner's function runs
_held: list[threading.Event] = []       # meanwhile: set when the answer's threads may run their targets
_chunks: list[torch.Tensor] = []        # torch.chunk(x, n) of the check's batch, while the learner's function runs
_caller: list[threading.Thread] = []    # the thread that called the learner's function, meanwhile
_entered: list[tuple[int, int, int, threading.Thread, str | None]] = []
# per forward: (id of the module, chunk index or -1, rows, the thread (the object: an ident is reused once a thread
# ends, so threads run one after the other may share one), the answer's line constructing a Thread
# that was running when the forward ran in the calling thread, or None)
_finished: list[int] = []               # the chunk index of each forward, in the order the forwards returned
_graph: list[tuple[bool, bool]] = []    # per forward: (grad mode on, the replica's weight computed from another
#                                          tensor, as p.clone() of the model's parameter is)
_thread_errors: list[tuple[threading.Thread, BaseException]] = []   # (thread, exception) of each thread that
#                                          raised while the learner's function ran, in the order they raised


def _finishing_order(chunks: int) -> list[int]:
    """The order the replicas finish in: odd chunks first, then even ones (1, 3, 0, 2 for 4 chunks). Neither chunk
    order, nor its reverse, nor a rotation of it, so a gather in finishing order tells itself apart."""
    return [*range(1, chunks, 2), *range(0, chunks, 2)]


def _thread_call_line() -> str | None:
    """The answer's source line, on this call's stack, that constructs a threading.Thread (None if there is none)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code is not check_data_parallel_loss.__code__:
        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        if re.search(r"\bThread\s*\(", line):
            return line
        frame = frame.f_back
    return None


class _Recorder(nn.Module):
    """A small MLP whose forward waits until every replica is inside forward at the same time.

    If the replicas run one after the other, the first one waits in vain and the barrier
    breaks: proof that they did not run in parallel threads.
    """

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _barrier:
            index = next((k for k, chunk in enumerate(_chunks) if chunk.shape == x.shape and torch.equal(chunk, x)),
                         -1)
            thread = threading.current_thread()
            if thread in _caller and _held:   # the caller runs a replica itself: the threads it started may go
                _held[0].set()
            _entered.append((id(self), index, len(x), thread, _thread_call_line() if thread in _caller else None))
            weight = self.net[0].weight
            _graph.append((torch.is_grad_enabled(), weight.grad_fn is not None))
            if index < 0:    # not one of torch.chunk's chunks: the replica it waits for will never come
                _barrier[0].abort()
            _barrier[0].wait()
            if index >= 0:   # a fixed finishing order, not the chunks': gathering must not depend on it
                place = _finishing_order(len(_chunks)).index(index)
                with _turn:
                    _turn.wait_for(lambda: len(_finished) >= place, timeout=TURN_SECONDS)
            out = self.net(x)
            with _turn:
                _finished.append(index)
                _turn.notify_all()
            return out
        return self.net(x)


_NOT_PARALLEL = (f"the replicas did not run at the same time: the first forward waited {BARRIER_SECONDS:g} s "
                 "for the others, which never arrived (they run one after the other).\nHint: parallel_apply "
                 "starts one threading.Thread per replica, starts them all, then joins them all (not start, "
                 "join, start, join; and not a plain loop).")


def _not_parallel(entered, caller: threading.Thread) -> str:
    """Why the barrier broke when every replica ran one of torch.chunk's chunks: from the threads the forwards ran in
    (`caller`: the thread that called the answer)."""
    threads = {thread for _, _, _, thread, _ in entered}
    if 1 < len(threads) < len(entered) and caller not in threads:
        return (f"the replicas did not all run at the same time: {len(entered)} forwards ran in {len(threads)} "
                f"threads, so at most {len(threads)} at once (a pool with fewer workers than replicas); the first "
                f"waited {BARRIER_SECONDS:g} s for the others, which never arrived.\nHint: one thread per replica, "
                "all started before any is joined: threading.Thread(target=work, args=(k,)) for every k, or a pool "
                "with as many workers as replicas.")
    if not entered or any(thread != caller for _, _, _, thread, _ in entered):
        return _NOT_PARALLEL
    said = (f"the replicas did not run at the same time: every forward ran in the thread that called "
            f"data_parallel_loss, one after the other (the first waited {BARRIER_SECONDS:g} s for the others, "
            "which never arrived): no replica ran in a thread of its own.")
    line = next((line for *_, line in entered if line), None)
    if line:
        return (f"{said}\nHint: the forward ran while `{line}` was constructing a Thread: `target=work(k)` calls "
                "work(k) right there, in this thread, and hands the Thread its result (None) as target. Pass the "
                "function and its arguments: threading.Thread(target=work, args=(k,)).")
    return (f"{said}\nHint: parallel_apply starts one threading.Thread(target=work, args=(k,)) per replica, starts "
            "them all, then joins them all; a plain loop runs the replicas one after the other.")


def _one_chunk_for_all(entered, chunks, raised: Exception | None) -> str | None:
    """The feedback where every replica's forward ran on one and the same of several chunks (`entered`: the
    forwards, as `_entered` records them), with what the answer raised after (`raised`, or None); None otherwise."""
    indices = [index for _, index, *_ in entered]
    if len(chunks) < 2 or len(indices) < 2 or len(set(indices)) != 1 or indices[0] < 0:
        return None
    chunk = indices[0]
    last = chunk == len(chunks) - 1
    then = f" Then data_parallel_loss raised {type(raised).__name__}: {raised}." if raised is not None else ""
    said = (f"all {len(indices)} replica forwards ran on chunk {chunk}{' (the last)' if last else ''} of the "
            f"{len(chunks)} chunks, none on the others.{then}")
    if last:
        return (f"{said}\nHint: each thread read the loop's index when it ran, after the loop had moved on to its "
                "last value: a lambda or a function defined in the loop reads k when it is called, not when its "
                "Thread is made, and a thread made after the loop gets the last k. Hand each thread its own index "
                "when making it: threading.Thread(target=work, args=(k,)) inside the loop.")
    return f"{said}\nHint: replica k runs chunks[k]: every chunk once, each in its own thread."


def _model() -> nn.Module:
    torch.manual_seed(3)
    return _Recorder()


def _scatter_problem(chunks, entered=None) -> str | None:
    """Where a replica ran on another chunk than torch.chunk's (so the barrier waited for one that never came)."""
    entered = list(_entered) if entered is None else entered
    if all(index >= 0 for _, index, *_ in entered):
        return None
    rows, sizes = sorted(rows for _, _, rows, *_ in entered), [len(c) for c in chunks]
    if len(chunks) > 1 and rows and all(r == sum(sizes) for r in rows):
        return (f"every replica ran on the whole batch ({sum(sizes)} rows), none on a chunk of it ({sizes} rows "
                f"here).\nHint: replica k runs chunk k: pass chunks[k], not the whole x, to the replica's forward.")
    if rows != sorted(sizes) and (len(rows) == len(chunks) or any(r not in sizes for r in rows)):
        balanced = [len(c) for c in torch.tensor_split(torch.empty(sum(sizes)), len(chunks))]
        how = (f" torch.tensor_split balances the sizes ({balanced}); DataParallel's scatter does not."
               if rows == sorted(balanced) and balanced != sizes else "")
        return (f"the replicas ran on chunks of {rows} rows; DataParallel scatters with torch.chunk(x, n), "
                f"{sizes} rows here ({sum(sizes)} rows over {len(chunks)} devices).\nHint: scatter with "
                f"torch.chunk(x, n): one chunk per device, ceil(len / n) rows each, the last one shorter.{how}")
    strangers = sum(index < 0 for _, index, *_ in entered)
    return (f"{strangers} replica(s) ran on rows that are not one of torch.chunk(x, n)'s chunks (the sizes match: "
            f"{sizes} rows here, other rows).\nHint: replica k runs chunk k of torch.chunk(x, n): a contiguous "
            "slice of the batch, the first rows to replica 0, the rows as they are.")


def _loss_hint(got: float, x: torch.Tensor, y: torch.Tensor, n: int, finished: list[int]) -> str:
    """A hint only where the loss value itself shows the mistake; `finished`: the chunks in the order they finished."""
    model = _model()
    with torch.no_grad():
        outputs = [model(chunk) for chunk in torch.chunk(x, n)]
        targets = torch.chunk(y, n)
        for order in itertools.permutations(range(len(outputs))):
            if list(order) == sorted(order) or abs(F.mse_loss(torch.cat([outputs[k] for k in order]), y).item()
                                                   - got) >= 1e-5:
                continue
            found = ", ".join(map(str, order))
            if list(order) == finished:
                return (f"the outputs were gathered out of chunk order: in the order the threads finished (chunks "
                        f"{found} here). Store replica k's output at index k and concatenate in chunk order.")
            shifts = {(k - chunk) % len(order) for k, chunk in enumerate(order)}
            shift = shifts.pop() if len(shifts) == 1 else None
            shifted = (" Position k holds chunk k - 1's output (position 0 the last chunk's): an index off by one, "
                       "e.g. chunks[k - 1] where chunks[k] is meant." if shift == 1 else
                       f" Every chunk's output is {shift} positions from its own (round the end)." if shift else "")
            return (f"the gathered batch holds the chunks' outputs in the order {found}, expected "
                    f"{', '.join(map(str, sorted(order)))}.{shifted} Replica k runs chunks[k] and its output goes "
                    "to position k.")
        losses = torch.stack([F.mse_loss(o, t) for o, t in zip(outputs, targets)])
        if abs(losses.mean().item() - got) < 1e-5:
            return ("gather the outputs and compute the loss once on the gathered batch; a mean of per-chunk losses "
                    "weights the short last chunk (10 rows over 4 devices: 3-3-3-1) too much.")
        if abs(losses.sum().item() - got) < 1e-5:
            return (f"this is the SUM of the {len(outputs)} chunks' losses: gather the outputs and compute the loss "
                    "once on the gathered batch, F.mse_loss(torch.cat(outputs), y), the mean over every element.")
    return "F.mse_loss(torch.cat(outputs), y) once, over the whole gathered batch (its mean over every element)."


# (rows, devices): an uneven split (3-3-3-1), then fewer chunks than devices (6 rows over 4: torch.chunk makes 3 of 2
# rows, and DataParallel runs only as many replicas as there are chunks: device_ids[:len(inputs)])
LOSS_CASES = ((10, 4), (6, 4))


def check_data_parallel_loss(data_parallel_loss) -> None:
    """Check a hand-written DataParallel forward + loss.

    `data_parallel_loss(model, x, y, n)` must scatter x over n devices, replicate the model
    with differentiable copies of its parameters, run the replicas in one thread each,
    gather the outputs and return `F.mse_loss(gathered, y)`. The check calls `backward()` on
    the result and compares the model's gradients with single-process training, for each of
    LOSS_CASES: 10 rows over 4 devices, then 6 rows, which torch.chunk splits into 3 chunks.
    A replica's thread that raises fails the check with its error (threading would only print it).
    A thread the answer starts runs only once the answer waits for it (HOLD_SECONDS at most), so a thread that
    reads its index late always reads the loop's last one.
    A split into a number of chunks written in the code is refused before anything runs.

    Introduced in notebooks/03-dataparallel.ipynb.
    """
    refuse_written_split(data_parallel_loss, "data_parallel_loss", "n, the number of devices")
    for number, (rows, n) in enumerate(LOSS_CASES):
        chunks = len(torch.chunk(torch.empty(rows), n))
        try:
            _check_one_loss(data_parallel_loss, rows, n)
        except CheckFailed as failure:
            if number == 0:
                raise
            first = LOSS_CASES[0]
            raise CheckFailed(f"{first[0]} rows over {first[1]} devices were right; with {rows} rows over {n} "
                              f"devices torch.chunk makes {chunks} chunks of {-(-rows // n)} rows (ceil({rows}/{n})), "
                              f"and DataParallel runs {chunks} replicas: {failure}") from None
    passed(f"data_parallel_loss: loss and gradients == single process, one replica per chunk in its own thread "
           f"({LOSS_CASES[0][0]} rows over {LOSS_CASES[0][1]} devices, then {rows} rows in {chunks} chunks)")


def _not_joined(unjoined: int, started: int) -> str | None:
    """A hint where the answer raised without having joined `unjoined` of the `started` threads it started: it may
    have read their outputs before they existed."""
    if unjoined <= 0:
        return None
    return (f"\nHint: data_parallel_loss raised without having joined {unjoined} of the {started} threads it started: "
            "it read the outputs without waiting for the replicas' forwards to make them. Join every thread "
            "(thread.join()) before gathering the outputs.")


@contextlib.contextmanager
def _watching_threads(held: threading.Event | None = None):
    """For the block: a list that gets each threading.Thread whose start() the answer's own code called (not a
    library's, as a thread pool's), and a set of those whose join() returned with the thread ended. Thread's start
    and join are replaced on the class for the block, then put back. `held`: an event each of those threads waits
    for, at most HOLD_SECONDS, before it runs its target; a join sets it."""
    started: list[threading.Thread] = []
    joined: set[threading.Thread] = set()
    start, join = threading.Thread.start, threading.Thread.join

    def watched_start(self):
        if library_of(sys._getframe(1).f_code.co_filename) is None:
            started.append(self)
            if held is not None:
                run = self.run

                def held_run():
                    held.wait(HOLD_SECONDS)
                    run()

                self.run = held_run
        return start(self)

    def watched_join(self, timeout=None):
        if held is not None:
            held.set()
        result = join(self, timeout)
        if not self.is_alive():
            joined.add(self)
        return result

    threading.Thread.start, threading.Thread.join = watched_start, watched_join
    try:
        yield started, joined
    finally:
        threading.Thread.start, threading.Thread.join = start, join


def _let_forwards_finish(threads: list[threading.Thread], seconds: float = 2.0) -> None:
    """Wait a little for the threads an answer started (`threads`) and the replicas' forwards it left running
    (threads never joined), so that they end before the check forgets its chunks (a forward that finds them gone
    prints a traceback of the check's own; one that starts later, in the next check, would run as one of its
    replicas). A forward whose thread raised never finishes: it is not waited for."""
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    while len(_finished) + len(_thread_errors) < len(_entered) and time.monotonic() < deadline \
            and not _barrier[-1].broken:
        time.sleep(0.01)


def _record_thread_error(args) -> None:
    """threading.excepthook while the learner's function runs: keep a thread's exception for the feedback instead
    of printing its traceback. A BrokenBarrierError is the check's own barrier (`_Recorder`), which `_entered`
    explains."""
    if not issubclass(args.exc_type, threading.BrokenBarrierError):
        _thread_errors.append((args.thread, args.exc_value))


def _thread_failure(errors: list, raised: Exception | None, rows: int, chunks: int, n: int) -> str:
    """The feedback for an answer one of whose threads raised: the first thread's error with the learner's lines,
    what the answer did after it, and a hint (`_past_the_chunks`' where an index ran past the chunks)."""
    thread, error = errors[0]
    count = len(errors)   # one per thread: an exception ends its thread
    case = (f"running a replica in a thread of its own ({rows} rows over {n} devices"
            + (f"; {count} threads raised)" if count > 1 else ")"))
    said = str(answer_raised(f"data_parallel_loss's thread {thread.name!r}", error, case))
    then = ("returned a loss" if raised is None or isinstance(raised, threading.BrokenBarrierError) else
            f"then raised {type(raised).__name__}: {raised}")
    hint = _past_the_chunks(error, chunks, n) if isinstance(error, Exception) else None
    return (f"{said}\nAn exception ends its own thread only: data_parallel_loss went on without that replica's "
            f"output and {then}."
            + (hint or "\nHint: fix the error in the thread's function; to have it raised in data_parallel_loss, "
               "catch it there (try/except, kept in a list) and raise it again after every thread is joined."))


def _outputs_dropped(error: Exception, finished: int, chunks: int) -> str | None:
    """A hint where every replica's forward returned and the answer then gathered an empty list: the outputs the
    threads' function returned, which a Thread drops."""
    # torch.cat([]): a ValueError in torch 2.13 and 2.15, a RuntimeError in 2.8
    if isinstance(error, (ValueError, RuntimeError)) and "non-empty list" in str(error) and finished >= chunks:
        return (f"\nHint: all {chunks} replica forwards ran and returned, but torch.cat got an empty list: a Thread "
                "drops what its target returns. Store each output where the gathering reads it (outputs[k] = ... "
                "in the thread's function).")
    return None


def _past_the_chunks(error: Exception, chunks: int, n: int) -> str | None:
    """A hint when an error shows an index that ran past the last chunk to n: an IndexError, or torch.cat given None
    at a position >= the number of chunks (an outputs list of n entries, the last ones never filled)."""
    if chunks >= n:
        return None
    at = re.search(r"element (\d+) .*NoneType", str(error))
    if isinstance(error, IndexError) or (isinstance(error, TypeError) and at and int(at.group(1)) >= chunks):
        return (f"\nHint: something counted to n = {n} where there are {chunks} chunks (an index past the last "
                "chunk, or an outputs list with entries no replica filled): size the replicas, the threads and the "
                "outputs by the chunks torch.chunk returned (len(chunks)), not by n.")
    return None


def _not_connected(graph: list[tuple[bool, bool]]) -> str:
    """Why the loss does not require grad, from what each replica's forward saw (`_graph`)."""
    if not graph:
        return "Hint: run the replicas' forwards on the chunks with differentiable copies of the parameters."
    if not all(enabled for enabled, _ in graph):
        return "Hint: a replica's forward ran under torch.no_grad(), which records no graph to back-propagate."
    if not all(computed for _, computed in graph):
        return ("Hint: the replicas ran with parameters that are not computed from the model's own (p.detach(), "
                "p.data, a deepcopy's parameters, or copies made under torch.no_grad()): copy them differentiably, "
                "{name: p.clone() for name, p in model.named_parameters()}, with grad mode on.")
    return ("Every replica ran with differentiable copies of the parameters and grad mode on, so the graph was cut "
            "after the forwards, on the way from the outputs to the loss (.detach(), .data, .item() or a new "
            "torch.tensor(...)).\nHint: gather the outputs as they come back (torch.cat) and take the loss on them.")


def _check_one_loss(data_parallel_loss, rows: int, n_devices: int) -> None:
    """One case of check_data_parallel_loss: `rows` rows over `n_devices` devices."""
    generator = torch.Generator().manual_seed(5)
    x, y = torch.randn(rows, 5, generator=generator), torch.randn(rows, 3, generator=generator)
    reference = _model()
    F.mse_loss(reference(x), y).backward()
    expected_loss = F.mse_loss(reference(x), y).item()

    model = _model()
    chunks = torch.chunk(x, n_devices)
    _barrier.append(threading.Barrier(len(chunks), timeout=BARRIER_SECONDS))
    caller = threading.current_thread()
    _chunks[:], _entered[:], _finished[:], _graph[:], _caller[:] = chunks, [], [], [], [caller]
    _thread_errors[:], _held[:] = [], [threading.Event()]
    hook, threading.excepthook = threading.excepthook, _record_thread_error
    raised, unjoined, started = None, 0, []
    try:
        with _watching_threads(_held[0]) as (started, joined):
            try:
                loss = data_parallel_loss(model, x.clone(), y.clone(), n_devices)
            except Exception as error:
                raised = error
                unjoined = sum(thread not in joined for thread in started)   # as the answer raised
    finally:
        _held.pop().set()   # threads never waited for run now, and end before the check lets go of its chunks
        _let_forwards_finish(started)
        threading.excepthook = hook
        broken = _barrier.pop().broken
        entered, finished, graph, thread_errors = list(_entered), list(_finished), list(_graph), list(_thread_errors)
        _chunks[:], _caller[:], _thread_errors[:] = [], [], []
    if thread_errors and not isinstance(raised, NotImplementedError):
        raise CheckFailed(_thread_failure(thread_errors, raised, rows, len(chunks), n_devices)) from None
    if isinstance(raised, threading.BrokenBarrierError):
        raise CheckFailed(_scatter_problem(chunks, entered) or _not_parallel(entered, caller)) from None
    if isinstance(raised, NotImplementedError):
        raise CheckFailed(f"data_parallel_loss is not written yet: it raised NotImplementedError({str(raised)!r}). "
                          "Replace the `raise NotImplementedError` line with your answer.") from None
    same = _one_chunk_for_all(entered, chunks, raised)
    if same:
        raise CheckFailed(same) from None
    if raised is not None:
        if broken:  # a thread hit the broken barrier and the answer hid it
            raise CheckFailed(_scatter_problem(chunks, entered) or _not_parallel(entered, caller)) from None
        hint = _past_the_chunks(raised, len(chunks), n_devices) or _not_joined(unjoined, len(started))
        raise CheckFailed(f"data_parallel_loss raised {type(raised).__name__}: {raised}{hint or ''}"
                          f"{_outputs_dropped(raised, len(finished), len(chunks)) or ''}") from raised
    if broken:
        raise CheckFailed(_scatter_problem(chunks, entered) or _not_parallel(entered, caller))
    if not torch.is_tensor(loss) or loss.numel() != 1:
        raise CheckFailed(f"data_parallel_loss returned {describe(loss)}, expected the scalar loss tensor.")
    if not loss.requires_grad:
        raise CheckFailed("the loss does not require grad: it is not connected to the model's parameters.\n"
                          + _not_connected(graph))
    if any(p.grad is not None for p in model.parameters()):
        raise CheckFailed("the model's parameters had gradients already when data_parallel_loss returned: it ran "
                          "backward itself, so the caller's loss.backward() adds them a second time (or fails: the "
                          "graph was freed).\nHint: return the loss without calling backward(); the training step "
                          "that calls data_parallel_loss runs loss.backward() once.")
    try:
        loss.backward()
    except RuntimeError as error:
        raise CheckFailed(f"backward() on the loss data_parallel_loss returned raised RuntimeError: {error}") from None
    if all(p.grad is None for p in model.parameters()):
        if graph and all(enabled and computed for enabled, computed in graph):   # the replicas were right
            raise CheckFailed("after loss.backward() the model's own parameters have no gradient. "
                              + _not_connected(graph))
        raise CheckFailed("after loss.backward() the model's own parameters have no gradient: the gradients "
                          "stayed in the replicas.\nHint: replicate with differentiable copies "
                          "({name: p.clone() for name, p in model.named_parameters()}); copy.deepcopy or "
                          "p.detach() creates new leaf tensors that the model never sees.")
    modules = {module for module, *_ in entered}
    if id(model) in modules:
        raise CheckFailed("the threads ran the model itself, not replicas of it.\nHint: replicate: for each chunk "
                          "a copy of the module (copy.deepcopy(model)) run with differentiable copies of the "
                          "parameters (torch.func.functional_call), as DataParallel does, one per device.")
    if len(modules) < len(chunks):
        raise CheckFailed(f"{len(chunks)} chunks ran on {len(modules)} module(s): threads shared a replica. "
                          "functional_call swaps the module's parameters in for the call and back after it, so "
                          "threads sharing one module race (the result changes from run to run).\nHint: one "
                          "replica per chunk: a deepcopy of the module and its own copies of the parameters.")
    if abs(loss.item() - expected_loss) > 1e-5:
        raise CheckFailed(f"loss {loss.item():.6f}, expected {expected_loss:.6f} (the MSE over the whole batch).\n"
                          f"Hint: {_loss_hint(loss.item(), x, y, n_devices, finished)}")
    for (name, p), p_ref in zip(model.named_parameters(), reference.parameters()):
        if p.grad is None:
            raise CheckFailed(f"parameter {name!r} got no gradient: replicate every parameter.")
        if not torch.allclose(p.grad, p_ref.grad, atol=1e-6, rtol=1e-5):
            ratio = (p.grad.norm() / p_ref.grad.norm()).item()
            raise CheckFailed(f"gradient of {name!r} differs from single-process training (norm ratio "
                              f"{ratio:.3f}).\nHint: the loss must be the mean over the gathered batch, once.")

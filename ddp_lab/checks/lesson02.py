"""Checks for the exercises of notebooks/02-collectives.ipynb: collectives built from send/recv.

    ddp_lab.checks.lesson02.check_ring_reduce_scatter(ring_reduce_scatter)
    ddp_lab.checks.lesson02.check_ring_all_gather(ring_all_gather)
    ddp_lab.checks.lesson02.check_all_reduce_mean(all_reduce_mean)

Each runs the answer on 3 gloo ranks (so sizes 10, 7, 2, 16 do not divide evenly), then, where it
is right there, on 4: a world size written into the answer as a number (world_size - 1 as 2, say)
holds on 3 ranks only. The last case of each check is float64, the others float32: a receive
buffer made in torch's default dtype gets a float64 message twice its size, gloo aborts the rank,
and the bytes it reports name the dtype (`_dtype_abort_hint`). Every collective is disabled
inside the ranks while the answer runs, and a short timeout turns a deadlock into a message. The
expected results come from the library itself: before the answer runs, every rank calls
`dist.all_reduce` on the same inputs. The checks log each send and receive a rank makes (its peer
and its size, `ddp_lab.checks.p2p_log`), one folder per case, so that a hang or a crash is
explained from what the ranks did. A ring taken modulo a number written in the code (`% 3`) is
refused from the source, before any rank starts.

Introduced in notebooks/02-collectives.ipynb.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import os
import re
import tempfile
from typing import NamedTuple

import torch
import torch.distributed as dist

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (CaseFailed, call_case, describe, ensure_written, first_mismatch, gloo_size_abort,
                                   only_point_to_point, refuse_written_modulus, run_answers_on_ranks, run_on_ranks,
                                   source_tree)
from ddp_lab.checks.p2p_log import (RECEIVES, SENDS, Call, log_path, logging_point_to_point, memory_span, read_log,
                                    receives_never_waited, watching_point_to_point)

WORLD_SIZE = 3
SECOND_WORLD_SIZE = 4   # an answer right on WORLD_SIZE ranks runs again on 4: a number written for 3 ranks shows
# 12 divides by 3; the others do not; 2 < world size. 16's chunks (6, 5, 5) are larger than any other size's: a
# buffer or a padding of a size written as a number (4, the largest chunk of 12 and of 10) fits the others only.
# The last case of each is float64 (FLOAT64_SIZES), the others float32: a receive buffer made in torch's default
# dtype (torch.zeros(n)) fits float32 only, as gradients in bf16 would show on a real run.
REDUCE_SIZES = (12, 10, 7, 2, 16, 11)
GATHER_SIZES = (4, 1, 6, 5)   # 6 > 4: a receive buffer of a size written as a number (4) fits 4 and 1 only
FLOAT64_SIZES = (11, 5)


def rank_input(rank: int, size: int) -> torch.Tensor:
    """The tensor rank `rank` starts with in the checks (the same in the notebook and the ranks): float64 for the
    sizes of FLOAT64_SIZES, float32 for the others."""
    generator = torch.Generator().manual_seed(1000 * size + rank)
    return torch.randn(size, generator=generator, dtype=torch.float64 if size in FLOAT64_SIZES else torch.float32)


def sizes_text(sizes) -> str:
    """The sizes of a check's cases as its messages name them: '12, 10, 7, 2, 16 and 11 in float64'."""
    plain = [str(size) for size in sizes if size not in FLOAT64_SIZES]
    double = [str(size) for size in sizes if size in FLOAT64_SIZES]
    return ", ".join(plain) + (f" and {', '.join(double)} in float64" if double else "")


def chunk_sizes(size: int, world_size: int) -> list[int]:
    """Element counts of `tensor.tensor_split(world_size)` for a tensor of `size` elements."""
    return [len(chunk) for chunk in torch.empty(size).tensor_split(world_size)]


def _dtype_text(tensor: torch.Tensor) -> str:
    """' (float64)' for a case's tensor of another dtype than torch's default, else ''."""
    return "" if tensor.dtype == torch.get_default_dtype() else f" ({str(tensor.dtype).removeprefix('torch.')})"


def _returned(value):
    return value.detach().clone() if torch.is_tensor(value) else value


def _recording_receives(receive_buffers: list[list], requests: list[dict] | None = None,
                        sends: list[list] | None = None, overlaps: list[list] | None = None):
    """Inside a rank: append the buffer address (data_ptr; None: no tensor) of every recv/irecv the answer makes to
    receive_buffers[-1], with `requests`, {call number: 'isend' or 'irecv'} of every request the answer started
    and has not waited for to requests[-1], with `sends`, (peer, address of the tensor sent) of every send/isend
    to sends[-1], and with `overlaps` (and `requests` and `sends`), (call number of the earlier request, what
    happened) to overlaps[-1] for every receive into, or send of, memory that an isend or irecv not yet waited for
    is still sending or receiving into, at least one of the two a receive (a context manager)."""
    started: dict[int, dict] = {}
    in_flight: dict[int, tuple[str, int, tuple[int, int]]] = {}   # call number -> (op, its ordinal, its memory)
    number = [0]

    def record(op, tensor, peer):
        number[0] += 1
        if op in RECEIVES:
            receive_buffers[-1].append(tensor.data_ptr() if torch.is_tensor(tensor) else None)
        elif sends is not None and op in SENDS:
            sends[-1].append((peer, tensor.data_ptr() if torch.is_tensor(tensor) else None))
        span = memory_span(tensor)
        ordinal = len(receive_buffers[-1]) if op in RECEIVES else len(sends[-1]) if sends is not None else 0
        if overlaps is not None and span is not None:
            for call, (other, other_ordinal, other_span) in in_flight.items():
                if {op, other} & set(RECEIVES) and other_span[0] < span[1] and span[0] < other_span[1]:
                    overlaps[-1].append((call, _overlap_text(op, ordinal, other, other_ordinal)))
                    break
        if requests is not None and op in ("isend", "irecv"):
            requests[-1][number[0]] = op
            started[number[0]] = requests[-1]
            if span is not None:
                in_flight[number[0]] = (op, ordinal, span)

    def waited(call: int) -> None:
        started.pop(call, {}).pop(call, None)
        in_flight.pop(call, None)

    return watching_point_to_point(record, waited if requests is not None else None)


def _overlap_text(op: str, ordinal: int, earlier: str, earlier_ordinal: int) -> str:
    """What a call on memory an earlier request was still using did: 'receive 2 of this rank (dist.recv) wrote into
    the tensor that its send 2 (dist.isend) was still sending, before that request had been waited for'."""
    kind, earlier_kind = ("receive" if op in RECEIVES else "send"), ("receive" if earlier in RECEIVES else "send")
    did = "wrote into" if op in RECEIVES else "sent"
    using = "still sending" if earlier in SENDS else "still receiving into"
    return (f"{kind} {ordinal} of this rank (dist.{op}) {did} the tensor that its {earlier_kind} {earlier_ordinal} "
            f"(dist.{earlier}) was {using}, before that request had been waited for")


def _overlaps_after_waits(overlaps: list[list], requests: list[dict]) -> list[list[str]]:
    """For each case, what `_recording_receives` saw in `overlaps` whose earlier request the answer did wait for,
    later (a request never waited for is named as such by `_judged_with_requests`)."""
    return [[text for call, text in case if call not in started] for case, started in zip(overlaps, requests)]


def _refuse_overlap(result: dict, case: int, size: int, rank: int, what: str) -> None:
    """CheckFailed where, in this case, the rank used memory a request of its own was still using (whether the
    values come out right then depends on timing); `what`: 'tensor' or 'tensors'."""
    overlaps = result.get("overlaps", [[]] * (case + 1))[case]
    if overlaps:
        raise CheckFailed(f"rank {rank}, {what} of {size} elements: {overlaps[0]}: what that message carries, or what "
                          "the tensor ends up holding, depends on which transfer happens first, a matter of timing."
                          "\nHint: a request's tensor is in use until its .wait() returns: give every receive a "
                          "tensor of its own (torch.empty_like), or wait for the earlier request before the tensor "
                          "is used again.")


def _unwaited(requests: dict) -> str | None:
    """'2 dist.irecv requests' (and/or isend), for the requests of one case that were never waited for; None if all
    were."""
    if not requests:
        return None
    ops = list(requests.values())
    return " and ".join(f"{ops.count(op)} dist.{op} request{'s' if ops.count(op) > 1 else ''}"
                        for op in ("irecv", "isend") if op in ops)


def _case_folder(log_directory: str, size: int) -> str:
    """The folder the ranks log their sends and receives to in the case of `size` elements."""
    return os.path.join(log_directory, f"case-{size}")


def _logging_case(log_directory: str | None, size: int, rank: int):
    """Inside a rank: log the block's sends and receives to the case's folder (`logging_point_to_point`); without a
    directory, a context that logs nothing."""
    if log_directory is None:
        return contextlib.nullcontext()
    folder = _case_folder(log_directory, size)
    os.makedirs(folder, exist_ok=True)
    return logging_point_to_point(log_path(folder, rank))


def _reduce_runner(rank: int, fn, sizes, world_size: int, verb: str, log_directory: str | None = None):
    """On one rank: the library's all_reduce for every size (the reference), then the answer; with, for each case,
    the steps (0-based sends) whose tensor lay in the caller's tensor (`input_sent`) and the memory used while a
    request was still using it (`overlaps`, `_recording_receives`).

    With a `log_directory`, the answer's sends and receives are logged there, one folder per case (`_read_cases`).
    """
    references = []
    for size in sizes:
        total = rank_input(rank, size)
        dist.all_reduce(total)  # SUM over ranks, computed by torch.distributed itself
        references.append(total)
    outputs, receives, requests, changed, sends, input_sent, overlaps = [], [], [], [], [], [], []
    with only_point_to_point(), _recording_receives(receives, requests, sends, overlaps):
        for size in sizes:
            receives.append([])
            requests.append({})
            sends.append([])
            overlaps.append([])
            given = rank_input(rank, size)
            start = given.untyped_storage().data_ptr()
            end = start + given.untyped_storage().nbytes()
            with _logging_case(log_directory, size, rank):
                out = call_case(fn, f"{verb} a tensor of {size} elements{_dtype_text(given)} on {world_size} ranks",
                                given)
            outputs.append(_returned(out))
            changed.append(not torch.equal(given, rank_input(rank, size)))   # the caller's tensor, written into
            input_sent.append([step for step, (_, address) in enumerate(sends[-1])
                               if address is not None and start <= address < end])
    return {"sums": references, "outputs": outputs, "receives": [len(buffers) for buffers in receives],
            "unwaited": [_unwaited(started) for started in requests], "input_changed": changed,
            "input_sent": input_sent, "overlaps": _overlaps_after_waits(overlaps, requests)}


def _all_gather_runner(rank: int, fn, sizes, world_size: int, log_directory: str | None = None):
    """On one rank: the answer for every size; what it returned, how often it received, which receive (1-based)
    wrote into the storage of each entry (None: none did), the rank's own entry's among them, the peer of every
    send, and the memory used while a request was still using it. With a `log_directory`, as `_reduce_runner`."""
    outputs, receives, entry_receives, requests, sends, overlaps = [], [], [], [], [], []
    with only_point_to_point(), _recording_receives(receives, requests, sends, overlaps):
        for size in sizes:
            receives.append([])
            requests.append({})
            sends.append([])
            overlaps.append([])
            given = rank_input(rank, size)
            with _logging_case(log_directory, size, rank):
                out = call_case(fn, f"gathering tensors of {size} elements{_dtype_text(given)} on {world_size} ranks",
                                given.clone())
            entries = out if isinstance(out, (list, tuple)) else []
            addresses = [entry.data_ptr() if torch.is_tensor(entry) and entry.numel() else None for entry in entries]
            entry_receives.append([next((number for number, buffer in enumerate(receives[-1], 1)
                                         if address is not None and buffer == address), None)
                                   for address in addresses])
            outputs.append([_returned(t) for t in out] if isinstance(out, (list, tuple)) else _returned(out))
    own_slot_receives = [numbers[rank] if len(numbers) > rank else None for numbers in entry_receives]
    return {"outputs": outputs, "receives": [len(buffers) for buffers in receives],
            "own_slot_receives": own_slot_receives, "entry_receives": entry_receives,
            "send_peers": [[peer for peer, _ in case] for case in sends],
            "unwaited": [_unwaited(started) for started in requests],
            "overlaps": _overlaps_after_waits(overlaps, requests)}


def _read_cases(log_directory: str, sizes, world_size: int) -> dict[int, dict[int, list[Call]]]:
    """{rank: {case size: the rank's sends and receives in that case, in order}}, for the cases the rank began
    (a rank that crashed or hung in one case has no log of the later ones)."""
    cases = {rank: {} for rank in range(world_size)}
    for size in sizes:
        for rank in range(world_size):
            log = read_log(log_path(_case_folder(log_directory, size), rank))
            if log is not None:
                cases[rank][size] = log[0]
    return cases


def _hang_hint(log_directory: str, sizes, world_size: int):
    """The hang hint of the ring checks (run_on_ranks' timeout_hint): from the logged calls, a deadlock in which
    every rank receives before it sends; None (the point-to-point default) for any other hang."""

    def hint(calls: set, places: dict) -> str | None:
        logs = _read_cases(log_directory, sizes, world_size)
        pending = receives_never_waited({rank: [transfer for case in logs[rank].values() for transfer in case]
                                          for rank in range(world_size)})
        if pending:
            return (f"What the ranks did: {pending}.\nHint: dist.irecv returns at once; its buffer holds "
                    "the message only once request.wait() has returned. Call .wait() on each request before using "
                    "its buffer.")
        if set(places) != set(range(world_size)) or set(places.values()) != {"recv"}:
            return None
        dropped = _sends_never_waited(logs, world_size)
        if dropped:
            return (f"What the ranks did: every rank waits in dist.recv, and no rank waited for any of its "
                    f"dist.isend requests: {dropped}.\nHint: keep the request dist.isend returns and call "
                    "request.wait() on it (after the recv): a request dropped before it completed leaves its "
                    "message undelivered here.")
        counts = []
        for rank in range(world_size):
            transfers = [transfer for case in logs[rank].values() for transfer in case]
            sent = sum(transfer.op in SENDS for transfer in transfers)
            received = sum(transfer.op in RECEIVES for transfer in transfers) - 1   # the last one still waits
            if not transfers or transfers[-1].op != "recv" or sent > received:
                return None
            counts.append(f"rank {rank}: {sent} sent, {received} received")
        return (f"What the ranks did: every rank waits in dist.recv, and none had sent more messages than it had "
                f"received ({'; '.join(counts)}), so no message was on its way to any rank.\nHint: every rank "
                "receives before it sends: each waits for a message its neighbour sends only after its own receive "
                "returns, a deadlock. Start the send without waiting for it (request = dist.isend(...), then "
                "dist.recv(...), then request.wait()), or alternate the order by rank parity: even ranks send "
                "first, odd ranks receive first.")

    return hint


def _sends_never_waited(logs: dict, world_size: int) -> str | None:
    """'rank 1 waits for message 1 from rank 0, which rank 0 started with dist.isend and never waited for' for each
    rank whose last call is a receive of a message its peer did isend, when the ranks waited for none of their
    isend requests; else None (a rank waiting for a message never sent is explained by the other hints)."""
    sends = [transfer for rank in logs for case in logs[rank].values() for transfer in case if transfer.op in SENDS]
    if not sends or any(transfer.op != "isend" or transfer.waited for transfer in sends):
        return None
    said = []
    for rank in range(world_size):
        transfers = [transfer for case in logs[rank].values() for transfer in case]
        if not transfers or transfers[-1].op not in RECEIVES or transfers[-1].peer not in logs:
            continue
        peer = transfers[-1].peer
        sent = sum(transfer.op in SENDS and transfer.peer == rank
                   for case in logs[peer].values() for transfer in case)
        wanted = sum(transfer.op in RECEIVES and transfer.peer == peer for transfer in transfers)
        if sent >= wanted:
            said.append(f"rank {rank} waits for message {wanted} from rank {peer}, which rank {peer} started with "
                        "dist.isend and never waited for")
    return "; ".join(said) or None


def _answers_runner(rank: int, answers: tuple, runner, *args) -> list:
    """`runner(rank, answer, *args)` for each answer in turn, on one launch's ranks (the tests' wrong answers)."""
    return [runner(rank, answer, *args) for answer in answers]


def run_answers(runner, answers: tuple, args: tuple, world_size: int = WORLD_SIZE, timeout: float = 20.0,
                name: str = "answer") -> list[list]:
    """Each answer once through `runner` (`_reduce_runner` or `_all_gather_runner`) on the same ranks, in one
    launch; [answer][rank] -> what the runner returned. For answers that return (one that raises ends the launch)."""
    return run_answers_on_ranks(_answers_runner, answers, world_size, timeout, name, args=(runner, *args))


def _close(got, expected) -> bool:
    return (torch.is_tensor(got) and got.shape == expected.shape
            and first_mismatch(got.float(), expected.float()) is None)


def _case_size(failure) -> int | None:
    exception = failure.exception
    found = re.search(r"of (\d+) elements", exception.case) if isinstance(exception, CaseFailed) else None
    return int(found.group(1)) if found else None


def _explain_chunking(failure, world_size: int, size_mismatch: str) -> str | None:
    """Hints for the failures chunking mistakes cause: a bad chunk index, a recv of the wrong size."""
    exception = failure.exception
    size = _case_size(failure)
    if isinstance(exception, CaseFailed) and exception.kind == "IndexError" and size is not None:
        if size < world_size:
            return (f"with {size} elements on {world_size} ranks, tensor.chunk({world_size}) returns only "
                    f"{len(torch.empty(size).chunk(world_size))} chunk(s), so a chunk index runs past the end: "
                    f"tensor.tensor_split({world_size}) always returns {world_size} chunks (here some are "
                    "empty), which is what every rank's index arithmetic assumes.")
        return "a chunk index ran past the list of chunks: take every chunk index % world_size."
    if _recv_got_another_size(failure.details):
        return size_mismatch
    return None


def _recv_got_another_size(rank_output: str) -> bool:
    """Whether a rank aborted because a message was longer than the buffer its recv posted (common.gloo_size_abort)."""
    return gloo_size_abort(rank_output) is not None


# --- exercise 1: ring reduce-scatter ------------------------------------------------------------

def check_ring_reduce_scatter(ring_reduce_scatter, world_size: int = WORLD_SIZE, timeout: float = 20.0) -> None:
    """Check a hand-built reduce-scatter with `dist.reduce_scatter`'s layout.

    `ring_reduce_scatter(tensor)` runs on every rank with that rank's 1-D tensor and must
    return the SUM over ranks of chunk `rank` of `tensor.tensor_split(world_size)` (only that
    chunk), using only send/recv (isend/irecv). The expected value is `dist.all_reduce` of
    the same inputs, cut the same way. Right on `world_size` ranks (3), it runs again on
    SECOND_WORLD_SIZE (4): what holds on 3 ranks only fails there.

    Introduced in notebooks/02-collectives.ipynb.
    """
    ensure_written(ring_reduce_scatter)
    name = getattr(ring_reduce_scatter, "__name__", "ring_reduce_scatter")
    refuse_written_modulus(ring_reduce_scatter, name, "the world size, dist.get_world_size()")
    mismatch = ("a recv received a message of another size than its buffer: a rank sent one chunk while "
                "its right neighbour received into a chunk of another size (10 elements on 3 ranks: chunks "
                "of 4, 3, 3). What rank r sends in step s, rank r + 1 must receive in step s: the send "
                "index of rank r must equal the recv index of rank r + 1.")
    splits = _splits_by_size(ring_reduce_scatter)
    passed(_on_two_world_sizes(name, world_size, timeout, _reduce_runner, ring_reduce_scatter, REDUCE_SIZES,
                               ("reduce-scattering",), judge_reduce_scatter,
                               lambda failure, ranks, logs: _explain_reduce_scatter(failure, ranks, logs, mismatch,
                                                                                    splits)))


def _dtype_abort_hint(failure, log_directory: str, sizes, world_size: int) -> str | None:
    """What the ranks did and the hint, where gloo aborted the failing rank in a float64 case (its last case begun,
    from the logs) because a message of n float64 values arrived in a buffer of n float32 ones: twice the bytes,
    n one of the case's chunk or tensor sizes and n / 2 none (so not half a chunk of float64); else None."""
    abort = gloo_size_abort(failure.details or "") if failure.kind == "crashed" else None
    begun = [size for size in sizes if size in _read_cases(log_directory, sizes, world_size)[failure.rank]]
    if abort is None or not begun or begun[-1] not in FLOAT64_SIZES:
        return None
    size, (arrived, room) = begun[-1], abort
    counts = set(chunk_sizes(size, world_size)) | {size}
    if arrived != 2 * room or room % 4 or room // 4 not in counts or (room % 8 == 0 and room // 8 in counts):
        return None
    return (f"What the ranks did: in the case of {size} elements in float64, {arrived} bytes arrived in a receive "
            f"whose buffer holds {room}: {room // 4} float64 values sent into a buffer of {room // 4} float32 "
            "ones, and gloo aborted the rank.\nHint: a receive buffer must hold what its peer sends, in the tensor's "
            "own dtype: make it like the tensor (torch.empty_like, or dtype=tensor.dtype); torch.zeros(n) and "
            "torch.empty(n) are float32 whatever the tensor is.")


def _judged_on(ranks: int, name: str, timeout: float, runner, answer, sizes, runner_args: tuple, judge, explain,
               hang: bool = True) -> str:
    """The ✓ line of one run of `runner(rank, answer, sizes, ranks, *runner_args, log folder)` on `ranks` ranks,
    judged by `judge(name, results, ranks)`, or CheckFailed naming the mistake: a failure explained by
    `_dtype_abort_hint`, else by `explain(failure, ranks, log folder)`; a hang by `_hang_hint` (with `hang`) or
    run_on_ranks' default."""
    with tempfile.TemporaryDirectory(prefix="ddp_lab-check02-") as logs:
        results = run_on_ranks(runner, (answer, sizes, ranks, *runner_args, logs), ranks, timeout, name,
                               explain=lambda failure: (_dtype_abort_hint(failure, logs, sizes, ranks)
                                                        or explain(failure, ranks, logs)),
                               timeout_hint=_hang_hint(logs, sizes, ranks) if hang else None)
    return judge(name, results, ranks)


def _on_two_world_sizes(name: str, world_size: int, timeout: float, *run, **options) -> str:
    """The ✓ line of `_judged_on(ranks, name, timeout, *run, **options)` on `world_size` ranks, and, where that is
    WORLD_SIZE and the answer is right there, on SECOND_WORLD_SIZE as well: the line then names both; a failure on
    the second only says what holds on 3 ranks alone."""
    line = _judged_on(world_size, name, timeout, *run, **options)
    if world_size != WORLD_SIZE:
        return line
    try:
        _judged_on(SECOND_WORLD_SIZE, name, timeout, *run, **options)
    except CheckFailed as failure:
        raise CheckFailed(f"{name} is right on {world_size} ranks, but not on {SECOND_WORLD_SIZE}, the check's second "
                          f"run: something in it holds on {world_size} ranks only, such as a number written for "
                          f"them ({world_size - 1} for world_size - 1, {world_size} for world_size). On "
                          f"{SECOND_WORLD_SIZE} ranks: {failure}") from None
    return line.replace(f"on {world_size} ranks", f"on {world_size} and on {SECOND_WORLD_SIZE} ranks", 1)


def _splits_by_size(fn) -> bool:
    """Whether fn's source cuts a tensor with split (`tensor.split(n)`, `torch.split(t, n)`), given a number of
    pieces that is no list of sizes, and never calls chunk: split's n is the size of a piece, not their number."""
    tree = source_tree(fn)
    if tree is None:
        return False
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)]
    if any(call.func.attr == "chunk" for call in calls):
        return False
    return any(call.func.attr == "split" and call.args and not isinstance(call.args[-1], (ast.List, ast.Tuple))
               for call in calls)


def _explain_reduce_scatter(failure, world_size: int, log_directory: str, index_mismatch: str,
                            splits: bool = False) -> str | None:
    """The failure hint of the reduce-scatter check: a chunk index past the end (with `splits`, from chunks cut by
    `tensor.split(n)`), or, from the logged sizes, a receive whose buffer differs in size from the message matched
    to it (`_receive_size_hint`)."""
    exception = failure.exception
    size = _case_size(failure)
    if splits and isinstance(exception, CaseFailed) and exception.kind == "IndexError" and size is not None:
        pieces = len(torch.empty(size).split(world_size))
        if pieces < world_size:
            return (f"with {size} elements on {world_size} ranks, tensor.split({world_size}) returns {pieces} "
                    "piece(s), so a chunk index runs past the end: split(n) makes pieces of n elements, "
                    "tensor_split(n) makes n pieces. Split with tensor.tensor_split(world_size), which always "
                    "returns world_size chunks (here some are empty).")
    if not (isinstance(exception, CaseFailed) and exception.kind == "IndexError"):
        logs = _read_cases(log_directory, REDUCE_SIZES, world_size)
        hint = _receive_size_hint(logs, failure.rank, world_size, index_mismatch)
        if hint:
            return hint
    return _explain_chunking(failure, world_size, index_mismatch)


class _SizeMismatch(NamedTuple):
    """A receive whose buffer differs in size from what its peer sent: rank `rank`'s receive from `peer` in step
    `step` of the case of `size` elements, into a buffer of `buffer` elements, of a message of `sent`."""

    rank: int
    peer: int
    step: int
    size: int
    buffer: int
    sent: int


def _mismatched_receive(logs: dict, first: int, world_size: int) -> _SizeMismatch | None:
    """The first logged receive (rank `first`'s first) whose buffer differs in size from the message matched to it:
    the k-th receive from a peer in a case gets that peer's k-th send to the rank, which is step k of a ring.

    A message longer than its buffer (which aborts the rank in gloo) comes before one that is shorter: gloo takes a
    shorter one, and an answer that then uses only part of the buffer may have gone on without an error."""
    found = []
    for rank in sorted(range(world_size), key=lambda other: other != first):
        for size, transfers in logs[rank].items():
            taken: dict[int, int] = {}
            for transfer in transfers:
                if transfer.op not in RECEIVES or transfer.peer not in logs:
                    continue
                step = taken[transfer.peer] = taken.get(transfer.peer, -1) + 1
                sends = [sent for sent in logs[transfer.peer].get(size, []) if sent.op in SENDS and sent.peer == rank]
                if (step < len(sends) and None not in (sends[step].elements, transfer.elements)
                        and sends[step].elements != transfer.elements):
                    found.append(_SizeMismatch(rank, transfer.peer, step, size, transfer.elements,
                                               sends[step].elements))
    return next((mismatch for mismatch in found if mismatch.sent > mismatch.buffer), found[0] if found else None)


def _direction(rank: int, peer: int | None, world_size: int, sending: bool) -> int | None:
    """+1 where data moves from rank r to rank r + 1 (a send to rank + 1, a receive from rank - 1), -1 the other
    way, None for a peer that is not a neighbour."""
    ahead, behind = (rank + 1) % world_size, (rank - 1) % world_size
    if peer == (ahead if sending else behind):
        return 1
    return -1 if peer == (behind if sending else ahead) else None


def _off_schedule_send(logs: dict, size: int, world_size: int) -> tuple[int, int, int, int] | None:
    """(rank, step, elements, chunk) of the first logged send in the case of `size` elements whose size differs from
    the chunk the exercise's schedule sends in that step (rank r sends chunk (r - s - 1) % N to rank r + 1, or chunk
    (r + s + 1) % N in a ring that runs the other way); None when every send has that chunk's size."""
    sizes = chunk_sizes(size, world_size)
    for rank in range(world_size):
        sends = [transfer for transfer in logs[rank].get(size, []) if transfer.op in SENDS]
        for step, transfer in enumerate(sends):
            direction = _direction(rank, transfer.peer, world_size, sending=True) or 1
            chunk = (rank - direction * (step + 1)) % world_size
            if transfer.elements is not None and transfer.elements != sizes[chunk]:
                return rank, step, transfer.elements, chunk
    return None


def _backwards_ring(logs: dict, size: int, world_size: int) -> bool:
    """Whether, in the case of `size` elements, every rank sent only to rank - 1 and received only from rank + 1,
    each send carrying the size of the chunk the exercise's index (r - s - 1) % N names in its step, and some send
    not the size of the chunk a ring running that way sends ((r + s + 1) % N): the exercise's indices, peers
    swapped."""
    sizes = chunk_sizes(size, world_size)
    if world_size < 3 or any(size not in logs[rank] for rank in range(world_size)):
        return False
    other_way = False
    for rank in range(world_size):
        transfers = logs[rank][size]
        sends = [transfer for transfer in transfers if transfer.op in SENDS]
        if not sends or any(_direction(rank, transfer.peer, world_size, transfer.op in SENDS) != -1
                            for transfer in transfers):
            return False
        for step, transfer in enumerate(sends):
            if transfer.elements != sizes[(rank - step - 1) % world_size]:
                return False
            other_way = other_way or transfer.elements != sizes[(rank + step + 1) % world_size]
    return other_way


def _receive_size_hint(logs: dict, first: int, world_size: int, index_mismatch: str) -> str | None:
    """What the ranks did and a hint, for a receive whose buffer differs in size from the message matched to it."""
    found = _mismatched_receive(logs, first, world_size)
    if found is None:
        return None
    rank, peer, step, size, buffer, sent = found
    sizes = chunk_sizes(size, world_size)
    did = (f"What the ranks did: in step {step} of the tensor of {size} elements (tensor_split's chunks: {sizes}), "
           f"rank {rank} received into a buffer of {buffer} element(s) the {sent} element(s) rank {peer} sent")
    if _backwards_ring(logs, size, world_size):
        return (f"{did}; every rank sent to rank - 1 and received from rank + 1, and every send carried the size of "
                "the chunk the exercise's index (rank - step - 1) % N names.\nHint: you send to (rank - 1) and "
                "receive from (rank + 1), while the exercise's indices are for a ring that sends to (rank + 1) % "
                "world_size and receives from (rank - 1) % world_size: swap the two peers.")
    off = _off_schedule_send(logs, size, world_size)
    if off:
        sender, sender_step, elements, chunk = off
        return (f"{did}; rank {sender}'s send in step {sender_step} carried {elements} element(s), but the chunk the "
                f"schedule sends there, chunk {chunk}, has {sizes[chunk]}.\nHint: {index_mismatch}")
    direction = _direction(rank, peer, world_size, sending=False) or 1
    arriving = (rank - direction * (step + 2)) % world_size
    if sent != sizes[arriving]:
        return f"{did}.\nHint: {index_mismatch}"
    sign = "-" if direction == 1 else "+"
    buffers = [(receive.elements, sent_in_step) for other in range(world_size)
               for receive, sent_in_step in _receives_with_sends(logs[other].get(size, []))]
    fixed = _fixed_receive_size(logs, lambda case: chunk_sizes(case, world_size))
    if fixed:
        how = f" ({fixed}: a size written as a number fits only the chunks up to it)"
    elif all(elements == size // world_size for elements, _ in buffers):
        how = f" (every receive buffer here has len(tensor) // world_size = {size // world_size} elements)"
    elif all(elements == sent_in_step for elements, sent_in_step in buffers):
        return (f"{did}. Every send so far has the size of the chunk the schedule sends in its step, so what arrived "
                f"is chunk {arriving}, the chunk rank {rank} adds it into in that step.\nHint: the receive buffer has "
                "the wrong size (every receive buffer here is as large as the chunk the same rank sends in that step, "
                "not the one it receives): the buffer, and the chunk it is added into, must both be chunk "
                f"(rank {sign} step {sign} 2) % world_size, one behind the chunk sent, (rank {sign} step {sign} 1) % "
                "world_size; tensor_split's chunks differ by one element when the size does not divide by "
                "world_size.")
    else:
        how = ""
    return (f"{did}. Every send so far has the size of the chunk the schedule sends in its step (rank r sends chunk "
            f"(r {sign} s {sign} 1) % N in step s), so what arrived is chunk {arriving}, the chunk rank {rank} adds it "
            f"into in that step.\nHint: the receive buffer has the wrong size{how}: make it the size of the chunk it "
            f"is added into, torch.empty_like(chunks[recv_index]) with recv_index = (rank {sign} step {sign} 2) % "
            "world_size; tensor_split's chunks differ by one element when the size does not divide by world_size.")


def _fixed_receive_size(logs: dict, fitting) -> str | None:
    """'every receive buffer has n elements, for tensors of a, b and c elements alike' when every logged receive, in
    two or more cases (tensor sizes), had a buffer of the same n elements, and n is none of `fitting(size)` (the
    sizes a buffer worked out from the tensor has: tensor_split's chunks, or the tensor's own) in one of those cases;
    else None."""
    cases = list(dict.fromkeys(size for rank in sorted(logs) for size, transfers in logs[rank].items()
                               if any(transfer.op in RECEIVES for transfer in transfers)))
    buffers = {transfer.elements for rank in logs for transfers in logs[rank].values() for transfer in transfers
               if transfer.op in RECEIVES}
    if len(cases) < 2 or len(buffers) != 1 or None in buffers or all(buffers <= set(fitting(size)) for size in cases):
        return None
    listed = f"{', '.join(map(str, cases[:-1]))} and {cases[-1]}"
    return f"every receive buffer has {buffers.pop()} elements, for tensors of {listed} elements alike"


def _receives_with_sends(transfers: list) -> list[tuple]:
    """(receive, elements of the send of the same step or None) for each receive of one rank's case."""
    sends = [transfer.elements for transfer in transfers if transfer.op in SENDS]
    receives = [transfer for transfer in transfers if transfer.op in RECEIVES]
    return [(receive, sends[step] if step < len(sends) else None) for step, receive in enumerate(receives)]


def _judged_with_requests(result: dict, case: int, size: int, rank: int, compare) -> None:
    """`compare()` (a _compare_* call) for one rank and case, read beside the requests the rank never waited for:
    wrong values after an irecv never waited for are explained by it; right values still fail, as a race."""
    unwaited = result["unwaited"][case]
    try:
        compare()
    except CheckFailed as failure:
        if not unwaited or "irecv" not in unwaited:
            raise
        head = str(failure).split("\nHint:")[0]
        raise CheckFailed(f"{head}\nHint: this rank never waited for {unwaited}: dist.irecv returns at once, and "
                          "its buffer holds the message only once request.wait() has returned, so what was read, "
                          "added or passed on may not have arrived yet. Call .wait() on each request before using "
                          "its buffer.") from None
    if unwaited:
        raise CheckFailed(f"rank {rank}, tensor of {size} elements: the values are right, but the rank never waited "
                          f"for {unwaited}. A request's buffer is in use until request.wait() returns (an irecv's "
                          "may not be filled yet, an isend's may not be sent yet): this time the messages happened "
                          "to be through in time, another time they are not.\nHint: keep each request dist.isend "
                          "or dist.irecv returns and call .wait() on it before the buffer is used or the function "
                          "returns.")


def judge_reduce_scatter(name: str, results: list, world_size: int = WORLD_SIZE) -> str:
    """The ✓ line for one ring_reduce_scatter answer's per-rank results (`_reduce_runner`'s), or CheckFailed."""
    for case, size in enumerate(REDUCE_SIZES):
        inputs = [rank_input(rank, size) for rank in range(world_size)]
        for rank in range(world_size):
            expected = results[rank]["sums"][case].tensor_split(world_size)[rank]
            changed = results[rank].get("input_changed", [False] * len(REDUCE_SIZES))[case]
            input_sent = () if changed else results[rank].get("input_sent", [()] * len(REDUCE_SIZES))[case]
            _refuse_overlap(results[rank], case, size, rank, "tensor")
            _judged_with_requests(results[rank], case, size, rank, lambda: _compare_reduce_scatter(
                results[rank]["outputs"][case], expected, inputs, rank, size, world_size,
                results[rank]["receives"][case], input_sent))
    for case, size in enumerate(REDUCE_SIZES):
        extra = [rank for rank in range(world_size) if results[rank]["receives"][case] > world_size - 1]
        if extra:
            raise CheckFailed(f"rank {extra[0]}, tensor of {size} elements: the right chunk, but the rank received "
                              f"{results[extra[0]]['receives'][case]} times.\nHint: a ring reduce-scatter takes "
                              f"N - 1 = {world_size - 1} steps; after them every chunk is complete where it belongs, "
                              "and a further step only moves data no rank needs (range(world_size - 1)).")
    for case, size in enumerate(REDUCE_SIZES):
        changed = [rank for rank in range(world_size) if results[rank].get("input_changed", {}) and
                   results[rank]["input_changed"][case]]
        if changed:
            raise CheckFailed(f"rank {changed[0]}, tensor of {size} elements: the right chunk, but {name} changed its "
                              "input, the caller's tensor, in place (its values after the call differ from before): "
                              "dist.reduce_scatter leaves its input as it was.\nHint: work on copies of the chunks "
                              "(.clone()): a chunk cut from the caller's tensor is a view of it, and adding into "
                              "the view writes into the caller's tensor.")
    return (f"{name} gives rank r the sum of chunk r, like dist.reduce_scatter, on {world_size} ranks for "
            f"sizes {sizes_text(REDUCE_SIZES)}, using only send/recv")


def _compare_reduce_scatter(got, expected, inputs, rank, size, world_size, receives, input_sent=()) -> None:
    """CheckFailed if got is not the sum of chunk `rank`; `input_sent`: the steps whose send lay in the caller's
    tensor, which the answer left unchanged (an empty tuple where it changed it)."""
    where = f"rank {rank}, tensor of {size} elements on {world_size} ranks"
    if not torch.is_tensor(got):
        raise CheckFailed(f"{where}: expected a tensor (the sum of chunk {rank}), got {describe(got)}.\n"
                          "Hint: return the reduced chunk at the end of the function.")
    if _close(got, expected):
        if got.dtype != expected.dtype:
            raise CheckFailed(f"{where}: the sum of chunk {rank} is right, but returned as {describe(got)}; expected "
                              f"{expected.dtype}, the input's dtype.\nHint: dist.reduce_scatter returns the input's "
                              "dtype: keep the chunks in it, with no conversion (.double(), .half(), .to()).")
        return
    chunks = [t.tensor_split(world_size) for t in inputs]          # chunks[q][k]: rank q's chunk k
    sums = [sum(chunks[q][k] for q in range(world_size)) for k in range(world_size)]
    sizes = chunk_sizes(size, world_size)
    head = (f"{where}: expected the sum over ranks of chunk {rank} ({sizes[rank]} elements; tensor_split "
            f"gives chunks of {sizes}), got {describe(got)}")
    if _close(got, expected / world_size):
        hint = ("you returned the MEAN of chunk {rank}; dist.reduce_scatter returns the SUM. Leave the "
                "division for the averaging all-reduce (exercise 3).").format(rank=rank)
    elif receives < world_size - 1 and (_close(got, chunks[rank][rank]) or _partial(got, chunks, rank, world_size)):
        hint = (f"this rank received {receives} time(s); a ring reduce-scatter takes N - 1 = {world_size - 1} "
                f"steps, each receiving one chunk and adding it in, and only the last step (s = N - 2) "
                f"completes chunk {rank}: run the loop for range(world_size - 1).")
    elif _close(got, chunks[rank][rank]):
        hint = (f"it is this rank's own chunk {rank}, unchanged: nothing was ever added into it. Either the "
                f"schedule never adds into chunk r (the lesson's schedule sends chunk r in step 0 and never "
                f"receives into it: shift it so that rank r adds into chunk r in the LAST step, s = N - 2), or the "
                "sums are computed but never stored back into the list of chunks.")
    elif any(_close(got, sums[k]) for k in range(world_size) if k != rank):
        other = next(k for k in range(world_size) if k != rank and _close(got, sums[k]))
        lesson = (" That is where the lesson's ring ends (chunk (r + 1) % N)." if other == (rank + 1) % world_size
                  else "")
        hint = (f"it is the full sum of chunk {other}, not of chunk {rank}.{lesson} dist.reduce_scatter gives "
                f"rank r chunk r: shift every chunk index of the schedule by one, so that in the last step "
                f"(s = N - 2) rank r adds into chunk r, and return chunks[rank].")
    elif any(_close(got, chunks[q][rank]) for q in range(world_size) if q != rank):
        other = next(q for q in range(world_size) if q != rank and _close(got, chunks[q][rank]))
        hint = (f"it is rank {other}'s chunk {rank} alone: what arrived replaced this rank's chunk instead of "
                "being added to it. Receive into a separate buffer, then add it into the chunk.")
    elif got.numel() == size:
        hint = (f"you returned a tensor as large as the input: return only chunk {rank}, the one this rank "
                "owns after the reduce-scatter (tensor_split's chunk `rank`).")
    elif _partial(got, chunks, rank, world_size):   # fewer receives than the ring's steps: named above
        ranks = _partial(got, chunks, rank, world_size)
        missing = sorted(set(range(world_size)) - set(ranks))
        hint = (f"it is the sum over ranks {list(ranks)} only; rank(s) {missing} are missing, although this rank "
                f"received {receives} times (the ring needs N - 1 = {world_size - 1}): a partial sum travelled on "
                "before what arrived had been added into it. In step s, rank r adds what arrives into the chunk it "
                "sends in step s + 1, and in the last step (s = N - 2) into chunk r: check the send and receive "
                "indices against that" + _sent_unchanged(input_sent) + ".")
    elif got.shape != expected.shape:
        hint = _shape_hint(got, size, rank, world_size, sizes)
    elif _lower_precision(got, expected):
        index = first_mismatch(got.float(), expected.float())
        head = (f"{where}, element {index[0]} of chunk {rank}: expected the sum {expected[index].item():.6f}, "
                f"got {got[index].item():.6f}")
        hint = _lower_precision(got, expected)
    else:
        index = first_mismatch(got.float(), expected.float())
        head = (f"{where}, element {index[0]} of chunk {rank}: expected the sum {expected[index].item():.6f}, "
                f"got {got[index].item():.6f}")
        hint = ("rank r must end with chunk r complete: in step s it adds what arrives into one chunk and "
                "sends the chunk it completed in the step before; check both indices against the last step "
                "(s = N - 2), in which rank r adds into chunk r.")
    raise CheckFailed(f"{head}.\nHint: {hint}")


def _lower_precision(got, expected) -> str | None:
    """The hint for a result of the right shape whose every element is within 16-bit rounding (2 %) of the expected
    one but not within float32's (1e-5): arithmetic done in a lower precision; else None."""
    if not (torch.is_tensor(got) and got.shape == expected.shape and got.numel()):
        return None
    got, expected = got.double(), expected.double()
    if not torch.allclose(got, expected, rtol=2e-2, atol=1e-2):
        return None
    error = float(((got - expected).abs() / expected.abs().clamp(min=1e-2)).max())
    return (f"every element is within {error:.1%} of the expected value, but float32 arithmetic on these inputs "
            "lands within 1e-5: precision was lost on the way, as when values pass through a 16-bit dtype (.half(), "
            "torch.bfloat16). Keep the chunks, the buffers and the sums in the input's dtype.")


def _sent_unchanged(input_sent) -> str:
    """', or the tensor sent ...' when a send after step 0 lay in the caller's tensor, which no addition changed;
    else ''."""
    later = [step for step in input_sent if step > 0]
    if not later:
        return ""
    return (f", or the tensor sent is not the one the additions went into: in step {later[0]} this rank sent from "
            "the caller's tensor (a chunk of its tensor_split), which no addition changed, while the sums went into "
            "copies made before the loop. Send the chunk the additions went into")


def _shape_hint(got: torch.Tensor, size: int, rank: int, world_size: int, sizes: list[int]) -> str:
    """What a chunk of the wrong shape shows: another way of splitting (tensor.chunk, len // N), or the right
    number of elements in another shape; else the shape expected."""
    chunked = [len(piece) for piece in torch.empty(size).chunk(world_size)]
    other = ("tensor.chunk" if rank < len(chunked) and got.numel() == chunked[rank] != sizes[rank] else
             "len // N" if got.numel() == size // world_size != sizes[rank] else None)
    if got.dim() == 1 and other:
        return (f"chunk {rank} of tensor_split({world_size}) has {sizes[rank]} elements: the first "
                f"{size % world_size} chunks get one extra element when {size} does not divide by {world_size}; "
                f"{got.numel()} is what {other} gives here. Split with tensor.tensor_split(world_size).")
    if got.numel() == sizes[rank]:
        return (f"the {sizes[rank]} elements are there, in the shape {tuple(got.shape)}: return the chunk as the "
                f"1-D tensor tensor_split gives, shape ({sizes[rank]},).")
    return (f"chunk {rank} of tensor_split({world_size}) is a 1-D tensor of {sizes[rank]} elements "
            f"(tensor_split's chunks: {sizes}).")


def _partial(got, chunks, rank, world_size) -> tuple[int, ...] | None:
    """The strict subset of ranks (at least 2) whose chunk `rank` adds up to got, if any."""
    for count in range(2, world_size):
        for ranks in itertools.combinations(range(world_size), count):
            if _close(got, sum(chunks[q][rank] for q in ranks)):
                return ranks
    return None


# --- exercise 2: ring all-gather -----------------------------------------------------------------

def check_ring_all_gather(ring_all_gather, world_size: int = WORLD_SIZE, timeout: float = 20.0) -> None:
    """Check a hand-built all-gather: `ring_all_gather(tensor)` returns a list whose entry k is rank k's tensor.

    On 3 ranks, then, where it is right there, on SECOND_WORLD_SIZE (4).

    Introduced in notebooks/02-collectives.ipynb.
    """
    ensure_written(ring_all_gather)
    name = getattr(ring_all_gather, "__name__", "ring_all_gather")
    refuse_written_modulus(ring_all_gather, name, "the world size, dist.get_world_size()")

    passed(_on_two_world_sizes(name, world_size, timeout, _all_gather_runner, ring_all_gather, GATHER_SIZES, (),
                               judge_all_gather, _explain_all_gather))


def _explain_all_gather(failure, world_size: int, log_directory: str) -> str | None:
    """The failure hint of the all-gather check: from the logged sizes, a receive whose buffer differs in size from
    the message matched to it; None for any other failure."""
    logs = _read_cases(log_directory, GATHER_SIZES, world_size)
    found = _mismatched_receive(logs, failure.rank, world_size)
    if found is None:
        return None
    did = (f"What the ranks did: in step {found.step} of tensors of {found.size} elements, rank {found.rank} received "
           f"into a buffer of {found.buffer} element(s) the {found.sent} element(s) rank {found.peer} sent")
    fixed = _fixed_receive_size(logs, lambda case: [case])
    if fixed:
        hint = (f"{fixed}: a size written as a number fits only the tensors up to it. Every rank's tensor has the "
                "shape of this rank's own: receive into tensors shaped like it (torch.empty_like).")
    else:
        hint = ("every rank's tensor has the shape of this rank's own, so every receive buffer must have that shape "
                "(torch.empty_like), and every send must carry a whole tensor of it.")
    return f"{did}.\nHint: {hint}"


def judge_all_gather(name: str, results: list, world_size: int = WORLD_SIZE) -> str:
    """The ✓ line for one ring_all_gather answer's per-rank results (`_all_gather_runner`'s), or CheckFailed."""
    for case, size in enumerate(GATHER_SIZES):
        inputs = [rank_input(rank, size) for rank in range(world_size)]
        for rank in range(world_size):
            result = results[rank]
            _refuse_overlap(result, case, size, rank, "tensors")
            _judged_with_requests(result, case, size, rank, lambda: _compare_gather(
                result["outputs"][case], inputs, rank, size, world_size, result["own_slot_receives"][case],
                result.get("entry_receives", [None] * len(GATHER_SIZES))[case],
                result.get("send_peers", [None] * len(GATHER_SIZES))[case]))
    for case, size in enumerate(GATHER_SIZES):
        extra = [rank for rank in range(world_size) if results[rank]["receives"][case] > world_size - 1]
        if extra:
            rank = extra[0]
            own_slot = results[rank]["own_slot_receives"][case]
            landed = (f" (receive {own_slot} wrote into this rank's own entry {rank}: the tensor it brought is the "
                      "rank's own, back from around the ring)" if own_slot else "")
            raise CheckFailed(f"rank {rank}, tensors of {size} elements: every entry is right, but the rank received "
                              f"{results[rank]['receives'][case]} times{landed}.\nHint: a ring all-gather takes "
                              f"N - 1 = {world_size - 1} steps; after them every rank holds every tensor, and a "
                              "further step only passes on tensors the ranks already hold (range(world_size - 1)).")
    return (f"{name} gives every rank every rank's tensor, in rank order, on {world_size} ranks, "
            "using only send/recv")


def _gathered_backwards(inputs: list, world_size: int) -> list[list]:
    """[rank][entry]: what every rank's list holds after the exercise's all-gather indices (in step s, send entry
    (r - s) % N, receive into entry (r - s - 1) % N) run on a ring that sends to rank - 1, receiving from rank + 1."""
    held = [[inputs[rank] if entry == rank else None for entry in range(world_size)] for rank in range(world_size)]
    for step in range(world_size - 1):
        sent = [held[rank][(rank - step) % world_size] for rank in range(world_size)]
        for rank in range(world_size):
            held[rank][(rank - step - 1) % world_size] = sent[(rank + 1) % world_size]
    return held


def _compare_gather(got, inputs, rank, size, world_size, own_slot_receive=None, entry_receives=None,
                    send_peers=None) -> None:
    """CheckFailed if got is not every rank's tensor in rank order; `entry_receives`: which receive (1-based) filled
    each entry's storage, `send_peers`: the peer of each send the rank made (`_all_gather_runner`'s)."""
    where = f"rank {rank}, tensors of {size} elements on {world_size} ranks"
    if not isinstance(got, list) or len(got) != world_size:
        raise CheckFailed(f"{where}: expected a list of {world_size} tensors (entry k = rank k's tensor), "
                          f"got {describe(got)}.\nHint: return a list with one entry per rank.")
    for source, (entry, expected) in enumerate(zip(got, inputs)):
        if not torch.is_tensor(entry) or entry.shape != expected.shape:
            raise CheckFailed(f"{where}: entry {source} should be rank {source}'s tensor of shape "
                              f"{tuple(expected.shape)}, got {describe(entry)}.")
        index = first_mismatch(entry.float(), expected.float(), atol=0, rtol=0)
        if index is None and entry.dtype != expected.dtype:
            raise CheckFailed(f"{where}: entry {source} holds rank {source}'s values, but as {entry.dtype}; expected "
                              f"{expected.dtype}, the dtype of the tensors given.\nHint: dist.all_gather returns the "
                              "tensors' own dtype: receive into buffers like the tensor (torch.empty_like(tensor)) and "
                              "convert nothing (.double(), .half(), .to()).")
        if index is None:
            continue
        message = (f"{where}: entry {source}, element {index[0]}: expected {expected[index].item():.6f} "
                   f"(rank {source}'s value), got {entry[index].item():.6f}.")
        holder = [k for k, t in enumerate(inputs) if torch.equal(entry.float(), t.float())]
        received = [got[k] for k in range(world_size) if k != rank]
        left, right = (rank - 1) % world_size, (rank + 1) % world_size
        holders = [next((k for k, t in enumerate(inputs) if _same_tensor(held, t)), None) for held in got]
        filled_by = (entry_receives or [])[source] if len(entry_receives or []) > source else None
        if (send_peers and left != right and all(peer == left for peer in send_peers)
                and all(_same_tensor(held, t) for held, t in zip(got, _gathered_backwards(inputs, world_size)[rank]))):
            hint = (f"this rank sent to rank {left}, (rank - 1), and received from rank {right}, (rank + 1): a ring "
                    "that runs the other way, while the exercise's indices are for a ring that sends to "
                    "(rank + 1) % world_size and receives from (rank - 1) % world_size. Swap the two peers.")
        elif None not in holders and sorted(holders) == list(range(world_size)):
            order = ", ".join(f"entry {k}: rank {holders[k]}'s" for k in range(world_size) if holders[k] != k)
            hint = (f"entry {source} holds rank {holders[source]}'s tensor: every entry holds some rank's tensor, in "
                    f"another order ({order}). Order the list by source rank, entry k = the tensor that started on "
                    "rank k: in step s, rank r receives the tensor that started on rank (r - s - 1) % world_size.")
        elif source == rank and own_slot_receive:
            hint = (f"receive {own_slot_receive} of this rank wrote into its own slot, entry {rank}, replacing what "
                    "it held: the ring never receives into entry rank. In step s, rank r sends entry (r - s) % "
                    "world_size and receives into entry (r - s - 1) % world_size.")
        elif source == rank:
            hint = (f"your own slot, entry {rank}, does not hold your tensor: put it there before the ring starts "
                    "(the ring only brings the other ranks' tensors).")
        elif all(torch.equal(t.float(), inputs[left].float()) for t in received) and world_size > 2:
            hint = (f"every entry this rank received holds rank {left}'s tensor, its left neighbour's own: each "
                    "rank sent its own tensor in every step. Pass on the tensor that arrived in the step before.")
        elif filled_by and not entry.any() and all(t.any() for t in inputs):
            hint = (f"entry {source} holds only zeros, and it is the buffer receive {filled_by} of this rank wrote "
                    "into: the message itself held zeros, an entry its sender had not filled yet. In step s, send "
                    "the entry that arrived in step s - 1 (in step 0, the rank's own): the entry of rank "
                    "(r - s) % world_size.")
        elif all(torch.equal(t, received[0]) for t in received) and world_size > 2:
            hint = ("every entry this rank received holds the same values: they share one receive buffer, which "
                    "each recv overwrote. Receive every step into a tensor of its own.")
        elif holder:
            hint = (f"entry {source} holds rank {holder[0]}'s tensor: index the list by the rank a tensor "
                    f"started on. In step s, rank r receives the tensor that started on rank "
                    f"(r - s - 1) % world_size.")
        else:
            hint = (f"entry {source} was never filled with rank {source}'s tensor: a ring all-gather needs "
                    f"world_size - 1 = {world_size - 1} steps, each passing on what arrived in the step before.")
        raise CheckFailed(f"{message}\nHint: {hint}")


def _same_tensor(got, expected) -> bool:
    """Whether got is a tensor equal to expected, exactly, in shape and values."""
    return torch.is_tensor(got) and got.shape == expected.shape and torch.equal(got.float(), expected.float())


# --- exercise 3: an averaging all-reduce from the two ---------------------------------------------

def check_all_reduce_mean(all_reduce_mean, world_size: int = WORLD_SIZE, timeout: float = 20.0) -> None:
    """Check an averaging all-reduce: `all_reduce_mean(tensor)` returns the element-wise MEAN over ranks.

    It runs on every rank with that rank's 1-D tensor and must return what
    `dist.all_reduce(tensor); tensor / world_size` gives, for sizes that do and do not divide
    by the world size, using only send/recv (the exercise composes the reduce-scatter and the
    all-gather built before it); on 3 ranks, then, where it is right there, on SECOND_WORLD_SIZE (4).

    Introduced in notebooks/02-collectives.ipynb.
    """
    ensure_written(all_reduce_mean)
    name = getattr(all_reduce_mean, "__name__", "all_reduce_mean")
    refuse_written_modulus(all_reduce_mean, name, "the world size, dist.get_world_size()")
    mismatch = ("a recv received a message of another size than its buffer. tensor_split's chunks differ by "
                "one element when the size does not divide by world_size (10 on 3 ranks: 4, 3, 3), but "
                "ring_all_gather receives into buffers shaped like this rank's own tensor: pad every reduced "
                "chunk with zeros to the largest chunk's size before ring_all_gather, and cut entry k back to "
                "chunk k's size afterwards.")

    passed(_on_two_world_sizes(name, world_size, timeout, _reduce_runner, all_reduce_mean, REDUCE_SIZES,
                               ("averaging",), judge_all_reduce_mean,
                               lambda failure, ranks, logs: (_explain_chunking(failure, ranks, mismatch)
                                                             or _larger_chunks_hint(failure, ranks)), hang=False))


def _larger_chunks_hint(failure, world_size: int) -> str | None:
    """The hint for an error about sizes (a RuntimeError that names a size or a dimension) raised in the first case
    whose chunks are larger than those of every case before it, which ran without one; else None."""
    exception = failure.exception
    size = _case_size(failure)
    if not (isinstance(exception, CaseFailed) and exception.kind == "RuntimeError" and size in REDUCE_SIZES
            and re.search(r"size|dimension", exception.message)):
        return None
    earlier = REDUCE_SIZES[:REDUCE_SIZES.index(size)]
    largest = max((max(chunk_sizes(other, world_size)) for other in earlier), default=None)
    sizes = chunk_sizes(size, world_size)
    if largest is None or max(sizes) <= largest:
        return None
    return (f"tensor_split's chunks of {size} elements on {world_size} ranks have {sizes} elements: up to "
            f"{max(sizes)}, more than any chunk of the sizes before it ({', '.join(map(str, earlier))}: at most "
            f"{largest}), which ran without an error. A padding or buffer whose size does not follow the tensor's (a "
            "number written in) fits only chunks up to it: pad to the largest chunk of this tensor's tensor_split, "
            "worked out from len(tensor) and world_size.")


def judge_all_reduce_mean(name: str, results: list, world_size: int = WORLD_SIZE) -> str:
    """The ✓ line for one all_reduce_mean answer's per-rank results (`_reduce_runner`'s), or CheckFailed."""
    for case, size in enumerate(REDUCE_SIZES):
        inputs = [rank_input(rank, size) for rank in range(world_size)]
        for rank in range(world_size):
            total = results[rank]["sums"][case]
            _refuse_overlap(results[rank], case, size, rank, "tensor")
            _judged_with_requests(results[rank], case, size, rank, lambda: _compare_mean(
                results[rank]["outputs"][case], total, inputs[rank], rank, size, world_size, REDUCE_SIZES[:case]))
    return (f"{name} equals dist.all_reduce / world_size on {world_size} ranks for sizes "
            f"{sizes_text(REDUCE_SIZES)}, using only send/recv")


def _compare_mean(got, total, own, rank, size, world_size, earlier=()) -> None:
    """CheckFailed if got differs from the mean; `earlier`: the sizes that passed before this one (for the hints)."""
    where = f"rank {rank}, tensor of {size} elements on {world_size} ranks"
    mean = total / world_size
    if not torch.is_tensor(got):
        raise CheckFailed(f"{where}: expected a tensor, got {describe(got)}.\n"
                          "Hint: return the averaged tensor at the end of the function.")
    if _close(got, mean):
        if got.dtype != mean.dtype:
            raise CheckFailed(f"{where}: the mean is right, but returned as {describe(got)}; expected {mean.dtype}, "
                              "the input's dtype.\nHint: dist.all_reduce keeps the input's dtype: keep the chunks, "
                              "the padding and the gathered buffers in it (torch.zeros(n, dtype=tensor.dtype)), with "
                              "no conversion (.double(), .half(), .to()).")
        return
    sizes = chunk_sizes(size, world_size)
    mine = [piece.tensor_split(world_size)[rank] for piece in (mean, total)]
    head = f"{where}: expected the mean over ranks (shape {tuple(mean.shape)}), got {describe(got)}"
    if _close(got, total):
        hint = (f"you returned the SUM over ranks; the exercise asks for the MEAN: divide by the world "
                f"size ({world_size}).")
    elif _close(got, torch.div(total, world_size, rounding_mode="floor")):
        hint = ("these are the mean's values rounded down to whole numbers: `//` on tensors floors their values "
                "(torch.div with rounding_mode='floor'). Divide with `/`.")
    elif any(_close(got, piece) for piece in mine) and got.numel() != size:
        hint = (f"that is chunk {rank} only, what this rank owns after the reduce-scatter. The all-gather "
                f"phase is missing: gather every rank's reduced chunk (ring_all_gather) and concatenate them "
                f"in rank order.")
    elif got.numel() == max(sizes) * world_size != size:
        hint = (f"{got.numel()} = {world_size} x {max(sizes)} elements for a tensor of {size}: the padding is "
                f"still there. Cut entry k of the gathered list back to chunk k's size ({sizes}) before "
                "concatenating.")
    elif _close(got, own):
        hint = "the result is this rank's own input, unchanged: return the averaged tensor, not the input."
    elif _cut_entries(got, mean, sizes):
        cut = _cut_entries(got, mean, sizes)
        same = [other for other in earlier if max(chunk_sizes(other, world_size)) == cut]
        hint = (f"every entry holds only the first {cut} elements of its chunk (tensor_split's chunks: {sizes}): "
                f"the chunks were padded, or cut, to {cut} elements, fewer than the largest chunk, {max(sizes)}. "
                + (f"{cut} is the largest chunk of {' and of '.join(map(str, same))} elements, which passed: a "
                   "padding whose size is a number written in fits only some tensor sizes. " if same else "")
                + "Pad to the largest chunk of this tensor's tensor_split, worked out from len(tensor) and "
                "world_size.")
    elif got.shape != mean.shape and got.numel() == size and _close(got.flatten(), mean):
        stacked = got.dim() == 2 and got.shape[0] == world_size
        hint = (f"the {size} values are right, in the shape {tuple(got.shape)}: return them as one 1-D tensor of "
                f"shape ({size},)" + (", the chunks joined end to end with torch.cat (torch.stack puts them in a new "
                                      "dimension)." if stacked else "."))
    elif got.shape != mean.shape:
        hint = (f"return the whole averaged tensor: the gathered chunks ({sizes} elements) concatenated in "
                "rank order.")
    elif _permuted(got, mean, sizes):
        moved = _permuted(got, mean, sizes)

        def rotated_by(shift: int) -> bool:
            return all(_close(piece, mean.split(sizes)[(k + shift) % world_size]) for k, piece in
                       enumerate(got.split(sizes)) if len(piece) == sizes[(k + shift) % world_size])
        if rank > 0 and rotated_by(rank):   # the ranks before this one were judged right: no layout shifts them all
            hint = (f"every chunk is right but in the wrong place ({moved}): the entries were joined starting from "
                    f"this rank's own (entry {rank}), where rank 0's result, which starts from entry 0, is right. "
                    "Entry k of ring_all_gather's list is rank k's chunk: concatenate the entries in list order, "
                    "from entry 0, on every rank.")
        elif rotated_by(1):
            hint = (f"every chunk is right but in the wrong place ({moved}): entry k of ring_all_gather's list is "
                    "what rank k sent, so rank k must own chunk k after the reduce-scatter (exercise 1's layout, "
                    "not the lesson's chunk (k + 1) % N).")
        else:
            hint = (f"every chunk is right but in the wrong place ({moved}): entry k of ring_all_gather's list is "
                    "rank k's chunk; concatenate the entries in list order.")
    elif _close(got, mean / world_size):
        hint = f"this is the mean divided by the world size again: divide the sum by {world_size} once."
    elif got.shape == mean.shape and _close(got, torch.cat([torch.nn.functional.pad(c, (0, max(sizes) - len(c)))
                                                             for c in mean.split(sizes)])[:size]):
        chunked = [len(c) for c in torch.empty(size).chunk(world_size)]
        hint = ("the padding of the short chunks is inside the result: every gathered entry carries its own "
                "padding at its end. Either the padding was cut from the end of the concatenation only, or each "
                f"entry was cut to sizes other than tensor_split's {sizes}"
                + (f" (tensor.chunk's are {chunked})" if chunked != sizes else "")
                + ". Cut entry k back to tensor_split's chunk k size before concatenating.")
    elif _lower_precision(got, mean):
        index = first_mismatch(got.float(), mean.float())
        head = (f"{where}, element {index[0]}: expected the mean {mean[index].item():.6f}, "
                f"got {got[index].item():.6f}")
        hint = _lower_precision(got, mean)
    else:
        index = first_mismatch(got.float(), mean.float())
        head = (f"{where}, element {index[0]}: expected the mean {mean[index].item():.6f}, "
                f"got {got[index].item():.6f}")
        hint = ("the mean is: reduce-scatter, pad your chunk to the largest chunk, all-gather, cut each entry back "
                "to its chunk's size, concatenate in rank order, divide by world_size once.")
    raise CheckFailed(f"{head}.\nHint: {hint}")


def _cut_entries(got, mean, sizes) -> int | None:
    """n (smaller than the largest chunk) when got is mean's chunks, each cut to its first n elements, in order."""
    for cut in range(1, max(sizes)):
        pieces = [chunk[:cut] for chunk in mean.split(sizes)]
        if _close(got, torch.cat(pieces)):
            return cut
    return None


def _permuted(got, mean, sizes) -> str | None:
    """'position k holds chunk j, ...' when got is mean's chunks in another order, else None."""
    pieces, wanted = got.split(sizes), mean.split(sizes)
    placed = []
    for position, piece in enumerate(pieces):
        sources = [k for k, chunk in enumerate(wanted) if _close(piece, chunk)]
        if not sources:
            return None
        placed.append((position, sources[0]))
    moved = [f"position {p} holds chunk {k}" for p, k in placed if p != k]
    return ", ".join(moved) or None

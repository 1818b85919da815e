"""Turning what the ranks reported into one exception that tells the whole story.

The one home of the reports on a rank group's failures, for `launch()` and the live cluster
alike: `build_error` (a launch: every failing rank, the first failure first), `hang_report`
(ranks still running when they should have ended, with their Python stacks and what those
suggest) and `crash_report` (ranks that died).

Introduced in notebooks/00-welcome-and-first-launch.ipynb ("What a failure looks like").
"""

from __future__ import annotations

import os
import re
import sysconfig

import cloudpickle

from ddp_lab.launcher.errors import (LaunchError, LaunchTimeout, RankCrashed, RankFailed, RankFailure,
                                    ResultNotPicklable, crash_summary, describe_exit)
from ddp_lab.launcher.payload import rename_cells
from ddp_lab.launcher.stacks import HIDDEN_FRAMES, OUTSIDE_FN
from ddp_lab.launcher.supervisor import STARTUP_S

_TAIL_LINES = 15
_CAUSE_LINES = 3   # C++'s terminate message before faulthandler's stack: "terminate called ...", "  what(): ..."
_PEER_LOST = re.compile(r"Connection closed by peer|Connection reset by peer|Broken pipe")


def _shorten(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _tail(text: str) -> str:
    """A crashed rank's output for its failure: the last _TAIL_LINES lines, and, where faulthandler's stack pushed
    them out, the _CAUSE_LINES lines just before its "Fatal Python error" (C++'s `terminate called ... what(): ...`,
    which names the cause)."""
    lines = [line for line in text.splitlines()
             if not any(f in line for f in HIDDEN_FRAMES) and not line.startswith("Extension modules:")]
    if not lines:
        return "(it printed nothing)"
    shown = lines[-_TAIL_LINES:]
    head = f"last {len(shown)} of {len(lines)} lines of its output:" if len(lines) > len(shown) else "its output:"
    fatal = max((at for at, line in enumerate(lines) if line.startswith("Fatal Python error")), default=0)
    cause = lines[max(0, fatal - _CAUSE_LINES):fatal] if 0 < fatal <= len(lines) - len(shown) else []
    above = ["what it printed before the crash's stack:"] + ["  " + line for line in cause] if cause else []
    return "\n".join(above + [head] + ["  " + line for line in shown])


def raised_failure(rank: int, report: dict, names: dict) -> RankFailure:
    """A RankFailure from a rank's report of an exception."""

    try:
        exception = cloudpickle.loads(report["exception"]) if report["exception"] else None
    except Exception:
        exception = None
    first_line = _shorten((report["text"].splitlines() or [""])[0])
    if report["type"] == "SystemExit":  # sys.exit() is sys.exit(None): exit code 0
        summary = f"called sys.exit({first_line})" + ("" if first_line else " (exit code 0)")
    elif report["phase"] == "unpickle":
        summary = f"could not unpickle fn or args: {report['type']}: {first_line}"
    elif report["phase"] == "setup":
        summary = f"failed to set up the process group: {report['type']}: {first_line}"
    else:
        summary = f"raised {report['type']}" + (f": {first_line}" if first_line else "")
    return RankFailure(rank, "raised", summary, rename_cells(report["traceback"], names), exception)


def _failure(rank: int, supervisor, names: dict) -> RankFailure:
    report = supervisor.reports.get(rank)
    code = supervisor.exits.get(rank)
    if report is None:
        process = supervisor.process_of(rank)
        ended_by = process.ended_by if process is not None else None
        summary = crash_summary(code) if ended_by is None else \
            f"died with {describe_exit(code)} before returning: {ended_by}"
        return RankFailure(rank, "crashed", summary, _tail(supervisor.outputs[rank].text()), returncode=code)
    if report["kind"] == "unpicklable":
        return unpicklable_failure(rank, report["type"], report["text"])
    return raised_failure(rank, report, names)


def unpicklable_failure(rank: int, type_name: str, why: str, gave: str = "returned",
                        instead: str = "Return plain data instead") -> RankFailure:
    """A RankFailure for a value that worked on the rank but cannot be pickled back to the notebook.

    `gave` says where the value came from ("returned"; a live cluster's cell: its last line), `instead` what to do.
    """
    return RankFailure(rank, "unpicklable", f"{gave} a {type_name} that cannot be pickled back to the notebook "
                                            f"({why}). {instead} (numbers, tensors, dicts of them).")


_NO_CPU_BACKEND = "No backend type associated with device type cpu"


def _hint(failures: dict[int, RankFailure], first: int, kind: str) -> str:
    if kind == "raised" and _NO_CPU_BACKEND in failures[first].summary:
        return ("this process group cannot move CPU tensors. NCCL (which backend='auto' picks when there is "
                "a GPU per rank) moves only CUDA tensors: put tensors and models on ddp_lab.rank_device(), "
                "or launch with backend='gloo'.")
    if kind == "timeout" and any(OUTSIDE_FN in f.details for f in failures.values()):
        return ("fn returned, but freeing its local variables blocked in C++ code. A known cause: a process "
                "group freed while its threads still needed Python's GIL (pytorch/pytorch#56297). Free "
                "models before their process group (`del model, optimizer`, then "
                "`dist.destroy_process_group()`) before fn returns.")
    if kind == "timeout":
        return timeout_hint({r: f.details for r, f in failures.items() if f.kind == "timeout"})
    if kind == "raised" and failures[first].details and "could not unpickle" in failures[first].summary:
        return ("fn or an argument refers to something a fresh process cannot import (a module only the "
                "notebook can see, or an object whose class changed). Define it in the notebook or in an "
                "importable file.")
    lost_peer = [r for r, f in failures.items() if f.secondary]
    if lost_peer:
        return (f"rank(s) {', '.join(map(str, sorted(lost_peer)))} lost a partner in a collective: they failed "
                f"because rank {first} had failed first.")
    return ""


_RENDEZVOUS_FRAMES = re.compile(r'torch/distributed/rendezvous\.py"|distributed_c10d\.py", line \d+ in init_process_group')
_TORCH_COMMS_FRAMES = re.compile(r"torch/distributed/|torch/nn/parallel/")
# autograd's way into its C++ engine (torch 2.4 and later: graph.py's _engine_run_backward; before: backward itself)
_BACKWARD_ENTRY = re.compile(r'torch/autograd/(graph\.py", line \d+ in _engine_run_backward|__init__\.py", line \d+ '
                             r'in backward)')


# faulthandler lists the innermost frame first: the first torch.distributed function named is
# the call the rank is blocked in
_C10D_CALL = re.compile(r'distributed_c10d\.py", line \d+ in (\w+)')


def blocked_in(stack: str) -> str | None:
    """The torch.distributed function a stuck rank's stack shows it waiting in ('all_reduce', 'barrier', ...): the
    outermost of the torch.distributed frames of the stack's first thread (the one the rank's code runs in: stacks.py
    puts it first), the function that code called (all_gather_object calls all_gather, new_group a helper of its
    own); None where that thread is in none (in a work's .wait(), say), whatever other threads do.

    Used by the exercise checks (their hang messages) and by lesson 12's `rank_report`.
    Introduced in notebooks/12-debugging-and-fault-tolerance.ipynb.
    """
    first = re.split(r"\n(?=(?:Current thread|Thread)\b)", stack.strip())[0]   # the thread the rank's code runs in
    run = []   # its torch.distributed frames, innermost first
    for line in first.splitlines():
        call = _C10D_CALL.search(line)
        if call is not None:
            run.append(call.group(1))
        elif run and "c10d_logger.py" not in line:   # torch's logging wrapper sits between its own calls
            break
    return run[-1] if run else None


def in_backward(stack: str) -> bool:
    """Whether a rank's Python stack (a fault-handler dump, each thread's innermost frame first) shows a thread
    inside backward's C++ engine, no Python frame above it: where DDP's hooks all-reduce the gradients, a collective
    the other ranks must join (a rank stuck there waits for a peer that skipped a backward or raised before it)."""
    for section in re.split(r"\n(?=\S)", stack):
        first = next((line for line in section.splitlines() if line.lstrip().startswith("File ")), "")
        if _BACKWARD_ENTRY.search(first):
            return True
    return False


# torch.distributed functions that answer at once from the rank's own state: a stack in them alone waits for no one
_QUERY_FUNCTIONS = frozenset({"is_initialized", "is_available", "WORLD", "get_rank", "get_world_size", "get_backend",
                              "_get_default_group", "default_pg", "_rank_not_in_group", "get_global_rank",
                              "get_group_rank", "get_process_group_ranks", "_get_group_size", "is_gloo_available",
                              "is_nccl_available", "is_mpi_available"})
_DISTRIBUTED_FRAME = re.compile(r'torch/distributed/[^"]*", line \d+ in (\w+)')


def _only_asking(stack: str) -> bool:
    """Whether every torch.distributed frame of `stack` is a query (_QUERY_FUNCTIONS), none of torch.nn.parallel:
    a rank caught in dist.is_initialized() or dist.get_rank() is not in a collective."""
    names = _DISTRIBUTED_FRAME.findall(stack)
    return bool(names) and set(names) <= _QUERY_FUNCTIONS and "torch/nn/parallel/" not in stack


def waiting_in(stack: str) -> str:
    """Where a stuck rank waits, from its Python stack: 'rendezvous', 'collective' or 'elsewhere'."""
    if _RENDEZVOUS_FRAMES.search(stack):
        return "rendezvous"  # inside init_process_group: connecting to the store, waiting for the others
    if (_TORCH_COMMS_FRAMES.search(stack) and not _only_asking(stack)) or in_backward(stack):
        return "collective"  # all_reduce, barrier, DDP's broadcast of the parameters or its gradients' all-reduce, ...
    return "elsewhere"


SLOW_HINT = "If the work is just slow, pass a larger timeout=."   # a launch's words for a longer watchdog


def timeout_hint(stacks: dict[int, str], slow: str = SLOW_HINT) -> str:
    """The watchdog's hint: the likely cause for ranks stuck in a rendezvous, in a collective, or elsewhere.

    `slow`: the sentence that says how to give slow work a longer watchdog, in the caller's words (a live cluster
    has its own, and a `%%ddp` cell the magic's); "" for none.
    """
    where: dict[str, list[int]] = {}
    for rank, stack in sorted(stacks.items()):
        where.setdefault(waiting_in(stack), []).append(rank)
    parts = []
    if "rendezvous" in where:
        parts.append(
            f"rank(s) {', '.join(map(str, where['rendezvous']))} wait inside init_process_group for every rank "
            "to join the rendezvous. Likely causes: a rank that never calls init_process_group (e.g. under "
            "`if rank == 0:`), ranks pointing at different addresses (MASTER_ADDR/MASTER_PORT or init_method "
            "differ between ranks), an address where no rank hosts the store, or a world_size larger than "
            "the number of ranks.")
    backward = [rank for rank in where.get("collective", []) if not _TORCH_COMMS_FRAMES.search(stacks[rank])]
    if len(backward) < len(where.get("collective", [])):
        parts.append(
            f"rank(s) {', '.join(map(str, sorted(set(where['collective']) - set(backward))))} wait in a collective: "
            "a rank that never returns usually waits in a collective that another rank skipped (e.g. all_reduce "
            "under `if rank == 0:`) or replaced by a different one.")
    if backward:   # waiting_in: in backward's C++ engine
        parts.append(
            f"rank(s) {', '.join(map(str, backward))} wait inside backward (in C++: a DDP model all-reduces its "
            "gradients there, a collective): with DDP every rank must run the same number of backward passes (a "
            "rank that raised before its backward, or ran out of batches first, leaves the others there).")
    if "elsewhere" in where:
        parts.append(
            f"rank(s) {', '.join(map(str, where['elsewhere']))} are not in a torch.distributed call: their stack "
            "shows where they are (a loop that never ends, or a store of your own waiting for a peer or a key "
            "that never comes).")
    if slow and ("elsewhere" in where or "collective" in where):
        parts.append(slow)
    return " ".join(parts)


def _ended_by_zygote(supervisor) -> str | None:
    """What ended the ranks' zygote, if that is what ended a failed rank."""
    for rank in supervisor.failed:
        process = supervisor.process_of(rank)
        if rank not in supervisor.reports and process is not None and process.ended_by:
            return process.ended_by
    return None


def build_error(supervisor, outcome: str, stacks: dict[int, str], names: dict,
                timeout: float | None) -> LaunchError:
    """One exception for the whole launch: every failing rank, the first failure first."""
    nprocs = supervisor.nprocs
    failures = {rank: _failure(rank, supervisor, names) for rank in supervisor.failed}
    if outcome == "timeout":
        if len(supervisor.ready) == nprocs:
            headline = still_running(stacks, nprocs, f"after timeout={timeout:g}s; stopped them.")
        else:
            headline = (f"rank(s) {listed(stacks)} of {nprocs} had not finished starting (interpreter, imports, "
                        f"init_process_group) after {STARTUP_S + timeout:g}s; stopped them.")
        return hang_report(headline, stacks, names, [o.text() for o in supervisor.outputs], raised=failures)
    lost_peer = {rank for rank, f in failures.items() if f.kind == "raised" and _PEER_LOST.search(f.details)}
    # The root cause is the first rank that failed on its own, not one that lost a partner.
    first = next((rank for rank in supervisor.failed if rank not in lost_peer), supervisor.failed[0])
    for rank in lost_peer - {first}:
        failures[rank].secondary = True
    for rank in supervisor.still_running:
        failures.setdefault(rank, RankFailure(rank, "stopped", "stopped by ddp_lab"))
    kind = failures[first].kind
    cls = {"raised": RankFailed, "crashed": RankCrashed, "unpicklable": ResultNotPicklable}[kind]
    count = len(supervisor.failed)
    headline = (f"{count} of {nprocs} ranks failed; rank {first} failed first." if count > 1
                else f"rank {first} of {nprocs} failed.")
    ended_by = _ended_by_zygote(supervisor)
    if ended_by:  # not the ranks' fault: say what happened to them, and that a rerun starts afresh
        headline = (f"{ended_by}, and the rank(s) forked from it died with it: run the cell again "
                    "(ddp_lab starts a new zygote).")
    return cls(headline, failures, first, [o.text() for o in supervisor.outputs], _hint(failures, first, kind))


def listed(ranks) -> str:
    """'0, 2, 3': ranks in order, as the reports name them."""
    return ", ".join(map(str, sorted(ranks)))


def still_running(ranks, nprocs: int, how: str) -> str:
    """A hang report's headline: 'rank(s) 0, 2 of 4 still running {how}'."""
    return f"rank(s) {listed(ranks)} of {nprocs} still running {how}"


def hang_report(headline: str, stacks: dict[int, str], names: dict, outputs: list[str], *,
                raised: dict[int, RankFailure] | None = None, hint: str | None = None, cls=LaunchTimeout,
                first: int | None = None, headline_only: bool = False) -> LaunchError:
    """The one exception for ranks still running when they should have ended (the watchdog, an
    interrupt they did not stop at): each one's Python stack (`stacks`, cells named as the notebook
    names them), after the failures of ranks that raised (`raised`).

    `hint` defaults to what the stacks suggest (a rendezvous, a collective, elsewhere: `timeout_hint`);
    `first` to the lowest stuck rank.
    """
    failures = {**(raised or {}), **{rank: RankFailure(rank, "timeout", "was still running; its Python stack",
                                                       _short_paths(rename_cells(stack, names)))
                                     for rank, stack in stacks.items()}}
    if hint is None:
        hint = _hint(failures, None, "timeout")
    if first is None and stacks:
        first = min(stacks)
    return cls(headline, failures, first, outputs, hint, headline_only=headline_only)


def _short_paths(stack: str) -> str:
    """A stack with each installed package's file named from its site-packages folder on (`File "/home/me/.venv/lib/
    python3.11/site-packages/torch/distributed/distributed_c10d.py"` -> `File ".../site-packages/torch/distributed/
    distributed_c10d.py"`), and the standard library's from its folder (`File ".../python3.11/threading.py"`): where
    the environment lives says nothing about where the rank waits, and the stack reads the same on every machine."""
    stack = _INSTALLED_FILE.sub(r'File ".../\1', stack)
    return _STANDARD_FILE.sub(lambda found: f'File ".../{os.path.basename(found.group(1))}/', stack)


_INSTALLED_FILE = re.compile(r'File "[^"\n]*/((?:site|dist)-packages/)')
_STANDARD_FILE = re.compile('File "(' + "|".join(re.escape(sysconfig.get_paths()[name].rstrip("/"))
                                                 for name in ("stdlib", "platstdlib")) + ')/')


def crash_report(headline: str, exits: dict[int, int | None], outputs: list[str], *, summary=crash_summary,
                 hint: str = "", headline_only: bool = False) -> RankCrashed:
    """The one exception for ranks that died (`exits`: rank -> exit status, None if it did not arrive),
    each described by `summary(status)`."""
    failures = {rank: RankFailure(rank, "crashed", summary(code), returncode=code) for rank, code in exits.items()}
    return RankCrashed(headline, failures, min(failures), outputs, hint, headline_only=headline_only)

"""Reading a failed launch: one line per rank, the same on every machine and torch version.

A `ddp_lab.LaunchError` already holds everything (`failures`, `first_rank`, `outputs`,
every stuck rank's Python stack); its message also quotes torch's own error text, pids and
paths, which differ between runs. `rank_report` keeps only the facts: what happened to each
rank, and for a rank the watchdog found still running, where it waits.

Introduced in notebooks/12-debugging-and-fault-tolerance.ipynb.
"""

from __future__ import annotations

import json
import re

from ddp_lab.launcher.errors import LaunchError, RankFailure, describe_exit
from ddp_lab.launcher.reports import blocked_in, waiting_in

def _exception_name(failure: RankFailure) -> str:
    if failure.exception is not None:
        return type(failure.exception).__name__
    match = re.match(r"raised (\w+)", failure.summary)
    return match.group(1) if match else "an exception"


def _state(failure: RankFailure | None, first_rank: int | None, several: bool) -> str:
    if failure is None:
        return "returned"
    if failure.kind == "stopped" or failure.secondary:
        # stopped by ddp_lab, or failed first in its own collective when the peer vanished: which
        # of the two depends on timing, the cause does not
        return f"ended because rank {first_rank} failed first"
    first = " (first failure)" if several and failure.rank == first_rank else ""
    if failure.kind == "timeout":
        where = waiting_in(failure.details)
        if where == "collective":
            call = blocked_in(failure.details)
            where = f"in a collective (dist.{call})" if call else "in a collective"
        elif where == "rendezvous":
            where = "in rendezvous (init_process_group)"
        else:
            where = "outside torch.distributed"
        return f"still running at the watchdog's timeout, waiting {where}"
    if failure.kind == "crashed":
        return f"died with {describe_exit(failure.returncode)} without a Python traceback{first}"
    if failure.kind == "raised":
        return f"raised {_exception_name(failure)}{first}"
    return failure.summary


def rank_report(error: LaunchError) -> list[str]:
    """One line per rank of a failed `ddp_lab.launch`: returned, raised, died, stuck (and where), stopped.

    Only facts that do not depend on timing, pids, ports or torch's wording, so a notebook
    can print them in a cell whose output is compared.

    Example:
        >>> try:
        ...     ddp_lab.launch(skips_the_collective, nprocs=2, timeout=3)
        ... except ddp_lab.LaunchTimeout as error:
        ...     print(*rank_report(error), sep="\\n")
        rank 0: still running at the watchdog's timeout, waiting in a collective (dist.all_reduce)
        rank 1: returned

    Introduced in notebooks/12-debugging-and-fault-tolerance.ipynb.
    """
    nprocs = len(error.outputs)
    own = [f for f in error.failures.values() if f.kind not in ("stopped", "timeout") and not f.secondary]
    return [f"rank {rank}: {_state(error.failures.get(rank), error.first_rank, len(own) > 1)}"
            for rank in range(nprocs)]


_MISSING = re.compile(r"Ranks? ((?:\d+(?:, ?)?)+) failed to pass monitoredBarrier")


def monitored_barrier_missing(message: str) -> list[int] | None:
    """The ranks a `dist.monitored_barrier` error names as missing, or None if its wording is not recognised.

    The wording is torch's ("Ranks 2 failed to pass monitoredBarrier in 2000 ms" in 2.8 to
    2.15); a torch that words it otherwise gives None rather than a wrong answer.

    Introduced in notebooks/12-debugging-and-fault-tolerance.ipynb.
    """
    found = _MISSING.findall(message)
    if not found:
        return None
    return sorted({int(rank) for group in found for rank in re.findall(r"\d+", group)})


FLIGHT_RECORDER_ENV = {"TORCH_FR_BUFFER_SIZE": "2000"}  # entries kept per rank (torch 2.13's default); read when a group is created


def flight_recorder_entries(backend: str = "nccl") -> list[dict] | None:
    """This rank's flight-recorder entries (oldest first), or None where this torch has no recorder.

    The flight recorder keeps the last collectives every process group started (name, sizes,
    sequence number, state), so a hung job can be dumped and compared rank by rank. It keeps as
    many entries as `TORCH_FR_BUFFER_SIZE` says when the group is made (FLIGHT_RECORDER_ENV sets 2000,
    torch 2.13's default, so that older releases, which may keep none by default, record too).
    Torch builds name the dump differently: CUDA builds have `_dump_nccl_trace_json` for NCCL,
    every build from 2.8 has `_dump_fr_trace_json` (which also sees gloo's entries, though they
    stay 'scheduled' there); this is the one place that chooses.

    Introduced in notebooks/12-debugging-and-fault-tolerance.ipynb.
    """
    import torch._C._distributed_c10d as c10d   # lazy: torch, only for the GPU cell that dumps the recorder

    names = ("_dump_nccl_trace_json", "_dump_fr_trace_json") if backend == "nccl" else ("_dump_fr_trace_json",)
    dump = next((getattr(c10d, name) for name in names if hasattr(c10d, name)), None)
    if dump is None:
        return None
    return json.loads(dump(True, False)).get("entries", [])

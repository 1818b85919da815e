"""Capturing each rank's stdout and stderr at the file-descriptor level, and printing it.

A rank's fd 1 and fd 2 are pipes, so everything it writes arrives here: `print`, Python
warnings, C++ log lines, output of subprocesses it starts. Reader threads split the bytes
into lines (undecodable bytes are kept as `\\xNN` escapes) and hand them to the launcher.
The launcher prints them from the notebook's own process, which is why they show up in a
cell even where the kernel does not capture child output (nbval, some hosted notebooks).

Printing rank by rank, each line prefixed `[rank k]`, makes the cell's output identical
on every run however the ranks were scheduled.
"""

from __future__ import annotations

import codecs
import os
import sys
import threading
from dataclasses import dataclass, field

_CHUNK = 1 << 16


@dataclass
class RankOutput:
    """One rank's captured lines in arrival order: a list of (stream name, line)."""

    rank: int
    lines: list[tuple[str, str]] = field(default_factory=list)

    def text(self) -> str:
        """stdout and stderr interleaved as they arrived, without prefixes."""
        return "".join(line for _, line in self.lines)


def read_lines(fd: int, on_line) -> None:
    """Read a pipe to EOF, calling on_line(text) for each line (the last may lack '\\n')."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="backslashreplace")
    pending = ""
    while True:
        try:
            chunk = os.read(fd, _CHUNK)
        except OSError:
            chunk = b""
        pending += decoder.decode(chunk, final=not chunk)
        *complete, pending = pending.split("\n")
        for line in complete:
            on_line(line + "\n")
        if not chunk:
            break
    if pending:
        on_line(pending)


def start_reader(fd: int, stream: str, rank: int, deliver) -> threading.Thread:
    """Start a daemon thread that calls deliver(rank, stream, line) for every line of fd."""
    thread = threading.Thread(
        target=read_lines, args=(fd, lambda line: deliver(rank, stream, line)),
        name=f"ddp_lab-rank{rank}-{stream}", daemon=True,
    )
    thread.start()
    return thread


def prefixed(rank: int, line: str) -> str:
    """'[rank 3] hello\\n' — a newline is added to a last line that had none."""
    return f"[rank {rank}] {line if line.endswith(chr(10)) else line + chr(10)}"


def print_line(rank: int, stream: str, line: str) -> None:
    """Print one captured line to the notebook's stdout or stderr, prefixed."""
    target = sys.stderr if stream == "stderr" else sys.stdout
    target.write(prefixed(rank, line))


_pending_notes: list[str] = []
_printed_notes: set[str] = set()


def note(text: str) -> None:
    """Queue a one-line machine note ("ddp_lab: ...") for the output of the launch about to run.

    Notes depend on the machine (cores, GPUs). Printed only on a stream the ranks print to
    (stdout if they print there, else stderr), they never decide whether a notebook cell has
    some stdout or stderr at all, which nbval compares; their lines themselves are dropped by
    tests/sanitize.cfg. A note is printed once per kernel; one whose launch printed nothing is
    dropped with that launch (the next launch it applies to queues it again), never shown
    under a later cell.
    """
    if text not in _pending_notes and text not in _printed_notes:
        _pending_notes.append(text)


def print_in_rank_order(outputs: list[RankOutput]) -> None:
    """Print every rank's lines, rank 0 first; consecutive lines of a stream in one write.

    This launch's machine notes (`note`) come first, on the first stream the ranks used.
    """
    streams = {stream for output in outputs for stream, _ in output.lines}
    if _pending_notes and streams:
        target = sys.stdout if "stdout" in streams else sys.stderr
        target.write("".join(f"{text}\n" for text in _pending_notes))
        _printed_notes.update(_pending_notes)
    _pending_notes.clear()   # never carried to a later launch
    for output in outputs:
        run_stream, run = None, []
        for stream, line in output.lines + [(None, "")]:
            if stream != run_stream and run:
                (sys.stderr if run_stream == "stderr" else sys.stdout).write("".join(run))
                run = []
            run_stream = stream
            if stream is not None:
                run.append(prefixed(output.rank, line))
    sys.stdout.flush()
    sys.stderr.flush()

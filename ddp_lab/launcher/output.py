"""Capturing each rank's stdout and stderr at the file-descriptor level, and printing it.

A rank's fd 1 and fd 2 are pipes, so everything it writes arrives here: `print`, Python
warnings, C++ log lines, output of subprocesses it starts. Reader threads split the bytes
into lines (undecodable bytes are kept as `\\xNN` escapes) and hand them to the launcher,
which keeps all but one shape of torch's own log noise (`is_torch_log_noise`).
The launcher prints them from the notebook's own process, which is why they show up in a
cell even where the kernel does not capture child output (nbval, some hosted notebooks).

Printing rank by rank, each line prefixed `[rank k]`, makes the cell's output identical
on every run however the ranks were scheduled.
"""

from __future__ import annotations

import codecs
import os
import re
import select
import sys
import threading
from dataclasses import dataclass, field

from ddp_lab.launcher.progress import last_rewrite

_CHUNK = 1 << 16
_READS_AFTER_STOP = 64  # at most 4 MiB read after a stop: a pipe holds 64 KiB unless enlarged


@dataclass
class RankOutput:
    """One rank's captured lines in arrival order: a list of (stream name, line)."""

    rank: int
    lines: list[tuple[str, str]] = field(default_factory=list)

    def text(self) -> str:
        """stdout and stderr interleaved as they arrived, without prefixes."""
        return "".join(line for _, line in self.lines)


def read_lines(fd: int, on_line, stop_fd: int | None = None, on_progress=None) -> bool:
    """Read one pipe to EOF, calling on_line(text) for each line (the last may lack '\\n'); `read_streams` for one
    pipe. A line still being rewritten with '\\r' (a progress bar) also goes to on_progress(text) as it changes."""
    return read_streams([(fd, on_line, on_progress)], stop_fd)


def read_streams(pipes: list[tuple[int, object, object]], stop_fd: int | None = None) -> bool:
    """Read several pipes to EOF in this one thread: for each (fd, on_line, on_progress), on_line(text) for each
    line of that pipe (the last may lack '\\n') and on_progress(text) (if not None) for each new state of a line
    being rewritten with '\\r'.

    One thread reads a rank's stdout and stderr: what it read from one pipe is handed on before it looks at the
    other again, so lines a rank writes to the two in turn, each write waiting until the other pipe is read
    (worker.keep_output_in_order), reach on_line in the order written (a line when its '\\n' comes). Linear in the
    output's size however long its lines (`_LineSplitter`).

    When `stop_fd` becomes readable (the launcher gave up waiting for EOF: something outside the rank, a process
    it started in a session of its own, still holds a pipe), what the pipes hold at that moment is read, and
    reading stops. Returns False if it stopped so (cut off), True at EOF of every pipe.
    """
    splitters = {fd: _LineSplitter(on_line, on_progress) for fd, on_line, on_progress in pipes}
    poller = select.poll()
    for fd in splitters:
        poller.register(fd, select.POLLIN)
    if stop_fd is not None:
        poller.register(stop_fd, select.POLLIN)
    stopping = cut_off = False
    reads_left = dict.fromkeys(splitters, _READS_AFTER_STOP)
    while splitters:
        ready = {fd for fd, _ in poller.poll()} if not stopping else set(splitters)
        if not stopping and stop_fd in ready:
            stopping = True
            for fd in splitters:
                os.set_blocking(fd, False)
            ready = set(splitters)
        for fd in sorted(ready & splitters.keys()):
            ended = False
            try:
                chunk = os.read(fd, _CHUNK)
            except BlockingIOError:  # stopping, and the pipe is empty: what was written is read
                chunk, ended = b"", True
            except OSError:
                chunk = b""
            if stopping:
                reads_left[fd] -= 1
                ended = ended or reads_left[fd] == 0
            cut_off = cut_off or ended
            splitters[fd].feed(chunk, final=ended or not chunk)
            if ended or not chunk:
                del splitters[fd]
                poller.unregister(fd)
    return not cut_off


class _LineSplitter:
    """Bytes in, whole lines out to on_line, in time linear in the bytes.

    A line is kept as the list of its pieces and joined once, when its '\\n' arrives:
    growing one string and splitting all of it again for every 64 KiB chunk made a single
    32 MB line cost 23 s of CPU, quadratic in its length. Of a line rewritten with '\\r' only
    what a later '\\r' did not overwrite is kept (progress.last_rewrite), so a progress bar
    updated for hours holds one update, and each new state goes to on_progress.
    """

    def __init__(self, on_line, on_progress=None):
        self.on_line = on_line
        self.on_progress = on_progress
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="backslashreplace")
        self.pieces: list[str] = []  # the line being read, not yet ended by '\\n'

    def feed(self, chunk: bytes, final: bool) -> None:
        *complete, rest = self.decoder.decode(chunk, final=final).split("\n")  # only the new text
        if complete:
            complete[0] = "".join(self.pieces) + complete[0]
            self.pieces.clear()
            for line in complete:
                self.on_line(line + "\n")
        if rest:
            self._keep(rest)
        if final and self.pieces:
            self.on_line("".join(self.pieces))
            self.pieces.clear()

    def _keep(self, rest: str) -> None:
        """Add the start of an unfinished line; one rewritten with '\\r' goes to on_progress too."""
        if "\r" not in rest:
            self.pieces.append(rest)
            return
        start = last_rewrite(rest)
        if start >= 0:  # what came before that '\r', in this chunk or earlier ones, is overwritten
            self.pieces = [rest[start:]]
        else:
            self.pieces.append(rest)
        if self.on_progress is not None:
            self.pieces = ["".join(self.pieces)]
            self.on_progress(self.pieces[0])


_GLOO_CONNECTED = re.compile(
    r"\[Gloo\] Rank \d+ is connected to (\d+) peer ranks\. Expected number of connected peer ranks is : (\d+)\n")


def is_torch_log_noise(stream: str, line: str) -> bool:
    """Whether a rank's output line is torch's own log noise, which the launcher drops.

    Only one line shape is dropped, whole: the note gloo's TCP transport writes to stdout
    (`std::cout`) on every rank for every process group it connects,

        [Gloo] Rank 0 is connected to 3 peer ranks. Expected number of connected peer ranks is : 3

    in torch 2.8.0 (measured; public logs of 2.9.1 show it too). 2.13.0 and 2.15.0 print
    nothing: gloo made it an INFO log, off by default (`GLOO_LOG_LEVEL`, pytorch/gloo#467).

    It is dropped because it would stand in a cell's output (and in `Results.outputs`) among
    the rank's own prints on those versions only, so the same lesson would print differently
    across the declared torch range, and it says nothing the launch does not already prove.
    Kept: the same note when the counts differ (some peers are not connected: it may explain
    a hang), anything on stderr, and any line with other text around it: every line that is
    not exactly that note on stdout reaches the cell, so real errors and a learner's own prints
    do (unless a learner prints that very note).

    Introduced with the launcher in notebooks/00-welcome-and-first-launch.ipynb.
    """
    match = _GLOO_CONNECTED.fullmatch(line) if stream == "stdout" else None
    return match is not None and match.group(1) == match.group(2)


def start_readers(pipes: list[tuple[int, str]], rank: int, deliver, stop_fd: int | None = None,
                  progress=None) -> threading.Thread:
    """Start a daemon thread that calls deliver(rank, stream, line) for every line of each (fd, stream name) pipe
    of one rank, in the order the rank wrote them (`read_streams`).

    `progress(rank, stream, text)`, if given, gets each new state of a line being rewritten with
    '\\r'. The thread ends at EOF of every pipe, or soon after `stop_fd` becomes readable.
    """
    def handlers(stream: str):
        on_progress = None if progress is None else (lambda text: progress(rank, stream, text))
        return (lambda line: deliver(rank, stream, line)), on_progress

    thread = threading.Thread(
        target=read_streams, args=([(fd, *handlers(stream)) for fd, stream in pipes], stop_fd),
        name=f"ddp_lab-rank{rank}-output", daemon=True,
    )
    thread.start()
    return thread


def prefixed(rank: int, line: str) -> str:
    """'[rank 3] hello\\n' — a newline is added to a last line that had none."""
    return f"[rank {rank}] {line if line.endswith(chr(10)) else line + chr(10)}"


def print_line(rank: int, stream: str, line: str) -> None:
    """Print one captured line to the notebook's stdout or stderr, prefixed."""
    _write(stream, prefixed(rank, line))


_last_written = ["stdout"]   # the name of the stream `_write` wrote to last


def _write(stream: str, text: str) -> None:
    """Write `text` to sys.stdout or sys.stderr ("stdout", "stderr"), flushing the other one first if it was written
    last: a Jupyter kernel buffers its two streams apart and would otherwise show all of stdout before stderr. The
    stream is looked up now (a kernel, or pytest, may have replaced it since)."""
    name = "stderr" if stream == "stderr" else "stdout"
    if _last_written[0] != name:
        getattr(sys, _last_written[0]).flush()
        _last_written[0] = name
    getattr(sys, name).write(text)


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
        _write("stdout" if "stdout" in streams else "stderr", "".join(f"{text}\n" for text in _pending_notes))
        _printed_notes.update(_pending_notes)
    _pending_notes.clear()   # never carried to a later launch
    for output in outputs:
        run_stream, run = None, []
        for stream, line in output.lines + [(None, "")]:
            if stream != run_stream and run:
                _write(run_stream, "".join(run))
                run = []
            run_stream = stream
            if stream is not None:
                run.append(prefixed(output.rank, line))
    sys.stdout.flush()
    sys.stderr.flush()

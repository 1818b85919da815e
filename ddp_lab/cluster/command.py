"""One command on a live cluster's ranks (a `%%ddp` cell, `run`, `pull`): sent, watched, interrupted.

A command is done when every rank it was sent to has replied and written its end-of-command
mark on stdout and stderr (so all of its output has arrived). Until then `CommandWatch` handles
the rank group's events: a rank that died; ranks still running after another rank failed (waited
for while they run Python code, stuck once they wait in a collective for the failed rank); ranks
still running at the watchdog (interrupted where they run Python code, as the stop button does,
so that the cluster keeps its state; stuck where they wait in a collective); Jupyter's stop
button, which interrupts the ranks' code and leaves the cluster up unless a rank does not stop.
The reports themselves are the rank group's (launcher/reports.py); this module only says what
happened to the cell, in the words of whoever drives the cluster: the Python API's (`timeout=`,
`ddp_lab.Cluster(...)`), or the magic's for the cluster that `%%ddp` cells run on (`--timeout`,
"run the cell again").

Introduced in notebooks/00b-live-cluster.ipynb.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import psutil

from ddp_lab.launcher.errors import LaunchError, LaunchTimeout, RankCrashed, RankFailed, RankFailure
from ddp_lab.launcher.payload import rename_cells
from ddp_lab.launcher.rank_group import RankGroup
from ddp_lab.launcher.reports import (blocked_in, in_backward, listed, raised_failure, still_running, timeout_hint,
                                     unpicklable_failure, waiting_in)
from ddp_lab.launcher.supervisor import READER_WAIT_S

AFTER_FAILURE_S = 5.0  # once a rank failed: when the ranks still running are first looked at (their stacks)
LOOK_AGAIN_S = 2.0  # then: how often, while they run Python code (stuck once they wait in a collective)
INTERRUPT_GRACE_S = 3.0  # after an interrupt: how long a rank may take to stop before it counts as stuck
INTERRUPT_CHECK_S = 0.5  # after an interrupt: how often the ranks still running are looked at (their stacks)
MOVED_CHECK_S = 0.5  # at the watchdog, with a rank in a collective: how long its stacks are watched for a change
MOVED_LOOK_S = 0.1  # ... and how often they are read then
MOVED_CPU_SHARE = 0.2  # ... or the share of a core the stuck ranks use then that shows them at work
STILL_RUNNING = object()  # collect's answer when ranks still run at its deadline after an interrupt
# A value that cannot be pickled back, by command kind: (where it came from, what to do instead)
UNPICKLABLE_ADVICE = {
    "exec": ("gave, as the cell's last line,",
             "End the cell with a statement (name = ...; the value stays on the rank), or with plain data"),
    "call": ("returned", "Return plain data instead"),
    "pull": ("holds in that variable", "Pull plain data made from it on the ranks"),
}
# What a command's ranks had finished, by command kind, in a note after an interrupt ("had finished the cell")
FINISHED = {"exec": "the cell", "pull": "the pull"}
# How to give slow work a longer watchdog, in the Python API's words (`in_words` gives a %%ddp cell the magic's)
SLOW = "If the work is just slow, give it a longer watchdog: timeout=SECONDS (timeout=None: no watchdog)."


def in_words(text: str, magic: bool) -> str:
    """`text`, written in the Python API's words (`timeout=SECONDS`), in the words of whoever drives the cluster:
    as it is for a Cluster used directly; in the magic's (`--timeout SECONDS`: magics._as_options) for the cluster
    that `%%ddp` cells run on (`magic`)."""
    if not magic:
        return text
    from ddp_lab.cluster.magics import _as_options  # lazy: magics imports the cluster, which imports this module
    return _as_options(text)


def restart(magic: bool) -> str:
    """How to get a fresh cluster once this one was shut down: the next `%%ddp` cell starts one (`magic`); a
    Cluster used directly stays shut down, and a new one is made."""
    return "run the cell again to start a fresh one." if magic else "start a fresh one with ddp_lab.Cluster(...)."


def fresh_start(magic: bool) -> str:
    """The sentence that ends a message whose error shut the cluster down."""
    return f"The cluster was shut down; {restart(magic)}"


class CommandWatch:
    """Sending one command to the ranks in `running` and watching it until they all finished it.

    Args:
        group: the cluster's ranks.
        command_id: the command's number (its replies and marks carry it).
        running: the ranks that run it.
        names: the notebook's names for its cells (tracebacks say "Cell In[5]").
        shut_down: ends the cluster; called before an error that leaves no cluster behind.
        magic: whether `%%ddp` cells run on this cluster: its hints then use the magic's words (`in_words`).
    """

    def __init__(self, group: RankGroup, command_id: int, running: list[int], names: dict, shut_down,
                 magic: bool = False):
        self.group, self.command_id, self.running, self.names = group, command_id, running, names
        self.magic = magic
        self.fresh_start = fresh_start(magic)
        self.nprocs = group.nprocs
        self.replies: dict[int, dict] = {}
        self.marks: dict[int, set] = {rank: set() for rank in range(self.nprocs)}
        self.sent: list[int] = []  # the ranks the command reached
        self.kind = "exec"         # the command's kind, once sent (rank_loop._execute's kinds)
        self.ended_cluster = False  # whether the command's outcome shut the cluster down
        self._shut_down_cluster = shut_down

    def _shut_down(self) -> None:
        self.ended_cluster = True
        self._shut_down_cluster()

    def send(self, command: dict) -> None:
        """Send the command to every rank in `running` (RankGone if one has died)."""
        self.kind = command["kind"]
        self.group.send({**command, "id": self.command_id}, self.running, self.sent)

    def collect(self, timeout: float | None, interrupted: bool = False):
        """Wait until every rank in `running` replied and its output is complete.

        Returns None, or the error to raise: ranks that raised (the cluster lives on), a crash, ranks
        stuck in a collective after another rank failed, or ranks still running at the watchdog
        (`timeout`; `_at_the_watchdog`). After an interrupt, ranks still running at `timeout` give
        STILL_RUNNING instead (the caller decides).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        first_failed = look_at = None   # look_at: after a failure, when to look at the ranks still running
        while not all(rank in self.replies and len(self.marks[rank]) == 2 for rank in self.running):
            if self.group.exits:
                return self._crashed()
            limit = min(t for t in (deadline, look_at, float("inf")) if t)
            now = time.monotonic()
            if now >= limit:
                if interrupted:
                    return STILL_RUNNING
                if deadline is not None and now >= deadline:
                    return self._at_the_watchdog(timeout, first_failed)
                stacks = self.group.stacks(self._waiting())
                if any(waiting_in(stack) != "elsewhere" for stack in stacks.values()):
                    return self._stuck(timeout, stacks, after_failure=True)
                look_at = now + LOOK_AGAIN_S   # they run Python code: the cell goes on until they end it
                continue
            event = self.group.next_event(None if limit == float("inf") else limit)
            if event is None:
                continue
            kind, rank, value = event
            if kind == "reply" and value["id"] == self.command_id:
                self.replies[rank] = value
                if not value["ok"] and first_failed is None:
                    first_failed = rank   # the first failure to reach the kernel
                    look_at = time.monotonic() + AFTER_FAILURE_S
            elif kind == "mark" and value[1] == self.command_id:
                self.marks[rank].add(value[0])
        return self._failed(first_failed)

    def _failed(self, first_failed: int | None) -> LaunchError | None:
        """Once every rank replied: None if all succeeded, else the RankFailed of the ranks that did not (the
        cluster lives on); `first_failed` is named first, if it failed."""
        failures = {r: self._failure(r, reply) for r, reply in self.replies.items() if not reply["ok"]}
        if not failures:
            return None
        first = first_failed if first_failed in failures else min(failures)
        count = (f"rank {first}" if len(failures) == 1 else
                 f"{len(failures)} ranks ({', '.join(map(str, sorted(failures)))})")
        # some raised and some could not send their values back: "failed", and each rank's line says how
        unpicklable = {failure.kind == "unpicklable" for failure in failures.values()}
        did = ("raised" if unpicklable == {False} else "failed" if unpicklable == {False, True} else
               "could not send its value back" if len(failures) == 1 else "could not send their values back")
        return RankFailed(f"{count} of {self.nprocs} {did}; the cluster is still running.",
                          failures, first, self.group.texts())

    def _failure(self, rank: int, reply: dict):
        """The RankFailure of a rank's failed reply: an exception, or a value that cannot travel to the notebook."""
        if "unpicklable" not in reply:
            return raised_failure(rank, reply, self.names)
        gave, instead = UNPICKLABLE_ADVICE.get(self.kind, UNPICKLABLE_ADVICE["call"])   # regroup returns None
        return unpicklable_failure(rank, reply["unpicklable"], reply["text"], gave, instead)

    def interrupt(self, pressed: bool = True) -> LaunchError | None:
        """Jupyter's stop button: a KeyboardInterrupt in every rank the command reached that still runs it.

        Each rank's code raises KeyboardInterrupt where it is (rank_loop.py: between commands a
        rank ignores SIGINT), and the ranks, their variables and their process group stay. A rank
        that does not stop within INTERRUPT_GRACE_S is blocked in C++ code, most likely a collective
        whose peers were interrupted before they joined it (or wait in a different one): then the
        cluster is shut down and the one-line error saying so is returned. A rank left alone in a
        collective (every other rank is out of the command) cannot finish it, so it is not waited for.
        A rank that had finished the command and is sending its value back (pickled by torch's and the
        pickler's own code, or the bytes still on their way: a large pull) is not stuck and cannot be
        interrupted: it is waited for, with a line saying so once the grace is over (`pressed`: the stop
        button, not the watchdog, asked: pressing it again shuts the cluster down). A rank whose pickling runs
        the cell's own code (a class's __reduce__) may never end: it counts as running.
        """
        self.running = running = self.sent  # from now on, the ranks the command reached
        self.group.interrupt([rank for rank in running if rank not in self.replies])
        grace_ends = time.monotonic() + INTERRUPT_GRACE_S
        told = False
        while True:
            step = max(0.0, min(INTERRUPT_CHECK_S, grace_ends - time.monotonic())) or INTERRUPT_CHECK_S
            problem = self.collect(step, interrupted=True)
            if problem is not STILL_RUNNING:
                return problem
            waiting = [r for r in running if r not in self.replies]
            stacks = self.group.stacks(waiting)
            sending = [r for r in waiting if len(self.marks[r]) == 2 or (
                sending_its_value(stacks.get(r, "")) and _innermost_cell_frame(stacks.get(r, ""), self.names) is None)]
            stopping = [r for r in waiting if r not in sending]
            past_grace = time.monotonic() >= grace_ends
            if not stopping:
                if past_grace and not told:
                    again = " (press stop again to shut the cluster down)" if pressed else ""
                    print(f"ddp_lab: rank(s) {listed(sending)} had finished {FINISHED.get(self.kind, 'the command')} "
                          "and are sending their values to the notebook, which cannot be interrupted; waiting for "
                          f"them{again}.", file=sys.stderr, flush=True)
                    told = True
                continue
            alone_in_a_collective = len(stopping) == 1 and waiting_in(stacks.get(stopping[0], "")) == "collective"
            if alone_in_a_collective or past_grace:
                return self._still_running_after_interrupt({r: stacks[r] for r in stopping if r in stacks},
                                                           time.monotonic() - grace_ends + INTERRUPT_GRACE_S)

    def interrupted_notes(self) -> list[str]:
        """One line per rank after an interrupt: where its code was interrupted, or how it ended."""
        return [f"[rank {rank}] {_interrupted_where(self.replies[rank], self.names, self.kind)}"
                for rank in self.running]

    def lost_group(self) -> list[int]:
        """The ranks whose cell destroyed the default process group."""
        return sorted(rank for rank, reply in self.replies.items() if reply.get("group") is False)

    # -- what happened to the cell ----------------------------------------------------------
    def _crashed(self) -> LaunchError:
        time.sleep(0.2)  # let the rest of the news arrive
        crashed = dict(self.group.exits)
        self._shut_down()
        return self.group.crash_report(f"rank {min(crashed)} of {self.nprocs} died.", crashed,
                                       hint=self.fresh_start)

    def _waiting(self) -> list[int]:
        """The ranks running the command that have not replied yet."""
        return [r for r in self.running if r not in self.replies]

    def _at_the_watchdog(self, timeout: float, first_failed: int | None) -> LaunchError | None:
        """Ranks still running at the watchdog: stuck where one waits in a collective (the cluster is shut down);
        interrupted, as the stop button does, where all of them run Python code (a cell that is only slow: the
        cluster keeps its ranks and their variables, unless a rank does not stop). A rank whose reply then says it
        finished the command (its value, or one that cannot travel back) ended just after the watchdog: it is not
        timed out, and if every rank did so the command ends as if in time; so does a command whose every rank
        replied in time, the end of its output still being read (waited for, at most READER_WAIT_S). `first_failed`:
        the rank whose failure reached the notebook first, if one failed."""
        waiting = self._waiting()
        if not waiting:   # every rank replied in time; only the ends of their output were still on their way
            rest = self.collect(READER_WAIT_S, interrupted=True)
            return rest if isinstance(rest, RankCrashed) else self._failed(first_failed)
        stacks = self.group.stacks(waiting)
        left_out = [r for r in range(self.nprocs) if r not in self.running]
        after_failure = first_failed is not None
        if left_out and not after_failure and any(waiting_in(stack) == "collective" for stack in stacks.values()):
            return self._left_out(stacks, timeout, left_out)
        if not stacks or any(waiting_in(stack) != "elsewhere" for stack in stacks.values()):
            return self._stuck(timeout, stacks, after_failure=after_failure)
        problem = self.interrupt(pressed=False)
        if self.ended_cluster:
            return problem   # a rank that did not stop: the one line says so, and the cluster was shut down
        timed_out = [r for r in waiting if not self.replies[r]["ok"] and "unpicklable" not in self.replies[r]]
        if not timed_out:
            return self._failed(first_failed)   # every rank finished the command, just after the watchdog
        failures = {r: self._failure(r, reply) for r, reply in self.replies.items()
                    if not reply["ok"] and r not in timed_out}
        failed = sorted(failures)
        for rank in timed_out:
            failures[rank] = RankFailure(rank, "timeout", f"was still running after timeout={timeout:g}s; "
                                         f"{_interrupted_where(self.replies[rank], self.names, self.kind)}")
        how = (f"after timeout={timeout:g}s, running Python code: interrupted there, as the stop button does; the "
               "cluster keeps its ranks and their variables.")
        headline = still_running(timed_out, self.nprocs, how)
        if failed:
            headline = f"rank(s) {listed(failed)} failed, and {headline}"
        first = (first_failed if first_failed in failures else min(failed)) if failed else min(timed_out)
        return (RankFailed if failed else LaunchTimeout)(headline, failures, first, self.group.texts(),
                                                         in_words(SLOW, self.magic))

    def _stuck(self, timeout: float | None, stacks: dict[int, str], after_failure: bool) -> LaunchError:
        """Ranks stuck (or too slow) with one in a collective: the cluster is shut down (a group half-way through a
        collective cannot be trusted), and the report says where each rank was. At the watchdog the stacks are read
        a second time: stacks that moved show a cell that is slow, not stuck, and the hint says so."""
        waiting = list(stacks) or self._waiting()
        moving = not after_failure and stacks and self._moved(stacks)
        raised = {r: self._failure(r, reply) for r, reply in self.replies.items() if not reply["ok"]}
        self._shut_down()
        in_collective = [rank for rank, stack in stacks.items() if waiting_in(stack) != "elsewhere"]
        why = (f"after another rank failed; rank(s) {listed(in_collective)} wait in a collective (for the failed "
               "rank, most likely)" if after_failure else f"after timeout={timeout:g}s")
        if moving:
            longer = in_words("Give it a longer watchdog (timeout=SECONDS, or timeout=None for none)", self.magic)
            hint = ("the ranks were still working (their stacks changed, or they used the CPU, in the "
                    f"{MOVED_CHECK_S:g} s after the watchdog), so the cell is slow, not stuck. {longer}: a rank "
                    "inside a collective cannot be interrupted safely, so the cluster was shut down; "
                    f"{restart(self.magic)}")
        else:   # after a failure the ranks wait for the failed rank: a longer watchdog would not help them
            hint = f"{timeout_hint(stacks, '' if after_failure else in_words(SLOW, self.magic))} {self.fresh_start}"
        return self.group.hang_report(
            still_running(waiting, self.nprocs, f"{why}."), stacks, self.names, raised=raised,
            hint=hint, cls=RankFailed if after_failure else LaunchTimeout,
            first=min(raised) if after_failure else None)

    def _moved(self, stacks: dict[int, str]) -> bool:
        """Whether these ranks still work: within MOVED_CHECK_S one of their Python stacks changes (read every
        MOVED_LOOK_S; a rank that ends the command counts), or they use at least MOVED_CPU_SHARE of a core. A loop
        that goes on, not a wait that never ends: a rank blocked in a collective, or asleep, uses next to none."""
        before = self._cpu_seconds(stacks)
        started = ends = time.monotonic()
        ends += MOVED_CHECK_S
        while time.monotonic() < ends:
            time.sleep(MOVED_LOOK_S)
            again = self.group.stacks(list(stacks))
            if any(again.get(rank) != stack for rank, stack in stacks.items()):
                return True
        return self._cpu_seconds(stacks) - before >= MOVED_CPU_SHARE * (time.monotonic() - started)

    def _cpu_seconds(self, ranks) -> float:
        """The CPU time these ranks' processes have used (0 for one that has ended)."""
        total = 0.0
        for process in self.group.processes:
            if process.rank in ranks:
                try:
                    times = psutil.Process(process.pid).cpu_times()
                    total += times.user + times.system
                except psutil.Error:
                    pass
        return total

    def _left_out(self, stacks: dict[int, str], timeout: float | None, left_out: list[int]) -> LaunchError:
        """One line for an `only` cell stuck in a collective that the ranks it left out never joined.

        `.failures` keeps each stuck rank's stack.
        """
        self._shut_down()
        calls = sorted({blocked_in(stack) or "a collective" for stack in stacks.values()})
        return self.group.hang_report(
            f"rank(s) {listed(stacks)} of {self.nprocs} waited {timeout:g}s in {', '.join(calls)}, which rank(s) "
            f"{listed(left_out)} did not join: the cell ran on rank(s) {listed(self.running)} only (--only / only=), "
            "and a collective on the default group needs every rank. Drop --only to run the cell on every rank. "
            f"{self.fresh_start}", stacks, self.names, hint="", headline_only=True)

    def _still_running_after_interrupt(self, stacks: dict[int, str], seconds: float) -> LaunchError:
        """Ranks that did not stop after an interrupt (their `stacks`): one line, and the cluster shut down."""
        calls: dict[str, list[int]] = {}   # collective -> the ranks that wait in it
        for rank, stack in sorted(stacks.items()):
            if blocked_in(stack):
                calls.setdefault(blocked_in(stack), []).append(rank)
            elif in_backward(stack):
                calls.setdefault("backward (a DDP model's gradient all-reduce)", []).append(rank)
        places = sorted({place for stack in stacks.values() if (place := _innermost_cell_frame(stack, self.names))})
        where = (" and ".join(f"in {call} (rank(s) {listed(ranks)})" for call, ranks in sorted(calls.items()))
                 + ": they called different collectives, and each waits for the others to call the same one"
                 if len(calls) > 1
                 else f"in {next(iter(calls))}, waiting for ranks that were interrupted before they joined it" if calls
                 else f"in the cell's code ({'; '.join(places)}): it caught the KeyboardInterrupt and went on (an "
                      "`except KeyboardInterrupt:` or a bare `except:`), or a call into C++ code there has not "
                      "returned" if places
                 else "in C++ code, where Python cannot interrupt it")
        self._shut_down()
        headline = still_running(stacks, self.nprocs,
                                 f"{seconds:.1f}s after the interrupt, {where}. {self.fresh_start}")
        # a rank that had raised before the stop button was pressed: its error is the news, stacks and all
        raised = {r: self._failure(r, reply) for r, reply in self.replies.items()
                  if not reply["ok"] and reply.get("type") != "KeyboardInterrupt"}
        if raised:
            return self.group.hang_report(f"rank(s) {listed(raised)} failed before the interrupt, and {headline}",
                                          stacks, self.names, raised=raised, hint="", cls=RankFailed,
                                          first=min(raised))
        return self.group.hang_report(headline, stacks, self.names, hint="", headline_only=True)


# The outermost frames a rank's stack shows (rank_loop.py's own are hidden) while it sends a command's value back:
# pickling it (payload.dumps, after the command's code ended), then writing the bytes (channel.send_message)
_SENDING_FRAME = re.compile(r'ddp_lab/launcher/(payload\.py", line \d+ in dumps|channel\.py", line \d+ in '
                            r'send_message)$')


def sending_its_value(stack: str) -> bool:
    """Whether a rank's Python stack (a stacks.read_stacks dump, each thread's innermost frame first) shows it
    sending a command's value back: the command has ended, and SIGINT no longer reaches its code."""
    blocks = stack.split("\n\n")   # the signal handler runs in the main thread: faulthandler's "Current thread"
    main = next((block for block in blocks if block.startswith("Current thread")), blocks[0])
    frames = [line.strip() for line in main.splitlines() if line.lstrip().startswith("File ")]
    return bool(frames) and bool(_SENDING_FRAME.search(frames[-1]))


RANK_LOOP_FILE = str(Path(__file__).with_name("rank_loop.py"))
RANK_FIGURES_FILE = str(Path(__file__).with_name("rank_figures.py"))   # the ranks' drawing of a command's figures  # the ranks' command loop: its frames are hidden
_FRAME = re.compile(r'^\s*(?:File "(?P<file>[^"]+)"|(?P<cell>Cell In\[\d+\])), (?P<rest>line \d+.*)$')


def _innermost_cell_frame(stack: str, names: dict[str, str]) -> str | None:
    """'Cell In[5], line 3 in <module>': the innermost frame of the cell's own code in a rank's Python stack (a
    fault-handler dump, most recent call first), or None."""
    for line in rename_cells(stack, names).splitlines():
        match = _FRAME.match(line)
        where = match and (match["file"] or match["cell"])
        if where and where.startswith(("Cell In[", "<ddp cell")):
            return f"{where}, {match['rest']}"
    return None


def _interrupted_where(reply: dict, names: dict[str, str], kind: str) -> str:
    """A rank's note after an interrupt: 'interrupted at Cell In[5], line 3, in <module>', or how it ended
    ('had finished the cell': `kind`, the command's kind, names what it finished).

    The place is the innermost frame of the cell's own code (a notebook cell, `<ddp cell N>`),
    else the innermost frame outside ddp_lab's command loop (the signal handler's frame).
    """
    if reply["ok"] or "unpicklable" in reply:   # it ended the command (with a value that cannot travel back)
        return f"had finished {FINISHED.get(kind, 'the command')}"
    if reply["type"] != "KeyboardInterrupt":
        return f"raised {reply['type']}: {(reply['text'].splitlines() or [''])[0]}"
    frames = [(match["file"] or match["cell"], match["rest"]) for line in
              rename_cells(reply["traceback"], names).splitlines() if (match := _FRAME.match(line))]
    frames = [(where, rest) for where, rest in frames if where != RANK_LOOP_FILE]
    in_cells = [(where, rest) for where, rest in frames if where.startswith(("Cell In[", "<ddp cell"))]
    if any(where == RANK_FIGURES_FILE for where, _ in frames):   # its code had ended; its figures were being drawn
        at = f" (at {in_cells[-1][0]}, {in_cells[-1][1]})" if in_cells else ""
        return f"interrupted while drawing its figures{at}: {FINISHED.get(kind, 'the command')}'s code had ended, " \
               "and its figures were dropped"
    shown = (in_cells or frames)[-1:]
    return f"interrupted at {shown[0][0]}, {shown[0][1]}" if shown else "interrupted"

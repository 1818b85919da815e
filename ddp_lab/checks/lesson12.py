"""Checks for the exercise of notebooks/12-debugging-and-fault-tolerance.ipynb.

    ddp_lab.checks.lesson12.check_restartable(train)

`train(rank, directory, total_steps, step_fn)` must be restartable: killed at any step, run
again with the same `directory`, it must go on from where it stopped and end exactly where a
run that never stopped ends. The check supplies `step_fn`, which does one data-parallel
training step and records what the step started from (parameters, momentum, RNG state, the
batch); it runs `train` three times on 2 gloo ranks: with rank 1 killed (SIGKILL) at the
start of step CRASH_AT, once more in the same folder, as torchrun would restart it, and once
uninterrupted. In the killed run rank 0's first torch.save into a file after step CRASH_AT - 1
waits up to SLOW_SAVE seconds, a slow disk: where rank 1 meanwhile starts step CRASH_AT (no barrier after
the save, or one before it) and is killed, rank 0 dies before that write, as torchrun stopping
every rank would stop it mid-save, and the answer is told to wait for every rank's save. The wait ends
early where rank 1 has stayed STILL_WAITING seconds in a collective that only rank 0's next call can complete (its
n-th call of torch.distributed's collectives, on the default group and not async, while rank 0, saving on its only
thread, has made fewer than n: its barrier after the save, say), since rank 1 cannot then start step CRASH_AT
before the save is done; both ranks are taken to make the same calls in the same order. The restarted run is
stopped a second time, on both ranks at the start of step RESTART_AT (an exception out of step_fn, so nothing after
the step's start runs), and its train called
again in the same folder: a resume at a step number written in the code (`step = 11`)
resumes right once only. The first record of the resumed run that differs from
the uninterrupted run's names the piece of state the checkpoint lost; ranks that resume at
different steps (one from a checkpoint, another from none) are told so at the restart's first
step, before their all-reduces pair different steps.

The files train writes, renames, reads and resolves are watched (torch.save, open(),
os.replace, os.rename, os.readlink, os.path.realpath, shutil copies; low-level os.open/os.write
writes are not). A file read through a symlink counts as the file the link resolves to at the
read. A file the restart reads before its first step that was written directly (torch.save to
the name, or into a file opened on it, a shutil copy onto it, open(name, 'wb')), not produced by
renaming a complete file onto its name, is judged by how the restart chose it. Chosen through an
atomically published name (a pointer file or a symlink, itself produced by a rename and never
written directly, that the restart read or resolved before the load and that names the file:
its name; or, as a token, its stem, a directory on its path below the folder, or the number
that tells it from the other files of its series, the step, not the rank every file of a rank
shares), a write to it is refused where, when the write started, a reference the same rank had
renamed into place named it: the checkpoint it held is torn, or, where it held none yet, the
pointer was published before the file it names was complete. Not chosen so, it is refused
where its name was written more than once (a torn write destroys the checkpoint the name held
before), and also where it was written once (the restart found it by listing the folder, say).
A file written once under a new name and published after the write, or slots written in turn
while the pointer names another, are safe. The kills here never land mid-write, a real one may.
The crash comes after 11 checkpoints, so that a restart that takes the last file name in sorted
order ('step-9' after 'step-11') resumes too early, and is told why; so is one that resumes
from an older file when a newer one of the same name but its number exists. An answer that
divides the step by a number written in its code (`divmod(step, 3)`, or `per_epoch = 3` and
then `step // per_epoch`), or computed from constants alone (`len(X) // (BATCH * 2)`), is refused
before any rank starts: 3 batches an epoch holds for 2 ranks only, and every run here has 2.

Introduced in notebooks/12-debugging-and-fault-tolerance.ipynb.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import io
import os
import re
import signal
import sys
import tempfile
import threading
import time
import weakref
from collections import Counter

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (call_case, ensure_written, failure_message, path_of, refuse_written_divisor,
                                   run_on_ranks, source_tree, whole_dataset_divisor)
from ddp_lab.launcher.errors import LaunchError, LaunchTimeout, RankCrashed
from ddp_lab.launcher.launch import launch

WORLD_SIZE = 2
TOTAL_STEPS = 15      # the resumed run crosses an epoch's end and trains all of epoch 4 (steps 12-14)
CRASH_AT = 11         # epoch 3, third batch: mid-epoch, not the first epoch, and past 10 checkpoints, so that
                      # step numbers written in names no longer sort as text sorts them ('10' < '9')
RESTART_AT = 13       # the restarted run's second stop: epoch 4, second batch, after the resumed run began epoch 4
STEPS_PER_EPOCH = 3   # the exercise's data: 24 samples, 2 ranks, batches of 4
SLOW_SAVE = 1.0       # seconds: how long rank 0's first torch.save after step CRASH_AT - 1 waits in the killed run
# The collectives counted for the killed run's slow disk (`_train_runner`), where torch has them: those every rank
# of the group must enter, in the same order, for any to return. Point-to-point sends and receives are not counted.
COLLECTIVES = ("barrier", "monitored_barrier", "all_reduce", "broadcast", "reduce", "all_gather",
               "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "gather", "scatter", "all_to_all",
               "all_to_all_single", "all_gather_object", "broadcast_object_list", "gather_object",
               "scatter_object_list")
_CONTENT = 4096       # the bytes kept of a file the restart reads: a pointer's content, a checkpoint's start


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().flatten() for t in tensors])


def _momentum(model, optimizer) -> torch.Tensor | None:
    buffers = [optimizer.state.get(p, {}).get("momentum_buffer") for p in model.parameters()]
    return None if any(b is None for b in buffers) else _flat(buffers)


class _Stopped(BaseException):
    """Raised by step_fn on every rank at the start of RESTART_AT in the restarted run: train stops there as if
    killed, and is called again. A BaseException, so that an answer's `except Exception` lets it through."""


class _Apart(BaseException):
    """Raised by step_fn on every rank at the restart's first step where the ranks start it at different steps (one
    resumed from a checkpoint, another from none): their all-reduces would pair different steps. `starts`: each
    rank's first step."""

    def __init__(self, starts: list[int]):
        super().__init__(starts)
        self.starts = starts


KILLED, STOPPED_SAVING = "rank-1-killed", "rank-0-stopped-saving"   # the killed run's marks (`_train_runner`)
WAITS = "rank-1-waits-in-collective-"   # + n: rank 1 entered its n-th counted collective after step CRASH_AT - 1
LEFT = "rank-1-left-collective-"        # + n: that call returned or raised
WENT_ON = "rank-0-saved-while-rank-1-waited"   # rank 0's slow save went on early, holding rank 1's call's number
STILL_WAITING = 0.1   # seconds rank 1 must stay in such a call before rank 0's slow save goes on


def _rank_1_waits_beyond(marks: str, entered: int) -> int | None:
    """The number of the collective rank 1 is in (a WAITS mark without its LEFT mark) where it is past the `entered`
    calls rank 0 has made, one that rank 0 has not entered yet; else None."""
    names = set(os.listdir(marks))
    waiting = [int(name[len(WAITS):]) for name in names
               if name.startswith(WAITS) and LEFT + name[len(WAITS):] not in names]
    return max((n for n in waiting if n > entered), default=None)


def _counting(original, collectives: dict, on_entry, on_exit):
    """torch.distributed's collective `original`, numbering its calls in `collectives` ("entered", under "lock";
    "other group" set where a call names a group other than the default one): on_entry(n, async_op) before the n-th
    call runs, on_exit(n) once it returned or raised. The object collectives' inner collectives are torch's own
    module-level functions, not these attributes: each call of all_gather_object is one call here."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def call_it(*args, **kwargs):
        try:
            arguments = signature.bind(*args, **kwargs).arguments
        except TypeError:
            return original(*args, **kwargs)   # torch says what was wrong
        with collectives["lock"]:
            if arguments.get("group") not in (None, dist.group.WORLD):
                collectives["other group"] = True
            collectives["entered"] += 1
            number = collectives["entered"]
        on_entry(number, bool(arguments.get("async_op")))
        try:
            return original(*args, **kwargs)
        finally:
            on_exit(number)
    return call_it


def _mark(folder: str, name: str, text: str = "") -> None:
    """Leave the file `name`, holding `text`, in `folder`, through os.open and os.write, which the check does not
    watch."""
    descriptor = os.open(os.path.join(folder, name), os.O_CREAT | os.O_WRONLY)
    try:
        os.write(descriptor, text.encode())
    finally:
        os.close(descriptor)


def _copying() -> str | None:
    """The shutil function the learner called (shutil.copyfile, copy, copy2, move) when the open() being watched is
    one of its, else None."""
    frame, called = sys._getframe(2), None
    while frame is not None and frame.f_globals.get("__name__") == "shutil":
        called, frame = frame.f_code.co_name, frame.f_back
    return called


def _train_runner(rank: int, train, directory: str, total_steps: int, crash_at: int | None,
                  restart_at: int | None, marks: str | None = None) -> dict:
    """On every rank: run the learner's train with a recording step_fn; rank 1 dies at `crash_at`; every rank stops
    train at `restart_at` and calls it again. {"records": one per step, "events": the files train wrote, renamed, read
    and resolved (os.readlink, os.path.realpath), in order, "stopped": whether the stop came}. Each record and event
    holds `call` (0; 1 after the stop at `restart_at`), each event `done` (the steps its call had done). A read before
    the first step of a call holds `content`, the file's first _CONTENT bytes; a resolve holds `target`, the name the
    link points to (its last part); a torch.save into a file object that a watched open() opened holds `opened`.
    Where the ranks start the restart at different steps, it stops there and holds `starts`, each rank's first step.
    In the killed run (`marks`: a folder of the check's own, outside `directory`) rank 0's disk is slow once: its
    first torch.save into a file after step crash_at - 1 waits up to SLOW_SAVE s, and where rank 1 meanwhile reached
    step crash_at and was killed (it leaves the file KILLED in `marks`), rank 0 dies before the write, as torchrun,
    stopping every rank, would stop it mid-save (it leaves STOPPED_SAVING first, holding the file's name). The wait
    ends, and the save goes on (leaving WENT_ON), where rank 1 has stayed STILL_WAITING s in a collective it entered
    from its main thread after step crash_at - 1 (WAITS + its number, and no LEFT + that number) past rank 0's count
    of calls (`_counting`), on the default group, not async. Rank 0 saves on its main thread, its only thread, so
    every call it made returned before the save: that one waits for rank 0's next call, and rank 1 cannot start step
    crash_at before the save is done. This holds where both ranks make the same calls in the same order (collectives
    called through other names are not counted). Where either rank named another group, or rank 0 saves on another
    thread or beside one, the wait is not cut short."""
    records: list[dict] = []
    events: list[dict] = []
    call = {"call": 0, "before": 0}   # which call of train, and the records before it
    opened = weakref.WeakSet()        # the file objects open() opened for writing

    slow_write = {"due": marks is not None and rank == 0}
    collectives = {"entered": 0, "lock": threading.Lock(), "other group": False, "marked": set()}

    def waits(number: int, async_op: bool) -> None:
        """On rank 1 of the killed run, after step crash_at - 1, in its main thread: leave WAITS + the call's number
        in `marks`."""
        if marks is not None and rank == 1 and len(records) == crash_at and not async_op \
                and not collectives["other group"] and threading.current_thread() is threading.main_thread():
            collectives["marked"].add(number)
            _mark(marks, f"{WAITS}{number}")

    def leaves(number: int) -> None:
        """Rank 1's marked call `number` returned or raised: leave LEFT + its number."""
        if number in collectives["marked"]:
            _mark(marks, f"{LEFT}{number}")

    def step_fn(step, model, optimizer, x, y):
        if crash_at is not None and rank == 1 and step == crash_at:
            _mark(marks, KILLED)   # the killed run is the one run with a crash_at, and it has `marks`
            os.kill(os.getpid(), signal.SIGKILL)  # like the out-of-memory killer: no exception, no cleanup
        if restart_at is not None and call["call"] == 0 and not records:   # the restart's first step, on every rank
            starts = torch.zeros(dist.get_world_size(), dtype=torch.int64)
            starts[rank] = int(step)
            dist.all_reduce(starts)
            if len(set(starts.tolist())) > 1:
                raise _Apart(starts.tolist())
        if restart_at is not None and call["call"] == 0 and step == restart_at:
            raise _Stopped
        record = {"step": int(step), "call": call["call"], "x": x.detach().clone(), "params": _flat(model.parameters()),
                  "momentum": _momentum(model, optimizer), "rng": torch.get_rng_state()}
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        for p in model.parameters():  # what DDP does: average the gradients over the ranks
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        optimizer.step()
        record["after"] = _flat(model.parameters())
        records.append(record)

    def note(kind: str, f, **details) -> None:
        path = path_of(f)
        if path is not None:
            events.append({"kind": kind, "path": path, "call": call["call"], "done": len(records) - call["before"],
                           **details})

    save, replace, rename, opening = torch.save, os.replace, os.rename, builtins.open
    readlink, realpath = os.readlink, os.path.realpath

    def slow_disk(f) -> None:
        """Rank 0's first torch.save into a file (a path, or a file a watched open() opened for writing; not the
        in-memory pickling of all_gather_object) after step crash_at - 1 of the killed run: wait for rank 1's kill,
        or SLOW_SAVE s. Where the kill comes first, leave the file's name in STOPPED_SAVING and die."""
        if not slow_write["due"] or len(records) != crash_at or not (isinstance(f, (str, os.PathLike))
                                                                     or f in opened):
            return
        slow_write["due"] = False
        deadline = time.monotonic() + SLOW_SAVE
        seen = None   # (the number of the call rank 1 waits in, since when)
        while time.monotonic() < deadline:
            if os.path.exists(os.path.join(marks, KILLED)):
                _mark(marks, STOPPED_SAVING, os.path.basename(path_of(f) or "?"))
                os.kill(os.getpid(), signal.SIGKILL)
            alone = threading.current_thread() is threading.main_thread() and threading.active_count() == 1
            waiting = _rank_1_waits_beyond(marks, collectives["entered"]) \
                if alone and not collectives["other group"] else None
            if waiting is None:
                seen = None
            elif seen is None or seen[0] != waiting:
                seen = (waiting, time.monotonic())
            elif time.monotonic() - seen[1] >= STILL_WAITING:
                _mark(marks, WENT_ON, str(waiting))
                return
            time.sleep(0.005)

    def recording_save(obj, f, *args, **kwargs):
        slow_disk(f)
        if isinstance(f, (str, os.PathLike)):
            note("write", f, how="torch.save")
        else:
            note("write", f, how="torch.save into", opened=f in opened)
        return save(obj, f, *args, **kwargs)

    def renaming(original):
        def call_it(src, dst, *args, **kwargs):
            result = original(src, dst, *args, **kwargs)
            published, held = path_of(dst), {}
            if published and os.path.islink(published):
                held = {"target": os.path.basename(readlink(published))}
            elif published and os.path.isfile(published):
                with opening(published, "rb") as again:
                    held = {"content": again.read(_CONTENT)}
            note("rename", src, to=published, **held)
            return result
        return call_it

    def through_link(file) -> str | None:
        """The file that the path `file` names resolves to, where its last part is a symlink, else None."""
        path = path_of(file)
        if path is None:
            return None
        parent = realpath(os.path.dirname(path))
        real = realpath(path)
        return None if real == os.path.join(parent, os.path.basename(path)) else os.path.join(
            os.path.dirname(path), os.path.relpath(real, parent))

    def resolving(original):
        def call_it(path, *args, **kwargs):
            result = original(path, *args, **kwargs)
            if isinstance(result, str) and path_of(path) not in (None, os.path.abspath(result)):
                note("resolve", path, target=os.path.basename(result))
            return result
        return call_it

    def watching_open(file, *args, **kwargs):
        handle = opening(file, *args, **kwargs)
        mode = str(args[0] if args else kwargs.get("mode", "r"))
        if set(mode) & set("wax+"):
            copy = _copying()
            opened.add(handle)
            note("write", file, how="shutil" if copy else "open", mode=mode, copy=copy)
            return handle
        real = through_link(file)
        if real is not None:   # a read through a symlink: the link resolved, then the file it names read
            note("resolve", file, target=os.path.basename(real))
            file = real
        if len(records) == call["before"] and os.path.isfile(path_of(file) or ""):   # before the call's first step
            try:
                with opening(path_of(file), "rb") as again:
                    content = again.read(_CONTENT)
            except OSError:
                content = b""
            note("read", file, content=content)
        else:
            note("read", file)
        return handle

    originals = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}
    for name, original in originals.items():
        setattr(dist, name, _counting(original, collectives, waits, leaves))
    torch.save, os.replace, os.rename = recording_save, renaming(replace), renaming(rename)
    os.readlink, os.path.realpath = resolving(readlink), resolving(realpath)
    builtins.open = io.open = watching_open
    case = f"train(rank={rank}, directory, total_steps={total_steps}, step_fn) on rank {rank}"
    try:
        try:
            call_case(train, case, rank, directory, total_steps, step_fn)
        except _Stopped:
            call.update(call=1, before=len(records))
            call_case(train, f"{case}, called again after its stop at step {restart_at}", rank, directory,
                      total_steps, step_fn)
        except _Apart as apart:
            return {"records": records, "events": events, "stopped": False, "starts": apart.starts}
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)
        torch.save, os.replace, os.rename = save, replace, rename
        os.readlink, os.path.realpath = readlink, realpath
        builtins.open = io.open = opening
    return {"records": records, "events": events, "stopped": call["call"] == 1}


def _killed_run(train, directory: str, marks: str, timeout: float, name: str) -> None:
    """The run in which rank 1 is killed at CRASH_AT: it must end with exactly that crash, and rank 0 must not have
    been stopped mid-save (`_train_runner`'s slow disk: rank 1 went on before every rank's checkpoint was complete)."""

    try:
        launch(_train_runner, args=(train, directory, TOTAL_STEPS, CRASH_AT, None, marks), nprocs=WORLD_SIZE,
               backend="gloo", timeout=timeout)
    except RankCrashed as error:
        stopped = os.path.join(marks, STOPPED_SAVING)
        if os.path.exists(stopped):
            with open(stopped) as mark:
                saving = mark.read()
            raise CheckFailed(
                f"rank 1 was killed at the start of step {CRASH_AT} while rank 0 was still saving {saving!r} after "
                f"step {CRASH_AT - 1} (the check made that torch.save wait up to {SLOW_SAVE:g} s, as a slow disk "
                f"would): rank 1 had started step {CRASH_AT} without waiting for rank 0's checkpoint. torchrun stops "
                "every rank when one dies, so rank 0 died mid-save: the restart would find an older checkpoint on rank "
                "0 than on rank 1 (ranks resuming at different steps), or lose the step.\nHint: after the save, "
                "dist.barrier() on every rank, so that no rank starts the next step before every rank's "
                "checkpoint is complete.") from None
        if error.first_rank == 1:
            return
        raise CheckFailed(failure_message(error, name)) from None
    except LaunchTimeout as error:
        raise CheckFailed(f"{name} did not finish within {timeout:g} s on its run with rank 1 killed at step "
                          f"{CRASH_AT}.\n{error}") from None
    except LaunchError as error:
        raise CheckFailed(failure_message(error, name)) from None
    raise CheckFailed(f"{name} finished although rank 1 was to be killed at step {CRASH_AT}: step_fn was never "
                      f"called with step={CRASH_AT} on rank 1. Call step_fn(step, model, optimizer, x, y) once "
                      f"for every step 0 .. total_steps - 1.")


def _check_same_start(restarted: list[dict], saved: list[str], directory: str) -> None:
    """Every rank of the restarted run must start at the same step (`_Apart`): say where each started, and which
    files it read before that step."""
    starts = restarted[0].get("starts")
    if not starts:
        return
    loaded = _loaded(_events(restarted, directory))
    said = "; ".join(f"rank {rank} at step {step}, " + (f"having read {sorted(loaded[rank])}" if loaded[rank] else
                                                       "having read no file") for rank, step in enumerate(starts))
    hint = ("every rank must load a checkpoint at the start and resume from the step it records: each rank its own "
            "file, or every rank the file rank 0 wrote" if not all(loaded[rank] for rank in range(len(starts))) else
            "every rank read a checkpoint, but they record different steps: the kill came after one rank's save and "
            "before another's. Save at the same steps on every rank and let no rank go on until every save is done "
            "(dist.barrier() after saving), or have every rank load the one file rank 0 wrote")
    raise CheckFailed(f"after the crash the ranks resumed at different steps: {said} (the killed run left {saved} in "
                      f"`directory`): their all-reduces would pair different steps.\nHint: {hint}.")


def _check_inside_directory(saved: list[str], runs: list[list[dict]], name: str) -> None:
    """The killed run left nothing in its directory, yet a later run did not start at step 0: a checkpoint outside."""
    starts = [records[0]["step"] if records else None for records in runs]
    if not saved and any(start != 0 for start in starts):
        raise CheckFailed(f"the killed run left nothing in its `directory`, yet a later run of {name} started at step "
                          f"{next(start for start in starts if start != 0)} (None: ran no step at all): it found a "
                          "checkpoint somewhere else, left there by an earlier run.\nHint: save and load the "
                          "checkpoint inside the directory train is given (os.path.join(directory, ...)), not in "
                          "the working folder.")


def _events(runs: list[dict], directory: str) -> list[list[dict]]:
    """Each rank's file events, the paths named as the messages name them: relative to `directory` when inside it."""
    def named(path: str | None) -> str | None:
        relative = os.path.relpath(path, directory) if path else None
        return path if relative is None or relative.startswith(os.pardir) else relative
    return [[{**event, "path": named(event["path"]), "to": named(event.get("to"))} for event in run["events"]]
            for run in runs]


def _loaded(events: list[list[dict]]) -> list[set[str]]:
    """Each rank's files the restarted run read before the first step of a call of train: its checkpoint."""
    return [{e["path"] for e in rank if e["kind"] == "read" and e["done"] == 0} for rank in events]


_WRITERS = ("torch.save", "torch.save into", "shutil", "open")   # how a file was written, the most telling first


def _productions(run: list[list[dict]]) -> Counter:
    """How many times one run (all its ranks) produced each name: wrote it directly (a torch.save into a file that a
    watched open() opened counts with that open) or renamed a file onto it."""
    count = Counter()
    for e in (e for events in run for e in events):
        if e["kind"] == "rename":
            count[e["to"]] += 1
        elif e["kind"] == "write" and not e.get("opened"):
            count[e["path"]] += 1
    return count


def _family(name: str, found: re.Match, names) -> dict[str, int]:
    """{each of `names` that is `name` with the number `found` (a match of r'\\d+' in it) free: that number}."""
    pattern = re.escape(name[:found.start()]) + r"(\d+)" + re.escape(name[found.end():])
    return {other: int(match.group(1)) for other in names if (match := re.fullmatch(pattern, other))}


def _telling_numbers(file: str, series: set[str]) -> set[int]:
    """The numbers in `file`'s name that tell it apart from the others of its series: those that differ between the
    names in `series` that match `file` with that number free and the others as they are (the step in
    'ckpt-r0-11.pt', not the rank, which every file of rank 0 shares)."""
    return {int(found.group()) for found in re.finditer(r"\d+", file)
            if len(set(_family(file, found, series).values())) > 1}


def _names(reference: dict, file: str, series: set[str]) -> bool:
    """Whether a read or resolved file (or what a rename put in place: its `content`, or a symlink's `target`) names
    `file`: a symlink's target, or a content that holds its name, or holds as a token its stem ('ckpt-r0-11'), the
    name of a directory on its path below the checkpoint folder ('global_step11'), or one of its telling numbers
    (`_telling_numbers` among `series`, the names the same rank produced: '11' or {"step": 11} for 'ckpt-r0-11.pt')."""
    base = os.path.basename(file)
    stem = os.path.splitext(base)[0]
    folders = [] if os.path.isabs(file) else os.path.normpath(file).split(os.sep)[:-1]
    if "target" in reference:
        return reference["target"] in (base, stem, *folders)
    content = (reference.get("content") or b"").strip()
    if base.encode() in content:
        return True
    tokens = set(re.split(rb"[\s\"'{}\[\](),:;=/\\]+", content)) - {b""}
    if {stem.encode(), *(folder.encode() for folder in folders)} & tokens:
        return True
    numbers = {int(token) for token in tokens if token.isdigit()}
    return bool(numbers & _telling_numbers(file, series))


def _references(resumed: list[list[dict]], file: str, published: set[str], series: list[set[str]]) -> set[str]:
    """The atomically published names through which the restart chose `file` (empty: not chosen so): every read of
    it before the first step of a call of train comes after a read or resolve, by the same rank in the same call, of
    a published name (produced by a rename, never written directly: a pointer file, a symlink) that names it; those
    names. Where the restart never read `file`, the published names it read or resolved before its first step that
    name it. `series`: each rank's produced names (`_names`)."""
    def references(rank: int, before: int, call: int | None) -> set[str]:
        return {r["path"] for r in resumed[rank][:before] if r["kind"] in ("read", "resolve") and r["done"] == 0
                and call in (None, r["call"]) and r["path"] in published and _names(r, file, series[rank])}
    loads = [(rank, index, e["call"]) for rank, events in enumerate(resumed) for index, e in enumerate(events)
             if e["kind"] == "read" and e["done"] == 0 and e["path"] == file]
    if not loads:
        return set().union(*(references(rank, len(events), None) for rank, events in enumerate(resumed)))
    found = [references(rank, index, call) for rank, index, call in loads]
    return set().union(*found) if all(found) else set()


def _live_writes(run: list[list[dict]], file: str, references: set[str], series: list[set[str]]) -> list[tuple]:
    """The direct writes to `file`, chosen through `references`, that started while a reference the same rank had
    renamed into place named it: (rank, the write, whether `file` held a checkpoint then, the reference). A write
    before any reference was published is safe (a restart then finds none); a rank that never renames a reference
    is judged by how many times the run produced `file` (more than once: its writes after the first)."""
    live, produced = [], _productions(run)[file]
    for rank, events in enumerate(run):
        if not any(e["kind"] == "rename" and e["to"] in references for e in events):
            live += [(rank, e, True, None) for e in events if produced > 1 and e["kind"] == "write"
                     and e["path"] == file]
            continue
        naming, held = {}, False   # the reference names that name `file` now; whether `file` holds a checkpoint
        for e in events:
            if e["kind"] == "rename" and e["to"] in references:
                naming[e["to"]] = _names(e, file, series[rank])
            if e["kind"] == "rename" and e["path"] in references:
                naming.pop(e["path"], None)
            if e["kind"] == "write" and not e.get("opened") and e["path"] == file and (
                    now := [p for p, named in naming.items() if named]):
                live.append((rank, e, held, now[0]))
            if e["kind"] == "rename" and e["to"] == file or e["kind"] == "write" and e["path"] == file:
                held = True
    return live


def _check_atomic(resumed: list[list[dict]], reference: list[list[dict]], runs: list[list[dict]], name: str) -> None:
    """A file the restart reads before its first step and that was written directly (not produced by a rename) is
    unsafe, where the restart chose it through atomically published names (`_references`), if a direct write to it
    started while one of them, renamed into place by the same rank, named it (`_live_writes`): the checkpoint that
    name held is torn, or, where it held none yet, the pointer was published before the file was complete. Where the
    restart did not choose it so, it is unsafe (a) where its name was written more than once in a run: a kill during
    a write tears the checkpoint and the one before it; (b) where it was written once: a torn newest file for the
    restart to pick. `resumed`, `reference`: each rank's file events of the restarted and the uninterrupted run;
    `runs`: their records. Where the restart read nothing, the names written with torch.save and never renamed away
    stand for it (those a published name it read names, where there are any); where it also started at step 0, its
    resume is judged first."""
    loaded = set().union(*_loaded(resumed))
    series = [{e["to"] if e["kind"] == "rename" else e["path"] for run in (reference, resumed) if rank < len(run)
               for e in run[rank] if e["kind"] in ("write", "rename")} for rank in range(len(resumed))]
    writes = [(rank, e) for events in (reference, resumed) for rank, run in enumerate(events) for e in run]
    away = {e["path"]: e["to"] for _, e in writes if e["kind"] == "rename"}
    published = {e["to"] for _, e in writes if e["kind"] == "rename"} - {e["path"] for _, e in writes
                                                                         if e["kind"] == "write"}
    if not loaded:
        if any(not records or records[0]["step"] == 0 for records in runs):
            return
        loaded = {e["path"] for _, e in writes if e["kind"] == "write" and e["how"].startswith("torch.save")}
        loaded -= set(away)
        loaded = {file for file in loaded if _references(resumed, file, published, series)} or loaded
    written = loaded & {e["path"] for _, e in writes if e["kind"] == "write"}
    counts = [_productions(reference), _productions(resumed)]
    unsafe = {}   # file: (0 written over while the restart would load it, 1 published before complete, 2 once)
    for file in written:
        chosen = _references(resumed, file, published, series)
        if not chosen:
            unsafe[file] = (0 if any(count[file] > 1 for count in counts) else 2, None)
            continue
        live = [found for run in (reference, resumed) for found in _live_writes(run, file, chosen, series)]
        if live:
            _, _, held, pointer = min(live, key=lambda found: not found[2])
            unsafe[file] = (0, None) if held else (1, pointer)
    direct = [(unsafe[file][0], _WRITERS.index(e["how"]), rank, e) for rank, e in writes
              if e["kind"] == "write" and (file := e["path"]) in unsafe]
    if not direct:
        return
    kind, _, rank, event = min(direct, key=lambda found: found[:2])
    once = kind == 2
    file, how, mode = event["path"], event["how"], event.get("mode", "wb")
    if how == "torch.save":
        wrote = f"wrote {file!r} with torch.save straight to the name it is loaded from"
    elif how == "torch.save into":
        wrote = f"wrote {file!r} with torch.save into a file opened on the name it is loaded from"
    elif how == "shutil":
        wrote = f"copied a file onto {file!r}, the name it is loaded from, with shutil.{event['copy']}"
    else:
        wrote = f"wrote {file!r} through open(..., {mode!r}) straight to the name it is loaded from"
    if kind == 1:
        pointer = unsafe[file][1]
        link = any(e["kind"] == "rename" and e["to"] == pointer and "target" in e for _, e in writes)
        said = f"the symlink {pointer!r}" if link else f"the pointer file {pointer!r}"
        raise CheckFailed(f"rank {rank}: {name} {wrote} after it renamed {said} into place naming it: the pointer was "
                          "published before the file it names was complete. A kill during the write leaves the "
                          "pointer naming a torn file, and the restart loads it.\nHint: write the checkpoint "
                          "completely first, then publish its name: make the pointer under a temporary name and "
                          "os.replace it onto its own name after the write.")
    copied = ("a rename is atomic, a copy is not: write the temporary file completely, then os.replace(temporary, "
              "name) instead of copying it (atomic_save does both)")
    if once:
        torn = ("A copy writes it piece by piece: a kill during the copy leaves a torn file" if how == "shutil" else
                "A kill during that write leaves a torn file")
        hint = copied if how == "shutil" else (
            "write the checkpoint to a temporary name and os.replace it into place (atomic_save), or publish each "
            "new file's name atomically: a pointer file or a symlink, made under a temporary name and moved onto its "
            "own name with os.replace, that the restart reads to find the checkpoint")
        raise CheckFailed(f"rank {rank}: {name} {wrote}, a name it wrote once, but the restart chose that file with no "
                          "atomically published name for it: before loading it, it read no pointer file renamed into "
                          "place, nor resolved a symlink replaced onto its name, that names it: it found the file "
                          f"itself (by listing the folder, say). {torn}, the newest, for the restart to pick.\n"
                          f"Hint: {hint}.")
    torn = ("a copy writes it piece by piece, and a kill during the copy leaves a torn file" if how == "shutil" else
            "a kill during the write leaves a torn file")
    hint = copied if how == "shutil" else ("write the checkpoint atomically: atomic_save (a temporary file, flushed, "
                                           "then os.replace onto the name)")
    if file in away:
        before = f" (the checkpoint before it was renamed to {away[file]!r}" + (
            ")" if away[file] in loaded else ", which the restart does not read)")
    elif how == "open":
        before = "" if "a" in mode else f" (nor what the file held before, which opening it with {mode!r} erased)"
    else:
        before = " (nor the checkpoint before it, which that name held)"
    raise CheckFailed(f"rank {rank}: {name} {wrote}: {torn} there, and the restart cannot load it{before}.\n"
                      f"Hint: {hint}.")


def _save_points(reference: list[list[dict]], loaded: set[str]) -> list[int] | None:
    """The steps done at which the uninterrupted run produced (wrote, or renamed onto) a file named as one the restart
    loaded, its numbers aside ('rank-0.pt' stands for 'rank-1.pt'; 'step-9.pt' for 'step-10.pt'), or None (none)."""
    shapes = {re.sub(r"\d+", "#", file) for file in loaded}
    done = {e["done"] for run in reference for e in run if e["call"] == 0
            and e["kind"] in ("write", "rename") and re.sub(r"\d+", "#", e["to"] or e["path"]) in shapes}
    return sorted(done) or None


def _steps(first: int, last: int) -> str:
    """'step 10', 'steps 9 and 10', 'steps 8..10'."""
    if first == last:
        return f"step {first}"
    return f"steps {first} and {last}" if last == first + 1 else f"steps {first}..{last}"


def _listed(numbers: list[int]) -> str:
    return ", ".join(map(str, numbers[:-1])) + f" and {numbers[-1]}" if len(numbers) > 1 else str(numbers[0])


def _holds_number(fn, number: int) -> bool:
    """Whether fn's own source holds `number` written as an integer (False: no source to read)."""
    tree = source_tree(fn)
    return tree is not None and any(isinstance(node, ast.Constant) and type(node.value) is int and node.value == number
               for node in ast.walk(tree))


def _check_uninterrupted(runs: list[list[dict]]) -> None:
    for rank, records in enumerate(runs):
        steps = [r["step"] for r in records]
        if steps != list(range(TOTAL_STEPS)):
            raise CheckFailed(f"rank {rank}: the uninterrupted run called step_fn with steps {steps}; expected "
                              f"0, 1, ..., {TOTAL_STEPS - 1}, each once, in order.\nHint: count the steps over "
                              "all epochs (the global step) and stop at total_steps.")
    if len(runs) > 1 and runs[0] and runs[1] and torch.equal(runs[0][0]["rng"], runs[1][0]["rng"]):
        raise CheckFailed("ranks 0 and 1 entered step 0 of the uninterrupted run with the same random number "
                          "generator state, so every step gives them the same dropout masks, where train_plain's "
                          "ranks each draw their own.\nHint: seed each rank with torch.manual_seed(SEED + rank) before "
                          "the first step, as train_plain does, and on resume restore this rank's own RNG state.")
    for rank, records in enumerate(runs):   # a run that never reshuffles resumes "right", but is not train_plain's run
        batches = [r["x"] for r in records]
        if all(torch.equal(batches[step], batches[step % STEPS_PER_EPOCH]) for step in range(TOTAL_STEPS)):
            raise CheckFailed(f"rank {rank}: the uninterrupted run trained every epoch on epoch 0's batches, in the "
                              "same order: its sampler never learned the epoch.\nHint: call sampler.set_epoch(epoch) "
                              "before taking an epoch's batches, as train_plain does (DistributedSampler shuffles "
                              "with seed + epoch), and on resume set the epoch the checkpoint's step falls in.")


def _batch_hint(rank: int, step: int, got: torch.Tensor, reference: list[dict]) -> str:
    """Which batch a resumed step trained on, said by the uninterrupted run's steps. The resumed steps before `step`
    trained on the uninterrupted run's batches (this is the first that differs)."""
    same = [r["step"] for r in reference if torch.equal(r["x"], got)]
    epoch, position = divmod(step, STEPS_PER_EPOCH)
    skipped = CRASH_AT % STEPS_PER_EPOCH   # the batches of its epoch a resume at CRASH_AT skips
    if step > CRASH_AT and position == 0 and same == [step + skipped]:
        right = f"step {CRASH_AT}" if step - 1 == CRASH_AT else f"steps {CRASH_AT}..{step - 1}"
        return (f"rank {rank} trained the resumed {right} on the uninterrupted run's batches, but step {step}, the "
                f"first of epoch {epoch}, on the batch the uninterrupted run used at step {step + skipped}, "
                f"{skipped} batches later in that epoch.\nHint: skipping the batches already done "
                f"({CRASH_AT % STEPS_PER_EPOCH} on this resume) applies to the epoch the run resumes in only: start "
                "every later epoch at its first batch (set the position back to 0).")
    if not same:
        return (f"rank {rank} trained step {step} on a batch the uninterrupted run never used at any step: the data "
                "stream was not resumed where it stopped (the epoch, set on the sampler, and the position in it, "
                "both from the saved step).")
    used = same[0]
    if used == step - epoch * STEPS_PER_EPOCH:
        return (f"rank {rank} trained step {step} (epoch {epoch}) on the batch of step {used}, epoch 0's: the sampler "
                f"was not set back to epoch {epoch}. Save the epoch (or derive it from the step) and call "
                "sampler.set_epoch(epoch) before taking its batches.")
    if used == step - position:
        return (f"rank {rank} trained step {step} on the batch of step {used}, the first of epoch {epoch}: the resumed "
                f"run started the epoch from its beginning. Skip the {position} batch(es) of the epoch that were "
                "already done (save the position in the epoch, or derive it from the step).")
    return (f"rank {rank} trained step {step} on the batch the uninterrupted run used at step {used}: the data "
            "stream was not resumed where it stopped (epoch and position in the epoch).")


def _difference(rank: int, record: dict, reference: list[dict], other_rank: list[dict]) -> str | None:
    """What differs between a resumed step and the same step of the uninterrupted run, as feedback."""
    step = record["step"]
    want = reference[step]
    if not torch.equal(record["x"], want["x"]):
        return _batch_hint(rank, step, record["x"], reference)
    if not torch.equal(record["params"], want["params"]):
        return f"rank {rank}, step {step}: {_stale('parameters', 'params', record, reference)}"
    if (record["momentum"] is None) != (want["momentum"] is None) or (
            record["momentum"] is not None and not torch.equal(record["momentum"], want["momentum"])):
        if record["momentum"] is None:
            return (f"rank {rank}, step {step}: the optimizer's momentum buffers are empty: the optimizer started "
                    "fresh, where the uninterrupted run had momentum from the steps before.\nHint: the optimizer "
                    "state is part of the checkpoint: save optimizer.state_dict() and load it with "
                    "optimizer.load_state_dict().")
        return f"rank {rank}, step {step}: {_stale('momentum buffers', 'momentum', record, reference)}"
    if not torch.equal(record["rng"], want["rng"]):
        if torch.equal(record["rng"], other_rank[step]["rng"]):
            return (f"rank {rank}, step {step}: rank {rank} resumed with the other rank's RNG state, so its "
                    "dropout masks are the other rank's.\nHint: every rank has its own random stream (seeded "
                    "with SEED + rank): each rank must save its own RNG state (a file per rank, or gather "
                    "them all to rank 0) and restore its own.")
        drawn = _draws_between(want["rng"], record["rng"])
        if drawn and not any(torch.equal(r["rng"], record["rng"]) for r in reference):
            numbers = f"{drawn} 64-bit random number{'s' * (drawn > 1)}"
            return (f"rank {rank}, step {step}: the resumed run started from the random number generator state the "
                    f"uninterrupted run had at step {step}, advanced by {numbers}: something drew from the global "
                    "RNG between the restore and the step.\nHint: a DataLoader draws one to seed itself each time an "
                    "iterator over it is created (iter(loader), a for loop, itertools.islice): restore the RNG state "
                    "after creating the resumed epoch's iterator, or take the batches from the sampler itself "
                    "(list(sampler), as train_plain does), which draws nothing from it.")
        return f"rank {rank}, step {step}: {_stale('random number generator state', 'rng', record, reference)}"
    return None


def _draws_between(start: torch.Tensor, state: torch.Tensor, most: int = 4) -> int | None:
    """How many 64-bit random numbers (as a DataLoader iterator draws to seed itself) take the RNG from `start` to
    `state`: 1 .. `most`, or None."""
    generator = torch.Generator()
    generator.set_state(start)
    for count in range(1, most + 1):
        torch.empty((), dtype=torch.int64).random_(generator=generator)
        if torch.equal(generator.get_state(), state):
            return count
    return None


_FIXES = {
    "params": "save model.state_dict() after every step and load it with model.load_state_dict() on resume",
    "momentum": "save optimizer.state_dict() after every step and load it with optimizer.load_state_dict() on resume",
    "rng": "save this rank's RNG state (torch.get_rng_state(), or capture_rng()) after every step and restore it "
           "on resume, after anything that seeds (torch.manual_seed would overwrite it)",
}


def _stale(what: str, key: str, record: dict, reference: list[dict]) -> str:
    """What a resumed step started from, said by which step of the uninterrupted run had the same state."""
    step = record["step"]
    same = [r["step"] for r in reference if r[key] is not None and torch.equal(r[key], record[key])]
    after = [r["step"] for r in reference if key == "params" and torch.equal(r["after"], record[key])]
    if same and same[0] == 0:
        said = (f"the resumed run started from the {what} the uninterrupted run had at step 0, before any "
                f"training: the checkpoint's {what} never took effect (not saved, not loaded, or reset after loading)")
    elif same:
        said = (f"the resumed run started from the {what} the uninterrupted run had at step {same[0]}, not step "
                f"{step}: the checkpoint holds them from {step - same[0]} step(s) earlier than the steps done it "
                "records (save them after the step, together with the step count)")
    elif after:
        said = (f"the resumed run started from the {what} the uninterrupted run had after step {after[0]}, not "
                f"after step {step - 1}")
    else:
        said = (f"the resumed run started from {what} that differ from the uninterrupted run's at step {step}, and "
                "from what it had at every other step")
    return f"{said}.\nHint: {_FIXES[key]}."


def _first_difference(resumed: list[list[dict]], reference: list[list[dict]]) -> str | None:
    """The earliest step at which some rank's resumed run differs (a wrong rank spoils every rank's next step)."""
    for index in range(len(resumed[0])):
        for rank in range(WORLD_SIZE):
            record = resumed[rank][index]
            problem = _difference(rank, record, reference[rank], reference[1 - rank])
            if problem and record["call"]:
                return (f"after the second stop (train stopped on both ranks at the start of step {RESTART_AT} and "
                        f"called again in the same folder): {problem}")
            if problem:
                return problem
    return None


def _newer_checkpoint(saved: list[str], start: int, loaded: set[str]) -> tuple[str, str, bool] | None:
    """(the file a restart at `start` resumed from, the newest the killed run left of the same name but its number,
    whether that newest sorts before it as text while it sorts last of those names), where the resumed-from name
    holds `start` or `start - 1` (steps done, or the last step's index) and the newest CRASH_AT or CRASH_AT - 1, read
    as numbers ('000009' is 9). Only files the restart read (`loaded`) are taken for the resumed-from one, where it
    read any of `saved`. Else None."""
    for older in [file for file in saved if file in loaded] or saved:
        for found in re.finditer(r"\d+", older):
            number = int(found.group())
            if number not in (start, start - 1):
                continue
            family = _family(older, found, saved)
            newer = [(step, file) for file, step in family.items()
                     if step in (CRASH_AT - 1, CRASH_AT) and step > number]
            if newer:
                newest = max(newer)[1]
                return older, newest, newest < older and older == max(family)
    return None


def check_restartable(train, timeout: float = 60.0) -> None:
    """Check a restartable `train(rank, directory, total_steps, step_fn)`: killed, restarted, equal to never killed.

    Runs train on 2 gloo ranks three times: with rank 1 killed at the start of step CRASH_AT,
    again in the killed run's folder (the restart, stopped once more at the start of step
    RESTART_AT and called again), and uninterrupted in a folder of its own (the reference). The
    resumed run must start at step CRASH_AT and again at RESTART_AT, every step must start from
    exactly the uninterrupted run's parameters, momentum, RNG state and batch, the files
    the restart reads must be written atomically, and no rank may start step CRASH_AT before
    rank 0's save after step CRASH_AT - 1 is done (the killed run slows that one torch.save).

    Introduced in notebooks/12-debugging-and-fault-tolerance.ipynb.
    """
    ensure_written(train)
    name = getattr(train, "__name__", "train")
    refuse_written_divisor(train, name, "a step count", "the batches of an epoch, counted from the sampler "
                           "(len(sampler) and BATCH), which the number of ranks decides", divided=("step",),
                           ignored=("total",), computed=True)
    whole = whole_dataset_divisor(train, ("step",), ("total",))
    if whole is not None:
        raise CheckFailed(f"{name} divides a step count by {whole[0]}, which counts the batches of the whole "
                          f"dataset (`{whole[1]}`): the sampler hands each rank only its share, so each rank would "
                          f"wait for batches it never gets.\nHint: count the batches of an epoch from the sampler "
                          f"itself (len(sampler) and BATCH).")
    with tempfile.TemporaryDirectory(prefix="ddp_lab-check12-") as root:
        never, killed = os.path.join(root, "uninterrupted"), os.path.join(root, "killed")
        marks = os.path.join(root, "marks")
        for folder in (never, killed, marks):
            os.makedirs(folder)
        _killed_run(train, killed, marks, timeout, name)
        saved = sorted(os.listdir(killed))
        restarted = run_on_ranks(_train_runner, (train, killed, TOTAL_STEPS, None, RESTART_AT), WORLD_SIZE, timeout,
                                 name)
        _check_same_start(restarted, saved, killed)
        uninterrupted = run_on_ranks(_train_runner, (train, never, TOTAL_STEPS, None, None), WORLD_SIZE, timeout, name)
    resumed, reference = [run["records"] for run in restarted], [run["records"] for run in uninterrupted]
    files, reference_files = _events(restarted, killed), _events(uninterrupted, never)
    _check_inside_directory(saved, resumed + reference, name)
    _check_atomic(files, reference_files, resumed + reference, name)
    _check_uninterrupted(reference)
    _check_resumed_steps(restarted, saved, name, reference, files, reference_files, train)
    problem = _first_difference(resumed, reference)
    if problem:
        raise CheckFailed(problem)
    for rank, records in enumerate(resumed):
        if not torch.equal(records[-1]["after"], reference[rank][-1]["after"]):
            raise CheckFailed(f"rank {rank}: the final parameters differ from the uninterrupted run's.")
    passed(f"{name}: rank 1 killed at step {CRASH_AT}, restarted, resumed at step {CRASH_AT}; every step and the final "
           "parameters equal the uninterrupted run's, bit for bit, on both ranks")


def _check_resumed_steps(restarted: list[dict], saved: list[str], name: str, reference: list[list[dict]],
                         files: list[list[dict]], reference_files: list[list[dict]], train) -> None:
    """The restarted run must go on at CRASH_AT, and after its second stop at RESTART_AT: not from 0, not from an
    older checkpoint, not one step early or late. `reference`: the uninterrupted run's records, to tell an older
    checkpoint from a miscounted one; `restarted`: each rank's `_train_runner` output of the restarted run; `files`,
    `reference_files`: each rank's file events of the restarted and the uninterrupted run (what the restart loaded,
    and when the uninterrupted run saved it)."""
    loaded = _loaded([[e for e in rank if e["call"] == 0] for rank in files])
    for rank, run in enumerate(restarted):
        records = run["records"]
        steps = [r["step"] for r in records]
        if not steps or steps[0] == 0:
            if not saved:
                raise CheckFailed(f"rank {rank}: after the crash {name} started again from step 0, and the killed "
                                  "run left nothing in `directory`.\nHint: save a checkpoint in `directory` after "
                                  "every step, and load it at the start when it exists.")
            raise CheckFailed(f"rank {rank}: after the crash {name} started again from step 0, although the killed "
                              f"run saved {saved} in `directory`.\nHint: at the start, load the checkpoint when it "
                              "exists and go on from the step it records.")
        newer = _newer_checkpoint(saved, steps[0], loaded[rank]) if steps[0] < CRASH_AT else None
        if newer:
            older, newest, sorts_first = newer
            said = (f"rank {rank}: rank 1 was killed at the start of step {CRASH_AT}; the resumed run started at "
                    f"step {steps[0]}, from {older!r}, although the killed run also left {newest!r}, newer")
            if sorts_first:
                differs = next(i for i, (a, b) in enumerate(zip(newest, older)) if a != b)
                raise CheckFailed(f"{said}: {older!r} sorts after it as text ('{newest[differs]}' comes before "
                                  f"'{older[differs]}'), so the last name in sorted order is not the newest "
                                  "checkpoint.\nHint: pick the checkpoint by its step as a number (int() of the "
                                  "number in the name), or write the number zero-padded (f'{step:08d}'), or keep one "
                                  "file per rank that every save replaces.")
            raise CheckFailed(f"{said} (the number in its name is higher).\nHint: resume from the newest checkpoint, "
                              "the one whose step, read as a number (int()), is the highest, or keep one file per "
                              "rank that every save replaces.")
        if steps[0] < CRASH_AT and torch.equal(records[0]["params"], reference[rank][steps[0]]["params"]):
            old = CRASH_AT - steps[0]
            saves = _save_points(reference_files, set().union(*loaded))
            twice = f"{_steps(steps[0], CRASH_AT - 1)} run{'s' * (old == 1)} twice"
            if saves and len(saves) < TOTAL_STEPS:
                seen, hint = (f"; the uninterrupted run saved it only with {_listed(saves)} steps done",
                              "save a checkpoint after EVERY step")
            else:
                seen, hint = "", "resume from the newest checkpoint, and save one after EVERY step"
            raise CheckFailed(f"rank {rank}: rank 1 was killed at the start of step {CRASH_AT}; the resumed run "
                              f"started at step {steps[0]}, from exactly the state that step started from in the "
                              f"uninterrupted run: the checkpoint it resumed from was {old} step{'s' * (old > 1)} "
                              f"old{seen}, so {twice}.\nHint: {hint}, so that a crash loses at most the step it "
                              "happened in.")
        if steps[0] != CRASH_AT:
            raise CheckFailed(f"rank {rank}: rank 1 was killed at the start of step {CRASH_AT}, after step "
                              f"{CRASH_AT - 1}'s checkpoint, but the resumed run started at step {steps[0]}.\nHint: "
                              f"save after every step the number of steps DONE ({CRASH_AT} after step {CRASH_AT - 1}) "
                              "and start from it.")
        first, again = ([r["step"] for r in records if r["call"] == call] for call in (0, 1))
        if first == list(range(CRASH_AT, RESTART_AT)) and again and again[0] == CRASH_AT:
            written = f" ({name}'s code holds the number {CRASH_AT})" if _holds_number(train, CRASH_AT) else ""
            raise CheckFailed(f"rank {rank}: the resumed run started at step {CRASH_AT}, rightly, then was stopped "
                              f"on both ranks at the start of step {RESTART_AT} and {name} called again in the same "
                              f"folder: it started at step {CRASH_AT} again, although "
                              f"{_steps(CRASH_AT, RESTART_AT - 1)} had been done since: the step it resumes at does "
                              f"not come from the checkpoint{written}.\nHint: resume at the number of steps done "
                              "that the checkpoint records (saved with the model after every step), whatever step the "
                              "crash came at.")
        if steps != list(range(CRASH_AT, TOTAL_STEPS)):
            stop = (f" (stopped on both ranks at the start of step {RESTART_AT}, {name} was called again in the same "
                    "folder)") if run["stopped"] else ""
            raise CheckFailed(f"rank {rank}: the resumed run called step_fn with steps {steps}; expected "
                              f"{list(range(CRASH_AT, TOTAL_STEPS))}, each once, in order{stop}.")

"""Starting rank processes: the one place that decides *how* a rank's process begins.

`start_rank_processes` gives back a `RankProcess` per rank whatever the start method: its
pid, the read ends of its stdout and stderr pipes, the launcher's end of its control
channel, and `wait()` / `send_signal()`. `stop_ranks` ends them.

- **Warm** (the default): fork the ranks from the zygote, a clean process that imported torch
  (and, once its ranks needed them, zygote.LEARNED_IMPORTS) and ran nothing (see zygote.py).
  ~0.05 s per launch. A kernel's first launch starts the zygote and waits for its import: one
  interpreter imports torch for all the ranks, where starting them cold would import it once per
  rank (and then once more in the zygote the next launches need). A zygote that does not fork
  them all within FORK_WAIT_S is retired and the launch starts cold.
- **Cold** (with DDP_LAB_WARM=0, or when the zygote died, stalled or did not get ready in time):
  run `python -m ddp_lab.launcher.worker` in a fresh interpreter per rank. A new zygote then
  starts in the background for the next launches.

Neither start method forks the notebook kernel itself. Both start their processes (a cold
rank, the zygote) from one long-lived thread (starter.py), so that ranks outlive the thread
that launched them.

Introduced in notebooks/00-welcome-and-first-launch.ipynb ("How launch works").
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from ddp_lab.launcher.rankprocess import RankProcess, end_session
from ddp_lab.launcher.starter import start_process
from ddp_lab.launcher.zygote_client import ForkedRank, Zygote

_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
_zygote: Zygote | None = None
_successor: Zygote | None = None   # a zygote importing what _zygote's ranks learned, until it takes over

# Variables that torch._dynamo and torch._inductor read once, when imported (their config modules): a
# zygote that imported them forks ranks only for launches that agree with it on these, else the
# launch starts cold (as launch(env={"TORCH_COMPILE_DISABLE": "1"}) must be obeyed).
IMPORT_TIME_PREFIXES = ("TORCHDYNAMO", "TORCHINDUCTOR", "TORCH_COMPILE", "TORCH_LOGS", "TORCH_TRACE")


class SpawnedRank(RankProcess):
    """A rank in a fresh interpreter, started with subprocess (cold start).

    A thread waits for it to end, ends what it left in its session, then reaps it.
    """

    def __init__(self, rank: int, popen: subprocess.Popen, channel: socket.socket):
        self.rank, self.popen, self.channel, self.pid = rank, popen, channel, popen.pid
        self.stdout_fd = os.dup(popen.stdout.fileno())
        self.stderr_fd = os.dup(popen.stderr.fileno())
        popen.stdout.close()
        popen.stderr.close()
        self._exited = threading.Event()
        threading.Thread(target=self._reap, daemon=True, name=f"ddp_lab-rank{rank}-reaper").start()

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode if self._exited.is_set() else None

    def _reap(self) -> None:
        try:
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped yet
        except ChildProcessError:
            pass
        end_session(self.pid)
        self.popen.wait()
        self._exited.set()

    def wait(self, timeout: float | None = None) -> int | None:
        self._exited.wait(timeout)
        return self.returncode


def rank_environment(base: dict, rank: int, world_size: int, extra: dict) -> dict:
    """The environment torchrun would give this rank, plus ddp_lab's own settings."""
    env = dict(base)
    env.update({
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world_size),
        "PYTHONUNBUFFERED": "1",
        "DDP_LAB_PARENT_PID": str(os.getpid()),
    })
    env.update(extra)
    return with_package_on_path(env)


def with_package_on_path(env: dict) -> dict:
    """Make sure a child interpreter can `import ddp_lab` even if it is not installed."""
    paths = [_PACKAGE_PARENT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**env, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


def spawn_rank(rank: int, env: dict, payload_path: str, stacks_path: str) -> SpawnedRank:
    """Start one rank in a fresh interpreter (cold start)."""
    parent_end, child_end = socket.socketpair()
    try:
        popen = start_process(
            [sys.executable, "-m", "ddp_lab.launcher.worker", str(child_end.fileno()), payload_path, stacks_path],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(child_end.fileno(),),
            # Own session: Jupyter's interrupt signals the kernel's process group; the
            # launcher, not the ranks, must receive it and then stop the ranks itself.
            start_new_session=True,
            cwd=os.getcwd(),
        )
    except BaseException:
        parent_end.close()
        raise
    finally:
        child_end.close()
    return SpawnedRank(rank, popen, parent_end)


# How long a process's first launch waits for the zygote it has just started (its `import torch`, and the
# LEARNED_IMPORTS named in DDP_LAB_ZYGOTE_IMPORTS): starting the ranks cold instead would run that import once
# per rank, so waiting is cheaper however slow the import is; the bound only catches a zygote that hangs.
FIRST_ZYGOTE_WAIT_S = 60.0


def warm_starts_enabled() -> bool:
    """Warm starts are on unless DDP_LAB_WARM=0."""
    return os.environ.get("DDP_LAB_WARM", "1") != "0"


def ready_zygote(wait_s: float = 15.0) -> Zygote | None:
    """The kernel's zygote if it is (or within wait_s becomes) ready; None means start cold.

    A zygote that died, or did not become ready in time, is retired; a new one starts after
    the launch (`prepare_zygote`).
    """
    global _zygote
    _adopt_successor()
    if not warm_starts_enabled() or _zygote is None:
        return None
    if _zygote.alive() and _zygote.wait_ready(wait_s):
        return _zygote
    _zygote.retire(f"was not ready within {wait_s:g}s; ddp_lab ended it")
    _zygote = None
    return None


def settled_zygote(wait_s: float = 60.0) -> Zygote | None:
    """The zygote the next launch forks from, for code that acts on it (tests kill or stop it) or times
    a launch (`ddp_lab.plan.measure.run`, `ddp_lab.plan.calibrate`): a successor being prepared is first
    waited for and takes over, so it cannot take over between this call and the launch, nor import in
    the background while the launch's ranks are timed (measured here: a successor's imports took 2 s of
    CPU during one 2-rank ZeRO-2 run on 2 cores and made its step 2x slower)."""
    global _successor
    if _successor is not None and not _successor.wait_ready(wait_s):   # stuck importing: do not wait for it again
        _successor.close()
        _successor = None
    return ready_zygote()


def _zygote_environment(imports: tuple[str, ...] = ()) -> dict:
    env = {**os.environ, "DDP_LAB_PARENT_PID": str(os.getpid())}
    if imports:
        env["DDP_LAB_ZYGOTE_IMPORTS"] = ",".join(imports)
    return with_package_on_path(env)


def _adopt_successor() -> None:
    """Let the successor take over once it is ready and the old zygote has no rank alive (its
    ranks die with it: a live cluster's ranks keep it until the cluster ends)."""
    global _zygote, _successor
    if _successor is None:
        return
    if not _successor.alive():
        _successor.close()
        _successor = None
    elif _successor.is_ready() and (_zygote is None or _zygote.live_ranks() == 0):
        if _zygote is not None:
            _zygote.close()
        _zygote, _successor = _successor, None


def prepare_zygote() -> None:
    """Start the zygote in the background if there is none (called after a launch); if its ranks
    imported zygote.LEARNED_IMPORTS it lacks, start a successor that imports them, in the background."""
    global _zygote, _successor
    if not warm_starts_enabled():
        return
    if _zygote is None or not _zygote.alive():
        if _zygote is not None:
            _zygote.close()
        _zygote = Zygote.start(_zygote_environment())
    elif _successor is None and _zygote.learned - _zygote.asked:
        _successor = Zygote.start(_zygote_environment(tuple(sorted(_zygote.asked | _zygote.learned))))


def shutdown_zygote() -> None:
    """Stop the kernel's zygote (the next launch starts cold)."""
    global _zygote, _successor
    for zygote in (_zygote, _successor):
        if zygote is not None:
            zygote.close()
    _zygote = _successor = None


def start_rank_processes(envs: list[dict], payload_path: str, stacks_paths: list[str], on_started) -> None:
    """Start rank k with envs[k], calling on_started(process) for each, rank 0 first.

    Forked from the zygote when one is ready and forks them all in time (a process's first launch
    starts the zygote and waits for it), else each in a fresh interpreter. Forked ranks run only
    once every rank has started and been passed to on_started, so a start given up half way has
    touched nothing.
    """
    global _zygote
    first = _zygote is None and _successor is None and warm_starts_enabled()
    if first:   # this process's first launch (or the first since shutdown_zygote): start the zygote and fork from it
        prepare_zygote()
    zygote = ready_zygote(FIRST_ZYGOTE_WAIT_S if first else 15.0)
    if zygote is not None and zygote.imports and _differs_at_import(zygote.env, envs[0]):
        zygote = None   # its imports read variables this launch sets otherwise: start cold, obeying them
    if zygote is not None:
        specs = [{"env": env, "payload_path": payload_path, "stacks_path": stacks, "cwd": os.getcwd()}
                 for env, stacks in zip(envs, stacks_paths)]
        forked = zygote.fork_ranks(specs)
        if forked is not None:
            for process in forked:
                on_started(process)
            for process in forked:
                process.go()
            return
        _zygote = None  # retired by fork_ranks; prepare_zygote starts a new one after the launch
    for rank, (env, stacks) in enumerate(zip(envs, stacks_paths)):
        on_started(spawn_rank(rank, env, payload_path, stacks))


def _differs_at_import(zygote_env: dict, rank_env: dict) -> bool:
    """Whether the launch's env= sets a variable read at import otherwise than the zygote had it. Only what
    env= sets counts: the notebook's own environment may gain such variables after the zygote started (importing
    torch._inductor sets TORCHINDUCTOR_CACHE_DIR in the importing process), and those the ranks get anyway."""
    return any(value != zygote_env.get(key) for key, value in rank_env.items()
               if key.startswith(IMPORT_TIME_PREFIXES) and value != os.environ.get(key))


KILL_WAIT_S = 2.0  # after SIGKILL: longer means the zygote that reaps the rank is not answering


def stop_ranks(ranks: list[RankProcess], grace: float = 1.0) -> None:
    """SIGTERM every running rank, wait up to `grace` seconds, then SIGKILL the rest.

    Returns once each rank's end is known. A forked rank whose end its zygote does not
    report within KILL_WAIT_S of the SIGKILL means a stalled zygote: it is retired, which
    ends its ranks too. Call it with interrupts held (interrupts.py) when clean-up must finish.
    """
    running = [process for process in ranks if process.returncode is None]
    for process in running:
        process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in running:
        if process.wait(max(0.0, deadline - time.monotonic())) is None:
            process.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    for process in running:
        if process.wait(max(0.0, deadline - time.monotonic())) is None and isinstance(process, ForkedRank):
            process.zygote.retire(f"did not report rank {process.rank}'s end; ddp_lab ended it")

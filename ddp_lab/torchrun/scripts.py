"""Leaving the notebook: run a notebook function as a script under torchrun.

    job = ddp_lab.torchrun.scripts.export(train, args=(5,), path="artifacts/06/train.pkl")
    command = job.torchrun_command("--standalone", "--nproc-per-node", "2")
    ddp_lab.torchrun.scripts.run([command])      # runs `torchrun ... -m ddp_lab.torchrun.run_pickled <job>`
    results = job.results()             # rank k's return value is results[k], like launch()

`export` ships the function by value (cloudpickle, as `ddp_lab.launch` does) into a job
file; `python -m ddp_lab.torchrun.run_pickled <job>` is the script torchrun starts on every rank:
it sets up the process group from the environment torchrun gives it and writes its
return value next to the job file. The job file is not a substitute for a real
`train.py` on a cluster (it needs the same Python, torch and ddp_lab on every node, and a
shared filesystem for the results); it lets a notebook show that the *same function*
gives the same result under torchrun as under `ddp_lab.launch`.

Introduced in notebooks/06-backends-and-torchrun.ipynb.
"""

from __future__ import annotations

import os
import pickle
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import cloudpickle

from ddp_lab.launcher.errors import describe_exit
from ddp_lab.launcher.payload import notebook_sources, pack_arguments, pack_function
from ddp_lab.launcher.rendezvous import free_port  # noqa: F401  (a rendezvous port for multi-node demos)
from ddp_lab.launcher.workdir import open_private, work_folder

TORCHRUN = (sys.executable, "-m", "torch.distributed.run")
RUNNER = ("-m", "ddp_lab.torchrun.run_pickled")


class ScriptFailed(RuntimeError):
    """A command started by `run` failed or timed out; the message holds its log's tail."""


@dataclass
class ScriptJob:
    """A function and its arguments saved to `path`, ready for `python -m ddp_lab.torchrun.run_pickled`."""

    path: Path

    @property
    def results_dir(self) -> Path:
        """Where each rank writes `rank-<RANK>.pkl` (next to the job file)."""
        return self.path.with_name(self.path.stem + ".results")

    def script_args(self) -> list[str]:
        """The script part of a torchrun command line: `-m ddp_lab.torchrun.run_pickled <job>`."""
        return [*RUNNER, str(self.path)]

    def torchrun_command(self, *torchrun_args: str) -> list[str]:
        """`torchrun <torchrun_args> -m ddp_lab.torchrun.run_pickled <job>`, with this Python's torchrun.

        Example:
            >>> job.torchrun_command("--standalone", "--nproc-per-node", "2")
        """
        return [*TORCHRUN, *map(str, torchrun_args), *self.script_args()]

    def results(self) -> list:
        """Every rank's return value, index = global rank, like `ddp_lab.launch`.

        Raises:
            FileNotFoundError: when some rank has not written its result (it failed, or
                the command has not run yet).
        """
        files = sorted(self.results_dir.glob("rank-*.pkl"))
        if not files:
            raise FileNotFoundError(f"no results in {self.results_dir}: run the torchrun command first.")
        records = [pickle.loads(file.read_bytes()) for file in files]
        world_size = records[0]["world_size"]
        by_rank = {record["rank"]: record for record in records}
        missing = sorted(set(range(world_size)) - set(by_rank))
        if missing:
            raise FileNotFoundError(
                f"ranks {missing} of {world_size} wrote no result in {self.results_dir}: they failed "
                "or did not start; read the torchrun log.")

        return [cloudpickle.loads(by_rank[rank]["value"]) for rank in range(world_size)]


def export(fn, args=(), path: str | os.PathLike = "job.pkl", backend: str = "auto", *,
           init_process_group: bool = True) -> ScriptJob:
    """Save `fn(rank, *args)` to a job file that `python -m ddp_lab.torchrun.run_pickled` runs.

    Args:
        fn: a function taking the rank first, as for `ddp_lab.launch` (notebook cells,
            closures and notebook classes are fine: it is shipped by value).
        args: extra positional arguments (plain data, tensors).
        path: the job file; results go to `<path stem>.results/` beside it (cleared here).
        backend: 'auto' (nccl when every local rank has its own GPU, else gloo), 'gloo'
            or 'nccl'; the runner initialises the process group with it.
        init_process_group: False for code that sets up its own group (calls
            `dist.init_process_group` itself, as a tutorial's `setup()` does): the runner then
            leaves it to fn, as `ddp_lab.launch(..., init_process_group=False)` does.

    Returns:
        ScriptJob: build the torchrun command with `.torchrun_command(...)`, read the
        ranks' return values with `.results()`.

    Example:
        >>> job = ddp_lab.torchrun.scripts.export(lambda rank: rank * 10, path="artifacts/job.pkl")
        >>> ddp_lab.torchrun.scripts.run([job.torchrun_command("--standalone", "--nproc-per-node", "2")])
        >>> job.results()
        [0, 10]

    Introduced in notebooks/06-backends-and-torchrun.ipynb.
    """
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"backend={backend!r}: use 'auto', 'gloo' or 'nccl'.")
    if not isinstance(init_process_group, bool):
        raise TypeError(f"init_process_group={init_process_group!r}: give True (the runner sets up the group) "
                        "or False (fn calls dist.init_process_group itself).")
    job = ScriptJob(Path(path))
    job.path.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(job.results_dir, ignore_errors=True)
    payload = {
        "fn": pack_function(fn),
        "args": pack_arguments(tuple(args)),
        "backend": backend if init_process_group else None,
        "sys_path": list(sys.path),
        "sources": notebook_sources(),
    }
    job.path.write_bytes(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))
    return job


def shell(command: list[str]) -> str:
    """The command as you would type it: this Python's `-m torch.distributed.run` shown as `torchrun`.

    Introduced in notebooks/06-backends-and-torchrun.ipynb.
    """
    words = list(command)
    if tuple(words[:3]) == TORCHRUN:
        words[:3] = ["torchrun"]
    elif words[:1] == [sys.executable]:
        words[:1] = ["python"]
    return shlex.join(words)


@dataclass
class Finished:
    """One finished command: its exit status and its combined stdout/stderr."""

    command: list[str]
    returncode: int
    log: str


def run(commands: list[list[str]], timeout: float = 120.0, env: dict | None = None) -> list[Finished]:
    """Start every command at once (e.g. one torchrun per "node"), wait for all, return their logs.

    Output is captured, not printed: torchrun's own log lines carry timestamps and ports,
    so print only what you need from `Finished.log`. On a failure or after `timeout`
    seconds every command still running is stopped with its children, and
    `ScriptFailed` shows the end of each log.

    Args:
        commands: argument lists (no shell).
        timeout: seconds for all of them together.
        env: extra environment variables for every command.

    Introduced in notebooks/06-backends-and-torchrun.ipynb.
    """
    full_env = {**os.environ, **(env or {})}
    with work_folder("ddp_lab-run-") as logs_dir:  # private, and removed even if the kernel dies
        started = []
        try:
            for index, command in enumerate(commands):
                log = open(Path(logs_dir, f"{index}.log"), "w+b", opener=open_private)
                started.append((subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env=full_env, start_new_session=True), log))  # own group: stop children too
            failed, timed_out = _wait_all([process for process, _ in started], timeout)
        finally:
            for process, _ in started:
                _stop_group(process)
        finished = []
        for (process, log), command in zip(started, commands):
            log.seek(0)
            finished.append(Finished(list(command), process.returncode, log.read().decode("utf-8", "replace")))
            log.close()
    if failed or timed_out:
        raise ScriptFailed(_failure_message(finished, timeout if timed_out else None))
    return finished


def _wait_all(processes: list[subprocess.Popen], timeout: float) -> tuple[bool, bool]:
    """Wait until all end, one fails, or the time is up. Returns (failed, timed_out).

    After a failure the others still running get up to 2 s to notice and print their side of the
    story (another node's torchrun sees its peer gone); once all have ended there is nothing to wait for.
    """

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        codes = [process.poll() for process in processes]
        if any(code not in (None, 0) for code in codes):
            noticed = time.monotonic() + 2.0
            while time.monotonic() < noticed and any(process.poll() is None for process in processes):
                time.sleep(0.05)
            return True, False
        if all(code == 0 for code in codes):
            return False, False
        time.sleep(0.05)
    return False, True


def _stop_group(process: subprocess.Popen, grace: float = 3.0) -> None:
    """SIGTERM the command's process group (torchrun and its workers), then SIGKILL."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=grace)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass
    try:  # workers left behind by a torchrun that died
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _failure_message(finished: list[Finished], timeout: float | None) -> str:
    head = (f"the commands did not finish within {timeout} s" if timeout is not None
            else "a command failed")
    parts = [f"{head}; the end of each log follows."]
    for index, item in enumerate(finished):
        lines = item.log.rstrip().splitlines()
        # torchrun's summary (@record) gives each failed rank's traceback: "Failures:" (the others) above "Root
        # Cause", the failure it observed first, which can be a peer's (a barrier broken when the failing rank
        # died) rather than the rank whose error caused it: both sections are shown.
        cause = next((i for i, line in enumerate(lines) if line.startswith("Root Cause")), None)
        others = next((i for i, line in enumerate(lines[:cause]) if line.startswith("Failures:")), cause)
        tail = "\n".join(lines[others:cause + 40] if cause is not None else lines[-25:])
        parts.append(f"--- command {index} ({_exit(item.returncode)}): {shell(item.command)}\n{tail}")
    return "\n".join(parts)


def _exit(returncode: int | None) -> str:

    return "still running" if returncode is None else describe_exit(returncode)

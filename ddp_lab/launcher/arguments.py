"""Checking what `launch()`, `ddp_lab.Cluster` (made, and given commands) and `%%ddp` get, before anything starts.

Every check raises a one-line TypeError or ValueError that names the argument and the fix,
so a typo costs nothing: no rank is started and a live cluster is not shut down.

Introduced in notebooks/00-welcome-and-first-launch.ipynb (launch's arguments).
"""

from __future__ import annotations

import inspect
import math
import os
import warnings

from ddp_lab.launcher.errors import CellSyntaxError
from ddp_lab.launcher.rendezvous import AGENT_STORE, OWN_STORE

# One machine runs every rank of this course, each in its own process. torch.multiprocessing.spawn
# has no cap, but the launcher holds 3 file descriptors per rank (stdout, stderr, control channel)
# plus the store's connections, and gloo connects every pair of ranks (n * (n - 1) sockets: 65,280
# at 256). 256 is 2x the most cores of any machine the course runs on; past it a typo
# (nprocs=10**6) would only fork interpreters until the machine runs out of memory.
MAX_NPROCS = 256
# The process group's timeout is timeout + 60 s as a datetime.timedelta, and the supervisor waits
# on a queue with it: both overflow long before float('inf'). 30 days is longer than any lesson;
# None (no watchdog) is the way to say "forever".
MAX_TIMEOUT_S = 30 * 24 * 3600

# What rank_environment() and loopback_store() set and the rendezvous reads: an env= entry would
# override them for all ranks alike (every rank RANK=0, or a store nobody hosts) and hang it.
# LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK and ROLE_* stay settable: the rendezvous does not read
# them, and setting them is how one machine plays a multi-node job's environment (lesson 06's
# check gives 2 ranks LOCAL_RANK=0 each: two "nodes" of one process).
_RANK_KEYS = ("RANK", "WORLD_SIZE", "DDP_LAB_PARENT_PID")
_STORE_KEYS = ("MASTER_ADDR", "MASTER_PORT", AGENT_STORE, "TORCHELASTIC_RESTART_COUNT", OWN_STORE)


def check_nprocs(nprocs) -> None:
    """nprocs must be an int from 1 to MAX_NPROCS."""
    if isinstance(nprocs, bool) or not isinstance(nprocs, int):
        raise TypeError(f"nprocs must be an int (the number of ranks), got {type(nprocs).__name__}: e.g. nprocs=2.")
    if nprocs < 1:
        raise ValueError(f"nprocs must be at least 1, got {nprocs}: it is the number of ranks to start, e.g. nprocs=2.")
    if nprocs > MAX_NPROCS:
        raise ValueError(f"nprocs={nprocs} is too many: every rank is a process on this machine; "
                         f"use at most {MAX_NPROCS} (ddp_lab.doctor() recommends a number for this machine).")


def check_timeout(timeout, name: str = "timeout") -> None:
    """timeout must be None (no watchdog) or a finite number of seconds, above 0 and at most MAX_TIMEOUT_S."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"{name} must be a number of seconds or None (no watchdog), got {timeout!r}: "
                        f"e.g. {name}=60.")
    if math.isnan(timeout) or timeout <= 0:
        raise ValueError(f"{name} must be a positive number of seconds or None (no watchdog), got {timeout!r}: "
                         f"e.g. {name}=60.")
    if timeout > MAX_TIMEOUT_S:
        raise ValueError(f"{name}={timeout!r} is too long: give at most {MAX_TIMEOUT_S} seconds (30 days), "
                         f"or {name}=None for no watchdog.")


def check_threads(threads) -> None:
    """threads must be None (the default) or a positive int."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive int (torch threads per rank) or None, got {threads!r}.")


def check_ranks(ranks, nprocs: int, prefix: str = "", purpose: str = "show") -> None:
    """ranks (whose output a live-cluster command shows, or which ranks run it) must be ranks of the cluster."""
    if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
        raise TypeError(f"{prefix}give a list of ranks, e.g. [0] or [0, {nprocs - 1}].")
    wrong = [r for r in ranks if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < nprocs]
    if wrong:
        raise ValueError(f"{prefix}rank {wrong[0]!r} is not a rank of this {nprocs}-rank cluster: "
                         f"{purpose} ranks from 0 to {nprocs - 1}, e.g. 0 or 0,{nprocs - 1}.")
    if purpose == "run on" and not list(ranks):
        raise ValueError(f"{prefix}no rank given: name the ranks to run on, e.g. 0 or 0,{nprocs - 1}.")


def check_shown_ranks_run(show, only, prefix: str = "") -> None:
    """Every rank whose output a live-cluster command shows must be one that runs it (ranks already checked)."""
    if show is None or only is None:
        return
    idle = sorted(set(show) - set(only))
    if idle:
        running = ", ".join(map(str, sorted(set(only))))
        raise ValueError(f"{prefix}rank {idle[0]} is to be shown, but only rank(s) {running} run this: it would show "
                         f"nothing. Show ranks that run it, or let rank {idle[0]} run it too.")


def check_env(env) -> None:
    """env must map names to strings, and leave alone what the launcher sets for every rank."""
    if env is None:
        return
    if not isinstance(env, dict):
        raise TypeError(f"env must be a dict of environment variables, got {type(env).__name__}: "
                        "e.g. env={'TORCH_DISTRIBUTED_DEBUG': 'DETAIL'}.")
    for key, value in env.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise ValueError(f"env key {key!r} is not an environment variable name: use a non-empty string "
                             "without '=', e.g. env={'TORCH_DISTRIBUTED_DEBUG': 'DETAIL'}.")
        if not isinstance(value, str):
            raise TypeError(f"env[{key!r}] = {value!r}: environment variables are strings; "
                            f"write env={{{key!r}: {str(value)!r}}}.")
        if "\0" in value:  # the C environment ends a value at its first NUL: exec refuses it
            raise ValueError(f"env[{key!r}] = {value!r} holds a NUL byte ('\\0'), which no environment variable "
                             "can hold: remove it (to pass bytes, encode them, e.g. base64).")
        if key in _RANK_KEYS:
            raise ValueError(f"env[{key!r}]: the launcher sets {key} for every rank from nprocs= "
                             "(RANK 0..nprocs-1, WORLD_SIZE=nprocs); choose the number of ranks with nprocs= instead.")
        if key in _STORE_KEYS:
            raise ValueError(f"env[{key!r}]: the launcher sets {key} to its own store on 127.0.0.1; to use your own "
                             "address, launch with init_process_group=False and set it inside fn (as a tutorial's "
                             "setup() does).")


def check_signature(fn, args, caller: str = "launch") -> None:
    """fn must accept fn(rank, *args), as torch.multiprocessing.spawn calls it (`caller`: the function that calls
    it so, named in the message: "launch" or "cluster.run").

    A callable whose signature cannot be read (some builtins) passes: the rank reports
    what happens.
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(0, *args)
    except TypeError as error:
        name = getattr(fn, "__qualname__", None) or type(fn).__name__
        if not signature.parameters:
            wrap = f"a lambda: {caller}(lambda rank: ..., ...)" if "<lambda>" in name else \
                f"{caller}(lambda rank: {name}(), ...) (torchrun-style code reads RANK from the environment)"
            raise TypeError(
                f"fn={name} takes no arguments, but {caller} calls fn(rank, *args) like mp.spawn: give it a rank "
                f"parameter, or {wrap}.") from None
        raise TypeError(
            f"fn={name}{signature} cannot be called as fn(rank, *args) with {len(args)} arg(s) in args= "
            f"({error}): {caller} passes the rank first, then each item of args; make them match.") from None


def working_directory() -> str:
    """The current directory, which every rank starts in; a clear error if it was deleted."""
    try:
        return os.getcwd()
    except FileNotFoundError as error:
        raise FileNotFoundError(
            "the current working directory no longer exists (deleted after os.chdir into it), and every rank "
            "starts in it: os.chdir() to a folder that exists first, e.g. os.chdir(os.path.expanduser('~')).") \
            from error


def check_fn(fn, call: str = "launch") -> None:
    """fn must be callable: the function itself, not its result (`call` names the API in the fix)."""
    if not callable(fn):
        raise TypeError(
            f"fn must be a function that takes the rank first, fn(rank, *args); got {type(fn).__name__}. "
            f"Pass the function itself ({call}(train)), not its result ({call}(train())).")


def check_argv(argv) -> None:
    """argv must be a list (or tuple) of strings: each rank's sys.argv[1:]."""
    if isinstance(argv, (list, tuple)) and all(isinstance(word, str) for word in argv):
        return
    if isinstance(argv, (list, tuple)):
        index = next(i for i, word in enumerate(argv) if not isinstance(word, str))
        got = f"argv[{index}] is {type(argv[index]).__name__}"
    else:
        got = f"it is {type(argv).__name__}"
    raise TypeError(f"argv={argv!r}: give a list of strings ({got}), the command-line arguments each rank's "
                    "sys.argv[1:] holds (e.g. argv=['--epochs', '3'] for an argparse-based main; argv=[] for none).")


def check_source(source, filename: str = "<ddp cell>") -> None:
    """A live-cluster cell's source must be a string of Python code that compiles.

    A cell that does not compile is refused here, in the notebook, before any rank runs it (every rank would raise
    the same SyntaxError): `CellSyntaxError`, shown as IPython shows a SyntaxError (the cell's line and a caret).
    """
    __tracebackhide__ = True
    if not isinstance(source, str):
        raise TypeError(f"source must be a string of Python code, got {type(source).__name__}: "
                        "e.g. cluster.run_code('x = rank * 2'); to call a function use cluster.run(fn).")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # a SyntaxWarning is the ranks' to show, as they compile the cell
            # compiled, not only parsed: 'return' outside a function, or 'break' outside a loop, parses
            compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError as error:
        lines = source.splitlines()
        if error.text is None and error.lineno and 0 < error.lineno <= len(lines):
            error.text = lines[error.lineno - 1] + "\n"   # the compiler's errors name no line: the cell's, shown
        raise CellSyntaxError(error, _ipython_syntax_hint(error)) from None


def _ipython_syntax_hint(error: SyntaxError) -> str | None:
    """A hint where what does not compile is IPython's own syntax, which a notebook cell takes and plain Python does
    not: the compiler stopped at a magic's %, a shell command's ! or help's ? (%time, !ls, x?)."""
    line, offset = error.text or "", error.offset or 0
    if 0 < offset <= len(line) and line[offset - 1] in "%!?" and not line[:offset - 1].lstrip().startswith("#"):
        return ("a %%ddp cell runs on the ranks as plain Python: IPython's magics (%time), shell commands (!ls) "
                "and help (x?) work only in the notebook's own cells")
    return None


def check_variable_name(name) -> None:
    """What `Cluster.pull` brings back must be named by a variable name, a string."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a variable name as a string, got {type(name).__name__} {name!r}: "
                        "e.g. cluster.pull('loss').")
    if not name.isidentifier():
        raise ValueError(f"name {name!r} is not a variable name: give one name defined on the ranks, "
                         "e.g. cluster.pull('loss') (for part of it, pull the whole variable).")


def check_launch(fn, args, nprocs, timeout, threads, env, argv=()) -> None:
    """Every check of `launch()`'s arguments, in the order a reader meets them."""
    check_fn(fn)
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args must be a tuple of extra arguments for fn, got {type(args).__name__}: "
                        f"write args=({args!r},) for a single argument.")
    check_signature(fn, args)
    check_nprocs(nprocs)
    check_timeout(timeout)
    check_threads(threads)
    check_env(env)
    check_argv(argv)
    working_directory()

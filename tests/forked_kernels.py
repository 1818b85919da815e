"""Notebook kernels (and their zygotes) for the test suite, forked from a process that has already imported torch.

Every notebook nbval checks and every exercise tests/test_exercises.py executes runs in a fresh
kernel, and every kernel's first cell imports torch: about 3 s of a core on the 2-core CI machine,
and some 50 kernels in `make test` (a sampler of /proc over a whole fresh-clone run, 2026-11-27:
kernels used 250 s of the run's 1250 s of CPU). conftest.py starts those kernels through this module:

- a *template*, one per test process, started with its first kernel: a Python that imports torch
  (and KERNEL_DEPENDENCIES, what ipykernel and matplotlib import from other packages) and runs
  nothing else, no tensor op and no thread, so forking it is safe (the reason ddp_lab's zygote can
  fork ranks: ddp_lab/launcher/zygote.py);
- the kernel command jupyter_client starts, `python -m ipykernel_launcher -f CONNECTION`, becomes
  `python tests/forked_kernels.py SOCKET -m ipykernel_launcher -f CONNECTION`: a *relay* of a few
  milliseconds' start-up that hands its environment, working directory, standard streams and
  command line to the template, which forks a child that becomes the kernel the way
  `python -m ipykernel_launcher` would (a new session, sys.path[0] the working directory,
  ipykernel_launcher run as __main__; ipykernel itself is imported after the fork, as it reads
  JPY_PARENT_PID when imported). The relay stays the process jupyter_client knows: it passes every
  signal it gets on to the kernel's process group (an interrupt reaches the kernel and its zygote,
  as jupyter_client's own killpg does), exits with the kernel's status, and when the relay is killed
  the kernel kills its own process group (it watches a pipe only the relay holds open). A kernel
  leaves without the interpreter's teardown (after its threads, atexit handlers and a flush), which
  took 0.7 s of a core in every kernel that had imported torch, forked or not.

The same for the kernels' zygotes (ddp_lab/launcher/zygote.py: every kernel's first launch starts one, which imports
torch and what ranks of DDP, FSDP2 or DTensor import, about 4-5 s of a core here; 35 of them in `make test`, 2026-11-27).
conftest.py starts a *zygote template* per test process, which imports what a zygote imports (zygote.preload and the
LEARNED_IMPORTS named in DDP_LAB_ZYGOTE_IMPORTS), and gives the notebooks' kernels DDP_LAB_ZYGOTE_RELAY, the relay's
command: ddp_lab's launcher then starts its zygote as `RELAY -m ddp_lab.launcher.zygote FD` (zygote_client.zygote_python)
instead of `python -m ...`, and the template forks the zygote, handing it the launcher's socket FD. What the launcher
knows as its zygote process is the relay: the relay dies with the launcher (PR_SET_PDEATHSIG, as a zygote does), and
when the relay ends first (ddp_lab retires a zygote by killing it) the template kills the zygote's group; the zygote
itself dies with the template (its parent) and ends when the launcher's socket closes, as ever. Only notebooks' kernels
get the variable: a test process's own launches keep the ordinary zygote, whose pid, children and /proc environ the
launcher tests inspect (tests/rank_procs.py), and conftest.py fails a test that leaves the variable set.

A kernel (or zygote) whose environment differs from the template's in anything but KERNEL_ONLY_VARIABLES
(ZYGOTE_ONLY_VARIABLES), or that finds no template, starts the ordinary way: the relay execs the command it was given
(DDP_LAB_FORKED_KERNELS_LOG=FILE has the template say which kernels and zygotes it forked and which not, and why).
What a notebook prints cannot depend on the template: a forked kernel has run no cell, and modules
imported before the fork are not names in the notebook (a cell that uses torch without importing it
still fails); tests/test_forked_kernels.py compares one with an ordinary kernel. Learners' kernels
(`make lab`), tests/test_browser.py's JupyterLab and `ddp_lab grade` start the ordinary way.
"""

from __future__ import annotations

import atexit
import importlib
import os
import pickle
import runpy
import select
import shlex
import signal
import socket
import struct
import subprocess
import sys
import threading

# Variables that may differ between the template's environment and a kernel's, none of them read by `import torch`:
# jupyter_client's (JPY_PARENT_PID, JPY_SESSION_NAME, ...), the terminal size nbval gives its kernels, the test pytest
# is running, the launcher's (read when a launch starts its zygote), and the cache directory torch's inductor writes
# into the environment of a process that used it (a test process, after any test that compiles or traces: in
# fresh-clone CI 45 of 52 kernels differed in it alone; inductor is not imported by `import torch`). Any other
# difference: an ordinary start.
KERNEL_ONLY_VARIABLES = ("COLUMNS", "LINES", "PYTEST_CURRENT_TEST", "DDP_LAB_ZYGOTE_IMPORTS", "DDP_LAB_ZYGOTE_RELAY",
                         "TORCHINDUCTOR_CACHE_DIR")
# A zygote's environment is its kernel's, plus the launcher's DDP_LAB_PARENT_PID (the kernel's pid), and a kernel's has
# what ipykernel sets in it for pagers, terminals, matplotlib and its debugger (no file of torch, sympy or cloudpickle
# reads any of them; a zygote never imports matplotlib). DDP_LAB_ZYGOTE_IMPORTS must name what the zygote template
# imported (zygote.import_learned): a zygote asked for other imports starts the ordinary way.
ZYGOTE_ONLY_VARIABLES = (*KERNEL_ONLY_VARIABLES, "DDP_LAB_PARENT_PID", "MPLBACKEND", "CLICOLOR", "CLICOLOR_FORCE",
                         "FORCE_COLOR", "GIT_PAGER", "PAGER", "PYDEVD_USE_FRAME_EVAL", "TERM")
ZYGOTE_MODULE = "ddp_lab.launcher.zygote"
# Imported by ipykernel and matplotlib.pyplot (kernel templates import them first: _import_for)
KERNEL_DEPENDENCIES = ("IPython", "zmq", "tornado", "jupyter_client", "traitlets", "comm", "PIL.Image", "pyparsing",
                       "dateutil", "kiwisolver", "cycler", "contourpy", "fontTools")
_LENGTH = struct.Struct("!I")
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def _send(sock: socket.socket, message, fds: tuple[int, ...] = ()) -> None:
    data = pickle.dumps(message)
    socket.send_fds(sock, [_LENGTH.pack(len(data)) + data], list(fds))


def _receive(sock: socket.socket, max_fds: int = 0):
    """One message and the fds sent with it; (None, []) once the peer has closed."""
    data, fds, _, _ = socket.recv_fds(sock, 1 << 20, max_fds)
    if not data:
        return None, fds
    (length,) = _LENGTH.unpack(data[:_LENGTH.size])
    data = data[_LENGTH.size:]
    while len(data) < length:
        more = sock.recv(length - len(data))
        if not more:
            return None, fds
        data += more
    return pickle.loads(data), fds


def _differs_at_import(template_env: dict, request_env: dict, zygote: bool) -> list[str]:
    """The variables whose difference could change what the template's imports did, for a kernel or a zygote."""
    allowed = ZYGOTE_ONLY_VARIABLES if zygote else KERNEL_ONLY_VARIABLES
    keys = set(template_env) | set(request_env)
    differs = sorted(key for key in keys if template_env.get(key) != request_env.get(key)
                     and not key.startswith("JPY_") and key not in allowed)
    if zygote and _names(template_env) != _names(request_env):
        differs.append("DDP_LAB_ZYGOTE_IMPORTS")
    return differs


def _names(env: dict) -> frozenset[str]:
    return frozenset(filter(None, env.get("DDP_LAB_ZYGOTE_IMPORTS", "").split(",")))


# ----------------------------------------------------------------------------------- the template

def _take_over(request: dict, stdin: int, stdout: int, stderr: int) -> None:
    """In the forked child: the session, standard streams, working directory, environment and signal handlers
    a fresh interpreter started with the request's would have."""
    os.setsid()
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    signal.set_wakeup_fd(-1)
    for signum in (signal.SIGCHLD, *_FORWARDED):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)   # as in a fresh interpreter


def _run_module_and_leave(module: str, arguments: list[str]) -> None:
    """Run `module` as `python -m module arguments` runs it, then leave as the interpreter would up to its teardown:
    wait for non-daemon threads, run atexit handlers, flush. The teardown itself (freeing every module's objects) is
    left out: nothing a test reads comes after it, and with torch imported it took 0.7 s of a core per kernel here
    (forked or not). Never returns."""
    sys.argv = ["-m", *arguments]   # runpy sets argv[0] to the module's file, as -m does
    sys.path[0] = os.getcwd()       # what -m puts first (ipykernel_launcher removes it)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def _become_kernel(request: dict, fds: list[int]) -> None:
    """In the forked child: the process `python -m ipykernel_launcher ...` would have been. Never returns."""
    stdin, stdout, stderr, lifeline = fds
    _take_over(request, stdin, stdout, stderr)

    def watch_relay() -> None:   # EOF: the relay is gone (killed): end this kernel and its group
        while os.read(lifeline, 1):
            pass
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch_relay, name="relay-lifeline", daemon=True).start()
    _python, _m, module, *arguments = request["argv"]
    _run_module_and_leave(module, arguments)


def _become_zygote(request: dict, fds: list[int]) -> None:
    """In the forked child: the process `python -m ddp_lab.launcher.zygote FD` would have been. Never returns.

    No thread watches the relay here (a zygote forks ranks: it must not have threads); the template kills this
    child's group when the relay's connection closes first (`serve`). The zygote dies with its parent
    (worker.die_with_parent): that is the template now, which ends with the test process.
    """
    stdin, stdout, stderr, lifeline, launcher_socket = fds
    os.close(lifeline)
    _take_over(request, stdin, stdout, stderr)
    os.environ["DDP_LAB_PARENT_PID"] = str(os.getppid())
    sys.modules.pop(ZYGOTE_MODULE, None)   # imported by the template's preload; `-m` runs a fresh copy as __main__
    _python, _m, module, *arguments = request["argv"]
    _run_module_and_leave(module, [*arguments[:-1], str(launcher_socket)])   # the socket's number in this process


def _import_for(zygote: bool) -> None:
    """What the template imports before it forks anything."""
    if zygote:
        # What a zygote imports before it is ready (zygote.main): its preload, then the LEARNED_IMPORTS its
        # environment names. They start no thread (zygote.py), so forking this process is as safe as forking a zygote.
        from ddp_lab.launcher import zygote

        zygote.preload()
        zygote.import_learned(os.environ.get("DDP_LAB_ZYGOTE_IMPORTS", ""))
    else:
        # torch, what every course notebook imports first, and what ipykernel and matplotlib.pyplot import from other
        # packages (0.5 s of a core here, half of their own import). Not ipykernel itself: its IPKernelApp reads
        # JPY_PARENT_PID when imported; not matplotlib: it reads MPLBACKEND, which ipykernel sets in its kernel. None of
        # these reads a variable the kernels' environments may add (KERNEL_ONLY_VARIABLES, JPY_*) when imported, and
        # none starts a thread (checked on this machine's versions). One that is not installed is left to the kernel.
        import torch  # noqa: F401

        for name in KERNEL_DEPENDENCIES:
            try:
                importlib.import_module(name)
            except ImportError:
                pass


def serve(path: str, zygote: bool) -> None:
    """The template: listen, import, then fork a kernel (or a zygote) for every relay that connects; exit when stdin
    closes. It listens before it imports, so a relay that connects meanwhile waits for the import, not for nothing."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)
    listener.bind(path)
    listener.listen(16)
    print("listening", flush=True)
    _import_for(zygote)
    wakeup_r, wakeup_w = os.pipe()
    os.set_blocking(wakeup_w, False)
    signal.set_wakeup_fd(wakeup_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    relays: dict[int, socket.socket] = {}   # forked child's pid -> its relay's connection, until either ends
    while True:
        readable, _, _ = select.select([listener, wakeup_r, sys.stdin, *relays.values()], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1 << 10):
            return   # the test process is gone: its kernels' relays (its children) end them
        if wakeup_r in readable:
            os.read(wakeup_r, 1 << 10)
        for pid, relay in list(relays.items()):   # a relay that closed first was killed: end what it stood for
            if relay in readable and not _receive_nothing(relay):
                _kill_group(pid)
                relay.close()
                del relays[pid]
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if not pid:
                break
            relay = relays.pop(pid, None)
            if relay is not None:
                try:
                    _send(relay, ("exited", status))
                except OSError:
                    pass
                relay.close()
        if listener in readable:
            relay, _ = listener.accept()
            try:
                request, fds = _receive(relay, max_fds=5)
            except OSError:   # the relay died while connecting (killed): nothing to start
                relay.close()
                continue
            if request is None or len(fds) != (5 if zygote else 4):
                for fd in fds:
                    os.close(fd)
                relay.close()
                continue
            differs = _differs_at_import(dict(os.environ), request["env"], zygote)
            if os.environ.get("DDP_LAB_FORKED_KERNELS_LOG"):   # for maintainers: what was forked, what not
                with open(os.environ["DDP_LAB_FORKED_KERNELS_LOG"], "a") as log:
                    print(os.getpid(), "zygote" if zygote else "kernel",
                          "ordinary start, differs in:" if differs else "forked", *differs, file=log)
            if differs:
                try:
                    _send(relay, ("exec", differs))
                except OSError:
                    pass
                relay.close()
            else:
                pid = os.fork()
                if pid == 0:
                    for sock in (listener, relay, *relays.values()):
                        sock.close()
                    os.close(wakeup_r)
                    os.close(wakeup_w)
                    (_become_zygote if zygote else _become_kernel)(request, fds)
                relays[pid] = relay
                try:
                    _send(relay, ("started", pid))
                except OSError:   # the relay died meanwhile: its connection's EOF ends the child
                    pass
            for fd in fds:
                os.close(fd)


def _receive_nothing(relay: socket.socket) -> bool:
    """False when the relay's connection has closed (a relay sends nothing after its request)."""
    try:
        return bool(relay.recv(1))
    except OSError:
        return False


def _kill_group(pid: int) -> None:
    """SIGKILL the group of a forked child the template has not reaped yet (so the pid is still its child's)."""
    for kill in (os.kill, os.killpg):   # the pid too: a child killed before its setsid leads no group yet
        try:
            kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# -------------------------------------------------------------------------------------- the relay

def relay(path: str, argv: list[str]) -> None:
    """Have the template fork the kernel (or zygote) `argv` describes, and stand for it until it exits."""
    fds = [0, 1, 2]
    if argv[1:3] == ["-m", ZYGOTE_MODULE]:   # started by a kernel's launcher, as zygote_client.Zygote.start says
        # dies with the launcher that started it, as the zygote itself would; the template then ends the zygote
        from ddp_lab.launcher.worker import die_with_parent   # lazy: only a zygote's relay (no torch: worker.py)

        die_with_parent(int(os.environ["DDP_LAB_PARENT_PID"]))
        fds.append(int(argv[-1]))   # the launcher's socket, passed to the zygote by its number
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lifeline_r, lifeline_w = os.pipe()
    try:
        sock.connect(path)
        _send(sock, {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}, (*fds[:3], lifeline_r, *fds[3:]))
        os.close(lifeline_r)
        reply, _ = _receive(sock)
    except OSError:
        reply = None
    if reply is None or reply[0] != "started":   # no template, or an environment it cannot serve
        os.execv(sys.executable, [sys.executable, *argv[1:]])
    kernel = reply[1]
    for fd in fds[3:]:   # the launcher's socket is the zygote's now: the launcher must see EOF when the zygote ends
        os.close(fd)

    def forward(signum, _frame) -> None:
        try:
            os.killpg(kernel, signum)
        except ProcessLookupError:
            pass

    for signum in _FORWARDED:
        signal.signal(signum, forward)
    while True:
        try:
            message, _ = _receive(sock)
            break
        except InterruptedError:
            continue
    status = message[1] if message else 1 << 8   # the template died: report a failure
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    sys.exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)   # lifeline_w closes only now


# ------------------------------------------------------------------------ used by conftest.py

class Template:
    """A template process of one test process: for kernels, or for the zygotes of its notebooks' kernels.
    Started with the first kernel (zygote) it serves."""

    def __init__(self, directory: str, env: dict | None = None, zygote: bool = False) -> None:
        self.zygote = zygote
        self.path = os.path.join(directory, "zygote-template.sock" if zygote else "kernel-template.sock")
        self.env = dict(os.environ if env is None else env)   # the template's: as the test process had it here
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        """Start the template and wait until it listens (no-op if started); relays that connect before it has imported
        wait for the import. It starts with the environment the Template was made with, not the one of the test that
        happens to start the first kernel (a test's monkeypatched variable would make every later kernel differ from
        the template and start the ordinary way)."""
        if self.process is None:
            command = [sys.executable, __file__, "--template", self.path] + (["--zygote"] if self.zygote else [])
            self.process = subprocess.Popen(command, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            start_new_session=True)
            self.process.stdout.readline()   # "listening" (or EOF if it failed: relays then exec their commands)

    def kernel_command(self, cmd: list[str]) -> list[str]:
        """The relay's command for jupyter_client's `cmd`, or `cmd` itself where it is not this Python's
        `-m ipykernel_launcher` (another kernel, another Python)."""
        if len(cmd) < 3 or cmd[1:3] != ["-m", "ipykernel_launcher"] or \
                os.path.realpath(cmd[0]) != os.path.realpath(sys.executable):
            return cmd
        self.start()
        return [sys.executable, __file__, self.path, *cmd[1:]]

    def zygote_relay(self) -> str:
        """DDP_LAB_ZYGOTE_RELAY for a kernel whose zygotes this template forks (zygote_client.zygote_python)."""
        self.start()
        return shlex.join([sys.executable, __file__, self.path])

    def close(self) -> None:
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait(timeout=10)
            self.process = None


def from_a_template(cmdline: list[str]) -> bool:
    """Whether a process with this command line is a template or a kernel it forked (they share the command line)."""
    return "--template" in cmdline and any(arg.endswith("forked_kernels.py") for arg in cmdline)


def install(directory: str) -> Template:
    """Start the kernels jupyter_client starts in this process through a template in `directory` (conftest.py).
    The ordinary launch stays reachable as `launch_kernel.ordinary`."""
    from jupyter_client.provisioning import local_provisioner   # lazy: only a test process that starts kernels

    template = Template(directory)
    ordinary = local_provisioner.launch_kernel

    def launch_forked_kernel(cmd, **kwargs):
        return ordinary(template.kernel_command(cmd), **kwargs)

    launch_forked_kernel.ordinary = ordinary
    local_provisioner.launch_kernel = launch_forked_kernel
    return template


if __name__ == "__main__":
    if sys.argv[1] == "--template":
        serve(sys.argv[2], zygote="--zygote" in sys.argv[3:])
    else:
        relay(sys.argv[1], [sys.executable, *sys.argv[2:]])

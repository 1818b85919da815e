"""Notebook kernels for the test suite, forked from a process that has already imported torch.

Every notebook nbval checks and every exercise tests/test_exercises.py executes runs in a fresh
kernel, and every kernel's first cell imports torch: about 3 s of a core on the 2-core CI machine,
and some 50 kernels in `make test` (a sampler of /proc over a whole fresh-clone run, 2026-11-27:
kernels used 250 s of the run's 1250 s of CPU). conftest.py starts those kernels through this module:

- a *template*, one per test process, started with its first kernel: a Python that imports torch
  and runs nothing else, no tensor op and no thread, so forking it is safe (the reason ddp_lab's
  zygote can fork ranks: ddp_lab/launcher/zygote.py);
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

A kernel whose environment differs from the template's in anything but KERNEL_ONLY_VARIABLES, or
that finds no template, starts the ordinary way: the relay execs the command it was given
(DDP_LAB_FORKED_KERNELS_LOG=FILE has the template say which kernels it forked and which not, and why).
What a notebook prints cannot depend on the template: a forked kernel has run no cell, and modules
imported before the fork are not names in the notebook (a cell that uses torch without importing it
still fails); tests/test_forked_kernels.py compares one with an ordinary kernel. Learners' kernels
(`make lab`), tests/test_browser.py's JupyterLab and `ddp_lab grade` start the ordinary way.
"""

from __future__ import annotations

import atexit
import os
import pickle
import runpy
import select
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
KERNEL_ONLY_VARIABLES = ("COLUMNS", "LINES", "PYTEST_CURRENT_TEST", "DDP_LAB_ZYGOTE_IMPORTS", "TORCHINDUCTOR_CACHE_DIR")
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


def _differs_at_import(template_env: dict, kernel_env: dict) -> list[str]:
    """The variables whose difference could change what the kernel's imports did."""
    keys = set(template_env) | set(kernel_env)
    return sorted(key for key in keys if template_env.get(key) != kernel_env.get(key)
                  and not key.startswith("JPY_") and key not in KERNEL_ONLY_VARIABLES)


# ----------------------------------------------------------------------------------- the template

def _become_kernel(request: dict, fds: list[int]) -> None:
    """In the forked child: the process `python -m ipykernel_launcher ...` would have been. Never returns."""
    stdin, stdout, stderr, lifeline = fds
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

    def watch_relay() -> None:   # EOF: the relay is gone (killed): end this kernel and its group
        while os.read(lifeline, 1):
            pass
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch_relay, name="relay-lifeline", daemon=True).start()
    _python, _m, module, *arguments = request["argv"]
    sys.argv = ["-m", *arguments]   # runpy sets argv[0] to the module's file, as -m does
    sys.path[0] = os.getcwd()       # what -m puts first; ipykernel_launcher removes it
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    # The interpreter's exit up to its teardown: wait for non-daemon threads, run atexit handlers, flush.
    # The teardown itself (freeing every module's objects) is left out: nothing a test reads comes after it, and
    # with torch imported it took 0.7 s of a core per kernel here (forked or not).
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def serve(path: str) -> None:
    """The template: import, then fork a kernel for every relay that connects; exit when stdin closes."""
    # torch only: what every course notebook imports first, and reads no variable a kernel's environment adds. Not
    # ipykernel (0.5 s): its IPKernelApp reads JPY_PARENT_PID when imported, so it is imported by the kernel.
    import torch  # noqa: F401

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)
    listener.bind(path)
    listener.listen(8)
    wakeup_r, wakeup_w = os.pipe()
    os.set_blocking(wakeup_w, False)
    signal.set_wakeup_fd(wakeup_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    relays: dict[int, socket.socket] = {}   # kernel pid -> its relay's connection
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([listener, wakeup_r, sys.stdin], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1 << 10):
            return   # the test process is gone: its kernels' relays (its children) end them
        if wakeup_r in readable:
            os.read(wakeup_r, 1 << 10)
        while relays:
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
                request, fds = _receive(relay, max_fds=4)
            except OSError:   # the relay died while connecting (killed): nothing to start
                relay.close()
                continue
            if request is None or len(fds) != 4:
                for fd in fds:
                    os.close(fd)
                relay.close()
                continue
            differs = _differs_at_import(dict(os.environ), request["env"])
            if os.environ.get("DDP_LAB_FORKED_KERNELS_LOG"):   # for maintainers: which kernels forked, which did not
                with open(os.environ["DDP_LAB_FORKED_KERNELS_LOG"], "a") as log:
                    print(os.getpid(), "ordinary start, differs in:" if differs else "forked", *differs, file=log)
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
                    _become_kernel(request, fds)
                relays[pid] = relay
                try:
                    _send(relay, ("started", pid))
                except OSError:   # the relay died meanwhile: the kernel's lifeline ends it
                    pass
            for fd in fds:
                os.close(fd)


# -------------------------------------------------------------------------------------- the relay

def relay(path: str, argv: list[str]) -> None:
    """Have the template fork the kernel `argv` describes, and stand for it until it exits."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lifeline_r, lifeline_w = os.pipe()
    try:
        sock.connect(path)
        _send(sock, {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}, (0, 1, 2, lifeline_r))
        os.close(lifeline_r)
        reply, _ = _receive(sock)
    except OSError:
        reply = None
    if reply is None or reply[0] != "started":   # no template, or an environment it cannot serve
        os.execv(sys.executable, [sys.executable, *argv[1:]])
    kernel = reply[1]

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
    """The template process of one test process, started with the first kernel it serves."""

    def __init__(self, directory: str, env: dict | None = None) -> None:
        self.path = os.path.join(directory, "kernel-template.sock")
        self.env = dict(os.environ if env is None else env)   # the template's: as the test process had it here
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        """Start the template and wait until it has imported (no-op if started). It starts with the environment the
        Template was made with, not the one of the test that happens to start the first kernel (a test's
        monkeypatched variable would make every later kernel differ from the template and start the ordinary way)."""
        if self.process is None:
            self.process = subprocess.Popen([sys.executable, __file__, "--template", self.path], env=self.env,
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
            self.process.stdout.readline()   # "ready" (or EOF if it failed: relays then exec their kernels)

    def kernel_command(self, cmd: list[str]) -> list[str]:
        """The relay's command for jupyter_client's `cmd`, or `cmd` itself where it is not this Python's
        `-m ipykernel_launcher` (another kernel, another Python)."""
        if len(cmd) < 3 or cmd[1:3] != ["-m", "ipykernel_launcher"] or \
                os.path.realpath(cmd[0]) != os.path.realpath(sys.executable):
            return cmd
        self.start()
        return [sys.executable, __file__, self.path, *cmd[1:]]

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
        serve(sys.argv[2])
    else:
        relay(sys.argv[1], [sys.executable, *sys.argv[2:]])

"""What runs inside each rank: receive `fn`, set up the process group, call `fn(rank, *args)`.

A rank reports exactly once over its control channel (its return value, or what went
wrong), flushes its output, then waits for the launcher's release and leaves with
`os._exit`: no interpreter teardown, no `destroy_process_group()`, no C++ static
destructors racing gloo's threads. That is what made ranks abort with SIGABRT
("terminate called without an active exception") after DDP training in 10-30% of runs.
For the same reason a process group that fn destroys is kept until then (keepalive.py).

Run as `python -m ddp_lab.launcher.worker` (cold start) or called in a process forked from the
zygote (warm start). Rank identity comes from the environment, exactly as torchrun sets it.
"""

from __future__ import annotations

import ctypes
import datetime
import faulthandler
import os
import pickle
import signal
import socket
import sys
import traceback

from ddp_lab.launcher.channel import STACK_SIGNAL, send_message
from ddp_lab.launcher.workdir import open_private

_channel: socket.socket | None = None


def control_channel() -> socket.socket:
    """This rank's channel to the launcher (used by the live cluster's command loop)."""
    if _channel is None:
        raise RuntimeError("not running inside a ddp_lab rank")
    return _channel
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when the launcher dies (no orphans)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the control channel's EOF still ends us
        pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def flush_all_output() -> None:
    """Flush Python's and C's stdio buffers, so nothing printed is lost at os._exit."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


def _line_buffer_c_stdout() -> None:
    """C code's printf goes to a pipe here: make it line-buffered so it arrives promptly."""
    try:
        libc = ctypes.CDLL(None)
        stdout = ctypes.c_void_p.in_dll(libc, "stdout")
        libc.setvbuf(stdout, None, 1, 0)  # _IOLBF
    except (OSError, ValueError, AttributeError):
        pass


_ORDER_WAIT_S = 2.0   # longest wait for the launcher to read a pipe before writing to the other


def keep_output_in_order(streams=None) -> None:
    """Make what this rank's Python code writes to sys.stdout and sys.stderr reach the notebook in the order written.

    The two are separate pipes, read by one launcher thread that hands on what it read from one before it looks at
    the other again (output.read_streams). So the first write to one stream after writes to the other flushes the
    other and waits until its pipe is empty, that is read: `print(...)` then `warnings.warn(...)` then `print(...)`
    show in that order, as in a kernel, not both prints first. A wait lasts at most _ORDER_WAIT_S; after one timed
    out (the launcher busy), switches do not wait until one finds the other pipe already read, and meanwhile the
    order is the pipes' own. Whole lines keep their order: a line not yet ended ('\\n') reaches the notebook when
    it ends, after lines the other stream finished meanwhile. C code writing to fd 1 and 2 directly is not
    affected. `streams`: (stdout, stderr) objects to change, sys's by default.
    Introduced with the launcher in notebooks/00-welcome-and-first-launch.ipynb.
    """
    state = {"last": None, "waiting": True}

    def write_in_order(stream, write):
        def write_after_the_other(text):
            last = state["last"]
            if last is not stream:
                if last is not None:
                    state["waiting"] = _flushed_and_read(last, _ORDER_WAIT_S if state["waiting"] else 0.0)
                state["last"] = stream
            return write(text)
        return write_after_the_other

    for stream in streams or (sys.stdout, sys.stderr):
        try:
            stream.write = write_in_order(stream, stream.write)
        except AttributeError:   # a stream without an instance __dict__: its writes keep the pipes' order
            pass


def _flushed_and_read(stream, wait: float) -> bool:
    """Flush `stream` and wait until the pipe under it is empty; False if that took longer than `wait` seconds."""
    import fcntl   # lazy: worker.py is the first module a rank imports
    import termios
    import time

    try:
        stream.flush()
        fd = stream.fileno()
        deadline = time.monotonic() + wait
        pause = 0.00005
        while int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, bytes(4)), sys.byteorder) > 0:
            if time.monotonic() > deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.005)
    except (OSError, ValueError, AttributeError):   # not a pipe, closed, or no fileno: nothing to wait for
        pass
    return True


def _format_traceback(error: BaseException, skip_frames: int) -> str:
    tb = error.__traceback__
    for _ in range(skip_frames):
        tb = tb.tb_next if tb is not None else None
    return "".join(traceback.format_exception(type(error), error, tb))


def _message(error: BaseException) -> str:
    """str(error), or a note saying why it could not be had: an exception's own __str__ may raise."""
    try:
        return str(error)
    except Exception as broken:  # noqa: BLE001 - any failure of user code here must not lose the report
        try:
            why = f"{type(broken).__name__}: {broken}"
        except Exception:  # noqa: BLE001 - its own message is broken too
            why = type(broken).__name__
        return f"(its message could not be printed: {why})"


def exception_report(error: BaseException, phase: str, skip_frames: int) -> dict:
    from ddp_lab.launcher.payload import dumps  # lazy: worker.py is the first module a rank imports; payload and rendezvous follow when fn arrives

    try:
        exception = dumps(error)
    except Exception:
        exception = None
    return {
        "kind": "raised",
        "phase": phase,
        "type": type(error).__name__,
        "text": _message(error),
        "traceback": _format_traceback(error, skip_frames),
        "exception": exception,
    }


def _load_payload(path: str):
    from ddp_lab.launcher.payload import unpack  # lazy: worker.py is the first module a rank imports; payload and rendezvous follow when fn arrives
    from ddp_lab.launcher.rendezvous import route_init_process_group  # lazy: worker.py is the first module a rank imports; payload and rendezvous follow when fn arrives

    with open(path, "rb") as file:
        payload = pickle.load(file)
    # Before fn is unpickled, so that every init_process_group fn reaches is routed.
    route_init_process_group()
    return (payload, *unpack(payload, replace_sys_path=True))


def _init_process_group(payload: dict) -> None:
    backend = payload["backend"]
    if not backend:
        return

    import torch  # lazy: a rank imports torch only once it runs (the zygote before forking); the notebook side stays torch-free
    import torch.distributed as dist  # lazy: a rank imports torch only once it runs (the zygote before forking); the notebook side stays torch-free

    from ddp_lab.launcher.rendezvous import mark_set_up_by  # lazy: worker.py is the first module a rank imports; payload and rendezvous follow when fn arrives

    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    timeout = datetime.timedelta(seconds=payload["pg_timeout"])
    dist.init_process_group(backend, timeout=timeout)
    mark_set_up_by("launch")  # so that fn initialising it again is told the fix
    _wait_for_all_ranks(timeout)


def _wait_for_all_ranks(timeout) -> None:
    """Start fn only when every rank has finished init_process_group.

    Without this, a rank that fails at once (say os._exit) can break a peer that is still
    connecting, and the peer's error hides the real one.
    """
    from ddp_lab.launcher.rendezvous import own_store  # lazy: worker.py is the first module a rank imports; payload and rendezvous follow when fn arrives

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = own_store(timeout)  # the connection init_process_group opened: a new one costs a DNS lookup
    store.set(f"ddp_lab/ready/{rank}", "1")
    store.wait([f"ddp_lab/ready/{r}" for r in range(world_size)])


def _set_threads(payload: dict) -> None:
    if payload["threads"]:
        import torch  # lazy: a rank imports torch only once it runs (the zygote before forking); the notebook side stays torch-free

        torch.set_num_threads(payload["threads"])


def _report_result(channel: socket.socket, value) -> bool:
    from ddp_lab.launcher.payload import dumps  # lazy: worker.py is the first module a rank imports; payload and rendezvous follow when fn arrives

    try:
        data = dumps(value)
    except Exception as error:
        send_message(channel, {
            "kind": "unpicklable",
            "type": type(value).__name__,
            "text": f"{type(error).__name__}: {error}",
        })
        return False
    send_message(channel, {"kind": "returned", "value": data})
    return True


# A rank forked by the zygote: (the zygote's pipe, the zygote.LEARNED_IMPORTS it lacked at the fork).
# The rank writes there which of those it imported, so the zygote imports them for later launches.
report_imports_to: tuple[int, tuple[str, ...]] | None = None


def _report_learned_imports() -> None:
    if report_imports_to is None:
        return
    fd, watched = report_imports_to
    imported = [name for name in watched if name in sys.modules]
    if imported:
        try:
            os.write(fd, ("\n".join(imported) + "\n").encode())   # < PIPE_BUF: one atomic write
        except OSError:   # the pipe is full or the zygote is gone: the next rank imports them itself
            pass


def run_rank(control_fd: int, payload_path: str, stacks_path: str) -> None:
    """Run one rank to completion and leave with os._exit (never returns)."""
    global _channel
    channel = _channel = socket.socket(fileno=control_fd)
    stacks = open(stacks_path, "a", opener=open_private)  # kept open: faulthandler writes to it at the watchdog
    faulthandler.register(STACK_SIGNAL, file=stacks, all_threads=True)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    _line_buffer_c_stdout()
    keep_output_in_order()

    ok = False
    phase = "unpickle"
    try:
        payload, fn, args = _load_payload(payload_path)
        phase = "setup"
        _set_threads(payload)
        _init_process_group(payload)
        phase = "fn"
        send_message(channel, {"kind": "ready"})  # the watchdog's clock starts now
        value = fn(int(os.environ["RANK"]), *args)
    except BaseException as error:  # noqa: BLE001 - every failure is reported, KeyboardInterrupt too
        # sys.exit(0) included: a rank that exits returns no result, and its peers may wait for
        # it in a collective; reported at once, the launcher stops them (as mp.spawn ends a job)
        _report_learned_imports()
        send_message(channel, exception_report(error, phase, skip_frames=1 if phase == "fn" else 0))
    else:
        _report_learned_imports()   # before the result: the zygote has read it before the launch returns
        ok = _report_result(channel, value)
    flush_all_output()
    try:
        channel.recv(1)  # RELEASE once every rank reported, or EOF if the launcher went away
    except OSError:
        pass
    flush_all_output()
    os._exit(0 if ok else 1)


def main() -> None:
    die_with_parent(int(os.environ["DDP_LAB_PARENT_PID"]))
    control_fd, payload_path, stacks_path = sys.argv[1:4]
    run_rank(int(control_fd), payload_path, stacks_path)


if __name__ == "__main__":
    # Run the copy imported as ddp_lab.launcher.worker, not this __main__ one, so that code in the
    # rank (the live cluster's loop) finds the control channel at ddp_lab.launcher.worker.
    from ddp_lab.launcher import worker

    worker.main()

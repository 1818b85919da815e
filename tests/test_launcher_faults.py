"""Faults of the launcher itself: output, the zygote, the stop button, early exits.

Like tests/test_faults.py, on real ranks and real processes: a rank's leftover child that
keeps writing, a single line of tens of megabytes, a zygote stopped (SIGSTOP) or killed,
the stop button pressed again while the ranks are slow to die, a rank that calls
sys.exit(0) while its peer waits in a collective.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import cloudpickle
import psutil
import pytest
import torch
import torch.distributed as dist

import ddp_lab
from ddp_lab.launcher import procstart, supervisor, workdir, zygote_client
from ddp_lab.launcher.output import read_lines
from rank_procs import assert_no_ranks_left, start_launching_script

cloudpickle.register_pickle_by_value(sys.modules[__name__])
LOOPBACK = "127.0.0.1"


def warm_zygote() -> int:
    """Make sure this process has a ready zygote; its pid."""
    procstart.prepare_zygote()
    zygote = procstart.settled_zygote()   # not one a successor replaces at the next launch
    assert zygote is not None, "the zygote did not start"
    return zygote.popen.pid


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# --- output: a child left writing, a child in its own session, one huge line ------------------

# 4 s of output; after its first line it creates the file named by its $0, so the rank knows it has written one
TICKER = 'for i in $(seq 40); do echo tick $i; [ "$i" = 1 ] && : > "$0"; sleep 0.1; done'


def leaves_a_ticker(rank, pid_file, own_session):
    """Rank 0 starts a child that writes to its stdout for 4 s; returns when the child started writing (monotonic
    clock, the same in every process), None on rank 1."""
    ticking = None
    if rank == 0:
        ticked = f"{pid_file}.ticked"
        child = subprocess.Popen(["sh", "-c", TICKER, ticked], start_new_session=own_session)
        Path(pid_file).write_text(str(child.pid))
        deadline = time.monotonic() + 30
        while not os.path.exists(ticked) and time.monotonic() < deadline:   # under load sh may start late
            time.sleep(0.01)
        ticking = time.monotonic()
        os.unlink(ticked)
        time.sleep(0.25)  # a few ticks while the rank runs
    return ticking


def prints_twenty_lines(rank):
    for i in range(20):
        print(f"line {i} of rank {rank}", flush=True)
        time.sleep(0.05)  # spread over 1 s, while a leftover ticker would still write
    return rank


def expected_lines(rank: int) -> str:
    return "".join(f"line {i} of rank {rank}\n" for i in range(20))


def test_a_child_left_writing_is_ended_with_its_rank():
    """The leftover `sh` dies at its rank's end; the next launch gets all its own lines, no ticks.

    Before the fix the old reader thread read the next launch's pipe (same fd number): rank 0
    lost 19-20 of 20 lines in 4 of 6 trials. Two launches here make a pass by luck unlikely;
    about 5 s, most of it the process's first launch waiting for its zygote.
    """
    pid_file = Path(os.environ.get("TMPDIR", "/tmp"), f"ddp_lab-ticker-{os.getpid()}")
    first = ddp_lab.launch(leaves_a_ticker, args=(str(pid_file), False), nprocs=2, backend="gloo", timeout=60)
    ticker = int(pid_file.read_text())
    pid_file.unlink()
    assert "tick 1\n" in first.outputs[0]  # what it wrote while the rank ran is kept
    # the rank's session got SIGKILL before its exit was reported (rankprocess.end_session), but a killed process
    # dies only when next scheduled, which under load can come after launch returned; 1 s is well inside the
    # ticker's own 4 s, so a ticker nobody killed still fails
    deadline = time.monotonic() + 1.0
    while not gone(ticker) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert gone(ticker), "the rank's leftover child outlived it"
    for _ in range(2):
        results = ddp_lab.launch(prints_twenty_lines, nprocs=2, backend="gloo", timeout=60)
        assert results.outputs == [expected_lines(0), expected_lines(1)]
    assert_no_ranks_left()


def test_a_child_in_its_own_session_is_cut_off_and_said_so():
    """A child that left the rank's session cannot be ended with it: its output stops at the rank's end."""
    pid_file = Path(os.environ.get("TMPDIR", "/tmp"), f"ddp_lab-ticker-{os.getpid()}")
    try:
        first = ddp_lab.launch(leaves_a_ticker, args=(str(pid_file), True), nprocs=2, backend="gloo", timeout=60)
        seconds = time.monotonic() - first[0]   # from when the child started writing: not the launch's start-up
        assert first.outputs[0].endswith(supervisor.CUT_OFF)
        assert first.outputs[0].count("ddp_lab: output cut off") == 1
        assert seconds < 3, f"the launch waited {seconds:.1f} s for the child"  # the child writes for 4 s
        results = ddp_lab.launch(prints_twenty_lines, nprocs=2, backend="gloo", timeout=60)
        assert results.outputs == [expected_lines(0), expected_lines(1)]
    finally:
        if pid_file.exists():
            ticker = int(pid_file.read_text())
            pid_file.unlink()
            if not gone(ticker):
                os.kill(ticker, signal.SIGKILL)
    assert_no_ranks_left()


def reader_cpu_seconds(size: int) -> float:
    """CPU time of read_lines for one line of `size` bytes written into a real pipe."""
    read_end, write_end = os.pipe()

    def write():
        block = b"x" * (1 << 16)
        for _ in range(size // len(block)):
            os.write(write_end, block)
        os.write(write_end, b"\n")
        os.close(write_end)

    lines = []
    writer = threading.Thread(target=write)
    writer.start()
    started = time.thread_time()
    read_lines(read_end, lines.append)
    seconds = time.thread_time() - started
    writer.join()
    os.close(read_end)
    assert [len(line) for line in lines] == [size + 1]
    return seconds


def test_reading_output_is_linear_in_its_size():
    """8 MB vs 32 MB in one line: 4 times the bytes must cost about 4 times the time, not 16.

    Before the fix: 0.9 s and 23 s of reader CPU (each 64 KiB chunk re-joined and re-split the line).
    """
    small, large = reader_cpu_seconds(8 << 20), reader_cpu_seconds(32 << 20)
    print(f"reader CPU: 8 MB {small:.3f} s, 32 MB {large:.3f} s")
    assert large < 8 * small + 0.25, f"8 MB: {small:.2f} s, 32 MB: {large:.2f} s: not linear"
    assert large < 2.0


# --- a rank exits early ---------------------------------------------------------------------

def exits_early_on_rank_1(rank, how):
    print(f"rank {rank}: before the exit", flush=True)
    if rank == 1:
        sys.exit(0) if how == "sys.exit" else os._exit(0)
    dist.barrier()  # rank 0 waits here for rank 1
    return rank


@pytest.mark.parametrize("how, summary", [
    ("sys.exit", "--- rank 1 called sys.exit(0)"),
    ("os._exit", "--- rank 1 died with exit code 0 before returning: os._exit()"),
])
def test_an_early_exit_with_code_0_stops_the_peers_at_once(how, summary):
    """mp.spawn fails 3.1 s after such an exit; before the fix sys.exit(0) waited for the watchdog."""
    started = time.monotonic()
    with pytest.raises(ddp_lab.LaunchError) as caught:
        ddp_lab.launch(exits_early_on_rank_1, args=(how,), nprocs=2, backend="gloo", timeout=30)
    seconds = time.monotonic() - started
    message = str(caught.value)
    assert caught.value.first_rank == 1, message
    assert f"{summary}" in message
    # rank 0 is stopped by ddp_lab, or (os._exit closes rank 1's sockets) fails at once in the barrier
    assert ("--- rank 0: stopped by ddp_lab after rank 1 failed ---" in message
            or "rank(s) 0 lost a partner in a collective" in message), message
    assert seconds < 10, f"{seconds:.1f} s"
    assert_no_ranks_left()


# --- the zygote stalls or dies ------------------------------------------------------------------

def total(rank):
    value = torch.tensor([rank + 1.0])
    dist.all_reduce(value)
    return int(value.item())


def test_a_stalled_zygote_is_retired_and_replaced(monkeypatch):
    """SIGSTOP the zygote: the launch gives it one FORK_WAIT_S, ends it and starts cold; later launches are warm.

    Before the fix: 10 s per rank, then the late reply killed the zygote's listener thread and every
    later launch of the kernel failed.
    """
    monkeypatch.setattr(zygote_client, "FORK_WAIT_S", 1.0, raising=False)
    stalled = warm_zygote()
    os.kill(stalled, signal.SIGSTOP)
    try:
        started = time.monotonic()
        results = ddp_lab.launch(total, nprocs=2, backend="gloo", timeout=60)
        seconds = time.monotonic() - started
    finally:
        if not gone(stalled):
            os.kill(stalled, signal.SIGCONT)
    assert list(results) == [3, 3] and results.started == ["cold", "cold"]
    assert seconds < 1.0 + 15, f"{seconds:.1f} s"  # one FORK_WAIT_S, then a cold start
    assert gone(stalled), "the stalled zygote was not ended"
    for _ in range(2):
        results = ddp_lab.launch(total, nprocs=2, backend="gloo", timeout=60)
        assert list(results) == [3, 3] and results.started == ["warm", "warm"]
    assert_no_ranks_left()


def waits_for_the_zygote_to_die(rank, marker_dir):
    print(f"rank {rank}: before the fault", flush=True)
    Path(marker_dir, f"ready-{rank}").touch()
    time.sleep(60)  # killed with the zygote long before this ends


def test_a_dead_zygote_is_named_and_replaced(tmp_path):
    """Kill the zygote mid-launch: its ranks die with it, the error names it, the next launches work."""
    zygote = warm_zygote()

    def kill_zygote():
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("ready-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(zygote, signal.SIGKILL)

    killer = threading.Thread(target=kill_zygote, daemon=True)
    killer.start()
    with pytest.raises(ddp_lab.RankCrashed) as caught:
        ddp_lab.launch(waits_for_the_zygote_to_die, args=(str(tmp_path),), nprocs=2, backend="gloo", timeout=60)
    killer.join(5)
    message = str(caught.value)
    assert message.startswith(f"the zygote (warm start process, pid {zygote}) died: signal SIGKILL (9), and "
                              "the rank(s) forked from it died with it: run the cell again"), message
    assert "out-of-memory" not in message
    assert "rank 0: before the fault" in caught.value.outputs[0]
    for _ in range(2):  # the failed launch started a new zygote
        results = ddp_lab.launch(total, nprocs=2, backend="gloo", timeout=60)
        assert list(results) == [3, 3] and results.started == ["warm", "warm"]
    assert_no_ranks_left()


def test_a_zygote_started_in_a_thread_outlives_the_thread():
    """The zygote is started from ddp_lab's long-lived starter thread, not by the launching thread.

    Before: a zygote ready before its launching thread ended died with it (PR_SET_PDEATHSIG follows
    the thread), and the next launch started cold.
    """
    procstart.shutdown_zygote()

    def a_thread_that_launched():
        procstart.prepare_zygote()  # what the thread's first launch does at its end
        assert procstart.ready_zygote() is not None

    launcher = threading.Thread(target=a_thread_that_launched)
    launcher.start()
    launcher.join()
    zygote = procstart._zygote.popen.pid
    time.sleep(0.3)  # the thread's end, and a death signal it would send, take effect
    results = ddp_lab.launch(total, nprocs=2, backend="gloo", timeout=60)
    assert list(results) == [3, 3] and results.started == ["warm", "warm"]
    assert not gone(zygote) and procstart._zygote.popen.pid == zygote
    assert_no_ranks_left()


# --- work folders: private, and removed when their kernel was killed ---------------------------

SLEEPING_KERNEL = ("import time, ddp_lab\n"  # no process group: the kernel makes its work folder before it imports torch
                   "ddp_lab.launch(lambda rank: time.sleep(60), nprocs=1, timeout=None, init_process_group=False)\n")


def start_kernels_with_work_folders(temp_dir: Path, count: int) -> list[tuple[subprocess.Popen, Path]]:
    """`count` kernels (scripts) whose launches keep their ranks running, each with its work folder once made.

    A kernel's folder is the one whose owner.lock it holds open (psutil reads /proc/<pid>/fd).
    """
    env = {**os.environ, "TMPDIR": str(temp_dir)}
    kernels = [subprocess.Popen([sys.executable, "-c", SLEEPING_KERNEL], env=env) for _ in range(count)]
    folders: dict[int, Path] = {}
    deadline = time.monotonic() + 60
    while len(folders) < count and time.monotonic() < deadline and all(k.poll() is None for k in kernels):
        for kernel in kernels:
            locks = [Path(f.path) for f in psutil.Process(kernel.pid).open_files()
                     if Path(f.path).name == workdir.LOCK_NAME]
            if locks:
                folders[kernel.pid] = locks[0].parent
        time.sleep(0.02)
    if len(folders) < count:
        for kernel in kernels:
            kernel.kill()
        raise AssertionError(f"no locked work folder for every kernel in {temp_dir}: "
                             f"{list(temp_dir.iterdir())}")
    return [(kernel, folders[kernel.pid]) for kernel in kernels]


def mode(path: Path) -> str:
    return oct(path.stat().st_mode & 0o777)


def test_a_killed_kernels_work_folder_is_removed_by_the_next_launch_and_a_live_ones_kept(tmp_path, monkeypatch):
    """Kill a kernel mid-launch: its ddp_lab-XXXX/ (the cell's code in payload.pkl) stays, until the next
    kernel's first launch removes it; the folder of a kernel still running is kept. Files are 0600.

    Without that: the folder stayed for good, payload.pkl 0644. The first launch of the test
    process is played by resetting workdir._cleaned; both kernels are real processes.
    """
    temp_dir = tmp_path / "tmp"
    temp_dir.mkdir()
    (killed, killed_folder), (alive, alive_folder) = start_kernels_with_work_folders(temp_dir, 2)
    try:
        killed.kill()  # SIGKILL: no clean-up runs; its rank dies with it (PR_SET_PDEATHSIG)
        killed.wait()
        assert killed_folder.exists()
        monkeypatch.setattr(tempfile, "tempdir", str(temp_dir))
        monkeypatch.setattr(workdir, "_cleaned", False)  # as in a fresh kernel
        seen = {}

        def look_while_the_rank_runs():
            deadline = time.monotonic() + 60
            while not list(tmp_path.glob("ready-*")) and time.monotonic() < deadline:
                time.sleep(0.02)
            seen["folders"] = set(temp_dir.iterdir())
            own = seen["folders"] - {alive_folder}
            seen["modes"] = {path.name: mode(path) for folder in own for path in [folder, *folder.iterdir()]}
            (tmp_path / "go").touch()

        looker = threading.Thread(target=look_while_the_rank_runs)
        looker.start()
        assert list(ddp_lab.launch(waits_for_go, args=(str(tmp_path),), nprocs=1, timeout=60)) == [0]
        looker.join()
        assert killed_folder not in seen["folders"] and alive_folder in seen["folders"], seen
        assert len(seen["folders"]) == 2, seen  # the live kernel's and this launch's
        assert sorted(seen["modes"].values()) == ["0o600"] * 3 + ["0o700"], seen["modes"]
        assert set(seen["modes"]) >= {"payload.pkl", "stacks-0.txt", workdir.LOCK_NAME}, seen["modes"]
        assert set(temp_dir.iterdir()) == {alive_folder}  # this launch removed its own
        assert all(mode(path) == "0o600" for path in alive_folder.iterdir())
    finally:
        alive.kill()
        alive.wait()
    assert workdir.remove_abandoned(str(temp_dir)) == [str(alive_folder)]  # once its kernel is gone


def waits_for_go(rank, marker_dir):
    Path(marker_dir, f"ready-{rank}").touch()
    deadline = time.monotonic() + 60
    while not Path(marker_dir, "go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return rank


# --- idle connections to the store: the notebook's file descriptors -----------------------------

STORE_KERNEL = textwrap.dedent("""
    import datetime, json, resource, sys
    import ddp_lab
    from ddp_lab.launcher.rendezvous import loopback_store
    from torch.distributed import TCPStore

    with loopback_store(1, 60) as store_env:  # hosted as every launch and live cluster hosts its store
        port = int(store_env["MASTER_PORT"])
        print(port, resource.getrlimit(resource.RLIMIT_NOFILE)[0], flush=True)
        for command in sys.stdin:  # sent once the test has opened (or closed) its connections
            try:
                if command.strip() == "launch":
                    answer = list(ddp_lab.launch(lambda rank: rank, nprocs=1, init_process_group=False))
                else:  # "store": does the store still answer?
                    client = TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=10))
                    client.set("still", "here")
                    answer = client.get("still").decode()
            except OSError as error:
                answer = str(error)
            print(json.dumps(answer), flush=True)
""")
KERNEL_FILES = (1024, 2048)  # soft, hard: the soft limit of many Linux desktops


def test_idle_connections_to_the_store_do_not_exhaust_the_notebook(tmp_path):
    """1,021 idle connections to the store: the notebook still launches; past its hard limit, one line says why.

    Without it: with the soft limit at 1,024 the notebook ran out of file descriptors
    ("[Errno 24] Too many open files"). The store raises the soft limit to the hard one (here 2,048).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = KERNEL_FILES[1] + 400
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"this test opens {needed} connections; the hard limit of open files here is {hard}")
    temp_dir = tmp_path / "tmp"
    temp_dir.mkdir()
    kernel = subprocess.Popen([sys.executable, "-c", STORE_KERNEL], text=True, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, env={**os.environ, "DDP_LAB_WARM": "0", "TMPDIR": str(temp_dir)},
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, KERNEL_FILES))
    connections = []

    def in_kernel(command):
        kernel.stdin.write(f"{command}\n")
        kernel.stdin.flush()
        return json.loads(kernel.stdout.readline())

    def connect(count):
        for _ in range(count):
            try:
                connections.append(socket.create_connection((LOOPBACK, port), timeout=5))
            except OSError:  # the kernel is out of descriptors: the store accepts and closes at once
                pass

    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed + 100), hard))  # for our own connections
        port, kernel_soft = map(int, kernel.stdout.readline().split())
        assert kernel_soft == KERNEL_FILES[1]
        connect(1021)
        assert in_kernel("launch") == [0]
        deadline = time.monotonic() + 30
        while psutil.Process(kernel.pid).num_fds() < KERNEL_FILES[1] and time.monotonic() < deadline:
            connect(50)  # until every descriptor the kernel may open is a connection to its store
        message = in_kernel("launch")
        assert message.startswith("[Errno 24] the notebook has run out of file descriptors (")
        assert "so ddp_lab could not start the ranks" in message and "\n" not in message, message
        for connection in connections:
            connection.close()
        connections.clear()
        assert in_kernel("store") == "here"  # the store survived, and the kernel has descriptors again
        assert list(temp_dir.iterdir()) == []  # the refused launch left no work folder
    finally:
        for connection in connections:
            connection.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        kernel.kill()
        kernel.communicate()


# --- the stop button pressed again while the ranks are slow to die ------------------------------

PRESSED_AGAIN = textwrap.dedent("""
    import os, signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a Jupyter kernel does
    from pathlib import Path
    import psutil
    from ddp_lab.launcher.launch import launch

    def saves_a_checkpoint_on_sigterm(rank, marker_dir):
        signal.signal(signal.SIGTERM, lambda *_: time.sleep(60))  # a checkpoint that takes long
        print(f"rank {rank}: before the fault", flush=True)
        Path(marker_dir, f"ready-{rank}").touch()
        time.sleep(300)

    def ranks_left():
        me = os.getpid()
        return [p for p in psutil.Process().children(recursive=True)
                if not ("ddp_lab.launcher.zygote" in p.cmdline() and p.ppid() == me)
                and p.status() != psutil.STATUS_ZOMBIE]

    launch(lambda rank: rank, nprocs=2, backend="gloo")  # an earlier cell: the interrupted launch starts warm
    fds = psutil.Process().num_fds()
    try:
        launch(saves_a_checkpoint_on_sigterm, args=(sys.argv[1],), nprocs=2, backend="gloo", timeout=None)
    except KeyboardInterrupt:
        print("KeyboardInterrupt reached the caller", flush=True)
    print("ranks left:", len(ranks_left()), flush=True)
    print("fds left:", psutil.Process().num_fds() - fds, flush=True)
""")


def test_stop_pressed_again_during_clean_up(tmp_path):
    """Three presses 0.2 s apart while ranks sleep in their SIGTERM handler: all ranks and fds are gone.

    Before the fix the second press raised inside the clean-up: the ranks were alive 27 s later.
    """
    proc = start_launching_script(tmp_path, PRESSED_AGAIN)
    try:
        for _ in range(3):
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.2)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "KeyboardInterrupt reached the caller" in out
    assert "ranks left: 0" in out
    assert "fds left: 0" in out
    for rank in (0, 1):
        assert f"[rank {rank}] rank {rank}: before the fault\n" in out
    assert_no_ranks_left({proc.pid})


INTERRUPTED_IMPORT = textwrap.dedent("""
    import os, signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)   # as a Jupyter kernel does
    from ddp_lab.launcher.backend import choose_backend
    assert "torch" not in sys.modules

    class StopButton:   # presses it when torch's import reaches torch.fx: in the middle, on any machine
        def find_spec(self, name, path=None, target=None):
            if name == "torch.fx":
                sys.meta_path.remove(self)
                os.kill(os.getpid(), signal.SIGINT)
            return None

    sys.meta_path.insert(0, StopButton())
    try:
        choose_backend("gloo", 2, announce=False)
        print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted")
    import torch
    import torch.distributed
    print("torch works:", float(torch.ones(2).sum()))
""")


def test_the_stop_button_during_the_first_import_of_torch_leaves_torch_usable():
    """In a fresh kernel the first launch or %%ddp cell imports torch (about 1 s) when it chooses the backend. A
    KeyboardInterrupt inside that import left torch half-initialised: every later `import torch` of the kernel
    failed ("cannot initialize type ...: an object with that name is already defined"). The press is held until
    the import is done, then raised."""
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_IMPORT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "interrupted\ntorch works: 2.0\n", done.stdout + done.stderr

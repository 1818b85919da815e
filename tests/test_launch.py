"""ddp_lab.launch with real gloo ranks: results, output, notebook-style functions, failures."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import threading

import psutil
import pytest
import torch

import ddp_lab
from ddp_lab import LaunchTimeout, LaunchWarning, RankCrashed, RankFailed, ResultNotPicklable
from ddp_lab.hardware.machine import cpu_cores

import forked_kernels
from stop_button import press_stop_when


def rank_children() -> list[psutil.Process]:
    """Processes started by this test process that are still alive (ranks would be), but for zygotes and the suite's
    kernel template with the kernels it forked for this test process's notebooks (tests/forked_kernels.py)."""
    alive = []
    for process in psutil.Process().children(recursive=True):
        try:
            cmdline = process.cmdline()
            if process.status() != psutil.STATUS_ZOMBIE and "ddp_lab.launcher.zygote" not in cmdline \
                    and not forked_kernels.from_a_template(cmdline):
                alive.append(process)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.fixture(autouse=True)
def no_rank_survives():
    yield
    assert rank_children() == [], "a rank process outlived its launch"


def square_and_sum(rank, offset):
    import torch.distributed as dist

    value = torch.tensor([float(rank)])
    dist.all_reduce(value)
    print(f"rank {rank} sees sum {value.item():.0f}")
    return {"rank": rank, "sum": value.item() + offset}


def test_returns_every_rank_value_in_rank_order(capsys):
    results = ddp_lab.launch(square_and_sum, args=(10,), nprocs=3, backend="gloo")
    assert results == [{"rank": r, "sum": 13.0} for r in range(3)]
    assert results[2]["rank"] == 2 and results.backend == "gloo"
    assert results.outputs == [f"rank {r} sees sum 3\n" for r in range(3)]
    out = capsys.readouterr().out
    assert out.endswith("[rank 0] rank 0 sees sum 3\n[rank 1] rank 1 sees sum 3\n[rank 2] rank 2 sees sum 3\n")


def late_rank_zero(rank):
    import time

    if rank == 0:
        time.sleep(0.5)  # rank 1 prints first, yet rank 0 must be printed first
    print("line one")
    os.write(1, b"written to fd 1\n")
    os.write(2, b"written to fd 2\n")
    subprocess.run(["echo", f"from a subprocess of rank {rank}"], check=True)
    return rank


def test_output_is_captured_at_fd_level_and_printed_rank_by_rank(capsys):
    ddp_lab.launch(late_rank_zero, nprocs=2, backend="gloo")
    captured = capsys.readouterr()
    expected_out = "".join(f"[rank {r}] line one\n[rank {r}] written to fd 1\n[rank {r}] from a subprocess of rank {r}\n"
                           for r in range(2))
    assert captured.out.endswith(expected_out)
    assert captured.err == "[rank 0] written to fd 2\n[rank 1] written to fd 2\n"


GLOO_NOTE = "[Gloo] Rank 0 is connected to {} peer ranks. Expected number of connected peer ranks is : 1\n"


def writes_gloo_notes(rank):
    os.write(1, GLOO_NOTE.format(1).encode())  # the shape gloo's std::cout writes on torch 2.8
    print("mine", GLOO_NOTE.format(1), end="", flush=True)  # a learner's line around it
    os.write(1, GLOO_NOTE.format(0).encode())  # a peer not connected: may explain a hang
    os.write(2, GLOO_NOTE.format(1).encode())
    return rank


def test_only_gloos_all_connected_note_is_dropped_from_rank_output(capsys):
    """torch 2.8's gloo prints that note on every rank (output.is_torch_log_noise); on 2.13 and 2.15
    it prints none, so this writes the lines itself, once as gloo does and in shapes that stay."""
    results = ddp_lab.launch(writes_gloo_notes, nprocs=1, init_process_group=False)
    kept = ["mine " + GLOO_NOTE.format(1), GLOO_NOTE.format(0), GLOO_NOTE.format(1)]
    assert sorted(results.outputs[0].splitlines(keepends=True)) == sorted(kept)  # the two pipes interleave
    captured = capsys.readouterr()
    assert captured.out.endswith(f"[rank 0] {kept[0]}[rank 0] {kept[1]}")
    assert captured.err == f"[rank 0] {kept[2]}"


def report_environment(rank):
    import torch.distributed as dist

    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    return {**{k: os.environ[k] for k in keys}, "initialised": dist.is_initialized(),
            "backend": dist.get_backend(), "threads": torch.get_num_threads(), "pg_rank": dist.get_rank()}


def test_ranks_get_torchrun_environment_and_a_process_group():
    results = ddp_lab.launch(report_environment, nprocs=2, backend="gloo")
    cores = cpu_cores()  # the affinity mask capped by the cgroup CPU quota, as the launcher counts
    for rank, env in enumerate(results):
        assert env["RANK"] == env["LOCAL_RANK"] == str(rank) == str(env["pg_rank"])
        assert env["WORLD_SIZE"] == "2" and env["MASTER_ADDR"] == "127.0.0.1"
        assert env["initialised"] and env["backend"] == "gloo"
        assert env["threads"] == max(1, cores // 2)
    assert results[0]["MASTER_PORT"] == results[1]["MASTER_PORT"]


def init_by_hand(rank):
    import torch.distributed as dist

    assert not dist.is_initialized()
    dist.init_process_group("gloo")  # env:// from the launcher's environment
    value = torch.ones(1)
    dist.all_reduce(value)
    return value.item()


def test_opting_out_lets_fn_initialise_the_process_group_itself():
    assert ddp_lab.launch(init_by_hand, nprocs=2, init_process_group=False) == [2.0, 2.0]


NOTEBOOK_STYLE = textwrap.dedent('''
    import ddp_lab, torch

    class Scaler:                        # a class defined in __main__, like a notebook cell
        def __init__(self, k): self.k = k
        def __call__(self, x): return x * self.k

    def make_fn(scale):                  # a closure over a __main__ object
        def fn(rank, extra):
            import torch.distributed as dist
            t = torch.tensor([scale(rank + 1.0)])
            dist.all_reduce(t)
            return Scaler(t.item() + extra)
        return fn

    results = ddp_lab.launch(make_fn(Scaler(2)), args=(1,), nprocs=2, backend="gloo")
    assert [type(r).__name__ for r in results] == ["Scaler", "Scaler"]
    assert isinstance(results[0], Scaler), "returned instances are of the notebook's own class"
    assert [r.k for r in results] == [7.0, 7.0]
    assert ddp_lab.launch(lambda rank: rank * 10, nprocs=2, backend="gloo") == [0, 10]
    print("ok")
''')


def test_functions_closures_lambdas_and_classes_from_main():
    """Run as a script, so everything lives in __main__ exactly as in a notebook."""
    done = subprocess.run([sys.executable, "-c", NOTEBOOK_STYLE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "ok"


def rank_one_raises(rank):
    import torch.distributed as dist

    print(f"rank {rank} before the error")
    if rank == 1:
        raise ValueError("bad shape on rank 1")
    dist.barrier()  # rank 0 waits for rank 1 forever: the launcher must stop it


def test_a_raising_rank_stops_the_others_and_reports_its_traceback(capsys):
    with pytest.raises(RankFailed, match=r"rank 1 of 2 failed") as caught:
        ddp_lab.launch(rank_one_raises, nprocs=2, backend="gloo", timeout=60)
    error = caught.value
    assert set(error.failures) == {0, 1}
    assert error.failures[0].kind == "stopped" and error.failures[1].kind == "raised"
    assert isinstance(error.failures[1].exception, ValueError)
    assert 'raise ValueError("bad shape on rank 1")' in str(error)  # the original source line
    assert "rank 0 before the error" in error.outputs[0]
    out = capsys.readouterr().out
    assert "[rank 0] rank 0 before the error\n[rank 1] rank 1 before the error\n" in out


def dies(rank, how):
    import torch.distributed as dist

    print(f"rank {rank} alive")
    if rank == 1:
        if how == "os._exit":
            os._exit(7)
        os.kill(os.getpid(), {"SIGKILL": signal.SIGKILL, "SIGSEGV": signal.SIGSEGV}[how])
    dist.barrier()


@pytest.mark.parametrize("how, expected", [
    ("os._exit", r"rank 1 died with exit code 7"),
    ("SIGKILL", r"rank 1 died with signal SIGKILL \(9\)"),
    ("SIGSEGV", r"rank 1 died with signal SIGSEGV \(11\)"),
])
def test_a_rank_that_dies_without_traceback_is_named_with_its_exit(how, expected):
    with pytest.raises(RankCrashed, match=expected) as caught:
        ddp_lab.launch(dies, args=(how,), nprocs=2, backend="gloo", timeout=60)
    assert caught.value.first_rank == 1
    assert "rank 1 alive" in caught.value.outputs[1], "output printed before the crash is kept"


def waits_in_my_own_thread():
    import time

    time.sleep(60)


def skips_the_collective(rank):
    import io
    import queue
    import threading

    import torch.distributed as dist
    from tqdm import tqdm

    threading.Thread(target=waits_in_my_own_thread, daemon=True).start()   # the rank's own code: shown whole
    threading.Thread(target=queue.Queue().get, daemon=True).start()   # the standard library's alone: shown too
    tqdm(total=1, file=io.StringIO())   # starts tqdm's monitor thread, a library's idle helper
    if rank == 0:
        dist.all_reduce(torch.ones(1))  # rank 1 never joins
    return rank


def test_watchdog_reports_the_stack_of_a_hung_rank():
    """The stuck rank's stack, its current thread first: an idle helper thread, newer, came first in faulthandler's
    dump and pushed the frames that matter down. A thread all in the standard library or installed packages is one
    line; a thread running the rank's own code keeps its frames; paths read the same on every machine."""
    with pytest.raises(LaunchTimeout, match=r"rank\(s\) 0 of 2 still running after timeout=2s") as caught:
        ddp_lab.launch(skips_the_collective, nprocs=2, backend="gloo", timeout=2)
    message = str(caught.value)
    assert "in skips_the_collective" in message and "in all_reduce" in message
    assert caught.value.failures[0].kind == "timeout"
    stack = caught.value.failures[0].details
    assert stack.startswith("Current thread (most recent call first):") and "\n\nThread " in stack, stack
    threads = stack.split("\n\n")
    assert len(threads) == 4 and "in waits_in_my_own_thread" in stack and "queue.py" in stack, stack
    assert ('Thread of a library, not of your code (its frames not shown): File ".../site-packages/tqdm/_monitor.py", '
            'line ' in stack), stack
    assert sys.base_prefix not in stack and "_bootstrap" not in stack, stack   # how every thread starts: not shown


def sleeps(rank, folder):
    import pathlib
    import time

    print(f"rank {rank} started", flush=True)
    pathlib.Path(folder, f"rank-{rank}").touch()   # after its print: the test presses stop once both are there
    time.sleep(60)


def test_keyboard_interrupt_kills_every_rank_and_keeps_output(capsys, tmp_path):
    # A Jupyter kernel turns SIGINT into KeyboardInterrupt; a test runner started in the
    # background may have inherited SIGINT as ignored, so install the handler explicitly.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    press_stop_when(*(tmp_path / f"rank-{rank}" for rank in (0, 1)))   # once both ranks have printed
    try:
        with pytest.raises(KeyboardInterrupt):
            ddp_lab.launch(sleeps, args=(str(tmp_path),), nprocs=2, backend="gloo", timeout=60)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert "[rank 0] rank 0 started\n[rank 1] rank 1 started\n" in capsys.readouterr().out


def test_bad_inputs_say_how_to_fix_them():
    with pytest.raises(ValueError, match=r"nprocs must be at least 1, got 0"):
        ddp_lab.launch(print, nprocs=0)
    with pytest.raises(TypeError, match=r"Pass the function itself"):
        ddp_lab.launch(42)
    with pytest.raises(TypeError, match=r"args\[1\] \(lock\) cannot be sent to the ranks"):
        ddp_lab.launch(print, args=(1, threading.Lock()))
    lock = threading.Lock()
    with pytest.raises(TypeError, match=r"cannot be sent to the ranks.*inside fn"):
        ddp_lab.launch(lambda rank: lock, nprocs=1)
    with pytest.raises(ValueError, match=r"timeout must be a positive number"):
        ddp_lab.launch(print, timeout=-1)


def demo_basic():  # torchrun-style: reads RANK from the environment, takes no rank parameter
    return int(os.environ["RANK"])


def takes_rank_and_steps(rank, steps):
    return rank * steps


@pytest.mark.parametrize("start, kwargs, error, match", [
    ("launch", {"nprocs": 10**6}, ValueError, r"^nprocs=1000000 is too many: .*use at most 256"),
    ("launch", {"timeout": float("inf")}, ValueError, r"^timeout=inf is too long: .*or timeout=None"),
    ("launch", {"timeout": float("nan")}, ValueError, r"^timeout must be a positive number"),
    ("launch", {"timeout": True}, TypeError, r"^timeout must be a number of seconds or None"),
    ("launch", {"env": {"OMP_NUM_THREADS": 1}}, TypeError,
     r"^env\['OMP_NUM_THREADS'\] = 1: environment variables are strings; write env=\{'OMP_NUM_THREADS': '1'\}"),
    ("launch", {"env": {"RANK": "0"}}, ValueError, r"^env\['RANK'\]: the launcher sets RANK .*nprocs= instead"),
    ("launch", {"env": {"WORLD_SIZE": "8"}}, ValueError, r"^env\['WORLD_SIZE'\]: the launcher sets WORLD_SIZE"),
    ("launch", {"env": {"MASTER_PORT": "12355"}}, ValueError,
     r"^env\['MASTER_PORT'\]: the launcher sets MASTER_PORT .*init_process_group=False"),
    ("launch", {"fn": demo_basic}, TypeError,
     r"^fn=demo_basic takes no arguments, but launch calls fn\(rank, \*args\) like mp.spawn: give it a rank "
     r"parameter, or launch\(lambda rank: demo_basic\(\), ...\)"),
    ("launch", {"fn": lambda: None}, TypeError,
     r"^fn=<lambda> takes no arguments, but launch calls fn\(rank, \*args\) like mp.spawn: give it a rank "
     r"parameter, or a lambda: launch\(lambda rank: \.\.\., \.\.\.\)\.$"),
    ("launch", {"fn": takes_rank_and_steps, "args": ()}, TypeError,
     r"^fn=takes_rank_and_steps\(rank, steps\) cannot be called as fn\(rank, \*args\) with 0 arg\(s\) in args="),
    ("launch", {"fn": takes_rank_and_steps, "args": (1, 2)}, TypeError, r"with 2 arg\(s\) in args=.*too many"),
    ("launch", {"env": {"NCCL_DEBUG": "INFO\0"}}, ValueError,
     r"^env\['NCCL_DEBUG'\] = 'INFO\\x00' holds a NUL byte .*remove it"),
    ("launch", {"argv": None}, TypeError, r"^argv=None: give a list of strings \(it is NoneType\).*argv=\[\] for none"),
    ("launch", {"argv": 5}, TypeError, r"^argv=5: give a list of strings \(it is int\)"),
    ("launch", {"argv": "--epochs 3"}, TypeError, r"^argv='--epochs 3': give a list of strings \(it is str\)"),
    ("launch", {"argv": ["--epochs", 3]}, TypeError, r"^argv=\['--epochs', 3\]: give a list of strings \(argv\[1\] is int\)"),
    ("Cluster", {"nprocs": 10**6}, ValueError, r"^nprocs=1000000 is too many"),
    ("Cluster", {"timeout": -5}, ValueError, r"^timeout must be a positive number"),
    ("Cluster", {"env": {"RANK": "1"}}, ValueError, r"^env\['RANK'\]: the launcher sets RANK"),
    ("Cluster", {"env": {"A": "\0"}}, ValueError, r"^env\['A'\] = '\\x00' holds a NUL byte"),
])
def test_bad_arguments_are_refused_in_one_line_before_any_rank_starts(start, kwargs, error, match):
    if start == "launch":
        call = lambda: ddp_lab.launch(**{"fn": takes_rank_and_steps, "args": (3,), **kwargs})  # noqa: E731
    else:
        call = lambda: ddp_lab.Cluster(**{"backend": "gloo", **kwargs})  # noqa: E731
    before = {process.pid for process in psutil.Process().children(recursive=True)}  # a zygote may be there
    with pytest.raises(error, match=match) as caught:
        call()
    assert "\n" not in str(caught.value)
    started = {process.pid for process in psutil.Process().children(recursive=True)} - before
    assert not started, "nothing may start before the arguments are checked"


def test_a_deleted_working_directory_is_named_before_any_rank_starts(tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with pytest.raises(FileNotFoundError, match=r"^the current working directory no longer exists .*os.chdir\("):
        ddp_lab.launch(takes_rank_and_steps, args=(1,), nprocs=1)


def raises_with_a_broken_message(rank):
    class BrokenMessage(Exception):
        def __str__(self):
            raise RuntimeError("no message here")

    raise BrokenMessage()


def test_an_exception_whose_message_cannot_be_printed_is_reported_by_its_type():
    with pytest.raises(RankFailed, match=r"rank 0 raised BrokenMessage: \(its message could not be printed: "
                                         r"RuntimeError: no message here\)"):
        ddp_lab.launch(raises_with_a_broken_message, nprocs=1, backend="gloo")


def test_an_unpicklable_return_value_names_the_rank():
    with pytest.raises(ResultNotPicklable, match=r"rank 1 returned a lock that cannot be pickled") as caught:
        ddp_lab.launch(lambda rank: threading.Lock() if rank == 1 else rank, nprocs=2, backend="gloo")
    assert isinstance(caught.value, TypeError)


def returns_a_thing_only_the_ranks_can_import(rank, folder):
    import sys
    sys.path.insert(0, folder)
    import only_on_ranks
    return only_on_ranks.Thing() if rank == 1 else rank


def test_a_return_value_the_notebook_cannot_load_names_the_rank(tmp_path):
    (tmp_path / "only_on_ranks.py").write_text("class Thing:\n    pass\n")
    with pytest.raises(ResultNotPicklable, match=r"^rank 1 sent back a value this notebook cannot load "
                                                 r"\(ModuleNotFoundError: No module named 'only_on_ranks'\)"):
        ddp_lab.launch(returns_a_thing_only_the_ranks_can_import, args=(str(tmp_path),), nprocs=2, backend="gloo")


def run_without_gpus(code: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter that sees no GPU, on any machine; its ranks inherit that.

    CUDA_VISIBLE_DEVICES="" hides every GPU, but only from a process whose CUDA driver has
    not started: torch.cuda.is_available() starts it and torch keeps the count for the
    life of the process. So it is set for a new interpreter from its first line, not in
    this pytest process, where an earlier test may already have asked.
    """
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
                          capture_output=True, text=True, timeout=120)


WITHOUT_GPUS = textwrap.dedent("""
    import torch.distributed as dist
    import ddp_lab
    from ddp_lab.hardware.machine import gpu_count

    print("GPUs", gpu_count(), "NCCL built in" if dist.is_nccl_available() else "no NCCL")
    for _ in range(2):
        print("backend", ddp_lab.launch(lambda rank: print(rank), nprocs=1).backend)
    try:
        ddp_lab.launch(print, backend="nccl")
    except ValueError as error:
        print("refused:", error)
""")


def test_without_gpus_auto_announces_gloo_once_and_nccl_is_refused_with_the_fix():
    """The same on a CPU-only machine and on a GPU machine: the GPUs are hidden on purpose.

    What `auto` does where GPUs are visible is tests/gpu's test_auto_backend_chooses_nccl_with_one_gpu_per_rank.
    """
    done = run_without_gpus(WITHOUT_GPUS)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    announced = [line for line in lines if line.startswith("ddp_lab: backend='auto'")]
    refused = next(line for line in lines if line.startswith("refused:"))
    if lines[0] == "GPUs 0 NCCL built in":  # a CUDA build of torch with its GPUs hidden
        assert announced == ["ddp_lab: backend='auto' picked 'gloo' for 1 rank: NCCL needs 1 GPU, found 0; "
                             "tensors stay on the CPU"]
        assert refused == ("refused: backend='nccl' needs one GPU per rank: nprocs=2 but found no GPU. "
                           "Use backend='gloo', which runs on CPU tensors.")
    else:  # a CPU-only build
        assert lines[0] == "GPUs 0 no NCCL"
        assert announced == ["ddp_lab: backend='auto' picked 'gloo' for 1 rank: this torch has no NCCL; "
                             "tensors stay on the CPU"]
        assert refused == ("refused: backend='nccl' is not built into this torch (a CPU-only build has gloo only; "
                           "found 0 GPU(s)). Use backend='gloo', or install the CUDA build of the same torch "
                           "version on a GPU machine.")
    assert lines.count("backend gloo") == 2  # announced once, chosen twice


def test_stream_prints_lines_as_they_arrive(capsys):
    results = ddp_lab.launch(lambda rank: print(f"hi {rank}"), nprocs=2, backend="gloo", stream=True)
    assert results == [None, None]
    out = capsys.readouterr().out
    assert "[rank 0] hi 0\n" in out and "[rank 1] hi 1\n" in out


def test_more_ranks_than_cores_notes_the_speed_once(monkeypatch, capsys):
    """A printed `ddp_lab:` note (stored notebook outputs drop it), once per nprocs and kernel, with the
    launch it belongs to: on the ranks' stream (stderr if that is all they print), never a later cell's."""
    from ddp_lab.launcher import launch as launcher
    from ddp_lab.launcher import output

    monkeypatch.setattr(output, "_printed_notes", set())
    nprocs = launcher.cpu_cores() + 1
    note = (f"ddp_lab: nprocs={nprocs} is more than the {launcher.cpu_cores()} CPU cores: "
            "ranks take turns (slower, same results)")
    assert ddp_lab.launch(lambda rank: rank, nprocs=nprocs, backend="gloo") == list(range(nprocs))
    assert capsys.readouterr() == ("", "")  # ranks that print nothing: nothing, on every machine
    assert ddp_lab.launch(lambda rank: 2 * rank, nprocs=2, backend="gloo") == [0, 2]
    ddp_lab.launch(lambda rank: print(rank), nprocs=2, backend="gloo")
    assert "more than the" not in capsys.readouterr().out   # not carried to a later, unrelated launch
    ddp_lab.launch(lambda rank: print(rank, file=sys.stderr), nprocs=nprocs, backend="gloo")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(note + "\n")   # stderr only: the note comes there
    for _ in range(2):
        ddp_lab.launch(lambda rank: print(rank), nprocs=nprocs, backend="gloo")
    assert "more than the" not in capsys.readouterr().out   # once per kernel
    assert len(note) <= 100  # one line in JupyterLab, dropped whole from stored outputs


def ddp_train(rank):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 2))
    optimizer = torch.optim.Adam(model.parameters())
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()
    weights = model.module.weight.detach().clone()
    dist.all_reduce(weights)
    return weights


def test_ddp_with_an_optimizer_exits_cleanly_every_time():
    """The SIGABRT seen after destroy_process_group() + DDP must not happen at the end of a launch."""
    with _no_warnings():
        for _ in range(3):
            results = ddp_lab.launch(ddp_train, nprocs=2, backend="gloo")
            assert results.returncodes == [0, 0]
            torch.testing.assert_close(results[0], results[1])


class _no_warnings:
    def __enter__(self):
        import warnings

        self._catcher = warnings.catch_warnings()
        self._catcher.__enter__()
        warnings.simplefilter("error", LaunchWarning)

    def __exit__(self, *exc):
        return self._catcher.__exit__(*exc)


def test_no_store_port_stays_open_after_a_launch():
    results = ddp_lab.launch(lambda rank: int(os.environ["MASTER_PORT"]), nprocs=1, backend="gloo")
    listening = {c.laddr.port for c in psutil.Process().net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    assert results[0] not in listening


def aborts_after_returning(rank):
    import threading
    import time

    if rank == 0:  # returns at once, then aborts while it waits for rank 1 to report
        threading.Timer(0.3, os.kill, args=(os.getpid(), signal.SIGABRT)).start()
        return "rank 0's result"
    time.sleep(1.5)
    return "rank 1's result"


def test_a_crash_after_returning_is_a_warning_and_loses_nothing():
    with pytest.warns(LaunchWarning, match=r"rank 0 returned its result, then its process ended with signal SIGABRT"):
        results = ddp_lab.launch(aborts_after_returning, nprocs=2, backend="gloo")
    assert results == ["rank 0's result", "rank 1's result"]
    assert results.returncodes[0] == -signal.SIGABRT


def test_a_launch_error_shows_in_a_notebook_as_short_wrapped_lines():
    """IPython shows `_render_traceback_`: the message, hints wrapped between words, tracebacks as they are."""
    def skips_a_collective(rank):
        import torch.distributed as dist

        if rank == 0:
            dist.all_reduce(torch.ones(1))

    with pytest.raises(LaunchTimeout) as caught:
        ddp_lab.launch(skips_a_collective, nprocs=2, backend="gloo", timeout=2)
    shown = caught.value._render_traceback_()
    assert shown[0].startswith("LaunchTimeout: rank(s) 0 of 2 still running after timeout=2s")
    hint = next(line for line in str(caught.value).splitlines() if line.startswith("Hint:"))
    assert len(hint) > 100  # one long line in the message ...
    start = shown.index(next(line for line in shown if line.startswith("Hint:")))
    end = start + 1
    while " ".join(shown[start:end]) != hint:
        end += 1
        assert end <= len(shown), (hint, shown[start:])
    assert all(len(line) <= 100 for line in shown[start:end])  # ... shown as short lines, words whole


def debug_level(rank):
    import torch.distributed as dist

    return str(dist.get_debug_level())


def test_debug_variables_reach_warm_ranks_too():
    # torch reads TORCH_DISTRIBUTED_DEBUG when torch.distributed is imported: in a warm rank that
    # was the zygote's import, before the rank had its environment (lesson 12 relies on DETAIL)
    ddp_lab.launch(debug_level, nprocs=2, backend="gloo")  # the zygote is up: the next ranks are forked
    detail = ddp_lab.launch(debug_level, nprocs=2, backend="gloo", env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    assert detail.started == ["warm", "warm"]
    assert list(detail) == ["DebugLevel.DETAIL"] * 2
    assert list(ddp_lab.launch(debug_level, nprocs=2, backend="gloo")) == ["DebugLevel.OFF"] * 2


FIRST_LAUNCH_SCRIPT = textwrap.dedent("""
    import sys, ddp_lab
    print(ddp_lab.launch(lambda rank: sys.modules["torch"].__name__, nprocs=4, backend="gloo").started)
""")


def test_a_processs_first_launch_forks_its_ranks_from_the_zygote_it_starts():
    """One interpreter (the zygote, which later launches use too) imports torch for all four ranks, where cold
    ranks would import it four times (procstart.start_rank_processes; lesson 00b). Cold ranks (DDP_LAB_WARM=0):
    tests/test_own_process_group.py and tests/test_cluster.py."""
    done = subprocess.run([sys.executable, "-c", FIRST_LAUNCH_SCRIPT], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "DDP_LAB_WARM"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == str(["warm"] * 4), done.stdout + done.stderr


class _KernelStream:
    """A stream that sends what it holds only when flushed, as a Jupyter kernel's stdout and stderr do (each keeps
    its own buffer): the shared `sent` list is the order a notebook shows."""

    def __init__(self, sent: list):
        self.sent, self.held = sent, ""

    def write(self, text: str) -> int:
        self.held += text
        return len(text)

    def flush(self) -> None:
        if self.held:
            self.sent.append(self.held)
            self.held = ""


def test_lines_of_stdout_and_stderr_reach_a_kernel_in_the_order_a_rank_printed_them(monkeypatch):
    from ddp_lab.launcher.output import RankOutput, print_in_rank_order

    sent: list = []
    monkeypatch.setattr(sys, "stdout", _KernelStream(sent))
    monkeypatch.setattr(sys, "stderr", _KernelStream(sent))
    print_in_rank_order([RankOutput(0, [("stdout", "out1\n"), ("stderr", "err1\n"), ("stdout", "out2\n")]),
                         RankOutput(1, [("stderr", "err\n")])])
    assert sent == ["[rank 0] out1\n", "[rank 0] err1\n", "[rank 0] out2\n", "[rank 1] err\n"]


def _prints_warns_and_logs(rank):
    import logging
    import warnings

    for step in range(3):
        print(f"step {step}")
        warnings.warn(f"warned at step {step}")
        logging.getLogger("ddp_lab-test").error(f"logged at step {step}")
    print("done")


def test_a_ranks_prints_warnings_and_logs_reach_the_cell_in_the_order_written(monkeypatch):
    """stdout and stderr are two pipes: read by two threads, a rank's three prints came before its warnings (the
    stdout reader took them all in one read). Each rank's lines come in the order it wrote them."""
    sent: list = []
    monkeypatch.setattr(sys, "stdout", _KernelStream(sent))
    monkeypatch.setattr(sys, "stderr", _KernelStream(sent))
    results = ddp_lab.launch(_prints_warns_and_logs, nprocs=2, backend="gloo", env={"PYTHONWARNINGS": "always"})
    for rank in range(2):
        shown = [line.split("] ", 1)[1].split("UserWarning: ")[-1] for chunk in sent for line in chunk.splitlines()
                 if line.startswith(f"[rank {rank}] ") and "warnings.warn" not in line]   # not the warning's source
        assert shown == [text for step in range(3) for text in
                         (f"step {step}", f"warned at step {step}", f"logged at step {step}")] + ["done"]
        assert results.outputs[rank].index("step 1") < results.outputs[rank].index("warned at step 1")


def test_the_call_a_stuck_rank_waits_in_is_the_one_its_code_made():
    """torch's own functions call each other (dist.recv can call dist.irecv, all_gather_object calls all_gather):
    the outermost of the first thread's torch.distributed frames is named, not another thread's."""
    from ddp_lab.launcher.reports import blocked_in

    c10d, logger = ".../site-packages/torch/distributed/distributed_c10d.py", ".../torch/distributed/c10d_logger.py"
    stack = (f'Current thread (most recent call first):\n  File "{c10d}", line 2 in irecv\n'
             f'  File "{logger}", line 83 in wrapper\n  File "{c10d}", line 1 in recv\n'
             f'  File "{logger}", line 83 in wrapper\n  File "answer.py", line 5 in ring\n\n'
             f'Thread (most recent call first):\n  File "{c10d}", line 3 in all_reduce\n')
    assert blocked_in(stack) == "recv"
    assert blocked_in(stack.split("\n\n")[1]) == "all_reduce" and blocked_in('  File "answer.py", line 5') is None
    other_thread = stack.split("\n\n")[1]
    in_a_wait = 'Current thread (most recent call first):\n  File "answer.py", line 9 in ring\n\n' + other_thread
    assert blocked_in(in_a_wait) is None   # its code waits in a work's .wait(): not the other thread's all_reduce


def joins_with_a_timeout_in_seconds(rank):
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=30)


def test_a_timeout_in_seconds_is_refused_in_one_line_before_the_store_is_joined():
    """torch takes init_process_group's timeout as a datetime.timedelta; the launcher's store, reached first, failed
    in TCPStore's constructor with every signature it has."""
    with pytest.raises(RankFailed) as caught:
        ddp_lab.launch(joins_with_a_timeout_in_seconds, nprocs=2, init_process_group=False, timeout=60)
    assert ("TypeError: init_process_group(timeout=30): the timeout is a datetime.timedelta, not int, e.g. "
            "timeout=datetime.timedelta(seconds=30).") in str(caught.value)
    assert "TCPStore" not in str(caught.value)


def test_a_rank_keeps_its_streams_in_order_again_once_the_launcher_caught_up(monkeypatch):
    """A switch of streams waits until the other pipe is read; after one wait timed out (the launcher busy) the
    rank does not wait while the launcher lags, and waits again once a switch finds the other pipe read (it stopped
    for good: one stall in a live cluster's life lost the order of every later cell)."""
    from ddp_lab.launcher import worker

    monkeypatch.setattr(worker, "_ORDER_WAIT_S", 0.3)
    pipes = [os.pipe() for _ in range(2)]
    out, err = (open(write, "w", buffering=1, encoding="utf-8") for _, write in pipes)   # line-buffered, as a rank's
    worker.keep_output_in_order((out, err))

    def seconds(stream, text):
        started = time.monotonic()
        stream.write(text)
        return time.monotonic() - started

    try:
        out.write("a\n")
        assert seconds(err, "b\n") >= 0.3    # nobody reads stdout's pipe: the switch waits, then gives up
        assert seconds(out, "c\n") < 0.25    # the launcher lags: no wait
        for read, _ in pipes:
            os.read(read, 1024)              # the launcher caught up
        assert seconds(err, "d\n") < 0.25    # stdout's pipe is read: the switch finds it so at once
        assert seconds(out, "e\n") >= 0.3    # and the next switch waits again (stderr's "d" is unread)
    finally:
        for stream in (out, err):
            stream.close()
        for read, _ in pipes:
            os.close(read)

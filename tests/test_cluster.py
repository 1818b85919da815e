"""Warm launches and the live cluster (`ddp_lab.Cluster`, `%%ddp`) with real gloo ranks."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import psutil
import pytest

import ddp_lab
from ddp_lab import LaunchTimeout, RankCrashed, RankFailed, ResultNotPicklable
from ddp_lab.__main__ import main as command_line
from ddp_lab.cluster import command
from ddp_lab.cluster.registry import CLUSTER_PREFIX, ENTRY_NAME, Registration
from ddp_lab.cluster.status import STACK_WAIT_S
from ddp_lab.launcher.errors import CellSyntaxError, MagicUsageError
from ddp_lab.launcher.workdir import LOCK_NAME
from ddp_lab.launcher import channel, procstart

from stop_button import press_stop_when


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def rank_pids(cluster) -> list[int]:
    return [process.pid for process in cluster._group.processes]


@pytest.fixture(autouse=True)
def _stop_button_reaches_the_notebook():
    """The stop button is SIGINT turned into a KeyboardInterrupt, as a Jupyter kernel has it. A test runner started
    in the background (`make test &`) inherits SIGINT as ignored, and then `_thread.interrupt_main` (what
    `press_stop_when` presses) does nothing: each test here gets Python's own handler, and what was there back."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def there(folder) -> tuple[str, ...]:
    """The paths each of 2 ranks creates with `open(f"{folder}/{rank}", "w").close()` (`press_stop_when`)."""
    return tuple(os.path.join(str(folder), str(rank)) for rank in range(2))


@pytest.fixture(scope="module")
def _module_cluster():
    """The module's tests share one live cluster ([it]: replaced by `cluster` where a test left it shut down)."""
    held = [ddp_lab.Cluster(2, backend="gloo")]
    yield held
    held[0].shutdown()


@pytest.fixture
def cluster(_module_cluster):
    """The shared live cluster; a fresh one where an earlier test's failure shut it down, so that one failure is
    reported once, not again by every test after it."""
    if not _module_cluster[0].alive:
        _module_cluster[0] = ddp_lab.Cluster(2, backend="gloo")
    return _module_cluster[0]


def test_namespaces_persist_across_commands(cluster, capsys):
    cluster.run_code("import torch.nn as nn\ntorch.manual_seed(0)\nmodel = nn.Linear(2, 1)\nsteps = 0")
    cluster.run_code("steps += 1\nprint(f'rank {rank}/{world_size} steps={steps}')")
    assert capsys.readouterr().out.endswith("[rank 0] rank 0/2 steps=1\n[rank 1] rank 1/2 steps=1\n")
    models = cluster.pull("model")
    assert len(models) == 2 and models[0].weight.shape == (1, 2)


def test_final_expression_run_and_show(cluster, capsys):
    assert cluster.run_code("rank * 3") == [0, 3]
    assert cluster.run(lambda rank, k: rank + k, 10) == [10, 11]
    cluster.run_code("print('only rank 1 is shown')", show=[1])
    assert capsys.readouterr().out == "[rank 1] only rank 1 is shown\n"


def test_collectives_work_on_the_persistent_group(cluster):
    values = cluster.run_code("t = torch.tensor([rank + 1.0])\ndist.all_reduce(t)\nt.item()")
    assert values == [3.0, 3.0]


def test_an_exception_on_some_ranks_leaves_the_cluster_usable(cluster):
    with pytest.raises(RankFailed, match=r"rank 1 of 2 raised; the cluster is still running") as caught:
        cluster.run_code("if rank == 1:\n    raise KeyError('missing')\nok = True")
    assert "raise KeyError('missing')" in str(caught.value)
    assert cluster.alive and cluster.run_code("rank") == [0, 1]
    with pytest.raises(RankFailed, match=r"name 'nothing_here' is not defined on rank 0"):
        cluster.pull("nothing_here")


def test_the_first_failure_is_the_first_in_time_and_the_ranks_are_listed_in_order(cluster):
    """Rank 1 raises at once, rank 0 a second later: rank 1's is the first failure, shown first."""
    with pytest.raises(RankFailed, match=r"^2 ranks \(0, 1\) of 2 raised; the cluster is still running\.\n\n--- rank 1 "
                                         r"raised ValueError: early \(first failure\) ---") as caught:
        cluster.run_code("import time\nif rank == 0:\n    time.sleep(1.0)\nraise ValueError('late' if rank == 0 "
                         "else 'early')")
    assert "--- rank 0 raised ValueError: late ---" in str(caught.value)


def test_sys_exit_in_a_cell_ends_the_cell_not_the_rank(cluster):
    """As in a kernel: the cell fails, saying so, and the rank and its variables stay."""
    pids = rank_pids(cluster)
    with pytest.raises(RankFailed, match=r"^rank 1 of 2 raised; the cluster is still running\.\n\n--- rank 1 called "
                                         r"sys\.exit\(3\) ---"):
        cluster.run_code("import sys\nkept = rank\nif rank == 1:\n    sys.exit(3)")
    assert cluster.run_code("kept") == [0, 1] and rank_pids(cluster) == pids


def test_a_value_that_cannot_travel_back_is_named_and_the_rank_keeps_it(cluster):
    with pytest.raises(RankFailed, match=r"^2 ranks \(0, 1\) of 2 could not send their values back; the cluster is "
                                         r"still running\.\n\n--- rank \d gave, as the cell's last line, a lock that "
                                         r"cannot be pickled back to the notebook \(TypeError: .*\)\. End the cell "
                                         r"with a statement") as caught:
        cluster.run_code("import threading\nlock = threading.Lock()\nlock")
    assert "Traceback" not in str(caught.value) and "payload" not in str(caught.value)
    with pytest.raises(RankFailed, match=r"--- rank \d holds in that variable a lock that cannot be pickled back"):
        cluster.pull("lock")
    assert cluster.run_code("lock.acquire()") == [True, True]   # the rank kept it


def test_a_value_the_notebook_cannot_load_names_its_rank(cluster, tmp_path):
    """A class from a module only the ranks import pickles there, by reference, and cannot be loaded here."""
    (tmp_path / "only_on_ranks.py").write_text("class Thing:\n    pass\n")
    with pytest.raises(ResultNotPicklable, match=r"^rank 0 sent back a value this notebook cannot load "
                                                 r"\(ModuleNotFoundError: No module named 'only_on_ranks'\): .*"
                                                 r"the cluster is still running\.$"):
        cluster.run_code(f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\nimport only_on_ranks\n"
                         "only_on_ranks.Thing()")
    assert cluster.run_code("type(only_on_ranks.Thing()).__name__") == ["Thing", "Thing"]


def test_a_value_that_needs_the_ranks_group_to_load_is_not_blamed_on_an_import(cluster):
    """A DDP model pickles on the rank, but rebuilding it asks for the default process group, which the notebook
    has not: the message says so, and does not blame a module the notebook cannot import."""
    cluster.run_code("wrapped = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))")
    with pytest.raises(ResultNotPicklable, match=r"^rank 0 sent back a value this notebook cannot load \(ValueError: "
                                                 r"Default process group .*\): rebuilding it needs what only the rank "
                                                 r"has .*a state_dict\); the cluster is still running\.$") as caught:
        cluster.pull("wrapped")
    assert "imported" not in str(caught.value)
    # any other reason to fail loading gets no guess: an exception class whose __init__ wants two arguments
    cluster.run_code("class BadBatch(Exception):\n    def __init__(self, what, size):\n        super().__init__(what)\n"
                     "bad = BadBatch('x', 3)")
    with pytest.raises(ResultNotPicklable, match=r"\(TypeError: .*missing 1 required positional argument.*\): return "
                                                 r"plain data made from it on the rank") as caught:
        cluster.pull("bad")
    assert "only the rank has" not in str(caught.value) and "imported" not in str(caught.value)


def test_a_cell_that_does_not_compile_is_refused_before_any_rank_runs_it(cluster):
    cluster.run_code("before = rank")
    with pytest.raises(CellSyntaxError) as caught:
        cluster.run_code("before = 'changed'\ndef f(:\n    pass", filename="<my cell>")
    assert (caught.value.syntax_error.filename, caught.value.syntax_error.lineno) == ("<my cell>", 2)
    assert caught.value._render_traceback_() == ['  File "<my cell>", line 2', "    def f(:", "          ^",
                                                 "SyntaxError: invalid syntax"]
    assert cluster.pull("before") == [0, 1]     # the first line never ran either


@pytest.mark.parametrize("source, line, error", [
    ("before = 'changed'\nreturn before", "    return before", "'return' outside function"),
    ("before = 'changed'\nbreak", "    break", "'break' outside loop"),
])
def test_a_cell_that_parses_but_does_not_compile_is_refused_before_any_rank_runs_it(cluster, source, line, error):
    cluster.run_code("before = rank")
    with pytest.raises(CellSyntaxError) as caught:
        cluster.run_code(source, filename="<my cell>")
    shown = caught.value._render_traceback_()
    assert shown[:2] == ['  File "<my cell>", line 2', line] and shown[-1] == f"SyntaxError: {error}"
    assert cluster.pull("before") == [0, 1]


@pytest.mark.parametrize("source", ["x = 1\n!ls", "%time x = 1", "x = 1\nx?"])
def test_ipython_syntax_in_a_cell_is_named_as_such(source):
    """A magic, a shell command or help in a %%ddp cell does not compile as Python; the SyntaxError says why (it was
    Python's alone). A SyntaxError of another kind gets no such hint. No rank is needed: refused before any runs."""
    from ddp_lab.launcher.arguments import check_source

    with pytest.raises(CellSyntaxError) as caught:
        check_source(source, "<my cell>")
    shown = caught.value._render_traceback_()
    assert shown[-2].startswith("SyntaxError") and shown[-1] == (
        "Hint: a %%ddp cell runs on the ranks as plain Python: IPython's magics (%time), shell commands (!ls) and "
        "help (x?) work only in the notebook's own cells")
    for other in ("def f(:\n    pass  # what?", "x = = 1  # why?", "x = 1 %"):
        with pytest.raises(CellSyntaxError) as caught:
            check_source(other, "<my cell>")
        assert "Hint" not in str(caught.value), other


def test_ranks_that_raised_and_ranks_whose_value_cannot_travel_back_are_said_to_have_failed(cluster):
    with pytest.raises(RankFailed, match=r"^2 ranks \(0, 1\) of 2 failed; the cluster is still running\.") as caught:
        cluster.run_code("import threading\nif rank == 0:\n    raise ValueError('x')\nthreading.Lock()")
    assert "--- rank 0 raised ValueError: x" in str(caught.value)
    assert "--- rank 1 gave, as the cell's last line, a lock that cannot be pickled back" in str(caught.value)


@pytest.mark.parametrize("command, error, match", [
    (lambda c: c.run(5), TypeError, r"^fn must be a function .*Pass the function itself \(cluster.run\(train\)\)"),
    (lambda c: c.run(lambda: 1), TypeError, r"^fn=\S*<lambda> takes no arguments, but cluster.run calls "
                                            r"fn\(rank, \*args\) .*or a lambda: cluster.run\(lambda rank: \.\.\., "
                                            r"\.\.\.\)\.$"),
    (lambda c: c.run_code(123), TypeError, r"^source must be a string of Python code, got int: e.g. cluster.run_code"),
    (lambda c: c.pull(123), TypeError, r"^name must be a variable name as a string, got int 123: e.g. cluster.pull"),
    (lambda c: c.pull("model.weight"), ValueError, r"^name 'model.weight' is not a variable name"),
])
def test_a_bad_command_is_refused_in_one_line_before_it_reaches_the_ranks(cluster, command, error, match, capsys):
    sent = cluster._group.outputs[0].lines[:]
    with pytest.raises(error, match=match) as caught:
        command(cluster)
    assert "\n" not in str(caught.value)
    assert cluster._group.outputs[0].lines == sent and capsys.readouterr().out == ""
    assert cluster.alive and cluster.run_code("rank") == [0, 1]


def test_status_names_the_collective_a_busy_rank_waits_in_without_waiting_for_it(cluster, tmp_path):
    """status() never waits for a command: rank 0 waits in all_reduce for rank 1, which sleeps.

    A rank that has run its command for over ASK_AFTER_S is asked for its stack (the hang report's
    signal): rank 0 is shown in all_reduce at its line of the cell, rank 1 (in time.sleep) in no
    collective; the cell is named as the notebook names it. A rank that cannot answer (stopped
    with SIGSTOP) costs status its bounded wait and is shown without a collective; the cell still
    ends with the right sum. From a terminal (another process, as while the kernel is busy in the
    cell), `python -m ddp_lab status` shows the same lines under the cluster's headline.
    """
    release = tmp_path / "release"  # rank 1 sleeps until it exists
    cell = (f"import os, time\nt = torch.ones(1)\nwhile rank == 1 and not os.path.exists({str(release)!r}):\n"
            "    time.sleep(0.01)\ndist.all_reduce(t)\nt.item()")
    values = {}
    cluster.name_cells({"<the waiting cell>": "Cell In[7]"})  # as %%ddp names a notebook's cell
    busy = threading.Thread(target=lambda: values.update(sum=cluster.run_code(cell, filename="<the waiting cell>")))
    began = time.monotonic()
    busy.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and cluster.status()[0].collective != "all_reduce":
            time.sleep(0.1)   # until rank 0 waits in all_reduce and is old enough to be asked (a loaded machine)
        took, statuses = STACK_WAIT_S, None
        for _ in range(3):   # the fastest of three: a busy machine may delay one rank's answer once
            started = time.monotonic()
            answered = cluster.status()
            if time.monotonic() - started < took:
                took, statuses = time.monotonic() - started, answered
        ran = time.monotonic() - began
        os.kill(rank_pids(cluster)[0], signal.SIGSTOP)
        try:
            started = time.monotonic()
            unanswered = cluster.status()
            took_unanswered = time.monotonic() - started
        finally:
            os.kill(rank_pids(cluster)[0], signal.SIGCONT)
        terminal = subprocess.run([sys.executable, "-m", "ddp_lab", "status"], capture_output=True, text=True,
                                  timeout=30)
    finally:
        release.touch()
        busy.join()
    assert statuses is not None, "status waited its whole STACK_WAIT_S three times although both ranks answer"
    assert STACK_WAIT_S <= took_unanswered < STACK_WAIT_S + 1.0, f"status took {took_unanswered:.2f} s"
    waiting, sleeping = statuses
    assert [s.pid for s in statuses] == rank_pids(cluster) and waiting.alive and sleeping.alive
    assert waiting.doing == sleeping.doing == "running Cell In[7]" and 0.5 < waiting.seconds < ran, waiting
    assert (waiting.collective, waiting.cell_line) == ("all_reduce", 5), waiting
    assert (sleeping.collective, sleeping.cell_line) == ("", None), sleeping
    assert all(s.rss > 50 * 2**20 for s in statuses)  # a rank has torch imported: well over 50 MB
    assert re.fullmatch(r"rank 0  pid \d+  alive  running Cell In\[7\] for \d\.\d s, in all_reduce \(line 5\)"
                        r"  RSS \d+ MB", waiting.line()), waiting.line()
    assert re.fullmatch(r"rank 1  pid \d+  alive  running Cell In\[7\] for \d\.\d s  RSS \d+ MB",
                        sleeping.line()), sleeping.line()
    assert unanswered[0].doing == "running Cell In[7]" and unanswered[0].collective == "", unanswered[0]
    shown = [without_clock(line) for line in terminal.stdout.splitlines()]
    assert without_clock(waiting.line()) in shown, (terminal.stdout, terminal.stderr)
    first = shown.index(without_clock(waiting.line()))
    assert shown[first + 1] == without_clock(sleeping.line()), terminal.stdout
    assert shown[first - 1].startswith(f"cluster of 2 ranks (gloo), started by pid {os.getpid()}, up "), \
        terminal.stdout
    assert values["sum"] == [2.0, 2.0]
    assert [(s.doing, s.seconds, s.collective) for s in cluster.status()] == [("idle", None, "")] * 2


def test_trivial_cell_overhead_is_small(cluster):
    timings = []
    for _ in range(30):
        started = time.perf_counter()
        cluster.run_code("pass")
        timings.append(time.perf_counter() - started)
    median = sorted(timings)[len(timings) // 2]
    print(f"trivial command on 2 ranks: median {median * 1000:.1f} ms")  # measured, not asserted


def test_a_rank_still_working_when_another_raised_is_waited_for(cluster, monkeypatch, capsys):
    """Rank 1 raises at once; rank 0 goes on in Python code for longer than the first look after a failure: the
    cell waits for it (its output arrives), then reports rank 1's error, and the cluster keeps its variables. It
    does not take rank 0, busy in Python code, for a rank stuck in a collective."""
    monkeypatch.setattr(command, "AFTER_FAILURE_S", 0.3)
    monkeypatch.setattr(command, "LOOK_AGAIN_S", 0.2)
    cluster.run_code("import time\nprecious = rank + 100")
    with pytest.raises(RankFailed, match=r"^rank 1 of 2 raised; the cluster is still running\."):
        cluster.run_code("if rank == 1:\n    raise ValueError('bad batch')\ntime.sleep(1.5)\nprint('rank 0 done')")
    assert capsys.readouterr().out == "[rank 0] rank 0 done\n"
    assert cluster.alive and cluster.run_code("precious") == [100, 101]


def test_a_cell_that_destroys_the_group_keeps_its_output_and_the_next_cell_has_a_group(cluster, capsys):
    """The cluster makes a fresh default group after the cell (a command of its own): the cell's Results still
    hold what it printed, and the next cell's collectives work."""
    results = cluster.run_code("print('hello from', rank)\ndist.destroy_process_group()")
    assert results.outputs == ["hello from 0\n", "hello from 1\n"]
    assert "made a fresh one on every rank" in capsys.readouterr().err
    assert cluster.run_code("t = torch.ones(1)\ndist.all_reduce(t)\nt.item()") == [2.0, 2.0]


def test_a_slow_cell_at_the_watchdog_is_interrupted_and_the_cluster_keeps_its_variables(cluster):
    """At the watchdog, ranks running Python code are interrupted as the stop button does: one line per rank says
    where, and the cluster and its variables stay: a cell that is only slow does not cost the cluster."""
    cluster.run_code("import time\nkept = rank * 7")
    with pytest.raises(LaunchTimeout) as caught:
        cluster.run_code("if rank == 1:\n    time.sleep(30)", timeout=1)
    message = str(caught.value)
    assert message.startswith("rank(s) 1 of 2 still running after timeout=1s, running Python code: interrupted there, "
                              "as the stop button does; the cluster keeps its ranks and their variables."), message
    assert re.search(r"--- rank 1 was still running after timeout=1s; interrupted at <ddp cell \d+>, line 2, in "
                     r"<module> ---", message), message
    assert caught.value.hint == ("If the work is just slow, give it a longer watchdog: timeout=SECONDS "
                                 "(timeout=None: no watchdog)."), caught.value.hint   # used directly: the API's words
    assert cluster.alive and cluster.run_code("kept") == [0, 7]


def test_a_command_that_ends_just_after_its_watchdog_keeps_its_values(cluster):
    """The watchdog fires while the ranks are still at work; by the time they are interrupted they have finished
    (their replies arrive then): no rank counts as timed out, and the command gives its values as if in time. Where
    only rank 0 finished, the message names rank 1 alone."""
    assert [cluster.run_code("import time\ntime.sleep(0)\nx = rank + 1\nx", timeout=0.0004) for _ in range(3)] \
        == [[1, 2]] * 3
    assert cluster.pull("x", timeout=0.0004) == [1, 2]
    with pytest.raises(LaunchTimeout) as caught:
        cluster.run_code("if rank == 1:\n    time.sleep(30)\nx", timeout=0.0004)
    message = str(caught.value)
    assert message.startswith("rank(s) 1 of 2 still running after timeout=0.0004s, running Python code"), message
    assert "--- rank 0" not in message and list(caught.value.failures) == [1], message
    assert cluster.alive and cluster.run_code("x") == [1, 2]


def test_a_rank_caught_asking_torch_distributed_a_question_is_not_in_a_collective():
    """At the watchdog a rank's stack can be in torch.distributed without waiting for anyone: dist.is_initialized()
    in the rank loop's reply after the command (a loaded machine caught both ranks there, and the cluster was shut
    down as if they were stuck in a collective), dist.get_rank() in a cell. Such a rank is interrupted, or its reply
    waited for; one in all_reduce, or in DDP's code, is in a collective."""
    from ddp_lab.launcher.reports import waiting_in

    def stack(*frames):
        return "Current thread (most recent call first):\n" + "".join(
            f'  File "{path}", line 10 in {name}\n' for path, name in frames)

    c10d = ".../site-packages/torch/distributed/distributed_c10d.py"
    assert waiting_in(stack((c10d, "WORLD"), (c10d, "is_initialized"), ("/x/ddp_lab/cluster/rank_loop.py", "serve"))) \
        == "elsewhere"
    assert waiting_in(stack((c10d, "get_rank"), ("<ddp cell 3>", "<module>"))) == "elsewhere"
    assert waiting_in(stack((".../site-packages/torch/distributed/c10d_logger.py", "wrapper"), (c10d, "all_reduce"),
                            ("<ddp cell 3>", "<module>"))) == "collective"
    assert waiting_in(stack((c10d, "get_rank"), (".../site-packages/torch/nn/parallel/distributed.py", "forward"))) \
        == "collective"


def test_a_command_whose_output_ends_after_the_watchdog_keeps_its_values(cluster, monkeypatch, capsys):
    """Every rank replied in time, but the end of its output is still being read when the watchdog fires (the
    notebook's reader threads lag behind the ranks' replies, as in a busy notebook: here each line takes 0.5 ms to
    read): the command waits for the rest of the output and gives its values, and the cluster keeps its ranks."""
    from ddp_lab.launcher import supervisor

    noise = supervisor.is_torch_log_noise

    def slowly(stream, line):
        time.sleep(0.0005)
        return noise(stream, line)

    monkeypatch.setattr(supervisor, "is_torch_log_noise", slowly)
    assert cluster.run_code("print('x\\n' * 1000, end='')\nrank", timeout=0.3) == [0, 1]
    assert cluster.alive and capsys.readouterr().out.startswith("[rank 0] x\n")


def test_a_pull_interrupted_says_each_rank_had_finished_the_pull(cluster, capsys, tmp_path):
    """The stop button during a pull (rank 1's value takes a while to pickle, rank 0's cannot be pickled): each
    rank's line says it had finished the pull, not a cell, and the cluster stays."""
    cluster.run_code(f"import threading, time\nclass Slow:\n    def __reduce__(self):\n"
                     f"        open({str(tmp_path / 'pickling')!r}, 'w').close()\n        time.sleep(1.5)\n"
                     "        return (int, (rank,))\nheld = threading.Lock() if rank == 0 else Slow()")
    capsys.readouterr()
    press_stop_when(tmp_path / "pickling", after=0.1)   # while rank 1 pickles
    with pytest.raises(KeyboardInterrupt):
        cluster.pull("held")
    err = capsys.readouterr().err
    assert "[rank 0] had finished the pull\n[rank 1] had finished the pull\n" in err, err
    assert cluster.alive and cluster.run_code("del held\nrank") == [0, 1]


def test_a_pull_still_on_its_way_after_the_grace_is_waited_for_and_the_cluster_stays(cluster, monkeypatch, capsys):
    """The stop button during a pull whose values take longer than the grace to arrive (a large tensor; here the
    notebook reads each body a second late): the ranks had finished the pull and cannot be interrupted, so they are
    not stuck. A line says what is waited for, the pull ends with its values and the cluster stays (it was shut down
    as stuck "in C++ code")."""
    monkeypatch.setattr(command, "INTERRUPT_GRACE_S", 0.3)
    monkeypatch.setattr(command, "INTERRUPT_CHECK_S", 0.1)
    cluster.run_code("held = torch.full((1_000_000,), float(rank))")   # 4 MB: more than a socket's buffer
    read = channel._read_exactly

    arriving = threading.Event()   # a value's body has reached the notebook: the ranks finished the pull

    def late(sock, size):
        if size > 1 << 20:
            arriving.set()
            time.sleep(1.0)
        return read(sock, size)

    monkeypatch.setattr(channel, "_read_exactly", late)
    capsys.readouterr()
    press_stop_when(arriving)
    assert [float(t[0]) for t in cluster.pull("held")] == [0.0, 1.0]
    assert ("rank(s) 0, 1 had finished the pull and are sending their values to the notebook, which cannot be "
            "interrupted; waiting for them (press stop again to shut the cluster down).") in capsys.readouterr().err
    assert cluster.alive and cluster.run_code("del held\nrank") == [0, 1]


def test_a_value_whose_pickling_runs_the_cells_code_is_not_waited_for_forever(monkeypatch, capsys):
    """A class of the cell whose __reduce__ never returns: at the watchdog its ranks run the cell's code, not bytes
    on their way, so they are stopped as before (and no 'press stop again' is said: nobody pressed it)."""
    monkeypatch.setattr(command, "INTERRUPT_GRACE_S", 0.3)
    monkeypatch.setattr(command, "INTERRUPT_CHECK_S", 0.1)
    live = ddp_lab.Cluster(2, backend="gloo")
    pids = rank_pids(live)
    live.run_code("import time\nclass Stuck:\n    def __reduce__(self):\n        time.sleep(10 ** 6)\nheld = Stuck()")
    with pytest.raises(LaunchTimeout, match=r"still running .*after the interrupt.*__reduce__"):
        live.pull("held", timeout=1)
    assert "press stop again" not in capsys.readouterr().err
    assert not live.alive and wait_gone(pids) == []


def test_a_cells_figures_travel_to_the_notebook_in_the_order_shown(cluster):
    """Figures a cell draws come back as PNG bytes per rank: those plt.show() took, then those open at the end, then a
    figure that ends the cell without being open (made without pyplot); all are closed on the rank afterwards, and a
    figure that ends a %%ddp cell is shown as a picture, not as its repr. (A rank inherited the kernel's inline
    backend: plt.show() printed 'Figure(640x480)'.)"""
    drawn = cluster.run_code(
        "import matplotlib.pyplot as plt\nfrom matplotlib.figure import Figure\n"
        "plt.figure(figsize=(1, 1)); plt.show()\n"
        "plt.figure(figsize=(2, 1)); plt.figure(figsize=(3, 1))\n"
        "made = Figure(figsize=(1 + rank, 2)); made.add_subplot().plot([0, 1])\nmade", display=True)
    assert list(drawn) == [None, None]   # no "<Figure size ...>" line: the figure itself is shown
    for rank, pictures in enumerate(drawn.figures):
        assert len(pictures) == 4 and all(picture.startswith(b"\x89PNG") for picture in pictures)
        widths = [int.from_bytes(picture[16:20], "big") for picture in pictures]   # the PNG header's width
        assert widths[0] < widths[1] < widths[2] and widths[3] > widths[0], widths
    assert cluster.run_code("plt.get_fignums()") == [[], []]
    assert cluster.run_code("x = 1").figures == [[], []]


def test_display_in_a_cell_prints_values_in_order_and_shows_figures_as_pictures(cluster, capsys):
    """display() in a %%ddp cell was a NameError on every rank (IPython's display is the kernel's): a value is
    printed as a cell's final value shows, in order with the rank's prints; a figure comes back as a picture, and
    one still open at the end of the cell is shown again, as in a kernel."""
    capsys.readouterr()
    drawn = cluster.run_code("import matplotlib.pyplot as plt\nprint('before')\ndisplay(rank, {'rank': rank}, None)\n"
                             "shown = plt.figure(figsize=(1, 1)); display(shown)\nprint('after')\nplt.close(shown)\n"
                             "kept = plt.figure(figsize=(2, 1)); display(kept)")
    assert capsys.readouterr().out == "".join(f"[rank {rank}] before\n[rank {rank}] {rank}\n[rank {rank}] {{'rank': "
                                              f"{rank}}}\n[rank {rank}] None\n[rank {rank}] after\n" for rank in range(2))
    for pictures in drawn.figures:
        widths = [int.from_bytes(picture[16:20], "big") for picture in pictures]   # the PNG header's width
        assert len(widths) == 3 and widths[0] < widths[1] == widths[2], widths
    with pytest.raises(RankFailed, match=r"ValueError: display\(\.\.\., display_id=\.\.\.\) on a rank: a %%ddp "
                                         r"cell's output cannot be updated in place"):
        cluster.run_code("display(rank, display_id=True)")


def test_more_ranks_than_cores_are_noted_once_with_the_first_cells_output(monkeypatch, capsys):
    """As a launch says it (tests/test_launch.py): a cluster of more ranks than cores prints the machine note once,
    with the first output of its cells (a %%ddp -n 4 on 2 cores said nothing, and ran slower)."""
    from ddp_lab.launcher import launch as launcher
    from ddp_lab.launcher import output

    monkeypatch.setattr(output, "_printed_notes", set())
    nprocs = launcher.cpu_cores() + 1
    with ddp_lab.Cluster(nprocs, backend="gloo") as live:
        capsys.readouterr()
        live.run_code("x = rank")
        assert capsys.readouterr() == ("", "")   # a cell that prints nothing: nothing, on every machine
        live.run_code("print(x)", show=[0])
        live.run_code("print(x)", show=[0])
    assert capsys.readouterr().out == (f"ddp_lab: nprocs={nprocs} is more than the {launcher.cpu_cores()} CPU cores: "
                                       "ranks take turns (slower, same results)\n[rank 0] 0\n[rank 0] 0\n")


def _draws(rank):
    import matplotlib.pyplot as plt
    plt.plot([0, rank])
    plt.show()
    plt.figure()


def _displays(rank):
    display(f"displayed by rank {rank}")   # noqa: F821 - a builtin in a kernel (IPython's) and on the ranks


def test_a_calls_figures_come_back_with_it_not_with_the_next_cell(cluster, capsys):
    """Figures drawn by a function run with cluster.run come back in its Results (they showed under the next cell).
    A function that calls display() finds it on the ranks, as in the kernel."""
    assert [len(pictures) for pictures in cluster.run(_draws).figures] == [2, 2]
    capsys.readouterr()
    cluster.run(_displays)
    assert capsys.readouterr().out == "[rank 0] 'displayed by rank 0'\n[rank 1] 'displayed by rank 1'\n"
    assert cluster.run_code("x = 1").figures == [[], []]


def test_the_stop_button_while_a_cells_figures_are_drawn_keeps_the_cluster(monkeypatch, capsys, tmp_path):
    """Drawing a cell's figures can take seconds (a large image, a slow artist): the stop button interrupts it as it
    interrupts the cell's code, and the cluster stays, the figures closed (it was shut down, blaming an
    `except KeyboardInterrupt` the cell did not have)."""
    monkeypatch.setattr(command, "INTERRUPT_GRACE_S", 0.5)
    live = ddp_lab.Cluster(2, backend="gloo")
    live.run_code(f"import time\nimport matplotlib.pyplot as plt\nfrom matplotlib.artist import Artist\n"
                  f"class Slow(Artist):\n    def draw(self, renderer):\n"
                  f"        open(f'{tmp_path}/{{rank}}', 'w').close()\n        time.sleep(3)\n")
    press_stop_when(*there(tmp_path))   # while both ranks draw
    with pytest.raises(KeyboardInterrupt):
        live.run_code("plt.gca().add_artist(Slow())")
    err = capsys.readouterr().err
    assert "interrupted; the cluster keeps its ranks and their variables" in err
    assert "[rank 0] interrupted while drawing its figures (at <ddp cell 0>, line 7, in draw): the cell's code had " \
           "ended, and its figures were dropped\n" in err, err
    assert live.alive and live.run_code("plt.get_fignums()") == [[], []]
    live.shutdown()


def test_a_stopped_cell_keeps_what_its_ranks_drew_and_one_bad_figure_loses_only_itself(cluster, capsys, tmp_path):
    """The stop button in a loop that plots its losses: the figure drawn so far comes with the KeyboardInterrupt (a
    %%ddp cell shows it, as a kernel shows a stopped cell's plot; it was dropped). A figure whose drawing raises is
    named, and the cell's other figures still come (one bad artist lost them all). The press comes while both ranks
    wait after plotting (a press inside plt.clf() leaves a figure half cleared, which the cell names as not drawn)."""
    cluster.run_code("import time\nimport matplotlib.pyplot as plt\nfrom matplotlib.artist import Artist\n"
                     "class Bad(Artist):\n    def draw(self, renderer):\n        raise ValueError('bad draw')\n")
    press_stop_when(*there(tmp_path))   # once both ranks have plotted
    with pytest.raises(KeyboardInterrupt) as stopped:
        cluster.run_code(f"losses = []\nfor step in range(1000):\n    losses.append(1 / (step + 1))\n"
                         f"    plt.clf(); plt.plot(losses)\n    if step == 2:\n"
                         f"        open(f'{tmp_path}/{{rank}}', 'w').close()\n        time.sleep(60)")
    assert [len(pictures) for pictures in stopped.value.figures] == [1, 1]
    capsys.readouterr()
    drawn = cluster.run_code("plt.figure().add_artist(Bad())\nplt.figure(); plt.plot([0, rank])")
    assert [len(pictures) for pictures in drawn.figures] == [1, 1]
    assert "[rank 0] ddp_lab: figure 1 of 2 could not be drawn (ValueError: bad draw); the others are shown" in \
        capsys.readouterr().err
    assert cluster.alive


def test_the_stop_button_inside_a_finalizer_still_stops_the_cell(cluster, capsys, tmp_path):
    """The stop button's KeyboardInterrupt can land in a `__del__` or a weakref callback (matplotlib's transforms
    have them), which the garbage collector runs between any two bytecodes; Python drops an exception raised there
    ("Exception ignored in ..."), and the cell ran on until the cluster was shut down. Here both ranks wait inside
    a finalizer for the press: the cell still ends with the KeyboardInterrupt and the cluster stays."""
    marks = there(tmp_path)
    press_stop_when(*marks)
    with pytest.raises(KeyboardInterrupt):
        cluster.run_code(f"import os, time\nclass Held:\n    def __del__(self):\n"
                         f"        if not os.path.exists(f'{tmp_path}/{{rank}}'):\n"
                         f"            open(f'{tmp_path}/{{rank}}', 'w').close()\n            time.sleep(10)\n"
                         f"for step in range(200):\n    Held()\n    time.sleep(0.05)")
    assert "Exception ignored" not in capsys.readouterr().err
    assert cluster.alive and cluster.run_code("step") == [0, 0]


def test_after_a_failure_a_rank_that_waits_in_a_collective_for_it_is_stuck(monkeypatch):
    """Rank 1 raises; rank 0 computes a moment, then waits in all_reduce for rank 1, which never comes: at the next
    look at its stack it is stuck there, and the cluster is shut down (its group is half-way through a
    collective)."""
    monkeypatch.setattr(command, "AFTER_FAILURE_S", 0.3)
    monkeypatch.setattr(command, "LOOK_AGAIN_S", 0.2)
    live = ddp_lab.Cluster(2, backend="gloo")
    pids = rank_pids(live)
    with pytest.raises(RankFailed, match=r"^rank\(s\) 0 of 2 still running after another rank failed; rank\(s\) 0 "
                                         r"wait in a collective") as caught:
        live.run_code("import time\nif rank == 1:\n    raise ValueError('x')\ntime.sleep(0.8)\n"
                      "dist.all_reduce(torch.ones(1))")
    assert "raise ValueError('x')" in str(caught.value) and "in all_reduce" in str(caught.value)
    assert not live.alive and wait_gone(pids) == []


def test_after_a_failure_a_rank_waiting_in_ddps_backward_is_stuck_in_a_collective(monkeypatch):
    """Rank 1 raises between its forward and its backward; rank 0's backward waits in C++ for DDP's gradient
    all-reduce, its Python stack showing only autograd's engine: that is a collective too (reports.in_backward), so
    the cell ends at the first look with rank 1's error and a hint about DDP's backward (rank 0 was taken for Python
    code the cell could wait for, then at the watchdog for a rank that caught the interrupt, rank 1's error lost)."""
    monkeypatch.setattr(command, "AFTER_FAILURE_S", 0.5)
    live = ddp_lab.Cluster(2, backend="gloo")
    with pytest.raises(RankFailed, match=r"^rank\(s\) 0 of 2 still running after another rank failed; rank\(s\) 0 "
                                         r"wait in a collective") as caught:
        live.run_code("from torch.nn.parallel import DistributedDataParallel as DDP\ntorch.manual_seed(0)\n"
                      "model = DDP(torch.nn.Linear(64, 1))\nx = torch.randn(32, 64)\nfor step in range(3):\n"
                      "    loss = model(x).pow(2).mean()\n    if rank == 1 and step == 1:\n"
                      "        raise ValueError('nan loss on rank 1')\n    loss.backward()", timeout=60)
    message = str(caught.value)
    assert "ValueError: nan loss on rank 1" in message and not live.alive
    assert "rank(s) 0 wait inside backward (in C++: a DDP model all-reduces its gradients there" in message, message


def test_the_stop_button_after_a_rank_failed_keeps_its_error(monkeypatch, capsys, tmp_path):
    """Rank 1 raises and rank 0 waits in all_reduce for it; the stop button is pressed before the cluster looks at
    rank 0 again: rank 0 cannot stop (inside a collective), the cluster is shut down, and rank 1's error comes with
    the line that says so (it was dropped, and the stop button blamed)."""
    monkeypatch.setattr(command, "AFTER_FAILURE_S", 30.0)
    live = ddp_lab.Cluster(2, backend="gloo")
    press_stop_when(*there(tmp_path), after=0.5)   # rank 1 has raised, rank 0 is in all_reduce
    with pytest.raises(KeyboardInterrupt):
        live.run_code(f"open(f'{tmp_path}/{{rank}}', 'w').close()\nif rank == 1:\n"
                      f"    raise ValueError('the real error on rank 1')\ndist.all_reduce(torch.ones(1))")
    err = capsys.readouterr().err
    assert "rank(s) 1 failed before the interrupt, and rank(s) 0 of 2 still running" in err, err
    assert "ValueError: the real error on rank 1" in err and "in all_reduce" in err and not live.alive


def test_a_value_that_cannot_travel_back_while_a_rank_is_stuck_in_a_collective_is_named(monkeypatch):
    """Rank 1 ends the cell with a lock (its value cannot be pickled back), rank 0 waits in all_reduce: the report
    names rank 1's value and rank 0's collective."""
    monkeypatch.setattr(command, "AFTER_FAILURE_S", 0.3)
    live = ddp_lab.Cluster(2, backend="gloo")
    with pytest.raises(RankFailed, match=r"^rank\(s\) 0 of 2 still running after another rank failed") as caught:
        live.run_code("import threading\nif rank == 0:\n    dist.all_reduce(torch.ones(1))\nthreading.Lock()")
    assert "--- rank 1 gave, as the cell's last line, a lock that cannot be pickled back" in str(caught.value)
    assert "in all_reduce" in caught.value.failures[0].details and not live.alive


def test_at_the_watchdog_after_a_failure_the_failed_rank_comes_first(cluster, monkeypatch):
    """Rank 1 raises, rank 0 still runs Python code at the watchdog: rank 0 is interrupted (the cluster kept), and
    the message is the failure's: rank 1 named first, the interrupted rank after it."""
    monkeypatch.setattr(command, "AFTER_FAILURE_S", 0.3)
    monkeypatch.setattr(command, "LOOK_AGAIN_S", 0.2)
    with pytest.raises(RankFailed, match=r"^rank\(s\) 1 failed, and rank\(s\) 0 of 2 still running after timeout=1.5s, "
                                         r"running Python code: interrupted there") as caught:
        cluster.run_code("import time\nif rank == 1:\n    raise ValueError('bad')\ntime.sleep(30)", timeout=1.5)
    message = str(caught.value)
    assert caught.value.first_rank == 1 and message.index("--- rank 1 raised") < message.index("--- rank 0 was still")
    assert cluster.alive and cluster.run_code("rank") == [0, 1]


def test_a_cell_whose_every_rank_catches_the_interrupt_and_finishes_ends_with_its_values(cluster, capsys, tmp_path):
    """The stop button during a cell whose code catches KeyboardInterrupt (to save a checkpoint, say) and goes on to
    its end on every rank: the cell ends as a kernel's would, with its values and no interrupt message, and the
    ranks keep what the except block set. A cell where a rank lets it through is still interrupted."""
    inside = f"    open(f'{tmp_path}/{{rank}}', 'w').close()\n"   # both ranks are in the try: press
    press_stop_when(*there(tmp_path))
    assert cluster.run_code(f"import time\ntry:\n{inside}    time.sleep(30)\nexcept KeyboardInterrupt:\n"
                            f"    saved = rank\nrank * 10") == [0, 10]
    assert "interrupted" not in capsys.readouterr().err
    assert cluster.alive and cluster.run_code("saved") == [0, 1]
    for path in there(tmp_path):
        os.remove(path)
    press_stop_when(*there(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        cluster.run_code(f"import time\ntry:\n{inside}    time.sleep(30)\nexcept KeyboardInterrupt:\n"
                         f"    if rank == 1:\n        raise\nrank")
    assert "ddp_lab: interrupted; the cluster keeps its ranks" in capsys.readouterr().err
    assert cluster.alive


def test_a_cell_that_catches_the_interrupt_is_named_as_such(monkeypatch):
    """The watchdog interrupts a cell whose code catches KeyboardInterrupt and goes on: after the grace the message
    says so, and where (not C++ code, where Python cannot interrupt)."""
    monkeypatch.setattr(command, "INTERRUPT_GRACE_S", 1.0)
    live = ddp_lab.Cluster(2, backend="gloo")
    with pytest.raises(LaunchTimeout) as caught:
        live.run_code("import time\ntry:\n    time.sleep(30)\nexcept KeyboardInterrupt:\n    time.sleep(30)",
                      timeout=1)
    assert re.search(r"in the cell's code \(<ddp cell \d+>, line 5 in <module>\): it caught the KeyboardInterrupt "
                     r"and went on \(an `except KeyboardInterrupt:` or a bare `except:`\)", str(caught.value)), \
        str(caught.value)
    assert not live.alive


def test_a_rank_that_fails_shows_its_output_whatever_ranks_are_shown(cluster, capsys):
    """show=[0] (--ranks 0) picks whose output a cell shows; a rank that fails shows what it printed before it failed
    too (it was dropped, its error alone shown: nothing is lost). The ranks that did not fail stay hidden."""
    with pytest.raises(RankFailed):
        cluster.run_code("print('before', rank)\nif rank == 1:\n    raise ValueError('on rank 1')", show=[0])
    assert capsys.readouterr().out == "[rank 0] before 0\n[rank 1] before 1\n"
    cluster.run_code("print('after', rank)", show=[0])
    assert capsys.readouterr().out == "[rank 0] after 0\n"


def test_output_a_rank_prints_between_cells_comes_with_the_next_and_old_output_is_let_go(cluster, capsys):
    """A thread of a rank prints while no cell runs: the next cell shows it first (as a kernel shows a background
    thread's output in the cell that runs), none of it lost. The cluster keeps only the output of the cell that
    runs: a thousand lines of an earlier cell are not kept, nor carried in a later failure."""
    cluster.run_code("import threading, time\nif rank == 1:\n    threading.Timer(0.1, print, ('tick',)).start()")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and ("stdout", "tick\n") not in cluster._group.outputs[1].lines:
        time.sleep(0.01)   # the tick has reached the notebook, between cells
    cluster.run_code("print('next cell')", show=[0])
    assert capsys.readouterr().out == "[rank 1] tick\n[rank 0] next cell\n"
    cluster.run_code("for i in range(1000):\n    print('step', i)", show=[])
    with pytest.raises(RankFailed) as caught:
        cluster.run_code("raise ValueError('later')")
    assert "step 999" not in "".join(caught.value.outputs)
    assert all(len(output.lines) < 10 for output in cluster._group.outputs)


def test_a_streamed_command_prints_each_line_as_it_arrives_once(cluster, monkeypatch, tmp_path):
    """stream=True (`%%ddp --stream`): a line reaches the notebook while the command still runs. Each rank prints,
    then waits for a file that only the notebook's stdout creates, when it sees that line: printed at the end
    instead, as without stream, the ranks would wait until the watchdog. Every line comes once, in Results too, and
    the next command prints rank by rank again."""
    released = tmp_path / "released"

    class Notebook(io.StringIO):
        def write(self, text):
            if "waiting" in text:
                released.touch()
            return super().write(text)

    notebook = Notebook()
    monkeypatch.setattr(sys, "stdout", notebook)
    results = cluster.run_code(f"import os, time\nprint('waiting', flush=True)\nwhile not os.path.exists("
                               f"{str(released)!r}):\n    time.sleep(0.01)\nprint('released')", stream=True,
                               timeout=5, show=[1])
    assert notebook.getvalue() == "[rank 1] waiting\n[rank 1] released\n"
    assert results.outputs == ["waiting\nreleased\n"] * 2
    cluster.run_code("print('next')")
    assert notebook.getvalue().endswith("released\n[rank 0] next\n[rank 1] next\n")


def test_a_training_loop_slow_at_the_watchdog_is_not_called_stuck():
    """Rank 1 computes between all-reduces, rank 0 waits in them: at the watchdog a rank is inside a collective, so
    the cluster cannot be kept, but the ranks' stacks change, or rank 1 uses the CPU, within half a second, and the
    message says the cell is slow, not that a rank skipped a collective. (Should both ranks be caught in Python code,
    they are interrupted instead: the cluster is kept, or, if rank 0 entered the all-reduce meanwhile, ended.)"""
    live = ddp_lab.Cluster(2, backend="gloo")
    with pytest.raises(LaunchTimeout) as caught:
        live.run_code("a = torch.randn(200, 200)\nt = torch.zeros(10)\nfor step in range(10**6):\n"
                      "    for _ in range(20 * rank):\n        a = torch.tanh(a @ a)\n    dist.all_reduce(t)",
                      timeout=2)
    message = str(caught.value)
    assert "skipped" not in message, message
    assert ("the ranks were still working (their stacks changed, or they used the CPU" in message
            and not live.alive) or ("interrupted there" in message and live.alive) or \
        ("after the interrupt, in all_reduce" in message and not live.alive), message   # rank 0 entered it meanwhile
    live.shutdown()


def test_a_stuck_collective_is_caught_and_the_cluster_shut_down():
    live = ddp_lab.Cluster(2, backend="gloo")
    pids = rank_pids(live)
    with pytest.raises(LaunchTimeout, match=r"rank\(s\) 0 of 2 still running after timeout=2s") as caught:
        live.run_code("if rank == 0:\n    dist.all_reduce(torch.ones(1))", timeout=2)
    assert "in all_reduce" in str(caught.value) and "start a fresh one" in str(caught.value)
    # torch's frames named from site-packages on: the same stack on every machine, wherever the environment lives
    assert '  File ".../site-packages/torch/distributed/distributed_c10d.py", line' in caught.value.failures[0].details
    assert sys.prefix not in str(caught.value)
    assert not live.alive and wait_gone(pids) == []
    with pytest.raises(RuntimeError, match=r"shut down.*fresh one"):
        live.run_code("pass")


def test_a_cluster_used_directly_says_to_make_a_new_one_once_shut_down():
    """Running the cell again does not revive a Cluster used directly: its messages say to make a new one."""
    live = ddp_lab.Cluster(2, backend="gloo")
    live.shutdown()
    for call in (lambda: live.run_code("pass"), lambda: live.pull("x"), live.status):
        with pytest.raises(RuntimeError) as caught:
            call()
        assert str(caught.value) == "this cluster was shut down: start a fresh one with ddp_lab.Cluster(...).", \
            str(caught.value)


def test_a_slow_training_loop_shut_down_at_the_watchdog_says_so_in_sentences():
    """Rank 0 waits in all_reduce, rank 1 computes on in Python: the cluster cannot be kept, and the hint says the
    cell is slow; its sentences start with a capital letter, and it says how to start afresh."""
    live = ddp_lab.Cluster(2, backend="gloo")
    with pytest.raises(LaunchTimeout) as caught:
        live.run_code("if rank == 0:\n    dist.all_reduce(torch.ones(1))\nelse:\n    while True:\n        pass",
                      timeout=1)
    hint = caught.value.hint
    assert hint.startswith("the ranks were still working") and not live.alive, hint
    assert hint.endswith("Give it a longer watchdog (timeout=SECONDS, or timeout=None for none): a rank inside a "
                         "collective cannot be interrupted safely, so the cluster was shut down; start a fresh one "
                         "with ddp_lab.Cluster(...)."), hint


def test_a_crashing_rank_shuts_the_cluster_down():
    live = ddp_lab.Cluster(2, backend="gloo")
    pids = rank_pids(live)
    with pytest.raises(RankCrashed, match=r"rank 1 died with exit code 5"):
        live.run_code("import os\nif rank == 1:\n    os._exit(5)\ndist.barrier()")
    assert not live.alive and wait_gone(pids) == []


INTERRUPTED_KERNEL = textwrap.dedent("""
    import signal
    # A Jupyter kernel installs its own SIGINT handler; do the same, because a test runner
    # started in the background (e.g. `cmd &` in a script) passes SIGINT down as ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import ddp_lab
    cluster = ddp_lab.Cluster(2, backend="gloo")
    print(" ".join(str(p.pid) for p in cluster._group.processes), flush=True)
    cluster.run_code("kept = rank + 10")

    def interrupted(source):
        print("running", flush=True)
        try:
            cluster.run_code(source)
        except KeyboardInterrupt:
            print("interrupted; cluster alive:", cluster.alive, flush=True)

    interrupted("import time\\nprint('sleeping', flush=True)\\ntime.sleep(60)")
    print("kept:", cluster.run_code("kept"), flush=True)
    interrupted("import time\\nif rank == 0:\\n    time.sleep(60)\\nelse:\\n    dist.all_reduce(torch.ones(1))")
""")


def test_interrupt_keeps_the_cluster_unless_a_rank_is_stuck_in_a_collective():
    """Jupyter's stop button (SIGINT to the kernel's process group) during %%ddp cells.

    A rank in Python code raises KeyboardInterrupt there and the cluster keeps its ranks and
    variables; a rank blocked in a collective that its interrupted peer never joins cannot be
    interrupted: after the grace period one line says so and the cluster is shut down.
    """
    kernel = subprocess.Popen([sys.executable, "-c", INTERRUPTED_KERNEL], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        pids = [int(p) for p in kernel.stdout.readline().split()]
        printed = []
        for _ in range(2):
            while (line := kernel.stdout.readline()) not in ("running\n", ""):
                printed.append(line)
            time.sleep(0.7)  # the cell is running on the ranks
            os.killpg(kernel.pid, signal.SIGINT)
        out, err = kernel.communicate(timeout=30)
    finally:
        if kernel.poll() is None:
            kernel.kill()
    first, second = "".join(printed), out
    assert "[rank 0] sleeping" in first, "output printed before the interrupt is shown"
    assert "interrupted; cluster alive: True\nkept: [10, 11]\n" in first, (out, err)
    assert "[rank 0] interrupted at <ddp cell 1>, line 3, in <module>\n" in err, err
    assert "ddp_lab: interrupted; the cluster keeps its ranks and their variables." in err
    assert "interrupted; cluster alive: False" in second, (out, err)
    assert re.search(r"ddp_lab: rank\(s\) 1 of 2 still running \d\.\ds after the interrupt, in all_reduce, waiting for "
                     r"ranks that were interrupted before they joined it\. The cluster was shut down;", err), err
    assert wait_gone(pids) == []


def test_ranks_left_in_different_collectives_after_an_interrupt_are_said_to_be(monkeypatch, capsys, tmp_path):
    """The stop button while rank 0 waits in barrier and rank 1 in all_reduce: neither stops, and the line says they
    called different collectives, not that a rank was interrupted before it joined."""
    monkeypatch.setattr(command, "INTERRUPT_GRACE_S", 1.0)
    live = ddp_lab.Cluster(2, backend="gloo")
    capsys.readouterr()
    press_stop_when(*there(tmp_path), after=0.3)   # both ranks are in their collectives
    with pytest.raises(KeyboardInterrupt):
        live.run_code(f"open(f'{tmp_path}/{{rank}}', 'w').close()\nif rank == 0:\n    dist.barrier()\nelse:\n"
                      f"    dist.all_reduce(torch.ones(2))")
    err = capsys.readouterr().err
    assert re.search(r"ddp_lab: rank\(s\) 0, 1 of 2 still running \d\.\ds after the interrupt, in all_reduce "
                     r"\(rank\(s\) 1\) and in barrier \(rank\(s\) 0\): they called different collectives, and each "
                     r"waits for the others to call the same one\. The cluster was shut down; start a fresh one with "
                     r"ddp_lab\.Cluster\(\.\.\.\)\.$", err, re.M), err
    assert "interrupted before" not in err and not live.alive


def without_clock(line: str) -> str:
    """A status line without what changes from one reading to the next (seconds, memory)."""
    return re.sub(r"RSS \d+ MB", "RSS _ MB", re.sub(r"for \d+\.\d s", "for _ s", line))


def plant_ended_clusters(folder) -> None:
    """Work folders of clusters whose kernel has ended, as a killed kernel leaves them: one whose lock
    is free (its kernel pid, this process's, runs on: the lock alone tells), one without a lock
    whose kernel pid is now another process (this one, started later than that kernel)."""
    for name, lock in (("lock-free", True), ("no-lock", False)):
        path = folder / f"{CLUSTER_PREFIX}{name}"
        path.mkdir()
        if lock:
            (path / LOCK_NAME).touch()
        Registration(str(path), 2, "gloo", [], {})  # this process as the kernel, no ranks
        if not lock:
            entry = json.loads((path / ENTRY_NAME).read_text())
            entry["kernel_started"] -= 3600
            (path / ENTRY_NAME).write_text(json.dumps(entry))


def test_shutdown_leaves_no_rank_behind_nor_a_listed_cluster(monkeypatch, tmp_path, capsys):
    """`python -m ddp_lab status` lists a live cluster (idle ranks) until its shutdown, then says there
    is none; clusters whose kernel has ended are never listed."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this test's work folders only, whatever else runs
    live = ddp_lab.Cluster(3, backend="gloo")
    pids = rank_pids(live)
    assert live.run_code("rank") == [0, 1, 2]  # each rank has written its record since: idle, not starting
    plant_ended_clusters(tmp_path)
    assert command_line(["status"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert len(shown) == 4, shown
    assert shown[0].startswith(f"cluster of 3 ranks (gloo), started by pid {os.getpid()}, up "), shown
    for rank, (pid, line) in enumerate(zip(pids, shown[1:])):
        assert re.fullmatch(rf"rank {rank}  pid {pid}  alive  idle  RSS \d+ MB", line), shown
    live.shutdown()
    live.shutdown()  # idempotent
    assert wait_gone(pids) == []
    assert command_line(["status"]) == 0
    assert capsys.readouterr().out.startswith("no live cluster: no kernel of yours runs one now")


def test_the_command_line_lists_the_status_command(capsys):
    with pytest.raises(SystemExit) as ended:
        command_line(["--help"])
    assert ended.value.code == 0
    assert re.search(r"\n    status +show what each rank of your live clusters is doing", capsys.readouterr().out)


def test_warm_launches_fork_from_the_zygote_and_a_dead_zygote_is_replaced():
    ddp_lab.launch(lambda rank: rank, nprocs=1, backend="gloo")  # makes sure a zygote is being prepared
    zygote = procstart.settled_zygote()
    assert zygote is not None
    parents = ddp_lab.launch(lambda rank: os.getppid(), nprocs=2, backend="gloo")
    assert parents == [zygote.popen.pid] * 2, "warm ranks are children of the zygote"
    os.kill(zygote.popen.pid, signal.SIGKILL)
    zygote.popen.wait()
    assert ddp_lab.launch(lambda rank: rank * 2, nprocs=2, backend="gloo") == [0, 2]  # cold, transparently
    replacement = procstart.ready_zygote()
    assert replacement is not None and replacement.popen.pid != zygote.popen.pid


def test_forked_ranks_get_their_own_random_state():
    draws = ddp_lab.launch(lambda rank: __import__("random").random(), nprocs=2, backend="gloo")
    assert draws[0] != draws[1]


def test_the_ddp_magic_in_an_ipython_shell(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "ddp_lab")
    result = shell.run_cell("%%ddp -n 2 --backend gloo\nvalue = torch.tensor([float(rank)])\ndist.all_reduce(value)\n"
                            "print('sum', value.item())")
    assert result.success, result.error_in_exec
    assert capsys.readouterr().out.endswith("[rank 0] sum 1.0\n[rank 1] sum 1.0\n")
    shell.run_cell("pulled = %ddp_pull value")
    assert [t.item() for t in shell.user_ns["pulled"]] == [1.0, 1.0]
    result = shell.run_cell("%%ddp --ranks 0\nprint('from', rank)")
    assert result.success and capsys.readouterr().out == "[rank 0] from 0\n"
    failed = shell.run_cell("%%ddp --nonsense\npass")
    assert isinstance(failed.error_in_exec, ValueError)
    capsys.readouterr()
    # each rank's figure is shown under a line naming its rank (IPython's plain shell shows a picture by its repr)
    assert shell.run_cell("%%ddp\nimport matplotlib.pyplot as plt\nplt.plot([0, rank])\nplt.show()").success
    assert capsys.readouterr().out == ("[rank 0] figure\n<IPython.core.display.Image object>\n"
                                       "[rank 1] figure\n<IPython.core.display.Image object>\n")
    # a cell that fails after drawing still shows what was drawn, then its error (nothing is lost)
    failed = shell.run_cell("%%ddp\nplt.plot([rank, 0])\nif rank == 1:\n    raise ValueError('after the plot')")
    assert isinstance(failed.error_in_exec, RankFailed) and "after the plot" in str(failed.error_in_exec)
    out = capsys.readouterr().out
    assert out.startswith("[rank 0] figure\n<IPython.core.display.Image object>\n[rank 1] figure\n"), out
    shell.run_line_magic("ddp_shutdown", "")


@pytest.fixture(scope="module")
def ddp_shell():
    """An IPython shell with the magics loaded; its live cluster is shut down after the module's tests."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "ddp_lab")
    yield shell
    shell.run_line_magic("ddp_shutdown", "")


@pytest.mark.parametrize("line, match", [
    ("--backend glo", r"^%%ddp --backend glo: backend='glo' is not one of 'auto', 'gloo'"),
    # the library's words in the magic's: --timeout 60 and --timeout none, not timeout=60 and None
    ("--timeout -5", r"^%%ddp --timeout -5: --timeout must be a positive number of seconds or none \(no watchdog\), "
                     r"got -5.0: e.g. --timeout 60\.$"),
    ("--timeout inf", r"^%%ddp --timeout inf: --timeout inf is too long: .* or --timeout none for no watchdog"),
    ("-n 0", r"^%%ddp -n 0: -n must be at least 1, got 0: .*e\.g\. -n 2\.$"),
    ("-n 100000", r"^%%ddp -n 100000: -n 100000 is too many"),
    ("--ranks 9", r"^%%ddp --ranks 9: rank 9 is not a rank of this 2-rank cluster: show ranks from 0 to 1"),
    ("-n 4 --ranks 5", r"^%%ddp --ranks 5: rank 5 is not a rank of this 4-rank cluster"),
    ("--ranks one", r"^%%ddp --ranks one: give rank numbers separated by commas"),
    ("--ranks 0,0", r"^%%ddp --ranks 0,0: rank 0 is named twice: name each rank once"),
    ("--only 0 --only 1", r"^%%ddp: --only is given twice: give it once \(only the last would count\)$"),
    ("-n 2 --nprocs 3", r"^%%ddp: -n and --nprocs are one option, given twice: give it once"),
    ("--ranks=", r"^%%ddp --ranks : no rank given: name the ranks whose output to show"),
    ("--only 5", r"^%%ddp --only 5: rank 5 is not a rank of this 2-rank cluster: run on ranks from 0 to 1"),
    ("--only ,", r"^%%ddp --only \(no rank\): no rank given: name the ranks to run on"),
    ("--only 1 --ranks 0", r"^%%ddp --ranks 0: rank 0 is to be shown, but only rank\(s\) 1 run this: it would show "
                           r"nothing"),
    ("-n two", r"^%%ddp: argument -n/--nprocs: 'two' is not a whole number: give the number of ranks, e.g. -n 4"),
    ("--timeout soon", r"^%%ddp: argument --timeout: 'soon' is not a number of seconds"),
    ("--ranks '0", r"^%%ddp --ranks '0: no closing quotation: close the quote"),
])
def test_a_bad_ddp_option_is_refused_and_the_live_cluster_survives(line, match, ddp_shell, capsys):
    """The option is checked before the cell runs and before the cluster is restarted or shut down."""
    from ddp_lab.cluster import magics

    shell = ddp_shell
    if magics._current is None or not magics._current.alive or magics._current.nprocs != 2:
        assert shell.run_cell("%%ddp -n 2 --backend gloo\nkept = rank + 10").success
    live, pids = magics._current, rank_pids(magics._current)
    # the cell's source is shown in the traceback; its output ("the cell ran") must not be
    failed = shell.run_cell(f"%%ddp {line}\nprint('the cell', 'ran')")
    assert isinstance(failed.error_in_exec, MagicUsageError) and isinstance(failed.error_in_exec, ValueError)
    assert re.search(match, str(failed.error_in_exec)) and "\n" not in str(failed.error_in_exec)
    error = failed.error_in_exec  # no chained argparse/shlex traceback is shown above the line
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)
    shown = capsys.readouterr()   # one line, as IPython shows its own usage errors: no frames of the package
    assert shown.out == f"MagicUsageError: {error}\n" and "the cell ran" not in shown.out + shown.err
    assert magics._current is live and live.alive and rank_pids(live) == pids
    assert shell.run_cell("%ddp_pull kept").result == [10, 11]


def test_a_ddp_cell_that_does_not_compile_leaves_the_live_cluster_alone(ddp_shell, capsys):
    """The SyntaxError comes from the notebook, as IPython shows one, before the cluster is started or restarted."""
    from ddp_lab.cluster import magics

    shell = ddp_shell
    if magics._current is None or not magics._current.alive or magics._current.nprocs != 2:
        assert shell.run_cell("%%ddp -n 2 --backend gloo\nkept = rank + 10").success
    live, pids = magics._current, rank_pids(magics._current)
    failed = shell.run_cell("%%ddp -n 4\nprint('the cell', 'ran')\nfor x in range(3) print(x)")
    assert isinstance(failed.error_in_exec, CellSyntaxError) and failed.error_in_exec.syntax_error.lineno == 2
    shown = capsys.readouterr()
    assert "the cell ran" not in shown.out and "ddp_lab" not in shown.out + shown.err
    assert "    for x in range(3) print(x)\n" in shown.out and "SyntaxError: " in shown.out
    # named as IPython names the cell, not by the file it keeps the cell's text in
    assert re.search(r"^  Cell In\[\d+\], line 2$", shown.out, re.M) and ".py" not in shown.out, shown.out
    assert magics._current is live and live.alive and rank_pids(live) == pids   # -n 4 did not restart it


def test_only_runs_the_cell_on_some_ranks_and_a_collective_there_names_the_ranks_left_out(ddp_shell, capsys):
    """--only 0,2: ranks 0 and 2 run the cell, rank 1 keeps its namespace; a collective needs rank 1 too."""
    from ddp_lab.cluster import magics

    shell = ddp_shell
    assert shell.run_cell("%%ddp -n 3 --backend gloo\nx = rank").success
    capsys.readouterr()
    assert shell.run_cell("%%ddp --only 0, 2\nx = x + 100\nprint('ran')").success   # a space after the comma too
    # a machine with fewer than 3 cores says so once first (ddp_lab's machine note, dropped as stored outputs drop it)
    assert re.sub(r"(?m)^ddp_lab: [^\n]*\n", "", capsys.readouterr().out) == "[rank 0] ran\n[rank 2] ran\n"
    assert shell.run_cell("%ddp_pull x").result == [100, 1, 102]
    assert magics._current.run_code("rank * 2", only=[1]) == [None, 2, None]
    with pytest.raises(ValueError, match=r"^show=\[0\]: rank 0 is to be shown, but only rank\(s\) 1 run this"):
        magics._current.run_code("rank", show=[0], only=[1])
    live, pids = magics._current, rank_pids(magics._current)
    failed = shell.run_cell("%%ddp --only 0,2 --timeout 1\nx = x + 1\ndist.all_reduce(torch.ones(1))")
    error = failed.error_in_exec
    assert isinstance(error, LaunchTimeout), repr(error)
    assert str(error).startswith("rank(s) 0, 2 of 3 waited 1s in all_reduce, which rank(s) 1 did not join: the cell "
                                 "ran on rank(s) 0, 2 only (--only / only=), and a collective on the default group "
                                 "needs every rank. Drop --only to run the cell on every rank."), str(error)
    assert "\n" not in str(error) and "in all_reduce" in error.failures[0].details
    assert not live.alive and wait_gone(pids) == []


def test_the_help_says_how_ranks_and_only_differ(ddp_shell, capsys):
    from ddp_lab.cluster import magics

    assert ddp_shell.run_cell("%%ddp --help\nprint('the cell', 'ran')").success
    shown = " ".join(capsys.readouterr().out.split())
    assert "--ranks RANKS whose output to show" in shown and "every rank still runs the cell" in shown
    assert "--only ONLY which ranks run the cell" in shown and "drop --only for cells that communicate" in shown
    assert "--stream print each line as it arrives" in shown and "[--stream]" in shown
    assert "the cell ran" not in shown
    assert "--ranks chooses whose output is shown" in magics.ddp.__doc__ and "--only chooses" in magics.ddp.__doc__


def test_a_cell_shows_its_final_expression_on_each_rank_and_never_fails_for_it(ddp_shell, capsys):
    """As a kernel shows Out[n]: the repr of each rank's value, under the ranks' output; the value stays on the rank,
    so one that cannot travel to the notebook (a lock, a DDP model) shows too, instead of failing the cell."""
    shell = ddp_shell
    assert shell.run_cell("%%ddp -n 2 --backend gloo\nprint('hi')\nrank * 2").success
    assert capsys.readouterr().out == "[rank 0] hi\n[rank 1] hi\n[rank 0] Out: 0\n[rank 1] Out: 2\n"
    assert shell.run_cell("%%ddp --ranks 1\nimport threading\nlock = threading.Lock()\nlock").success
    assert re.fullmatch(r"\[rank 1\] Out: <unlocked _thread\.lock object at 0x[0-9a-f]+>\n", capsys.readouterr().out)
    assert shell.run_cell("%%ddp\ntorch.arange(3) * rank").success
    assert capsys.readouterr().out == "[rank 0] Out: tensor([0, 0, 0])\n[rank 1] Out: tensor([0, 1, 2])\n"
    assert shell.run_cell("%%ddp\nx = 1").success and capsys.readouterr().out == ""


def test_a_fresh_cluster_after_a_hang_keeps_the_size_and_another_size_says_what_is_lost(ddp_shell, capsys):
    """The cell after a hang starts a cluster of the same size and backend (not the default 2 ranks and
    'auto'); a cell asking for another size replaces the running cluster and says that its variables are gone."""
    from ddp_lab.cluster import magics

    shell = ddp_shell
    assert shell.run_cell("%%ddp -n 3 --backend gloo\nkept = rank").success
    capsys.readouterr()
    hung = shell.run_cell("%%ddp --timeout 1\nif rank == 0:\n    dist.all_reduce(torch.ones(1))")
    assert isinstance(hung.error_in_exec, LaunchTimeout) and not magics._current.alive
    assert shell.run_cell("%%ddp --ranks 0\nprint(world_size, dist.get_world_size(), dist.get_backend())").success
    assert capsys.readouterr().out.endswith("[rank 0] 3 3 gloo\n")
    assert shell.run_cell("%%ddp -n 2\nkept = rank").success
    assert ("ddp_lab: starting a cluster of 2 ranks in place of the running one (3 on gloo); its ranks' variables "
            "are gone.") in capsys.readouterr().err


def test_the_hints_of_a_ddp_cell_use_the_magics_words(ddp_shell, monkeypatch):
    """A %%ddp cell's hints say `--timeout SECONDS`, not the Python API's `timeout=`, and how to start afresh in a
    notebook: at the watchdog (a slow cell, interrupted; a rank stuck in a collective) and after a failure, where a
    longer watchdog would not help the ranks waiting for the failed one."""
    monkeypatch.setattr(command, "AFTER_FAILURE_S", 0.3)
    shell = ddp_shell
    assert shell.run_cell("%%ddp -n 2 --backend gloo\nimport time").success
    slow = shell.run_cell("%%ddp --timeout 1\nif rank == 1:\n    time.sleep(30)").error_in_exec
    assert isinstance(slow, LaunchTimeout) and slow.hint == ("If the work is just slow, give it a longer watchdog: "
                                                             "--timeout SECONDS (--timeout none: no watchdog)."), slow
    stuck = shell.run_cell("%%ddp --timeout 1\nif rank == 0:\n    dist.all_reduce(torch.ones(1))").error_in_exec
    assert isinstance(stuck, LaunchTimeout) and "timeout=" not in stuck.hint, stuck
    assert stuck.hint.endswith(" If the work is just slow, give it a longer watchdog: --timeout SECONDS (--timeout "
                               "none: no watchdog). The cluster was shut down; run the cell again to start a fresh "
                               "one."), stuck.hint
    failed = shell.run_cell("%%ddp\nif rank == 1:\n    raise ValueError('x')\ndist.all_reduce(torch.ones(1))")
    assert isinstance(failed.error_in_exec, RankFailed) and "timeout" not in failed.error_in_exec.hint, \
        failed.error_in_exec
    assert failed.error_in_exec.hint.endswith("The cluster was shut down; run the cell again to start a fresh one.")


def test_a_rank_that_dies_between_cells_is_named_and_the_next_cell_starts_afresh(ddp_shell, capsys):
    """SIGKILL a rank while no cell runs: the next cell gets one line naming it and how it died.

    Without it: "ddp_lab: interrupted..." (nothing was) and a raw BrokenPipeError.
    """
    from ddp_lab.cluster import magics

    shell = ddp_shell
    assert shell.run_cell("%%ddp -n 2 --backend gloo\nkept = rank").success
    live, pids = magics._current, rank_pids(magics._current)
    os.kill(pids[1], signal.SIGKILL)
    assert live._group.process_of(1).wait(10) == -signal.SIGKILL  # reaped: it died before the next cell
    capsys.readouterr()
    lines = repr(shell.run_line_magic("ddp_status", "")).splitlines()
    assert re.fullmatch(rf"rank 0  pid {pids[0]}  alive  idle  RSS \d+ MB", lines[0]), lines
    assert lines[1] == f"rank 1  pid {pids[1]}  dead (signal SIGKILL (9))", lines   # how it ended, at once
    failed = shell.run_cell("%%ddp\nprint('the cell', 'ran')")
    error, printed = failed.error_in_exec, capsys.readouterr()
    assert isinstance(error, RankCrashed), repr(error)
    assert str(error) == ("rank 1 of 2 died between cells (signal SIGKILL (9): killed from outside: often the "
                          "kernel's out-of-memory killer); the cluster was shut down: run the cell again to "
                          "start a fresh one."), str(error)
    assert error.failures[1].returncode == -signal.SIGKILL
    assert "the cell ran" not in printed.out and "interrupted" not in printed.err
    assert not live.alive and wait_gone(pids) == []
    assert shell.run_cell("%%ddp\nrank * 10").success  # a fresh cluster
    assert magics._current is not live and shell.run_cell("%ddp_pull kept").error_in_exec is not None
    assert shell.run_cell("%%ddp\nkept = rank + 1").success and shell.run_cell("%ddp_pull kept").result == [1, 2]


def test_a_cluster_made_in_a_thread_outlives_the_thread(monkeypatch):
    """Linux's PR_SET_PDEATHSIG follows the thread that started a process: ranks are started by a
    thread of ddp_lab's that lives as long as the kernel (starter.py). Cold ranks: started by Popen.

    Without it: the ranks died with the thread, the next command raised BrokenPipeError.
    """
    monkeypatch.setenv("DDP_LAB_WARM", "0")  # fresh interpreters, started from this process
    made = {}
    maker = threading.Thread(target=lambda: made.update(cluster=ddp_lab.Cluster(1, backend="gloo")))
    maker.start()
    maker.join()
    live = made["cluster"]
    try:
        time.sleep(0.3)  # the thread's end, and a death signal it would send, take effect
        assert live.run_code("rank") == [0]
    finally:
        live.shutdown()


ORPHAN_SCRIPT = textwrap.dedent("""
    import os, time, ddp_lab
    from ddp_lab.launcher import procstart
    ddp_lab.launch(lambda rank: rank, nprocs=1, backend="gloo")
    procstart.ready_zygote()
    cluster = ddp_lab.Cluster(2, backend="gloo")
    print(" ".join(str(p.pid) for p in cluster._group.processes), procstart._zygote.popen.pid, flush=True)
    time.sleep(60)
""")


def test_a_killed_kernel_leaves_no_orphans():
    """Kernel restart = the kernel process dies: the zygote and every rank must die with it."""
    kernel = subprocess.Popen([sys.executable, "-c", ORPHAN_SCRIPT], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in kernel.stdout.readline().split()]
        assert len(pids) == 3 and all(alive(p) for p in pids)
    finally:
        kernel.kill()
        kernel.wait()
    assert wait_gone(pids) == []


def ddp_then_destroy(rank):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    model(torch.randn(2, 4)).sum().backward()
    dist.destroy_process_group()
    return rank


def zygote_had_dynamo(rank):
    import sys

    return "torch._dynamo" in sys.modules   # before this function imported anything


def compile_disabled(rank):
    import torch._dynamo

    return torch._dynamo.config.disable   # TORCH_COMPILE_DISABLE, read when torch._dynamo is imported


def threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return int(next(line for line in status if line.startswith("Threads:")).split()[1])


def test_the_zygote_learns_what_its_ranks_import():
    """A fresh zygote lacks torch._dynamo; after a launch whose ranks built DDP (which imports it), a
    successor zygote imports it in the background and takes over, with no more threads than its
    predecessor; its ranks survive destroy_process_group() after DDP (with torch._dynamo preloaded
    this deadlocked in 5 of 8 launches before keepalive.py: pytorch#56297), and a launch that sets a
    variable torch._dynamo reads at import starts cold and obeys it."""
    procstart.shutdown_zygote()
    procstart.prepare_zygote()   # a fresh zygote, as a kernel's first launch starts
    first = procstart.ready_zygote()
    assert first is not None and first.imports == ()
    first_threads = threads(first.popen.pid)
    launched = ddp_lab.launch(zygote_had_dynamo, nprocs=2, backend="gloo")
    assert launched == [False, False] and launched.started == ["warm", "warm"] and procstart.ready_zygote() is first
    assert ddp_lab.launch(ddp_then_destroy, nprocs=2, init_process_group=False, timeout=30) == [0, 1]
    assert "torch._dynamo" in first.learned and procstart._successor is not None
    assert procstart._successor.wait_ready(60)
    # importing it started no thread (forking stays safe): both counted when just ready (import torch leaves one)
    assert threads(procstart._successor.popen.pid) <= first_threads
    assert ddp_lab.launch(zygote_had_dynamo, nprocs=2, backend="gloo") == [True, True]
    second = procstart.ready_zygote()
    assert second is not first and "torch._dynamo" in second.imports and not first.alive()
    for _ in range(3):
        assert ddp_lab.launch(ddp_then_destroy, nprocs=2, init_process_group=False, timeout=30) == [0, 1]
    assert ddp_lab.launch(compile_disabled, nprocs=2, backend="gloo") == [False, False]
    assert ddp_lab.launch(compile_disabled, nprocs=2, backend="gloo", env={"TORCH_COMPILE_DISABLE": "1"}) == [True, True]


def test_warm_ranks_get_their_own_torch_seed():
    import torch

    draws = [ddp_lab.launch(lambda rank: torch.rand(1).item(), nprocs=2, backend="gloo") for _ in range(2)]
    assert len({value for pair in draws for value in pair}) == 4, draws


def test_variables_the_notebook_gained_since_the_zygote_started_keep_launches_warm(monkeypatch):
    """Importing torch._inductor in the notebook sets TORCHINDUCTOR_CACHE_DIR there, after the zygote started: the
    ranks get it from the environment either way, so the launch stays warm (only env= variables read at import
    make a launch cold: test_the_zygote_learns_what_its_ranks_import)."""
    ddp_lab.launch(ddp_then_destroy, nprocs=2, init_process_group=False, timeout=30)   # the zygote learns torch._dynamo
    zygote = procstart.settled_zygote()
    assert zygote is not None and zygote.imports
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/gained-after-the-zygote-started")
    assert ddp_lab.launch(zygote_had_dynamo, nprocs=2, backend="gloo").started == ["warm", "warm"]


def test_ddp_help_alone_and_a_cell_written_as_a_script_or_ending_in_a_semicolon(ddp_shell, capsys):
    """`%ddp --help` (IPython points `%%ddp --help` in an empty cell there) lists the options; another `%ddp` line
    says to write `%%ddp`. A script's `if __name__ == "__main__":` block, false in a cell's module, is named before the
    cell runs (its definitions still run); a final `;` hides the cell's value, as in a notebook cell."""
    shell = ddp_shell
    shell.run_line_magic("ddp_shutdown", "")   # whatever the module's earlier tests left
    empty = shell.run_cell("%%ddp --help")
    assert "Did you mean the line magic %ddp (single %)?" in str(empty.error_in_exec)
    assert shell.run_cell("%ddp --help").success and "--stream" in capsys.readouterr().out
    refused = shell.run_cell("%ddp -n 2").error_in_exec
    assert isinstance(refused, MagicUsageError) and str(refused).startswith("%ddp -n 2: %%ddp (two %) is a cell magic")
    capsys.readouterr()
    script = "def main():\n    print('main ran')\n\nif __name__ == '__main__':\n    main()"
    assert shell.run_cell(f"%%ddp -n 2 --backend gloo\n{script}").success
    shown = capsys.readouterr()
    assert shown.out == "" and (   # after the line saying the cluster was replaced, where one of another size ran
        "ddp_lab: the block under `if __name__ == \"__main__\":` (line 4) does not run: a %%ddp cell runs in module "
        "__ddp__, so __name__ is '__ddp__' there (in a notebook cell it is '__main__'). Call what the block calls "
        "directly, e.g. main().\n") in shown.err
    assert shell.run_cell("%%ddp\nmain()").success and capsys.readouterr().out == "[rank 0] main ran\n[rank 1] main ran\n"
    assert shell.run_cell("%%ddp\nx = rank + 1\nx;  # hidden").success and capsys.readouterr().out == ""
    assert shell.run_cell("%%ddp\nx").success and capsys.readouterr().out == "[rank 0] Out: 1\n[rank 1] Out: 2\n"


def test_the_stop_button_while_the_cluster_starts_and_status_after_a_hang_say_what_happened(ddp_shell, capsys):
    """A press while the ranks start ends the cell with one line (no rank ran it), not the launcher's traceback;
    after a hang ended the cluster, %ddp_status and %ddp_pull say so and what the next cell does; an abbreviated
    option is a typo, not the option it begins."""
    from ddp_lab.cluster import magics

    shell = ddp_shell
    shell.run_line_magic("ddp_shutdown", "")
    def press_while_starting():   # the stop button once the notebook's thread is starting the cluster
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            frame, names = sys._current_frames().get(threading.main_thread().ident), set()
            while frame is not None:
                names.add(frame.f_code.co_name)
                frame = frame.f_back
            if "current_cluster" in names:
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.001)

    threading.Thread(target=press_while_starting, daemon=True).start()
    started = shell.run_cell("%%ddp -n 2 --backend gloo\nx = 1")
    assert type(started.error_in_exec).__name__ == "CellInterrupted", repr(started.error_in_exec)
    assert "ddp_lab: interrupted while the cluster was starting; no rank ran the cell.\n" in capsys.readouterr().err
    hung = shell.run_cell("%%ddp -n 2 --backend gloo --timeout 1\nif rank == 0:\n    dist.barrier()")
    assert isinstance(hung.error_in_exec, LaunchTimeout) and not magics._current.alive
    capsys.readouterr()
    assert shell.run_cell("%ddp_status").success
    assert capsys.readouterr().out == ("no live cluster: the last one (2 ranks on gloo) was shut down, as its cell "
                                       "reported; the next %%ddp cell starts a fresh one of that size, with empty "
                                       "namespaces.\n")
    assert str(shell.run_cell("%ddp_pull x").error_in_exec).startswith("no live cluster: the last one (2 ranks")
    typo = shell.run_cell("%%ddp --onl 1\nx = 1").error_in_exec
    assert isinstance(typo, MagicUsageError) and "unrecognized arguments: --onl 1" in str(typo)

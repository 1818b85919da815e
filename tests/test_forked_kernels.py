"""The test suite's forked kernels (tests/forked_kernels.py) are the kernels `python -m ipykernel_launcher` starts.

Real kernels through jupyter_client, one started the ordinary way and others forked from a template of this module's own:
what a cell sees is the same (sys.path, argv, working directory, environment, session, signal handlers, threads but the
relay's lifeline), torch is imported before any cell imports it, an interrupt reaches the cell, a killed kernel leaves
no process behind, and a kernel whose environment differs where `import torch` could read it starts the ordinary way.
Both kinds talk to the test process over Unix sockets, not TCP ports (conftest.py says why).
A notebook kernel's zygote forked from the suite's zygote template forks ranks that see what an ordinary zygote's see,
a zygote asked for other imports starts the ordinary way, and a forked zygote ends when ddp_lab retires it and when
its kernel ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import time

import psutil
import pytest
from jupyter_client import KernelManager
from jupyter_client.provisioning import local_provisioner

import forked_kernels

PROBE = """
import json, os, signal, sys, threading
print(json.dumps(dict(
    torch_imported="torch" in sys.modules, path=sys.path, argv0=os.path.basename(sys.argv[0]), argv_rest=len(sys.argv),
    cwd=os.getcwd(), main=__name__, session_leader=os.getsid(0) == os.getpid(), group_leader=os.getpgid(0) == os.getpid(),
    parent_pid_set=bool(os.environ.get("JPY_PARENT_PID")), variables=sorted(set(os.environ) - {"JPY_PARENT_PID"}),
    sigint=str(signal.getsignal(signal.SIGINT)), sigpipe=str(signal.getsignal(signal.SIGPIPE)),
    sigchld=str(signal.getsignal(signal.SIGCHLD)), sigterm=str(signal.getsignal(signal.SIGTERM)),
    threads=sorted(thread.name for thread in threading.enumerate()), pid=os.getpid(),
    random=__import__("random").random(), numpy_random=__import__("numpy").random.random(),
    unix_socket_paths=len({c.laddr for c in __import__("psutil").Process().net_connections("unix") if c.laddr}))))
"""


# jupyter_client's own launch (conftest.py keeps it as `.ordinary` when it installs the suite's template)
ordinary_launch = getattr(local_provisioner.launch_kernel, "ordinary", local_provisioner.launch_kernel)


@pytest.fixture(scope="module")
def module_template(tmp_path_factory):
    """A template of this module's own (one: each imports torch, 3 s of a core), made with the test process's
    environment as it is here; kernels start through it in the tests that ask for `template`."""
    template = forked_kernels.Template(str(tmp_path_factory.mktemp("template")))
    yield template
    template.close()


@pytest.fixture
def template(module_template, monkeypatch):
    """Kernels this test starts go through the module's template (whatever conftest.py installed)."""
    monkeypatch.setattr(local_provisioner, "launch_kernel",
                        lambda cmd, **kwargs: ordinary_launch(module_template.kernel_command(cmd), **kwargs))
    return module_template


@contextlib.contextmanager
def kernel(cwd, shut_down: bool = True):
    """A kernel started by jupyter_client in `cwd` (through whatever launch_kernel is installed), and its client."""
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=str(cwd))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        yield manager, client
    finally:
        client.stop_channels()
        if shut_down:
            manager.shutdown_kernel()


def printed(client, code: str) -> str:
    out = []
    client.execute_interactive(code, timeout=60, output_hook=lambda message: out.append(message["content"].get("text", "")))
    return "".join(out)


def run_probe(cwd) -> dict:
    with kernel(cwd) as (_, client):
        return json.loads(printed(client, PROBE))


def test_an_environment_torch_could_read_starts_the_ordinary_way(template, tmp_path, monkeypatch):
    """The first test of the module's template (a template of its own cost one more import of torch, 3 s of a core):
    its first kernel, whose environment differs, starts the template, which starts with the environment it was made
    with, so that the next kernel, started with that environment, is forked."""
    assert template.process is None, "this test must be the first to start the module's template: keep it first"
    made_with = template.env.get("OMP_NUM_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")   # read by torch's thread pool; the template was not made with it
    probe = run_probe(tmp_path)                  # the first kernel: the template starts now
    assert not probe["torch_imported"] and "relay-lifeline" not in probe["threads"]
    if made_with is None:   # the environment the template was made with: later kernels fork again
        monkeypatch.delenv("OMP_NUM_THREADS")
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", made_with)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))   # inductor writes it into a test process's
    probe = run_probe(tmp_path)
    assert probe["torch_imported"] and "relay-lifeline" in probe["threads"]


def test_a_forked_kernel_sees_what_an_ordinary_one_sees(template, tmp_path, monkeypatch):
    forked = run_probe(tmp_path)
    # a second kernel from the same template draws other random numbers, as a new interpreter does (random reseeds
    # itself in a forked child; torch's import leaves numpy.random to the kernel)
    again = run_probe(tmp_path)
    monkeypatch.setattr(local_provisioner, "launch_kernel", ordinary_launch)
    ordinary = run_probe(tmp_path)
    assert forked.pop("torch_imported") and not ordinary.pop("torch_imported")
    assert "relay-lifeline" in forked["threads"]
    forked["threads"].remove("relay-lifeline")
    assert again["random"] != forked["random"] and again["numpy_random"] != forked["numpy_random"]
    for probe in (forked, ordinary):
        for key in ("pid", "random", "numpy_random"):
            probe.pop(key)
    assert forked == ordinary
    # conftest.py: a test process's kernels bind their five channels to Unix sockets, not TCP ports jupyter_client
    # found free a moment earlier
    assert forked["unix_socket_paths"] == 5


def test_an_interrupt_reaches_the_forked_kernels_cell(template, tmp_path):
    with kernel(tmp_path) as (manager, client):
        request = client.execute("import time; print('sleeping', flush=True); time.sleep(60)")
        while client.get_iopub_msg(timeout=30)["content"].get("text", "") != "sleeping\n":   # the cell runs
            pass
        manager.interrupt_kernel()
        reply = client.get_shell_msg(timeout=20)
        while reply["parent_header"].get("msg_id") != request:   # not a kernel_info_reply: a kernel that was slow
            reply = client.get_shell_msg(timeout=20)              # to start got more than one while it started
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"


def test_a_killed_relay_ends_its_kernel(template, tmp_path):
    with kernel(tmp_path, shut_down=False) as (manager, client):
        forked = psutil.Process(int(printed(client, "import os; print(os.getpid())")))
        assert forked.pid != manager.provisioner.pid   # forked by the template, not the relay jupyter_client started
    manager.shutdown_kernel(now=True)   # SIGKILL to the relay's process group: the kernel is not in it
    forked.wait(timeout=10)             # psutil.TimeoutExpired if the kernel outlived its relay


# What a rank sees, and where it came from, for the kernel's launch (ranks_probe)
RANKS_PROBE = """
import json, os, signal, sys, threading
import ddp_lab
from ddp_lab.launcher import procstart

def probe(rank):
    import os, random, signal, sys, threading
    return dict(path=sys.path, cwd=os.getcwd(), variables=sorted(set(os.environ) - {"DDP_LAB_ZYGOTE_RELAY"}),
                argv=sys.argv, main=sys.modules["__main__"].__spec__.name, zygote=os.getppid(),
                dynamo="torch._dynamo" in sys.modules, sigint=str(signal.getsignal(signal.SIGINT)),
                sigchld=str(signal.getsignal(signal.SIGCHLD)), threads=sorted(t.name for t in threading.enumerate()),
                session_leader=os.getsid(0) == os.getpid(), random=random.random())

launched = ddp_lab.launch(probe, nprocs=2)   # the kernel's first launch: forked from the zygote it starts
with open(f"/proc/{launched[0]['zygote']}/cmdline") as cmdline:
    zygote_cmdline = cmdline.read().split("\\0")
print(json.dumps(dict(ranks=list(launched), started=launched.started, relay=procstart._zygote.popen.pid,
                      imports=procstart._zygote.imports, zygote_cmdline=zygote_cmdline)))
"""


@pytest.fixture
def zygote_relay(notebook_kernel_settings, monkeypatch) -> str:
    """The suite's zygote template (conftest.py's, which this worker's notebooks' kernels use after this test), and
    its imports set for the kernels this test starts."""
    if "DDP_LAB_ZYGOTE_RELAY" not in notebook_kernel_settings:
        pytest.skip("DDP_LAB_FORKED_KERNELS=0: zygotes start the ordinary way")
    for name, value in notebook_kernel_settings.items():
        monkeypatch.setenv(name, value)
    return notebook_kernel_settings["DDP_LAB_ZYGOTE_RELAY"]


def ranks_probe(cwd, monkeypatch, relay: str | None, imports: str) -> dict:
    """A launch in a kernel whose zygotes start through `relay` (None: the ordinary way), asked for `imports`."""
    monkeypatch.setenv("DDP_LAB_ZYGOTE_IMPORTS", imports)
    if relay is None:
        monkeypatch.delenv("DDP_LAB_ZYGOTE_RELAY", raising=False)
    else:
        monkeypatch.setenv("DDP_LAB_ZYGOTE_RELAY", relay)
    with kernel(cwd) as (_, client):
        return json.loads(printed(client, RANKS_PROBE))


def test_a_forked_zygotes_ranks_see_what_an_ordinary_zygotes_ranks_see(template, zygote_relay, tmp_path, monkeypatch):
    """A kernel with DDP_LAB_ZYGOTE_RELAY (as conftest.py starts notebooks' kernels) gets its zygote forked from the
    template, and the ranks forked from it see what ranks of a zygote started the ordinary way see; a zygote asked
    for imports the template did not make starts the ordinary way, through the same relay."""
    every = os.environ["DDP_LAB_ZYGOTE_IMPORTS"]
    forked = ranks_probe(tmp_path, monkeypatch, zygote_relay, every)
    ordinary = ranks_probe(tmp_path, monkeypatch, None, every)
    other_imports = ranks_probe(tmp_path, monkeypatch, zygote_relay, "")
    for probe in (forked, ordinary, other_imports):
        assert probe["started"] == ["warm", "warm"], probe["started"]
    assert forked["ranks"][0]["zygote"] != forked["relay"] and forked_kernels.from_a_template(forked["zygote_cmdline"])
    assert not forked_kernels.from_a_template(ordinary["zygote_cmdline"])
    assert ordinary["ranks"][0]["zygote"] == ordinary["relay"]           # the zygote launch() started itself
    assert other_imports["ranks"][0]["zygote"] == other_imports["relay"]   # the relay exec'd the ordinary zygote
    assert forked["imports"] == ordinary["imports"] == every.split(",") and not other_imports["imports"]
    assert forked["ranks"][0]["random"] != forked["ranks"][1]["random"]   # each rank reseeds, forked or not
    for probe in (forked, ordinary, other_imports):
        probe.pop("zygote_cmdline")
        for rank in probe["ranks"]:
            for key in ("zygote", "random"):
                rank.pop(key)
    assert forked["ranks"] == ordinary["ranks"]
    for rank in other_imports["ranks"]:
        assert not rank.pop("dynamo")
    assert [{**rank, "dynamo": True} for rank in other_imports["ranks"]] == ordinary["ranks"]


def test_a_forked_zygote_ends_with_its_relay_and_its_kernel(template, zygote_relay, tmp_path):
    """launch() retires a zygote by killing the process it started (here the relay): the template then ends the zygote
    it forked; a kernel that ends takes its relay (PR_SET_PDEATHSIG) and so its zygote with it."""
    zygote_pid = "import ddp_lab, os; print(ddp_lab.launch(lambda rank: os.getppid(), nprocs=1)[0])"
    with kernel(tmp_path, shut_down=False) as (manager, client):
        first = psutil.Process(int(printed(client, zygote_pid)))
        assert forked_kernels.from_a_template(first.cmdline())
        printed(client, "from ddp_lab.launcher import procstart; procstart._zygote.retire('the test retired it')")
        first.wait(timeout=10)   # psutil.TimeoutExpired if the zygote outlived its relay
        printed(client, zygote_pid)   # cold: the retired zygote is replaced after this launch
        second = psutil.Process(int(printed(client, zygote_pid)))
        assert second.pid != first.pid and forked_kernels.from_a_template(second.cmdline())
    manager.shutdown_kernel(now=True)
    second.wait(timeout=10)


def test_conftest_forks_the_suites_kernels():
    """`make test` runs with conftest.py's template unless DDP_LAB_FORKED_KERNELS=0 (then this test skips)."""
    if os.environ.get("DDP_LAB_FORKED_KERNELS", "1") == "0":
        pytest.skip("DDP_LAB_FORKED_KERNELS=0: kernels start the ordinary way")
    assert local_provisioner.launch_kernel.__name__ == "launch_forked_kernel"

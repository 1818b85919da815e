"""The test suite's forked kernels (tests/forked_kernels.py) are the kernels `python -m ipykernel_launcher` starts.

Real kernels through jupyter_client, one started the ordinary way and others forked from a template of this module's own:
what a cell sees is the same (sys.path, argv, working directory, environment, session, signal handlers, threads but the
relay's lifeline), torch is imported before any cell imports it, an interrupt reaches the cell, a killed kernel leaves
no process behind, and a kernel whose environment differs where `import torch` could read it starts the ordinary way.
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
    random=__import__("random").random(), numpy_random=__import__("numpy").random.random())))
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


def test_an_interrupt_reaches_the_forked_kernels_cell(template, tmp_path):
    with kernel(tmp_path) as (manager, client):
        client.execute("import time; time.sleep(60)")
        time.sleep(1)
        manager.interrupt_kernel()
        reply = client.get_shell_msg(timeout=20)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"


def test_a_killed_relay_ends_its_kernel(template, tmp_path):
    with kernel(tmp_path, shut_down=False) as (manager, client):
        forked = psutil.Process(int(printed(client, "import os; print(os.getpid())")))
        assert forked.pid != manager.provisioner.pid   # forked by the template, not the relay jupyter_client started
    manager.shutdown_kernel(now=True)   # SIGKILL to the relay's process group: the kernel is not in it
    forked.wait(timeout=10)             # psutil.TimeoutExpired if the kernel outlived its relay


def test_an_environment_torch_could_read_starts_the_ordinary_way(tmp_path, monkeypatch):
    own = forked_kernels.Template(str(tmp_path))   # its own: it must start with this test's first kernel
    monkeypatch.setattr(local_provisioner, "launch_kernel",
                        lambda cmd, **kwargs: ordinary_launch(own.kernel_command(cmd), **kwargs))
    made_with = os.environ.get("OMP_NUM_THREADS")
    try:
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
    finally:
        own.close()


def test_conftest_forks_the_suites_kernels():
    """`make test` runs with conftest.py's template unless DDP_LAB_FORKED_KERNELS=0 (then this test skips)."""
    if os.environ.get("DDP_LAB_FORKED_KERNELS", "1") == "0":
        pytest.skip("DDP_LAB_FORKED_KERNELS=0: kernels start the ordinary way")
    assert local_provisioner.launch_kernel.__name__ == "launch_forked_kernel"

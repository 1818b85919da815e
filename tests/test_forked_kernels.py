"""The test suite's forked kernels (tests/forked_kernels.py) are the kernels `python -m ipykernel_launcher` starts.

Real kernels through jupyter_client, one started the ordinary way and one forked from a template of this test's own:
what a cell sees is the same (sys.path, argv, working directory, environment, session, signal handlers, threads but the
relay's lifeline), torch is imported before any cell imports it, an interrupt reaches the cell, a killed kernel leaves
no process behind, and a kernel whose environment differs where `import torch` could read it starts the ordinary way.
"""

from __future__ import annotations

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


@pytest.fixture
def template(tmp_path, monkeypatch):
    """A template of this test's own, and kernels started through it (whatever conftest.py installed)."""
    template = forked_kernels.Template(str(tmp_path))
    monkeypatch.setattr(local_provisioner, "launch_kernel",
                        lambda cmd, **kwargs: ordinary_launch(template.kernel_command(cmd), **kwargs))
    yield template
    template.close()


def run_probe(cwd) -> dict:
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=str(cwd))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        printed = []
        client.execute_interactive(PROBE, timeout=60,
                                   output_hook=lambda message: printed.append(message["content"].get("text", "")))
        return json.loads("".join(printed))
    finally:
        client.stop_channels()
        manager.shutdown_kernel()


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
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=str(tmp_path))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        client.execute("import time; time.sleep(60)")
        time.sleep(1)
        manager.interrupt_kernel()
        reply = client.get_shell_msg(timeout=20)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
    finally:
        client.stop_channels()
        manager.shutdown_kernel()


def test_a_killed_relay_ends_its_kernel(template, tmp_path):
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=str(tmp_path))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        printed = []
        client.execute_interactive("import os; print(os.getpid())", timeout=30,
                                   output_hook=lambda message: printed.append(message["content"].get("text", "")))
        kernel = psutil.Process(int("".join(printed)))
        assert kernel.pid != manager.provisioner.pid   # forked by the template, not the relay jupyter_client started
    finally:
        client.stop_channels()
    manager.shutdown_kernel(now=True)   # SIGKILL to the relay's process group: the kernel is not in it
    kernel.wait(timeout=10)             # psutil.TimeoutExpired if the kernel outlived its relay


def test_an_environment_torch_could_read_starts_the_ordinary_way(template, tmp_path, monkeypatch):
    made_with = os.environ.get("OMP_NUM_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")   # read by torch's thread pool; the template was not made with it
    probe = run_probe(tmp_path)                  # the first kernel: the template starts now
    assert not probe["torch_imported"] and "relay-lifeline" not in probe["threads"]
    if made_with is None:   # the environment the template was made with: later kernels fork again
        monkeypatch.delenv("OMP_NUM_THREADS")
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", made_with)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))   # what inductor writes into a test process's environment
    probe = run_probe(tmp_path)
    assert probe["torch_imported"] and "relay-lifeline" in probe["threads"]


def test_conftest_forks_the_suites_kernels():
    """`make test` runs with conftest.py's template unless DDP_LAB_FORKED_KERNELS=0 (then this test skips)."""
    if os.environ.get("DDP_LAB_FORKED_KERNELS", "1") == "0":
        pytest.skip("DDP_LAB_FORKED_KERNELS=0: kernels start the ordinary way")
    assert local_provisioner.launch_kernel.__name__ == "launch_forked_kernel"

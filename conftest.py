"""How `make test` shares the suite among pytest-xdist workers.

A third of the suite waits (kernels and ranks starting, rendezvous, deadlock timeouts), so the
Makefile runs it on JOBS workers with `--dist loadscope --no-loadscope-reorder`:

- loadscope keeps a scope on one worker: a notebook's cells run in order in one kernel (nbval's
  documentation asks for loadscope), and a test module's tests share its module-scoped
  fixtures (a live cluster, a set of trainings), built once;
- scopes go to workers in the order collected; this hook puts modules with tests marked `slow`
  first, then the other test modules (up to a minute each), then the notebooks (2-25 s each),
  each kind in collection order, so short units fill the end instead of one long module
  running alone after everything else.

(`--dist loadgroup`, which could spread single tests, cannot be used: pytest-xdist 3.8 names a
group by rewriting `item._nodeid`, which pytest 9 no longer reads.)

`make test` uses `-n auto`, one worker per core this process may use (ddp_lab's own count:
affinity and cgroup quota, which `taskset -c 0` and `docker --cpus` shrink; xdist's default
counts the host's cores). On 2 cores a third worker gains little (5 % in
alternating runs, less than the host's hour-to-hour drift) and makes every rank wait longer for a core
(docs/testing-and-ci.md has the measurement).
`make test JOBS=0` runs everything serially in one process, in collection order (for debugging).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import sys
import tempfile
from pathlib import Path
from unittest import mock

import pytest

# Notebooks whose asserts time this machine against a model of it, which assumes the ranks have
# the cores to themselves: lesson 02 fits alpha and beta to ping-pongs and asserts both positive,
# lesson 11 compares the fitted ring model with measured all-reduces (one CI run in the parallel
# phase fitted beta = 0 there: the other worker's ranks made the larger pings no slower), lesson 13
# calibrates the machine and asserts predicted step times within 30 % of measured ones, lesson 07 asserts
# that the measured pipeline bubble shrinks from m=1 to 4 to 16 micro-batches (one CI run in the parallel phase
# measured 0.208 at m=4 and 0.209 at m=16: the other worker's ranks took the cores). Marked
# measures_time, which the Makefile runs alone after the parallel phase (together ~95 s on the
# 2-core machine). Tests mark themselves in their module.
NOTEBOOKS_THAT_MEASURE_TIME = {
    "notebooks/02-collectives.ipynb",
    "notebooks/07-pipeline-parallelism.ipynb",
    "notebooks/11-performance-and-scaling.ipynb",
    "notebooks/13-plan-your-training-run.ipynb",
}


# The one lesson whose asserts are about how ranks start (cold, then warm once the zygote is ready): it runs with
# the zygote a learner's kernel starts, which learns its imports from the ranks.
NOTEBOOKS_THAT_SHOW_THE_ZYGOTE_WARM_UP = {"notebooks/00b-live-cluster.ipynb"}


@pytest.hookimpl(optionalhook=True)   # JOBS=0 runs with -p no:xdist, which defines no such hook
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: as many workers as this process has cores (see the module docstring)."""
    from ddp_lab.hardware.machine import cpu_cores   # lazy: only xdist's controller needs it

    return cpu_cores()


def _scope(item: pytest.Item) -> str:
    """The unit loadscope keeps on one worker (pytest-xdist's LoadScopeScheduling._split_scope)."""
    return item.nodeid.rsplit("::", 1)[0]


def _start_order(item: pytest.Item) -> int:
    """0: tests marked slow; 1: every other test; 2: notebooks (nbval: 2-25 s each, a short tail)."""
    if item.get_closest_marker("slow"):
        return 0
    return 2 if item.path.suffix == ".ipynb" else 1


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark the cells of a notebook that times this machine (before -m selects by marker)."""
    if item.path.suffix == ".ipynb" and \
            item.path.relative_to(item.config.rootpath).as_posix() in NOTEBOOKS_THAT_MEASURE_TIME:
        item.add_marker(pytest.mark.measures_time)


def _may_measure_time(path: Path, root: Path) -> bool:
    """Whether a notebook or test module can hold tests marked measures_time: a notebook in
    NOTEBOOKS_THAT_MEASURE_TIME, a module that names the marker."""
    if path.suffix == ".ipynb":
        return path.relative_to(root).as_posix() in NOTEBOOKS_THAT_MEASURE_TIME
    return "measures_time" in path.read_text(errors="replace")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The timing phase (`-m measures_time`, Makefile) collects only what may hold its tests: collecting the other
    notebooks and modules took 3.5 s of that serial phase here. pytest_collection_modifyitems checks the rule
    whenever everything is collected."""
    if config.getoption("markexpr") != "measures_time" or not collection_path.is_file() or \
            not (collection_path.suffix == ".ipynb" or collection_path.name.startswith("test_")):
        return None
    return None if _may_measure_time(collection_path, config.rootpath) else True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    missed = {str(item.path) for item in items if item.get_closest_marker("measures_time")
              and not _may_measure_time(item.path, config.rootpath)}
    if missed:   # pytest_ignore_collect would leave them out of the timing phase
        raise pytest.UsageError(f"tests marked measures_time in {sorted(missed)}: name the marker in the module "
                                "(or the notebook in conftest.py's NOTEBOOKS_THAT_MEASURE_TIME)")
    if not getattr(config, "workerinput", None):   # only under xdist; a serial run keeps its order
        return
    order: dict[str, int] = {}
    for item in items:   # a scope starts as early as its earliest item would
        order[_scope(item)] = min(order.get(_scope(item), 2), _start_order(item))
    items.sort(key=lambda item: order[_scope(item)])   # stable: a scope's items keep their order


def notebook_kernel_values() -> dict[str, str]:
    """The variables notebook_kernel_variables() sets, and their values (starting this process's zygote template)."""
    from ddp_lab.launcher.zygote import LEARNED_IMPORTS   # lazy: only kernels' tests need it

    variables = {"DDP_LAB_ZYGOTE_IMPORTS": os.environ.get("DDP_LAB_ZYGOTE_IMPORTS") or ",".join(LEARNED_IMPORTS)}
    if _template_directory:
        variables["DDP_LAB_ZYGOTE_RELAY"] = _zygote_template(variables["DDP_LAB_ZYGOTE_IMPORTS"]).zygote_relay()
    return variables


@contextlib.contextmanager
def notebook_kernel_variables():
    """The environment a notebook's kernel starts with: DDP_LAB_ZYGOTE_IMPORTS set to the launcher's LEARNED_IMPORTS,
    and (unless DDP_LAB_FORKED_KERNELS=0) DDP_LAB_ZYGOTE_RELAY, so that its zygotes are forked from a template that
    imported the same (see below).

    Its zygote then has torch._dynamo (what every rank's first DDP, FSDP2 or DTensor op imports) when it starts, as the
    successor zygote of a learner's kernel does once ranks needed it: otherwise each notebook's first such launches
    import it in every rank, and a successor zygote imports it once more. Measured on the shared 2-core machine, nbval
    of lessons 05, 09, 10 and solutions 09, 12: 70-72 s of CPU -> 48-53 s (before zygotes were forked; now it costs a
    zygote nothing). What the notebooks print and assert does not depend on it; the zygote's learning is tested in
    tests/test_cluster.py, on every test worker's own launches, and by lesson 00b, which keeps the learner's default.
    The variables are set only while the kernel starts, so tests and the kernels they start keep the default.
    """
    with mock.patch.dict(os.environ, notebook_kernel_values()):   # the whole environment as it was, afterwards
        yield


@pytest.fixture
def notebook_kernel_environment():
    """notebook_kernel_variables() for a test that starts a notebook's kernel itself (tests/test_exercises.py)."""
    with notebook_kernel_variables():
        yield


@pytest.fixture
def notebook_kernel_settings() -> dict[str, str]:
    """notebook_kernel_values(), not set: for a test that sets them itself with monkeypatch (mixing the two would
    leave them set in the test process: monkeypatch restores what it found when it changed them)."""
    return notebook_kernel_values()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    """A test that leaves DDP_LAB_ZYGOTE_RELAY set errors in its teardown: this process's own later launches would
    fork their zygotes from the template, whose ranks tests/rank_procs.py cannot tell as a launcher's (their
    /proc environ is the template's)."""
    yield
    if "DDP_LAB_ZYGOTE_RELAY" in os.environ and not _relay_was_set:
        del os.environ["DDP_LAB_ZYGOTE_RELAY"]
        raise AssertionError(f"{item.nodeid} left DDP_LAB_ZYGOTE_RELAY set in the test process (set it with monkeypatch "
                             "from conftest.py's notebook_kernel_settings, or with notebook_kernel_environment alone)")


_relay_was_set = "DDP_LAB_ZYGOTE_RELAY" in os.environ


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    """nbval starts a notebook's kernel in the setup of its first cell: with notebook_kernel_variables(), but for
    lesson 00b's (it shows the zygote's warm-up: its kernel starts as a learner's does)."""
    if item.path.suffix != ".ipynb" or \
            item.path.relative_to(item.config.rootpath).as_posix() in NOTEBOOKS_THAT_SHOW_THE_ZYGOTE_WARM_UP:
        yield
        return
    with notebook_kernel_variables():
        yield


# Kernels started by this test process (nbval's, tests/test_exercises.py's) are forked from a template that has
# imported torch, and the zygotes of nbval's kernels (but lesson 00b's) from a template that has imported what they
# import: tests/forked_kernels.py says how and why. DDP_LAB_FORKED_KERNELS=0 starts every kernel and zygote the
# ordinary way.
_template_directory: list[str] = []   # this process's templates' directory, once pytest_configure made it
_zygote_templates: dict = {}   # DDP_LAB_ZYGOTE_IMPORTS -> the zygote template (forked_kernels.Template) for it


def _zygote_template(imports: str):
    """This process's zygote template for kernels whose zygotes import `imports` (one per set asked for)."""
    from ddp_lab.launcher.procstart import with_package_on_path   # lazy: only notebook items need it

    if imports not in _zygote_templates:
        import forked_kernels

        env = with_package_on_path({**os.environ, "DDP_LAB_ZYGOTE_IMPORTS": imports})   # what its zygotes get
        folder = tempfile.mkdtemp(prefix="zygote-", dir=_template_directory[0])
        _zygote_templates[imports] = forked_kernels.Template(folder, env, zygote=True)
    return _zygote_templates[imports]


def _kernels_talk_over_unix_sockets(config: pytest.Config) -> None:
    """Kernels this test process starts (nbval's, the tests') talk to it over Unix sockets in a folder of its own
    instead of TCP ports on 127.0.0.1. jupyter_client picks five free ports and the kernel binds them a moment later
    (a second or more for a kernel started the ordinary way); in that moment the other worker's gloo connections and
    stores take ports from the same range, and a kernel that finds one taken dies before it answers (one CI run:
    "Address already in use" from the kernel, "Kernel died before replying to kernel_info" in the test). A Unix
    socket's path is this kernel's alone. What a cell sees does not depend on the transport."""
    from jupyter_client.provisioning.local_provisioner import LocalProvisioner   # lazy: only when kernels start

    from ddp_lab.checks.grade import kernel_socket_settings   # what `python -m ddp_lab grade` gives its kernels

    folder = tempfile.mkdtemp(prefix="ddp-lab-sockets-")   # short: a socket's path may not exceed 107 bytes
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    kernels = itertools.count()
    pre_launch = LocalProvisioner.pre_launch

    async def pre_launch_over_unix_sockets(self, **kwargs):
        manager = self.parent
        if manager is not None and manager.transport == "tcp" and not self.ports_cached:   # a restart keeps its own
            own = os.path.join(folder, str(next(kernels)))
            os.mkdir(own)
            settings = kernel_socket_settings(own)
            if settings:
                manager.transport, manager.ip, manager.cache_ports = settings["transport"], settings["ip"], False
        return await pre_launch(self, **kwargs)

    LocalProvisioner.pre_launch = pre_launch_over_unix_sockets


def pytest_configure(config: pytest.Config) -> None:
    _kernels_talk_over_unix_sockets(config)
    if os.environ.get("DDP_LAB_FORKED_KERNELS", "1") == "0":
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))
    import forked_kernels   # lazy: tests/ is on sys.path only from here
    sys.path.pop(0)

    directory = tempfile.mkdtemp(prefix="ddp-lab-kernels-")
    template = forked_kernels.install(directory)
    _template_directory.append(directory)

    def close() -> None:
        for started in (template, *_zygote_templates.values()):
            started.close()
        _zygote_templates.clear()
        _template_directory.clear()
        shutil.rmtree(directory, ignore_errors=True)

    config.add_cleanup(close)

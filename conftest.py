"""How `make test` shares the suite among pytest-xdist workers (issue 23).

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
counts the host's cores). On 2 cores a third worker was slower (8 min 20 s against 7 min 26 s
for the parallel phase: the machine was 97 % busy and every rank waited for a core).
`make test JOBS=0` runs everything serially in one process, in collection order (for debugging).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# Notebooks whose asserts time this machine against a model of it, which assumes the ranks have
# the cores to themselves: lesson 02 fits alpha and beta to ping-pongs and asserts both positive,
# lesson 11 compares the fitted ring model with measured all-reduces (one CI run in the parallel
# phase fitted beta = 0 there: the other worker's ranks made the larger pings no slower), lesson 13
# calibrates the machine and asserts predicted step times within 30 % of measured ones. Marked
# measures_time, which the Makefile runs alone after the parallel phase (together ~95 s on the
# 2-core machine). Tests mark themselves in their module.
NOTEBOOKS_THAT_MEASURE_TIME = {
    "notebooks/02-collectives.ipynb",
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config, "workerinput", None):   # only under xdist; a serial run keeps its order
        return
    order: dict[str, int] = {}
    for item in items:   # a scope starts as early as its earliest item would
        order[_scope(item)] = min(order.get(_scope(item), 2), _start_order(item))
    items.sort(key=lambda item: order[_scope(item)])   # stable: a scope's items keep their order


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    """A notebook's kernel starts with DDP_LAB_ZYGOTE_IMPORTS set to the launcher's LEARNED_IMPORTS.

    Its zygote then imports torch._dynamo (what every rank's first DDP, FSDP2 or DTensor op imports) when it
    starts, as the successor zygote of a learner's kernel does once ranks needed it: otherwise each notebook's
    first such launches import it in every rank, and a successor zygote imports it once more. Measured on the
    shared 2-core machine, nbval of lessons 05, 09, 10 and solutions 09, 12: 70-72 s of CPU -> 48-53 s. What the
    notebooks print and assert does not depend on it; the zygote's learning is tested in tests/test_cluster.py,
    on every test worker's own launches, and by lesson 00b, which keeps the learner's default. nbval starts the
    kernel in the setup of a notebook's first cell (the variable is only set meanwhile, so tests and the
    kernels they start keep the default).
    """
    if item.path.suffix != ".ipynb" or \
            item.path.relative_to(item.config.rootpath).as_posix() in NOTEBOOKS_THAT_SHOW_THE_ZYGOTE_WARM_UP:
        yield
        return
    from ddp_lab.launcher.zygote import LEARNED_IMPORTS   # lazy: only notebook items need it

    before = os.environ.get("DDP_LAB_ZYGOTE_IMPORTS")
    os.environ["DDP_LAB_ZYGOTE_IMPORTS"] = before or ",".join(LEARNED_IMPORTS)
    try:
        yield
    finally:
        if before is None:
            del os.environ["DDP_LAB_ZYGOTE_IMPORTS"]


# Kernels started by this test process (nbval's, tests/test_exercises.py's) are forked from a template that has
# imported torch: tests/forked_kernels.py says how and why. DDP_LAB_FORKED_KERNELS=0 starts every kernel the ordinary way.
def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("DDP_LAB_FORKED_KERNELS", "1") == "0":
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))
    import forked_kernels   # lazy: tests/ is on sys.path only from here
    sys.path.pop(0)

    directory = tempfile.mkdtemp(prefix="ddp-lab-kernels-")
    template = forked_kernels.install(directory)
    config.add_cleanup(lambda: (template.close(), shutil.rmtree(directory, ignore_errors=True)))

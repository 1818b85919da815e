"""`ddp_lab.hardware.load.OtherPrograms`: the cores other programs keep busy, not this process tree.

Real processes: a busy loop started as our own child must not count; the same loop left
running by a shell that exited (so init adopted it: another program) must count, about a core.
Runs in the timing phase (measures_time): in the parallel phase the other worker is itself
another program.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ddp_lab.hardware.load import QUIET_CORES, OtherPrograms, busy_seconds

pytestmark = pytest.mark.measures_time

BUSY_LOOP = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass"


def test_own_children_are_not_other_programs():
    """A busy child of ours adds nothing to what other programs use: the same as while we sleep
    (which is not 0 on a machine something else keeps busy: `yes` on one core here read 1.0 both ways)."""
    with OtherPrograms() as idle:
        time.sleep(1.5)
    with OtherPrograms() as others:
        subprocess.run([sys.executable, "-c", BUSY_LOOP.format(seconds=1.5)], check=True)
    assert others.cores is not None and idle.cores is not None
    assert others.cores - idle.cores < QUIET_CORES, (others.cores, idle.cores)


def test_an_adopted_busy_process_is_another_program():
    """A shell starts the loop in the background and exits: the loop is no longer our descendant."""
    started = subprocess.run(["sh", "-c", f"{sys.executable} -c '{BUSY_LOOP.format(seconds=20)}' "
                                          ">/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True)
    pid = int(started.stdout.strip())
    try:
        time.sleep(0.3)   # past its interpreter's start
        with OtherPrograms() as others:
            time.sleep(1.5)
        assert others.cores is not None and others.cores > 0.6, others.cores
        assert not others.quiet
    finally:
        os.kill(pid, signal.SIGKILL)


def test_busy_seconds_reads_only_the_cores_asked_for(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 0 10 100 0 0 0 0 0 0\n"
                    "cpu0 5 1 2 50 9 1 1 0 0 0\n"
                    "cpu1 100 0 0 50 0 0 0 0 0 0\n"
                    "intr 1 2 3\n")
    ticks = os.sysconf("SC_CLK_TCK")
    assert busy_seconds({0}, stat) == pytest.approx((5 + 1 + 2 + 1 + 1) / ticks)   # idle and iowait are not busy
    assert busy_seconds({0, 1}, stat) == pytest.approx(110 / ticks)
    assert busy_seconds({0}, tmp_path / "missing") is None

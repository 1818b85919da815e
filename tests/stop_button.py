"""Jupyter's stop button in tests: interrupt the main thread once the ranks are where the press should land.

Used by tests/test_cluster.py (the live cluster) and tests/test_launch.py (launch()).
"""

from __future__ import annotations

import _thread
import os
import threading
import time


def press_stop_when(*ready, after: float = 0.0) -> None:
    """Press the stop button (interrupt the main thread, as Jupyter's stop button interrupts the kernel) once every
    one of `ready` is there: a path that exists (the ranks create it where the press should land) or a
    threading.Event that is set; `after` seconds later. A timer instead pressed too early on a loaded machine. Not
    pressed if they are not all there within 60 s (the test then fails on its own, and no stray KeyboardInterrupt
    reaches a later test). The caller installs Python's SIGINT handler: a test runner started in the background
    inherits SIGINT as ignored, and the press then does nothing."""
    def press():
        deadline = time.monotonic() + 60
        while not all(mark.is_set() if isinstance(mark, threading.Event) else os.path.exists(mark) for mark in ready):
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)
        time.sleep(after)
        _thread.interrupt_main()

    threading.Thread(target=press, daemon=True).start()

"""Holding the stop button while the launcher cleans up after the ranks.

Jupyter's stop button raises KeyboardInterrupt in the kernel. The first one stops a launch;
the launcher then stops the ranks (SIGTERM, a short grace, SIGKILL) and closes their pipes.
A second press during that clean-up used to raise inside it: ranks that were slow to die
(a checkpoint-on-SIGTERM handler) were left running, their pipes open. While interrupts
are held, a press is remembered instead of raised; it is raised when the clean-up is done,
unless an exception (the first KeyboardInterrupt) is on its way out already.

Introduced in notebooks/00-welcome-and-first-launch.ipynb ("How launch works").
"""

from __future__ import annotations

import signal
import threading


class interrupts_held:  # noqa: N801 - used as a statement, like contextlib's suppress
    """`with interrupts_held(): ...` runs its body to the end however often SIGINT arrives.

    Only the main thread receives Python's SIGINT, so elsewhere it does nothing. Nested
    uses pass a held press outwards: the outermost one decides.
    """

    def __enter__(self) -> "interrupts_held":
        self.pressed = False
        self.previous = None
        # getsignal is None for a handler installed outside Python, which could not be restored
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is not None:
            self.previous = signal.signal(signal.SIGINT, self._remember)
        return self

    def _remember(self, signum, frame) -> None:
        self.pressed = True

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.previous is None:
            return
        signal.signal(signal.SIGINT, self.previous)
        if self.pressed and exc_type is None:
            signal.raise_signal(signal.SIGINT)  # to the handler we replaced: raised, or held outside

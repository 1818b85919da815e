"""Asking stuck ranks where they are: every thread's Python stack, dumped by faulthandler on a signal.

Each rank registers faulthandler for channel.STACK_SIGNAL, writing into a stacks file of its
own in the launch's private work folder (worker.run_rank). The hang report reads those files,
without ddp_lab's own frames, so that a learner sees the frames of their code and of torch;
`%ddp_status` reads them too (with a shorter wait), to say which collective a busy rank is in.

Introduced in notebooks/00-welcome-and-first-launch.ipynb ("What a rank failure looks like").
"""

from __future__ import annotations

import re
import sysconfig
import time
from pathlib import Path

from ddp_lab.launcher.channel import STACK_SIGNAL
from ddp_lab.launcher.rankprocess import RankProcess
from ddp_lab.launcher.workdir import open_private

STACK_WAIT_S = 1.0  # how long ranks get to write their stacks
HIDDEN_FRAMES = ("ddp_lab/launcher/worker.py", "ddp_lab/cluster/rank_loop.py", "ddp_lab/launcher/zygote.py",
                 "ddp_lab/launcher/rendezvous.py", "<frozen runpy>")
OUTSIDE_FN = ("(only ddp_lab's frames: your function has returned and the rank is stuck before "
              "reporting, most likely in a C++ destructor of its local variables)")


def stacks_path(workdir: str, rank: int) -> Path:
    """The file rank `rank` dumps its stacks into."""
    return Path(workdir, f"stacks-{rank}.txt")


def read_stacks(processes: list[RankProcess], workdir: str, wait: float = STACK_WAIT_S) -> dict[int, str]:
    """Ask these ranks to dump their Python stacks (faulthandler); read them, by rank.

    Waits at most `wait` seconds (plus 0.05 s for a dump under way to end); a rank that has not
    written by then is read as "(no Python stack was written: ...)".
    """
    for process in processes:
        with open(stacks_path(workdir, process.rank), "w", opener=open_private):
            pass  # emptied: the dump about to be asked for is the one read
        process.send_signal(STACK_SIGNAL)
    paths = {p.rank: stacks_path(workdir, p.rank) for p in processes}
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and not all(_size(path) for path in paths.values()):
        time.sleep(0.02)
    time.sleep(0.05)  # let a dump that has started finish
    return {rank: _clean_stack(path.read_text(errors="backslashreplace")) for rank, path in paths.items()}


def line_in(stack: str, filename: str) -> int | None:
    """The line at which a stack from read_stacks shows code from `filename` (its innermost frame
    there, as faulthandler lists the innermost frame first); None if no frame is in that file."""
    found = re.search(rf'File "{re.escape(filename)}", line (\d+)', stack)
    return int(found[1]) if found else None


LIBRARY_FOLDERS = tuple(sorted({sysconfig.get_paths()[name].rstrip("/") + "/"
                                 for name in ("stdlib", "platstdlib", "purelib", "platlib")}))
_FRAME_FILE = re.compile(r'\s*File "([^"]+)"')


def _library_thread(frames: list[str]) -> str | None:
    """One line for a thread that is an installed package's, not the rank's code (every frame in LIBRARY_FOLDERS, one
    at least in an installed package, none in torch.distributed, whose collectives the reports look for), naming the
    newest frame in an installed package. None for any other thread: one all in the standard library may be the
    rank's own (`threading.Thread(target=time.sleep)`), so its frames are shown."""
    files = [_FRAME_FILE.match(frame) for frame in frames]
    if not frames or any(file is None or not file.group(1).startswith(LIBRARY_FOLDERS)
                         or "/torch/distributed/" in file.group(1) for file in files):
        return None
    owner = next((frame for frame, file in zip(frames, files) if "-packages/" in file.group(1)), None)
    return None if owner is None else f"Thread of a library, not of your code (its frames not shown): {owner.strip()}"


def _in_threading(frame: str) -> bool:
    """Whether a frame line of a faulthandler dump is in the standard library's threading.py."""
    file = _FRAME_FILE.match(frame)
    return file is not None and file.group(1).startswith(LIBRARY_FOLDERS) and file.group(1).endswith("/threading.py")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _clean_stack(text: str) -> str:
    """Drop thread addresses and ddp_lab's own frames from a faulthandler dump, the current thread (the one the rank's
    code runs in, where the signal was handled) first: faulthandler lists the newest thread first, so a library's
    idle helper thread (tqdm's monitor) came before the frames that matter. Such a thread, an installed package's
    (`_library_thread`), is one line; of the other threads, the frames in threading.py that start every thread are
    dropped.

    A thread that had frames, all of them ddp_lab's, gets a line saying so instead of none.
    """
    text = re.sub(r"(Current thread|Thread) 0x[0-9a-f]+", r"\1", text).strip()
    threads = []
    for block in re.split(r"\n(?=(?:Current thread|Thread) )", text) if text else []:
        header, *frames = [line for line in block.splitlines() if line.strip()]
        shown = [line for line in frames if not any(f in line for f in HIDDEN_FRAMES)]
        folded = None if header.startswith("Current thread") else _library_thread(shown)
        while len(shown) > 1 and _in_threading(shown[-1]):   # how every thread starts (run, _bootstrap): not shown
            shown.pop()
        threads.append(folded or "\n".join([header, *(shown if shown or not frames else [f"  {OUTSIDE_FN}"])]))
    threads.sort(key=lambda block: not block.startswith("Current thread"))   # stable: the others keep their order
    return "\n\n".join(block for block in threads if block) or \
        "(no Python stack was written: the rank may be stuck outside Python)"

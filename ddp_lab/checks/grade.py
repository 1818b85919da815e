"""`python -m ddp_lab grade [my-work/]`: every exercise's state in one table, for a learner or a classroom.

Each exercise notebook runs top to bottom in a fresh kernel, past any failing cell, from a
copy in memory: the learner's file is never written. Every check cell's outcome becomes one
row: ✓, ✗ with the check's first line of feedback, or "not attempted" (the answer still
raises the exercise's NotImplementedError). Which exercises a notebook of the course must hold
comes from the course's own list (exercise_list.py, read from solutions/): an exercise whose
check cell was deleted, or no longer calls its check, is a ✗ row saying so, not a row left out.
A notebook that cannot be graded (a file that is not a notebook, a cell past --timeout, a
kernel that died) becomes one "could not run" row saying why, and grading goes on with the
next notebook.

In a folder it grades the course's exercise notebooks and any other notebook with check cells
(my-work/ holds the learner's copies of the lessons too). Without a path it grades the course's
my-work/ (the learner's copies, `make lab`), found from wherever ddp_lab is installed, so it
works from any directory; without my-work/, the course's exercises/. Several notebooks run at
once where the cores allow (--jobs); a line on stderr reports each notebook as it finishes
(stdout keeps the table, or the JSON).

Exit status (main): 0 every attempted exercise passed; 1 an answer is wrong; 2 bad usage (no
notebooks there, --timeout below 1, nbclient missing); 3 some notebook could not be graded
(its row says why; this wins over 1, since the table is incomplete).

Introduced in the README's "Working in the course" section (`python -m ddp_lab grade`).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from ddp_lab.checks.exercise_list import EXERCISE_HEADING, calls, course_name, expected_exercises
from ddp_lab.hardware.machine import cpu_cores

PASSED, FAILED, NOT_ATTEMPTED, COULD_NOT_RUN = "✓", "✗", "not attempted", "could not run"
EXIT_PASSED, EXIT_WRONG, EXIT_USAGE, EXIT_NOT_GRADED = 0, 1, 2, 3
CELL_TIMEOUT_S = 600  # a whole check, ranks included; each check stops a deadlock itself much sooner
_NOT_WRITTEN = "is not written yet"
COURSE = Path(__file__).resolve().parents[2]   # the checkout ddp_lab was installed from (pip install -e .)
RANKS_PER_NOTEBOOK = 4  # an exercise's checks start up to 6 ranks: about 4 cores per notebook graded at once


@dataclass
class Row:
    """One exercise: where it is, and how its check ended."""

    notebook: str
    exercise: str
    result: str
    feedback: str = ""


def default_paths() -> list[Path]:
    """What `grade` grades without a path: the course's my-work/ if `make lab` made it, else its exercises/."""
    mine = COURSE / "my-work"
    return [mine if mine.is_dir() and any(mine.glob("*.ipynb")) else COURSE / "exercises"]


def default_jobs() -> int:
    """Notebooks graded at once: one per RANKS_PER_NOTEBOOK usable cores, at least 1 (1 on a 2-core laptop)."""
    return max(1, cpu_cores() // RANKS_PER_NOTEBOOK)


def grade_paths(paths: list[Path], timeout: int = CELL_TIMEOUT_S, jobs: int = 1, progress=None) -> list[Row]:
    """Grade every exercise notebook in `paths` (folders are searched for *.ipynb), `jobs` at a time.

    `progress(done, total, notebook, rows, seconds)` is called as each notebook finishes. The rows
    come back in the notebooks' order, whatever order they finished in.
    """
    notebooks = _notebooks(paths)
    finished = []

    def one(notebook: Path) -> list[Row]:
        started = time.monotonic()
        rows = grade_notebook(notebook, timeout)
        finished.append(notebook)
        if progress:
            progress(len(finished), len(notebooks), notebook, rows, time.monotonic() - started)
        return rows

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:  # each notebook runs in a kernel of its own
        return [row for rows in pool.map(one, notebooks) for row in rows]


def grade_notebook(path: Path, timeout: int = CELL_TIMEOUT_S) -> list[Row]:
    """Execute one exercise notebook (not saved) and read the outcome of each check cell.

    A notebook that cannot be read or run to its end gives one COULD_NOT_RUN row instead.
    """
    import nbformat  # lazy: only grading runs notebooks; the checks a lesson imports need no nbclient
    from nbclient import NotebookClient  # lazy: only grading runs notebooks; the checks a lesson imports need no nbclient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError  # lazy: only grading runs notebooks; the checks a lesson imports need no nbclient

    if timeout < 1:
        raise ValueError(f"timeout={timeout}: give at least 1 second per cell (the default is {CELL_TIMEOUT_S}).")
    try:
        notebook = nbformat.read(path, as_version=4)
    except Exception as error:  # noqa: BLE001 - whatever stops nbformat, the file is not a notebook we can run
        return [Row(path.stem, "", COULD_NOT_RUN, f"not a notebook: {_unreadable(path, error)}; restore the "
                                                  "file (from git, or a fresh copy of exercises/)")]
    running: list[int] = []  # the index of the cell being executed, for a row saying where it stopped
    sockets = tempfile.TemporaryDirectory(prefix="ddp-lab-grade-")
    client = NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", allow_errors=True,
        resources={"metadata": {"path": str(path.parent.resolve())}},
        on_cell_execute=lambda cell, cell_index: running.append(cell_index),
        # a kernel stuck in a cell past --timeout ignores a polite shutdown request, and
        # jupyter_client would wait 5 s before killing it; nothing is saved, so kill at once
        shutdown_kernel="immediate",
        config=kernel_sockets_config(sockets.name),
        log=_QUIET)  # its log lines repeat what the row says
    try:
        client.execute(stderr=subprocess.DEVNULL)  # the kernel's own log ([IPKernelApp] WARNING ...), not the learner's
    except CellTimeoutError:
        return [_stopped(path, notebook, running, f"a cell ran past --timeout {timeout} s",
                         "fix the answer that never finishes (a loop, a collective another rank skips) "
                         "or give a larger --timeout")]
    except DeadKernelError:
        return [_stopped(path, notebook, running, "the kernel died running a cell",
                         "os._exit(), a crash in C code or running out of memory; run that cell in Jupyter to see")]
    finally:
        sockets.cleanup()
    return executed_rows(notebook, path.stem)


def kernel_socket_settings(folder: str) -> dict[str, str]:
    """jupyter_client's KernelManager settings for a kernel that talks over Unix sockets in `folder`, where ZeroMQ has
    them: {'transport': 'ipc', 'ip': the sockets' path}; {} elsewhere (e.g. Windows: TCP ports on 127.0.0.1).

    Over TCP, jupyter_client picks five free ports and the kernel binds them a second or more later; on a busy
    machine (a JupyterHub host, a test run with ranks of its own) another program can take one in between, and the
    kernel dies before it answers. A socket file in a folder of the kernel's own is taken by no one else.
    """
    import zmq  # lazy: only what starts kernels needs it

    ip = os.path.join(folder, "kernel")   # jupyter_client adds -1 ... -5
    if not zmq.has("ipc") or len(ip) + 3 > 100:   # a socket path is limited to about 104-108 bytes
        return {}
    return {"transport": "ipc", "ip": ip}


def kernel_sockets_config(folder: str):
    """`kernel_socket_settings` as the traitlets Config a grading NotebookClient passes to its kernel manager."""
    from traitlets.config import Config  # lazy: only grading starts kernels

    settings = kernel_socket_settings(folder)
    return Config({"KernelManager": settings}) if settings else Config()


_QUIET = logging.getLogger("ddp_lab.grade.nbclient")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def _unreadable(path: Path, error: Exception) -> str:
    """Why nbformat could not read `path`, in a few words."""
    if path.stat().st_size == 0:
        return "the file is empty"
    cause = error.__cause__ if isinstance(error.__cause__, json.JSONDecodeError) else error
    if isinstance(cause, json.JSONDecodeError):
        return f"its JSON breaks off or is broken ({cause.msg} at line {cause.lineno}, column {cause.colno})"
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {_shorten(first)}"


def _stopped(path: Path, notebook, running: list[int], what: str, fix: str) -> Row:
    """The row of a notebook whose execution stopped in cell `running[-1]`: where, and what to do."""
    index = running[-1] if running else 0
    exercise = ""
    for cell in notebook.cells[:index + 1]:
        heading = EXERCISE_HEADING.search(cell.source) if cell.cell_type == "markdown" else None
        exercise = heading.group(1).strip() if heading else exercise
    source = notebook.cells[index].source.strip().splitlines() if notebook.cells else []
    where = f" (cell {index + 1}, first line `{_shorten(source[0], 60)}`)" if source else f" (cell {index + 1})"
    return Row(path.stem, exercise, COULD_NOT_RUN, f"{what}{where}: {fix}")


def _shorten(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def executed_rows(notebook, name: str) -> list[Row]:
    """The rows of an exercise notebook already executed top to bottom (errors allowed).

    `grade_notebook` calls it after executing; tests/test_exercises.py calls it on the
    generated exercises it executes anyway, so every exercise is graded without a second run.
    A notebook of the course's exercises gets one row per exercise the course lists for it
    (exercise_list.py), in the course's order: an exercise without its check cell is a ✗ row.
    """
    checks, exercise, answer_error = [], "", ""  # (exercise heading, check cell, row) of every check cell
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            heading = EXERCISE_HEADING.search(cell.source)
            if heading:
                exercise, answer_error = heading.group(1).strip(), ""
        elif "check" in cell.metadata.get("tags", []):
            checks.append((exercise, cell, _row(name, exercise or f"check {len(checks) + 1}", cell, answer_error)))
        elif cell.cell_type == "code":
            answer_error = _error_line(cell) or answer_error
    expected = expected_exercises(name, notebook.cells, COURSE / "solutions")
    if expected is None:
        return [row for _, _, row in checks]
    return _course_rows(name, expected, checks)


def _course_rows(name: str, expected, checks: list) -> list[Row]:
    """One row per exercise of the course's list, then any other check cell the notebook has.

    A check cell belongs to the exercise whose check it calls. An exercise none calls gets a ✗
    row: its check cell is missing (deleted, or its `check` tag removed), or the check cell under
    its heading was changed to call something else.
    """
    rows, used = [], set()
    restore = f"restore it from the course's exercises/{course_name(name)}.ipynb"

    def first_unused(belongs) -> int | None:
        return next((i for i, check in enumerate(checks) if i not in used and belongs(*check)), None)

    for exercise in expected:
        calling = first_unused(lambda heading, cell, row: exercise.check in calls(cell.source))
        under_heading = first_unused(lambda heading, cell, row: heading == exercise.heading)
        if calling is not None:
            used.add(calling)
            rows.append(checks[calling][2])
        elif under_heading is not None:
            used.add(under_heading)
            rows.append(Row(name, exercise.heading, FAILED,
                            f"its check cell no longer calls ddp_lab.checks.{exercise.check}(...): {restore}"))
        else:
            rows.append(Row(name, exercise.heading, FAILED,
                            f"its check cell is missing (deleted, or its `check` tag removed): {restore}"))
    return rows + [row for i, (_, _, row) in enumerate(checks) if i not in used]


def _row(notebook: str, exercise: str, check_cell, answer_error: str) -> Row:
    error = _error(check_cell)
    if error is None:
        text = "".join(o.get("text", "") for o in check_cell.outputs if o.output_type == "stream")
        if any(line.startswith("✓") for line in text.splitlines()):
            return Row(notebook, exercise, PASSED)
        return Row(notebook, exercise, FAILED, "the check printed no ✓ line: was the check cell changed?")
    name, value = error
    if (name == "CheckFailed" and _NOT_WRITTEN in value) or name == "NotImplementedError" \
            or answer_error.startswith("NotImplementedError"):
        return Row(notebook, exercise, NOT_ATTEMPTED)  # the stub (a function's or a cell's) still raises
    if answer_error:  # e.g. a SyntaxError in the answer: the check then saw no (or an old) answer
        return Row(notebook, exercise, FAILED, f"your answer cell raised {answer_error}")
    first = value.strip().splitlines()[0] if value.strip() else ""
    return Row(notebook, exercise, FAILED, first if name == "CheckFailed" else f"{name}: {first}")


def _error(cell) -> tuple[str, str] | None:
    for output in cell.get("outputs", []):
        if output.output_type == "error":
            return output.ename, output.evalue
    return None


def _error_line(cell) -> str:
    error = _error(cell)
    if error is None:
        return ""
    lines = error[1].strip().splitlines()
    return f"{error[0]}: {lines[0]}" if lines else error[0]


def _is_exercise_notebook(notebook: Path) -> bool:
    """Whether a notebook has a cell tagged `check` or is one of the course's exercise notebooks (its check
    cells deleted, perhaps); one that cannot be read counts, to get its row."""
    try:
        cells = json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])
        return any("check" in cell.get("metadata", {}).get("tags", []) for cell in cells) or \
            expected_exercises(notebook.stem, cells, COURSE / "solutions") is not None
    except (OSError, ValueError, AttributeError):
        return True


def _notebooks(paths: list[Path]) -> list[Path]:
    """The notebooks to grade: those named, and in each folder those with check cells (my-work/ holds lessons too)."""
    found = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.glob("*.ipynb")
                                if not p.name.startswith(".") and _is_exercise_notebook(p)))
        elif path.suffix == ".ipynb" and path.is_file():
            found.append(path)
        else:
            raise FileNotFoundError(f"{path} is neither a folder nor a notebook (.ipynb): give a folder of "
                                    "exercise notebooks or a notebook, e.g. `python -m ddp_lab grade my-work/`.")
    if not found:
        raise FileNotFoundError(f"no exercise notebooks (with cells tagged `check`) in {', '.join(map(str, paths))}: "
                                "grade your copies, `python -m ddp_lab grade my-work/`, or exercises/.")
    return found


def table(rows: list[Row]) -> str:
    """The rows as an aligned text table followed by a one-line count."""
    header = Row("notebook", "exercise", "result", "feedback")
    widths = [max(len(getattr(row, field)) for row in [header, *rows]) for field in ("notebook", "exercise", "result")]
    lines = []
    for row in [header, *rows]:
        cells = [row.notebook.ljust(widths[0]), row.exercise.ljust(widths[1]), row.result.ljust(widths[2])]
        lines.append("  ".join(cells + [row.feedback]).rstrip())
    counts = {result: sum(row.result == result for row in rows)
              for result in (PASSED, FAILED, NOT_ATTEMPTED, COULD_NOT_RUN)}
    graded = len(rows) - counts[COULD_NOT_RUN]
    unrun = f"; {counts[COULD_NOT_RUN]} notebook(s) could not run" if counts[COULD_NOT_RUN] else ""
    lines.append(f"{counts[PASSED]} ✓, {counts[FAILED]} ✗, {counts[NOT_ATTEMPTED]} not attempted "
                 f"({graded} exercises){unrun}")
    return "\n".join(lines)


def _progress(done: int, total: int, notebook: Path, rows: list[Row], seconds: float) -> None:
    counts = {result: sum(row.result == result for row in rows) for result in (PASSED, FAILED, NOT_ATTEMPTED)}
    said = (f"could not run ({rows[0].feedback.split(':')[0]})" if rows and rows[0].result == COULD_NOT_RUN else
            ", ".join(f"{n} {result}" for result, n in counts.items() if n) or "no checks")
    print(f"[{done}/{total}] {notebook.stem}: {said} ({seconds:.0f} s)", file=sys.stderr, flush=True)


def _course_python() -> str:
    """How to run the course's Python: its venv if `make lab` made one, else this Python."""
    venv = COURSE / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def main(paths: list[str], as_json: bool = False, timeout: int = CELL_TIMEOUT_S, jobs: int | None = None) -> int:
    """Print the grade table (or JSON); the exit status is one of EXIT_* (see the module's docstring)."""
    if timeout < 1:
        print(f"--timeout {timeout}: give at least 1 second (how long one cell may run; default {CELL_TIMEOUT_S}).")
        return EXIT_USAGE
    if jobs is not None and jobs < 1:
        print(f"--jobs {jobs}: grade at least 1 notebook at a time (default: {default_jobs()} here).")
        return EXIT_USAGE
    try:
        notebooks = [Path(p) for p in paths] if paths else default_paths()
        count = len(_notebooks(notebooks))   # a bad path is answered before nbclient's import (about 2 s here)
    except FileNotFoundError as error:
        print(error)
        return EXIT_USAGE
    try:
        import nbclient  # noqa: F401  (the course's requirements have it; a bare install may not)
        import ipykernel  # noqa: F401
    except ImportError as error:
        print(f"grade runs notebooks in kernels, and this Python ({sys.executable}) lacks {error.name}: run "
              f"`{_course_python()} -m ddp_lab grade` (the course's environment, made by `make lab`), or install "
              "nbclient and ipykernel into this one.")
        return EXIT_USAGE
    try:
        jobs = jobs or default_jobs()
        print(f"grading {count} notebook(s) in {', '.join(map(str, notebooks))}, {min(jobs, count)} at a time",
              file=sys.stderr, flush=True)
        rows = grade_paths(notebooks, timeout, jobs, progress=_progress)
    except FileNotFoundError as error:
        print(error)
        return EXIT_USAGE
    print(json.dumps([asdict(row) for row in rows], ensure_ascii=False, indent=1) if as_json else table(rows))
    if any(row.result == COULD_NOT_RUN for row in rows):
        return EXIT_NOT_GRADED
    return EXIT_WRONG if any(row.result == FAILED for row in rows) else EXIT_PASSED

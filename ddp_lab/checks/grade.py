"""`python -m ddp_lab grade [exercises/]`: every exercise's state in one table, for a classroom.

Each exercise notebook runs top to bottom in a fresh kernel, past any failing cell, from a
copy in memory: the learner's file is never written. Every check cell's outcome becomes one
row: ✓, ✗ with the check's first line of feedback, or "not attempted" (the answer still
raises the exercise's NotImplementedError).

Introduced in the README's Exercises section (`python -m ddp_lab grade`).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

PASSED, FAILED, NOT_ATTEMPTED = "✓", "✗", "not attempted"
CELL_TIMEOUT_S = 600  # a whole check, ranks included; each check stops a deadlock itself much sooner
_EXERCISE_HEADING = re.compile(r"^##\s+(Exercise\b.*)$", re.MULTILINE)
_NOT_WRITTEN = "is not written yet"


@dataclass
class Row:
    """One exercise: where it is, and how its check ended."""

    notebook: str
    exercise: str
    result: str
    feedback: str = ""


def grade_paths(paths: list[Path], timeout: int = CELL_TIMEOUT_S) -> list[Row]:
    """Grade every exercise notebook in `paths` (folders are searched for *.ipynb)."""
    rows: list[Row] = []
    for notebook in _notebooks(paths):
        rows.extend(grade_notebook(notebook, timeout))
    return rows


def grade_notebook(path: Path, timeout: int = CELL_TIMEOUT_S) -> list[Row]:
    """Execute one exercise notebook (not saved) and read the outcome of each check cell."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=timeout, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent.resolve())}}).execute()
    return executed_rows(notebook, path.stem)


def executed_rows(notebook, name: str) -> list[Row]:
    """The rows of an exercise notebook already executed top to bottom (errors allowed).

    `grade_notebook` calls it after executing; tests/test_exercises.py calls it on the
    generated exercises it executes anyway, so every exercise is graded without a second run.
    """
    rows, exercise, answer_error = [], "", ""
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            heading = _EXERCISE_HEADING.search(cell.source)
            if heading:
                exercise, answer_error = heading.group(1).strip(), ""
        elif "check" in cell.metadata.get("tags", []):
            rows.append(_row(name, exercise or f"check {len(rows) + 1}", cell, answer_error))
        elif cell.cell_type == "code":
            answer_error = _error_line(cell) or answer_error
    return rows


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


def _notebooks(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.glob("*.ipynb") if not p.name.startswith(".")))
        elif path.suffix == ".ipynb" and path.is_file():
            found.append(path)
        else:
            raise FileNotFoundError(f"{path} is neither a folder nor a notebook (.ipynb): "
                                    "give the exercises folder, e.g. `python -m ddp_lab grade exercises/`.")
    if not found:
        raise FileNotFoundError(f"no .ipynb notebooks in {', '.join(map(str, paths))}.")
    return found


def table(rows: list[Row]) -> str:
    """The rows as an aligned text table followed by a one-line count."""
    header = Row("notebook", "exercise", "result", "feedback")
    widths = [max(len(getattr(row, field)) for row in [header, *rows]) for field in ("notebook", "exercise", "result")]
    lines = []
    for row in [header, *rows]:
        cells = [row.notebook.ljust(widths[0]), row.exercise.ljust(widths[1]), row.result.ljust(widths[2])]
        lines.append("  ".join(cells + [row.feedback]).rstrip())
    counts = {result: sum(row.result == result for row in rows) for result in (PASSED, FAILED, NOT_ATTEMPTED)}
    lines.append(f"{counts[PASSED]} ✓, {counts[FAILED]} ✗, {counts[NOT_ATTEMPTED]} not attempted "
                 f"({len(rows)} exercises)")
    return "\n".join(lines)


def main(paths: list[str], as_json: bool = False, timeout: int = CELL_TIMEOUT_S) -> int:
    """Print the grade table (or JSON); 0 only when every attempted exercise passes."""
    try:
        import nbclient  # noqa: F401  (the course's requirements have it; a bare install may not)
    except ImportError:
        print("grade runs notebooks with nbclient, which is not installed here: pip install nbclient ipykernel")
        return 2
    try:
        rows = grade_paths([Path(p) for p in paths], timeout)
    except FileNotFoundError as error:
        print(error)
        return 2
    print(json.dumps([asdict(row) for row in rows], ensure_ascii=False, indent=1) if as_json else table(rows))
    return 1 if any(row.result == FAILED for row in rows) else 0

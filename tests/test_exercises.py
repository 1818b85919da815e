"""The exercise workflow: exercises/ is generated from solutions/, and every check can fail.

For every solutions/NN-name.ipynb:
- the committed exercises/NN-name.ipynb equals what tools/make_exercises.py generates now;
- the solution's stored outputs show every `check` cell passing (nbval re-runs them in CI);
- executing the generated exercise top to bottom in a fresh kernel, every `check` cell
  raises NotImplementedError or CheckFailed, and no other cell fails for another reason
  (cells outside checks may fail only by calling a stub: NotImplementedError, directly or
  reported by ddp_lab.launch from a rank).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]-*.ipynb"))
EXERCISES = ROOT / "exercises"
CHECK_FAILURES = {"NotImplementedError", "CheckFailed"}
LAUNCH_ERRORS = {"LaunchError", "RankFailed"}


def _load_generator():
    spec = importlib.util.spec_from_file_location("make_exercises", ROOT / "tools" / "make_exercises.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_exercises = _load_generator()
names = [path.name for path in SOLUTIONS]


def _is_check(cell) -> bool:
    return cell.cell_type == "code" and "check" in cell.metadata.get("tags", [])


def _errors(cell) -> list:
    return [output for output in cell.get("outputs", []) if output.output_type == "error"]


def _is_stub_error(error) -> bool:
    """A stub was called: directly, or on ranks (ddp_lab.launch reports the rank's NotImplementedError)."""
    if error.ename == "NotImplementedError":
        return True
    return error.ename in LAUNCH_ERRORS and "NotImplementedError" in error.evalue


def test_there_are_solutions():
    assert SOLUTIONS, "no solutions/NN-*.ipynb found"


@pytest.mark.parametrize("solution", SOLUTIONS, ids=names)
def test_committed_exercise_equals_generated(solution):
    target = EXERCISES / solution.name
    assert target.exists(), f"{target.name} missing: run `python tools/make_exercises.py`"
    assert target.read_text(encoding="utf-8") == make_exercises.exercise_text(solution), (
        f"exercises/{solution.name} is stale or hand-edited: run `python tools/make_exercises.py`")


def test_every_exercise_has_a_solution():
    orphans = [p.name for p in EXERCISES.glob("*.ipynb") if not (ROOT / "solutions" / p.name).exists()]
    assert not orphans, f"exercises without a solutions/ source: {orphans}"


@pytest.mark.parametrize("solution", SOLUTIONS, ids=names)
def test_solution_checks_passed_in_stored_outputs(solution):
    notebook = nbformat.read(solution, as_version=4)
    checks = [cell for cell in notebook.cells if _is_check(cell)]
    assert checks, f"{solution.name} has no cell tagged 'check'"
    for cell in checks:
        assert not _errors(cell), f"{solution.name}: a check cell failed in the stored outputs:\n{cell.source}"
        text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        assert any(line.startswith("✓") for line in text.splitlines()), (
            f"{solution.name}: check cell has no '✓' line in its stored output (execute the notebook):\n"
            f"{cell.source}")


@pytest.mark.parametrize("solution", SOLUTIONS, ids=names)
def test_every_check_fails_on_the_generated_exercise(solution):
    exercise = make_exercises.make_exercise(nbformat.read(solution, as_version=4), name=solution.name)
    NotebookClient(exercise, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(EXERCISES)}}).execute()
    checks = 0
    for index, cell in enumerate(exercise.cells):
        errors = _errors(cell)
        where = f"{solution.name} cell {index}:\n{cell.source}\n"
        if _is_check(cell):
            checks += 1
            assert errors, f"{where}passed on the exercise (stub) notebook: this check cannot fail"
            assert errors[0].ename in CHECK_FAILURES, (
                f"{where}failed with {errors[0].ename}: {errors[0].evalue}; expected one of {CHECK_FAILURES}")
        elif errors:
            assert _is_stub_error(errors[0]), (
                f"{where}a non-check cell failed with {errors[0].ename}: {errors[0].evalue}")
    assert checks, f"{solution.name} has no cell tagged 'check'"

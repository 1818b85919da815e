"""The exercise workflow: exercises/ is generated from solutions/, and every check can fail.

For every solutions/NN-name.ipynb:
- the committed exercises/NN-name.ipynb equals what tools/make_exercises.py generates now;
- the solution's stored outputs show every `check` cell passing (nbval re-runs them in CI);
- executing the generated exercise top to bottom in a fresh kernel, every `check` cell
  raises NotImplementedError or CheckFailed, and no other cell fails for another reason
  (cells outside checks may fail only by calling a stub: NotImplementedError, directly or
  reported by ddp_lab.launch from a rank);
- every cell that fails there is tagged `raises-exception`, so JupyterLab's Run All goes on
  to the end, and a CheckFailed shows as its message only (no frames of ddp_lab's checks);
- a stub's hint is wrapped to fit the editor, and the checks still read it back whole;
- no stub's hint holds a line of its answer (a hint names the idea and the API, not the code);
- every exercise's intro says how to work through it, `ddp_lab grade` on the learner's copy in my-work/
  included, and every exercise heading reads `## Exercise N · Title`;
- `ddp_lab grade` reads every check of that executed exercise as "not attempted" (the same
  execution: tests/test_grade.py runs the command itself on one exercise only).
"""

from __future__ import annotations

import ast
import importlib.util
import linecache
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from ddp_lab.checks import grade

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
    """A stub was called: directly, on ranks (ddp_lab.launch reports the rank's NotImplementedError), or by a
    ddp_lab helper that says so in one line (exercise 13's compare_plans)."""
    if error.ename == "NotImplementedError":
        return True
    if error.ename == "CheckFailed":
        return "is not written yet" in error.evalue
    return error.ename in LAUNCH_ERRORS and "NotImplementedError" in error.evalue


def test_there_are_solutions():
    assert SOLUTIONS, "no solutions/NN-*.ipynb found"


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda path: path.name)
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
def test_every_check_fails_on_the_generated_exercise(solution, notebook_kernel_environment):
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
        if errors:
            assert "raises-exception" in cell.metadata.get("tags", []), (
                f"{where}fails on the unsolved exercise but is not tagged raises-exception: JupyterLab's "
                "Run All would stop there (tools/make_exercises.py tags cells that run an answer)")
        if errors and errors[0].ename == "CheckFailed":
            shown = "\n".join(errors[0].traceback)
            assert shown.startswith("CheckFailed: ") and "Traceback" not in shown and 'File "' not in shown, (
                f"{where}the notebook shows a traceback instead of the check's message:\n{shown}")
            assert errors[0].evalue.splitlines()[0] in shown.replace("\n", " ")
    assert checks, f"{solution.name} has no cell tagged 'check'"
    rows = grade.executed_rows(exercise, solution.stem)
    assert len(rows) == checks and all(row.result == grade.NOT_ATTEMPTED for row in rows), (
        f"{solution.name}: grade must read every check of the unsolved exercise as not attempted: {rows}")


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda path: path.name)
def test_intro_says_how_to_work_through_the_exercises(solution):
    intro = make_exercises.make_exercise(nbformat.read(solution, as_version=4), name=solution.name).cells[0]
    assert intro.cell_type == "markdown"
    assert "Run All Cells" in intro.source, f"{solution.name}: the intro does not say what Run All does"
    assert f"python -m ddp_lab grade my-work/exercises-{solution.name}" in intro.source, (
        f"{solution.name}: the intro does not show `python -m ddp_lab grade my-work/exercises-{solution.name}`")
    assert ".venv/bin/python -m ddp_lab grade" in intro.source, f"{solution.name}: the intro does not name the course's Python"


EXERCISE_HEADING = re.compile(r"^## Exercise \d+ · [A-Z`]", re.M)


@pytest.mark.parametrize("solution", SOLUTIONS, ids=names)
def test_every_exercise_heading_has_the_same_style(solution):
    """`## Exercise N · Title` everywhere: grade's rows show the headings, one table in one style."""
    for cell in nbformat.read(solution, as_version=4).cells:
        for line in cell.source.splitlines() if cell.cell_type == "markdown" else []:
            if line.startswith("## Exercise"):
                assert EXERCISE_HEADING.match(line), f"{solution.name}: {line!r} is not '## Exercise N · Title'"


def _hinted_stubs(solution: Path):
    """(hint, generated stub source) for each function whose whole body is one hinted block."""
    for cell in nbformat.read(solution, as_version=4).cells:
        if cell.cell_type != "code" or "### HINT:" not in cell.source:
            continue
        stub = make_exercises.stub_source(cell.source)
        node = ast.parse(stub).body[0]
        body = node.body if isinstance(node, ast.FunctionDef) else []
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        if len(body) == 1 and isinstance(body[0], ast.Raise):  # what ensure_written recognises
            hint = next(m for m in map(make_exercises.HINT.match, cell.source.splitlines()) if m)
            yield hint.group("text"), stub


def test_long_hints_are_wrapped_to_fit_the_editor():
    stubs = [stub for solution in SOLUTIONS for _, stub in _hinted_stubs(solution)]
    wrapped = [stub for stub in stubs if re.search(r"NotImplementedError\(\n", stub)]
    assert wrapped, "no hint long enough to be wrapped: the wrapping is not exercised"
    for stub in stubs:
        for line in stub.splitlines():
            if "NotImplementedError" in line or line.lstrip().startswith('"'):
                assert len(line) <= make_exercises.MAX_LINE, f"generated line too long:\n{line}"


@pytest.mark.parametrize("solution", SOLUTIONS, ids=names)
def test_checks_read_back_the_whole_wrapped_hint(solution):
    """ensure_written reads the stub's hint from its source: wrapped, it must still be one string."""
    from ddp_lab.checks import CheckFailed
    from ddp_lab.checks.common import ensure_written

    notebook = nbformat.read(solution, as_version=4)
    namespace: dict = {}
    exec(notebook.cells[1].source, namespace)  # the notebook's imports, for the annotations
    stubs = list(_hinted_stubs(solution))
    if not stubs:
        pytest.skip(f"{solution.name} has no hinted function stub")
    for number, (hint, stub) in enumerate(stubs):
        filename = f"<exercise {solution.name} stub {number}>"  # inspect.getsource reads it from linecache
        linecache.cache[filename] = (len(stub), None, stub.splitlines(keepends=True), filename)
        exec(compile(stub, filename, "exec"), namespace)
        function = namespace[ast.parse(stub).body[0].name]
        with pytest.raises(CheckFailed, match="is not written yet") as failure:
            ensure_written(function)
        assert f"NotImplementedError({hint!r})" in str(failure.value)


def _solution_blocks(solution: Path):
    """(hint, the answer's code lines) for every BEGIN/END SOLUTION block with a hint."""
    for cell in nbformat.read(solution, as_version=4).cells:
        lines = cell.source.splitlines()
        for start, line in enumerate(lines):
            if not make_exercises.BEGIN.match(line) or start + 1 >= len(lines):
                continue
            hint = make_exercises.HINT.match(lines[start + 1])
            if not hint:
                continue
            end = next(i for i in range(start, len(lines)) if make_exercises.END.match(lines[i]))
            code = [answer.split("#")[0].strip() for answer in lines[start + 2:end]]
            yield hint.group("text"), [answer for answer in code if answer]


@pytest.mark.parametrize("solution", SOLUTIONS, ids=names)
def test_no_hint_holds_a_line_of_its_answer(solution):
    """The feedback a learner sees first (on Run All, every stub's hint) must not hand out the answer."""
    for hint, answer in _solution_blocks(solution):
        spelled = [line for line in answer if len(line) >= 12 and line.rstrip(":") in hint
                   and not re.fullmatch(r"[\w.]+\(\)", line)]  # naming an API without arguments is fine
        assert not spelled, f"{solution.name}: the hint {hint!r} spells out the answer's line(s) {spelled}"

"""`python -m ddp_lab grade`: real kernels run the real exercise notebooks and their checks."""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def grade(*args: str, cwd: Path = ROOT) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "ddp_lab", "grade", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900)
    return done.returncode, done.stdout


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.ipynb"))}


# One exercise, copied into a folder of its own: the command's folder form, --json and "never
# modified" need no more. That grade reads every check of every shipped exercise as "not
# attempted" is tests/test_exercises.py's test_every_check_fails_on_the_generated_exercise, on
# the execution it makes anyway (grading all 13 here again cost 45 s of CI).
GRADED_EXERCISE = "03-dataparallel.ipynb"


def test_an_unsolved_exercise_is_not_attempted_and_left_untouched(tmp_path):
    folder = tmp_path / "exercises"
    folder.mkdir()
    shutil.copy(ROOT / "exercises" / GRADED_EXERCISE, folder / GRADED_EXERCISE)
    (folder / "notes.txt").write_text("not a notebook: grade skips it\n")
    before = digest(folder)
    code, out = grade(str(folder), "--json")
    rows = json.loads(out)
    assert code == 0, out  # nothing attempted, so nothing failed
    assert {row["notebook"] for row in rows} == {Path(GRADED_EXERCISE).stem}
    assert len(rows) > 1 and all(row["result"] == "not attempted" for row in rows), rows
    assert digest(folder) == before


# Every solution passing its checks is proven by nbval (each check cell's stored "✓" line is
# compared); here grade's ✓ rows on one solution (lesson 03: several checks, the cheapest to run).
# Grading 3 solutions cost 14 s, all 13 cost 92 s.
GRADED_SOLUTIONS = ("03-dataparallel.ipynb",)


def test_solutions_pass_their_checks():
    code, out = grade(*(f"solutions/{name}" for name in GRADED_SOLUTIONS))
    assert code == 0, out
    lines = out.splitlines()
    assert {line.split()[0] for line in lines[1:-1]} == {Path(name).stem for name in GRADED_SOLUTIONS}, out
    assert lines[-1].endswith(" ✗, 0 not attempted (%d exercises)" % (len(lines) - 2)) and " 0 ✗" in lines[-1], out
    assert all("  ✓" in line for line in lines[1:-1]), out


def test_a_wrong_answer_is_shown_with_the_checks_feedback(tmp_path):
    notebook = nbformat.read(ROOT / "exercises" / "04-ddp-from-scratch.ipynb", as_version=4)
    answer = next(cell for cell in notebook.cells if cell.source.startswith("def average_gradients"))
    # a wrong answer learners write: sum the gradients over ranks, forget to divide
    answer.source = ("def average_gradients(model: nn.Module) -> None:\n"
                     "    for p in model.parameters():\n"
                     "        dist.all_reduce(p.grad)\n")
    path = tmp_path / "04-ddp-from-scratch.ipynb"
    nbformat.write(notebook, path)
    written = path.read_bytes()

    code, out = grade(str(path))
    assert code == 1, out
    row = next(line for line in out.splitlines() if "Average the gradients" in line)
    assert "✗" in row and "expected the mean over ranks" in row, row  # the check's own first line of feedback
    assert "Start every rank from rank 0's model" in out and "not attempted" in out
    assert path.read_bytes() == written  # never modified


def test_bad_paths_say_what_to_give(tmp_path):
    code, out = grade(str(tmp_path / "nowhere"))
    assert code == 2 and "neither a folder nor a notebook" in out and "grade exercises/" in out
    code, out = grade(str(tmp_path))
    assert code == 2 and "no .ipynb notebooks" in out


def test_help_says_what_grade_does():
    done = subprocess.run([sys.executable, "-m", "ddp_lab", "grade", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "never modified" in done.stdout and "--json" in done.stdout

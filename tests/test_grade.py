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


def grade(*args: str, cwd: Path = ROOT, stderr: list | None = None) -> tuple[int, str]:
    """Run the command; its exit status and stdout (and stderr appended to `stderr`, if given)."""
    done = subprocess.run([sys.executable, "-m", "ddp_lab", "grade", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900)
    if stderr is not None:
        stderr.append(done.stderr)
    return done.returncode, done.stdout


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.ipynb"))}


# Two exercises, copied into a folder of their own, graded two at a time from another directory: the
# command's folder form, --json, --jobs, the progress lines and "never modified" need no more. That grade
# reads every check of every shipped exercise as "not attempted" is tests/test_exercises.py's
# test_every_check_fails_on_the_generated_exercise, on the execution it makes anyway (grading all 13 here
# again cost 45 s of CI). Lesson 13's checks start no ranks: the second notebook adds about 5 s.
GRADED_EXERCISES = ("03-dataparallel.ipynb", "13-plan-your-training-run.ipynb")


def test_unsolved_exercises_are_not_attempted_and_left_untouched(tmp_path):
    folder = tmp_path / "my-work"
    folder.mkdir()
    for name in GRADED_EXERCISES:
        shutil.copy(ROOT / "exercises" / name, folder / name)
    (folder / "notes.txt").write_text("not a notebook: grade skips it\n")
    shutil.copy(ROOT / "notebooks" / "01-data-vs-model-parallelism.ipynb", folder)  # a lesson's copy: no checks, skipped
    before = digest(folder)
    stderr: list = []
    code, out = grade(str(folder), "--json", "--jobs", "2", cwd=tmp_path, stderr=stderr)
    rows = json.loads(out)
    assert code == 0, out  # nothing attempted, so nothing failed
    assert [row["notebook"] for row in rows] == sorted(row["notebook"] for row in rows)  # in the notebooks' order
    assert {row["notebook"] for row in rows} == {Path(name).stem for name in GRADED_EXERCISES}
    assert len(rows) > 2 and all(row["result"] == "not attempted" for row in rows), rows
    assert digest(folder) == before
    progress = stderr[0].splitlines()
    assert progress[0] == f"grading 2 notebook(s) in {folder}, 2 at a time", stderr
    assert sorted(line.split(" (")[0] for line in progress[1:]) == [
        "[1/2] 03-dataparallel: 2 not attempted", "[2/2] 13-plan-your-training-run: 2 not attempted"] or sorted(
        line.split(" (")[0] for line in progress[1:]) == [
        "[1/2] 13-plan-your-training-run: 2 not attempted", "[2/2] 03-dataparallel: 2 not attempted"], stderr
    assert "IPKernelApp" not in stderr[0] + out and "WARNING" not in stderr[0] + out  # the kernels' own logs


def test_without_a_path_it_grades_the_courses_my_work_from_anywhere(tmp_path, monkeypatch):
    from ddp_lab.checks import grade as grading

    monkeypatch.setattr(grading, "COURSE", tmp_path)
    (tmp_path / "exercises").mkdir()
    assert grading.default_paths() == [tmp_path / "exercises"]  # before make lab made my-work/
    (tmp_path / "my-work").mkdir()
    (tmp_path / "my-work" / "exercises-03-dataparallel.ipynb").write_text("{}")
    assert grading.default_paths() == [tmp_path / "my-work"]
    assert grading.default_jobs() >= 1


def test_without_nbclient_the_advice_names_the_courses_environment():
    code = ("import sys; sys.modules['nbclient'] = None\n"  # this Python cannot import nbclient
            "from ddp_lab.__main__ import main\nraise SystemExit(main(['grade']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    venv = ROOT / ".venv" / "bin" / "python"
    assert done.returncode == 2, done
    assert f"`{venv if venv.exists() else sys.executable} -m ddp_lab grade` (the course's environment" in done.stdout


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
    assert code == 2 and "neither a folder nor a notebook" in out and "grade my-work/" in out
    code, out = grade(str(tmp_path))
    assert code == 2 and "no exercise notebooks" in out


def test_help_says_what_grade_does():
    done = subprocess.run([sys.executable, "-m", "ddp_lab", "grade", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "never modified" in done.stdout and "--json" in done.stdout
    words = " ".join(done.stdout.split())  # argparse wraps the description
    assert "0 every attempted exercise passes; 1 an answer is wrong; 2 bad usage" in words
    assert "3 a notebook could not be graded" in words


def notebook_of(*cells: str, check: str = "print('✓ it ran')") -> str:
    """A tiny exercise notebook: an exercise heading, code cells, then a check-tagged cell."""
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("## Exercise 1 · Run"),
        *(nbformat.v4.new_code_cell(source) for source in cells),
        nbformat.v4.new_code_cell(check, metadata={"tags": ["check"]}),
    ])
    return nbformat.writes(notebook)


def test_a_notebook_that_cannot_run_gets_one_row_and_the_others_are_still_graded(tmp_path):
    """Broken file, empty file, a cell past --timeout, a dying kernel: one row each, then the next notebook (whose
    kernel talks over Unix sockets)."""
    whole = notebook_of("x = 1")
    (tmp_path / "a-truncated.ipynb").write_text(whole[:len(whole) // 2])
    (tmp_path / "b-empty.ipynb").write_text("")
    (tmp_path / "c-sleeps.ipynb").write_text(notebook_of("import time\ntime.sleep(30)"))
    (tmp_path / "d-dies.ipynb").write_text(notebook_of("import os\nos._exit(1)"))
    # the kernels grade starts talk over Unix sockets (grade.kernel_sockets_config): no TCP port to lose to a rank
    (tmp_path / "e-fine.ipynb").write_text(notebook_of(
        "from ipykernel.kernelapp import IPKernelApp",
        check="assert IPKernelApp.instance().transport == 'ipc'\nprint('✓ it ran over Unix sockets')"))

    code, out = grade(str(tmp_path), "--timeout", "2", "--json")
    rows = {row["notebook"]: row for row in json.loads(out)}
    assert code == 3, out  # could not grade: not 1, which says an answer is wrong
    assert list(rows) == ["a-truncated", "b-empty", "c-sleeps", "d-dies", "e-fine"], out
    assert rows["e-fine"]["result"] == "✓", out
    unrun = {name: row["feedback"] for name, row in rows.items() if row["result"] == "could not run"}
    assert set(unrun) == {"a-truncated", "b-empty", "c-sleeps", "d-dies"}, out
    assert all("\n" not in feedback for feedback in unrun.values()), out
    assert unrun["a-truncated"].startswith("not a notebook: its JSON breaks off") and "restore" in unrun["a-truncated"]
    assert unrun["b-empty"].startswith("not a notebook: the file is empty")
    assert unrun["c-sleeps"].startswith("a cell ran past --timeout 2 s (cell 2, first line `import time`)")
    assert rows["c-sleeps"]["exercise"] == "Exercise 1 · Run"
    assert unrun["d-dies"].startswith("the kernel died running a cell (cell 2, first line `import os`)")


@pytest.mark.parametrize("timeout", ["0", "-1"])
def test_a_timeout_below_one_second_is_refused_in_one_line(timeout, tmp_path):
    (tmp_path / "fine.ipynb").write_text(notebook_of("x = 1"))  # refused before any kernel starts
    code, out = grade(str(tmp_path), "--timeout", timeout)
    assert code == 2 and out == f"--timeout {timeout}: give at least 1 second (how long one cell may run; default 600).\n"


# Deleting check cells must not make exercises vanish from the table. These read the stored outputs of an
# executed solution (every check ✓) instead of running it: no kernel, milliseconds.
def solution_without(*checks: str, replace: str | None = None):
    """solutions/03-dataparallel.ipynb as executed, without the check cells that call `checks` (or, with
    `replace`, those cells' source replaced by it)."""
    notebook = nbformat.read(ROOT / "solutions" / "03-dataparallel.ipynb", as_version=4)
    kept = []
    for cell in notebook.cells:
        if "check" in cell.metadata.get("tags", []) and any(check in cell.source for check in checks):
            if replace is None:
                continue
            cell.source = replace
        kept.append(cell)
    notebook.cells = kept
    return notebook


def results(rows) -> list[tuple[str, str]]:
    return [(row.exercise.split(" · ")[0], row.result) for row in rows]


def test_every_exercise_the_course_lists_gets_a_row_even_without_its_check_cell():
    from ddp_lab.checks import grade as grading

    name = "exercises-03-dataparallel"  # the learner's copy in my-work/
    whole = grading.executed_rows(solution_without(), name)
    assert results(whole) == [("Exercise 1", "✓"), ("Exercise 2", "✓")]  # the control: nothing deleted
    one_gone = grading.executed_rows(solution_without("check_scatter_gather"), name)
    assert results(one_gone) == [("Exercise 1", "✗"), ("Exercise 2", "✓")], one_gone
    assert one_gone[0].feedback == ("its check cell is missing (deleted, or its `check` tag removed): restore it "
                                    "from the course's exercises/03-dataparallel.ipynb")
    all_gone = grading.executed_rows(solution_without("check_scatter_gather", "check_data_parallel_loss"), name)
    assert results(all_gone) == [("Exercise 1", "✗"), ("Exercise 2", "✗")], all_gone
    assert grading.table(all_gone).endswith("0 ✓, 2 ✗, 0 not attempted (2 exercises)")  # main's exit status: 1
    faked = grading.executed_rows(solution_without("check_data_parallel_loss", replace="print('✓ fine')"), name)
    assert results(faked) == [("Exercise 1", "✓"), ("Exercise 2", "✗")], faked
    assert faked[1].feedback.startswith("its check cell no longer calls "
                                        "ddp_lab.checks.lesson03.check_data_parallel_loss(...): restore it")
    # a notebook that is not one of the course's is graded by the check cells it has, as before
    assert grading.executed_rows(solution_without("check_scatter_gather"), "my-own-notebook")[0].result == "✓"


def test_a_folder_includes_a_course_exercise_whose_check_cells_were_all_deleted(tmp_path):
    from ddp_lab.checks import grade as grading

    no_checks = solution_without("check_scatter_gather", "check_data_parallel_loss")
    nbformat.write(no_checks, tmp_path / "exercises-03-dataparallel.ipynb")
    shutil.copy(ROOT / "notebooks" / "03-dataparallel.ipynb", tmp_path)  # the lesson's copy: no exercises, skipped
    assert grading._notebooks([tmp_path]) == [tmp_path / "exercises-03-dataparallel.ipynb"]
    assert len(grading._notebooks([ROOT / "exercises"])) == len(list((ROOT / "solutions").glob("*.ipynb")))
    with pytest.raises(FileNotFoundError, match="no exercise notebooks"):
        grading._notebooks([ROOT / "notebooks"])  # the lessons have none


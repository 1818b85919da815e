"""What `make lab` sets up besides JupyterLab: the learner's copies in my-work/ and terminals that run the course's Python.

tests/test_browser.py drives JupyterLab itself under `make lab`'s command lines; these tests
check, without a browser, the two things around it: tools/my_work.py copies every lesson and
exercise to my-work/, refreshes a copy the learner never edited after the course changed and
keeps (and names) an edited one (so working in the course leaves its files, `make test` and
`git pull` alone), and tools/lab-terminal/shell.sh, the shell of JupyterLab's terminals, puts
the course's Python first on PATH for bash, zsh and sh even when the learner's start-up files
put another first (conda, pyenv and system Pythons do), so `python -m ddp_lab grade` works there.
zsh comes from `make browser` (root + apt-get); without it the zsh case skips, except in CI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import my_work  # noqa: E402

SHELL_SCRIPT = REPO / "tools" / "lab-terminal" / "shell.sh"


def notebook(*sources: str, outputs: str = "") -> str:
    """A small notebook's text: one markdown cell per source, and a code cell whose stored output is `outputs`."""
    cells = [{"cell_type": "markdown", "metadata": {}, "source": source} for source in sources]
    cells.append({"cell_type": "code", "execution_count": None, "metadata": {}, "source": "print(1)",
                  "outputs": [{"output_type": "stream", "name": "stdout", "text": outputs}] if outputs else []})
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def sources(path: Path) -> list[str]:
    return ["".join(cell["source"]) for cell in json.loads(path.read_text())["cells"]]


def test_my_work_copies_lessons_and_exercises_refreshes_unedited_ones_and_keeps_edited_ones(tmp_path):
    for folder in ("notebooks", "exercises"):
        (tmp_path / folder).mkdir()
    (tmp_path / "notebooks" / "01-first.ipynb").write_text(notebook("lesson one"))
    (tmp_path / "exercises" / "01-first.ipynb").write_text(
        notebook("Practice for [notebooks/01-first.ipynb](../notebooks/01-first.ipynb)."))
    (tmp_path / "exercises" / "README.md").write_text("not an exercise")
    lesson, exercise = tmp_path / "my-work" / "01-first.ipynb", tmp_path / "my-work" / "exercises-01-first.ipynb"
    copied, kept, notes = my_work.make_my_work(tmp_path)
    assert copied == [lesson, exercise] and kept == [] and notes == []
    # from my-work/ the exercise's link leads to the lesson's copy beside it, not back into the tracked notebooks/
    assert sources(exercise)[0] == "Practice for [01-first.ipynb](01-first.ipynb)."
    assert sources(lesson)[0] == "lesson one"

    # the learner runs the lesson (outputs change, cells do not) and answers the exercise; nothing changes in the course
    lesson.write_text(notebook("lesson one", outputs="1\n"))
    exercise.write_text(notebook("my answer"))
    assert my_work.make_my_work(tmp_path) == ([], [lesson, exercise], [])
    assert json.loads(lesson.read_text())["cells"][-1]["outputs"] and sources(exercise)[0] == "my answer"

    # git pull changes both: the unedited lesson is refreshed, the edited exercise kept and named with what to do
    (tmp_path / "notebooks" / "01-first.ipynb").write_text(notebook("lesson one, revised"))
    (tmp_path / "exercises" / "01-first.ipynb").write_text(notebook("exercise one, revised"))
    (tmp_path / "exercises" / "02-second.ipynb").write_text(notebook("a new exercise"))
    copied, kept, notes = my_work.make_my_work(tmp_path)
    assert copied == [lesson, tmp_path / "my-work" / "exercises-02-second.ipynb"] and kept == [exercise]
    assert sources(lesson)[0] == "lesson one, revised" and sources(exercise)[0] == "my answer"
    assert notes == ["my-work/exercises-01-first.ipynb: kept your edited copy; the course's exercises/01-first.ipynb "
                     "has changed since: to get its current version, rename yours and run `make lab` again"]

    # renamed as the note says: the next make lab copies the new version, and says nothing of the renamed one
    exercise.rename(tmp_path / "my-work" / "exercises-01-first-mine.ipynb")
    copied, kept, notes = my_work.make_my_work(tmp_path)
    assert copied == [exercise] and notes == [] and sources(exercise)[0] == "exercise one, revised"


def test_copies_made_before_copies_were_recorded_are_never_overwritten(tmp_path):
    """my-work/ from the earlier make lab (exercises only, no record): an answered copy is kept and named once."""
    (tmp_path / "exercises").mkdir()
    (tmp_path / "exercises" / "01-first.ipynb").write_text(notebook("exercise one"))
    (tmp_path / "exercises" / "02-second.ipynb").write_text(notebook("exercise two"))
    (tmp_path / "my-work").mkdir()
    answered, untouched = (tmp_path / "my-work" / f"exercises-0{n}.ipynb" for n in ("1-first", "2-second"))
    answered.write_text(notebook("my answer"))
    untouched.write_text(notebook("exercise two"))
    copied, kept, notes = my_work.make_my_work(tmp_path)
    assert copied == [] and kept == [answered, untouched] and sources(answered)[0] == "my answer"
    assert len(notes) == 1 and notes[0].startswith("my-work/exercises-01-first.ipynb: kept your edited copy")
    assert my_work.make_my_work(tmp_path)[2] == []  # said once


MARKDOWN_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def test_every_link_in_the_copies_opens_from_my_work(tmp_path):
    """The course's own lessons and exercises copied as make lab does: each relative link leads to a file that exists.

    A link into my-work/ must find the copy there (another lesson, the learner's exercise); any other (../solutions/,
    ../ddp_lab/, ../templates/) must find the course's file, and none may lead to the tracked lessons or exercises
    (notebooks/, exercises/): a learner who followed it would work in the course's own files.
    """
    for folder in ("notebooks", "exercises"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    my_work.make_my_work(tmp_path)
    broken, checked = [], 0
    for copy in sorted((tmp_path / "my-work").glob("*.ipynb")):
        for cell in json.loads(copy.read_text())["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            for target in MARKDOWN_LINK.findall("".join(cell["source"])):
                if re.match(r"[a-z]+:", target):  # https:, mailto:
                    continue
                resolved = (copy.parent / target).resolve()
                inside = resolved.is_relative_to(tmp_path / "my-work")
                found = resolved.exists() if inside else (REPO / resolved.relative_to(tmp_path)).exists()
                tracked = not inside and resolved.relative_to(tmp_path).parts[0] in ("notebooks", "exercises")
                checked += 1
                if not found or tracked:
                    broken.append(f"{copy.name}: {target}" + (" (into the course's tracked files)" if tracked else ""))
    assert checked > 50 and not broken, broken


def test_git_ignores_my_work():
    require_git_checkout()
    done = subprocess.run(["git", "check-ignore", "-q", "my-work/exercises-07-pipeline-parallelism.ipynb"], cwd=REPO)
    assert done.returncode == 0, "my-work/ is not git-ignored: a learner's answers would show in git status"


def test_make_lab_copies_then_serves_with_the_terminal_shell():
    if shutil.which("make") is None:
        pytest.skip("needs make")
    printed = subprocess.run(["make", "-s", "-n", "-o", "setup", "lab"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout
    assert printed.splitlines()[0] == ".venv/bin/python tools/my_work.py", printed
    assert f'"shell_command": ["{SHELL_SCRIPT}"]' in printed and f'PATH="{REPO}/.venv/bin:$PATH"' in printed, printed


HOSTILE_START_UP = 'export PATH="/usr/bin:/bin:$PATH" LEARNER_START_UP=ran\n'  # another Python first, as conda's init does


@pytest.mark.parametrize("shell", ["bash", "zsh", "sh"])
def test_the_terminal_finds_the_courses_python_whatever_the_start_up_files_do(shell, tmp_path):
    """An interactive shell as JupyterLab's terminal starts it, after start-up files that put /usr/bin first.

    bash reads ~/.bashrc; zsh reads $ZDOTDIR/.zshenv and .zshrc (ZDOTDIR set, as many zsh set-ups do); sh reads
    none. The learner's files must still run (their variable is set), and python must be the course's: it
    imports ddp_lab, and grade without a path grades this course.
    """
    path = shutil.which(shell)
    if path is None:
        if shell == "zsh" and os.environ.get("CI", "").lower() == "true":
            pytest.fail("zsh is not installed (make browser installs it as root with apt-get)", pytrace=False)
        pytest.skip(f"needs {shell}" + (" (make browser installs it as root with apt-get)" if shell == "zsh" else ""))
    home, zdotdir = tmp_path / "home", tmp_path / "zsh-config"
    home.mkdir()
    zdotdir.mkdir()
    (home / ".bashrc").write_text(HOSTILE_START_UP)
    (zdotdir / ".zshenv").write_text('export PATH="/usr/bin:$PATH"\n')
    (zdotdir / ".zshrc").write_text(HOSTILE_START_UP)
    venv_bin = Path(sys.executable).parent
    env = {"HOME": str(home), "SHELL": path, "PATH": "/usr/bin:/bin", "DDP_LAB_VENV_BIN": str(venv_bin),
           "TERM": "dumb", **({"ZDOTDIR": str(zdotdir)} if shell == "zsh" else {})}
    commands = ("command -v python\n"
                "echo start-up: ${LEARNER_START_UP:-not run}\n"
                "python -c 'from ddp_lab.checks.grade import COURSE; print(\"course:\", COURSE)'\n"
                "exit\n")
    done = subprocess.run([str(SHELL_SCRIPT)], input=commands, env=env, capture_output=True, text=True, timeout=30)
    found = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    assert found[-3:] == [str(venv_bin / "python"), "start-up: " + ("not run" if shell == "sh" else "ran"),
                          f"course: {REPO}"], (done.stdout, done.stderr)


def require_git_checkout() -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout")

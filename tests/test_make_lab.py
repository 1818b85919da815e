"""What `make lab` sets up besides JupyterLab: the learner's copies in my-work/ and terminals that run the course's Python.

tests/test_browser.py drives JupyterLab itself under `make lab`'s command lines; these tests
check, without a browser, the two things around it: tools/my_work.py copies every exercise
once and never overwrites a copy (so solving exercises leaves the course's files, `make test`
and `git pull` alone), and tools/lab-terminal/shell.sh, the shell of JupyterLab's terminals,
puts the course's Python first on PATH even when the learner's ~/.bashrc puts another first
(conda, pyenv and system Pythons do), so `python -m ddp_lab grade` works there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import my_work  # noqa: E402

SHELL_SCRIPT = REPO / "tools" / "lab-terminal" / "shell.sh"


def test_my_work_copies_each_exercise_once_and_never_overwrites(tmp_path):
    (tmp_path / "exercises").mkdir()
    (tmp_path / "exercises" / "01-first.ipynb").write_text("first")
    (tmp_path / "exercises" / "README.md").write_text("not an exercise")
    copied, kept = my_work.make_my_work(tmp_path)
    mine = tmp_path / "my-work" / "exercises-01-first.ipynb"
    assert copied == [mine] and kept == [] and mine.read_text() == "first"
    mine.write_text("my answer")
    (tmp_path / "exercises" / "02-second.ipynb").write_text("second")  # an exercise added to the course later
    copied, kept = my_work.make_my_work(tmp_path)
    assert copied == [tmp_path / "my-work" / "exercises-02-second.ipynb"] and kept == [mine]
    assert mine.read_text() == "my answer"
    assert sorted(p.name for p in (tmp_path / "my-work").iterdir()) == ["exercises-01-first.ipynb",
                                                                       "exercises-02-second.ipynb"]


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


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_the_terminal_finds_the_courses_python_whatever_the_start_up_files_do(shell, tmp_path):
    """An interactive shell as JupyterLab's terminal starts it; its ~/.bashrc puts /usr/bin first, as conda does."""
    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"needs {shell}")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text('export PATH="/usr/bin:/bin:$PATH"\n')  # another Python first, like conda's init
    venv_bin = Path(sys.executable).parent
    env = {"HOME": str(home), "SHELL": path, "PATH": "/usr/bin:/bin", "DDP_LAB_VENV_BIN": str(venv_bin),
           "TERM": "dumb"}
    done = subprocess.run([str(SHELL_SCRIPT)], input="command -v python\nexit\n", env=env, capture_output=True,
                          text=True, timeout=30)
    found = [line for line in done.stdout.splitlines() if line.strip()]
    assert found and found[-1] == str(venv_bin / "python"), (done.stdout, done.stderr)


def require_git_checkout() -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout")

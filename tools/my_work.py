"""Give the learner a copy of every exercise to work in: my-work/ (git-ignored), made by `make lab`.

    python tools/my_work.py      # copy exercises/NN-name.ipynb to my-work/exercises-NN-name.ipynb where missing

The course's own files stay as they are, so working through the exercises never breaks
`make test` (tests/test_exercises.py compares exercises/ with solutions/) or `git pull`.
A copy that exists is never overwritten: delete it to start that exercise afresh. An exercise
added to the course later is copied on the next `make lab`. The copies' names start with
"exercises-", so a lesson and your exercise open in JupyterLab tabs with different titles.
Lessons link to these copies; `python -m ddp_lab grade` grades them by default.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDER = "my-work"
PREFIX = "exercises-"


def copy_name(exercise: Path) -> str:
    """The file name of an exercise's copy in my-work/."""
    return PREFIX + exercise.name


def make_my_work(root: Path = ROOT) -> tuple[list[Path], list[Path]]:
    """Copy every exercise notebook of root/exercises into root/my-work where no copy exists yet.

    Returns (copied, kept): the copies made now and those already there (left as they are).
    """
    target = root / FOLDER
    target.mkdir(exist_ok=True)
    copied, kept = [], []
    for exercise in sorted((root / "exercises").glob("[0-9][0-9]-*.ipynb")):
        copy = target / copy_name(exercise)
        if copy.exists():
            kept.append(copy)
            continue
        shutil.copyfile(exercise, copy)
        copied.append(copy)
    return copied, kept


def main() -> int:
    copied, kept = make_my_work()
    where = f"{FOLDER}/"
    if copied:
        print(f"{where}: copied {len(copied)} exercise notebook(s) to work in"
              + (f"; kept your {len(kept)} existing one(s)" if kept else ""))
    else:
        print(f"{where}: your {len(kept)} exercise notebooks are there (never overwritten; delete one to start afresh)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

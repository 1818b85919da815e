"""Which exercises each exercise notebook of the course holds, read from the course's solutions/.

solutions/NN-name.ipynb is the single source of the exercises (tools/make_exercises.py makes
exercises/ from it), so the list is read from there rather than kept by hand: every
`## Exercise N · Title` heading and the check its cell tagged `check` calls,
`ddp_lab.checks.lessonNN.check_name(...)`. `grade` uses it to report an exercise whose check
cell was deleted, lost its tag or stopped calling its check, instead of leaving the exercise
out of the table.

Introduced in the README's "Working in the course" section (`python -m ddp_lab grade`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

COPY_PREFIX = "exercises-"  # my-work/exercises-NN-name.ipynb: a learner's copy of exercises/NN-name.ipynb
EXERCISE_HEADING = re.compile(r"^##\s+(Exercise\b.*)$", re.MULTILINE)
CHECK_CALL = re.compile(r"\bchecks\.(lesson\d+\.check_\w+)\s*\(")
# A title or heading an exercise notebook has and a lesson has not ("# Exercises 03 · ...",
# "## Exercise 1 · ..."; a lesson ends with a bare "## Exercises" section of links).
_EXERCISE_NOTEBOOK_MARK = re.compile(r"^#{1,2}\s+Exercises?\s+\d", re.MULTILINE)


@dataclass(frozen=True)
class Exercise:
    """One exercise: its heading ("Exercise 1 · Average the gradients") and its check ("lesson04.check_...")."""

    heading: str
    check: str


def calls(source: str) -> list[str]:
    """The course checks a cell's source calls, e.g. ['lesson04.check_average_gradients']."""
    return CHECK_CALL.findall(source)


def course_name(stem: str) -> str:
    """The course notebook a file name stands for: 'exercises-04-ddp-from-scratch' -> '04-ddp-from-scratch'."""
    return stem[len(COPY_PREFIX):] if stem.startswith(COPY_PREFIX) else stem


def course_exercises(solutions: Path) -> dict[str, tuple[Exercise, ...]]:
    """{'04-ddp-from-scratch': (Exercise(...), ...)} for every solution notebook in `solutions` ({} if none)."""
    found = {}
    for path in sorted(solutions.glob("*.ipynb")):
        exercises, heading = [], ""
        for cell in json.loads(path.read_text(encoding="utf-8")).get("cells", []):
            source = "".join(cell.get("source", ""))
            if cell.get("cell_type") == "markdown":
                match = EXERCISE_HEADING.search(source)
                heading = match.group(1).strip() if match else heading
            elif "check" in cell.get("metadata", {}).get("tags", []):
                exercises.extend(Exercise(heading, check) for check in calls(source))
        if exercises:
            found[path.stem] = tuple(exercises)
    return found


def expected_exercises(stem: str, cells: list[dict], solutions: Path) -> tuple[Exercise, ...] | None:
    """The exercises a notebook named `stem` with these cells must hold; None if it is no course exercise notebook.

    A copy named exercises-NN-name is one; a notebook named NN-name is one only if it looks like an
    exercise notebook (a check cell, or an "Exercise" title or heading): my-work/NN-name.ipynb is the
    learner's copy of lesson NN, which has no exercises.
    """
    expected = course_exercises(solutions).get(course_name(stem))
    if expected is None:
        return None
    if stem.startswith(COPY_PREFIX) or any(_looks_like_an_exercise(cell) for cell in cells):
        return expected
    return None


def _looks_like_an_exercise(cell: dict) -> bool:
    source = "".join(cell.get("source", ""))
    if cell.get("cell_type") == "markdown":
        return bool(_EXERCISE_NOTEBOOK_MARK.search(source))
    return "check" in cell.get("metadata", {}).get("tags", [])

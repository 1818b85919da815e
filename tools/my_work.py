"""Give the learner copies of the lessons and exercises to work in: my-work/ (git-ignored), made by `make lab`.

    python tools/my_work.py      # copy or refresh notebooks/NN-name.ipynb and exercises/NN-name.ipynb in my-work/

JupyterLab opens on my-work/ under `make lab`: the learner runs and edits copies, so running a
lesson's cells (which rewrites its outputs) or solving an exercise never changes a tracked file,
never breaks `make test` (tests/test_exercises.py compares exercises/ with solutions/) and never
blocks `git pull`.

- A lesson keeps its name (my-work/02-collectives.ipynb); an exercise's copy starts with
  "exercises-" (my-work/exercises-02-collectives.ipynb), so the two open in JupyterLab tabs with
  different titles. Every relative link and path still works from my-work/: lessons link to
  `../my-work/exercises-NN-...`, `../solutions/...`, `../ddp_lab/...`, to other lessons by bare
  name, and write `../artifacts/NN/`, all of which mean the same folder from my-work/ as from
  notebooks/. The one link that would lead back into the tracked files, an exercise's
  `[notebooks/NN-name.ipynb](../notebooks/NN-name.ipynb)` to its lesson, is pointed at the
  lesson's copy beside it.
- my-work/.copies.json records each copy: the course file it came from and a digest of its cells'
  types and sources as copied. After a `git pull` that changed a course notebook, the next
  `make lab` refreshes a copy whose cells are still those it was copied with (the learner ran it,
  perhaps, but edited nothing: only its outputs are lost), and keeps an edited copy, naming it in
  one line that says how to get the new version (rename yours, run `make lab` again).
- A copy missing (deleted, renamed, or a notebook new in the course) is copied afresh.

Introduced in the README's "Working in the course" paragraph and lesson 00; `python -m ddp_lab
grade` grades the exercise copies here by default.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDER = "my-work"
PREFIX = "exercises-"
RECORD = ".copies.json"
COURSE_FOLDERS = {"notebooks": "", "exercises": PREFIX}  # course folder -> prefix of its copies' names
LINK_TO_TRACKED_LESSON = re.compile(r"\[(?:notebooks/)?([^\]]*)\]\(\.\./notebooks/([^)/]+\.ipynb)\)")


def copy_name(course_notebook: Path) -> str:
    """The file name of a course notebook's copy in my-work/ (exercises-NN-name.ipynb or NN-name.ipynb)."""
    return COURSE_FOLDERS[course_notebook.parent.name] + course_notebook.name


def as_copied(notebook: dict) -> dict:
    """The notebook as my-work/ holds it: an exercise's link to its tracked lesson leads to the lesson's copy."""
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "markdown":
            source = "".join(cell.get("source", ""))
            if LINK_TO_TRACKED_LESSON.search(source):  # stored as lines, as nbformat writes them
                cell["source"] = LINK_TO_TRACKED_LESSON.sub(r"[\1](\2)", source).splitlines(keepends=True)
    return notebook


def cells_digest(notebook: dict) -> str:
    """A digest of the cells' types and sources (not outputs, counts or metadata): what the learner edits."""
    cells = [[cell.get("cell_type"), "".join(cell.get("source", ""))] for cell in notebook.get("cells", [])]
    return hashlib.sha256(json.dumps(cells).encode()).hexdigest()


def read_notebook(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def make_my_work(root: Path = ROOT) -> tuple[list[Path], list[Path], list[str]]:
    """Copy or refresh every lesson and exercise of root in root/my-work, as the module docstring says.

    Returns (copied, kept, notes): copies written now (new or refreshed), copies left as they are,
    and one line for each kept copy the learner edited whose course version is newer.
    """
    target = root / FOLDER
    target.mkdir(exist_ok=True)
    record = read_notebook(target / RECORD) or {}
    copied, kept, notes = [], [], []
    for folder in COURSE_FOLDERS:
        for course_notebook in sorted((root / folder).glob("[0-9][0-9]*.ipynb")):
            copy = target / copy_name(course_notebook)
            source = f"{folder}/{course_notebook.name}"
            course = json.loads(course_notebook.read_text(encoding="utf-8"))
            raw_digest = cells_digest(course)
            new = as_copied(course)
            new_digest = cells_digest(new)
            mine = read_notebook(copy) if copy.exists() else None
            if copy.exists():
                mine_digest = cells_digest(mine) if mine is not None else None
                was = record.get(copy.name, {}).get("cells")
                unrecorded = was is None
                if unrecorded:  # copied before copies were recorded: as the course has it now (raw or as copied), or edited
                    edited = mine_digest not in (new_digest, raw_digest)
                    was = mine_digest if not edited else new_digest
                else:
                    edited = mine_digest != was
                if not edited and was == new_digest:
                    kept.append(copy)
                    record[copy.name] = {"from": source, "cells": was}
                    continue
                if edited:
                    kept.append(copy)
                    if unrecorded or was != new_digest:
                        newer = "may differ from what it was copied from" if unrecorded else "has changed since"
                        notes.append(f"{FOLDER}/{copy.name}: kept your edited copy; the course's {source} {newer}: "
                                     f"to get its current version, rename yours and run `make lab` again")
                    record[copy.name] = {"from": source, "cells": was}
                    continue
                # unedited, and the course changed it since: refreshed below
            copy.write_text(json.dumps(new, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            record[copy.name] = {"from": source, "cells": new_digest}
            copied.append(copy)
    (target / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return copied, kept, notes


def main() -> int:
    copied, kept, notes = make_my_work()
    print(f"{FOLDER}/: {len(copied)} notebook(s) copied or refreshed, {len(kept)} kept as they were; JupyterLab "
          "opens there: run and edit these copies, and the course's own files stay as they are")
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The notebook metadata JupyterLab writes for the course's kernel, written by the tools that store notebooks.

JupyterLab replaces a notebook's `language_info` with what the kernel reports as soon as the
kernel starts, and autosave then writes the file: a notebook stored with other metadata is
modified by merely opening it (a tracked file changed, `git pull` refused). ipykernel reports
the `language_info` below, with the Python version it runs on; tools/execute_notebooks.py and
tools/make_exercises.py store exactly that, so opening a notebook on the course's Python
changes nothing. On another Python (another version number) JupyterLab still rewrites it, so
`make lab` also runs JupyterLab with keep_stored_metadata as a pre-save hook
(tools/jupyter-config/course_notebook_metadata.py, a server extension): a course notebook keeps the kernelspec and
language_info it is stored with, whatever kernel it was opened with. tests/test_browser.py opens
every lesson and exercise with a kernel that reports another Python version and checks that git
sees no change.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

COURSE_FOLDERS = ("notebooks", "exercises", "solutions")  # the tracked notebooks, relative to the server's root
STORED_KEYS = ("kernelspec", "language_info")
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def language_info() -> dict:
    """What the course's kernel (ipykernel on this Python) reports, as JupyterLab stores it."""
    from ipykernel.ipkernel import IPythonKernel  # lazy: only the tools that write notebooks need it

    return copy.deepcopy(IPythonKernel.language_info)


def notebook_metadata(tags: list | None = None) -> dict:
    """A notebook's metadata as JupyterLab writes it for the course's kernel (plus the notebook's tags, if any)."""
    return {"kernelspec": dict(KERNELSPEC), "language_info": language_info(), **({"tags": tags} if tags else {})}


def keep_stored_metadata(model: dict, path: str, contents_manager, **_) -> None:
    """jupyter_server pre-save hook: a course notebook keeps the kernelspec and language_info stored on disk.

    Applies to notebooks already on disk under notebooks/, exercises/ or solutions/ of the server's
    root (make lab serves the course's root); any other notebook (the learner's my-work/ copies, a
    new notebook) is saved as JupyterLab sends it. A key the stored file lacks stays absent.
    """
    if model.get("type") != "notebook" or path.strip("/").split("/")[0] not in COURSE_FOLDERS:
        return
    stored_path = Path(contents_manager.root_dir) / path.strip("/")
    try:
        stored = json.loads(stored_path.read_text(encoding="utf-8")).get("metadata", {})
    except (OSError, ValueError):  # not there yet, or not a notebook: nothing to keep
        return
    metadata = model["content"]["metadata"]
    for key in STORED_KEYS:
        if key in stored:
            metadata[key] = stored[key]
        else:
            metadata.pop(key, None)

"""The notebook metadata JupyterLab writes for the course's kernel, written by the tools that store notebooks.

JupyterLab replaces a notebook's `language_info` with what the kernel reports as soon as the
kernel starts, and autosave then writes the file: a notebook stored with other metadata is
modified by merely opening it (a tracked file changed, `git pull` refused). ipykernel reports
the `language_info` below, with the Python version it runs on; tools/execute_notebooks.py and
tools/make_exercises.py store exactly that, so opening a notebook on the course's Python
changes nothing (tests/test_browser.py opens every lesson and exercise and checks). On another
Python version JupyterLab still rewrites the version number.
"""

from __future__ import annotations

import copy

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def language_info() -> dict:
    """What the course's kernel (ipykernel on this Python) reports, as JupyterLab stores it."""
    from ipykernel.ipkernel import IPythonKernel  # lazy: only the tools that write notebooks need it

    return copy.deepcopy(IPythonKernel.language_info)


def notebook_metadata(tags: list | None = None) -> dict:
    """A notebook's metadata as JupyterLab writes it for the course's kernel (plus the notebook's tags, if any)."""
    return {"kernelspec": dict(KERNELSPEC), "language_info": language_info(), **({"tags": tags} if tags else {})}

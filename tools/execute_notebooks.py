"""Execute notebooks top to bottom in a fresh kernel and store their outputs.

    python tools/execute_notebooks.py notebooks/00-welcome-and-first-launch.ipynb [...]

This is the only way stored outputs are produced: never edit outputs by hand. Cells
tagged `raises-exception` may raise (their error is stored); any other error aborts.
Metadata is normalised so re-running gives a clean diff, and stored as JupyterLab writes it
for the course's kernel (tools/notebook_format.py), so opening a notebook changes nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import IO, Callable

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/ (also when loaded by tests/ or tools/compat.py)
from notebook_format import notebook_metadata  # noqa: E402


def normalise(notebook) -> None:
    notebook.metadata = notebook_metadata(notebook.metadata.get("tags"))
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
        cell.metadata.pop("ExecuteTime", None)
        if cell.cell_type == "code":
            tags = cell.metadata.get("tags", [])
            if "gpu" in tags and "nbval-ignore-output" not in tags:
                # what a GPU cell prints depends on the GPUs present ("skipped: …" without them);
                # its asserts still run under nbval, its output is not compared
                cell.metadata["tags"] = [*tags, "nbval-ignore-output"]
            for output in cell.outputs:
                output.get("metadata", {}).pop("needs_background", None)


def run_notebook(notebook, directory: Path, timeout: int, kernel_name: str = "python3",
                 on_cell_start: Callable | None = None, kernel_stderr: IO | None = None) -> float:
    """Execute `notebook` in place, top to bottom, in a fresh kernel started in `directory`.

    Cells tagged `raises-exception` may raise; any other error stops the run with nbclient's
    CellExecutionError (or CellTimeoutError after `timeout` seconds in one cell). The kernel
    process writes its own stderr to `kernel_stderr` (default: ours). Returns the seconds it
    took. Shared by this script and tools/compat.py.
    """
    started = time.monotonic()
    client = NotebookClient(notebook, timeout=timeout, kernel_name=kernel_name, record_timing=False,
                            on_cell_start=on_cell_start,
                            resources={"metadata": {"path": str(directory)}})
    client.execute(**({"stderr": kernel_stderr} if kernel_stderr is not None else {}))
    return time.monotonic() - started


def execute(path: Path, timeout: int) -> float:
    notebook = nbformat.read(path, as_version=4)
    elapsed = run_notebook(notebook, path.parent, timeout)
    normalise(notebook)
    nbformat.write(notebook, path)
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    args = parser.parse_args()
    for path in args.notebooks:
        print(f"executing {path} ...", flush=True)
        print(f"  done in {execute(path, args.timeout):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Prove the course on another torch: every lesson and solution, top to bottom, in its own venv.

    make compat TORCH=2.4.1
    python tools/compat.py 2.4.1 [--timeout 300] [notebooks/02-collectives.ipynb ...]

Creates (or reuses) a venv at ~/.cache/ddp-lab/compat/torch-X.Y.Z (the folder is
$DDP_LAB_COMPAT_DIR when set), installs torch==X.Y.Z, the pinned packages from
requirements.txt that executing notebooks needs, and ddp_lab (editable, no deps), then runs
each notebook in a fresh kernel of that venv without writing it back. Outputs are not
compared (they are pinned to requirements.txt's torch); every assert must hold, `gpu` cells
skip themselves without GPUs, cells tagged `raises-exception` may raise. Prints a table and
writes it to artifacts/compat-torch-X.Y.Z.md; exits 1 if any notebook failed.

The second half runs inside the compat venv (`--inside`), so the kernel, nbclient and torch
all come from there; a probe checks that the kernel really imports torch X.Y.Z.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# what executing a notebook needs; the rest of requirements.txt serves JupyterLab, nbval, tests
PACKAGES = ("cloudpickle", "numpy", "matplotlib", "psutil", "tqdm", "ipykernel", "nbformat", "nbclient")
KERNEL_NAME = "ddp-lab-compat"


def compat_dir(version: str) -> Path:
    base = os.environ.get("DDP_LAB_COMPAT_DIR") or Path.home() / ".cache" / "ddp-lab" / "compat"
    return Path(base) / f"torch-{version}"


def pinned(names: tuple[str, ...] = PACKAGES) -> list[str]:
    """The `name==version` lines of requirements.txt for `names`, in that order."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            pins[line.split("==", 1)[0].strip().lower()] = line
    missing = [name for name in names if name not in pins]
    if missing:
        raise SystemExit(f"requirements.txt pins no {', '.join(missing)}: add `name==version` lines")
    return [pins[name] for name in names]


def step(what: str, command: list[str]) -> None:
    """Run one set-up command; on failure show its output and say what to do."""
    print(f"  {what} ...", flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"compat: `{' '.join(command)}` failed (exit {done.returncode}); see pip's "
                         "message above (a pip constraint file or a torch without wheels for this "
                         "Python are the usual causes)")


def prepare(version: str) -> Path:
    """Create or reuse the venv for torch `version`; return its python."""
    venv = compat_dir(version)
    python = venv / "bin" / "python"
    stamp = venv / ".ddp-lab-installed"
    wanted = "\n".join([f"torch=={version}", *pinned()]) + "\n"
    if stamp.exists() and stamp.read_text() == wanted:
        print(f"reusing {venv}", flush=True)
        return python
    print(f"preparing {venv} (torch {version}; on Linux the PyPI wheel is the CUDA build: "
          "about 1 GB plus up to 3 GB of nvidia-* packages)", flush=True)
    started = time.monotonic()
    if not python.exists():
        step("creating the venv", [sys.executable, "-m", "venv", str(venv)])
    step("upgrading pip", [str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    step(f"installing torch=={version} and {', '.join(PACKAGES)}",
         [str(python), "-m", "pip", "install", "--quiet", f"torch=={version}", *pinned()])
    step("installing ddp_lab (editable, no deps)",
         [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(ROOT)])
    # a kernelspec inside the venv's prefix with a name of its own: a `python3` kernelspec
    # elsewhere on the machine (user or system Jupyter) can never be picked instead
    step("registering its kernel", [str(python), "-m", "ipykernel", "install", "--sys-prefix",
                                    "--name", KERNEL_NAME, "--display-name", f"ddp-lab torch {version}"])
    stamp.write_text(wanted)
    print(f"  ready in {time.monotonic() - started:.0f} s", flush=True)
    return python


# ---- inside the compat venv -------------------------------------------------------------

def probe(version: str, timeout: int, log: Path) -> str:
    """Start the compat kernel once and return what torch it imports; fail if not `version`."""
    import nbformat
    from execute_notebooks import run_notebook

    code = "import sys, torch; print(torch.__version__, sys.executable)"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    with log.open("w") as stderr:
        run_notebook(notebook, ROOT, timeout, kernel_name=KERNEL_NAME, kernel_stderr=stderr)
    found = notebook.cells[0].outputs[0]["text"].strip()
    if found.split()[0].split("+")[0] != version:
        raise SystemExit(f"compat: the kernel imports torch {found}, not {version}; "
                         f"delete {compat_dir(version)} and run again")
    return found


def version_check_cell(version: str):
    """A cell appended to each notebook: the notebook really ran under torch `version`."""
    import nbformat

    return nbformat.v4.new_code_cell(
        "import torch as _torch\n"
        f"assert _torch.__version__.split('+')[0] == {version!r}, _torch.__version__")


def error_line(exc: BaseException) -> str:
    """The one line that says what went wrong: `Name: value` from the kernel, else the exception."""
    ename, evalue = getattr(exc, "ename", None), getattr(exc, "evalue", None)
    text = f"{ename}: {evalue}" if ename else f"{type(exc).__name__}: {exc}"
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # tracebacks come coloured
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    # a launch error's first line only counts ranks; the cause is a later "…Error: …" line
    cause = next((line for line in lines[1:] if re.search(r"\w(Error|Exception)\b:", line)), None)
    return (lines[0] + (f" / {cause}" if cause else ""))[:300]


def run_one(path: Path, version: str, timeout: int, log: Path) -> tuple[bool, str, float]:
    """Execute one notebook in the compat kernel: (passed, failing cell and error, seconds).

    The kernel's own stderr (C++ log lines of torch, ranks' tracebacks) goes to `log`."""
    import nbformat
    from execute_notebooks import run_notebook

    notebook = nbformat.read(path, as_version=4)
    cells = len(notebook.cells)
    notebook.cells.append(version_check_cell(version))
    current = {"index": -1}
    started = time.monotonic()

    def on_cell_start(cell, cell_index):
        current["index"] = cell_index

    try:
        with log.open("w") as stderr:
            run_notebook(notebook, path.parent, timeout, kernel_name=KERNEL_NAME,
                         on_cell_start=on_cell_start, kernel_stderr=stderr)
    except Exception as exc:  # CellExecutionError, CellTimeoutError, DeadKernelError
        index = current["index"]
        where = "version check" if index == cells else f"cell {index}"
        return False, f"{where}: {error_line(exc)}", time.monotonic() - started
    return True, "", time.monotonic() - started


def table(version: str, torch_found: str, rows: list[tuple[str, bool, str, float]]) -> str:
    passed = sum(ok for _, ok, _, _ in rows)
    lines = [
        f"# torch {version}: {passed} of {len(rows)} notebooks passed",
        "",
        f"{datetime.date.today().isoformat()}, kernel torch {torch_found.split()[0]}, "
        f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores. "
        "Each notebook ran top to bottom in a fresh kernel; outputs not compared.",
        "",
        "| notebook | result | seconds | failing cell (counted from 0): error |",
        "|---|---|---|---|",
    ]
    for name, ok, why, seconds in rows:
        lines.append(f"| {name} | {'passed' if ok else 'FAILED'} | {seconds:.0f} | "
                     f"{why.replace('|', '/') if why else ''} |")
    return "\n".join(lines) + "\n"


def inside(version: str, paths: list[Path], timeout: int) -> int:
    sys.path.insert(0, str(ROOT / "tools"))
    logs = ROOT / "artifacts" / f"compat-torch-{version}"
    logs.mkdir(parents=True, exist_ok=True)
    torch_found = probe(version, timeout, logs / "probe.log")
    print(f"kernel: torch {torch_found}", flush=True)
    print(f"kernel stderr of each notebook: {os.path.relpath(logs, ROOT)}/", flush=True)
    rows = []
    for path in paths:
        name = os.path.relpath(path, ROOT)
        print(f"{name} ...", end=" ", flush=True)
        log = logs / (name.replace(os.sep, "--").removesuffix(".ipynb") + ".log")
        ok, why, seconds = run_one(path, version, timeout, log)
        print(f"{'passed' if ok else 'FAILED'} in {seconds:.0f} s" + (f"  ({why})" if why else ""),
              flush=True)
        rows.append((name, ok, why, seconds))
    report = table(version, torch_found, rows)
    out = ROOT / "artifacts" / f"compat-torch-{version}.md"
    out.write_text(report)
    print("\n" + report + f"\nwritten to {out.relative_to(ROOT)}", flush=True)
    return 0 if all(ok for _, ok, _, _ in rows) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("torch", help="a torch release on the package index, e.g. 2.4.1")
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="default: notebooks/*.ipynb and solutions/*.ipynb")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not re.fullmatch(r"\d+\.\d+\.\d+", args.torch):
        parser.error(f"TORCH={args.torch!r}: give a full release number such as 2.4.1")
    paths = [p.resolve() for p in args.notebooks] or sorted(
        [*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("solutions/*.ipynb")])
    if args.inside:
        return inside(args.torch, paths, args.timeout)
    python = prepare(args.torch)
    command = [str(python), __file__, "--inside", "--timeout", str(args.timeout), args.torch,
               *map(str, paths)]
    return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main())

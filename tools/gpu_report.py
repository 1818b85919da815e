"""Run the GPU suite and write what ran, on which GPU, as Markdown for docs/hardware-and-gpu.md.

    python tools/gpu_report.py [--out artifacts/gpu-report.md] [pytest args ...]

`make gpu` runs this. It runs `pytest -m gpu tests/gpu` with a JUnit XML report, then
writes the machine (date, GPU models, torch / CUDA / NCCL versions, driver) and every
test's outcome, with the reason of each skip and the warnings of the notebook test
(GPU cells that need more GPUs than the machine has). docs/hardware-and-gpu.md's report of
what has run on a GPU is filled from this file, never by hand. Exits with pytest's status.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def machine() -> list[str]:
    import torch

    lines = [f"- date: {datetime.date.today().isoformat()}",
             f"- Python {platform.python_version()}, torch {torch.__version__}, "
             f"CUDA {torch.version.cuda or 'none (CPU-only build)'}"]
    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())]
        lines.append(f"- GPUs: {len(names)} × {', '.join(sorted(set(names)))}")
        if torch.distributed.is_nccl_available():
            lines.append(f"- NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
    else:
        lines.append("- GPUs: none visible to torch")
    driver = _driver_version()
    if driver:
        lines.append(f"- driver {driver}")
    return lines


def _driver_version() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.splitlines()[0].strip() if done.returncode == 0 and done.stdout.strip() else None


def outcomes(junit: Path) -> list[tuple[str, str, str]]:
    """(test, outcome, detail) for every test case in a JUnit XML report."""
    rows = []
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "?")
        outcome, detail = "passed", f"{float(case.get('time', 0)):.1f} s"
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[tag]
                detail = (found.get("message") or "").splitlines()[0][:200] if found.get("message") else tag
        rows.append((name, outcome, detail))
    return rows


def warnings_from(log: str) -> list[str]:
    """The notebook test's warnings: GPU cells that still wait for a machine with more GPUs."""
    return sorted({line.split("UserWarning: ", 1)[1].strip() for line in log.splitlines()
                   if "UserWarning: " in line and "ran every GPU cell except" in line})


def report(junit: Path, log: str) -> str:
    rows = outcomes(junit)
    table = ["| test | outcome | detail |", "|---|---|---|",
             *(f"| `{name}` | {outcome} | {detail.replace('|', '/')} |" for name, outcome, detail in rows)]
    counts = {outcome: sum(row[1] == outcome for row in rows) for outcome in ("passed", "skipped", "FAILED", "ERROR")}
    summary = ", ".join(f"{count} {outcome.lower()}" for outcome, count in counts.items() if count)
    waiting = warnings_from(log)
    return "\n".join(["### GPU run", "", *machine(), f"- result: {summary}", "", *table, "",
                      *(["Still waiting for more GPUs:", "", *(f"- {line}" for line in waiting), ""] if waiting else [])])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "artifacts" / "gpu-report.md")
    args, pytest_args = parser.parse_known_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    junit = args.out.with_suffix(".xml")
    # -v names each test as it ends: a run stopped at a time limit writes no JUnit report, and its log then
    # still says which tests failed (the first H100 run of 2026-11-26 lost two failures' names that way)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "gpu", "-v", "-rA", "-W", "always",
               f"--junitxml={junit}", str(ROOT / "tests" / "gpu"), *pytest_args]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    if not junit.exists():
        print(f"pytest wrote no report (exit {done.returncode}): nothing to record", file=sys.stderr)
        return done.returncode or 1
    text = report(junit, done.stdout)
    args.out.write_text(text + "\n", encoding="utf-8")
    print(f"\n{text}\nwritten to {args.out}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())

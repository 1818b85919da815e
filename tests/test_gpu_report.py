"""tools/gpu_report.py: the GPU suite's outcome as Markdown for docs/hardware-and-gpu.md (`make gpu`)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def load_tool():
    spec = importlib.util.spec_from_file_location("gpu_report", ROOT / "tools" / "gpu_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The GPU suite and the warning test below use no nbval; loading its plugin (nbformat, jsonschema and its format
# checkers) cost each pytest these tests start 3-4 s of a core here, more than half of its CPU time.
WITHOUT_NBVAL = ("-p", "no:nbval")


def run_report(out: Path, *pytest_args: str, env: dict | None = None) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_report.py"), "--out", str(out), *WITHOUT_NBVAL,
                           *pytest_args],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    text = out.read_text()
    assert text.startswith("### GPU run\n")
    assert f"torch {torch.__version__}" in text
    return text


def test_without_gpus_the_report_lists_every_gpu_test_as_skipped_with_its_reason(tmp_path):
    """CUDA_VISIBLE_DEVICES="" hides the GPUs of a GPU machine too: the same outcome everywhere."""
    text = run_report(tmp_path / "gpu-report.md", env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert "- GPUs: none visible to torch" in text
    assert f"- result: {len(rows)} skipped" in text  # every test marked gpu, each with its reason
    assert len(rows) >= 12 and all("| skipped | needs " in row for row in rows), rows
    assert any("test_notebook_runs_on_this_gpu_machine[notebooks/03-dataparallel.ipynb]" in row for row in rows)


@pytest.mark.skipif(GPUS < 1, reason=f"needs a CUDA GPU (torch {torch.__version__} sees none)")
def test_on_a_gpu_machine_the_report_names_the_gpus_and_what_passed(tmp_path):
    text = run_report(tmp_path / "gpu-report.md", "-k", "data_parallel")  # one cheap test, not the whole suite
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert f"- GPUs: {GPUS} × " in text
    assert rows == [next(row for row in rows if "data_parallel" in row)] and "| passed |" in rows[0]


def test_cells_that_wait_for_more_gpus_are_read_from_the_pytest_warning_summary(tmp_path):
    """A real pytest run whose test warns as the notebook test does on a machine with too few GPUs."""
    (tmp_path / "test_warns.py").write_text(textwrap.dedent("""
        import warnings

        def test_notebook():
            warnings.warn("03-dataparallel.ipynb: ran every GPU cell except cell 29 (needs 2 GPUs): "
                          "this machine has 1", stacklevel=1)
    """))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *WITHOUT_NBVAL, "-rA", "-W",
                           "always", str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stdout
    assert load_tool().warnings_from(done.stdout) == [
        "03-dataparallel.ipynb: ran every GPU cell except cell 29 (needs 2 GPUs): this machine has 1"]


def test_the_gpu_wheels_hold_every_package_a_notebook_imports():
    """`make gpu` installs GPU_PACKAGES from wheels/ on a machine without the package index: it must hold what
    executing the notebooks needs (tools/compat.py's PACKAGES, which every lesson has run with: lesson 00b's
    tqdm among them)."""
    spec = importlib.util.spec_from_file_location("compat", ROOT / "tools" / "compat.py")
    compat = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compat)
    line = next(line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("GPU_PACKAGES"))
    gpu_packages = set(line.split(":=", 1)[1].split())
    assert set(compat.PACKAGES) <= gpu_packages, sorted(set(compat.PACKAGES) - gpu_packages)

"""ddp_lab installed as a workshop installs it: `pip install ./ddp-lab` into a kernel that already has torch.

On Colab, Kaggle or a JupyterHub the kernel's environment comes with its own torch. The
README tells instructors to install the package (not the pinned requirements) there, so
two things must hold: installing it asks for nothing the environment lacks (in particular
no other torch), and the installed copy, away from this checkout, launches ranks and runs
the doctor. A subpackage missing from pyproject.toml's package list fails here.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]


def source_copy(tmp_path: Path) -> Path:
    """What a clone holds for the package, copied so that building leaves this checkout untouched."""
    source = tmp_path / "ddp-lab"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "ddp_lab", source / "ddp_lab", ignore=shutil.ignore_patterns("__pycache__"))
    return source


def test_installing_into_an_environment_with_torch_asks_for_nothing_else(tmp_path):
    report = tmp_path / "report.json"
    subprocess.run([*PIP, "install", "--dry-run", "--no-index", "--no-build-isolation", "--quiet",
                    "--report", str(report), str(source_copy(tmp_path))], check=True, timeout=300)
    to_install = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert to_install == ["ddp_lab"], to_install  # torch, cloudpickle, matplotlib: already satisfied


def python_without_this_checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A venv that sees this environment's packages (torch, ...) but not its editable ddp_lab.

    Its .pth line adds the course environment's site-packages as a plain path, so the .pth
    files there, among them the editable install's import hook, are not run.
    """
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site_packages = next(venv.glob("lib/python*/site-packages"))
    course_env = [path for path in sys.path if path.endswith("site-packages")]
    (site_packages / "course-env.pth").write_text("\n".join(course_env) + "\n")
    return venv / "bin" / "python", site_packages


DOCTOR = "--- python -m ddp_lab doctor"


def test_installed_copy_launches_ranks_and_runs_the_doctor_away_from_the_checkout(tmp_path):
    """The installed copy (not this checkout's) is what the process and its ranks import, cold and warm, and `python
    -m ddp_lab doctor` runs from it. It takes more than 20 s on a loaded 2-core machine (about 15 s of CPU): a real
    pip install, a fresh interpreter importing torch, and two launches whose ranks must import the installed copy."""
    python, target = python_without_this_checkout(tmp_path)
    subprocess.run([*PIP, "install", "--no-deps", "--no-index", "--no-build-isolation", "--quiet",
                    "--target", str(target), str(source_copy(tmp_path))], check=True, timeout=300)
    workdir = tmp_path / "notebook-dir"
    workdir.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    code = ("import ddp_lab, torch, torch.distributed as dist\n"
            "def total(rank):\n"
            "    value = torch.tensor([rank + 1.0], device=ddp_lab.rank_device())\n"
            "    dist.all_reduce(value)\n"
            "    return value.item(), ddp_lab.__file__\n"
            "print(ddp_lab.__file__)\n"
            "for nprocs in (2, 2):  # cold, then warm (forked from the zygote)\n"
            "    print(ddp_lab.launch(total, nprocs=nprocs, backend='gloo'))\n"
            "print(ddp_lab.checks.lesson04.__name__, ddp_lab.plots.launcher.__name__)\n"
            # `python -m ddp_lab doctor` as -m runs it (runpy), in this process: a second interpreter cost 3 s of CPU
            "import runpy, sys\n"
            "sys.argv = ['-m', 'doctor']\n"
            "print(DOCTOR, flush=True)\n"
            "runpy.run_module('ddp_lab', run_name='__main__', alter_sys=True)\n")
    done = subprocess.run([python, "-c", f"DOCTOR = {DOCTOR!r}\n{code}"], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    installed = str(target / "ddp_lab" / "__init__.py")
    lines, doctor = done.stdout.split(f"{DOCTOR}\n")
    lines = lines.splitlines()
    assert lines[0] == installed
    results = [line for line in lines if line.startswith("[(")]
    assert results == [f"[(3.0, '{installed}'), (3.0, '{installed}')]"] * 2, done.stdout  # ranks use it too
    assert lines[-1] == "ddp_lab.checks.lesson04 ddp_lab.plots.launcher"
    assert torch.__version__ in doctor and "recommended nprocs" in doctor, doctor


def test_the_makefiles_torch_dependencies_are_torchs():
    """`make setup` installs TORCH_DEPENDENCIES beside torch's wheel (names only): each must be a requirement of the
    installed torch, or the set-up installs a package nothing asked for (one torch adds is installed by the third
    install, which checks the whole set)."""
    listed = re.search(r"^TORCH_DEPENDENCIES := (.*)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    required = {re.split(r"[ ;<>=!~\[]", requirement, maxsplit=1)[0].lower()
                for requirement in importlib.metadata.requires("torch") or () if "extra ==" not in requirement}
    assert listed and set(listed) <= required, set(listed) - required

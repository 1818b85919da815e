"""The declared torch range: `torch_in_range`, the doctor's warning, and pyproject's floor."""

import dataclasses
import re
from pathlib import Path

import pytest

from ddp_lab.hardware.machine import TORCH_RANGE, inspect_machine, torch_in_range

ROOT = Path(__file__).resolve().parent.parent
RANGE = ("2.4.1", "2.15")  # explicit, so the cases below do not move when TORCH_RANGE does


@pytest.mark.parametrize("version", [
    "2.4.1", "2.4.1+cu121", "2.4.2", "2.13.0+cpu", "2.15.0", "2.15.0+cu130", "2.15.3",
    "2.15.1.dev20261201", "2.15.0rc2", "2.5.0a0+git1234abc", "2.10.0.post1",
])
def test_versions_in_the_range(version):
    assert torch_in_range(version, RANGE)


@pytest.mark.parametrize("version", [
    "2.4.0", "2.4.1rc1", "2.4.1.dev20240601", "2.3.1+cpu", "1.13.1", "2.4", "2.16.0",
    "2.16.0.dev20261201+cpu", "2.16.0a0+gitabcdef", "3.0.0",
])
def test_versions_outside_the_range(version):
    assert not torch_in_range(version, RANGE)


def test_minor_floor_takes_every_patch_release():
    assert torch_in_range("2.4.0", ("2.4", "2.15")) and not torch_in_range("2.3.1", ("2.4", "2.15"))


def test_the_declared_range_holds_the_pinned_torch():
    pinned = re.search(r"^torch==(\S+)", (ROOT / "requirements.txt").read_text(), re.M).group(1)
    assert torch_in_range(pinned), f"requirements.txt pins torch {pinned}, outside {TORCH_RANGE}"


def test_pyproject_floor_is_the_declared_oldest():
    floor = re.search(r'"torch>=([^",]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert floor == TORCH_RANGE[0], "pyproject.toml's torch floor must equal machine.TORCH_RANGE[0]"


@pytest.mark.parametrize("garbage", ["", "latest", "torch-2.4"])
def test_not_a_version_says_what_it_expected(garbage):
    with pytest.raises(ValueError, match="is not a torch version such as '2.13.0'"):
        torch_in_range(garbage)


def test_doctor_warns_outside_the_range_only():
    report = inspect_machine()
    assert "WARNING" not in str(report)  # this venv's torch is the pinned one
    old = str(dataclasses.replace(report, torch="2.3.1+cpu"))
    assert re.search(r"WARNING +torch 2\.3\.1\+cpu is outside the range this course is proven on "
                     rf"\({re.escape(TORCH_RANGE[0])} to {re.escape(TORCH_RANGE[1])}\.x\)", old)
    assert "pip install -r requirements.txt" in old
    unknown = str(dataclasses.replace(report, torch="unknown"))
    assert "WARNING             torch unknown is outside" in unknown

"""`python -m ddp_lab plan` in a real subprocess: the short form, the search table, one plan, errors."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


def plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddp_lab", "plan", *args], capture_output=True, text=True, timeout=120)


def gb(output: str, name: str) -> float:
    return float(re.search(rf"^\s*{name}\s+([0-9.]+) GB", output, re.M).group(1))


def test_short_form_reproduces_the_zero_paper():
    """ZeRO paper (arXiv:1910.02054) Sec. 5.1: 7.5B on 64 GPUs, stage 3 (P_os+g+p) = 1.9 GB per GPU."""
    result = plan("--params", "7.5B", "--dp", "64", "--zero", "3")
    assert result.returncode == 0, result.stderr
    assert gb(result.stdout, "parameters") == pytest.approx(15 / 64, abs=0.01)     # 2 bytes x 7.5B / 64
    assert gb(result.stdout, "optimizer") == pytest.approx(90 / 64, abs=0.01)      # 12 bytes x 7.5B / 64
    assert round(gb(result.stdout, "total"), 1) == 1.9
    baseline = plan("--params", "7.5B", "--dp", "64", "--zero", "0")
    assert gb(baseline.stdout, "total") == pytest.approx(120.0)


def test_short_form_fp32():
    result = plan("--params", "1B", "--precision", "fp32")
    assert result.returncode == 0, result.stderr
    assert gb(result.stdout, "total") == pytest.approx(16.0)      # 4 + 4 + 8 bytes per parameter


def test_search_table():
    result = plan("--model", "llama3-8b", "--cluster", "h100-sxm", "--nodes", "4", "--top", "3")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].split() == ["#", "strategy", "GB/GPU", "step", "s", "tokens/s", "MFU"]
    rows = [line for line in lines[2:] if re.match(r"\s+\d+ ", line)]
    assert len(rows) == 3 and all(re.match(r"\s+\d+ dp\d+ tp\d+ pp\d+ z\d", row) for row in rows)
    assert lines[2 + len(rows)].startswith("strategy: dpN tpN ppN")    # the legend follows the rows


def test_one_strategy_prints_its_breakdown():
    result = plan("--model", "llama3-70b", "--cluster", "h100-sxm", "--nodes", "8", "--tp", "8", "--pp", "2",
                  "--zero", "1", "--recompute", "full", "--sequence-parallel")
    assert result.returncode == 0, result.stderr
    for part in ("parameters", "gradients", "optimizer", "activations", "compute", "pipeline bubble",
                 "exposed DP communication", "tokens/s", "MFU"):
        assert part in result.stdout
    assert "dp4 tp8 pp2 z1" in result.stdout


def test_fsdp_unit_layer_gathers_each_layer():
    """ZeRO-3 gathering one layer at a time pays each collective's latency per layer: more exposed DP
    communication than one gather of the whole model (same bytes)."""
    def exposed(unit):
        result = plan("--model", "llama3-8b", "--cluster", "h100-sxm", "--nodes", "4", "--zero", "3",
                      "--grad-accum", "16", "--fsdp-unit", unit)
        assert result.returncode == 0, result.stderr
        return float(re.search(r"exposed DP communication\s+([0-9.]+)", result.stdout).group(1))
    assert exposed("layer") > exposed("model") > 0


def test_breakdown_shows_total_and_exposed_dp_communication():
    """Issue 25: 'exposed DP communication 0.000' alone hides how close ZeRO-3's gathers come to the
    compute that overlaps them; the report prints all of it too, and the difference as hidden."""
    result = plan("--model", "llama3-8b", "--cluster", "h100-sxm", "--nodes", "4", "--zero", "3",
                  "--recompute", "full")
    assert result.returncode == 0, result.stderr
    exposed = float(re.search(r"exposed DP communication\s+([0-9.]+)", result.stdout).group(1))
    total, hidden = map(float, re.search(r"DP communication \(total\)\s+([0-9.]+)\s+\(([0-9.]+) hidden",
                                         result.stdout).groups())
    assert exposed == 0 and total > 1 and hidden == total      # all hidden, yet seconds of traffic
    step = float(re.search(r"^    total\s+([0-9.]+)$", result.stdout, re.M).group(1))
    assert total < step                                        # not added to the step time


@pytest.mark.parametrize("args, expected", [
    (("--model", "llama9", "--cluster", "h100-sxm"), "llama3-8b"),          # lists the valid presets
    (("--model", "llama3-8b", "--cluster", "b200"), "h100-sxm"),
    (("--params", "7.5Q"), "suffix"),
    (("--model", "llama3-8b", "--cluster", "h100-sxm", "--tp", "3"), "use tp in [1, 2, 4, 8]"),
    (("--model", "llama3-8b", "--cluster", "h100-sxm", "--nodes", "3", "--tp", "6"), "does not divide heads=32"),
    (("--model", "llama3-8b",), "--cluster"),
    (("--model", "llama3-8b", "--cluster", "h100-sxm", "--fsdp-unit", "block"), "'layer', 'model'"),
])
def test_errors_exit_2_and_say_what_is_valid(args, expected):
    result = plan(*args)
    assert result.returncode == 2
    assert expected in result.stderr


def test_help_explains_each_flag():
    result = plan("--help")
    assert result.returncode == 0
    for flag in ("--model", "--cluster", "--nodes", "--params", "--dp", "--tp", "--pp", "--zero", "--micro-batch",
                 "--grad-accum", "--recompute", "--sequence-parallel", "--fsdp-unit", "--precision", "--global-batch",
                 "--top"):
        assert flag in result.stdout

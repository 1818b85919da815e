"""tools/teaching_share.py: what it counts, and every lesson at or above its floor."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("teaching_share", ROOT / "tools" / "teaching_share.py")
teaching_share = sys.modules["teaching_share"] = importlib.util.module_from_spec(spec)   # its dataclass needs it there
spec.loader.exec_module(teaching_share)


def test_every_lesson_meets_its_floor(capsys):
    assert teaching_share.main(["--check"]) == 0, capsys.readouterr()
    table = capsys.readouterr().out
    assert "13-plan-your-training-run.ipynb" in table and "below its floor" not in table


CELL = '''\
import torch   # a comment after code: a code line

# a comment line and the blank line above: neither counted
x = torch.ones(2)
assert x.sum() == 2, (
    "a multi-line assert: all three lines",
)
print(f"x = {x}",
      "a multi-line print: both lines")
for value in x:
    print(value)   # the loop teaches, its print does not
text = """a string
over two lines"""
'''


def test_counts_code_assert_and_print_lines():
    assert teaching_share.count_cell(CELL) == (11, 3, 3)   # teaching: import, x =, for, the two lines of text


def test_magics_are_not_python_but_a_magic_assigned_counts():
    assert teaching_share.count_cell("%load_ext ddp_lab\n!ls\nweights = %ddp_pull model\n") == (1, 0, 0)
    assert teaching_share.count_cell("%%ddp -n 2\nprint(rank)\ny = rank\n") == (2, 0, 1)


def test_a_cell_that_is_not_python_names_the_cell():
    with pytest.raises(SystemExit, match="lesson.ipynb cell 4: not Python"):
        teaching_share.count_cell("def broken(:\n", "lesson.ipynb cell 4")


def _notebook(path: Path, sources: list[str]) -> Path:
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": s}
             for s in sources]
    cells.insert(0, {"cell_type": "markdown", "metadata": {}, "source": "assert nothing: markdown is not code"})
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_check_fails_below_the_floor_and_passes_above(tmp_path, capsys):
    checks = _notebook(tmp_path / "01-checks.ipynb", ["a = 1\nassert a == 1\nprint(a)\n"])      # 1 of 3 lines teach
    teaches = _notebook(tmp_path / "02-teaches.ipynb", ["a = 1\nb = a + 1\nc = b * 2\nassert c == 4\n"])
    assert teaching_share.main(["--check", str(teaches)]) == 0
    assert teaching_share.main(["--check", str(checks), str(teaches)]) == 1
    captured = capsys.readouterr()
    assert "01-checks.ipynb" in captured.err and "0.333" in captured.out
    assert teaching_share.main([str(checks)]) == 0                      # without --check it only reports

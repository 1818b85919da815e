"""Stored notebook outputs that nbval compares hold nothing that depends on the machine.

nbval compares every stored output with a re-run. What differs between machines must not be
compared: GPU cells (their output depends on the GPUs present), "ddp_lab: " notes (the auto
backend's choice, more ranks than cores; tests/sanitize.cfg drops those lines) and numbers
printed with digits another CPU could round differently (ddp_lab.stable_str refuses those).
"""

import re
from pathlib import Path

import nbformat
import pytest
from nbval.plugin import get_sanitize_patterns

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb"))
SANITIZE = get_sanitize_patterns((ROOT / "tests" / "sanitize.cfg").read_text())
# what only some machines print: GPU counts and skips, core counts, the backend auto picked
MACHINE_SPECIFIC = re.compile(r"skipped: needs \d+ CUDA GPU|found \d+ GPU|CUDA GPUs visible|CPU cores|"
                              r"(chose|picked) '(gloo|nccl)'|LaunchWarning")


def compared_cells(path):
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        if cell.cell_type == "code" and "nbval-ignore-output" not in cell.metadata.get("tags", []):
            yield index, cell


def sanitized(text: str) -> str:
    for regex, replace in SANITIZE:
        text = re.sub(regex, replace, text)
    return text


def streams(cell, name):
    return "".join(output.text for output in cell.outputs
                   if output.output_type == "stream" and output.name == name)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_gpu_cells_are_not_compared(path):
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        tags = cell.metadata.get("tags", [])
        assert "gpu" not in tags or "nbval-ignore-output" in tags, (
            f"cell {index} is a gpu cell whose output would be compared: run `make notebooks` "
            "(tools/execute_notebooks.py tags gpu cells nbval-ignore-output)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_compared_outputs_hold_nothing_machine_specific(path):
    for index, cell in compared_cells(path):
        for output in cell.outputs:
            text = output.get("text") or "".join(output.get("data", {}).get("text/plain", ""))
            found = MACHINE_SPECIFIC.search(sanitized(text))
            assert not found, (f"cell {index} stores {found.group(0)!r}, which depends on the machine: "
                               "tag the cell nbval-ignore-output (and assert in it), or print a 'ddp_lab: ' note")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_a_cell_with_a_machine_note_prints_something_else_too(path):
    # on a machine without the note, the cell's stdout must still exist for nbval to compare
    for index, cell in compared_cells(path):
        stdout = streams(cell, "stdout")
        if re.search(r"(?m)^ddp_lab: ", stdout):
            assert sanitized(stdout).strip(), f"cell {index} prints only a machine note"


def test_the_machine_notes_are_dropped_and_rank_output_is_kept():
    text = ("ddp_lab: backend='auto' picked 'gloo' for 4 ranks: this torch has no NCCL, so …\n"
            "ddp_lab: nprocs=4 is more than the 2 CPU cores here: …\n"
            "[rank 0] ddp_lab: a rank's own line\n[rank 0] hello\n")
    assert sanitized(text) == "[rank 0] ddp_lab: a rank's own line\n[rank 0] hello\n"

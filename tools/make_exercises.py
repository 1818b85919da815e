"""Generate exercises/NN-name.ipynb from solutions/NN-name.ipynb (the single source).

    python tools/make_exercises.py            # regenerate every exercise notebook
    python tools/make_exercises.py --check    # exit 1 if a committed exercise is stale

In each code cell of a solution notebook, every block

        ### BEGIN SOLUTION
        ### HINT: slice the batch by rank          <- optional, first line inside
        ... the answer ...
        ### END SOLUTION

becomes a stub, indented like the BEGIN marker:

        raise NotImplementedError("slice the batch by rank")

A hint too long for one line of MAX_LINE characters is wrapped at spaces into adjacent
string literals, which Python joins into the same one message (the checks read it back):

        raise NotImplementedError(
            "work backwards from the last step (s = N - 2), where rank r must add into "
            "chunk r; ..."
        )

All outputs and execution counts are cleared; cell ids, tags and markdown are kept, so
check cells (tagged `check`) keep the solution's code. A markdown cell may hold a block too
(for written answers): it becomes "*Your answer here.*" plus the hint.

Every code cell that runs an answer gets the tag `raises-exception`: the checks, and cells
that call a stubbed function (directly or through a function that calls one) or raise a
stub at top level. JupyterLab's *Run All Cells* stops at the first error except in cells
with that tag, so on an unsolved notebook it runs every exercise's check and shows all
their feedback instead of stopping at exercise 1.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/ (also when loaded by tests/)
from notebook_format import notebook_metadata  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"

BEGIN = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION[ \t]*$")
END = re.compile(r"^[ \t]*### END SOLUTION[ \t]*$")
HINT = re.compile(r"^[ \t]*### HINT:[ \t]*(?P<text>.*?)[ \t]*$")
DEFAULT_HINT = "write your answer here (see the exercise text above)"
MAX_LINE = 100  # characters per generated line, so a hint does not run off the editor's edge
RUNS_ANSWER = "raises-exception"  # JupyterLab's Run All goes on past an error in such a cell


class SolutionFormatError(ValueError):
    """A solution notebook has an unbalanced or nested BEGIN/END SOLUTION block."""


def stub_source(source: str, *, markdown: bool = False, where: str = "") -> str:
    """Replace every BEGIN/END SOLUTION block in one cell's source by a stub."""
    out: list[str] = []
    lines = source.split("\n")
    index = 0
    while index < len(lines):
        begin = BEGIN.match(lines[index])
        if END.match(lines[index]):
            raise SolutionFormatError(f"{where}: '### END SOLUTION' without a BEGIN (line {index + 1})")
        if not begin:
            out.append(lines[index])
            index += 1
            continue
        start = index
        index += 1
        hint = DEFAULT_HINT
        if index < len(lines) and HINT.match(lines[index]):
            hint = HINT.match(lines[index]).group("text") or DEFAULT_HINT
            index += 1
        while index < len(lines) and not END.match(lines[index]):
            if BEGIN.match(lines[index]):
                raise SolutionFormatError(f"{where}: nested '### BEGIN SOLUTION' (line {index + 1})")
            index += 1
        if index == len(lines):
            raise SolutionFormatError(f"{where}: '### BEGIN SOLUTION' on line {start + 1} has no END")
        index += 1  # skip END
        indent = begin.group("indent")
        if markdown:
            out.append(f"{indent}*Your answer here.* (Hint: {hint})")
        else:
            out.extend(raise_stub(indent, hint))
    return "\n".join(out)


def raise_stub(indent: str, hint: str) -> list[str]:
    """The lines of `raise NotImplementedError(hint)`, wrapped to MAX_LINE characters.

    A long hint becomes several string literals, one a line, split after spaces so that
    joined they give the hint back exactly.
    """
    one_line = f"{indent}raise NotImplementedError({_literal(hint)})"
    if len(one_line) <= MAX_LINE:
        return [one_line]
    inner = indent + " " * 4
    room = max(MAX_LINE - len(inner), 20)
    pieces: list[str] = []
    for word in re.findall(r"\S+\s*|\s+", hint):  # each word keeps the spaces after it
        if pieces and len(_literal(pieces[-1] + word)) <= room:
            pieces[-1] += word
        else:
            pieces.append(word)
    return [f"{indent}raise NotImplementedError(",
            *(f"{inner}{_literal(piece)}" for piece in pieces),
            f"{indent})"]


def _literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def make_exercise(solution: nbformat.NotebookNode, name: str = "notebook") -> nbformat.NotebookNode:
    """Return the exercise notebook for a solution notebook (the input is not changed)."""
    exercise = copy.deepcopy(solution)
    exercise.metadata = notebook_metadata(solution.metadata.get("tags"))  # as JupyterLab writes it: opening changes nothing
    blocks = 0
    for number, cell in enumerate(exercise.cells):
        where = f"{name} cell {number}"
        if cell.cell_type in ("code", "markdown"):
            new = stub_source(cell.source, markdown=cell.cell_type == "markdown", where=where)
            blocks += cell.source.count("### BEGIN SOLUTION")
            cell.source = new
        for key in ("execution", "ExecuteTime", "collapsed", "scrolled"):
            cell.metadata.pop(key, None)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    if blocks == 0:
        raise SolutionFormatError(f"{name}: no '### BEGIN SOLUTION' block: is it a solution notebook?")
    tag_cells_that_run_answers(exercise)
    return exercise


def tag_cells_that_run_answers(exercise: nbformat.NotebookNode) -> None:
    """Tag `raises-exception` every check cell and every cell whose top level runs a stub."""
    trees = {index: _parse(cell.source) for index, cell in enumerate(exercise.cells)
             if cell.cell_type == "code"}
    defined = {node.name: node for tree in trees.values() for node in tree.body
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    stubs = {name for name, node in defined.items() if _raises_stub(node)}
    grown = True
    while grown:  # a function that calls a stubbed one raises too, when it is called
        callers = {name for name, node in defined.items() if _names(node) & stubs}
        grown = not callers <= stubs
        stubs |= callers
    for index, tree in trees.items():
        cell = exercise.cells[index]
        top = [node for node in tree.body
               if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        runs_stub = any(_raises_stub(node) or _names(node) & stubs for node in top)
        tags = cell.metadata.get("tags", [])
        if ("check" in tags or runs_stub) and RUNS_ANSWER not in tags:
            cell.metadata["tags"] = [*tags, RUNS_ANSWER]


def _parse(source: str) -> ast.Module:
    """A code cell's syntax tree; IPython syntax (magics, `!cmd`) is turned into Python first."""
    try:
        return ast.parse(source)
    except SyntaxError:
        pass
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return ast.parse(TransformerManager().transform_cell(source))
    except (ImportError, SyntaxError):
        return ast.Module(body=[], type_ignores=[])  # cannot tell: leave the cell untagged


def _raises_stub(node: ast.AST) -> bool:
    for raised in (n.exc for n in ast.walk(node) if isinstance(n, ast.Raise)):
        call = raised.func if isinstance(raised, ast.Call) else raised
        if isinstance(call, ast.Name) and call.id == "NotImplementedError":
            return True
    return False


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def render(notebook: nbformat.NotebookNode) -> str:
    """The exact text nbformat writes for a notebook (used to compare files)."""
    return nbformat.writes(notebook) + "\n"


def exercise_text(solution_path: Path) -> str:
    """The text exercises/<same name> must have, generated from a solution notebook."""
    solution = nbformat.read(solution_path, as_version=4)
    return render(make_exercise(solution, name=solution_path.name))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("solutions", nargs="*", type=Path,
                        help="solution notebooks (default: solutions/*.ipynb)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if any exercise differs from its solution's stub")
    args = parser.parse_args()
    paths = args.solutions or sorted(SOLUTIONS.glob("[0-9][0-9]-*.ipynb"))
    stale = []
    for path in paths:
        target = EXERCISES / path.name
        text = exercise_text(path)
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == text:
            continue
        stale.append(target)
        if not args.check:
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target.relative_to(ROOT)}")
    orphans = sorted(p for p in EXERCISES.glob("*.ipynb") if not (SOLUTIONS / p.name).exists())
    for orphan in orphans:
        print(f"warning: {orphan.relative_to(ROOT)} has no solutions/{orphan.name}", file=sys.stderr)
    if args.check and stale:
        for target in stale:
            print(f"stale: {target.relative_to(ROOT)} (run: python tools/make_exercises.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

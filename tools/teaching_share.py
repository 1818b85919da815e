"""Each lesson's teaching share: how much of its code teaches rather than checks or prints.

    python tools/teaching_share.py [--check] [NOTEBOOK.ipynb ...]   (default: notebooks/*.ipynb)

A lesson's code should mostly be the moves it teaches; a check of the package's own numbers
belongs in tests/, and a lesson keeps one short assert per claim it makes. This script counts,
in every code cell of each notebook:

- code lines: lines that hold part of a Python token other than a comment (so a line of a
  multi-line string or of a bracketed expression counts; blank lines and comment-only lines
  do not). IPython magics are not Python: a line that is a magic on its own (`%load_ext x`,
  `!pip ...`) and a cell magic's first line (`%%ddp -n 2`) are not counted, and the body under
  a cell magic is counted as Python; a magic on the right of an assignment
  (`weights = %ddp_pull model`) counts as one code line (it assigns a name the lesson uses).
- assert lines: code lines inside an `assert` statement, wherever it stands (a multi-line
  assert counts all its lines; an assert inside a function counts too), found with `ast`
  line ranges;
- print lines: code lines inside a statement that is a bare call of `print(...)` (an
  expression statement whose value is a call of the name `print`), again all of its lines.

Only `assert` statements are asserts: a call such as `torch.testing.assert_close(...)` counts
as code that teaches, as does a cell's last expression that JupyterLab displays.

teaching share = (code lines - assert lines - print lines) / code lines. Floors: every lesson
>= 0.65, lesson 13 >= 0.70. `--check` exits 1 when a lesson is below its floor.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FLOOR = 0.65
FLOORS = {"13-plan-your-training-run.ipynb": 0.70}

_MAGIC_LINE = re.compile(r"^\s*[%!]")                       # `%load_ext ddp_lab`, `!ls`
_MAGIC_ASSIGNMENT = re.compile(r"^(\s*[\w.,\s]+=\s*)[%!].*$")  # `weights = %ddp_pull model`
_NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
             tokenize.ENDMARKER}


@dataclass
class Share:
    """Counted lines of one notebook."""

    name: str
    code: int = 0
    asserts: int = 0
    prints: int = 0

    @property
    def teaching(self) -> int:
        return self.code - self.asserts - self.prints

    @property
    def share(self) -> float:
        return self.teaching / self.code if self.code else 1.0

    @property
    def floor(self) -> float:
        return FLOORS.get(self.name, DEFAULT_FLOOR)


def python_of(source: str) -> str:
    """The cell as Python with the same line numbers: magic lines blanked, a magic assigned replaced by a name."""
    lines = source.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        lines[0] = ""
    out = []
    for line in lines:
        assigned = _MAGIC_ASSIGNMENT.match(line)
        if assigned:
            out.append(assigned.group(1) + "_magic_result")
        elif _MAGIC_LINE.match(line):
            out.append("")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def _rows(node: ast.AST) -> set[int]:
    return set(range(node.lineno, node.end_lineno + 1))


def _statements(nodes):
    """Every statement in `nodes` and in the blocks nested in them (function and class bodies included)."""
    for node in nodes:
        yield node
        for block in ("body", "orelse", "finalbody", "handlers", "cases"):
            yield from _statements(getattr(node, block, ()))


def count_cell(source: str, where: str = "cell") -> tuple[int, int, int]:
    """(code lines, assert lines, print lines) of one code cell (see the module docstring)."""
    python = python_of(source)
    try:
        tree = compile(python, where, "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError as e:
        raise SystemExit(f"{where}: not Python after removing magics ({e.msg}, line {e.lineno}): "
                         "fix the cell or teach this script its syntax") from e
    code: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(python).readline):
        if token.type not in _NOT_CODE:
            code.update(range(token.start[0], token.end[0] + 1))
    asserts: set[int] = set()
    prints: set[int] = set()
    for node in _statements(tree.body):
        if isinstance(node, ast.Assert):
            asserts |= _rows(node)
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
              and isinstance(node.value.func, ast.Name) and node.value.func.id == "print"):
            prints |= _rows(node)
    return len(code), len(asserts & code), len(prints & code)


def count_notebook(path: Path) -> Share:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    share = Share(path.name)
    for number, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        code, asserts, prints = count_cell(source, f"{path.name} cell {number}")
        share.code += code
        share.asserts += asserts
        share.prints += prints
    return share


def table(shares: list[Share]) -> str:
    rows = [f"{'lesson':<40} {'code':>5} {'assert':>6} {'print':>5} {'share':>6} {'floor':>6}"]
    for s in shares:
        flag = "" if s.share >= s.floor else "  below its floor"
        rows.append(f"{s.name:<40} {s.code:>5} {s.asserts:>6} {s.prints:>5} {s.share:>6.3f} {s.floor:>6.2f}{flag}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to count (default: the lessons, notebooks/*.ipynb)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a lesson is below its floor")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    shares = [count_notebook(path) for path in paths]
    print(table(shares))
    below = [s.name for s in shares if s.share < s.floor]
    if args.check and below:
        print(f"below the floor: {', '.join(below)}: move checks of ddp_lab's own numbers to tests/ "
              "and keep one assert per claim the lesson makes", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

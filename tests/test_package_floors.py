"""The package's two floors: the course library (what a lesson asks you to read) never imports the lab.

The lab (what a lesson asks you to call: launcher, checks, plots, instruments, torch-version
shims, the planner's measuring harness) may import the library, not the other way round
(STYLE.md, "Two floors"). Every module of ddp_lab is read with `ast`, its imports at the top
and inside functions alike, and classified by FLOORS below.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ddp_lab"

# The one table: a module's floor is that of the longest prefix it starts with ("ddp_lab.course."
# is a folder, "ddp_lab.stable" a module). The façade (ddp_lab/__init__.py, __main__.py)
# and every package's __init__ may import either floor.
FLOORS = {
    # course library: everything under ddp_lab/course/
    "ddp_lab.course.": "library",
    # lab
    "ddp_lab.launcher.": "lab",
    "ddp_lab.cluster.": "lab",
    "ddp_lab.torchrun.": "lab",
    "ddp_lab.hardware.": "lab",
    "ddp_lab.checks.": "lab",
    "ddp_lab.plots.": "lab",
    "ddp_lab.stable": "lab",
    "ddp_lab.torch_compat.": "lab",
    "ddp_lab.instruments.": "lab",
    "ddp_lab.plan.": "lab",
}
FACADE = {"ddp_lab", "ddp_lab.__main__"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def floor(module: str) -> str | None:
    """'library', 'lab', or None (no entry of FLOORS covers it)."""
    matches = [prefix for prefix in FLOORS
               if module == prefix.rstrip(".") or (prefix.endswith(".") and module.startswith(prefix))]
    return FLOORS[max(matches, key=len)] if matches else None


def imported_modules(path: Path, module: str) -> set[str]:
    """Every ddp_lab module `path` imports, at the top or in a function (`from a import b` counts a.b if it is one)."""
    found = set()
    package = module if _is_package(path) else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:   # relative: from .x import y
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES)
    return {name for name in found if name == "ddp_lab" or name.startswith("ddp_lab.")}


def violations() -> list[str]:
    """'library module -> lab module' for every import that runs the wrong way."""
    wrong = []
    for module, path in MODULES.items():
        if module in FACADE or _is_package(path) or floor(module) != "library":
            continue
        for target in sorted(imported_modules(path, module)):
            if target in MODULES and not _is_package(MODULES[target]) and floor(target) == "lab":
                wrong.append(f"{module} -> {target}")
    return wrong


def test_every_module_has_a_floor():
    unplaced = [module for module, path in MODULES.items()
                if module not in FACADE and not _is_package(path) and floor(module) is None]
    assert not unplaced, f"add these modules to FLOORS in tests/test_package_floors.py: {unplaced}"


def test_every_floor_entry_names_a_module():
    stale = [prefix for prefix in FLOORS
             if not any(m == prefix.rstrip(".") or m.startswith(prefix) for m in MODULES)]
    assert not stale, f"FLOORS names modules that no longer exist (renamed? update the table): {stale}"


def test_the_library_never_imports_the_lab():
    wrong = violations()
    assert not wrong, ("course-library modules import lab modules (move what the library needs into the library, "
                       "or the importing code into the lab):\n  " + "\n  ".join(wrong))


def test_the_rule_sees_imports_inside_functions(tmp_path):
    """Negative control: a function-level import of the lab from a library module is caught."""
    source = tmp_path / "fake.py"
    source.write_text("def f():\n    from ddp_lab.checks import common\n    import ddp_lab.plots.timeline\n")
    found = imported_modules(source, "ddp_lab.course.sharding.fake")
    assert {"ddp_lab.checks.common", "ddp_lab.plots.timeline"} <= found
    assert floor("ddp_lab.course.sharding.fake") == "library" and floor("ddp_lab.checks.common") == "lab"
    assert floor("ddp_lab.course.plan.memory") == "library" and floor("ddp_lab.plan.measure") == "lab"


def test_every_package_folder_is_installed():
    """pyproject.toml lists the packages setuptools installs: a folder missing there is missing from
    every install (`make setup` failed on a fresh clone once when a folder was renamed)."""
    import re   # tomllib is Python >= 3.11; the course runs on 3.10 too

    line = re.search(r"^packages = (\[.*\])$", (PACKAGE.parent / "pyproject.toml").read_text(), re.M)
    listed = set(ast.literal_eval(line.group(1)))
    folders = {_module_name(path) for path in PACKAGE.rglob("__init__.py")}
    assert listed == folders, f"pyproject.toml lists {sorted(listed - folders)} that do not exist and misses " \
                              f"{sorted(folders - listed)}"

"""README and docs/: a front door that stays short, links that lead somewhere, and no words about how the project was made.

README.md is what a newcomer reads first (STYLE.md: two minutes, nanoGPT's README as the model), so it
stays within README_MAX_LINES; the facts behind it live in docs/, one page per subject. Every relative
link of README and of each docs/ page must name a file (or folder) of the checkout, and a `#fragment`
into a Markdown file must name one of its headings (GitHub's anchors). The project describes the code
and the course as they are: no file says how or by whom it was made, so
MADE_BY must not match in the project's text files or in the notebooks' cells. Cheap: text only, no
kernel (well under a second).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 300
DOCS = sorted((ROOT / "docs").glob("*.md"))

# An inline Markdown link or image: [text](target) or [text](target "title"). Fenced code is removed first.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")

# Words about how the project was made, not about the code: the pattern names its own cases. The code's own
# words (a POSIX or Jupyter session, helper functions) do not match; the test below holds such phrases.
ORDINALS = ("first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
            r"\w+teenth|\w+tieth")
MADE_BY = re.compile(
    rf"\b(?:earlier|previous|this|that|next|last|same|later|{ORDINALS}) (?:work )?sessions?\b"
    r"|\breviewers?\b"
    r"|\bhelpers? (?:was|were|read|reads|reviewed|ran|found|noticed|said|checked|wrote)\b"
    r"|\bsub-?agents?\b",
    re.I)

SKIP_DIRS = {".git", ".venv", ".venv-gpu", "wheels", "artifacts", "my-work", "build", "__pycache__",
             ".ipynb_checkpoints", ".pytest_cache", "_build"}
TEXT_SUFFIXES = {".py", ".md", ".cfg", ".toml", ".txt", ".sh", ".json", ".yml", ".yaml", ".rst"}
TEXT_NAMES = {"Makefile", "run", "slurm", "bashrc", ".zshrc", ".zshenv", ".gitignore"}
NOTEBOOK_FOLDERS = ("notebooks", "solutions", "exercises")


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings: lower case, punctuation but `-` and `_` dropped,
    spaces as `-` (a repeated heading gets -1, -2, ...)."""
    anchors, seen = set(), {}
    for line in FENCE.sub("", markdown).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
            anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return anchors


def broken_links(page: Path) -> list[str]:
    """Each relative link of a Markdown page that names no file or folder of the checkout, or no heading there."""
    text = INLINE_CODE.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):      # https:, mailto:, ...: not a file of the checkout
            continue
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif fragment and resolved.suffix == ".md" and fragment not in heading_anchors(resolved.read_text()):
            broken.append(f"{target} (no such heading)")
    return broken


def test_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, more than {README_MAX_LINES}: move the details to a page of docs/ "
        "and link it from README's Documentation section")


def test_readme_links_lead_to_files_of_the_checkout():
    assert broken_links(ROOT / "README.md") == []
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    unlinked = [page.name for page in DOCS if f"(docs/{page.name})" not in readme]
    assert unlinked == [], f"docs/ pages README does not link: {unlinked}"
    lessons = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]*.ipynb"))
    assert lessons and [n for n in lessons if f"(notebooks/{n})" not in readme] == []      # the lesson table


@pytest.mark.parametrize("page", DOCS, ids=[p.name for p in DOCS])
def test_docs_links_lead_to_files_of_the_checkout(page):
    assert broken_links(page) == []


def test_the_link_check_finds_a_broken_link(tmp_path):
    """Negative control: a link to a missing file and one to a missing heading are both reported."""
    (tmp_path / "other.md").write_text("# A heading\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-heading) [gone](missing.md) [no heading](other.md#nowhere) "
                    "`[code](not-a-link.md)` [web](https://example.org)\n```\n[fenced](nope.md)\n```\n")
    assert broken_links(page) == ["missing.md (no such file)", "other.md#nowhere (no such heading)"]


def project_text_files() -> list[Path]:
    """The project's own text files (code, tests, tools, docs, configuration), not notebooks and not this test."""
    found = []
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [name for name in subfolders if name not in SKIP_DIRS]
        for name in names:
            path = Path(folder) / name
            if (path.suffix in TEXT_SUFFIXES or name in TEXT_NAMES) and path != Path(__file__).resolve():
                found.append(path)
    return sorted(found)


def made_by(text: str) -> list[str]:
    return [text[max(0, m.start() - 40):m.end() + 40].replace("\n", " ") for m in MADE_BY.finditer(text)]


def test_made_by_pattern_leaves_the_codes_own_words_alone():
    """Controls: the code's own sessions and helper functions do not match, so the scan below fails only on
    words about how the project was made."""
    for phrase in ("a process it started in a session of its own", "start_new_session=True",
                   "its session's kernel name", "the session, standard streams", "JupyterLab session",
                   "Why a helper: torch 2.4 calls it", "write forward(i) and backward(i) helpers",
                   "the helper package", "with session", "a kernel session", "pure helpers are tested in-process"):
        assert not made_by(phrase), phrase


def test_no_project_file_says_how_it_was_made():
    files = project_text_files()
    assert ROOT / "README.md" in files and ROOT / "ddp_lab" / "__init__.py" in files and ROOT / "Makefile" in files
    hits = {str(p.relative_to(ROOT)): found for p in files if (found := made_by(p.read_text(errors="replace")))}
    assert hits == {}, "say what the code does, not how it came to be:\n" + json.dumps(hits, indent=1)


def test_no_notebook_cell_says_how_it_was_made():
    """Markdown and code cells (not outputs) of every lesson, solution and exercise."""
    hits = {}
    for folder in NOTEBOOK_FOLDERS:
        for notebook in sorted((ROOT / folder).glob("*.ipynb")):
            for number, cell in enumerate(json.loads(notebook.read_text(encoding="utf-8"))["cells"]):
                found = made_by("".join(cell.get("source", "")))
                if found:
                    hits[f"{folder}/{notebook.name} cell {number} ({cell['cell_type']})"] = found
    assert hits == {}, "say what the lesson shows, not how it came to be:\n" + json.dumps(hits, indent=1)

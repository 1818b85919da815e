# Sphinx + MyST-NB (Jupyter Book 1's engine, Executable Books project): shows stored outputs (nb_execution_mode="off"),
# searches offline, theme as a wheel. mystmd fetches its theme at build time; MkDocs has had no release since 2024.
"""Configuration of the course's website: a home page (site/index.md), the README, every lesson, every exercise and
the documents of docs/.

`make site` copies site/index.md, README.md, the notebooks of notebooks/ and exercises/ and the documents of docs/
into a source folder (site/_build/source) and runs Sphinx on it with this configuration; the pages keep the
repository's paths (README.html, notebooks/02-collectives.html, docs/planner.html), so the links between the README,
notebooks and documents work as they are.
tests/test_site.py builds the site and opens every page in Chromium.

What Sphinx reads of each lesson and exercise differs from the file in two ways, and of the README and each document
in the second (the files are never changed; the README's page also gets a title of its own, README_TITLE, as its
first heading is the home page's):

- a "Run this" box under a notebook's title says how to run it: `make lab` on your machine, or on Colab and Kaggle;
- a link to the learner's copy in my-work/ (which `make lab` makes, tools/my_work.py) leads to the course notebook
  the copy is made from, and a link to any other file or folder of the repository (the course library's sources,
  say) leads to the repository: REPOSITORY_URL, or, while the course has no public address, is shown as its text.
"""

from __future__ import annotations

import fnmatch
import json
import re
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY / "tools"))
import my_work  # noqa: E402  (tools/my_work.py: the names of the learner's copies)

sys.path.pop(0)

# The one place for the repository's public address ("https://github.com/OWNER/ddp-lab"); empty while it has none.
# Set, the instructions show it, links to the repository's files lead there, and the pages get its button (and, on
# GitHub, a button opening the notebook in Colab).
REPOSITORY_URL = ""
BRANCH = "main"

# requirements.txt's torch line ("torch==2.13.0"): the version the stored outputs come from
TORCH_PIN = next(line.split("#")[0].strip() for line in (REPOSITORY / "requirements.txt").read_text().splitlines()
                 if line.startswith("torch=="))

project = "ddp-lab"
html_title = "ddp-lab: PyTorch distributed training, hands-on"
copyright = "2026, the ddp-lab authors"
author = "the ddp-lab authors"   # the theme's footer reads "By {author}"
extensions = ["myst_nb"]
root_doc = "index"
include_patterns = ["index.md", "README.md", "notebooks/*.ipynb", "exercises/*.ipynb", "docs/*.md"]   # the pages,
                                                                                      # as paths in the repository
README_TITLE = "README: set-up, the course map, grading, the planner"   # the README's page in the sidebar

nb_execution_mode = "off"   # never run a notebook: show its stored outputs
nb_merge_streams = True     # a cell's printed chunks (one per print of each rank) shown as one block
nb_render_error_lexer = "myst-ansi"   # ddp_lab's errors are short plain-text reports, not IPython tracebacks
myst_enable_extensions = ["substitution"]
myst_heading_anchors = 3    # a link to a heading of another page (docs/planner.md#held-out-validation) finds its id

html_theme = "sphinx_book_theme"
html_copy_source = False    # no copies of the notebooks in _sources/ (the repository has them)
html_show_sourcelink = False
html_theme_options = {
    "home_page_in_toc": True,
    "use_download_button": False,
    "repository_url": REPOSITORY_URL,
    "repository_branch": BRANCH,
    "use_repository_button": bool(REPOSITORY_URL),
    "launch_buttons": {"colab_url": "https://colab.research.google.com"}
    if REPOSITORY_URL.startswith("https://github.com/") else {},
}


def run_instructions(notebook: str, copy: str) -> str:
    """How to run the course notebook `notebook` (its path in the repository), whose copy in my-work/ is `copy`.

    On Colab and Kaggle the package is installed, not installed editable: an editable install is importable only
    in a kernel started after it (tests/test_install.py runs this kind of install).
    """
    return f"""\
**On your machine** (Python ≥ 3.11 and `make`): clone the repository, run `make lab` in it, and open
`my-work/{copy}` in the JupyterLab it opens: your own copy, so running and editing it change no file of the course.
On Linux without an NVIDIA GPU, first install the CPU build of the pinned torch in the repository (PyPI's is the
CUDA build, several GB):

```
python3 -m venv .venv && .venv/bin/pip install {TORCH_PIN} --index-url https://download.pytorch.org/whl/cpu
```

**On Colab or Kaggle** (their torch is kept): open `{notebook}` from the repository there and run this cell first,
once per runtime (on Kaggle, switch the notebook's Internet on):

```
!git clone -q --depth 1 {REPOSITORY_URL or "<this repository's URL>"} ddp-lab
%pip install -q ./ddp-lab
%cd ddp-lab/{notebook.rpartition("/")[0]}
```
"""


myst_substitutions = {
    "readme": "[README](README.md)",
    "run_instructions": run_instructions("notebooks/NN-name.ipynb", "NN-name.ipynb"),
}


def run_box(docname: str) -> str:
    """The "Run this" box shown under a lesson's or an exercise's title (MyST Markdown)."""
    notebook = docname + ".ipynb"
    kind = "exercise" if docname.startswith("exercises/") else "lesson"
    return (f"\n\n````{{admonition}} Run this {kind}\n:class: tip\n\n"
            f"{run_instructions(notebook, my_work.copy_name(Path(notebook)))}````\n\n")


MARKDOWN_LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")


def site_link(link: re.Match, docname: str) -> str:
    """A Markdown link of the page `docname` (its path in the repository) as the site shows it (see the module
    docstring)."""
    text, target = link.groups()
    if re.match(r"[a-z][a-z0-9+.-]*:|#", target):   # a URL, or a place on the same page
        return link.group(0)
    target_path, hash_sign, anchor = target.partition("#")
    in_repository = ((REPOSITORY / docname).parent / target_path).resolve()
    path = in_repository.relative_to(REPOSITORY).as_posix()
    if any(fnmatch.fnmatch(path, page) for page in include_patterns):
        return link.group(0)
    folder, _, name = path.partition("/")
    if folder == my_work.FOLDER:   # the learner's copy: the course notebook it is made from
        for course_folder, prefix in sorted(my_work.COURSE_FOLDERS.items(), key=lambda item: -len(item[1])):
            if name.startswith(prefix):
                return f"[{text}](/{course_folder}/{name.removeprefix(prefix)}{hash_sign}{anchor})"
    if REPOSITORY_URL:
        kind = "tree" if in_repository.is_dir() else "blob"
        return f"[{text}]({REPOSITORY_URL}/{kind}/{BRANCH}/{path}{hash_sign}{anchor})"
    return text


FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)   # a fenced code block of a Markdown file


def with_site_links(markdown: str, docname: str) -> str:
    """Markdown text of the page `docname` with the site's links (`site_link`), code blocks left as they are."""
    pieces, start = [], 0
    for block in FENCE.finditer(markdown):
        pieces += [MARKDOWN_LINK.sub(lambda link: site_link(link, docname), markdown[start:block.start()]),
                   block.group(0)]
        start = block.end()
    return "".join(pieces) + MARKDOWN_LINK.sub(lambda link: site_link(link, docname), markdown[start:])


def as_shown_on_the_site(app, docname: str, source: list[str]) -> None:
    """Sphinx's source-read: a lesson's or an exercise's notebook with the run box and the site's links; the README
    (titled README_TITLE) and a document of docs/ with the site's links."""
    if docname == "README":
        heading, _, rest = source[0].partition("\n")
        if not heading.startswith("# "):
            raise ValueError("README.md must start with its title (# ...), which its page replaces with README_TITLE")
        source[0] = with_site_links(f"# {README_TITLE}\n{rest}", docname + ".md")
        return
    if docname.startswith("docs/"):
        source[0] = with_site_links(source[0], docname + ".md")
        return
    if not docname.startswith(("notebooks/", "exercises/")):
        return
    notebook = json.loads(source[0])
    cells = [cell for cell in notebook["cells"] if cell["cell_type"] == "markdown"]
    for cell in cells:
        cell["source"] = with_site_links("".join(cell["source"]), docname + ".ipynb")
    title, _, rest = cells[0]["source"].partition("\n") if cells else ("", "", "")
    if not title.startswith("# "):
        raise ValueError(f"{docname}.ipynb: its first Markdown cell must start with its title (# ...), under which "
                         "the site puts its run box")
    cells[0]["source"] = title + run_box(docname) + rest
    source[0] = json.dumps(notebook)


def setup(app):
    app.connect("source-read", as_shown_on_the_site)

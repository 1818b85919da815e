"""The course's website: `make site` builds it, and Chromium opens every page.

One build per module (a module-scoped fixture): `make site` (the Makefile's own recipe, set-up not remade) into a
fresh folder, so nothing a developer built earlier is reused. Sphinx runs with -W: a warning (a link to a notebook
that is not a page, a figure it cannot write) fails the build. Then one headless Chromium (Debian's, driven by
Playwright as in tests/test_browser.py: nothing is downloaded) opens every page from a local HTTP server and records
what the tests below assert:

- the site has the home page, the README, every lesson, every exercise and every document of docs/, and no solution;
- every link to a page of the site leads to a file that exists, and to an element that exists where it names one
  (the lessons' links to the learner's copies in my-work/ lead to the exercises, and a lesson's or document's link to
  a document leads to its page);
- every image loaded, and each lesson shows at least as many figures as its stored notebook has image outputs;
- every figure of a lesson's outputs has alt text of its own (its cell's metadata), not its file's path;
- every lesson and exercise says how to run it, under its title;
- the sidebar lists every page, and "next" leads from the home page through the README, every lesson, exercise and
  document in order;
- nothing is fetched from outside the site and no script fails; the search finds a word on the lesson that has it.

Cost, measured on a 2-core machine with other load (3-7): 39-44 s, 24 s of CPU (the build 18 s, opening the pages
19 s; 36 pages then, 49 now).
"""

from __future__ import annotations

import contextlib
import functools
import html.parser
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pytest

from test_browser import CHROMIUM, CHROMIUM_FLAGS, playwright_api  # the way this project drives Chromium

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
LESSONS = sorted((REPO / "notebooks").glob("*.ipynb"))
EXERCISES = sorted((REPO / "exercises").glob("*.ipynb"))
# docs/ in README's reading order (its "Documentation" list), the order the site's sidebar and "next" follow
DOCUMENTS = [REPO / link for link in re.findall(r"^- \[docs/[\w.-]+\]\((docs/[\w.-]+\.md)\)",
                                                (REPO / "README.md").read_text(encoding="utf-8"), re.MULTILINE)]
SEARCHED = ("PowerSGD", "notebooks/11-performance-and-scaling.html")   # a word, and a page that has it

pytestmark = pytest.mark.slow


def page_name(file: Path) -> str:
    """The site's page for a course notebook or document: notebooks/02-collectives.ipynb ->
    notebooks/02-collectives.html, docs/planner.md -> docs/planner.html."""
    return file.relative_to(REPO).with_suffix(".html").as_posix()


def image_outputs(notebook: Path) -> int:
    """How many outputs of the stored notebook are images (each shows one)."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return sum(any(kind.startswith("image/") for kind in output.get("data", {}))
               for cell in cells for output in cell.get("outputs", []))


class OutputImages(html.parser.HTMLParser):
    """The <img> inside a notebook's cell outputs (`.cell_output`) of one page: their attributes, in order."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self):
        super().__init__()
        self.open: list[tuple[str, bool]] = []   # the open elements: tag, and whether it is in a cell's output
        self.images: list[dict[str, str]] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        inside = bool(self.open and self.open[-1][1]) or "cell_output" in (attrs.get("class") or "").split()
        if tag == "img" and inside:
            self.images.append({name: value or "" for name, value in attrs.items()})
        if tag not in self.VOID:
            self.open.append((tag, inside))

    def handle_endtag(self, tag):   # also called for <img ... />: closes nothing that is open
        if tag in (open_tag for open_tag, _ in self.open):
            while self.open.pop()[0] != tag:
                pass


@dataclass
class Page:
    """What Chromium found on one page."""

    links: list[str]                 # every <a href>, absolute
    content_links: list[str]         # the <a href> of the page's own text (its article), absolute
    ids: set[str]                    # every element's id
    images: list[tuple[str, int]]    # every <img>: its source and naturalWidth (0: not loaded)
    output_images: int               # the images in the notebook's cell outputs
    run_box: str                     # the text of the box right under the title, or ""
    next_page: str | None            # the "next" link, absolute
    sidebar: list[str]               # the sidebar's links, absolute


@dataclass
class Site:
    html: Path                       # the built site
    base: str                        # http://127.0.0.1:PORT/
    pages: dict[str, Page]           # a page's path under the built folder -> what it showed
    outside: list[str]               # requests for anything not on the site
    errors: list[str]                # uncaught script errors, "page: error"
    browser: object                  # the Playwright browser context, for the search test

    def path(self, url: str) -> str:
        """The file of the site that a URL names, as a path under the built folder ('' if not on the site)."""
        if not url.startswith(self.base):
            return ""
        path = urllib.parse.unquote(urllib.parse.urlsplit(url).path).lstrip("/")
        return path + "index.html" if path.endswith("/") or not path else path


@contextlib.contextmanager
def http_server(folder: Path):
    """A quiet HTTP server for folder on 127.0.0.1 (a free port); yields its base URL."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


READ_PAGE = """() => ({
    links: Array.from(document.querySelectorAll("a[href]"), a => a.href),
    content_links: Array.from(document.querySelectorAll("article a[href]"), a => a.href),
    ids: Array.from(document.querySelectorAll("[id]"), e => e.id),
    images: Array.from(document.querySelectorAll("img"), i => [i.currentSrc || i.src, i.complete ? i.naturalWidth : 0]),
    output_images: document.querySelectorAll(".cell_output img").length,
    run_box: (box => box?.classList.contains("admonition") ? box.innerText : "")(
        document.querySelector("article h1")?.nextElementSibling),
    next_page: document.querySelector("a.right-next")?.href ?? null,
    sidebar: Array.from(document.querySelectorAll(".bd-sidebar-primary nav a[href]"), a => a.href),
})"""


def build(folder: Path) -> Path:
    """`make site SITE_DIR=folder` (set-up not remade); returns the built site's folder."""
    assert shutil.which("make"), "make is needed to run `make site`"
    built = subprocess.run(["make", "-s", "-o", "setup", "site", f"SITE_DIR={folder}"], cwd=REPO,
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, f"make site failed:\n{built.stdout}{built.stderr}"
    return folder / "html"


def pages(html: Path) -> list[str]:
    """The pages of the built site `html`, as paths under it (not the theme's templates in _static/)."""
    return sorted(path.relative_to(html).as_posix() for path in html.rglob("*.html")
                  if not path.relative_to(html).parts[0].startswith("_"))


@contextlib.contextmanager
def browsing(html: Path, profile: Path):
    """Every page of the built site `html` opened in Chromium, from a local HTTP server; yields the Site."""
    sync_playwright = playwright_api()   # skips without Chromium or Playwright (fails in CI)
    with http_server(html) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 1000})
        try:
            outside: list[str] = []
            errors: list[str] = []
            browser.on("request",
                       lambda request: request.url.startswith((base, "data:")) or outside.append(request.url))
            tab = browser.new_page()
            tab.on("pageerror", lambda error: errors.append(f"{tab.url}: {error}"))
            seen = {}
            for name in pages(html):
                tab.goto(base + name, wait_until="load")   # "load": every image has loaded or failed
                read = tab.evaluate(READ_PAGE)
                seen[name] = Page(**{**read, "ids": set(read["ids"]), "images": [tuple(i) for i in read["images"]]})
            tab.close()
            yield Site(html, base, seen, outside, errors, browser)
        finally:
            browser.close()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """`make site` into a fresh folder: the built site's folder."""
    return build(tmp_path_factory.mktemp("site"))


@pytest.fixture(scope="module")
def site(built: Path) -> Site:
    """Every page of the built site opened in Chromium (see the module docstring)."""
    with browsing(built, built.parent / "chromium-profile") as opened:
        yield opened


def test_the_site_has_the_home_page_every_lesson_exercise_and_document_and_no_solution(built):
    assert len(LESSONS) >= 17 and len(EXERCISES) >= 15 and DOCUMENTS, "the course's files were not found"
    files = {page_name(file) for file in [README, *LESSONS, *EXERCISES, *DOCUMENTS]}
    assert set(pages(built)) == {"index.html", "search.html", "genindex.html"} | files


def test_every_link_within_the_site_leads_to_a_file_and_an_element_that_exist(site):
    broken = []
    for name, page in site.pages.items():
        for link in page.links:
            target = site.path(link)
            anchor = urllib.parse.unquote(urllib.parse.urlsplit(link).fragment)
            if not target:
                continue
            if not (site.html / target).is_file():
                broken.append(f"{name}: {link} (no such file)")
            elif anchor and target in site.pages and anchor not in site.pages[target].ids:
                broken.append(f"{name}: {link} (no element with that id)")
    assert not broken, "\n".join(broken)


def test_links_to_the_learners_copies_lead_to_the_course_notebooks(site):
    """Lessons link to the learner's copy of their exercise (my-work/exercises-NN-name.ipynb, what `make lab` opens):
    on the site that link leads to the exercise's page."""
    assert not [link for page in site.pages.values() for link in page.links
                if "my-work/" in urllib.parse.urlsplit(link).path]
    for lesson in LESSONS:
        source = lesson.read_text(encoding="utf-8")
        exercise = REPO / "exercises" / lesson.name
        if f"../my-work/exercises-{lesson.name}" in source:
            assert site.base + page_name(exercise) in site.pages[page_name(lesson)].links, lesson.name


def test_links_to_documents_lead_to_their_pages(site):
    """A link of the README, a lesson or a document to the README or a document of docs/ is a link to that page (where
    the repository has no public address, links to its other files are shown as their text). The documents' links to
    the README (the workshop's steps, the package in one minute) led nowhere: the README was no page."""
    linking = set()
    for file in [README, *LESSONS, *DOCUMENTS]:
        source = file.read_text(encoding="utf-8")
        for document in [README, *DOCUMENTS]:
            relative = os.path.relpath(document, file.parent)
            if f"]({relative})" in source or f"]({relative}#" in source:
                linking.add(document)
                targets = {site.path(link) for link in site.pages[page_name(file)].content_links}
                assert page_name(document) in targets, (file.name, document.name)
    assert README in linking and len(linking) > 1, "no link to the README or a document: the test checks nothing"


def test_every_image_loaded_and_every_lesson_shows_its_figures(site):
    not_loaded = [f"{name}: {src}" for name, page in site.pages.items() for src, width in page.images if width <= 0]
    assert not not_loaded, "images that did not load:\n" + "\n".join(not_loaded)
    expected = {page_name(notebook): image_outputs(notebook) for notebook in LESSONS + EXERCISES}
    assert sum(expected.values()) > 0, "no stored notebook has an image output: the count cannot be checked"
    shown = {name: site.pages[name].output_images for name in expected}
    missing = {name: f"{shown[name]} of {count}" for name, count in expected.items() if shown[name] < count}
    assert not missing, f"pages showing fewer figures than their notebooks' image outputs: {missing}"


def test_every_figure_of_a_lesson_has_alt_text_of_its_own(built):
    """A cell that draws a figure says what it shows (its metadata's mystnb.image.alt): without it MyST-NB gives the
    <img> its file's path as alt, which is what a screen reader reads, or a reader whose image did not load."""
    bare = []
    for lesson in LESSONS:
        parser = OutputImages()
        parser.feed((built / page_name(lesson)).read_text(encoding="utf-8"))
        assert len(parser.images) >= image_outputs(lesson), (lesson.name, len(parser.images))
        for image in parser.images:
            alt, src = image.get("alt", "").strip(), image.get("src", "")
            if not alt or alt in (src, src.rsplit("/", 1)[-1]) or alt.endswith((".png", ".svg", ".jpg")):
                bare.append(f"{lesson.name}: {src} (alt {image.get('alt')!r})")
    assert sum(map(image_outputs, LESSONS)) > 0, "no lesson has an image output: the test checks nothing"
    assert not bare, "figures without alt text of their own:\n" + "\n".join(bare)


def test_every_lesson_and_exercise_says_how_to_run_it(site):
    for notebook in LESSONS + EXERCISES:
        box = site.pages[page_name(notebook)].run_box
        copy = ("exercises-" if notebook.parent.name == "exercises" else "") + notebook.name
        assert box.startswith("Run this") and "make lab" in box and f"my-work/{copy}" in box, (notebook.name, box)
        assert f"%cd ddp-lab/{notebook.parent.name}" in box and "%pip install" in box, (notebook.name, box)
    assert not site.pages["index.html"].run_box   # the home page says it in its text


def test_the_sidebar_lists_every_page_and_next_leads_through_them_in_order(site):
    order = ["index.html"] + [page_name(file) for file in [README, *LESSONS, *EXERCISES, *DOCUMENTS]]
    for name in order:
        listed = {site.path(link) for link in site.pages[name].sidebar}
        assert set(order) <= listed, (name, set(order) - listed)
    followed = ["index.html"]
    while (following := site.pages[followed[-1]].next_page) and len(followed) <= len(order):
        followed.append(site.path(following))
    assert followed == order


def test_nothing_is_fetched_from_outside_the_site_and_no_script_fails(site):
    assert not site.outside, f"requests that left the site: {site.outside[:10]}"
    assert not site.errors, site.errors


def test_the_search_finds_a_word_on_the_lesson_that_has_it(site):
    word, lesson = SEARCHED
    assert word in (REPO / lesson).with_suffix(".ipynb").read_text(encoding="utf-8")
    tab = site.browser.new_page()
    try:
        tab.goto(f"{site.base}search.html?q={word}", wait_until="load")
        tab.wait_for_selector("#search-results ul.search li a", timeout=30_000)
        found = {site.path(link) for link in tab.eval_on_selector_all("#search-results ul.search li a",
                                                                         "links => links.map(a => a.href)")}
    finally:
        tab.close()
    assert lesson in found, found

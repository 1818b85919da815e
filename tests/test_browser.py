"""The course in a real JupyterLab in a real browser, as a learner meets it under `make lab`.

nbval runs notebooks in a bare kernel; learners use JupyterLab. One JupyterLab, started with
`make lab`'s own command lines (read from the Makefile with `make -n`) in a git-committed copy of
the course, and one headless Chromium driven by Playwright (Debian's: nothing is downloaded,
`executable_path=/usr/bin/chromium`) serve the three tests of this module (a module-scoped
fixture: one server and one browser start instead of three, each test in a page of its own):

- the learner's path: my-work/ gets the learner's copies, JupyterLab opens on it, lesson 02's
  link opens the learner's copy of its exercise, Run All on the unsolved exercise reaches the last
  cell and shows every check's short feedback, a wrong answer gets the check's message (no frames
  of ddp_lab's checks), the right answer gets the ✓ line;
- lesson 00 in the learner's copy, *Run → Run All Cells*: every code cell ran, only cells tagged
  `raises-exception` show an error, the `[rank k]` lines are on the page rank by rank and equal
  the stored outputs (after tests/sanitize.cfg, as nbval compares them);
- every tracked lesson and exercise opened on a kernel that reports another Python version (as a
  learner's Python other than the one the outputs were made with does) and saved: `git status`
  stays clean, because make lab's pre-save hook keeps the stored kernel metadata
  (tools/notebook_format.py); two controls show the test can see a change: a notebook outside the
  course's folders is rewritten by JupyterLab as it would be without the hook, and a course
  notebook whose cell the page edits is saved modified, keeping its stored metadata; a solution
  opened on the course's own kernel is not even marked modified (the tools store the metadata
  JupyterLab writes).

No kernel or rank process may outlive the server. Working in copies, the runs cannot overwrite
stored outputs. Screenshots and the server's log go to artifacts/ (gitignored). Set-up:
`apt-get install chromium` and `pip install playwright` (no `playwright install`): `make browser`.
Missing either skips the tests, except in CI (CI=true), where they fail. Cost, measured back to
back on a 2-core machine with other load (7-11): 126 s for the three with a server
and browser each and every notebook drawn whole, 61 s with this module's shared server and browser
and the last test's notebooks opened in background tabs with cells drawn only in view.
"""

from __future__ import annotations

import configparser
import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import nbformat
import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import my_work  # noqa: E402  (tools/my_work.py: what make lab does first)


VENV_PYTHON_IN_MAKEFILE = ".venv/bin/python"
DDP_LAB_VENV_BIN = "DDP_LAB_VENV_BIN"
ARTIFACTS = REPO / "artifacts"
CHROMIUM = Path(os.environ.get("DDP_LAB_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LESSON = "00-welcome-and-first-launch.ipynb"
RUN_TIMEOUT_S = 240
RANK_LINE = re.compile(r"^\[rank (\d+)\] ", re.M)

# Settings a fresh JupyterLab gets: every cell in the DOM (so the page shows all outputs; a test that needs no
# outputs on the page asks for windowing, Lab.new_page), no autosave, no news or update checks (no network, no
# toast over the notebook).
NOTEBOOK_SETTINGS = "@jupyterlab/notebook-extension/tracker.jupyterlab-settings"
LAB_SETTINGS = {
    NOTEBOOK_SETTINGS: {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                      "checkForUpdates": False},
}


def require(ok: bool, missing: str) -> None:
    """Skip when a browser-test dependency is missing; in CI (CI=true) fail instead."""
    if ok:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"browser test cannot run in CI: {missing}", pytrace=False)
    pytest.skip(f"browser test needs {missing}")


def server_port(runtime: Path, server: subprocess.Popen, timeout: float = 90) -> int:
    """The port a server started with --port=0 bound: it picks a free one itself (no port chosen here and bound
    seconds later, when another test's ranks may hold it) and writes it to its runtime file."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {server.returncode}")
        for info in runtime.glob("jpserver-*.json"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                return int(json.loads(info.read_text())["port"])
        time.sleep(0.2)
    raise TimeoutError(f"jupyter lab wrote no runtime file to {runtime} within {timeout} s")


def wait_for_server(url: str, server: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {server.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"jupyter lab did not answer {url} within {timeout} s")


def playwright_api():
    """Playwright's sync API, once Chromium and the playwright package are known to be here."""
    require(CHROMIUM.exists(), f"Chromium at {CHROMIUM} (apt-get install chromium: make browser)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require(False, "the playwright package (pip install playwright; no browser download)")
    return sync_playwright


def make_lab_recipe(port: int) -> tuple[list[str], dict[str, str], list[str]]:
    """`make lab`'s command lines, as the Makefile has them (`make -n`, set-up not run).

    Returns (the commands before JupyterLab, the environment JupyterLab gets, its arguments).
    """
    require(shutil.which("make") is not None, "make (to read `make lab`'s command line)")
    printed = subprocess.run(["make", "-s", "-n", "-o", "setup", "lab", f"PORT={port}"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.replace("\\\n", " ")
    lines = [line for line in printed.strip().splitlines() if line.strip()]
    words = shlex.split(lines[-1])
    env = {}
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):  # VAR=value before the command
        name, value = words.pop(0).split("=", 1)
        env[name] = os.path.expandvars(value)
    assert Path(words[0]).name == "jupyter" and words[1] == "lab", f"make lab runs {lines[-1]!r}"
    return lines[:-1], env, words[1:]


def copy_course(root: Path) -> None:
    """The course's notebook folders (and .gitignore) copied to root, without checkpoints."""
    for folder in ("notebooks", "exercises", "solutions"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copy(REPO / ".gitignore", root / ".gitignore")


# A kernel that reports another Python version than the one the course's notebooks were stored with: ipykernel
# with its language_info's version replaced before it starts (what a learner's Python 3.12 reports, say).
OTHER_PYTHON_KERNEL = "other-python"
OTHER_PYTHON_VERSION = "3.99.0"
OTHER_PYTHON_START = ("import ipykernel.ipkernel as k; "
                      "k.IPythonKernel.language_info = "
                      f"{{**k.IPythonKernel.language_info, 'version': '{OTHER_PYTHON_VERSION}'}}; "
                      "from ipykernel import kernelapp; kernelapp.launch_new_instance()")
EDITED_CONTROL = "notebooks/zz-control-edited-in-the-page.ipynb"  # a course notebook the page edits: saved modified
OUTSIDE_CONTROL = "zz-control-outside-the-course-folders/00.ipynb"  # no hook there: JupyterLab rewrites its metadata
SAME_PYTHON = "solutions/02-collectives.ipynb"  # opened on the course's own kernel: not even marked modified
OPENED_EXERCISE = "02-collectives.ipynb"  # with LESSON, the notebooks opened on another Python
STORED_KEYS = ("kernelspec", "language_info")


@dataclass
class Lab:
    """The shared JupyterLab (make lab's command lines, in a committed copy of the course) and browser."""

    base: str
    token: str
    root: Path
    log: Path
    remember_processes: object  # call once a test's kernel runs: its processes must be gone after the server
    browser: object  # a Playwright persistent browser context

    def new_page(self, windowing: str = "none"):
        """A new tab; JupyterLab loaded in it attaches every cell to the page ("none") or only those in view ("full").

        Opening the 35 notebooks of the last test took 40 s of CPU with every cell attached, 15 s with "full".
        """
        (self.log.parent / "lab-settings" / NOTEBOOK_SETTINGS).write_text(json.dumps({"windowingMode": windowing}))
        return self.browser.new_page()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab started with `make lab`'s commands in a git-committed copy of the course, and one Chromium."""
    sync_playwright = playwright_api()
    tmp_path = tmp_path_factory.mktemp("browser")
    root = tmp_path / "course"
    copy_course(root)
    for control in (EDITED_CONTROL, OUTSIDE_CONTROL):
        (root / control).parent.mkdir(exist_ok=True)
        shutil.copy(root / "notebooks" / LESSON, root / control)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "-c", "user.name=test", "-c", "user.email=test@localhost", "commit", "-q", "-m", "the course")
    before, env, arguments = make_lab_recipe(0)   # port 0: the server binds a free one (server_port)
    assert before == [f"{VENV_PYTHON_IN_MAKEFILE} tools/my_work.py"], f"make lab first runs {before}"
    my_work.make_my_work(root)  # what that command does, in the copy
    assert env["PATH"].startswith(env[DDP_LAB_VENV_BIN] + ":"), env
    kernels = tmp_path / "jupyter-data" / "kernels" / OTHER_PYTHON_KERNEL
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-c", OTHER_PYTHON_START, "-f", "{connection_file}"],
        "display_name": f"Python {OTHER_PYTHON_VERSION} (another Python)", "language": "python"}))
    env["JUPYTER_PATH"] = str(tmp_path / "jupyter-data")
    with serving(tmp_path, arguments + ["--LabApp.expose_app_in_browser=True"], cwd=root,
                 log_name="browser-make-lab-jupyterlab.log", env=env) as (base, token, remember_processes):
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch_persistent_context(
                str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True,
                args=CHROMIUM_FLAGS, viewport={"width": 1400, "height": 1000})
            try:
                yield Lab(base, token, root, tmp_path / "jupyterlab.log", remember_processes, browser)
            finally:
                browser.close()


@contextlib.contextmanager
def serving(tmp_path: Path, arguments: list[str], cwd: Path, log_name: str, env: dict | None = None):
    """Run `jupyter <arguments>` (with --port=0) headless on 127.0.0.1 with a random token and fresh settings.

    Yields (base_url, token, remember_processes). On exit the server is stopped, its log is
    copied to artifacts/log_name, and every process remembered must be gone.
    """
    settings = tmp_path / "lab-settings"
    for name, values in LAB_SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(values))
    token = secrets.token_hex(16)
    env = {**os.environ, **(env or {}), "JUPYTERLAB_SETTINGS_DIR": str(settings),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "IPYTHONDIR": str(tmp_path / "ipython")}
    jupyter = Path(sys.executable).with_name("jupyter")
    log = open(tmp_path / "jupyterlab.log", "w")
    server = subprocess.Popen(
        [str(jupyter), *arguments, "--no-browser", f"--ServerApp.token={token}", "--ServerApp.ip=127.0.0.1",
         "--ServerApp.port_retries=0"],
        env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd)
    descendants: list[psutil.Process] = []
    try:
        base = f"http://127.0.0.1:{server_port(tmp_path / 'runtime', server)}"
        wait_for_server(f"{base}/api/status?token={token}", server)
        yield base, token, lambda: descendants.extend(psutil.Process(server.pid).children(recursive=True))
    finally:
        server.send_signal(signal.SIGTERM)  # the server shuts its kernels down
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(tmp_path / "jupyterlab.log", ARTIFACTS / log_name)
    assert descendants, "the kernel's processes were never looked at"
    deadline = time.monotonic() + 10
    while (survivors := [p for p in descendants if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not survivors, f"processes outlived JupyterLab: {survivors}"


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def sanitizers() -> list[tuple[re.Pattern, str]]:
    """tests/sanitize.cfg, as nbval applies it."""
    config = configparser.ConfigParser()
    config.read(REPO / "tests" / "sanitize.cfg")
    return [(re.compile(config[s]["regex"]), config[s]["replace"]) for s in config.sections()]


def rank_lines(text: str, rules) -> list[str]:
    for pattern, replacement in rules:
        text = pattern.sub(replacement, text)
    return [line for line in text.splitlines() if RANK_LINE.match(line)]


def cell_text(cell) -> str:
    """All stream text and error tracebacks of a stored code cell."""
    parts = []
    for output in cell.get("outputs", []):
        if output["output_type"] == "stream":
            parts.append(output["text"])
        elif output["output_type"] == "error":
            parts.append("\n".join(output["traceback"]))
        elif "text/plain" in output.get("data", {}):
            parts.append(output["data"]["text/plain"])
    return "\n".join(parts)


def wait_for_idle_kernel(base: str, token: str, notebook: str, timeout: float = 90) -> None:
    """Wait until the notebook's kernel has started and is idle (JupyterLab's sessions API)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=5) as reply:
            sessions = json.load(reply)
        if any(s["path"].endswith(notebook) and s["kernel"]["execution_state"] == "idle" for s in sessions):
            return
        time.sleep(0.3)
    raise TimeoutError(f"no idle kernel for {notebook} after {timeout} s: {sessions}")


def run_all_cells(page, notebook: str, panel=None) -> None:
    """Run → Run All Cells, then wait until every code cell (of `panel`, or the page) has an execution count."""
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        prompts = (panel or page).locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
        if prompts and all(re.fullmatch(r"\s*\[\d+\]:\s*", p) for p in prompts):
            return
        time.sleep(0.5)
    raise TimeoutError(f"{notebook}: cells still not run after {RUN_TIMEOUT_S} s: {prompts}")


def save_and_read(page, root: Path, notebook: str):
    """Save the notebook from the browser (Ctrl+S) and read what JupyterLab wrote."""
    path = root / notebook
    before = path.stat().st_mtime_ns
    page.locator(".jp-Notebook").first.click()
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 30
    while path.stat().st_mtime_ns == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert path.stat().st_mtime_ns != before, "JupyterLab did not save the notebook"
    while True:  # jupyter_server writes atomically (a complete file replaces the old one); a partial one retries
        try:
            return nbformat.read(path, as_version=4)
        except ValueError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


COURSE_LESSON = "my-work/02-collectives.ipynb"  # the learner's copy of the lesson
COURSE_EXERCISE = "my-work/exercises-02-collectives.ipynb"  # the learner's copy: make lab made it
INTERNAL_FRAMES = re.compile(r'Traceback|File "|ddp_lab/checks|site-packages')
# Exercise 1 of exercises/02, answered wrong the way a learner might: each rank returns its own
# chunk, and the ring (the sum over ranks) is missing.
WRONG_ANSWER = '''def ring_reduce_scatter(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.tensor_split(dist.get_world_size())[dist.get_rank()]
'''


def solution_of(solution_cell: str) -> str:
    """The answer as a learner would type it: the solution cell without the BEGIN/END/HINT markers."""
    return "\n".join(line for line in solution_cell.splitlines()
                     if not re.match(r"\s*### (BEGIN SOLUTION|END SOLUTION|HINT:)", line))


def type_into_cell(page, cell, text: str) -> None:
    """Replace a cell's code as if typed (inserted as text, so the editor adds no indent or brackets)."""
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(text)


def run_answer_and_check(page, answer_cell, check_cell, timeout: float = 90) -> str:
    """Shift+Enter in the answer cell, Shift+Enter again on the check below it; the check's output."""
    answer_cell.locator(".cm-content").click()
    page.keyboard.press("Shift+Enter")  # runs the answer, selects the check cell
    before = check_cell.locator(".jp-InputPrompt").inner_text()
    page.keyboard.press("Shift+Enter")  # runs the check
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        prompt = check_cell.locator(".jp-InputPrompt").inner_text()
        if re.fullmatch(r"\s*\[\d+\]:\s*", prompt) and prompt != before:
            return check_cell.locator(".jp-OutputArea").inner_text()
        time.sleep(0.3)
    raise TimeoutError(f"the check did not finish within {timeout} s (prompt {prompt!r})")


@pytest.mark.timeout(300)
def test_learner_path_from_lesson_to_exercise_under_make_lab(lab):
    log_start = lab.log.stat().st_size
    exercise = nbformat.read(lab.root / COURSE_EXERCISE, as_version=4)
    solution = nbformat.read(REPO / "solutions" / "02-collectives.ipynb", as_version=4)
    answer_index = next(i for i, c in enumerate(exercise.cells) if c.source.startswith("def ring_reduce_scatter"))
    check_index = answer_index + 1
    assert "check" in exercise.cells[check_index].metadata.get("tags", [])
    checks = [i for i, c in enumerate(exercise.cells) if "check" in c.metadata.get("tags", [])]
    ARTIFACTS.mkdir(exist_ok=True)

    page = lab.new_page()
    try:
        # make lab opens on my-work/: the learner's copies of the lessons and exercises are what a learner sees first
        page.goto(f"{lab.base}/?token={lab.token}")
        lesson_item = page.locator(".jp-DirListing-item", has_text=Path(COURSE_LESSON).name).first
        lesson_item.wait_for(timeout=60_000)
        assert page.locator(".jp-FileBrowser .jp-BreadCrumbs").inner_text().strip().strip("/") == my_work.FOLDER
        page.screenshot(path=str(ARTIFACTS / "browser-make-lab-1-file-browser.png"))

        # the lesson's link at the end opens the learner's copy of the exercise (not the tracked file)
        lesson_item.dblclick()
        link = page.locator(".jp-RenderedMarkdown a", has_text=COURSE_EXERCISE).first
        link.wait_for(timeout=60_000)
        link.scroll_into_view_if_needed()
        link.click()
        panel = page.locator(".jp-NotebookPanel", has_text="Exercises 02 · Collective communication")
        panel.locator(".jp-CodeCell").first.wait_for(timeout=60_000)
        wait_for_idle_kernel(lab.base, lab.token, COURSE_EXERCISE)
        lab.remember_processes()
        page.screenshot(path=str(ARTIFACTS / "browser-make-lab-2-exercise-opened.png"))
        tabs = page.locator(".jp-MainAreaWidget-tab, .lm-DockPanel-tabBar .lm-TabBar-tabLabel").all_inner_texts()
        assert Path(COURSE_LESSON).name in tabs and Path(COURSE_EXERCISE).name in tabs, tabs  # two names
        sessions = {s["path"] for s in api(lab.base, lab.token, "GET", "/api/sessions")}
        assert COURSE_LESSON in sessions and COURSE_EXERCISE in sessions, sessions  # both the learner's copies

        # Run All on the unsolved notebook goes past each failing check to the last cell
        run_all_cells(page, COURSE_EXERCISE, panel)
        cells = panel.locator(".jp-Notebook .jp-Cell")
        assert cells.count() == len(exercise.cells)
        for index in checks:
            shown = cells.nth(index).locator(".jp-OutputArea").inner_text()
            assert "CheckFailed: " in shown and "is not written yet" in shown, f"check cell {index}: {shown}"
            assert not INTERNAL_FRAMES.search(shown), f"check cell {index} shows internal frames:\n{shown}"
        cells.nth(checks[-1]).scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "browser-make-lab-3-run-all-unsolved.png"))

        # a wrong answer: the check's message, what is wrong and the hint, no internal frames
        answer, check = cells.nth(answer_index), cells.nth(check_index)
        type_into_cell(page, answer, WRONG_ANSWER)
        shown = run_answer_and_check(page, answer, check)  # a LaunchWarning may come first (few cores)
        assert "CheckFailed: " in shown and not INTERNAL_FRAMES.search(shown), shown
        feedback = shown[shown.index("CheckFailed: "):]
        assert "expected" in feedback and "Hint:" in feedback and "not written yet" not in feedback, feedback
        assert len(feedback.splitlines()) <= 12, f"the feedback is not short:\n{feedback}"
        check.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "browser-make-lab-4-wrong-answer.png"))

        # the right answer: the ✓ line and no error
        type_into_cell(page, answer, solution_of(solution.cells[answer_index].source))
        shown = run_answer_and_check(page, answer, check)
        assert any(line.startswith("✓") for line in shown.splitlines()), shown
        assert "CheckFailed" not in shown and "Error" not in shown, shown
        check.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "browser-make-lab-5-right-answer.png"))
    finally:
        page.close()
    with open(lab.log, encoding="utf-8", errors="replace") as log:  # the server's log during this test
        log.seek(log_start)
        served = log.read()
    assert "404 GET /api/contents" not in served, "JupyterLab could not find a notebook the learner opened"


@pytest.mark.timeout(300)
def test_lesson_00_runs_in_jupyterlab(lab):
    """Run All in the learner's copy of lesson 00 (my-work/: saving it changes no tracked file)."""
    stored = nbformat.read(REPO / "notebooks" / LESSON, as_version=4)
    ARTIFACTS.mkdir(exist_ok=True)
    page = lab.new_page()
    try:
        page.goto(f"{lab.base}/lab/tree/{my_work.FOLDER}/{LESSON}?token={lab.token}&reset")  # reset: no tabs of other tests
        page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
        wait_for_idle_kernel(lab.base, lab.token, f"{my_work.FOLDER}/{LESSON}")
        run_all_cells(page, LESSON)
        lab.remember_processes()  # the kernel, its zygote: none may outlive the server
        first_rank_output = page.locator(".jp-OutputArea-output", has_text="[rank 0]").first
        first_rank_output.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "browser-lesson-00-rank-output.png"))
        assert first_rank_output.is_visible()
        outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
        ran = save_and_read(page, lab.root / my_work.FOLDER, LESSON)
        cells_on_page = page.locator(".jp-Notebook .jp-Cell")
        assert cells_on_page.count() == len(ran.cells)
        deliberate = [i for i, c in enumerate(ran.cells) if "raises-exception" in c.metadata.get("tags", [])]
        for number, index in enumerate(deliberate):
            failure = cells_on_page.nth(index)
            failure.scroll_into_view_if_needed()
            failure.screenshot(path=str(ARTIFACTS / f"browser-lesson-00-deliberate-failure-{number}.png"))
            shown = failure.inner_text()
            for error in (o for o in ran.cells[index].outputs if o["output_type"] == "error"):
                assert error["ename"] in shown and failure.is_visible()
    finally:
        page.close()

    # every code cell ran; only the lesson's deliberate failures show an error
    code = [(c, s) for c, s in zip(ran.cells, stored.cells) if c.cell_type == "code"]
    assert all(c.execution_count is not None for c, _ in code)
    for cell, _ in code:
        errors = [o for o in cell.outputs if o["output_type"] == "error"]
        deliberate = "raises-exception" in cell.metadata.get("tags", [])
        assert bool(errors) == deliberate, (f"cell {cell.source[:60]!r}: "
                                            f"{'no error from a raises-exception cell' if deliberate else errors}")

    # the [rank k] lines are on the page, rank by rank, and the same as the stored outputs
    on_page = [RANK_LINE.findall(text) for text in outputs if RANK_LINE.search(text)]
    assert on_page, "no [rank k] output on the page"
    assert any(len(set(ranks)) >= 2 for ranks in on_page)
    for ranks in on_page:
        assert [int(r) for r in ranks] == sorted(int(r) for r in ranks), f"ranks out of order: {ranks}"
    rules = sanitizers()
    compared = 0
    for cell, stored_cell in code:
        if "nbval-ignore-output" in cell.metadata.get("tags", []):
            continue
        shown, expected = rank_lines(cell_text(cell), rules), rank_lines(cell_text(stored_cell), rules)
        assert shown == expected, f"cell {cell.source[:60]!r} shows other [rank k] lines in JupyterLab than stored"
        compared += bool(expected)
    assert compared >= 2, "the lesson's stored outputs have (almost) no [rank k] lines to compare"


# Open each notebook in a background tab (nothing to lay out or paint), wait until JupyterLab has put its kernel's
# kernelspec and language_info into the notebook's metadata (a kernel reporting another Python version makes the
# notebook dirty), edit a cell where asked, save what is dirty (as autosave would), close it; a few at a time, so
# the page holds few notebooks and the waits overlap. `kernels` maps each path to its session's kernel name.
# Returns the paths that opening made dirty.
OPEN_SAVE_CLOSE = """async ([paths, edit, kernels, atOnce]) => {
    const dirty = [];
    const openOne = async path => {
        const widget = await window.jupyterapp.commands.execute('docmanager:open', {path, options: {activate: false}});
        await widget.context.ready;
        await widget.sessionContext.ready;
        const kernel = widget.sessionContext.session.kernel;
        const info = await kernel.info;
        await kernel.spec;
        const model = widget.model;
        const took = () => model.getMetadata('language_info')?.version === info.language_info.version
            && model.getMetadata('kernelspec')?.name === kernels[path];
        let waited = 0;
        for (; !took() && waited < 20000; waited += 20) {
            await new Promise(resolve => setTimeout(resolve, 20));
        }
        if (waited === 0) {  // stored as the kernel reports it: give JupyterLab's update a moment to (not) mark it
            await new Promise(resolve => setTimeout(resolve, 100));
        }
        if (edit.includes(path)) {
            const first = model.cells.get(0).sharedModel;
            first.setSource('# edited in JupyterLab\\n' + first.getSource());
        }
        if (model.dirty) {
            dirty.push(path);
            await widget.context.save();
        }
        widget.dispose();
    };
    const queue = [...paths];
    const worker = async () => { while (queue.length) { await openOne(queue.shift()); } };
    await Promise.all(Array.from({length: atOnce}, worker));
    return dirty.sort();
}"""
NOTEBOOKS_AT_ONCE = 6


def api(base: str, token: str, method: str, path: str, body: dict | None = None):
    """One call of the Jupyter server's REST API."""
    request = urllib.request.Request(f"{base}{path}?token={token}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read() or b"null")


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


@pytest.mark.timeout(300)
def test_opening_every_notebook_on_another_python_changes_no_tracked_file(lab):
    """A lesson and an exercise opened in JupyterLab on a kernel reporting another Python, and saved: git sees no change.

    JupyterLab puts the kernel's kernelspec and language_info into every notebook it opens; make lab's pre-save
    hook (tools/notebook_format.py, keep_stored_metadata) saves a course notebook with the metadata it is stored
    with. The hook reads only the stored file's metadata, never a cell, so one lesson and one exercise opened
    through the page prove it for every notebook whose stored metadata is the same: that every lesson, exercise
    and solution is stored with exactly the metadata the tools write (tools/execute_notebooks.py, make_exercises.py)
    is checked on the files below, without opening them (opening all 37 cost about 20 s of this test and proved
    nothing more). One solution is opened on the course's own kernel: JupyterLab does not even mark it modified
    (the tools store the metadata it writes for the course's kernel, so opening a notebook outside make lab on this
    Python changes nothing either).
    """
    root = lab.root
    assert git(root, "status", "--porcelain") == ""  # my-work/ (what the other tests ran and saved) is ignored
    every = sorted(str(p.relative_to(root)) for folder in ("notebooks", "exercises", "solutions")
                   for p in (root / folder).glob("*.ipynb") if p.name != Path(EDITED_CONTROL).name)
    paths = [f"notebooks/{LESSON}", f"exercises/{OPENED_EXERCISE}", EDITED_CONTROL, OUTSIDE_CONTROL]
    stored = {path: (root / path).stat().st_mtime_ns for path in paths}
    whole = {path: nbformat.read(root / path, as_version=4).metadata for path in every}
    course_kernel = next((s["kernel"] for s in api(lab.base, lab.token, "GET", "/api/sessions")
                          if s["kernel"]["name"] == "python3"), None)  # one the other tests started, if they ran
    kernels = {"python3": course_kernel or api(lab.base, lab.token, "POST", "/api/kernels", {"name": "python3"}),
               OTHER_PYTHON_KERNEL: api(lab.base, lab.token, "POST", "/api/kernels", {"name": OTHER_PYTHON_KERNEL})}
    names = {**{path: OTHER_PYTHON_KERNEL for path in paths}, SAME_PYTHON: "python3"}
    for path, name in names.items():  # every notebook's session on one of the two kernels: opening it starts none
        api(lab.base, lab.token, "POST", "/api/sessions", {"path": path, "type": "notebook", "name": Path(path).name,
                                                           "kernel": {"id": kernels[name]["id"]}})
    page = lab.new_page(windowing="full")  # this test reads no cell from the page
    try:
        page.goto(f"{lab.base}/lab?token={lab.token}&reset")
        page.locator(".jp-DirListing").first.wait_for(timeout=60_000)
        dirty = page.evaluate(OPEN_SAVE_CLOSE, [[*paths, SAME_PYTHON], [EDITED_CONTROL], names, NOTEBOOKS_AT_ONCE])
        lab.remember_processes()
    finally:
        page.close()
    # on the course's kernel JupyterLab changes nothing, and every lesson and exercise is stored like that solution
    assert SAME_PYTHON not in dirty, f"{SAME_PYTHON} opened on the course's kernel was marked modified"
    differ = [path for path in every if whole[path] != whole[SAME_PYTHON]]
    assert not differ, f"stored with other metadata than JupyterLab writes (tools/execute_notebooks.py): {differ}"
    # the premise: JupyterLab rewrote every notebook's metadata for the other Python, and every one was saved
    assert dirty == sorted(paths), f"opened but not rewritten for the other Python: {sorted(set(paths) - set(dirty))}"
    unsaved = [path for path in paths if (root / path).stat().st_mtime_ns == stored[path]]
    assert not unsaved, f"not saved: {unsaved}"
    changed = git(root, "status", "--porcelain")
    expected = "".join(f" M {path}\n" for path in sorted([EDITED_CONTROL, OUTSIDE_CONTROL]))
    assert changed == expected, (
        f"opening the course's notebooks on another Python changed tracked files other than the controls "
        f"{EDITED_CONTROL} and {OUTSIDE_CONTROL} (make lab's pre-save hook keeps their stored metadata: "
        f"tools/jupyter-config/, tools/notebook_format.py):\n{changed}")
    # the controls: without the hook JupyterLab writes the other Python's metadata; an edit is saved, the metadata kept
    outside = nbformat.read(root / OUTSIDE_CONTROL, as_version=4).metadata
    assert outside.language_info.version == OTHER_PYTHON_VERSION and outside.kernelspec.name == OTHER_PYTHON_KERNEL
    edited = nbformat.read(root / EDITED_CONTROL, as_version=4)
    assert edited.cells[0].source.startswith("# edited in JupyterLab")
    original = nbformat.read(REPO / "notebooks" / LESSON, as_version=4).metadata
    assert {k: edited.metadata[k] for k in STORED_KEYS} == {k: original[k] for k in STORED_KEYS}

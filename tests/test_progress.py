"""Progress lines in ranks (`\\r` updates, tqdm): one live line per rank, the final state stored.

In-process: what a rewritten line shows (`visible_text`), what a reader keeps of it, and the
live display's rules (made empty, throttled, emptied at the end). In a real kernel (nbclient, as
tools/execute_notebooks.py stores outputs): a `%%ddp` cell and a streamed `ddp_lab.launch` whose
ranks print 300 updates each show them live as display updates, and store one line per rank.
"""

from __future__ import annotations

import os
import threading
import time

import nbformat
from nbclient import NotebookClient

from ddp_lab.launcher import progress
from ddp_lab.launcher.output import read_lines
from ddp_lab.launcher.progress import LiveLines, drop_overwritten, visible_text


def test_a_rewritten_line_shows_its_last_state():
    assert visible_text("\rstep 1/3\rstep 2/3\rstep 3/3\n") == "step 3/3\n"
    assert visible_text("step 3/3\r\n") == "step 3/3\n"            # print(..., end="\r"), then a newline
    assert visible_text(" 9%|#   | 9/100 [01:00, 1.2s/it]\r10%|#   | 10/100   ") == "10%|#   | 10/100"  # tqdm's padding
    assert visible_text("plain line\n") == "plain line\n"
    assert visible_text("\r\r") == ""


def test_a_reader_keeps_only_what_was_not_overwritten():
    for text in ("a\rbb\r", "\rstep 1", "x\r\r", "abc", "a\rb\rc"):
        assert visible_text(drop_overwritten(text) + "tail") == visible_text(text + "tail")
        assert visible_text(drop_overwritten(text)) == visible_text(text)
    assert drop_overwritten("\rstep 1\rstep 2") == "\rstep 2"   # keeps its '\r': still a rewritten line


def test_300_updates_arrive_as_progress_and_leave_one_line():
    read, write = os.pipe()
    lines, updates = [], []
    reader = threading.Thread(target=read_lines, args=(read, lines.append, None, updates.append))
    reader.start()
    for i in range(300):
        os.write(write, f"\rstep {i + 1}/300".encode())
        time.sleep(0.001 if i % 50 == 0 else 0)   # the reader gets the updates in several reads
    os.write(write, b"\ndone\n")
    os.close(write)
    reader.join()
    os.close(read)
    assert [visible_text(line) for line in lines] == ["step 300/300\n", "done\n"]
    # each update is a newer state; the last states may arrive in the same read as the newline, and then the line,
    # not an update, carries them
    steps = [int(visible_text(update).split()[1].split("/")[0]) for update in updates]
    assert 1 <= len(updates) <= 300 and steps == sorted(set(steps)) and steps[-1] <= 300, steps
    assert all(len(update) < 20 for update in updates), [u for u in updates if len(u) >= 20]   # what was overwritten is not kept


def test_live_lines_make_an_empty_display_update_in_place_and_end_empty(monkeypatch):
    shown = []
    clock = iter([0.0, 0.05, 0.5, 0.6])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    live = LiveLines(ranks=[0, 1], publish=shown.append)
    live.update(1, "stderr", "\r 50%")
    live.update(0, "stdout", "\rstep 2/3")
    live.update(2, "stdout", "\rnot shown")                 # not among `ranks`
    live.refresh()                                            # t=0: shown
    live.update(0, "stdout", "\rstep 3/3")
    live.refresh()                                            # t=0.05: too soon, the latest state waits
    live.refresh()                                            # t=0.5: shown
    live.update(1, "stderr", None)                            # finished: printed with the output instead
    live.refresh(force=True)
    live.close()
    assert shown == ["", "[rank 0] step 2/3\n[rank 1]  50%\n", "[rank 0] step 3/3\n[rank 1]  50%\n",
                     "[rank 0] step 3/3\n", ""]


def test_outside_a_kernel_nothing_is_shown():
    live = LiveLines()
    live.update(0, "stdout", "\rstep 1")
    live.refresh(force=True)
    live.close()   # no IPython kernel here: no display, no error


CELLS = [
    "%load_ext ddp_lab",
    "%%ddp -n 2\nimport time\nfor i in range(300):\n    print(f'\\rstep {i + 1}/300', end='')\n    time.sleep(0.003)",
    "%%ddp\nfrom tqdm.auto import tqdm\nfor i in tqdm(range(300), bar_format='{l_bar}{bar:10}| {n_fmt}/{total_fmt}', ascii=True):\n"
    "    time.sleep(0.003)",
    "%ddp_shutdown",
    "import ddp_lab\ndef count(rank):\n    import time, tqdm\n"
    "    for i in tqdm.tqdm(range(300), bar_format='{n_fmt}/{total_fmt}', mininterval=0.02):\n        time.sleep(0.003)\n"
    "ddp_lab.launch(count, nprocs=2, stream=True);",
]


class RecordingClient(NotebookClient):
    """nbclient (as tools/execute_notebooks.py runs it), keeping every message of each cell."""

    def process_message(self, msg, cell, cell_index):
        self.messages.setdefault(cell_index, []).append(msg)
        return super().process_message(msg, cell, cell_index)


def test_progress_in_a_kernel_is_live_and_stored_as_one_line_per_rank(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell) for cell in CELLS])
    client = RecordingClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.messages = {}
    client.execute()
    stored = {index: cell.outputs for index, cell in enumerate(notebook.cells)}
    assert _streams(stored[1]) == {"stdout": "[rank 0] step 300/300\n[rank 1] step 300/300\n"}
    assert _streams(stored[2]) == {"stderr": "[rank 0] 100%|##########| 300/300\n[rank 1] 100%|##########| 300/300\n"}
    assert _streams(stored[4]) == {"stderr": "[rank 0] 300/300\n[rank 1] 300/300\n"} or \
        _streams(stored[4]) == {"stderr": "[rank 1] 300/300\n[rank 0] 300/300\n"}   # streamed: as they arrive
    for index in (1, 2, 4):
        displays = [output for output in stored[index] if output.output_type == "display_data"]
        assert [display.data for display in displays] == [{"text/plain": ""}]   # made empty, left empty
        updates = [m["content"]["data"]["text/plain"] for m in client.messages[index]
                   if m["msg_type"] == "update_display_data"]
        assert updates[-1] == ""
        live = [text for text in updates if text]
        assert live, f"cell {index}: no live update"
        assert all(len(text.splitlines()) <= 2 and text.startswith("[rank ") for text in live), live
        assert len(updates) < 100, len(updates)   # throttled: not one message per update


def _streams(outputs) -> dict[str, str]:
    texts: dict[str, str] = {}
    for output in outputs:
        if output.output_type == "stream":
            texts[output.name] = texts.get(output.name, "") + output.text
    return {name: "".join(line for line in text.splitlines(keepends=True) if not line.startswith("ddp_lab:"))
            for name, text in texts.items()}

"""A jupyter_server extension for `make lab`: saving a course notebook keeps its stored kernel metadata.

The server's contents manager runs tools/notebook_format.py's keep_stored_metadata before every
save (register_pre_save_hook), so a lesson opened on a Python other than the one its outputs were
made with changes no tracked file. It is registered from an extension, not through the
ContentsManager.pre_save_hook option: jupyter_server validates that option once more when the
contents manager is built and warns that the hook overrides itself ("Overriding existing
pre_save_hook"), and a learner's own configuration may set that option for hooks of its own.
Enabled by jupyter_server_config.py beside this file.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tools/
from notebook_format import keep_stored_metadata  # noqa: E402


def _jupyter_server_extension_points() -> list[dict]:
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp) -> None:
    serverapp.contents_manager.register_pre_save_hook(keep_stored_metadata)

"""JupyterLab's server under `make lab` (found through JUPYTER_CONFIG_PATH, so your own Jupyter configuration still applies).

Saving a course notebook (notebooks/, exercises/, solutions/) keeps the kernelspec and
language_info it is stored with (tools/notebook_format.py, keep_stored_metadata): opening a lesson
on a Python other than the one its outputs were made with changes no tracked file.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tools/
from notebook_format import keep_stored_metadata  # noqa: E402

c = get_config()  # noqa: F821  (traitlets defines get_config in a configuration file)
c.ContentsManager.pre_save_hook = keep_stored_metadata

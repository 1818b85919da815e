"""JupyterLab's server under `make lab` (found through JUPYTER_CONFIG_PATH, so your own Jupyter configuration still applies).

Saving a course notebook (notebooks/, exercises/, solutions/) keeps the kernelspec and
language_info it is stored with (tools/notebook_format.py, keep_stored_metadata, registered by the
extension course_notebook_metadata.py beside this file): opening a lesson on a Python other than the
one its outputs were made with changes no tracked file. labconfig/ beside this file turns off
JupyterLab's news and update checks (no request to the internet, no pop-up asking for one).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # course_notebook_metadata.py

c = get_config()  # noqa: F821  (traitlets defines get_config in a configuration file)
c.ServerApp.jpserver_extensions.update({"course_notebook_metadata": True})

"""Pictures for the lessons (matplotlib), one module per kind of picture, loaded on first use:

    ddp_lab.plots.collectives.show_before_after(...)
"""

from __future__ import annotations

import importlib


def __getattr__(name: str):
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as error:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from error

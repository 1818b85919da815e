"""Read a model's shape from a file: a Hugging Face config.json as a planner `Transformer` (lesson 13).

The mapping from the config's keys is the course library's `ddp_lab.course.plan.hf_config`; this
module only reads the file (I/O is the lab's) and says in one line what was wrong with it.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import json
from pathlib import Path

from ddp_lab.course.plan.hf_config import transformer_from_hf_config
from ddp_lab.course.plan.model import Transformer


def read_config(path: str | Path):
    """The JSON a config file holds; ValueError says in one line why it cannot be read."""
    if not str(path).strip():    # Path("") is the current folder: say what was given instead
        raise ValueError("'' names no file: give the path of a config.json")
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{path} is a folder: give the config.json inside it") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read it ({error})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not JSON (line {error.lineno}: {error.msg})") from None


def read_hf_config(path: str | Path, name: str | None = None, seq_len: int | None = None) -> Transformer:
    """The `Transformer` a Hugging Face config.json describes; ValueError says what is wrong with the file.

    `name` defaults to the file's folder (a downloaded model keeps config.json in a folder named
    after it), or the file's stem. `seq_len`: the training length to plan (None: the config's
    max_position_embeddings).

    Example:
        >>> import json, tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp()) / "tiny-llama"
        >>> folder.mkdir()
        >>> _ = (folder / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "hidden_size": 64,
        ...     "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
        ...     "max_position_embeddings": 32, "hidden_act": "silu", "rms_norm_eps": 1e-6}))
        >>> read_hf_config(folder / "config.json").name
        'tiny-llama'

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    config = read_config(path)
    path = Path(path)
    default = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    try:
        return transformer_from_hf_config(config, name or default, seq_len)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None

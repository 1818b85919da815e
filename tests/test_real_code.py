"""Code learners bring, run the way they run it: in a real Jupyter kernel, with real gloo ranks.

Training scripts and tutorials touch `torch.backends`, configure `logging`, parse `argparse`
options, keep their settings in a `@dataclass` and end with `dist.destroy_process_group()`.
Each of those broke under ddp_lab while it worked under torchrun or `mp.spawn`. One notebook,
executed once in a fresh kernel by nbclient (functions defined in a cell live in the kernel's
`__main__`, as a learner's do), holds one cell per pattern; each test reads its cell's output.
The torchrun half of item 6 (a self-initialising function exported as a script) is
tests/test_torchrun.py's, sharing that file's one torchrun start.
"""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

import ddp_lab

CELLS = {
    "setup": """
import argparse, logging
import torch, torch.distributed as dist
import ddp_lab
%load_ext ddp_lab
""",
    # 1. torch.backends.cudnn (like .mkldnn, .opt_einsum) is an instance of a module subclass
    "backends": """
def tf32(rank):
    torch.backends.cudnn.benchmark = True          # nanoGPT's train.py sets these two
    torch.backends.cuda.matmul.allow_tf32 = True
    return torch.backends.cudnn.benchmark, torch.backends.mkldnn.is_available() in (True, False)

print("backends", list(ddp_lab.launch(tf32, nprocs=2, backend="gloo")))
""",
    # 5. without logging set up in the notebook, a rank's own basicConfig decides (as in a script) ...
    "own logging": """
def own(rank):
    import logging

    logging.basicConfig(level=logging.INFO, format="%(name)s says %(message)s")
    logging.getLogger("worker").info("hello from %d", rank)

print("own", ddp_lab.launch(own, nprocs=2, backend="gloo").outputs)
""",
    # ... and logging configured in the notebook reaches the ranks
    "logging": """
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
log = logging.getLogger("train")

def logs(rank):
    log.info("step %d", rank)
    logging.getLogger("train.data").debug("not shown: below INFO")

results = ddp_lab.launch(logs, nprocs=2, backend="gloo")
print("outputs", results.outputs)
""",
    # 7. an argparse-based main() parses the launch's argv, not the process that started the rank
    "argv": """
def main(rank):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    return parser.parse_args().epochs

print("argv", list(ddp_lab.launch(main, nprocs=2, backend="gloo")),
      list(ddp_lab.launch(main, nprocs=2, backend="gloo", argv=["--epochs", "3"])))
""",
    # 2. a config dataclass in a %%ddp cell, and its instances back in the notebook
    "dataclass": """%%ddp -n 2 --backend gloo
from dataclasses import dataclass, field

@dataclass
class Config:
    width: int = 4
    layers: list = field(default_factory=lambda: [1, 2])

config = Config(width=8 + rank)
print(config)
""",
    "pull": """
configs = %ddp_pull config
print("pulled", [(type(c).__name__, c.width, c.layers) for c in configs])
""",
    # 3. a cell that ends like a script: the next cell still has a default group
    "destroy": """%%ddp
dist.destroy_process_group()
""",
    "after": """%%ddp
t = torch.ones(1)
dist.all_reduce(t)
print("sum after destroy", t.item(), dist.get_world_size())
""",
    "partial": """%%ddp
if rank == 1:
    dist.destroy_process_group()
""",
    "after partial": """%%ddp
t = torch.ones(1) * (rank + 1)
dist.all_reduce(t)
print("sum after a partial destroy", t.item())
""",
    "shutdown": "%ddp_shutdown",
}


def _text(cell) -> tuple[str, str]:
    """(stdout, stderr) of an executed cell; an error output fails the test with its traceback."""
    out, err = [], []
    for output in cell.outputs:
        if output.output_type == "stream":
            (out if output.name == "stdout" else err).append(output.text)
        elif output.output_type == "error":
            pytest.fail(f"cell raised {output.ename}: {output.evalue}\n" + "\n".join(output.traceback))
    return "".join(out), "".join(err)


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> dict:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src.strip()) for src in CELLS.values()])
    folder = tmp_path_factory.mktemp("real-code")
    NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(folder)}}).execute()
    return dict(zip(CELLS, notebook.cells))


def test_a_function_that_sets_torch_backends_is_shipped(executed):
    out, _ = _text(executed["backends"])
    assert out == "backends [(True, True), (True, True)]\n"


def test_logging_configured_in_the_notebook_reaches_the_ranks(executed):
    out, _ = _text(executed["logging"])
    assert out == "outputs ['INFO train: step 0\\n', 'INFO train: step 1\\n']\n"


def test_argparse_in_a_rank_parses_the_launchs_argv(executed):
    out, _ = _text(executed["argv"])
    assert out == "argv [1, 1] [3, 3]\n"


def test_a_dataclass_in_a_ddp_cell_works_and_comes_back(executed):
    out, _ = _text(executed["dataclass"])
    assert out == ("[rank 0] Config(width=8, layers=[1, 2])\n"
                   "[rank 1] Config(width=9, layers=[1, 2])\n")
    out, _ = _text(executed["pull"])
    assert out == "pulled [('Config', 8, [1, 2]), ('Config', 9, [1, 2])]\n"


def test_a_cell_that_destroys_the_group_is_told_and_the_next_has_one(executed):
    _, err = _text(executed["destroy"])
    assert "destroyed the default process group on every rank" in err and "fresh one" in err
    out, _ = _text(executed["after"])
    assert out == "[rank 0] sum after destroy 2.0 2\n[rank 1] sum after destroy 2.0 2\n"
    _, err = _text(executed["partial"])
    assert "destroyed the default process group on rank(s) 1" in err
    out, _ = _text(executed["after partial"])
    assert out == "[rank 0] sum after a partial destroy 3.0\n[rank 1] sum after a partial destroy 3.0\n"


def test_a_ranks_own_basic_config_works(executed):
    """Without logging set up in the notebook, a rank's own basicConfig decides (as in a script)."""
    out, _ = _text(executed["own logging"])
    assert out == "own ['worker says hello from 0\\n', 'worker says hello from 1\\n']\n"


def test_argv_must_be_a_list_of_strings():
    with pytest.raises(TypeError, match=r"argv='--epochs 3': give a list of strings"):
        ddp_lab.launch(lambda rank: rank, argv="--epochs 3")

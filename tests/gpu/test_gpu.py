"""The GPU paths of the course, run on a real GPU: `pytest -m gpu tests/gpu`.

Without CUDA every test marked `gpu` is skipped with the reason. CI has no GPU, so these
run only when someone runs them on a GPU machine; docs/hardware-and-gpu.md records
what ran where.

NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), so on a single-GPU machine
NCCL is covered at world size 1 only; the world-size-2 NCCL tests need 2 GPUs and say so
when skipped. gloo has no such rule: two gloo ranks can share one GPU.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import ddp_lab

ROOT = Path(__file__).resolve().parents[2]
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
_NO_CUDA = (f"needs a CUDA GPU: torch {torch.__version__} "
            f"({'CUDA ' + torch.version.cuda if torch.version.cuda else 'a CPU-only build'}) sees {GPUS} GPUs")
needs_gpu = pytest.mark.skipif(GPUS < 1, reason=_NO_CUDA)
needs_two_gpus = pytest.mark.skipif(
    GPUS < 2, reason=f"needs 2 GPUs (found {GPUS}): NCCL refuses two ranks on one GPU, so a single-GPU "
                     "machine covers NCCL at world size 1 only")
needs_nccl = pytest.mark.skipif(not torch.distributed.is_nccl_available(), reason="this torch has no NCCL")


def train(rank, steps=4, batch=8):
    """DDP on NCCL (device_ids=[LOCAL_RANK]) or gloo/CPU; the same loop in one process without a group."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    distributed = dist.is_initialized()
    world_size = dist.get_world_size() if distributed else 1
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if distributed and dist.get_backend() == "nccl":
        torch.cuda.set_device(local_rank)
        device, kwargs = torch.device("cuda", local_rank), {"device_ids": [local_rank]}
    else:
        device, kwargs = torch.device("cpu"), {}
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1)).to(device)
    if distributed:
        model = DDP(model, **kwargs)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1)
    x, y = torch.randn(steps, batch, 6, generator=data), torch.randn(steps, batch, 1, generator=data)
    shard = slice(rank * batch // world_size, (rank + 1) * batch // world_size)
    for step in range(steps):
        loss = nn.functional.mse_loss(model(x[step, shard].to(device)), y[step, shard].to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    layer = model.module if distributed else model
    backend = dist.get_backend() if distributed else None
    return {"state": {k: v.detach().cpu() for k, v in layer.state_dict().items()},
            "device": str(next(layer.parameters()).device), "backend": backend}


def assert_same_state(got: dict, expected: dict) -> None:
    for name, value in expected.items():  # GPU and CPU round differently: a tolerance
        torch.testing.assert_close(got[name], value, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


@pytest.fixture(scope="module")
def cpu_reference():
    return train(0)["state"]


@pytest.mark.gpu
@needs_nccl
@needs_gpu
def test_nccl_ddp_world_size_1(cpu_reference):
    """NCCL DDP on one GPU: the case a single-GPU machine can cover."""
    (result,) = ddp_lab.launch(train, nprocs=1, backend="nccl")
    assert (result["backend"], result["device"]) == ("nccl", "cuda:0")
    assert_same_state(result["state"], cpu_reference)


@pytest.mark.gpu
@needs_nccl
@needs_two_gpus
def test_nccl_ddp_world_size_2(cpu_reference):
    results = ddp_lab.launch(train, nprocs=2, backend="nccl")
    assert [r["device"] for r in results] == ["cuda:0", "cuda:1"]
    for result in results:
        assert result["backend"] == "nccl"
        assert_same_state(result["state"], cpu_reference)


def backend_and_device(rank):
    import torch.distributed as dist

    x = torch.ones(2, device=ddp_lab.rank_device()) * (rank + 1)
    dist.all_reduce(x)
    return dist.get_backend(), str(ddp_lab.rank_device()), str(x.device), x.cpu()


@pytest.mark.gpu
@needs_nccl
@needs_gpu
def test_auto_backend_chooses_nccl_with_one_gpu_per_rank():
    from ddp_lab.launcher.backend import choose_backend

    nprocs = min(2, GPUS)
    results = ddp_lab.launch(backend_and_device, nprocs=nprocs, backend="auto")
    assert results.backend == "nccl"
    total = sum(range(1, nprocs + 1))
    for rank, (backend, device, tensor_device, x) in enumerate(results):
        assert (backend, device, tensor_device) == ("nccl", f"cuda:{rank}", f"cuda:{rank}")
        torch.testing.assert_close(x, torch.full((2,), float(total)))
    assert choose_backend("auto", GPUS + 1, announce=False) == "gloo"  # more ranks than GPUs


def gloo_on_cuda(rank):
    import torch.distributed as dist

    device = torch.device("cuda", 0)  # every rank on GPU 0
    total = torch.full((3,), float(rank + 1), device=device)
    dist.all_reduce(total)
    source = torch.arange(3.0, device=device) if rank == 0 else torch.zeros(3, device=device)
    dist.broadcast(source, src=0)
    gathered = [torch.empty(2, device=device) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, torch.full((2,), float(rank), device=device))
    return {str(t.device) for t in (total, source, *gathered)}, total.cpu(), source.cpu(), torch.stack(gathered).cpu()


@pytest.mark.gpu
@needs_gpu
def test_gloo_moves_cuda_tensors_between_ranks_on_one_gpu():
    for devices, total, source, gathered in ddp_lab.launch(gloo_on_cuda, nprocs=2, backend="gloo"):
        assert devices == {"cuda:0"}
        torch.testing.assert_close(total, torch.full((3,), 3.0))
        torch.testing.assert_close(source, torch.arange(3.0))
        torch.testing.assert_close(gathered, torch.tensor([[0.0, 0.0], [1.0, 1.0]]))


@pytest.mark.gpu
@needs_gpu
def test_data_parallel_on_gpu_matches_one_device():
    """nn.DataParallel over every visible GPU (with 1 GPU it just calls the module)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3)).cuda()
    single = copy.deepcopy(model)
    parallel = nn.DataParallel(model, device_ids=list(range(GPUS)))
    x, y = torch.randn(12, 8, device="cuda"), torch.randint(0, 3, (12,), device="cuda")
    out = parallel(x)
    assert out.device == torch.device("cuda", 0)  # gathered on device_ids[0]
    nn.functional.cross_entropy(out, y).backward()
    nn.functional.cross_entropy(single(x), y).backward()
    for (name, p), q in zip(model.named_parameters(), single.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")


def use_cuda(rank):
    x = torch.full((4,), float(rank), device="cuda:0")
    return (x * 2).sum().item()


@pytest.mark.gpu
@needs_gpu
def test_launch_from_a_parent_that_already_initialised_cuda():
    """A kernel that already used CUDA can still launch CUDA ranks: ranks are fresh interpreters, not forks."""
    torch.zeros(1, device="cuda")
    assert torch.cuda.is_initialized()
    assert ddp_lab.launch(use_cuda, nprocs=2, backend="gloo") == [0.0, 8.0]
    if torch.distributed.is_nccl_available():
        assert ddp_lab.launch(use_cuda, nprocs=1, backend="nccl") == [0.0]


@pytest.mark.gpu
@needs_nccl
@needs_gpu
def test_torchrun_runs_an_exported_function_on_nccl(tmp_path, cpu_reference):
    nprocs = min(2, GPUS)
    job = ddp_lab.scripts.export(train, path=tmp_path / "train.pkl")  # backend 'auto': nccl here
    ddp_lab.scripts.run([job.torchrun_command("--standalone", "--nproc-per-node", str(nprocs))],
                        env={"OMP_NUM_THREADS": "1"}, timeout=300)
    results = job.results()
    assert [r["device"] for r in results] == [f"cuda:{rank}" for rank in range(nprocs)]
    for result in results:
        assert result["backend"] == "nccl"
        assert_same_state(result["state"], cpu_reference)


def setup_with_nccl_hard_coded(backend):
    """A wrong answer to lesson 06's exercise 3: NCCL whatever backend the caller asks for, through a variable of
    its own (a backend chosen in the init_process_group call itself is refused before any rank starts)."""
    import torch.distributed as dist

    chosen = "nccl"
    dist.init_process_group(chosen)
    return {key: int(os.environ[key.upper()]) for key in ("rank", "local_rank", "world_size")}


@pytest.mark.gpu
@needs_nccl
@needs_gpu
def test_the_setup_check_names_a_hard_coded_nccl_where_a_gpu_is_visible():
    """Here init_process_group("nccl") succeeds (NCCL connects lazily, so two ranks may name one
    GPU): the check must tell the learner which backend their group got, not fail on a CPU tensor.
    Without GPUs, tests/test_checks_lesson06.py covers the same wrong answer."""
    from ddp_lab.checks import CheckFailed
    from ddp_lab.checks.lesson06 import check_setup_from_env

    with pytest.raises(CheckFailed, match=r"rank \d: the process group uses 'nccl', expected 'gloo'"):
        check_setup_from_env(setup_with_nccl_hard_coded)


def test_skip_reason_does_not_initialise_cuda_and_require_gpu_turns_skips_into_errors():
    """Runs everywhere: a fresh interpreter, so CUDA state of this process does not matter."""
    code = ("import torch, ddp_lab, os\n"
            f"print(ddp_lab.gpu.skip_reason(gpus=1), torch.cuda.is_initialized())\n"
            f"os.environ['DDP_LAB_REQUIRE_GPU'] = '{GPUS + 1}'\n"
            f"print(ddp_lab.gpu.skip_reason(gpus={GPUS + 2}))\n"
            "try:\n"
            f"    print(ddp_lab.gpu.skip_reason(gpus={GPUS + 1}))\n"
            "except ddp_lab.gpu.GPUUnavailable as error:\n"
            "    print('raised:', error)\n"
            "os.environ['DDP_LAB_REQUIRE_GPU'] = 'yes'\n"
            "try:\n"
            "    ddp_lab.gpu.skip_reason(gpus=1)\n"
            "except ValueError as error:\n"
            "    print('refused:', error)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    first, more_than_required, required, refused = done.stdout.splitlines()
    assert first == ("None False" if GPUS else "needs 1 CUDA GPU, found 0 False")
    assert more_than_required == f"needs {GPUS + 2} CUDA GPUs, found {GPUS}"  # beyond the promise: a skip
    assert required == (f"raised: DDP_LAB_REQUIRE_GPU={GPUS + 1} says cells that need up to {GPUS + 1} GPU(s) "
                        f"must run here, but this one cannot: needs {GPUS + 1} CUDA GPU{'s' if GPUS else ''}, "
                        f"found {GPUS}.")
    assert refused == "refused: DDP_LAB_REQUIRE_GPU='yes': set it to a GPU count such as 1 or 8, or unset it."
    assert ddp_lab.gpu.needed_gpus(more_than_required) == GPUS + 2
    assert ddp_lab.gpu.needed_gpus("needs the NCCL backend, which this torch build does not include") is None


def course_notebooks() -> list[Path]:
    """Every lesson and solution: each must run on a GPU machine, not only its `gpu` cells."""
    return sorted([*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("solutions/*.ipynb")])


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 1, reason=_NO_CUDA)
@pytest.mark.parametrize("path", course_notebooks(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebook_runs_on_this_gpu_machine(path, monkeypatch):
    """Execute the whole notebook with DDP_LAB_REQUIRE_GPU=<GPUs here>.

    On a GPU machine `backend="auto"` picks NCCL wherever there is a GPU per rank, so a
    lesson that puts CPU tensors into an auto-chosen group fails here, as it would for a
    learner on Kaggle's 2 GPUs. A `gpu`-tagged cell this machine can run must run; cells
    that need more GPUs than it has still skip, and are reported as a warning.
    """
    nbformat = pytest.importorskip("nbformat", reason="executing notebooks needs nbformat, nbclient, ipykernel")
    NotebookClient = pytest.importorskip("nbclient", reason="executing notebooks needs nbclient").NotebookClient

    monkeypatch.setenv("DDP_LAB_REQUIRE_GPU", str(GPUS))  # the kernel inherits it
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    waiting = []
    for index, cell in enumerate(notebook.cells):
        if "gpu" not in cell.metadata.get("tags", []):
            continue
        text = "".join(output.get("text", "") for output in cell.outputs)
        if "skipped:" in text:
            needed = ddp_lab.gpu.needed_gpus(text)
            assert needed is not None and needed > GPUS, f"{path.name} cell {index} skipped on a GPU machine: {text}"
            waiting.append(f"cell {index} (needs {needed} GPUs)")
    if waiting:
        warnings.warn(f"{path.name}: ran every GPU cell except {', '.join(waiting)}: this machine has {GPUS}",
                      stacklevel=1)

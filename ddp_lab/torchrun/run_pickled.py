"""The script torchrun starts on every rank: `python -m ddp_lab.torchrun.run_pickled <job file>`.

    torchrun --standalone --nproc-per-node 2 -m ddp_lab.torchrun.run_pickled artifacts/06/train.pkl

It does what every torchrun training script does first, then calls the exported function:

1. read the rank's identity from the environment torchrun sets (RANK, LOCAL_RANK,
   WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT);
2. pick the device: under NCCL `torch.cuda.set_device(LOCAL_RANK)` (LOCAL_RANK, not
   RANK: RANK runs over all nodes, GPUs are numbered per node);
3. `dist.init_process_group(backend)` with the default `env://` init method;
4. `value = fn(RANK, *args)`, written to `<job>.results/rank-<RANK>.pkl`.

`main` is decorated with torch's `@record`, as torchrun's docs advise for every entry
point: a rank that raises writes its traceback to an error file, and torchrun's failure
summary shows it under "Root Cause" instead of "To enable traceback see ...".

Job files come from `ddp_lab.torchrun.scripts.export`. Introduced in
notebooks/06-backends-and-torchrun.ipynb.
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path


def identity() -> dict[str, int]:
    """The rank's place in the job, from the variables torchrun sets (as ints)."""
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
    missing = [name for name in names if name not in os.environ]
    if missing:
        raise RuntimeError(
            f"{', '.join(missing)} not set: start this script with torchrun "
            "(torchrun --nproc-per-node 2 -m ddp_lab.torchrun.run_pickled JOB), not with plain python.")
    return {name.lower(): int(os.environ[name]) for name in names}


def resolve_backend(backend: str, local_world_size: int) -> str:
    """'auto' -> what `ddp_lab.launch` picks for this node's ranks: nccl with a GPU per local rank, else gloo."""
    from ddp_lab.launcher.backend import auto_backend

    return auto_backend(local_world_size) if backend == "auto" else backend


def load_job(path: Path):
    """Read a job file: restore the notebook's import path and cell sources, unpickle fn and args."""
    from ddp_lab.launcher.payload import unpack

    payload = pickle.loads(path.read_bytes())
    return (payload["backend"], *unpack(payload, replace_sys_path=False))


def write_result(results_dir: Path, rank: int, world_size: int, value) -> None:
    """Write rank's value atomically (a reader never sees half a file)."""
    import cloudpickle

    results_dir.mkdir(parents=True, exist_ok=True)
    record = {"rank": rank, "world_size": world_size, "value": cloudpickle.dumps(value)}
    partial = results_dir / f".rank-{rank}.pkl.partial"
    partial.write_bytes(pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))
    partial.replace(results_dir / f"rank-{rank}.pkl")


def main(argv: list[str] | None = None) -> None:
    """Run the job file named on the command line as this torchrun worker's rank."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        raise SystemExit("usage: torchrun [torchrun options] -m ddp_lab.torchrun.run_pickled JOB_FILE")
    import torch
    import torch.distributed as dist

    job_path = Path(argv[0])
    me = identity()
    backend, fn, args = load_job(job_path)
    backend = resolve_backend(backend, me["local_world_size"])
    if backend == "nccl":
        torch.cuda.set_device(me["local_rank"])  # this process's GPU, numbered per node
    dist.init_process_group(backend)  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    value = fn(me["rank"], *args)
    write_result(job_path.with_name(job_path.stem + ".results"), me["rank"], me["world_size"], value)
    if dist.is_initialized():
        dist.barrier()  # nobody leaves while a peer still needs the group
    # Leave without interpreter teardown, as ddp_lab's own ranks do: C++ destructors of
    # gloo threads still running after DDP can abort a process that already succeeded
    # (SIGABRT, "terminate called without an active exception"), which torchrun would
    # report as a failed job.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    from torch.distributed.elastic.multiprocessing.errors import record

    record(main)()

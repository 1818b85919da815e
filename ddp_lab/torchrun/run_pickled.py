"""The script torchrun starts on every rank: `python -m ddp_lab.torchrun.run_pickled <job file>`.

    torchrun --standalone --nproc-per-node 2 -m ddp_lab.torchrun.run_pickled artifacts/06/train.pkl

It does what every torchrun training script does first, then calls the exported function:

1. read the rank's identity from the environment torchrun sets (RANK, LOCAL_RANK,
   WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT);
2. pick the device: under NCCL `torch.cuda.set_device(LOCAL_RANK)` (LOCAL_RANK, not
   RANK: RANK runs over all nodes, GPUs are numbered per node);
3. `dist.init_process_group(backend)` with the default `env://` init method (under a
   restarting torchrun: the same store, with keys of their own per attempt; see
   `init_process_group`), unless the job was exported with `init_process_group=False`
   (fn sets up its own group);
4. `value = fn(RANK, *args)`, written to `<job>.results/rank-<RANK>.pkl`.

`main` is decorated with torch's `@record`, as torchrun's docs advise for every entry
point: a rank that raises writes its traceback to an error file, and torchrun's failure
summary shows it under "Root Cause" instead of "To enable traceback see ...".

Job files come from `ddp_lab.torchrun.scripts.export`. Introduced in
notebooks/06-backends-and-torchrun.ipynb.
"""

from __future__ import annotations

import datetime
import os
import pickle
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from ddp_lab.launcher.backend import auto_backend
from ddp_lab.launcher.payload import dumps, unpack


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

    return auto_backend(local_world_size) if backend == "auto" else backend


def load_job(path: Path):
    """Read a job file: restore the notebook's import path and cell sources, unpickle fn and args."""

    payload = pickle.loads(path.read_bytes())
    return (payload["backend"], *unpack(payload, replace_sys_path=False))


def write_result(results_dir: Path, rank: int, world_size: int, value) -> None:
    """Write rank's value atomically (a reader never sees half a file)."""

    results_dir.mkdir(parents=True, exist_ok=True)
    record = {"rank": rank, "world_size": world_size, "value": dumps(value)}
    partial = results_dir / f".rank-{rank}.pkl.partial"
    partial.write_bytes(pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))
    partial.replace(results_dir / f"rank-{rank}.pkl")


def init_process_group(backend: str, me: dict[str, int]) -> None:
    """`dist.init_process_group(backend)` from torchrun's variables, with a fresh key space per restart.

    torchrun (torch >= 2.5, c10d rendezvous) hosts the store in its agent and hands the
    same one to every restart (`TORCHELASTIC_USE_AGENT_STORE=True`), while env:// no
    longer prefixes the keys per attempt: a restarted rank can read a peer's address from
    the attempt that crashed and fail to connect ("Connection refused"), or hang
    (pytorch/pytorch#135712, #167288; here 1 restart in 2 failed). So under the agent's
    store, connect to it ourselves and prefix every key with the attempt number, as torch
    < 2.5 did; elsewhere, plain env://.
    """


    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        dist.init_process_group(backend)  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
        return
    timeout = datetime.timedelta(minutes=30)  # init_process_group's default for gloo
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), me["world_size"],
                          is_master=False, timeout=timeout)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group(backend, store=dist.PrefixStore(f"/ddp_lab/attempt_{attempt}", store),
                            rank=me["rank"], world_size=me["world_size"], timeout=timeout)


def main(argv: list[str] | None = None) -> None:
    """Run the job file named on the command line as this torchrun worker's rank."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        raise SystemExit("usage: torchrun [torchrun options] -m ddp_lab.torchrun.run_pickled JOB_FILE")

    job_path = Path(argv[0])
    me = identity()
    backend, fn, args = load_job(job_path)
    if backend is not None:   # None: exported with init_process_group=False, fn sets up its own group
        backend = resolve_backend(backend, me["local_world_size"])
        if backend == "nccl":
            torch.cuda.set_device(me["local_rank"])  # this process's GPU, numbered per node
        init_process_group(backend, me)
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

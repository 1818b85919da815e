"""Launch benchmark (not a test): time from "launch" to the first finished all_reduce.

    make bench            # or: .venv/bin/python bench/launch.py [--sizes 2 4 8] [--repeats 3]

Side by side in one run, for N ranks on this machine:
  mp.spawn      torch.multiprocessing.spawn with an importable function
  torchrun      torchrun --standalone --nproc-per-node N (a script)
  ddp_lab cold  ddp_lab.launch starting fresh interpreters (DDP_LAB_WARM=0)
  ddp_lab warm  ddp_lab.launch forking ranks from its zygote (every launch after the first)
and the overhead of a trivial %%ddp cell on a live 4-rank cluster.
The time is measured until the last rank has finished its first all_reduce (wall clock
on one machine), so teardown is not included. Medians of --repeats runs are printed.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = Path(__file__).resolve().parent


def spawn_target(rank: int, world_size: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    dist.all_reduce(torch.ones(1))
    Path(out_dir, f"{rank}.txt").write_text(f"{time.time():.6f}")
    dist.barrier()
    dist.destroy_process_group()   # without it a rank can abort in gloo's teardown at exit (8 ranks on 2 cores)


def time_spawn(n: int) -> float:
    from ddp_lab.launcher.rendezvous import free_port

    with tempfile.TemporaryDirectory() as out_dir:
        started = time.time()
        mp.spawn(spawn_target, args=(n, free_port(), out_dir), nprocs=n, join=True)
        return max(float(Path(out_dir, f"{r}.txt").read_text()) for r in range(n)) - started


def time_torchrun(n: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // n))}
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
                           str(HERE / "torchrun_target.py")], capture_output=True, text=True, env=env, check=True)
    stamps = [float(s) for s in re.findall(r"ALL_REDUCE_DONE (\d+\.\d+)", done.stdout)]
    assert len(stamps) == n, done.stdout + done.stderr
    return max(stamps) - started


def _first_all_reduce(rank: int) -> float:
    dist.all_reduce(torch.ones(1))
    return time.time()


def time_ddp_lab(n: int, warm: bool) -> float:
    import ddp_lab
    from ddp_lab.launcher import procstart

    if warm:
        procstart.prepare_zygote()
        assert procstart.ready_zygote() is not None, "the zygote did not start"
    else:
        procstart.shutdown_zygote()
    os.environ["DDP_LAB_WARM"] = "1" if warm else "0"
    started = time.time()
    stamps = ddp_lab.launch(_first_all_reduce, nprocs=n, backend="gloo")
    os.environ["DDP_LAB_WARM"] = "1"
    return max(stamps) - started


def trivial_cell_overhead(n: int, repeats: int = 50) -> float:
    import ddp_lab

    with ddp_lab.Cluster(n, backend="gloo") as cluster:
        cluster.run_code("pass")
        timings = []
        for _ in range(repeats):
            started = time.perf_counter()
            cluster.run_code("pass")
            timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def main() -> int:
    import warnings

    parser = argparse.ArgumentParser(description="launch-to-first-all_reduce benchmark")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the 'more ranks than cores' warning, once per size
    methods = {
        "mp.spawn": time_spawn,
        "torchrun": time_torchrun,
        "ddp_lab cold": lambda n: time_ddp_lab(n, warm=False),
        "ddp_lab warm": lambda n: time_ddp_lab(n, warm=True),
    }
    print(f"torch {torch.__version__}, {os.cpu_count()} CPU cores, median of {args.repeats} runs, seconds "
          "from launch to the last rank's first all_reduce\n")
    print("| ranks | " + " | ".join(methods) + " | spawn / warm |")
    print("|---:|" + "---:|" * (len(methods) + 1))
    medians = {}
    for n in args.sizes:
        row = {name: statistics.median(fn(n) for _ in range(args.repeats)) for name, fn in methods.items()}
        medians[n] = row
        ratio = row["mp.spawn"] / row["ddp_lab warm"]
        print(f"| {n} | " + " | ".join(f"{row[name]:.3f}" for name in methods) + f" | {ratio:.0f}x |", flush=True)
    overhead = trivial_cell_overhead(4)
    print(f"\ntrivial %%ddp cell on 4 ranks: median {overhead * 1000:.1f} ms (target <= 30 ms)")
    if 4 in medians:
        warm4, spawn4 = medians[4]["ddp_lab warm"], medians[4]["mp.spawn"]
        print(f"4 ranks warm: {warm4:.3f} s (target <= 0.15 s: {'met' if warm4 <= 0.15 else 'NOT met'}); "
              f"{spawn4 / warm4:.0f}x faster than mp.spawn (target >= 20x: {'met' if spawn4 / warm4 >= 20 else 'NOT met'})")
    if 8 in medians:
        warm8 = medians[8]["ddp_lab warm"]
        print(f"8 ranks warm: {warm8:.3f} s (target <= 0.3 s: {'met' if warm8 <= 0.3 else 'NOT met'})")
    for n, row in medians.items():
        print(f"{n} ranks cold: ddp_lab {row['ddp_lab cold']:.2f} s vs mp.spawn {row['mp.spawn']:.2f} s "
              f"({'not slower' if row['ddp_lab cold'] <= row['mp.spawn'] * 1.05 else 'SLOWER'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

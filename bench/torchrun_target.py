"""Started by torchrun in bench/launch.py: one all_reduce, then print when it finished."""

import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
dist.all_reduce(torch.ones(1))
print(f"ALL_REDUCE_DONE {time.time():.6f}", flush=True)
dist.barrier()
dist.destroy_process_group()   # without it a rank can abort in gloo's teardown at exit (8 ranks on 2 cores)

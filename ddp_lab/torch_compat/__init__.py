"""torch-version compatibility: one module per torch API family whose path or behaviour differs across the
torch versions the course supports (2.4 ... 2.15), so lessons and the lab call one name everywhere.

    dtensor.py     DTensor, DeviceMesh and tensor parallelism's names (public only from torch 2.5)
    fsdp.py        FSDP2's fully_shard (private path in 2.4) and whether it runs on CPU here
    pipelining.py  torch.distributed.pipelining stages and schedules (arguments and a p2p fix differ)
    flat_collectives.py  reduce_scatter and all_gather on one flat tensor (renamed in 2.13)
    grouped_mm.py  one matmul per expert in one call (private name in 2.8, no CPU kernel there)

Each module's docstring says which versions differ and why its branch exists.
"""

"""Pipeline parallelism helpers: schedules as action lists, the ideal timeline, bubble and memory counts.

torch.distributed.pipelining's stages and schedules across torch versions are `ddp_lab.torch_compat.pipelining`.
Introduced in notebooks/07-pipeline-parallelism.ipynb.
"""

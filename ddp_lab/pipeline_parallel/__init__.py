"""Pipeline parallelism helpers: schedules as action lists, the ideal timeline, bubble and memory counts,
and one portable way to build torch.distributed.pipelining stages and schedules across torch versions.

Introduced in notebooks/07-pipeline-parallelism.ipynb.
"""

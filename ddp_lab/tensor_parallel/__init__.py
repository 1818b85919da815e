"""Tensor parallelism helpers: the DTensor API across torch versions, and counting collective bytes.

Learners import them explicitly (`from ddp_lab.tensor_parallel import dtensor_api, count_collectives`).
Introduced in notebooks/08-tensor-parallelism.ipynb.
"""

from ddp_lab.tensor_parallel.comm import CollectiveCall, count_collectives
from ddp_lab.tensor_parallel.dtensor import dtensor_api

__all__ = ["CollectiveCall", "count_collectives", "dtensor_api"]

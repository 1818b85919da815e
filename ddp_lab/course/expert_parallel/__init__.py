"""Mixture of experts and expert parallelism, in small pieces a lesson reads one by one.

    router.py         softmax top-k gating (Switch k = 1, GShard/Mixtral k = 2)
    capacity.py       expert capacity and the assignments it drops
    aux_loss.py       the Switch/GShard load-balancing loss
    layer.py          the one-process MoE layer: the reference
    dispatch.py       dispatch and combine with all_to_all_single (uneven splits, counts first)
    sharded_layer.py  the layer with its experts spread over ranks

Introduced in notebooks/14-mixture-of-experts.ipynb.
"""

from ddp_lab.course.expert_parallel.aux_loss import load_balancing_loss
from ddp_lab.course.expert_parallel.capacity import expert_capacity, keep_within_capacity
from ddp_lab.course.expert_parallel.dispatch import Dispatched, all_to_all, combine, dispatch, exchange_counts
from ddp_lab.course.expert_parallel.layer import ExpertMLP, MoELayer, MoEOutput, route_and_keep
from ddp_lab.course.expert_parallel.router import Routing, route_top_k
from ddp_lab.course.expert_parallel.sharded_layer import ExpertParallelMoE, experts_of_rank, run_local_experts

__all__ = ["Dispatched", "ExpertMLP", "ExpertParallelMoE", "MoELayer", "MoEOutput", "Routing", "all_to_all",
           "combine", "dispatch", "exchange_counts", "expert_capacity", "experts_of_rank", "keep_within_capacity",
           "load_balancing_loss", "route_and_keep", "route_top_k", "run_local_experts"]

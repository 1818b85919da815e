"""The scale planner: which dp x tp x pp x ZeRO plan to use for a model on a cluster, and its cost.

    from ddp_lab import plan
    model = plan.Transformer.preset("llama3-8b")
    cluster = plan.ClusterSpec.preset("h100-sxm", nodes=4)
    plans = plan.search(model, cluster)          # valid plans that fit, fastest first
    print(plan.table(plans[:5]))

Pure Python (importing it does not import torch); only `calibrate.this_machine()` measures,
through `ddp_lab.plan.calibrate`. The modules, one concept each:
    model.py        the transformer's shape and exact parameter count, presets
    cluster.py      GPUs and clusters (spec-sheet presets; the one calibrated efficiency)
    strategy.py     dp, tp, pp, ZeRO, micro-batches, recomputation; validation
    memory.py       per-GPU model states (ZeRO paper) and totals; activations.py: Korthikanti et al.
    collectives.py  time of a collective on the links a group spans (lesson 02's alpha-beta)
    steptime.py     compute, TP communication, pipeline bubble, exposed DP communication; MFU
    search.py       enumerate, keep what fits, rank by throughput; report.py: the table
    cli.py          `python -m ddp_lab plan ...`

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from ddp_lab.plan.activations import head_activation_bytes, layer_activation_bytes, layers_in_flight
from ddp_lab.plan.cluster_spec import GPU, MATMUL_EFFICIENCY, ClusterSpec
from ddp_lab.plan.collectives import Group, collective_time   # Group: ddp_lab.rank_layout
from ddp_lab.plan.memory import MemoryBreakdown, memory, model_state_bytes, stage_activation_bytes, stage_parameters
from ddp_lab.plan.model import Transformer, parse_count
from ddp_lab.plan.report import breakdown, table
from ddp_lab.plan.search import Plan, evaluate, search
from ddp_lab.plan.steptime import TimeBreakdown, mfu, step_flops, step_time, tflops_per_gpu, tokens_per_second
from ddp_lab.plan.strategy import Strategy, check

__all__ = ["GPU", "MATMUL_EFFICIENCY", "ClusterSpec", "Group", "MemoryBreakdown", "Plan", "Strategy", "TimeBreakdown",
           "Transformer", "breakdown", "check", "collective_time", "evaluate", "head_activation_bytes",
           "layer_activation_bytes", "layers_in_flight", "memory", "mfu", "model_state_bytes", "parse_count",
           "search", "stage_activation_bytes", "stage_parameters", "step_flops", "step_time", "table", "tflops_per_gpu", "tokens_per_second"]

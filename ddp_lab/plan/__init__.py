"""The scale planner: which dp x tp x pp x ZeRO plan to use for a model on a cluster, and its cost.

    from ddp_lab import plan
    model = plan.Transformer.preset("llama3-8b")
    cluster = plan.ClusterSpec.preset("h100-sxm", nodes=4)
    plans = plan.search(model, cluster)          # valid plans that fit, fastest first
    print(plan.table(plans[:5]))

Two floors. The formulas a learner reads live in the course library, `ddp_lab/course/plan/`
(model, hf_config, cluster_spec, strategy, memory, activations, collectives, efficiency, overlap,
steptime, search, and experts and context_parallel for lessons 14 and 15: pure Python,
importing them does not import torch); this lab package re-exports their names and adds what runs:
    report.py       the table and the breakdown a learner prints
    decision.py     what helps choose between plans: parameters read, margin, ties, assumptions
    cli.py          `python -m ddp_lab plan ...` (its flags and their checks: cli_flags.py; a fit to a
                    run you measured: cli_fit.py; plots and cross-region links: cli_plot.py, cli_regions.py)
    model_files.py  a Hugging Face config.json read from disk as a model
    calibrate.py    this machine's speeds, measured (`calibrate.this_machine()`)
    measure.py, probes.py, reference.py, validate.py   the harness that runs real ranks and
                    compares the formulas with what they measure
    published.py    published training runs, the planner's calibration set; sequence_sweep.py: MosaicML's
                    4K-64K rows that set flash attention's rate
    fullsize.py     a full-size model counted by PyTorch on fake tensors (no memory)

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from ddp_lab.course.plan.activations import head_activation_bytes, layer_activation_bytes, layers_in_flight
from ddp_lab.course.plan.cluster_spec import GPU, ClusterSpec
from ddp_lab.course.plan.generation_constants import GEMM_EFFICIENCY
from ddp_lab.course.plan.collectives import Group, collective_time   # Group: ddp_lab.course.rank_layout
from ddp_lab.course.plan.context_parallel import causal_attention_flops, kv_block_bytes, ring_time
from ddp_lab.course.plan.experts import MoE, all_to_all_time, dispatch_bytes
from ddp_lab.course.plan.memory import (MemoryBreakdown, memory, model_state_bytes, stage_activation_bytes,
                                        stage_parameters, stage_state_bytes)
from ddp_lab.course.plan.model import Transformer, parse_count
from ddp_lab.plan.report import breakdown, table
from ddp_lab.course.plan.search import Plan, evaluate, search
from ddp_lab.course.plan.steptime import TimeBreakdown, mfu, step_flops, step_time, tflops_per_gpu, tokens_per_second
from ddp_lab.course.plan.strategy import Strategy, check

__all__ = ["GPU", "GEMM_EFFICIENCY", "ClusterSpec", "Group", "MemoryBreakdown", "MoE", "Plan", "Strategy",
           "TimeBreakdown", "Transformer", "all_to_all_time", "breakdown", "causal_attention_flops", "check",
           "collective_time", "dispatch_bytes", "evaluate", "head_activation_bytes", "kv_block_bytes",
           "layer_activation_bytes", "layers_in_flight", "memory", "mfu", "model_state_bytes", "parse_count",
           "ring_time", "search", "stage_activation_bytes", "stage_parameters", "stage_state_bytes", "step_flops",
           "step_time", "table", "tflops_per_gpu", "tokens_per_second"]

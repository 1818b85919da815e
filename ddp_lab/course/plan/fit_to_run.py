"""Fit the planner's one GEMM constant to a step you measured: the matmul efficiency that reproduces it.

The planner's step time rests on one calibrated number per GPU generation, the share of peak the matmuls
sustain (`generation_constants.GEMM_EFFICIENCY`), set on one published run. That run's software is not yours: at
that constant every held-out H100 run of NVIDIA's stacks (docs/planner.md, "Held-out validation") came out slower
than it ran; `at_kernel_rate` plans such stacks at the rate the GPU's kernels were timed at instead. A bias of one
stack on one GPU is what one measurement of your own removes: time a few steps of one
layout, find the efficiency at which the planner gives that step time, then compare other layouts of the same
model, stack and cluster with it (a fit on another model carries that model's misses: fitted on OLMo-core's 1B
run, its 13B runs come out far too fast). The rest of the model (communication, bubbles, memory-bound kernels at
HBM bandwidth, the flash-attention rate) stays as it is, so a layout that differs in those still differs in the
prediction.
`tests/test_plan_published.py` checks GEMM_EFFICIENCY with this function (it refits each generation's constant
to its calibration run).

Not used in a lesson: the planner's `--measured-tokens-per-gpu` (docs/planner.md, "Asking it"); the planner is
introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from dataclasses import replace

from ddp_lab.course.plan.generation_constants import KERNEL_GEMM_EFFICIENCY, kernel_efficiency_of
from ddp_lab.course.plan.steptime import step_time

LOWEST, HIGHEST = 0.05, 1.0     # the efficiencies searched: 5 % of peak to all of it


class NoEfficiencyFits(ValueError):
    """A measured step no matmul efficiency in (LOWEST, HIGHEST] reproduces (`matmul_efficiency_for`)."""


def with_matmul_efficiency(cluster, efficiency: float):
    """The cluster with its GPUs' matmuls at `efficiency` of peak instead of their generation's constant."""
    return cluster.with_(gpu=replace(cluster.gpu, matmul_efficiency=efficiency))


def at_kernel_rate(cluster):
    """The cluster with its GPUs' matmuls at their kernels' timed rate (generation_constants.KERNEL_GEMM_EFFICIENCY)
    instead of the calibrated one, for a stack that keeps the GPUs busy between kernels (NVIDIA's NeMo and Megatron
    recipes). A generation whose kernels were not timed raises a ValueError saying so.

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> at_kernel_rate(ClusterSpec.preset("h100-sxm")).gpu.matmul_efficiency
        0.74

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    efficiency = kernel_efficiency_of(cluster.gpu.generation)
    if efficiency is None:
        timed = ", ".join(g.capitalize() for g in KERNEL_GEMM_EFFICIENCY)
        raise ValueError(f"no kernel rate for {cluster.gpu.name}: its generation's kernels were not timed (only "
                         f"{timed}); plan at the calibrated rate, or fit one of your runs (--measured-tokens-per-gpu)")
    return with_matmul_efficiency(cluster, efficiency)


def is_at_kernel_rate(cluster) -> bool:
    """Whether the cluster's GPUs run their matmuls at their generation's kernel rate (`at_kernel_rate`).

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> h100s = ClusterSpec.preset("h100-sxm")
        >>> is_at_kernel_rate(h100s), is_at_kernel_rate(at_kernel_rate(h100s))
        (False, True)
    """
    return cluster.gpu.matmul_efficiency == kernel_efficiency_of(cluster.gpu.generation)


def matmul_efficiency_for(model, cluster, strategy, step_seconds: float) -> float:
    """The matmul efficiency at which the planner's step time for `strategy` is `step_seconds` (bisection).

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> llama, h100s, plan = Transformer.preset("llama3-8b"), ClusterSpec.preset("h100-sxm"), Strategy(dp=8, zero=3)
        >>> planned = step_time(llama, h100s, plan).total            # at the calibrated 0.55
        >>> round(matmul_efficiency_for(llama, h100s, plan, planned), 3), \\
        ...     round(matmul_efficiency_for(llama, h100s, plan, 0.8 * planned), 2)
        (0.55, 0.83)

    (A step 20 % shorter asks for 50 % faster matmuls: the rest of the step does not speed up.) A step faster
    than the planner gives with every matmul at peak, or slower than at 5 % of it, raises a
    ValueError saying what to check.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    def seconds(efficiency: float) -> float:
        return step_time(model, with_matmul_efficiency(cluster, efficiency), strategy).total

    if step_seconds < seconds(HIGHEST):
        raise NoEfficiencyFits(f"the measured step ({step_seconds:.4g} s) is faster than the planner gives this plan "
                               f"with every matmul at peak ({seconds(HIGHEST):.4g} s): check that the flags describe "
                               f"the run (precision, recomputation, flash kernel, overlap options, the GPU preset)")
    if step_seconds > seconds(LOWEST):
        raise NoEfficiencyFits(f"the measured step ({step_seconds:.4g} s) is slower than the planner gives this plan "
                               f"with its matmuls at {LOWEST:.0%} of peak ({seconds(LOWEST):.4g} s): the run waits on "
                               f"something the planner does not count (input pipeline, host, stragglers); fix that "
                               f"first")
    low, high = LOWEST, HIGHEST
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if seconds(middle) > step_seconds else (low, middle)
    return (low + high) / 2

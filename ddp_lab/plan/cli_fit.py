"""The command line's fit to a run you measured: --measured-tokens-per-gpu and --matmul-efficiency; --kernel-rate.

`python -m ddp_lab plan` (cli.py) with a whole strategy and `--measured-tokens-per-gpu N` finds the matmul
efficiency at which the planner reproduces that run (ddp_lab.course.plan.fit_to_run) and prints the plan with it;
`--matmul-efficiency E` then plans or searches other layouts of the same stack with that efficiency. `--kernel-rate`
plans at the efficiency the GPU's kernels were timed at (fit_to_run.at_kernel_rate), for stacks that run near it.

Not used in a lesson: docs/planner.md, "Asking it"; the planner is introduced in
notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from ddp_lab.course.plan.fit_to_run import (HIGHEST, LOWEST, at_kernel_rate, matmul_efficiency_for,
                                            with_matmul_efficiency)
from ddp_lab.course.plan.generation_constants import GEMM_EFFICIENCY, KERNEL_GEMM_EFFICIENCY
from ddp_lab.plan import cli_flags    # a module: cli_flags imports this one for its flags

# The fastest bf16 GEMM timed on an H100 SXM for this planner, on the planner's scale (cuBLAS at k = 2048 ran at
# 0.734 of peak, which the planner's tile cost, efficiency.gemm_seconds, reads as an efficiency of 0.78;
# ddp_lab/plan/measured/h100-sxm-kernels.json, tests/test_plan_published.py checks it): a Hopper fit above it is
# not a matmul rate any timed kernel reached.
HOPPER_GEMM_CEILING = 0.78


def add_arguments(parser) -> None:
    """The two flags, in their own group of `python -m ddp_lab plan`'s help."""
    fit = parser.add_argument_group("fit to your own run (the planner's one GEMM constant)")
    fit.add_argument("--measured-tokens-per-gpu", dest="measured_tokens_per_gpu", type=float, metavar="N",
                     help="tokens per second per GPU you measured for the strategy given (torchtitan logs it as "
                          "tps): find the matmul efficiency that reproduces it, and plan with it")
    fit.add_argument("--matmul-efficiency", dest="matmul_efficiency", type=float, metavar="E",
                     help=f"the GPUs' matmuls at this share of peak instead of the calibrated one (a fitted value "
                          f"from --measured-tokens-per-gpu; {LOWEST:g} < E <= {HIGHEST:g})")
    fit.add_argument("--kernel-rate", dest="kernel_rate", action="store_true",
                     help=f"the matmuls at the rate the GPU's kernels were timed at alone (Hopper: "
                          f"{KERNEL_GEMM_EFFICIENCY['hopper']:g} of peak, not the calibrated "
                          f"{GEMM_EFFICIENCY['hopper']:g} of a PyTorch stack), for a stack that keeps the GPUs busy "
                          f"between kernels, such as NVIDIA's NeMo and Megatron recipes")


def check_flags(args, strategy_given: bool) -> None:
    """One line for a value out of range, or a fit without the strategy it measured, before anything runs."""
    if args.matmul_efficiency is not None and not LOWEST < args.matmul_efficiency <= HIGHEST:
        raise ValueError(f"--matmul-efficiency is a share of peak, {LOWEST:g} < E <= {HIGHEST:g}, "
                         f"got {args.matmul_efficiency:g}")
    if args.measured_tokens_per_gpu is None:
        return
    if args.kernel_rate:
        raise ValueError("--measured-tokens-per-gpu finds the matmul efficiency; --kernel-rate sets one: "
                         "give one of them")
    cli_flags.check_number("measured_tokens_per_gpu", args.measured_tokens_per_gpu)
    if args.matmul_efficiency is not None:
        raise ValueError("--measured-tokens-per-gpu finds the matmul efficiency; --matmul-efficiency sets one: "
                         "give one of them")
    if not strategy_given:
        raise ValueError("--measured-tokens-per-gpu fits the planner to the run you measured: give that run's "
                         "strategy (--dp, --tp, --pp, --zero, --micro-batch, --recompute, ...) as it ran")


def given_efficiency(cluster, args):
    """The cluster with --matmul-efficiency or --kernel-rate applied (unchanged without them)."""
    if args.kernel_rate and args.matmul_efficiency is not None:
        raise ValueError("--kernel-rate and --matmul-efficiency each set the matmul efficiency: give one of them")
    if args.kernel_rate:
        return at_kernel_rate(cluster)
    if args.matmul_efficiency is None:
        return cluster
    return with_matmul_efficiency(cluster, args.matmul_efficiency)


def fitted(model, cluster, strategy, args):
    """(the cluster with the fitted efficiency, a note saying what was fitted), or (cluster, "") without a fit."""
    if args.measured_tokens_per_gpu is None:
        return cluster, ""
    seconds = strategy.global_batch * model.seq_len / (args.measured_tokens_per_gpu * strategy.gpus)
    efficiency = matmul_efficiency_for(model, cluster, strategy, seconds)
    note = (f"fitted: matmuls at {efficiency:.3f} of peak reproduce {args.measured_tokens_per_gpu:,.0f} tokens/s per "
            f"GPU for this plan (the calibrated {cluster.gpu.name} value: {cluster.gpu.matmul_efficiency:.2f}); "
            f"plan other layouts of this model and stack with --matmul-efficiency {efficiency:.3f}\n")
    if cluster.gpu.generation == "hopper" and efficiency > HOPPER_GEMM_CEILING:
        note += (f"  {efficiency:.3f} is above {HOPPER_GEMM_CEILING:.2f}, the fastest GEMM timed on an H100: the fit "
                 f"also absorbs what the planner over-counts outside the matmuls for this run, so trust it most for "
                 f"this model in layouts close to the one measured\n")
    return with_matmul_efficiency(cluster, efficiency), note

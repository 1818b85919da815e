"""`python -m ddp_lab plan ...`: the planner from the command line.

    python -m ddp_lab plan --model llama3-8b --cluster h100-sxm --nodes 4 --top 5
    python -m ddp_lab plan --model llama3-8b --cluster h100-sxm --nodes 4 --tp 8 --dp 4 --zero 1
    python -m ddp_lab plan --params 7.5B --dp 64 --zero 3

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import argparse
import sys

from ddp_lab.plan.cluster_spec import PRESET_NAMES, ClusterSpec
from ddp_lab.plan.model import PRESETS, Transformer, parse_count
from ddp_lab.plan.report import breakdown, model_states_text, table
from ddp_lab.plan.search import evaluate, search
from ddp_lab.plan.strategy import FSDP_UNITS, PRECISIONS, RECOMPUTE, Strategy, divisors

STRATEGY_FLAGS = ("dp", "tp", "pp", "zero", "micro_batch", "grad_accum", "recompute", "sequence_parallel",
                  "fsdp_unit")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `plan` subcommand's flags (shared by ddp_lab/__main__.py)."""
    what = parser.add_argument_group("what to plan")
    what.add_argument("--model", help=f"a model preset: {', '.join(PRESETS)}")
    what.add_argument("--cluster", help=f"a cluster preset (GPU type): {', '.join(PRESET_NAMES)}")
    what.add_argument("--nodes", type=int, default=1, help="nodes of the cluster (default 1; GPUs per node from the preset)")
    what.add_argument("--params", help="short form: a parameter count such as 7.5B or 125M; prints per-GPU "
                                       "parameters, gradients and optimizer state (needs only --dp and --zero)")
    how = parser.add_argument_group("a strategy (omit to search all of them)")
    how.add_argument("--dp", type=int, help="data-parallel size")
    how.add_argument("--tp", type=int, help="tensor-parallel size (divides heads; at most GPUs per node)")
    how.add_argument("--pp", type=int, help="pipeline stages (divides layers)")
    how.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="ZeRO stage: 0 DDP, 1 optimizer, 2 + gradients, "
                                                                    "3 + parameters (FSDP)")
    how.add_argument("--micro-batch", dest="micro_batch", type=int, help="sequences per micro-batch (default 1)")
    how.add_argument("--grad-accum", dest="grad_accum", type=int,
                     help="micro-batches per step (= pipeline micro-batches; default: from --global-batch)")
    how.add_argument("--recompute", choices=RECOMPUTE, help="activation recomputation (default none)")
    how.add_argument("--sequence-parallel", dest="sequence_parallel", action="store_true", default=None,
                     help="Megatron sequence parallelism (needs tp > 1)")
    how.add_argument("--fsdp-unit", dest="fsdp_unit", choices=FSDP_UNITS,
                     help="ZeRO-3: gather one layer at a time (layer, the default, as FSDP is wrapped) or the whole model")
    how.add_argument("--precision", choices=PRECISIONS, default=None,
                     help="bf16/fp16 mixed-precision Adam (2+2+12 bytes/param) or fp32 Adam (4+4+8); "
                          "default bf16 (fp16 on a GPU without bf16, e.g. t4)")
    out = parser.add_argument_group("search")
    out.add_argument("--global-batch", dest="global_batch", type=int,
                     help="sequences per step (default: 4M tokens / seq_len)")
    out.add_argument("--top", type=int, default=10, help="plans to print (default 10)")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Carry out `python -m ddp_lab plan`; bad input exits 2 through parser.error with the valid choices."""
    try:
        if args.params is not None:
            return _short_form(args)
        if args.model is None or args.cluster is None:
            parser.error("give --model and --cluster (or --params COUNT for model-state memory only)")
        model = Transformer.preset(args.model)
        cluster = ClusterSpec.preset(args.cluster, nodes=args.nodes)
        args.precision = args.precision or ("bf16" if "bf16" in cluster.gpu.peak_flops else "fp16")
        given = {name: getattr(args, name) for name in STRATEGY_FLAGS if getattr(args, name) is not None}
        if given:
            print(breakdown(evaluate(model, cluster, _strategy(model, cluster, args, given))))
        else:
            print(table(search(model, cluster, top=args.top, global_batch=args.global_batch, precision=args.precision)))
        return 0
    except KeyError as error:
        parser.error(error.args[0])
    except ValueError as error:
        parser.error(str(error))


def _short_form(args) -> int:
    params = parse_count(args.params)
    strategy = Strategy(dp=args.dp or 1, zero=args.zero or 0, precision=args.precision or "bf16")
    print(model_states_text(params, strategy))
    return 0


def _strategy(model, cluster, args, given: dict) -> Strategy:
    """A Strategy from the flags given; dp fills the GPUs left by tp and pp, grad_accum the global batch."""
    tp, pp = given.get("tp", 1), given.get("pp", 1)
    if "dp" not in given:
        if cluster.gpus % (tp * pp):
            valid_tp = [d for d in divisors(cluster.gpus) if d <= cluster.gpus_per_node and not model.heads % d
                        and not model.kv_heads_ % d]
            raise ValueError(f"tp*pp = {tp * pp} does not divide the cluster's {cluster.gpus} GPUs: choose tp and pp "
                             f"whose product divides {cluster.gpus}; for {model.name} use tp in {valid_tp}")
        given["dp"] = cluster.gpus // (tp * pp)
    given.setdefault("micro_batch", 1)
    if "grad_accum" not in given:
        batch = args.global_batch or max(2**22 // model.seq_len, given["dp"] * given["micro_batch"])
        given["grad_accum"] = max(1, batch // (given["dp"] * given["micro_batch"]))
    given["sequence_parallel"] = bool(given.get("sequence_parallel", False))
    return Strategy(precision=args.precision, **given)


def main(argv: list[str] | None = None) -> int:
    """Entry point for `python -m ddp_lab.plan.cli` (the package's CLI calls `run`)."""
    parser = argparse.ArgumentParser(prog="python -m ddp_lab plan")
    add_arguments(parser)
    return run(parser.parse_args(argv), parser)


if __name__ == "__main__":
    sys.exit(main())

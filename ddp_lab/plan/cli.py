"""`python -m ddp_lab plan ...`: the planner from the command line.

    python -m ddp_lab plan --model llama3-8b --cluster h100-sxm --nodes 4 --top 5
    python -m ddp_lab plan --model llama3-8b --cluster h100-sxm --nodes 4 --tp 8 --dp 4 --zero 1
    python -m ddp_lab plan --params 7.5B --dp 64 --zero 3
    python -m ddp_lab plan --model mixtral-8x7b --cluster h100-sxm --nodes 8 --ep 8 --top 5
    python -m ddp_lab plan --model llama3-8b --cluster h100-sxm --nodes 4 --tp 8 --cp 4 --zero 1

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import argparse
import sys

from ddp_lab.course.plan import context_parallel
from ddp_lab.course.plan.cluster_spec import PRESET_NAMES, ClusterSpec
from ddp_lab.course.plan.model import PRESETS, Transformer, parse_count
from ddp_lab.plan.report import breakdown, fold_zero_stages, model_states_text, search_header, table
from ddp_lab.course.plan.search import candidates, default_global_batch, evaluate, search
from ddp_lab.course.plan.strategy import FSDP_UNITS, PRECISIONS, RECOMPUTE, Strategy, check, divisors

STRATEGY_FLAGS = ("dp", "tp", "pp", "zero", "micro_batch", "grad_accum", "recompute", "sequence_parallel",
                  "fsdp_unit")
POSITIVE_INTS = ("nodes", "dp", "tp", "pp", "micro_batch", "grad_accum", "global_batch", "top")
SHORT_FORM_FLAGS = ("params", "dp", "zero", "precision")     # all that --params reads
SPLIT_FLAGS = ("cp", "ep")     # a number (the plan's or every searched plan's) or "auto" (searched)


def parallel_size(text: str) -> int | str:
    """--cp/--ep's value: an int, or "auto" to search every size that fits (argparse type)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: give a positive int or auto") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `plan` subcommand's flags (shared by ddp_lab/__main__.py)."""
    what = parser.add_argument_group("what to plan")
    what.add_argument("--model", type=str.lower, choices=tuple(PRESETS), metavar="MODEL",
                      help=f"a model preset: {', '.join(PRESETS)}")
    what.add_argument("--cluster", type=str.lower, choices=PRESET_NAMES, metavar="CLUSTER",
                      help=f"a cluster preset (GPU type): {', '.join(PRESET_NAMES)}")
    what.add_argument("--nodes", type=int, help="nodes of the cluster (default 1; GPUs per node from the preset)")
    what.add_argument("--params", help="short form: a parameter count such as 7.5B or 125M; prints per-GPU "
                                       "parameters, gradients and optimizer state (needs only --dp and --zero)")
    how = parser.add_argument_group("a strategy (omit to search all of them)")
    how.add_argument("--dp", type=int, help="data-parallel size")
    how.add_argument("--tp", type=int, help="tensor-parallel size (divides heads and kv heads; at most GPUs per node "
                                            "unless --tp-across-nodes)")
    how.add_argument("--tp-across-nodes", dest="tp_across_nodes", action="store_true",
                     help="allow tp larger than a node, costed on the inter-node link (lesson 13 shows the price)")
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
    how.add_argument("--cp", type=parallel_size, metavar="N|auto",
                     help="context-parallel size: ranks that split each sequence (lesson 15; the sequence must "
                          "split into 2 x cp chunks). With no other strategy flag the search uses it for every plan; "
                          "auto searches it (default 1)")
    how.add_argument("--ep", type=parallel_size, metavar="N|auto",
                     help="expert-parallel size of a mixture-of-experts model (lesson 14): of the dp x cp ranks, how "
                          "many split the experts (divides the experts and dp x cp). With no other strategy flag the "
                          "search uses it for every plan; auto searches it (the default for a model with experts)")
    how.add_argument("--precision", choices=PRECISIONS, default=None,
                     help="bf16/fp16 mixed-precision Adam (2+2+12 bytes/param) or fp32 Adam (4+4+8); "
                          "default bf16 (fp16 on a GPU without bf16, e.g. t4)")
    out = parser.add_argument_group("search")
    out.add_argument("--global-batch", dest="global_batch", type=int,
                     help="sequences per step (default: 4M tokens / seq_len)")
    out.add_argument("--top", type=int, help="plans to print (default 10; rows that differ only in a ZeRO stage "
                                             "that changes nothing, at dp1, are one row)")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Carry out `python -m ddp_lab plan`; bad input exits 2 through parser.error: one line naming the flag."""
    try:
        _check_flags(args)
        if args.params is not None:
            return _short_form(args)
        model = Transformer.preset(args.model)
        cluster = ClusterSpec.preset(args.cluster, nodes=args.nodes or 1)
        args.precision = args.precision or ("bf16" if "bf16" in cluster.gpu.peak_flops else "fp16")
        given = {name: getattr(args, name) for name in STRATEGY_FLAGS if getattr(args, name) is not None}
        _check_splits(model, cluster, args, given)
        if given:
            given.update({name: getattr(args, name) for name in SPLIT_FLAGS if getattr(args, name) is not None})
            strategy, note = _strategy(model, cluster, args, given)
            print(note + breakdown(evaluate(model, cluster, strategy, args.tp_across_nodes)))
        else:
            print(_search_report(model, cluster, args))
        return 0
    except KeyError as error:
        parser.error(error.args[0])
    except ValueError as error:
        parser.error(str(error))


class OneLineErrors(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, `prog: error: message`, and exit status 2.

    argparse prints its whole usage block above an error; for `plan`'s sixteen flags that buries
    the one line that says what is wrong (issue 25). `--help` still prints the usage.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _flag(name: str) -> str:
    """The command-line spelling of an argparse dest: micro_batch -> --micro-batch."""
    return "--" + name.replace("_", "-")


def _given(args, names) -> list[str]:
    """The flags among `names` on the command line (a store_true flag left off is False, not given)."""
    return [_flag(name) for name in names if getattr(args, name) is not None and getattr(args, name) is not False]


def _check_flags(args) -> None:
    """Refuse values no plan can have and flags that contradict each other, before any planning."""
    for name in POSITIVE_INTS:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"{_flag(name)} must be a positive int, got {value}")
    if args.params is not None:
        extra = _given(args, [name for name in vars(args) if name not in SHORT_FORM_FLAGS + ("command",)])
        if extra:
            raise ValueError(f"--params prints model-state memory only and takes only --dp, --zero and --precision: "
                             f"drop {', '.join(extra)} (or drop --params to plan a --model on a --cluster)")
        return
    if args.model is None or args.cluster is None:
        raise ValueError("give --model and --cluster (or --params COUNT for model-state memory only)")
    strategy = _given(args, STRATEGY_FLAGS)
    if strategy and args.top is not None:
        raise ValueError(f"--top ranks the search's plans, but {', '.join(strategy)} chose one plan: "
                         f"drop --top, or the strategy flags to search")
    if args.sequence_parallel and (args.tp or 1) == 1:
        raise ValueError("--sequence-parallel needs --tp 2 or more: it splits activations across the "
                         "tensor-parallel group")
    if args.fsdp_unit is not None and args.zero != 3:
        raise ValueError("--fsdp-unit applies to ZeRO-3 only (it says what FSDP gathers at once): "
                         "add --zero 3 or drop --fsdp-unit")
    for name in SPLIT_FLAGS:
        value = getattr(args, name)
        if value is not None and value != "auto" and value < 1:
            raise ValueError(f"{_flag(name)} must be a positive int or auto, got {value}")
        if value == "auto" and strategy:
            raise ValueError(f"{_flag(name)} auto searches {name}, but {', '.join(strategy)} chose one plan: give "
                             f"{_flag(name)} a number, or drop the strategy flags to search")


def _check_splits(model, cluster, args, given: dict) -> None:
    """Refuse --ep/--cp values no plan of this model on this cluster can have, naming what would do."""
    ep, cp = args.ep, args.cp
    if ep not in (None, "auto", 1):
        if model.moe is None:
            with_experts = [name for name, preset in PRESETS.items() if preset.moe is not None]
            raise ValueError(f"--ep {ep} needs a mixture-of-experts model, but {model.name} is dense (no experts to "
                             f"split): drop --ep, or plan one of {', '.join(with_experts)}")
        if cluster.gpus % ep or model.moe.experts % ep:
            valid = [d for d in divisors(model.moe.experts) if not cluster.gpus % d]
            raise ValueError(f"--ep {ep} must divide the {model.moe.experts} experts of {model.name} and the "
                             f"cluster's {cluster.gpus} GPUs (expert-parallel ranks are carved out of the data-parallel "
                             f"ones): use --ep in {valid} or --ep auto")
    if cp not in (None, "auto", 1):
        if cluster.gpus % cp:
            raise ValueError(f"--cp {cp} does not divide the cluster's {cluster.gpus} GPUs: use --cp in "
                             f"{[d for d in divisors(cluster.gpus) if context_parallel.splits_sequence(model, d)]}")
        if not context_parallel.splits_sequence(model, cp):
            valid = [d for d in divisors(cluster.gpus) if context_parallel.splits_sequence(model, d)]
            raise ValueError(f"--cp {cp}: the sequence of {model.seq_len} tokens does not split into 2 x cp = {2 * cp} "
                             f"equal chunks (each context-parallel rank takes two, to balance the causal mask); "
                             f"use --cp in {valid}")


def _short_form(args) -> int:
    try:
        params = parse_count(args.params)
    except ValueError as error:
        raise ValueError(f"--params {error}") from error
    strategy = Strategy(dp=args.dp or 1, zero=args.zero or 0, precision=args.precision or "bf16")
    print(model_states_text(params, strategy))
    return 0


def _search_report(model, cluster, args) -> str:
    """The search's header (what was searched, how many plans fit), then its fastest distinct plans."""
    global_batch = args.global_batch or default_global_batch(model, cluster)
    options = {"precision": args.precision, "tp_across_nodes": args.tp_across_nodes, "cp": args.cp or 1,
               "ep": args.ep}
    tried = list(candidates(model, cluster, global_batch, **options))
    fitting = search(model, cluster, top=None, global_batch=global_batch, **options)
    rows = fold_zero_stages(fitting)[:args.top or 10]
    header = search_header(model, cluster, global_batch, args.precision, len(tried), len(fitting),
                           cp={s.cp for s in tried}, ep={s.ep for s in tried})
    return "\n".join([header, table([plan for plan, _ in rows], stages=[zero for _, zero in rows])])


def _strategy(model, cluster, args, given: dict) -> tuple[Strategy, str]:
    """A Strategy from the flags given, and a note for what the CLI chose itself.

    dp fills the GPUs that tp and pp leave; grad_accum makes the global batch: the one given
    (refused unless dp x micro-batch divides it), else the default rounded to the nearest
    multiple of dp x micro-batch, said in the note.
    """
    tp, pp, cp = given.get("tp", 1), given.get("pp", 1), given.get("cp", 1)
    if "dp" not in given:
        if cluster.gpus % (tp * pp * cp):
            raise ValueError(_no_dp_fills(model, cluster, tp, pp, args.tp_across_nodes, cp))
        given["dp"] = cluster.gpus // (tp * pp * cp)
    given.setdefault("micro_batch", 1)
    given["sequence_parallel"] = bool(given.get("sequence_parallel", False))
    strategy = Strategy(precision=args.precision, **{**given, "grad_accum": given.get("grad_accum", 1)})
    check(model, strategy, gpus=cluster.gpus, gpus_per_node=cluster.gpus_per_node,
          tp_across_nodes=args.tp_across_nodes)       # dp x tp x pp = GPUs before any batch arithmetic
    replica = strategy.dp * strategy.micro_batch      # sequences one micro-batch step takes over all replicas
    split = f"dp x micro-batch = {strategy.dp} x {strategy.micro_batch} = {replica}"
    if "grad_accum" in given:
        if args.global_batch not in (None, strategy.global_batch):
            raise ValueError(f"--global-batch {args.global_batch} disagrees with dp x micro-batch x --grad-accum "
                             f"= {strategy.dp} x {strategy.micro_batch} x {strategy.grad_accum} = "
                             f"{strategy.global_batch}: give --global-batch or --grad-accum, not both")
        return strategy, ""
    if args.global_batch is not None:
        if args.global_batch % replica:
            nearest = " or ".join(map(str, _nearest_multiples(args.global_batch, replica)))
            raise ValueError(f"--global-batch {args.global_batch} is not a multiple of {split}: "
                             f"use --global-batch {nearest}")
        return strategy.with_(grad_accum=args.global_batch // replica), ""
    default = default_global_batch(model, cluster)
    batch = min(_nearest_multiples(default, replica), key=lambda b: (abs(b - default), b))
    note = "" if batch == default else (f"note: global batch {batch}, the multiple of {split} nearest the default "
                                        f"{default} (4M tokens); --global-batch sets it\n")
    return strategy.with_(grad_accum=batch // replica), note


def _nearest_multiples(value: int, step: int) -> list[int]:
    """The positive multiples of `step` either side of `value` (just `value` if it is one)."""
    below = value // step * step
    return [value] if below == value else [m for m in (below, below + step) if m >= step]


def _no_dp_fills(model, cluster, tp: int, pp: int, tp_across_nodes: bool, cp: int = 1) -> str:
    """Why --tp x --pp (x --cp) leaves no whole data-parallel size, with the values that would."""
    max_tp = cluster.gpus if tp_across_nodes else cluster.gpus_per_node
    valid_tp = [d for d in divisors(cluster.gpus) if d <= max_tp and not model.heads % d
                and not model.kv_heads_ % d and not model.ffn_ % d]
    valid_pp = [d for d in divisors(cluster.gpus) if not model.layers % d]
    product, flags = f"--tp {tp} x --pp {pp}", "--tp and --pp"
    if cp > 1:
        product, flags = f"{product} x --cp {cp}", "--tp, --pp and --cp"
    return (f"{product} = {tp * pp * cp} does not divide the cluster's {cluster.gpus} GPUs: choose {flags} "
            f"whose product divides {cluster.gpus} (for {model.name}: --tp in {valid_tp}, --pp in "
            f"{valid_pp}), or change --nodes")


def main(argv: list[str] | None = None) -> int:
    """Entry point for `python -m ddp_lab.plan.cli` (the package's CLI calls `run`)."""
    parser = OneLineErrors(prog="python -m ddp_lab plan")
    add_arguments(parser)
    return run(parser.parse_args(argv), parser)


if __name__ == "__main__":
    sys.exit(main())

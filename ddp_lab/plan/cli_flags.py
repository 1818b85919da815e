"""The command line's flags for `python -m ddp_lab plan`: what each one is, the --help text with its examples, and
the checks a value gets before anything is planned (cli.py runs the plan).

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import argparse
import difflib
import math
import re

from ddp_lab.course.plan import multi_token
from ddp_lab.course.plan.attention_kernels import FLASH_KERNELS
from ddp_lab.course.plan.cluster_spec import PRESET_NAMES, ClusterSpec
from ddp_lab.course.plan.model import LARGEST, PRESETS, size_text
from ddp_lab.course.plan.overlap import OVERLAP_SLOWDOWN
from ddp_lab.course.plan.search import MEMORY_RESERVE
from ddp_lab.course.plan.strategy import ATTENTION, FSDP_UNITS, MOE_DISPATCHES, PRECISIONS, RECOMPUTE
from ddp_lab.plan import cli_fit
from ddp_lab.plan.cli_plot import PLOTTED, check_plot_file

STRATEGY_FLAGS = ("dp", "tp", "pp", "zero", "micro_batch", "grad_accum", "recompute", "sequence_parallel",
                  "fsdp_unit", "virtual_stages", "tp_comm_overlap", "overlap_param_gather", "first_stage_layers",
                  "last_stage_layers", "sync_every", "replicas", "sync_precision", "expert_tp", "dp_shard",
                  "ep_overlap")
# a framework's options that a search applies to every plan they fit (search.candidates); with other strategy flags
# they are that one plan's
SEARCH_WIDE = ("sequence_parallel", "tp_comm_overlap", "overlap_param_gather", "ep_overlap")
# the DiLoCo outer sync (lesson 16): alone, the search puts it on every plan (each dp rank a replica unless --replicas
# says); with other strategy flags it is that one plan's
OUTER_SYNC = ("sync_every", "replicas", "sync_precision")
SHAPE_FLAGS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len", "mtp_layers", "window",
               "windowed_layers")
NEEDED_SHAPE = ("layers", "hidden", "heads", "ffn", "vocab", "seq_len")   # without --model or --hf-config
POSITIVE_INTS = ("nodes", "gpus_per_node", "dp", "tp", "pp", "micro_batch", "grad_accum", "global_batch", "top",
                 "virtual_stages", "first_stage_layers", "last_stage_layers", "sync_every", "replicas", "region_nodes",
                 "expert_tp", *(name for name in SHAPE_FLAGS if name not in ("mtp_layers", "windowed_layers")))
SHORT_FORM_FLAGS = ("params", "dp", "zero", "precision", "fp32_grads")     # all that --params reads
SPLIT_FLAGS = ("cp", "ep")     # a number (the plan's or every searched plan's) or "auto" (searched)
# The library's fields that a flag here sets: its messages name them (`ep=8`, `drop overlap_param_gather`), and
# in_flags writes each as its flag. The model's shape fields are mapped only where the shape flags built the model.
STRATEGY_FIELDS = (*STRATEGY_FLAGS, *SPLIT_FLAGS, "precision", "attention", "flash_kernel", "fp32_grads",
                   "checkpoint_early_stop", "gpus_per_node", "region_nodes", "moe_dispatch", "expert_imbalance")
# The library's advice that names no field, with the flag that follows it (the library's words, the CLI's words).
ADVICE_FLAGS = (("train on shorter sequences", "train on shorter sequences (--seq-len)"),
                (" (or moe=None: a dense model)", ""),
                (" (tp_across_nodes=True; --tp-across-nodes on the command line)", " (--tp-across-nodes)"))
# 8 million GPUs, some 80x the largest clusters built; a search over a million nodes takes a second or two. The
# shape flags' limits are the model's (model.LARGEST).
LARGEST_NODES = 10**6
EXAMPLES = """examples:
  # the fastest plans for Llama 3 8B on 4 nodes of 8 H100s, at 4,096-token sequences
  python -m ddp_lab plan --model llama3-8b --seq-len 4096 --cluster h100-sxm --nodes 4 --top 5

  # a downloaded model's config.json; say the length you will train (else max_position_embeddings)
  python -m ddp_lab plan --hf-config Qwen2.5-7B/config.json --seq-len 8192 --cluster a100-80gb --nodes 2

  # one plan's memory and step time, part by part, drawn to a PNG
  python -m ddp_lab plan --model mixtral-8x7b --cluster h100-sxm --nodes 8 --tp 2 --ep 8 --zero 1 \\
      --recompute full --plot mixtral.png
"""


def parallel_size(text: str) -> int | str:
    """--cp/--ep's value: an int, or "auto" to search every size that fits (argparse type)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: give a positive int or auto") from None


def shard_size(text: str) -> int | str | None:
    """--dp-shard's value: an int, "auto" (the search's shard sizes of whole nodes) or "none" (no HSDP; argparse
    type). "none" is returned as the string, so that a flag given differs from a flag left off (None)."""
    if text.strip().lower() in ("auto", "none"):
        return text.strip().lower()
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: give a positive int, auto or none") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `plan` subcommand's flags (shared by ddp_lab/__main__.py)."""
    what = parser.add_argument_group("what to plan (a model: --model, --hf-config, or the shape flags)")
    what.add_argument("--model", type=str.lower, choices=tuple(PRESETS), metavar="MODEL",
                      help=f"a model preset: {', '.join(PRESETS)}")
    what.add_argument("--hf-config", dest="hf_config", metavar="PATH",
                      help="a Hugging Face config.json of the Llama, Mistral/Mixtral, Qwen2/Qwen3 (and -MoE), "
                           "DeepSeekMoE, DeepSeek-V2/V3 (latent attention), gpt-oss or GPT-2 family, with experts, "
                           "head_dim and sliding windows; keys the planner cannot express (another attention kind) "
                           "are refused. Planned at its "
                           "max_position_embeddings unless --seq-len says the length you will train")
    shape = parser.add_argument_group("model shape: change --model's or --hf-config's, or give all but --kv-heads "
                                      "for a Llama-style model of your own (SwiGLU, RMSNorm, RoPE, no biases, untied)")
    shape.add_argument("--layers", type=int, help="transformer layers")
    shape.add_argument("--hidden", type=int, help="hidden size (divisible by --heads)")
    shape.add_argument("--heads", type=int, help="attention heads")
    shape.add_argument("--kv-heads", dest="kv_heads", type=int,
                       help="key/value heads (grouped-query attention; divides --heads; default --heads)")
    shape.add_argument("--ffn", type=int, help="FFN inner size")
    shape.add_argument("--vocab", type=int, help="vocabulary size")
    shape.add_argument("--seq-len", dest="seq_len", type=int, help="tokens per training sequence")
    shape.add_argument("--mtp-layers", dest="mtp_layers", type=int, metavar="N",
                       help="multi-token-prediction modules after the decoder (DeepSeek-V3's config: 1; 0 plans "
                            "training without them)")
    shape.add_argument("--window", type=int, metavar="W",
                       help="sliding-window attention: the tokens a windowed layer attends to (gpt-oss: 128)")
    shape.add_argument("--windowed-layers", dest="windowed_layers", type=int, metavar="N",
                       help="how many layers attend to --window (default every layer; gpt-oss-20b: 12 of 24)")
    where = parser.add_argument_group("where")
    where.add_argument("--cluster", type=str.lower, choices=PRESET_NAMES, metavar="CLUSTER",
                       help="a cluster preset (GPU type, GPUs per node): " + ", ".join(
                           f"{name} ({ClusterSpec.preset(name).gpus_per_node})" for name in PRESET_NAMES))
    where.add_argument("--nodes", type=int, help="nodes of the cluster (default 1; GPUs per node from the preset)")
    where.add_argument("--gpus-per-node", dest="gpus_per_node", type=int, metavar="N",
                       help="GPUs the job uses in each node (default all the preset's): --cluster gb200 --nodes 2 "
                            "--gpus-per-node 64 is 128 GPUs on two NVL72 racks, as NVIDIA's launcher places them")
    where.add_argument("--node-link-gbps", dest="node_link_gbps", type=float, metavar="GBPS",
                       help="each GPU's network link to other nodes, Gb/s each way (NCCL drives one NIC per GPU; "
                            "default the preset's: " + ", ".join(
                                f"{name} {ClusterSpec.preset(name).inter_node_bandwidth * 8 / 1e9:g}"
                                for name in PRESET_NAMES) + "; at least 0.001). A cloud VM whose 8 GPUs share 4 NICs "
                            "of 200 Gb/s has 100")
    where.add_argument("--memory-reserve", dest="memory_reserve", type=float,
                       help=f"share of each GPU's memory a plan may not use, kept for the CUDA context, NCCL and "
                            f"fragmentation (default {MEMORY_RESERVE:g}; 0 <= value < 1)")
    where.add_argument("--overlap-slowdown", dest="overlap_slowdown", type=float,
                       help=f"how much slower compute runs beside the DP/CP communication it hides (default "
                            f"{OVERLAP_SLOWDOWN:g}, the average arXiv:2507.03114 measured; 0: hiding is free; "
                            f"0 <= value < 1)")
    where.add_argument("--region-nodes", dest="region_nodes", type=int, metavar="N",
                       help="a cross-region link: the nodes form regions of N consecutive nodes (data centres)")
    where.add_argument("--cross-region-gbps", dest="cross_region_gbps", type=float, metavar="GBPS",
                       help="the link between regions, Gb/s each way per region (default 100; at least 0.001)")
    where.add_argument("--cross-region-latency-ms", dest="cross_region_latency_ms", type=float, metavar="MS",
                       help="its latency in ms (default 50)")
    where.add_argument("--params", help="short form: a parameter count such as 7.5B or 125M; prints per-GPU "
                                        "parameters, gradients and optimizer state (needs only --dp and --zero)")
    how = parser.add_argument_group("a strategy (omit to search all of them)")
    how.add_argument("--dp", type=int, help="data-parallel size")
    how.add_argument("--tp", type=int, help="tensor-parallel size (divides heads and kv heads, and the GPUs of a "
                                            "node unless --tp-across-nodes)")
    how.add_argument("--tp-across-nodes", dest="tp_across_nodes", action="store_true",
                     help="allow a tp that does not divide a node (larger, or groups that cross a node's edge), "
                          "costed on the inter-node link (lesson 13 shows the price)")
    how.add_argument("--pp", type=int, help="pipeline stages (divides layers)")
    how.add_argument("--virtual-stages", dest="virtual_stages", type=int,
                     help="interleaved 1F1B: model chunks per pipeline GPU (needs --pp 2 or more; pp x this divides "
                          "the layers). In a search: also try interleaving with this many (default 2)")
    how.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="ZeRO stage: 0 DDP, 1 optimizer, 2 + gradients, "
                                                                    "3 + parameters (FSDP)")
    how.add_argument("--micro-batch", dest="micro_batch", type=int, help="sequences per micro-batch (default 1)")
    how.add_argument("--grad-accum", dest="grad_accum", type=int,
                     help="micro-batches per step (= pipeline micro-batches; default: from --global-batch)")
    how.add_argument("--recompute", choices=RECOMPUTE, help="activation recomputation (default none; selective "
                                                           "changes nothing with flash attention; op: torchtitan's "
                                                           "per-op policy, every second matmul of a dense layer)")
    how.add_argument("--checkpoint-early-stop", dest="checkpoint_early_stop", action="store_true",
                     help="full recomputation as PyTorch >= 2.1's non-reentrant checkpoint runs it "
                          "(torch.utils.checkpoint(use_reentrant=False), FSDP's checkpoint_wrapper, torchtitan): it "
                          "stops before the FFN's down projection, unless dropout or experts follow it. Default: "
                          "the whole layer again, as Megatron-LM, DeepSpeed and use_reentrant=True do. Needs "
                          "--recompute full, or in a search applies to the plans that recompute fully")
    how.add_argument("--sequence-parallel", dest="sequence_parallel", action="store_true", default=None,
                     help="Megatron sequence parallelism (needs tp > 1; in a search, every plan with tp > 1 uses "
                          "it)")
    how.add_argument("--fsdp-unit", dest="fsdp_unit", choices=FSDP_UNITS,
                     help="ZeRO-3: gather one layer at a time (layer, the default, as FSDP is wrapped) or the whole "
                          "model")
    how.add_argument("--attention", choices=ATTENTION,
                     help="flash (fused, the default: no s x s scores kept) or eager (Korthikanti et al.'s count)")
    how.add_argument("--flash-kernel", dest="flash_kernel", choices=FLASH_KERNELS,
                     help="the kernel flash attention runs: fa2 (FlashAttention-2, the default: PyTorch's SDPA up "
                          "to 2.8) or cudnn (cuDNN's: Transformer Engine on Hopper and newer, so NeMo and Megatron; "
                          "PyTorch's SDPA on H100/H200/B200 in later builds whose cuDNN qualifies, docs/planner.md; "
                          "about FlashAttention-3's speed)")
    how.add_argument("--cp", type=parallel_size, metavar="N|auto",
                     help="context-parallel size: ranks that split each sequence (lesson 15; the sequence must "
                          "split into 2 x cp chunks). With no other strategy flag the search uses it for every plan; "
                          "auto searches it (default 1; at 32K tokens or more a search without it says when auto "
                          "finds a plan faster than the best beyond the planner's error)")
    how.add_argument("--ep", type=parallel_size, metavar="N|auto",
                     help="expert-parallel size of a mixture-of-experts model (lesson 14): of the dp x cp ranks, how "
                          "many split the experts (divides the experts and dp x cp). With no other strategy flag the "
                          "search uses it for every plan; auto searches it (the default for a model with experts)")
    how.add_argument("--moe-dispatch", dest="moe_dispatch", choices=MOE_DISPATCHES,
                     help="how a mixture-of-experts model's tokens reach their experts: all-to-all (NCCL's, the "
                          "default: one copy per expert crosses the network, and a rank holding several experts "
                          "sorts the rows it received by expert) or per-node (DeepEP, HybridEP: one copy per node, "
                          "forwarded over NVLink there, permuted on arrival); every plan's")
    how.add_argument("--expert-tp", dest="expert_tp", type=int, metavar="N",
                     help="the routed experts' own tensor-parallel size, dividing --tp (Megatron-Core's "
                          "--expert-tensor-parallel-size; default --tp): --expert-tp 1 leaves tp x cp x dp ranks for "
                          "--ep; a search tries a MoE model's plans with tp > 1 at both")
    how.add_argument("--dp-shard", dest="dp_shard", type=shard_size, metavar="N|auto|none",
                     help="hybrid sharding (HSDP): ZeRO-3 inside groups of N data-parallel ranks, the groups "
                          "replicas that all-reduce their gradient shards (FSDP2 on a 2-D mesh, torchtitan's "
                          "data_parallel_shard_degree, MaxText's ici_fsdp_parallelism under dcn_data_parallelism). "
                          "With --zero 3 and a dp that N divides: that plan's. Alone: what the search tries beside "
                          "each ZeRO-3 plan; auto (the default) shard groups of 1, 2, 4, 8 or 16 whole nodes, none "
                          "no HSDP")
    how.add_argument("--precision", choices=PRECISIONS, default=None,
                     help="bf16/fp16 mixed-precision Adam (2+2+12 bytes/param) or fp32 Adam (4+4+8); fp8: the "
                          "linear GEMMs in FP8 with one scale per tensor, mxfp8: one per 32 values (Blackwell only), "
                          "states as bf16; default bf16 (fp16 on a GPU without bf16, e.g. t4)")
    how.add_argument("--fp32-grads", dest="fp32_grads", action="store_true",
                     help="mixed precision with fp32 gradient accumulation and reduction (Megatron-LM, Llama 3): "
                          "2+4+12 bytes/param")
    how.add_argument("--tp-comm-overlap", dest="tp_comm_overlap", action="store_true", default=None,
                     help="run sequence parallelism's all-gathers/reduce-scatters in chunks beside the GEMMs "
                          "(Megatron-LM's --tp-comm-overlap; needs --sequence-parallel; in a search, on every plan "
                          "with tp > 1 and sequence parallelism)")
    how.add_argument("--ep-overlap", dest="ep_overlap", action="store_true", default=None,
                     help="run one micro-batch's MoE all-to-alls beside another's compute (Megatron-Core's "
                          "--overlap-moe-expert-parallel-comm, combined 1F1B; needs --ep > 1, and --virtual-stages "
                          "where --pp > 1; not with --recompute full; in a search, on every plan it fits)")
    how.add_argument("--expert-imbalance", dest="expert_imbalance", type=float, metavar="X",
                     help="uneven routing of a mixture-of-experts model: the busiest expert-parallel rank gets X "
                          "times a balanced share of the tokens (default 1, balanced). It slows that rank's experts "
                          "and all-to-alls and grows their activations, on plans with --ep > 1; with every expert on "
                          "each GPU it changes nothing. From a run: each expert-parallel rank's tokens (its experts' "
                          "summed), the largest over the mean")
    how.add_argument("--overlap-param-gather", dest="overlap_param_gather", action="store_true", default=None,
                     help="ZeRO-1/2: gather the updated weights beside the next forward (Megatron-LM's "
                          "--overlap-param-gather) instead of after the optimizer; in a search, on every plan with "
                          "ZeRO 1 or 2")
    how.add_argument("--first-stage-layers", dest="first_stage_layers", type=int, metavar="N",
                     help="uneven pipeline: layers of the first stage (the middle stages share the rest; with "
                          "--pp 2 and no interleaving, the last stage holds it; interleaved: of the first virtual "
                          "stage)")
    how.add_argument("--last-stage-layers", dest="last_stage_layers", type=int, metavar="N",
                     help="uneven pipeline: layers of the last stage (Llama 3 405B: 126 layers on 16 stages, 7 and "
                          "7; with --pp 2 and no interleaving, the first stage holds the rest)")
    how.add_argument("--sync-every", dest="sync_every", type=int, metavar="H",
                     help="DiLoCo-style outer sync: replicas exchange pseudo-gradients once every H steps (with "
                          "--replicas R, default every dp rank a replica)")
    how.add_argument("--replicas", type=int, metavar="R", help="DiLoCo replicas (divides dp); see --sync-every")
    how.add_argument("--sync-precision", dest="sync_precision", choices=("fp32", "bf16", "int8"),
                     help="the pseudo-gradient on the wire at each outer sync (default fp32; INTELLECT-1: int8)")
    cli_fit.add_arguments(parser)
    out = parser.add_argument_group("search")
    out.add_argument("--global-batch", dest="global_batch", type=int,
                     help="sequences per step (default: the multiple of the GPU count nearest 4M tokens / seq_len, "
                          "raised to one sequence per GPU where that is more)")
    out.add_argument("--top", type=int, help="plans to print (default 10; rows that differ only in a ZeRO stage "
                                             "that changes nothing, at dp1, are one row)")
    out.add_argument("--plot", metavar="FILE.png",
                     help=f"also draw the memory and step-time breakdown as a PNG: the given plan, or the best "
                          f"with the next rows printed (at most {PLOTTED})")
    parser.epilog = EXAMPLES
    parser.formatter_class = ExamplesAsWritten




class ExamplesAsWritten(argparse.HelpFormatter):
    """argparse's help layout, except that a text with line breaks of its own (the examples) is printed as written."""

    def _fill_text(self, text, width, indent):
        return text if "\n" in text else super()._fill_text(text, width, indent)


class OneLineErrors(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, `prog: error: message`, and exit status 2.

    argparse prints its whole usage block above an error; for `plan`'s many flags that buries
    the one line that says what is wrong. `--help` still prints the usage. A flag is read only as written: argparse's
    abbreviations would take `--gpu a100` for `--gpus-per-node`.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_args(self, args=None, namespace=None):
        """argparse's parse_args, with unknown arguments refused by `refuse_unknown`."""
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            self.refuse_unknown(unknown)
        return parsed

    def refuse_unknown(self, unknown: list[str]):
        """Exit (status 2) with one line naming the arguments this parser does not know, the flag one is close to
        (`--micro-bach` -> `--micro-batch`) and where the flags are listed."""
        flags = sorted(set(re.findall(r"--[a-z][\w-]*", self.format_usage())))
        close = [match for word in unknown if word.startswith("--")
                 for match in difflib.get_close_matches(word.split("=")[0], flags, n=1, cutoff=0.8)]
        guess = f"; did you mean {', '.join(close)}?" if close else ""
        self.error(f"unrecognized arguments: {' '.join(unknown)}{guess} ({self.prog} --help lists its flags)")


def flag_name(name: str) -> str:
    """The command-line spelling of an argparse dest: micro_batch -> --micro-batch."""
    return "--" + name.replace("_", "-")


# The slowest link a plan is made for, in Gb/s: 1 Mb/s, a thousandth of a slow office link. Below it a value is
# taken for a slip of the unit (a step time of 10^300 s helps no one).
SLOWEST_LINK_GBPS = 1e-3
# the slowest link between regions: a one-way latency of 10 s, some 40 times a geostationary satellite hop's
SLOWEST_LATENCY_MS = 1e4


def check_number(name: str, value: float | None, zero_allowed: bool = False, at_least: float | None = None,
                 at_most: float | None = None, unit: str = "Gb/s") -> None:
    """Refuse a float flag's value that is not a finite positive number (>= 0 where zero is allowed; between at_least
    and at_most where they are given, whose message asks whether the flag's `unit` was meant): argparse's float()
    reads nan and inf, which no count, rate or time is."""
    if value is not None and (not math.isfinite(value) or value < 0 or (value == 0 and not zero_allowed)):
        wanted = "a finite number >= 0" if zero_allowed else "a positive finite number"
        raise ValueError(f"{flag_name(name)} must be {wanted}, got {value:g}")
    for bound, out in ((at_least, "at least"), (at_most, "at most")):
        if value is not None and bound is not None and (value < bound if out == "at least" else value > bound):
            raise ValueError(f"{flag_name(name)} must be {out} {bound:g}, got {value:g}: is the unit {unit}?")


def in_flags(message: str, args, fields=STRATEGY_FIELDS) -> str:
    """A library message with the fields it names written as the flags that set them (one rule, one place: the
    library says what is wrong, the command line only renames).

    `ep=8` -> `--ep 8`, `tp_comm_overlap=True` -> `--tp-comm-overlap`, `sync_precision='int8'` -> `--sync-precision
    int8`; a field named alone: `drop overlap_param_gather` -> `drop --overlap-param-gather` for a name with an
    underscore, `use ep in [...]` -> `use --ep in [...]` for a short one after use, set or smaller (short names alone
    are words of the prose too: replicas, precision). A field the command line did not give, named beside one it did
    (`sync_every=1 (sync_precision='int8')`, `drop sync_every and sync_precision`), is left out: the flag given is
    the one to change.
    """
    names = "|".join(sorted(fields, key=len, reverse=True))

    def flag(match: re.Match) -> str:
        name, value = match["name"], match["value"]
        if value is None:
            advice = match.string[:match.start()].endswith(("use ", "set ", "smaller "))
            return flag_name(name) if "_" in name or advice else name
        value = value.strip("'")
        return {"True": flag_name(name), "False": f"no {flag_name(name)}"}.get(value, f"{flag_name(name)} {value}")

    text = re.sub(rf"(?<![\w.-])(?P<name>{names})(?:=(?P<value>'[^']*'|[\w.]+))?(?![\w-])", flag,
                  message)
    for library, cli in ADVICE_FLAGS:
        text = text.replace(library, cli)
    given = {flag_name(name) for name in fields if getattr(args, name, None) not in (None, False)}
    flag_given = r"--[a-z][\w-]*"
    text = re.sub(rf"(?P<one>(?P<first>{flag_given})(?: [\w.]+)?) \((?P<two>(?P<second>{flag_given})(?: [\w.]+)?)\)",
                  lambda m: m[0] if (m["first"] in given) == (m["second"] in given)
                  else m["one"] if m["first"] in given else m["two"], text)
    text = re.sub(rf"drop (?P<one>{flag_given}) and (?P<two>{flag_given})",
                  lambda m: "drop " + (" and ".join(f for f in (m["one"], m["two"]) if f in given) or m[0][5:]), text)
    return re.sub(rf"(?P<flag>{flag_given}(?:/{flag_given})*) \((?P=flag)\)", r"\g<flag>", text)


def given_flags(args, names) -> list[str]:
    """The flags among `names` on the command line (a store_true flag left off is False, not given)."""
    return [flag_name(name) for name in names if getattr(args, name) is not None and getattr(args, name) is not False]


def one_plan_flags(args) -> list[str]:
    """The strategy flags given that choose one plan (none: a search; --virtual-stages, --dp-shard, SEARCH_WIDE's and
    OUTER_SYNC's alone are the search's, on every plan they fit)."""
    return given_flags(args, [name for name in STRATEGY_FLAGS
                              if name not in ("virtual_stages", "dp_shard", *SEARCH_WIDE, *OUTER_SYNC)])


def check_flags(args) -> None:
    """Refuse values no plan can have and flags that contradict each other, before any planning."""
    for name in POSITIVE_INTS:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"{flag_name(name)} must be a positive int, got {value}")
    if args.mtp_layers is not None and args.mtp_layers < 0:
        raise ValueError(f"--mtp-layers counts modules: 0 (none) or more, got {args.mtp_layers}")
    if args.windowed_layers is not None and args.windowed_layers < 0:
        raise ValueError(f"--windowed-layers counts layers: 0 (none) or more, got {args.windowed_layers}")
    for name, largest in (*LARGEST.items(), ("nodes", LARGEST_NODES), ("mtp_layers", multi_token.LARGEST)):
        value = getattr(args, name)
        if value is not None and value > largest:
            raise ValueError(f"{flag_name(name)} {size_text(value)} is more than the planner models: "
                             f"at most {largest:,}")
    if args.memory_reserve is not None and not 0 <= args.memory_reserve < 1:
        raise ValueError(f"--memory-reserve is the share of GPU memory kept free: a fraction in [0, 1) such as 0.1, "
                         f"got {args.memory_reserve:g}")
    if args.overlap_slowdown is not None and not 0 <= args.overlap_slowdown < 1:
        raise ValueError(f"--overlap-slowdown is how much slower compute runs beside the communication it hides: a "
                         f"fraction in [0, 1) such as {OVERLAP_SLOWDOWN:g}, got {args.overlap_slowdown:g}")
    if args.checkpoint_early_stop and args.recompute not in (None, "full"):
        raise ValueError(f"--checkpoint-early-stop describes how full recomputation runs; --recompute {args.recompute} "
                         f"recomputes no whole layer: use --recompute full or drop --checkpoint-early-stop")
    if args.params is not None:
        extra = given_flags(args, [name for name in vars(args) if name not in SHORT_FORM_FLAGS + ("command",)])
        if extra:
            raise ValueError(f"--params prints model-state memory only and takes only --dp, --zero, --precision and "
                             f"--fp32-grads: drop {', '.join(extra)} (or drop --params to plan a model on a --cluster)")
        if args.fp32_grads and args.precision == "fp32":
            raise ValueError("--fp32-grads keeps fp32 gradients under bf16/fp16 mixed precision; with --precision fp32 "
                             "they are fp32 already: drop one of them")
        return
    if args.plot is not None:
        check_plot_file(args.plot)
    if args.model is not None and args.hf_config is not None:
        raise ValueError("--model and --hf-config both name a model: give one (shape flags such as --seq-len "
                         "change either)")
    if args.model is None and args.hf_config is None:
        missing = [flag_name(name) for name in NEEDED_SHAPE if getattr(args, name) is None]
        if missing and len(missing) < len(NEEDED_SHAPE):
            raise ValueError(f"a model of your own needs {', '.join(flag_name(n) for n in NEEDED_SHAPE)} (--kv-heads "
                             f"optional): add {', '.join(missing)}, or start from --model or --hf-config")
        if missing:
            raise ValueError("give a model: --model (a preset), --hf-config (a config.json) or its shape (--layers, "
                             "--hidden, --heads, --ffn, --vocab, --seq-len); and --cluster "
                             "(or --params COUNT for model-state memory only)")
    if args.cluster is None:
        raise ValueError(f"give --cluster, the GPUs to plan for: one of {', '.join(PRESET_NAMES)}")
    strategy = one_plan_flags(args)
    if strategy and args.top is not None:
        raise ValueError(f"--top ranks the search's plans, but {', '.join(strategy)} chose one plan: "
                         f"drop --top, or the strategy flags to search")
    if args.sequence_parallel and strategy and (args.tp or 1) == 1:
        raise ValueError("--sequence-parallel needs --tp 2 or more: it splits activations across the "
                         "tensor-parallel group")
    if args.fsdp_unit is not None and args.zero != 3:
        raise ValueError("--fsdp-unit applies to ZeRO-3 only (it says what FSDP gathers at once): "
                         "add --zero 3 or drop --fsdp-unit")
    if args.virtual_stages is not None and strategy and (args.pp or 1) == 1:
        raise ValueError("--virtual-stages needs --pp 2 or more: it splits each pipeline GPU's layers into "
                         "interleaved chunks")
    if isinstance(args.dp_shard, int) and args.dp_shard < 1:
        raise ValueError(f"--dp-shard must be a positive int, auto or none, got {args.dp_shard}")
    if args.dp_shard == "auto" and strategy:
        raise ValueError(f"--dp-shard auto searches shard-group sizes, but {', '.join(strategy)} chose one plan: "
                         f"give --dp-shard a number, or drop the strategy flags to search")
    for name in SPLIT_FLAGS:
        value = getattr(args, name)
        if value is not None and value != "auto" and value < 1:
            raise ValueError(f"{flag_name(name)} must be a positive int or auto, got {value}")
        if value == "auto" and strategy:
            raise ValueError(f"{flag_name(name)} auto searches {name}, but {', '.join(strategy)} chose one plan: give "
                             f"{flag_name(name)} a number, or drop the strategy flags to search")

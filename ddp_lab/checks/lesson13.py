"""Checks for the exercises of notebooks/13-plan-your-training-run.ipynb.

    ddp_lab.checks.lesson13.check_model_states_gb(per_gpu_model_states_gb)
    ddp_lab.checks.lesson13.check_choose_plan(choose_plan)

Both answers are pure Python, so the checks run in the notebook's process (no ranks): the
first compares the learner's formula with the planner's `model_state_bytes` on several ZeRO
stages, data-parallel sizes and precisions; the second evaluates the learner's strategy with
the planner (`ddp_lab.plan.evaluate`) and compares its predicted throughput with the best
plan `ddp_lab.plan.search` finds without hybrid sharding (`dp_shard=None`). Every failure says
what differs, and names the mistake where the answer's results show which it is; an answer that
calls the planner's own answer (`model_state_bytes`, `search`, `candidates`) is refused.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
import math
import numbers
import re

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import answer_raised, answer_value, ensure_written, two_numbers
from ddp_lab.course.plan.search import candidates
from ddp_lab.plan import ClusterSpec, Strategy, Transformer, breakdown, evaluate, model_state_bytes, search

GB, GiB = 10**9, 2**30
PARTS = ("params", "grads", "optimizer")   # the names of ddp_lab.sharding.state_bytes, as in lesson 09
FIRST_SHARDED = {"optimizer": 1, "grads": 2, "params": 3}   # the ZeRO stage that starts sharding each
WORDS = {"params": "parameters", "grads": "gradients", "optimizer": "optimizer state"}
# The planner's own answers to the exercises (an answer that calls one is not checked)
MODEL_STATES_ANSWERS = (model_state_bytes,)
CHOOSE_PLAN_ANSWERS = (search, candidates)


# --- exercise 1: model states per GPU, in GB ------------------------------------------------------

# (params, dp, zero, precision): the ZeRO paper's example first, stage mistakes before precision ones;
# every params divides by dp, so no shard is padded
MODEL_STATE_CASES = (
    tuple((7_500_000_000, 64, stage, "bf16") for stage in range(4))
    + tuple((8_030_261_248, 8, stage, "bf16") for stage in (1, 2, 3))
    + tuple((7_500_000_000, 64, stage, "fp32") for stage in range(4))
    + ((1_300_000_000, 1, 3, "fp32"), (70_553_706_496, 256, 3, "bf16"))
)


def check_model_states_gb(per_gpu_model_states_gb) -> None:
    """Check `per_gpu_model_states_gb(params, dp, zero, precision)` -> {part: GB} against the planner.

    The answer returns {"params": ..., "grads": ..., "optimizer": ...} in GB (10^9 bytes)
    for one GPU, equal to `ddp_lab.plan.model_state_bytes(params, Strategy(dp=dp, zero=zero,
    precision=precision))` for ZeRO stages 0-3, several dp sizes, "bf16" and "fp32".

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    ensure_written(per_gpu_model_states_gb)
    name = getattr(per_gpu_model_states_gb, "__name__", "per_gpu_model_states_gb")
    for params, dp, zero, precision in MODEL_STATE_CASES:
        case = f"{name}({params:_}, dp={dp}, zero={zero}, precision={precision!r})"
        got = answer_value(per_gpu_model_states_gb, (params, dp, zero, precision), name, f"computing {case}",
                           MODEL_STATES_ANSWERS)
        want_bytes = model_state_bytes(params, Strategy(dp=dp, zero=zero, precision=precision))
        want = {part: getattr(want_bytes, part) / GB for part in PARTS}
        if not isinstance(got, dict) or set(got) != set(PARTS):
            raise CheckFailed(f"{case} returned {str(got)[:100]}; expected a dict with the keys {list(PARTS)} "
                              f"(GB on one GPU), e.g. {_show(want)}.")
        in_bits = all(isinstance(got[part], (numbers.Real, decimal.Decimal)) and not isinstance(got[part], bool) and
                      math.isclose(float(got[part]), 8 * want[part], rel_tol=1e-6) for part in PARTS
                      if zero < FIRST_SHARDED[part])   # every part kept whole is 8 times its bytes
        rounded = _rounded_to(got, want)
        for part in PARTS:
            value = got[part]
            # Decimal is no numbers.Real (it refuses float arithmetic) but is a number of GB all the same
            if not isinstance(value, (numbers.Real, decimal.Decimal)) or isinstance(value, bool):
                raise CheckFailed(f"{case}[{part!r}] is {type(value).__name__} {value!r}; expected a number of GB.")
            value = float(value)   # a Fraction, a Decimal or a numpy float is a number of GB too
            if not math.isclose(value, want[part], rel_tol=1e-9):
                hint = _model_state_hint(part, value, params, dp, zero, precision, in_bits, rounded)
                shown, expected = two_numbers(value, want[part])
                raise CheckFailed(f"{case}[{part!r}] is {shown} GB, expected {expected} GB.\nHint: {hint}")
    passed(f"{name} equals the planner's model_state_bytes for ZeRO 0-3, dp 1-256, bf16 and fp32 "
           f"({len(MODEL_STATE_CASES)} cases)")


def _show(values: dict) -> str:
    return "{" + ", ".join(f"{k!r}: {v:.4g}" for k, v in values.items()) + "}"


def _rounded_to(got: dict, want: dict) -> int | None:
    """The decimals (0: whole GB) that one rounding of the right values gives every part of `got` at: 0 where each
    part is a whole number, the right value floored (//, int()) or rounded (round(x)), d where each is round(right,
    d), for d from 1 to 9; None where no one rounding explains all three parts (a part that is 0, or wrong, while
    the others are right is no rounding)."""
    values = {}
    for part in PARTS:
        value = got[part]
        if not isinstance(value, (numbers.Real, decimal.Decimal)) or isinstance(value, bool):
            return None
        values[part] = float(value)
    if all(values[part].is_integer() and values[part] in (math.floor(want[part]), round(want[part]))
           for part in PARTS):
        return 0
    return next((digits for digits in range(1, 10)
                 if all(values[part] == round(want[part], digits) for part in PARTS)), None)


def _model_state_hint(part: str, got: float, params: int, dp: int, zero: int, precision: str,
                      in_bits: bool = False, rounded: int | None = None) -> str:
    """The hint for one wrong part; `in_bits`: every part the stage keeps whole came out 8 times its GB; `rounded`:
    the decimals every part of the answer is the right value rounded to (`_rounded_to`), or None."""
    per_param = dict(zip(PARTS, (2, 2, 12) if precision != "fp32" else (4, 4, 8)))[part]
    sharded = zero >= FIRST_SHARDED[part]
    full = params * per_param / GB
    want = full / dp if sharded else full

    def near(value: float) -> bool:
        return math.isclose(got, value, rel_tol=1e-6)

    if rounded == 0 and not near(want):   # integer division (//), int() or round(x), on every part
        return (f"that is the right value cut to whole GB ({want!r} GB), as integer division (//), int() or round() "
                "do: divide with / and return the unrounded float.")
    if rounded:   # round(x, 2) on every part: the check compares to 1e-9, not to what a display shows
        return (f"that is the right value rounded to {rounded} decimal{'s' * (rounded > 1)} ({want!r} GB): return "
                "the unrounded float (round only when printing, e.g. f'{gb:.2f}').")
    if near(want):
        return (f"that is the right value to about 7 significant digits ({want!r} GB): something rounded it on the "
                "way, e.g. float32 (numpy.float32, .item() of a float32 tensor), which keeps about 7. Compute with "
                "Python ints and floats.")
    if near(want * GB):
        return "that is bytes: return GB, i.e. bytes / 10**9."
    if near(want * GB / GiB):
        return "that is GiB (2**30 bytes): the planner, the ZeRO paper and spec sheets use GB = 10**9 bytes."
    if dp > 1 and not sharded and near(full / dp):
        return (f"ZeRO stage {zero} keeps the {WORDS[part]} whole on every GPU: only stage {FIRST_SHARDED[part]} and "
                f"above shard the {WORDS[part]} (1: optimizer state; 2: + gradients; 3: + parameters).")
    if dp > 1 and sharded and near(full):
        return (f"ZeRO stage {zero} shards the {WORDS[part]} over the {dp} data-parallel GPUs: each keeps 1/dp of "
                f"them, {params:_} * {per_param} / {dp} bytes.")
    if in_bits and not sharded and near(want * 8):
        return (f"that is 8 times the right value: bits, not bytes. The {WORDS[part]} take {per_param} bytes per "
                f"parameter in {precision!r} ({per_param * 8} bits).")
    if part == "optimizer":
        other = 8 if per_param == 12 else 12
        if near(want * other / per_param):
            if precision == "fp32":
                return ("fp32 Adam keeps 8 bytes per parameter (exp_avg and exp_avg_sq, 4 each): no fp32 master copy, "
                        "because the weights are already fp32. 12 bytes is mixed precision's count.")
            return ("mixed precision's optimizer state is 12 bytes per parameter, not 8: Adam's two fp32 moments "
                    "plus the fp32 master copy of the weights, which the optimizer steps.")
    if part in ("params", "grads") and precision != "fp32" and near(want * 2):
        return f"with mixed precision ({precision!r}) the {WORDS[part]} are 16-bit: 2 bytes per parameter, not 4."
    if part in ("params", "grads") and precision == "fp32" and near(want / 2):
        return f"in fp32 the {WORDS[part]} take 4 bytes per parameter, not 2."
    costs = "costs" if part == "optimizer" else "cost"
    return (f"the {WORDS[part]} {costs} {per_param} bytes per parameter in {precision!r} ((2, 2, 12) for bf16/fp16, "
            f"(4, 4, 8) for fp32), {'divided by dp' if sharded else 'whole'} at ZeRO stage {zero}: "
            f"{params:_} * {per_param}{f' / {dp}' if sharded else ''} / 10**9 GB.")


# --- exercise 2: the fastest plan that fits ----------------------------------------------------------

TOLERANCE = 0.05   # within 5 % of the best predicted throughput


def _scenarios():
    """Five runs whose best plans differ, chosen so that each plausible incomplete search loses one of them
    by more than TOLERANCE (tests/test_checks_lesson13.py tries them), the cheapest to search first: GPT-3 175B
    on 64 H200, where leaving out ZeRO, sequence parallelism or micro-batches above 1 costs 13-15 %; Llama 3
    70B on 64 A100 40GB, where nothing fits without full recomputation; Llama 3 70B on 32 H100 at a small
    batch, whose best plan is tensor parallelism over a whole node (tp = 8): a search that stops at
    tp = gpus_per_node - 1 loses 19 %, ZeRO-3 everywhere 8 %; GPT-2 small on 32 H100, where ZeRO-3 everywhere
    loses 44 %; GPT-3 175B on 64 A100 at a larger batch, where no pipeline loses 17 %."""

    return (
        (Transformer.preset("gpt3-175b"), ClusterSpec.preset("h200", nodes=8), 64),
        (Transformer.preset("llama3-70b"), ClusterSpec.preset("a100-40gb", nodes=8), 64),
        (Transformer.preset("llama3-70b"), ClusterSpec.preset("h100-sxm", nodes=4), 8),
        (Transformer.preset("gpt2-small"), ClusterSpec.preset("h100-sxm", nodes=4), 64),
        (Transformer.preset("gpt3-175b"), ClusterSpec.preset("a100-80gb", nodes=8), 256),
    )


@functools.cache   # the planner's answer does not change: searched once per scenario, not once per check
def _best_plan(index: int):
    """The best plan `ddp_lab.plan.search` finds for `_scenarios()[index]` among the kinds of plan the exercise
    asks for: without hybrid sharding (dp_shard=None), which lesson 13 shows but the exercise leaves out."""
    model, cluster, global_batch = _scenarios()[index]
    return search(model, cluster, top=1, global_batch=global_batch, dp_shard=None)[0]


def check_choose_plan(choose_plan) -> None:
    """Check `choose_plan(model, cluster, global_batch) -> Strategy` on five runs (models, clusters, batches).

    The strategy must use every GPU (dp * tp * pp = cluster.gpus), keep tensor parallelism inside
    a node, keep the global batch (dp * micro_batch * grad_accum), fit in 90 % of a GPU's memory
    as `ddp_lab.plan.evaluate` predicts it, and reach at least 95 % of the tokens/s of the best
    plan `ddp_lab.plan.search` finds without hybrid sharding (`search(..., dp_shard=None)`).

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    ensure_written(choose_plan)
    name = getattr(choose_plan, "__name__", "choose_plan")
    returned = []   # (run, strategy) for each run so far
    for index, (model, cluster, global_batch) in enumerate(_scenarios()):
        where = f"{model.name} on {cluster.name} ({cluster.gpus} GPUs), global batch {global_batch}"
        strategy = answer_value(choose_plan, (model, cluster, global_batch), name, f"choosing a plan for {where}",
                                CHOOSE_PLAN_ANSWERS, _none_read_hint)
        if not isinstance(strategy, Strategy):
            raise CheckFailed(f"{where}: {name} returned {type(strategy).__name__} {str(strategy)[:80]}; expected a "
                              f"ddp_lab.plan.Strategy (e.g. the .strategy of the best Plan you found).")
        earlier = next((run for run, given in returned if given is strategy), None)
        returned.append((where, strategy))
        try:
            _judge_plan(choose_plan, index, where, strategy)
        except CheckFailed as failure:
            if earlier is None:
                raise
            # the same object for another run: kept from an earlier call, fixed in the code, or a prebuilt candidate
            # (Strategy is frozen: reusing one is no mistake in itself), so it is said beside the failure's own hint
            raise CheckFailed(f"{failure}\nAlso: {name} returned the very Strategy object it returned for "
                              f"{earlier}. If the best plan so far lives outside the function (a global, a default "
                              "argument) or is fixed in the code, this run never chose it: start each call's search "
                              "afresh (best = None inside the function).") from None
    passed(f"{name}: a plan that fits, uses every GPU, keeps TP inside a node and is within "
           f"{TOLERANCE:.0%} of the best predicted throughput, for all {len(_scenarios())} models and clusters")


def _judge_plan(choose_plan, index: int, where: str, strategy: Strategy) -> None:
    """CheckFailed where `strategy`, what `choose_plan` returned for `_scenarios()[index]`, is not a right plan for it:
    idle or missing GPUs, TP across nodes, another global batch, a plan the planner refuses, one that does not fit,
    or one more than TOLERANCE slower than the best."""
    model, cluster, global_batch = _scenarios()[index]
    label = strategy.label()
    if strategy.gpus < cluster.gpus:
        raise CheckFailed(f"{where}: {label} uses dp*tp*pp = {strategy.dp}*{strategy.tp}*{strategy.pp} = "
                          f"{strategy.gpus} GPUs and leaves {cluster.gpus - strategy.gpus} idle.\nHint: the "
                          f"product dp * tp * pp must equal cluster.gpus; idle GPUs add nothing to throughput.")
    if strategy.gpus > cluster.gpus:
        raise CheckFailed(f"{where}: {label} needs dp*tp*pp = {strategy.gpus} GPUs, but the cluster has "
                          f"{cluster.gpus}.\nHint: choose dp, tp, pp whose product is cluster.gpus.")
    if strategy.tp > cluster.gpus_per_node:
        raise CheckFailed(f"{where}: {label} has tp={strategy.tp}, so every tensor-parallel group spans nodes "
                          f"of {cluster.gpus_per_node} GPUs.\nHint: TP all-reduces 4 times per layer and "
                          f"micro-batch on the critical path; keep tp <= cluster.gpus_per_node, on NVLink.")
    if strategy.global_batch != global_batch:
        per_pass = strategy.dp * strategy.micro_batch
        if strategy.dp > 1 and strategy.micro_batch * strategy.grad_accum == global_batch:
            hint = (f"micro_batch * grad_accum = {global_batch} is the whole global batch, and each of the "
                    f"{strategy.dp} data-parallel replicas trains that many: grad_accum must divide by dp too, "
                    "grad_accum = global_batch // (dp * micro_batch)")
        elif global_batch % per_pass:
            hint = (f"dp * micro_batch = {per_pass} does not divide the global batch {global_batch}, so no "
                    "grad_accum gives it: skip those combinations in the search")
        else:
            hint = ("set grad_accum = global_batch // (dp * micro_batch): a different batch changes what a step "
                    "is, so tokens/s would not compare")
        raise CheckFailed(f"{where}: {label} trains dp * micro_batch * grad_accum = {strategy.dp} * "
                          f"{strategy.micro_batch} * {strategy.grad_accum} = {strategy.global_batch} sequences "
                          f"per step, not {global_batch}.\nHint: {hint}.")
    try:
        chosen = evaluate(model, cluster, strategy)
    except ValueError as error:
        raise CheckFailed(f"{where}: {label} is not a valid plan: {error}") from None
    best = _best_plan(index)
    if (not chosen.fits and chosen.memory.total <= cluster.gpu.memory
            and not _chooses_over_whole_memory(choose_plan, index + 1)):
        faster = (f" It is predicted faster than the best plan that fits ({chosen.tokens_per_second:,.0f} vs "
                  f"{best.tokens_per_second:,.0f} tokens/s)." if chosen.tokens_per_second > best.tokens_per_second
                  else "")
        raise CheckFailed(f"{where}: {label} does not fit: {chosen.memory.total / GB:.1f} GB per GPU > "
                          f"{chosen.usable_memory / GB:.1f} GB usable ({1 - chosen.reserve:.0%} of "
                          f"{cluster.gpu.memory / GB:.1f} GB), though under the GPU's whole memory.{faster}\n"
                          f"Hint: a plan must fit in the usable share of the memory, {1 - chosen.reserve:.0%}: the "
                          f"planner keeps {chosen.reserve:.0%} for what it does not count (CUDA context, NCCL "
                          f"buffers, fragmentation), and this plan needs {chosen.memory.total / cluster.gpu.memory:.1%}"
                          " of the GPU's memory. Ask each plan's Plan.fits (memory.total <= plan.usable_memory) rather "
                          "than comparing with cluster.gpu.memory, or with a share of it of your own.")
    if not chosen.fits:
        faster = (f" It is predicted faster than the best plan that fits ({chosen.tokens_per_second:,.0f} vs "
                  f"{best.tokens_per_second:,.0f} tokens/s): if your search chose it, what it asked of each "
                  "plan's memory, if anything, let through one that does not fit. Keep a plan only where its "
                  "Plan.fits is True (memory.total, activations and buffers included, <= plan.usable_memory)."
                  if chosen.tokens_per_second > best.tokens_per_second else "")
        raise CheckFailed(f"{where}: {label} does not fit: {_overflow(chosen)}{faster}")
    if chosen.tokens_per_second < (1 - TOLERANCE) * best.tokens_per_second:
        raise CheckFailed(f"{where}: {label} fits but is predicted at {chosen.tokens_per_second:,.0f} tokens/s, "
                          f"{1 - chosen.tokens_per_second / best.tokens_per_second:.0%} below the best plan "
                          f"{best.strategy.label()} ({best.tokens_per_second:,.0f} tokens/s).\n"
                          f"Hint: {_slower(chosen, best)}")


# what a search reads from the best Plan so far when it compares a candidate with it
PLAN_COMPARED = ("tokens_per_second", "time", "mfu", "memory", "fits", "margin")


# what max() or min() of nothing says: before Python 3.12, and from 3.12 on
EMPTY_MAX = re.compile(r"(max|min)\(\) (arg is an empty sequence|iterable argument is empty)")
# why a search can end without a plan, though every run of the check has plans that fit: the check cannot tell which
NO_PLAN_CAUSES = ("Either none of them fits this run (plan.search(model, cluster, top=1, global_batch=global_batch), "
                  "run in a cell of its own, shows one that does), or the search's own test of fitting never holds, "
                  "or every candidate raised a ValueError that the search skipped (a Strategy the planner refuses: "
                  "print the error instead of skipping it to see why).")


def _none_read_hint(error: Exception) -> str | None:
    """The hint for an answer that read an attribute of None (the best plan so far, still None), or that took max()
    or min() of an empty sequence (the plans that fit, none), or None where the error is another one."""
    if isinstance(error, ValueError) and (empty := EMPTY_MAX.fullmatch(str(error))):
        return (f"{empty.group(1)}() was given no items: where they are the plans your search kept (those that fit), "
                f"none of the candidates it tried passed its tests. {NO_PLAN_CAUSES}")
    if not isinstance(error, AttributeError) or getattr(error, "obj", ...) is not None:
        return None
    if error.name == "strategy":   # best = None ... return best.strategy
        return ("your search ended without a plan (None): none of the candidates it tried passed its tests. "
                + NO_PLAN_CAUSES)
    if error.name in PLAN_COMPARED:   # best = None ... c.tokens_per_second > best.tokens_per_second
        return (f"the best plan so far is still None when the first candidate is compared with it, and None has no "
                f".{error.name}: test whether there is a best plan yet (best is None) first, and keep the first "
                "candidate that fits without comparing.")
    return None


def _chooses_over_whole_memory(choose_plan, start: int) -> bool:
    """Whether choose_plan picks, for one of the scenarios from `start` on, a plan that needs more than the GPU's whole
    memory: then its search did not compare the plans with the whole memory (it never asked whether they fit)."""
    for model, cluster, global_batch in _scenarios()[start:]:
        try:
            chosen = evaluate(model, cluster, choose_plan(model, cluster, global_batch))
        except Exception:   # a plan it cannot choose or the planner refuses says nothing about memory
            continue
        if chosen.memory.total > cluster.gpu.memory:
            return True
    return False


MEMORY_ADVICE = {
    "params": "shard the weights: ZeRO-3, or more tp / pp",
    "grads": "shard the gradients: ZeRO-2 or 3, or more tp / pp",
    "optimizer": "shard the optimizer state: ZeRO-1 or higher over dp, or more tp / pp",
    "activations": "recompute (full; selective only helps eager attention), sequence parallelism with tp, or a "
                   "smaller micro_batch",
    "buffers": "ZeRO-3's gathered layers: more tp shrinks each layer",
}


def _overflow(plan) -> str:
    m = plan.memory
    usable = plan.usable_memory
    parts = {part: getattr(m, part) for part in MEMORY_ADVICE}
    largest = max(parts, key=parts.get)
    label = {"params": "parameters", "grads": "gradients"}
    shown = ", ".join(f"{label.get(part, part)} {value / GB:.1f}" for part, value in parts.items())
    return (f"{m.total / GB:.1f} GB per GPU ({shown}) > {usable / GB:.1f} GB usable "
            f"({1 - plan.reserve:.0%} of {plan.cluster.gpu.memory / GB:.1f} GB).\nHint: the largest term is the "
            f"{label.get(largest, largest)} ({parts[largest] / GB:.1f} GB): {MEMORY_ADVICE[largest]}.")


TIME_PARTS = {"compute": "compute", "tp_comm": "TP communication", "bubble": "the pipeline bubble",
              "pp_comm": "PP communication", "dp_comm_exposed": "exposed DP communication",
              "overlap_slowdown": "the overlap slowdown"}
STRATEGY_FIELDS = ("dp", "tp", "pp", "zero", "micro_batch", "recompute", "sequence_parallel")
# then every other field a plan may set (precision, attention, schedule, ...); grad_accum follows from dp, micro_batch
OTHER_FIELDS = tuple(field.name for field in dataclasses.fields(Strategy)
                     if field.name not in STRATEGY_FIELDS and field.name != "grad_accum")


def _slower(chosen, best) -> str:
    """What differs between the learner's plan and the best one: the step time part by part, and the fields."""
    extra = {part: getattr(chosen.time, part) - getattr(best.time, part) for part in TIME_PARTS}
    worst = max(extra, key=extra.get)
    parts = ", ".join(f"{label} {getattr(chosen.time, part):.3g} vs {getattr(best.time, part):.3g}"
                      for part, label in TIME_PARTS.items())
    fields = ", ".join(f"{field}={getattr(best.strategy, field)!r} (yours {getattr(chosen.strategy, field)!r})"
                       for field in STRATEGY_FIELDS + OTHER_FIELDS
                       if getattr(best.strategy, field) != getattr(chosen.strategy, field))
    return (f"step time in seconds, yours vs the best: {parts}; most of the difference is {TIME_PARTS[worst]}. "
            f"The best plan has {fields}: either your search never tried those values, or it tried them and kept "
            f"another plan (keep the highest tokens_per_second among the plans that fit); one within "
            f"{TOLERANCE:.0%} of the best passes.")


# --- after exercise 2: your plan next to one you rejected ----------------------------------------------

def compare_plans(choose_plan, model, cluster, global_batch: int, rejected) -> None:
    """Print `plan.breakdown` of the plan `choose_plan` picks and of a `rejected` Strategy, one under the other.

    Like the checks, it fails with one line (CheckFailed) when `choose_plan` is not written yet, raises,
    or returns something that is not a valid Strategy, and when `rejected` is not a valid plan.

    Introduced in exercises/13-plan-your-training-run.ipynb.
    """

    ensure_written(choose_plan)
    name = getattr(choose_plan, "__name__", "choose_plan")
    where = f"{model.name} on {cluster.name}, global batch {global_batch}"
    try:
        strategy = choose_plan(model, cluster, global_batch)
    except Exception as error:
        raise answer_raised(name, error, f"choosing a plan for {where}") from None
    plans = []
    for label, candidate in ((f"{name}'s plan", strategy), ("rejected", rejected)):
        if not isinstance(candidate, Strategy):
            raise CheckFailed(f"{label} is {type(candidate).__name__} {str(candidate)[:80]}; expected a "
                              "ddp_lab.plan.Strategy.")
        try:
            plans.append(evaluate(model, cluster, candidate))
        except ValueError as error:
            raise CheckFailed(f"{label}, {candidate.label()}, is not a valid plan for {where}: {error}") from None
    print(breakdown(plans[0]))
    print(breakdown(plans[1]))

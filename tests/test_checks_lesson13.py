"""The lesson 13 checks accept a right answer and reject plausible wrong ones with specific feedback.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part of
the feedback that names it. Both checks are pure Python (the planner's arithmetic): no ranks.
"""

from __future__ import annotations

import decimal
import itertools

import pytest

from ddp_lab import plan
from ddp_lab.checks import CheckFailed
from ddp_lab.checks.lesson13 import check_choose_plan, check_model_states_gb
from ddp_lab.plan import Strategy

# --- per_gpu_model_states_gb -----------------------------------------------------------------------

PARTS = ("params", "grads", "optimizer")
PER_PARAM = {"bf16": (2, 2, 12), "fp16": (2, 2, 12), "fp32": (4, 4, 8)}


def _states(params, dp, zero, per_param, first_sharded=(3, 2, 1), unit=10**9):
    return {part: params * size / (dp if zero >= first else 1) / unit
            for part, size, first in zip(PARTS, per_param, first_sharded)}


def per_gpu_model_states_gb(params, dp, zero, precision):
    return _states(params, dp, zero, PER_PARAM[precision])


def blank(params, dp, zero, precision):
    raise NotImplementedError("bytes per parameter: (2, 2, 12) for bf16, (4, 4, 8) for fp32")


def optimizer_not_divided_at_stage_1(params, dp, zero, precision):
    return _states(params, dp, zero, PER_PARAM[precision], first_sharded=(3, 2, 2))


def gradients_divided_at_stage_1(params, dp, zero, precision):
    return _states(params, dp, zero, PER_PARAM[precision], first_sharded=(3, 1, 1))


def parameters_divided_at_stage_2(params, dp, zero, precision):
    return _states(params, dp, zero, PER_PARAM[precision], first_sharded=(2, 2, 1))


def twelve_bytes_in_fp32(params, dp, zero, precision):
    return _states(params, dp, zero, (4, 4, 12) if precision == "fp32" else PER_PARAM[precision])


def in_gib(params, dp, zero, precision):
    return _states(params, dp, zero, PER_PARAM[precision], unit=2**30)


def in_bytes(params, dp, zero, precision):
    return _states(params, dp, zero, PER_PARAM[precision], unit=1)


def in_bits(params, dp, zero, precision):
    return _states(params, dp, zero, tuple(8 * size for size in PER_PARAM[precision]))


def every_byte_under_params(params, dp, zero, precision):
    """All 16 bytes of a bf16 parameter (2 + 2 + 12) counted under 'params' too: 8 times its 2 bytes, not bits."""
    states = _states(params, dp, zero, PER_PARAM[precision])
    return {**states, "params": sum(states.values())} if precision != "fp32" else states


def optimizer_of_16_bytes(params, dp, zero, precision):
    """Counts the fp32 gradient copy in the optimizer state too: 16 bytes per parameter."""
    return _states(params, dp, zero, (2, 2, 16) if precision != "fp32" else PER_PARAM[precision])


def a_total(params, dp, zero, precision):
    return sum(per_gpu_model_states_gb(params, dp, zero, precision).values())


def rounded_for_display(params, dp, zero, precision):
    return {part: round(gb, 2) for part, gb in per_gpu_model_states_gb(params, dp, zero, precision).items()}


def rounded_to_4_decimals(params, dp, zero, precision):
    return {part: round(gb, 4) for part, gb in per_gpu_model_states_gb(params, dp, zero, precision).items()}


def rounded_to_6_decimals(params, dp, zero, precision):
    return {part: round(gb, 6) for part, gb in per_gpu_model_states_gb(params, dp, zero, precision).items()}


def in_float32(params, dp, zero, precision):
    import numpy
    return {part: numpy.float32(gb) for part, gb in per_gpu_model_states_gb(params, dp, zero, precision).items()}


def exact_fractions(params, dp, zero, precision):
    from fractions import Fraction
    return {part: Fraction(params * size, (dp if zero >= first else 1) * 10**9)
            for part, size, first in zip(PARTS, PER_PARAM[precision], (3, 2, 1))}


def floored_by_integer_division(params, dp, zero, precision):
    return {part: params * size // (dp if zero >= first else 1) // 10**9
            for part, size, first in zip(PARTS, PER_PARAM[precision], (3, 2, 1))}


def the_planners_formula(params, dp, zero, precision):
    states = plan.model_state_bytes(params, Strategy(dp=dp, zero=zero, precision=precision))
    return {part: getattr(states, part) / 10**9 for part in PARTS}


def test_model_states_accepts_the_solution(capsys):
    check_model_states_gb(per_gpu_model_states_gb)
    assert "✓ per_gpu_model_states_gb equals the planner's model_state_bytes" in capsys.readouterr().out


def in_decimals(params, dp, zero, precision):
    return {part: decimal.Decimal(params * size) / (dp if zero >= first else 1) / 10**9
            for part, size, first in zip(PARTS, PER_PARAM[precision], (3, 2, 1))}


def test_model_states_accepts_numbers_of_any_kind(capsys):
    # exact fractions, decimals and numpy floats are numbers of GB too
    check_model_states_gb(exact_fractions)
    check_model_states_gb(in_decimals)
    assert "✓ exact_fractions equals" in capsys.readouterr().out


@pytest.mark.parametrize("answer, feedback", [
    (blank, r"blank is not written yet: it raised NotImplementedError\('bytes per parameter"),
    (optimizer_not_divided_at_stage_1, r"(?s)zero=1, precision='bf16'\)\['optimizer'\] is 90 GB, expected 1.40625 GB"
                                       r".*stage 1 shards the optimizer state over the 64 data-parallel GPUs"),
    (gradients_divided_at_stage_1, r"(?s)zero=1, precision='bf16'\)\['grads'\] is 0.234375 GB, expected 15 GB"
                                   r".*stage 1 keeps the gradients whole on every GPU: only stage 2 and above"),
    (parameters_divided_at_stage_2, r"(?s)zero=2, precision='bf16'\)\['params'\] is 0.234375 GB.*stage 2 keeps "
                                    r"the parameters whole on every GPU: only stage 3"),
    (twelve_bytes_in_fp32, r"(?s)zero=0, precision='fp32'\)\['optimizer'\] is 90 GB, expected 60 GB.*fp32 Adam keeps "
                           r"8 bytes per parameter.*no fp32 master copy"),
    (in_gib, r"(?s)\['params'\] is 13.9698 GB, expected 15 GB.*that is GiB"),
    (in_bytes, r"(?s)\['params'\] is 1.5e\+10 GB.*that is bytes: return GB"),
    (in_bits, r"(?s)zero=0, precision='bf16'\)\['params'\] is 120 GB, expected 15 GB.*that is 8 times the right "
              r"value: bits, not bytes. The parameters take 2 bytes per parameter in 'bf16' \(16 bits\)"),
    # 16 bytes where 2 belong is 8 times the right value too, but grads and optimizer are right: not bits
    (every_byte_under_params, r"(?s)zero=0, precision='bf16'\)\['params'\] is 120 GB, expected 15 GB(?!.*bits).*"
                              r"the parameters cost 2 bytes per parameter"),
    (optimizer_of_16_bytes, r"(?s)\['optimizer'\] is 120 GB, expected 90 GB.*the optimizer state costs 12 bytes per "
                            r"parameter in 'bf16'"),
    (rounded_for_display, r"(?s)zero=1, precision='bf16'\)\['optimizer'\] is 1.41 GB, expected 1.40625 GB.*that is the "
                          r"right value rounded to 2 decimals \(1.40625 GB\): return the unrounded float"),
    (rounded_to_4_decimals, r"(?s)zero=1, precision='bf16'\)\['optimizer'\] is 1.4062 GB, expected 1.40625 GB.*that "
                            r"is the right value rounded to 4 decimals"),
    # 16.060522 against 16.060522496: both read 16.0605 with 6 significant digits, so more are shown
    (rounded_to_6_decimals, r"(?s)^rounded_to_6_decimals\(8_030_261_248, dp=8, zero=1, precision='bf16'\)\['params'\] "
                            r"is 16.060522 GB, expected 16.0605225 GB.*that is the right value rounded to 6 decimals"),
    (in_float32, r"(?s)\['params'\] is 16.0605221 GB, expected 16.0605225 GB.*about 7 significant digits.*float32"),
    (floored_by_integer_division, r"(?s)zero=1, precision='bf16'\)\['optimizer'\] is 1 GB, expected 1.40625 GB.*that "
                                  r"is the right value cut to whole GB \(1.40625 GB\), as integer division"),
    (a_total, r"returned 120.0; expected a dict with the keys \['params', 'grads', 'optimizer'\]"),
    (the_planners_formula, r"^the_planners_formula calls ddp_lab.course.plan.memory.model_state_bytes, the package's "
                           r"own answer to this exercise"),
])
def test_model_states_rejects_wrong_answers(answer, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_model_states_gb(answer)


def no_parameters_at_stage_3(params, dp, zero, precision):
    """Wrong: ZeRO-3 taken to keep no parameters at all (each layer's are gathered when needed), 0 where 1/dp of
    them belongs; the other parts are right."""
    return {**per_gpu_model_states_gb(params, dp, zero, precision), **({"params": 0} if zero == 3 else {})}


def test_model_states_names_rounding_only_where_every_part_is_rounded():
    # 0 GB is 0.234375 GB cut to whole GB, but the gradients beside it (0.234375 GB) are not cut: no rounding hint,
    # the formula for the part instead
    with pytest.raises(CheckFailed, match=r"(?s)zero=3, precision='bf16'\)\['params'\] is 0 GB, expected 0.234375 GB"
                                          r"\.\nHint: the parameters cost 2 bytes per parameter in 'bf16' .*divided by "
                                          r"dp at ZeRO stage 3: 7_500_000_000 \* 2 / 64 / 10\*\*9 GB\.$"):
        check_model_states_gb(no_parameters_at_stage_3)


# --- choose_plan -----------------------------------------------------------------------------------

def incomplete_search(zeros=range(4), micro_batches=(1, 2, 4, 8), recomputes=("none", "selective", "full"),
                      sequence_parallel=(False, True), pipelines=True, whole_node=True,
                      fits=lambda candidate, cluster: candidate.fits, fixed=None):
    """The solution's loop with one part of the search space left out (the defaults search all of it).
    `fits`: the test of a plan's memory; `fixed`: other Strategy fields, set on every candidate."""

    def choose_plan(model, cluster, global_batch):
        best = None
        pps = range(1, cluster.gpus + 1) if pipelines else (1,)
        tps = range(1, cluster.gpus_per_node + (1 if whole_node else 0))   # whole_node=False: never tp = 8
        for tp, pp in itertools.product(tps, pps):
            if cluster.gpus % (tp * pp):
                continue
            dp = cluster.gpus // (tp * pp)
            for zero, mb, recompute, sp in itertools.product(zeros, micro_batches, recomputes, sequence_parallel):
                if global_batch % (dp * mb) or (sp and tp == 1):
                    continue
                try:
                    candidate = plan.evaluate(model, cluster, Strategy(
                        dp=dp, tp=tp, pp=pp, zero=zero, micro_batch=mb, grad_accum=global_batch // (dp * mb),
                        sequence_parallel=sp, recompute=recompute, **(fixed or {})))
                except ValueError:
                    continue
                if fits(candidate, cluster) and (best is None or candidate.tokens_per_second > best.tokens_per_second):
                    best = candidate
        return best.strategy

    return choose_plan


choose_plan = incomplete_search()   # the solution: nothing left out, the fastest plan that fits
# its ✓ is proven by nbval of solutions/13-plan-your-training-run.ipynb (the same loop), so it is not run again here


BEST_GPT3 = r"below the best plan dp32 tp2 pp1 z3 mb2x1 sp \("


@pytest.mark.parametrize("left_out, feedback", [
    (dict(recomputes=("none", "selective")), r"(?s)choose_plan raised AttributeError: 'NoneType' object has no "
                                             r"attribute 'strategy'\nwhile choosing a plan for llama3-70b on 8 x 8 "
                                             r"A100 40GB.*your search ended without a plan"),
    (dict(zeros=(0,)), rf"(?s)gpt3-175b on 8 x 8 H200 \(64 GPUs\).* fits but .*\b14% {BEST_GPT3}.*zero=3 \(yours 0\)"),
    (dict(zeros=(3,)), r"(?s)gpt2-small on 4 x 8 H100 SXM \(32 GPUs\), global batch 64: .*\b11% below the best plan "
                       r"dp32 tp1 pp1 z1 mb1x2 .*zero=1 \(yours 3\)"),
    (dict(whole_node=False), r"(?s)llama3-70b on 4 x 8 H100 SXM \(32 GPUs\), global batch 8: dp8 tp4 .*\b12% below the "
                             r"best plan dp4 tp8 pp1 z3 mb1x2 sp.*tp=8 \(yours 4\)"),
    (dict(sequence_parallel=(False,)), rf"(?s)gpt3-175b .*\b16% {BEST_GPT3}.*sequence_parallel=True \(yours False\)"),
    (dict(micro_batches=(1,)), rf"(?s)gpt3-175b .*\b14% {BEST_GPT3}.*micro_batch=2 \(yours 1\)"),
    (dict(pipelines=False), r"(?s)gpt3-175b on 8 x 8 A100 80GB \(64 GPUs\), global batch 256: .*\b17% below the best "
                            r"plan dp2 tp4 pp8 .*pp=8 \(yours 1\)"),
    # a field outside dp, tp, pp, zero, micro_batch, recompute and sequence parallelism is named too
    (dict(fixed={"attention": "eager"}), r"(?s)llama3-70b on 8 x 8 A100 40GB .*: dp64 tp1 pp1 z3 mb1x1 full eager fits "
                                         r"but .*\b8% below the best plan dp64 tp1 pp1 z3 mb1x1 full .*The best plan "
                                         r"has attention='flash' \(yours 'eager'\): "),
    (dict(fixed={"precision": "fp32"}), rf"(?s)gpt3-175b .*{BEST_GPT3}.*The best plan has micro_batch=2 \(yours 1\), "
                                        r"precision='bf16' \(yours 'fp32'\): "),
])
def test_choose_plan_fails_searches_that_leave_out_part_of_the_space(left_out, feedback):
    """Each search that skips one of the options the exercise lists loses one of the check's scenarios."""
    with pytest.raises(CheckFailed, match=feedback):
        check_choose_plan(incomplete_search(**left_out))


def blank_plan(model, cluster, global_batch):
    raise NotImplementedError("try every dp, tp, pp with plan.evaluate")


def plain_ddp(model, cluster, global_batch):
    return Strategy(dp=cluster.gpus, grad_accum=global_batch // cluster.gpus)


def zero3_everywhere_full_recompute(model, cluster, global_batch):
    return Strategy(dp=cluster.gpus, zero=3, grad_accum=global_batch // cluster.gpus, recompute="full")


def tp_over_two_nodes(model, cluster, global_batch):
    tp = 2 * cluster.gpus_per_node
    return Strategy(dp=cluster.gpus // tp, tp=tp, grad_accum=global_batch * tp // cluster.gpus)


def one_node_only(model, cluster, global_batch):
    return Strategy(dp=cluster.gpus_per_node // 4, tp=4, zero=3, recompute="selective",
                    grad_accum=global_batch * 4 // cluster.gpus_per_node)


def forgets_the_batch(model, cluster, global_batch):
    return Strategy(dp=cluster.gpus // 4, tp=4, zero=3, sequence_parallel=True)


def fastest_whether_it_fits(model, cluster, global_batch):
    best = None
    for tp in (1, 2, 4, 8):
        for zero in (0, 1, 2, 3):
            dp = cluster.gpus // tp
            candidate = plan.evaluate(model, cluster, Strategy(dp=dp, tp=tp, zero=zero, grad_accum=global_batch // dp))
            if best is None or candidate.tokens_per_second > best.tokens_per_second:   # .fits never asked
                best = candidate
    return best.strategy


# "fits" as under the GPU's whole memory, not the usable 90 % that Plan.fits asks; without pipelines, so that the
# check's look at the other runs' plans (all under the whole memory) stays quick
fits_in_the_whole_memory = incomplete_search(pipelines=False, fits=lambda candidate, cluster:
                                             candidate.memory.total <= cluster.gpu.memory)
fits_in_the_whole_memory.__name__ = "fits_in_the_whole_memory"


def grad_accum_forgets_dp(model, cluster, global_batch):
    best = None
    for tp, pp, zero, mb in itertools.product((1, 2, 4, 8), (1, 2, 4, 8), range(4), (1, 2, 4, 8)):
        dp = cluster.gpus // (tp * pp)
        try:
            candidate = plan.evaluate(model, cluster, Strategy(dp=dp, tp=tp, pp=pp, zero=zero, micro_batch=mb,
                                                               grad_accum=global_batch // mb,   # dp left out
                                                               recompute="full", sequence_parallel=tp > 1))
        except ValueError:
            continue
        if candidate.fits and (best is None or candidate.tokens_per_second > best.tokens_per_second):
            best = candidate
    return best.strategy


def best_of_the_plans_that_fit(model, cluster, global_batch):
    """Wrong: max() over the plans that fit, none of which recomputes fully: none fits llama3-70b on A100 40GB."""
    plans = []
    for tp, pp in itertools.product(range(1, cluster.gpus_per_node + 1), range(1, cluster.gpus + 1)):
        dp = cluster.gpus // (tp * pp)
        for zero, mb, recompute, sp in itertools.product(range(4), (1, 2, 4, 8), ("none", "selective"), (False, True)):
            if cluster.gpus % (tp * pp) or global_batch % (dp * mb) or (sp and tp == 1):
                continue
            try:
                plans.append(plan.evaluate(model, cluster, Strategy(
                    dp=dp, tp=tp, pp=pp, zero=zero, micro_batch=mb, grad_accum=global_batch // (dp * mb),
                    sequence_parallel=sp, recompute=recompute)))
            except ValueError:
                continue
    return max((p for p in plans if p.fits), key=lambda p: p.tokens_per_second).strategy


def best_compared_while_none(model, cluster, global_batch):
    """Wrong: the best plan so far starts as None and the first comparison reads None.tokens_per_second."""
    best = None
    for tp in (1, 2, 4, 8):
        dp = cluster.gpus // tp
        candidate = plan.evaluate(model, cluster, Strategy(dp=dp, tp=tp, zero=3, grad_accum=global_batch // dp))
        if candidate.fits and candidate.tokens_per_second > best.tokens_per_second:   # `best is None or` left out
            best = candidate
    return best.strategy


def nodes_parsed_from_the_name(model, cluster, global_batch):
    """Wrong, and not about plans: the number of nodes parsed from the cluster's name, a pattern that does not match
    ("8 x 8 H200" has spaces), so re.match gives None."""
    import re
    nodes = int(re.match(r"(\d+)x", cluster.name).group(1))
    return Strategy(dp=nodes * cluster.gpus_per_node, grad_accum=global_batch // (nodes * cluster.gpus_per_node))


def batch_not_divisible(model, cluster, global_batch):
    return Strategy(dp=cluster.gpus, micro_batch=2, grad_accum=max(1, global_batch // (2 * cluster.gpus)))


def returns_the_plan(model, cluster, global_batch):
    return plan.evaluate(model, cluster, Strategy(dp=cluster.gpus, zero=3, grad_accum=global_batch // cluster.gpus))


def the_planners_search(model, cluster, global_batch):
    return plan.search(model, cluster, top=1, global_batch=global_batch)[0].strategy


def test_compare_plans_prints_both_breakdowns_and_fails_in_one_line(capsys):
    from ddp_lab.checks.lesson13 import compare_plans
    from ddp_lab.plan import ClusterSpec, Transformer

    llama, a100s = Transformer.preset("llama3-8b"), ClusterSpec.preset("a100-80gb", nodes=2)
    rejected = Strategy(dp=16, zero=3, grad_accum=16, recompute="full")
    compare_plans(choose_plan, llama, a100s, 256, rejected)
    out = capsys.readouterr().out
    assert out.count("tokens/s") == 2 and "dp16 tp1 pp1 z3 mb1x16 full" in out
    with pytest.raises(CheckFailed, match=r"^blank_plan is not written yet"):
        compare_plans(blank_plan, llama, a100s, 256, rejected)
    with pytest.raises(CheckFailed, match=r"^rejected, dp16 tp3 .* is not a valid plan"):
        compare_plans(choose_plan, llama, a100s, 256, Strategy(dp=16, tp=3, grad_accum=16))


@pytest.mark.parametrize("answer, feedback", [
    (blank_plan, r"blank_plan is not written yet: it raised NotImplementedError\('try every dp"),
    (plain_ddp, r"(?s)gpt3-175b on 8 x 8 H200.*dp64 tp1 pp1 z0 mb1x1 does not fit: .* GB per GPU \(parameters "
                r"349.2, gradients 349.2, optimizer 2095.3, activations .*the largest term is the optimizer .*: shard "
                r"the optimizer state"),
    (zero3_everywhere_full_recompute, r"(?s)dp64 tp1 pp1 z3 mb1x1 full fits but is predicted at .* tokens/s, 21% "
                                      r"below the best plan.*most of the difference is"),
    (tp_over_two_nodes, r"(?s)tp=16, so every tensor-parallel group spans nodes of 8 GPUs.*keep tp <= "
                        r"cluster.gpus_per_node"),
    (one_node_only, r"(?s)uses dp\*tp\*pp = 2\*4\*1 = 8 GPUs and leaves 56 idle"),
    (forgets_the_batch, r"(?s)trains dp \* micro_batch \* grad_accum = 16 \* 1 \* 1 = 16 sequences per step, not 64"),
    (fastest_whether_it_fits, r"(?s)does not fit: .*It is predicted faster than the best plan that fits .*if your "
                              r"search chose it, what it asked of each plan's memory, if anything, let through one "
                              r"that does not fit. Keep a plan only where its Plan.fits is True"),
    (batch_not_divisible, r"(?s)= 128 sequences per step, not 64.*dp \* micro_batch = 128 does not divide the global "
                          r"batch 64.*skip those combinations"),
    (grad_accum_forgets_dp, r"(?s)= 4096 sequences per step, not 64.*micro_batch \* grad_accum = 64 is the whole "
                            r"global batch.*grad_accum must divide by dp too, grad_accum = global_batch // \(dp \* "
                            r"micro_batch\)"),
    (fits_in_the_whole_memory, r"(?s)dp64 tp1 pp1 z3 mb1x1 does not fit: 137.3 GB per GPU > 136.3 GB usable \(90% of "
                               r"151.4 GB\), though under the GPU's whole memory.*Hint: a plan must fit in the usable "
                               r"share of the memory.*Plan.fits"),
    (returns_the_plan, r"returned Plan .*expected a ddp_lab.plan.Strategy"),
    (best_compared_while_none, r"(?s)raised AttributeError: 'NoneType' object has no attribute 'tokens_per_second'.*"
                               r"\nHint: the best plan so far is still None when the first candidate is compared with "
                               r"it.*test whether there is a best plan yet \(best is None\) first"),
    (best_of_the_plans_that_fit, r"(?s)raised ValueError: max\(\) (arg is an empty sequence|iterable argument is "
                                 r"empty)\nwhile choosing a plan for llama3-70b on 8 x 8 A100 40GB.*\nHint: max\(\) "
                                 r"was given no items: where they are the plans your search kept \(those that fit\), "
                                 r"none"),
    # a None that is not a plan: the error and its line, no hint about the search
    (nodes_parsed_from_the_name, r"(?s)raised AttributeError: 'NoneType' object has no attribute 'group'\nwhile "
                                 r"choosing a plan for gpt3-175b.*re\.match(?!.*Hint)"),
    (the_planners_search, r"^the_planners_search calls ddp_lab.course.plan.search.search, the package's own answer to "
                          r"this exercise"),
])
def test_choose_plan_rejects_wrong_answers(answer, feedback):
    with pytest.raises(CheckFailed, match=feedback):
        check_choose_plan(answer)


def keeping_the_best_across_calls():
    """Wrong: the best plan so far lives outside the function (a `best = None` of the cell, made global), so each run
    starts from the plans of the runs before it and keeps an earlier run's plan where none of its own is faster."""
    kept = {"best": None}

    def best_kept_across_calls(model, cluster, global_batch):
        for tp, zero, mb, recompute in itertools.product((1, 2, 4, 8), range(4), (1, 2, 4), ("none", "full")):
            dp = cluster.gpus // tp
            if global_batch % (dp * mb):
                continue
            candidate = plan.evaluate(model, cluster, Strategy(dp=dp, tp=tp, zero=zero, micro_batch=mb,
                                                               grad_accum=global_batch // (dp * mb),
                                                               recompute=recompute, sequence_parallel=tp > 1))
            best = kept["best"]
            if candidate.fits and (best is None or candidate.tokens_per_second > best.tokens_per_second):
                kept["best"] = candidate
        return kept["best"].strategy

    return best_kept_across_calls


def every_strategy_refused(model, cluster, global_batch):
    """Wrong: recomputation as a flag (recompute=True), which Strategy refuses (ValueError: 'none', 'selective' or
    'full'), inside the try that skips the shapes the planner refuses: every candidate is skipped."""
    best = None
    for tp, zero in itertools.product((1, 2, 4, 8), range(4)):
        dp = cluster.gpus // tp
        try:
            candidate = plan.evaluate(model, cluster, Strategy(dp=dp, tp=tp, zero=zero, grad_accum=global_batch // dp,
                                                               recompute=True))
        except ValueError:
            continue
        if candidate.fits and (best is None or candidate.tokens_per_second > best.tokens_per_second):
            best = candidate
    return best.strategy


# memory tests that are not Plan.fits, each of which keeps a plan that does not fit: their hints claim no cause
# the answer may not have (neither "without asking whether it fits" nor "not all of" the memory)
model_states_only = incomplete_search(pipelines=False, fits=lambda candidate, cluster: candidate.memory.params
                                      + candidate.memory.grads + candidate.memory.optimizer <= candidate.usable_memory)
a_reserve_of_5_percent = incomplete_search(pipelines=False, fits=lambda candidate, cluster:
                                           candidate.memory.total <= 0.95 * cluster.gpu.memory)
model_states_only.__name__, a_reserve_of_5_percent.__name__ = "model_states_only", "a_reserve_of_5_percent"


@pytest.mark.parametrize("answer, feedback", [
    (keeping_the_best_across_calls(), r"(?s)^llama3-70b on 8 x 8 A100 40GB .*: dp32 tp2 pp1 z3 mb2x1 sp does not "
                                      r"fit: .*\nHint: .*\nAlso: best_kept_across_calls returned the very Strategy "
                                      r"object it returned for gpt3-175b on 8 x 8 H200 \(64 GPUs\), global batch 64\. If "
                                      r"the best plan so far lives outside the function"),
    (every_strategy_refused, r"(?s)^(?!.*it tried fits this run)every_strategy_refused raised AttributeError: "
                             r"'NoneType' object has no attribute 'strategy'.*\nHint: your search ended without a plan "
                             r"\(None\): none of the candidates it tried passed its tests.*or every candidate raised a "
                             r"ValueError that the search skipped"),
    (model_states_only, r"(?s)^(?!.*without asking)gpt3-175b on 8 x 8 H200 .*: dp64 tp1 pp1 z3 mb1x1 does not fit: "
                        r".*activations 82.8.*It is predicted faster than the best plan that fits .*what it asked of "
                        r"each plan's memory, if anything, let through one that does not fit"),
    (a_reserve_of_5_percent, r"(?s)^(?!.*not all of it)gpt3-175b on 8 x 8 H200 .*though under the GPU's whole "
                             r"memory.*\nHint: a plan must fit in the usable share of the memory, 90%: .*this plan "
                             r"needs 90.7% of the GPU's memory.*or with a share of it of your own"),
])
def test_choose_plan_names_only_the_mistake_its_evidence_shows(answer, feedback):
    """Each answer here made a mistake other than the one a first look at its result suggests: a plan kept across
    calls (said beside the memory hint), a search whose every Strategy the planner refused (not one that found no
    plan that fits), memory tests other than Plan.fits (not one that never asked)."""
    with pytest.raises(CheckFailed, match=feedback):
        check_choose_plan(answer)

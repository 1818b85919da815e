"""The held-out validation (ddp_lab/plan/held_out.py): published runs the planner was never fitted on, by family,
in two parts: the development runs (their errors guided what is modelled) and the held-aside runs.

What holds is asserted; the goal (median <= 10 %, no family's median beyond 15 %, on the held-aside part) is
asserted for the families that meet it and marked xfail, with the measured number, for those that do not yet. The
xfails are strict: a family that comes within the goal fails here until it is moved to MEETS_GOAL, so the goal
cannot be met (or lost) unseen. Pure Python, well under a second.
"""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
from pathlib import Path

import pytest

from ddp_lab.course.plan.cluster_spec import ClusterSpec
from ddp_lab.course.plan import dp_sync, experts
from ddp_lab.course.plan.efficiency import layer_seconds
from ddp_lab.course.plan.fit_to_run import at_kernel_rate, with_matmul_efficiency
from ddp_lab.course.plan.generation_constants import GEMM_EFFICIENCY, KERNEL_GEMM_EFFICIENCY
from ddp_lab.course.plan.model import Transformer
from ddp_lab.course.plan.steptime import step_time
from ddp_lab.course.plan.strategy import Strategy
from ddp_lab.course.plan.traffic import layer_ops, rank_bytes
from ddp_lab.plan import held_aside_runs, held_out, held_out_fit, published
from ddp_lab.plan.cli_fit import HOPPER_GEMM_CEILING
from ddp_lab.plan.held_out import (ASIDE, DEVELOPMENT, FAMILIES, GOAL_FAMILY, GOAL_MEDIAN, by_family, family, missing,
                                   overall)
from ddp_lab.plan.held_out_runs import METRICS, RUNS, HeldOutRun

BOTH = [*RUNS, *held_aside_runs.RUNS]

ROOT = Path(__file__).resolve().parents[1]
# Families whose held-aside median met the goal when last measured (docs/planner.md, "Held-out validation").
MEETS_GOAL = {"fsdp", "dense-a100", "dense-h100-tp", "fp8", "long-context", "moe-coarse", "b200"}


@pytest.fixture(scope="module")
def outcomes():
    return held_out.results()


def test_every_run_names_its_source_and_what_was_assumed():
    """A paper with its table/figure/section, or a repository file with a version, commit or date; a note; a figure."""
    assert len({run.name for run in BOTH}) == len(BOTH)
    for run in RUNS:
        assert re.search(r"arXiv:\d{4}\.\d{5}.*(Table|abstract|Sec\.)|\.md.*(commit|20\d\d|MCore v)", run.source), \
            f"{run.name}: {run.source!r} names no table or version"
        assert run.note and run.published > 0 and run.metric in METRICS


def test_no_held_out_run_is_in_the_fitted_set():
    """The planner's own calibration set (published.RUNS, fitted on) and this one share no run: no model run with the
    same GPU count and figure."""
    fitted = {(run.model.name, run.strategy.gpus, round(run.published)) for run in published.RUNS}
    for run in BOTH:
        model, _, strategy = held_out.build(run) if not missing(run) else (None, None, None)
        if model is not None:
            assert (model.name, strategy.gpus, round(run.published)) not in fitted, run.name


def planner_page() -> str:
    """docs/planner.md with its whitespace runs made single spaces, as its prose is quoted."""
    return " ".join((ROOT / "docs" / "planner.md").read_text().split())


def lesson_13_text() -> str:
    """Lesson 13's cell sources, joined and with whitespace runs made single spaces."""
    cells = json.loads((ROOT / "notebooks" / "13-plan-your-training-run.ipynb").read_text())["cells"]
    return " ".join(" ".join("".join(cell["source"]) for cell in cells).split())


def percent(error) -> str:
    """An error as docs/planner.md writes it in prose: one decimal, a true minus sign."""
    return f"{100 * error:+.1f} %".replace("-", "\N{MINUS SIGN}")


def mlperf_gpt_oss_split(outcomes) -> list:
    """The held-aside outcomes of MLPerf v6.0's gpt-oss-20b runs that split the experts (ep > 1), as README and the
    docs quote them apart from other sources' gpt-oss runs."""
    return [r for r in outcomes if r.split == ASIDE and r.run.name.startswith("MLPerf v6.0 gpt-oss-20b")
            and held_out.splits_experts(r.run.strategy)]


def test_the_split_is_what_the_docstring_says(outcomes):
    """The development runs are held_out_runs.RUNS, the first held-aside set's runs the kernel rate changed (its rule
    was written with their errors in view), the fourth set's (looked at before the per-node dispatch was modelled) and
    the eighth set's H100 run and the ninth set's Qwen3-30B-A3B run (each planned before its set was written down)
    and the whole ninth set (its layouts stand in the development runs' source), and MLPerf v6.0's DeepSeek-V3 runs of
    the eleventh and twelfth sets (looked at before the all-to-alls' overlap was modelled), and NVIDIA's Llama 3.1 8B
    runs at TP 2 x CP 4 on 512 GPUs of the second and fifteenth sets (their misses led to a ring's per-hop latency):
    held_out.MOVED_TO_DEVELOPMENT; the held-aside part is the rest
    of held_aside_runs.RUNS, every later set among them. No run is in both, and no held-aside run is named in
    the planner's library or in the other tests (a check of one would look at its error)."""
    moved = held_out.MOVED_TO_DEVELOPMENT          # frozen by name: a later rule never moves them back
    assert len(held_out.MOVED_BY_KERNEL_RATE) == 29
    assert held_out.MOVED_BY_KERNEL_RATE <= {run.name for run in held_aside_runs.FIRST_SET}
    assert held_out.MOVED_BY_PER_NODE_DISPATCH == {run.name for run in held_aside_runs.FOURTH_SET}
    # the eighth set's H100 run: planned once by hand before the set was written down (never blind)
    assert held_out.SEEN_BEFORE_WRITTEN_DOWN == {held_aside_runs.EIGHTH_SET[0].name, held_aside_runs.NINTH_SET[2].name}
    # the ninth set: its four layouts stand in the development runs' own source document at figures within 3 %
    assert held_out.REPEATS_DEVELOPMENT_SOURCE == {run.name for run in held_aside_runs.NINTH_SET}
    # MLPerf v6.0's DeepSeek-V3 runs: the all-to-alls' overlap they run was modelled after their errors were seen
    assert held_out.MOVED_BY_EP_OVERLAP == {run.name for run in (*held_aside_runs.ELEVENTH_SET,
                                                                 *held_aside_runs.TWELFTH_SET)
                                            if run.model["name"] == "deepseek-v3"}
    # the 8B runs at TP 2 x CP 4 on 512 GPUs: their misses were traced to the ring's latency before it was modelled by hop
    assert held_out.MOVED_BY_RING_LATENCY == {run.name for run in (*held_aside_runs.SECOND_SET,
                                                                   *held_aside_runs.FIFTEENTH_SET)
                                              if run.strategy.get("tp") == 2 and run.strategy.get("cp") == 4}
    assert moved == (held_out.MOVED_BY_KERNEL_RATE | held_out.MOVED_BY_PER_NODE_DISPATCH
                     | held_out.SEEN_BEFORE_WRITTEN_DOWN | held_out.REPEATS_DEVELOPMENT_SOURCE
                     | held_out.MOVED_BY_EP_OVERLAP | held_out.MOVED_BY_RING_LATENCY)
    assert {run.name for run in held_aside_runs.FIRST_SET if held_out.runs_at_kernel_rate(run)} <= moved
    assert {r.run.name for r in outcomes if r.split == DEVELOPMENT} == {run.name for run in RUNS} | moved
    assert {r.run.name for r in outcomes if r.split == ASIDE} == {run.name for run in held_aside_runs.RUNS} - moved
    assert not {run.name for run in RUNS} & {run.name for run in held_aside_runs.RUNS}
    code = "".join(path.read_text() for folder in ("ddp_lab/course/plan", "tests") for path in (ROOT / folder).glob("*.py")
                   if path.name not in ("test_plan_held_aside.py", "test_plan_held_out.py"))
    for run in held_aside_runs.RUNS:
        assert run.name not in code, run.name


def test_the_kernel_rate_rule_is_nvidias_stacks_on_hopper():
    """runs_at_kernel_rate: NVIDIA's software on an H100 or H200 (the generation whose kernels were timed), and no
    other run; build plans those at the kernel rate (0.74 of peak, KERNEL_GEMM_EFFICIENCY) and, asked, any run at
    either rate (the calibrated one 0.55, GEMM_EFFICIENCY)."""
    kernel_rate, calibrated_rate = KERNEL_GEMM_EFFICIENCY["hopper"], GEMM_EFFICIENCY["hopper"]
    assert (kernel_rate, calibrated_rate) == (0.74, 0.55)
    hopper = {"h100-sxm", "h100-hbm2e", "h200"}
    for run in BOTH:
        assert held_out.runs_at_kernel_rate(run) == (held_out.nvidia_stack(run) and run.gpu in hopper), run.name
        if not missing(run):
            kernel = held_out.runs_at_kernel_rate(run)
            assert (held_out.build(run)[1].gpu.matmul_efficiency == kernel_rate) == kernel, run.name
    assert sum(held_out.runs_at_kernel_rate(run) and run.gpu == "h100-sxm" for run in RUNS) == 10
    nemo = next(run for run in RUNS if run.name.startswith("NeMo GPT-3 175B"))
    assert held_out.build(nemo, kernel_rate=False)[1].gpu.matmul_efficiency == calibrated_rate
    assert held_out.predict(nemo, kernel_rate=False) < held_out.predict(nemo)


def test_every_family_the_issue_names_has_runs():
    assert {family(run) for run in RUNS} == set(FAMILIES)
    assert {family(run) for run in held_aside_runs.RUNS} >= {"dense-h100-tp", "long-context", "fp8"}


def test_a_run_naming_a_feature_the_planner_lacks_is_skipped_and_says_which():
    """Negative controls: an unknown Strategy field, an unknown precision, an unknown GPU preset are named; a run
    whose features exist is predicted (an error in predicting it is raised, not skipped)."""
    base = next(run for run in RUNS if run.name == "torchtitan Llama 3 8B, 64 A100s")
    assert missing(base) == []
    odd = dataclasses.replace(base, strategy={**base.strategy, "zero_bubble": True})
    assert missing(odd) == ["Strategy.zero_bubble"]
    assert missing(dataclasses.replace(base, gpu="mi300x")) == ["the mi300x GPU preset"]
    fp4 = dataclasses.replace(base, strategy={**base.strategy, "precision": "fp4"})
    assert missing(fp4) == ['precision "fp4"']
    skipped = held_out.results([odd])[0]
    assert skipped.error is None and "Strategy.zero_bubble" in skipped.skipped
    broken = dataclasses.replace(base, strategy={**base.strategy, "dp": 0})
    with pytest.raises(ValueError, match="dp"):
        held_out.results([broken])


def test_the_families_follow_the_docstrings_rules():
    def run(gpu="h100-sxm", **strategy):
        return HeldOutRun("x", "x", {"preset": "llama3-8b"}, strategy, gpu, "tokens_per_gpu", 1.0, "x")
    assert family(run(gpu="b200", tp=8)) == "b200"
    assert family(dataclasses.replace(run(), model={"preset": "mixtral-8x7b"})) == "moe-coarse"
    assert family(dataclasses.replace(run(), model={"preset": "deepseek-moe-16b"})) == "moe-fine"
    assert family(run(cp=2, tp=8)) == "long-context"
    assert family(run(tp=4)) == "dense-h100-tp"
    assert family(run(gpu="a100-80gb", pp=2)) == "dense-a100"
    assert family(run(precision="fp8")) == "fp8"
    assert family(run(dp=8, zero=3)) == "fsdp"
    # a Blackwell run counts in the Blackwell family and its first workload family; any other run in the latter
    mixtral = {"preset": "mixtral-8x7b", "seq_len": 4096}
    assert held_out.run_families(dataclasses.replace(run(gpu="b200", cp=2), model=mixtral)) == ["b200", "moe-coarse"]
    assert held_out.run_families(run(gpu="gb200", cp=2)) == ["b200", "long-context"]
    assert held_out.run_families(run(gpu="b200", dp=8, zero=3)) == ["b200"]
    assert held_out.run_families(dataclasses.replace(run(gpu="gb300", tp=2), model=mixtral)) == ["b200", "moe-coarse"]
    assert held_out.run_families(run(gpu="b300", dp=8)) == ["b200"]             # Blackwell Ultra is Blackwell
    assert held_out.run_families(run(cp=2, tp=8)) == ["long-context"]            # not dense TP too
    assert held_out.run_families(run(cp=2, precision="fp8")) == ["long-context"]  # not FP8 data-parallel too
    assert held_out.run_families(run(gpu="a100-80gb", cp=2)) == ["long-context"]
    # a plan is in every family whose rule it meets
    assert held_out.plan_families(*held_out.build(run(cp=2, tp=8))) == ["long-context", "dense-h100-tp"]


def test_a_plan_falls_in_the_families_its_run_does():
    """plan_families (for the CLI: which runs say how far to trust a plan) begins with the families a run of it
    counts in (run_families, for the tables)."""
    for run in BOTH:
        if not missing(run):
            counted = held_out.run_families(run)
            assert held_out.plan_families(*held_out.build(run))[:len(counted)] == counted, run.name


@pytest.mark.parametrize("split", [ASIDE, DEVELOPMENT])
def test_by_family_reports_count_median_and_worst(outcomes, split):
    """The summary is computed from the runs: recomputed here from the outcomes, family by family, part by part."""
    rows = {row.family: row for row in by_family(outcomes, split)}
    assert list(rows) == list(FAMILIES)
    for key, row in rows.items():
        errors = sorted(abs(r.error) for r in outcomes
                        if key in r.families and r.split == split and r.error is not None)
        assert row.runs == len(errors)
        if errors:
            middle = len(errors) // 2
            median = errors[middle] if len(errors) % 2 else (errors[middle - 1] + errors[middle]) / 2
            assert row.median == pytest.approx(median) and abs(row.worst) == pytest.approx(errors[-1])
    text = held_out.accuracy_by_family(outcomes)
    print(text)
    lines = text.splitlines()
    placements = [line for line in lines if line.startswith("    ")]     # a MoE family's runs by expert placement
    assert len(lines) == 1 + len(FAMILIES) + len(placements) and len(placements) == 2
    assert all(any(words in line for words in held_out.PLACEMENTS.values()) for line in placements)
    assert lines[0].startswith("held aside (no part of the planner chosen on them): ")
    part = "aside: " if split == ASIDE else "development: "
    for line, row in zip([line for line in lines[1:] if line not in placements], by_family(outcomes, split)):
        assert FAMILIES[row.family] in line
        shown = line[line.index(part):]
        assert shown.startswith(part + (f"{row.runs} run" if row.runs else "no run predicted yet"))
        assert (f"median {row.median:.1%}" in shown) if row.runs else True
        one = held_out.family_line(row.family, outcomes)
        if split == ASIDE:
            assert (f"median error {row.median:.1%}, worst {row.worst:+.1%}" in one) if row.runs else "no published" in one
        else:
            assert one.endswith(f"development: {held_out._runs_text(row)}")


@pytest.mark.parametrize("key", list(FAMILIES))
def test_family_median_within_the_goal(outcomes, key):
    row = next(r for r in by_family(outcomes) if r.family == key)
    print(f"{FAMILIES[key]}: {row.runs} runs, median {row.median}, worst {row.worst}, {row.skipped} skipped")
    if key in MEETS_GOAL:
        assert row.runs and row.median <= GOAL_FAMILY
    elif row.median is None:
        pytest.xfail(f"{FAMILIES[key]}: no run predicted yet")
    elif row.median > GOAL_FAMILY:
        pytest.xfail(f"{FAMILIES[key]}: held-aside median {row.median:.1%} (goal {GOAL_FAMILY:.0%})")
    else:
        pytest.fail(f"{FAMILIES[key]} now meets the goal (median {row.median:.1%}): add it to MEETS_GOAL")


@pytest.mark.xfail(strict=True, reason="fine-grained MoE is beyond 15 % (2026-12-08; the held-aside median is "
                                       "within 10 % since flash attention's rate follows the kernels' sequence and "
                                       "head width): once gpt-oss's sliding windows were modelled its runs all ran "
                                       "slower than planned, as most of the thirteenth set's did (docs/planner.md "
                                       "gives the figures)")
def test_overall_median_within_the_goal(outcomes):
    """On the held-aside part: median error at most 10 %, and no family with runs beyond 15 % (met from the twelfth
    set until gpt-oss's sliding windows were modelled)."""
    total = overall(outcomes)
    print(total)
    assert total["median"] <= GOAL_MEDIAN and not total["families_over_goal"]


@pytest.mark.xfail(strict=True, reason="fine-grained MoE with expert parallelism: the held-aside median is beyond "
                                       "15 % (2026-12-08; docs/planner.md gives it)")
def test_fine_grained_moe_with_expert_parallelism_within_the_family_goal(outcomes):
    """What a MoE plan at scale is: its runs with expert parallelism, which pay for the tokens' journey."""
    rows = {(key, placed): row for key, placed, row in held_out.by_placement(outcomes)}
    assert rows["moe-fine", True].median <= GOAL_FAMILY


def test_the_fine_grained_familys_runs_with_expert_parallelism_miss_most(outcomes):
    """The family's two placements part its runs; those with every expert on each GPU (where no token leaves its GPU)
    miss least, those with expert parallelism most, and the docs' placement table and README say both."""
    rows = {(key, placed): row for key, placed, row in held_out.by_placement(outcomes)}
    family_row = next(r for r in by_family(outcomes) if r.family == "moe-fine")
    assert rows["moe-fine", True].runs + rows["moe-fine", False].runs == family_row.runs
    assert rows["moe-fine", False].median < rows["moe-fine", True].median
    readme = " ".join((ROOT / "README.md").read_text().split())
    for placed in (True, False):      # each as a figure of its own, not the tail of another ("5.0%" in "35.0%")
        figure = f"{rows['moe-fine', placed].median:.1%}"
        assert re.search(r"(?<![\d.])" + re.escape(figure), readme), figure
    # a plan with expert parallelism on Blackwell GPUs is scored on the family's runs with it there
    runs, where = held_out.for_plan("moe-fine", outcomes, "blackwell", split_experts=True)
    assert runs and all(held_out.splits_experts(r.run.strategy) and r.run.gpu.endswith(("b200", "b300"))
                        for r in runs)
    assert where.endswith(f", {held_out.PLACEMENTS[True]} (13 held-aside runs placed otherwise left out)"), where
    # and one with every expert on each GPU on the family's runs placed so, its development part none of them
    line = held_out.family_line("moe-fine", outcomes, "", "blackwell", split_experts=False)
    assert f"{held_out.PLACEMENTS[False]} (" in line and line.endswith("development: none so placed on these GPUs")
    alike = [r for r in runs if r.split == ASIDE]
    page = planner_page()
    assert f"states the {100 * statistics.median(abs(r.error) for r in alike):.1f} % of its {len(alike)} such" in page


@pytest.mark.xfail(strict=True, reason="no held-aside run of Llama 3 405B on 8K+ GPUs without context parallelism "
                                       "(2026-12-06)")
def test_every_family_is_judged_on_held_aside_runs(outcomes):
    assert not overall(outcomes)["families_without_runs"]


def test_docs_show_what_held_out_prints(outcomes):
    """docs/planner.md's held-out tables are `python -m ddp_lab.plan.held_out`'s output."""
    page = (ROOT / "docs" / "planner.md").read_text()
    assert held_out.markdown_tables(outcomes) in page


def test_readme_quotes_the_held_out_medians(outcomes):
    """README's "Held out" bullet (How far to trust the planner) quotes both parts' medians and, for the held-aside
    part, each family's that has runs."""
    readme = (ROOT / "README.md").read_text()
    bullet = " ".join(readme[readme.index("- **Held out**"):readme.index("Every run with its source and error")].split())
    aside, development = overall(outcomes, ASIDE), overall(outcomes, DEVELOPMENT)
    assert f"{aside['runs']} published runs" in bullet and f"median error {aside['median']:.1%}" in bullet
    assert f"{development['runs']} runs" in bullet and f"median error {development['median']:.1%}" in bullet
    fit = held_out_fit.summary()
    if f"{fit['fitted']:.1%}" == f"{fit['calibrated']:.1%}":
        assert f"mostly hurts across models: the median stays at {fit['fitted']:.1%} either way." in bullet
    else:
        assert f"median error {fit['fitted']:.1%}, against {fit['calibrated']:.1%} as planned." in bullet
    later = held_out.ASIDE_NAMES - {run.name for run in held_aside_runs.FIRST_SET}
    assert f"({len(later)} written down before it predicted any)" in bullet
    h200 = min(r.error for r in outcomes if r.run.gpu == "h200" and r.split == ASIDE)
    assert f"Llama 3.1 405B on H200s {h200:.0%}" in bullet
    tp = [r.error for r in outcomes if r.split == ASIDE and "dense-h100-tp" in r.families]
    assert all("GPT-3" in r.run.name for r in outcomes if r.split == ASIDE and "dense-h100-tp" in r.families)
    assert f"(MLPerf's GPT-3 on 256-10,752 H100s, {min(tp):.1%} to {max(tp):+.1%})" in bullet
    dense = sorted(r.error for r in outcomes if r.split == ASIDE and "b200" in r.families
                   and r.run.name.startswith("MLPerf") and "Llama 3.1" in r.run.name)
    assert f"Blackwell {by_family(outcomes, ASIDE)[-1].median:.1%} (MLPerf's dense runs {dense[-1]:+.0%} to " \
           f"{dense[0]:.0%})" in bullet
    split = sorted(r.error for r in mlperf_gpt_oss_split(outcomes))
    assert f"(MLPerf's gpt-oss-20b {split[0]:+.0%} to {split[-1]:+.0%} on H100s, B300s and GB300s;" in bullet
    assert {r.run.gpu for r in mlperf_gpt_oss_split(outcomes)} == {"h100-sxm", "b300", "gb300"}
    untuned = sorted(r.error for r in outcomes if r.split == ASIDE
                     and r.run.name.startswith("Megatron-Bridge verification gpt-oss"))
    assert len(untuned) == 2 and f"untuned gpt-oss recipes {untuned[0]:+.0%} and {untuned[1]:+.0%};" in bullet
    long = sorted(r.error for r in outcomes if r.run.name in {run.name for run in held_aside_runs.NINETEENTH_SET})
    assert len(long) == 4 and f"Qwen3-235B-A22B at 16K-128K tokens on H100s {long[0]:.1%} to {long[-1]:+.1%};" in bullet
    for row in by_family(outcomes, ASIDE):
        if row.runs:
            assert f"{row.median:.1%}" in bullet, f"README's bullet lacks {FAMILIES[row.family]}'s {row.median:.1%}"


def test_one_measured_run_per_stack_fits_its_own_figure_and_helps_only_at_other_scales_of_the_same_model():
    """held_out_fit.py: each group's first run, fitted, reproduces its published figure. The fit brings the other
    runs closer in the median where the group is one model and one code at other scales or on other machines
    (MLPerf's GPT-3 rounds; v6.0's gpt-oss-20b on B300s, one configuration on seven submitters' machines; v5.1's
    Llama 3.1 on B200s and B300s), not across a miss outside the matmuls (Cisco's H100s, from DP 64 to TP 2),
    and hurts where it carries one model's misses to others (DGX Cloud's tables, OLMo-core, MaxText's A3 runs,
    Megatron-Bridge's 26.08 GB200 rows); Automodel's group is left out, its first run faster than the planner gives it
    with every matmul at peak. docs/planner.md shows the table the module prints."""
    fitted = held_out_fit.fitted_groups()
    assert fitted and all(len(group.runs) >= 1 for group in fitted)
    for group in fitted:
        first = next(run for run in held_aside_runs.RUNS if run.name == group.fitted_on)
        model, cluster, strategy = held_out.build(first)
        ratio = step_time(model, cluster, strategy).total / \
            step_time(model, with_matmul_efficiency(cluster, group.efficiency), strategy).total
        assert held_out.predict(first) * ratio == pytest.approx(first.published, rel=1e-6), group.fitted_on
    total = held_out_fit.summary(fitted)
    # over all groups the fit may help or hurt the median, or leave it where it was (helping in some groups, hurting
    # in others, below): the docs' verb follows the figures
    assert total["runs"] == sum(len(g.runs) for g in fitted)
    assert held_out_fit.markdown_table(fitted) in (ROOT / "docs" / "planner.md").read_text()
    by_group = {(group.source, group.gpu): (group, held_out_fit.summary([group])) for group in fitted}
    page = planner_page()
    def pair(summary):
        return f"{100 * summary['calibrated']:.1f} % to {100 * summary['fitted']:.1f} %"
    planned, fitted_median = (f"{100 * total[key]:.1f}" for key in ("calibrated", "fitted"))
    verb = ("leaves the median where it was" if planned == fitted_median else
            "helps in the median" if total["fitted"] < total["calibrated"] else "hurts the median")
    assert f"{verb} ({planned} % as planned, {fitted_median} % fitted)" in page
    v60_h100 = by_group[("mlcommons/training_results_v6.0", "h100-sxm")][0]
    cisco = [(planned, fitted) for name, planned, fitted in v60_h100.runs if "Llama" in name]
    assert len(cisco) == 2 and (f"({percent(cisco[0][0])} and {percent(cisco[1][0])} to "
                                f"{percent(cisco[0][1])} and {percent(cisco[1][1])})") in page
    for round_, gpu in (("v5.1", "b200"), ("v5.1", "b300"), ("v3.1", "h100-sxm"), ("v3.0", "h100-sxm"),
                        ("v4.0", "h100-sxm"), ("v4.1", "h100-sxm")):
        assert pair(by_group[(f"mlcommons/training_results_{round_}", gpu)][1]) in page, (round_, gpu)
    for key in (("mlcommons/training_results_v3.1", "h100-sxm"), ("mlcommons/training_results_v4.1", "h100-sxm"),
                ("mlcommons/training_results_v4.0", "h100-sxm"), ("mlcommons/training_results_v6.0", "b300"),
                ("mlcommons/training_results_v5.1", "b200"), ("mlcommons/training_results_v5.1", "b300"),
                ("NVIDIA-NeMo/Megatron-Bridge", "h100-sxm")):
        assert by_group[key][1]["fitted"] < by_group[key][1]["calibrated"], key
    # Megatron-Bridge's verification runs: fitted on Qwen3-8B, carried to the untuned gpt-oss recipes
    cards = by_group[("NVIDIA-NeMo/Megatron-Bridge", "h100-sxm")]
    assert "Qwen3-8B" in cards[0].fitted_on and f"it helps, by little ({pair(cards[1])})" in page
    for key in (("NVIDIA/dgxc-benchmarking", "h100-sxm"),
                ("NVIDIA/dgxc-benchmarking", "gb200"), ("Dao-AILab/flash-attention", "a100-80gb"),
                ("allenai/OLMo-core", "h100-sxm"), ("AI-Hypercomputer/maxtext", "h100-sxm"),
                ("NVIDIA-NeMo/Megatron-Bridge", "gb200"), ("mlcommons/training_results_v5.1", "h100-sxm")):
        assert by_group[key][1]["fitted"] > by_group[key][1]["calibrated"], key
    # Automodel's first run ran faster than the planner gives it with every matmul at peak: no efficiency fits it
    automodel = held_out_fit.unfittable()[("NVIDIA-NeMo/Automodel", "h100-sxm")]
    assert ("NVIDIA-NeMo/Automodel", "h100-sxm") not in by_group and "faster than the planner gives this plan with " \
        "every matmul at peak" in automodel
    assert ("Automodel's group is left out: its first run, Qwen3-30B-A3B on 8 H100s, ran faster than the planner "
            "gives it with every matmul at peak, so no efficiency reproduces it") in page
    assert held_out_fit.groups()[("NVIDIA-NeMo/Automodel", "h100-sxm")][0].name.startswith("Automodel Qwen3-30B-A3B")
    # docs/planner.md: DGX Cloud's fit sits just above the fastest GEMM timed on an H100 (on the planner's scale),
    # OLMo-core's further above it; OLMo-core fitted on its 1B run: its 13B runs come out 38-47 % too fast
    dgxc = by_group[("NVIDIA/dgxc-benchmarking", "h100-sxm")][0]
    assert HOPPER_GEMM_CEILING < dgxc.efficiency < HOPPER_GEMM_CEILING + 0.02
    olmo, olmo_total = by_group[("allenai/OLMo-core", "h100-sxm")]
    assert olmo.efficiency > dgxc.efficiency and olmo_total["fitted"] > olmo_total["calibrated"] + 0.05
    assert (f"Cloud H100 fit ({dgxc.efficiency:.3f}) sits just above the fastest GEMM timed on an H100, read on the "
            f"planner's scale ({HOPPER_GEMM_CEILING}), and OLMo-core's ({olmo.efficiency:.3f}) further above it") in page
    thirteen = [fitted for name, _, fitted in olmo.runs if name.startswith("OLMo-core 13B")]
    assert len(thirteen) == 2 and all(0.37 < error < 0.48 for error in thirteen), thirteen   # docs: "38-47 %"


def test_every_held_aside_source_begins_with_its_repository():
    """held_out_fit.group_key reads the repository off the source's first word."""
    for run in held_aside_runs.RUNS:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", held_out_fit.group_key(run)[0]), run.source


def test_a_plan_is_scored_on_the_runs_at_its_own_rate(outcomes):
    """A plan at the calibrated constants is scored on every held-out run at them; one at the kernel rate on the runs
    as the rule plans them (the outcomes the tables show). The dense H100 TP 4-8 family's held-aside runs are all
    NVIDIA's code, and all but Azure's (its files not NVIDIA's git blobs) are planned as NVIDIA's stacks: 5.5 % as
    planned, 18.3 % at the calibrated constant, the figure a default plan states."""
    h100s = ClusterSpec.preset("h100-sxm", nodes=8)
    calibrated, words = held_out.at_plans_rate(h100s)
    assert words == "at the calibrated rate"
    assert all(r.predicted == held_out.predict(r.run, kernel_rate=False) for r in calibrated[:5] if r.error is not None)
    kernel, words = held_out.at_plans_rate(at_kernel_rate(h100s))
    assert words == "NVIDIA's stacks at the kernel rate, other runs at the calibrated rate" and [r.error for r in kernel] == [r.error for r in outcomes]
    row = {name: next(r for r in by_family(o) if r.family == "dense-h100-tp") for name, o in
           (("calibrated", calibrated), ("kernel", kernel))}
    assert (round(row["kernel"].median, 3), round(row["calibrated"].median, 3)) == (0.055, 0.183)
    assert held_out.at_plans_rate(ClusterSpec.preset("a100-80gb"))[1] == "at the calibrated rate"


def test_the_first_sets_h100_runs_of_nvidia_stacks_came_out_slow_at_the_calibrated_rate(outcomes):
    """What docs/planner.md, README, lesson 13 and fit_to_run.py say of the first held-aside set: at the calibrated
    0.55 every H100 run of NVIDIA's stacks (DGX Cloud's NeMo and MaxText recipes, NeMo Automodel, JAX-Toolbox's
    MaxText, NVIDIA's MLPerf Training v4.0 submissions on NeMo) came out slower than it ran, 10-34 % but for
    JAX-Toolbox's one-node run and DGX Cloud's GPT-3 175B on 2,048 H100s (8.9 % each) and one of Automodel's two
    gpt-oss runs (8.7 %; the other 11.1 %, half their layers windowed): one bias, not scatter. At the kernel rate (0.74) the same 29
    runs miss by a median of 7.8 %, both ways (-20.0 % to +17.8 %); they are development
    runs now. Of the first set's runs that stay aside: MaxText's own one-node run 6.7 % slow, its runs on 2-16 VMs
    (HSDP) 8-21 % fast; OLMo-core's PyTorch FSDP runs on H100s miss both ways (six slow by 8-19 %, the 13B runs
    fast, median 10.2 %); the A100 and GB200 runs within 17 % either way."""
    first = {run.name for run in held_aside_runs.FIRST_SET}
    moved = [r for r in outcomes if r.run.name in first and held_out.runs_at_kernel_rate(r.run)]
    calibrated = {r.run.name: held_out.predict(r.run, kernel_rate=False) / r.run.published - 1 for r in moved}
    gpt3_2048 = "DGXC GPT-3 175B TP 4 x PP 8, 2,048 H100s"
    jax_toolbox = [calibrated[r.run.name] for r in moved if r.run.source.startswith("NVIDIA/JAX-Toolbox")]
    gpt_oss = sorted(calibrated[r.run.name] for r in moved if "gpt-oss" in r.run.name)
    assert len(moved) == 29 and all(r.split == DEVELOPMENT and r.run.gpu == "h100-sxm" for r in moved)
    assert len(jax_toolbox) == 1 and round(jax_toolbox[0], 3) == round(calibrated[gpt3_2048], 3) == -0.089, \
        (jax_toolbox, calibrated[gpt3_2048])
    assert [round(error, 3) for error in gpt_oss] == [-0.111, -0.087]
    assert (f"and {-100 * gpt_oss[1]:.1f} % for one of NeMo Automodel's gpt-oss runs ({-100 * gpt_oss[0]:.1f} % the "
            f"other)") in planner_page()
    assert all(-0.35 < calibrated[r.run.name] < -0.10 for r in moved
               if not r.run.source.startswith("NVIDIA/JAX") and "gpt-oss" not in r.run.name
               and r.run.name != gpt3_2048), sorted(calibrated.values())
    kernel = [r.error for r in moved]
    assert round(statistics.median(map(abs, kernel)), 3) == 0.078
    assert (round(min(kernel), 3), round(max(kernel), 3)) == (-0.200, 0.178)
    aside = [r for r in outcomes if r.split == ASIDE and r.run.name in first]
    olmo = [r.error for r in aside if r.run.source.startswith("allenai/OLMo-core")]
    maxtext = [r.error for r in aside if r.run.source.startswith("AI-Hypercomputer/maxtext")]
    others = [r.error for r in aside if r.run.gpu != "h100-sxm"]
    assert len(olmo) + len(maxtext) + len(others) == len(aside)
    assert len(maxtext) == 5 and -0.07 < maxtext[0] < -0.06 and all(0.08 < error < 0.22 for error in maxtext[1:])
    assert max(maxtext) == maxtext[-1], maxtext                           # docs: "the most on 16 VMs"
    assert len(olmo) == 8 and min(olmo) < -0.15 and max(olmo) > 0.15, sorted(olmo)
    assert sum(error < 0 for error in olmo) == 6 and all(-0.20 < error < -0.08 for error in olmo if error < 0)
    assert all(r.error > 0 for r in aside if r.run.name.startswith("OLMo-core 13B"))
    assert round(statistics.median(abs(error) for error in olmo), 3) == 0.102, sorted(olmo)
    assert len(others) == 6 and all(abs(error) < 0.17 for error in others), sorted(others)


def test_the_h100_bias_shows_in_development_too_and_not_in_the_memory_bound_work(outcomes):
    """docs/planner.md ("Where these runs miss"): at the calibrated rate the dense NeMo and Megatron-Bridge H100
    development rows came out 11-27 % slow, as the first held-aside set's did; at the kernel rate -12.3 % to +3.6 %.
    The memory-bound traffic the planner charges is 2-5 % of an H100 layer's time for those layouts, too little for
    kernel fusion to explain the bias."""
    dense = [r for r in outcomes if r.split == DEVELOPMENT and r.run.gpu == "h100-sxm"
             and r.run.name.startswith(("NeMo", "Megatron-Bridge Llama"))]
    calibrated = [held_out.predict(r.run, kernel_rate=False) / r.run.published - 1 for r in dense]
    assert len(dense) == 6 and all(-0.27 < error < -0.10 for error in calibrated), sorted(calibrated)
    kernel = [r.error for r in dense]
    assert (round(min(kernel), 3), round(max(kernel), 3)) == (-0.123, 0.036), sorted(kernel)
    h100 = ClusterSpec.preset("h100-sxm").gpu

    def memory_bound_share(model, strategy):
        moved = sum(rank_bytes(layer_ops(model, strategy), strategy, strategy.recompute))
        return moved / h100.memory_bandwidth / layer_seconds(model, strategy, h100).total

    seventy = memory_bound_share(Transformer.preset("llama3-70b"), Strategy(dp=4, tp=4, pp=4, sequence_parallel=True))
    eight = memory_bound_share(Transformer.preset("llama3-8b"), Strategy(dp=8, cp=2, zero=1))
    assert (round(seventy, 3), round(eight, 3)) == (0.030, 0.048)


def test_olmo_core_with_cudnn_attention_where_its_nightly_may_have_run_it(outcomes):
    """docs/planner.md ("Where these runs miss"): OLMo-core's rows on the 2.6 nightly planned with cuDNN's attention
    instead of the rule's FlashAttention-2 class give -9.9 % to +32.8 %, median 6.9 % (all eight with cuDNN's: 4.8 %);
    a sensitivity worked out after the held-aside errors were seen, not the held-aside score (those stay pinned)."""
    olmo = [r.run for r in outcomes if r.run.source.startswith("allenai/OLMo-core")]

    def nightly(run):
        torch = held_aside_runs.OLMO_CORE_TORCH
        return next(version for commit, version in torch.items() if f"commit {commit}" in run.source)

    def error(run, cudnn):
        run = dataclasses.replace(run, strategy={**run.strategy, "flash_kernel": "cudnn"}) if cudnn else run
        return held_out.predict(run) / run.published - 1

    assert sorted({nightly(run) for run in olmo}) == ["2.5.0.dev20240826", "2.6.0.dev20241009"]
    on_26 = [error(run, nightly(run).startswith("2.6")) for run in olmo]
    assert (round(min(on_26), 3), round(max(on_26), 3)) == (-0.099, 0.328), sorted(on_26)
    assert round(statistics.median(map(abs, on_26)), 3) == 0.069
    assert round(statistics.median(abs(error(run, True)) for run in olmo), 3) == 0.048


def test_per_node_dispatch_moved_the_runs_that_send_experts_across_nodes_both_ways():
    """The runs that state DeepEP or HybridEP plan with the per-node dispatch (experts.dispatch_seconds); with their
    ep groups across nodes it moved three development runs: the ModelZoo's Qwen3-235B on TP 2 x EP 32 from -25.1 %
    to +3.4 % and Automodel's gpt-oss-120b on EP 64 from -9.0 % to -1.1 %, but Megatron-Bridge's Qwen3-30B-A3B on
    EP 16 over two nodes from -12.5 % to +45.9 % (docs/planner.md). The sixth held-aside set's Qwen3-30B-A3B, the same
    layout in BF16 (written down after), would be -27.5 % with NCCL's all-to-all and is +19.2 % with the HybridEP
    its source states; so the thirteenth set's three runs whose ep groups span HGX nodes (-27.6 %, -8.5 % and -43.5 %
    against +40.5 %, +22.3 % and -6.9 %). Where the ep group stays in a node (or an NVLink domain) the per-node
    dispatch changes only the sort of the received rows that NCCL's all-to-all needs (experts.sorts_received_rows):
    those runs, each with several experts on a rank, are planned a little faster with it, none by 8 points."""
    def error(run, dispatch):
        moved = dataclasses.replace(run, strategy={**run.strategy, "moe_dispatch": dispatch})
        return round(held_out.predict(moved) / run.published - 1, 3)
    across, inside = {}, {}
    for run in BOTH:
        if run.strategy.get("moe_dispatch") == "per-node" and not missing(run):
            before, after = error(run, "all-to-all"), error(run, "per-node")
            model, cluster, strategy = held_out.build(run)
            if experts.dispatch_crosses_nodes(cluster, strategy):
                across[run.name] = (before, after)
            elif before != after:
                assert model.moe.experts // strategy.ep > 1 and 0 < after - before < 0.08, run.name
                inside[run.name] = (before, after)
            else:
                assert model.moe.experts // strategy.ep == 1 or strategy.ep == 1, run.name
    assert across == {
        "Megatron-Bridge Qwen3-30B-A3B EP 16, 16 H100s, FP8": (-0.125, 0.459),
        "Automodel gpt-oss-120b FSDP x EP 64, 64 H100s": (-0.09, -0.011),
        "Megatron-MoE-ModelZoo Qwen3-235B-A22B TP 2 x EP 32 x PP 8, 256 H100s": (-0.251, 0.034),
        "NVIDIA skills Qwen3-30B-A3B EP 16, 16 H100s": (-0.275, 0.192),
        "Megatron-LM recipe Qwen3-235B-A22B TP 2 x PP 4 x VP 12 x EP 16, 128 B200s, MXFP8": (-0.276, 0.405),
        "Megatron-LM recipe Qwen3-235B-A22B TP 2 x EP 16, 128 B300s, MXFP8": (-0.085, 0.223),
        "Megatron-LM recipe DeepSeek-V3 PP 8 x VP 2 x EP 32, 256 B200s, MXFP8": (-0.435, -0.069)}
    assert len(inside) > 20


def test_a_family_whose_held_aside_runs_all_missed_one_way_says_which(outcomes):
    """The trust line says when every held-aside run of a family (two or more) missed the same way: dense A100 runs
    with TP ran slower than planned (read the plan's speed as an upper bound), NVIDIA's dense H100 TP runs faster
    than planned at the calibrated constant; a family whose runs missed both ways says neither: FSDP; fine-grained MoE
    over all GPUs (the thirteenth set's DeepSeek-V3 runs on B200s and GB300s came out faster) and on Hopper GPUs
    (the nineteenth set's runs at 32K-128K tokens came out faster, the family's others there slower)."""
    assert "each ran slower than planned" in held_out.family_line("dense-a100", outcomes, generation="ampere")
    assert "than planned" not in held_out.family_line("moe-fine", outcomes, generation="hopper")
    assert "than planned" not in held_out.family_line("moe-fine", outcomes)
    long = {run.name for run in held_aside_runs.NINETEENTH_SET}
    hopper = [r.error for r in outcomes if "moe-fine" in r.families and r.split == ASIDE and r.error is not None
              and held_out.generation_of(r.run.gpu) == "hopper"]
    at_32k = [r.error for r in outcomes if r.run.name in long and held_out.run_seq_len(r.run) >= 32768]
    assert len(at_32k) == 3 and max(at_32k) < 0 < max(hopper)
    calibrated = held_out.at_plans_rate(ClusterSpec.preset("h100-sxm", nodes=8))[0]
    assert "each ran faster than planned" in held_out.family_line("dense-h100-tp", calibrated)
    assert "than planned" not in held_out.family_line("dense-h100-tp", outcomes)    # at the kernel rate, both ways
    assert "than planned" not in held_out.family_line("fsdp", outcomes)
    for key, sign, generation in (("dense-a100", 1, "ampere"), ("dense-h100-tp", -1, "hopper")):
        source = outcomes if sign > 0 else calibrated
        errors = [r.error for r in source if key in r.families and r.split == ASIDE and r.error is not None
                  and held_out.generation_of(r.run.gpu) == generation]
        assert len(errors) >= 2 and all(e * sign > 0 for e in errors), key


def test_a_family_with_a_run_on_a_gpu_without_a_preset_still_scores_plans():
    """A run naming a GPU with no preset is skipped (`missing`); scoping a family's runs to a plan's GPU generation
    passes over it instead of failing."""
    odd = dataclasses.replace(held_aside_runs.RUNS[0], gpu="mi300x")
    outcomes = held_out.results([odd, *held_aside_runs.RUNS[1:3]])
    assert outcomes[0].skipped == "needs the mi300x GPU preset" and held_out.generation_of("mi300x") is None
    key = outcomes[0].families[0]
    hopper = [r for r in outcomes if key in r.families and r.run.gpu.startswith("h100")]
    assert hopper                                            # the family has runs on the plan's generation
    runs, _ = held_out.for_generation(key, outcomes, "hopper")
    assert runs == hopper                                    # the run without a preset is not one of them
    assert held_out.family_line(key, outcomes, "", "ampere").startswith("held aside, ")


def test_the_docs_quote_the_runs_moved_by_the_overlap_as_planned_now(outcomes):
    """docs/planner.md gives MLPerf's DeepSeek-V3 runs, moved to development once --ep-overlap was modelled, at their
    errors with the overlap, and the ninth set's with it too: each figure as the code plans it now."""
    page = planner_page()
    moved = [r for r in outcomes if r.run.name in held_out.MOVED_BY_EP_OVERLAP]
    ninth = [r for r in outcomes if r.run.name in held_out.REPEATS_DEVELOPMENT_SOURCE]
    assert len(moved) == 7 and len(ninth) == 4 and all(r.split == DEVELOPMENT for r in moved + ninth)
    for r in moved + ninth:
        assert r.run.strategy.get("ep_overlap")
        assert percent(r.error) in page, r.run.name


def test_the_docs_give_the_imbalance_each_expert_parallel_run_would_need(outcomes):
    """docs/planner.md lists, per group of held-aside runs that split the experts, the routing imbalance that would
    explain its error (held_out.implied_imbalance), and the error left at the 1.25 cap the H100 gpt-oss runs' expert
    capacity factor sets: each figure as the code computes it now. The planner itself plans every run balanced."""
    page = planner_page()
    split = [r for r in outcomes if r.split == ASIDE and r.predicted is not None
             and held_out.splits_experts(r.run.strategy)]
    assert all("expert_imbalance" not in r.run.strategy for r in outcomes)

    def span(runs) -> str:
        values = sorted(held_out.implied_imbalance(r.run) for r in runs)
        assert values and None not in values
        return f"{values[0]:.2f}" if values[0] == values[-1] else f"{values[0]:.2f}-{values[-1]:.2f}"

    def errors(runs) -> str:
        low, high = (f"{100 * e:+.1f} %" for e in (min(r.error for r in runs), max(r.error for r in runs)))
        return low if low == high else f"{low} to {high}"

    def named(*words, gpu=None):
        runs = [r for r in split if all(w in r.run.name for w in words) and (gpu is None or r.run.gpu == gpu)]
        assert runs, words
        return runs
    coarse = [r for r in split if "moe-coarse" in r.families and held_out.implied_imbalance(r.run) is not None]
    grok = named("DGXC Grok-1")
    assert all(r.error < 0 and held_out.implied_imbalance(r.run) is None for r in grok)
    assert {r.run.name for r in split if "moe-coarse" in r.families} == {r.run.name for r in coarse + grok}
    assert (f"DGX Cloud's Grok-1 runs on 128 GB200s ran faster than planned ({percent(min(r.error for r in grok))} to "
            f"{percent(max(r.error for r in grok))}), which no imbalance explains") in page
    groups = {"coarse MoE runs (8 experts, top-2) the planner puts faster than they ran ({}): ": coarse,
              "Qwen3-30B-A3B on 16 H100s ({}): ": named("NVIDIA skills Qwen3-30B-A3B"),
              "gpt-oss-20b at CP 2 × EP 4 on GB300s ({}): ": named("gpt-oss-20b CP 2 x EP 4", gpu="gb300"),
              "and on B300s ({}): ": named("gpt-oss-20b CP 2 x EP 4", gpu="b300"),
              "TP 2 × CP 4 × EP 8 on 512 GB300s ({}; ": named("TP 2 x CP 4 x EP 8"),
              "TP 2 × EP 4 on H100s ({}): ": named("gpt-oss-20b TP 2 x EP 4"),
              "DeepSeek-V3 on 128 GB200s ({}): ": named("DGXC DeepSeek-V3"),
              "verification runs of gpt-oss on H100s (the eighteenth set; {}): ": named("Megatron-Bridge verification")}
    for words, runs in groups.items():       # the error as planned, then (but for one, below) the X that closes it
        said = words.format(errors(runs))
        assert (said if said.endswith("; ") else said + span(runs)) in page, said
    assert f"buffers at 7 shares): {span(named('TP 2 x CP 4 x EP 8'))}, a large X for its error" in page
    (small,) = named("Megatron-Bridge verification gpt-oss-20b")         # more than all the tokens on one rank
    ep = small.run.strategy["ep"]
    assert held_out.implied_imbalance(small.run) > ep
    assert (f"gpt-oss-20b's {held_out.implied_imbalance(small.run):.2f} is beyond the {ep} that its EP {ep} allows "
            f"(every token routed to one rank's experts), so uneven routing cannot explain it") in page
    # Megatron-LM's recipe index forces balanced routing: no X, its errors both ways
    recipes = [r for r in split if r.run.name.startswith("Megatron-LM recipe")]
    slow, fast = [r for r in recipes if r.error > 0], [r for r in recipes if r.error <= 0]
    assert len(recipes) == 10 and all(held_out.implied_imbalance(r.run) is None for r in fast)
    assert (f"Megatron-LM's recipe index (the thirteenth set), which forces balanced routing, so that no imbalance "
            f"explains it: {errors(slow)} for {len(slow)} runs, {errors(fast)} for {len(fast)}") in page
    long = [r for r in split if r.run.name in {run.name for run in held_aside_runs.NINETEENTH_SET}]
    shortest = next(r for r in long if r.run.name.endswith("16,384 tokens"))
    longer = [r for r in long if r is not shortest]
    assert len(long) == 4 and all(r.error < 0 and held_out.implied_imbalance(r.run) is None for r in longer)
    assert shortest.error > 0
    assert (f"the ModelZoo's Qwen3-235B-A22B at 16K to 128K tokens on H100s (the nineteenth set), routing forced to "
            f"balance too: {errors(long)}; the three at 32K tokens or more ran faster than planned, which no imbalance "
            f"explains, and the {held_out.implied_imbalance(shortest.run):.2f} that would close the 16K run's error is "
            f"what the forced balance rules out") in page
    fine = {r.run.name for r in split if "moe-fine" in r.families}
    assert fine == {r.run.name for runs in (*groups.values(), recipes, long) for r in runs
                    if "moe-fine" in r.families}                                                   # none left out
    # the sentence after the list: fine-grained MoE meets the goal with every expert on each GPU, not with them split
    placed = {split_: row.median for key, split_, row in held_out.by_placement(outcomes) if key == "moe-fine"}
    assert placed[False] <= GOAL_FAMILY < placed[True]
    assert (f"fine-grained MoE meets it with every expert on each GPU, {100 * placed[False]:.1f} %, and not with its "
            f"experts split, {100 * placed[True]:.1f} %") in page
    capped = []
    for r in named("gpt-oss-20b TP 2 x EP 4"):
        at_cap = dataclasses.replace(r.run, strategy={**r.run.strategy, "expert_imbalance": 1.25})
        capped.append(f"{100 * (held_out.predict(at_cap) / r.run.published - 1):+.1f} %")
    assert f"at 1.25 the planner is still {' and '.join(capped)}" in page


# Each run's figure just before a ring's latency came to be counted hop by hop (collectives.ring_latency), as
# docs/planner.md records it: the pins of tests/test_plan_held_aside.py then. For every run of the fourteenth to
# seventeenth sets, and of the second and seventh sets below, it is the figure the run was predicted at once (their pins
# had not moved since); gpt-oss-20b's runs had been moved since by the sliding windows (+41.9 %, +36.3 %, +2.6 % and
# +21.5 % when predicted). Every run of those sets, and every earlier run the change moved by half a point or more as
# printed (one decimal), found by comparing all held-aside pins before and after it (AFTER_RING_LATENCY, below); they are
# named with both figures in the paragraph on that change (test_the_ring_latencys_moves_are_what_the_docs_say).
BEFORE_RING_LATENCY = {
    "MLPerf v3.1 GPT-3 175B TP 4 x PP 8, 4,096 H100s, FP8": -0.052,
    "MLPerf v3.1 GPT-3 175B TP 4 x PP 8, 6,144 H100s, FP8": -0.055,
    "MLPerf v3.1 GPT-3 175B TP 4 x PP 8, 8,192 H100s, FP8": -0.059,
    "MLPerf v3.1 GPT-3 175B TP 4 x PP 8, 10,240 H100s, FP8": -0.076,
    "MLPerf v3.1 GPT-3 175B TP 4 x PP 8, 10,752 H100s, FP8": -0.075,
    "MLPerf v5.1 Llama 3.1 8B TP 2 x CP 4, 512 GB200s, FP8": -0.553,
    "InternLM 7B TP 2, 1,024 A100s": 0.346,
    "MLPerf v6.0 gpt-oss-20b TP 2 x EP 4, 64 H100s, FP8": 0.569,
    "MLPerf v6.0 gpt-oss-20b TP 2 x EP 4, 128 H100s, FP8": 0.489,
    "NeMo docs Mixtral 8x7B EP 8, 64 B200s, FP8": 0.038,
    "MLPerf v6.0 gpt-oss-20b TP 2 x CP 4 x EP 8, 512 GB300s, MXFP8 (NVIDIA)": 0.030,
    "MLPerf v6.0 gpt-oss-20b CP 2 x EP 4, 64 B300s, MXFP8 (Nebius)": 0.245,
    "MLPerf v5.0 Llama 3.1 405B TP 4 x PP 8 x CP 2, 512 H200s, FP8 (Nebius)": -0.212,
    "MLPerf v5.0 Llama 3.1 405B TP 4 x PP 8 x CP 2, 1,024 H200s, FP8 (Nebius)": -0.205,
    "MLPerf v5.1 Llama 3.1 8B CP 2, 64 H200s, FP8 (HPE)": -0.091,
    "MLPerf v5.1 Llama 3.1 8B DP 64, 64 H100s, FP8 (Cisco)": -0.025,
    "MLPerf v5.1 Llama 3.1 8B TP 2, 128 H100s, FP8 (Cisco)": 0.289,
    "MLPerf v5.1 Llama 3.1 8B DP 16, 16 B200s, FP8 (Dell)": -0.113,
    "MLPerf v5.1 Llama 3.1 8B CP 2, 64 B200s, FP8 (Oracle)": -0.045,
    "MLPerf v5.1 Llama 3.1 8B DP 16, 16 B200s, FP8 (University of Florida)": -0.146,
    "MLPerf v5.1 Llama 3.1 8B CP 2, 256 B200s, FP8 (University of Florida)": -0.248,
    "MLPerf v5.1 Llama 3.1 8B CP 2, 64 B200s, FP8 (Verda)": -0.043,
    "MLPerf v5.1 Llama 3.1 405B TP 4 x PP 8 x CP 2, 256 B200s, FP8 (University of Florida)": -0.118,
    "MLPerf v5.1 Llama 3.1 405B TP 4 x PP 8 x CP 2, 448 B200s, FP8 (University of Florida)": -0.111,
    "MLPerf v5.1 Llama 3.1 8B DP 8, 8 B300s, FP8 (Dell)": -0.167,
    "MLPerf v5.1 Llama 3.1 8B DP 8, 8 B300s, FP8 (Supermicro)": -0.163,
    "MLPerf v5.1 Llama 3.1 8B CP 2, 72 GB300s, FP8 (Lambda)": -0.012,
    "MLPerf v5.1 Llama 3.1 8B CP 2, 72 GB300s, FP8 (NVIDIA)": -0.104,
    "MLPerf v5.1 Llama 3.1 8B TP 2 x CP 4, 512 GB300s, FP8 (NVIDIA)": -0.572,
    "MLPerf v3.0 GPT-3 175B TP 4 x PP 8, 768 H100s, FP8 (CoreWeave)": 0.029,
    "MLPerf v3.0 GPT-3 175B TP 4 x PP 8, 3,584 H100s, FP8 (CoreWeave)": 0.074,
    "MLPerf v3.1 GPT-3 175B TP 4 x PP 8, 10,752 H100s, FP8 (Azure)": -0.174,
    "MLPerf v4.0 GPT-3 175B TP 4 x PP 8, 512 H100s, FP8 (Sustainable Metal Cloud)": -0.002,
    "MLPerf v4.1 GPT-3 175B TP 4 x PP 8, 1,536 H100s, FP8 (Oracle)": -0.035,
    "MLPerf v4.1 GPT-3 175B TP 4 x PP 8, 3,072 H100s, FP8 (Oracle)": 0.105,
    "MLPerf v6.0 Llama 3.1 8B TP 2, 64 H100s, FP8 (Cisco)": -0.027,
    "MLPerf v6.0 Llama 3.1 8B TP 2, 128 H100s, FP8 (Cisco)": -0.039,
    "MLPerf v6.0 Llama 3.1 8B DP 16, 16 H200s, FP8 (Cisco)": -0.040,
    "MLPerf v6.0 Llama 3.1 8B CP 2, 64 B200s, FP8 (SCITIX)": -0.042,
}


# Each held-aside run's figure just after the ring's latency came to be counted hop by hop, for the 21 it moved by half
# a point or more as printed (one decimal): the pins of tests/test_plan_held_aside.py then, as docs/planner.md records
# them in the paragraph on that change ("from ... to ..."). Later changes move some of them; the paragraph gives those
# runs' figures now after the record.
AFTER_RING_LATENCY = {
    "MLPerf v3.1 GPT-3 175B TP 4 x PP 8, 4,096 H100s, FP8": -0.047,
    "MLPerf v3.1 GPT-3 175B TP 4 x PP 8, 6,144 H100s, FP8": -0.048,
    "MLPerf v3.1 GPT-3 175B TP 4 x PP 8, 8,192 H100s, FP8": -0.050,
    "MLPerf v3.1 GPT-3 175B TP 4 x PP 8, 10,240 H100s, FP8": -0.057,
    "MLPerf v3.1 GPT-3 175B TP 4 x PP 8, 10,752 H100s, FP8": -0.055,
    "InternLM 7B TP 2, 1,024 A100s": 0.351,
    "MLPerf v6.0 gpt-oss-20b TP 2 x EP 4, 64 H100s, FP8": 0.584,
    "MLPerf v6.0 gpt-oss-20b TP 2 x EP 4, 128 H100s, FP8": 0.521,
    "NeMo docs Mixtral 8x7B EP 8, 64 B200s, FP8": 0.044,
    "MLPerf v6.0 gpt-oss-20b TP 2 x CP 4 x EP 8, 512 GB300s, MXFP8 (NVIDIA)": 0.519,
    "MLPerf v6.0 gpt-oss-20b CP 2 x EP 4, 64 B300s, MXFP8 (Nebius)": 0.327,
    "MLPerf v5.1 Llama 3.1 8B CP 2, 64 H200s, FP8 (HPE)": -0.080,
    "MLPerf v5.1 Llama 3.1 8B DP 64, 64 H100s, FP8 (Cisco)": -0.019,
    "MLPerf v5.1 Llama 3.1 8B TP 2, 128 H100s, FP8 (Cisco)": 0.301,
    "MLPerf v5.1 Llama 3.1 8B CP 2, 64 B200s, FP8 (Oracle)": 0.008,
    "MLPerf v5.1 Llama 3.1 8B CP 2, 256 B200s, FP8 (University of Florida)": -0.052,
    "MLPerf v5.1 Llama 3.1 8B CP 2, 64 B200s, FP8 (Verda)": 0.009,
    "MLPerf v3.1 GPT-3 175B TP 4 x PP 8, 10,752 H100s, FP8 (Azure)": -0.159,
    "MLPerf v6.0 Llama 3.1 8B TP 2, 64 H100s, FP8 (Cisco)": -0.021,
    "MLPerf v6.0 Llama 3.1 8B TP 2, 128 H100s, FP8 (Cisco)": -0.029,
    "MLPerf v6.0 Llama 3.1 8B CP 2, 64 B200s, FP8 (SCITIX)": 0.011,
}


def test_the_ring_latencys_moves_are_what_the_docs_say(outcomes):
    """docs/planner.md's paragraph on the ring's per-hop latency (collectives.ring_latency): the two runs whose misses
    led to it moved to the development part, at their figures now; each held-aside run it moved by half a point or
    more, from its figure predicted once to its figure after the change, and, where a later change (flash attention's
    rate by the kernels' sequence and head width) moved it as printed, its figure now; the held-aside median and the
    calibration set's, as the change left them and now."""
    page = planner_page()
    start = page.index("Then a ring's latency came to be counted hop by hop")
    paragraph = page[start:page.index("The *eighteenth* set", start)]
    now = {r.run.name: r for r in outcomes}
    moved = sorted(held_out.MOVED_BY_RING_LATENCY)
    assert all(now[name].split == DEVELOPMENT for name in moved)
    assert (f"now at {percent(now[moved[0]].error)} and {percent(now[moved[1]].error)}") in paragraph
    aside = [name for name, once in BEFORE_RING_LATENCY.items()
             if name not in held_out.MOVED_BY_RING_LATENCY and abs(AFTER_RING_LATENCY.get(name, once) - once) > 0.0045]
    assert aside == list(AFTER_RING_LATENCY) and len(aside) == 21 and "it moved 21 by half a point or more" in paragraph
    since = paragraph[paragraph.index("Since flash attention's rate follows the kernels' sequence and head width"):]
    moved_since = []
    for name in aside:
        assert now[name].split == ASIDE, name
        assert percent(BEFORE_RING_LATENCY[name]) in paragraph and percent(AFTER_RING_LATENCY[name]) in paragraph, name
        if percent(now[name].error) != percent(AFTER_RING_LATENCY[name]):
            moved_since.append(name)
            assert percent(now[name].error) in since, name
    assert len(moved_since) == 10 and "of those 21 Azure's" in since
    split = [r.error for r in mlperf_gpt_oss_split(outcomes)]
    assert "MLPerf's other gpt-oss-20b runs with their experts split do (+32.7 % to +78.2 %)" in paragraph   # the record
    assert (f"MLPerf's gpt-oss-20b runs with their experts split at {percent(min(split))} to {percent(max(split))}"
            in since)
    # the sets written down after the change are not in its record
    later = {run.name for run in held_aside_runs.EIGHTEENTH_SET + held_aside_runs.NINETEENTH_SET}
    then = [r for r in outcomes if r.run.name not in later]
    with_them = statistics.median(abs(r.error) for r in then
                                  if r.split == ASIDE or r.run.name in held_out.MOVED_BY_RING_LATENCY)
    aside_now = overall(then, ASIDE)
    assert ("from 10.5 % over 104 runs to 10.4 % over 102 (10.6 % had the two runs stayed aside)") in paragraph
    assert "the calibration set's median (below) from 4.1 % to 4.5 %" in paragraph                   # the record
    assert aside_now["runs"] == 102
    assert (f"the median of those 102 held-aside runs is {100 * aside_now['median']:.1f} % ({100 * with_them:.1f} % "
            f"had the two stayed aside), the calibration set's {100 * published.summary()['median']:.1f} %") in since


def test_the_docs_give_the_thirteenth_sets_figures_as_the_code_computes_them(outcomes):
    """Megatron-LM's recipe index, predicted once: its median error, and what two recipes of one layout (Qwen3-30B-A3B
    on 16 GB200s) show that a layout-level plan cannot see: the whole step in CUDA graphs ran faster than the partial
    graphs by a quarter where the planner gives both one figure, and MXFP8 slower than BF16 where it gives it more."""
    page = planner_page()
    rows = [r for r in outcomes if r.run.name in {run.name for run in held_aside_runs.THIRTEENTH_SET}]
    assert len(rows) == 10 and all(r.split == ASIDE for r in rows)
    assert "with the whole step in CUDA graphs); median 22.3 %" in page          # predicted once
    assert abs(statistics.median(abs(r.error) for r in rows) - 0.223) < 0.005       # within half a point since
    bf16, partial, stashed = (next(r for r in rows if r.run.name.endswith(end)) for end in
                              ("EP 16, 16 GB200s", "16 GB200s, MXFP8", "MXFP8, paged stash"))
    assert partial.predicted == stashed.predicted
    graphs = held_out.stack_gap()    # what a fine-grained MoE plan's assumptions quote
    assert graphs == stashed.run.published / partial.run.published - 1
    assert ("fine-grained MoE (more than 16 experts) that host-side time and kernel fusion count only as in the runs "
            "that set the matmul rate (Megatron-LM's two MXFP8 recipes of one Qwen3-30B-A3B layout ran "
            f"{100 * graphs:.0f} % apart, the faster with the whole step in CUDA graphs, a fused grouped MLP and a "
            "paged stash, where the planner gives both one figure)") in page
    assert all(part in stashed.run.note for part in ("full_iteration", "FUSED_GROUPED_MLP", "paged stash"))
    mxfp8, planned = partial.run.published / bf16.run.published - 1, partial.predicted / bf16.predicted - 1
    assert ("fuses the grouped expert MLP and keeps the experts' activations in a paged stash ran "
            f"{100 * graphs:.0f} % faster than the other; MXFP8 ran {-100 * mxfp8:.0f} % slower than BF16 there, "
            f"where the planner gives it {100 * planned:.0f} % more") in page


def test_the_docs_give_the_fourteenth_sets_figures_as_the_code_computes_them(outcomes):
    """MLPerf's H200 runs of other submitters, predicted once at the calibrated rate (the rule as written: they are
    not NVIDIA's stack by `nvidia_stack`), and what the kernel rate that NVIDIA's own H100 runs of the same 405B code
    get would have given them."""
    page = planner_page()
    names = [run.name for run in held_aside_runs.FOURTEENTH_SET]
    rows = [next(r for r in outcomes if r.run.name == name) for name in names]
    assert all(r.split == ASIDE and r.run.gpu == "h200" and not held_out.runs_at_kernel_rate(r.run) for r in rows)
    assert all(r.error < 0 for r in rows)      # each faster than planned
    once = [BEFORE_RING_LATENCY[r.run.name] for r in rows]                                    # the record
    assert f"predicted once: {percent(once[0])}, {percent(once[1])} and {percent(once[2])}, each faster than planned" \
        in page
    assert (f"each faster than planned ({percent(rows[0].error)}, {percent(rows[1].error)} and {percent(rows[2].error)} "
            f"since flash attention's rate follows the kernels' sequence and head width)") in page              # now
    kernel = [held_out.predict(run, kernel_rate=True) / run.published - 1 for run in held_aside_runs.FOURTEENTH_SET]
    assert f"would come out {', '.join(map(percent, kernel[:-1]))} and {percent(kernel[-1])}" in page
    third = [r for r in outcomes if r.run.name in {run.name for run in held_aside_runs.THIRD_SET}]
    assert all(held_out.runs_at_kernel_rate(r.run) for r in third)
    assert f"(the third set: {percent(third[0].error)} and {percent(third[1].error)})" in page


def test_the_docs_give_the_fifteenth_sets_figures_as_the_code_computes_them(outcomes):
    """MLPerf's remaining Llama 3.1 submissions, predicted once: every figure docs/planner.md gives for them, by GPU
    in the set's order, and their median; none is planned at the kernel rate (Cisco's H100 runs are its own code,
    the rest are on Blackwell GPUs)."""
    page = planner_page()
    names = [run.name for run in held_aside_runs.FIFTEENTH_SET]
    rows = [next(r for r in outcomes if r.run.name == name) for name in names]
    assert all((r.split == ASIDE or r.run.name in held_out.MOVED_BY_RING_LATENCY)
               and not held_out.runs_at_kernel_rate(r.run) for r in rows)
    def listed(errors):
        return ", ".join(map(percent, errors[:-1])) + f" and {percent(errors[-1])}"
    rows = [dataclasses.replace(r, error=BEFORE_RING_LATENCY[r.run.name]) for r in rows]           # as predicted once
    by_gpu = {gpu: [r.error for r in rows if r.run.gpu == gpu] for gpu in ("h100-sxm", "b200", "b300", "gb300")}
    dense_8b = [r.error for r in rows if r.run.gpu == "b200" and "8B" in r.run.name]
    b200_405b = [r.error for r in rows if r.run.gpu == "b200" and "405B" in r.run.name]
    assert len(dense_8b) + len(b200_405b) == len(by_gpu["b200"]) and sum(map(len, by_gpu.values())) == len(rows)
    median = statistics.median(abs(r.error) for r in rows)
    blackwell = sorted(abs(r.error) for r in rows if r.run.gpu != "h100-sxm" and r.error < 0)
    assert len(blackwell) == len(rows) - 2 and 0.01 <= blackwell[0] and blackwell[-2] <= 0.25 < blackwell[-1]
    assert "As predicted once, every Blackwell run ran faster than planned, by 1-25 % but for one" in page
    lesson = lesson_13_text()
    second = "MLPerf v5.1 Llama 3.1 8B TP 2 x CP 4, 512 GB200s, FP8"
    cp2 = [r for r in rows if r.run.gpu == "b200" and r.run.name.startswith("MLPerf v5.1 Llama 3.1 8B CP 2,")]
    then, now_ = sorted(-r.error for r in cp2), sorted(next(o.error for o in outcomes if o.run.name == r.run.name)
                                                       for r in cp2)
    assert (f"4-25 % faster than planned then, miss by {100 * now_[0]:+.1f} % to {100 * now_[-1]:+.1f} % now" in lesson
            and (round(100 * then[0]), round(100 * then[-1])) == (4, 25))
    assert (f"by 1-25 % but for one on 512 GB300s, which missed by {100 * rows[-1].error:.0f} % as the second set's on "
            f"512 GB200s did by {100 * BEFORE_RING_LATENCY[second]:.0f} %") in lesson
    now = {r.run.name: r.error for r in outcomes if r.run.name in held_out.MOVED_BY_RING_LATENCY}
    assert f"they miss by {100 * now[rows[-1].run.name]:.0f} % and {100 * now[second]:.0f} %" in lesson
    assert (f"on H100s {listed(by_gpu['h100-sxm'])} (DP 64, and TP 2), on B200s {listed(dense_8b)} (Llama 3.1 8B) "
            f"and {listed(b200_405b)} (405B), on B300s {listed(by_gpu['b300'])}, on GB300s {listed(by_gpu['gb300'])}; "
            f"median {100 * median:.1f} %") in page


def test_the_fifteenth_sets_largest_miss_is_the_rings_latency_term_in_the_gradient_sync():
    """docs/planner.md: for Llama 3.1 8B at TP 2 x CP 4 on 512 GB300s the planner's gradient sync over the 256 ranks
    of dp x cp (32 of them in each 64-GPU rack) took 0.19 s against 0.04 s of compute, 0.17 s of it the ring's
    latency term with every hop at the network's latency, where the published step took 0.09 s. Counted hop by hop
    since (collectives.ring_latency: the network's latency on the 7 hops between racks, NVLink's on the other 248),
    the sync takes 0.11 s, still longer than that step."""
    run = next(run for run in held_aside_runs.FIFTEENTH_SET if run.name.endswith("512 GB300s, FP8 (NVIDIA)"))
    model, cluster, strategy = held_out.build(run)
    page = planner_page()
    planned = step_time(model, cluster, strategy)
    silent = step_time(model, dataclasses.replace(cluster, inter_node_latency=0.0, intra_node_latency=0.0), strategy)
    # every hop at the network's latency, as the planner charged it when the set was predicted: the NVLink hops too
    flat = step_time(model, dataclasses.replace(cluster, intra_node_latency=cluster.inter_node_latency), strategy)
    assert strategy.dp * strategy.cp == 256 and cluster.gpus_per_node // strategy.tp == 32
    assert round(flat.dp_comm, 2) == 0.19 and round(planned.compute, 2) == 0.04
    assert round(flat.dp_comm - silent.dp_comm, 2) == 0.17
    step = strategy.global_batch * model.seq_len / (run.published * strategy.gpus)
    assert round(step, 2) == 0.09
    ranks, racks = strategy.dp * strategy.cp, strategy.gpus // cluster.gpus_per_node
    assert (racks, cluster.inter_node_latency, cluster.intra_node_latency) == (8, 10e-6, 5e-6)
    buckets = dp_sync.gradient_buckets(model, cluster, strategy, 0, "reduce_scatter", 2)
    assert sum(seconds > 0 for seconds in buckets) == 34
    # then: N - 1 hops of each reduce-scatter and all-gather, per bucket, each at the network's latency
    assert flat.dp_comm - silent.dp_comm == pytest.approx(2 * 34 * (ranks - 1) * cluster.inter_node_latency)
    # now: 7 hops between racks at the network's latency, the other 248 at NVLink's (NCCL's src/graph/tuning.cc)
    hops = (racks - 1) * cluster.inter_node_latency + (ranks - racks) * cluster.intra_node_latency
    assert planned.dp_comm - silent.dp_comm == pytest.approx(2 * 34 * hops)
    assert round(planned.dp_comm, 2) == 0.11 and planned.dp_comm > step          # the sync alone, still longer
    assert "over 34 buckets" in page
    assert ("256 ranks of dp × cp took 0.19 s against 0.04 s of compute, and 0.17 s of it was the ring's latency "
            "term") in page and "ranks sit 32 to a rack" in page and "(the step took 0.09 s)" in page
    assert ("(the 248 hops inside racks at the planner's NVLink 5 µs), the sync alone takes 0.11 s and would still "
            "outlast the step") in page


def test_the_docs_give_the_sixteenth_sets_figures_as_the_code_computes_them(outcomes):
    """Other organisations' MLPerf GPT-3 runs, predicted once: those of NVIDIA's implementation by the files
    (held_aside_runs.NVIDIA_CODE_BY_OTHERS) at the kernel rate, Azure's (the same code with its comments taken out,
    other git blobs) at the calibrated rate; and what the kernel rate would have given Azure's."""
    page = planner_page()
    rows = [next(r for r in outcomes if r.run.name == run.name) for run in held_aside_runs.SIXTEENTH_SET]
    at_kernel = [r for r in rows if held_out.runs_at_kernel_rate(r.run)]
    assert all(r.split == ASIDE for r in rows) and len(at_kernel) == 5
    assert {r.run.name for r in at_kernel} <= held_aside_runs.NVIDIA_CODE_BY_OTHERS
    (azure,) = [r for r in rows if r not in at_kernel]
    e = [percent(BEFORE_RING_LATENCY[r.run.name]) for r in rows]                                    # the record
    assert (f"Predicted once: {e[0]} and {e[1]} (CoreWeave), {e[2]} (Azure), {e[3]} (Sustainable Metal Cloud), {e[4]} "
            f"and {e[5]} (Oracle);") in page and "Azure" in azure.run.name
    n = [percent(r.error) for r in rows]                                                                    # now
    assert (f"(Oracle); {n[0]} and {n[1]}, {n[2]}, {n[3]}, {n[4]} and {n[5]} since flash attention's rate follows the "
            f"kernels' sequence and head width.") in page
    assert min(r.error for r in at_kernel) < 0 < max(r.error for r in at_kernel)     # both ways
    second = [r.error for r in outcomes if r.run.name in {run.name for run in held_aside_runs.SECOND_SET}
              and "GPT-3" in r.run.name]
    assert f"(the second set: {percent(min(second))} to {percent(max(second))})" in page
    kernel = held_out.predict(azure.run, kernel_rate=True) / azure.run.published - 1
    oracle = [held_out.predict(r.run, kernel_rate=False) / r.run.published - 1 for r in rows if "Oracle" in r.run.name]
    assert (f"Azure's, at the kernel rate, would come out {percent(kernel)}, and Oracle's, at the calibrated rate, "
            f"{percent(oracle[0])} and {percent(oracle[1])}, each worked out after the prediction") in page



def test_the_docs_give_the_moe_runs_figures_as_planned_now(outcomes):
    """docs/planner.md's figures for the MoE runs that counting a MoE layer's activations over its experts' widths
    moved (expert_compute.expert_activation_seconds), as the planner gives them now: the seventh and tenth sets'
    runs and the gpt-oss runs of the sliding windows' paragraph (after each set's record), the fifth set's two runs
    and the development runs they are compared with, and the summary of where MoE plans stand."""
    page = planner_page()
    error = {r.run.name: r.error for r in outcomes}

    def named(*words, gpu=None) -> list[float]:
        found = [r.error for r in outcomes if all(w in r.run.name for w in words) and (gpu is None or r.run.gpu == gpu)]
        assert found, words
        return found

    def span(errors) -> str:
        return f"{percent(min(errors))} to {percent(max(errors))}"
    since = "since a MoE layer's activations span its experts' widths, it permutes only the tokens it dispatches and it runs its experts' tensor-parallel collectives, not a dense FFN's"
    seventh = [error[run.name] for run in held_aside_runs.SEVENTH_SET]
    assert f"{', '.join(percent(e) for e in seventh[:2])} and {percent(seventh[2])} {since}" in page
    b200 = named("MLPerf v6.0 gpt-oss-20b DP 8, 8 B200s")
    assert f"{span(b200)} {since}" in page
    windows = page[page.index("Then gpt-oss's sliding windows were modelled"):page.index("The *thirteenth*")]
    data_parallel = [r.error for r in outcomes if r.run.name.startswith("MLPerf v6.0 gpt-oss-20b DP")
                     and r.run.gpu in ("b300", "gb300")]
    assert (f"the data-parallel ones {span(data_parallel)} and {span(b200)}, CP 2 × EP 4 "
            f"{span(named('gpt-oss-20b CP 2 x EP 4', gpu='gb300'))} and "
            f"{percent(named('gpt-oss-20b CP 2 x EP 4', gpu='b300')[0])}, TP 2 × CP 4 × EP 8 "
            f"{percent(named('gpt-oss-20b TP 2 x CP 4 x EP 8')[0])}, Cisco's "
            f"{' and '.join(percent(e) for e in sorted(named('MLPerf v6.0 gpt-oss-20b TP 2 x EP 4')))})") in windows
    fifth = [error[run.name] for run in held_aside_runs.FIFTH_SET]
    assert f"ran {100 * fifth[0]:.1f} % and {100 * fifth[1]:.1f} % slower than planned" in page
    assert f"(its gpt-oss-120b {percent(error['Megatron-Bridge gpt-oss-120b EP 8 x PP 4, 64 H100s'])} and" in page
    automodel = named("Automodel")
    assert f"PyTorch-native runs miss both ways ({span(automodel)})".replace("\N{MINUS SIGN}", "-") in page
    cp_ep = named("MLPerf v6.0 gpt-oss-20b CP 2 x EP 4")
    assert f"(MLPerf v6.0's gpt-oss-20b at CP 2 × EP 4, {100 * min(cp_ep):+.0f} % to {100 * max(cp_ep):+.0f} %;" in page
    assert f"and gpt-oss-120b {100 * error['Megatron-Bridge 26.08 gpt-oss-120b EP 64, 64 GB200s, MXFP8']:+.0f} %." in page
    dgxc = [error[name] for name in ("DGXC DeepSeek-V3 TP 2 x PP 8 x EP 64, 512 H100s",
                                     "DGXC DeepSeek-V3 TP 2 x PP 4 x EP 32, 128 GB200s")]
    assert f"miss the same way: {percent(dgxc[0])} on 512 H100s, {percent(dgxc[1])} on 128 GB200s." in page
    assert (f", +204.6 % since a MoE layer permutes only the tokens it dispatches, {percent(dgxc[1])} since a rank "
            f"holding several experts sorts the rows NCCL's all-to-all brought it.") in page              # eighth set
    inside = error["Megatron-MoE-ModelZoo Qwen3-235B-A22B TP 4 x EP 8 x PP 8, 256 H100s"]
    assert f"the ModelZoo's Qwen3-235B with its experts inside each node {percent(inside)})" in page
    qwen_recipes = [e for name, e in error.items() if name.startswith("Megatron-LM recipe Qwen3") and e > 0]
    assert (f"Megatron-LM's Qwen3 recipes {100 * min(qwen_recipes):+.0f} % to {100 * max(qwen_recipes):+.0f} %, its "
            f"DeepSeek-V3") in page
    gb200 = sorted(error[name] for name in held_out.MOVED_BY_EP_OVERLAP if "GB200s" in name)
    assert (f"on GB200s {100 * gb200[0]:+.0f} % to {100 * gb200[1]:+.0f} %, but {100 * gb200[2]:+.0f} % on 8,192 "
            f"GPUs") in page
    # the one-run fit's figures for these groups (held_out_fit.py)
    fitted = {(group.source, group.gpu): group for group in held_out_fit.fitted_groups()}
    v60 = {gpu: {name: (planned, after) for name, planned, after in fitted["mlcommons/training_results_v6.0", gpu].runs}
           for gpu in ("h100-sxm", "gb200", "gb300")}
    oss_128 = v60["h100-sxm"]["MLPerf v6.0 gpt-oss-20b TP 2 x EP 4, 128 H100s, FP8"]
    assert f"from {percent(oss_128[0])} to {percent(oss_128[1])};" in page
    scale = v60["gb200"]["MLPerf v6.0 DeepSeek-V3 TP 2 x PP 4 x VP 4 x EP 32, 8,192 GB200s, MXFP8 (NVIDIA)"]
    gb200_total = held_out_fit.summary([fitted["mlcommons/training_results_v6.0", "gb200"]])
    assert (f"DeepSeek-V3 on GB200s ({100 * gb200_total['calibrated']:.1f} % to {100 * gb200_total['fitted']:.1f} %: "
            f"fitted at 512 GPUs, the 8,192-GPU run still {percent(scale[1])},") in page
    gb300_total = held_out_fit.summary([fitted["mlcommons/training_results_v6.0", "gb300"]])
    assert f"gpt-oss-20b ({100 * gb300_total['calibrated']:.1f} % to {100 * gb300_total['fitted']:.1f} %, the" in page
    dgxc_total = held_out_fit.summary([fitted["NVIDIA/dgxc-benchmarking", "h100-sxm"]])
    assert (f"DGX Cloud's H100 tables ({100 * dgxc_total['calibrated']:.1f} % to {100 * dgxc_total['fitted']:.1f} %)"
            in page)

def test_the_docs_give_the_eighteenth_sets_figures_as_the_code_computes_them(outcomes):
    """Megatron-Bridge's verification runs, predicted once (+10.0 %, +219.3 % and +332.2 %): Qwen3-8B near its figure,
    the two untuned gpt-oss recipes several times slower than planned; and their figures now, since flash attention's
    rate follows the kernels' sequence and head width, and since a MoE layer's activations span its experts' widths
    and it permutes only the tokens it dispatches and runs its experts' tensor-parallel collectives, not a dense FFN's,
    and since a rank holding several experts sorts the rows NCCL's all-to-all brought it."""
    page = planner_page()
    rows = [next(r for r in outcomes if r.run.name == run.name) for run in held_aside_runs.EIGHTEENTH_SET]
    assert len(rows) == 3 and all(r.split == ASIDE for r in rows)
    qwen, small, large = rows
    assert "Qwen3-8B" in qwen.run.name and "gpt-oss-20b" in small.run.name and "gpt-oss-120b" in large.run.name
    assert ("Predicted once: +10.0 % (Qwen3-8B), +219.3 % and +332.2 % (gpt-oss-20b and gpt-oss-120b): those two ran "
            "3.2 and 4.3 times slower than planned") in page                                          # the record
    assert ("slower than planned (+10.4 %, +212.2 % and +325.3 % since flash attention's rate follows the kernels' "
            "sequence and head width; ") in page                                                         # the record
    assert ("; +10.4 %, +216.3 % and +329.0 % since a MoE layer's activations span its experts' widths, it permutes "
            "only the tokens it dispatches and it runs its experts' tensor-parallel collectives, not a dense FFN's; "
            ) in page                                                                                    # the record
    assert (f"; {percent(qwen.error)}, {percent(small.error)} and {percent(large.error)} since a rank holding several "
            f"experts sorts the rows NCCL's all-to-all brought it)") in page  # now
    assert qwen.error < 0.11 and small.error > 2 and large.error > 3           # still several times slower
    assert all(r.run.model["vocab"] == 32000 for r in (small, large))


def test_the_docs_give_the_nineteenth_sets_figures_as_the_code_computes_them(outcomes):
    """The ModelZoo's Qwen3-235B-A22B at 16K-128K tokens on H100s, predicted once (-5.0 %, -18.3 %, -29.1 % and
    -35.3 %) and as planned now: from 32K tokens on faster than planned, the more so the longer the sequence (at 16K
    tokens a little slower); the planner's compute
    alone against the published step (what it overcharges grows with the sequence); the development part's
    long-sequence H100 runs that miss the same way; and the fine-grained family's medians with the set, as the
    paragraph after it gives them."""
    page = planner_page()
    rows = [next(r for r in outcomes if r.run.name == run.name) for run in held_aside_runs.NINETEENTH_SET]
    assert len(rows) == 4 and all(r.split == ASIDE for r in rows)
    errors = [r.error for r in rows]
    assert errors == sorted(errors, reverse=True) and errors[1] < 0 < errors[0] < 0.05   # longer sequence, larger miss
    assert "Predicted once: −5.0 %, −18.3 %, −29.1 % and −35.3 % (" in page                  # the record
    assert ("(−4.6 %, −18.1 %, −28.9 % and −35.2 % since flash attention's rate follows the kernels' sequence and head "
            "width, `attention_kernels.shape_factor`; ") in page                                        # the record
    assert ("; −0.2 %, −15.5 %, −27.6 % and −34.5 % since a MoE layer permutes only the tokens it dispatches; "
            in page)                                                                                      # the record
    assert ("; " + ", ".join(percent(e) for e in errors[:3]) + f" and {percent(errors[3])} since it runs its experts' "
            "tensor-parallel collectives, not a dense FFN's), the first held-aside fine-grained MoE runs on H100s that "
            "ran faster than planned from 32K tokens on, the more so the longer the sequence") in page     # now
    ratios = []
    for r in rows:
        model, cluster, strategy = held_out.build(r.run)
        published_step = strategy.dp * strategy.grad_accum * model.seq_len / (r.run.published * strategy.gpus)
        ratios.append(step_time(model, cluster, strategy).compute / published_step)
    assert ratios == sorted(ratios) and ratios[0] < 1 < ratios[1]
    assert ("The planner's compute alone comes to " + ", ".join(f"{x:.2f}" for x in ratios[:3])
            + f" and {ratios[3]:.2f} times the published step") in page
    assert ("from 32K tokens on its compute alone outlasts the published step, so neither the all-to-alls nor the "
            "ring can account for the miss there") in page
    # the MoE layer's recomputation, planned by the rule as the nearer setting: none
    for r in rows:
        to_none, to_full = held_aside_runs.moe_recompute_distances(held_out.run_seq_len(r.run))
        assert to_none < to_full and r.run.strategy.get("recompute", "none") == "none"
    # lesson 13's account: from 32K tokens on, attention (the scores' share of Megatron's count) is most of the work
    counts = held_aside_runs.MEGATRON_QWEN3_235B_A22B_FLOPS_PER_TOKEN_AT
    scores = {s: 6 * 94 * held_aside_runs.qwen3_235b_a22b_layer_macs(s)[2] / count for s, count in counts.items()}
    assert scores[16384] < 0.5 < min(scores[s] for s in (32768, 65536, 131072))
    lesson = lesson_13_text()
    assert (f"ran {100 * errors[0]:.1f} % slower than planned at 16K tokens and {-100 * errors[1]:.1f}-"
            f"{-100 * errors[3]:.1f} % faster from 32K on, the more so the longer the sequence: from 32K tokens on, "
            "attention is most of the work, and the planner's compute alone outlasts the published step") in lesson
    for r in rows:                                    # the published step as the run states it: GBS 256 of s tokens
        assert "GBS 256" in r.run.source and r.run.strategy["dp"] * r.run.strategy["grad_accum"] == 256
    dev_long = [r.error for r in outcomes if r.split == DEVELOPMENT and r.error is not None
                and r.run.gpu.startswith("h100") and held_out.run_seq_len(r.run) >= 32768]
    assert len(dev_long) == 5 and max(dev_long) < 0
    assert f"(torchtitan's Llama 3.1 8B at 32K-256K tokens and the Llama 3 paper's 405B at 128K: " \
           f"{percent(min(dev_long))} to {percent(max(dev_long))})" in page
    before = [r for r in outcomes if r.split == ASIDE and held_out.generation_of(r.run.gpu) == "hopper"
              and r.run.strategy.get("cp", 1) > 1 and r.run.name not in {row.run.name for row in rows}]
    assert before and all(held_out.run_seq_len(r.run) == 8192 for r in before)
    assert "every held-aside context-parallel run on Hopper GPUs before this set was at 8,192 tokens" in page
    assert (f"its runs at 32K-128K tokens on H100s, which count in that family, not in context parallelism's, miss by "
            f"{percent(min(errors))} to {percent(sorted(errors)[-2])})") in page
    assert all(tuple(r.families) == ("moe-fine",) for r in rows)
    placed = {split_: row for key, split_, row in held_out.by_placement(outcomes) if key == "moe-fine"}
    family_row = next(r for r in by_family(outcomes) if r.family == "moe-fine")
    split = [r.error for r in outcomes if r.split == ASIDE and "moe-fine" in r.families
             and held_out.splits_experts(r.run.strategy)]
    assert (f"The fine-grained family's held-aside median is now {100 * family_row.median:.1f} % over "
            f"{family_row.runs} runs") in page
    assert (f"the {placed[True].runs} with expert parallelism by {100 * placed[True].median:.1f} % "
            f"({percent(min(split))} to {percent(max(split))})") in page
    hopper = [r for r in outcomes if r.split == ASIDE and "moe-fine" in r.families
              and held_out.generation_of(r.run.gpu) == "hopper" and r.run.name not in {row.run.name for row in rows}]
    assert min(r.error for r in hopper) > 0       # before this set, each fine-grained run on Hopper ran slower than planned
    assert "the first held-aside fine-grained MoE runs on H100s that ran faster than planned" in page
    # and they ran at 4K-8K tokens: the upper-bound advice is limited to those
    assert {held_out.run_seq_len(r.run) for r in hopper} <= {4096, 8192}
    assert "read the planner's throughput as an upper bound at 4K-8K tokens" in page
    assert (f"at 16K tokens the nineteenth set's run was {100 * errors[0]:.1f} % slower than planned, and at 32K to "
            f"128K tokens its runs {-100 * errors[1]:.1f}-{-100 * errors[3]:.1f} % faster") in page
    # the 17 of the 27 runs with experts split that are on Blackwell GPUs: what such a plan states
    blackwell, _ = held_out.for_plan("moe-fine", outcomes, "blackwell", split_experts=True)
    blackwell = [r for r in blackwell if r.split == ASIDE]
    split_runs = [r for r in outcomes if r.split == ASIDE and "moe-fine" in r.families
                  and held_out.splits_experts(r.run.strategy)]
    assert len(split_runs) == 27 and len(blackwell) == 17
    assert (f"states the {100 * statistics.median(abs(r.error) for r in blackwell):.1f} % of its 17 such held-aside "
            f"runs there.") in page
    # lesson 13's summary: the held-aside median, and the fine-grained family's, whole and by placement, most of the
    # split runs slower than planned
    aside = overall(outcomes, ASIDE)
    assert f"the median error is {100 * aside['median']:.1f} % (the goal is 10 %)" in lesson
    assert (f"by a median of {100 * family_row.median:.1f} % (the goal for a family is 15 %): "
            f"{100 * placed[False].median:.1f} % with every expert on each GPU and {100 * placed[True].median:.1f} % "
            f"with expert parallelism, most of them slower than planned") in lesson
    assert sum(e > 0 for e in split) > len(split) / 2
    # its account of MLPerf's gpt-oss-20b runs, by placement, and of the coarse runs that judge that family now
    def span(errors, scale=100) -> str:
        return f"{scale * min(errors):.0f}-{scale * max(errors):.0f} %"
    mlperf = [r for r in outcomes if r.split == ASIDE and r.run.name.startswith("MLPerf v6.0 gpt-oss-20b")]
    together = [r.error for r in mlperf if not held_out.splits_experts(r.run.strategy)]
    apart = [r.error for r in mlperf_gpt_oss_split(outcomes)]
    h100 = [r.error for r in mlperf_gpt_oss_split(outcomes) if r.run.gpu == "h100-sxm"]
    gb300 = [r.error for r in mlperf_gpt_oss_split(outcomes) if r.run.gpu == "gb300" and "CP 2 x EP 4" in r.run.name]
    assert min(together + apart) > 0
    assert (f"by {span(together)} with every expert on each GPU and by {span(apart)} with expert parallelism "
            f"({span(h100)} on H100s, {span(gb300)} at CP 2 x EP 4 on GB300s)") in lesson
    cards = sorted(1 + r.error for r in outcomes if r.run.name.startswith("Megatron-Bridge verification gpt-oss"))
    assert f"ran {cards[0]:.1f} and {cards[1]:.1f} times slower than planned" in lesson
    coarse = [abs(r.error) for r in outcomes if r.split == ASIDE and "moe-coarse" in r.families]
    assert f"(Grok-1 and NeMo's Mixtral runs, {min(coarse):.1%}-{max(coarse):.1%} off)".replace("%-", "-") \
        .replace("%", " %") in lesson


def test_the_docs_give_the_seventeenth_sets_figures_as_the_code_computes_them(outcomes):
    """MLPerf v6.0's Llama 3.1 runs on H100s to GB200s, predicted once: Cisco's at the kernel rate, which
    NVIDIA_SOFTWARE_ELSEWHERE gives every Cisco v6.0 submission by its source (not NVIDIA_CODE_BY_OTHERS: by the files
    neither of its folders is NVIDIA's code), with what the calibrated rate makes of them; SCITIX's; and the one layout
    Cisco ran in v5.1 and v6.0, which the planner gives one figure."""
    page = planner_page()
    lesson = lesson_13_text()
    rows = [next(r for r in outcomes if r.run.name == run.name) for run in held_aside_runs.SEVENTEENTH_SET]
    cisco = [r for r in rows if "(Cisco)" in r.run.name]
    (scitix,) = [r for r in rows if "(SCITIX)" in r.run.name]
    assert len(cisco) == 3 and all(r.split == ASIDE for r in rows)
    assert all(held_out.runs_at_kernel_rate(r.run) and r.run.name not in held_aside_runs.NVIDIA_CODE_BY_OTHERS
               and r.run.source.startswith(held_out.NVIDIA_SOFTWARE_ELSEWHERE) for r in cisco)
    def listed(errors):
        return f"{percent(errors[0])}, {percent(errors[1])} and {percent(errors[2])}"
    calibrated = [held_out.predict(r.run, kernel_rate=False) / r.run.published - 1 for r in cisco]
    once = [BEFORE_RING_LATENCY[r.run.name] for r in cisco]                                        # the record
    assert f"Predicted once: {listed(once)} (Cisco) and {percent(BEFORE_RING_LATENCY[scitix.run.name])} (SCITIX);" in page
    assert (f"(SCITIX); {percent(cisco[0].error)}, {percent(cisco[1].error)}, {percent(cisco[2].error)} and "
            f"{percent(scitix.error)} since flash attention's rate follows the kernels' sequence and head width.") \
        in page                                                                                            # now
    alike = [r for r in outcomes if r.run.name.startswith("MLPerf v5.1 Llama 3.1 8B CP 2, 64 B200s")]
    assert len(alike) == 2 and all(r.predicted == scitix.predicted for r in alike)   # "their figure fixed its"
    assert "its layout is that of Oracle's and Verda's v5.1 runs in the fifteenth set, so their figure fixed its" in page
    assert f"where they would come out {listed(calibrated)};" in page
    (h200,) = [r for r in cisco if r.run.gpu == "h200"]
    assert f"(Cisco's H200 run, named so, comes out {100 * h200.error:.0f} %)" in lesson
    v60 = next(r.run for r in cisco if "128 H100s" in r.run.name)
    v51 = next(run for run in held_aside_runs.FIFTEENTH_SET if run.name == v60.name.replace("v6.0", "v5.1"))
    assert (v51.strategy, v51.gpu) == (v60.strategy, v60.gpu)
    assert held_out.predict(v51, kernel_rate=False) == held_out.predict(v60, kernel_rate=False)
    assert f"ran {100 * (v60.published / v51.published - 1):.0f} % faster in v6.0 than in v5.1" in page


def test_a_long_sequence_plan_is_told_what_the_long_runs_of_its_gpus_did(outcomes):
    """A plan at 32K tokens or more gets a line on both held-out parts' runs at such lengths on its GPU generation,
    whatever their family (held_out.long_sequence_line): on Hopper every one of them ran faster than planned, at the
    plan's rate; a shorter plan, or a generation with no such run, gets no such line; docs/planner.md says so."""
    from types import SimpleNamespace as Plan
    from ddp_lab.plan.report import accuracy_text
    h100s = ClusterSpec.preset("h100-sxm", nodes=1)
    def long_on_hopper(results):
        return [r for r in results if r.error is not None and held_out.generation_of(r.run.gpu) == "hopper"
                and held_out.run_seq_len(r.run) >= 32768]
    long = long_on_hopper(outcomes)
    aside = sorted(r.error for r in long if r.split == ASIDE)
    development = sorted(r.error for r in long if r.split == DEVELOPMENT)
    assert len(aside) == 3 and len(development) == 5 and max(aside + development) < 0
    line = held_out.long_sequence_line(outcomes, "hopper", "NVIDIA's stacks at the kernel rate")
    assert line == (f"at 32,768 tokens or more on Hopper GPUs, any family (NVIDIA's stacks at the kernel rate): held "
                    f"aside, 3 published runs, {aside[0]:+.1%} to {aside[-1]:+.1%}, each ran faster than planned; "
                    f"development, 5 runs, {development[0]:+.1%} to {development[-1]:+.1%}, each ran faster than "
                    f"planned")
    assert held_out.long_sequence_line(outcomes, "ampere") == ""
    model = Transformer.preset("llama3-8b")
    plan_at = {s: Plan(model=model.with_(seq_len=s), strategy=Strategy(dp=1, cp=8)) for s in (32768, 16384)}
    calibrated, words = held_out.at_plans_rate(h100s)
    said = accuracy_text(h100s, [plan_at[32768]])
    assert held_out.long_sequence_line(calibrated, "hopper", words) in said and "32,768 tokens or more" in said
    assert "tokens or more on" not in accuracy_text(h100s, [plan_at[16384]])
    page = planner_page()
    assert ("whatever their family (`held_out.long_sequence_line`: on Hopper GPUs each of them ran faster than "
            "planned, so there a long-sequence plan's throughput is a floor, not a ceiling)") in page
    assert all(r.error < 0 for r in long_on_hopper(calibrated))

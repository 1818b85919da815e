"""The held-out validation (ddp_lab/plan/held_out.py): published runs the planner was never fitted on, by family.

What holds is asserted; the goal (median <= 10 %, no family's median beyond 15 %) is asserted for the
families that meet it and marked xfail, with the measured number, for those that do not yet. The xfails are
strict: a family that comes within the goal fails here until it is moved to MEETS_GOAL, so the goal cannot be
met (or lost) unseen. Pure Python, well under a second.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from ddp_lab.plan import held_out, published
from ddp_lab.plan.held_out import FAMILIES, GOAL_FAMILY, GOAL_MEDIAN, SEEN, by_family, family, missing, overall
from ddp_lab.plan.held_out_runs import METRICS, RUNS, HeldOutRun

ROOT = Path(__file__).resolve().parents[1]
# Families whose held-out median met the goal when last measured (docs/planner.md, "Held-out validation").
MEETS_GOAL = {"dense-a100", "dense-h100-tp", "moe-coarse", "fp8"}


@pytest.fixture(scope="module")
def outcomes():
    return held_out.results()


def test_every_run_names_its_source_and_what_was_assumed():
    """A paper with its table/figure/section, or a repository file with a version, commit or date; a note; a figure."""
    assert len({run.name for run in RUNS}) == len(RUNS)
    for run in RUNS:
        assert re.search(r"arXiv:\d{4}\.\d{5}.*(Table|abstract|Sec\.)|\.md.*(commit|20\d\d|MCore v)", run.source), \
            f"{run.name}: {run.source!r} names no table or version"
        assert run.note and run.published > 0 and run.metric in METRICS


def test_no_held_out_run_is_in_the_fitted_set():
    """The planner's own validation set (published.RUNS, fitted on) and this one share no run: no model run with the
    same GPU count and figure."""
    fitted = {(run.model.name, run.strategy.gpus, round(run.published)) for run in published.RUNS}
    for run in RUNS:
        model, _, strategy = held_out.build(run) if not missing(run) else (None, None, None)
        if model is not None:
            assert (model.name, strategy.gpus, round(run.published)) not in fitted, run.name


def test_the_split_is_what_the_docstring_says(outcomes):
    """Every run is held out but those SEEN lists, and each SEEN entry is true: its figure is in the file it names."""
    names = {run.name for run in RUNS}
    assert set(SEEN) <= names
    assert {r.run.name for r in outcomes if r.split == "seen"} == set(SEEN)
    assert all(r.split == "held out" for r in outcomes if r.run.name not in SEEN)
    for name, where in SEEN.items():
        run = next(r for r in RUNS if r.name == name)
        files = re.findall(r"[\w/]+\.py", where)
        assert files and all(f"{run.published:,.0f}" in (ROOT / f).read_text() for f in files), (name, files)


def test_every_family_the_issue_names_has_runs():
    assert {family(run) for run in RUNS} == set(FAMILIES)


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


def test_a_plan_falls_in_the_family_its_run_does():
    """plan_family (for the CLI: which runs say how far to trust a plan) and family (for the runs) agree."""
    for run in RUNS:
        if not missing(run):
            assert held_out.plan_family(*held_out.build(run)) == family(run), run.name


def test_by_family_reports_count_median_and_worst(outcomes):
    """The summary is computed from the runs: recomputed here from the outcomes, family by family."""
    rows = {row.family: row for row in by_family(outcomes)}
    assert list(rows) == list(FAMILIES)
    for key, row in rows.items():
        errors = sorted(abs(r.error) for r in outcomes if r.family == key and r.split == "held out"
                        and r.error is not None)
        assert row.runs == len(errors)
        if errors:
            middle = len(errors) // 2
            median = errors[middle] if len(errors) % 2 else (errors[middle - 1] + errors[middle]) / 2
            assert row.median == pytest.approx(median) and abs(row.worst) == pytest.approx(errors[-1])
    text = held_out.accuracy_by_family(outcomes)
    print(text)
    lines = text.splitlines()
    assert len(lines) == 1 + len(FAMILIES) and lines[0].startswith("held out (never fitted): ")
    for line, row in zip(lines[1:], by_family(outcomes)):
        assert FAMILIES[row.family] in line
        assert (f"median {row.median:.1%}" in line) if row.runs else ("no run predicted yet" in line)
        one = held_out.family_line(row.family, outcomes)
        assert (f"median error {row.median:.1%}, worst {row.worst:+.1%}" in one) if row.runs else "no" in one


@pytest.mark.parametrize("key", list(FAMILIES))
def test_family_median_within_the_goal(outcomes, key):
    row = next(r for r in by_family(outcomes) if r.family == key)
    print(f"{FAMILIES[key]}: {row.runs} runs, median {row.median}, worst {row.worst}, {row.skipped} skipped")
    if key in MEETS_GOAL:
        assert row.runs and row.median <= GOAL_FAMILY
    elif row.median is None:
        pytest.xfail(f"{FAMILIES[key]}: no run predicted yet")
    elif row.median > GOAL_FAMILY:
        pytest.xfail(f"{FAMILIES[key]}: held-out median {row.median:.1%} (goal {GOAL_FAMILY:.0%})")
    else:
        pytest.fail(f"{FAMILIES[key]} now meets the goal (median {row.median:.1%}): add it to MEETS_GOAL")


@pytest.mark.xfail(strict=True, reason="held-out median 21.9 % over 41 runs on 2026-12-04 (goal 10 %)")
def test_overall_median_within_the_goal(outcomes):
    total = overall(outcomes)
    print(total)
    assert total["median"] <= GOAL_MEDIAN and not total["families_over_goal"]


def test_docs_show_what_held_out_prints(outcomes):
    """docs/planner.md's held-out tables are `python -m ddp_lab.plan.held_out`'s output."""
    page = (ROOT / "docs" / "planner.md").read_text()
    assert held_out.markdown_tables(outcomes) in page


def test_readme_quotes_the_held_out_medians(outcomes):
    """README's "Held out" bullet (How far to trust the planner) quotes the overall median and each family's."""
    readme = (ROOT / "README.md").read_text()
    bullet = readme[readme.index("- **Held out**"):readme.index("Every run with its source and error")]
    assert f"median error {overall(outcomes)['median']:.1%}" in bullet
    assert f"{overall(outcomes)['runs']} published runs" in bullet
    for row in by_family(outcomes):
        assert f"{row.median:.1%}" in bullet, f"README's held-out bullet lacks {FAMILIES[row.family]}'s {row.median:.1%}"

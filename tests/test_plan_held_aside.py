"""The held-aside runs (ddp_lab/plan/held_aside_runs.py): each can be built, reproduces the GPU count and global batch
its source states, and shares no run, source or configuration with the planner's other published sets (published.py,
held_out_runs.py). Nothing here predicts a run: the set stays unpredicted while the planner is modelled. Pure
Python, well under a second.
"""

from __future__ import annotations

import dataclasses
import re

from ddp_lab.course.plan.strategy import check
from ddp_lab.plan import held_out_runs, published
from ddp_lab.plan.held_aside_runs import RUNS
from ddp_lab.plan.held_out import FAMILIES, build, family, missing
from ddp_lab.plan.held_out_runs import METRICS

# "N GPUs, GBS B": what each source's table states, written into the run's source
STATED = re.compile(r"(\d[\d,]*) GPUs, GBS (\d[\d,]*)")
# The documents the other two sets take their figures from (the source lists of published.py and held_out_runs.py)
USED_DOCUMENTS = ("torchtitan", "Megatron-Bridge", "performance_summary.md", "NeMo-Framework-Launcher",
                  "megatron/core/transformer/moe/README.md", "llm-foundry", "maximizing-training", "tr11-176B",
                  "arXiv:2407.21783", "arXiv:2104.04473", "arXiv:2205.05198", "arXiv:2201.11990")
# The families the planner's issue asks new published runs for
NEW_FAMILIES = {"moe-coarse", "moe-fine", "b200", "long-context", "fp8", "dense-h100-tp"}


def _stated(run) -> tuple[int, int]:
    gpus, batch = STATED.search(run.source).groups()
    return int(gpus.replace(",", "")), int(batch.replace(",", ""))


def _built(run) -> tuple[int, int]:
    _, _, strategy = build(run)
    return strategy.gpus, strategy.global_batch


def _configuration(model, cluster, strategy) -> tuple:
    """What makes two runs the same configuration: model, GPU, parallel sizes, precision (not the batch)."""
    return (model.name, cluster.gpu.name, strategy.dp, strategy.tp, strategy.pp, strategy.cp, strategy.ep,
            strategy.precision)


def _other_configurations() -> set[tuple]:
    built = [build(run) for run in held_out_runs.RUNS if not missing(run)]
    return ({_configuration(*parts) for parts in built}
            | {_configuration(run.model, run.cluster, run.strategy) for run in published.RUNS})


def test_every_run_is_expressible_and_passes_the_planner_check():
    assert RUNS and len({run.name for run in RUNS}) == len(RUNS)
    for run in RUNS:
        assert missing(run) == [], run.name
        model, cluster, strategy = build(run)
        check(model, strategy, gpus=strategy.gpus, gpus_per_node=cluster.gpus_per_node)


def test_each_run_reproduces_the_gpus_and_global_batch_its_source_states():
    """dp x tp x pp x cp and dp x micro_batch x grad_accum against the table's GPUs and GBS; a doubled dp is caught."""
    for run in RUNS:
        assert STATED.search(run.source), f"{run.name}: its source states no 'N GPUs, GBS B'"
        assert _built(run) == _stated(run), run.name
    run = RUNS[0]
    wrong = dataclasses.replace(run, strategy={**run.strategy, "dp": 2 * run.strategy["dp"]})
    assert _built(wrong) != _stated(wrong)


def test_no_name_source_or_configuration_repeats_the_other_sets():
    names = {run.name for run in held_out_runs.RUNS} | {run.name for run in published.RUNS}
    sources = {run.source for run in held_out_runs.RUNS}
    others = _other_configurations()
    for run in RUNS:
        assert run.name not in names and run.source not in sources, run.name
        assert not [doc for doc in USED_DOCUMENTS if doc in run.source], run.name
        assert _configuration(*build(run)) not in others, run.name
    # control: a held-out run's own configuration is found among the others
    repeat = next(run for run in held_out_runs.RUNS if run.name == "NeMo Llama 3 8B CP 2, 8 H100s")
    assert _configuration(*build(repeat)) in others


def test_each_run_names_its_metric_family_and_assumptions():
    for run in RUNS:
        assert run.metric in METRICS and run.published > 0 and run.note, run.name
        assert family(run) in FAMILIES, run.name
    assert NEW_FAMILIES <= {family(run) for run in RUNS}

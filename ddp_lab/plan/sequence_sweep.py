"""MosaicML's sequence-length sweep: the published rows at 4K-64K tokens that set flash attention's rate.

The same llm-foundry tables as published.py's MosaicML runs (scripts/train/benchmarking/README.md, "A100 80GB"
and "H100 80GB BF16"), their rows on 8 GPUs at 4,096 to 65,536 tokens. Along one model's rows a token's work
outside attention stays the same while its attention grows with the sequence, so the slope of time per token
against the planner's attention seconds is the rate attention ran at in those steps (`attention_share_fits`); its
median per GPU generation is generation_constants.FLASH_ATTENTION_UTILIZATION (`attention_share`). The rows are
not scored (they set that number). `python -m ddp_lab.plan.published` prints `sweep_table` under the validation
table; docs/planner.md shows both.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ddp_lab.course.plan.cluster_spec import ClusterSpec
from ddp_lab.course.plan.strategy import Strategy
from ddp_lab.plan.published import PublishedRun, error, mpt, predict, with_flash_share


def _sweep(gpu, size, seq_len, micro_batch, grad_accum, checkpointing, published):
    strategy = Strategy(dp=8, zero=3, micro_batch=micro_batch, grad_accum=grad_accum,
                        recompute="full" if checkpointing else "none", checkpoint_early_stop=checkpointing,
                        fp32_grads=True)
    table = {"a100-80gb": "A100 80GB table", "h100-sxm": "H100 80GB BF16 table"}[gpu]
    return PublishedRun(f"MPT-{size} {seq_len // 1024}K 8x{gpu.split('-')[0].upper()}", "mosaicml", table,
                        mpt(size, seq_len), ClusterSpec.preset(gpu, nodes=1), strategy, "tokens_per_gpu", published)


# The same two llm-foundry tables' rows on 8 GPUs at 4,096 to 65,536 tokens (amp_bf16, DEFAULT mixed precision;
# the 2,048-token rows are in RUNS, the shorter ones are left out): (size, sequence, micro-batch, grad accum,
# activation checkpointing, tokens/s per GPU). Along one model's rows a token's work outside attention stays
# the same while its attention grows with the sequence, so the slope of time per token against the planner's
# attention seconds is the rate attention ran at in these steps (`attention_share_fits`): it sets
# generation_constants.FLASH_ATTENTION_UTILIZATION. These rows are not scored in `summary` (they set that number).
SEQUENCE_SWEEP: list[PublishedRun] = [
    *[_sweep("a100-80gb", *row) for row in (
        ("125m", 65536, 1, 2, False, 20368), ("125m", 32768, 2, 2, False, 36407), ("125m", 16384, 4, 2, False, 60040),
        ("125m", 8192, 8, 2, False, 90392), ("125m", 4096, 16, 2, False, 118396),
        ("350m", 65536, 1, 2, False, 7524), ("350m", 32768, 2, 2, False, 13652), ("350m", 16384, 4, 2, False, 23559),
        ("350m", 8192, 8, 2, False, 36569), ("350m", 4096, 16, 2, False, 49555),
        ("760m", 65536, 1, 2, True, 4143), ("760m", 32768, 1, 2, False, 8802), ("760m", 16384, 3, 2, False, 14274),
        ("760m", 8192, 6, 2, False, 20933), ("760m", 4096, 12, 2, False, 27351),
        ("1b", 65536, 1, 2, True, 3044), ("1b", 32768, 1, 4, False, 6275), ("1b", 16384, 2, 4, False, 9956),
        ("1b", 8192, 3, 4, False, 13814), ("1b", 4096, 7, 4, False, 17807),
        ("3b", 65536, 1, 2, True, 1767), ("3b", 32768, 3, 6, True, 3029), ("3b", 16384, 1, 6, False, 5529),
        ("3b", 8192, 3, 6, False, 7695), ("3b", 4096, 5, 6, False, 9457),
        ("7b", 65536, 1, 2, True, 1013), ("7b", 32768, 2, 2, True, 1672), ("7b", 16384, 4, 2, True, 2453),
        ("7b", 8192, 8, 2, True, 3206), ("7b", 4096, 16, 2, True, 3684),
        ("13b", 32768, 1, 3, True, 1016), ("13b", 16384, 3, 3, True, 1431), ("13b", 8192, 5, 3, True, 1795),
        ("13b", 4096, 10, 3, True, 2060),
        ("30b", 8192, 1, 21, True, 574), ("30b", 4096, 1, 21, True, 814))],
    *[_sweep("h100-sxm", *row) for row in (
        ("760m", 32768, 1, 2, False, 16291), ("760m", 16384, 3, 2, False, 27815), ("760m", 8192, 6, 2, False, 41825),
        ("760m", 4096, 12, 2, False, 55459),
        ("1b", 65536, 1, 2, True, 5506), ("1b", 32768, 1, 4, False, 12025), ("1b", 16384, 2, 4, False, 19649),
        ("1b", 8192, 3, 4, False, 29157), ("1b", 4096, 7, 4, False, 38535),
        ("3b", 65536, 1, 2, True, 3262), ("3b", 32768, 3, 6, True, 5873), ("3b", 16384, 1, 6, False, 11152),
        ("3b", 8192, 3, 6, False, 16578), ("3b", 4096, 5, 6, False, 20964),
        ("7b", 65536, 1, 2, True, 1956), ("7b", 32768, 2, 2, True, 3318), ("7b", 8192, 8, 2, True, 6935),
        ("7b", 4096, 16, 2, True, 8611),
        ("13b", 32768, 1, 3, True, 1976), ("13b", 16384, 3, 3, True, 2985), ("13b", 4096, 10, 3, True, 4717),
        ("30b", 8192, 1, 21, True, 1384), ("30b", 4096, 1, 21, True, 1802))],
]


@dataclass(frozen=True)
class AttentionFit:
    """The rate flash attention ran at along one model's rows of `SEQUENCE_SWEEP` (one GPU, one recomputation).

    Each row's published seconds per token are fitted as `other` x the planner's seconds outside attention plus
    the planner's attention seconds at 100 % of peak over `share` (least squares on seconds, no intercept, so the
    long rows weigh most): `share` is what each attention FLOP cost inside these training steps, as a share of
    peak FLOP/s (it also takes in any per-token cost that grows with the sequence and that the planner does not
    model), `other` their seconds outside attention over the planner's (1: the planner's are right), `worst` the
    largest residual relative to its row. A fit of 3 rows has one degree of freedom left: its residuals say
    little.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    generation: str
    model: str
    recompute: str
    runs: int
    share: float
    other: float
    worst: float


def _per_token_parts(run: PublishedRun) -> tuple[float, float]:
    """The planner's seconds per token for `run` (a tokens_per_gpu run) outside attention and in attention at 100 %
    of peak.

    The seconds per token are R + A / share in the flash share (nothing else in them depends on the share when
    the communication hides, as it does for 8 GPUs in a node): two predictions give R and A.
    """
    at_full, at_half = (1 / predict(with_flash_share(run, share)) for share in (1.0, 0.5))
    return 2 * at_full - at_half, at_half - at_full


def attention_share_fits(runs=None, minimum: int = 3) -> list[AttentionFit]:
    """One `AttentionFit` per (GPU generation, model, recomputation) with at least `minimum` rows in `runs`.

    Example:
        >>> fits = attention_share_fits()
        >>> sorted({f.generation for f in fits}), len(fits)
        (['ampere', 'hopper'], 12)

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    series: dict[tuple, list[PublishedRun]] = {}
    for run in SEQUENCE_SWEEP if runs is None else runs:
        key = (run.cluster.gpu.generation, run.model.name, run.strategy.recompute)
        series.setdefault(key, []).append(run)
    fits = []
    for (generation, model, recompute), rows in series.items():
        if len(rows) < minimum:
            continue
        parts = [_per_token_parts(run) for run in rows]
        seconds = [1 / run.published for run in rows]
        # least squares y = a x1 + c x2 without intercept: the 2 x 2 normal equations
        s11 = sum(x1 * x1 for x1, _ in parts)
        s12 = sum(x1 * x2 for x1, x2 in parts)
        s22 = sum(x2 * x2 for _, x2 in parts)
        s1y = sum(x1 * y for (x1, _), y in zip(parts, seconds))
        s2y = sum(x2 * y for (_, x2), y in zip(parts, seconds))
        determinant = s11 * s22 - s12 * s12
        other = (s1y * s22 - s2y * s12) / determinant
        inverse_share = (s11 * s2y - s12 * s1y) / determinant
        worst = max(abs(other * x1 + inverse_share * x2 - y) / y for (x1, x2), y in zip(parts, seconds))
        fits.append(AttentionFit(generation, model, recompute, len(rows), 1 / inverse_share, other, worst))
    return fits


def attention_share(generation: str, runs=None) -> float:
    """The median `AttentionFit.share` of a GPU generation: generation_constants.FLASH_ATTENTION_UTILIZATION's source.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    return statistics.median(f.share for f in attention_share_fits(runs) if f.generation == generation)


def sweep_table() -> str:
    """The sequence sweep's rate fits and every row with the planner's error: docs/planner.md's second table.

    `python -m ddp_lab.plan.published` prints it under the validation table.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    lines = ["| GPU | model | recomputation | rows | attention's share of peak "
             "| their time outside attention / the planner's | worst residual |", "|---|---|---|---:|---:|---:|---:|"]
    for fit in attention_share_fits():
        lines.append(f"| {fit.generation} | {fit.model} | {fit.recompute} | {fit.runs} | {fit.share:.3f} | "
                     f"{fit.other:.2f} | {fit.worst:.1%} |")
    lines += ["", "| run | GPUs | strategy | tokens per sequence | published tokens/s/GPU | predicted | error |",
              "|---|---:|---|---:|---:|---:|---:|"]
    for run in SEQUENCE_SWEEP:
        lines.append(f"| {run.name} | {run.strategy.gpus} {run.cluster.gpu.name} | {run.strategy.label()} | "
                     f"{run.model.seq_len:,} | {run.published:,.0f} | {predict(run):,.0f} | {error(run):+.1%} |")
    errors = [abs(error(r)) for r in SEQUENCE_SWEEP]
    lines.append(f"\n{len(errors)} sweep rows (not scored: they set the attention rate): median absolute error "
                 f"{statistics.median(errors):.1%}, largest {max(errors):.1%}.")
    return "\n".join(lines)

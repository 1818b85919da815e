"""The planner against published numbers, each with its source and the tolerance reached.

The throughput runs, with their sources and tables, are ddp_lab/plan/published.py's RUNS (lesson 13
prints their summary; docs/planner.md lists every run with its error).
Memory: the ZeRO paper's worked example and Korthikanti et al.'s Table 2 below.

Sources of the numbers in this file (checked against the papers' tables as quoted by the public pages named):
- ZeRO: Rajbhandari et al. 2020, arXiv:1910.02054, Sec. 5.1 / Fig. 1 (7.5B, N_d = 64).
- Activations: Korthikanti et al. 2022, arXiv:2205.05198, Table 2 (also quoted by the AWS Neuron
  docs, "Activation Memory Reduction"). Their paper's worked per-layer figures are not used:
  we could not verify them, so they are left out.
- Throughput: Narayanan et al. 2021, arXiv:2104.04473, Table 1 (weak scaling on Selene, A100 80GB,
  V = 51,200, s = 2048, full recomputation); BLOOM-176B (BigScience, train/tr11-176B-ml/
  tr11-176B-ml.slurm: TP 4, PP 12, 48 nodes, micro-batch 2, global batch 2048, bf16,
  --checkpoint-activations, BF16Optimizer = ZeRO-1; "training throughput: about 150 TFLOPs",
  bigscience.notion.site BigScience-176B-Model; 4 x 100 Gb/s Omni-Path per node);
  MT-NLG 530B (Smith et al. 2022, arXiv:2201.11990, Sec. 2.4: TP 8, PP 35, global batch 1920,
  280/350/420 DGX A100 80GB nodes, 60.1/50.2/44.4 s per iteration = 126/121/113 TFLOP/s per GPU).

- Mixture of experts: Mixtral 8x7B (Jiang et al. 2024, arXiv:2401.04088: "47B ... 13B active"; Mistral AI's
  announcement of 2023-12-11: "46.7B total parameters but only uses 12.9B parameters per token"; Hugging
  Face's safetensors total for Mixtral-8x7B: 46,702,792,704); DeepSeekMoE 16B (Dai et al. 2024,
  arXiv:2401.06066, Sec. 5.1.2: "approximately 16.4B total parameters, with the number of activated
  parameters around 2.8B"). Each shape from its config.json (model.py cites the fields).
- Long context: Llama 3 (Llama Team 2024, arXiv:2407.21783), Table 4's third row and Sec. 3.3.2 (read in
  the paper's text: 16,384 GPUs, TP 8, CP 16, PP 16, DP 4, sequence 131,072, batch size/DP 16, 16M tokens
  per batch, 380 TFLOP/s per GPU).

ONE efficiency factor per GPU generation (generation_constants.GEMM_EFFICIENCY) is calibrated on ONE run each
(published.CALIBRATION) by `test_calibration_run`; every other run is a prediction. The memory-bound
kernels' bytes (traffic.py) are tested by hand in tests/test_plan_formulas.py.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from ddp_lab.course.plan.efficiency import TILE_K, attention_backward_factor, layer_matmul_flops
from ddp_lab.course.plan.generation_constants import FLASH_ATTENTION_UTILIZATION, GEMM_EFFICIENCY
from ddp_lab.plan import (ClusterSpec, Strategy, Transformer, check, layer_activation_bytes, model_state_bytes,
                          stage_activation_bytes, stage_state_bytes, step_flops, step_time)
from ddp_lab.course.plan.fit_to_run import matmul_efficiency_for
from ddp_lab.plan import published, sequence_sweep
from ddp_lab.plan.published import CALIBRATION, RUNS, error, predict, summary

GB = 1e9


# ---- ZeRO paper, Sec. 5.1 / Fig. 1: Psi = 7.5B, N_d = 64, K = 12 ------------------------------
@pytest.mark.parametrize("stage, published_gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_worked_example(stage, published_gb):
    got = model_state_bytes(7_500_000_000, Strategy(dp=64, zero=stage)).total / GB
    assert round(got, 1) == published_gb   # the paper rounds to 0.1 GB


# ---- Korthikanti et al. 2022, Table 2: activation bytes per layer ----------------------------
# The closed forms are typed from the paper's table; the planner sums tensors one by one
# (ddp_lab/course/plan/activations.py), so agreement is a real check. Shapes: the paper's Table 3 models
# (22B, 175B, 530B, 1T: s = 2048, t = 8) and GPT-3 at b = 4.
SHAPES = [  # (name, layers, hidden, heads, micro_batch, tp)
    ("22B", 48, 6144, 64, 1, 8), ("175B", 96, 12288, 96, 1, 8), ("530B", 105, 20480, 128, 1, 8),
    ("1T", 128, 25600, 160, 1, 8), ("175B-b4-t4", 96, 12288, 96, 4, 4),
]
TABLE_2 = {  # (sequence_parallel, recompute) -> bytes per layer, from the paper
    (False, "none"): lambda s, b, h, a, t: s * b * h * (10 + 24 / t + 5 * a * s / (h * t)),
    (True, "none"): lambda s, b, h, a, t: s * b * h / t * (34 + 5 * a * s / h),
    (False, "selective"): lambda s, b, h, a, t: s * b * h * (10 + 24 / t),
    (True, "selective"): lambda s, b, h, a, t: s * b * h * 34 / t,
    (False, "full"): lambda s, b, h, a, t: 2 * s * b * h,
}


@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
@pytest.mark.parametrize("case", list(TABLE_2), ids=lambda c: f"sp={c[0]}-{c[1]}")
def test_korthikanti_table2(shape, case):
    name, layers, h, a, b, t = shape
    model = Transformer(name, layers, h, a, vocab=51200, seq_len=2048)
    sp, recompute = case
    got = layer_activation_bytes(model, Strategy(tp=t, micro_batch=b, sequence_parallel=sp, recompute=recompute,
                                                 attention="eager"))
    assert got == pytest.approx(TABLE_2[case](2048, b, h, a, t), rel=1e-12)


def test_korthikanti_no_parallelism():
    """Table 2's first row, t = 1: sbh(34 + 5as/h)."""
    model = Transformer.preset("gpt3-175b")
    s, h, a = 2048, 12288, 96
    assert layer_activation_bytes(model, Strategy(micro_batch=2, attention="eager")) == 2 * s * h * (34 + 5 * a * s / h)


@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_flash_attention_keeps_no_scores(shape):
    """Fused attention (the default) saves Korthikanti's sbh terms but, instead of the 5as^2b of scores,
    one fp32 log-sum-exp per head and token (4asb/t); selective recomputation then changes nothing."""
    name, layers, h, a, b, t = shape
    model = Transformer(name, layers, h, a, vocab=51200, seq_len=2048)
    s = 2048
    flash = layer_activation_bytes(model, Strategy(tp=t, micro_batch=b))
    assert flash == pytest.approx(s * b * h * (10 + 24 / t) + 4 * a * s * b / t, rel=1e-12)
    assert layer_activation_bytes(model, Strategy(tp=t, micro_batch=b, recompute="selective")) == flash


# ---- Throughput: one calibration per GPU generation, then predictions ---------------------------
def test_megatron_flops_formula():
    """Narayanan et al. Sec. 5.1: F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)); MT-NLG's published
    iteration times turn into its published TFLOP/s with it (126, 121, 113 within 0.5)."""
    model = Transformer("mt-nlg-530b", 105, 20480, 128, vocab=50272, seq_len=2048)
    flops = step_flops(model, Strategy(dp=1920, recompute="full"))
    for gpus, seconds, published in ((2240, 60.1, 126), (2800, 50.2, 121), (3360, 44.4, 113)):
        assert flops / (gpus * seconds) / 1e12 == pytest.approx(published, abs=0.6)


def calibrated_efficiency(generation: str, runs=RUNS) -> float:
    """The GEMM efficiency that makes the generation's one calibration run (among `runs`) predict its published
    throughput, found by bisection and rounded to 2 digits: how GEMM_EFFICIENCY was set."""
    run = next(r for r in runs if r.name == CALIBRATION[generation])
    assert run.cluster.gpu.generation == generation
    # every metric is inversely proportional to the step time: the published figure's step time
    published_seconds = step_time(run.model, run.cluster, run.strategy).total * predict(run) / run.published
    return round(matmul_efficiency_for(run.model, run.cluster, run.strategy, published_seconds), 2)


@pytest.mark.parametrize("generation", sorted(CALIBRATION))
def test_calibration_run(generation):
    """GEMM_EFFICIENCY[generation] is the value its one calibration run calls for."""
    assert calibrated_efficiency(generation) == GEMM_EFFICIENCY[generation]


# What tools/gpu_kernels.py measured on an H100 SXM (2026-11-26, torch 2.11+cu130): GEMM rates against k, PyTorch's
# flash attention kernel at every H100 run's shapes, one whole layer per run. Committed as measured; never edited.
# Its planner_seconds fields were computed with the constants of that day (GEMM 0.50, flash 0.35); the tests
# below recompute the planner's side. That run's attention backward also added q, k and v's gradients into
# .grad, and its GEMM intervals held one kernel each (tools/gpu_kernels.py now does neither).
H100_KERNELS = Path(published.__file__).parent / "measured" / "h100-sxm-kernels.json"


def h100_attention_shares(data) -> dict:
    """Each measured shape's share of peak, forward and backward, with the three gradient adds of that run's
    backward taken out at the planner's own HBM bandwidth (2 bytes read twice and written once per element of
    q, k and v). A file from the fixed tool says it accumulated nothing (attention_gradients_accumulated: false)
    and is taken as it is."""
    h100 = ClusterSpec.preset("h100-sxm").gpu
    models = {r.model.name: r.model for r in RUNS}
    models.update({f"mpt-{size}": published.mpt(size) for size in ("125m", "350m")})
    shares = {}
    for row in data["attention"]:
        model, b = models[row["model"]], row["micro_batch"]
        adds = 3 * 2 * b * model.seq_len * (model.hidden + 2 * model.kv_dim) / h100.memory_bandwidth
        if not data.get("attention_gradients_accumulated", True):
            adds = 0.0
        flash = Strategy(micro_batch=b)               # the planner's count: causal half, backward 2.5 x the forward
        forward_flops = layer_matmul_flops(model, flash)[1] / 2
        seconds = row["forward_seconds"] + row["backward_seconds"] - adds
        shares[row["model"], b] = (1 + attention_backward_factor(flash)) * forward_flops / seconds / h100.flops("bf16")
    return shares


def test_flash_attention_runs_at_the_rate_the_published_sequence_sweep_shows():
    """FLASH_ATTENTION_UTILIZATION is, per generation, the median over models of the rate attention ran at along
    MosaicML's sequence-length sweep (sequence_sweep.attention_share_fits: 7 models on A100s, 5 on H100s, each fitted to
    3-5 rows at 4K-64K tokens with residuals within 2 %), rounded: A100 0.31 (per model 0.30-0.34), H100 0.17
    (0.17-0.19). None of those rows is a scored run, so the calibration set does not grade the number it set.
    Both are below what the kernels reach alone (FlashAttention-2's paper: 50-73 % of an A100; PyTorch's
    FlashAttention-2 timed on an H100 at the H100 runs' shapes: median 0.23, next test); with those numbers the
    sweep's long rows come out up to 56 % (A100) and 29 % (H100) too fast, with these the rows without
    recomputation are within 6.9 %. The H100 rows are fitted with attention_kernels.shape_factor in: the share is
    the kernels' plateau (16K tokens and more, heads of 128)."""
    fits = sequence_sweep.attention_share_fits()
    for generation, expected, models in (("ampere", 0.31, 7), ("hopper", 0.17, 5)):
        mine = [f for f in fits if f.generation == generation]
        assert len(mine) == models and all(f.runs >= 3 for f in mine)
        share = sequence_sweep.attention_share(generation)
        assert round(share, 2) == FLASH_ATTENTION_UTILIZATION[generation] == expected
        assert all(f.worst < 0.021 for f in mine), [(f.model, f.worst) for f in mine]
        median = statistics.median(f.share for f in mine)
        assert all(abs(f.share / median - 1) < 0.11 for f in mine), [(f.model, f.share) for f in mine]
    assert not {r.name for r in sequence_sweep.SEQUENCE_SWEEP} & {r.name for r in RUNS}
    assert min(r.model.seq_len for r in sequence_sweep.SEQUENCE_SWEEP) == 4096

    def worst_long_row_at(shares):   # the sweep's 32K-64K-token rows, as docs/planner.md and lesson 13 say
        runs = [published.with_flash_share(r, shares[r.cluster.gpu.generation]) for r in sequence_sweep.SEQUENCE_SWEEP
                if r.model.seq_len >= 32768]
        return {g: round(max(error(r) for r in runs if r.cluster.gpu.generation == g), 2) for g in shares}

    assert worst_long_row_at({"ampere": 0.50, "hopper": 0.23}) == {"ampere": 0.56, "hopper": 0.29}
    plain = [error(r) for r in sequence_sweep.SEQUENCE_SWEEP if r.strategy.recompute == "none"]
    assert len(plain) == 32 and max(map(abs, plain)) < 0.07
    # MosaicML's steps ran MPT's Triton FlashAttention (the submit script's default attn_impl); A100 runs on
    # PyTorch's FlashAttention-2 without recomputation agree with the sweep's number too.
    for name, at_paper, now in (("torchtitan Llama 2 13B", 0.071, 0.016), ("IBM Llama 2 7B 128xA100", 0.091, 0.030)):
        run = next(r for r in RUNS if r.name == name)
        assert run.strategy.recompute == "none" and run.strategy.attention == "flash"
        assert (round(error(published.with_flash_share(run, 0.50)), 3), round(error(run), 3)) == (at_paper, now)


def test_the_sweep_follows_sequence_length_and_charges_recomputation_too_much():
    """The planner on the 59 sweep rows: median error 3.7 %; without recomputation within 6.9 % from 4K to 32K-64K
    tokens (the attention rate came from these rows, the rest of the step did not); with full recomputation
    slow, median -6.9 %, down to -10.4 %, except MPT-30B with micro-batch 1: at 8K +29 % (A100) and +24 % (H100), at
    4K -0.4 % and +6.0 %. The
    fits say the same: their time outside attention is 0.89-0.93 x the planner's for the models that recompute (the
    planner charges 7-12 % too much there), 0.98-1.11 x for those that do not (AttentionFit.other). Before the planner
    knew that PyTorch's non-reentrant checkpoint stops before the FFN's down projection (Strategy.checkpoint_early_stop:
    these rows' sweep.sh names PyTorch 2.1.0 and the MPT yamls ask for the non-reentrant checkpoint, published.py) the
    recomputing rows were -9.5 % (median) and the fits 0.82-0.86 x: early stop explains about half of the
    fits' over-charge (1.16-1.22 x -> 1.08-1.12 x), a quarter of the rows' median error. The H100 layer test below
    finds the rest in the bare layer too."""
    sweep = sequence_sweep.SEQUENCE_SWEEP
    assert len(sweep) == 59 and round(statistics.median(abs(error(r)) for r in sweep), 3) == 0.037
    full = [error(r) for r in sweep if r.strategy.recompute == "full"]
    assert all(r.strategy.checkpoint_early_stop for r in sweep if r.strategy.recompute == "full")
    assert round(statistics.median(full), 3) == -0.069 and round(min(full), 3) == -0.104
    assert {r.name for r in sweep if r.strategy.recompute == "full" and error(r) > -0.01} == \
        {"MPT-30b 8K 8xA100", "MPT-30b 8K 8xH100", "MPT-30b 4K 8xA100", "MPT-30b 4K 8xH100"}
    fits = sequence_sweep.attention_share_fits()
    assert all(0.89 <= f.other <= 0.935 for f in fits if f.recompute == "full")
    assert all(0.975 <= f.other <= 1.11 for f in fits if f.recompute == "none")
    whole_layer = [published.with_checkpoint_early_stop(r, False) for r in sweep if r.strategy.recompute == "full"]
    assert round(statistics.median(error(r) for r in whole_layer), 3) == -0.095


def test_the_h100_timed_here_agrees_with_the_published_head_width_factor():
    """attention_kernels.shape_factor's head-64 factor for FlashAttention-2 (0.90, from FlashAttention-3's figures)
    against PyTorch's FlashAttention-2 timed on an H100 at 2,048 tokens: MPT-125M's and 350M's heads of 64 ran at
    0.89 of the MPT models' heads of 128 (median shares, the gradient adds taken out), within 2 %."""
    from ddp_lab.course.plan.attention_kernels import shape_factor

    data = json.loads(H100_KERNELS.read_text())
    shares, rows = h100_attention_shares(data), {(r["model"], r["micro_batch"]): r for r in data["attention"]}
    narrow = [share for key, share in shares.items() if rows[key]["head_dim"] == 64]
    wide = [share for key, share in shares.items() if rows[key]["head_dim"] == 128 and key[0].startswith("mpt-")]
    assert len(narrow) == 2 and len(wide) == 12
    timed, published_figures = statistics.median(narrow) / statistics.median(wide), shape_factor("hopper", "fa2", 16384, 64)
    assert (round(timed, 2), round(published_figures, 2)) == (0.89, 0.9) and abs(timed / published_figures - 1) < 0.02


def test_pytorchs_flash_kernel_alone_runs_faster_on_an_h100_than_inside_the_published_steps():
    """What PyTorch's flash kernel (FlashAttention-2) reached alone on an H100 SXM, causal, bf16, forward and
    backward, at the (model, micro-batch) of each H100 run here, its FLOPs counted as the planner counts them:
    median 0.23 of peak (0.19-0.27) once the gradient adds that run's backward also timed are taken out (3-11 % of
    it, at the planner's own HBM bandwidth; as timed, with them, 0.21); head size 64 runs lower; even the fastest
    forward pass stays under FlashAttention-3's published 35 % for FlashAttention-2 on an H100. Inside MosaicML's
    training steps attention, MPT's Triton FlashAttention there, ran at 0.17 (the test above): PyTorch's kernel
    alone is about a third faster, although it was timed at 2-4K tokens, where a kernel runs below its
    long-sequence rate, and the slope comes mostly from 16-64K rows; a benchmark of another kernel, alone,
    promises more than those steps got (the planner used 0.23 until the sweep was read). Every H100 run has its
    measurement (a run added without one fails here). The same file checks the per-tile GEMM cost:
    k / (k + TILE_K) of the longest GEMM's rate is within 3 % of the measured rate for k >= 1536 (every H100 run's
    GEMMs reduce over k >= 1536); below that, each timed interval held one short kernel and its launch, so the
    sweep cannot tell the tile cost from the launch."""
    data = json.loads(H100_KERNELS.read_text())
    h100 = ClusterSpec.preset("h100-sxm").gpu
    assert data["machine"]["preset"] == "h100-sxm" and data["machine"]["peak_bf16"] == h100.flops("bf16")
    shapes = {(r.model.name, r.strategy.micro_batch) for r in RUNS
              if r.cluster.gpu.generation == "hopper" and r.strategy.tp == r.strategy.pp == 1}
    measured = {(row["model"], row["micro_batch"]): row for row in data["attention"]}
    assert shapes <= set(measured), shapes - set(measured)
    corrected = h100_attention_shares(data)
    shares = [corrected[shape] for shape in shapes]
    assert round(statistics.median(shares), 2) == 0.23
    assert round(statistics.median(measured[shape]["share"] for shape in shapes), 2) == 0.21     # as timed
    assert 0.19 < min(shares) < 0.20 and 0.26 < max(shares) < 0.27, sorted(shares)
    assert statistics.median(shares) / FLASH_ATTENTION_UTILIZATION["hopper"] > 1.3
    assert all(measured[shape]["head_dim"] == 128 for shape in shapes)
    assert all(share < 0.23 for (model, _), share in corrected.items() if measured[model, _]["head_dim"] == 64)
    assert max(row["forward_share"] for row in data["attention"]) < 0.35
    gemm = {row["k"]: row["share_of_peak"] for row in data["gemm"]}
    longest = max(gemm)
    for k, share in gemm.items():
        tiled = gemm[longest] * (k / (k + TILE_K)) / (longest / (longest + TILE_K))
        if k >= 1536:
            assert abs(tiled / share - 1) < 0.03, (k, tiled, share)


def test_what_the_planner_still_misses_on_h100s_is_outside_the_bare_layer():
    """One layer of each H100 run's shape, timed alone on an H100 (forward and backward, with
    torch.utils.checkpoint(use_reentrant=False) on PyTorch 2.11 where the run recomputed), against the planner's
    layer_seconds for it: the planner's layer takes 1.18-1.29 x the measured one without recomputation and
    1.21-1.31 x with full recomputation (1.29 at the calibration run, MPT-7B). The timed checkpoint stopped early:
    before the planner knew (Strategy.checkpoint_early_stop), charging the FFN's down projection again, the
    recomputing layers were 1.30-1.42 x, apart from the rest. The planner's layer is slower than the bare one
    everywhere because its calibrated constant charges per FLOP what a step spends outside the layer's kernels;
    recomputation adds FLOPs, so it adds that charge too. Over the predicted runs, one per measured shape, the
    ratio and the run's error correlate at r = -0.62 (within the runs without recomputation -0.79, within those
    with it -0.79; over all 22 predicted H100 runs, shapes shared, -0.41; before early stop -0.92 and -0.85: the
    part of the error the bare layer explained was mostly the missing early stop). The timed backward also added
    the parameters' gradients into .grad (about 1-4 % of a layer, most at micro-batch 2-3).
    docs/planner.md ("Where it misses, and why") quotes these numbers."""
    from ddp_lab.course.plan.efficiency import layer_seconds

    data = json.loads(H100_KERNELS.read_text())
    by_name = {r.name: r for r in RUNS}
    shape = lambda run: (run.model.name, run.strategy.micro_batch, run.strategy.recompute)      # noqa: E731
    h100 = [r for r in RUNS if r.cluster.gpu.generation == "hopper" and r.strategy.tp == r.strategy.pp == 1]
    timed = {shape(by_name[row["run"]]): row["measured_seconds"] for row in data["layer"]}
    assert {shape(r) for r in h100} <= set(timed), {shape(r) for r in h100} - set(timed)
    ratio = {r.name: layer_seconds(r.model, r.strategy, r.cluster.gpu).total / timed[shape(r)] for r in h100}
    named = {by_name[row["run"]].name for row in data["layer"]}           # one run per measured shape
    plain = [ratio[name] for name in named if by_name[name].strategy.recompute == "none"]
    full = [ratio[name] for name in named if by_name[name].strategy.recompute == "full"]
    assert len(plain) + len(full) == len(named) == 15
    assert (round(min(plain), 2), round(max(plain), 2)) == (1.18, 1.29)
    assert (round(min(full), 2), round(max(full), 2)) == (1.21, 1.31)
    assert all(by_name[name].strategy.checkpoint_early_stop for name in named if by_name[name].strategy.recompute == "full")
    assert round(ratio[CALIBRATION["hopper"]], 2) == 1.29

    def r(names):
        return round(statistics.correlation([ratio[n] for n in names], [error(by_name[n]) for n in names]), 2)

    predicted = [name for name in named if name != CALIBRATION["hopper"]]
    assert len(predicted) == 14 and r(predicted) == -0.62
    assert r([n for n in predicted if by_name[n].strategy.recompute == "none"]) == -0.79
    assert r([n for n in predicted if by_name[n].strategy.recompute == "full"]) == -0.79
    everyone = [r_.name for r_ in h100 if r_.name != CALIBRATION["hopper"]]
    assert len(everyone) == 22 and r(everyone) == -0.41


def timed_layer_ratios(efficiency: float) -> list[float]:
    """The planner's layer_seconds over each of the 15 timed H100 layers, at a matmul efficiency."""
    from ddp_lab.course.plan.efficiency import layer_seconds

    data = json.loads(H100_KERNELS.read_text())
    by_name = {r.name: r for r in RUNS}
    out = []
    for row in data["layer"]:
        run = by_name[row["run"]]
        gpu = dataclasses.replace(run.cluster.gpu, matmul_efficiency=efficiency)
        out.append(layer_seconds(run.model, run.strategy, gpu).total / row["measured_seconds"])
    return out


def kernel_rate_fit() -> float:
    """The matmul efficiency at which the median timed layer takes the planner's time (bisection)."""
    low, high = 0.3, 1.0                        # the median ratio falls as the efficiency rises
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if statistics.median(timed_layer_ratios(middle)) > 1 else (low, middle)
    return low


def test_the_kernel_rate_is_where_the_planners_layer_takes_the_timed_layers_time():
    """KERNEL_GEMM_EFFICIENCY["hopper"] is the matmul efficiency at which the planner's layer_seconds equals the timed
    layer, median over the 15 timed H100 layers (bisection, rounded to 2 digits): no training run sets it. At the
    calibrated 0.55 the median planner layer is 1.27 x the timed one; at 0.74 every timed layer is within 8 %."""
    from ddp_lab.course.plan.generation_constants import KERNEL_GEMM_EFFICIENCY, kernel_efficiency_of

    assert len(json.loads(H100_KERNELS.read_text())["layer"]) == 15
    assert round(kernel_rate_fit(), 2) == KERNEL_GEMM_EFFICIENCY["hopper"] == kernel_efficiency_of("hopper") == 0.74
    assert round(statistics.median(timed_layer_ratios(GEMM_EFFICIENCY["hopper"])), 2) == 1.27
    assert max(abs(r - 1) for r in timed_layer_ratios(0.74)) < 0.08
    assert kernel_efficiency_of("blackwell") is None and kernel_efficiency_of("ampere") is None


def test_attentions_shape_moved_the_h100_constants_and_barely_the_sweep(monkeypatch):
    """attention_kernels.shape_factor, as docs/planner.md states it: forward and backward together, the kernels at
    0.96-0.97 of their 16K-token rate at 4K, 0.90 at 2K, about 0.8 at 1K; heads of 64 at 0.90 (FlashAttention-2) and 0.80
    (cuDNN). With it the H100 calibration run (2,048 tokens) spends more of its step in attention, so its matmuls
    must run faster: 0.54 -> 0.55, the
    timed layers' kernel rate 0.73 -> 0.74; the sweep's fitted H100 share stays 0.17 and its median error goes from
    3.6 % to 3.7 % (its rows start at 4K tokens)."""
    from ddp_lab.course.plan import efficiency
    from ddp_lab.course.plan.attention_kernels import shape_factor
    from ddp_lab.course.plan.fit_to_run import with_matmul_efficiency

    page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "planner.md").read_text().split())
    length = {kernel: [round(shape_factor("hopper", kernel, s, 128), 2) for s in (4096, 2048, 1024)]
              for kernel in ("fa2", "cudnn")}
    assert length == {"fa2": [0.96, 0.9, 0.8], "cudnn": [0.97, 0.9, 0.78]}
    assert "they reach 0.96-0.97 of their 16K rate at 4K, 0.90 at 2K, about 0.8 at 1K" in page
    heads = [round(shape_factor("hopper", kernel, 16384, 64), 2) for kernel in ("fa2", "cudnn")]
    assert heads == [0.9, 0.8] and "a head of 64 runs at 0.90 (FlashAttention-2) or 0.80 (cuDNN)" in page
    sweep = sequence_sweep.SEQUENCE_SWEEP
    now = (calibrated_efficiency("hopper"), round(kernel_rate_fit(), 2), round(sequence_sweep.attention_share("hopper"), 2),
           round(statistics.median(abs(error(r)) for r in sweep), 3))
    monkeypatch.setattr(efficiency, "shape_factor", lambda *shape: 1.0)
    before = (calibrated_efficiency("hopper"), round(kernel_rate_fit(), 2))
    runs = [dataclasses.replace(r, cluster=with_matmul_efficiency(r.cluster, before[0]))     # the sweep as planned then
            if r.cluster.gpu.generation == "hopper" else r for r in sweep]
    before_sweep = round(statistics.median(abs(error(r)) for r in runs), 3)
    assert (now, before, before_sweep) == ((0.55, 0.74, 0.17, 0.037), (0.54, 0.73), 0.036)
    assert "(H100 0.17 still) and its median error goes from 3.6 % to 3.7 %" in page
    assert ("this moved the H100 constant from 0.54 to 0.55, and the timed layers' kernel rate from 0.73 to 0.74"
            in page)


def test_a_generation_without_timed_kernels_has_no_kernel_rate():
    """at_kernel_rate raises one line naming the generations that have one; on an H100 it sets 0.74."""
    from ddp_lab.course.plan.fit_to_run import at_kernel_rate

    assert at_kernel_rate(ClusterSpec.preset("h200")).gpu.matmul_efficiency == 0.74
    for name in ("b200", "a100-80gb"):
        with pytest.raises(ValueError, match=r"^no kernel rate for .*: its generation's kernels were not timed "
                                             r"\(only Hopper\)") as caught:
            at_kernel_rate(ClusterSpec.preset(name))
        assert "\n" not in str(caught.value)


def test_the_overlap_slowdown_is_the_published_average_and_the_result_is_not_tuned_to_it():
    """overlap.OVERLAP_SLOWDOWN is arXiv:2507.03114's average (18.9 %), not fitted. The validation median with
    hiding free (0), at that average and at the paper's maximum (40 %), each with the GEMM constants re-set on
    their calibration runs as the rule says: the median target (8 %) is met at all three since attention runs at
    the rate the sequence sweep shows (5.2 % with hiding free, 4.1 % at the average, 4.5 % at the maximum; before
    attention's rate followed the kernels' sequence and head width: 5.8 %, 4.5 %, 4.9 %; while a ring charged the network's latency on every hop: 5.7 %, 4.1 %, 4.9 %; before the
    planner knew PyTorch's checkpoint stops early: 5.9 %, 5.5 %, 5.3 %; with the H100 kernel's 0.23 and
    FlashAttention-2's published 0.50: 7.3 %, 6.6 %, 6.4 %; before H100 attention was measured: 8.4 %, 7.3 % and
    7.8 %), so the average is kept because it is the published one, not for what it does to the median. docs/planner.md
    and lesson 13 quote these numbers."""
    from ddp_lab.course.plan.overlap import OVERLAP_SLOWDOWN

    assert OVERLAP_SLOWDOWN == 0.189 and all(r.cluster.overlap_slowdown == OVERLAP_SLOWDOWN for r in RUNS)
    medians = {}
    for slowdown in (0.0, 0.189, 0.40):
        runs = [dataclasses.replace(r, cluster=r.cluster.with_(overlap_slowdown=slowdown)) for r in RUNS]
        constants = {generation: calibrated_efficiency(generation, runs) for generation in CALIBRATION}
        runs = [dataclasses.replace(r, cluster=r.cluster.with_(gpu=dataclasses.replace(
                    r.cluster.gpu, matmul_efficiency=constants[r.cluster.gpu.generation]))) for r in runs]
        medians[slowdown] = round(summary(runs)["median"], 3)
    assert medians == {0.0: 0.052, 0.189: 0.041, 0.40: 0.045}


# Runs the model misses by more than 20 %, each with the bound it reaches and what it leaves out.
# Everything else must come within 20 %.
KNOWN_MISSES = {
    # DeepSpeed's pipeline engine (MT-NLG) ran 23 % slower than Megatron-LM's own run of the same
    # 530B shape and plan (Narayanan Table 1: 163 TFLOP/s at 2520 GPUs; MT-NLG: 126 at 2240): the software
    # stack, which the planner does not model; what it loses is mostly not proportional to its micro-batches
    # (the test below).
    "MT-NLG 530B 280 nodes": 0.24, "MT-NLG 530B 350 nodes": 0.25, "MT-NLG 530B 420 nodes": 0.30,
}


def test_what_mt_nlg_loses_is_mostly_not_proportional_to_its_micro_batches():
    """MT-NLG's published iteration times (Sec. 2.4: 60.1, 50.2 and 44.4 s on 280, 350 and 420 nodes) against its
    micro-batches per pipeline (1920 / dp = 240, 192, 160) fit a line of 0.197 s per micro-batch plus 12.7 s per step
    (within 0.32 s of each time; standard errors 0.007 s and 1.4 s: three points leave one degree of freedom); the
    planner's line for the same plans is 0.179 s plus 6.0 s (1F1B's bubble, 34 micro-batch slots = 5.7 s, and the DP
    all-reduce). So of the 9.8 s per step the planner misses at 420 nodes, 6.7 +- 1.4 s are not proportional to
    the micro-batches, more than half of the miss even one standard error down; the rest is 10 % more per
    micro-batch. The micro-batches fall as the nodes grow (m = 1920 x 35 / nodes), so a cost growing with the
    nodes would show here as well: about one bubble more than 1F1B's (DeepSpeed's pipeline engine) or a cost of
    the larger runs the paper does not name. This locates the miss, it does not explain it."""
    from statistics import linear_regression, mean

    runs = [r for r in RUNS if r.source == "mt-nlg"]
    micro_batches = [r.strategy.grad_accum for r in runs]
    published = dict(zip((240, 192, 160), (60.1, 50.2, 44.4)))
    times = [published[m] for m in micro_batches]
    slope, fixed = linear_regression(micro_batches, times)
    residuals = [t - (slope * m + fixed) for m, t in zip(micro_batches, times)]
    spread = sum((m - mean(micro_batches)) ** 2 for m in micro_batches)
    variance = sum(r * r for r in residuals) / (len(runs) - 2)
    fixed_error = (variance * (1 / len(runs) + mean(micro_batches) ** 2 / spread)) ** 0.5
    assert max(map(abs, residuals)) < 0.32 and round(fixed_error, 1) == 1.4
    model = [step_time(r.model, r.cluster, r.strategy) for r in runs]
    model_slope, model_fixed = linear_regression(micro_batches, [t.total for t in model])
    assert (round(slope, 3), round(fixed, 1), round(model_slope, 3), round(model_fixed, 1)) == (0.197, 12.7, 0.179, 6.0)
    assert {round(t.bubble, 1) for t in model} == {5.7}
    missed = published[160] - model[micro_batches.index(160)].total
    assert round(missed, 1) == 9.8 and round(fixed - model_fixed, 1) == 6.7
    assert fixed - fixed_error - model_fixed > missed / 2


def _with_micro_batch(run, micro_batch):
    """`run` with the same global batch cut into micro-batches of `micro_batch` sequences."""
    sequences = run.strategy.micro_batch * run.strategy.grad_accum
    strategy = dataclasses.replace(run.strategy, micro_batch=micro_batch, grad_accum=sequences // micro_batch)
    return dataclasses.replace(run, strategy=strategy)


def test_a_micro_batch_of_two_would_be_the_bubble_mt_nlg_misses():
    """MT-NLG's entry assumes micro-batch 1, as the Megatron-LM runs of Table 1 do (its `assumed` field lists the
    micro-batch among what Sec. 2.4 does not state; Sec. 2.4 gives TP, PP, the global batch and the iteration times). The part of the miss that does not
    scale with the micro-batches (the test above: 6.7 +- 1.4 s) is one 1F1B bubble's size (5.7 s), and a bubble
    grows with the micro-batch: at 2 sequences per micro-batch (same global batch, half the micro-batches) it is
    11.4 s and the three errors come out flat across the scales, +9 % to +11 %, the 10 % per micro-batch the fit
    found, where at micro-batch 1 they grow with the nodes (+23 % to +29 %). At 4 they overshoot (-9 % to -13 %).
    An unstated micro-batch of 2 would explain the shape of the miss; the planner does not adopt it, because
    choosing the unknown setting that fits would be tuning to the target (Megatron-LM's own 530B run, at micro-batch
    1, is within 3.5 %; at 2 it would be -12.0 %)."""
    runs = [r for r in RUNS if r.source == "mt-nlg"]
    errors = {mb: [round(100 * error(_with_micro_batch(r, mb)), 1) for r in runs] for mb in (1, 2, 4)}
    assert errors == {1: [22.8, 24.1, 29.0], 2: [10.5, 9.2, 11.3], 4: [-8.5, -12.4, -13.1]}
    spread = {mb: max(e) - min(e) for mb, e in errors.items()}
    assert spread[2] < spread[1] / 2
    bubbles = {round(step_time(r.model, r.cluster, r.strategy).bubble, 1) for r in map(_with_micro_batch, runs, [2] * 3)}
    assert bubbles == {11.4}
    megatron_530b = next(r for r in RUNS if r.name == "Megatron 529.6B")
    assert (round(100 * error(megatron_530b), 1), round(100 * error(_with_micro_batch(megatron_530b, 2)), 1)) == (-3.5, -12.0)


@pytest.mark.parametrize("run", [r for r in RUNS if r.scored and r.name not in CALIBRATION.values()],
                         ids=lambda r: r.name)
def test_published_run_is_predicted(run):
    """Each predicted run within 20 % of its published throughput, or within its KNOWN_MISSES bound."""
    assert abs(error(run)) <= KNOWN_MISSES.get(run.name, 0.20), (run.name, predict(run), run.published)


def test_validation_set_and_its_errors():
    """At least 30 predicted runs from 6 sources on 2 GPU generations, FSDP at several scales, H100s; the
    median and largest absolute error reached, and the misses beyond 20 % are the named ones.

    The targets are a median of at most 8 % and no run beyond 20 %: the median is met (4.1 %; 4.5 % before flash
    attention's rate followed the kernels' sequence and head width, attention_kernels.shape_factor), the largest
    error is not (29.0 %, MT-NLG's 420 nodes; every run but MT-NLG's three is within 16 %: IBM's Llama 2 7B on 96
    H100s +15.2 %). It would be 5.1 % if full recomputation re-ran the whole layer in every run: PyTorch's
    non-reentrant checkpoint, which torchtitan, IBM's fms-fsdp and llm-foundry's benchmarks on PyTorch 2.1 use, stops
    before the FFN's down projection (Strategy.checkpoint_early_stop; 3.9 % had MosaicML's runs re-run the whole
    layer). It was 6.6 % (and
    that 760M run +20.2 %) with flash attention at the kernels' rates (A100 0.50,
    FlashAttention-2's paper; H100 0.23, timed alone) instead of the rates MosaicML's sequence sweep shows inside a
    step (generation_constants.FLASH_ATTENTION_UTILIZATION, 0.31 and 0.17), 7.3 % (760M +24 %) with H100
    attention at the published 0.35, 8.4 % and 30.0 % before compute beside hidden communication
    paid the published 18.9 % slowdown (overlap.OVERLAP_SLOWDOWN), 8.9 % and 31.5 % with flash attention at the
    GEMMs' rate, 6.4 % median with the earlier rule of thumb for the memory-bound kernels (which charged about twice
    the bytes traffic.py counts). A change to the model that moves these numbers must update them here, in docs/planner.md's
    table and in lesson 13."""
    result = summary()
    assert result["runs"] >= 30 and result["sources"] >= 6
    assert (round(result["median"], 3), round(result["max"], 3)) == (0.041, 0.29)
    stops_early = {r.source for r in RUNS if r.strategy.checkpoint_early_stop}
    assert stops_early == {"mosaicml", "torchtitan", "ibm"}          # Megatron-LM, DeepSpeed: the whole layer
    assert [r.name for r in RUNS if r.strategy.recompute == "full" and not r.strategy.checkpoint_early_stop
            and r.source == "mosaicml"] == ["MPT-70b 64xA100", "MPT-70b 32xA100"]      # before PyTorch 2.1
    whole_layer = [published.with_checkpoint_early_stop(r, False) for r in RUNS]
    mosaic_whole = [published.with_checkpoint_early_stop(r, False) if r.source == "mosaicml" else r for r in RUNS]
    assert (round(summary(whole_layer)["median"], 3), round(summary(mosaic_whole)["median"], 3)) == (0.051, 0.039)
    assert {r.cluster.gpu.generation for r in RUNS} >= {"ampere", "hopper"}
    fsdp = {(r.model.parameters() // 10**9, r.strategy.gpus) for r in RUNS if r.strategy.zero == 3}
    assert len({size for size, _ in fsdp}) >= 5 and len({gpus for _, gpus in fsdp}) >= 4
    misses = {r.name for r in RUNS if r.scored and abs(error(r)) > 0.20}
    assert misses <= set(KNOWN_MISSES), misses - set(KNOWN_MISSES)


@pytest.mark.parametrize("size, published", [("125m", 125_311_488), ("1b", 1_315_950_592), ("7b", 6_658_859_008),
                                             ("13b", 12_853_954_560), ("70b", 64_862_437_376)])
def test_mpt_shapes_have_the_benchmark_tables_parameter_counts(size, published):
    """The MPT shapes (llm-foundry's yamls) give the NumParams column of MosaicML's tables at sequence 2048."""
    from ddp_lab.plan.published import mpt

    assert mpt(size).parameters() == published


def test_bloom_shape():
    """BLOOM-176B: 176,247M parameters published (ALiBi: no position table)."""
    bloom = next(r for r in RUNS if r.name == "BLOOM-176B").model
    assert bloom.parameters() == pytest.approx(176_247e6, rel=1e-4)


# ---- Mixture of experts: total and active parameters from each model's config ------------------------------
def test_mixtral_8x7b_parameters():
    """Counted by hand from config.json: 32 layers of attention (2 x 4096^2 + 2 x 4096 x 1024, 8 kv heads of 128),
    two RMSNorms, a router 4096 x 8 and 8 SwiGLU experts of 3 x 4096 x 14336; embedding and head 32000 x 4096."""
    mixtral = Transformer.preset("mixtral-8x7b")
    expert, attention, norms, router = 3 * 4096 * 14336, 2 * 4096**2 + 2 * 4096 * 1024, 2 * 4096, 4096 * 8
    around = 2 * 32000 * 4096 + 4096
    assert mixtral.parameters() == 32 * (attention + norms + router + 8 * expert) + around == 46_702_792_704
    assert mixtral.active_parameters() == 32 * (attention + norms + router + 2 * expert) + around
    assert (round(mixtral.parameters() / 1e9, 1), round(mixtral.active_parameters() / 1e9, 1)) == (46.7, 12.9)
    assert (round(mixtral.parameters() / 1e9), round(mixtral.active_parameters() / 1e9)) == (47, 13)   # the paper


def test_deepseek_moe_16b_parameters():
    """28 layers, the first with a dense FFN of 10944, the other 27 with 64 routed and 2 shared experts of 1408
    (6 routed per token) and a router 2048 x 64; multi-head attention 4 x 2048^2; vocabulary 102400, untied."""
    deepseek = Transformer.preset("deepseek-moe-16b")
    expert, attention, norms = 3 * 2048 * 1408, 4 * 2048**2, 2 * 2048
    dense_layer = attention + norms + 3 * 2048 * 10944
    moe_layer = attention + norms + 2048 * 64 + (64 + 2) * expert
    around = 2 * 102400 * 2048 + 2048
    assert deepseek.parameters() == dense_layer + 27 * moe_layer + around
    assert deepseek.active_parameters() == deepseek.parameters() - 27 * (64 - 6) * expert
    assert (round(deepseek.parameters() / 1e9, 1), round(deepseek.active_parameters() / 1e9, 1)) == (16.4, 2.8)


# ---- Long context: Llama 3 405B's CP 16 stage ------------------------------------------------------------
def test_llama3_405b_long_context_stage_fits_an_h100():
    """Table 4's third row: TP 8, CP 16, PP 16 at 131,072 tokens, trained on 80 GB H100s, so the planner's memory
    for it must stay under 80 GiB. DP: the row prints 4, but 8 x 16 x 16 x 4 = 8,192 GPUs and 4 x 16 x 131,072 =
    8.4M tokens, while the same row says 16,384 GPUs and 16M tokens: both say DP 8, used here (DP 4 only
    doubles the sharded gradients and optimizer state, +0.35 GB, and fits too).

    Expressed as: Llama 3 balances 126 layers over 16 stages by giving the first and the last stage one layer
    fewer (Sec. 3.3.2), so pipeline rank 1 holds 8 layers and no embedding or head, and more micro-batches in
    flight than any later rank. The planner's stages are equal, so the model is planned with 128 layers (16 x 8)
    and rank 1's memory read: exactly its 8 layers. Assumed: 1F1B without interleaving (Table 4 gives no V),
    ZeRO-2 (Sec. 3.3.2: FSDP shards optimizer states and gradients; weights are not resharded after forward),
    FlashAttention, which keeps no score matrix (the planner's selective recomputation keeps the same tensors),
    sequence parallelism. Not modelled: the fp32 gradient accumulation of Sec. 3.3.2 and any K/V the
    all-gather variant keeps for backward."""
    llama = Transformer.preset("llama3-405b")
    assert llama.parameters() == 405_853_388_800            # Hugging Face's safetensors total for Llama-3.1-405B
    slots = llama.with_(layers=128, seq_len=131072)
    long = Strategy(dp=8, tp=8, cp=16, pp=16, zero=2, grad_accum=16, sequence_parallel=True, recompute="selective")
    check(slots, long, gpus=16384, gpus_per_node=8)
    assert long.global_batch * slots.seq_len == 16 * 2**20                      # 8 x 16 sequences = 16M tokens
    states, activations = stage_state_bytes(slots, long, 1), stage_activation_bytes(slots, long, 1)
    layer = llama.layer_parameters()
    assert states.params == 2 * 8 * ((layer - 2 * 16384) // 8 + 2 * 16384)   # bf16, 8 layers: split by tp but the norms
    # a CP-16 rank at 128K holds what a rank of Table 4's 8K row (same TP, PP; 8192 tokens per rank) holds
    short = long.with_(dp=128, cp=1)
    assert activations == stage_activation_bytes(slots.with_(seq_len=8192), short, 1)
    total = states.model_states + activations
    assert total < 80 * 2**30                                                 # 83.8 GB of 85.9 (flash attention: with its log-sum-exp)
    assert round(total / 1e9, 1) == 83.8
    wide = long.with_(dp=4)                                                   # the row as printed
    assert stage_state_bytes(slots, wide, 1).model_states + activations < 80 * 2**30
    # the ring's K/V sends (4 MB per step) hide behind causal attention on 8192 x 8192 blocks (Sec. 3.3.2)
    time = step_time(slots, ClusterSpec.preset("h100-sxm", nodes=2048), long)
    assert time.cp_comm > 0 == time.cp_comm_exposed


def test_llama3_405b_moves_with_its_unstated_interleaving():
    """Why Llama 3 405B is listed but not scored (lesson 13, docs/planner.md): Table 4 does not state the pipeline's
    interleaving depth, and the prediction moves from -43 % (none) to -28 % (8 virtual stages of one layer) on
    8,192 GPUs, -52 % to -27 % on 16,384."""
    llama3 = [run for run in RUNS if run.source == "llama3"]
    assert [run.scored for run in llama3] == [False, False]
    for run, expected in zip(llama3, [(-0.43, -0.28), (-0.52, -0.27)]):
        errors = [error(dataclasses.replace(run, strategy=dataclasses.replace(
                      run.strategy, virtual_stages=v, schedule="interleaved" if v > 1 else "1f1b"))) for v in (1, 8)]
        assert tuple(round(e, 2) for e in errors) == expected, (run.name, errors)


# ---- What lessons 13 and 15 print about the published runs: pinned here, the lessons assert only their claims ----
def _mosaic_and_ibm_errors(recompute: str, early_stop: bool = True) -> list[float]:
    """Lesson 13's errors(): MosaicML's and IBM's predicted runs (the two sources that ran with and without
    recomputation), full recomputation charged as their PyTorch checkpoint runs it or as the whole layer."""
    return [error(run if early_stop else published.with_checkpoint_early_stop(run, False))
            for run in published.predictions() if run.source in ("mosaicml", "ibm") and run.strategy.recompute == recompute]


def test_the_published_set_and_what_recomputation_is_charged():
    """56 runs from 7 sources, 52 of them predicted, from 6 (Llama 3 405B's two are not scored, the two calibration runs
    set constants). MosaicML's and IBM's runs by recomputation, as lesson 13 prints them: without it -2 % to +15 %;
    full recomputation charged as PyTorch's checkpoint runs it (early stop) -9 % to +8 %, charged the whole layer
    -14 % to +0.5 %, every run slow but MPT-70B on 32 H100s. Nor is what the runs without recomputation miss a fixed
    cost per step: MosaicML's, in seconds per step (measured minus predicted), from 0.12 s slow to 0.20 s fast."""
    assert len(RUNS) == 56 and len({run.source for run in RUNS}) == 7
    result = summary()
    assert (result["runs"], result["sources"]) == (52, 6)
    plain, full = _mosaic_and_ibm_errors("none"), _mosaic_and_ibm_errors("full")
    whole_layer = _mosaic_and_ibm_errors("full", early_stop=False)
    assert -0.03 < min(plain) and max(plain) < 0.16
    assert -0.09 < min(full) and max(full) < 0.085
    assert -0.15 < min(whole_layer) and max(whole_layer) < 0.005
    assert [r.name for r in published.predictions() if r.source in ("mosaicml", "ibm") and r.strategy.recompute == "full"
            and error(published.with_checkpoint_early_stop(r, False)) > 0] == ["MPT-70b 32xH100"]

    def missed_seconds(run):
        tokens = run.strategy.global_batch * run.model.seq_len / run.strategy.gpus       # per GPU and step
        return tokens / run.published - tokens / predict(run)

    gaps = sorted(missed_seconds(run) for run in published.predictions()
                  if run.source == "mosaicml" and run.strategy.recompute == "none")
    assert gaps[0] < -0.1 and 0.195 < gaps[-1] < 0.205


def test_the_runs_lesson_13_names_where_the_planner_is_approximate():
    """MT-NLG's 530B on 280 nodes ran 23 % below Megatron-LM's own 530B run of the same shape (126 against 163
    TFLOP/s per GPU); MosaicML's 760M on 8 H100s published 8 % below the same model on 16 H100s per GPU, which the
    planner predicts alike (+14 %); IBM's Llama 2 7B on 96 H100s moves FSDP traffic more than half as long as its
    compute and hides all but a tenth of it, predicted 10-20 % fast."""
    by_name = {run.name: run for run in RUNS}
    mt_nlg, megatron_530b = by_name["MT-NLG 530B 280 nodes"], by_name["Megatron 529.6B"]
    assert round(1 - mt_nlg.published / megatron_530b.published, 2) == 0.23
    mpt8, mpt16 = by_name["MPT-760m 8xH100"], by_name["MPT-760m 16xH100"]
    assert (round(mpt8.published / mpt16.published - 1, 2), round(error(mpt8), 2)) == (-0.08, 0.14)
    ibm = by_name["IBM Llama 2 7B 96xH100"]
    t = step_time(ibm.model, ibm.cluster, ibm.strategy)
    assert t.dp_comm > 0.5 * t.compute and t.dp_comm_exposed < 0.1 * t.dp_comm and 0.1 < error(ibm) < 0.2


def test_the_sweeps_long_h100_rows_lesson_15_prints():
    """The sequence sweep's H100 rows at 32K-64K tokens: 8 of them, each within 11 % at the planner's flash share
    (the kernel's own 0.23 makes them too fast: test_flash_attention_runs_at_the_rate_the_published_sequence_sweep_shows)."""
    long_rows = [run for run in sequence_sweep.SEQUENCE_SWEEP
                 if run.cluster.gpu.generation == "hopper" and run.model.seq_len >= 32768]
    assert len(long_rows) == 8 and all(abs(error(run)) < 0.11 for run in long_rows)


def test_the_fits_hopper_ceiling_is_the_fastest_gemm_timed_on_an_h100():
    """cli_fit.HOPPER_GEMM_CEILING (the note a fit above it prints) is the measured file's fastest GEMM on the planner's
    scale (its share of peak with the tile cost of efficiency.gemm_seconds taken out), not a guess."""
    from ddp_lab.plan.cli_fit import HOPPER_GEMM_CEILING   # lazy: the CLI's module, only this test reads it

    data = json.loads(H100_KERNELS.read_text())
    assert round(max(row["share_of_peak"] * (1 + TILE_K / row["k"]) for row in data["gemm"]), 2) == HOPPER_GEMM_CEILING

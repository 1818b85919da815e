"""The planner against published numbers, each with its source and the tolerance reached.

The throughput runs, with their sources and tables, are ddp_lab/plan/published.py's RUNS (lesson 13
prints their summary; README, "How far to trust the planner", lists every run with its error).
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
  280/350/420 DGX A100 40GB, 60.1/50.2/44.4 s per iteration = 126/121/113 TFLOP/s per GPU).

ONE efficiency factor per GPU generation (efficiency.GEMM_EFFICIENCY) is calibrated on ONE run each
(published.CALIBRATION) by `test_calibration_run`; every other run is a prediction.
"""

from __future__ import annotations

import dataclasses

import pytest

from ddp_lab.course.plan.efficiency import GEMM_EFFICIENCY
from ddp_lab.plan import Strategy, Transformer, layer_activation_bytes, model_state_bytes, step_flops
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


@pytest.mark.parametrize("generation", sorted(CALIBRATION))
def test_calibration_run(generation):
    """How GEMM_EFFICIENCY[generation] was set: the value that makes its one calibration run predict the
    published throughput, found by bisection and rounded to 2 digits."""
    run = next(r for r in RUNS if r.name == CALIBRATION[generation])
    assert run.cluster.gpu.generation == generation
    low, high = 0.1, 1.0
    for _ in range(40):
        middle = (low + high) / 2
        cluster = run.cluster.with_(gpu=dataclasses.replace(run.cluster.gpu, matmul_efficiency=middle))
        low, high = (middle, high) if predict(run, cluster) < run.published else (low, middle)
    assert round(low, 2) == GEMM_EFFICIENCY[generation]


# Runs the model misses by more than 20 %, each with the bound it reaches and what it leaves out.
# Everything else must come within 20 %.
KNOWN_MISSES = {
    # DeepSpeed's pipeline engine (MT-NLG) ran 25 % slower than Megatron-LM's own run of the same
    # 530B shape and plan (Narayanan Table 1: 163 TFLOP/s at 2520 GPUs; MT-NLG: 126 at 2240): the software
    # stack, which the planner does not model.
    "MT-NLG 530B 280 nodes": 0.25, "MT-NLG 530B 350 nodes": 0.26, "MT-NLG 530B 420 nodes": 0.31,
    # Runs without activation checkpointing come out 5-30 % too fast on both generations (MosaicML, IBM),
    # runs with full recomputation within 15 %: something that costs more without recomputation is
    # missing (the small 125M/760M models add the head's and attention's lower efficiency).
    "MPT-125m 8xA100": 0.25, "MPT-760m 8xH100": 0.25, "IBM Llama 2 7B 128xA100": 0.25,
    "IBM Llama 2 7B 96xH100": 0.35,
}


@pytest.mark.parametrize("run", [r for r in RUNS if r.scored and r.name not in CALIBRATION.values()],
                         ids=lambda r: r.name)
def test_published_run_is_predicted(run):
    """Each predicted run within 20 % of its published throughput, or within its KNOWN_MISSES bound."""
    assert abs(error(run)) <= KNOWN_MISSES.get(run.name, 0.20), (run.name, predict(run), run.published)


def test_validation_set_and_its_errors():
    """At least 30 predicted runs from 6 sources on 2 GPU generations, FSDP at several scales, H100s;
    median absolute error at most 8 % (reached: 6.4 %), and the misses beyond 20 % are the named ones."""
    result = summary()
    assert result["runs"] >= 30 and result["sources"] >= 6 and result["median"] <= 0.08
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

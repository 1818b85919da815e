"""The planner against published numbers, each with its source and the tolerance reached.

Sources (numbers checked against the papers' tables as quoted by the public pages named):
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

ONE efficiency factor (cluster.MATMUL_EFFICIENCY) is calibrated on ONE run, Table 1's 18.4B
row, by `test_calibration_run`; every other row is a prediction with that factor.
- Mixture of experts: Mixtral 8x7B (Jiang et al. 2024, arXiv:2401.04088: "47B ... 13B active"; Mistral AI's
  announcement of 2023-12-11: "46.7B total parameters but only uses 12.9B parameters per token"; Hugging
  Face's safetensors total for Mixtral-8x7B: 46,702,792,704); DeepSeekMoE 16B (Dai et al. 2024,
  arXiv:2401.06066, Sec. 5.1.2: "approximately 16.4B total parameters, with the number of activated
  parameters around 2.8B"). Each shape from its config.json (model.py cites the fields).
- Long context: Llama 3 (Llama Team 2024, arXiv:2407.21783), Table 4's third row and Sec. 3.3.2 (read in
  the paper's text: 16,384 GPUs, TP 8, CP 16, PP 16, DP 4, sequence 131,072, batch size/DP 16, 16M tokens
  per batch, 380 TFLOP/s per GPU).
"""

from __future__ import annotations

import dataclasses

import pytest

from ddp_lab.plan import (MATMUL_EFFICIENCY, ClusterSpec, Strategy, Transformer, check, layer_activation_bytes,
                          model_state_bytes, stage_activation_bytes, stage_state_bytes, step_flops, step_time,
                          tflops_per_gpu)

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
    got = layer_activation_bytes(model, Strategy(tp=t, micro_batch=b, sequence_parallel=sp, recompute=recompute))
    assert got == pytest.approx(TABLE_2[case](2048, b, h, a, t), rel=1e-12)


def test_korthikanti_no_parallelism():
    """Table 2's first row, t = 1: sbh(34 + 5as/h)."""
    model = Transformer.preset("gpt3-175b")
    s, h, a = 2048, 12288, 96
    assert layer_activation_bytes(model, Strategy(micro_batch=2)) == 2 * s * h * (34 + 5 * a * s / h)


# ---- Throughput: one calibration, then predictions --------------------------------------------
def _tflops(model, cluster, strategy, efficiency=MATMUL_EFFICIENCY):
    cluster = cluster.with_(gpu=dataclasses.replace(cluster.gpu, matmul_efficiency=efficiency))
    return tflops_per_gpu(model, strategy, step_time(model, cluster, strategy))


def _megatron_row(layers, hidden, heads, tp, pp, gpus, batch, micro_batch=1):
    model = Transformer(f"gpt-{hidden}", layers, hidden, heads, vocab=51200, seq_len=2048)
    dp = gpus // (tp * pp)
    strategy = Strategy(dp=dp, tp=tp, pp=pp, micro_batch=micro_batch, grad_accum=batch // (dp * micro_batch),
                        recompute="full")
    return model, ClusterSpec.preset("a100-80gb", nodes=gpus // 8), strategy


def test_megatron_flops_formula():
    """Narayanan et al. Sec. 5.1: F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)); MT-NLG's published
    iteration times turn into its published TFLOP/s with it (126, 121, 113 within 0.5)."""
    model = Transformer("mt-nlg-530b", 105, 20480, 128, vocab=50272, seq_len=2048)
    flops = step_flops(model, Strategy(dp=1920, recompute="full"))
    for gpus, seconds, published in ((2240, 60.1, 126), (2800, 50.2, 121), (3360, 44.4, 113)):
        assert flops / (gpus * seconds) / 1e12 == pytest.approx(published, abs=0.6)


def test_calibration_run():
    """How MATMUL_EFFICIENCY was set: the factor that makes Table 1's 18.4B row (TP 8, 256 GPUs,
    batch 1024) predict its published 135 TFLOP/s, found by bisection and rounded to 2 digits."""
    model, cluster, strategy = _megatron_row(40, 6144, 48, 8, 1, 256, 1024)
    low, high = 0.1, 1.0
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if _tflops(model, cluster, strategy, middle) < 135 else (low, middle)
    assert round(low, 2) == MATMUL_EFFICIENCY


# Table 1 rows without pipelining: micro-batch size only moves the DP overlap window (1 assumed).
TABLE_1_NO_PP = [  # (params, layers, hidden, heads, tp, gpus, batch, published TFLOP/s per GPU)
    ("1.7B", 24, 2304, 24, 1, 32, 512, 137),
    ("3.6B", 30, 3072, 32, 2, 64, 512, 138),
    ("7.5B", 36, 4096, 32, 4, 128, 512, 142),
]


@pytest.mark.parametrize("row", TABLE_1_NO_PP, ids=[r[0] for r in TABLE_1_NO_PP])
def test_megatron_table1_without_pipeline(row):
    """Predicted within 20 % (reached: 1.7B +18 %, 3.6B +12 %, 7.5B +1 %). The model over-predicts the
    small models: one efficiency for all matmuls misses that small GEMMs (h = 2304) run further from
    peak than large ones, the trend Narayanan et al. explain Table 1's rising TFLOP/s with."""
    _, layers, hidden, heads, tp, gpus, batch, published = row
    got = _tflops(*_megatron_row(layers, hidden, heads, tp, 1, gpus, batch))
    assert got == pytest.approx(published, rel=0.20)


TABLE_1_PP = [  # (params, layers, hidden, heads, tp, pp, gpus, batch, published)
    ("39.1B", 48, 8192, 64, 8, 2, 512, 1536, 138),
    ("76.1B", 60, 10240, 80, 8, 4, 1024, 1792, 140),
    ("145.6B", 80, 12288, 96, 8, 8, 1536, 2304, 148),
    ("310.1B", 96, 16384, 128, 8, 16, 1920, 2160, 155),
    ("529.6B", 105, 20480, 128, 8, 35, 2520, 2520, 163),
    ("1T", 128, 25600, 160, 8, 64, 3072, 3072, 163),
]


@pytest.mark.parametrize("row", TABLE_1_PP, ids=[r[0] for r in TABLE_1_PP])
def test_megatron_table1_with_pipeline(row):
    """Within 15 % (reached: 39B +2 %, 76B +1 %, 146B -4 %, 310B -8 %, 530B -13 %, 1T -12 %). Table 1
    does not state the
    micro-batch size or schedule: we ASSUME micro-batch 1 and 1F1B (not interleaved). The model
    under-predicts the largest runs, which got faster GEMMs (h up to 25,600) and may have used the
    interleaved schedule (a smaller bubble) - both outside a one-factor, 1F1B model."""
    _, layers, hidden, heads, tp, pp, gpus, batch, published = row
    got = _tflops(*_megatron_row(layers, hidden, heads, tp, pp, gpus, batch))
    assert got == pytest.approx(published, rel=0.15)


def test_bloom_176b():
    """BLOOM-176B on 384 A100 80GB: about 150 TFLOP/s published; predicted within 5 % (reached -2 %)."""
    model = Transformer("bloom-176b", 70, 14336, 112, vocab=250880, seq_len=2048, position="rope")
    assert model.parameters() == pytest.approx(176_247e6, rel=1e-4)   # 176,247M published (ALiBi: no position table)
    strategy = Strategy(dp=8, tp=4, pp=12, zero=1, micro_batch=2, grad_accum=128, recompute="full")
    cluster = ClusterSpec.preset("a100-80gb", nodes=48).with_(inter_node_bandwidth=4 * 100e9 / 8 / 8)
    assert _tflops(model, cluster, strategy) == pytest.approx(150, rel=0.05)


@pytest.mark.parametrize("nodes, published", [(280, 126), (350, 121), (420, 113)])
def test_mt_nlg_530b(nodes, published):
    """MT-NLG 530B: predicted within 20 % (reached +11 %, +12 %, +16 %). Micro-batch 1 is ASSUMED
    (not verified). Over-predicted, and more so with more GPUs: the published numbers fall faster
    with data-parallel size than the 1F1B bubble (p - 1)/m explains."""
    model = Transformer("mt-nlg-530b", 105, 20480, 128, vocab=50272, seq_len=2048)
    dp = nodes // 35
    strategy = Strategy(dp=dp, tp=8, pp=35, micro_batch=1, grad_accum=1920 // dp, recompute="full")
    got = _tflops(model, ClusterSpec.preset("a100-40gb", nodes=nodes), strategy)
    assert got == pytest.approx(published, rel=0.20)


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
    assert total < 80 * 2**30                                                 # 83.7 GB of 85.9
    assert round(total / 1e9, 1) == 83.7
    wide = long.with_(dp=4)                                                   # the row as printed
    assert stage_state_bytes(slots, wide, 1).model_states + activations < 80 * 2**30
    # the ring's K/V sends (4 MB per step) hide behind causal attention on 8192 x 8192 blocks (Sec. 3.3.2)
    time = step_time(slots, ClusterSpec.preset("h100-sxm", nodes=2048), long)
    assert time.cp_comm > 0 == time.cp_comm_exposed

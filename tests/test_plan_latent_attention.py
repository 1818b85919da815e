"""Multi-head latent attention in the planner: each cost written out by hand from DeepSeek-V2's equations
(arXiv:2405.04434, Sec. 2.1) and Megatron-Core's split, against what the planner computes.

The shape is DeepSeek-V3's (arXiv:2412.19437): 128 heads, queries and keys of 128 + 64, values of 128, a
1,536-wide query latent and a 512-wide key/value latent, on a hidden size of 7,168. Pure Python, no torch.
"""

from __future__ import annotations

import pytest

from ddp_lab.course.plan import activations, context_parallel, efficiency, memory, steptime, tp_overlap, traffic
from ddp_lab.course.plan.cluster_spec import ClusterSpec
from ddp_lab.course.plan.latent_attention import LatentAttention
from ddp_lab.course.plan.model import Transformer
from ddp_lab.course.plan.strategy import Strategy
from ddp_lab.course.plan.strategy import check as strategy_check

H, A, S = 7168, 128, 4096
V3_LAYER = Transformer("v3-layer", 1, H, A, 129280, S, ffn=18432, ffn_kind="swiglu", norm="rmsnorm", bias=False,
                       position="rope", tied_embeddings=False, dropout=False, latent=LatentAttention(512, 1536))
DOWN = H * 1536 + H * (512 + 64)                                   # W_DQ, and W_DKV with the shared RoPE key
UP_AND_OUT = 1536 * A * 192 + 512 * A * 256 + A * 128 * H          # W_UQ (with W_QR), W_UKV, W_O
FFN = 3 * H * 18432


def test_a_layers_forward_flops_are_its_matrices_and_two_score_widths():
    """2 s per weight, plus QK^T over 192 per head and the weighted values over 128: 2 s^2 a (192 + 128)."""
    assert steptime.layer_forward_flops(V3_LAYER) == 2 * S * (DOWN + UP_AND_OUT + FFN) + 2 * S * S * A * (192 + 128)
    # a multi-head layer of the same Q width would count the values at 192 too: a different number
    assert steptime.layer_forward_flops(V3_LAYER) != 2 * S * (DOWN + UP_AND_OUT + FFN) + 4 * S * S * A * 192


def test_tensor_parallel_ranks_split_the_up_projections_and_repeat_the_down_projections():
    """Megatron-Core's default MLA spec: the down-projections are plain (duplicated) linears on every TP rank, run
    on the whole sequence, or with sequence parallelism on the rank's s/tp tokens."""
    tp = 8
    norms = 2 * H + 1536 + 512                                     # two layer norms and the two latent norms
    assert memory.layer_parameters_per_rank(V3_LAYER, tp) == DOWN + (UP_AND_OUT + FFN) // tp + norms
    assert memory.layer_parameters_per_rank(V3_LAYER, 1) == V3_LAYER.layer_parameters()
    assert memory.layer_other_parameters(V3_LAYER, tp) == norms     # what FP8 keeps in bf16: no matrix
    gemm, core = efficiency.layer_matmul_flops(V3_LAYER, Strategy(tp=tp))
    assert gemm == pytest.approx(2 * S * (DOWN + (UP_AND_OUT + FFN) / tp))
    assert core == pytest.approx(2 * S * S * A * (192 + 128) / tp)
    listed = efficiency.layer_gemms(V3_LAYER, Strategy(tp=tp))
    assert sum(flops for flops, _, _ in listed) == pytest.approx(gemm)
    assert [k for _, k, _ in listed[:5]] == [H, H, 1536, 512, A * 128 // tp]    # downs, ups, out: reduction widths
    gemm_sp, _ = efficiency.layer_matmul_flops(V3_LAYER, Strategy(tp=tp, sequence_parallel=True))
    assert gemm_sp == pytest.approx(2 * S * (DOWN + UP_AND_OUT + FFN) / tp)
    listed_sp = efficiency.layer_gemms(V3_LAYER, Strategy(tp=tp, sequence_parallel=True))
    assert sum(flops for flops, _, _ in listed_sp) == pytest.approx(gemm_sp)


def test_saved_tensors_split_by_tp_but_the_latents():
    """Q and K of a 192 width, V and the output of 128, per head (split by tp); the two latents before and after
    their norms and the shared RoPE key on every rank, as the norms' inputs: split only by sequence parallelism."""
    tp, e = 8, 2
    latents = S * e * (2 * (1536 + 512) + 64)
    per_head = S * e * A * (192 + 192 + 128 + 128)
    ffn = S * e * 4 * 18432
    around = S * e * H * 4                                          # 2 norm inputs, QKV input, fc1 input
    log_sum_exp = 4 * A * S
    plain = Strategy(tp=tp)
    expected = around + latents + (per_head + ffn + log_sum_exp) // tp
    assert activations.layer_activation_bytes(V3_LAYER, plain) == expected
    split = Strategy(tp=tp, sequence_parallel=True)
    assert activations.layer_activation_bytes(V3_LAYER, split) == (around + latents) // tp + (per_head + ffn
                                                                                            + log_sum_exp) // tp


def test_context_parallel_ring_sends_keys_and_values_of_their_own_widths():
    """A cp rank's key and value block: s/cp tokens of 128 x 192 key and 128 x 128 value values per tp rank."""
    model = V3_LAYER.with_(seq_len=32768)
    strategy = Strategy(tp=2, cp=4)
    assert context_parallel.kv_block_bytes(model, strategy) == 32768 // 4 * A * (192 + 128) // 2 * 2
    assert context_parallel.causal_attention_flops(model, strategy) == 32768 ** 2 * A * (192 + 128) / 8


def test_memory_bound_kernels_rotate_only_the_rope_parts_and_norm_the_latents_where_the_norms_run():
    tp, e = 4, 2
    ops = {op.name: op for op in traffic.layer_ops(V3_LAYER, Strategy(tp=tp))}
    assert ops["RoPE"].forward == S * 2 * e * (A * 64 + 64)        # every head's RoPE query part and one key
    assert ops["latent norms"].forward == S * 2 * e * (1536 + 512)
    assert ops["latent norms"].split(Strategy(tp=tp)) == 1
    assert ops["latent norms"].split(Strategy(tp=tp, sequence_parallel=True)) == tp


def test_the_collective_in_front_of_attention_carries_the_latents():
    """Per layer, in all-reduces of b s h: without sequence parallelism 2 forward (the g after attention and the FFN)
    and 1 + r backward (the f in front of the FFN, and the latents' in front of attention); with it 1.5 + r / 2 each
    way (three half-rings of b s h and one of the latents); r = (1536 + 512 + 64) / 7168. With --tp-comm-overlap the
    exposed part is less than the whole, and a latent-attention layer plans (it once failed to unpack its GEMMs)."""
    cluster = ClusterSpec.preset("h100-sxm")
    r = (1536 + 512 + 64) / H
    plain, sp = Strategy(tp=8), Strategy(tp=8, sequence_parallel=True)
    one = steptime._tp_all_reduce(V3_LAYER, cluster, plain)
    assert steptime.layer_tp_communication(V3_LAYER, cluster, plain) == pytest.approx((2 * one, (1 + r) * one))
    assert steptime.layer_tp_communication(V3_LAYER, cluster, sp) == pytest.approx(((1.5 + r / 2) * one,) * 2)
    # full recomputation runs the forward's collectives again in backward: + 2, or + (1.5 + r / 2)
    assert steptime.layer_tp_communication(V3_LAYER, cluster, plain.with_(recompute="full")) == pytest.approx(
        (2 * one, (3 + r) * one))
    assert steptime.layer_tp_communication(V3_LAYER, cluster, sp.with_(recompute="full")) == pytest.approx(
        ((1.5 + r / 2) * one, (3 + r) * one))
    dense = V3_LAYER.with_(latent=None, heads=56, kv_heads=8)
    assert steptime.layer_tp_communication(dense, cluster, sp) == pytest.approx((2 * one, 2 * one))
    overlapped = sp.with_(tp_comm_overlap=True)
    forward, backward = tp_overlap.layer_exposed(V3_LAYER, cluster, overlapped, one)
    assert 0 < forward < (1.5 + r / 2) * one and 0 < backward < (1.5 + r / 2) * one
    assert steptime.step_time(V3_LAYER, cluster, overlapped).tp_comm_hidden > 0


def test_what_contradicts_latent_attention_is_refused_in_one_line():
    for change, word in ((dict(kv_heads=8), "kv_heads=8"), (dict(head_size=192), "head_size=192"),
                         (dict(position="learned"), "position='learned'"), (dict(qk_norm=True), "qk_norm=True")):
        with pytest.raises(ValueError) as refused:
            V3_LAYER.with_(**change)
        assert word in str(refused.value) and "\n" not in str(refused.value)
    assert V3_LAYER.with_(kv_heads=A).head_dim == 192                # kv_heads = heads is what it builds
    with pytest.raises(ValueError, match="latent attention"):
        strategy_check(V3_LAYER, Strategy(recompute="op"))       # per-op recomputation counts a Llama block's matmuls
    with pytest.raises(ValueError, match="q_rank"):
        LatentAttention(512, q_rank=0)

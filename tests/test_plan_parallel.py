"""The planner's parallelism, communication and memory mechanics (ddp_lab.course.plan): one cheap test each.

Pure Python, no ranks: the saved layer input under full recomputation and sequence parallelism, tensor-parallel
communication overlap, ZeRO 0-2's bucketed gradient sync (ZeRO 2's in every micro-batch) and overlapped weight
gather, a tensor-parallel size that must divide the node, uneven pipeline stages,
DiLoCo-style outer sync and a cross-region link, hybrid sharding (HSDP), the experts' own tensor-parallel size. Each
checks the direction
of its effect and, where a paper states one, the published number. Last, the arithmetic over ranks a search on a
million nodes does, counted in Python lines.
"""

import dataclasses
import sys
from pathlib import Path

import pytest

from ddp_lab.course.plan import (activations, dp_sync, expert_compute, expert_tp, experts, hybrid_shard, outer_sync,
                                 pipeline_stages, steptime, tp_overlap)
from ddp_lab.course.plan import search as search_module
from ddp_lab.course.plan.activations import head_activation_bytes, layer_activation_bytes
from ddp_lab.course.plan.cluster_spec import ClusterSpec
from ddp_lab.course.plan.collectives import collective_time, spans_regions
from ddp_lab.course.plan.memory import memory, stage_activation_bytes, stage_state_bytes
from ddp_lab.course.plan.model import Transformer
from ddp_lab.course.plan.overlap import bucketed_exposed, chunked_exposed, prefetched_exposed
from ddp_lab.course.plan.steptime import step_time
from ddp_lab.course.plan.strategy import Strategy, check, divisors
from ddp_lab.course import rank_layout
from ddp_lab.course.rank_layout import Group
from ddp_lab.plan import held_aside_runs
from ddp_lab.plan.cli import main
from ddp_lab.plan.cli_regions import regions_note

GiB = 2**30
LLAMA3_405B = Transformer.preset("llama3-405b").with_(seq_len=8192)     # 126 layers
H100 = ClusterSpec.preset("h100-sxm", nodes=1024)


def _llama3_8k(**changes) -> Strategy:
    """Llama 3 405B's 8K-token stage on 8,192 H100s (Llama 3 paper, arXiv:2407.21783, Table 4: TP 8, PP 16, DP 64,
    16M tokens per step; Sec. 3.3.2: FSDP sharding optimizer state and gradients, fp32 gradient accumulation,
    the first and last stage one layer fewer)."""
    base = dict(dp=64, tp=8, pp=16, zero=2, grad_accum=32, sequence_parallel=True, fp32_grads=True,
                first_stage_layers=7, last_stage_layers=7)
    return Strategy(**{**base, **changes})


# ---- 1. memory: the saved layer input under full recomputation ---------------------------------------------------
def test_full_recomputation_with_sequence_parallelism_keeps_a_tp_th_of_the_layer_input():
    """Korthikanti et al. 2022 (arXiv:2205.05198), Table 2: full recomputation keeps 2sbh per layer; with sequence
    parallelism the input between layers is split along the sequence and Megatron-LM checkpoints that shard: 2sbh/t."""
    llama = Transformer.preset("llama3-70b")
    s, h = llama.seq_len, llama.hidden
    full = Strategy(tp=8, recompute="full")
    assert layer_activation_bytes(llama, full) == 2 * s * h                              # TP alone: the whole input
    assert layer_activation_bytes(llama, full.with_(sequence_parallel=True)) == 2 * s * h // 8
    # torchtitan's Llama 3.1 70B, FSDP 32 x TP 8, 16 sequences of 8,192 per micro-batch, full checkpointing, trained
    # on 96 GB H100s (pytorch/torchtitan docs/performance.md, 2024-12-26 version, the float8/async-TP table): its
    # layer inputs were counted whole, 80 x 16 x 2sbh = 172 GB, and the plan at 190 GB per GPU
    plan = Strategy(dp=32, tp=8, zero=3, micro_batch=16, recompute="full", sequence_parallel=True)
    layers = memory(llama, plan).activations - head_activation_bytes(llama, plan)
    assert layers == 80 * 16 * 2 * s * h // 8
    assert memory(llama, plan).total < 40e9 < 96e9


def test_llama3_405b_8k_without_checkpointing_fits_an_h100_once_its_stages_are_uneven():
    """Llama 3 trained its 8K-token stage without activation checkpointing (Sec. 3.3.2), 126 layers on 16 stages
    with the first and last one layer fewer. Planned with 128 equal layers, stage 0 (8 layers, 16 micro-batches in
    flight, the embedding) came to 90 GB, over the 80 GiB of an H100. With its real stages the most loaded rank is
    stage 1 (8 layers, 15 micro-batches in flight) and fits the GPU; it does not fit the search's 10 % reserve (the
    planner counts SwiGLU's four saved tensors of width ffn as PyTorch autograd saves them; a fused SwiGLU keeps two)."""
    strategy = _llama3_8k()
    check(LLAMA3_405B, strategy, gpus=8192, gpus_per_node=8)
    stand_in = LLAMA3_405B.with_(layers=128)
    equal = strategy.with_(first_stage_layers=None, last_stage_layers=None)
    assert memory(stand_in, equal).total > 80 * GiB
    loads = {stage: stage_state_bytes(LLAMA3_405B, strategy, stage).model_states
             + stage_activation_bytes(LLAMA3_405B, strategy, stage) for stage in (0, 1, 15)}
    assert max(loads, key=loads.get) == 1
    assert 0.9 * 80 * GiB < memory(LLAMA3_405B, strategy).total == loads[1] < 80 * GiB


# ---- 2. tensor-parallel communication overlap ----------------------------------------------------------------------
def test_tp_comm_overlap_hides_all_but_a_chunk_and_needs_sequence_parallelism():
    """--tp-comm-overlap: each collective runs in tp chunks beside its GEMM; one chunk (and whatever outlasts the
    GEMM) stays exposed, and a slow link exposes more."""
    assert chunked_exposed(1.0, 2.0, 8) == 1.0 / 8                    # the GEMM is longer: one chunk of 8 shows
    assert chunked_exposed(2.0, 1.0, 8) == pytest.approx(2 / 8 + 1.0 * 7 / 8)
    llama = Transformer.preset("llama3-70b")
    plain = Strategy(dp=8, tp=8, zero=1, grad_accum=16, sequence_parallel=True)
    cluster = ClusterSpec.preset("h100-sxm", nodes=16)
    before, after = step_time(llama, cluster, plain), step_time(llama, cluster, plain.with_(tp_comm_overlap=True))
    assert after.tp_comm < 0.5 * before.tp_comm and after.total < before.total
    assert after.overlap_slowdown > before.overlap_slowdown                  # hiding is not free
    slow = cluster.with_(intra_node_bandwidth=25e9)                            # a PCIe-class link: the GEMMs hide less
    assert (step_time(llama, slow, plain.with_(tp_comm_overlap=True)).tp_comm
            / step_time(llama, slow, plain).tp_comm) > after.tp_comm / before.tp_comm
    with pytest.raises(ValueError, match="--sequence-parallel with --tp-comm-overlap"):
        Strategy(tp=8, tp_comm_overlap=True)


# ---- 3. ZeRO 0-2: gradient buckets and the weights' gather ---------------------------------------------------------
def test_zero12_buckets_expose_one_chunk_and_the_param_gather_overlaps_the_next_forward():
    """NeMo's Communication Overlap guide: the DP sync, "chunked by the granularity of a Transformer layer", "exposes
    only one DP communication chunk" when the layers' compute is the longer; Megatron-LM's --overlap-param-gather
    moves ZeRO-1/2's weight all-gather from after the optimizer to beside the next forward."""
    assert bucketed_exposed([0.3] * 4, [1.0] * 4) == pytest.approx(0.3)  # one chunk
    assert bucketed_exposed([2.0] * 4, [1.0] * 4) == pytest.approx(5.0)   # the link is the bottleneck: 8 - 3
    assert bucketed_exposed([0.3] * 4, [1.0] * 4, window=0.3) == 0.0     # a later stage: the pipeline's flush hides it
    assert prefetched_exposed([0.3] * 4, [1.0] * 4) == pytest.approx(0.3)  # the first layer's weights are waited for
    llama, cluster = Transformer.preset("llama3-8b"), ClusterSpec.preset("h100-sxm", nodes=4)
    zero1 = Strategy(dp=32, zero=1, grad_accum=4)
    exposed = step_time(llama, cluster, zero1).dp_comm_exposed
    overlapped = step_time(llama, cluster, zero1.with_(overlap_param_gather=True)).dp_comm_exposed
    assert 0 < overlapped < exposed
    with pytest.raises(ValueError, match="use zero=1 or 2"):
        Strategy(dp=8, zero=3, overlap_param_gather=True)


def test_zero2_reduce_scatters_its_sharded_gradients_in_every_micro_batch():
    """DeepSpeed's ZeRO stage 2 keeps only its shard of the gradients, so it reduces them in every micro-batch's
    backward (deepspeedai/DeepSpeed pull request #338: "Zero stage 2 communicates during non gradient accumulation
    boundaries as well"; its no_sync() refuses stage 2; FSDP2 by default, pytorch/pytorch #126166); ZeRO 0 and 1
    keep them all and reduce once per step.
    ZeRO 2's smaller gradient memory is paid for in communication, and each micro-batch's last bucket shows. (In one
    micro-batch both move the same bytes in nearly the same collectives: ZeRO 1's 40M-parameter buckets are here
    each layer, the head and the embedding; ZeRO 2 reduces the head and embedding as one unit, one latency less.)"""
    llama, cluster = Transformer.preset("llama3-8b").with_(seq_len=4096), ClusterSpec.preset("h100-sxm")
    times = {(zero, accum): step_time(llama, cluster, Strategy(dp=8, zero=zero, grad_accum=accum))
             for zero in (1, 2) for accum in (1, 2, 128)}
    assert times[1, 128].dp_comm == pytest.approx(times[1, 1].dp_comm)
    assert times[2, 1].dp_comm == pytest.approx(times[1, 1].dp_comm, rel=2e-3)
    assert times[2, 1].dp_comm < times[1, 1].dp_comm
    one_more = times[2, 2].dp_comm - times[2, 1].dp_comm            # one reduce-scatter of every gradient
    assert one_more > 0.3 * times[1, 1].dp_comm
    assert times[2, 128].dp_comm - times[2, 1].dp_comm == pytest.approx(127 * one_more)
    assert times[2, 128].dp_comm_exposed > 10 * times[1, 128].dp_comm_exposed
    assert times[2, 128].dp_comm_exposed <= times[2, 128].dp_comm
    assert times[2, 128].total > times[1, 128].total
    assert memory(llama, Strategy(dp=8, zero=2)).grads < memory(llama, Strategy(dp=8, zero=1)).grads / 4


# ---- 4. uneven pipeline stages ---------------------------------------------------------------------------------------
def test_uneven_stages_llama3_126_layers_on_16():
    """Llama 3 405B: 126 layers, 16 stages, the first and the last one layer fewer (Sec. 3.3.2): 7 + 14 x 8 + 7. The
    slowest stage sets the pace, so dropping a layer from the last stage (which also runs the head) speeds the step."""
    strategy = _llama3_8k()
    assert pipeline_stages.stage_layers(LLAMA3_405B, strategy) == [7] + [8] * 14 + [7]
    assert strategy.label().endswith("L7/7")
    even_last = step_time(LLAMA3_405B.with_(layers=127), H100, strategy.with_(last_stage_layers=8))
    assert step_time(LLAMA3_405B, H100, strategy).total < even_last.total
    with pytest.raises(ValueError, match="cannot share equally"):
        check(LLAMA3_405B, strategy.with_(first_stage_layers=6), gpus=8192)
    with pytest.raises(ValueError, match=r"needs pp >= 2, got pp=1"):
        Strategy(first_stage_layers=3)


def test_a_search_tries_fewer_layers_at_the_ends_where_pp_does_not_divide_them():
    """DeepSeek-V3's 61 layers (prime): the search once tried only pp 1 for it; it now tries every pp with the
    middle stages full and the first and the last sharing the rest (pipeline_stages.fewer_at_the_ends: NVIDIA's
    recipe's 7 + 6 x 8 + 6 on 8 stages), and pipelines that divide the layers stay even."""
    shape = Transformer("61-layers", 61, 1024, 8, 32000, 1024, ffn_kind="swiglu", norm="rmsnorm", bias=False,
                        position="rope", tied_embeddings=False, dropout=False)
    tried = list(search_module.candidates(shape, ClusterSpec.preset("h100-sxm", nodes=2), 64, zero=(1,),
                                          micro_batches=(1,), recompute=("none",)))
    ends = {(s.pp, s.first_stage_layers, s.last_stage_layers) for s in tried}
    assert {(1, None, None), (2, 31, 30), (4, 15, 14), (8, 7, 6), (16, 3, 2)} == ends
    for s in tried:
        check(shape, s, gpus=16)                    # each a plan the planner takes
    even = {(s.pp, s.first_stage_layers) for s in search_module.candidates(LLAMA3_405B.with_(layers=64), ClusterSpec.preset(
        "h100-sxm", nodes=2), 64, zero=(1,), micro_batches=(1,), recompute=("none",))}
    assert even == {(pp, None) for pp in (1, 2, 4, 8, 16)}


def test_two_uneven_stages_give_the_rest_to_the_stage_not_given():
    """pp 2 has no middle stage: the stage not given holds the rest (Megatron-LM's rule), two given must add up to
    the layers; the label says 'rest'. The fuller stage sets the pace, and the last one also runs the head: 18 + 14
    is faster than 14 + 18."""
    llama = Transformer.preset("llama3-8b")                     # 32 layers
    first = Strategy(dp=4, pp=2, grad_accum=8, first_stage_layers=14)
    last = Strategy(dp=4, pp=2, grad_accum=8, last_stage_layers=14)
    assert pipeline_stages.stage_layers(llama, first) == [14, 18] and first.label().endswith("L14/rest")
    assert pipeline_stages.stage_layers(llama, last) == [18, 14] and last.label().endswith("Lrest/14")
    assert step_time(llama, H100, last).compute < step_time(llama, H100, first).compute
    check(llama, first.with_(last_stage_layers=18), gpus=8)
    with pytest.raises(ValueError, match=r"two stages hold 32 layers.*put 15 and 15 on them: give one of them"):
        check(llama, first.with_(first_stage_layers=15, last_stage_layers=15), gpus=8)
    with pytest.raises(ValueError, match=r"put 32 and 0 on them"):
        check(llama, first.with_(first_stage_layers=32), gpus=8)


def test_interleaved_uneven_stages_are_the_first_and_last_virtual_stage():
    """Interleaved, first/last_stage_layers are the first and the last virtual stage's layers (Megatron-Core's
    embedding and loss counted as a layer each in the split): 126 layers on 8 x 8 virtual stages as 1 + 2 x 62 + 1,
    so the pipeline's first and last GPU hold 15 layers and the others 16. The step runs at a middle stage's pace,
    16 layers without the head: a little faster than 128 layers split evenly, whose last stage adds the head. The
    activations in flight follow Megatron-LM's interleaved warm-up chunk by chunk; a split the middle virtual stages
    cannot share is refused."""
    strategy = Strategy(dp=16, tp=8, pp=8, cp=2, virtual_stages=8, schedule="interleaved", grad_accum=16,
                        sequence_parallel=True, first_stage_layers=1, last_stage_layers=1)
    assert pipeline_stages.stage_layers(LLAMA3_405B, strategy) == [15] + [16] * 6 + [15]
    assert strategy.label().endswith("L1/1")
    even = Strategy(**{**strategy.__dict__, "first_stage_layers": None, "last_stage_layers": None})
    padded = LLAMA3_405B.with_(layers=128)
    uneven_time, even_time = step_time(LLAMA3_405B, H100, strategy), step_time(padded, H100, even)
    assert uneven_time.compute < even_time.compute < 1.05 * uneven_time.compute
    assert uneven_time.cp_comm == pytest.approx(even_time.cp_comm)      # the ring over the fullest stage's 16 layers
    # Megatron-LM's interleaved schedule: stage i runs 2 (p - i - 1) + (v - 1) p warm-up chunk-forwards, p
    # micro-batches per chunk in turn, then a forward and a backward at a time. Even chunks, stage 0: L (1 + (p -
    # 1)/(p v)) = 142 of 128 layers (Korthikanti Sec. 4.2.3); uneven, stage 0 runs its 1-layer chunk 15 times
    # (127) and stage 1 peaks (138); on 2 x 2 stages of 1 + 62 + 62 + 1, stage 1 holds three of its 62-layer chunk
    assert [activations.layers_in_flight(padded, even, i) for i in (0, 1, 7)] == [142, 138, 114]
    assert [activations.layers_in_flight(LLAMA3_405B, strategy, i) for i in (0, 1, 7)] == [127, 138, 114]
    assert pipeline_stages.chunk_layers(LLAMA3_405B, strategy, 7) == [2] * 7 + [1]
    two = Strategy(pp=2, virtual_stages=2, schedule="interleaved", first_stage_layers=1, last_stage_layers=1,
                   grad_accum=16)
    assert [activations.layers_in_flight(LLAMA3_405B, two, i) for i in (0, 1)] == [127, 186]
    with pytest.raises(ValueError, match="the 62 middle virtual stages cannot share equally"):
        check(LLAMA3_405B, strategy.with_(first_stage_layers=2), gpus=2048)
    with pytest.raises(ValueError, match="the 14 middle stages cannot share equally"):
        check(LLAMA3_405B, _llama3_8k(first_stage_layers=6), gpus=8192)


def test_uneven_stages_with_experts_count_each_stages_own_moe_layers():
    """A MoE model on uneven stages: each stage's MoE layers are those among its own layers, so a model
    whose first layer is dense has one MoE layer fewer on stage 0 only; the expert compute follows the fullest
    stage. 94 layers (Qwen3-235B-A22B's count) on 8 x 4 virtual stages with the embedding and loss counted as
    layers: 2 + 3 x 30 + 2."""
    moe94 = Transformer.preset("mixtral-8x7b").with_(layers=94)
    strategy = Strategy(dp=8, tp=2, pp=8, ep=8, virtual_stages=4, schedule="interleaved", first_stage_layers=2,
                        last_stage_layers=2, sequence_parallel=True, grad_accum=64)
    check(moe94, strategy, gpus=128)
    assert pipeline_stages.stage_layers(moe94, strategy) == [11] + [12] * 6 + [11]
    assert [experts.stage_moe_layers(moe94, strategy, s) for s in range(8)] == [11] + [12] * 6 + [11]
    first_dense = moe94.with_(moe=dataclasses.replace(moe94.moe, dense_layers=1))
    assert [experts.stage_moe_layers(first_dense, strategy, s) for s in (0, 1, 7)] == [10, 12, 11]
    # interleaved, stage i holds virtual stages i, p + i, ...: three dense layers are stage 0's first chunk (2) and
    # the first layer of stage 1's (Megatron-LM's placement), not stage 0's alone
    three_dense = moe94.with_(moe=dataclasses.replace(moe94.moe, dense_layers=3))
    assert pipeline_stages.stage_layer_indices(moe94, strategy, 1)[:4] == [2, 3, 4, 26]
    assert [experts.stage_moe_layers(three_dense, strategy, s) for s in (0, 1, 2)] == [9, 11, 12]
    cluster = ClusterSpec.preset("h100-sxm", nodes=16)
    per_layer = sum(expert_compute.layer_compute_change(moe94, strategy, cluster.gpu))
    assert expert_compute.seconds_per_micro_batch(moe94, cluster, strategy) == pytest.approx(12 * per_layer)


# ---- 5. DiLoCo outer sync and a cross-region link ------------------------------------------------------------------
def test_diloco_int8_every_100_steps_sends_400x_less_than_data_parallel_fp32():
    """INTELLECT-1 (Jaghouar et al. 2024, arXiv:2412.01152, abstract): DiLoCo and an int8 all-reduce of the
    pseudo-gradients give "a 400× reduction in communication bandwidth compared to traditional data-parallel
    training settings"; its model card (Hugging Face, PrimeIntellect/INTELLECT-1): "trained using the DiLoCo
    algorithms with 100 inner steps". 100 steps x 4 bytes (fp32) / 1 byte = 400. Its layout (the abstract's
    "hybrid DiLoCo-FSDP2"): FSDP inside a node of 8 H100s, DiLoCo between up to 14 nodes."""
    model = Transformer.preset("llama3-8b")
    diloco = Strategy(dp=112, zero=3, replicas=14, sync_every=100, sync_precision="int8")
    shard = outer_sync.synced_parameters(model, diloco)
    assert shard == -(-model.parameters() // 8)                       # the node's FSDP shard, not the model
    fp32_every_step = 4 * shard
    assert fp32_every_step / outer_sync.wire_bytes_per_step(model, diloco) == 400
    assert outer_sync.outer_group(diloco).stride == 8                 # the same shard in every other node


def test_outer_sync_amortises_and_its_optimizer_state_is_counted():
    """Outer sync over a slow link: the per-step cost falls as 1/H; the outer Nesterov momentum and the fp32 global
    copy (DiLoCo, Douillard et al. 2023, arXiv:2311.08105, Algorithm 1) add 8 bytes per held parameter."""
    model = Transformer.preset("llama3-8b")
    cluster = ClusterSpec.preset("h100-sxm", nodes=14).with_(region_nodes=1, cross_region_bandwidth=1e9 / 8)
    ddp_like = Strategy(dp=112, zero=3)
    h10, h100 = (ddp_like.with_(replicas=14, sync_every=h) for h in (10, 100))
    assert step_time(model, cluster, h10).outer_sync == pytest.approx(10 * step_time(model, cluster, h100).outer_sync)
    # every step's ZeRO-3 traffic crosses the 1 Gb/s link: some 70x the step of DiLoCo's outer sync every 100 steps
    assert step_time(model, cluster, h100).total < step_time(model, cluster, ddp_like).total / 50
    extra = memory(model, h100).optimizer - stage_state_bytes(model, ddp_like.with_(dp=8), 0).optimizer
    assert extra == 8 * outer_sync.synced_parameters(model, h100)
    with pytest.raises(ValueError, match="replicas=1"):
        Strategy(dp=8, sync_every=10)


def test_a_cross_region_link_slows_the_groups_that_cross_it():
    """Regions of whole nodes: the tp group (inside a node) never crosses; a dp group spanning regions shares the
    region's link with every other dp group."""
    cluster = ClusterSpec.preset("h100-sxm", nodes=4).with_(region_nodes=2, cross_region_bandwidth=100e9 / 8)
    strategy = Strategy(dp=4, tp=8)
    tp, dp = strategy.layout.group("tp"), strategy.layout.group("dp")
    assert not spans_regions(cluster, tp) and spans_regions(cluster, dp)
    one_region = cluster.with_(region_nodes=None)
    assert collective_time("all_reduce", 1e9, cluster, dp) > 10 * collective_time("all_reduce", 1e9, one_region, dp)
    with pytest.raises(ValueError, match="must divide the 4 nodes"):
        cluster.with_(region_nodes=3)


def test_hybrid_sharding_is_zero3_inside_a_group_plus_an_all_reduce_of_its_shards_across_groups():
    """HSDP (hybrid_shard.py): ZeRO-3 over dp_shard ranks keeps what ZeRO-3 over those ranks keeps, and moves what it
    moves plus one all-reduce of each unit's gradient shard over the groups; the shard groups (8 dp ranks on 8-GPU
    nodes) stay inside a node and only that all-reduce crosses nodes; dp_shard = dp is plain ZeRO-3."""
    model = Transformer.preset("llama3-8b").with_(seq_len=4096)
    cluster = ClusterSpec.preset("h100-sxm", nodes=4)
    fsdp = Strategy(dp=32, zero=3, micro_batch=2, grad_accum=2)
    hsdp = fsdp.with_(dp_shard=8)
    in_a_node = fsdp.with_(dp=8, grad_accum=8)       # one shard group's own ZeRO-3, at the same global batch
    assert memory(model, hsdp).model_states == memory(model, in_a_node).model_states > memory(model, fsdp).model_states
    assert not hybrid_shard.shard_strategy(hsdp).layout.group("dp").spans_nodes(8)
    assert hybrid_shard.replicate_group(hsdp).spans_nodes(8) and hybrid_shard.replicate_group(hsdp).size == 4
    units = dp_sync.fsdp_units(model, in_a_node, 0)
    shard_bytes = [2 * -(-unit // 8) for unit in units]          # bf16 gradients, reduce-scattered over 8 first
    all_reduces = sum(collective_time("all_reduce", size, cluster, hybrid_shard.replicate_group(hsdp))
                      for size in shard_bytes)
    assert step_time(model, cluster, hsdp).dp_comm == pytest.approx(
        (dp_sync.dp_communication(model, cluster, hsdp.with_(dp=8, dp_shard=None)) + 2 * all_reduces))
    same = fsdp.with_(dp_shard=32)
    assert step_time(model, cluster, same) == step_time(model, cluster, fsdp) and hsdp.label().count("hsdp8") == 1
    for changes, said in (({"dp_shard": 3}, "does not divide dp=32"), ({"zero": 1, "dp_shard": 8}, "use zero=3"),
                          ({"dp_shard": 8, "replicas": 2}, "DiLoCo")):
        with pytest.raises(ValueError, match=said):
            fsdp.with_(**changes)
    with pytest.raises(ValueError, match="dense models only"):
        check(Transformer.preset("mixtral-8x7b"), hsdp, gpus=32)
    with pytest.raises(ValueError, match="dense models only"):      # asked without check(): not planned either
        step_time(Transformer.preset("mixtral-8x7b"), cluster, hsdp.with_(ep=8))
    with pytest.raises(ValueError, match="straddle the 8-GPU nodes"):   # ranks 6, 7, 8: two nodes
        check(model, Strategy(dp=24, zero=3, dp_shard=3), gpus=24, gpus_per_node=8)
    check(model, Strategy(dp=24, zero=3, dp_shard=4), gpus=24, gpus_per_node=8)
    for bad in (8.0, True, 0):
        with pytest.raises(ValueError, match="dp_shard must be an integer >= 1"):
            fsdp.with_(dp_shard=bad)


def test_the_search_tries_hybrid_sharding_with_shard_groups_of_whole_nodes(capsys):
    """Beside each ZeRO-3 plan of a dense model on several nodes the search tries its HSDP variants, shard groups of
    whole nodes (dp_shard x tp x cp a multiple of the GPUs per node; hybrid_shard.searched_sizes), each costed as
    evaluate() costs it; none for a model with experts, on one node, or with dp_shard=None; sizes asked for that would
    cut a node are left out. Llama 3 8B on 16 nodes: HSDP keeps more per GPU than ZeRO-3 and less than ZeRO-2, and its
    best plan runs between them; the CLI names the sizes tried and what hsdpN means."""
    model, cluster = Transformer.preset("llama3-8b"), ClusterSpec.preset("h100-sxm", nodes=16)
    tried = list(search_module.candidates(model, cluster, 512))
    shards = {(s.dp, s.tp, s.dp_shard) for s in tried if s.dp_shard is not None}
    assert {(128, 1, size) for size in (8, 16, 32, 64)} | {(64, 2, size) for size in (4, 8, 16, 32)} <= shards
    assert all(s.zero == 3 and (size * tp) % 8 == 0 and size < dp for s in tried if s.dp_shard
               for dp, tp, size in [(s.dp, s.tp, s.dp_shard)])
    plain = [s for s in tried if s.zero == 3 and s.dp_shard is None and s.dp > 1]
    assert len(tried) - len(list(search_module.candidates(model, cluster, 512, dp_shard=None))) == sum(
        len(hybrid_shard.searched_sizes(model, cluster, s)) for s in plain)
    six_nodes = ClusterSpec.preset("h100-sxm", nodes=6)                  # dp 48: groups of 3 or 12 would cut a node
    assert [s.dp_shard for s in search_module.candidates(model, six_nodes, 96, zero=(3,), micro_batches=(1,),
                                                         recompute=("none",), dp_shard=(3, 4, 12, 16, 5))
            if s.tp == s.pp == 1 and s.dp_shard] == [4, 16]              # 5 does not divide dp = 48
    assert not any(s.dp_shard for s in search_module.candidates(model, ClusterSpec.preset("h100-sxm"), 64))
    assert not any(s.dp_shard for s in search_module.candidates(Transformer.preset("mixtral-8x7b"), cluster, 512))
    best = {}
    for plan in search_module.search(model, cluster, top=None, global_batch=512):
        s = plan.strategy
        if s.tp == s.pp == 1 and s.micro_batch == 1 and s.recompute == "none" and (s.zero == 2 or s.zero == 3):
            best.setdefault("hsdp" if s.dp_shard else f"z{s.zero}", plan)
    assert best["z2"].memory.total > best["hsdp"].memory.total > best["z3"].memory.total
    assert best["z2"].tokens_per_second > best["hsdp"].tokens_per_second > best["z3"].tokens_per_second
    assert search_module.evaluate(model, cluster, best["hsdp"].strategy) == best["hsdp"]
    assert main(["--model", "llama3-8b", "--cluster", "h100-sxm", "--nodes", "16", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "HSDP shard groups of 2, 4, 8, 16, 32, 64 dp ranks); " in out and "hsdpN = hybrid sharding (HSDP)" in out


def test_hsdp_shard_groups_that_a_region_boundary_would_cut_are_refused_and_not_searched():
    """Regions of 3 nodes (24 GPUs) on 12: shard groups of 2 nodes would be ranks 0-15, 16-31, ..., and the second
    crosses the boundary at rank 24, while the planner costs a group as the first block (inside region 0). So the
    rule hybrid_shard.check keeps for nodes holds for regions too: a shard group divides the region or is whole
    regions; the search leaves such sizes out and evaluate() refuses them, saying which sizes would do."""
    model = Transformer.preset("llama3-8b")
    regions = ClusterSpec.preset("h100-sxm", nodes=12).with_(region_nodes=3)
    assert hybrid_shard.searched_sizes(model, regions, Strategy(dp=96, zero=3)) == [8]
    assert hybrid_shard.searched_sizes(model, regions.with_(region_nodes=None), Strategy(dp=96, zero=3)) == [8, 16, 32]
    with pytest.raises(ValueError, match=r"dp_shard=16: shard groups of dp_shard x tp x cp = 16 ranks would "
                                         r"straddle the 24-GPU regions; .* divides 24 or is a multiple of it"):
        search_module.evaluate(model, regions, Strategy(dp=96, zero=3, dp_shard=16, grad_accum=4))
    whole_region = search_module.evaluate(model, regions, Strategy(dp=96, zero=3, dp_shard=24, grad_accum=4))
    assert whole_region.time.total < search_module.evaluate(model, regions, Strategy(dp=96, zero=3,
                                                                                      grad_accum=4)).time.total


def test_the_cli_takes_the_new_options_and_refuses_bad_ones_in_one_line(capsys):
    args = ["--model", "llama3-8b", "--cluster", "h100-sxm", "--nodes", "2", "--tp", "8"]
    assert main(args + ["--sequence-parallel", "--tp-comm-overlap", "--zero", "1", "--overlap-param-gather"]) == 0
    assert "tpo opg" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        main(args + ["--tp-comm-overlap"])
    assert stop.value.code == 2 and "--sequence-parallel" in capsys.readouterr().err.splitlines()[-1]
    assert main(args + ["--zero", "1", "--sync-every", "50", "--sync-precision", "int8", "--region-nodes", "1"]) == 0
    out = capsys.readouterr().out
    assert "r2/50-int8" in out and "across it: the DiLoCo replicas' outer sync" in out


def test_the_breakdown_prints_the_outer_sync_and_its_lines_add_up_to_the_total(capsys):
    args = ["--model", "llama3-8b", "--cluster", "h100-sxm", "--nodes", "2", "--tp", "8", "--zero", "1",
            "--sync-every", "50", "--region-nodes", "1"]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("  step time (s)") + 1
    end = next(i for i in range(start, len(lines)) if lines[i].split()[0] == "total")
    parts = {line[:30].strip(): float(line.split()[-1]) for line in lines[start:end]}
    assert parts["outer sync (1/50)"] > 0
    assert sum(parts.values()) == pytest.approx(float(lines[end].split()[-1]), abs=0.001 * len(parts))


# ---- 6. expert tensor parallelism ----------------------------------------------------------------------------------
def test_expert_tp_splits_the_experts_apart_from_attention_as_megatron_lays_them_out():
    """Megatron-Core's --expert-tensor-parallel-size: Mixtral 8x7B on 8 GPUs, tp 4 (dp 2). With etp = tp the experts
    split 4 ways and ep fits in dp = 2; with etp 1 the 8 ranks split the experts, ep up to 8, one whole expert each."""
    mixtral = Transformer.preset("mixtral-8x7b").with_(seq_len=4096)
    expert = 3 * 4096 * 14336                                         # one SwiGLU expert, no biases
    etp4 = Strategy(dp=2, tp=4, ep=2, zero=1)                         # expert_tp left to tp: 4
    etp1 = etp4.with_(ep=8, expert_tp=1)
    assert experts.layer_change_per_rank(mixtral, etp4)[1] == 4 * expert // 4
    assert experts.layer_change_per_rank(mixtral, etp1)[1] == 1 * expert             # the same bytes per rank
    assert experts.layer_change_per_rank(mixtral, etp4.with_(expert_tp=1))[1] == 4 * expert   # ep 2: 4 whole experts
    assert memory(mixtral, etp1).model_states == memory(mixtral, etp4).model_states
    assert memory(mixtral, etp4.with_(expert_tp=1)).model_states > memory(mixtral, etp4).model_states
    # all-to-all: without sequence parallelism each rank dispatches etp / tp of its replica's b s top_k h values
    tokens = 4096 * 2 * 4096 * 2                                      # b s top_k h x 2 bytes
    assert experts.dispatch_bytes(mixtral, etp4) == tokens and experts.dispatch_bytes(mixtral, etp1) == tokens // 4
    sp = dict(sequence_parallel=True)
    assert experts.dispatch_bytes(mixtral, etp1.with_(**sp)) == experts.dispatch_bytes(mixtral, etp4.with_(**sp))
    assert expert_tp.group(etp1, "ep") == Group(8, 1) and expert_tp.group(etp4, "ep") == Group(2, 4)
    assert expert_tp.group(etp4, "edp") == etp4.layout.group("edp")   # etp = tp: the rank layout's groups
    # per rank the expert GEMMs do the same FLOPs: tokens x width x experts held
    assert (expert_compute.tokens_per_expert(mixtral, etp1) * 14336 * 1
            == expert_compute.tokens_per_expert(mixtral, etp4) * 14336 / 4 * 4)
    for bad, match in (({"expert_tp": 3}, "does not divide tp=4"), ({"ep": 8}, "or a smaller expert_tp"),
                       ({"ep": 16, "expert_tp": 1}, "does not divide tp x cp x dp")):
        with pytest.raises(ValueError, match=match):
            etp4.with_(**bad)
    with pytest.raises(ValueError, match="dense: drop expert_tp"):
        check(Transformer.preset("llama3-8b"), etp1.with_(ep=1))


def test_a_moe_layers_tensor_parallel_collectives_are_its_experts_not_a_dense_ffns():
    """With sequence parallelism a MoE layer runs no dense FFN's all-gather and reduce-scatter (unless shared experts
    do), and experts split over an expert TP of 2 or more gather top_k copies of the tokens (Megatron-Core's all-to-all
    dispatcher); docs/planner.md says so, with top_k for the presets it names."""
    qwen, cluster = Transformer.preset("qwen3-30b-a3b").with_(seq_len=4096), ClusterSpec.preset("h100-sxm")
    split = Strategy(dp=4, tp=2, ep=4, sequence_parallel=True, zero=1)          # expert TP 2, the attention's
    whole = split.with_(ep=8, expert_tp=1)
    dense = steptime.ffn_tp_communication(qwen, cluster, split)
    assert steptime.moe_layer_tp_change(qwen, cluster, whole) == (-dense[0], -dense[1], 0.0)
    # expert TP = TP: an all-gather and a reduce-scatter each way of top_k times the dense FFN's b s h values
    b_s_h = 4096 * qwen.hidden * 2
    gather = collective_time("all_gather", qwen.moe.top_k * b_s_h, cluster, Group(2, 1))
    assert experts.expert_tp_gather_seconds(qwen, cluster, split) == pytest.approx(gather)
    forward, backward, hidden = steptime.moe_layer_tp_change(qwen, cluster, split)
    assert (forward, backward, hidden) == pytest.approx((2 * gather - dense[0], 2 * gather - dense[1], 0.0))
    assert forward > 4 * dense[0]                                       # top_k = 8: far more than it saves
    assert step_time(qwen, cluster, split).tp_comm > step_time(qwen, cluster, split.with_(expert_tp=1)).tp_comm
    # shared experts keep the dense FFN's collectives; without sequence parallelism a dense layer's are charged
    deepseek = Transformer.preset("deepseek-moe-16b").with_(seq_len=4096)
    assert steptime.moe_layer_tp_change(deepseek, cluster, whole) == (0.0, 0.0, 0.0)
    assert steptime.moe_layer_tp_change(qwen, cluster, whole.with_(sequence_parallel=False)) == (0.0, 0.0, 0.0)
    # under tp_comm_overlap the FFN's exposed share goes, and its hidden share with it
    overlapped = whole.with_(tp_comm_overlap=True)
    exposed = tp_overlap.ffn_exposed(qwen, cluster, overlapped, steptime._tp_all_reduce(qwen, cluster, overlapped))
    forward, backward, hidden = steptime.moe_layer_tp_change(qwen, cluster, overlapped)
    assert (forward, backward) == (-exposed[0], -exposed[1]) and hidden == pytest.approx(sum(exposed) - sum(dense))
    page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "planner.md").read_text().split())
    tops = {name: Transformer.preset(name).moe.top_k for name in ("qwen3-30b-a3b", "deepseek-v3", "mixtral-8x7b")}
    assert tops == {"qwen3-30b-a3b": 8, "deepseek-v3": 8, "mixtral-8x7b": 2}
    assert ("top_k times the bytes of the dense FFN's collectives (8 times for Qwen3's MoE models and DeepSeek-V3, "
            "twice for Mixtral)") in page
    # a search tries MoE plans with tp > 1 under sequence parallelism only, with the experts split tp ways and whole
    tried = list(search_module.candidates(qwen, cluster, 64, zero=(1,), micro_batches=(1,)))
    assert all(s.sequence_parallel for s in tried if s.tp > 1)
    assert {s.expert_tp for s in tried if s.tp > 1} == {None, 1} and {s.expert_tp for s in tried if s.tp == 1} == {None}
    assert any(s.ep > s.dp * s.cp for s in tried)                          # etp1: ep out of tp x cp x dp
    replicas = list(search_module.candidates(qwen, cluster, 64, zero=(1,), micro_batches=(1,), sync_every=10))
    assert replicas and all(s.expert_tp is None for s in replicas)
    assert ("requires of a MoE layer under tensor parallelism (a plan without it is noted), and tries each with the "
            "experts split tp ways and whole on each rank (`etp1`, ep then out of tp x cp x dp), as Megatron-LM's "
            "recipes for fine-grained experts run them (with DiLoCo replicas only the first") in page
    # Megatron-LM's recipes (the held-aside thirteenth set) keep each fine-grained expert whole on its rank
    recipes = [run for run in held_aside_runs.THIRTEENTH_SET if run.strategy.get("tp", 1) > 1]
    assert recipes and all(run.strategy["expert_tp"] == 1 for run in recipes)
    assert "with expert TP 1, as Megatron-LM's recipes for fine-grained models set it, none" in page


def test_the_cli_takes_expert_tp_and_refuses_a_bad_one_in_one_line(capsys):
    args = ["--model", "mixtral-8x7b", "--cluster", "h100-sxm", "--tp", "4", "--sequence-parallel", "--zero", "1"]
    assert main(args + ["--expert-tp", "1", "--ep", "8"]) == 0
    out = capsys.readouterr().out
    assert "ep8 etp1" in out and "8 experts (top 2) over ep=8: 1 per GPU, each whole on its rank (expert_tp=1)" in out
    assert "only with sequence parallelism" not in out
    assert main([arg for arg in args if arg != "--sequence-parallel"]) == 0      # Megatron-Core would refuse it
    assert ("note: Megatron-Core trains a MoE layer with tp > 1 only with sequence parallelism (--sequence-parallel); "
            "without it this plan charges each MoE layer a dense layer's tensor-parallel collectives") in \
        capsys.readouterr().out
    # a search's table says what etp1 means, and --help that the search tries it
    assert main(["--model", "mixtral-8x7b", "--cluster", "h100-sxm", "--nodes", "2", "--seq-len", "4096", "--ep", "8",
                 "--top", "3"]) == 0
    table = capsys.readouterr().out
    assert " etp1 " in table and "etpN = the routed experts' own tensor-parallel size (--expert-tp; etp1: each expert" \
        in table
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "a search tries a MoE model's plans with tp > 1 at both" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit) as stop:
        main(args + ["--expert-tp", "3"])
    assert stop.value.code == 2 and "use --expert-tp in [1, 2, 4]" in capsys.readouterr().err.splitlines()[-1]


# ---- 7. a tensor-parallel size that divides the node -------------------------------------------------------------
def test_a_tp_that_does_not_divide_a_node_is_refused_unless_asked_for_across_nodes():
    """tp ranks are consecutive (rank_layout): with tp = 5 on 8-GPU nodes, ranks 5-9 form a tensor-parallel group over
    two nodes. Such a tp is refused unless asked for across nodes, naming the sizes that divide the node, and the
    search does not offer one."""
    wide = Transformer("heads-40", layers=8, hidden=5120, heads=40, vocab=32000, seq_len=4096, ffn=20480)
    tp5, five_nodes = Strategy(dp=8, tp=5), ClusterSpec.preset("h100-sxm", nodes=5)
    with pytest.raises(ValueError, match=r"tp=5 does not divide the 8 GPUs of one node.*use tp in \[1, 2, 4, 8\]"):
        check(wide, tp5, gpus=40, gpus_per_node=8)
    check(wide, tp5, gpus=40, gpus_per_node=8, tp_across_nodes=True)
    sizes = {s.tp for s in search_module.candidates(wide, five_nodes, 40, zero=(1,))}
    across = {s.tp for s in search_module.candidates(wide, five_nodes, 40, zero=(1,), tp_across_nodes=True)}
    assert sizes == {1, 2, 4, 8} and {5, 10, 20, 40} <= across


def test_the_most_loaded_stage_of_a_moe_model_with_dense_first_layers_is_the_one_checked(monkeypatch):
    """DeepSeekMoE 16B (its first layer dense) on 14 stages of 2 layers: stage 0 holds a dense and a MoE layer,
    stage 1 two MoE layers and one micro-batch fewer; stage 1 is the most loaded, and the planner's memory is the
    largest over every stage (counted here stage by stage), for these and other pipelines."""
    model = Transformer.preset("deepseek-moe-16b").with_(seq_len=2048)
    for strategy in (Strategy(dp=2, pp=14, zero=1, micro_batch=8, grad_accum=14),
                     Strategy(dp=2, pp=14, zero=3, micro_batch=8, grad_accum=14),
                     Strategy(dp=4, pp=7, zero=1, micro_batch=4, grad_accum=7), Strategy(dp=8, pp=4, zero=1)):
        checked = memory(model, strategy).total
        monkeypatch.setattr(pipeline_stages, "stages_to_check", lambda strategy, model=None: range(strategy.pp))
        every = memory(model, strategy).total
        monkeypatch.undo()
        assert checked == every, strategy.label()
    assert 1 in pipeline_stages.stages_to_check(Strategy(dp=2, pp=14), model)


def test_one_fsdp_unit_holds_the_whole_stage_gathered_with_its_gradients():
    """fsdp_unit="model": FSDP gathers the stage's every weight at once and keeps every unsharded gradient until the
    one reduce-scatter, so Llama 3 70B on 32 H100s needs 2 x 70.6B x 2 bytes of buffers (it was counted as one
    layer's, whatever the unit)."""
    model = Transformer.preset("llama3-70b").with_(seq_len=4096)
    layer_unit = memory(model, Strategy(dp=32, zero=3, recompute="full"))
    one_unit = memory(model, Strategy(dp=32, zero=3, recompute="full", fsdp_unit="model"))
    assert one_unit.buffers == 2 * 2 * model.parameters()
    assert layer_unit.buffers < one_unit.buffers / 50
    assert one_unit.model_states == layer_unit.model_states and one_unit.activations == layer_unit.activations


def test_an_all_to_all_whose_groups_straddle_a_node_edge_crosses_it():
    """ep 16 on two 72-GPU NVL72 racks: the group of ranks 64-79 has 8 in each rack, so half of what a rank sends
    crosses racks (about 10 ms for 1 GB); ep 24 divides a rack and stays on NVLink (about 1 ms). The straddling group
    was costed as if inside one rack."""
    racks = ClusterSpec.preset("gb200", nodes=2)
    straddling, inside = (expert_tp.group(Strategy(dp=144, ep=ep), "ep") for ep in (16, 24))
    assert straddling.spans_nodes(72) and not inside.spans_nodes(72)
    assert straddling.ranks_in_a_node(72) == (8, 16)
    assert collective_time("all_to_all", 1e9, racks, straddling) > 5 * collective_time("all_to_all", 1e9, racks, inside)


# ---- 8. the search's arithmetic over ranks on a million nodes ------------------------------------------------------
def _lines_run(budget: int, call, *args):
    """call(*args)'s result and the Python lines it ran (sys.settrace's line events, each turn of a loop counted); an
    AssertionError as soon as it passes `budget`, so that work that grows with the cluster fails at once."""
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
            if count > budget:
                raise AssertionError(f"more than {budget:,} Python lines run: work that grows with the cluster")
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        return call(*args), count
    finally:
        sys.settrace(previous)


def test_the_arithmetic_over_ranks_does_not_grow_with_the_cluster():
    """A search over 999,999 nodes (7,999,992 GPUs) costs each group by its fewest ranks in a node and takes the
    divisors of the GPU count: a few thousand Python lines each, counted (not timed). The divisors are tried up to
    the square root; a group's ranks in a node are counted node by node over one period of its blocks, each count
    once, not rank by rank. The answers are checked against the rank lists in tests/test_rank_layout.py."""
    gpus = 999_999 * 8
    rank_layout._ranks_in_a_node.cache_clear()        # counted from scratch, not read from an earlier search's cache
    found, lines = _lines_run(5_000, divisors, gpus)
    assert found[:6] == [1, 2, 3, 4, 6, 7] and found[-1] == gpus and lines > 1_000
    for degrees in (dict(dp=gpus), dict(dp=gpus // 2, tp=2), dict(dp=gpus // 8, tp=8), dict(dp=gpus // 24, tp=4, cp=6),
                    dict(dp=gpus // 8, tp=2, pp=4)):
        layout = Strategy(**degrees).layout
        for axis in ("tp", "cp", "dp", "pp", "dp_cp"):
            group = layout.group(axis)
            fewest, most = _lines_run(2_000, group.ranks_in_a_node, 8)[0]
            assert 1 <= fewest <= most <= min(group.size, 8), (degrees, axis)
    hsdp = Strategy(dp=gpus // 2, tp=2, zero=3, dp_shard=4)            # shard groups of one node, replicas across
    assert _lines_run(2_000, hybrid_shard.replicate_group(hsdp).ranks_in_a_node, 8)[0] == (1, 1)


def test_a_diloco_replica_is_a_block_of_gpus_whose_pipeline_stays_inside_it():
    """A DiLoCo replica is a block of GPUs of its own: its pipeline stages send to each other inside it, and the
    outer sync runs between blocks. With one replica per region the pipeline's sends never cross the slow link and
    the outer sync always does (the step time and the region note agree)."""
    llama = Transformer.preset("llama3-70b").with_(seq_len=4096)
    strategy = Strategy(dp=4, tp=8, pp=2, micro_batch=8, grad_accum=8, sequence_parallel=True, recompute="full",
                        zero=1, sync_every=100, replicas=2)
    nodes = ClusterSpec.preset("h100-sxm", nodes=8)
    regions = nodes.with_(region_nodes=4)                       # 32 GPUs a region, 32 a replica
    inner = outer_sync.inner_strategy(strategy)
    assert not spans_regions(regions, inner.layout.group("pp"))
    assert spans_regions(regions, outer_sync.outer_group(strategy))
    assert outer_sync.outer_group(strategy).stride == 32
    apart, together = step_time(llama, regions, strategy), step_time(llama, nodes, strategy)
    assert apart.pp_comm == pytest.approx(together.pp_comm)
    assert apart.outer_sync > 10 * together.outer_sync         # the slow link, once every 100 steps
    assert "across it: the DiLoCo replicas' outer sync" in regions_note(llama, regions, strategy)

"""Multi-token-prediction modules in the planner (DeepSeek-V3, arXiv:2412.19437, Sec. 2.2): each cost written out by
hand against what the planner computes, for a small MoE model with one module. Pure Python, no torch."""

from __future__ import annotations

import pytest

from ddp_lab.course.plan import activations, efficiency, expert_compute, experts, memory, pipeline_stages, steptime
from ddp_lab.course.plan.cluster_spec import ClusterSpec
from ddp_lab.course.plan.experts import MoE
from ddp_lab.course.plan.model import Transformer
from ddp_lab.course.plan.optimizer_step import optimizer_parameters, optimizer_seconds
from ddp_lab.course.plan.strategy import Strategy

H, V, S = 256, 1000, 128
PLAIN = Transformer("small-moe", 8, H, 4, V, S, ffn=512, ffn_kind="swiglu", norm="rmsnorm", bias=False,
                    position="rope", tied_embeddings=False, dropout=False, moe=MoE(16, 4, 128, dense_layers=1))
MTP = PLAIN.with_(mtp_layers=1)
MOE_LAYER = PLAIN.layer_parameters() + experts.moe_ffn_parameters(PLAIN) - PLAIN.ffn_parameters()
MODULE = 2 * H * H + 3 * H          # M_k and three RMSNorms


def test_a_module_adds_a_moe_layer_a_projection_and_three_norms():
    assert MTP.parameters() - PLAIN.parameters() == MOE_LAYER + MODULE
    active = MOE_LAYER - (16 - 4) * experts.expert_parameters(PLAIN) + MODULE
    assert MTP.active_parameters() - PLAIN.active_parameters() == active


@pytest.mark.parametrize("strategy", [Strategy(pp=4), Strategy(pp=4, first_stage_layers=1, last_stage_layers=1),
                                      Strategy(pp=2, virtual_stages=2, schedule="interleaved", grad_accum=2)],
                         ids=["even", "uneven", "interleaved"])
def test_the_last_stage_runs_the_modules_layer_after_its_own(strategy):
    plain, mtp = pipeline_stages.stage_layers(PLAIN, strategy), pipeline_stages.stage_layers(MTP, strategy)
    assert mtp[:-1] == plain[:-1] and mtp[-1] == plain[-1] + 1
    last = strategy.pp - 1
    assert pipeline_stages.stage_layer_indices(MTP, strategy, last)[-1] == 8          # index 8: after layers 0-7
    assert experts.stage_moe_layers(MTP, strategy, last) == experts.stage_moe_layers(PLAIN, strategy, last) + 1


def test_the_last_stage_holds_the_module_and_an_embedding_copy_with_a_pipeline():
    tp = 2
    for pp, copy in ((1, 0), (2, -(-V // tp) * H)):
        strategy = Strategy(tp=tp, pp=pp)
        last = pp - 1
        layer = memory.layer_parameters_per_rank(PLAIN, tp) + sum(experts.layer_change_per_rank(PLAIN, strategy))
        added = memory.stage_parameters(MTP, strategy, last) - memory.stage_parameters(PLAIN, strategy, last)
        assert added == layer + 2 * H * H // tp + 3 * H + copy
        assert memory.stage_parameters(MTP, strategy, 0) == memory.stage_parameters(PLAIN, strategy, 0) or pp == 1


def test_the_step_counts_a_layer_a_projection_and_a_head_pass_more():
    strategy = Strategy(dp=4, micro_batch=2, grad_accum=3)
    per_sequence = (steptime.layer_forward_flops(PLAIN) + experts.forward_flops_change(PLAIN) // 7
                    + 2 * S * H * V + 2 * S * 2 * H * H)
    assert steptime.step_flops(MTP, strategy) - steptime.step_flops(PLAIN, strategy) == \
        3 * per_sequence * strategy.global_batch
    gpu = ClusterSpec.preset("h100-sxm").gpu
    plain, mtp = efficiency.head_seconds(PLAIN, strategy, gpu), efficiency.head_seconds(MTP, strategy, gpu)
    assert 2 * plain.forward < mtp.forward < 3 * plain.forward       # a second head pass and the projection


def test_the_head_keeps_its_activations_once_more_and_the_projection_input():
    strategy = Strategy(tp=2)
    e = 2
    plain = activations.head_activation_bytes(PLAIN, strategy)
    assert activations.head_activation_bytes(MTP, strategy) == 2 * plain + e * S * 2 * H
    split = Strategy(tp=2, sequence_parallel=True)         # the projection's input split as the norms' inputs are
    assert activations.head_activation_bytes(MTP, split) == 2 * activations.head_activation_bytes(PLAIN, split) \
        + e * S * 2 * H // 2
    one_f_one_b = Strategy(pp=2, grad_accum=4)
    assert activations.layers_in_flight(MTP, one_f_one_b, 1) == activations.layers_in_flight(PLAIN, one_f_one_b, 1) + 1


@pytest.mark.parametrize("value", [-1, True, 1.0, 65])
def test_a_count_that_is_not_a_whole_number_of_modules_is_refused(value):
    with pytest.raises(ValueError, match="mtp_layers"):
        PLAIN.with_(mtp_layers=value)


def test_the_pace_and_the_vocab_parallel_all_reduces_include_the_module():
    """The slowest stage (the last, with the module's layer and the head again) sets the compute; on one stage the
    module repeats the embedding all-reduce, the head-input gradient's and the cross-entropy's: twice the plain."""
    cluster = ClusterSpec.preset("h100-sxm")
    strategy = Strategy(tp=2, pp=2, dp=2, grad_accum=4)
    gpu, m = cluster.gpu, strategy.grad_accum
    layer = efficiency.layer_seconds(PLAIN, strategy, gpu).total
    plain, mtp = steptime.step_time(PLAIN, cluster, strategy), steptime.step_time(MTP, cluster, strategy)
    # what is not the layer: the head's second pass, the experts' extra work, Adam over the added parameters
    head = efficiency.head_seconds(MTP, strategy, gpu).total - efficiency.head_seconds(PLAIN, strategy, gpu).total
    change = expert_compute.layer_compute_change(PLAIN, strategy, gpu)
    moe = (expert_compute.seconds_per_micro_batch(MTP, cluster, strategy, change)
           - expert_compute.seconds_per_micro_batch(PLAIN, cluster, strategy, change))
    adam = (optimizer_seconds(optimizer_parameters(MTP, strategy), strategy, gpu)
            - optimizer_seconds(optimizer_parameters(PLAIN, strategy), strategy, gpu))
    assert mtp.compute - plain.compute == pytest.approx(m * (layer + head + moe) + adam)
    one_stage = Strategy(tp=2, dp=4)
    assert steptime.vocab_parallel_communication(MTP, cluster, one_stage) == pytest.approx(
        2 * steptime.vocab_parallel_communication(PLAIN, cluster, one_stage))

"""The planner's reference decoder and measuring tools, in one process: exact parameter counts,
Korthikanti et al.'s activation bytes, the saved-tensor counter, the alpha-beta fit."""

import pytest
import torch

from ddp_lab.plan import Strategy, Transformer
from ddp_lab.course.alpha_beta import fit_alpha_beta
from ddp_lab.plan.calibrate import collective_bytes
from ddp_lab.plan.measure import SavedTensorCounter
from ddp_lab.course.plan.memory import stage_parameters
from ddp_lab.plan.reference import build

GPT = Transformer("tiny-gpt", layers=2, hidden=64, heads=4, vocab=128, seq_len=32)
LLAMA = Transformer("tiny-llama", layers=2, hidden=64, heads=4, vocab=96, seq_len=16, ffn=96, kv_heads=2,
                    ffn_kind="swiglu", norm="rmsnorm", bias=False, position="rope", tied_embeddings=False)


def count(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("shape", [GPT, LLAMA, Transformer.preset("gpt2-small").with_(layers=1),
                                   GPT.with_(bias=False), GPT.with_(tied_embeddings=False)], ids=lambda m: m.name)
def test_parameter_count_equals_the_planners(shape):
    assert count(build(shape)) == shape.parameters()


def test_shapes_the_reference_decoder_does_not_build_are_refused_before_anything_is_built():
    from ddp_lab.course.plan.experts import MoE
    from ddp_lab.course.plan.latent_attention import LatentAttention
    for shape, word in ((LLAMA.with_(moe=MoE(4, 2, 32)), "has moe"), (LLAMA.with_(kv_heads=None, latent=LatentAttention(
            16, nope_dim=8, rope_dim=8, v_dim=8)), "has latent"), (LLAMA.with_(mtp_layers=1), "has mtp_layers")):
        with pytest.raises(ValueError, match=word):
            build(shape)


@pytest.mark.parametrize("shape", [GPT, LLAMA], ids=lambda m: m.name)
def test_pipeline_stages_hold_what_the_planner_says(shape):
    strategy = Strategy(pp=2)
    for stage in range(2):
        assert count(build(shape, stage=stage, stages=2)) == stage_parameters(shape, strategy, stage)


def saved_bytes(shape, dtype, batch=2, dropout=0.1):
    torch.manual_seed(0)
    net = build(shape, dtype=dtype, dropout=dropout).train()
    ids = torch.randint(0, shape.vocab, (batch, shape.seq_len))
    with SavedTensorCounter() as counter:
        loss = net(ids, ids)
        held = counter.current
        loss.backward()
    assert counter.current == 0            # backward released everything it saved
    return held


@pytest.mark.parametrize("dtype, paper", [(torch.bfloat16, True), (torch.float32, False)])
def test_one_layer_saves_korthikantis_bytes(dtype, paper):
    # one layer = the difference between 2 layers and 1 (embeddings and head cancel)
    s, b, h, a = 64, 2, 128, 4
    shape = Transformer("layer", layers=1, hidden=h, heads=a, vocab=256, seq_len=s)
    layer = saved_bytes(shape.with_(layers=2), dtype, b) - saved_bytes(shape, dtype, b)
    if paper:   # Korthikanti et al. 2022, Sec. 4.1: 16-bit values, 1-byte dropout masks
        expected = s * b * h * (34 + 5 * a * s / h)
    else:       # fp32: every 2-byte value is 4 bytes; the masks (2 sbh + a s^2 b) stay 1 byte
        expected = s * b * h * (2 * 32 + 2) + a * s * s * b * (4 + 1 + 4)
    # above it: LayerNorm's mean and 1/std per token (2 norms x 2 x s b values)
    assert expected <= layer <= expected * 1.02


def test_dropout_saves_a_one_byte_mask():
    from ddp_lab.plan.reference import _dropout

    x = torch.nn.Parameter(torch.randn(1000))
    with SavedTensorCounter() as counter:
        y = _dropout(x * 2, 0.5, True)     # a product with a number saves nothing
    assert counter.peak == 1000            # the bool mask (F.dropout on CPU would save 4000 bytes)
    y.sum().backward()


def test_counter_counts_a_storage_once():
    base = torch.randn(4, 8)
    with SavedTensorCounter() as counter:
        w = torch.nn.Parameter(torch.randn(8, 8))
        out = base[:2] @ w + base[2:] @ w  # two views of one storage saved
    assert counter.peak == base.numel() * 4
    out.sum().backward()
    assert counter.current == 0


def test_reference_is_causal():
    net = build(GPT, dropout=0.0).eval()
    ids = torch.randint(0, GPT.vocab, (1, GPT.seq_len))
    changed = ids.clone()
    changed[0, 20:] = (changed[0, 20:] + 1) % GPT.vocab
    same, other = net(ids), net(changed)
    torch.testing.assert_close(same[0, :20], other[0, :20])   # positions < 20 do not see 20+
    assert not torch.allclose(same[0, 20:], other[0, 20:])


def test_build_explains_bad_splits():
    with pytest.raises(ValueError, match="must divide into 3 equal pipeline stages"):
        build(GPT, stage=0, stages=3)


def test_fit_alpha_beta_recovers_a_line():
    nbytes = [4, 4096, 262144, 4194304]
    alpha, beta = fit_alpha_beta(nbytes, [150e-6 + 1e-9 * n for n in nbytes])
    assert alpha == pytest.approx(150e-6, rel=1e-6) and beta == pytest.approx(1e-9, rel=1e-6)


def test_collective_bytes_is_the_whole_tensor():
    assert collective_bytes("all_reduce", 100, 4) == 400
    assert collective_bytes("all_gather", 100, 4) == 1600      # the gathered output
    assert collective_bytes("reduce_scatter", 100, 4) == 1600  # the input before scattering
    assert collective_bytes("send", 100, 4) == 400


def test_fused_rmsnorm_equals_torchs():
    """The reference decoder's RMSNorm (saves input and 1/rms, as fused kernels do) computes nn.RMSNorm's
    outputs and gradients."""
    from ddp_lab.plan.reference import FusedRMSNorm

    torch.manual_seed(0)
    x = torch.randn(2, 5, 16, requires_grad=True)
    ours, theirs = FusedRMSNorm(16), torch.nn.RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        ours.weight.uniform_()
        theirs.weight.copy_(ours.weight)
    grads = [torch.autograd.grad(norm(x).pow(2).sum(), [x, norm.weight]) for norm in (ours, theirs)]
    torch.testing.assert_close(ours(x), theirs(x))
    for mine, reference in zip(*grads):
        torch.testing.assert_close(mine, reference)

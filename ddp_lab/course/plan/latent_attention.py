"""Multi-head latent attention (MLA) in the planner: its projections, parameters, FLOPs and saved tensors.

DeepSeek-V2 (DeepSeek-AI 2024, arXiv:2405.04434, Sec. 2.1) replaces a layer's Q, K and V projections by
low-rank ones through a small latent vector, which is what an inference cache keeps. In training every
head's keys and values are rebuilt from that latent, so attention itself runs as multi-head attention
with heads of two widths. With h = hidden, a = heads, d_n = nope_dim, d_r = rope_dim, d_v = v_dim,
r_q = q_rank and r_kv = kv_rank (the config.json keys in brackets):
    queries     h -> r_q (W_DQ), an RMSNorm of r_q, r_q -> a (d_n + d_r) (W_UQ and W_QR together);
                without q_rank (DeepSeek-V2-Lite) one h -> a (d_n + d_r) matrix          [q_lora_rank]
    keys/values h -> r_kv + d_r (W_DKV and W_KR together: the latent and one RoPE key all heads share),
                an RMSNorm of r_kv, r_kv -> a (d_n + d_v) (W_UK and W_UV together)      [kv_lora_rank]
    attention   QK^T over d_n + d_r per head [qk_nope_head_dim + qk_rope_head_dim], the weighted values
                over d_v [v_head_dim]; the output projection a d_v -> h
So a layer's attention matrices hold h r_q + r_q a (d_n + d_r) + h (r_kv + d_r) + r_kv a (d_n + d_v) + a d_v h
weights (DeepSeek-V3: 187,105,280 of them a layer), and two RMSNorm weights of r_q and r_kv.
Tensor parallelism splits the up-projections by heads (column-parallel) and the output projection
(row-parallel) as Megatron does the dense Q, K, V and out; the two down-projections are small, and every
tensor-parallel rank holds them whole (Megatron-Core's default MLA layer spec builds them as plain `linear()`s,
not split): `replicated_matmul_parameters`. They run where the layer norm runs: on the whole sequence on every
rank, or with sequence parallelism on the rank's s/tp tokens, whose latents are then all-gathered for the
up-projections. So their FLOPs, the latents and the latents' norms are what a layer norm's are: repeated on
every rank, split by sequence parallelism (the "around" tensors of activations.py). And the tensor-parallel
collective in front of attention carries the latents, r_q + r_kv + d_r values a token (h + r_kv + d_r without a
query latent: W_Q takes the hidden state), not h: `tp_input_share`, DeepSeek-V3's 2,112 / 7,168.

Not modelled: the weight absorption inference uses (training runs the unabsorbed form above), YaRN's
scaling (no parameters), the all-reduce over the tensor-parallel ranks of the down-projections' gradients (about
15M values a DeepSeek-V3 layer).

No lesson teaches it; the planner of notebooks/13-plan-your-training-run.ipynb uses this module through
model.Transformer(latent=...) and `--hf-config` (docs/planner.md).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention's sizes (module docstring; DeepSeek-V3: kv_rank 512, q_rank 1536, heads of 128 + 64
    for queries and keys, 128 for values).

    Example:
        >>> LatentAttention(kv_rank=512, q_rank=1536)
        LatentAttention(kv_rank=512, q_rank=1536, nope_dim=128, rope_dim=64, v_dim=128)

    Used by the planner of notebooks/13-plan-your-training-run.ipynb.
    """

    kv_rank: int                  # width of the key/value latent (kv_lora_rank)
    q_rank: int | None = None     # width of the query latent (q_lora_rank); None: queries projected at full rank
    nope_dim: int = 128           # per-head query/key width without RoPE (qk_nope_head_dim)
    rope_dim: int = 64            # per-head query/key width with RoPE; the key's is shared by all heads
    v_dim: int = 128              # per-head value width (v_head_dim)

    def __post_init__(self) -> None:
        for field in ("kv_rank", "nope_dim", "v_dim"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"LatentAttention.{field} must be an integer >= 1, got {value!r}")
        if isinstance(self.rope_dim, bool) or not isinstance(self.rope_dim, int) or self.rope_dim < 0:
            raise ValueError(f"LatentAttention.rope_dim must be an integer >= 0, got {self.rope_dim!r}")
        if self.q_rank is not None and (isinstance(self.q_rank, bool) or not isinstance(self.q_rank, int)
                                        or self.q_rank < 1):
            raise ValueError(f"LatentAttention.q_rank must be an integer >= 1 or None (full-rank queries), "
                             f"got {self.q_rank!r}")

    def text(self) -> str:
        """How a plan's model line names it: 'latent attention (kv rank 512, q rank 1536)'."""
        return f"latent attention (kv rank {self.kv_rank}" + (f", q rank {self.q_rank})" if self.q_rank else ")")


def check(model) -> None:
    """Raise ValueError (saying the fix) where a Transformer's other fields contradict latent attention
    (Transformer.__post_init__ calls it)."""
    if model.latent is None:
        return
    if not isinstance(model.latent, LatentAttention):
        raise ValueError(f"Transformer.latent must be a LatentAttention(kv_rank=...) or None, got {model.latent!r}")
    clashes = [f"{field}={getattr(model, field)!r}" for field, plain in
               (("kv_heads", None), ("head_size", None), ("bias", False), ("qkv_bias", False), ("qk_norm", False),
                ("position", "rope")) if getattr(model, field) != plain and not (
                   field == "kv_heads" and model.kv_heads == model.heads)]
    if clashes:
        raise ValueError(f"{', '.join(clashes)}: latent attention builds every head's keys and values from its latent "
                         f"(kv_heads = heads), sets the head widths itself, has no biases or per-head norms and "
                         f"uses RoPE; drop those fields")


def matmul_parameters(model) -> int:
    """Weights of one layer's latent-attention matrices (module docstring), what a token is multiplied by."""
    latent, h, a = model.latent, model.hidden, model.heads
    queries = (latent.q_rank or h) * a * (latent.nope_dim + latent.rope_dim)    # the up-projection, or W_Q itself
    return (replicated_matmul_parameters(model) + queries + latent.kv_rank * a * (latent.nope_dim + latent.v_dim)
            + a * latent.v_dim * h)


def replicated_matmul_parameters(model) -> int:
    """Weights every tensor-parallel rank holds whole: the down-projections (0 without latent attention).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> v3 = Transformer("v3", 61, 7168, 128, 129280, 4096, bias=False, position="rope",
        ...                  latent=LatentAttention(512, 1536))
        >>> replicated_matmul_parameters(v3) == 7168 * 1536 + 7168 * (512 + 64)
        True
    """
    latent = model.latent
    if latent is None:
        return 0
    return model.hidden * ((latent.q_rank or 0) + latent.kv_rank + latent.rope_dim)


def norm_parameters(model) -> int:
    """The RMSNorm weights on the latents (r_q + r_kv; 0 without latent attention), on every tensor-parallel rank."""
    latent = model.latent
    return 0 if latent is None else (latent.q_rank or 0) + latent.kv_rank


def gemms(model, strategy) -> tuple[list, list, tuple[float, int, int]]:
    """The attention's weight GEMMs on one tensor-parallel rank, each (forward FLOPs, forward k, input-gradient k)
    as efficiency.layer_gemms lists a dense layer's: (the down-projections, on the rank's s/tp tokens with sequence
    parallelism; the GEMMs after the tensor-parallel input, the up-projections or W_Q; the output projection)."""
    latent, h, a, t = model.latent, model.hidden, model.heads, strategy.tp
    tokens = strategy.micro_batch * model.seq_len
    local = tokens // down_projection_split(strategy)              # where the down-projections run
    qk_width = a * (latent.nope_dim + latent.rope_dim) // t
    kv_width = a * (latent.nope_dim + latent.v_dim) // t
    down_kv = latent.kv_rank + latent.rope_dim
    downs = [(2 * local * h * down_kv, h, down_kv)]
    column = [(2 * tokens * latent.kv_rank * kv_width, latent.kv_rank, kv_width)]
    if latent.q_rank:
        downs.insert(0, (2 * local * h * latent.q_rank, h, latent.q_rank))
        column.insert(0, (2 * tokens * latent.q_rank * qk_width, latent.q_rank, qk_width))
    else:
        column.insert(0, (2 * tokens * h * qk_width, h, qk_width))
    return downs, column, (2 * tokens * (a * latent.v_dim // t) * h, a * latent.v_dim // t, h)


def down_projections(model) -> int:
    """How many down-projection GEMMs a layer runs: 2 (W_DQ, W_DKV), 1 without a query latent, 0 without latent
    attention; `gemms` lists them first."""
    return 0 if model.latent is None else 1 + (model.latent.q_rank is not None)


def down_projection_split(strategy) -> int:
    """How many ways the down-projections' tokens are split: as a layer norm's (tp with sequence parallelism, else
    none; module docstring)."""
    return strategy.tp if strategy.sequence_parallel else 1


def tp_input_share(model) -> float:
    """The width of the tensor-parallel collective in front of attention over h (module docstring): the latents,
    r_q + r_kv + d_r (h + r_kv + d_r without a query latent); 1 without latent attention."""
    latent = model.latent
    if latent is None:
        return 1.0
    return ((latent.q_rank or model.hidden) + latent.kv_rank + latent.rope_dim) / model.hidden


def rope_width(model) -> int:
    """Values per token RoPE rotates: every head's RoPE query part and the one shared RoPE key."""
    return (model.heads + 1) * model.latent.rope_dim


def saved_latent_values(model) -> int:
    """Values per token a layer keeps for backward beyond a multi-head layer's Q, K, V and output, repeated on every
    tensor-parallel rank unless sequence parallelism splits them: the two latents before and after their norms, and
    the shared RoPE key."""
    latent = model.latent
    if latent is None:
        return 0
    return 2 * ((latent.q_rank or 0) + latent.kv_rank) + latent.rope_dim

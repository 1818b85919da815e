"""The model being planned: a decoder-only transformer's shape, its exact parameter count, presets.

Parameter count, layer by layer (h = hidden, f = FFN inner size, d = head_dim, h / heads unless
`head_size` is given; d_q = heads * d, = h unless head_size says otherwise; d_kv = kv_heads * d):
    attention   W_q, W_o: h*d_q each; W_k, W_v: h*d_kv each (GQA when kv_heads < heads)
                biases (if `bias`): d_q (q) + 2*d_kv (k, v) + h (o); `qkv_bias` alone: d_q + 2*d_kv (Qwen2)
                `qk_norm`: an RMSNorm weight of d on the queries and one on the keys (Qwen3)
    FFN         "gelu": W_1 (h x f) and W_2 (f x h); "swiglu": gate, up (h x f) and down (f x h)
                biases (if `bias`): f per up-projection (1 for gelu, 2 for swiglu) + h (down)
    2 norms     "layernorm": weight + bias (bias only if `bias`); "rmsnorm": weight only
With h = 12h² + 13h for GPT-style layers (Shoeybi et al. 2019, arXiv:1909.08053; Narayanan et
al. 2021, arXiv:2104.04473, Sec. 5.1: P = 12lh²(1 + 13/(12h) + (V+s)/(12lh))).
Around the layers: token embedding V*h, a learned position table s*h ("learned"; none for
"rope"), one final norm, and an output head V*h unless tied to the embedding.
A mixture-of-experts model (`moe=MoE(...)`, experts.py, lesson 14) swaps the FFN of its MoE layers
for a router and experts; `parameters()` counts every expert, `active_parameters()` the ones a
token uses. Multi-head latent attention (`latent=LatentAttention(...)`, latent_attention.py: DeepSeek-V2/V3)
swaps the Q, K, V projections for low-rank ones: heads of nope_dim + rope_dim for queries and keys (head_dim,
so d_q = d_kv = heads * head_dim) and of v_dim for values (d_v = heads * v_dim, what the output projection reads).
Multi-token prediction (`mtp_layers`, multi_token.py: DeepSeek-V3) adds modules of one layer each after the decoder:
`parameters()` counts them (their layers as layers, and each module's 2h x h projection and norms).
Sliding-window attention (`window`, `windowed_layers`, sliding_window.py: gpt-oss, Mistral 7B v0.1) adds no
parameters; it changes what attention computes.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace

from ddp_lab.course.plan import experts, latent_attention, multi_token, sliding_window
from ddp_lab.course.plan.experts import MoE
from ddp_lab.course.plan.latent_attention import LatentAttention

FFN_KINDS = ("gelu", "swiglu")
NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rope")
# The largest value of each shape field the planner takes: orders of magnitude beyond any model trained
# (Llama 3 405B: 126 layers, hidden 16,384, 128 heads, FFN 53,248, a 128K vocabulary), small enough that
# every count stays a finite float and a search stays quick (10,000 layers: about 9 s). Larger values are
# refused with a message, not computed (a hidden size of 10^400 overflowed a float; 10^30 layers never ended).
LARGEST = {"layers": 10**4, "hidden": 10**6, "heads": 10**5, "kv_heads": 10**5, "ffn": 10**7, "vocab": 10**8,
           "seq_len": 10**9}
LARGEST_COUNT = 10**15    # parse_count's limit: 1000T parameters


def size_text(value: int) -> str:
    """An integer as an error message shows it: with thousands separators, or its order of magnitude past 10^15."""
    return f"{value:,}" if abs(value) < 10**15 else f"about 10^{len(str(abs(value))) - 1}"


@dataclass(frozen=True)
class Transformer:
    """A decoder-only transformer's shape (sizes only; no weights).

    Example:
        >>> Transformer.preset("gpt2-small").parameters()
        124439808

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq_len: int
    ffn: int | None = None        # FFN inner size; None -> 4 * hidden
    kv_heads: int | None = None   # None -> heads (multi-head attention); fewer -> grouped-query attention
    ffn_kind: str = "gelu"        # "gelu": 2 matrices; "swiglu": 3 matrices
    norm: str = "layernorm"
    bias: bool = True             # biases on every Linear (and on LayerNorm)
    position: str = "learned"     # "learned": a seq_len x hidden table; "rope": no parameters
    tied_embeddings: bool = True
    dropout: bool = True          # dropout after attention scores, attention and FFN (adds 1-byte masks)
    moe: MoE | None = None        # mixture of experts (experts.py): experts, top_k, expert_ffn, shared, dense layers
    head_size: int | None = None  # width of one attention head; None -> hidden / heads (Qwen3-30B-A3B: 128 on 2048 / 32)
    qkv_bias: bool = False        # biases on the Q, K and V projections only (Qwen2; `bias` puts them everywhere)
    qk_norm: bool = False         # an RMSNorm over each query and key head (Qwen3, OLMo 2)
    latent: LatentAttention | None = None   # multi-head latent attention (DeepSeek-V2/V3): latent_attention.py
    mtp_layers: int = 0           # multi-token-prediction modules after the decoder (DeepSeek-V3: 1): multi_token.py
    window: int | None = None     # keys a windowed layer's query attends to (gpt-oss: 128): sliding_window.py
    windowed_layers: int | None = None   # how many layers attend to that window (None: all; gpt-oss-20b: 12 of 24)

    def __post_init__(self) -> None:
        for field in ("layers", "hidden", "heads", "vocab", "seq_len"):
            if int(getattr(self, field)) < 1:
                raise ValueError(f"Transformer.{field} must be a positive integer, got {getattr(self, field)!r}")
        for field, largest in LARGEST.items():
            value = getattr(self, field)
            if value is not None and value > largest:
                raise ValueError(f"Transformer.{field} = {size_text(value)} is more than the planner models: "
                                 f"at most {largest:,}")
        if self.head_size is not None and (isinstance(self.head_size, bool) or not isinstance(self.head_size, int)
                                           or not 1 <= self.head_size <= self.hidden):
            raise ValueError(f"Transformer.head_size must be an integer from 1 to hidden={self.hidden} (or None: "
                             f"hidden / heads), got {self.head_size!r}")
        if self.hidden % self.heads and self.head_size is None and self.latent is None:
            raise ValueError(f"hidden={self.hidden} is not divisible by heads={self.heads}: "
                             f"choose heads that divide hidden (head size = hidden / heads), or give head_size")
        if self.heads % self.kv_heads_:
            raise ValueError(f"heads={self.heads} is not divisible by kv_heads={self.kv_heads}: "
                             f"each kv head serves a whole group of query heads")
        for field, allowed in (("ffn_kind", FFN_KINDS), ("norm", NORMS), ("position", POSITIONS)):
            if getattr(self, field) not in allowed:
                raise ValueError(f"Transformer.{field} must be one of {allowed}, got {getattr(self, field)!r}")
        if self.moe is not None and not isinstance(self.moe, MoE):
            raise ValueError(f"Transformer.moe must be a MoE(experts=..., top_k=..., expert_ffn=...) or None, "
                             f"got {self.moe!r}")
        experts.check_layers(self)    # a MoE model keeps at least one layer with experts
        latent_attention.check(self)  # latent attention sets its own head widths, has no biases or head norms
        multi_token.check(self)       # 0 or more whole modules
        sliding_window.check(self)    # a positive window, and windowed layers only with one

    def __repr__(self) -> str:
        # `moe` shows only when set: a dense model prints as it did before experts existed (lesson 13 prints one)
        shown = (f"{field.name}={getattr(self, field.name)!r}" for field in fields(self)
                 if field.name not in OPTIONAL_FIELDS or getattr(self, field.name) != OPTIONAL_FIELDS[field.name])
        return f"{type(self).__name__}({', '.join(shown)})"

    @property
    def ffn_(self) -> int:
        """FFN inner size (4 * hidden unless given)."""
        return 4 * self.hidden if self.ffn is None else self.ffn

    @property
    def kv_heads_(self) -> int:
        """Key/value heads (= heads unless grouped-query attention)."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def head_dim(self) -> int:
        """Width of one query or key head: head_size if given, nope_dim + rope_dim with latent attention, else
        hidden / heads."""
        if self.latent is not None:
            return self.latent.nope_dim + self.latent.rope_dim
        return self.hidden // self.heads if self.head_size is None else self.head_size

    @property
    def v_dim(self) -> int:
        """Width of the V projection: kv_heads * the value head's width (v_dim with latent attention, else head_dim)."""
        return self.kv_heads_ * (self.head_dim if self.latent is None else self.latent.v_dim)

    @property
    def o_dim(self) -> int:
        """Width of the attention output, the output projection's input: heads * the value head's width (= q_dim
        unless latent attention's values are narrower than its queries)."""
        return self.q_dim if self.latent is None else self.heads * self.latent.v_dim

    @property
    def q_dim(self) -> int:
        """Width of the Q projection and of the attention output: heads * head_dim (= hidden unless head_size is given)."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the K projection (and of V, but with latent attention: v_dim): kv_heads * head_dim."""
        return self.kv_heads_ * self.head_dim

    def norm_parameters(self) -> int:
        """Parameters of one norm: LayerNorm weight (+ bias), RMSNorm weight."""
        return self.hidden * (2 if self.norm == "layernorm" and self.bias else 1)

    def attention_matmul_parameters(self) -> int:
        """Weights of one layer's attention matrices: W_q and W_o (h x d_q each), W_k and W_v (h x d_kv each).

        What a token is multiplied by in attention (its FLOPs are 2 per weight); 4h² for multi-head attention;
        latent attention's low-rank projections with latent_attention.matmul_parameters.
        """
        if self.latent is not None:
            return latent_attention.matmul_parameters(self)
        h, q, kv = self.hidden, self.q_dim, self.kv_dim
        return 2 * h * q + 2 * h * kv

    def layer_matmul_parameters(self) -> int:
        """Weights of one dense layer's matrices (attention and FFN): 2 s of these FLOPs per sequence, forward.

        Example:
            >>> Transformer.preset("gpt2-small").layer_matmul_parameters() == 12 * 768**2
            True
        """
        ups = 2 if self.ffn_kind == "swiglu" else 1
        return self.attention_matmul_parameters() + (ups + 1) * self.hidden * self.ffn_

    def attention_parameters(self) -> int:
        h, q, kv = self.hidden, self.q_dim, self.kv_dim
        biases = (q + 2 * kv + h) if self.bias else (q + 2 * kv) if self.qkv_bias else 0
        return (self.attention_matmul_parameters() + biases + (2 * self.head_dim if self.qk_norm else 0)
                + latent_attention.norm_parameters(self))

    def ffn_parameters(self) -> int:
        h, f = self.hidden, self.ffn_
        ups = 2 if self.ffn_kind == "swiglu" else 1
        return (ups + 1) * h * f + ((ups * f + h) if self.bias else 0)

    def layer_parameters(self) -> int:
        """Parameters of one dense transformer layer: attention + FFN + 2 norms (12h² + 13h for GPT).

        A MoE layer holds experts.moe_ffn_parameters(model) in place of the FFN.

        Example:
            >>> Transformer.preset("gpt2-small").layer_parameters() == 12 * 768**2 + 13 * 768
            True
        """
        return self.attention_parameters() + self.ffn_parameters() + 2 * self.norm_parameters()

    def embedding_parameters(self) -> int:
        """Token embedding plus the learned position table (0 for RoPE)."""
        return self.vocab * self.hidden + (self.seq_len * self.hidden if self.position == "learned" else 0)

    def head_parameters(self) -> int:
        """Final norm plus the output projection (0 extra when tied to the embedding)."""
        return self.norm_parameters() + (0 if self.tied_embeddings else self.vocab * self.hidden)

    def parameters(self) -> int:
        """Exact parameter count, embeddings included (a tied head counted once).

        Example:
            >>> Transformer.preset("llama2-7b").parameters()
            6738415616

        Introduced in notebooks/13-plan-your-training-run.ipynb.
        """
        return ((self.layers + self.mtp_layers) * self.layer_parameters() + experts.parameter_change(self)
                + multi_token.parameter_change(self) + self.embedding_parameters() + self.head_parameters())

    def active_parameters(self) -> int:
        """Parameters a token is multiplied by: parameters() less the routed experts it skips (MoE).

        Example:
            >>> Transformer.preset("deepseek-moe-16b").active_parameters()
            2828650496

        Introduced in notebooks/14-mixture-of-experts.ipynb.
        """
        return experts.active_parameters(self)

    def with_(self, **changes) -> "Transformer":
        """A copy with some fields changed, e.g. `model.with_(seq_len=2048)`."""
        return replace(self, **changes)

    @classmethod
    def preset(cls, name: str) -> "Transformer":
        """A public model shape by name (see PRESETS for the list and each shape's source).

        Example:
            >>> Transformer.preset("llama3-8b").parameters()
            8030261248

        Introduced in notebooks/13-plan-your-training-run.ipynb.
        """
        try:
            return PRESETS[name.lower()]
        except KeyError:
            raise KeyError(f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)} "
                           f"or build Transformer(name=..., layers=..., hidden=..., heads=..., vocab=..., "
                           f"seq_len=...)") from None


def _llama(name, layers, hidden, heads, kv_heads, ffn, vocab, seq_len):
    return Transformer(name, layers, hidden, heads, vocab, seq_len, ffn=ffn, kv_heads=kv_heads, ffn_kind="swiglu",
                       norm="rmsnorm", bias=False, position="rope", tied_embeddings=False, dropout=False)


def _mixture(name, layers, hidden, heads, kv_heads, ffn, vocab, seq_len, moe):
    return replace(_llama(name, layers, hidden, heads, kv_heads, ffn, vocab, seq_len), moe=moe)


def _megatron(name, layers, hidden, heads):
    # Narayanan et al. 2021 (arXiv:2104.04473), Table 1 / Sec. 5.1: vocabulary 51,200, sequence 2048
    return Transformer(name, layers, hidden, heads, vocab=51200, seq_len=2048)


PRESETS: dict[str, Transformer] = {
    # GPT-2 (Radford et al. 2019; Hugging Face config gpt2): 124,439,808 parameters
    "gpt2-small": Transformer("gpt2-small", 12, 768, 12, vocab=50257, seq_len=1024),
    # GPT-3 175B (Brown et al. 2020, arXiv:2005.14165, Table 2.1: 96 layers, d_model 12288, 96 heads, context 2048)
    "gpt3-175b": Transformer("gpt3-175b", 96, 12288, 96, vocab=50257, seq_len=2048),
    # Llama 2 7B (Touvron et al. 2023, arXiv:2307.09288; config: ffn 11008, vocab 32000, context 4096)
    "llama2-7b": _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
    # Llama 3 8B / 70B (Llama Team 2024, arXiv:2407.21783, Table 3: GQA with 8 kv heads, vocab 128K, ffn 14336 / 28672)
    "llama3-8b": _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
    "llama3-70b": _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
    # Llama 3 405B (Table 3: 126 layers, d_model 16384, ffn 53248, 128 heads, 8 kv heads): 405,853,388,800
    "llama3-405b": _llama("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192),
    # Mixtral 8x7B (Jiang et al. 2024, arXiv:2401.04088; config.json: hidden 4096, intermediate 14336,
    # 32 layers, 32 heads, 8 kv heads, vocab 32000, num_local_experts 8, num_experts_per_tok 2, 32K context):
    # 46,702,792,704 total, 12,879,925,248 active ("46.7B total ... 12.9B per token", Mistral AI, 2023-12-11)
    "mixtral-8x7b": _mixture("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 32768, MoE(8, 2, 14336)),
    # DeepSeekMoE 16B (Dai et al. 2024, arXiv:2401.06066, Sec. 5.1.2; config.json: hidden 2048, 28 layers, 16
    # heads, vocab 102400, context 4096, intermediate 10944 (the dense first layer), moe_intermediate 1408,
    # 64 routed + 2 shared experts, 6 per token, first_k_dense_replace 1): 16,375,728,128 total ("16.4B"),
    # 2,828,650,496 active ("around 2.8B")
    "deepseek-moe-16b": _mixture("deepseek-moe-16b", 28, 2048, 16, 16, 10944, 102400, 4096,
                                 MoE(64, 6, 1408, shared_experts=2, dense_layers=1)),
    # DeepSeek-V3 (DeepSeek-AI 2024, arXiv:2412.19437, Sec. 4.2; config.json of deepseek-ai/DeepSeek-V3 and -R1: 61
    # layers, the first 3 dense with FFN 18432, hidden 7168, 128 heads of latent attention (kv rank 512, q rank 1536,
    # query/key heads of 128 + 64, value heads of 128), 256 routed experts of 2048 and 1 shared, 8 per token,
    # vocab 129280, 4K pre-training sequences, one multi-token-prediction module): 682.6B parameters, 671,026,404,352
    # without the module (the report's "671B", which leaves the module out)
    "deepseek-v3": replace(_mixture("deepseek-v3", 61, 7168, 128, 128, 18432, 129280, 4096,
                                    MoE(256, 8, 2048, shared_experts=1, dense_layers=3)),
                           latent=LatentAttention(512, 1536), mtp_layers=1),
    # gpt-oss-20b / -120b (OpenAI 2025, arXiv:2508.10925; config.json of openai/gpt-oss-20b and -120b: 24 / 36 layers,
    # hidden 2880, 64 heads of 64 (head_dim), 8 kv heads, 32 / 128 experts of 2880, 4 per token, biases on attention,
    # experts and router, vocab 201088, every second layer attending to a 128-token window (layer_types, from the
    # first), sequences of 4,096: initial_context_length, max_position_embeddings 131,072 with YaRN): 20.9B and
    # 116.8B total (the model card's)
    "gpt-oss-20b": replace(_mixture("gpt-oss-20b", 24, 2880, 64, 8, 2880, 201088, 4096, MoE(32, 4, 2880)),
                           head_size=64, bias=True, window=128, windowed_layers=12),
    "gpt-oss-120b": replace(_mixture("gpt-oss-120b", 36, 2880, 64, 8, 2880, 201088, 4096, MoE(128, 4, 2880)),
                            head_size=64, bias=True, window=128, windowed_layers=18),
    # Qwen3-30B-A3B / -235B-A22B (Qwen Team 2025, arXiv:2505.09388; config.json of Qwen/Qwen3-30B-A3B and
    # -235B-A22B: 48 / 94 layers, hidden 2048 / 4096, 32 / 64 query heads of 128 (head_dim) and 4 kv heads, a norm
    # on each query and key head, 128 experts of 768 / 1536 in every layer, 8 per token, no shared expert, vocab
    # 151936, embeddings not tied; pre-trained on 4,096-token sequences before its long-context stage): 30.5B /
    # 235.1B total, 3.35B / 22.2B active (the model cards' 30.5B and 3.3B, 235B and 22B)
    "qwen3-30b-a3b": replace(_mixture("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 151936, 4096, MoE(128, 8, 768)),
                             head_size=128, qk_norm=True),
    "qwen3-235b-a22b": replace(_mixture("qwen3-235b-a22b", 94, 4096, 64, 4, 12288, 151936, 4096,
                                        MoE(128, 8, 1536)), head_size=128, qk_norm=True),
    # Megatron-LM weak-scaling models (Narayanan et al. 2021, Table 1)
    "megatron-1.7b": _megatron("megatron-1.7b", 24, 2304, 24),
    "megatron-18b": _megatron("megatron-18b", 40, 6144, 48),
    "megatron-145b": _megatron("megatron-145b", 80, 12288, 96),
    "megatron-1t": _megatron("megatron-1t", 128, 25600, 160),
}

# Fields shown by repr only when set (a dense Llama-style model prints as it did before they existed).
OPTIONAL_FIELDS = {"moe": None, "head_size": None, "qkv_bias": False, "qk_norm": False, "latent": None,
                   "mtp_layers": 0, "window": None, "windowed_layers": None}

_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}


def parse_count(text: str | int) -> int:
    """A count such as "7.5B", "125M", "1.3e9" or "70000" as an integer.

    Suffixes (case-insensitive): K = 10^3, M = 10^6, B or G = 10^9, T = 10^12.

    Example:
        >>> parse_count("7.5B")
        7500000000

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    if isinstance(text, int):
        value = text
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]?)\s*", str(text))
        suffix = match.group(2).upper() if match else None
        if not match or suffix not in _SUFFIX:
            raise ValueError(f"cannot read {text!r} as a count: write a number with an optional suffix "
                             f"K (10^3), M (10^6), B (10^9) or T (10^12), e.g. 7.5B or 125M")
        value = float(match.group(1)) * _SUFFIX[suffix]     # inf for 1e400: refused before round()
    if value > LARGEST_COUNT:
        raise ValueError(f"{text!r} is more than the planner models: at most 10^15 (1000T)")
    value = round(value)
    if value < 1:
        raise ValueError(f"{text!r} is less than 1: a count must be at least 1")
    return int(value)

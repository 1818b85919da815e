"""A model of your own: a Hugging Face `config.json`, already read into a dict, as a planner `Transformer`.

Hugging Face Transformers stores a model's shape in `config.json`. Decoder-only models in the
Llama family (Llama, Mistral, Qwen2, ...) name it the same way, GPT-2 its own way:
    layers        num_hidden_layers              (GPT-2: n_layer)
    hidden        hidden_size                    (n_embd)
    heads         num_attention_heads            (n_head)
    kv_heads      num_key_value_heads            (absent: = heads, multi-head attention)
    ffn           intermediate_size              (n_inner; absent or null: 4 x hidden)
    vocab         vocab_size
    seq_len       max_position_embeddings        (n_positions)
    tied          tie_word_embeddings            (absent: True, PretrainedConfig's default)
    FFN kind      hidden_act "silu"/"swish" with a gate (Llama's gate_proj): SwiGLU; else GeLU
    norm          rms_norm_eps present: RMSNorm; else LayerNorm
    biases        attention_bias / mlp_bias (Llama family; absent: none); GPT-2: biases
    positions     GPT-2 (n_positions): a learned table; the Llama family: RoPE (no parameters)
    dropout       any of attention_dropout, hidden_dropout, resid_pdrop, attn_pdrop, embd_pdrop > 0
The planner trains `max_position_embeddings` tokens per sequence; give a shorter training length
with `Transformer.with_(seq_len=...)` (the CLI's --seq-len). Not modelled, so refused with a
reason: a head_dim other than hidden / heads, and mixture-of-experts layers (lesson 14).
Reading the file is I/O and lives in the lab (`ddp_lab.plan.model_files.read_hf_config`).

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from ddp_lab.course.plan.model import LARGEST, Transformer, size_text

FIELDS = {   # planner field: the config.json keys that may hold it, first found wins
    "layers": ("num_hidden_layers", "n_layer"),
    "hidden": ("hidden_size", "n_embd"),
    "heads": ("num_attention_heads", "n_head"),
    "vocab": ("vocab_size",),
    "seq_len": ("max_position_embeddings", "n_positions"),
}
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
DROPOUT_KEYS = ("attention_dropout", "hidden_dropout", "resid_pdrop", "attn_pdrop", "embd_pdrop")


def transformer_from_hf_config(config: dict, name: str = "hf-model") -> Transformer:
    """The `Transformer` a Hugging Face config dict describes (mapping in the module docstring).

    Raises ValueError naming the key that is missing or not modelled.

    Example:
        >>> llama = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
        ...          "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
        ...          "max_position_embeddings": 8192, "tie_word_embeddings": False, "hidden_act": "silu",
        ...          "rms_norm_eps": 1e-5}
        >>> transformer_from_hf_config(llama).parameters() == Transformer.preset("llama3-8b").parameters()
        True

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    if not isinstance(config, dict):
        raise ValueError(f"a config is a JSON object of name: value pairs, got {type(config).__name__}")
    for key in EXPERT_KEYS:
        if _number(config, key, default=0) > 1:
            raise ValueError(f"{key} = {config[key]}: a mixture-of-experts model, which this planner does not model "
                             f"(lesson 14 introduces expert parallelism)")
    shape = {}
    for field, keys in FIELDS.items():
        key = next((k for k in keys if config.get(k) is not None), None)
        if key is None:
            raise ValueError(f"no {' or '.join(keys)}: a decoder's config.json gives its {field} there")
        shape[field] = _positive_int(config, key, LARGEST[field])
    kv_heads = _positive_int(config, "num_key_value_heads", LARGEST["kv_heads"]) \
        if config.get("num_key_value_heads") is not None else shape["heads"]
    ffn_key = next((k for k in ("intermediate_size", "n_inner") if config.get(k) is not None), None)
    ffn = _positive_int(config, ffn_key, LARGEST["ffn"]) if ffn_key else 4 * shape["hidden"]
    if shape["hidden"] % shape["heads"]:
        raise ValueError(f"hidden size {shape['hidden']} is not divisible by {shape['heads']} attention heads")
    head_dim = config.get("head_dim")
    if head_dim is not None and head_dim != shape["hidden"] // shape["heads"]:
        raise ValueError(f"head_dim = {head_dim}, not hidden_size / num_attention_heads = "
                         f"{shape['hidden'] // shape['heads']}: heads of another width are not modelled")
    if shape["heads"] % kv_heads:
        raise ValueError(f"num_key_value_heads = {kv_heads} does not divide num_attention_heads = {shape['heads']}")
    gpt2_style = "n_layer" in config or "n_positions" in config
    activation = str(config.get("hidden_act", config.get("activation_function", "gelu"))).lower()
    rms = "rms_norm_eps" in config
    bias = _true_or_false(config, "attention_bias" if "attention_bias" in config else "mlp_bias", False) \
        if not gpt2_style else True
    return Transformer(name, ffn=ffn, kv_heads=kv_heads,
                       ffn_kind="swiglu" if activation in ("silu", "swish") and not gpt2_style else "gelu",
                       norm="rmsnorm" if rms else "layernorm", bias=bias,
                       position="learned" if gpt2_style else "rope",
                       tied_embeddings=_true_or_false(config, "tie_word_embeddings", True),
                       dropout=any(_number(config, key, default=0) > 0 for key in DROPOUT_KEYS), **shape)


def _positive_int(config: dict, key: str, largest: int) -> int:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} = {value!r}: a positive integer is needed")
    if value > largest:
        raise ValueError(f"{key} = {size_text(value)}: more than the planner models (at most {largest:,})")
    return value


def _true_or_false(config: dict, key: str, default: bool) -> bool:
    # the string "false" is truthy: reading it as True would plan another model
    return _optional(config, key, default, (bool,), "true or false is needed (JSON's, without quotes)")


def _number(config: dict, key: str, default: float) -> float:
    return _optional(config, key, default, (int, float), "a number is needed")


def _optional(config: dict, key: str, default, kinds: tuple, needed: str):
    """config[key] if it is one of `kinds` (a bool counts only where bool is named), `default` if absent or null."""
    value = config.get(key, default)
    if value is None:
        return default
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise ValueError(f"{key} = {value!r}: {needed}")
    return value

"""A model of your own: a Hugging Face `config.json`, already read into a dict, as a planner `Transformer`.

Hugging Face Transformers stores a model's shape in `config.json`. Decoder-only models of the
Llama family (Llama, Mistral, Mixtral, Qwen2/Qwen3 and their MoE versions, DeepSeekMoE) name it
the same way, GPT-2 its own way:
    layers        num_hidden_layers              (GPT-2: n_layer)
    hidden        hidden_size                    (n_embd)
    heads         num_attention_heads            (n_head)
    kv_heads      num_key_value_heads            (absent: = heads, multi-head attention)
    head_size     head_dim                       (absent or = hidden / heads: hidden / heads; Qwen3-30B-A3B: 128)
    ffn           intermediate_size              (n_inner; absent or null: 4 x hidden)
    vocab         vocab_size
    seq_len       max_position_embeddings        (n_positions), unless the caller gives the training length
    tied          tie_word_embeddings            (absent: True, PretrainedConfig's default)
    FFN kind      hidden_act "silu"/"swish" with a gate (Llama's gate_proj): SwiGLU; else GeLU
    norm          rms_norm_eps present: RMSNorm; else LayerNorm
    biases        attention_bias and mlp_bias (absent: none); GPT-2: biases; Qwen2: on Q, K, V only
    qk_norm       Qwen3: an RMSNorm on every query and key head (its code has it; its config does not say)
    positions     GPT-2 (n_positions): a learned table; the Llama family: RoPE (no parameters)
    dropout       any of attention_dropout, hidden_dropout, resid_pdrop, attn_pdrop, embd_pdrop > 0
Mixture of experts (experts.MoE, lesson 14):
    experts       num_local_experts (Mixtral), num_experts (Qwen-MoE), n_routed_experts (DeepSeek)
    top_k         num_experts_per_tok
    expert_ffn    moe_intermediate_size (Mixtral: intermediate_size, its experts are full-size FFNs)
    shared        n_shared_experts (DeepSeek); shared_expert_intermediate_size / moe_intermediate_size (Qwen-MoE:
                  one shared expert k times as wide is k experts' parameters and FLOPs)
    dense_layers  first_k_dense_replace (DeepSeek); mlp_only_layers when it lists the first layers (Qwen-MoE);
                  a dense layer's FFN is intermediate_size wide
Qwen-MoE's hidden x 1 gate on its shared expert (hidden parameters a layer, 2,048 in Qwen1.5-MoE-A2.7B's
14.3B) is left out. Refused, one line naming the key: what the planner cannot express (multi-head latent
attention's kv_lora_rank and q_lora_rank, DeepSeek-V3's multi-token prediction, MoE layers that are not
the last ones, a sliding window shorter than the planned sequence), a model_type of another family (its
code may build what its config does not say), and any key the planner does not read whose name says it
may shape the model (SHAPE_WORDS) and whose value is set.
Reading the file is I/O and lives in the lab (`ddp_lab.plan.model_files.read_hf_config`).

Introduced in notebooks/13-plan-your-training-run.ipynb (experts: notebooks/14-mixture-of-experts.ipynb).
"""

from __future__ import annotations

from ddp_lab.course.plan.experts import MoE
from ddp_lab.course.plan.model import LARGEST, Transformer, size_text

FIELDS = {   # planner field: the config.json keys that may hold it, first found wins
    "layers": ("num_hidden_layers", "n_layer"),
    "hidden": ("hidden_size", "n_embd"),
    "heads": ("num_attention_heads", "n_head"),
    "vocab": ("vocab_size",),
    "seq_len": ("max_position_embeddings", "n_positions"),
}
# model_type: what the family's modelling code builds that its config.json does not say
FAMILIES = {"llama": {}, "mistral": {}, "mixtral": {}, "deepseek": {}, "gpt2": {},
            "qwen2": {"qkv_bias": True}, "qwen2_moe": {"qkv_bias": True},
            "qwen3": {"qk_norm": True}, "qwen3_moe": {"qk_norm": True}}
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
DROPOUT_KEYS = ("attention_dropout", "hidden_dropout", "resid_pdrop", "attn_pdrop", "embd_pdrop")
NOT_MODELLED = {   # key: what it means, refused when set (not null, 0 or false)
    "kv_lora_rank": "multi-head latent attention (DeepSeek-V2/V3: keys and values through a low-rank "
                    "projection), which the planner does not model (it models multi-head and grouped-query attention)",
    "q_lora_rank": "multi-head latent attention's low-rank queries (DeepSeek-V2/V3), which the planner does not model",
    "num_nextn_predict_layers": "multi-token prediction modules (DeepSeek-V3) beyond the decoder's layers, "
                                "which the planner does not model",
}
# Keys read above, or known to change neither parameters nor FLOPs (ids, initialisation, RoPE's base and
# scaling, router loss weights, routing normalisation, inference switches).
KNOWN = {*(k for keys in FIELDS.values() for k in keys), *EXPERT_KEYS, *DROPOUT_KEYS, *NOT_MODELLED,
         "num_key_value_heads", "head_dim", "intermediate_size", "n_inner", "tie_word_embeddings", "hidden_act",
         "activation_function", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "attention_bias", "mlp_bias",
         "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts", "shared_expert_intermediate_size",
         "first_k_dense_replace", "mlp_only_layers", "decoder_sparse_step", "moe_layer_freq", "sliding_window",
         "use_sliding_window", "max_window_layers", "layer_types", "model_type", "architectures", "n_ctx",
         "rope_theta", "rope_scaling", "rope_parameters", "original_max_position_embeddings", "pretraining_tp",
         "initializer_range", "use_cache", "torch_dtype", "dtype", "transformers_version", "use_mrope",
         "output_router_logits", "router_aux_loss_coef", "aux_loss_alpha", "seq_aux", "norm_topk_prob",
         "scoring_func", "topk_method", "n_group", "topk_group", "routed_scaling_factor", "ep_size",
         "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
         "bos_token_id", "eos_token_id", "pad_token_id", "chunk_size_feed_forward", "no_repeat_ngram_size",
         "num_beams", "num_beam_groups", "num_return_sequences", "encoder_no_repeat_ngram_size", "num_labels",
         "scale_attn_weights", "reorder_and_upcast_attn", "scale_attn_by_inverse_layer_idx"}
# Words in a key's name that say it may shape the model: such a key the planner does not read is refused.
SHAPE_WORDS = ("expert", "lora", "layer", "head", "dim", "size", "num_", "n_", "window", "moe", "sparse", "rank",
               "group", "block", "intermediate", "hidden", "ffn", "mlp", "attn", "attention")


def transformer_from_hf_config(config: dict, name: str = "hf-model", seq_len: int | None = None) -> Transformer:
    """The `Transformer` a Hugging Face config dict describes (mapping in the module docstring).

    `seq_len`: the sequence length to plan; None plans `max_position_embeddings` (the longest the
    model takes, often far longer than the length it was trained at). Raises ValueError naming the
    key that is missing, malformed or not modelled.

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
    family = _family(config)
    shape = {}
    for field, keys in FIELDS.items():
        key = next((k for k in keys if config.get(k) is not None), None)
        if key is None:
            raise ValueError(f"no {' or '.join(keys)}: a decoder's config.json gives its {field} there")
        shape[field] = _positive_int(config, key, LARGEST[field])
    if seq_len is not None:
        shape["seq_len"] = seq_len
    kv_heads = _positive_int(config, "num_key_value_heads", LARGEST["kv_heads"]) \
        if config.get("num_key_value_heads") is not None else shape["heads"]
    ffn_key = next((k for k in ("intermediate_size", "n_inner") if config.get(k) is not None), None)
    ffn = _positive_int(config, ffn_key, LARGEST["ffn"]) if ffn_key else 4 * shape["hidden"]
    head_size = _head_size(config, shape)
    if shape["heads"] % kv_heads:
        raise ValueError(f"num_key_value_heads = {kv_heads} does not divide num_attention_heads = {shape['heads']}")
    _check_attention_span(config, shape["seq_len"])
    gpt2_style = "n_layer" in config or "n_positions" in config
    activation = str(config.get("hidden_act", config.get("activation_function", "gelu"))).lower()
    return Transformer(name, ffn=ffn, kv_heads=kv_heads, head_size=head_size,
                       ffn_kind="swiglu" if activation in ("silu", "swish") and not gpt2_style else "gelu",
                       norm="rmsnorm" if "rms_norm_eps" in config else "layernorm", bias=_bias(config, gpt2_style),
                       position="learned" if gpt2_style else "rope",
                       tied_embeddings=_true_or_false(config, "tie_word_embeddings", True),
                       dropout=any(_number(config, key, default=0) > 0 for key in DROPOUT_KEYS),
                       moe=_experts(config, ffn, shape["layers"]), **FAMILIES.get(family, {}), **shape)


def _family(config: dict) -> str | None:
    """The config's model_type, refused (with what the planner cannot express) unless it is a family read here."""
    for key, meaning in NOT_MODELLED.items():
        if config.get(key) not in (None, 0, False):
            raise ValueError(f"{key} = {config[key]!r}: {meaning}")
    family = config.get("model_type")   # before single keys: removing a key would not make another family readable
    if family is not None and family not in FAMILIES:
        raise ValueError(f"model_type = {family!r}: not a family the planner reads ({', '.join(FAMILIES)}); its "
                         f"code may build what config.json does not say (a gated FFN, biases, extra norms): "
                         f"describe the model with the shape flags")
    for key, value in config.items():
        unset = value is None or value is False or value == 0 or value in ([], {})
        if key not in KNOWN and not unset and any(word in key.lower() for word in SHAPE_WORDS):
            raise ValueError(f"{key} = {value!r}: the planner does not read {key}, and its name says it may change "
                             f"the model; if it changes neither parameters nor FLOPs, remove it from a copy of the "
                             f"file (or describe the model with the shape flags)")
    return family


def _head_size(config: dict, shape: dict) -> int | None:
    """head_dim when it differs from hidden / heads (Qwen3-30B-A3B, gpt-oss), else None (the default width)."""
    head_dim = _positive_int(config, "head_dim", shape["hidden"]) if config.get("head_dim") is not None else None
    if head_dim is None or head_dim * shape["heads"] == shape["hidden"]:
        if shape["hidden"] % shape["heads"]:
            raise ValueError(f"hidden size {shape['hidden']} is not divisible by {shape['heads']} attention heads "
                             f"(and no head_dim says how wide a head is)")
        return None
    return head_dim


def _check_attention_span(config: dict, seq_len: int) -> None:
    """Refuse attention that does not see the whole planned sequence: the planner costs full causal attention."""
    window = config.get("sliding_window")
    if window is not None and config.get("use_sliding_window", True) is not False:
        window = _positive_int(config, "sliding_window", LARGEST["seq_len"])
        if window < seq_len:
            raise ValueError(f"sliding_window = {window:,} is shorter than the {seq_len:,} tokens planned: windowed "
                             f"attention is not modelled; plan --seq-len {window} or less")
    kinds = config.get("layer_types") or []
    windowed = [kind for kind in kinds if kind != "full_attention"]
    if windowed:
        raise ValueError(f"layer_types: {len(windowed)} of {len(kinds)} layers are {windowed[0]!r}, not "
                         f"full_attention: layers that attend to a window are not modelled")


def _experts(config: dict, ffn: int, layers: int) -> MoE | None:
    """The MoE the expert keys describe (module docstring), or None for a dense model."""
    key = next((k for k in EXPERT_KEYS if config.get(k) not in (None, 0, 1)), None)
    if key is None:
        return None
    experts = _positive_int(config, key, 10**6)
    if config.get("num_experts_per_tok") is None:
        raise ValueError(f"{key} = {experts} but no num_experts_per_tok: a mixture-of-experts config says there how "
                         f"many experts each token goes to")
    top_k = _positive_int(config, "num_experts_per_tok", experts)
    expert_ffn = _positive_int(config, "moe_intermediate_size", LARGEST["ffn"]) \
        if config.get("moe_intermediate_size") is not None else ffn
    shared = _whole(config, "n_shared_experts")
    if config.get("shared_expert_intermediate_size"):
        width = _positive_int(config, "shared_expert_intermediate_size", LARGEST["ffn"])
        if width % expert_ffn:
            raise ValueError(f"shared_expert_intermediate_size = {width} is not a multiple of the experts' "
                             f"{expert_ffn}: a shared expert of its own width is not modelled")
        shared += width // expert_ffn
    for step in ("decoder_sparse_step", "moe_layer_freq"):
        if config.get(step) not in (None, 1):
            raise ValueError(f"{step} = {config[step]!r}: MoE layers every {config[step]} layers are not modelled "
                             f"(the planner takes every layer after the first dense ones as a MoE layer)")
    dense = _whole(config, "first_k_dense_replace")
    only = config.get("mlp_only_layers") or []
    if only:
        if not isinstance(only, list) or sorted(only) != list(range(len(only))) or dense:
            raise ValueError(f"mlp_only_layers = {only!r}: dense layers other than the first ones are not "
                             f"modelled (the planner takes the first k layers as dense: [0, 1, ..., k-1])")
        dense = len(only)
    if dense >= layers:
        raise ValueError(f"{dense} dense layers of {layers}: no layer is left for the experts")
    return MoE(experts, top_k, expert_ffn, shared_experts=shared, dense_layers=dense)


def _bias(config: dict, gpt2_style: bool) -> bool:
    """Biases on every Linear: GPT-2's; the Llama family's attention_bias and mlp_bias (both or neither)."""
    if gpt2_style:
        return True
    attention, mlp = (_true_or_false(config, key, False) for key in ("attention_bias", "mlp_bias"))
    if attention != mlp and "mlp_bias" in config:
        raise ValueError(f"attention_bias = {str(attention).lower()} and mlp_bias = {str(mlp).lower()}: biases on "
                         f"only one of them are not modelled")
    return attention


def _positive_int(config: dict, key: str, largest: int) -> int:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} = {value!r}: a positive integer is needed")
    if value > largest:
        raise ValueError(f"{key} = {size_text(value)}: more than the planner models (at most {largest:,})")
    return value


def _whole(config: dict, key: str) -> int:
    """config[key] as an integer >= 0 (0 if absent or null)."""
    value = config.get(key) or 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key} = {value!r}: an integer >= 0 is needed")
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

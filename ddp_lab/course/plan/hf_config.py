"""A model of your own: a Hugging Face `config.json`, already read into a dict, as a planner `Transformer`.

Hugging Face Transformers stores a model's shape in `config.json`. Decoder-only models of the
Llama family (Llama, Mistral, Mixtral, Qwen2/Qwen3 and their MoE versions, DeepSeekMoE, gpt-oss) name it
the same way, GPT-2 its own way:
    family        model_type; absent: GPT-2 if the shape has GPT-2's names (n_layer, n_embd, ...), else Llama
    layers        num_hidden_layers              (GPT-2: n_layer)
    hidden        hidden_size                    (n_embd)
    heads         num_attention_heads            (n_head)
    kv_heads      num_key_value_heads            (absent: = heads, multi-head attention)
    head_size     head_dim                       (absent or = hidden / heads: hidden / heads; Qwen3-30B-A3B: 128)
    ffn           intermediate_size              (n_inner; absent or null: 4 x hidden)
    vocab         vocab_size
    seq_len       the caller's training length; without one max_position_embeddings (n_positions; older Llama
                  files: max_sequence_length)
    tied          tie_word_embeddings            (absent: the family's config class default, TIED_BY_DEFAULT)
    FFN kind      the family's code: the Llama family's MLP is gated (gate_proj, up_proj, down_proj: 3 matrices,
                  "swiglu") whatever hidden_act names; GPT-2's has 2 ("gelu")
    norm          the family's code: RMSNorm (Llama family), LayerNorm (GPT-2)
    biases        attention_bias and mlp_bias (absent: none); GPT-2: biases; Qwen2: on Q, K, V only
    qk_norm       Qwen3: an RMSNorm on every query and key head (its code has it; its config does not say)
    positions     the family's code: GPT-2 a learned table; the Llama family RoPE (no parameters)
    dropout       any of attention_dropout, hidden_dropout, resid_pdrop, attn_pdrop, embd_pdrop > 0
    window        sliding_window, unless use_sliding_window is false (in the Qwen families unless it is true: their
                  config classes' default; sliding_window.py); the layers it windows:
                  layer_types' sliding_attention entries (full_attention the others), else those from
                  max_window_layers on (Qwen families), else every layer (Mistral)
Two keys for one quantity (n_layer and num_hidden_layers) must agree; a layer_types list has one entry a layer.
Mixture of experts (experts.MoE, lesson 14):
    experts       num_local_experts (Mixtral), num_experts (Qwen-MoE), n_routed_experts (DeepSeek)
    top_k         num_experts_per_tok            (gpt-oss: experts_per_token too; the two must agree)
    expert_ffn    moe_intermediate_size, required for Qwen-MoE and DeepSeek (Mixtral: intermediate_size, its experts
                  are full-size FFNs)
    shared        n_shared_experts (DeepSeek); shared_expert_intermediate_size / moe_intermediate_size (Qwen-MoE:
                  one shared expert k times as wide is k experts' parameters and FLOPs, and its code's hidden x 1
                  gate on that expert's output is MoE.shared_gate)
    dense_layers  first_k_dense_replace (DeepSeek); mlp_only_layers when it lists the first layers (Qwen-MoE);
                  a dense layer's FFN is intermediate_size wide
Multi-head latent attention (latent_attention.LatentAttention; model_type deepseek_v2, deepseek_v3, kimi_k2):
    kv_rank       kv_lora_rank
    q_rank        q_lora_rank                    (null: queries at full rank, DeepSeek-V2-Lite)
    head widths   qk_nope_head_dim, qk_rope_head_dim, v_head_dim (all three required); head_dim, which these
                  families' code sets to qk_rope_head_dim for RoPE, is not a head's width and is not read
    mtp_layers    num_nextn_predict_layers       (DeepSeek-V3's multi-token-prediction modules, multi_token.py; a
                  copy of the file without the key plans training without them)
Refused, one line naming the key: what the planner cannot express (latent attention in a family whose code does
not build it, MoE layers that are not
the last ones, layer_types other than full and sliding attention, PretrainedConfig's cross-attention and
pruned heads), a model_type of another family (its code may build what its config does not say), expert keys in
a config of a dense family (LlamaConfig keeps num_experts and builds the dense model), and any
key the planner does not read whose name says it may shape the model (SHAPE_WORDS) and whose value is set;
PretrainedConfig's own attributes (PRETRAINED_CONFIG_KEYS: outputs, names, dtypes, token ids, kernels,
generation defaults) are not read and never refused for their names.
Reading the file is I/O and lives in the lab (`ddp_lab.plan.model_files.read_hf_config`).

Introduced in notebooks/13-plan-your-training-run.ipynb (experts: notebooks/14-mixture-of-experts.ipynb).
"""

from __future__ import annotations

from ddp_lab.course.plan.experts import MoE
from ddp_lab.course.plan.latent_attention import LatentAttention
from ddp_lab.course.plan.model import LARGEST, Transformer, size_text

FIELDS = {   # planner field: the config.json keys that may hold it; two that are both set must agree
    "layers": ("num_hidden_layers", "n_layer"),
    "hidden": ("hidden_size", "n_embd"),
    "heads": ("num_attention_heads", "n_head"),
    "vocab": ("vocab_size",),
    "seq_len": ("max_position_embeddings", "n_positions", "max_sequence_length"),   # only without the caller's
}
FFN_KEYS = ("intermediate_size", "n_inner")
GPT2_KEYS = ("n_layer", "n_embd", "n_head", "n_positions", "n_inner")   # GPT-2's names for its shape
# model_type: what the family's modelling code builds that its config.json does not say. The Llama family's MLP
# (LlamaMLP, MistralMLP, Qwen2MLP, Qwen3MLP, Mixtral's and the MoE families' experts) always has gate_proj,
# up_proj and down_proj: 3 matrices, whatever activation hidden_act names; GPT2MLP has c_fc and c_proj.
LLAMA_CODE = {"ffn_kind": "swiglu", "norm": "rmsnorm", "position": "rope"}
FAMILIES = {"llama": LLAMA_CODE, "mistral": LLAMA_CODE, "mixtral": LLAMA_CODE, "deepseek": LLAMA_CODE,
            "deepseek_v2": LLAMA_CODE, "deepseek_v3": LLAMA_CODE, "kimi_k2": LLAMA_CODE,
            "gpt2": {"ffn_kind": "gelu", "norm": "layernorm", "position": "learned"},   # and biases everywhere
            "qwen2": {**LLAMA_CODE, "qkv_bias": True}, "qwen2_moe": {**LLAMA_CODE, "qkv_bias": True},
            "qwen3": {**LLAMA_CODE, "qk_norm": True}, "qwen3_moe": {**LLAMA_CODE, "qk_norm": True},
            "gpt_oss": LLAMA_CODE}
# model_type: tie_word_embeddings when config.json leaves it out, the default of the family's config class.
# transformers' LlamaConfig, MistralConfig, MixtralConfig, Qwen2Config, Qwen3Config, Qwen2MoeConfig,
# Qwen3MoeConfig, DeepSeek's DeepseekConfig (configuration_deepseek.py, with its checkpoints), DeepseekV2Config,
# DeepseekV3Config and Kimi K2's (a DeepseekV3Config copy) set False;
# GPT2Config sets none, so PretrainedConfig's True holds.
TIED_BY_DEFAULT = {"llama": False, "mistral": False, "mixtral": False, "deepseek": False, "deepseek_v2": False,
                   "deepseek_v3": False, "kimi_k2": False, "gpt2": True,
                   "qwen2": False, "qwen2_moe": False, "qwen3": False, "qwen3_moe": False, "gpt_oss": False}
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token")   # gpt-oss's files give both
DENSE_FAMILIES = {"llama", "mistral", "qwen2", "qwen3", "gpt2"}   # model_types whose code has no experts
# model_types whose experts are moe_intermediate_size wide (Mixtral's are intermediate_size wide, full FFNs)
EXPERT_WIDTH_FAMILIES = {"deepseek", "deepseek_v2", "deepseek_v3", "kimi_k2", "qwen2_moe", "qwen3_moe"}
# model_types whose attention is multi-head latent attention, and the config.json keys of its sizes
LATENT_FAMILIES = {"deepseek_v2", "deepseek_v3", "kimi_k2"}
LATENT_KEYS = {"kv_rank": "kv_lora_rank", "q_rank": "q_lora_rank", "nope_dim": "qk_nope_head_dim",
               "rope_dim": "qk_rope_head_dim", "v_dim": "v_head_dim"}
# layer_types' kinds the planner models (sliding_window.py), and the families whose code windows the layers from
# max_window_layers on when layer_types is absent (Qwen2's and Qwen3's decoder layers)
ATTENTION_KINDS = ("full_attention", "sliding_attention")
WINDOW_FROM_LAYER = {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"}
WINDOW_FAMILIES = {"mistral", "mixtral", "gpt_oss", *WINDOW_FROM_LAYER}   # model_types whose code reads sliding_window
DROPOUT_KEYS = ("attention_dropout", "hidden_dropout", "resid_pdrop", "attn_pdrop", "embd_pdrop")
NOT_MODELLED = {   # key: what it means, refused when set (not null, 0, false or empty)
    "add_cross_attention": "cross-attention on an encoder's output in every block (GPT-2's code adds it), "
                           "which the planner does not model",
    "pruned_heads": "attention heads removed from some layers, which the planner does not model",
}
# PretrainedConfig's own attributes (transformers/configuration_utils.py: its __init__ in 4.x, its fields and
# __post_init__ in 5.x), which save_pretrained writes into config.json: what the forward pass returns, names and
# versions, dtypes, token ids, label maps for classification heads, the attention and experts kernels chosen,
# encoder-decoder switches a decoder-only family's code does not read, and generation defaults. None changes
# the parameters or FLOPs of a decoder of the families read here (cross-attention and pruned heads, which do,
# are in NOT_MODELLED).
PRETRAINED_CONFIG_KEYS = {
    "_name_or_path", "name_or_path", "_commit_hash", "transformers_version", "architectures", "auto_map",
    "return_dict", "output_hidden_states", "output_attentions", "torchscript", "torch_dtype", "dtype",
    "use_bfloat16", "tf_legacy_loss", "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder",
    "tie_encoder_decoder", "cross_attention_hidden_size", "finetuning_task", "id2label", "label2id", "num_labels",
    "problem_type", "tokenizer_class", "prefix", "task_specific_params", "bos_token_id", "eos_token_id",
    "pad_token_id", "sep_token_id", "decoder_start_token_id", "attn_implementation", "_attn_implementation",
    "_attn_implementation_internal", "_attn_implementation_autoset", "experts_implementation",
    "_experts_implementation", "_experts_implementation_internal",
    # generation defaults (GenerationConfig's, kept in config.json by older versions)
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
}
# Keys read above, PretrainedConfig's, or the families' own known to change neither parameters nor FLOPs
# (initialisation, RoPE's base and scaling, router loss weights, routing normalisation, inference switches).
KNOWN = {*(k for keys in FIELDS.values() for k in keys), *FFN_KEYS, *EXPERT_KEYS, *DROPOUT_KEYS, *NOT_MODELLED,
         *LATENT_KEYS.values(), "num_nextn_predict_layers",
         *PRETRAINED_CONFIG_KEYS,
         "num_key_value_heads", "head_dim", "tie_word_embeddings", "hidden_act",
         "activation_function", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "attention_bias", "mlp_bias",
         *TOP_K_KEYS, "moe_intermediate_size", "n_shared_experts", "shared_expert_intermediate_size",
         "first_k_dense_replace", "mlp_only_layers", "decoder_sparse_step", "moe_layer_freq", "sliding_window",
         "use_sliding_window", "max_window_layers", "layer_types", "model_type", "n_ctx",
         "rope_theta", "rope_scaling", "rope_parameters", "original_max_position_embeddings", "pretraining_tp",
         "initializer_range", "use_cache", "use_mrope",
         "quantization_config",     # how a checkpoint's weights are stored; a plan's precision is its own (--precision)
         "output_router_logits", "router_aux_loss_coef", "aux_loss_alpha", "seq_aux", "norm_topk_prob",
         "scoring_func", "topk_method", "n_group", "topk_group", "routed_scaling_factor", "ep_size",
         "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
         "scale_attn_weights", "reorder_and_upcast_attn", "scale_attn_by_inverse_layer_idx"}
# Words in a key's name that say it may shape the model: such a key the planner does not read is refused.
SHAPE_WORDS = ("expert", "lora", "layer", "head", "dim", "size", "num_", "n_", "window", "moe", "sparse", "rank",
               "group", "block", "intermediate", "hidden", "ffn", "mlp", "attn", "attention")


def transformer_from_hf_config(config: dict, name: str = "hf-model", seq_len: int | None = None) -> Transformer:
    """The `Transformer` a Hugging Face config dict describes (mapping in the module docstring).

    `seq_len`: the sequence length to plan, which is then all the config needs to say about length (but a model
    with learned positions, GPT-2's, is refused past its table's n_positions; RoPE has no table);
    None plans `max_position_embeddings` (or n_positions, max_sequence_length: the longest the model
    takes, often far longer than the length it was trained at) and refuses a config without one.
    Raises ValueError naming the key that is missing, malformed, contradicted or not modelled.

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
        if field == "seq_len" and seq_len is not None:   # the training length given: the position limit is read
            learned = FAMILIES[family]["position"] == "learned"   # only where it bounds a table of positions
            found = _one_value(config, keys, field, LARGEST[field]) if learned else None
            if found is not None and seq_len > found:
                raise ValueError(f"{position_key(config)} = {found:,}: the model's learned position table ends "
                                 f"there, so it cannot take {seq_len:,}-token sequences; plan --seq-len {found} or "
                                 f"less")
            shape[field] = seq_len
            continue
        found = _one_value(config, keys, field, LARGEST[field])
        if found is None:
            if field == "seq_len":
                raise ValueError(f"no {', '.join(keys[:-1])} or {keys[-1]}: the config does not say how long a "
                                 f"sequence the model takes; pass the length you will train with --seq-len (seq_len= "
                                 f"from Python)")
            raise ValueError(f"no {' or '.join(keys)}: a decoder's config.json gives its {field} there")
        shape[field] = found
    kv_heads = _positive_int(config, "num_key_value_heads", LARGEST["kv_heads"]) \
        if config.get("num_key_value_heads") is not None else shape["heads"]
    ffn = _one_value(config, FFN_KEYS, "ffn", LARGEST["ffn"]) or 4 * shape["hidden"]
    latent = _latent(config, family)
    head_size = None if latent else _head_size(config, shape)
    if shape["heads"] % kv_heads:
        raise ValueError(f"num_key_value_heads = {kv_heads} does not divide num_attention_heads = {shape['heads']}")
    window, windowed_layers = _window(config, family, shape["layers"])
    return Transformer(name, window=window, windowed_layers=windowed_layers, ffn=ffn, kv_heads=kv_heads,
                       head_size=head_size,
                       bias=True if family == "gpt2" else _bias(config),
                       tied_embeddings=_true_or_false(config, "tie_word_embeddings", TIED_BY_DEFAULT[family]),
                       dropout=any(_number(config, key, default=0) > 0 for key in DROPOUT_KEYS),
                       moe=_experts(config, ffn, shape["layers"], family), latent=latent,
                       mtp_layers=_prediction_modules(config, family), **FAMILIES[family], **shape)


def _family(config: dict) -> str:
    """The config's family: its model_type, refused (with what the planner cannot express) unless it is a family
    read here; with no model_type, "gpt2" if it names its shape with GPT-2's keys, else "llama"."""
    for key, meaning in NOT_MODELLED.items():
        if _set(config.get(key)):
            raise ValueError(f"{key} = {config[key]!r}: {meaning}; the planner cannot plan this model")
    family = config.get("model_type")   # before single keys: removing a key would not make another family readable
    if family is not None and (not isinstance(family, str) or family not in FAMILIES):
        raise ValueError(f"model_type = {family!r}: not a family the planner reads ({', '.join(FAMILIES)}); its "
                         f"code may build what config.json does not say (a gated FFN, biases, extra norms): if its "
                         f"blocks are what the shape flags build (a gated FFN, RMSNorm, RoPE, no biases, untied "
                         f"embeddings, no experts, full attention), describe the model with them; if not, the planner "
                         f"does not model it")
    for key, value in config.items():
        if key not in KNOWN and _set(value) and any(word in key.lower() for word in SHAPE_WORDS):
            raise ValueError(f"{key} = {value!r}: the planner does not read {key}, and its name says it may change "
                             f"the model; if it changes neither parameters nor FLOPs, remove it from a copy of the "
                             f"file (or describe the model with the shape flags)")
    if family is None:
        family = "gpt2" if any(config.get(key) is not None for key in GPT2_KEYS) else "llama"
    return family


def position_key(config: dict) -> str | None:
    """The key a config gives its longest sequence in: the first of FIELDS["seq_len"] it sets (None if none), where
    a plan made without the caller's seq_len takes its length.

    Example:
        >>> position_key({"n_positions": 1024, "n_layer": 12}), position_key({"num_hidden_layers": 2})
        ('n_positions', None)
    """
    return next((key for key in FIELDS["seq_len"] if isinstance(config, dict) and config.get(key) is not None), None)


def _one_value(config: dict, keys: tuple, field: str, largest: int) -> int | None:
    """The positive integer the first of `keys` set holds (None if none is); two set to different values: refused."""
    values = {key: _positive_int(config, key, largest) for key in keys if config.get(key) is not None}
    if len(set(values.values())) > 1:
        said = " and ".join(f"{key} = {value}" for key, value in values.items())
        raise ValueError(f"{said} both give the {field} and disagree: keep the right one in a copy of the file")
    return next(iter(values.values()), None)


def _head_size(config: dict, shape: dict) -> int | None:
    """head_dim when it differs from hidden / heads (Qwen3-30B-A3B, gpt-oss), else None (the default width)."""
    head_dim = _positive_int(config, "head_dim", shape["hidden"]) if config.get("head_dim") is not None else None
    if head_dim is None or head_dim * shape["heads"] == shape["hidden"]:
        if shape["hidden"] % shape["heads"]:
            raise ValueError(f"hidden size {shape['hidden']} is not divisible by {shape['heads']} attention heads "
                             f"(and no head_dim says how wide a head is)")
        return None
    return head_dim


def _latent(config: dict, family: str) -> LatentAttention | None:
    """The LatentAttention the latent keys describe (module docstring), or None without kv_lora_rank; refused in a
    family whose code builds no latent attention, or without one of the head widths."""
    if not _set(config.get("kv_lora_rank")):
        if _set(config.get("q_lora_rank")):
            raise ValueError(f"q_lora_rank = {config['q_lora_rank']!r} without kv_lora_rank: latent attention needs "
                             f"both (q_lora_rank null: queries at full rank)")
        return None
    _latent_family_only(config, "kv_lora_rank", family, "multi-head latent attention")
    missing = [key for key in LATENT_KEYS.values() if key != "q_lora_rank" and config.get(key) is None]
    if missing:
        raise ValueError(f"kv_lora_rank = {config['kv_lora_rank']!r} but no {' or '.join(missing)}: a latent-attention "
                         f"config gives its heads' widths there")
    sizes = {field: _positive_int(config, key, LARGEST["hidden"]) for field, key in LATENT_KEYS.items()
             if field not in ("q_rank", "rope_dim")}
    q_rank = _positive_int(config, "q_lora_rank", LARGEST["hidden"]) if _set(config.get("q_lora_rank")) else None
    return LatentAttention(q_rank=q_rank, rope_dim=_whole(config, "qk_rope_head_dim"), **sizes)


def _prediction_modules(config: dict, family: str) -> int:
    """num_nextn_predict_layers (0 if absent): multi-token-prediction modules, which only the latent-attention
    families' code builds (refused elsewhere, where the key would be read but never built)."""
    modules = _whole(config, "num_nextn_predict_layers")
    if modules:
        _latent_family_only(config, "num_nextn_predict_layers", family, "multi-token prediction")
    return modules


def _latent_family_only(config: dict, key: str, family: str, what: str) -> None:
    """Refuse `key` (set) in a config whose family's code does not build `what` (only LATENT_FAMILIES' does)."""
    if family not in LATENT_FAMILIES:
        raise ValueError(f"{key} = {config[key]!r} in a model_type = {family!r} config: {what} is built by the "
                         f"{', '.join(sorted(LATENT_FAMILIES))} families' code; give one of those model_types, or "
                         f"remove the key from a copy of the file")


def _window(config: dict, family: str, layers: int) -> tuple[int | None, int | None]:
    """(window, windowed layers) for Transformer (sliding_window.py), (None, None) with full attention everywhere.

    sliding_window gives the window unless use_sliding_window is false (Qwen2's files carry one they do not use; in
    the Qwen families, whose config classes default it to false, unless it is true);
    layer_types says which layers use it (sliding_attention; full_attention the others), else max_window_layers
    (the Qwen families: the layers from that index on) or every layer (Mistral). Another attention kind in
    layer_types (chunked, linear) is refused, as a sliding_attention layer without a window and a window in a family
    whose code reads none (WINDOW_FAMILIES).
    """
    window = config.get("sliding_window")
    if _set(window) and family not in WINDOW_FAMILIES:
        raise ValueError(f"sliding_window = {window!r} in a model_type = {family!r} config: the planner reads windows in "
                         f"the {', '.join(sorted(WINDOW_FAMILIES))} families, whose code uses them; remove the key from "
                         f"a copy of the file, or give one of those model_types")
    if not _set(window) or not _true_or_false(config, "use_sliding_window", family not in WINDOW_FROM_LAYER):
        window = None
    else:
        window = _positive_int(config, "sliding_window", LARGEST["seq_len"])
    kinds = config.get("layer_types")
    if _set(kinds):   # null or empty: unset, as every other key
        if not isinstance(kinds, list) or len(kinds) != layers:
            count = f"{len(kinds)} entries" if isinstance(kinds, list) else repr(kinds)
            raise ValueError(f"layer_types = {count} for {layers} layers: it gives one attention kind a layer; "
                             f"correct it or remove it from a copy of the file")
        other = [kind for kind in kinds if kind not in ATTENTION_KINDS]
        if other:
            raise ValueError(f"layer_types: {len(other)} of {len(kinds)} layers are {other[0]!r}: the planner models "
                             f"{' and '.join(ATTENTION_KINDS)} layers")
        count = kinds.count("sliding_attention")
        if count and window is None:
            raise ValueError(f"layer_types: {count} layers are 'sliding_attention' but no sliding_window gives the "
                             f"window (or use_sliding_window is false): give it in a copy of the file")
        return (window, count) if count else (None, None)
    if window is None:
        return None, None
    first = config.get("max_window_layers")
    if family in WINDOW_FROM_LAYER and first is not None:
        count = layers - min(_whole(config, "max_window_layers"), layers)
        return (window, count) if count else (None, None)
    return window, None


def _experts(config: dict, ffn: int, layers: int, family: str = "mixtral") -> MoE | None:
    """The MoE the expert keys describe (module docstring), or None for a dense model; expert keys in a config of a
    dense family (DENSE_FAMILIES), whose code never reads them, are refused."""
    key = next((k for k in EXPERT_KEYS if config.get(k) not in (None, 0, 1)), None)
    if key is None:
        return None
    if family in DENSE_FAMILIES and config.get("model_type") is not None:
        moe_families = ", ".join(sorted(set(FAMILIES) - DENSE_FAMILIES))
        raise ValueError(f"{key} = {config[key]!r} in a model_type = {family!r} config: that family's code builds a "
                         f"dense model and never reads {key}; remove it from a copy of the file, or give the "
                         f"mixture-of-experts family's model_type ({moe_families})")
    experts = _positive_int(config, key, 10**6)
    top_k = _one_value(config, TOP_K_KEYS, "experts per token", experts)
    if top_k is None:
        raise ValueError(f"{key} = {experts} but no num_experts_per_tok: a mixture-of-experts config says there how "
                         f"many experts each token goes to")
    if config.get("moe_intermediate_size") is None and family in EXPERT_WIDTH_FAMILIES:
        raise ValueError(f"model_type = {family!r} takes its experts' width from moe_intermediate_size, which this "
                         f"file does not give (that family's code then uses a default of its own, not "
                         f"intermediate_size = {ffn}): add moe_intermediate_size to a copy of the file")
    expert_ffn = _positive_int(config, "moe_intermediate_size", LARGEST["ffn"]) \
        if config.get("moe_intermediate_size") is not None else ffn
    shared = _whole(config, "n_shared_experts")
    gated = bool(config.get("shared_expert_intermediate_size"))   # Qwen2MoeSparseMoeBlock's shared_expert_gate
    if gated:
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
    return MoE(experts, top_k, expert_ffn, shared_experts=shared, dense_layers=dense, shared_gate=gated)


def _bias(config: dict) -> bool:
    """Biases on every Linear in the Llama family: attention_bias and mlp_bias (both or neither)."""
    attention, mlp = (_true_or_false(config, key, False) for key in ("attention_bias", "mlp_bias"))
    if attention != mlp and "mlp_bias" in config:
        raise ValueError(f"attention_bias = {str(attention).lower()} and mlp_bias = {str(mlp).lower()}: biases on "
                         f"only one of them are not modelled")
    return attention


def _set(value) -> bool:
    """Whether a config value says something: not null, false, 0 or empty."""
    return not (value is None or value is False or value == 0 or value in ([], {}))


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

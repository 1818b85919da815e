"""Hugging Face config.json files of the common families read as planner models, and what is refused.

tests/hf_configs/<model>/config.json are the models' public config.json files on the Hugging Face
hub (huggingface.co/<org>/<model>/blob/main/config.json), typed in as published:
    meta-llama/Meta-Llama-3-8B, mistralai/Mixtral-8x7B-v0.1, mistralai/Mistral-7B-v0.1, Qwen/Qwen2.5-7B,
    Qwen/Qwen3-8B, Qwen/Qwen3-30B-A3B, Qwen/Qwen1.5-MoE-A2.7B, deepseek-ai/deepseek-moe-16b-base,
    deepseek-ai/DeepSeek-V2-Lite, deepseek-ai/DeepSeek-R1 (DeepSeek-V3's architecture and shape).
gpt-oss's shape (openai/gpt-oss-20b and -120b config.json: the keys that shape the model) is written below (GPT_OSS).
The parameter counts they must give are the publishers' (model cards and papers, cited per case).
Pure Python, in process: no subprocess, no torch.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ddp_lab.course.plan import sliding_window
from ddp_lab.course.plan.experts import MoE
from ddp_lab.course.plan.hf_config import transformer_from_hf_config
from ddp_lab.course.plan.model import Transformer
from ddp_lab.plan import held_aside_runs, held_out_runs
from ddp_lab.plan.cli import main
from ddp_lab.plan.decision import model_text
from ddp_lab.plan.model_files import read_hf_config

CONFIGS = Path(__file__).resolve().parent / "hf_configs"


def config(name: str) -> dict:
    return json.loads((CONFIGS / name / "config.json").read_text())


def model(name: str, **options) -> Transformer:
    return read_hf_config(CONFIGS / name / "config.json", **options)


# (model, published total, published active, source), in billions as published; active None: dense
PUBLISHED = [
    ("Meta-Llama-3-8B", "8.03", None, "Llama 3 model card: 8.03B (safetensors count)"),
    ("Mixtral-8x7B-v0.1", "46.7", "12.9", "Mistral AI, 2023-12-11: 46.7B total, 12.9B per token"),
    ("Qwen2.5-7B", "7.61", None, "Qwen2.5-7B model card: 7.61B"),
    ("Qwen3-8B", "8.2", None, "Qwen3-8B model card: 8.2B"),
    ("Qwen3-30B-A3B", "30.5", "3.3", "Qwen3-30B-A3B model card: 30.5B total, 3.3B activated"),
    ("Qwen1.5-MoE-A2.7B", "14.3", "2.7", "Qwen1.5-MoE-A2.7B model card: 14.3B total, 2.7B activated"),
    ("deepseek-moe-16b-base", "16.4", "2.8", "Dai et al. 2024, arXiv:2401.06066, Sec. 5.1.2: 16.4B, about 2.8B"),
]


def within_last_digit(count: int, published: str) -> bool:
    """`count` within one unit of the published figure's last digit: 3.353B is '3.3' (the card truncates)."""
    unit = 10 ** -len(published.split(".")[1]) if "." in published else 1
    return abs(count / 1e9 - float(published)) < unit


@pytest.mark.parametrize("name, total, active, source", PUBLISHED, ids=[row[0] for row in PUBLISHED])
def test_each_family_reads_to_its_published_parameter_count(name, total, active, source):
    """Total (and active, with experts) parameters to the publisher's last digit."""
    read = model(name)
    assert within_last_digit(read.parameters(), total), (read.parameters(), source)
    assert within_last_digit(read.active_parameters(), active or total), (read.active_parameters(), source)
    assert (read.moe is None) == (active is None)


def test_llama3_8b_and_mixtral_within_one_percent():
    """The check that the file was read right: 8.03B; 46.7B total and 12.9B active."""
    mixtral = model("Mixtral-8x7B-v0.1")
    assert model("Meta-Llama-3-8B").parameters() == pytest.approx(8.03e9, rel=0.01)
    assert mixtral.parameters() == pytest.approx(46.7e9, rel=0.01)
    assert mixtral.active_parameters() == pytest.approx(12.9e9, rel=0.01)


def test_the_presets_are_their_config_files_exactly():
    """The Llama 3 8B, Mixtral, DeepSeekMoE, DeepSeek-V3 and Qwen3-30B-A3B presets cite these config.json files: the
    same shape, the same count. Qwen3-235B-A22B, whose file is not kept here, is Qwen3-30B-A3B's family at the sizes
    its preset's comment gives: the model card's 235B total and 22B activated, and the shape the held-out runs of
    it were planned with."""
    for name, preset in (("Meta-Llama-3-8B", "llama3-8b"), ("Mixtral-8x7B-v0.1", "mixtral-8x7b"),
                         ("deepseek-moe-16b-base", "deepseek-moe-16b")):
        assert model(name).with_(name=preset) == Transformer.preset(preset), name
    v3 = transformer_from_hf_config(config("DeepSeek-R1"), name="deepseek-v3", seq_len=4096)   # its 4K pre-training
    assert v3 == Transformer.preset("deepseek-v3")
    qwen3 = model("Qwen3-30B-A3B", seq_len=4096).with_(name="qwen3-30b-a3b")    # its pre-training length, not 40,960
    assert qwen3 == Transformer.preset("qwen3-30b-a3b")
    large = Transformer.preset("qwen3-235b-a22b")
    assert within_last_digit(large.parameters(), "235") and within_last_digit(large.active_parameters(), "22")
    assert dataclasses.replace(qwen3, name=large.name, layers=94, hidden=4096, heads=64, ffn=12288,
                               moe=dataclasses.replace(qwen3.moe, expert_ffn=1536)) == large
    for shape, preset in ((held_out_runs.QWEN3_30B_A3B, qwen3), (held_aside_runs.QWEN3_235B_A22B, large)):
        written = {**shape, "moe": MoE(**shape["moe"])}
        assert Transformer(**written) == preset, preset.name


def test_what_each_family_builds_beyond_its_keys():
    """Qwen2 has Q, K, V biases; Qwen3 a norm on each query and key head; head_dim when it differs from hidden/heads;
    Qwen-MoE's one wide shared expert as whole experts; DeepSeekMoE's dense first layer."""
    qwen2, qwen3, moe3 = model("Qwen2.5-7B"), model("Qwen3-8B"), model("Qwen3-30B-A3B")
    assert qwen2.qkv_bias and not qwen2.bias and qwen2.parameters() == 7_615_616_512      # 7.61B, to the unit
    assert qwen3.qk_norm and qwen3.head_size is None and qwen3.parameters() == 8_190_735_360
    assert moe3.head_size == 128 and moe3.q_dim == 4096 != moe3.hidden                   # 32 heads of 128 on 2048
    # attention weights: W_q and W_o are 2048 x 4096, W_k and W_v 2048 x 512 (a wrong head width gives 12.6M)
    assert moe3.attention_matmul_parameters() == 2 * 2048 * 4096 + 2 * 2048 * 512
    qwen_moe = model("Qwen1.5-MoE-A2.7B")
    assert qwen_moe.moe.shared_experts == 4 and qwen_moe.moe.shared_gate                      # 5632 / 1408, gated
    ungated = qwen_moe.with_(moe=dataclasses.replace(qwen_moe.moe, shared_gate=False))
    assert qwen_moe.parameters() - ungated.parameters() == 24 * 2048                      # a 2048 x 1 gate a layer
    assert qwen_moe.active_parameters() - ungated.active_parameters() == 24 * 2048
    assert not model("deepseek-moe-16b-base").moe.shared_gate                              # DeepSeekMoE: none
    assert model("deepseek-moe-16b-base").moe.dense_layers == 1
    only = {**config("Qwen3-30B-A3B"), "mlp_only_layers": [0, 1]}
    assert transformer_from_hf_config(only).moe.dense_layers == 2


def test_latent_attention_configs_read_to_their_published_counts():
    """DeepSeek-V2-Lite (arXiv:2405.04434, Appendix B: 15.7B total, 2.4B activated) and DeepSeek-V3's shape, read
    from DeepSeek-R1's config.json (the same architecture and shape; arXiv:2412.19437, Sec. 1: 671B total, 37B
    activated), to the published last digit. DeepSeek counts a token's
    activated parameters without the input embedding table (a lookup, not a multiply); the planner's
    active_parameters keeps it, so it is taken off here. V3's 671B leaves out its multi-token-prediction module:
    with it, Hugging Face's copy holds 685B (DeepSeek-V3 README: "671B of the Main Model weights and 14B of the
    Multi-Token Prediction (MTP) Module weights"), the module's file counting the shared embedding and output
    head again."""
    lite = model("DeepSeek-V2-Lite")
    with_module = transformer_from_hf_config(config("DeepSeek-R1"), seq_len=4096)
    v3 = with_module.with_(mtp_layers=0)
    assert with_module.mtp_layers == 1 and lite.mtp_layers == 0
    assert within_last_digit(with_module.parameters() + 2 * v3.vocab * v3.hidden, "685")
    for read, total, active in ((lite, "15.7", "2.4"), (v3, "671", "37")):
        assert within_last_digit(read.parameters(), total), read.parameters()
        assert within_last_digit(read.active_parameters() - read.vocab * read.hidden, active), read.active_parameters()
    assert lite.latent.q_rank is None and v3.latent.q_rank == 1536 and v3.latent.kv_rank == 512
    # one V3 layer's attention: W_DQ 7168 x 1536, W_UQ 1536 x 128 (128 + 64), W_DKV 7168 x (512 + 64),
    # W_UKV 512 x 128 (128 + 128), W_O 128 x 128 x 7168, and the two latent norms (1536 + 512)
    matrices = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert v3.attention_matmul_parameters() == matrices == 187_105_280
    assert v3.attention_parameters() == matrices + 1536 + 512
    # V2-Lite has no query latent: W_Q is 2048 x 16 x 192
    assert lite.attention_matmul_parameters() == 2048 * 16 * 192 + 2048 * 576 + 512 * 16 * 256 + 16 * 128 * 2048
    # head_dim written by newer transformers versions (= qk_rope_head_dim, for RoPE) is not a head's width
    assert transformer_from_hf_config({**config("DeepSeek-V2-Lite"), "head_dim": 64}).with_(name=lite.name) == lite
    assert "latent attention (kv rank 512, q rank 1536)" in model_text(v3)


def test_the_training_length_replaces_max_position_embeddings():
    assert model("Qwen2.5-7B").seq_len == 131072
    assert model("Qwen2.5-7B", seq_len=8192).seq_len == 8192
    # Mistral 7B's 4,096-token window on every layer: at its 32K maximum the layers attend to the window
    assert model("Mistral-7B-v0.1", seq_len=4096).parameters() == pytest.approx(7.24e9, rel=0.01)   # model card: 7.24B
    assert sliding_window.windowed(model("Mistral-7B-v0.1")) == 32


REFUSED = [   # (config, the words the one line must hold)
    ({**config("Meta-Llama-3-8B"), "num_nextn_predict_layers": 1}, ["num_nextn_predict_layers = 1",
                                                                     "model_type = 'llama'", "multi-token"]),
    ({**config("Meta-Llama-3-8B"), "kv_lora_rank": 512}, ["kv_lora_rank = 512", "model_type = 'llama'",
                                                          "latent attention is built by"]),
    ({key: value for key, value in config("DeepSeek-V2-Lite").items() if key != "v_head_dim"},
     ["kv_lora_rank = 512", "no v_head_dim"]),
    ({**config("DeepSeek-V2-Lite"), "kv_lora_rank": None, "q_lora_rank": 1536}, ["q_lora_rank = 1536 without"]),
    ({**config("Mistral-7B-v0.1"), "layer_types": ["chunked_attention"] * 32},
     ["layer_types: 32 of 32 layers are 'chunked_attention'", "full_attention and sliding_attention"]),
    ({**config("Meta-Llama-3-8B"), "num_dense_layers": 2}, ["num_dense_layers = 2", "does not read"]),
    ({**config("Meta-Llama-3-8B"), "model_type": "gemma"},
     ["model_type = 'gemma'", "if its blocks are what the shape flags build", "untied embeddings",
      "if not, the planner does not model it"]),
    ({**config("Mixtral-8x7B-v0.1"), "num_experts_per_tok": None}, ["num_experts_per_tok"]),
    ({**config("Qwen3-30B-A3B"), "decoder_sparse_step": 2}, ["decoder_sparse_step = 2", "every 2 layers"]),
    ({**config("Qwen3-30B-A3B"), "mlp_only_layers": [3, 7]}, ["mlp_only_layers = [3, 7]", "first ones"]),
    ({**config("Qwen1.5-MoE-A2.7B"), "shared_expert_intermediate_size": 5000}, ["shared_expert_intermediate_size"]),
    ({**config("Meta-Llama-3-8B"), "layer_types": ["sliding_attention", "full_attention"] * 16},
     ["layer_types: 16 layers are 'sliding_attention'", "no sliding_window"]),
    ({**config("Meta-Llama-3-8B"), "sliding_window": 4096},
     ["sliding_window = 4096 in a model_type = 'llama' config", "gpt_oss, mistral, mixtral"]),
    ({**config("Meta-Llama-3-8B"), "attention_bias": True, "mlp_bias": False}, ["attention_bias = true"]),
    ({**config("Meta-Llama-3-8B"), "layer_types": ["full_attention"] * 30}, ["layer_types = 30 entries", "32 layers"]),
    ({**config("Meta-Llama-3-8B"), "n_layer": 12}, ["num_hidden_layers = 32 and n_layer = 12", "disagree"]),
    ({**config("Meta-Llama-3-8B"), "n_inner": 11008}, ["intermediate_size = 14336 and n_inner = 11008"]),
    ({**config("Meta-Llama-3-8B"), "max_sequence_length": 2048}, ["max_position_embeddings = 8192 and max_sequence_"]),
    ({key: value for key, value in config("Meta-Llama-3-8B").items() if key != "max_position_embeddings"},
     ["no max_position_embeddings, n_positions or max_sequence_length", "--seq-len"]),
    ({**config("Meta-Llama-3-8B"), "model_type": "gpt2", "add_cross_attention": True}, ["add_cross_attention = True"]),
    ({**config("Meta-Llama-3-8B"), "pruned_heads": {"0": [1, 2]}}, ["pruned_heads = {'0': [1, 2]}"]),
]


@pytest.mark.parametrize("content, words", REFUSED, ids=[words[0] for _, words in REFUSED])
def test_what_the_planner_cannot_express_is_refused_in_one_line_naming_the_key(content, words):
    with pytest.raises(ValueError) as refused:
        transformer_from_hf_config(content, seq_len=None)
    message = str(refused.value)
    assert "\n" not in message and all(word in message for word in words), message


def test_the_training_length_is_bounded_by_a_learned_position_table():
    """GPT-2's learned positions end at n_positions: a longer --seq-len would plan a bigger table than the model has;
    RoPE has no table (Qwen2.5 past its max_position_embeddings is planned)."""
    with pytest.raises(ValueError, match=r"^n_positions = 1,024: the model's learned position table ends there, so "
                                         r"it cannot take 4,096-token sequences; plan --seq-len 1024 or less$"):
        transformer_from_hf_config(GPT2_SMALL, seq_len=4096)
    assert transformer_from_hf_config(GPT2_SMALL, seq_len=1024).seq_len == 1024
    assert model("Qwen2.5-7B", seq_len=262144).seq_len == 262144



def test_a_family_the_planner_does_not_read_is_named_before_its_keys():
    """Llama 4's text config (model_type llama4_text) has interleave_moe_layer_step, a key no family read here has: the
    one line names the family, as removing the key would not make the file readable."""
    llama4_like = {**config("Mixtral-8x7B-v0.1"), "model_type": "llama4_text", "interleave_moe_layer_step": 2}
    with pytest.raises(ValueError, match=r"^model_type = 'llama4_text': not a family the planner reads") as refused:
        transformer_from_hf_config(llama4_like, seq_len=4096)
    assert "interleave_moe_layer_step" not in str(refused.value)


# openai/gpt-oss-20b's config.json, the keys that shape the model: every second layer attends to a 128-token window
# (layer_types starts with sliding_attention), biases on attention (attention_bias; its code adds them to the experts
# and the router too), experts as wide as intermediate_size, and the top-k under two names
GPT_OSS = {"model_type": "gpt_oss", "num_hidden_layers": 24, "hidden_size": 2880, "num_attention_heads": 64,
           "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 32,
           "num_experts_per_tok": 4, "experts_per_token": 4, "vocab_size": 201088, "max_position_embeddings": 131072,
           "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 12,
           "attention_bias": True, "tie_word_embeddings": False, "hidden_act": "silu", "swiglu_limit": 7.0,
           "rope_theta": 150000, "initial_context_length": 4096, "router_aux_loss_coef": 0.9}
GPT_OSS_120B = {**GPT_OSS, "num_hidden_layers": 36, "num_local_experts": 128,
                "layer_types": ["sliding_attention", "full_attention"] * 18}


def test_sliding_windows_are_read_with_the_layers_they_window():
    """gpt-oss: 12 of its 24 layers (18 of 36) at a 128-token window; its model card's 20.9B and 116.8B total
    parameters, and its 3.6B and 5.1B active ones once the embedding table (201,088 x 2,880) is left out, as the
    card's counts are. Qwen2.5's file carries a window it does not use (use_sliding_window false); a Qwen file that
    uses one windows the layers from max_window_layers on. Every line names the window."""
    small, large = transformer_from_hf_config(GPT_OSS, seq_len=8192), transformer_from_hf_config(GPT_OSS_120B, seq_len=8192)
    assert (small.window, small.windowed_layers, large.windowed_layers) == (128, 12, 18)
    table = 201088 * 2880
    assert [round(m.parameters() / 1e9, 1) for m in (small, large)] == [20.9, 116.8]
    assert [round((m.active_parameters() - table) / 1e9, 1) for m in (small, large)] == [3.6, 5.1]
    assert "a 128-token sliding window in 12 of 24 layers" in model_text(small)
    for read, preset in ((small, "gpt-oss-20b"), (large, "gpt-oss-120b")):     # the presets are the files' shapes
        assert read.with_(name=preset, seq_len=4096) == Transformer.preset(preset)
    assert model("Qwen2.5-7B").window is None
    assert transformer_from_hf_config(without("Qwen2.5-7B", "use_sliding_window")).window is None   # the class default
    qwen = transformer_from_hf_config({**config("Qwen2.5-7B"), "use_sliding_window": True, "max_window_layers": 20},
                                      seq_len=262144)
    assert (qwen.window, sliding_window.windowed(qwen)) == (131072, 8)
    every_full = {**config("Qwen2.5-7B"), "use_sliding_window": True, "max_window_layers": 28}    # no layer windowed
    assert transformer_from_hf_config(every_full, seq_len=262144).window is None
    # a window as long as the planned sequence is full attention: said, and costed as such
    assert "(no shorter than the 4,096 tokens planned: full)" in model_text(model("Mistral-7B-v0.1", seq_len=4096))
    with pytest.raises(ValueError, match=r"num_experts_per_tok = 4 and experts_per_token = 2 both give"):
        transformer_from_hf_config({**GPT_OSS, "experts_per_token": 2}, seq_len=4096)


def test_the_cli_prints_the_count_and_where_the_sequence_length_came_from(capsys):
    """Every search and plan says the parameters read (so a misread file shows) and, for a config,
    that max_position_embeddings was planned unless --seq-len says the training length."""
    path = str(CONFIGS / "Qwen2.5-7B" / "config.json")
    assert main(["--hf-config", path, "--cluster", "h100-sxm", "--nodes", "8", "--dp", "64", "--zero", "3",
                 "--recompute", "full"]) == 0
    out = capsys.readouterr().out.splitlines()
    at = out.index("  model: 7.62B parameters; 131,072-token sequences")
    assert out[at + 1] == ("  note: planned at max_position_embeddings 131,072 tokens; pass --seq-len for the length "
                           "you will train")
    mixtral = str(CONFIGS / "Mixtral-8x7B-v0.1" / "config.json")
    assert main(["--hf-config", mixtral, "--seq-len", "4096", "--cluster", "h100-sxm", "--nodes", "2", "--ep", "8",
                 "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert ("model: 46.7B parameters, 12.9B active per token (8 experts, top 2); 4,096-token sequences (--seq-len)"
            in out.splitlines())
    assert "balanced routing" in out


def test_the_model_line_names_a_shared_expert_as_its_family_builds_it():
    """DeepSeekMoE's two shared experts are two; Qwen-MoE's one gated shared expert four experts wide is one."""
    assert "(64 experts, top 6 + 2 shared, first 1 layer dense)" in model_text(model("deepseek-moe-16b-base"))
    assert "(60 experts, top 4 + a gated shared expert 4 experts wide)" in model_text(model("Qwen1.5-MoE-A2.7B"))


def test_the_sequence_note_names_the_key_the_length_came_from(tmp_path, capsys):
    """A config whose limit is n_positions (GPT-2's key) or max_sequence_length is said to be planned at that key,
    not at a max_position_embeddings it does not have."""
    for key in ("n_positions", "max_sequence_length"):
        renamed = without("Qwen2.5-7B", "max_position_embeddings")
        (tmp_path / key).mkdir()
        path = tmp_path / key / "config.json"
        path.write_text(json.dumps({**renamed, key: 8192}))
        assert main(["--hf-config", str(path), "--cluster", "h100-sxm", "--nodes", "2", "--dp", "16", "--zero", "3",
                     "--recompute", "full"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert f"  note: planned at {key} 8,192 tokens; pass --seq-len for the length you will train" in out, out[:4]


def without(name: str, *keys: str) -> dict:
    return {key: value for key, value in config(name).items() if key not in keys}


LLAMA_FAMILY = ["Meta-Llama-3-8B", "Mistral-7B-v0.1", "Mixtral-8x7B-v0.1", "Qwen2.5-7B", "Qwen3-8B", "Qwen3-30B-A3B",
                "Qwen1.5-MoE-A2.7B", "deepseek-moe-16b-base"]
GPT2_SMALL = {"model_type": "gpt2", "activation_function": "gelu_new", "n_embd": 768, "n_head": 12, "n_inner": None,
              "n_layer": 12, "n_positions": 1024, "vocab_size": 50257}   # 124,439,808 parameters, tied


@pytest.mark.parametrize("name", LLAMA_FAMILY)
def test_a_missing_tie_word_embeddings_is_the_family_config_class_default(name):
    """LlamaConfig, MistralConfig, MixtralConfig, Qwen2Config, Qwen3Config, Qwen2MoeConfig, Qwen3MoeConfig and
    DeepSeek's DeepseekConfig default to untied; GPT2Config keeps PretrainedConfig's tied. Llama 3 8B without the key
    is still 8.03B (tied, 7.50B)."""
    read = transformer_from_hf_config(without(name, "tie_word_embeddings"), seq_len=4096)
    assert not read.tied_embeddings and read.parameters() == model(name, seq_len=4096).parameters()
    assert transformer_from_hf_config(GPT2_SMALL).tied_embeddings
    assert transformer_from_hf_config(GPT2_SMALL).parameters() == 124_439_808


def test_the_family_not_hidden_act_decides_the_ffn_norm_and_positions():
    """LlamaMLP (and Mistral's, Qwen's, Mixtral's experts) always has gate_proj, up_proj and down_proj: hidden_act only
    picks the function. GPT-2's MLP has two matrices whatever activation_function names."""
    llama = model("Meta-Llama-3-8B")
    for changed in (without("Meta-Llama-3-8B", "hidden_act"), {**config("Meta-Llama-3-8B"), "hidden_act": "gelu"},
                    without("Meta-Llama-3-8B", "rms_norm_eps")):
        assert transformer_from_hf_config(changed, "Meta-Llama-3-8B") == llama
    assert within_last_digit(llama.parameters(), "8.03")
    gpt2 = transformer_from_hf_config({**GPT2_SMALL, "activation_function": "silu"})
    assert (gpt2.ffn_kind, gpt2.norm, gpt2.position, gpt2.bias) == ("gelu", "layernorm", "learned", True)


def test_the_family_comes_from_model_type_not_from_a_stray_gpt2_key():
    """An n_layer that agrees with num_hidden_layers changes nothing in a Llama config (RoPE, no biases, gated FFN);
    one that disagrees is refused (REFUSED). Without model_type, GPT-2's key names read as GPT-2."""
    assert transformer_from_hf_config({**config("Meta-Llama-3-8B"), "n_layer": 32}, "Meta-Llama-3-8B") == \
        model("Meta-Llama-3-8B")
    unnamed = transformer_from_hf_config({key: value for key, value in GPT2_SMALL.items() if key != "model_type"})
    assert unnamed.position == "learned" and unnamed.parameters() == 124_439_808


def test_pretrained_config_bookkeeping_keys_change_nothing():
    """What save_pretrained writes from PretrainedConfig (outputs, names, kernels, ids, label maps, generation
    defaults) reads as the same model, though some names hold "attn", "n_" or "hidden"."""
    bookkeeping = {"_attn_implementation_autoset": True, "return_dict": True, "output_hidden_states": True,
                   "output_attentions": True, "torchscript": False, "torch_dtype": "bfloat16", "use_cache": True,
                   "_name_or_path": "meta-llama/Meta-Llama-3-8B", "architectures": ["LlamaForCausalLM"],
                   "transformers_version": "4.44.0", "pruned_heads": {}, "tie_encoder_decoder": False,
                   "chunk_size_feed_forward": 0, "is_encoder_decoder": False, "is_decoder": True,
                   "add_cross_attention": False, "problem_type": None, "id2label": {"0": "LABEL_0", "1": "LABEL_1"},
                   "label2id": {"LABEL_0": 0, "LABEL_1": 1}, "sep_token_id": None, "decoder_start_token_id": 0,
                   "forced_eos_token_id": 128001, "return_dict_in_generate": True, "begin_suppress_tokens": [1],
                   "cross_attention_hidden_size": 1024, "attn_implementation": "sdpa",
                   "_experts_implementation": "grouped_mm"}
    read = transformer_from_hf_config({**config("Meta-Llama-3-8B"), **bookkeeping}, "Meta-Llama-3-8B")
    assert read == model("Meta-Llama-3-8B")


def test_the_training_length_is_all_a_config_without_a_position_limit_needs():
    """The caller's seq_len plans the model without max_position_embeddings; older Llama files give the limit as
    max_sequence_length. The LLaMA-7B config.json transformers' conversion wrote in early 2023 (no
    max_position_embeddings, no tie_word_embeddings) reads as LLaMA-7B's 6.74B (Touvron et al. 2023)."""
    bare = without("Meta-Llama-3-8B", "max_position_embeddings")
    assert transformer_from_hf_config(bare, "Meta-Llama-3-8B", seq_len=4096) == model("Meta-Llama-3-8B", seq_len=4096)
    llama_7b = {"architectures": ["LLaMAForCausalLM"], "bos_token_id": 0, "eos_token_id": 1, "hidden_act": "silu",
                "hidden_size": 4096, "intermediate_size": 11008, "initializer_range": 0.02,
                "max_sequence_length": 2048, "model_type": "llama", "num_attention_heads": 32,
                "num_hidden_layers": 32, "pad_token_id": -1, "rms_norm_eps": 1e-06, "torch_dtype": "float16",
                "transformers_version": "4.27.0.dev0", "use_cache": True, "vocab_size": 32000}
    read = transformer_from_hf_config(llama_7b)
    assert read.seq_len == 2048 and read.parameters() == 6_738_415_616
    # with the training length given, the position keys are not read at all: neither a disagreement nor a float
    odd = {**config("Meta-Llama-3-8B"), "max_sequence_length": 2048, "max_position_embeddings": 8192.0}
    assert transformer_from_hf_config(odd, "Meta-Llama-3-8B", seq_len=4096) == model("Meta-Llama-3-8B", seq_len=4096)


def test_a_layer_types_list_with_one_entry_a_layer_is_read():
    assert transformer_from_hf_config({**config("Meta-Llama-3-8B"), "layer_types": ["full_attention"] * 32},
                                      "Meta-Llama-3-8B") == model("Meta-Llama-3-8B")
    assert transformer_from_hf_config({**config("Meta-Llama-3-8B"), "layer_types": []},   # empty: unset
                                      "Meta-Llama-3-8B") == model("Meta-Llama-3-8B")


def test_an_expert_width_left_out_is_refused_where_the_family_reads_its_own_key():
    """Qwen-MoE's and DeepSeek's experts are moe_intermediate_size wide; without it their code takes a default of its
    own (768 for Qwen3-MoE), while the planner read intermediate_size (6,144: a 233B model for a 30B one). Mixtral's
    experts are intermediate_size wide: it needs no such key."""
    for name in ("Qwen3-30B-A3B", "Qwen1.5-MoE-A2.7B", "deepseek-moe-16b-base"):
        with pytest.raises(ValueError, match=r"^model_type = '(qwen3_moe|qwen2_moe|deepseek)' takes its experts' "
                                             r"width from moe_intermediate_size, which this file does not give"):
            transformer_from_hf_config(without(name, "moe_intermediate_size"), seq_len=4096)
    assert transformer_from_hf_config(config("Mixtral-8x7B-v0.1"), seq_len=4096).moe.expert_ffn == 14336


def test_expert_keys_in_a_dense_familys_config_are_refused():
    """Hugging Face's Llama and Qwen2 classes keep an unknown num_experts as an attribute and build the dense model;
    the planner read it as a mixture of experts (47.5B for Llama 3 8B). A config without model_type keeps reading
    them (a hand-written MoE config)."""
    for name in ("Meta-Llama-3-8B", "Qwen2.5-7B"):
        with pytest.raises(ValueError, match=r"^num_experts = 8 in a model_type = '(llama|qwen2)' config: that "
                                             r"family's code builds a dense model"):
            transformer_from_hf_config({**config(name), "num_experts": 8, "num_experts_per_tok": 2}, seq_len=4096)
    untyped = without("Meta-Llama-3-8B", "model_type")
    assert transformer_from_hf_config({**untyped, "num_experts": 8, "num_experts_per_tok": 2}, seq_len=4096).moe


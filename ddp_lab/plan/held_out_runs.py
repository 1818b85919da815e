"""Published training runs the planner was never fitted on: the development part of the held-out validation
(ddp_lab/plan/held_out.py scores them; their errors guided which mechanics the planner models).

Each run is written down as its source states it: the model shape, the parallel layout, the batch and
micro-batch, the sequence length, the GPUs, the precision and the published figure in its own unit, with
the source (paper and table, or repository file and version). `note` says what the source does not state
and what was assumed for it, and what the run does that the planner does not model. Model, strategy and
cluster are plain dicts of the planner's field names, so a run may name a field the planner does not have
yet (`Strategy(precision="fp8")`, `tp_comm_overlap`, `head_size`, a GPU preset): held_out.py then skips it
and says which field is missing.

Runs left out, and why: Korthikanti et al. 2022's Table 4 iteration times and Narayanan et al. 2021's ZeRO-3
comparison (no number from them is written here without their text to check it against); Llama 3 405B and
Qwen3-235B-A22B in the Megatron-Bridge tables (126 and 94 layers over 64 and 32 virtual stages, a layout the
tables do not give); DeepSeek-V3 and Kimi K2 (multi-head latent attention, not modelled); NeMo's long-sequence
table (docs/source/performance/performance_long_sequence.md: no global batch or micro-batch stated); the
GB200 Llama 3 70B rows (their recipe offloads 40 layers' activations to the CPU, not modelled); the
Qwen2-57B-A14B rows of "MoE Parallel Folding" (Liu et al. 2025, arXiv:2504.14960): no number from its tables is
written here without their text; torchtitan's float8 "rowwise" rows (the planner's FP8 is tensorwise scaling). Where torchtitan's tables
give a run with and without torch.compile, the one without is kept (the planner does not model kernel fusion);
where every row compiles, the rows are kept with a note.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from dataclasses import dataclass, field

METRICS = {
    "tokens_per_gpu": "tokens/s/GPU",
    "model_tflops": "model TFLOP/s/GPU",     # no recomputation counted (MFU x peak)
    "mfu": "MFU",                            # model FLOPs over the GPU's dense bf16 peak
}


@dataclass(frozen=True)
class HeldOutRun:
    """One published run the planner was not fitted on, as its source states it (see the module docstring).

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    name: str
    source: str        # paper + table/figure, or repository + file + version/date
    model: dict        # Transformer fields; "preset" names a Transformer preset the other fields change
    strategy: dict     # Strategy fields (dp, tp, pp, cp, ep, zero, micro_batch, grad_accum, precision, ...)
    gpu: str           # a ClusterSpec preset
    metric: str        # a key of METRICS
    published: float   # exactly as published
    note: str          # unstated settings and what was assumed; what the planner does not model
    cluster: dict = field(default_factory=dict)   # ClusterSpec changes (links the source states)


# ---- model shapes (config.json of each model, or the paper's table) -------------------------------------------
LLAMA = dict(ffn_kind="swiglu", norm="rmsnorm", bias=False, position="rope", tied_embeddings=False, dropout=False)
# Korthikanti et al. 2022 (arXiv:2205.05198), Table 3's 530B: 105 layers, hidden 20480, 128 heads, s = 2048,
# GPT vocabulary 51,200 (Megatron-LM's padded GPT-2 BPE)
GPT_530B = dict(name="gpt-530b", layers=105, hidden=20480, heads=128, vocab=51200, seq_len=2048)
# GPT-3 175B (Brown et al. 2020, Table 2.1) as NeMo trains it: GPT-2 BPE vocabulary (50,257; padding not stated)
GPT3_175B = dict(name="gpt3-175b", layers=96, hidden=12288, heads=96, vocab=50257, seq_len=2048)
# Llama 2 (Touvron et al. 2023; config.json): 7B 32 x 4096, ffn 11008; 70B 80 x 8192, 64 heads, 8 kv heads, ffn 28672
LLAMA2_7B = dict(name="llama2-7b", layers=32, hidden=4096, heads=32, vocab=32000, seq_len=4096, ffn=11008, **LLAMA)
LLAMA2_70B = dict(name="llama2-70b", layers=80, hidden=8192, heads=64, kv_heads=8, vocab=32000, seq_len=4096,
                  ffn=28672, **LLAMA)
# Qwen3-30B-A3B (Qwen/Qwen3-30B-A3B config.json): 48 layers, hidden 2048, 32 heads of 128 (head_dim), 4 kv heads,
# 128 experts of 768, 8 per token, every layer MoE, vocabulary 151,936, untied, RMSNorm on queries and keys
QWEN3_30B_A3B = dict(name="qwen3-30b-a3b", layers=48, hidden=2048, heads=32, kv_heads=4, vocab=151936, seq_len=4096,
                     ffn=6144, head_size=128, qk_norm=True, moe=dict(experts=128, top_k=8, expert_ffn=768), **LLAMA)
# gpt-oss-120b (openai/gpt-oss-120b config.json): 36 layers, hidden 2880, 64 heads of 64, 8 kv heads, 128 experts of
# 2880, 4 per token, biases on attention and experts, vocabulary 201,088; every second layer attends to a sliding
# window of 128 tokens (window, windowed_layers: sliding_window.py), with a learned "sink" per head (a logit of its
# own in each softmax: not modelled)
GPT_OSS_120B = dict(name="gpt-oss-120b", layers=36, hidden=2880, heads=64, kv_heads=8, vocab=201088, seq_len=4096,
                    ffn=2880, head_size=64, moe=dict(experts=128, top_k=4, expert_ffn=2880), window=128,
                    windowed_layers=18, **{**LLAMA, "bias": True})

TORCHTITAN_2412 = ("pytorch/torchtitan docs/performance.md (versions of 2024-12-26: torch 1963fc8, torchtitan "
                   "9dec370; Grand Teton, H100 96 GB HBM2e at 500 W, 400 Gb/s per GPU)")
TORCHTITAN_H100 = ("the GPUs are 96 GB HBM2e H100s at a 500 W limit (the source: peak between SXM and NVL), planned "
                   "as the h100-hbm2e preset (cluster_spec.py); sequence 8,192 from train_configs/*.toml at "
                   "9dec370 (the table does not say)")
TORCHTITAN_SAC = ("torchtitan's 'selective' (op) checkpointing: recompute='op' (op_checkpoint.py, read from "
                  "parallelize_llama.py at that commit)")
TORCHTITAN_SAC_NOTE = "; per-op selective checkpointing (recompute='op')"
MEGATRON_BRIDGE = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md (repository state of 2026-08-22, "
                   "commit 067f987df)")
NEMO_2407 = ("NVIDIA/NeMo docs/source/performance/performance_summary.md, 'NeMo24.07', DGX-H100, FP8 (commit "
             "8e3d65dcfe, 2024-09-09)")
NEMO_ASSUMED = ("the table does not state the rest; taken from NVIDIA/NeMo-Framework-Launcher's training config of "
                "that release (launcher_scripts/conf/training/, commit 95c77b59, 2024-07-17; assumed to be what the "
                "table ran): no recomputation, distributed_fused_adam (ZeRO-1), bf16 gradient sync, "
                "ub_tp_comm_overlap as the config sets it (Llama 2/3 70B: on; GPT-3 175B: off)")


# NeMo, Megatron-LM (Megatron-Core) and Megatron-Bridge run attention through Transformer Engine, which prefers
# cuDNN's fused flash attention on Hopper and newer (attention_kernels.py); the rest run PyTorch's SDPA (fa2).
TE = dict(flash_kernel="cudnn")


def _llama3(name, **changes):
    return {"preset": name, **changes}


RUNS: list[HeldOutRun] = [
    # ---- dense, Megatron-style, A100 ----------------------------------------------------------------------
    *[HeldOutRun(
        f"Korthikanti 530B, {label}", "Korthikanti et al. 2022, arXiv:2205.05198, abstract: 530B GPT on 2,240 A100s",
        GPT_530B, dict(dp=8, tp=8, pp=35, zero=0, micro_batch=1, grad_accum=240, sequence_parallel=sp,
                       recompute=recompute, attention="eager"),
        "a100-80gb", "mfu", mfu,
        "the abstract gives the GPUs and the MFU, Table 3 the shape and TP 8; not stated here, assumed: PP 35 and a "
        "global batch of 1,920 (MT-NLG's plan for the same 530B shape on the same 2,240 GPUs, its reference [20]), "
        "micro-batch 1, 1F1B without interleaving, no optimizer sharding; eager attention (2022)")
      for label, sp, recompute, mfu in (("sequence parallel + selective recomputation", True, "selective", 0.542),
                                        ("full recomputation", False, "full", 0.421))],
    # ---- FSDP, data-parallel, A100 and H100 --------------------------------------------------------------------
    HeldOutRun("torchtitan Llama 3 8B, 64 A100s", "pytorch/torchtitan docs/performance.md (2024-04, commit 0413364), "
               "Llama 3 table, 'selective op' row", _llama3("llama3-8b"),
               dict(dp=64, zero=3, micro_batch=1, recompute="op"), "a100-80gb", "tokens_per_gpu", 2973,
               TORCHTITAN_SAC + "; inter-node links 200 Gb/s per GPU (not stated)"),
    *[HeldOutRun(f"torchtitan Llama 3.1 8B FSDP, {gpus} H100s", f"{TORCHTITAN_2412}, Table {table}, 'FSDP' row",
                 _llama3("llama3-8b"), dict(dp=gpus, zero=3, micro_batch=2, recompute="op"), "h100-hbm2e",
                 "tokens_per_gpu", tps,
                 TORCHTITAN_SAC + "; " + TORCHTITAN_H100)
      for table, gpus, tps in ((1, 8, 5762), (3, 128, 5605))],
    # ---- dense, H100, TP 4-8 ------------------------------------------------------------------------------------
    *[HeldOutRun(f"torchtitan Llama 3.1 405B FSDP 16 x TP 8, {label}",
                 "pytorch/torchtitan docs/performance.md (2024-08-23, commit 3faaa1a0d), Llama 3.1 table",
                 _llama3("llama3-405b"), dict(dp=16, tp=8, zero=3, micro_batch=2, recompute="full",
                                              checkpoint_early_stop=True, sequence_parallel=True, **extra),
                 "h100-hbm2e", "tokens_per_gpu", tps,
                 "128 H100s with 95 GB HBM2e at a lower TDP (the source's footnote), planned as h100-hbm2e; sequence "
                 "8,192 and TP 8 from train_configs/llama3_405b.toml at that commit; full checkpointing = "
                 "ptd_checkpoint_wrapper (non-reentrant, early stop)" + note)
      for label, extra, tps, note in (
          ("bf16", {}, 109, ""),
          ("Float8", dict(precision="fp8"), 177, "; Float8 linears, attention in bf16"),
          ("Float8 + async TP", dict(precision="fp8", tp_comm_overlap=True), 185,
           "; async TP (torch.compile's micro-pipelined all-gather/reduce-scatter matmuls) as tp_comm_overlap"))],
    *[HeldOutRun(f"torchtitan Llama 3.1 70B FSDP 32 x TP 8, Float8{label}", f"{TORCHTITAN_2412}, Table 4",
                 _llama3("llama3-70b"), dict(dp=32, tp=8, zero=3, micro_batch=16, recompute="full",
                                             checkpoint_early_stop=True, sequence_parallel=True, precision="fp8",
                                             **extra),
                 "h100-hbm2e", "tokens_per_gpu", tps, TORCHTITAN_H100 + "; torch.compile (kernel fusion not modelled)")
      for label, extra, tps in (("", {}, 829), (" + async TP", dict(tp_comm_overlap=True), 876))],
    HeldOutRun("NeMo GPT-3 175B TP 4 x PP 8, 128 H100s", f"{NEMO_2407}, GPT3-175B 128-GPU row", GPT3_175B,
               dict(dp=4, tp=4, pp=8, zero=1, micro_batch=1, grad_accum=64, schedule="interleaved", virtual_stages=6,
                    sequence_parallel=True, precision="fp8", **TE),
               "h100-sxm", "tokens_per_gpu", 716, NEMO_ASSUMED),
    HeldOutRun("NeMo Llama 2 70B TP 4 x PP 4, 64 H100s", f"{NEMO_2407}, LLAMA2-70B row", LLAMA2_70B,
               dict(dp=4, tp=4, pp=4, zero=1, micro_batch=1, grad_accum=32, schedule="interleaved", virtual_stages=20,
                    sequence_parallel=True, precision="fp8", tp_comm_overlap=True, **TE),
               "h100-sxm", "tokens_per_gpu", 1728, NEMO_ASSUMED),
    HeldOutRun("NeMo Llama 3 70B TP 4 x PP 4 x CP 2, 64 H100s", f"{NEMO_2407}, LLAMA3-70B row", _llama3("llama3-70b"),
               dict(dp=2, tp=4, pp=4, cp=2, zero=1, micro_batch=1, grad_accum=64, schedule="interleaved",
                    virtual_stages=5, sequence_parallel=True, precision="fp8", tp_comm_overlap=True, **TE),
               "h100-sxm", "tokens_per_gpu", 1524, NEMO_ASSUMED),
    HeldOutRun("Megatron-Bridge Llama 3 70B TP 4 x PP 8, 64 H100s", f"{MEGATRON_BRIDGE}, '26.04.01 NeMo Container', "
               "LLAMA3_70B, DGX-H100 FP8", _llama3("llama3-70b"),
               dict(dp=2, tp=4, pp=8, zero=1, micro_batch=1, grad_accum=128, schedule="interleaved", virtual_stages=5,
                    sequence_parallel=True, precision="fp8", tp_comm_overlap=True, overlap_param_gather=True, **TE),
               "h100-sxm", "tokens_per_gpu", 1664,
               "the recipe (perf_recipes/llama/h100/llama3.py, llama3_70b_pretrain_64gpu_h100_fp8cs_config) sets "
               "sequence parallel, userbuffers TP overlap, the parameter gather overlapped with the optimizer step "
               "and the distributed optimizer; recomputation not set there (none assumed); its pipeline layout puts "
               "3 layers on one of the 40 virtual stages and 1 (with the loss) on the last, planned as 2 each"),
    *[HeldOutRun(f"torchtitan Llama 3.1 {size} FSDP {dp} x TP 8, {label}",
                 "pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (June 2025; torch 38410cf9, "
                 f"torchtitan 820504e), Llama3 {size.lower()} table, {label} row",
                 _llama3(f"llama3-{size.lower()}"),
                 dict(dp=dp, tp=8, zero=3, micro_batch=batch, sequence_parallel=True, **strategy),
                 "h100-hbm2e", "tokens_per_gpu", tps,
                 TORCHTITAN_H100.replace("9dec370", "820504e").replace("train_configs/*.toml",
                                                                       "the llama3 train_configs") +
                 "; torch.compile (fusion not modelled); the table's tokens/sec taken per GPU (torchtitan logs them "
                 "per rank)" + (TORCHTITAN_SAC_NOTE if size == "8B" else "; full checkpointing, non-reentrant"))
      for size, dp, batch, recompute in (("70B", 32, 16, dict(recompute="full", checkpoint_early_stop=True)),
                                         ("8B", 8, 12, dict(recompute="op")))
      for label, strategy, tps in (
          ("bf16, vanilla TP", recompute, {"70B": 597.3, "8B": 4378}[size]),
          ("bf16, async TP", {**recompute, "tp_comm_overlap": True}, {"70B": 652.4, "8B": 4809.4}[size]),
          ("float8 tensorwise, vanilla TP", {**recompute, "precision": "fp8"}, {"70B": 809.8, "8B": 5078.1}[size]),
          ("float8 tensorwise, async TP", {**recompute, "precision": "fp8", "tp_comm_overlap": True},
           {"70B": 942.4, "8B": 5570.1}[size]))],
    # ---- Llama 3 405B on 8,192-16,384 H100s ------------------------------------------------------------------------
    *[HeldOutRun(f"Llama 3 405B, {gpus:,} H100s", "Llama Team 2024, arXiv:2407.21783, Table 4 "
                 f"({gpus:,} GPUs, TP 8, CP 1, PP 16, DP {dp}, sequence 8,192, batch size/DP {per_dp})",
                 _llama3("llama3-405b"),
                 dict(dp=dp, tp=8, pp=16, zero=2, micro_batch=1, grad_accum=per_dp, sequence_parallel=True,
                      fp32_grads=True, first_stage_layers=7, last_stage_layers=7),
                 "h100-sxm", "model_tflops", tflops,
                 "126 layers on 16 stages, one layer fewer on the first and the last (Sec. 3.3.2); the paper's "
                 "interleaved schedule's depth is not stated: planned as 1F1B (slower); micro-batch 1 (not stated); "
                 "no recomputation; FSDP without resharding after forward = ZeRO-2; fp32 gradient reduction; the "
                 "paper's FLOP count is not spelled out: the planner's model FLOPs (attention counted whole) compared")
      for gpus, dp, per_dp, tflops in ((8192, 64, 32, 430), (16384, 128, 16, 400))],
    # ---- context parallel, long sequences, H100 ----------------------------------------------------------------
    HeldOutRun("Llama 3 405B, CP 16 at 131,072 tokens, 16,384 H100s", "Llama Team 2024, arXiv:2407.21783, Table 4 "
               "(16,384 GPUs, TP 8, CP 16, PP 16, DP 4 as printed, sequence 131,072, batch size/DP 16, 16M tokens)",
               _llama3("llama3-405b", seq_len=131072),
               dict(dp=8, tp=8, pp=16, cp=16, zero=2, micro_batch=1, grad_accum=16, sequence_parallel=True,
                    fp32_grads=True, first_stage_layers=7, last_stage_layers=7),
               "h100-sxm", "model_tflops", 380,
               "as the 8K rows; the row prints DP 4, but its 16,384 GPUs (8 x 16 x 16 x DP) and 16M tokens per batch "
               "(DP x 16 x 131,072) both say DP 8: 8 used"),
    *[HeldOutRun(f"torchtitan Llama 3.1 8B FSDP {8 // cp} x CP {cp}, {seq // 1024}K tokens, Float8",
                 f"{TORCHTITAN_2412}, Table 2", _llama3("llama3-8b", seq_len=seq),
                 dict(dp=8 // cp, cp=cp, zero=3, micro_batch=1, recompute="full", checkpoint_early_stop=True,
                      precision="fp8"),
                 "h100-hbm2e", "tokens_per_gpu", tps, TORCHTITAN_H100.replace("sequence 8,192 from train_configs/*.toml "
                                                                            "at 9dec370 (the table does not say)",
                                                                            "torch.compile (fusion not modelled)"))
      for cp, seq, tps in ((1, 32768, 3890), (2, 65536, 2540), (4, 131072, 1071), (8, 262144, 548))],
    HeldOutRun("NeMo Llama 3 8B CP 2, 8 H100s", f"{NEMO_2407}, LLAMA3-8B row", _llama3("llama3-8b"),
               dict(dp=4, cp=2, zero=1, micro_batch=1, grad_accum=32, precision="fp8", **TE),
               "h100-sxm", "tokens_per_gpu", 12273, NEMO_ASSUMED),
    # ---- mixture of experts, coarse: 8 experts, top-2 ----------------------------------------------------------
    HeldOutRun("Megatron-Core Mixtral 8x7B EP 8 x PP 4, 64 H100s", "NVIDIA/Megatron-LM megatron/core/transformer/moe/"
               "README.md (MCore v0.8): '438 TFLOPS for Mixtral 8X7B bf16' and 'Reference Best Parallel Mapping'",
               {"preset": "mixtral-8x7b", "seq_len": 4096},
               dict(dp=16, pp=4, ep=8, zero=1, micro_batch=1, grad_accum=16, schedule="interleaved", virtual_stages=8,
                    **TE),
               "h100-sxm", "model_tflops", 438,
               "the README gives the figure and the v0.8 mapping (TP 1, EP 8, PP 4, VP 8, MBS 1, GBS 256, sequence "
               "4,096, dropless all-to-all, BF16, 64 H100s, 8 x 400 Gb/s per node) side by side, not as one row: "
               "assumed to be one run; recomputation and optimizer sharding not stated (none; distributed optimizer "
               "assumed); Megatron-LM's model-FLOPs formula"),
    # ---- mixture of experts, fine-grained: more than 16 experts (32-128 here), top-4/8 -------------------------
    HeldOutRun("Megatron-Bridge Qwen3-30B-A3B EP 16, 16 H100s, FP8", f"{MEGATRON_BRIDGE}, '26.04.01 NeMo Container', "
               "Qwen3_30B_a3B, DGX-H100 FP8", QWEN3_30B_A3B,
               dict(dp=16, ep=16, zero=1, micro_batch=1, grad_accum=64, precision="fp8", moe_dispatch="per-node", **TE),
               "h100-sxm", "tokens_per_gpu", 8960,
               "recipe perf_recipes/qwen/h100/qwen3_moe.py (fp8cs): no recomputation, HybridEP flex dispatcher "
               "(moe_dispatch per-node), "
               "routing forced to balance, dropless (the table's note); distributed optimizer assumed"),
    HeldOutRun("Megatron-Bridge Qwen3-30B-A3B EP 8 x PP 2, 16 H100s, FP8",
               f"{MEGATRON_BRIDGE}, '25.11 NeMo Container', DGX-H100, Qwen3_30B_a3B FP8-CS", QWEN3_30B_A3B,
               dict(dp=8, pp=2, ep=8, zero=1, micro_batch=2, grad_accum=32, schedule="interleaved",
                    virtual_stages=24, precision="fp8", **TE),
               "h100-sxm", "tokens_per_gpu", 5275,
               "routing forced to balance, dropless (the table's note); recomputation of that release not stated "
               "(none assumed); distributed optimizer assumed"),
    HeldOutRun("Megatron-Bridge gpt-oss-120b EP 8 x PP 4, 64 H100s", f"{MEGATRON_BRIDGE}, '26.04.01 NeMo Container', "
               "GPT OSS 120B, DGX-H100 BF16", GPT_OSS_120B,
               dict(dp=16, pp=4, ep=8, zero=1, micro_batch=1, grad_accum=80, **TE),
               "h100-sxm", "tokens_per_gpu", 5824,
               "recipe perf_recipes/gpt_oss/h100/gpt_oss.py (bf16): selective recomputation of the norms and the "
               "experts' activation only (no matmul; planned as none), routing forced to balance; the sliding-window "
               "half of the layers at its window, the sinks not modelled; distributed optimizer assumed"),
    # ---- FP8, data-parallel, H100 ----------------------------------------------------------------------------
    HeldOutRun("torchtitan Llama 3.1 8B FSDP, 8 H100s, Float8", f"{TORCHTITAN_2412}, Table 1, "
               "'FSDP + torch.compile + Float8' row", _llama3("llama3-8b"),
               dict(dp=8, zero=3, micro_batch=2, precision="fp8", recompute="op"), "h100-hbm2e", "tokens_per_gpu", 8532,
               TORCHTITAN_SAC + "; " + TORCHTITAN_H100 + "; torch.compile (fusion not modelled)"),
    HeldOutRun("torchtitan Llama 3.1 8B FSDP, 128 H100s, Float8", f"{TORCHTITAN_2412}, Table 3, "
               "'FSDP + torch.compile + Float8' row", _llama3("llama3-8b"),
               dict(dp=128, zero=3, micro_batch=2, precision="fp8", recompute="op"), "h100-hbm2e", "tokens_per_gpu",
               8380,
               TORCHTITAN_SAC + "; " + TORCHTITAN_H100 + "; torch.compile (fusion not modelled)"),
    *[HeldOutRun(f"torchtitan Llama 3.1 8B FSDP, {gpus} H200s, Float8",
                 "pytorch/torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (June 2025; torchtitan "
                 f"e7c0cae), NUM_NODES {gpus // 8} row", _llama3("llama3-8b"),
                 dict(dp=gpus, zero=3, micro_batch=2, precision="fp8", recompute="op"), "h200", "tokens_per_gpu", tps,
                 "local batch 2, torch.compile, float8 with FP8 all-gather, 8 H200s per host, 400 Gb/s per GPU; "
                 "sequence 8,192 and per-op selective checkpointing from the llama3_8b.toml at e7c0cae" +
                 TORCHTITAN_SAC_NOTE)
      for gpus, tps in ((32, 10938), (64, 10753))],
    HeldOutRun("NeMo Llama 2 7B, 8 H100s, FP8", f"{NEMO_2407}, LLAMA2-7B row", LLAMA2_7B,
               dict(dp=8, zero=1, micro_batch=1, grad_accum=16, precision="fp8", **TE),
               "h100-sxm", "tokens_per_gpu", 16934, NEMO_ASSUMED),
    # ---- B200 ------------------------------------------------------------------------------------------------
    *[HeldOutRun(f"Megatron-Bridge gpt-oss-120b EP {ep}, 64 {gpu.upper()}s", f"{MEGATRON_BRIDGE}, '26.04.01 NeMo "
                 f"Container', GPT OSS 120B, DGX-{gpu.upper()} BF16", GPT_OSS_120B,
                 dict(dp=64, ep=ep, zero=1, micro_batch=4, grad_accum=5, **TE), gpu, "tokens_per_gpu", tps,
                 f"recipe perf_recipes/gpt_oss/{gpu}/gpt_oss.py (bf16): as the H100 row's (selective recomputation of "
                 "norms and expert activations only, planned as none; routing forced to balance; sliding-window layers "
                 "at their window); distributed optimizer assumed")
      for gpu, ep, tps in (("b200", 8, 13568), ("gb200", 64, 16640))],
    HeldOutRun("Megatron-Bridge Llama 3 8B, 8 B200s, FP8", f"{MEGATRON_BRIDGE}, '25.11 NeMo Container', DGX-B200, "
               "LLAMA3_8B FP8-CS", _llama3("llama3-8b"),
               dict(dp=8, zero=1, micro_batch=2, grad_accum=8, precision="fp8", **TE),
               "b200", "tokens_per_gpu", 30624,
               "FSDP 0 (DDP with the distributed optimizer assumed); recomputation of that release not stated "
               "(none assumed)"),
]

"""Published training runs kept aside while the planner is modelled: the held-aside set (held_out.py scores it).

These runs come from sources that neither the planner's calibration set (published.py) nor the development runs
(held_out_runs.py) use. They were chosen and written down before the planner predicted any of them, and they are
kept aside while it is modelled: their errors are looked at once, at the end (held_out.py says what moves a run to
the development part). Each run is recorded as its source states it: the model shape, the parallel layout, the batch
and micro-batch, the sequence, the GPUs, the precision and the published figure; each run's `source` ends with the
GPU count and global batch its source gives ("N GPUs, GBS B"; where it gives no GPU count, the one planned, and says
so). A setting the table leaves out is read from the configuration the same source ships for that run (named in the
note); what neither states is assumed by the rules below, never chosen to bring a prediction closer. Where a source
gives tokens per second for all its GPUs, `published` is that figure over the GPU count, written as the division.

Sources:
    dgxc        NVIDIA/dgxc-benchmarking (NVIDIA's DGX Cloud benchmarking recipes), the "Expected Performance"
                tables of release v25.04.01 (commit 85380ff, H100s: NeMo 25.02.01's recipes at NeMo commit
                d2b2155, NeMo 24.12's launcher for GPT-3, MaxText 25.01) and, for what that release lacks
                (GB200s; Grok-1 with its expert tensor-parallel size given), release v25.05.04 (commit 1f6d9f4,
                NeMo 25.04.00's recipes at NeMo commit 6f2c6fd); the launch scripts and configs of those commits
    automodel   NVIDIA-NeMo/Automodel docs/performance-summary.md, "Pre-Training Performance", DGX-H100 BF16, at
                commit 8d9bfb9 (2025-10-08; the Llama 3.1 70B row at commit 2013a4d, 2026-04-10), with the
                examples/benchmark/configs/*.yaml (and examples/llm_pretrain/) of the same commits
    flash-attn  Dao-AILab/flash-attention training/README.md (commit 0b037c2), "Training speed" (8 x A100 80GB
                SXM4), with the training/configs/experiment/pile/*.yaml its README names for each size
    olmo-core   allenai/OLMo-core README.md, "Official training scripts" (H100s, tokens per second per device), each
                figure with the src/scripts/train/*.py script, model config and Makefile of the commit that wrote
                it (8c03ca8a2, 310866e45, 41400c46f, e27ba7455; September-November 2024); added after the
                planner's mechanics and constants were fixed
    jax-toolbox NVIDIA/JAX-Toolbox rosetta/rosetta/projects/maxtext/README.md, "Configs" (commit 5a25a14, 2024-05-01:
                MaxText on JAX, the 24.04 containers), with the scripts/example_slurm.sub of the same commit; added
                after the planner's mechanics and constants were fixed
    maxtext-a3  AI-Hypercomputer/maxtext MaxText/configs/a3/llama_2_7b/README.md (commit efb6d9e, 2024-04-12: Google
                Cloud A3 VMs, 8 H100 80GB each), with the Nvm.sh scripts and MaxText code of the same commit; added
                after the planner's mechanics and constants were fixed
    mlperf      mlcommons/training_results_v4.0 (commit 6fe9543, 2024-06-11): NVIDIA's closed-division GPT-3 175B
                submissions (Eos and Eos-dfw, DGX H100, NeMo 24.04), each with the config_DGXH100_*.sh,
                config_common.sh, config_fp8.sh and conf/*.yaml of NVIDIA/benchmarks/gpt3/implementations/nemo and
                its result log;
                added after the planner's mechanics and constants were fixed
Which rows: all three of NVIDIA's MLPerf Training v4.0 GPT-3 submissions, each its result_0.txt (the first of its
runs): the tokens of all its training blocks over their summed durations (block_start to block_stop; the
evaluations between them left out), the global batch and gradient accumulation as the log states them;
all eight of OLMo-core's table; JAX-Toolbox's MaxText table (its one row); MaxText's A3 table, all five
rows (the four past one VM added once the planner modelled HSDP, hybrid_shard.py, and before they were predicted).
Which columns: of each dgxc table, its smallest GPU count and, where the table reaches it, 2,048 GPUs (the end of
its weak scaling; MaxText's 2,048-GPU columns, HSDP, added once the planner modelled it and before they were
predicted); of the GB200 tables, which stop at 512, the smallest. A column whose configuration (model, GPU, parallel
sizes, precision) held_out_runs.RUNS already has is not repeated.

Rules for what a source leaves unstated (as held_out_runs.py): NeMo's distributed optimizer is ZeRO-1; FSDP that
does not reshard after forward is ZeRO-2, FSDP that does is ZeRO-3; a partial recomputation is planned as the
setting nearest in the matmuls it recomputes; the attention kernel is the framework's (Transformer Engine in NeMo,
MaxText's cudnn_flash_te: cuDNN's, held_out_runs.TE; PyTorch's SDPA and FlexAttention: the FlashAttention-2
class); FP8 with one scale per tensor (NeMo's delayed scaling) is the planner's FP8; the vocabulary is the
tokenizer's (padding not modelled) unless the source builds the model at a padded size; the links are the GPU
preset's where the source does not give them; a GB200 job takes the NVLink domain NVIDIA's own benchmark launcher
asks for (held_out.nvlink_segment: 128 GPUs as 2 racks of 64; v25.05.04's scripts leave the placement to Slurm and
the rule was written after the planner had predicted these runs under both placements, so their errors say less
than the others').

Runs left out, and why: the tables of the Nemotron-4 15B and 340B reports (arXiv:2402.16819, 2406.11704), MegaScale
(arXiv:2402.15627), FP8-LM (arXiv:2310.18313), FlashAttention-2's end-to-end table (arXiv:2307.08691) and "MoE
Parallel Folding" (arXiv:2504.14960): no text of them could be read here, only abstracts and second-hand summaries.
Megatron-LM's README (its model table and scaling results are images) and its MoE README after v0.8 (the 468 TFLOPS
"as of MCore v0.9" stands beside the v0.8 mapping of held_out_runs' Mixtral run: the same configuration again).
Megatron-Bridge docs/performance-summary.md (26.08): every row MXFP8 or NVFP4 (block scaling; the planner's FP8 is
per tensor). yanring/Megatron-MoE-ModelZoo: Qwen3-235B-A22B's 94 layers on 8 or 32 pipeline stages with virtual
stages (uneven, not expressible), its FSDP row's table (TP 2, DP 128) disagrees with its launch script (TP 1), and
Mixtral 8x22B's "around 445/465 TFLOPS" are rounded expectations in a script comment. dgxc: Llama 3.1 405B (126
layers on PP 8 x VP 8, uneven under interleaving) and its 8/30/62-layer proxies; DeepSeek-V3 (multi-head latent
attention); Llama 4 Maverick (experts in every second layer); Nemotron-H (Mamba layers); the Grok-1 tables of
v24.11.1 to v25.04.01 (GPU counts that TP x PP x CP x DP do not give) and v25.05.04's 512-GB200 column (its
throughput is 8,192 x 512 / step time, half the global batch its table gives); MaxText's 512 and 1,024 GPU columns
(between the table's smallest and its 2,048); the GB200 strong-scaling tables; the releases after v25.05.04 (recipes
without figures) and the other releases before it (one release per table); the columns that repeat a held_out_runs
configuration (Llama 3 8B CP 2 on 8, Llama 3 70B TP 4 x PP 8 on 64 and GPT-3 175B TP 4 x PP 8 on 128 H100s, FP8).
JAX-Toolbox's Pax tables (rosetta/rosetta/projects/pax/README.md): the activation checkpoint policy of the table's
runs is not stated (configs.py's GPT5B saves matmul outputs without batch dimensions, its GPT175B inherits
SAVE_NOTHING, the benchmark scripts' Synthetic*Ckpt configs other policies), nor which of Transformer Engine's
layers such a policy saves; its LLaMA rows are fine-tuning (SFT, LoRA). Automodel: DeepSeek V3 and Kimi K2
(multi-head latent attention), the Nemotron V3 rows of its later versions (Mamba layers), the LoRA rows (adapters
not modelled). TinyLlama's README (24k tokens/s per A100-40GB, commit 09baa9e): Lightning Fabric's bf16-mixed FSDP
keeps and gathers the parameters in fp32, which the planner cannot express. huggingface/nanotron's
docs/benchmark_summary.svg: MFU per model size and node count, without the models' shapes, sequence length or the
FLOP count its MFU uses (its data set could not be read here). AI-Hypercomputer/gpu-recipes' training READMEs: one
"example of an entry in the logs" each, not a result stated for the recipe's configuration (the A3 Mega Llama 2 7B
README's MFU, 0.514 from 503.384 TFLOP/s of 989, is the arithmetic of another README's 508.371).

Read by held_out.py, whose table notebooks/13-plan-your-training-run.ipynb prints (docs/planner.md, "Held-out
validation").
"""

from __future__ import annotations

from ddp_lab.plan.held_out_runs import (GPT3_175B, GPT_OSS_120B, LLAMA, LLAMA2_7B, QWEN3_30B_A3B, TE, HeldOutRun,
                                        _llama3)

# ---- model shapes (the configs the sources run) ------------------------------------------------------------------
# Nemotron-4 (NeMo nemo/collections/llm/gpt/model/nemotron.py, Nemotron4Config15B/340B): squared-ReLU FFN of two
# matrices (the planner's two-matrix "gelu" kind), LayerNorm without biases, RoPE, untied; vocabulary 256,000
# (the recipes' null tokenizer)
NEMOTRON = dict(ffn_kind="gelu", norm="layernorm", bias=False, position="rope", tied_embeddings=False, dropout=False)
NEMOTRON4_15B = dict(name="nemotron4-15b", layers=32, hidden=6144, heads=48, kv_heads=8, vocab=256000, seq_len=4096,
                     ffn=24576, **NEMOTRON)
NEMOTRON4_340B = dict(name="nemotron4-340b", layers=96, hidden=18432, heads=96, kv_heads=8, vocab=256000,
                      seq_len=4096, ffn=73728, **NEMOTRON)
# Grok-1 as NeMo runs it (scripts/performance/llm/pretrain_grok1_314b.py at 6f2c6fd: MixtralConfig8x7B with 64
# layers, hidden 6144, 48 heads, 8 kv heads, FFN 32768, 8 experts, top-2; the Llama 3 tokenizer, 128,256)
GROK1_314B = dict(name="grok1-314b", layers=64, hidden=6144, heads=48, kv_heads=8, vocab=128256, seq_len=8192,
                  ffn=32768, moe=dict(experts=8, top_k=2, expert_ffn=32768), **LLAMA)
# gpt-oss-20b (openai/gpt-oss-20b config.json): gpt-oss-120b's layer with 24 layers and 32 experts, 4 per token
GPT_OSS_20B = {**GPT_OSS_120B, "name": "gpt-oss-20b", "layers": 24, "moe": dict(experts=32, top_k=4, expert_ffn=2880)}
# GPT-3 sizes of flash-attention's training configs (transformers.GPT2Config: learned positions, tied embeddings,
# dropout 0.1, GPT-2 vocabulary); the 2.7B with heads of 128 (gpt3-2.7B-flash-hdim128.yaml)
GPT3_1B3 = dict(name="gpt3-1.3b", layers=24, hidden=2048, heads=16, vocab=50257, seq_len=2048)
GPT3_2B7 = dict(name="gpt3-2.7b", layers=32, hidden=2560, heads=20, vocab=50257, seq_len=2048)
# OLMo-core's models (src/olmo_core/nn/transformer/config.py, model.py at 8c03ca8a2, at the commits below):
# llama_like blocks (SwiGLU of int(8 h / 3) rounded up to a multiple of 256, RMSNorm, no biases, RoPE, untied
# output); OLMo 2's blocks add an RMSNorm on queries and keys and move the norms after attention and FFN
# ("reordered_norm": as many norms); the vocabulary is the dolma2 tokenizer's 100,278 padded to a multiple of 128
# (padded_vocab_size): the scripts build the model at that size
OLMO_VOCAB = 100352
OLMO_1B = dict(name="olmo-1b", layers=18, hidden=2048, heads=16, vocab=OLMO_VOCAB, seq_len=4096, ffn=5632,
               qk_norm=True, **LLAMA)
OLMO_7B = dict(name="olmo-7b", layers=32, hidden=4096, heads=32, vocab=OLMO_VOCAB, seq_len=4096, ffn=11008,
               qk_norm=True, **LLAMA)
OLMO_13B = dict(name="olmo-13b", layers=40, hidden=5120, heads=40, vocab=OLMO_VOCAB, seq_len=4096, ffn=13824,
                qk_norm=True, **LLAMA)
# TransformerConfig.llama3_8B: 8 kv heads, FFN int(1.3 x 10,922) rounded up to a multiple of 1,024 = 14,336; the
# dolma2 vocabulary, not Llama 3's
OLMO_CORE_LLAMA_8B = dict(name="olmo-core-llama-8b", layers=32, hidden=4096, heads=32, kv_heads=8, vocab=OLMO_VOCAB,
                          seq_len=4096, ffn=14336, **LLAMA)

# ---- sources and what they leave unstated --------------------------------------------------------------------------
DGXC_2504 = "NVIDIA/dgxc-benchmarking {} (release v25.04.01, commit 85380ff, 2025-05-21)"
DGXC_2505 = "NVIDIA/dgxc-benchmarking {} (release v25.05.04, commit 1f6d9f4, 2025-09-04)"
NEMO_RECIPE = ("the rest from the recipe the release runs (NeMo scripts/performance and nemo/collections/llm/recipes "
               "at NeMo commit {}, which its setup.sh checks out): distributed optimizer (ZeRO-1) with the gradient "
               "reduce and parameter gather overlapped, gradients reduced in bf16, no recomputation, sequence "
               "parallelism and userbuffers TP overlap wherever TP > 1, Transformer Engine attention; FP8 = delayed "
               "(per-tensor) scaling with FP8 weights, whose halved parameter gather is not modelled")
H100_NETWORK = "; the network is not stated: the h100-sxm preset's (DGX H100, 8 x 400 Gb/s per node)"
MLPERF = ("mlcommons/training_results_v4.0 NVIDIA/results/{}/gpt3/result_0.txt (commit 6fe9543): the training "
          "blocks' tokens over their summed durations")
MLPERF_NOTE = ("; config_common.sh, config_fp8.sh and conf/custom.yaml: distributed_fused_adam (ZeRO-1) with "
               "overlapped gradient and parameter sync, 200 MB buckets (not modelled: the planner's are "
               "Megatron-Core's default), bf16 gradient sync, no recomputation, sequence parallelism, TP communication overlapped "
               "(userbuffers), Transformer Engine FP8 (hybrid, delayed scaling) with FP8 parameters (fp8_params: not "
               "modelled), dropout 0, LayerNorm1p (as LayerNorm); the SentencePiece tokenizer's vocabulary is not "
               "stated: GPT-2's 50,257 assumed; Eos's DGX H100 nodes (8 x 400 Gb/s InfiniBand): the h100-sxm preset")
NEMO_2504 = NEMO_RECIPE.format("d2b2155") + H100_NETWORK
NEMO_2505 = NEMO_RECIPE.format("6f2c6fd")
GB200_NOTE = ("; GB200 NVL72 trays of 4 GPUs (launch.sh GPUS_PER_NODE=4), the job's placement on racks not stated "
              "(held_out.nvlink_segment's 2 racks of 64); CUDA graphs on (not modelled)")
NEMOTRON_NOTE = "; RoPE on half of each head and LayerNorm1p are Nemotron's (not modelled)"
AUTOMODEL = "NVIDIA-NeMo/Automodel docs/performance-summary.md (commit {}), Pre-Training Performance, DGX-H100 BF16"
AUTOMODEL_MOE = ("examples/benchmark/configs/{}.yaml at 8d9bfb9: mock data, the fake balanced gate (balanced routing, "
                 "as the planner assumes), DeepEP dispatch and TE linears (not modelled), torch.optim.Adam; "
                 "parallelizer.apply_fsdp: the routed experts outside FSDP (EP = DP), gradients reduced in fp32")
FLASH_ATTN = ("Dao-AILab/flash-attention training/README.md (commit 0b037c2), 'Training speed', {} row: 8 x A100 80GB "
              "SXM4 in one node, batch 1M tokens")
FLASH_ATTN_NOTE = ("the README names training/configs/experiment/pile/{}.yaml for this size (assumed to be the "
                   "table's run): GPT-2 layers, DDP with ZeRO-1 (DDPStrategyZero1, adamw-zero), global batch 512 x "
                   "2,048 (the table's 1M tokens), {} sequences per GPU on 80 GB, bf16, no activation "
                   "checkpointing; the table's tokens/sec is rounded to thousands; fused MLP and "
                   "dropout-add-LayerNorm kernels, vocabulary padded to a multiple of 8 (not modelled)")

OLMO_CORE = ("allenai/OLMo-core README.md, 'Official training scripts' throughput table ('measured on a cluster with "
             "NVIDIA H100 GPUs', tokens per second per device), {} row, the figure written at commit {}; {}")
# the nightly torch each commit's Makefile installs (NIGHTLY_VERSION; the scripts launch on the nightly image)
OLMO_CORE_TORCH = {"8c03ca8a2": "2.5.0.dev20240826", "310866e45": "2.6.0.dev20241009",
                   "41400c46f": "2.6.0.dev20241009", "e27ba7455": "2.6.0.dev20241009"}
OLMO_CORE_NOTE = ("src/scripts/train/{script}.py at that commit: FSDP2 (DataParallelType.fsdp) resharding after "
                  "forward (ZeRO-3), bf16 parameters, gradients reduced in fp32 (fp32_grads), {mb} per GPU of "
                  "4,096-token sequences, global batch {gbs:,} sequences, no activation checkpointing, torch.compile "
                  "(fusion not modelled), fused AdamW, z-loss and {loss} (not modelled); attention: PyTorch's SDPA "
                  "(compiling turns llama_like's flash-attn path and fused ops off), planned as the FlashAttention-2 "
                  "class by the rule above; the Makefile's nightly torch {torch} may have run cuDNN's attention first "
                  "on H100, as 2.5.0 did until pytorch PR #138522 (attention_kernels.py): not stated, not chosen "
                  "here; the GPU count is not stated: planned on one node of 8 GPUs (the scripts' launch default, "
                  "num_nodes=1; on more nodes the scripts shard over each node's 8 GPUs and replicate across nodes, "
                  "HSDP, which the table's per-device figures do not call for); which H100s is not stated: 80 GB "
                  "SXM assumed (the "
                  "h100-sxm preset; OLMo-core's launch code lists its Jupiter cluster as 'NVIDIA H100 80GB HBM3'); "
                  "the table rounds its figures to hundreds or thousands (its 10,000 is anything from 9,500 to "
                  "10,499)")
OLMO_CORE_FP8 = ("; FP8 = the script's Float8Config (torchao Float8Linear, dynamic tensorwise scaling, FP8 "
                 "all-gather of the weights; the output layer w_out stays bf16): the planner's FP8")

JAX_TOOLBOX_MAXTEXT = ("NVIDIA/JAX-Toolbox rosetta/rosetta/projects/maxtext/README.md (commit 5a25a14, "
                       "2024-05-01), 'Configs', LLaMA table, 7B row: H100 80G SXM, BF16, 8 GPUs, BS/GPU 2, FSDP "
                       "8, step time 0.721 s, 22.19 sequences/s")
JAX_TOOLBOX_MAXTEXT_NOTE = ("scripts/example_slurm.sub at that commit (MaxText on "
                            "ghcr.io/nvidia/jax:maxtext-2024-04-15, one node): model_name=llama2-7b, "
                            "per_device_batch_size=2, max_target_length=4096, synthetic data, scan_layers=false, "
                            "attention=cudnn_flash_te with NVTE_FUSED_ATTN=1 (cuDNN's attention, flash_kernel "
                            "cudnn); remat_policy=minimal_flash saves every matmul without batch dimensions (the "
                            "projections and the FFN) and the attention output, recomputing only elementwise "
                            "work: planned as no recomputation; FSDP over the 8 GPUs gathers the weights again "
                            "for backward (ZeRO-3); MaxText's base.yml keeps the weights, and so their gradients,"
                            " in fp32 (weight_dtype) and computes in bf16; in which precision XLA gathers the "
                            "weights and reduces the gradients is not stated: planned as bf16 mixed precision "
                            "with bf16 gradients, as the DGXC MaxText rows (with fp32 gradients it is predicted "
                            "1 % slower, -10.5 %); XLA's fusion and collective pipelining not modelled" +
                            H100_NETWORK)

MAXTEXT_A3 = ("AI-Hypercomputer/maxtext MaxText/configs/a3/llama_2_7b/README.md (commit efb6d9e, 2024-04-12), "
              "'Llama2-7B' table, '1x A3 (h100-80gb-8)' row: 492 TFLOP/sec/chip; 8 GPUs, GBS 32")
MAXTEXT_A3_NOTE = ("1vm.sh at that commit: model_name=llama2-7b, ici_fsdp_parallelism=8 (FSDP over the VM's 8 "
                   "GPUs, ZeRO-3), per_device_batch_size=4, max_target_length=4096, synthetic data, "
                   "scan_layers=false, attention=cudnn_flash_te with NVTE_FUSED_ATTN=1 (cuDNN's attention), "
                   "remat_policy=minimal_flash (every matmul without batch dimensions and the attention output "
                   "saved: planned as no recomputation); the figure is MaxText's own TFLOP count "
                   "(maxtext_utils.calculate_tflops_training_per_device: 6 x parameters x tokens plus causal "
                   "attention, 6 x heads x layers x head_dim x seq per token) over the step time, turned back "
                   "into tokens per second with that count; base.yml keeps fp32 weights (weight_dtype) and, unset"
                   " by the script, computes the output layer's logits in fp32 (logits_dot_in_fp32: not "
                   "modelled); weight-gather and gradient precisions not stated: bf16 mixed precision, as the "
                   "DGXC MaxText rows; the JAX version is not stated; XLA's fusion and collective pipelining not "
                   "modelled" + H100_NETWORK)
MAXTEXT_A3_HSDP_NOTE = ("{n}vm.sh at that commit: {n} VMs (dcn_data_parallelism={n}: the VMs replicas of each "
                        "other) each with FSDP over its 8 GPUs (ici_fsdp_parallelism=8): HSDP, dp_shard 8; as "
                        "1vm.sh 4 sequences of 4,096 tokens per GPU, cudnn_flash_te, minimal_flash planned as no "
                        "recomputation, synthetic data, but with enable_profiler=true (its cost not stated) and "
                        "XLA's combine thresholds raised with the VMs (all-reduce 64 MB on 2 VMs, 512 MB on 4, 1 "
                        "GB on 8 and 16; reduce-scatter 128 MB on 16): XLA combines the shards' all-reduces into "
                        "few large ones where the planner times one per unit (not modelled); the figure turned "
                        "into tokens per second with MaxText's own TFLOP count, as the 1-VM row; gradients in "
                        "bf16 as the 1-VM row (with fp32 ones each is predicted 1.0-1.4 % slower); the A3 VMs' "
                        "network is not stated by the source: the h100-sxm preset's; XLA's fusion and collective "
                        "pipelining not modelled")
# MaxText's training FLOPs per token of Llama 2 7B at 4,096 tokens (calculate_tflops_training_per_device at efb6d9e):
# 6 x its 6,738,415,616 parameters, plus causal attention, 6 x 32 heads x 32 layers x 128 x 4,096
MAXTEXT_LLAMA2_7B_FLOPS_PER_TOKEN = 6 * 6_738_415_616 + 6 * 32 * 32 * 128 * 4096

NEMO = dict(zero=1, overlap_param_gather=True, **TE)
TP_OVERLAP = dict(sequence_parallel=True, tp_comm_overlap=True)


def _tokens_per_gpu(total: float, gpus: int) -> float:
    """Tokens per second for all a run's GPUs (the source's figure, or the one its log gives), per GPU."""
    return total / gpus


FIRST_SET: list[HeldOutRun] = [
    # ---- context parallel, H100 (dgxc v25.04.01) ---------------------------------------------------------------
    HeldOutRun("DGXC Llama 3.1 8B CP 2, 8 H100s", DGXC_2504.format("llama3.1/README.md") + ", 'Llama 3.1 8b BF16' "
               "table, 8x H100 column; 8 GPUs, GBS 128", _llama3("llama3-8b"),
               dict(dp=4, cp=2, micro_batch=1, grad_accum=32, **NEMO), "h100-sxm", "tokens_per_gpu",
               _tokens_per_gpu(85459, 8), "recipe llama3_8b (llama31_utils.py: TP 1, CP 2, MBS 1); " + NEMO_2504),
    *[HeldOutRun(f"DGXC Llama 3.1 70B TP 4 x PP 4 x CP 2, {gpus:,} H100s", DGXC_2504.format("llama3.1/README.md") +
                 f", 'Llama 3.1 70b BF16' table, {gpus}x H100 column; {gpus:,} GPUs, GBS {gbs:,}",
                 _llama3("llama3-70b"), dict(dp=dp, tp=4, pp=4, cp=2, micro_batch=1, grad_accum=64,
                                             schedule="interleaved", virtual_stages=5, **TP_OVERLAP, **NEMO),
                 "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(total, gpus),
                 "recipe llama3_70b (llama31_utils.py: TP 4, PP 4, CP 2, VP 5 for BF16); " + NEMO_2504)
      for gpus, gbs, dp, total in ((64, 128, 2, 71526), (2048, 4096, 64, 2288843))],
    # ---- dense, H100, TP 4-8 (dgxc v25.04.01) ------------------------------------------------------------------
    HeldOutRun("DGXC Llama 3.1 70B TP 4 x PP 8, 2,048 H100s, FP8", DGXC_2504.format("llama3.1/README.md") +
               ", 'Llama 3.1 70b FP8' table, 2048x H100 column; 2,048 GPUs, GBS 4,096", _llama3("llama3-70b"),
               dict(dp=64, tp=4, pp=8, micro_batch=1, grad_accum=64, schedule="interleaved", virtual_stages=5,
                    precision="fp8", **TP_OVERLAP, **NEMO), "h100-sxm", "tokens_per_gpu",
               _tokens_per_gpu(3305855, 2048),
               "recipe llama3_70b (llama31_utils.py: PP 8, CP 1 for FP8); " + NEMO_2504),
    *[HeldOutRun(f"DGXC Nemotron-4 340B TP 8 x PP 8, {gpus:,} H100s{label}", DGXC_2504.format("nemotron/README.md") +
                 f", 'Nemotron4 340b {table}' table, {gpus}x H100 column; {gpus:,} GPUs, GBS {gbs:,}",
                 NEMOTRON4_340B, dict(dp=dp, tp=8, pp=8, micro_batch=1, grad_accum=16, schedule="interleaved",
                                      virtual_stages=12, **TP_OVERLAP, **NEMO, **precision),
                 "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(total, gpus),
                 "recipe nemotron4_340b (launch.sh: TP 8, PP 8, VP 12, MBS 1); " + NEMO_2504 + NEMOTRON_NOTE)
      for label, table, precision, gpus, gbs, dp, total in (
          ("", "BF16", {}, 256, 64, 4, 60125), ("", "BF16", {}, 2048, 512, 32, 473398),
          (", FP8", "FP8", dict(precision="fp8"), 256, 64, 4, 89469),
          (", FP8", "FP8", dict(precision="fp8"), 2048, 512, 32, 687591))],
    *[HeldOutRun(f"DGXC GPT-3 175B TP 4 x PP 8, {gpus:,} H100s{label}", DGXC_2504.format("nemo_megatron/README_175b.md")
                 + f", 'NeMo Megatron {table}' table, {gpus}x H100 column; {gpus:,} GPUs, GBS {gbs:,}", GPT3_175B,
                 dict(dp=dp, tp=4, pp=8, micro_batch=1, grad_accum=64, schedule="interleaved", virtual_stages=6,
                      **TP_OVERLAP, **NEMO, **precision),
                 "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(total, gpus),
                 "NeMo 24.12's launcher config (cfg/gpt3_175b_hydra.yaml): distributed_fused_adam (ZeRO-1) with "
                 "overlapped parameter sync, bf16 gradient sync, no recomputation, sequence parallelism, "
                 "ub_tp_comm_overlap, Transformer Engine (NVTE_FUSED_ATTN=1), dropout 0.1, fp8_params (FP8 runs); "
                 "GPT-2 vocabulary padded to 128 (not modelled)" + H100_NETWORK)
      for label, table, precision, gpus, gbs, dp, total in (
          ("", "BF16", {}, 128, 256, 4, 63099), ("", "BF16", {}, 2048, 4096, 64, 988057),
          (", FP8", "FP8", dict(precision="fp8"), 2048, 4096, 64, 1407485))],
    # ---- dense, H100, TP 4, FP8 (MLPerf Training v4.0) -------------------------------------------------------------
    *[HeldOutRun(f"MLPerf GPT-3 175B TP 4 x PP {pp}, {gpus:,} H100s, FP8", MLPERF.format(system) +
                 f"; {gpus:,} GPUs, GBS {gbs:,}",
                 {**GPT3_175B, "dropout": False},
                 dict(dp=dp, tp=4, pp=pp, micro_batch=micro_batch, grad_accum=grad_accum, schedule="interleaved",
                      virtual_stages=virtual, precision="fp8", **TP_OVERLAP, **NEMO),
                 "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(tokens / seconds, gpus),
                 f"{config}: TP 4, PP {pp}, interleaved {virtual}, micro-batch {micro_batch}" +
                 (", CUDA graphs of each layer (LAYER_CUDA_GRAPH=1, not modelled)" if gpus > 512 else
                  "; its MINIBS=128 (GBS 2,048) was overridden at launch: the log's GBS 2,304 and gradient "
                  "accumulation 72 are planned") + MLPERF_NOTE)
      for system, config, gpus, pp, virtual, dp, micro_batch, grad_accum, gbs, tokens, seconds in (
          ("eos_n64_ngc24.04_nemo", "config_DGXH100_64x8x128x4x8_mbs2.sh", 512, 8, 4, 16, 2, 72, 2304,
           1_245_708_288, 2878.141),
          ("eos-dfw_n1344_ngc24.04_nemo", "config_DGXH100_1344x8x6x4x6_mbs1_cg.sh", 10752, 6, 8, 448, 1, 6, 2688,
           1_211_105_280, 202.980),
          ("eos-dfw_n1452_ngc24.04_nemo", "config_DGXH100_1452x8x6x4x6_mbs1_cg.sh", 11616, 6, 8, 484, 1, 6, 2904,
           1_231_110_144, 191.316))],
    # ---- data-parallel (TP 2, FSDP), H100 (dgxc v25.04.01) -----------------------------------------------------
    *[HeldOutRun(f"DGXC Nemotron-4 15B TP 2, {gpus:,} H100s{label}", DGXC_2504.format("nemotron/README.md") +
                 f", 'Nemotron4 15b {table}' table, {gpus}x H100 column; {gpus:,} GPUs, GBS {gbs:,}",
                 NEMOTRON4_15B, dict(dp=dp, tp=2, micro_batch=2, grad_accum=4, **TP_OVERLAP, **NEMO, **precision),
                 "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(total, gpus),
                 "recipe nemotron4_15b (launch.sh: TP 2, MBS 2, GBS 4 per GPU); " + NEMO_2504 + NEMOTRON_NOTE)
      for label, table, precision, gpus, gbs, dp, total in (
          ("", "BF16", {}, 16, 64, 8, 98550), ("", "BF16", {}, 2048, 8192, 1024, 12069940),
          (", FP8", "FP8", dict(precision="fp8"), 16, 64, 8, 132396),
          (", FP8", "FP8", dict(precision="fp8"), 2048, 8192, 1024, 16054752))],
    *[HeldOutRun(f"DGXC MaxText Llama 3 70B {'FSDP' if gpus == 128 else 'HSDP 128 x 16'}, {gpus:,} H100s{label}",
                 DGXC_2504.format("maxtext/README_70b.md") + f", 'Maxtext Llama3 70b {table}' table, {gpus}x H100 "
                 f"column; {gpus:,} GPUs, GBS {2 * gpus:,}", _llama3("llama3-70b"),
                 dict(dp=gpus, zero=3, micro_batch=2, recompute="full", flash_kernel="cudnn", **precision,
                      **({} if gpus == 128 else dict(dp_shard=128))),
                 "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(total, gpus),
                 ("configure.sh (JAX 25.01-maxtext): FSDP over all 128 GPUs (ici 8 x dcn 16), " if gpus == 128 else
                  "configure.sh (JAX 25.01-maxtext), from 64 nodes on: FSDP over groups of 128 GPUs (ici 8 x dcn "
                  "16), the 16 groups replicas (dcn_data_parallelism 16): HSDP, dp_shard 128; ") +
                 "2 sequences per GPU, "
                 "synthetic data, attention=cudnn_flash_te; remat_policy save_qkv_proj keeps only the Q, K, V "
                 "projections and recomputes the rest (about 90 % of a layer's matmuls): planned as full "
                 "recomputation; quantization=fp8 for FP8, its scaling not stated (the planner's FP8); the "
                 "precisions in which XLA gathers the weights and reduces the gradients not stated (MaxText's "
                 "base.yml keeps fp32 weights): bf16 mixed precision; XLA's fusion and collective pipelining not "
                 "modelled" + H100_NETWORK)
      for label, table, precision, gpus, total in (
          ("", "BF16", {}, 128, 134752.43), (", FP8", "FP8", dict(precision="fp8"), 128, 231116.60),
          ("", "BF16", {}, 2048, 2110607.12), (", FP8", "FP8", dict(precision="fp8"), 2048, 3592936.29))],
    # ---- mixture of experts, coarse (dgxc v25.05.04) ------------------------------------------------------------
    *[HeldOutRun(f"DGXC Grok-1 314B TP 4 x PP 8 x CP 2 x EP 8, 512 H100s{label}", DGXC_2505.format(
                     "grok1/README.md") + f", 'Grok1 314b {table}' table, 512x H100 column; 512 GPUs, GBS 1,024",
                 GROK1_314B, dict(dp=8, tp=4, pp=8, cp=2, ep=8, expert_tp=1, micro_batch=1, grad_accum=128,
                                  schedule="interleaved", virtual_stages=8, **TP_OVERLAP, **NEMO, **precision),
                 "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(total, 512),
                 "the table gives ETP 1 (experts over tp x cp x dp / 1 = 64 ranks, EP 8); MegatronTokenDropCallback: "
                 "capacity factor 1 with padding, so each expert computes its balanced share; " + NEMO_2505
                 + H100_NETWORK)
      for label, table, precision, total in (("", "BF16", {}, 526493), (", FP8", "FP8", dict(precision="fp8"),
                                                                      624478))],
    # ---- mixture of experts, fine-grained (Automodel) -----------------------------------------------------------
    HeldOutRun("Automodel Qwen3-30B-A3B FSDP x EP 8, 8 H100s", AUTOMODEL.format("8d9bfb9") + ", 'Qwen3 MoE 30B' row; "
               "8 GPUs, GBS 512", QWEN3_30B_A3B,
               dict(dp=8, ep=8, zero=2, micro_batch=4, grad_accum=16, recompute="full", checkpoint_early_stop=True,
                    fp32_grads=True, **TE), "h100-sxm", "tokens_per_gpu", 12040,
               AUTOMODEL_MOE.format("qwen3_moe_30b_te_deepep") + "; FSDP2 without resharding after forward (ZeRO-2); "
               "each block in PyTorch's non-reentrant checkpoint (full recomputation, early stop); TE attention; "
               "enable_fsdp_optimization (not modelled)"),
    HeldOutRun("Automodel gpt-oss-20b FSDP x EP 8, 8 H100s", AUTOMODEL.format("8d9bfb9") + ", 'GPT-OSS 20B' row; "
               "8 GPUs, GBS 256", GPT_OSS_20B,
               dict(dp=8, ep=8, zero=2, micro_batch=2, grad_accum=16, recompute="full", checkpoint_early_stop=True,
                    fp32_grads=True), "h100-sxm", "tokens_per_gpu", 13058,
               AUTOMODEL_MOE.format("gptoss_20b_te_deepep") + "; the table prints EP '-', the config sets ep_size 8; "
               "FSDP2 without resharding after forward (ZeRO-2); each block in PyTorch's non-reentrant checkpoint "
               "(full recomputation, early stop); FlexAttention; the sliding-window half of the layers and the "
               "attention sinks are charged full attention"),
    HeldOutRun("Automodel gpt-oss-120b FSDP x EP 64, 64 H100s", AUTOMODEL.format("8d9bfb9") + ", 'GPT-OSS 120B' row; "
               "64 GPUs, GBS 512", GPT_OSS_120B,
               dict(dp=64, ep=64, zero=3, micro_batch=2, grad_accum=4, fp32_grads=True),
               "h100-sxm", "tokens_per_gpu", 7626,
               AUTOMODEL_MOE.format("gptoss_120b_te_deepep") + "; the table prints EP '-', the config sets ep_size "
               "64; FSDP2 resharding after forward (ZeRO-3), no activation checkpointing; FlexAttention; the "
               "sliding-window half of the layers and the attention sinks are charged full attention"),
    # ---- context parallel with FSDP, H100 (Automodel) ------------------------------------------------------------
    HeldOutRun("Automodel Llama 3.1 70B FSDP 32 x CP 2, 64 H100s", AUTOMODEL.format("2013a4d") + ", 'Llama3 70B' row; "
               "64 GPUs, GBS 128", _llama3("llama3-70b"),
               dict(dp=32, cp=2, zero=3, micro_batch=1, grad_accum=4, recompute="full", checkpoint_early_stop=True),
               "h100-sxm", "tokens_per_gpu", 866.77,
               "examples/llm_pretrain/custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml at 2013a4d: FSDP2 with "
               "weight prefetch, resharding after forward (ZeRO-3), gradients reduced in bf16 (FSDP2Config's "
               "policy); activation checkpointing wraps each layer's attention and MLP in PyTorch's non-reentrant "
               "checkpoint (full recomputation, early stop; the norms not wrapped); SDPA attention; torch.compile "
               "(fusion not modelled); mock data"),
    # ---- Blackwell: GB200 (dgxc v25.05.04) ------------------------------------------------------------------------
    *[HeldOutRun(f"DGXC Nemotron-4 340B TP 8 x PP 4, 128 GB200s{label}", DGXC_2505.format("nemotron/README.md") +
                 f", 'Nemotron 340b {table} GB200' table, 128x GB200 column; 128 GPUs, GBS 32", NEMOTRON4_340B,
                 dict(dp=4, tp=8, pp=4, micro_batch=1, grad_accum=8, schedule="interleaved", virtual_stages=12,
                      **TP_OVERLAP, **NEMO, **precision), "gb200", "tokens_per_gpu", _tokens_per_gpu(total, 128),
                 "launch.sh: TP 8, PP 4, VP 12, MBS 1, GBS GPUs / 4; " + NEMO_2505 + GB200_NOTE + NEMOTRON_NOTE)
      for label, table, precision, total in (("", "BF16", {}, 59877), (", FP8", "FP8", dict(precision="fp8"), 88383))],
    *[HeldOutRun(f"DGXC Grok-1 314B TP 4 x EP 8, 128 GB200s{label}", DGXC_2505.format("grok1/README.md") +
                 f", 'Grok1 314b {table}' table, 128x GB200 column; 128 GPUs, GBS 256", GROK1_314B,
                 dict(dp=32, tp=4, ep=8, micro_batch=1, grad_accum=8, **TP_OVERLAP, **NEMO, **precision),
                 "gb200", "tokens_per_gpu", _tokens_per_gpu(total, 128),
                 "the table gives ETP 4 (the attention's TP); MegatronTokenDropCallback: capacity factor 1 with "
                 "padding, so each expert computes its balanced share; " + NEMO_2505 + GB200_NOTE)
      for label, table, precision, total in (("", "BF16", {}, 286300.61), (", FP8", "FP8", dict(precision="fp8"),
                                                                         395838.43))],
    # ---- data-parallel, A100 (flash-attention) ---------------------------------------------------------------------
    HeldOutRun("FlashAttention GPT-3 1.3B, 8 A100s", FLASH_ATTN.format("GPT3-1.3B") + "; 8 GPUs, GBS 512", GPT3_1B3,
               dict(dp=8, zero=1, micro_batch=8, grad_accum=8), "a100-80gb", "tokens_per_gpu",
               _tokens_per_gpu(169000, 8), FLASH_ATTN_NOTE.format("gpt3xl-flash", 8)),
    HeldOutRun("FlashAttention GPT-3 2.7B, 8 A100s", FLASH_ATTN.format("GPT3-2.7B") + "; 8 GPUs, GBS 512", GPT3_2B7,
               dict(dp=8, zero=1, micro_batch=4, grad_accum=16), "a100-80gb", "tokens_per_gpu",
               _tokens_per_gpu(85000, 8), FLASH_ATTN_NOTE.format("gpt3-2.7B-flash-hdim128", 4)),
    # ---- FSDP/data-parallel, H100 (OLMo-core) -----------------------------------------------------------------------
    *[HeldOutRun(f"OLMo-core {size}, 8 H100s{label}", OLMO_CORE.format(
                     f"'{size}' {table}", commit, f"no GPU count stated (planned on one node): 8 GPUs, GBS {gbs:,}"),
                 model, dict(dp=8, zero=3, micro_batch=mb, grad_accum=gbs // (8 * mb), fp32_grads=True, **precision),
                 "h100-sxm", "tokens_per_gpu", published,
                 OLMO_CORE_NOTE.format(script=script, mb=f"{mb} sequence{'s' if mb > 1 else ''}", gbs=gbs, loss=loss,
                                       torch=OLMO_CORE_TORCH[commit]) + (OLMO_CORE_FP8 if precision else ""))
      for size, model, script, mb, gbs, loss, rows in (
          ("1B", OLMO_1B, "OLMo-1B", 8, 1024, "the compiled loss", (
              ("", "BF16", {}, 55000, "e27ba7455"), (", FP8", "BF16/FP8", dict(precision="fp8"), 65000, "e27ba7455"))),
          ("7B", OLMO_7B, "OLMo-7B", 2, 1024, "the fused loss", (
              ("", "BF16", {}, 10000, "8c03ca8a2"), (", FP8", "BF16/FP8", dict(precision="fp8"), 13000, "8c03ca8a2"))),
          ("8B Llama", OLMO_CORE_LLAMA_8B, "Llama-8B", 2, 1024, "the fused loss", (
              ("", "BF16", {}, 9500, "41400c46f"), (", FP8", "BF16/FP8", dict(precision="fp8"), 12500, "41400c46f"))),
          ("13B", OLMO_13B, "OLMo-13B", 1, 2048, "the fused loss", (
              ("", "BF16", {}, 4600, "8c03ca8a2"), (", FP8", "BF16/FP8", dict(precision="fp8"), 5500, "310866e45"))))
      for label, table, precision, published, commit in rows],
    # ---- FSDP/data-parallel, H100 (JAX-Toolbox MaxText) ----------------------------------------------------------
    HeldOutRun("JAX-Toolbox MaxText Llama 2 7B FSDP, 8 H100s", JAX_TOOLBOX_MAXTEXT + "; 8 GPUs, GBS 16",
               LLAMA2_7B, dict(dp=8, zero=3, micro_batch=2, grad_accum=1, **TE), "h100-sxm", "tokens_per_gpu",
               _tokens_per_gpu(22.19 * 4096, 8), JAX_TOOLBOX_MAXTEXT_NOTE),
    HeldOutRun("MaxText A3 Llama 2 7B FSDP, 8 H100s", MAXTEXT_A3, LLAMA2_7B,
               dict(dp=8, zero=3, micro_batch=4, grad_accum=1, **TE), "h100-sxm", "tokens_per_gpu",
               492e12 / MAXTEXT_LLAMA2_7B_FLOPS_PER_TOKEN, MAXTEXT_A3_NOTE),
    *[HeldOutRun(f"MaxText A3 Llama 2 7B HSDP 8 x {vms}, {8 * vms} H100s",
                 MAXTEXT_A3.replace("'1x A3 (h100-80gb-8)' row: 492", f"'{vms}x A3 (h100-80gb-8)' row: {tflops}")
                 .replace("8 GPUs, GBS 32", f"{8 * vms} GPUs, GBS {32 * vms}"), LLAMA2_7B,
                 dict(dp=8 * vms, zero=3, dp_shard=8, micro_batch=4, grad_accum=1, **TE), "h100-sxm", "tokens_per_gpu",
                 tflops * 1e12 / MAXTEXT_LLAMA2_7B_FLOPS_PER_TOKEN, MAXTEXT_A3_HSDP_NOTE.format(n=vms))
      for vms, tflops in ((2, 422), (4, 407), (8, 409), (16, 375))],
]

# ---- the second set: written down before the planner predicted any of them (module docstring) -------------------
SECOND_SET: list[HeldOutRun] = []
RUNS: list[HeldOutRun] = FIRST_SET + SECOND_SET

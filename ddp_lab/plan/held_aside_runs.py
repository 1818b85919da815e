"""Published training runs kept aside while the planner is modelled: the held-aside set (held_out.py scores it).

These runs come from sources that neither the planner's calibration set (published.py) nor the development runs
(held_out_runs.py) use. They came in nineteen sets: FIRST_SET, predicted and looked at from 2026-11 to 2026-12-06, and
SECOND_SET, chosen and written down on 2026-12-06 after the kernel rate (fit_to_run.at_kernel_rate) was added and
before the planner predicted any of them; the first set's runs that the kernel rate changes are development runs
since (held_out.py). THIRD_SET was written down after uneven stages under interleaving were modelled
(pipeline_stages.py), before the planner predicted its runs. FOURTH_SET was written down after uneven stages were
modelled for MoE models too, before the planner predicted its runs (its runs are development runs since the per-node
MoE dispatch was modelled with their errors seen: held_out.py). FIFTH_SET was written down after MLPerf Training
v6.0's gpt_oss_20b results were surveyed, before the planner predicted its runs. SIXTH_SET (NVIDIA's skills
repository's BF16 Qwen3-30B-A3B run) was written down after a search for MoE runs from sources not used yet, before
the planner predicted it, and SEVENTH_SET (the MoE rows of the NeMo Framework user guide's performance pages) after
another such search, before the planner predicted it. EIGHTH_SET (dgxc's DeepSeek-V3 table) was written down after
the planner modelled multi-head latent attention and multi-token prediction, before it predicted the set's GB200
run; its H100 run had been planned once by then (held_out.SEEN_BEFORE_WRITTEN_DOWN: a development run). NINTH_SET
(the fine-grained MoE rows of Megatron-Bridge's 26.08 table, MXFP8 on GB200s) was written down after the planner
learned MXFP8 (precision.py), before it predicted the set; its Qwen3-30B-A3B run had been planned once by then. Once
predicted, the set was found to repeat the development runs' source (below): all its runs are development runs
(held_out.REPEATS_DEVELOPMENT_SOURCE). TENTH_SET (MLPerf Training v6.0's gpt_oss_20b submissions on B200s in
MXFP8) was written down after that, by the fifth set's rules, before the planner predicted it, and ELEVENTH_SET (the
same round's DeepSeek-V3 submissions on GB200s) after the tenth had been predicted, by the same rules, before the
planner predicted any of its runs. TWELFTH_SET (the same round's LLM submissions on B300s and GB300s: gpt-oss-20b
and DeepSeek-V3, in MXFP8) was written down after the planner was given B300 and GB300 presets from their
datasheets, by the same rules, before it predicted any of its runs; a review found one run picked against the rules
(HPE's 32 GB300s for its 72, predicted once by then) and the right one took its place before it was predicted.
THIRTEENTH_SET (the MoE recipe index of Megatron-LM's dev branch, examples/moe_recipes: Qwen3-30B-A3B,
Qwen3-235B-A22B and DeepSeek-V3 from H100s to GB300s, BF16 and MXFP8) was written down after a search for MoE runs
from sources not used yet, before the planner predicted any of its runs; its figures are Megatron's TFLOP/s,
turned into tokens per second with the FLOP count of the code that logs them. FOURTEENTH_SET (MLPerf Training v5.0
and v5.1's LLM pretraining submissions on H200s, by any submitter) was written down after the thirteenth set had been
predicted, when no held-aside run was on H200s, before the planner predicted any of its runs.
FIFTEENTH_SET (the rest of MLPerf Training v5.0 and v5.1's LLM pretraining submissions, by any submitter, on a GPU
with a preset and in a precision the planner expresses) was written down after the fourteenth set had been predicted,
by a rule fixed before any of its logs was read, before the planner predicted any of its runs.
SIXTEENTH_SET (MLPerf Training v3.0 to v4.1's GPT-3 175B submissions by organisations other than NVIDIA alone, on a
GPU with a preset and in a precision the planner expresses) was written down after the fifteenth had been predicted,
by a rule fixed before any of its logs was read, before the planner predicted any of its runs.
SEVENTEENTH_SET (MLPerf Training v6.0's Llama 3.1 8B and 405B submissions, by any submitter, on a GPU with a preset
that no earlier set read for them, H100, H200, B200 or GB200, in a precision the planner expresses) was written down
after the sixteenth had been predicted, by a rule fixed before any of its logs was read, before the planner predicted
any of its runs; a review found a run the rule admits that the survey had missed (SCITIX's 64 B200s), written down
after the rest of the set was predicted and before it was predicted.
EIGHTEENTH_SET (the bounded pretraining runs of Megatron-Bridge's model verification cards: Qwen3-8B, gpt-oss-20b and
gpt-oss-120b on H100s in BF16) was written down after the seventeenth had been predicted, by a rule fixed before any of
its figures was compared with a prediction, before the planner predicted any of its runs (a review of the set
against the recipes, before the prediction, corrected the gpt-oss runs' vocabulary to the tokenizer's, which their
recipes' commits train at). Megatron-Bridge is the
framework of development runs too (the tables of its performance-summary-archive.md) and of the ninth set (its
performance-summary.md); the cards are another document of the repository, and their pretrain items run its
functional recipes (recipes/*), not the performance recipes (perf_recipes/*) whose figures those tables publish. So
the rule reads documents, as it did for the thirteenth set (Megatron-LM's recipe index, where the development runs
read its MoE README).
NINETEENTH_SET (the "Long Context" table of the Megatron-Core MoE team's ModelZoo: Qwen3-235B-A22B at 16K to 128K tokens
on 256 H100s, TP 4 with CP 1 to 8, BF16) was written down after the eighteenth had been predicted, by a rule fixed
before any of its figures was compared with a prediction, before the planner predicted any of its runs. Its readme is
the one whose 4K table the fourth set read, whose runs are development runs since; the table was measured later, at
longer sequences (its 16K row on the fourth set's TP 4 x EP 8 x PP 8 layout), and no error of its runs had been seen
(as the sets that read MLPerf v6.0's copy after some of its runs had moved). The fourth set had left it out for its
TFLOP/s-only figures and its recomputation of the MoE layer; the first is turned into tokens per second with the FLOP
count of the code that logs them, as the thirteenth set's, the second planned by the rule for partial recomputation.
Every set was chosen and written down before the planner predicted any of its runs (but for the eighth set's H100
run and the ninth set's Qwen3-30B-A3B run; the twelfth set's and the fifteenth set's run that replaced a run taken
against the rules, and the seventeenth set's run that its survey missed, were written down after the rest of their
set was predicted, and before they were), and they are kept aside while it is modelled: their errors are looked at
once, at the end (held_out.py says what moves a run to the development part). Each run is recorded as its source
states it: the model shape, the parallel layout, the batch and micro-batch, the sequence, the GPUs, the precision
and the published figure; each run's `source` ends with the GPU count and global batch its source gives ("N GPUs,
GBS B"; where it gives no GPU count, the one planned, and says so). A setting the table leaves out is read from the
configuration the same source ships for that run (named in the note); what neither states is assumed by the rules
below, never chosen to bring a prediction closer. Where a source gives tokens per second for all its GPUs,
`published` is that figure over the GPU count, written as the division.

Sources:
    dgxc        NVIDIA/dgxc-benchmarking (NVIDIA's DGX Cloud benchmarking recipes), the "Expected Performance"
                tables of release v25.04.01 (commit 85380ff, H100s: NeMo 25.02.01's recipes at NeMo commit
                d2b2155, NeMo 24.12's launcher for GPT-3, MaxText 25.01) and, for what that release lacks
                (GB200s; Grok-1 with its expert tensor-parallel size given), release v25.05.04 (commit 1f6d9f4,
                NeMo 25.04.00's recipes at NeMo commit 6f2c6fd; DeepSeek-V3: NeMo 25.04.01's at NeMo commit
                7a8f1cc); the launch scripts and configs of those commits
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
    Second set (added after the planner's mechanics and constants, the kernel rate among them, were fixed):
    mlperf-v3   mlcommons/training_results_v3.0 (commit 63e326c, 2023-08-10; results uploaded in 9f08e30, 2023-06-19)
                and mlcommons/training_results_v3.1 (commit d06288b, 2025-01-14; results uploaded in f33f944,
                2023-11-07, the GPT-3 files unchanged since but for the Dockerfile's JET line): NVIDIA's closed-division
                GPT-3 175B submissions, all on DGX H100 (8 x 400 Gb/s InfiniBand per node): v3.0 on 64 and 96 nodes
                (NeMo v1.17.0 on PyTorch 23.04, Transformer Engine release_v0.8, flash-attn 1.x), v3.1 on Eos (64, 96
                nodes) and Eos-dfw (512 to 1,344 nodes; NeMo bd0b818 on r1.20.0, PyTorch 23.09, Transformer Engine
                09ba842, flash-attn 2.0.8), each with the config_DGXH100_*.sh of its node count, config_common.sh,
                config_fp8.sh (v3.0's config_tp_h100.sh, run_and_time.sh and conf/megatron_gpt_config.yaml; v3.1's
                conf/custom.yaml and conf/optim/distributed_fused_adam.yaml) of
                NVIDIA/benchmarks/gpt3/implementations/pytorch, the Dockerfile and requirements.txt, and its result log
    mlperf-4.1  mlcommons/training_results_v4.1 (results commit 8821c70, 2024-11-13; repository HEAD b87b9e3): NVIDIA's
                closed-division GPT-3 175B submissions on Eos (DGX H100, NeMo 24.09), each with the config_DGXH100_*.sh
                its README-<system>.md names, config_common.sh, config_fp8.sh, conf/custom.yaml and
                conf/optim/distributed_fused_adam.yaml, and its result log
    mlperf-5.1  mlcommons/training_results_v5.1 (results commit 4da2d1c, 2025-11-05; repository HEAD 441d65f): NVIDIA's
                closed-division Llama 3.1 8B pretraining submissions on Tyche (GB200 NVL72, NeMo 25.09), each with the
                config_GB200_*_8b.sh its README-<system>.md names, the config_common*.sh, conf/custom.yaml and
                pretrain.py of NVIDIA/benchmarks/llama31_8b/implementations/nemo, and its result log
    internlm    InternLM/InternLM doc/en/train_performance.md, "Throughput Measurement" (TGS, tokens per GPU per second,
                InternLM-7B on nvidia_a100-sxm4-80gb nodes linked by 4 x 100 Gb RoCE), written at commit fa7337b
                (2023-07-06) and read at c18bec9 (2023-07-08), with the configs/7B_sft.py, train.py and internlm/
                (model, hybrid ZeRO optimizer) of c18bec9: InternLM's own trainer, flash-attn 1.0.8 layers with
                Megatron-style column/row tensor parallelism
    mega-llama  alibaba/Megatron-LLaMA README.md (commit d2e05b8, 2023-09-04: Megatron-LM with Alibaba's
                OverlappedDistributedOptimizer), the LLaMA-13b table (32 A100 80GB), with the
                examples/LLaMA/LLaMA_13_slurm.sh and megatron/ code of the same commit
    llm.c       karpathy/llm.c scripts/run_gpt2_1558M.sh (commit c6efd90, 2024-07-02): the step time its header comment
                gives for 8 H100 80GB SXM in one node, with the train_gpt2.cu, llmc/zero.cuh and Makefile of the same
                commit (hand-written C/CUDA on cuBLASLt and cuDNN, MPI + NCCL; no framework)
    torchao     pytorch/ao torchao/float8/README.md (commit 8c81863ba, 2025-03-12), "Training benchmarks": torchtitan
                0.0.2 on 8 H100s, launched by benchmarks/float8/training/float8_training_benchmark.sh and parsed by
                parse_torchtitan_logs.py of the same commit; the table names no torchtitan commit, so its llama3_8b.toml
                and config defaults are read at torchtitan 54ef42221 (2025-03-12, version 0.0.2); the stack is
                torchtitan's (which the development runs use), this table and its configuration (batch 1 per GPU) are
                not
    Third set:
    mlperf-5.0  mlcommons/training_results_v5.0 (commit 0fdc28f, 2025-05-30, the repository's only commit): NVIDIA's
                closed-division Llama 3.1 405B pretraining submissions on Eos-dfw (DGX H100 nodes, 8 x ConnectX-7 NDR
                400 Gb/s InfiniBand per node; NeMo v2.2.0 on PyTorch 25.01 with Megatron-Core core_r0.11.0), each with
                the config_DGXH100_*.sh its README-<system>.md names, config_common.sh, conf/custom.yaml,
                conf/tp_overlap/h100tp8mbs1.yaml, pretrain.py and the Dockerfile of
                NVIDIA/benchmarks/llama31_405b/implementations/<system>, and its result log; the model's vocabulary from
                the reference's "Model details" table (mlcommons/training
                large_language_model_pretraining/nemo/README.md at 637c82f); the uneven stages read in Megatron-LM's
                transformer_block.py at the tag core_r0.11.0 (7c00175)
    Fourth set:
    modelzoo    yanring/Megatron-MoE-ModelZoo (the Megatron-Core MoE team's benchmark scripts),
                examples/qwen3/readme.md, "Performance Results" (256 H100s, NVLink 4, InfiniBand 8 x 50 GB/s per node;
                Qwen3-235B-A22B, BF16), written at commit 8017e11 (2025-05-27) and unchanged since (moved to
                best_practice/qwen3/readme.md at 38ce2ed), with the examples/qwen3/run_235b.sh, sbatch_benchmarking.sh,
                runtime_configs/benchmarking/{common,runtime}.conf, model_configs/benchmarking/Qwen3-235B-A22B.yaml and
                dockers/Dockerfile of 8017e11: Megatron-LM (pretrain_gpt.py, Megatron-Core) with Transformer Engine
                release_v2.2 and DeepEP on nvcr.io/nvidia/pytorch:25.02-py3; each row names its Megatron-LM code: main
                at 1e057005 or the branch moe_dev at f3e6c5 (not in NVIDIA/Megatron-LM's public history: its defaults
                and stage split read at 1e057005)
    Fifth set:
    mlperf-6.0  mlcommons/training_results_v6.0, as the copy Richardyu114/training_results_v6.0 holds it (commit
                eabf23a; every file named here read there): Cisco's closed-division gpt-oss-20b
                pretraining submissions on Zeus (H100-SXM5-80GB nodes, 8 x ConnectX-8 400 Gb/s RoCE per node,
                rail-optimized; systems/Zeus_{8,16}xH100_SXM_80GB.json), each with the config_DGXH100_*.sh of its
                node count, config_common.sh, conf/gpt_oss.yaml, conf/tp_overlap/h100tp2mbs1.yaml, pretrain.py and
                the Dockerfile (nvcr.io/nvidia/pytorch:26.04-py3, Megatron-Bridge 4b4b5c9 with Megatron-Core
                2436e3d, a Transformer Engine fork at branch pad_weight_scale_inv, DeepEP hybrid-ep 34152ae) of
                Cisco/benchmarks/gpt_oss_20b/nemo, and its result log; the benchmark's sequence and data (Llama 3.1
                tokenization of C4) from the reference (mlcommons/training gpt_oss_20b/primus/README.md at 275b232)
    Sixth set:
    nvidia-skills  NVIDIA/skills (commit 7149a88, 2026-08-20; the files last changed at eeeff9d, 2026-08-11): the
                Megatron-Bridge MoE performance skills' measured A/B of EP overlap on Qwen3-30B-A3B, 16 H100s, BF16
                (skills/nemo-mbridge-perf-moe-comm-overlap/SKILL.md, and card.yaml of
                skills/nemo-mbridge-perf-moe-hardware-configs), the row without overlap; not a release table: a
                controlled comparison with its steady window (iterations 5-20) stated

    Seventh set:
    nemo-docs   the NVIDIA NeMo Framework user guide's "Performance Summary" pages on docs.nvidia.com
                (nemo-framework/user-guide/latest/performance/), three versions as read here: "Container:
                NeMo 25.02, System: DGX-B200" (performance_summary.html), "Container: NeMo 25.04, System: DGX-GB200"
                (archive/25.04-performance-summary.html) and "Container: NeMo 25.07, System: DGX-GB200"
                (performance-summary.html), each table's FP8 pre-training rows; with the recommended model configs,
                recipes and performance scripts of NVIDIA/NeMo at the tag of each release: r2.2.0 (132f217,
                25.02; scripts/llm/performance/), r2.3.0 (ca0af5e, 25.04) and r2.4.0 (25.07;
                scripts/performance/). The NeMo repository's own
                docs/source/performance/performance_summary.md, which held_out_runs.py uses, stops at 24.07 and has no
                MoE row: these pages are later tables of the same series, and no configuration of held_out_runs is
                repeated

    Ninth set:
    mbridge-2608  NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md, "26.08 NeMo Container", Pre-Training
                Performance (last changed at 4ab94dfad, 2026-08-11; read at 067f987df, 2026-08-22), its DGX-GB200
                MXFP8 rows of models with more than 16 experts (DeepSeekV3, GPT OSS 120B, Qwen3_30B_a3B,
                Qwen3_235B_a22B), each with the performance recipe the page names (src/megatron/bridge/perf_recipes/,
                the function scripts/performance's launcher picks: {model}_pretrain_{N}gpu_gb200_fp8mx_config) at
                067f987df. Not independent of the development runs, as was found only after the set was
                predicted: their source document (performance-summary-archive.md, held_out_runs.MEGATRON_BRIDGE)
                holds the same four layouts in its 26.06 and 26.06.01 tables at figures within 3 % of these
                (but for one gpt-oss-120b row), and the gpt-oss-120b layout is a development run's in BF16; the
                set counts in the development part

    Tenth set:
    mlperf-v6.0-b200  as the fifth set's source (mlcommons/training_results_v6.0 in the copy
                Richardyu114/training_results_v6.0, commit eabf23a), its gpt_oss_20b submissions on B200s, which
                run MXFP8

    Eleventh set:
    mlperf-v6.0-dsv3  the same copy, its deepseekv3_671b submissions on GB200s (MXFP8)

    Twelfth set:
    mlperf-v6.0-ultra  the same copy, its gpt_oss_20b, deepseekv3_671b, llama31_405b and llama31_8b submissions on
                B300s and GB300s (Blackwell Ultra), each with its systems description where the copy holds one

    Thirteenth set:
    mcore-moe-recipes  NVIDIA/Megatron-LM examples/moe_recipes/README.md (branch dev), "Recipe Index", its
                "Median TFLOP/s/GPU" column, written at commit e5ad09802d (2026-06-15, PR #5289, "Add MoE recipe
                performance summary": figures "from curated benchmark sources") and unchanged for these rows at
                9c5258f109 (2026-08-11, PR #6335, which adds a DeepSeek-V4-Pro row and changes the V4-Flash figure);
                each row with the YAML it links in the same folder (DEPENDENCIES: the PyTorch image and Dockerfile;
                ENV_VARS; ARGS: every Megatron-LM argument) at e5ad09802d (between it and 9c5258f109 the YAMLs of
                these rows change only in the yq checksum lines of their Dockerfiles), and
                megatron/training/training.py (num_floating_point_operations), arguments.py and
                megatron/core/tokenizers of e5ad09802d for what the figure counts; the Qwen3-30B-A3B recipes were
                added at 7b9593be8e (2026-05-28, PR #5012)

    Fourteenth set:
    mlperf-h200  mlcommons/training_results_v5.0 (commit 0fdc28f) and v5.1 (results commit 4da2d1c, repository HEAD
                441d65f): the closed-division llama31_405b and llama31_8b submissions on H200s (Nebius on 64 and 128
                nodes in v5.0, HPE on 8 nodes in v5.1), each with the config, config_common*.sh, conf/custom.yaml,
                pretrain.py and Dockerfile of its implementation folder, its systems/<system>.json and its result log

    Fifteenth set:
    mlperf-llm  mlcommons/training_results_v5.0 (commit 0fdc28f) and v5.1 (results commit 4da2d1c, repository HEAD
                441d65f; between them only two system descriptions, two READMEs, a supplemental PDF and a folder's
                name, Datacrunch to Verda, change): every results folder of llama31_8b and llama31_405b and every
                systems/*.json; for each submission its first result log (with the configuration dump where the log
                prints one), the README-<system>.md where there is one, the config it names (else the one named for
                the system or the node count) and the config_common*.sh that config sources; for the runs kept also
                conf/custom.yaml, pretrain.py, custom_callbacks.py and the Dockerfile of the implementation folder,
                compared blob by blob with NVIDIA's implementation of the same benchmark and round, and its
                systems/<system>.json

    Sixteenth set:
    mlperf-gpt3  mlcommons/training_results_v3.0 (commit 63e326c; results uploaded in 9f08e30, 2023-06-19), v3.1
                (commit d06288b; results uploaded in f33f944, 2023-11-07), v4.0 (commit 6fe9543; results pushed in
                62f111b, 2024-06-11) and v4.1 (results commit 8821c70, repository HEAD b87b9e3): every results folder
                of gpt3 and the systems/*.json of its submitters; for each submission of another organisation its
                first result log (with the configuration dump where the log prints one), the config of its node
                count with the config_common.sh and config_fp8.sh it sources, its systems/<system>.json, and its
                implementation folder compared blob by blob with NVIDIA's GPT-3 folder of the same round; the git
                blobs of every gpt3 result log of the four rounds, compared for logs published again

    Seventeenth set:
    mlperf-v6.0-llama  the fifth set's copy (mlcommons/training_results_v6.0 in Richardyu114/training_results_v6.0,
                commit eabf23a): every results folder of llama31_8b and llama31_405b and every systems/*.json; for
                each submission its first result log (with the configuration dump where the log prints one), the
                README and config that name its precision where the copy has them and the config_common*.sh they
                source where it has those; for the runs kept the implementation folder's files (config_common.sh,
                the configs, pretrain.py, the Dockerfile) and systems/<system>.json

    Eighteenth set:
    mb-cards    NVIDIA-NeMo/Megatron-Bridge examples/model_verification_cards/*/card.yaml (commit 067f987df,
                2026-08-22): every card's items with a figure; for the runs kept, the recipe its command names
                (src/megatron/bridge/recipes/, with recipes/common.py and recipes/utils/environment_utils.py) and
                training/setup.py (the vocabulary) at the Bridge commit the item or card names

    Nineteenth set:
    modelzoo-long  yanring/Megatron-MoE-ModelZoo best_practice/Qwen3/readme.md at b0b92ff (2025-11-04), "Long
                Context" (H100s, NVLink 4, InfiniBand 8 x 50 GB/s; Qwen3-235B-A22B, DeepEP, bf16), with the
                sbatch_benchmarking.sh, runtime_configs/benchmarking/{common,runtime}.conf,
                model_configs/benchmarking/Qwen3-235B-A22B.yaml and dockers/Dockerfile of the same commit, and
                Megatron-LM's megatron/training/training.py (num_floating_point_operations) at d4194b7448 (main),
                d9153a50ce and ee14b5b8c8 (dev) and 3df200905e (main)

Which rows: all three of NVIDIA's MLPerf Training v4.0 GPT-3 submissions, each its result_0.txt (the first of its
runs): the tokens of all its training blocks over their summed durations (block_start to block_stop; the
evaluations between them left out), the global batch and gradient accumulation as the log states them;
all eight of OLMo-core's table; JAX-Toolbox's MaxText table (its one row); MaxText's A3 table, all five
rows (the four past one VM added once the planner modelled HSDP, hybrid_shard.py, and before they were predicted).
Second set: all nine of NVIDIA's MLPerf Training v3.0 (two) and v3.1 (seven) GPT-3 submissions, each its
result_0.txt read as v4.0's (v3.0's log times one block for the whole run with the evaluations inside it: there the
block's duration less its evaluations, eval_start to eval_stop, over the tokens it logs, trained_samples), TP, PP,
virtual stages and micro-batch from the config of the log's node count (the logs name no config; each round ships
one per count); NVIDIA's own closed-division LLM pretraining submissions of MLPerf Training v4.1, v5.0 and v5.1 on a
GPU with a preset, read as v4.0's, the layout from the config its README-<system>.md names, the smallest and the
largest GPU count where a round has many of one benchmark on one GPU (only v5.0's 405B H100 runs, left out below):
v4.1's two GPT-3 H100 submissions and v5.1's two FP8 Llama 3.1 8B GB200 submissions; of InternLM's table, the (tp=2,
zero1=-1) row at its smallest and largest GPU counts (8 and 1,024), as the dgxc columns; Megatron-LLaMA's LLaMA-13b
table, its Megatron-LLaMA column; llm.c, the one run script whose comment gives an H100 step time; torchao, the H100
table's bfloat16 row and its "tensorwise with float8 all-gather" row.
Third set: NVIDIA's closed-division Llama 3.1 405B pretraining submissions of MLPerf Training v5.0 on H100 (five, on
512 to 8,192 GPUs), the smallest and the largest GPU count, each its result_0.txt read as v4.0's (these logs give
the running sample count at block_start and block_stop, so a block's tokens are its steps times the global batch);
126 layers on PP 8 x VP 8 with the embedding and the loss counted as a layer each (ASYM_PP_EMBED, ASYM_PP_LOSS:
Megatron-Core's account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split), planned as
first_stage_layers = last_stage_layers = 1 (the first and last virtual stage's layers). Left out: the three H100
submissions between those two; the two GB200 ones (each log has six block_start, one block_stop and no evaluation:
the blocks cannot be timed); IBM+CoreWeave+NVIDIA's (another submitter).
Fourth set: of ModelZoo's Qwen3 H100 table, the Qwen3-235B-A22B rows the planner expresses as stated: the
"Cross-node EP strategy" row without "+1f1b overlap" (TP 2, EP 32, PP 8, VPP 4, DP 16) and the TP 4 x EP 8 x PP 8 x
VPP 4 row, each its step time as tokens per second per GPU (GBS 2,048 x 4,096 / step time / 256); 94 layers with the
embedding and the loss counted as a layer each (96 / (8 x 4) = 3 per virtual stage), planned as first_stage_layers =
last_stage_layers = 2. Left out: the "+1f1b overlap" row (the all-to-all overlapped with another micro-batch's
compute: not modelled), the FSDP row (its table says TP 2, DP 128, its launch script TP 1), the PP 32 x VPP 3 row
(one slot per virtual stage: the end stages would hold no layer), the Qwen3-Next-80B-A3B row (linear-attention
layers), the long-context table (TFLOPS only, and its "moe" recompute module recomputes the expert GEMMs: the
nineteenth set since, by later rules), the GB200
and GB300 tables (MXFP8, not modelled then, but for one BF16 GB200 row, which gives TFLOPS without a step time,
names no Megatron-LM commit and runs CUDA graphs and HybridEP).
Fifth set: of MLPerf Training v6.0's gpt_oss_20b submissions (every organisation's folder in the copy), those
on a GPU with a preset (h100-sxm, h200, b200, gb200), in a precision the planner expresses (BF16, or FP8 with
one scale per tensor), whose config and first result log are in the copy; per submitter and GPU type the
smallest and the largest GPU count: Cisco's two H100 submissions (64 and 128 GPUs, TP 2 x EP 4, FP8 delayed
scaling), each its result_1.txt (Cisco numbers its logs from 1: the first of its runs) read as v4.0's (these
logs give each block's sample count and its last step, so a block's tokens are its steps times the global
batch times 8,192), the global batch and gradient accumulation as the log states them; the model is
gpt-oss-20b's layer at the benchmark's sequence (8,192) and vocabulary (128,256), MLPERF_GPT_OSS_20B. Left
out: every other gpt_oss_20b submission: those on B200 and GB200 (NVIDIA's tyche-hsg, Dell, QCT, CoreWeave,
Lambda, Supermicro) all run MXFP8 (block scaling, not modelled then; expressible since, a candidate for a later
set; NVIDIA's configs named by
its READMEs are not in the copy); those on B300 and GB300 (NVIDIA's theia, Dell, HPE, GigaComputing,
Supermicro, QCT, Lambda, Nebius, Oracle, Inventec, ASUSTeK, Cisco's C880A) have no preset and run MXFP8;
AMD's MI350X and MI355X (Cisco's and Oracle's Primus submissions) have no preset; no H200 submission of
gpt_oss_20b was found; every result_2.txt onward (one run per submission).

Seventh set: of the three pages, the rows of a mixture-of-experts model the planner expresses, on a GPU with a
preset, whose configuration the same release's configuration file states: Mixtral-8x7B on 64 B200s (25.02) and on 64
GB200s (25.04), and Mixtral-8x22B at 65,536 tokens on 256 B200s (25.02), each planned as the table and that file
give it. Left out: Mixtral-8x22B on 256 GB200s (25.04; no configuration file of r2.3.0 or r2.4.0 has the row, and
the table prints its global batch and micro-batch swapped); LLAMA4-Scout-LLM on 64 GB200s (25.07: its figure is
given twice, "13783 (10717)", and the legend of the figure in parentheses is past what could be read here; its
vocabulary is 200,000 or 202,048 by a flag the table does not give); LLAMA4-Maverick-LLM (experts in every second
layer); the DGX-H100 sections (past what could be read here). Examined for the seventh set and not used:
NousResearch's torchtitan DeepEP README (Qwen3-30B-A3B on 8-128 B200s: a 20-step compiled run logged every 10 steps,
and its two TFLOPS figures for the same run disagree); the 26.02 section of Megatron-Bridge's
performance-summary-archive.md (the development runs' source); OLMoE's paper and repository, OLMo-core's README at
every version, torchtitan's benchmarks and model READMEs, Megatron-LM's MoE README of 2026 and the Megatron-Core MoE
report (arXiv:2603.07685; its abstract only): no MoE training throughput with its configuration that could be read
here.

Which columns: of each dgxc table, its smallest GPU count and, where the table reaches it, 2,048 GPUs (the end of
its weak scaling; MaxText's 2,048-GPU columns, HSDP, added once the planner modelled it and before they were
predicted); of the GB200 tables, which stop at 512, the smallest. A column whose configuration (model, GPU, parallel
sizes, precision) held_out_runs.RUNS already has is not repeated.

Fourteenth set: every closed-division LLM pretraining submission (llama31_8b, llama31_405b) on H200 GPUs in MLPerf
Training v5.0 and v5.1, by any submitter, found by every results folder of those two benchmarks and by every
systems/*.json whose accelerator is an H200: Nebius's 405B on 64 and 128 nodes in v5.0 and HPE's 8B on 8 nodes in
v5.1, each log read as the third set read v5.0's 405B logs and as the v5.1 8B entries read theirs. None of these
folders has a result_0.txt: each numbers its logs from 1, so its result_1.txt, the first of its runs, is read, as the
fifth set read Cisco's. Left out: v5.1's two Nebius 405B submissions, which are v5.0's two published again (their logs
are the same git blobs, the runs of 2025-04-30; their implementation folders are v5.0's file for file; their system
descriptions differ only in name and a power note), as the second set left out v4.1's 11,616-GPU GPT-3 log. HPE's
nodes carry both 400 Gb/s InfiniBand and 200 Gb/s Slingshot adapters, and which one NCCL ran on is not stated: the
h200 preset's 400 Gb/s per GPU is planned, as the rules below take the GPU preset's links where a source gives none.

Fifteenth set: by a rule fixed before any of its logs was read, every closed-division llama31_8b and llama31_405b
submission of MLPerf Training v5.0 and v5.1, by any submitter, on a GPU with a preset (h100-sxm, h200, b200, gb200,
b300, gb300), in a precision the planner expresses (BF16; FP8 with one scale per tensor; MXFP8), whose first result
log (result_0.txt, or result_1.txt where a folder numbers from 1) is timed as v4.0's, the global batch and gradient
accumulation as the log states them, and whose configuration no development run has; then per submitter, round,
benchmark and GPU type the smallest and the largest GPU count (the fifth set's rule; where two share a count, the
results folder that sorts first); and of those, the runs not in a set yet (the order the set was drawn in, as a
review of it found: the filters first, the extremes next, the runs already held aside last). A run's precision and
settings are read from its log's configuration dump where the log prints one (fp8, fp8_recipe, fp4), else from the
config its README-<system>.md names or, where none names one, the config named for its system or node count, and
whether that config sources config_common_fp4.sh. Fourteen runs, all FP8 with one scale per tensor (none is BF16 or
MXFP8): Llama 3.1 8B on Cisco's 64 and 128 H100s (delayed scaling; DP 64, and TP 2), Dell's 16 B200s, Oracle's 64,
the University of Florida's 16 and 256 and Verda's 64 (Transformer Engine's per-tensor current scaling, 'tensorwise',
as all the others), Dell's and Supermicro's 8 B300s, Lambda's 72 GB300s and NVIDIA's 72 and 512 (Theia: the second
set's GB200 configs, byte for byte, on GB300); Llama 3.1 405B on the University of Florida's 256 and 448 B200s (TP 4
x PP 8 x VP 8 x CP 2 with the third set's uneven ends, without TP overlap). Cisco's logs give the running sample
count as v5.0's do (a block's samples: the next eval_start's count less its block_start's); the v5.1 405B logs' first
block runs to the first evaluation (448 and 285 steps) and is timed with the rest. NVIDIA_CODE_BY_OTHERS names the
runs of other organisations whose implementation is NVIDIA's v5.1 code (the git blobs compared: Dell's, the
University of Florida's and Verda's; the folders of Oracle's run and Supermicro's ship configs, not code, so they are
not named, though their logs record NVIDIA's pretrain.py and Supermicro's Blackwell_llama31_8b folder, which holds no
config for this system, is NVIDIA's code). Left out: NVFP4 (not modelled): NVIDIA's v5.1 8B runs on 8 GB200s and 8
GB300s and all four of its v5.1 405B runs (their READMEs name *_fp4.sh configs, which source config_common_fp4.sh),
Dell's 8 B200s and Lenovo's three (SR680aV3 and SR780aV3 on B200s, SR680aV4 on B300s: the config named for the
systems sources config_common_fp4.sh, the logs print no configuration), Nebius's 8, 16 and 32 B200s and 8 B300s,
Oracle's 8 B200s and Supermicro's two 8-B200 systems (their logs' dumps: fp4 true, fp4_recipe nvfp4); no preset:
AMD's MI350X and MI355X and the MI350X and MI355X submissions of Cisco, Dell, GigaComputing and Supermicro;
untimeable: NVIDIA's v5.0 405B runs on 256 and 512 GB200s (six block_start, one block_stop, no evaluation: the third
set's reason); precision not determinable: IBM+CoreWeave+NVIDIA's five v5.0 405B runs on 512 to 2,496 GB200s (their
logs can be timed, but every config sources config_common_blackwell.sh, which is in neither round's repository, the
FP8 recipe is a setting it could change and the logs print no configuration: as the second set left out v4.1's B200
Preview); between the smallest and the largest: NVIDIA's v5.0 405B runs on 2,048, 2,432 and 2,560 H100s and the
University of Florida's 8B runs on 32 to 128 B200s; a configuration the development part has (the rule of the dgxc
columns below): the University of Florida's 8B run on 8 B200s (DP 8, FP8: Megatron-Bridge's Llama 3 8B on 8 B200s),
which the set first took as that submitter's smallest; the test that enforces the rule found it once the set was
predicted, and its 16-B200 run, the smallest the rule admits, took its place before it was predicted (as the twelfth
set's); a count shared: Dell's 2xXE9685L system (16 B200s, FP8; 2xXE9680L sorts first); already in a set: NVIDIA's
v5.0 405B runs on 512 and 8,192 H100s (third), its v5.1 8B runs on 72 and 512 GB200s (second), Nebius's v5.0 and
HPE's v5.1 H200 runs (fourteenth); published again: Nebius's v5.1 H200 runs (the fourteenth set's reason; no other
llama31 log of either round repeats a git blob); every result log after the first. Links: where a systems description
states them they are the preset's (Cisco's 8 x 400 Gb/s per node; the GB300 trays' 4 x 800 Gb/s); Dell's two B200
nodes (no network stated), Oracle's (RoCE), the University of Florida's (InfiniBand) and Verda's ('100GbE
InfiniBand', no adapter count) give no per-GPU rate, and the b200 preset's is planned; Lambda's GB300 job, whose
files do not state its segment, is placed by held_out.nvlink_segment (one rack of 72).

Sixteenth set: by a rule fixed before any of its logs was read, every closed-division GPT-3 175B (gpt3) submission of
MLPerf Training v3.0, v3.1, v4.0 and v4.1 by an organisation other than NVIDIA alone (joint submissions such as
NVIDIA+CoreWeave's and Azure+NVIDIA's included; NVIDIA's own are the first and second sets'), on a GPU with a preset,
in a precision the planner expresses (BF16; FP8 with one scale per tensor), whose first result log (result_0.txt, or
the log numbered 1 where a folder numbers from 1) is timed as the earlier MLPerf GPT-3 sets time theirs (v3.0's one
block less the evaluations inside it, as the second set; later rounds' blocks summed, as v4.0's), the global batch
and gradient accumulation as the log states them, and whose configuration no development run has (the file's rule);
then per submitter, round and GPU type the smallest and the largest GPU count (where two share a count, the results
folder that sorts first). The layout is read from the config of the log's node count, as the second set reads
NVIDIA's configs of the same round, and from the log's configuration dump where it prints one (v4.0's and v4.1's).
Six runs, all TP 4 x PP 8 on H100s in FP8 with delayed scaling: NVIDIA+CoreWeave's v3.0 runs on 768 and 3,584 GPUs
(NVIDIA's v3.0 configs: interleaved 12, micro-batch 1), Azure+NVIDIA's v3.1 run on 10,752 (interleaved 12,
micro-batch 1), Sustainable Metal Cloud's v4.0 run on 512 (interleaved 12, micro-batch 2) and Oracle's v4.1 runs on
1,536 and 3,072 (interleaved 4, micro-batch 2). NVIDIA_CODE_BY_OTHERS names CoreWeave's runs (NVIDIA's v3.0 folder
file for file), Sustainable Metal Cloud's and Oracle's (their Python files NVIDIA's git blobs of the round; Oracle's
folders hold no conf/, and the configuration its logs print is an earlier state of NVIDIA's v4.1 one, four keys
short: the code was compared, as the rule was read when the set was written down); Azure's folder is NVIDIA's v3.1
code with its TODO comments taken out (other blobs) and builds another Transformer Engine revision: not named.
Sustainable Metal Cloud's folder names its logs after the job and numbers them 1 to 3: the one numbered 1 is read,
though the one numbered 2 (another job) started first (0.02 % slower). Left out: no preset: Intel-HabanaLabs' Gaudi2
submissions (v3.0, v3.1, v4.0) and Google's TPU v5e, v5p and Trillium ones (v3.1, v4.0, v4.1); between the smallest
and the largest: NVIDIA+CoreWeave's v3.0 run on 1,536 GPUs; a count shared, and published again: Sustainable Metal
Cloud's smc-ac-power and smc-dc-power folders (512 GPUs each; their three logs are the smc folder's git blobs, and
smc sorts first); NVIDIA's own submissions of the four rounds (the first and second sets'); every result log after
the first. No other gpt3 log of the four rounds repeats a git blob of another round's or of NVIDIA's, nor another
organisation's run_start. Links: CoreWeave's and Azure's descriptions state 8 x 400 Gb/s InfiniBand per node (the
preset's); Sustainable Metal Cloud's ('Infiniband NDR', no adapter count) and Oracle's (RoCE v2) give no per-GPU
rate, and the h100-sxm preset's is planned.

Seventeenth set: by a rule fixed before any of its logs was read, every closed-division llama31_8b and llama31_405b
submission of MLPerf Training v6.0 (the fifth set's copy), by any submitter, on a GPU with a preset that no earlier
set read for these benchmarks (h100-sxm, h200, b200, gb200; the twelfth set read B300 and GB300), in a precision the
planner expresses (BF16; FP8 with one scale per tensor; MXFP8), whose first result log (result_0.txt, or the folder's
first where it numbers otherwise) is timed as the earlier MLPerf sets time theirs, the global batch and gradient
accumulation as the log states them, and whose configuration no development run has; then per submitter, benchmark
and GPU type the smallest and the largest GPU count (where two share a count, the results folder that sorts first);
of those, the runs not in a set yet. A run's precision is read as the fifteenth set reads it (the log's dump where it
prints one, else the config its README names or the one named for its system or node count, and whether that config
sources config_common_fp4.sh); NVFP4 runs are left out, and so are runs whose precision the copy does not determine,
as the twelfth set did. Four runs, all Llama 3.1 8B, all FP8 with one scale per tensor: Cisco's 64 and 128 H100s (TP
2 with sequence parallelism and TP overlap, DP 32 and 64; Transformer Engine delayed scaling; Cisco's own NeMo 2
implementation; the folders number their logs from 1) and 16 H200s (DP 16; Transformer Engine's 'tensorwise' current
scaling; NVIDIA's v6.0 code, by its log; gradient accumulation 2, as Megatron's 'constant 2' micro-batches and GBS 32
over DP 16 give it, where the log's gradient_accumulation_steps line says 4.0, the stored one-node config's), and
SCITIX's 64 B200s (CP 2, DP 32; 'tensorwise' current scaling, by the log's dump). SCITIX's run on 64 B200s, which the
first survey missed, was found by a review once the set was predicted and written down before it was predicted. The
128-H100 run has the layout of the fifteenth set's v5.1 run on Cisco's 128 H100s, and the 64-B200 run that of
Oracle's and Verda's v5.1 runs on 64 B200s (another round and software stack; the rule compares with the development
runs only). NVIDIA_CODE_BY_OTHERS names none of them: Cisco's H100 folder is its own NeMo 2 code; its H200 run's
code, by its log, is NVIDIA's v6.0 code (NVIDIA's container nvcr.io/nvdlfwea/mlperftv60/llama31_8b-amd:20260428 and
its /workspace/llm/pretrain.py, which builds Megatron-Bridge's Llama31ModelProvider8B), but its folder
(implementations/nemo) holds configs and run.sub and no code, so it is not named, as the fifteenth set's Oracle and
Supermicro folders; SCITIX's folder holds a README, configs and launch scripts and no Python file, so it is not named
either; and in the copy NVIDIA's own v6.0 llama31_8b folder holds no pretrain.py, conf/custom.yaml or callbacks to
compare with. Left out: NVFP4 (not modelled): Dell's 8 B200s, HPE's 8 and 16 B200s and 8, 16 and 32 GB200s, Lambda's
8 B200s and Supermicro's two 8-B200 systems (their logs' dumps: fp4 'e2m1', or fp4 true with fp4_recipe nvfp4) and
Azure's 405B run on 2,048 GB200s (its config sources NVIDIA's config_GB200_640x4x24xtp4pp8cp2_cg_fp4.sh, which
sources config_common_fp4.sh); precision not determinable: CoreWeave's 64 B200s (the folder's one file, submit_8b.sh,
sources config_DGXB200_8x8x1xtp1pp1cp1_8b_fp4.sh, which is not in the copy, and the log prints no configuration: only
a file name says FP4) and NVIDIA's 8B run on 1,024 GB200s (tyche-hsg; its log can be timed, and its README names
config_GB200_256x4x1xtp4pp1cp4_8b.sh, which is in the copy, but the FP8 recipe is set in the config_common*.sh it
sources, which are not, and the log prints no configuration: FP8 with one scale per tensor or MXFP8 cannot be told,
as the fifteenth set's IBM+CoreWeave+NVIDIA runs); no preset: Dell's 8-GPU H200 NVL nodes (XE7740 and XE7745: the
PCIe card at 600 W, not the SXM part the h200 preset describes), TTA's 8 RTX PRO 6000 Blackwell Server Edition GPUs
(RTX6000Pro_8x96GB) and the AMD GPUs' submissions; a GPU the twelfth set read: every B300 and GB300 folder (Cisco's
C880A, Dell's, GigaComputing's, QCT's, NVIDIA's Theia and CoreWeave's GB300 405B run among them); not a submission:
NVIDIA/benchmarks/llama31_8b/implementations/H200_SXM_1node_nemo, added at later commits of the copy by its owner;
every result log after the first. Krai's and Fujitsu's H200 folders hold llama2_70b_lora only, and
Netweb_Technologies_India_LTD's folder gpt_oss_20b and llama2_70b_lora only. No run between the smallest and the
largest, none already in a set, none repeating a development configuration. Links: Cisco's descriptions state 8 x 400
Gb/s per node (ConnectX-8 RoCE on the H100s, BlueField-3 on the H200s): the presets'; SCITIX's ('InfiniBand', no
adapter count) gives no per-GPU rate, and the b200 preset's is planned.

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

The second set adds: the attention kernel Transformer Engine ran where it had no cuDNN attention (release_v0.8) or
preferred the flash-attn package the image installs (commit 09ba842) is that package's, and FlashAttention 1.x
(flash_attn_unpadded_func) is planned as the FlashAttention-2 class (no FA1 kernel is modelled); a recomputation
that recomputes no matmul (Megatron-LLaMA's "selective" with flash attention, InternLM's
dropout_selective_checkpoint) is planned as none; an optimizer that keeps only each rank's shard of the gradients
and reduce-scatters them from every micro-batch's backward (Megatron-LLaMA's OverlappedDistributedOptimizer) is
ZeRO-2; a source that says only "H100" ran 80 GB SXM parts (as OLMo-core's); torchtitan's default gradient reduction
in fp32 is planned as fp32_grads.
Runs left out, and why: the tables of the Nemotron-4 15B and 340B reports (arXiv:2402.16819, 2406.11704), MegaScale
(arXiv:2402.15627), FP8-LM (arXiv:2310.18313), FlashAttention-2's end-to-end table (arXiv:2307.08691) and "MoE
Parallel Folding" (arXiv:2504.14960): no text of them could be read here, only abstracts and second-hand summaries.
Megatron-LM's README (its model table and scaling results are images) and its MoE README after v0.8 (the 468 TFLOPS
"as of MCore v0.9" stands beside the v0.8 mapping of held_out_runs' Mixtral run: the same configuration again).
Megatron-Bridge docs/performance-summary.md (26.08), but for the ninth set's rows: its GB300 rows (no preset then;
since it, still out: the development runs' document series, as the ninth set was found to be), its NVFP4 rows (no
such precision), DeepSeekV4 Flash (an architecture not modelled) and the Nemotron 3 rows (Mamba layers).
yanring/Megatron-MoE-ModelZoo: Qwen3-235B-A22B's 94 layers on 8 or 32 pipeline stages with virtual stages (uneven,
not expressible), its FSDP row's table (TP 2, DP 128) disagrees with its launch script (TP 1), and
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

Second set, left out: MLPerf v3.0's NVIDIA+CoreWeave and v3.1's Azure+NVIDIA GPT-3 submissions (joint, under other
submitters, on other systems) and every result_1.txt onward (one run per submission, as v4.0's); v4.1's 11,616-GPU
GPT-3 log (v4.0's published again) and its 64-B200 "Preview" (its config_common_blackwell.sh is in no round's
repository); all of v5.0's Llama 3.1 405B submissions (126 layers on PP 8 x VP 8 with the embedding and loss counted
as layers: uneven stages under interleaving, not expressible then, and two of them are the third set's; the GB200
logs also lack the block stops the method reads); every v5.1 Llama 3.1 405B submission and the 8-GPU 8B ones (NVFP4
block scaling, not modelled) and its GB300 runs (no preset); other organisations' submissions on
NVIDIA systems (not read). BigScience's BLOOM-176B (published.py's source) and its prequel topology tables (the same
run's tuning); BigScience's other runs (V100s; tr8-104B's A100 note gives only a range); GPT-NeoX-20B, OPT-175B and
GLM-130B (the figure is in a paper or logbook that could not be read here, or the micro-batch, recomputation and
stage split are not stated); Megatron-DeepSpeed's examples (V100s, or no batch or layout); NeMo-Framework-Launcher's
A100 tables (no batch or layout; held_out_runs.py's repository); Megatron-LLaMA's 256/512-GPU table (model not
named) and its DeepSpeed column; InternLM's (tp=2, zero1=4) row (optimizer sharded within groups of 4: not
expressible), its tp=1 rows (another family) and its "FLOPS Testing" tables. lingua (evaluations only); picotron
(MFU without a configuration); nanotron (nothing beyond the SVG above); SmolLM3 (its configuration is stated, its
throughput only in third-party copies); llm.c's discussion #677 (third-party copies only); litgpt (TinyLlama's A100
figure); allenai/OLMo and megablocks (no throughput); gpt-neox's H100 ablations (images); DeepSpeed-Domino (an
example log, GPU not said) and DeepSpeed's blogs (images); INTELLECT-1 (an MFU range over wide-area links, no
per-configuration table readable); torchao's float8nocompile tables (model and batch not named, GPU counts
inconsistent), its MoE, MI300X and B200 tables (no preset, or MXFP8, not modelled then) and its rowwise FP8 row
(the planner's FP8 scales per tensor or per 32-value block); nanochat (Muon, its own block); fms-fsdp (the IBM
blog's table, published.py's); ColossalAI,
NousResearch, Zyphra (no H100 configuration and figure found).
Examined for the later sets and not used: KempnerForge's MoE benchmark (8 H200s: every expert padded to the busiest
one and tokens routed in a Python loop, which the planner does not express; its 64-expert rows' token counts do not
add up); EasyContext's long-sequence table (DeepSpeed ZeRO-3 with the optimizer and parameters offloaded to the
CPU); Fast-LLM's README (an "expected" throughput); dgxc-benchmarking's releases (no coarse-MoE table but Grok-1's;
the v24.05 Mixtral recipe its CHANGELOG names is not in the repository's history, and was LoRA fine-tuning);
Automodel's table at its latest version (its MoE rows since 8d9bfb9 are Nemotron V3's, with Mamba layers).
Examined for the sixth set and not used: NVIDIA/skills' rows with EP overlap (the all-to-all overlapped with
compute, not modelled), its card rows given as rounded figures ("~210" TFLOPS) and its "smoke" and "directional"
all-to-all runs; FlagOpen/FlagPerf's Mixtral 8x7B on 32 H100s (training/nvidia/mixtral_8x7B-megatron/README.md at
68d2944f: its table says EP 1, the script of the same day --expert-model-parallel-size 8, which data parallelism 2
cannot hold: a table and script that disagree, left out as the ModelZoo's FSDP row), its 8-layer Mixtral proxy on
A100-40GB (no preset; no framework version) and its 8-expert "qwen1.5_14B_MoE" on A800s (no preset);
alibaba/Pai-Megatron-Patch's Qwen3-235B-A22B tuning guide (H800s, the precision not stated).
Examined after the sixth set and not used: xiao-hu/torchtitan's qwen3_30b_moe_experiments.md (Qwen3-30B-A3B on 8
H200s, December 2025: each figure is one log line at step 10 of a compiled run, the first interval it times, with
routing ten steps old, and the precision is not stated) and mlfoundations/open_lm's MOE.md (8 experts on A100s of
an unstated size: MegaBlocks' dropping experts at capacity factor 1.25, every second layer, 4 x h GELU experts
beside SwiGLU dense layers, batch not stated). veScale's Mixtral examples, awsome-distributed-training's NeMo
copies and Tutel's README give no training throughput of a full model.
Eighth set: of dgxc v25.05.04's DeepSeek-V3 table (deepseek_v3/pretraining/README.md, BF16 only: "FP8 recipe is not
currently supported"), by the column rule below: the smallest H100 column (512 GPUs; the table stops at 1,024) and
the smallest GB200 column (128). Each planned as the table, launch.sh (TP 2, ETP 1, VP 1, MBS 1, GBS GPUs x 8;
recompute modules mla_up_proj on H100s, core_attn on GB200s) and NeMo's pretrain_deepseek_v3.py at 7a8f1cc give it:
the first and last stages 64 / PP - 1 and 64 / PP - 2 decoder layers, one multi-token-prediction module (the
recipe's use_mtp default), the all-to-all dispatcher, MegatronTokenDropCallback's capacity factor 1 with padding
(each expert computes its balanced share, as planned), no TP communication overlap (the recipe's callback); a
partial recomputation is planned as the setting nearest in the matmuls it recomputes (core_attn: none; mla_up_proj,
the up-projections' ninth of a layer's active matmuls: none), so both as "selective", which recomputes no matmul.
Examined once the planner modelled multi-head latent attention and not used: dgxc's later releases (only "Example
output" lines). Megatron-Bridge's 25.09 DeepSeek-V3 rows (H100, B200, GB200) print no precision column (the FP8
recipe is not stated) and two disagree with the launch configuration of the same commit; its 25.11 rows without
MTP are on GB300 (no preset) or take their settings from a test branch. NeMo Automodel's DeepSeek-V3 and Kimi K2
rows (256 and 1,024 H100s) split 61 layers over pipeline x virtual stages automatically ("layers_per_stage: 2"),
with the embedding's and the loss's place not stated; its GB200 figure is a comment in a configuration file. The
PyTorch blog's DeepSeek-V3 on B200s with torchtitan: the text available states no layout or batch. dgxc's table
was first examined when latent attention was modelled and set aside then: the planner had no multi-token
prediction yet, and its token dropping was taken for a reason too; the capacity factor 1 with padding it drops at is
the rule the first set's Grok-1 runs were planned by (each expert computes its balanced share), so the eighth set
plans it so.
Thirteenth set: of the "Recipe Index" of Megatron-LM's examples/moe_recipes/README.md as merged at e5ad09802d (PR
#5289), every row with a figure whose YAML the planner expresses as stated: a model it builds, a GPU with a preset,
BF16 or MXFP8, a pipeline split it expresses, and nothing kept in host memory (optimizer states, activations, a
paged-stash spill buffer); the all-to-alls overlapped with another micro-batch's compute are planned as ep_overlap,
and what the planner does not model at the kernel level (CUDA graphs, paged stashing in GPU memory, deferred weight
gradients, FP8 parameter gather, the precision-aware optimizer's bf16 moments, fused operators) is noted, as the
ninth to twelfth sets note it. Ten rows: Qwen3-30B-A3B H100 BF16 (32 GPUs, EP 8), GB200 BF16, GB200 MXFP8
partial CG and GB200 MXFP8 paged stash (16 GPUs, EP 16); Qwen3-235B-A22B B200 MXFP8 (128, TP 2 x PP 4 x VP 12 x EP 16), B300 MXFP8 partial CG (128, TP 2 x EP 16), GB200 MXFP8 partial
CG (128, EP 64) and GB300 MXFP8 full CG with paged stash (128, EP 64); DeepSeek-V3 B200 MXFP8 (256, PP 8 x VP 2 x
EP 32) and GB300 MXFP8 (256, PP 4 x VP 4 x EP 64). The column ("Median TFLOP/s/GPU") is Megatron's
--log-throughput figure (every YAML sets log_throughput), whose count (num_floating_point_operations in
megatron/training/training.py at e5ad09802d) halves the attention scores for the causal mask, where the planner's
model FLOPs count them whole: each figure is turned into tokens per second per GPU with that count for the row's
YAML, vocabulary padded as the code pads it, written as the division (MEGATRON_*_FLOPS_PER_TOKEN). Left out:
Qwen3-235B-A22B H100 BF16 (TP 2 x PP 8 x VP 4 x EP 32 on 256 H100s: the layout of the fourth set's
ModelZoo run, a development run from the same team; a configuration either part has is not repeated, as the
dgxc columns' rule says); Qwen3-30B-A3B H100 FP8 (fp8_recipe blockwise: 1 x 128 and 128 x 128 blocks, neither the planner's one scale per
tensor nor its 32-value MXFP8 blocks); Qwen3-235B-A22B GB200 MXFP8 full CG with paged stash (its
moe_paged_stash_buffer_size_factor_cpu 0.8 gives the stash a pinned host buffer to spill to: host memory, not
modelled, and how much spilled is not stated); DeepSeek-V3 GB200 MXFP8 (offload_optimizer_states and
fine_grained_activation_offloading: offload to the CPU, not modelled); DeepSeek-V3 H100 BF16 and FP8 (no figure:
PR #5289 leaves them "pending accuracy review"; the FP8 one is blockwise too); DeepSeek-V4-Flash (an architecture
not modelled, as Megatron-Bridge's DeepSeekV4 Flash row). The later figures of the open PR #5728 (2026-07-09:
"measured from the matching Megatron Bridge recipes", the median of iterations 30-45) are not the published
figures and are noted only; they say the figures may come from Megatron-Bridge's recipes, the development runs'
source series, which the merged README does not say (if found so, the set moves as the ninth did). Examined and not used: Megatron-LM's DeepSeek-V3 GB200 optimization guide
(docs/discussions/deepseek-v3-gb200-optimization/deepseek-v3-gb200-optimization.md, added at 402bc50b1c, edited at
eb0783b6d3, removed at 3c1b98efdc as a "draft being updated"; its reproduce guide is still in the tree): its
13-row table ends at 970.01 TFLOPS/GPU on 256 GB200s, TP 1 x PP 8 x VP 4 x EP 32, GBS 2,048, in the layout
'Et|(tt|)*30L': the first virtual stage the embedding and 1 decoder layer, 30 of 2, and the last the loss alone,
with no decoder layer, which last_stage_layers (an integer >= 1: pipeline_stages.check_fields; the third and
fourth sets' ASYM_PP_EMBED / ASYM_PP_LOSS splits plan an end stage that holds the embedding or the loss beside at
least 1 layer) cannot express; and its authors withdrew the text.
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
# DeepSeek-V3 as NeMo 25.04.01 builds it (DeepSeekV3Config; deepseek-ai/DeepSeek-V3's config.json): 61 layers, the
# first 3 dense (FFN 18,432), hidden 7168, 128 heads of latent attention (kv rank 512, q rank 1536, 128 + 64 / 128),
# 256 experts of 2048 and 1 shared, top-8, vocabulary 129,280, untied; pretrain_recipe's one MTP module
DEEPSEEK_V3 = dict(name="deepseek-v3", layers=61, hidden=7168, heads=128, vocab=129280, seq_len=4096, ffn=18432,
                   moe=dict(experts=256, top_k=8, expert_ffn=2048, shared_experts=1, dense_layers=3),
                   latent=dict(kv_rank=512, q_rank=1536), mtp_layers=1, **LLAMA)
# gpt-oss-20b (openai/gpt-oss-20b config.json): gpt-oss-120b's layer with 24 layers and 32 experts, 4 per token
GPT_OSS_20B = {**GPT_OSS_120B, "name": "gpt-oss-20b", "layers": 24, "windowed_layers": 12,
               "moe": dict(experts=32, top_k=4, expert_ffn=2880)}
# Mixtral 8x22B as NeMo runs it (nemo/collections/llm/gpt/model/mixtral.py at r2.3.0, MixtralConfig8x22B: 56 layers,
# hidden 6144, 48 heads, 8 kv heads (MixtralConfig), FFN 16384, 8 experts, top-2; the Mixtral-8x22B-v0.1 tokenizer,
# 32,768), at the table's 65,536 tokens
MIXTRAL_8X22B = dict(name="mixtral-8x22b", layers=56, hidden=6144, heads=48, kv_heads=8, vocab=32768, seq_len=65536,
                     ffn=16384, moe=dict(experts=8, top_k=2, expert_ffn=16384), **LLAMA)
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
                 "as the planner assumes), DeepEP dispatch (moe_dispatch per-node), TE linears (not modelled), "
                 "torch.optim.Adam; "
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
                    fp32_grads=True, moe_dispatch="per-node", **TE), "h100-sxm", "tokens_per_gpu", 12040,
               AUTOMODEL_MOE.format("qwen3_moe_30b_te_deepep") + "; FSDP2 without resharding after forward (ZeRO-2); "
               "each block in PyTorch's non-reentrant checkpoint (full recomputation, early stop); TE attention; "
               "enable_fsdp_optimization (not modelled)"),
    HeldOutRun("Automodel gpt-oss-20b FSDP x EP 8, 8 H100s", AUTOMODEL.format("8d9bfb9") + ", 'GPT-OSS 20B' row; "
               "8 GPUs, GBS 256", GPT_OSS_20B,
               dict(dp=8, ep=8, zero=2, micro_batch=2, grad_accum=16, recompute="full", checkpoint_early_stop=True,
                    fp32_grads=True, moe_dispatch="per-node"), "h100-sxm", "tokens_per_gpu", 13058,
               AUTOMODEL_MOE.format("gptoss_20b_te_deepep") + "; the table prints EP '-', the config sets ep_size 8; "
               "FSDP2 without resharding after forward (ZeRO-2); each block in PyTorch's non-reentrant checkpoint "
               "(full recomputation, early stop); FlexAttention; the sliding-window half of the layers at its "
               "window, the attention sinks not modelled"),
    HeldOutRun("Automodel gpt-oss-120b FSDP x EP 64, 64 H100s", AUTOMODEL.format("8d9bfb9") + ", 'GPT-OSS 120B' row; "
               "64 GPUs, GBS 512", GPT_OSS_120B,
               dict(dp=64, ep=64, zero=3, micro_batch=2, grad_accum=4, fp32_grads=True, moe_dispatch="per-node"),
               "h100-sxm", "tokens_per_gpu", 7626,
               AUTOMODEL_MOE.format("gptoss_120b_te_deepep") + "; the table prints EP '-', the config sets ep_size "
               "64; FSDP2 resharding after forward (ZeRO-3), no activation checkpointing; FlexAttention; the "
               "sliding-window half of the layers at its window, the attention sinks not modelled"),
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
# ---- sources and what they leave unstated (v3.x; v4.0's MLPERF / MLPERF_NOTE are another commit and stack) ------
# v3.0 logs one training block for the whole run (block_start at the epoch start, block_stop at its end, the
# evaluations inside it; custom_callbacks.py on_train_epoch_start/end): its duration less those evaluations
MLPERF_V30 = ("mlcommons/training_results_v3.0 NVIDIA/results/{}/gpt3/result_0.txt (commit 63e326c): the run's "
              "one training block's tokens (trained_samples) over its duration less the evaluations inside it")
MLPERF_V31 = ("mlcommons/training_results_v3.1 NVIDIA/results/{}/gpt3/result_0.txt (commit d06288b): the training "
              "blocks' tokens over their summed durations")
MLPERF_V30_NOTE = ("; config_common.sh, config_fp8.sh, config_tp_h100.sh, run_and_time.sh and "
                   "conf/megatron_gpt_config.yaml (NeMo v1.17.0_pt_23.04, Transformer Engine release_v0.8): "
                   "distributed_fused_adam (ZeRO-1) with overlapped gradient and parameter sync, 100 MB buckets (not "
                   "modelled: the planner's are Megatron-Core's default), bf16 gradient sync, no recomputation "
                   "(ACT_CKPT_GRANULARITY=null), sequence parallelism, TP communication overlapped (userbuffers), "
                   "Transformer Engine FP8 (hybrid, delayed scaling), dropout 0, LayerNorm1p (as LayerNorm); "
                   "attention: Transformer Engine v0.8's DotProductAttention runs the flash-attn package (its only "
                   "other path is unfused) through flash_attn_unpadded_func, which only flash-attn 1.x has "
                   "(FlashAttention-1; requirements.txt pins 1.0.5 since commit 8a4f4ad, after the runs): planned "
                   "as the FlashAttention-2 class (flash_kernel fa2), FlashAttention-1's lower rate not modelled; the "
                   "SentencePiece tokenizer's vocabulary is not stated: GPT-2's 50,257 assumed (padding to 128 not "
                   "modelled); DGX H100 nodes (systems/dgxh100_n*_nemo.json: 8 x 400 Gb/s InfiniBand): the "
                   "h100-sxm preset")
MLPERF_V31_NOTE = ("; config_common.sh, config_fp8.sh, conf/custom.yaml and conf/optim/distributed_fused_adam.yaml "
                   "(NeMo bd0b818 on r1.20.0, PyTorch 23.09, Transformer Engine 09ba842): distributed_fused_adam "
                   "(ZeRO-1) with overlapped gradient and parameter sync, 100 MB buckets (not modelled), bf16 "
                   "gradient sync, no recomputation, sequence parallelism, TP communication overlapped "
                   "(userbuffers; its atomic-GEMM reduce-scatter, NVTE_UB_ATOMIC_GEMM_RS=1, not modelled), "
                   "Transformer Engine FP8 (hybrid, delayed scaling; asynchronous amax reduction not modelled), "
                   "dropout 0, LayerNorm1p (as LayerNorm); attention: that Transformer Engine prefers flash-attn to "
                   "its cuDNN fused attention, and the Dockerfile installs flash-attn 2.0.8 (NVTE_FLASH_ATTN=0 is "
                   "commented out in config_common.sh): FlashAttention-2 (flash_kernel fa2); the SentencePiece "
                   "tokenizer's vocabulary is not stated: GPT-2's 50,257 assumed; Eos and Eos-dfw DGX H100 nodes "
                   "(systems/*.json: 8 x 400 Gb/s InfiniBand for compute): the h100-sxm preset")
# NeMo's settings as the v4.0 rows (ZeRO-1, overlapped parameter gather), but the flash-attn kernel, not cuDNN's
NEMO_FLASH_ATTN = {**NEMO, "flash_kernel": "fa2"}

# ---- model shapes ----------------------------------------------------------------------------------------------
# GPT-3 175B as the v4.0 MLPerf rows (conf/custom.yaml of each v4.1 implementation: 96 layers, hidden 12,288, 96
# heads, FFN 4 x hidden, sequence 2,048, hidden and attention dropout 0.0): held_out_runs.GPT3_175B without dropout.
# Llama 3.1 8B: pretrain.py builds NeMo's Llama31Config8B at encoder_seq_length 8,192 (conf/custom.yaml) with the
# Llama 3.1 8B tokenizer (data_scripts/download_8b.sh; mlcommons/training small_llm_pretraining/nemo/README.md at
# 2b94434: 32 layers, hidden 4,096, 32 heads, 8 kv heads, FFN 14,336, SwiGLU, RMSNorm, context 8,192): the
# llama3-8b preset (vocabulary 128,256, the tokenizer's; the reference's table rounds it to "128,000").

# ---- sources and what they leave unstated ------------------------------------------------------------------------
MLPERF41 = ("mlcommons/training_results_v4.1 NVIDIA/results/{}/gpt3/result_0.txt (commit 8821c70, 2024-11-13; "
            "repository HEAD b87b9e3): the training blocks' tokens over their summed durations")
MLPERF41_NOTE = ("; config_common.sh, config_fp8.sh, conf/custom.yaml and conf/optim/distributed_fused_adam.yaml of "
                 "that implementation: distributed_fused_adam (ZeRO-1) with overlapped gradient and parameter sync, "
                 "{bucket} MB buckets (BUCKET_CAP_MB; not modelled: the planner's are Megatron-Core's default), bf16 "
                 "gradient sync, no recomputation (ACT_CKPT_* unset), sequence parallelism, TP communication "
                 "overlapped (userbuffers), Transformer Engine FP8 (hybrid, delayed scaling: amax history 1,024, "
                 "max) with FP8 parameters (fp8_params: not modelled), the embedding's weight gradients deferred "
                 "(WGRAD_DEFERRAL_LIMIT 65: not modelled), no CUDA graphs, dropout 0, LayerNorm1p (as LayerNorm); "
                 "the SentencePiece tokenizer's vocabulary is not stated: GPT-2's 50,257 assumed (as the v4.0 rows); "
                 "Eos's DGX H100 nodes (the system JSON: 8 x ConnectX-7 400 Gb/s InfiniBand): the h100-sxm preset")
MLPERF51 = ("mlcommons/training_results_v5.1 NVIDIA/results/{}/llama31_8b/result_0.txt (commit 4da2d1c, 2025-11-05; "
            "repository HEAD 441d65f): the training blocks' tokens over their summed durations")
MLPERF51_NOTE = ("NVIDIA/benchmarks/llama31_8b/implementations/nemo/{config} (the config README-{system}.md names), "
                 "with config_common.sh, config_common_cg.sh, config_common_8b.sh, conf/custom.yaml and pretrain.py: "
                 "{layout}; Megatron's distributed optimizer (ZeRO-1) with overlapped gradient reduce and parameter "
                 "gather, gradients reduced in bf16 (grad_reduce_in_fp32=False), bucket_size 768,000,000 "
                 "(BUCKET_SIZE) and FP8 parameter gather (not modelled); FP8 = Transformer Engine's 'tensorwise' "
                 "recipe (per-tensor current scaling, HYBRID format): the planner's FP8; attention in bf16 "
                 "(NVTE_DPA_FP8_RECIPE F16, FP8_DPA unset) through Transformer Engine; no recomputation "
                 "(ACT_CKPT_* unset); full-iteration CUDA graphs (FULL_CUDA_GRAPH=1), {fuser}fused QKV-RoPE and "
                 "NVIDIA's TP-PP-DP rank mapping (not modelled); GB200 NVL72 trays of 4 GPUs (DGXNGPU=4; system "
                 "JSON: 4 x ConnectX-7 400 Gb/s per tray), the job placed in NVLink segments of SEGMENT={segment} "
                 "trays = {segment_gpus} GPUs per rack, as held_out.nvlink_segment places it")

# NVIDIA's two multi-rack Llama 3.1 8B layouts of MLPerf Training v5.1, by GPU count: run on GB200s (the second set)
# and, with the same configs byte for byte, on GB300s (the fifteenth set)
NVIDIA51_8B_LAYOUTS = {
    72: dict(label="CP 2", config="config_{}_18x4x1xtp1pp1cp2_8b.sh", gbs=36,
             strategy=dict(dp=36, cp=2, micro_batch=1, grad_accum=1, precision="fp8", **NEMO),
             layout="TP 1 (no sequence parallelism, no TP overlap), PP 1, CP 2, micro-batch 1, MINIBS 1 (GBS 36, "
                    "gradient accumulation 1, as the log states)",
             fuser="TE's op fuser (USE_TE_OPS=True), ", segment=18, segment_gpus=72),
    512: dict(label="TP 2 x CP 4", config="config_{}_128x4x1xtp2pp1cp4_8b.sh", gbs=64,
              strategy=dict(dp=64, tp=2, cp=4, micro_batch=1, grad_accum=1, precision="fp8", **TP_OVERLAP, **NEMO),
              layout="TP 2 with sequence parallelism and userbuffers TP overlap (TP_COMM_OVERLAP=True), PP 1, CP 4, "
                     "micro-batch 1, MINIBS 1 (GBS 64, gradient accumulation 1, as the log states); USE_TE_OPS=False",
              fuser="", segment=16, segment_gpus=64),
}


def _nvidia51_8b(system: str, gpu: str, gpus: int, samples: int, seconds: float, submitter: str = "",
                 note: str = MLPERF51_NOTE, **more: str) -> HeldOutRun:
    """One of NVIDIA's multi-rack Llama 3.1 8B submissions of MLPerf Training v5.1 (NVIDIA51_8B_LAYOUTS[gpus]) on
    `gpu`: its results folder `system`, `samples` sequences of 8,192 tokens over `seconds` of training blocks, and
    its note (`note` filled with the layout's words and `more`)."""
    layout = NVIDIA51_8B_LAYOUTS[gpus]
    return HeldOutRun(f"MLPerf v5.1 Llama 3.1 8B {layout['label']}, {gpus} {gpu.upper()}s, FP8{submitter}",
                      MLPERF51.format(system) + f"; {gpus} GPUs, GBS {layout['gbs']}", _llama3("llama3-8b"),
                      dict(layout["strategy"]), gpu, "tokens_per_gpu", _tokens_per_gpu(samples * 8192 / seconds, gpus),
                      note.format(config=layout["config"].format(gpu.upper()), system=system, layout=layout["layout"],
                                  fuser=layout["fuser"], segment=layout["segment"],
                                  segment_gpus=layout["segment_gpus"], **more))


# ---- model shapes (the configs the sources run) ------------------------------------------------------------------
# InternLM-7B as InternLM trains it (configs/7B_sft.py and internlm/model/ at commit c18bec9): 32 layers, hidden
# 4096, 32 heads, MLP_RATIO 8/3 -> SwiGLU FeedForward of int(4096 x 8/3) = 10,922 rounded up to a multiple of 256
# (linear.py, multiple_of=256) = 11,008, RMSNorm, rotary, no MLP biases but a bias on the QKV projection (and on the
# output projection: multi_head_attention.py, not modelled), untied output head, dropout 0 (the layer's defaults),
# vocabulary 103,168, sequence 2,048
INTERNLM_7B = dict(name="internlm-7b", layers=32, hidden=4096, heads=32, vocab=103168, seq_len=2048, ffn=11008,
                   **{**LLAMA, "qkv_bias": True})
# LLaMA-13B as Megatron-LLaMA's example runs it (examples/LLaMA/LLaMA_13_slurm.sh at d2e05b8): 40 layers, hidden
# 5120, 40 heads, SwiGLU FFN 13,824, RMSNorm, rotary, no biases, untied lm_head (--causal-lm), sequence 2,048;
# the script at that commit leaves Megatron's default dropouts (0.1; "Disable dropout" came later, 3850347); the
# tokenizer is a placeholder: LLaMA's 32,000 assumed (--make-vocab-size-divisible-by 1: no padding)
MEGATRON_LLAMA_13B = dict(name="llama-13b", layers=40, hidden=5120, heads=40, vocab=32000, seq_len=2048, ffn=13824,
                          **{**LLAMA, "dropout": True})

# ---- sources and what they leave unstated --------------------------------------------------------------------------
INTERNLM = ("InternLM/InternLM doc/en/train_performance.md (commit c18bec9, 2023-07-08, as in InternLM/InternEvo's "
            "history; the table unchanged since fa7337b, 2023-07-06), 'Throughput Measurement' table, '(tp=2, "
            "zero1=-1)' row, {gpus} GPUs column: {tgs} TGS (tokens per GPU per second) on nvidia_a100-sxm4-80gb; "
            "{gpus:,} GPUs, GBS {gbs:,}")
INTERNLM_NOTE = ("the doc's tp=2 column: micro_num 4, micro_bsz 4, seq_len 2,048, pack_sample_into_one=False, "
                 "checkpoint=False, bf16; zero1=-1 shards the optimizer states over all data-parallel ranks (ZeRO-1: "
                 "hybrid_zero_optim.py reduces each gradient bucket, in bf16, to its owner on the last micro-batch "
                 "only, overlapped with backward, and broadcasts the updated weights after the step); TP by "
                 "InternLM's flash-attn-based column/row-parallel layers with sequence_parallel=False and no overlap; "
                 "dropout_selective_checkpoint recomputes only dropout and the norms (no matmul): planned as no "
                 "recomputation; TGS = packed positions (micro_num x micro_bsz x 2,048 per data-parallel rank, "
                 "train.py) over GPUs and step time: the planner's tokens per GPU; pack_sample_into_one=False packs "
                 "micro_bsz samples into each 8,192-token row and attends within each sample (flash-attn's varlen "
                 "kernel), so attention is over samples up to 2,048 tokens, not whole rows (the data set is not "
                 "stated; without a train_folder the config falls back to RandomDataset, samples of 12 to 2,048 "
                 "tokens): the planner charges full 2,048-token causal attention; the repository pins flash-attention "
                 "1.0.8 (third_party/flash-attention at d2f4324): planned as the FlashAttention-2 class (no FA1 "
                 "kernel modelled); the output projection's bias not modelled; inter-machine bandwidth 4 x 100 Gb "
                 "RoCE per node (the doc): 50 Gb/s per GPU")
INTERNLM_LINKS = dict(inter_node_bandwidth=4 * 100e9 / 8 / 8)   # 4 x 100 Gb/s RoCE per 8-GPU node, in bytes/s per GPU

MEGATRON_LLAMA = ("alibaba/Megatron-LLaMA README.md (commit d2e05b8, 2023-09-04), LLaMA-13b table, 'Megatron-LLaMA' "
                  "column: training cost 40.3 hours for 10 billion tokens on four 8xA100-80GB (Training Model TFLOPS "
                  "180; global batch 2,048 by the table's note); 32 GPUs, GBS 2,048")
MEGATRON_LLAMA_NOTE = ("the table gives no parallel layout: taken from examples/LLaMA/LLaMA_13_slurm.sh at d2e05b8, "
                       "the LLaMA-13B script whose GLOBAL_BATCH_SIZE=2048 is the table's (assumed to be the table's "
                       "run; its SBATCH line and WORLD_SIZE are placeholders): TP 2, PP 1, micro-batch 4, sequence "
                       "2,048, sequence parallelism, bf16, --use-flash-attn (flash_attn_unpadded_func: FlashAttention "
                       "1.x, planned as the FlashAttention-2 class), --recompute-granularity selective, which with "
                       "flash attention recomputes nothing (transformer.py checkpoints core attention only on the "
                       "non-flash path): planned as no recomputation; --overlapped-distributed-optimizer "
                       "(overlapped_dist_optimizer.py): fp32 gradients (bf16 forces "
                       "accumulate_allreduce_grads_in_fp32) reduce-scattered bucket by bucket from backward hooks of "
                       "every micro-batch, on a side stream, into partitioned gradient and optimizer shards (ZeRO-2; "
                       "32 reduce-scatters per step), the weights all-gathered after the step (its overlap with "
                       "forward came at 25306de, 2023-10-09, after the table); --causal-lm's lm_head is a plain torch "
                       "Linear, computed whole on both TP ranks (not modelled); dropout 0.1 (the defaults, see the "
                       "model); the figure: 10e9 tokens / (40.3 h x 3,600 s) / 32 GPUs, the table's cost rounded to "
                       "0.1 h; the 13B table's network is not stated: the a100-80gb preset's (the README's "
                       "256/512-GPU table names 4 x 200 Gb/s RDMA per 8-GPU node)")

# ---- model shapes (the configs the sources run) ------------------------------------------------------------------
# GPT-2 1558M as llm.c builds it (karpathy/llm.c train_gpt2.cu at c6efd90, gpt_build_from_descriptor, "d48": 48
# layers, channels 1600, 25 heads, max_seq_len 1024, padded_vocab_size 50304 "padded to 128": the embedding and the
# classifier are allocated and multiplied at 50,304): GPT-2 blocks (LayerNorm with biases, GELU MLP of 4 x 1600,
# biases on every Linear, learned positions, the output layer tied to the token embedding), no dropout in llm.c
GPT2_1558M_LLMC = dict(name="gpt2-1558m", layers=48, hidden=1600, heads=25, vocab=50304, seq_len=1024,
                       dropout=False)

# ---- sources and what they leave unstated --------------------------------------------------------------------------
LLMC_1558M = ("karpathy/llm.c scripts/run_gpt2_1558M.sh (commit c6efd90, 2024-07-02), header comment: 'on 8X H100 "
              "80GB SXM ($28/hr) steps in 2.80s/iter' at 1,048,576 tokens per step; 8 GPUs, GBS 1,024")
LLMC_1558M_NOTE = ("the script's flags at that commit: mpirun -np 8 (one node), -b 16 (sequences per GPU per "
                   "micro-step), -t 1024, -d 1048576 (total batch in tokens: grad_accum 1,048,576 / (16 x 1,024 x "
                   "8) = 8), -r 0 (no recomputation), -z 1 (ZeRO-1: llmc/zero.cuh reduce-scatters the gradients in "
                   "bf16, ncclFloatX, per layer in backward on the last micro-step, and gathers the updated "
                   "weights), -e d48, -ge 1 (GELU fused into the cuBLASLt matmul epilogue: not modelled); make "
                   "train_gpt2cu USE_CUDNN=1 (cuDNN flash attention, flash_kernel cudnn) with the Makefile's "
                   "default PRECISION=BF16, fp32 master weights (use_master_weights=1, the default) and fp32 AdamW "
                   "state; the fused classifier that never stores the logits is not modelled; the comment's next "
                   "line multiplies by 2.7 s, not 2.80 s (2.80 taken, as stated for the step); whether the figure "
                   "leaves out the evaluations every 250 steps (-v 250, -h 1) is not stated")
TORCHAO_F8 = ("pytorch/ao torchao/float8/README.md (commit 8c81863ba, 2025-03-12), 'Training benchmarks', Llama3-8b "
              "'{}' row: {} median tokens/second; 8 GPUs, GBS 8")
TORCHAO_F8_NOTE = ("the README: torchtitan 0.0.2 ('Single-node training on 8xH100 GPUs', batch size 1, sequence "
                   "length 8192, 100 steps, torch.compile, FSDP2, per-op SAC; pytorch 2.7.0a0+gitb98af95, torchao "
                   "0.10.0+git890e0ac8) launched by benchmarks/float8/training/float8_training_benchmark.sh of "
                   "that commit (torchtitan's torchtitan/models/llama/train_configs/llama3_8b.toml with "
                   "--training.batch_size=1 --training.compile{}); the figure is the median over steps 2-100 of "
                   "the 'tps' torchtitan logs, tokens per second per device (parse_torchtitan_logs.py; "
                   "torchtitan's components/metrics.py); the torchtitan commit is not stated: the toml and "
                   "defaults read at 54ef42221 (2025-03-12, version 0.0.2): FSDP over the 8 GPUs "
                   "(data_parallel_shard_degree -1), resharding after forward but for the last block (ZeRO-3), "
                   "bf16 parameters, gradients reduced in fp32 (mixed_precision_reduce default float32: "
                   "fp32_grads), selective_ac_option 'op' (recompute='op'), the Llama 3 tokenizer's 128,256 "
                   "vocabulary; attention: PyTorch's SDPA, the FlashAttention-2 class by the held-aside rule; "
                   "which H100s is not stated: 80 GB SXM assumed, the h100-sxm preset (the OLMo-core rule; "
                   "torchtitan's own benchmarks name 96 GB HBM2e H100s at 500 W, h100-hbm2e); torch.compile "
                   "(fusion not modelled)")
TORCHAO_F8_TENSORWISE = ("; float8 'tensorwise with float8 all-gather' = torchao Float8Linear with dynamic "
                         "tensorwise scaling (the planner's FP8), FSDP2 gathering the weights in float8 "
                         "(enable_fsdp_float8_all_gather, precompute_float8_dynamic_scale_for_fsdp: the halved "
                         "gather is not modelled) and force_recompute_fp8_weight_in_bwd; the output layer "
                         "stays bf16 (torchtitan's float8 converter skips it)")

SECOND_SET: list[HeldOutRun] = [
    # ---- dense, H100, TP 4 x PP 8, FP8 (MLPerf Training v3.0 and v3.1) -----------------------------------------
    *[HeldOutRun(f"MLPerf {round_} GPT-3 175B TP 4 x PP 8, {gpus:,} H100s, FP8",
                 (MLPERF_V30 if round_ == "v3.0" else MLPERF_V31).format(system) + f"; {gpus:,} GPUs, GBS {gbs:,}",
                 {**GPT3_175B, "dropout": False},
                 dict(dp=dp, tp=4, pp=8, micro_batch=1, grad_accum=grad_accum, schedule="interleaved",
                      virtual_stages=12, precision="fp8", **TP_OVERLAP, **NEMO_FLASH_ATTN),
                 "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(tokens / seconds, gpus),
                 f"{config}: TP 4, PP 8, interleaved 12 ("
                 + ("config_common.sh's INTERLEAVED_PIPELINE" if round_ == "v3.0" else "conf/custom.yaml's default")
                 + "), micro-batch 1"
                 + ("; its MINIBS=192 (GBS 3,072) was overridden at launch: the log's GBS 2,048 and gradient "
                    "accumulation 128 are planned" if (round_, gpus) == ("v3.1", 512) else "")
                 + (MLPERF_V30_NOTE if round_ == "v3.0" else MLPERF_V31_NOTE))
      for round_, system, config, gpus, dp, grad_accum, gbs, tokens, seconds in (
          ("v3.0", "dgxh100_n64_nemo", "config_DGXH100_64x8x128x4x8_mbs1.sh", 512, 16, 128, 2048,
           1_207_959_552, 3856.423 - 365.276),
          ("v3.0", "dgxh100_n96_nemo", "config_DGXH100_96x8x128x4x8_mbs1.sh", 768, 24, 128, 3072,
           1_207_959_552, 2580.563 - 246.320),
          ("v3.1", "eos_n64_ngc23.09_nemo", "config_DGXH100_64x8x192x4x8_mbs1.sh", 512, 16, 128, 2048,
           1_207_959_552, 3187.509),
          ("v3.1", "eos_n96_ngc23.09_nemo", "config_DGXH100_96x8x128x4x8_mbs1.sh", 768, 24, 128, 3072,
           1_258_291_200, 2221.956),
          ("v3.1", "eos-dfw_n512_ngc23.09_nemo", "config_DGXH100_512x8x16x4x8_mbs1.sh", 4096, 128, 16, 2048,
           1_207_959_552, 469.905),
          ("v3.1", "eos-dfw_n768_ngc23.09_nemo", "config_DGXH100_768x8x16x4x8_mbs1.sh", 6144, 192, 16, 3072,
           1_258_291_200, 328.343),
          ("v3.1", "eos-dfw_n1024_ngc23.09_nemo", "config_DGXH100_1024x8x16x4x8_mbs1.sh", 8192, 256, 16, 4096,
           1_308_622_848, 257.493),
          ("v3.1", "eos-dfw_n1280_ngc23.09_nemo", "config_DGXH100_1280x8x8x4x8_mbs1.sh", 10240, 320, 8, 2560,
           1_205_862_400, 219.492),
          ("v3.1", "eos-dfw_n1344_ngc23.09_nemo", "config_DGXH100_1344x8x8x4x8_mbs1.sh", 10752, 336, 8, 2688,
           1_211_105_280, 211.046))],
    # ---- dense, H100, TP 4, FP8 (MLPerf Training v4.1) -------------------------------------------------------------
    *[HeldOutRun(f"MLPerf v4.1 GPT-3 175B TP 4 x PP 8, {gpus:,} H100s, FP8", MLPERF41.format(system) +
                 f"; {gpus:,} GPUs, GBS {gbs:,}",
                 {**GPT3_175B, "dropout": False},
                 dict(dp=dp, tp=4, pp=8, micro_batch=2, grad_accum=grad_accum, schedule="interleaved",
                      virtual_stages=6, precision="fp8", **TP_OVERLAP, **NEMO),
                 "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(tokens / seconds, gpus),
                 f"NVIDIA/benchmarks/gpt3/implementations/{system}/{config} (the config README-{system}.md names): "
                 f"TP 4, PP 8, interleaved 6 (INTERLEAVED_PIPELINE=6), micro-batch 2, MINIBS {minibs} (GBS "
                 f"{gbs:,}, gradient accumulation {grad_accum}, as the log states)" + extra +
                 MLPERF41_NOTE.format(bucket=bucket))
      for system, config, gpus, dp, grad_accum, minibs, gbs, bucket, extra, tokens, seconds in (
          ("eos_n32_ngc24.09_nemo", "config_DGXH100_32x8x256x4x8_mbs2.sh", 256, 8, 128, 256, 2048, 125,
           "", 1_258_291_200, 5523.979),
          ("eos_n64_ngc24.09_nemo", "config_DGXH100_64x8x128x4x8_mbs2.sh", 512, 16, 64, 128, 2048, 200,
           ", VBOOST_VALUE=1 (nvidia-smi boost slider: not modelled)", 1_207_959_552, 2746.995))],
    # ---- context parallel, GB200, FP8 (MLPerf Training v5.1) -------------------------------------------------------
    _nvidia51_8b("tyche_ngpu72_ngc25.09_nemo", "gb200", 72, 172_368, 810.277),
    _nvidia51_8b("tyche_ngpu512_ngc25.09_nemo", "gb200", 512, 221_184, 312.117),
    # ---- dense, Megatron-style, A100: TP 2 (InternLM) ------------------------------------------------------------
    *[HeldOutRun(f"InternLM 7B TP 2, {gpus:,} A100s", INTERNLM.format(gpus=gpus, tgs=tgs, gbs=gpus // 2 * 16),
                 INTERNLM_7B, dict(dp=gpus // 2, tp=2, zero=1, micro_batch=4, grad_accum=4),
                 "a100-80gb", "tokens_per_gpu", tgs, INTERNLM_NOTE, INTERNLM_LINKS)
      for gpus, tgs in ((8, 3822), (1024, 2785))],
    # ---- dense, Megatron-style, A100: TP 2 (Megatron-LLaMA) -------------------------------------------------------
    HeldOutRun("Megatron-LLaMA 13B TP 2, 32 A100s", MEGATRON_LLAMA, MEGATRON_LLAMA_13B,
               dict(dp=16, tp=2, zero=2, micro_batch=4, grad_accum=32, sequence_parallel=True, fp32_grads=True),
               "a100-80gb", "tokens_per_gpu", _tokens_per_gpu(10e9 / (40.3 * 3600), 32), MEGATRON_LLAMA_NOTE),
    # ---- data-parallel (ZeRO-1), H100, hand-written CUDA (llm.c) -----------------------------------------------------
    HeldOutRun("llm.c GPT-2 1558M ZeRO-1, 8 H100s", LLMC_1558M, GPT2_1558M_LLMC,
               dict(dp=8, zero=1, micro_batch=16, grad_accum=8, **TE), "h100-sxm", "tokens_per_gpu",
               _tokens_per_gpu(1_048_576 / 2.80, 8), LLMC_1558M_NOTE),
    # ---- FSDP, H100, torchtitan run by torchao (bf16 and FP8) -------------------------------------------------------
    *[HeldOutRun(f"torchao Llama 3 8B FSDP, 8 H100s{label}", TORCHAO_F8.format(row, tps), _llama3("llama3-8b"),
                 dict(dp=8, zero=3, micro_batch=1, grad_accum=1, recompute="op", fp32_grads=True, **precision),
                 "h100-sxm", "tokens_per_gpu", tps, TORCHAO_F8_NOTE.format(flags) + extra)
      for label, row, precision, tps, flags, extra in (
          ("", "none (bfloat16)", {}, 6150, "", ""),
          (", Float8", "tensorwise with float8 all-gather", dict(precision="fp8"), 7689.5,
           " --model.converters=float8 --float8.enable_fsdp_float8_all_gather "
           "--float8.precompute_float8_dynamic_scale_for_fsdp --float8.force_recompute_fp8_weight_in_bwd",
           TORCHAO_F8_TENSORWISE))],
]

# ---- the third set: written down before the planner predicted any of them (module docstring) ----------------
# ---- model shapes (the configs the sources run) ------------------------------------------------------------------
# Llama 3.1 405B as the v5.0 submissions build it: pretrain.py's Llama31Config405B (NeMo v2.2.0, the Dockerfile's
# NEMO_REVISION: 126 layers, hidden 16,384, FFN 53,248, 128 heads, 8 query groups, SwiGLU, RMSNorm, RoPE, no biases,
# untied output, dropout 0) at conf/custom.yaml's encoder_seq_length 8,192 (num_layers 126, OVERWRITTEN_NUM_LAYERS
# unset): the llama3-405b preset, but for the vocabulary: the benchmark swaps Llama 3's tokenizer for the Mixtral
# 8x22B one (README.md 3.3.2), "Vocab size 32,000" in the reference's "Model details" table (mlcommons/training
# large_language_model_pretraining/nemo/README.md at 637c82f, 2025-03-18); NeMo pads it to a multiple of 128 x TP
# (32,768; padding not modelled, as the other NeMo rows)
MLPERF_LLAMA31_405B = _llama3("llama3-405b", vocab=32000)
# The layout every MLPerf Llama 3.1 405B submission read here runs, beside its dp, tp and gradient accumulation:
# PP 8 interleaved 8 with the embedding and the loss counted as a layer each (first/last_stage_layers 1), CP 2,
# micro-batch 1, FP8, sequence parallelism with userbuffers TP overlap, NeMo's optimizer settings (MLPERF50_NOTE)
MLPERF_405B_LAYOUT = dict(pp=8, cp=2, micro_batch=1, schedule="interleaved", virtual_stages=8, first_stage_layers=1,
                          last_stage_layers=1, precision="fp8", **TP_OVERLAP, **NEMO)

# ---- sources and what they leave unstated ------------------------------------------------------------------------
MLPERF50 = ("mlcommons/training_results_v5.0 NVIDIA/results/{}/llama31_405b/result_0.txt (commit 0fdc28f, "
            "2025-05-30, the repository's one commit): the training blocks' tokens over their summed durations")
MLPERF50_NOTE = ("; config_common.sh, conf/custom.yaml, pretrain.py and the Dockerfile of that implementation (NeMo "
                 "v2.2.0, Megatron-Core core_r0.11.0, PyTorch 25.01): ASYM_PP_EMBED=True and ASYM_PP_LOSS=True "
                 "(account_for_embedding/loss_in_pipeline_split: the embedding and the loss each counted as a layer, "
                 "128 slots over 8 x 8 virtual stages of 2, so the first and the last virtual stage build 1 layer, "
                 "the other 62 build 2: first/last_stage_layers 1); Megatron's distributed optimizer (ZeRO-1) with "
                 "overlapped gradient reduce and parameter gather (also with the optimizer step), gradients reduced "
                 "in bf16 (grad_reduce_in_fp32=False), bucket_size 200 parameters (custom.yaml's default: a bucket "
                 "per parameter tensor; not modelled) and FP8 parameters (FP8_PARAMS: not modelled); FP8 = "
                 "Transformer Engine delayed per-tensor scaling (FP8=True, FP8_HYBRID unset: the E4M3 format "
                 "forward and backward, amax history 1, most_recent; Megatron-Core 0.11 has only TEDelayedScaling): "
                 "the planner's FP8; no recomputation (ACT_CKPT_* unset); no CUDA graphs (LAYER_CUDA_GRAPH, "
                 "MCORE_CUDA_GRAPH unset); sequence parallelism (SEQ_PARALLEL default True) and userbuffers TP "
                 "overlap (TP_COMM_OVERLAP=True, conf/tp_overlap/h100tp8mbs1.yaml); pipeline send/receive overlapped "
                 "(overlap_p2p_comm); the embedding's weight gradients deferred (WGRAD_DEFERRAL_LIMIT 50: not "
                 "modelled); attention: Transformer Engine's (NVTE_FUSED_ATTN left at its default), context "
                 "parallelism its own; DGX H100 nodes (systems/eos-dfw_n*_ngc25.01_nemo.json: H100-SXM5-80GB, NVLink "
                 "Gen4 900 GB/s, 8 x ConnectX-7 IB NDR 400 Gb/s): the h100-sxm preset")

THIRD_SET: list[HeldOutRun] = [
    # ---- dense, H100, TP 8 x PP 8 (interleaved 8, uneven ends) x CP 2, FP8 (MLPerf Training v5.0) ------------------
    *[HeldOutRun(f"MLPerf v5.0 Llama 3.1 405B TP 8 x PP 8 x CP 2, {gpus:,} H100s, FP8", MLPERF50.format(system) +
                 f"; {gpus:,} GPUs, GBS {gbs:,}",
                 MLPERF_LLAMA31_405B,
                 dict(dp=dp, tp=8, grad_accum=grad_accum, **MLPERF_405B_LAYOUT),
                 "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(tokens / seconds, gpus),
                 f"NVIDIA/benchmarks/llama31_405b/implementations/{system}/{config} (the config "
                 f"README-{system}.md names): TP 8, PP 8, interleaved 8 (INTERLEAVED_PIPELINE=8), CP 2, micro-batch "
                 f"1, MINIBS {grad_accum} (GBS = MINIBS x {gpus:,} // (8 x 8 x 2) = {gbs:,}, gradient accumulation "
                 f"{grad_accum}, as the log states); {blocks} blocks of {steps} steps" + MLPERF50_NOTE)
      for system, config, gpus, dp, grad_accum, gbs, blocks, steps, tokens, seconds in (
          ("eos-dfw_n64_ngc25.01_nemo", "config_DGXH100_64x8x288xtp8pp8cp2.sh", 512, 4, 288, 1152, 6, 40,
           276_480 * 8192, 13242.069),
          ("eos-dfw_n1024_ngc25.01_nemo", "config_DGXH100_1024x8x24xtp8pp8cp2.sh", 8192, 64, 24, 1536, 7, 30,
           322_560 * 8192, 1103.634))],
]

# ---- the fourth set: written down before the planner predicted any of them (module docstring) ---------------
# ---- model shape ------------------------------------------------------------------------------------------------
# Qwen3-235B-A22B as the ModelZoo builds it (model_configs/benchmarking/Qwen3-235B-A22B.yaml at 8017e11): 94 layers,
# hidden 4096, FFN 12288 (--ffn-hidden-size; every layer is MoE, --moe-layer-freq left at 1), 64 heads of 128
# (--kv-channels), 4 query groups, --qk-layernorm, RMSNorm, SwiGLU, RoPE, no biases, untied output, dropout 0;
# 128 experts of 1536, top-8; vocabulary: Megatron pads len(tokenizer) of Qwen/Qwen3-235B-A22B up to a multiple of
# --make-vocab-size-divisible-by 1187 x TP (2,374 or 4,748), which gives 151,936 (= 1187 x 128) at TP 2 and 4
QWEN3_235B_A22B = dict(name="qwen3-235b-a22b", layers=94, hidden=4096, heads=64, kv_heads=4, vocab=151936,
                       seq_len=4096, ffn=12288, head_size=128, qk_norm=True,
                       moe=dict(experts=128, top_k=8, expert_ffn=1536), **LLAMA)

# ---- source and what it leaves unstated ---------------------------------------------------------------------------
MODELZOO = ("yanring/Megatron-MoE-ModelZoo examples/qwen3/readme.md (commit 8017e11, 2025-05-27; the table unchanged "
            "since, at best_practice/qwen3/readme.md from 38ce2ed), 'Performance Results' (256 H100 GPUs, NVLink 4, "
            "InfiniBand 8 x 50 GB/s), {row} row: step time {step} s; 256 GPUs, GBS 2,048")
MODELZOO_NOTE = ("the table gives TP, CP, EP, PP, EDP, ETP, VPP, DP, MBS, GBS, GA, recomputation, dispatcher, BF16, "
                 "sequence 4,096 and the step time; the rest from examples/qwen3/run_235b.sh (its launch line for "
                 "this row), sbatch_benchmarking.sh, runtime_configs/benchmarking/*.conf and "
                 "model_configs/benchmarking/Qwen3-235B-A22B.yaml at 8017e11: Megatron-LM pretrain_gpt.py with "
                 "Transformer Engine (--transformer-impl transformer_engine; attention backend left at auto: TE's "
                 "cuDNN attention, held_out_runs.TE), distributed optimizer (ZeRO-1) with --overlap-grad-reduce and "
                 "--overlap-param-gather, sequence parallelism, no --tp-comm-overlap (added to the bf16 launch only "
                 "on 2025-12-16, b09773a), --bf16 without --grad-reduce-in-bf16: gradients accumulated and reduced "
                 "in fp32 (arguments.py at Megatron-LM 1e057005: fp32_grads); 94 layers with "
                 "--account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split (runtime.conf "
                 "NUM_LAYERS 96, --num-layers-per-virtual-pipeline-stage 96 / PP 8 / VPP 4 = 3): 32 virtual stages "
                 "of 3, the first and the last holding 2 layers with the embedding or the loss "
                 "(transformer_block.get_num_layers_to_build at 1e057005): first/last_stage_layers 2; "
                 "--moe-router-force-load-balancing (balanced routing, as the planner assumes), dropless, grouped "
                 "GEMM, DeepEP (flex dispatcher: moe_dispatch per-node), permute fusion and an fp32 router (not "
                 "modelled); "
                 "--log-params-norm and --log-num-zeros-in-grad on every step (log interval 1) and manual GC every "
                 "5 steps (not modelled); pipeline send/receive overlapped (Megatron's overlap_p2p_comm default: "
                 "not modelled); the launch fine-tunes (--finetune, a checkpoint loaded), the same step; the "
                 "network is the table's (8 x 400 Gb/s per node): the h100-sxm preset; container: "
                 "dockers/Dockerfile at 8017e11 (nvcr.io/nvidia/pytorch:25.02-py3, Transformer Engine "
                 "release_v2.2, DeepEP, grouped_gemm v1.1.4), assumed to be the runs'")

MODELZOO_H100 = dict(zero=1, micro_batch=1, schedule="interleaved", virtual_stages=4, first_stage_layers=2,
                     last_stage_layers=2, sequence_parallel=True, fp32_grads=True, overlap_param_gather=True,
                     moe_dispatch="per-node", **TE)

FOURTH_SET: list[HeldOutRun] = [
    # ---- mixture of experts, fine-grained: 128 experts, top-8, 94 layers on PP 8 x VP 4 (uneven ends), H100 ------
    HeldOutRun("Megatron-MoE-ModelZoo Qwen3-235B-A22B TP 2 x EP 32 x PP 8, 256 H100s",
               MODELZOO.format(row="'Cross-node EP strategy', DeepEP (without '+1f1b overlap')", step="19.7"),
               QWEN3_235B_A22B,
               dict(dp=16, tp=2, pp=8, ep=32, expert_tp=1, grad_accum=128, **MODELZOO_H100),
               "h100-sxm", "tokens_per_gpu", 2048 * 4096 / 19.7 / 256,
               "Megatron-LM branch moe_dev at f3e6c5 (the table's Code column; not in NVIDIA/Megatron-LM's public "
               "history: the split and defaults read at main 1e057005, 2025-05-24); TP 2, ETP 1, EP 32 over the "
               "TP 2 x DP 16 ranks (EDP 1), GA 128; recomputation 'norm, act' (--recompute-granularity selective "
               "--recompute-modules moe_act layernorm: the norms and the experts' activation, no matmul) planned "
               "as none by the rule; " + MODELZOO_NOTE),
    HeldOutRun("Megatron-MoE-ModelZoo Qwen3-235B-A22B TP 4 x EP 8 x PP 8, 256 H100s",
               MODELZOO.format(row="'Intra-node EP strategy', DeepEP, TP 4 x EP 8 x PP 8 x VPP 4", step="29.0"),
               QWEN3_235B_A22B,
               dict(dp=8, tp=4, pp=8, ep=8, expert_tp=1, grad_accum=256, **MODELZOO_H100),
               "h100-sxm", "tokens_per_gpu", 2048 * 4096 / 29.0 / 256,
               "Megatron-LM main at 1e057005 (the table's Code column); TP 4, ETP 1, EP 8 over the TP 4 x DP 8 "
               "ranks (EDP 4), GA 256; no recomputation (the table's column empty, the launch line sets none); "
               "--moe-router-aux-loss-fusion (not modelled); " + MODELZOO_NOTE),
]
# ---- the fifth set: written down before the planner predicted any of them (module docstring) -----------------
# ---- model shape --------------------------------------------------------------------------------------------------
# gpt-oss-20b as the v6.0 submissions build it: pretrain.py's GPTModelProvider (Cisco/benchmarks/gpt_oss_20b/nemo at
# eabf23a): 24 layers (OVERWRITTEN_NUM_LAYERS 24), hidden 2880, 64 heads of 64 (kv_channels), 8 query groups, FFN
# and expert FFN 2880, 32 experts, top-4, every layer MoE, RMSNorm, gated linear unit, biases (ADD_BIAS_LINEAR unset:
# conf/gpt_oss.yaml's True), untied output, dropout 0: GPT_OSS_20B's layer, but for the sequence and the vocabulary:
# encoder_seq_length 8,192 (conf/gpt_oss.yaml's default, ENCODER_SEQ_LENGTH unset; the log's max_sequence_length
# 8192; the reference's "Sequence Length 8192") and vocab_size=128,256 set in pretrain.py (the Llama 3.1 tokenizer:
# the reference downloads the llama-3-1-8b-preprocessed-c4-dataset), not openai/gpt-oss-20b's 201,088
MLPERF_GPT_OSS_20B = {**GPT_OSS_20B, "name": "gpt-oss-20b-mlperf", "vocab": 128256, "seq_len": 8192}

# ---- source and what it leaves unstated -------------------------------------------------------------------------
MLPERF60 = ("mlcommons/training_results_v6.0 Cisco/results/{}/gpt_oss_20b/result_1.txt (read in the copy "
            "Richardyu114/training_results_v6.0, commit eabf23a): the training blocks' tokens over their summed "
            "durations")
MLPERF60_NOTE = ("; config_common.sh, conf/gpt_oss.yaml, conf/tp_overlap/h100tp2mbs1.yaml, pretrain.py and the "
                 "Dockerfile of Cisco/benchmarks/gpt_oss_20b/nemo (PyTorch 26.04, Megatron-Bridge 4b4b5c9, "
                 "Megatron-Core 2436e3d, a Transformer Engine fork, DeepEP hybrid-ep 34152ae): TP 2 with sequence "
                 "parallelism and userbuffers TP overlap (TP_COMM_OVERLAP=True, h100tp2mbs1.yaml), PP 1, CP 1, EP 4, "
                 "expert TP 1 (EXPERT_TENSOR_PARALLEL=1; pretrain.py sets etp = 1), micro-batch 1, MINIBS 1 (GBS = "
                 "MINIBS x GPUs / TP, gradient accumulation 1, as the log states); Megatron's distributed optimizer "
                 "(ZeRO-1) with overlapped gradient reduce and parameter gather, gradients reduced in bf16 "
                 "(grad_reduce_in_fp32=False), BUCKET_SIZE 768,000,000 and FP8 parameter gather (FP8_PARAM_GATHER, "
                 "FP8_PARAMS: not modelled); FP8 = Transformer Engine delayed scaling (FP8_RECIPE=delayed, "
                 "FP8_HYBRID: E4M3 forward, E5M2 backward, amax history 1,024, max), one scale per tensor: the "
                 "planner's FP8; attention in bf16 (FP8_DPA unset) through Transformer Engine, held_out_runs.TE; no "
                 "recomputation (RECOMPUTE_MODULES, ACT_CKPT_* unset); not modelled: CUDA graphs of the attention, "
                 "router and MoE preprocessing (CUDA_GRAPH_IMPLEMENTATION transformer_engine, CUDA_GRAPH_SCOPE "
                 "'attn moe_router moe_preprocess'), the DeepEP flex dispatcher (moe_dispatch per-node; its ep "
                 "group is within a node), grouped GEMM, permute and router fusion, the expert all-to-all "
                 "overlapped with deferred weight-gradient GEMMs (MOE_EP_A2A_OVERLAP=True: "
                 "overlap_moe_expert_parallel_comm, ep_overlap, and delay_wgrad_compute, not modelled; with one "
                 "micro-batch per step, nothing to pair, its "
                 "effect is not stated), fused QKV-RoPE, Transformer Engine's fused cross-entropy, the embedding "
                 "op the Dockerfile builds (embedding_lib, not in the folder), manual GC every 10 steps (GC_TRAIN=10); "
                 "routing is learned, not "
                 "forced balanced (MOE_ROUTER_LOAD_BALANCING_TYPE and MOE_ROUTER_FORCE_LOAD_BALANCING unset: "
                 "'none', False) with an expert capacity factor of 1.25 and no padding to capacity "
                 "(MOE_EXPERT_CAPACITY_FACTOR=1.25, MOE_PAD_EXPERT_INPUT_TO_CAPACITY=False: tokens past 1.25 x an "
                 "expert's balanced share dropped), where the planner charges every expert its balanced share; "
                 "every second layer attends to a window of 128 tokens (window_size (127, 0), "
                 "window_attn_skip_freq 2: planned with its window, sliding_window.py) with learned softmax offsets per "
                 "head (softmax_type 'learnable': the attention sinks, not modelled); gpt-oss's clamped GLU (quick-GELU, clamp 7, offset 1) "
                 "planned as SwiGLU; RoPE (position_embedding_type rope: the yarn_* settings pretrain.py passes are "
                 "unused); the logs name no config: the config of the log's node "
                 "count, its GBS and warmup steps (config_DGXH100_{8,16}x8x1xtp2pp1cp1ep4.sh; no README in "
                 "Cisco's folder names one); the logs cite line numbers of pretrain.py revisions other than the "
                 "published one (its settings read as published); nodes: systems/Zeus_*xH100_SXM_80GB.json "
                 "(H100-SXM5-80GB, NVLink 4 900 GB/s, 8 x ConnectX-8 400 Gb/s RoCE per node, rail-optimized): the "
                 "h100-sxm preset")

FIFTH_SET: list[HeldOutRun] = [
    # ---- mixture of experts, fine-grained: 32 experts, top-4, TP 2 x EP 4, H100, FP8 (MLPerf Training v6.0) -------
    *[HeldOutRun(f"MLPerf v6.0 gpt-oss-20b TP 2 x EP 4, {gpus:,} H100s, FP8", MLPERF60.format(system) +
                 f"; {gpus:,} GPUs, GBS {gbs:,}",
                 MLPERF_GPT_OSS_20B,
                 dict(dp=gpus // 2, tp=2, ep=4, expert_tp=1, micro_batch=1, grad_accum=1, precision="fp8",
                      moe_dispatch="per-node", ep_overlap=True, **TP_OVERLAP, **NEMO),
                 "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(tokens / seconds, gpus),
                 f"Cisco/benchmarks/gpt_oss_20b/nemo/{config} (DGXNNODES {gpus // 8}: MINIBS 1 x {gpus:,} // 2 = GBS "
                 f"{gbs:,}, LR_WARMUP_STEPS {warmup} as the log's opt_learning_rate_warmup_steps); EP 4 over the TP 2 "
                 f"x DP {gpus // 2} ranks (expert data parallel {gpus // 4}); {blocks} blocks of {steps} steps "
                 f"(VAL_CHECK_INTERVAL {steps}), the first {first} s against about {rest} s for each of the others "
                 f"(most of the difference in its first 32 steps; not stated why: kept, as every block)"
                 + MLPERF60_NOTE)
      for system, config, gpus, gbs, warmup, blocks, steps, first, rest, tokens, seconds in (
          ("Zeus_8xH100_SXM_80GB", "config_DGXH100_8x8x1xtp2pp1cp1ep4.sh", 64, 32, 512, 19, 384, "265.9", "163",
           233_472 * 8192, 3202.556),
          ("Zeus_16xH100_SXM_80GB", "config_DGXH100_16x8x1xtp2pp1cp1ep4.sh", 128, 64, 32, 24, 192, "167.1", "79.5",
           294_912 * 8192, 1995.159))],
]
# The arithmetic (each block's duration is its block_stop less its block_start, in the log's time_ms; the
# evaluations between blocks left out):
#   64 GPUs:  19 blocks x 384 steps = 7,296 steps x GBS 32 = 233,472 sequences x 8,192 = 1,912,602,624 tokens over
#             3,202.556 s (blocks of 265.872, 159.298, 162.166, 162.882, 163.237, 163.444, 163.485, 163.481, 163.520,
#             163.605, 163.495, 163.635, 163.551, 163.623, 163.523, 163.480, 163.425, 163.418, 163.416 s; first
#             block_start 1778762085656, last block_stop 1778765353839) = 597,211.3 tokens/s = 9,331.4 per GPU
#   128 GPUs: 24 blocks x 192 steps = 4,608 steps x GBS 64 = 294,912 sequences x 8,192 = 2,415,919,104 tokens over
#             1,995.159 s (blocks of 167.060, 77.022, 78.311, 78.828, 79.194, 79.381, 79.489, 79.622, 79.624, 79.653,
#             79.684, 79.748, 79.777, 79.790, 79.734, 79.758, 79.783, 79.791, 79.810, 79.847, 79.802, 79.832, 79.812,
#             79.807 s; first block_start 1778822290912, last block_stop 1778824330162) = 1,210,890.5 tokens/s =
#             9,460.1 per GPU

# ---- the sixth set: written down before the planner predicted it (module docstring) ------------------------------
NVIDIA_SKILLS = ("NVIDIA/skills skills/nemo-mbridge-perf-moe-comm-overlap/SKILL.md (commit 7149a88, 2026-08-20), "
                 "'Measured Evidence', 'HybridEP production-shape validation' table, 'EP overlap off' row (2026-07-25, "
                 "iterations 5-20: 24.7138 s a step, 244.039 model TFLOPS/GPU); the same run in "
                 "skills/nemo-mbridge-perf-moe-hardware-configs/card.yaml, qwen3_30b_h100_16's earlier_overlap_ab")

SIXTH_SET: list[HeldOutRun] = [
    # ---- mixture of experts, fine-grained: 128 experts, top-8, EP 16, H100, BF16 ------------------------------------
    HeldOutRun("NVIDIA skills Qwen3-30B-A3B EP 16, 16 H100s", NVIDIA_SKILLS + "; 16 GPUs, GBS 1,024", QWEN3_30B_A3B,
               dict(dp=16, ep=16, zero=1, micro_batch=1, grad_accum=64, moe_dispatch="per-node", **TE),
               "h100-sxm", "tokens_per_gpu", 1024 * 4096 / 24.7138 / 16,
               "stated: 16 H100s, BF16, sequence 4,096, TP 1, PP 1, CP 1, EP 16, MBS 1, GBS 1,024 (so DP 16, GA 64), "
               "forced-balanced routing, the HybridEP dispatcher (moe_dispatch per-node: its ep group spans the two "
               "nodes), Transformer Engine CUDA graphs of the MoE router and preprocessing only (not modelled), "
               "no EP overlap, no delayed weight gradients; rank-0 peak allocated memory 62.166 GiB (a later "
               "configuration's). Not stated: the recomputation (none assumed, as the FP8 run of the same layout "
               "in held_out_runs, whose recipe sets none), the optimizer (Megatron's distributed optimizer, ZeRO-1, "
               "assumed), the H100 variant and links (the h100-sxm preset), the Megatron-Bridge version. The same "
               "layout as held_out_runs' Megatron-Bridge Qwen3-30B-A3B EP 16 run, a development run: another "
               "measurement, in BF16, not FP8, months later"),
]

# ---- the seventh set: written down before the planner predicted any of them (module docstring) ----------------
NEMO_DOCS = ("docs.nvidia.com/nemo-framework user-guide/latest/performance/{} (NVIDIA's NeMo Framework user guide), "
             "'Container: NeMo {}, System: {}' pre-training table, the {} row")
# What the release's files add (NVIDIA/NeMo at the release's tag: 25.02 is r2.2.0, 132f217, its performance scripts
# in scripts/llm/performance/; 25.04 is r2.3.0, ca0af5e, in scripts/performance/): the recommended model configs'
# row, the performance script and the recipe
NEMO_DOCS_NOTE = ("stated: FP8 ({}), the table's GPUs, global batch, micro-batch, sequence, TP, PP, CP, VP, EP and "
                  "gradient accumulation; the release's configuration file (NeMo {}: {}recommended_model_configs/"
                  "model_configs_{}.csv, '{}') gives the same; {}; the recipe (nemo/collections/llm/recipes/{}.py, "
                  "pretrain_performance_optimizations, and the performance scripts' set_primary_perf_configs): "
                  "Megatron's distributed optimizer (ZeRO-1) with the gradient reduce and parameter gather "
                  "overlapped, gradients reduced in bf16, the alltoall dispatcher, MegatronTokenDropCallback (capacity "
                  "factor 1 with every expert padded to its capacity: each expert computes its balanced share), "
                  "sequence parallelism where TP > 1 and no TP communication overlap (MegatronCommOverlapCallback's "
                  "default), no recomputation, Transformer Engine attention; the tokenizer mistralai/{}. Not stated: "
                  "the NeMo commit of the run (a container tag), the links and the placement (the {} preset{}), the "
                  "steps timed")
R22, R23 = ("25.02, r2.2.0", "scripts/llm/performance/"), ("25.04, r2.3.0", "scripts/performance/")
DELAYED = "per tensor: the page says FP8, the release's script asks for bf16_with_fp8_mixed, delayed scaling"
MIXTRAL_8X7B_4K = {"preset": "mixtral-8x7b", "seq_len": 4096}

SEVENTH_SET: list[HeldOutRun] = [
    # ---- mixture of experts, coarse: 8 experts, top-2, EP 8, Blackwell, FP8 (NeMo's user guide) ------------------
    *[HeldOutRun(f"NeMo docs Mixtral 8x7B EP 8, 64 {gpu.upper()}s, FP8",
                 NEMO_DOCS.format(page, container, system, "Mixtral-8x7B") + f": {published:,} tokens/s/GPU; 64 GPUs, "
                 f"GBS 256", MIXTRAL_8X7B_4K,
                 dict(dp=64, ep=8, micro_batch=2, grad_accum=2, precision="fp8", **NEMO),
                 gpu, "tokens_per_gpu", published,
                 NEMO_DOCS_NOTE.format(scaling, *release, gpu, row, graphs, "mixtral_8x7b",
                                       "Mixtral-8x7B-v0.1 (32,000)", gpu, placement))
      for gpu, page, container, system, published, scaling, release, row, graphs, placement in (
          ("b200", "performance_summary.html", "25.02", "DGX-B200", 15457, DELAYED, R22,
           "pre_train,mixtral,8x7b,b200,fp8,64.0,4096.0,1.0,1.0,1.0,64.0,8.0,,1.0,2.0,256.0",
           "CUDA graphs on (pretrain_mixtral_8x7b.py turns them on for B200s; not modelled)", ": 8 nodes of 8"),
          ("gb200", "archive/25.04-performance-summary.html", "25.04", "DGX-GB200", 19275,
           "'per-tensor FP8 quantization using the scaling factors calculated in the current step'", R23,
           "pre_train,mixtral,8x7b,gb200,fp8,64.0,4096.0,1.0,1.0,1.0,8.0,1.0,2.0,256.0,,1,0,0,0,",
           "CUDA graphs on (its cuda_graphs column; not modelled)", ": held_out.nvlink_segment's one rack of 64"))],
    # ---- mixture of experts, coarse, at 65,536 tokens: TP 2 x PP 4 (VP 14) x CP 8 x EP 8, B200, FP8 ---------------
    HeldOutRun("NeMo docs Mixtral 8x22B TP 2 x PP 4 x CP 8 x EP 8, 256 B200s, FP8",
               NEMO_DOCS.format("performance_summary.html", "25.02", "DGX-B200", "Mixtral-8x22B") + ": 2,232 "
               "tokens/s/GPU; 256 GPUs, GBS 64",
               MIXTRAL_8X22B,
               dict(dp=4, tp=2, pp=4, cp=8, ep=8, expert_tp=1, micro_batch=1, grad_accum=16, sequence_parallel=True,
                    schedule="interleaved", virtual_stages=14, precision="fp8", **NEMO),
               "b200", "tokens_per_gpu", 2232,
               NEMO_DOCS_NOTE.format(DELAYED, *R22, "b200",
                                     "pre_train,mixtral,8x22b,b200,fp8,256.0,65536.0,2.0,4.0,8.0,4.0,8.0,1.0,14.0,1.0,"
                                     "64.0,1.0", "no CUDA graphs (pretrain_mixtral_8x22b.py leaves them off)",
                                     "mixtral_8x22b", "Mixtral-8x22B-v0.1 (32,768)", "b200", ": 32 nodes of 8")
               + "; the table prints GBS 1 and MBS 64, swapped: its GA 16 over DP 256 / (2 x 4 x 8) = 4 gives GBS "
               "64 of MBS 1, as the configuration file; 56 layers on PP 4 x VP 14, one a virtual stage (NeMo 2.2 "
               "counts no embedding or loss as a layer)"),
]

DEEPSEEK_NOTE = ("launch.sh and NeMo's scripts/performance/llm/pretrain_deepseek_v3.py at 7a8f1cc (the eighth set's "
                 "rules in the module docstring): first/last stage {} / {} decoder layers, one MTP module, capacity "
                 "factor 1 with padding (each expert computes its balanced share), recompute_modules {} planned as "
                 "selective (no matmul recomputed), all-to-all dispatcher, no TP overlap, sequence parallelism (the "
                 "DeepSeek trainer's default), distributed optimizer with overlapped gradient reduce and parameter "
                 "gather, TE attention; CUDA graphs off (recommended_model_configs' cuda_graphs 0)")

EIGHTH_SET: list[HeldOutRun] = [
    # ---- mixture of experts, fine-grained, latent attention: DeepSeek-V3, BF16 (dgxc v25.05.04) --------------------
    HeldOutRun("DGXC DeepSeek-V3 TP 2 x PP 8 x EP 64, 512 H100s", DGXC_2505.format("deepseek_v3/pretraining/README.md")
               + ", 'Deepseek V3 BF16 H100' table, 512x H100 column; 512 GPUs, GBS 4,096", DEEPSEEK_V3,
               dict(dp=32, tp=2, pp=8, ep=64, expert_tp=1, micro_batch=1, grad_accum=128, first_stage_layers=7,
                    last_stage_layers=6, recompute="selective", sequence_parallel=True, **NEMO),
               "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(342755.90, 512),
               DEEPSEEK_NOTE.format(7, 6, "mla_up_proj") + H100_NETWORK),
    HeldOutRun("DGXC DeepSeek-V3 TP 2 x PP 4 x EP 32, 128 GB200s", DGXC_2505.format("deepseek_v3/pretraining/README.md")
               + ", 'Deepseek V3 BF16 GB200' table, 128x GB200 column; 128 GPUs, GBS 1,024", DEEPSEEK_V3,
               dict(dp=16, tp=2, pp=4, ep=32, expert_tp=1, micro_batch=1, grad_accum=64, first_stage_layers=15,
                    last_stage_layers=14, recompute="selective", sequence_parallel=True, **NEMO),
               "gb200", "tokens_per_gpu", _tokens_per_gpu(122755.33, 128),
               DEEPSEEK_NOTE.format(15, 14, "core_attn") + "; GB200 NVL72 trays of 4 GPUs (launch.sh GPUS_PER_NODE=4), "
               "the job's placement on racks not stated (held_out.nvlink_segment's 2 racks of 64)"),
]

# ---- the ninth set: written down before the planner predicted any of them (module docstring) ------------------
MBRIDGE_2608 = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md (last changed at 4ab94dfad, 2026-08-11; read "
                "at 067f987df), '26.08 NeMo Container', Pre-Training Performance, 'Model: {}', DGX-GB200 MXFP8 row: "
                "{:,} tokens/s/GPU; {} GPUs, GBS {:,}")
MBRIDGE_2608_NOTE = ("src/megatron/bridge/perf_recipes/{recipe} at 067f987df ({function}): Transformer Engine's MXFP8 "
                     "recipe (fp8_recipe 'mxfp8', FP8 parameters and their all-gather: not modelled), distributed "
                     "optimizer (ZeRO-1) with overlapped gradient reduce and parameter gather, gradients reduced in "
                     "bf16, HybridEP flex dispatcher (moe_dispatch per-node), routing forced to balance and dropless "
                     "(the page's note), expert-parallel all-to-alls overlapped with the other micro-batch's compute "
                     "(overlap_moe_expert_parallel_comm: ep_overlap; delay_wgrad_compute: not modelled), "
                     "full-iteration CUDA graphs, fused router and permutation, paged stashing (not modelled), TE "
                     "attention; {rest}; mock data; GB200 NVL72 trays of 4 GPUs, placed by held_out.nvlink_segment")
MBRIDGE_GB200 = dict(zero=1, overlap_param_gather=True, precision="mxfp8", moe_dispatch="per-node", ep_overlap=True,
                     **TE)


def _mbridge_2608(name, table_model, published, gpus, gbs, model, strategy, recipe, function, rest) -> HeldOutRun:
    """One GB200 MXFP8 row of Megatron-Bridge's 26.08 table: its figure written once, in the source and as published;
    its GPU count and global batch as the table states them."""
    return HeldOutRun(name, MBRIDGE_2608.format(table_model, published, gpus, gbs), model,
                      {**strategy, **MBRIDGE_GB200}, "gb200", "tokens_per_gpu", published,
                      MBRIDGE_2608_NOTE.format(recipe=recipe, function=function, rest=rest))


NINTH_SET: list[HeldOutRun] = [
    # ---- mixture of experts, fine-grained, MXFP8, GB200 (Megatron-Bridge 26.08) ---------------------------------
    _mbridge_2608("Megatron-Bridge 26.08 DeepSeek-V3 PP 4 x VP 4 x EP 64, 256 GB200s, MXFP8", "DeepSeekV3", 4912,
                  256, 4096,
                  DEEPSEEK_V3, dict(dp=64, pp=4, ep=64, expert_tp=1, micro_batch=1, grad_accum=64,
                                    schedule="interleaved", virtual_stages=4, first_stage_layers=4,
                                    last_stage_layers=1, recompute="selective"),
                  "deepseek/gb200/deepseek_v3.py", "deepseek_v3_pretrain_256gpu_gb200_fp8mx_config",
                  "recompute_modules ['mla_up_proj'] planned as selective (the eighth set's rule); the layout "
                  "set_deepseek_v3_pipeline_model_parallel_layout gives PP 4 x VP 4: [embedding + 4 decoder "
                  "layers], 14 x [4], [1 + the MTP module + loss], so the first and the last virtual stage "
                  "hold 4 and 1 decoder layers, the MTP module on the last stage; mtp_num_layers 1; the "
                  "precision-aware optimizer's bf16 moments and gradients (not modelled); vocabulary 129,280 "
                  "(make_vocab_size_divisible_by 1280 leaves it)"),
    _mbridge_2608("Megatron-Bridge 26.08 gpt-oss-120b EP 64, 64 GB200s, MXFP8", "GPT OSS 120B", 28672, 64, 1280,
                  GPT_OSS_120B, dict(dp=64, ep=64, expert_tp=1, micro_batch=4, grad_accum=5),
                  "gpt_oss/gb200/gpt_oss.py", "gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config",
                  "recompute_modules set to [] (no recomputation); FP8 attention (fp8_dot_product_attention: "
                  "not modelled, the planner's attention runs in bf16); the sliding-window half of the layers "
                  "at its window, the sinks not modelled; the vocabulary from the Hugging Face config "
                  "(201,088)"),
    _mbridge_2608("Megatron-Bridge 26.08 Qwen3-30B-A3B EP 8, 8 GB200s, MXFP8", "Qwen3_30B_a3B", 39936, 8, 512,
                  QWEN3_30B_A3B, dict(dp=8, ep=8, expert_tp=1, micro_batch=4, grad_accum=16),
                  "qwen/gb200/qwen3_moe.py", "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config",
                  "no recomputation (the recipe sets recompute_granularity None); FP8 attention "
                  "(fp8_dot_product_attention: not modelled); TP overlap asked but off at TP 1; the "
                  "vocabulary from the Hugging Face config (151,936)"),
    _mbridge_2608("Megatron-Bridge 26.08 Qwen3-235B-A22B PP 8 x VP 3 x EP 32, 256 GB200s, MXFP8", "Qwen3_235B_a22B",
                  7280, 256, 8192, QWEN3_235B_A22B,
                  dict(dp=32, pp=8, ep=32, expert_tp=1, micro_batch=1, grad_accum=256, schedule="interleaved",
                       virtual_stages=3, first_stage_layers=3, last_stage_layers=3),
                  "qwen/gb200/qwen3_moe.py", "qwen3_235b_a22b_pretrain_256gpu_gb200_fp8mx_config",
                  "no recomputation; FP8 attention (fp8_dot_product_attention: not modelled); 94 layers on PP 8 "
                  "x VP 3 with account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split "
                  "(no layout given): 96 over 24 virtual stages of 4, the first and the last holding 3 decoder "
                  "layers beside the embedding or the loss; the vocabulary from the Hugging Face config "
                  "(151,936)"),
]

# ---- the tenth set: written down before the planner predicted any of them (module docstring) -----------------
# Which runs, by the fifth set's rules (per submitter and GPU type the smallest and the largest GPU count, each its
# first result log, the blocks' tokens over their summed durations): of the gpt_oss_20b submissions on B200 and GB200
# GPUs, now that MXFP8 is expressible, those whose configuration the copy states. Each is one node of 8 B200s, TP 1,
# PP 1, CP 1, EP 1, micro-batch 2, global batch 16. Left out: NVIDIA's two GB200 submissions (8 and 72 GPUs: the
# configs its READMEs name are not in its folder, only same-named files of other submitters), CoreWeave's 64 B200s
# (its log's global batch, 64, contradicts its config's CP 2 x MINIBS 1 on 64 GPUs, 32) and Netweb's 8 B200s (the
# copy holds no config for that system and its log has no configuration dump). Where a stored config contradicts its
# log (Dell's names EP 2 and scoped CUDA graphs), the log's configuration dump, the run's own record, is taken.
MLPERF60_B200 = ("mlcommons/training_results_v6.0 {}/results/{}/gpt_oss_20b/{} (read in the copy "
                 "Richardyu114/training_results_v6.0, commit eabf23a): the training blocks' tokens over their summed "
                 "durations; 8 GPUs, GBS 16")
MLPERF60_B200_NOTE = ("the log's configuration dump (DLPAL {}): TP 1, PP 1, CP 1, EP 1, expert TP 1, micro-batch 2, "
                      "global batch 16 (gradient accumulation 1), sequence 8,192, vocabulary 128,256, 24 layers "
                      "(MLPERF_GPT_OSS_20B); Transformer Engine MXFP8 (fp8_recipe 'mxfp8', E4M3, FP8 parameters and "
                      "their gather: not modelled), attention in bf16 (fp8_dot_product_attention unset), no "
                      "recomputation (recompute_granularity None; the dump's recompute_modules ['core_attn'] is "
                      "Megatron-Core's default, inert without it); Megatron's distributed optimizer (ZeRO-1) with overlapped gradient reduce and "
                      "parameter gather, gradients reduced in bf16 (grad_reduce_in_fp32=False, use_megatron_fsdp="
                      "False); full-iteration CUDA graphs (cuda_graph_impl 'local', full_iteration: not modelled); no "
                      "TP or EP overlap; the sliding-window half of the layers at its window, the sinks not modelled; "
                      "{} blocks of 768 steps, the first {} s against about {} s for each of the others; the b200 "
                      "preset (B200-SXM-180GB, one node of 8){}")

TENTH_SET: list[HeldOutRun] = [
    # ---- mixture of experts, fine-grained: 32 experts, top-4, DP 8 on 8 B200s, MXFP8 (MLPerf Training v6.0) -------
    *[HeldOutRun(f"MLPerf v6.0 gpt-oss-20b DP 8, 8 B200s, MXFP8 ({submitter})",
                 MLPERF60_B200.format(submitter, system, result), MLPERF_GPT_OSS_20B,
                 dict(dp=8, micro_batch=2, grad_accum=1, precision="mxfp8", **NEMO),
                 "b200", "tokens_per_gpu", _tokens_per_gpu(196_608 * 8192 / seconds, 8),
                 MLPERF60_B200_NOTE.format(dlpal, blocks, first, rest, note))
      for submitter, system, result, dlpal, blocks, first, rest, seconds, note in (
          ("Dell", "1xXE9780Lx8B200-SXM-180GB", "result_0.txt", "XE9780LSPB200_1x8x2xtp1pp1cp1ep1_mxfp8", 16, "354.0",
           "348", 5571.446, "; the stored config_DGXB200_1x8x2xtp1pp1cp1ep2_mxfp8.sh (EP 2, scoped CUDA graphs) is "
           "not what the log ran"),
          ("Lambda", "b200_n1_ngc25.09_nemo", "result_1.txt (the folder's first; it has no result_0)",
           "DGXB200_1x8x2xtp1pp1cp1ep1_mxfp8", 16, "386.9", "348", 5605.960,
           "; 39.5 s of CUDA-graph capture in the first block (kept, as every block)"),
          ("Supermicro", "SYS-A22GA-NBRT-8xB200_SXM", "result_01.txt (the folder's first)",
           "DGXB200_1x8x2xtp1pp1cp1ep1_mxfp8", 16, "367.2", "353.5", 5669.218, ""))],
]
# The arithmetic (each block's duration is its block_stop less its block_start, in the log's time_ms; the samples are
# (block_stop step - block_start step) x 16, which the logged samples_count confirms): 16 blocks x 768 steps = 12,288
# steps x GBS 16 = 196,608 sequences x 8,192 = 1,610,612,736 tokens in each run, over
#   Dell        5,571.446 s = 289,083.4 tokens/s = 36,135.4 per GPU
#   Lambda      5,605.960 s (first block_start 1778343666267, last block_stop 1778349397605) = 287,303.6 tokens/s =
#               35,913.0 per GPU
#   Supermicro  5,669.218 s = 284,097.9 tokens/s = 35,512.2 per GPU

# ---- the eleventh set: written down before the planner predicted any of them (module docstring) ---------------
# Which runs, by the fifth set's rules: of MLPerf Training v6.0's deepseekv3_671b submissions on B200 and GB200 GPUs
# (none on B200), per submitter the smallest and the largest GPU count: NVIDIA's 512 and 8,192 GB200s and Google's
# 256 (its one count). The GB300 submissions (NVIDIA's theia, CoreWeave's) have no preset.
MLPERF60_DSV3 = ("mlcommons/training_results_v6.0 {}/results/{}/deepseekv3_671b/result_0.txt (read in the copy "
                 "Richardyu114/training_results_v6.0, commit eabf23a): the training blocks' tokens over their summed "
                 "durations; {:,} GPUs, GBS {:,}")
MLPERF60_DSV3_NOTE = ("{config} ({where}): TP 2 with sequence parallelism (pretrain.py: TP > 1), PP 4 x VP 4 with the "
                      "layout 'Et*4|(t*4|)*14tmL' (the first virtual stage the embedding and 4 decoder layers, 14 of "
                      "4, the last 1 with the MTP module and the loss: first/last_stage_layers 4 / 1), EP 32, expert "
                      "TP 1, CP 1, micro-batch 1 (conf/model/671b.yaml), global batch MINIBS {minibs} x DP {dp:,}; "
                      "the model as Google's log prints it (MLAModelProvider: 61 layers, the first 3 dense, 256 "
                      "experts of 2,048 and 1 shared, top-8, latent attention 512 / 1,536, one MTP module, "
                      "vocabulary 129,280, untied; the closed division's model, so NVIDIA's too, whose logs print "
                      "only their parallel sizes, which agree): DEEPSEEK_V3; Transformer Engine MXFP8 with FP8 parameters and their gather "
                      "(not modelled) and FP8 attention (FP8_DPA: not modelled, the planner's attention runs in "
                      "bf16); RECOMPUTE_MODULES 'mlp', which recomputes only the 3 dense layers' MLP "
                      "(Megatron-Core's transformer_layer.py skips MoE layers: about 3 % of the forward matmuls), "
                      "planned as selective by the eighth set's rule; routing not forced to balance (real data, "
                      "the sequence auxiliary loss; planned balanced); the flex dispatcher with HybridEP (moe_dispatch per-node); the all-to-alls "
                      "overlapped with another micro-batch's compute (OVERLAP_MOE_EXPERT_PARALLEL_COMM: ep_overlap; "
                      "DELAY_WGRAD_COMPUTE: not modelled); full-iteration and optimizer CUDA graphs, "
                      "paged stashing, pipeline sends overlapped (overlap_p2p_comm) and the precision-aware "
                      "optimizer's bf16 moments (not modelled); Megatron's distributed optimizer (ZeRO-1) with "
                      "overlapped gradient reduce and parameter gather, gradients reduced in bf16; no TP overlap; GB200 NVL72 trays of 4 GPUs placed "
                      "by held_out.nvlink_segment (racks of 64); {blocks} blocks of one step each (evaluation after "
                      "every step, left out), {spread}")

ELEVENTH_SET: list[HeldOutRun] = [
    # ---- mixture of experts, fine-grained, latent attention: DeepSeek-V3 on GB200s, MXFP8 (MLPerf v6.0) ---------
    *[HeldOutRun(f"MLPerf v6.0 DeepSeek-V3 TP 2 x PP 4 x VP 4 x EP 32, {gpus:,} GB200s, MXFP8 ({submitter})",
                 MLPERF60_DSV3.format(submitter, system, gpus, minibs * gpus // 8), DEEPSEEK_V3,
                 dict(dp=gpus // 8, tp=2, pp=4, ep=32, expert_tp=1, micro_batch=1, grad_accum=minibs,
                      schedule="interleaved", virtual_stages=4, first_stage_layers=4, last_stage_layers=1,
                      recompute="selective", sequence_parallel=True, precision="mxfp8", moe_dispatch="per-node",
                      ep_overlap=True, **NEMO),
                 "gb200", "tokens_per_gpu", _tokens_per_gpu(737_280 * 4096 / seconds, gpus),
                 MLPERF60_DSV3_NOTE.format(config=config, where=where, minibs=minibs, dp=gpus // 8, blocks=blocks,
                                           spread=spread))
      for submitter, system, gpus, minibs, config, where, blocks, seconds, spread in (
          ("NVIDIA", "tyche-hsg_ngpu512_ngc26.04_nemo", 512, 240,
           "config_GB200_128x4x240xtp2pp4ep32cp1_mxfp8_full_cg.sh",
           "NVIDIA/benchmarks/deepseekv3_671b/implementations/tyche-hsg_ngpu512_ngc26.04_nemo, named by its README, "
           "with the config_common.sh and config_common_mxfp8.sh it sources", 48, 1503.863,
           "the first and the third 38.3 s and 39.2 s, the rest 30.7-32.1 s"),
          ("NVIDIA", "tyche-hsg_ngpu8192_ngc26.04_nemo", 8192, 16,
           "config_GB200_2048x4x16xtp2pp4ep32cp1_mxfp8_full_cg.sh",
           "its implementation folder, named by its README; the common files as the 512-GPU folder's", 45, 162.011,
           "3.45-4.66 s each"),
          ("Google", "gb200_nvl72_n64_ngc26.04_nemo", 256, 480, "config_GB200_64x4x480xtp2pp4ep32cp1_mxfp8_full_cg.sh",
           "Google/benchmarks/deepseekv3_671b/implementations/gb200_megatron_bridge, named by the log's DLPAL line; "
           "the log's configuration dump gives the same settings", 48, 2872.388,
           "the first and the third 64.9 s and 67.6 s, the rest 59.1-60.5 s"))],
]
# The arithmetic (each block is one step, block_start to block_stop in the log's time_ms; its samples are the step's
# global batch, and the blocks' total equals run_stop's samples_count, 737,280, in each run): 737,280 sequences x
# 4,096 = 3,019,898,880 tokens over
#   NVIDIA 512    48 blocks x GBS 15,360, 1,503.863 s = 2,008,094.4 tokens/s = 3,922.1 per GPU
#   NVIDIA 8,192  45 blocks x GBS 16,384, 162.011 s = 18,640,085.4 tokens/s = 2,275.4 per GPU
#   Google 256    48 blocks x GBS 15,360, 2,872.388 s = 1,051,354.8 tokens/s = 4,106.9 per GPU

# ---- the twelfth set: written down before the planner predicted any of them (module docstring) ---------------
# Which runs, by the fifth set's rules, now that B300 and GB300 have presets: of MLPerf Training v6.0's LLM
# pretraining submissions on B300 and GB300 GPUs (gpt_oss_20b, deepseekv3_671b, llama31_405b, llama31_8b), per
# submitter, benchmark and GPU type the smallest and the largest GPU count (where several systems share a count, the
# first folder in the copy's order), each its first result log, kept where the copy states its configuration (the
# config its README names; where no README names one, a config named for the system or in a folder named for it; or
# the log's configuration dump, which is taken where it contradicts a stored config) in a precision the planner
# expresses. Left out: every llama31_405b and llama31_8b run picked (NVFP4, not modelled, but for Dell's three and
# NVIDIA's 512-GPU llama31_8b runs, whose configs are not in the copy and whose logs print no configuration); of the
# gpt_oss_20b runs picked (every one MXFP8), those whose logs print no configuration and for which the copy holds no
# config: Dell's 4 and 64 GB300s, GigaComputing's 72 GB300s and 8 B300s, NVIDIA's 8 GB300s (its README's config is
# not in the copy), QCT's 8 B300s and 8 GB300s (the same) and Nebius's 8 GB300s. As first written down the set took
# HPE's 32 GB300s, a middle count, for its largest, whose results folder had been missed; it was predicted once
# (-5.8 %) before a review of the set against the copy found the 72-GPU run, which the rule picks, and it was
# replaced by that run, predicted once after.
MLPERF60_DSV3_GB300_NOTE = (
    "{config} ({where}): TP 1, PP 4 x VP 4 with the layout 'Et*4|(t*4|)*14tmL' (first/last_stage_layers 4 / 1, as "
    "the eleventh set's), EP 32, expert TP 1, CP 1, micro-batch 1 (conf/model/671b.yaml), global batch MINIBS "
    "{minibs} x DP {dp:,}; the model as the eleventh set's (DEEPSEEK_V3); Transformer Engine MXFP8 with FP8 "
    "parameters and their gather and FP8 attention and output projection (FP8_DPA, FP8_OUTPUT_PROJ: not modelled); "
    "no recomputation (RECOMPUTE_MODULES empty); routing not forced to balance (planned balanced); the flex "
    "dispatcher with HybridEP (moe_dispatch per-node); the all-to-alls overlapped with another micro-batch's compute "
    "(OVERLAP_MOE_EXPERT_PARALLEL_COMM: ep_overlap; DELAY_WGRAD_COMPUTE: not modelled); full-iteration and "
    "optimizer CUDA graphs, paged stashing and the precision-aware optimizer (not modelled); Megatron's distributed "
    "optimizer (ZeRO-1) with overlapped gradient reduce and parameter gather, gradients reduced in bf16 as the "
    "eleventh set's reading of the same implementation; GB300 NVL72 trays of 4 GPUs placed by "
    "held_out.nvlink_segment (racks of 64; the configs set SEGMENT 16, 16 trays); {blocks} blocks of one step each "
    "(evaluation after every step, left out), {spread}")

MLPERF60_ULTRA = ("mlcommons/training_results_v6.0 {}/results/{}/gpt_oss_20b/{} (read in the copy "
                  "Richardyu114/training_results_v6.0, commit eabf23a): the training blocks' tokens over their summed "
                  "durations; {:,} GPUs, GBS {:,}")
MLPERF60_ULTRA_NOTE = (
    "{config}: TP {tp}{sp}, PP 1, CP {cp}, EP {ep}, expert TP 1 (pretrain.py sets it), micro-batch {mbs}, global "
    "batch {gbs} (gradient accumulation 1), sequence 8,192, vocabulary 128,256, 24 layers (MLPERF_GPT_OSS_20B); "
    "Transformer Engine MXFP8 (fp8_recipe 'mxfp8', E4M3), attention in bf16, no recomputation; Megatron's "
    "distributed optimizer (ZeRO-1) with overlapped gradient reduce and parameter gather, gradients reduced in bf16 "
    "(pretrain.py); full-iteration CUDA graphs (not modelled); the flex dispatcher with HybridEP where EP > 1 "
    "(moe_dispatch per-node); no TP or EP overlap; routing learned, not forced to balance (planned balanced); the "
    "sliding-window half of the layers at its window, the sinks not modelled; {blocks} blocks of {steps} steps, "
    "{spread}")

TWELFTH_SET: list[HeldOutRun] = [
    # ---- mixture of experts, fine-grained, latent attention: DeepSeek-V3 on GB300s, MXFP8 (MLPerf v6.0) ---------
    *[HeldOutRun(f"MLPerf v6.0 DeepSeek-V3 PP 4 x VP 4 x EP 32, {gpus:,} GB300s, MXFP8 ({submitter})",
                 MLPERF60_DSV3.format(submitter, system, gpus, minibs * gpus // 4), DEEPSEEK_V3,
                 dict(dp=gpus // 4, pp=4, ep=32, expert_tp=1, micro_batch=1, grad_accum=minibs,
                      schedule="interleaved", virtual_stages=4, first_stage_layers=4, last_stage_layers=1,
                      precision="mxfp8", moe_dispatch="per-node", ep_overlap=True, **NEMO),
                 "gb300", "tokens_per_gpu", _tokens_per_gpu(samples * 4096 / seconds, gpus),
                 MLPERF60_DSV3_GB300_NOTE.format(config=config, where=where, minibs=minibs, dp=gpus // 4,
                                                 blocks=blocks, spread=spread))
      for submitter, system, gpus, minibs, config, where, blocks, samples, seconds, spread in (
          ("NVIDIA", "theia_ngpu256_ngc26.04_nemo", 256, 240, "config_GB300_64x4x240xtp1pp4ep32cp1_mxfp8_full_cg.sh",
           "named by its README; the file is in NVIDIA's theia_ngpu512_ngc26.04_nemo folder, not its own (the copy "
           "in tyche-hsg_ngpu8192_ngc26.04_nemo differs by one commented-out line), with the config_common.sh and "
           "config_common_mxfp8.sh of tyche-hsg_ngpu512_ngc26.04_nemo, the only ones in NVIDIA's folders", 50,
           768_000, 1975.111, "the first 40.4 s, the rest 38.9-41.2 s"),
          ("NVIDIA", "theia_ngpu512_ngc26.04_nemo", 512, 120, "config_GB300_128x4x120xtp1pp4ep32cp1_mxfp8_full_cg.sh",
           "its implementation folder, named by its README; the common files as the 256-GPU run's", 50, 768_000,
           1011.685, "the first 20.7 s, the rest 19.9-21.2 s"),
          ("CoreWeave", "CoreWeave_GB300_512x4", 2048, 32, "config_GB300_512x4x32xtp1pp4ep32cp1_mxfp8_full_cg.sh",
           "CoreWeave/benchmarks/deepseekv3_671b/implementations/CoreWeave_GB300_512x4, the system's one config "
           "(no README), as its systems description's notes (MXFP8, TP 1, PP 4, VP 4, EP 32) and its log's global "
           "batch and accumulation say; the config_common*.sh it sources are not in CoreWeave's folders: the FP8 "
           "settings as in NVIDIA's files of those names", 46, 753_664, 295.370,
           "the first 6.4 s, the second and third 8.4 s and 10.5 s, the rest 6.1-7.0 s"),
          ("CoreWeave", "CoreWeave_GB300_2048x4", 8192, 8, "config_GB300_2048x4x8xtp1pp4ep32cp1_mxfp8_full_cg.sh",
           "CoreWeave/benchmarks/deepseekv3_671b/implementations/CoreWeave_GB300_2048x4, as the 2,048-GPU run's", 45,
           737_280, 87.318, "the first 1.9 s, the second and third 3.5 s and 6.9 s, the rest 1.7-2.0 s"))],
    # ---- mixture of experts, fine-grained: gpt-oss-20b on B300s and GB300s, MXFP8 (MLPerf v6.0) ----------------
    *[HeldOutRun(f"MLPerf v6.0 gpt-oss-20b {layout}, {gpus:,} {gpu.upper()}s, MXFP8 ({submitter})",
                 MLPERF60_ULTRA.format(submitter, system, result, gpus, gbs), MLPERF_GPT_OSS_20B,
                 dict(dp=gpus // (tp * cp), tp=tp, cp=cp, micro_batch=mbs, grad_accum=1, precision="mxfp8",
                      **(dict(sequence_parallel=True) if tp > 1 else {}),
                      **(dict(ep=ep, expert_tp=1, moe_dispatch="per-node") if ep > 1 else {}), **NEMO),
                 gpu, "tokens_per_gpu", _tokens_per_gpu(samples * 8192 / seconds, gpus),
                 MLPERF60_ULTRA_NOTE.format(config=config, tp=tp, sp=" with sequence parallelism" if tp > 1 else "",
                                            cp=cp, ep=ep, mbs=mbs, gbs=gbs, blocks=blocks, steps=steps,
                                            spread=spread))
      for submitter, system, result, gpus, gpu, tp, cp, ep, mbs, gbs, blocks, steps, samples, seconds, layout, config,
      spread in (
          ("Cisco", "1xC880A_M8-8xB300-SXM-288GB", "result_0.txt", 8, "b300", 1, 1, 1, 3, 24, 16, 512, 196_608,
           4598.151, "DP 8", "the log's configuration dump (DLPAL c880a_1x8x3xtp1pp1cp1ep1_mxfp8; the stored "
           "config_c880a_2x8x3xtp1pp1cp1ep1_mxfp8.sh, two nodes, is not what the log ran)",
           "the first 285.5 s, the rest 287.2-287.8 s"),
          ("Dell", "1xXE9780Lx8B300-SXM-270GB", "result_0.txt", 8, "b300", 1, 1, 1, 3, 24, 16, 512, 196_608, 4642.927,
           "DP 8", "the log's configuration dump (DLPAL XE9780L_B300_1x8x3xtp1pp1cp1ep1_mxfp8; of two systems at 8 "
           "GPUs the first in the copy's order)", "the first 291.4 s, the rest 289.7-290.5 s"),
          ("Dell", "2xXE9780x8B300-SXM-270GB", "result_0.txt", 16, "b300", 1, 1, 1, 3, 48, 10, 512, 245_760, 2937.921,
           "DP 16", "the log's configuration dump (DLPAL XE9780_B300_2x8x3xtp1pp1cp1ep1_mxfp8, the stored config's "
           "name)", "the first 294.4 s, the rest 293.3-294.0 s"),
          ("HPE", "HPE-Compute-XD690-B300-SXM6-288GB_n1_ngc26.04", "result_1.txt (the folder's first)", 8, "b300", 1,
           1, 1, 3, 24, 17, 512, 208_896, 4967.044, "DP 8", "the log's configuration dump (DLPAL "
           "DGXB300_1x8x3xtp1pp1cp1ep1_mxfp8; the stored config_XD690_2x8x3xtp1pp1cp1ep1_mxfp8_g2.sh, two nodes, "
           "is not what the log ran)", "the first 290.7 s, the rest 291.9-292.5 s"),
          ("HPE", "HPE-GB300-ngpu8_ngc26.04", "result_1.txt (the folder's first)", 8, "gb300", 1, 1, 1, 3, 24, 17, 512,
           208_896, 4266.463, "DP 8", "the log's configuration dump (DLPAL GB300_2x4x3xtp1pp1cp1ep1_mxfp8)",
           "the first 250.5 s, the rest 250.7-251.2 s"),
          ("HPE", "HPE-GB300-ngpu72_ngc26.04", "result_1.txt (the folder's first)", 72, "gb300", 1, 2, 4, 1, 36, 18,
           341, 220_968, 976.511, "CP 2 x EP 4", "the log's configuration dump (DLPAL "
           "GB300_18x4x1xtp1pp1cp2ep4_mxfp8; no stored config)", "the first 56.8 s, the rest 53.5-54.4 s"),
          ("Inventec", "P9000IG7_ngc26.04_nemo", "result_0.txt", 8, "b300", 1, 1, 1, 3, 24, 17, 512, 208_896, 4904.033,
           "DP 8", "config_P9000IG7_1x8x3xtp1pp1cp1ep1_mxfp8.sh, named by its README (the log prints no "
           "configuration; the config_common*.sh it sources are not in the copy: what they may set is read at "
           "conf/gpt_oss.yaml's defaults)", "the first 287.1 s, the rest 288.1-288.9 s"),
          ("Lambda", "gb300_n18_ngc25.09_nemo", "result_1.txt (the folder's first)", 72, "gb300", 1, 2, 4, 1, 36, 19,
           341, 233_244, 1047.480, "CP 2 x EP 4", "the log's configuration dump (DLPAL "
           "GB300_18x4x1xtp1pp1cp2ep4_mxfp8, the stored config's name; the copy holds no systems description: the "
           "GPUs as the log prints them, 18 nodes of 4 GB300s)", "the first 56.1 s, the rest 54.5-55.4 s"),
          ("NVIDIA", "theia_ngpu512_ngc26.04_nemo", "result_0.txt", 512, "gb300", 2, 4, 8, 1, 64, 24, 192, 294_912,
           418.190, "TP 2 x CP 4 x EP 8", "config_GB300_128x4x1xtp2pp1cp4ep8.sh, named by its README (the log "
           "prints no configuration; the config_common*.sh it sources are not in the copy: what they may set is "
           "read at conf/gpt_oss.yaml's defaults, TP overlap off among them; its log's platform string says GB200, its "
           "systems description GB300)", "the first 17.8 s, the rest "
           "17.1-17.8 s"),
          ("Oracle", "8GPU.GB300.4.NVL72", "result_0.txt", 8, "gb300", 1, 1, 1, 3, 24, 16, 512, 196_608, 4097.248,
           "DP 8", "the log's configuration dump (DLPAL GB300_2x4x3xtp1pp1cp1ep1_mxfp8)",
           "the first 292.1 s (a 37.9 s first step), the eleventh 274.3 s, the rest 251.9-252.5 s"),
          ("QCT", "D75U-1U_ngpu64", "result_0.txt", 64, "gb300", 1, 2, 4, 1, 32, 22, 341, 240_064, 1231.623,
           "CP 2 x EP 4", "config_D75U-1U_16x4x1xtp1pp1cp2ep4_mxfp8.sh, named by its README (the log prints no "
           "configuration; the config_common*.sh it sources are not in the copy: what they may set is read at "
           "conf/gpt_oss.yaml's defaults)", "the first 57.2 s, the rest 55.3-56.4 s"),
          ("Supermicro", "AS-4126GS-NB3RT-LCC-8xB300_SXM", "result_01.txt (the folder's first)", 8, "b300", 1, 1, 1, 3,
           24, 17, 512, 208_896, 4858.018, "DP 8", "the log's configuration dump (DLPAL "
           "AS-4126GS-NB3RT-LCC_1x8x3xtp1pp1cp1ep1_mxfp8; of three systems at 8 GPUs the first in the copy's "
           "order)", "the first 286.5 s, the rest 285.3-286.0 s"),
          ("Supermicro", "ARS-121GL-NB3", "result_0.txt", 72, "gb300", 1, 2, 4, 1, 36, 19, 341, 233_244, 1035.562,
           "CP 2 x EP 4", "the log's configuration dump (DLPAL GB300_18x4x1xtp1pp1cp2ep4_mxfp8)",
           "the first 55.3 s, the rest 53.6-55.0 s"),
          ("ASUSTeK", "XA_NB3I_E12", "result_1.txt (the folder's first)", 8, "b300", 1, 1, 1, 3, 24, 17, 512, 208_896,
           4886.166, "DP 8", "config_XA_NB3I_E12.sh, named for the system (ASUSTeK/benchmarks/gpt-oss/implementations/"
           "pytorch; no README names a config, the log prints none; the config_common*.sh and Data_gpt.sh it sources "
           "are not in the copy: what they may set is read at conf/gpt_oss.yaml's defaults)",
           "the first 288.7 s, the rest 287.1-287.6 s"),
          ("Nebius", "nebius_b300_n1", "result_01.txt (the folder's first)", 8, "b300", 1, 1, 1, 3, 24, 17, 512,
           208_896, 4811.430, "DP 8", "configs/nebius_b300_n1/config_DGXB300_1x8x3xtp1pp1cp1ep1_mxfp8.sh, in the "
           "folder named for the system (no README names a config, the log prints none; the config_common*.sh it "
           "sources are not in the copy: what they may set is read at conf/gpt_oss.yaml's defaults; the copy "
           "holds no systems description: B300s as the folder and the config name say)",
           "the first 287.1 s, the rest 282.4-283.0 s"),
          ("Nebius", "nebius_b300_n8", "result_01.txt (the folder's first)", 64, "b300", 1, 2, 4, 1, 32, 19, 384,
           233_472, 1402.369, "CP 2 x EP 4", "configs/nebius_b300_n8/config_DGXB300_8x8x1xtp1pp1cp2ep4_mxfp8.sh, as "
           "the 8-GPU run's", "the first 149.1 s (a 29.1 s first step and a slow warm-up), the rest 68.3-76.7 s"),
          ("Nebius", "nebius_gb300_n18", "result_01.txt (the folder's first)", 72, "gb300", 1, 2, 4, 1, 36, 19, 341,
           233_244, 1039.794, "CP 2 x EP 4", "configs/nebius_gb300_n18/config_GB300_18x4x1xtp1pp1cp2ep4_mxfp8.sh, as "
           "the 8-GPU B300 run's", "the first 55.7 s, the rest 53.9-55.1 s"))],
]
# The arithmetic (each block is one step, block_start to block_stop in the log's time_ms; its samples are the step's
# global batch, and the blocks' total equals run_stop's samples_count in each run), x 4,096 tokens:
#   NVIDIA 256       50 blocks x GBS 15,360 = 768,000 sequences, 1,975.111 s = 1,592,684.2 tokens/s = 6,221.4 per GPU
#   NVIDIA 512       50 blocks x GBS 15,360 = 768,000 sequences, 1,011.685 s = 3,109,394.7 tokens/s = 6,073.0 per GPU
#   CoreWeave 2,048  46 blocks x GBS 16,384 = 753,664 sequences, 295.370 s = 10,451,324.6 tokens/s = 5,103.2 per GPU
#   CoreWeave 8,192  45 blocks x GBS 16,384 = 737,280 sequences, 87.318 s = 34,585,067.0 tokens/s = 4,221.8 per GPU
# and for gpt_oss_20b (blocks of 512 steps, 341 or 384 at CP 2, 192 on 512 GPUs; each block's samples its steps x
# GBS, as its samples_count says), x 8,192 tokens, per GPU:
#   Cisco 8 B300s        16 x 512 x 24 = 196,608 sequences over 4,598.151 s = 43,784.2
#   Dell 8 B300s         16 x 512 x 24 = 196,608 over 4,642.927 s = 43,362.0
#   Dell 16 B300s        10 x 512 x 48 = 245,760 over 2,937.921 s = 42,829.3
#   HPE 8 B300s          17 x 512 x 24 = 208,896 over 4,967.044 s = 43,065.8
#   HPE 8 GB300s         17 x 512 x 24 = 208,896 over 4,266.463 s = 50,137.4
#   HPE 72 GB300s        18 x 341 x 36 = 220,968 over 976.511 s = 25,746.0
#   Inventec 8 B300s     17 x 512 x 24 = 208,896 over 4,904.033 s = 43,619.1
#   Lambda 72 GB300s     19 x 341 x 36 = 233,244 over 1,047.480 s = 25,335.1
#   NVIDIA 512 GB300s    24 x 192 x 64 = 294,912 over 418.190 s = 11,283.4
#   Oracle 8 GB300s      16 x 512 x 24 = 196,608 over 4,097.248 s = 49,137.0
#   QCT 64 GB300s        22 x 341 x 32 = 240,064 over 1,231.623 s = 24,949.3
#   Supermicro 8 B300s   17 x 512 x 24 = 208,896 over 4,858.018 s = 44,032.3
#   Supermicro 72 GB300s 19 x 341 x 36 = 233,244 over 1,035.562 s = 25,626.6
#   ASUSTeK 8 B300s      17 x 512 x 24 = 208,896 over 4,886.166 s = 43,778.6
#   Nebius 8 B300s       17 x 512 x 24 = 208,896 over 4,811.430 s = 44,458.6
#   Nebius 64 B300s      19 x 384 x 32 = 233,472 over 1,402.369 s = 21,310.0
#   Nebius 72 GB300s     19 x 341 x 36 = 233,244 over 1,039.794 s = 25,522.3

# ---- the thirteenth set: written down before the planner predicted any of them (module docstring) --------------
# What the figure counts: Megatron's num_floating_point_operations at e5ad09802d (transformer_flops, the BSHD path:
# mock data, no packing), per token of the global batch, forward + backward = 3 x 2 x each matmul's m n k:
#   routed experts 6 h (moe_ffn x topk x 3) per MoE layer (SwiGLU: 3 matrices), shared experts 6 h (shared x 3),
#   dense MLPs 6 h (ffn x 3); attention projections 6 (h (q + k + v) + q h) (GQA) or MLA's lora/rope/o-proj terms;
#   the scores 6 x s x q / 2 x 2 per layer ("/ 2  # causal mask"; QK^T and the weighted values; MLA:
#   6 s (n (qk + rope) + n v) / 2); the logits 6 h V_padded x (1 + MTP modules); an MTP module adds its layer
#   (a MoE layer when the last layer is one) and 6 (3 h + 2 h^2) for its norms and projection; no router, norm
#   (qk-norm included) or recomputation term. So the planner's model FLOPs (steptime.step_flops: the scores counted
#   whole) differ from it, and the published figure is tokens per second per GPU = TFLOP/s/GPU x 1e12 / this count.
# The vocabulary: HuggingFaceTokenizer's vocab_size is len(tokenizer) (megatron/core/tokenizers/text/libraries/
# huggingface_tokenizer.py), padded up to a multiple of make_vocab_size_divisible_by x TP (build_tokenizer.py,
# vocab_size_with_padding; padded_vocab_size unset, pad_vocab_size True). Qwen/Qwen3-*'s tokenizer (its config.json's
# vocab_size is 151,936): 1,187 x 128 = 151,936 at TP 1 (multiple 1,187) and at TP 2 (2,374 x 64) for any length from 150,750
# (149,563 at TP 2) to 151,936, so the tokenizer's exact length does not matter; unsloth/DeepSeek-V3 (likewise;
# DeepSeek-V3's config.json vocab_size is 129,280): 3,232 x 40 = 129,280 for any length from 126,049 to 129,280. The
# models are built at these padded sizes (QWEN3_30B_A3B, QWEN3_235B_A22B and DEEPSEEK_V3 already have them).
# Qwen3-30B-A3B (48 layers, all MoE; h 2,048; 32 heads of 128, 4 query groups; 128 experts of 768, top-8; s 4,096):
#   routed 10,871,635,968 + projections 5,435,817,984 + logits 1,866,989,568 + scores 4,831,838,208
MEGATRON_QWEN3_30B_A3B_FLOPS_PER_TOKEN = (6 * 2048 * (768 * 8 * 3) * 48 + 6 * (2048 * (4096 + 2 * 512) + 4096 * 2048) * 48
                                          + 6 * 2048 * 151936 + 4096 * 6 * 4096 * 48)          # 23,006,281,728
# Qwen3-235B-A22B (94 layers, all MoE; h 4,096; 64 heads of 128, 4 query groups; 128 experts of 1,536, top-8):
#   routed 85,161,148,416 + projections 40,214,986,752 + logits 3,733,979,136 + scores 18,924,699,648
def qwen3_235b_a22b_layer_macs(seq: int) -> tuple[int, int, int]:
    """One Qwen3-235B-A22B layer's forward multiply-adds per token at sequence `seq`: (the routed experts' matmuls,
    the attention projections, the scores' causal half); Megatron's count and the recomputation rule both read them."""
    return 8 * 3 * 4096 * 1536, 4096 * (8192 + 2 * 512) + 8192 * 4096, seq * 8192


def megatron_qwen3_235b_a22b_flops_per_token(seq: int) -> int:
    """Megatron's count per token for Qwen3-235B-A22B at sequence `seq` (the terms above; the scores' grow with it)."""
    return 6 * 94 * sum(qwen3_235b_a22b_layer_macs(seq)) + 6 * 4096 * 151936


MEGATRON_QWEN3_235B_A22B_FLOPS_PER_TOKEN = megatron_qwen3_235b_a22b_flops_per_token(4096)      # 148,034,813,952
# DeepSeek-V3 (61 layers, moe_layer_freq ([0]*3+[1]*58), mtp_num_layers 1: 62 attention layers, 3 dense MLPs of
# 18,432 and 59 MoE ones with 256 experts of 2,048 (top-8) and a shared expert of 2,048; MLA: 128 heads, q_lora 1,536,
# kv_lora 512, qk 128 + rope 64, v 128; h 7,168):
#   MLPs 147,446,562,816 + attention projections 69,603,926,016 + scores 31,205,621,760 + MTP norms/projection
#   616,691,712 + logits (twice: the MTP module's too) 11,120,148,480
MEGATRON_DEEPSEEK_V3_FLOPS_PER_TOKEN = (
    6 * 7168 * (18432 * 3 * 3 + (2048 * 8 * 3 + 2048 * 3) * 59)
    + 6 * (1536 * (7168 + 128 * 192 + 1) + 512 * (7168 + 128 * 256 + 1) + 7168 * 64 + 128 * 128 * 7168) * 62
    + 4096 * 3 * (128 * 192 + 128 * 128) * 62 + 6 * (3 * 7168 + 2 * 7168 ** 2) + 6 * 7168 * 129280 * 2)  # 259,992,950,784

MCORE_RECIPES = ("NVIDIA/Megatron-LM examples/moe_recipes/README.md (branch dev, commit e5ad09802d, 2026-06-15, PR "
                 "#5289; the row unchanged at 9c5258f109, 2026-08-11), 'Recipe Index', {model} '{recipe}' row "
                 "({yaml}): median {tflops} TFLOP/s/GPU (Megatron's --log-throughput count), as tokens/s/GPU; "
                 "{gpus:,} GPUs, GBS {gbs:,}")
MCORE_RECIPES_NOTE = (
    "examples/moe_recipes/{yaml} at e5ad09802d ({image}): {layout}; mock data, "
    "moe_router_force_load_balancing (balanced routing, as planned), dropless, the flex dispatcher with {backend} "
    "(moe_dispatch per-node), grouped GEMM, permute and router fusion, an fp32 router, Transformer Engine's fused "
    "cross-entropy (not modelled); Megatron's distributed optimizer (ZeRO-1){dp_overlap}; --bf16 without "
    "--grad-reduce-in-bf16 (main_grads_dtype fp32): gradients accumulated and reduced in fp32 (arguments.py at "
    "e5ad09802d: fp32_grads); {precision}; {recompute}; {rest}; attention through Transformer Engine "
    "(NVTE_FUSED_ATTN=1; use_flash_attn is inert at e5ad09802d; held_out_runs.TE); manual GC every {gc} steps, "
    "log_interval 1{logging}{ckpt} (not modelled). The figure is "
    "Megatron's TFLOP/s, turned into tokens per second per GPU with its own count for this YAML ({flops}; the "
    "arithmetic below THIRTEENTH_SET). Not stated: the Megatron-LM commit measured (PR #5289: figures 'from curated "
    "benchmark sources'; the recipes name none), the steps the median is over, {placement}")
LOGS_NORMS = ", log_params_norm and log_num_zeros_in_grad on every step"
FINETUNE = ", a checkpoint loaded (finetune) before the timed steps"
DP_OVERLAPPED = " with the gradient reduce and the parameter gather overlapped (overlap_grad_reduce, overlap_param_gather)"
DP_NOT_OVERLAPPED = (", overlap_grad_reduce and overlap_param_gather unset (Megatron's default False): the parameter "
                     "gather after the step is exposed (planned: overlap_param_gather off) and so is the reduce-scatter "
                     "of the non-expert gradients after the last backward, which the planner overlaps with that "
                     "backward (not modelled; the experts' gradients are on no data-parallel group: EP {ep} x EDP 1)")
GB200_PLACED = "the NVL72 trays' placement on racks (held_out.nvlink_segment: {})"
MXFP8 = ("Transformer Engine MXFP8 (fp8_recipe 'mxfp8', e4m3; bf16 parameters: no fp8_param_gather; attention in "
         "bf16)")
MXFP8_PARAMS = ("Transformer Engine MXFP8 (fp8_recipe 'mxfp8', e4m3) with FP8 parameters gathered in FP8 "
                "(fp8_param_gather, reuse_grad_buf_for_mxfp8_param_ag: not modelled) and the precision-aware "
                "optimizer's bf16 moments (not modelled); attention in bf16")
EP_OVERLAP = ("the expert-parallel all-to-alls overlapped with another micro-batch's compute "
              "(overlap_moe_expert_parallel_comm: ep_overlap; delay_wgrad_compute: not modelled)")
PARTIAL_CG = "Transformer Engine CUDA graphs of the {} of each layer (cuda_graph_impl transformer_engine{}: not modelled)"
PAGED_STASH = ("full-iteration CUDA graphs (cuda_graph_impl local, cuda_graph_scope full_iteration) with the paged "
               "stash of the expert activations in GPU memory (moe_paged_stash, page 64, buffer factor {cuda} on the "
               "GPU and no host buffer) and a capacity of {cap} x the balanced share per expert-parallel rank "
               "(moe_expert_rank_capacity_factor: with forced balancing nothing is dropped), Transformer Engine's op "
               "fuser and the CuTe DSL fused grouped MLP (NVTE_CUTEDSL_FUSED_GROUPED_MLP=1): not modelled")

# Strategy parts the recipes share: the distributed optimizer, fp32 gradients, the flex dispatcher, TE attention
RECIPE = dict(zero=1, fp32_grads=True, moe_dispatch="per-node", **TE)
RECIPE_OVERLAPPED = {**RECIPE, "overlap_param_gather": True}     # = NEMO's settings and fp32_grads, per-node dispatch


def _mcore_recipe(name, model_name, recipe, yaml, tflops, gpus, gbs, model, strategy, gpu, flops, flops_text,
                  **note) -> HeldOutRun:
    """One row of Megatron-LM's MoE recipe index: its TFLOP/s written once, in the source and in `published`, where
    it is turned into tokens per second per GPU with Megatron's own count for the row's YAML."""
    return HeldOutRun(name, MCORE_RECIPES.format(model=model_name, recipe=recipe, yaml=yaml, tflops=tflops, gpus=gpus,
                                                 gbs=gbs),
                      model, strategy, gpu, "tokens_per_gpu", tflops * 1e12 / flops,
                      MCORE_RECIPES_NOTE.format(yaml=yaml, flops=flops_text, **note))


Q30_FLOPS = "MEGATRON_QWEN3_30B_A3B_FLOPS_PER_TOKEN, 23,006,281,728 a token"
Q235_FLOPS = "MEGATRON_QWEN3_235B_A22B_FLOPS_PER_TOKEN, 148,034,813,952 a token"
DSV3_FLOPS = "MEGATRON_DEEPSEEK_V3_FLOPS_PER_TOKEN, 259,992,950,784 a token"
Q30_STACK = ("nvcr.io/nvidia/pytorch:26.03-py3, Transformer Engine release_v2.14, DeepEP's hybrid-ep branch at {}{}")
Q30_LAYOUT = ("TP 1, PP 1, CP 1, EP {ep}, expert TP 1 (sequence_parallel asked for but dropped at TP 1: arguments.py), "
              "micro-batch {mbs}, GBS {gbs} (DP {dp}, gradient accumulation {ga}), sequence 4,096, QWEN3_30B_A3B at "
              "its padded vocabulary 151,936 (make_vocab_size_divisible_by 1187)")
Q235_LAYOUT = ("TP {tp}{sp}, {pp}, CP 1, EP {ep}, expert TP 1, micro-batch {mbs}, GBS {gbs:,} (DP {dp}, gradient "
               "accumulation {ga}), sequence 4,096, QWEN3_235B_A22B (the fourth set's shape; vocabulary 151,936, "
               "make_vocab_size_divisible_by 1187)")
DSV3_LAYOUT = ("TP 1, PP {pp} with the layout 'Et*4|(tttt|)*14tmL' ({vp} virtual stages: the first the embedding "
               "and 4 decoder layers, 14 of 4, the last 1 with the MTP module and the loss: first/last_stage_layers "
               "4 / 1, as the eleventh set's), EP {ep}, expert TP 1, CP 1, micro-batch 1, GBS {gbs:,} (DP {dp}, "
               "gradient accumulation {ga}), sequence 4,096; the model as DEEPSEEK_V3 (61 layers, the first 3 "
               "dense, 256 experts of 2,048 and 1 shared, top-8 with group-limited sigmoid routing, latent "
               "attention 512 / 1,536, one MTP module, vocabulary 129,280 = make_vocab_size_divisible_by 3232 x 40)")

THIRTEENTH_SET: list[HeldOutRun] = [
    # ---- mixture of experts, fine-grained: Qwen3-30B-A3B (128 experts, top-8), H100 and GB200 -----------------------
    _mcore_recipe("Megatron-LM recipe Qwen3-30B-A3B EP 8, 32 H100s", "Qwen3-30B-A3B", "H100 BF16",
                  "qwen3_30b/h100/bf16_32GPU_TP1PP1EP8.yaml", 234.1, 32, 256, QWEN3_30B_A3B,
                  dict(dp=32, ep=8, expert_tp=1, micro_batch=1, grad_accum=8, **RECIPE_OVERLAPPED), "h100-sxm",
                  MEGATRON_QWEN3_30B_A3B_FLOPS_PER_TOKEN, Q30_FLOPS,
                  image=Q30_STACK.format("cf78085", ", flash-attn (FlashAttention-2) installed"),
                  layout=Q30_LAYOUT.format(ep=8, mbs=1, gbs=256, dp=32, ga=8) + "; EP 8 inside a node, EDP 4",
                  backend="HybridEP", dp_overlap=DP_OVERLAPPED, precision="BF16", recompute="no recomputation",
                  rest="no CUDA graphs, no EP overlap; CUDA_DEVICE_MAX_CONNECTIONS 1, cuDNN norms (not modelled)",
                  gc=5, logging=LOGS_NORMS, ckpt=FINETUNE,
                  placement="the H100 variant and the network (the h100-sxm preset's: 4 DGX H100 nodes, 8 x 400 Gb/s "
                            "each)"),
    *[_mcore_recipe(f"Megatron-LM recipe Qwen3-30B-A3B EP 16, 16 GB200s{label}", "Qwen3-30B-A3B", recipe, yaml, tflops,
                    16, 512, QWEN3_30B_A3B,
                    dict(dp=16, ep=16, expert_tp=1, micro_batch=4, grad_accum=8, **precision, **RECIPE), "gb200",
                    MEGATRON_QWEN3_30B_A3B_FLOPS_PER_TOKEN, Q30_FLOPS,
                    image=Q30_STACK.format("7febc6e", ", flash-attn-4 4.0.0b4 installed (which kernel Transformer "
                                                      "Engine chose on Blackwell is not stated)"),
                    layout=Q30_LAYOUT.format(ep=16, mbs=4, gbs=512, dp=16, ga=8), backend="HybridEP",
                    dp_overlap=DP_NOT_OVERLAPPED.format(ep=16), precision=precision_text,
                    recompute="no recomputation", rest=rest, gc=5, logging=LOGS_NORMS, ckpt=FINETUNE,
                    placement=GB200_PLACED.format("16 GPUs, 4 trays, in one rack's NVLink domain"))
      for label, recipe, yaml, tflops, precision, precision_text, rest in (
          ("", "GB200 BF16", "qwen3_30b/gb200/bf16_16GPU_TP1PP1EP16.yaml", 528, {}, "BF16",
           "no CUDA graphs, no EP overlap; cuDNN norms (not modelled)"),
          (", MXFP8", "GB200 MXFP8 partial CG", "qwen3_30b/gb200/mxfp8_16GPU_TP1PP1EP16_partial_cg.yaml", 514,
           dict(precision="mxfp8"), MXFP8,
           PARTIAL_CG.format("attention, router and MoE preprocessing", " through the deprecated external_cuda_graph")
           + "; no EP overlap"),
          (", MXFP8, paged stash", "GB200 MXFP8 paged stash", "qwen3_30b/gb200/mxfp8_16GPU_TP1PP1EP16_paged_stash.yaml",
           646.8, dict(precision="mxfp8"), MXFP8,
           PAGED_STASH.format(cuda=1.1, cap=1.5) + "; no EP overlap"))],
    # ---- mixture of experts, fine-grained: Qwen3-235B-A22B (128 experts, top-8), H100 to GB300 -------------------
    _mcore_recipe("Megatron-LM recipe Qwen3-235B-A22B TP 2 x PP 4 x VP 12 x EP 16, 128 B200s, MXFP8",
                  "Qwen3-235B-A22B", "B200 MXFP8", "qwen3_235b/b200/mxfp8_128GPU_TP2PP4EP16.yaml", 633.9, 128, 3072,
                  QWEN3_235B_A22B,
                  dict(dp=16, tp=2, pp=4, ep=16, expert_tp=1, micro_batch=3, grad_accum=64, schedule="interleaved",
                       virtual_stages=12, first_stage_layers=1, last_stage_layers=1, sequence_parallel=True,
                       precision="mxfp8", ep_overlap=True, **RECIPE_OVERLAPPED), "b200",
                  MEGATRON_QWEN3_235B_A22B_FLOPS_PER_TOKEN, Q235_FLOPS,
                  image=Q30_STACK.format("7febc6e", " (the b300-torch2603 image, built for sm100a and sm103a)"),
                  layout=Q235_LAYOUT.format(tp=2, sp=" with sequence parallelism (no TP overlap)",
                                            pp="PP 4 x VP 12 (num_layers_per_virtual_pipeline_stage 2 with "
                                               "account_for_embedding/loss_in_pipeline_split: 96 / 4 / 2; the first "
                                               "and the last of the 48 virtual stages hold 1 decoder layer beside "
                                               "the embedding or the loss: first/last_stage_layers 1)", ep=16,
                                            mbs=3, gbs=3072, dp=16, ga=64)
                         + "; EP 16 over the TP 2 x DP 16 ranks (EDP 2)",
                  backend="DeepEP (moe_deepep_num_sms 20)", dp_overlap=DP_OVERLAPPED, precision=MXFP8_PARAMS,
                  recompute="no recomputation",
                  rest=EP_OVERLAP + "; pipeline sends overlapped (overlap_p2p_comm), router padding for quantization "
                       "(not modelled); no CUDA graphs",
                  gc=5, logging=LOGS_NORMS, ckpt=FINETUNE, placement="the network (the b200 preset's: 16 DGX B200 nodes)"),
    _mcore_recipe("Megatron-LM recipe Qwen3-235B-A22B TP 2 x EP 16, 128 B300s, MXFP8", "Qwen3-235B-A22B",
                  "B300 MXFP8 partial CG", "qwen3_235b/b300/mxfp8_128GPU_TP2PP1EP16_partial_cg.yaml", 922.6, 128,
                  9216, QWEN3_235B_A22B,
                  dict(dp=64, tp=2, ep=16, expert_tp=1, micro_batch=3, grad_accum=48, sequence_parallel=True,
                       precision="mxfp8", ep_overlap=True, **RECIPE_OVERLAPPED), "b300",
                  MEGATRON_QWEN3_235B_A22B_FLOPS_PER_TOKEN, Q235_FLOPS,
                  image=Q30_STACK.format("7febc6e", " (the b300-torch2603 image)"),
                  layout=Q235_LAYOUT.format(tp=2, sp=" with sequence parallelism (no TP overlap)", pp="PP 1", ep=16,
                                            mbs=3, gbs=9216, dp=64, ga=48)
                         + "; EP 16 over the TP 2 x DP 64 ranks (EDP 8), spanning 2 nodes of 8",
                  backend="HybridEP (moe_hybridep_num_sms 32)", dp_overlap=DP_OVERLAPPED, precision=MXFP8_PARAMS,
                  recompute="no recomputation",
                  rest=EP_OVERLAP + "; " + PARTIAL_CG.format("attention and router", ", 2 warm-up steps"),
                  gc=5, logging=LOGS_NORMS, ckpt=FINETUNE, placement="the network (the b300 preset's: 16 HGX B300 nodes)"),
    *[_mcore_recipe(f"Megatron-LM recipe Qwen3-235B-A22B EP 64, 128 {gpu.upper()}s, MXFP8{label}", "Qwen3-235B-A22B",
                    recipe, yaml, tflops, 128, 8192, QWEN3_235B_A22B,
                    dict(dp=128, ep=64, expert_tp=1, micro_batch=1, grad_accum=64, precision="mxfp8",
                         ep_overlap=True, **RECIPE_OVERLAPPED), gpu,
                    MEGATRON_QWEN3_235B_A22B_FLOPS_PER_TOKEN, Q235_FLOPS, image=image,
                    layout=Q235_LAYOUT.format(tp=1, sp="", pp="PP 1", ep=64, mbs=1, gbs=8192, dp=128, ga=64)
                           + "; EP 64 over the DP 128 ranks (EDP 2)",
                    backend="HybridEP (moe_hybridep_num_sms 32; USE_MNNVL=1)", dp_overlap=DP_OVERLAPPED,
                    precision=MXFP8_PARAMS, recompute="no recomputation", rest=EP_OVERLAP + "; " + rest, gc=5,
                    logging=LOGS_NORMS, ckpt=FINETUNE,
                    placement=GB200_PLACED.format("2 racks of 64" + placement))
      for gpu, label, recipe, yaml, tflops, image, rest, placement in (
          ("gb200", "", "GB200 MXFP8 partial CG", "qwen3_235b/gb200/mxfp8_128GPU_TP1PP1EP64_partial_cg_overlap.yaml",
           1018, Q30_STACK.format("7febc6e", ""),
           PARTIAL_CG.format("attention, router and MoE preprocessing", ", 2 warm-up steps") + "; router padding for "
           "quantization, HybridEP chunking and layer-norm SM margins (not modelled); NVTE_CPU_OFFLOAD_V1=1 is set "
           "but no offload argument (nothing offloaded)",
           ", which the YAML's NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN 64 and NVLINK_DOMAIN_SIZE 72 agree with"),
          ("gb300", ", paged stash", "GB300 MXFP8 full CG",
           "qwen3_235b/gb300/mxfp8_128GPU_TP1PP1EP64_paged_stash_full_cg.yaml", 1323.1,
           "nvcr.io/nvidia/pytorch:26.04-py3, the gb200-gb300-2604-te215 image: Transformer Engine main at v2.15, "
           "DeepEP d28bd67",
           PAGED_STASH.format(cuda=1.0, cap=1.2) + "; router padding for quantization and layer-norm SM margins "
           "(not modelled); NVTE_CPU_OFFLOAD_V1=1 is set but no offload argument; train_iters 20 (the median is of at "
           "most 20 steps, CUDA-graph warm-up and capture among them)", ""))],
    # ---- mixture of experts, fine-grained, latent attention: DeepSeek-V3, B200 and GB300, MXFP8 -------------------
    *[_mcore_recipe(f"Megatron-LM recipe DeepSeek-V3 PP {pp} x VP {vp} x EP {ep}, 256 {gpu.upper()}s, MXFP8",
                    "DeepSeek-V3", recipe, yaml, tflops, 256, gbs, DEEPSEEK_V3,
                    dict(dp=256 // pp, pp=pp, ep=ep, expert_tp=1, micro_batch=1, grad_accum=gbs // (256 // pp),
                         schedule="interleaved", virtual_stages=vp, first_stage_layers=4, last_stage_layers=1,
                         precision="mxfp8", ep_overlap=True, **recompute, **RECIPE_OVERLAPPED), gpu,
                    MEGATRON_DEEPSEEK_V3_FLOPS_PER_TOKEN, DSV3_FLOPS, image=image,
                    layout=DSV3_LAYOUT.format(pp=pp, vp=pp * vp, ep=ep, gbs=gbs, dp=256 // pp,
                                              ga=gbs // (256 // pp)),
                    backend=backend, dp_overlap=DP_OVERLAPPED, precision=MXFP8_PARAMS, recompute=recompute_text,
                    rest=EP_OVERLAP + "; " + rest, gc=10, logging="", ckpt="",
                    placement=placement)
      for gpu, recipe, yaml, tflops, pp, vp, ep, gbs, recompute, recompute_text, backend, image, rest, placement in (
          ("b200", "B200 MXFP8", "deepseek_v3/b200/mxfp8_256GPU_TP1PP8EP32.yaml", 776.7, 8, 2, 32, 2048,
           dict(recompute="selective"),
           "recompute_modules mla_up_proj and mlp (the up-projections, and the MLP of the 3 dense layers only: "
           "Megatron-Core skips MoE layers), planned as selective by the eighth set's rule",
           "DeepEP (moe_deepep_num_sms 24)", Q30_STACK.format("7febc6e", " (the b300-torch2603 image)"),
           "no CUDA graphs; router padding for quantization and layer-norm SM margins (not modelled)",
           "the network (the b200 preset's: 32 DGX B200 nodes; EP 32 spans 4 of them)"),
          ("gb300", "GB300 MXFP8", "deepseek_v3/gb300/mxfp8_256GPU_TP1PP4EP64.yaml", 1357.7, 4, 4, 64, 8192, {},
           "no recomputation", "HybridEP (moe_hybridep_num_sms 32; USE_MNNVL=1)",
           "nvcr.io/nvidia/pytorch:26.03-py3, the gb200-gb300-2604 image: Transformer Engine at the Dockerfile's "
           "TE_COMMIT, flash-attn-4 4.0.0b10, DeepEP 1b8f467",
           PARTIAL_CG.format("attention, router and MoE preprocessing", ", 1 warm-up step") + "; router padding for "
           "quantization, HybridEP staging and layer-norm SM margins (not modelled)",
           GB200_PLACED.format("4 racks of 64, as the YAML's NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN 64 says; the "
                               "GB300 racks are the same") ))],
]
# The arithmetic (tokens per second per GPU = the README's median TFLOP/s/GPU x 1e12 / Megatron's FLOPs per token for
# the row's YAML; the FLOPs per token above; the median of TFLOP/s is the count over the median step time, the count
# being the same every step):
#   Qwen3-30B-A3B    (23,006,281,728 a token)   H100 BF16                234.1 -> 10,175.5
#                                               GB200 BF16               528   -> 22,950.3
#                                               GB200 MXFP8 partial CG   514   -> 22,341.7
#                                               GB200 MXFP8 paged stash  646.8 -> 28,114.1
#   Qwen3-235B-A22B  (148,034,813,952 a token)  B200 MXFP8               633.9 ->  4,282.1
#                                               B300 MXFP8 partial CG    922.6 ->  6,232.3
#                                               GB200 MXFP8 partial CG  1018   ->  6,876.8
#                                               GB300 MXFP8 full CG     1323.1 ->  8,937.8
#   DeepSeek-V3      (259,992,950,784 a token)  B200 MXFP8               776.7 ->  2,987.4
#                                               GB300 MXFP8             1357.7 ->  5,222.1
# The count checked against Megatron-Bridge's own tokens/s (its model cards use the same formula): Megatron-Bridge
# PR #5720 (Qwen3-30B-A3B, GB300) gives 1,030.070 TFLOP/s/GPU and 44,773.361 tokens/s/GPU, 23.006 x 10^9 a token;
# PR #5722 (Qwen3-235B-A22B, GB300) 1,300.440 and 8,784.492, 148.04 x 10^9. The causal halving is in the function at
# 6b6fb956a7 (2026-05-21) and 9c5258f109 (2026-08-11) as at e5ad09802d. Not published figures (noted only): the open
# PR #5728 (2026-07-09) would replace the Qwen3 figures with Megatron-Bridge measurements (iterations 30-45):
# Qwen3-30B-A3B H100 BF16 240.5, GB200 BF16 504.2, MXFP8 partial CG 480.3, paged stash 598.1; Qwen3-235B-A22B
# GB200 MXFP8 partial CG 876.2, GB300 full CG 1396.1 (and the left-out GB200 full CG 1208.3, FP8
# blockwise 242.9).

# ---- the fourteenth set: written down before the planner predicted any of them (module docstring) -------------
# ---- sources and what they leave unstated ------------------------------------------------------------------------
MLPERF50_H200 = ("mlcommons/training_results_v5.0 Nebius/results/{}/llama31_405b/result_1.txt (commit 0fdc28f, "
                 "2025-05-30, the repository's one commit; the folder's first log, it has no result_0): the training "
                 "blocks' tokens over their summed durations")
MLPERF50_H200_NOTE = (
    "; the implementation is NVIDIA's v5.0 llama31_405b one file for file (Dockerfile, conf/custom.yaml, "
    "pretrain.py and conf/tp_overlap/h100tp4mbs1.yaml the same git blobs as NVIDIA/benchmarks/llama31_405b/"
    "implementations/eos-dfw_n64_ngc25.01_nemo's; config_common.sh differs only in leaving NCCL_NVLS_ENABLE=0 "
    "commented out, the README exporting NCCL_NVLS_ENABLE=1: NVLink SHARP, not modelled): NeMo v2.2.0, Megatron-Core "
    "core_r0.11.0, PyTorch 25.01 (Dockerfile); ASYM_PP_EMBED=True and ASYM_PP_LOSS=True (the embedding and the loss "
    "each counted as a layer: 128 slots over 8 x 8 virtual stages of 2, so the first and the last virtual stage "
    "build 1 layer, the other 62 build 2: first/last_stage_layers 1); Megatron's distributed optimizer (ZeRO-1) "
    "with overlapped gradient reduce and parameter gather (also with the optimizer step), gradients reduced in bf16 "
    "(grad_reduce_in_fp32=False), FP8 parameters and their gather (FP8_PARAMS: not modelled), DDP buckets of "
    "134,217,728 (the log's DistributedDataParallelConfig; the dump's bucket_size 200: not modelled); FP8 = "
    "Transformer Engine delayed per-tensor scaling (FP8=True, FP8_HYBRID unset: E4M3 forward and backward, amax "
    "history 1, most_recent; the log: fp8_recipe delayed, {'fp8': 'e4m3'}): the planner's FP8; no recomputation "
    "(ACT_CKPT_* unset); no CUDA graphs (MCORE_CUDA_GRAPH, LAYER_CUDA_GRAPH unset); sequence parallelism "
    "(SEQ_PARALLEL default True) and userbuffers TP overlap (TP_COMM_OVERLAP=True; conf/tp_overlap/h100tp4mbs1.yaml "
    "by custom.yaml's ${GPU_ARCH,h}100tp4mbs1, GPU_ARCH unset; its proj_fprop atomic GEMM: not modelled); pipeline "
    "send/receive overlapped (overlap_p2p_comm); the embedding's weight gradients deferred (WGRAD_DEFERRAL_LIMIT 50: "
    "not modelled); attention: Transformer Engine's, context parallelism its own; the vocabulary padded to 32,256 "
    "(the log; padding not modelled); the log's configuration dump gives the same layout; H200-SXM5-141GB nodes "
    "(systems/{system}.json: 8 per node, NVLink Gen4 900 GB/s + NVSwitch Gen3, 8 x ConnectX-7 IB NDR 400 Gb/s): the "
    "h200 preset's links (8 GPUs per node, 400 Gb/s per GPU across nodes)")

MLPERF51_H200 = ("mlcommons/training_results_v5.1 HPE/results/HPE-Cray-XD670-H200-SXM5-141GB_n8_25.09/llama31_8b/"
                 "result_1.txt (commit 4da2d1c, 2025-11-05; repository HEAD 441d65f; the folder's first log, it has "
                 "no result_0): the training blocks' tokens over their summed durations")
MLPERF51_H200_NOTE = (
    "HPE/benchmarks/llama3_8b/implementations/nemo-x86_64/config_XD670_8x8x1xtp1pp1cp2_8b.sh (no README-<system>.md; "
    "the implementation's README.md names only NVIDIA's example configs and the naming rule config_<SYSTEM>_<NODES>x"
    "<GPUS/NODE>x<BATCH/GPU>xtpXppYcpZ.sh, by which this is the folder's one 8-node config; the log's DLPAL line names "
    "XD670_8x8x1xtp1pp1cp2_8b-trial), with config_common.sh, config_common_8b.sh, config_common_cg.sh and "
    "config_common_fp8attn.sh: TP 1 (no sequence parallelism, no TP overlap), PP 1, CP 2, micro-batch 1, MINIBS 1 "
    "(GBS 1 x 64 // 2 = 32, gradient accumulation 1, as the log states); where the stored files and the log's "
    "configuration dump disagree the dump, the run's own record, is taken: the stored config_common_fp8attn.sh sets "
    "FP8_DPA=True, but the run's dump has no fp8_dot_product_attention key and its model config prints "
    "fp8_dot_product_attention=False (attention in bf16, as the planner's), and no fused_single_qkv_rope, fp4 or "
    "fp4_recipe key (the stored conf/custom.yaml is later than the run's); Megatron's distributed optimizer (ZeRO-1) "
    "with overlapped gradient reduce and parameter gather, gradients reduced in bf16 (grad_reduce_in_fp32=False), "
    "FP8 parameters and their gather (fp8_param=True, fp8_param_gather: not modelled), DDP buckets of 134,217,728 "
    "(the log; not modelled); FP8 = Transformer Engine's 'tensorwise' recipe (per-tensor current scaling, HYBRID "
    "format: FP8_RECIPE, FP8_HYBRID): the planner's FP8; no recomputation (ACT_CKPT_* unset; recompute_granularity "
    "None); full-iteration CUDA graphs (FULL_CUDA_GRAPH=1, MCORE_CUDA_GRAPH=1: cuda_graph_scope full_iteration), TE's "
    "op fuser (USE_TE_OPS=True), TE cross-entropy fusion and NVIDIA's TP-PP-DP rank mapping (TP_PP_DP_MAPPING=True) "
    "(not modelled); 32 layers, hidden 4,096, FFN 14,336, 32 heads, 8 query groups, vocabulary 128,256 unpadded, "
    "sequence 8,192 (the log): the llama3-8b preset; image nvcr.io/nvidia/pytorch:25.08-py3 with Transformer Engine "
    "c47f329, NeMo eddf23f and Megatron-Core 4cd81e8 (the stored Dockerfile; the log's container is dated "
    "2025-09-08); 24 blocks of 256 steps (VAL_CHECK_INTERVAL 256), the first 89.3 s, the rest 90.5-90.7 s; HPE Cray "
    "XD670 nodes (systems/HPE-Cray-XD670-H200-SXM5-141GB_n8_25.09.json: 8 H200-SXM5-141GB, 8x 4th Gen NVLink 900 "
    "GB/s, 8x InfiniBand NDR/Ethernet 400Gb adapters beside 8x Slingshot 200Gb Ethernet NICs, which fabric NCCL ran "
    "on not stated): the h200 preset's links (8 GPUs per node, 400 Gb/s per GPU across nodes)")

FOURTEENTH_SET: list[HeldOutRun] = [
    # ---- dense, H200, TP 4 x PP 8 (interleaved 8, uneven ends) x CP 2, FP8 (MLPerf Training v5.0, Nebius) ----------
    *[HeldOutRun(f"MLPerf v5.0 Llama 3.1 405B TP 4 x PP 8 x CP 2, {gpus:,} H200s, FP8 (Nebius)",
                 MLPERF50_H200.format(system) + f"; {gpus:,} GPUs, GBS {gbs:,}",
                 MLPERF_LLAMA31_405B,
                 dict(dp=dp, tp=4, grad_accum=grad_accum, **MLPERF_405B_LAYOUT),
                 "h200", "tokens_per_gpu", _tokens_per_gpu(tokens / seconds, gpus),
                 f"Nebius/benchmarks/llama31_405b/implementations/{system}/{config} (the config "
                 f"README-{system}.md names): TP 4, PP 8, interleaved 8 (INTERLEAVED_PIPELINE=8), CP 2, micro-batch "
                 f"1, MINIBS {grad_accum} (GBS = MINIBS x {gpus:,} // (4 x 8 x 2) = {gbs:,}, gradient accumulation "
                 f"{grad_accum}, as the log states; the config's comment 'DGXNNODES*MINIBS/16' is TP 8's and gives "
                 f"{gpus // 8 * grad_accum // 16:,}, not what ran); {blocks} blocks of {steps} steps "
                 f"(val_check_interval {steps}), {spread}" + MLPERF50_H200_NOTE.replace("{system}", system))
      for system, config, gpus, dp, grad_accum, gbs, blocks, steps, spread, tokens, seconds in (
          ("nebius_soperator_8xH200_n64_ngc25.01_nemo", "config_DGXH200_64x8x144xtp4pp8cp2.sh", 512, 8, 144, 1152,
           6, 40, "the first 2,035.8 s, the rest 1,997.9-2,016.5 s", 276_480 * 8192, 12056.695),
          ("nebius_soperator_8xH200_n128_ngc25.01_nemo", "config_DGXH200_128x8x72xtp4pp8cp2.sh", 1024, 16, 72, 1152,
           6, 40, "the first 1,047.2 s, the rest 1,013.8-1,021.9 s", 276_480 * 8192, 6134.562))],
    # ---- dense, H200, CP 2, FP8 (MLPerf Training v5.1, HPE) ----------------------------------------------------------
    HeldOutRun("MLPerf v5.1 Llama 3.1 8B CP 2, 64 H200s, FP8 (HPE)", MLPERF51_H200 + "; 64 GPUs, GBS 32",
               _llama3("llama3-8b"),
               dict(dp=32, cp=2, micro_batch=1, grad_accum=1, precision="fp8", **NEMO),
               "h200", "tokens_per_gpu", _tokens_per_gpu(196_608 * 8192 / 2173.115, 64),
               MLPERF51_H200_NOTE),
]
# The arithmetic (each block's duration is its block_stop less its block_start, in the log's time_ms):
#   Nebius 512    6 blocks x 40 steps x GBS 1,152 = 276,480 sequences x 8,192 = 2,264,924,160 tokens over
#                 12,056.695 s = 187,856.1 tokens/s = 366.91 per GPU
#   Nebius 1,024  the same 276,480 sequences over 6,134.562 s = 369,207.2 tokens/s = 360.55 per GPU
#   HPE 64        24 blocks x 256 steps x GBS 32 = 196,608 sequences x 8,192 = 1,610,612,736 tokens over
#                 2,173.115 s = 741,153.9 tokens/s = 11,580.53 per GPU
# (each total equals the log's run_stop samples_count: 276,480 and 196,608)

# ---- the fifteenth set: written down before the planner predicted any of them (module docstring) ---------------
# Which runs (the rule fixed before any log was read): every closed-division llama31_8b and llama31_405b submission of
# MLPerf Training v5.0 and v5.1, by any submitter, on a GPU with a preset, in a precision the planner expresses, whose
# first result log the method times and whose configuration no development run has; then per submitter, round,
# benchmark and GPU type the smallest and the largest GPU count (where two share a count, the results folder that sorts
# first); of those, the runs not in a set yet. What each run's note
# says of its settings is read from the log's configuration dump where the log prints one (the run's own record,
# taken where stored files disagree), else from the config its README-<system>.md names or, where none names one,
# the config named for its system or node count.
# ---- sources and what they leave unstated ------------------------------------------------------------------------
MLPERF51_RUN = ("mlcommons/training_results_v5.1 {}/results/{}/{}/{} (results commit 4da2d1c, 2025-11-05; repository "
                "HEAD 441d65f{}): the training blocks' tokens over their summed durations")
# NVIDIA's v5.1 Llama 3.1 8B code as the other organisations run it (NVIDIA_CODE_BY_OTHERS below): what is common
MLPERF51_8B_NOTE = (
    "{where}: {layout}; NVIDIA's v5.1 Llama 3.1 8B implementation (pretrain.py builds NeMo's Llama31Config8B: 32 "
    "layers at conf/custom.yaml's 8,192 tokens, the Llama 3.1 tokenizer's 128,256: the llama3-8b preset); Megatron's "
    "distributed optimizer (ZeRO-1) with overlapped gradient reduce and parameter gather, gradients reduced in bf16 "
    "(grad_reduce_in_fp32=False), FP8 parameters and their gather (fp8_param_gather: not modelled), DDP buckets of "
    "{bucket} (not modelled); FP8 = Transformer Engine's 'tensorwise' recipe (per-tensor current scaling, {fmt}): the "
    "planner's FP8; attention in bf16 (fp8_dot_product_attention false); no recomputation "
    "(activations_checkpoint_granularity null); {graphs}, TE's op fuser, fused QKV-RoPE, TE cross-entropy fusion and "
    "NVIDIA's TP-PP-DP rank mapping (not modelled); {blocks}; {system}")
FP8_HYBRID_FMT = "HYBRID format: E4M3 forward, E5M2 backward"
FULL_CG = "full-iteration CUDA graphs (cuda_graph_scope full_iteration)"
B200_LINKS = "the b200 preset's links (8 GPUs per node, 400 Gb/s per GPU across nodes)"
MLPERF51_GB300_NOTE = MLPERF51_NOTE.replace(
    "GB200 NVL72 trays of 4 GPUs (DGXNGPU=4; system JSON: 4 x ConnectX-7 400 Gb/s per tray)",
    "GB300 NVL72 trays of 4 GPUs (DGXNGPU=4; systems/{system}.json: 4 x ConnectX-8 IB XDR 800 Gb/s per tray, NVLink "
    "Gen5 1,800 GB/s + NVSwitch Gen5: the gb300 preset's links)") + (
    "; {config} is the GB200 config of the same name byte for byte (the same git blob as the second set's), "
    "{blocks}{platform}")
MLPERF51_CISCO_NOTE = (
    "Cisco/benchmarks/llama31_8b/implementations/nemo/{config} (no README-<system>.md names one: the folder's only "
    "one, README-eos-dfw_n64_ngc25.01_nemo.md, is NVIDIA's v5.0 Llama 3.1 405B one; this is the folder's config of the "
    "log's node count, whose MINIBS 1 gives the log's GBS 64), with config_common.sh, conf/custom.yaml and "
    "pretrain.py: "
    "{layout}; Cisco's own implementation (from NVIDIA's v5.0 Llama 3.1 405B one; the Dockerfile: "
    "nvcr.io/nvidia/pytorch:25.01-py3 with Transformer Engine v2.5, NeMo v2.4.0 and Megatron-Core core_v0.13.1): "
    "pretrain.py builds NeMo's Llama31Config8B (32 layers at custom.yaml's 8,192 tokens: the llama3-8b preset) on "
    "Megatron's DDP with the distributed optimizer (ZeRO-1; custom.yaml's fsdp keys are read by nothing in "
    "pretrain.py) with overlapped gradient reduce and parameter gather (also with the optimizer step, "
    "OVERLAP_PARAM_GATHER_WITH_OPTIM_STEP=True), gradients reduced in bf16 (grad_reduce_in_fp32=False), FP8 "
    "parameters (FP8_PARAMS: not modelled) and bucket_size 64 (custom.yaml's default, BUCKET_SIZE unset; the "
    "config's BUCKET_CAP_MB=125 is read by nothing: not modelled); FP8 = Transformer Engine delayed per-tensor scaling "
    "(FP8=True, FP8_HYBRID unset: pretrain.py's fp8 'e4m3', E4M3 forward and backward; custom.yaml's fp8_recipe "
    "default 'delayed', amax history 1, most_recent): the planner's FP8; no recomputation (ACT_CKPT_* unset); no CUDA "
    "graphs (MCORE_CUDA_GRAPH=False); attention: Transformer Engine's; NCCL_NVLS_ENABLE=0; the log prints no "
    "configuration and gives the running sample count at each block (a block's samples: the next eval_start's count "
    "less its block_start's), {blocks}; H100-SXM5-80GB nodes (systems/{system}.json: 8 per node, NVLink Gen4 900 GB/s "
    "+ NVSwitch Gen3, 8 x ConnectX-7 400 Gb/s for compute on a Cisco Silicon One G200 Ethernet fabric): the h100-sxm "
    "preset's links")
MLPERF51_LAMBDA_NOTE = (
    "the log's configuration dump (DLPAL GB300_18x4x1xtp1pp1cp2_8b; Lambda/benchmarks/llama31_8b/implementations/"
    "gb300_0922/config_GB300_18x4x1xtp1pp1cp2_8b.sh, the folder's one config, only sources "
    "config_GB200_18x4x1xtp1pp1cp2_8b.sh, which is not in Lambda's folder): TP 1 (no sequence parallelism, no TP "
    "overlap), PP 1, CP 2, micro-batch 1, GBS 36 (DP 36, gradient accumulation 1, as the log states); Lambda's copy of "
    "an earlier state of NVIDIA's v5.1 implementation (pretrain.py without the FP8_DPA hook and without passing "
    "bucket_size, conf/custom.yaml and the Dockerfile differ from NVIDIA's: Transformer Engine from a fork at "
    "d5919e1, NeMo and Megatron-Core 25.09-alpha; the log's container nvcr.io/nvdlfwea/mlperftv51/"
    "llama31_8b-arm:20250922): Llama31Config8B, 32 layers at 8,192 tokens, vocabulary 128,256: the llama3-8b preset; "
    "Megatron's distributed optimizer (ZeRO-1) with overlapped gradient reduce and parameter gather, gradients "
    "reduced in bf16, FP8 parameters and their gather (not modelled), DDP buckets of 134,217,728 (the log's "
    "DistributedDataParallelConfig; the dump's bucket_size 200 is not passed on: not modelled); FP8 = Transformer "
    "Engine's 'tensorwise' recipe (per-tensor current scaling; fp8_hybrid false, Lambda's config_common_8b.sh lacking "
    "NVIDIA's FP8_HYBRID=True: E4M3 forward and backward): the planner's FP8; attention in bf16 (the log: "
    "fp8_dot_product_attention=False); no recomputation; full-iteration CUDA graphs, TE's op fuser, fused QKV-RoPE, "
    "TE cross-entropy fusion and NVIDIA's TP-PP-DP rank mapping (not modelled); 15 blocks of 342 steps, the first "
    "55.3 s, the rest 55.6-55.9 s; GB300 NVL72 trays of 4 GPUs (18 nodes of 4; systems/gb300_n18_ngc25.04_nemo.json "
    "at 441d65f, corrected after the results commit: 4 x ConnectX-8 IB XDR 800 Gb/s per tray, NVLink Gen5 1,800 GB/s "
    "+ NVSwitch Gen5: the gb300 preset's links); the segment is not stated in Lambda's files (NVIDIA's "
    "config_GB200_18x4x1xtp1pp1cp2_8b.sh sets SEGMENT=18): the 72 GPUs as one rack, as held_out.nvlink_segment "
    "places them")
MLPERF51_405B_B200_NOTE = (
    "University-of-Florida/benchmarks/llama31_405b/implementations/hpg.dgxb200x8/{config} (the config of its node "
    "count; the folder's README points to b200_nemo, whose pretrain.py, conf/custom.yaml, custom_callbacks.py and "
    "Dockerfile are NVIDIA's v5.1 ones and whose config_common.sh, config_common_405b.sh and config_common_cg.sh it "
    "sources; the log prints no configuration): TP "
    "4, PP 8, interleaved 8 (INTERLEAVED_PIPELINE=8), CP 2, micro-batch 1, MINIBS 144 (GBS = 144 x {gpus} // (4 x 8 "
    "x 2) = {gbs:,}, DP {dp}, gradient accumulation 144, as the log states); ASYM_PP_EMBED=True and ASYM_PP_LOSS=True "
    "(the embedding and the loss each counted as a layer: 128 slots over 8 x 8 virtual stages of 2, first/last_"
    "stage_layers 1); the model Llama31Config405B at 126 layers and 8,192 tokens with the Mixtral 8x22B tokenizer "
    "(the implementation's README, 3.3.2: MLPERF_LLAMA31_405B); sequence parallelism (SEQ_PARALLEL default True) but "
    "no TP overlap (the config's TP_COMM_OVERLAP=True is commented out; custom.yaml's default False); Megatron's "
    "distributed optimizer (ZeRO-1) with overlapped gradient reduce and parameter gather, gradients reduced in bf16, "
    "FP8 parameter gather (FP8_PARAM_GATHER: not modelled), DDP buckets of 134,217,728 (custom.yaml's default: not "
    "modelled); FP8 = Transformer Engine's 'tensorwise' recipe (FP8_RECIPE in config_common.sh, per-tensor current "
    "scaling; FP8_HYBRID unset: E4M3 forward and backward): the planner's FP8; attention in bf16 (FP8_DPA unset); no "
    "recomputation; full-iteration CUDA graphs (FULL_CUDA_GRAPH=1, MCORE_CUDA_GRAPH=1) and NVIDIA's TP-PP-DP rank "
    "mapping (not modelled); pipeline send/receive overlapped (overlap_p2p_comm); the timed region resumes from Meta's "
    "BF16 checkpoint (the README, 3.3.3); {blocks}; DGX B200 nodes (systems/hpg.dgxb200x8.n{nodes}.json: 8 "
    "B200-SXM-180GB, 18 x 5th Gen NVLink, InfiniBand of unstated rate): " + B200_LINKS)


def _8b_layout(gpus: int, cp: int, micro_batch: int) -> str:
    """The layout words of a fifteenth-set Llama 3.1 8B run (TP 1, PP 1, gradient accumulation 1)."""
    dp = gpus // cp
    return (f"TP 1, PP 1, CP {cp}, micro-batch {micro_batch}, GBS {dp * micro_batch} (DP {dp}, gradient accumulation "
            "1, as the log states)")


def _mlperf51_8b(submitter: str, folder: str, results: str, gpu: str, gpus: int, cp: int, micro_batch: int,
                 samples: int, seconds: float, note: str | None = None, log: str = "result_0.txt", moved: str = "",
                 graphs: str = FULL_CG, **settings: str) -> HeldOutRun:
    """Another organisation's Llama 3.1 8B submission of MLPerf Training v5.1 as the fifteenth set records it: FP8,
    TP 1, PP 1 and gradient accumulation 1 (so the GBS is DP x micro-batch), its log <folder>/results/<results>/
    llama31_8b/<log>, `samples` sequences of 8,192 tokens over `seconds` of training blocks, and its note: `note`, or
    MLPERF51_8B_NOTE with the layout, the HYBRID format, `graphs` and `settings` (where, bucket, blocks, system)."""
    note = note or MLPERF51_8B_NOTE.format(layout=_8b_layout(gpus, cp, micro_batch), fmt=FP8_HYBRID_FMT,
                                           graphs=graphs, **settings)
    dp = gpus // cp
    return HeldOutRun(f"MLPerf v5.1 Llama 3.1 8B {f'CP {cp}' if cp > 1 else f'DP {dp}'}, {gpus} {gpu.upper()}s, FP8 "
                      f"({submitter})",
                      MLPERF51_RUN.format(folder, results, "llama31_8b", log, moved) +
                      f"; {gpus} GPUs, GBS {dp * micro_batch}",
                      _llama3("llama3-8b"),
                      dict(dp=dp, micro_batch=micro_batch, grad_accum=1, precision="fp8", **NEMO,
                           **({"cp": cp} if cp > 1 else {})),
                      gpu, "tokens_per_gpu", _tokens_per_gpu(samples * 8192 / seconds, gpus), note)


FIFTEENTH_SET: list[HeldOutRun] = [
    # ---- dense, H100, DP 64 and TP 2, FP8 (MLPerf Training v5.1, Cisco) --------------------------------------------
    *[HeldOutRun(f"MLPerf v5.1 Llama 3.1 8B {label}, {gpus} H100s, FP8 (Cisco)",
                 MLPERF51_RUN.format("Cisco", system, "llama31_8b", "result_0.txt", "") + f"; {gpus} GPUs, GBS 64",
                 _llama3("llama3-8b"),
                 dict(dp=64, micro_batch=1, grad_accum=1, precision="fp8", **tp, **NEMO),
                 "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(samples * 8192 / seconds, gpus),
                 MLPERF51_CISCO_NOTE.format(config=config, layout=layout, blocks=blocks, system=system))
      for system, config, gpus, label, tp, layout, blocks, samples, seconds in (
          ("hpf_n8", "config_DGXH100_8x8x1xtp1pp1cp1.sh", 64, "DP 64", {},
           "TP 1, PP 1, CP 1, micro-batch 1 (GBS 64, DP 64, gradient accumulation 1, as the log states)",
           "10 blocks of 21,888 samples (342 steps), the first 252.9 s, the rest 252.9-258.8 s but one of 302.9 s",
           218_880, 2591.741),
          ("hpf_n16", "config_DGXH100_16x8x1xtp2pp1cp1.sh", 128, "TP 2", dict(tp=2, **TP_OVERLAP),
           "TP 2 with sequence parallelism (SEQ_PARALLEL default True) and userbuffers TP overlap "
           "(TP_COMM_OVERLAP=True, conf/tp_overlap/h100tp2mbs1.yaml: bulk and ring-exchange), PP 1, CP 1, "
           "micro-batch 1 (GBS 64, DP 64, "
           "gradient accumulation 1, as the log states)",
           "18 blocks of 12,288 samples (192 steps), the first 99.5 s, the rest 99.6-106.4 s but one of 152.1 s",
           221_184, 1871.872))],
    # ---- dense, B200, DP and CP 2, FP8 (MLPerf Training v5.1: Dell, Oracle, University of Florida, Verda) ---------
    _mlperf51_8b("Dell", "Dell", "2xXE9680Lx8B200-SXM-180GB", "b200", 16, 1, 2, 196_608, 3649.489,
                 where="the log's configuration dump (DLPAL 2xXE9680Lx8B200-SXM-280GB_2x8x2xtp1pp1cp1_8b: "
                       "Dell/benchmarks/llama31_8b/implementations/nemo/"
                       "config_2xXE9680Lx8B200-SXM-180GB_2x8x2xtp1pp1cp1_8b.sh, the config named for the system; "
                       "no README-<system>.md names one)",
                 bucket="768,000,000", blocks="8 blocks of 768 steps, the first 451.7 s, the rest 455.3-459.5 s",
                 system="2 Dell PowerEdge XE9680L nodes of 8 B200-SXM-180GB (systems/2xXE9680Lx8B200-SXM-180GB."
                        "json: NVLink Gen5; no network stated): " + B200_LINKS),
    _mlperf51_8b("Oracle", "Oracle", "8xBM.GPU.B200.8", "b200", 64, 2, 1, 184_320, 1105.263,
                 where="the log's configuration dump (DLPAL DGXB200_8x8x1xtp1pp1cp2_8b: Oracle/benchmarks/"
                       "llama31_8b/config_DGXB200_8x8x1xtp1pp1cp2_8b.sh, which the folder's run_llama31-8b.sh "
                       "sources; Oracle's folder ships configs and launch scripts, not the code, and the log's "
                       "container is a local image, llama3_8b_20251008.sqsh)",
                 bucket="768,000,000", blocks="15 blocks of 384 steps, the first 72.2 s, the rest 73.5-73.9 s",
                 system="8 Oracle BM.GPU.B200.8 nodes (systems/8xBM.GPU.B200.8.json: NVLink Gen5, RoCE v2 of "
                        "unstated rate): " + B200_LINKS),
    *[_mlperf51_8b("University of Florida", "University-of-Florida", f"hpg.dgxb200x8.n{nodes}", "b200", gpus, cp,
                   micro_batch, samples, seconds,
                   where=f"University-of-Florida/benchmarks/llama31_8b/implementations/hpg.dgxb200x8/{config} "
                         "(the config of its node count; the folder's README points to b200_nemo, whose "
                         "config_common.sh (FP8_RECIPE tensorwise), config_common_8b.sh (FP8_HYBRID, USE_TE_OPS, "
                         "FUSED_QKV_ROPE, no BUCKET_SIZE) and config_common_cg.sh it sources; the log prints no "
                         "configuration)",
                   bucket="134,217,728 (custom.yaml's default)",
                   graphs="full-iteration CUDA graphs (FULL_CUDA_GRAPH=1, MCORE_CUDA_GRAPH=1)",
                   blocks=blocks,
                   system=f"DGX B200 nodes (systems/hpg.dgxb200x8.n{nodes}.json: 8 B200-SXM-180GB, 18 x 5th Gen "
                          "NVLink, InfiniBand of unstated rate): " + B200_LINKS)
      for nodes, gpus, config, cp, micro_batch, blocks, samples, seconds in (
          (2, 16, "config_DGXB200_2x8x2xtp1pp1cp1_8b.sh", 1, 2,
           "8 blocks of 768 steps, the first 434.5 s, the rest 439.1-439.8 s", 196_608, 3511.077),
          (32, 256, "config_DGXB200_32x8x1xtp1pp1cp2_8b.sh", 2, 1,
           "7 blocks of 384 steps, the first 84.5 s, the rest 85.3-85.6 s", 344_064, 597.408))],
    _mlperf51_8b("Verda", "Verda", "b200_8x8_ngc25.09", "b200", 64, 2, 1, 184_320, 1106.758,
                 where="the log's configuration dump (DLPAL DGXB200_8x8x1xtp1pp1cp2_8b: Verda/benchmarks/"
                       "llama31_8b/implementations/b200_8x8_ngc25.09/config_DGXB200_8x8x1xtp1pp1cp2_8b.sh; the "
                       "container nvcr.io/nvdlfwea/mlperftv51/llama31_8b-amd:20251006, the systems description's "
                       "sw_notes)",
                 bucket="134,217,728", blocks="15 blocks of 384 steps, the first 73.7 s, the rest 73.5-74.4 s",
                 system="8 nodes of 8 B200-SXM-180GB (systems/b200_8x8_ngc25.09.json: 'NVLink', '100GbE "
                        "InfiniBand' with no adapter count, so no per-GPU rate): " + B200_LINKS,
                 moved="; under Datacrunch/ at the results commit, renamed Verda/ since, the log's blob unchanged"),
    # ---- dense, B200, TP 4 x PP 8 (interleaved 8, uneven ends) x CP 2, FP8 (MLPerf v5.1, University of Florida) ---
    *[HeldOutRun(f"MLPerf v5.1 Llama 3.1 405B TP 4 x PP 8 x CP 2, {gpus} B200s, FP8 (University of Florida)",
                 MLPERF51_RUN.format("University-of-Florida", f"hpg.dgxb200x8.n{nodes}", "llama31_405b",
                                     "result_0.txt", "") + f"; {gpus} GPUs, GBS {gbs:,}",
                 MLPERF_LLAMA31_405B,
                 dict(dp=dp, tp=4, grad_accum=144, **{**MLPERF_405B_LAYOUT, "tp_comm_overlap": False}),
                 "b200", "tokens_per_gpu", _tokens_per_gpu(samples * 8192 / seconds, gpus),
                 MLPERF51_405B_B200_NOTE.format(config=config, gpus=gpus, gbs=gbs, dp=dp, blocks=blocks, nodes=nodes))
      for nodes, gpus, dp, gbs, config, blocks, samples, seconds in (
          (32, 256, 4, 576, "config_DGXB200_32x8x144xtp4pp8cp2_cg.sh",
           "3 blocks of 448, 32 and 20 steps (the first evaluation after 258,048 samples, then every 18,432), "
           "12,426.8 s, 883.6 s and 552.2 s (27.6-27.7 s a step in each)", 288_000, 13862.640),
          (56, 448, 7, 1008, "config_DGXB200_56x8x144xtp4pp8cp2_cg.sh",
           "2 blocks of 285 and 19 steps (the first evaluation after 287,280 samples), 7,971.7 s and 532.0 s (28.0 s "
           "a step in each)", 306_432, 8503.687))],
    # ---- dense, B300, DP 8, FP8 (MLPerf Training v5.1: Dell, Supermicro) -------------------------------------------
    _mlperf51_8b("Dell", "Dell", "1xXE9780x8B300-SXM-270GB", "b300", 8, 1, 2, 159_744, 5471.312,
                 where="the log's configuration dump (DLPAL XE9780x8B300-SXM-280GB_1x8x2xtp1pp1cp1_8b: "
                       "Dell/benchmarks/llama31_8b/implementations/nemo/config_XE9780x8B300-SXM-270GB_1x8x2xtp1pp1"
                       "cp1_8b.sh, the config named for the system)",
                 bucket="134,217,728 (the dump; the stored config_common_8b.sh sets "
                                                     "768,000,000)",
                 blocks="13 blocks of 768 steps, the first 416.2 s, the rest 420.8-421.4 s",
                 system="one Dell PowerEdge XE9780 node of 8 B300-SXM-270GB (systems/1xXE9780x8B300-SXM-270GB."
                        "json, 275,040 MiB each): the b300 preset"),
    _mlperf51_8b("Supermicro", "Supermicro", "AS-8126GS-NB3RT", "b300", 8, 1, 2, 159_744, 5498.479,
                 where="the log's configuration dump (DLPAL DGXB200_1x8x2xtp1pp1cp1_8b: Supermicro/benchmarks/"
                       "llama31_8b/implementations/AS-8126GS-NB3RT/config_DGXB200_1x8x2xtp1pp1cp1_8b.sh, in the "
                       "folder named for the system, which ships configs, not the code; the container "
                       "nvcr.io/nvdlfwea/mlperftv51/llama31_8b-amd:20251006)",
                 bucket="134,217,728",
                 graphs="no CUDA graphs (the config's FULL_CUDA_GRAPH=0 and MCORE_CUDA_GRAPH=0; the dump's "
                        "enable_cuda_graph 0; NCCL over NVLink only, NCCL_IB_DISABLE=1)",
                 blocks="13 blocks of 768 steps, the first 417.8 s, the rest 422.5-423.7 s",
                 system="one Supermicro AS-8126GS-NB3RT node of 8 B300-SXM-270GB (systems/AS-8126GS-NB3RT.json: "
                        "NVLink Gen5 1,800 GB/s + NVSwitch Gen5): the b300 preset",
                 log="result_1.txt (the folder's first; it has no result_0)"),
    # ---- dense, GB300, CP 2 and TP 2 x CP 4, FP8 (MLPerf Training v5.1: Lambda, NVIDIA) ---------------------------
    _mlperf51_8b("Lambda", "Lambda", "gb300_n18_ngc25.04_nemo", "gb300", 72, 2, 1, 184_680, 836.132,
                 MLPERF51_LAMBDA_NOTE, log="result_1.txt (the folder's first; it has no result_0)"),
    *[_nvidia51_8b(system, "gb300", gpus, samples, seconds, " (NVIDIA)", MLPERF51_GB300_NOTE, blocks=blocks,
                   platform=f"; the log's platform string says '{gpus // 4}xNVIDIA GB200', its systems "
                            "description GB300")
      for system, gpus, samples, seconds, blocks in (
          ("theia_ngpu72_ngc25.09_nemo", 72, 184_680, 757.625,
           "15 blocks of 342 steps, the first 50.0 s, the rest 50.4-50.6 s"),
          ("theia_ngpu512_ngc25.09_nemo", 512, 221_184, 299.058,
           "18 blocks of 192 steps, the first 16.6 s, the rest 16.6-16.7 s"))],
]
# The arithmetic (each block's duration is its block_stop less its block_start, in the log's time_ms; a block's
# samples are its steps times the GBS, or for Cisco's logs, which give no step, the next eval_start's samples_count
# less its block_start's), x 8,192 tokens:
#   Cisco 64 H100s        10 x 21,888 = 218,880 sequences = 1,793,064,960 tokens over 2,591.741 s = 691,838.0 tokens/s
#                         = 10,809.97 per GPU
#   Cisco 128 H100s       18 x 12,288 = 221,184 = 1,811,939,328 tokens over 1,871.872 s = 967,982.5 = 7,562.36 per GPU
#   Dell 16 B200s         8 x 768 steps x 32 = 196,608 = 1,610,612,736 over 3,649.489 s = 441,325.5 = 27,582.85 per GPU
#   Oracle 64 B200s       15 x 384 x 32 = 184,320 = 1,509,949,440 over 1,105.263 s = 1,366,144.9 = 21,346.01 per GPU
#   UF 16 B200s           8 x 768 x 32 = 196,608 = 1,610,612,736 over 3,511.077 s = 458,723.3 = 28,670.20 per GPU
#   UF 256 B200s          7 x 384 x 128 = 344,064 = 2,818,572,288 over 597.408 s = 4,718,002.2 = 18,429.70 per GPU
#   Verda 64 B200s        15 x 384 x 32 = 184,320 = 1,509,949,440 over 1,106.758 s = 1,364,299.5 = 21,317.18 per GPU
#   UF 405B 256 B200s     (448 + 32 + 20) x 576 = 288,000 = 2,359,296,000 over 13,862.640 s = 170,191.0 = 664.81 per GPU
#   UF 405B 448 B200s     (285 + 19) x 1,008 = 306,432 = 2,510,290,944 over 8,503.687 s = 295,200.3 = 658.93 per GPU
#   Dell 8 B300s          13 x 768 x 16 = 159,744 = 1,308,622,848 over 5,471.312 s = 239,179.0 = 29,897.37 per GPU
#   Supermicro 8 B300s    13 x 768 x 16 = 159,744 = 1,308,622,848 over 5,498.479 s = 237,997.2 = 29,749.66 per GPU
#   Lambda 72 GB300s      15 x 342 x 36 = 184,680 = 1,512,898,560 over 836.132 s = 1,809,401.6 = 25,130.58 per GPU
#   NVIDIA 72 GB300s      15 x 342 x 36 = 184,680 = 1,512,898,560 over 757.625 s = 1,996,896.3 = 27,734.67 per GPU
#   NVIDIA 512 GB300s     18 x 192 x 64 = 221,184 = 1,811,939,328 over 299.058 s = 6,058,822.5 = 11,833.64 per GPU
# (each total equals the log's run_stop samples_count)

# The set's runs submitted by another organisation whose implementation is NVIDIA's code of the same round (the planner
# plans them at NVIDIA's kernel rate). Decided by the git blobs of each implementation folder against
# NVIDIA/benchmarks/llama31_8b/implementations/nemo of v5.1 (NVIDIA's llama31_405b folders of v5.1 hold the same
# pretrain.py, 981ecee, and conf/custom.yaml, 9944ba9):
#   Dell (Dell/benchmarks/llama31_8b/implementations/nemo, both runs): pretrain.py, conf/custom.yaml,
#     conf/llama31_config_custom.yaml, custom_callbacks.py, run.sub, run_and_time.sh, te.patch and requirements.txt
#     identical; the Dockerfile differs (cbabd8c against 5e0faba) only in building no NCCL v2.28.3-1 from source and
#     recording no GIT_COMMIT_ID (the same base image and Transformer Engine, NeMo and Megatron-Core revisions);
#     config_common.sh lacks GPU_ARCH=gb200
#   University of Florida (llama31_8b and llama31_405b implementations/b200_nemo, all four runs): pretrain.py,
#     conf/custom.yaml, custom_callbacks.py and the Dockerfile identical; config_common.sh and config_common_8b.sh
#     differ (no NVTE_DPA_FP8_RECIPE, NVTE_DPA_FP8DS_REDUCE_AMAX, GPU_ARCH, BUCKET_SIZE lines)
#   Verda (b200_8x8_ngc25.09): pretrain.py, conf/custom.yaml, custom_callbacks.py and the Dockerfile identical;
#     config_common*.sh differ (as the University of Florida's, and NVTE_DPA_FP8DS_REDUCE_AMAX in
#     config_common_fp8attn.sh)
#   Oracle (Oracle/benchmarks/llama31_8b) and Supermicro (implementations/AS-8126GS-NB3RT): the folders ship configs
#     and launch scripts only (run.sub identical, Oracle's run_and_time.sh identical), no pretrain.py, YAML, callbacks
#     or Dockerfile to compare; their logs' MLLOG records carry pretrain.py's line numbers 566, 601 and 750 and
#     custom_callbacks.py's 480, as NVIDIA's own v5.1 logs do (Lambda's 561, 595, 744; Cisco's 544, 576, 720 and 312),
#     and Supermicro's container is NVIDIA's nvcr.io/nvdlfwea/mlperftv51/llama31_8b-amd:20251006; Supermicro's other
#     folder, implementations/Blackwell_llama31_8b, holds NVIDIA's pretrain.py (981ecee), conf/custom.yaml (9944ba9),
#     custom_callbacks.py (725aa3d), run.sub and run_and_time.sh (its Dockerfile differs) but no config for this
#     system; not in it all the same: the rule (held_out.nvidia_stack) reads the run's own folder, and it has no code
#     (on Blackwell GPUs, which have no kernel rate, the name would change no plan)
# Not in it: Lambda (custom_callbacks.py identical; pretrain.py, conf/custom.yaml and the Dockerfile differ: an
# earlier state of NVIDIA's code, Transformer Engine from a fork at d5919e1, NeMo and Megatron-Core 25.09-alpha) and
# Cisco (pretrain.py, conf/custom.yaml, custom_callbacks.py, the Dockerfile all differ: its own implementation from
# NVIDIA's v5.0 one, on Transformer Engine v2.5, NeMo v2.4.0, Megatron-Core core_v0.13.1).
NVIDIA_CODE_BY_OTHERS: frozenset[str] = frozenset({
    "MLPerf v5.1 Llama 3.1 8B DP 16, 16 B200s, FP8 (Dell)",
    "MLPerf v5.1 Llama 3.1 8B DP 8, 8 B300s, FP8 (Dell)",
    "MLPerf v5.1 Llama 3.1 8B DP 16, 16 B200s, FP8 (University of Florida)",
    "MLPerf v5.1 Llama 3.1 8B CP 2, 256 B200s, FP8 (University of Florida)",
    "MLPerf v5.1 Llama 3.1 405B TP 4 x PP 8 x CP 2, 256 B200s, FP8 (University of Florida)",
    "MLPerf v5.1 Llama 3.1 405B TP 4 x PP 8 x CP 2, 448 B200s, FP8 (University of Florida)",
    "MLPerf v5.1 Llama 3.1 8B CP 2, 64 B200s, FP8 (Verda)",
}) | frozenset({
    # The sixteenth set's runs (below) decided by the same rule: each implementation folder's files against NVIDIA's
    # GPT-3 folder of the same round, blob by blob (git ls-tree).
    #   NVIDIA+CoreWeave v3.0 (NVIDIA_CoreWeave/benchmarks/gpt3/implementations/pytorch, both runs): every file the
    #     same blob as NVIDIA/benchmarks/gpt3/implementations/pytorch's (megatron_gpt_pretraining_custom.py,
    #     custom_callbacks.py, custom_optimizer.py, custom_schedulers.py, unified_checkpointing.py, dist_checkpointing/,
    #     conf/megatron_gpt_config.yaml, the tp_overlap YAMLs, config_common.sh, config_fp8.sh, config_tp_h100.sh, the
    #     four config_DGXH100_*.sh, run.sub, run_and_time.sh, requirements.txt and the Dockerfile, at the results
    #     commit 9f08e30 and at HEAD, 8a4f4ad having changed both requirements.txt alike) but README.md (one link)
    "MLPerf v3.0 GPT-3 175B TP 4 x PP 8, 768 H100s, FP8 (CoreWeave)",
    "MLPerf v3.0 GPT-3 175B TP 4 x PP 8, 3,584 H100s, FP8 (CoreWeave)",
    #   Sustainable Metal Cloud v4.0 (smc/benchmarks/gpt3/implementations/nemo, the folder of the log's config):
    #     megatron_gpt_pretraining_custom.py, custom_callbacks.py, custom_optimizer.py, custom_schedulers.py,
    #     unified_checkpointing.py, mlperf_logger.py, dist_checkpointing/, conf/ (custom.yaml, the optim, nccl and
    #     tp_overlap YAMLs), config_common.sh, config_fp8.sh, requirements.txt and run_and_time.sh the same blobs as
    #     NVIDIA/benchmarks/gpt3/implementations/nemo's; the Dockerfile differs in naming the
    #     same revisions otherwise (Transformer Engine 9e4091e, the commit of NVIDIA's v1.6rc1; the branches
    #     r2.0.0.rc0.beta and core_r0.7.0.beta where NVIDIA's names the tags v2.0.0.rc0.beta and core_v0.7.0.beta)
    #     and in three comments, run.sub in SMC's cluster hooks, README.md, and the configs are SMC's own
    #     (config_SMCH100_*.sh); the log's container is NVIDIA's early-access nvdlfwea+mlperfv40+gpt3+20240505
    "MLPerf v4.0 GPT-3 175B TP 4 x PP 8, 512 H100s, FP8 (Sustainable Metal Cloud)",
    #   Oracle v4.1 (Oracle/benchmarks/gpt3/DGXH100_*_mbs2, five folders of the same blobs): megatron_gpt_pretraining_
    #     custom.py, custom_callbacks.py, mlperf_logger.py, requirements.txt, run_and_time.sh, config_fp8.sh and
    #     README.md the same blobs as NVIDIA/benchmarks/gpt3/implementations/eos_n64_ngc24.09_nemo's (and eos_n32's);
    #     the Dockerfile differs only in its base image's registry (nvcr.io/nvdlfwea/pytorch:24.09-py3, NVIDIA's
    #     early-access copy of nvcr.io/nvidia/pytorch:24.09-py3), config_common.sh in a SHARP line commented out and
    #     an appended NCCL/UCX block for RoCE, run.sub and the checkpoint-conversion script differ, and the configs are
    #     Oracle's (v4.0's interleaving 4, no deferred embedding gradients); the folders hold no conf/, so the rule
    #     was read, when the set was written down and before it was predicted, as comparing the folder's code, its
    #     Python files, which are NVIDIA's; the configuration that ran was not NVIDIA's v4.1 conf/custom.yaml as it
    #     stands: the logs' resolved configuration lacks four keys it defines (wgrad_deferral_limit,
    #     tp_only_amax_red, cross_entropy_loss_fusion, deterministic_mode), an earlier state of it (docs/planner.md
    #     gives both runs' figures at the calibrated rate too)
    "MLPerf v4.1 GPT-3 175B TP 4 x PP 8, 1,536 H100s, FP8 (Oracle)",
    "MLPerf v4.1 GPT-3 175B TP 4 x PP 8, 3,072 H100s, FP8 (Oracle)",
    # Not in it: Azure+NVIDIA v3.1 (Azure+NVIDIA/benchmarks/gpt3/implementations/pytorch): the conf/*.yaml NVIDIA's
    # folder has,
    # custom_schedulers.py, mlperf_logger.py, requirements.txt and part of dist_checkpointing/ the same blobs, but
    # megatron_gpt_pretraining_custom.py, custom_callbacks.py, custom_optimizer.py, unified_checkpointing.py and
    # dist_checkpointing's mapping.py, serialization.py and three strategies differ from NVIDIA's v3.1 files (NVIDIA's
    # with their TODO comments taken out: no line of code differs), and the Dockerfile builds another Transformer Engine
    # (4ee8e8e, where NVIDIA's builds 09ba842); the rule reads git blobs, and these are not NVIDIA's.
})

# ---- the sixteenth set: written down before the planner predicted any of them (module docstring) ---------------
# Which runs (the rule fixed before any log was read): every closed-division GPT-3 175B submission (gpt3) of MLPerf
# Training v3.0, v3.1, v4.0 and v4.1 by an organisation other than NVIDIA alone (joint submissions included), on a GPU
# with a preset, in a precision the planner expresses, whose first result log the earlier MLPerf GPT-3 sets' method
# times; then per submitter, round and GPU type the smallest and the largest GPU count (where two share a count, the
# results folder that sorts first). Layout from the config of the log's node count (read as the second set reads
# NVIDIA's configs of the same round) or, where the log prints its configuration, from that dump.
# ---- sources and what they leave unstated ------------------------------------------------------------------------
MLPERF_V30_OTHER = ("mlcommons/training_results_v3.0 NVIDIA_CoreWeave/results/{}/gpt3/result_0.txt (commit 63e326c; "
                    "results uploaded in 9f08e30, 2023-06-19): the run's one training block's tokens (trained_samples) "
                    "over its duration less the evaluations inside it")
MLPERF_V31_AZURE = ("mlcommons/training_results_v3.1 Azure+NVIDIA/results/ND_H100_v5_n1344_pytorch/gpt3/result_0.txt "
                    "(commit d06288b; results uploaded in f33f944, 2023-11-07): the training blocks' tokens over their "
                    "summed durations")
MLPERF_V40_SMC = ("mlcommons/training_results_v4.0 smc/results/64xSMC-H100-SXM-80GB/gpt3/"
                  "result_5849-240518014016374832336_1.txt (commit 6fe9543; results pushed in 62f111b, 2024-06-11; the "
                  "folder numbers its logs 1 to 3 after the job: the one numbered 1, 'trial 1 of 3'): the training "
                  "blocks' tokens over their summed durations")
MLPERF_V41_ORACLE = ("mlcommons/training_results_v4.1 Oracle/results/{}/gpt3/result_0.txt (results commit 8821c70, "
                     "2024-11-13; repository HEAD b87b9e3): the training blocks' tokens over their summed durations")
COREWEAVE_NOTE = (
    "NVIDIA_CoreWeave/benchmarks/gpt3/implementations/pytorch/{config} (the config of the log's node count; the "
    "folder is NVIDIA's v3.0 implementation file for file, README.md aside: NVIDIA_CODE_BY_OTHERS): TP 4, PP 8, "
    "interleaved 12 (config_common.sh's INTERLEAVED_PIPELINE), micro-batch 1, MINIBS {minibs} (GBS {gbs:,}, DP {dp}, "
    "gradient accumulation {grad_accum}, as the log states); {blocks}" + MLPERF_V30_NOTE.replace(
        "DGX H100 nodes (systems/dgxh100_n*_nemo.json: 8 x 400 Gb/s InfiniBand): the h100-sxm preset",
        "CoreWeave's HGX H100 nodes (systems/{system}.json: 8 H100-SXM5-80GB, NVLink Gen4 900 GB/s + NVSwitch Gen3, "
        "8 x ConnectX-7 InfiniBand NDR 400 Gb/s for compute): the h100-sxm preset's links"))
AZURE_NOTE = (
    "Azure+NVIDIA/benchmarks/gpt3/implementations/pytorch/config_DGXH100_1344x8x8x4x8_mbs1.sh (the folder's one "
    "config, of the log's node count): TP 4, PP 8, interleaved 12 (conf/custom.yaml's default, the same blob as "
    "NVIDIA's), micro-batch 1, MINIBS 8 (GBS 2,688, DP 336, gradient accumulation 8, as the log states); 22 blocks "
    "of 55,050,240 tokens, the first 10.353 s, the rest 9.640-10.307 s; NVIDIA's v3.1 implementation with its "
    "TODO comments taken out (not the same git blobs: not in NVIDIA_CODE_BY_OTHERS)" + MLPERF_V31_NOTE.replace(
        "Transformer Engine 09ba842)",
        "Transformer Engine 4ee8e8e, the Dockerfile's TE_REVISION, where NVIDIA's names 09ba842: 15 commits later "
        "on the same userbuffers work, transformer_engine/pytorch/attention.py unchanged between them)").replace(
        "Eos and Eos-dfw DGX H100 nodes (systems/*.json: 8 x 400 Gb/s InfiniBand for compute): the h100-sxm preset",
        "Azure ND H100 v5 VMs (systems/ND_H100_v5_n1344_pytorch.json: 8 H100-SXM-80GB, NVLink 4.0, 8 x Quantum-2 "
        "ConnectX-7 400 Gb/s InfiniBand): the h100-sxm preset's links").replace(
        "(NVTE_FLASH_ATTN=0 is commented out in config_common.sh)",
        "(Azure's config_common.sh sets no NVTE_FLASH_ATTN)"))
SMC_NOTE = (
    "the log's configuration dump (DLPAL SMCH100_64x8x128x4x8: smc/benchmarks/gpt3/implementations/nemo/"
    "config_SMCH100_64x8x128x4x8.sh, which, unlike NVIDIA's config_DGXH100_64x8x128x4x8_mbs2.sh, sets no "
    "INTERLEAVED_PIPELINE): TP 4, PP 8, interleaved 12 (conf/custom.yaml's default), micro-batch 2 "
    "(config_common.sh), MINIBS 128 (GBS 2,048, DP 16, gradient accumulation 64, as the log states), sequence "
    "parallelism, ub_tp_comm_overlap; NVIDIA's v4.0 implementation (NVIDIA_CODE_BY_OTHERS) in NVIDIA's early-access "
    "container (nvdlfwea+mlperfv40+gpt3+20240505); 24 blocks of 50,331,648 tokens, 129.0-129.4 s each; the run "
    "numbered 2 (job 5848) started before it: 3,100.509 s for the same tokens, 0.02 % slower" + MLPERF_NOTE.replace(
        "Eos's DGX H100 nodes (8 x 400 Gb/s InfiniBand): the h100-sxm preset",
        "SMC's immersion-cooled nodes of 8 H100-SXM5-80GB (systems/64xSMC-H100-SXM-80GB.json: NVLink Gen4 900 GB/s + "
        "NVSwitch Gen3, 'Infiniband NDR' with no adapter count or rate): the h100-sxm preset's links"))
ORACLE_NOTE = (
    "the log's configuration dump (Oracle/benchmarks/gpt3/DGXH100_*_mbs2/{config}, the config of its node count, in "
    "any of the five folders, which hold the same blobs): TP 4, PP 8, interleaved 4 (INTERLEAVED_PIPELINE=4, v4.0's "
    "value; NVIDIA's v4.1 configs set 6), "
    "micro-batch 2, MINIBS {minibs} (GBS 3,072, DP {dp}, gradient accumulation {grad_accum}, as the log states); "
    "NVIDIA's v4.1 training script and callbacks (NVIDIA_CODE_BY_OTHERS) with an earlier state of its configuration "
    "(the dump lacks four keys of NVIDIA's v4.1 conf/custom.yaml; the log's container a local gpt3-20240923.sqsh): "
    "distributed_fused_adam (ZeRO-1) with overlapped gradient and parameter sync, 200 MB buckets (bucket_cap_mb; not "
    "modelled), bf16 gradient sync, no recomputation (activations_checkpoint_granularity null), sequence "
    "parallelism, TP communication overlapped (userbuffers), Transformer Engine FP8 (hybrid, delayed scaling: amax "
    "history 1,024, max) with FP8 parameters (fp8_params: not modelled), the embedding's weight gradients not "
    "deferred (defer_embedding_wgrad_compute false), no CUDA graphs, Transformer Engine attention "
    "(use_flash_attention false), dropout 0, LayerNorm1p (as LayerNorm); the SentencePiece tokenizer's vocabulary is "
    "not stated: GPT-2's 50,257 assumed (as the v4.0 rows); {blocks}; Oracle BM.GPU.H100.8 nodes "
    "(systems/{system}.json: 8 H100-SXM5-80GB, NVLink Gen4 900 GB/s + NVSwitch Gen3, RoCE v2 of unstated per-GPU "
    "rate; config_common.sh's NCCL_IB_HCA names 16 adapters): the h100-sxm preset's links")

SIXTEENTH_SET: list[HeldOutRun] = [
    # ---- dense, H100, TP 4 x PP 8, FP8 (MLPerf Training v3.0, NVIDIA+CoreWeave) --------------------------------------
    *[HeldOutRun(f"MLPerf v3.0 GPT-3 175B TP 4 x PP 8, {gpus:,} H100s, FP8 (CoreWeave)",
                 MLPERF_V30_OTHER.format(system) + f"; {gpus:,} GPUs, GBS {gbs:,}",
                 {**GPT3_175B, "dropout": False},
                 dict(dp=dp, tp=4, pp=8, micro_batch=1, grad_accum=grad_accum, schedule="interleaved",
                      virtual_stages=12, precision="fp8", **TP_OVERLAP, **NEMO_FLASH_ATTN),
                 "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(tokens / seconds, gpus),
                 COREWEAVE_NOTE.format(config=config, minibs=minibs, gbs=gbs, dp=dp, grad_accum=grad_accum,
                                       blocks=blocks, system=system))
      for system, config, gpus, dp, minibs, grad_accum, gbs, blocks, tokens, seconds in (
          ("coreweave_hgxh100_n96_ngc23.04_pytorch", "config_DGXH100_96x8x128x4x8_mbs1.sh", 768, 24, 128, 128, 3072,
           "one block of 2,736.266 s holding 25 evaluations of 261.687 s in all", 1_258_291_200, 2736.266 - 261.687),
          ("coreweave_hgxh100_n448_ngc23.04_pytorch", "config_DGXH100_448x8x24x4x8_mbs1.sh", 3584, 112, 24, 24, 2688,
           "one block of 654.298 s holding 22 evaluations of 74.382 s in all", 1_211_105_280, 654.298 - 74.382))],
    # ---- dense, H100, TP 4 x PP 8, FP8 (MLPerf Training v3.1, Azure+NVIDIA) -----------------------------------------
    HeldOutRun("MLPerf v3.1 GPT-3 175B TP 4 x PP 8, 10,752 H100s, FP8 (Azure)",
               MLPERF_V31_AZURE + "; 10,752 GPUs, GBS 2,688", {**GPT3_175B, "dropout": False},
               dict(dp=336, tp=4, pp=8, micro_batch=1, grad_accum=8, schedule="interleaved", virtual_stages=12,
                    precision="fp8", **TP_OVERLAP, **NEMO_FLASH_ATTN),
               "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(1_211_105_280 / 216.375, 10752), AZURE_NOTE),
    # ---- dense, H100, TP 4 x PP 8, FP8 (MLPerf Training v4.0, Sustainable Metal Cloud) ------------------------------
    HeldOutRun("MLPerf v4.0 GPT-3 175B TP 4 x PP 8, 512 H100s, FP8 (Sustainable Metal Cloud)",
               MLPERF_V40_SMC + "; 512 GPUs, GBS 2,048", {**GPT3_175B, "dropout": False},
               dict(dp=16, tp=4, pp=8, micro_batch=2, grad_accum=64, schedule="interleaved", virtual_stages=12,
                    precision="fp8", **TP_OVERLAP, **NEMO),
               "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(1_207_959_552 / 3099.982, 512), SMC_NOTE),
    # ---- dense, H100, TP 4 x PP 8, FP8 (MLPerf Training v4.1, Oracle) ------------------------------------------------
    *[HeldOutRun(f"MLPerf v4.1 GPT-3 175B TP 4 x PP 8, {gpus:,} H100s, FP8 (Oracle)",
                 MLPERF_V41_ORACLE.format(system) + f"; {gpus:,} GPUs, GBS 3,072",
                 {**GPT3_175B, "dropout": False},
                 dict(dp=dp, tp=4, pp=8, micro_batch=2, grad_accum=grad_accum, schedule="interleaved",
                      virtual_stages=4, precision="fp8", **TP_OVERLAP, **NEMO),
                 "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(tokens / seconds, gpus),
                 ORACLE_NOTE.format(config=config, minibs=minibs, dp=dp, grad_accum=grad_accum, blocks=blocks,
                                    system=system))
      for system, config, gpus, dp, minibs, grad_accum, blocks, tokens, seconds in (
          ("1536xBM.GPU.H100.8", "config_DGXH100_192x8x64x4x8_mbs2.sh", 1536, 48, 64, 32,
           "26 blocks of 50,331,648 tokens, 41.7-41.9 s each", 1_308_622_848, 1086.615),
          ("3072xBM.GPU.H100.8", "config_DGXH100_384x8x32x4x8_mbs2.sh", 3072, 96, 32, 16,
           "25 blocks of 50,331,648 tokens, the first 22.731 s, the rest 22.466-27.859 s", 1_258_291_200, 643.758))],
]
# The arithmetic (durations from the log's time_ms: v3.0's one block_stop less its block_start, less each of its
# eval_stop - eval_start; later rounds' every block_stop less its block_start, summed), tokens as the log counts
# them (trained_samples; each later log's blocks' epoch_count summed gives the same total):
#   CoreWeave 768 H100s     1,258,291,200 tokens over 2,736.266 - 261.687 = 2,474.579 s = 508,487.0 tokens/s
#                           = 662.09 per GPU
#   CoreWeave 3,584 H100s   1,211,105,280 over 654.298 - 74.382 = 579.916 s = 2,088,415.0 = 582.71 per GPU
#   Azure 10,752 H100s      22 x 55,050,240 = 1,211,105,280 over 216.375 s = 5,597,251.4 = 520.58 per GPU
#   SMC 512 H100s           24 x 50,331,648 = 1,207,959,552 over 3,099.982 s = 389,666.6 = 761.07 per GPU
#   Oracle 1,536 H100s      26 x 50,331,648 = 1,308,622,848 over 1,086.615 s = 1,204,311.4 = 784.06 per GPU
#   Oracle 3,072 H100s      25 x 50,331,648 = 1,258,291,200 over 643.758 s = 1,954,602.8 = 636.26 per GPU
# (each total equals the log's trained_samples; the method gives the second set's NVIDIA v3.0 and v3.1 figures
# from their logs, 3,856.423 - 365.276 s and 211.046 s among them)

# ---- the seventeenth set: written down before the planner predicted any of them (module docstring) -------------
# Which runs (the rule fixed before any log was read): every closed-division llama31_8b and llama31_405b submission of
# MLPerf Training v6.0, by any submitter, on a GPU with a preset that no earlier set read for these benchmarks
# (h100-sxm, h200, b200, gb200; the twelfth set read B300 and GB300), in a precision the planner expresses (BF16; FP8
# with one scale per tensor; MXFP8), whose first result log the earlier MLPerf sets' method times and whose
# configuration no development run has; then per submitter, benchmark and GPU type the smallest and the largest GPU
# count (where two share a count, the results folder that sorts first); of those, the runs not in a set yet. NVFP4
# runs, and runs whose precision the copy does not determine (no config in it and no dump in the log), left out.
# ---- sources and what they leave unstated ------------------------------------------------------------------------
MLPERF60_8B = ("mlcommons/training_results_v6.0 Cisco/results/{}/llama31_8b/{} (read in the copy "
               "Richardyu114/training_results_v6.0, commit eabf23a): the training blocks' tokens over their summed "
               "durations")
MLPERF60_CISCO_H100_NOTE = (
    "Cisco/benchmarks/llama31_8b/nemo/{config} (the logs name no config and the folder has no README: the config of "
    "the log's node count{config_more}), with the folder's config_common.sh, pretrain.py and Dockerfile: TP 2 with "
    "sequence parallelism (SEQ_PARALLEL=True) and userbuffers TP overlap (TP_COMM_OVERLAP=True), PP 1, CP 1, "
    "micro-batch 1, MINIBS 1 (GBS {gbs}, DP {dp}, gradient accumulation 1, as the log states); Cisco's own "
    "implementation, as its v5.1 one (pretrain.py on NeMo 2's MegatronStrategy builds NeMo's Llama31Config8B: 32 "
    "layers at 8,192 tokens, vocabulary 128,256: the llama3-8b preset; the Dockerfile: nvcr.io/nvidia/"
    "pytorch:25.08-py3 with Transformer Engine c47f329 and one cherry-picked commit, NeMo eddf23f, Megatron-Core "
    "4cd81e8, NCCL v2.28.3-1; the folder in the copy lacks the conf/, custom_callbacks.py and requirements.txt the "
    "Dockerfile and pretrain.py use; the two logs name different lines of pretrain.py and custom_callbacks.py, "
    "init_start at line 792 and tracked_stats at 480 in the 64-GPU log, 782 and 470 in the 128-GPU one: they ran two "
    "revisions of the code, and the stored pretrain.py is at most one of them); Megatron's distributed optimizer "
    "(ZeRO-1) with overlapped gradient reduce and parameter gather (not with the optimizer step: "
    "OVERLAP_PARAM_GATHER_WITH_OPTIM_STEP=False), gradients reduced in bf16 (pretrain.py: grad_reduce_in_fp32=False), "
    "FP8 parameters and their gather (FP8_PARAMS, FP8_PARAM_GATHER: not modelled), DDP buckets as conf/custom.yaml "
    "sets them (not in the copy; the config's BUCKET_CAP_MB=125: not modelled); FP8 = Transformer Engine delayed "
    "scaling (FP8_RECIPE=delayed, FP8_HYBRID=True: E4M3 forward, E5M2 backward; amax history 1,024, max), one scale "
    "per tensor: the planner's FP8; attention in bf16 (FP8_DPA=False); no recomputation (no ACT_CKPT_* or RECOMPUTE_* "
    "setting in the configs); full-iteration CUDA graphs (FULL_CUDA_GRAPH=1, MCORE_CUDA_GRAPH=1), fused QKV-RoPE, TE "
    "cross-entropy fusion and the TP-PP-DP rank mapping (TP_PP_DP_MAPPING=True) (not modelled); no TE op fuser "
    "(USE_TE_OPS=False); NCCL_NVLS_ENABLE=0; the log prints no configuration and gives the running sample count at "
    "each block (a block's samples: the next eval_start's count less its block_start's), {blocks}; nodes: systems/"
    "{system}.json (H100-SXM5-80GB, NVLink 4.0 900 GB/s via NVSwitch, 8 x ConnectX-8 400 Gb/s RDMA over Ethernet per "
    "node, rail-optimized, one NIC per GPU): the h100-sxm preset's links")
MLPERF60_CISCO_H200_NOTE = (
    "the log's configuration dump (DLPAL C885A_H200_2x8x1xtp1pp1cp1_8b; Cisco/benchmarks/llama31_8b/implementations/"
    "nemo/config_C885A_H200_2x8x1xtp1pp1cp1_8b.sh, the config of that name, is stored with DGXNNODES=1 and MINIBS 4 "
    "and sources config_common*.sh files that are not in the copy; the folder holds configs and run.sub, no code; by "
    "its log the code is NVIDIA's v6.0 code: NVIDIA's container nvcr.io/nvdlfwea/mlperftv60/llama31_8b-amd:20260428 "
    "and its /workspace/llm/pretrain.py, which builds Megatron-Bridge's Llama31ModelProvider8B): TP 1, PP 1, CP 1, "
    "micro-batch 1, GBS 32 (DP 16; Megatron's 'setting number of microbatches to constant 2': gradient accumulation 2, "
    "where the log's gradient_accumulation_steps says 4.0, the stored one-node config's 32 / 8); 32 layers at 8,192 "
    "tokens, vocabulary 128,256: the llama3-8b preset; Megatron's distributed optimizer (ZeRO-1) with overlapped "
    "gradient reduce and parameter gather (not with the optimizer step), gradients reduced in bf16 "
    "(grad_reduce_in_fp32=False), FP8 parameters and their gather (fp8_param, fp8_param_gather: not modelled), DDP "
    "buckets of 768,000,000 (not modelled; the dump's data_parallel_sharding_strategy 'optim_grads_params' is inert "
    "with use_megatron_fsdp False); FP8 = Transformer Engine's 'tensorwise' recipe (per-tensor current scaling; fp8 "
    "'hybrid': E4M3 forward, E5M2 backward): the planner's FP8; attention in bf16 (fp8_dot_product_attention False); "
    "no recomputation (recompute_modules ['core_attn'] with no recompute granularity set: inert); full-iteration CUDA "
    "graphs, TE's op fuser, fused QKV-RoPE and TE cross-entropy fusion (not modelled); 23 blocks of 256 steps, the "
    "first 302.0 s, the rest 302.2-302.7 s; 2 Cisco UCS C885A nodes of 8 H200-SXM5-141GB (systems/"
    "2xC885A_M8-8xH200-SXM-141GB.json: NVLink Gen4 900 GB/s + NVSwitch Gen3, 8 x BlueField-3 B3140 DPU at 400 Gb/s per "
    "node): the h200 preset's links")

# Another submitter's run, found by a review once the rest of the set was predicted (module docstring)
MLPERF60_8B_RUN = ("mlcommons/training_results_v6.0 {}/results/{}/llama31_8b/{} (read in the copy "
                   "Richardyu114/training_results_v6.0, commit eabf23a): the training blocks' tokens over their summed "
                   "durations")
MLPERF60_SCITIX_NOTE = (
    "the log's configuration dump (SCITIX/benchmarks/llama31_8b/implementations/scitix.b200x8.n8/"
    "config_B200_8x8x1xtp1pp1cp2_8b.sh, the folder's one config, whose CP 2, MINIBS 1, LR 0.0009, 160 warm-up steps "
    "and evaluation every 384 steps the dump repeats, sources config_common.sh (FP8=True, FP8_RECIPE=tensorwise), "
    "config_common_8b.sh (FP8_HYBRID, USE_TE_OPS, FUSED_QKV_ROPE, BUCKET_SIZE=768000000) and config_common_cg.sh, "
    "which is not in the folder, and no config_common_fp4.sh; the folder holds a README, configs, a Kubernetes MPIJob "
    "and launch scripts, no code; the log records /workspace/llm/pretrain.py, custom_callbacks.py and NeMo's "
    "MegatronStrategy; the systems description: PyTorch NVIDIA Release 25.09, NCCL v2.28.3-1): "
    + _8b_layout(64, 2, 1) +
    "; 32 layers at 8,192 tokens, vocabulary 128,256 (the log: padded vocab_size 128256): the llama3-8b preset; "
    "Megatron's distributed optimizer (ZeRO-1) with overlapped gradient reduce and parameter gather (not with the "
    "optimizer step), gradients reduced in bf16 (the log's DistributedDataParallelConfig: grad_reduce_in_fp32=False), "
    "FP8 parameter gather (fp8_param_gather: not modelled), DDP buckets of 768,000,000 (not modelled); FP8 = "
    "Transformer Engine's 'tensorwise' recipe (per-tensor current scaling; fp8 true, fp8_hybrid true: E4M3 forward, "
    "E5M2 backward; fp4 false): the planner's FP8; attention in bf16 (fp8_dot_product_attention false); no "
    "recomputation (activations_checkpoint_granularity null); no sequence parallelism or TP overlap; full-iteration "
    "CUDA graphs, TE's op fuser, fused QKV-RoPE, TE cross-entropy fusion and the TP-PP-DP rank mapping (not modelled); "
    "15 blocks of 384 steps, the first 72.9 s, the rest 73.5-74.4 s; 8 nodes of 8 B200-SXM-180GB (systems/"
    "scitix.b200x8.n8.json: 18 x 5th Gen NVLink, 'InfiniBand' with no adapter count, so no per-GPU rate): "
    + B200_LINKS)

SEVENTEENTH_SET: list[HeldOutRun] = [
    # ---- dense, H100, TP 2, FP8 (MLPerf Training v6.0, Cisco) -------------------------------------------------------
    *[HeldOutRun(f"MLPerf v6.0 Llama 3.1 8B TP 2, {gpus} H100s, FP8 (Cisco)",
                 MLPERF60_8B.format(system, "result_1.txt (the folder's first; it has no result_0)") +
                 f"; {gpus} GPUs, GBS {gpus // 2}",
                 _llama3("llama3-8b"),
                 dict(dp=gpus // 2, tp=2, micro_batch=1, grad_accum=1, precision="fp8", **TP_OVERLAP, **NEMO),
                 "h100-sxm", "tokens_per_gpu", _tokens_per_gpu(samples * 8192 / seconds, gpus),
                 MLPERF60_CISCO_H100_NOTE.format(config=config, config_more=config_more, gbs=gpus // 2,
                                                 dp=gpus // 2, blocks=blocks, system=system))
      for system, config, config_more, gpus, blocks, samples, seconds in (
          ("Zeus_8xH100_SXM_80GB", "config_DGXH100_8x8x36xtp8pp8cp2.sh",
           " (DGXNNODES=8; its name's tp8pp8cp2 is not its content; the log evaluates every 256 steps where its "
           "VAL_CHECK_INTERVAL says 384: the layout and batch are the stored config's, and the log's GBS 32 agrees "
           "with them without confirming the layout, as CP 2 x DP 32 would give GBS 32 too)", 64,
           "22 blocks of 8,192 samples (256 steps), the first 89.2 s, the rest 89.7-90.0 s", 180_224, 1976.764),
          ("Zeus_16xH100_SXM_80GB", "config_DGXH100_16x8x36xtp8pp8cp2.sh",
           ", which sources the 8-node one and sets DGXNNODES=16, VAL_CHECK_INTERVAL=192 and LR 0.0007", 128,
           "18 blocks of 12,288 samples (192 steps), the first 66.8 s, the rest 67.4-67.6 s", 221_184, 1214.198))],
    # ---- dense, H200, DP 16, FP8 (MLPerf Training v6.0, Cisco) -------------------------------------------------------
    HeldOutRun("MLPerf v6.0 Llama 3.1 8B DP 16, 16 H200s, FP8 (Cisco)",
               MLPERF60_8B.format("2xC885A_M8-8xH200-SXM-141GB", "result_0.txt") + "; 16 GPUs, GBS 32",
               _llama3("llama3-8b"),
               dict(dp=16, micro_batch=1, grad_accum=2, precision="fp8", **NEMO),
               "h200", "tokens_per_gpu", _tokens_per_gpu(188_416 * 8192 / 6954.771, 16), MLPERF60_CISCO_H200_NOTE),
    # ---- dense, B200, CP 2, FP8 (MLPerf Training v6.0, SCITIX; written down after the rest was predicted) ----------
    HeldOutRun("MLPerf v6.0 Llama 3.1 8B CP 2, 64 B200s, FP8 (SCITIX)",
               MLPERF60_8B_RUN.format("SCITIX", "scitix.b200x8.n8", "result_0.txt") + "; 64 GPUs, GBS 32",
               _llama3("llama3-8b"),
               dict(dp=32, micro_batch=1, grad_accum=1, precision="fp8", **NEMO, cp=2),
               "b200", "tokens_per_gpu", _tokens_per_gpu(184_320 * 8192 / 1108.647, 64), MLPERF60_SCITIX_NOTE),
]
# The arithmetic (each block's duration is its block_stop less its block_start, in the log's time_ms; a block's
# samples are the next eval_start's samples_count less its block_start's, or its steps times the GBS), x 8,192 tokens:
#   Cisco 64 H100s     22 x 8,192 = 180,224 sequences = 1,476,395,008 tokens over 1,976.764 s = 746,874.7 tokens/s
#                      = 11,669.92 per GPU
#   Cisco 128 H100s    18 x 12,288 = 221,184 = 1,811,939,328 over 1,214.198 s = 1,492,293.1 = 11,658.54 per GPU
#   Cisco 16 H200s     23 x 256 steps x 32 = 188,416 = 1,543,503,872 over 6,954.771 s = 221,934.5 = 13,870.91 per GPU
#   SCITIX 64 B200s    15 x 384 steps x 32 = 184,320 = 1,509,949,440 over 1,108.647 s = 1,361,974.9 = 21,280.86 per GPU
#                      (blocks of 72.895, 73.530, 73.883, 73.947, 73.856, 74.136, 73.929, 74.380, 73.970, 73.928,
#                      73.988, 74.015, 74.154, 74.033 and 74.003 s)
# (each total equals the log's run_stop samples_count; each Cisco H100 block's logged throughput, samples per second,
# is its samples over its duration to within 0.01; each SCITIX block's logged mean train_step_time times its 384 steps
# is its duration to within 0.002 s)
# NVIDIA_CODE_BY_OTHERS: none of the set's runs. Cisco's H100 folder (Cisco/benchmarks/llama31_8b/nemo) is its own code
# (pretrain.py on NeMo 2's MegatronStrategy, its own Dockerfile). Cisco's H200 run's code, by its log, is NVIDIA's v6.0
# code (NVIDIA's container nvcr.io/nvdlfwea/mlperftv60/llama31_8b-amd:20260428, /workspace/llm/pretrain.py building
# Megatron-Bridge's Llama31ModelProvider8B), but its folder (implementations/nemo) holds configs and run.sub, no code,
# so it is not named (as the fifteenth set's Oracle and Supermicro folders). SCITIX's folder
# (implementations/scitix.b200x8.n8) holds README.md, configs, config_common*.sh, a Kubernetes MPIJob and launch
# scripts, no Python file: not named either (on B200s, which have no kernel rate, the name would change no plan). In the
# copy read (Richardyu114/training_results_v6.0 at eabf23a), NVIDIA's v6.0 llama31_8b folder holds a Dockerfile and
# configs but no pretrain.py, conf/custom.yaml or callbacks to compare with (the copy's files compared by their text).

# ---- the eighteenth set: written down before the planner predicted any of them (module docstring) --------------
# Which runs (the rule fixed before any figure was compared with a prediction): of Megatron-Bridge's model verification
# cards (examples/model_verification_cards/*/card.yaml at 067f987df, 2026-08-22), each card's `pretrain` item (the
# bounded 100-step pretraining run of the card's functional recipe) on a GPU with a preset, for a model the planner
# expresses as the recipe builds it, whose configuration (model, GPUs, parallel sizes, precision) no earlier run has.
# ---- model shape ---------------------------------------------------------------------------------------------------
# Qwen3-8B (Qwen/Qwen3-8B config.json, tests/hf_configs/Qwen3-8B): 36 layers, hidden 4096, 32 heads of 128 (head_dim),
# 8 kv heads, SwiGLU FFN 12,288, RMSNorm on queries and keys, vocabulary 151,936, untied
QWEN3_8B = dict(name="qwen3-8b", layers=36, hidden=4096, heads=32, kv_heads=8, vocab=151936, seq_len=4096, ffn=12288,
                head_size=128, qk_norm=True, **LLAMA)
# ---- source and what it leaves unstated -----------------------------------------------------------------------------
MB_CARD = ("NVIDIA-NeMo/Megatron-Bridge examples/model_verification_cards/{}/card.yaml (commit 067f987df, "
           "2026-08-22), items.pretrain.H100: last_10_steps_tokens_per_second_per_gpu_avg")
MB_CARD_NOTE = (
    "the card's command (scripts/training/train.sh --recipe {recipe} --mode pretrain --seq_length 4096 --max_steps "
    "100 on {nodes} nodes of 8 H100s, the recipe at Megatron-Bridge {commit}): {layout}; the model built from the "
    "Hugging Face config by the recipe's AutoBridge provider, {vocab}; Megatron's distributed optimizer (ZeRO-1) with overlapped gradient reduce and parameter "
    "gather, {grads}; no recomputation; Transformer Engine with attention_backend unset (its fused cuDNN attention "
    "on H100s); no CUDA graphs (cuda_graph_impl 'none'); {more}; not modelled: per-step NaN and large-gradient checks "
    "(ddp.check_for_nan_in_grad, check_for_large_grads, rerun_state_machine.check_for_nan_in_loss), a log line every "
    "step, manual garbage collection every 100 steps (the 100th is among the ten timed), the checkpoints saved at "
    "steps 50 and 100; the card's figure is the mean of the last ten of the 100 steps (its step time and TFLOPS "
    "agree with it: {check}); the card calls its functional figures sanity checks, not tuned performance (a "
    "recipe not tuned for speed is planned as it is set, like any other); 'H100' only: 80 GB SXM parts, the "
    "h100-sxm preset and its links")
GPT_OSS_CARD_VOCAB = (
    "its vocabulary replaced by the tokenizer's: from-scratch pretraining recipes set "
    "TokenizerConfig(use_tokenizer_vocab_size=True) (recipes/common.py's _pretrain_common, since af17edf52, "
    "2026-07-28), and training/setup.py's _validate_and_set_vocab_size then takes the tokenizer's size; the run's "
    "RP2 data is tokenized with Llama's SentencePiece tokenizer (token IDs 0-31,999, as the DeepSeek-V4-Flash card of "
    "the same cards says), so 32,000, already a multiple of the padding divisor times TP")
MOE_MORE = ("the all-to-all token dispatcher (moe_token_dispatcher_type 'alltoall'; the recipe does not apply the flex "
            "backend it names), no expert-parallel overlap, grouped GEMM and permute fusion, routing learned from "
            "scratch, not forced balanced (moe_router_force_load_balancing false: planned balanced, as the rules "
            "say), dropless; every second layer attends to a window of 128 tokens (planned with its window), the "
            "attention sinks not modelled; gpt-oss's clamped GLU planned as SwiGLU; per-token loss "
            "(calculate_per_token_loss) and the native cross-entropy, not modelled; no TP communication overlap "
            "(comm_overlap unset)")

EIGHTEENTH_SET: list[HeldOutRun] = [
    # ---- dense, H100, data-parallel, BF16 (Megatron-Bridge model verification) ------------------------------------
    HeldOutRun("Megatron-Bridge verification Qwen3-8B DP 16, 16 H100s", MB_CARD.format("qwen3-8b") +
               "; 16 GPUs, GBS 1,024", QWEN3_8B,
               dict(dp=16, micro_batch=1, grad_accum=64, **NEMO),
               "h100-sxm", "tokens_per_gpu", 10456.348,
               MB_CARD_NOTE.format(
                   recipe="qwen3_8b_pretrain_16gpu_h100_bf16_config", nodes=2, commit="619cc20 (the item's)",
                   layout="TP 1, PP 1, CP 1, DP 16, micro-batch 1, GBS 1,024 (gradient accumulation 64), sequence "
                          "4,096, BF16 (bf16_mixed)",
                   grads="gradients reduced in bf16 (grad_reduce_in_fp32 False), the precision-aware optimizer "
                         "with fp32 main parameters, gradients and moments",
                   vocab=("its vocabulary of 151,936 kept (training/setup.py's _validate_and_set_vocab_size at that "
                          "commit keeps a model vocabulary at least the tokenizer's; the run's RP2 data is tokenized "
                          "with Llama's SentencePiece tokenizer of 32,000)"),
                   more="TE's fused cross-entropy",
                   check="1,024 x 4,096 tokens / 25.07032 s / 16 = 10,456.3")),
    # ---- mixture of experts, fine-grained, H100, BF16 (Megatron-Bridge model verification) --------------------------
    *[HeldOutRun(f"Megatron-Bridge verification {size} TP 2 x PP 4 x EP {ep}, {gpus} H100s",
                 MB_CARD.format(size) + f"; {gpus} GPUs, GBS 512", {**model, "vocab": 32000},
                 dict(dp=gpus // 8, tp=2, pp=4, ep=ep, expert_tp=1, micro_batch=1, grad_accum=512 // (gpus // 8),
                      sequence_parallel=True, fp32_grads=True, **NEMO),
                 "h100-sxm", "tokens_per_gpu", published,
                 MB_CARD_NOTE.format(
                     recipe=recipe, nodes=gpus // 8, commit=f"{commit} (the card's; the item names none)",
                     layout=f"TP 2 with sequence parallelism, PP 4 ({stage}), 1F1B without virtual stages, EP {ep} "
                            f"with expert TP 1 over the TP 2 x DP {gpus // 8} ranks, CP 1, micro-batch 1, GBS 512 (DP "
                            f"{gpus // 8}, gradient accumulation {512 // (gpus // 8)}), sequence 4,096, BF16",
                     grads="gradients reduced in fp32 (grad_reduce_in_fp32 True)", vocab=GPT_OSS_CARD_VOCAB,
                     more=MOE_MORE, check=f"512 x 4,096 / {seconds} s / {gpus} = {published:,.1f}"))
      for size, model, gpus, ep, recipe, commit, stage, published, seconds in (
          ("gpt-oss-20b", GPT_OSS_20B, 16, 4, "gpt_oss_20b_pretrain_16gpu_h100_bf16_config", "6799f09",
           "6 layers a stage: the embedding and the loss not counted as layers", 5851.199, "22.40088"),
          ("gpt-oss-120b", GPT_OSS_120B, 64, 16,
           "gpt_oss_120b_pretrain_config (gpt_oss_120b_pretrain_64gpu_h100_bf16_config)", "a8038f6",
           "9 layers a stage", 1966.285, "16.66493"))],
]
# Left out: each card's pretrain_performance and pretrain_weak_scaling items (the tuned performance recipes,
# perf_recipes/*, whose figures Megatron-Bridge's performance summary publishes: the development runs' document series);
# sft and sft_long_context (packed fine-tuning sequences, not modelled), peft (LoRA) and checkpoint_resume (the pretrain
# item's configuration again, resumed); Qwen3-30B-A3B's pretrain items (EP 16 on 16 H100s in BF16: the sixth set's
# configuration; EP 8 on 8 GB200s in MXFP8: the ninth set's); Moonlight-16B-A3B (neither the card nor its recipe states
# its shape, which the recipe builds from the Hugging Face config, and the repository's model page contradicts the card
# on its vocabulary); Qwen3.6-35B-A3B and Qwen3.8-27B (Qwen3_5*ForConditionalGeneration), GLM-5 and GLM-5.2
# (GlmMoeDsaForCausalLM: sparse attention), DeepSeek-V4-Flash (its hybrid attention, DSv4HybridAttention) and the
# Nemotron 3 and 3.5 models, Nemotron 3.5 Lightning's pretrain_fsdp item too (Mamba layers): architectures the planner
# does not express; Gemma 3 4B (its pretrain item unsupported, no figure), Gemma 4 26B-A4B, DeepSeek-V3,
# Qwen3-235B-A22B, Kimi K3, MiniMax M3, Step-3.5-Flash and K-EXAONE 2 (no pretrain item with a figure).

# ---- the nineteenth set: written down before the planner predicted any of them (module docstring) --------------
# Which runs (the rule fixed before any figure was compared with a prediction): of the "Long Context" table that
# yanring/Megatron-MoE-ModelZoo added to its Qwen3 best-practice readme at b0b92ff (2025-11-04;
# best_practice/Qwen3/readme.md; the table unchanged since, at best_practice/qwen3/readme.md), every row, each by its
# forced-balance figure: the planner assumes balanced routing, and the dropless figure beside it depends on how
# unevenly the router sent tokens in the timed steps, which the table does not state. The readme is the one whose 4K
# table the fourth set read (development runs since the per-node dispatch was modelled with their errors seen); this
# table was measured five months later, at 16K to 128K tokens with TP 4 and CP 1 to 8 (its 16K row on the fourth
# set's TP 4 x EP 8 x PP 8 layout, with another sequence, batch and recomputation), and its errors were not seen: as
# the later sets that read MLPerf v6.0's copy after some of its runs had moved to development. The fourth set left
# this table out for two reasons, each settled since by a rule: it gives TFLOP/s only (turned into tokens per second
# with the logging code's own count, as the thirteenth set's), and its "moe" recomputation re-runs the expert GEMMs
# (planned by the rule for partial recomputation, MODELZOO_LONG_NOTE).
# What the figure counts: Megatron's num_floating_point_operations (transformer_flops, the GQA path) at d4194b7448
# (main, 2025-11-03, the last commit before the table; the scores' causal half counted since 8873b55d6a, 2025-03-06),
# the same for this model at the commits the runs can have used (the launch passes --moe-flex-dispatcher-backend,
# which main has only from 3df200905e, 2025-11-18, and the dev branch from d9153a50ce, 2025-10-21: the count is the
# same at both and at dev's ee14b5b8c8, whose rewritten GQA formula gives the same values), per token at sequence s:
# the thirteenth set's count for Qwen3-235B-A22B with its scores term at s instead of 4,096
# (routed 85,161,148,416 + projections 40,214,986,752 + logits 3,733,979,136 + scores s x 6 x 8,192 x 94; the
# vocabulary 151,936 at TP 4 too: 1,187 x 4 x 32)
MEGATRON_QWEN3_235B_A22B_FLOPS_PER_TOKEN_AT = {s: megatron_qwen3_235b_a22b_flops_per_token(s)
                                               for s in (16384, 32768, 65536, 131072)}
# 204,808,912,896 / 280,507,711,488 / 431,905,308,672 / 734,700,503,040
# The rule for a partial recomputation, applied to the MoE layer's (MODELZOO_LONG_NOTE): the setting nearest in the
# matmuls it recomputes, each setting's recomputed matmuls counted as multiply-adds per token in a layer's forward.
# The "moe" module recomputes the experts' and the router's (8 x 3 x 4,096 x 1,536 + 4,096 x 128); "none" recomputes
# none; "full" the whole layer's: those, the attention projections (4,096 x (8,192 + 2 x 512) + 8,192 x 4,096) and the
# scores (their causal half, s x 8,192, which the attention kernel computes again in a full recomputation).
def moe_recompute_distances(seq: int) -> tuple[int, int]:
    """(to "none", to "full"): how many multiply-adds per token and layer the MoE layer's recomputation differs by
    from each setting's at sequence `seq`."""
    experts, projections, scores = qwen3_235b_a22b_layer_macs(seq)
    return experts + 4096 * 128, projections + scores          # the router (4,096 x 128) beside the experts


MODELZOO_LONG = ("yanring/Megatron-MoE-ModelZoo best_practice/Qwen3/readme.md (commit b0b92ff, 2025-11-04; unchanged "
                 "since at best_practice/qwen3/readme.md), 'Long Context' (H100, NVLink 4, InfiniBand 8 x 50 GB/s; "
                 "Qwen3-235B-A22B, DeepEP, bf16), the {seq:,}-token row: {tflops} TFLOPS (forced balance), as "
                 "tokens/s/GPU; 256 GPUs, GBS 256")
MODELZOO_LONG_NOTE = (
    "the table gives the sequence, 32 nodes, TP, CP, GBS and the TFLOP/s; its command line (NNODES=32 "
    "OPTIMIZER_OFFLOAD=0 A2A_OVERLAP=0 MODEL=Qwen3-235B-A22B PP=8 VPP=4 TP=4 EP=8 CP={cp} GBS=256 SEQ_LEN={seq} PR=bf16 "
    "bash sbatch_benchmarking.sh --recompute-granularity selective --recompute-modules layernorm moe) and "
    "sbatch_benchmarking.sh, runtime_configs/benchmarking/*.conf and model_configs/benchmarking/Qwen3-235B-A22B.yaml at "
    "b0b92ff the rest: TP 4 with sequence parallelism, CP {cp} (Transformer Engine's ring attention, cp_comm_type "
    "p2p by default), PP 8 x VPP 4 (--num-virtual-stages-per-pipeline-rank 4; 94 layers with "
    "--account-for-embedding/loss-in-pipeline-split: 32 virtual stages of 3, the first and the last holding 2 "
    "layers beside the embedding or the loss: first/last_stage_layers 2, as the fourth set's), EP 8 with expert TP "
    "1 (EDP 4), micro-batch 1 (runtime.conf), GBS 256 (DP {dp}, gradient accumulation {ga}); distributed optimizer "
    "(ZeRO-1) with --overlap-grad-reduce and --overlap-param-gather, --bf16 without --grad-reduce-in-bf16 "
    "(fp32_grads); Transformer Engine's attention (held_out_runs.TE); --moe-router-force-load-balancing for this "
    "figure (balanced routing, as planned), dropless, grouped GEMM, DeepEP (the flex dispatcher: moe_dispatch "
    "per-node), permute and router fusion, an fp32 router and TE's fused cross-entropy (not modelled); no EP overlap "
    "(A2A_OVERLAP=0), no TP communication overlap, no CUDA graphs; recomputation of the norms (no matmul) and of the "
    "MoE layer (its router and experts, and with them DeepEP's dispatch and combine), which the planner does not "
    "express: planned by the rule as the setting nearest in the matmuls it recomputes, counted in multiply-adds per "
    "token and layer (moe_recompute_distances): it recomputes {to_none:,} more than none and {to_full:,} fewer than "
    "the whole layer (whose recomputation runs the attention scores again), so none, the first time the scores decide "
    "(without them the whole layer would be nearer); the dispatch and combine run again (not modelled); "
    "--log-params-norm and --log-num-zeros-in-grad on every step, manual GC every 5 steps, a checkpoint loaded "
    "(--finetune), pipeline send/receive overlapped (Megatron's overlap_p2p_comm default) (not modelled); the "
    "network the table's (8 x 400 Gb/s per node): the h100-sxm preset; container: dockers/Dockerfile at b0b92ff "
    "(nvcr.io/nvidia/pytorch:25.06-py3, cuDNN 9.11, DeepEP a84a248), but Transformer Engine later than its 07afda98: "
    "the readme's selective recomputation needs Transformer Engine PR #2125 (93a67af81, 2025-09-16), which that "
    "commit lacks. The figure is Megatron's TFLOP/s, turned into tokens per second per GPU with its own count at this "
    "length (MEGATRON_QWEN3_235B_A22B_FLOPS_PER_TOKEN_AT[{seq}] = {flops:,}). Not stated: the Megatron-LM commit "
    "measured (the table names none; the launch's --moe-flex-dispatcher-backend needs dev from d9153a50ce or main from "
    "3df200905e, where the count is the same) and the steps the figure is over")

NINETEENTH_SET: list[HeldOutRun] = [
    # ---- mixture of experts, fine-grained, long sequences: Qwen3-235B-A22B at 16K-128K tokens on 256 H100s ----------
    HeldOutRun(f"Megatron-MoE-ModelZoo Qwen3-235B-A22B TP 4 x {f'CP {cp} x ' if cp > 1 else ''}EP 8 x PP 8, 256 H100s, "
               f"{seq:,} tokens",
               MODELZOO_LONG.format(seq=seq, tflops=tflops), {**QWEN3_235B_A22B, "seq_len": seq},
               dict(dp=8 // cp, tp=4, pp=8, cp=cp, ep=8, expert_tp=1, grad_accum=32 * cp, **MODELZOO_H100),
               "h100-sxm", "tokens_per_gpu", tflops * 1e12 / MEGATRON_QWEN3_235B_A22B_FLOPS_PER_TOKEN_AT[seq],
               MODELZOO_LONG_NOTE.format(cp=cp, seq=seq, dp=8 // cp, ga=32 * cp,
                                         to_none=moe_recompute_distances(seq)[0],
                                         to_full=moe_recompute_distances(seq)[1],
                                         flops=MEGATRON_QWEN3_235B_A22B_FLOPS_PER_TOKEN_AT[seq]))
    for seq, cp, tflops in ((16384, 1, 295), (32768, 2, 335), (65536, 4, 368), (131072, 8, 389))]
# Left out: the table's dropless figures (above). Not part of this set: the readme's GB200 and GB300 tables (020b813,
# 2026-03-10) and the GB200 128K row added at 798dfb5 (2026-05-13).

RUNS: list[HeldOutRun] = (FIRST_SET + SECOND_SET + THIRD_SET + FOURTH_SET + FIFTH_SET + SIXTH_SET + SEVENTH_SET
                          + EIGHTH_SET + NINTH_SET + TENTH_SET + ELEVENTH_SET + TWELFTH_SET + THIRTEENTH_SET
                          + FOURTEENTH_SET + FIFTEENTH_SET + SIXTEENTH_SET + SEVENTEENTH_SET
                          + EIGHTEENTH_SET + NINETEENTH_SET)

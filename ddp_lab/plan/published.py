"""Published training runs with stated configurations: the planner's calibration set (lesson 13, docs/planner.md).

Each run names its source and table, the model shape, the cluster, the strategy as the source
states it (and what it does not state, which we had to assume), and the throughput it
published. `predict(run)` gives the planner's figure in the same unit; `error(run)` the relative
difference. Two runs are calibration runs (`CALIBRATION`, one per GPU generation: they set
`generation_constants.GEMM_EFFICIENCY`); every other run is a prediction. MosaicML's rows at 4K-64K tokens, which
set `generation_constants.FLASH_ATTENTION_UTILIZATION` and are not scored, are sequence_sweep.py's.

Sources:
    megatron   Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
               Using Megatron-LM", arXiv:2104.04473, Table 1 (Selene, A100 80GB, V = 51,200, s = 2048,
               full recomputation; micro-batch and schedule not stated: 1 and 1F1B assumed)
    bloom      BigScience BLOOM-176B: train/tr11-176B-ml/tr11-176B-ml.slurm (TP 4, PP 12, 48 nodes of
               8 A100 80GB, micro-batch 2, global batch 2048, bf16, ZeRO-1, recomputation; 70 layers
               on 12 stages, the fullest with 6) and the
               training log's "about 150 TFLOPs" (bigscience.notion.site BigScience-176B-Model);
               4 x 100 Gb/s Omni-Path per node
    mt-nlg     Smith et al. 2022, arXiv:2201.11990, Sec. 2.4 (TP 8, PP 35, global batch 1920,
               280/350/420 DGX A100 nodes: 60.1/50.2/44.4 s per iteration = 126/121/113 TFLOP/s); the
               GPUs are A100 80GB (Selene, 8 x 80 GB per DGX: the paper's hardware paragraph and
               Microsoft Research's announcement, Oct. 2021; an earlier version here took 40 GB, on
               which the planner finds the 530B plan does not fit)
    mosaicml   MosaicML llm-foundry, scripts/train/benchmarking/README.md, tables "A100 80GB with
               1600 Gbps node-node interconnect (RoCE)" and "H100 80GB BF16": every row at sequence
               length 2048 with amp_bf16; sequence_sweep.py: their 8-GPU rows at 4096-65536 (MPT shapes of
               scripts/train/yamls/pretrain/mpt-*.yaml; FSDP FULL_SHARD = ZeRO-3 per block, flash
               attention, "DEFAULT" mixed precision reduces gradients in fp32; activation
               checkpointing = full recomputation. The amp_bf16 rows (the H100 table, the A100 rows but
               70B's, the sweep) came with commit b2a43a147 (2023-10-19), whose sweep.sh names the image
               mosaicml/pytorch:2.1.0 for the runs it lists, whose submit script pins llm-foundry v0.3.0
               (torch < 2.1.1) and reads the MPT yamls, which set activation_checkpointing_reentrant:
               false: PyTorch's non-reentrant checkpoint with early stop (checkpoint_early_stop). The two
               70B A100 rows (bf16, PURE) were in the table by 300cc5c58 (2023-05-03, image
               mosaicml/pytorch:1.13.1), before PyTorch 2.1: the whole layer again. Attention: MPT's
               Triton FlashAttention, the submit script's default attn_impl)
    torchtitan pytorch/torchtitan docs/performance.md (2024 version), 64 A100 80GB, FSDP2 per layer,
               the runs whose activation checkpointing is "no" or "full" (selective layer
               checkpointing recomputes every n-th layer, which the planner cannot express; the per-op
               row is a development run in held_out_runs.py); "full" wraps each
               block in ptd_checkpoint_wrapper: PyTorch's non-reentrant checkpoint, early stop
    ibm        Team PyTorch at IBM and Meta 2024, "Maximizing training throughput using PyTorch FSDP"
               (pytorch.org/blog/maximizing-training), Table 1: Llama 2 7B/34B/70B shapes, FSDP, batch 2
               of 4096 tokens per GPU, SDPA flash attention, on 128 A100 80GB (400 Gbps per node) and
               96 H100 80GB (800 Gbps per node); the rows with activation checkpointing "No" or "Yes"
               (13B's "selective" checkpoints every n-th block, n not given); "Yes" is fms-fsdp's
               checkpoint_wrapper with CheckpointImpl.NO_REENTRANT (fms_fsdp/policies/ac_handler.py): early stop
    llama3     Llama Team 2024, "The Llama 3 Herd of Models", arXiv:2407.21783, Table 4: Llama 3 405B,
               TP 8, PP 16, 8192 or 16384 H100s, 16M tokens per batch of 8192-token sequences: 430
               and 400 TFLOP/s per GPU (BF16 MFU 43 % and 41 %: model FLOPs, no recomputation).
               Listed, not scored: the paper uses an interleaved schedule without giving its depth,
               and the prediction moves from -43 % (no interleaving) to -28 % (8 virtual stages of one
               layer each) on 8,192 GPUs, from -52 % to -27 % on 16,384 (16 micro-batches for 16 stages)

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

from ddp_lab.course.plan.cluster_spec import ClusterSpec
from ddp_lab.course.plan.model import Transformer
from ddp_lab.course.plan.steptime import step_flops, step_time
from ddp_lab.course.plan.strategy import Strategy

METRICS = {
    "tflops": "hardware TFLOP/s per GPU, recomputation counted (Megatron-LM's formula)",
    "model_tflops": "model TFLOP/s per GPU, no recomputation (MFU x peak)",
    "tokens_per_gpu": "tokens per second per GPU",
}


@dataclass(frozen=True)
class PublishedRun:
    """One published training run: what it trained, on what, how, and the throughput it reported.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    name: str
    source: str            # a key of the module docstring's source list
    table: str             # where in the source the number is
    model: Transformer
    cluster: ClusterSpec
    strategy: Strategy
    metric: str            # a key of METRICS
    published: float
    assumed: str = ""      # what the source does not state
    scored: bool = True    # False: a key setting is unknown (see `assumed`); listed, not in `summary`


def predict(run: PublishedRun, cluster: ClusterSpec | None = None) -> float:
    """The planner's figure for `run`, in the run's metric (`cluster` overrides the run's, e.g. another efficiency).

    Example:
        >>> run = next(r for r in RUNS if r.name == "Megatron 18.4B")
        >>> round(predict(run))
        135

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    cluster = run.cluster if cluster is None else cluster
    time = step_time(run.model, cluster, run.strategy)
    gpus = run.strategy.gpus
    if run.metric == "tokens_per_gpu":
        return run.strategy.global_batch * run.model.seq_len / time.total / gpus
    hardware = run.metric == "tflops"
    return step_flops(run.model, run.strategy, hardware=hardware) / (time.total * gpus) / 1e12


def error(run: PublishedRun) -> float:
    """Predicted over published throughput, minus 1 (+0.10: the planner predicts 10 % faster)."""
    return predict(run) / run.published - 1


def predictions(runs=None) -> list[PublishedRun]:
    """The runs that test the planner: scored, and not a calibration run (which sets a constant, so it scores 0)."""
    return [r for r in (RUNS if runs is None else runs) if r.scored and r.name not in CALIBRATION.values()]


def summary(runs=None) -> dict:
    """Median and largest absolute error over the predicted (not calibration) runs, and how many runs."""
    runs = predictions(runs)
    errors = [abs(error(r)) for r in runs]
    return {"runs": len(runs), "median": statistics.median(errors), "max": max(errors),
            "sources": len({r.source for r in runs})}


# ---- the runs ------------------------------------------------------------------------------------

def _gpt(name, layers, hidden, heads, vocab=51200, seq_len=2048, dropout=True):
    return Transformer(name, layers, hidden, heads, vocab=vocab, seq_len=seq_len, dropout=dropout)


def _megatron(params, layers, hidden, heads, tp, pp, gpus, batch, published):
    dp = gpus // (tp * pp)
    strategy = Strategy(dp=dp, tp=tp, pp=pp, micro_batch=1, grad_accum=batch // dp, recompute="full",
                        attention="eager")
    return PublishedRun(f"Megatron {params}", "megatron", "Table 1", _gpt(f"gpt-{params}", layers, hidden, heads),
                        ClusterSpec.preset("a100-80gb", nodes=gpus // 8), strategy, "tflops", published,
                        "micro-batch 1, 1F1B")


# MPT shapes (llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml): (layers, d_model, heads); vocabulary 50,368;
# GPT-style blocks with biases and LayerNorm, learned positions (the benchmark tables' NumParams count
# seq_len x d_model of them), tied embeddings, no dropout.
MPT = {"125m": (12, 768, 12), "350m": (24, 1024, 16), "760m": (24, 1536, 12), "1b": (24, 2048, 16),
       "3b": (32, 2560, 20), "7b": (32, 4096, 32), "13b": (40, 5120, 40), "30b": (48, 7168, 56),
       "70b": (80, 8192, 64)}


def mpt(size: str, seq_len: int = 2048) -> Transformer:
    """An MPT model shape from llm-foundry's yamls (see MPT)."""
    layers, hidden, heads = MPT[size]
    return Transformer(f"mpt-{size}", layers, hidden, heads, vocab=50368, seq_len=seq_len, dropout=False)


def _mosaic(gpu, size, gpus, micro_batch, grad_accum, checkpointing, published, mixed="DEFAULT",
            pytorch_2_1=True):
    # pytorch_2_1: the run's non-reentrant checkpoint stopped early (the b2a43a147 rows); the older 70B rows did not
    strategy = Strategy(dp=gpus, zero=3, micro_batch=micro_batch, grad_accum=grad_accum,
                        recompute="full" if checkpointing else "none",
                        checkpoint_early_stop=checkpointing and pytorch_2_1, fp32_grads=mixed == "DEFAULT")
    table = {"a100-80gb": "A100 80GB table", "h100-sxm": "H100 80GB BF16 table"}[gpu]
    return PublishedRun(f"MPT-{size} {gpus}x{gpu.split('-')[0].upper()}", "mosaicml", table, mpt(size),
                        ClusterSpec.preset(gpu, nodes=max(1, gpus // 8)), strategy, "tokens_per_gpu", published,
                        "H100 cluster links: 8 x 400 Gb/s per node" if gpu == "h100-sxm" else "")


def _llama2(name, layers, hidden, heads, ffn):
    return Transformer(name, layers, hidden, heads, vocab=32000, seq_len=4096, ffn=ffn, ffn_kind="swiglu",
                       norm="rmsnorm", bias=False, position="rope", tied_embeddings=False, dropout=False)


def _titan(name, model, micro_batch, recompute, published):
    strategy = Strategy(dp=64, zero=3, micro_batch=micro_batch, recompute=recompute,
                        checkpoint_early_stop=recompute == "full")
    return PublishedRun(name, "torchtitan", "docs/performance.md, 64 A100 80GB", model,
                        ClusterSpec.preset("a100-80gb", nodes=8), strategy, "tokens_per_gpu", published,
                        "inter-node links: 200 Gb/s per GPU (not stated)")


def _ibm(name, model, recompute, gpu, published):
    gpus, per_node = {"a100-80gb": (128, 400e9), "h100-sxm": (96, 800e9)}[gpu]
    cluster = ClusterSpec.preset(gpu, nodes=gpus // 8).with_(inter_node_bandwidth=per_node / 8 / 8)
    strategy = Strategy(dp=gpus, zero=3, micro_batch=2, recompute=recompute, checkpoint_early_stop=recompute == "full")
    return PublishedRun(f"IBM {name} {gpus}x{gpu.split('-')[0].upper()}", "ibm", "Table 1", model, cluster, strategy,
                        "tokens_per_gpu", published, "FSDP over all GPUs (the table does not say HSDP or FSDP)")


def _llama3_405b(gpus, dp, published):
    # 126 layers on 16 stages: Llama 3 removed one layer from the first and the last stage, so every
    # stage runs at most 8 layers; the step time is that of 128 layers on 16 stages, the FLOPs those of 126.
    model = Transformer("llama3-405b-128-layer-stages", 128, 16384, 128, vocab=128256, seq_len=8192, ffn=53248,
                        kv_heads=8, ffn_kind="swiglu", norm="rmsnorm", bias=False, position="rope",
                        tied_embeddings=False, dropout=False)
    strategy = Strategy(dp=dp, tp=8, pp=16, zero=2, micro_batch=1, grad_accum=2048 // dp, sequence_parallel=True,
                        fp32_grads=True)
    return PublishedRun(f"Llama 3 405B {gpus} GPUs", "llama3", f"Table 4: {published} x 128/126", model,
                        ClusterSpec.preset("h100-sxm", nodes=gpus // 8), strategy, "model_tflops",
                        published * 128 / 126,   # the 126-layer model's FLOPs in the 128-layer model's time
                        "micro-batch 1, 1F1B without interleaving (depth not stated), no recomputation, "
                        "ZeRO-2-like FSDP", scored=False)


RUNS: list[PublishedRun] = [
    _megatron("1.7B", 24, 2304, 24, 1, 1, 32, 512, 137),
    _megatron("3.6B", 30, 3072, 32, 2, 1, 64, 512, 138),
    _megatron("7.5B", 36, 4096, 32, 4, 1, 128, 512, 142),
    _megatron("18.4B", 40, 6144, 48, 8, 1, 256, 1024, 135),
    _megatron("39.1B", 48, 8192, 64, 8, 2, 512, 1536, 138),
    _megatron("76.1B", 60, 10240, 80, 8, 4, 1024, 1792, 140),
    _megatron("145.6B", 80, 12288, 96, 8, 8, 1536, 2304, 148),
    _megatron("310.1B", 96, 16384, 128, 8, 16, 1920, 2160, 155),
    _megatron("529.6B", 105, 20480, 128, 8, 35, 2520, 2520, 163),
    _megatron("1T", 128, 25600, 160, 8, 64, 3072, 3072, 163),
    PublishedRun("BLOOM-176B", "bloom", "tr11-176B-ml.slurm; training log",
                 Transformer("bloom-176b", 70, 14336, 112, vocab=250880, seq_len=2048, position="rope", dropout=False),
                 ClusterSpec.preset("a100-80gb", nodes=48).with_(inter_node_bandwidth=4 * 100e9 / 8 / 8),
                 Strategy(dp=8, tp=4, pp=12, zero=1, micro_batch=2, grad_accum=128, recompute="full",
                          attention="eager"), "tflops", 150),
    *[PublishedRun(f"MT-NLG 530B {nodes} nodes", "mt-nlg", "Sec. 2.4",
                   _gpt("mt-nlg-530b", 105, 20480, 128, vocab=50272), ClusterSpec.preset("a100-80gb", nodes=nodes),
                   Strategy(dp=nodes // 35, tp=8, pp=35, micro_batch=1, grad_accum=1920 // (nodes // 35),
                            recompute="full", attention="eager"), "tflops", published, "micro-batch 1, 1F1B")
      for nodes, published in ((280, 126), (350, 121), (420, 113))],
    # MosaicML, A100 80GB, sequence 2048: (size, GPUs, micro-batch, grad accum, checkpointing, tokens/s/GPU)
    *[_mosaic("a100-80gb", *row) for row in (
        ("125m", 8, 40, 2, False, 142830), ("125m", 8, 32, 2, False, 141737), ("350m", 8, 32, 2, False, 58782),
        ("760m", 8, 24, 2, False, 32434), ("1b", 8, 14, 4, False, 20513), ("3b", 8, 10, 2, False, 10811),
        ("7b", 8, 6, 2, False, 4641), ("13b", 8, 2, 3, False, 2262), ("30b", 8, 3, 21, True, 916))],
    *[_mosaic("a100-80gb", "70b", gpus, mb, accum, True, published, mixed="PURE", pytorch_2_1=False)
      for gpus, mb, accum, published in ((64, 8, 4, 410), (32, 2, 16, 373))],
    # MosaicML, H100 80GB BF16, sequence 2048
    *[_mosaic("h100-sxm", *row) for row in (
        ("760m", 32, 24, 1, False, 67971), ("760m", 16, 24, 1, False, 68551), ("760m", 8, 24, 2, False, 63147),
        ("1b", 64, 20, 1, False, 44402), ("1b", 32, 20, 1, False, 45130), ("1b", 16, 20, 1, False, 46037),
        ("1b", 8, 14, 1, False, 45455), ("3b", 64, 6, 3, False, 22525), ("3b", 32, 6, 3, False, 23021),
        ("3b", 16, 10, 3, False, 24142), ("7b", 8, 6, 1, False, 10643), ("13b", 64, 2, 1, False, 4800),
        ("13b", 32, 2, 1, False, 4811), ("13b", 16, 2, 1, False, 4767), ("13b", 8, 2, 1, False, 4792),
        ("30b", 32, 14, 3, True, 2308), ("30b", 16, 10, 3, True, 2263), ("30b", 8, 3, 21, True, 2002),
        ("70b", 64, 8, 4, True, 1039), ("70b", 32, 2, 16, True, 882))],
    _titan("torchtitan Llama 2 13B", _llama2("llama2-13b", 40, 5120, 40, 13824), 2, "none", 2162),
    _titan("torchtitan Llama 2 70B", _llama2("llama2-70b", 80, 8192, 64, 28672).with_(kv_heads=8), 2, "full", 353),
    _titan("torchtitan Llama 3 70B", Transformer.preset("llama3-70b"), 1, "full", 331),
    *[_ibm(name, model, recompute, gpu, published)
      for name, model, recompute, a100, h100 in (
          ("Llama 2 7B", _llama2("llama2-7b", 32, 4096, 32, 11008), "none", 3700, 7500),
          ("Llama 2 34B", _llama2("llama2-34b", 48, 8192, 64, 22016).with_(kv_heads=8), "full", 700, 1550),
          ("Llama 2 70B", _llama2("llama2-70b", 80, 8192, 64, 28672).with_(kv_heads=8), "full", 370, 800))
      for gpu, published in (("a100-80gb", a100), ("h100-sxm", h100))],
    _llama3_405b(8192, 64, 430),
    _llama3_405b(16384, 128, 400),
]

# One calibration run per GPU generation (generation_constants.GEMM_EFFICIENCY); the rest are predictions.
CALIBRATION = {"ampere": "Megatron 18.4B", "hopper": "MPT-7b 8xH100"}


def with_checkpoint_early_stop(run: PublishedRun, early_stop: bool) -> PublishedRun:
    """`run` with its full recomputation charged as PyTorch's non-reentrant checkpoint runs it (True) or as the whole
    layer again (False): Strategy.checkpoint_early_stop, the other assumption to try."""
    return dataclasses.replace(run, strategy=run.strategy.with_(checkpoint_early_stop=early_stop))


def with_flash_share(run: PublishedRun, share: float) -> PublishedRun:
    """`run` on GPUs whose flash attention runs at `share` of peak (GPU.flash_attention_share): another rate to try."""
    gpu = dataclasses.replace(run.cluster.gpu, flash_attention_share=share)
    return dataclasses.replace(run, cluster=run.cluster.with_(gpu=gpu))


def markdown_table(runs=None) -> str:
    """Every run with its configuration, published and predicted throughput and error: docs/planner.md's table.

    `python -m ddp_lab.plan.published` prints it, with the summary line under it.
    """
    runs = RUNS if runs is None else runs
    unit = {"tflops": "TFLOP/s/GPU", "model_tflops": "model TFLOP/s/GPU", "tokens_per_gpu": "tokens/s/GPU"}
    lines = ["| run | source | GPUs | strategy | metric | published | predicted | error |",
             "|---|---|---:|---|---|---:|---:|---:|"]
    for run in runs:
        note = " (calibration)" if run.name in CALIBRATION.values() else ("" if run.scored else " (not scored)")
        lines.append(f"| {run.name} | {run.source}, {run.table} | {run.strategy.gpus} {run.cluster.gpu.name} | "
                     f"{run.strategy.label()} | {unit[run.metric]} | {run.published:,.0f} | {predict(run):,.0f} | "
                     f"{error(run):+.1%}{note} |")
    result = summary(runs)
    lines.append(f"\n{result['runs']} predicted runs from {result['sources']} sources: median absolute error "
                 f"{result['median']:.1%}, largest {result['max']:.1%}.")
    return "\n".join(lines)


if __name__ == "__main__":
    from ddp_lab.plan.sequence_sweep import sweep_table   # lazy: sequence_sweep imports this module

    print(markdown_table())
    print()
    print(sweep_table())

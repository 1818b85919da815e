"""Measure, on the GPU of this machine, the rates the planner assumes for one transformer layer.

    python tools/gpu_kernels.py [--out artifacts/gpu-kernels.json]

The planner (`ddp_lab/course/plan/efficiency.py`, lesson 13) predicts a layer's time from three
assumptions; this measures each on a real GPU, with the shapes of the published runs it predicts
(`ddp_lab/plan/published.py`, the runs on this GPU's preset):
    gemm       bf16 GEMMs of m = 16384 tokens, n = 8192, reduction k from 256 to 8192: does the
               rate fall with small k as k / (k + TILE_K) says (the per-tile cost)? Each timed
               interval holds GEMM_REPEATS back-to-back GEMMs, so one launch's host overhead
               (10-20 us) is not charged to one short kernel.
    attention  PyTorch's flash kernel (`scaled_dot_product_attention`, causal, bf16) forward and
               backward at each run's micro-batch, heads and head size, its FLOPs counted as the
               planner counts them (causal half of 4 b s^2 h, backward 2.5 x forward): the share of
               peak it reaches. The gradients are returned, not accumulated into .grad (a training
               step passes them on to the projections).
    layer      one whole layer as plain PyTorch builds it (the run's norms, biases, FFN kind, flash
               attention; full recomputation with torch.utils.checkpoint where the run used it),
               forward and backward in bf16 at the run's micro-batch, against `layer_seconds`.
Times are CUDA-event medians of 7 repetitions after 3 warm-ups. The JSON keeps the machine (GPU,
torch, CUDA) and the planner's constants at the time with every number; `tests/test_plan_published.py`
reads the committed copy (`ddp_lab/plan/measured/`), and docs/planner.md
says what it showed. The attention rows are the kernel alone: the planner's flash share
(generation_constants.FLASH_ATTENTION_UTILIZATION) is what attention got inside published training steps, lower;
the test compares the two. Nothing here is fitted to a run's throughput.

The committed file of 2026-11-26 was measured before two fixes above: its GEMM intervals held one
kernel each (a launch's overhead is up to ~10 % of the k = 256 kernel), and its attention backward
also added q, k and v's gradients into .grad (three elementwise adds, 3-11 % of the backward;
the test takes them out at the planner's own HBM bandwidth).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from ddp_lab.course.plan.efficiency import (TILE_K, attention_backward_factor, layer_matmul_flops,  # noqa: E402
                                            layer_seconds)
from ddp_lab.course.plan.generation_constants import FLASH_ATTENTION_UTILIZATION  # noqa: E402
from ddp_lab.plan import Strategy, published  # noqa: E402

GEMM_REPEATS = 20


def preset_of(name: str) -> str | None:
    """The planner's GPU preset for a CUDA device name, or None (a PCIe or NVL part, or a GH200, differs from it)."""
    if "H100" in name:
        return "h100-sxm" if ("HBM3" in name or "SXM" in name) else None
    if "H200" in name:
        return "h200" if not ("NVL" in name or "GH200" in name) else None
    if "A100" in name:
        return "a100-80gb" if "80GB" in name else "a100-40gb" if "40GB" in name else None
    return None


def timed(fn, warmups: int = 3, repeats: int = 7) -> float:
    """Median seconds of fn() on the GPU (CUDA events around each call)."""
    for _ in range(warmups):
        fn()
    torch.cuda.synchronize()
    seconds = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        seconds.append(start.elapsed_time(end) / 1000)
    return statistics.median(seconds)


def gemm_sweep(peak: float) -> list[dict]:
    m, n = 16384, 8192
    rows = []
    for k in (256, 512, 768, 1024, 1536, 2048, 3072, 4096, 8192):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        seconds = timed(lambda: [a @ b for _ in range(GEMM_REPEATS)]) / GEMM_REPEATS
        rows.append({"m": m, "n": n, "k": k, "seconds": seconds, "share_of_peak": 2 * m * n * k / seconds / peak})
    return rows


def flash_context():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION])


def attention(model, micro_batch: int, peak: float) -> dict:
    heads, dim, s = model.heads, model.head_dim, model.seq_len
    kv = model.kv_heads_
    q = torch.randn(micro_batch, heads, s, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(micro_batch, kv, s, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(micro_batch, kv, s, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    extra = {"enable_gqa": True} if kv != heads else {}
    grad = torch.randn(micro_batch, heads, s, dim, device="cuda", dtype=torch.bfloat16)
    with flash_context():
        forward = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, **extra))

        def both():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, **extra)
            torch.autograd.grad(out, (q, k, v), grad)
        together = timed(both)
    flash = Strategy(micro_batch=micro_batch)                  # the planner's FLOP count: causal half, backward 2.5 x
    flops_forward = layer_matmul_flops(model, flash)[1] / 2
    flops_backward = attention_backward_factor(flash) * flops_forward
    backward = together - forward
    return {"head_dim": dim, "heads": heads, "micro_batch": micro_batch,
            "forward_seconds": forward, "backward_seconds": backward,
            "forward_share": flops_forward / forward / peak, "backward_share": flops_backward / backward / peak,
            "share": (flops_forward + flops_backward) / together / peak}


class Layer(torch.nn.Module):
    """One pre-norm decoder layer of `model`'s shape (attention with flash SDPA, GELU or SwiGLU FFN)."""

    def __init__(self, model):
        super().__init__()
        h, kv, f, bias = model.hidden, model.kv_dim, model.ffn_, model.bias
        norm = (lambda: torch.nn.LayerNorm(h, bias=bias)) if model.norm == "layernorm" else (lambda: torch.nn.RMSNorm(h))
        self.model = model
        self.norm1, self.norm2 = norm(), norm()
        self.qkv = torch.nn.Linear(h, h + 2 * kv, bias=bias)
        self.out = torch.nn.Linear(h, h, bias=bias)
        ups = 2 if model.ffn_kind == "swiglu" else 1
        self.up = torch.nn.Linear(h, ups * f, bias=bias)
        self.down = torch.nn.Linear(f, h, bias=bias)
        if model.position == "rope":
            position = torch.arange(model.seq_len, dtype=torch.float32)
            inverse = 1.0 / (10000 ** (torch.arange(0, model.head_dim, 2, dtype=torch.float32) / model.head_dim))
            angles = torch.outer(position, inverse)
            self.register_buffer("cos", torch.cat([angles.cos(), angles.cos()], -1), persistent=False)
            self.register_buffer("sin", torch.cat([angles.sin(), angles.sin()], -1), persistent=False)

    def _rope(self, x):
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * self.cos.to(x.dtype) + rotated * self.sin.to(x.dtype)

    def forward(self, x):
        m = self.model
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).split([h, m.kv_dim, m.kv_dim], dim=-1)
        q = q.view(b, s, m.heads, m.head_dim).transpose(1, 2)
        k = k.view(b, s, m.kv_heads_, m.head_dim).transpose(1, 2)
        v = v.view(b, s, m.kv_heads_, m.head_dim).transpose(1, 2)
        if m.position == "rope":
            q, k = self._rope(q), self._rope(k)
        extra = {"enable_gqa": True} if m.kv_heads_ != m.heads else {}
        with flash_context():
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, **extra)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, h))
        up = self.up(self.norm2(x))
        if m.ffn_kind == "swiglu":
            gate, value = up.chunk(2, dim=-1)
            up = F.silu(gate) * value
        else:
            up = F.gelu(up)
        return x + self.down(up)


def layer(run, gpu) -> dict:
    model, strategy = run.model, run.strategy
    block = Layer(model).to("cuda", torch.bfloat16)
    x = torch.randn(strategy.micro_batch, model.seq_len, model.hidden, device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    grad = torch.randn_like(x)
    full = strategy.recompute == "full"

    def step():
        block.zero_grad(set_to_none=True)      # a step's first backward writes the gradients, adds nothing
        x.grad = None
        if full:
            y = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
        else:
            y = block(x)
        y.backward(grad)
    seconds = timed(step)
    predicted = layer_seconds(model, strategy, gpu)
    return {"run": run.name, "model": model.name, "micro_batch": strategy.micro_batch, "recompute": strategy.recompute,
            "measured_seconds": seconds, "planner_seconds": predicted.total,
            "planner_over_measured": predicted.total / seconds,
            # the layer's weight-GEMM FLOPs over the whole layer's time, as a share of peak
            "gemm_share_measured": layer_matmul_flops(model, strategy)[0] * (4 if full else 3) / seconds
                                   / gpu.flops("bf16")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "artifacts" / "gpu-kernels.json")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_kernels: no CUDA GPU visible to torch; nothing to measure")
        return 2
    name = torch.cuda.get_device_name(0)
    preset = preset_of(name)
    if preset is None:
        print(f"gpu_kernels: no planner preset for {name} (presets: H100 SXM, H200, A100 40/80 GB)")
        return 2
    runs = [r for r in published.RUNS if r.cluster.gpu.name == published.ClusterSpec.preset(preset).gpu.name
            and r.strategy.tp == 1 and r.strategy.pp == 1]
    gpu = runs[0].cluster.gpu if runs else published.ClusterSpec.preset(preset).gpu
    peak = gpu.flops("bf16")
    result = {"machine": {"gpu": name, "preset": preset, "peak_bf16": peak, "torch": torch.__version__,
                          "cuda": torch.version.cuda, "python": platform.python_version(),
                          "capability": ".".join(map(str, torch.cuda.get_device_capability(0)))},
              "planner": {"tile_k": TILE_K,
                          "gemm_efficiency": gpu.matmul_efficiency,
                          "flash_attention_utilization": FLASH_ATTENTION_UTILIZATION.get(gpu.generation),
                          "attention_backward_factor": attention_backward_factor(runs[0].strategy) if runs else None}}
    result["attention_gradients_accumulated"] = False    # the file of 2026-11-26 did (tests take them out)
    result["gemm"] = gemm_sweep(peak)
    for row in result["gemm"]:
        print(f"gemm k={row['k']:5d}: {row['share_of_peak']:.3f} of peak")
    # one measurement per shape: attention per (model, micro-batch), a layer per (model, micro-batch, recomputation)
    attention_shapes = {(r.model.name, r.strategy.micro_batch): r.model for r in runs}
    attention_shapes.update({(f"mpt-{size}", 32): published.mpt(size) for size in ("125m", "350m")})   # head size 64
    layer_runs = {}
    for run in runs:
        layer_runs.setdefault((run.model.name, run.strategy.micro_batch, run.strategy.recompute), run)
    result["attention"], result["layer"] = [], []
    for (model_name, micro_batch), model in attention_shapes.items():
        row = {**attention(model, micro_batch, peak), "model": model_name}
        result["attention"].append(row)
        print(f"attention {model_name} mb{micro_batch} d{row['head_dim']}: "
              f"fwd {row['forward_share']:.3f} bwd {row['backward_share']:.3f} of peak")
    for run in layer_runs.values():
        try:
            row = layer(run, gpu)
        except torch.cuda.OutOfMemoryError as error:
            row = {"run": run.name, "model": run.model.name, "micro_batch": run.strategy.micro_batch,
                   "recompute": run.strategy.recompute, "error": str(error).splitlines()[0]}
        result["layer"].append(row)
        torch.cuda.empty_cache()
        print(f"layer {run.name}: " + (f"measured {row['measured_seconds'] * 1e3:.2f} ms, planner "
              f"{row['planner_seconds'] * 1e3:.2f} ms" if "error" not in row else row["error"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

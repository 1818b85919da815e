"""The hardware being planned for: a GPU (memory, peak FLOP/s, HBM bandwidth) and a cluster of them (links).

Presets come from public spec sheets (dense tensor-core peaks, no sparsity); bandwidths are per
GPU and per direction, the figure a ring collective's beta term uses (lesson 02). The one
calibrated number per GPU generation is `generation_constants.GEMM_EFFICIENCY` (see that module): the
fraction of peak FLOP/s the transformer's matmuls reach, set once on one named published run.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from ddp_lab.course.plan.generation_constants import efficiency_of, flash_share_of
from ddp_lab.course.plan.overlap import OVERLAP_SLOWDOWN

GiB = 2**30


@dataclass(frozen=True)
class GPU:
    """One accelerator: memory (bytes), dense peak FLOP/s per dtype, HBM bandwidth, and the matmul efficiency.

    Example:
        >>> GPU.preset("a100-80gb").peak_flops["bf16"]
        312000000000000.0

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    name: str
    memory: int
    peak_flops: dict = field(default_factory=dict)   # {"bf16", "fp16", "fp32", "fp8", "mxfp8"}: dense FLOP/s
    matmul_efficiency: float | None = None   # None: the generation's calibrated GEMM_EFFICIENCY
    memory_bandwidth: float | None = None    # HBM bytes/s (spec sheet); None (CPU ranks): no roofline, see efficiency.py
    generation: str = ""                     # "ampere", "hopper", "turing", "blackwell": picks the calibrated efficiency
    # Share of a one-rank step's time spent outside matmuls (norms, dropout, softmax, residuals,
    # the optimizer). Only then does tensor parallelism's repeated elementwise work show in a
    # prediction (steptime). Measured for CPU ranks (1 - matmul_efficiency: the calibration step
    # runs its matmuls at the measured rate and spends the rest outside them, 0.55-0.7 here).
    # 0 for the GPU presets: there efficiency.py counts the elementwise work from the bytes it moves.
    elementwise_share: float = 0.0
    # Flash attention's share of peak at the kernels' plateau (generation_constants.FLASH_ATTENTION_UTILIZATION; long
    # sequences, heads of 128: attention_kernels.shape_factor scales it for others): None takes the generation's;
    # a generation without one (and CPU ranks) runs the attention core at the GEMM rate.
    flash_attention_share: float | None = None

    def __post_init__(self) -> None:
        if self.matmul_efficiency is None:
            object.__setattr__(self, "matmul_efficiency", efficiency_of(self.generation))
        if self.flash_attention_share is None:
            object.__setattr__(self, "flash_attention_share", flash_share_of(self.generation))

    def flops(self, precision: str) -> float:
        """Peak FLOP/s for `precision` ("bf16", "fp16", "fp32", "fp8", "mxfp8"); a ValueError names the ones it has."""
        if precision not in self.peak_flops:
            having = ", ".join(name for name, gpu in GPU_PRESETS.items() if precision in gpu.peak_flops)
            hint = {"fp8": f" (FP8 tensor cores start with Hopper: {having})",
                    "mxfp8": f" (block-scaled FP8 tensor cores start with Blackwell: {having})"}.get(precision, "")
            # MXFP8 on a GPU with FP8 tensor cores: its per-tensor FP8 is the nearest it runs
            instead = next(p for p in (("fp8",) if precision == "mxfp8" else ()) + ("bf16", "fp16", "fp32")
                           if p in self.peak_flops)
            raise ValueError(f"{self.name} has no {precision} peak in its spec ({', '.join(self.peak_flops)}){hint}: "
                             f"train in one of those (precision='{instead}')")
        return self.peak_flops[precision]

    def achieved_flops(self, precision: str) -> float:
        """Peak times matmul_efficiency: what the model's matmuls are predicted to sustain."""
        return self.flops(precision) * self.matmul_efficiency

    @classmethod
    def preset(cls, name: str) -> "GPU":
        """A GPU from GPU_PRESETS by name; KeyError lists the names."""
        try:
            return GPU_PRESETS[name.lower()]
        except KeyError:
            raise KeyError(f"unknown GPU preset {name!r}; choose one of {', '.join(GPU_PRESETS)}") from None


# Memory: the spec sheet's "N GB" taken as N GiB (nvidia-smi shows 81920 MiB for an A100 80GB).
GPU_PRESETS: dict[str, GPU] = {
    # NVIDIA T4 datasheet: 16 GB GDDR6 at 320 GB/s, 65 TFLOPS fp16 tensor, 8.1 TFLOPS fp32; no bf16 (Turing)
    "t4": GPU("T4", 16 * GiB, {"fp16": 65e12, "fp32": 8.1e12}, memory_bandwidth=320e9, generation="turing"),
    # NVIDIA A100 datasheet: 312 TFLOPS bf16/fp16 tensor (dense), 19.5 TFLOPS fp32 (non-TF32);
    # HBM2 1,555 GB/s (40GB SXM), HBM2e 2,039 GB/s (80GB SXM)
    "a100-40gb": GPU("A100 40GB", 40 * GiB, {"bf16": 312e12, "fp16": 312e12, "fp32": 19.5e12},
                     memory_bandwidth=1555e9, generation="ampere"),
    "a100-80gb": GPU("A100 80GB", 80 * GiB, {"bf16": 312e12, "fp16": 312e12, "fp32": 19.5e12},
                     memory_bandwidth=2039e9, generation="ampere"),
    # NVIDIA H100 SXM datasheet: 1,979 TFLOPS bf16 with sparsity = 989.5 dense; 3,958 TFLOPS fp8 with sparsity =
    # 1,979 dense; 67 TFLOPS fp32; HBM3 3.35 TB/s
    "h100-sxm": GPU("H100 SXM", 80 * GiB, {"bf16": 989.5e12, "fp16": 989.5e12, "fp32": 67e12, "fp8": 1979e12},
                    memory_bandwidth=3.35e12, generation="hopper"),
    # The H100s of torchtitan's published tables, on Meta's Grand Teton hosts: 96 GB of HBM2e at 2.4 TB/s, a 500 W
    # power limit (torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md, "Hardware"); docs/performance.md
    # (footnote 1): "the actual peak TFLOPs number is between SXM and NVL, and we don't know its exact value". The
    # peaks are taken midway between the H100 SXM and H100 NVL datasheets (NVL: 1,671 TFLOPS bf16 and 3,341 fp8
    # with sparsity, 60 fp32): a judgement, made with torchtitan's development runs (held_out_runs.py) in view.
    "h100-hbm2e": GPU("H100 HBM2e 500 W", 96 * GiB, {"bf16": 912.5e12, "fp16": 912.5e12, "fp32": 63.5e12,
                                                     "fp8": 1825e12},
                      memory_bandwidth=2.4e12, generation="hopper"),
    # NVIDIA H200 datasheet: same compute as H100 SXM, 141 GB HBM3e at 4.8 TB/s
    "h200": GPU("H200", 141 * GiB, {"bf16": 989.5e12, "fp16": 989.5e12, "fp32": 67e12, "fp8": 1979e12},
                memory_bandwidth=4.8e12, generation="hopper"),
    # NVIDIA DGX B200 datasheet / HGX B200 specifications, per GPU (the system's figures over 8): FP8 72 PFLOPS with
    # sparsity = 4.5 dense per GPU, BF16/FP16 2.25 dense, FP32 600 TFLOPS / 8 = 75; 1,440 GB HBM3e at 64 TB/s = 180 GB
    # at 8 TB/s. Uncalibrated: its GEMM efficiency and flash share are Hopper's (generation_constants.is_calibrated).
    # Blackwell's tensor cores run block-scaled FP8 (MXFP8, precision.py) at the FP8 rate (the datasheets list one FP8
    # figure; Transformer Engine: "native hardware acceleration on Blackwell GPUs").
    "b200": GPU("B200", 180 * GiB, {"bf16": 2.25e15, "fp16": 2.25e15, "fp32": 75e12, "fp8": 4.5e15, "mxfp8": 4.5e15},
                memory_bandwidth=8e12, generation="blackwell"),
    # NVIDIA GB200 NVL72 specifications, per GPU (the rack's figures over 72): FP8 720 PFLOPS with sparsity = 5 dense,
    # BF16/FP16 360 = 2.5 dense, FP32 5,760 TFLOPS = 80; 13.4 TB HBM3e at 576 TB/s = 186 GB at 8 TB/s. Uncalibrated.
    "gb200": GPU("GB200", 186 * GiB, {"bf16": 2.5e15, "fp16": 2.5e15, "fp32": 80e12, "fp8": 5e15, "mxfp8": 5e15},
                 memory_bandwidth=8e12, generation="blackwell"),
    # Blackwell Ultra. NVIDIA HGX B300 specifications, per GPU (the board's figures over 8): FP8 72 PFLOPS with
    # sparsity = 4.5 dense, BF16/FP16 36 = 2.25 dense, FP32 600 TFLOPS = 75: B200's rates (its gains, dense FP4 and
    # twice the softmax exponent rate, are not modelled); HBM3e at 8 TB/s. Memory: 275,040 MiB, as the MLPerf
    # Training v6.0 system descriptions and logs of B300-SXM-270GB nodes give it (the board's "up to 2.3 TB" counts
    # 288 GB stacks). Uncalibrated.
    "b300": GPU("B300", 275_040 * 2**20, {"bf16": 2.25e15, "fp16": 2.25e15, "fp32": 75e12, "fp8": 4.5e15,
                                           "mxfp8": 4.5e15},
                memory_bandwidth=8e12, generation="blackwell"),
    # NVIDIA GB300 NVL72 specifications, per GPU (the rack's figures over 72): FP8 720 PFLOPS with sparsity = 5 dense,
    # BF16/FP16 360 = 2.5 dense, FP32 80 TFLOPS: GB200's rates; 576 TB/s = 8 TB/s. Memory: 284,208 MiB, as NVIDIA's
    # MLPerf Training v6.0 system description gives it (Theia, GB300 NVL72; the rack's "up to" total counts 288 GB
    # stacks). Uncalibrated.
    "gb300": GPU("GB300", 284_208 * 2**20, {"bf16": 2.5e15, "fp16": 2.5e15, "fp32": 80e12, "fp8": 5e15,
                                             "mxfp8": 5e15},
                 memory_bandwidth=8e12, generation="blackwell"),
}

# (GPU, GPUs per node, intra-node B/s per GPU per direction, inter-node B/s per GPU per direction)
_LINKS = {
    # g4dn.12xlarge-like: 4 T4 on PCIe Gen3 x16 (16 GB/s per direction), 50 Gb/s Ethernet per node
    "t4": ("t4", 4, 16e9, 50e9 / 8 / 4),
    # DGX A100: NVLink 3 600 GB/s bidirectional per GPU; 8 x 200 Gb/s HDR InfiniBand (one per GPU)
    "a100-40gb": ("a100-40gb", 8, 300e9, 200e9 / 8),
    "a100-80gb": ("a100-80gb", 8, 300e9, 200e9 / 8),
    # DGX H100 / HGX H200: NVLink 4 900 GB/s bidirectional per GPU; 8 x 400 Gb/s NDR InfiniBand
    "h100-sxm": ("h100-sxm", 8, 450e9, 400e9 / 8),
    "h200": ("h200", 8, 450e9, 400e9 / 8),
    # Grand Teton (Meta's H100 servers of torchtitan's tables): NVLink 4 inside the node, 400 Gb/s per GPU across
    "h100-hbm2e": ("h100-hbm2e", 8, 450e9, 400e9 / 8),
    # DGX B200: NVLink 5 1.8 TB/s bidirectional per GPU; 8 x 400 Gb/s ConnectX-7 (DGX B200 datasheet)
    "b200": ("b200", 8, 900e9, 400e9 / 8),
    # GB200 NVL72: one NVLink 5 domain of 72 GPUs (130 TB/s / 72 = 1.8 TB/s bidirectional each); racks joined by
    # 400 Gb/s per GPU (ConnectX-7, the NVL72 reference design's compute fabric)
    "gb200": ("gb200", 72, 900e9, 400e9 / 8),
    # HGX B300: NVLink 5 as B200; one ConnectX-8 of 800 Gb/s per GPU (the board's 1.6 TB/s of networking)
    "b300": ("b300", 8, 900e9, 800e9 / 8),
    # GB300 NVL72: the NVLink 5 domain of GB200 NVL72; one ConnectX-8 of 800 Gb/s per GPU (72 in the rack)
    "gb300": ("gb300", 72, 900e9, 800e9 / 8),
}


@dataclass(frozen=True)
class ClusterSpec:
    """The hardware of a cluster being planned for: nodes x gpus_per_node GPUs, with per-link bandwidth
    (bytes/s per GPU, one way) and latency (s). A description, not running ranks (those are
    `ddp_lab.Cluster`, lesson 00b).

    `collectives`, when set (by `from_measurements()`), maps "all_reduce", "all_gather",
    "reduce_scatter", "send" to fitted (alpha seconds, beta seconds per byte) at `fitted_ranks`
    ranks; collectives.py then uses those instead of the ring model.

    Example:
        >>> ClusterSpec.preset("h100-sxm", nodes=4).gpus
        32

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    gpu: GPU
    gpus_per_node: int
    nodes: int = 1
    intra_node_bandwidth: float = 300e9
    inter_node_bandwidth: float = 25e9
    intra_node_latency: float = 5e-6     # NCCL's per-step latency over NVLink: a few microseconds
    inter_node_latency: float = 10e-6    # over InfiniBand: about ten
    collectives: dict | None = None
    fitted_ranks: int | None = None
    name: str = ""
    overlap_dp_comm: bool = True   # DP communication runs beside backward compute (NCCL on its own SMs/links)
    cores: int | None = None       # CPU ranks: the cores they share (None: a GPU per rank)
    # how much slower compute runs beside the communication it hides (overlap.py: the published average by
    # default; a cluster whose own profile says otherwise - NCCL on fewer SMs, copy-engine collectives - sets its own)
    overlap_slowdown: float = OVERLAP_SLOWDOWN
    # a cross-region link: the nodes form regions (data centres) of region_nodes consecutive nodes each, joined by a
    # slow link of cross_region_bandwidth bytes/s each way per region (all its GPUs together) and cross_region_latency
    # seconds; a group whose ranks span regions moves at that link's pace (collectives.link). None: one region.
    region_nodes: int | None = None
    cross_region_bandwidth: float = 100e9 / 8        # 100 Gb/s
    cross_region_latency: float = 0.05               # seconds one way (a default: set your link's)

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1 or self.nodes < 1:
            raise ValueError(f"a cluster needs gpus_per_node >= 1 and nodes >= 1, got "
                             f"{self.gpus_per_node} and {self.nodes}")
        if not 0 <= self.overlap_slowdown < 1:
            raise ValueError(f"overlap_slowdown is how much slower compute runs beside the communication it hides: a "
                             f"fraction in [0, 1) such as {OVERLAP_SLOWDOWN}, got {self.overlap_slowdown:g}")
        if self.region_nodes is not None and (self.region_nodes < 1 or self.nodes % self.region_nodes):
            raise ValueError(f"region_nodes={self.region_nodes} must divide the {self.nodes} nodes: regions hold equal "
                             f"numbers of consecutive nodes; use region_nodes in "
                             f"{[d for d in range(1, self.nodes + 1) if self.nodes % d == 0]}")
        if self.cross_region_bandwidth <= 0 or self.cross_region_latency < 0:
            raise ValueError(f"a cross-region link needs bandwidth > 0 and latency >= 0, got "
                             f"{self.cross_region_bandwidth:g} B/s and {self.cross_region_latency:g} s")

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def region_gpus(self) -> int | None:
        """GPUs in one region (None: the cluster is one region)."""
        return None if self.region_nodes is None else self.region_nodes * self.gpus_per_node

    def with_(self, **changes) -> "ClusterSpec":
        """A copy with some fields changed, e.g. `cluster.with_(nodes=16)`."""
        return replace(self, **changes)

    @classmethod
    def preset(cls, name: str, nodes: int = 1, gpus_per_node: int | None = None) -> "ClusterSpec":
        """A cluster of `nodes` nodes of a preset GPU ("t4", "a100-40gb", "a100-80gb", "h100-sxm", "h200").

        `gpus_per_node`, at most the preset's, is how many GPUs of each node (or NVLink domain) the job uses: a
        job of 128 GPUs on GB200 NVL72 racks runs as 2 racks of 64 (held_out.nvlink_segment).

        Example:
            >>> ClusterSpec.preset("a100-80gb", nodes=2).inter_node_bandwidth
            25000000000.0
            >>> ClusterSpec.preset("gb200", nodes=2, gpus_per_node=64).name
            '2 x 64 GB200'

        Introduced in notebooks/13-plan-your-training-run.ipynb.
        """
        key = name.lower()
        if key not in _LINKS:
            raise KeyError(f"unknown cluster preset {name!r}; choose one of {', '.join(_LINKS)}")
        gpu, per_node, intra, inter = _LINKS[key]
        if gpus_per_node is not None:
            whole = isinstance(gpus_per_node, int) and not isinstance(gpus_per_node, bool)
            if not whole or not 1 <= gpus_per_node <= per_node:
                raise ValueError(f"gpus_per_node={gpus_per_node!r}: a {key} node holds {per_node} GPUs, so a job can "
                                 f"use 1 to {per_node} of each (leave gpus_per_node unset for whole nodes)")
            per_node = gpus_per_node
        return cls(GPU.preset(gpu), per_node, nodes, intra, inter, name=f"{nodes} x {per_node} {GPU.preset(gpu).name}")

    @classmethod
    def from_measurements(cls, measured: dict, ranks: int) -> "ClusterSpec":
        """This machine as a one-node cluster of `ranks` CPU ranks, from a measurement dict (pure Python).

        Peak FLOP/s is the matmul rate one rank measured, and the collectives use the alpha/beta
        fitted on gloo at `ranks` ranks, per collective (lesson 02 fitted one pair for all; that
        pair predicts all_reduce 2.5-9x too fast for 4 MB). `ddp_lab.plan.calibrate.measure_this_machine`
        measures the dict (a few seconds, with torch); `calibrate.this_machine()` does both.

        Keys read: "matmul_flops" (FLOP/s of one rank, a float for fp32 or a {dtype: FLOP/s}
        dict), "collectives" ({name: (alpha_s, beta_s_per_byte)} or {name: {"alpha": ...,
        "beta": ...}}, n = bytes of the whole tensor: all_gather's output, reduce_scatter's
        input), optional "memory" (bytes per rank; default this machine's RAM / ranks), "ranks",
        optional "group" (the process-group size the collectives were fitted at; default "ranks"),
        optional "cores" (CPU cores the ranks share),
        optional "matmul_efficiency" (this machine's one calibrated constant: a training step's
        FLOP/s over the matmul rate, measured by `calibrate.measure_this_machine`; default 1.0).
        """
        flops = measured["matmul_flops"]
        peak = dict(flops) if isinstance(flops, dict) else {"fp32": float(flops)}
        memory = measured.get("memory") or _ram_bytes() // ranks
        fitted = {name: _alpha_beta(value) for name, value in (measured.get("collectives") or {}).items()}
        send = fitted.get("send", fitted.get("all_reduce", (0.0, 0.0)))
        bandwidth = 1.0 / send[1] if send[1] > 0 else float("inf")
        efficiency = float(measured.get("matmul_efficiency", 1.0))
        gpu = GPU("CPU rank", int(memory), peak, matmul_efficiency=efficiency,
                  elementwise_share=min(1.0, max(0.0, 1.0 - efficiency)))
        return cls(gpu, gpus_per_node=ranks, nodes=1,
                   intra_node_bandwidth=bandwidth, inter_node_bandwidth=bandwidth,
                   intra_node_latency=send[0], inter_node_latency=send[0], collectives=fitted or None,
                   fitted_ranks=int(measured.get("group") or measured.get("ranks", ranks)), name=f"this machine, {ranks} ranks",
                   # gloo on CPU moves bytes with the same cores that compute: no overlap to count on
                   overlap_dp_comm=False, cores=measured.get("cores"))


def _alpha_beta(value) -> tuple[float, float]:
    if isinstance(value, dict):
        return float(value["alpha"]), float(value["beta"])
    alpha, beta = value
    return float(alpha), float(beta)


def _ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):   # not POSIX: a modest default
        return 8 * GiB


PRESET_NAMES = tuple(_LINKS)

"""How much communication compute hides: ZeRO-3's (FSDP's) two-stream timeline unit by unit, ZeRO 0-2's
gradient buckets and weight gathers, and tensor parallelism's chunked collectives.

ZeRO-3 (Rajbhandari et al. 2020, Sec. 5.3) and FSDP (Zhao et al. 2023, arXiv:2304.11277,
Sec. 3.3-3.4; lesson 09) keep each unit's weights sharded and, per micro-batch, all-gather a
unit before its forward, all-gather it again before its backward, and reduce-scatter its
gradients after its backward. The collectives run on their own stream beside the compute
stream, so they overlap compute, but only where the schedule allows:
    forward   the gather of unit k+1 runs while unit k computes (prefetch); at most two units
              are gathered at a time (FSDP's rate limiter: unit k+1's gather waits until unit
              k-1's forward has freed its weights), and the first gather (the root: embeddings
              and head) has nothing to hide behind;
    backward  the gather of unit k-1 is issued when unit k's backward starts and the
              reduce-scatter of unit k when it ends, so the scatters overlap the backward of the
              units before them; the last reduce-scatter (the root's) is exposed.
One communication stream serves the gathers and scatters in the order FSDP issues them; the
step of a micro-batch ends when both streams are done. The model's step time is compute plus
what is left over: `exposed = makespan - compute`.

DP and TP traffic that share a link (both inside one node on NVLink, or both across nodes on
the NICs) share its bandwidth: a TP collective sits in the compute stream's critical path and
takes the link while it runs, so the DP stream moves its bytes only in the rest of each layer's
time: its transfers take (1 + tp_seconds / compute_seconds) times longer (`stretch`).

ZeRO 0 and 1 move their gradients once per step, after the last micro-batch's backward of each bucket,
ZeRO 2 after every micro-batch's (`dp_sync.gradient_reductions`) (`bucketed_exposed`): buckets of whole
layers (`dp_sync.gradient_buckets`), each reduced while the layers before it compute their backward;
the last bucket, and what runs longer than the backward left, is exposed. Under 1F1B a later stage
finishes its backward earlier and has the rest of the pipeline's flush to hide in. ZeRO-1/2's
all-gather of the updated weights follows the optimizer: exposed, or, as Megatron-LM's
--overlap-param-gather does, issued at once and waited for bucket by bucket in the next step's
first forward (`prefetched_exposed`). Tensor parallelism's all-gathers and reduce-scatters can run
in chunks beside the GEMMs that consume or produce them (`chunked_exposed`; tp_overlap.py).

Hiding is not free. A collective's kernels run on the GPU's own SMs and memory bandwidth, so the
compute beside them runs slower than alone, as measured on NVIDIA and AMD GPUs (`OVERLAP_SLOWDOWN`).
The step pays that share of every second of communication compute hides (`overlap_slowdown`;
`TimeBreakdown.overlap_slowdown`, part of the step time).

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

# How much slower compute runs while a collective overlaps it, as a share of the overlapped time.
# Published, not fitted: "Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed
# Deep Learning: Performance and Power Implications" (arXiv:2507.03114, 2025), abstract: "overlapping
# computation and communication can result in an average computational slowdown of 18.9%, with a
# maximum of 40.0%" (the abstract of v1: GPT and LLaMA models on 4 GPUs, NVIDIA A100s and H100s and
# AMD MI250s and MI210s, against the same compute with no communication beside it). The average is
# taken, the default of `ClusterSpec.overlap_slowdown`; GPUs only (gloo on CPU ranks does not
# overlap: `ClusterSpec.overlap_dp_comm`).
OVERLAP_SLOWDOWN = 0.189


def overlap_slowdown(hidden_seconds: float, share: float = OVERLAP_SLOWDOWN) -> float:
    """Seconds the step loses because compute ran beside `hidden_seconds` of communication it hid.

    The compute that shared the GPU with those collectives took `share` longer (a cluster's
    `ClusterSpec.overlap_slowdown`, by default OVERLAP_SLOWDOWN); the timeline that decided what
    was hidden is not re-run with the slower compute (which would hide a little more): a
    first-order correction.

    Example:
        >>> round(overlap_slowdown(1.0), 3)    # 1 s of gathers hidden under compute costs 0.189 s
        0.189

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    return share * max(0.0, hidden_seconds)


def fsdp_micro_batch(gather: list[float], scatter: list[float], forward: list[float], backward: list[float],
                     middle: float = 0.0) -> float:
    """Seconds from a micro-batch's first gather to its last reduce-scatter on one GPU (module docstring).

    Index 0 is the root unit (embeddings, final norm, head: gathered first, scattered last),
    1..n the layers in forward order. `forward[i]`/`backward[i]`: the unit's compute on the
    compute stream (TP collectives included); `middle`: the head's forward and backward, run
    between the last layer's forward and its backward with the root's weights still gathered.
    `gather[i]` is one all-gather of unit i (issued twice), `scatter[i]` its reduce-scatter.

    Example:
        >>> # 2 layers of 1 s compute each way, collectives of 0.5 s (root 0.1 s): 4 s of compute, and exposed
        >>> # the root's gather, layer 1's gather (nothing computes before it), layer 1's and the root's scatters
        >>> round(fsdp_micro_batch([0.1, 0.5, 0.5], [0.1, 0.5, 0.5], [0.0, 1.0, 1.0], [0.0, 1.0, 1.0]), 6)
        5.2

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    layers = len(forward) - 1
    comm = gather[0]                     # the root's gather: nothing computes before it
    clock = comm + forward[0]
    forward_end = {0: clock}
    for k in range(1, layers + 1):
        buffer_free = forward_end.get(k - 2, 0.0)          # two units gathered at a time
        comm = max(comm, buffer_free) + gather[k]
        clock = max(clock, comm) + forward[k]
        forward_end[k] = clock
    clock += middle
    gathered = {layers: max(comm, forward_end[layers - 1] if layers > 1 else 0.0) + gather[layers]} if layers else {}
    if layers:
        comm = gathered[layers]
    for k in range(layers, 0, -1):
        start = max(clock, gathered[k])
        if k > 1:                                          # prefetch the next unit's weights
            comm = max(comm, start) + gather[k - 1]
            gathered[k - 1] = comm
        clock = start + backward[k]
        comm = max(comm, clock) + scatter[k]               # this unit's gradients
    clock += backward[0]
    comm = max(comm, clock) + scatter[0]                   # the root's gradients: exposed
    return max(clock, comm)


def stretch(tp_seconds: float, compute_seconds: float, shared_link: bool) -> float:
    """Factor by which DP transfers slow down when TP collectives take the same link part of the time.

    Example:
        >>> stretch(0.2, 1.0, shared_link=True), stretch(0.2, 1.0, shared_link=False)
        (1.2, 1.0)
    """
    if not shared_link or compute_seconds <= 0:
        return 1.0
    return 1.0 + tp_seconds / compute_seconds


def bucketed_exposed(comm: list[float], compute: list[float], window: float = 0.0) -> float:
    """Seconds the gradient buckets' reduction runs past the end of backward (ZeRO 0-2, DDP's buckets).

    Bucket i is issued when its compute piece `compute[i]` ends (backward order); one communication
    stream runs the buckets in order (PyTorch DDP, lesson 05; Megatron-LM's --overlap-grad-reduce,
    as NeMo's Communication Overlap guide describes it, "exposing only one DP communication chunk");
    0.0 where no bucket completes with that piece. `window`: compute the step still waits for after this
    stage's last piece
    (under 1F1B, stage s ends its last backward s micro-batch backwards before stage 0 does).

    Example:
        >>> bucketed_exposed([0.5, 0.5, 0.5], [1.0, 1.0, 1.0])   # the last bucket has nothing left to hide behind
        0.5
        >>> bucketed_exposed([0.5, 0.5, 0.5], [1.0, 1.0, 1.0], window=1.0)
        0.0
    """
    clock = comm_end = 0.0
    for seconds, work in zip(comm, compute):
        clock += work
        comm_end = max(comm_end, clock) + seconds
    return max(0.0, comm_end - clock - window)


def prefetched_exposed(comm: list[float], compute: list[float], window: float = 0.0) -> float:
    """Seconds compute waits for buckets issued together at the step's start, bucket i needed before `compute[i]`.

    ZeRO-1/2's all-gather of the updated weights run beside the next step's first forward
    (Megatron-LM's --overlap-param-gather): the first bucket is always waited for. `window`: seconds
    the stage would wait anyway before its first forward (stage s of a 1F1B pipeline starts s micro-batch
    forwards after stage 0).

    Example:
        >>> prefetched_exposed([0.5, 0.5, 0.5], [1.0, 1.0, 1.0])
        0.5
        >>> prefetched_exposed([0.5, 0.5, 0.5], [1.0, 1.0, 1.0], window=0.5)
        0.0
    """
    comm_end, clock = 0.0, window
    for seconds, work in zip(comm, compute):
        comm_end += seconds
        clock = max(clock, comm_end) + work
    return max(0.0, clock - window - sum(compute))


def chunked_exposed(comm: float, gemm: float, chunks: int) -> float:
    """Seconds of a collective that a GEMM run beside it in `chunks` pieces does not hide.

    Megatron-LM's --tp-comm-overlap (Transformer Engine's userbuffers; NeMo's Communication Overlap
    guide: the all-gather becomes "multiple steps of input P2P ring exchanges", the reduce-scatter
    "multiple steps of GEMM output P2P ring exchanges followed by a reduction") splits the GEMM and
    its collective into chunks, one per tensor-parallel rank: each chunk's transfer runs beside
    another chunk's GEMM. One chunk's transfer has no GEMM beside it (the pipeline's fill or drain),
    and where the transfer outlasts the GEMM the rest shows too.

    Example:
        >>> chunked_exposed(0.8, 1.0, 8), round(chunked_exposed(1.6, 1.0, 8), 3)
        (0.1, 0.725)
    """
    chunks = max(1, chunks)
    return comm / chunks + max(0.0, comm - gemm) * (chunks - 1) / chunks

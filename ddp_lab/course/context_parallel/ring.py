"""Ring attention: each rank keeps its queries; key/value blocks travel around the ring of ranks.

At step t rank r holds the keys and values that started on rank (r - t) mod N. It starts
passing them on to rank r + 1 (dist.isend) and receiving the next block from rank r - 1
(dist.irecv), attends its queries to the block it holds while they travel, and folds the
partial result into its running (output, log-sum-exp) with the online-softmax combine. After
N - 1 passes every query has seen every key (Liu, Zaharia and Abbeel, 2023, "Ring Attention
with Blockwise Transformers for Near-Infinite Context", arXiv:2310.01889).

The backward runs the ring again: key/value blocks travel as in forward, and the gradients of
the keys and values follow them, each rank adding its queries' share, until after N - 1 passes
they reach their owner. What a rank keeps for backward is its own q, k, v, output and
log-sum-exp: nothing grows with the square of the whole sequence's length.

Causal masking works on chunks (see layout.py): a key chunk after the query chunk is skipped,
the same chunk gets the triangle, an earlier chunk needs no mask. Works in one process too
(world size 1, no process group): then it is blockwise attention on one device.

Introduced in notebooks/15-long-sequences.ipynb.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import torch
import torch.distributed as dist

from ddp_lab.course.context_parallel.layout import Layout, contiguous_chunks
from ddp_lab.course.context_parallel.online_softmax import block_attention, block_attention_backward, combine


class ComputedBlock(NamedTuple):
    """One (query chunk, key chunk) block a rank computed: the score entries its mask left, and its CPU seconds.

    CPU seconds of the calling thread (time.thread_time), where torch runs a rank's CPU ops when
    it has one thread: time waiting for a core, when ranks outnumber cores, is not counted.
    """

    query_chunk: int
    key_chunk: int
    causal: bool
    score_entries: int
    seconds: float


def rank_and_world_size() -> tuple[int, int]:
    """(rank, world size) of the default group; (0, 1) without one, so the ring runs in one process."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def start_ring_pass(tensor: torch.Tensor, tag: int = 0) -> tuple[torch.Tensor, list]:
    """Start sending `tensor` to rank + 1 and receiving the same shape from rank - 1; returns (buffer, works).

    Both calls return at once; compute on what you hold, then `.wait()` on every work before
    reading the buffer (and before changing `tensor`). Liu et al. 2023 overlap exactly this.
    Two passes in flight at once (backward: keys/values and their gradients) use different tags.

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    rank, world_size = rank_and_world_size()
    received = torch.empty_like(tensor)
    works = [dist.isend(tensor.contiguous(), dst=(rank + 1) % world_size, tag=tag),   # to the next rank
             dist.irecv(received, src=(rank - 1) % world_size, tag=tag)]              # from the previous one
    return received, works


def ring_step(q_parts: list[torch.Tensor], my_chunks: list[int], k: torch.Tensor, v: torch.Tensor,
              their_chunks: list[int], state: list, scale: float | None = None, log: list | None = None) -> None:
    """Attend my query chunks to one held key/value block and fold the result into `state` (in place).

    One step of Ring Attention (Liu et al., 2023): blockwise attention plus the online-softmax combine.

    Args:
        q_parts: my queries, one tensor per chunk in `my_chunks`.
        k, v: the block held at this step, the chunks `their_chunks` concatenated.
        state: per query chunk, None or its running (out, lse).
        log: a list to append a ComputedBlock to for every block computed (None: no record).

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    for key_chunk, k_part, v_part in zip(their_chunks, k.chunk(len(their_chunks), dim=-2),
                                         v.chunk(len(their_chunks), dim=-2)):
        for i, query_chunk in enumerate(my_chunks):
            if key_chunk > query_chunk:
                continue                                   # keys in the future of every query: skip the block
            diagonal = key_chunk == query_chunk            # the causal triangle lies only on the diagonal
            started = time.thread_time()
            partial = block_attention(q_parts[i], k_part, v_part, causal=diagonal, scale=scale)
            state[i] = partial if state[i] is None else combine(*state[i], *partial)
            if log is not None:
                rows, keys = q_parts[i].shape[-2], k_part.shape[-2]
                entries = rows * (rows + 1) // 2 if diagonal else rows * keys
                log.append(ComputedBlock(query_chunk, key_chunk, diagonal, entries, time.thread_time() - started))


def ring_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: Layout = contiguous_chunks,
                           scale: float | None = None, log: list | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention of this rank's queries to the whole sequence's keys: (out, lse) of my rows.

    Ring Attention's forward (Liu et al., 2023): N steps, N - 1 passes of the key/value block.

    q, k, v: (..., my tokens, d), this rank's chunks under `layout`, concatenated in its order.

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    rank, world_size = rank_and_world_size()
    my_chunks = layout(rank, world_size)
    q_parts = list(q.chunk(len(my_chunks), dim=-2))
    state = [None] * len(my_chunks)
    kv = torch.stack([k, v])                                # one buffer travels: (2, ..., my tokens, d)
    for step in range(world_size):
        if step < world_size - 1:
            incoming, works = start_ring_pass(kv)           # the next block travels while we compute
        source = (rank - step) % world_size                 # whose keys and values we hold now
        ring_step(q_parts, my_chunks, kv[0], kv[1], layout(source, world_size), state, scale, log)
        if step < world_size - 1:
            for work in works:
                work.wait()
            kv = incoming
    return torch.cat([out for out, _ in state], dim=-2), torch.cat([lse for _, lse in state], dim=-1)


def ring_backward_step(rows: list, my_chunks: list[int], kv: torch.Tensor, their_chunks: list[int],
                       grad_q: list[torch.Tensor], grad_kv: torch.Tensor, scale: float | None = None) -> None:
    """One held block's share of the gradients, added in place: into grad_q (mine) and grad_kv (theirs).

    Args:
        rows: per query chunk of mine, (q, out, lse, grad_out) of its rows.
        kv: the held keys and values, (2, ..., their tokens, d); grad_kv: their gradients so far, same shape.

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    pieces = len(their_chunks)
    for j, key_chunk in enumerate(their_chunks):
        k_part, v_part = kv[0].chunk(pieces, dim=-2)[j], kv[1].chunk(pieces, dim=-2)[j]
        for i, query_chunk in enumerate(my_chunks):
            if key_chunk > query_chunk:
                continue                                    # skipped in forward: no gradient either
            q, out, lse, grad_out = rows[i]
            dq, dk, dv = block_attention_backward(q, k_part, v_part, out, lse, grad_out,
                                                  causal=key_chunk == query_chunk, scale=scale)
            grad_q[i] += dq
            grad_kv[0].chunk(pieces, dim=-2)[j].add_(dk)    # chunk() gives views: this adds into grad_kv
            grad_kv[1].chunk(pieces, dim=-2)[j].add_(dv)


def ring_attention_backward(q, k, v, out, lse, grad_out, layout: Layout = contiguous_chunks,
                            scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dL/dq, dL/dk, dL/dv of this rank's chunks: keys and values go around the ring again, their gradients behind.

    Keys and values travel ahead as in forward (N - 1 passes). A block's gradient starts on the
    rank after its owner, collects each rank's share as it travels with the block, and after
    N - 1 passes reaches the owner, which kept its own share meanwhile (Megatron-Core's context
    parallelism sends the same N - 1 gradient blocks).

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    rank, world_size = rank_and_world_size()
    my_chunks = layout(rank, world_size)
    pieces = len(my_chunks)
    rows = list(zip(q.chunk(pieces, dim=-2), out.chunk(pieces, dim=-2), lse.chunk(pieces, dim=-1),
                    grad_out.chunk(pieces, dim=-2)))
    grad_q = [torch.zeros_like(row[0]) for row in rows]
    kv = torch.stack([k, v])
    grad_own, grad_arrived = torch.zeros_like(kv), None
    for step in range(world_size):
        works = []
        if step < world_size - 1:
            kv_next, works = start_ring_pass(kv)            # keys and values travel ahead, as in forward
        # the gradient of the block held now: mine (kept here), a fresh one, or the one that came with it
        grad_held = grad_own if step == 0 else torch.zeros_like(kv) if step == 1 else grad_arrived
        ring_backward_step(rows, my_chunks, kv, layout((rank - step) % world_size, world_size), grad_q, grad_held,
                           scale)
        if step > 0:
            grad_arrived, grad_works = start_ring_pass(grad_held, tag=1)   # on to the next holder
            works += grad_works
        for work in works:
            work.wait()
        if step < world_size - 1:
            kv = kv_next
    if world_size > 1:
        grad_own += grad_arrived                            # my block's gradient from every other rank, home
    return torch.cat(grad_q, dim=-2), grad_own[0], grad_own[1]


class RingAttention(torch.autograd.Function):
    """Causal ring attention with the hand-written ring backward; saves only this rank's q, k, v, out, lse.

    Introduced in notebooks/15-long-sequences.ipynb.
    """

    @staticmethod
    def forward(ctx, q, k, v, layout, scale):
        out, lse = ring_attention_forward(q, k, v, layout, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.layout, ctx.scale = layout, scale
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        return (*ring_attention_backward(q, k, v, out, lse, grad_out, ctx.layout, ctx.scale), None, None)


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: Layout = contiguous_chunks,
                   scale: float | None = None) -> torch.Tensor:
    """Causal attention output of this rank's query chunks, differentiable (RingAttention).

    Example (inside a launched rank, q, k, v: this rank's chunks):
        >>> out = ring_attention(q, k, v, layout=zigzag_chunks)
        >>> out.pow(2).sum().backward()             # grads of q, k, v: this rank's chunks

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    return RingAttention.apply(q, k, v, layout, scale)

"""Context parallelism in the planner: the sequence split over cp ranks, the ring's key/value traffic, causal FLOPs.

Context parallelism (Liu et al. 2023, "Ring Attention", arXiv:2310.01889; Megatron-Core's context
parallelism; Llama 3, arXiv:2407.21783, Sec. 3.3.2) splits every sequence over cp ranks that hold
the same weights (ddp_lab.course.rank_layout places them between tp and dp). A rank keeps the
queries, keys and values of its own s/cp tokens; attention needs the keys and values of every
earlier token, so the key/value blocks travel round the cp ranks in a ring, one block per step,
each send hidden behind the attention on the block that arrived before it.

    activations   every tensor a layer saves belongs to one of the rank's s/cp tokens (the scores
                  too: an (s/cp) x s slice), so activation memory is divided by cp (memory.py).
                  The ring keeps only the rank's own K/V and sends them round again in backward
                  (Megatron-Core). Left out: the two K/V blocks in flight.
    causal mask   with contiguous blocks, rank i attends to i full blocks and half its own: rank
                  cp - 1 does cp - 1/2 blocks of work, rank 0 half of one. Cutting the sequence
                  into 2 cp chunks, rank i holding chunks i and 2 cp - 1 - i (Llama 3's layout,
                  "zig-zag"), every rank computes exactly half a block pair at every ring step
                  (`attention_blocks_per_rank`). The planner assumes this balanced layout, which
                  needs seq_len divisible by 2 cp (torchtitan asks the same).
    ring traffic  per layer and micro-batch: forward, cp - 1 sends of the rank's K/V block (2 b (s/cp)
                  d_kv / t values); backward, cp - 1 sends of K/V and of their gradients; full
                  recomputation repeats the forward's. On the cp group's link (collectives.py).
    hidden?       each send overlaps the attention of one ring step: causal, 1/2 x 4 b (s/cp)^2 h / t
                  FLOPs forward and 2.5 x that backward with flash attention (2 x eager:
                  `efficiency.attention_backward_factor`), at attention's rate
                  (`efficiency.attention_seconds`). Exposed per
                  pass: (cp - 1) x max(0, send - compute); all of it on a cluster whose communication
                  does not overlap compute (overlap_dp_comm=False: gloo on CPU ranks).
    FLOPs         steptime.step_flops keeps Megatron's count, every s^2 score entry (the papers' and
                  every other plan's convention: counting the causal half for cp > 1 only would make
                  cp look faster for the wrong reason); `causal_attention_flops` counts what the mask
                  leaves, the work the ring's steps hide the sends behind.
Llama 3 all-gathers K/V instead of passing them round a ring (Sec. 3.3.2: the same bytes per rank,
exposed, small under grouped-query attention); the ring here hides what it can.

Lesson 15 (notebooks/15-long-sequences.ipynb) introduces ring attention; the planner of
notebooks/13-plan-your-training-run.ipynb uses this module.
"""

from __future__ import annotations

from ddp_lab.course.context_parallel.costs import kv_block_bytes as _kv_block_bytes
from ddp_lab.course.plan import pipeline_stages, sliding_window
from ddp_lab.course.plan.collectives import collective_time
from ddp_lab.course.plan.efficiency import attention_backward_factor, attention_seconds

# Sequences this long or longer are "long": where published runs split them over GPUs (Llama 3's long-context
# stage, torchtitan's and NeMo's CP tables start at 32K), so a search that leaves cp out says what it would give
# (search.faster_with_context_parallel), and the held-out runs' long-sequence family begins here.
LONG_SEQUENCE = 32_768


def splits_sequence(model, cp: int) -> bool:
    """True if cp = 1, or the sequence splits into 2 x cp equal chunks (the balanced causal layout)."""
    return cp == 1 or model.seq_len % (2 * cp) == 0


def check(model, strategy) -> None:
    """Raise ValueError (saying the fix) unless the sequence splits into 2 x cp equal chunks."""
    if not splits_sequence(model, strategy.cp):
        half = model.seq_len // 2
        valid = [d for d in range(1, min(half, 64) + 1) if not half % d] if model.seq_len % 2 == 0 else [1]
        raise ValueError(f"cp={strategy.cp}: the sequence of {model.seq_len} tokens does not split into 2 x cp = "
                         f"{2 * strategy.cp} equal chunks (each context-parallel rank takes two, to balance the "
                         f"causal mask); use cp in {valid[:10]}")


def attention_blocks_per_rank(cp: int, balanced: bool = True) -> list[float]:
    """Causal attention work of each cp rank, in (s/cp) x (s/cp) blocks of the score matrix.

    Contiguous blocks (balanced=False): rank i computes i full blocks and half of its own, i + 1/2.
    Balanced (2 cp chunks, rank i holding i and 2 cp - 1 - i): cp/2 each. Either way the ranks
    share the cp^2/2 blocks of the causal triangle.

    Example:
        >>> attention_blocks_per_rank(4, balanced=False), attention_blocks_per_rank(4)
        ([0.5, 1.5, 2.5, 3.5], [2.0, 2.0, 2.0, 2.0])

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    return [cp / 2] * cp if balanced else [i + 0.5 for i in range(cp)]


def causal_attention_flops(model, strategy) -> float:
    """Forward FLOPs of one layer's attention scores and weighted values, per micro-batch, on one rank, causal.

    QK^T and the weighted sum over V cost 2 s^2 (d_q + d_v) per sequence with every score entry (d_v = d_q but with
    latent attention's narrower values); the causal mask leaves half: b s^2 (d_q + d_v) (2 b s^2 d_q but with latent
    attention), shared by the tp x cp ranks (balanced).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> shape = Transformer("t", 2, 64, 4, vocab=128, seq_len=32)
        >>> causal_attention_flops(shape, Strategy(cp=2)) == 2 * 32**2 * 64 / 2
        True

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    return strategy.micro_batch * model.seq_len ** 2 * (model.q_dim + model.o_dim) / (strategy.cp * strategy.tp)


def kv_block_bytes(model, strategy) -> int:
    """Bytes of one rank's key and value block: 2 x b x (s/cp) x d_kv/tp values.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> llama = Transformer.preset("llama3-405b").with_(seq_len=131072)
        >>> kv_block_bytes(llama, Strategy(tp=8, cp=16))     # 2 x 8192 tokens x 1 kv head of 128 x 2 bytes
        4194304

    Introduced in notebooks/15-long-sequences.ipynb.
    """
    # lesson 15's formula (one home): every key/value head this rank holds counted as one "head" of kv_dim / tp features
    # (latent attention's keys and values differ in width: their mean, so that K and V together are counted whole)
    return _kv_block_bytes(b=strategy.micro_batch, h=1, s=model.seq_len, d=(model.kv_dim + model.v_dim) // (2 * strategy.tp),
                          world_size=strategy.cp, element=2 if strategy.mixed else 4)


def ring_time(model, cluster, strategy) -> tuple[float, float]:
    """(all, exposed) seconds per step of the ring's key/value sends on the most loaded pipeline stage.

    Per layer and micro-batch, forward: cp - 1 sends of `kv_block_bytes`, each beside one ring
    step's causal attention; backward: cp - 1 sends of the block and its gradient beside the
    step's backward attention (2.5 x the forward with flash); full recomputation: a second
    forward. (0.0, 0.0) with cp = 1.
    """
    cp = strategy.cp
    if cp == 1:
        return 0.0, 0.0
    group = strategy.layout.group("cp")
    block = kv_block_bytes(model, strategy)
    step_compute = attention_seconds(causal_attention_flops(model, strategy) / cp, cluster.gpu, strategy, model)
    # a sliding window's flash kernels skip tiles, and the layers' blocks are sent all the same: the full and the
    # windowed layers each hide their sends behind their own attention (sliding_window.tile_shares)
    shares = sliding_window.tile_shares(model) if strategy.attention == "flash" else ((1.0, 1.0),)
    passes = [(1, 1)] * strategy.forward_runs + [(2, attention_backward_factor(strategy))]
    # (blocks sent, compute relative to one forward step) per pass
    every, exposed = 0.0, 0.0
    for blocks, work in passes:
        send = collective_time("send", blocks * block, cluster, group)
        every += (cp - 1) * send
        for tiles, part in shares:
            hidden = work * step_compute * tiles if cluster.overlap_dp_comm else 0.0
            exposed += part * (cp - 1) * max(0.0, send - hidden)
    layers = strategy.grad_accum * max(pipeline_stages.stage_layers(model, strategy))   # the fullest stage's
    return layers * every, layers * exposed

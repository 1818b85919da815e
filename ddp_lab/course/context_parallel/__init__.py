"""Context parallelism: attention over a sequence split across ranks (ring attention, zig-zag, Ulysses).

    online_softmax.py  one block of attention as (output, log-sum-exp), the combine of two partial
                       results, and the block's backward (Milakov & Gimelshein 2018; FlashAttention)
    layout.py          which chunks of the sequence a rank holds: contiguous or zig-zag (Llama 3),
                       and the causal work each rank then does
    ring.py            ring attention: key/value blocks passed around the ring with isend/irecv,
                       forward and a hand-written backward (Liu et al., 2023)
    ulysses.py         all-to-all sequence parallelism: sequence-sharded to head-sharded and back
                       (DeepSpeed-Ulysses, Jacobs et al., 2023)
    costs.py           the formulas the lesson checks: saved bytes and bytes sent per rank

Introduced in notebooks/15-long-sequences.ipynb.
"""

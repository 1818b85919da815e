"""Sliding-window attention: layers whose queries attend only to the last `window` tokens (gpt-oss, Mistral 7B v0.1).

A windowed layer's query at position i attends to the keys from i - window + 1 to i, itself included (Hugging Face's
`sliding_window`; Megatron-Core's window_size (window - 1, 0)). Models mix them with full causal layers: gpt-oss
alternates the two (config.json's layer_types; Megatron-Core's window_attn_skip_freq 2: every second layer full),
Mistral 7B v0.1 windows every layer. `Transformer.window` is the window, `Transformer.windowed_layers` how many
layers use it (None: all of them).

What it costs, by mechanism:
    flash kernels   work in tiles of KEY_BLOCK queries by KEY_BLOCK keys and skip a tile the mask leaves empty
                    (FlashAttention-2's local attention, `window_size=(left, 0)`, Dao 2023, arXiv:2307.08691; cuDNN's
                    fused attention through Transformer Engine; FlexAttention's block masks). A windowed layer's
                    kernel therefore visits the tiles that hold part of the band, `flash_block_share` of those a
                    causal layer visits, whatever the tokens inside them. The planner scales flash attention's
                    forward, backward and recomputation by that share (efficiency.layer_seconds).
    eager attention computes every score and masks it afterwards: a window saves nothing.
    model FLOPs     a full layer's as the papers count them, every score of the s x s matrix, the causal mask's empty
                    half too (2 s^2 (d_q + d_v), Narayanan et al. 2021); a windowed layer's its band's, 2 s x window
                    x (d_q + d_v): `attended_keys` is the mean over the layers, what MFU divides by. Hardware FLOPs
                    of eager attention count every score either way (steptime.step_flops).
    memory          flash attention saves no score matrix either way; eager attention's scores are s x s either way.
The planner charges every pipeline stage the model's mean: with stages of an odd number of layers in an alternating
model, a stage may hold one windowed layer more than its share, which it does not see. Context parallelism: Transformer
Engine runs sliding windows only with its all-gather or all-to-all context parallelism, not the ring; the planner
costs every context-parallel layer as its ring (context_parallel.ring_time: about the all-gather's bytes, each send
beside a step's attention), the full and the windowed layers each behind their own attention (`tile_shares`), so a
windowed layer, with little attention, hides little of its traffic. Whether Transformer Engine's gather hides behind
anything is not modelled.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import functools

KEY_BLOCK = 128   # keys per tile: FlashAttention-2's forward for heads of 64 (128 x 128 tiles,
                  # csrc/flash_attn/src/flash_fwd_launch_template.h) and FlashAttention-3's (192 queries x 128 keys,
                  # hopper/flash_fwd_launch_template.h); the planner takes square tiles of 128


def check(model) -> None:
    """Refuse a window that is not a positive whole number of tokens, or a count of windowed layers outside
    0..layers, or a count without a window (Transformer.__post_init__ calls it)."""
    window, count = model.window, model.windowed_layers
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"window={window!r}: a window is a positive number of tokens (None: full attention)")
    if count is None:
        return
    if window is None:
        raise ValueError(f"windowed_layers={count!r} without a window: set window to the tokens each windowed layer "
                         f"attends to, or leave windowed_layers out")
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= model.layers:
        raise ValueError(f"windowed_layers={count!r}: a count of layers from 0 to layers={model.layers}; without "
                         f"windowed_layers every layer attends to the window")


def windowed(model) -> int:
    """Layers whose window is shorter than the planned sequence (0: none; a window of seq_len or more is full
    attention).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> oss = Transformer("t", 24, 2880, 64, vocab=201088, seq_len=8192, window=128, windowed_layers=12)
        >>> windowed(oss), windowed(oss.with_(seq_len=128)), windowed(oss.with_(windowed_layers=None))
        (12, 0, 24)
    """
    if model.window is None or model.window >= model.seq_len:
        return 0
    return _given_layers(model)


def _given_layers(model) -> int:
    """The layers the model gives its window, however long the sequence (windowed_layers; None: every layer)."""
    return model.layers if model.windowed_layers is None else model.windowed_layers


@functools.lru_cache(maxsize=256)     # a search asks for the same lengths for every plan it tries
def _tiles(seq_len: int, window: int) -> int:
    """Tiles a flash kernel visits for one head of one sequence: for each block of queries, the key blocks from
    the one holding its first query's oldest key to its own (window >= seq_len: every causal tile)."""
    blocks = -(-seq_len // KEY_BLOCK)
    return sum(q - max(0, q * KEY_BLOCK - window + 1) // KEY_BLOCK + 1 for q in range(blocks))


def tile_shares(model) -> tuple[tuple[float, float], ...]:
    """(share of a causal layer's flash tiles a layer visits, share of the layers) for the full and the windowed
    layers: ((1.0, 1.0),) without a window shorter than the sequence.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> oss = Transformer("t", 24, 2880, 64, vocab=201088, seq_len=8192, window=128, windowed_layers=12)
        >>> [(round(tiles, 4), part) for tiles, part in tile_shares(oss)]
        [(1.0, 0.5), (0.0611, 0.5)]
    """
    count = windowed(model)
    if not count:
        return ((1.0, 1.0),)
    ratio = _tiles(model.seq_len, model.window) / _tiles(model.seq_len, model.seq_len)
    return tuple((tiles, part) for tiles, part in ((1.0, (model.layers - count) / model.layers),
                                                   (ratio, count / model.layers)) if part)


def flash_block_share(model) -> float:
    """The share of a causal layer's flash-attention tiles the model's layers visit, on average over its layers
    (1.0: no window shorter than the sequence).

    Example: gpt-oss-20b at 8,192 tokens (64 blocks of 128): a windowed layer visits 127 tiles (2 per query
    block, the first 1) where a causal one visits 2,080; half the layers are windowed.
        >>> from ddp_lab.course.plan.model import Transformer
        >>> oss = Transformer("t", 24, 2880, 64, vocab=201088, seq_len=8192, window=128, windowed_layers=12)
        >>> round(flash_block_share(oss), 4) == round((12 + 12 * 127 / 2080) / 24, 4)
        True
    """
    return sum(tiles * part for tiles, part in tile_shares(model))


def attended_keys(model) -> int | float:
    """Keys per query in the model-FLOP count, on average over the layers: seq_len for a full layer (the papers'
    convention, which counts every score of the s x s matrix, the causal mask's empty half too), the window for a
    windowed one (the band's scores). An integer without a window, so the count stays exact.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> oss = Transformer("t", 24, 2880, 64, vocab=201088, seq_len=8192, window=128, windowed_layers=12)
        >>> attended_keys(oss), attended_keys(oss.with_(window=None, windowed_layers=None))
        (4160.0, 8192)
    """
    count = windowed(model)
    if not count:
        return model.seq_len
    return (model.seq_len * (model.layers - count) + model.window * count) / model.layers


def describe(model) -> str:
    """The window in words for a plan's model line ('' without one).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> describe(Transformer("t", 24, 2880, 64, vocab=201088, seq_len=8192, window=128, windowed_layers=12))
        'a 128-token sliding window in 12 of 24 layers'
    """
    if model.window is None:
        return ""
    count = _given_layers(model)
    if count == 0:
        return f"a {model.window:,}-token sliding window in none of its {model.layers} layers (full attention)"
    text = f"a {model.window:,}-token sliding window in {count} of {model.layers} layers"
    return text if windowed(model) else text + f" (no shorter than the {model.seq_len:,} tokens planned: full)"

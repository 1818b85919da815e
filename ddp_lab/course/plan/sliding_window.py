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
    model FLOPs     counted as the papers count a full layer, every query against the keys it may see with no causal
                    halving (2 s^2 (d_q + d_v) a full layer, Narayanan et al. 2021), so a windowed layer's are 2 s x
                    window x (d_q + d_v): `attended_keys` is the mean over the layers, what MFU divides by.
    memory          flash attention saves no score matrix either way; eager attention's scores are s x s either way.
The planner charges every pipeline stage the model's mean: with stages of an odd number of layers in an alternating
model, a stage may hold one windowed layer more than its share, which it does not see. Context parallelism's ring
sends its key and value blocks as for full attention (context_parallel.ring_time), with less attention to hide them
behind.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

KEY_BLOCK = 128   # keys per tile: FlashAttention-2's forward for heads of 64 (128 x 128 tiles,
                  # csrc/flash_attn/src/flash_fwd_launch_template.h) and FlashAttention-3's (192 queries x 128 keys,
                  # hopper/flash_fwd_launch_template.h); the planner takes square tiles of 128


def check(model) -> None:
    """Refuse a window that is not a positive whole number of tokens, or a count of windowed layers outside
    0..layers, or a count without a window (Transformer.__post_init__ calls it)."""
    window, count = model.window, model.windowed_layers
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"Transformer.window must be a positive number of tokens (or None: full attention), "
                         f"got {window!r}")
    if count is None:
        return
    if window is None:
        raise ValueError(f"Transformer.windowed_layers = {count!r} without a window: give window= too, or leave "
                         f"windowed_layers out")
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= model.layers:
        raise ValueError(f"Transformer.windowed_layers must be a whole number from 0 to layers={model.layers} (or "
                         f"None: every layer), got {count!r}")


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
    return model.layers if model.windowed_layers is None else model.windowed_layers


def _tiles(seq_len: int, window: int) -> int:
    """Tiles a flash kernel visits for one head of one sequence: for each block of queries, the key blocks from
    the one holding its first query's oldest key to its own (window >= seq_len: every causal tile)."""
    blocks = -(-seq_len // KEY_BLOCK)
    return sum(q - max(0, q * KEY_BLOCK - window + 1) // KEY_BLOCK + 1 for q in range(blocks))


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
    count = windowed(model)
    if not count:
        return 1.0
    ratio = _tiles(model.seq_len, model.window) / _tiles(model.seq_len, model.seq_len)
    return (model.layers - count + count * ratio) / model.layers


def attended_keys(model) -> float:
    """Keys per query in the model-FLOP count, on average over the layers: seq_len for a full layer (the papers'
    convention, no causal halving), the window for a windowed one.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> oss = Transformer("t", 24, 2880, 64, vocab=201088, seq_len=8192, window=128, windowed_layers=12)
        >>> attended_keys(oss), attended_keys(oss.with_(window=None, windowed_layers=None))
        (4160.0, 8192.0)
    """
    count = windowed(model)
    return (model.seq_len * (model.layers - count) + model.window * count) / model.layers if count else \
        float(model.seq_len)


def describe(model) -> str:
    """The window in words for a plan's model line ('' without one).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> describe(Transformer("t", 24, 2880, 64, vocab=201088, seq_len=8192, window=128, windowed_layers=12))
        'a 128-token sliding window in 12 of 24 layers'
    """
    if model.window is None:
        return ""
    count = model.layers if model.windowed_layers is None else model.windowed_layers
    text = f"a {model.window:,}-token sliding window in {count} of {model.layers} layers"
    return text if windowed(model) else text + f" (no shorter than the {model.seq_len:,} tokens planned: full)"

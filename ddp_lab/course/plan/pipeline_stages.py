"""How many layers each pipeline stage holds: equal shares, or a first and last stage of their own size.

A pipeline runs at the pace of its slowest stage (lesson 07). The first stage also holds the word
embedding and the most micro-batches in flight (1F1B keeps p of them there), the last one the
output layer and the cross-entropy, so frameworks let those two hold fewer layers:
Megatron-LM's `--decoder-first-pipeline-num-layers` and `--decoder-last-pipeline-num-layers`, and
Llama 3 405B's 126 layers on 16 stages, "one Transformer layer less on the first and the last
stage" (Llama Team 2024, arXiv:2407.21783, Sec. 3.3.2): 7 + 14 x 8 + 7. The middle stages share
the rest equally. `Strategy(first_stage_layers=7, last_stage_layers=7)`; the CLI's
`--first-stage-layers`, `--last-stage-layers`. Interleaved (virtual_stages v > 1), the two fields are the first
and the last *virtual* stage's layers, and the other p v - 2 virtual stages share the rest equally: Megatron-Core's
--account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split count the embedding and the
loss as a layer each, so NVIDIA's MLPerf Training v5.0 Llama 3.1 405B runs put 126 layers on 8 x 8 virtual stages
as 1 + 2 x 62 + 1 (`Strategy(pp=8, virtual_stages=8, first_stage_layers=1, last_stage_layers=1)`): the first and
the last GPU of the pipeline hold 15 layers, the others 16. With two stages (pp 2) there is no middle: the stage
not given holds the rest (Megatron-LM's rule), and two given must add up to the layers. A model's
multi-token-prediction modules (multi_token.py) add their layers to the last stage, after its own: Megatron-Core's
placement (`first_stage_layers`, `last_stage_layers` and the checks count the decoder's layers only).

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import functools


def uneven(strategy) -> bool:
    """True if the strategy gives the first or the last stage its own number of layers."""
    return strategy.first_stage_layers is not None or strategy.last_stage_layers is not None


def check_fields(strategy) -> None:
    """The fields' own rules (Strategy.__post_init__): positive, and only with a pipeline of plain stages."""
    for name in ("first_stage_layers", "last_stage_layers"):
        value = getattr(strategy, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"Strategy.{name} must be None (an equal share) or an integer >= 1, got {value!r}")
    if uneven(strategy) and strategy.pp * strategy.virtual_stages < 2:
        raise ValueError(f"first_stage_layers/last_stage_layers set a first and a last pipeline stage, which needs "
                         f"pp >= 2, got pp={strategy.pp}: use pp >= 2, or drop them")


def check(model, strategy) -> None:
    """Raise ValueError (saying how to fix it) unless the middle stages can share the remaining layers equally, or,
    with two stages and no middle, the two hold all the layers, at least one each."""
    first, last = _ends(model, strategy)
    middle, stages = model.layers - first - last, _chunks(strategy) - 2
    if stages == 0:       # two stages, no middle: the one not given holds the rest
        if middle or first < 1 or last < 1:
            raise ValueError(f"two stages hold {model.layers} layers, and these first and last stage layers would "
                             f"put {first} and {last} on them: give one of them (the other holds the rest) or two "
                             f"that add up to {model.layers}, each at least 1")
        return
    kind = "virtual stages" if strategy.virtual_stages > 1 else "stages"
    stage = "virtual stage" if strategy.virtual_stages > 1 else "stage"
    if middle < stages or middle % stages:
        raise ValueError(f"{model.layers} layers minus the first {stage}'s {first} and the last {stage}'s {last} leave "
                         f"{middle}, which the {stages} middle {kind} cannot share equally: choose first and "
                         f"last stage layers so that {model.layers} - first - last is a positive multiple of {stages}")


def fewer_at_the_ends(layers: int, pp: int) -> tuple[int, int] | None:
    """(first, last) stage layers for `layers` on pp stages when pp does not divide them: the middle stages hold
    ceil(layers / pp) each, the first and the last share the rest (the first the larger half), each at least 1 and
    at most a middle stage's; None where no such split exists (or pp < 2). It gives the published layouts: Llama 3
    405B's 126 layers on 16 stages, 7 + 14 x 8 + 7 (arXiv:2407.21783, Sec. 3.3.2), and NVIDIA's DeepSeek-V3 recipe's
    61 on 16, 8 and 4 (3 + 14 x 4 + 2, 7 + 6 x 8 + 6, 15 + 2 x 16 + 14: dgxc-benchmarking v25.05.04). The search
    tries it for every pp that does not divide the layers.

    Example:
        >>> fewer_at_the_ends(126, 16), fewer_at_the_ends(61, 8), fewer_at_the_ends(61, 2), fewer_at_the_ends(10, 8)
        ((7, 7), (7, 6), (31, 30), None)
    """
    if pp < 2:
        return None
    middle = -(-layers // pp)
    rest = layers - middle * (pp - 2)
    first, last = -(-rest // 2), rest // 2
    return (first, last) if 1 <= last and first <= middle else None


def _chunks(strategy) -> int:
    """The pipeline's model chunks: pp stages, each of virtual_stages chunks when interleaved."""
    return strategy.pp * strategy.virtual_stages


def _ends(model, strategy) -> tuple[int, int]:
    """(first, last) stage's layers: as given, else an equal share; with two stages, the one not given the rest."""
    share = model.layers // _chunks(strategy)
    first, last = strategy.first_stage_layers, strategy.last_stage_layers
    if _chunks(strategy) == 2:
        return (model.layers - last if first is None else first), (model.layers - first if last is None else last)
    return (share if first is None else first), (share if last is None else last)


def stage_layers(model, strategy) -> list[int]:
    """Layers of each of the pp stages, first to last.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> llama = Transformer.preset("llama3-405b")            # 126 layers
        >>> counts = stage_layers(llama, Strategy(pp=16, first_stage_layers=7, last_stage_layers=7))
        >>> counts[:3], counts[-1], sum(counts)
        ([7, 8, 8], 7, 126)
        >>> stage_layers(llama, Strategy(pp=8, virtual_stages=8, schedule="interleaved", first_stage_layers=1,
        ...                              last_stage_layers=1))             # 1 + 2 x 62 + 1 virtual stages' layers
        [15, 16, 16, 16, 16, 16, 16, 15]

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    if not uneven(strategy):
        return [model.layers // strategy.pp] * (strategy.pp - 1) + [model.layers // strategy.pp + model.mtp_layers]
    return [sum(chunk_layers(model, strategy, stage)) for stage in range(strategy.pp)]


def chunk_layers(model, strategy, stage: int) -> list[int]:
    """Layers of each of stage `stage`'s virtual_stages model chunks, in the order the stage holds them: chunk c of
    stage i is the pipeline's virtual stage c p + i (Megatron-LM's numbering), so the first virtual stage is stage
    0's first chunk and the last one stage p - 1's last.

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> uneven = Strategy(pp=8, virtual_stages=8, schedule="interleaved", first_stage_layers=1, last_stage_layers=1)
        >>> chunk_layers(Transformer.preset("llama3-405b"), uneven, 0)
        [1, 2, 2, 2, 2, 2, 2, 2]
    """
    p, v = strategy.pp, strategy.virtual_stages
    if not uneven(strategy):
        layers = [model.layers // (p * v)] * v
    else:
        first, last = _ends(model, strategy)
        layers = [(model.layers - first - last) // max(1, p * v - 2)] * v      # a middle (virtual) stage's layers
        if stage == 0:
            layers[0] = first
        if stage == p - 1:
            layers[-1] = last
    if stage == p - 1:
        layers[-1] += model.mtp_layers       # the multi-token-prediction modules' layers, after the last one
    return layers


def stage_layer_indices(model, strategy, stage: int) -> list[int]:
    """The (0-based) indices of the layers stage `stage` holds: those of its chunks, chunk c being the pipeline's
    virtual stage c p + stage (`chunk_layers`; without interleaving, one chunk of consecutive layers).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> stage_layer_indices(Transformer.preset("llama3-8b"), Strategy(pp=4, virtual_stages=2,
        ...                                                                schedule="interleaved"), 1)
        [4, 5, 6, 7, 20, 21, 22, 23]
    """
    return list(_stage_layer_indices(model, strategy, stage))


@functools.lru_cache(maxsize=4096)
def _stage_layer_indices(model, strategy, stage: int) -> tuple[int, ...]:
    """stage_layer_indices, kept for the plans a search evaluates (each asks for every stage's layers many times)."""
    p, v = strategy.pp, strategy.virtual_stages
    sizes = [chunk_layers(model, strategy, s) for s in range(p)]       # sizes[s][c]: virtual stage c p + s
    order = [sizes[g % p][g // p] for g in range(p * v)]              # virtual stages in model order
    indices = []
    for c in range(v):
        start = sum(order[:c * p + stage])
        indices += range(start, start + sizes[stage][c])
    return tuple(indices)


def stages_to_check(strategy, model=None) -> list[int]:
    """The stages whose memory or traffic can be the largest: the first, the last, with uneven stages the second
    (a full middle stage holding p - 1 micro-batches in flight under 1F1B: Llama 3's most loaded rank), and for a
    mixture-of-experts `model` whose first layers are dense (MoE.dense_layers) the stage holding its first layer
    with experts and the next one (the first stage all of whose layers hold experts, with the most micro-batches in
    flight among those: DeepSeekMoE 16B on 14 stages of 2 layers, stage 1).

    Example:
        >>> from ddp_lab.course.plan.model import Transformer
        >>> from ddp_lab.course.plan.strategy import Strategy
        >>> from ddp_lab.course.plan.experts import MoE
        >>> moe = Transformer.preset("mixtral-8x7b")
        >>> stages_to_check(Strategy(pp=8), moe.with_(moe=MoE(8, 2, 14336, dense_layers=5)))
        [0, 1, 2, 7]
    """
    stages = {0, strategy.pp - 1}
    if uneven(strategy):
        stages.add(1)
    dense = 0 if model is None or model.moe is None else model.moe.dense_layers
    if dense:
        layers = stage_layers(model, strategy)
        holding = next(s for s in range(strategy.pp) if sum(layers[:s + 1]) > dense)
        stages.update(s for s in (holding, holding + 1) if s < strategy.pp)
    return sorted(stages)


def describe(strategy) -> str:
    """'7/7' for a strategy's label: the first and the last stage's layers ('=' where an equal share; with two
    stages 'rest', the layers the other leaves)."""
    unset = "rest" if _chunks(strategy) == 2 else "="
    first = unset if strategy.first_stage_layers is None else str(strategy.first_stage_layers)
    last = unset if strategy.last_stage_layers is None else str(strategy.last_stage_layers)
    return f"{first}/{last}"

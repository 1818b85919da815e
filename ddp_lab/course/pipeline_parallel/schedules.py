"""Pipeline schedules as lists of actions, their ideal timeline, and what they cost.

A stage's schedule is a list of actions `("F", i)` (forward of micro-batch i) and
`("B", i)` (its backward), in the order that stage runs them. GPipe (Huang et al. 2019,
https://arxiv.org/abs/1811.06965) runs every forward, then every backward; 1F1B
(PipeDream-Flush, Narayanan et al. 2021, https://arxiv.org/abs/2104.04473) starts the
backward of the oldest micro-batch as soon as it can, so a stage holds at most
`num_stages - stage` micro-batches of activations instead of all of them.

Introduced in notebooks/07-pipeline-parallelism.ipynb.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

Action = tuple  # ("F" | "B", micro-batch index)


class Span(NamedTuple):
    """One bar on a timeline: `rank` spent [start, end) seconds doing `row` (e.g. 'forward', 'all_reduce').

    What `ideal_timeline` makes of a schedule, and what `ddp_lab.plots.timeline` draws (lessons
    04 and 11 build them from measured times too).

    Introduced in notebooks/04-ddp-from-scratch.ipynb.
    """

    rank: int
    row: str
    start: float
    end: float
    label: str = ""


def gpipe_actions(stage: int, num_stages: int, num_microbatches: int) -> list[Action]:
    """GPipe's order on one stage: F0, F1, ..., F(m-1), then B(m-1), ..., B0.

    (Backward in reverse order, as autograd would; any order of the backwards gives the
    same gradients.)

    Example:
        >>> gpipe_actions(0, 2, 3)
        [('F', 0), ('F', 1), ('F', 2), ('B', 2), ('B', 1), ('B', 0)]

    Introduced in notebooks/07-pipeline-parallelism.ipynb.
    """
    _validate(stage, num_stages, num_microbatches)
    m = num_microbatches
    return [("F", i) for i in range(m)] + [("B", i) for i in reversed(range(m))]


def one_f_one_b_actions(stage: int, num_stages: int, num_microbatches: int) -> list[Action]:
    """1F1B's order on one stage: warm-up forwards, then one forward / one backward, then the rest.

    Stage s runs `num_stages - s - 1` warm-up forwards (fewer if there are fewer
    micro-batches), then alternates F and B, oldest micro-batch's backward first, and ends
    with the remaining backwards. The last stage starts backward right after its first forward.

    Example:
        >>> one_f_one_b_actions(0, 2, 3)
        [('F', 0), ('F', 1), ('B', 0), ('F', 2), ('B', 1), ('B', 2)]

    Introduced in notebooks/07-pipeline-parallelism.ipynb.
    """
    _validate(stage, num_stages, num_microbatches)
    m = num_microbatches
    warmup = min(num_stages - stage - 1, m)
    actions = [("F", i) for i in range(warmup)]
    for i in range(warmup, m):  # steady state: the forward of i, then the backward of the oldest
        actions += [("F", i), ("B", i - warmup)]
    actions += [("B", i) for i in range(m - warmup, m)]  # cool-down
    return actions


def _validate(stage: int, num_stages: int, num_microbatches: int) -> None:
    if num_stages < 1 or not 0 <= stage < num_stages:
        raise ValueError(f"stage must be in 0..num_stages-1, got stage={stage}, num_stages={num_stages}.")
    if num_microbatches < 1:
        raise ValueError(f"num_microbatches must be at least 1, got {num_microbatches}.")


def peak_activations(actions: Iterable[Action]) -> int:
    """The most micro-batches whose activations a stage holds at once (forward done, backward not yet).

    Example:
        >>> peak_activations(gpipe_actions(0, 4, 8)), peak_activations(one_f_one_b_actions(0, 4, 8))
        (8, 4)

    Introduced in notebooks/07-pipeline-parallelism.ipynb.
    """
    live = peak = 0
    for kind, _ in actions:
        live += 1 if kind == "F" else -1
        peak = max(peak, live)
    return peak


def bubble_fraction(num_stages: int, num_microbatches: int) -> float:
    """The ideal idle fraction of a GPipe or 1F1B pipeline: (p - 1) / (m + p - 1).

    Every stage is busy for m forward+backward slots out of m + p - 1 (the p - 1 extra
    slots fill and drain the pipeline), when all stages take equally long.

    Example:
        >>> bubble_fraction(2, 4)
        0.2

    Introduced in notebooks/07-pipeline-parallelism.ipynb.
    """
    return (num_stages - 1) / (num_microbatches + num_stages - 1)


def ideal_timeline(schedules: Sequence[Sequence[Action]], forward: float = 1.0,
                   backward: float = 2.0) -> list[Span]:
    """Run the stages' action lists on an ideal machine: fixed compute times, free communication.

    F(s, i) starts when stage s is free and stage s-1 has finished F(s-1, i); B(s, i) when
    stage s is free, has run F(s, i), and stage s+1 has finished B(s+1, i). Stage s is drawn
    as rank s.

    Args:
        schedules: one action list per stage, stage 0 first.
        forward, backward: the time one micro-batch's forward / backward takes on a stage.

    Returns:
        one `Span(rank, "forward" | "backward", start, end, str(i))` per action.

    Raises:
        ValueError: when the schedules can never finish (an action waits for one that never runs first).

    Example:
        >>> spans = ideal_timeline([gpipe_actions(s, 2, 4) for s in range(2)])
        >>> round(idle_fraction(spans), 6)  # (p - 1) / (m + p - 1) with p = 2, m = 4
        0.2

    Introduced in notebooks/07-pipeline-parallelism.ipynb.
    """
    p = len(schedules)
    done: dict[tuple[str, int, int], float] = {}  # (kind, stage, micro-batch) -> end time
    free = [0.0] * p
    position = [0] * p
    spans = []
    while any(position[s] < len(schedules[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            while position[s] < len(schedules[s]):
                kind, i = schedules[s][position[s]]
                needs = ("F", s - 1, i) if kind == "F" else ("B", s + 1, i)
                if (0 <= needs[1] < p and needs not in done) or (kind == "B" and ("F", s, i) not in done):
                    break  # waits for the neighbour stage (or for its own forward of i)
                start = max(free[s], done.get(needs, 0.0))
                end = start + (forward if kind == "F" else backward)
                done[kind, s, i] = free[s] = end
                spans.append(Span(s, "forward" if kind == "F" else "backward", start, end, str(i)))
                position[s] += 1
                progressed = True
        if not progressed:
            stuck = {s: schedules[s][position[s]] for s in range(p) if position[s] < len(schedules[s])}
            raise ValueError(f"these schedules deadlock: stage -> the action it waits at: {stuck}")
    return spans


def idle_fraction(spans: Iterable[Span]) -> float:
    """The fraction of rank-time nobody computed: 1 - busy / (ranks x makespan).

    The makespan runs from the earliest start on any rank to the latest end on any rank
    (the step is over only when the last rank is done); busy time is the sum of the spans'
    lengths (spans of one rank must not overlap).

    Example:
        >>> idle_fraction([Span(0, "forward", 0.0, 1.0), Span(1, "forward", 1.0, 2.0)])
        0.5

    Introduced in notebooks/07-pipeline-parallelism.ipynb (exercise 2 asks you to write it).
    """
    spans = list(spans)
    if not spans:
        raise ValueError("idle_fraction needs at least one Span(rank, row, start, end).")
    ranks = {span.rank for span in spans}
    makespan = max(span.end for span in spans) - min(span.start for span in spans)
    busy = sum(span.end - span.start for span in spans)
    return 1.0 - busy / (len(ranks) * makespan)

"""The alpha-beta cost model of a collective: latency alpha per step, beta seconds per byte.

A message of n bytes over one link takes alpha + beta n. A ring of W ranks (lesson 02) runs
2 (W - 1) such steps of n/W bytes for an all-reduce (a reduce-scatter, then an all-gather) and
W - 1 for each half, one after the other:
    all_reduce(n)      2 (W - 1) alpha + 2 (W - 1)/W n beta
    all_gather(n)        (W - 1) alpha +   (W - 1)/W n beta   (n: the gathered output)
    reduce_scatter(n)    (W - 1) alpha +   (W - 1)/W n beta   (n: the input before scattering)
    send(n)                      alpha +             n beta
    all_to_all(n)        (W - 1) alpha +   (W - 1)/W n beta   (n: what one rank sends in all, a 1/W
                                                               share of it to itself; pairwise exchange)
With W growing the bandwidth term of an all-reduce tends to 2 n beta while the latency term
grows with W: large messages scale, many small ones do not (Thakur, Rabenseifner and Gropp
2005, "Optimization of collective communication operations in MPICH"; NCCL-tests' bus
bandwidth is the same factor).

Introduced in notebooks/02-collectives.ipynb; lesson 11 fits it to this machine and lesson 13's
planner (ddp_lab/course/plan/collectives.py) costs every collective with it.
"""

from __future__ import annotations

from collections.abc import Sequence

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "send", "all_to_all")


def ring_steps(kind: str, world: int) -> tuple[float, float]:
    """(latency steps, fraction of n through each rank's link) of a ring collective on `world` ranks.

    Example:
        >>> ring_steps("all_reduce", 4)
        (6, 1.5)

    Introduced in notebooks/02-collectives.ipynb.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown collective {kind!r}; choose one of {KINDS}")
    if kind == "send":
        return 1.0, 1.0
    half = (world - 1) / world
    # all_to_all: W - 1 exchanges, each rank sending the 1/W of its buffer meant for one peer
    # (Thakur et al. 2005's pairwise exchange); the same terms as an all-gather of n.
    return (2 * (world - 1), 2 * half) if kind == "all_reduce" else (world - 1, half)


def ring_seconds(kind: str, nbytes: float, world: int, alpha: float, beta: float) -> float:
    """Seconds of one ring collective of `nbytes` (the whole tensor) on `world` ranks (see the module docstring).

    Introduced in notebooks/02-collectives.ipynb.
    """
    if world == 1 and kind != "send":
        return 0.0
    steps, share = ring_steps(kind, world)
    return steps * alpha + share * nbytes * beta


def ring_all_reduce_seconds(nbytes: float, world: int, alpha: float, beta: float) -> float:
    """The alpha-beta model of a ring all-reduce: 2 (W - 1) sends of n / W bytes, one after the other.

    Example:
        >>> round(ring_all_reduce_seconds(1e6, world=2, alpha=1e-4, beta=1e-9), 6)   # 2 alpha + n beta
        0.0012

    Introduced in notebooks/02-collectives.ipynb; a package helper since notebooks/11-performance-and-scaling.ipynb.
    """
    return ring_seconds("all_reduce", nbytes, world, alpha, beta)


def fit_alpha_beta(nbytes: Sequence[float], seconds: Sequence[float], relative: bool = True) -> tuple[float, float]:
    """Least squares for t = alpha + beta * n on relative error (small and large messages count alike).

    The same fit as lesson 02's, with alpha and beta kept >= 0: a negative fitted alpha or beta
    (noise) falls back to the one-term fit. relative=False fits absolute seconds instead, for
    times that are differences of noisy measurements and may come out near 0 (lesson 13's
    `calibrate.this_machine()` fits what each collective adds to a step that way, in
    ddp_lab.plan.calibrate: a step sums seconds, not ratios).

    Example:
        >>> alpha, beta = fit_alpha_beta([4, 4e6], [1e-4 + 4 * 1e-9, 1e-4 + 4e6 * 1e-9])
        >>> round(alpha * 1e6), round(beta * 1e9)
        (100, 1)

    Introduced in notebooks/02-collectives.ipynb; a package helper since notebooks/11-performance-and-scaling.ipynb.
    """
    import numpy as np  # lazy: only the fit needs numpy; the planner's formulas import this module without it

    sizes = np.asarray(nbytes, dtype=float)
    times = np.asarray(seconds, dtype=float)
    weights = 1 / times if relative else np.ones_like(times)
    design = np.stack([np.ones_like(times), sizes]) * weights
    (alpha, beta), *_ = np.linalg.lstsq(design.T, times * weights, rcond=None)
    if alpha < 0:   # bandwidth alone: t = beta * n, weighted least squares
        alpha, beta = 0.0, float(np.sum(sizes * times * weights**2) / np.sum((sizes * weights) ** 2))
    elif beta < 0:  # latency alone: the harmonic mean (relative), the mean (absolute)
        alpha, beta = float(len(times) / np.sum(1 / times) if relative else np.mean(times)), 0.0
    return float(alpha), float(beta)


def bandwidth_text(beta: float) -> str:
    """A fitted beta (seconds per byte) as the bandwidth it means, for printing: '1.71 GB/s'.

    beta = 0 is a real outcome of `fit_alpha_beta`: when larger messages were no slower (a busy
    machine's noise), the fit keeps latency alone, and 1 / beta would divide by zero.

    Example:
        >>> bandwidth_text(0.5e-9), bandwidth_text(0.0)
        ('2.00 GB/s', 'none fitted (larger messages were no slower: a busy machine)')

    Introduced in notebooks/11-performance-and-scaling.ipynb; lesson 13 prints its calibration with it.
    """
    return f"{1 / beta / 1e9:.2f} GB/s" if beta > 0 else "none fitted (larger messages were no slower: a busy machine)"


def bus_bandwidth(nbytes: float, seconds: float, world: int) -> float:
    """NCCL-tests' bus bandwidth of an all-reduce, bytes/s: (n / t) * 2 (W - 1) / W.

    The factor makes the number comparable with a link's bandwidth: it is what each rank's
    link carried in a ring all-reduce, whatever the world size.

    Example:
        >>> bus_bandwidth(1e9, 0.01, world=2) / 1e9   # GB/s
        100.0

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    return nbytes / seconds * 2 * (world - 1) / world

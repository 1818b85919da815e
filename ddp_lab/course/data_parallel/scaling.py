"""What data parallelism can gain on a machine: strong and weak scaling, and the bound min(W, cores).

Strong scaling keeps the global batch and splits it over more ranks; weak scaling keeps the
batch per rank. On W ranks with one torch thread each, a machine with P usable cores runs at
most min(W, P) of them at once, so no measurement can beat a speedup of min(W, P): that is
the bound lesson 11 asserts, whatever the machine.

Introduced in notebooks/11-performance-and-scaling.ipynb.
"""

from __future__ import annotations


def speedup_bound(world: int, cores: int) -> int:
    """The most W ranks of one thread each can gain over one rank on `cores` cores: min(W, cores).

    Example:
        >>> speedup_bound(4, cores=2)
        2

    Introduced in notebooks/11-performance-and-scaling.ipynb.
    """
    return max(1, min(world, cores))

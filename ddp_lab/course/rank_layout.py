"""Which ranks form each parallel group: the one owner of the rank layout (tp fastest, then cp, dp, pp).

With world = dp x tp x pp ranks, Megatron-LM numbers them tensor-parallel fastest (Narayanan et
al. 2021, arXiv:2104.04473, Sec. 3.2, Takeaway #1: tensor parallelism within a server;
picotron's `process_group_manager`, torchtitan's `ParallelDims` own the same thing): the tp ranks
of a layer are neighbours (one node, NVLink), a dp group takes every tp-th rank, a pp group every
(tp x dp)-th. A 2-D `DeviceMesh` built as `init_device_mesh(..., (dp, tp), mesh_dim_names=("dp",
"tp"))` lays its ranks out the same way (lesson 10). This module only computes rank numbers (no
torch): lesson 13's planner costs a group by its size and stride, and its measurements make the
real groups from the same lists.

Context parallelism (cp ranks share one sequence, lesson 15) sits between tp and dp, as in
Megatron-Core's default order tp-cp-ep-dp-pp (Llama 3 uses [TP, CP, PP, DP], Sec. 3.3.2): world =
dp x tp x pp x cp, and with cp = 1 every group above is unchanged. Groups that span two axes:
    dp_cp   the dp x cp ranks that hold the same weights: gradients are reduced, and ZeRO
            shards, over them (torchtitan's "dp_shard_cp" mesh)
    ep      expert parallelism (lesson 14) is carved out of those dp x cp ranks, not added to the
            world: ep consecutive ones (stride tp) split the experts between them, so ep must
            divide dp x cp (Megatron-Core's expert-model-parallel group; torchtitan's "ep" mesh
            with etp = tp, which also asks ep to cover all of cp)
    edp     the dp x cp / ep ranks that hold the same experts: expert gradients are reduced,
            and ZeRO shards experts, over them (Megatron-Core's expert-data-parallel group,
            torchtitan's "dp_shard_mod_ep")

Introduced in notebooks/10-2d-mesh.ipynb (rows are tp groups, columns dp groups).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

AXES = ("tp", "cp", "dp", "pp")   # fastest first: world = their product
SPANNING = ("dp_cp", "ep", "edp")  # groups across two axes (module docstring)


@dataclass(frozen=True)
class Group:
    """`size` ranks, `stride` apart in the global rank order (one group of an axis, as the planner costs it).

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    size: int
    stride: int = 1
    world: int | None = field(default=None, compare=False, repr=False)   # the job's ranks; None: one block

    def spans_nodes(self, gpus_per_node: int) -> bool:
        """True if some group of this axis has ranks in two nodes (nodes hold gpus_per_node consecutive ranks).

        The groups of an axis tile the ranks in blocks of size x stride; a group leaves its node when its block
        is larger than a node or when a node boundary among the job's ranks falls inside a block (a cp 3 ring
        on 8-GPU nodes: ranks 6, 7 and 8). Without `world` the job is taken to be one block.

        Example:
            >>> Group(4).spans_nodes(8), Group(3, world=48).spans_nodes(8), Group(3, world=3).spans_nodes(8)
            (False, True, False)
        """
        block = self.size * self.stride
        world = self._ranks
        return self.size > 1 and (block > gpus_per_node or (world > gpus_per_node and gpus_per_node % block != 0))

    def ranks_in_a_node(self, gpus_per_node: int) -> tuple[int, int]:
        """(fewest, most) ranks of one group in one node, over every node a group of this axis touches: the NICs
        the group's rings cross a node's edge with, and the peers whose share of an all-to-all stays inside.

        Example:
            >>> Group(8, 8).ranks_in_a_node(8), Group(16).ranks_in_a_node(8), Group(16, world=144).ranks_in_a_node(72)
            ((1, 1), (8, 8), (8, 16))
        """
        if not self.spans_nodes(gpus_per_node):
            return self.size, self.size
        return _ranks_in_a_node(self.size, self.stride, self._ranks, gpus_per_node)

    def node_counts(self, gpus_per_node: int) -> list[tuple[int, ...]]:
        """Each way one group of this axis lies over nodes: its ranks in each node it touches, in node order (a
        group's experts on each node, lesson 14's per-node dispatch).

        Example:
            >>> Group(16).node_counts(8), Group(4, 8).node_counts(8)
            ([(8, 8)], [(1, 1, 1, 1)])
            >>> Group(32, world=288).node_counts(72)      # 72-GPU nodes: groups of 32 split 8 + 24, 16 + 16, ...
            [(8, 24), (16, 16), (24, 8), (32,)]
        """
        if not self.spans_nodes(gpus_per_node):
            return [(self.size,)]
        return _node_counts(self.size, self.stride, self._ranks, gpus_per_node)

    @property
    def _ranks(self) -> int:
        """The job's ranks: `world`, or one block of the axis's groups where it is not given."""
        return self.size * self.stride if self.world is None else self.world


@functools.lru_cache(maxsize=4096)
def _ranks_in_a_node(size: int, stride: int, world: int, gpus_per_node: int) -> tuple[int, int]:
    """`Group.ranks_in_a_node` of a group that spans nodes: (fewest, most) ranks of one group in one node it touches.

    The groups tile the ranks in blocks of size x stride, each block holding `stride` groups (offsets 0 .. stride - 1
    from the block's start); the pattern of blocks on nodes repeats every lcm(block, gpus_per_node) ranks, so the
    blocks up to there (or to the end of the job) are all there is to look at. Each group's counts come from
    `_ranks_per_node`, in time that does not grow with the group's size.

    Example:
        >>> _ranks_in_a_node(16, 1, 144, 72), _ranks_in_a_node(3, 1, 48, 8)
        ((8, 16), (1, 3))
    """
    if stride >= gpus_per_node:
        return 1, 1           # neighbours a node or more apart: each rank alone in its node
    counts = set()
    for first in _first_ranks(size, stride, world, gpus_per_node):
        counts.update(_ranks_per_node(first, stride, size, gpus_per_node))
    return min(counts), max(counts)


def _first_ranks(size: int, stride: int, world: int, gpus_per_node: int) -> list[int]:
    """The first ranks of the groups of one period of blocks on nodes: the groups tile the ranks in blocks of size x
    stride, `stride` groups a block, and the pattern of blocks on nodes repeats every lcm(block, gpus_per_node)
    ranks (or the job ends first)."""
    block = size * stride
    period = min(world, math.lcm(block, gpus_per_node))
    return [start + offset for start in range(0, period, block) for offset in range(stride)]


@functools.lru_cache(maxsize=4096)
def _node_counts(size: int, stride: int, world: int, gpus_per_node: int) -> list[tuple[int, ...]]:
    """`Group.node_counts` of a group that spans nodes: the distinct per-node counts of the groups of one period of
    blocks on nodes (as `_ranks_in_a_node` walks them), longest first."""
    ways = set()
    for first in _first_ranks(size, stride, world, gpus_per_node):
        nodes = [(first + k * stride) // gpus_per_node for k in range(size)]
        ways.add(tuple(nodes.count(node) for node in sorted(set(nodes))))
    return sorted(ways, key=lambda counts: (-len(counts), counts))


def _ranks_per_node(first: int, stride: int, size: int, gpus_per_node: int) -> set[int]:
    """The numbers of ranks first, first + stride, ..., first + (size - 1) x stride in the nodes they touch, each
    number once (stride < gpus_per_node, so they touch every node from the first's to the last's).

    Node j holds the ranks with k in [ceil((j g - first) / stride), floor(((j + 1) g - 1 - first) / stride)], g the
    GPUs per node, cut to [0, size - 1] in the first and last node. Between those two the count depends only on
    (j g - first) mod stride, which repeats within `stride` nodes: those are the only ones counted.

    Example:
        >>> sorted(_ranks_per_node(6, 1, 3, 8)), sorted(_ranks_per_node(0, 3, 100, 8))   # ranks 6, 7 | 8; 0, 3, 6 | ...
        ([1, 2], [1, 2, 3])
    """
    first_node, last_node = first // gpus_per_node, (first + (size - 1) * stride) // gpus_per_node
    nodes = {first_node, last_node, *range(first_node + 1, min(last_node, first_node + 1 + stride))}
    counts = set()
    for node in nodes:
        low = max(0, -(-(node * gpus_per_node - first) // stride))
        high = min(size - 1, ((node + 1) * gpus_per_node - 1 - first) // stride)
        counts.add(high - low + 1)
    return counts


@dataclass(frozen=True)
class RankLayout:
    """dp x tp x pp (x cp) ranks in Megatron order, with ep carved out of the dp x cp ranks.

    Example:
        >>> layout = RankLayout(dp=2, tp=2)
        >>> layout.groups("tp"), layout.groups("dp")
        ([[0, 1], [2, 3]], [[0, 2], [1, 3]])
        >>> RankLayout(dp=4, ep=2).groups("ep"), RankLayout(dp=4, ep=2).groups("edp")
        ([[0, 1], [2, 3]], [[0, 2], [1, 3]])

    Introduced in notebooks/10-2d-mesh.ipynb.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1

    def __post_init__(self):
        for axis in AXES + ("ep",):
            size = getattr(self, axis)
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"{axis}={size!r}: each parallel degree must be a positive int")
        if (self.dp * self.cp) % self.ep:
            raise ValueError(f"ep={self.ep} does not divide dp x cp = {self.dp * self.cp}: expert-parallel ranks are "
                             f"carved out of the data- and context-parallel ranks")

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def check(self, world_size: int) -> None:
        """Raise unless the degrees multiply to `world_size`, the ranks there are."""
        if self.world_size != world_size:
            product = (f"dp x tp x pp = {self.dp} x {self.tp} x {self.pp}" if self.cp == 1 else
                       f"dp x tp x pp x cp = {self.dp} x {self.tp} x {self.pp} x {self.cp}")
            raise ValueError(f"{product} = {self.world_size}, but there are "
                             f"{world_size} ranks: choose degrees whose product is {world_size}")

    def size(self, axis: str) -> int:
        """Ranks in one `axis` group (an axis of AXES or a spanning group of SPANNING)."""
        return {"tp": self.tp, "cp": self.cp, "dp": self.dp, "pp": self.pp, "dp_cp": self.dp * self.cp,
                "ep": self.ep, "edp": self.dp * self.cp // self.ep}[self._known(axis)]

    def stride(self, axis: str) -> int:
        """Distance in global rank between neighbours of one `axis` group: tp 1, cp tp, dp tp x cp, pp tp x cp x dp."""
        tp, cp, dp = self.tp, self.cp, self.dp
        return {"tp": 1, "cp": tp, "dp": tp * cp, "pp": tp * cp * dp, "dp_cp": tp, "ep": tp,
                "edp": tp * self.ep}[self._known(axis)]

    def group(self, axis: str) -> Group:
        """The size and stride of every `axis` group."""
        return Group(self.size(axis), self.stride(axis), world=self.world_size)

    def groups(self, axis: str) -> list[list[int]]:
        """Every `axis` group's global ranks, in the order every rank must create them."""
        size, stride = self.size(axis), self.stride(axis)
        starts = [r for r in range(self.world_size) if (r // stride) % size == 0]
        return [[start + k * stride for k in range(size)] for start in starts]

    def group_of(self, axis: str, rank: int) -> list[int]:
        """The ranks of `rank`'s own `axis` group."""
        return next(ranks for ranks in self.groups(axis) if rank in ranks)

    @staticmethod
    def _known(axis: str) -> str:
        if axis not in AXES + SPANNING:
            raise ValueError(f"axis must be one of {AXES + SPANNING}, got {axis!r}")
        return axis

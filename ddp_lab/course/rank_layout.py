"""Which ranks form each parallel group: the one owner of the rank layout (tp fastest, then dp, then pp).

With world = dp x tp x pp ranks, Megatron-LM numbers them tensor-parallel fastest (Narayanan et
al. 2021, arXiv:2104.04473, Sec. 3.3; picotron's `process_group_manager`, torchtitan's
`ParallelDims` own the same thing): the tp ranks of a layer are neighbours (one node, NVLink),
a dp group takes every tp-th rank, a pp group every (tp x dp)-th. A 2-D `DeviceMesh` built as
`init_device_mesh(..., (dp, tp), mesh_dim_names=("dp", "tp"))` lays its ranks out the same way
(lesson 10). This module only computes rank numbers (no torch): lesson 13's planner costs a
group by its size and stride, and its measurements make the real groups from the same lists.

Introduced in notebooks/10-2d-mesh.ipynb (rows are tp groups, columns dp groups).
"""

from __future__ import annotations

from dataclasses import dataclass

AXES = ("tp", "dp", "pp")   # fastest first


@dataclass(frozen=True)
class Group:
    """`size` ranks, `stride` apart in the global rank order (one group of an axis, as the planner costs it).

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """

    size: int
    stride: int = 1

    def spans_nodes(self, gpus_per_node: int) -> bool:
        """True if the group's ranks are not all inside one node."""
        return self.size > 1 and self.size * self.stride > gpus_per_node


@dataclass(frozen=True)
class RankLayout:
    """dp x tp x pp ranks in Megatron order.

    Example:
        >>> layout = RankLayout(dp=2, tp=2)
        >>> layout.groups("tp"), layout.groups("dp")
        ([[0, 1], [2, 3]], [[0, 2], [1, 3]])

    Introduced in notebooks/10-2d-mesh.ipynb.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1

    def __post_init__(self):
        for axis in AXES:
            size = getattr(self, axis)
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"{axis}={size!r}: each parallel degree must be a positive int")

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp

    def check(self, world_size: int) -> None:
        """Raise unless the degrees multiply to `world_size`, the ranks there are."""
        if self.world_size != world_size:
            raise ValueError(f"dp x tp x pp = {self.dp} x {self.tp} x {self.pp} = {self.world_size}, but there are "
                             f"{world_size} ranks: choose degrees whose product is {world_size}")

    def stride(self, axis: str) -> int:
        """Distance in global rank between neighbours of one `axis` group: tp 1, dp tp, pp tp x dp."""
        if axis not in AXES:
            raise ValueError(f"axis must be one of {AXES}, got {axis!r}")
        return {"tp": 1, "dp": self.tp, "pp": self.tp * self.dp}[axis]

    def group(self, axis: str) -> Group:
        """The size and stride of every `axis` group."""
        return Group(getattr(self, axis), self.stride(axis))

    def groups(self, axis: str) -> list[list[int]]:
        """Every `axis` group's global ranks, in the order every rank must create them."""
        size, stride = getattr(self, axis), self.stride(axis)
        starts = [r for r in range(self.world_size) if (r // stride) % size == 0]
        return [[start + k * stride for k in range(size)] for start in starts]

    def group_of(self, axis: str, rank: int) -> list[int]:
        """The ranks of `rank`'s own `axis` group."""
        return next(ranks for ranks in self.groups(axis) if rank in ranks)

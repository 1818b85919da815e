"""Count the collectives a rank runs, by mesh dimension: op, elements and bytes, seen at torch's dispatcher.

Introduced in notebooks/10-2d-mesh.ipynb.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, NamedTuple

import torch.distributed as dist
from torch._C._distributed_c10d import _resolve_process_group
from torch.utils._python_dispatch import TorchDispatchMode

from ddp_lab.course.mesh.groups import mesh_groups


class MeshCall(NamedTuple):
    """One collective on this rank: the mesh dimension its group belongs to, the op, the full buffer's bytes."""

    dim: str
    op: str
    nbytes: int


# op -> (kind, where the group is, how to get the FULL buffer's bytes from the arguments).
# c10d ops are what dist.all_gather_into_tensor & co. call (FSDP2 uses them); _c10d_functional
# ops are DTensor's functional collectives (tensor parallelism uses them).
def _c10d_ops():
    return {
        "c10d::allreduce_": ("all_reduce", 1, lambda a: sum(_bytes(t) for t in a[0])),
        "c10d::_allgather_base_": ("all_gather", 2, lambda a: _bytes(a[0])),          # (output, input, pg)
        # dist.all_gather's list form: (output lists, inputs, pg)
        "c10d::allgather_": ("all_gather", 2, lambda a: sum(_bytes(t) for outputs in a[0] for t in outputs)),
        "c10d::_reduce_scatter_base_": ("reduce_scatter", 2, lambda a: _bytes(a[1])),  # (output, input, pg)
        "c10d::broadcast_": ("broadcast", 1, lambda a: sum(_bytes(t) for t in a[0])),
        "c10d::allreduce_coalesced_": ("all_reduce", 1, lambda a: sum(_bytes(t) for t in a[0])),
        "c10d::reduce_": ("reduce", 1, lambda a: sum(_bytes(t) for t in a[0])),            # (tensors, pg, ...)
        "c10d::gather_": ("gather", 2, lambda a: sum(_bytes(t) for t in a[1])),            # (outputs, inputs, pg)
        "c10d::scatter_": ("scatter", 2, lambda a: sum(_bytes(t) for t in a[0])),          # (outputs, inputs, pg)
        # dist.reduce_scatter's list form: (outputs, input lists, pg)
        "c10d::reduce_scatter_": ("reduce_scatter", 2, lambda a: sum(_bytes(t) for inputs in a[1] for t in inputs)),
        "c10d::alltoall_": ("all_to_all", 2, lambda a: sum(_bytes(t) for t in a[1])),      # (outputs, inputs, pg)
        "c10d::alltoall_base_": ("all_to_all", 2, lambda a: _bytes(a[1])),                 # (output, input, pg)
        "_c10d_functional::all_reduce": ("all_reduce", 2, lambda a: _bytes(a[0])),      # (input, op, group)
        "_c10d_functional::all_reduce_": ("all_reduce", 2, lambda a: _bytes(a[0])),
        "_c10d_functional::all_gather_into_tensor": ("all_gather", 2, lambda a: _bytes(a[0]) * a[1]),
        "_c10d_functional::reduce_scatter_tensor": ("reduce_scatter", 3, lambda a: _bytes(a[0])),
        "_c10d_functional::all_to_all_single": ("all_to_all", 3, lambda a: _bytes(a[0])),
        "_c10d_functional::broadcast": ("broadcast", 2, lambda a: _bytes(a[0])),
    }


def _bytes(tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _group_ranks(group) -> tuple[int, ...]:
    """The global ranks of a group as a c10d op sees it: a name (functional ops) or a boxed ProcessGroup."""

    process_group = _resolve_process_group(group) if isinstance(group, str) else dist.ProcessGroup.unbox(group)
    return tuple(sorted(dist.get_process_group_ranks(process_group)))


@contextlib.contextmanager
def count_mesh_traffic(mesh) -> Iterator[list[MeshCall]]:
    """Inside a rank: record every collective this rank runs, and on which mesh dimension.

    A `TorchDispatchMode` sees each collective as it reaches torch's dispatcher, whichever
    way it was called: DTensor's functional collectives (tensor parallelism's all-reduces)
    and the c10d ops behind `dist.all_gather_into_tensor` / `dist.reduce_scatter_tensor`
    (FSDP2), in forward and in autograd's backward. The group of each call is matched to
    the mesh dimension whose group spans the same ranks ("other" for any other group).

    Bytes are the FULL buffer's: the tensor of an all-reduce, the gathered output of an
    all-gather, the input of a reduce-scatter.

    Args:
        mesh: a `DeviceMesh` with `mesh_dim_names`.

    Yields:
        The list that fills with one `MeshCall(dim, op, nbytes)` per collective.

    Example:
        >>> with count_mesh_traffic(mesh) as calls:       # inside a launched rank
        ...     model(x).sum().backward()
        >>> calls[0]
        MeshCall(dim='dp', op='all_gather', nbytes=2240)

    Introduced in notebooks/10-2d-mesh.ipynb.
    """


    # matched by the ranks a group spans, not by its name: a second mesh over the same ranks
    # builds new groups, and a DTensor may run its collective in either
    dims = {tuple(ranks): name for name, ranks in reversed(list(mesh_groups(mesh).items()))}
    ops = _c10d_ops()
    calls: list[MeshCall] = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            known = ops.get(func._schema.name)
            if known:
                kind, group_at, nbytes = known
                calls.append(MeshCall(dims.get(_group_ranks(args[group_at]), "other"), kind, nbytes(args)))
            return func(*args, **(kwargs or {}))

    with Recorder():
        yield calls

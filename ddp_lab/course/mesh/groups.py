"""Read a device mesh's process groups: which ranks this rank talks to along each named dimension.

Introduced in notebooks/10-2d-mesh.ipynb.
"""

from __future__ import annotations

import torch.distributed as dist


def mesh_groups(mesh) -> dict[str, list[int]]:
    """Inside a rank: the global ranks of this rank's process group along each named mesh dimension.

    Reads the real groups torch built (`mesh[name].get_group()`, then
    `dist.get_process_group_ranks`), so it shows what the collectives of that dimension will
    use, not what a formula predicts.

    Args:
        mesh: a `DeviceMesh` made with `mesh_dim_names`, e.g.
            `init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))`.

    Returns:
        {dimension name: sorted global ranks of this rank's group along it}.

    Example:
        >>> mesh_groups(mesh)            # on rank 1 of a (dp=2, tp=2) mesh
        {'dp': [1, 3], 'tp': [0, 1]}

    Introduced in notebooks/10-2d-mesh.ipynb.
    """

    names = mesh.mesh_dim_names
    if not names:
        raise ValueError("mesh_groups needs named mesh dimensions: build the mesh with "
                         "init_device_mesh(..., mesh_dim_names=('dp', 'tp')).")
    return {name: sorted(dist.get_process_group_ranks(mesh[name].get_group())) for name in names}

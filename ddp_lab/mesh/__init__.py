"""The 2-D device mesh: which ranks form each mesh dimension's groups, and the bytes each dimension moves.

Introduced in notebooks/10-2d-mesh.ipynb (`from ddp_lab.mesh import mesh_groups, count_mesh_traffic`;
FSDP2 and DTensor across torch versions come from `ddp_lab.torch_compat`).
"""

from ddp_lab.mesh.groups import mesh_groups
from ddp_lab.mesh.traffic import MeshCall, count_mesh_traffic

__all__ = ["MeshCall", "count_mesh_traffic", "mesh_groups"]

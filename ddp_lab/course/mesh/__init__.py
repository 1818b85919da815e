"""The 2-D device mesh: which ranks form each mesh dimension's groups.

Introduced in notebooks/10-2d-mesh.ipynb (`from ddp_lab.course.mesh import mesh_groups`). The bytes
each dimension moves are counted by the lab's `ddp_lab.instruments.mesh_traffic`; FSDP2 and DTensor
across torch versions come from `ddp_lab.torch_compat`.
"""

from ddp_lab.course.mesh.groups import mesh_groups

__all__ = ["mesh_groups"]

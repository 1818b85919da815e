"""Persistent ranks: `ddp_lab.Cluster` and the `%%ddp` cell magics that drive it.

The notebook side (live_cluster, magics) and the loop each rank runs (rank_loop).
Introduced in notebooks/00b-live-cluster.ipynb.
"""

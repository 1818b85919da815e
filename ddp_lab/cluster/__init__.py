"""Persistent ranks: `ddp_lab.Cluster` and the `%%ddp` cell magics that drive it.

The notebook side (live_cluster; command: one command, watched; magics), the loop each rank runs
(rank_loop), and the status records between them (status: what `%ddp_status` shows).
Introduced in notebooks/00b-live-cluster.ipynb.
"""

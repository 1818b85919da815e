"""What this machine offers and where a rank's tensors go: doctor(), rank_device(), GPU cells.

Introduced in notebooks/00-welcome-and-first-launch.ipynb; GPU cells in lesson 06.
"""

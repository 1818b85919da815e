"""Sharded training helpers: per-rank bytes of model state (measured and by formula, DDP and ZeRO stages 1-3)
and one portable import of FSDP2's fully_shard across torch versions. Introduced in notebooks/09-zero-and-fsdp.ipynb.
"""

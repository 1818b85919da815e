"""Sharded training helpers: per-rank bytes of model state (measured and by formula, DDP and ZeRO stages 1-3)
and the collectives ZeRO uses. FSDP2 across torch versions is `ddp_lab.torch_compat.fsdp`.
Introduced in notebooks/09-zero-and-fsdp.ipynb.
"""

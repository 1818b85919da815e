"""Making distributed training survive failures: atomic checkpoints and per-rank RNG state.

checkpoint.py: what a restartable training loop saves and restores. Reading the failures it
does not survive is the lab's (ddp_lab/instruments/diagnose.py). Introduced in lesson 12.
"""

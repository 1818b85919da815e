"""Making distributed training survive failures, and reading the failures it does not survive.

checkpoint.py: atomic checkpoint writes and per-rank RNG state (restartable training);
diagnose.py: a launch failure digested into one stable line per rank. Introduced in lesson 12.
"""

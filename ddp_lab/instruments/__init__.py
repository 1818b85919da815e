"""Instruments: what the lab measures while lessons run (bytes held, collectives issued).

Introduced in notebooks/09-zero-and-fsdp.ipynb.
"""

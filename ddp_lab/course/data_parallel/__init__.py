"""Data parallelism beyond the basics: DDP's gradient buckets, compressed gradients, what scaling can gain.

Lessons 04-05 write data parallelism by hand and with DDP; lesson 11 reads these.
Introduced in notebooks/11-performance-and-scaling.ipynb.
"""

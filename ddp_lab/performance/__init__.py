"""Performance helpers: step times across world sizes, the alpha-beta model of all-reduce, bucket layouts,
comm hooks that count their bytes (fp16/bf16, PowerSGD, your own) and a quiet one-step profile.

Introduced in notebooks/11-performance-and-scaling.ipynb.
"""

"""Tensor parallelism (Megatron-LM): f and g, the communication of a column- and row-parallel layer pair,
and the vocabulary-parallel embedding and cross-entropy.

DTensor's names across torch versions are in `ddp_lab.torch_compat.dtensor`; counting the
collectives a rank issues is `ddp_lab.instruments.collectives.count_collectives`.
Introduced in notebooks/08-tensor-parallelism.ipynb.
"""

"""Communicating less and surviving failures: LocalSGD, DiLoCo, Streaming DiLoCo, per-step quorums.

    local_sgd.py   LocalSGD: H local steps, then the parameters averaged (Stich 2019; Lin et al. 2020)
    diloco.py      DiLoCo's outer step: the averaged pseudo-gradient through an outer Nesterov SGD
                   (Douillard et al. 2023), its pseudo-gradients sent in fp32, bf16 or int8
    streaming.py   Streaming DiLoCo: the model cut into fragments synced at staggered steps
                   (Douillard et al. 2025)
    quorum.py      per-step fault tolerance by hand: replicas agree on who trains this step, a
                   process group per quorum, a returning replica recovered from a healthy peer

Pure torch and torch.distributed; every function also runs in one process (no process group).
Introduced in notebooks/16-communicate-less.ipynb.
"""

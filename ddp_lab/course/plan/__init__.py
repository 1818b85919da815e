"""The scale planner's formulas: pure Python, no torch, nothing measured (lesson 13).

    model.py        the transformer's shape and exact parameter count, presets
    hf_config.py    a Hugging Face config.json (already read into a dict) as a model shape
    cluster_spec.py GPUs and clusters (spec-sheet presets: peak FLOP/s, HBM bandwidth, links)
    strategy.py     dp, tp, pp, cp, ep, ZeRO, micro-batches, recomputation, attention kind; validation
    memory.py       per-GPU model states (ZeRO paper) and totals; activations.py: Korthikanti et al.
    collectives.py  time of a collective on the links a group spans (lesson 02's alpha-beta)
    efficiency.py   how long a layer takes on a GPU: a roofline per kind of work
    generation_constants.py   the calibrated constants per GPU generation (GEMM efficiency, flash share)
    optimizer_step.py     Adam's step on one GPU (memory-bound)
    overlap.py      how much communication compute hides: ZeRO-3's per-unit timeline, ZeRO 0-2's buckets, chunks
    dp_sync.py      data-parallel traffic per step (ZeRO 0-3) and the part compute does not hide
    tp_overlap.py   tensor-parallel collectives beside their GEMMs (--tp-comm-overlap)
    pipeline_stages.py    layers per pipeline stage: equal, or the first and last stage their own
    outer_sync.py   DiLoCo-style replicas synced every H steps: traffic, outer optimizer state
    steptime.py     compute, TP communication, pipeline bubble, exposed DP communication; MFU
    search.py       enumerate, keep what fits (the memory reserve), rank by throughput
    experts.py      mixture-of-experts models: total and active parameters, expert-parallel state, all-to-all (lesson 14)
    context_parallel.py   the sequence split over cp ranks: activations, the ring's K/V traffic, causal FLOPs (lesson 15)

The lab's `ddp_lab.plan` re-exports these names and adds what runs: the CLI, the table, and the
harness that measures this machine and validates the formulas on real ranks.
"""

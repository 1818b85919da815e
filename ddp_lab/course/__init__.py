"""The course library: what a lesson asks you to read. One folder or module per concept.

    device_memory.py   what one device holds under each split (lesson 01)
    alpha_beta.py      the alpha-beta cost of a ring collective, and its fit (lesson 02; 11, 13 use it)
    rank_layout.py     which ranks form the tp, dp and pp groups (lessons 10, 13)
    data_parallel/     DDP's buckets, compressed gradients, what scaling can gain (lessons 04-05, 11)
    pipeline_parallel/ schedules as action lists and their ideal timeline (lesson 07)
    tensor_parallel/   Megatron's f and g, the vocabulary-parallel embedding and loss (lesson 08)
    sharding/          ZeRO's model-state bytes per rank (lesson 09)
    mesh/              a device mesh's groups (lesson 10)
    expert_parallel/   the MoE layer and expert parallelism's dispatch and combine (lesson 14)
    fault_tolerance/   atomic checkpoints and per-rank RNG state (lesson 12)
    context_parallel/  ring attention, zig-zag, Ulysses: attention over a split sequence (lesson 15)
    plan/              the scale planner's formulas: model, strategy, memory, step time, search (lesson 13)

Nothing here imports the lab (launcher, checks, plots, instruments, torch_compat, ...):
tests/test_package_floors.py walks every import and enforces it.
"""

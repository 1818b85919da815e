"""Model-state bytes per rank under ZeRO: the formula every part of the course uses.

Model state is what training keeps between steps besides activations: the parameters, their
gradients and the optimizer state (Adam: exp_avg and exp_avg_sq per parameter). Per
parameter, fp32 Adam costs 4 + 4 + 8 = 16 bytes; mixed precision (bf16 or fp16 weights and
gradients, an fp32 master copy plus Adam's two fp32 moments, K = 12 in the paper) costs
2 + 2 + 12 = 16 bytes too. ZeRO (Rajbhandari et al. 2020, arXiv:1910.02054, Sec. 5.1, Fig. 1)
divides that by the data-parallel size component by component: stage 1 the optimizer state,
stage 2 also the gradients, stage 3 (FSDP) also the parameters.

One vocabulary: the components are "params", "grads", "optimizer"; precisions "fp32", "bf16",
"fp16"; ZeRO stages the ints 0 (DDP) to 3. Lesson 01's memory arithmetic, lesson 09's checks and
plots, and the planner (lesson 13) all call `state_bytes_per_rank`; what a rank really holds is
counted by `ddp_lab.instruments.tensor_bytes`.

Introduced in notebooks/09-zero-and-fsdp.ipynb.
"""

from __future__ import annotations

COMPONENTS = ("params", "grads", "optimizer")
# bytes per parameter of (params, grads, optimizer state)
BYTES_PER_PARAMETER = {
    "fp32": (4, 4, 8),    # fp32 weight, fp32 gradient, Adam's exp_avg + exp_avg_sq in fp32
    "bf16": (2, 2, 12),   # mixed precision: 16-bit weight and gradient; fp32 master weight + exp_avg + exp_avg_sq
    "fp16": (2, 2, 12),
}
PRECISIONS = tuple(BYTES_PER_PARAMETER)
# which components each ZeRO stage divides by the world size (stage 0 is plain DDP)
SHARDED_BY_STAGE = {0: (), 1: ("optimizer",), 2: ("grads", "optimizer"), 3: ("params", "grads", "optimizer")}


def state_bytes_per_rank(n_params: int, stage: int, world_size: int, precision: str = "fp32",
                         padded: bool = False) -> dict[str, int]:
    """The ZeRO formula: bytes of params, grads and optimizer state one rank holds between steps.

    Stage 0 is DDP (everything replicated); stage 1 shards the optimizer state, stage 2 also
    the gradients, stage 3 (FSDP) also the parameters. The paper's example, 7.5B parameters on
    64 GPUs in mixed precision: 120, 31.4, 16.6 and 1.9 GB for stages 0-3.

    Args:
        n_params: parameters of the whole model (one replica).
        stage: 0, 1, 2 or 3.
        world_size: ranks the state is sharded over (the data-parallel size).
        precision: 'fp32' (4 + 4 + 8 bytes per parameter), 'bf16' or 'fp16' (2 + 2 + 12).
        padded: False: n_params must divide by world_size, to compare exactly with what a rank
            holds (real implementations pad every shard to the same size); True: a shard is
            rounded up, as FSDP pads dim 0 (what the planner assumes).

    Example:
        >>> state_bytes_per_rank(1000, stage=1, world_size=4)
        {'params': 4000, 'grads': 4000, 'optimizer': 2000}

    Introduced in notebooks/09-zero-and-fsdp.ipynb.
    """
    if stage not in SHARDED_BY_STAGE:
        raise ValueError(f"stage must be 0 (DDP), 1, 2 or 3, got {stage!r}")
    if precision not in BYTES_PER_PARAMETER:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if world_size < 1 or (not padded and n_params % world_size):
        raise ValueError(f"n_params={n_params} must divide evenly by world_size={world_size}: real ZeRO pads "
                         "every shard to the same size, so choose sizes that divide to compare exactly")
    shard = -(-n_params // world_size)   # ceil: equal to n_params / world_size when it divides
    return {name: per_param * (shard if name in SHARDED_BY_STAGE[stage] else n_params)
            for name, per_param in zip(COMPONENTS, BYTES_PER_PARAMETER[precision])}

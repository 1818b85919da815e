"""Memory arithmetic for training: what one device holds under each way of splitting work.

Training with Adam in fp32 keeps, per parameter, 4 bytes of weight, 4 bytes of gradient
and 8 bytes of optimizer state (Adam's exp_avg and exp_avg_sq), plus the activations
saved for the backward pass, which grow with the batch. This is the reference the
lesson 01 exercise checks against.

Introduced in notebooks/01-data-vs-model-parallelism.ipynb.
"""

from __future__ import annotations

from ddp_lab.course.sharding.state_bytes import BYTES_PER_PARAMETER, SHARDED_BY_STAGE
from ddp_lab.course.sharding.state_bytes import COMPONENTS as MODEL_STATES

COMPONENTS = (*MODEL_STATES, "activations")
BYTES_PER_VALUE = 4          # fp32
ADAM_STATES_PER_PARAM = BYTES_PER_PARAMETER["fp32"][2] // BYTES_PER_VALUE   # exp_avg and exp_avg_sq

# Which components each strategy divides by the number of devices. Every data-parallel strategy
# splits the batch (activations); the ZeRO stages add what lesson 09's formula shards.
SHARDED = {
    "single": (),
    "data": ("activations",),                                   # each device runs 1/n of the batch
    "model": (*MODEL_STATES, "activations"),                    # each device owns 1/n of the layers
    **{f"zero{stage}": (*SHARDED_BY_STAGE[stage], "activations") for stage in (1, 2, 3)},
}
STRATEGIES = tuple(SHARDED)


def memory_per_device(n_params: int, n_activations: int, world_size: int, strategy: str,
                      bytes_per_value: int = BYTES_PER_VALUE) -> dict[str, int]:
    """Bytes one device holds while training with Adam, by component (idealised: splits divide evenly).

    Args:
        n_params: parameters of the whole model.
        n_activations: values saved for backward by one forward pass over the whole batch.
        world_size: number of devices.
        strategy: 'single', 'data', 'model' (layers split evenly), or 'zero1'/'zero2'/'zero3'
            (data parallel with optimizer state / + gradients / + parameters sharded).
        bytes_per_value: 4 for fp32.

    Returns:
        {'params', 'grads', 'optimizer', 'activations'} -> bytes.

    Example:
        >>> memory_per_device(1_000_000, 250_000, world_size=2, strategy="data")
        {'params': 4000000, 'grads': 4000000, 'optimizer': 8000000, 'activations': 500000}

    Introduced in notebooks/01-data-vs-model-parallelism.ipynb.
    """
    if strategy not in SHARDED:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    n = 1 if strategy == "single" else world_size
    full = {
        "params": n_params * bytes_per_value,
        "grads": n_params * bytes_per_value,
        "optimizer": ADAM_STATES_PER_PARAM * n_params * bytes_per_value,
        "activations": n_activations * bytes_per_value,
    }
    return {name: full[name] // n if name in SHARDED[strategy] else full[name] for name in COMPONENTS}

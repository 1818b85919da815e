"""The planner checked at full size on a laptop: a real-sized model counted by PyTorch itself, never allocated.

Lesson 13's measured runs train small models for real. This checks the other end: Llama 3 8B's
shape (or any `Transformer`), built by `ddp_lab.plan.reference` on the meta device, sharded with
FSDP2 exactly as lesson 09 wraps it (one unit per layer, then the root; bf16 compute, fp32
sharded parameters), then run under `FakeTensorMode` (tensors that carry shapes, dtypes and
devices but no memory) over a fake process group of `ranks` ranks (collectives that only
check their arguments). One forward and backward and one AdamW step later, PyTorch has created
every parameter shard, gradient shard and optimizer state a rank holds: their bytes are what a
rank of the real run would hold. One layer's forward under `SavedTensorCounter` (saved-tensor
hooks, lesson 13) gives the bytes autograd keeps for backward, in bf16 at the full sequence
length. Together a few seconds, and no more memory than the model's Python objects.

What FSDP2 keeps with mixed precision (MixedPrecisionPolicy(param_dtype=bf16)): fp32 parameter
shards (the master weights, 4 bytes), fp32 gradient shards (4) and AdamW's two fp32 moments (8):
16 bytes per parameter like the ZeRO paper's 2 + 2 + 12, split differently, because FSDP casts
its fp32 shards to bf16 when it gathers them. The planner's `precision="fp32"` row is that split.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import FlopCounterMode

from ddp_lab.plan.measure import SavedTensorCounter
from ddp_lab.plan.reference import build
from ddp_lab.torch_compat.fake_process_group import fake_process_group
from ddp_lab.torch_compat.fsdp import fsdp2


def fsdp2_state_bytes(model, ranks: int = 8) -> dict[str, int]:
    """Bytes rank 0 holds after one FSDP2 step of `model` on `ranks` ranks: {"params", "grads", "optimizer"}.

    Counted from the tensors FSDP2 and AdamW create (their local shards), under FakeTensorMode:
    nothing is allocated. One micro-batch of one sequence of `model.seq_len` tokens.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    fully_shard, MixedPrecisionPolicy = fsdp2()
    with fake_process_group(ranks):
        with torch.device("meta"):
            net = build(model, dtype=torch.float32, dropout=0.0)
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in net.layers:           # as lesson 09 wraps it: each layer a unit, then the root
            fully_shard(layer, mp_policy=policy)
        fully_shard(net, mp_policy=policy)
        with FakeTensorMode(allow_non_fake_inputs=True):
            net.to_empty(device="cpu")
            tokens = torch.zeros(1, model.seq_len, dtype=torch.long)
            net(tokens, tokens).backward()
            optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4, foreach=False)
            optimizer.step()
            return {"params": sum(_local_bytes(p) for p in net.parameters()),
                    "grads": sum(_local_bytes(p.grad) for p in net.parameters()),
                    "optimizer": sum(_local_bytes(value) for state in optimizer.state.values()
                                     for value in state.values() if torch.is_tensor(value) and value.dim() > 0)}


def layer_saved_bytes(model, micro_batch: int = 1, dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes autograd saves for backward in one layer's forward, counted by saved-tensor hooks under fake tensors.

    The reference decoder computes attention eagerly (the s x s scores are saved): compare with
    the planner's `Strategy(attention="eager")`.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    with torch.device("meta"):
        net = build(model.with_(layers=1), dtype=dtype)
    layer = net.layers[0]
    with FakeTensorMode(allow_non_fake_inputs=True):
        layer.to_empty(device="cpu")
        x = torch.empty(micro_batch, model.seq_len, model.hidden, dtype=dtype, requires_grad=True)
        with SavedTensorCounter() as counter:
            layer(x)
        return counter.peak


def recomputed_flops(model, early_stop: bool, micro_batch: int = 1) -> int:
    """FLOPs one layer's full recomputation repeats, counted by PyTorch's FlopCounterMode under fake tensors.

    One layer of the reference decoder, forward and backward wrapped in `torch.utils.checkpoint`,
    minus the same without it. early_stop=True: the non-reentrant checkpoint (use_reentrant=False,
    FSDP's checkpoint_wrapper, torchtitan), which stops recomputing once every tensor backward saved
    is made again (PyTorch >= 2.1); early_stop=False: the reentrant one, which re-runs the whole
    layer as Megatron-LM's and DeepSpeed's checkpoints do. Compare with `step_flops` of a one-layer
    model, hardware minus model FLOPs (efficiency.recompute_skips_last_gemm).

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    with torch.device("meta"):
        net = build(model.with_(layers=1), dtype=torch.bfloat16)
    layer = net.layers[0]
    counted = {}
    with FakeTensorMode(allow_non_fake_inputs=True):
        layer.to_empty(device="cpu")
        for recompute in (False, True):
            x = torch.empty(micro_batch, model.seq_len, model.hidden, dtype=torch.bfloat16, requires_grad=True)
            with FlopCounterMode(display=False) as flops:
                y = checkpoint(layer, x, use_reentrant=not early_stop) if recompute else layer(x)
                y.sum().backward()
            counted[recompute] = flops.get_total_flops()
    return counted[True] - counted[False]


def _local_bytes(tensor) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor   # a DTensor's shard on this rank
    return local.numel() * local.element_size()


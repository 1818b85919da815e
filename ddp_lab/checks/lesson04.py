"""Checks for the exercises of notebooks/04-ddp-from-scratch.ipynb: data parallelism by hand.

    ddp_lab.checks.lesson04.check_average_gradients(average_gradients)
    ddp_lab.checks.lesson04.check_sync_initial_state(sync_initial_state)

Each runs the answer on 2 gloo ranks with a short timeout, so a deadlock ends with a
message instead of a hang.

Introduced in notebooks/04-ddp-from-scratch.ipynb.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import call_case, ensure_written, run_on_ranks
from ddp_lab.instruments.collectives import watching_collectives

WORLD_SIZE = 2


def _model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 2))


def _rank_batch(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(50 + rank)
    return torch.randn(6, 3, generator=generator), torch.randn(6, 2, generator=generator)


def _hang_hint(collective: str) -> str:
    return ("a collective completes only when every rank calls it, with the same arguments "
            f"(same src, same sizes, same order): call dist.{collective} on every rank, for every tensor, "
            "not only on some ranks.")


# --- average_gradients ------------------------------------------------------------------

def _recording_all_reduce(pointers: list[int]):
    """Inside a rank: remember the storage of every tensor passed to dist.all_reduce (a context manager)."""
    return watching_collectives({"all_reduce": (0, "tensor")}, lambda name, tensor: pointers.append(tensor.data_ptr()))


def _average_runner(rank: int, average_gradients) -> dict:
    model = _model(seed=0)  # the same parameters everywhere, as after a broadcast
    x, y = _rank_batch(rank)
    F.mse_loss(model(x), y).backward()
    local = [p.grad.clone() for p in model.parameters()]
    before = [p.detach().clone() for p in model.parameters()]
    reduced: list[int] = []
    with _recording_all_reduce(reduced):
        call_case(average_gradients, f"averaging the gradients of a 2-layer model on rank {rank}", model)
    return {"local": local, "after": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
            "params_changed": any(not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters())),
            "params_reduced": any(p.data_ptr() in reduced for p in model.parameters())}


def check_average_gradients(average_gradients, timeout: float = 30.0) -> None:
    """Check `average_gradients(model)`: on every rank, replace each p.grad by its mean over ranks.

    Every rank has the same model and a different batch; after `backward`, the check calls
    your function on every rank and compares each `p.grad` with the mean of the ranks'
    local gradients.

    Introduced in notebooks/04-ddp-from-scratch.ipynb.
    """
    ensure_written(average_gradients)
    name = getattr(average_gradients, "__name__", "average_gradients")
    results = run_on_ranks(_average_runner, (average_gradients,), WORLD_SIZE, timeout, name,
                           timeout_hint=_hang_hint("all_reduce"))
    names = [n for n, _ in _model(0).named_parameters()]
    local = [results[rank]["local"] for rank in range(WORLD_SIZE)]
    for rank in range(WORLD_SIZE):
        if results[rank]["params_changed"] or results[rank]["params_reduced"]:
            raise CheckFailed(f"rank {rank}: the parameters themselves were all-reduced. Average the gradients "
                              "(p.grad), not the parameters (p or p.data), and leave the update to the optimizer.")
        for index, param_name in enumerate(names):
            got = results[rank]["after"][index]
            mean = (local[0][index] + local[1][index]) / WORLD_SIZE
            where = f"rank {rank}, gradient of {param_name!r}"
            if got is None:
                raise CheckFailed(f"{where} is None: keep the gradient tensors, reduce them in place.")
            if torch.allclose(got, mean, atol=1e-6):
                continue
            if torch.allclose(got, mean * WORLD_SIZE, atol=1e-6):
                hint = ("this is the SUM over ranks: dist.all_reduce adds; divide by dist.get_world_size() "
                        "afterwards (each rank's loss was already a mean over its own shard)")
            elif torch.allclose(got, local[rank][index], atol=1e-7):
                hint = (f"it is still rank {rank}'s own gradient: call dist.all_reduce(p.grad) for every "
                        "parameter (the loop must reach every parameter, on every rank)")
            elif torch.allclose(got, local[rank][index] / WORLD_SIZE, atol=1e-7):
                hint = "it is this rank's gradient divided by the world size: the all_reduce is missing"
            else:
                hint = "expected the mean of the ranks' gradients: all_reduce (SUM), then divide by the world size"
            raise CheckFailed(f"{where}: got {got.flatten()[:3].tolist()}..., expected the mean over ranks "
                              f"{mean.flatten()[:3].tolist()}...\nHint: {hint}.")
    passed(f"{name}: every gradient on every rank is the mean over {WORLD_SIZE} ranks")


# --- sync_initial_state -----------------------------------------------------------------

def _initial_state(rank: int) -> dict[str, torch.Tensor]:
    model = _model(seed=100 + rank)
    with torch.no_grad():  # give the BatchNorm buffers rank-specific values too
        model[1].running_mean.fill_(rank + 1.0)
        model[1].running_var.fill_(rank + 2.0)
    return model


def _sync_runner(rank: int, sync_initial_state) -> dict:
    model = _initial_state(rank)
    call_case(sync_initial_state, f"synchronising a model with parameters and BatchNorm buffers on rank {rank}", model)
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def check_sync_initial_state(sync_initial_state, timeout: float = 30.0) -> None:
    """Check `sync_initial_state(model)`: every rank ends with rank 0's parameters AND buffers.

    The ranks start from different random parameters and different BatchNorm running
    statistics; afterwards every rank must hold exactly rank 0's starting values.

    Introduced in notebooks/04-ddp-from-scratch.ipynb.
    """
    ensure_written(sync_initial_state)
    name = getattr(sync_initial_state, "__name__", "sync_initial_state")
    results = run_on_ranks(_sync_runner, (sync_initial_state,), WORLD_SIZE, timeout, name,
                           timeout_hint=_hang_hint("broadcast"))
    starts = [_initial_state(rank).state_dict() for rank in range(WORLD_SIZE)]
    buffers = {n for n, _ in _initial_state(0).named_buffers()}
    for rank in range(WORLD_SIZE):
        for key, want in starts[0].items():
            got = results[rank][key]
            if torch.equal(got, want):
                continue
            kind = "buffer" if key in buffers else "parameter"
            where = f"rank {rank}, {kind} {key!r}"
            if torch.equal(got, starts[rank][key]):
                if kind == "buffer":
                    hint = ("buffers (BatchNorm's running_mean, running_var, num_batches_tracked) must be "
                            "synchronised too: broadcast model.buffers() as well as model.parameters(), as DDP does")
                else:
                    hint = f"rank {rank} kept its own starting value: dist.broadcast(p.data, src=0) on every rank"
            elif rank == 0 and WORLD_SIZE > 1 and torch.equal(got, starts[1][key]):
                hint = "rank 0 now holds rank 1's value: broadcast from src=0, the rank whose values everyone keeps"
            elif got.is_floating_point() and torch.allclose(got, sum(s[key] for s in starts) / WORLD_SIZE):
                hint = ("this is the average over ranks: use dist.broadcast(tensor, src=0) so everyone gets "
                        "rank 0's values, not all_reduce")
            else:
                hint = "every rank must end with exactly rank 0's starting value (dist.broadcast from src=0)"
            raise CheckFailed(f"{where}: got {got.flatten()[:3].tolist()}, expected rank 0's "
                              f"{want.flatten()[:3].tolist()}.\nHint: {hint}.")
    passed(f"{name}: every rank holds rank 0's parameters and buffers")

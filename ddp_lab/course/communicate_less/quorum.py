"""Per-step fault tolerance by hand: a quorum every step, a process group per quorum, recovery from a peer.

Each replica group (here: one process) trains on its own, and before every step the replicas
agree on who takes part: the **quorum**. A replica joins step s by writing its own step count to
a key-value store; the step's quorum is every replica that joined, once every replica has either
joined or been declared absent (by whatever watches it: torchft's lighthouse notices the missing
heartbeats; here the replica's host process notices its child died). When the members change,
the members build a new gloo process group (old connections to a dead peer are useless), keyed
by the step so that no key of an earlier group is read. A member whose step count is behind the
others' (a returning replica) is **recovering**: before the step, every member calls
`recover_from_peer`, and the first healthy member sends its model and optimizer state over the
new group (from a live peer's memory, not from disk). Then all members average gradients as DDP
does, over the quorum's size: the training goes on with fewer replicas instead of stopping.

torchft (github.com/pytorch/torchft) builds the same pieces for real jobs: a Rust lighthouse for
the quorum, `Manager.should_commit` to drop a step that failed mid-way, recovery over HTTP or
the process group, and replica groups that are whole FSDP/TP jobs.

Introduced in notebooks/16-communicate-less.ipynb.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class Quorum:
    """Who trains at `step`: `members` (replica ids, in rank order) and each one's step count in `state_steps`."""

    step: int
    members: tuple[int, ...]
    state_steps: tuple[int, ...]

    def rank_of(self, replica: int) -> int:
        """The replica's rank in this quorum's process group."""
        return self.members.index(replica)

    @property
    def healthy(self) -> tuple[int, ...]:
        """The members whose state is the newest (they took every step so far)."""
        newest = max(self.state_steps)
        return tuple(m for m, s in zip(self.members, self.state_steps) if s == newest)

    @property
    def recovering(self) -> tuple[int, ...]:
        """The members whose state is behind: they must load a healthy member's state first."""
        return tuple(m for m in self.members if m not in self.healthy)

    @property
    def source_rank(self) -> int:
        """The rank (in this quorum) that sends its state to the recovering members: the first healthy one."""
        return self.rank_of(self.healthy[0])


def declare_absent(store: dist.Store, replica: int, steps) -> None:
    """Tell the others that `replica` takes no part in these steps (it died and has not returned)."""
    for step in steps:
        store.set(f"absent/{step}/{replica}", "1")


def form_quorum(store: dist.Store, replica: int, step: int, state_step: int, replicas: int,
                timeout: float = 60.0, poll: float = 0.002) -> Quorum:
    """Join step `step` holding state of step `state_step`; wait until every replica joined or is absent.

    Every member computes the same Quorum from the same keys. Raises TimeoutError naming the
    replicas nobody heard from.

    Introduced in notebooks/16-communicate-less.ipynb.
    """
    store.set(f"join/{step}/{replica}", str(state_step))
    deadline, waiting = time.monotonic() + timeout, set(range(replicas))
    joined = {}
    while waiting:
        for other in sorted(waiting):
            if store.check([f"join/{step}/{other}"]):
                joined[other] = int(store.get(f"join/{step}/{other}"))
                waiting.discard(other)
            elif store.check([f"absent/{step}/{other}"]):
                waiting.discard(other)
        if waiting and time.monotonic() > deadline:
            raise TimeoutError(f"step {step}: no word from replicas {sorted(waiting)} within {timeout:g} s; "
                               "a replica that stops must be declared absent (declare_absent).")
        if waiting:
            time.sleep(poll)
    members = tuple(sorted(joined))
    return Quorum(step, members, tuple(joined[m] for m in members))


def join_process_group(store: dist.Store, quorum: Quorum, replica: int, timeout: float = 30.0) -> None:
    """Make a fresh default gloo process group of the quorum's members (dropping this process's old one).

    Introduced in notebooks/16-communicate-less.ipynb.
    """
    if dist.is_initialized():
        dist.destroy_process_group()
    prefix = f"quorum/{quorum.step}/" + "-".join(map(str, quorum.members))   # a new group: keys of its own
    dist.init_process_group("gloo", store=dist.PrefixStore(prefix, store), rank=quorum.rank_of(replica),
                            world_size=len(quorum.members), timeout=timedelta(seconds=timeout))


def recover_from_peer(model: nn.Module, optimizer: torch.optim.Optimizer, source_rank: int) -> None:
    """Every member calls it: afterwards all hold rank `source_rank`'s model and optimizer state.

    One `broadcast_object_list` of both state dicts (the optimizer's momentum included): the
    recovering replica may have none, or stale state, of its own.

    Introduced in notebooks/16-communicate-less.ipynb.
    """
    state = [{"model": model.state_dict(), "optimizer": optimizer.state_dict()}]
    dist.broadcast_object_list(state, src=source_rank)
    if dist.get_rank() != source_rank:
        model.load_state_dict(state[0]["model"])
        optimizer.load_state_dict(state[0]["optimizer"])


@torch.no_grad()
def average_gradients(model: nn.Module) -> None:
    """All-reduce the gradients (one flattened message) and divide by the quorum's size: DDP over this quorum."""
    members = dist.get_world_size() if dist.is_initialized() else 1
    params = list(model.parameters())
    flat = torch.cat([p.grad.reshape(-1) for p in params])     # one message, as DDP's buckets
    if members > 1:
        dist.all_reduce(flat)
    for parameter, mean in zip(params, (flat / members).split([p.numel() for p in params])):
        parameter.grad.copy_(mean.reshape(parameter.shape))

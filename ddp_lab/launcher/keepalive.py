"""Keep the process groups a rank destroys alive until the rank exits.

`dist.destroy_process_group()` while a DDP model still exists is the usual end of a
training function. The group then lives on inside the model's C++ Reducer, and is freed
with the model when the function returns. Freeing a gloo group joins its worker threads
while the GIL is held; a worker that is still releasing its last collective's tensors
needs the GIL to do so, and the rank deadlocks (pytorch/pytorch#56297). Measured here:
two processes running init / DDP / all_reduce / destroy / return in a loop deadlocked
within 1 to 12 rounds; with `del model` before `destroy_process_group()`, or with this
module, 200 of 200 rounds completed. Lesson 05 hung this way once in CI.

ddp_lab's ranks leave with `os._exit`, so a group kept here is never freed: no join, no
deadlock. A destroyed group is still shut down and unregistered exactly as torch does it;
only its memory stays until the rank ends.

Introduced in notebooks/05-ddp-in-practice.ipynb (the canonical training function).
"""

from __future__ import annotations

import functools

_kept_groups: list = []


def keep_destroyed_groups() -> None:
    """Make `torch.distributed.destroy_process_group` keep a reference to what it destroys.

    Called once in every rank before the user's function is loaded, so that a reference
    to `destroy_process_group` inside that function resolves to the wrapper. Idempotent.
    """
    import torch.distributed as dist  # lazy: a rank imports torch only once it runs (the zygote before forking); the notebook side stays torch-free
    from torch.distributed import distributed_c10d  # lazy: a rank imports torch only once it runs (the zygote before forking); the notebook side stays torch-free

    original = distributed_c10d.destroy_process_group
    if getattr(original, "keeps_destroyed_groups", False):
        return

    @functools.wraps(original)
    def destroy_process_group(*args, **kwargs):
        group = args[0] if args else kwargs.get("group")
        if group is None or group is distributed_c10d.GroupMember.WORLD:
            _kept_groups.extend(distributed_c10d._world.pg_map)  # every group: all are destroyed
        else:
            _kept_groups.append(group)
        return original(*args, **kwargs)

    destroy_process_group.keeps_destroyed_groups = True
    distributed_c10d.destroy_process_group = destroy_process_group
    dist.destroy_process_group = destroy_process_group


def kept_groups() -> int:
    """How many destroyed process groups this rank is keeping (for tests)."""
    return len(_kept_groups)

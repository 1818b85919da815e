"""Checks for the exercises of notebooks/04-ddp-from-scratch.ipynb: data parallelism by hand.

    ddp_lab.checks.lesson04.check_average_gradients(average_gradients)
    ddp_lab.checks.lesson04.check_sync_initial_state(sync_initial_state)

Each runs the answer on gloo ranks with a short timeout, so a deadlock ends with a message
instead of a hang: the averaging on 3 ranks (so a world size written as 2 shows), the
synchronisation on 2.

Introduced in notebooks/04-ddp-from-scratch.ipynb.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (CaseFailed, CollectivesApart, agree_or_stop, agreeing_collectives, call_case,
                                   division_into_a_new_tensor, ensure_written, first_mismatch, gloo_size_abort,
                                   refuse_written_divisor, recording_async_calls, right_by_luck, run_answers_on_ranks)
from ddp_lab.instruments.collectives import replacing_dist_calls, watching_collectives, watching_requests

WORLD_SIZE = 2           # sync_initial_state
AVERAGE_WORLD_SIZE = 3   # average_gradients: not 2, so an answer that divides by 2 fails


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


def _explain_crash(collective: str, tensors: str):
    """`run_on_ranks`'s explain for a rank that gloo aborted because what arrived in a collective does not fit its
    tensor (`common.gloo_size_abort`): the ranks' calls paired tensors of different sizes. `tensors`: what every rank
    must pass, in one order."""
    def explain(failure) -> str | None:
        sizes = gloo_size_abort(failure.details) if failure.kind == "crashed" else None
        if not sizes:
            return None
        arrived, room = sizes
        return (f"gloo aborted the rank: {arrived} bytes arrived in a dist.{collective} whose tensor holds {room}, so "
                f"the ranks' dist.{collective} calls paired tensors of different sizes (another order of the tensors "
                "on some rank, or one skipped; a set's order differs from process to process). Every rank must pass "
                f"{tensors}, in the same order on every rank.")
    return explain


# --- average_gradients ------------------------------------------------------------------

def _recording_collectives(seen: list[tuple[str, int]]):
    """Inside a rank: remember (name, storage) of every tensor passed to dist.all_reduce, dist.broadcast or
    dist.reduce."""
    return watching_collectives({"all_reduce": (0, "tensor"), "broadcast": (0, "tensor"), "reduce": (0, "tensor")},
                                lambda name, tensor: seen.append((name, tensor.data_ptr())))


def _average_runner(rank: int, average_gradients) -> dict:
    model = _model(seed=0)  # the same parameters everywhere, as after a broadcast
    x, y = _rank_batch(rank)
    F.mse_loss(model(x), y).backward()
    local = [p.grad.clone() for p in model.parameters()]
    before = [p.detach().clone() for p in model.parameters()]
    grads = [p.grad.data_ptr() for p in model.parameters()]
    seen: list[tuple[str, int]] = []
    works: list[list] = []   # [storage, work, waited] of every dist.all_reduce with async_op=True
    with watching_requests() as requests, recording_async_calls("all_reduce", works, requests), \
            _recording_collectives(seen):
        call_case(average_gradients, f"averaging the gradients of a 2-layer model on rank {rank}", model)
    reduced = [pointer for name, pointer in seen if name == "all_reduce"]
    unwaited = {pointer for pointer, _, waited in works if not waited}
    after = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
    for _, work, _ in works:   # the next answer starts after this one's all-reduces
        work.wait()
    return {"local": local, "after": after, "unwaited": [pointer in unwaited for pointer in grads],
            "params_changed": any(not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters())),
            "params_reduced": any(p.data_ptr() in reduced for p in model.parameters()),
            "grad_reduced": [pointer in reduced for pointer in grads], "all_reduces": len(reduced),
            "grad_reductions": [reduced.count(pointer) for pointer in grads],
            "grad_reduced_to_one": [any(name == "reduce" and at == pointer for name, at in seen) for pointer in grads],
            "broadcasts": sum(name == "broadcast" for name, _ in seen)}


def check_average_gradients(average_gradients, timeout: float = 30.0) -> None:
    """Check `average_gradients(model)`: on every rank, replace each p.grad by its mean over ranks.

    Every rank has the same model and a different batch; after `backward`, the check calls
    your function on every rank and compares each `p.grad` with the mean of the ranks'
    local gradients.

    Introduced in notebooks/04-ddp-from-scratch.ipynb.
    """
    ensure_written(average_gradients)
    name = getattr(average_gradients, "__name__", "average_gradients")
    refuse_written_divisor(average_gradients, name, "a gradient", "dist.get_world_size(), the number of ranks",
                           computed=True)
    passed(judge_average_gradients(name, run_average_answers((average_gradients,), timeout, name)[0],
                                   division_into_a_new_tensor(average_gradients)))


def _average_answers_runner(rank: int, answers: tuple) -> list[dict]:
    return [_average_runner(rank, answer) for answer in answers]


def run_average_answers(answers: tuple, timeout: float = 30.0, name: str = "average_gradients") -> list[list[dict]]:
    """Run each answer once on the same ranks (one launch); [answer][rank] -> what `_average_runner` recorded."""
    return run_answers_on_ranks(_average_answers_runner, answers, AVERAGE_WORLD_SIZE, timeout, name,
                                timeout_hint=_hang_hint("all_reduce"),
                                explain=_explain_crash("all_reduce", "every p.grad, each once"))


def judge_average_gradients(name: str, results: list[dict], division: str | None = None) -> str:
    """The ✓ line for one answer's per-rank results (`run_average_answers`), or CheckFailed naming its mistake.
    `division`: a line of the answer that divides a gradient into a new tensor (`division_into_a_new_tensor`)."""
    names = [n for n, _ in _model(0).named_parameters()]
    local = [results[rank]["local"] for rank in range(AVERAGE_WORLD_SIZE)]
    for rank in range(AVERAGE_WORLD_SIZE):
        if results[rank]["params_changed"] or results[rank]["params_reduced"]:
            raise CheckFailed(f"rank {rank}: the parameters themselves were all-reduced. Average the gradients "
                              "(p.grad), not the parameters (p or p.data), and leave the update to the optimizer.")
        for index, param_name in enumerate(names):
            got = results[rank]["after"][index]
            mean = sum(grads[index] for grads in local) / AVERAGE_WORLD_SIZE
            where = f"rank {rank}, gradient of {param_name!r}"
            if got is None:
                raise CheckFailed(f"{where} is None: keep the gradient tensors, reduce them in place.")
            if torch.allclose(got, mean, atol=1e-6):
                continue
            others = [grads[index] for grads in local]
            raise CheckFailed(f"{where}: {_first_difference(got, mean)}.\nHint: "
                              f"{_average_hint(got, mean, others, results[rank], index, rank, division)}.")
    for rank in range(AVERAGE_WORLD_SIZE):   # right values from an all-reduce never waited for: right by luck
        unwaited = [param_name for param_name, flag in zip(names, results[rank].get("unwaited", ())) if flag]
        if unwaited:
            raise right_by_luck(f"rank {rank}, gradient of {unwaited[0]!r}", "the mean",
                                "dist.all_reduce(p.grad, async_op=True)", "the gradient is divided")
    return f"{name}: every gradient on every rank is the mean over {AVERAGE_WORLD_SIZE} ranks"


def _first_difference(got: torch.Tensor, mean: torch.Tensor) -> str:
    index = first_mismatch(got, mean, atol=1e-6, rtol=1e-5) or (0,) * got.dim()
    return (f"element {list(index)} is {got[index].item():.6g}, expected the mean over ranks "
            f"{mean[index].item():.6g}")


_NOT_WAITED = ("dist.all_reduce was called on p.grad, but its sum was not there when the gradient was divided and "
               "read: with async_op=True, call .wait() on the work it returns before using the gradient")


def _average_hint(got, mean, local: list, result: dict, index: int, rank: int, division: str | None = None) -> str:
    """What the gradient, the recorded collectives and the answer's source show about a gradient that is not the
    mean. `local`: this gradient as every rank had it before the answer ran, in rank order."""
    size = AVERAGE_WORLD_SIZE
    own = local[rank]
    on_grad = result["grad_reduced"][index]
    times = result["grad_reductions"][index]
    if times > 1:
        return (f"dist.all_reduce ran {times} times on this p.grad, and each call sums over the ranks again: "
                "all-reduce each gradient once, then divide it by the world size once")
    if result.get("unwaited", [False] * (index + 1))[index]:   # whatever the value: how much had arrived was timing
        return _NOT_WAITED
    if result.get("grad_reduced_to_one", [False] * (index + 1))[index] and not on_grad:
        return ("dist.reduce ran on this p.grad: it delivers the sum to one rank, dst, only, and leaves the other "
                "ranks' tensors undefined (their own gradient, or a partial sum). Every rank needs the mean: "
                "dist.all_reduce(p.grad), then divide by the world size")
    if torch.allclose(got, mean * size, atol=1e-6) and division:
        return (f"this is the SUM over ranks: your line `{division}` divides into a NEW tensor and leaves p.grad as "
                "all_reduce made it. Divide p.grad in place (p.grad /= world_size, or p.grad.div_(world_size))")
    if torch.allclose(got, mean * size, atol=1e-6):
        return ("this is the SUM over ranks: dist.all_reduce adds; divide by dist.get_world_size() afterwards "
                "(each rank's loss was already a mean over its own shard)")
    # a number the source reader (refuse_written_divisor) did not see: through a name it does not follow (one bound
    # outside the function, or more than once)
    for divisor in (2, 4, 8):
        if torch.allclose(got, mean * size / divisor, atol=1e-6):
            return (f"this is the sum over the {size} ranks divided by {divisor}: divide by dist.get_world_size(), "
                    "not by a number fixed in the code")
    count = len(result["grad_reduced"])   # the model's parameters
    if count not in (1, size) and torch.allclose(got, mean * size / count, atol=1e-6):
        return (f"this is the sum over the {size} ranks divided by {count}, the number of parameters (len(params)): "
                "the mean is over the ranks, so divide by dist.get_world_size()")
    if torch.allclose(got, mean / size, atol=1e-7):
        return (f"this is the mean divided by {size} once more: the world size was divided out twice "
                "(divide once, after a SUM; after ReduceOp.AVG, which already gives the mean, not at all)")
    stacked = torch.stack(local)
    for op, combined in (("MAX", stacked.max(0).values), ("MIN", stacked.min(0).values),
                         ("PRODUCT", stacked.prod(0))):
        if result["grad_reduced"][index] and any(torch.allclose(got, combined / divisor, atol=1e-7)
                                                 for divisor in (1, size)):
            return (f"this is the element-wise {op.lower()} over the ranks (ReduceOp.{op}): the mean needs their "
                    "SUM, dist.all_reduce's default op (ReduceOp.SUM), divided by the world size")
    own_only, divided = torch.allclose(got, own, atol=1e-7), torch.allclose(got, own / size, atol=1e-7)
    if (own_only or divided) and result["all_reduces"] and not any(result["grad_reduced"]):
        return ("dist.all_reduce ran, but never on a p.grad: it sums in place, into the tensor you pass (a copy, "
                "p.grad / n, a new flat buffer never copied back), and p.grad is what the optimizer reads. "
                "All-reduce p.grad itself, or copy the result back into it")
    if divided and on_grad:
        return _NOT_WAITED
    if (own_only or divided) and result["broadcasts"] and not result["all_reduces"]:
        return ("dist.broadcast copies one rank's tensor to the others, but the mean needs every rank's "
                "gradient: dist.all_reduce (SUM), then divide by the world size")
    if own_only:
        return (f"it is still rank {rank}'s own gradient: call dist.all_reduce(p.grad) for every parameter (the loop "
                "must reach every parameter, on every rank)")
    if divided:
        return "it is this rank's gradient divided by the world size: the all_reduce is missing"
    return "expected the mean of the ranks' gradients: all_reduce (SUM), then divide by the world size"


# --- sync_initial_state -----------------------------------------------------------------

def _initial_state(rank: int) -> dict[str, torch.Tensor]:
    model = _model(seed=100 + rank)
    with torch.no_grad():  # give the BatchNorm buffers rank-specific values too
        model[1].running_mean.fill_(rank + 1.0)
        model[1].running_var.fill_(rank + 2.0)
        model[1].num_batches_tracked.fill_(rank + 3)   # an integer buffer: one that only floats are synced misses
    return model


# Before each blocking dist.broadcast over every rank, the ranks tell each other its src (`_agreeing_on_src`), so
# ranks that disagree on it stop together instead of waiting for each other; RETURNED stands for a rank that came
# back from the answer, so that a rank which skips a broadcast leaves the other in dist.broadcast, as without it.
RETURNED = -2


def _agree(src: int, apart: list) -> None:
    """Every rank says the src of the broadcast it makes next (RETURNED: it came back from the answer); if every
    rank makes one and the srcs differ, `apart` gets every rank's (src,) and every rank raises CollectivesApart."""
    def describe(srcs: list) -> str:
        return "the ranks called dist.broadcast with different src: " + ", ".join(
            f"rank {rank} src={src}" for rank, (src,) in enumerate(srcs))

    agree_or_stop((src,), apart, describe, exempt=lambda srcs: (RETURNED,) in srcs)


def _agreeing_on_src(apart: list):
    """Inside a rank: each blocking dist.broadcast over every rank first agrees on its src (`_agree`); one with
    async_op=True does not, so that it starts when the answer starts it (its values may arrive late)."""
    def before(name: str, given: dict) -> None:
        src = given.get("src")
        src = given.get("group_src") if src is None else src
        if not given.get("async_op"):
            _agree(src if isinstance(src, int) else -1, apart)

    return agreeing_collectives(("broadcast",), before)


def _sync_runner(rank: int, sync_initial_state) -> dict:
    model = _initial_state(rank)
    state = model.state_dict()
    seen: list[tuple[str, int]] = []
    apart: list[list[int]] = []
    object_lists: list[int] = []   # one entry per dist.broadcast_object_list call
    works: list[list] = []         # [storage, work, waited] of every dist.broadcast with async_op=True
    try:
        with watching_requests() as requests, recording_async_calls("broadcast", works, requests), \
                _recording_collectives(seen), _agreeing_on_src(apart), watching_collectives(
                    {"broadcast_object_list": (0, "object_list")}, lambda name, objects: object_lists.append(1)):
            call_case(sync_initial_state,
                      f"synchronising a model with parameters and BatchNorm buffers on rank {rank}", model)
    except (CaseFailed, CollectivesApart) as failure:
        if not apart or (isinstance(failure, CaseFailed) and failure.kind != CollectivesApart.__name__):
            raise
        return {"src_apart": [src for (src,) in apart[-1]]}
    broadcast = {pointer for name, pointer in seen if name == "broadcast"}
    own = {tensor.data_ptr() for tensor in state.values()}
    unwaited = {pointer for pointer, _, waited in works if not waited}
    result = {"state": {name: t.detach().clone() for name, t in model.state_dict().items()},
              "broadcast_into": {name for name, t in state.items() if t.data_ptr() in broadcast},
              "broadcasts_elsewhere": len(broadcast - own), "object_lists": len(object_lists), "src_apart": None,
              "unwaited": {name for name, t in state.items() if t.data_ptr() in unwaited},
              "unwaited_elsewhere": len(unwaited - own)}
    _agree(RETURNED, apart)   # after reading the state: a rank that skipped a broadcast meets the others here
    for _, work, _ in works:   # the next answer starts after this one's broadcasts
        work.wait()
    return result


def _sync_answers_runner(rank: int, answers: tuple) -> list[dict]:
    return [_sync_runner(rank, answer) for answer in answers]


def run_sync_answers(answers: tuple, timeout: float = 30.0, name: str = "sync_initial_state") -> list[list[dict]]:
    """Run each answer once on the same ranks (one launch); [answer][rank] -> what `_sync_runner` recorded: the
    model's state afterwards, the entries a dist.broadcast wrote into, and how many broadcasts went elsewhere; or,
    where the ranks' broadcasts disagreed on src, only every rank's src ("src_apart"). "unwaited": the entries an
    async dist.broadcast never waited for wrote into, "unwaited_elsewhere": how many such broadcasts went elsewhere."""
    return run_answers_on_ranks(_sync_answers_runner, answers, WORLD_SIZE, timeout, name,
                                timeout_hint=_hang_hint("broadcast"),
                                explain=_explain_crash("broadcast", "every parameter and every buffer"))


def check_sync_initial_state(sync_initial_state, timeout: float = 30.0) -> None:
    """Check `sync_initial_state(model)`: every rank ends with rank 0's parameters AND buffers.

    The ranks start from different random parameters and different BatchNorm running
    statistics; afterwards every rank must hold exactly rank 0's starting values. A broadcast
    started with async_op=True whose work is never waited for is refused even where rank 0's
    values arrived in time.

    Introduced in notebooks/04-ddp-from-scratch.ipynb.
    """
    ensure_written(sync_initial_state)
    name = getattr(sync_initial_state, "__name__", "sync_initial_state")
    passed(judge_sync_initial_state(name, run_sync_answers((sync_initial_state,), timeout, name)[0]))


def judge_sync_initial_state(name: str, results: list[dict]) -> str:
    """The ✓ line for one answer's per-rank results (`run_sync_answers`), or CheckFailed naming its mistake."""
    starts = [_initial_state(rank).state_dict() for rank in range(WORLD_SIZE)]
    buffers = {n for n, _ in _initial_state(0).named_buffers()}
    srcs = results[0].get("src_apart")
    if srcs:
        listed = ", ".join(f"rank {rank} src={src}" for rank, src in enumerate(srcs))
        raise CheckFailed(f"the ranks called dist.broadcast with different src ({listed}).\nHint: a broadcast needs "
                          "the same src on every rank — the rank whose values everyone receives (src=0 here).")
    for rank in range(WORLD_SIZE):
        got_state = results[rank]["state"]
        for key, want in starts[0].items():
            got = got_state[key]
            if torch.equal(got, want):
                continue
            kind = "buffer" if key in buffers else "parameter"
            where = f"rank {rank}, {kind} {key!r}"
            if torch.equal(got, starts[rank][key]):
                floats_arrived = all(torch.equal(got_state[k], starts[0][k]) for k in buffers
                                     if starts[0][k].is_floating_point())
                if key in results[rank]["broadcast_into"]:
                    hint = _unwaited_hint(kind, name)
                elif key not in results[rank]["broadcast_into"] and results[rank]["object_lists"]:
                    hint = (f"dist.broadcast_object_list ran on rank {rank}, but rank 0's objects arrive in the list "
                            f"it is given, and this {kind} was never set from them: copy what arrived into the "
                            "model (model.load_state_dict(objects[0]) for a state_dict sent whole), or broadcast "
                            "the model's own tensors with dist.broadcast")
                elif key not in results[rank]["broadcast_into"] and results[rank]["broadcasts_elsewhere"]:
                    hint = (f"dist.broadcast ran on rank {rank}, but never into this {kind}: a broadcast writes into "
                            "the tensor it is given, and a copy (.clone(), .float(), a flat vector from torch.cat or "
                            "parameters_to_vector) is a new tensor the model never reads. Broadcast the model's own "
                            "tensors, or copy what arrived back into them")
                elif kind == "buffer" and not got.is_floating_point() and floats_arrived:
                    hint = (f"the floating-point buffers arrived but {key!r} ({got.dtype}) did not: broadcast every "
                            "buffer, integer ones too, as DDP does (a step counter that differs between ranks "
                            "changes BatchNorm's momentum when momentum=None)")
                elif kind == "buffer":
                    hint = ("buffers (BatchNorm's running_mean, running_var, num_batches_tracked) must be "
                            "synchronised too: broadcast model.buffers() as well as model.parameters(), as DDP does")
                else:
                    hint = f"rank {rank} kept its own starting value: dist.broadcast(p.data, src=0) on every rank"
            elif rank == 0 and WORLD_SIZE > 1 and torch.equal(got, starts[1][key]):
                hint = "rank 0 now holds rank 1's value: broadcast from src=0, the rank whose values everyone keeps"
            elif got.is_floating_point() and torch.allclose(got, sum(s[key] for s in starts) / WORLD_SIZE):
                hint = ("this is the average over ranks: use dist.broadcast(tensor, src=0) so everyone gets "
                        "rank 0's values, not all_reduce")
            elif key in results[rank].get("unwaited", ()):   # written into while it was read
                hint = _unwaited_hint(kind, name)
            else:
                hint = "every rank must end with exactly rank 0's starting value (dist.broadcast from src=0)"
            raise CheckFailed(f"{where}: got {got.flatten()[:3].tolist()}, expected rank 0's "
                              f"{want.flatten()[:3].tolist()}.\nHint: {hint}.")
    # right values from a broadcast never waited for: right by luck (the receiving ranks named first)
    for rank in list(range(1, WORLD_SIZE)) + [0]:
        result = results[rank]
        keys = [key for key in starts[0] if key in result.get("unwaited", ())]
        if keys or result.get("unwaited_elsewhere"):
            kind = "buffer" if keys and keys[0] in buffers else "parameter"
            what = f"this {kind}" if keys else "a tensor that is not the model's own"
            if rank == 0:   # the source: its values are its own, but its sends may still be under way
                where = f"rank 0, {kind} {keys[0]!r}" if keys else "rank 0"
                why = (f"{where}: dist.broadcast(..., async_op=True) was called on {what} and the work it returned was "
                       f"never waited for, so the values may still be on their way to the other ranks when {name} "
                       "returns")
                raise CheckFailed(f"{why}.\nHint: keep the work each call returns and call .wait() on every one "
                                  "before returning (or broadcast without async_op).")
            raise right_by_luck(f"rank {rank}, {kind} {keys[0]!r}" if keys else f"rank {rank}",
                                "the value" if keys else "the values", f"dist.broadcast on {what} (async_op=True)",
                                f"{name} returns")
    return f"{name}: every rank holds rank 0's parameters and buffers"


def _unwaited_hint(kind: str, name: str) -> str:
    """The hint for a parameter or buffer that an async dist.broadcast never waited for was to write into."""
    return (f"dist.broadcast was called on this {kind}, but rank 0's value had not arrived when {name} returned: "
            "with async_op=True, keep the work each call returns and call .wait() on every one before returning "
            "(or broadcast without async_op)")

"""Checks for the exercises of notebooks/09-zero-and-fsdp.ipynb.

    ddp_lab.checks.lesson09.check_state_bytes(state_bytes)
    ddp_lab.checks.lesson09.check_zero1(zero1_init, zero1_step)

The formula check runs in the notebook's process against `ddp_lab.course.sharding.state_bytes`;
the ZeRO-1 check trains 3 Adam steps on 2 gloo ranks, then, in the same launch, on 3, with a
short timeout, and compares every rank's gradient shards (as optimizer.step() finds them),
optimizer state and parameters with one process training on the whole batch (the shards
zero1_init returns are checked before zero1_step runs); a failure on 3 ranks says that 2 were
right, so that code written for 2 ranks shows. It also refuses, before any rank starts, a number
of shards written in either function (`.chunk(2)`, `p.numel() // 2`) and a gradient divided by a
written number. The formula check refuses an answer that calls the package's own
`state_bytes_per_rank`.

Introduced in notebooks/09-zero-and-fsdp.ipynb.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.distributed as dist

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (answer_value, call_case, describe, division_into_a_new_tensor, ensure_written,
                                   groups_of, judge_in_order, refuse_written_divisor, refuse_written_split,
                                   right_by_luck, run_on_ranks, with_a_note)
from ddp_lab.instruments.collectives import call_arguments, replacing_dist_calls, watching_requests
from ddp_lab.instruments.tensor_bytes import optimizer_state_bytes
from ddp_lab.course.sharding.state_bytes import BYTES_PER_PARAMETER, COMPONENTS, SHARDED_BY_STAGE, state_bytes_per_rank

# --- exercise 1: the formula -----------------------------------------------------------------

# (n_params, stage, world_size, precision): fp32 first, so a stage mistake is named before a precision one
FORMULA_CASES = tuple((n, stage, world_size, "fp32") for n in (1000,) for world_size in (1, 2, 4)
                      for stage in range(4)) + tuple(
    (n, stage, world_size, "bf16") for n in (1000,) for world_size in (1, 4) for stage in range(4)) + (
    (1000, 1, 4, "fp16"), (1000, 3, 4, "fp16"), (7_000_000_000, 3, 64, "bf16"), (7_000_000_000, 1, 8, "fp32"))


def _first_sharding_stage(component: str) -> int:
    return min(stage for stage, sharded in SHARDED_BY_STAGE.items() if component in sharded)


def check_state_bytes(state_bytes) -> None:
    """Check `state_bytes(n_params, stage, world_size, precision)`: ZeRO's bytes per rank by component.

    It must return {'params': ..., 'grads': ..., 'optimizer': ...} in bytes, equal to
    `ddp_lab.course.sharding.state_bytes.state_bytes_per_rank` for every stage (0 = DDP, 1, 2, 3),
    world size and precision ('fp32': 4 + 4 + 8 bytes per parameter; 'bf16' mixed precision: 2 + 2 + 12).

    Introduced in notebooks/09-zero-and-fsdp.ipynb.
    """
    ensure_written(state_bytes)
    for n_params, stage, world_size, precision in FORMULA_CASES:
        case = f"state_bytes({n_params}, stage={stage}, world_size={world_size}, precision={precision!r})"
        got = answer_value(state_bytes, (n_params, stage, world_size, precision),
                           getattr(state_bytes, "__name__", "state_bytes"), f"computing {case}", (state_bytes_per_rank,))
        want = state_bytes_per_rank(n_params, stage, world_size, precision)
        if not isinstance(got, dict) or set(got) != set(COMPONENTS):
            raise CheckFailed(f"{case} returned {str(got)[:100]}; expected a dict with the keys "
                              f"{list(COMPONENTS)} (bytes of each on one rank), e.g. {want}.")
        floats = [component for component in COMPONENTS if isinstance(got[component], float)]
        if floats:
            raise CheckFailed(f"{case}[{floats[0]!r}] is {got[floats[0]]!r}, a float; bytes are whole numbers.\n"
                              "Hint: return ints: / always returns a float (// divides whole numbers), and so does "
                              "arithmetic with a float such as 2.0.")
        for component in COMPONENTS:
            if got[component] != want[component]:
                hint = _formula_hint(component, got[component], n_params, stage, world_size, precision)
                raise CheckFailed(f"{case}[{component!r}] is {got[component]!r}, expected {want[component]}.\n"
                                  f"Hint: {hint}")
    passed(f"state_bytes equals ZeRO's formula for stages 0-3, world sizes 1-64, fp32 and mixed precision "
           f"({len(FORMULA_CASES)} cases)")


def _formula_hint(component: str, got, n_params: int, stage: int, world_size: int, precision: str) -> str:
    per_param = dict(zip(COMPONENTS, BYTES_PER_PARAMETER[precision]))[component]
    full = n_params * per_param
    sharded = component in SHARDED_BY_STAGE[stage]
    first = _first_sharding_stage(component)
    if world_size > 1 and not sharded and got == full // world_size:
        return (f"stage {stage} keeps the {component} whole on every rank: only stage {first} and above shard "
                f"the {component} (1: optimizer state; 2: + gradients; 3: + parameters).")
    if world_size > 1 and sharded and got == full:
        return (f"stage {stage} shards the {component}: each rank keeps 1/world_size of them, "
                f"{full} // {world_size} bytes.")
    if precision != "fp32" and component == "optimizer" and got * 12 == (full // world_size if sharded else full) * 8:
        return ("mixed precision's optimizer state is 12 bytes per parameter, not 8: Adam's two fp32 moments (8) "
                "plus the fp32 master copy of the weights (4), which the optimizer steps.")
    if (precision != "fp32" and component in ("params", "grads")
            and got == 2 * (full // world_size if sharded else full)):
        return f"in mixed precision the {component} are bf16/fp16: 2 bytes per parameter, not 4."
    shown = f"{n_params} * {per_param}" + (f" // {world_size}" if sharded else "")
    return (f"{component} cost {per_param} bytes per parameter in {precision} ({precision!r}: params, grads, "
            f"optimizer = {BYTES_PER_PARAMETER[precision]}), {'divided by world_size' if sharded else 'whole'} at "
            f"stage {stage}: {shown}.")


# --- exercise 2: the ZeRO-1 step -----------------------------------------------------------------

STEPS, PER_RANK, LR = 3, 4, 1e-2
# The exercise's 2 ranks first, then 3 in the same launch: code written for 2 ranks (the other rank as 1 - rank, a
# parameter put together from two halves) fails on 3. Every parameter's size divides by 6, so that its shards are of
# one size on both (an all-gather needs that; the uneven split is the 5-value parameter zero1_init is given).
WORLD_SIZES = (2, 3)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 6))


def _batches(world_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(3)
    rows = world_size * PER_RANK
    return [(torch.randn(rows, 4, generator=generator), torch.randn(rows, 6, generator=generator))
            for _ in range(STEPS)]


def _zero1_runner(rank: int, answers: tuple) -> dict[int, list[dict]]:
    """Every answer on a default group of each of WORLD_SIZES this rank belongs to, 2 ranks first
    (`common.groups_of`): {world size: [records per answer]}."""
    return {world_size: [_zero1_one(rank, zero1_init, zero1_step) for zero1_init, zero1_step in answers]
            for world_size in groups_of(rank, WORLD_SIZES, "zero1")}


def run_zero1_answers(answers: tuple, timeout: float = 60.0, name: str = "zero1_step",
                      explain=None) -> list[dict[int, list[dict]]]:
    """Run each (zero1_init, zero1_step) pair on 2 ranks, then on 3 (one launch); [answer] -> {world size: [rank]
    -> its records}."""
    results = run_on_ranks(_zero1_runner, (tuple(answers),), max(WORLD_SIZES), timeout, name, explain,
                           timeout_hint=_hang_hint, init_process_group=False)
    return [{size: [results[rank][size][index] for rank in range(size)] for size in WORLD_SIZES}
            for index in range(len(answers))]


def _second_run_note(world_size: int, judged: bool = True) -> str:
    """What a failure at the second world size adds: the first was right (`judged`; else it only ran without
    raising), so code written for its size is the likely cause."""
    first = (f"On {WORLD_SIZES[0]} ranks (the check's first run) every rank was right" if judged else
             f"It ran on {WORLD_SIZES[0]} ranks (the check's first run) without raising")
    return (f"{first}; this is its second run, on {world_size} ranks: look for code written for {WORLD_SIZES[0]} "
            "ranks (the other rank as 1 - rank, a parameter put together from two shards, a list of two) where "
            "world_size, rank or a loop over the ranks belongs.")


def _hang_hint(calls: set, places: dict) -> str | None:
    """What to say about ranks stuck in the answer's calls (`common.timeout_message`: `places`, {stuck rank: the call
    it waits in}): a rank from WORLD_SIZES[0] on is stuck in the second run, so the first finished; else None (the
    default hint)."""
    if not any(rank >= WORLD_SIZES[0] for rank in places):
        return None
    named = ", ".join(f"dist.{call}" for call in sorted(call for call in calls if call))
    waits = f" ({named})" if named else ""
    return with_a_note(_second_run_note(WORLD_SIZES[1], judged=False),
                       f"the ranks wait in calls that do not pair up{waits}: every rank must make the same "
                       "collective calls, in the same order, and each rank's updated shard must reach every other "
                       "rank (dist.all_gather does both).")


def _explain_a_raise(failure) -> str | None:
    """An answer that raised on the second world size: the first was right (the case text names the world size,
    `_zero1_one`'s calls)."""
    case = getattr(failure.exception, "case", "")   # common.CaseFailed's: for which call it raised
    second = f"world_size={WORLD_SIZES[1]})" in case or f"of {WORLD_SIZES[1]}, step" in case
    return _second_run_note(WORLD_SIZES[1], judged=False) if second else None


def _zero1_init_verdict(rank: int, world_size: int, model: nn.Module, params: list, zero1_init,
                        init_name: str) -> dict | tuple:
    """(shards, optimizer) if zero1_init's are right on this rank (a parameter of 5 elements too), else the record
    that says what is wrong ({'bad_init': ...}, {'bad_optimizer': ...}, {'bad_shards': ...}, {'bad_count': ...} or
    {'bad_shard': ...})."""
    returned = call_case(zero1_init, f"zero1_init(params, rank={rank}, world_size={world_size})",
                         params, rank, world_size, name=init_name)
    if not (isinstance(returned, (tuple, list)) and len(returned) == 2):
        return {"bad_init": describe(returned)}
    given, optimizer = returned
    if not isinstance(optimizer, torch.optim.Optimizer):
        return {"bad_optimizer": type(optimizer).__name__}
    if torch.is_tensor(given) or not hasattr(given, "__iter__"):
        return {"bad_shards": describe(given)}
    shards = list(given)
    if len(shards) != len(params):   # a generator is empty once Adam has read it: iter() of an iterator is itself
        return {"bad_count": (len(shards), len(params), iter(given) is given)}
    names = [name for name, _ in model.named_parameters()]
    for name, p, shard in zip(names, params, shards):   # found here, before zero1_step trips over it
        chunks = p.detach().reshape(-1).chunk(world_size)
        want = chunks[rank]
        if (not torch.is_tensor(shard) or shard.shape != want.shape or shard.dtype != want.dtype
                or not torch.equal(shard.detach(), want)):
            return {"bad_shard": (name, describe(shard), tuple(p.shape), tuple(want.shape),
                                  _shard_mistake(shard, p, chunks, rank, world_size))}
        if shard.untyped_storage().data_ptr() == p.untyped_storage().data_ptr():
            return {"bad_shard": (name, describe(shard), tuple(p.shape), tuple(want.shape), "view")}
    # a parameter of an odd size: chunk splits it 3 + 2, a floor split (numel // world_size) loses its last element
    odd = torch.nn.Parameter(torch.arange(5.0))
    odd_returned = call_case(zero1_init, f"zero1_init([a parameter of 5 elements], rank={rank}, "
                                         f"world_size={world_size})", [odd], rank, world_size, name=init_name)
    odd_shards = (list(odd_returned[0]) if isinstance(odd_returned, (tuple, list)) and len(odd_returned) == 2
                  and hasattr(odd_returned[0], "__iter__") and not torch.is_tensor(odd_returned[0]) else [])
    odd_shard = odd_shards[0] if odd_shards else None
    want_odd = odd.detach().chunk(world_size)[rank]
    if not (torch.is_tensor(odd_shard) and odd_shard.shape == want_odd.shape and odd_shard.dtype == want_odd.dtype
            and torch.equal(odd_shard.detach(), want_odd)):
        size = -(-5 // world_size)   # padded to a multiple of world_size, as FSDP does: equal shards, zeros last
        padded = F.pad(odd.detach(), (0, size * world_size - 5)).view(world_size, size)[rank]
        floor = 5 // world_size      # numel // world_size elements per rank
        kind = ("padded" if torch.is_tensor(odd_shard) and _close(odd_shard.detach().reshape(-1), padded) else
                "uneven" if torch.is_tensor(odd_shard) and _close(odd_shard.detach().reshape(-1),
                                                                  odd.detach()[rank * floor:(rank + 1) * floor]) else
                _shard_mistake(odd_shard, odd, odd.detach().chunk(world_size), rank, world_size))
        return {"bad_shard": ("a parameter of 5 elements", describe(odd_shard), (5,), tuple(want_odd.shape), kind)}
    return shards, optimizer


def _shard_mistake(shard, p: torch.Tensor, chunks: tuple, rank: int, world_size: int) -> str:
    """What a wrong shard of `p` is, for `_judge_world`'s hint: 'whole', 'unflattened', 'dtype <its dtype>',
    'chunk <k>' (another rank's chunk), 'values <index> <got> <expected>' (the right shape, other values) or
    'other'."""
    want = chunks[rank]
    if not torch.is_tensor(shard):
        return "other"
    shard = shard.detach()
    if shard.shape == p.shape and torch.equal(shard, p.detach()):
        return "whole"
    if shard.shape == want.shape and shard.dtype != want.dtype:
        return f"dtype {str(shard.dtype).replace('torch.', '')}"
    if (shard.shape != want.shape and shard.numel() == want.numel()
            and torch.equal(shard.reshape(-1), p.detach().chunk(world_size)[rank].reshape(-1))):
        return "unflattened"
    other = next((k for k, chunk in enumerate(chunks) if k != rank and shard.shape == chunk.shape
                  and torch.equal(shard, chunk)), None)
    if other is not None:
        return f"chunk {other}"
    if shard.shape == want.shape:
        index = int((shard.reshape(-1) != want.reshape(-1)).nonzero()[0])
        return f"values {index} {shard.reshape(-1)[index].item():.6g} {want.reshape(-1)[index].item():.6g}"
    return "other"


def _zero1_one(rank: int, zero1_init, zero1_step) -> dict:
    world_size = dist.get_world_size()
    model = _model()
    params = list(model.parameters())
    init_name, step_name = (getattr(fn, "__name__", default) for fn, default in ((zero1_init, "zero1_init"),
                                                                               (zero1_step, "zero1_step")))
    verdict = _zero1_init_verdict(rank, world_size, model, params, zero1_init, init_name)
    # every rank learns whether zero1_init went wrong on any rank before one starts the steps: a rank whose shards
    # are right must not wait in zero1_step's collectives for one that stopped
    wrong_anywhere = torch.tensor([int(isinstance(verdict, dict))])
    dist.all_reduce(wrong_anywhere, op=dist.ReduceOp.MAX)
    if isinstance(verdict, dict):
        return verdict
    if wrong_anywhere.item():
        return {"init_wrong_elsewhere": True}   # judged by what the rank that went wrong returned
    shards, optimizer = verdict
    kind, lrs = type(optimizer).__name__, sorted({group.get("lr") for group in optimizer.param_groups}, key=str)
    at_step = []   # the shards' gradients when optimizer.step() first runs in a zero1_step call: what the step
    #                used, whether or not zero1_step zeroes them afterwards

    def record_shard_grads(*_):
        if not at_step:
            at_step.append([_grad_copy(s) for s in shards])
            reduced["unwaited"] = sorted({index for index, work in pending if index not in reduced["waited_on"]})
    if hasattr(optimizer, "register_step_pre_hook"):   # torch optimizers; anything else is judged after the step
        optimizer.register_step_pre_hook(record_shard_grads)
    reduced: dict = {}   # what this step's all_reduce calls summed: set at each step below
    pending: list = []   # (p.grad's index, work) of this step's all_reduce calls with async_op=True

    def waited(index: int) -> None:
        if not at_step:   # the work waited for (RequestWatcher) before the optimizer stepped
            reduced["waited_on"].add(index)

    def watching_all_reduce(original):
        def all_reduce(*args, **kwargs):
            given = call_arguments(original, args, kwargs) or {}
            tensor = given.get("tensor")
            if torch.is_tensor(tensor):   # p.grad's storage (a view of it included), as p.grad is when the call runs
                grads = {p.grad.untyped_storage().data_ptr(): index for index, p in enumerate(params)
                         if p.grad is not None}
                index = grads.get(tensor.untyped_storage().data_ptr())
                if index is None:
                    reduced["other"] = True
                else:
                    reduced["grads"].add(index)
                    if not given["async_op"]:
                        reduced["waited_on"].add(index)
            work = original(*args, **kwargs)
            if torch.is_tensor(tensor) and index is not None and work is not None:
                pending.append((index, work))
                version, first = tensor._version, [True]

                def on_wait(index=index, tensor=tensor, version=version, first=first):
                    if first[0] and tensor._version != version:   # changed before the first wait: mid-sum
                        reduced["changed_in_flight"].add(index)
                    first[0] = False
                    waited(index)
                requests.watch(work, on_wait)
            return work
        return all_reduce

    gathers: list = []   # [work, waited] of this step's gathers with async_op=True (the updated shards into p)
    written: list = []   # (its name, whether an output is a parameter's storage) for each of this step's gathers

    def watching_gather(original):
        def gather(*args, **kwargs):
            given = call_arguments(original, args, kwargs) or {}
            outputs = given.get("tensor_list", given.get("output_tensor", given.get("tensor")))
            outputs = [outputs] if torch.is_tensor(outputs) else list(outputs or [])
            storages = {p.untyped_storage().data_ptr() for p in params}
            written.append((getattr(original, "__name__", "all_gather"), any(
                torch.is_tensor(output) and output.untyped_storage().data_ptr() in storages for output in outputs)))
            work = original(*args, **kwargs)
            if given.get("async_op") and work is not None:
                entry = [work, False]
                gathers.append(entry)
                requests.watch(work, lambda entry=entry: entry.__setitem__(1, True))
            return work
        return gather
    records = []
    for step, (x, y) in enumerate(_batches(world_size)):
        for p in params:
            p.grad = None
        F.mse_loss(model(x.chunk(world_size)[rank]), y.chunk(world_size)[rank]).backward()
        before = [p.detach().clone() for p in params]
        local = [p.grad.detach().clone() for p in params]
        at_step.clear()
        reduced.update(grads=set(), waited_on=set(), other=False, unwaited=None, changed_in_flight=set())
        pending.clear()
        gathers.clear()
        written.clear()
        with watching_requests() as requests, replacing_dist_calls({"all_reduce": watching_all_reduce, **{
                name: watching_gather for name in ("all_gather", "all_gather_into_tensor", "broadcast")}}):
            call_case(zero1_step, f"zero1_step(params, shards, optimizer) on rank {rank} of {world_size}, step {step}",
                      params, shards, optimizer, name=step_name)
        unwaited_gathers = sum(not waited for _, waited in gathers)
        if reduced["unwaited"] is None:   # no step pre-hook ran: what was never waited for at all
            reduced["unwaited"] = sorted({index for index, work in pending if index not in reduced["waited_on"]})
        for _, work in pending:   # the next step starts after this one's all-reduces
            work.wait()
        records.append({"before": before, "local": local, "params": [p.detach().clone() for p in params],
                        "all_reduced": dict(reduced),
                        "stepped": bool(at_step),
                        "shard_grads": at_step[0] if at_step else [_grad_copy(s) for s in shards],
                        "adam_values": optimizer_state_bytes(optimizer) // 4, "optimizer": kind, "lr": lrs,
                        "world_size": world_size, "unwaited_gathers": unwaited_gathers,
                        "gathered_elsewhere": sorted({name for name, _ in written})
                        if written and not any(into for _, into in written) else []})
        for work, _ in gathers:   # the next step starts after this one's gathers
            work.wait()
        if any(p.shape != old.shape for p, old in zip(params, before)):
            break   # the next forward would fail on the parameter's new shape: judged from this step's record
    return {"records": records}


def _grad_copy(shard) -> torch.Tensor | None:
    return None if getattr(shard, "grad", None) is None else shard.grad.detach().clone()


def _reference(world_size: int) -> tuple[list[list[torch.Tensor]], list[list[torch.Tensor]]]:
    """One process on the whole batch of `world_size` ranks: the mean gradients before each step and the
    parameters after it."""
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    grads, params = [], []
    for x, y in _batches(world_size):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        optimizer.step()
        params.append([p.detach().clone() for p in model.parameters()])
    return grads, params


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-7)


def check_zero1(zero1_init, zero1_step, timeout: float = 30.0) -> None:
    """Check ZeRO stage 1 by hand: `zero1_init(params, rank, world_size)` and `zero1_step(params, shards, optimizer)`.

    On each of 2 ranks, zero1_init returns (shards, optimizer): one fp32 tensor per parameter,
    this rank's flattened chunk (chunk `rank` of `p.reshape(-1).chunk(world_size)`), and Adam
    (lr=0.01) over those shards only. After every backward, zero1_step must average the
    gradients over ranks, give each shard its slice as `.grad`, step, and all-gather the
    updated shards back into every rank's full parameters. Every rank's parameters must equal
    one process training on the whole batch, step for step. An answer that hangs is stopped
    `timeout` seconds after every rank started the check's runs: a right answer takes well under
    a second, 2 to 7 s the first time in a kernel on a busy 2-core machine (Adam's first step
    imports torch._dynamo on every rank).

    Introduced in notebooks/09-zero-and-fsdp.ipynb.
    """
    ensure_written(zero1_init)
    ensure_written(zero1_step)
    name = getattr(zero1_step, "__name__", "zero1_step")
    init_name = getattr(zero1_init, "__name__", "zero1_init")
    refuse_written_split(zero1_init, init_name, "world_size, the argument (one shard per rank)")
    refuse_written_divisor(zero1_init, init_name, "a parameter's size", "world_size, the argument (one shard per rank)",
                           divided=("numel", "shape", "size(", "len("))
    refuse_written_divisor(zero1_step, name, "a gradient", "dist.get_world_size(), the number of ranks")
    refuse_written_split(zero1_step, name, "dist.get_world_size(), the number of ranks (one shard per rank)")
    results = run_zero1_answers(((zero1_init, zero1_step),), timeout, name, _explain_a_raise)[0]
    passed(judge_zero1(name, init_name, results, division_into_a_new_tensor(zero1_step)))


def judge_zero1(name: str, init_name: str, results: dict[int, list[dict]], division: str | None = None) -> str:
    """Feedback for one (zero1_init, zero1_step) answer's results ({world size: [rank] -> its records},
    `run_zero1_answers`): raise CheckFailed at the first world size it gets wrong (2 ranks first; on 3, saying that 2
    were right), or return the ✓ text. `division`: a line of zero1_step that divides a gradient into a new tensor
    (`division_into_a_new_tensor`), evidence for a gradient left as the sum."""
    judge_in_order([(size, results[size]) for size in WORLD_SIZES],
                   lambda _, records: _judge_world(name, init_name, records, division), _second_run_note)
    return (f"{name}: ZeRO-1 on {' and on '.join(map(str, WORLD_SIZES))} ranks == one process for {STEPS} Adam steps, "
            f"with Adam state for 1/world_size of the parameters on each rank")


def _judge_world(name: str, init_name: str, results: list[dict], division: str | None) -> None:
    """CheckFailed at the first thing one world size's records ([rank] -> `_zero1_one`'s) get wrong."""
    world_size = len(results)
    for rank in range(world_size):
        if "bad_init" in results[rank]:
            raise CheckFailed(f"rank {rank}: {init_name} returned {results[rank]['bad_init']}; expected a pair "
                              "(shards, optimizer): this rank's shard of every parameter, and Adam over them.")
        if "bad_optimizer" in results[rank]:
            raise CheckFailed(f"rank {rank}: {init_name} returned {results[rank]['bad_optimizer']} as its optimizer; "
                              "expected a torch.optim.Optimizer (Adam over this rank's shards), as (shards, "
                              "optimizer).")
        if "bad_shards" in results[rank]:
            raise CheckFailed(f"rank {rank}: {init_name} returned {results[rank]['bad_shards']} as its shards; "
                              "expected a list of tensors, one shard per parameter in the order of params, as "
                              "(shards, optimizer).")
        if "bad_count" in results[rank]:
            count, wanted, iterator = results[rank]["bad_count"]
            hint = ("\nHint: your shards are a generator (or another iterator): torch.optim.Adam(shards) read it to "
                    "the end, so nothing was left to return. Make them a list, [... for p in params], before "
                    "building Adam over it." if iterator and count == 0 else "")
            raise CheckFailed(f"rank {rank}: {init_name} returned {count} shards for {wanted} parameters; expected "
                              f"one shard per parameter, in the order of params.{hint}")
        if "bad_shard" in results[rank]:
            param, got, whole, shape, kind = results[rank]["bad_shard"]
            if kind == "whole":
                raise CheckFailed(f"rank {rank}: {init_name}'s shard of {param!r} is the whole parameter, shape "
                                  f"{whole}: every rank would hold and step the full optimizer.\nHint: ZeRO-1 gives "
                                  f"each rank chunk {rank} of each flattened parameter (shape {shape}) and builds Adam "
                                  "over those shards only, so every rank keeps 1/world_size of its state.")
            if kind.startswith("values "):
                index, value, expected = kind.split()[1:]
                raise CheckFailed(f"rank {rank}: {init_name}'s shard of {param!r} has the right shape, {shape}, but "
                                  f"not the values of chunk {rank} of p.reshape(-1).chunk(world_size): element "
                                  f"{index} is {value}, expected {expected}.\nHint: each shard is a copy of this "
                                  "rank's chunk of the flattened parameter, its values unchanged.")
            hint = ("it holds the right values, but chunked along the parameter's first dimension: flatten the "
                    "parameter first, so the shard lines up with the slice of the flattened gradient that "
                    f"{name} gives it" if kind == "unflattened" else
                    "5 elements on 2 ranks split 3 + 2, as tensor.chunk does: a split of numel // world_size "
                    "elements per rank leaves the last element out. Take chunk rank of p.reshape(-1).chunk("
                    "world_size), here and wherever the step slices or gathers" if kind == "uneven" else
                    "it is the parameter padded with zeros to a multiple of world_size and cut into equal shards, "
                    "as FSDP does; this exercise's shards are tensor.chunk's, uneven (5 elements on 2 ranks: 3 + 2) "
                    "and unpadded. Take chunk rank of p.reshape(-1).chunk(world_size), here and wherever the step "
                    "slices or gathers" if kind == "padded" else
                    f"it holds chunk {kind.split()[1]}, rank {kind.split()[1]}'s: take chunk rank, the argument "
                    f"zero1_init is given ({rank} here)" if kind.startswith("chunk ") else
                    "its values are right, but it is a view into p's own memory (detach() and reshape() share it): "
                    "the shard is the optimizer's fp32 master copy, kept apart from the parameter, which in mixed "
                    "precision is not fp32 at all. Take a copy, .clone() (then requires_grad_())" if kind == "view" else
                    f"it is {kind.split()[1]}: the shards are fp32, as the parameters and their gradients are "
                    "(clone() keeps the dtype)" if kind.startswith("dtype ") else
                    "each shard is this rank's chunk of the flattened parameter, an independent copy")
            raise CheckFailed(f"rank {rank}: {init_name}'s shard of {param!r} is {got}; expected shape {shape}, chunk "
                              f"{rank} of p.reshape(-1).chunk(world_size).\nHint: {hint}.")
    grads, params = _reference(world_size)
    names = [n for n, _ in _model().named_parameters()]
    n_params = sum(p.numel() for p in _model().parameters())
    for step in range(STEPS):
        for rank in range(world_size):   # a sum read while it was still arriving: wrong or right by timing alone
            changed = sorted(results[rank]["records"][step]["all_reduced"].get("changed_in_flight", ()))
            if changed:
                raise CheckFailed(f"rank {rank} of {world_size}, step {step}: the gradient of {names[changed[0]]!r} "
                                  "was changed in place (a division?) after its dist.all_reduce(..., async_op=True) "
                                  "started and before its work was waited for: what the sum holds then depends on "
                                  "timing, so its values are wrong in some runs and right in others.\nHint: wait for "
                                  "the work (work.wait()) before touching the tensor it sums: divide after the wait.")
        # every rank's shard gradients and optimizer first, then every rank's parameters: a wrong gradient on one
        # rank also spoils the shard it sends to the others, and the gradient names the mistake
        for rank in range(world_size):
            _check_step_grads(results[rank]["records"][step], rank, step, grads[step], names, n_params, world_size,
                              division)
        for rank in range(world_size):
            _check_step_params(results[rank]["records"][step], rank, step, params[step], names, world_size)


def _check_step_grads(got: dict, rank: int, step: int, grads, names, n_params: int, world_size: int,
                      division: str | None = None) -> None:
    """CheckFailed at the first thing rank `rank` got wrong in step `step` before its parameters: the shards'
    gradients when the optimizer stepped, and the optimizer's state. `division`: a line of zero1_step that divides a
    gradient into a new tensor (`division_into_a_new_tensor`), evidence for a gradient left as the sum."""
    where = f"rank {rank} of {world_size}, step {step}"
    full = 2 * n_params   # Adam's exp_avg and exp_avg_sq for every value; this rank's chunks of them:
    mine = 2 * sum(p.detach().reshape(-1).chunk(world_size)[rank].numel() for p in _model().parameters())
    if len(got["shard_grads"]) != len(names):
        raise CheckFailed(f"{where}: zero1_init returned {len(got['shard_grads'])} shards for {len(names)} "
                          "parameters; return one shard per parameter, in the order of params.")
    missing = [name for name, grad in zip(names, got["shard_grads"]) if grad is None]
    if missing and not got["stepped"]:
        raise CheckFailed(f"{where}: zero1_step never called optimizer.step(), and the shard of {missing[0]!r} has "
                          "no .grad.\nHint: give every shard its slice of the averaged gradient as its .grad, then "
                          "call optimizer.step(), before the all-gather.")
    if missing:
        state = " (it holds no state at all)" if got["adam_values"] == 0 else ""
        raise CheckFailed(f"{where}: the shard of {missing[0]!r} has no .grad when the optimizer steps, so Adam "
                          f"skipped it{state}.\nHint: give every shard its slice of the averaged gradient as its "
                          ".grad before optimizer.step().")
    if got["adam_values"] == full:
        raise CheckFailed(f"{where}: the optimizer holds Adam state for all {n_params} parameter values "
                          f"({full} numbers), expected {mine}: every rank steps the full optimizer.\nHint: "
                          "ZeRO-1 builds Adam over this rank's shards only (a flattened chunk of each parameter), "
                          "so it keeps 1/world_size of the state.")
    if got["adam_values"] == 0 and got["optimizer"] == "Adam":
        raise CheckFailed(f"{where}: every shard has its .grad, but the optimizer holds no state: it never stepped."
                          "\nHint: call optimizer.step() in zero1_step, after the shards' .grad are set and before "
                          "the all-gather.")
    if got["adam_values"] != mine:
        kind = f" (yours is {got['optimizer']})" if got["optimizer"] != "Adam" else ""
        raise CheckFailed(f"{where}: the optimizer holds {got['adam_values']} Adam state values, expected {mine} "
                          f"(exp_avg and exp_avg_sq for this rank's {mine // 2} values).\nHint: build "
                          f"torch.optim.Adam{kind} over the shards zero1_init returns, one chunk per parameter.")
    for index, name in enumerate(names):
        want = grads[index].reshape(-1).chunk(world_size)[rank]
        grad = got["shard_grads"][index]
        local = got["local"][index].reshape(-1).chunk(world_size)[rank]
        if grad.shape != want.shape:
            raise CheckFailed(f"{where}: the shard of {name!r} has a gradient of shape {tuple(grad.shape)}, expected "
                              f"{tuple(want.shape)}: this rank's slice, p.grad.reshape(-1).chunk(world_size)[rank].")
        if _close(grad, want):
            continue
        if _close(grad, want / world_size):
            hint = (f"it is the average divided by world_size again: the gradients were averaged twice. Divide by "
                    f"world_size once, after the all_reduce (or slice the sum and divide the slice); Adam hides "
                    f"the scale in the parameters, so only the gradient shows it")
        elif _close(grad, want * world_size) and division:
            hint = (f"it is the SUM over ranks. Your line `{division}` divides into a NEW tensor, and the shard's "
                    "gradient is sliced from p.grad, which still holds the sum: divide in place (p.grad /= "
                    "world_size) or slice the divided tensor")
        elif _close(grad, want * world_size):
            hint = "it is the SUM over ranks: divide by world_size after dist.all_reduce, to get DDP's mean"
        elif _close(grad, local):
            hint = ("it is this rank's own gradient: all-reduce p.grad over the ranks (and divide by world_size) "
                    "before taking your slice")
        elif _own_share_where_wrong(grad, want, local / world_size):
            hint = "where it differs, it is this rank's own gradient divided by world_size: " + _own_share_hint(
                got["all_reduced"], index, division)
        else:
            hint = ("expected this rank's chunk of the flattened gradient averaged over the ranks (the sum over the "
                    "ranks divided by world_size)")
        raise CheckFailed(f"{where}: the gradient of the shard of {name!r} {_difference(grad, want)}.\nHint: {hint}.")
    if got["all_reduced"]["unwaited"]:
        name = names[got["all_reduced"]["unwaited"][0]]
        raise right_by_luck(where, f"the gradient of the shard of {name!r}", "dist.all_reduce(p.grad, async_op=True)",
                            "optimizer.step() reads the gradient")


def _own_share_hint(reduced: dict, index: int, division: str | None) -> str:
    """Why a shard's gradient is this rank's own gradient / world_size, from what zero1_step handed to all_reduce
    (`reduced`: the parameters whose p.grad it summed, those of them in a call without async_op, and whether it
    summed any other tensor) and `division` (`division_into_a_new_tensor`)."""
    if index not in reduced["grads"] and not reduced["other"]:
        return ("the sum over the ranks never reached this rank there. Every rank needs the sum: dist.all_reduce "
                "p.grad (dist.reduce, for one, leaves it on dst only), then divide")
    if index not in reduced["grads"]:
        return ("dist.all_reduce ran, but on another tensor than p.grad (a clone or a copy of it): all_reduce sums "
                "in place into the tensor it is given, so p.grad, which the shard's gradient was sliced from, kept "
                "this rank's own gradient. All-reduce p.grad itself, or slice the tensor you all-reduced")
    if division:
        return (f"dist.all_reduce(p.grad) ran, but your line `{division}` divides into a NEW tensor: made before "
                "the all_reduce, it is a copy that keeps this rank's own gradient (all_reduce sums in place into "
                "p.grad only), and the shard's gradient holds that stale copy's values. All-reduce p.grad first, "
                "then divide, and slice what holds the sum")
    if index not in reduced["waited_on"]:
        return ("dist.all_reduce(p.grad, async_op=True) ran, but the shard's gradient was read before the sum "
                "arrived: it returns at once. Call .wait() on the work it returns before reading p.grad")
    return ("dist.all_reduce(p.grad) ran, yet where the shard's gradient differs it holds this rank's own gradient "
            "divided by world_size, not the sum's share: it was taken from values p.grad held before the sum. "
            "Slice and divide p.grad after the all_reduce")


def _own_share_where_wrong(grad: torch.Tensor, want: torch.Tensor, own_share: torch.Tensor) -> bool:
    """Whether every value of `grad` that differs from `want` is `own_share` there (this rank's gradient / world_size:
    all of it where nothing was summed, part of it where the sum reached only part of the tensor)."""
    differs = ~torch.isclose(grad, want, rtol=1e-5, atol=1e-7)
    return bool(differs.any()) and _close(grad[differs], own_share[differs])


def _check_step_params(got: dict, rank: int, step: int, params, names, world_size: int) -> None:
    """CheckFailed at the first parameter rank `rank` holds wrong after step `step` (its shape, then its values)."""
    where = f"rank {rank} of {world_size}, step {step}"
    for index, name in enumerate(names):
        value, want, before = got["params"][index], params[index], got["before"][index]
        if value.shape != before.shape:
            hint = ("it holds the right values, flattened: reshape the gathered vector to the parameter's shape "
                    "(torch.cat(...).view(p.shape)), or all-gather into views of p, "
                    "list(p.detach().view(-1).chunk(world_size))" if _close(value.reshape(-1), want.reshape(-1))
                    else "the all-gather must fill the parameter in place, keeping its shape: pass "
                    "list(p.detach().view(-1).chunk(world_size)) as the output list")
            raise CheckFailed(f"{where}: after zero1_step p.data of {name!r} has shape {tuple(value.shape)}, the "
                              f"parameter's is {tuple(before.shape)}.\nHint: {hint}.")
        if _close(value, want):
            continue
        raise CheckFailed(f"{where}: parameter {name!r} after the step {_difference(value, want)}."
                          f"\nHint: {_params_hint(value, want, before, rank, got)}")
    if got["unwaited_gathers"]:
        raise right_by_luck(where, "the parameters", "an all-gather called with async_op=True", "zero1_step returns")


def _params_hint(value: torch.Tensor, want: torch.Tensor, before: torch.Tensor, rank: int, got: dict) -> str:
    world_size = got["world_size"]
    got_chunks = value.reshape(-1).chunk(world_size)
    want_chunks = want.reshape(-1).chunk(world_size)
    old_chunks = before.reshape(-1).chunk(world_size)
    if got["unwaited_gathers"]:   # unchanged, or caught while gloo filled them: which one depends on timing
        state = "did not change" if _close(value, before) else "were only partly updated"
        return (f"the parameters {state} when zero1_step returned: a collective called with async_op=True "
                "returned a work that was never waited for, and its values arrive only when you call .wait() on it: "
                "wait for it before zero1_step returns.")
    if _close(value, before) and got.get("gathered_elsewhere"):
        called = " and ".join(f"dist.{name}" for name in got["gathered_elsewhere"])
        return (f"the parameters did not change, though zero1_step called {called}: it writes into the tensors it "
                "is given (new ones from torch.empty_like, slices of p.grad, a copy), and none of them was p's. "
                "Gather into views of p, list(p.detach().view(-1).chunk(world_size)), or copy what arrived into p.")
    if _close(value, before):
        return ("the parameters did not change: after optimizer.step() all-gather the updated shards into p "
                "(the optimizer only updated the shards).")
    moved, want_moved = value - before, want - before
    scale = float((moved * want_moved).sum() / (want_moved * want_moved).sum())
    if not 0.98 < scale < 1.02 and torch.allclose(moved, scale * want_moved, rtol=1e-3, atol=1e-7):
        lr = got["lr"][0] if len(got["lr"]) == 1 else got["lr"]
        if got["lr"] != [LR]:
            return (f"every value moved {scale:.3g} times as far as one process's Adam step, and your optimizer's "
                    f"learning rate is {lr}: the check's Adam uses lr={LR} (Adam's step is proportional to lr).")
        return (f"every value moved {scale:.3g} times as far as one process's Adam step with the same lr: something "
                "scales the update itself (scaling the gradients would not: Adam's step does not change when its "
                "gradient is scaled).")
    source = [next((k for k, w in enumerate(want_chunks) if _close(g, w)), None) for g in got_chunks]
    if None not in source and source != list(range(world_size)):
        slots = ", ".join(f"slot {j} holds rank {k}'s shard" for j, k in enumerate(source) if j != k)
        return (f"the updated shards landed in the wrong slots ({slots}): slot k of the flattened parameter must "
                "get rank k's shard. all_gather fills its output list in rank order; pass "
                "list(p.detach().view(-1).chunk(world_size)) as the list, in that order.")
    if _close(got_chunks[rank], want_chunks[rank]) and all(
            _close(g, o) for k, (g, o) in enumerate(zip(got_chunks, old_chunks)) if k != rank):
        return ("only this rank's own slice changed: the other ranks' updated shards never arrived. All-gather "
                "every rank's shard into the full parameter after the step.")
    if got["optimizer"] != "Adam":
        return (f"your optimizer is {got['optimizer']}; the check compares with one process's torch.optim.Adam "
                f"(lr={LR}, no weight decay), the optimizer the exercise asks for.")
    return ("expected one process's Adam step on the whole batch: average the gradients, step your shard, "
            "all-gather the shards back into p in rank order.")


def _difference(got: torch.Tensor, want: torch.Tensor) -> str:
    """Where got first differs from want (flattened index), for 'got ..., expected ...' lines."""
    got_flat, want_flat = got.reshape(-1), want.reshape(-1)
    differs = ~torch.isclose(got_flat, want_flat, rtol=1e-4, atol=1e-6)
    index = int(differs.nonzero()[0]) if differs.any() else 0
    return (f"(shape {tuple(want.shape)}), flattened element {index}: got {got_flat[index].item():.6g}, expected "
            f"{want_flat[index].item():.6g}")

"""Checks for the exercises of notebooks/01-data-vs-model-parallelism.ipynb.

    ddp_lab.checks.lesson01.check_memory_per_device(memory_per_device)
    ddp_lab.checks.lesson01.check_data_parallel_backward(data_parallel_backward)

Introduced in notebooks/01-data-vs-model-parallelism.ipynb.
"""

from __future__ import annotations

import numbers

import torch
import torch.distributed as dist

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (CaseFailed, answer_of, answer_value, call_case, describe,
                                   division_into_a_new_tensor, ensure_written, first_mismatch, gloo_size_abort,
                                   package_answer_used, refuse_written_split, run_answers_on_ranks, times_of,
                                   uniform_ratio)
from ddp_lab.course.device_memory import COMPONENTS, SHARDED, STRATEGIES, memory_per_device
from ddp_lab.instruments.collectives import (call_arguments, replacing_dist_calls, watching_collectives,
                                             watching_requests)

# world sizes 3 and 8: not 4, so a count of values (4 bytes each) never looks like a split over the devices; the
# activations are not the params over 2 or 4, so bytes counted from the other argument never look like 16-bit values
# or a count of values
MEMORY_CASES = ((1_200_000, 330_000, 3), (7_000_000_000, 2_000_000_000, 8))

_WHY_FULL = {
    "params": "every device runs the whole model, so it needs every weight",
    "grads": "backward produces a gradient for every weight the device holds",
    "optimizer": "every device updates every weight, so it keeps Adam's state for all of them",
    "activations": "every device runs the whole batch through its layers",
}


_NOUN = {"params": "the params", "grads": "the grads", "optimizer": "the optimizer state",
         "activations": "the activations"}


# --- memory arithmetic ---------------------------------------------------------------------

def check_memory_per_device(fn) -> None:
    """Check `fn(n_params, n_activations, world_size, strategy)` -> {component: bytes}.

    Compared with `ddp_lab.course.device_memory.memory_per_device` for every strategy in
    ('single', 'data', 'model', 'zero1', 'zero2', 'zero3') on two model sizes. An answer that is,
    or calls, that function is refused.

    Introduced in notebooks/01-data-vs-model-parallelism.ipynb.
    """
    ensure_written(fn)
    name = getattr(fn, "__name__", "memory_per_device")
    package = answer_of(fn, (memory_per_device,))
    if package:
        raise package_answer_used(name, [package], how="is")
    for n_params, n_activations, world_size in MEMORY_CASES:
        for strategy in STRATEGIES:
            call = f"{name}({n_params:_}, {n_activations:_}, world_size={world_size}, strategy={strategy!r})"
            got = answer_value(fn, (n_params, n_activations, world_size, strategy), name, f"computing {call}",
                               (memory_per_device,), lambda error: _raised_hint(error, strategy))
            expected = memory_per_device(n_params, n_activations, world_size, strategy)
            if not isinstance(got, dict) or set(got) != set(COMPONENTS):
                keys = sorted(got) if isinstance(got, dict) else None
                raise CheckFailed(f"{call} should return a dict with keys {list(COMPONENTS)}, got "
                                  f"{'keys ' + str(keys) if keys is not None else describe(got)}.")
            odd = [c for c in COMPONENTS if not isinstance(got[c], numbers.Real) or isinstance(got[c], bool)]
            if odd:
                raise CheckFailed(f"{call}[{odd[0]!r}] is {describe(got[odd[0]])}; expected a whole number of "
                                  "bytes.")
            unit = _unit_of(got, expected)
            if unit is not None:
                raise CheckFailed(f"{call}: expected {expected}, got {got}: every component is the expected bytes "
                                  f"in {unit}.\nHint: return bytes, as ints; leave any conversion to {unit} to "
                                  "what prints them.")
            floats = [c for c in COMPONENTS if isinstance(got[c], float)]
            if floats:
                raise CheckFailed(f"{call}[{floats[0]!r}] is {got[floats[0]]!r}, a float; bytes are whole numbers.\n"
                                  "Hint: return ints: / always returns a float (// divides whole numbers), and so "
                                  "does arithmetic with a float such as 2.0.")
            if got != expected and all(got[c] * 4 == expected[c] for c in COMPONENTS):
                raise CheckFailed(f"{call}: expected {expected}, got {got}.\nHint: return bytes, not numbers "
                                  "of values: fp32 takes 4 bytes per value.")
            for component in COMPONENTS:
                if got[component] != expected[component]:
                    whole = memory_per_device(n_params, n_activations, world_size, "single")[component]
                    swapped = memory_per_device(n_activations, n_params, world_size, strategy)[component]
                    hint = (_other_count_hint(component, got[component], swapped, n_params, n_activations)
                            or _memory_hint(strategy, component, got[component], expected[component], n_params,
                                            world_size, whole))
                    raise CheckFailed(f"{call}[{component!r}]: expected {expected[component]:_} bytes, "
                                      f"got {got[component]:_}.\nHint: {hint}")
    passed(f"{name} matches the reference for {', '.join(STRATEGIES)} on {len(MEMORY_CASES)} model sizes")


_UNITS = {"kB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def _unit_of(got: dict, expected: dict) -> str | None:
    """The units (kB, MB, GB, KiB, MiB, GiB) in which every component of `got` is the expected bytes, as a fraction
    or rounded down to a whole number ("MB or MiB" where whole numbers fit both); None where there is none, or where
    every component is 0 (what a placeholder returns says nothing of units)."""
    if not any(isinstance(got[c], numbers.Real) and got[c] for c in COMPONENTS):
        return None
    units = [unit for unit, size in _UNITS.items()
             if all(isinstance(got[c], numbers.Real) and not isinstance(got[c], bool)
                    and 0 <= expected[c] - got[c] * size < size * (1 + 1e-9) for c in COMPONENTS)]
    return " or ".join(units) or None


def _raised_hint(error: Exception, strategy: str) -> str | None:
    """The hint for an answer that raised an error whose message is the strategy itself (a KeyError of a dict of
    strategies, the lesson's `raise ValueError(strategy)`): a strategy the answer does not handle; else None."""
    if error.args != (strategy,):
        return None
    lesson = " (the lesson's version knew only the first three)" if strategy.startswith("zero") else ""
    return (f"the answer has no case for strategy {strategy!r}: handle all six, "
            f"{', '.join(map(repr, STRATEGIES))}{lesson}.")


def _other_count_hint(component: str, got, swapped: int, n_params: int, n_activations: int) -> str | None:
    """The hint for a component whose bytes are what the other count gives (`swapped`: the reference with n_params
    and n_activations exchanged): the activations counted from n_params, or the model's state from n_activations;
    None otherwise."""
    if got != swapped:
        return None
    if component == "activations":
        used, wanted, count = "n_params", "n_activations", n_params
    else:
        used, wanted, count = "n_activations", "n_params", n_activations
    return (f"that is {_NOUN[component]} counted from {used} ({count:_}), not {wanted}: the params, grads and "
            "optimizer state grow with the parameters (n_params), the activations with the values saved for backward "
            "(n_activations); the arguments come in the order (n_params, n_activations, world_size, strategy).")


def _memory_hint(strategy: str, component: str, got, expected, n_params: int, world_size: int, whole: int) -> str:
    """The hint for a wrong component; `whole`: its bytes on one device that holds all of it."""
    sharded = component in SHARDED[strategy]
    if component == "optimizer" and got * 2 == expected:
        return ("Adam keeps two values per parameter (exp_avg and exp_avg_sq): 8 bytes per parameter in "
                "fp32, twice the weights.")
    if strategy == "single" and got * world_size == expected:
        return (f"'single' is one device, and it holds all {_NOUN[component]}; this value is that divided by "
                f"world_size ({world_size}), which counts the devices of the other strategies and does not apply "
                "to 'single'.")
    if sharded and got == expected * world_size:
        return (f"under {strategy!r} each device keeps only 1/{world_size} of the {component}: divide by "
                "world_size.")
    if not sharded and got * world_size == expected:
        reason = _WHY_FULL[component]
        if strategy.startswith("zero"):
            reason = (f"{strategy} shards only {', '.join(c for c in SHARDED[strategy] if c != 'activations')}"
                      f" (+ activations, as data parallel does); the {component} stay whole on every device")
        return f"under {strategy!r} every device holds all {_NOUN[component]}: {reason}."
    if got * 2 == expected and world_size != 2:   # 2: the bytes of a 16-bit value, not a count of devices
        return (f"that is {_NOUN[component]} at 2 bytes per value (16-bit, as bf16 and fp16 store them); this "
                "exercise counts fp32: 4 bytes per value.")
    if got * 4 == expected:
        return (f"that is the number of {component} values: return bytes, 4 per fp32 value (and Adam's 2 values "
                "per parameter).")
    per_device = world_size if sharded else 1
    if component == "optimizer" and (got * per_device) % n_params == 0:
        return (f"that is {got * per_device // n_params} bytes per parameter"
                f"{f', divided by world_size ({world_size})' if sharded else ''}; Adam keeps 2 fp32 values per "
                "parameter (exp_avg and exp_avg_sq): 8 bytes.")
    noun = _NOUN[component]
    holds = (f"each of the {world_size} devices holds 1/{world_size} of {noun}" if sharded
             else f"the one device holds all {noun}" if strategy == "single" else f"every device holds all {noun}")
    divisor = next((k for k in range(2, 65) if got == whole // k), None)
    if divisor is not None:
        return (f"that is all {noun} ({whole:_} bytes) divided by {divisor}; under {strategy!r} {holds}"
                f"{': divide by world_size' if sharded else ''}.")
    if got > whole and got % whole == 0:
        return f"that is all {noun} ({whole:_} bytes) times {got // whole}; under {strategy!r} {holds}."
    return (f"under {strategy!r} {holds}; weights and gradients take 4 bytes per parameter, the optimizer state 8 "
            "(Adam), activations 4 per value.")


# --- data parallel backward ------------------------------------------------------------------

# 7 does not divide by 2 ranks (shards of 4 and 3). 16 leaves no shard size written as a number right on 2 ranks:
# one under 8 (4, the shard of 8 and of 7) leaves samples of 16 unused; one of 8 or more gives rank 0 all of 8 or 7.
BATCHES = (8, 7, 16)


def make_model() -> torch.nn.Module:
    """The small model the data-parallel check trains (the same on every rank)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def make_batch(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch (x, y) the data-parallel check uses; every rank gets all of it."""
    generator = torch.Generator().manual_seed(size)
    return torch.randn(size, 3, generator=generator), torch.randn(size, 1, generator=generator)


def _what_is_reduced(tensor, params: list) -> dict:
    """What a tensor handed to dist.all_reduce is, seen when the call starts: one of the parameters' gradients
    ("grad", shares its storage), a parameter ("param"), a tensor autograd tracks ("tracked": a loss, an output), a
    copy of a gradient, maybe scaled ("copy"), all the gradients flattened into one ("flat"), or "other"."""
    if not torch.is_tensor(tensor):
        return {"kind": "other", "shape": None}
    storage = tensor.untyped_storage().data_ptr()
    for position, p in enumerate(params):
        if p.grad is not None and p.grad.untyped_storage().data_ptr() == storage:
            return {"kind": "grad", "position": position}
        if p.untyped_storage().data_ptr() == storage:
            return {"kind": "param", "position": position}
    shape = tuple(tensor.shape)
    if tensor.requires_grad:
        return {"kind": "tracked", "shape": shape}
    values = tensor.detach().float()
    grads = [p.grad.detach() for p in params if p.grad is not None]
    if any(g.shape == values.shape and uniform_ratio(values, g) not in (None, 0.0) for g in grads):
        return {"kind": "copy", "shape": shape}
    if grads and values.dim() == 1 and values.numel() == sum(g.numel() for g in grads) and uniform_ratio(
            values, torch.cat([g.flatten() for g in grads])) not in (None, 0.0):
        return {"kind": "flat", "shape": shape}
    return {"kind": "other", "shape": shape}


def _data_parallel_runner(rank: int, answers: tuple) -> list[list[dict]]:
    """Each answer in turn on this rank: [answer][batch] -> what `_data_parallel_one` saw."""
    return [_data_parallel_one(fn) for fn in answers]


def _data_parallel_one(fn) -> list[dict]:
    """Run fn on every batch of BATCHES, each with a fresh model: the rows it ran the model on, the gradients it left,
    which gradients a backward computed, what dist.all_reduce was given, the async work handles it never used, the
    parameters whose values it changed."""
    reports = []
    for size in BATCHES:
        model = make_model()
        params = list(model.parameters())
        seen = []
        copies: list[bool] = []   # per forward: whether it ran on another module than `model` (a copy of it)

        def on_forward(module, args, model=model):
            seen.append(args[0].detach().clone())
            copies.append(module is not model)   # a deepcopy of the model carries this hook with it

        model.register_forward_pre_hook(on_forward)
        computed: set[int] = set()   # the parameters whose gradient a backward computed
        stored: set[int] = set()     # the parameters whose gradient a backward stored in p.grad
        for position, p in enumerate(params):
            p.register_hook(lambda grad, position=position: computed.add(position))
            p.register_post_accumulate_grad_hook(lambda p, position=position: stored.add(position))
        x, y = make_batch(size)
        given = {"x": x.clone(), "y": y.clone()}   # the batch as handed over, to see one the answer wrote into
        reduced: list[dict] = []     # what each dist.all_reduce was given, its op, and async_op
        works: list[list] = []       # [an async all_reduce's work handle, whether the answer used it]
        called: set[str] = set()
        none_given: list[bool] = []   # for each None handed to dist.all_reduce: whether a backward had run

        def all_reduce(original):
            def call(*args, **kwargs):
                given = call_arguments(original, args, kwargs)
                if given is None or given["tensor"] is None:   # torch raises its own error
                    if given is not None:
                        none_given.append(bool(computed))
                    return original(*args, **kwargs)
                async_op = bool(given["async_op"])
                reduced.append({**_what_is_reduced(given["tensor"], params),
                                "op": str(given["op"]).rpartition(".")[2], "async": async_op})
                work = original(*args, **kwargs)
                if async_op and work is not None:
                    works.append([work, False])
                    requests.watch(work, lambda entry=works[-1]: entry.__setitem__(1, True))
                return work
            return call

        with watching_requests() as requests, replacing_dist_calls({"all_reduce": all_reduce}), \
                watching_collectives({"reduce": (0, "tensor")}, lambda name, _: called.add(name)):
            try:
                call_case(fn, f"running a batch of {size} samples", model, x, y)
            except CaseFailed as failed:   # read by _explain_raised
                failed.none_before_backward = bool(none_given) and not none_given[0]
                raise
        grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
        given_weights = make_model().parameters()
        moved = [position for position, (p, q) in enumerate(zip(params, given_weights))
                 if p.dtype == q.dtype and not torch.equal(p.detach(), q.detach())]
        unused = sum(not used for _, used in works)
        for work, _ in works:   # let what the answer left running finish before the next batch
            work.wait()
        reports.append({"seen": torch.cat(seen) if seen else torch.empty(0, 3), "grads": grads,
                        "computed": sorted(computed), "stored": sorted(stored),
                        "copy_ran": bool(copies) and all(copies), "reduced": reduced, "unused_works": unused,
                        "async_works": len(works), "called": sorted(called), "weights_changed": moved,
                        "changed": [n for n, t in (("x", x), ("y", y)) if not torch.equal(t, given[n])]})
    return reports


def _reference_grads(x: torch.Tensor, y: torch.Tensor, weights=None) -> list[torch.Tensor]:
    """Gradients of the mean squared error; `weights` = per-shard (rows, weight) for a mean of means."""
    model = make_model()
    if weights is None:
        loss = torch.nn.functional.mse_loss(model(x), y)
    else:
        loss = sum(w * torch.nn.functional.mse_loss(model(x[rows]), y[rows]) for rows, w in weights)
    loss.backward()
    return [p.grad for p in model.parameters()]


def _sample_indices(seen: torch.Tensor, x: torch.Tensor) -> list[int]:
    """The batch rows a rank ran the model on, each once (a second forward of a row, e.g. a look at the predictions
    under no_grad, uses no other sample)."""
    return sorted({int(i) for row in seen for i in (row == x).all(1).nonzero().flatten()[:1]})


def check_data_parallel_backward(fn, world_size: int = 2, timeout: float = 30.0) -> None:
    """Check `fn(model, x, y)`: each rank runs only its shard, and every rank ends with the full-batch gradient.

    The gradient must equal that of `mse_loss(model(x), y)` over the whole batch (a mean),
    for batches of 8, 7 and 16 samples on 2 ranks, in the parameters' dtype, with the weights left
    as they were given. A split into a number of shards written in the code (`x.tensor_split(2)`)
    is refused before any rank starts.

    Introduced in notebooks/01-data-vs-model-parallelism.ipynb.
    """
    ensure_written(fn)
    name = getattr(fn, "__name__", "data_parallel_backward")
    refuse_written_split(fn, name, "the number of ranks, dist.get_world_size()")
    results = run_data_parallel_answers((fn,), world_size, timeout, name)[0]
    passed(judge_data_parallel_backward(name, results, division_into_a_new_tensor(fn)))


def run_data_parallel_answers(answers: tuple, world_size: int = 2, timeout: float = 30.0,
                              name: str = "data_parallel_backward") -> list[list[list[dict]]]:
    """Run each answer on the same ranks (one launch); [answer][rank][batch] -> what its run on that batch showed."""
    return run_answers_on_ranks(_data_parallel_runner, answers, world_size, timeout, name, explain=_explain_raised)


def _explain_raised(failure) -> str | None:
    """The hint for a rank whose answer raised after handing dist.all_reduce None before any backward (a p.grad
    that does not exist yet), or that gloo aborted because an all_reduce's tensor met one of another size on another
    rank; None for anything else."""
    sizes = gloo_size_abort(failure.details) if failure.kind == "crashed" else None
    if sizes:
        arrived, room = sizes
        return (f"gloo aborted the rank: {arrived} bytes arrived in an all_reduce whose tensor holds {room}, so the "
                "ranks' all_reduce calls paired gradients of different parameters (another order of the parameters, "
                "or one skipped, on some rank). Every rank must all-reduce every p.grad, in the same order: that of "
                "model.parameters(), the same on every rank.")
    if not getattr(failure.exception, "none_before_backward", False):
        return None
    return ("dist.all_reduce was given None before any backward had run: a parameter's .grad is None until "
            "loss.backward() computes it. All-reduce the gradients after backward.")


def judge_data_parallel_backward(name: str, results: list[list[dict]], division: str | None = None) -> str:
    """The ✓ line for one answer's results on every rank (`run_data_parallel_answers`), or CheckFailed naming its
    mistake. `division`: a line of the answer that divides a gradient into a new tensor
    (`division_into_a_new_tensor`), evidence for a gradient left as the sum."""
    world_size = len(results)
    names = [n for n, _ in make_model().named_parameters()]
    earlier: dict[int, list[list[int]]] = {}
    for case, size in enumerate(BATCHES):
        x, y = make_batch(size)
        for rank in range(world_size):   # before the shards: rows seen after the batch was written into match none
            changed = results[rank][case].get("changed")
            if changed:
                raise CheckFailed(f"rank {rank}, batch of {size} samples: {name} changed {' and '.join(changed)} in "
                                  "place (the values after the call differ from the batch it was given).\nHint: "
                                  "leave the caller's batch as it is: read your shard of it, and compute on that or "
                                  "on a copy (.clone()).")
        shards = [_sample_indices(results[rank][case]["seen"], x) for rank in range(world_size)]
        _check_shards(shards, size, world_size, earlier)
        earlier[size] = shards
        expected = _reference_grads(x, y)
        reports = [results[rank][case] for rank in range(world_size)]
        right = [rank for rank, report in enumerate(reports) if all(
            _same_dtype(got, want) and first_mismatch(got, want) is None
            for got, want in zip(report["grads"], expected))]
        for rank, report in enumerate(reports):
            if report["unused_works"]:
                _unwaited(report, expected, names, rank, size, name)
            for position, (got, want) in enumerate(zip(report["grads"], expected)):
                _compare_grad(got, want, names[position], position, rank, (x, y), world_size, shards, report,
                              right, name, results[rank], division)
            moved = report.get("weights_changed")
            if moved:
                raise CheckFailed(f"batch of {size} samples, rank {rank}: the gradients are right, but {name} changed "
                                  f"the model's weights ({', '.join(names[position] for position in moved)} differ "
                                  "from the model it was given).\nHint: compute the gradients only and leave the "
                                  "parameters as they came (no optimizer.step(), no in-place change to a parameter): "
                                  f"the caller updates the weights after {name} returns.")
    return (f"{name}: each of {world_size} ranks used only its shard and holds the full-batch gradient "
            f"(batches of {', '.join(map(str, BATCHES[:-1]))} and {BATCHES[-1]})")


def _same_dtype(got, want) -> bool:
    """Whether got is a gradient (not None) of want's dtype, so that the two can be compared."""
    return got is not None and got.dtype == want.dtype


def _check_shards(shards: list[list[int]], size: int, world_size: int, earlier: dict | None = None) -> None:
    """CheckFailed if a rank used every sample, two ranks (or one twice) used a sample, or no rank used one.

    `earlier`: {batch size: its shards} of the batches checked before, whose shard sizes the hint compares."""
    where = f"batch of {size} samples on {world_size} ranks"
    for rank, shard in enumerate(shards):
        if len(shard) == size and world_size > 1:
            raise CheckFailed(f"{where}: rank {rank} ran the model on all {size} samples.\nHint: each rank "
                              "should take only its shard of the batch, e.g. x.tensor_split(world_size)[rank].")
    used = [i for shard in shards for i in shard]
    for i in range(size):
        owners = [rank for rank, shard in enumerate(shards) if i in shard]
        if len(owners) > 1 or used.count(i) > 1:
            raise CheckFailed(f"{where}: sample {i} was used by ranks {owners} (or twice): the shards overlap."
                              "\nHint: give every sample to exactly one rank.")
    unused = [i for i in range(size) if i not in used]
    if not unused:
        return
    if len(unused) == 1:
        which = f"sample {unused[0]} was"
    elif len(unused) > 2 and unused == list(range(unused[0], unused[-1] + 1)):
        which = f"samples {unused[0]} to {unused[-1]} were"
    else:
        which = f"samples {', '.join(map(str, unused[:-1]))} and {unused[-1]} were"
    run = _run_length(shards, size)
    if run is not None and run == size // world_size:
        hint = (f"every rank took {size} // {world_size} = {run} samples, which leaves {size - run * world_size} "
                "over: when the batch does not divide by world_size the shards differ in size; torch.tensor_split "
                "covers every sample.")
    elif run is not None:
        same = [other for other, before in (earlier or {}).items() if other != size and _run_length(before, other)
                == run]
        right = [len(shard) for shard in torch.empty(size).tensor_split(world_size)]
        hint = (f"every rank took a run of {run} samples (rank r from sample r * {run}), which covers "
                f"{run * world_size} of the {size}; tensor_split's shards of {size} have {right} samples. "
                + (f"The shard size was {run} in the batch{'es' if len(same) > 1 else ''} of "
                   f"{' and '.join(map(str, same))} too: a shard size written as a number fits only some batch "
                   "sizes. " if same else "")
                + ("A run of world_size samples is what x.split(world_size) gives: split(n) makes pieces of n "
                   "samples, tensor_split(n) makes n pieces." if run == world_size else
                   "Work each shard out from len(x) and world_size; torch.tensor_split covers every sample."))
    else:
        hint = ("every sample must go to exactly one rank: torch.tensor_split(world_size) gives world_size shards "
                "that together cover the batch, whatever its size.")
    raise CheckFailed(f"{where}: {which} used by no rank (shards: {[sorted(s) for s in shards]}).\nHint: {hint}")


def _run_length(shards: list[list[int]], size: int) -> int | None:
    """n where rank r used samples r * n to r * n + n - 1 (those of them in the batch), each rank the same n;
    else None."""
    run = len(shards[0])
    if run == 0:
        return None
    expected = [list(range(rank * run, min((rank + 1) * run, size))) for rank in range(len(shards))]
    return run if [sorted(shard) for shard in shards] == expected else None


def _unwaited(report: dict, expected: list, names: list[str], rank: int, size: int, name: str) -> None:
    """CheckFailed for async all-reduces whose work handles the answer never used (so never waited on)."""
    mismatch = next(((pname, got, want, index) for pname, got, want in zip(names, report["grads"], expected)
                     if _same_dtype(got, want) and (index := first_mismatch(got, want)) is not None), None)
    if mismatch is not None:
        pname, got, want, index = mismatch
        value = (f"; when it returned, {pname}.grad{list(index)} was {got[index].item():.6f}, expected "
                 f"{want[index].item():.6f}")
    else:
        value = " (in this run the sums had arrived in time, by chance)"
    count, total = report["unused_works"], report["async_works"]
    unused = "none of them was used" if count == total else f"{count} of them were never used"
    raise CheckFailed(f"batch of {size} samples, rank {rank}: dist.all_reduce(..., async_op=True) returned {total} "
                      f"work handle(s), and {unused}: {name} returned without waiting for the sums{value}.\n"
                      "Hint: keep the handles and call .wait() on each before returning, or leave async_op out.")


_REDUCED = {
    "param": "on the parameters themselves (p, where p.grad holds the gradient): all-reduce p.grad",
    "copy": "on a copy of a p.grad (another tensor that holds its values, or a multiple of them): it sums in "
            "place, into the tensor it is given, so the copy holds the sum and p.grad stays this rank's. All-reduce "
            "p.grad itself",
    "flat": "on one flat tensor of all the gradients (torch.cat makes a new tensor): the sum lands in it, and "
            "p.grad stays this rank's. Copy the sum back into each p.grad, or all-reduce each p.grad itself",
}


def _reduced_elsewhere(reduced: list[dict]) -> str:
    """What dist.all_reduce was given, for an answer that never gave it a p.grad."""
    first = reduced[0]
    kind = first["kind"]
    if kind == "tracked":
        what = ("a one-number tensor that autograd tracks (a loss)" if first["shape"] == () else
                f"a tensor of shape {first['shape']} that autograd tracks")
        return (f"on {what}. Autograd does not see an all_reduce, so backward still gives each rank its own "
                "shard's gradient: all-reduce every p.grad after backward")
    if kind == "other":
        shapes = sorted({str(r["shape"]) for r in reduced})
        return (f"on tensor(s) of shape {', '.join(shapes)}, none of them a p.grad: it sums in place, into the "
                "tensor it is given, so p.grad stays this rank's. All-reduce p.grad itself")
    return _REDUCED[kind]


def _scaled_by_shard(history) -> str:
    """'8/4, 7/4, 16/8' (one a batch) where on every batch of BATCHES the rank's gradients are len(x) / len(shard)
    times the right ones (the sum divided by the shard's size), else ''."""
    scales = []
    for size, report in zip(BATCHES, history):
        x, y = make_batch(size)
        own = _sample_indices(report["seen"], x)
        if not own or any(g is None for g in report["grads"]):
            return ""
        got = torch.cat([g.flatten() for g in report["grads"]])
        ratio = uniform_ratio(got, torch.cat([g.flatten() for g in _reference_grads(x, y)]))
        if ratio is None or abs(ratio - size / len(own)) > 1e-4 * ratio:
            return ""
        scales.append(f"{size}/{len(own)}")
    return ", ".join(scales) if len(history) == len(BATCHES) else ""


def _compare_grad(got, want, pname, position, rank, batch, world_size, shards, report, right, name,
                  history=(), division: str | None = None) -> None:
    """CheckFailed if a rank's gradient differs from the full batch's; the hint from the values and from what
    `report` (the rank's `_data_parallel_runner` report) saw: which gradients backward computed, what
    dist.all_reduce was given (with its op and async_op), whether dist.reduce ran. `right`: the ranks whose
    every gradient is right; `name`: the answer's, for messages; `history`: the rank's reports on every batch of
    BATCHES, whose gradients tell a scale that fits one batch size by chance from one that fits all; `division`: a
    line of the answer that divides a gradient into a new tensor (`division_into_a_new_tensor`)."""
    x, y = batch
    where = f"batch of {len(x)} samples, rank {rank}, {pname}.grad"
    reduced = report["reduced"]
    on_grad = [r for r in reduced if r["kind"] == "grad" and r["position"] == position]
    if got is None:
        if position not in report["computed"] and report.get("copy_ran"):
            raise CheckFailed(f"{where} is None: the forward ran on a copy of the model (another module with the same "
                              f"layers, as copy.deepcopy makes), so backward filled the copy's gradients, not those "
                              f"of the model {name} was given.\nHint: run forward and backward on the model itself: "
                              "the caller reads the gradients of its own parameters.")
        if position not in report["computed"]:
            raise CheckFailed(f"{where} is None: no backward computed it.\nHint: call loss.backward() on this "
                              "rank's shard.")
        if "stored" in report and position not in report["stored"]:
            raise CheckFailed(f"{where} is None: a backward computed it but never stored it in {pname}.grad: "
                              "torch.autograd.grad returns the gradients to its caller and leaves every p.grad as "
                              f"it was.\nHint: the caller reads p.grad: call loss.backward(), which accumulates into "
                              "p.grad, or store the all-reduced gradients there yourself.")
        after = " and dist.all_reduce summed it" if on_grad else ""
        raise CheckFailed(f"{where} is None when {name} returned, although backward computed it{after}: it was "
                          "set to None afterwards.\nHint: model.zero_grad() and optimizer.zero_grad() set the "
                          "gradients to None (as does p.grad = None); leave them as the all-reduce made them.")
    if got.dtype != want.dtype:
        raise CheckFailed(f"{where} is {got.dtype}, expected {want.dtype}, the dtype of the model's parameters as "
                          f"{name} was given them.\nHint: keep the model and its gradients in the dtype they came in: "
                          ".double(), .half() or .to(dtype) on the model or on a p.grad changes it.")
    index = first_mismatch(got, want)
    if index is None:
        return
    message = f"{where}{list(index)}: expected {want[index].item():.6f}, got {got[index].item():.6f}."
    mean_of_means = _reference_grads(x, y, [(s, 1 / world_size) for s in shards if s])
    own = shards[rank]
    shard_only = [_reference_grads(x, y, [(own, w)])[position] for w in (1.0, len(own) / len(x))] if own else []
    alone = any(first_mismatch(got, g) is None for g in shard_only)
    ratio = uniform_ratio(got, want)
    ops = sorted({r["op"] for r in on_grad} - {"SUM", "AVG"})   # AVG of shares scaled by world_size is right
    others = [r for r in right if r != rank]
    times_world_size = first_mismatch(got, want * world_size) is None
    by_shard = _scaled_by_shard(history) if times_world_size else ""   # 2x at 8 by chance: 7/4 at 7
    if by_shard:
        hint = (f"this is {times_of(len(x) / len(own))} the right gradient, len(x) / len(shard) = {len(x)}/{len(own)}, "
                f"and so it is on every batch ({by_shard}): the summed gradients were divided by "
                "this rank's shard size. The batch's mean divides the sum by the whole batch, len(x) (world_size "
                "gives the same only when the batch divides evenly).")
    elif times_world_size and division:
        hint = (f"this is {world_size}x the right gradient, the sum that all_reduce left in p.grad: `{division}` "
                "divides into a NEW tensor, and p.grad, which the caller reads, keeps the sum. Divide p.grad in place "
                "(/=, div_), or scale each rank's loss before backward.")
    elif times_world_size:
        hint = f"this is {world_size}x the right gradient: all_reduce SUMS; divide by world_size for the mean."
    elif others and "reduce" in report["called"]:
        hint = (f"rank {others[0]} ends with the right gradient, rank {rank} does not: dist.reduce ran, and it "
                "leaves the result on its dst rank only. Every rank needs the sum: dist.all_reduce.")
    elif alone and any(r["async"] for r in on_grad):
        hint = ("this is the gradient of this rank's shard alone, although dist.all_reduce(p.grad, async_op=True) "
                f"ran on it: the sum had not arrived when {name} returned. Call .wait() on the work it returns "
                "before returning.")
    elif alone and not on_grad and any(r["kind"] == "grad" for r in reduced):
        summed = len({r["position"] for r in reduced if r["kind"] == "grad"})
        hint = (f"this is the gradient of this rank's shard alone: dist.all_reduce ran on {summed} of the "
                f"{len(report['grads'])} parameters' gradients, but not on {pname}.grad. Every parameter's "
                "gradient needs the sum: all-reduce each of model.parameters().")
    elif alone and reduced and not any(r["kind"] == "grad" for r in reduced):
        hint = (f"this is the gradient of this rank's shard alone: dist.all_reduce ran, but never on a p.grad: "
                f"{_reduced_elsewhere(reduced)}.")
    elif alone:
        hint = ("this is the gradient of this rank's shard alone: combine the ranks' gradients with "
                "dist.all_reduce after backward.")
    elif ops:
        hint = (f"dist.all_reduce ran on p.grad with op={'/'.join(ops)}: the ranks' shares of the gradient add "
                "up to the batch's, so SUM them (op=dist.ReduceOp.SUM, the default).")
    elif first_mismatch(got, mean_of_means[position]) is None:
        hint = (f"this is the mean of the ranks' mean losses, which weights a shard of "
                f"{min(map(len, shards))} samples like one of {max(map(len, shards))}. Weight each rank's loss "
                f"by its share, len(shard) / len(batch), then SUM the gradients over ranks.")
    elif ratio == 0.0:
        hint = ("this gradient is 0 everywhere, the right one times 0: look for a factor that is 0 (an integer "
                "division such as len(shard) // len(x) gives 0; / keeps the fraction).")
    elif ratio is not None:
        named = {world_size: "world_size", 1 / world_size: "1/world_size", len(x): "the batch size, len(x)",
                 1 / len(x): "1/len(x)"}
        equals = next((f" ({what})" for value, what in named.items() if abs(ratio - value) < 1e-4 * ratio), "")
        remedy = (f"rank {others[0]} ends with the right gradient, so the factor comes from a step one of the two "
                  "takes and the other does not (one under a condition on the rank)" if others else
                  "each rank's loss times len(shard) / len(x), summed over the ranks, gives the batch's mean")
        hint = (f"this is {times_of(ratio)} the right gradient{equals}: every element is off by the same factor, "
                f"so only a scale is wrong; {remedy}.")
    elif others:
        hint = (f"rank {others[0]} ends with the right gradient, rank {rank} does not: every rank must end "
                "with the gradient of the whole batch.")
    else:
        hint = ("every rank must end with the gradient of mse_loss over the WHOLE batch: backward on your shard, "
                "then all_reduce the gradients so they add up to that mean.")
    raise CheckFailed(f"{message}\nHint: {hint}")

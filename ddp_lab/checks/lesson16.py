"""Checks for the exercises of notebooks/16-communicate-less.ipynb: DiLoCo by hand, recovery from a peer.

    ddp_lab.checks.lesson16.check_train_diloco(train_diloco)
    ddp_lab.checks.lesson16.check_recover_from_peer(recover_from_peer)

Both run on gloo ranks with a short timeout, so an answer where some ranks skip a collective ends
with a message instead of a hang. DiLoCo runs on 2 replicas, each with its own batches, for 2
rounds of 4 inner steps, then again for 3 rounds of 2 (so a period written as a number, or read off the
number of batches, shows), then that on 3 replicas in the same launch (so a mean written for 2 shows);
every rank's final parameters are compared with one process simulating the replicas, and a wrong
result with what each likely mistake gives (pseudo-gradient's sign, a sum for a mean, a mean over 2
written in, the outer momentum reset each round, the inner AdamW state averaged or made
anew, plain momentum for Nesterov or none, the replicas left at their local weights or moved to their average
(LocalSGD), the outer step inside the loop over parameters, the steps counted from 0 or the sync tested at the top
of the loop, another period) or with what the replicas sent (a pseudo-gradient of zeros: θ_global never kept apart
from the model, Δ taken once the model was reset to θ_global or against the model's own tensors; zeros from
the second round on: the first reset made the model share θ_global's memory; θ_global never stepped though
Δ was not zero, its .grad set on the model or cleared before the step; nothing sent at all, or nothing sent and
nothing trained; half the bytes, a 16-bit wire). What each replica hands to any
collective or send is counted: one pseudo-gradient per round, nothing else. Recovery
runs on 3 ranks three times: rank 0 returning with stale weights and no optimizer state while rank 1 is
the source, then rank 1 returning while rank 2 is, then rank 2 while rank 0 is, so an answer that fixes
either rank, or takes the last rank's state, fails. Before
each of its collectives, and once it returns, the ranks compare what they call (with which source, and a
tensor of how many bytes): a rank that skips a broadcast, calls another collective, or sends a tensor of
another size, is named at once instead of hanging (or gloo aborting). An optimizer that cannot take one more
step after recovery (its state keyed by numbers, not parameters) fails with a line, not a traceback; a returning
rank that kept its stale weights where the answer passes a list display to broadcast_object_list is told where
what arrived went, and where it passes a dict, that only its keys crossed. A state read from a file (torch.load of a
path) is refused, however right the weights: the exercise sends the peer's state over the group.

Introduced in notebooks/16-communicate-less.ipynb.
"""

from __future__ import annotations

import ast
import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (CaseFailed, CollectivesApart, agree_or_stop, agreeing_collectives, call_case,
                                   ensure_written, groups_of, path_of, refuse_written_divisor, run_on_ranks,
                                   source_tree, watching_calls)
from ddp_lab.course.communicate_less import diloco, quorum
from ddp_lab.instruments.collectives import watching_collectives

REPLICAS = 2
# (inner_steps, rounds) of each run: the first, 4 inner steps, so that a per-step all-reduce (4x) never looks like
# AdamW's moments (3x); the second, 3 rounds of 2 on 6 batches, so that a period of 4 written in, or one read off the
# number of batches (len(batches) // 2), gives other rounds
DILOCO_CASES = ((4, 2), (2, 3))
INNER_STEPS, ROUNDS = DILOCO_CASES[0]
# (replicas, case) of each DiLoCo run, in one launch (`common.groups_of`): both cases on the exercise's 2 replicas,
# then the second on 3, so that a mean over replicas written for 2 (`delta / 2`, `0.5 * delta`, `world = 2`) fails
DILOCO_RUNS = tuple((REPLICAS, case) for case in DILOCO_CASES) + ((3, DILOCO_CASES[1]),)
INNER_LR, OUTER_LR, OUTER_MOMENTUM = 0.01, 0.7, 0.9
QUORUM = 3
# recovery, (returning rank, source rank) per case: the exercise's first; then another of each, so that an answer
# that fixes the returning rank or the source (`if rank == 0`, `src=1`) fails; then rank 2 returning, so that an
# answer that takes the last rank's state (`src=2`, `src=world_size - 1`, `all_gather_object(...)[-1]`) fails
RECOVERY_CASES = ((0, 1), (1, 2), (2, 0))
DILOCO_ANSWERS = (diloco.DiLoCo.sync, diloco.average_over_replicas)
RECOVER_ANSWERS = (quorum.recover_from_peer,)
# What a replica hands to each collective (and each send) it may move a pseudo-gradient with: (position, keyword) of
# that argument. A receive sends nothing, so recv and irecv are not here.
SEEN = {"all_reduce": (0, "tensor"), "reduce": (0, "tensor"), "all_gather": (1, "tensor"),
        "all_gather_into_tensor": (1, "input_tensor"), "reduce_scatter": (1, "input_list"),
        "reduce_scatter_tensor": (1, "input"), "broadcast": (0, "tensor"), "broadcast_object_list": (0, "object_list"),
        "all_gather_object": (1, "obj"), "send": (0, "tensor"), "isend": (0, "tensor")}


def make_model(seed: int = 0) -> nn.Module:
    """The exercises' model: 3 inputs, 4 hidden units (tanh), 1 output; the same weights on every rank."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))


def replica_batches(rank: int, count: int = ROUNDS * INNER_STEPS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Replica `rank`'s first `count` batches of (x, y): 5 samples each, its own region of the inputs."""
    generator = torch.Generator().manual_seed(160 + rank)
    batches = []
    for _ in range(count):
        x = torch.randn(5, 3, generator=generator) + (1.0 if rank else -1.0)
        batches.append((x, torch.sin(x.sum(dim=1, keepdim=True))))
    return batches


def _params_bytes() -> int:
    return sum(p.numel() * p.element_size() for p in make_model().parameters())


# --- train_diloco ----------------------------------------------------------------------------

def simulate_diloco(sign: float = 1.0, mean: bool = True, reset_outer: bool = False, average_inner: bool = False,
                    fresh_inner: bool = False, nesterov: bool = True, keep_local: bool = False,
                    case: tuple[int, int] = DILOCO_CASES[0], period: int | None = None, replicas: int = REPLICAS,
                    divisor: int | None = None, from_zero: str | None = None, momentum: float = OUTER_MOMENTUM,
                    average_params: bool = False, step_per_param: bool = False) -> list[list]:
    """Every replica's final parameters, simulated in one process, for a case (inner_steps, rounds) of
    DILOCO_CASES on `replicas` replicas; the flags give the likely mistakes, `period` an outer step every `period`
    batches instead of every inner_steps, `divisor` a mean divided by that number, not by `replicas`, `from_zero`
    the steps counted from 0 (a key of FROM_ZERO: which 0-based steps sync), `momentum` the outer SGD's,
    `average_params` the replicas' parameters averaged each round (an outer SGD with lr 1 and no momentum: θ_global
    becomes the mean of θ_local), `step_per_param` outer.step() after each parameter's .grad is set, not once."""
    inner_steps, rounds = case
    period = period or inner_steps
    models = [make_model() for _ in range(replicas)]
    inner = [torch.optim.AdamW(m.parameters(), lr=INNER_LR) for m in models]
    global_params = [p.detach().clone() for p in models[0].parameters()]
    def make_outer() -> torch.optim.SGD:
        if average_params:   # lr 1, no momentum: θ_global steps to the mean of θ_local
            return torch.optim.SGD(global_params, lr=1.0)
        return torch.optim.SGD(global_params, lr=OUTER_LR, momentum=momentum, nesterov=nesterov and momentum > 0)

    outer = make_outer()
    data = [replica_batches(rank, inner_steps * rounds) for rank in range(replicas)]
    for step in range(inner_steps * rounds):
        for rank, model in enumerate(models):
            inner[rank].zero_grad()
            F.mse_loss(model(data[rank][step][0]), data[rank][step][1]).backward()
            inner[rank].step()
        if not (FROM_ZERO[from_zero](step, period, inner_steps * rounds) if from_zero else (step + 1) % period == 0):
            continue
        with torch.no_grad():
            if reset_outer:
                outer = make_outer()
            for i, g in enumerate(global_params):
                total = sum(sign * (g - list(m.parameters())[i]) for m in models)
                g.grad = total / (divisor or replicas) if mean else total
                if step_per_param:
                    outer.step()
            if not step_per_param:
                outer.step()
            outer.zero_grad(set_to_none=True)
            if average_inner:
                for states in zip(*(list(opt.state.values()) for opt in inner)):
                    for key in ("exp_avg", "exp_avg_sq"):
                        averaged = sum(s[key] for s in states) / replicas
                        for s in states:
                            s[key] = averaged.clone()
            if not keep_local:
                for model in models:
                    for p, g in zip(model.parameters(), global_params):
                        p.copy_(g)
        if fresh_inner:
            inner = [torch.optim.AdamW(m.parameters(), lr=INNER_LR) for m in models]
    return [[p.detach().clone() for p in m.parameters()] for m in models]


# the steps counted from 0 (the enumerate index) against inner_steps: the outer step after batches 1, H + 1, ...
# (`step % inner_steps == 0`), or after H + 1, 2H + 1, ... (`step > 0 and ...`), or that second test made at the
# top of the loop, before the batch's inner step: after batches H, 2H, ..., all but the last (the loop ends before a
# test could follow batch R * H); each misses the last round's sync. Each takes (0-based step, period, batches).
TOP_OF_THE_LOOP = "at the top of the loop"
FROM_ZERO = {"every": lambda step, period, batches: step % period == 0,
             "after the first": lambda step, period, batches: step > 0 and step % period == 0,
             TOP_OF_THE_LOOP: lambda step, period, batches: (step + 1) % period == 0 and step + 1 < batches}

DILOCO_MISTAKES = (
    ({"sign": -1.0}, "the pseudo-gradient has the wrong sign: it is θ_global − θ_local (the outer optimizer "
                     "subtracts it, as it does a gradient), not θ_local − θ_global"),
    ({"mean": False}, "the pseudo-gradients were summed, not averaged: divide the all-reduced sum by the world size"),
    ({"reset_outer": True}, "the outer momentum starts again every round: make the outer SGD once, before the "
                            "loop, so its momentum buffer lasts across rounds"),
    ({"average_inner": True}, "the inner AdamW state was averaged across replicas: DiLoCo sends only the "
                              "pseudo-gradient; each replica keeps its own inner optimizer state"),
    ({"fresh_inner": True}, "the inner AdamW is made anew every round: make it once, so its moments carry over"),
    ({"nesterov": False}, "the outer SGD uses plain momentum: DiLoCo's outer optimizer is SGD with nesterov=True"),
    ({"keep_local": True}, "after the outer step the replicas keep their local weights: copy θ_global into every "
                           "replica's parameters, so the next round starts from it"),
    ({"average_params": True}, "every round your replicas moved to the average of their local weights, LocalSGD's "
                               "step (or an outer SGD with lr 1 and no momentum): DiLoCo averages the "
                               "pseudo-gradients θ_global − θ_local and hands them, as θ_global's .grad, to an outer "
                               f"SGD(lr={OUTER_LR:g}, momentum={OUTER_MOMENTUM:g}, nesterov=True) made once"),
    ({"momentum": 0.0}, f"the outer SGD has no momentum: DiLoCo's outer optimizer is SGD(lr={OUTER_LR:g}, "
                        f"momentum={OUTER_MOMENTUM:g}, nesterov=True), made once so its momentum lasts across rounds"),
    ({"step_per_param": True}, "the outer step ran inside the loop over parameters: outer.step() steps every "
                               "parameter that has a .grad, so the first ones were stepped several times a round. "
                               "Set every θ_global's .grad first, then call outer.step() once per round"),
)


def _diloco_runner(rank: int, answers: tuple) -> list[dict[int, dict]]:
    """In a rank launched with init_process_group=False: each answer on this replica for each run of DILOCO_RUNS
    it belongs to, on a default group of that run's size (`common.groups_of`, 3 replicas first, each group set up
    once for every answer), each from a fresh model: [answer] -> {run's index: what it ended with and sent}."""
    runs = [{} for _ in answers]
    for size in groups_of(rank, sorted({size for size, _ in DILOCO_RUNS}, reverse=True), "train_diloco"):
        for index, (replicas, (inner_steps, rounds)) in enumerate(DILOCO_RUNS):
            if replicas == size:
                for answer, got in zip(answers, runs):
                    got[index] = _diloco_case(rank, answer, inner_steps, rounds)
    return runs


def _diloco_case(rank: int, train_diloco, inner_steps: int, rounds: int) -> dict:
    model, sent = make_model(), []
    case = (f"running on rank {rank} of {dist.get_world_size()} with {rounds * inner_steps} batches and "
            f"inner_steps={inner_steps}")
    zeros, wire = [], set()                        # per all_reduce: whether all it sent was zero; its dtypes

    def seen(name, what):
        sent.append((name, _nbytes(what)))
        if name == "all_reduce":
            zeros.append(_all_zero(what))
            wire.update(t.dtype for t in (what if isinstance(what, (list, tuple)) else [what]) if torch.is_tensor(t))
    with watching_collectives(SEEN, seen, outermost_only=True), watching_calls(DILOCO_ANSWERS) as called:
        call_case(train_diloco, case, model, replica_batches(rank, rounds * inner_steps), inner_steps)
    return {"params": [p.detach().clone() for p in model.parameters()], "sent": sent, "zeros": zeros,
            "wire": wire, "called": list(called)}


def _nbytes(what) -> int:
    items = what if isinstance(what, (list, tuple)) else [what]
    return sum(t.numel() * t.element_size() for t in items if torch.is_tensor(t))


def _all_zero(what) -> bool:
    items = what if isinstance(what, (list, tuple)) else [what]
    return all(torch.is_tensor(t) and not t.any() for t in items)


def _diloco_hang_hint(calls: set) -> str:
    names = sorted(call for call in calls if call)
    seen = f" (they wait in {', '.join(names)})" if names else ""
    return (f"some replicas wait in a collective the others never call{seen}. Every replica runs the outer step "
            "at the same steps, with the same collectives in the same order: a collective under a condition on the "
            "rank, or a sync condition that is not the same on every replica, leaves the others waiting.")


def check_train_diloco(train_diloco, timeout: float = 30.0) -> None:
    """Check `train_diloco(model, batches, inner_steps)` on 2 gloo replicas, then 3, against one process.

    Each replica trains its own batches for 2 rounds of 4 inner steps (AdamW, lr 0.01) with an
    outer SGD (lr 0.7, momentum 0.9, Nesterov) on the averaged pseudo-gradient, then, from a fresh
    model, for 3 rounds of 2, and that again on 3 replicas (in the same launch), so that a mean written
    for 2 replicas fails; afterwards every replica's model must hold the global parameters, and
    each replica must have sent one model's worth of bytes per round.

    Introduced in notebooks/16-communicate-less.ipynb.
    """
    ensure_written(train_diloco)
    name = getattr(train_diloco, "__name__", "train_diloco")
    refuse_written_divisor(train_diloco, name, "a pseudo-gradient", "the number of replicas, dist.get_world_size()",
                           divided=("delta", "grad", "pseudo"))
    results = run_on_ranks(_diloco_runner, ((train_diloco,),), max(size for size, _ in DILOCO_RUNS), timeout, name,
                           timeout_hint=_diloco_hang_hint, init_process_group=False)
    judge_diloco(name, [result[0] for result in results])


def judge_diloco(name: str, results) -> None:
    """Compare what every replica ended with and sent with one process, case by case; CheckFailed naming the mistake.

    `results`: [rank] -> {index of a run of DILOCO_RUNS -> the runner's dict} (`_diloco_runner`)."""
    called = next((c["called"] for r in results for c in r.values() if c.get("called")), None)
    if called:
        raise CheckFailed(f"{name} calls {called[0]}, the package's own answer to this exercise, so the check "
                          "cannot tell whether your code would be right.\nHint: write the outer step yourself.")
    for index, (replicas, case) in enumerate(DILOCO_RUNS):
        _judge_diloco_case(name, case, [result[index] for result in results[:replicas]], replicas)
    rounds = " and ".join(f"{r} rounds of {h}" for h, r in DILOCO_CASES)
    also = ", ".join(f"{r} rounds of {h} on {replicas}" for replicas, (h, r) in DILOCO_RUNS if replicas != REPLICAS)
    per_round = _params_bytes()
    passed(f"{name}: {REPLICAS} replicas, {rounds} AdamW steps (and {also}), outer Nesterov SGD on the averaged "
           f"pseudo-gradient == one process; {per_round} bytes sent per round per replica (the model)")


def _judge_diloco_case(name: str, case: tuple[int, int], results: list[dict], replicas: int = REPLICAS) -> None:
    inner_steps, rounds = case
    want = simulate_diloco(case=case, replicas=replicas)
    for rank, result in enumerate(results):
        got = result["params"]
        if all(torch.allclose(g, w, atol=1e-5, rtol=1e-4) for g, w in zip(got, want[rank])):
            continue
        index = next(i for i, (g, w) in enumerate(zip(got, want[rank])) if not torch.allclose(g, w, atol=1e-5,
                                                                                            rtol=1e-4))
        where = (f"{replicas} replicas, {rounds * inner_steps} batches, inner_steps={inner_steps}: rank {rank}: "
                 f"parameter {index} (shape "
                 f"{tuple(want[rank][index].shape)}) differs from one process's DiLoCo: got {_values(got[index])}, "
                 f"expected {_values(want[rank][index])}")
        hint = _untouched_hint(results, got, rank) or _zero_delta_hint(results, got, rank, case, replicas) or \
            _never_moved_hint(results, got, rank) or \
            _written_replicas_hint(got, rank, case, replicas) or _period_hint(got, rank, case, replicas) or next(
                (text for flags, text in DILOCO_MISTAKES
                 if _same(got, simulate_diloco(**flags, case=case, replicas=replicas)[rank])), None)
        if hint is None:
            hint = _traffic_hint(results[rank]["sent"], inner_steps, rounds, results[rank].get("wire")) or (
                "each round: H inner AdamW steps, then Δ = θ_global − θ_local averaged over the replicas "
                "(all_reduce, divided by the world size) as the .grad of θ_global, one step of SGD(lr=0.7, "
                "momentum=0.9, nesterov=True) made once, and θ_global copied into the model")
        raise CheckFailed(f"{where}.\nHint: {hint}.")
    per_round = _params_bytes()
    for rank, result in enumerate(results):
        sent = sum(nbytes for _, nbytes in result["sent"])
        if sent != per_round * rounds:
            hint = (_traffic_hint(result["sent"], inner_steps, rounds, result.get("wire"))
                    or "all-reduce each pseudo-gradient once per round, nothing else")
            raise CheckFailed(f"{replicas} replicas, {rounds * inner_steps} batches, inner_steps={inner_steps}: rank "
                              f"{rank} handed {sent} bytes to collectives over {rounds} rounds; DiLoCo sends one "
                              f"pseudo-gradient per round: {per_round} bytes each, {per_round * rounds} in all."
                              f"\nHint: {hint}.")


def _same(got: list, want: list) -> bool:
    return all(torch.allclose(g, w, atol=1e-5, rtol=1e-4) for g, w in zip(got, want))


def _written_replicas_hint(got: list, rank: int, case: tuple[int, int], replicas: int) -> str | None:
    """A hint only where the parameters show it: on other than the exercise's 2 replicas they are DiLoCo's with
    the summed pseudo-gradient divided by 2 (`delta / 2`, `0.5 * delta`, `world = 2`), not by the world size."""
    if replicas == REPLICAS or not _same(got, simulate_diloco(case=case, replicas=replicas, divisor=REPLICAS)[rank]):
        return None
    return (f"on {replicas} replicas your pseudo-gradient was divided by {REPLICAS}, not {replicas}: the average "
            f"must divide by the number of replicas, dist.get_world_size(), not a number written for {REPLICAS} "
            f"(`/ {REPLICAS}`, `* 0.5`, `world = {REPLICAS}`)")


def _period_hint(got: list, rank: int, case: tuple[int, int], replicas: int = REPLICAS) -> str | None:
    """A hint only where the parameters show it: they are DiLoCo's with the steps counted from 0 (FROM_ZERO), or
    with the outer step every p batches, p not inner_steps (a period written as a number, or worked out from the
    number of batches)."""
    inner_steps, rounds = case
    batches = inner_steps * rounds
    from_zero = next((way for way in FROM_ZERO
                      if _same(got, simulate_diloco(case=case, replicas=replicas, from_zero=way)[rank])), None)
    if from_zero is not None:
        synced = [step + 1 for step in range(batches) if FROM_ZERO[from_zero](step, inner_steps, batches)]
        wanted = list(range(inner_steps, batches + 1, inner_steps))
        ran = (f"your replicas ran the outer step after batch{'es' if len(synced) > 1 else ''} "
               f"{_listed(synced)} of {batches}, where inner_steps={inner_steps} puts it after batches "
               f"{_listed(wanted)}")
        if from_zero == TOP_OF_THE_LOOP:
            return (f"{ran}: the last round never synced. A test made at the top of the loop, before the batch's "
                    "inner step (step > 0 and step % inner_steps == 0), runs the outer step for the round before, "
                    "so after the last batch no test comes. Take the outer step after the inner step, when "
                    "(step + 1) % inner_steps == 0")
        return (f"{ran}: the steps were counted from 0 (the index enumerate gives) against inner_steps, "
                "so the last round never synced. Count batches from 1, or sync when (step + 1) % inner_steps == 0")
    period = next((p for p in range(1, inner_steps * rounds + 1)
                   if p != inner_steps and _same(got, simulate_diloco(case=case, period=p, replicas=replicas)[rank])),
                  None)
    if period is None:
        return None
    return (f"your replicas ran the outer step every {period} batches, but inner_steps was {inner_steps}: the "
            "period is the argument inner_steps, whatever the number of batches")


def _listed(numbers: list) -> str:
    """`1, 3 and 5`."""
    words = [str(n) for n in numbers]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _values(t: torch.Tensor) -> str:
    """A parameter's first values, for the 'got ..., expected ...' line."""
    return "[" + ", ".join(f"{v:.5g}" for v in t.flatten()[:3].tolist()) + (", ...]" if t.numel() > 3 else "]")


def _zero_delta_hint(results, got: list, rank: int, case: tuple[int, int], replicas: int = REPLICAS) -> str | None:
    """A hint only where what was sent shows it: every replica all-reduced pseudo-gradients that were all zero; what
    made them zero only where rank `rank`'s parameters `got` show it too: the starting weights (Δ taken once the model
    was reset to θ_global, or against the model's own tensors), or the replicas' own local training (θ_global never
    apart from the model). Or: every replica's all-reduces were zero from the second round on, not in the first
    (θ_global made to share the model's memory by the first round's reset)."""
    later = _zero_from_round_two(results, case[1])
    if later:
        return (f"the pseudo-gradient your replicas all-reduced was not zero in the first round, and all zero in "
                f"{later}, so from the second round on the outer step had nothing to apply: the first round's reset "
                "made the model share θ_global's memory (assigning a parameter's .data, or "
                "torch.nn.utils.vector_to_parameters, makes the parameters θ_global's tensors or views of them), so "
                "θ_global − θ_local is zero. Copy θ_global's values into the model (Tensor.copy_), or give it a "
                "clone, so the two stay apart")
    zeros = [flag for result in results for flag in result.get("zeros", [])]
    if not zeros or not all(zeros):
        return None
    head = "every pseudo-gradient your replicas all-reduced was zero, so the outer step had nothing to apply"
    if _same(got, list(make_model().parameters())):
        return (f"{head}, and rank {rank} ended with the weights it started from: Δ = θ_global − θ_local is zero "
                "when it is taken once the model has been reset to θ_global, or against tensors that are the model's "
                "own (model.state_dict() and model.parameters() give the model's tensors, not copies). Compute Δ "
                "(and all-reduce it) after the inner steps and before the model is reset to θ_global, against a copy "
                "of the parameters taken with .clone() and changed only by the outer step")
    if _same(got, simulate_diloco(keep_local=True, case=case, replicas=replicas)[rank]):
        return (f"{head}. θ_global − θ_local is zero when θ_global is the model's own parameters (the same tensors, "
                "or detached views of them) or a copy taken after the inner steps: keep θ_global as a separate copy "
                "of the parameters, taken once before training (.clone()), and changed only by the outer step")
    return (f"{head}: Δ = θ_global − θ_local is taken after the inner steps, before the model is reset to θ_global, "
            "with θ_global a separate copy of the parameters changed only by the outer step")


def _zero_from_round_two(results, rounds: int) -> str | None:
    """'round 2' ('rounds 2 to 3') where every replica made the same number of all-reduces each round, some of the
    first round's held a value other than zero, and every later one was all zero; else None."""
    counts = {len(result.get("zeros", [])) for result in results}
    if rounds < 2 or len(counts) != 1 or not counts.pop() or len(results[0]["zeros"]) % rounds:
        return None
    per_round = len(results[0]["zeros"]) // rounds
    for result in results:
        first, later = result["zeros"][:per_round], result["zeros"][per_round:]
        if all(first) or not all(later):
            return None
    return f"rounds 2 to {rounds}" if rounds > 2 else "round 2"


def _untouched_hint(results, got: list, rank: int) -> str | None:
    """A hint only where the parameters and what was sent show it: rank `rank` ended with the starting weights and
    no replica called a collective, so no training reached them (a body of `...` or `pass`, or θ_global copied back
    without an outer step)."""
    if any(result["sent"] for result in results) or not _same(got, list(make_model().parameters())):
        return None
    return (f"rank {rank} ended with the weights it started from, and no replica called a collective: no training "
            "reached the final weights (nothing was trained, or θ_global, never stepped, was copied back). Each "
            "round: inner_steps steps of an inner torch.optim.AdamW over the model, then the outer step, the "
            "pseudo-gradient θ_global − θ_local averaged over the replicas (dist.all_reduce) as the .grad of θ_global "
            "for a torch.optim.SGD(nesterov=True) made once, and θ_global copied into the model")


def _never_moved_hint(results, got: list, rank: int) -> str | None:
    """A hint only where the parameters and what was sent show it: rank `rank` ended with the starting weights
    although some all-reduced pseudo-gradient was not zero, so the outer step never changed θ_global."""
    zeros = [flag for result in results for flag in result.get("zeros", [])]
    if not zeros or all(zeros) or not _same(got, list(make_model().parameters())):
        return None
    return (f"θ_global never moved: rank {rank}'s parameters are the starting weights, though the pseudo-gradients "
            "your replicas all-reduced were not zero. An optimizer steps only the parameters it was made over that "
            "have a .grad when its step() runs: set the averaged Δ as the .grad of θ_global's tensors (the outer "
            "SGD's), not of the model's parameters, and call the outer optimizer's step() before anything clears "
            "that .grad (zero_grad() sets every .grad to None: call it after the step, or before setting .grad)")


def _traffic_hint(sent: list, inner_steps: int = INNER_STEPS, rounds: int = ROUNDS, wire=None) -> str | None:
    """A hint only where the bytes show it: nothing sent is each replica stepping alone; three models per round are
    the pseudo-gradient plus AdamW's two moments; a model per inner step (and maybe the pseudo-gradient) is an
    all-reduce inside the inner loop; a reduce and a broadcast of a model each round, θ_global stepped on one rank
    and sent back; half a model a round, every all-reduced tensor 16-bit (`wire`, their dtypes), a 16-bit wire."""
    if not sent:
        return ("your replicas called no collective, so none heard of the others' training. DiLoCo averages Δ over "
                "the replicas every round: dist.all_reduce it (a sum), then divide by the world size")
    total, per_round = sum(nbytes for _, nbytes in sent), _params_bytes() * rounds
    names = {name for name, _ in sent}
    if names == {"reduce", "broadcast"} and total == 2 * per_round:
        return ("your replicas sent two models' worth per round: Δ to one rank (dist.reduce), then θ_global back "
                "from it (dist.broadcast). Every replica can take the same outer step itself: one dist.all_reduce of "
                "Δ per round, and nothing else, is all DiLoCo sends")
    if total == 3 * per_round:
        return ("your replicas sent three models' worth per round: the inner AdamW's moments went along with "
                "the pseudo-gradient. DiLoCo sends only the pseudo-gradient; each replica keeps its own inner state")
    if total in (inner_steps * per_round, (inner_steps + 1) * per_round):
        return (f"your replicas sent a model's worth per inner step ({inner_steps} per round): an all-reduce inside "
                "the inner loop, as DDP or LocalSGD at H = 1 would do. Between outer steps DiLoCo's replicas "
                "exchange nothing")
    if total > per_round:
        return (f"your replicas sent {total} bytes, more than one pseudo-gradient ({per_round // rounds} bytes) "
                "per round")
    if names == {"all_reduce"} and wire and wire <= {torch.float16, torch.bfloat16} and 2 * total == per_round:
        return ("your replicas sent half a model's worth per round: the pseudo-gradient crossed in 16 bits "
                "(bfloat16 or float16). That saves half the bytes, at the cost of rounding Δ; this exercise's DiLoCo "
                "all-reduces it in float32, as one process's would be, so that the two agree")
    return None


# --- recover_from_peer -----------------------------------------------------------------------

def _healthy_replica() -> tuple[nn.Module, torch.optim.Optimizer]:
    """Two SGD steps with momentum: the state healthy ranks hold (the same on each)."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in replica_batches(0)[:2]:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return model, optimizer


def _one_more_step(model, optimizer) -> list:
    x, y = replica_batches(1)[0]
    optimizer.zero_grad()
    F.mse_loss(model(x), y).backward()
    optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


# The collectives a recovery may call, each checked against the other ranks' before it runs (`_paired_collectives`);
# RETURNED stands for a rank that came back from the answer. SIZED: those whose tensor argument must have the same
# size on every rank (that argument's name), so that its bytes are compared too.
PAIRED = ("broadcast", "broadcast_object_list", "all_reduce", "all_gather", "all_gather_object", "scatter_object_list",
          "barrier")
RETURNED = len(PAIRED)
SIZED = {"broadcast": "tensor", "all_reduce": "tensor", "all_gather": "tensor"}


def _agree(case: int, call: int, src: int, apart: list, nbytes: int = -1) -> None:
    """Every rank says which call it makes next (RETURNED: it came back from the answer) in which case, with which
    source (-1: none) and how many bytes of tensor (-1: not compared, see SIZED); if they differ, `apart` gets every
    rank's (case, call, src, nbytes) and every rank raises CollectivesApart."""
    def describe(calls: list) -> str:
        return "the ranks' collective calls do not pair up: " + ", ".join(
            f"rank {rank} {'returned' if call == RETURNED else PAIRED[call]}"
            for rank, (_, call, _, _) in enumerate(calls))

    agree_or_stop((case, call, src, nbytes), apart, describe)


def _paired_collectives(case: list, apart: list, dicts: list | None = None):
    """Inside a rank: before each collective of PAIRED over every rank that the answer calls (not one it calls
    inside another), the ranks agree on it (`_agree`, case[0] the case's index), so ranks that skip a collective or
    call another one, or the same one with a tensor of another size, raise CollectivesApart together instead of
    waiting for each other (or gloo aborting). `dicts` gets the case's index wherever broadcast_object_list is
    passed a dict (it sends a list's items, and a dict's are its keys)."""
    def before(name: str, given: dict) -> None:
        if name == "broadcast_object_list" and isinstance(given.get("object_list"), dict) and dicts is not None:
            dicts.append(case[0])
        src = given.get("src", given.get("group_src"))
        tensor = given.get(SIZED.get(name, ""))
        nbytes = tensor.numel() * tensor.element_size() if torch.is_tensor(tensor) else -1
        _agree(case[0], PAIRED.index(name), src if isinstance(src, int) else -1, apart, nbytes)

    return agreeing_collectives(PAIRED, before)


@contextlib.contextmanager
def _watching_files(saved: list, loaded: list, case: list):
    """For the duration, torch.save and torch.load note in `saved` and `loaded` each (case index, file) they write or
    read: a path or an open file (`path_of`), not a buffer in memory."""
    save, load = torch.save, torch.load

    def noting(original, into):
        def call(*args, **kwargs):
            f = args[1] if original is save and len(args) > 1 else args[0] if original is load and args else \
                kwargs.get("f")
            file = path_of(f)
            if file is not None:
                into.append((case[0], file))
            return original(*args, **kwargs)
        return call

    torch.save, torch.load = noting(save, saved), noting(load, loaded)
    try:
        yield
    finally:
        torch.save, torch.load = save, load


def _recover_runner(rank: int, recover) -> dict:
    """Every case of RECOVERY_CASES in turn on this rank: {"cases": [per case: params, stepped, momentum], "called",
    "apart": None, or (case index, every rank's (case, call, src)) where the ranks' collectives did not pair up,
    "saved"/"loaded": [(case index, file)] written or read with torch.save/torch.load (`_watching_files`), "dicts":
    the case indices where broadcast_object_list was given a dict}."""
    cases, called, apart, current, saved, loaded, dicts = [], [], [], [0], [], [], []
    for index, (returning, source) in enumerate(RECOVERY_CASES):
        current[0] = index
        if rank == returning:                             # stale weights, an optimizer without state
            model = make_model(seed=7)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        else:
            model, optimizer = _healthy_replica()
        case = f"running on rank {rank} of {dist.get_world_size()} (rank {returning} returning), source_rank={source}"
        try:
            with watching_calls(RECOVER_ANSWERS) as called_here, _paired_collectives(current, apart, dicts), \
                    _watching_files(saved, loaded, current):
                call_case(recover, case, model, optimizer, source)
            called.extend(called_here)
            _agree(index, RETURNED, -1, apart)            # a rank that skipped a collective meets the others here
        except (CaseFailed, CollectivesApart) as failure:
            if not apart or (isinstance(failure, CaseFailed) and failure.kind != "CollectivesApart"):
                raise
            return {"cases": cases, "called": called, "apart": (index, apart[-1]), "saved": saved, "loaded": loaded,
                    "dicts": dicts}
        after = [p.detach().clone() for p in model.parameters()]
        cases.append({"params": after, **_stepped(model, optimizer)})
    return {"cases": cases, "called": called, "apart": None, "saved": saved, "loaded": loaded, "dicts": dicts}


def _stepped(model, optimizer) -> dict:
    """After the answer: {"stepped": the parameters one more step gives, "momentum": whether every state entry holds
    a momentum_buffer}, or {"error": what that step raised, "keys": the state's first keys that are not the
    optimizer's parameters (an optimizer.state assigned, say state_dict()'s, keyed by 0, 1, ...)}."""
    params = {id(p) for group in optimizer.param_groups for p in group["params"]}
    state = optimizer.state
    keys = [repr(key) for key in list(state)[:3] if id(key) not in params] if isinstance(state, dict) else []
    try:
        momentum = bool(state) and all("momentum_buffer" in s for s in state.values())
        return {"stepped": _one_more_step(model, optimizer), "momentum": momentum}
    except Exception as error:                      # noqa: BLE001 (the answer left the optimizer unusable)
        return {"error": type(error).__name__ + (f" ({_short(error)})" if _short(error) else ""), "keys": keys}


def _short(error: Exception) -> str:
    """The first line of an exception's message, cut short; a tensor it was raised on (a KeyError's) as its kind."""
    if error.args and isinstance(error.args[0], nn.Parameter):
        return "on a parameter"
    text = str(error).strip()
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= 60 else line[:57] + "..."


def _apart_feedback(name: str, apart) -> None:
    """CheckFailed saying which ranks' collectives did not pair up in which case, and what that shows."""
    index, calls = apart
    returning, source = RECOVERY_CASES[index]
    case = f"rank {returning} returning, source_rank={source}"
    said = lambda call, src: "returned" if call == RETURNED else \
        f"dist.{PAIRED[call]}" + (f"(src={src})" if src >= 0 else "")        # noqa: E731
    listed = lambda ranks: f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"   # noqa: E731
    returned = [rank for rank, (_, call, _, _) in enumerate(calls) if call == RETURNED]
    joined = [rank for rank, (_, call, _, _) in enumerate(calls) if call != RETURNED]
    kinds = {said(call, src) for _, call, src, _ in calls if call != RETURNED}
    sizes = {nbytes for _, _, _, nbytes in calls}
    if not returned and len(kinds) == 1 and len(sizes) > 1:
        collective = kinds.pop()
        by_size = {size: [rank for rank, call in enumerate(calls) if call[3] == size] for size in sorted(sizes)}
        odd = min(by_size.values(), key=len)
        rest = [rank for rank in range(len(calls)) if rank not in odd]
        head = (f"{case}: {listed(odd)} called {collective} with {calls[odd[0]][3]} bytes while {listed(rest)} "
                f"called it with " + " and ".join(f"{size}" for size in sorted({calls[r][3] for r in rest})) +
                " bytes, so the check stopped the ranks instead of letting gloo abort.")
        hint = "every rank must take part in each collective with a tensor of the same size, in the same order"
        if odd == [returning] and len(rest) > 1 and len({calls[r][3] for r in rest}) == 1:
            hint += (f" (only rank {returning} differs, the returning one, which has no momentum_buffer yet: "
                     "collectives made only where a rank holds one leave it a tensor behind. Make the same calls on "
                     "every rank, for instance by sending optimizer.state_dict() with broadcast_object_list and "
                     "loading it with optimizer.load_state_dict)")
    elif returned and len(kinds) == 1:
        collective = kinds.pop()
        head = (f"{case}: {listed(joined)} called {collective}, but {listed(returned)} returned from {name} without "
                "calling it, so the check stopped the ranks instead of letting them wait.")
        if returned == [source]:
            hint = (f"the source rank never joined the broadcast: rank {source} is the source here. Every rank calls "
                    "it, the source included (it sends, the others receive): no `if rank != source_rank:` around it")
        elif returned == [returning]:
            hint = (f"the returning rank never joined: rank {returning} returns here, and it is the one that must "
                    "receive. Every rank calls the collective, with the same src")
        else:
            hint = "a collective is called by every rank of the quorum, the source and the returning one included"
    else:
        head = f"{case}: the ranks' next collective calls do not pair up: " + ", ".join(
            f"rank {rank} {said(call, src)}" for rank, (_, call, src, _) in enumerate(calls)) + "."
        hint = ("every rank makes the same collective calls, in the same order, with the same src (source_rank): "
                "no collective under a condition on the rank")
    raise CheckFailed(f"{head}\nHint: {hint}.")


def _recover_hang_hint(calls: set, places: dict) -> str:
    waiting = sorted(rank for rank, call in places.items() if call)
    if len(waiting) == QUORUM:
        return (f"all {QUORUM} ranks wait in torch.distributed calls that no peer pairs with: every rank makes the "
                "same collective calls in the same order with the same source rank (the source calls a broadcast "
                "too), and every send has its receive on the peer.")
    return (f"ranks {waiting} wait in a collective that the other ranks never call. A broadcast is a collective: "
            "every member of the quorum calls it, the healthy ones (which send) and the recovering one (which "
            "receives), with the same source rank.")


def check_recover_from_peer(recover_from_peer, timeout: float = 30.0) -> None:
    """Check `recover_from_peer(model, optimizer, source_rank)` on 3 gloo ranks, in three cases.

    The returning rank comes back with stale weights and an optimizer without state; the others are
    healthy (two SGD steps with momentum). First rank 0 returns and every rank calls the answer with
    source_rank=1, then rank 1 returns with source_rank=2, then rank 2 with source_rank=0. Afterwards every
    rank must hold the source's weights and momentum, so that one more step gives the same weights everywhere.

    Introduced in notebooks/16-communicate-less.ipynb.
    """
    ensure_written(recover_from_peer)
    name = getattr(recover_from_peer, "__name__", "recover_from_peer")
    results = run_on_ranks(_recover_runner, (recover_from_peer,), QUORUM, timeout, name,
                           timeout_hint=_recover_hang_hint)
    judge_recovery(name, results, list_display_broadcast(recover_from_peer))


def list_display_broadcast(fn) -> str | None:
    """The first call in fn's source that passes a list display to broadcast_object_list
    (`dist.broadcast_object_list([state], src=source_rank)`), where the source loads something with load_state_dict
    too; else None (or no source to read).

    Evidence for a recovering rank that kept its stale weights: broadcast_object_list puts what arrived into the list
    it was passed, and a list written in the call is one that no name holds afterwards, so what was loaded can only be
    something bound before the call."""
    tree = source_tree(fn)
    if tree is None:
        return None
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    called = lambda node: ast.unparse(node.func).split(".")[-1]                           # noqa: E731
    listed = lambda node: node.args[0] if node.args else next(                           # noqa: E731
        (keyword.value for keyword in node.keywords if keyword.arg == "object_list"), None)
    loads = any(called(node) == "load_state_dict" for node in calls)
    found = [node for node in calls if called(node) == "broadcast_object_list" and isinstance(listed(node), ast.List)]
    if not loads or not found:
        return None
    return ast.unparse(min(found, key=lambda node: (node.lineno, node.col_offset)))


def _refuse_file_loads(name: str, results) -> None:
    """CheckFailed where a rank read, with torch.load, a file another rank wrote with torch.save during recovery:
    however right the weights it ended with, they did not come from the peer's memory over the group (a file a rank
    wrote itself, of bytes that came over the group, is its own business)."""
    writers = {file: rank for rank, result in enumerate(results) for _, file in result.get("saved", ())}
    for rank, result in enumerate(results):
        for index, path in result.get("loaded", ()):
            if writers.get(path, rank) == rank:
                continue
            returning, source = RECOVERY_CASES[index]
            raise CheckFailed(
                f"rank {returning} returning, source_rank={source}: rank {rank} read a state from a file rank "
                f"{writers[path]} had saved ({path!r}) inside {name}, where the peer's state is sent over the process "
                "group.\n"
                "Hint: a replica that comes back takes the state a healthy peer holds in memory, sent with a "
                "collective (broadcast_object_list of the state dicts, or a broadcast of each tensor): a file on "
                "disk is only as new as its last save, and on a cluster it sits on one machine's disk, where other "
                "ranks may not reach it. Send the state itself, not where it was saved.")


def judge_recovery(name: str, results, list_display: str | None = None) -> None:
    """Compare every rank's state after recovery with the healthy state, case by case; CheckFailed naming the
    mistake. `results`: `_recover_runner`'s, one per rank. `list_display`: a broadcast_object_list call of the answer
    that passes a list display (`list_display_broadcast`), evidence for why a recovering rank kept stale weights."""
    called = next((r["called"] for r in results if r.get("called")), None)
    if called:
        raise CheckFailed(f"{name} calls {called[0]}, the package's own answer to this exercise, so the check "
                          "cannot tell whether your code would be right.\nHint: write it yourself.")
    apart = next((r["apart"] for r in results if r.get("apart")), None)
    if apart:
        _apart_feedback(name, apart)
    _refuse_file_loads(name, results)
    healthy_model, healthy_optimizer = _healthy_replica()
    healthy = [p.detach().clone() for p in healthy_model.parameters()]
    healthy_next = _one_more_step(healthy_model, healthy_optimizer)
    stale = [p.detach().clone() for p in make_model(seed=7).parameters()]
    same = lambda a, b: all(torch.allclose(x, y, atol=1e-6) for x, y in zip(a, b))   # noqa: E731
    for index, (returning, source) in enumerate(RECOVERY_CASES):
        got = [result["cases"][index] for result in results]
        case = f"rank {returning} returning, source_rank={source}"
        spoiled = [rank for rank in range(len(got)) if rank != returning and same(got[rank]["params"], stale)]
        if spoiled:                                 # a healthy replica received the returning one's weights
            raise CheckFailed(f"{case}: rank {spoiled[0]}, a healthy replica, now holds the returning replica's stale "
                              f"weights (rank {returning}'s), not rank {source}'s.\nHint: they were sent from rank "
                              f"{returning}, the recovering one; send from source_rank, the healthy peer.")
        for rank, result in enumerate(got):
            if same(result["params"], healthy):
                continue
            if same(result["params"], stale) and any(index in r.get("dicts", ()) for r in results):
                hint = (f"rank {rank}, the recovering replica, kept its stale weights, and broadcast_object_list was "
                        "given a dict: it sends the items of the list it is passed, and a dict's items are its keys, "
                        "so only the key strings crossed (stored in the receivers' dict under 0, 1, ...), and what "
                        "each rank then loaded was its own state. Pass a list holding the state, objects = [state], "
                        "and load objects[0] after the call")
            elif same(result["params"], stale) and list_display:
                hint = (f"rank {rank}, the recovering replica, kept its stale weights, and `{list_display}` passes a "
                        "list written in the call: broadcast_object_list fills the list you pass in place, so what "
                        "arrived went into a list that no name holds, and what was loaded is not it. Keep the list in "
                        "a name and load from its item after the call, not from a name bound before it")
            elif same(result["params"], stale):
                hint = (f"rank {rank}, the recovering replica, kept its stale weights: it must load what the healthy "
                        "peer sent (model.load_state_dict) before the next step")
            else:
                hint = "after recovery every rank must hold source_rank's model parameters, unchanged"
            raise CheckFailed(f"{case}: rank {rank}'s parameters after {name} differ from the healthy replica's "
                              f"(rank {source}'s).\nHint: {hint}.")
        for rank, result in enumerate(got):
            if "error" in result:
                hint = (f"optimizer.state is keyed by {', '.join(result['keys'])} (the numbering state_dict() "
                        "gives), not by the parameters, where SGD looks each momentum_buffer up: the optimizer's "
                        "state must be keyed by its parameters; load it with optimizer.load_state_dict(...)"
                        if result["keys"] else "the optimizer passed in must still step after recovery: load the "
                        "sent state into it with optimizer.load_state_dict(...)")
                raise CheckFailed(f"{case}: on rank {rank} one SGD step after {name} raised {result['error']}."
                                  f"\nHint: {hint}.")
            if not same(result["stepped"], healthy_next):
                hint = ("the weights arrived but the momentum did not reach the optimizer passed in: the next SGD "
                        "step starts its momentum from zero. Send optimizer.state_dict() too and load it into that "
                        "optimizer (optimizer.load_state_dict)" if not result["momentum"] else
                        "the weights arrived, but the optimizer state differs from the healthy peer's: load its "
                        "optimizer.state_dict()")
                raise CheckFailed(f"{case}: on rank {rank} one SGD step after recovery gives other weights than "
                                  f"the healthy replica's.\nHint: {hint}.")
    cases = ", ".join(f"rank {returning} from rank {source}" for returning, source in RECOVERY_CASES)
    passed(f"{name}: the returning replica holds the source's weights and momentum ({cases}); one more step agrees "
           f"on all {QUORUM} ranks")

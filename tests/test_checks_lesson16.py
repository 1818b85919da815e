"""The lesson 16 checks reject plausible wrong answers with feedback that names the mistake, and only it.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part of the
feedback that names it, and that no other mistake's hint appears. The DiLoCo answers run in one
launch of 3 gloo ranks (the check's own runner, on 2 replicas and on 3, then its judge), the recovery answers in
one launch of 3; one DiLoCo answer that hangs goes through the check itself and runs into a short
timeout (a hang can only be proven by waiting for it).
"""

from __future__ import annotations

import io
import os
import re
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddp_lab.checks import CheckFailed
from ddp_lab.checks import lesson16
from ddp_lab.checks.lesson16 import (DILOCO_RUNS, QUORUM, _diloco_runner, _recover_hang_hint, _recover_runner,
                                     check_train_diloco, judge_diloco, judge_recovery, list_display_broadcast)
from ddp_lab.launcher.launch import launch

DEADLOCK_TIMEOUT = 2.0   # the hint does not depend on where the ranks wait, so a short wait suffices
DILOCO_HINTS = ("wrong sign", "summed, not averaged", "starts again every round", "inner AdamW state was averaged",
                "made anew every round", "plain momentum", "keep their local weights", "package's own answer",
                "a model's worth per inner step", "pseudo-gradient your replicas all-reduced was zero",
                "ran the outer step every", "not a number written for 2", "the steps were counted from 0",
                "ended with the weights it started from", "θ_global is the model's own parameters",
                "not zero in the first round", "θ_global never moved", "called no collective",
                "Δ to one rank (dist.reduce)", "LocalSGD's step", "the outer SGD has no momentum",
                "inside the loop over parameters", "no training reached the final weights",
                "A test made at the top of the loop", "crossed in 16 bits")
ZERO_DELTA = ("pseudo-gradient your replicas all-reduced was zero, so the outer step had nothing to apply. θ_global − "
              "θ_local is zero when θ_global is the model's own parameters")
RECOVER_HINTS = ("sent from rank 0, the recovering one", "sent from rank 1, the recovering one",
                 "sent from rank 2, the recovering one",
                 "kept its stale weights", "momentum did not",
                 "package's own answer", "the source rank never joined the broadcast",
                 "the optimizer's state must be keyed by its parameters", "no momentum_buffer yet",
                 "broadcast_object_list fills the list you pass in place", "read a state from a file",
                 "broadcast_object_list was given a dict")


def _diloco(model, batches, inner_steps, sign=1.0, mean=True, reset_outer=False, average_inner=False,
            fresh_inner=False, nesterov=True, keep_local=False, only_rank0=False, every_step=False, anchor="copy",
            period=None, written=None, from_zero=None, reset_first=False, reset="copy", grad_on_model=False,
            sync="all_reduce", momentum=0.9, average_params=False, step_per_param=False, noop=False):
    """A DiLoCo loop with one mistake switched on by its flag (the right answer with none). `anchor`: θ_global
    as a copy taken before training ("copy"), the model's own parameters detached ("view", no .clone()), or a
    copy taken again at every sync, after the inner steps ("late"). `period`: the outer step every `period`
    batches (a number written in), or "half" every len(batches) // 2 (two rounds assumed), not inner_steps.
    `written`: the mean over the exercise's 2 replicas written in, not divided by the world size: "before"
    `(g - p) / 2` before the all_reduce, "inplace" `delta /= 2` after it, "half" `0.5 * delta`, "variable"
    `world = 2`. `from_zero`: the steps counted from 0 against inner_steps, "every" `step % inner_steps == 0`,
    "after" `step > 0 and step % inner_steps == 0`. `reset_first`: θ_global copied into the model (rightly) before
    Δ is taken, not after the outer step. `anchor="state_dict"`: Δ taken against model.state_dict()'s tensors (the
    model's own), the outer SGD over clones of them. `reset="data"`: the model continues from θ_global by `p.data =
    g` (then shares its memory).
    `grad_on_model`: Δ set as the model's p.grad, not θ_global's. `sync`: "none" (no collective), "reduce" (Δ
    reduced to rank 0, θ_global broadcast back from it). `momentum`: the outer SGD's (0: none, plain SGD).
    `average_params`: every round the replicas' parameters averaged (LocalSGD), no outer optimizer. `step_per_param`:
    outer.step() inside the loop over parameters. `noop`: nothing at all (a body of `...`)."""
    if noop:
        return
    period = len(batches) // 2 if period == "half" else period or inner_steps
    world_size = dist.get_world_size()
    inner = torch.optim.AdamW(model.parameters(), lr=0.01)
    global_params = [p.detach() if anchor == "view" else p.detach().clone() for p in model.parameters()]
    state = list(model.state_dict().values())          # the model's own tensors, not copies
    outer = torch.optim.SGD(global_params, lr=0.7, momentum=momentum, nesterov=nesterov and momentum > 0)
    for step, (x, y) in enumerate(batches):
        inner.zero_grad()
        F.mse_loss(model(x), y).backward()
        inner.step()
        if every_step:      # LocalSGD at H = 1 inside the inner loop: the replicas average after every step
            with torch.no_grad():
                for p in model.parameters():
                    dist.all_reduce(p)
                    p /= world_size
        if from_zero and (step % period or (from_zero == "after" and step == 0)):
            continue
        if not from_zero and (step + 1) % period:
            continue
        with torch.no_grad():
            if reset_first:
                for g, p in zip(global_params, model.parameters()):
                    p.copy_(g)
            if anchor == "late":
                global_params = [p.detach().clone() for p in model.parameters()]
                outer = torch.optim.SGD(global_params, lr=0.7, momentum=0.9, nesterov=nesterov)
            if reset_outer:
                outer = torch.optim.SGD(global_params, lr=0.7, momentum=0.9, nesterov=nesterov)
            if average_params:
                for p in model.parameters():
                    dist.all_reduce(p)
                    p /= world_size
                continue
            for g, a, p in zip(global_params, state if anchor == "state_dict" else global_params,
                               model.parameters()):
                delta = sign * (a - p)
                if written == "before":
                    delta = (g - p) / 2
                if sync == "reduce":
                    dist.reduce(delta, dst=0)
                elif sync == "all_reduce" and (not only_rank0 or dist.get_rank() == 0):
                    dist.all_reduce(delta)
                if written is not None:
                    _over_two_written(g, delta, written)
                    continue
                (p if grad_on_model else g).grad = delta / world_size if mean else delta
                if step_per_param:
                    outer.step()
            if not step_per_param:
                outer.step()
            outer.zero_grad(set_to_none=True)
            if sync == "reduce":
                for g in global_params:
                    dist.broadcast(g, src=0)
            if average_inner:
                for state in inner.state.values():
                    for key in ("exp_avg", "exp_avg_sq"):
                        dist.all_reduce(state[key])
                        state[key] /= world_size
            if reset == "data":
                for g, p in zip(global_params, model.parameters()):
                    p.data = g
            elif not keep_local:
                for g, p in zip(global_params, model.parameters()):
                    p.copy_(g)
        if fresh_inner:
            inner = torch.optim.AdamW(model.parameters(), lr=0.01)


def _over_two_written(g, delta, written):
    """g.grad: the all-reduced `delta` averaged over 2 replicas written in (see `_diloco`'s `written`)."""
    if written == "before":
        g.grad = delta
    elif written == "inplace":
        delta /= 2
        g.grad = delta
    elif written == "half":
        g.grad = 0.5 * delta
    else:
        world = 2
        delta /= world
        g.grad = delta


def _outer_step(global_params, model, outer, wire=torch.float32, clear_first=False):
    """The right outer step but for `wire`, the dtype Δ is all-reduced in, and `clear_first`: outer.zero_grad()
    between setting θ_global's .grad and outer.step() (which then finds no .grad)."""
    with torch.no_grad():
        for g, p in zip(global_params, model.parameters()):
            delta = (g - p).to(wire)
            dist.all_reduce(delta)
            g.grad = delta.float() / dist.get_world_size()
        if clear_first:
            outer.zero_grad()
        outer.step()
        outer.zero_grad()
        for g, p in zip(global_params, model.parameters()):
            p.copy_(g)


def _written_diloco(wire=torch.float32, clear_first=False, at_the_top=False):
    """A DiLoCo answer written out (not `_diloco`'s flags): `_outer_step`'s mistakes, or `at_the_top`: the sync
    tested at the top of the loop, before the batch's inner step (`step > 0 and step % inner_steps == 0`)."""
    def train_diloco(model, batches, inner_steps):
        inner = torch.optim.AdamW(model.parameters(), lr=0.01)
        global_params = [p.detach().clone() for p in model.parameters()]
        outer = torch.optim.SGD(global_params, lr=0.7, momentum=0.9, nesterov=True)
        for step, (x, y) in enumerate(batches):
            if at_the_top and step > 0 and step % inner_steps == 0:
                _outer_step(global_params, model, outer)
            inner.zero_grad()
            F.mse_loss(model(x), y).backward()
            inner.step()
            if not at_the_top and (step + 1) % inner_steps == 0:
                _outer_step(global_params, model, outer, wire, clear_first)
    return train_diloco


SYNCED_AT_THE_TOP = _written_diloco(at_the_top=True)
CLEARED_BEFORE_THE_STEP = _written_diloco(clear_first=True)
BFLOAT16_WIRE = _written_diloco(wire=torch.bfloat16)


ZERO_FROM_START = ("pseudo-gradient your replicas all-reduced was zero, so the outer step had nothing to apply, and "
                   "rank 0 ended with the weights it started from: Δ = θ_global − θ_local is zero when it is taken "
                   "once the model has been reset to θ_global, or against tensors that are the model's own")
OVER_TWO = ("divided by 2, not 3: the average must divide by the number of replicas, dist.get_world_size(), not a "
            "number written for 2")
DILOCO_ANSWERS = [({}, None), ({"sign": -1.0}, "wrong sign"), ({"mean": False}, "summed, not averaged"),
                  ({"reset_outer": True}, "starts again every round"),
                  ({"average_inner": True}, "inner AdamW state was averaged"),
                  ({"fresh_inner": True}, "made anew every round"), ({"nesterov": False}, "plain momentum"),
                  ({"keep_local": True}, "keep their local weights"),
                  ({"every_step": True}, "a model's worth per inner step"),
                  # θ_global never apart from the model: every pseudo-gradient is zero (which ends as keep_local does)
                  ({"anchor": "view"}, ZERO_DELTA), ({"anchor": "late"}, ZERO_DELTA),
                  # θ_global apart from the model, but copied into it before Δ is taken: Δ is zero, the model ends
                  # where it began
                  ({"reset_first": True}, ZERO_FROM_START),
                  # the period written as the check's first inner_steps, or read off the batches (two rounds assumed):
                  # right for 8 batches and inner_steps=4, not for 6 and 2
                  ({"period": 4}, "ran the outer step every 4 batches, but inner_steps was 2"),
                  ({"period": "half"}, "ran the outer step every 3 batches, but inner_steps was 2"),
                  # the enumerate index against inner_steps: the outer step one batch late, the last round's missed
                  ({"from_zero": "after"}, "ran the outer step after batch 5 of 8, where inner_steps=4 puts it after "
                                           "batches 4 and 8: the steps were counted from 0"),
                  ({"from_zero": "every"}, "ran the outer step after batches 1 and 5 of 8, where inner_steps=4 puts "
                                           "it after batches 4 and 8: the steps were counted from 0"),
                  # the mean over the exercise's 2 replicas written in (in forms the check's source scan lets through):
                  # right on 2 replicas, not on 3
                  ({"written": "before"}, OVER_TWO), ({"written": "inplace"}, OVER_TWO),
                  ({"written": "half"}, OVER_TWO), ({"written": "variable"}, OVER_TWO),
                  # the model continues from θ_global by sharing its memory: Δ is zero from the second round on
                  ({"reset": "data"}, "not zero in the first round, and all zero in round 2"),
                  # Δ against the model's own tensors (state_dict() gives them, not copies): zero, as a late reset's
                  ({"anchor": "state_dict"}, ZERO_FROM_START),
                  # Δ on the model's .grad: the outer SGD over θ_global has no .grad to step with
                  ({"grad_on_model": True}, "θ_global never moved"),
                  # no collective at all; Δ reduced to rank 0, θ_global broadcast back (values right, twice the bytes)
                  ({"sync": "none"}, "your replicas called no collective"),
                  ({"sync": "reduce"}, "Δ to one rank (dist.reduce), then θ_global back from it (dist.broadcast)"),
                  # the parameters averaged every round, LocalSGD's step, where DiLoCo's outer SGD steps with Δ
                  ({"average_params": True}, "moved to the average of their local weights, LocalSGD's step"),
                  # the outer SGD without momentum; outer.step() indented into the loop over parameters
                  ({"momentum": 0.0}, "the outer SGD has no momentum"),
                  ({"step_per_param": True}, "the outer step ran inside the loop over parameters"),
                  # a body of `...`: nothing sent and nothing trained, not 'each took its outer step alone'
                  ({"noop": True}, "rank 0 ended with the weights it started from, and no replica called a "
                                   "collective: no training reached the final weights"),
                  # written out: the right loop, then its outer step tested at the top of the loop; zero_grad()
                  # between setting θ_global's .grad and the step; Δ all-reduced in bfloat16
                  (_written_diloco(), None),
                  (SYNCED_AT_THE_TOP, "ran the outer step after batch 4 of 8, where inner_steps=4 puts it after "
                                      "batches 4 and 8: the last round never synced. A test made at the top of the "
                                      "loop"),
                  (CLEARED_BEFORE_THE_STEP, "θ_global never moved"),
                  (BFLOAT16_WIRE, "crossed in 16 bits"),
                  # two mistakes at once, one sync of two in float32: half the bytes, but no 16-bit wire
                  ({"from_zero": "after", "sign": -1.0}, "each round: H inner AdamW steps, then Δ")]


def _run_diloco_answers(rank: int) -> list:
    def answer(flags):
        if callable(flags):                 # an answer written out
            return flags

        def train_diloco(model, batches, inner_steps):
            return _diloco(model, batches, inner_steps, **flags)
        return train_diloco
    return _diloco_runner(rank, tuple(answer(flags) for flags, _ in DILOCO_ANSWERS))


@pytest.fixture(scope="module")
def diloco_results():
    ranks = max(size for size, _ in DILOCO_RUNS)
    per_rank = launch(_run_diloco_answers, nprocs=ranks, backend="gloo", timeout=60, init_process_group=False)
    return [[per_rank[rank][i] for rank in range(ranks)] for i in range(len(DILOCO_ANSWERS))]


def _fails_with_only(judge, results, hints, expected):
    with pytest.raises(CheckFailed) as failure:
        judge("answer", results)
    message = str(failure.value)
    assert expected in message, message
    others = [hint for hint in hints if hint not in expected and hint in message]
    assert not others, f"other hints fired too: {others}\n{message}"


@pytest.mark.parametrize("index", range(len(DILOCO_ANSWERS)))
def test_diloco_names_each_mistake_and_only_it(diloco_results, index, capsys):
    expected = DILOCO_ANSWERS[index][1]
    if expected is None:
        judge_diloco("answer", diloco_results[index])
        assert capsys.readouterr().out.startswith("✓ answer: 2 replicas, 2 rounds of 4 and 3 rounds of 2 AdamW steps")
    else:
        _fails_with_only(judge_diloco, diloco_results[index], DILOCO_HINTS, expected)


def test_diloco_failure_shows_the_values_that_differ(diloco_results):
    with pytest.raises(CheckFailed) as failure:
        judge_diloco("answer", diloco_results[1])          # the pseudo-gradient's sign
    got, expected = re.search(r"got (\[[^]]*\]), expected (\[[^]]*\])", str(failure.value)).groups()
    assert got != expected and "a tensor of shape" not in str(failure.value)


def test_diloco_inner_state_mistake_is_also_seen_in_the_bytes(diloco_results):
    sent = sum(n for _, n in diloco_results[4][0][0]["sent"])      # [answer][rank][run]
    right = sum(n for _, n in diloco_results[0][0][0]["sent"])
    assert sent == 3 * right      # the pseudo-gradient plus AdamW's two moments, every round


def _diloco_failure(diloco_results, **flags) -> str:
    index = next(i for i, (answer, _) in enumerate(DILOCO_ANSWERS) if answer == flags)
    with pytest.raises(CheckFailed) as failure:
        judge_diloco("answer", diloco_results[index])
    return str(failure.value)


@pytest.mark.parametrize("from_zero", ["after", "every"])
def test_diloco_steps_counted_from_zero_are_named_not_a_period(diloco_results, from_zero):
    message = _diloco_failure(diloco_results, from_zero=from_zero)
    assert "Count batches from 1, or sync when (step + 1) % inner_steps == 0" in message, message
    assert "the period is the argument inner_steps" not in message and "every 5 batches" not in message, message


def test_diloco_never_moved_names_a_grad_cleared_before_the_step(diloco_results):
    index = next(i for i, (answer, _) in enumerate(DILOCO_ANSWERS) if answer is CLEARED_BEFORE_THE_STEP)
    with pytest.raises(CheckFailed) as failure:
        judge_diloco("answer", diloco_results[index])
    message = str(failure.value)
    assert "before anything clears that .grad (zero_grad() sets every .grad to None" in message, message


@pytest.mark.parametrize("flags", [{"reset_first": True}, {"anchor": "state_dict"}])
def test_diloco_delta_of_zeros_from_the_start_names_both_causes(diloco_results, flags):
    # a reset before Δ and Δ against the model's own tensors give the same zeros and the same weights: both named,
    # not θ_global kept as the model's parameters (whose replicas train on: keep_local's weights)
    message = _diloco_failure(diloco_results, **flags)
    assert "Compute Δ (and all-reduce it) after the inner steps and before the model is reset to θ_global" in message
    assert "model.state_dict() and model.parameters() give the model's tensors, not copies" in message, message
    assert "a copy taken after the inner steps" not in message, message


def test_diloco_counts_every_collective_a_replica_hands_a_model_to(diloco_results):
    # reduce + broadcast: the values are right, but two models go out per round, where the ✓ line would say one
    message = _diloco_failure(diloco_results, sync="reduce")
    assert message.startswith("2 replicas, 8 batches, inner_steps=4: rank 0 handed 336 bytes to collectives over 2 "
                              "rounds; DiLoCo sends one pseudo-gradient per round: 84 bytes each, 168 in all."), message


def test_diloco_stops_a_deadlock_with_a_hint():
    def train_diloco(model, batches, inner_steps):
        _diloco(model, batches, inner_steps, only_rank0=True)
    with pytest.raises(CheckFailed) as failure:
        check_train_diloco(train_diloco, timeout=DEADLOCK_TIMEOUT)
    message = str(failure.value)
    assert "did not finish within" in message and "a collective under a condition on the rank" in message, message


def _recover(model, optimizer, source_rank, src=None, load=True, optimizer_too=True, loader=None,
             new_optimizer=False, source_skips=False, gather_last=False, assign_state=False, buffers=None):
    """The right answer with no flag; `src` and `loader` fix the source and the rank that loads, as if the
    check's first case were the only one (`src="last"`: dist.get_world_size() - 1); `new_optimizer` loads the
    state into a new SGD, not the caller's; `source_skips`: only the receiving ranks call the broadcast (under
    `if rank != source_rank:`); `gather_last`: every rank's state gathered (all_gather_object), the last one's
    loaded; `assign_state`: `optimizer.state = ` the sent state_dict()'s state (keyed by 0, 1, ...), not loaded;
    `buffers`: tensor broadcasts instead of objects, each parameter then its momentum_buffer, "where present" (the
    returning rank has none), or "flat from source" (the source sends its parameters as one flat tensor)."""
    if buffers:
        _recover_tensors(model, optimizer, source_rank, buffers)
        return
    if source_skips and dist.get_rank() == source_rank:
        return
    state = [{"model": model.state_dict(), "optimizer": optimizer.state_dict()}]
    if gather_last:
        states = [None] * dist.get_world_size()
        dist.all_gather_object(states, state[0])
        state = [states[-1]]
    else:
        src = dist.get_world_size() - 1 if src == "last" else src
        dist.broadcast_object_list(state, src=source_rank if src is None else src)
    loads = dist.get_rank() != source_rank if loader is None else dist.get_rank() == loader
    if loads and load:
        model.load_state_dict(state[0]["model"])
        if new_optimizer:
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        if assign_state:
            optimizer.state = state[0]["optimizer"]["state"]
        elif optimizer_too:
            optimizer.load_state_dict(state[0]["optimizer"])


def _recover_tensors(model, optimizer, source_rank, buffers):
    """`_recover` by tensor broadcasts (see its `buffers`)."""
    with torch.no_grad():
        if buffers == "flat from source" and dist.get_rank() == source_rank:
            dist.broadcast(torch.nn.utils.parameters_to_vector(model.parameters()), src=source_rank)
            return
        for p in model.parameters():
            dist.broadcast(p, src=source_rank)
            buffer = optimizer.state.get(p, {}).get("momentum_buffer")
            if buffer is not None:
                dist.broadcast(buffer, src=source_rank)


RECOVER_ANSWERS = [({}, None), ({"src": 0}, "sent from rank 0, the recovering one"),
                   ({"load": False}, "kept its stale weights"), ({"optimizer_too": False}, "momentum did not"),
                   # right for the first case only (rank 0 returning, source 1): the second case shows them
                   ({"src": 1}, "sent from rank 1, the recovering one"), ({"loader": 0}, "kept its stale weights"),
                   ({"new_optimizer": True}, "momentum did not"),
                   # the ranks meet the source's skipped broadcast at once (no hang): the check names the source
                   ({"source_skips": True}, "the source rank never joined the broadcast"),
                   # the last rank's state whatever source_rank says: right while rank 2 is healthy, not once it returns
                   ({"src": 2}, "sent from rank 2, the recovering one"), ({"src": "last"}, "sent from rank 2, the "
                                                                                      "recovering one"),
                   ({"gather_last": True}, "sent from rank 2, the recovering one"),
                   # the sent state_dict()'s state assigned to optimizer.state: keyed by 0, 1, ..., the next step fails
                   ({"assign_state": True}, "the optimizer's state must be keyed by its parameters; load it with "
                                            "optimizer.load_state_dict(...)"),
                   # a buffer broadcast only where a rank holds one: the returning rank pairs its next parameter with
                   # the others' buffer, of another size
                   ({"buffers": "where present"}, "only rank 0 differs, the returning one, which has no "
                                                  "momentum_buffer yet"),
                   ({"buffers": "flat from source"}, "rank 1 called dist.broadcast(src=1) with 84 bytes while ranks "
                                                     "0, 2 called it with 48 bytes")]


def recover_loads_the_name_bound_before(model, optimizer, source_rank):
    """Wrong: the list passed to broadcast_object_list is written in the call, so what arrived is never read."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    dist.broadcast_object_list([state], src=source_rank)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])


def recover_never_loads(model, optimizer, source_rank):
    """Wrong: what arrived is never loaded; the list display holds the state, but nothing is loaded from anything."""
    dist.broadcast_object_list([{"model": model.state_dict()}], src=source_rank)


def _from_a_saved_file(model, optimizer, source_rank, name, open_it=False):
    """Wrong: the source saves its state to a file, the others read it (between barriers), by its path or through an
    open file: nothing crosses the group but the barriers, though the weights come out right."""
    path = os.path.join(tempfile.gettempdir(), f"ddp-lab-{name}-{os.getppid()}-{source_rank}.pt")
    if dist.get_rank() == source_rank:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    dist.barrier()
    if dist.get_rank() != source_rank:
        if open_it:
            with open(path, "rb") as file:
                state = torch.load(file)
        else:
            state = torch.load(path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    dist.barrier()
    if dist.get_rank() == source_rank:
        os.remove(path)


def recover_from_a_file(model, optimizer, source_rank):
    _from_a_saved_file(model, optimizer, source_rank, "recover")


def recover_through_an_open_file(model, optimizer, source_rank):
    _from_a_saved_file(model, optimizer, source_rank, "handle", open_it=True)


def recover_through_a_file_of_its_own(model, optimizer, source_rank):
    """Right: the state comes over the group (broadcast_object_list); each rank writes what arrived to a file of its
    own and loads it from there."""
    box = [{"model": model.state_dict(), "optimizer": optimizer.state_dict()}]
    dist.broadcast_object_list(box, src=source_rank)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "state.pt")
        torch.save(box[0], path)
        state = torch.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])


def recover_from_a_broadcast_path(model, optimizer, source_rank):
    """Wrong: only where the source saved its state crosses the group; every rank reads the state from the file."""
    box = [None]
    if dist.get_rank() == source_rank:
        box = [os.path.join(tempfile.gettempdir(), f"ddp-lab-peer-{os.getppid()}-{source_rank}.pt")]
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, box[0])
    dist.broadcast_object_list(box, src=source_rank)
    state = torch.load(box[0])
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    dist.barrier()
    if dist.get_rank() == source_rank:
        os.remove(box[0])


def recover_through_a_buffer(model, optimizer, source_rank):
    """Right: the source's state saved into bytes in memory, sent as a uint8 tensor, read back with torch.load from
    a buffer (no file)."""
    size = torch.zeros(1, dtype=torch.int64)
    if dist.get_rank() == source_rank:
        buffer = io.BytesIO()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
        data = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
        size[0] = data.numel()
    dist.broadcast(size, src=source_rank)
    if dist.get_rank() != source_rank:
        data = torch.empty(int(size[0]), dtype=torch.uint8)
    dist.broadcast(data, src=source_rank)
    state = torch.load(io.BytesIO(data.numpy().tobytes()))
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])


def recover_with_a_dict(model, optimizer, source_rank):
    """Wrong: broadcast_object_list given the dict of states: only its keys cross, each rank loads its own state."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    dist.broadcast_object_list(state, src=source_rank)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])


# answers written out (their source is read for evidence, `lesson16.list_display_broadcast`), run in the same launch
RECOVER_WRITTEN = [(recover_loads_the_name_bound_before,
                    "kept its stale weights, and `dist.broadcast_object_list([state], src=source_rank)` passes a list "
                    "written in the call: broadcast_object_list fills the list you pass in place"),
                   (recover_never_loads, "kept its stale weights: it must load what the healthy peer sent"),
                   (recover_from_a_file, "rank 0 returning, source_rank=1: rank 0 read a state from a file"),
                   (recover_from_a_broadcast_path, "rank 0 returning, source_rank=1: rank 0 read a state from a file"),
                   (recover_with_a_dict, "kept its stale weights, and broadcast_object_list was given a dict"),
                   (recover_through_an_open_file, "rank 0 returning, source_rank=1: rank 0 read a state from a file "
                                                  "rank 1 had saved"),
                   (recover_through_a_buffer, None), (recover_through_a_file_of_its_own, None)]


def _run_recover_answers(rank: int) -> list:
    def answer(flags):
        def recover_from_peer(model, optimizer, source_rank):
            return _recover(model, optimizer, source_rank, **flags)
        return recover_from_peer
    answers = [answer(flags) for flags, _ in RECOVER_ANSWERS] + [written for written, _ in RECOVER_WRITTEN]
    return [_recover_runner(rank, one) for one in answers]


@pytest.fixture(scope="module")
def recover_results():
    per_rank = launch(_run_recover_answers, nprocs=QUORUM, backend="gloo", timeout=60)
    return [[per_rank[rank][i] for rank in range(QUORUM)] for i in range(len(RECOVER_ANSWERS) + len(RECOVER_WRITTEN))]


@pytest.mark.parametrize("index", range(len(RECOVER_ANSWERS)))
def test_recovery_names_each_mistake_and_only_it(recover_results, index, capsys):
    expected = RECOVER_ANSWERS[index][1]
    if expected is None:
        judge_recovery("answer", recover_results[index])
        assert capsys.readouterr().out.startswith("✓ answer: the returning replica holds the source's weights and "
                                                  "momentum (rank 0 from rank 1, rank 1 from rank 2, rank 2 from "
                                                  "rank 0); one more step agrees on all 3 ranks")
    else:
        _fails_with_only(judge_recovery, recover_results[index], RECOVER_HINTS, expected)


@pytest.mark.parametrize("index", range(len(RECOVER_WRITTEN)), ids=[a.__name__ for a, _ in RECOVER_WRITTEN])
def test_recovery_answers_written_out_are_named_by_their_evidence(recover_results, index):
    """A list display named only where something else is loaded; a state read from a file another rank saved refused
    (by path or through an open file), one read back from bytes that came over the group passed (from a buffer or a
    file of the rank's own); a dict given to broadcast_object_list named."""
    answer, expected = RECOVER_WRITTEN[index]
    results = recover_results[len(RECOVER_ANSWERS) + index]
    if expected is None:
        judge_recovery(answer.__name__, results, list_display_broadcast(answer))
        return
    _fails_with_only(lambda name, r: judge_recovery(name, r, list_display_broadcast(answer)), results,
                     RECOVER_HINTS, expected)


def test_recovery_hang_hint_names_the_waiting_ranks():
    hint = _recover_hang_hint({"broadcast_object_list"}, {0: "broadcast_object_list", 1: None, 2: None})
    assert "ranks [0] wait" in hint and "every member of the quorum calls it" in hint


def test_recovery_names_the_source_that_skipped_the_broadcast(recover_results):
    index = next(i for i, (flags, _) in enumerate(RECOVER_ANSWERS) if flags.get("source_skips"))
    with pytest.raises(CheckFailed, match=r"^rank 0 returning, source_rank=1: ranks 0, 2 called "
                                          r"dist\.broadcast_object_list\(src=1\), but rank 1 returned from answer "
                                          r"without calling it"):
        judge_recovery("answer", recover_results[index])


def _recovery_failure(recover_results, **flags) -> str:
    index = next(i for i, (answer, _) in enumerate(RECOVER_ANSWERS) if answer == flags)
    with pytest.raises(CheckFailed) as failure:
        judge_recovery("answer", recover_results[index])
    return str(failure.value)


def test_recovery_an_optimizer_state_keyed_by_numbers_fails_in_one_line(recover_results):
    message = _recovery_failure(recover_results, assign_state=True)
    assert message.startswith("rank 0 returning, source_rank=1: on rank 0 one SGD step after answer raised KeyError "
                              "(on a parameter).\nHint: optimizer.state is keyed by 0, 1, 2"), message
    assert len(message.splitlines()) == 2 and "Traceback" not in message and "tensor(" not in message, message


def test_recovery_tensors_of_other_sizes_are_stopped_before_gloo_aborts(recover_results):
    message = _recovery_failure(recover_results, buffers="where present")
    assert message.startswith("rank 0 returning, source_rank=1: rank 0 called dist.broadcast(src=1) with 16 bytes "
                              "while ranks 1, 2 called it with 48 bytes"), message
    assert "every rank must take part in each collective with a tensor of the same size" in message, message
    assert "SIGABRT" not in message and len(message.splitlines()) == 2, message


def test_recovery_size_hint_names_the_momentum_only_where_the_returning_rank_differs(recover_results):
    message = _recovery_failure(recover_results, buffers="flat from source")
    assert "a tensor of the same size" in message and "momentum_buffer" not in message, message


def test_recovery_hang_hint_when_every_rank_waits():
    hint = _recover_hang_hint({"recv"}, {0: "recv", 1: "recv", 2: "recv"})
    assert "all 3 ranks wait" in hint and "the other ranks never call" not in hint


def diloco_over_two_written(model, batches, inner_steps):
    inner = torch.optim.AdamW(model.parameters(), lr=0.01)
    global_params = [p.detach().clone() for p in model.parameters()]
    outer = torch.optim.SGD(global_params, lr=0.7, momentum=0.9, nesterov=True)
    for step, (x, y) in enumerate(batches):
        inner.zero_grad()
        F.mse_loss(model(x), y).backward()
        inner.step()
        if (step + 1) % inner_steps == 0:
            with torch.no_grad():
                for g, p in zip(global_params, model.parameters()):
                    delta = g - p
                    dist.all_reduce(delta)
                    g.grad = delta / 2                  # the check's number of replicas, written in
                outer.step()
                for g, p in zip(global_params, model.parameters()):
                    p.copy_(g)


def test_a_divisor_written_as_a_number_is_refused_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(lesson16, "run_on_ranks", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^diloco_over_two_written divides a pseudo-gradient by 2, a number written "
                                          r"in the code \(`g\.grad = delta / 2`\)\.\nHint: divide by the number of "
                                          r"replicas"):
        lesson16.check_train_diloco(diloco_over_two_written)



def diloco_over_world_written(model, batches, inner_steps):
    world = 2                                           # the check's number of replicas, as a variable
    inner = torch.optim.AdamW(model.parameters(), lr=0.01)
    global_params = [p.detach().clone() for p in model.parameters()]
    outer = torch.optim.SGD(global_params, lr=0.7, momentum=0.9, nesterov=True)
    for step, (x, y) in enumerate(batches):
        inner.zero_grad()
        F.mse_loss(model(x), y).backward()
        inner.step()
        if (step + 1) % inner_steps == 0:
            with torch.no_grad():
                for g, p in zip(global_params, model.parameters()):
                    d = g - p
                    dist.all_reduce(d)
                    d /= world
                    g.grad = d
                outer.step()
                for g, p in zip(global_params, model.parameters()):
                    p.copy_(g)


def test_a_mean_over_two_the_source_scan_misses_fails_on_three_replicas():
    with pytest.raises(CheckFailed, match=r"^3 replicas, 6 batches, inner_steps=2: rank 0: parameter 0 .*\nHint: on 3 "
                                          r"replicas your pseudo-gradient was divided by 2, not 3: the average must "
                                          r"divide by the number of replicas, dist\.get_world_size\(\)"):
        check_train_diloco(diloco_over_world_written)

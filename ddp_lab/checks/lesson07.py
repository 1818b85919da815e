"""Checks for the exercises of notebooks/07-pipeline-parallelism.ipynb: pipeline parallelism by hand.

    ddp_lab.checks.lesson07.check_one_f_one_b_stage(one_f_one_b_stage)
    ddp_lab.checks.lesson07.check_idle_fraction(idle_fraction)

The first runs the answer on 3 gloo ranks (a 3-stage pipeline with 4 micro-batches), then, in the
same launch, on 2 of them (2 stages, 3 micro-batches), so that a count written for the first
run fails the second; a short timeout ends a deadlock with a message instead of a hang. The stage it is given
notes the micro-batches it holds, and two of them given one input tensor (a receive buffer reused while its earlier
activation is saved for a backward). The second is a plain function of timestamps, judged on ideal and
measured-looking timelines, a wrong value named where one mistake gives it on every case (an answer that calls the
package's own `idle_fraction` is refused).

Introduced in notebooks/07-pipeline-parallelism.ipynb.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (answer_raised, call_case, describe, ensure_written, first_mismatch, groups_of,
                                   judge_in_order, only_point_to_point, package_answer_used, refuse_written_divisor,
                                   run_on_ranks, two_numbers, watching_calls, with_a_note)
from ddp_lab.checks.p2p_log import (SENDS, calls_never_waited, log_path, logging_point_to_point,
                                   non_neighbour_calls, read_log, read_logs, receives_never_waited, segfaulted,
                                   stuck_receives, waits)
from ddp_lab.course.pipeline_parallel import schedules
from ddp_lab.course.pipeline_parallel.schedules import Span, gpipe_actions, ideal_timeline, one_f_one_b_actions

WIDTH, MICRO = 6, 2     # features; samples per micro-batch


@dataclass(frozen=True)
class Case:
    """One run of the 1F1B check: a pipeline of `stages` stages (one per rank) and `microbatches` micro-batches."""

    stages: int
    microbatches: int

    def __str__(self) -> str:
        return f"{self.stages} stages with {self.microbatches} micro-batches"


# 3 stages first (a middle stage exists, and a wrong peer shows), then 2 stages with 3 micro-batches on ranks 0
# and 1 of the same launch: a warm-up, a last stage or a loop written for the first run's counts fails there.
CASES = (Case(stages=3, microbatches=4), Case(stages=2, microbatches=3))
WORLD_SIZE, MICROBATCHES = CASES[0].stages, CASES[0].microbatches    # the exercise's run, judged first

PEERS = ("forward: receive the activation from rank - 1 (the first stage reads inputs[i] instead) and "
         "send the output to rank + 1 (the last stage computes the loss instead); backward: receive the "
         "output's gradient from rank + 1 (the last stage starts from its loss) and send x.grad to rank - 1 "
         "(the first stage sends nothing)")


# --- one_f_one_b_stage ----------------------------------------------------------------------

def _model(case: Case) -> nn.Sequential:
    torch.manual_seed(7)
    return nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(case.stages)])


def _batch(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(70)
    return (torch.randn(case.microbatches * MICRO, WIDTH, generator=generator),
            torch.randn(case.microbatches * MICRO, WIDTH, generator=generator))


class _CountingStage(nn.Module):
    """Wraps a stage; counts the micro-batches whose activations it holds (forward done, backward not started), and
    notes (`shared_input`) a forward given the very tensor another held micro-batch's forward was given: a receive
    buffer reused while the activation received into it before is still saved for a backward."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.live = self.peak = self.forwards = 0
        self.held_inputs: list[int] = []   # data_ptr of the input of each micro-batch held
        self.shared_input = False

    def forward(self, x):
        out = self.inner(x)
        self.forwards += 1
        if out.requires_grad:
            self.live += 1
            self.peak = max(self.peak, self.live)
            pointer = x.data_ptr()
            self.shared_input = self.shared_input or pointer in self.held_inputs
            self.held_inputs.append(pointer)
            out.register_hook(lambda grad: self._backward_started(grad, pointer))   # runs when d loss / d out is known
        return out

    def _backward_started(self, grad, pointer: int):
        self.live -= 1
        if pointer in self.held_inputs:
            self.held_inputs.remove(pointer)
        return grad


def _stage_runner(rank: int, one_f_one_b_stage, log_directory: str, case: Case) -> dict:
    stage = _CountingStage(_model(case)[rank])
    x, y = _batch(case)
    inputs, targets = list(x.split(MICRO)), list(y.split(MICRO))
    running = (f"running stage {rank} of a {dist.get_world_size()}-stage pipeline with "
               f"{case.microbatches} micro-batches on rank {rank}")
    with only_point_to_point(), logging_point_to_point(log_path(log_directory, rank)):
        returned = call_case(one_f_one_b_stage, running, stage, inputs, targets)
    losses, odd = _losses(returned)
    logged = read_log(log_path(log_directory, rank))
    return {"grads": [None if p.grad is None else p.grad.clone() for p in stage.parameters()],
            "losses": losses, "peak": stage.peak, "forwards": stage.forwards, "shared_input": stage.shared_input,
            "wrong_peers": non_neighbour_calls({rank: logged}, case.stages) if logged is not None else [],
            "never_waited": calls_never_waited(rank, logged[0]) if logged is not None else [],
            **({"returned": odd} if odd else {})}


def _losses(returned) -> tuple[list[float], str | None]:
    """(the losses a stage returned, as floats, None) where it returned None (no losses) or a sequence of numbers
    (one-element tensors included); else ([], what it returned, in words)."""
    if returned is None:
        return [], None
    try:
        items = list(returned)
    except TypeError:   # a number or a tensor of no dimension: the sum of the losses, not their list
        return [], describe(returned)
    for index, item in enumerate(items):
        try:
            float(item)
        except (TypeError, ValueError, RuntimeError):   # RuntimeError: a tensor of more than one element
            return [], f"{describe(returned)}, whose item {index} is {describe(item)}"
    return [float(item) for item in items], None


def _reference(case: Case, last_only: bool = False) -> tuple[float, list[list[torch.Tensor]]]:
    """(the whole batch's mean loss, every stage's gradients) of one process; last_only: the gradients that the last
    micro-batch's share of the loss alone gives (what is left when each backward starts from zeroed gradients)."""
    model = _model(case)
    x, y = _batch(case)
    if last_only:
        x, y = x[-MICRO:], y[-MICRO:]
    loss = F.mse_loss(model(x), y) / (case.microbatches if last_only else 1)
    loss.backward()
    return loss.item(), [[p.grad for p in block.parameters()] for block in model]


def _explain(failure) -> str | None:
    """A hint only where the error itself shows the mistake; otherwise the error and the learner's lines speak."""
    exception = failure.exception
    kind, message = getattr(exception, "kind", ""), getattr(exception, "message", "")
    if kind == "TypeError" and "NoneType" in message and "tensor" in message:
        if failure.rank == 0:
            return ("rank 0 handed None to a send: the first stage has no stage before it, so in backward it sends "
                    "nothing (its input is the batch, inputs[i], which has no .grad).")
        return ("a tensor this rank sent is None. The gradient a stage sends back is x.grad of the activation x it "
                "received: None until backward has run through the stage, and None for an x not marked "
                "x.requires_grad_() before the stage ran on it (and a stage's output, which is no leaf, keeps no "
                ".grad).")
    if "does not require grad and does not have a grad_fn" in message:
        return ("backward ran on a tensor with no graph behind it: the stage's output was detached (out.detach(), "
                "what one sends) or computed under torch.no_grad(), and the stage has parameters, so its own output "
                "has a grad_fn. Keep the output as the stage's forward returned it for that micro-batch's backward.")
    if "Pair is not connected" in message:
        return (f"gloo's 'Pair is not connected' means a rank sent to or received from itself: a send or recv names "
                f"this rank instead of a neighbour stage. {PEERS}.")
    return None


def _case_folder(log_directory: str, case: Case, answer: int = 0) -> str:
    """The folder the ranks of `case` log answer number `answer`'s calls to."""
    return os.path.join(log_directory, str(case.stages), str(answer))


def _logs_of_the_case_of(log_directory: str, ranks) -> tuple[Case, dict | None]:
    """(the case in which `ranks` failed or hung, its ranks' logged calls), for the check's one answer: the last case
    that every one of `ranks` belongs to and every rank of it started (a rank logs a case once its group is set up,
    which needs every rank of the case). A rank outside a later case failed in an earlier one."""
    for case in reversed(CASES):
        if any(rank >= case.stages for rank in ranks):
            continue
        logs = read_logs(_case_folder(log_directory, case), case.stages)
        if logs is not None:
            return case, logs
    return CASES[0], read_logs(_case_folder(log_directory, CASES[0]), CASES[0].stages)


def _case_of_a_raise(failure, log_directory: str) -> tuple[Case, dict | None]:
    """The case a failing rank was running: the one its exception names (`_stage_runner`'s call says "an N-stage
    pipeline"), else (a crash) as `_logs_of_the_case_of` finds it."""
    running = getattr(failure.exception, "case", "")
    for case in CASES:
        if f"of a {case.stages}-stage pipeline" in running:
            return case, read_logs(_case_folder(log_directory, case), case.stages)
    return _logs_of_the_case_of(log_directory, [failure.rank])


def _second_run_note(case: Case, judged: bool = True) -> str:
    """What a failure on the second case adds: the first run was right (`judged`; else it only ran to its end, the
    launch stopping before it was judged), so a count written for it is the likely cause."""
    first = CASES[0]
    before = (f"On {first} (the check's first run) every stage was right" if judged else
              f"The check's first run, on {first}, ran to its end (it was not judged: the launch stopped here)")
    return (f"{before}; this is its second run, {case}: look for a count written for the first run ({first.stages} "
            f"stages: the last stage as rank {first.stages - 1}, a warm-up of {first.stages - 1} - rank; "
            f"{first.microbatches} micro-batches) where world_size, rank or m = len(inputs) belongs.")


def _on_the_second_run(case: Case, said: str) -> str:
    """A failure's hint (`said`), after the second run's note where the failure came on the second case (the first
    was not judged: the launch stopped)."""
    return said if case == CASES[0] else with_a_note(_second_run_note(case, judged=False), said)


def _wrong_peers(logs, case: Case) -> str | None:
    """What the ranks did and the hint, where a logged send or recv names a rank that is not a neighbour stage."""
    wrong = non_neighbour_calls(logs, case.stages) if logs is not None else []
    if not wrong:
        return None
    return f"What the ranks did: {'; '.join(wrong)}.\nHint: a send or recv must name a neighbour stage. {PEERS}."


def _explainer(log_directory: str):
    """The failure hint of the 1F1B check: a rank that segfaulted (gloo on a peer that is no rank: p2p_log.segfaulted)
    is explained from the logged calls where they show a send or recv naming no neighbour, as a hang is (the stack
    dump may have lost the frame of the call); any other failure by `_explain`."""

    def explain(failure) -> str | None:
        case, logs = _case_of_a_raise(failure, log_directory)
        hint = (_wrong_peers(logs, case) if segfaulted(failure) else None) or _explain(failure)
        return _on_the_second_run(case, hint or "") or None

    return explain


def _hang_hint(log_directory: str):
    """The hang hint of the 1F1B check, from the calls each rank logged (see ddp_lab.checks.p2p_log), preceded on
    the second case by what that shows (`_on_the_second_run`)."""

    def hint(calls: set, places: dict) -> str:
        case, logs = _logs_of_the_case_of(log_directory, places)
        return _on_the_second_run(case, _hang_evidence(calls, places, case, logs))

    return hint


def _hang_evidence(calls: set, places: dict, case: Case, logs) -> str:
    """The hang hint of one case: a wrong peer, a blocking send, what happened to the sends, the order."""
    wrong = _wrong_peers(logs, case)
    if wrong:
        return wrong
    if "send" in calls:
        return ("a rank is stuck in a blocking dist.send. In 1F1B two neighbour stages can send at the "
                "same time (stage s sends the next activation forward while stage s + 1 sends a gradient "
                "back), and a blocking send waits for the peer's recv: both wait forever. Start every send "
                "with dist.isend, keep the handles, and call .wait() on each before the function returns.")
    by_rank = {rank: transfers for rank, (transfers, _) in logs.items()} if logs is not None else {}
    pending = receives_never_waited(by_rank, "handles")
    if pending:
        return (f"What the ranks did: {pending}.\nHint: dist.irecv returns at once; its buffer holds the message "
                "only once the handle's .wait() has returned, so a stage may compute with a buffer not yet filled. "
                "Call .wait() on each irecv's handle before using its buffer.")
    waiting = waits(logs, places) if logs is not None else []
    evidence = _send_evidence(logs, places) if logs is not None else None
    if evidence:
        return (f"What the ranks did: {'; '.join(waiting)}.\nHint: " if waiting else "") + evidence
    if waiting:
        return (f"What the ranks did: {'; '.join(waiting)}. Every send and recv named a neighbour stage, so "
                "a send is missing or the calls come in an order the neighbours do not match.\nHint: every "
                "receive needs its send, in the order the neighbour sends: forward sends the output to rank + 1, "
                "backward sends x.grad to rank - 1. In 1F1B stage r runs world_size - r - 1 warm-up forwards, "
                "then alternates one forward and the backward of the oldest micro-batch, then the remaining "
                f"backwards; every stage runs all {case.microbatches} forwards and backwards.")
    return ("every stuck rank waits for a message nobody sends. Check the peers: "
            f"{PEERS}; and that every stage runs all {case.microbatches} forwards and backwards.")


def _send_evidence(logs, places: dict) -> str | None:
    """A hang hint where the logged calls show what happened to the sends (see ddp_lab.checks.p2p_log)."""
    for wait in stuck_receives(logs, places):
        sends = [call for call in logs[wait.peer][0] if call.op in SENDS and call.peer == wait.rank]
        if not wait.returned and wait.sent >= wait.wanted and sends[wait.wanted - 1].op == "isend" \
                and not sends[wait.wanted - 1].waited and not any(call.waited for call in sends if call.op == "isend"):
            return (f"rank {wait.peer} started message {wait.wanted} to rank {wait.rank} with dist.isend, and rank "
                    f"{wait.rank} still waits for it: rank {wait.peer} never waited for that handle (nor any other "
                    "of its isends to it), and a handle dropped or overwritten before its send completed leaves "
                    "the message undelivered here. Keep every handle isend returns (a list) and call .wait() on "
                    "each before the function returns.")
        if wait.returned and wait.sent >= wait.wanted:
            return (f"rank {wait.peer} started message {wait.wanted} to rank {wait.rank} (dist.isend) and returned "
                    "before it was delivered: a send started with isend is only sure to arrive once its handle's "
                    ".wait() has returned. Keep every handle isend returns and call .wait() on each before the "
                    "function returns.")
        if wait.returned and wait.sent == 0:
            what = ("in backward every stage but the first sends the gradient of the activation it received (x.grad) "
                    "to rank - 1" if wait.peer == wait.rank + 1 else
                    "in forward every stage but the last sends its output to rank + 1")
            return f"rank {wait.peer} returned without sending rank {wait.rank} anything: {what}."
    last = {rank: logs[rank][0][-1].op if logs.get(rank) and logs[rank][0] else None for rank in places}
    if places and all(call is None for call in places.values()) and all(op == "isend" for op in last.values()):
        return ("every stuck rank's last call was a dist.isend, and each waits outside torch.distributed: in the "
                "handle's .wait(), called right after the isend. Waiting at once makes the send blocking, and in "
                "1F1B two neighbour stages can send to each other at the same time (stage s sends the next "
                "activation forward while stage s + 1 sends a gradient back): both wait forever. Keep the "
                "handles and wait on them later, before the function returns.")
    return None


def _compare_grads(rank: int, got: list, want: list, last_alone: list, case: Case, shared_input: bool = False) -> None:
    """CheckFailed at the first gradient of this stage that differs from one process's (`want`); `last_alone`: the
    gradients of the last micro-batch alone (`_reference(case, last_only=True)`), evidence of zeroed gradients;
    `shared_input`: two micro-batches held at once were given one tensor (`_CountingStage`)."""
    names = ["weight", "bias"]
    m = case.microbatches
    for name, g, w in zip(names, got, want):
        where = f"rank {rank} (stage {rank}), gradient of the {name}"
        if g is None:
            raise CheckFailed(f"{where} is None: this stage never ran backward. Call out.backward(grad) for "
                              "every micro-batch (the last stage: loss.backward()).")
        index = first_mismatch(g, w, atol=1e-6, rtol=1e-5)
        if index is None:
            continue
        if torch.allclose(g, w * m, atol=1e-6, rtol=1e-5):
            hint = (f"it is {m} x the right gradient: the gradients of the micro-batches add up, so "
                    f"divide each micro-batch's loss by the number of micro-batches ({m}) "
                    "before backward, as one process takes the mean over the whole batch")
        elif torch.allclose(g, w / m, atol=1e-7, rtol=1e-5):
            hint = (f"it is the right gradient divided by {m}: divide the loss by the number of "
                    "micro-batches once, on the last stage only")
        elif shared_input:
            hint = ("two micro-batches this stage held at once were given the same input tensor: the receive for the "
                    "later one wrote into the buffer holding the earlier one's activation, which its backward still "
                    "needs (a layer saves its input to compute its weight's gradient). Receive each micro-batch's "
                    "activation into a new tensor (torch.empty(...) per receive)")
        elif all(a is not None and torch.allclose(a, b, atol=1e-7, rtol=1e-5) for a, b in zip(got, last_alone)):
            hint = ("it is the gradient of the last micro-batch alone: the earlier micro-batches' gradients were "
                    "dropped (zero_grad, or .grad set to None or replaced, between micro-batches). A stage's .grad "
                    "must add up over the micro-batches' backwards, as one process's backward over the whole batch "
                    "gives")
        else:
            hint = ("compare with one process on the whole batch: every micro-batch must run forward and "
                    "backward exactly once, each backward with the gradient of its own micro-batch's output")
        raise CheckFailed(f"{where}, element {list(index)}: got {g[index].item():.6g}, expected "
                          f"{w[index].item():.6g}.\nHint: {hint}.")


def check_one_f_one_b_stage(one_f_one_b_stage, timeout: float = 30.0) -> None:
    """Check `one_f_one_b_stage(stage, inputs, targets)` on a 3-stage pipeline over 3 gloo ranks, then on a
    2-stage pipeline over 2 of them (`CASES`, one launch).

    Every rank passes its stage (one Linear + Tanh block), the micro-batch inputs and targets (4 of
    them, then 3). The check compares every stage's gradients and the losses the last stage
    returns with one process on the whole batch, and counts how many micro-batches' activations
    each stage held at once: `world_size - rank` in 1F1B (more is GPipe or extra warm-up forwards,
    fewer is stages that wait instead of working at once). The first run is judged first; a
    failure on the second says that the first was right, so that a count written for it shows. A
    hang, or a rank that crashed inside a send or recv, is explained from the sends and receives
    each rank logged (`ddp_lab.checks.p2p_log`); an isend or irecv whose handle was never waited for
    is refused even where every message arrived. A loss divided by a number written in the code
    is refused before any rank starts.

    Introduced in notebooks/07-pipeline-parallelism.ipynb.
    """
    ensure_written(one_f_one_b_stage)
    name = getattr(one_f_one_b_stage, "__name__", "one_f_one_b_stage")
    refuse_written_divisor(one_f_one_b_stage, name, "a loss", "the number of micro-batches, len(inputs)",
                           divided=("loss",))
    with tempfile.TemporaryDirectory(prefix="ddp_lab-check07-") as logs:
        results = run_on_ranks(_cases_runner, ((one_f_one_b_stage,), logs), WORLD_SIZE, timeout, name,
                               _explainer(logs), timeout_hint=_hang_hint(logs), init_process_group=False)
    _judge_stage(name, {case.stages: [results[rank][case.stages][0] for rank in range(case.stages)]
                        for case in CASES})


def _cases_runner(rank: int, answers: tuple, log_directory: str) -> dict[int, list[dict]]:
    """On this rank, every case of CASES it belongs to, in order, each on a gloo group of the case's stages
    (`common.groups_of`): each answer in turn, logging its calls in a folder of its own (`_case_folder`); {stages:
    [record per answer]}."""
    results = {}
    for stages in groups_of(rank, [case.stages for case in CASES], "one_f_one_b"):
        case = next(case for case in CASES if case.stages == stages)
        records = []
        for index, answer in enumerate(answers):
            folder = _case_folder(log_directory, case, index)
            os.makedirs(folder, exist_ok=True)
            records.append(_stage_runner(rank, answer, folder, case))
        results[stages] = records
    return results


def run_stage_answers(answers: tuple, timeout: float = 60.0,
                      name: str = "one_f_one_b_stage") -> list[dict[int, list[dict]]]:
    """Each 1F1B answer once on every case (one launch); [answer] -> {stages: [rank] -> `_stage_runner`'s record}.
    For answers that return (one that raises or hangs ends the launch): the tests' wrong answers."""
    with tempfile.TemporaryDirectory(prefix="ddp_lab-check07-") as logs:
        results = run_on_ranks(_cases_runner, (tuple(answers), logs), WORLD_SIZE, timeout, name,
                               init_process_group=False)
    return [{case.stages: [results[rank][case.stages][index] for rank in range(case.stages)] for case in CASES}
            for index in range(len(answers))]


def _grads_right(results, ref_grads) -> bool:
    """Whether every stage's gradients equal one process's (`_reference`)."""
    return all(g is not None and torch.allclose(g, w, atol=1e-6, rtol=1e-5)
               for rank, result in enumerate(results) for g, w in zip(result["grads"], ref_grads[rank]))


def _judge_stage(name: str, results: dict[int, list[dict]]) -> None:
    """The ✓ line, or CheckFailed for the first case that is wrong ({stages: [rank] -> `_stage_runner`'s record});
    a failure on a later case than the first says that the first was right (`_second_run_note`)."""
    judge_in_order([(case, results[case.stages]) for case in CASES], _judge_case, _second_run_note)
    passed(f"{name}: losses and gradients equal one process on the whole batch, and stage r held "
           f"world_size - r micro-batches at once, on {' and on '.join(map(str, CASES))}")


def _judge_case(case: Case, results: list[dict]) -> None:
    """CheckFailed at the first thing one case's records ([rank] -> `_stage_runner`'s) get wrong."""
    ref_loss, ref_grads = _reference(case)
    stages, m = case.stages, case.microbatches
    last = stages - 1
    for rank in range(stages):
        if results[rank]["forwards"] != m:
            raise CheckFailed(f"rank {rank}: the stage ran forward {results[rank]['forwards']} times, expected "
                              f"once per micro-batch ({m}).")
    if results[last].get("returned"):
        raise CheckFailed(f"rank {last} (the last stage) returned {results[last]['returned']}; expected a list of "
                          f"the micro-batches' losses, one number per micro-batch ({m}), which the check adds up "
                          "itself; the other stages return [].")
    losses = results[last]["losses"]
    if len(losses) != m:
        raise CheckFailed(f"rank {last} (the last stage) returned {len(losses)} losses, expected one per "
                          f"micro-batch ({m}); the other stages return [].")
    total = sum(losses)
    if not math.isclose(total, ref_loss, rel_tol=1e-5):
        if math.isclose(total, ref_loss * m, rel_tol=1e-5) and _grads_right(results, ref_grads):
            hint = (f"the losses add up to {m} x the whole batch's mean, but the gradients are right: "
                    "backward ran on each micro-batch's loss divided by the number of micro-batches, and the list "
                    "holds the undivided ones. Return the divided loss, the one backward ran on")
        elif math.isclose(total, ref_loss * m, rel_tol=1e-5):
            hint = (f"the losses add up to {m} x the whole batch's mean: divide each micro-batch's "
                    f"loss by the number of micro-batches ({m})")
        elif math.isclose(total, ref_loss * m / stages, rel_tol=1e-5):
            hint = (f"the losses add up to {m}/{stages} of the whole batch's mean: each micro-batch's loss was "
                    f"divided by the number of stages (world_size, {stages}) where the number of micro-batches, "
                    f"len(inputs) ({m}), belongs")
        elif math.isclose(total, ref_loss * MICRO * WIDTH, rel_tol=1e-5):
            hint = (f"the losses add up to {MICRO * WIDTH} x the whole batch's mean, the number of elements of a "
                    f"micro-batch's output ({MICRO} x {WIDTH}): each loss is a sum of squared errors "
                    "(reduction='sum'), where one process takes their mean, F.mse_loss's default")
        elif any(result.get("wrong_peers") for result in results):
            wrong = [call for result in results for call in result.get("wrong_peers", [])]
            hint = f"a send or recv names a rank that is not a neighbour stage ({'; '.join(wrong)}). {PEERS}"
        else:
            hint = ("the losses are not one process's on the whole batch: what a stage received, its output, or "
                    "the loss computed from it differs (each micro-batch's loss is F.mse_loss(stage output, "
                    "targets[i]) / number of micro-batches)")
        raise CheckFailed(f"rank {last}: the micro-batch losses add up to {total:.6g}, expected the whole "
                          f"batch's mean loss {ref_loss:.6g}.\nHint: {hint}.")
    wrong = [call for result in results for call in result.get("wrong_peers", [])]
    if wrong:   # right by chance: which message such a call takes depends on which rank sends first
        raise CheckFailed(f"the losses came out right on {case}, but a send or recv names a rank that is not a "
                          f"neighbour stage ({'; '.join(wrong)}): what it receives depends on which rank sends "
                          f"first, so another run can take a gradient for an activation, or hang.\nHint: {PEERS}.")
    _, last_alone = _reference(case, last_only=True)
    # gradients flow back from the last stage: the first wrong one from the end is where it starts
    for rank in reversed(range(stages)):
        _compare_grads(rank, results[rank]["grads"], ref_grads[rank], last_alone[rank], case,
                       results[rank].get("shared_input", False))
    _refuse_requests_never_waited(case, results)
    peaks = [results[rank]["peak"] for rank in range(stages)]
    limits = [min(stages - rank, m) for rank in range(stages)]
    if peaks != limits:
        held = ", ".join(f"stage {rank} held {peak}" for rank, peak in enumerate(peaks))
        want = ", ".join(f"{limit}" for limit in limits)
        if all(peak == min(limit + 1, m) for peak, limit in zip(peaks, limits)):
            hint = ("every stage held one micro-batch more than 1F1B does: one warm-up forward too many. Stage r "
                    "runs world_size - r - 1 warm-up forwards before its first backward")
        elif peaks[0] == m and peaks[0] > limits[0]:
            hint = ("stage 0 held every micro-batch at once, as GPipe does (all forwards, then all backwards). 1F1B "
                    "starts a backward as soon as it can: world_size - r - 1 warm-up forwards on stage r, then one "
                    "forward and one backward in turn, then the remaining backwards")
        elif all(peak <= limit for peak, limit in zip(peaks, limits)):
            hint = ("the stages held fewer micro-batches than 1F1B, so they waited for each other instead of "
                    "working at once (with no warm-up, each micro-batch goes through the whole pipeline and back "
                    "before the next starts). Stage r runs world_size - r - 1 warm-up forwards before its first "
                    "backward")
        else:
            hint = ("stage r runs world_size - r - 1 warm-up forwards, then alternates one forward and the backward "
                    "of its oldest micro-batch, then the remaining backwards")
        raise CheckFailed(f"the stages held the activations of this many micro-batches at once: {held}; 1F1B on "
                          f"{case} holds {want} (stage r: world_size - r).\nHint: {hint}.")


def _refuse_requests_never_waited(case: Case, results: list[dict]) -> None:
    """CheckFailed where a stage's isend or irecv was never waited for (`_never_waited`), though the losses and
    gradients came out right: whether such a send is delivered, or such a buffer filled in time, depends on timing."""
    unwaited = [call for result in results for call in result.get("never_waited", [])]
    sends = [call for call in unwaited if "dist.isend" in call]
    named = sends or unwaited
    if not named:
        return
    if sends:
        why = ("a send whose handle is never waited for is sure to arrive only if the peer's receive was posted "
               "before the handle was dropped, so another run can lose the message and hang")
        hint = "keep every handle dist.isend returns (a list) and call .wait() on each before the function returns"
    else:
        why = ("an irecv's buffer holds the message only once its handle's .wait() has returned, so another run "
               "can compute with a buffer not yet filled")
        hint = "call .wait() on each dist.irecv's handle before using its buffer"
    listed = "; ".join(named[:3]) + ("; ..." if len(named) > 3 else "")
    handles = f"{len(named)} dist.{'isend' if sends else 'irecv'} handle{'s were' if len(named) > 1 else ' was'}"
    raise CheckFailed(f"the losses and gradients came out right on {case}, but {handles} never waited for "
                      f"({listed}): {why}.\nHint: {hint}.")


# --- idle_fraction ---------------------------------------------------------------------------

def _cases() -> dict[str, list[Span]]:
    # two ranks, gaps and different end times, as a real run gives; rank 1's clock runs ahead, so it ends last,
    # and rank 1's spans come first: neither the list's first and last spans nor one rank's give the window
    measured = [
        Span(1, "forward", 11.9, 12.7, "0"), Span(1, "backward", 12.8, 14.3, "0"),
        Span(0, "forward", 10.0, 11.0, "0"), Span(0, "backward", 13.2, 14.0, "0"),
    ]
    # three ranks: rank 2 starts first and ends early, rank 0's last span starts last, rank 1's ends last, and the
    # span that ends first (rank 0's forward) starts after rank 2's. Every wrong window differs here: one rank's, the
    # list's first to last span, the first start to the end of the span that starts last (on the two-rank case that
    # one is rank 0's window), and the start of the span that ends first to the last end
    three = [
        Span(0, "forward", 30.4, 31.4, "0"), Span(0, "backward", 33.0, 34.0, "0"),
        Span(1, "forward", 30.8, 31.8, "0"), Span(1, "backward", 32.2, 34.6, "0"),
        Span(2, "forward", 30.0, 31.5, "0"), Span(2, "backward", 31.6, 32.2, "0"),
    ]
    return {
        "GPipe on 2 stages with 4 micro-batches (ideal times)":
            ideal_timeline([gpipe_actions(s, 2, 4) for s in range(2)]),
        "1F1B on 4 stages with 8 micro-batches (ideal times)":
            ideal_timeline([one_f_one_b_actions(s, 4, 8) for s in range(4)]),
        "two ranks with measured-looking times": measured,
        "three ranks with measured-looking times": three,
    }


def _wrong_answers(spans: list[Span]) -> dict[object, tuple[float, str]]:
    """{mistake: (the value it gives on these spans, its hint)}; the keys are the same mistake on every case."""
    ranks = sorted({s.rank for s in spans})
    busy = sum(s.end - s.start for s in spans)
    makespan = max(s.end for s in spans) - min(s.start for s in spans)
    own = sum(max(s.end for s in spans if s.rank == r) - min(s.start for s in spans if s.rank == r)
              for r in ranks)
    right = 1.0 - busy / (len(ranks) * makespan)
    per_rank_mean = sum(1.0 - sum(s.end - s.start for s in spans if s.rank == r)
                        / (max(s.end for s in spans if s.rank == r) - min(s.start for s in spans if s.rank == r))
                        for r in ranks) / len(ranks)
    starts_last = max(spans, key=lambda s: s.start)
    ends_first = min(spans, key=lambda s: s.end)
    earliest_start, latest_end = min(s.start for s in spans), max(s.end for s in spans)
    p, m = len(ranks), sum(1 for s in spans if s.rank == ranks[0] and s.row == "forward")   # stages, micro-batches
    return {
        "closed form": ((p - 1) / (m + p - 1),
                        "that is (p - 1) / (m + p - 1), the bubble of an ideal pipeline (every step the same length, "
                        "no gaps); measured spans have neither, so measure from them: idle = 1 - busy / (ranks x "
                        "makespan), the window from the earliest start to the latest end"),
        "bubble over m": ((p - 1) / m,
                          "that is (p - 1) / m, the bubble's time against the micro-batches' time alone; as a share of "
                          "the whole window it is (p - 1) / (m + p - 1), and from measured spans idle = 1 - busy / "
                          "(ranks x makespan)"),
        "window from 0": (1.0 - busy / (len(ranks) * latest_end),
                          f"the window was taken to start at 0, the latest end ({latest_end:g}) alone: the ideal "
                          f"timelines start at 0, measured clocks do not (here at {earliest_start:g}). The window runs "
                          "from the earliest start to the latest end"),
        "union": (1.0 - _union(spans) / makespan,
                  "this is the share of the window in which no rank was working; the idle fraction counts every "
                  "rank's idle time, the busy time of all ranks against ranks x makespan (a rank waiting while "
                  "another works is idle too)"),
        **({"largest rank": (1.0 - busy / (max(ranks) * makespan),
                             f"the number of ranks was taken as the largest rank number ({max(ranks)}), but ranks "
                             f"count from 0: there are {len(ranks)} (the distinct s.rank)")} if max(ranks) > 0 else {}),
        "busy": (1.0 - right, "this is the busy fraction: the idle fraction is 1 - busy / (ranks x makespan)"),
        "percentage": (100 * right, "this is a percentage: return a fraction between 0 and 1"),
        "own windows": (1.0 - busy / own,
                        "each rank was measured over its own first-start-to-last-end window: use one window for all "
                        "ranks, from the earliest start on any rank to the latest end on any rank (a rank waiting "
                        "before its first forward or after its last backward is idle too)"),
        "mean of own windows": (per_rank_mean,
                                "each rank was measured over its own first-start-to-last-end window: use one window "
                                "for all ranks, from the earliest start on any rank to the latest end on any rank"),
        "gaps only": ((own - busy) / (len(ranks) * makespan),
                      "only the gaps between a rank's own spans were counted: a rank waiting before its first "
                      "forward or after its last backward is idle too. Over one window for all ranks, idle = 1 - "
                      "busy / (ranks x makespan)"),
        "no ranks": (1.0 - busy / makespan, "the busy time of all ranks together must be compared with ranks x "
                                            "makespan (every rank could have worked the whole makespan)"),
        "spans for ranks": (1.0 - busy / (len(spans) * makespan),
                            f"the busy time was compared with {len(spans)} x makespan, the number of spans: count the "
                            f"ranks instead ({len(ranks)} here, the distinct s.rank), each of which could have worked "
                            "the whole makespan"),
        "list order": (1.0 - busy / (len(ranks) * (spans[-1].end - spans[0].start)),
                       "the window ran from the first span in the list to the last one, but the spans are not in "
                       "time order: take the earliest start and the latest end over all spans (min and max)"),
        "end of the last start": (1.0 - busy / (len(ranks) * (starts_last.end - earliest_start)),
                                  f"the window ends where the span that starts last ends ({starts_last.end:g}), but "
                                  f"a span that started earlier ends later ({latest_end:g}): take the latest end over "
                                  "all spans (the max of s.end), not the end of the last-starting span"),
        "start of the first end": (1.0 - busy / (len(ranks) * (latest_end - ends_first.start)),
                                   f"the window starts where the span that ends first starts ({ends_first.start:g}), "
                                   f"but a span that ends later started earlier ({earliest_start:g}): take the "
                                   "earliest start over all spans (the min of s.start), not the start of the "
                                   "first-ending span"),
        **{("rounded", digits): (round(right, digits),
                                 f"that is the right value rounded to {digits} decimal{'s' * (digits > 1)}: return the "
                                 "unrounded float (round only where you print it)") for digits in range(1, 7)},
        **{("rank", r): (1.0 - busy / (len(ranks) * (max(s.end for s in spans if s.rank == r)
                                                     - min(s.start for s in spans if s.rank == r))),
                         f"the window is rank {r}'s alone (its first start to its last end); another rank may start "
                         "earlier or end later: take the earliest start and the latest end over the spans of every "
                         "rank") for r in ranks},
    }


def _union(spans: list[Span]) -> float:
    """The length of time in which at least one span runs."""
    total, reached = 0.0, float("-inf")
    for span in sorted(spans, key=lambda s: s.start):
        if span.end > reached:
            total += span.end - max(span.start, reached)
            reached = span.end
    return total


def _hint(answers: list[tuple[float, list[Span]]]) -> str:
    """The hint of the one mistake that gives the answer's value on every case it ran ((value, spans) each)."""
    mistakes = [_wrong_answers(spans) for _, spans in answers]
    wrong = next(k for k, (got, spans) in enumerate(answers)
                 if not math.isclose(got, schedules.idle_fraction(spans), rel_tol=1e-9, abs_tol=1e-9))
    for key, (_, text) in mistakes[wrong].items():
        if all(key in those and math.isclose(got, those[key][0], rel_tol=1e-9)
               for (got, _), those in zip(answers, mistakes)):
            return text
    if all(math.isclose(got, schedules.idle_fraction(spans), rel_tol=1e-6, abs_tol=1e-7) for got, spans in answers):
        return ("that is the right value to about 7 significant digits, on every case: something rounded it on the "
                "way, e.g. float32 (a torch tensor's default dtype, .item() of one), which keeps about 7. Compute "
                "with Python floats")
    return "idle = 1 - (sum of every span's length) / (number of ranks x (latest end - earliest start))"


def check_idle_fraction(idle_fraction) -> None:
    """Check `idle_fraction(spans) -> float` on ideal schedules and on measured-looking timestamps.

    A wrong value gets the hint of a mistake only when that mistake gives the answer's value on every case; a
    string (a formatted number) is refused as such.

    Introduced in notebooks/07-pipeline-parallelism.ipynb.
    """
    reference = schedules.idle_fraction   # the parameter is the learner's idle_fraction

    ensure_written(idle_fraction)
    name = getattr(idle_fraction, "__name__", "idle_fraction")
    answers: list[tuple[float, list[Span]]] = []   # (the answer's value, the spans) per case run
    first_wrong = None                              # (case, got, want) of the first case the answer got wrong
    for case, spans in _cases().items():
        got = None
        try:
            with watching_calls((reference,)) as called:
                got = idle_fraction(list(spans))
        except Exception as error:
            if first_wrong:   # a wrong value came first: that is the feedback, from the cases before this one
                break
            raise answer_raised(name, error, f"computing {case}") from None
        if called:
            raise package_answer_used(name, called)
        if isinstance(got, str):
            if first_wrong:
                break
            raise CheckFailed(f"{case}: {name} returned str {got!r}; expected a float (format it only where you "
                              "print it).")
        try:
            got = float(got)
        except (TypeError, ValueError):
            if first_wrong:
                break
            raise CheckFailed(f"{case}: {name} returned {type(got).__name__} {got!r}, expected a float.") from None
        answers.append((got, spans))
        want = reference(spans)
        if first_wrong is None and not math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9):
            first_wrong = (case, got, want)
    if first_wrong:
        case, got, want = first_wrong
        shown, expected = two_numbers(got, want)
        raise CheckFailed(f"{case}: got {shown}, expected {expected}.\nHint: {_hint(answers)}.")
    passed(f"{name}: the idle fraction of ideal GPipe and 1F1B schedules and of measured-looking timestamps")

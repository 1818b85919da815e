"""Checks for the exercises of notebooks/17-compile-and-low-precision.ipynb: loss scaling and FP8 scaling.

    ddp_lab.checks.lesson17.check_unscale_clip_and_step(unscale_clip_and_step)
    ddp_lab.checks.lesson17.check_to_fp8(to_fp8)

The scaled step runs on 2 gloo ranks, each holding its shard of a model's gradient (as under
FSDP or ZeRO): once with a gradient under the clipping threshold, once above it, where rank 0's
shard alone is under it and rank 1's alone is over (the two at different loss scales, and
max_norm is not 1, so a scale or a bound written in the code, or a cap at max_norm, shows), once under it with
its square over it (so a squared norm compared with max_norm shows),
once with a NaN in every rank's weight, once in every rank's bias, once with an inf in rank 1's weight
only (so an overflow test that skips a parameter, or that finds inf but not NaN, shows as such: the
inf and one NaN share a parameter; an overflow agreed so that rank 1's alone is outvoted skips the NaNs, found
on every rank, and steps on the inf). The optimizer is SGD with weight decay, so a step taken by hand instead of
optimizer.step() shows. Each wrong result is
compared with what each likely mistake gives, and a wrong step is shown at the first element that differs. The
FP8 cast is a plain function, checked in
this process on a tensor whose outlier row holds a negative largest value (and which it must leave as it was),
with rows != columns, so a scale over the wrong dimension, or a max without abs, shows; values wrong under a right
scale are shown at the first element that differs (named where they are what dividing by the scale, clamping to the
other format's range, or casting before scaling gives); an error it raises
is shown with a hint where the error itself names the mistake (torch.max's pair used as a number, arithmetic on an
FP8 tensor). An answer
that calls the package's own answer is refused.

Introduced in notebooks/17-compile-and-low-precision.ipynb.
"""

from __future__ import annotations

import ast
import math
import re

import torch
import torch.nn as nn

from ddp_lab.checks import CheckFailed, passed
from ddp_lab.checks.common import (answer_raised, call_case, describe, division_into_a_new_tensor, ensure_written,
                                   first_mismatch, how_it_changed, package_answer_used, refuse_written_bound,
                                   refuse_written_divisor, run_on_ranks, source_tree, two_numbers, watching_calls)
from ddp_lab.course.low_precision import fp8, loss_scaling

WORLD = 2
MAX_NORM, LR = 1.5, 1.0            # max_norm is neither 1 (the clipping coefficient's cap) nor 2 (the scales' ratio)
# The optimizer is SGD with weight decay, so a step taken by hand (p -= lr * p.grad) instead of optimizer.step()
# shows: it moves each parameter by WEIGHT_DECAY * lr * p less than the optimizer's own rule does
WEIGHT_DECAY = 0.05
SHARD_ROWS, COLS = 3, 4            # each rank: a (3, 4) weight shard and a (3,) bias shard
# Norms of each rank's shard of the *true* gradient, per case: in "clipped", rank 0's alone is under MAX_NORM; in
# NEAR, the global norm (1.36) is under MAX_NORM and its square (1.85) over it, so that a squared norm compared with
# max_norm, right in the other two cases, clips (scales up) a gradient that needs no clipping
NEAR = "its square over max_norm"
SHARD_NORMS = {"under max_norm": (0.2, 0.45), "clipped": (0.5, 2.4), NEAR: (0.8, 1.1)}
# The loss scale of each case. Dividing by one of the first two cases' scales where the other's is meant shows:
# twice the gradient under max_norm is still under it (no clipping hides it), and half the one over it is under it
CASE_SCALES = {"under max_norm": 2.0 ** 11, "clipped": 2.0 ** 10, NEAR: 2.0 ** 11, "NaN in every weight": 2.0 ** 16,
               "NaN in every bias": 2.0 ** 16, "overflow on rank 1": 2.0 ** 16}
WRITTEN_SCALES = (2.0 ** 10, 2.0 ** 11, 2.0 ** 16)   # a scale written in the code: a case's, or GradScaler's start
SCALER_ANSWERS = (loss_scaling.AgreedLossScaler.unscale_clip_and_step, loss_scaling.found_inf_on_any_rank,
                  loss_scaling.global_grad_norm, loss_scaling.clip_sharded_)
FP8_ANSWERS = (fp8.to_fp8, fp8.amax, fp8.scale_for)


# --- unscale_clip_and_step -------------------------------------------------------------------

def _true_grads(case: str, rank: int) -> list[torch.Tensor]:
    """This rank's shard of the true (unscaled) gradient: weight (3, 4) and bias (3,), with the case's norm."""
    generator = torch.Generator().manual_seed(170 + rank)
    grads = [torch.randn(SHARD_ROWS, COLS, generator=generator), torch.randn(SHARD_ROWS, generator=generator)]
    if case not in SHARD_NORMS:
        return grads
    norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    return [g * (SHARD_NORMS[case][rank] / norm) for g in grads]


def _start_params(rank: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(180 + rank)
    return [torch.randn(SHARD_ROWS, COLS, generator=generator), torch.randn(SHARD_ROWS, generator=generator)]


# The overflow last: an answer whose ranks take different paths there leaves one rank waiting in a collective,
# and the others have nothing after it that could pair with it (see _scaler_hang_hint). A NaN is in the same
# parameter of every shard (a NaN loss), so even ranks that decide alone take the same path there. The inf and the
# first NaN are in the weight, the second NaN in the bias: a test that finds inf but not NaN misses the NaN where it
# found the inf; a test that skips the bias (only params[0], only p.dim() > 1) finds the NaN in the weight only.
CASES = ("under max_norm", "clipped", NEAR, "NaN in every weight", "NaN in every bias", "overflow on rank 1")
SKIPPED = {"NaN in every weight": "with a NaN in every rank's weight gradient",
           "NaN in every bias": "with a NaN in every rank's bias gradient",
           "overflow on rank 1": "with an inf in rank 1's weight gradient only"}


def _scaler_runner(rank: int, answer) -> dict:
    results, called = {}, []
    for case in CASES:
        scale = CASE_SCALES[case]
        params = [nn.Parameter(p.clone()) for p in _start_params(rank)]
        for param, grad in zip(params, _true_grads(case, rank)):
            param.grad = grad * scale                          # the scaled gradient backward would leave
        if case == "overflow on rank 1" and rank == 1:
            params[0].grad[1, 2] = float("inf")
        if case == "NaN in every weight":
            params[0].grad[2, 1] = float("nan")
        if case == "NaN in every bias":
            params[1].grad[0] = float("nan")
        optimizer = torch.optim.SGD(params, lr=LR, weight_decay=WEIGHT_DECAY)
        stepped = None
        with watching_calls(SCALER_ANSWERS) as called_here:
            stepped = call_case(answer, f"the case '{case}' (scale {scale:g}, max_norm {MAX_NORM:g})", params,
                                optimizer, scale, MAX_NORM)
        called.extend(called_here)
        results[case] = {"stepped": stepped, "params": [p.detach().clone() for p in params]}
    return {"cases": results, "called": called}


def scaler_runs(rank: int, answers: list) -> list[dict]:
    """Several answers' runs in one launch (the tests' negative controls): one `_scaler_runner` result each."""
    return [_scaler_runner(rank, answer) for answer in answers]


def check_unscale_clip_and_step(unscale_clip_and_step, timeout: float = 30.0) -> None:
    """Check `unscale_clip_and_step(params, optimizer, scale, max_norm) -> bool` on 2 gloo ranks.

    Each rank's `params` are its shard of the model (a (3, 4) weight and a (3,) bias) whose `.grad` holds
    `scale` times the true gradient; `optimizer` is SGD with lr 1 and weight decay 0.05. Cases: a gradient
    whose global norm is under max_norm (a plain step); one over it (every shard scaled by max_norm / global
    norm), at another scale; one under max_norm whose square is over it (a plain step); a NaN in every shard's
    weight, then in every shard's bias, and an inf in rank 1's weight only (no rank may step). max_norm is 1.5.

    Introduced in notebooks/17-compile-and-low-precision.ipynb.
    """
    ensure_written(unscale_clip_and_step)
    name = getattr(unscale_clip_and_step, "__name__", "unscale_clip_and_step")
    refuse_written_divisor(unscale_clip_and_step, name, "a gradient",
                           "scale, the argument (a loss scaler changes it as it runs)")
    refuse_written_bound(unscale_clip_and_step, name, "max_norm, the argument")
    results = run_on_ranks(_scaler_runner, (unscale_clip_and_step,), WORLD, timeout, name,
                           timeout_hint=_scaler_hang_hint)
    judge_scaler(name, results, division_into_a_new_tensor(unscale_clip_and_step),
                 overflow_test_evidence(unscale_clip_and_step))
    passed(f"{name}: an overflow on one rank skips the step on both; unscaled gradients clipped by the norm over "
           "both ranks' shards")


def _scaler_hang_hint(calls: set, places: dict) -> str | None:
    """A rank still in a collective while another rank returned: the ranks took different paths.

    `places`: {stuck rank: the collective it waits in, or None} (checks.common.run_on_ranks).
    """
    stuck, calls = places, calls - {None}
    if not stuck or len(stuck) == WORLD or not calls:
        return None
    waiting, done = sorted(stuck), sorted(set(range(WORLD)) - set(stuck))
    return (f"rank(s) {done} returned while rank(s) {waiting} still wait in dist.{sorted(calls)[0]} inside your "
            "function: the ranks did not make the same collective calls. The last case puts an inf in rank 1's shard "
            "only; if rank 1 decides alone to skip, it never joins the collective rank 0 calls next (the norm's "
            "all-reduce). Agree on the overflow first (all_reduce of a found-inf flag with ReduceOp.MAX), so every "
            "rank takes the same path.")


def _stepped_by(case: str, rank: int, coefficient: float, weight_decay: float = WEIGHT_DECAY) -> list[torch.Tensor]:
    """This rank's parameters after SGD's step with `coefficient` times the true gradient (torch's SGD adds
    weight_decay * p to the gradient it steps with)."""
    return [p - LR * (coefficient * g + weight_decay * p) for p, g in zip(_start_params(rank), _true_grads(case, rank))]


def _norm(case: str, how: str = "global") -> list[float]:
    """Per rank, the norm a clipping rule used: the global one, each shard's own, the shards' norms added, or the
    global norm of the weights alone ("weights": the bias left out)."""
    local = list(SHARD_NORMS[case])
    if how == "local":
        return local
    if how == "added":
        return [sum(local)] * WORLD
    if how == "weights":
        return [sum(_true_grads(case, rank)[0].pow(2).sum().item() for rank in range(WORLD)) ** 0.5] * WORLD
    return [sum(n * n for n in local) ** 0.5] * WORLD


def _coefficient(norm: float, threshold: float = MAX_NORM) -> float:
    return min(1.0, threshold / (norm + 1e-6))


def _step_mistakes(case: str, division: str | None = None) -> list:
    """(per-rank gradient coefficients, hint[, weight decay]) a likely mistake gives in this case: the parameters it
    leaves are `_stepped_by` those (the weight decay the step applied, where it is not the optimizer's: 0 for a step
    taken by hand or none at all). `division`: a line of the answer that divides a gradient into a new tensor
    (`division_into_a_new_tensor`), evidence for why p.grad kept the scale."""
    global_norm = _norm(case)
    never_divided = ("the gradients were never divided by the scale: the optimizer stepped with scale times the true "
                     "gradient. Unscale (grad / scale) first." if division is None else
                     f"the optimizer stepped with scale times the true gradient: `{division}` divides into new "
                     "tensors, while optimizer.step() reads p.grad, which still holds the scaled gradient. Divide "
                     "p.grad itself (in place, div_), or assign the result back to p.grad.")
    scale = CASE_SCALES[case]
    return [
        ([scale] * WORLD, never_divided),
        ([_coefficient(n) if n * n <= MAX_NORM else MAX_NORM / n for n in global_norm],
         f"the gradient was scaled to norm max_norm ({MAX_NORM:g}) though its norm ({global_norm[0]:.3g}) is under "
         f"it; its square ({global_norm[0] ** 2:.3g}) is over it: the squared norm was compared with max_norm. Take "
         "the square root of the all-reduced sum of squares before comparing (or compare with max_norm ** 2)."),
        ([_coefficient(n * n) for n in global_norm],
         "the clipping used the squared norm (the all-reduced sum of squares) as the norm: take its square root "
         "first, norm = sqrt(sum of squares)."),
        *[([scale / written * _coefficient(n * scale / written) for n in global_norm],
           f"the gradients were divided by {written:g}, not by this case's scale ({scale:g}): a number written in "
           "the code is right only where it equals the scale. Divide by scale, the argument (a loss scaler changes "
           "it as it runs).") for written in WRITTEN_SCALES if written != scale],
        ([_coefficient(scale * n) for n in global_norm],
         "the gradients were clipped before they were unscaled: the norm compared with max_norm was scale times "
         "the true one, so the step came out far too small. Divide by the scale first, then clip."),
        ([MAX_NORM / n for n in global_norm],
         "the step has norm max_norm although the true gradient's norm is below it: either the clipping ran on "
         "gradients still multiplied by the scale (not divided by it, or multiplied again), or its coefficient was "
         "not capped at 1."),
        ([_coefficient(n) for n in _norm(case, "local")],
         "each rank clipped by the norm of its own shard: the model's gradient norm is over both shards, "
         "sqrt(sum over ranks of each shard's squared norm): all_reduce the squared norm before the square root."),
        ([_coefficient(n) for n in _norm(case, "added")],
         "the shards' norms were added: squared norms add over disjoint shards, norms do not (all_reduce the "
         "squares, then take the square root)."),
        ([_coefficient(n / WORLD ** 0.5) for n in global_norm],
         "the squared norms were averaged over the ranks: the shards are parts of one gradient, so their squares "
         "add (all_reduce with SUM, no division)."),
        ([_coefficient(n, 1.0) for n in global_norm],
         f"the gradient was clipped to norm 1, not to max_norm ({MAX_NORM:g}): a 1 written where max_norm belongs "
         "(max_norm / norm, not 1 / norm)."),
        ([min(MAX_NORM, MAX_NORM / (n + 1e-6)) for n in global_norm],
         f"the clipping coefficient was capped at max_norm ({MAX_NORM:g}), not at 1: min(1, max_norm / norm) "
         "scales a gradient down, never up."),
        ([_coefficient(n / scale) / scale for n in global_norm],
         "the gradients were divided by the scale twice: the step was the true gradient divided by the scale "
         "again. Divide p.grad by the scale once (in place), then use it as it is."),
        *[([n / MAX_NORM if always or n > MAX_NORM else 1.0 for n in global_norm],
           f"the clipping coefficient is upside down: norm / max_norm ({global_norm[0] / MAX_NORM:.3g} here) "
           "grows a gradient that is over max_norm (or shrinks one under it); clipping multiplies by "
           "max_norm / norm, which is under 1 exactly when the norm is over max_norm.") for always in (False, True)],
        ([_coefficient(n) for n in _norm(case, "weights")],
         "the norm left out the bias: the gradient norm that clipping compares with max_norm is over every "
         "parameter's gradient (here each shard's weight and bias), its squares summed over all of them."),
        ([_coefficient(n) for n in global_norm],
         f"the parameters moved by lr times the clipped gradient alone, but the optimizer is SGD with weight decay "
         f"({WEIGHT_DECAY:g}): the step was taken by hand. Call optimizer.step(), which applies the optimizer's own "
         "rule (its learning rate, weight decay, momentum) to the unscaled, clipped p.grad.", 0.0),
        ([0.0] * WORLD,
         "the parameters did not move although no rank overflowed: optimizer.step() was never called, or found no "
         "gradient to step with (optimizer.zero_grad() before the step sets every .grad to None). After unscaling "
         "and clipping, step the optimizer, then clear the gradients, and return True.", 0.0),
    ]


def _matches(got: list, want: list) -> bool:
    return all(torch.is_tensor(g) and g.shape == w.shape and torch.allclose(g, w, rtol=1e-4, atol=1e-6)
               for g, w in zip(got, want))


def overflow_test_evidence(fn) -> str | None:
    """What fn's source shows of why an overflow on one rank may go unheeded: "agreement" where its test sees inf
    (torch's isfinite or isinf, a function or a tensor's method) or it agrees with ReduceOp.MIN or a broadcast (one
    rank's overflow then outvoted), "isnan" where it tests with torch's isnan alone (a test that misses inf), else
    None (or no source to read). math's and numpy's isfinite (a guard on the scale, say) are no test of the
    gradients."""
    tree = source_tree(fn)
    if tree is None:
        return None
    called = {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    tests = {text.rsplit(".", 1)[-1] for text in called if not text.startswith(("math.", "np.", "numpy."))}
    reduce_ops = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    if tests & {"isfinite", "isinf", "broadcast"} or "MIN" in reduce_ops:
        return "agreement"
    return "isnan" if "isnan" in tests else None


def judge_scaler(name: str, results, division: str | None = None, overflow_test: str | None = None) -> None:
    """Compare every rank's stepped flag and parameters with the right step; CheckFailed naming the mistake.
    `division`: see `_step_mistakes`; `overflow_test`: `overflow_test_evidence`'s."""
    called = next((result["called"] for result in results if result.get("called")), None)
    if called:
        raise package_answer_used(name, called)
    _judge_overflow(name, results, overflow_test)
    _judge_nan(name, results)
    for case in (case for case in CASES if case not in SKIPPED):
        _judge_step(name, case, [result["cases"][case] for result in results], division)


def _judge_overflow(name: str, results, overflow_test: str | None = None) -> None:
    """CheckFailed unless every rank returned False and left its parameters as they were, with an inf on rank 1.
    `overflow_test`: see `judge_scaler`."""
    overflow = [result["cases"]["overflow on rank 1"] for result in results]
    stepped = [case["stepped"] for case in overflow]
    if not all(isinstance(flag, bool) for flag in stepped):
        raise CheckFailed(f"{name} returned {describe(stepped[0])} on rank 0; expected True (stepped) or False.")
    if stepped == [True, False]:
        raise CheckFailed(f"with an inf in rank 1's shard only, rank 0 stepped and rank 1 skipped: the ranks now "
                          "hold shards of different steps.\nHint: the skip was decided per rank from its own shard; "
                          "all-reduce the found-inf flag (ReduceOp.MAX) so every rank skips together.")
    unchanged = all(_matches(case["params"], _start_params(rank)) for rank, case in enumerate(overflow))
    if all(stepped) and unchanged:
        raise CheckFailed(f"with an inf in rank 1's shard, every rank skipped the step (its parameters are as they "
                          f"were) but {name} returned True, which says it stepped.\nHint: return True when the "
                          "optimizer stepped, False when the step was skipped.")
    on = [r for r, flag in enumerate(stepped) if flag]
    if on and _nan_flags(results) == (True, False):     # skipped for a NaN in the bias, never for the weight
        raise CheckFailed(f"{SKIPPED['overflow on rank 1']}, {name} returned True on ranks {on}, and "
                          f"{SKIPPED['NaN in every weight']} it stepped too, but "
                          f"{SKIPPED['NaN in every bias']} it skipped.\nHint: {_EVERY_PARAMETER % 'the weight'}")
    if on == list(range(WORLD)) and _nan_flags(results) == (False, False):
        raise CheckFailed(f"{SKIPPED['overflow on rank 1']}, {name} returned True on ranks {on}, though "
                          f"{SKIPPED['NaN in every weight']}, and {SKIPPED['NaN in every bias']}, every rank skipped."
                          f"\nHint: {_OUTVOTED[overflow_test]}")
    if on:
        raise CheckFailed(f"{SKIPPED['overflow on rank 1']}, {name} returned True on ranks {on}: a step with an "
                          "overflowed gradient must be skipped on every rank.")
    _judge_skipped(name, "overflow on rank 1", overflow)


_AGREE = ("all-reduce a found-inf flag with ReduceOp.MAX, or an all-finite flag with MIN, so that any rank's overflow "
          "skips the step everywhere; a flag broadcast from one rank carries only that rank's")
_NAN_ONLY = "your overflow test finds NaN but not inf (torch.isnan); torch.isfinite is False for both"
# Why an overflow on every rank (the NaNs) skipped and one on rank 1 alone did not, by what the answer's source shows
_OUTVOTED = {
    "agreement": f"rank 1's overflow was outvoted when the ranks agreed on it: {_AGREE}.",
    "isnan": f"{_NAN_ONLY}.",
    None: f"either rank 1's overflow was outvoted when the ranks agreed on it: {_AGREE}; or {_NAN_ONLY}.",
}
_EVERY_PARAMETER = ("the overflow test missed %s: it must look at every parameter's gradient (each p.grad in "
                    "params, the weight and the bias), since an inf or a NaN in any of them spoils the step; "
                    "torch.isfinite is False for both.")


def _nan_flags(results) -> tuple:
    """(stepped with the NaN in the weight, stepped with the NaN in the bias): True or False where every rank
    returned that bool, else None."""
    def agreed(case):
        flags = [result["cases"][case]["stepped"] for result in results]
        return flags[0] if all(isinstance(flag, bool) for flag in flags) and len(set(flags)) == 1 else None
    return agreed("NaN in every weight"), agreed("NaN in every bias")


def _judge_nan(name: str, results) -> None:
    """CheckFailed unless every rank skipped the step with a NaN in every shard's weight, and in every shard's bias
    (the inf in rank 1's weight already skipped): an answer that steps with a NaN in the weight, where it found the
    inf, finds inf but not NaN; one that steps with a NaN in the bias only skips a parameter."""
    in_weight, in_bias = _nan_flags(results)
    for case in ("NaN in every weight", "NaN in every bias"):
        got = [result["cases"][case] for result in results]
        stepped = [result["stepped"] for result in got]
        if not all(isinstance(flag, bool) for flag in stepped):
            raise CheckFailed(f"{name} returned {describe(stepped[0])} on rank 0 {SKIPPED[case]}; "
                              "expected True (stepped) or False.")
        on = [r for r, flag in enumerate(stepped) if flag]
        if not on:
            _judge_skipped(name, case, got)
            continue
        said = (f"{SKIPPED[case]}, {name} returned True on ranks {on}, though it skipped the step "
                f"{SKIPPED['overflow on rank 1']}")
        if in_weight is True and in_bias is True:
            raise CheckFailed(f"{said}, and stepped {SKIPPED['NaN in every bias']} too.\nHint: your overflow test "
                              "finds inf but not NaN, which an overflow gives too (inf - inf, a NaN loss): "
                              "torch.isfinite is False for both, torch.isinf only for inf.")
        if (in_weight, in_bias) == (False, True):
            raise CheckFailed(f"{said}, and {SKIPPED['NaN in every weight']}.\nHint: "
                              f"{_EVERY_PARAMETER % 'the bias'}")
        raise CheckFailed(f"{said}: a step with a NaN gradient must be skipped on every rank.")


def _judge_skipped(name: str, case: str, got: list) -> None:
    """CheckFailed if a rank that returned False (a skipped step) changed its parameters in `case`."""
    for rank, result in enumerate(got):
        if not _matches(result["params"], _start_params(rank)):
            raise CheckFailed(f"{SKIPPED[case]}, {name} returned False on rank {rank} but the parameters changed: a "
                              "skipped step leaves them as they were (no optimizer.step()).")


PARAM_NAMES = ("weight", "bias")


def _first_difference_of_params(got: list, want: list) -> str:
    """'bias[1] after the step is 0.25, expected 0.5': the first parameter (weight, then bias) and element that
    differ, each number with as many digits as it takes to read differently (`two_numbers`)."""
    for param, got_param, want_param in zip(PARAM_NAMES, got, want):
        if not torch.is_tensor(got_param) or got_param.shape != want_param.shape:
            return f"{param} after the step is {describe(got_param)}, expected shape {tuple(want_param.shape)}"
        index = first_mismatch(got_param.float(), want_param, atol=1e-6, rtol=1e-4)
        if index is not None:
            shown, expected = two_numbers(got_param[index].item(), want_param[index].item())
            return f"{param}[{', '.join(map(str, index))}] after the step is {shown}, expected {expected}"
    return "parameters after the step differ from the expected ones"


def _judge_step(name: str, case: str, got: list, division: str | None = None) -> None:
    flags = [result["stepped"] for result in got]
    if flags != [True] * WORLD:
        raise CheckFailed(f"no overflow ({case}): {name} returned {flags} on ranks 0 and 1; expected True on both.")
    want = [_stepped_by(case, rank, _coefficient(_norm(case)[rank])) for rank in range(WORLD)]
    if all(_matches(result["params"], want[rank]) for rank, result in enumerate(got)):
        return
    rank = next(r for r, result in enumerate(got) if not _matches(result["params"], want[r]))
    where = (f"no overflow, gradient norm {'over' if case == 'clipped' else 'under'} max_norm ({case}, scale "
             f"{CASE_SCALES[case]:g}, max_norm {MAX_NORM:g}): rank {rank}'s "
             f"{_first_difference_of_params(got[rank]['params'], want[rank])}")
    for coefficients, hint, *weight_decay in _step_mistakes(case, division):
        mistaken = [_stepped_by(case, r, coefficients[r], *weight_decay) for r in range(WORLD)]
        if all(_matches(result["params"], mistaken[r]) for r, result in enumerate(got)):
            raise CheckFailed(f"{where}.\nHint: {hint}")
    raise CheckFailed(f"{where} (SGD, lr {LR:g}, weight decay {WEIGHT_DECAY:g}: the parameters less lr times the "
                      "unscaled, clipped gradient plus weight decay times the parameters).")


# --- to_fp8 ----------------------------------------------------------------------------------

FP8_ROWS, FP8_COLS = 6, 10


def _fp8_input() -> torch.Tensor:
    """(6, 10) activations-like values; row 2 an outlier whose largest magnitude is negative."""
    x = torch.randn(FP8_ROWS, FP8_COLS, generator=torch.Generator().manual_seed(171))
    x[2] *= 40.0
    x[2, 3] = -200.0
    x[4] *= 0.01
    return x


FP8_CASES = (("activation", False), ("activation", True), ("weight", False), ("gradient", False), ("gradient", True))


def _case_name(role: str, rowwise: bool) -> str:
    return f"to_fp8(x, role={role!r}, rowwise={rowwise}) on a (6, 10) tensor with an outlier row"


_SIZES = re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)")


_FP8_OPERAND = re.compile(r"\bFloat8_e\d")                     # torch's name of an FP8 dtype in a kernel's error


def _fp8_error_hint(error: Exception) -> str | None:
    """The hint the error itself shows: a per-row amax without its dimension, torch.max's (values, indices) pair
    used as a number, or arithmetic on an FP8 tensor (torch has no CPU kernel for it)."""
    sizes = _SIZES.search(str(error))
    if sizes and {int(sizes.group(1)), int(sizes.group(2))} == {FP8_ROWS, FP8_COLS}:
        return ("a per-row amax of shape (rows,) met the (rows, cols) tensor: keep the reduced dimension "
                "(keepdim=True), so the scale has shape (rows, 1) and scales whole rows.")
    if isinstance(error, TypeError) and "torch.return_types.max" in str(error):
        return ("max over a dimension returns a pair, the values and their indices (torch.return_types.max), not a "
                "tensor: use amax (torch.amax, Tensor.amax), which returns the values alone, or take the pair's "
                ".values.")
    if isinstance(error, (NotImplementedError, RuntimeError)) and _FP8_OPERAND.search(str(error)):
        return ("an FP8 tensor took part in arithmetic, which torch has almost no kernels for on a CPU (nor should "
                "the scale be applied after the values were rounded to FP8): compute x * scale in float32 and cast "
                "the result to the FP8 format last.")
    return None


def check_to_fp8(to_fp8) -> None:
    """Check `to_fp8(x, role, rowwise) -> (x_fp8, scale)` in this process.

    role "weight" or "activation" -> float8_e4m3fn, "gradient" -> float8_e5m2; scale = the format's largest
    value / amax, amax = max |x| over the whole tensor (scale shape ()) or, rowwise, over each row (the last
    dimension, scale shape (rows, 1)); x_fp8 = x * scale in that format.

    Introduced in notebooks/17-compile-and-low-precision.ipynb.
    """
    ensure_written(to_fp8)
    name = getattr(to_fp8, "__name__", "to_fp8")
    x = _fp8_input()
    for role, rowwise in FP8_CASES:
        case = _case_name(role, rowwise)
        given = x.clone()
        try:
            with watching_calls(FP8_ANSWERS) as called:
                result = to_fp8(given, role, rowwise)
        except Exception as error:
            raise answer_raised(name, error, case, _fp8_error_hint(error)) from None
        if called:
            raise package_answer_used(name, called)
        _refuse_changed_input(name, case, x, given)
        if not (isinstance(result, (tuple, list)) and len(result) == 2 and all(map(torch.is_tensor, result))):
            raise CheckFailed(f"{case}: {name} returned {describe(result)}; expected a pair of tensors (x_fp8, scale)."
                              + _pair_hint(result))
        _judge_fp8(name, case, x, role, rowwise, *result)
    passed(f"{name}: e4m3 for weights and activations, e5m2 for gradients, scaled by amax per tensor and per row")


def _refuse_changed_input(name: str, case: str, x: torch.Tensor, given: torch.Tensor) -> None:
    """CheckFailed if to_fp8 changed the tensor it was given (an in-place x.mul_, x *= scale)."""
    changed = how_it_changed(given, x)
    if changed is not None:
        raise CheckFailed(f"{case}: {name} changed the tensor it was given ({changed}).\nHint: an in-place operation "
                          "on x (x.mul_(scale), x *= scale) scales the caller's own tensor, the weights or activations "
                          "it goes on using in higher precision: compute x * scale into a new tensor.")


def _pair_hint(result) -> str:
    """Evidence in a returned pair that is not two tensors: a scale as a Python number."""
    if isinstance(result, (tuple, list)) and len(result) == 2 and torch.is_tensor(result[0]) and \
            isinstance(result[1], (int, float)):
        return (f"\nHint: the scale is a Python {type(result[1]).__name__} ({result[1]:.6g}): keep it a tensor "
                "(no .item()), shape () for the whole tensor or (rows, 1) per row, so it can scale x and travel with "
                "x_fp8.")
    return ""


def _is_fp8(dtype: torch.dtype) -> bool:
    return str(dtype).startswith("torch.float8_")


def _judge_fp8(name: str, case: str, x: torch.Tensor, role: str, rowwise: bool, x_fp8, scale) -> None:
    dtype = fp8.FORMAT_FOR_ROLE[role]
    if x_fp8.dtype != dtype:
        other = fp8.E5M2 if dtype == fp8.E4M3 else fp8.E4M3
        if _is_fp8(scale.dtype) and not _is_fp8(x_fp8.dtype):
            hint = ("the pair is the wrong way round: the second value is the FP8 tensor. Return (x_fp8, scale), "
                    "the values first.")
        elif x_fp8.dtype == other and role == "gradient":
            hint = ("gradients take e5m2 (float8_e5m2): they span more orders of magnitude than weights and "
                    "activations, and e5m2 has the range (max 57344); e4m3's precision is for the forward.")
        elif x_fp8.dtype == other:
            hint = ("weights and activations take e4m3 (float8_e4m3fn): more precision (3 mantissa bits) for "
                    "bounded values; e5m2's range is for gradients.")
        elif _is_fp8(x_fp8.dtype):
            largest, want_largest = torch.finfo(x_fp8.dtype).max, torch.finfo(dtype).max
            other_max = (f", with a largest value of {largest:g} against {want_largest:g},"
                         if largest != want_largest else "")
            hint = (f"{x_fp8.dtype} is another FP8 format{other_max} encoding NaN and zero another way. The {role} "
                    f"role takes {dtype} here (weights and activations {fp8.E4M3}, gradients {fp8.E5M2}).")
        else:
            hint = (f"return the scaled values cast to the FP8 format with .to({dtype}); a {x_fp8.dtype} tensor "
                    "is not stored in FP8.")
        raise CheckFailed(f"{case}: x_fp8 has dtype {x_fp8.dtype}, expected {dtype}.\nHint: {hint}")
    if x_fp8.shape != x.shape:
        raise CheckFailed(f"{case}: x_fp8 has shape {tuple(x_fp8.shape)}, expected {tuple(x.shape)}, the shape of x."
                          f"\nHint: x_fp8 holds each value of x times its scale, in x's place: no reshape, transpose "
                          f"or added dimension.")
    want_amax = x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax()
    want_scale = fp8.fp8_max(dtype) / want_amax
    if scale.shape != want_scale.shape:
        raise CheckFailed(f"{case}: the scale has shape {tuple(scale.shape)}, expected {tuple(want_scale.shape)}."
                          f"\nHint: {_shape_hint(tuple(scale.shape), rowwise)}")
    if not torch.allclose(scale.float(), want_scale, rtol=1e-5):
        got_text, want_text = _first_difference(scale.float(), want_scale)
        raise CheckFailed(f"{case}: scale {got_text} where fp8_max / amax = {want_text}.\nHint: "
                          f"{_rounded_scale_hint(scale, want_scale) or _scale_hint(x, dtype, rowwise, scale.float())}")
    back = x_fp8.float() / want_scale
    smallest = torch.finfo(dtype).tiny * torch.finfo(dtype).eps        # the smallest subnormal: 2^-9, 2^-16
    bound = (torch.finfo(dtype).eps / 2 + 1e-6) * x.abs() + smallest / want_scale
    within = (back - x).abs() <= bound                                 # False where x_fp8 is NaN, too
    if not within.all():
        index = tuple(int(i) for i in (~within).nonzero()[0])
        right = (x * want_scale).to(dtype)
        shown, expected = two_numbers(x_fp8[index].float().item(), right[index].float().item())
        where = ", ".join(map(str, index))
        raise CheckFailed(f"{case}: x_fp8[{where}] is {shown}, expected {expected} (x[{where}] = "
                          f"{x[index].item():.6g} times the scale, cast to {dtype}).\nHint: "
                          f"{_values_hint(x, x_fp8, want_scale, dtype)}")


def _same_fp8(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Whether two FP8 tensors hold the same bytes (NaN included, which == would call different)."""
    return got.dtype == want.dtype and torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def _values_hint(x: torch.Tensor, x_fp8: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> str:
    """The hint for a right scale with wrong values: named only where x_fp8 is exactly what a likely mistake gives
    (the values divided by the scale, clamped to the other format's smaller range, or cast to FP8 before scaling)."""
    other = fp8.E5M2 if dtype == fp8.E4M3 else fp8.E4M3
    other_max = fp8.fp8_max(other)
    if _same_fp8(x_fp8, (x / scale).to(dtype)):
        return ("the values were divided by the scale: x_fp8 = x * scale, which maps amax onto the format's largest "
                "value; dividing puts them far below it, where FP8 has few values or none.")
    if other_max < fp8.fp8_max(dtype) and _same_fp8(x_fp8, (x * scale).clamp(-other_max, other_max).to(dtype)):
        return (f"the scaled values were clamped to ±{other_max:g}, the largest value of {other}; {dtype} goes up "
                f"to {fp8.fp8_max(dtype):g} (torch.finfo(dtype).max), where x * scale already stays.")
    if _same_fp8(x_fp8, (x.to(dtype).float() * scale).to(dtype)):
        return (f"x was cast to {dtype} before it was scaled: its values were rounded at their own size (small ones "
                "to zero) and then rounded again. Compute x * scale in float32 and cast the result to FP8 last.")
    return (f"the scale is right; x_fp8 must be (x * scale).to({dtype}), the scaled values rounded to the format "
            "once, so that x_fp8 / scale is x rounded to it.")


def _rounded_scale_hint(scale: torch.Tensor, want: torch.Tensor) -> str | None:
    """The hint for a right scale returned in a dtype with fewer mantissa bits than float32 (bfloat16, float16, an
    FP8 format), which rounded it; None for any other scale."""
    if not scale.dtype.is_floating_point or torch.finfo(scale.dtype).eps <= torch.finfo(torch.float32).eps:
        return None
    if not torch.equal(scale.float(), want.to(scale.dtype).float()):
        return None
    bits = round(-math.log2(torch.finfo(scale.dtype).eps))
    fp8_format = _is_fp8(scale.dtype)
    return (f"the scale was returned in {scale.dtype}{', an FP8 format' if fp8_format else ''}, which rounds it to "
            f"{bits} mantissa bits: keep the scale in float32"
            + (" and cast only the scaled values to FP8." if fp8_format else "."))


def _first_difference(scale: torch.Tensor, want: torch.Tensor) -> tuple[str, str]:
    """The scale and the right one where they first differ (a row, when there is one scale per row)."""
    got, expected = scale.reshape(-1), want.reshape(-1)
    differs = ~torch.isclose(got, expected, rtol=1e-5)
    index = int(differs.nonzero()[0]) if differs.any() else 0
    where = f" (row {index})" if expected.numel() > 1 else ""
    return f"{got[index].item():.6g}{where}", f"{expected[index].item():.6g}{where}"


def _shape_hint(shape: tuple, rowwise: bool) -> str:
    if not rowwise and shape == (FP8_ROWS, 1):
        return "rowwise=False asks for one scale for the whole tensor: amax over every element, shape ()."
    if rowwise and shape in ((), (1,), (1, 1)):
        return "rowwise=True asks for one scale per row: amax over the last dimension (dim=-1, keepdim=True)."
    if rowwise and shape in ((FP8_COLS,), (1, FP8_COLS)):
        return ("amax over the wrong dimension: that is one scale per column. A row's scale comes from that row's "
                "values: amax over the last dimension, dim=-1, keepdim=True -> (rows, 1).")
    if rowwise and shape == (FP8_ROWS,):
        return "keep the reduced dimension (keepdim=True): shape (rows, 1) scales whole rows."
    return "per tensor: shape (); per row: amax over the last dimension with keepdim=True, shape (rows, 1)."


def _scale_hint(x: torch.Tensor, dtype: torch.dtype, rowwise: bool, scale: torch.Tensor) -> str:
    largest = fp8.fp8_max(dtype)
    amax = x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax()
    signed = x.amax(dim=-1, keepdim=True) if rowwise else x.amax()
    if torch.allclose(scale, amax / largest, rtol=1e-5):
        return ("the scale is inverted: it must map amax onto the format's largest value, "
                "scale = fp8_max / amax (x * scale <= fp8_max).")
    if torch.allclose(scale, largest / signed, rtol=1e-5):
        return "amax is the largest absolute value, max(|x|): x.max() misses a larger negative value (row 2 has -200)."
    other = fp8.E5M2 if dtype == fp8.E4M3 else fp8.E4M3
    mean = x.abs().mean(dim=-1, keepdim=True) if rowwise else x.abs().mean()
    if torch.allclose(scale, largest / mean, rtol=1e-5):
        return ("the scale came from the mean of |x|, not its largest value: scaled by it, every value above the "
                "mean goes past the format's largest. amax = max(|x|) (x.abs().amax()).")
    if torch.allclose(scale, fp8.fp8_max(other) / amax, rtol=1e-5):
        return (f"the scale used the other format's largest value ({fp8.fp8_max(other):g}); {dtype} goes up to "
                f"{largest:g} (torch.finfo(dtype).max).")
    wide = next((d for d in (torch.float16, torch.bfloat16)
                 if torch.allclose(scale, torch.finfo(d).max / amax, rtol=1e-5)), None)
    if wide is not None:
        return (f"the scale used {wide}'s largest value ({torch.finfo(wide).max:g}), not the FP8 format's: {dtype} "
                f"goes up to {largest:g} (torch.finfo({dtype}).max), so x * scale overflows it.")
    if rowwise and torch.allclose(scale, largest / x.abs().amax().expand_as(scale), rtol=1e-5):
        return ("every row got the whole tensor's scale (fp8_max over the tensor's amax): rowwise=True asks for "
                "each row's own, from that row's amax, x.abs().amax(dim=-1, keepdim=True).")
    if torch.equal(scale, torch.exp2(torch.floor(torch.log2(largest / amax)))):
        return ("the scale was rounded down to a power of two (2^k <= fp8_max / amax). Some FP8 recipes do that, "
                "so that scaling loses no bits; this exercise asks for fp8_max / amax itself, which maps amax onto "
                "the format's largest value.")
    return "scale = torch.finfo(dtype).max / amax, with amax = max(|x|) over the tensor or each row."

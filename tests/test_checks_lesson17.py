"""The lesson 17 checks reject plausible wrong answers with feedback that names the mistake, and only it.

Each wrong answer below is a mistake a learner is likely to make; the test pins the part of the
feedback that names it, and that no other mistake's hint appears. The FP8 check runs in this
process (milliseconds); the loss-scaled steps of every mistaken answer, and of right answers by other
routes than the solution's, run in one launch of 2 gloo ranks and are judged by the check's own judge.
The solution's ✓ is proven by nbval of solutions/17-compile-and-low-precision.ipynb, so it is not run
again here.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.distributed as dist

from ddp_lab.checks import CheckFailed
from ddp_lab.checks import lesson17
from ddp_lab.checks.common import division_into_a_new_tensor
from ddp_lab.checks.lesson17 import WORLD, check_to_fp8, judge_scaler, overflow_test_evidence, scaler_runs
from ddp_lab.course.low_precision import fp8
from ddp_lab.course.low_precision.loss_scaling import AgreedLossScaler
from ddp_lab.launcher.launch import launch

SCALER_HINTS = ("decided per rank", "never divided by the scale", "divides into new tensors",
                "clipped before they were unscaled",
                "not capped at 1", "norm of its own shard", "norms were added", "averaged over the ranks",
                "must be skipped on every rank", "the package's own answer", "finds inf but not NaN",
                "not by this case's scale", "clipped to norm 1", "capped at max_norm",
                "look at every parameter's gradient", "was outvoted", "finds NaN but not inf",
                "the squared norm was compared with max_norm", "used the squared norm (the all-reduced sum",
                "divided by the scale twice", "clipping coefficient is upside down", "the norm left out the bias",
                "the step was taken by hand", "optimizer.step() was never called")
FP8_HINTS = ("gradients take e5m2", "weights and activations take e4m3", "wrong dimension",
             "keep the reduced dimension", "inverted", "x.max() misses", "other format's largest", "one scale per row",
             "one scale for the whole",
             "the package's own answer", "wrong way round", "is another FP8 format", "is a Python float",
             "keep the scale in float32", "use amax", "compute x * scale in float32", "were divided by the scale",
             "clamped to ±448, the largest value of torch.float8_e4m3fn", "before it was scaled",
             "from the mean of |x|", "changed the tensor it was given", "every row got the whole tensor's scale",
             "torch.float16's largest value", "rounded down to a power of two")


def _fails_with_only(message: str, expected: str, hints: tuple) -> None:
    assert expected in message, message
    others = [hint for hint in hints if hint != expected and hint in message]
    assert not others, f"other hints fired too: {others}\n{message}"


# --- unscale_clip_and_step: mistaken answers, run together on 2 ranks ---------------------------

def _unscale(params, scale):
    for p in params:
        p.grad.div_(scale)


def _agreed_inf(params) -> bool:
    flag = torch.tensor([0.0 if all(torch.isfinite(p.grad).all() for p in params) else 1.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def _clip(params, max_norm, squares_reduce="sum", cap=True):
    squares = sum(p.grad.pow(2).sum() for p in params).reshape(1)
    if squares_reduce != "local":
        dist.all_reduce(squares)
    if squares_reduce == "mean":
        squares /= dist.get_world_size()
    norm = squares.sqrt().item()
    coefficient = max_norm / (norm + 1e-6)
    if norm > max_norm or not cap:
        for p in params:
            p.grad.mul_(coefficient)


def step_per_rank_inf(params, optimizer, scale, max_norm):
    _clip(params, max_norm * scale)                                # clip the scaled gradients at max_norm * scale
    _unscale(params, scale)
    if not all(torch.isfinite(p.grad).all() for p in params):    # my shard only
        return False
    optimizer.step()
    return True


def step_never_unscaled(params, optimizer, scale, max_norm):
    if _agreed_inf(params):
        return False
    optimizer.step()
    return True


def step_clip_before_unscale(params, optimizer, scale, max_norm):
    if _agreed_inf(params):
        return False
    _clip(params, max_norm)
    _unscale(params, scale)
    optimizer.step()
    return True


def step_uncapped(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    _clip(params, max_norm, cap=False)
    optimizer.step()
    return True


def step_local_norm(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    torch.nn.utils.clip_grad_norm_(params, max_norm)              # this rank's shard only
    optimizer.step()
    return True


def step_added_norms(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    norm = torch.stack([p.grad.norm() for p in params]).norm().reshape(1)
    dist.all_reduce(norm)                                          # norms summed, not squares
    if norm.item() > max_norm:
        for p in params:
            p.grad.mul_(max_norm / (norm.item() + 1e-6))
    optimizer.step()
    return True


def step_averaged_squares(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    _clip(params, max_norm, squares_reduce="mean")
    optimizer.step()
    return True


def step_ignores_overflow(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    _clip(params, max_norm)
    optimizer.step()
    return True


def step_unscaled_into_new_tensors(params, optimizer, scale, max_norm):
    grads = [p.grad / scale for p in params]                       # divided, but p.grad keeps the scale
    return _unscaled_copies_step(grads, params, optimizer, max_norm)


def step_multiplied_by_scale(params, optimizer, scale, max_norm):
    for p in params:
        p.grad.mul_(scale)                                         # mul_ for div_
    return _step_after(_agreed_inf(params), params, optimizer, max_norm)


def _finite_flag(params, test=lambda g: torch.isfinite(g).all()) -> bool:
    flag = torch.tensor([0.0 if all(test(p.grad) for p in params) else 1.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def step_tests_for_inf_only(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    return _step_after(_finite_flag(params, lambda g: not torch.isinf(g).any()),   # a NaN passes this test
                       params, optimizer, max_norm)


def step_multiplies_by_a_written_reciprocal(params, optimizer, scale, max_norm):
    for p in params:
        p.grad.mul_(1 / 1024)                                      # 1 / scale, for one scale only
    return _step_after(_agreed_inf(params), params, optimizer, max_norm)


def step_clips_to_norm_one(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    squares = sum(p.grad.pow(2).sum() for p in params).reshape(1)
    dist.all_reduce(squares)
    clip_coef = 1.0 / (squares.sqrt().item() + 1e-6)               # max_norm written as 1
    if clip_coef < 1:
        for p in params:
            p.grad.mul_(clip_coef)
    optimizer.step()
    return True


def step_caps_at_max_norm(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    squares = sum(p.grad.pow(2).sum() for p in params).reshape(1)
    dist.all_reduce(squares)
    coefficient = min(max_norm, max_norm / (squares.sqrt().item() + 1e-6))   # min(1, ...) meant
    for p in params:
        p.grad.mul_(coefficient)
    optimizer.step()
    return True


def step_unscaled_into_a_local_name(params, optimizer, scale, max_norm):
    grads = []
    for p in params:
        g = p.grad
        g = g / scale                                              # a new tensor: p.grad keeps the scale
        grads.append(g)
    return _unscaled_copies_step(grads, params, optimizer, max_norm)


def step_returns_whether_it_skipped(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    skipped = _agreed_inf(params)
    if not skipped:
        _clip(params, max_norm)
        optimizer.step()
    return skipped                                                 # True means "stepped"


def _unscaled_copies_step(grads, params, optimizer, max_norm):
    """The rest of an answer that unscaled copies of the gradients: overflow test and clipping on the copies."""
    flag = torch.tensor([0.0 if all(torch.isfinite(g).all() for g in grads) else 1.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item():
        return False
    squares = sum(g.pow(2).sum() for g in grads).reshape(1)
    dist.all_reduce(squares)
    norm = squares.sqrt().item()
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / (norm + 1e-6))
    optimizer.step()
    return True


def step_unscaled_clones_in_place(params, optimizer, scale, max_norm):
    grads = [p.grad.clone().div_(scale) for p in params]          # in place, but on a copy
    return _unscaled_copies_step(grads, params, optimizer, max_norm)


def step_unscaled_a_clone_by_name(params, optimizer, scale, max_norm):
    grads = []
    for p in params:
        g = p.grad.clone()
        g /= scale                                                 # in place on the copy: p.grad keeps the scale
        grads.append(g)
    return _unscaled_copies_step(grads, params, optimizer, max_norm)


def step_unscaled_detached_clones(params, optimizer, scale, max_norm):
    grads = [p.grad.detach().clone() for p in params]
    for g in grads:
        g.div_(scale)
    return _unscaled_copies_step(grads, params, optimizer, max_norm)


def _flag_over(grads) -> bool:
    flag = torch.tensor([0.0 if all(torch.isfinite(g).all() for g in grads) else 1.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def step_tests_the_weights_only(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _flag_over([p.grad for p in params if p.dim() > 1]):       # the bias is never tested
        return False
    _clip(params, max_norm)
    optimizer.step()
    return True


def step_tests_the_first_parameter_only(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _flag_over([params[0].grad]):
        return False
    _clip(params, max_norm)
    optimizer.step()
    return True


def step_tests_the_last_parameter_only(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _flag_over([params[-1].grad]):                              # the weight is never tested
        return False
    _clip(params, max_norm)
    optimizer.step()
    return True


def step_clips_the_weight_only(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    squares = sum(p.grad.pow(2).sum() for p in params).reshape(1)
    dist.all_reduce(squares)
    norm = squares.sqrt().item()
    if norm > max_norm:
        params[0].grad.mul_(max_norm / (norm + 1e-6))             # the bias keeps its unclipped gradient
    optimizer.step()
    return True


def _step_after(found_inf, params, optimizer, max_norm) -> bool:
    """The rest of a step whose overflow flag the caller agreed on: skip where it says so, else clip and step."""
    if found_inf:
        return False
    _clip(params, max_norm)
    optimizer.step()
    return True


def step_found_inf_by_min(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    found = torch.tensor([0.0 if all(torch.isfinite(p.grad).all() for p in params) else 1.0])
    dist.all_reduce(found, op=dist.ReduceOp.MIN)                 # one finite rank outvotes the others
    return _step_after(found.item(), params, optimizer, max_norm)


def step_all_finite_by_max(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    finite = torch.tensor([1.0 if all(torch.isfinite(p.grad).all() for p in params) else 0.0])
    dist.all_reduce(finite, op=dist.ReduceOp.MAX)                # an all-finite flag takes MIN
    return _step_after(not finite.item(), params, optimizer, max_norm)


def step_found_inf_from_rank_0(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    found = torch.tensor([0.0 if all(torch.isfinite(p.grad).all() for p in params) else 1.0])
    dist.broadcast(found, src=0)                                  # rank 1's overflow is never heard
    return _step_after(found.item(), params, optimizer, max_norm)


def step_tests_for_nan_only(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    found = torch.tensor([1.0 if any(torch.isnan(p.grad).any() for p in params) else 0.0])
    dist.all_reduce(found, op=dist.ReduceOp.MAX)                  # an inf passes this test
    return _step_after(found.item(), params, optimizer, max_norm)


def step_guards_the_scale_then_tests_for_nan_only(params, optimizer, scale, max_norm):
    assert math.isfinite(scale) and scale > 0                     # a guard on the argument: no test of the gradients
    _unscale(params, scale)
    found = torch.tensor([1.0 if any(torch.isnan(p.grad).any() for p in params) else 0.0])
    dist.all_reduce(found, op=dist.ReduceOp.MAX)                  # an inf passes this test
    return _step_after(found.item(), params, optimizer, max_norm)


def step_all_finite_compared_by_max(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    finite = torch.tensor([1.0 if all((p.grad.abs() < float("inf")).all() for p in params) else 0.0])
    dist.all_reduce(finite, op=dist.ReduceOp.MAX)                # the source names no test: both causes said
    return _step_after(not finite.item(), params, optimizer, max_norm)


def step_compares_the_squared_norm(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    squares = sum(p.grad.pow(2).sum() for p in params).reshape(1)
    dist.all_reduce(squares)
    if squares.item() > max_norm:                                  # the square against max_norm, not max_norm ** 2
        for p in params:
            p.grad.mul_(max_norm / (squares.sqrt().item() + 1e-6))
    optimizer.step()
    return True


def step_clips_by_the_squared_norm(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    squares = sum(p.grad.pow(2).sum() for p in params).reshape(1)
    dist.all_reduce(squares)
    norm = squares.item()                                          # the square root never taken
    if norm > max_norm:
        for p in params:
            p.grad.mul_(max_norm / (norm + 1e-6))
    optimizer.step()
    return True


def step_unscales_twice(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    grads = [p.grad.div_(scale) for p in params]                # "unscale" once more before the norm
    squares = sum(g.pow(2).sum() for g in grads).reshape(1)
    dist.all_reduce(squares)
    norm = squares.sqrt().item()
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / (norm + 1e-6))
    optimizer.step()
    return True


def _inverted_clip(params, max_norm, always):
    squares = sum(p.grad.pow(2).sum() for p in params).reshape(1)
    dist.all_reduce(squares)
    norm = squares.sqrt().item()
    if always or norm > max_norm:
        for p in params:
            p.grad.mul_(norm / max_norm)                             # the coefficient upside down


def step_inverts_the_coefficient(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    _inverted_clip(params, max_norm, always=False)
    optimizer.step()
    return True


def step_always_applies_an_inverted_coefficient(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    _inverted_clip(params, max_norm, always=True)
    optimizer.step()
    return True


def step_norm_of_the_weights_only(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    squares = params[0].grad.pow(2).sum().reshape(1)           # the bias left out of the norm
    dist.all_reduce(squares)
    norm = squares.sqrt().item()
    if norm > max_norm:
        for p in params:
            p.grad.mul_(max_norm / (norm + 1e-6))
    optimizer.step()
    return True


def step_by_hand(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    _clip(params, max_norm)
    lr = optimizer.param_groups[0]["lr"]
    with torch.no_grad():
        for p in params:
            p.sub_(lr * p.grad)                                    # SGD's rule by hand: its weight decay left out
    return True


def step_never_steps(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    _clip(params, max_norm)
    return True                                                    # no optimizer.step()


def step_clears_before_stepping(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    _clip(params, max_norm)
    optimizer.zero_grad()                                          # every .grad None: the step skips them all
    optimizer.step()
    return True


def test_parameters_that_did_not_move_name_both_causes():
    """A step that found every .grad cleared leaves the parameters as a step never called does: both are named."""
    with pytest.raises(CheckFailed, match=r"(?s)optimizer\.step\(\) was never called, or found no gradient to step "
                                          r"with \(optimizer\.zero_grad\(\) before the step"):
        lesson17.check_unscale_clip_and_step(step_clears_before_stepping)


def step_with_the_package(params, optimizer, scale, max_norm):
    return AgreedLossScaler(scale=scale).unscale_clip_and_step(params, optimizer, max_norm)


SCALER_MISTAKES = [
    (step_per_rank_inf, "decided per rank"),
    (step_never_unscaled, "never divided by the scale"),
    (step_clip_before_unscale, "clipped before they were unscaled"),
    (step_uncapped, "not capped at 1"),
    (step_local_norm, "norm of its own shard"),
    (step_added_norms, "norms were added"),
    (step_averaged_squares, "averaged over the ranks"),
    (step_ignores_overflow, "must be skipped on every rank"),
    (step_unscaled_into_new_tensors, "divides into new tensors"),
    (step_multiplied_by_scale, "not capped at 1"),             # the hint names both: still scaled, or uncapped
    (step_with_the_package, "the package's own answer"),
    (step_tests_for_inf_only, "finds inf but not NaN"),
    # 1 / 1024 is one case's scale: another case's gradients come out scale / 1024 times too large or too small
    (step_multiplies_by_a_written_reciprocal, "not by this case's scale"),
    (step_clips_to_norm_one, "clipped to norm 1"),
    (step_caps_at_max_norm, "capped at max_norm"),
    (step_unscaled_into_a_local_name, "divides into new tensors"),
    (step_returns_whether_it_skipped, "every rank skipped the step (its parameters are as they were) but"),
    (step_unscaled_clones_in_place, "divides into new tensors"),
    (step_unscaled_a_clone_by_name, "divides into new tensors"),
    (step_unscaled_detached_clones, "divides into new tensors"),
    (step_tests_the_weights_only, "look at every parameter's gradient"),
    (step_tests_the_first_parameter_only, "look at every parameter's gradient"),
    (step_tests_the_last_parameter_only, "look at every parameter's gradient"),
    # the overflow agreed the wrong way: NaN on every rank skips, an inf on rank 1 alone steps both
    # (the source shows which way: one cause named, not the other)
    (step_found_inf_by_min, "was outvoted"), (step_all_finite_by_max, "was outvoted"),
    (step_found_inf_from_rank_0, "was outvoted"), (step_tests_for_nan_only, "finds NaN but not inf"),
    (step_clips_the_weight_only, "(SGD, lr 1, weight decay 0.05: the parameters less lr times the unscaled, "
                                 "clipped gradient plus weight decay times the parameters)"),
    (step_unscales_twice, "divided by the scale twice"),
    (step_inverts_the_coefficient, "clipping coefficient is upside down"),
    (step_always_applies_an_inverted_coefficient, "clipping coefficient is upside down"),
    (step_norm_of_the_weights_only, "the norm left out the bias"),
    (step_by_hand, "the step was taken by hand"),
    (step_never_steps, "optimizer.step() was never called"),
    # right where the norm and its square are on the same side of max_norm: the third case has them apart
    (step_compares_the_squared_norm, "the squared norm was compared with max_norm"),
    (step_clips_by_the_squared_norm, "used the squared norm (the all-reduced sum"),
]


# right answers by other routes, run in the same launch: the norm's all_reduce as the overflow test (an inf or a NaN
# in any shard makes the global norm non-finite), torch's clamped coefficient applied always, grads cleared on a skip
def step_norm_finds_the_overflow(params, optimizer, scale, max_norm):
    _unscale(params, scale)
    squares = sum(p.grad.pow(2).sum() for p in params).reshape(1)
    dist.all_reduce(squares)
    norm = squares.sqrt()
    if not torch.isfinite(norm):
        return False
    for p in params:
        p.grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    optimizer.step()
    return True


def step_clears_the_gradients_when_it_skips(params, optimizer, scale, max_norm):
    torch._foreach_div_([p.grad for p in params], scale)
    if _finite_flag(params):
        optimizer.zero_grad()
        return False
    _clip(params, max_norm)
    optimizer.step()
    return True


SCALER_RIGHT = [step_norm_finds_the_overflow, step_clears_the_gradients_when_it_skips]
SCALER_OTHER = [step_all_finite_compared_by_max, step_guards_the_scale_then_tests_for_nan_only]   # tests below


@pytest.fixture(scope="module")
def scaler_results():
    answers = [answer for answer, _ in SCALER_MISTAKES] + SCALER_RIGHT + SCALER_OTHER
    per_rank = launch(scaler_runs, args=(answers,), nprocs=WORLD, backend="gloo", timeout=30)
    return {answer.__name__: [per_rank[rank][i] for rank in range(WORLD)] for i, answer in enumerate(answers)}


def _judge(answer, scaler_results) -> None:
    """The check's judge, given what the check reads in the answer's source."""
    judge_scaler(answer.__name__, scaler_results[answer.__name__], division_into_a_new_tensor(answer),
                 overflow_test_evidence(answer))


@pytest.mark.parametrize("answer, expected", SCALER_MISTAKES, ids=[a.__name__ for a, _ in SCALER_MISTAKES])
def test_scaler_check_names_each_mistake_and_only_it(scaler_results, answer, expected):
    with pytest.raises(CheckFailed) as failure:
        _judge(answer, scaler_results)
    _fails_with_only(str(failure.value), expected, SCALER_HINTS)


@pytest.mark.parametrize("answer, said", [
    (step_unscaled_clones_in_place, "`grads = [p.grad.clone().div_(scale) for p in params]` divides into new"),
    (step_unscaled_a_clone_by_name, "`g = p.grad.clone(); g /= scale` divides into new tensors"),
    (step_unscaled_detached_clones, "`grads = [p.grad.detach().clone() for p in params]; g.div_(scale)` divides"),
])
def test_scaler_check_quotes_the_division_of_a_copy(scaler_results, answer, said):
    """An answer that divided a copy in place did divide: the feedback quotes that division, never 'never divided'."""
    with pytest.raises(CheckFailed) as failure:
        _judge(answer, scaler_results)
    assert said in str(failure.value), failure.value
    assert "never divided" not in str(failure.value), failure.value


@pytest.mark.parametrize("answer, missed", [(step_tests_the_weights_only, "missed the bias"),
                                            (step_tests_the_first_parameter_only, "missed the bias"),
                                            (step_tests_the_last_parameter_only, "missed the weight")])
def test_scaler_check_says_which_parameter_the_overflow_test_missed(scaler_results, answer, missed):
    """An overflow test that skips a parameter finds NaN and inf alike where it looks: no 'inf but not NaN'."""
    with pytest.raises(CheckFailed) as failure:
        _judge(answer, scaler_results)
    assert missed in str(failure.value), failure.value
    assert "isinf" not in str(failure.value) and "inf but not NaN" not in str(failure.value), failure.value


@pytest.mark.parametrize("answer, said", [
    (step_found_inf_by_min, "\nHint: rank 1's overflow was outvoted when the ranks agreed on it: all-reduce a "
                            "found-inf flag with ReduceOp.MAX, or an all-finite flag with MIN"),
    (step_tests_for_nan_only, "\nHint: your overflow test finds NaN but not inf (torch.isnan); torch.isfinite is False "
                              "for both."),
    # math.isfinite on the scale is no overflow test of the gradients: the isnan test is named still
    (step_guards_the_scale_then_tests_for_nan_only, "\nHint: your overflow test finds NaN but not inf"),
    # a test the source does not name (a comparison with inf): both causes said
    (step_all_finite_compared_by_max, "\nHint: either rank 1's overflow was outvoted when the ranks agreed on it: "
                                      "all-reduce a found-inf flag with ReduceOp.MAX, or an all-finite flag with "
                                      "MIN, so that any rank's overflow skips the step everywhere; a flag broadcast "
                                      "from one rank carries only that rank's; or your overflow test finds NaN but "
                                      "not inf"),
])
def test_scaler_check_names_an_overflow_on_one_rank_that_went_unheeded(scaler_results, answer, said):
    with pytest.raises(CheckFailed) as failure:
        _judge(answer, scaler_results)
    assert str(failure.value).startswith(f"with an inf in rank 1's weight gradient only, {answer.__name__} returned "
                                         "True on ranks [0, 1], though with a NaN in every rank's weight gradient, and "
                                         "with a NaN in every rank's bias gradient, every rank skipped."), failure.value
    assert said in str(failure.value), failure.value


def test_scaler_check_shows_the_first_element_that_differs(scaler_results):
    """Only the bias differs: the message names bias[i], with two numbers that read differently."""
    with pytest.raises(CheckFailed) as failure:
        _judge(step_clips_the_weight_only, scaler_results)
    got, expected = re.search(r"rank 0's bias\[\d\] after the step is (\S+), expected (\S+) \(SGD",
                              str(failure.value)).groups()
    assert got != expected, failure.value


@pytest.mark.parametrize("answer", SCALER_RIGHT, ids=[a.__name__ for a in SCALER_RIGHT])
def test_scaler_check_accepts_right_answers_by_other_routes(scaler_results, answer):
    _judge(answer, scaler_results)   # no raise


# --- to_fp8 ----------------------------------------------------------------------------------

def _format(role):
    return torch.float8_e5m2 if role == "gradient" else torch.float8_e4m3fn


def _cast(x, dtype, amax):
    scale = torch.finfo(dtype).max / amax
    return (x * scale).to(dtype), scale


def fp8_swapped(x, role, rowwise):
    dtype = torch.float8_e4m3fn if role == "gradient" else torch.float8_e5m2
    return _cast(x, dtype, x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())


def fp8_gradients_e4m3(x, role, rowwise):
    return _cast(x, torch.float8_e4m3fn, x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())


def fp8_columns(x, role, rowwise):
    return _cast(x, _format(role), x.abs().amax(dim=0, keepdim=True) if rowwise else x.abs().amax())


def fp8_no_keepdim(x, role, rowwise):
    return _cast(x, _format(role), x.abs().amax(dim=-1) if rowwise else x.abs().amax())


def fp8_inverted(x, role, rowwise):
    dtype = _format(role)
    amax = x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax()
    scale = amax / torch.finfo(dtype).max
    return (x * scale).to(dtype), scale


def fp8_max_without_abs(x, role, rowwise):
    return _cast(x, _format(role), x.amax(dim=-1, keepdim=True) if rowwise else x.amax())


def fp8_e4m3_max_for_all(x, role, rowwise):
    dtype = _format(role)
    amax = x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax()
    scale = 448.0 / amax
    return (x * scale).to(dtype), scale


def fp8_always_per_tensor(x, role, rowwise):
    return _cast(x, _format(role), x.abs().amax())


def fp8_always_per_row(x, role, rowwise):
    return _cast(x, _format(role), x.abs().amax(dim=-1, keepdim=True))


def fp8_the_packages(x, role, rowwise):
    return fp8.to_fp8(x, role, rowwise)


def fp8_pair_reversed(x, role, rowwise):
    x_fp8, scale = _cast(x, _format(role), x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())
    return scale, x_fp8


def fp8_fnuz(x, role, rowwise):
    dtype = torch.float8_e5m2fnuz if role == "gradient" else torch.float8_e4m3fnuz
    return _cast(x, dtype, x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())


def fp8_python_scale(x, role, rowwise):
    x_fp8, scale = _cast(x, _format(role), x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())
    return x_fp8, scale.item() if scale.numel() == 1 else scale


def fp8_scale_in_fp8(x, role, rowwise):
    x_fp8, scale = _cast(x, _format(role), x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())
    return x_fp8, scale.to(_format(role))          # the scale cast to FP8 along with the values


def fp8_scale_in_bfloat16(x, role, rowwise):
    x_fp8, scale = _cast(x, _format(role), x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())
    return x_fp8, scale.to(torch.bfloat16)         # "low precision" applied to the scale too


def fp8_abs_only_per_tensor(x, role, rowwise):
    return _cast(x, _format(role), x.amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())


def fp8_added_dimension(x, role, rowwise):
    x_fp8, scale = _cast(x, _format(role), x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())
    return x_fp8.unsqueeze(0), scale                # broadcasting kept x_fp8 / scale close to x


def fp8_flattened(x, role, rowwise):
    x_fp8, scale = _cast(x, _format(role), x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())
    return x_fp8.reshape(-1), scale


def fp8_max_over_a_dimension(x, role, rowwise):
    amax = x.abs().max(dim=-1, keepdim=True) if rowwise else x.abs().max()   # a (values, indices) pair per row
    return _cast(x, _format(role), amax)


def fp8_cast_before_scaling(x, role, rowwise):
    dtype = _format(role)
    scale = torch.finfo(dtype).max / (x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())
    return x.to(dtype) * scale, scale                  # arithmetic on an FP8 tensor: no CPU kernel


def fp8_divides_by_the_scale(x, role, rowwise):
    dtype = _format(role)
    scale = torch.finfo(dtype).max / (x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())
    return (x / scale).to(dtype), scale


def fp8_clamped_to_e4m3_range(x, role, rowwise):
    dtype = _format(role)
    scale = torch.finfo(dtype).max / (x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())
    return (x * scale).clamp(-448.0, 448.0).to(dtype), scale        # e4m3's bound, for e5m2's gradients too


def fp8_cast_then_scaled_in_float32(x, role, rowwise):
    dtype = _format(role)
    scale = torch.finfo(dtype).max / (x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())
    return (x.to(dtype).float() * scale).to(dtype), scale             # rounded to FP8 twice


def fp8_scale_from_the_mean(x, role, rowwise):
    return _cast(x, _format(role), x.abs().mean(dim=-1, keepdim=True) if rowwise else x.abs().mean())


def fp8_scales_x_in_place(x, role, rowwise):
    dtype = _format(role)
    scale = torch.finfo(dtype).max / (x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())
    return x.mul_(scale).to(dtype), scale                          # the caller's x scaled too


def fp8_rows_share_the_tensors_scale(x, role, rowwise):
    dtype = _format(role)
    scale = torch.finfo(dtype).max / x.abs().amax()
    if rowwise:
        scale = scale.expand(x.shape[0], 1)                        # the shape asked for, one value for every row
    return (x * scale).to(dtype), scale


def fp8_float16_max_for_gradients(x, role, rowwise):
    dtype = _format(role)
    largest = torch.finfo(torch.float16).max if role == "gradient" else torch.finfo(dtype).max
    scale = largest / (x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())
    return (x * scale).to(dtype), scale


def fp8_power_of_two_scale(x, role, rowwise):
    dtype = _format(role)
    amax = x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax()
    scale = torch.exp2(torch.floor(torch.log2(torch.finfo(dtype).max / amax)))
    return (x * scale).to(dtype), scale


def fp8_rounded_to_integers(x, role, rowwise):
    dtype = _format(role)
    scale = torch.finfo(dtype).max / (x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())
    return (x * scale).round().to(dtype), scale                       # int8's rounding, no mistake named for it


@pytest.mark.parametrize("answer, expected", [
    (fp8_divides_by_the_scale, "were divided by the scale"),
    (fp8_scales_x_in_place, "changed the tensor it was given"),
    (fp8_rows_share_the_tensors_scale, "every row got the whole tensor's scale"),
    (fp8_float16_max_for_gradients, "torch.float16's largest value"),
    (fp8_power_of_two_scale, "rounded down to a power of two"),
    (fp8_clamped_to_e4m3_range, "clamped to ±448, the largest value of torch.float8_e4m3fn"),
    (fp8_cast_then_scaled_in_float32, "before it was scaled"),
    (fp8_scale_from_the_mean, "from the mean of |x|"),
    (fp8_rounded_to_integers, "the scale is right; x_fp8 must be (x * scale).to(torch.float8_e4m3fn)"),
    (fp8_max_over_a_dimension, "use amax"),
    (fp8_cast_before_scaling, "compute x * scale in float32"),
    (fp8_added_dimension, "x_fp8 has shape (1, 6, 10), expected (6, 10)"),
    (fp8_flattened, "x_fp8 has shape (60,), expected (6, 10)"),
    (fp8_swapped, "weights and activations take e4m3"),
    (fp8_gradients_e4m3, "gradients take e5m2"),
    (fp8_columns, "wrong dimension"),
    (fp8_no_keepdim, "keep the reduced dimension"),
    (fp8_inverted, "inverted"),
    (fp8_max_without_abs, "x.max() misses"),
    (fp8_e4m3_max_for_all, "other format's largest"),
    (fp8_always_per_tensor, "one scale per row"),
    (fp8_always_per_row, "one scale for the whole"),
    (fp8_the_packages, "the package's own answer"),
    (fp8_pair_reversed, "wrong way round"),
    (fp8_fnuz, "is another FP8 format"),
    (fp8_python_scale, "is a Python float"),
    (fp8_abs_only_per_tensor, "x.max() misses"),
    (fp8_scale_in_fp8, "keep the scale in float32"),
    (fp8_scale_in_bfloat16, "keep the scale in float32"),
])
def test_fp8_check_names_each_mistake_and_only_it(answer, expected):
    with pytest.raises(CheckFailed) as failure:
        check_to_fp8(answer)
    _fails_with_only(str(failure.value), expected, FP8_HINTS)


def fp8_returns_the_format_too(x, role, rowwise):
    dtype = _format(role)
    return (*_cast(x, dtype, x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax()), dtype)


def fp8_no_scale(x, role, rowwise):
    x_fp8, _ = _cast(x, _format(role), x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax())
    return x_fp8, None


@pytest.mark.parametrize("answer, said", [
    (fp8_returns_the_format_too, "fp8_returns_the_format_too returned a tuple of 3: (Tensor, Tensor, dtype); "
                                 "expected a pair of tensors (x_fp8, scale)."),
    (fp8_no_scale, "fp8_no_scale returned a tuple of 2: (Tensor, None); expected a pair of tensors (x_fp8, scale)."),
])
def test_fp8_check_describes_a_wrong_return_by_its_types(answer, said):
    """A return that is not two tensors is told by its length and its items' types, not a repr cut mid-tensor."""
    with pytest.raises(CheckFailed) as failure:
        check_to_fp8(answer)
    assert said in str(failure.value), failure.value
    assert "tensor(" not in str(failure.value), failure.value


def test_fp8_scale_message_shows_a_row_where_the_scales_differ():
    with pytest.raises(CheckFailed) as failure:
        check_to_fp8(fp8_abs_only_per_tensor)         # right per tensor; per row, only some rows' amax is negative
    got, expected = re.search(r"scale (\S+ \(row \d+\)) where fp8_max / amax = (\S+ \(row \d+\))",
                              str(failure.value)).groups()
    assert got != expected


def fp8_clamped_by_hand_per_dim_1(x, role, rowwise):
    dtype = {"weight": torch.float8_e4m3fn, "activation": torch.float8_e4m3fn, "gradient": torch.float8_e5m2}[role]
    largest = torch.finfo(dtype).max
    amax = x.abs().max(dim=1, keepdim=True).values if rowwise else torch.maximum(x.max(), -x.min())
    scale = largest / amax.clamp(min=1e-12)
    return torch.clamp(x.double() * scale, -largest, largest).to(dtype), scale   # a no-op clamp, in float64


def test_fp8_check_accepts_a_right_answer_in_another_style(capsys):
    check_to_fp8(fp8_clamped_by_hand_per_dim_1)
    assert capsys.readouterr().out.startswith("✓ fp8_clamped_by_hand_per_dim_1: e4m3 for weights and activations")


def test_fp8_values_message_shows_the_first_element_that_differs():
    """Values wrong under a right scale: the element, what it holds and what it should, not only 'not x rounded'."""
    with pytest.raises(CheckFailed) as failure:
        check_to_fp8(fp8_rounded_to_integers)
    index, got, expected = re.search(r"x_fp8\[(\d+, \d+)\] is (\S+), expected (\S+) \(x\[\1\] = ",
                                     str(failure.value)).groups()
    assert got != expected, failure.value


def test_fp8_check_says_a_stub_is_not_written():
    def to_fp8(x, role, rowwise):
        raise NotImplementedError("pick the format from the role")

    with pytest.raises(CheckFailed, match="not written yet"):
        check_to_fp8(to_fp8)


def unscales_by_a_written_scale(params, optimizer, scale, max_norm):
    for p in params:
        p.grad.div_(1024.0)                             # the check's scale, written in
    optimizer.step()
    return True


def test_a_divisor_written_as_a_number_is_refused_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(lesson17, "run_on_ranks", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^unscales_by_a_written_scale divides a gradient by 1024\.0, a number "
                                          r"written in the code \(`p\.grad\.div_\(1024\.0\)`\)\.\nHint: divide by "
                                          r"scale, the argument"):
        lesson17.check_unscale_clip_and_step(unscales_by_a_written_scale)


def clips_at_a_written_norm(params, optimizer, scale, max_norm):
    grads = [p.grad for p in params]
    for grad in grads:
        grad.div_(scale)
    norm = torch.sqrt(sum(g.pow(2).sum() for g in grads)).item()
    if norm > 1.0:                                      # the check's max_norm, written in
        for grad in grads:
            grad.mul_(max_norm / norm)
    optimizer.step()
    return True


def test_a_bound_written_as_a_number_is_refused_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(lesson17, "run_on_ranks", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"^clips_at_a_written_norm compares the norm with 1\.0, a number written in "
                                          r"the code \(`norm > 1\.0`\)\.\nHint: compare with max_norm"):
        lesson17.check_unscale_clip_and_step(clips_at_a_written_norm)


class _RanksWouldStart(Exception):
    pass


def _ranks_would_start(*args, **kwargs):
    raise _RanksWouldStart


def step_tests_the_ratio_inline(params, optimizer, scale, max_norm):
    """Right: the coefficient's test written as a ratio of the norm and max_norm, compared with 1."""
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    squares = sum(p.grad.pow(2).sum() for p in params).reshape(1)
    dist.all_reduce(squares)
    norm = squares.sqrt().item()
    if norm / max_norm > 1:
        for p in params:
            p.grad.mul_(max_norm / (norm + 1e-6))
    optimizer.step()
    return True


def step_tests_the_coefficient_inline(params, optimizer, scale, max_norm):
    """Right: torch's coefficient, max_norm / (norm + 1e-6), compared with 1 where it is computed."""
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    squares = sum(p.grad.pow(2).sum() for p in params).reshape(1)
    dist.all_reduce(squares)
    total_norm = squares.sqrt().item()
    if max_norm / (total_norm + 1e-6) < 1.0:
        for p in params:
            p.grad.mul_(max_norm / (total_norm + 1e-6))
    optimizer.step()
    return True


def step_tests_a_named_ratio(params, optimizer, scale, max_norm):
    """Right: the ratio of the norm and max_norm bound to a name, then compared with 1."""
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    squares = sum(p.grad.pow(2).sum() for p in params).reshape(1)
    dist.all_reduce(squares)
    norm = squares.sqrt().item()
    norm_ratio = norm / max_norm
    if norm_ratio > 1:
        for p in params:
            p.grad.mul_(max_norm / (norm + 1e-6))
    optimizer.step()
    return True


def step_guards_the_division(params, optimizer, scale, max_norm):
    """Right: the norm compared with max_norm, and with a tiny number so that max_norm / norm stays finite."""
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    squares = sum(p.grad.pow(2).sum() for p in params).reshape(1)
    dist.all_reduce(squares)
    norm = squares.sqrt().item()
    if norm > max_norm and norm > 1e-12:
        for p in params:
            p.grad.mul_(max_norm / norm)
    optimizer.step()
    return True


def step_reads_the_ratio_with_item(params, optimizer, scale, max_norm):
    """Right: the ratio of a tensor norm and max_norm read out as a number (.item()), then compared with 1."""
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    squares = sum(p.grad.pow(2).sum() for p in params).reshape(1)
    dist.all_reduce(squares)
    total_norm = squares.sqrt()
    if (total_norm / max_norm).item() > 1.0:
        for p in params:
            p.grad.mul_(max_norm / (total_norm.item() + 1e-6))
    optimizer.step()
    return True


def step_reads_the_ratio_with_float(params, optimizer, scale, max_norm):
    """Right: the same ratio read out with float(), then compared with 1."""
    _unscale(params, scale)
    if _agreed_inf(params):
        return False
    squares = sum(p.grad.pow(2).sum() for p in params).reshape(1)
    dist.all_reduce(squares)
    total_norm = squares.sqrt()
    if float(total_norm / max_norm) > 1:
        for p in params:
            p.grad.mul_(max_norm / (total_norm.item() + 1e-6))
    optimizer.step()
    return True


def clips_at_a_written_norm_read_with_float(params, optimizer, scale, max_norm):
    """Wrong: the norm (not a ratio) read out with float() and compared with a 1.0 written in."""
    grads = [p.grad for p in params]
    for grad in grads:
        grad.div_(scale)
    norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    if float(norm) > 1.0:
        for grad in grads:
            grad.mul_(max_norm / norm)
    optimizer.step()
    return True


def test_a_written_bound_is_refused_through_a_number_read_out(monkeypatch):
    monkeypatch.setattr(lesson17, "run_on_ranks", None)   # starting ranks would raise TypeError
    with pytest.raises(CheckFailed, match=r"compares the norm with 1\.0, a number written in the code "
                                          r"\(`float\(norm\) > 1\.0`\)"):
        lesson17.check_unscale_clip_and_step(clips_at_a_written_norm_read_with_float)


@pytest.mark.parametrize("answer", [step_tests_the_ratio_inline, step_tests_the_coefficient_inline,
                                    step_tests_a_named_ratio, step_guards_the_division,
                                    step_reads_the_ratio_with_item, step_reads_the_ratio_with_float])
def test_a_ratio_compared_with_one_is_no_written_bound(monkeypatch, answer):
    monkeypatch.setattr(lesson17, "run_on_ranks", _ranks_would_start)   # the source rules let it through
    with pytest.raises(_RanksWouldStart):
        lesson17.check_unscale_clip_and_step(answer)

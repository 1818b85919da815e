"""ddp_lab.stable_str: printed numbers that every machine prints the same way."""

import pytest
import torch

import ddp_lab
from ddp_lab.stable import RELATIVE_TOLERANCE, UnstableDigits, stable_str


def test_the_value_that_flipped_between_machines_is_refused_at_four_decimals():
    # 7.7002 on one CPU, 7.7003 on another: the value sat on the boundary 7.70025
    with pytest.raises(UnstableDigits, match=r"7\.7002 with digits=4.*could print 7\.700[13].*digits=3"):
        stable_str(7.700249, digits=4)
    assert stable_str(7.700249, digits=2) == "7.70"


@pytest.mark.parametrize("value, digits, text", [
    (13.3741, 3, "13.374"), (0.0147, 4, "0.0147"), (-0.251, 3, "-0.251"), (2, 1, "2.0"),
    (1e-12, 3, "0.000"), (-1e-12, 3, "0.000"), (float("nan"), 3, "nan"),
])
def test_values_far_from_a_boundary_print_rounded(value, digits, text):
    assert stable_str(value, digits) == text


def test_a_change_within_the_tolerance_never_changes_what_is_printed():
    for value in torch.linspace(-3, 3, 2001).tolist():
        for digits in (1, 2, 3):
            try:
                text = stable_str(value, digits)
            except UnstableDigits:
                continue
            nudge = 0.99 * RELATIVE_TOLERANCE * abs(value)
            assert stable_str(value + nudge, digits) == text == stable_str(value - nudge, digits)


def test_sequences_and_tensors():
    assert stable_str([0.25, -1.5], digits=2) == "[0.25, -1.50]"
    assert stable_str(torch.tensor([0.0236, 0.0770]), digits=3) == "[0.024, 0.077]"
    assert stable_str(torch.tensor(3.26), digits=1) == "3.3"
    assert ddp_lab.stable_str(1.5, 1) == "1.5"


@pytest.mark.parametrize("bad, match", [("1.5", "prints numbers; got str"), (True, "got bool")])
def test_non_numbers_are_refused(bad, match):
    with pytest.raises(TypeError, match=match):
        stable_str(bad)


def test_bad_digits_say_what_is_expected():
    with pytest.raises(ValueError, match="digits must be an int >= 0"):
        stable_str(1.0, digits=-1)

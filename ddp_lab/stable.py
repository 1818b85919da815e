"""Printing floats that come out the same on every machine.

A float computed on another CPU (AVX2 vs AVX-512 kernels, another thread count, another
reduction order) can differ in its last bits. Printed with too many decimals, a value near a
rounding boundary then shows a different last digit: a stored `7.7002` became `7.7003`.
`stable_str` rounds and refuses to print a digit that such a difference could change.

Introduced in notebooks/00b-live-cluster.ipynb; used by every lesson that prints a number.
"""

from __future__ import annotations

import math

# How far another machine's result may be from this one's: relative, plus a floor near zero.
# float32 sums in another order differ by about 1e-7..1e-6 relative; 2e-5 leaves room for a
# few steps of training to carry such differences forward, and still lets a loss near 10
# print 3 decimals when it is not near a boundary.
RELATIVE_TOLERANCE = 2e-5
ABSOLUTE_TOLERANCE = 1e-7


class UnstableDigits(ValueError):
    """A value is too close to a rounding boundary to print with that many decimals."""


def stable_str(value, digits: int = 3) -> str:
    """Format a float (or a sequence / tensor of floats) with `digits` decimals, reproducibly.

    Raises UnstableDigits when a change within the tolerance (what another CPU could compute)
    would print a different string: then print fewer decimals, or print the comparison the
    claim needs instead of the number.

    Args:
        value: a float, int, 0-d tensor, or a sequence / 1-d tensor of them.
        digits: decimals after the point.

    Returns:
        The formatted number, or "[a, b, …]" for a sequence.

    Example:
        >>> stable_str(13.3741)
        '13.374'
        >>> stable_str([0.25, -1.5], digits=2)
        '[0.25, -1.50]'

    Introduced in notebooks/00b-live-cluster.ipynb.
    """
    if not isinstance(digits, int) or isinstance(digits, bool) or digits < 0:
        raise ValueError(f"digits must be an int >= 0 (decimals after the point), got {digits!r}.")
    values = _as_floats(value)
    if values is None:
        return _one(_as_float(value), digits)
    return "[" + ", ".join(_one(number, digits) for number in values) + "]"


def _as_floats(value) -> list[float] | None:
    """The numbers of a sequence or non-scalar tensor, or None for a single number."""
    if hasattr(value, "tolist") and hasattr(value, "dim"):  # a torch tensor, without importing torch
        value = value.detach().tolist() if value.dim() > 0 else value.item()
    if isinstance(value, (list, tuple)):
        return [_as_float(item) for item in value]
    return None


def _as_float(value) -> float:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"stable_str prints numbers; got {type(value).__name__} {value!r}.")
    return float(value)


def _one(number: float, digits: int) -> str:
    if not math.isfinite(number):
        return str(number)
    text = _fixed(number, digits)
    margin = RELATIVE_TOLERANCE * abs(number) + ABSOLUTE_TOLERANCE
    low, high = _fixed(number - margin, digits), _fixed(number + margin, digits)
    if low != text or high != text:
        raise UnstableDigits(
            f"{number!r} prints as {text} with digits={digits}, but another machine's rounding "
            f"(within ±{margin:.1e}) could print {low if low != text else high}. "
            f"Use fewer decimals (digits={max(digits - 1, 0)}), or print the comparison the claim needs."
        )
    return text


def _fixed(number: float, digits: int) -> str:
    text = f"{number:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text  # never "-0.000"


"""FP8: the two formats, which tensors take which, and scaling by amax (per tensor, per row, delayed).

e4m3 (4 exponent bits, 3 mantissa bits; `torch.float8_e4m3fn`, no inf, max 448) keeps more
precision; e5m2 (5 and 2; `torch.float8_e5m2`, max 57344) keeps more range. Weights and
activations go in e4m3, gradients, whose values span more orders of magnitude, in e5m2 (the
"hybrid" format of Micikevicius et al., 2022, "FP8 Formats for Deep Learning",
arXiv:2209.05433, Sec. 4).

Either range is too small for raw values, so a tensor is multiplied by a scale before the cast,
`scale = fp8_max / amax` with `amax = max |x|`, which maps its largest value to the format's
largest, and divided by it after. One scale per tensor ("tensorwise") lets one outlier push
every other value towards zero; one per row ("rowwise", amax over the last dimension, one scale
for each token's row of an activation) confines the damage to the outlier's row.

*Current* scaling takes amax from the tensor being cast; *delayed* scaling (NVIDIA's
Transformer Engine) from a history of previous steps' amax, so it needs no pass over the
tensor before the cast, and overflows (here: saturates) when a value jumps above the history.

Introduced in notebooks/17-compile-and-low-precision.ipynb.
"""

from __future__ import annotations

from collections import deque

import torch

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
# Which format each tensor of a linear layer takes (Micikevicius et al., 2022; torchao's Float8Linear)
FORMAT_FOR_ROLE = {"weight": E4M3, "activation": E4M3, "gradient": E5M2}
EPS = 1e-12   # amax floor: an all-zero tensor gets a finite scale


def fp8_max(dtype: torch.dtype) -> float:
    """The largest finite value of an FP8 format: 448 for e4m3, 57344 for e5m2.

    Introduced in notebooks/17-compile-and-low-precision.ipynb.
    """
    return float(torch.finfo(dtype).max)


def amax(x: torch.Tensor, rowwise: bool = False) -> torch.Tensor:
    """max |x|: one value for the tensor (shape ()), or one per row, amax over the last dim (shape (..., 1)).

    Introduced in notebooks/17-compile-and-low-precision.ipynb.
    """
    if rowwise:
        return x.abs().amax(dim=-1, keepdim=True)   # (rows, cols) -> (rows, 1): each row's own largest value
    return x.abs().amax()


def scale_for(amax_value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The factor that maps `amax_value` onto the format's largest value: fp8_max / amax.

    Introduced in notebooks/17-compile-and-low-precision.ipynb.
    """
    return fp8_max(dtype) / amax_value.float().clamp(min=EPS)


def quantize(x: torch.Tensor, dtype: torch.dtype, scale: torch.Tensor) -> torch.Tensor:
    """x * scale cast to `dtype`, values beyond the format's range clamped to it (no inf, no nan).

    Introduced in notebooks/17-compile-and-low-precision.ipynb.
    """
    limit = fp8_max(dtype)
    return (x.float() * scale).clamp(-limit, limit).to(dtype)


def dequantize(x_fp8: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Back to float32: x_fp8 / scale.

    Introduced in notebooks/17-compile-and-low-precision.ipynb.
    """
    return x_fp8.float() / scale


def to_fp8(x: torch.Tensor, role: str, rowwise: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Cast a weight, activation or gradient to its FP8 format with current scaling; returns (x_fp8, scale).

    Example:
        >>> x_fp8, scale = to_fp8(torch.tensor([[1.0, -2.0]]), "activation")
        >>> x_fp8.dtype, scale.item()
        (torch.float8_e4m3fn, 224.0)

    Introduced in notebooks/17-compile-and-low-precision.ipynb.
    """
    if role not in FORMAT_FOR_ROLE:
        raise ValueError(f"role must be one of {sorted(FORMAT_FOR_ROLE)}, not {role!r}")
    dtype = FORMAT_FOR_ROLE[role]
    scale = scale_for(amax(x, rowwise), dtype)
    return quantize(x, dtype, scale), scale


def relative_error(x: torch.Tensor, approx: torch.Tensor) -> float:
    """‖x - approx‖ / ‖x‖ (Frobenius).

    Introduced in notebooks/17-compile-and-low-precision.ipynb.
    """
    return float((x - approx).norm() / x.norm())


class DelayedScaling:
    """Scales from the amax of the previous `history` steps (Transformer Engine's delayed scaling).

    `scale()` is known before the tensor is: the cast needs no pass over it first. `record(x)`
    adds this step's amax afterwards. Until the first record the scale is 1.

    Example:
        >>> delayed = DelayedScaling(E4M3, history=4)
        >>> delayed.record(torch.tensor([2.0])); delayed.scale().item()
        224.0

    Introduced in notebooks/17-compile-and-low-precision.ipynb.
    """

    def __init__(self, dtype: torch.dtype, history: int = 16):
        self.dtype = dtype
        self.amax_history: deque = deque(maxlen=history)

    def scale(self) -> torch.Tensor:
        if not self.amax_history:
            return torch.tensor(1.0)
        return scale_for(torch.stack(list(self.amax_history)).max(), self.dtype)

    def record(self, x: torch.Tensor) -> None:
        self.amax_history.append(amax(x).float())

"""The floor convention of a declared eps: o = N/max(D, eps) instead of N/(D + eps).

A denominator clamped at eps (``D.clamp(min=eps)``, as some linear-attention code writes it)
divides by max(D, eps). The max is exact in floating point (it returns one of its arguments), so
with D_hat the computed kernel sum, |max(D_hat, eps) - max(D, eps)| <= |D_hat - D|: the floor
keeps D10's bound on the denominator's error (no rounding of an addition, unlike D + eps) and
changes only the denominator's value, which the output bound divides by
(``derivations.rounding.kernel_attention_output_bound`` with the denominator max(D, eps)).

:func:`floored` turns the mpmath oracle's eps-free result into the floor convention's;
:func:`floor_low` is the error model's lower bound on max(D, eps).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def floored(result: Any, eps: float) -> tuple[np.ndarray, np.ndarray, Any]:
    """The exact output and weights of N/max(D, eps) from the oracle result with eps = 0.

    Args:
        result: an ``OracleResult`` (``verify.exact.oracle``) of the ``sum`` denominator with
            eps = 0: its ``numerator`` N (B, H, T, d_v) and ``denominator`` D (B, H, T) are
            exact (mpf), whatever the sign of D.
        eps: the floor, > 0 (converted exactly).

    Returns:
        (exact, weights, eps): N/max(D, eps) (B, H, T, d_v) object (0 on rows with no visible
        key), kappa_ts/max(D_t, eps) (B, H, T, S) object (0 where hidden) and eps as mpf; the
        oracle (``verify.exact.oracle.reference``) puts them in its result.

    Raises:
        ValueError: eps not > 0 and finite, or a denominator mode other than ``sum``.
    """
    import math

    import mpmath

    if not (isinstance(eps, (int, float)) and eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps: the floor max(D, eps) needs a finite eps > 0, got {eps!r}")
    if result.denominator_mode != "sum":
        raise ValueError(
            "eps_mode: the floor max(D, eps) is defined for the sum denominator, got "
            f"{result.denominator_mode!r}"
        )
    out = np.empty(result.exact.shape, dtype=object)
    weights = np.empty(result.weights.shape, dtype=object)
    with mpmath.workdps(result.dps):
        e = mpmath.mpf(float(eps))
        for idx in np.ndindex(result.denominator.shape):
            empty = result.count[idx] == 0
            div = max(result.denominator[idx], e)
            for j in range(out.shape[-1]):
                out[idx + (j,)] = mpmath.mpf(0) if empty else result.numerator[idx + (j,)] / div
            for s in range(weights.shape[-1]):
                kv = result.kernel_values[idx + (s,)]
                weights[idx + (s,)] = kv / div if result.visible[idx + (s,)] else mpmath.mpf(0)
    return out, weights, e


def floor_low(signed_sum: np.ndarray, B: np.ndarray, eps: float, gamma: float) -> np.ndarray:
    """A lower bound on max(D, eps) from the float64 kernel sum ``signed_sum`` = fl(sum_s w_s)
    (D >= signed_sum - gamma B with B >= sum_s |w_s| and gamma the float64 gamma_S of the sum,
    Higham eq. 3.5): max(signed_sum - gamma B, eps), elementwise."""
    with np.errstate(invalid="ignore"):
        return np.maximum(signed_sum - gamma * B, eps)

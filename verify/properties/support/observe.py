"""Turning computed values into observations: float64 views of tensors, elementwise
differences, the worst element against its bound, exact (mpmath) differences and the rounding
of exact values to floats. A check finding no finite bound raises ``NoStatement`` (re-exported
from ``verify.spec.results``): a decision on computed floats rejects no draw."""

from __future__ import annotations

import math

import numpy as np

from verify.spec.results import NoStatement, NotApplicable, Observation, VariantError

#: the unit roundoff of float64
U64 = 2.0**-53
#: precision digits of the mpmath evaluations of the catalogue (D10: >= 50)
DPS = 50
#: slack of a float64 evaluation of a closed-form export (a few exp/log/division roundings)
EXPORT_ROUNDINGS = 8


def np64(x) -> np.ndarray:
    """A tensor (or an array) as a float64 numpy array on the CPU."""
    import torch

    if isinstance(x, np.ndarray):
        return x.astype(np.float64, copy=False)
    return x.detach().to("cpu", torch.float64).numpy()


def diff(a, b) -> np.ndarray:
    """|a - b| elementwise in float64 (NaN where either is NaN; inf - inf is NaN)."""
    with np.errstate(invalid="ignore"):
        return np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))


def ratios(err, bound) -> np.ndarray:
    """err / bound elementwise; a zero bound gives 0 for a zero error and inf otherwise."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(bound > 0, err / bound, np.where(err == 0, 0.0, np.inf))


def _stated_ratios(err, bound, silent) -> np.ndarray:
    """:func:`ratios` with NaN errors ranked inf and elements without a finite bound (``silent``)
    ranked below every stated one (-1: a NaN there must not be picked)."""
    ratio = np.where(np.isnan(err), np.inf, ratios(err, bound))
    return np.where(silent, -1.0, ratio)


def worst_index(ratio) -> tuple[int, ...]:
    """The index of the largest ratio (the first one on ties)."""
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), np.shape(ratio)))


def array_observation(err, bound, *, what: str, kind: str = "derived") -> Observation:
    """The worst element of ``err`` against ``bound`` (elementwise, float64 arrays).

    Elements with an infinite bound carry no statement (a denominator that may vanish); a NaN
    error where the bound is finite fails; a zero bound requires a zero error.

    Raises:
        NotApplicable: no element (an empty array).
        NoStatement: no element has a finite bound (decided by the computed bound).
    """
    err = np.asarray(err, dtype=np.float64)
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), err.shape)
    silent = np.isinf(bound)
    if err.size == 0:
        raise NotApplicable("no element to compare")
    if silent.all():
        raise NoStatement("no element has a finite bound (a denominator may vanish)")
    idx = worst_index(_stated_ratios(err, bound, silent))
    where = str(idx)
    obs, bnd = float(err[idx]), float(bound[idx])
    detail = f"{what}: worst |difference| {obs:.3e} vs bound {bnd:.3e} at {where}"
    if silent.any():
        detail += f"; {int(silent.sum())} of {silent.size} elements without a finite bound"
    return Observation(obs, bnd, kind, where, detail)


def elementwise(diff: np.ndarray, bound: np.ndarray, what: str, detail: str = "") -> Observation:
    """Worst element of diff <= bound (infinite bounds carry no statement), with the detail
    ``what: observed vs bound at index; detail``.

    Raises:
        NoStatement: no element has a finite bound (decided by the computed bound).
    """
    silent = ~np.isfinite(bound)
    ratio = _stated_ratios(diff, bound, silent)
    if silent.all():
        raise NoStatement("no element has a finite bound")
    idx = worst_index(ratio)
    where = str(idx)
    return Observation(
        float(diff[idx]),
        float(bound[idx]),
        "derived",
        where=where,
        detail=f"{what}: {float(diff[idx]):.3e} vs bound {float(bound[idx]):.3e} at {where}"
        + (f"; {detail}" if detail else ""),
    )


def worst(observations) -> Observation:
    """The observation with the largest ratio (the first one on ties) of a list, or of a check's
    result (one observation or a list)."""
    if isinstance(observations, Observation):
        return observations
    return max(observations, key=lambda o: o.ratio)


def finite_rows(out, rows, bound, what: str) -> None:
    """NaN/inf in the rows that carry a statement is a variant failure."""
    import torch

    o = out[:, :, rows]
    stated = torch.from_numpy(np.isfinite(bound)).to(o.device)
    bad = (~torch.isfinite(o)) & stated
    if bool(bad.any()):
        raise VariantError(f"{what}: output has NaN/inf at index {bad.nonzero()[0].tolist()}")


def certified_change(measured: float, exact: float, rounding: float, what: str) -> Observation:
    """Evidence that two computations differ: passes iff ``measured >= exact - rounding``.

    ``exact`` is the exact difference (> 2 ``rounding`` by the caller's precondition) and
    ``rounding`` the sum of the two computations' bounds, so a pass certifies
    ``measured > rounding``: the difference is not a rounding artefact. A computation that does
    not change (an invariant impostor) has measured ~ 0 and fails with observed ~ exact.
    """
    return Observation(
        observed=max(exact - measured, 0.0),
        bound=rounding,
        kind="derived",
        detail=f"{what}: measured change {measured:.3e}, exact {exact:.3e}, rounding bound "
        f"{rounding:.3e} (pass iff measured >= exact - bound)",
    )


def mp_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| elementwise for object arrays of mpf (rounded once to float64)."""
    import mpmath

    with mpmath.workdps(DPS):
        return np.vectorize(lambda x, y: float(abs(x - y)), otypes=[float])(a, b)


def float_up(x) -> float:
    """The smallest float >= the mpf ``x``."""
    import mpmath

    f = float(x)
    return math.nextafter(f, math.inf) if mpmath.mpf(f) < x else f


def float_down(x) -> float:
    """The largest float <= the mpf ``x``."""
    import mpmath

    f = float(x)
    return math.nextafter(f, -math.inf) if mpmath.mpf(f) > x else f

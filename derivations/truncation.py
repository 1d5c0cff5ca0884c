"""D4. Truncation error and positivity of the Taylor kernel kappa_N.

kappa_N(x) = sum_{n<=N} x^n/n!. Results derived in ``derive()`` (its claims live in
``derivations.truncation_claims``, its checks of the exports in ``truncation_checks``):
- Lagrange remainder |e^x - kappa_N(x)| <= e^{max(x,0)} |x|^{N+1}/(N+1)!.
- Relative error g_N(x) = 1 - kappa_N(x) e^{-x}: g_N' = x^N e^{-x}/N!, g_N(0) = 0, so |g_N| grows
  with |x| on each side of 0 and delta_N(r) = sup_{|x|<=r} |g_N(x)| = max(|g_N(-r)|, |g_N(r)|).
- Output perturbation: if every weight has relative error <= delta < 1, the normalized weights
  move by sum_s |w^_s - w_s| <= 2 delta/(1 + sqrt(1 - delta^2)) (the exact supremum; below
  2 delta/(1-delta)), so ||o^_t - o_t||_inf <= that factor times max_s ||v_s||_inf.
- Even kappa_2m has no real root; odd kappa_2m+1 has exactly one, and it is negative.

Numeric exports (plain Python: fractions + mpmath, no sympy): ``kappa``, ``remainder_bound``,
``relative_error``, ``delta``, ``output_error_bound``, ``informative_radius``,
``first_order_below``, ``dominant_order``, ``real_root_count``.

Number types: ``int``/``float``/``Fraction`` arguments give ``float`` results (``kappa`` of a
``Fraction`` is the exact ``Fraction``); an ``mpmath.mpf`` argument gives an ``mpf`` accurate to
the current ``mpmath.mp.prec``. Floats are rounded from exact or >= 20-guard-bit values, so they
are within 2 ulp of the true value (1 ulp for ``kappa``: exact rational, correctly rounded).
"""

from __future__ import annotations

import math
from fractions import Fraction

from derivations._validate import check_exact_or_mpf, check_order

#: guard bits above the target precision for intermediate mpmath values
_GUARD = 20


# -- validation and number types ------------------------------------------------------------------
def _positive_level(name: str, x: object) -> Fraction:
    """A relative error level > 0 (finite real, or mpf) as an exact Fraction."""
    xv, _ = check_exact_or_mpf(name, x)
    if xv <= 0:
        raise ValueError(f"{name}: expected a positive relative error level, got {x!r}")
    return xv


def _target_prec(kind: str) -> int:
    import mpmath

    return mpmath.mp.prec if kind == "mpf" else 53


def _out(value, kind: str):
    """Round an mpf computed with guard bits to the caller's number type."""
    import mpmath

    if kind == "mpf":
        return +value  # rounds to the current context precision
    return float(value) if mpmath.isfinite(value) else math.inf


def _to_mpf(v: Fraction, prec: int):
    """Correctly rounded mpf of an exact rational at ``prec`` bits."""
    import mpmath
    from mpmath import libmp

    return mpmath.mpf(libmp.from_rational(v.numerator, v.denominator, prec, libmp.round_nearest))


# -- kappa_N ------------------------------------------------------------------------------------
def _kappa_exact(order: int, x: Fraction) -> Fraction:
    acc = Fraction(1)
    for n in range(order, 0, -1):  # Horner: 1 + x/1 (1 + x/2 (1 + ...))
        acc = 1 + x * acc / n
    return acc


def kappa(order: int, x):
    """The Taylor kernel kappa_N(x) = sum_{n<=N} x^n / n! (D1, D4), N = ``order``.

    Args:
        order: N >= 0 (int).
        x: score, a finite real (int, float, Fraction or mpmath.mpf).
    Returns:
        ``Fraction`` (exact) for a ``Fraction`` x; ``mpf`` at the current precision for an
        ``mpf`` x; otherwise the correctly rounded ``float`` of the exact value.
    Raises:
        TypeError, ValueError: ``order`` not a non-negative int, or ``x`` not a finite real.
    """
    check_order("order", order)
    xv, kind = check_exact_or_mpf("x", x)
    val = _kappa_exact(order, xv)
    if kind == "fraction":
        return val
    if kind == "mpf":
        return _to_mpf(val, _target_prec(kind))
    try:
        return val.numerator / val.denominator  # int true division: correctly rounded
    except OverflowError:  # |kappa_N(x)| beyond the float range
        return math.inf if val > 0 else -math.inf


def remainder_bound(order: int, x):
    """Lagrange bound e^{max(x,0)} |x|^{N+1} / (N+1)! on |e^x - kappa_N(x)| (D4).

    Also the bound on the whole interval |x| <= r when called with x = r >= 0. Returns float
    (``inf`` on overflow) or mpf (for an mpf ``x``). Raises as ``kappa``.
    """
    import mpmath

    check_order("order", order)
    xv, kind = check_exact_or_mpf("x", x)
    prec = _target_prec(kind) + _GUARD
    with mpmath.workprec(prec):
        ax = _to_mpf(abs(xv), prec)
        val = (
            mpmath.exp(_to_mpf(max(xv, Fraction(0)), prec))
            * ax ** (order + 1)
            / mpmath.factorial(order + 1)
        )
    return _out(val, kind)


def _bits(v: Fraction) -> int:
    """An integer >= log2(|v| + 1) (no float conversion, so no overflow)."""
    v = abs(v)
    return max(0, v.numerator.bit_length() - v.denominator.bit_length() + 1) + 1


def _g_mp(order: int, x: Fraction, target: int):
    """g_N(x) = 1 - kappa_N(x) e^{-x} as an mpf with >= ``target`` + 8 correct bits.

    Error model at working precision W: kappa_N(x) is exact (rounded once), x and e^{-x}
    are rounded, so |error| <~ (4 + |x|) (1 + |g|) 2^-W: the relative error is below
    2^-(target+8) once W >= target + 8 + log2(4 + |x|) + log2((1 + |g|)/|g|). W starts 20 bits
    above that for |g| ~ 1 and is raised when the computed g shows more cancellation.
    """
    import mpmath

    if x == 0:
        return mpmath.mpf(0)
    if abs(x) <= Fraction(1, 4):
        return _g_tail(order, x, target)
    k_exact = _kappa_exact(order, x)
    base = target + 8 + _bits(x) + 2
    work = base + _GUARD
    for _ in range(64):
        with mpmath.workprec(work):
            g = 1 - _to_mpf(k_exact, work) * mpmath.exp(-_to_mpf(x, work))
            if g != 0:
                lost = int(mpmath.ceil(mpmath.log(1 + abs(g), 2) - mpmath.log(abs(g), 2)))
        if g != 0 and work >= base + lost:
            return g
        work = base + (lost if g != 0 else 2 * work) + _GUARD
    raise ArithmeticError(
        f"relative_error: no convergence for order={order}, x={x}"
    )  # pragma: no cover


def _g_tail(order: int, x: Fraction, target: int):
    """g_N(x) = e^{-x} sum_{n>N} x^n/n! for |x| <= 1/4, without cancellation.

    The tail's terms shrink by |x|/(n+1) <= 1/8 each, so summing until a term falls below
    2^-(target+16) of the first term leaves a relative error below 2^-(target+15) (geometric
    tail; for x < 0 the alternating tail is even smaller). Used where 1 - kappa_N e^{-x} would
    cancel catastrophically (|g| ~ |x|^{N+1}/(N+1)! can be far below the working precision).
    """
    import mpmath

    with mpmath.workprec(target + _GUARD + 16):
        xm = _to_mpf(x, target + _GUARD + 16)
        term = xm ** (order + 1) / mpmath.factorial(order + 1)
        first = abs(term)
        total = mpmath.mpf(0)
        n = order + 1
        while abs(term) > first * mpmath.ldexp(1, -(target + 16)):
            total += term
            n += 1
            term = term * xm / n
        return mpmath.exp(-xm) * total


def relative_error(order: int, x):
    """Signed relative error g_N(x) = 1 - kappa_N(x) e^{-x} of kappa_N against exp (D4).

    kappa_N(x) = e^x (1 - g_N(x)). Accurate to the output precision even where g_N is tiny
    (adaptive working precision). Returns float or mpf (for an mpf ``x``). Raises as ``kappa``.
    """
    import mpmath

    check_order("order", order)
    xv, kind = check_exact_or_mpf("x", x)
    target = _target_prec(kind)
    with mpmath.workprec(target + _GUARD):
        val = _g_mp(order, xv, target)
    return _out(val, kind)


def _delta_mp(order: int, r: Fraction, target: int):
    import mpmath

    with mpmath.workprec(target + _GUARD):
        return max(abs(_g_mp(order, -r, target)), abs(_g_mp(order, r, target)))


def delta(order: int, r):
    """Worst relative weight error on |x| <= r: delta_N(r) = max(|g_N(-r)|, |g_N(r)|) (D4).

    Closed form (g_N' = x^N e^{-x}/N!, g_N(0) = 0: |g_N| grows with |x| on each side); increasing
    in r, delta_N(0) = 0. Returns float or mpf.

    Raises:
        TypeError, ValueError: bad ``order``; ``r`` not a finite real >= 0.
    """
    check_order("order", order)
    rv, kind = check_exact_or_mpf("r", r)
    if rv < 0:
        raise ValueError(f"r: expected a score radius >= 0, got {r!r}")
    return _out(_delta_mp(order, rv, _target_prec(kind)), kind)


def output_error_bound(delta):
    """Factor B(delta) with ||o^_t - o_t||_inf <= B(delta) max_s ||v_s||_inf (D4).

    If every kernel weight has relative error <= delta < 1, the normalized weights satisfy
    sum_s |w^_s - w_s| <= B(delta) = 2 delta / (1 + sqrt(1 - delta^2)), the exact supremum (derived
    in ``derive()``; tighter than 2 delta/(1 - delta)). B < 2 (the trivial bound) for every
    delta < 1, B <= 1 for delta <= 4/5, B <= 1/2 for delta <= 8/17.

    Args:
        delta: relative weight error bound, a real in [0, 1) (e.g. ``delta(order, r)``).
    Returns:
        float, or mpf for an mpf ``delta``.
    Raises:
        TypeError: not a real number.
        ValueError: delta < 0, or delta >= 1 (the weights may vanish or change sign: no bound).
    """
    import mpmath

    dv, kind = check_exact_or_mpf("delta", delta)
    if dv < 0:
        raise ValueError(f"delta: expected a relative error bound in [0, 1), got {delta!r}")
    if dv >= 1:
        raise ValueError(
            f"delta: expected < 1 (weights with relative error >= 1 can vanish or change sign, "
            f"so no output bound follows), got {delta!r}"
        )
    prec = _target_prec(kind) + _GUARD
    with mpmath.workprec(prec):
        d = _to_mpf(dv, prec)
        val = 2 * d / (1 + mpmath.sqrt(1 - d * d))
    return _out(val, kind)


def informative_radius(order: int, target: float = 0.5) -> float:
    """Largest float r with delta_N(r) < ``target`` (bisection on the increasing closed form).

    With the default target 1/2 the weight bound is informative (usefully below 1/2); use
    target=1 for the range where ``output_error_bound`` applies at all.

    Raises:
        TypeError, ValueError: bad ``order``; ``target`` not a finite real > 0.
    """
    check_order("order", order)
    tv = _positive_level("target", target)

    def below(r: float) -> bool:
        return _delta_mp(order, Fraction(r), 80) < _to_mpf(tv, 120)

    lo, hi = 0.0, 1.0
    while below(hi):
        lo, hi = hi, 2 * hi
    while True:  # invariant: delta(lo) < target <= delta(hi)
        mid = lo + (hi - lo) / 2
        if mid in (lo, hi):
            return lo
        if below(mid):
            lo = mid
        else:
            hi = mid


def first_order_below(x, level: float = 1.0, *, max_order: int = 100_000) -> int:
    """Smallest N with |g_N(x)| < ``level``: the order where kappa_N first tracks exp at x.

    D4 checks 12, 26, 54 for x = -4, -8, -16 at level 1. For x >= 0, g_N(x) in [0, 1), so
    level 1 gives N = 0.

    Raises:
        TypeError, ValueError: ``x`` not a finite real; ``level`` not a finite real > 0;
        ``max_order`` reached without falling below ``level``.
    """
    import mpmath

    xv, _ = check_exact_or_mpf("x", x)
    lv = _positive_level("level", level)
    check_order("max_order", max_order)
    # absolute error of g = 1 - K e^{-x} is ~ (4 + |x|) (1 + level) 2^-W near |g| = level
    work = 64 + _bits((1 + lv) / lv) + _bits(xv) + 2
    level_mp = _to_mpf(lv, work + 64)
    with mpmath.workprec(work):
        e = mpmath.exp(-_to_mpf(xv, work))
        k_exact, term = Fraction(0), Fraction(1)
        for n in range(max_order + 1):
            if n:
                term = term * xv / n
            k_exact += term
            if abs(1 - _to_mpf(k_exact, work) * e) < level_mp:
                return n
    raise ValueError(f"max_order: |g_N({x!r})| did not fall below {level!r} for N <= {max_order}")


def dominant_order(x) -> int:
    """Order n of the largest term |x|^n/n! of the exp series at x: floor(|x|) (D4).

    The ratio of consecutive terms is |x|/n, so the terms grow while n < |x|; when |x| >= 1 is an
    integer, orders |x| - 1 and |x| tie (this returns the larger).

    Raises:
        TypeError, ValueError: ``x`` not a finite real.
    """
    xv, _ = check_exact_or_mpf("x", x)
    return math.floor(abs(xv))


def real_root_count(order: int) -> int:
    """Number of real roots of kappa_N: 0 for even N, 1 (negative, simple) for odd N (D4).

    Raises:
        TypeError, ValueError: ``order`` not a non-negative int.
    """
    return check_order("order", order) % 2


# ---------------------------------------------------------------------------------------------
# What the D4 record (``derivations.truncation_record``) checks against sympy
# ---------------------------------------------------------------------------------------------
EXPORTS = (
    "kappa",
    "remainder_bound",
    "relative_error",
    "delta",
    "output_error_bound",
    "informative_radius",
    "first_order_below",
    "dominant_order",
    "real_root_count",
)

#: the stated values of D4 (decimals as stated), recomputed by the record with sympy:
#: delta_N(r) per (N, r), and the first N with |g_N(x)| < 1 per x
STATED_DELTAS = {(2, 1): "0.36", (4, 2): "1.46", (6, 2): "0.15", (6, 3): "6.3"}
STATED_FIRST_BELOW_ONE = {-4: 12, -8: 26, -16: 54}

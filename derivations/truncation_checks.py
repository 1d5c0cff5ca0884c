"""D4: the numeric exports of ``derivations.truncation`` against the sympy references.

Each ``check_*`` function appends one checked claim to the D4 record (``derive`` calls them after
the derivation proper); ``f`` maps export names to the (possibly overridden) callables under
test. ``tables`` adds the report's tables of exported numbers.
"""

from __future__ import annotations

import math
from fractions import Fraction

from derivations.truncation import (
    delta,
    dominant_order,
    first_order_below,
    informative_radius,
    output_error_bound,
)
from derivations.truncation_claims import REF_DIGITS, b_star_expr, g_num, kappa_series, num

#: relative tolerance of float exports against the references: 2^-51 (<= 2 ulp of 2^-52 each)
REL = 2.0**-51


def _close(a, b, rel):
    """|a - b| <= rel |b| (b the high-precision reference); used for float/mpf exports."""
    return abs(float(a) - float(b)) <= rel * abs(float(b)) if b != 0 else a == 0


def check_kappa(rec, f) -> None:
    """``kappa`` against sympy's kappa_N: Fraction exact, float correctly rounded, mpf."""
    import mpmath
    import sympy

    rec.step(
        "The numeric exports (plain Python, fractions + mpmath) must agree with the sympy "
        r"expressions above on instances: exactly for exact results, within $2^{-51}$ relative "
        r"for floats (rounded from values with at least 20 guard bits: at most 2 ulp), within "
        r"$10^{-38}$ for mpf at 50 digits."
    )
    xs = [
        sympy.Integer(-3),
        sympy.Rational(-1, 2),
        sympy.Integer(0),
        sympy.Rational(5, 4),
        sympy.Rational(7, 2),
    ]

    def to_frac(v):
        return Fraction(int(v.p), int(v.q))

    def kappa_ok():
        for order in range(9):
            for xv in xs:
                exact = kappa_series(order)(xv)
                if f["kappa"](order, to_frac(xv)) != to_frac(exact):
                    return False
                if f["kappa"](order, float(xv)) != float(exact):
                    return False
                with mpmath.workdps(50):
                    got = f["kappa"](order, mpmath.mpf(float(xv)))
                    if abs(got - mpmath.mpf(str(num(exact, 70)))) > 1e-45 * max(1, abs(got)):
                        return False
        return True

    rec.verify(
        "kappa == sympy kappa_N",
        kappa_ok,
        "N = 0..8, x in {-3, -1/2, 0, 5/4, 7/2}: Fraction exact, float correctly "
        "rounded, mpf at 50 digits",
    )


def check_remainder_bound(rec, f) -> None:
    """``remainder_bound`` equals the Lagrange bound and bounds the true error."""
    import sympy

    def remainder_ok():
        for order in (0, 1, 3, 6):
            for xv in (
                sympy.Integer(-3),
                sympy.Rational(-1, 2),
                sympy.Rational(1, 2),
                sympy.Integer(2),
                sympy.Integer(5),
            ):
                ref = num(
                    sympy.exp(sympy.Max(xv, 0))
                    * abs(xv) ** (order + 1)
                    / sympy.factorial(order + 1)
                )
                got = f["remainder_bound"](order, float(xv))
                err = abs(sympy.exp(xv).evalf(REF_DIGITS) - kappa_series(order)(xv))
                if not (_close(got, ref, REL) and err < got):
                    return False
        return True

    rec.verify(
        "remainder_bound == e^{max(x,0)}|x|^{N+1}/(N+1)! and bounds |e^x - kappa_N|",
        remainder_ok,
        "N in {0, 1, 3, 6}, x in {-3, -1/2, 1/2, 2, 5}",
    )


def check_relative_error(rec, f) -> None:
    """``relative_error`` against 1 - kappa_N(x) e^{-x}, including tiny (cancelling) g."""
    import mpmath
    import sympy

    def relative_ok():
        for order in (0, 1, 2, 5, 10):
            for xv in (
                sympy.Integer(-4),
                sympy.Integer(-1),
                sympy.Rational(-1, 1000),
                sympy.Rational(1, 1000),
                sympy.Integer(1),
                sympy.Integer(4),
            ):
                ref = g_num(order, xv)
                if not _close(f["relative_error"](order, float(xv)), ref, REL):
                    return False
        with mpmath.workdps(50):
            got = f["relative_error"](10, mpmath.mpf(1) / 1000)
            ref = mpmath.mpf(str(g_num(10, sympy.Rational(1, 1000))))
            return bool(abs(got - ref) <= 1e-45 * abs(ref))

    rec.verify(
        "relative_error == 1 - kappa_N(x) e^{-x}",
        relative_ok,
        "N in {0, 1, 2, 5, 10}, x in {-4, -1, -1e-3, 1e-3, 1, 4} (tiny g: "
        "cancellation); mpf at 50 digits for N = 10, x = 1e-3",
    )


def check_delta(rec, f) -> None:
    """``delta`` against the closed form max(|g_N(-r)|, |g_N(r)|)."""
    import sympy

    def delta_ok():
        for order in range(1, 7):
            for rv in (sympy.Rational(1, 2), sympy.Integer(1), sympy.Integer(2), sympy.Integer(3)):
                ref = max(abs(g_num(order, -rv)), abs(g_num(order, rv)))
                if not _close(f["delta"](order, float(rv)), ref, REL):
                    return False
        return f["delta"](3, 0.0) == 0

    rec.verify(
        "delta == max(|g_N(-r)|, |g_N(r)|)",
        delta_ok,
        "N = 1..6, r in {1/2, 1, 2, 3}; delta_N(0) = 0",
    )


def check_output_error_bound(rec, f) -> None:
    """``output_error_bound`` against B(delta); it rejects delta outside [0, 1)."""
    import sympy

    dl, b_star = b_star_expr()

    def bound_ok():
        for dv in (
            sympy.Rational(1, 10),
            sympy.Rational(1, 2),
            sympy.Rational(3, 5),
            sympy.Rational(4, 5),
            sympy.Rational(99, 100),
        ):
            if not _close(f["output_error_bound"](float(dv)), num(b_star.subs(dl, dv)), REL):
                return False
        if f["output_error_bound"](0.0) != 0:
            return False
        for bad in (1.0, 1.5, -0.1):
            try:
                f["output_error_bound"](bad)
            except ValueError:
                continue
            return False
        return True

    rec.verify(
        "output_error_bound == 2 delta/(1 + sqrt(1 - delta^2)); ValueError off [0, 1)",
        bound_ok,
        "delta in {0, 0.1, 0.5, 0.6, 0.8, 0.99}; 1, 1.5, -0.1 rejected",
    )


def check_informative_radius(rec, f) -> None:
    """``informative_radius`` is the largest float r with delta_N(r) < target."""
    import sympy

    def radius_ok():
        for order in (1, 2, 4, 6):
            for target in (sympy.Rational(1, 2), sympy.Integer(1)):
                r = f["informative_radius"](order, float(target))
                up = math.nextafter(r, math.inf)
                at = [
                    max(
                        abs(g_num(order, -sympy.Rational(z))),
                        abs(g_num(order, sympy.Rational(z))),
                    )
                    for z in (r, up)
                ]
                if not (at[0] < target <= at[1]):
                    return False
        return True

    rec.verify(
        "informative_radius = largest float r with delta_N(r) < target",
        radius_ok,
        "N in {1, 2, 4, 6}, target in {1/2, 1}: sympy delta at r and at the next float",
    )


def check_first_order_below(rec, f) -> None:
    """``first_order_below`` is the first N with |g_N(x)| < level."""
    import sympy

    def first_ok():
        for xv in (sympy.Integer(-4), sympy.Integer(-8), sympy.Rational(-5, 2), sympy.Integer(3)):
            for level in (sympy.Integer(1), sympy.Rational(1, 10)):
                ref = next(k for k in range(400) if abs(g_num(k, xv)) < level)
                if f["first_order_below"](float(xv), float(level)) != ref:
                    return False
        return True

    rec.verify(
        "first_order_below == first N with |g_N(x)| < level",
        first_ok,
        "x in {-4, -8, -5/2, 3}, level in {1, 1/10}",
    )


def check_dominant_order(rec, f) -> None:
    """``dominant_order`` is the argmax of the exact terms |x|^n/n!."""
    import sympy

    def dominant_ok():
        for xv in (
            sympy.Integer(0),
            sympy.Rational(1, 2),
            sympy.Integer(1),
            sympy.Rational(5, 2),
            sympy.Integer(3),
            sympy.Rational(36, 5),
            sympy.Integer(-4),
            sympy.Integer(-8),
            sympy.Rational(-77, 10),
        ):
            terms = [abs(xv) ** k / sympy.factorial(k) for k in range(int(3 * abs(xv)) + 5)]
            top = max(terms)
            argmax = [k for k, tv in enumerate(terms) if tv == top]
            floor = int(sympy.floor(abs(xv)))
            tie = abs(xv) >= 1 and abs(xv) == floor
            if argmax != ([floor - 1, floor] if tie else [floor]):
                return False
            if f["dominant_order"](float(xv)) != floor:
                return False
        return True

    rec.verify(
        "dominant_order == floor(|x|) (tie with floor(|x|) - 1 at integers)",
        dominant_ok,
        "x in {0, 1/2, 1, 5/2, 3, 36/5, -4, -8, -77/10}: argmax of exact terms",
    )


def check_real_root_count(rec, f) -> None:
    """``real_root_count`` against Sturm counts of sympy's kappa_N."""
    import sympy

    def roots_ok():
        x = sympy.Symbol("x", real=True)
        return all(
            f["real_root_count"](order) == sympy.Poly(kappa_series(order)(x), x).count_roots()
            for order in range(12)
        )

    rec.verify("real_root_count == number of real roots (Sturm)", roots_ok, "N = 0..11")


def tables(rec) -> None:
    """Tables of exported numbers for the report."""
    radii = (0.5, 1.0, 2.0, 3.0, 4.0)
    rec.tables["delta_N(r)"] = (
        ["N"] + [f"r = {r:g}" for r in radii],
        [
            [order] + [f"{delta(order, r):.3g}" for r in radii]
            for order in (0, 1, 2, 3, 4, 6, 8, 12)
        ],
    )
    rec.tables["informative_radius"] = (
        ["N", "r with delta_N < 1/2", "r with delta_N < 1"],
        [
            [
                order,
                f"{informative_radius(order, 0.5):.4f}",
                f"{informative_radius(order, 1.0):.4f}",
            ]
            for order in (1, 2, 3, 4, 6, 8, 12)
        ],
    )
    rec.tables["first_order_below_one"] = (
        ["x", "first N with |g_N(x)| < 1", "dominant order"],
        [
            [xv, first_order_below(float(xv)), dominant_order(float(xv))]
            for xv in (-1, -2, -4, -8, -16)
        ],
    )
    rec.tables["output_error_bound"] = (
        ["delta", "B(delta) = 2d/(1+sqrt(1-d^2))", "2d/(1-d)"],
        [
            [dv, f"{output_error_bound(dv):.4f}", f"{2 * dv / (1 - dv):.4f}"]
            for dv in (0.1, 0.2, 0.36, 0.5, 0.8, 0.9)
        ],
    )

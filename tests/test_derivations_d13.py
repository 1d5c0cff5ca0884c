"""D13 (derivations.softcap): the record holds, wrong statements fail, and the exports follow
their formulas (smallest uniform orders checked against D4's delta directly; the Chebyshev
degrees against an independent mpmath interpolation)."""

from __future__ import annotations

import math

import mpmath
import pytest

from derivations import softcap as sc
from derivations import truncation as tr
from derivations._record import Status


@pytest.fixture(scope="module")
def record(derived):
    return derived("D13")


def _failed(rec):
    return [c.name for c in rec.claims if c.status is Status.FAILED]


def test_record_holds(record):
    assert record.id == "D13" and record.status is Status.VERIFIED and not _failed(record)
    for name in record.exports:
        assert hasattr(sc, name), name


def test_smallest_orders_in_the_tens_to_hundreds(record):
    rows = record.tables["smallest_order"][1]
    assert [r[0] for r in rows] == list(sc.CAPS)
    for cap, n1, d1, p1, n3, d3, p3 in rows:
        assert d1 < 1 <= p1 and d3 < 1e-3 <= p3
        assert 50 < n1 < n3 < 250
        assert tr.delta(n1 - 1, cap) >= 1 and tr.delta(n1, cap) < 1  # straight from D4


def test_wrong_cap_limit_fails():
    assert any("(-C, C)" in n for n in _failed(sc.derive(cap_bound=2)))


def test_wrong_smallest_order_fails():
    rec = sc.derive(
        smallest_uniform_order=lambda cap, level: sc.smallest_uniform_order(cap, level) - 1
    )
    assert any(n.startswith("smallest uniform orders") for n in _failed(rec))


def test_weight_range_holds_for_extreme_scores():
    import random

    rng = random.Random(0)
    cap, keys = 2.0, 5
    lo, hi = sc.weight_range(cap, keys)
    for _ in range(200):
        s = [sc.softcap(rng.uniform(-1e3, 1e3), cap) for _ in range(keys)]
        m = max(s)
        w = [math.exp(x - m) for x in s]
        tot = sum(w)
        # float tanh reaches +-1 exactly, so the open range closes; exp, a 5-term sum and a
        # division are <= 8 roundings of u = 2^-53 each
        u8 = 8 * 2.0**-53
        assert all(lo * (1 - u8) <= x / tot <= hi * (1 + u8) for x in w)
    # the range is attained in the limit: one score at +inf, the others at -inf
    s = [sc.softcap(1e6, cap)] + [sc.softcap(-1e6, cap)] * (keys - 1)
    w = [math.exp(x) for x in s]
    assert w[0] / sum(w) == pytest.approx(hi, rel=1e-12)


def test_softcap_and_radius():
    assert sc.softcap(0.5, 50) == pytest.approx(0.5, abs=0.5**3 / (3 * 50**2))
    assert abs(sc.softcap(1e9, 30)) < 30 + 1e-12
    assert sc.series_radius(2) == math.pi
    for bad in (0, -1, float("inf")):
        with pytest.raises(ValueError, match="cap"):
            sc.softcap(1.0, bad)
    with pytest.raises(ValueError, match="keys"):
        sc.weight_range(1.0, 0)


def test_weights_statement_needs_two_keys(record):
    """With one key the weight is exactly 1 = both ends: the open range holds only for S >= 2."""
    assert sc.weight_range(3.0, 1) == (1.0, 1.0)  # empty open interval: the weight 1 is not in it
    lo, hi = sc.weight_range(3.0, 2)
    assert lo < 0.5 < hi
    weights = record.statement["weights"].latex()
    assert r"S \ge 2" in weights
    claim = next(c for c in record.claims if c.name == sc.WEIGHTS)
    assert "S >= 2" in claim.name and claim.status is Status.PROVED


def test_radius_statement_and_poles(record):
    """The series converges inside pi C / 2 and diverges outside; nothing claimed on the circle.
    The nearest poles are proved (zeros of cosh only on the imaginary axis), not sampled."""
    radius = record.statement["radius"].latex()
    assert "only for" not in radius and "diverges" in radius and "C > 0" in radius
    poles = next(c for c in record.claims if c.name == sc.POLES)
    assert poles.status is Status.PROVED
    step = next(s for s in record.steps if "Taylor series of the capped kernel" in s.text)
    assert step.latex() != "0 = 0" and r"\cosh" in step.latex()


def test_no_parallel_only_claim(record):
    """The old statement "the capped forms are parallel only" is gone: the Taylor disc limits
    Taylor partial sums in x, not polynomials; Taylor-N of the *capped* score has no feature map
    at any N (a polynomial in tanh(x/C)), and the title says what the bound is about."""
    text = " ".join(
        [record.title] + [s.text for s in record.steps] + [c.name for c in record.claims]
    )
    assert "parallel only" not in text
    assert "not practical" not in text and "Taylor-RNN bound uniform" not in text
    assert "capped score (no feature map)" in record.title
    assert "polynomials in the raw score" in record.title
    statuses = {c.name: c.status for c in record.claims}
    assert statuses[sc.NOT_POLYNOMIAL] is Status.VERIFIED
    assert statuses[sc.ELLIPSE] is Status.PROVED
    assert statuses[sc.CHEBYSHEV] is Status.CITED
    assert statuses[sc.POLY_EXISTS] is Status.VERIFIED
    cheb = next(c for c in record.claims if c.name == sc.CHEBYSHEV)
    assert "Trefethen" in cheb.source and "Thm 8.2" in cheb.source
    assert r"a parallel form" in record.statement["uniform"].latex()


def test_parallel_only_statement_fails():
    """The wrong statement (no polynomial in x approximates beyond the Taylor disc) fails."""
    failed = _failed(sc.derive(parallel_only=True))
    assert failed == [sc.POLY_EXISTS]


def test_too_small_degree_fails():
    """A degree below the bound's is not what Thm 8.2 proves: the existence check fails."""
    rec = sc.derive(chebyshev_degree=lambda cap, r, level: sc.chebyshev_degree(cap, r, level) - 1)
    assert sc.POLY_EXISTS in _failed(rec)


def test_kappa_of_capped_score_is_no_polynomial():
    """Independently (mpmath): kappa_N(C tanh(x/C)) stays below kappa_N(C) on a wide range while
    its slope at 0 is 1, so it is no polynomial in x (a nonconstant polynomial is unbounded)."""
    cap = 3.0
    for order in (1, 2, 5):

        def f(x, n=order):
            y = cap * mpmath.tanh(x / cap)
            return sum(y**j / mpmath.factorial(j) for j in range(n + 1))

        top = sum(cap**j / math.factorial(j) for j in range(order + 1))
        assert all(abs(f(x)) <= top for x in (-1e6, -50, -3, 0, 3, 50, 1e6))  # tanh -> 1 in mp
        assert mpmath.diff(f, 0) == pytest.approx(1, rel=1e-12)


def test_chebyshev_degrees_against_mpmath(record):
    """Each tabulated degree: an independent mpmath Chebyshev interpolant (50 digits, barycentric)
    is within its row's bound on a 301-point grid, and the bound is below the level; a rho at or
    beyond the pole limit is rejected by the ellipse (tan beta blows up at beta = pi/2)."""
    rows = record.tables["polynomial_degree"][1]
    assert [(r[0], r[1]) for r in rows] == [(c, c * f) for c in sc.CAPS for f in sc.RANGE_FACTORS]
    with mpmath.workdps(50):
        for cap, rng, taylor, rho_star, deg, bound, observed, least, _ in rows[::4]:
            assert observed <= bound <= sc.APPROX_LEVEL and least <= deg
            assert (taylor == "yes") == (rng < math.pi * cap / 2)
            y0 = mpmath.pi * cap / (2 * rng)
            assert rho_star == pytest.approx(float(y0 + mpmath.sqrt(1 + y0**2)), abs=1e-4)

            def f(x, c=cap):
                return mpmath.exp(c * mpmath.tanh(x / c))

            nodes = [rng * mpmath.cos(j * mpmath.pi / deg) for j in range(deg + 1)]
            w = [(-1) ** j * (mpmath.mpf(1) / 2 if j in (0, deg) else 1) for j in range(deg + 1)]
            vals = [f(x) for x in nodes]
            top = f(mpmath.mpf(rng))
            worst = 0
            for i in range(301):
                x = -rng + mpmath.mpf(2 * rng) * i / 300
                if any(x == xj for xj in nodes):
                    continue
                c = [wj / (x - xj) for wj, xj in zip(w, nodes)]
                p = sum(cj * fj for cj, fj in zip(c, vals)) / sum(c)
                worst = max(worst, abs(p - f(x)) / top)
            assert worst <= bound
    # beta reaches pi/2 at rho*: the bound needs rho < rho*
    top = sc.bernstein_limit(20, 40)
    assert 40 * (top - 1 / top) / (2 * 20) == pytest.approx(math.pi / 2, rel=1e-12)
    with pytest.raises(ValueError, match="score_range"):
        sc.chebyshev_error_bound(20, 0, 5)
    with pytest.raises(ValueError, match="degree"):
        sc.chebyshev_error_bound(20, 40, -1)


def test_softcapping_credited(record):
    rec = record
    cite = next(c for c in rec.claims if c.name == sc.SOURCE)
    assert cite.status is Status.CITED and "Gemma 2" in cite.source
    assert "this project's" in cite.detail

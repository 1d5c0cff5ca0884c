"""D13 (derivations.softcap): the record holds, wrong statements fail, and the exports follow
their formulas (smallest uniform orders checked against D4's delta directly)."""

from __future__ import annotations

import math

import pytest

from derivations import softcap as sc
from derivations import truncation as tr
from derivations._record import Status


@pytest.fixture(scope="module")
def record():
    return sc.derive()


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
    step = next(s for s in record.steps if "No feature map" in s.text)
    assert step.latex() != "0 = 0" and r"\cosh" in step.latex()


def test_softcapping_credited():
    rec = sc.derive()
    cite = next(c for c in rec.claims if c.name == sc.SOURCE)
    assert cite.status is Status.CITED and "Gemma 2" in cite.source
    assert "this project's" in cite.detail

"""D14 (derivations.sigmoid): the record holds, wrong statements fail, the exports follow their
formulas (checked against independent float64/mpmath evaluations)."""

from __future__ import annotations

import math

import mpmath
import pytest

from derivations import sigmoid as sg
from derivations._record import Status


def _failed(rec):
    return [c.name for c in rec.claims if c.status is Status.FAILED]


def test_record_holds(derived):
    rec = derived("D14")
    assert rec.id == "D14" and rec.status is Status.VERIFIED and not _failed(rec)
    for name in rec.exports:
        assert hasattr(sg, name), name


def test_dropped_alternation_fails():
    assert any(n.startswith("sigma(x) = sum_{j>=1}") for n in _failed(sg.derive(sign=-1)))


def test_wrong_bias_sign_fails():
    assert any("b = -ln S" in n for n in _failed(sg.derive(bias_sign=-1)))


def test_sigmoid_matches_mpmath():
    for x in (-800.0, -30.0, -1.5, 0.0, 2.0, 40.0, 800.0):
        ref = 1 / (1 + mpmath.exp(-mpmath.mpf(x)))
        assert abs(sg.sigmoid(x) - float(ref)) <= 2 * math.ulp(float(ref))  # exp + divide


def test_row_sum_bounds_contain_random_rows():
    import random

    rng = random.Random(1)
    for _ in range(100):
        r, b, keys = rng.uniform(0, 6), rng.uniform(-4, 2), rng.randint(1, 9)
        lo, hi = sg.row_sum_bounds(r, b, keys)
        row = sum(sg.sigmoid(rng.uniform(-r, r) + b) for _ in range(keys))
        assert lo <= row <= hi
    assert sg.row_sum_bounds(0.0, -math.log(4), 4)[1] == pytest.approx(4 / 5, rel=1e-15)


def test_series_terms_needed_rejects_bad_input():
    with pytest.raises(ValueError, match="x"):
        sg.series_terms_needed(0.5, 1e-3)
    with pytest.raises(ValueError, match="level"):
        sg.series_terms_needed(-1.0, 2.0)
    with pytest.raises(ValueError, match="radius"):
        sg.row_sum_bounds(-1.0, 0.0, 3)


def test_poles_proved_and_radius_stated_both_ways(derived):
    rec = derived("D14")
    pole = next(c for c in rec.claims if c.name == sg.POLE)
    assert pole.status is Status.PROVED
    radius = rec.statement["radius"].latex()
    assert "only for" not in radius and "diverges" in radius
    rows = rec.statement["row_sums"].latex()
    assert r"S \text{ keys in the row}" in rows
    cite = next(c for c in rec.claims if c.name == sg.SOURCE)
    assert cite.status is Status.CITED and "Ramapuram" in cite.source
    # the displayed derivative is sigma' itself (an unevaluated d/dx), not its simplified value
    step = next(s for s in rec.steps if s.text.startswith("Monotone"))
    assert step.latex().startswith(r"\frac{d}{d x}")

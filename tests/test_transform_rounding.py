"""D16 (derivations.transform_rounding): the record holds with tight ratios, a bound with a term
dropped is exceeded, and torch.tanh on this machine stays within the cited TANH_ULPS."""

from __future__ import annotations

import math

import mpmath
import pytest
import torch

from derivations import transform_rounding as d16
from derivations._record import Status
from derivations.rounding import ulps_to_relative


def _failed(rec):
    return [c.name for c in rec.claims if c.status is Status.FAILED]


def test_record_holds_and_is_tight():
    rec = d16.derive()
    assert rec.id == "D16" and not _failed(rec)
    for name in ("softcap_toy", "alibi_toy", "sigmoid_toy", "normalized_toy"):
        assert 0.3 < rec.tables[name][1][0][1] <= 1.0, name
    assert rec.tables["normalized_toy"][1][0][2] is True  # the exact-normalization twin fails


def test_normalized_bound_taking_the_normalization_as_exact_fails():
    def exact_normalization(d, c, a, u):
        return d16.normalized_score_abs_error(d, c, a, u, normalization=False)

    assert any("normalized" in n for n in _failed(d16.derive(normalized=exact_normalization)))


def test_softcap_bound_without_the_propagated_score_error_fails():
    def no_propagation(e, a, cap, u, k):
        return d16.softcap_score_abs_error(e, a, cap, u, k) - e

    assert any("softcap" in n for n in _failed(d16.derive(softcap=no_propagation)))


def test_alibi_bound_without_the_bias_rounding_fails():
    def no_bias_term(e, a, b, u):
        return e + u * (a + e + b)

    assert any("ALiBi" in n for n in _failed(d16.derive(alibi=no_bias_term)))


def test_sigmoid_bound_without_the_argument_error_fails():
    def no_argument(e, a, b, u, k):
        return (1 + ulps_to_relative(k, u)) * (1 + u) ** 2 - 1

    assert any("sigmoid" in n for n in _failed(d16.derive(sigmoid=no_argument)))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_torch_tanh_within_cited_ulps(dtype):
    """torch.tanh on this machine, 20001 points in [-20, 20] (vectorized and scalar paths),
    against mpmath: the error in ulps of the exact result stays within TANH_ULPS."""
    x = torch.linspace(-20, 20, 20001, dtype=dtype)
    got = torch.tanh(x)
    worst = 0.0
    for xi, yi in zip(x.tolist(), got.tolist()):
        with mpmath.workdps(40):
            exact = mpmath.tanh(mpmath.mpf(xi))
        e = float(abs(mpmath.mpf(yi) - exact))
        if exact == 0:
            continue
        ulp = (
            math.ulp(float(exact))
            if dtype == torch.float64
            else 2.0 ** (math.frexp(float(exact))[1] - 24)
        )
        worst = max(worst, e / ulp)
    assert worst <= d16.TANH_ULPS.value, worst

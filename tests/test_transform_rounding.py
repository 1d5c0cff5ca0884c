"""D16 (derivations.transform_rounding): the record holds with tight ratios, a bound with a term
dropped is exceeded (the k = 1 softcap and ALiBi statements by FlashAttention-2's two roundings,
the library's tanh ulps by tanh.approx), the sigmoid's range is float32's, the bounds give on
arrays what they give elementwise, and torch.tanh on this machine stays within TANH_ULPS."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch

from derivations import transform_rounding as d16
from derivations._record import Status
from derivations.rounding import ulps_to_relative


def _failed(rec):
    return [c.name for c in rec.claims if c.status is Status.FAILED]


def test_record_holds_and_is_tight(derived):
    rec = derived("D16")
    assert rec.id == "D16" and not _failed(rec)
    for name in (
        "softcap_toy",
        "softcap_product_toy",
        "softcap_flash_toy",
        "alibi_toy",
        "alibi_flash_toy",
        "sigmoid_toy",
        "normalized_toy",
    ):
        assert 0.3 < rec.tables[name][1][0][1] <= 1.0, name
    assert rec.tables["normalized_toy"][1][0][2] is True  # the exact-normalization twin fails
    assert rec.tables["softcap_product_toy"][1][0][2] > 1.0  # k = 1 exceeded by fl(x fl(1/C))
    assert rec.tables["softcap_flash_toy"][1][0][2] is True  # the library's ulps exceeded
    assert rec.tables["alibi_flash_toy"][1][0][2] is True  # k = 1 exceeded by fl(fl(m/s) j)
    for name in rec.exports:
        assert hasattr(d16, name), name


def test_one_rounding_statements_fail_for_flash_attention():
    """The softcap and ALiBi bounds with their new keywords ignored (one rounding of the
    argument and of the bias, the library's tanh, the cap's product rounded), and the sigmoid's
    range taken down to where float32's exp overflows: exactly the claims of the forms
    FlashAttention-2 computes fail."""

    def one_rounding(e, a, cap, u, n, **kw):
        return d16.softcap_score_abs_error(e, a, cap, u, n)

    def one_bias_rounding(e, a, b, u, **kw):
        return d16.alibi_score_abs_error(e, a, b, u)

    def to_overflow(dtype_name):
        lower, overflow = d16.sigmoid_limits(dtype_name)
        return overflow - 0.1, overflow  # "valid" below where the weight is 0

    failed = set(
        _failed(
            d16.derive(softcap=one_rounding, alibi=one_bias_rounding, sigmoid_limits=to_overflow)
        )
    )
    assert failed == {d16.SOFTCAP_PRODUCT, d16.SOFTCAP_FLASH, d16.ALIBI_FLASH, d16.SIGMOID_RANGE}


def test_softcap_with_the_library_tanh_for_tanh_approx_fails():
    def library_tanh(*args, tanh_rel=None, **kw):
        return d16.softcap_score_abs_error(*args, **kw)

    # the saturated-cap check runs half its instances in FlashAttention-2's arithmetic too
    assert set(_failed(d16.derive(softcap=library_tanh))) == {
        d16.SOFTCAP_FLASH,
        d16.SOFTCAP_SATURATED,
    }


def test_sigmoid_limits_come_from_the_format():
    lower, overflow = d16.sigmoid_limits("float32")
    f32 = np.finfo(np.float32)
    assert lower == -math.log(1.0 / float(f32.tiny) - 1.0)
    assert overflow == -math.log(float(f32.max))
    assert overflow < lower  # the weight turns subnormal before exp(-a) overflows
    with np.errstate(over="ignore"):  # float32: exp(-a) overflows just below, weight 0
        assert np.float32(1) / (np.float32(1) + np.exp(np.float32(-(overflow - 0.01)))) == 0
    with pytest.raises(ValueError, match="dtype_name"):
        d16.sigmoid_limits("float8")


XS = [0.0, 1e-3, 0.5, 3.0, 41.0]


@pytest.mark.parametrize(
    ("name", "fn"),
    [
        ("softcap", lambda x: d16.softcap_score_abs_error(x * 1e-6, x, 30.0, 2.0**-24, 2.5)),
        (
            "softcap flash",
            lambda x: d16.softcap_score_abs_error(
                x * 1e-6,
                x,
                30.0,
                2.0**-24,
                2.5,
                argument_roundings=2,
                tanh_rel=2.0**-11,
                product_rounded=False,
            ),
        ),
        (
            "alibi",
            lambda x: d16.alibi_score_abs_error(x * 1e-6, x, 2 * x, 2.0**-24, bias_roundings=2),
        ),
        ("normalized", lambda x: d16.normalized_score_abs_error(8, 0.125, x / 41.0, 2.0**-24)),
        ("sigmoid", lambda x: d16.sigmoid_weight_relative_bound(x * 1e-6, x, -1.0, 2.0**-24, 1.5)),
    ],
)
def test_arrays_give_what_scalars_give(name, fn):
    got = fn(np.array(XS))
    each = [fn(x) for x in XS]
    assert isinstance(got, np.ndarray) and all(isinstance(v, float) for v in each), name
    assert got.tolist() == each, name


def test_normalized_bound_taking_the_normalization_as_exact_fails():
    def exact_normalization(d, c, a, u):
        return d16.normalized_score_abs_error(d, c, a, u, normalization=False)

    assert any("normalized" in n for n in _failed(d16.derive(normalized=exact_normalization)))


def test_softcap_bound_without_the_propagated_score_error_fails():
    def no_propagation(e, a, cap, u, k, **kw):
        return d16.softcap_score_abs_error(e, a, cap, u, k, **kw) - e

    assert d16.SOFTCAP in _failed(d16.derive(softcap=no_propagation))


def test_alibi_bound_without_the_bias_rounding_fails():
    def no_bias_term(e, a, b, u, bias_roundings=1):
        return e + u * (a + e + b)

    assert d16.ALIBI in _failed(d16.derive(alibi=no_bias_term))


def test_sigmoid_bound_without_the_argument_error_fails():
    def no_argument(e, a, b, u, k):
        return (1 + ulps_to_relative(k, u)) * (1 + u) ** 2 - 1

    assert d16.SIGMOID in _failed(d16.derive(sigmoid=no_argument))


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


def test_softcap_slope_taken_at_the_score_fails_the_saturated_check():
    """The saturated cap's factor sech^2 taken at |x| / C (not at the interval's end nearest 0,
    |x| / C - delta) is exceeded where the computed score lies nearer 0 than the exact one."""

    def slope_at_score(*args, score_low=None, **kw):
        if score_low is not None:  # raised by delta C (the record's own twin keywords)
            kw = d16._slope_at_score({**kw, "score_low": score_low}, args[0], args[1])
            return d16.softcap_score_abs_error(*args, **kw)
        return d16.softcap_score_abs_error(*args, **kw)

    assert d16.SOFTCAP_SATURATED in _failed(d16.derive(softcap=slope_at_score))

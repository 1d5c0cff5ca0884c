"""Tests of the mpmath oracle (verify/oracle.py) against independent closed forms.

Tolerances on exact (mpf) values come from the working precision: every quantity here is a
handful of correctly rounded mpmath operations, so its relative error is a small multiple of
10^(1-dps); ``_close`` allows 10^(5-dps) relative (a 10^4 margin over the unit roundoff, far below
any float64 effect). Float64 comparisons against torch use the rounding bound derived in
``_float64_bound`` (D10).
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import torch

from verify.exact import oracle
from verify.exact.oracle import (
    abs_error,
    linear_reference,
    softmax_reference,
    taylor_reference,
    to_float64,
    to_mpf_array,
)
from verify.spec.vocabulary import DENOMINATORS

F64 = torch.float64


@pytest.fixture(autouse=True)
def _test_precision():
    """Expected values in the tests are computed at 60 digits (above the oracle's 50)."""
    with mpmath.workdps(60):
        yield


def _frac(m) -> Fraction:
    """The exact rational value of an mpf."""
    sign, man, exp, _ = m._mpf_
    return Fraction(-man if sign else man) * Fraction(2) ** exp


def _close(a, b, dps=oracle.DEFAULT_DPS) -> bool:
    """|a - b| <= 10^(5-dps) max(1, |b|): the working-precision tolerance (module docstring)."""
    with mpmath.workdps(dps + 10):
        return abs(mpmath.mpf(a) - mpmath.mpf(b)) <= mpmath.mpf(10) ** (5 - dps) * max(
            1, abs(mpmath.mpf(b))
        )


def _t(values, dtype=F64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def _rand(*shape, seed=0, dtype=F64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=F64).to(dtype)


# ----------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize(
    "call",
    [
        lambda q, k, v: softmax_reference(q, k, v),
        lambda q, k, v: taylor_reference(q, k, v, order=2),
        lambda q, k, v: taylor_reference(q, k, v, order=3),
        lambda q, k, v: linear_reference(q, k, v, feature_map="elu1"),
        lambda q, k, v: softmax_reference(q, k, v, denominator="count"),
    ],
)
def test_single_key_output_is_value(call):
    q, k, v = _rand(1, 2, 1, 3, seed=1), _rand(1, 2, 1, 3, seed=2), _rand(1, 2, 1, 4, seed=3)
    res = call(q, k, v)
    assert res.shape == (1, 2, 1, 4)
    # count: N/1 = kappa v, not v; every other mode here normalizes to exactly v
    if res.denominator_mode == "count":
        with mpmath.workdps(res.dps):
            expected = res.kernel_values[..., 0:1] * to_mpf_array(v)
    else:
        expected = to_mpf_array(v)
    for a, b in zip(res.exact.ravel(), expected.ravel()):
        assert _close(a, b)
    if res.denominator_mode != "count":
        # a value within 10^-45 relative of a float64 rounds to that float64
        np.testing.assert_array_equal(res.float64, v.numpy())


def test_two_keys_softmax_is_sigmoid():
    q, k, v = _rand(1, 1, 3, 2, seed=4), _rand(1, 1, 2, 2, seed=5), _rand(1, 1, 2, 3, seed=6)
    res = softmax_reference(q, k, v, scale=0.75)
    with mpmath.workdps(60):
        Q, K, V = to_mpf_array(q), to_mpf_array(k), to_mpf_array(v)
        for t in range(3):
            x = [mpmath.mpf(0.75) * (Q[0, 0, t, 0] * K[0, 0, s, 0] + Q[0, 0, t, 1] * K[0, 0, s, 1])
                 for s in range(2)]  # fmt: skip
            w0 = 1 / (1 + mpmath.exp(x[1] - x[0]))  # sigmoid(x0 - x1)
            assert _close(res.weights[0, 0, t, 0], w0)
            assert _close(res.weights[0, 0, t, 1], 1 - w0)
            for j in range(3):
                assert _close(res.exact[0, 0, t, j], w0 * V[0, 0, 0, j] + (1 - w0) * V[0, 0, 1, j])


def test_taylor1_counterexample_weights():
    """D4: N = 1, scores (-3, 0.5, 1) give normalized weights (-4/3, 1, 4/3)."""
    q = _t([[[[1.0]]]])
    k = _t([[[[-3.0], [0.5], [1.0]]]])
    v = _t([[[[1.0], [2.0], [4.0]]]])
    for res in (
        taylor_reference(q, k, v, order=1, scale=1.0),
        linear_reference(q, k, v, feature_map="taylor:1", scale=1.0),
    ):
        for s, w in enumerate([Fraction(-4, 3), Fraction(1), Fraction(4, 3)]):
            assert _close(res.weights[0, 0, 0, s], mpmath.mpf(w.numerator) / w.denominator)
        assert res.denominator[0, 0, 0] == mpmath.mpf(1.5)
        assert res.abs_denominator[0, 0, 0] == mpmath.mpf(5.5)  # |-2| + 1.5 + 2
        # output: (-4/3)*1 + 1*2 + (4/3)*4 = 6
        assert res.float64[0, 0, 0, 0] == 6.0
        assert [float(x) for x in res.scores[0, 0, 0]] == [-3.0, 0.5, 1.0]
        assert res.max_abs_score[0, 0, 0] == 3


def test_taylor_kernel_matches_series_and_exp_limit():
    x = mpmath.mpf("-2.5")
    q, k, v = _t([[[[1.0]]]]), _t([[[[-2.5]]]]), _t([[[[1.0]]]])
    for order in (0, 1, 2, 5):
        res = taylor_reference(q, k, v, order=order, scale=1.0, denominator="none")
        series = mpmath.fsum(x**n / mpmath.factorial(n) for n in range(order + 1))
        assert _close(res.kernel_values[0, 0, 0, 0], series)
    # high order converges to exp (remainder 2.5^61/61! < 1e-59)
    res = taylor_reference(q, k, v, order=60, scale=1.0, denominator="none")
    assert _close(res.kernel_values[0, 0, 0, 0], mpmath.exp(x))


@pytest.mark.parametrize("kernel", ["exp", "taylor:2", "elu1", "count"])
def test_causal_first_row_is_first_value(kernel):
    q, k, v = _rand(2, 1, 4, 3, seed=7), _rand(2, 1, 4, 3, seed=8), _rand(2, 1, 4, 2, seed=9)
    if kernel == "exp":
        res = softmax_reference(q, k, v, causal=True)
    elif kernel == "taylor:2":
        res = taylor_reference(q, k, v, order=2, causal=True)
    elif kernel == "elu1":
        res = linear_reference(q, k, v, feature_map="elu1", causal=True)
    else:  # kappa = 1 (Taylor order 0), divide by the count: running mean of values
        res = taylor_reference(q, k, v, order=0, causal=True, denominator="count")
    np.testing.assert_array_equal(res.float64[:, :, 0, :], v[:, :, 0, :].numpy())
    assert res.count[0, 0].tolist() == [1, 2, 3, 4]
    assert not res.visible[0, 0, 0, 1:].any()


def test_count_with_unit_kernel_is_mean_of_visible_values():
    q, k = _rand(1, 2, 5, 2, seed=10), _rand(1, 2, 5, 2, seed=11)
    v = _rand(1, 2, 5, 3, seed=12)
    mask = torch.rand(1, 1, 5, 5, generator=torch.Generator().manual_seed(3)) > 0.4
    mask[..., 0] = True
    res = taylor_reference(q, k, v, order=0, attn_mask=mask, denominator="count")
    for h in range(2):
        for t in range(5):
            vis = [s for s in range(5) if mask[0, 0, t, s]]
            for j in range(3):
                mean = sum(Fraction(v[0, h, s, j].item()) for s in vis) / len(vis)
                assert _close(res.exact[0, h, t, j], mpmath.mpf(mean.numerator) / mean.denominator)
                # Fraction -> float is correctly rounded: an independent rounding of the same value
                assert res.float64[0, h, t, j] == float(mean)


def test_norm_denominators_identities():
    """D7: l2 output has unit norm, rms unit mean square, layernorm mean 0 / variance 1, and
    scale-invariant norms of N equal those of the softmax output o = N/D."""
    q, k, v = _rand(1, 2, 4, 3, seed=13), _rand(1, 2, 4, 3, seed=14), _rand(1, 2, 4, 5, seed=15)
    base = softmax_reference(q, k, v)
    l2 = softmax_reference(q, k, v, denominator="l2")
    rms = softmax_reference(q, k, v, denominator="rms")
    ln = softmax_reference(q, k, v, denominator="layernorm")
    none = softmax_reference(q, k, v, denominator="none")
    with mpmath.workdps(60):
        for idx in np.ndindex(1, 2, 4):
            o = list(base.exact[idx])
            assert _close(mpmath.fsum(x * x for x in l2.exact[idx]), 1)
            assert _close(mpmath.fsum(x * x for x in rms.exact[idx]) / 5, 1)
            assert _close(mpmath.fsum(ln.exact[idx]) / 5, 0)
            assert _close(mpmath.fsum(x * x for x in ln.exact[idx]) / 5, 1)
            norm = mpmath.sqrt(mpmath.fsum(x * x for x in o))
            for j in range(5):
                assert _close(l2.exact[idx][j], o[j] / norm)
                assert _close(none.exact[idx][j], o[j] * base.denominator[idx])
                assert none.numerator[idx][j] == none.exact[idx][j]


def test_eps_conventions():
    """eps enters as in verify/attention/norms.py: N/(D+eps), sqrt(. + eps), N/(n+eps)."""
    q, k, v = _rand(1, 1, 2, 2, seed=16), _rand(1, 1, 3, 2, seed=17), _rand(1, 1, 3, 2, seed=18)
    eps = 0.25
    for mode in DENOMINATORS:
        res = taylor_reference(q, k, v, order=2, denominator=mode, eps=eps)
        for t in range(2):
            N = list(res.numerator[0, 0, t])
            D = res.denominator[0, 0, t]
            if mode == "sum":
                expected = [x / (D + eps) for x in N]
            elif mode == "count":
                expected = [x / (3 + eps) for x in N]
            elif mode == "none":
                expected = N
            elif mode == "l2":
                expected = [x / mpmath.sqrt(N[0] ** 2 + N[1] ** 2 + eps) for x in N]
            elif mode == "rms":
                expected = [x / mpmath.sqrt((N[0] ** 2 + N[1] ** 2) / 2 + eps) for x in N]
            else:
                half = (N[0] - N[1]) / 2  # centred values are +-half, variance half^2
                expected = [half / mpmath.sqrt(half**2 + eps), -half / mpmath.sqrt(half**2 + eps)]
            for a, b in zip(res.exact[0, 0, t], expected):
                assert _close(a, b)


def test_empty_rows_are_zero_and_masked_values_have_no_influence():
    q, k, v = _rand(1, 1, 3, 2, seed=19), _rand(1, 1, 4, 2, seed=20), _rand(1, 1, 4, 3, seed=21)
    mask = torch.tensor([[True, True, False, False], [False] * 4, [True, False, True, False]])
    poisoned_k, poisoned_v = k.clone(), v.clone()
    poisoned_k[..., 3, :] = 1e10
    poisoned_v[..., 3, :] = -1e10
    for call in (
        lambda k_, v_: softmax_reference(q, k_, v_, attn_mask=mask),
        lambda k_, v_: taylor_reference(q, k_, v_, order=3, attn_mask=mask.numpy()),
        lambda k_, v_: linear_reference(
            q, k_, v_, feature_map="relu", attn_mask=mask, denominator="none"
        ),  # relu with "sum" can give 0/0 here
    ):
        clean, poisoned = call(k, v), call(poisoned_k, poisoned_v)
        assert (clean.exact[0, 0, 1] == 0).all() and clean.count[0, 0, 1] == 0
        assert clean.denominator[0, 0, 1] == 0 and clean.max_abs_score[0, 0, 1] == 0
        assert (clean.weights[0, 0, 1] == 0).all()
        np.testing.assert_array_equal(clean.float64[0, 0, 1], np.zeros(3))
        # identical visible sums in the same order: the mpf values are equal, not just close
        assert (clean.exact == poisoned.exact).all()
        assert (clean.kernel_values == poisoned.kernel_values).all()
        # the scores are reported everywhere, the kernel only where visible
        assert poisoned.scores[0, 0, 0, 3] != 0 and poisoned.kernel_values[0, 0, 0, 3] == 0


def test_mask_and_causal_combine_and_broadcast():
    q, k, v = _rand(2, 2, 3, 2, seed=22), _rand(2, 2, 3, 2, seed=23), _rand(2, 2, 3, 2, seed=24)
    mask = torch.tensor([True, False, True])  # broadcast (S,) -> (B, H, T, S)
    res = softmax_reference(q, k, v, attn_mask=mask, causal=True)
    expected = np.tril(np.ones((3, 3), dtype=bool)) & mask.numpy()
    assert (res.visible == expected).all()
    assert res.count[1, 1].tolist() == [1, 1, 2]


def test_signed_kernel_conditioning_quantities():
    """abs_denominator, abs_numerator and max |score| against direct sums (identity map)."""
    q, k, v = _rand(1, 1, 2, 3, seed=25), _rand(1, 1, 4, 3, seed=26), _rand(1, 1, 4, 2, seed=27)
    res = linear_reference(q, k, v, feature_map="identity", scale=0.5)
    Q, K, V = to_mpf_array(q), to_mpf_array(k), to_mpf_array(v)
    for t in range(2):
        kap = [0.5 * mpmath.fsum(Q[0, 0, t, i] * K[0, 0, s, i] for i in range(3)) for s in range(4)]
        assert _close(res.denominator[0, 0, t], mpmath.fsum(kap))
        assert _close(res.abs_denominator[0, 0, t], mpmath.fsum(abs(x) for x in kap))
        assert _close(res.max_abs_score[0, 0, t], max(abs(x) for x in kap))
        for j in range(2):
            a = mpmath.fsum(abs(kap[s]) * abs(V[0, 0, s, j]) for s in range(4))
            assert _close(res.abs_numerator[0, 0, t, j], a)


def test_favor_and_callable_maps():
    q, k, v = _rand(1, 1, 2, 2, seed=28), _rand(1, 1, 3, 2, seed=29), _rand(1, 1, 3, 2, seed=30)
    w = _rand(5, 2, seed=31)
    res = linear_reference(q, k, v, feature_map="favor", projection=w, scale=0.5)
    Q, K, W = to_mpf_array(q), to_mpf_array(k), to_mpf_array(w)
    r = mpmath.sqrt(mpmath.mpf(0.5))
    for t in range(2):
        for s in range(3):
            x, y = [r * e for e in Q[0, 0, t]], [r * e for e in K[0, 0, s]]
            # (1/m) sum_i exp(w_i.(x + y) - (|x|^2 + |y|^2)/2): the FAVOR+ kernel estimate (D9)
            est = mpmath.fsum(
                mpmath.exp(W[i, 0] * (x[0] + y[0]) + W[i, 1] * (x[1] + y[1])
                           - (x[0] ** 2 + x[1] ** 2 + y[0] ** 2 + y[1] ** 2) / 2)
                for i in range(5)
            ) / 5  # fmt: skip
            assert _close(res.kernel_values[0, 0, t, s], est)

    # a callable equal to elu1 gives the elu1 result; the scale multiplies q only
    def elu1(x):
        return [e + 1 if e > 0 else mpmath.exp(e) for e in x]

    a = linear_reference(q, k, v, feature_map=elu1, scale=1.5)
    b = linear_reference(q, k, v, feature_map="elu1", scale=1.5)
    assert a.kernel == "callable" and (a.exact == b.exact).all()
    b = linear_reference(q, k, v, feature_map="elu1", scale=2.0)
    c = linear_reference(q * 2, k, v, feature_map="elu1")  # 2 q is exact in float64
    assert (b.exact == c.exact).all()


def test_default_scale():
    q, k, v = _rand(1, 1, 2, 4, seed=32), _rand(1, 1, 2, 4, seed=33), _rand(1, 1, 2, 1, seed=34)
    assert softmax_reference(q, k, v).scale == mpmath.mpf(0.5)  # 1/sqrt(4)
    assert taylor_reference(q, k, v, order=2).scale == mpmath.mpf(0.5)
    assert linear_reference(q, k, v, feature_map="relu").scale == 1
    res = softmax_reference(q, k, v, scale=0.5)
    assert (res.exact == softmax_reference(q, k, v).exact).all()


# ----------------------------------------------------------------------------- exactness


def test_to_float64_rounds_once():
    with mpmath.workdps(60):
        two = mpmath.mpf(2)
        # just above the midpoint of 1 and 1 + 2^-52: nearest is 1 + 2^-52
        x = 1 + two**-53 + two**-80
        assert to_float64(x) == 1 + 2.0**-52
        assert float(np.float64(np.float32(float(x)))) == 1.0  # via float32: wrong
        # exact ties go to even
        assert to_float64(1 + two**-53) == 1.0
        assert to_float64(1 + 3 * two**-53) == 1 + 2.0**-51
        # subnormal just above half the smallest subnormal: float(mpf) double rounds it to 0
        tiny = mpmath.ldexp(1 + two**-59, -1075)
        assert float(tiny) == 0.0
        assert to_float64(tiny) == math.ulp(0.0)
        assert to_float64(mpmath.ldexp(1, -1075)) == 0.0  # exact tie -> even (0)
        assert to_float64(mpmath.ldexp(3, -1075)) == 2 * math.ulp(0.0)
        assert to_float64(-mpmath.ldexp(1, -2000)) == 0.0
        # overflow threshold: the midpoint of max and 2^1024 rounds (to even) to inf
        fmax = np.finfo(np.float64).max
        assert to_float64(mpmath.mpf(fmax)) == fmax
        assert to_float64(mpmath.mpf(fmax) + two**969 - two**900) == fmax
        assert to_float64(mpmath.mpf(fmax) + two**970) == math.inf
        assert to_float64(-mpmath.ldexp(1, 5000)) == -math.inf
        assert math.isnan(to_float64(mpmath.nan))
        assert to_float64(mpmath.mpf(0)) == 0.0


def test_oracle_output_rounded_once():
    """Mean of (1, 1, 1 + 2^-51) = 1 + (4/3) 2^-53: above the midpoint, so 1 + 2^-52."""
    q, k = torch.zeros(1, 1, 1, 1, dtype=F64), torch.zeros(1, 1, 3, 1, dtype=F64)
    v = _t([[[[1.0], [1.0], [1.0 + 2.0**-51]]]])
    res = taylor_reference(q, k, v, order=0, denominator="count")
    assert res.float64[0, 0, 0, 0] == 1 + 2.0**-52
    assert float(np.float32(float(res.exact[0, 0, 0, 0]))) == 1.0  # what a float32 path gives


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_inputs_converted_exactly(dtype):
    x = (torch.tensor([1 / 3, -0.1, 2.0**-20, 1234.5678], dtype=F64)).to(dtype)
    arr = to_mpf_array(x, "x")
    for value, m in zip(x.tolist(), arr.tolist()):
        assert _frac(m) == Fraction(value)
    npx = x.to(F64).numpy().astype(np.float32 if dtype != F64 else np.float64)
    assert [Fraction(float(m)) for m in to_mpf_array(npx)] == [Fraction(e) for e in x.tolist()]


def test_dps_configurable_and_global_context_untouched():
    q, k, v = _rand(1, 1, 3, 2, seed=35), _rand(1, 1, 3, 2, seed=36), _rand(1, 1, 3, 2, seed=37)
    before = mpmath.mp.dps
    lo = softmax_reference(q, k, v, dps=30)
    hi = softmax_reference(q, k, v, dps=90)
    assert mpmath.mp.dps == before
    assert lo.dps == 30 and hi.dps == 90
    # the precision is really used: values differ, within 10^(5-30) relative
    assert (lo.exact != hi.exact).any()
    for a, b in zip(lo.exact.ravel(), hi.exact.ravel()):
        assert _close(a, b, dps=30)
        assert hi.exact.ravel()[0].context.prec >= 53  # plain mpf values
    assert max(x._mpf_[3] for x in hi.exact.ravel()) > 200  # ~ 90 digits carried
    with pytest.raises(ValueError, match="causal"):
        softmax_reference(q, k[:, :, :2], v[:, :, :2], causal=True, dps=80)
    assert mpmath.mp.dps == before


def test_abs_error_measures_in_mpmath():
    q, k, v = _rand(1, 1, 2, 2, seed=38), _rand(1, 1, 2, 2, seed=39), _rand(1, 1, 2, 2, seed=40)
    res = softmax_reference(q, k, v)
    # an exact copy of the rounded reference: error = |fl(a) - a| <= u |a|, half an ulp
    err = abs_error(res.float64, res)
    assert err.dtype == np.float64 and err.shape == (1, 1, 2, 2)
    for e, a in zip(err.ravel(), res.float64.ravel()):
        assert e <= math.ulp(a) / 2
    bumped = np.nextafter(res.float64, np.inf)
    err2 = abs_error(torch.from_numpy(bumped), res)
    ulps = np.array([math.ulp(a) for a in res.float64.ravel()]).reshape(err.shape)
    assert ((err2 >= ulps / 2) & (err2 <= 1.5 * ulps)).all()
    # float32 actual is cast up exactly, not compared after rounding the oracle
    lowp = torch.from_numpy(res.float64).to(torch.float32)
    expected = [
        float(abs(Fraction(x) - _frac(m)))
        for x, m in zip(lowp.to(F64).flatten().tolist(), res.exact.ravel())
    ]
    np.testing.assert_array_equal(abs_error(lowp, res).ravel(), expected)
    nan = torch.full((1, 1, 2, 2), math.nan, dtype=F64)
    assert np.isinf(abs_error(nan, res)).all()
    with pytest.raises(ValueError, match="actual"):
        abs_error(torch.zeros(1, 1, 2, 3), res)
    with pytest.raises(TypeError, match="result"):
        abs_error(torch.zeros(1, 1, 2, 2), res.exact)


# ----------------------------------------------------------------------------- errors


def _qkv(T=2, S=2, d=2, d_v=2):
    return _rand(1, 1, T, d, seed=41), _rand(1, 1, S, d, seed=42), _rand(1, 1, S, d_v, seed=43)


@pytest.mark.parametrize(
    "call, exc, name",
    [
        (lambda q, k, v: softmax_reference(q[0], k, v), ValueError, "q"),
        (lambda q, k, v: softmax_reference(q, k[..., :1], v), ValueError, "k"),
        (lambda q, k, v: softmax_reference(q, k, v[:, :, :1]), ValueError, "v"),
        (lambda q, k, v: softmax_reference(q, torch.cat([k, k], 1), v), ValueError, "k"),
        (lambda q, k, v: softmax_reference(q[:, :, :1], k, v, causal=True), ValueError, "causal"),
        (lambda q, k, v: softmax_reference(q, k, v, causal=1), TypeError, "causal"),
        (lambda q, k, v: softmax_reference(q, k, v, denominator="max"), ValueError, "denominator"),
        (lambda q, k, v: softmax_reference(q, k, v[..., :1], denominator="layernorm"),
         ValueError, "denominator"),
        (lambda q, k, v: softmax_reference(q.to(torch.int64), k, v), TypeError, "q"),
        (lambda q, k, v: softmax_reference(q.tolist(), k, v), TypeError, "q"),
        (lambda q, k, v: softmax_reference(q * math.nan, k, v), ValueError, "q"),
        (lambda q, k, v: softmax_reference(q, k, v, attn_mask=torch.ones(2, 2)), TypeError,
         "attn_mask"),
        (lambda q, k, v: softmax_reference(q, k, v, attn_mask=torch.ones(3, 2, dtype=torch.bool)),
         ValueError, "attn_mask"),
        (lambda q, k, v: softmax_reference(q, k, v, scale=-1.0), ValueError, "scale"),
        (lambda q, k, v: softmax_reference(q, k, v, scale=True), TypeError, "scale"),
        (lambda q, k, v: softmax_reference(q, k, v, eps=-1e-3), ValueError, "eps"),
        (lambda q, k, v: softmax_reference(q, k, v, dps=10), ValueError, "dps"),
        (lambda q, k, v: softmax_reference(q, k, v, dps=50.0), TypeError, "dps"),
        (lambda q, k, v: taylor_reference(q, k, v, order=-1), ValueError, "order"),
        (lambda q, k, v: linear_reference(q, k, v, feature_map="gelu"), ValueError, "feature_map"),
        (lambda q, k, v: linear_reference(q, k, v, feature_map=3), TypeError, "feature_map"),
        (lambda q, k, v: linear_reference(q, k, v, feature_map="favor"), ValueError, "projection"),
        (lambda q, k, v: linear_reference(q, k, v, feature_map="favor",
                                          projection=torch.ones(4, 3, dtype=F64)),
         ValueError, "projection"),
        (lambda q, k, v: linear_reference(q, k, v, feature_map="relu",
                                          projection=torch.ones(4, 2, dtype=F64)),
         ValueError, "projection"),
        (lambda q, k, v: linear_reference(q, k, v, feature_map=lambda x: 1.0), TypeError,
         "feature_map"),
        (lambda q, k, v: linear_reference(q, k, v, feature_map=lambda x: x[: 1 + (x[0] > 0)]),
         ValueError, "feature_map"),
        (lambda q, k, v: oracle.reference(q, k, v, kernel="cosine"), ValueError, "kernel"),
    ],
)  # fmt: skip
def test_bad_inputs_raise_naming_the_argument(call, exc, name):
    q, k, v = _qkv()
    q = q.clone()
    q[0, 0, 0, 0], q[0, 0, 1, 0] = 1.0, -1.0  # callable-length test needs both signs
    with pytest.raises(exc, match=rf"^{name}:"):
        call(q, k, v)


def test_zero_divisor_gives_ieee_values():
    """Odd kappa_1 with scores (-1, -1): D = 0; N != 0 -> inf, N = 0 -> nan (no silent eps)."""
    q, k = _t([[[[1.0]]]]), _t([[[[-1.0], [-1.0]]]])
    v = _t([[[[1.0, 0.0], [1.0, 0.0]]]])
    res = taylor_reference(q, k, v, order=1, scale=1.0)
    assert res.denominator[0, 0, 0] == 0
    # kappa_1(-1) = 0, so N = 0 too: 0/0
    assert np.isnan(res.float64).all()
    v = _t([[[[1.0, 0.0], [0.0, 0.0]]]])
    res = taylor_reference(q, _t([[[[-3.0], [1.0]]]]), v, order=1, scale=1.0)  # (-2, 2): D = 0
    assert res.float64[0, 0, 0, 0] == -math.inf and np.isnan(res.float64[0, 0, 0, 1])


def test_reference_dispatch():
    q, k, v = _qkv()
    assert (
        oracle.reference(q, k, v, kernel="softmax").exact == softmax_reference(q, k, v).exact
    ).all()
    assert oracle.reference(q, k, v, kernel="taylor:3").kernel == "taylor:3"
    assert oracle.reference(q, k, v, kernel="linear:elu1").kernel == "elu1"


# ----------------------------------------------------------------------------- vs float64 torch

U = 2.0**-53  # float64 unit roundoff (D10)


def _gamma(n: int) -> float:
    return n * U / (1 - n * U)


def _float64_bound(res, q, k, v, kind: str, order: int = 0) -> np.ndarray:
    """Rounding bound for a float64 parallel-form evaluation with denominator ``sum`` (D10).

    Per pair: score error Delta_ts <= gamma_{d+5} c sum_i |q_i k_i| (d-term dot product plus at
    most five roundings forming and applying the scale: 1/sqrt(d), sqrt(c) on q and k). Kernel
    error e_ts:
      exp: |kappa| ((1 + 2u)(1 + u) exp(Delta + u (|x| + max|x| + 2 max Delta)) - 1) -- library
        exp within 1 ulp <= 2u (SLEEF u10 / glibc, cited in D10), one rounding for the
        max-shift subtraction (D6), one for scaling each weight;
      kappa_N: gamma_{2N+2} kappa_N(|x| + Delta) (evaluation; any of Horner / powers-and-sum)
        + Delta kappa_{N-1}(|x| + Delta) (mean value theorem) + u (|kappa| + e) (weight scaling).
    Sums over S keys: gamma_S. With a_j = sum_s (e_s + gamma_S (|kappa_s| + e_s)) |v_sj| and
    b = sum_s (e_s + gamma_S (|kappa_s| + e_s)):
      |o_hat_j - o_j| <= (1 + u) (a_j + |o_j| b) / (|D| - b) + u |o_j|  (needs b < |D|).
    """
    B, H, T, d = q.shape
    S = k.shape[2]
    out = np.empty(res.shape, dtype=np.float64)
    Q, K, V = to_mpf_array(q), to_mpf_array(k), to_mpf_array(v)
    with mpmath.workdps(30):
        gS = mpmath.mpf(_gamma(S))
        for b_, h, t in np.ndindex(B, H, T):
            vis = [s for s in range(S) if res.visible[b_, h, t, s]]
            if not vis:
                out[b_, h, t] = 0.0
                continue
            delta = {
                s: _gamma(d + 5) * res.scale * mpmath.fsum(abs(Q[b_, h, t, i] * K[b_, h, s, i])
                                                           for i in range(d))
                for s in vis
            }  # fmt: skip
            dmax = max(delta.values())
            e = {}
            for s in vis:
                x, kap = res.scores[b_, h, t, s], abs(res.kernel_values[b_, h, t, s])
                if kind == "exp":
                    grow = delta[s] + U * (abs(x) + res.max_abs_score[b_, h, t] + 2 * dmax)
                    e[s] = kap * ((1 + 2 * U) * (1 + U) * mpmath.exp(grow) - 1)
                else:
                    y = abs(x) + delta[s]
                    ev = _gamma(2 * order + 2) * mpmath.fsum(
                        y**n / mpmath.factorial(n) for n in range(order + 1)
                    )
                    mv = delta[s] * mpmath.fsum(y**n / mpmath.factorial(n) for n in range(order))
                    e[s] = ev + mv + U * (kap + ev + mv)
            tot = {s: e[s] + gS * (abs(res.kernel_values[b_, h, t, s]) + e[s]) for s in vis}
            bb = mpmath.fsum(tot.values())
            D = abs(res.denominator[b_, h, t])
            assert bb < D, "bound needs b < |D|"
            for j in range(v.shape[-1]):
                a = mpmath.fsum(tot[s] * abs(V[b_, h, s, j]) for s in vis)
                o = abs(res.exact[b_, h, t, j])
                out[b_, h, t, j] = to_float64((1 + U) * (a + o * bb) / (D - bb) + U * o)
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_agrees_with_torch_sdpa_float64(causal):
    """An independent implementation: torch's SDPA (math path on CPU) in float64."""
    q, k, v = _rand(2, 2, 6, 4, seed=47), _rand(2, 2, 6, 4, seed=48), _rand(2, 2, 6, 3, seed=49)
    mask = (
        None if causal else torch.rand(1, 2, 6, 6, generator=torch.Generator().manual_seed(5)) > 0.3
    )
    if mask is not None:
        mask[..., 0] = True
    res = softmax_reference(q, k, v, causal=causal, attn_mask=mask)
    actual = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=causal, attn_mask=mask
    )
    err, bound = abs_error(actual, res), _float64_bound(res, q, k, v, "exp")
    assert (err <= bound).all(), float((err / bound).max())
    assert err.max() > 0  # the comparison is not trivially exact


def _torch_attention():
    try:
        from verify.attention import linear_attention, softmax_attention, taylor_attention
    except ImportError as err:  # written concurrently by another helper
        pytest.skip(f"verify.attention not importable yet: {err}")
    return softmax_attention, taylor_attention, linear_attention


@pytest.mark.parametrize("case", ["softmax", "taylor:1", "taylor:2", "taylor:4", "elu1"])
def test_agrees_with_verify_attention_float64(case):
    softmax_attention, taylor_attention, linear_attention = _torch_attention()
    q, k, v = _rand(1, 2, 5, 3, seed=50), _rand(1, 2, 5, 3, seed=51), _rand(1, 2, 5, 2, seed=52)
    q, k = q * 0.5, k * 0.5  # |x| small enough that kappa_1's denominator stays away from 0
    mask = torch.ones(1, 1, 5, 5, dtype=torch.bool)
    mask[..., 2, 1] = False
    kw = dict(causal=True, attn_mask=mask)
    if case == "softmax":
        res, actual = softmax_reference(q, k, v, **kw), softmax_attention(q, k, v, **kw)
        bound = _float64_bound(res, q, k, v, "exp")
    elif case.startswith("taylor"):
        n = int(case.split(":")[1])
        res, actual = (
            taylor_reference(q, k, v, order=n, **kw),
            taylor_attention(q, k, v, order=n, **kw),
        )
        bound = _float64_bound(res, q, k, v, "taylor", order=n)
    else:
        res = linear_reference(q, k, v, feature_map="elu1", **kw)
        actual = linear_attention(q, k, v, feature_map="elu1", **kw)
        # elu1 features are positive, so kappa >= 0; score-based bound does not apply
        bound = None
    err = abs_error(actual, res)
    if bound is None:
        bound = _elu1_bound(res, q, k)
    assert (err <= bound).all(), float((err / bound).max())


def _positive_feature_bound(res, rho: float, S: int, m: int) -> np.ndarray:
    """Rounding bound for float64 linear attention with positive features, denominator ``sum``.

    If every feature is computed with relative error <= r and rho = (1 + r_q)(1 + r_k) - 1 bounds
    a product phi(q)_i phi(k_s)_i, then each product phi(q)_i phi(k_s)_i v_sj is summed over at most
    S m terms in either the parallel (kernel, then S keys) or the state form (S keys, then m
    features), so |N_hat_j - N_j| <= alpha A_j and |D_hat - D| <= alpha D with
    alpha = (1 + rho)(1 + gamma_{S+m+1}) - 1 (all terms positive). Since |o_j| <= A_j / D:
      |o_hat_j - o_j| <= (2 alpha (1 + u) / (1 - alpha) + u) A_j / D      (D10).
    """
    alpha = (1 + rho) * (1 + _gamma(S + m + 1)) - 1
    factor = 2 * alpha * (1 + U) / (1 - alpha) + U
    with mpmath.workdps(30):
        ratio = np.empty(res.shape, dtype=object)
        for idx in np.ndindex(*res.shape):
            ratio[idx] = res.abs_numerator[idx] / res.denominator[idx[:3]]
    return factor * to_float64(ratio) * (1 + 1e-12)


def _elu1_bound(res, q, k) -> np.ndarray:
    """elu1 (scale 1): phi(x) = elu(x) + 1 > 0 is computed with relative error <= r(x) =
    4u max(1, e^-x) (e^x directly within 1 ulp, or expm1(x) + 1 whose absolute error
    2u |e^x - 1| + u e^x is relative to e^x; x + 1 for x > 0: one rounding); m = d features."""
    xs = torch.cat([q.flatten(), k.flatten()]).tolist()
    r = max(4 * U * max(1.0, math.exp(-x)) for x in xs) * (1 + 1e-9)  # exp rounded: margin
    return _positive_feature_bound(res, (1 + r) ** 2 - 1, k.shape[2], k.shape[3])


def _favor_bound(res, q, k, w) -> np.ndarray:
    """FAVOR+ phi(x)_i = exp(a_i) / sqrt(m), a_i = w_i . x~ - |x~|^2 / 2, x~ = sqrt(c) x.

    x~ carries <= 4 roundings (1/sqrt(d), its sqrt, the product; gamma_4 relative), the exponent
    a_i is a (2d+1)-term sum of products of rounded factors: |a_hat - a| <= gamma_{2d+10} P_i with
    P_i = sum_j |w_ij x~_j| + |x~|^2 / 2; one more rounding if a stabilizing maximum is subtracted
    (u (|a| + max |a|)); exp within 1 ulp (2u) and the division by sqrt(m) (2 roundings):
      r <= (1 + 2u)(1 + u)^2 exp(gamma_{2d+10} P + u (|a| + max|a|)) - 1.
    """
    d, m = q.shape[-1], w.shape[0]
    c = float(res.scale)
    x = torch.cat([q.reshape(-1, d), k.reshape(-1, d)]) * math.sqrt(c)
    P = (x.abs() @ w.abs().T + 0.5 * x.square().sum(-1, keepdim=True)).max().item()
    a = (x @ w.T - 0.5 * x.square().sum(-1, keepdim=True)).abs().max().item()
    r = (1 + 2 * U) * (1 + U) ** 2 * math.exp(_gamma(2 * d + 10) * P * 1.01 + U * 2.02 * a) - 1
    return _positive_feature_bound(res, (1 + r) ** 2 - 1, k.shape[2], m)


@pytest.mark.parametrize("form", ["parallel", "recurrent", "chunked"])
def test_favor_agrees_with_verify_attention_float64(form):
    _, _, linear_attention = _torch_attention()
    q, k, v = _rand(1, 2, 5, 3, seed=53), _rand(1, 2, 5, 3, seed=54), _rand(1, 2, 5, 2, seed=55)
    w = _rand(16, 3, seed=56)
    kw = dict(causal=True, feature_map="favor", projection=w)
    res = linear_reference(q, k, v, **kw)
    actual = linear_attention(q, k, v, form=form, chunk_size=2, **kw)
    err, bound = abs_error(actual, res), _favor_bound(res, q, k, w)
    assert (err <= bound).all(), float((err / bound).max())

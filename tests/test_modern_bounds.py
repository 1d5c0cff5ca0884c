"""The modern forms against their mpmath reference (``verify.exact.structure_oracle``) within the
D10 bound extended by D16 (softcap and ALiBi scores, sigmoid weights) and D15 (windows, GQA);
each check rejects a twin that is off by a little (a cap or slopes too large by a relative
EPS[dtype] -- 2^-20 in float64, 2^-8 in float32 -- the slopes reversed, the bias moved by
EPS[dtype], the window one key wider)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_attention_modern import _alibi_as_extra_dims

from derivations import decay as d12
from verify.attention import softmax_attention
from verify.attention.sigmoid import sigmoid_attention
from verify.exact.errors import attention_error_bound
from verify.exact.oracle import softmax_reference
from verify.exact.structure_oracle import structured_reference

NAMES = {torch.float64: "float64", torch.float32: "float32"}
EPS = {torch.float64: 2.0**-20, torch.float32: 2.0**-8}


def qkv(B=1, H=4, G=4, T=6, S=None, d=3, dv=2, seed=0, scale=2.0, dtype=torch.float64):
    S = T if S is None else S
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: (scale * torch.randn(*s, generator=g, dtype=torch.float64)).to(dtype)  # noqa: E731
    return mk(B, H, T, d), mk(B, G, S, d), mk(B, G, S, dv)


def _ratio(out, exact, bound):
    err = np.abs(out.double().numpy() - exact)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(bound > 0, err / bound, np.where(err > 0, np.inf, 0.0))
    return float(r.max())


CASES = {
    "softcap": (dict(softcap=1.5), dict(softcap=1.5 * (1 + 2**-20))),  # perturbed per dtype
    "alibi": (
        dict(alibi_slopes=d12.alibi_slopes(4), causal=True),
        dict(alibi_slopes=d12.alibi_slopes(4)[::-1], causal=True),
    ),
    "softcap+alibi": (
        dict(softcap=4.0, alibi_slopes=d12.alibi_slopes(4)),
        dict(
            softcap=4.0, alibi_slopes=[m * (1 + 2**-20) for m in d12.alibi_slopes(4)]
        ),  # per dtype
    ),
    "window+gqa": (dict(window=(2, 1), enable_gqa=True), dict(window=(3, 1), enable_gqa=True)),
}


@pytest.mark.parametrize("dtype", list(NAMES))
@pytest.mark.parametrize("case", list(CASES))
def test_softmax_modern_within_bound(case, dtype):
    kw, twin_kw = CASES[case]
    G = 2 if kw.get("enable_gqa") else 4
    q, k, v = qkv(G=G, seed=hash(case) % 1000, dtype=dtype)
    exact = structured_reference(q, k, v, **kw)
    eb = attention_error_bound("softmax", q, k, v, dtype=NAMES[dtype], exact=exact, **kw)
    ratio = _ratio(softmax_attention(q, k, v, **kw), exact, eb.bound)
    assert ratio <= 1.0, ratio
    assert ratio > 1e-4, ratio  # not vacuous
    twin_kw = dict(twin_kw)
    if "softcap" in twin_kw and case == "softcap":
        twin_kw["softcap"] = kw["softcap"] * (1 + EPS[dtype])
    if case == "softcap+alibi":
        twin_kw["alibi_slopes"] = [m * (1 + EPS[dtype]) for m in kw["alibi_slopes"]]
    twin = softmax_attention(q, k, v, **twin_kw)
    assert _ratio(twin, exact, eb.bound) > 1.0


@pytest.mark.parametrize("dtype", list(NAMES))
def test_sigmoid_within_bound(dtype):
    q, k, v = qkv(T=5, S=7, seed=3, dtype=dtype)
    kw = dict(window=(3, -1), softcap=5.0)
    exact = structured_reference(q, k, v, kernel="sigmoid", sigmoid_bias=-np.log(7), **kw)
    eb = attention_error_bound(
        "sigmoid", q, k, v, dtype=NAMES[dtype], exact=exact, denominator="none",
        sigmoid_bias=float(-np.log(7)), **kw,
    )  # fmt: skip
    ratio = _ratio(sigmoid_attention(q, k, v, bias=float(-np.log(7)), **kw), exact, eb.bound)
    assert 1e-4 < ratio <= 1.0, ratio
    moved = sigmoid_attention(q, k, v, bias=float(-np.log(7)) + EPS[dtype], **kw)
    assert _ratio(moved, exact, eb.bound) > 1.0


def test_structure_oracle_agrees_with_the_augmented_alibi_reference():
    """Two independent exact evaluations of causal ALiBi softmax (D12) round to the same float64
    values: the loops of structure_oracle and the plain oracle on inputs with two extra
    coordinates."""
    q, k, v = qkv(T=5, seed=4)
    slopes = d12.alibi_slopes(4)
    c = 1 / np.sqrt(3)
    q2, k2 = _alibi_as_extra_dims(q, k, slopes, c)
    a = softmax_reference(q2, k2, v, causal=True, scale=float(c)).float64
    b = structured_reference(q, k, v, causal=True, alibi_slopes=slopes, scale=float(c))
    assert np.array_equal(a, b)


def test_decayed_taylor_reference_is_exact_on_dyadic_inputs():
    """The oracle's decayed Taylor-1 equals the exact rational reference of
    tests/test_attention_decay.py (both round the exact value once to float64)."""
    from fractions import Fraction

    from test_attention_decay import DECAYS, dyadic, exact_reference

    q, k, v = dyadic(seed=6)
    q, k = q / 2, k / 2
    ref = exact_reference(q, k, v, DECAYS, lambda x: [Fraction(1)] + list(x)).numpy()
    got = structured_reference(q, k, v, kernel="taylor:1", scale=1.0, causal=True, decay=DECAYS)
    assert np.array_equal(got, ref)

"""Tests of the hypothesis strategies (verify/strategies.py): invariants of every draw, exact
reproduction through ``snippet()``, shrinking to minimal examples, and argument errors.

The radius bound is checked with an independent evaluator, the mpmath oracle (50 digits), and in
exact rational arithmetic where the scale is rational.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import find, given, settings
from hypothesis import strategies as st

from derivations.truncation import delta, informative_radius
from verify.exact.oracle import softmax_reference
from verify.strategies import (
    ALL_CASES,
    DTYPES,
    EDGE_CASES,
    AttentionInputs,
    Shape,
    attention_inputs,
    edge_case_inputs,
    masked_inputs,
    masks,
    safe_exp_radius,
    score_radius,
    shapes,
)

U = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.float16: 2.0**-11,
     torch.bfloat16: 2.0**-8}  # fmt: skip


def _scores(x: AttentionInputs):
    """Exact-to-50-digits scores c q.k and c sum |q_i k_i| via the oracle (independent code)."""
    res = softmax_reference(x.q, x.k, x.v, scale=x.scale)
    absq, absk = x.q.abs(), x.k.abs()
    ab = softmax_reference(absq, absk, x.v, scale=x.scale)
    return res, ab


def _poison(dtype) -> float:
    """1e10, or finfo.max / 4 where 1e10 does not fit, rounded to the dtype (documented)."""
    p = min(1e10, torch.finfo(dtype).max / 4)
    return torch.tensor(p, dtype=torch.float64).to(dtype).item()


def _max_abs(arr) -> mpmath.mpf:
    return max((abs(e) for e in arr.ravel()), default=mpmath.mpf(0))


@given(shapes(batch=(1, 3), heads=2, queries=(1, 5), keys=(2, 7), dim=(1, 3), value_dim=(2, 2)))
def test_shapes_in_bounds(s):
    assert 1 <= s.B <= 3 and s.H == 2 and 1 <= s.T <= 5 and 2 <= s.S <= 7
    assert 1 <= s.d <= 3 and s.d_v == 2
    assert s.q == (s.B, s.H, s.T, s.d) and s.k == (s.B, s.H, s.S, s.d)
    assert s.v == (s.B, s.H, s.S, s.d_v) and s.out == (s.B, s.H, s.T, s.d_v)


@given(shapes(queries=(1, 9), keys=(1, 2), causal=True))
def test_causal_shapes_have_equal_lengths(s):
    assert s.T == s.S


@given(attention_inputs(dtype=list(DTYPES), radius=score_radius(None, dtype=torch.float16),
                        cases=("random", *EDGE_CASES)))  # fmt: skip
def test_inputs_invariants_and_radius(x):
    s = x.shape
    assert x.q.shape == s.q and x.k.shape == s.k and x.v.shape == s.v
    assert x.q.dtype == x.k.dtype == x.v.dtype == x.dtype and x.dtype in DTYPES
    assert x.device == torch.device("cpu")
    assert not x.causal or s.T == s.S
    for t in (x.q, x.k, x.v):
        assert torch.isfinite(t).all()
        # the values are the dtype's own numbers: an exact float64 round trip
        assert torch.equal(t.to(torch.float64).to(x.dtype), t)
    res, ab = _scores(x)
    r = mpmath.mpf(x.radius)
    m = _max_abs(res.scores)
    assert m <= r * (1 + mpmath.mpf(10) ** -45)  # oracle working precision (50 digits)
    if m > 0:
        # close to r: r - max <= 64 u A with A = max c sum |q_i k_i| (rounding q, k to the dtype
        # moves a score by <= ~2u A; the shrink loop adds at most a few such steps)
        A = _max_abs(ab.scores)
        assert r - m <= 64 * U[x.dtype] * A
    if x.scale is not None:  # rational scale: exact check
        for b, h, t, k in np.ndindex(s.B, s.H, s.T, s.S):
            qs, ks = x.q[b, h, t].double().tolist(), x.k[b, h, k].double().tolist()
            dot = sum(Fraction(a) * Fraction(c) for a, c in zip(qs, ks))
            assert abs(Fraction(x.scale) * dot) <= Fraction(x.radius)
    # exp of every score is finite in the dtype (safe radius)
    assert torch.isfinite(torch.exp(torch.tensor(float(m), dtype=x.dtype)))


@given(attention_inputs(dtype=list(DTYPES), radius=1.5, cases=("extreme_scores",)))
def test_extreme_scores_offset_every_row(x):
    """Every scaled score is sigma M + (a score of radius <= 1.5 over the other coordinates),
    M <= extreme_score_magnitude (rounding a = sqrt(M/c) to the dtype moves M by <= 2u M), and the
    dtype's own score computation is finite."""
    from verify.strategies import extreme_score_magnitude

    s = x.shape
    c = 1 / math.sqrt(s.d)
    q, k = x.q.double(), x.k.double()
    offset = c * q[..., :1] @ k[..., :1].transpose(-1, -2)
    rest = c * q[..., 1:] @ k[..., 1:].transpose(-1, -2)
    M = extreme_score_magnitude(x.dtype, s.d)
    m = offset.abs()
    assert torch.all(m == m.flatten()[0]) and m.flatten()[0] <= M * (1 + 2 * U[x.dtype])
    # the radius holds exactly in rationals; this float64 recomputation rounds (a few u64)
    assert m.flatten()[0] >= 10 * (1 - 2 * U[x.dtype])
    assert torch.all(rest.abs() <= 1.5 * (1 + 8 * 2.0**-53))
    assert x.radius is None and x.case == "extreme_scores"
    assert torch.isfinite(x.q @ x.k.transpose(-1, -2) * c).all()


@given(attention_inputs(radius=1.5, scale=st.sampled_from([0.25, 1.0, 0.3])))
def test_radius_exact_with_rational_scale(x):
    s = x.shape
    dots = [sum(Fraction(a) * Fraction(c) for a, c in zip(x.q[b, h, t].tolist(),
                                                          x.k[b, h, k].tolist()))
            for b, h, t, k in np.ndindex(s.B, s.H, s.T, s.S)]  # fmt: skip
    assert max(abs(Fraction(x.scale) * d) for d in dots) <= Fraction(1.5)


@given(attention_inputs(shape=shapes(queries=(1, 4)), bound=3.0, cases=EDGE_CASES,
                        dtype=[torch.float32, torch.float16]))  # fmt: skip
def test_edge_cases(x):
    s, q, k, v = x.shape, x.q.double(), x.k.double(), x.v.double()
    assert x.radius is None
    if x.case == "zeros":
        assert (q == 0).all() and (k == 0).all()
    elif x.case == "single_key":
        assert s.S == 1 and (not x.causal or s.T == 1)
    elif x.case == "equal_keys":
        assert (k == k[:, :, :1]).all()
    elif x.case == "large_norm":
        top = math.floor(math.log2(torch.finfo(x.dtype).max))
        assert q.abs().max() <= 3.0 * 2.0 ** (top // 4) and k.abs().max() <= 3.0 * 2.0 ** -(
            top // 4
        )
        assert v.abs().max() <= 3.0 * 2.0 ** (top // 8)
        assert torch.isfinite(x.q).all() and torch.isfinite(x.v).all()
    elif x.case == "identity_values":
        expected = torch.zeros(s.v, dtype=torch.float64)
        for j in range(s.S):
            expected[:, :, j, j % s.d_v] = 1
        assert torch.equal(v, expected)
    elif x.case == "positive":
        assert (q >= 0).all() and (k >= 0).all()
    elif x.case == "unit_values":
        assert (v == 1).all()
    if x.case != "large_norm":
        for t in (q, k, v):
            assert t.abs().max() <= 3.0


@given(edge_case_inputs(radius=0.5))
def test_edge_case_inputs_respect_radius(x):
    assert x.case in EDGE_CASES
    res, _ = _scores(x)
    assert _max_abs(res.scores) <= mpmath.mpf(0.5) * (1 + mpmath.mpf(10) ** -45)


@given(masked_inputs(dtype=[torch.float64, torch.float16], radius=1.0))
def test_masked_inputs_poison_only_invisible_keys(x):
    s = x.shape
    m = x.attn_mask
    assert m.dtype == torch.bool and m.shape[2:] == (s.T, s.S)
    assert m.shape[0] in (1, s.B) and m.shape[1] in (1, s.H)
    res = softmax_reference(x.q, x.k, x.v, attn_mask=m, causal=x.causal)
    p = _poison(x.dtype)
    dead = ~res.visible.any(axis=2)
    k, v = x.k.double(), x.v.double()
    for b, h, j in np.ndindex(s.B, s.H, s.S):
        if dead[b, h, j]:
            assert (k[b, h, j] == p).all() and (v[b, h, j] == -p).all()
    visible_scores = [abs(e) for e, keep in zip(res.scores.ravel(), res.visible.ravel()) if keep]
    assert max(visible_scores, default=0) <= mpmath.mpf(1.0) * (1 + mpmath.mpf(10) ** -45)


@given(masked_inputs(dtype=[torch.float32, torch.bfloat16], bound=2.0))
def test_masked_inputs_leave_visible_keys_alone(x):
    """Without rescaling, elements are within the bound, so only dead keys carry the poison."""
    res = softmax_reference(x.q, x.k, x.v, attn_mask=x.attn_mask, causal=x.causal)
    live = res.visible.any(axis=2)  # (B, H, S)
    k, v = x.k.double(), x.v.double()
    for b, h, j in zip(*np.nonzero(live)):
        assert (k[b, h, j].abs() <= 2).all() and (v[b, h, j].abs() <= 2).all()
    assert (k[torch.from_numpy(~live)].abs() == _poison(x.dtype)).all()


#: shrinking tests are about the shrinker, not exploration: deterministic whatever the profile
_FIND = settings(derandomize=True, database=None, max_examples=200)


def test_masks_include_empty_rows_and_dead_keys():
    shape = Shape(B=2, H=2, T=3, S=4, d=1, d_v=1)
    m = find(masks(shape), lambda m: bool((~m).all(-1).any()), settings=_FIND)
    assert (~m).all(-1).any()
    m = find(
        masks(shape),
        lambda m: bool((~m).all(-2).all(-1).any()) if m.shape[0] == 2 else False,
        settings=_FIND,
    )
    assert m.shape[0] == 2
    # shrinks to everything visible
    m = find(masks(shape, broadcast=False), lambda m: True, settings=_FIND)
    assert m.shape == (2, 2, 3, 4) and bool(m.all())


@settings(max_examples=10)
@given(attention_inputs(dtype=list(DTYPES), cases=ALL_CASES), st.booleans())
def test_snippet_rebuilds_exactly(x, with_mask):
    if with_mask:
        x = AttentionInputs(x.q, x.k, x.v, x.causal, 0.5, x.radius, x.shape,
                            attn_mask=torch.ones(1, 1, x.shape.T, x.shape.S, dtype=torch.bool),
                            case=x.case)  # fmt: skip
    q = x.q.clone()
    q.view(-1)[0] = -0.0  # signed zeros must survive
    x = AttentionInputs(q, x.k, x.v, x.causal, x.scale, x.radius, x.shape, x.attn_mask, x.case)
    ns: dict = {}
    exec(x.snippet(), ns)
    for name in ("q", "k", "v"):
        got, want = ns[name], getattr(x, name)
        assert got.dtype == want.dtype and got.device == want.device
        assert torch.equal(got, want) and torch.equal(got.signbit(), want.signbit())
    assert ns["causal"] == x.causal and ns["scale"] == x.scale
    if x.attn_mask is None:
        assert ns["attn_mask"] is None
    else:
        assert torch.equal(ns["attn_mask"], x.attn_mask)
    text = repr(x)
    assert text.startswith("AttentionInputs(case=") and repr(x.shape) in text


def test_shrinks_to_minimal_example():
    x = find(attention_inputs(), lambda x: x.shape.T >= 3, settings=_FIND)
    assert x.shape == Shape(B=1, H=1, T=3, S=1, d=1, d_v=1) and not x.causal
    assert not x.q.any() and not x.k.any() and not x.v.any()
    x = find(attention_inputs(), lambda x: bool((x.v.abs() >= 1).any()), settings=_FIND)
    assert x.shape.T == x.shape.S == 1 and x.v.abs().sum().item() == 1.0
    x = find(attention_inputs(causal=True), lambda x: x.shape.T >= 2, settings=_FIND)
    assert x.causal and x.shape.T == x.shape.S == 2


@pytest.mark.parametrize("order", [0, 1, 2, 4, 6])
def test_score_radius_inside_informative_range(order):
    """Drawn r lie in (0, hi] with delta_N(hi) < 1/2; delta_N is increasing in r (D4), so the
    truncation bound is informative at every drawn r."""
    hi = informative_radius(order)
    assert delta(order, hi) < 0.5 <= delta(order, math.nextafter(hi, math.inf))

    @given(score_radius(order))
    def check(r):
        assert 0 < r <= hi

    check()


@pytest.mark.parametrize("dtype", DTYPES)
def test_safe_exp_radius(dtype):
    R = safe_exp_radius(dtype)
    assert R == {torch.float16: 5.0, torch.float64: 354.0}.get(dtype, 44.0)
    e = torch.exp(torch.tensor(R, dtype=torch.float64))
    assert e <= math.sqrt(torch.finfo(dtype).max)
    assert torch.isfinite(torch.exp(torch.tensor(R, dtype=dtype)))


@pytest.mark.parametrize(
    "make, exc, name",
    [
        (lambda: shapes(batch=(0, 2)), ValueError, "batch"),
        (lambda: shapes(queries=(3, 2)), ValueError, "queries"),
        (lambda: shapes(causal="yes"), TypeError, "causal"),
        (lambda: attention_inputs(dtype=torch.int32), ValueError, "dtype"),
        (lambda: attention_inputs(radius=-1.0), ValueError, "radius"),
        (lambda: attention_inputs(scale=math.inf), ValueError, "scale"),
        (lambda: attention_inputs(bound=0.0), ValueError, "bound"),
        (lambda: attention_inputs(cases=("nope",)), ValueError, "cases"),
        (lambda: attention_inputs(shape=(1, 1, 1, 1, 1, 1)), TypeError, "shape"),
        (lambda: score_radius(-1), ValueError, "order"),
        (lambda: score_radius(2, target=0.0), ValueError, "target"),
        (lambda: masks((1, 1, 2, 2)), TypeError, "shape"),
        (lambda: masked_inputs(poison=-1.0), ValueError, "poison"),
        (lambda: Shape(1, 1, 0, 1, 1, 1), ValueError, "T"),
    ],
)
def test_bad_arguments(make, exc, name):
    with pytest.raises(exc, match=rf"^{name}:"):
        make()


def test_causal_with_unequal_shape_strategy_raises_at_draw():
    strat = attention_inputs(shape=shapes(queries=2, keys=3), causal=True)
    with pytest.raises(ValueError, match="^shape:"):
        find(strat, lambda x: True, settings=_FIND)
    # with causal=None such a shape simply gets causal=False
    x = find(attention_inputs(shape=shapes(queries=2, keys=3)), lambda x: True, settings=_FIND)
    assert not x.causal

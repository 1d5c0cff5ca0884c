"""Softmax attention, the reference form (D2, D6, D7; fault classes 8, 9, 12).

Tolerances: ``verify.errors`` (D10) through ``test_attention_bounds``: ``oracle_bound``
against the mpmath oracle, ``output_bound`` against the float64 reference.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_attention_bounds import U, assert_within, gamma, oracle_bound, output_bound

from verify.attention import softmax_attention
from verify.exact.oracle import softmax_reference

DENOMS = ("sum", "none", "l2", "rms", "layernorm", "count")


def qkv(B=2, H=2, T=6, S=None, d=4, dv=3, dtype=torch.float64, seed=0, scale=1.0):
    S = T if S is None else S
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: (scale * torch.randn(*s, generator=g, dtype=torch.float64)).to(dtype)  # noqa: E731
    return mk(B, H, T, d), mk(B, H, S, d), mk(B, H, S, dv)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("denom", DENOMS)
def test_matches_mpmath(causal, denom):
    T, S = (4, 4) if causal else (3, 5)
    q, k, v = qkv(B=1, H=2, T=T, S=S, d=3, seed=1, scale=1.5)
    exact = softmax_reference(q, k, v, causal=causal, denominator=denom)
    out = softmax_attention(q, k, v, causal=causal, denominator=denom)
    ref, bound = oracle_bound("exp", exact, q, k, v, dtype=torch.float64, causal=causal,
                              denominator=denom)  # fmt: skip
    assert torch.isfinite(bound).all()
    assert_within(out, ref, bound, denom)


def test_eps_and_explicit_scale_match_mpmath():
    q, k, v = qkv(B=1, H=1, T=4, d=2, seed=2)
    for denom in ("sum", "count", "none"):
        kw = dict(causal=True, scale=0.7, denominator=denom, eps=0.3)
        exact = softmax_reference(q, k, v, **kw)
        ref, bound = oracle_bound("exp", exact, q, k, v, dtype=torch.float64, **kw)
        assert_within(softmax_attention(q, k, v, **kw), ref, bound, denom)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_float64_reference_and_sdpa(dtype, causal):
    q, k, v = qkv(T=16, dtype=dtype, seed=3, scale=2.0)
    ref, bound = output_bound("exp", q, k, v, dtype=dtype, causal=causal)
    out = softmax_attention(q, k, v, causal=causal)
    assert out.dtype == dtype
    assert_within(out, ref, bound, "ours")
    # SDPA follows the same model (an exp-based kernel summing S terms): same bound
    assert_within(F.scaled_dot_product_attention(q, k, v, is_causal=causal), ref, bound, "sdpa")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("denom", DENOMS)
def test_every_denominator_against_float64_reference(denom, dtype):
    q, k, v = qkv(T=8, dtype=dtype, seed=14)
    ref, bound = output_bound("exp", q, k, v, dtype=dtype, causal=True, denominator=denom)
    out = softmax_attention(q, k, v, causal=True, denominator=denom)
    assert out.dtype == dtype
    assert_within(out, ref, bound, denom)


def test_numerically_stable_for_large_scores():
    """Scores ~ 1e3: exp would overflow without the max-subtraction (D6)."""
    q, k, v = qkv(B=1, H=1, T=5, d=2, seed=4)
    out = softmax_attention(q * 300, k * 300, v)
    assert torch.isfinite(out).all()
    exact = softmax_reference(q * 300, k * 300, v)
    ref, bound = oracle_bound("exp", exact, q * 300, k * 300, v, dtype=torch.float64)
    assert_within(out, ref, bound, "large scores")


def test_shift_invariance_d6():
    """softmax(x + a) = softmax(x): adding a multiple of a fixed key direction to q.k rows."""
    q, k, v = qkv(B=1, H=1, T=4, d=3, seed=5)
    k2 = k.clone()
    k2[..., 0] = 1.0  # every key has component 1 along e_0
    q2 = q.clone()
    q2[..., 0] += 2.5  # adds 2.5 c to every score of a row
    exact = softmax_reference(q, k2, v)  # = the exact output on (q2, k2) by D6
    ref, bound = oracle_bound("exp", exact, q2, k2, v, dtype=torch.float64)
    assert_within(softmax_attention(q2, k2, v), ref, bound, "D6")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision(dtype):
    q, k, v = qkv(T=10, dtype=dtype, seed=6)
    out = softmax_attention(q, k, v, causal=True)
    assert out.dtype == dtype
    ref, bound = output_bound("exp", q, k, v, dtype=dtype, causal=True)  # two-level model
    assert_within(out, ref, bound, str(dtype))


# ------------------------------------------------------------------ masks (fault class 8)
def test_boolean_mask_broadcasts_and_matches_reference():
    q, k, v = qkv(T=5, S=7, seed=7)
    g = torch.Generator().manual_seed(1)
    for mask in (
        torch.rand(7, generator=g) > 0.3,
        torch.rand(5, 7, generator=g) > 0.4,
        torch.rand(2, 1, 5, 7, generator=g) > 0.5,
        torch.rand(2, 2, 1, 7, generator=g) > 0.5,
    ):
        ref, bound = output_bound("exp", q, k, v, dtype=torch.float64, attn_mask=mask)
        assert_within(softmax_attention(q, k, v, attn_mask=mask), ref, bound, str(mask.shape))


def test_large_finite_masked_values_have_no_influence():
    """Masked scores may be 1e10 (or hide the true max): bitwise no influence, finite grads."""
    q, k, v = qkv(B=1, H=1, T=5, seed=8)
    mask = torch.rand(5, 5, generator=torch.Generator().manual_seed(2)) > 0.4
    mask[:, 1] = True
    mask[:, 4] = False  # key 4 hidden from every query
    k2, v2 = k.clone(), v.clone()
    k2[0, 0, 4] = 1e10
    v2[0, 0, 4] = 1e10
    k2[0, 0, 2] = 1e5  # huge score where masked; visible to some rows
    ref = softmax_attention(q, k, v, attn_mask=mask)
    out = softmax_attention(q, k2.requires_grad_(), v2.requires_grad_(), attn_mask=mask)
    rows = ~mask[:, 2]
    assert torch.equal(out[0, 0, rows], ref[0, 0, rows])
    out[0, 0, rows].sum().backward()
    assert torch.isfinite(k2.grad).all() and (k2.grad[0, 0, 4] == 0).all()
    assert (v2.grad[0, 0, 4] == 0).all()


def test_masked_weight_is_zero_even_below_any_finite_sentinel():
    """Visible scores near -3e4 and a masked larger one: a finite "-inf" sentinel (e.g. -1e4)
    would give the masked key weight e^{+17000} (D6); the exact answer ignores it."""
    q = torch.tensor([[[[-300.0]]]], dtype=torch.float64)
    k = torch.tensor([100.0, 90.0, 5.0], dtype=torch.float64).reshape(1, 1, 3, 1)
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [7.0, 7.0]], dtype=torch.float64)[None, None]
    mask = torch.tensor([True, True, False])
    out = softmax_attention(q, k, v, scale=1.0, attn_mask=mask)
    exact = softmax_reference(q, k, v, scale=1.0, attn_mask=mask)
    ref, bound = oracle_bound("exp", exact, q, k, v, dtype=torch.float64, scale=1.0,
                              attn_mask=mask)  # fmt: skip
    assert_within(out, ref, bound, "sentinel")


@pytest.mark.parametrize("denom", DENOMS)
def test_empty_rows_give_zeros_and_finite_gradients(denom):
    q, k, v = (x.requires_grad_() for x in qkv(T=4, seed=9))
    mask = torch.ones(2, 2, 4, 4, dtype=torch.bool)
    mask[0, 1, 2] = False  # one empty row
    mask[1] = False  # a whole batch element
    out = softmax_attention(q, k, v, attn_mask=mask, denominator=denom)
    assert (out[0, 1, 2] == 0).all() and (out[1] == 0).all()
    assert torch.isfinite(out).all()
    out.sum().backward()
    for x in (q, k, v):
        assert torch.isfinite(x.grad).all()
    assert (q.grad[0, 1, 2] == 0).all()


@pytest.mark.parametrize("causal", [False, True])
def test_future_tokens_do_not_change_past_outputs(causal):
    q, k, v = qkv(T=6, seed=10)
    if not causal:
        mask = torch.ones(6, 6, dtype=torch.bool).tril()
        f = lambda q, k, v: softmax_attention(q, k, v, attn_mask=mask)  # noqa: E731
    else:
        f = lambda q, k, v: softmax_attention(q, k, v, causal=True)  # noqa: E731
    base = f(q, k, v)
    for t in range(6):
        q2, k2, v2 = q.clone(), k.clone(), v.clone()
        q2[:, :, t + 1 :] += 9.0
        k2[:, :, t + 1 :] += 50.0  # would dominate the max if it leaked
        v2[:, :, t + 1 :] = 1e6
        assert torch.equal(f(q2, k2, v2)[:, :, : t + 1], base[:, :, : t + 1])


# ------------------------------------------------------------------ gradients
@pytest.mark.parametrize("denom", DENOMS)
@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_tiny(denom, causal):
    q, k, v = (x.requires_grad_() for x in qkv(B=1, H=1, T=3, d=2, dv=2, seed=11))
    mask = torch.tensor([[True, True, False], [True, True, True], [False, True, True]])
    for m in (None, mask):

        def f(q, k, v, m=m):
            return softmax_attention(q, k, v, causal=causal, attn_mask=m, denominator=denom)

        assert torch.autograd.gradcheck(f, (q, k, v))


def test_gradients_match_sdpa():
    q, k, v = (x.requires_grad_() for x in qkv(T=9, seed=12))
    w = torch.randn(2, 2, 9, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ours = torch.autograd.grad((softmax_attention(q, k, v, causal=True) * w).sum(), (q, k, v))
    ref = torch.autograd.grad(
        (F.scaled_dot_product_attention(q, k, v, is_causal=True) * w).sum(), (q, k, v)
    )
    # calibrated bound (labelled): gamma_K of the forward model, K = S + d + 8, times the
    # largest gradient component (both implementations in float64)
    for a, b in zip(ours, ref):
        assert (a - b).abs().max() <= 2 * gamma(9 + 4 + 8, U[torch.float64]) * 8 * b.abs().max()


def test_single_key_output_is_v_and_dq_vanishes():
    """fault class 12: one key => o = v and dq = 0 (SDPA gives ~4e-16 in float64)."""
    g = torch.Generator().manual_seed(13)
    q = torch.randn(2, 2, 3, 4, generator=g, dtype=torch.float64).requires_grad_()
    k = torch.randn(2, 2, 1, 4, generator=g, dtype=torch.float64)
    v = torch.randn(2, 2, 1, 5, generator=g, dtype=torch.float64)
    out = softmax_attention(q, k, v)
    assert_within(out, v.expand(2, 2, 3, 5), 2 * U[torch.float64] * v.abs(), "o = v")
    (dq,) = torch.autograd.grad(out.sum(), q)
    # the product rule cancels (v - o)/D: |dq| <= gamma_8 * sum_j |v_j| * c |k|
    bound = gamma(8, U[torch.float64]) * v.abs().sum(-1).amax() * 0.5 * k.abs().amax()
    assert dq.abs().max() <= bound

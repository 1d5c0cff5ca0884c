"""Grouped kv heads, windows, ALiBi, softcapping and sigmoid attention in the parallel forms
(D12-D15). Each test is an identity with another computation (exact, or within D10's bound) or a
bound derived in D13/D14; each has a faulty twin that the same check rejects.
"""

from __future__ import annotations

import math

import pytest
import torch
from test_attention_bounds import U, assert_within, gamma, oracle_bound

from derivations import decay as d12
from derivations import sigmoid as d14
from derivations import softcap as d13
from derivations import structure as d15
from verify.attention import softmax_attention
from verify.attention.sigmoid import sigmoid_attention
from verify.attention.structure import window_mask
from verify.exact.oracle import softmax_reference


def qkv(B=2, H=4, G=4, T=6, S=None, d=3, dv=2, seed=0, scale=1.0):
    S = T if S is None else S
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: scale * torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return mk(B, H, T, d), mk(B, G, S, d), mk(B, G, S, dv)


def _mask_from_d15(T, S, left, right):
    return torch.tensor(
        [[d15.window_visible(t, s, T, S, left, right) for s in range(S)] for t in range(T)]
    )


# -- grouped kv heads ---------------------------------------------------------------------------
@pytest.mark.parametrize("G", [1, 2, 4])
def test_gqa_is_mha_on_interleaved_heads(G):
    q, k, v = qkv(H=4, G=G, seed=1)
    out = softmax_attention(q, k, v, enable_gqa=True, causal=True)
    idx = torch.tensor([d15.kv_head(h, 4, G) for h in range(4)])
    ref = softmax_attention(q, k[:, idx], v[:, idx], causal=True)
    assert torch.equal(out, ref)  # the same operations on the same numbers
    if G == 2:  # the tiled map (repeat) is a different attention
        tiled = softmax_attention(q, k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1), causal=True)
        assert (tiled - out).abs().max() > 1e-3


def test_gqa_rejected_without_the_flag_or_a_divisor():
    q, k, v = qkv(H=4, G=2)
    with pytest.raises(ValueError, match="enable_gqa"):
        softmax_attention(q, k, v)
    q, k, v = qkv(H=4, G=3)
    with pytest.raises(ValueError, match="dividing 4"):
        softmax_attention(q, k, v, enable_gqa=True)


# -- windows --------------------------------------------------------------------------------------
@pytest.mark.parametrize("T,S", [(6, 6), (3, 7), (7, 3)])
@pytest.mark.parametrize("window", [(-1, 0), (2, 0), (1, 1), (0, -1), (2, 3)])
def test_window_is_its_d15_mask(T, S, window):
    assert torch.equal(window_mask(T, S, window), _mask_from_d15(T, S, *window))
    q, k, v = qkv(T=T, S=S, seed=2)
    out = softmax_attention(q, k, v, window=window)
    ref = softmax_attention(q, k, v, attn_mask=_mask_from_d15(T, S, *window))
    assert torch.equal(out, ref)
    wide = (window[0] + 1 if window[0] >= 0 else -1, window[1])  # one key too wide on the left
    if wide != window and not torch.equal(
        _mask_from_d15(T, S, *wide), _mask_from_d15(T, S, *window)
    ):
        assert not torch.equal(softmax_attention(q, k, v, window=wide), out)


def test_causal_window_is_causal_and_bottom_right():
    q, k, v = qkv(T=5, seed=3)
    assert torch.equal(
        softmax_attention(q, k, v, window=(-1, 3), causal=True),  # causal sets right = 0
        softmax_attention(q, k, v, causal=True),
    )
    q, k, v = qkv(T=2, S=5, seed=3)  # causal T != S through a window: bottom-right aligned
    out = softmax_attention(q, k, v, window=(-1, -1), causal=True)
    ref = softmax_attention(q, k, v, attn_mask=_mask_from_d15(2, 5, -1, 0))
    assert torch.equal(out, ref)
    assert torch.equal(out[:, :, -1], softmax_attention(q[:, :, -1:], k, v)[:, :, 0])


@pytest.mark.parametrize("bad", [(1,), (1, 2, 3), (1.0, 0), (-2, 0), "1,0"])
def test_bad_window(bad):
    q, k, v = qkv()
    with pytest.raises((TypeError, ValueError), match="window"):
        softmax_attention(q, k, v, window=bad)


# -- ALiBi ---------------------------------------------------------------------------------------
def _alibi_as_extra_dims(q, k, slopes, c):
    """q, k with two extra coordinates whose scaled product is the ALiBi bias -m (t' - s).

    c (q', k') = c q.k + c (t' (-m/c) + 1 (m s / c)) = c q.k - m (t' - s): causal ALiBi is plain
    causal softmax on these inputs, exactly in exact arithmetic (D12).
    """
    B, H, T, _ = q.shape
    S = k.shape[2]
    m = torch.tensor(slopes, dtype=torch.float64)[None, :, None]
    tq = (torch.arange(T, dtype=torch.float64) + (S - T))[None, None, :].expand(B, H, T)
    sk = torch.arange(S, dtype=torch.float64)[None, None, :].expand(B, H, S)
    q2 = torch.cat([q, tq[..., None], torch.ones(B, H, T, 1, dtype=torch.float64)], -1)
    k2 = torch.cat([k, (-m / c).expand(B, H, S)[..., None], (m * sk / c)[..., None]], -1)
    return q2, k2


def test_alibi_matches_mpmath_within_d10():
    """Against the exact ALiBi softmax (mpmath on the augmented inputs). Bound: D10's model for
    softmax on the augmented inputs (d + 2 terms). Ours rounds c q.k (d terms), then subtracts
    m |t' - s|: its score error is at most the augmented dot product's, whose sum of |terms|
    includes m t' + m s >= m |t' - s|, so the augmented model's bound covers it."""
    q, k, v = qkv(B=1, H=4, T=5, d=3, seed=4, scale=1.5)
    slopes = d12.alibi_slopes(4)
    c = 1 / math.sqrt(3)
    q2, k2 = _alibi_as_extra_dims(q, k, slopes, c)
    exact = softmax_reference(q2, k2, v, causal=True, scale=c)
    ref, bound = oracle_bound("exp", exact, q2, k2, v, dtype=torch.float64, causal=True, scale=c)
    out = softmax_attention(q, k, v, causal=True, alibi_slopes=slopes)
    assert_within(out, ref, bound, "alibi")
    # faulty twins: the bias sign flipped, the slopes in reverse head order
    flipped = [-m for m in slopes]
    q3, k3 = _alibi_as_extra_dims(q, k, flipped, c)
    wrong = softmax_attention(q3, k3, v, causal=True, scale=c)
    assert ((wrong - ref).abs() > bound).any()
    reversed_out = softmax_attention(q, k, v, causal=True, alibi_slopes=slopes[::-1])
    assert ((reversed_out - ref).abs() > bound).any()


def test_alibi_zero_slopes_is_plain_softmax():
    q, k, v = qkv(seed=5)
    assert torch.equal(
        softmax_attention(q, k, v, causal=True, alibi_slopes=[0.0] * 4),
        softmax_attention(q, k, v, causal=True),
    )


def test_bad_alibi_slopes():
    q, k, v = qkv(H=4)
    with pytest.raises(ValueError, match="alibi_slopes: expected 4"):
        softmax_attention(q, k, v, alibi_slopes=[0.5, 0.25])
    with pytest.raises(ValueError, match="alibi_slopes"):
        softmax_attention(q, k, v, alibi_slopes=[0.5, -0.25, 0.1, 0.1])
    with pytest.raises(TypeError, match="alibi_slopes"):
        softmax_attention(q, k, v, alibi_slopes="0.5")


# -- softcapping ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cap", [0.5, 2.0])
def test_softcap_weights_in_d13_range(cap):
    """Each normalized weight lies in D13's range (1/(1+(S-1)e^{2C}), 1/(1+(S-1)e^{-2C})), even
    for scores of 1e4; read out with one-hot values. Slack: the weight is exp / (sum of S exps),
    each float64 exp within 1 ulp and the sum within gamma_S (D10), so a relative
    gamma_{S+2}."""
    S = 6
    q, k, _ = qkv(B=1, H=1, G=1, T=4, S=S, d=2, seed=6, scale=100.0)
    v = torch.eye(S, dtype=torch.float64)[None, None]
    w = softmax_attention(q, k, v, softcap=cap, scale=1.0)
    lo, hi = d13.weight_range(cap, S)
    slack = gamma(S + 2, U[torch.float64])
    assert (w >= lo * (1 - slack)).all() and (w <= hi * (1 + slack)).all()
    # without the cap the same scores give weights outside that range: the check can fail
    w_plain = softmax_attention(q, k, v, scale=1.0)
    assert ((w_plain > hi * (1 + slack)) | (w_plain < lo * (1 - slack))).any()


def test_softcap_before_the_mask():
    """A masked key has no influence whatever its capped score (softcap applied before the
    mask, as FlashAttention does); a cap applied after an additive -inf mask would give
    C tanh(-inf) = -C, a finite weight."""
    q, k, v = qkv(B=1, H=1, G=1, T=3, S=4, seed=7)
    mask = torch.tensor([True, True, False, True])
    out = softmax_attention(q, k, v, softcap=1.0, attn_mask=mask)
    ref = softmax_attention(q, k[:, :, mask], v[:, :, mask], softcap=1.0)
    # the same weights and values; only the order of the <= 4 products in each output sum may
    # differ (exact zero terms change nothing): |diff| <= 2 gamma_4 sum_s w_s |v_s| (D10), and
    # the weights sum to 1 (plus the division's u: 4 gamma_4 covers both)
    vmax = v.abs().max()
    assert_within(out, ref, torch.zeros_like(ref) + 4 * gamma(4, U[torch.float64]) * vmax, "masked")
    s = (q @ k.transpose(-1, -2)) / math.sqrt(3)
    s = s.masked_fill(~mask, float("-inf"))
    after = torch.softmax(1.0 * torch.tanh(s / 1.0), -1) @ v  # cap after the mask: the fault
    assert (after - out).abs().max() > 1e-3


def test_bad_softcap():
    q, k, v = qkv()
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="softcap"):
            softmax_attention(q, k, v, softcap=bad)
    with pytest.raises(TypeError, match="softcap"):
        softmax_attention(q, k, v, softcap="1")


# -- sigmoid attention ---------------------------------------------------------------------------
def test_sigmoid_row_sums_in_d14_bounds():
    """With v = 1 the output is the row's weight sum, in D14's [S sigma(b - r), S sigma(b + r)]
    for r = max |c q.k| (slack gamma_{S+2}: sigmoid, scores and the S-term sum, D10)."""
    S = 8
    q, k, _ = qkv(B=1, H=2, G=2, T=5, S=S, seed=8)
    v = torch.ones(1, 2, S, 1, dtype=torch.float64)
    b = -math.log(S)
    out = sigmoid_attention(q, k, v, bias=b)
    r = float(((q @ k.transpose(-1, -2)) / math.sqrt(3)).abs().max())
    lo, hi = d14.row_sum_bounds(r, b, S)
    slack = gamma(S + 2, U[torch.float64])
    assert (out >= lo * (1 - slack)).all() and (out <= hi * (1 + slack)).all()
    # each weight against D14's sigma: one-hot values read the weights out
    w = sigmoid_attention(
        q, k, torch.eye(S, dtype=torch.float64)[None, None].expand(1, 2, S, S), bias=b
    )
    x = (1 / math.sqrt(3)) * (q @ k.transpose(-1, -2)) + b  # the scores as ours rounds them
    ref = torch.tensor(
        [[[[d14.sigmoid(float(e)) for e in row] for row in hd] for hd in x[0]]],
        dtype=torch.float64,
    )  # two sigmoid evaluations, each within 2 ulps: 4u relative
    assert_within(w, ref, ref.abs() * gamma(4, U[torch.float64]), "sigmoid weights")
    # the bias sign flipped (+ln S): the per-weight check rejects it
    eye = torch.eye(S, dtype=torch.float64)[None, None].expand(1, 2, S, S)
    flipped = sigmoid_attention(q, k, eye, bias=-b)
    assert ((flipped - ref).abs() > ref.abs() * gamma(4, U[torch.float64])).all()


def test_sigmoid_window_and_gqa_follow_the_same_structure():
    q, k, v = qkv(H=4, G=2, T=5, seed=9)
    out = sigmoid_attention(q, k, v, bias=-1.0, window=(1, 0), enable_gqa=True)
    idx = torch.tensor([d15.kv_head(h, 4, 2) for h in range(4)])
    ref = sigmoid_attention(
        q, k[:, idx], v[:, idx], bias=-1.0, attn_mask=_mask_from_d15(5, 5, 1, 0)
    )
    assert torch.equal(out, ref)

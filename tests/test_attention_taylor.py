"""Taylor-N attention: every form, basis and denominator (D1, D2, D4, D7; fault classes).

Tolerances: ``test_attention_bounds.output_bound`` (the D10 error model of ``verify.exact.errors``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_attention_bounds import U, assert_within, gamma, output_bound

from derivations.feature_maps import feature_count
from verify.attention import taylor_attention
from verify.attention.feature_maps import FEATURE_BUDGET
from verify.exact.oracle import taylor_reference
from verify.strategies import attention_inputs, shapes

DENOMS = ("sum", "none", "l2", "rms", "layernorm", "count")
DTYPES = (torch.float64, torch.float32)


def rand(*shape, dtype=torch.float64, seed=0, scale=0.7):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, generator=g, dtype=torch.float64)).to(dtype)


def qkv(B=2, H=2, T=7, S=None, d=3, dv=2, dtype=torch.float64, seed=0, scale=0.7):
    S = T if S is None else S
    return (
        rand(B, H, T, d, dtype=dtype, seed=seed, scale=scale),
        rand(B, H, S, d, dtype=dtype, seed=seed + 1, scale=scale),
        rand(B, H, S, dv, dtype=dtype, seed=seed + 2, scale=1.0),
    )


def all_forms(T):
    yield "parallel", {}
    for basis in ("symmetric", "tensor"):
        yield f"recurrent/{basis}", dict(form="recurrent", basis=basis)
        for C in sorted({1, 2, 3, 5, T, T + 3}):
            yield f"chunked/{basis}/C={C}", dict(form="chunked", basis=basis, chunk_size=C)


# ------------------------------------------------------------------ against the mpmath oracle
@pytest.mark.parametrize("order", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_parallel_matches_mpmath_every_denominator(order, causal):
    T, S = (4, 4) if causal else (3, 5)
    q, k, v = qkv(B=1, H=2, T=T, S=S, d=3, dv=3, seed=order)
    for denom in DENOMS:
        exact = taylor_reference(q, k, v, order=order, causal=causal, denominator=denom)
        out = taylor_attention(q, k, v, order=order, causal=causal, denominator=denom)
        _, bound = output_bound(
            f"taylor:{order}", q, k, v, dtype=torch.float64, causal=causal, denominator=denom
        )
        assert torch.isfinite(bound).all()
        assert_within(out, torch.from_numpy(exact.float64), bound, f"N={order} {denom}")


@pytest.mark.parametrize("denom", DENOMS)
def test_eps_and_scale_match_mpmath(denom):
    q, k, v = qkv(B=1, H=1, T=4, d=2, dv=3, seed=3)
    kw = dict(order=2, causal=True, denominator=denom, eps=0.25, scale=0.3)
    exact = taylor_reference(q, k, v, **kw)
    out = taylor_attention(q, k, v, **kw)
    _, bound = output_bound("taylor:2", q, k, v, dtype=torch.float64, causal=True,
                            denominator=denom, eps=0.25, scale=0.3)  # fmt: skip
    assert_within(out, torch.from_numpy(exact.float64), bound, denom)


# ------------------------------------------------------------------ forms agree (D2)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("order", [0, 1, 2, 3, 4])
def test_all_forms_agree(order, causal, dtype):
    """parallel == recurrent == chunked (C = 1, 2, 3, 5, T, > T), both bases (faults 1, 2)."""
    T = 7
    q, k, v = qkv(T=T, dtype=dtype, seed=10 + order)
    ref, bound = output_bound(f"taylor:{order}", q, k, v, dtype=dtype, causal=causal)
    assert torch.isfinite(bound).all()
    for name, kw in all_forms(T):
        out = taylor_attention(q, k, v, order=order, causal=causal, **kw)
        assert out.dtype == dtype and out.shape == (2, 2, T, 2)
        assert_within(out, ref, bound, f"{name} N={order}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("denom", DENOMS)
def test_forms_agree_every_denominator(denom, dtype):
    q, k, v = qkv(T=6, dv=3, seed=20, dtype=dtype)
    for order in (2, 3):
        ref, bound = output_bound(
            f"taylor:{order}", q, k, v, dtype=dtype, causal=True, denominator=denom
        )
        for name, kw in all_forms(6):
            out = taylor_attention(q, k, v, order=order, causal=True, denominator=denom, **kw)
            assert_within(out, ref, bound, f"{name} N={order} {denom}")


@pytest.mark.parametrize("group_elements", [1, 200])
def test_chunk_groups_carry_the_state(monkeypatch, group_elements):
    """Long inputs are processed in cache-sized groups of chunks; force tiny groups here."""
    from verify.attention import _scan

    monkeypatch.setattr(_scan, "GROUP_ELEMENTS", group_elements)
    q, k, v = qkv(T=11, seed=25)
    mask = torch.ones(2, 1, 1, 11, dtype=torch.bool)
    mask[0, ..., 4] = False
    ref, bound = output_bound("taylor:2", q, k, v, dtype=torch.float64, causal=True,
                              attn_mask=mask)  # fmt: skip
    for basis in ("symmetric", "tensor"):
        for C in (1, 2, 3):
            out = taylor_attention(q, k, v, order=2, causal=True, form="chunked", basis=basis,
                                   chunk_size=C, attn_mask=mask)  # fmt: skip
            assert_within(out, ref, bound, f"{basis} C={C}")


def test_faults1_chunked_reads_the_state_before_the_chunk():
    """fault class 1 trigger: T = 12, chunk 3, float32."""
    q, k, v = qkv(B=1, H=1, T=12, d=4, dv=4, dtype=torch.float32, seed=5)
    ref, bound = output_bound("taylor:2", q, k, v, dtype=torch.float32, causal=True)
    out = taylor_attention(q, k, v, order=2, causal=True, form="chunked", chunk_size=3)
    assert_within(out, ref, bound, "chunked C=3")


def test_non_causal_t_not_s_all_forms():
    q, k, v = qkv(T=3, S=8, seed=6)
    ref, bound = output_bound("taylor:2", q, k, v, dtype=torch.float64)
    for name, kw in all_forms(8):
        assert_within(taylor_attention(q, k, v, order=2, **kw), ref, bound, name)


# ------------------------------------------------------------------ low precision (D10)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("form", ["parallel", "recurrent", "chunked"])
def test_low_precision_tracks_float64_on_rounded_inputs(dtype, form):
    """Output dtype = input dtype; error <= fp32 accumulation bound + one rounding to dtype."""
    q, k, v = qkv(T=9, dtype=dtype, seed=7)
    ref, bound32 = output_bound("taylor:2", q, k, v, dtype=torch.float32, causal=True)
    out = taylor_attention(q, k, v, order=2, causal=True, form=form, chunk_size=4)
    assert out.dtype == dtype
    bound = bound32 + U[dtype] * (ref.abs() + bound32)
    assert_within(out, ref, bound, f"{dtype} {form}")


def test_faults11_float16_long_sequence_stays_finite():
    """fault class 11: fp16, a few thousand tokens, positive scores: the denominator exceeds the
    float16 range (65504), so it must accumulate in float32; output within the D10 bound."""
    T = 3000
    g = torch.Generator().manual_seed(8)
    q = (2.0 * torch.randn(1, 1, T, 8, generator=g).abs()).half()
    k = (2.0 * torch.randn(1, 1, T, 8, generator=g).abs()).half()
    v = torch.randn(1, 1, T, 2, generator=g).half()
    D = taylor_attention(q.double(), k.double(), torch.ones_like(v[..., :1]).double(), order=2,
                         causal=True, denominator="none")  # fmt: skip
    assert D.max() > 65504  # the trigger: a float16 accumulator would overflow
    out = taylor_attention(q, k, v, order=2, causal=True, form="chunked")
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    ref, bound32 = output_bound("taylor:2", q, k, v, dtype=torch.float32, causal=True)
    assert_within(out, ref, bound32 + U[torch.float16] * (ref.abs() + bound32), "fp16 T=3000")


# ------------------------------------------------------------------ masks (D6, fault class 8)
def _key_padding(B=2, S=7):
    m = torch.ones(B, 1, 1, S, dtype=torch.bool)
    m[0, ..., 2] = m[0, ..., 5] = False
    m[1, ..., 0] = False
    return m


@pytest.mark.parametrize("form", ["parallel", "recurrent", "chunked"])
@pytest.mark.parametrize("causal", [False, True])
def test_key_padding_mask_every_form(form, causal):
    q, k, v = qkv(seed=9)
    mask = _key_padding()
    ref, bound = output_bound("taylor:3", q, k, v, dtype=torch.float64, causal=causal,
                              attn_mask=mask)  # fmt: skip
    out = taylor_attention(q, k, v, order=3, causal=causal, attn_mask=mask, form=form,
                           chunk_size=3)  # fmt: skip
    assert_within(out, ref, bound, form)


@pytest.mark.parametrize("form", ["parallel", "recurrent", "chunked"])
def test_large_finite_masked_values_have_no_influence(form):
    """Masked keys/values hold 1e10: the output is bitwise that of zeros there (fault class 8)."""
    q, k, v = qkv(seed=11, dtype=torch.float32)
    mask = _key_padding()
    k2, v2 = k.clone(), v.clone()
    hidden = ~mask.expand(2, 2, 1, 7)[:, :, 0]
    k2[hidden] = 1e10
    v2[hidden] = -1e10
    k0, v0 = k.clone(), v.clone()
    k0[hidden] = 0
    v0[hidden] = 0
    kw = dict(order=4, causal=True, attn_mask=mask, form=form, chunk_size=3)
    q1 = q.clone().requires_grad_()
    out = taylor_attention(q1, k2.requires_grad_(), v2.requires_grad_(), **kw)
    assert torch.equal(out, taylor_attention(q, k0, v0, **kw))
    out.sum().backward()
    assert torch.isfinite(q1.grad).all() and torch.isfinite(k2.grad).all()
    assert (k2.grad[hidden] == 0).all() and (v2.grad[hidden] == 0).all()


def test_general_mask_parallel_large_values_no_influence():
    q, k, v = qkv(B=1, H=1, T=5, seed=12)
    mask = torch.rand(5, 5, generator=torch.Generator().manual_seed(0)) > 0.4
    mask[:, 0] = True
    k2 = k.clone()
    k2[0, 0, 3] = 1e10  # visible to some queries only: where it is masked it has no influence
    ref = taylor_attention(q, k, v, order=2, attn_mask=mask)
    out = taylor_attention(q, k2, v, order=2, attn_mask=mask)
    rows = ~mask[:, 3]
    assert torch.equal(out[0, 0, rows], ref[0, 0, rows])


@pytest.mark.parametrize("form", ["parallel", "recurrent", "chunked"])
@pytest.mark.parametrize("denom", DENOMS)
def test_empty_rows_give_zeros_and_finite_gradients(form, denom):
    q, k, v = (x.requires_grad_() for x in qkv(dv=3, seed=13))
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    mask[0] = False  # batch 0 sees nothing
    mask[1, ..., :2] = False  # causal rows 0 and 1 of batch 1 see nothing
    out = taylor_attention(q, k, v, order=3, causal=True, attn_mask=mask, form=form,
                           denominator=denom, chunk_size=2)  # fmt: skip
    assert (out[0] == 0).all() and (out[1, :, :2] == 0).all()
    assert torch.isfinite(out).all()
    out.square().sum().backward()
    for x in (q, k, v):
        assert torch.isfinite(x.grad).all()
    assert (q.grad[0] == 0).all() and (k.grad[0] == 0).all()


def test_state_forms_reject_query_dependent_masks():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="attn_mask.*key-padding"):
        taylor_attention(q, k, v, order=2, form="chunked",
                         attn_mask=torch.ones(7, 7, dtype=torch.bool).tril())  # fmt: skip


# ------------------------------------------------------------------ causality (fault class 9)
@pytest.mark.parametrize("form", ["parallel", "recurrent", "chunked"])
def test_future_tokens_do_not_change_past_outputs(form):
    q, k, v = qkv(T=8, seed=14)
    base = taylor_attention(q, k, v, order=2, causal=True, form=form, chunk_size=3)
    for t in range(8):
        q2, k2, v2 = q.clone(), k.clone(), v.clone()
        q2[:, :, t + 1 :] += 5.0
        k2[:, :, t + 1 :] -= 3.0
        v2[:, :, t + 1 :] *= -7.0
        out = taylor_attention(q2, k2, v2, order=2, causal=True, form=form, chunk_size=3)
        assert torch.equal(out[:, :, : t + 1], base[:, :, : t + 1]), t


# ------------------------------------------------------------------ gradients
@pytest.mark.parametrize(
    "kw",
    [
        dict(form="parallel"),
        dict(form="recurrent", basis="symmetric"),
        dict(form="recurrent", basis="tensor"),
        dict(form="chunked", basis="symmetric", chunk_size=3),
        dict(form="chunked", basis="tensor", chunk_size=2),
    ],
    ids=lambda kw: "/".join(str(x) for x in kw.values()),
)
@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_tiny(kw, causal):
    q, k, v = (x.requires_grad_() for x in qkv(B=1, H=1, T=4, d=2, dv=2, seed=15))
    for order, denom in ((2, "sum"), (3, "l2"), (1, "layernorm")):

        def f(q, k, v, order=order, denom=denom):
            return taylor_attention(q, k, v, order=order, causal=causal, denominator=denom, **kw)

        assert torch.autograd.gradcheck(f, (q, k, v))


def test_faults5_gradients_of_every_form_match_the_parallel_reference():
    """fault class 5 trigger shape; float64 autograd through the parallel form is the reference.

    Calibrated bound (labelled as such): gamma_K of the forward model times the
    gradient magnitude, K = S + m + 2N(d+2) + 13 (feature count m of the tensor basis).
    """
    B, T, H, d = 2, 64, 2, 8
    g = torch.Generator().manual_seed(16)
    q = torch.rand(B, H, T, d, generator=g, dtype=torch.float64)
    k = torch.rand(B, H, T, d, generator=g, dtype=torch.float64)
    v = torch.randn(B, H, T, d, generator=g, dtype=torch.float64)
    w = torch.randn(B, H, T, d, generator=g, dtype=torch.float64)

    def grads(**kw):
        xs = [x.clone().requires_grad_() for x in (q, k, v)]
        (taylor_attention(*xs, order=2, causal=True, **kw) * w).sum().backward()
        return [x.grad for x in xs]

    ref = grads()
    K = T + (1 + d + d * d) + 2 * 2 * (d + 2) + 13
    for kw in (dict(form="recurrent"), dict(form="chunked", chunk_size=5)):
        for name, a, b in zip("qkv", grads(**kw), ref):
            tol = gamma(K, U[torch.float64]) * 4 * b.abs().max()
            assert (a - b).abs().max() <= tol, (kw, name)


def test_single_key_output_is_v_and_dq_vanishes():
    """fault class 12: one key => o = v exactly (weights kappa/kappa) and dq = 0 within rounding."""
    q = rand(2, 2, 3, 4, seed=17).requires_grad_()
    k, v = rand(2, 2, 1, 4, seed=18), rand(2, 2, 1, 3, seed=19)
    for order in (0, 1, 2, 4):
        out = taylor_attention(q, k, v, order=order)
        assert_within(out, v.expand(2, 2, 3, 3), 2 * U[torch.float64] * v.abs(), f"N={order}")
        if order == 0:  # kappa_0 = 1 does not depend on q at all
            assert not out.requires_grad
            continue
        (dq,) = torch.autograd.grad(out.sum(), q)
        # d o / d kappa = (v - o)/D cancels to rounding: |dq| <= gamma_4 |v| kappa'(x) c |k| / D
        bound = gamma(8, U[torch.float64]) * 3 * v.abs().amax() * 4 * k.abs().amax()
        assert dq.abs().max() <= bound


# ------------------------------------------------------------------ signed kernels (D4)
def test_odd_order_vanishing_denominator_gives_ieee_result_unless_eps():
    """N = 1, scale 1, d = 1: scores (-2, 0) give kappa_1 = (-1, 1) and D = 0 exactly."""
    q = torch.ones(1, 1, 1, 1, dtype=torch.float64)
    k = torch.tensor([-2.0, 0.0], dtype=torch.float64).reshape(1, 1, 2, 1)
    v = torch.tensor([1.0, 3.0], dtype=torch.float64).reshape(1, 1, 2, 1)
    for form in ("parallel", "recurrent", "chunked"):
        out = taylor_attention(q, k, v, order=1, scale=1.0, form=form)
        assert torch.isinf(out).all() and out.item() > 0  # N = 2, D = 0: +inf, no silent eps
        out = taylor_attention(q, k, v, order=1, scale=1.0, form=form, eps=0.5)
        assert out.item() == 4.0  # N / (D + eps) = 2 / 0.5


def test_theory_d4_negative_weights_example():
    """D4: N = 1, scores (-3, 0.5, 1) give weights (-4/3, 1, 4/3)."""
    q = torch.ones(1, 1, 1, 1, dtype=torch.float64)
    k = torch.tensor([-3.0, 0.5, 1.0], dtype=torch.float64).reshape(1, 1, 3, 1)
    v = torch.eye(3, dtype=torch.float64).reshape(1, 1, 3, 3)
    out = taylor_attention(q, k, v, order=1, scale=1.0)
    want = torch.tensor([-4 / 3, 1.0, 4 / 3], dtype=torch.float64)
    assert_within(out[0, 0, 0], want, gamma(6, U[torch.float64]) * 4 * torch.ones(3), "D4")


# ------------------------------------------------------------------ budget and scale
def test_feature_budget_raises_before_building():
    q, k, v = qkv(B=1, H=1, T=2, d=64, dv=1)
    count = feature_count(4, 64, "tensor")  # 1 + 64 + 64^2 + 64^3 + 64^4
    assert count == 17043521
    with pytest.raises(ValueError, match=rf"feature_budget.*order=4, d=64.*'tensor'.*{count}"):
        taylor_attention(q, k, v, order=4, basis="tensor", form="recurrent")
    with pytest.raises(ValueError, match="feature_budget"):
        taylor_attention(q, k, v, order=2, form="chunked", feature_budget=100)
    assert FEATURE_BUDGET == 2**24
    # the parallel form builds no features: no budget applies
    assert torch.isfinite(taylor_attention(q, k, v, order=4, basis="tensor")).all()


def test_default_scale_is_one_over_sqrt_d_and_applied_once():
    q, k, v = qkv(B=1, H=1, T=3, d=4, dv=2, seed=21)
    for form in ("parallel", "recurrent", "chunked"):
        a = taylor_attention(q, k, v, order=3, form=form)
        b = taylor_attention(q, k, v, order=3, form=form, scale=0.5)  # 1/sqrt(4)
        c_ = taylor_attention(q * 0.5, k, v, order=3, form=form, scale=1.0)
        exact = taylor_reference(q, k, v, order=3)
        _, bound = output_bound("taylor:3", q, k, v, dtype=torch.float64)
        for out in (a, b, c_):
            assert_within(out, torch.from_numpy(exact.float64), 2 * bound, form)
        assert not np.allclose(
            taylor_attention(q, k, v, order=3, form=form, scale=0.25).numpy(), exact.float64
        )


def test_order_zero_is_mean_of_visible_values():
    q, k, v = qkv(T=5, seed=22)
    for name, kw in all_forms(5):
        out = taylor_attention(q, k, v, order=0, causal=True, **kw)
        want = v.cumsum(2) / torch.arange(1, 6, dtype=torch.float64)[:, None]
        assert_within(out, want, gamma(8, U[torch.float64]) * v.abs().cumsum(2) / 1.0, name)


def test_convergence_to_softmax_within_d4_bound():
    """D4: |o_N - o| <= 2 delta/(1 - delta) max|v| with delta = delta_N(r), r = max |score|."""
    from verify.attention import softmax_attention

    q, k, v = qkv(B=1, H=2, T=6, d=4, dv=3, seed=23, scale=0.8)
    r = (q @ k.transpose(-1, -2) / 2).abs().max().item()
    sm = softmax_attention(q, k, v)
    for N in (4, 6, 8):
        # delta_N(r) = max(|g(-r)|, |g(r)|), g(x) = 1 - kappa_N(x) e^{-x} (D4)
        kap = lambda x, N=N: sum(x**n / math.factorial(n) for n in range(N + 1))  # noqa: E731
        delta = max(abs(1 - kap(-r) * math.exp(r)), abs(1 - kap(r) * math.exp(-r)))
        assert delta < 0.5
        bound = 2 * delta / (1 - delta) * v.abs().max().item() + 1e-12
        assert (taylor_attention(q, k, v, order=N) - sm).abs().max().item() <= bound


def test_large_norm_queries_with_small_keys_do_not_overflow_the_features():
    """|q| ~ 1e18, |k| ~ 1e-18 in float32: the scores are O(1) but q^4 alone overflows; the
    recurrent/chunked forms rebalance q, k by a power of two (exact) before the feature map."""
    q, k, v = qkv(B=1, H=2, T=5, d=3, dtype=torch.float32, seed=24)
    q, k = q * 2.0**60, k * 2.0**-60  # exact scaling: the scores are those of (q, k)
    ref, bound = output_bound("taylor:4", q, k, v, dtype=torch.float32, causal=True)
    for name, kw in all_forms(5):
        out = taylor_attention(q, k, v, order=4, causal=True, **kw)
        assert torch.isfinite(out).all(), name
        assert_within(out, ref, bound, name)


# ------------------------------------------------------------------ property (hypothesis)
@given(
    inputs=attention_inputs(
        shapes(queries=(1, 9), dim=(1, 3), value_dim=(1, 3)),
        dtype=[torch.float64, torch.float32],
        radius=2.0,
        cases=("random", "zeros", "equal_keys", "large_norm", "positive"),
    ),
    order=st.sampled_from([0, 2, 4]),
    basis=st.sampled_from(["symmetric", "tensor"]),
    chunk=st.integers(1, 11),
)
def test_property_forms_agree_on_drawn_inputs(inputs, order, basis, chunk):
    """Even orders (positive kernel, D4): every form within the D10 bound of the reference."""
    q, k, v = inputs.q, inputs.k, inputs.v
    kw = dict(order=order, causal=inputs.causal, scale=inputs.scale)
    ref, bound = output_bound(f"taylor:{order}", q, k, v, dtype=q.dtype, causal=inputs.causal,
                              scale=inputs.scale)  # fmt: skip
    assert torch.isfinite(bound).all()
    for form in ("parallel", "recurrent", "chunked"):
        out = taylor_attention(q, k, v, form=form, basis=basis, chunk_size=chunk, **kw)
        assert_within(out, ref, bound, form)

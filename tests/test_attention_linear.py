"""Kernel linear attention: every feature map and form (D3, D9; fault classes 4, 6, 8, 9).

Tolerances: ``verify.errors`` (D10) through ``test_attention_bounds``; the test's own
feature map ``_square_one``: ``callable_map_bound`` (derived there from ``derivations.rounding``).
"""

from __future__ import annotations

import pytest
import torch
from test_attention_bounds import (
    U,
    assert_within,
    callable_map_bound,
    gamma,
    oracle_bound,
    output_bound,
)

from verify.attention import favor_projection, linear_attention
from verify.exact.oracle import linear_reference

FORMS = [
    ("parallel", {}),
    ("recurrent", dict(form="recurrent")),
    *[(f"chunked/C={C}", dict(form="chunked", chunk_size=C)) for C in (1, 2, 3, 5, 7, 10)],
]


def qkv(B=2, H=2, T=7, S=None, d=3, dv=2, dtype=torch.float64, seed=0, scale=0.7, pos=False):
    S = T if S is None else S
    g = torch.Generator().manual_seed(seed)

    def mk(*s, sc=scale, p=pos):
        x = sc * torch.randn(*s, generator=g, dtype=torch.float64)
        return (x.abs() if p else x).to(dtype)

    return mk(B, H, T, d), mk(B, H, S, d), mk(B, H, S, dv, sc=1.0, p=False)


def _square_one(x):  # a user feature map (..., d) -> (..., d + 1): kernel sum q_i^2 k_i^2 + 1
    return torch.cat([x * x, torch.ones_like(x[..., :1])], -1)


def _square_one_mp(xs):
    return [xi * xi for xi in xs] + [1]


PROJ = favor_projection(3, 8, generator=torch.Generator().manual_seed(42), dtype=torch.float64)

#: name -> (feature_map argument, extra kwargs, bound-model kernel, oracle feature map, pos)
MAPS = {
    "identity": ("identity", {}, "identity", "identity", True),
    "elu1": ("elu1", {}, "elu1", "elu1", False),
    "relu": ("relu", {}, "relu", "relu", True),
    "taylor:2": ("taylor:2", {}, "taylor:2", "taylor:2", False),
    "taylor:3": ("taylor:3", {}, "taylor:3", "taylor:3", False),
    "favor": ("favor", dict(projection=PROJ), "favor", "favor", False),
    "callable": (_square_one, {}, None, _square_one_mp, False),
}


def bound_for(name, q, k, v, dtype, proj=PROJ, **kw):
    """Reference and bound; ``proj`` must be the projection the implementation used.

    ``callable``: the exact output (mpmath) and ``callable_map_bound`` with feature error u:
    at scale 1 each feature is fl(x_i * x_i) (one rounding) or the constant 1 (exact).
    """
    _, _, model, _, _ = MAPS[name]
    if name == "callable":
        return callable_map_bound(_square_one, _square_one_mp, U[dtype], q, k, v, dtype=dtype,
                                  **kw)  # fmt: skip
    return output_bound(
        model, q, k, v, dtype=dtype, projection=proj if name == "favor" else None, **kw
    )


@pytest.mark.parametrize("name", list(MAPS))
@pytest.mark.parametrize("causal", [False, True])
def test_parallel_matches_mpmath(name, causal):
    fmap, extra, _, omap, pos = MAPS[name]
    T, S = (4, 4) if causal else (3, 5)
    q, k, v = qkv(B=1, H=2, T=T, S=S, seed=1, pos=pos)
    oextra = dict(projection=PROJ) if name == "favor" else {}
    exact = linear_reference(q, k, v, feature_map=omap, causal=causal, **oextra)
    out = linear_attention(q, k, v, feature_map=fmap, causal=causal, **extra)
    if name == "callable":
        ref, bound = callable_map_bound(_square_one, _square_one_mp, U[torch.float64], q, k, v,
                                        dtype=torch.float64, causal=causal)  # fmt: skip
    else:
        ref, bound = oracle_bound(MAPS[name][2], exact, q, k, v, dtype=torch.float64,
                                  causal=causal, **oextra)  # fmt: skip
    assert torch.isfinite(bound).all()
    assert_within(out, ref, bound, name)


@pytest.mark.parametrize("name", list(MAPS))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_all_forms_agree(name, causal, dtype):
    fmap, extra, _, _, pos = MAPS[name]
    if name == "favor":
        extra = dict(projection=PROJ.to(dtype))
    q, k, v = qkv(dtype=dtype, seed=2, pos=pos)
    ref, bound = bound_for(name, q, k, v, dtype, proj=PROJ.to(dtype), causal=causal)
    assert torch.isfinite(bound).all()
    for form, kw in FORMS:
        out = linear_attention(q, k, v, feature_map=fmap, causal=causal, **extra, **kw)
        assert out.dtype == dtype
        assert_within(out, ref, bound, f"{name} {form}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("denom", ["none", "l2", "rms", "layernorm", "count"])
def test_denominators_every_form(denom, dtype):
    q, k, v = qkv(dv=3, seed=3, dtype=dtype)
    ref, bound = bound_for("elu1", q, k, v, dtype, causal=True, denominator=denom)
    for form, kw in FORMS:
        out = linear_attention(q, k, v, feature_map="elu1", causal=True, denominator=denom, **kw)
        assert_within(out, ref, bound, f"{denom} {form}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["elu1", "taylor:2", "favor"])
def test_low_precision(dtype, name):
    fmap, extra, _, _, pos = MAPS[name]
    if name == "favor":
        extra = dict(projection=PROJ.float())
    q, k, v = qkv(T=9, dtype=dtype, seed=4, pos=pos)
    ref, bound = bound_for(name, q, k, v, dtype, proj=PROJ.float(), causal=True)  # two-level
    for form, kw in FORMS[:3]:
        out = linear_attention(q, k, v, feature_map=fmap, causal=True, **extra, **kw)
        assert out.dtype == dtype
        assert_within(out, ref, bound, f"{name} {form}")


# ------------------------------------------------------------------ scale semantics
def test_elementwise_scale_multiplies_q_before_the_map():
    q, k, v = qkv(seed=5)
    for fmap in ("elu1", "relu", "identity", _square_one):
        for _form, kw in FORMS[:3]:
            a = linear_attention(q, k, v, feature_map=fmap, scale=2.0, **kw)
            b = linear_attention(2 * q, k, v, feature_map=fmap, **kw)  # default scale 1
            # 2 q is exact: the same arithmetic, bit for bit (relu's 0/0 rows are nan in both)
            torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def test_exp_type_scale_is_the_score_scale():
    q, k, v = qkv(B=1, H=1, T=4, d=4, seed=6)
    for fmap, extra, omap in (
        ("taylor:2", {}, "taylor:2"),
        ("favor", dict(projection=PROJ[:, :3]), "favor"),
    ):
        qq, kk = (q[..., :3], k[..., :3]) if fmap == "favor" else (q, k)
        oextra = dict(projection=PROJ[:, :3]) if fmap == "favor" else {}
        for c in (None, 0.3):
            exact = linear_reference(qq, kk, v, feature_map=omap, scale=c, **oextra)
            model = "favor" if fmap == "favor" else "taylor:2"
            ref, bound = oracle_bound(model, exact, qq, kk, v, dtype=torch.float64, scale=c,
                                      **oextra)  # fmt: skip
            for form, kw in FORMS[:3]:
                out = linear_attention(qq, kk, v, feature_map=fmap, scale=c, **extra, **kw)
                assert_within(out, ref, bound, f"{fmap} {c} {form}")


# ------------------------------------------------------------------ fault classes 4 and 6
@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("form,kw", FORMS[:4])
def test_faults4_denominator_is_m_times_t_for_unit_features(m, form, kw):
    """Features identically one: the denominator (v == 1, mode none) at position t is m t."""
    T = 6
    ones = lambda x, m=m: torch.ones_like(x[..., :1]).expand(*x.shape[:-1], m)  # noqa: E731
    q, k, _ = qkv(B=2, H=1, T=T, seed=7)
    v = torch.ones(2, 1, T, 1, dtype=torch.float64)
    out = linear_attention(q, k, v, feature_map=ones, causal=True, denominator="none", **kw)
    want = m * torch.arange(1, T + 1, dtype=torch.float64)
    assert torch.equal(out[..., 0], want.expand(2, 1, T))  # integers: exact


@pytest.mark.parametrize("name", ["elu1", "taylor:2", "favor"])
def test_faults6_positive_features_give_convex_combinations(name):
    fmap, extra, _, _, _ = MAPS[name]
    q, k, v = qkv(T=2, d=3, seed=8)
    ones = torch.ones_like(v)
    for form, kw in FORMS:
        out = linear_attention(q, k, ones, feature_map=fmap, causal=True, **extra, **kw)
        ref, bound = bound_for(name, q, k, ones, torch.float64, causal=True)
        assert_within(out, torch.ones_like(out), bound, f"{name} {form} v=1")
        out = linear_attention(q, k, v, feature_map=fmap, causal=True, **extra, **kw)
        _, bound = bound_for(name, q, k, v, torch.float64, causal=True)
        lo = torch.cummin(v, 2).values
        hi = torch.cummax(v, 2).values
        assert ((out >= lo - bound) & (out <= hi + bound)).all(), form


# ------------------------------------------------------------------ masks and causality
@pytest.mark.parametrize("name", ["elu1", "taylor:2", "favor", "callable"])
def test_key_padding_mask_and_large_masked_values(name):
    fmap, extra, _, _, pos = MAPS[name]
    q, k, v = qkv(seed=9, pos=pos)
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    mask[0, ..., 3] = mask[1, ..., 0] = False
    hidden = ~mask.expand(2, 2, 1, 7)[:, :, 0]
    k2, v2 = k.clone(), v.clone()
    k2[hidden], v2[hidden] = 1e10, 1e10
    ref, bound = bound_for(name, q, k, v, torch.float64, causal=True, attn_mask=mask)
    for form, kw in FORMS:
        a = linear_attention(q, k, v, feature_map=fmap, causal=True, attn_mask=mask, **extra, **kw)
        assert_within(a, ref, bound, f"{name} {form}")
        kk, vv = k2.clone().requires_grad_(), v2.clone().requires_grad_()
        b = linear_attention(
            q, kk, vv, feature_map=fmap, causal=True, attn_mask=mask, **extra, **kw
        )
        assert torch.equal(a, b), form
        b.sum().backward()
        assert (kk.grad[hidden] == 0).all() and (vv.grad[hidden] == 0).all()


@pytest.mark.parametrize("form,kw", FORMS[:4])
def test_empty_rows_zero_with_finite_gradients(form, kw):
    q, k, v = (x.requires_grad_() for x in qkv(seed=10))
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    mask[0] = False
    mask[1, ..., :3] = False
    for name in ("elu1", "favor", "taylor:3", "relu"):
        fmap, extra, _, _, _ = MAPS[name]
        out = linear_attention(
            q,
            k,
            v,
            feature_map=fmap,
            causal=True,
            attn_mask=mask,
            eps=1e-3 if name == "relu" else 0.0,
            **extra,
            **kw,
        )
        assert (out[0] == 0).all() and (out[1, :, :3] == 0).all()
        assert torch.isfinite(out).all(), name
        grads = torch.autograd.grad(out.sum(), (q, k, v))
        assert all(torch.isfinite(g_).all() for g_ in grads), name


def test_general_masks_in_the_parallel_form():
    q, k, v = qkv(T=5, S=6, seed=11)
    mask = torch.rand(2, 1, 5, 6, generator=torch.Generator().manual_seed(3)) > 0.4
    ref, bound = bound_for("elu1", q, k, v, torch.float64, attn_mask=mask)
    assert_within(linear_attention(q, k, v, feature_map="elu1", attn_mask=mask), ref, bound, "")


@pytest.mark.parametrize("name", list(MAPS))
def test_future_tokens_do_not_change_past_outputs(name):
    fmap, extra, _, _, pos = MAPS[name]
    q, k, v = qkv(T=6, seed=12, pos=pos)
    for form, kw in FORMS[:4]:
        base = linear_attention(q, k, v, feature_map=fmap, causal=True, **extra, **kw)
        for t in range(5):
            q2, k2, v2 = q.clone(), k.clone(), v.clone()
            q2[:, :, t + 1 :] += 1.0
            k2[:, :, t + 1 :] *= -2.0
            v2[:, :, t + 1 :] += 3.0
            out = linear_attention(q2, k2, v2, feature_map=fmap, causal=True, **extra, **kw)
            assert torch.equal(out[:, :, : t + 1], base[:, :, : t + 1]), (form, t)


# ------------------------------------------------------------------ gradients
@pytest.mark.parametrize("name", list(MAPS))
def test_gradcheck_tiny(name):
    fmap, extra, _, _, pos = MAPS[name]
    if name == "favor":
        extra = dict(projection=PROJ[:, :2])
    q, k, v = (x.requires_grad_() for x in qkv(B=1, H=1, T=4, d=2, seed=13, pos=pos))
    if name in ("identity", "relu"):  # keep the signed/relu denominators away from zero
        q, k = (x.detach().add(0.3).requires_grad_() for x in (q, k))
    for form, kw in FORMS[:4]:
        for causal in (False, True):

            def f(q, k, v, kw=kw, causal=causal):
                return linear_attention(q, k, v, feature_map=fmap, causal=causal, **extra, **kw)

            assert torch.autograd.gradcheck(f, (q, k, v)), (form, causal)


def test_single_key_output_is_v_and_dq_vanishes():
    g = torch.Generator().manual_seed(14)
    q = torch.randn(1, 2, 3, 3, generator=g, dtype=torch.float64).requires_grad_()
    k = torch.randn(1, 2, 1, 3, generator=g, dtype=torch.float64)
    v = torch.randn(1, 2, 1, 4, generator=g, dtype=torch.float64)
    for name in ("elu1", "taylor:2", "favor"):
        fmap, extra, _, _, _ = MAPS[name]
        for form, kw in FORMS[:3]:
            out = linear_attention(q, k, v, feature_map=fmap, **extra, **kw)
            _, bound = bound_for(name, q.detach(), k, v, torch.float64)
            assert_within(out, v.expand(1, 2, 3, 4), bound, f"{name} {form}")  # exact o = v
            (dq,) = torch.autograd.grad(out.sum(), q)
            # product-rule cancellation (v - o)/D up to rounding: relative gamma_16 of the
            # gradient scale sum_j |v_j| * |d phi(q).phi(k)/dq| / D, here <= 10 (O(1) data)
            assert dq.abs().max() <= gamma(16, U[torch.float64]) * 10 * v.abs().sum(-1).max()


# ------------------------------------------------------------------ FAVOR+ and signed maps
def test_favor_generator_draws_once_and_is_reproducible():
    q, k, v = qkv(seed=15)
    a = linear_attention(
        q, k, v, feature_map="favor", num_features=16, generator=torch.Generator().manual_seed(7)
    )
    proj = favor_projection(3, 16, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    b = linear_attention(q, k, v, feature_map="favor", projection=proj)
    assert torch.equal(a, b)
    c = linear_attention(
        q, k, v, feature_map="favor", num_features=16, generator=torch.Generator().manual_seed(8)
    )
    assert not torch.equal(a, c)


def test_relu_vanishing_denominator_is_ieee_unless_eps():
    q = -torch.ones(1, 1, 2, 2, dtype=torch.float64)  # relu(q) = 0: D = 0 and N = 0
    k, v = torch.ones(1, 1, 2, 2, dtype=torch.float64), torch.ones(1, 1, 2, 1, dtype=torch.float64)
    for _form, kw in FORMS[:3]:
        assert torch.isnan(linear_attention(q, k, v, feature_map="relu", **kw)).all()
        out = linear_attention(q, k, v, feature_map="relu", eps=1e-6, **kw)
        assert (out == 0).all()

"""D21 (derivations.gradient_identities) and its checker bounds
(verify.exact.gradient_identities): the record's claims and its wrong statements; the residuals
of correct backward kernels inside the derived bounds, the bounds far below the signal, and
the faulty twins of tests/identity_variants.py caught."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy
import torch
from identity_variants import FAULTS, flash_style

from derivations import gradient_identities as d21
from derivations import module
from derivations._record import Derivation, Status
from verify.exact.gradient_identities import identity_bounds, identity_residuals

RIGHT = {
    "row": lambda a, j, n: a[j] / sympy.Sum(a[j], (j, 1, n)),
    "kernel": sympy.exp,
    "dv": lambda P, dO, delta: P.T * dO,
}
#: the non-vacuity margin: a bound above this share of the signal could hide a real fault
MARGIN = 1e-3


@pytest.fixture(scope="module")
def record(derived):
    return derived("D21")


def test_record_claims_and_statuses(record):
    statuses = {c.name: c.status for c in record.claims}
    assert record.id == "D21" and module("D21") is d21
    assert record.status is Status.VERIFIED
    for name in (d21.VALUE_SUM, d21.KEY_SUM, d21.DELTA_FREE):
        assert statuses[name] is Status.PROVED, name
    for name in (d21.VALUE_SUM_INSTANCES, d21.VALUE_SUM_FAILS, d21.KEY_SUM_INSTANCES,
                 d21.KEY_SUM_FAILS):  # fmt: skip
        assert statuses[name] is Status.VERIFIED, name


def _claim(fn, **wrong):
    rec = Derivation("D21", "wrong statement")
    fn(rec, {**RIGHT, **wrong})
    return {c.name: c.status for c in rec.claims}


def test_wrong_statements_fail():
    """A dropped normalizer, a softcapped kernel and a dV that reads delta each fail their
    claim; the right statements pass in the same harness."""
    assert _claim(d21._claim_value_sum)[d21.VALUE_SUM] is Status.PROVED
    assert _claim(d21._claim_value_sum, row=lambda a, j, n: a[j])[d21.VALUE_SUM] is Status.FAILED
    capped = lambda x: sympy.exp(2 * sympy.tanh(x / 2))  # noqa: E731
    assert _claim(d21._claim_key_sum, kernel=capped)[d21.KEY_SUM] is Status.FAILED
    reads = lambda P, dO, delta: P.T * dO + delta  # noqa: E731
    assert _claim(d21._claim_delta)[d21.DELTA_FREE] is Status.PROVED
    assert _claim(d21._claim_delta, dv=reads)[d21.DELTA_FREE] is Status.FAILED


def test_identity_applies():
    assert d21.identity_applies("softmax") == (True, True)
    assert d21.identity_applies("softmax", softcap=True) == (True, False)
    assert d21.identity_applies("taylor") == (True, False)
    assert d21.identity_applies("sigmoid") == (False, False)
    with pytest.raises(TypeError, match="kernel"):
        d21.identity_applies(3)
    with pytest.raises(TypeError, match="softcap"):
        d21.identity_applies("softmax", softcap=1.0)


# -- the checker's bounds ---------------------------------------------------------------------
T, S, D = 72, 72, 16  # past one block of 64, a partial last block


def _case(dtype, *, heads=2, groups=2, causal=False, window=None, pad=False, alibi=False,
          bias=False, offset=0.0, seed=0):  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)
    q, g = (torch.randn(1, heads, T, D, generator=gen) + offset for _ in range(2))
    k, v = (torch.randn(1, groups, S, D, generator=gen) + offset for _ in range(2))
    q, k, v, g = (t.to(dt) for t in (q, k, v, g))
    i, j = torch.arange(T)[:, None] + (S - T), torch.arange(S)[None, :]
    vis = torch.ones(1, heads, T, S, dtype=torch.bool)
    if causal:
        vis = vis & (j <= i)
    if window is not None:
        vis = vis & (j >= i - window[0]) & (j <= i + window[1])
    if pad:
        vis[..., S - 5 :] = False
    sb, kw = torch.zeros(1, heads, T, S, dtype=torch.float64), {}
    if alibi:
        slopes = np.array([2.0**-h for h in range(1, heads + 1)])
        sb = sb - torch.from_numpy(slopes)[:, None, None] * (i - j).abs()
        kw["alibi_slopes"] = slopes
    if bias:
        extra = torch.randn(1, heads, T, S, generator=gen, dtype=torch.float64)
        sb, kw["score_bias"] = sb + extra, extra.numpy()
    if groups != heads:
        kw["enable_gqa"] = True
    mask = vis.numpy() if bool((~vis).any()) else None
    return (q, k, v, g), vis, (sb.float() if (alibi or bias) else None), mask, kw


def _run(dtype, kernel="flash", fault=None, **case):
    (q, k, v, g), vis, sb, mask, kw = _case(dtype, **case)
    qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
    c = 1.0 / math.sqrt(D)
    if kernel == "flash":
        o = flash_style(qq, kk, vv, vis, bias=sb, scale=c, fault=fault)
    else:  # PyTorch's SDPA (math path) and autograd
        am = vis if sb is None else torch.where(vis, sb, -math.inf).to(q.dtype)
        o = torch.nn.functional.scaled_dot_product_attention(
            qq, kk, vv, attn_mask=am, scale=c, enable_gqa=k.shape[1] != q.shape[1]
        )
    _, dk, dv = torch.autograd.grad(o, (qq, kk, vv), g)
    res = identity_residuals(dk, dv, g, vis)
    bnd = identity_bounds(q, k, v, g, dk, dv, dtype=dtype, attn_mask=mask, scale=c, **kw)
    scale = {"value": np.abs(g.double().numpy()).sum(), "key": np.abs(dk.double().numpy()).sum()}
    return res, bnd, scale


def _ratio(res, bnd, name):
    return float(np.max(np.abs(res[name]) / bnd[name]))


STRUCTURES = {
    "plain": {},
    "causal-gqa": dict(causal=True, heads=4, groups=2),
    "window-alibi": dict(window=(20, 3), alibi=True),
    "padding-bias": dict(pad=True, bias=True),
}


@pytest.mark.parametrize("kernel", ["flash", "sdpa"])
@pytest.mark.parametrize("structure", list(STRUCTURES))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_correct_kernels_inside_the_bound(dtype, structure, kernel):
    """Both identities hold within D10's backward bound; in float32 both bounds stay below
    MARGIN of the summed signal (sum |dO| for (a), sum |dK| for (b))."""
    res, bnd, scale = _run(dtype, kernel, **STRUCTURES[structure])
    for name in ("value", "key"):
        assert _ratio(res, bnd, name) <= 1.0, (name, _ratio(res, bnd, name))
        if dtype == "float32":
            assert bnd[name].max() <= MARGIN * scale[name], (name, bnd[name].max(), scale[name])


@pytest.mark.parametrize("fault", ["delta-zero", "delta-row"])
def test_wrong_delta_breaks_the_key_sum_only(fault):
    """delta corrupted: dV and identity (a) stay right, identity (b) fails (D21 (c))."""
    res, bnd, _ = _run("float32", fault=fault, causal=True, heads=4, groups=2)
    assert _ratio(res, bnd, "value") <= 1.0
    assert _ratio(res, bnd, "key") > 1.0


def test_unnormalized_dv_breaks_the_value_sum():
    res, bnd, _ = _run("float32", fault="dv-unnormalized", window=(20, 3))
    assert _ratio(res, bnd, "value") > 1.0 and _ratio(res, bnd, "key") <= 1.0


@pytest.mark.parametrize(("fault", "name"), [("delta-zero", "key"), ("dv-unnormalized", "value")])
def test_bfloat16_twins_caught(fault, name):
    """In bf16 the bound carries u_bf16 sum_j |dX_j| (each gradient's rounding to bf16): a
    delta fault shows when sum_i (Delta_i - delta_i) q_i adds up coherently (inputs with a
    common offset)."""
    res, bnd, _ = _run("bfloat16", fault=fault, causal=True, offset=1.0)
    assert _ratio(res, bnd, name) > 1.0


def test_residual_arguments():
    z = np.zeros((1, 2, 3, 4))
    with pytest.raises(ValueError, match="dk, dv"):
        identity_residuals(z, np.zeros((1, 3, 3, 4)), z, True)
    with pytest.raises(ValueError, match="4-d"):
        identity_residuals(z[0], z, z, True)
    with pytest.raises(TypeError, match="dk"):
        identity_residuals(object(), z, z, True)
    with pytest.raises(ValueError, match="fault"):
        flash_style(*(torch.zeros(1, 1, 2, 2) for _ in range(3)), torch.ones(2, 2, dtype=bool),
                    fault="nope")  # fmt: skip
    assert set(FAULTS) >= {None, "delta-zero", "delta-row", "dv-unnormalized"}


# -- the catalogue property -------------------------------------------------------------------
def _flash_variant(fault, dtypes=("float32", "bfloat16")):
    from verify.spec.variant import AttentionVariant

    def forward(q, k, v, *, causal, attn_mask=None):
        T, S = q.shape[-2], k.shape[-2]
        vis = torch.ones(T, S, dtype=torch.bool, device=q.device)
        if causal:
            vis = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
        if attn_mask is not None:
            vis = vis & attn_mask
        vis = vis.expand(q.shape[0], q.shape[1], T, S)
        return flash_style(q, k, v, vis, fault=fault)

    return AttentionVariant(
        name=f"flash-style-{fault or 'ok'}", forward=forward, kernel="softmax",
        causal_alignment="bottom-right", dtypes=dtypes, empty_rows="zeros", supports_mask=True,
    )  # fmt: skip


def _run_property(variant, dtype="float32", n=4):
    from verify.properties.gradient_identities import GRADIENT_IDENTITIES
    from verify.properties.support.base import RunContext, run_property

    ctx = RunContext(dtype=dtype, max_examples=n, shrink_draws=2)
    return run_property(GRADIENT_IDENTITIES, variant, ctx)


@pytest.mark.parametrize(("fault", "dtype"), [(None, "float32"), (None, "bfloat16")])
def test_property_passes_correct_kernels(fault, dtype):
    res = _run_property(_flash_variant(fault), dtype)
    assert res.status == "pass", res.reason


@pytest.mark.parametrize(("fault", "where"), [("delta-row", "key"), ("dv-unnormalized", "value")])
def test_property_catches_the_twins(fault, where):
    res = _run_property(_flash_variant(fault))
    assert res.status == "fail" and f"at {where}(" in res.reason, res.reason
    if fault == "delta-row":
        assert "delta = rowsum(dO o O)" in res.reason


def test_property_skips_kernels_without_a_derived_bound():
    from verify import builtins
    from verify.properties.gradient_identities import GRADIENT_IDENTITIES
    from verify.properties.support.base import RunContext

    why = GRADIENT_IDENTITIES.applies(builtins.get("linear-elu1"), RunContext(dtype="float32"))
    assert why and "derived backward bounds" in why
    why = GRADIENT_IDENTITIES.applies(builtins.get("taylor-2"), RunContext(dtype="bfloat16"))
    assert why and "no bfloat16 backward model" in why
    why = GRADIENT_IDENTITIES.applies(builtins.get("taylor-1"), RunContext(dtype="float32"))
    assert why and "crosses zero" in why


def _taylor_variant(fault):
    from identity_variants import taylor2_style

    from verify.spec.variant import AttentionVariant

    return AttentionVariant(
        name=f"taylor2-style-{fault or 'ok'}",
        forward=lambda q, k, v, *, causal: taylor2_style(q, k, v, causal=causal, fault=fault),
        kernel="taylor:2", causal="yes", causal_alignment="bottom-right",
    )  # fmt: skip


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_identity_a_for_a_taylor_kernel(dtype):
    """Identity (a) for normalized Taylor-2 (D21, bound: D19 + D10's denominator bound): the
    hand-written backward passes; the one that divides dV's rows by the next row's denominator
    fails at value(...)."""
    ok = _run_property(_taylor_variant(None), dtype, n=6)
    assert ok.status == "pass" and ok.max_ratio < 1, ok.reason
    bad = _run_property(_taylor_variant("dv-denominator-row"), dtype, n=6)
    assert bad.status == "fail" and "at value(" in bad.reason, bad.reason


def test_kernel_identity_bound_holds_and_is_not_vacuous():
    """On the built-in Taylor-2 and Taylor-4 forms (T = 150, causal, float32 and float64) the
    residual of identity (a) is within its bound, and the bound stays below 5 % of the sum it
    checks (sum_t |dO_t|; measured: 0.015 % for Taylor-2, 0.8 % for Taylor-4 in float32), so a
    normalization wrong by a few percent cannot hide under it."""
    from verify import builtins
    from verify.attention.identity_bound import kernel_identity_bound

    g = torch.Generator().manual_seed(0)
    for name in ("taylor-2", "taylor-4"):
        var = builtins.get(name)
        for dt in (torch.float32, torch.float64):
            q, k, v, dO = (torch.randn(1, 2, 150, 8, generator=g, dtype=torch.float64).to(dt)
                           for _ in range(4))  # fmt: skip
            for fn in [var.forward, *var.forms.values()][:3]:
                leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
                fn(*leaves, causal=True).backward(dO)
                b = kernel_identity_bound(var.kernel, q, k, v, dO, leaves[2].grad,
                                          dtype=str(dt)[6:], causal=True,
                                          scale=var.score_scale(8))  # fmt: skip
                vis = np.tril(np.ones((150, 150), dtype=bool))
                res = identity_residuals(leaves[1].grad, leaves[2].grad, dO, vis)["value"]
                assert (np.abs(res) <= b).all(), (name, dt)
                assert (b < 0.05 * np.abs(dO.double().numpy()).sum(-2)).all(), (name, dt)


def test_property_under_a_key_padding_claim():
    """The drawn (B, S) key-padding mask is the visibility of both identities: the correct
    padding passes, a flipped one (the kept keys dropped) breaks (a)."""
    import modern_variants as mv

    assert _run_property(mv.ok_padding).status == "pass"
    res = _run_property(mv.bad_padding)
    assert res.status == "fail" and "at value(" in res.reason, res.reason

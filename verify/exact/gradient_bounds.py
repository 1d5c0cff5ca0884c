"""Derived bounds on the gradients dq, dk, dv of softmax attention (D10 backward,
``derivations.precision_models``), and the float64 reference gradients they are stated against.

For o = P v with P_ts = softmax_s(c q_t.k_s) (visible keys), upstream gradient g = dL/do:

    dv = P^T g,  dP = g v^T,  Delta_t = g_t . o_t = sum_s P_ts dP_ts,  dS = P o (dP - Delta),
    dq = c dS k,  dk = c dS^T q                           (FlashAttention-2, Algorithm 2).

The computed P_hat carries the larger of the two ways kernels form it: recomputed from the
log-sum-exp (``lse_abs_error``, ``recomputed_weight_rel``) or the saved normalized softmax
(``eager_weight_rel``); it is stored in the input type (one rounding u_in) for the dv and dS
products. dP_hat carries gamma_{d_v}(u_acc) sum_j |g_tj||v_sj| (and one u_in under ``eager``,
where dO V^T is an input-type matmul); Delta_hat the larger of its two forms: from the forward
output (|o_hat - o| <= the forward bound) or from sum_s P_hat dP_hat. dS composes them by
``score_gradient_bound`` with (1 + rho) = (1 + u_acc)^2 (1 + u_in)^r, r = 1 (stored) or 2
(``eager``: the softmax backward's output and the scale's product). Each of dq, dk, dv is then a
sum of products with fp32 accumulation (gamma_n(u_acc)), the scale's two roundings, and the
output's rounding to the input type (``low_precision_output_bound``). Float32/float64 inputs:
u_in = 0 (nothing is stored narrower than the arithmetic).

The stated bound is that of the computation plus the float64 reference's own (the same recipe
with u = u_64, two-level), so comparisons against :func:`reference_gradients` are sound.
"""

from __future__ import annotations

import math

import numpy as np

from derivations import precision_models as pm
from derivations import rounding as d10
from verify.exact.error_terms import SCALE_ROUNDINGS, _row_max_increasing, inflate
from verify.exact.errors import ACCUMULATION, _np64
from verify.spec.visibility import visible

_U64 = d10.unit_roundoff("float64")
NAMES = ("dq", "dk", "dv")


def _forward(q, k, v, vis, c):
    x = c * np.einsum("...ti,...si->...ts", q, k)
    m = np.max(np.where(vis, x, -np.inf), axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    w = np.where(vis, np.exp(np.where(vis, x, m) - m), 0.0)
    D = w.sum(-1, keepdims=True)
    P = np.where(D > 0, w / np.where(D > 0, D, 1.0), 0.0)
    return x, m, P, P @ v


def reference_gradients(q, k, v, g, *, causal=False, attn_mask=None, scale=None):
    """(o, dq, dk, dv) of softmax attention in float64 numpy (formulas in the module docstring).

    Args:
        q (B, H, T, d), k (B, H, S, d), v (B, H, S, d_v), g (B, H, T, d_v): tensors or arrays
            (cast up exactly); causal (top-left), attn_mask (bool, True = keep), scale (None =
            1/sqrt(d)).
    """
    qn, kn, vn, gn = (_np64(t, n) for t, n in zip((q, k, v, g), ("q", "k", "v", "g")))
    T, S, d = qn.shape[-2], kn.shape[-2], qn.shape[-1]
    c = 1.0 / math.sqrt(d) if scale is None else float(scale)
    vis = visible(T, S, causal=causal, attn_mask=attn_mask, numpy=True)
    _, _, P, o = _forward(qn, kn, vn, vis, c)
    dP = gn @ np.swapaxes(vn, -1, -2)
    delta = np.sum(gn * o, -1, keepdims=True)
    dS = P * (dP - delta)
    return o, c * dS @ kn, c * np.swapaxes(dS, -1, -2) @ qn, np.swapaxes(P, -1, -2) @ gn


def _one_bound(qn, kn, vn, gn, vis, c, *, dtype, model, exp_ulps, div_ulps, out_err):
    """(dq, dk, dv) bounds for one arithmetic (module docstring)."""
    acc = ACCUMULATION[dtype]
    u_a = d10.unit_roundoff(acc)
    u_in = 0.0 if dtype == acc else d10.unit_roundoff(dtype)
    eta_in = d10.underflow_abs_error(dtype) + d10.underflow_abs_error(acc)
    eager = model is not None and model.name == "eager"
    T, S, d, d_v = qn.shape[-2], kn.shape[-2], qn.shape[-1], vn.shape[-1]
    x, m, P, o = _forward(qn, kn, vn, vis, c)
    vis = np.broadcast_to(vis, x.shape)
    abs_dot = inflate(c * np.abs(qn) @ np.swapaxes(np.abs(kn), -1, -2), d + 2)
    coeff = (pm.eager_score_abs_error(d, 1.0, u_a, u_in, SCALE_ROUNDINGS) if eager
             else d10.gamma(d + SCALE_ROUNDINGS, u_a))  # fmt: skip
    e_x = np.where(vis, coeff * abs_dot, 0.0)
    n = np.maximum(vis.sum(-1), 1)
    shift = np.abs(np.where(vis, x - m, 0.0)) + e_x
    e_max = e_x.max(-1)
    div_rel = d10.division_relative_bound(u_a, div_ulps)
    e_P = np.zeros(n.shape)
    # per row: the weight error of the forward (the largest over keys), then both ways of P
    e_w = _row_max_increasing(
        lambda ex, sh: d10.softmax_weight_relative_bound(ex, sh, u_a, exp_ulps),
        e_x, shift, vis,
    )  # fmt: skip
    sh_max = np.max(np.where(vis, shift, 0.0), -1)
    for idx in np.ndindex(n.shape):
        den_rel = d10.weighted_sum_relative_bound(int(n[idx]), float(e_w[idx]), u_a, False)
        if den_rel >= 1:
            e_P[idx] = math.inf
            continue
        lse = pm.lse_abs_error(den_rel, int(n[idx]), abs(float(m[idx][0])), u_a)
        arg = 2 * float(e_max[idx]) + lse + u_a * (float(sh_max[idx]) + math.log(n[idx]) + lse)
        e_P[idx] = max(
            pm.recomputed_weight_rel(arg, u_a, exp_ulps, u_in),
            pm.eager_weight_rel(float(e_w[idx]), den_rel, div_rel, u_in),
        )
    e_P = e_P[..., None]
    G = np.abs(gn) @ np.swapaxes(np.abs(vn), -1, -2)  # sum_j |g_tj||v_sj|
    e_dP = ((1 + d10.gamma(d_v, u_a)) * (1 + (u_in if eager else 0.0)) - 1) * G
    dP = gn @ np.swapaxes(vn, -1, -2)
    delta = np.sum(gn * o, -1, keepdims=True)
    ga = np.abs(gn)
    d_out = np.sum(ga * out_err, -1, keepdims=True) + d10.gamma(d_v, u_a) * np.sum(
        ga * (np.abs(o) + out_err), -1, keepdims=True
    )
    Pa = P * (1 + e_P) + eta_in
    d_sum = np.sum((e_P * P + eta_in) * np.abs(dP) + Pa * e_dP, -1, keepdims=True) + d10.gamma(
        max(S, 1), u_a
    ) * np.sum(Pa * (np.abs(dP) + e_dP), -1, keepdims=True)
    e_delta = np.maximum(d_out, d_sum)
    resid = np.abs(dP - delta)
    rho = (1 + u_a) ** 2 * (1 + u_in) ** (2 if eager else 1) - 1
    E_S = np.where(vis, pm.score_gradient_bound(P, e_P, eta_in, resid, e_dP + e_delta, rho), 0.0)
    dS_abs = np.where(vis, P * resid, 0.0) + E_S
    dS = P * (dP - delta)
    sc = (1 + u_a) ** 2  # the scale: c rounded and its product
    kt, qa = np.abs(kn), np.abs(qn)
    e_dq = c * (E_S @ kt + d10.gamma(max(S, 1), u_a) * dS_abs @ kt) * sc
    e_dk = c * (np.swapaxes(E_S, -1, -2) @ qa
                + d10.gamma(max(T, 1), u_a) * np.swapaxes(dS_abs, -1, -2) @ qa) * sc  # fmt: skip
    Pt = np.swapaxes(P, -1, -2)
    e_dv = (np.swapaxes(e_P * P + eta_in, -1, -2) @ ga
            + d10.gamma(max(T, 1), u_a) * np.swapaxes(Pa, -1, -2) @ ga)  # fmt: skip
    exact = (c * dS @ kn, c * np.swapaxes(dS, -1, -2) @ qn, Pt @ gn)
    out = []
    for e, X in zip((e_dq, e_dk, e_dv), exact):
        e = e + (sc - 1) * np.abs(X)
        if dtype != acc:
            ul = d10.unit_roundoff(dtype)
            e = e * (1 + ul) + ul * np.abs(X) + d10.underflow_abs_error(dtype)
        out.append(e)
    return out


def gradient_bounds(
    q, k, v, g, *, dtype: str, causal=False, attn_mask=None, scale=None,
    precision: str | None = None, out_bound=None, exp_library: str | None = None,
    div_library: str | None = None, device: str = "cpu",
) -> dict[str, np.ndarray]:  # fmt: skip
    """Elementwise derived bounds on |dX_hat - dX_ref| for X in q, k, v (module docstring).

    Args:
        q, k, v, g: the inputs and upstream gradient the kernel received (shapes as
            :func:`reference_gradients`; bf16/fp16 cast up exactly).
        dtype: the kernel's input dtype name. precision: a model of
            ``derivations.precision_models`` (None: fused for bf16/fp16, two-level otherwise).
        out_bound: the forward bound |o_hat - o| (B, H, T, d_v) the Delta of FlashAttention's
            backward inherits; None = computed (``verify.exact.errors.attention_error_bound``).
        exp_library, div_library, device: as ``attention_error_bound``.

    Returns:
        {"dq": (B, H, T, d), "dk": (B, H, S, d), "dv": (B, H, S, d_v)} float64 bounds,
        including the float64 reference's own bound.

    Raises:
        ValueError: unknown dtype or precision; ModelNotApplicable: input-type accumulation.
    """
    from verify.exact import errors

    if dtype not in ACCUMULATION:
        raise ValueError(f"dtype: expected one of {tuple(ACCUMULATION)}, got {dtype!r}")
    spec = precision or errors.default_precision(dtype)
    model = pm.parse_precision(spec)
    if model.name == "input-accumulation":
        raise pm.ModelNotApplicable(
            "precision: the backward bounds assume fp32 accumulation (input-type accumulation "
            "is a forward-only model here)"
        )
    qn, kn, vn, gn = (_np64(t, n) for t, n in zip((q, k, v, g), ("q", "k", "v", "g")))
    T, S, d = qn.shape[-2], kn.shape[-2], qn.shape[-1]
    c = 1.0 / math.sqrt(d) if scale is None else float(scale)
    vis = visible(T, S, causal=causal, attn_mask=attn_mask, numpy=True)
    dev = "cuda" if str(device).startswith("cuda") else "cpu"
    exp_ulps = d10.LIBRARY_EXP_ULPS[exp_library or errors.DEFAULT_EXP_LIBRARY[dev]].value
    div_ulps = d10.LIBRARY_DIV_ULPS[div_library or errors.DEFAULT_DIV_LIBRARY[dev]].value
    if out_bound is None:
        out_bound = errors.attention_error_bound(
            "softmax", q, k, v, dtype=dtype, causal=causal, attn_mask=attn_mask, scale=scale,
            precision=spec, exp_library=exp_library, div_library=div_library,
            device=device,
        ).bound  # fmt: skip
    kw = dict(exp_ulps=exp_ulps, div_ulps=d10.LIBRARY_DIV_ULPS["ieee"].value)
    out_err = _np64(out_bound, "out_bound")
    own = _one_bound(qn, kn, vn, gn, vis, c, dtype=dtype, model=model,
                     div_ulps=div_ulps, exp_ulps=exp_ulps, out_err=out_err)  # fmt: skip
    ref_out = errors.attention_error_bound(
        "softmax", q, k, v, dtype="float64", causal=causal, attn_mask=attn_mask, scale=scale,
    ).bound  # fmt: skip
    ref = _one_bound(qn, kn, vn, gn, vis, c, dtype="float64", model=None, out_err=ref_out, **kw)
    return {name: a + b for name, a, b in zip(NAMES, own, ref)}

"""Derived bounds on the gradients dq, dk, dv of softmax attention (D10 backward,
``derivations.precision_models``; D16's transforms; D17's kernel arithmetic), and the float64
reference gradients they are stated against.

For o = P v with P_ts = softmax_s(y_ts) over the visible keys, y the transformed score of
x = c q_t.k_s (softcap C tanh(x / C), then a score bias and ALiBi), upstream gradient g = dL/do:

    dv = P^T g,  dP = g v^T,  Delta_t = g_t . o_t = sum_s P_ts dP_ts,  dY = P o (dP - Delta),
    dX = dY o cap'(x), cap'(x) = 1 - tanh^2(x / C) (1 without a cap),
    dq = c dX k,  dk = c dX^T q                           (FlashAttention-2, Algorithm 2).

With grouped kv heads (G dividing H) query head h reads kv head h // (H / G), so dk and dv of a
kv head are the sums of those of its H / G query heads.

The computed P_hat carries the larger of the two ways kernels form it: recomputed from the
log-sum-exp (``lse_abs_error``, ``recomputed_weight_rel``) or the saved normalized softmax
(``eager_weight_rel``); the weight error comes from the transformed scores' error e_y of the
forward model (``verify.exact.models``, D16 in every precision model, D17's arithmetic). P is
stored in the input type (one rounding u_in) for the dv and dY products. dP_hat carries
gamma_{d_v}(u_mma) sum_j |g_tj||v_sj| (and one u_in under ``eager``); Delta_hat the larger of its
two forms (from the forward output, or sum_s P_hat dP_hat). dY composes them by
``score_gradient_bound``; the cap's factor, recomputed from tanh (the D16 error of the cap over
C), adds its own error (:func:`cap_factor_error`). dq, dk, dv are sums of products at the matrix
product's unit u_mma (D17: 2u under truncation), the scale's two roundings, the group sums of
GQA, and the output's rounding to the input type (``low_precision_output_bound``). Float32 and
float64 inputs: u_in = 0. The ``envelope`` models take the largest of their members' bounds.

The stated bound is that of the computation plus the float64 reference's own (the same recipe
with u = u_64, two-level), so comparisons against :func:`reference_gradients` are sound.
"""

from __future__ import annotations

import math

import numpy as np

from derivations import kernel_arithmetic as ka
from derivations import precision_models as pm
from derivations import rounding as d10
from verify.exact.error_terms import inflate

_U64 = d10.unit_roundoff("float64")
NAMES = ("dq", "dk", "dv")
#: structural keywords the gradient bounds and reference take (``verify.exact.errors``)
STRUCTURE = ("window", "softcap", "alibi_slopes", "score_bias", "enable_gqa")


def _check_structure(structure: dict) -> dict:
    bad = sorted(set(structure) - set(STRUCTURE))
    if bad:
        raise ValueError(
            f"structure: the gradient bounds take {STRUCTURE}, got {bad} (QK-norm, decays and "
            "sigmoid scores have no derived backward bound)"
        )
    return {k: v for k, v in structure.items() if v is not None and v is not False}


def reference_gradients(q, k, v, g, *, causal=False, attn_mask=None, scale=None, **structure):
    """(o, dq, dk, dv) of softmax attention in float64, by autograd through a float64 torch
    evaluation of the definition (module docstring; ``structure``: :data:`STRUCTURE`).

    Args:
        q (B, H, T, d), k (B, G, S, d), v (B, G, S, d_v), g (B, H, T, d_v): tensors or arrays
            (cast up exactly); causal, attn_mask (bool, True = keep), scale (None = 1/sqrt(d)),
            window / softcap / alibi_slopes / score_bias / enable_gqa as
            ``verify.exact.errors.attention_error_bound``.

    Returns:
        float64 numpy arrays shaped like o, q, k, v; rows with no visible key give o = 0 and no
        gradient.
    """
    import torch

    from verify.exact.errors import _np64, _setup

    structure = _check_structure(structure)
    st = _setup(
        "softmax", q, k, v, causal=causal, attn_mask=attn_mask, scale=scale, denominator="sum",
        eps=0.0, projection=None, form="parallel", basis=None, device="cpu", exp_library=None,
        div_library=None, **structure,
    )  # fmt: skip
    f64 = torch.float64
    qt, kt, vt, gt = (torch.from_numpy(_np64(t, n).copy())
                      for t, n in zip((q, k, v, g), ("q", "k", "v", "g")))  # fmt: skip
    qt, kt, vt = (t.requires_grad_(True) for t in (qt, kt, vt))
    H, G = qt.shape[1], kt.shape[1]
    idx = [h // (H // G) for h in range(H)]
    ke, ve = kt[:, idx], vt[:, idx]
    x = st["c"] * qt @ ke.transpose(-1, -2)
    tr = st["transform"] or {}
    y = x
    if "softcap" in tr:
        y = tr["softcap"] * torch.tanh(y / tr["softcap"])
    if "bias" in tr:
        y = y + torch.as_tensor(tr["bias"], dtype=f64)
    if "alibi" in tr:
        T, S = y.shape[-2], y.shape[-1]
        dist = (torch.arange(T)[:, None] + (S - T) - torch.arange(S)[None, :]).abs()
        y = y - torch.as_tensor(tr["alibi"], dtype=f64)[:, None, None] * dist
    vis = torch.as_tensor(np.broadcast_to(st["vis"], y.shape).copy())
    m = torch.where(vis, y, -torch.inf).amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    w = torch.where(vis, torch.exp(torch.where(vis, y, m) - m), torch.zeros_like(y))
    D = w.sum(-1, keepdim=True)
    P = w / torch.where(D > 0, D, torch.ones_like(D))
    o = P @ ve
    dq, dk, dv = torch.autograd.grad(o, (qt, kt, vt), gt)
    return tuple(t.detach().numpy() for t in (o, dq, dk, dv))


def cap_factor_error(t_abs, t_err, u: float):
    """|cap'_hat - cap'| for cap' = 1 - t^2 recomputed from t_hat, |t_hat - t| <= t_err (the D16
    cap error over C), |t| <= t_abs: the square and the subtraction round once each (derived;
    arrays elementwise):

        |t_hat^2 - t^2| <= t_err (2 |t| + t_err), and the roundings add
        u (|t| + t_err)^2 + u (1 + (|t| + t_err)^2).
    """
    a = np.asarray(t_abs, dtype=np.float64)
    e = np.asarray(t_err, dtype=np.float64)
    top = (a + e) ** 2
    return e * (2 * a + e) + u * top + u * (1.0 + top)


def _one_bound(st, g, *, dtype, model, arith, div_ulps, out_err):
    """(dq, dk, dv) bounds for one arithmetic over the setup ``st`` (``errors._setup``, kv
    heads expanded to H), before the GQA group sums."""
    from verify.exact import models

    acc = "float64" if dtype == "float64" else "float32"
    fwd = model if model.name != "envelope" else pm.PrecisionModel("fused")
    r = models._row_terms(st, fwd, dtype, acc, arith, st["vis"])
    u_a, u_in, u_mma = r["u_a"], r["u_in"], r["u_mma"]
    eager = model.name in ("eager", "rounded-weights")
    qn, kn, vn, c, vis = st["q"], st["k"], st["v"], st["c"], st["vis"]
    T, S, d_v = qn.shape[-2], kn.shape[-2], vn.shape[-1]
    x, m, e_w = r["x"], r["m"], r["e_w"]
    vis = np.broadcast_to(vis, x.shape)
    w = np.where(vis, np.exp(np.where(vis, x, m[..., None]) - m[..., None]), 0.0)
    Dsum = w.sum(-1, keepdims=True)
    P = np.where(Dsum > 0, w / np.where(Dsum > 0, Dsum, 1.0), 0.0)
    o = P @ vn
    eta_in = d10.underflow_abs_error(dtype) + d10.underflow_abs_error(acc)
    n = np.maximum(vis.sum(-1), 1)
    div_rel = d10.division_relative_bound(u_a, div_ulps)
    shift = np.abs(np.where(vis, x - m[..., None], 0.0)) + r["e_x"]
    sh_max = np.max(np.where(vis, shift, 0.0), -1)
    e_max = r["e_x_max"]
    den_rel = d10.weighted_sum_relative_bound(n, e_w, u_a, False)
    ok = den_rel < 1
    den = np.where(ok, den_rel, 0.0)
    lse = np.array(
        [pm.lse_abs_error(float(dr), int(nn), abs(float(mm)), u_a)
         for dr, nn, mm in zip(den.ravel(), n.ravel(), m.ravel())]
    ).reshape(n.shape)  # fmt: skip
    arg = 2 * e_max + lse + u_a * (sh_max + np.log(n) + lse)
    e_P = np.maximum(
        pm.recomputed_weight_rel(arg, u_a, r["exp_ulps"], u_in),
        pm.eager_weight_rel(e_w, den, div_rel, u_in),
    )
    e_P = np.where(ok, e_P, math.inf)[..., None]
    gn = g
    G = np.abs(gn) @ np.swapaxes(np.abs(vn), -1, -2)  # sum_j |g_tj||v_sj|
    e_dP = ((1 + d10.gamma(d_v, u_mma)) * (1 + (u_in if eager else 0.0)) - 1) * G
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
    with np.errstate(invalid="ignore"):
        E_S = np.where(
            vis, pm.score_gradient_bound(P, e_P, eta_in, resid, e_dP + e_delta, rho), 0.0
        )
    dS_abs = np.where(vis, P * resid, 0.0) + E_S
    dS = P * (dP - delta)
    cap = (st.get("transform") or {}).get("softcap")
    if cap is not None:  # the chain factor cap'(x) = 1 - tanh^2(x / C), recomputed
        x_raw = c * (qn @ np.swapaxes(kn, -1, -2))
        t = np.tanh(x_raw / cap)
        from derivations import transform_rounding as d16

        abs_dot = inflate(c * (np.abs(qn) @ np.swapaxes(np.abs(kn), -1, -2)), qn.shape[-1] + 2)
        e_raw = d10.gamma(qn.shape[-1] + 5, u_mma) * abs_dot
        k_arg = ka.SOFTCAP_ARGUMENT_ROUNDINGS[arith.softcap_argument]
        e_cap = d16.softcap_score_abs_error(
            e_raw, np.abs(x_raw), cap, u_a, d16.TANH_ULPS.value, argument_roundings=k_arg,
            tanh_rel=ka.tanh_relative(arith, u_a), product_rounded=arith.softcap_product,
            score_low=np.maximum(np.abs(x_raw) - e_raw, 0.0),  # e_raw covers x_raw's float64
        )  # fmt: skip
        fac = 1.0 - t * t
        e_fac = cap_factor_error(np.abs(t), e_cap / cap, u_a)
        E_S = np.where(vis, (E_S * (fac + e_fac) + np.abs(dS) * e_fac) * (1 + u_a)
                       + u_a * np.abs(dS) * fac, 0.0)  # fmt: skip
        dS = dS * fac
        dS_abs = np.where(vis, np.abs(dS), 0.0) + E_S
    sc = (1 + u_a) ** 2  # the scale: c rounded and its product
    kt, qa = np.abs(kn), np.abs(qn)
    e_dq = c * (E_S @ kt + d10.gamma(max(S, 1), u_mma) * dS_abs @ kt) * sc
    e_dk = c * (np.swapaxes(E_S, -1, -2) @ qa
                + d10.gamma(max(T, 1), u_mma) * np.swapaxes(dS_abs, -1, -2) @ qa) * sc  # fmt: skip
    Pt = np.swapaxes(P, -1, -2)
    e_dv = (np.swapaxes(e_P * P + eta_in, -1, -2) @ ga
            + d10.gamma(max(T, 1), u_mma) * np.swapaxes(Pa, -1, -2) @ ga)  # fmt: skip
    exact = (c * dS @ kn, c * np.swapaxes(dS, -1, -2) @ qn, Pt @ gn)
    return [e + (sc - 1) * np.abs(X) for e, X in zip((e_dq, e_dk, e_dv), exact)], exact


def _grouped(bounds, exact, heads: int, groups: int, u: float):
    """dk, dv bounds of G kv heads: each the sum over its H / G query heads of theirs, plus the
    rounding of that sum, gamma_{H/G - 1} of the sum of |dk_h| + bound_h (derived)."""
    if groups == heads:
        return bounds
    r = heads // groups
    out = [bounds[0]]
    for b, X in zip(bounds[1:], exact[1:]):
        shape = (*b.shape[:1], groups, r, *b.shape[2:])
        bs = b.reshape(shape).sum(2)
        mag = (np.abs(X) + b).reshape(shape).sum(2)
        out.append(bs + d10.gamma(r - 1, u) * mag)
    return out


def _bounds(qn, kn, vn, gn, dtype, spec, arith, div_ulps, out_err, kw, structure, ref_abs):
    """The three bounds under the model ``spec`` (the envelope's: the largest of its members');
    ``ref_abs``: |dq|, |dk|, |dv| of the exact gradients (the output's rounding scales with
    them)."""
    from verify.exact.errors import _setup
    from verify.exact.models import ENVELOPE, ENVELOPE_FP32_SCORES

    model = pm.parse_precision(spec)
    if model.name == "envelope":
        members = ENVELOPE_FP32_SCORES if model.scheme == pm.FP32_SCORES else ENVELOPE
        parts = [_bounds(qn, kn, vn, gn, dtype, m.spec, arith, div_ulps, out_err, kw, structure,
                         ref_abs) for m in members]  # fmt: skip
        return [np.maximum.reduce(list(p)) for p in zip(*parts)]
    st = _setup(
        "softmax", qn, kn, vn, denominator="sum", eps=0.0, projection=None, form="parallel",
        basis=None, device="cpu", exp_library=None, div_library=None, **kw, **structure,
    )  # fmt: skip
    b, exact = _one_bound(st, gn, dtype=dtype, model=model, arith=arith, div_ulps=div_ulps,
                          out_err=out_err)  # fmt: skip
    acc = "float64" if dtype == "float64" else "float32"
    b = _grouped(b, exact, qn.shape[1], kn.shape[1], d10.unit_roundoff(acc))
    if dtype != acc:  # the gradients' rounding to the input type
        ul = d10.unit_roundoff(dtype)
        b = [e * (1 + ul) + ul * a + d10.underflow_abs_error(dtype) for e, a in zip(b, ref_abs)]
    return b


def gradient_bounds(
    q, k, v, g, *, dtype: str, causal=False, attn_mask=None, scale=None,
    precision: str | None = None, out_bound=None, exp_library: str | None = None,
    div_library: str | None = None, device: str = "cpu", arithmetic=None, **structure,
) -> dict[str, np.ndarray]:  # fmt: skip
    """Elementwise derived bounds on |dX_hat - dX_ref| for X in q, k, v (module docstring).

    Args:
        q, k, v, g: the inputs and upstream gradient the kernel received (shapes as
            :func:`reference_gradients`; bf16/fp16 cast up exactly).
        dtype: the kernel's input dtype name. precision: a model of
            ``derivations.precision_models`` (None: envelope for bf16/fp16, two-level
            otherwise). arithmetic: D17's ``KernelArithmetic`` or preset (None: the device's).
        out_bound: the forward bound |o_hat - o| (B, H, T, d_v) the Delta of FlashAttention's
            backward inherits; None = computed (``verify.exact.errors.attention_error_bound``).
        exp_library, div_library, device: as ``attention_error_bound``.
        structure: window, softcap, alibi_slopes, score_bias, enable_gqa (:data:`STRUCTURE`).

    Returns:
        {"dq": (B, H, T, d), "dk": (B, G, S, d), "dv": (B, G, S, d_v)} float64 bounds,
        including the float64 reference's own bound.

    Raises:
        ValueError: unknown dtype, precision or structure; ModelNotApplicable: input-type
            accumulation.
    """
    from verify.exact import errors
    from verify.exact.errors import ACCUMULATION, _np64

    if dtype not in ACCUMULATION:
        raise ValueError(f"dtype: expected one of {tuple(ACCUMULATION)}, got {dtype!r}")
    structure = _check_structure(structure)
    spec = precision or errors.default_precision(dtype)
    if pm.parse_precision(spec).name == "input-accumulation":
        raise pm.ModelNotApplicable(
            "precision: the backward bounds assume fp32 accumulation (input-type accumulation "
            "is a forward-only model here)"
        )
    qn, kn, vn, gn = (_np64(t, n) for t, n in zip((q, k, v, g), ("q", "k", "v", "g")))
    dev = "cuda" if str(device).startswith("cuda") else "cpu"
    div_ulps = d10.LIBRARY_DIV_ULPS[div_library or errors.DEFAULT_DIV_LIBRARY[dev]].value
    arith = ka.parse_arithmetic(arithmetic, dev)
    if exp_library is not None and arith.exp_ulps is None:
        arith = arith._replace(exp_ulps=d10.LIBRARY_EXP_ULPS[exp_library].value)
    kw = dict(causal=causal, attn_mask=attn_mask, scale=scale)
    if out_bound is None:
        out_bound = errors.attention_error_bound(
            "softmax", q, k, v, dtype=dtype, precision=spec, exp_library=exp_library,
            div_library=div_library, device=device, arithmetic=arith, **kw, **structure,
        ).bound  # fmt: skip
    ref_abs = [np.abs(X) for X in reference_gradients(qn, kn, vn, gn, **kw, **structure)[1:]]
    own = _bounds(qn, kn, vn, gn, dtype, spec, arith, div_ulps, _np64(out_bound, "out_bound"),
                  kw, structure, ref_abs)  # fmt: skip
    ref_out = errors.attention_error_bound(
        "softmax", q, k, v, dtype="float64", **kw, **structure
    ).bound
    ieee = d10.LIBRARY_DIV_ULPS["ieee"].value
    ref = _bounds(qn, kn, vn, gn, "float64", "two-level", ka.KernelArithmetic(), ieee, ref_out,
                  kw, structure, ref_abs)  # fmt: skip
    return {name: a + b for name, a, b in zip(NAMES, own, ref)}

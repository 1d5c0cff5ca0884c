"""Forward bounds of softmax attention under a precision model and a kernel arithmetic (D10,
``derivations.precision_models``; D16's transforms; D17's ``KernelArithmetic``).

``attention_error_bound`` calls :func:`softmax_model_bound` for every softmax kernel with the
sum denominator and no eps (the other kernels and modes stay in ``error_terms.core_bound``).
The recipe, per row t with the exact shifted weights w_s = e^{x_s - m} (m the row maximum of the
transformed scores), A_j = sum_s w_s |v_sj|, D = sum_s w_s >= 1 and n visible keys:

1. scores: e_x = gamma_{d + 5}(u_mma) c sum_i |q_i k_si| (u_mma = u_acc, or 2 u_acc for a
   truncating matrix-product accumulation; TF32 inputs add (1 + u_tf32)^2 per product; D17),
   ``eager_score_abs_error`` for ``eager`` (two more roundings at u_in); QK-norm through D16's
   normalized-score error; then softcap, a given score bias and ALiBi through D16 with the
   kernel's argument roundings, tanh error and bias roundings (at u_in for ``eager``, whose
   transforms are input-type tensor operations; at u_acc otherwise);
2. weights: e_w = row max over visible keys of the exp's relative error, its argument carrying
   e_x and the shift's roundings (one subtraction, or D17's fused exponent); ``online:B`` adds
   ``online_rescale_rel`` for ceil(S / B) blocks over the row's score range;
3. fused / online / input-accumulation: num_rel from ``fused_numerator_weight_rel`` (P rounded to
   the input type) and the P.V sum (at u_mma; input type: ``accumulation_gamma``), den_rel from
   the fp32 weights, then ``kernel_attention_output_bound`` with the division's error (or D17's
   reciprocal-and-product), plus n eta_in max|v| / D for weights in the input type's subnormals;
4. eager (and rounded-weights, the same with float32 scores): p_s = w_s / D carries
   ``eager_weight_rel``; o = sum_s p_s v_s in fp32:
   [(1 + e_p)(1 + gamma_n(u_mma)) - 1] A / D + n eta_in max|v| (1 + gamma_n);
5. split-KV (D17): each split's output bound and log-sum-exp error, combined by
   ``split_kv_output_bound``;
6. every model: the accumulation's subnormal results (half the spacing, or the smallest normal
   under flush-to-zero), then the output's own rounding, ``low_precision_output_bound``.

``envelope`` is the elementwise largest of the ``fused``, ``eager`` and ``online:16`` bounds: the
model of a bf16/fp16 kernel that declares none (each of those arithmetics is contained).
"""

from __future__ import annotations

import math

import numpy as np

from derivations import kernel_arithmetic as ka
from derivations import precision_models as pm
from derivations import rounding as d10
from verify.exact.error_terms import (
    SCALE_ROUNDINGS,
    count,
    inflate,
    normalized_scores,
    transformed_scores,
    vec,
)

_U64 = d10.unit_roundoff("float64")
#: the members of the ``envelope`` model (the online member's block: the smallest block any
#: common kernel uses, whose rescaling is the largest; D10's online lemma grows with the count)
ENVELOPE = (pm.PrecisionModel("fused"), pm.PrecisionModel("eager"), pm.PrecisionModel("online", 16))
#: ``envelope:fp32-scores``: the members for scores kept at float32 resolution (no eager step)
ENVELOPE_FP32_SCORES = (
    pm.PrecisionModel("fused"),
    pm.PrecisionModel("rounded-weights"),
    pm.PrecisionModel("online", 16),
)


def _scores(st: dict, eager: bool, arith: ka.KernelArithmetic, u_a: float, u_in: float, acc):
    """(x, e_x) per key (..., T, S): the transformed scores and their error bound (steps 1)."""
    q, k, c = st["q"], st["k"], st["c"]
    d = q.shape[-1]
    transform = st.get("transform") or {}
    u_mma = ka.mma_unit(u_a, arith.accumulation)
    tf = ka.tf32_product_rel(arith.tf32 and acc == "float32")
    if transform.get("qk_norm"):
        x, e_x, abs_dot = normalized_scores(q, k, c, u_mma)
        # normalized q, k stored in the input type before the product (eager modules)
        e_x = e_x + ((1.0 + u_in) ** 2 - 1.0) * abs_dot
    else:
        abs_dot = inflate(c * (np.abs(q) @ np.swapaxes(np.abs(k), -1, -2)), d + 2)
        x = c * (q @ np.swapaxes(k, -1, -2))
        if eager:  # the fp32 score, then its roundings to the input type, relative to |x|
            e_x = pm.eager_score_abs_error(
                d, abs_dot, u_mma, u_in, SCALE_ROUNDINGS, score_abs=inflate(np.abs(x), 1)
            )
        else:
            e_x = d10.gamma(d + SCALE_ROUNDINGS, u_mma) * abs_dot
        e_x = e_x * (1.0 + tf) + tf * abs_dot  # TF32 inputs: each product term (1 + tf)
    if transform:
        u_t = u_in if eager and u_in else u_a
        tanh_rel = None
        if eager and u_in:  # an input-type tanh: computed at u_acc, then rounded to u_in
            tanh_rel = (1.0 + ka.tanh_relative(arith, u_a)) * (1.0 + u_in) - 1.0
        x, e_x = transformed_scores(x, e_x, transform, u_t, arith=arith, tanh_rel=tanh_rel)
    return x, e_x


def _row_terms(st, model, dtype, acc, arith, vis):
    """The per-row quantities of one softmax evaluation over the keys ``vis`` (step 2-4 inputs):
    a dict with w, A, B, D_low, e_w, m (row maximum of the scores), u_a, u_in, eta_in, u_mma."""
    u_a = d10.unit_roundoff(acc)
    # nothing is stored narrower than the arithmetic in the two-level model or at full precision
    stored = model.name != "two-level" and dtype != acc
    u_in = d10.unit_roundoff(dtype) if stored else 0.0
    # eager: scores rounded to the input type, transforms in it; rounded-weights: scores and
    # softmax at u_acc; both normalize the weights and round them to the input type before P.V
    eager = model.name in ("eager", "rounded-weights")
    x, e_x = _scores(st, model.name == "eager", arith, u_a, u_in, acc)
    S = st["k"].shape[-2]
    m = np.max(np.where(vis, x, -np.inf), axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    w = np.where(vis, np.exp(np.where(vis, x, m) - m), 0.0)
    W = inflate(w, 4)
    A = inflate(W @ np.abs(st["v"]), S + 1)
    B = inflate(W.sum(-1), S)
    D_low = np.maximum(w.sum(-1) * (1.0 - d10.gamma(max(S, 1), _U64)), 0.0)
    shift = np.abs(np.where(vis, x - m, 0.0)) + e_x
    exp_ulps = arith.exp_ulps if arith.exp_ulps is not None else st["exp_ulps"]
    if arith.exp_argument != "subtract":
        fused = arith.exp_argument == "fma-scaled"
        m_abs = np.abs(m) + np.max(np.where(vis, e_x, 0.0), axis=-1, keepdims=True)
        slopes = (st.get("transform") or {}).get("alibi")
        if slopes is not None and arith.alibi_anchor != "distance":  # a key-indexed row shift
            m_abs = m_abs + np.abs(np.asarray(slopes))[:, None, None] * (S - 1)

        def key_rel(ex, sh, ma):
            arg = ex + ka.fused_exponent_abs_error(sh, ma, u_a, fused=fused)
            return d10.exp_relative_bound(arg, u_a, exp_ulps)

        rel = vec(key_rel, np.where(vis, e_x, 0.0), np.where(vis, shift, 0.0), m_abs)
    else:
        rel = vec(
            lambda ex, sh: d10.softmax_weight_relative_bound(ex, sh, u_a, exp_ulps),
            np.where(vis, e_x, 0.0),
            np.where(vis, shift, 0.0),
        )
    e_w = np.max(np.where(vis, rel, 0.0), axis=-1, initial=0.0)
    if model.name == "online":
        n_blocks = max(1, math.ceil(S / model.block))
        score_range = np.max(np.where(vis, shift, 0.0), axis=-1)
        # (m_prev - m_cur) * scale_log2: the subtraction, the product and the scale's rounding
        k_sub = 1 if arith.exp_argument == "subtract" else 3
        resc = vec(lambda r: pm.online_rescale_rel(n_blocks, r, u_a, exp_ulps, k_sub), score_range)
        e_w = (1 + e_w) * (1 + resc) - 1
        rel = (1 + rel) * (1 + resc[..., None]) - 1
    return dict(
        rel_key=np.where(vis, rel, 0.0),
        w=w, A=A, B=B, D_low=D_low, e_w=e_w, m=m[..., 0], u_a=u_a, u_in=u_in,
        e_x_max=np.max(np.where(vis, e_x, 0.0), axis=-1, initial=0.0), x=x, e_x=e_x,
        exp_ulps=exp_ulps,
        eta_in=d10.underflow_abs_error(dtype) if stored else 0.0,
        u_mma=ka.mma_unit(u_a, arith.accumulation), eager=eager,
        tf=ka.tf32_product_rel(arith.tf32 and acc == "float32"),
    )  # fmt: skip


def _division_rel(arith: ka.KernelArithmetic, u_a: float, div_ulps: float) -> float:
    """The normalization's relative error: a division, or D17's reciprocal and product."""
    ulps = arith.div_ulps if arith.div_ulps is not None else div_ulps
    if arith.normalization == "reciprocal":
        return ka.reciprocal_normalization_rel(u_a, ulps)
    return d10.division_relative_bound(u_a, ulps)


#: rows whose largest weight error is below this keep D10's linear form alone (the centred
#: bound's gain is second order there; a cost rule, not a bound)
CENTRED_FROM = 2.0**-12
#: elements per block of the centred bound's (rows, keys, value columns) deviations
_CENTRED_BLOCK = 1 << 22


def _centred(st, model, dtype, acc, o_abs, arith, vis, r, div_rel, vmax):
    """The centred alternative, elementwise, or None where no row needs it: |o_tilde - o| for
    the exact combination o_tilde of the perturbed weights w_s (1 + theta_s), |theta_s| <= the
    key's own weight error (``pm.perturbed_weights_deviation``, called on blocks of rows), plus
    the model's arithmetic on those weights (the same recipe with no shared weight error, on
    their sums). The float64 weights w are the exact shifted weights to within 4 ulps, the
    convention of the linear form's A, B and D_low (``_row_terms``)."""
    rows = r["e_w"] >= CENTRED_FROM
    if not rows.any():
        return None
    w, rel = r["w"], r["rel_key"]
    v = np.broadcast_to(st["v"], w.shape[:-2] + st["v"].shape[-2:])
    S = w.shape[-1]
    w_hi, w_lo = inflate(w, 4), w * (1.0 - 4 * _U64)
    D = w.sum(-1)
    safe = np.where(D > 0, D, 1.0)[..., None]
    o = np.where(D[..., None] > 0, (w @ v) / safe, 0.0)
    # |o - o_f64|: the float64 combination's rounding (2 S + 8 roundings of A / D) and its
    # weights' 4 ulps, in numerator and sum
    eta = (d10.gamma(2 * S + 8, _U64) + 16 * _U64) * r["A"] / safe
    t_c = np.full(o.shape, np.inf)
    lead = w.shape[:-2]
    step = max(1, _CENTRED_BLOCK // max(1, S * v.shape[-1]))
    for i in np.ndindex(*lead):
        idx = np.nonzero(np.broadcast_to(rows, w.shape[:-1])[i])[0]
        for j in range(0, idx.size, step):
            t = idx[j : j + step]
            dev = np.abs(v[i][None, :, :] - o[i][t][:, None, :]) + eta[i][t][:, None, :]
            # keys on the last axis: (rows, d_v, S)
            t_c[i][t] = pm.perturbed_weights_deviation(
                w[i][t][:, None, :], rel[i][t][:, None, :], np.swapaxes(dev, -1, -2)
            )
    # the weights' 4 ulps: numerator up, sum down; then the float64 evaluation of the ratio
    t_c = inflate(t_c * (1.0 + d10.gamma(4, _U64)) / (1.0 - 4 * _U64), S + 8)
    # the same arithmetic on the perturbed weights: their sums bound A, B, D. The online
    # model's rescaling products round the numerator and the row sum apart (not shared): they
    # stay in the recipe's weight error
    up = w_hi * (1.0 + rel)
    den = np.sum(w_lo * np.maximum(0.0, 1.0 - rel), axis=-1)
    e_post = np.zeros_like(r["e_w"])
    if model.name == "online":
        n_blocks = max(1, math.ceil(S / model.block))
        e_post = e_post + ((1.0 + r["u_a"]) ** (n_blocks - 1) - 1.0)
    r2 = dict(r, e_w=e_post, A=inflate(up @ np.abs(v), S + 1), B=inflate(up.sum(-1), S),
              D_low=np.maximum(den * (1.0 - d10.gamma(max(S, 1), _U64)), 0.0))  # fmt: skip
    o2 = None if o_abs is None else o_abs + t_c
    post, _ = _recipe(st, model, acc, o2, arith, vis, r2, div_rel, vmax)
    return post + t_c


def _single(st, model, dtype, acc, o_abs, arith, vis):
    """(bound before the output's rounding, description, row terms) of one evaluation over the
    keys ``vis`` (steps 1-4 and the accumulation's subnormal term of step 6): D10's linear form,
    or the centred one where smaller (``_centred``)."""
    r = _row_terms(st, model, dtype, acc, arith, vis)
    v = st["v"]
    n_vis = vis.sum(-1)
    div_rel = _division_rel(arith, r["u_a"], st["div_ulps"])
    keys = np.broadcast_to(vis.any(-2), v.shape[:-1])  # keys some row of this evaluation sees
    vmax = np.max(np.where(keys[..., None], np.abs(v), 0.0), axis=-2, keepdims=True)
    bound, how = _recipe(st, model, acc, o_abs, arith, vis, r, div_rel, vmax)
    alt = _centred(st, model, dtype, acc, o_abs, arith, vis, r, div_rel, vmax)
    if alt is not None:
        alt = np.where(np.isnan(alt), np.inf, alt)
        if (alt < bound).any():
            how += "; the centred bound on perturbed weights where smaller (D10)"
        bound = np.minimum(bound, alt)
    if o_abs is None:
        with np.errstate(divide="ignore", invalid="ignore"):
            D_low = r["D_low"][..., None]
            o_abs = np.where(D_low > 0, r["A"] / D_low, np.inf)
    o_abs = np.minimum(o_abs, 1e300)
    u_a, u_in = r["u_a"], r["u_in"]
    return _finish(bound, how, r, model, arith, acc, n_vis, vmax, o_abs, u_a, u_in)


def _recipe(st, model, acc, o_abs, arith, vis, r, div_rel, vmax):
    """(bound, description) of steps 3-4 for the row terms ``r``; sets r["den_rel"]."""
    A, B, D_low, e_w, u_a, u_in = r["A"], r["B"], r["D_low"], r["e_w"], r["u_a"], r["u_in"]
    n_vis = vis.sum(-1)
    n_keys = np.maximum(n_vis, 1)
    uf = n_vis[..., None] * r["eta_in"] * vmax  # weights rounded to the input type's subnormals
    if o_abs is None:
        with np.errstate(divide="ignore", invalid="ignore"):
            o_abs = np.where(D_low[..., None] > 0, A / D_low[..., None], np.inf)
    o_abs = np.minimum(o_abs, 1e300)
    u_mma, tf = r["u_mma"], r["tf"]
    if r["eager"]:
        den_rel = vec(lambda n, e: d10.weighted_sum_relative_bound(count(n), e, u_a, False),
                      n_keys, e_w)  # fmt: skip
        e_p = vec(lambda e, dr: np.where(dr < 1, pm.eager_weight_rel(
            e, np.where(dr < 1, dr, 0.0), div_rel, u_in), math.inf), e_w, den_rel)  # fmt: skip
        e_p = (1 + e_p) * (1 + tf) - 1
        g = vec(lambda n: d10.gamma(count(n), u_mma), n_keys)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = ((1 + e_p) * (1 + g) - 1)[..., None]
            bound = rel * A / D_low[..., None] + uf * (1 + g)[..., None]
        how = (
            "eager: scores and weights rounded to the input type, fp32 P.V"
            if model.name == "eager"
            else "rounded-weights: fp32 scores and softmax, the weights rounded to the input "
            "type, fp32 P.V"
        )
    else:
        num_w = (1 + vec(lambda e: pm.fused_numerator_weight_rel(e, u_in), e_w)) * (1 + tf) - 1
        if model.name == "input-accumulation":
            g_num = vec(
                lambda n: pm.accumulation_gamma(count(n), u_in, model.scheme, model.block, True),
                n_keys,
            )
            g_den = vec(
                lambda n: pm.accumulation_gamma(count(n), u_in, model.scheme, model.block, False),
                n_keys,
            )
            num_rel = (1 + num_w) * (1 + g_num) - 1
            den_rel = (1 + num_w) * (1 + g_den) - 1
            uf = 2 * uf  # the rounded products may be subnormal too: eta_in each
            how = f"input-type accumulation ({model.spec})"
        else:
            num_rel = vec(lambda n, e: d10.weighted_sum_relative_bound(count(n), e, u_mma, True),
                          n_keys, num_w)  # fmt: skip
            den_rel = vec(lambda n, e: d10.weighted_sum_relative_bound(count(n), e, u_a, False),
                          n_keys, e_w)  # fmt: skip
            how = (f"{model.spec}: P rounded to the input type before P.V, fp32 sums"
                   if u_in else f"{model.spec}: {acc} arithmetic")  # fmt: skip
        bound = pm.output_bound_elementwise(
            num_rel[..., None], den_rel[..., None], A, B[..., None], D_low[..., None], o_abs,
            div_rel,
        )  # fmt: skip
        margin = (D_low - den_rel * B)[..., None]
        with np.errstate(divide="ignore", invalid="ignore"):
            bound = bound + np.where(margin > 0, uf / np.where(margin > 0, margin, 1), np.inf)
        r["den_rel"] = den_rel
    if r["eager"]:
        r["den_rel"] = den_rel
    return bound, how


def _finish(bound, how, r, model, arith, acc, n_vis, vmax, o_abs, u_a, u_in):
    """Step 6's subnormal terms and the convex-combination cap on ``bound``."""
    n_keys = np.maximum(n_vis, 1)
    # subnormal (or, under flush-to-zero, flushed) results of the accumulation and the division
    # each weight (and the division's result) may round in the subnormal range: an absolute
    # eta (half the subnormal spacing; under flush-to-zero the smallest normal number), which a
    # value |v| carries into the output: 2^log2(eta) (n (|v|max + 1) + 1), scaled by ldexp (the
    # float64 eta 2^-1075 is itself below the smallest subnormal and would round to 0)
    eta_log2 = d10.underflow_abs_error_log2(acc)
    if arith.flush_to_zero:  # the smallest normal 2^(log2 eta + p) replaces eta
        tiny = 2.0 ** (eta_log2 + d10.precision_bits(acc))
        eta_log2 = int(math.log2(ka.flushed_abs_error(tiny, True, 0.0)))
    bound = bound + np.ldexp(n_vis[..., None] * (vmax + 1) + 1, eta_log2)
    # every model normalizes non-negative weights by their own computed sum, so each computed
    # weight is at most 1 (a sum of non-negative terms is at least each of them, rounding is
    # monotone), each stored weight at most (1 + u_in) times that, their sum at most
    # (1 + u_in)(1 + u_acc)^2 (1 + gamma_{n+2}(u_acc)) =: g: |o_hat| <= g max|v|, |o| <= max|v|,
    # a cap where the relative bounds above stop being finite (scores past the arithmetic's
    # resolution); max|v| over every key of the evaluation (a majorant of the row's)
    bound = np.where(np.isnan(bound), np.inf, bound)
    if model.name != "input-accumulation":  # (sums in the input type: no such argument)
        grow = (1.0 + u_in) * (1.0 + u_a) ** 2 * (1.0 + d10.gamma(n_keys + 2, u_a))
        bound = np.minimum(bound, (1.0 + grow[..., None]) * vmax)
    r["o_abs"] = o_abs
    r["vmax"] = vmax
    return bound, how, r


def _split_kv(st, model, dtype, acc, o_abs, arith):
    """Split-KV (D17): per split the single-evaluation bound and log-sum-exp error, combined
    by ``split_kv_scale_rel`` and ``split_kv_output_bound`` (the splits are contiguous key
    ranges of ceil(S / P) keys, as flash-decoding partitions them)."""
    vis = st["vis"]
    S = vis.shape[-1]
    P = arith.split_kv
    size = math.ceil(S / P)
    one = arith._replace(split_kv=1)
    u_a = d10.unit_roundoff(acc)
    betas, lses, n_used, vmaxs, ms = [], [], [], [], []
    for i in range(P):
        cols = np.zeros(S, dtype=bool)
        cols[i * size : (i + 1) * size] = True
        vis_i = vis & cols
        beta, _, r = _single(st, model, dtype, acc, None, one, vis_i)
        n_i = vis_i.sum(-1)
        has = n_i > 0
        den = np.minimum(r["den_rel"], 0.5)  # > 1/2 only where the split's bound is inf anyway
        log_l = np.log(np.maximum(n_i, 1) * (1.0 + den))
        # L_i = m_i c + log(l_i): -log(1 - den_rel) + the log's error + the product's and the
        # sum's roundings (|m_hat| <= |m| + max e_x, folded into the doubled u |m|)
        lam = (-np.log1p(-den) + ka.fast_log_abs_error(log_l)
               + u_a * (2.0 * (np.abs(r["m"]) + r["e_x_max"]) + log_l))  # fmt: skip
        lam = np.where(r["den_rel"] < 0.5, lam, math.inf)
        betas.append(np.where(has[..., None], beta, 0.0))
        lses.append(np.where(has, lam, 0.0))
        n_used.append(has)
        vmaxs.append(r["vmax"])
        ms.append(np.abs(r["m"]) + np.log(np.maximum(n_i, 1)))  # |L_i| <= |m_i| + log n_i
    lam = np.stack(lses, -1)  # (..., T, P)
    used = np.stack(n_used, -1)
    lam_max = np.max(np.where(used, lam, 0.0), axis=-1)
    exp_ulps = arith.exp_ulps if arith.exp_ulps is not None else st["exp_ulps"]
    # the combined L: a log-sum-exp over the P splits' values, each off by <= lam_i
    n_p = np.maximum(used.sum(-1), 1)
    e_p = d10.exp_relative_bound(np.minimum(lam_max, 700.0), u_a, exp_ulps)
    den_p = vec(lambda n, e: d10.weighted_sum_relative_bound(count(n), e, u_a, False), n_p, e_p)
    den_p = np.where(den_p < 0.5, den_p, 0.5)
    log_p = np.log(n_p * (1.0 + den_p))
    m_abs = np.max(np.where(used, np.stack(ms, -1), 0.0), axis=-1)
    lam_L = -np.log1p(-den_p) + ka.fast_log_abs_error(log_p) + u_a * (m_abs + lam_max + log_p)
    theta = ka.split_kv_weighted_scale_rel(np.minimum(lam_max, 700.0), lam_L, P, u_a, exp_ulps)
    beta = np.max(np.stack(betas, -1), axis=-1)
    a = np.max(np.stack(vmaxs, -1), axis=-1)
    bound = vec(
        lambda b, aa, th: ka.split_kv_output_bound(b, aa, th, P, u_a), beta, a, theta[..., None]
    )
    return bound, f"split-KV over {P} key ranges, log-sum-exp combine (D17)"


def softmax_model_bound(
    st: dict, model: pm.PrecisionModel, dtype: str, acc: str, o_abs, arith=None
):
    """(bound (..., T, d_v), description) of softmax under ``model`` and the kernel arithmetic
    ``arith`` (D17; None: D10's standard model) for inputs of ``dtype`` computed with ``acc``
    accumulation (module docstring). ``st`` is ``errors._setup``'s dict (softmax kernel, sum
    denominator, no eps; its ``transform`` applied to the scores); ``o_abs`` the exact |o| or
    None (a majorant).

    Raises:
        ModelNotApplicable: an input-type accumulation without a gamma at these lengths.
    """
    arith = ka.parse_arithmetic(arith)
    if model.name == "envelope":
        members = ENVELOPE_FP32_SCORES if model.scheme == pm.FP32_SCORES else ENVELOPE
        parts = [softmax_model_bound(st, m, dtype, acc, o_abs, arith)[0] for m in members]
        bound = np.maximum.reduce(parts)
        names = ", ".join(m.spec for m in members)
        how = f"{model.spec}: the largest of the {names} bounds"
        return bound, f"{how} ({pm.MODEL_SOURCES['envelope']})"
    if arith.split_kv > 1:
        bound, how = _split_kv(st, model, dtype, acc, o_abs, arith)
        # |o| <= max |v| over the visible keys (a convex combination) when not given
        r_o = o_abs if o_abs is not None else np.max(np.abs(st["v"]), axis=-2, keepdims=True)
    else:
        bound, how, r = _single(st, model, dtype, acc, o_abs, arith, st["vis"])
        r_o = r["o_abs"]
    if arith != ka.KernelArithmetic():
        how += f"; arithmetic {ka.describe(arith)}"
    if dtype == acc:
        return bound, f"{how} ({pm.MODEL_SOURCES[model.name]})"
    if r_o is None:
        r_o = np.full(bound.shape, np.inf)
    bound = pm.low_precision_elementwise(bound, r_o, dtype)
    return bound, f"{how}; output rounded to {dtype} ({pm.MODEL_SOURCES[model.name]})"

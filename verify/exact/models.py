"""Forward bounds of the precision models (D10, ``derivations.precision_models``) for softmax.

``attention_error_bound(..., precision=...)`` calls :func:`softmax_model_bound` for every model
but ``two-level`` (which stays in ``error_terms.core_bound``). The recipe, per row t with the
exact shifted weights w_s = e^{x_s - m} (m the row maximum), A_j = sum_s w_s |v_sj|,
D = sum_s w_s >= 1 and n visible keys:

1. score error e_x per key: gamma_{d + 5}(u_acc) c sum_i |q_i k_si| (fused, online,
   input-accumulation), ``eager_score_abs_error`` (eager: two more roundings at u_in);
2. weight error e_w = row max of ``softmax_weight_relative_bound`` (library exp ulps); online
   adds ``online_rescale_rel`` for ceil(S / B) blocks over the row's score range;
3. fused / online / input-accumulation: num_rel from ``fused_numerator_weight_rel`` (P rounded
   to the input type) and the sum (fp32: ``weighted_sum_relative_bound``; input type:
   ``accumulation_gamma``), den_rel from the fp32 weights (input type: the rounded weights'
   sum), then ``kernel_attention_output_bound``, plus n eta_in max|v| / D for weights that land
   in the input type's subnormal range;
4. eager: p_s = w_s / D carries ``eager_weight_rel``; o = sum_s p_s v_s in fp32:
   [(1 + e_p)(1 + gamma_n(u_acc)) - 1] A / D + n eta_in max|v| (1 + gamma_n);
5. every model: the output's own rounding, ``low_precision_output_bound``.
"""

from __future__ import annotations

import math

import numpy as np

from derivations import precision_models as pm
from derivations import rounding as d10
from verify.exact.error_terms import SCALE_ROUNDINGS, _row_max_increasing, count, inflate, vec

_U64 = d10.unit_roundoff("float64")


def _weights(st: dict, e_coeff: float):
    """(w, A, B, D_low, e_x, shift) for shifted exp weights (B >= sum_s w_s >= D_low);
    e_x = e_coeff c sum_i |q_i||k_si|."""
    q, k, v, vis, c = st["q"], st["k"], st["v"], st["vis"], st["c"]
    d, S = q.shape[-1], k.shape[-2]
    abs_dot = inflate(c * (np.abs(q) @ np.swapaxes(np.abs(k), -1, -2)), d + 2)
    x = c * (q @ np.swapaxes(k, -1, -2))
    e_x = e_coeff * abs_dot
    m = np.max(np.where(vis, x, -np.inf), axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    w = np.where(vis, np.exp(np.where(vis, x, m) - m), 0.0)
    W = inflate(w, 4)
    A = inflate((W @ np.abs(v)), S + 1)
    B = inflate(W.sum(-1), S)
    D_low = np.maximum(w.sum(-1) * (1.0 - d10.gamma(max(S, 1), _U64)), 0.0)
    shift = np.abs(np.where(vis, x - m, 0.0)) + e_x
    return w, A, B, D_low, e_x, shift


def softmax_model_bound(st: dict, model: pm.PrecisionModel, dtype: str, acc: str, o_abs):
    """(bound (..., T, d_v), description) of softmax under ``model`` for inputs of ``dtype``
    computed with ``acc`` accumulation (module docstring). ``st`` is ``errors._setup``'s dict
    (softmax kernel, sum denominator, no eps); ``o_abs`` the exact |o| or None (a majorant).

    Raises:
        ModelNotApplicable: an input-type accumulation without a gamma at these lengths.
    """
    u_a = d10.unit_roundoff(acc)
    # nothing is stored narrower than the arithmetic in the two-level model or at full precision
    stored = model.name != "two-level" and dtype != acc
    u_in = d10.unit_roundoff(dtype) if stored else 0.0
    eta_in = d10.underflow_abs_error(dtype) if stored else 0.0
    vis, v = st["vis"], st["v"]
    d, S = st["q"].shape[-1], st["k"].shape[-2]
    n_vis = vis.sum(-1)
    n_keys = np.maximum(n_vis, 1)
    if model.name == "eager":
        coeff = pm.eager_score_abs_error(d, 1.0, u_a, u_in, SCALE_ROUNDINGS)
    else:
        coeff = d10.gamma(d + SCALE_ROUNDINGS, u_a)
    w, A, B, D_low, e_x, shift = _weights(st, coeff)
    exp_ulps, div_rel = st["exp_ulps"], d10.division_relative_bound(u_a, st["div_ulps"])
    e_w = _row_max_increasing(
        lambda ex, sh: d10.softmax_weight_relative_bound(ex, sh, u_a, exp_ulps),
        np.where(vis, e_x, 0.0),
        shift,
        vis,
    )
    if model.name == "online":
        n_blocks = max(1, math.ceil(S / model.block))
        score_range = np.max(np.where(vis, shift, 0.0), axis=-1)
        resc = vec(lambda r: pm.online_rescale_rel(n_blocks, r, u_a, exp_ulps), score_range)
        e_w = (1 + e_w) * (1 + resc) - 1
    vmax = np.max(np.abs(v), axis=-2, keepdims=True)
    uf = n_vis[..., None] * eta_in * vmax  # weights rounded to the input type's subnormals
    if o_abs is None:
        with np.errstate(divide="ignore", invalid="ignore"):
            o_abs = np.where(D_low[..., None] > 0, A / D_low[..., None], np.inf)
    o_abs = np.minimum(o_abs, 1e300)
    if model.name == "eager":
        den_rel = vec(lambda n, e: d10.weighted_sum_relative_bound(count(n), e, u_a, False),
                      n_keys, e_w)  # fmt: skip
        e_p = vec(lambda e, dr: np.where(dr < 1, pm.eager_weight_rel(
            e, np.where(dr < 1, dr, 0.0), div_rel, u_in), math.inf), e_w, den_rel)  # fmt: skip
        g = vec(lambda n: d10.gamma(count(n), u_a), n_keys)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = ((1 + e_p) * (1 + g) - 1)[..., None]
            bound = rel * A / D_low[..., None] + uf * (1 + g)[..., None]
        how = "eager: scores and weights rounded to the input type, fp32 P.V"
    else:
        num_w = vec(lambda e: pm.fused_numerator_weight_rel(e, u_in), e_w)
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
            num_rel = vec(lambda n, e: d10.weighted_sum_relative_bound(count(n), e, u_a, True),
                          n_keys, num_w)  # fmt: skip
            den_rel = vec(lambda n, e: d10.weighted_sum_relative_bound(count(n), e, u_a, False),
                          n_keys, e_w)  # fmt: skip
            how = (f"{model.spec}: P rounded to the input type before P.V, fp32 sums" if stored
                   else f"{model.spec}: {acc} arithmetic")  # fmt: skip
        bound = pm.output_bound_elementwise(
            num_rel[..., None], den_rel[..., None], A, B[..., None], D_low[..., None], o_abs,
            div_rel,
        )  # fmt: skip
        margin = (D_low - den_rel * B)[..., None]
        with np.errstate(divide="ignore", invalid="ignore"):
            bound = bound + np.where(margin > 0, uf / np.where(margin > 0, margin, 1), np.inf)
    # fp32 subnormal results of the accumulation (tiny next to eta_in) and the division
    bound = bound + d10.underflow_abs_error(acc) * (n_vis[..., None] * (vmax + 1) + 1)
    if dtype == acc:
        return bound, f"{how} ({pm.MODEL_SOURCES[model.name]})"
    bound = pm.low_precision_elementwise(bound, o_abs, dtype)
    return bound, f"{how}; output rounded to {dtype} ({pm.MODEL_SOURCES[model.name]})"

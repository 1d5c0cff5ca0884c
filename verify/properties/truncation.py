"""Truncation properties: D4 checked on a variant's own outputs (claims ``taylor:N``).

- ``truncation-within-d4``: Taylor-N attention differs from softmax by at most the D4 bound
  output_error_bound(delta_N(r)) max|v| plus rounding, for row radii r in D4's informative range.
- ``convergence-in-n``: the curve N = 0..12 of the built-in ``taylor_attention`` (and the
  variant's own order) stays within the D4 bound wherever delta_N(r) < 1.

Truncation bounds come from ``derivations.truncation``; rounding bounds from
``verify.exact.errors`` (D10) through ``support.common.exact_and_bound``.
"""

from __future__ import annotations

import functools

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.claims import dtype_reason
from verify.properties.support.common import MIN_RADIUS, Example, exact_and_bound
from verify.properties.support.inputs import inputs_with_radius
from verify.properties.support.observe import U64, elementwise, float_up, mp_diff, np64, worst
from verify.properties.support.paths import call_mode, sum_mode
from verify.spec.results import NotApplicable, Observation

#: orders of the convergence curve (D4: N = 0..12 on the built-in taylor_attention)
CURVE_ORDERS = tuple(range(13))


def _vmax_rows(x) -> np.ndarray:
    """max_{s visible} ||v_s||_inf per row (B, H, T), exact in float64."""
    v = np.abs(np64(x.v)).max(-1)  # (B, H, S)
    return np.where(x.visible(), v[:, :, None, :], 0.0).max(-1)


def _taylor_applies(variant, ctx) -> str | None:
    if variant.order is None or not variant.exp_type:
        return "needs a claimed Taylor kernel (taylor:N or linear:taylor:N)"
    if sum_mode(variant) is None:
        return "unnormalized variant: the D4 output bound is about normalized attention"
    return dtype_reason(variant, ctx)


def _d4_factor(order: int, radius: float) -> tuple[float, float] | None:
    """(delta_N(r) rounded up, output_error_bound(delta) rounded up), or None if delta >= 1."""
    from derivations.truncation import delta, output_error_bound

    dl = delta(order, radius) * (1 + 4 * U64)  # exports are within 2 ulp
    if dl >= 1.0:
        return None
    return dl, output_error_bound(dl) * (1 + 4 * U64)


def _softmax_exact(variant, x):
    from verify.exact import oracle

    return oracle.softmax_reference(
        x.q,
        x.k,
        x.v,
        causal=x.causal,
        attn_mask=x.attn_mask,
        scale=variant.score_scale(x.q.shape[-1]),
    )


def _eps_term(ref, eps: float, eps_mode: str = "add"):
    """|o_eps - o| for a declared eps, exactly: o_eps = N/(D + eps) = o D/(D + eps), so
    |o_eps - o| = |o_eps| eps/D (o_eps from the oracle with the eps, D its exact kernel sum),
    widened by the float64 roundings of the product; 0 without an eps. The floor
    o_eps = N/max(D, eps) (``eps_mode="floor"``) gives |o_eps| max(eps - D, 0)/D, taken with D
    rounded down by 2u (its float64 rounding) so that the difference is not understated."""
    if not eps:
        return 0.0
    D = np.abs(np.asarray(ref.denominator, dtype=np.float64))[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        if eps_mode == "floor":
            low = D * (1 - 2 * U64)
            return np.abs(ref.float64) * np.maximum(eps - low, 0.0) / low * (1 + 4 * U64)
        return np.abs(ref.float64) * eps / D * (1 + 4 * U64)


def _row_radius(ref) -> np.ndarray:
    """max_s |x_ts| per row as floats rounded up (exact scores from the oracle)."""
    return np.vectorize(float_up, otypes=[float])(ref.max_abs_score)


def _truncation_examples(variant, ctx):
    from verify.strategies import score_radius

    radius = score_radius(variant.order).map(lambda r: max(r, MIN_RADIUS))
    return inputs_with_radius(
        variant, ctx, radius, cases=("random", "identity_values", "unit_values")
    ).map(lambda x: Example(x))


def _truncation_check(variant, ex: Example, ctx) -> list[Observation]:
    from derivations.truncation import informative_radius
    from verify.exact import oracle

    x = ex.inputs
    N = variant.order
    ref, eb = exact_and_bound(variant, x, ctx, denominator="sum")
    soft = _softmax_exact(variant, x)
    radii = _row_radius(ref)
    trunc = np.zeros(radii.shape)
    deltas = np.zeros(radii.shape)
    for idx in np.ndindex(radii.shape):
        f = _d4_factor(N, float(radii[idx]))
        if f is None or f[0] >= 0.5:
            raise NotApplicable(
                f"row radius {radii[idx]:.4g} outside D4's informative range "
                f"(delta_{N} < 1/2 needs r < {informative_radius(N):.4g})"
            )
        deltas[idx] = f[0]
        trunc[idx] = f[1]
    trunc = (trunc * _vmax_rows(x) * (1 + 4 * U64))[..., None]  # B(delta) max_s |v_s|_inf
    trunc = trunc + _eps_term(ref, variant.eps, variant.eps_mode)
    bound = trunc + eb.bound
    out = call_mode(variant, x, "sum")
    err = oracle.abs_error(out, soft)
    exact_err = mp_diff(ref.exact, soft.exact)
    with np.errstate(divide="ignore", invalid="ignore"):
        tight = float(np.max(np.where(trunc > 0, exact_err / trunc, 0.0)))
    var = elementwise(
        err,
        bound,
        "|o_hat - softmax|",
        f"D4 part B(delta_{N}(r)) max|v| up to {float(trunc.max()):.3e} (r <= "
        f"{float(radii.max()):.4g}, delta <= {float(deltas.max()):.3g}), rounding part up to "
        f"{float(eb.bound.max()):.3e}; exact truncation error / D4 bound = {tight:.3g}",
    )
    theory = elementwise(exact_err, np.broadcast_to(trunc, exact_err.shape), "exact D4 error")
    return [var, theory]


TRUNCATION_WITHIN_D4 = declare(
    "truncation-within-d4", _taylor_applies, _truncation_examples, _truncation_check
)


@functools.cache
def _slow_convergence_facts() -> str:
    from derivations.truncation import first_order_below

    facts = ", ".join(f"x = {x}: N = {first_order_below(x)}" for x in (-4, -8, -16))
    return f"D4: relative error first < 1 at {facts}"


def _convergence_examples(variant, ctx):
    from hypothesis import strategies as st

    from derivations.truncation import informative_radius

    # up to r = 3 (delta_12(3) < 1), but inside the variant's own informative range so its
    # point of the curve always carries a statement
    top = min(3.0, informative_radius(variant.order))
    radius = st.floats(top / 8, top, allow_subnormal=False)
    return inputs_with_radius(variant, ctx, radius, max_len=4, max_dim=3, max_value_dim=2).map(
        lambda x: Example(x)
    )


def _convergence_check(variant, ex: Example, ctx) -> list[Observation]:
    from derivations.truncation import dominant_order, first_order_below
    from verify.attention import taylor_attention
    from verify.exact import errors, oracle

    x = ex.inputs
    d = x.q.shape[-1]
    c = variant.score_scale(d)
    soft = _softmax_exact(variant, x)
    r = float_up(max(soft.max_abs_score.ravel()))
    vmax = float(_vmax_rows(x).max())
    obs: list[Observation] = []
    curve = []
    kw = dict(causal=x.causal, attn_mask=x.attn_mask, scale=c)
    for N in CURVE_ORDERS:
        f = _d4_factor(N, r)
        ref = oracle.taylor_reference(x.q, x.k, x.v, order=N, **kw)
        exact_err = mp_diff(ref.exact, soft.exact)
        curve.append((N, float(exact_err.max()), None if f is None else f[1] * vmax))
        if f is None:
            continue  # delta_N(r) >= 1: D4 says nothing at this order
        trunc = f[1] * vmax * (1 + 4 * U64)
        obs.append(
            elementwise(exact_err, np.full(exact_err.shape, trunc), f"exact error at N = {N}")
        )
        if errors.outside_model(f"taylor:{N}", x.q, x.k, x.v, dtype=ctx.dtype, scale=c):
            continue  # products may underflow at this order: no rounding statement
        eb = errors.attention_error_bound(
            f"taylor:{N}", x.q, x.k, x.v, dtype=ctx.dtype, exact=ref, form="parallel", **kw
        )
        out = taylor_attention(x.q, x.k, x.v, order=N, **kw)
        obs.append(
            elementwise(
                oracle.abs_error(out, soft), trunc + eb.bound, f"taylor_attention(order={N})"
            )
        )
    last = curve[-1]
    if last[2] is None:
        raise NotApplicable(f"delta_{CURVE_ORDERS[-1]}({r:.3g}) >= 1: no bound at the top order")
    # the variant's own order is one point of the curve
    N = variant.order
    f = _d4_factor(N, r)
    if f is not None:
        ref, eb = exact_and_bound(variant, x, ctx, denominator="sum")
        out = call_mode(variant, x, "sum")
        obs.append(
            elementwise(
                oracle.abs_error(out, soft),
                f[1] * vmax * (1 + 4 * U64)
                + _eps_term(ref, variant.eps, variant.eps_mode)
                + eb.bound,
                f"the variant (order {N})",
            )
        )
    x_min = float(min(soft.scores.ravel()))
    info = (
        "curve N: exact max error / D4 bound = "
        + ", ".join(f"{n}: {e:.2e}/" + ("-" if b is None else f"{b:.2e}") for n, e, b in curve)
        + f"; most negative score {x_min:.3g}: first order with |g_N| < 1 is "
        f"{first_order_below(x_min)}, dominant series order {dominant_order(x_min)}; "
        + _slow_convergence_facts()
    )
    top = worst(obs)
    top.detail = f"{top.detail}; {info}"
    return obs


CONVERGENCE_IN_N = declare(
    "convergence-in-n", _taylor_applies, _convergence_examples, _convergence_check
)


PROPERTIES = (
    TRUNCATION_WITHIN_D4,
    CONVERGENCE_IN_N,
)

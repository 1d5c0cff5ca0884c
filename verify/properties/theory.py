"""Theory properties: THEORY.md D4, D7, D8 and D9 checked on a variant's own outputs.

Applicability comes from the claims (kernel ``taylor:N`` for D4, a softmax kernel for the D8/D9
softmax statements, ``linear:identity|relu`` for the linear-attention ones, ``linear:favor`` for
the FAVOR+ statistics, D7 modes in ``denominators``). Score rows are realized exactly as in the
theory: d = n keys k_s = e_s (the identity), queries q_t = z_t / c, so x_ts = c q_t.k_s is z_ts
up to one rounding of q (the oracle uses the realized scores); weights are read with
v = identity (the output row is the weight row).

D4: ``truncation-within-d4``, ``convergence-in-n``.  D7: ``norm-identities``.
D8: ``softmax-peak-bounds``, ``linear-peak-bound``, ``softmax-peak-monotone``,
``power-attention-peak``.  D9: ``softmax-injectivity``, ``homogeneous-map-collision``,
``linear-attention-rank``, ``exp-kernel-full-rank``, ``favor-kernel-unbiased``,
``favor-orthogonal-variance``.

Bounds: rounding from ``verify.errors`` (D10) through ``_common.exact_and_bound``; truncation
from ``derivations.truncation``; peak bounds from ``derivations.separation``; eps gaps and
normalization sensitivity from ``derivations.norms``; statistical widths from
``derivations.related`` (alpha = 1e-6, Bonferroni over the examples of the property).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from verify.properties.kernel import (
    DPS,
    call_mode,
    certified_change,
    identity_values,
    inputs_with_radius,
    make_inputs,
    sum_mode,
)
from verify.properties.support.base import Property
from verify.properties.support.common import MIN_RADIUS, Example, exact_and_bound
from verify.spec.results import NotApplicable, Observation, VariantError

U64 = 2.0**-53
#: orders of the convergence curve (THEORY.md D4: N = 0..12 on the built-in taylor_attention)
CURVE_ORDERS = tuple(range(13))
#: statistical confidence of the FAVOR+ checks: all tests of one property hold together with
#: probability >= 1 - ALPHA (Bonferroni over examples and samplers)
ALPHA = 1e-6
#: projection draws: iid features (cheap: one randn), orthogonal blocks (favor_projection's QR
#: loop costs ~30 us a block) and calls of a variant's own (redrawing) feature map; the built-in
#: counts are powers of 4 so that the 1/sqrt(R m) feature scale splits exactly (see
#: ``_builtin_draws``). The features' own rounding is part of the estimator under test.
FAVOR_IID_DRAWS = 4**6
FAVOR_ORTHOGONAL_BLOCKS = 4**7
FAVOR_CALLABLE_DRAWS = 2**10
FAVOR_DEFAULT_FEATURES = 64
#: slack of a float64 evaluation of a closed-form export (a few exp/log/division roundings)
EXPORT_ROUNDINGS = 8


# ----------------------------------------------------------------------------- helpers
def _dtype_applies(variant, ctx) -> str | None:
    if ctx.dtype not in variant.dtypes:
        return f"the variant does not claim {ctx.dtype}"
    return None


def _constructed_applies(variant, ctx) -> str | None:
    """Constructed inputs (score rows, query pairs) are non-causal with free lengths."""
    if not variant.supports_causal(False):
        return "constructed score rows need non-causal calls"
    if variant.length_multiple != 1:
        return f"constructed inputs need free lengths (length_multiple = {variant.length_multiple})"
    return _dtype_applies(variant, ctx)


def _float_up(x) -> float:
    """The smallest float >= the mpf ``x``."""
    import mpmath

    f = float(x)
    return math.nextafter(f, math.inf) if mpmath.mpf(f) < x else f


def _float_down(x) -> float:
    import mpmath

    f = float(x)
    return math.nextafter(f, -math.inf) if mpmath.mpf(f) > x else f


def _np(t) -> np.ndarray:
    return t.detach().cpu().double().numpy()


def _tensor(values, ctx):
    import torch

    arr = np.ascontiguousarray(np.asarray(values, dtype=np.float64))
    return torch.from_numpy(arr).to(dtype=ctx.torch_dtype, device=ctx.device)


def _row_inputs(variant, rows: list[list[float]], ctx, *, causal: bool = False):
    """Inputs realizing score rows z_t (length n): d = n, k = identity, q_t = z_t / c,
    v = identity; B = H = 1, T = len(rows)."""
    n = len(rows[0])
    c = variant.score_scale(n)
    q = _tensor(np.asarray(rows, dtype=np.float64)[None, None] / c, ctx)
    eye = _tensor(np.eye(n)[None, None], ctx)
    return make_inputs(q, eye, eye, causal=causal, case="score rows")


def _scale_factor(variant, d: int) -> float:
    return variant.score_scale(d)


def _worst(obs: list[Observation]) -> Observation:
    return max(obs, key=lambda o: o.ratio)


def _elementwise(diff: np.ndarray, bound: np.ndarray, what: str, detail: str = "") -> Observation:
    """Worst element of diff <= bound (infinite bounds carry no statement)."""
    silent = ~np.isfinite(bound)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, diff / bound, np.where(diff == 0, 0.0, np.inf))
    # silent elements rank below every stated one (a NaN there must not be picked)
    ratio = np.where(silent, -1.0, np.where(np.isnan(diff), np.inf, ratio))
    if silent.all():
        raise NotApplicable("no element has a finite bound")
    idx = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    where = str(tuple(int(i) for i in idx))
    return Observation(
        float(diff[idx]),
        float(bound[idx]),
        "derived",
        where=where,
        detail=f"{what}: {float(diff[idx]):.3e} vs bound {float(bound[idx]):.3e} at {where}"
        + (f"; {detail}" if detail else ""),
    )


def _mp_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| elementwise for object arrays of mpf (rounded once to float64)."""
    import mpmath

    with mpmath.workdps(DPS):
        return np.vectorize(lambda x, y: float(abs(x - y)), otypes=[float])(a, b)


def _vmax_rows(x) -> np.ndarray:
    """max_{s visible} ||v_s||_inf per row (B, H, T), exact in float64."""
    v = np.abs(_np(x.v)).max(-1)  # (B, H, S)
    return np.where(x.visible(), v[:, :, None, :], 0.0).max(-1)


# ----------------------------------------------------------------------------- D4 truncation
def _taylor_applies(variant, ctx) -> str | None:
    if variant.order is None or not variant.exp_type:
        return "needs a claimed Taylor kernel (taylor:N or linear:taylor:N)"
    if sum_mode(variant) is None:
        return "unnormalized variant: the D4 output bound is about normalized attention"
    return _dtype_applies(variant, ctx)


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


def _row_radius(ref) -> np.ndarray:
    """max_s |x_ts| per row as floats rounded up (exact scores from the oracle)."""
    return np.vectorize(_float_up, otypes=[float])(ref.max_abs_score)


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
    if variant.eps:
        # a declared eps: o_eps = N/(D + eps) = o D/(D + eps), so |o_eps - o| = |o_eps| eps/D
        # exactly (o_eps from the oracle with the eps, D its exact kernel sum)
        D = np.abs(np.asarray(ref.denominator, dtype=np.float64))[..., None]
        with np.errstate(divide="ignore", invalid="ignore"):
            trunc = trunc + np.abs(ref.float64) * variant.eps / D * (1 + 4 * U64)
    bound = trunc + eb.bound
    out = call_mode(variant, x, "sum")
    err = oracle.abs_error(out, soft)
    exact_err = _mp_diff(ref.exact, soft.exact)
    with np.errstate(divide="ignore", invalid="ignore"):
        tight = float(np.max(np.where(trunc > 0, exact_err / trunc, 0.0)))
    var = _elementwise(
        err,
        bound,
        "|o_hat - softmax|",
        f"D4 part B(delta_{N}(r)) max|v| up to {float(trunc.max()):.3e} (r <= "
        f"{float(radii.max()):.4g}, delta <= {float(deltas.max()):.3g}), rounding part up to "
        f"{float(eb.bound.max()):.3e}; exact truncation error / D4 bound = {tight:.3g}",
    )
    theory = _elementwise(exact_err, np.broadcast_to(trunc, exact_err.shape), "exact D4 error")
    return [var, theory]


TRUNCATION_WITHIN_D4 = Property(
    id="truncation-within-d4",
    statement="Taylor-N attention differs from softmax by at most "
    "output_error_bound(delta_N(r)) max|v| + rounding, for row radii r in D4's informative range",
    derivation="D4",
    applies=_taylor_applies,
    examples=_truncation_examples,
    check=_truncation_check,
)


@functools.cache
def _slow_convergence_facts() -> str:
    from derivations.truncation import first_order_below

    facts = ", ".join(f"x = {x}: N = {first_order_below(x)}" for x in (-4, -8, -16))
    return f"THEORY D4: relative error first < 1 at {facts}"


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
    r = _float_up(max(soft.max_abs_score.ravel()))
    vmax = float(_vmax_rows(x).max())
    obs: list[Observation] = []
    curve = []
    kw = dict(causal=x.causal, attn_mask=x.attn_mask, scale=c)
    for N in CURVE_ORDERS:
        f = _d4_factor(N, r)
        ref = oracle.taylor_reference(x.q, x.k, x.v, order=N, **kw)
        exact_err = _mp_diff(ref.exact, soft.exact)
        curve.append((N, float(exact_err.max()), None if f is None else f[1] * vmax))
        if f is None:
            continue  # delta_N(r) >= 1: D4 says nothing at this order
        trunc = f[1] * vmax * (1 + 4 * U64)
        obs.append(
            _elementwise(exact_err, np.full(exact_err.shape, trunc), f"exact error at N = {N}")
        )
        if errors.outside_model(f"taylor:{N}", x.q, x.k, x.v, dtype=ctx.dtype, scale=c):
            continue  # products may underflow at this order: no rounding statement
        eb = errors.attention_error_bound(
            f"taylor:{N}", x.q, x.k, x.v, dtype=ctx.dtype, exact=ref, form="parallel", **kw
        )
        out = taylor_attention(x.q, x.k, x.v, order=N, **kw)
        obs.append(
            _elementwise(
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
            _elementwise(
                oracle.abs_error(out, soft),
                f[1] * vmax * (1 + 4 * U64) + eb.bound,
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
    worst = _worst(obs)
    worst.detail = f"{worst.detail}; {info}"
    return obs


CONVERGENCE_IN_N = Property(
    id="convergence-in-n",
    statement="kappa_N attention converges to softmax as N grows (N = 0..12, built-in "
    "taylor_attention and the variant's own order): exact and computed errors within the D4 "
    "bound wherever delta_N(r) < 1",
    derivation="D4",
    applies=_taylor_applies,
    examples=_convergence_examples,
    check=_convergence_check,
    max_examples=10,
)


# ----------------------------------------------------------------------------- D7 norms
NORM_MODES = ("l2", "rms", "layernorm")


def _norm_applies(variant, ctx) -> str | None:
    modes = [m for m in NORM_MODES if m in variant.denominators]
    if "sum" not in variant.denominators or not modes:
        return "needs denominator modes 'sum' and one of l2/rms/layernorm (D7)"
    if variant.linear_map == "favor" and variant.projection is None:
        return "FAVOR+ without a declared projection: no exact reference"
    return _dtype_applies(variant, ctx)


def _norm_examples(variant, ctx):
    from hypothesis import strategies as st

    from verify.properties.support.common import radius_strategy

    modes = [m for m in NORM_MODES if m in variant.denominators]
    return st.builds(
        lambda x, mode: Example(x, {"denominator": mode}),
        inputs_with_radius(variant, ctx, radius_strategy(variant, ctx)),
        st.sampled_from(modes),
    )


def _mp_norm(kind: str, y: list):
    """Norm(y) and its statistic in mpmath (no eps): l2, rms, layernorm (population var)."""
    import mpmath

    n = len(y)
    if kind == "layernorm":
        mu = mpmath.fsum(y) / n
        y = [t - mu for t in y]
    s = mpmath.sqrt(mpmath.fsum(t * t for t in y) / (1 if kind == "l2" else n))
    if s == 0:
        return None, s
    return [t / s for t in y], s


def _norm_check(variant, ex: Example, ctx) -> list[Observation]:
    import mpmath
    import torch

    from derivations import norms as d7
    from derivations import rounding as d10
    from verify.attention import l2_normalize, layer_normalize, rms_normalize

    x = ex.inputs
    mode = ex.choices["denominator"]
    d_v = x.v.shape[-1]
    if mode == "layernorm" and d_v < 2:
        raise NotApplicable("layernorm needs d_v >= 2 (D7)")
    eps = float(variant.eps)
    ref_m, eb_m = exact_and_bound(variant, x, ctx, denominator=mode)
    ref_s, eb_s = exact_and_bound(variant, x, ctx, denominator="sum")
    y = _np(call_mode(variant, x, mode, allow_nonfinite=True))
    o_hat = call_mode(variant, x, "sum", allow_nonfinite=True)
    norm_fn = {"l2": l2_normalize, "rms": rms_normalize, "layernorm": layer_normalize}[mode]
    n_hat = _np(norm_fn(o_hat.detach().to(torch.float64)))
    obs: list[Observation] = []
    gaps = []
    with mpmath.workdps(DPS):
        for idx in np.ndindex(ref_s.count.shape):
            if ref_s.count[idx] == 0:
                continue
            D = ref_s.denominator[idx]
            if D == 0 or D + eps == 0:
                continue
            N_t = list(ref_s.numerator[idx])
            o_t = [t / D for t in N_t]
            target, stat = _mp_norm(mode, o_t)  # Norm(o_t) (exact)
            if stat == 0:
                continue
            sigma = 1 if D + eps > 0 else -1  # Norm(o_hat) = sign(D + eps) Norm(N)
            sign_d = 1 if D > 0 else -1  # Norm(N) = sign(D) Norm(o)
            if eps == 0:
                gap = 0.0
            elif mode == "l2":
                gap = d7.l2_eps_gap(eps, float(abs(D)), float(stat))
            elif mode == "rms":
                gap = d7.rms_eps_gap(eps, float(abs(D)), float(stat), d_v)
            else:
                gap = d7.layernorm_eps_gap(eps, float(abs(D)), float(stat), d_v)
            gaps.append(gap)
            # exact D7 check: ||Norm_eps(N) - sign(D) Norm(o)|| equals the exported gap
            exact_gap = mpmath.sqrt(
                mpmath.fsum((a - sign_d * b) ** 2 for a, b in zip(ref_m.exact[idx], target))
            )
            obs.append(
                Observation(
                    abs(float(exact_gap) - gap),
                    EXPORT_ROUNDINGS * U64 * max(gap, 0.0) + 2.0 ** -(3 * DPS),
                    "derived",
                    where=str(idx),
                    detail=f"exact ||Norm_eps(N) - Norm(o)|| = {float(exact_gap):.6e} vs "
                    f"derivations.norms gap {gap:.6e} (eps = {eps})",
                )
            )
            # the variant: ||y - sigma' Norm(o_hat)|| = gap within both computations' bounds
            e1 = float(np.sqrt(np.sum(eb_m.bound[idx] ** 2)))
            o_s = [float(t) for t in ref_s.exact[idx]]
            if mode == "layernorm":
                mu = sum(o_s) / d_v
                vec_norm = math.sqrt(sum((t - mu) ** 2 for t in o_s))
                ratio = abs(mu) * math.sqrt(d_v) / vec_norm if vec_norm > 0 else math.inf
            else:
                vec_norm = math.sqrt(sum(t * t for t in o_s))
                ratio = None
            vec_norm *= 1 - 4 * U64  # a lower bound on the exact norm (float64 evaluation)
            err_s = float(np.sqrt(np.sum(eb_s.bound[idx] ** 2)))
            sens = d7.normalization_sensitivity(mode, err_s, vec_norm, d_v, 0.0)
            rnd = (
                d10.normalization_rounding_bound(mode, d_v, U64, ratio)
                if math.isfinite(ratio or 0.0)
                else math.inf
            )
            bound = e1 + sens + rnd + EXPORT_ROUNDINGS * U64 * gap
            if not math.isfinite(bound):
                continue
            measured = float(np.sqrt(np.sum((y[idx] - sigma * n_hat[idx]) ** 2)))
            obs.append(
                Observation(
                    abs(measured - gap),
                    bound,
                    "derived",
                    where=str(idx),
                    detail=f"||{mode}(N_t) - {mode}(o_t)||_2 measured {measured:.6e}, D7 "
                    f"gap {gap:.6e} (eps = {eps}); bound: mode {e1:.2e} + sensitivity "
                    f"{sens:.2e} + rounding {rnd:.2e}",
                )
            )
    if not obs:
        raise NotApplicable("no row with a positive statistic and a finite bound")
    return obs


NORM_IDENTITIES = Property(
    id="norm-identities",
    statement="Norm(N_t) = Norm(o_t) for l2/rms/layernorm without eps (sign(D_t) for signed "
    "kernels); with eps the gap equals derivations.norms' exact eps gap, within the bounds",
    derivation="D7",
    applies=_norm_applies,
    examples=_norm_examples,
    check=_norm_check,
)


# ----------------------------------------------------------------------------- D8 softmax
def _softmax_applies(variant, ctx) -> str | None:
    if variant.kernel_family != "softmax":
        return "a statement about softmax (kernel exp)"
    if sum_mode(variant) is None:
        return "unnormalized softmax: weights are not available"
    return _constructed_applies(variant, ctx)


@dataclass
class RowsExample:
    """Score rows (one per query) over n keys, plus labels saying what each row is."""

    rows: list[list[float]]
    labels: list[str]
    extra: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        body = "\n".join(f"  {lab}: {row!r}" for lab, row in zip(self.labels, self.rows))
        extra = f" {self.extra!r}" if self.extra else ""
        return f"RowsExample(n={len(self.rows[0])}{extra})\n{body}"

    def snippet(self) -> str:
        return (
            "import torch\n"
            f"rows = torch.tensor({self.rows!r}, dtype=torch.float64)  # score rows z_t\n"
            "# d = n, k = v = identity, q = rows / c (c = the variant's scale at d = n)\n"
        )


def _unit(lo: float, hi: float):
    from hypothesis import strategies as st

    return st.floats(lo, hi, allow_nan=False, allow_subnormal=False)


def _peak_rows_strategy():
    from hypothesis import strategies as st

    from derivations.separation import smallest_separating_n

    n_min = smallest_separating_n(0.5)

    @st.composite
    def draw(d):
        n = d(st.integers(n_min, 8))
        i = d(st.integers(0, n - 1))
        top = d(_unit(0.0, 4.0))
        gap = d(_unit(0.0, 6.0))
        a_row = [top - gap - d(_unit(0.0, 3.0)) for _ in range(n)]
        a_row[i] = top
        a = d(_unit(0.0, 5.0))
        b_row = [d(_unit(0.0, a)) for _ in range(n)]
        d0 = [d(_unit(0.0, 1.0)) for _ in range(n)]
        d1 = [d(_unit(0.0, 1.0)) for _ in range(n)]
        d1[d(st.integers(0, n - 1))] = 1.0 + math.log(3 * n)
        return RowsExample(
            [a_row, b_row, d0, d1],
            ["A: gap row", "B: bounded row", "D_0 sample", "D_1 sample"],
            {"gap": gap, "a": a},
        )

    return draw()


def _peak_bounds_check(variant, ex: RowsExample, ctx) -> list[Observation]:
    import mpmath

    from derivations.separation import (
        separation_threshold_interval,
        softmax_peak_lower_bound,
        softmax_peak_upper_bound,
    )

    n = len(ex.rows[0])
    x = _row_inputs(variant, ex.rows, ctx)
    ref, eb = exact_and_bound(variant, x, ctx, denominator="sum")
    w = _np(call_mode(variant, x, "sum"))[0, 0]
    b = eb.bound[0, 0]
    scores = ref.scores[0, 0]
    obs = []
    slack = EXPORT_ROUNDINGS * U64
    with mpmath.workdps(DPS):
        # A: the exact gap of row 0, rounded down (the lower bound increases with the gap)
        row = list(scores[0])
        i_star = max(range(n), key=lambda j: row[j])
        gap = _float_down(row[i_star] - max(row[j] for j in range(n) if j != i_star))
        lower = softmax_peak_lower_bound(n, gap)
        obs.append(
            Observation(
                max(lower - w[0, i_star], 0.0),
                b[0, i_star] + slack * lower,
                "derived",
                where="row A",
                detail=f"A: peak {w[0, i_star]:.6g} >= 1/(1 + (n-1)e^-gap) = {lower:.6g} "
                f"(n = {n}, gap {gap:.4g})",
            )
        )
        # B: every row, width a = max - min of its exact scores, rounded up
        for t in range(len(ex.rows)):
            row = list(scores[t])
            a = _float_up(max(row) - min(row))
            upper = softmax_peak_upper_bound(n, a)
            j = int(np.argmax(w[t]))
            obs.append(
                Observation(
                    max(w[t, j] - upper, 0.0),
                    b[t, j] + slack * upper,
                    "derived",
                    where=f"row {t}",
                    detail=f"B: peak {w[t, j]:.6g} <= e^a/(e^a + n - 1) = {upper:.6g} "
                    f"(a = {a:.4g})",
                )
            )
    # separation at threshold 1/2 (n >= smallest_separating_n): D_0 peak < 1/2 <= D_1 peak
    sup0, inf1 = separation_threshold_interval(n)
    p0, p1 = float(w[2].max()), float(w[3].max())
    obs.append(
        Observation(
            p0,
            0.5,
            "derived",
            where="D_0 row",
            detail=f"D_0 peak {p0:.6g} must stay below 1/2 (support sup {sup0:.4g})",
        )
    )
    obs.append(
        Observation(
            0.5,
            p1,
            "derived",
            where="D_1 row",
            detail=f"threshold 1/2 must not exceed the D_1 peak {p1:.6g} (support inf {inf1:.4g})",
        )
    )
    return obs


SOFTMAX_PEAK_BOUNDS = Property(
    id="softmax-peak-bounds",
    statement="softmax peak >= 1/(1 + (n-1)e^-gap) (A), <= e^a/(e^a + n - 1) on a width-a row "
    "(B), and threshold 1/2 separates D_0 from D_1 for n >= smallest_separating_n()",
    derivation="D8",
    applies=_softmax_applies,
    examples=lambda variant, ctx: _peak_rows_strategy(),
    check=_peak_bounds_check,
)


def _monotone_strategy():
    from hypothesis import assume
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        n = d(st.integers(2, 6))
        z = [d(_unit(0.1, 2.0)) for _ in range(n)]
        assume(max(z) - min(z) > 0.25)
        factors = (0.5, 1.0, 2.0, 4.0)  # powers of two: c z is exact
        return RowsExample([[f * t for t in z] for f in factors], [f"c = {f}" for f in factors])

    return draw()


def _monotone_check(variant, ex: RowsExample, ctx) -> list[Observation]:
    x = _row_inputs(variant, ex.rows, ctx)
    ref, eb = exact_and_bound(variant, x, ctx, denominator="sum")
    w = _np(call_mode(variant, x, "sum"))[0, 0]
    i = int(np.argmax(ex.rows[0]))
    exact = [ref.exact[0, 0, t, i] for t in range(len(ex.rows))]
    obs = []
    for t in range(len(ex.rows) - 1):
        diff = float(exact[t + 1] - exact[t])  # > 0: the peak grows with c (D8 D)
        rounding = float(eb.bound[0, 0, t, i] + eb.bound[0, 0, t + 1, i])
        if diff <= 2 * rounding:
            continue
        o = certified_change(
            float(w[t + 1, i] - w[t, i]),
            diff,
            rounding,
            f"peak {ex.labels[t + 1]} - {ex.labels[t]}",
        )
        o.where = f"{ex.labels[t]} -> {ex.labels[t + 1]}"
        obs.append(o)
    if not obs:
        raise NotApplicable("the peak changes too little between scales to certify an increase")
    return obs


SOFTMAX_PEAK_MONOTONE = Property(
    id="softmax-peak-monotone",
    statement="for a non-constant row the softmax peak weight strictly increases with the "
    "scale c (scores c z, c = 1/2, 1, 2, 4)",
    derivation="D8",
    applies=_softmax_applies,
    examples=lambda variant, ctx: _monotone_strategy(),
    check=_monotone_check,
)


def _power_strategy():
    from hypothesis import strategies as st

    return st.builds(
        lambda n, r, beta: RowsExample(
            [[beta * math.log(r)] + [0.0] * (n - 1)],
            ["beta log z"],
            {"r": r, "beta": beta, "n": n},
        ),
        st.integers(2, 8),
        st.integers(2, 8),
        st.integers(1, 4),
    )


def _power_check(variant, ex: RowsExample, ctx) -> list[Observation]:
    import mpmath
    import torch

    from derivations.separation import power_attention_peak

    r, beta, n = ex.extra["r"], ex.extra["beta"], ex.extra["n"]
    with mpmath.workdps(DPS):
        exact = mpmath.mpf(r) ** beta / (mpmath.mpf(r) ** beta + n - 1)
        # inline power attention z^beta / sum z^beta in float64: integer powers by repeated
        # products and their sum are exact, the division rounds once (<= u |peak|)
        z = torch.tensor([float(r)] + [1.0] * (n - 1), dtype=torch.float64)
        zb = torch.ones_like(z)
        for _ in range(beta):
            zb = zb * z
        inline = float((zb / zb.sum())[0])
        export = power_attention_peak(float(r), float(beta), n)
        obs = [
            Observation(
                float(abs(mpmath.mpf(inline) - exact)),
                U64 * float(exact),
                "derived",
                where="inline power attention",
                detail=f"z^beta/sum z^beta peak {inline!r} vs r^beta/(r^beta + n - 1) = "
                f"{float(exact)!r}; derivations.separation.power_attention_peak {export!r} "
                f"(relative {float(abs(export - exact) / exact):.1e})",
            )
        ]
        # softmax on scores beta log z is power attention: the variant's peak
        x = _row_inputs(variant, ex.rows, ctx)
        ref, eb = exact_and_bound(variant, x, ctx, denominator="sum")
        w = _np(call_mode(variant, x, "sum"))[0, 0, 0, 0]
        realized = ref.exact[0, 0, 0, 0]  # the rounded score log(r^beta) moves it slightly
        obs.append(
            Observation(
                float(abs(mpmath.mpf(w) - exact)),
                float(eb.bound[0, 0, 0, 0]) + float(abs(realized - exact)),
                "derived",
                where="softmax peak",
                detail=f"softmax(beta log z) peak {w!r} vs exact {float(exact)!r} (n = {n}, "
                f"r = {r}, beta = {beta}); score realization moves it by "
                f"{float(abs(realized - exact)):.1e}",
            )
        )
    return obs


POWER_ATTENTION_PEAK = Property(
    id="power-attention-peak",
    statement="softmax on scores beta log z is power attention: with one entry r times the "
    "n - 1 others the peak is r^beta/(r^beta + n - 1) (inline torch reference and the variant)",
    derivation="D8",
    applies=_softmax_applies,
    examples=lambda variant, ctx: _power_strategy(),
    check=_power_check,
)


# ----------------------------------------------------------------------------- D8 linear
HOMOGENEOUS_MAPS = ("identity", "relu")


def _linear_applies(variant, ctx) -> str | None:
    if variant.linear_map not in HOMOGENEOUS_MAPS:
        return "needs normalized linear attention with a positively homogeneous map " + str(
            HOMOGENEOUS_MAPS
        )
    if sum_mode(variant) is None:
        return "unnormalized linear attention: weights are not available"
    return _constructed_applies(variant, ctx)


def _linear_rows_strategy():
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        n = d(st.integers(2, 8))
        m = d(_unit(0.125, 1.0))
        M = d(_unit(m, m + 2.0))
        gap = d(_unit(0.0, 3.0))
        p = d(st.integers(0, n - 1))
        others = [d(_unit(m, M)) for _ in range(n - 1)]
        rows, labels = [], []
        for j in range(1, n):  # row j: the peak and the first j others, the rest 0
            vals = others[:j] + [0.0] * (n - 1 - j)
            rows.append(vals[:p] + [M + gap] + vals[p:])
            labels.append(f"n = {j + 1}")
        c = d(st.sampled_from((0.25, 0.5, 2.0, 4.0)))  # exact scaling
        rows.append([c * t for t in rows[-1]])
        labels.append(f"c = {c} times the last row")
        return RowsExample(rows, labels, {"m": m, "M": M, "gap": gap, "peak": p, "c": c})

    return draw()


def _linear_peak_check(variant, ex: RowsExample, ctx) -> list[Observation]:
    import mpmath

    from derivations.separation import linear_peak_upper_bound

    n_rows = len(ex.rows) - 1
    p = ex.extra["peak"]
    x = _row_inputs(variant, ex.rows, ctx)
    ref, eb = exact_and_bound(variant, x, ctx, denominator="sum")
    w = _np(call_mode(variant, x, "sum", allow_nonfinite=True))[0, 0]
    b = eb.bound[0, 0]
    scores = ref.scores[0, 0]
    obs = []
    with mpmath.workdps(DPS):
        for t in range(n_rows):
            others = [scores[t, j] for j in range(len(ex.rows[0])) if j != p and scores[t, j] != 0]
            m_lo, m_hi = _float_down(min(others)), _float_up(max(others))
            top = _float_up(scores[t, p])
            upper = linear_peak_upper_bound(len(others) + 1, m_lo, m_hi, max(top - m_hi, 0.0))
            obs.append(
                Observation(
                    max(w[t, p] - upper, 0.0),
                    b[t, p] + EXPORT_ROUNDINGS * U64 * upper,
                    "derived",
                    where=ex.labels[t],
                    detail=f"C: linear peak {w[t, p]:.6g} <= (M+gap)/((n-1)m + M + gap) = "
                    f"{upper:.6g}",
                )
            )
            if t:  # decreasing in n (exactly: one more positive entry in the denominator)
                obs.append(
                    Observation(
                        max(w[t, p] - w[t - 1, p], 0.0),
                        b[t, p] + b[t - 1, p],
                        "derived",
                        where=f"{ex.labels[t - 1]} -> {ex.labels[t]}",
                        detail=f"C: peak must decrease with n: {w[t - 1, p]:.6g} -> {w[t, p]:.6g}",
                    )
                )
    # D: lin(c z) = lin(z) (scale invariance; c a power of two, so c q is exact)
    diff = np.abs(w[n_rows] - w[n_rows - 1])
    obs.append(
        _elementwise(
            diff,
            b[n_rows] + b[n_rows - 1],
            f"D: |lin(c z) - lin(z)| (c = {ex.extra['c']})",
        )
    )
    return obs


LINEAR_PEAK_BOUND = Property(
    id="linear-peak-bound",
    statement="normalized linear attention's peak is <= (M+gap)/((n-1)m + M + gap) and "
    "decreases with n (C), and lin(c z) = lin(z) (D)",
    derivation="D8",
    applies=_linear_applies,
    examples=lambda variant, ctx: _linear_rows_strategy(),
    check=_linear_peak_check,
)


# ----------------------------------------------------------------------------- D9 injectivity
@dataclass
class QueryPairExample:
    """Keys K (S x d), a query q and a direction for the second query."""

    keys: list[list[float]]
    q: list[float]
    direction: list[float]
    t: float

    def __repr__(self) -> str:
        return (
            f"QueryPairExample(keys={self.keys!r}, q={self.q!r}, direction={self.direction!r}, "
            f"t={self.t!r})"
        )

    def snippet(self) -> str:
        return (
            "import torch\n"
            f"k = torch.tensor([[{self.keys!r}]], dtype=torch.float64)\n"
            f"q = torch.tensor([[[{self.q!r}]]], dtype=torch.float64)\n"
            f"# second query: q + t * direction, direction = {self.direction!r}, t = {self.t!r}\n"
        )


def _query_pair_strategy(ctx):
    from hypothesis import strategies as st

    from verify.properties.kernel import _elements

    @st.composite
    def draw(d):
        dim = d(st.integers(1, 3))
        S = d(st.integers(1, 6))
        el = _elements(ctx.torch_dtype)
        vec = st.lists(el, min_size=dim, max_size=dim)
        keys = d(st.lists(vec, min_size=S, max_size=S))
        q = d(vec)
        direction = d(st.lists(_unit(-1.0, 1.0), min_size=dim, max_size=dim))
        t = d(_unit(0.25, 2.0))
        keys = _tensor(keys, ctx).double().tolist()
        q = _tensor(q, ctx).double().tolist()
        return QueryPairExample(keys, q, direction, t)

    return draw()


def _pair_inputs(ex: QueryPairExample, q2: list[float], ctx):
    S = len(ex.keys)
    q = _tensor([[[ex.q, q2]]], ctx)
    k = _tensor([[ex.keys]], ctx)
    v = _tensor(np.eye(S)[None, None], ctx)
    return make_inputs(q, k, v, case="query pair")


def _injectivity_check(variant, ex: QueryPairExample, ctx) -> list[Observation]:
    from derivations.related import softmax_collision_direction

    collision = softmax_collision_direction(ex.keys)
    if collision is None:  # rank [K, 1] = d + 1: q -> softmax(K q) is injective
        q2 = [a + ex.t * b for a, b in zip(ex.q, ex.direction)]
        kind = "injective keys"
    else:  # q + t u with K u = c 1 gives the same weights (D6)
        u, _ = collision
        norm = max(abs(float(a)) for a in u)
        q2 = [a + ex.t * float(b) / norm for a, b in zip(ex.q, u)]
        kind = "collision direction u (rank [K, 1] <= d)"
    x = _pair_inputs(ex, q2, ctx)
    ref, eb = exact_and_bound(variant, x, ctx, denominator="sum")
    w = _np(call_mode(variant, x, "sum"))[0, 0]
    measured = np.abs(w[1] - w[0])
    exact = _mp_diff(ref.exact[0, 0, 1], ref.exact[0, 0, 0])
    rounding = eb.bound[0, 0, 0] + eb.bound[0, 0, 1]
    if collision is None:
        usable = exact > 2 * rounding
        if not usable.any():
            raise NotApplicable("the two queries' exact weights are too close to certify")
        j = int(np.argmax(np.where(usable, exact - 2 * rounding, -np.inf)))
        o = certified_change(float(measured[j]), float(exact[j]), float(rounding[j]), kind)
        o.where = f"key {j}"
        return [o]
    # the second query is q + t u rounded: its exact weights differ from q's by ``exact``
    return [_elementwise(measured, rounding + exact, f"{kind}: |w(q') - w(q)|")]


SOFTMAX_INJECTIVITY = Property(
    id="softmax-injectivity",
    statement="softmax weights tell q from q' when rank [K, 1] = d + 1 (certified distinct), "
    "and coincide along the collision direction K u = c 1 otherwise",
    derivation="D9",
    applies=_softmax_applies,
    examples=lambda variant, ctx: _query_pair_strategy(ctx),
    check=_injectivity_check,
)


def _homogeneous_examples(variant, ctx):
    from hypothesis import strategies as st

    return st.builds(
        lambda x, a: Example(x, {"alpha": a}),
        inputs_with_radius(variant, ctx, None, cases=("positive", "random"), max_len=6),
        st.sampled_from((0.25, 0.5, 2.0, 4.0)),
    )


def _homogeneous_check(variant, ex: Example, ctx) -> Observation:
    x0 = identity_values(ex.inputs)
    a = ex.choices["alpha"]
    x1 = make_inputs(a * x0.q, x0.k, x0.v, causal=x0.causal, case="alpha q")  # exact scaling
    ref0, eb0 = exact_and_bound(variant, x0, ctx, denominator="sum")
    ref1, eb1 = exact_and_bound(variant, x1, ctx, denominator="sum")
    bound = eb0.bound + eb1.bound  # the exact weights are identical (D9)
    finite = np.isfinite(bound).all()
    w0 = _np(call_mode(variant, x0, "sum", allow_nonfinite=not finite))
    w1 = _np(call_mode(variant, x1, "sum", allow_nonfinite=not finite))
    return _elementwise(np.abs(w1 - w0), bound, f"|w(alpha q) - w(q)| (alpha = {a})")


HOMOGENEOUS_MAP_COLLISION = Property(
    id="homogeneous-map-collision",
    statement="normalized linear attention with a positively homogeneous map gives the same "
    "weights for q and alpha q (alpha > 0): it is not injective",
    derivation="D9",
    applies=_linear_applies,
    examples=_homogeneous_examples,
    check=_homogeneous_check,
)


# ----------------------------------------------------------------------------- D9 rank
def _feature_dim(variant, d: int) -> int | None:
    from derivations.feature_maps import feature_count

    n = variant.order
    if n is not None and variant.exp_type:
        return feature_count(n, d, "symmetric")
    if variant.linear_map in ("identity", "relu", "elu1"):
        return d
    if variant.linear_map == "favor" and variant.projection is not None:
        import torch

        return int(variant.projection(d, torch.float64, "cpu").shape[0])
    return None


def _rank_applies(variant, ctx) -> str | None:
    m = _feature_dim(variant, 1)
    if m is None:
        return "needs a kernel with a known finite feature dimension (linear maps, taylor:N)"
    if m >= 10:
        return f"feature dimension {m} >= 10 at d = 1: the rank bound says nothing at T <= 10"
    if _rank_mode(variant) is None:
        return "neither the normalized nor the unnormalized matrix is available"
    return _constructed_applies(variant, ctx)


def _rank_mode(variant) -> str | None:
    """``sum`` (row scaling keeps the rank) or ``none``."""
    mode = sum_mode(variant)
    if mode is None and (not variant.denominators or "none" in variant.denominators):
        mode = "none"
    return mode


def _rank_examples(variant, ctx):
    from hypothesis import strategies as st

    from verify.properties.kernel import _elements

    @st.composite
    def draw(d):
        dim = d(st.integers(1, 2))
        m = _feature_dim(variant, dim)
        if m is None or m + 1 > 10:
            dim = 1
            m = _feature_dim(variant, 1)
        T = d(st.integers(m + 1, 10))
        el = _elements(ctx.torch_dtype, 1.5)
        if variant.linear_map == "relu":  # keep relu(q).relu(k) away from 0
            el = _unit(0.25, 1.5)
        q = d(st.lists(st.lists(el, min_size=dim, max_size=dim), min_size=T, max_size=T))
        k = d(st.lists(st.lists(el, min_size=dim, max_size=dim), min_size=T, max_size=T))
        w = d(st.lists(_unit(0.25, 1.0), min_size=dim, max_size=dim))  # positive: relu-safe
        return Example(
            None, {"q": _tensor(q, ctx).double().tolist(), "k": _tensor(k, ctx).double().tolist(),
                   "w": _tensor(w, ctx).double().tolist(), "m": m}
        )  # fmt: skip

    return draw()


def _singular_values(mat) -> list:
    import mpmath

    with mpmath.workdps(DPS):
        return sorted(mpmath.svd_r(mpmath.matrix(mat), compute_uv=False), reverse=True)


def _rank_check(variant, ex: Example, ctx) -> list[Observation]:
    import mpmath

    ch = ex.choices
    m = ch["m"]
    mode = _rank_mode(variant)
    T = len(ch["q"])
    v = _tensor(np.eye(T)[None, None], ctx)
    x = make_inputs(_tensor([[ch["q"]]], ctx), _tensor([[ch["k"]]], ctx), v, case="rank")
    ref, eb = exact_and_bound(variant, x, ctx, denominator=mode)
    finite = np.isfinite(eb.bound)
    if not finite.all():
        raise NotApplicable("a denominator may vanish: the weight matrix has no finite bound")
    A_hat = _np(call_mode(variant, x, mode))[0, 0]
    frob = float(np.sqrt(np.sum(eb.bound[0, 0] ** 2)))  # ||A_hat - A||_2 <= ||.||_F
    with mpmath.workdps(DPS):
        sv_exact = _singular_values([[ref.exact[0, 0, i, j] for j in range(T)] for i in range(T)])
        sv_hat = _singular_values(A_hat.tolist())
        prec = mpmath.mpf(10) ** (10 - DPS) * sv_exact[0]
        obs = [
            Observation(
                float(sv_exact[m]),
                float(prec),
                "derived",
                where="exact matrix",
                detail=f"sigma_{m + 1} of the exact {T}x{T} matrix (rank <= m = {m}); mpmath "
                f"SVD at {DPS} digits, allowance 1e{10 - DPS} sigma_1",
            ),
            Observation(
                float(sv_hat[m]),
                frob,
                "derived",
                where="variant matrix",
                detail=f"sigma_{m + 1}(A_hat) <= ||A_hat - A||_F (Weyl, rank A <= m = {m})",
            ),
        ]
    if variant.supports_causal(True):
        obs.append(_causal_rank(variant, ch["w"], T, mode, ctx))
    return obs


def _causal_rank(variant, w: list[float], T: int, mode: str, ctx) -> Observation:
    """All tokens equal: the non-causal matrix has rank 1, the causal one rank T (D9)."""
    import mpmath

    q = _tensor([[[w] * T]], ctx)
    x = make_inputs(q, q, _tensor(np.eye(T)[None, None], ctx), causal=True, case="equal tokens")
    ref, eb = exact_and_bound(variant, x, ctx, denominator=mode)
    if not np.isfinite(eb.bound).all():
        raise NotApplicable("a denominator may vanish on the equal-token input")
    A_hat = _np(call_mode(variant, x, mode))[0, 0]
    frob = float(np.sqrt(np.sum(eb.bound[0, 0] ** 2)))
    with mpmath.workdps(DPS):
        sv_exact = _singular_values([[ref.exact[0, 0, i, j] for j in range(T)] for i in range(T)])
        sv_hat = _singular_values(A_hat.tolist())
    low = float(sv_exact[T - 1])
    if not low > 2 * frob:
        raise NotApplicable("sigma_T of the causal matrix is within twice the rounding bound")
    o = certified_change(
        float(sv_hat[T - 1]), low, frob, f"causal mask raises the rank to T = {T}: sigma_T"
    )
    o.where = "causal equal-token matrix"
    return o


LINEAR_ATTENTION_RANK = Property(
    id="linear-attention-rank",
    statement="without a causal mask the attention matrix of a kernel with m features has rank "
    "<= m; a causal mask raises it to T (equal tokens)",
    derivation="D9",
    applies=_rank_applies,
    examples=_rank_examples,
    check=_rank_check,
    max_examples=10,
)


def _full_rank_examples(variant, ctx):
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        n = d(st.integers(2, 5))
        q0, k0 = d(_unit(-2.0, 0.0)), d(_unit(-2.0, 0.0))
        q = [q0]
        k = [k0]
        for _ in range(n - 1):
            q.append(q[-1] + d(_unit(0.25, 1.0)))
            k.append(k[-1] + d(_unit(0.25, 1.0)))
        return Example(
            None, {"q": _tensor(q, ctx).double().tolist(), "k": _tensor(k, ctx).double().tolist()}
        )

    return draw()


def _full_rank_check(variant, ex: Example, ctx) -> list[Observation]:
    import mpmath

    from derivations.related import exp_kernel_strictly_totally_positive

    q, k = ex.choices["q"], ex.choices["k"]
    n = len(q)
    c = variant.score_scale(1)
    certified = exp_kernel_strictly_totally_positive([c * a for a in q], k)
    obs = [
        Observation(
            0.0 if certified else 1.0,
            0.0,
            "exact",
            where="certificate",
            detail=f"exp(c q_i k_j) strictly totally positive (interval certificate, n = {n}): "
            f"{certified}",
        )
    ]
    x = make_inputs(
        _tensor(np.asarray(q)[None, None, :, None], ctx),
        _tensor(np.asarray(k)[None, None, :, None], ctx),
        _tensor(np.eye(n)[None, None], ctx),
        case="sorted scalars",
    )
    ref, eb = exact_and_bound(variant, x, ctx, denominator="sum")
    A_hat = _np(call_mode(variant, x, "sum"))[0, 0]
    frob = float(np.sqrt(np.sum(eb.bound[0, 0] ** 2)))
    with mpmath.workdps(DPS):
        sv_exact = _singular_values([[ref.exact[0, 0, i, j] for j in range(n)] for i in range(n)])
        sv_hat = _singular_values(A_hat.tolist())
    low = float(sv_exact[-1])
    if not low > 2 * frob:
        raise NotApplicable("sigma_min within twice the rounding bound (ill-conditioned)")
    o = certified_change(float(sv_hat[-1]), low, frob, f"full rank {n}: sigma_min")
    o.where = "softmax weight matrix"
    obs.append(o)
    return obs


EXP_KERNEL_FULL_RANK = Property(
    id="exp-kernel-full-rank",
    statement="with sorted distinct scalar queries and keys (d = 1, n <= 5) exp(c q_i k_j) is "
    "strictly totally positive and the softmax weight matrix is certified full rank",
    derivation="D9",
    applies=_softmax_applies,
    examples=_full_rank_examples,
    check=_full_rank_check,
)


# ----------------------------------------------------------------------------- D9 FAVOR+
def _favor_applies(variant, ctx) -> str | None:
    if variant.linear_map != "favor":
        return "applies to linear:favor claims only"
    if variant.feature_map is None and variant.projection is None:
        return "exposes neither a feature map nor a projection: nothing to sample"
    if variant.feature_map is not None and _deterministic_map(variant, ctx):
        return (
            "the feature map gives the same features under different torch seeds (one fixed "
            "projection): no independent draws to test"
        )
    return _dtype_applies(variant, ctx)


def _deterministic_map(variant, ctx) -> bool:
    """Probe: the variant's feature map on a fixed (2, 2) input under two torch seeds."""
    import torch

    x = torch.tensor([[0.5, -0.25], [0.125, 1.0]], dtype=ctx.torch_dtype)
    outs = []
    for seed in (1, 2):
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            try:
                outs.append(variant.feature_map(x))
            except Exception:
                return False  # the checks call it again and report the failure
    return isinstance(outs[0], torch.Tensor) and torch.equal(outs[0], outs[1])


def _favor_pairs(ctx, *, min_s: float = 0.0, max_s: float = 1.5):
    """(q, k) pairs, d = 1..4, with s = c|q + k|^2 in [min_s, max_s]: near-opposite pairs
    (small s: a nearly deterministic estimate, where a bias shows) and random ones."""
    from hypothesis import assume
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        dim = d(st.integers(1, 4))
        q = [d(_unit(-1.5, 1.5)) for _ in range(dim)]
        if d(st.booleans()):
            k = [-a + d(_unit(-0.25, 0.25)) for a in q]
        else:
            k = [d(_unit(-1.5, 1.5)) for _ in range(dim)]
        qd = _tensor(q, ctx).double().tolist()
        kd = _tensor(k, ctx).double().tolist()
        c = 1.0 / math.sqrt(dim)
        s = c * sum((a + b) ** 2 for a, b in zip(qd, kd))
        assume(min_s <= s <= max_s and max(abs(a) for a in qd) > 0.25)
        return Example(None, {"q": qd, "k": kd})

    return draw()


def _favor_moments(variant, q: list[float], k: list[float]):
    """(c, p = c q.k, s = c |q + k|^2, e^p) from the exact inputs (mpmath, rounded once)."""
    import mpmath

    d = len(q)
    with mpmath.workdps(DPS):
        c = 1 / mpmath.sqrt(d) if variant.scale == "default" else mpmath.mpf(variant.scale)
        qm, km = [mpmath.mpf(a) for a in q], [mpmath.mpf(a) for a in k]
        p = c * mpmath.fsum(a * b for a, b in zip(qm, km))
        s = c * mpmath.fsum((a + b) ** 2 for a, b in zip(qm, km))
        return float(c), float(p), float(s), float(mpmath.exp(p))


def _seed(ex: Example, ctx, salt: int) -> int:
    q, k = ex.choices["q"], ex.choices["k"]
    return (hash((tuple(q), tuple(k), ctx.seed, salt)) & 0x7FFFFFFF) + 1


def _builtin_draws(variant, q, k, ctx, *, orthogonal: bool, seed: int):
    """(estimates Z_r, m): R independent FAVOR+ estimates phi(q).phi(k) with the project's
    map (verify.attention.favor_features / favor_projection) in the run's dtype.

    One call of favor_projection with R m rows: iid rows are independent; orthogonal rows
    come in independent d-row blocks, so with m = d each group of m rows is one independent
    draw. Features of all R m rows are scaled by 1/sqrt(R m) = 2^-j / sqrt(m) (R = 4^j), so
    each group's estimate is R times its share of the dot product (exact scaling).
    """
    import torch

    from verify.attention import accumulation_dtype, favor_features, favor_projection

    d = len(q)
    dt = ctx.torch_dtype
    acc = accumulation_dtype(dt)
    if orthogonal:
        m, R = d, FAVOR_ORTHOGONAL_BLOCKS
    else:
        m = FAVOR_DEFAULT_FEATURES
        if variant.projection is not None:
            m = int(variant.projection(d, torch.float64, "cpu").shape[0])
        R = FAVOR_IID_DRAWS
    gen = torch.Generator(device="cpu").manual_seed(seed)
    proj = favor_projection(d, R * m, orthogonal=orthogonal, generator=gen, dtype=dt)
    xy = torch.tensor([q, k], dtype=torch.float64).to(dt)
    try:
        phi = favor_features(xy, proj)
    except Exception as exc:
        raise VariantError(f"favor_features raised {type(exc).__name__}: {exc}") from exc
    prod = (phi[0].to(torch.float64) * phi[1].to(torch.float64)).reshape(R, m)
    del acc
    return (prod.sum(-1) * R).numpy(), m


def _callable_draws(variant, q, k, ctx, *, seed: int):
    """(estimates, m): the variant's own feature map called FAVOR_CALLABLE_DRAWS times, each
    with torch's (forked) default generator seeded afresh, so a map that draws its projection
    per call gives independent draws (deterministic maps are excluded by ``applies``)."""
    import torch

    from verify.properties.kernel import _feature_map

    xy = torch.tensor([q, k], dtype=torch.float64).to(ctx.torch_dtype)
    out = []
    m = None
    with torch.random.fork_rng(devices=[]):  # the caller's RNG state is restored afterwards
        for r in range(FAVOR_CALLABLE_DRAWS):
            torch.default_generator.manual_seed(seed + r)
            phi = _feature_map(variant, xy).to(torch.float64)
            m = phi.shape[-1]
            out.append(float((phi[0] * phi[1]).sum()))
    return np.asarray(out), m


def _samplers(variant):
    if variant.feature_map is not None:
        return ("variant feature map",)
    return ("iid (favor_projection)", "orthogonal (favor_projection)")


def _favor_unbiased_check(variant, ex: Example, ctx) -> list[Observation]:
    from derivations import related as d9

    q, k = ex.choices["q"], ex.choices["k"]
    c, p, s, mean = _favor_moments(variant, q, k)
    samplers = _samplers(variant)
    n_tests = (FAVOR_UNBIASED.max_examples or 1) * len(samplers)
    obs = []
    for i, name in enumerate(samplers):
        if name.startswith("variant"):
            Z, m = _callable_draws(variant, q, k, ctx, seed=_seed(ex, ctx, i))
            iid = False
        else:
            Z, m = _builtin_draws(
                variant, q, k, ctx, orthogonal="orthogonal" in name, seed=_seed(ex, ctx, i)
            )
            iid = name.startswith("iid")
        R = len(Z)
        zbar = math.fsum(Z.tolist()) / R
        if iid:  # the mean of R iid m-feature estimates is one iid (R m)-feature estimate
            width = d9.favor_confidence_half_width(p, s, R * m, ALPHA, n_tests)
            how = "favor_confidence_half_width (iid, Chebyshev and fourth moment)"
        else:
            # variance <= iid (Performers Thm 2, cited); fourth central moment of one estimate
            # <= that of one feature (convexity of t^4 on the mean of m features)
            var = d9.favor_kernel_variance(p, s, m)
            mu4 = d9.favor_kernel_fourth_central_moment(p, s, 1)
            m4_mean = (mu4 + 3 * (R - 1) * var * var) / R**3
            width = min(
                d9.chebyshev_half_width(var / R, ALPHA, n_tests),
                d9.fourth_moment_half_width(m4_mean, ALPHA, n_tests),
            )
            how = "Chebyshev (iid variance, Thm 2) / fourth moment (convexity bound)"
        # float64 accumulation of R m products: gamma_{R m} relative to the (positive) sum
        width += R * m * U64 * 1.01 * abs(zbar)
        obs.append(
            Observation(
                abs(zbar - mean),
                width,
                "statistical",
                where=name,
                detail=f"mean of {R} draws of phi(x).phi(y) ({m} features) = {zbar:.6g} vs "
                f"e^(c q.k) = {mean:.6g} (p = {p:.4g}, s = {s:.4g}); half width {width:.3e} "
                f"at confidence 1 - {ALPHA:g}, Bonferroni over {n_tests} tests; {how}",
            )
        )
    return obs


FAVOR_UNBIASED = Property(
    id="favor-kernel-unbiased",
    statement="the FAVOR+ kernel estimate phi(x).phi(y) is unbiased: the mean over independent "
    "projections is within the Chebyshev / fourth-moment half width of e^(c q.k) "
    "(alpha = 1e-6, Bonferroni)",
    derivation="D9",
    applies=_favor_applies,
    examples=lambda variant, ctx: _favor_pairs(ctx),
    check=_favor_unbiased_check,
    max_examples=4,
)


def _iid_central_moments(p: float, s: float, m: int) -> list:
    """Central moments mu_2..mu_8 (index j = order) of the iid m-feature estimate (mpmath).

    One feature product is X = e^p U with E[U^j] = favor_raw_moment(j, 0, s) (derivations);
    cumulants of U from its raw moments, kappa_j(mean of m) = kappa_j(U)/m^(j-1), central
    moments of the mean from its cumulants (kappa_1 = 0), scaled by e^(j p).
    """
    import mpmath

    from derivations.related import favor_raw_moment

    with mpmath.workdps(DPS):
        raw = [mpmath.mpf(favor_raw_moment(j, 0.0, s)) for j in range(9)]
        kap = [mpmath.mpf(0)] * 9
        for n in range(1, 9):
            kap[n] = raw[n] - mpmath.fsum(
                mpmath.binomial(n - 1, i - 1) * kap[i] * raw[n - i] for i in range(1, n)
            )
        kz = [mpmath.mpf(0), mpmath.mpf(0)] + [
            kap[j] / mpmath.mpf(m) ** (j - 1) for j in range(2, 9)
        ]
        mom = [mpmath.mpf(1)] + [mpmath.mpf(0)] * 8
        for n in range(1, 9):
            mom[n] = mpmath.fsum(
                mpmath.binomial(n - 1, i - 1) * kz[i] * mom[n - i] for i in range(1, n + 1)
            )
        e = mpmath.exp(mpmath.mpf(p))
        return [mom[j] * e**j for j in range(9)]


def _variance_margin(p: float, s: float, m: int, R: int, n_tests: int) -> float:
    """Half width for the mean squared deviation V = mean_r (Z_r - e^p)^2 of R estimates.

    W = (Z - e^p)^2 has E W^j = mu_{2j}; E[(V - mu_2)^4] = (mu_4(W) + 3(R-1) Var(W)^2)/R^3 for
    R independent draws; Markov on the fourth power gives the half width
    (``fourth_moment_half_width``). The moments are the iid estimator's (the null model).
    """
    import mpmath

    from derivations.related import fourth_moment_half_width

    mu = _iid_central_moments(p, s, m)
    with mpmath.workdps(DPS):
        var_w = mu[4] - mu[2] ** 2
        mu4_w = mu[8] - 4 * mu[6] * mu[2] + 6 * mu[4] * mu[2] ** 2 - 3 * mu[2] ** 4
        m4 = (mu4_w + 3 * (R - 1) * var_w**2) / mpmath.mpf(R) ** 3
        return fourth_moment_half_width(float(m4), ALPHA, n_tests)


def _favor_variance_check(variant, ex: Example, ctx) -> Observation:
    from derivations import related as d9

    q, k = ex.choices["q"], ex.choices["k"]
    c, p, s, mean = _favor_moments(variant, q, k)
    n_tests = FAVOR_VARIANCE.max_examples or 1
    if variant.feature_map is not None:
        Z, m = _callable_draws(variant, q, k, ctx, seed=_seed(ex, ctx, 7))
        name = "variant feature map"
    else:
        Z, m = _builtin_draws(variant, q, k, ctx, orthogonal=True, seed=_seed(ex, ctx, 7))
        name = "orthogonal blocks (favor_projection, m = d)"
    R = len(Z)
    v_hat = math.fsum(((Z - mean) ** 2).tolist()) / R
    var_iid = d9.favor_kernel_variance(p, s, m)
    margin = _variance_margin(p, s, m, R, n_tests)
    return Observation(
        max(v_hat - var_iid, 0.0),
        margin,
        "statistical",
        where=name,
        detail=f"empirical variance {v_hat:.4e} over {R} draws ({m} features) vs iid closed form "
        f"{var_iid:.4e} (ratio {v_hat / var_iid:.3g}); margin {margin:.3e}: Markov on the fourth "
        f"power of the empirical variance with the iid estimator's central moments up to order 8 "
        f"as the null model (orthogonal features no more dispersed than iid ones), confidence "
        f"1 - {ALPHA:g}, Bonferroni over {n_tests} examples",
    )


FAVOR_VARIANCE = Property(
    id="favor-orthogonal-variance",
    statement="the variance of the (orthogonal) FAVOR+ kernel estimate does not exceed the iid "
    "closed form e^(2p)(e^s - 1)/m beyond a fourth-moment statistical margin (alpha = 1e-6)",
    derivation="D9",
    applies=_favor_applies,
    examples=lambda variant, ctx: _favor_pairs(ctx, min_s=0.05, max_s=1.0),
    check=_favor_variance_check,
    max_examples=3,
)


PROPERTIES = (
    TRUNCATION_WITHIN_D4,
    CONVERGENCE_IN_N,
    NORM_IDENTITIES,
    SOFTMAX_PEAK_BOUNDS,
    SOFTMAX_PEAK_MONOTONE,
    POWER_ATTENTION_PEAK,
    LINEAR_PEAK_BOUND,
    SOFTMAX_INJECTIVITY,
    HOMOGENEOUS_MAP_COLLISION,
    LINEAR_ATTENTION_RANK,
    EXP_KERNEL_FULL_RANK,
    FAVOR_UNBIASED,
    FAVOR_VARIANCE,
)

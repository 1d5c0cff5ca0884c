"""Peak properties: D8 checked on a variant's own weights (a softmax kernel for the softmax
statements, ``linear:identity|relu`` for the linear-attention one).

- ``softmax-peak-bounds``: the peak lower bound on a row with a gap (A), the upper bound on a
  row of width a (B), and the separation of D_0 from D_1 at threshold 1/2.
- ``softmax-peak-monotone``: the peak weight strictly increases with the scale.
- ``power-attention-peak``: softmax on scores beta log z is power attention.
- ``linear-peak-bound``: normalized linear attention's peak bound, its decrease with n (C) and
  its scale invariance (D).

Score rows are realized exactly as in the derivation: d = n keys k_s = e_s (the identity),
queries q_t = z_t / c, so x_ts = c q_t.k_s is z_ts up to one rounding of q (the oracle uses the
realized scores); weights are read with v = identity (the output row is the weight row).
Rounding bounds come from ``verify.exact.errors`` (D10) through
``support.common.exact_and_bound``. Peak bounds come from ``derivations.separation``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.claims import homogeneous_weights_applies, softmax_weights_applies
from verify.properties.support.common import exact_and_bound, tensor_snippet
from verify.properties.support.inputs import interval, weight_inputs
from verify.properties.support.observe import (
    DPS,
    EXPORT_ROUNDINGS,
    U64,
    certified_change,
    elementwise,
    float_down,
    float_up,
    np64,
)
from verify.properties.support.paths import call_mode
from verify.spec.results import NotApplicable, Observation


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
        return tensor_snippet(
            {"rows": self.rows},
            "d = n, k = v = identity, q = rows / c (c = the variant's scale at d = n)",
            inline={"rows": "score rows z_t"},
        )


def _row_weights(variant, rows: list[list[float]], ctx, *, allow_nonfinite: bool = False):
    """(exact weights, their bound, the variant's weights (T x n)) in the sum mode on inputs
    realizing score rows z_t (length n): d = n, k = identity, q_t = z_t / c, v = identity;
    B = H = 1, T = len(rows)."""
    n = len(rows[0])
    q = np.asarray(rows, dtype=np.float64)[None, None] / variant.score_scale(n)
    x = weight_inputs(q, np.eye(n)[None, None], ctx, case="score rows")
    ref, eb = exact_and_bound(variant, x, ctx, denominator="sum")
    w = np64(call_mode(variant, x, "sum", allow_nonfinite=allow_nonfinite))[0, 0]
    return ref, eb, w


def _peak_examples(variant, ctx):
    from hypothesis import strategies as st

    from derivations.separation import smallest_separating_n
    from verify.strategies import sizes

    n_min = smallest_separating_n(0.5)

    @st.composite
    def draw(d):
        n = d(sizes(n_min, 8))
        i = d(st.integers(0, n - 1))
        top = d(interval(0.0, 4.0))
        gap = d(interval(0.0, 6.0))
        a_row = [top - gap - d(interval(0.0, 3.0)) for _ in range(n)]
        a_row[i] = top
        a = d(interval(0.0, 5.0))
        b_row = [d(interval(0.0, a)) for _ in range(n)]
        d0 = [d(interval(0.0, 1.0)) for _ in range(n)]
        d1 = [d(interval(0.0, 1.0)) for _ in range(n)]
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
    ref, eb, w = _row_weights(variant, ex.rows, ctx)
    b = eb.bound[0, 0]
    scores = ref.scores[0, 0]
    obs = []
    slack = EXPORT_ROUNDINGS * U64
    with mpmath.workdps(DPS):
        # A: the exact gap of row 0, rounded down (the lower bound increases with the gap)
        row = list(scores[0])
        i_star = max(range(n), key=lambda j: row[j])
        gap = float_down(row[i_star] - max(row[j] for j in range(n) if j != i_star))
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
            a = float_up(max(row) - min(row))
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


SOFTMAX_PEAK_BOUNDS = declare(
    "softmax-peak-bounds", softmax_weights_applies, _peak_examples, _peak_bounds_check
)


def _monotone_examples(variant, ctx):
    from hypothesis import assume
    from hypothesis import strategies as st

    from verify.strategies import sizes

    @st.composite
    def draw(d):
        n = d(sizes(2, 6))
        z = [d(interval(0.1, 2.0)) for _ in range(n)]
        assume(max(z) - min(z) > 0.25)
        factors = (0.5, 1.0, 2.0, 4.0)  # powers of two: c z is exact
        return RowsExample([[f * t for t in z] for f in factors], [f"c = {f}" for f in factors])

    return draw()


def _monotone_check(variant, ex: RowsExample, ctx) -> list[Observation]:
    ref, eb, w = _row_weights(variant, ex.rows, ctx)
    i = int(np.argmax(ex.rows[0]))
    exact = [ref.exact[0, 0, t, i] for t in range(len(ex.rows))]
    obs = []
    for t in range(len(ex.rows) - 1):
        diff = float(exact[t + 1] - exact[t])  # > 0: the peak grows with c (D8 D)
        rounding = float(eb.bound[0, 0, t, i] + eb.bound[0, 0, t + 1, i])
        if not diff > 0:  # mpmath: the same on every machine
            continue
        # sound for any exact increase (measured >= diff - rounding), certified when
        # diff > 2 rounding: a float decision, so it selects no pair and rejects no draw
        o = certified_change(
            float(w[t + 1, i] - w[t, i]),
            diff,
            rounding,
            f"peak {ex.labels[t + 1]} - {ex.labels[t]}",
        )
        o.where = f"{ex.labels[t]} -> {ex.labels[t + 1]}"
        if not diff > 2 * rounding:
            o.detail += "; exact <= 2 bound: no increase certified for this pair"
        obs.append(o)
    if not obs:
        raise NotApplicable("the exact peak does not grow between the scales (a constant row)")
    return obs


SOFTMAX_PEAK_MONOTONE = declare(
    "softmax-peak-monotone", softmax_weights_applies, _monotone_examples, _monotone_check
)


def _power_examples(variant, ctx):
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
        ref, eb, weights = _row_weights(variant, ex.rows, ctx)
        w = weights[0, 0]
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


POWER_ATTENTION_PEAK = declare(
    "power-attention-peak", softmax_weights_applies, _power_examples, _power_check
)


# ----------------------------------------------------------------------------- D8 linear
def _linear_examples(variant, ctx):
    from hypothesis import strategies as st

    from verify.strategies import sizes

    @st.composite
    def draw(d):
        n = d(sizes(2, 8))
        m = d(interval(0.125, 1.0))
        M = d(interval(m, m + 2.0))
        gap = d(interval(0.0, 3.0))
        p = d(st.integers(0, n - 1))
        others = [d(interval(m, M)) for _ in range(n - 1)]
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
    ref, eb, w = _row_weights(variant, ex.rows, ctx, allow_nonfinite=True)
    b = eb.bound[0, 0]
    scores = ref.scores[0, 0]
    obs = []
    with mpmath.workdps(DPS):
        for t in range(n_rows):
            others = [scores[t, j] for j in range(len(ex.rows[0])) if j != p and scores[t, j] != 0]
            m_lo, m_hi = float_down(min(others)), float_up(max(others))
            top = float_up(scores[t, p])
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
        elementwise(
            diff,
            b[n_rows] + b[n_rows - 1],
            f"D: |lin(c z) - lin(z)| (c = {ex.extra['c']})",
        )
    )
    return obs


LINEAR_PEAK_BOUND = declare(
    "linear-peak-bound", homogeneous_weights_applies, _linear_examples, _linear_peak_check
)


PROPERTIES = (
    SOFTMAX_PEAK_BOUNDS,
    SOFTMAX_PEAK_MONOTONE,
    POWER_ATTENTION_PEAK,
    LINEAR_PEAK_BOUND,
)

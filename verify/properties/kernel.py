"""Kernel properties: the kernel identity and the sign of the weights (D1, D4).

- ``kernel-identity`` (D1, fault class 10): the variant's feature map reproduces the claimed
  Taylor kernel, phi(q).phi(k) = kappa_N(c q.k), within the feature-form rounding bound (D10).
- ``weights-vs-reference`` (D4): the normalized weights, read from the variant itself with
  v = identity (S keys, d_v = S: output row t = weights of query t), match the exact weights of
  the claimed positive kernel (exp, even kappa_N, elu+1, FAVOR+) within the derived bound; the
  same bound makes them >= 0 and their rows sum to 1 (checked and reported on their own).
  Named for what fails it: weights that differ from the reference fail it even when every one
  is positive.
- ``odd-order-counterexample`` (D4): an odd kappa_N gives a certified negative normalized weight
  on some input of the example's search set (D4's scores (-3, 0.5, 1) among them).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.claims import dtype_reason, positivity_reason
from verify.properties.support.common import (
    MAX_DIM,
    MIN_RADIUS,
    Example,
    exact_and_bound,
    feature_map,
    tensor_snippet,
)
from verify.properties.support.inputs import (
    ctx_tensor,
    elements,
    identity_values,
    inputs_with_radius,
    interval,
    rounded,
    weight_inputs,
)
from verify.properties.support.observe import DPS, np64, ratios, worst_index
from verify.properties.support.paths import call_mode, sum_mode
from verify.spec.results import NotApplicable, Observation, VariantError

#: fault class 10 triggers (d = 2, q = k = (1, 1); d = 4, q = (1, 1, 1, 1), k = -q): an
#: element-wise square map gives 4 instead of 5 and -1 instead of 5 (at scale 1)
KERNEL_IDENTITY_TRIGGERS = (
    ((1.0, 1.0), (1.0, 1.0)),
    ((1.0, 1.0, 1.0, 1.0), (-1.0, -1.0, -1.0, -1.0)),
)
#: D4's example row: kappa_1 on scores (-3, 0.5, 1) gives weights (-4/3, 1, 4/3)
D4_ODD_ROW = (-3.0, 0.5, 1.0)
#: largest score radius drawn by ``weights-vs-reference`` (positivity holds at every radius;
#: the rounding bound stays informative well beyond D4's truncation range)
POSITIVITY_RADIUS = 6.0


def exact_scale(variant, d: int):
    """The claimed score scale as an mpf: 1/sqrt(d) exactly for the default of exp-type
    kernels (the rounding of fl(1/sqrt(d)) is part of the D10 count), else the given float."""
    import mpmath

    if variant.scale == "default":
        return 1 / mpmath.sqrt(d) if variant.exp_type else mpmath.mpf(1)
    return mpmath.mpf(float(variant.scale))


# ----------------------------------------------------------------------------- kernel identity
@dataclass
class PairsExample:
    """P (query, key) pairs of dimension d, float64 values of the run's dtype."""

    q: list[list[float]]
    k: list[list[float]]
    trigger: str = ""

    def __repr__(self) -> str:
        tag = f" ({self.trigger})" if self.trigger else ""
        return f"PairsExample{tag}(q={self.q!r}, k={self.k!r})"

    def snippet(self) -> str:
        return tensor_snippet(
            {"q": self.q, "k": self.k},
            "compare (phi(q) * phi(k)).sum(-1) with kappa_N(c q.k) row by row",
        )


def _identity_examples(variant, ctx):
    from hypothesis import strategies as st

    from verify.strategies import sizes

    triggers = st.sampled_from(
        [PairsExample([list(q)], [list(k)], "fault class 10") for q, k in KERNEL_IDENTITY_TRIGGERS]
    )

    @st.composite
    def random(draw):
        d = draw(sizes(1, MAX_DIM))
        p = draw(sizes(1, 4))
        el = elements(ctx.torch_dtype)
        rows = st.lists(el, min_size=d, max_size=d)
        q = draw(st.lists(rows, min_size=p, max_size=p))
        k = draw(st.lists(rows, min_size=p, max_size=p))
        qd = rounded(q, ctx)
        kd = rounded(k, ctx)
        return PairsExample(qd, kd)

    return st.one_of(triggers, random())


def _kernel_identity_applies(variant, ctx) -> str | None:
    if variant.order is None:
        return "needs a claimed Taylor kernel (taylor:N or linear:taylor:N)"
    if variant.feature_map is None:
        return "the variant exposes no feature map"
    return dtype_reason(variant, ctx)


def _kernel_identity_check(variant, ex: PairsExample, ctx) -> Observation:
    import mpmath
    import torch

    from derivations import rounding as d10
    from derivations.truncation import kappa
    from verify.exact import errors

    N = variant.order
    q = ctx_tensor(ex.q, ctx)
    k = ctx_tensor(ex.k, ctx)
    d = q.shape[-1]
    why = errors.outside_model(
        f"taylor:{N}",
        q[None, None],
        k[None, None],
        torch.ones(1, 1, k.shape[0], 1, dtype=torch.float64),
        dtype=ctx.dtype,
        scale=1.0 if variant.feature_scale == "none" else variant.score_scale(d),
    )
    if why:
        raise NotApplicable(why)
    # bound stated before the feature map runs: features carry gamma_{4N+3} (D10), the dot
    # product of m of them gamma_{m+2}, relative to the majorant kappa_N(c sum_i |q_i||k_i|)
    acc = errors.ACCUMULATION[ctx.model_dtype]
    u = d10.unit_roundoff(acc)
    e_phi = d10.taylor_feature_relative_error(N, u)
    if acc != ctx.model_dtype:  # features rounded once more to the input dtype (two-level model)
        e_phi = (1 + e_phi) * (1 + d10.unit_roundoff(ctx.model_dtype)) - 1
    phi_q = feature_map(variant, q)
    phi_k = feature_map(variant, k)
    if phi_q.shape[-1] != phi_k.shape[-1]:
        raise VariantError(
            f"feature_map: {phi_q.shape[-1]} query features vs {phi_k.shape[-1]} key features"
        )
    m = phi_q.shape[-1]
    rel = d10.feature_form_relative_bound(e_phi, m, 1, u, False)
    acc_t = getattr(torch, acc)
    dots = (phi_q.to(acc_t) * phi_k.to(acc_t)).sum(-1).double().tolist()
    worst = None
    with mpmath.workdps(DPS):
        c = mpmath.mpf(1) if variant.feature_scale == "none" else exact_scale(variant, d)
        for i, (qi, ki) in enumerate(zip(ex.q, ex.k)):
            qm = [mpmath.mpf(a) for a in rounded(qi, ctx)]
            km = [mpmath.mpf(a) for a in rounded(ki, ctx)]
            x = c * mpmath.fsum(a * b for a, b in zip(qm, km))
            xa = c * mpmath.fsum(abs(a) * abs(b) for a, b in zip(qm, km))
            exact = kappa(N, x)
            majorant = kappa(N, xa)
            err = float(abs(mpmath.mpf(dots[i]) - exact))
            bnd = float(rel * majorant)
            obs = Observation(
                err,
                bnd,
                "derived",
                where=f"pair {i}",
                detail=f"phi(q).phi(k) = {dots[i]!r}, kappa_{N}(c q.k) = {float(exact)!r} "
                f"(c = {float(c):.6g}, m = {m} features, {ctx.dtype}); bound "
                f"feature_form_relative_bound * kappa_{N}(c sum|q||k|) = {bnd:.3e}",
            )
            if worst is None or obs.ratio > worst.ratio:
                worst = obs
    return worst


KERNEL_IDENTITY = declare(
    "kernel-identity", _kernel_identity_applies, _identity_examples, _kernel_identity_check
)


# ----------------------------------------------------------------------------- positivity
def _positive_applies(variant, ctx) -> str | None:
    unknown = "kernel unknown: positivity is a claim about the kernel"
    if why := positivity_reason(variant, unknown=unknown, what="positivity"):
        return why
    if sum_mode(variant) is None:
        return "unnormalized variant: its weights are not a distribution"
    if variant.linear_map == "favor" and variant.projection is None:
        return "FAVOR+ without a declared projection: no exact weights to compare with"
    return dtype_reason(variant, ctx)


def _positive_examples(variant, ctx):
    radius = interval(MIN_RADIUS, POSITIVITY_RADIUS) if variant.exp_type else None
    if variant.linear_map == "favor":
        radius = interval(MIN_RADIUS, 2.0)
    return inputs_with_radius(
        variant, ctx, radius, cases=("random", "equal_keys", "positive"), max_len=8
    ).map(lambda x: Example(x))


def _positive_check(variant, ex: Example, ctx) -> list[Observation]:
    from verify.exact.errors import compare

    x = identity_values(ex.inputs)
    ref, eb = exact_and_bound(variant, x, ctx, denominator="sum")
    out = call_mode(variant, x, "sum")
    agree = compare(out, eb, ref, what="weights (v = identity)")
    w = np64(out)
    bound = eb.bound
    # the exact weights are >= 0, so -w_hat <= |w_hat - w| <= bound
    neg = np.maximum(-w, 0.0)
    idx = worst_index(ratios(neg, bound))
    negativity = Observation(
        float(neg[idx]),
        float(bound[idx]),
        "derived",
        where=str(idx),
        detail=f"smallest weight {float(w.min()):.3e}; weights must be >= -bound",
    )
    # row sums: sum_s w_hat_ts = D_t/(D_t + eps) (1 without a declared eps) within
    # sum_s bound_ts + the float64 summations of both sides (fsum: u|sum| each)
    visible = ref.count > 0
    worst_row = None
    u64 = 2.0**-53
    for idx_row in zip(*np.nonzero(visible)):
        row = w[idx_row]
        total = math.fsum(row.tolist())
        expected = math.fsum(float(x) for x in ref.exact[idx_row])
        obs = Observation(
            abs(total - expected),
            float(bound[idx_row].sum()) + u64 * (abs(total) + abs(expected)),
            "derived",
            where=f"row {tuple(int(i) for i in idx_row)}",
            detail=f"row sum {total!r}, exact {expected!r} (D/(D + eps) with the declared eps "
            f"{variant.eps}), within the summed weight bounds",
        )
        if worst_row is None or obs.ratio > worst_row.ratio:
            worst_row = obs
    return [o for o in (agree, negativity, worst_row) if o is not None]


WEIGHTS_VS_REFERENCE = declare(
    "weights-vs-reference", _positive_applies, _positive_examples, _positive_check
)


# ----------------------------------------------------------------------------- odd orders
@functools.cache
def kappa_root(order: int) -> float:
    """The real root of kappa_N for odd N (negative, simple; D4), as a float (bisection on the
    exact rational kappa_N of ``derivations.truncation``; kappa_N is increasing for odd N)."""
    from derivations.truncation import kappa, real_root_count

    if real_root_count(order) != 1:
        raise ValueError(f"order: expected an odd order (one real root), got {order}")
    lo, hi = Fraction(-1), Fraction(0)
    while kappa(order, lo) >= 0:
        lo *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if kappa(order, mid) < 0:
            lo = mid
        else:
            hi = mid
    return float(hi)


def _odd_applies(variant, ctx) -> str | None:
    n = variant.order
    if n is None:
        return "needs a claimed Taylor kernel (taylor:N or linear:taylor:N)"
    if n % 2 == 0:
        return f"even order {n}: kappa_{n} > 0 everywhere (weights-vs-reference applies instead)"
    if sum_mode(variant) is None:
        return "unnormalized variant: normalized weights are not available"
    return dtype_reason(variant, ctx)


def _score_row_inputs(variant, rows, ctx):
    """d = 1 inputs realizing score rows: q_t = 1, k_s = x_s / c (c the claimed scale at d = 1);
    one (batch) entry per row, rows of equal length."""
    c = variant.score_scale(1)
    S = len(rows[0])
    k = (np.asarray(rows, dtype=np.float64) / c).reshape(len(rows), 1, S, 1)
    return weight_inputs(np.ones((len(rows), 1, 1, 1)), k, ctx, case="score rows")


def _odd_rows(order: int) -> list[tuple[str, tuple[float, ...]]]:
    """D4's row (when its kappa_N denominator is positive and the first weight negative)
    and the derived row (-P, P, P) with P = ceil(|root|) + 1: kappa_N(-P) < 0 and
    kappa_N(P) > |kappa_N(-P)| (odd N: kappa_N(P) + kappa_N(-P) = 2 * even part > 0)."""
    from derivations.shift import kernel_weights

    rows = []
    try:
        w = kernel_weights(order, D4_ODD_ROW)
        if w[0] < 0:
            rows.append(("D4's row", D4_ODD_ROW))
    except ValueError:
        pass
    p = float(math.ceil(abs(kappa_root(order))) + 1)
    rows.append(("derived row (-P, P, P)", (-p, p, p)))
    return rows


def _odd_examples(variant, ctx):
    from hypothesis import strategies as st

    root = abs(kappa_root(variant.order))
    radius = st.floats(root, root + 4.0, allow_subnormal=False)
    return inputs_with_radius(variant, ctx, radius, cases=("random",), max_len=6).map(
        lambda x: Example(x, {"search": "fixed rows + drawn inputs"})
    )


def _negative_evidence(variant, x, ctx, label: str):
    """(compare observation, evidence string or None) for one candidate input."""
    import mpmath

    from verify.exact.errors import compare

    ref, eb = exact_and_bound(variant, x, ctx, denominator="sum")
    finite = np.isfinite(eb.bound)
    out = call_mode(variant, x, "sum", allow_nonfinite=not finite.all())
    try:
        agree = compare(out, eb, ref, what=f"{label}: weights")
    except NotApplicable:
        return None, None
    w = np64(out)
    # certified negative: the exact weight is < 0 and the computed one below -bound
    for idx in zip(*np.nonzero(finite & (w < -eb.bound))):
        if ref.exact[idx] < 0:
            with mpmath.workdps(DPS):
                scores = [float(s) for s in ref.scores[idx[:3]]]
            return agree, (
                f"{label}: weight {w[idx]:.6g} (exact {float(ref.exact[idx]):.6g}, bound "
                f"{eb.bound[idx]:.2e}) at {tuple(int(i) for i in idx)}, row scores "
                f"{[round(s, 6) for s in scores]}"
            )
    return agree, None


def _odd_check(variant, ex: Example, ctx) -> list[Observation]:
    candidates = [
        (label, _score_row_inputs(variant, [row], ctx)) for label, row in _odd_rows(variant.order)
    ]
    candidates.append(("drawn inputs", identity_values(ex.inputs)))
    found, agreements = [], []
    for label, x in candidates:
        try:
            agree, evidence = _negative_evidence(variant, x, ctx, label)
        except NotApplicable:
            continue
        if agree is not None:
            agreements.append(agree)
        if evidence:
            found.append(evidence)
    evidence_obs = Observation(
        0.0 if found else 1.0,
        0.0,
        "exact",
        where="search set",
        detail=(
            "certified negative weight(s): " + "; ".join(found)
            if found
            else f"no certified negative weight among {[c[0] for c in candidates]}"
        ),
    )
    bad = [a for a in agreements if a.ratio > 1.0]
    return [evidence_obs, *bad]


ODD_ORDER_COUNTEREXAMPLE = declare(
    "odd-order-counterexample", _odd_applies, _odd_examples, _odd_check
)


PROPERTIES = (
    KERNEL_IDENTITY,
    WEIGHTS_VS_REFERENCE,
    ODD_ORDER_COUNTEREXAMPLE,
)

"""When no convention fits: a scale fitted per d, a polynomial fit of kappa(x)/kappa(0), and the
FAVOR-like ranking of random-feature variants."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from verify.probes.kernels import (
    CONVENTIONS,
    ELEMENTWISE,
    MAX_TAYLOR_ORDER,
    N_KEYS,
    Ident,
    candidate_ratio,
    kappa_taylor,
    kernel_values,
    numerator_bound,
    window_visible,
)
from verify.probes.report import ProbeReport
from verify.probes.restrictions import length_at_least
from verify.probes.runner import Runner, ratio_bound, shortest_in
from verify.spec.kernel import taylor_order
from verify.spec.results import VariantError


def _kappa_fn(kernel: str) -> tuple[Callable[[float], float], Callable[[float], float]]:
    """(kappa, a majorant of |kappa'| on [-|y|, |y|] as a function of |y|)."""
    if kernel == "softmax":
        return math.exp, math.exp
    from derivations import rounding as d10

    N = taylor_order(kernel)
    return (
        lambda y: float(kappa_taylor(N, np.array(y))),
        lambda a: d10.taylor_weight_majorant(N - 1, a, 0.0),
    )


def _u(run: Runner) -> float:
    from derivations import rounding as d10

    return d10.unit_roundoff(run.bound_dtype)


def fit_scale(run: Runner, reads: dict[int, Ident], normalized: bool):
    """exp or kappa_N (N >= 1) at a scale fitted per d, when no convention fits."""
    for kern in ("softmax",) + tuple(f"taylor:{n}" for n in range(1, MAX_TAYLOR_ORDER + 1)):
        fit = _fit_one(run, reads, kern, normalized)
        if fit is not None:
            return fit
    return None


def _fit_one(run: Runner, reads: dict[int, Ident], kern: str, normalized: bool):
    """c is solved from row 0's key f of largest raw score x_f (kappa is increasing on
    [0, oo)); the measured ratio's own bound beta_f gives an interval [c_lo, c_hi], and each
    key is then allowed |x_s| dc max|kappa'| on top of its bound (mean value theorem,
    dc = max(c - c_lo, c_hi - c)), against key 0 (kappa(0) = 1 at every scale)."""
    from derivations import rounding as d10

    kap, dmaj = _kappa_fn(kern)
    scales: dict[str, float] = {}
    intervals: dict[str, list[float]] = {}
    worst = 0.0
    for d, ident in reads.items():
        x = ident.raw[0]
        f = int(np.argmax(x))
        if not (x[f] > 0 and ident.A[0, 0] != 0):
            return None
        Rf = ident.A[0, f] / ident.A[0, 0] if normalized else ident.A[0, f]
        if not Rf > 1:
            return None
        c = _invert(kap, Rf) / x[f]
        b = numerator_bound(run, ident, kern, c, run.bound_dtype)
        if b is None:
            return None
        q, k = ident.q[0, 0, :N_KEYS].numpy(), ident.k[0, 0, :N_KEYS].numpy()
        W = kernel_values(kern, c, q, k)
        eta = d10.underflow_abs_error(run.bound_dtype)
        beta = ratio_bound(W[0], b[0], 0, _u(run), eta, ident.A[0, 0])[f] if normalized else b[0, f]
        if not np.isfinite(beta):
            return None
        lo = _invert(kap, max(Rf - beta, 1.0)) / x[f]
        hi = _invert(kap, Rf + beta) / x[f]
        dc = max(c - lo, hi - c)
        absx = np.abs(ident.raw)
        extra = absx * dc * np.vectorize(dmaj)(absx * (c + dc))
        if normalized:  # the allowance enters the ratio to key 0 (kappa(0) = 1)
            extra = extra * (1 + d10.gamma(4, _u(run)))
        r, _ = candidate_ratio(
            run, ident, kern, c, normalized, run.bound_dtype, extra=extra, ref0=True
        )
        if r > 1:
            return None
        worst = max(worst, r)
        scales[str(d)] = float(c)
        intervals[str(d)] = [float(lo), float(hi)]
    return dict(
        verdict="consistent",
        kernel=kern,
        scale="fitted",
        precision=run.bound_dtype,
        max_ratio=worst,
        scale_by_d=scales,
        scale_interval_by_d=intervals,
        detail="scale fitted per d (none of 1/sqrt(d), 1/d, d^-1/4, 1 fits)",
    )


def _invert(kap: Callable[[float], float], y: float) -> float:
    """The s >= 0 with kap(s) = y (kap increasing on [0, oo), kap(0) = 1 <= y)."""
    lo, hi = 0.0, 1.0
    while kap(hi) < y:
        hi *= 2.0
        if hi > 1e6:
            return hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if kap(mid) < y:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-17 * hi:
            break
    return 0.5 * (lo + hi)


def poly_fit(report: ProbeReport, ident: Ident) -> None:
    """Least-squares polynomial fit of kappa(x)/kappa(0) (relative residuals) at d = 4."""
    from derivations.feature_maps import taylor_coefficient

    kern = report.kernel
    conv = kern.get("scale")
    if conv in CONVENTIONS:
        c, how = CONVENTIONS[conv](ident.d), f"identified convention {conv}"
    elif conv == "fitted":
        c, how = kern["scale_by_d"][str(ident.d)], "fitted scale"
    else:
        c, how = ident.d**-0.5, "assumed 1/sqrt(d) (scale not identified)"
    A = ident.A
    rows = ident.vis[:, 0] & (A[:, 0] != 0)
    if not rows.any():
        report.fit = {"detail": "kappa(0) = 0: the zero key has no weight, no ratio to fit"}
        return
    R = A[rows] / A[rows][:, [0]]  # kappa(x)/kappa(0), normalized or not
    keep = ident.vis[rows] & (R != 0)
    xs = (c * ident.raw[rows])[keep]
    ys = R[keep]
    deg = int(min(MAX_TAYLOR_ORDER, len(np.unique(xs)) - 1))
    if deg < 1:
        report.fit = {"detail": "too few distinct scores"}
        return
    w = 1.0 / np.abs(ys)
    V = np.vander(xs, deg + 1, increasing=True)
    coef, *_ = np.linalg.lstsq(V * w[:, None], ys * w, rcond=None)
    resid = (V @ coef - ys) * w
    report.fit = {
        "degree": deg,
        "coefficients": [float(a) for a in coef],
        "taylor_coefficients": [float(taylor_coefficient(j)) for j in range(deg + 1)],
        "score_scale": c,
        "scale_source": how,
        "rms_relative_residual": float(np.sqrt(np.mean(resid**2))),
        "score_range": [float(xs.min()), float(xs.max())],
    }


FAVOR_LEN = 16
FAVOR_DIM = 8


def favor_like(run: Runner, report: ProbeReport, ident: Ident, normalized: bool) -> None:
    """Rank exp against the other maps by their rms log-deviation on moderate inputs.

    Random features (FAVOR+) estimate exp without equalling it: the log-weights of a row are
    c x_ts plus noise. The slope c is fitted by least squares over all rows (each row centred:
    the normalization drops out), with its standard error; the other maps are scored at each
    convention. Positive weights that are not a function of q.k only and lie closer to exp than
    to every other map are reported FAVOR-like, with the convention nearest the fitted slope.
    A ranking, not a tolerance."""
    pos = report.positivity.get("positive")
    if not (pos and report.qk_only.result is False and normalized):
        return
    T = length_at_least(report, FAVOR_LEN)
    if T is None:
        return
    n = min(T, FAVOR_LEN)
    d = FAVOR_DIM  # conventions a factor sqrt(8)^(1/2) ~ 1.7 apart: robust to the feature noise
    q, k = run.rand(1, 1, T, d, std=0.5), run.rand(1, 1, T, d, std=0.5)
    try:
        A = run.weights(q, k, ident.causal, n)[0, 0, :n]
    except VariantError:
        return
    vis = window_visible(n, ident.causal, ident.window)
    if not (A[vis] > 0).all():
        return
    qq, kk = q[0, 0, :n].numpy(), k[0, 0, :n].numpy()
    rows = [np.nonzero(vis[t])[0] for t in range(n)]
    rows = [(t, cols) for t, cols in enumerate(rows) if len(cols) >= 2]

    def centred(M):
        return np.concatenate([M[t, cols] - M[t, cols].mean() for t, cols in rows])

    z, x = centred(np.log(np.where(vis, A, 1.0))), centred(qq @ kk.T)
    slope = float(z @ x / (x @ x))
    resid = z - slope * x
    dof = max(len(z) - len(rows) - 1, 1)
    stderr = float(np.sqrt(resid @ resid / dof / (x @ x)))
    scores = {("softmax", "fitted"): float(np.sqrt(np.mean(resid**2)))}
    for kern in ("linear:identity",) + ELEMENTWISE:
        for conv, cf in CONVENTIONS.items():
            W = kernel_values(kern, cf(d), qq, kk)
            if not (W[vis] > 0).all():  # a log-deviation needs positive candidate weights
                continue
            dev = z - centred(np.log(np.where(vis, W, 1.0)))
            scores[(kern, conv)] = float(np.sqrt(np.mean(dev**2)))
    report.kernel["ranking"] = {f"{k} ({c})": s for (k, c), s in sorted(scores.items())}
    others = [s for (kk_, _), s in scores.items() if kk_ != "softmax"]
    if scores[("softmax", "fitted")] < min(others, default=math.inf):
        conv = min(CONVENTIONS, key=lambda c: abs(math.log(CONVENTIONS[c](d) / slope)))
        # closest to exp is a ranking, not a fit: random features have no bound without their
        # count, so the kernel stays unknown and the evidence is reported
        report.kernel.update(
            verdict="none",
            kernel="unknown",
            resembles="linear:favor",
            scale=conv,
            fitted_scale=slope,
            fitted_scale_stderr=stderr,
            scatter=scores[("softmax", "fitted")],
            detail="unknown: positive, not a function of q.k only, closest to exp (FAVOR-like "
            "random features would fit; no bound exists without their count): log-weights slope "
            f"{slope:.3g} +- {stderr:.2g} at d = {d} (nearest convention {conv}), rms "
            f"log-deviation {scores[('softmax', 'fitted')]:.3g}; best other map "
            f"{min(others, default=math.inf):.3g}",
        )


def constant_scale(kernel: dict) -> float | None:
    """The shortest decimal in every fitted scale interval, when the intervals overlap."""
    ivs = list(kernel.get("scale_interval_by_d", {}).values())
    if not ivs:
        return None
    lo, hi = max(a for a, _ in ivs), min(b for _, b in ivs)
    return shortest_in(lo, hi) if lo <= hi else None

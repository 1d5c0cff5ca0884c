"""FAVOR+ properties: the statistics of D9's random-feature estimate (claims ``linear:favor``).

- ``favor-kernel-unbiased``: the mean of independent estimates phi(x).phi(y) is within a
  Chebyshev / fourth-moment half width of e^(c q.k).
- ``favor-orthogonal-variance``: the variance of the (orthogonal) estimate does not exceed the
  iid closed form beyond a fourth-moment statistical margin.

Statistical widths come from ``derivations.related`` (alpha = 1e-6, Bonferroni over the examples
of the property and the samplers).
"""

from __future__ import annotations

import math

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.claims import dtype_reason
from verify.properties.support.common import Example, feature_map
from verify.properties.support.inputs import interval, rounded
from verify.properties.support.observe import DPS, U64
from verify.spec.results import Observation, VariantError

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
    return dtype_reason(variant, ctx)


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

    from verify.strategies import sizes

    @st.composite
    def draw(d):
        dim = d(sizes(1, 4))
        q = [d(interval(-1.5, 1.5)) for _ in range(dim)]
        if d(st.booleans()):
            k = [-a + d(interval(-0.25, 0.25)) for a in q]
        else:
            k = [d(interval(-1.5, 1.5)) for _ in range(dim)]
        qd = rounded(q, ctx)
        kd = rounded(k, ctx)
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
    return (prod.sum(-1) * R).numpy(), m, _feature_rounding(variant, q, k, proj, ctx)


def _feature_rounding(variant, q, k, proj, ctx) -> float:
    """Relative bound r on |mean of computed products - mean of exact ones| / (computed mean)
    for the project's map in the run's dtype (D10, ``favor_feature_relative_error``).

    The exact estimator uses the float64 draws; the computed one rounds each direction to the
    dtype (one more rounding of each w_j x_j), scales x by fl(sqrt c) (two more of each x_j:
    three per term of w.x, four per term of |x|^2), so the D10 bound is taken with d + 4
    (gamma_{d+6} covers both). Each feature is within e of its exact value, each positive
    product within (1 + e)^2 - 1 =: t, so the computed mean is within t of the exact one
    relative to the exact mean, i.e. within t / (1 - t) of the computed mean. Without this
    a nearly deterministic estimate (k = -q: s = 0, zero variance) fails on the features'
    own rounding (float32: observed / half width up to 2.9e3)."""
    import torch

    from derivations import rounding as d10
    from verify.exact import errors

    u = d10.unit_roundoff(ctx.dtype)
    dev = "cuda" if str(ctx.device).startswith("cuda") else "cpu"
    lib = variant.exp_library or errors.DEFAULT_EXP_LIBRARY[dev]
    c = _favor_moments(variant, q, k)[0]
    P = np.abs(proj.to(torch.float64).cpu().numpy()) * (1 + u)  # |w| <= |fl(w)| (1 + u)
    xs = np.sqrt(c) * np.abs(np.asarray([q, k], dtype=np.float64))
    a_max = float((xs @ P.T).max())
    sq_max = float((xs * xs).sum(-1).max())
    e = d10.favor_feature_relative_error(
        a_max, sq_max, len(q) + 4, u, d10.LIBRARY_EXP_ULPS[lib].value
    )
    t = (1 + e) ** 2 - 1
    return t / (1 - t) if t < 1 else math.inf


def _callable_draws(variant, q, k, ctx, *, seed: int):
    """(estimates, m): the variant's own feature map called FAVOR_CALLABLE_DRAWS times, each
    with torch's (forked) default generator seeded afresh, so a map that draws its projection
    per call gives independent draws (deterministic maps are excluded by ``applies``)."""
    import torch

    xy = torch.tensor([q, k], dtype=torch.float64).to(ctx.torch_dtype)
    out = []
    m = None
    with torch.random.fork_rng(devices=[]):  # the caller's RNG state is restored afterwards
        for r in range(FAVOR_CALLABLE_DRAWS):
            torch.default_generator.manual_seed(seed + r)
            phi = feature_map(variant, xy).to(torch.float64)
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
            iid, rounding = False, 0.0  # float64 only (see _unbiased_applies)
        else:
            Z, m, rounding = _builtin_draws(
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
        # float64 accumulation of R m products: gamma_{R m} relative to the (positive) sum;
        # the features' own rounding in the run's dtype (D10, _feature_rounding)
        width += (R * m * U64 * 1.01 + rounding) * abs(zbar)
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


def _unbiased_examples(variant, ctx):
    return _favor_pairs(ctx)


def _unbiased_applies(variant, ctx) -> str | None:
    reason = _favor_applies(variant, ctx)
    if reason is None and variant.feature_map is not None and ctx.dtype != "float64":
        return (
            "a feature map of the variant's own is checked in float64 only: how it rounds its "
            "features is not modelled, and a nearly deterministic estimate (k = -q) would be "
            "judged on that rounding"
        )
    return reason


FAVOR_UNBIASED = declare(
    "favor-kernel-unbiased", _unbiased_applies, _unbiased_examples, _favor_unbiased_check
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
        Z, m, _ = _builtin_draws(variant, q, k, ctx, orthogonal=True, seed=_seed(ex, ctx, 7))
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


def _variance_examples(variant, ctx):
    return _favor_pairs(ctx, min_s=0.05, max_s=1.0)


FAVOR_VARIANCE = declare(
    "favor-orthogonal-variance", _favor_applies, _variance_examples, _favor_variance_check
)


PROPERTIES = (
    FAVOR_UNBIASED,
    FAVOR_VARIANCE,
)

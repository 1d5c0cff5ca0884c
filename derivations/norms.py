"""D7. The denominator as a norm (Mongaras & Larson).

Kernel attention writes o_t = G_t N_t with the per-query scalar G_t = 1/D_t,
N_t = sum_s kappa(x_ts) v_s (d_v-vector), D_t = sum_s kappa(x_ts). For D_t > 0 (always for exp
and even kappa_N) every normalization invariant to positive scaling gives Norm(N_t) = Norm(o_t)
exactly: L2 x/||x||, RMSNorm x/rms(x), LayerNorm (x - mean)/std (population std, needs d_v >= 2).

With an eps inside the square root (torch.nn.LayerNorm / RMSNorm convention) the identity is
replaced by an exact shrink:

    Norm_eps(N_t) = Norm(o_t) / sqrt(1 + t),   t = eps / (D_t^2 * stat(o_t)),

with stat = ||o||^2 (L2), mean(o^2) (RMS), var(o) (LayerNorm). So
||Norm_eps(N_t) - Norm(o_t)||_2 = ||Norm(o_t)||_2 * (1 - 1/sqrt(1+t)) <= ||Norm(o_t)||_2 * t/2,
and ||Norm(o)||_2 = 1 (L2) or sqrt(d_v) (RMS, LayerNorm). With the clamp convention of
``torch.nn.functional.normalize`` (x / max(||x||, eps)) the identity is exact while
D_t ||o_t|| >= eps. The ``count`` denominator gives N_t/t = (D_t/t) o_t and ``none`` gives
N_t = D_t o_t: neither equals o_t unless D_t = t (resp. D_t = 1).

Numeric exports (plain Python floats): ``eps_relative_gap``, ``eps_relative_gap_bound``,
``l2_eps_gap``, ``rms_eps_gap``, ``layernorm_eps_gap``, ``l2_clamp_gap``,
``normalization_sensitivity``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from derivations._latex import tex
from derivations._record import Derivation, main_for, pick
from derivations._validate import check_choice, check_int, check_real

NORM_KINDS = ("l2", "rms", "layernorm")


# -- numeric exports --------------------------------------------------------------------------
def eps_relative_gap(t: float) -> float:
    """1 - 1/sqrt(1 + t): exact relative size of the eps gap (D7).

    Norm_eps(N) = Norm(o)/sqrt(1+t) with t = eps/(D^2 stat(o)), so
    ||Norm_eps(N) - Norm(o)|| / ||Norm(o)|| equals this value. Evaluated without cancellation
    as t / (sqrt(1+t) (1 + sqrt(1+t))).

    Raises:
        TypeError, ValueError: ``t`` not a finite non-negative real.
    """
    t = check_real("t", t, nonneg=True)
    r = math.sqrt(1.0 + t)
    return t / (r * (1.0 + r))


def eps_relative_gap_bound(t: float) -> float:
    """t/2: proved upper bound on ``eps_relative_gap(t)`` (tight as t -> 0; D7).

    Raises:
        TypeError, ValueError: ``t`` not a finite non-negative real.
    """
    return check_real("t", t, nonneg=True) / 2.0


def l2_eps_gap(eps: float, denominator: float, o_norm: float) -> float:
    """||L2_eps(N_t) - o_t/||o_t|| ||_2 for L2_eps(x) = x / sqrt(||x||^2 + eps), exactly.

    Args:
        eps: eps >= 0 inside the square root.
        denominator: D_t > 0 (N_t = D_t o_t).
        o_norm: ||o_t||_2 > 0.

    Returns:
        1 - 1/sqrt(1 + eps/(D_t^2 ||o_t||^2)) (dimensionless; the reference has norm 1).

    Raises:
        TypeError, ValueError: non-real input, eps < 0, D_t <= 0 or o_norm <= 0.
    """
    eps = check_real("eps", eps, nonneg=True)
    d = check_real("denominator", denominator, positive=True)
    s = check_real("o_norm", o_norm, positive=True)
    return eps_relative_gap(eps / (d * d * s * s))


def rms_eps_gap(eps: float, denominator: float, o_rms: float, d_v: int) -> float:
    """||RMS_eps(N_t) - o_t/rms(o_t)||_2 for RMS_eps(x) = x / sqrt(mean(x^2) + eps), exactly.

    Args:
        eps >= 0; denominator D_t > 0; o_rms = rms(o_t) = sqrt(mean_i o_ti^2) > 0; d_v >= 1.

    Returns:
        sqrt(d_v) * (1 - 1/sqrt(1 + eps/(D_t^2 rms(o_t)^2))) (the reference has norm sqrt(d_v)).

    Raises:
        TypeError, ValueError: bad arguments (named in the message).
    """
    eps = check_real("eps", eps, nonneg=True)
    d = check_real("denominator", denominator, positive=True)
    r = check_real("o_rms", o_rms, positive=True)
    return math.sqrt(check_int("d_v", d_v, 1)) * eps_relative_gap(eps / (d * d * r * r))


def layernorm_eps_gap(eps: float, denominator: float, o_std: float, d_v: int) -> float:
    """||LN_eps(N_t) - LN(o_t)||_2 for LN_eps(x) = (x - mean x)/sqrt(var x + eps), exactly.

    ``var`` is the population variance (torch.nn.LayerNorm, no affine part).

    Args:
        eps >= 0; denominator D_t > 0; o_std = sqrt(var(o_t)) > 0 (needs d_v >= 2 and a
        non-constant o_t); d_v >= 2.

    Returns:
        sqrt(d_v) * (1 - 1/sqrt(1 + eps/(D_t^2 var(o_t)))) (LN(o_t) has norm sqrt(d_v)).

    Raises:
        TypeError, ValueError: bad arguments; d_v < 2 (LayerNorm of one entry is 0/0).
    """
    eps = check_real("eps", eps, nonneg=True)
    d = check_real("denominator", denominator, positive=True)
    s = check_real("o_std", o_std, positive=True)
    return math.sqrt(check_int("d_v", d_v, 2)) * eps_relative_gap(eps / (d * d * s * s))


def l2_clamp_gap(eps: float, denominator: float, o_norm: float) -> float:
    """||x/max(||x||, eps) at x = N_t minus o_t/||o_t|| ||_2 (torch.nn.functional.normalize).

    Exact: 0 when D_t ||o_t|| >= eps, else 1 - D_t ||o_t|| / eps.

    Raises:
        TypeError, ValueError: eps < 0, D_t <= 0 or o_norm <= 0.
    """
    eps = check_real("eps", eps, nonneg=True)
    d = check_real("denominator", denominator, positive=True)
    s = check_real("o_norm", o_norm, positive=True)
    n = d * s
    return 0.0 if n >= eps else 1.0 - n / eps


def normalization_sensitivity(
    kind: str, input_error: float, vector_norm: float, d_v: int, eps: float = 0.0
) -> float:
    """Bound on ||Norm_eps(y_hat) - Norm_eps(y)||_2 given ||y_hat - y||_2 <= input_error.

    Derived (D7; ``derive`` step "sensitivity"): for g(y) = y / sqrt(||y||^2 + e),
    ||g(y_hat) - g(y)|| <= 2 ||y_hat - y|| / sqrt(||y||^2 + e). RMS_eps = sqrt(d_v) g with
    e = d_v eps; LN_eps(y) = sqrt(d_v) g(P y) with P the centering projection (||P|| <= 1).

    Args:
        kind: ``"l2"``, ``"rms"`` or ``"layernorm"``.
        input_error: bound on ||y_hat - y||_2 (>= 0), e.g. the rounding bound of N_t.
        vector_norm: ||y||_2 for l2/rms, ||y - mean(y)||_2 for layernorm (> 0, or >= 0 with
            eps > 0), of the *reference* vector y.
        d_v: vector length (>= 1; >= 2 for layernorm).
        eps: eps inside the square root (>= 0).

    Returns:
        The bound; inf if eps = 0 and input_error >= vector_norm: y_hat may then be the zero
        vector, whose normalization is undefined (0/0), so no bound holds (for y_hat != 0 the
        Lipschitz bound is >= 2 there, the largest distance of two unit vectors).

    Raises:
        TypeError, ValueError: unknown ``kind`` or bad numbers.
    """
    check_choice("kind", kind, NORM_KINDS)
    delta = check_real("input_error", input_error, nonneg=True)
    y = check_real("vector_norm", vector_norm, nonneg=True)
    eps = check_real("eps", eps, nonneg=True)
    n = check_int("d_v", d_v, 2 if kind == "layernorm" else 1)
    e = eps if kind == "l2" else n * eps
    denom = math.sqrt(y * y + e)
    if denom == 0.0 or (e == 0.0 and delta >= y):
        return math.inf
    factor = 1.0 if kind == "l2" else math.sqrt(n)
    return factor * 2.0 * delta / denom


# -- derivation -------------------------------------------------------------------------------
# -- the record, one function per claim group ----------------------------------------------------
def _syms() -> dict[str, Any]:
    """Symbols of D7: n = d_v, indices i, j, D = D_t > 0, eps > 0, components o_j of o_t."""
    import sympy as sp

    i, j = sp.symbols("i j", integer=True, positive=True)
    return {
        "n": sp.Symbol("n", integer=True, positive=True),
        "i": i,
        "j": j,
        "D": sp.Symbol("D", positive=True),
        "eps": sp.Symbol("epsilon", positive=True),
        "o": sp.IndexedBase("o", real=True),
    }


def _fs(e: Any) -> Any:
    """Pull constant factors out of finite sums (linearity)."""
    import sympy as sp
    from sympy.simplify.simplify import factor_sum

    return e.replace(
        lambda z: isinstance(z, sp.Sum),
        lambda z: factor_sum(sp.Sum(sp.factor(z.function), *z.limits)),
    )


def _sq(f: Any) -> Any:
    """sum_j f^2 over j = 1..n (d_v components)."""
    import sympy as sp

    v = _syms()
    return sp.Sum(f**2, (v["j"], 1, v["n"]))


def _moments() -> dict[str, Any]:
    """mean and population variance of o_t and of N_t = D o_t (linearity applied to N_t)."""
    import sympy as sp

    n, j, D, o = pick(_syms(), "n", "j", "D", "o")
    mu_o = sp.Sum(o[j], (j, 1, n)) / n
    mu_N = _fs(sp.Sum(D * o[j], (j, 1, n)) / n)
    return {
        "mu_o": mu_o,
        "var_o": sp.Sum((o[j] - mu_o) ** 2, (j, 1, n)) / n,
        "mu_N": mu_N,
        "var_N": _fs(sp.Sum((D * o[j] - mu_N) ** 2, (j, 1, n)) / n),
    }


def _claim_scalar_gate(rec: Derivation) -> None:
    """G_t = 1/D_t is a per-query scalar; odd kappa_N can make D_t vanish."""
    import sympy as sp

    rec.step(
        r"Kernel attention: $o_t = G_t N_t$ with $G_t = 1 / D_t$, a per-query scalar (it "
        r"multiplies every component of $N_t$); $G_t > 0$ iff $D_t > 0$ ($\exp$, even "
        r"$\kappa_N$; odd $\kappa_N$ can give $D_t \le 0$, e.g. $N = 1$, scores $(-2, 0)$: "
        r"$D_t = -1 + 1 = 0$)."
    )
    rec.verify(
        "odd kappa_N can vanish: kappa_1(-2) + kappa_1(0) = 0 (G_t undefined)",
        lambda: (1 + sp.Integer(-2)) + (1 + sp.Integer(0)) == 0,
        "N = 1, scores (-2, 0)",
    )


def _claim_l2_rms(rec: Derivation) -> None:
    """L2(N_t) = L2(o_t) and RMS(N_t) = RMS(o_t) for D_t > 0."""
    import sympy as sp

    n, i, j, D, o = pick(_syms(), "n", "i", "j", "D", "o")
    No = D * o[i]  # component i of N_t = D_t o_t
    l2_N = No / sp.sqrt(_fs(_sq(D * o[j])))
    l2_o = o[i] / sp.sqrt(_sq(o[j]))
    # The normalizations are named operators sympy has no object for: templates
    # (derivations._latex) with both sides as slots from the objects the checks compare.
    cond = r" \qquad (N_t = D\, o_t,\ D > 0,\ n = d_v)"
    rec.statement["L2"] = tex(
        r"\operatorname{L2}(N_t)_i = @o" + cond, claim="L2(N_t) = L2(o_t) for D_t > 0", o=l2_o
    )
    rec.step(
        r"With $N_t = D\, o_t$, $D^2$ factors out of the root and $\sqrt{D^2} = D$:",
        tex(
            r"\operatorname{L2}(N_t)_i = \frac{D\, o_i}{\sqrt{\sum_{j=1}^{n} (D\, o_j)^2}} = @o",
            claim="L2(N_t) = L2(o_t) for D_t > 0",
            o=l2_N,
        ),
    )
    rec.prove(
        "L2(N_t) = L2(o_t) for D_t > 0",
        lambda: sp.simplify(l2_N - l2_o) == 0,
        "symbolic d_v = n (sympy Sum), symbolic components, D > 0",
    )
    rms_N = No / sp.sqrt(_fs(_sq(D * o[j])) / n)
    rms_o = o[i] / sp.sqrt(_sq(o[j]) / n)
    rec.statement["RMS"] = tex(
        r"\operatorname{RMS}(N_t)_i = @o" + cond, claim="RMS(N_t) = RMS(o_t) for D_t > 0", o=rms_o
    )
    rec.prove(
        "RMS(N_t) = RMS(o_t) for D_t > 0",
        lambda: sp.simplify(rms_N - rms_o) == 0,
        "symbolic d_v = n, D > 0",
    )


def _claim_layernorm(rec: Derivation, layernorm_min_dim: int) -> None:
    """LN(N_t) = LN(o_t) for D_t > 0, and from which d_v on the identity has content."""
    import sympy as sp

    i, D, o = pick(_syms(), "i", "D", "o")
    mom = _moments()
    mu_o, var_o, mu_N, var_N = mom["mu_o"], mom["var_o"], mom["mu_N"], mom["var_N"]
    ln_N = (D * o[i] - mu_N) / sp.sqrt(var_N)
    ln_o = (o[i] - mu_o) / sp.sqrt(var_o)
    rec.statement["LayerNorm"] = tex(
        r"\operatorname{LayerNorm}(N_t)_i = @o"
        r" \qquad (N_t = D\, o_t,\ D > 0,\ n = d_v \ge 2,\ \operatorname{var}(o_t) > 0)",
        claim="LN(N_t) = LN(o_t) for D_t > 0 (where var(o_t) > 0)",
        o=ln_o,
    )
    rec.step(
        r"$\operatorname{mean}(N_t) = D \operatorname{mean}(o_t)$ and "
        r"$\operatorname{var}(N_t) = D^2 \operatorname{var}(o_t)$ (linearity of the sum):",
        tex(
            r"\operatorname{mean}(N_t) = @m, \qquad \operatorname{var}(N_t) = @v",
            claim="mean(D o) = D mean(o), var(D o) = D^2 var(o)",
            m=mu_N,
            v=var_N,
        ),
    )
    rec.prove(
        "mean(D o) = D mean(o), var(D o) = D^2 var(o)",
        lambda: sp.simplify(mu_N - D * mu_o) == 0 and sp.simplify(var_N - D**2 * var_o) == 0,
        "symbolic d_v = n",
    )
    rec.prove(
        "LN(N_t) = LN(o_t) for D_t > 0 (where var(o_t) > 0)",
        lambda: sp.simplify(ln_N - ln_o) == 0,
        "symbolic d_v = n, D > 0",
    )

    def variance(dim: int) -> Any:
        ys = sp.symbols(f"y0:{dim}", real=True)
        mean = sum(ys) / dim
        return sp.simplify(sum((y - mean) ** 2 for y in ys) / dim)

    rec.verify(
        "d_v = 1: var(o) = 0 identically, so LN(o) is 0/0 (LayerNorm needs d_v >= 2)",
        lambda: variance(1) == 0,
        "d_v = 1, symbolic component",
    )
    rec.verify(
        f"LayerNorm identity claimed from d_v = {layernorm_min_dim}: var(o) is not identically "
        "0 there (the identity has content)",
        lambda: all(variance(dim) != 0 for dim in range(layernorm_min_dim, 4)),
        f"d_v in {layernorm_min_dim}..3, symbolic components",
    )


def _claim_eps_forms(rec: Derivation, claim_layernorm_eps_exact: bool) -> None:
    """With eps inside the root: Norm_eps(N_t) = Norm(o_t)/sqrt(1 + t), an exact shrink."""
    import sympy as sp

    n, i, j, D, eps, o = pick(_syms(), "n", "i", "j", "D", "eps", "o")
    mom = _moments()
    mu_o, var_o, mu_N, var_N = mom["mu_o"], mom["var_o"], mom["mu_N"], mom["var_N"]
    No = D * o[i]
    t = sp.Symbol("t", nonnegative=True)
    s_l2, s_rms, s_ln = _sq(o[j]), _sq(o[j]) / n, var_o
    cases = {
        "L2": (No / sp.sqrt(_fs(_sq(D * o[j])) + eps), o[i], s_l2),
        "RMS": (No / sp.sqrt(_fs(_sq(D * o[j])) / n + eps), o[i], s_rms),
        "LayerNorm": ((No - mu_N) / sp.sqrt(var_N + eps), o[i] - mu_o, s_ln),
    }
    for name, (lhs, num, stat) in cases.items():
        rhs = num / sp.sqrt(stat + eps / D**2)
        rec.statement[f"{name}_eps"] = tex(
            rf"\operatorname{{{name}}}_{{\varepsilon}}(N_t)_i = @n = @o"
            r" \qquad (N_t = D\, o_t,\ D > 0,\ \varepsilon > 0,\ n = d_v)",
            claim=f"{name}_eps(N_t) = {name}-numerator(o_t) / sqrt(stat(o_t) + eps/D_t^2)",
            n=lhs,
            o=rhs,
        )
        rec.prove(
            f"{name}_eps(N_t) = {name}-numerator(o_t) / sqrt(stat(o_t) + eps/D_t^2)",
            lambda lhs=lhs, rhs=rhs: sp.simplify(lhs - rhs) == 0,
            "symbolic d_v = n, D > 0, eps > 0",
        )
        rec.prove(
            f"{name}_eps(N_t) = {name}(o_t) / sqrt(1 + t), t = eps/(D_t^2 stat(o_t))",
            lambda rhs=rhs, num=num, stat=stat: (
                sp.simplify(rhs - (num / sp.sqrt(stat)) / sp.sqrt(1 + eps / (D**2 * stat))) == 0
            ),
            "symbolic d_v = n, D > 0, eps > 0",
        )
    rec.step(
        r"So $\operatorname{Norm}_\varepsilon(N_t)$ is $\operatorname{Norm}(o_t)$ shrunk by "
        r"$1 / \sqrt{1 + t}$: the gap is parallel to $\operatorname{Norm}(o_t)$, and "
        r"$\lVert \operatorname{Norm}(o_t) \rVert = 1$ (L2), $\sqrt{d_v}$ (RMS, LayerNorm). "
        "The relative gap is",
        tex(
            r"\frac{\lVert \operatorname{Norm}_{\varepsilon}(N_t) - \operatorname{Norm}(o_t)"
            r" \rVert}{\lVert \operatorname{Norm}(o_t) \rVert} = @g, \qquad"
            r" t = \frac{\varepsilon}{D_t^2\, \operatorname{stat}(o_t)}",
            claim="LayerNorm_eps(N_t) = LayerNorm(o_t) / sqrt(1 + t), t = eps/(D_t^2 stat(o_t))",
            g=1 - 1 / sp.sqrt(1 + t),
        ),
    )
    if claim_layernorm_eps_exact:
        lhs = cases["LayerNorm"][0]
        ln_o = (o[i] - mu_o) / sp.sqrt(var_o)
        rec.prove(
            "(injected) LN_eps(N_t) = LN(o_t) exactly",
            lambda: sp.simplify(lhs - ln_o) == 0,
            "symbolic d_v = n, D > 0, eps > 0",
        )


def _claim_gap_bound(rec: Derivation, gap_bound: Callable[[Any], Any] | None) -> None:
    """1 - 1/sqrt(1+t) <= t/2 for t >= 0, tight to first order."""
    import sympy as sp

    t = sp.Symbol("t", nonnegative=True)
    bound = gap_bound(t) if gap_bound is not None else t / 2
    h = bound - (1 - 1 / sp.sqrt(1 + t))
    rec.statement["eps gap bound"] = tex(
        r"@b \qquad (t \ge 0)",
        claim="1 - 1/sqrt(1+t) <= t/2 for all t >= 0",
        b=sp.Le(1 - 1 / sp.sqrt(1 + t), bound),
    )
    rec.step(
        r"Bound: $h(t) = t/2 - (1 - (1 + t)^{-1/2})$ has $h(0) = 0$ and $h'(t) \ge 0$:",
        tex(
            r"h'(t) = @d \ge 0 \qquad (t \ge 0)",
            claim="1 - 1/sqrt(1+t) <= t/2 for all t >= 0",
            d=sp.diff(h, t),
        ),
    )

    def bound_holds() -> bool:
        # h(0) = 0 and h' >= 0 on t >= 0: h' = 1/2 - (1+t)^(-3/2)/2 for the correct bound
        w = sp.Symbol("w", nonnegative=True)  # sqrt(1 + t) = 1 + w
        hp = sp.diff(h, t).subs(t, (1 + w) ** 2 - 1)
        hp = sp.simplify(hp)
        num, den = sp.fraction(sp.together(hp))
        num, den = sp.expand(num), sp.expand(den)
        pos = all(c >= 0 for c in sp.Poly(num, w).coeffs()) and all(
            c > 0 for c in sp.Poly(den, w).coeffs()
        )
        return sp.simplify(h.subs(t, 0)) == 0 and pos

    rec.prove(
        "1 - 1/sqrt(1+t) <= t/2 for all t >= 0",
        bound_holds,
        "h(0) = 0; h'(t) written in w = sqrt(1+t) - 1 >= 0 is a ratio of polynomials "
        "with non-negative coefficients",
    )
    rec.prove(
        "the bound t/2 is tight to first order (series of 1 - (1+t)^(-1/2) at t = 0)",
        lambda: (
            sp.simplify(
                sp.series(1 - 1 / sp.sqrt(1 + t), t, 0, 2).removeO()
                - sp.series(bound, t, 0, 2).removeO()
            )
            == 0
        ),
        "series to O(t^2)",
    )


def _claim_clamp(rec: Derivation) -> None:
    """The clamp convention x/max(||x||, eps) (F.normalize): exact above the clamp."""
    import sympy as sp

    D = _syms()["D"]
    on = sp.Symbol("r", positive=True)  # ||o||
    rec.step(
        r"Clamp convention $x / \max(\lVert x \rVert, \varepsilon)$: at $x = N_t = D\, o_t$ the "
        r"divisor is $\max(D \lVert o \rVert, \varepsilon)$; when $D \lVert o \rVert \ge "
        r"\varepsilon$ the result is $D o / (D \lVert o \rVert) = o / \lVert o \rVert$ exactly; "
        r"otherwise it is $D o / \varepsilon$, of norm $D \lVert o \rVert / \varepsilon$, so "
        r"the gap has norm $1 - D \lVert o \rVert / \varepsilon$.",
    )
    lam = sp.Symbol("mu", positive=True)  # D||o||/eps = 1/(1 + mu) < 1
    rec.prove(
        "clamp convention: exact when D_t ||o_t|| >= eps, gap 1 - D_t||o_t||/eps otherwise",
        lambda: (
            sp.simplify(D * on / (D * on) - 1) == 0
            and sp.simplify(sp.Abs(1 / (1 + lam) - 1) - (1 - 1 / (1 + lam))) == 0
        ),
        "symbolic D, ||o||; below the clamp D||o||/eps = 1/(1+mu), mu > 0, and the gap "
        "is ||o|| |D/eps - 1/||o||| = |D||o||/eps - 1|",
    )


def _claim_sensitivity(rec: Derivation) -> None:
    """||g(b) - g(a)|| <= 2 ||b - a|| / r(a) for g(y) = y / sqrt(||y||^2 + e)."""
    import sympy as sp

    a_n, b_n, e_ = sp.symbols("A B e", positive=True)
    rec.step(
        r"Sensitivity: for $g(y) = y / r(y)$, $r(y) = \sqrt{\lVert y \rVert^2 + e}$: "
        r"$g(b) - g(a) = (b - a) / r(a) + g(b) (r(a) - r(b)) / r(a)$; $\lVert g(b) \rVert "
        r"\le 1$ and $\lvert r(a) - r(b) \rvert \le \lvert \lVert a \rVert - \lVert b \rVert "
        r"\rvert \le \lVert a - b \rVert$, so $\lVert g(b) - g(a) \rVert \le 2 \lVert b - a "
        r"\rVert / r(a)$. $\operatorname{RMS}_\varepsilon = \sqrt{d_v}\, g$ with "
        r"$e = d_v \varepsilon$; $\operatorname{LayerNorm}_\varepsilon(y) = \sqrt{d_v}\, "
        r"g(P y)$, $P$ the centering projection ($\lVert P \rVert \le 1$). The identity "
        r"needs $r(b) > 0$: with $e = 0$ and $\lVert b - a \rVert \ge \lVert a \rVert$ the "
        r"computed $b$ may be $0$, whose normalization is $0/0$, so no bound holds there "
        r"(``normalization_sensitivity`` returns $\infty$)."
    )
    ra, rb = sp.symbols("r_a r_b", positive=True)
    rec.prove(
        "sensitivity: g(b) - g(a) = (b - a)/r(a) + g(b)(r(a) - r(b))/r(a) and r(y) = "
        "h(||y||) with 0 <= h' < 1 (r is 1-Lipschitz in ||y||)",
        lambda: (
            sp.simplify((b_n / rb - a_n / ra) - ((b_n - a_n) / ra + (b_n / rb) * (ra - rb) / ra))
            == 0
            and sp.simplify(sp.diff(sp.sqrt(a_n**2 + e_), a_n) ** 2 - 1).is_negative is True
        ),
        "componentwise identity with r(a), r(b) independent symbols; h(s) = "
        "sqrt(s^2 + e), e > 0 (e = 0 by continuity)",
    )


def _claim_count_none(rec: Derivation) -> None:
    """The ``count`` and ``none`` denominators are not o_t unless D_t = t (resp. 1)."""
    import sympy as sp

    i, D, o = pick(_syms(), "i", "D", "o")
    tt = sp.Symbol("t", positive=True, integer=True)
    count = D * o[i] / tt
    rec.step(
        r"count: $N_t / t = (D_t / t)\, o_t$ ($t$ visible keys); none: $N_t = D_t\, o_t$.",
        tex(
            r"\operatorname{count}(N_t)_i = \frac{N_{t,i}}{t} = @c",
            claim="count(N_t) = o_t iff D_t = t (for exp with |scores| <= r, D_t/t, a mean of "
            "values in [e^-r, e^r], lies in that interval)",
            c=count,
        ),
    )
    rec.prove(
        "count(N_t) = o_t iff D_t = t (for exp with |scores| <= r, D_t/t, a mean of values in "
        "[e^-r, e^r], lies in that interval)",
        lambda: sp.solve(sp.Eq(count, o[i]), D) == [tt],
        "symbolic t, D",
    )


def derive(
    *,
    claim_layernorm_eps_exact: bool = False,
    gap_bound: Callable[[Any], Any] | None = None,
    layernorm_min_dim: int = 2,
) -> Derivation:
    """Build the D7 record.

    Keyword overrides inject a *wrong* statement so tests can show the record then fails:
        claim_layernorm_eps_exact: also claim LN_eps(N) = LN(o) exactly (eps dropped).
        gap_bound: replace the bound t/2 on 1 - 1/sqrt(1+t) (e.g. ``lambda t: t/4``).
        layernorm_min_dim: claim the LayerNorm identity from this d_v on (1 is wrong).
    """
    rec = Derivation("D7", "The denominator as a norm (Mongaras & Larson)")
    rec.cite(
        "the softmax denominator acts as a norm: L2 / RMS / LayerNorm replacements of it discard "
        "the per-query scalar 1/D_t",
        "Mongaras & Larson 2025, 'On the Expressiveness of Softmax Attention: A Recurrent "
        "Neural Network Perspective', arXiv 2507.23632",
        "the claim; the identities below, their conditions (D_t > 0; d_v >= 2 and a "
        "non-constant o_t for LayerNorm), the eps gap and its bound are this project's",
    )
    _claim_scalar_gate(rec)
    _claim_l2_rms(rec)
    _claim_layernorm(rec, layernorm_min_dim)
    _claim_eps_forms(rec, claim_layernorm_eps_exact)
    _claim_gap_bound(rec, gap_bound)
    _claim_clamp(rec)
    _claim_sensitivity(rec)
    _claim_count_none(rec)
    rec.exports = [
        "eps_relative_gap",
        "eps_relative_gap_bound",
        "l2_eps_gap",
        "rms_eps_gap",
        "layernorm_eps_gap",
        "l2_clamp_gap",
        "normalization_sensitivity",
    ]
    return rec


if __name__ == "__main__":
    main_for(derive)

"""D8. Why softmax separates what linear attention cannot (Deng, Song & Zhou 2023, reformulated).

For one row of scores z in R^n: softmax(z)_i = e^{z_i}/sum_j e^{z_j} and, for z > 0,
normalized linear attention lin(z)_i = z_i/sum_j z_j.

* A. If z_{i*} >= z_j + gap for all j != i*: softmax(z)_{i*} >= 1/(1 + (n-1) e^{-gap})
  (tight: equality when every other entry is z_{i*} - gap); gap >= log(3(n-1)) gives >= 3/4.
* B. If all z_j in [0, a]: max_i softmax(z)_i <= e^a/(e^a + n - 1) (tight at (a, 0, ..., 0)).
* Separation: D_0 = U[0,1]^n, D_1 = D_0 with one entry set to 1 + log(3n). Over the supports,
  sup peak(D_0) = e/(e + n - 1) and inf peak(D_1) = 3n/(4n - 1) > 3/4, so the fixed threshold
  1/2 separates them (every sample, not only with high probability) iff n >= 4; for n <= 3 a
  set of D_0 samples of positive probability has peak > 1/2.
* C. lin on entries in [m, M] (m > 0) with one entry M + gap: peak <= (M+gap)/((n-1)m + M + gap)
  -> 0 as n -> oo, so every fixed threshold fails for large n. An n-scaled threshold separates
  this construction for every n >= 2 iff gap > M(M - m)/m (derived exactly).
* D. lin(c z) = lin(z) for c > 0; for non-constant z the softmax peak is strictly increasing in
  c (d peak/dc = peak (z_max - sum_j w_j z_j) > 0). Power attention z^beta/sum z^beta: the peak
  for one entry r times the (n - 1) others is r^beta/(r^beta + n - 1) exactly.

Numeric exports (plain Python floats): ``softmax_peak_lower_bound``,
``softmax_peak_upper_bound``, ``separating_gap``, ``separation_threshold_interval``,
``smallest_separating_n``, ``linear_peak_upper_bound``, ``linear_peak_lower_bound``,
``linear_separation_interval``, ``linear_separating_gap``, ``power_attention_peak``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from derivations._latex import tex
from derivations._record import Derivation, main_for
from derivations._validate import check_int, check_open_unit, check_real


# -- input validation -------------------------------------------------------------------------
def _range(m: object, big_m: object) -> tuple[float, float]:
    lo = check_real("m", m, positive=True)
    hi = check_real("M", big_m, positive=True)
    if hi < lo:
        raise ValueError(f"M: expected M >= m = {lo!r}, got {big_m!r}")
    return lo, hi


# -- numeric exports --------------------------------------------------------------------------
def softmax_peak_lower_bound(n: int, gap: float) -> float:
    """1/(1 + (n-1) e^{-gap}): lower bound on softmax(z)_{i*} when z_{i*} >= z_j + gap, j != i*.

    D8 A (proved in ``derive``; attained when every other score is z_{i*} - gap).

    Args:
        n: row length (keys), int >= 1. gap: finite real (any sign).

    Raises:
        TypeError, ValueError: bad ``n`` or ``gap``.
    """
    n = check_int("n", n, 1)
    g = check_real("gap", gap)
    if n == 1:
        return 1.0
    return 1.0 / (1.0 + (n - 1) * math.exp(-g))


def softmax_peak_upper_bound(n: int, a: float) -> float:
    """e^a/(e^a + n - 1): upper bound on max_i softmax(z)_i when every z_j lies in [0, a].

    D8 B (proved; attained at z = (a, 0, ..., 0)). Evaluated as 1/(1 + (n-1)e^{-a}).

    Args:
        n: int >= 1. a: width of the score range, finite and >= 0.

    Raises:
        TypeError, ValueError: bad ``n`` or ``a``.
    """
    n = check_int("n", n, 1)
    a = check_real("a", a, nonneg=True)
    return 1.0 / (1.0 + (n - 1) * math.exp(-a))


def separating_gap(n: int, level: float = 0.75) -> float:
    """Smallest gap for which bound A guarantees softmax peak >= ``level``: log((n-1) p/(1-p)).

    For the default level 3/4 this is log(3(n-1)) (D8 A). The D_1 construction uses
    one entry 1 + log(3n), whose gap log(3n) over entries in [0, 1] exceeds it.

    Args:
        n: int >= 2. level: p in (0, 1).

    Raises:
        TypeError, ValueError: bad ``n`` or ``level``.
    """
    n = check_int("n", n, 2)
    p = check_open_unit("level", level)
    return math.log((n - 1) * p / (1.0 - p))


def separation_threshold_interval(n: int) -> tuple[float, float]:
    """(sup of the softmax peak over D_0's support, inf over D_1's support) for row length n.

    D_0 = U[0,1]^n, D_1 = D_0 with one entry set to 1 + log(3n) (D8): the values are
    e/(e + n - 1) (at (1, 0, ..., 0)) and 3n/(4n - 1) (other entries all 1). A threshold tau
    with sup < tau <= inf classifies every sample correctly (peak >= tau -> D_1).

    Raises:
        TypeError, ValueError: ``n`` not an int >= 1.
    """
    n = check_int("n", n, 1)
    return softmax_peak_upper_bound(n, 1.0), 3.0 * n / (4.0 * n - 1.0)


def smallest_separating_n(threshold: float = 0.5) -> int:
    """Smallest n for which ``threshold`` separates D_0 and D_1 on their supports (D8).

    Requires e/(e + n - 1) < threshold <= 3n/(4n - 1); for threshold 1/2 the answer is 4
    (derived exactly in ``derive``: 1 + e < n). Comparisons use mpmath at 50 digits.

    Args:
        threshold: tau in (0, 1).

    Raises:
        TypeError, ValueError: bad threshold, or no n separates (tau > 3/4 with the D_1 bound
        failing before the D_0 bound holds).
    """
    tau = check_open_unit("threshold", threshold)
    import mpmath

    with mpmath.workdps(50):
        t = mpmath.mpf(tau)
        e = mpmath.e
        # D_0 side: e/(e + n - 1) < t  <=>  n > 1 + e (1 - t)/t
        n = max(1, int(mpmath.floor(1 + e * (1 - t) / t)) + 1)
        while e / (e + n - 1) >= t:  # guard against the floor at an exact integer
            n += 1
        if mpmath.mpf(3 * n) / (4 * n - 1) < t:
            raise ValueError(
                f"threshold: {threshold!r} separates D_0 and D_1 for no n (the D_1 infimum "
                f"3n/(4n-1) is already below it at the first n = {n} where the D_0 supremum is)"
            )
        return n


def linear_peak_upper_bound(n: int, m: float, M: float, gap: float) -> float:
    """(M+gap)/((n-1)m + M + gap): upper bound on the normalized-linear peak weight.

    Entries z_j in [m, M] (m > 0) for j != i*, and z_{i*} = M + gap (D8 C); attained
    when every other entry equals m. Tends to 0 as n -> oo.

    Raises:
        TypeError, ValueError: n < 1, m <= 0, M < m, gap < 0.
    """
    n = check_int("n", n, 1)
    lo, hi = _range(m, M)
    g = check_real("gap", gap, nonneg=True)
    return (hi + g) / ((n - 1) * lo + hi + g)


def linear_peak_lower_bound(n: int, m: float, M: float, gap: float) -> float:
    """(M+gap)/((n-1)M + M + gap): lower bound (attained with the others at M) on that peak.

    Raises:
        TypeError, ValueError: as ``linear_peak_upper_bound``.
    """
    n = check_int("n", n, 1)
    lo, hi = _range(m, M)
    g = check_real("gap", gap, nonneg=True)
    return (hi + g) / ((n - 1) * hi + hi + g)


def linear_separation_interval(n: int, m: float, M: float, gap: float) -> tuple[float, float]:
    """(sup of the linear peak with all entries in [m, M], inf with one entry M + gap).

    = (M/(M + (n-1)m), (M+gap)/((n-1)M + M + gap)). An n-scaled threshold in between separates
    the two sets iff the first is smaller, i.e. (n >= 2) iff gap > M(M-m)/m (D8 C).

    Raises:
        TypeError, ValueError: as ``linear_peak_upper_bound``.
    """
    n = check_int("n", n, 1)
    lo, hi = _range(m, M)
    return hi / (hi + (n - 1) * lo), linear_peak_lower_bound(n, lo, hi, gap)


def linear_separating_gap(m: float, M: float) -> float:
    """M(M - m)/m: gaps strictly above it make the linear construction n-scaled separable.

    Raises:
        TypeError, ValueError: m <= 0 or M < m.
    """
    lo, hi = _range(m, M)
    return hi * (hi - lo) / lo


def power_attention_peak(r: float, beta: float, n: int) -> float:
    """r^beta/(r^beta + n - 1): power-attention peak when one entry is r times the n-1 others.

    Power attention z_i^beta / sum_j z_j^beta on positive entries (D8 D; exact).

    Args:
        r: ratio > 0. beta: finite real exponent. n: int >= 1.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    rr = check_real("r", r, positive=True)
    b = check_real("beta", beta)
    n = check_int("n", n, 1)
    # r^beta/(r^beta + n - 1) = 1/(1 + (n-1) r^{-beta}), computed in logs to avoid overflow
    if n == 1:
        return 1.0
    return 1.0 / (1.0 + math.exp(math.log(n - 1) - b * math.log(rr)))


# -- derivation -------------------------------------------------------------------------------
# -- the record, one function per claim group ----------------------------------------------------
def _claim_bound_a(rec: Derivation, lower: Any) -> None:
    """A. A gap Delta above all other scores bounds the softmax peak from below (tight)."""
    import sympy as sp
    from sympy.simplify.simplify import factor_sum

    n = sp.Symbol("n", integer=True, positive=True)
    j = sp.Symbol("j", integer=True, positive=True)
    gap = sp.Symbol("Delta", real=True)
    zs = sp.Symbol("z_star", real=True)
    S = sp.Symbol("S", nonnegative=True)
    # Hypotheses and quantifiers are hand-written around the sympy bound (derivations._latex).
    rec.statement["A"] = tex(
        r"z_{i^*} \ge z_j + \Delta \ \ \forall j \ne i^* \ \Rightarrow"
        r"\ \operatorname{softmax}(z)_{i^*} \ge @b \qquad (z \in \mathbb{R}^n)",
        claim="A holds and is tight: at z_j = z_{i*} - Delta (all j != i*) the peak equals the "
        "bound",
        b=lower,
    )
    rec.step(
        r"$\operatorname{softmax}(z)_{i^*} = 1 / (1 + S)$ with "
        r"$S = \sum_{j \ne i^*} e^{z_j - z_{i^*}}$; each term is at most $e^{-\Delta}$ ($\exp$ "
        r"increasing), so $S \le (n - 1) e^{-\Delta}$, and $1 / (1 + S)$ is decreasing in $S$:",
        tex(
            r"@d < 0 \qquad (S \ge 0)",
            claim="1/(1+S) is decreasing in S >= 0",
            d=sp.Eq(sp.Derivative(1 / (1 + S), S), sp.diff(1 / (1 + S), S)),
        ),
    )
    rec.prove(
        "1/(1+S) is decreasing in S >= 0",
        lambda: sp.diff(1 / (1 + S), S).is_negative is True,
        "symbolic S >= 0",
    )
    # extremal row: all other entries z* - Delta (n - 1 of them)
    extremal = sp.exp(zs) / (
        sp.exp(zs) + factor_sum(sp.Sum(sp.exp(zs - gap), (j, 1, n - 1)).doit())
    )
    rec.prove(
        "A holds and is tight: at z_j = z_{i*} - Delta (all j != i*) the peak equals the bound",
        lambda: sp.simplify(extremal - lower) == 0,
        "symbolic n, Delta, z_{i*}",
    )
    at_sep = sp.simplify(lower.subs(gap, sp.log(3 * (n - 1))))
    rec.step(
        r"At $\Delta = \log(3(n - 1))$ ($n \ge 2$) the bound is",
        tex(
            r"@b \Big|_{\Delta = \log(3(n-1))} = @v",
            claim="Delta >= log(3(n-1)) gives softmax(z)_{i*} >= 3/4 (bound increasing in Delta)",
            b=lower,
            v=at_sep,
        ),
    )
    rec.prove(
        "Delta >= log(3(n-1)) gives softmax(z)_{i*} >= 3/4 (bound increasing in Delta)",
        lambda: (
            sp.simplify(at_sep - sp.Rational(3, 4)) == 0
            and sp.simplify(sp.diff(lower, gap) * (1 + (n - 1) * sp.exp(-gap)) ** 2 / (n - 1))
            == sp.exp(-gap)
        ),
        "symbolic n >= 2",
    )


def _claim_bound_b(rec: Derivation, upper: Any) -> None:
    """B. Scores in [0, a] bound the softmax peak from above (tight at (a, 0, ..., 0))."""
    import sympy as sp
    from sympy.simplify.simplify import factor_sum

    n = sp.Symbol("n", integer=True, positive=True)
    j = sp.Symbol("j", integer=True, positive=True)
    a = sp.Symbol("a", nonnegative=True)
    x, c = sp.symbols("x c", positive=True)
    rec.statement["B"] = tex(
        r"0 \le z_j \le a \ \ \forall j \ \Rightarrow"
        r"\ \max_i \operatorname{softmax}(z)_i \le @b \qquad (z \in \mathbb{R}^n,\ a \ge 0)",
        claim="B holds and is tight: x/(x+c) increasing; at z = (a, 0, ..., 0) the peak equals "
        "the bound",
        b=upper,
    )
    rec.step(
        r"The peak $e^{z_i} / (e^{z_i} + \sum_{j \ne i} e^{z_j})$ is at most "
        r"$e^{z_i} / (e^{z_i} + n - 1)$ (each $e^{z_j} \ge 1$), which is at most "
        r"$e^a / (e^a + n - 1)$ since $x / (x + c)$ is increasing in $x$:",
        tex(
            r"@d > 0 \qquad (x, c > 0)",
            claim="B holds and is tight: x/(x+c) increasing; at z = (a, 0, ..., 0) the peak "
            "equals the bound",
            d=sp.Eq(sp.Derivative(x / (x + c), x), sp.simplify(sp.diff(x / (x + c), x))),
        ),
    )
    corner = sp.exp(a) / (sp.exp(a) + factor_sum(sp.Sum(sp.exp(0), (j, 1, n - 1)).doit()))
    rec.prove(
        "B holds and is tight: x/(x+c) increasing; at z = (a, 0, ..., 0) the peak equals the bound",
        lambda: (
            sp.simplify(sp.diff(x / (x + c), x)).is_positive is True
            and sp.simplify(corner - upper) == 0
        ),
        "symbolic n, a >= 0",
    )


def _claim_separation(rec: Derivation, separating_n: int) -> None:
    """D_0 = U[0,1]^n vs D_1: threshold 1/2 separates every sample iff n >= 4."""
    import sympy as sp

    nn = sp.Symbol("n", positive=True)
    sup0 = sp.E / (sp.E + nn - 1)
    inf1 = 1 / (1 + (nn - 1) * sp.exp(-sp.log(3 * nn)))
    k = separating_n
    sep_claim = (
        f"threshold 1/2 separates every sample iff n >= {k}: e/(e+n-1) < 1/2 iff n > 1 + e, "
        f"and the smallest such integer is {k}"
    )
    peak = r"\max_i \operatorname{softmax}(z)_i"
    rec.statement["separation"] = tex(
        r"\sup_{z \in D_0} "
        + peak
        + r" < \tfrac{1}{2} \le \inf_{z \in D_1} "
        + peak
        + r" \iff n \ge @k \qquad \bigl(D_0 = [0, 1]^n;\ D_1: z_{i^*} = 1 + \log(3n),"
        r"\ z_j \in [0, 1]\ (j \ne i^*)\bigr)",
        claim=sep_claim,
        k=sp.Integer(k),
    )
    rec.step(
        r"$D_0 = U[0, 1]^n$: the largest peak is $e / (e + n - 1)$ (B with $a = 1$, attained at "
        r"$(1, 0, \dots, 0)$); $D_1$: one entry $1 + \log(3n)$, the rest in $[0, 1]$, so the gap "
        r"is at least $\log(3n)$ and the smallest peak (the rest all 1) is",
        tex(
            r"\inf_{z \in D_1} " + peak + " = @v",
            claim="inf peak(D_1) = 3n/(4n-1) > 3/4 > 1/2 for every n >= 1",
            v=sp.simplify(inf1),
        ),
    )
    rec.prove(
        "inf peak(D_1) = 3n/(4n-1) > 3/4 > 1/2 for every n >= 1",
        lambda: (
            sp.simplify(inf1 - 3 * nn / (4 * nn - 1)) == 0
            and sp.simplify(3 * nn / (4 * nn - 1) - sp.Rational(3, 4) - 3 / (4 * (4 * nn - 1))) == 0
        ),
        "symbolic n (3n/(4n-1) - 3/4 = 3/(4(4n-1)) > 0)",
    )
    sol = sp.solve_univariate_inequality(sup0 < sp.Rational(1, 2), nn, relational=False).intersect(
        sp.Interval.open(0, sp.oo)
    )
    rec.step(
        r"$\sup_{D_0} \max_i \operatorname{softmax}(z)_i = e / (e + n - 1) < 1/2$ solved for "
        r"$n > 0$:",
        tex(
            r"\Bigl\lbrace n > 0 : @p < \tfrac{1}{2} \Bigr\rbrace = @sol",
            claim=sep_claim,
            p=sup0,
            sol=sol,
        ),
    )
    rec.prove(
        sep_claim,
        lambda: (
            sol == sp.Interval.open(1 + sp.E, sp.oo)
            and bool(sup0.subs(nn, k) < sp.Rational(1, 2))
            and bool(sup0.subs(nn, k - 1) > sp.Rational(1, 2))
        ),
        "exact comparison with e (sympy)",
    )
    rec.step(
        r"For $n \le 3$ the $D_0$ peak at $(1, 0, \dots, 0)$ is $e / (e + n - 1) > 1/2$ and the "
        r"peak is continuous, so a neighbourhood of that corner (positive probability under "
        r"$U[0, 1]^n$) is misclassified: threshold $1/2$ does not separate."
    )
    rows = []
    for m_ in range(2, 9):
        lo_, hi_ = separation_threshold_interval(m_)
        rows.append([m_, f"{lo_:.6f}", f"{hi_:.6f}", lo_ < 0.5 <= hi_])
    rec.tables["softmax separation interval"] = (
        ["n", "sup peak D_0 = e/(e+n-1)", "inf peak D_1 = 3n/(4n-1)", "1/2 separates"],
        rows,
    )
    rec.verify(
        f"exported smallest_separating_n(1/2) == {k}",
        lambda: smallest_separating_n(0.5) == k,
        "mpmath, 50 digits",
    )


def _claim_linear_attention(rec: Derivation) -> None:
    """C. Normalized linear attention: the peak bound -> 0; n-scaled thresholds separate."""
    import sympy as sp

    n = sp.Symbol("n", integer=True, positive=True)
    S = sp.Symbol("S", nonnegative=True)
    m, M, D = sp.symbols("m M Delta_lin", positive=True)
    lin_up = (M + D) / ((n - 1) * m + M + D)
    c_claim = "C: the bound is attained at z_j = m and tends to 0 as n -> oo"
    lin = r"\operatorname{lin}(z)_{i^*} = \frac{z_{i^*}}{\sum_{j=1}^{n} z_j} \le @b"
    rec.statement["C"] = tex(
        lin + r" \qquad \bigl(z_{i^*} = M + \Delta_{\mathrm{lin}},\ m \le z_j \le M"
        r"\ (j \ne i^*),\ 0 < m \le M\bigr)",
        claim=c_claim,
        b=lin_up,
    )
    rec.step(
        r"The linear peak is $(M + \Delta_{\mathrm{lin}}) / (\sum_{j \ne i^*} z_j + M + "
        r"\Delta_{\mathrm{lin}})$ with $\sum_{j \ne i^*} z_j \ge (n - 1) m$:",
        tex(lin, claim=c_claim, b=lin_up),
    )
    rec.prove(
        "C: the bound is attained at z_j = m and tends to 0 as n -> oo",
        lambda: (
            sp.limit(lin_up, n, sp.oo) == 0
            and sp.diff((M + D) / (S + M + D), S).is_negative is True
        ),
        "symbolic m, M, Delta > 0, n",
    )
    tau = sp.Symbol("tau", positive=True)
    n_fail = 1 + (M + D) * (1 - tau) / (tau * m)
    rec.prove(
        "any fixed threshold tau in (0,1) fails: the bound equals tau at n = 1 + (M+Delta)"
        "(1-tau)/(tau m) and is decreasing in n",
        lambda: (
            sp.simplify(lin_up.subs(n, n_fail) - tau) == 0
            and sp.simplify(sp.diff(lin_up, n) + m * (M + D) / ((n - 1) * m + M + D) ** 2) == 0
        ),
        "symbolic tau, m, M, Delta",
    )
    sup_lin0 = M / (M + (n - 1) * m)
    inf_lin1 = (M + D) / ((n - 1) * M + M + D)
    diff_ = sp.factor(sp.together(inf_lin1 - sup_lin0))
    rec.step(
        r"$n$-scaled threshold: all entries in $[m, M]$ give a peak at most "
        r"$M / (M + (n - 1) m)$; one entry $M + \Delta_{\mathrm{lin}}$ gives a peak at least "
        r"$(M + \Delta_{\mathrm{lin}}) / ((n - 1) M + M + \Delta_{\mathrm{lin}})$; their "
        "difference is",
        tex(
            r"@lo - @hi = @d",
            claim="C': an n-scaled threshold separates the linear construction for every n >= 2 "
            "iff Delta > M(M-m)/m (the sign of the difference is that of (M+Delta) m - M^2)",
            lo=inf_lin1,
            hi=sup_lin0,
            d=diff_,
        ),
    )
    target = (n - 1) * ((M + D) * m - M**2) / ((M + (n - 1) * m) * ((n - 1) * M + M + D))
    rec.prove(
        "C': an n-scaled threshold separates the linear construction for every n >= 2 iff "
        "Delta > M(M-m)/m (the sign of the difference is that of (M+Delta) m - M^2)",
        lambda: sp.simplify(diff_ - target) == 0,
        "symbolic n, m, M, Delta; this construction is separable, with tau_n ~ 1/n",
    )


def _claim_scale(rec: Derivation) -> None:
    """D. lin is scale-invariant; the softmax peak grows with the scale; power attention."""
    import sympy as sp
    from sympy.simplify.simplify import factor_sum

    n = sp.Symbol("n", integer=True, positive=True)
    j = sp.Symbol("j", integer=True, positive=True)
    cz = sp.Symbol("c", positive=True)
    z = sp.IndexedBase("z", positive=True)
    i = sp.Symbol("i", integer=True, positive=True)
    lin_c = cz * z[i] / factor_sum(sp.Sum(cz * z[j], (j, 1, n)))
    rec.prove(
        "lin(c z) = lin(z) for c > 0 (no readout of lin separates {z} from {c z})",
        lambda: sp.simplify(lin_c - z[i] / sp.Sum(z[j], (j, 1, n))) == 0,
        "symbolic n, c > 0",
    )
    zr = sp.IndexedBase("z", real=True)
    zm = sp.Symbol("z_max", real=True)
    Sc = sp.Sum(sp.exp(cz * zr[j]), (j, 1, n))
    peak = sp.exp(cz * zm) / Sc
    mean_w = sp.Sum(zr[j] * sp.exp(cz * zr[j]), (j, 1, n)) / Sc
    rec.step(
        r"Softmax peak $p(c) = e^{c z_{\max}} / \sum_j e^{c z_j}$: "
        r"$p'(c) = p(c)\, (z_{\max} - \bar{z}_c)$ with $\bar{z}_c = \sum_j w_j z_j$, and "
        r"$z_{\max} - \bar{z}_c = \sum_j w_j (z_{\max} - z_j) > 0$ for non-constant $z$ (all "
        r"$w_j > 0$, every term $\ge 0$, one $> 0$):",
        sp.Eq(sp.Derivative(peak, cz), sp.diff(peak, cz)),
    )
    w_j = sp.exp(cz * zr[j]) / Sc
    rec.prove(
        "d peak/dc = peak (z_max - sum_j w_j z_j) and z_max - zbar = sum_j w_j (z_max - z_j)",
        lambda: (
            sp.simplify(sp.diff(peak, cz) - peak * (zm - mean_w)) == 0
            and sp.simplify(
                factor_sum(sp.Sum(sp.expand(w_j * (zm - zr[j])), (j, 1, n)))
                - (zm * factor_sum(sp.Sum(w_j, (j, 1, n))) - mean_w)
            )
            == 0
        ),
        "symbolic n, c; sum_j w_j = 1",
    )
    r_, b_, z0 = sp.symbols("r beta z_0", positive=True)
    pw = (r_ * z0) ** b_ / ((r_ * z0) ** b_ + (n - 1) * z0**b_)
    rec.prove(
        "power attention z_i^beta/sum_j z_j^beta on z = (r z_0, z_0, ..., z_0), z_0 > 0 (one "
        "entry r times each of the n - 1 equal others): peak = r^beta/(r^beta + n - 1) exactly",
        lambda: sp.simplify(sp.expand_power_base(pw) - r_**b_ / (r_**b_ + n - 1)) == 0,
        "symbolic r, beta, z_0 > 0, n >= 1",
    )
    # the configuration is hand-written; it names the claim just proved
    rec.statement["power attention"] = tex(
        r"\frac{z_1^{\beta}}{\sum_{j=1}^{n} z_j^{\beta}} = @p \qquad"
        r" \bigl(z = (r z_0, z_0, \dots, z_0) \in \mathbb{R}^n,\ r, z_0, \beta > 0\bigr)",
        claim=rec.claims[-1].name,
        p=r_**b_ / (r_**b_ + n - 1),
    )
    h_ = sp.Symbol("h", positive=True)
    m_ = sp.Symbol("m", integer=True, nonnegative=True)
    peak = r_**b_ / (r_**b_ + n - 1)
    rec.prove(
        "in that configuration the power peak -> 1 as beta -> oo for every r > 1 and every n; "
        "it is 1/n for r = 1 and -> 0 for r < 1 (n >= 2)",
        lambda: (
            sp.limit(peak.subs(r_, 1 + h_), b_, sp.oo) == 1
            and sp.simplify(peak.subs(r_, 1) - 1 / n) == 0
            and sp.limit(peak.subs({r_: 1 / (1 + h_), n: m_ + 2}), b_, sp.oo) == 0
        ),
        "symbolic r = 1 + h resp. 1/(1 + h) with h > 0, symbolic beta, n (n = m + 2, m >= 0, "
        "for r < 1; n = 1 gives peak 1); sympy limit",
    )


def derive(
    *,
    peak_lower_bound: Callable[[Any, Any], Any] | None = None,
    peak_upper_bound: Callable[[Any, Any], Any] | None = None,
    separating_n: int = 4,
) -> Derivation:
    """Build the D8 record.

    Keyword overrides inject a *wrong* statement so tests can show the record then fails:
        peak_lower_bound: (n, gap) -> claimed bound A (e.g. ``1/(1 + (n-1) exp(+gap))``).
        peak_upper_bound: (n, a) -> claimed bound B.
        separating_n: claimed smallest n for the threshold-1/2 separation (correct: 4).
    """
    import sympy as sp

    rec = Derivation("D8", "Why softmax separates what linear attention cannot (Deng, Song & Zhou)")
    rec.cite(
        "the thesis: exp amplifies large scores, so softmax attention separates what normalized "
        "linear attention cannot",
        "Deng, Song & Zhou 2023, 'Superiority of Softmax: Unveiling the Performance Edge Over "
        "Linear Attention', arXiv 2310.11685",
        "the thesis only; statements A, B, C and C', the separation construction (D_0, D_1) "
        "with its constants, and the power-attention peak are this project's reformulation and "
        "additions, not the paper's",
    )
    n = sp.Symbol("n", integer=True, positive=True)
    gap = sp.Symbol("Delta", real=True)
    a = sp.Symbol("a", nonnegative=True)
    lower = (peak_lower_bound or (lambda nn, g: 1 / (1 + (nn - 1) * sp.exp(-g))))(n, gap)
    upper = (peak_upper_bound or (lambda nn, aa: sp.exp(aa) / (sp.exp(aa) + nn - 1)))(n, a)
    _claim_bound_a(rec, lower)
    _claim_bound_b(rec, upper)
    _claim_separation(rec, separating_n)
    _claim_linear_attention(rec)
    _claim_scale(rec)
    rec.exports = [
        "softmax_peak_lower_bound",
        "softmax_peak_upper_bound",
        "separating_gap",
        "separation_threshold_interval",
        "smallest_separating_n",
        "linear_peak_upper_bound",
        "linear_peak_lower_bound",
        "linear_separation_interval",
        "linear_separating_gap",
        "power_attention_peak",
    ]
    return rec


if __name__ == "__main__":
    main_for(derive)

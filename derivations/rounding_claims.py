"""The claims of the D10 record (``derivations.rounding_record.derive`` calls them in order).

Each ``claim_*`` function appends the steps, citations and checked claims of one group of the
floating-point error model to the record. Imported only by ``derive`` (no sympy at import).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

from derivations._latex import tex
from derivations.rounding import (
    FORMAT_SOURCES,
    FORMATS,
    HIGHAM,
    LIBRARY_DIV_ULPS,
    LIBRARY_EXP_ULPS,
    ULP_CONVENTION,
    largest_finite,
    low_precision_output_bound,
    precision_bits,
    product_always_exact,
    product_exact_in,
    round_to_bits,
    smallest_subnormal,
    ulps_from_exact,
    underflow_abs_error,
    unit_roundoff,
)


# -- helpers ----------------------------------------------------------------------------------
def _nonneg_rational(expr: Any, syms: list[Any]) -> bool:
    """Certificate: expr = P/Q with P, Q polynomials with non-negative coefficients in
    positive symbols (Q not identically 0) -> expr >= 0."""
    import sympy as sp

    num, den = sp.fraction(sp.together(sp.expand(expr)))
    num, den = sp.expand(num), sp.expand(den)
    if den.is_number:
        den_ok = bool(den > 0)
    else:
        den_ok = all(c >= 0 for c in sp.Poly(den, *syms).coeffs())
        if not den_ok:
            den_ok = all(c <= 0 for c in sp.Poly(den, *syms).coeffs())
            num = -num
    if num == 0:
        return den_ok
    if num.is_number:
        return den_ok and bool(num > 0)
    return den_ok and all(c >= 0 for c in sp.Poly(num, *syms).coeffs())


def _ray():
    """t >= 0: the parameter of a ray (e, r) -> t (e, r) for first-order expansions."""
    import sympy as sp

    return sp.Symbol("t", nonnegative=True)


# -- unit roundoff and Lemma 3.1 ------------------------------------------------------------------
def claim_unit_roundoff(rec, unit_roundoffs: Mapping[str, Any] | None) -> None:
    """u = 2^-p for every format (cited bit layouts); ``unit_roundoffs`` injects wrong values."""
    import sympy as sp

    claimed_u = {name: sp.Integer(2) ** -precision_bits(name) for name in FORMATS}
    if unit_roundoffs:
        claimed_u.update({k: sp.nsimplify(v) for k, v in unit_roundoffs.items()})
    rec.cite(
        "binary formats (total, exponent bits): "
        + ", ".join(f"{k} {v}" for k, v in FORMATS.items()),
        FORMAT_SOURCES,
    )
    rows = []

    def unit_roundoffs_ok() -> bool:
        ok = True
        for name, (total, exponent) in FORMATS.items():
            p = total - exponent - 1 + 1
            derived = sp.Rational(1, 2) * sp.Integer(2) ** (1 - p)  # u = beta^(1-t)/2
            rows.append([name, total, exponent, p, str(claimed_u[name])])
            ok = ok and sp.simplify(claimed_u[name] - derived) == 0
        return ok

    rec.prove(
        "u = 2^(1-p)/2 = 2^-p with p = total - exponent - sign + implicit bits: fp64 2^-53, "
        "fp32 2^-24, fp16 2^-11, bf16 2^-8",
        unit_roundoffs_ok,
        "all four formats, exact (Higham Thm 2.2, round to nearest)",
    )
    rec.tables["unit roundoff"] = (["dtype", "bits", "exponent bits", "p", "u"], rows)
    # one column per format, named like the table; the claim that derives them is named
    short = {"float64": "fp64", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
    names = ", ".join(rf"u_{{\mathrm{{{short.get(k, k)}}}}}" for k in FORMATS)
    rec.statement["u"] = tex(
        rf"({names}) = @u \qquad (u = \tfrac{{1}}{{2}}\, 2^{{1-p}} = 2^{{-p}})",
        claim="u = 2^(1-p)/2 = 2^-p with p = total - exponent - sign + implicit bits: fp64 2^-53, "
        "fp32 2^-24, fp16 2^-11, bf16 2^-8",
        u=sp.Tuple(*[claimed_u[k] for k in FORMATS]),
    )


def claim_gamma_lemma(rec, gam: Callable[[Any, Any], Any]) -> None:
    """Higham's Lemma 3.1 re-checked by induction for the claimed gamma_n = ``gam(n, u)``."""
    import sympy as sp

    n = sp.Symbol("n", positive=True)
    u = sp.Symbol("u", positive=True)
    g_n, g_n1 = gam(n, u), gam(n + 1, u)
    induction = (
        "induction step: gamma_{n+1} >= gamma_n + u + gamma_n u and >= (gamma_n + u)/(1 - u) "
        "for all n > 0, u > 0 with (n+1) u < 1"
    )
    rec.statement["gamma_n"] = tex(
        r"@g \qquad (n u < 1)", claim=induction, g=sp.Eq(sp.Symbol("gamma_n"), g_n)
    )
    rec.cite(
        "Lemma 3.1: |delta_i| <= u, rho_i = +-1, n u < 1 => prod (1 + delta_i)^rho_i = 1 + theta_n,"
        " |theta_n| <= gamma_n",
        HIGHAM,
        "Lemma 3.1 (p. 63); re-checked below by induction",
    )
    # induction in positive variables: n u < 1 written as u = 1/((n+1)(1+r)) covers (n+1)u < 1
    r = sp.Symbol("r", positive=True)
    sub = {u: 1 / ((n + 1) * (1 + r))}
    rec.step(
        r"Base: $(1 + \delta)^{-1} - 1 = -\delta / (1 + \delta)$ has modulus at most "
        r"$u / (1 - u) = \gamma_1$ for $\lvert \delta \rvert \le u$; $(1 + \delta) - 1$ has "
        r"modulus at most $u$.",
        tex(r"\gamma_1 = @g", claim="base case gamma_1 = u/(1 - u)", g=gam(1, u)),
    )
    rec.prove(
        "base case gamma_1 = u/(1 - u)",
        lambda: sp.simplify(gam(1, u) - u / (1 - u)) == 0,
        "symbolic u",
    )
    mult_gap = g_n1 - (g_n + u + g_n * u)
    div_gap = g_n1 - (g_n + u) / (1 - u)
    rec.step(
        r"Induction: $(1 + \theta_n)(1 + \delta) - 1$ has modulus at most "
        r"$\gamma_n + u + \gamma_n u$, and $(1 + \theta_n) / (1 + \delta) - 1$ at most "
        r"$(\gamma_n + u) / (1 - u)$; both must be at most $\gamma_{n+1}$, i.e. both differences "
        r"are non-negative. Factored, each is $u^2$ times a ratio whose factors $n u - 1$, "
        r"$(n + 1) u - 1$ and $u - 1$ are all negative when $(n + 1) u < 1$:",
        tex(
            r"\gamma_{n+1} - (\gamma_n + u + \gamma_n u) = @a \ge 0, \qquad"
            r" \gamma_{n+1} - \frac{\gamma_n + u}{1 - u} = @b \ge 0 \qquad ((n+1) u < 1)",
            claim=induction,
            a=sp.factor(mult_gap),
            b=sp.factor(div_gap),
        ),
    )
    rec.prove(
        induction,
        lambda: (
            _nonneg_rational(mult_gap.subs(sub), [n, r])
            and _nonneg_rational(div_gap.subs(sub), [n, r])
        ),
        "symbolic n, u; (n+1)u < 1 parametrized as u = 1/((n+1)(1+r)), r > 0; "
        "certificate: numerator and denominator polynomials with non-negative coefficients",
    )
    rec.prove(
        "first order: gamma_n = n u + O(u^2)",
        lambda: sp.simplify(sp.series(g_n, u, 0, 2).removeO() - n * u) == 0,
        "series in u",
    )


# -- elementary operations ------------------------------------------------------------------
def claim_exp_bound(rec) -> None:
    """Dot products, sums, Horner (cited); exp of a rounded score: e^e (1 + r) - 1."""
    import sympy as sp

    rec.cite(
        "dot product |fl(a.b) - a.b| <= gamma_n sum |a_i b_i| (any order); sum of n terms "
        "gamma_{n-1} sum |x_i|; Horner |p - fl(p)| <= gamma_{2N} sum |a_i||x|^i",
        HIGHAM,
        "eq. 3.5 (from fl(a.b) = sum a_i b_i (1 + theta_n^(i)), Lemma 3.1), eq. 4.4, eq. 5.3",
    )
    e_, rr = sp.symbols("e r", nonnegative=True)
    t_ = _ray()
    A = sp.exp(e_)
    rec.step(
        r"$\exp$ of a rounded score: $e^{x + t} = e^x e^t$ with $\lvert t \rvert \le e$; "
        r"$\lvert e^t - 1 \rvert \le \max(e^e - 1, 1 - e^{-e}) = e^e - 1$ since "
        r"$(e^e - 1) - (1 - e^{-e}) = (e^{e/2} - e^{-e/2})^2 \ge 0$. With the library's relative "
        r"error $r = 2\, k_{\mathrm{ulp}}\, u$ the worst case is $e^e (1 + r) - 1$ (the lower "
        r"side $1 - e^{-e} (1 - r)$ is smaller):",
        tex(
            r"\frac{\lvert \widehat{\exp}(\hat{x}) - e^{x} \rvert}{e^{x}} \le @b \qquad"
            r" (\lvert \hat{x} - x \rvert \le e,\ r = 2\, k_{\mathrm{ulp}}\, u)",
            claim="exp bound: (e^e - 1) - (1 - e^-e) = (e^(e/2) - e^(-e/2))^2 and "
            "[e^e(1+r) - 1] - [1 - e^-e(1-r)] = (e^(e/2) - e^(-e/2))^2 + r(e^e - e^-e) >= 0",
            b=A * (1 + rr) - 1,
        ),
    )
    rec.prove(
        "exp bound: (e^e - 1) - (1 - e^-e) = (e^(e/2) - e^(-e/2))^2 and "
        "[e^e(1+r) - 1] - [1 - e^-e(1-r)] = (e^(e/2) - e^(-e/2))^2 + r(e^e - e^-e) >= 0",
        lambda: (
            sp.simplify((A - 1) - (1 - 1 / A) - (sp.exp(e_ / 2) - sp.exp(-e_ / 2)) ** 2) == 0
            and sp.simplify(
                (A * (1 + rr) - 1)
                - (1 - (1 - rr) / A)
                - ((sp.exp(e_ / 2) - sp.exp(-e_ / 2)) ** 2 + rr * (A - 1 / A))
            )
            == 0
            and sp.simplify(A - 1 / A - 2 * sp.sinh(e_)) == 0
            and sp.sinh(e_).is_nonnegative is True
        ),
        "symbolic e, r >= 0; e^e - e^-e = 2 sinh(e) >= 0",
    )
    rec.prove(
        "first order: e^e (1 + r) - 1 = e + r + O(2)",
        lambda: (
            sp.simplify(
                sp.series(sp.exp(t_ * e_) * (1 + t_ * rr) - 1, t_, 0, 2).removeO() - t_ * (e_ + rr)
            )
            == 0
        ),
        "series along (e, r) = t (e, r)",
    )


def claim_library_ulps(rec) -> None:
    """k ulps => relative error <= 2 k u; the cited library ulps of exp and division."""
    import sympy as sp

    ee = sp.Symbol("E", integer=True)
    pp = sp.Symbol("p", integer=True, positive=True)
    rec.prove(
        "k ulps => relative error <= 2 k u: ulp(y) = 2^(E+1-p) <= 2^(1-p) |y| = 2u|y| for "
        "|y| in [2^E, 2^(E+1))",
        lambda: sp.simplify(2 ** (ee + 1 - pp) / 2**ee - 2 * 2 ** (-pp)) == 0,
        "symbolic exponent E and precision p (normal range)",
    )
    # one convention for every cited constant: ulps from the exact result
    ulp_, k_ = sp.symbols("ulp k", positive=True)
    bound = (k_ + sp.Rational(1, 2)) * ulp_
    # y - x = (y - c) + (c - x), linear in the two parts: the largest |y - x| is at a corner
    corners = [s1 * k_ * ulp_ + s2 * ulp_ / 2 for s1 in (-1, 1) for s2 in (-1, 1)]
    rec.prove(
        "a result within k ulps of the correctly rounded result c is within k + 1/2 ulps of the "
        "exact x: y - x = (y - c) + (c - x) with |c - x| <= ulp/2 (ulps of x's binade)",
        lambda: (
            all(sp.expand(bound**2 - c**2).is_nonnegative is True for c in corners)
            and any(sp.expand(bound - c) == 0 for c in corners)
        ),
        "symbolic k > 0, ulp > 0; the corners of the box |y - c| <= k ulp, |c - x| <= ulp/2 "
        "(k = 0: correct rounding, 1/2 ulp)",
    )
    table = [("", k, v) for k, v in LIBRARY_EXP_ULPS.items()]
    table += [("div:", k, v) for k, v in LIBRARY_DIV_ULPS.items()]
    rows_c = [
        [f"{pre}{k}", f"{v.stated:g}", v.measured_from, f"{v.value:g}", v.source]
        for pre, k, v in table
    ]
    rec.tables["library ulps, converted to ulps from the exact result"] = (
        [
            "constant",
            "as stated",
            "the source measures from",
            "ulps from the exact result",
            "source",
        ],
        rows_c,
    )
    rec.verify(
        "every cited exp/division constant is its source's figure in one convention, ulps from "
        "the exact result: + 1/2 where the source measures from the correctly rounded result "
        "(glibc, CUDA) or does not say (torch exp_u20)",
        lambda: all(
            v.stated is not None and v.value == ulps_from_exact(v.stated, v.measured_from)
            for _, _, v in table
        ),
        ULP_CONVENTION,
    )

    def listing(consts: Mapping[str, Any]) -> str:
        out = []
        for k, v in consts.items():
            how = (
                "as stated"
                if v.measured_from == "exact"
                else f"stated {v.stated:g} from the correctly rounded result"
                if v.measured_from == "correctly rounded"
                else f"stated {v.stated:g}, reference not stated"
            )
            out.append(f"{k} {v.value:g} ({how})")
        return "; ".join(out)

    rec.cite(
        "library exp, ulps from the exact result: " + listing(LIBRARY_EXP_ULPS),
        "; ".join(v.source for v in LIBRARY_EXP_ULPS.values()),
    )
    rec.cite(
        "division, ulps from the exact result: " + listing(LIBRARY_DIV_ULPS),
        "; ".join(v.source for v in LIBRARY_DIV_ULPS.values()),
    )


def claim_ratio(rec) -> None:
    """Worst relative error of a computed ratio: (1 + e_N)(1 + e_div)/(1 - e_D) - 1."""
    import sympy as sp

    t_ = _ray()
    en, ed, dv = sp.symbols("e_N e_D e_div", nonnegative=True)
    f_max = (1 + en) * (1 + dv) / (1 - ed) - 1
    f_min = 1 - (1 - en) * (1 - dv) / (1 + ed)
    ratio_claim = "|ratio error| <= (1 + e_N)(1 + e_div)/(1 - e_D) - 1 (attained at a corner)"
    rec.statement["ratio"] = tex(
        r"\left\lvert \frac{(\hat{N} / \hat{D})(1 + \delta)}{N / D} - 1 \right\rvert \le @f"
        r" \qquad \bigl(\lvert \hat{N} - N \rvert \le e_N \lvert N \rvert,"
        r"\ \lvert \hat{D} - D \rvert \le e_D \lvert D \rvert,"
        r"\ \lvert \delta \rvert \le e_{\mathrm{div}},\ 0 \le e_D < 1\bigr)",
        claim=ratio_claim,
        f=f_max,
    )
    rec.step(
        r"Ratio: $(1 + a)(1 + \delta) / (1 + b)$ is increasing in $a$, $\delta$ and decreasing "
        r"in $b$ on the box $\lvert a \rvert \le e_N$, $\lvert \delta \rvert \le "
        r"e_{\mathrm{div}}$, $\lvert b \rvert \le e_D$, so its extremes are at the corners; the "
        "upper excess exceeds the lower one:",
        tex(
            r"\Bigl(@fmax\Bigr) - \Bigl(@fmin\Bigr) = @d \ge 0",
            claim=ratio_claim,
            fmax=f_max,
            fmin=f_min,
            d=sp.factor(sp.together(f_max - f_min)),
        ),
    )
    ed2 = sp.Symbol("s", positive=True)  # 1 - e_D = 1/(1 + s), e_D in [0, 1)

    def ratio_ok() -> bool:
        # g = P F / C with P = 1 + e_N, F = 1 + delta, C = 1 + b, all positive on the box
        P, F, C = sp.symbols("P F C", positive=True)
        g = P * F / C
        mono = (
            sp.diff(g, P).is_positive is True
            and sp.diff(g, F).is_positive is True
            and sp.diff(g, C).is_negative is True
        )
        gap = (f_max - f_min).subs(ed, ed2 / (1 + ed2))
        return mono and _nonneg_rational(gap, [en, ed2, dv])

    rec.prove(
        ratio_claim,
        ratio_ok,
        "symbolic e_N, e_div >= 0, 0 <= e_D < 1; certificate of f_max - f_min >= 0",
    )
    rec.prove(
        "first order: ratio bound = e_N + e_D + e_div + O(2)",
        lambda: (
            sp.simplify(
                sp.series(f_max.subs({en: t_ * en, ed: t_ * ed, dv: t_ * dv}), t_, 0, 2).removeO()
                - t_ * (en + ed + dv)
            )
            == 0
        ),
        "series along a ray",
    )


# -- kernel attention output --------------------------------------------------------------
def claim_output_identity(rec) -> None:
    """|Nhat/Dhat - o| from the numerator and denominator errors (exact identity)."""
    import sympy as sp

    Nh, Nn, Dh, Dd = sp.symbols("Nhat N Dhat D", real=True, nonzero=True)
    rec.step(
        r"Output, $o = N / D$: the exact identity below; with "
        r"$\lvert \hat{N} - N \rvert \le e_{\mathrm{num}} A$, "
        r"$\lvert \hat{D} - D \rvert \le e_{\mathrm{den}} B$ and "
        r"$\lvert \hat{D} \rvert \ge \lvert D \rvert - e_{\mathrm{den}} B > 0$ it gives "
        r"$\lvert \hat{N} / \hat{D} - o \rvert \le (e_{\mathrm{num}} A + \lvert o \rvert"
        r" e_{\mathrm{den}} B) / (\lvert D \rvert - e_{\mathrm{den}} B) =: \beta$, and the "
        r"division adds $e_{\mathrm{div}} \lvert \hat{N} / \hat{D} \rvert \le e_{\mathrm{div}}"
        r" (\lvert o \rvert + \beta)$ (num_rel, den_rel, div_rel in the code):",
        tex(
            r"\frac{\hat{N}}{\hat{D}} - \frac{N}{D}"
            r" = \frac{(\hat{N} - N) - \frac{N}{D} (\hat{D} - D)}{\hat{D}}"
            r" \qquad (D, \hat{D} \ne 0)",
            claim="identity Nhat/Dhat - N/D = [(Nhat - N) - (N/D)(Dhat - D)]/Dhat",
        ),
    )
    rec.prove(
        "identity Nhat/Dhat - N/D = [(Nhat - N) - (N/D)(Dhat - D)]/Dhat",
        lambda: sp.simplify(Nh / Dh - Nn / Dd - ((Nh - Nn) - (Nn / Dd) * (Dh - Dd)) / Dh) == 0,
        "symbolic",
    )


def claim_weighted_sum(rec) -> None:
    """Weighted sums: weight errors and rounding combine to (1 + e_w)(1 + gamma_S) - 1."""
    import sympy as sp

    ew, gs = sp.symbols("e_w gamma_S", real=True)
    rec.step(
        r"Weighted sums: $\lvert \mathrm{fl}(\sum_s \hat{w}_s v_s) - \sum_s w_s v_s \rvert \le "
        r"\sum_s \lvert \hat{w}_s - w_s \rvert \lvert v_s \rvert + \gamma_S \sum_s \lvert"
        r" \hat{w}_s \rvert \lvert v_s \rvert \le (e_w + \gamma_S (1 + e_w)) \sum_s W_s"
        r" \lvert v_s \rvert$, since $\lvert \hat{w}_s \rvert \le \lvert w_s \rvert + e_w W_s"
        r" \le (1 + e_w) W_s$; the coefficient is",
        tex(
            r"(1 + e_w)(1 + \gamma_S) - 1 = @c",
            claim="weighted-sum coefficient e_w + gamma_S(1 + e_w) = (1 + e_w)(1 + gamma_S) - 1",
            c=sp.expand((1 + ew) * (1 + gs) - 1),
        ),
    )
    rec.prove(
        "weighted-sum coefficient e_w + gamma_S(1 + e_w) = (1 + e_w)(1 + gamma_S) - 1",
        lambda: sp.expand(ew + gs * (1 + ew) - ((1 + ew) * (1 + gs) - 1)) == 0,
        "symbolic",
    )


def claim_taylor_weights(rec) -> None:
    """kappa_N weights: mean value theorem via kappa_N' = kappa_{N-1}; the feature majorant."""
    import sympy as sp

    N = sp.Symbol("N", integer=True, positive=True)
    k = sp.Symbol("k", integer=True, nonnegative=True)
    xx = sp.Symbol("x", real=True)
    kapN = sp.Sum(xx**k / sp.factorial(k), (k, 0, N))
    kapN1 = sp.Sum(xx**k / sp.factorial(k), (k, 0, N - 1))
    rec.prove(
        "kappa_N' = kappa_{N-1} (mean value theorem: |kappa_N(x_hat) - kappa_N(x)| <= "
        "kappa_{N-1}(|x| + e) e <= kappa_N(|x| + e) e)",
        lambda: sp.simplify(kapN.diff(xx) - kapN1) == 0,
        "symbolic N (sympy Sum)",
    )

    def majorant_instances() -> bool:
        from derivations.feature_maps import monomial_weight, multi_indices

        ok = True
        for d in (1, 2, 3):
            qa = sp.symbols(f"a0:{d}", nonnegative=True)  # |q_i|
            ka = sp.symbols(f"b0:{d}", nonnegative=True)  # |k_i|
            for order in range(0, 5):
                lhs = 0
                for nn in range(order + 1):
                    for alpha in multi_indices(nn, d):
                        wgt = monomial_weight(alpha)
                        mono = sp.Integer(1)
                        for i, ai in enumerate(alpha):
                            mono *= (qa[i] * ka[i]) ** ai
                        lhs += sp.Rational(wgt.numerator, wgt.denominator) * mono
                s_abs = sum(qa[i] * ka[i] for i in range(d))
                rhs = sum(s_abs**nn / sp.factorial(nn) for nn in range(order + 1))
                ok = ok and sp.expand(lhs - rhs) == 0
        return ok

    rec.verify(
        "feature-form majorant: sum_alpha |Phi_alpha(q) Phi_alpha(k)| = kappa_N(sum_i |q_i||k_i|)",
        majorant_instances,
        "d = 1..3, N = 0..4 (scale 1; multinomial theorem on |q_i||k_i|)",
    )


#: (input, accumulation) formats whose every product is exact (the D10 claim; bf16 into fp32 is
#: not: bf16 has fp32's exponent range)
ALWAYS_EXACT_PRODUCTS = (("float16", "float32"), ("float32", "float64"))


def claim_two_level(rec, always_exact_products=ALWAYS_EXACT_PRODUCTS) -> None:
    """Two-level model: low-precision inputs, fp32 arithmetic, output rounded to the input dtype.

    ``always_exact_products`` injects a wrong claim (e.g. adding ``("bfloat16", "float32")``)."""
    import sympy as sp

    o_, a_, ul, eta = sp.symbols("o a u_low eta_low", nonnegative=True)
    displayed = a_ * (1 + ul) + ul * o_ + eta
    rec.step(
        r"Two-level model: $\mathrm{fl}_{\mathrm{low}}(\hat{o}) = \hat{o} (1 + \delta) + \eta$ "
        r"with $\lvert \delta \rvert \le u_{\mathrm{low}}$, $\lvert \eta \rvert \le "
        r"\eta_{\mathrm{low}}$ (eta_low = underflow_abs_error, half the subnormal spacing of "
        r"the output type), so $\lvert \mathrm{fl}_{\mathrm{low}}(\hat{o}) - o \rvert \le "
        r"\lvert \hat{o} - o \rvert + u_{\mathrm{low}} \lvert \hat{o} \rvert + "
        r"\eta_{\mathrm{low}}$, which gives (low_precision_output_bound)",
        tex(
            r"\lvert \mathrm{fl}_{\mathrm{low}}(\hat{o}) - o \rvert \le @b"
            r" \qquad (\lvert \hat{o} - o \rvert \le a)",
            claim="|fl_low(o_hat) - o| <= a (1 + u_low) + u_low |o| + eta_low for |o_hat - o| <= a "
            "(attained at a corner)",
            b=displayed.subs(o_, sp.Abs(sp.Symbol("o", real=True))),
        ),
    )
    # fl_low(o_hat) - o = e + (o + e) delta + eta, |e| <= a: multilinear in (e, delta, eta), so
    # its largest modulus over the box is at a corner; each corner is within +-displayed
    corners = [
        s1 * a_ + (o_ + s1 * a_) * s2 * ul + s3 * eta
        for s1 in (-1, 1)
        for s2 in (-1, 1)
        for s3 in (-1, 1)
    ]
    syms = [o_, a_, ul, eta]
    rec.prove(
        "|fl_low(o_hat) - o| <= a (1 + u_low) + u_low |o| + eta_low for |o_hat - o| <= a "
        "(attained at a corner)",
        lambda: (
            all(
                _nonneg_rational(displayed - c, syms) and _nonneg_rational(displayed + c, syms)
                for c in corners
            )
            and any(sp.expand(displayed - c) == 0 for c in corners)
        ),
        "symbolic a, |o|, u_low, eta_low >= 0; corners of e = o_hat - o, delta, eta "
        "(the error is multilinear in them)",
    )

    def code_matches() -> bool:
        def exact_q(x: float) -> Any:
            f = Fraction(x)
            return sp.Rational(f.numerator, f.denominator)

        ok = True
        for dtype in ("float32", "float16", "bfloat16"):
            for av, ov in ((0.0, 0.0), (1e-3, 0.5), (2.5, 7.0), (1e-30, 1e-35)):
                code = Fraction(low_precision_output_bound(av, ov, dtype))
                exact = displayed.subs(
                    {
                        a_: exact_q(av),
                        o_: exact_q(ov),
                        ul: exact_q(unit_roundoff(dtype)),
                        eta: exact_q(underflow_abs_error(dtype)),
                    }
                )
                exact = Fraction(int(sp.numer(exact)), int(sp.denom(exact)))
                ok = ok and abs(code - exact) <= Fraction(1, 2**50) * exact
        return ok

    rec.verify(
        "low_precision_output_bound computes the displayed a (1 + u_low) + u_low |o| + eta_low",
        code_matches,
        "output dtypes float32, float16, bfloat16 (the model's low-precision outputs; float64's "
        "eta_low = 2^-1075 is below the smallest float), (a, |o|) in {(0, 0), (1e-3, 0.5), "
        "(2.5, 7), (1e-30, 1e-35)}: float result within 2^-50 relative of the exact value",
    )
    pp = sp.Symbol("p", integer=True, positive=True)
    rec.prove(
        "significands: a product of two p_in-bit significands has at most 2 p_in bits "
        "((2^p - 1)^2 < 2^(2p)), so it fits a format with p_acc >= 2 p_in -- bf16 (8) and fp16 "
        "(11) into fp32 (24), fp32 (24) into fp64 (53), not fp64 into fp64 -- provided the "
        "product lies in that format's normal range",
        lambda: (
            sp.simplify(2 ** (2 * pp) - (2**pp - 1) ** 2 - (2 ** (pp + 1) - 1)) == 0
            and (2 ** (pp + 1) - 1).is_positive is True
            and product_exact_in("bfloat16", "float32")
            and product_exact_in("float16", "float32")
            and product_exact_in("float32", "float64")
            and not product_exact_in("float64", "float64")
        ),
        "symbolic p >= 1; precision bits 8, 11, 24, 53",
    )

    def in_range(pair) -> bool:
        src, dst = pair
        _, exp_bits = FORMATS[dst]
        normal_min = Fraction(2) ** (2 - 2 ** (exp_bits - 1))
        return (
            2 * precision_bits(src) <= precision_bits(dst)
            and smallest_subnormal(src) ** 2 >= normal_min
            and Fraction(largest_finite(src)) ** 2 <= Fraction(largest_finite(dst))
        )

    names = ", ".join(f"{a} x {a} into {b}" for a, b in always_exact_products)
    rec.prove(
        f"every product is exact for {names}: the significand fits and every non-zero product "
        "lies in the target's normal range (|a b| between smallest_subnormal^2 and "
        "largest_finite^2: 2^-48 >= 2^-126 and 65504^2 < 2^128 for fp16 into fp32; 2^-298 >= "
        "2^-1022 and (fp32 max)^2 < fp64 max)",
        lambda: (
            all(in_range(pr) for pr in always_exact_products)
            and all(product_always_exact(*pr) for pr in always_exact_products)
        ),
        "exact rational comparison of the extremes of |a b| (all finite inputs)",
    )

    def bf16_counterexamples() -> bool:
        p_bf, p32 = precision_bits("bfloat16"), precision_bits("float32")
        emin32 = 2 - 2 ** (FORMATS["float32"][1] - 1)
        tiny = (1 + Fraction(1, 2**7)) * Fraction(1, 2**70)
        big = Fraction(2) ** 100
        inputs_ok = all(round_to_bits(v, p_bf, emin32) == v for v in (tiny, big))
        tiny_sq = tiny * tiny  # (1 + 2^-6 + 2^-14) 2^-140, below 2^-126
        rounded = round_to_bits(tiny_sq, p32, emin32) != tiny_sq
        overflow = big * big > Fraction(largest_finite("float32"))
        return (
            inputs_ok
            and tiny_sq == (1 + Fraction(1, 2**6) + Fraction(1, 2**14)) * Fraction(1, 2**140)
            and rounded
            and overflow
            and not in_range(("bfloat16", "float32"))
            and not product_always_exact("bfloat16", "float32")
        )

    rec.verify(
        "the range condition is necessary: bf16 x bf16 in fp32 (same exponent range) is not "
        "always exact -- ((1 + 2^-7) 2^-70)^2 = (1 + 2^-6 + 2^-14) 2^-140 is rounded in fp32's "
        "subnormal range, and 2^100 x 2^100 = 2^200 overflows fp32",
        bf16_counterexamples,
        "exact rational arithmetic; fp32 rounding emulated with gradual underflow below 2^-126",
    )


# -- instance check on a toy format -----------------------------------------------------------
def claim_toy_format(rec) -> None:
    """Recursive dot products in a 5-bit binary format obey the gamma_n bound (exact rounding)."""
    import random

    ratios: list[float] = []

    def toy_format() -> bool:
        rng = random.Random(20240607)
        p = 5
        uu = Fraction(1, 2**p)
        ok = True
        for _ in range(1500):
            length = rng.randint(1, 6)
            a = [
                round_to_bits(Fraction(rng.randint(-999, 999), rng.randint(1, 64)), p)
                for _ in range(length)
            ]
            b = [
                round_to_bits(Fraction(rng.randint(-999, 999), rng.randint(1, 64)), p)
                for _ in range(length)
            ]
            acc = Fraction(0)
            for ai, bi in zip(a, b):
                acc = round_to_bits(acc + round_to_bits(ai * bi, p), p)
            exact = sum(ai * bi for ai, bi in zip(a, b))
            absd = sum(abs(ai * bi) for ai, bi in zip(a, b))
            g = length * uu / (1 - length * uu)
            bound = g * absd
            err = abs(acc - exact)
            ok = ok and err <= bound
            if bound:
                ratios.append(float(err / bound))
        return ok

    rec.verify(
        "instances: recursive dot products in a toy binary format (p = 5, exact rounding to "
        "nearest even) obey |fl(a.b) - a.b| <= gamma_n sum |a_i b_i|",
        toy_format,
        "1500 random dot products, n = 1..6, exact rational arithmetic",
    )
    if ratios:
        rec.tables["toy-format dot products"] = (
            ["instances", "max observed error / bound"],
            [[len(ratios), f"{max(ratios):.3f}"]],
        )


# -- the model's assumptions --------------------------------------------------------------------
#: the assumptions of the standard model as the record states them (name -> what it requires)
ASSUMPTIONS = {
    "round to nearest": "every operation rounds to nearest, ties to even (IEEE 754 default)",
    "no TF32": "float32 matrix products in full float32 (inputs not rounded to TF32's 11 bits)",
    "gradual underflow": "subnormal results kept (no flush-to-zero of subnormals)",
    "IEEE division": "division and square root correctly rounded, unless a library division "
    "of LIBRARY_DIV_ULPS is cited",
}
IEEE_754 = (
    "IEEE Std 754-2019: roundTiesToEven the default rounding of binary formats (4.3.1, 4.3.3); "
    "addition, subtraction, multiplication, division, squareRoot and fusedMultiplyAdd "
    "correctly rounded (5.4.1); subnormal results, underflow (7.5)"
)
FMA_COVERED = (
    "FMA contraction is covered: fl(c + a b) = (c + a b)(1 + delta) gives every product term "
    "at most as many factors (1 + delta) as a separate multiply and add, and gamma_m <= gamma_n "
    "for m <= n"
)


def _assumption_instances() -> dict[str, tuple[Fraction, Fraction, str]]:
    """For each assumption: (error without it, the model's bound, the instance), exact rationals.

    Each instance breaks one assumption in float32 (p = 24, emin = -126), emulated exactly."""
    p, emin = precision_bits("float32"), -126
    u = Fraction(1, 2**p)

    def nearest(x):
        return round_to_bits(x, p, emin)

    def toward_zero(x):  # truncation: round toward zero at p bits (normal range)
        e = x.numerator.bit_length() - x.denominator.bit_length()
        if Fraction(2) ** e > x:
            e -= 1
        step = Fraction(2) ** (e - p + 1)
        return (x // step) * step

    out = {}
    # 1 + (2 - 2^-10) 2^-24 is rounded down by truncation: an error near 2u, above u |x|
    x = 1 + (2 - Fraction(1, 2**10)) * u
    out["round to nearest"] = (
        abs(toward_zero(x) - x),
        u * abs(x),
        "x = 1 + (2 - 2^-10) 2^-24 rounded toward zero at 24 bits",
    )
    # a = b = 1 + 2^-12 are float32; TF32 (11 bits) rounds both to 1: the product loses 2^-11
    a = 1 + Fraction(1, 2**12)
    tf32 = round_to_bits(a, 11) * round_to_bits(a, 11)
    out["no TF32"] = (
        abs(nearest(tf32) - a * a),
        u / (1 - u) * a * a,
        "a = b = 1 + 2^-12 (float32), product with inputs rounded to 11 bits (TF32)",
    )
    # 2^-70 * 1.5 2^-60 = 1.5 2^-130: a subnormal float32, exact under gradual underflow
    prod = Fraction(1, 2**70) * Fraction(3, 2**61)
    flushed = Fraction(0) if abs(prod) < Fraction(2) ** emin else nearest(prod)
    out["gradual underflow"] = (
        abs(flushed - prod),
        u * abs(prod) + Fraction(underflow_abs_error("float32")),
        "2^-70 x 1.5 2^-60 = 1.5 2^-130 flushed to 0 (float32 subnormal)",
    )
    # a / b as a times the rounded reciprocal of b: not correctly rounded (searched instance)
    found = None
    for bn in range(1, 400):
        b = 1 + Fraction(bn, 2**9)
        for an in range(1, 400):
            a_ = 1 + Fraction(an, 2**9)
            approx = nearest(a_ * nearest(1 / b))
            if abs(approx - a_ / b) > u * abs(a_ / b):
                found = (a_, b, approx)
                break
        if found:
            break
    if found is None:  # pragma: no cover - the search always finds one
        raise ArithmeticError("no reciprocal-times-product instance above u found")
    a_, b, approx = found
    out["IEEE division"] = (
        abs(approx - a_ / b),
        u * abs(a_ / b),
        f"a / b as fl(a fl(1/b)) in float32, a = {a_}, b = {b}",
    )
    return out


def claim_assumptions(rec, dropped: tuple[str, ...] = ()) -> None:
    """The assumptions of the standard model, each shown necessary by an instance; FMA covered.

    ``dropped`` injects a wrong statement: the named assumptions are claimed unnecessary (the
    model's bound claimed to hold without them), which their instances refute."""
    import sympy as sp

    unknown = sorted(set(dropped) - set(ASSUMPTIONS))
    if unknown:
        raise ValueError(f"dropped: expected names in {sorted(ASSUMPTIONS)}, got {unknown}")
    rec.cite(
        "the standard model fl(x op y) = (x op y)(1 + delta), |delta| <= u = 2^-p, holds for "
        "IEEE round-to-nearest arithmetic in the normal range, with an absolute term eta below it "
        "under gradual underflow",
        f"{IEEE_754}; {HIGHAM}, Sec. 2.2 (eqs. 2.4, 2.8), Sec. 2.6 (fused multiply-add)",
        "the model's assumptions: " + "; ".join(ASSUMPTIONS.values()),
    )
    rec.statement["assumptions"] = tex(
        r"\text{IEEE 754 binary arithmetic, round to nearest (ties to even); float32 matrix "
        r"products in full float32 (no TF32); gradual underflow (no flush-to-zero); division "
        r"and square root correctly rounded unless a library division is cited; FMA "
        r"contraction covered (one rounding where the model counts two)}",
        claim="the standard model fl(x op y) = (x op y)(1 + delta), |delta| <= u = 2^-p, holds "
        "for IEEE round-to-nearest arithmetic in the normal range, with an absolute term eta "
        "below it under gradual underflow",
    )
    rec.step(
        r"Assumptions, each necessary: an instance that breaks one of them exceeds the model's "
        r"bound for one operation (table: float32, every rounding emulated exactly). Truncation "
        r"(round toward zero) errs by up to $2u$; TF32 inputs lose $2^{-11}$ on a product of "
        r"float32 numbers, far above $\gamma_1$; flushing a subnormal product to zero errs by "
        r"the whole product instead of $\eta$, half the subnormal spacing; a division computed "
        r"as a product with a rounded reciprocal is not correctly rounded. Kernels that depart "
        r"from an assumption need their own constants (a cited library division or exp)."
    )
    cases = _assumption_instances()
    rows = []
    for name, (err, bound, what) in cases.items():
        rows.append([name, what, float(err), float(bound), float(err / bound)])
        rec.verify(
            f"{name} is needed: without it one float32 operation errs by more than the model's "
            "bound",
            lambda e=err, b=bound, n=name: (e > b) != (n in dropped),
            what + " (exact rational arithmetic)",
        )
    rec.tables["assumptions"] = (
        ["assumption", "instance without it", "error", "model's bound", "error / bound"],
        rows,
    )
    # FMA: one rounding where the model counts two; the counts per term of a recursive dot
    # product (term 1 first, n terms) and gamma's monotonicity
    n, k = sp.symbols("n k", integer=True, positive=True)
    m_, uu = sp.symbols("m u", positive=True)
    rec.step(
        r"FMA contraction: $\mathrm{fl}(c + a b) = (c + a b)(1 + \delta)$ rounds once where the "
        r"model counts a product and an addition, so the product term carries one factor "
        r"$(1 + \delta)$ fewer. In a recursive dot product term $k \ge 2$ carries $n - k + 1$ "
        r"factors with FMAs against $n - k + 2$ without, term 1 carries $n$ either way; as "
        r"$\gamma_m$ increases with $m$, every bound of this record holds with FMAs:",
        sp.Eq(
            sp.Derivative(m_ * uu / (1 - m_ * uu), m_),
            uu / (1 - m_ * uu) ** 2,
            evaluate=False,
        ),
    )
    rec.prove(
        FMA_COVERED,
        lambda: (
            sp.simplify(sp.diff(m_ * uu / (1 - m_ * uu), m_) - uu / (1 - m_ * uu) ** 2) == 0
            and sp.simplify((n - k + 2) - (n - k + 1)) == 1
        ),
        "symbolic m, u (d gamma_m/dm = u/(1 - m u)^2 > 0) and n, k (one factor fewer per "
        "product term)",
    )

    def fma_instances() -> bool:
        import random

        rng = random.Random(7)
        p = 5
        u5 = Fraction(1, 2**p)
        for _ in range(1500):
            length = rng.randint(1, 6)
            a = [round_to_bits(Fraction(rng.randint(-999, 999), rng.randint(1, 64)), p)
                 for _ in range(length)]  # fmt: skip
            b = [round_to_bits(Fraction(rng.randint(-999, 999), rng.randint(1, 64)), p)
                 for _ in range(length)]  # fmt: skip
            acc = Fraction(0)
            for ai, bi in zip(a, b):
                acc = round_to_bits(acc + ai * bi, p)  # one rounding per multiply-add
            exact = sum(ai * bi for ai, bi in zip(a, b))
            g = length * u5 / (1 - length * u5)
            if abs(acc - exact) > g * sum(abs(ai * bi) for ai, bi in zip(a, b)):
                return False
        return True

    rec.verify(
        "instances: FMA dot products in the toy format (p = 5) obey the same gamma_n bound",
        fma_instances,
        "1500 random dot products, n = 1..6, fl(acc + a b) rounded once, exact rationals",
    )

"""The claims of the D10 record (``derivations.rounding_record.derive`` calls them in order).

Each ``claim_*`` function appends the steps, citations and checked claims of one group of the
floating-point error model to the record. Imported only by ``derive`` (no sympy at import).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

from derivations.rounding import (
    FORMAT_SOURCES,
    FORMATS,
    HIGHAM,
    LIBRARY_DIV_ULPS,
    LIBRARY_EXP_ULPS,
    precision_bits,
    product_exact_in,
    round_to_bits,
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
    rec.statement["u"] = sp.Tuple(*[claimed_u[k] for k in FORMATS])


def claim_gamma_lemma(rec, gam: Callable[[Any, Any], Any]) -> None:
    """Higham's Lemma 3.1 re-checked by induction for the claimed gamma_n = ``gam(n, u)``."""
    import sympy as sp

    n = sp.Symbol("n", positive=True)
    u = sp.Symbol("u", positive=True)
    g_n, g_n1 = gam(n, u), gam(n + 1, u)
    rec.statement["gamma_n"] = sp.Eq(sp.Symbol("gamma_n"), g_n)
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
        "Base: (1 + delta)^{-1} - 1 = -delta/(1 + delta) has modulus <= u/(1 - u) = gamma_1; "
        "(1 + delta) - 1 has modulus <= u.",
        gam(1, u),
    )
    rec.prove(
        "base case gamma_1 = u/(1 - u)",
        lambda: sp.simplify(gam(1, u) - u / (1 - u)) == 0,
        "symbolic u",
    )
    mult_gap = g_n1 - (g_n + u + g_n * u)
    div_gap = g_n1 - (g_n + u) / (1 - u)
    rec.step(
        "Induction: (1 + theta_n)(1 + delta) - 1 has modulus <= gamma_n + u + gamma_n u, and "
        "(1 + theta_n)/(1 + delta) - 1 <= (gamma_n + u)/(1 - u); both must be <= gamma_{n+1}:",
        sp.Tuple(sp.simplify(mult_gap), sp.simplify(div_gap)),
    )
    rec.prove(
        "induction step: gamma_{n+1} >= gamma_n + u + gamma_n u and >= (gamma_n + u)/(1 - u) "
        "for all n > 0, u > 0 with (n+1) u < 1",
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
        "exp of a rounded score: exp(x + t) = exp(x) e^t with |t| <= e; |e^t - 1| <= "
        "max(e^e - 1, 1 - e^-e) = e^e - 1 since (e^e - 1) - (1 - e^-e) = (e^(e/2) - "
        "e^(-e/2))^2 >= 0. With the library's relative error r = 2 ulps u: the worst case is "
        "e^e (1 + r) - 1 (the lower side 1 - e^-e (1 - r) is smaller):",
        A * (1 + rr) - 1,
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
    rows_c = [[k, v.value, v.source] for k, v in LIBRARY_EXP_ULPS.items()]
    rows_c += [[f"div:{k}", v.value, v.source] for k, v in LIBRARY_DIV_ULPS.items()]
    rec.tables["cited library ulps (from the exact result)"] = (
        ["constant", "ulps", "source"],
        rows_c,
    )
    rec.cite(
        "library exp: 1 ulp (glibc, SLEEF u10 as used by torch.exp on CPU), 20 ulp "
        "(torch Vectorized<float>::exp_u20), 2 ulp (CUDA expf; 2.5 from the exact result)",
        "; ".join(v.source for v in LIBRARY_EXP_ULPS.values()),
    )
    rec.cite(
        "division: IEEE 754 correctly rounded (0.5 ulp); CUDA __fdividef 2 ulp",
        "; ".join(v.source for v in LIBRARY_DIV_ULPS.values()),
    )


def claim_ratio(rec) -> None:
    """Worst relative error of a computed ratio: (1 + e_N)(1 + e_div)/(1 - e_D) - 1."""
    import sympy as sp

    t_ = _ray()
    en, ed, dv = sp.symbols("e_N e_D e_div", nonnegative=True)
    f_max = (1 + en) * (1 + dv) / (1 - ed) - 1
    f_min = 1 - (1 - en) * (1 - dv) / (1 + ed)
    rec.statement["ratio"] = sp.Le(sp.Symbol("|Nhat/Dhat (1+delta)/(N/D) - 1|"), f_max)
    rec.step(
        "Ratio: (1 + a)(1 + delta)/(1 + b) is increasing in a, delta and decreasing in b on the "
        "box, so its extremes are at the corners; the upper excess exceeds the lower one:",
        sp.factor(sp.together(f_max - f_min)),
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
        "|ratio error| <= (1 + e_N)(1 + e_div)/(1 - e_D) - 1 (attained at a corner)",
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
        "Output: Nhat/Dhat - N/D = [(Nhat - N) - (N/D)(Dhat - D)]/Dhat; with |Nhat - N| <= "
        "num_rel A, |Dhat - D| <= den_rel B and |Dhat| >= |D| - den_rel B: "
        "|Nhat/Dhat - o| <= (num_rel A + |o| den_rel B)/(|D| - den_rel B); the division adds "
        "div_rel |Nhat/Dhat| <= div_rel(|o| + that).",
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
        "Weighted sums: |fl(sum w_hat v) - sum w v| <= sum |w_hat - w||v| + gamma_S sum |w_hat||v|"
        " <= (e_w + gamma_S (1 + e_w)) sum W |v|, since |w_hat| <= |w| + e_w W <= (1 + e_w) W:",
        sp.expand((1 + ew) * (1 + gs) - 1),
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


def claim_two_level(rec) -> None:
    """Two-level model: low-precision inputs, fp32 arithmetic, output rounded to the input dtype."""
    import sympy as sp

    o_, a_, ul = sp.symbols("o a u_low", nonnegative=True)
    rec.step(
        "Two-level model: fl_low(o_hat) = o_hat (1 + delta), |delta| <= u_low, so "
        "|fl_low(o_hat) - o| <= |o_hat - o| + u_low |o_hat| <= a (1 + u_low) + u_low |o|.",
        a_ * (1 + ul) + ul * o_,
    )
    rec.prove(
        "bf16 x bf16 and fp16 x fp16 products are exact in fp32 (2p <= 24); fp32 x fp32 exact "
        "in fp64 (48 <= 53)",
        lambda: (
            product_exact_in("bfloat16", "float32")
            and product_exact_in("float16", "float32")
            and product_exact_in("float32", "float64")
            and not product_exact_in("float64", "float64")
        ),
        "precision bits 8, 11, 24, 53",
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

"""D14. Sigmoid attention o_t = sum_s sigma(c q_t.k_s + b) v_s (unnormalized).

Results, each closed by a check in ``derive()``:
- sigma(x) = (1 + tanh(x/2)) / 2 has poles at x = +-i pi, so its Maclaurin series has radius pi:
  a Taylor-RNN form of sigmoid attention (D1, D2) exists only where |c q.k + b| < pi;
- for x < 0, sigma(x) = sum_{j>=1} (-1)^(j+1) e^(jx): a signed sum of exp kernels,
  e^(jb) exp(j c q.k), each an infinite sum of linear RNNs at the score scale j c (D2); the
  alternating tail after J terms is at most e^((J+1) x);
- sigma is increasing with sigma' = sigma (1 - sigma), so with |c q.k| <= r every weight lies in
  [sigma(b - r), sigma(b + r)] (inside (0, 1): the peak weight is below 1), a row's weight sum
  in [S sigma(b - r), S sigma(b + r)] for S visible keys, and ||o_t||_inf <= S sigma(b + r)
  max_s ||v_s||_inf; with the bias b = -ln S the row sum at zero scores is S / (S + 1) < 1.

Source: sigmoid attention with the bias -ln(n), Ramapuram et al. 2025, "Theory, Analysis, and
Best Practices for Sigmoid Self-Attention" (ICLR 2025, arXiv:2409.04431), Sec. 3.

Numeric exports (plain Python): ``sigmoid``, ``series_terms_needed``, ``row_sum_bounds``.
"""

from __future__ import annotations

import math
from fractions import Fraction

from derivations._record import Derivation
from derivations._validate import check_exact_or_mpf, check_int

#: radius of the Maclaurin series of sigma (poles at +-i pi)
SERIES_RADIUS = math.pi


def sigmoid(x: float) -> float:
    """sigma(x) = 1 / (1 + e^(-x)), float, without overflow for large |x|.

    Raises:
        TypeError: ``x`` is not a real number.
    """
    v = float(check_exact_or_mpf("x", x)[0])
    if v >= 0:
        return 1.0 / (1.0 + math.exp(-v))
    e = math.exp(v)
    return e / (1.0 + e)


def series_terms_needed(x: float, level: float) -> int:
    """Smallest J with the alternating tail e^((J+1) x) <= ``level`` for x < 0 (D14).

    Then |sigma(x) - sum_{j<=J} (-1)^(j+1) e^(jx)| <= ``level`` (Leibniz: terms decrease).

    Raises:
        TypeError: an argument is not a real number.
        ValueError: ``x >= 0`` (the series diverges there) or ``level`` not in (0, 1).
    """
    xv = float(check_exact_or_mpf("x", x)[0])
    lv = float(check_exact_or_mpf("level", level)[0])
    if not xv < 0:
        raise ValueError(f"x: expected a negative score (the series needs e^x < 1), got {x!r}")
    if not 0 < lv < 1:
        raise ValueError(f"level: expected a number in (0, 1), got {level!r}")
    return max(0, math.ceil(math.log(lv) / xv) - 1)


def row_sum_bounds(radius: float, bias: float, keys: int) -> tuple[float, float]:
    """[S sigma(b - r), S sigma(b + r)]: a row's weight sum for |c q.k| <= r, S keys (D14).

    Raises:
        TypeError: a wrong type.
        ValueError: ``radius < 0`` or ``keys < 1``.
    """
    r = float(check_exact_or_mpf("radius", radius)[0])
    b = float(check_exact_or_mpf("bias", bias)[0])
    check_int("keys", keys)
    if r < 0:
        raise ValueError(f"radius: expected a number >= 0, got {radius!r}")
    if keys < 1:
        raise ValueError(f"keys: expected an int >= 1, got {keys!r}")
    return keys * sigmoid(b - r), keys * sigmoid(b + r)


TANH_FORM = "sigma(x) = (1 + tanh(x/2)) / 2 (all real x)"
POLE = (
    "the poles of sigma are the zeros of 1 + e^(-x), i.e. of cosh(x/2): x = i pi (2k + 1), "
    "k integer; the nearest are +-i pi, at distance pi"
)
SOURCE = "sigmoid attention sum_s sigma(c q_t.k_s + b) v_s with the bias b = -ln S (S keys)"
SIGNED = "sigma(x) = sum_{j>=1} (-1)^(j+1) e^(jx) for x < 0; e^(j(x+b)) = e^(jb) e^(jx)"
MONOTONE = "sigma' = sigma (1 - sigma) > 0; b = -ln S gives row sum S / (S + 1) at zero scores"


def _statement(rec) -> None:
    from derivations._latex import tex

    rec.statement["output"] = tex(
        r"o_t = \sum_{s} \sigma(c\,q_t\cdot k_s + b)\, v_s,\qquad "
        r"\sigma(x) = \frac{1}{1+e^{-x}} = \frac{1 + \tanh(x/2)}{2} \qquad "
        r"(x \in \mathbb{R},\ c > 0,\ b \in \mathbb{R})",
        claim=TANH_FORM,
    )
    rec.statement["radius"] = tex(
        r"\sigma(x) = \sum_{n \ge 0} a_n x^n\ \text{ for } |x| < \pi"
        r"\text{; the series diverges for } |x| > \pi",
        claim=POLE,
    )
    rec.statement["signed_exp"] = tex(
        r"\sigma(x) = \sum_{j \ge 1} (-1)^{j+1} e^{jx}\ \text{ for } x < 0,\qquad "
        r"e^{j(c\,q\cdot k + b)} = e^{jb}\, e^{j c\, q\cdot k}",
        claim=SIGNED,
    )
    rec.statement["row_sums"] = tex(
        r"|c\,q_t\cdot k_s| \le r \implies S\,\sigma(b - r) \le "
        r"\sum_s \sigma(c\,q_t\cdot k_s + b) \le S\,\sigma(b + r),\qquad "
        r"\|o_t\|_\infty \le S\,\sigma(b + r) \max_s \|v_s\|_\infty \qquad "
        r"(S \text{ keys in the row},\ b \in \mathbb{R},\ r \ge 0)",
        claim=MONOTONE,
    )


def _claim_tanh_form(rec) -> None:
    import sympy

    x = sympy.Symbol("x", real=True)
    sig = 1 / (1 + sympy.exp(-x))
    rec.step(
        r"$\sigma$ is an affine $\tanh$: $\sigma(x) = (1 + \tanh(x/2)) / 2$, so its poles are "
        r"those of $\tanh(x/2)$, where $\cosh(x/2) = 0$: $x = i \pi (2k + 1)$, nearest "
        r"$\pm i \pi$. The Maclaurin series of $\sigma$ therefore has radius $\pi$ (the "
        r"distance to the nearest singularity).",
        sympy.Eq(sig, (1 + sympy.tanh(x / 2)) / 2, evaluate=False),
    )
    rec.prove(
        TANH_FORM,
        lambda: sympy.simplify((sig - (1 + sympy.tanh(x / 2)) / 2).rewrite(sympy.exp)) == 0,
        "symbolic x; rewritten in exp",
    )
    xr, yr = sympy.symbols("x y", real=True)
    z = sympy.Symbol("z")
    rec.prove(
        POLE,
        lambda: (
            sympy.simplify(1 + sympy.exp(-sympy.I * sympy.pi)) == 0
            # 1 + e^(-x) = 2 e^(-x/2) cosh(x/2); |cosh(x + i y)|^2 = sinh^2 x + cos^2 y
            and sympy.simplify(
                (1 + sympy.exp(-z) - 2 * sympy.exp(-z / 2) * sympy.cosh(z / 2)).rewrite(sympy.exp)
            )
            == 0
            and sympy.simplify(
                sympy.expand_complex(sympy.Abs(sympy.cosh(xr + sympy.I * yr)) ** 2)
                - (sympy.sinh(xr) ** 2 + sympy.cos(yr) ** 2)
            )
            == 0
            # zeros of cos(y/2) in [-8, 8]: +-pi only; the others have |y| > 8
            and set(sympy.solveset(sympy.cos(z / 2), z, sympy.Interval(-8, 8)))
            == {-sympy.pi, sympy.pi}
        ),
        "symbolic z and real x, y: 1 + e^(-z) = 2 e^(-z/2) cosh(z/2), |cosh(x + i y)|^2 = "
        "sinh^2 x + cos^2 y (zero only on the imaginary axis); zeros of cos(y/2) in [-8, 8]",
    )
    rec.cite(
        "a power series converges on the largest disc free of singularities and diverges "
        "outside its closed disc of convergence",
        "Ahlfors, Complex Analysis (3rd ed., 1979), Ch. 5, Thm. 3 (Taylor's theorem); "
        "divergence beyond the radius of convergence: Ch. 2, Sec. 2.4, Thm. 2 (Abel)",
        "applied at the poles +-i pi of sigma",
    )

    def root_test():
        # coefficients of sigma from tanh's (Bernoulli numbers): sigma = 1/2 + tanh(x/2) / 2
        top = 41
        coeffs = []
        for n in range(1, top + 1, 2):
            b = sympy.bernoulli(n + 1)
            t_n = Fraction(2 ** (n + 1) * (2 ** (n + 1) - 1) * int(b.p), int(b.q)) / (
                math.factorial(n + 1)
            )
            coeffs.append((n, t_n / 2**n / 2))  # tanh(x/2)/2
        ok = coeffs[0][1] == Fraction(1, 4) and coeffs[1][1] == Fraction(-1, 48)
        est = [float(abs(c)) ** (-1.0 / n) for n, c in coeffs if n >= 25]
        return ok and all(abs(e - math.pi) < 0.3 for e in est)

    rec.verify(
        "root test on sigma's series (1/2 + x/4 - x^3/48 + ...): |a_n|^(-1/n) near pi",
        root_test,
        "odd n = 25..41 from the Bernoulli numbers; within 0.3 of pi",
    )


def _claim_signed_exp(rec, f) -> None:
    import sympy

    y = sympy.Symbol("y", positive=True)  # y = e^x in (0, 1) for x < 0
    j = sympy.Symbol("j", integer=True, positive=True)
    series = sympy.Sum(f["sign"] * (-1) ** (j + 1) * y**j, (j, 1, sympy.oo))
    rec.step(
        r"For $x < 0$ put $y = e^x \in (0, 1)$: $\sigma(x) = y / (1 + y) = "
        r"\sum_{j \ge 1} (-1)^{j+1} y^j$ (geometric series). Each term "
        r"$e^{j(c\, q \cdot k + b)} = e^{jb} e^{j c\, q \cdot k}$ is an exp kernel at the "
        r"score scale $j c$, an infinite sum of linear RNNs (D2); the signs alternate, so sigmoid "
        r"attention is a signed sum of softmax-type numerators, and the tail after $J$ terms is "
        r"at most $e^{(J+1) x}$ (Leibniz: the terms decrease in modulus).",
        sympy.Eq(sympy.Sum((-1) ** (j + 1) * y**j, (j, 1, sympy.oo)), y / (1 + y), evaluate=False),
    )

    def check():
        total = sympy.simplify(series.doit())
        if isinstance(total, sympy.Piecewise):  # the branch for |y| < 1
            total = total.args[0][0]
        x = sympy.Symbol("x", negative=True)
        return (
            sympy.simplify(total - y / (1 + y)) == 0
            and sympy.simplify(y / (1 + y) - 1 / (1 + 1 / y)) == 0
            and sympy.simplify(
                sympy.exp(j * (x + sympy.Symbol("b", real=True)))
                - sympy.exp(j * sympy.Symbol("b", real=True)) * sympy.exp(j * x)
            )
            == 0
        )

    rec.prove(
        SIGNED,
        check,
        "symbolic y = e^x in (0, 1), j >= 1; sympy sums the geometric series",
    )
    rec.cite(
        "alternating series with terms decreasing to 0: the tail is at most the first omitted term",
        "Leibniz criterion; e.g. Knopp, Theory and Application of Infinite Series (1951), Sec. 82",
        "terms e^(jx), x < 0, decrease in j",
    )

    def tail_check():
        for x in (Fraction(-1, 10), Fraction(-1), Fraction(-5)):
            for level in (Fraction(1, 10), Fraction(1, 1000), Fraction(1, 10**8)):
                jj = series_terms_needed(x, level)
                xf = float(x)
                partial = sum((-1) ** (i + 1) * math.exp(i * xf) for i in range(1, jj + 1))
                if not abs(sigmoid(xf) - partial) <= float(level) * (1 + 1e-9):
                    return False
                if jj > 0 and math.exp(jj * xf) <= float(level):  # J - 1 terms would not do
                    return False
        return True

    rec.verify(
        "series_terms_needed: J terms reach the level, J - 1 do not by the tail bound",
        tail_check,
        "x in {-0.1, -1, -5}, level in {1e-1, 1e-3, 1e-8} (float64 sums)",
    )


def _claim_row_sums(rec, f) -> None:
    import sympy

    x = sympy.Symbol("x", real=True)
    n = sympy.Symbol("S", integer=True, positive=True)
    sig = 1 / (1 + sympy.exp(-x))
    rec.step(
        r"Monotone: $\sigma' = \sigma (1 - \sigma) > 0$, so $|c\, q \cdot k| \le r$ puts "
        r"every weight in $[\sigma(b - r), \sigma(b + r)]$ and a row's sum of $S$ weights in "
        r"$[S \sigma(b - r), S \sigma(b + r)]$; the output is a weighted sum of values with "
        r"these weights. With the bias $b = -\ln S$ at zero scores the row sum is "
        r"$S / (S + 1) < 1$. The derivative of $\sigma$:",
        sympy.Eq(sympy.Derivative(sig, x), sig * (1 - sig), evaluate=False),
    )
    rec.prove(
        MONOTONE,
        lambda: (
            sympy.simplify(sympy.diff(sig, x) - sig * (1 - sig)) == 0
            and sympy.simplify(sig * (1 - sig) - sympy.exp(-x) / (1 + sympy.exp(-x)) ** 2) == 0
            and sympy.simplify(
                n * (1 / (1 + sympy.exp(f["bias_sign"] * sympy.log(n)))) - n / (n + 1)
            )
            == 0
        ),
        "symbolic x, S >= 1",
    )


def derive(**wrong) -> Derivation:
    """Build the D14 record: sigmoid attention's series, its signed-exp form and its bounds.

    Keyword overrides (wrong-statement tests): ``sign`` (1 right; -1 drops the alternation's
    sign), ``bias_sign`` (1 right; -1 uses the bias +ln S).

    Raises:
        TypeError: an unknown override name.
    """
    from derivations import feature_maps as fm

    f = fm.resolve_overrides(wrong, {"sign": 1, "bias_sign": 1})
    rec = Derivation("D14", "Sigmoid attention: radius π, a signed sum of exp kernels, bounds")
    rec.cite(
        SOURCE,
        "Ramapuram et al., 'Theory, Analysis, and Best Practices for Sigmoid Self-Attention', "
        "ICLR 2025 (arXiv:2409.04431), Sec. 3",
        "the form and the bias; the radius, the signed-exp form and the bounds below are this "
        "project's",
    )
    _statement(rec)
    _claim_tanh_form(rec)
    _claim_signed_exp(rec, f)
    _claim_row_sums(rec, f)
    rec.exports = ["sigmoid", "series_terms_needed", "row_sum_bounds", "SERIES_RADIUS"]
    return rec


if __name__ == "__main__":
    from derivations._record import main_for

    main_for(derive)

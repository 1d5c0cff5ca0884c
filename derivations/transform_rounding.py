"""D16. Rounding of transformed scores: softcapping, an additive ALiBi bias, sigmoid weights.

Extends D10's score error e_x (|x_hat - x| <= e_x for the computed score x_hat of x = c q.k) to
the scores the modern forms use, so the existing weight and output bounds of D10 apply to them:

- softcap (D13): fl(C tanh_lib(fl(x_hat / C))). tanh is 1-Lipschitz, so
  |cap_hat - C tanh(x/C)| <= e_x + u (|x| + e_x) + C t ((1 + r)(1 + u) - 1) with
  t = min(1, (|x| + e_x)(1 + u)/C) and r = 2 k u the library's relative error for k ulps
  (``TANH_ULPS``);
- ALiBi (D12): fl(x_hat - fl(m |t' - s|)) with bias b = m |t' - s| >= 0:
  |result - (x - b)| <= e_x + u b + u (|x| + e_x + b (1 + u));
- normalized queries and keys (cosine attention, QK-norm): x = c (q / |q|).(k / |k|) computed as
  the norm fl(sqrt(sum fl(q_i^2))) (relative error e_n <= max((1 + gamma_d)^(1/2)(1 + u) - 1,
  1 - (1 - gamma_d)^(1/2)(1 - u))), each coordinate divided by it or multiplied by its rounded
  reciprocal (e_q = (1 + u)^2 / (1 - e_n) - 1), the dot product of d terms and the product by c:
  |x_hat - x| <= c ((1 + e_q)^2 (1 + gamma_d)(1 + u) - 1) sum_i |q_i k_i| / (|q| |k|) (at most
  c ((1 + e_q)^2 (1 + gamma_d)(1 + u) - 1) by Cauchy-Schwarz);
- sigmoid weight (D14): sigma_lib(fl(x_hat + b)) = 1 / (1 + exp_lib(-a_hat)): with
  |a_hat - a| <= e_a = e_x + u (|x| + e_x + |b|), sigma(a_hat) / sigma(a) lies in
  [e^(-e_a), e^(e_a)], and the exp, add and divide give (1 + r_exp)(1 + u)^2; the relative weight
  error is <= e^(e_a) (1 + r_exp)(1 + u)^2 - 1.

Each bound is checked on instances in a toy binary format (11-bit significands, exact rational
arithmetic, tanh and exp evaluated in float64 and rounded: 0.51 ulp), with its largest
observed/bound ratio stated (not vacuous) and a twin that drops a term and is exceeded.

Numeric exports: ``softcap_score_abs_error``, ``alibi_score_abs_error``,
``normalized_score_abs_error``, ``sigmoid_weight_relative_bound``, ``TANH_ULPS``.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np

from derivations._record import Derivation
from derivations._validate import check_dim, check_int
from derivations.rounding import (
    CitedConstant,
    _result,
    check_real,
    gamma,
    round_to_bits,
    ulps_to_relative,
)

#: maximum error of tanh in ulps of the exact result (the envelope of the CPU paths PyTorch uses)
TANH_ULPS = CitedConstant(
    2.5,
    "GNU C Library, sysdeps/x86_64/fpu/libm-test-ulps: tanh float 2, double 2 "
    "(round to nearest), measured from the correctly rounded result (the scalar std::tanh path "
    "of torch.tanh); SLEEF Sleef_tanhf8_u10 / Sleef_tanhd4_u10: maximum error 1.0 ulp from the "
    "exact result (the vectorized CPU path)",
    "2 ulps from the correctly rounded result: 2 + 1/2 from the exact one, the larger of the "
    "two paths; torch.tanh is measured against it by tests/test_transform_rounding.py",
    2.0,
    "correctly rounded",
)

#: the toy format of the checks: significands of P_TOY bits, unit roundoff U_TOY
P_TOY = 11
U_TOY = 2.0**-P_TOY
#: a float64 library function rounded to the toy format: 0.5 ulp plus float64's own error
TOY_ULPS = 0.51


def softcap_score_abs_error(
    score_abs_error,
    score_abs,
    cap: float,
    u: float,
    tanh_ulps: float,
    *,
    argument_roundings: int = 1,
    tanh_rel: float | None = None,
    product_rounded: bool = True,
):
    """Bound on |C tanh_lib(y_hat) - C tanh(x / C)| for the capped score, given |x_hat - x| <= e_x
    (D16; floats or numpy arrays, elementwise).

    The argument y_hat = x_hat / C is computed with ``argument_roundings`` k roundings (1: a
    division; 2: a product with fl(1/C), or FlashAttention-2's raw score times fl(c / C)), so
    |y_hat - x_hat / C| <= gamma_k |x_hat| / C; tanh is 1-Lipschitz; the library's tanh has
    relative error r (``tanh_rel``, else 2 ``tanh_ulps`` u); the product by C rounds once more
    unless it is folded into the exponent's scale (``product_rounded=False``):

        e_x + gamma_k (|x| + e_x) + C t ((1 + r)(1 + u)^[product] - 1),
        t = min(1, (|x| + e_x)(1 + gamma_k) / C).

    Args:
        score_abs_error: e_x >= 0. score_abs: a bound on |x|. cap: C > 0. u: unit roundoff of
            the arithmetic. tanh_ulps: the library's ulps from the exact result.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    e = check_real("score_abs_error", score_abs_error, nonneg=True, array_ok=True)
    a = check_real("score_abs", score_abs, nonneg=True, array_ok=True)
    c = check_real("cap", cap, nonneg=True)
    if c <= 0:
        raise ValueError(f"cap: expected a number > 0, got {cap!r}")
    g = gamma(check_int("argument_roundings", argument_roundings, 1), u)
    if tanh_rel is None:
        r = ulps_to_relative(tanh_ulps, u)
    else:
        r = check_real("tanh_rel", tanh_rel, nonneg=True)
    tanh_abs = np.minimum(1.0, (a + e) * (1.0 + g) / c)
    prod = (1.0 + u) if product_rounded else 1.0
    return _result(e + g * (a + e) + c * tanh_abs * ((1.0 + r) * prod - 1.0))


def alibi_score_abs_error(score_abs_error, score_abs, bias_abs, u: float, *, bias_roundings=1):
    """Bound on |fl(x_hat - b_hat) - (x - b)| given |x_hat - x| <= e_x and a bias computed with
    ``bias_roundings`` k roundings, |b_hat - b| <= gamma_k b (D16; floats or numpy arrays):

        e_x + gamma_k b + u (|x| + e_x + b (1 + gamma_k)).

    k = 1 for fl(m |t' - s|); 2 for FlashAttention-2's fl(fl(m / sigma) j) added to the raw
    score (sigma its softmax scale; the bias then scaled with the score, the same bound in
    scaled units). ``bias_abs`` is b >= 0 (m |t' - s|, or m s for a key-indexed bias).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    e = check_real("score_abs_error", score_abs_error, nonneg=True, array_ok=True)
    a = check_real("score_abs", score_abs, nonneg=True, array_ok=True)
    b = check_real("bias_abs", bias_abs, nonneg=True, array_ok=True)
    g = gamma(check_int("bias_roundings", bias_roundings, 0), u)
    return _result(e + g * b + u * (a + e + b * (1.0 + g)))


def normalized_score_abs_error(
    dim: int, scale: float, unit_abs_dot: float, u: float, *, normalization: bool = True
) -> float:
    """Bound on |x_hat - c (q/|q|).(k/|k|)| for the score of L2-normalized q and k (D16).

    The computation: |q| = fl(sqrt(sum_i fl(q_i^2))) (d products and d - 1 additions of
    non-negative terms, then a correctly rounded sqrt), q_i / |q| by a division or a product with
    the rounded reciprocal, the same for k, the dot product of d terms and the product by c.

    Args:
        dim: d >= 1. scale: c > 0. unit_abs_dot: sum_i |q_i k_i| / (|q| |k|) (<= 1), or 0 for
            a zero vector (normalized to 0 exactly). u: unit roundoff.
        normalization: False treats q/|q| and k/|k| as exact, the plain dot-product bound (the
            wrong-statement twin).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    d = check_dim("dim", dim)
    c = check_real("scale", scale, nonneg=True)
    a = check_real("unit_abs_dot", unit_abs_dot, nonneg=True, array_ok=True)
    g = gamma(d, u)
    e_n = max(math.sqrt(1 + g) * (1 + u) - 1, 1 - math.sqrt(1 - g) * (1 - u))
    e_q = (1 + u) ** 2 / (1 - e_n) - 1 if normalization else 0.0
    return _result(c * ((1 + e_q) ** 2 * (1 + g) * (1 + u) - 1) * a)


def sigmoid_weight_relative_bound(
    score_abs_error: float, score_abs: float, bias: float, u: float, exp_ulps: float
) -> float:
    """Relative error of sigma_lib(fl(x_hat + b)) = 1/(1 + exp(-a_hat)) against sigma(x + b) (D16).

    Args:
        score_abs_error: e_x >= 0. score_abs: a bound on |x|. bias: b (any real). u: unit
            roundoff. exp_ulps: the exp library's ulps from the exact result.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    e = check_real("score_abs_error", score_abs_error, nonneg=True, array_ok=True)
    a = check_real("score_abs", score_abs, nonneg=True, array_ok=True)
    b = abs(check_real("bias", bias))
    e_a = e + u * (a + e + b)
    r = ulps_to_relative(exp_ulps, u)
    grown = np.exp(np.minimum(e_a, 700.0)) * (1.0 + r) * (1.0 + u) ** 2 - 1.0
    return _result(np.where(e_a > 700, math.inf, grown))


# -- the record: checks on a toy format -----------------------------------------------------------
def _rnd(x) -> Fraction:
    return round_to_bits(Fraction(x), P_TOY)


def _lib(fn, x) -> Fraction:
    """A float64 library function of a toy number, rounded to the toy format."""
    return _rnd(Fraction(fn(float(x))))


def _instances(rng: random.Random, n: int, spread: float):
    """(x, x_hat, e_x): exact scores and computed ones off by at most e_x, in the toy format."""
    out = []
    for _ in range(n):
        x = Fraction(rng.uniform(-spread, spread))
        e_x = abs(x) * U_TOY * rng.choice((0, 1, 4))
        x_hat = _rnd(x + Fraction(rng.uniform(-1, 1)) * Fraction(e_x))
        out.append((x, x_hat, float(abs(x_hat - x)) * (1 + 1e-12)))  # the e_x this instance has
    return out


def _check_softcap(rec, f) -> None:
    import mpmath

    rng = random.Random(16)
    ratios = []
    ok = True
    for cap in (Fraction(1, 2), Fraction(5), Fraction(30)):
        for x, x_hat, e_x in _instances(rng, 300, 3 * float(cap)):
            got = _rnd(cap * _lib(math.tanh, _rnd(x_hat / cap)))
            with mpmath.workdps(40):
                exact = cap * mpmath.tanh(mpmath.mpf(x.numerator) / x.denominator / float(cap))
                err = float(abs(mpmath.mpf(got.numerator) / got.denominator - exact))
            bound = f["softcap"](e_x, float(abs(x)), float(cap), U_TOY, TOY_ULPS)
            ratios.append(err / bound if bound else 0.0)
            ok = ok and err <= bound
    rec.tables["softcap_toy"] = (["instances", "max observed/bound"], [[len(ratios), max(ratios)]])
    rec.verify(
        SOFTCAP,
        lambda: ok and max(ratios) > 0.05,
        f"900 instances, C in (1/2, 5, 30), |x| <= 3C; max observed/bound {max(ratios):.3f}",
    )


def _check_alibi(rec, f) -> None:
    rng = random.Random(12)
    ratios = []
    ok = True
    for x, x_hat, e_x in _instances(rng, 600, 20.0):
        m = _rnd(Fraction(2) ** -rng.randint(0, 8) * Fraction(rng.randint(1, 7), 4))
        dist = rng.randint(0, 4000)
        b = m * dist
        got = _rnd(x_hat - _rnd(b))
        err = float(abs(got - (x - b)))
        bound = f["alibi"](e_x, float(abs(x)), float(b), U_TOY)
        ratios.append(err / bound if bound else 0.0)
        ok = ok and err <= bound
    rec.tables["alibi_toy"] = (["instances", "max observed/bound"], [[len(ratios), max(ratios)]])
    rec.verify(
        ALIBI,
        lambda: ok and max(ratios) > 0.05,
        f"600 instances, |x| <= 20, slopes 2^-8..7/4, distances to 4000; max observed/bound "
        f"{max(ratios):.3f}",
    )


def _check_sigmoid(rec, f) -> None:
    import mpmath

    rng = random.Random(14)
    ratios = []
    ok = True
    for x, x_hat, e_x in _instances(rng, 600, 12.0):
        b = _rnd(Fraction(rng.uniform(-6, 2)))
        a_hat = _rnd(x_hat + b)
        got = _rnd(1 / _rnd(1 + _lib(math.exp, -a_hat)))
        with mpmath.workdps(40):
            a = mpmath.mpf((x + b).numerator) / (x + b).denominator
            exact = 1 / (1 + mpmath.exp(-a))
            err = float(abs(mpmath.mpf(got.numerator) / got.denominator - exact) / exact)
        bound = f["sigmoid"](e_x, float(abs(x)), float(b), U_TOY, TOY_ULPS)
        ratios.append(err / bound)
        ok = ok and err <= bound
    rec.tables["sigmoid_toy"] = (["instances", "max observed/bound"], [[len(ratios), max(ratios)]])
    rec.verify(
        SIGMOID,
        lambda: ok and max(ratios) > 0.05,
        f"600 instances, |x| <= 12, b in [-6, 2]; max observed/bound {max(ratios):.3f}",
    )


def _check_normalized(rec, f) -> None:
    import mpmath

    rng = random.Random(17)
    ratios, twin_exceeded = [], False
    ok = True
    for i in range(1200):
        d = rng.randint(1, 8) if i % 2 else rng.randint(1, 2)  # small d: the norm's share is large
        q = [_rnd(Fraction(rng.uniform(-2, 2))) for _ in range(d)]
        k = [_rnd(Fraction(rng.uniform(-2, 2))) for _ in range(d)]
        if i % 3 == 0:  # aligned q and k: the norms' error is a common factor of every term
            k = list(q)
        c = _rnd(Fraction(rng.choice((1.0, 0.5, 10.0, 1 / math.sqrt(d)))))
        reciprocal = rng.random() < 0.5

        def unit(x, reciprocal):
            s = Fraction(0)
            for xi in x:
                s = _rnd(s + _rnd(xi * xi))
            with mpmath.workprec(200):  # the correctly rounded sqrt of the toy format
                root = mpmath.sqrt(mpmath.mpf(s.numerator) / s.denominator)
                n = _rnd(Fraction(int(root.man)) * Fraction(2) ** int(root.exp))
            if reciprocal:
                r = _rnd(1 / n)
                return [_rnd(xi * r) for xi in x]
            return [_rnd(xi / n) for xi in x]

        if not any(q) or not any(k):
            continue
        qh, kh = unit(q, reciprocal), unit(k, reciprocal)
        dot = Fraction(0)
        for a, b in zip(qh, kh):
            dot = _rnd(dot + _rnd(a * b))
        got = _rnd(c * dot)
        with mpmath.workdps(40):

            def mp(x: Fraction):
                return mpmath.mpf(x.numerator) / x.denominator

            nq = mpmath.sqrt(sum(mp(z * z) for z in q))
            nk = mpmath.sqrt(sum(mp(z * z) for z in k))
            exact = mp(c) * sum(mp(a * b) for a, b in zip(q, k)) / (nq * nk)
            unit_abs = float(sum(mp(abs(a * b)) for a, b in zip(q, k)) / (nq * nk))
            err = float(abs(mpmath.mpf(got.numerator) / got.denominator - exact))
        bound = f["normalized"](d, float(c), unit_abs * (1 + 1e-12), U_TOY)
        twin = normalized_score_abs_error(d, float(c), unit_abs, U_TOY, normalization=False)
        twin_exceeded = twin_exceeded or err > twin
        ratios.append(err / bound if bound else 0.0)
        ok = ok and err <= bound
    rec.tables["normalized_toy"] = (
        ["instances", "max observed/bound", "normalization taken as exact: exceeded"],
        [[len(ratios), max(ratios), twin_exceeded]],
    )
    rec.verify(
        NORMALIZED,
        lambda: ok and max(ratios) > 0.05 and twin_exceeded,
        f"{len(ratios)} instances, d = 1..8 (half with d <= 2, a third with k = q), "
        f"c in (1, 1/2, 10, 1/sqrt(d)), division or reciprocal "
        f"product; max observed/bound {max(ratios):.3f}; the plain dot-product bound (q/|q|, k/|k| "
        f"taken as exact) is exceeded: {twin_exceeded}",
    )


SOFTCAP = "softcap score error bound (toy format, p = 11)"
NORMALIZED = "normalized q, k score error bound (toy format, p = 11)"
ALIBI = "ALiBi score error bound (toy format, p = 11)"
SIGMOID = "sigmoid weight relative error bound (toy format, p = 11)"


def derive(**wrong) -> Derivation:
    """Build the D16 record: rounding of capped, biased and sigmoid scores.

    Keyword overrides (wrong-statement tests): ``softcap``, ``alibi``, ``sigmoid``,
    ``normalized`` (callables replacing the exported bounds).

    Raises:
        TypeError: an unknown override name.
    """
    from derivations import feature_maps as fm

    f = fm.resolve_overrides(
        wrong,
        {
            "softcap": softcap_score_abs_error,
            "alibi": alibi_score_abs_error,
            "sigmoid": sigmoid_weight_relative_bound,
            "normalized": normalized_score_abs_error,
        },
    )
    rec = Derivation(
        "D16", "Rounding of transformed scores: softcap, ALiBi bias, normalized q and k, sigmoid"
    )
    from derivations._latex import tex

    rec.statement["softcap"] = tex(
        r"|\widehat{\operatorname{cap}} - C\tanh(x/C)| \le e_x + u(|x| + e_x) + "
        r"C \min\!\bigl(1, \tfrac{(|x|+e_x)(1+u)}{C}\bigr)\bigl((1+r)(1+u) - 1\bigr) \qquad "
        r"\bigl(\lvert \hat x - x \rvert \le e_x,\ C > 0,\ u \text{ the unit roundoff},\ "
        r"r = 2 k u \text{ for a tanh within } k \text{ ulps}\bigr)",
        claim=SOFTCAP,
    )
    rec.statement["alibi"] = tex(
        r"|\hat y - (x - b)| \le e_x + u\,b + u\,(|x| + e_x + b(1+u)),\quad b = m|t' - s| "
        r"\qquad (\lvert \hat x - x \rvert \le e_x,\ m \ge 0,\ "
        r"\hat y = \mathrm{fl}(\hat x - \mathrm{fl}(m\lvert t' - s \rvert)))",
        claim=ALIBI,
    )
    rec.statement["normalized"] = tex(
        r"|\hat x - c\,\tilde q \cdot \tilde k| \le c\bigl((1+e_q)^2(1+\gamma_d)(1+u) - 1\bigr)"
        r"\sum_i |\tilde q_i \tilde k_i|,\quad e_q = \frac{(1+u)^2}{1-e_n} - 1,\quad "
        r"e_n = \max\bigl(\sqrt{1+\gamma_d}\,(1+u) - 1,\ 1 - \sqrt{1-\gamma_d}\,(1-u)\bigr) "
        r"\qquad \bigl(\tilde q = q / \lVert q \rVert,\ \tilde k = k / \lVert k \rVert,\ "
        r"q, k \ne 0\bigr)",
        claim=NORMALIZED,
    )
    rec.statement["sigmoid"] = tex(
        r"\frac{|\hat\sigma - \sigma(x+b)|}{\sigma(x+b)} \le e^{e_a}(1+r_{\exp})(1+u)^2 - 1,"
        r"\quad e_a = e_x + u(|x| + e_x + |b|) \qquad (\lvert \hat x - x \rvert \le e_x,\ "
        r"r_{\exp} = 2 k u \text{ for an exp within } k \text{ ulps})",
        claim=SIGMOID,
    )
    rec.step(
        r"softcap: the rounded quotient $y = (\hat x / C)(1 + \delta_1)$ is within "
        r"$(e_x + u |\hat x|)/C$ of $x/C$; $\tanh$ is 1-Lipschitz, so "
        r"$C |\tanh y - \tanh(x/C)| \le e_x + u (|x| + e_x)$; the library and the product by "
        r"$C$ add $C |\tanh y| ((1 + r)(1 + u) - 1)$ with $|\tanh y| \le \min(1, |y|)$.",
    )
    rec.step(
        r"ALiBi: $\mathrm{fl}(m d) = b (1 + \delta_2)$, and the subtraction rounds once: "
        r"$|\mathrm{fl}(\hat x - \hat b) - (x - b)| \le e_x + u b + u |\hat x - \hat b|$.",
    )
    rec.step(
        r"normalized q, k: the sum of the $d$ squares has $\lvert\theta_d\rvert \le \gamma_d$ "
        r"(non-negative terms), the correctly rounded square root halves it and adds $u$, so "
        r"the computed norm is $\lVert q \rVert (1 + \epsilon)$ with "
        r"$\lvert\epsilon\rvert \le e_n$; a division (or a product with the rounded "
        r"reciprocal) gives each $\tilde q_i$ with relative error $\le e_q$; the dot product "
        r"of $d$ products and the product by $c$ multiply every term by at most "
        r"$(1 + e_q)^2 (1 + \gamma_d)(1 + u)$.",
    )
    rec.step(
        r"sigmoid: $\sigma(a + \tau) / \sigma(a) = (1 + e^{-a}) / (1 + e^{-a-\tau})$ lies in "
        r"$[e^{-\lvert\tau\rvert}, e^{\lvert\tau\rvert}]$ (numerator and denominator each "
        r"move by at most the factor $e^{\lvert\tau\rvert}$); the computed "
        r"$1 / (1 + \exp(-\hat a))$ adds the exp's relative error "
        r"$r_{\exp}$ and the addition's and the division's $u$: $1 + e^{-a}(1 + r)$ lies within "
        r"the factor $1 + r$ of $1 + e^{-a}$.",
    )
    _check_softcap(rec, f)
    _check_alibi(rec, f)
    _check_sigmoid(rec, f)
    _check_normalized(rec, f)
    rec.cite(
        "tanh within 2.5 ulps of the exact result on the CPU paths",
        TANH_ULPS.source,
        TANH_ULPS.note,
    )
    rec.exports = [
        "softcap_score_abs_error",
        "alibi_score_abs_error",
        "normalized_score_abs_error",
        "sigmoid_weight_relative_bound",
        "TANH_ULPS",
    ]
    return rec


if __name__ == "__main__":
    from derivations._record import main_for

    main_for(derive)

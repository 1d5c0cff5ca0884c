"""D16. Rounding of transformed scores: softcapping, an additive ALiBi bias, sigmoid weights.

Extends D10's score error e_x (|x_hat - x| <= e_x for the computed score x_hat of x = c q.k) to
the scores the modern forms use, so the existing weight and output bounds of D10 apply to them:

- softcap (D13): C tanh_lib(y_hat), the argument y_hat = x_hat / C computed with k roundings (1:
  a division; 2: a product with fl(1/C), or FlashAttention-2's raw score times fl(c / C)), the
  product by C rounded or folded into the exponent's scale. tanh is 1-Lipschitz, so
  |cap_hat - C tanh(x/C)| <= e_x + gamma_k (|x| + e_x) + C t ((1 + r)(1 + u)^[rounded] - 1) with
  t = min(1, (|x| + e_x)(1 + gamma_k)/C) and r the tanh's relative error (2 n u for n ulps,
  ``TANH_ULPS``; 2^-11 for tanh.approx.f32);
- ALiBi (D12): fl(x_hat -+ b_hat) with bias b = m |t' - s| (or m s, key-indexed) >= 0 computed
  with k roundings (1: fl(m |t' - s|); 2: FlashAttention-2's fl(fl(m / sigma) j)):
  |result - (x -+ b)| <= e_x + gamma_k b + u (|x| + e_x + b (1 + gamma_k));
- normalized queries and keys (cosine attention, QK-norm): x = c (q / |q|).(k / |k|) computed as
  the norm fl(sqrt(sum fl(q_i^2))) (relative error e_n <= max((1 + gamma_d)^(1/2)(1 + u) - 1,
  1 - (1 - gamma_d)^(1/2)(1 - u))), each coordinate divided by it or multiplied by its rounded
  reciprocal (e_q = (1 + u)^2 / (1 - e_n) - 1), the dot product of d terms and the product by c:
  |x_hat - x| <= c ((1 + e_q)^2 (1 + gamma_d)(1 + u) - 1) sum_i |q_i k_i| / (|q| |k|) (at most
  c ((1 + e_q)^2 (1 + gamma_d)(1 + u) - 1) by Cauchy-Schwarz);
- sigmoid weight (D14): sigma_lib(fl(x_hat + b)) = 1 / (1 + exp_lib(-a_hat)): with
  |a_hat - a| <= e_a = e_x + u (|x| + e_x + |b|), sigma(a_hat) / sigma(a) lies in
  [e^(-e_a), e^(e_a)]; 1 + exp_lib(-a_hat) is (1 + e^(-a_hat))(1 + rho) with |rho| <= r_exp, and
  the addition and the division round once each, so the relative weight error is
  <= e^(e_a) (1 + u) / ((1 - r_exp)(1 - u)) - 1, while the weight is a normal number
  (sigma(a_hat) >= lambda, the smallest normal; then exp(-a_hat) <= 1/lambda is finite too).

Each bound is checked on instances in a toy binary format (11-bit significands, exact rational
arithmetic, tanh and exp evaluated in float64 and rounded: 0.51 ulp; approximate functions at the
edge of their cited band, adversarially), with its largest observed/bound ratio stated (not
vacuous) and a twin that drops a term and is exceeded.

Numeric exports: ``softcap_score_abs_error``, ``alibi_score_abs_error``,
``normalized_score_abs_error``, ``sigmoid_weight_relative_bound``, ``sigmoid_limits`` (the
range of the sigmoid bound in a format), ``TANH_ULPS``.
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
    score_low=None,
):
    """Bound on |C tanh_lib(y_hat) - C tanh(x / C)| for the capped score, given |x_hat - x| <= e_x
    (D16; floats or numpy arrays, elementwise).

    The argument y_hat = x_hat / C is computed with ``argument_roundings`` k roundings (1: a
    division; 2: a product with fl(1/C), or FlashAttention-2's raw score times fl(c / C)), so
    |y_hat - x / C| <= delta = (e_x + gamma_k (|x| + e_x)) / C. tanh' = sech^2 is even and
    decreasing in |y|, so by the mean value theorem |tanh y_hat - tanh(x / C)| <= delta
    sech^2(max(0, l / C - delta)) for any l <= |x| (``score_low``; none: l = 0, sech^2 = 1, the
    1-Lipschitz bound). A saturated cap thus carries almost none of the argument's error. The
    library's tanh has relative error r (``tanh_rel``, else 2 ``tanh_ulps`` u); the product by
    C rounds once more unless it is folded into the exponent's scale (``product_rounded=False``):

        (e_x + gamma_k (|x| + e_x)) sech^2(max(0, l / C - delta))
            + C t ((1 + r)(1 + u)^[product] - 1),   t = min(1, (|x| + e_x)(1 + gamma_k) / C).

    Args:
        score_abs_error: e_x >= 0. score_abs: a bound on |x|. cap: C > 0. u: unit roundoff of
            the arithmetic. tanh_ulps: the library's ulps from the exact result. score_low: a
            lower bound l >= 0 on the exact |x| (None: 0).

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
    arg = e + g * (a + e)
    if score_low is not None:
        low = check_real("score_low", score_low, nonneg=True, array_ok=True)
        z = low / c - arg / c
        # z's own float64 roundings (two divisions, a subtraction) lowered away: sech^2 is
        # decreasing, so a smaller z gives a larger, still valid, factor
        z = z - 4 * 2.0**-53 * (low / c + arg / c + np.abs(z))
        arg = arg * sech2_upper(np.maximum(0.0, z))
    return _result(arg + c * tanh_abs * ((1.0 + r) * prod - 1.0))


def sech2_upper(z):
    """An upper bound on sech^2(z) = 1 - tanh(z)^2 for z >= 0 (floats or arrays): 1 / cosh(z)^2
    evaluated in float64 and raised by 16 units of float64 for its own rounding; never below
    the smallest normal float64 (where cosh overflows the true value is below 1e-300, which
    the tanh term's C u dominates)."""
    with np.errstate(over="ignore"):
        ch = np.cosh(np.asarray(z, dtype=np.float64))
        out = np.maximum((1.0 + 16 * 2.0**-53) / (ch * ch), np.finfo(np.float64).tiny)
    return np.minimum(out, 1.0) if out.ndim else float(min(out, 1.0))


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
    """Relative error of sigma_lib(fl(x_hat + b)) = 1/(1 + exp(-a_hat)) against sigma(x + b) (D16):

        e^(e_a) (1 + u) / ((1 - r)(1 - u)) - 1,  e_a = e_x + u (|x| + e_x + |b|),  r = 2 k u,

    valid while the computed weight is a normal number (sigma(a_hat) >= the smallest normal).

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
    grown = np.exp(np.minimum(e_a, 700.0)) * (1.0 + u) / ((1.0 - r) * (1.0 - u)) - 1.0
    return _result(np.where(e_a > 700, math.inf, grown))


# -- the record: checks on a toy format -----------------------------------------------------------
def _rnd(x) -> Fraction:
    return round_to_bits(Fraction(x), P_TOY)


def _lib(fn, x) -> Fraction:
    """A float64 library function of a toy number, rounded to the toy format."""
    return _rnd(Fraction(fn(float(x))))


def _spacing(a: Fraction, bits: int = P_TOY) -> Fraction:
    """The spacing of the ``bits``-bit grid in the binade of ``a`` > 0 (one ulp there)."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    return Fraction(2) ** (e - bits + 1)


def _directed(x: Fraction, up: bool, bits: int = P_TOY) -> Fraction:
    """``x`` rounded up (toward +inf) or down on the ``bits``-bit grid (unbounded exponent)."""
    if x == 0:
        return x
    a = abs(x)
    step = _spacing(a, bits)
    lo = (a // step) * step
    hi = lo if lo == a else lo + step
    if x > 0:
        return hi if up else lo
    return -lo if up else -hi


def _within(exact: Fraction, radius: Fraction, up: bool, bits: int = P_TOY) -> Fraction:
    """An adversarial library result: the grid number farthest from ``exact`` on the side
    ``up`` with |result - exact| <= ``radius``; the nearest grid number if the band holds no
    other."""
    y = _directed(exact + radius if up else exact - radius, not up, bits)
    return y if abs(y - exact) <= radius else round_to_bits(exact, bits)


def _frac(v) -> Fraction:
    """An mpmath number as the exact Fraction it is (``_mpf_`` = sign, mantissa, exponent)."""
    import mpmath

    sign, man, exp, _ = mpmath.mpf(v)._mpf_
    return (-1) ** sign * Fraction(int(man)) * Fraction(2) ** int(exp)


def _mp(x: Fraction):
    import mpmath

    return mpmath.mpf(x.numerator) / x.denominator


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
                exact = cap * mpmath.tanh(_mp(x) / float(cap))
                err = float(abs(_mp(got) - exact))
            bound = f["softcap"](e_x, float(abs(x)), float(cap), U_TOY, TOY_ULPS)
            ratios.append(err / bound if bound else 0.0)
            ok = ok and err <= bound
    rec.tables["softcap_toy"] = (["instances", "max observed/bound"], [[len(ratios), max(ratios)]])
    rec.verify(
        SOFTCAP,
        lambda: ok and max(ratios) > 0.05,
        f"900 instances, C in (1/2, 5, 30), |x| <= 3C, the argument a division (k = 1); max "
        f"observed/bound {max(ratios):.3f}",
    )


def _check_softcap_product(rec, f) -> None:
    """fl(C tanh(fl(x_hat fl(1/C)))): two roundings of the argument."""
    import mpmath

    rng = random.Random(161)
    ratios, twin_ratios, ok = [], [], True
    for cap in (Fraction(1, 2), Fraction(5), Fraction(30), Fraction(53)):
        inv = _rnd(1 / cap)
        for x, x_hat, e_x in _instances(rng, 250, 3 * float(cap)):
            got = _rnd(cap * _lib(math.tanh, _rnd(x_hat * inv)))
            with mpmath.workdps(40):
                err = float(abs(_mp(got) - cap * mpmath.tanh(_mp(x) / float(cap))))
            args = (e_x, float(abs(x)), float(cap), U_TOY, TOY_ULPS)
            bound = f["softcap"](*args, argument_roundings=2)
            twin = softcap_score_abs_error(*args, argument_roundings=1)
            ratios.append(err / bound if bound else 0.0)
            twin_ratios.append(err / twin if twin else 0.0)
            ok = ok and err <= bound
    worst, twin_worst = max(ratios), max(twin_ratios)
    rec.tables["softcap_product_toy"] = (
        ["instances", "max observed/bound (k = 2)", "max observed/(k = 1 bound)"],
        [[len(ratios), worst, twin_worst]],
    )
    rec.verify(
        SOFTCAP_PRODUCT,
        lambda: ok and worst > 0.05 and twin_worst > 1.0,
        f"{len(ratios)} instances, C in (1/2, 5, 30, 53), |x| <= 3C, the argument "
        f"fl(x_hat fl(1/C)) (k = 2); max observed/bound {worst:.3f}; the k = 1 statement is "
        f"exceeded by the factor {twin_worst:.3f}",
    )


#: the toy's tanh.approx: relative error 2^-6 = 32 u_toy (float32's 2^-11 is 2^13 u, beyond any
#: toy's reach; what is kept is that the tanh's error dominates every rounding), and 2^-9 = 4 u
TOY_TANH_RELS = (2.0**-6, 2.0**-9)


def _check_softcap_flash(rec, f) -> None:
    """FlashAttention-2: t = tanh_approx(fl(x_raw fl(c / C))), the cap C t folded (exact)."""
    import mpmath

    rng = random.Random(162)
    ratios, ok = [], True
    exceeded = {"ulps": False, "k1": False}
    n = 0
    for cap in (Fraction(5), Fraction(30), Fraction(50)):
        for d in (16, 64, 128):
            c = _rnd(Fraction(d**-0.5))
            q = _rnd(c / cap)  # params.softcap = softmax_scale / softcap, in float
            rel = TOY_TANH_RELS[n % 2]
            for raw, raw_hat, e_raw in _instances(rng, 60, 3 * float(cap / c)):
                y = _rnd(raw_hat * q)
                with mpmath.workprec(200):
                    t_exact = _frac(mpmath.tanh(_mp(y)))
                    target = cap * mpmath.tanh(_mp(c * raw / cap))
                    err = max(
                        abs(_mp(cap * _within(t_exact, Fraction(rel) * abs(t_exact), up)) - target)
                        for up in (True, False)
                    )
                    err = float(err)
                args = (float(c) * e_raw, float(abs(c * raw)), float(cap), U_TOY, TOY_ULPS)
                kw = {"tanh_rel": rel, "product_rounded": False}
                bound = f["softcap"](*args, argument_roundings=2, **kw)
                ok = ok and err <= bound
                ratios.append(err / bound if bound else 0.0)
                ulps_twin = softcap_score_abs_error(*args, argument_roundings=2)
                exceeded["ulps"] = exceeded["ulps"] or err > ulps_twin
                k1_twin = softcap_score_abs_error(*args, argument_roundings=1, **kw)
                exceeded["k1"] = exceeded["k1"] or err > k1_twin
            n += 1
    worst = max(ratios)
    rec.tables["softcap_flash_toy"] = (
        [
            "instances",
            "max observed/bound",
            "tanh at the library's ulps: exceeded",
            "k = 1: exceeded",
        ],
        [[len(ratios), worst, exceeded["ulps"], exceeded["k1"]]],
    )
    rec.verify(
        SOFTCAP_FLASH,
        lambda: ok and worst > 0.05 and exceeded["ulps"],
        f"{len(ratios)} instances, C in (5, 30, 50), c = 1/sqrt(d) for d in (16, 64, 128), raw "
        f"scores |x/c| <= 3C/c: the argument fl(x_raw fl(c/C)) (k = 2), tanh.approx emulated at "
        f"the edge of a relative error r in (2^-6, 2^-9) (float32's 2^-11 is 2^13 u; the toy "
        f"keeps r >> u), C t exact (folded into the exponent's scale); max observed/bound "
        f"{worst:.3f}; twins exceeded: the library's {TOY_ULPS} ulps in place of r: "
        f"{exceeded['ulps']}; k = 1: {exceeded['k1']}",
    )


def _slope_at_score(kw: dict, e_x: float, a: float) -> dict:
    """The faulty twin's keywords: the slope taken at |x| / C, not at the interval's end nearest
    0 (``score_low`` raised by the argument's error, so sech^2 is evaluated at l / C)."""
    g = gamma(kw.get("argument_roundings", 1), U_TOY)
    return {**kw, "score_low": kw["score_low"] + e_x + g * (a + e_x)}


def _check_softcap_saturated(rec, f) -> None:
    """The local Lipschitz constant: |x| up to 8C, argument errors up to C/4, the computed
    score moved toward 0 (where tanh is steeper) or away."""
    import mpmath
    import sympy as sp

    y = sp.Symbol("y", real=True)
    rec.prove(
        SOFTCAP_SLOPE,
        lambda: (
            sp.simplify(sp.diff(sp.tanh(y), y) - (1 - sp.tanh(y) ** 2)) == 0
            and sp.simplify(
                sp.diff(1 - sp.tanh(y) ** 2, y) + 2 * sp.tanh(y) * (1 - sp.tanh(y) ** 2)
            )
            == 0
        ),
        "symbolic: tanh' = 1 - tanh^2 = sech^2 (even), (sech^2)' = -2 tanh sech^2 <= 0 for "
        "y >= 0, so sech^2 is largest at the point of an interval nearest 0",
    )
    rng = random.Random(163)
    ratios, ok, twin_exceeded = [], True, False
    for cap in (Fraction(5), Fraction(30), Fraction(50)):
        for _ in range(300):
            x = Fraction(rng.uniform(-8, 8)) * cap
            shift = Fraction(rng.uniform(0, 0.25)) * cap * (-1 if rng.random() < 0.7 else 1)
            x_hat = _rnd(x - shift if x > 0 else x + shift)  # toward 0 mostly
            e_x = float(abs(x_hat - x)) * (1 + 1e-12)
            a = float(abs(x))
            low = a * (1 - 2.0**-52)  # a lower bound on |x| (float(|x|) may round up)
            flash = len(ratios) % 2 == 1  # FlashAttention-2's: k = 2, tanh.approx, C folded
            with mpmath.workprec(200):
                exact = cap * mpmath.tanh(_mp(x) / float(cap))
                if flash:
                    t_exact = _frac(mpmath.tanh(_mp(_rnd(x_hat * _rnd(1 / cap)))))
                    rel = TOY_TANH_RELS[1]
                    err = max(
                        float(abs(_mp(cap * _within(t_exact, Fraction(rel) * abs(t_exact), up))
                                  - exact))
                        for up in (True, False)
                    )  # fmt: skip
                else:
                    got = _rnd(cap * _lib(math.tanh, _rnd(x_hat / cap)))
                    err = float(abs(_mp(got) - exact))
            kw = {"score_low": low}
            if flash:
                kw.update(argument_roundings=2, tanh_rel=rel, product_rounded=False)
            bound = f["softcap"](e_x, a, float(cap), U_TOY, TOY_ULPS, **kw)
            ok = ok and err <= bound
            ratios.append(err / bound if bound else 0.0)
            twin = softcap_score_abs_error(
                e_x, a, float(cap), U_TOY, TOY_ULPS, **_slope_at_score(kw, e_x, a)
            )
            twin_exceeded = twin_exceeded or err > twin
    _verify_with_twin(
        rec, "softcap_saturated_toy", SOFTCAP_SATURATED, ratios, ok,
        "slope at |x|/C: exceeded", twin_exceeded,
        lambda worst: f"{len(ratios)} instances, C in (5, 30, 50), |x| <= 8C, |x_hat - x| <= "
        f"C/4 (70% toward 0), score_low = |x|; half as a division with the library's tanh and a "
        f"rounded product by C, half as FlashAttention-2 computes it (fl(x_hat fl(1/C)), k = 2, "
        f"tanh.approx at the edge of r = 2^-9, C folded); max observed/bound {worst:.3f}; the "
        f"twin with the slope taken at |x|/C is exceeded: {twin_exceeded}",
    )  # fmt: skip


def _verify_with_twin(rec, table: str, claim: str, ratios, ok: bool, twin_label: str,
                      twin_exceeded: bool, detail) -> None:  # fmt: skip
    """A toy check's table (instances, max observed/bound, whether the faulty twin was
    exceeded) and its claim: the bound held, is not vacuous (max ratio > 0.05) and the twin
    was exceeded; ``detail(worst)`` the claim's text."""
    worst = max(ratios)
    rec.tables[table] = (
        ["instances", "max observed/bound", twin_label],
        [[len(ratios), worst, twin_exceeded]],
    )
    rec.verify(claim, lambda: ok and worst > 0.05 and twin_exceeded, detail(worst))


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
        f"600 instances, |x| <= 20, slopes 2^-8..7/4, distances to 4000, the bias fl(m d) (k = "
        f"1); max observed/bound {max(ratios):.3f}",
    )


def _check_alibi_flash(rec, f) -> None:
    """FlashAttention-2: x_raw + fl(fl(m / sigma) j) on causal rows (key index j; the integer j
    is exact in float32 up to 2^24), the addition rounded or contracted into one FMA."""
    rng = random.Random(121)
    ratios, ok, twin_exceeded = [], True, False
    for x, x_hat, e_x in _instances(rng, 600, 20.0):
        m = _rnd(Fraction(2) ** -rng.randint(0, 8) * Fraction(rng.randint(1, 7), 4))
        sigma = _rnd(Fraction(rng.choice((16, 64, 80, 128)) ** -0.5))
        slope = _rnd(m / sigma)  # alibi_slope / params.scale_softmax, in float
        j = rng.randint(0, 4000)
        b = m / sigma * j
        got = (_rnd(x_hat + _rnd(slope * j)), _rnd(x_hat + slope * j))  # rounded or FMA
        err = max(float(abs(g - (x + b))) for g in got)
        bound = f["alibi"](e_x, float(abs(x)), float(b), U_TOY, bias_roundings=2)
        twin = alibi_score_abs_error(e_x, float(abs(x)), float(b), U_TOY, bias_roundings=1)
        ratios.append(err / bound if bound else 0.0)
        ok = ok and err <= bound
        twin_exceeded = twin_exceeded or err > twin
    _verify_with_twin(
        rec, "alibi_flash_toy", ALIBI_FLASH, ratios, ok, "k = 1: exceeded", twin_exceeded,
        lambda worst: f"600 instances, raw |x| <= 20, slopes 2^-8..7/4 over sigma = 1/sqrt(d), "
        f"key indices j to 4000 (exact integers), the bias fl(fl(m/sigma) j) added (k = 2) or "
        f"fl(m/sigma) j contracted into one FMA; max observed/bound {worst:.3f}; the k = 1 bound "
        f"is exceeded: {twin_exceeded}",
    )  # fmt: skip


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
            exact = 1 / (1 + mpmath.exp(-_mp(x + b)))
            err = float(abs(_mp(got) - exact) / exact)
        bound = f["sigmoid"](e_x, float(abs(x)), float(b), U_TOY, TOY_ULPS)
        ratios.append(err / bound)
        ok = ok and err <= bound
    rec.tables["sigmoid_toy"] = (["instances", "max observed/bound"], [[len(ratios), max(ratios)]])
    rec.verify(
        SIGMOID,
        lambda: ok and max(ratios) > 0.05,
        f"600 instances, |x| <= 12, b in [-6, 2]; max observed/bound {max(ratios):.3f}",
    )


def sigmoid_limits(dtype_name: str) -> tuple[float, float]:
    """(lower, overflow) of the sigmoid bound in a format: sigma(a) >= lambda (the smallest
    normal number) for a >= lower = -log(1/lambda - 1) (about log lambda), and exp(-a)
    overflows for a < overflow = -log(Omega), Omega the largest finite number (D16's range).
    float32: (-87.34, -88.72).

    Raises:
        TypeError, ValueError: an unknown dtype name.
    """
    from derivations.rounding import largest_finite, precision_bits, underflow_abs_error_log2

    lam = 2.0 ** (underflow_abs_error_log2(dtype_name) + precision_bits(dtype_name))
    return -math.log(1.0 / lam - 1.0), -math.log(largest_finite(dtype_name))


def _check_sigmoid_range(rec, f) -> None:
    """The range condition, shown in float32 with numpy: below ``overflow`` the computed weight
    is 0 (relative error 1), between the two it is subnormal, above ``lower`` normal."""
    from derivations.rounding import FORMATS, LIBRARY_EXP_ULPS, largest_finite, unit_roundoff

    lower, overflow = f["sigmoid_limits"]("float32")
    u32, lam = unit_roundoff("float32"), float(np.finfo(np.float32).tiny)

    def sig(a: float) -> float:
        with np.errstate(over="ignore"):
            x = np.float32(a)
            return float(np.float32(1) / (np.float32(1) + np.exp(-x)))

    below, between, above = overflow - 0.05, (overflow + lower) / 2, lower + 0.05
    exact = 1 / (1 + math.exp(-below))
    bound = sigmoid_weight_relative_bound(
        0.0, abs(below), 0.0, u32, LIBRARY_EXP_ULPS["cpu-glibc"].value
    )
    fails_below = sig(below) == 0.0 and abs(sig(below) - exact) / exact > bound
    subnormal = 0.0 < sig(between) < lam
    normal = sig(above) >= lam
    # 1/lambda = 2^(-emin) = 2^(2^(e-1) - 2) for e exponent bits
    implied = all(2.0 ** (2 ** (e - 1) - 2) < largest_finite(n) for n, (_, e) in FORMATS.items())
    rec.tables["sigmoid_range"] = (
        ["format", "weight normal for a >=", "exp(-a) overflows for a <"],
        [[name, *(round(v, 3) for v in sigmoid_limits(name))] for name in FORMATS],
    )
    rec.verify(
        SIGMOID_RANGE,
        lambda: fails_below and subnormal and normal and implied and lower > overflow,
        f"float32 (numpy): at a = {below:.2f} the weight is 0 and the bound without the range "
        f"condition is exceeded: {fails_below}; at {between:.2f} it is subnormal: {subnormal}; at "
        f"{above:.2f} normal: {normal}; 1/lambda < Omega in the four formats (a normal weight "
        f"keeps exp(-a) finite): {implied}",
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
SOFTCAP_PRODUCT = "softcap bound, argument fl(x_hat fl(1/C)) with k = 2 (toy format, p = 11)"
SOFTCAP_SLOPE = "tanh's slope sech^2 is even and decreasing in |y|"
SOFTCAP_SATURATED = "softcap bound with a lower bound on |x|: the local slope (toy format, p = 11)"
SOFTCAP_FLASH = "softcap bound, FlashAttention-2's argument, tanh.approx, cap folded (toy)"
NORMALIZED = "normalized q, k score error bound (toy format, p = 11)"
ALIBI = "ALiBi score error bound (toy format, p = 11)"
ALIBI_FLASH = "ALiBi bound, FlashAttention-2's key-indexed fl(fl(m/sigma) j), k = 2 (toy)"
SIGMOID = "sigmoid weight relative error bound (toy format, p = 11)"
SIGMOID_RANGE = "sigmoid bound's range: the weight normal, exp(-a) finite (float32)"


def _statements(rec) -> None:
    from derivations._latex import tex

    lower, overflow = sigmoid_limits("float32")
    rec.statement["softcap"] = tex(
        r"|\widehat{\operatorname{cap}} - C\tanh(x/C)| \le (e_x + \gamma_k(|x| + e_x))\,"
        r"\operatorname{sech}^2\!\bigl(\max(0, \tfrac{\ell - e_x - \gamma_k(|x| + e_x)}{C})"
        r"\bigr) + "
        r"C \min\!\bigl(1, \tfrac{(|x|+e_x)(1+\gamma_k)}{C}\bigr)\bigl((1+r)(1+u)^{\pi} - 1"
        r"\bigr) \qquad \bigl(\lvert \hat x - x \rvert \le e_x,\ C > 0,\ u \text{ the unit "
        r"roundoff},\ k \text{ roundings of the argument } \hat x / C\ (1\text{: a division; "
        r"2: a product with } \mathrm{fl}(1/C) \text{ or } \mathrm{fl}(c/C)),\ r \text{ the "
        r"tanh's relative error } (2 n u \text{ within } n \text{ ulps}),\ \pi = 1 \text{ if "
        r"the product by } C \text{ is rounded, } 0 \text{ if folded into the exponent's "
        r"scale},\ \ell \le |x| \text{ a lower bound } (0\text{: the 1-Lipschitz bound})"
        r"\bigr)",
        claim=SOFTCAP_SATURATED,
    )
    rec.statement["alibi"] = tex(
        r"|\hat y - (x \pm b)| \le e_x + \gamma_k b + u\,(|x| + e_x + b(1+\gamma_k)),\quad "
        r"b = m|t' - s| \text{ or } m\,s \qquad (\lvert \hat x - x \rvert \le e_x,\ m \ge 0,"
        r"\ \hat y = \mathrm{fl}(\hat x \pm \hat b),\ \hat b = b(1 + \theta_k),\ "
        r"\lvert\theta_k\rvert \le \gamma_k:\ k = 1 \text{ for } \mathrm{fl}(m\lvert t' - s "
        r"\rvert),\ k = 2 \text{ for } \mathrm{fl}(\mathrm{fl}(m/\sigma)\,s))",
        claim=ALIBI_FLASH,
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
        r"\frac{|\hat\sigma - \sigma(x+b)|}{\sigma(x+b)} \le e^{e_a}\,"
        r"\frac{1+u}{(1-r_{\exp})(1-u)} - 1,\quad e_a = e_x + u(|x| + e_x + |b|) \qquad "
        r"(\lvert \hat x - x \rvert \le e_x,\ r_{\exp} = 2 k u \text{ for an exp within } k "
        r"\text{ ulps},\ \sigma(\hat a) \ge \lambda \text{ the smallest normal number: in "
        r"float32 } \hat a \ge " + f"{lower:.2f}" + r"\text{; } e^{-\hat a} \text{ overflows "
        r"below } " + f"{overflow:.2f}" + ")",
        claim=SIGMOID,
    )


def _steps(rec) -> None:
    lower, overflow = sigmoid_limits("float32")
    rec.step(
        r"softcap: the argument $y = (\hat x / C)(1 + \theta_k)$, $|\theta_k| \le \gamma_k$ "
        r"(one rounding for $\mathrm{fl}(\hat x / C)$; two for $\mathrm{fl}(\hat x\,"
        r"\mathrm{fl}(1/C))$ and for FlashAttention-2's raw score times $\mathrm{fl}(c/C)$), "
        r"is within $\delta = (e_x + \gamma_k (|x| + e_x))/C$ of $x/C$; $\tanh' = "
        r"\operatorname{sech}^2$ is even and decreasing in $|y|$, so by the mean value theorem "
        r"$C |\tanh y - \tanh(x/C)| \le C\delta\,\operatorname{sech}^2(\max(0, \ell/C - "
        r"\delta))$ for any $\ell \le |x|$ ($\ell = 0$: the 1-Lipschitz bound; a saturated "
        r"cap, $|x| \gg C$, passes almost none of the argument's error on; with the slope "
        r"taken at $|x|/C$ the bound is exceeded, table softcap_saturated_toy); the tanh's "
        r"relative error "
        r"$r$ and the product by $C$ (when it is rounded) add $C |\tanh y| ((1 + r)(1 + u) - 1)$ "
        r"with $|\tanh y| \le \min(1, |y|)$. With $k = 1$ in place of 2 the bound is "
        r"exceeded (table softcap_product_toy)."
    )
    rec.step(
        r"ALiBi: $\hat b = b (1 + \theta_k)$ with $k = 1$ for $\mathrm{fl}(m d)$ and $k = 2$ for "
        r"$\mathrm{fl}(\mathrm{fl}(m/\sigma)\,s)$ (the key index $s$ an exact integer), and the "
        r"addition rounds once: $|\mathrm{fl}(\hat x \pm \hat b) - (x \pm b)| \le e_x + "
        r"\gamma_k b + u |\hat x \pm \hat b|$. An FMA of $\hat x + \mathrm{fl}(m/\sigma)\,s$ "
        r"rounds once less and stays within the same bound."
    )
    rec.step(
        r"normalized q, k: the sum of the $d$ squares has $\lvert\theta_d\rvert \le \gamma_d$ "
        r"(non-negative terms), the correctly rounded square root halves it and adds $u$, so "
        r"the computed norm is $\lVert q \rVert (1 + \epsilon)$ with "
        r"$\lvert\epsilon\rvert \le e_n$; a division (or a product with the rounded "
        r"reciprocal) gives each $\tilde q_i$ with relative error $\le e_q$; the dot product "
        r"of $d$ products and the product by $c$ multiply every term by at most "
        r"$(1 + e_q)^2 (1 + \gamma_d)(1 + u)$."
    )
    rec.step(
        r"sigmoid: $\sigma(a + \tau) / \sigma(a) = (1 + e^{-a}) / (1 + e^{-a-\tau})$ lies in "
        r"$[e^{-\lvert\tau\rvert}, e^{\lvert\tau\rvert}]$ (numerator and denominator each "
        r"move by at most the factor $e^{\lvert\tau\rvert}$). With $E = e^{-\hat a}$ and "
        r"$|\rho| \le r$, $1 + E(1 + \rho) = (1 + E)(1 + \rho E/(1 + E))$, a factor in "
        r"$[1 - r, 1 + r]$; dividing by it gives a factor in $[1/(1 + r), 1/(1 - r)]$, and the "
        r"addition and the division give one in $[(1 - u)/(1 + u), (1 + u)/(1 - u)]$: the "
        r"largest relative error is $e^{e_a}(1 + u)/((1 - r)(1 - u)) - 1$ (the factor "
        r"$1/(1 - r)$, not $1 + r$)."
    )
    rec.step(
        r"sigmoid range: the division's relative error $u$ holds for a normal result, "
        r"$\sigma(\hat a) \ge \lambda$, i.e. $\hat a \ge -\log(1/\lambda - 1)$; then "
        r"$e^{-\hat a} \le 1/\lambda$, finite as $1/\lambda < \Omega$ (the largest finite "
        r"number) in the four formats. In float32 ($\lambda = 2^{-126}$) that is $\hat a \ge "
        + f"{lower:.2f}"
        + r"$; for $\hat a$ between "
        + f"{overflow:.2f}"
        + r" $= -\log \Omega$ and "
        + f"{lower:.2f}"
        + r" the weight is subnormal, below it $e^{-\hat a}$ overflows and the weight is 0."
    )


def derive(**wrong) -> Derivation:
    """Build the D16 record: rounding of capped, biased and sigmoid scores.

    Keyword overrides (wrong-statement tests): ``softcap``, ``alibi``, ``sigmoid``,
    ``normalized`` (callables replacing the exported bounds; ``softcap`` is also called with
    ``argument_roundings``, ``tanh_rel`` and ``product_rounded``, ``alibi`` with
    ``bias_roundings``: an override ignoring them is the k = 1 statement) and
    ``sigmoid_limits`` (replacing :func:`sigmoid_limits`).

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
            "sigmoid_limits": sigmoid_limits,
        },
    )
    rec = Derivation(
        "D16", "Rounding of transformed scores: softcap, ALiBi bias, normalized q and k, sigmoid"
    )
    _statements(rec)
    _steps(rec)
    _check_softcap(rec, f)
    _check_softcap_product(rec, f)
    _check_softcap_flash(rec, f)
    _check_softcap_saturated(rec, f)
    _check_alibi(rec, f)
    _check_alibi_flash(rec, f)
    _check_sigmoid(rec, f)
    _check_sigmoid_range(rec, f)
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
        "sigmoid_limits",
        "TANH_ULPS",
    ]
    return rec


if __name__ == "__main__":
    from derivations._record import main_for

    main_for(derive)

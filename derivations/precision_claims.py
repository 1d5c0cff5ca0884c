"""The D10 claims of the precision models (``derivations.precision_models``).

Called by ``derivations.rounding_record.derive`` after the two-level model. Each model's forward
bound is checked on instances computed in exact rational arithmetic in a pair of toy binary
formats (inputs and stored intermediates with p_in = 5 bits, accumulation with p_acc = 11 bits,
``round_to_bits``), and each has a faulty twin (one more rounding at a named place) that the
bound must reject on some instance; the summation lemmas and the bias statistic likewise.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

from derivations import precision_models as pm
from derivations._latex import tex
from derivations.rounding import (
    gamma,
    kernel_attention_output_bound,
    round_to_bits,
    softmax_weight_relative_bound,
    weighted_sum_relative_bound,
)

P_IN, P_ACC = 5, 11
U_IN, U_ACC = 2.0**-P_IN, 2.0**-P_ACC
#: exp evaluated in float64 and rounded to p_acc bits: 0.5 ulp plus float64's own error
TOY_EXP_ULPS = 0.51


def _acc(x):
    return round_to_bits(Fraction(x), P_ACC)


def _in(x):
    return round_to_bits(Fraction(x), P_IN)


def _exp(x) -> Fraction:
    return _acc(Fraction(math.exp(float(x))))


def _rsum(terms, rnd) -> Fraction:
    acc = Fraction(0)
    for t in terms:
        acc = rnd(acc + t)
    return acc


def _row(rng: random.Random, n: int, spread: float):
    """Scores in the accumulation format (|x| <= spread; the kernel computed them) and values in
    the input format."""
    x = [_acc(Fraction(rng.uniform(-spread, spread))) for _ in range(n)]
    v = [_in(Fraction(rng.uniform(-1, 1))) for _ in range(n)]
    return x, v


def _fused(x, v, block: int | None = None, scores_rounded: bool = False) -> Fraction:
    """fused / online:block in the toy formats (``verify.attention.lowprec.fused_attention``)."""
    x = [_in(s) for s in x] if scores_rounded else x
    b = block or len(x)
    m, l_sum, acc = None, Fraction(0), Fraction(0)
    for j in range(0, len(x), b):
        xs, vs = x[j : j + b], v[j : j + b]
        m_new = max(xs) if m is None else max(m, max(xs))
        alpha = Fraction(0) if m is None else _exp(_acc(m - m_new))
        p = [_exp(_acc(s - m_new)) for s in xs]
        l_sum = _acc(_acc(alpha * l_sum) + _rsum(p, _acc))
        acc = _acc(_acc(alpha * acc) + _rsum([_acc(_in(pi) * vi) for pi, vi in zip(p, vs)], _acc))
        m = m_new
    return _in(_acc(acc / l_sum))


def _eager(x, v) -> Fraction:
    xs = [_in(s) for s in x]
    m = max(xs)
    e = [_exp(_acc(s - m)) for s in xs]
    total = _rsum(e, _acc)
    p = [_in(_acc(ei / total)) for ei in e]
    return _in(_rsum([_acc(pi * vi) for pi, vi in zip(p, v)], _acc))


def _bound(x, v, model: str, block: int | None = None) -> tuple[float, float]:
    """(bound, |o|) of the model in the toy formats, from the D10 lemmas (scores exact)."""
    xf, vf = [float(s) for s in x], [float(t) for t in v]
    m = max(xf)
    w = [math.exp(s - m) for s in xf]
    D = sum(w)
    A = sum(wi * abs(vi) for wi, vi in zip(w, vf))
    o = abs(sum(wi * vi for wi, vi in zip(w, vf)) / D)
    n = len(xf)
    shift = max(m - s for s in xf)
    if model == "eager":
        e_x = U_IN * max(abs(s) for s in xf)  # one rounding of each score to the input format
        e_w = softmax_weight_relative_bound(e_x, shift + e_x, U_ACC, TOY_EXP_ULPS)
        den_rel = weighted_sum_relative_bound(n, e_w, U_ACC, False)
        e_p = pm.eager_weight_rel(e_w, den_rel, U_ACC, U_IN)
        acc = ((1 + e_p) * (1 + gamma(n, U_ACC)) - 1) * A / D
    else:
        e_w = softmax_weight_relative_bound(0.0, shift, U_ACC, TOY_EXP_ULPS)
        if block:
            nb = math.ceil(n / block)
            e_w = (1 + e_w) * (1 + pm.online_rescale_rel(nb, shift, U_ACC, TOY_EXP_ULPS)) - 1
        # a term's path in the blocked sums: <= b - 1 additions in its block, then one per
        # block joined: b - 1 + ceil(n/b) <= n (equality at b = 1 and b = n), so gamma_n as
        # the unblocked sum (``verify.exact.models`` uses the same length)
        k = n
        num_rel = weighted_sum_relative_bound(k, pm.fused_numerator_weight_rel(e_w, U_IN), U_ACC)
        den_rel = weighted_sum_relative_bound(k, e_w, U_ACC, False)
        acc = kernel_attention_output_bound(
            num_rel=num_rel, den_rel=den_rel, abs_numerator=A, abs_denominator=D,
            denominator=D, output_abs=o, div_rel=U_ACC,
        )  # fmt: skip
    return acc * (1 + U_IN) + U_IN * o, o


def _instances(model: str, twin: bool, spread: float, seed: int = 7, count: int = 120):
    """max observed/bound over random rows of 2..16 keys in the toy formats."""
    rng = random.Random(seed)
    worst = 0.0
    for _ in range(count):
        x, v = _row(rng, rng.randint(2, 16), spread)
        if model == "eager":
            out = _eager(x, v)
        else:
            out = _fused(x, v, 4 if model == "online" else None, scores_rounded=twin)
        xf, vf = [float(s) for s in x], [float(t) for t in v]
        m = max(xf)
        w = [math.exp(s - m) for s in xf]
        exact = sum(wi * vi for wi, vi in zip(w, vf)) / sum(w)
        bound, _ = _bound(x, v, model, 4 if model == "online" else None)
        worst = max(worst, abs(float(out) - exact) / bound)
    return worst


def _model_claim(model: str) -> str:
    """Name of the claim that checks ``model``'s forward bound on toy-format instances."""
    return (
        f"instances: the {model} model's forward bound holds (toy formats p_in = {P_IN}, "
        f"p_acc = {P_ACC}, exact rational rounding) and is not vacuous"
    )


def claim_precision_models(rec) -> None:
    """Steps and checked claims of the fused, online, eager and input-type-accumulation models."""
    import sympy as sp

    e, ui, ua, R, nb = sp.symbols("e u_in u_acc R n_b", nonnegative=True)
    rec.step(
        "Fused model (FlashAttention-2, Algorithm 1; PyTorch's CPU flash kernel): the weights "
        r"$P = \exp(s - m)$ are stored in the input type before $P V$, the row sum is "
        r"accumulated from the fp32 weights. With $e$ the fp32 weight error, the numerator's "
        "weight error is therefore",
        tex(
            r"e_{\mathrm{num}} = @e \qquad (e \ge \lvert \hat{P}_{\mathrm{fp32}} / P - 1 \rvert)",
            claim=_model_claim("fused"),
            e=(1 + e) * (1 + ui) - 1,
        ),
    )
    rec.step(
        r"Online softmax over $n_b$ key blocks: a key's term is rescaled by "
        r"$\alpha_j = \exp(m_{j-1} - m_j)$ once per later block; the running maximum is "
        r"non-decreasing, so the subtractions' errors telescope to $u_{\mathrm{acc}} R$ ($R$ the "
        "row's score range) and the relative error of the rescaling is at most",
        tex(
            r"e_{\mathrm{rescale}} \le @e \qquad (R = \max_j x_j - \min_j x_j)",
            claim=_model_claim("online"),
            e=sp.exp(ua * R) * ((1 + 2 * sp.Symbol("ulps") * ua) * (1 + ua)) ** (nb - 1) - 1,
        ),
    )
    rec.step(
        "Eager model: each score rounded to the input type twice (the matmul's output, the "
        "scale), the normalized weight rounded once more; the weight error is "
        r"$\frac{(1 + e_w)(1 + e_{\mathrm{div}})}{1 - e_D} (1 + u_{\mathrm{in}}) - 1$ with "
        r"$e_w$ from the score error $[(1 + \gamma_{d+5}(u_{\mathrm{acc}}))(1 + "
        r"u_{\mathrm{in}})^2 - 1]\, c \sum_i \lvert q_i k_i \rvert$.",
    )
    rec.step(
        r"Input-type accumulation: recursive $\gamma_{n-1}$ (Higham eq. 4.4) exists only while "
        r"$(n - 1) u < 1$ (bf16: $n \le 256$); pairwise $\gamma_{\lceil \log_2 n \rceil}$ "
        r"(Higham eq. 4.6); blocked with block size $b$: "
        r"$\gamma_{b - 1 + \lceil n / b \rceil - 1}$ (Blanchard, Higham, Mary 2020).",
    )
    for model in ("fused", "online", "eager"):
        ratios: dict[str, float] = {}

        def holds(model=model, ratios=ratios) -> bool:
            ratios["wide"] = _instances(model, False, 6.0)
            ratios["narrow"] = _instances(model, False, 1.0, seed=11)
            return max(ratios.values()) <= 1.0 and max(ratios.values()) > 0.05

        rec.verify(
            _model_claim(model),
            holds,
            "120 random rows of 2-16 keys, scores in [-6, 6] and [-1, 1]"
            + (", key blocks of 4" if model == "online" else ""),
        )
        rec.tables[f"toy instances: {model}"] = (
            ["scores in", "max observed/bound"],
            [["[-6, 6]", f"{ratios.get('wide', float('nan')):.3f}"],
             ["[-1, 1]", f"{ratios.get('narrow', float('nan')):.3f}"]],
        )  # fmt: skip
    claim_perturbed_weights(rec)
    twin_ratio: dict[str, float] = {}

    def twin_rejected() -> bool:
        twin_ratio["r"] = _instances("fused", True, 6.0)
        return twin_ratio["r"] > 1.0

    rec.verify(
        "faulty twin: the fused kernel with its scores rounded to the input format (one more "
        "rounding at a named place) exceeds the fused bound on some instance",
        twin_rejected,
        "the same 120 rows, scores in [-6, 6]",
    )

    def summation() -> bool:
        rng = random.Random(5)
        ok = True
        for _ in range(200):
            n = rng.randint(2, 200)
            xs = [_in(Fraction(rng.uniform(0, 1))) for _ in range(n)]
            exact = sum(xs)
            absd = sum(abs(t) for t in xs)
            pair = xs
            while len(pair) > 1:
                pair = [_in(pair[i] + pair[i + 1]) if i + 1 < len(pair) else pair[i]
                        for i in range(0, len(pair), 2)]  # fmt: skip
            k = pm.summation_index(n, "pairwise")
            if k * U_IN < 1:
                ok = ok and abs(pair[0] - exact) <= Fraction(gamma(k, U_IN)) * absd
            blocks = [_rsum(xs[j : j + 4], _in) for j in range(0, n, 4)]
            kb = pm.summation_index(n, "blocked", 4)
            if kb * U_IN < 1:
                ok = ok and abs(_rsum(blocks, _in) - exact) <= Fraction(gamma(kb, U_IN)) * absd
        # recursive: n ones stagnate at 2^p_in, so no gamma bound can exist once (n - 1) u >= 1
        ones = _rsum([Fraction(1)] * 100, _in)
        return ok and ones == 2**P_IN

    rec.verify(
        "instances: pairwise and blocked (b = 4) sums in the p = 5 format obey their gamma "
        "bounds; a recursive sum of 100 ones stagnates at 2^5 = 32 (relative error 0.68, no "
        "gamma_{n-1} once (n - 1) u >= 1)",
        summation,
        "200 random sums of 2-200 positive terms, exact rational rounding",
    )
    n_, t_, a_, k_ = sp.symbols("n t alpha k", positive=True)
    width = sp.sqrt(2 * sp.log(2 * k_ / a_) / n_)
    rec.cite(
        "Hoeffding: the mean of n independent values in [a, b] deviates from its expectation "
        "by >= t with probability <= 2 exp(-2 n t^2/(b - a)^2) (= 2 exp(-n t^2/2) on [-1, 1]); "
        "Bonferroni over k checks multiplies it by k",
        "W. Hoeffding, 'Probability inequalities for sums of bounded random variables', J. Amer. "
        "Statist. Assoc. 58 (1963) 13-30, Theorem 2",
        "independent values, range b - a = 2",
    )
    rec.prove(
        "bias statistic: the tail 2 k exp(-n t^2 / 2) equals alpha at t = sqrt(2 ln(2k/alpha)/n) "
        "(hoeffding_half_width)",
        lambda: sp.simplify(2 * k_ * sp.exp(-n_ * width**2 / 2) - a_) == 0,
        "symbolic n, k, alpha > 0 (the algebra; the tail bound itself is cited above)",
    )


PERTURBED = (
    "instances: the centred bound on perturbed weights holds in exact rational arithmetic and "
    "is not vacuous; with the unperturbed sum in its denominator it is exceeded"
)


def _perturbed_instance(rng: random.Random, adversarial: bool):
    """(deviation, bound, twin bound, whether the exported float64 function agrees with the
    exact bound) of one row: exact Fractions, the weights' relative errors theta_s at +-r_s by
    the sign of v_s - o (the worst case) or drawn in [-r_s, r_s]."""
    import numpy as np

    n = rng.randint(2, 9)
    w = [Fraction(rng.randint(1, 64), 64) for _ in range(n)]
    r = [Fraction(rng.randint(0, 60), 64) for _ in range(n)]
    v = [Fraction(rng.randint(-32, 32), 16) for _ in range(n)]
    o = sum(a * b for a, b in zip(w, v)) / sum(w)
    if adversarial:
        th = [ri if vi > o else -ri for ri, vi in zip(r, v)]
    else:
        th = [ri * Fraction(rng.randint(-8, 8), 8) for ri in r]
    wh = [a * (1 + t) for a, t in zip(w, th)]
    dev = abs(sum(a * b for a, b in zip(wh, v)) / sum(wh) - o)
    cen = [abs(vi - o) for vi in v]
    num = sum(a * b * c for a, b, c in zip(w, r, cen))
    exact = num / sum(a * max(Fraction(0), 1 - b) for a, b in zip(w, r))
    arr = [np.array([float(z) for z in col]) for col in (w, r, cen)]
    computed = float(pm.perturbed_weights_deviation(*arr))
    # the float64 evaluation of the exported function: 3 n + 2 roundings of non-negative terms
    same = abs(Fraction(computed) - exact) <= Fraction(gamma(3 * n + 2, 2.0**-53)) * exact
    return dev, exact, num / sum(w), same


def claim_perturbed_weights(rec) -> None:
    """Step and checked claim of ``perturbed_weights_deviation`` (the centred bound)."""
    rec.step(
        r"Perturbed weights, centred: with $\hat w_s = w_s(1 + \theta_s)$, "
        r"$\lvert\theta_s\rvert \le r_s$ and $o = \sum_s w_s v_s / \sum_s w_s$, "
        r"$\sum_s w_s (v_s - o) = 0$ gives $\frac{\sum_s \hat w_s v_s}{\sum_s \hat w_s} - o "
        r"= \frac{\sum_s w_s \theta_s (v_s - o)}{\sum_s \hat w_s}$, so the deviation is at "
        r"most $\sum_s w_s r_s \lvert v_s - o \rvert / \sum_s w_s \max(0, 1 - r_s)$. Each key "
        r"carries its own $r_s$ (a saturated softcap's keys almost none) and the values enter "
        r"centred on $o$; the linear form's $[(1 + e_w)/(1 - e_w) - 1] \sum_s w_s \lvert v_s "
        r"\rvert / \sum_s w_s$ with $e_w = \max_s r_s$ is kept where it is smaller.",
    )
    ratios: dict[str, float] = {}

    def holds() -> bool:
        rng = random.Random(18)
        ok, worst, twin_worst = True, 0.0, 0.0
        for i in range(400):
            dev, bound, twin, same = _perturbed_instance(rng, adversarial=i % 2 == 0)
            ok = ok and dev <= bound and same
            worst = max(worst, float(dev / bound) if bound else 0.0)
            twin_worst = max(twin_worst, float(dev / twin) if twin else 0.0)
        ratios.update(bound=worst, twin=twin_worst)
        return ok and worst > 0.5 and twin_worst > 1.0

    rec.verify(
        PERTURBED,
        holds,
        "400 rows of 2-9 keys, r_s <= 60/64, half of them worst-case; the exported float64 "
        "function within its own rounding of the exact bound",
    )
    rec.tables["centred perturbed weights"] = (
        ["rows", "max deviation/bound", "max deviation/(twin: sum of w in the denominator)"],
        [[400, f"{ratios.get('bound', float('nan')):.3f}",
          f"{ratios.get('twin', float('nan')):.3f}"]],
    )  # fmt: skip

"""D17. The arithmetic of GPU attention kernels as parameters of the error model: the record.

The lemmas and the cited constants are in ``derivations.kernel_arithmetic``; here each lemma is
checked on instances in D16's toy binary format (``P_TOY``-bit significands, exact rational
arithmetic; truncation is rounding toward zero on the same grid), with its largest
observed/bound ratio stated (not vacuous) and a faulty twin -- the statement with the term the
kernel's arithmetic adds taken out -- shown to be exceeded by the same instances.

Approximate functions (``ex2.approx``, ``rcp.approx``, the fast log) are emulated adversarially:
the toy number farthest from the exact value, on the side that makes the error largest, within
the cited band (k ulps of the exact value, or a relative error); the nearest toy number where the
band holds no other. Exact values of exp2, exp and log are taken at 256 bits with mpmath.

Run with ``python -m derivations.kernel_arithmetic_record``.
"""

from __future__ import annotations

import random
from fractions import Fraction

import mpmath

from derivations import kernel_arithmetic as ka
from derivations._latex import tex
from derivations._record import Derivation, main_for
from derivations.rounding import (
    LIBRARY_DIV_ULPS,
    exp_relative_bound,
    gamma,
    round_to_bits,
    ulps_to_relative,
)
from derivations.transform_rounding import (
    P_TOY,
    U_TOY,
    _directed,
    _frac,
    _rnd,
    _spacing,
    _within,
)

#: bits of the "exact" values of transcendental functions (mpmath)
_PREC = 256
#: the toy's input format for matrix products: half the accumulator's significand, so that a
#: product of two inputs is exact in the accumulator (fp16 or bf16 inputs into fp32)
P_IN = P_TOY // 2
#: the toy's subnormal range for the flush-to-zero check: emin of IEEE binary16 (p = 11 too)
EMIN_TOY = -14

MMA = "matrix-product sums at the unit mma_unit: 2u under truncation (toy format, p = 11)"
TF32 = "TF32 inputs: a product's relative error (1 + u_tf32)^2 - 1 (toy format, p = 11)"
FUSED = "exponent by one FMA: gamma_2 |x - m| + u^2 (1 + u) |m| off a row-common shift (toy)"
UNFUSED = "exponent unfused: gamma_3 |x - m| + u (1 + 2u)(1 + u) |m| off a row-common shift"
WEIGHTS = "ex2.approx of the fused exponent: D10's exp bound at the fused error (toy format)"
RECIPROCAL = "normalization by rcp.approx and a product: (1 + 2 k u)(1 + u) - 1 (toy format)"
FLUSH = "flush-to-zero: absolute error u |y| + the smallest normal number (toy format)"
SPLIT_SCALE = "split-KV scales exp(L_i - L): theta_i bound (toy format, p = 11)"
SPLIT_WEIGHTED = "split-KV scales weighted: sum_i s_i |theta_i| bound, any gaps (toy format)"
SPLIT_OUTPUT = "split-KV combined output bound (toy format, p = 11)"
FAST_LOG = "fast log: 2^-21.41 + 7 * 2^-24 |log x| from the two cited regimes (float32)"


# -- the toy arithmetic ---------------------------------------------------------------------------
def _trunc(x: Fraction, bits: int = P_TOY) -> Fraction:
    """Rounding toward zero on the ``bits``-bit grid: a directed rounding, |delta| < 2u."""
    return _directed(x, x < 0, bits)


def _lib_ulps(exact: Fraction, ulps: float, up: bool, bits: int = P_TOY) -> Fraction:
    """A function within ``ulps`` ulps of the exact value, adversarially on the side ``up``."""
    if exact == 0:
        return exact
    return _within(exact, Fraction(ulps) * _spacing(abs(exact), bits), up, bits)


def _exact(fn, *args) -> Fraction:
    """An mpmath function of Fractions at ``_PREC`` bits, as a Fraction."""
    with mpmath.workprec(_PREC):
        return _frac(fn(*(mpmath.mpf(a.numerator) / a.denominator for a in args)))


def _toy(rng: random.Random, lo: float, hi: float, bits: int = P_TOY) -> Fraction:
    return round_to_bits(Fraction(rng.uniform(lo, hi)), bits)


# -- the checks -----------------------------------------------------------------------------------
def _block_sum(acc: Fraction, prods: list) -> Fraction:
    """One tensor-core block as Fasi et al. describe it: the accumulator and the block's exact
    products aligned to the largest of them with the bits below its last place dropped (no
    extra bits: the worst case), the sum normalized with truncation."""
    terms = [acc, *prods]
    if not any(terms):
        return Fraction(0)
    last = _spacing(max(abs(t) for t in terms if t))
    return _trunc(sum((abs(t) // last) * last * (1 if t > 0 else -1) for t in terms))


def _check_mma(rec, f) -> list:
    """Sums of exact products of P_IN-bit inputs accumulated with truncation: one addition at a
    time, and in blocks of 4 or 8 aligned and truncated together (Fasi et al.)."""
    rng = random.Random(1701)
    ratios, twin_exceeded, ok, nearest_ok = [], False, True, True
    for i in range(400):
        n = rng.randint(2, 16)
        prods = []
        for _ in range(n):
            a = _toy(rng, 0.5, 2.0, P_IN) * Fraction(2) ** rng.randint(-4, 4)
            b = _toy(rng, 0.5, 2.0, P_IN) * Fraction(2) ** rng.randint(-4, 4)
            prods.append(-a * b if i % 2 and rng.random() < 0.5 else a * b)
        exact, abs_sum = sum(prods), sum(abs(p) for p in prods)
        s_t = s_n = Fraction(0)
        for p in prods:  # the first addition, 0 + p_1, is exact: n - 1 roundings
            s_t, s_n = _trunc(s_t + p), _rnd(s_n + p)
        blocks = []
        for size in (4, 8):
            acc = Fraction(0)
            for k in range(0, n, size):
                acc = _block_sum(acc, prods[k : k + size])
            blocks.append(abs(acc - exact))
        err = abs(s_t - exact)
        bound = Fraction(gamma(n - 1, f["mma_unit"](U_TOY, "truncate"))) * abs_sum
        twin = Fraction(gamma(n - 1, U_TOY)) * abs_sum
        ok = ok and err <= bound and max(blocks) <= bound
        nearest_ok = (
            nearest_ok
            and abs(s_n - exact)
            <= Fraction(gamma(n - 1, f["mma_unit"](U_TOY, "nearest"))) * abs_sum
        )
        twin_exceeded = twin_exceeded or err > twin
        ratios.append(float(max(err, *blocks) / bound))
    worst = max(ratios)
    rec.verify(
        MMA,
        lambda: ok and nearest_ok and worst > 0.05 and twin_exceeded,
        f"400 sums of n = 2..16 exact products of {P_IN}-bit inputs (half with mixed signs), "
        f"accumulated in p = {P_TOY} with truncation one addition at a time and in blocks of 4 "
        f"and 8 (addends aligned to the largest, the bits below its last place dropped, the sum "
        f"truncated): |s_hat - s| <= gamma_(n-1)(2u) sum |a_i b_i|, max observed/bound "
        f"{worst:.3f}; the same sums rounded to nearest stay within gamma_(n-1)(u): "
        f"{nearest_ok}; the twin gamma_(n-1)(u) for truncation is exceeded: {twin_exceeded}",
    )
    return ["truncating sums", 400, worst, "gamma_(n-1)(u)", twin_exceeded]


def _check_tf32(rec, f) -> list:
    """Products of float32 inputs rounded to TF32 (11-bit significands, round to nearest)."""
    rng = random.Random(1702)
    ratios, twin_exceeded, trunc_exceeds, ok = [], False, False, True
    rel = Fraction(f["tf32_product_rel"](True))
    u_t = Fraction(2) ** -ka.TF32_BITS
    for _ in range(600):
        x, y = (
            round_to_bits(Fraction(rng.uniform(0.5, 1.0)) * Fraction(2) ** rng.randint(-4, 4), 24)
            * rng.choice((1, -1))
            for _ in range(2)
        )
        exact = x * y
        got = round_to_bits(x, ka.TF32_BITS) * round_to_bits(y, ka.TF32_BITS)
        err = abs(got - exact) / abs(exact)
        ok = ok and err <= rel
        twin_exceeded = twin_exceeded or err > u_t
        cut = _trunc(x, ka.TF32_BITS) * _trunc(y, ka.TF32_BITS)
        trunc_exceeds = trunc_exceeds or abs(cut - exact) / abs(exact) > rel
        ratios.append(float(err / rel))
    worst = max(ratios)
    exact_f32 = f["tf32_product_rel"](False) == 0.0
    rec.verify(
        TF32,
        lambda: ok and exact_f32 and worst > 0.05 and twin_exceeded,
        f"600 products of float32 numbers (24-bit significands) whose factors are rounded to "
        f"nearest in TF32 ({ka.TF32_BITS}-bit significands) and multiplied exactly: max "
        f"observed/bound {worst:.3f}; 0 without TF32: {exact_f32}; the twin u_tf32 (one rounding) "
        f"is exceeded: {twin_exceeded}. A conversion that truncates instead exceeds the bound: "
        f"{trunc_exceeds} (the lemma assumes the round-to-nearest conversion)",
    )
    return ["TF32 products", 600, worst, "u_tf32", twin_exceeded]


def _log2e() -> Fraction:
    return _exact(lambda: 1 / mpmath.log(2))


def _adversarial_scales() -> list[Fraction]:
    """Softmax scales c: the toy numbers in [1/2, 1) whose c log2 e rounds with |delta_1| >
    0.9 u."""
    l2e = _log2e()
    out = []
    for k in range(2 ** (P_TOY - 1), 2**P_TOY):
        c = Fraction(k, 2**P_TOY)
        if abs(_rnd(c * l2e) - c * l2e) > Fraction(9, 10) * Fraction(U_TOY) * c * l2e:
            out.append(c)
    return out


def _exponent_rows(rng: random.Random) -> list:
    """(c, m, keys) of the fused-exponent check: 120 random rows (m anywhere or on a binade's
    edge; keys m, 1/2..3 ulps below it, up to 8 below), then targeted rows: adversarial c, m at
    the top of the binade [8, 16) (|x - m| = an ulp is a small part of |m| there) with
    |delta_2| > 0.8 u, keys 1..4 ulps below m."""
    l2e, adversarial = _log2e(), _adversarial_scales()
    scales = adversarial + [_rnd(Fraction(d**-0.5)) for d in (1, 16, 64, 80, 128, 256)]
    rows = []
    for row in range(120):
        if row % 2:
            m = Fraction(2) ** rng.randint(-3, 5) * rng.choice((1, -1))
        else:
            m = _toy(rng, -40.0, 40.0)
        ulp = _spacing(abs(m))
        keys = [m] + [_rnd(m - j * ulp / 2) for j in (1, 2, 3, 4, 6)]
        rows.append((rng.choice(scales), m, keys + [_rnd(m - Fraction(rng.uniform(0, 8)))]))
    for c in adversarial:
        s = _rnd(c * l2e)
        for k in range(2**P_TOY - 64, 2**P_TOY):
            for m in (Fraction(k, 128), Fraction(-k, 128)):
                if abs(_rnd(m * s) - m * s) > Fraction(4, 5) * Fraction(U_TOY) * abs(m * s):
                    rows.append((c, m, [m - j * _spacing(abs(m)) for j in (1, 2, 3, 4)]))
    return rows


def _check_fused_exponent(rec, f) -> list:
    """FlashAttention-2's exp2f(x * s - fl(m s)), s = fl(c log2 e), one FMA per key."""
    rng = random.Random(1703)
    l2e = _log2e()
    u = Fraction(U_TOY)
    ratios, w_ratios, uf_ratios, ok, w_ok, uf_ok = [], [], [], True, True, True
    exceeded = {"u": False, "cross": False, "fused": False}
    ex2 = ka.EX2_APPROX_F32_ULPS.value
    rows = _exponent_rows(rng)
    for c, m, keys in rows:
        s = _rnd(c * l2e)
        ms = _rnd(m * s)
        kappa = ms - m * s  # fl(m s) - m s: the same for every key of the row
        for x in keys:
            e_hat = _rnd(x * s - ms)  # the FMA: one rounding of the exact x s - fl(m s)
            resid = e_hat + kappa - (x - m) * c * l2e
            err = abs(resid) / l2e  # natural units: exp2(y) = exp(y / log2 e)
            big_x, big_m = abs(c * (x - m)), abs(c * m)
            bound = Fraction(f["fused_exponent"](float(big_x), float(big_m), U_TOY))
            ok = ok and err <= bound
            ratios.append(float(err / bound) if bound else 0.0)
            twin_u = u * big_x + u * u * (1 + u) * big_m
            exceeded["u"] = exceeded["u"] or err > twin_u
            exceeded["cross"] = exceeded["cross"] or err > Fraction(gamma(2, U_TOY)) * big_x
            # the weight: ex2.approx of e_hat against e^(c (x - m)) 2^(-kappa), adversarially
            target = _exact(lambda a, b: mpmath.exp(a) * 2 ** (-b), c * (x - m), kappa)
            two = _exact(lambda y: 2**y, e_hat)
            w_bound = Fraction(exp_relative_bound(float(bound), U_TOY, ex2))
            w_err = max(abs(_lib_ulps(two, ex2, up) / target - 1) for up in (True, False))
            w_ok = w_ok and w_err <= w_bound
            w_ratios.append(float(w_err / w_bound))
            # unfused, fl(fl(x s) - fl(m s)): the product's own rounding is not common
            uf_err = abs(_rnd(_rnd(x * s) - ms) + kappa - (x - m) * c * l2e) / l2e
            uf_bound = f["fused_exponent"](float(big_x), float(big_m), U_TOY, fused=False)
            uf_ok = uf_ok and uf_err <= Fraction(uf_bound)
            uf_ratios.append(float(uf_err / Fraction(uf_bound)) if uf_bound else 0.0)
            exceeded["fused"] = exceeded["fused"] or uf_err > bound
    worst, w_worst, n = max(ratios), max(w_ratios), len(ratios)
    uf_worst = max(uf_ratios)
    rec.verify(
        FUSED,
        lambda: ok and worst > 0.05 and exceeded["u"] and exceeded["cross"],
        f"{n} keys in {len(rows)} rows: 120 random (c = 1/sqrt(d) or adversarial, half with m "
        f"on a binade's edge; keys m, 1/2..3 ulps below it and up to 8 below) and targeted rows "
        f"(c whose c log2 e rounds by more than 0.9 u, m in the top 64 ulps of [8, 16) whose "
        f"m s rounds by more than 0.8 u, keys 1..4 ulps below m): max observed/bound "
        f"{worst:.3f}; twins exceeded: u |x - m| in "
        f"place of gamma_2 |x - m|: {exceeded['u']}; without the cross term u^2 (1 + u) |m|: "
        f"{exceeded['cross']}",
    )
    rec.verify(
        WEIGHTS,
        lambda: w_ok and w_worst > 0.05,
        f"the same {n} keys: ex2.approx (2.5 ulps from the exact value, adversarial) of the fused "
        f"exponent against e^(c (x - m)) times the row-common 2^(-kappa): max observed/bound "
        f"{w_worst:.3f}",
    )
    rec.verify(
        UNFUSED,
        lambda: uf_ok and uf_worst > 0.05 and exceeded["fused"],
        f"the same {n} keys, the exponent fl(fl(x s) - fl(m s)): max observed/bound "
        f"{uf_worst:.3f}; the fused bound is exceeded: {exceeded['fused']}",
    )
    return [
        ["fused exponent", n, worst, "u |x - m| (gamma_2 -> u)", exceeded["u"]],
        ["fused exponent", n, worst, "no u^2 (1 + u) |m| cross term", exceeded["cross"]],
        ["ex2.approx weight", n, w_worst, "", ""],
        ["unfused exponent", n, uf_worst, "the fused bound", exceeded["fused"]],
    ]


def _check_reciprocal(rec, f) -> list:
    """o = fl(acc * rcp(l)), rcp within k ulps of 1/l (rcp.approx: 1.5; a fast division 2.5)."""
    rng = random.Random(1704)
    u = Fraction(U_TOY)
    ulps = (ka.RCP_APPROX_F32_ULPS.value, LIBRARY_DIV_ULPS["cuda-fast-div"].value)
    ratios, ok, ieee_ok, twin_exceeded = [], True, True, False
    for i in range(400):
        k = ulps[i % 2]
        if i % 4 < 2:  # l just below a power of two: 1/l just above one, where an ulp is 2u
            e = rng.randint(1, 12)
            l_sum = Fraction(2) ** e - rng.randint(1, 3) * Fraction(2) ** (e - P_TOY)
        else:
            l_sum = _toy(rng, 1.0, 4096.0)
        acc = _toy(rng, -float(l_sum), float(l_sum))
        if acc == 0:
            continue
        exact = acc / l_sum
        err = max(
            abs(_rnd(acc * _lib_ulps(1 / l_sum, k, up)) - exact) / abs(exact)
            for up in (True, False)
        )
        bound = Fraction(f["reciprocal"](U_TOY, k))
        ok = ok and err <= bound
        ieee_ok = ieee_ok and abs(_rnd(acc / l_sum) - exact) <= u * abs(exact)
        twin_exceeded = twin_exceeded or err > u
        ratios.append(float(err / bound))
    worst = max(ratios)
    rec.verify(
        RECIPROCAL,
        lambda: ok and ieee_ok and worst > 0.05 and twin_exceeded,
        f"{len(ratios)} normalizations, l in [1, 4096) (half just below a power of two), |acc| "
        f"<= l, the reciprocal within k = {ulps[0]:g} (rcp.approx) or {ulps[1]:g} (fast "
        f"division) ulps, adversarially on either side: max observed/bound {worst:.3f}; an IEEE "
        f"division fl(acc / l) stays within u: {ieee_ok}; the twin u (IEEE division's bound) is "
        f"exceeded: {twin_exceeded}",
    )
    return ["reciprocal normalization", len(ratios), worst, "u (IEEE division)", twin_exceeded]


def _check_flush(rec, f) -> list:
    """Results near the smallest normal number lambda = 2^emin, flushed or gradual."""
    rng = random.Random(1705)
    u = Fraction(U_TOY)
    lam, eta = Fraction(2) ** EMIN_TOY, Fraction(2) ** (EMIN_TOY - P_TOY)
    flush_term = Fraction(f["flushed"](float(lam), True, float(eta)))
    gradual_term = Fraction(f["flushed"](float(lam), False, float(eta)))
    ratios, ok, gradual_ok, twin_exceeded = [], True, True, False
    for i in range(600):
        y = Fraction(rng.uniform(0.02, 4.0)) * lam * rng.choice((1, -1))
        if i % 3 == 0:  # a product of two toy numbers
            y = _toy(rng, 0.5, 1.0) * _toy(rng, 0.02, 4.0) * lam
        g = round_to_bits(y, P_TOY, EMIN_TOY)  # gradual underflow
        after = Fraction(0) if abs(g) < lam else g  # a subnormal result flushed
        before = Fraction(0) if abs(y) < lam else g  # a subnormal exact value flushed
        err = max(abs(after - y), abs(before - y))
        bound = u * abs(y) + flush_term
        ok = ok and err <= bound
        gradual_ok = gradual_ok and abs(g - y) <= u * abs(y) + gradual_term
        twin_exceeded = twin_exceeded or err > u * abs(y) + eta
        ratios.append(float(err / bound))
    worst = max(ratios)
    rec.verify(
        FLUSH,
        lambda: ok and gradual_ok and worst > 0.05 and twin_exceeded,
        f"600 results y in (0.02, 4) lambda, lambda = 2^{EMIN_TOY} (binary16's range with p = "
        f"{P_TOY}), flushed before or after rounding: |y_hat - y| <= u |y| + lambda, max "
        f"observed/bound {worst:.3f}; with gradual underflow within u |y| + eta, eta = "
        f"2^{EMIN_TOY - P_TOY}: {gradual_ok}; the twin u |y| + eta for flushed results is "
        f"exceeded: {twin_exceeded}",
    )
    return ["flush to zero", 600, worst, "u |y| + eta (no flush term)", twin_exceeded]


def _split_row(rng: random.Random, offsets: list, spread: float, positive: bool):
    """Exact partial results of one row, a split of 4 keys per offset: log-sum-exps L_i,
    outputs o_i, sums l_i, and the combined L and o."""
    ls, outs = [], []
    for off in offsets:
        xs = [_toy(rng, off - spread, off + spread) for _ in range(4)]
        vs = [_toy(rng, 0.0 if positive else -1.0, 1.0) for _ in range(4)]
        ws = [_exact(mpmath.exp, x) for x in xs]
        ls.append(sum(ws))
        outs.append(sum(w * v for w, v in zip(ws, vs)) / ls[-1])
    total = sum(ls)
    o = sum(l_i * o_i for l_i, o_i in zip(ls, outs)) / total
    lses = [_exact(mpmath.log, l_i) for l_i in ls]
    return lses, outs, [l_i / total for l_i in ls], _exact(mpmath.log, total), o


def _combine(lse_hat: list, o_hat: list, sides: list) -> tuple:
    """FlashAttention-2's combine in the toy: m = max L_hat_i, L_hat = log(sum exp(L_hat_i - m))
    + m, scales exp(L_hat_i - L_hat), acc += scale * o_hat_i (one FMA per split)."""
    ex2, log_ulps = ka.EX2_APPROX_F32_ULPS.value, ka.FAST_LOG_F32_ULPS
    top, acc = max(lse_hat), Fraction(0)
    for x in lse_hat:
        acc = _rnd(acc + _lib_ulps(_exact(mpmath.exp, _rnd(x - top)), ex2, sides[2]))
    l_hat = _rnd(_lib_ulps(_exact(mpmath.log, acc), log_ulps, sides[0]) + top)
    scales = [_lib_ulps(_exact(mpmath.exp, _rnd(x - l_hat)), ex2, sides[2]) for x in lse_hat]
    got = Fraction(0)
    for sc, oh in zip(scales, o_hat):
        got = _rnd(got + sc * oh)
    return l_hat, scales, got


def _check_split_kv(rec, f) -> list:
    """Split-KV rows combined as FlashAttention-2 does (:func:`_combine`)."""
    rng = random.Random(1706)
    u = Fraction(U_TOY)
    ex2 = ka.EX2_APPROX_F32_ULPS.value
    r = Fraction(2 * ex2) * u
    ratios = {"scale": [], "weighted": [], "output": []}
    ok = {"scale": True, "weighted": True, "output": True}
    exceeded = {"gap": False, "weighted": False, "theta_a": False}
    n_rows = 150
    for row in range(n_rows):
        p = rng.choice((2, 3, 4, 8))
        far = row % 5 == 0  # one split near 0, the others 20..60 below: wide gaps
        if far:
            spread, offsets = 1.0, [0.0] + [rng.uniform(-60, -20) for _ in range(p - 1)]
        else:
            spread = rng.choice((1.0, 4.0, 12.0))
            offsets = [rng.uniform(-3 * spread, spread) for _ in range(p)]
        lses, outs, exact_scales, big_l, o = _split_row(rng, offsets, spread, row % 2 == 1)
        sides = [rng.random() < 0.5 for _ in range(3)] if row % 3 else [row % 2 == 0] * 3
        # the splits' results as stored: rounded to nearest (far rows), else off by up to
        # 4u (|L_i| + 1) and 4u
        lse_hat = [_rnd(x) if far else _within(x, 4 * u * (abs(x) + 1), sides[0]) for x in lses]
        o_hat = [_within(x, 4 * u, sides[1]) for x in outs]
        l_hat, scales, got = _combine(lse_hat, o_hat, sides)
        b = abs(l_hat - big_l)
        weighted, theta = Fraction(0), Fraction(0)
        for x_hat, x, s_i, s_hat in zip(lse_hat, lses, exact_scales, scales):
            th = abs(s_hat / s_i - 1)
            a, gap = abs(x_hat - x), abs(x - big_l)
            bound = Fraction(f["split_scale"](float(a), float(b), float(gap), U_TOY, ex2))
            ok["scale"] = ok["scale"] and th <= bound
            ratios["scale"].append(float(th / bound))
            exceeded["gap"] = exceeded["gap"] or th > _exact(mpmath.exp, a + b) * (1 + r) - 1
            theta, weighted = max(theta, bound), weighted + s_i * th
        a_max = max(abs(x_hat - x) for x_hat, x in zip(lse_hat, lses))
        w_bound = Fraction(f["split_weighted"](float(a_max), float(b), p, U_TOY, ex2))
        ok["weighted"] = ok["weighted"] and weighted <= w_bound
        ratios["weighted"].append(float(weighted / w_bound))
        exceeded["weighted"] = exceeded["weighted"] or (
            weighted > _exact(mpmath.exp, a_max + b) * (1 + r) - 1
        )
        err = abs(got - o)
        beta = max(abs(x - y) for x, y in zip(o_hat, outs))
        amax = max(abs(x) for x in outs)
        for th in (theta, w_bound):  # theta: the largest theta_i bound, or the weighted one
            bound = Fraction(f["split_output"](float(beta), float(amax), float(th), p, U_TOY))
            ok["output"] = ok["output"] and err <= bound
            ratios["output"].append(float(err / bound))
            g = Fraction(gamma(p, U_TOY))
            twin = (1 + th) * beta + g * (1 + th) * (amax + beta)
            exceeded["theta_a"] = exceeded["theta_a"] or err > twin
    worst = {k: max(v) for k, v in ratios.items()}
    n_scales = len(ratios["scale"])
    rec.verify(
        SPLIT_SCALE,
        lambda: ok["scale"] and worst["scale"] > 0.05 and exceeded["gap"],
        f"{n_scales} scales in {n_rows} rows of P in (2, 3, 4, 8) splits of 4 keys (scores "
        f"spread 1, 4 or 12 around offsets up to 3 spreads apart, stored L_i off by up to "
        f"4u (|L_i| + 1); a fifth of the rows with one split near 0 and the others 20..60 below, "
        f"L_i stored rounded to nearest), exp within {ex2:g} ulps and log within "
        f"{ka.FAST_LOG_F32_ULPS:g} ulps (adversarial sides): max observed/bound "
        f"{worst['scale']:.3f}; the twin without the subtraction's u |L_i - L| is exceeded: "
        f"{exceeded['gap']}",
    )
    rec.verify(
        SPLIT_WEIGHTED,
        lambda: ok["weighted"] and worst["weighted"] > 0.05,
        f"the same {n_rows} rows: sum_i s_i |theta_i| against the weighted bound (no bound on "
        f"the gaps needed): max observed/bound {worst['weighted']:.3f}; the twin without "
        f"P u / ((1 - u) e) is exceeded: {exceeded['weighted']}",
    )
    rec.verify(
        SPLIT_OUTPUT,
        lambda: ok["output"] and worst["output"] > 0.05 and exceeded["theta_a"],
        f"the same {n_rows} rows, partial outputs off by up to 4u, combined by one FMA per split, "
        f"theta the largest theta_i bound or the weighted bound: max observed/bound "
        f"{worst['output']:.3f}; the twin without theta a (the scales' error against |o_i|, "
        f"which does not cancel) is exceeded: {exceeded['theta_a']}",
    )
    return [
        ["split-KV scales", n_scales, worst["scale"], "no u |L_i - L|", exceeded["gap"]],
        [
            "split-KV weighted scales",
            n_rows,
            worst["weighted"],
            "no P u/((1-u) e)",
            exceeded["weighted"],
        ],
        ["split-KV output", 2 * n_rows, worst["output"], "no theta a", exceeded["theta_a"]],
    ]


def _check_fast_log(rec, f) -> list:
    """__logf emulated in float32 at the edge of each cited regime, on either side."""
    rng = random.Random(1707)
    u32, log_ulps = Fraction(2) ** -24, ka.FAST_LOG_F32_ULPS
    rel_only = Fraction(ulps_to_relative(log_ulps, float(u32)))
    absolute = Fraction(ka.FAST_LOG_F32.value)
    ratios, ok = [], True
    exceeded = {"rel": False, "abs": False}
    for i in range(600):
        t = rng.uniform(-1.0, 1.0) if i % 2 else rng.uniform(-120.0, 120.0)
        x = round_to_bits(Fraction(2.0**t), 24)
        lg = _exact(mpmath.log, x)
        if lg == 0:
            continue
        inner = Fraction(1, 2) <= x <= 2
        radius = absolute if inner else Fraction(log_ulps) * _spacing(abs(lg), 24)
        err = max(abs(_within(lg, radius, up, 24) - lg) for up in (True, False))
        bound = Fraction(f["fast_log"](float(abs(lg))))
        ok = ok and err <= bound
        exceeded["rel"] = exceeded["rel"] or err > rel_only * abs(lg)
        exceeded["abs"] = exceeded["abs"] or err > absolute
        ratios.append(float(err / bound))
    worst = max(ratios)
    rec.verify(
        FAST_LOG,
        lambda: ok and worst > 0.05 and exceeded["rel"] and exceeded["abs"],
        f"{len(ratios)} float32 x = 2^t (half with |t| <= 1, half with |t| <= 120), the log "
        f"at the edge of its regime's band on either side ({log_ulps:g} ulps from the exact "
        f"value outside [1/2, 2]): max observed/bound {worst:.3f}; twins exceeded: the ulp term "
        f"alone {exceeded['rel']}, the absolute term alone {exceeded['abs']}",
    )
    both = exceeded["rel"] and exceeded["abs"]
    return ["fast log (float32)", len(ratios), worst, "either regime's term alone", both]


# -- the record -----------------------------------------------------------------------------------
def _statements(rec) -> None:
    rec.statement["mma_unit"] = tex(
        r"|\hat s - s| \le \gamma_{n-1}(u_{\mathrm{mma}}) \sum_{i=1}^{n} |a_i b_i|,\quad "
        r"u_{\mathrm{mma}} = 2u \text{ (truncation)},\ u \text{ (round to nearest)} \qquad "
        r"\bigl(s = \textstyle\sum_i a_i b_i,\ \text{products exact},\ n - 1 "
        r"\text{ rounded additions}\bigr)",
        claim=MMA,
    )
    rec.statement["tf32"] = tex(
        r"\bigl|\mathrm{tf}(a)\,\mathrm{tf}(b) - ab\bigr| \le \bigl((1 + u_{\mathrm{tf}})^2 - 1"
        r"\bigr)\,|ab|,\quad u_{\mathrm{tf}} = 2^{-11} \qquad (\mathrm{tf}\text{: a float32 "
        r"number rounded to nearest in TF32; the product exact in float32})",
        claim=TF32,
    )
    rec.statement["fused_exponent"] = tex(
        r"\Bigl|\frac{\hat e}{\log_2 e} - c(x - m) - \kappa\Bigr| \le \gamma_2\, c\,|x - m| + "
        r"u^2(1+u)\, c\,|m|,\quad \hat e = \mathrm{fl}\bigl(x s - \mathrm{fl}(m s)\bigr),\ "
        r"s = \mathrm{fl}(c \log_2 e) \qquad \bigl(\kappa = (m s - \mathrm{fl}(m s))/\log_2 e "
        r"\text{ the same for every key of the row; the exponent one FMA}\bigr)",
        claim=FUSED,
    )
    rec.statement["unfused_exponent"] = tex(
        r"\Bigl|\frac{\hat e}{\log_2 e} - c(x - m) - \kappa\Bigr| \le \gamma_3\, c\,|x - m| + "
        r"u(1 + 2u)(1+u)\, c\,|m|,\quad \hat e = \mathrm{fl}\bigl(\mathrm{fl}(x s) - "
        r"\mathrm{fl}(m s)\bigr) \qquad (\text{the product } x s \text{ rounded on its own})",
        claim=UNFUSED,
    )
    rec.statement["ex2_weight"] = tex(
        r"\Bigl|\frac{\widehat{2^{\hat e}}}{e^{c(x - m) + \kappa}} - 1\Bigr| \le "
        r"e^{\epsilon}(1 + r) - 1,\quad \epsilon = \gamma_2\, c\,|x - m| + u^2(1+u)\, c\,|m| "
        r"\qquad (\widehat{2^{y}} \text{ within } k \text{ ulps of } 2^{y},\ r = 2 k u)",
        claim=WEIGHTS,
    )
    rec.statement["reciprocal"] = tex(
        r"\bigl|\mathrm{fl}\bigl(a\,\widehat{1/l}\bigr) - a/l\bigr| \le \bigl((1 + 2 k u)(1 + u)"
        r" - 1\bigr)\,|a/l| \qquad (\widehat{1/l} \text{ within } k \text{ ulps of } 1/l;\ "
        r"\text{an IEEE division gives } u)",
        claim=RECIPROCAL,
    )
    rec.statement["flush_to_zero"] = tex(
        r"|\hat y - y| \le u\,|y| + \begin{cases} \lambda & \text{subnormal results flushed "
        r"to zero} \\ \eta & \text{gradual underflow} \end{cases} \qquad (\lambda = "
        r"2^{e_{\min}} \text{ the smallest normal number},\ \eta = 2^{e_{\min} - p})",
        claim=FLUSH,
    )
    rec.statement["split_kv_scale"] = tex(
        r"\hat s_i = \exp_{\mathrm{lib}}\bigl(\mathrm{fl}(\hat L_i - \hat L)\bigr) = "
        r"e^{L_i - L}(1 + \theta_i),\quad \lvert\theta_i\rvert \le e^{\alpha_i + \alpha + "
        r"u \lvert L_i - L\rvert}(1 + r) - 1 \qquad (\lvert\hat L_i - L_i\rvert \le \alpha_i,\ "
        r"\lvert\hat L - L\rvert \le \alpha,\ r = 2 k u)",
        claim=SPLIT_SCALE,
    )
    rec.statement["split_kv_output"] = tex(
        r"|\hat o - o| \le (1 + \theta)\beta + \theta a + \gamma_P (1 + \theta)(a + \beta) "
        r"\qquad \bigl(o = \textstyle\sum_{i=1}^{P} e^{L_i - L} o_i,\ \lvert\hat o_i - o_i"
        r"\rvert \le \beta,\ \lvert o_i\rvert \le a,\ \lvert\theta_i\rvert \le \theta\bigr)",
        claim=SPLIT_OUTPUT,
    )
    rec.statement["fast_log"] = tex(
        r"\bigl|\widehat{\log}\,x - \log x\bigr| \le 2^{-21.41} + 7 \cdot 2^{-24}\,|\log x| "
        r"\qquad (x > 0 \text{ normal in float32})",
        claim=FAST_LOG,
    )


def _steps(rec) -> None:
    rec.step(
        r"Truncation: rounding toward zero moves a result by less than one ulp, and an ulp of "
        r"$y$ is at most $2u|y|$, so $\mathrm{fl}(y) = y(1 + \delta)$ with $|\delta| < 2u$; "
        r"Higham's Lemma 3.1 then holds with $2u$ in place of $u$: every $\gamma$ of a "
        r"tensor-core sum is taken at $u_{\mathrm{mma}} = 2u$ (products of half-width inputs "
        r"are exact, as Fasi et al. measured). Their blocks -- the accumulator and 4 or 8 "
        r"products aligned to the largest, the bits below its last place dropped, the sum "
        r"truncated -- stayed within the same $\gamma_{n-1}(2u)$ on every instance (verified, "
        r"not proved: an addend's loss is below an ulp of the largest, and the sum's own "
        r"truncation only bites when it leaves that binade)."
    )
    rec.step(
        r"TF32: each factor is rounded once to an 11-bit significand, "
        r"$\mathrm{tf}(a) = a(1 + \delta_a)$ with $|\delta_a| \le u_{\mathrm{tf}}$, and the "
        r"product of two 11-bit significands is exact in float32: "
        r"$(1 + \delta_a)(1 + \delta_b) - 1$."
    )
    rec.step(
        r"Fused exponent: with $s = c \log_2 e\,(1 + \delta_1)$, $\mathrm{fl}(m s) = "
        r"m s (1 + \delta_2)$ and one rounding $\delta_3$ of the FMA, $\hat e = [(x - m) s - "
        r"m s \delta_2](1 + \delta_3)$. The part $-m s \delta_2$ is the same for every key of "
        r"the row, and a shift common to the row cancels in the ratio of the softmax (D6); what "
        r"is left is $(x - m) c \log_2 e\,[(1 + \delta_1)(1 + \delta_3) - 1] - m s \delta_2 "
        r"\delta_3$, at most $\gamma_2 c|x - m| + u^2 (1 + u) c|m|$ after division by "
        r"$\log_2 e$. The cross term matters only for keys next to the maximum, where "
        r"$|x - m|$ is a few ulps of $m$. Unfused, $\mathrm{fl}(x s) = x s (1 + \delta_1')$ "
        r"adds $(x - m) s \delta_1'$ and $m s \delta_1' (1 + \delta_3)$, which is not common "
        r"to the row: $\gamma_3 c|x - m| + u (1 + 2u)(1 + u) c|m|$."
    )
    rec.step(
        r"Weight: $2^{\hat e} = e^{c(x - m) + \kappa + \epsilon'}$ with $|\epsilon'| \le "
        r"\epsilon$, and the approximate exp2 adds its relative error $r$: D10's exp bound "
        r"$e^{\epsilon}(1 + r) - 1$ at the fused error."
    )
    rec.step(
        r"Reciprocal normalization: $\widehat{1/l} = (1/l)(1 + \rho)$ with $|\rho| \le 2 k u$ "
        r"(k ulps of the exact value, an ulp at most $2u$ relative), and the product rounds "
        r"once: $(1 + \rho)(1 + \delta) - 1$. FlashAttention-2 computes $1/l$ once per row "
        r"and multiplies every output coordinate by it."
    )
    rec.step(
        r"Flush to zero: a result whose magnitude is below $\lambda$ becomes 0, an error "
        r"below $\lambda$ itself, where gradual underflow errs by at most $\eta$, half the "
        r"subnormal spacing; normal results keep their relative error $u$."
    )
    rec.step(
        r"Split-KV scales: $\mathrm{fl}(\hat L_i - \hat L)$ is within $\alpha_i + \alpha + "
        r"u|L_i - L|$ of $L_i - L$ (the errors of the stored log-sum-exps and one rounded "
        r"subtraction), and the library exp multiplies by $1 + \rho$, $|\rho| \le r$."
    )
    rec.step(
        r"Split-KV output: $\hat o - o = \sum_i e^{L_i - L}[(1 + \theta_i)(\hat o_i - o_i) + "
        r"\theta_i o_i]$ plus the rounding of $P$ products and additions, and "
        r"$\sum_i e^{L_i - L} = 1$. The scales are not renormalized by their computed sum, so "
        r"their errors meet $|o_i|$ once ($\theta a$), unlike the row-common shift of one "
        r"softmax."
    )
    rec.step(
        r"Fast log: the two cited regimes are $2^{-21.41}$ absolute on $[1/2, 2]$ and 3 ulps "
        r"of the correctly rounded value elsewhere (3.5 of the exact one, at most "
        r"$7 \cdot 2^{-24}|\log x|$); their sum bounds both."
    )


def _cite(rec) -> None:
    rec.cite(
        "tensor-core products exact, sums normalized with truncation",
        ka.FASI,
        "theirs: the measured behaviour of V100/T4/A100 tensor cores; this project's: the unit "
        "2u in the gamma of every such sum",
    )
    rec.cite(
        "TF32 keeps 10 stored significand bits (u_tf32 = 2^-11)",
        "NVIDIA A100 Tensor Core GPU Architecture (white paper, 2020), 'TF32'",
        "the format; the product bound is this project's",
    )
    for name, const in (
        ("ex2.approx.f32 within 2.5 ulps of the exact result", ka.EX2_APPROX_F32_ULPS),
        ("tanh.approx.f32 relative error 2^-11", ka.TANH_APPROX_F32_REL),
        ("rcp.approx.f32 within 1.5 ulps of the exact result", ka.RCP_APPROX_F32_ULPS),
        ("__logf: 2^-21.41 on [1/2, 2], 3.5 ulps of the exact result elsewhere", ka.FAST_LOG_F32),
    ):
        rec.cite(name, const.source, const.note)
    rec.cite(
        "FlashAttention-2's arithmetic",
        "T. Dao, FlashAttention-2 (2023), csrc/flash_attn/src/softmax.h (scale_apply_exp2, "
        "normalize_softmax_lse), utils.h (apply_softcap), alibi.h, flash_api.cpp, "
        "flash_fwd_kernel.h (combine_attn_seqk_parallel); built with --use_fast_math",
        "theirs: the operations; this project's: reading them as the parameters of "
        "KernelArithmetic and the bounds above",
    )


def _preset_table(rec) -> None:
    fa2 = ka.FLASH_ATTENTION_2
    rec.tables["flash_attention_2"] = (
        ["field", "cpu (D10)", "flash-attention-2"],
        [
            [name, repr(getattr(ka.KernelArithmetic(), name)), repr(v)]
            for name, v in zip(fa2._fields, fa2)
        ][1:],
    )


DEFAULTS = {
    "mma_unit": ka.mma_unit,
    "tf32_product_rel": ka.tf32_product_rel,
    "fused_exponent": ka.fused_exponent_abs_error,
    "reciprocal": ka.reciprocal_normalization_rel,
    "flushed": ka.flushed_abs_error,
    "split_scale": ka.split_kv_scale_rel,
    "split_weighted": ka.split_kv_weighted_scale_rel,
    "split_output": ka.split_kv_output_bound,
    "fast_log": ka.fast_log_abs_error,
}


def derive(**wrong) -> Derivation:
    """Build the D17 record: the arithmetic of GPU attention kernels (FlashAttention-2, tensor
    cores) as parameters of D10's error model, each lemma checked on the toy format.

    Keyword overrides (wrong-statement tests), callables replacing the exports of
    ``derivations.kernel_arithmetic``: ``mma_unit``, ``tf32_product_rel``, ``fused_exponent``,
    ``reciprocal``, ``flushed``, ``split_scale``, ``split_output``, ``fast_log`` (same
    signatures as ``mma_unit``, ``tf32_product_rel``, ``fused_exponent_abs_error``,
    ``reciprocal_normalization_rel``, ``flushed_abs_error``, ``split_kv_scale_rel``,
    ``split_kv_output_bound``, ``fast_log_abs_error``).

    Raises:
        TypeError: an unknown override name.
    """
    from derivations.feature_maps import resolve_overrides

    f = resolve_overrides(wrong, DEFAULTS)
    rec = Derivation(
        "D17", "The arithmetic of GPU attention kernels as parameters of the error model"
    )
    _statements(rec)
    _steps(rec)
    rows = [_check_mma(rec, f), _check_tf32(rec, f)]
    rows += _check_fused_exponent(rec, f)
    rows += [_check_reciprocal(rec, f), _check_flush(rec, f)]
    rows += _check_split_kv(rec, f)
    rows.append(_check_fast_log(rec, f))
    _cite(rec)
    rec.tables["toy_checks"] = (
        ["lemma", "instances", "max observed/bound", "faulty twin", "twin exceeded"],
        rows,
    )
    _preset_table(rec)
    rec.exports = list(ka.EXPORTS)
    return rec


if __name__ == "__main__":
    main_for(derive)

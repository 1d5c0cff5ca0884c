"""D12. ALiBi and scalar decay: causal softmax with a linear bias is a sum of decayed linear RNNs.

With the causal ALiBi bias -m (t - s) on the score x_ts = c q_t.k_s (s <= t),
exp(x_ts - m (t - s)) = gamma^(t-s) exp(x_ts) with gamma = e^(-m), so every order n of the
exp series (D1, D2) keeps its numerator and denominator states with a decay:
S_t = gamma S_{t-1} + k~_t^(tensor n) v_t^T, z_t = gamma z_{t-1} + k~_t^(tensor n). Results, each
closed by a check in ``derive()``:
- the factorization (all t - s >= 0, symbolic m and x), and the sign: a bias +m (t - s) does not
  give the decay gamma;
- the decayed recursion unrolls to sum_{s<=t} gamma^(t-s) f(s), and the chunked form reads the
  state before the chunk decayed by gamma^(t-a+1) (all t, a);
- the Taylor-N truncation is gamma^(t-s) kappa_N(x_ts) (decay times the truncated kernel): the
  decay cancels in the relative weight error, so D4's bound holds with r the radius of c q.k
  alone (bias excluded);
- kappa_N of the *biased* score is a polynomial of degree N in n = t - s, never gamma^n h(x): no
  scalar decay fits it (N = 1..6 checked). It has an exact finite-state recurrence all the same:
  kappa_N(x - m n) = sum_j (-m n)^j / j! kappa_{N-j}(x) (proved, symbolic N: the coefficients of
  x^i y^j on both sides), and the states R^(i) = sum_s (-m (t - s))^i / i! phi(k_s) v_s^T obey
  R_t = exp(-m J) R_{t-1} + e_0 phi(k_t) v_t^T with J the nilpotent shift (a Jordan block: the
  state of order i carries polynomials in n) -- exact instances checked. It is numerically poor:
  its terms grow like (m n)^j / j! and cancel (a computed example in the record's table);
- exact instances: decayed parallel == recurrent == chunked (symbolic q, k, v and gamma, both
  bases), the non-causal bias -m |t - s| as a forward plus a backward decayed RNN minus the
  diagonal term, and the first order as normalized linear attention with features (1, sqrt(c) k)
  and a scalar decay (retention-style);
- a numeric instance: decayed Taylor-N against exact ALiBi softmax (mpmath, 50 digits) within the
  D4 output bound for N = 1..10 (and not vacuous).

Numeric exports (plain Python + mpmath): ``alibi_slopes``, ``decay_from_slope``,
``slope_from_decay``.
"""

from __future__ import annotations

import math
from fractions import Fraction

from derivations import feature_maps as fm
from derivations import recurrent as rc
from derivations import truncation as tr
from derivations._record import Derivation, pick
from derivations._validate import check_dim, check_int

#: instances of the exact identities (as D2): T = 3, d <= 2, N <= 3, chunk sizes 1..4
LENGTH = 3
DIMS = (1, 2)
ORDERS = (0, 1, 2, 3)
VALUE_DIM = 2
CHUNK_SIZES = (1, 2, 3, 4)
#: orders at which kappa_N of the biased score is shown not to be geometric in t - s
BIASED_ORDERS = tuple(range(1, 7))
#: orders at which the shift identity is also checked as a polynomial identity
SHIFT_ORDERS = tuple(range(0, 9))
#: instances of the Jordan-block recurrence: T = 4 tokens, d <= 2, N <= 3
JORDAN_LENGTH = 4
JORDAN_ORDERS = (1, 2, 3)
#: (N, x, m n) of the conditioning table: the biased score x - m n is 0, kappa_N(0) = 1
CONDITIONING = ((4, 2, 2), (8, 4, 4), (12, 6, 6), (16, 8, 8))
#: the growth example: order, slope, length
GROWTH = (8, Fraction(1, 2), 4096)
#: the numeric instance (decayed Taylor-N vs exact ALiBi softmax)
NUMERIC_ORDERS = tuple(range(1, 11))
NUMERIC_SLOPE = Fraction(1, 2)


# -- exports --------------------------------------------------------------------------------------
def alibi_slopes(heads: int) -> list[float]:
    """ALiBi's per-head slopes m_h, h = 0..H-1 (Press, Smith & Lewis 2022, Sec. 3).

    For H a power of two: m_h = 2^(-8 (h + 1) / H). Otherwise, with n = 2^floor(log2 H): the n
    slopes for n heads, then the first H - n of the even-indexed slopes for 2n heads (the
    paper's reference code, ``get_slopes``). Each value is 2^(-e) for a rational e, correctly
    rounded to float (mpmath at 80 bits), so reference code that multiplies a start by a ratio
    may differ from it by a few ulps.

    Args:
        heads: H >= 1.

    Returns:
        H floats in (0, 1), for heads 0..H-1.

    Raises:
        TypeError: ``heads`` is not an int.
        ValueError: ``heads < 1``.
    """
    check_int("heads", heads)
    check_dim("heads", heads)
    exps = _slope_exponents(heads)
    import mpmath

    with mpmath.workprec(80):
        return [float(mpmath.power(2, -mpmath.mpf(e.numerator) / e.denominator)) for e in exps]


def _slope_exponents(heads: int) -> list[Fraction]:
    """Exponents e_h with m_h = 2^(-e_h) (exact rationals)."""

    def power_of_two(n: int) -> list[Fraction]:
        return [Fraction(8 * (h + 1), n) for h in range(n)]

    n = 1 << (heads.bit_length() - 1)
    if n == heads:
        return power_of_two(heads)
    return power_of_two(n) + power_of_two(2 * n)[0::2][: heads - n]


def decay_from_slope(slope: float) -> float:
    """gamma = e^(-m): the per-step decay of the RNN form of ALiBi softmax with slope m >= 0 (D12).

    Raises:
        TypeError: ``slope`` is not a real number.
        ValueError: ``slope`` is negative or not finite.
    """
    m = _real("slope", slope)
    if not (math.isfinite(m) and m >= 0):
        raise ValueError(f"slope: expected a finite number >= 0, got {slope!r}")
    return math.exp(-m)


def slope_from_decay(decay: float) -> float:
    """m = -ln gamma: the ALiBi slope of a decay gamma in (0, 1] (D12).

    Raises:
        TypeError: ``decay`` is not a real number.
        ValueError: ``decay`` is not in (0, 1].
    """
    g = _real("decay", decay)
    if not (0 < g <= 1):
        raise ValueError(f"decay: expected a number in (0, 1], got {decay!r}")
    return -math.log(g)


def _real(name: str, x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float, Fraction)):
        raise TypeError(f"{name}: expected a real number, got {type(x).__name__}")
    return float(x)


# -- symbols and statement ------------------------------------------------------------------------
def _syms():
    import sympy

    return {
        "t": sympy.Symbol("t", integer=True, nonnegative=True),
        "s": sympy.Symbol("s", integer=True, nonnegative=True),
        "n": sympy.Symbol("n", integer=True, nonnegative=True),
        "a": sympy.Symbol("a", integer=True, positive=True),
        "T": sympy.Symbol("T", integer=True, positive=True),
        "x": sympy.Symbol("x", real=True),
        "m": sympy.Symbol("m", real=True),
        "g": sympy.Symbol("gamma", positive=True),
        "f": sympy.Function("f"),
    }


def _statement(rec) -> None:
    from derivations._latex import tex

    rec.statement["decay"] = tex(
        r"e^{\,c\,q_t\cdot k_s - m(t-s)} = \gamma^{\,t-s}\, e^{\,c\,q_t\cdot k_s},"
        r"\qquad \gamma = e^{-m},\ s \le t \qquad (m \in \mathbb{R};\ \text{ALiBi: slope } m > 0)",
        claim=FACTOR,
    )
    rec.statement["state_update"] = tex(
        r"S^{(n)}_t = \gamma\, S^{(n)}_{t-1} + \tilde k_t^{\otimes n} v_t^{T},\qquad "
        r"z^{(n)}_t = \gamma\, z^{(n)}_{t-1} + \tilde k_t^{\otimes n},\qquad "
        r"S^{(n)}_0 = 0,\ z^{(n)}_0 = 0 \qquad (\tilde k_t = \sqrt{c}\, k_t,\ \gamma > 0)",
        claim=UNROLL,
    )
    rec.statement["truncation"] = tex(
        r"w_{ts} = \gamma^{\,t-s}\, e^{\,c\,q_t\cdot k_s},\ "
        r"\hat w_{ts} = \gamma^{\,t-s}\,\kappa_N(c\,q_t\cdot k_s),\qquad "
        r"|\hat w_{ts} - w_{ts}| \le \delta_N(r)\, w_{ts}\ \text{ with } "
        r"r = \max_{s \le t} |c\,q_t\cdot k_s|\ \text{(D4's output bound where } "
        r"\delta_N(r) < 1)",
        claim=RELATIVE,
    )
    rec.statement["non_causal"] = tex(
        r"\sum_{s=1}^{T} \gamma^{\lvert t-s\rvert} w_{ts} v_s = \overrightarrow{N}_t + "
        r"\overleftarrow{N}_t - w_{tt} v_t \qquad \Bigl(\overrightarrow{N}_t = "
        r"\sum_{s \le t} \gamma^{t-s} w_{ts} v_s,\ \overleftarrow{N}_t = "
        r"\sum_{s \ge t} \gamma^{s-t} w_{ts} v_s\Bigr)",
        claim=NON_CAUSAL,
    )


#: claim names the statement cites
FACTOR = "exp(x - m n) = gamma^n exp(x), gamma = e^(-m) (all real x, m, integer n >= 0)"
UNROLL = "the decayed recursion unrolls to sum_{s<=t} gamma^(t-s) f(s) (all t)"
RELATIVE = "relative weight error of gamma^n kappa_N(x) = that of kappa_N(x) (gamma > 0)"
NON_CAUSAL = "non-causal decayed parallel == forward RNN + backward RNN - diagonal"


# -- general claims -------------------------------------------------------------------------------
def _claim_factor(rec, f) -> None:
    import sympy

    x, m, n = pick(_syms(), "x", "m", "n")
    sign = f["bias_sign"]
    lhs = sympy.exp(x - sign * m * n)
    rhs = sympy.exp(-m) ** n * sympy.exp(x)
    rec.step(
        r"The bias factors out of the exponential: with $n = t - s \ge 0$ the biased weight is "
        r"the unbiased one times $\gamma^n$, $\gamma = e^{-m}$ (for a slope $m > 0$, "
        r"$0 < \gamma < 1$).",
        sympy.Eq(sympy.exp(x - m * n), sympy.exp(-m) ** n * sympy.exp(x), evaluate=False),
    )
    rec.prove(
        FACTOR,
        lambda: sympy.simplify(lhs - rhs) == 0,
        "symbolic x, m, n; sympy simplify",
    )


def _claim_sign(rec) -> None:
    """A flipped bias (+m (t - s)) grows with distance: not the decay gamma = e^(-m)."""
    import sympy

    x, m, n = pick(_syms(), "x", "m", "n")
    wrong = sympy.exp(x + m * n) - sympy.exp(-m) ** n * sympy.exp(x)
    rec.prove(
        "the flipped bias +m (t - s) is not the decay e^(-m) (m != 0, n >= 1)",
        lambda: sympy.simplify(wrong.subs({n: 1, x: 0}) - 2 * sympy.sinh(m)) == 0,
        "at n = 1, x = 0 the difference is e^m - e^(-m) = 2 sinh m, zero only at m = 0",
    )


def _claim_unroll(rec) -> None:
    import sympy
    from sympy.series.limitseq import difference_delta

    t, s_, g, fn = pick(_syms(), "t", "s", "g", "f")
    scaled = sympy.Sum(fn(s_) / g**s_, (s_, 1, t))
    decayed = sympy.Sum(g ** (t - s_) * fn(s_), (s_, 1, t))
    rec.step(
        r"Unrolling: $S_t = \gamma S_{t-1} + f(t)$, $S_0 = 0$ has the one solution "
        r"$S_t = \sum_{s \le t} \gamma^{t-s} f(s)$: divide by $\gamma^t$, and "
        r"$U_t = S_t / \gamma^t$ obeys $U_t - U_{t-1} = f(t) / \gamma^t$, the undecayed "
        r"recursion of D2.",
        sympy.Eq(decayed, g**t * scaled, evaluate=False),
    )
    rec.prove(
        UNROLL,
        lambda: (
            sympy.simplify(difference_delta(scaled, t) - fn(t + 1) / g ** (t + 1)) == 0
            and sympy.simplify(decayed - g**t * scaled) == 0
            and decayed.subs(t, 0).doit() == 0
        ),
        "symbolic t, gamma > 0, undefined f; difference_delta of the rescaled sum",
    )


def _claim_chunk(rec, f) -> None:
    import sympy

    t, s_, a_, g, fn = pick(_syms(), "t", "s", "a", "g", "f")
    extra = f["chunk_decay_extra"]
    before = sympy.Sum(g ** (a_ - 1 - s_) * fn(s_), (s_, 1, a_ - 1))
    inside = sympy.Sum(g ** (t - s_) * fn(s_), (s_, a_, t))
    full = sympy.Sum(g ** (t - s_) * fn(s_), (s_, 1, t))
    rec.step(
        r"Chunked: for a chunk starting at $a \le t$, the state before the chunk (tokens "
        r"$s \le a-1$, decayed to time $a-1$) is read decayed by $\gamma^{t-a+1}$, and the "
        r"intra-chunk part is the decayed parallel sum over $s = a, \dots, t$; together they are "
        r"the decayed prefix sum.",
        sympy.Eq(g ** (t - a_ + 1) * before + inside, full, evaluate=False),
    )
    rec.prove(
        "gamma^(t-a+1) S_{a-1} + sum_{s=a..t} gamma^(t-s) f(s) = S_t (all a <= t)",
        lambda: sympy.simplify(g ** (t - a_ + 1 + extra) * before + inside - full) == 0,
        "symbolic a, t, gamma > 0; sympy merges the adjacent ranges",
    )


def _claim_relative(rec) -> None:
    """The decay cancels in the relative weight error, so D4 applies with the score radius."""
    import sympy

    x, n, g = pick(_syms(), "x", "n", "g")
    kap = sympy.Function("kappa_N")(x)
    rel_decayed = (g**n * kap - g**n * sympy.exp(x)) / (g**n * sympy.exp(x))
    rel_plain = (kap - sympy.exp(x)) / sympy.exp(x)
    rec.step(
        r"Truncation: the decayed weight $\gamma^{t-s} e^x$ and its truncation "
        r"$\gamma^{t-s} \kappa_N(x)$ share the factor $\gamma^{t-s} > 0$, so their relative "
        r"error is D4's $g_N(x) = 1 - \kappa_N(x) e^{-x}$; with $|x| \le r$ the weights' "
        r"relative errors are at most $\delta_N(r)$ and D4's output bound "
        r"$B(\delta) \max_s |v_s|$ holds whenever $\delta_N(r) < 1$. The radius $r$ is that of "
        r"$c\, q \cdot k$ alone: the bias $-m(t-s)$ does not enter it.",
        sympy.Eq(rel_decayed, rel_plain, evaluate=False),
    )
    rec.prove(
        RELATIVE,
        lambda: sympy.simplify(rel_decayed - rel_plain) == 0,
        "symbolic gamma > 0, n, x and kappa_N(x)",
    )


def _claim_biased_not_rnn(rec, f) -> None:
    """kappa_N(x - m n) is a nonconstant polynomial in n: never gamma^n h(x) (N >= 1, m != 0)."""
    import sympy

    x, m, n = pick(_syms(), "x", "m", "n")
    g = sympy.Symbol("gamma")
    nn = sympy.Symbol("n")

    def no_decay_fits(order):
        def check():
            p = sum((x - m * nn) ** j / sympy.factorial(j) for j in range(order + 1))
            # a decayed RNN with time-invariant features needs p(n + 1) = gamma p(n) for all n
            coeffs = sympy.Poly(sympy.expand(p.subs(nn, nn + 1) - g * p), nn).all_coeffs()
            sols = sympy.solve(coeffs, [g], dict=True)
            fits = [sol for sol in sols if all(sympy.simplify(c.subs(sol)) == 0 for c in coeffs)]
            return fits == [] if f["biased_fits"] is False else fits != []

        return check

    rec.step(
        r"$\kappa_N$ of the biased score has no *scalar* decay: a scalar-decay recurrence with "
        r"time-invariant features gives weights $\gamma^{t-s} h(q, k)$, geometric in "
        r"$n = t - s$, but $p(n) = \kappa_N(x - m n)$ is a polynomial of degree $N$ in $n$ "
        r"(leading coefficient $(-m)^N / N!$): $p(n+1) = \gamma\, p(n)$ forces $\gamma = 1$, "
        r"and then $p(n+1) - p(n)$ has the nonzero leading coefficient $(-m)^N / (N-1)!$. "
        r"A finite-state recurrence with a matrix transition still computes it (next steps).",
    )
    for order in BIASED_ORDERS:
        rec.verify(
            f"no gamma with kappa_{order}(x - m(n+1)) = gamma kappa_{order}(x - m n) for all n",
            no_decay_fits(order),
            "symbolic x, m (m != 0 generic), gamma; coefficients in n solved for gamma",
        )


SHIFT = (
    "kappa_N(x + y) = sum_{j=0}^{N} y^j / j! kappa_{N-j}(x) (all N >= 0): both sides are "
    "sum_{i+j<=N} x^i y^j / (i! j!)"
)
JORDAN = (
    "biased Taylor-N == Jordan-block recurrence R_t = exp(-m J) R_{t-1} + e_0 phi(k_t) v_t^T, "
    "read out sum_j <phi_{N-j}(q_t), R^(j)_t>"
)


def _claim_biased_recurrence(rec, f) -> None:
    """kappa_N(x - m n) by the shift identity: exact recurrence, Jordan-block transition."""
    import sympy

    from derivations._latex import tex

    i, j = sympy.symbols("i j", integer=True, nonnegative=True)
    x, y = sympy.symbols("x y")
    rec.statement["biased"] = tex(
        r"\kappa_N(x - m n) = \sum_{j=0}^{N} \frac{(-m n)^j}{j!}\, \kappa_{N-j}(x) \qquad "
        r"(x, m \in \mathbb{R},\ n \ge 0,\ N \ge 0)",
        claim=SHIFT,
    )
    rec.statement["biased_recurrence"] = tex(
        r"R^{(i)}_t = \sum_{l=0}^{i} \frac{(-m)^{i-l}}{(i-l)!} R^{(l)}_{t-1} + "
        r"[i = 0]\, \phi(\tilde k_t) v_t^{T},\quad N_t = \sum_{j=0}^{N} "
        r"\langle \phi_{N-j}(\tilde q_t), R^{(j)}_t \rangle \qquad \Bigl(R^{(i)}_t = "
        r"\sum_{s \le t} \tfrac{(-m (t-s))^i}{i!}\, \phi_{N-j}(\tilde k_s) v_s^{T},\ "
        r"0 \le i \le j;\ \text{exact, numerically poor}\Bigr)",
        claim=f"{JORDAN} (symmetric basis)",
    )
    rec.step(
        r"The shift identity: both sides of $\kappa_N(x + y) = \sum_{j \le N} \frac{y^j}{j!} "
        r"\kappa_{N-j}(x)$ are $\sum_{i + j \le N} x^i y^j / (i!\, j!)$ -- on the left by "
        r"the binomial theorem, the coefficient of $x^i y^j$ in $(x+y)^{i+j}/(i+j)!$ being "
        r"$\binom{i+j}{i} / (i+j)!$; on the right by expanding $\kappa_{N-j}(x)$, whose terms "
        r"$i \le N - j$ are the triangle $i + j \le N$. The coefficient:",
        sympy.Eq(
            sympy.binomial(i + j, i) / sympy.factorial(i + j),
            1 / (sympy.factorial(i) * sympy.factorial(j)),
            evaluate=False,
        ),
    )

    def coefficient():
        return sympy.simplify(
            sympy.expand_func(
                sympy.binomial(i + j, i) / sympy.factorial(i + j)
                - 1 / (sympy.factorial(i) * sympy.factorial(j))
            )
        )

    rec.prove(
        SHIFT,
        lambda: coefficient() == 0,
        "symbolic i, j >= 0 (so every N): binomial(i+j, i)/(i+j)! = 1/(i! j!), sympy "
        "expand_func; the triangle i + j <= N is the index set of both sides",
    )

    def kap(order, arg):
        return sum(arg**n / sympy.factorial(n) for n in range(order + 1))

    rec.verify(
        "shift identity as a polynomial identity in x, y",
        lambda: all(
            sympy.expand(
                kap(order, x + y)
                - sum(y**jj / sympy.factorial(jj) * kap(order - jj, x) for jj in range(order + 1))
            )
            == 0
            for order in SHIFT_ORDERS
        ),
        f"N = {SHIFT_ORDERS[0]}..{SHIFT_ORDERS[-1]} (an independent re-check of the proof)",
    )
    rec.step(
        r"The recurrence: with $y = -m n$ and $\kappa_{N-j}(c\, q \cdot k) = "
        r"\langle \phi_{N-j}(\tilde q), \phi_{N-j}(\tilde k) \rangle$ (D1, orders "
        r"$\le N - j$), the biased numerator is $\sum_j \langle \phi_{N-j}(\tilde q_t), "
        r"R^{(j)}_t \rangle$ with $R^{(i)}_t = \sum_{s \le t} (-m(t-s))^i / i!\, "
        r"\phi(\tilde k_s) v_s^T$. As $(t - s)^i / i! = \sum_{l \le i} (t-1-s)^l / l! \cdot "
        r"1/(i-l)!$ (the binomial theorem again), the states of one feature obey "
        r"$R_t = e^{-m J} R_{t-1} + e_0\, \phi(\tilde k_t) v_t^T$ with $J$ the nilpotent shift "
        r"$(J R)^{(i)} = R^{(i-1)}$: a unipotent transition, similar to one Jordan block, whose "
        r"state of order $i$ carries polynomials of degree $i$ in $n$. The decay "
        r"$\gamma = e^{-m}$ of the unbiased score is its scalar analogue. Instances: symbolic "
        r"$q, k, v, m$ and $r = \sqrt{c}$ in $\mathbb{Q}[m, r, q, k, v]$, numerator and "
        r"denominator, against the parallel form with $\kappa_N$ from sympy's series of exp.",
    )

    def jordan(basis):
        def check():
            for d in DIMS:
                m, r, q, k, v, one = _ring(JORDAN_LENGTH, d, VALUE_DIM)
                ones = [[one] for _ in range(JORDAN_LENGTH)]
                for order in JORDAN_ORDERS:
                    coeffs = _exp_coeffs(order)
                    for vals in (v, ones):
                        ref = _biased_parallel(q, k, vals, r, m, coeffs, one)
                        rows = _jordan_scan(q, k, vals, order, r, m, basis, f, one)
                        if rc._same(rows, ref) != f["biased_recurrence_exists"]:
                            return False
            return True

        return check

    for basis in ("tensor", "symmetric"):
        rec.verify(
            f"{JORDAN} ({basis} basis)",
            jordan(basis),
            f"T = {JORDAN_LENGTH}, d in {DIMS}, N in {JORDAN_ORDERS}, d_v = {VALUE_DIM}, "
            "symbolic m; numerator and denominator separately",
        )
    _claim_biased_conditioning(rec)


def _biased_parallel(q, k, v, r, m, coeffs, one):
    """sum_{s <= t} kappa_N(r^2 q_t.k_s - m (t - s)) v_s (kappa_N from sympy's series of exp)."""
    rows = []
    for t in range(len(q)):
        num = [0 * one] * len(v[0])
        for s in range(t + 1):
            w = rc._kappa(r * r * rc._dot(q[t], k[s], one) - m * (t - s), coeffs, one)
            num = [acc + w * vj for acc, vj in zip(num, v[s])]
        rows.append(num)
    return rows


def _jordan_scan(q, k, v, order, r, m, basis, f, one):
    """R^(j) blocks (j = 0..N) over the features of orders <= N - j; transition exp(-m J)."""
    from sympy import QQ

    step = [QQ(1, math.factorial(p)) * (-m) ** p for p in range(order + 1)]
    blocks = [None] * (order + 1)  # blocks[j][i]: the order-i state over phi_{N-j}
    rows = []
    for t in range(len(q)):
        out = [0 * one] * len(v[t])
        for j in range(order + 1):
            kf = rc._features([r * x for x in k[t]], order - j, basis, f, one)
            if blocks[j] is None:
                blocks[j] = [[[0 * one] * len(v[t]) for _ in kf] for _ in range(j + 1)]
            old = blocks[j]
            new = []
            for i in range(j + 1):
                st = [
                    [sum((step[i - l] * old[l][a][b] for l in range(i + 1)), 0 * one)
                     for b in range(len(v[t]))]
                    for a in range(len(kf))
                ]  # fmt: skip
                if i == 0:
                    st = [[sj + mono * vj for sj, vj in zip(row, v[t])]
                          for row, (_, mono) in zip(st, kf)]  # fmt: skip
                new.append(st)
            blocks[j] = new
            qf = rc._features([r * x for x in q[t]], order - j, basis, f, one)
            out = [o + x for o, x in zip(out, rc._readout(qf, new[j]))]
        rows.append(out)
    return rows


def biased_recurrence_conditioning(order: int, score, shift) -> list:
    """[exact, sum |a_j|, condition, rel. error float32, bound float32, rel. error float64,
    bound float64] of kappa_N(x - y) = sum_j a_j, a_j = (-y)^j / j! kappa_{N-j}(x) (D12).

    The terms a_j are what the Jordan-block recurrence reads out for one key at distance n
    (y = m n); each is rounded once to the format and summed left to right, every operation
    rounded exactly (D10's ``round_to_bits``). The bound gamma_{N+1}(u) sum |a_j| / |exact| is
    Higham's (eq. 4.4 with one rounding per term); the condition is sum |a_j| / |exact|.

    Raises:
        TypeError / ValueError: ``order`` not an int >= 0; ``score``, ``shift`` not rationals.
    """
    from derivations.rounding import gamma, round_to_bits

    order = check_int("order", order, 0)
    x, y = Fraction(score), Fraction(shift)
    terms = [
        Fraction((-y) ** j) / math.factorial(j) * tr.kappa(order - j, x) for j in range(order + 1)
    ]
    exact = tr.kappa(order, x - y)
    total = sum(abs(a) for a in terms)
    out = [float(exact), float(total), float(total / abs(exact))]
    for bits, emin in ((24, -126), (53, -1022)):
        acc = Fraction(0)
        for a in terms:
            acc = round_to_bits(acc + round_to_bits(a, bits, emin), bits, emin)
        u = 2.0**-bits
        out += [float(abs(acc - exact) / abs(exact)), gamma(order + 1, u) * out[2]]
    return out


def _claim_biased_conditioning(rec) -> None:
    rows = [[n, x, y] + biased_recurrence_conditioning(n, x, y) for n, x, y in CONDITIONING]
    rec.tables["biased_conditioning"] = (
        [
            "N",
            "x",
            "m n",
            "kappa_N(x - m n)",
            "sum |a_j|",
            "condition",
            "rel. error float32",
            "bound float32",
            "rel. error float64",
            "bound float64",
        ],
        rows,
    )
    order, slope, length = GROWTH
    grow = max(Fraction((slope * length) ** i) / math.factorial(i) for i in range(order + 1))
    rec.step(
        r"Exact but numerically poor: the terms $a_j = (-m n)^j / j!\, \kappa_{N-j}(x)$ "
        r"alternate in sign and grow like $(m n)^j / j!$ while their sum may be small. The table "
        r"puts the biased score at $x - m n = 0$ ($\kappa_N(0) = 1$): each term rounded once, "
        r"summed left to right, every rounding exact (D10's emulation); the observed relative "
        r"error follows the condition $\sum_j \lvert a_j \rvert / \lvert \kappa_N \rvert$ "
        r"and stays within Higham's $\gamma_{N+1}(u)$ times it; at "
        f"N = {CONDITIONING[-1][0]} (condition {rows[-1][5]:.2g}) the float32 sum is off by "
        f"{rows[-1][6]:.1%} of the exact 1. The states grow too: the "
        rf"order-$i$ state of one key holds $(m t)^i / i!$, {float(grow):.2g} at "
        rf"$N = {order}$, $m = {slope}$, $T = {length}$ (float16's largest is 65504). And "
        r"$\kappa_N(x - m n)$ approximates $e^{x - m n}$ only while $\lvert x - m n \rvert$ is "
        r"within D4's radius; the decayed form $\gamma^n \kappa_N(x)$ keeps the bias exact.",
    )
    rec.verify(
        "the biased recurrence is ill-conditioned: float32 errors within gamma_{N+1}(u) times the "
        "condition, which exceeds 1e3 from N = 8, x = m n = 4 on",
        lambda: (
            all(r[6] <= r[7] and r[8] <= r[9] for r in rows)
            and all(r[5] > 1e3 for r in rows[1:])
            and rows[-1][6] > 1e-2
        ),
        f"(N, x, m n) in {CONDITIONING}, float32 and float64 emulated exactly",
    )


# -- exact instances ------------------------------------------------------------------------------
def _ring(length, d, d_v):
    """QQ[g, r, q.., k.., v..] with g = gamma and r = sqrt(c); returns (g, r, q, k, v, one)."""
    from sympy import QQ
    from sympy.polys.rings import ring

    names = ["g", "r"]
    names += [f"q{t}_{i}" for t in range(1, length + 1) for i in range(1, d + 1)]
    names += [f"k{t}_{i}" for t in range(1, length + 1) for i in range(1, d + 1)]
    names += [f"v{t}_{j}" for t in range(1, length + 1) for j in range(1, d_v + 1)]
    ring_, *gens = ring(",".join(names), QQ)
    g, r, rest = gens[0], gens[1], gens[2:]
    q = [rest[t * d : (t + 1) * d] for t in range(length)]
    rest = rest[length * d :]
    k = [rest[t * d : (t + 1) * d] for t in range(length)]
    rest = rest[length * d :]
    v = [rest[t * d_v : (t + 1) * d_v] for t in range(length)]
    return g, r, q, k, v, ring_.one


def _weight(qt, ks, r, g, dist, coeffs, one):
    return g**dist * rc._kappa(r * r * rc._dot(qt, ks, one), coeffs, one)


def _parallel(q, k, v, r, g, coeffs, one, causal=True):
    rows = []
    for t in range(len(q)):
        num = [0 * one] * len(v[0])
        for s in range(len(k)) if not causal else range(t + 1):
            w = _weight(q[t], k[s], r, g, abs(t - s), coeffs, one)
            num = [acc + w * vj for acc, vj in zip(num, v[s])]
        rows.append(num)
    return rows


def _scan(q, k, v, order, r, g, basis, f, one, order_of_tokens):
    """Decayed recurrent form over tokens in ``order_of_tokens``: S <- g S + phi(k) v^T."""
    rows = {}
    state = None
    for t in order_of_tokens:
        kf = rc._features([r * x for x in k[t]], order, basis, f, one)
        if state is None:
            state = [[0 * one] * len(v[t]) for _ in kf]
        state = [[g * sj + m * vj for sj, vj in zip(st, v[t])] for st, (_, m) in zip(state, kf)]
        rows[t] = rc._readout(rc._features([r * x for x in q[t]], order, basis, f, one), state)
    return [rows[t] for t in range(len(q))]


def _chunked(q, k, v, order, r, g, basis, chunk, f, one):
    """Decayed chunked form: state before the chunk read with g^(t-a+1), intra-chunk parallel."""
    from sympy import QQ

    coeffs = [QQ.convert(fm.to_sympy(f["taylor_coefficient"](n))) for n in range(order + 1)]
    n_feat = len(rc._features([r * x for x in k[0]], order, basis, f, one))
    state = [[0 * one] * len(v[0]) for _ in range(n_feat)]
    rows = []
    for a, b in rc.chunk_bounds(len(q), chunk):
        for t in range(a, b):
            qf = rc._features([r * x for x in q[t]], order, basis, f, one)
            decay = g ** (t - a + 1 + f["chunk_decay_extra"])
            out = [decay * x for x in rc._readout(qf, state)]
            for s in range(a, t + 1):
                w = _weight(q[t], k[s], r, g, t - s, coeffs, one)
                out = [o + w * vj for o, vj in zip(out, v[s])]
            rows.append(out)
        for s in range(a, b):  # state after the chunk, decayed to time b - 1
            kf = rc._features([r * x for x in k[s]], order, basis, f, one)
            state = [[g * sj + m * vj for sj, vj in zip(st, v[s])] for st, (_, m) in zip(state, kf)]
    return rows


def _exp_coeffs(order):
    import sympy
    from sympy import QQ

    tt = sympy.Dummy("t")
    series = sympy.series(sympy.exp(tt), tt, 0, order + 1).removeO()
    return [QQ.convert(series.coeff(tt, n)) for n in range(order + 1)]


def _claim_forms_agree(rec, f) -> None:
    rec.step(
        r"Instances: symbolic $q_t$, $k_t$ ($d$ entries), $v_t$ ($d_v = 2$), $r = \sqrt{c}$ "
        r"and the decay $\gamma$, in the polynomial ring $\mathbb{Q}[\gamma, r, q, k, v]$; "
        r"the decayed parallel form $\sum_s \gamma^{t-s} \kappa_N(c\, q_t \cdot k_s) v_s$ "
        r"($\kappa_N$ from sympy's series of exp) is compared, numerator and denominator "
        r"($v = 1$) separately, with the decayed recurrent and chunked forms built from the "
        r"exported feature maps. At $N = 1$ the recurrent form is normalized linear attention "
        r"with features $(1, \sqrt{c}\, k)$ and a scalar decay (retention-style).",
    )

    def agree(basis):
        def check():
            for d in DIMS:
                g, r, q, k, v, one = _ring(LENGTH, d, VALUE_DIM)
                ones = [[one] for _ in range(LENGTH)]
                for order in ORDERS:
                    coeffs = _exp_coeffs(order)
                    for vals in (v, ones):
                        ref = _parallel(q, k, vals, r, g, coeffs, one)
                        causal = range(LENGTH)
                        rows = _scan(q, k, vals, order, r, g, basis, f, one, causal)
                        if not rc._same(rows, ref):
                            return False
                        for chunk in CHUNK_SIZES:
                            rows = _chunked(q, k, vals, order, r, g, basis, chunk, f, one)
                            if not rc._same(rows, ref):
                                return False
            return True

        return check

    detail = (
        f"T = {LENGTH}, d in {DIMS}, N in {ORDERS}, d_v = {VALUE_DIM}, chunk sizes "
        f"{CHUNK_SIZES}, symbolic gamma; numerator and denominator separately"
    )
    for basis in ("tensor", "symmetric"):
        rec.verify(
            f"decayed parallel == recurrent == chunked ({basis} basis)", agree(basis), detail
        )


def _claim_non_causal(rec, f) -> None:
    import sympy

    t, s_, big_t, h = pick(_syms(), "t", "s", "T", "f")
    rec.step(
        r"Non-causal bias $-m|t - s|$: the forward decayed RNN holds $s \le t$, the backward "
        r"one (run from $s = T$ down) holds $s \ge t$; both contain the diagonal $s = t$, so it "
        r"is subtracted once.",
        sympy.Eq(
            sympy.Sum(h(s_), (s_, 1, t)) + sympy.Sum(h(s_), (s_, t + 1, big_t)),
            sympy.Sum(h(s_), (s_, 1, big_t)),
            evaluate=False,
        ),
    )
    rec.prove(
        "sum_{s<=t} + sum_{s>=t} - (s = t) = sum over all s (all 1 <= t <= T)",
        lambda: (
            sympy.simplify(
                sympy.Sum(h(s_), (s_, 1, t))
                + sympy.Sum(h(s_), (s_, t + 1, big_t))
                - sympy.Sum(h(s_), (s_, 1, big_t))
            )
            == 0
        ),
        "symbolic t, T; the backward sum over s >= t is h(t) + sum_{s=t+1..T}",
    )

    def check():
        for d in DIMS:
            g, r, q, k, v, one = _ring(LENGTH, d, VALUE_DIM)
            for order in ORDERS:
                coeffs = _exp_coeffs(order)
                ref = _parallel(q, k, v, r, g, coeffs, one, causal=False)
                fwd = _scan(q, k, v, order, r, g, "symmetric", f, one, range(LENGTH))
                bwd = _scan(q, k, v, order, r, g, "symmetric", f, one, range(LENGTH - 1, -1, -1))
                diag = [
                    [_weight(q[t], k[t], r, g, 0, coeffs, one) * vj for vj in v[t]]
                    for t in range(LENGTH)
                ]
                rows = [
                    [a + b - c for a, b, c in zip(ra, rb, rd)] for ra, rb, rd in zip(fwd, bwd, diag)
                ]
                if not rc._same(rows, ref):
                    return False
        return True

    rec.verify(
        NON_CAUSAL,
        check,
        f"T = {LENGTH}, d in {DIMS}, N in {ORDERS}, symmetric basis, symbolic gamma",
    )


# -- numeric instance -----------------------------------------------------------------------------
def _numeric_instance():
    """Fixed rational q, k, v (T = 6, d = 2): exact-ish ALiBi softmax vs decayed Taylor-N."""
    import random

    rng = random.Random(12)

    def frac():
        return Fraction(rng.randint(-12, 12), 8)

    length, d = 6, 2
    q = [[frac() for _ in range(d)] for _ in range(length)]
    k = [[frac() for _ in range(d)] for _ in range(length)]
    v = [Fraction(rng.randint(-8, 8), 8) for _ in range(length)]
    return q, k, v


def agreement_table(orders=NUMERIC_ORDERS, slope=NUMERIC_SLOPE) -> list[list]:
    """Rows (N, max |o_N - o|, D4 bound, ratio) of decayed Taylor-N vs ALiBi softmax (D12).

    The instance is fixed (T = 6, d = 2, rational q, k, v in [-1.5, 1.5], scale c = 1/2, causal
    ALiBi slope ``slope``); o is ALiBi softmax at 50 digits (mpmath), o_N the decayed Taylor-N
    attention sum_s gamma^(t-s) kappa_N(x_ts) v_s / sum_s gamma^(t-s) kappa_N(x_ts); the bound is
    D4's B(delta_N(r)) max|v| with r the radius of c q.k (bias excluded), None where
    delta_N(r) >= 1 (no bound).
    """
    import mpmath

    q, k, v = _numeric_instance()
    c = Fraction(1, 2)
    scores = [
        [c * sum(a * b for a, b in zip(q[t], k[s])) for s in range(t + 1)] for t in range(len(q))
    ]
    radius = max(abs(x) for row in scores for x in row)
    vmax = max(abs(x) for x in v)
    rows = []
    with mpmath.workdps(50):
        gam = mpmath.exp(-mpmath.mpf(slope.numerator) / slope.denominator)

        def out(kernel):
            res = []
            for t, row in enumerate(scores):
                w = [gam ** (t - s) * kernel(x) for s, x in enumerate(row)]
                num = sum(wi * mpmath.mpf(vi.numerator) / vi.denominator for wi, vi in zip(w, v))
                res.append(num / sum(w))
            return res

        def mpq(x: Fraction):
            return mpmath.mpf(x.numerator) / x.denominator

        exact = out(lambda x: mpmath.exp(mpq(x)))
        for order in orders:
            approx = out(lambda x, n=order: mpq(tr.kappa(n, x)))
            err = float(max(abs(a - b) for a, b in zip(approx, exact)))
            dlt = tr.delta(order, radius)
            bound = tr.output_error_bound(dlt) * float(vmax) if dlt < 1 else None
            rows.append([order, err, bound, None if bound is None else err / bound])
    return rows


def _claim_numeric(rec) -> None:
    rows = agreement_table()
    rec.tables["alibi_agreement"] = (
        ["N", "max |o_N - o| (ALiBi softmax)", "D4 bound B(delta_N(r)) max|v|", "ratio"],
        rows,
    )

    def check():
        bounded = [r for r in rows if r[2] is not None]
        return (
            len(bounded) >= 3
            and all(r[1] <= r[2] for r in bounded)
            and max(r[3] for r in bounded) > 1e-3
        )

    rec.verify(
        "decayed Taylor-N within D4's bound of ALiBi softmax (bias outside the radius)",
        check,
        f"one instance T = 6, d = 2, slope {NUMERIC_SLOPE}, N in "
        f"{NUMERIC_ORDERS[0]}..{NUMERIC_ORDERS[-1]}; bound not vacuous (max ratio > 1e-3)",
    )


def _claim_slopes(rec) -> None:
    def check():
        import mpmath

        for heads in (1, 2, 4, 8, 16, 32):
            e = _slope_exponents(heads)  # exact: e_h = 8 (h + 1) / H, a progression of 8 / H
            if e != [Fraction(8, heads) * (h + 1) for h in range(heads)]:
                return False
            with mpmath.workprec(200):  # an independent evaluation: exp(-e ln 2)
                ref = [
                    mpmath.exp(-mpmath.mpf(x.numerator) / x.denominator * mpmath.ln(2)) for x in e
                ]
                got = alibi_slopes(heads)
                if any(abs(g - r) > math.ulp(g) / 2 for g, r in zip(got, ref)):
                    return False
        s12 = _slope_exponents(12)  # 8 exponents of H = 8, then 4 of the even-indexed ones for 16
        return s12 == _slope_exponents(8) + _slope_exponents(16)[0::2][:4]

    rec.verify(
        "reference slopes: 2^(-8(h+1)/H) for H a power of two (correctly rounded); "
        "interleaved otherwise",
        check,
        "H in {1, 2, 4, 8, 16, 32} (exact exponents; floats within 1/2 ulp of a 200-bit "
        "exp(-e ln 2)) and H = 12",
    )


def derive(**wrong) -> Derivation:
    """Build the D12 record: ALiBi softmax as an infinite sum of decayed linear RNNs.

    Keyword overrides (wrong-statement tests): ``bias_sign`` (1 right; -1 puts the bias
    +m (t - s) in the factorization), ``chunk_decay_extra`` (0 right; 1 decays the state read
    in the chunked form once too often), ``biased_fits`` (False right; True claims a decay
    fits kappa_N of the biased score), ``biased_recurrence_exists`` (True right; False states
    the old claim that no recurrence computes kappa_N of the biased score),
    ``taylor_coefficient`` / ``multi_indices`` / ``monomial_weight`` (feature-map exports).

    Raises:
        TypeError: an unknown override name.
    """
    f = fm.resolve_overrides(
        wrong,
        {
            "taylor_coefficient": fm.taylor_coefficient,
            "multi_indices": fm.multi_indices,
            "monomial_weight": fm.monomial_weight,
            "bias_sign": 1,
            "chunk_decay_extra": 0,
            "biased_fits": False,
            "biased_recurrence_exists": True,
        },
    )
    rec = Derivation("D12", "ALiBi and decay: causal softmax with a linear bias as decayed RNNs")
    rec.cite(
        "ALiBi: the score of key s at query t gets the bias -m (t - s), one slope m per head, "
        "the slopes a geometric sequence",
        "Press, Smith & Lewis, 'Train Short, Test Long: Attention with Linear Biases Enables "
        "Input Length Extrapolation', ICLR 2022, Sec. 3",
        "the form and the slopes; its decayed-RNN form and the bounds below are this project's",
    )
    _statement(rec)
    _claim_factor(rec, f)
    _claim_sign(rec)
    _claim_unroll(rec)
    _claim_chunk(rec, f)
    _claim_relative(rec)
    _claim_biased_not_rnn(rec, f)
    _claim_biased_recurrence(rec, f)
    _claim_forms_agree(rec, f)
    _claim_non_causal(rec, f)
    _claim_numeric(rec)
    _claim_slopes(rec)
    rec.exports = ["alibi_slopes", "decay_from_slope", "slope_from_decay"]
    return rec


if __name__ == "__main__":
    from derivations._record import main_for

    main_for(derive)

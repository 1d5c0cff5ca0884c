"""D11. Dependence without a kernel: reordered sums and the leak decision rule.

The structural properties (causality, prefix invariance, batch and head independence,
permutation equivariance, linearity in v) compare two computations of outputs whose exact values
are equal, and must do so for any attention, whatever its kernel. The only rounding they may
allow is what two correct computations of the same rows can differ by: the rows read the same
inputs and compute the same weights, but the sums over keys may be evaluated in another order
(a matmul blocked differently for another sequence length, masked terms that are exact zeros,
another batch layout). Results derived here:

* Any evaluation of a sum of n terms a_i in floating point with unit roundoff u, in any order
  (any summation tree), satisfies |fl(sum a_i) - sum a_i| <= gamma_{n-1} sum |a_i| (Higham 2002,
  eq. (4.4) and Section 4.2) -- cited.
* Two such evaluations of the same terms differ by at most 2 gamma_{n-1} sum |a_i|, and the bound
  is attained in the limit (proved: the difference of two errors in [-gA, gA]).
* For an output o = N / D with N = sum_s w_s v_s and D = sum_s w_s both evaluated in two orders
  (and one division each), |o_1 - o_2| <= tau (A + |o| B) + 2 u |o| + O(u^2) with
  tau = 2 gamma_{n-1}, A = sum_s |w_s v_s| / |D| and B = sum_s |w_s| / |D|: in terms of the
  normalized weights W_s = w_s / D a variant computes, A = sum |W_s v_s| and B = sum |W_s|
  (proved to first order).
* The decision rule: call "leak" a measured difference m above the threshold T = tau (A + |o| B)
  + 2 u |o|. A correct pair (no dependence, difference only from reordering) never exceeds T
  (no false alarm); a true dependence of size l (the exact outputs differ by l) gives
  m >= l - T, so every l > 2 T is flagged (proved). The detectable size is therefore 2 T.

Numeric exports (plain Python floats): ``reorder_threshold``, ``detectable_leak``,
``ratio_difference_bound``.
"""

from __future__ import annotations

from fractions import Fraction

from derivations._latex import tex
from derivations._record import Derivation, main_for
from derivations._validate import check_int, check_real
from derivations.rounding import gamma, round_to_bits, unit_roundoff

#: the dtypes of the table of thresholds, and the term counts shown
TABLE_DTYPES = ("float64", "float32", "bfloat16", "float16")
TABLE_TERMS = (8, 64, 1024)
#: floating formats emulated exactly for the instance check: (precision bits, min exponent)
_EMULATED = {"binary16": (11, -14), "bfloat16": (8, -126)}


# -- numeric exports --------------------------------------------------------------------------
def reorder_threshold(n: int, u: float) -> float:
    """tau = 2 gamma_{n-1}(u): two evaluations of the same n-term sum, in any orders, differ by
    at most tau times the sum of the terms' magnitudes (D11).

    Raises:
        TypeError, ValueError: ``n`` not an int >= 1, ``u`` not in (0, 1), or (n-1) u >= 1.
    """
    n = check_int("n", n, 1)
    return 2.0 * gamma(n - 1, u)


def ratio_difference_bound(n: int, u: float, A: float, B: float, o_abs: float) -> float:
    """The leak threshold T of an output o = N / D whose numerator and denominator are n-term
    sums evaluated in two orders, with one division each (D11, first order in u):
    T = tau (A + |o| B) + 2 u |o| with A = sum |W_s v_s|, B = sum |W_s| (W = w / D).

    Raises:
        TypeError, ValueError: bad ``n`` or ``u``; a negative or non-finite A, B or |o|.
    """
    tau = reorder_threshold(n, u)
    a = check_real("A", A, nonneg=True)
    b = check_real("B", B, nonneg=True)
    o = check_real("o_abs", o_abs, nonneg=True)
    return tau * (a + o * b) + 2.0 * u * o


def detectable_leak(n: int, u: float, A: float, B: float, o_abs: float) -> float:
    """2 T (``ratio_difference_bound``): a dependence that moves the exact output by more than
    this is flagged by the rule "difference > T", whatever the rounding (D11)."""
    return 2.0 * ratio_difference_bound(n, u, A, B, o_abs)


# -- the record -------------------------------------------------------------------------------
def _two_evaluations(rec: Derivation) -> None:
    import sympy as sp

    g, A = sp.symbols("gamma A", positive=True)
    # |e_i| <= g A: e_1 - e_2 is linear in (e_1, e_2), so its extremes are at the box corners
    worst = sp.Max(*[sp.Abs(s1 * g * A - s2 * g * A) for s1 in (-1, 1) for s2 in (-1, 1)])
    rec.step(
        r"Two evaluations of the same sum $s$: each error $e_i = \mathrm{fl}_i - s$ has "
        r"$\lvert e_i \rvert \le \gamma A$ ($A = \sum_i \lvert a_i \rvert$); the difference "
        r"$\mathrm{fl}_1 - \mathrm{fl}_2 = e_1 - e_2$ is linear in $(e_1, e_2)$, so its largest "
        "magnitude over the box is at a corner:",
        tex(
            r"\max_{\lvert e_1 \rvert, \lvert e_2 \rvert \le \gamma A}"
            r" \lvert e_1 - e_2 \rvert = @w",
            claim="two evaluations differ by at most 2 gamma A, attained at e_1 = -e_2 = gamma A",
            w=sp.simplify(worst),
        ),
    )
    rec.prove(
        "two evaluations differ by at most 2 gamma A, attained at e_1 = -e_2 = gamma A",
        lambda: sp.simplify(worst - 2 * g * A) == 0,
        "corners of the box |e_i| <= gamma A",
    )


def _ratio(rec: Derivation) -> None:
    import sympy as sp

    N, D, d1, d2 = sp.symbols("N D d_1 d_2", real=True)
    o = N / D
    # o_i = (N + dN_i)/(D + dD_i) (1 + d_i): first-order expansion of o_1 - o_2
    eps = sp.Symbol("epsilon", positive=True)
    dN1, dN2, dD1, dD2 = sp.symbols("dN_1 dN_2 dD_1 dD_2", real=True)
    o1 = (N + eps * dN1) / (D + eps * dD1) * (1 + eps * d1)
    o2 = (N + eps * dN2) / (D + eps * dD2) * (1 + eps * d2)
    first = sp.simplify(sp.diff(o1 - o2, eps).subs(eps, 0))
    expected = (dN1 - dN2) / D - o * (dD1 - dD2) / D + o * (d1 - d2)
    rec.step(
        r"A ratio $o = N / D$ with $N$ and $D$ each evaluated twice (errors $\delta N_i$, "
        r"$\delta D_i$) and one division each (relative error $\delta_i$): to first order",
        tex(
            r"o_1 - o_2 = @e + O(\varepsilon^2) \qquad"
            r" (\delta N_i, \delta D_i, \delta_i = O(\varepsilon))",
            claim="first-order difference of two evaluations of N/D",
            e=expected,
        ),
    )
    rec.prove(
        "first-order difference of two evaluations of N/D",
        lambda: sp.simplify(first - expected) == 0,
        "derivative in the perturbation size at 0",
    )
    rec.step(
        r"With $\lvert \delta N_1 - \delta N_2 \rvert \le \tau \sum_s \lvert w_s v_s \rvert$, "
        r"$\lvert \delta D_1 - \delta D_2 \rvert \le \tau \sum_s \lvert w_s \rvert$ and "
        r"$\lvert \delta_i \rvert \le u$: $\lvert o_1 - o_2 \rvert \le \tau (A + \lvert o "
        r"\rvert B) + 2 u \lvert o \rvert$ with $A = \sum_s \lvert W_s v_s \rvert$, "
        r"$B = \sum_s \lvert W_s \rvert$, $W_s = w_s / D$."
    )


def _decision(rec: Derivation, detection_factor) -> None:
    import sympy as sp

    T, l, m = sp.symbols("T l m", nonnegative=True)
    r = sp.Symbol("r", real=True)  # the rounding part of the measured difference, |r| <= T
    rec.step(
        r"Decision rule: the measured difference is $m = \lvert l + r \rvert$ with $l$ the true "
        r"(exact) change and $\lvert r \rvert \le T$; flag a leak when $m > T$.",
        sp.Eq(m, sp.Abs(l + r)),
    )
    no_false_alarm = sp.Max(*[sp.Abs(0 + s * T) for s in (-1, 1)])
    rec.prove(
        "no false alarm: l = 0 gives m <= T",
        lambda: sp.simplify(no_false_alarm - T) == 0,
        "given |r| <= T; the T of step 3 bounds the rounding part to first order in u",
    )
    # the smallest measurement of a true change l is l - T (r = -T); l > 2T gives m > T
    h = sp.Symbol("h", positive=True)
    smallest = (l - T).subs(l, detection_factor * T + h)
    rec.prove(
        f"detection: every true change l > {detection_factor}T gives m > T",
        lambda: sp.simplify(smallest - T).is_positive is True,
        "m >= l - |r| >= l - T, given |r| <= T (first order in u, step 3)",
    )


def _fold(seq: list[Fraction], bits: int, emin: int) -> Fraction:
    """Left-to-right sum with every addition rounded (exact emulation)."""
    s = Fraction(0)
    for t in seq:
        s = round_to_bits(s + t, bits, emin)
    return s


def _pairwise(seq: list[Fraction], bits: int, emin: int) -> Fraction:
    """Pairwise (tree) sum with every addition rounded (exact emulation)."""
    if len(seq) == 1:
        return seq[0]
    h = len(seq) // 2
    return round_to_bits(
        _pairwise(seq[:h], bits, emin) + _pairwise(seq[h:], bits, emin), bits, emin
    )


def _instances(rec: Derivation, reorder_factor) -> list[list]:
    """Exact emulation of small floating formats: random terms summed left to right, right to
    left and pairwise, every rounding done exactly; the two-evaluation bound must hold on every
    instance, and the largest observed ratio must be a sizeable fraction of it."""
    import random

    rng = random.Random(11)
    rows = []
    for fmt, (bits, emin) in _EMULATED.items():
        u = Fraction(1, 2**bits)
        worst, ok = Fraction(0), True
        for _ in range(400):
            n = rng.randint(2, 24)
            terms = [
                round_to_bits(
                    Fraction(rng.uniform(-1, 1)) * Fraction(2) ** rng.randint(-3, 3), bits, emin
                )
                for _ in range(n)
            ]
            A = sum(abs(t) for t in terms)
            if A == 0:
                continue
            evals = [
                _fold(terms, bits, emin),
                _fold(terms[::-1], bits, emin),
                _pairwise(terms, bits, emin),
            ]
            bound = Fraction(reorder_factor) * (n - 1) * u / (1 - (n - 1) * u) * A
            diff = max(abs(a - b) for a in evals for b in evals)
            ok = ok and diff <= bound
            worst = max(worst, diff / bound)
        rows.append([fmt, float(u), round(float(worst), 4), ok])
    rec.verify(
        "two evaluations (left, right, pairwise) differ by at most 2 gamma_{n-1} sum|a_i|",
        lambda: all(r[3] for r in rows),
        f"{len(_EMULATED)} formats emulated exactly, 400 random sums of 2..24 terms each",
    )
    rec.verify(
        "the bound is not vacuous: the largest observed difference is over 1 % of it",
        lambda: all(r[2] > 0.01 for r in rows),
        "largest |fl_1 - fl_2| / (2 gamma_{n-1} sum|a_i|) per format in the table",
    )
    return rows


def _tau_cell(n: int, dtype: str) -> str:
    u = unit_roundoff(dtype)
    return f"{reorder_threshold(n, u):.3g}" if (n - 1) * u < 1 else "none ((n-1) u >= 1)"


def derive(*, reorder_factor=2, detection_factor=2) -> Derivation:
    """Build the D11 record (statement, steps, claims, tables).

    Keyword overrides inject a *wrong* statement so tests can show the record then fails:
    ``reorder_factor`` (the 2 of tau = 2 gamma_{n-1}, checked on the emulated instances) and
    ``detection_factor`` (the 2 of "l > 2T is flagged").
    """
    import sympy as sp

    rec = Derivation("D11", "Dependence without a kernel: reordered sums and the leak rule")
    tau, l, T = sp.symbols("tau l T", nonnegative=True)
    A, B = sp.symbols("A B", nonnegative=True)
    o = sp.Abs(sp.Symbol("o", real=True))
    # conditions and the decision are hand-written around sympy slots (derivations._latex)
    rec.statement = {
        "threshold": tex(
            r"@t \qquad \Bigl(A = \sum_s \lvert W_s v_s \rvert,\ B = \sum_s \lvert W_s \rvert,"
            r"\ W_s = \frac{w_s}{D}\Bigr)",
            claim="first-order difference of two evaluations of N/D",
            t=sp.Eq(T, tau * (A + o * B) + 2 * sp.Symbol("u") * o),
        ),
        "reorder": tex(
            r"@t \qquad ((n - 1) u < 1)",
            claim="two evaluations differ by at most 2 gamma A, attained at e_1 = -e_2 = gamma A",
            t=sp.Eq(tau, 2 * sp.Symbol("gamma_{n-1}")),
        ),
        "detection": tex(
            r"@h \Rightarrow m > T \qquad (m = \lvert l + r \rvert,\ \lvert r \rvert \le T)",
            claim=f"detection: every true change l > {detection_factor}T gives m > T",
            h=l > sp.nsimplify(detection_factor) * T,
        ),
    }
    rec.cite(
        "any evaluation order of an n-term sum has error <= gamma_{n-1} sum |a_i|",
        "Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed. 2002, eq. (4.4) and "
        "Section 4.2 (every summation tree)",
    )
    _two_evaluations(rec)
    _ratio(rec)
    _decision(rec, detection_factor)
    rows = _instances(rec, reorder_factor)
    rec.tables["emulated"] = (["format", "u", "max observed / bound", "bound holds"], rows)
    rec.tables["thresholds"] = (
        ["dtype", "u"] + [f"tau at n = {n}" for n in TABLE_TERMS],
        [[dt, unit_roundoff(dt)] + [_tau_cell(n, dt) for n in TABLE_TERMS] for dt in TABLE_DTYPES],
    )
    rec.step(
        r"The thresholds per dtype (table): an output's leak threshold is "
        r"$\tau (A + \lvert o \rvert B) + 2 u \lvert o \rvert$ in units of its own weights and "
        "values, so a leak is stated relative to what the row computes, never to the kernel."
    )
    rec.exports = ["reorder_threshold", "ratio_difference_bound", "detectable_leak"]
    return rec


if __name__ == "__main__":
    main_for(derive)

"""D6. Shift invariance and stabilization.

Results derived here:

* softmax(x + a*1) = softmax(x) for every finite a (proved for a symbolic n-vector), so
  max-subtraction is exact for exp.
* The truncated kernel kappa_N(x) = sum_{n<=N} x^n/n! is *not* shift-invariant for N >= 1: the
  coefficient of x^(N-1) in kappa_N(x+a) - kappa_N(x) is a/(N-1)! != 0, so kappa_N(x+a) is not a
  constant multiple of kappa_N(x), and two-key weights change under a shift except on a proper
  algebraic subset of score pairs (proved for symbolic N; exact counterexamples for N <= 6).
* A masked key must get exactly zero weight whatever the other scores. An additive finite
  sentinel -M does not do that: for exp the masked weight is e^{-M}/(e^{-M} + S) > 0, and it
  tends to 1 when the visible scores fall below the sentinel; for kappa_N (N >= 1)
  |kappa_N(-M)| -> oo, so the masked key takes almost *all* the weight as M grows (for even N a
  huge positive weight; for odd N a huge negative kernel value that still yields weight -> 1).
  An additive -inf works for exp (e^{-inf} = 0) but gives kappa_N(-inf) = +-inf and NaN weights.

Numeric exports (plain Python; exact ``Fraction`` arithmetic for kappa_N, mpmath for exp):
``taylor_kernel_value``, ``kernel_weights``, ``taylor_shift_gap``, ``sentinel_leak_weight``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

from derivations._latex import tex
from derivations._record import Derivation, main_for
from derivations._validate import check_exact, check_order
from derivations.feature_maps import taylor_coefficients

#: orders checked exactly on instances (the general statements are proved for symbolic N)
INSTANCE_ORDERS = (1, 2, 3, 4, 5, 6)


# -- input validation -------------------------------------------------------------------------
def _scores(name: str, scores: object) -> list[Fraction]:
    if isinstance(scores, (str, bytes)) or not isinstance(scores, Sequence):
        raise TypeError(f"{name}: expected a sequence of finite reals, got {type(scores).__name__}")
    return [check_exact(f"{name}[{i}]", s) for i, s in enumerate(scores)]


# -- numeric exports --------------------------------------------------------------------------
def taylor_kernel_value(order: int, x: int | float | Fraction) -> Fraction:
    """kappa_N(x) = sum_{n<=N} x^n/n! evaluated exactly (D1, D6).

    Args:
        order: N >= 0.
        x: a finite real score (a float is taken at its exact binary value).

    Returns:
        The exact value as a ``Fraction``.

    Raises:
        TypeError, ValueError: ``order`` not a non-negative int; ``x`` not a finite real.
    """
    check_order("order", order)
    xv = check_exact("x", x)
    value, power = Fraction(0), Fraction(1)
    for coeff in taylor_coefficients(order):
        value += coeff * power
        power *= xv
    return value


def kernel_weights(order: int | None, scores: Sequence[float]) -> list:
    """Normalized weights kappa(x_s) / sum_j kappa(x_j) of one row of scores.

    Args:
        order: N for the Taylor kernel kappa_N (exact ``Fraction`` weights), or ``None`` for
            exp (softmax; ``mpmath.mpf`` weights at 60 digits).
        scores: the row's scores (finite reals), length >= 1.

    Raises:
        TypeError, ValueError: bad ``order`` or ``scores``; ``ZeroDivisionError``-free:
        a vanishing kappa_N denominator (odd N) raises ``ValueError``.
    """
    check_order("order", order, allow_none=True)
    xs = _scores("scores", scores)
    if not xs:
        raise ValueError("scores: expected at least one score, got an empty sequence")
    if order is None:
        import mpmath

        with mpmath.workdps(60):
            vals = [mpmath.exp(mpmath.mpf(x.numerator) / x.denominator) for x in xs]
            total = mpmath.fsum(vals)
            return [v / total for v in vals]
    vals = [taylor_kernel_value(order, x) for x in xs]
    total = sum(vals)
    if total == 0:
        raise ValueError(
            f"scores: the kappa_{order} denominator vanishes exactly for scores {list(scores)!r} "
            "(odd orders can cancel, D4)"
        )
    return [v / total for v in vals]


def taylor_shift_gap(
    order: int, scores: Sequence[float], shift: int | float | Fraction
) -> Fraction:
    """max_s |w_s(x + a*1) - w_s(x)| for the kappa_N weights of one row, exactly.

    Zero for every input when kappa is exp (D6); for kappa_N with N >= 1 it is positive except
    on a proper algebraic subset of scores (derived in ``derive``). ``verify`` uses it to pick
    inputs whose shift effect exceeds the rounding bound before asserting non-invariance.

    Args:
        order: N >= 0. scores: finite reals (length >= 1). shift: the finite shift a.

    Raises:
        TypeError, ValueError: bad arguments, or a vanishing denominator before or after the shift.
    """
    a = check_exact("shift", shift)
    xs = _scores("scores", scores)
    before = kernel_weights(order, xs)
    after = kernel_weights(order, [x + a for x in xs])
    return max(abs(p - q) for p, q in zip(after, before))


def sentinel_leak_weight(
    order: int | None, sentinel: int | float | Fraction, scores: Sequence[float]
) -> float:
    """Weight a masked key receives when it is masked by an *additive finite sentinel*.

    The masked key's score is replaced by ``sentinel`` (e.g. -1e4 or the dtype's lowest finite
    value) and the visible keys keep ``scores``; the returned value is the masked key's
    normalized weight kappa(sentinel) / (kappa(sentinel) + sum_s kappa(scores_s)). A correct
    mask gives exactly 0; D6 derives that every finite sentinel gives a non-zero
    weight (for exp: > 0 always, -> 1 as the visible scores drop below the sentinel; for
    kappa_N, N >= 1: -> 1 as the sentinel -> -oo).

    Args:
        order: N for kappa_N (computed exactly with fractions), or ``None`` for exp (mpmath at
            60 digits; the exact value is > 0 even where the float result underflows to 0.0).
        sentinel: finite real used as the masked score.
        scores: finite reals, the visible keys' scores (may be empty).

    Returns:
        The weight as a Python float (nearest double of the exact value).

    Raises:
        TypeError, ValueError: bad arguments, or a kappa_N denominator that vanishes exactly.
    """
    s = check_exact("sentinel", sentinel)
    xs = _scores("scores", scores)
    weights = kernel_weights(order, [s, *xs])
    w = weights[0]
    return float(w) if isinstance(w, Fraction) else float(w)


# -- derivation -------------------------------------------------------------------------------
def _kappa_poly(order: int, x: Any) -> Any:
    import sympy as sp

    return sum(
        sp.Rational(c.numerator, c.denominator) * x**n
        for n, c in enumerate(taylor_coefficients(order))
    )


# -- the record, one function per claim group ----------------------------------------------------
def _claim_softmax_shift(rec: Derivation, kern: Callable[[Any], Any]) -> None:
    """A. softmax(x + a 1) = softmax(x) for a symbolic row (kern = exp unless injected)."""
    import sympy as sp
    from sympy.simplify.simplify import factor_sum

    n = sp.Symbol("n", integer=True, positive=True)
    i, j = sp.symbols("i j", integer=True, positive=True)
    a = sp.Symbol("a", real=True)
    x = sp.IndexedBase("x", real=True)

    def factor_sums(e: Any) -> Any:
        return e.replace(
            lambda z: isinstance(z, sp.Sum),
            lambda z: factor_sum(
                sp.Sum(sp.factor(sp.expand(z.function, power_exp=True)), *z.limits)
            ),
        )

    w_shift = kern(x[i] + a) / sp.Sum(kern(x[j] + a), (j, 1, n))
    w = kern(x[i]) / sp.Sum(kern(x[j]), (j, 1, n))
    rec.statement["softmax shift invariance"] = tex(
        r"@e \qquad (a \in \mathbb{R},\ n \ge 1,\ 1 \le i \le n)",
        claim="softmax(x + a 1) = softmax(x) for symbolic n, every index i and every real a",
        e=sp.Eq(w_shift, w),
    )
    shift_claim = "softmax(x + a 1) = softmax(x) for symbolic n, every index i and every real a"
    rec.step(
        "Softmax weight of key $i$ in a row of $n$ scores, shifted by $a$:",
        tex(r"\operatorname{softmax}(x + a \mathbf{1})_i = @w", claim=shift_claim, w=w_shift),
    )
    rec.step(
        r"$e^{x_j + a} = e^a e^{x_j}$; the finite sum is linear, so $e^a$ factors out of the "
        "denominator and cancels with the numerator:",
        tex(
            r"\operatorname{softmax}(x + a \mathbf{1})_i = @w",
            claim=shift_claim,
            w=factor_sums(sp.expand(w_shift, power_exp=True)),
        ),
    )
    rec.prove(
        "softmax(x + a 1) = softmax(x) for symbolic n, every index i and every real a",
        lambda: sp.simplify(factor_sums(sp.expand(w_shift, power_exp=True)) - w) == 0,
        "symbolic n (sympy Sum), symbolic a",
    )
    rec.step(
        r"Hence subtracting $m = \max_s x_s$ (any common constant) before $\exp$ is exact in "
        "real arithmetic; in floating point it only changes rounding (D10)."
    )


def _claim_kappa_not_shift_invariant(rec: Derivation) -> None:
    """B. kappa_N(x + a) is no constant multiple of kappa_N(x); two-key weights change."""
    import sympy as sp

    N = sp.Symbol("N", integer=True, positive=True)
    anz = sp.Symbol("a", real=True, nonzero=True)
    # binomial theorem: the x^k coefficient of (x+a)^m/m! is C(m, k) a^(m-k) / m!
    lead = sp.binomial(N, N) / sp.factorial(N)
    sub = (
        sp.binomial(N - 1, N - 1) / sp.factorial(N - 1)
        + sp.binomial(N, N - 1) * anz / sp.factorial(N)
        - 1 / sp.factorial(N - 1)
    )
    gap_claim = "[x^(N-1)] (kappa_N(x+a) - kappa_N(x)) = a/(N-1)! != 0 for a != 0 (not a multiple)"
    # [x^k] (coefficient extraction) has no sympy object: a template (derivations._latex).
    gap = r"[x^{N-1}]\bigl(\kappa_N(x + a) - \kappa_N(x)\bigr) = @c"
    rec.statement["kappa_N shift"] = tex(
        gap + r" \ne 0 \qquad (N \ge 1,\ a \ne 0)",
        claim=gap_claim,
        c=anz / sp.factorial(N - 1),
    )
    rec.step(
        r"If $\kappa_N(x + a) = c\, \kappa_N(x)$ for all $x$, the $x^N$ coefficients give "
        r"$c = 1$: only $(x + a)^N / N!$ contributes to $x^N$ in $\kappa_N(x + a)$, with "
        "coefficient",
        tex(
            r"[x^{N}]\, \kappa_N(x + a) = @c",
            claim="x^N coefficient of kappa_N(x+a) is 1/N! (forces c = 1)",
            c=lead,
        ),
    )
    rec.prove(
        "x^N coefficient of kappa_N(x+a) is 1/N! (forces c = 1)",
        lambda: sp.simplify(lead - 1 / sp.factorial(N)) == 0,
        "symbolic N >= 1",
    )
    rec.step(
        r"The $x^{N-1}$ coefficient of $\kappa_N(x + a) - \kappa_N(x)$ gets "
        r"$\binom{N-1}{N-1} / (N-1)!$ from $(x + a)^{N-1} / (N-1)!$, $\binom{N}{N-1}\, a / N!$ "
        r"from $(x + a)^N / N!$, minus $1 / (N-1)!$ from $\kappa_N(x)$:",
        tex(gap, claim=gap_claim, c=sp.combsimp(sub)),
    )
    rec.prove(
        "[x^(N-1)] (kappa_N(x+a) - kappa_N(x)) = a/(N-1)! != 0 for a != 0 (not a multiple)",
        lambda: (
            sp.simplify(sp.combsimp(sub) - anz / sp.factorial(N - 1)) == 0
            and sp.combsimp(sub).is_zero is False
        ),
        "symbolic N >= 1, symbolic a != 0",
    )
    # two-key weights: P(x1, x2) = kappa(x1+a) kappa(x2) - kappa(x2+a) kappa(x1)
    coef_p = (1 / sp.factorial(N - 1) + anz / sp.factorial(N - 1)) / sp.factorial(N) - (
        1 / sp.factorial(N)
    ) * (1 / sp.factorial(N - 1))
    rec.step(
        r"Two keys with scores $x_1, x_2$: the shifted and unshifted weights agree iff "
        r"$P = \kappa_N(x_1 + a)\, \kappa_N(x_2) - \kappa_N(x_2 + a)\, \kappa_N(x_1) = 0$. The "
        r"coefficient of $x_1^{N-1} x_2^N$ in $P$ is "
        r"$\frac{1 + a}{(N-1)!\, N!} - \frac{1}{N!\, (N-1)!}$:",
        tex(
            r"[x_1^{N-1} x_2^{N}]\, P = @c",
            claim="P is a non-zero polynomial (coefficient a/((N-1)! N!)), so kappa_N weights "
            "change under a shift except on a proper algebraic subset of score pairs",
            c=sp.simplify(coef_p),
        ),
    )
    rec.prove(
        "P is a non-zero polynomial (coefficient a/((N-1)! N!)), so kappa_N weights change "
        "under a shift except on a proper algebraic subset of score pairs",
        lambda: (
            sp.simplify(coef_p - anz / (sp.factorial(N - 1) * sp.factorial(N))) == 0
            and sp.simplify(coef_p).is_zero is False
        ),
        "symbolic N >= 1; a row with more keys reduces to the ratio of two weights",
    )


def _claim_shift_instances(rec: Derivation) -> None:
    """kappa_N(x+a) - kappa_N(x) on instances, and exact two-key counterexamples (table)."""
    import sympy as sp

    a = sp.Symbol("a", real=True)
    xs = sp.Symbol("x", real=True)

    def poly_instances() -> bool:
        for order in INSTANCE_ORDERS:
            diff = sp.Poly(sp.expand(_kappa_poly(order, xs + a) - _kappa_poly(order, xs)), xs)
            if diff.degree() != order - 1:
                return False
            if sp.simplify(diff.LC() - a / sp.factorial(order - 1)) != 0:
                return False
        return True

    rec.verify(
        "instances: kappa_N(x+a) - kappa_N(x) has degree N-1 and leading coefficient a/(N-1)!",
        poly_instances,
        f"N in {INSTANCE_ORDERS}, symbolic a (exact polynomial expansion)",
    )
    rows: list[list[Any]] = []

    def counterexamples() -> bool:
        ok = True
        for order in INSTANCE_ORDERS:
            before = kernel_weights(order, [0, 1])
            after = kernel_weights(order, [1, 2])
            rows.append([order, "(0, 1)", 1, str(before[0]), str(after[0])])
            ok = ok and before != after
        return ok

    rec.verify(
        "exact counterexample: scores (0, 1) shifted by a = 1 change the kappa_N weights",
        counterexamples,
        f"N in {INSTANCE_ORDERS}, exact rationals; e.g. N=2: 2/7 -> 1/3",
    )
    rec.tables["kappa_N shift counterexample"] = (
        ["N", "scores", "shift a", "w_0 before", "w_0 after"],
        rows,
    )


def _claim_injected_shift_invariance(rec: Derivation, order: int) -> None:
    """(Wrong statement, injected by the tests) kappa_N weights are shift-invariant."""
    import sympy as sp

    a = sp.Symbol("a", real=True)
    y1, y2 = sp.symbols("y1 y2", real=True)

    def wrong() -> Any:
        k1, k2 = _kappa_poly(order, y1), _kappa_poly(order, y2)
        k1a, k2a = _kappa_poly(order, y1 + a), _kappa_poly(order, y2 + a)
        return sp.simplify(k1a / (k1a + k2a) - k1 / (k1 + k2)) == 0

    rec.prove(
        f"(injected) kappa_{order} weights are shift-invariant", wrong, "symbolic two-key row"
    )


def _claim_exp_sentinel(rec: Derivation, claim_sentinel_masks: bool) -> None:
    """C. An additive finite sentinel leaks weight under exp (-> 1 for low visible scores)."""
    import sympy as sp

    M = sp.Symbol("M", positive=True)
    S = sp.Symbol("S", positive=True)  # sum of the visible kernel values (exp: > 0)
    b = sp.Symbol("b", positive=True)
    nv = sp.Symbol("n_v", integer=True, positive=True)
    leak = sp.exp(-M) / (sp.exp(-M) + S)
    leak_claim = "exp: the masked key's weight is > 0 for every finite sentinel -M and every S > 0"
    rec.statement["exp sentinel leak"] = tex(
        r"@w > 0 \qquad \Bigl(x_{s_0} = -M,\ S = \sum_{s \ne s_0} e^{x_s} > 0,\ M > 0\Bigr)",
        claim=leak_claim,
        w=sp.Eq(sp.Symbol("w_masked"), leak),
    )
    rec.step(
        r"Masking by an additive sentinel $-M$ gives the masked key the softmax weight below, "
        r"with $S > 0$ the sum of the visible keys' $e^{x_s}$:",
        sp.Eq(sp.Symbol("w_masked"), leak),
    )
    rec.prove(
        "exp: the masked key's weight is > 0 for every finite sentinel -M and every S > 0",
        lambda: leak.is_positive is True,
        "symbolic M > 0, S > 0",
    )
    leak_low = sp.exp(-M) / (sp.exp(-M) + nv * sp.exp(-M - b))
    rec.step(
        r"'Whatever the other scores': if the $n_v$ visible scores all equal $-M - b$, the "
        "masked weight is",
        sp.Eq(sp.Symbol("w_masked"), sp.simplify(leak_low)),
    )
    rec.prove(
        "exp: with visible scores -M - b the masked weight is 1/(1 + n_v e^{-b}) -> 1 (b -> oo)",
        lambda: (
            sp.simplify(leak_low - 1 / (1 + nv * sp.exp(-b))) == 0
            and sp.limit(1 / (1 + nv * sp.exp(-b)), b, sp.oo) == 1
        ),
        "symbolic M, b > 0, n_v >= 1",
    )
    if claim_sentinel_masks:
        rec.prove(
            "(injected) a finite sentinel gives the masked key exactly zero weight (exp)",
            lambda: sp.simplify(leak) == 0,
            "symbolic M, S",
        )


def _claim_kappa_sentinel(rec: Derivation) -> None:
    """|kappa_N(-M)| -> oo, so the masked key takes weight -> 1 as the sentinel -> -oo."""
    import sympy as sp

    N = sp.Symbol("N", integer=True, positive=True)
    M = sp.Symbol("M", positive=True)
    lower = M ** (N - 1) * (M / sp.factorial(N) - sp.E)
    rec.step(
        r"$\kappa_N$ at a sentinel $-M$ ($N \ge 1$, $M \ge 1$): "
        r"$\lvert \kappa_N(-M) \rvert \ge M^N / N! - \sum_{n<N} M^n / n!"
        r" \ge M^N / N! - M^{N-1} \sum_{n<N} 1 / n!$, and $\sum_{n \ge 0} 1 / n! = e$:",
        sp.Ge(sp.Abs(sp.Function("kappa_N")(-M)), lower),
    )
    nn = sp.Symbol("n", integer=True, nonnegative=True)
    rec.prove(
        "|kappa_N(-M)| >= M^(N-1)(M/N! - e) -> oo as M -> oo (any N >= 1)",
        lambda: (
            sp.summation(1 / sp.factorial(nn), (nn, 0, sp.oo)) == sp.E
            and sp.limit(lower, M, sp.oo) is sp.oo
        ),
        "symbolic N >= 1",
    )
    Kv = sp.Symbol("K", real=True, nonzero=True)  # kappa_N(-M)
    Sr = sp.Symbol("S", real=True)  # sum of visible kappa_N values (any sign for odd N)
    wk = Kv / (Kv + Sr)
    rec.step(
        r"The masked key's $\kappa_N$ weight is $K / (K + S)$ with $K = \kappa_N(-M)$; as "
        r"$\lvert K \rvert \to \infty$ (either sign) for fixed visible scores:",
        sp.Eq(sp.Limit(wk, Kv, sp.oo), sp.limit(wk, Kv, sp.oo)),
    )
    rec.prove(
        "kappa_N, N >= 1: the masked weight -> 1 as the sentinel -> -oo (K -> +oo or -oo)",
        lambda: sp.limit(wk, Kv, sp.oo) == 1 and sp.limit(wk, Kv, -sp.oo) == 1,
        "symbolic K, S",
    )


def _claim_sentinel_instances(rec: Derivation) -> None:
    """Finite sentinels on instances (table), the odd-N roots, and float32's lowest value."""
    import sympy as sp

    xs = sp.Symbol("x", real=True)
    leak_rows: list[list[Any]] = []

    def sentinel_instances() -> bool:
        ok = True
        for order in INSTANCE_ORDERS:
            for sentinel in (-(10**4), -(10**9)):
                kv = taylor_kernel_value(order, sentinel)
                wv = sentinel_leak_weight(order, sentinel, [0, 0])
                leak_rows.append([order, sentinel, f"{float(kv):.6g}", f"{wv:.12g}"])
                ok = ok and kv != 0 and wv != 0.0
            if order % 2 == 0:  # even order: kappa_N has no real root (positive everywhere)
                poly = sp.Poly(_kappa_poly(order, xs), xs)
                ok = ok and not sp.real_roots(poly) and poly.eval(0) > 0
        return ok

    rec.verify(
        "instances: finite sentinels -1e4, -1e9 give kappa_N(-M) != 0 and a non-zero masked "
        "weight (even N: kappa_N > 0 everywhere, so a huge positive weight)",
        sentinel_instances,
        f"N in {INSTANCE_ORDERS}, visible scores (0, 0), exact rationals; "
        "even-N positivity by exact real-root isolation",
    )

    def odd_roots() -> bool:
        ok = True
        for order in (1, 3, 5):
            roots = sp.real_roots(sp.Poly(_kappa_poly(order, xs), xs))
            ok = ok and len(roots) == 1 and bool(roots[0] < 0) and bool(roots[0] > -10)
        return ok

    rec.verify(
        "odd N: kappa_N has exactly one real root r_N (negative), so kappa_N(-M) = 0 only at "
        "M = -r_N (e.g. N = 1, M = 1); every other finite sentinel leaks",
        odd_roots,
        "N in (1, 3, 5), exact real-root isolation; |r_N| < 10, far from -1e4",
    )
    rec.tables["finite sentinel leak"] = (
        ["N", "sentinel", "kappa_N(sentinel)", "masked weight (visible scores 0, 0)"],
        leak_rows,
    )
    from derivations.rounding import largest_finite

    lowest = -Fraction(largest_finite("float32"))
    k2 = taylor_kernel_value(2, lowest)
    rec.step(
        rf"In float32 the lowest finite value ${_sci(lowest)}$ is itself a sentinel: "
        rf"$\kappa_2({_sci(lowest)}) \approx {_sci(k2)}$ "
        + ("overflows to inf" if k2 > Fraction(largest_finite("float32")) else "is finite")
        + " and the weights become inf/inf = NaN."
    )


def _sci(x) -> str:
    """``x`` to two significant digits in LaTeX: ``-3.4 \\cdot 10^{38}``."""
    mantissa, exponent = f"{float(x):.1e}".split("e")
    return rf"{mantissa} \cdot 10^{{{int(exponent)}}}"


def _claim_negative_infinity(rec: Derivation) -> None:
    """An additive -inf masks exp exactly but sends kappa_N to +-inf (NaN weights)."""
    import sympy as sp

    xs = sp.Symbol("x", real=True)

    def neg_inf_limits() -> bool:
        return (
            all(
                sp.limit(_kappa_poly(order, xs), xs, -sp.oo)
                == (sp.oo if order % 2 == 0 else -sp.oo)
                for order in INSTANCE_ORDERS
            )
            and sp.limit(sp.exp(xs), xs, -sp.oo) == 0
        )

    rec.verify(
        "additive -inf: e^{-inf} = 0 (exact for exp) but kappa_N(-inf) = (-1)^N inf (NaN weights)",
        neg_inf_limits,
        f"N in {INSTANCE_ORDERS}",
    )


def _claim_select_mask(rec: Derivation) -> None:
    """Correct masking selects (where(mask, kappa, 0)), never adds."""
    import sympy as sp

    x1, x2, x3 = sp.symbols("x1 x2 x3", real=True)
    mask = (1, 1, 0)

    def select_mask() -> bool:
        ok = True
        for kernel in [sp.exp] + [lambda t, o=o: _kappa_poly(o, t) for o in (2, 3)]:
            vals = [kernel(t) if m else sp.Integer(0) for t, m in zip((x1, x2, x3), mask)]
            ws = [v / sum(vals) for v in vals]
            ok = ok and ws[2] == 0 and all(sp.diff(wi, x3) == 0 for wi in ws)
        return ok

    rec.step(
        r"A correct mask selects: $w_s = m_s\, \kappa(x_s) / \sum_j m_j\, \kappa(x_j)$ with "
        r"$m_j \in \lbrace 0, 1 \rbrace$ (`where(mask, kappa, 0)`, never a multiplication of a "
        "possibly infinite value by 0)."
    )
    rec.verify(
        "selection mask: the masked weight is exactly 0 and no weight depends on the masked score",
        select_mask,
        "3 keys, mask (1, 1, 0), kernels exp, kappa_2, kappa_3",
    )


def derive(
    *,
    claim_shift_invariant_order: int | None = None,
    claim_sentinel_masks: bool = False,
    softmax_kernel: Callable[[Any], Any] | None = None,
) -> Derivation:
    """Build the D6 record.

    Keyword overrides inject a *wrong* statement so tests can show the record then fails:
        claim_shift_invariant_order: also claim kappa_N (this N) is shift-invariant.
        claim_sentinel_masks: also claim an additive finite sentinel gives zero weight (exp).
        softmax_kernel: replace exp in the shift-invariance proof (e.g. ``lambda x: x**2``).
    """
    import sympy as sp

    rec = Derivation("D6", "Shift invariance and stabilization")
    # A. softmax is shift invariant
    _claim_softmax_shift(rec, softmax_kernel if softmax_kernel is not None else sp.exp)
    # B. kappa_N is not shift invariant
    _claim_kappa_not_shift_invariant(rec)
    _claim_shift_instances(rec)
    if claim_shift_invariant_order is not None:
        _claim_injected_shift_invariance(rec, claim_shift_invariant_order)
    # C. masking: a finite sentinel is not a mask
    _claim_exp_sentinel(rec, claim_sentinel_masks)
    _claim_kappa_sentinel(rec)
    _claim_sentinel_instances(rec)
    _claim_negative_infinity(rec)
    _claim_select_mask(rec)
    rec.exports = [
        "taylor_kernel_value",
        "kernel_weights",
        "taylor_shift_gap",
        "sentinel_leak_weight",
    ]
    return rec


if __name__ == "__main__":
    main_for(derive)
